//! `ossd torture`: seeded random workloads against a stack under power cuts and media faults,
//! checked against an oracle, on every core; any failure prints its seed and fault schedule,
//! and `--replay SEED` reruns exactly that run.

use std::sync::atomic::AtomicBool;
use std::sync::Mutex;
use std::time::Instant;

use anyhow::{anyhow, bail, Result};
use indicatif::{ProgressBar, ProgressStyle};
use torture::campaign::run_seed;
use torture::{Campaign, FaultSet, SimConfig, StackKind, Summary};

#[derive(clap::Args)]
pub struct TortureArgs {
    /// Stack under torture: osd (the object store), ftl (the block FTL, page mapping or DFTL
    /// drawn per run), dftl (DFTL in every run), ofs (OFS on the object store), blockfs (on the
    /// FTL; held to its ext2-like contract: files changed since the last sync go unchecked
    /// after a crash) or poftl (p-OFTL's objects).
    #[arg(long, default_value = "osd")]
    stack: StackKind,
    /// Device: small (2 MiB, the default), small-gang (2 MiB, two-page write units: torn cuts
    /// can program one page of a unit and not the other) or any preset of `ossd presets`.
    #[arg(long, default_value = "small")]
    device: String,
    /// Run for this many seconds of wall time...
    #[arg(long, conflicts_with = "runs")]
    seconds: Option<f64>,
    /// ...or this many runs (default 200 when neither is given).
    #[arg(long)]
    runs: Option<u64>,
    /// Seed of the campaign: run i uses a seed derived from it.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Fault kinds, comma-separated: power-cut, torn, bit-flip, bit-flip-beyond-ecc,
    /// page-failure, program-failure, erase-failure, misdirected-write, garbled (torn pages
    /// that read back wrong without an error), partial-program (a torn multi-page program that
    /// programmed only its first pages), garbled-payload (torn pages whose record reads back
    /// whole and payload wrong: p-OFTL does not survive it yet, so not in all), paired-page (a torn
    /// program that also destroys an earlier, flushed page of its block: destructive, not in
    /// all); or all, power (power-cut, torn, garbled, partial-program), none.
    #[arg(long, default_value = "all")]
    faults: String,
    /// Workload steps per run. At 300 (the harness's tests) a run on the FTL rarely reaches
    /// GC; at 1000 it erases about 80 blocks.
    #[arg(long, default_value_t = 1000)]
    steps: u32,
    /// Share of the stack's capacity the workload's slots span, in percent (1-95). Above
    /// about 60 the workload meets full-device GC and out-of-space refusals; the default keeps
    /// the device as full as a device in service.
    #[arg(long, default_value_t = 80)]
    fill: u64,
    /// Parity units per group of 4 data units given to every object (`--stack osd` only;
    /// 0-4, default 0). Above 0, destructive faults strike data and parity units by
    /// preference, and one per group must be masked: no failed command, no wrong byte.
    #[arg(long, default_value_t = 0)]
    reliability: u8,
    /// Destructive faults (bit-flip-beyond-ecc, page-failure, misdirected-write) a run injects
    /// on average when the fault set holds masked kinds too. Masked faults come one workload
    /// step in four; destructive ones far more rarely, since each that strikes live data
    /// relaxes the check of what it struck. A set of destructive kinds alone, or
    /// --reliability above 0, draws them one step in four.
    #[arg(long, default_value_t = torture::sim::DESTRUCTIVE_PER_RUN)]
    destructive_per_run: f64,
    /// Percent of its capacity a store of objects or files (osd, ofs, blockfs, poftl) must
    /// hold live before an out-of-space refusal is allowed; a refusal with less is a violation
    /// (a leak of space). The FTL is held to its whole logical capacity.
    #[arg(long, default_value_t = torture::sim::SPACE_FLOOR_PERMILLE as f64 / 10.0)]
    space_floor: f64,
    /// Threads (default: every core).
    #[arg(long)]
    jobs: Option<usize>,
    /// Rerun one run from its seed (as printed by a failure), printing its schedule.
    #[arg(long, conflicts_with_all = ["seconds", "runs"])]
    replay: Option<u64>,
}

