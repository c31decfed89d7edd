//! `ossd sweep GRID`: runs the Python package's sweep driver (`python3 -m ossd sweep`), which
//! runs every point of the grid on Ray (or on local processes) through the same library code
//! as `ossd run`. One driver serves the CLI and `ossd.sweep(...)` in Python; docs/DESIGN.md
//! ("Sweeps") says why the driver is Python.

use std::path::PathBuf;
use std::process::Command;

use anyhow::{bail, Context, Result};

/// `ossd sweep`'s options (passed on to the driver).
#[derive(clap::Args)]
pub struct Args {
    /// The grid: a TOML file with `name`, `[fixed]` settings and `[axes]` (lists of values),
    /// keys as `--set` takes them.
    pub grid: PathBuf,
    /// Where results go: results.csv (and .parquet), sweep.json, report.md, points/
    /// [default: out/sweep/NAME].
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// A Ray cluster's address (`HEAD:6379`, or `auto` on a node of the cluster); default: a
    /// local Ray cluster on all cores.
    #[arg(long, conflicts_with = "local")]
    pub ray_address: Option<String>,
    /// Run on local processes instead of Ray (the fallback without Ray).
    #[arg(long)]
    pub local: bool,
    /// Local processes [default: all cores].
    #[arg(long)]
    pub jobs: Option<usize>,
    /// No progress bar.
    #[arg(long)]
    pub no_progress: bool,
    /// List the points and check their settings; run nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// The Python interpreter with the ossd package installed [default: $OSSD_PYTHON, else
    /// python3].
    #[arg(long)]
    pub python: Option<PathBuf>,
}

/// The driver's command line for `a`.
pub fn driver_args(a: &Args) -> Vec<std::ffi::OsString> {
    let mut v: Vec<std::ffi::OsString> = vec!["-m".into(), "ossd".into(), "sweep".into()];
    v.push(a.grid.clone().into_os_string());
    if let Some(o) = &a.out {
        v.push("--out".into());
        v.push(o.clone().into_os_string());
    }
    if let Some(r) = &a.ray_address {
        v.push("--ray-address".into());
        v.push(r.into());
    }
    if a.local {
        v.push("--local".into());
    }
    if let Some(j) = a.jobs {
        v.push("--jobs".into());
        v.push(j.to_string().into());
    }
    if a.no_progress {
        v.push("--no-progress".into());
    }
    if a.dry_run {
        v.push("--dry-run".into());
    }
    v
}

/// Runs the driver; its exit status is the sweep's (non-zero when a point failed).
pub fn run(a: Args) -> Result<std::process::ExitCode> {
    if a.jobs == Some(0) {
        bail!("--jobs must be at least 1");
    }
    if !a.grid.is_file() {
        bail!("the grid {} is not a file", a.grid.display());
    }
    let python = a
        .python
        .clone()
        .or_else(|| std::env::var_os("OSSD_PYTHON").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("python3"));
    let probe = Command::new(&python)
        .args(["-c", "import ossd.sweeps"])
        .output();
    match probe {
        Err(e) => bail!(
            "ossd sweep runs its driver in Python, and {} cannot be started ({e}): install Python 3 and the ossd package (pip install ./crates/py), or name the interpreter with --python",
            python.display()
        ),
        Ok(o) if !o.status.success() => bail!(
            "ossd sweep runs its driver in Python, and {} cannot import the ossd package: install it with `{} -m pip install ./crates/py` (docs/PYTHON.md)\n{}",
            python.display(),
            python.display(),
            String::from_utf8_lossy(&o.stderr).trim_end()
        ),
        Ok(_) => {}
    }
    let status = Command::new(&python)
        .args(driver_args(&a))
        .status()
        .with_context(|| format!("running {}", python.display()))?;
    Ok(match status.code() {
        Some(0) => std::process::ExitCode::SUCCESS,
        Some(c) => std::process::ExitCode::from(u8::try_from(c).unwrap_or(1)),
        None => bail!("the sweep driver was killed by a signal ({status})"),
    })
}
