//! Short torture campaigns that must find nothing, a replay that must be exact, and the proof
//! that the harness can fail: a recovery that skips the roll-forward is caught.

use std::sync::atomic::AtomicBool;

use torture::campaign::{run_seed, seed_of};
use torture::{Campaign, FaultSet, SimConfig, Stack, Summary};

fn campaign(sim: SimConfig, runs: u64) -> Summary {
    Campaign {
        sim,
        seed: 7,
        runs: Some(runs),
        seconds: None,
        threads: 2,
    }
    .run(&|_| {}, &AtomicBool::new(false))
}

fn assert_clean(s: &Summary) {
    let first: Vec<String> = s
        .violations
        .iter()
        .take(3)
        .map(|(v, sched)| {
            format!(
                "seed {} step {}: {}\n  {}",
                v.seed,
                v.step,
                v.what,
                sched.join("\n  ")
            )
        })
        .collect();
    assert_eq!(
        s.violation_count,
        0,
        "violations (replay with `ossd torture --replay SEED`):\n{}",
        first.join("\n")
    );
}

#[test]
fn ftl_survives_every_fault_kind() {
    let s = campaign(SimConfig::new(Stack::Ftl), 150);
    assert_clean(&s);
    assert!(s.tally.power_cuts > 1000, "{:?}", s.tally);
    assert!(
        s.tally.min_over(FaultSet::all()) > 0,
        "every kind struck: {:?}",
        s.tally
    );
    assert!(s.recoveries > 1000);
}

/// The object store under power cuts alone. Ignored while the store has the open bugs listed
/// in docs/RELIABILITY.md ("Open findings"); un-ignore once they are fixed.
#[test]
#[ignore = "open object-store findings under power cuts, see docs/RELIABILITY.md"]
fn ossd_survives_power_cuts() {
    let mut sim = SimConfig::new(Stack::Osd);
    sim.faults = FaultSet::power();
    assert_clean(&campaign(sim, 300));
}

#[test]
fn a_seed_replays_exactly() {
    for stack in [Stack::Osd, Stack::Ftl] {
        let sim = SimConfig::new(stack);
        let seed = seed_of(11, 3);
        let a = run_seed(seed, &sim);
        let b = run_seed(seed, &sim);
        assert_eq!(a.schedule, b.schedule);
        assert_eq!(a.tally, b.tally);
        assert_eq!(a.reads_checked, b.reads_checked);
        assert!(!a.schedule.is_empty());
    }
}

/// Proves the harness can fail: the FTL opened with its test-only recovery that skips the
/// roll-forward loses every flushed write since the last checkpoint, and power cuts alone
/// must expose it within a few runs.
#[test]
fn a_recovery_without_roll_forward_is_caught() {
    let mut sim = SimConfig::new(Stack::Ftl);
    sim.faults = FaultSet::power();
    sim.broken_recovery = true;
    let s = campaign(sim, 20);
    assert!(
        s.violation_count >= 10,
        "only {} of 20 runs caught the broken recovery",
        s.violation_count
    );
    let (v, _) = &s.violations[0];
    assert!(
        v.what.contains("recovered version") || v.what.contains("vanished"),
        "{}",
        v.what
    );
}