pub fn run(args: TortureArgs) -> Result<()> {
    let stack = torture::covered(args.stack).map_err(|e| anyhow!("--stack: {e}"))?;
    let device = torture::device::named(&args.device).map_err(|e| anyhow!(e))?;
    device
        .validate()
        .map_err(|e| anyhow!("device {}: {e}", args.device))?;
    let faults = FaultSet::parse(&args.faults).map_err(|e| anyhow!("--faults: {e}"))?;
    if args.steps == 0 {
        bail!("--steps must be at least 1");
    }
    if let Some(s) = args.seconds {
        if !(s > 0.0 && s.is_finite()) {
            bail!("--seconds must be a positive number of seconds, not {s}");
        }
    }
    if !(1..=95).contains(&args.fill) {
        bail!(
            "--fill must be a percentage from 1 to 95, not {}",
            args.fill
        );
    }
    if args.reliability > 0 && stack != StackKind::Osd {
        bail!("--reliability needs --stack osd (only the object store keeps parity)");
    }
    if args.reliability > osd::store::MAX_RELIABILITY {
        bail!(
            "--reliability must be from 0 to {}, not {}",
            osd::store::MAX_RELIABILITY,
            args.reliability
        );
    }
    if !(args.destructive_per_run >= 0.0 && args.destructive_per_run <= f64::from(args.steps)) {
        bail!(
            "--destructive-per-run must be from 0 to --steps ({}), not {}",
            args.steps,
            args.destructive_per_run
        );
    }
    if !(0.0..=100.0).contains(&args.space_floor) {
        bail!(
            "--space-floor must be a percentage from 0 to 100, not {}",
            args.space_floor
        );
    }
    if args.runs == Some(0) {
        bail!("--runs must be at least 1");
    }
    if args.jobs == Some(0) {
        bail!("--jobs must be at least 1");
    }
    let mut sim = SimConfig::new(stack);
    sim.device = device;
    sim.faults = faults;
    sim.steps = args.steps;
    sim.fill_percent = args.fill;
    sim.reliability = args.reliability;
    sim.destructive_per_run = Some(args.destructive_per_run);
    sim.space_floor_permille = (args.space_floor * 10.0).round() as u64;
    sim.trace = args.replay.is_some();
    let replay_cmd = |seed: u64| {
        format!(
            "ossd torture --stack {} --device {} --faults {} --steps {} --fill {}{}{}{} --replay {seed}",
            stack.name(),
            args.device,
            faults,
            args.steps,
            args.fill,
            if args.reliability > 0 {
                format!(" --reliability {}", args.reliability)
            } else {
                String::new()
            },
            if args.destructive_per_run == torture::sim::DESTRUCTIVE_PER_RUN {
                String::new()
            } else {
                format!(" --destructive-per-run {}", args.destructive_per_run)
            },
            if sim.space_floor_permille == torture::sim::SPACE_FLOOR_PERMILLE {
                String::new()
            } else {
                format!(" --space-floor {}", args.space_floor)
            }
        )
    };
    if let Some(seed) = args.replay {
        return replay(seed, &sim);
    }
    let threads = args.jobs.unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    });
    let runs = match (args.runs, args.seconds) {
        (None, None) => Some(200),
        (r, _) => r,
    };
    let campaign = Campaign {
        sim,
        seed: args.seed,
        runs,
        seconds: args.seconds,
        threads,
    };
    println!(
        "torturing {} on {} with faults {faults}: {} on {threads} threads, {} steps per run, {}% full, campaign seed {}",
        stack.name(),
        args.device,
        match (runs, args.seconds) {
            (Some(n), _) => format!("{n} runs"),
            (None, Some(s)) => format!("{s} s"),
            _ => unreachable!(),
        },
        args.steps,
        args.fill,
        args.seed
    );
    let summary = with_quiet_panics(|| campaign_with_bar(&campaign));
    if summary.unfit == summary.runs {
        bail!(
            "no run could start on this device: {}",
            summary
                .unfit_why
                .as_deref()
                .unwrap_or("the stack does not fit it")
        );
    }
    print_summary(&summary, sim.space_floor_permille);
    if summary.violation_count > 0 {
        println!("\nviolations ({}):", summary.violation_count);
        for (v, schedule) in summary.violations.iter().take(5) {
            println!("  seed {} at step {}: {}", v.seed, v.step, v.what);
            println!("    fault schedule (last entries):");
            for line in schedule.iter().rev().take(10).rev() {
                println!("      {line}");
            }
            println!("    replay: {}", replay_cmd(v.seed));
        }
        let more: Vec<String> = summary
            .violations
            .iter()
            .skip(5)
            .map(|(v, _)| v.seed.to_string())
            .collect();
        if !more.is_empty() {
            println!("  more seeds: {}", more.join(" "));
        }
        bail!(
            "{} of {} runs broke the contract",
            summary.violation_count,
            summary.runs
        );
    }
    println!("\nno contract violations");
    Ok(())
}

