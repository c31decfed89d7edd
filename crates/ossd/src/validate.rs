//! `ossd validate`: block-level scenarios replayed on ossd and judged against another
//! simulator's figures kept in the same file (`validation/mqsim.toml`, issue 22).
//!
//! A validation file names its reference (simulator, commit, configuration) and lists
//! scenarios. Each scenario is a set of `ossd run --set` pairs and the reference's figures
//! (IOPS, mean response time); a figure agrees when ossd's lies within `tolerance_percent` of
//! it. A scenario that disagrees carries a `why`: what differs between the two models.

use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context, Result};
use serde::{Deserialize, Serialize};

use ossd::settings;

/// A validation file.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Validation {
    /// Short name, shown in the report.
    pub name: String,
    /// Where the reference figures come from: simulator, commit, configuration files.
    pub source: String,
    /// A figure agrees when ossd's is within this many percent of the reference's.
    pub tolerance_percent: f64,
    /// The scenarios, run in file order.
    pub scenarios: Vec<Scenario>,
}

/// One scenario: the run and the reference's figures.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Short name; `--only` matches its start.
    pub name: String,
    /// Run settings, as `ossd run --set KEY=VALUE` takes them.
    pub set: Vec<String>,
    /// The reference's figures.
    pub reference: Figures,
    /// Why ossd differs, shown beside a figure outside the tolerance.
    #[serde(default)]
    pub why: Option<String>,
}

/// Figures of a scenario; a figure left out is not compared.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Figures {
    /// Requests completed per virtual second.
    #[serde(default)]
    pub iops: Option<f64>,
    /// Mean response time over reads and writes, in microseconds.
    #[serde(default)]
    pub mean_us: Option<f64>,
    /// Largest response time, in microseconds (shown, not judged).
    #[serde(default)]
    pub max_us: Option<f64>,
}

/// One figure compared.
#[derive(Clone, Debug, Serialize)]
pub struct Comparison {
    /// `iops` or `mean_us`.
    pub figure: &'static str,
    /// The reference simulator's figure.
    pub reference: f64,
    /// ossd's figure.
    pub ossd: f64,
    /// ossd's figure relative to the reference, in percent (+ is higher).
    pub difference_percent: f64,
    /// Whether the difference is within the tolerance.
    pub agrees: bool,
}

/// A scenario's result.
#[derive(Clone, Debug, Serialize)]
pub struct ScenarioResult {
    /// The scenario's name.
    pub name: String,
    /// Its run settings.
    pub set: Vec<String>,
    /// ossd's figures.
    pub ossd: Figures,
    /// Each figure the reference gives, compared.
    pub comparisons: Vec<Comparison>,
    /// The scenario's explanation, when a figure disagrees.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
    /// The whole run report.
    pub report: lab::RunReport,
}

impl Validation {
    /// Reads and checks a validation file; errors name the file.
    pub fn load(path: &Path) -> Result<Validation> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        let v: Validation =
            toml::from_str(&text).map_err(|e| anyhow!("{}: {}", path.display(), e))?;
        if !(v.tolerance_percent > 0.0 && v.tolerance_percent.is_finite()) {
            bail!(
                "{}: tolerance_percent = {} must be a positive number",
                path.display(),
                v.tolerance_percent
            );
        }
        if v.scenarios.is_empty() {
            bail!("{}: no [[scenarios]]", path.display());
        }
        for s in &v.scenarios {
            let r = &s.reference;
            for (key, val) in [
                ("iops", r.iops),
                ("mean_us", r.mean_us),
                ("max_us", r.max_us),
            ] {
                if let Some(x) = val {
                    if !(x > 0.0 && x.is_finite()) {
                        bail!(
                            "{}: scenario '{}': reference.{key} = {x} must be a positive number",
                            path.display(),
                            s.name
                        );
                    }
                }
            }
            if r.iops.is_none() && r.mean_us.is_none() {
                bail!(
                    "{}: scenario '{}' gives neither reference.iops nor reference.mean_us",
                    path.display(),
                    s.name
                );
            }
            settings::build_text(None, &s.set)
                .with_context(|| format!("{}: scenario '{}'", path.display(), s.name))?;
        }
        Ok(v)
    }
}

/// ossd's figures of a run.
pub fn figures(r: &lab::RunReport) -> Figures {
    let (rd, wr) = (&r.read_latency, &r.write_latency);
    let n = rd.count + wr.count;
    Figures {
        iops: (r.virtual_seconds > 0.0).then(|| r.requests as f64 / r.virtual_seconds),
        mean_us: (n > 0)
            .then(|| (rd.mean_us * rd.count as f64 + wr.mean_us * wr.count as f64) / n as f64),
        max_us: Some(r.max_us),
    }
}

