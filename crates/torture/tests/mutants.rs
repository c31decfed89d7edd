//! Mutants that prove the oracle (issue 15, item 5): each deliberately broken variant of the
//! object store, the FTL or the FML (`fml::mutants`, feature `mutants`) must be caught by a
//! short torture campaign in every one of its runs, with power cuts alone and with every fault
//! kind; the same campaigns with no mutant find nothing.
//!
//! `cargo test -p torture --features mutants --test mutants -- --nocapture` prints the table
//! (docs/RELIABILITY.md, "Mutants"). `MUTANT_RUNS` and `MUTANT_STEPS` change the campaign size.

#![cfg(feature = "mutants")]

use std::sync::atomic::AtomicBool;

use fml::mutants::Mutant;
use torture::{Campaign, FaultSet, SimConfig, StackKind, Summary};

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// One campaign of `runs` runs of `mutant` (or the real code) with `faults`.
fn campaign(mutant: Option<Mutant>, faults: FaultSet, runs: u64) -> Summary {
    let stack = if mutant.is_some_and(Mutant::ftl) {
        StackKind::Ftl
    } else {
        StackKind::Osd
    };
    let mut sim = SimConfig::new(stack);
    sim.faults = faults;
    sim.steps = env("MUTANT_STEPS", 300) as u32;
    sim.fill_percent = env("MUTANT_FILL", 45);
    sim.mutant = mutant;
    Campaign {
        sim,
        seed: 15,
        runs: Some(runs),
        seconds: None,
        threads: 2,
    }
    .run(&|_| {}, &AtomicBool::new(false))
}

fn first(s: &Summary) -> String {
    s.violations.first().map_or(String::new(), |(v, _)| {
        format!("seed {}: {}", v.seed, v.what)
    })
}

#[test]
fn every_mutant_is_caught_in_every_run() {
    let runs = env("MUTANT_RUNS", 20);
    let sets = [("power", FaultSet::power()), ("all", FaultSet::all())];
    let mut rows = Vec::new();
    let mut missed = Vec::new();
    let start = std::time::Instant::now();
    for m in Mutant::ALL {
        for (name, faults) in sets {
            let t = std::time::Instant::now();
            let s = campaign(Some(m), faults, runs);
            let row = format!(
                "| {:<24} | {:<6} | {:>4} | {:>6} | {:>5.1} s | {}",
                m.name(),
                name,
                s.runs,
                s.violation_count,
                t.elapsed().as_secs_f64(),
                first(&s).chars().take(110).collect::<String>()
            );
            println!("{row}");
            rows.push(row);
            if s.violation_count < s.runs {
                missed.push(format!(
                    "{} --faults {name}: {}/{}",
                    m.name(),
                    s.violation_count,
                    s.runs
                ));
            }
        }
    }
    println!("mutants: {:.1} s", start.elapsed().as_secs_f64());
    assert!(missed.is_empty(), "runs that missed a mutant: {missed:?}");
}

/// The control: the same campaigns with the real code break nothing.
#[test]
fn the_real_code_passes_the_same_campaigns() {
    let runs = env("MUTANT_RUNS", 20);
    for stack_mutant in [None] {
        for (name, faults) in [("power", FaultSet::power()), ("all", FaultSet::all())] {
            let s = campaign(stack_mutant, faults, runs);
            println!("| (none) | {name} | {} | {} |", s.runs, s.violation_count);
            assert_eq!(s.violation_count, 0, "{}", first(&s));
        }
    }
}

/// Diagnostics: `MUTANT=name MUTANT_FAULTS=all cargo test ... diagnose -- --ignored --nocapture`
/// prints each run of one campaign.
#[test]
#[ignore]
fn diagnose() {
    let name = std::env::var("MUTANT").unwrap_or_default();
    let m = Mutant::ALL.into_iter().find(|m| m.name() == name);
    let faults = FaultSet::parse(&std::env::var("MUTANT_FAULTS").unwrap_or("all".into()))
        .unwrap_or(FaultSet::all());
    let stack = if m.is_some_and(Mutant::ftl) {
        StackKind::Ftl
    } else {
        StackKind::Osd
    };
    let mut sim = SimConfig::new(stack);
    sim.faults = faults;
    sim.steps = env("MUTANT_STEPS", 300) as u32;
    sim.fill_percent = env("MUTANT_FILL", 45);
    sim.mutant = m;
    for i in 0..env("MUTANT_RUNS", 20) {
        let r = torture::campaign::run_seed(torture::campaign::seed_of(15, i), &sim);
        println!(
            "seed {} steps {} rec {} reads {} tol {} nospace {} drawn [{}] ended {:?} viol {:?}",
            r.seed,
            r.steps,
            r.recoveries,
            r.reads_checked,
            r.errors_tolerated,
            r.no_space,
            r.faults_drawn,
            r.ended,
            r.violation.map(|v| (v.step, v.what))
        );
    }
}