#[expect(
    clippy::expect_used,
    reason = "the progress bar's template is a constant that indicatif accepts"
)]
fn campaign_with_bar(c: &Campaign) -> Summary {
    let (len, template) = match (c.runs, c.seconds) {
        (Some(n), _) => (n, "{prefix} [{bar:40}] {pos}/{len} runs ({per_sec}) {msg}"),
        (None, Some(s)) => (s.ceil() as u64, "{prefix} [{bar:40}] {pos}/{len} s {msg}"),
        _ => (0, "{msg}"),
    };
    let bar = ProgressBar::new(len);
    bar.set_style(
        ProgressStyle::with_template(template)
            .expect("a valid template")
            .progress_chars("=> "),
    );
    bar.set_prefix("torture");
    let start = Instant::now();
    let by_time = c.runs.is_none();
    let progress = |s: &Summary| {
        bar.set_position(if by_time {
            start.elapsed().as_secs()
        } else {
            s.runs
        });
        bar.set_message(format!(
            "{} power cuts, {} violations",
            s.tally.power_cuts, s.violation_count
        ));
    };
    let summary = c.run(&progress, &AtomicBool::new(false));
    bar.finish_and_clear();
    summary
}

/// Runs `f` with the panic hook silenced: a stack's panic is caught per run and reported as a
/// violation with its message, so the default hook's output would only garble the progress bar.
fn with_quiet_panics<T>(f: impl FnOnce() -> T) -> T {
    static LOCK: Mutex<()> = Mutex::new(());
    let _guard = LOCK.lock().unwrap_or_else(|p| p.into_inner());
    let old = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let out = f();
    std::panic::set_hook(old);
    out
}

fn print_summary(s: &Summary, space_floor_permille: u64) {
    let row = |k: &str, v: String| println!("  {k:<28} {v}");
    println!("\nsummary");
    row("runs", s.runs.to_string());
    row("workload steps", s.steps.to_string());
    row("recoveries checked", s.recoveries.to_string());
    row("reads checked", s.reads_checked.to_string());
    println!("  faults injected");
    for (name, n) in s.tally.rows() {
        row(&format!("  {name}"), n.to_string());
    }
    let c = &s.coverage;
    row(
        "coverage",
        format!(
            "{} blocks erased, {} GC victims ({} units copied), {} checkpoints",
            c.blocks_erased, c.gc_victims, c.gc_units_copied, c.checkpoints
        ),
    );
    row("power cuts struck", c.cuts_by_kind());
    row(
        "strict runs",
        format!(
            "{} of {} ({:.0}%; no destructive fault struck a page the stack needed)",
            s.strict_runs,
            s.runs,
            100.0 * s.strict_runs as f64 / s.runs.max(1) as f64
        ),
    );
    row(
        "runs relaxed in part",
        format!(
            "{} (a fault struck one slot's own data: the other slots stayed strict)",
            s.slot_relaxed_runs
        ),
    );
    let why: Vec<String> = torture::sim::RelaxedAll::ALL
        .iter()
        .zip(s.relaxed_all_by)
        .filter(|(_, n)| *n > 0)
        .map(|(w, n)| format!("{n} {}", w.describe()))
        .collect();
    row(
        "runs relaxed for all slots",
        format!(
            "{} ({})",
            s.relaxed_all_by.iter().sum::<u64>(),
            if why.is_empty() {
                "none".to_string()
            } else {
                why.join(", ")
            }
        ),
    );
    row(
        "relaxations ended",
        format!(
            "{} slots strict again (struck blocks erased, contents re-read); {} relaxed runs ended strict",
            s.relaxations_ended, s.strict_again_runs
        ),
    );
    row(
        "strict power cuts",
        format!(
            "{} of {} (in the strict runs)",
            s.strict_power_cuts, s.tally.power_cuts
        ),
    );
    let share = |a: u64, b: u64| 100.0 * a as f64 / (a + b).max(1) as f64;
    row(
        "strict crash recoveries",
        format!(
            "{} of {} ({:.0}%; checked with no slot relaxed, also before a run relaxed)",
            s.strict_crash_recoveries,
            s.crash_recoveries,
            share(
                s.strict_crash_recoveries,
                s.crash_recoveries - s.strict_crash_recoveries
            )
        ),
    );
    row(
        "slot checks after recovery",
        format!(
            "{} strict, {} relaxed ({:.0}% strict)",
            s.slot_checks_strict,
            s.slot_checks_relaxed,
            share(s.slot_checks_strict, s.slot_checks_relaxed)
        ),
    );
    if s.slot_checks_unsynced > 0 {
        row(
            "slots changed since sync",
            format!(
                "{} (not promised across a crash by this stack: read, then removed)",
                s.slot_checks_unsynced
            ),
        );
    }
    row(
        "errors allowed by contract",
        format!("{} (after destructive faults)", s.errors_tolerated),
    );
    row(
        "runs ended by damage",
        format!(
            "{} (recovery refused an image a destructive fault damaged: {} naming a unit a fault struck, {} naming no unit after damage to metadata)",
            s.ended_early, s.ended_naming_struck, s.ended_naming_none
        ),
    );
    if s.unfit > 0 {
        row(
            "runs that did not fit",
            format!(
                "{} (their drawn variant does not fit the device: {})",
                s.unfit,
                s.unfit_why.as_deref().unwrap_or("")
            ),
        );
    }
    const SHOWN: usize = 10;
    for (seed, why) in s.ended.iter().take(SHOWN) {
        println!("    seed {seed}: {why}");
    }
    if s.ended_early > SHOWN as u64 {
        println!("    ({} more)", s.ended_early - SHOWN as u64);
    }
    if s.ended_by_contract > 0 {
        row(
            "runs ended by the contract",
            format!(
                "{} (a crash with unsynced changes left an image needing a repair the stack does not make)",
                s.ended_by_contract
            ),
        );
    }
    row(
        "out-of-space refusals",
        match s.no_space_lowest_live_permille {
            Some(p) => format!(
                "{} (by a store of objects or files, the least live data at one {}.{}% of the \
                 capacity; any below {}%, or any by the FTL, is a violation)",
                s.no_space,
                p / 10,
                p % 10,
                space_floor_permille as f64 / 10.0
            ),
            None => format!(
                "{} (by a store of objects or files; any below {}% of the capacity live, or \
                 any by the FTL, is a violation)",
                s.no_space,
                space_floor_permille as f64 / 10.0
            ),
        },
    );
    row(
        "wall time",
        format!(
            "{:.1} s ({:.0} power cuts/s)",
            s.wall_seconds,
            s.tally.power_cuts as f64 / s.wall_seconds.max(1e-9)
        ),
    );
    row("violations", s.violation_count.to_string());
}

