//! `ossd reproduce`: every experiment in `experiments/` (or those named), each variant a job,
//! jobs run in parallel over threads with a progress bar each; then the report.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use anyhow::{bail, Context, Result};
use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
use lab::experiment::{run_variant, Experiment, ExperimentResult, VariantResult};
use lab::report::Counts;

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
    /// Seeds each experiment runs at: its own, then the next ones (a verdict that changes
    /// with the seed is "unstable").
    pub seeds: usize,
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
    let results = run_all(&experiments, a.scale, a.seeds, a.jobs.max(1), bars)?;
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
    let results = run_all(&[e], scale, 1, jobs.max(1), true)?;
    let report = lab::report::write(out, &results).map_err(anyhow::Error::msg)?;
    print_verdicts(&results, &report);
    Ok(())
}

/// Prints each claim beside the measurement, the counts, and where the report is.
fn print_verdicts(results: &[ExperimentResult], report: &Path) {
    for r in results {
        println!("{} ({})", r.title, r.source);
        for v in &r.verdicts {
            let magnitude = match v.magnitude {
                None => String::new(),
                Some(m) => format!(", magnitude {}", m.label()),
            };
            println!(
                "  direction {}{magnitude}: {}\n      {}",
                v.direction.label(),
                v.claim,
                v.measured
            );
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
    let all = Counts::of(results.iter().flat_map(|r| &r.verdicts));
    println!("\n{} claims: {}", all.claims, all.sentence());
    for r in results {
        let c = Counts::of(&r.verdicts);
        let mag = if c.magnitude_claims == 0 {
            String::new()
        } else {
            format!(", magnitude {}/{}", c.magnitude_agrees, c.magnitude_claims)
        };
        println!(
            "  {:<28} direction {}/{}{mag}{}",
            r.name,
            c.direction_agrees,
            c.claims,
            if c.unstable > 0 {
                format!(", unstable {}", c.unstable)
            } else {
                String::new()
            }
        );
    }
    println!("report: {}", report.display());
}

/// Runs every (experiment, seed, variant) on `jobs` threads, with one bar for the whole suite
/// (variants done of all, time left) above a spinner per running variant.
#[expect(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "constant progress templates; the job mutexes are never poisoned (a panicking job aborts the run anyway); every job slot is filled before the scope ends"
)]
pub fn run_all(
    experiments: &[Experiment],
    scale: f64,
    seeds: usize,
    jobs: usize,
    bars: bool,
) -> Result<Vec<ExperimentResult>> {
    // Each experiment at each of its seeds, as its own definition.
    let seeded: Vec<Vec<Experiment>> = experiments
        .iter()
        .map(|e| {
            lab::experiment::seeds_of(e, seeds)
                .into_iter()
                .map(|seed| Experiment { seed, ..e.clone() })
                .collect()
        })
        .collect();
    // The experiments' own seeds first, so that a first look at the report comes early.
    let mut work: Vec<(usize, usize, usize)> = Vec::new();
    for k in 0..seeds.max(1) {
        for (i, e) in experiments.iter().enumerate() {
            work.extend((0..e.variants.len()).map(|v| (i, k, v)));
        }
    }
    let next = Mutex::new(0usize);
    let done: Mutex<Vec<Option<VariantResult>>> = Mutex::new(vec![None; work.len()]);
    let multi = MultiProgress::new();
    if !bars {
        multi.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    let total = multi.add(ProgressBar::new(work.len() as u64));
    total.set_style(
        ProgressStyle::with_template(
            "{prefix:>40} [{bar:30}] {pos}/{len} variants, {elapsed} gone, about {eta} left",
        )
        .expect("a valid progress template")
        .progress_chars("=> "),
    );
    total.set_prefix(format!(
        "{} experiments x {} seed(s)",
        experiments.len(),
        seeds.max(1)
    ));
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
                let Some(&(ei, si, vi)) = work.get(k) else {
                    break;
                };
                let e = &seeded[ei][si];
                let v = &e.variants[vi];
                let bar = multi.add(ProgressBar::new_spinner());
                bar.set_style(style.clone());
                bar.set_prefix(format!("{} {} (seed {})", e.name, v.label, e.seed));
                let mut tick = |bytes: u64| {
                    if bytes % (64 << 20) < (128 << 10) {
                        bar.set_message(format!("{} MiB written", bytes >> 20));
                        bar.tick();
                    }
                };
                let r = run_variant(e, v, scale, &lab::experiment::build_file_stack, &mut tick);
                if let Some(err) = &r.error {
                    // A failure stays on screen; a finished variant's spinner goes.
                    bar.finish_with_message(format!("failed: {err}"));
                } else {
                    bar.finish_and_clear();
                    multi.remove(&bar);
                }
                total.inc(1);
                done.lock().unwrap()[k] = Some(r);
            });
        }
    });
    // The aged devices the scheduled variants shared are no longer needed.
    lab::aged::forget();
    total.finish();
    let mut by_job: Vec<Option<VariantResult>> = done.into_inner().unwrap();
    let mut slot = |i: usize, k: usize, v: usize| {
        let at = work
            .iter()
            .position(|w| *w == (i, k, v))
            .expect("every job is listed");
        by_job[at].take().expect("every job ran")
    };
    Ok(experiments
        .iter()
        .enumerate()
        .map(|(i, e)| {
            let runs: Vec<(u64, Vec<VariantResult>)> = seeded[i]
                .iter()
                .enumerate()
                .map(|(k, se)| {
                    (
                        se.seed,
                        (0..e.variants.len()).map(|v| slot(i, k, v)).collect(),
                    )
                })
                .collect();
            ExperimentResult::over_seeds(e, scale, runs)
        })
        .collect())
}
