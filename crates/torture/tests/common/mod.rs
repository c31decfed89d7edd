//! What the campaign tests share: a campaign of fixed runs from seed 7 on two threads, and the
//! check that it found nothing (printing the first violations with their fault schedules).

use std::sync::atomic::AtomicBool;

use torture::{Campaign, SimConfig, Summary};

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