fn replay(seed: u64, sim: &SimConfig) -> Result<()> {
    println!("replaying seed {seed} (the schedule and workload follow on standard error)");
    let r = run_seed(seed, sim);
    println!("  variant      {}", r.variant);
    println!("  faults drawn {}", r.faults_drawn);
    println!(
        "  {} steps, {} recoveries, {} reads checked, {} errors allowed",
        r.steps, r.recoveries, r.reads_checked, r.errors_tolerated
    );
    println!(
        "  {} of {} crash recoveries checked with no slot relaxed; slot checks: {} strict, {} relaxed; {} relaxations ended",
        r.strict_crash_recoveries,
        r.crash_recoveries,
        r.slot_checks_strict,
        r.slot_checks_relaxed,
        r.relaxations_ended
    );
    for (name, n) in r.tally.rows() {
        println!("  {name:<26} {n}");
    }
    let c = &r.coverage;
    println!(
        "  coverage: {} blocks erased, {} GC victims ({} units copied), {} checkpoints",
        c.blocks_erased, c.gc_victims, c.gc_units_copied, c.checkpoints
    );
    println!("  power cuts struck: {}", c.cuts_by_kind());
    match (r.relaxed_at, r.relaxed_all_at) {
        (_, Some(step)) => println!(
            "  relaxed at step {step}: {}",
            r.relaxed_all_by
                .map_or("a destructive fault struck metadata or shared data", |w| w
                    .describe())
        ),
        (Some(step), None) => println!(
            "  relaxed in part from step {step} (a destructive fault struck one slot's own data)"
        ),
        (None, _) => println!("  strict throughout"),
    }
    if let Some(why) = &r.ended {
        println!("  ended early: {why}");
    }
    match r.violation {
        Some(v) => bail!(
            "seed {seed} broke the contract at step {}: {}",
            v.step,
            v.what
        ),
        None => {
            println!("no contract violation");
            Ok(())
        }
    }
}