/// Compares ossd's figures with the reference's.
pub fn compare(reference: &Figures, ossd: &Figures, tolerance_percent: f64) -> Vec<Comparison> {
    let mut out = Vec::new();
    for (figure, r, o) in [
        ("iops", reference.iops, ossd.iops),
        ("mean_us", reference.mean_us, ossd.mean_us),
    ] {
        if let (Some(r), Some(o)) = (r, o) {
            let difference_percent = (o - r) / r * 100.0;
            out.push(Comparison {
                figure,
                reference: r,
                ossd: o,
                difference_percent,
                agrees: difference_percent.abs() <= tolerance_percent,
            });
        }
    }
    out
}

/// Runs every scenario of the file (those whose names start with `only`, if given), prints
/// the table and writes the results as JSON to `json` when given.
pub fn run(path: &Path, only: Option<&str>, json: Option<&PathBuf>) -> Result<()> {
    let v = Validation::load(path)?;
    println!("{}: {}", v.name, v.source);
    println!(
        "tolerance: {}% of the reference's figure\n",
        v.tolerance_percent
    );
    let mut results = Vec::new();
    for s in &v.scenarios {
        if only.is_some_and(|o| !s.name.starts_with(o)) {
            continue;
        }
        let cfg =
            settings::build_text(None, &s.set).with_context(|| format!("scenario '{}'", s.name))?;
        eprintln!("running '{}' ...", s.name);
        let report =
            lab::run(&cfg, &mut |_, _, _| {}).map_err(|e| anyhow!("scenario '{}': {e}", s.name))?;
        let ossd = figures(&report);
        let comparisons = compare(&s.reference, &ossd, v.tolerance_percent);
        let agrees = comparisons.iter().all(|c| c.agrees);
        println!("## {}", s.name);
        println!(
            "   ossd run {}",
            s.set
                .iter()
                .map(|x| format!("--set {x}"))
                .collect::<Vec<_>>()
                .join(" ")
        );
        for c in &comparisons {
            println!(
                "   {:<8} reference {:>12.1}  ossd {:>12.1}  {:+7.1}%  {}",
                c.figure,
                c.reference,
                c.ossd,
                c.difference_percent,
                if c.agrees { "within" } else { "OUTSIDE" }
            );
        }
        if let (Some(r), Some(o)) = (s.reference.max_us, ossd.max_us) {
            println!("   max_us   reference {r:>12.1}  ossd {o:>12.1}  (shown, not judged)");
        }
        let why = (!agrees).then(|| s.why.clone()).flatten();
        if let Some(w) = &why {
            println!("   why: {w}");
        }
        println!();
        results.push(ScenarioResult {
            name: s.name.clone(),
            set: s.set.clone(),
            ossd,
            comparisons,
            why,
            report,
        });
    }
    if results.is_empty() {
        bail!("no scenario of {} matches {:?}", path.display(), only);
    }
    if let Some(p) = json {
        let f = std::fs::File::create(p).with_context(|| format!("creating {}", p.display()))?;
        serde_json::to_writer_pretty(f, &results)?;
        println!("results written to {}", p.display());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comparisons_use_the_tolerance_and_skip_missing_figures() {
        let reference = Figures {
            iops: Some(100.0),
            mean_us: Some(200.0),
            max_us: None,
        };
        let ossd = Figures {
            iops: Some(124.0),
            mean_us: Some(140.0),
            max_us: Some(1.0),
        };
        let c = compare(&reference, &ossd, 25.0);
        assert_eq!(c.len(), 2);
        assert!(c[0].agrees);
        assert!(!c[1].agrees);
        assert!((c[1].difference_percent + 30.0).abs() < 1e-9);
        let only_mean = Figures {
            iops: None,
            ..reference
        };
        assert_eq!(compare(&only_mean, &ossd, 25.0).len(), 1);
    }

    #[test]
    fn the_shipped_file_parses_and_bad_figures_are_refused() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../validation/mqsim.toml");
        let v = Validation::load(&path).unwrap();
        assert_eq!(v.scenarios.len(), 3);
        let dir = std::env::temp_dir().join(format!("ossd-validate-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let bad = dir.join("bad.toml");
        let text = std::fs::read_to_string(&path)
            .unwrap()
            .replacen("iops = 37143", "iops = -1", 1);
        std::fs::write(&bad, text).unwrap();
        let e = Validation::load(&bad).unwrap_err().to_string();
        assert!(e.contains("reference.iops") && e.contains("-1"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
