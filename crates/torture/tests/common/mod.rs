//! What the campaign tests share: a campaign of fixed runs from seed 7 on two threads, and the
//! check that it found nothing (printing the first violations with their fault schedules).

use std::sync::atomic::AtomicBool;

use torture::{Campaign, SimConfig, Summary};

/// `sim` drawing its faults as the pinned seeds of earlier findings were found with: every
/// kind alike, one a step in four ([`SimConfig::destructive_per_run`] `None`).
#[allow(dead_code, reason = "not every test file pins seeds")]
pub fn as_found(mut sim: SimConfig) -> SimConfig {
    sim.destructive_per_run = None;
    sim
}

pub fn campaign(sim: SimConfig, runs: u64) -> Summary {
    Campaign {
        sim,
        seed: 7,
        runs: Some(runs),
        seconds: None,
        threads: 2,
    }
    .run(&|_| {}, &AtomicBool::new(false))
}

pub fn assert_clean(s: &Summary) {
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
        "violations (replay with `ossd torture --stack STACK --replay SEED`):\n{}",
        first.join("\n")
    );
}
