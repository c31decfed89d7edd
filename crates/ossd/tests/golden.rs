//! Results that cannot drift.
//!
//! - Every claim's verdict of `ossd reproduce --scale 0.05 --seeds 1` (the whole suite, under
//!   a minute) is pinned in `tests/golden/reproduce-0.05.json`, with the headline counts. A
//!   change that moves a verdict fails here; if the move is intended, rerun with `OSSD_BLESS=1`
//!   and commit the new file beside the change, saying why in the commit message.
//! - Every claim's verdict of `ossd reproduce --scale 1` (`--seeds 3` when time allows) is
//!   pinned in `docs/results/reproduce-1.json` (docs/RESULTS.md and the README's headline are
//!   generated from it). The full run takes about 4 minutes a seed on an idle machine, so that
//!   test is `#[ignore]`d: run it with `cargo test --release -p ossd --test golden -- --ignored`
//!   (at the pinned run's number of seeds) before and after a change that may move results,
//!   and pin a new run with `ossd results --from ... --write`.
//! - The same settings and seed give byte-identical `results.json`, wall times aside, whatever
//!   the threads' interleaving.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{json, Value};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn reproduce(scale: &str, seeds: &str, only: &[&str], tag: &str) -> Value {
    let out = std::env::temp_dir().join(format!("ossd-golden-{tag}-{}", std::process::id()));
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ossd"));
    cmd.current_dir(root())
        .args([
            "reproduce",
            "--scale",
            scale,
            "--seeds",
            seeds,
            "--jobs",
            "2",
            "--out",
        ])
        .arg(&out);
    for o in only {
        cmd.args(["--only", o]);
    }
    let r = cmd.output().expect("ossd runs");
    assert!(
        r.status.success(),
        "ossd reproduce failed: {}",
        String::from_utf8_lossy(&r.stderr)
    );
    let text = std::fs::read_to_string(out.join("results.json")).expect("results.json written");
    std::fs::remove_dir_all(&out).expect("remove the report");
    serde_json::from_str(&text).expect("results.json is JSON")
}

/// The verdicts of a reproduce run, per experiment, and the headline counts.
fn verdicts(results: &Value) -> Value {
    let (mut agree, mut disagree, mut unmeasured) = (0, 0, 0);
    let (mut magnitude_claims, mut magnitude_agree) = (0, 0);
    let mut experiments = serde_json::Map::new();
    for e in results.as_array().expect("a list of experiments") {
        let mut claims = Vec::new();
        for v in e["verdicts"].as_array().expect("verdicts") {
            match v["direction"].as_str() {
                Some("agrees") => agree += 1,
                Some("disagrees") => disagree += 1,
                _ => unmeasured += 1,
            }
            if !v["magnitude"].is_null() {
                magnitude_claims += 1;
                if v["magnitude"] == "agrees" {
                    magnitude_agree += 1;
                }
            }
            claims.push(json!({
                "claim": v["claim"],
                "direction": v["direction"],
                "magnitude": v["magnitude"],
            }));
        }
        let name = e["name"].as_str().expect("a name").to_string();
        experiments.insert(name, Value::Array(claims));
    }
    json!({
        "scale": 0.05,
        "claims": agree + disagree + unmeasured,
        "agree": agree,
        "disagree": disagree,
        "not_measured": unmeasured,
        "magnitude_claims": magnitude_claims,
        "magnitude_agree": magnitude_agree,
        "experiments": experiments,
    })
}

