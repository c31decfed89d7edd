//! `ossd reproduce`: every experiment in `experiments/` (or those named), each variant a job,
//! jobs run in parallel over threads with a progress bar each; then the report.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use anyhow::{bail, Context, Result};
use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
use lab::experiment::{run_variant, Experiment, ExperimentResult, VariantResult};

/// What `ossd reproduce` runs and where its report goes.
pub struct Args {
    /// Shrink sizes, counts and the device by this factor (1 = the papers' scale).
    pub scale: f64,
    /// Only experiments whose names start with these (all when empty).
    pub only: Vec<String>,
    /// Parallel jobs (one per experiment variant at a time).
    pub jobs: usize,
    /// Where the report goes.
    pub out: PathBuf,
    /// Where the experiment definitions are.
    pub experiments: PathBuf,
}

/// The experiment definitions in `dir`, in name order, filtered by `only` (exact names or
/// prefixes).
pub fn load_all(dir: &Path, only: &[String]) -> Result<Vec<Experiment>> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("cannot read the experiments directory {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    paths.sort();
    let mut out = Vec::new();
    for p in paths {
        let e = Experiment::load(&p).map_err(anyhow::Error::msg)?;
        if only.is_empty() || only.iter().any(|o| e.name.starts_with(o.as_str())) {
            out.push(e);
        }
    }
    if out.is_empty() {
        bail!("no experiment in {} matches {:?}", dir.display(), only);
    }
    Ok(out)
}

/// `ossd reproduce`: runs, writes the report, prints each claim beside the measurement.
pub fn run(a: Args) -> Result<()> {
    let (results, report) = reproduce(&a, true)?;
    print_verdicts(&results, &report);
    Ok(())
}

/// Runs the experiments `a` names and writes their report into `a.out` (with progress bars
/// on standard error when `bars`); returns the results (`results.json`) and the path of
/// `report.md`. The Python package's `ossd.reproduce` calls this.
pub fn reproduce(a: &Args, bars: bool) -> Result<(Vec<ExperimentResult>, PathBuf)> {
    if !(a.scale > 0.0 && a.scale <= 1.0) {
        bail!("--scale must be in (0, 1], got {}", a.scale);
    }
    let experiments = load_all(&a.experiments, &a.only)?;
    let results = run_all(&experiments, a.scale, a.jobs.max(1), bars)?;
    let report = lab::report::write(&a.out, &results).map_err(anyhow::Error::msg)?;
    Ok((results, report))
}

/// `ossd run --experiment FILE`: one definition, wherever it lives; `seed` replaces its seed.
pub fn run_one(path: &Path, scale: f64, seed: Option<u64>, jobs: usize, out: &Path) -> Result<()> {
    if !(scale > 0.0 && scale <= 1.0) {
        bail!("--scale must be in (0, 1], got {scale}");
    }
    let mut e = Experiment::load(path).map_err(anyhow::Error::msg)?;
    if let Some(s) = seed {
        e.seed = s;
    }
    let results = run_all(&[e], scale, jobs.max(1), true)?;
    let report = lab::report::write(out, &results).map_err(anyhow::Error::msg)?;
    print_verdicts(&results, &report);
    Ok(())
}

/// Prints each claim beside the measurement, and where the report is.
fn print_verdicts(results: &[ExperimentResult], report: &Path) {
    for r in results {
        println!("{} ({})", r.title, r.source);
        for v in &r.verdicts {
            let a = match v.agrees {
                Some(true) => "agrees",
                Some(false) => "DISAGREES",
                None => "not measured",
            };
            println!("  {a}: {}\n      {}", v.claim, v.measured);
            if let Some(why) = &v.why {
                println!("      why: {why}");
            }
        }
        for v in &r.variants {
            if let Some(e) = &v.error {
                println!("  {} failed: {e}", v.label);
            }
        }
    }
    println!("report: {}", report.display());
}

/// Runs every (experiment, variant) pair on `jobs` threads.
#[expect(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "constant progress templates; the job mutexes are never poisoned (a panicking job aborts the run anyway); every job slot is filled before the scope ends"
)]
pub fn run_all(
    experiments: &[Experiment],
    scale: f64,
    jobs: usize,
    bars: bool,
) -> Result<Vec<ExperimentResult>> {
    let work: Vec<(usize, usize)> = experiments
        .iter()
        .enumerate()
        .flat_map(|(i, e)| (0..e.variants.len()).map(move |v| (i, v)))
        .collect();
    let next = Mutex::new(0usize);
    let done: Mutex<Vec<Option<VariantResult>>> = Mutex::new(vec![None; work.len()]);
    let multi = MultiProgress::new();
    if !bars {
        multi.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    let style = ProgressStyle::with_template("{prefix:>40} {spinner} {msg} [{elapsed}]")
        .expect("a valid progress template");
    std::thread::scope(|s| {
        for _ in 0..jobs.min(work.len()) {
            s.spawn(|| loop {
                let k = {
                    let mut n = next.lock().unwrap();
                    let k = *n;
                    *n += 1;
                    k
                };
                let Some(&(ei, vi)) = work.get(k) else { break };
                let e = &experiments[ei];
                let v = &e.variants[vi];
                let bar = multi.add(ProgressBar::new_spinner());
                bar.set_style(style.clone());
                bar.set_prefix(format!("{} {}", e.name, v.label));
                let mut tick = |bytes: u64| {
                    if bytes % (64 << 20) < (128 << 10) {
                        bar.set_message(format!("{} MiB written", bytes >> 20));
                        bar.tick();
                    }
                };
                let r = run_variant(e, v, scale, &lab::experiment::build_file_stack, &mut tick);
                bar.finish_with_message(match &r.error {
                    None => format!("done in {:.1} s", r.wall_seconds),
                    Some(err) => format!("failed: {err}"),
                });
                done.lock().unwrap()[k] = Some(r);
            });
        }
    });
    let mut done = done.into_inner().unwrap().into_iter();
    Ok(experiments
        .iter()
        .map(|e| {
            let variants: Vec<VariantResult> = e
                .variants
                .iter()
                .map(|_| done.next().flatten().expect("every job ran"))
                .collect();
            ExperimentResult::new(e, scale, variants)
        })
        .collect())
}