#[test]
fn every_verdict_at_scale_0_05_is_pinned() {
    let golden_path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/reproduce-0.05.json");
    let now = verdicts(&reproduce("0.05", "1", &[], "pin"));
    if std::env::var_os("OSSD_BLESS").is_some() {
        let text = serde_json::to_string_pretty(&now).expect("serializable") + "\n";
        std::fs::write(&golden_path, text).expect("write the golden file");
        eprintln!("OSSD_BLESS: wrote {}", golden_path.display());
        return;
    }
    let golden: Value = serde_json::from_str(
        &std::fs::read_to_string(&golden_path).expect("the golden file (OSSD_BLESS=1 writes it)"),
    )
    .expect("the golden file is JSON");
    let mut moved = Vec::new();
    let empty = serde_json::Map::new();
    let gold = golden["experiments"].as_object().unwrap_or(&empty);
    let cur = now["experiments"].as_object().unwrap_or(&empty);
    for name in gold
        .keys()
        .chain(cur.keys().filter(|k| !gold.contains_key(*k)))
    {
        if gold.get(name) != cur.get(name) {
            moved.push(format!(
                "{name}:\n  pinned {}\n  now    {}",
                gold.get(name).unwrap_or(&Value::Null),
                cur.get(name).unwrap_or(&Value::Null)
            ));
        }
    }
    assert!(
        moved.is_empty() && golden == now,
        "verdicts moved (rerun with OSSD_BLESS=1 if intended):\n{}\nheadline pinned {}/{} agree, now {}/{}",
        moved.join("\n"),
        golden["agree"],
        golden["claims"],
        now["agree"],
        now["claims"]
    );
}

/// Drops what may differ between two runs of the same settings: wall-clock times.
fn without_wall_times(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.retain(|k, _| !k.starts_with("wall_"));
            m.values_mut().for_each(without_wall_times);
        }
        Value::Array(a) => a.iter_mut().for_each(without_wall_times),
        _ => {}
    }
}

#[test]
fn the_same_settings_and_seed_give_identical_results() {
    // A file-level, an OFS-through-OAQ, a scheduled and a p-OFTL experiment, run twice on two threads.
    let only = [
        "000-vi-b-base",
        "000-vi-e-prioritized-read",
        "004-t3-seq4",
        "002-iv-d",
    ];
    let mut a = reproduce("0.02", "2", &only, "a");
    let mut b = reproduce("0.02", "2", &only, "b");
    without_wall_times(&mut a);
    without_wall_times(&mut b);
    assert_eq!(a.as_array().map(Vec::len), Some(only.len()));
    let (a, b) = (a.to_string(), b.to_string());
    assert!(a == b, "two runs of the same settings and seed differ");
}

/// The (claim, direction, magnitude) of every experiment, by name.
fn claims_by_experiment(results: &Value) -> Vec<(String, Vec<Value>)> {
    results
        .as_array()
        .expect("a list of experiments")
        .iter()
        .map(|e| {
            let claims = e["verdicts"]
                .as_array()
                .expect("verdicts")
                .iter()
                .map(|v| json!([v["claim"], v["direction"], v["magnitude"]]))
                .collect();
            (e["name"].as_str().expect("a name").to_string(), claims)
        })
        .collect()
}

#[test]
#[ignore = "the paper-scale suite takes about ten minutes; run with --ignored"]
fn every_verdict_at_scale_1_matches_the_pinned_results() {
    let pinned_path = root().join("docs/results/reproduce-1.json");
    let pinned: Value =
        serde_json::from_str(&std::fs::read_to_string(&pinned_path).expect("the pinned results"))
            .expect("the pinned results are JSON");
    // As many seeds as the pinned run used.
    let seeds = pinned[0]["seeds"]
        .as_array()
        .map_or(1, Vec::len)
        .to_string();
    let now = reproduce("1", &seeds, &[], "scale1");
    let (pinned, now) = (claims_by_experiment(&pinned), claims_by_experiment(&now));
    let moved: Vec<String> = now
        .iter()
        .filter(|e| !pinned.contains(e))
        .map(|(name, c)| format!("{name}: now {}", Value::Array(c.clone())))
        .chain(
            pinned
                .iter()
                .filter(|e| !now.contains(e))
                .map(|(name, c)| format!("{name}: pinned {}", Value::Array(c.clone()))),
        )
        .collect();
    assert!(
        moved.is_empty(),
        "paper-scale verdicts moved (pin with `ossd results --from out/reproduce/results.json --write` if intended):\n{}",
        moved.join("\n")
    );
}
