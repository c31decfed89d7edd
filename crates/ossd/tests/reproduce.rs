//! `ossd reproduce` at a tiny scale and two seeds: every experiment runs, every variant completes
//! with a clean fsck, the report, plots and metric files are written, the metrics agree with each
//! other, and every claim is judged at both seeds.

use std::process::Command;

#[test]
fn every_experiment_runs_at_a_tiny_scale() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let out = std::env::temp_dir().join(format!("ossd-reproduce-{}", std::process::id()));
    let status = Command::new(env!("CARGO_BIN_EXE_ossd"))
        .current_dir(root)
        .args([
            "reproduce",
            "--scale",
            "0.01",
            "--seeds",
            "2",
            "--jobs",
            "2",
            "--out",
        ])
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        status.status.success(),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    let results: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    let experiments = std::fs::read_dir(format!("{root}/experiments"))
        .unwrap()
        .count();
    let list = results.as_array().unwrap();
    assert_eq!(list.len(), experiments);
    for e in list {
        let name = e["name"].as_str().unwrap();
        assert!(report.contains(e["title"].as_str().unwrap()), "{name}");
        for ext in ["svg", "png"] {
            assert!(
                out.join(format!("{name}-0.{ext}")).exists(),
                "{name}: no {ext} plot"
            );
        }
        for v in e["variants"].as_array().unwrap() {
            assert!(v["error"].is_null(), "{name}: {}", v["error"]);
            assert_eq!(v["fsck_problems"].as_array().unwrap().len(), 0, "{name}");
            for p in v["phases"].as_array().unwrap() {
                let n = |k: &str| p[k].as_u64().unwrap();
                // Every page the device programmed is accounted for by exactly one layer:
                // host data, GC copies, index nodes or metadata (counted where each is written,
                // against the device model's own count).
                let units = n("data_units_written")
                    + n("gc_page_copies")
                    + n("index_pages_written")
                    + n("metadata_pages_written");
                assert_eq!(
                    n("flash_pages_programmed"),
                    units * n("pages_per_unit"),
                    "{name}: pages programmed != (data + GC + index + metadata) units: {p}"
                );
                assert_eq!(
                    n("host_write_bytes"),
                    p["files"]["write_bytes"].as_u64().unwrap()
                );
            }
        }
        let seeds = e["seeds"].as_array().unwrap();
        assert_eq!(seeds.len(), 2, "{name}: every experiment runs at two seeds");
        assert_ne!(seeds[0], seeds[1], "{name}");
        for verdict in e["verdicts"].as_array().unwrap() {
            assert!(!verdict["measured"].as_str().unwrap().is_empty());
            // One verdict per seed; the overall one follows from them.
            let per: Vec<&serde_json::Value> = verdict["seeds"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| &s["agrees"])
                .collect();
            assert_eq!(per.len(), 2, "{name}");
            let expected = match (per[0].as_bool(), per[1].as_bool()) {
                (Some(a), Some(b)) if a == b && a => "agrees",
                (Some(a), Some(b)) if a == b => "disagrees",
                (Some(_), Some(_)) => "unstable",
                _ => "not_measured",
            };
            assert_eq!(verdict["direction"], expected, "{name}: {verdict}");
            assert_eq!(
                verdict["magnitude"].is_null(),
                verdict["paper"].is_null(),
                "{name}: a magnitude verdict exactly where the paper states a number"
            );
        }
    }
    assert!(std::fs::read_to_string(out.join("series.csv"))
        .unwrap()
        .starts_with("experiment,variant,phase,series,x,y"));
    assert!(std::fs::read_to_string(out.join("report.html"))
        .unwrap()
        .contains("<svg"));
    std::fs::remove_dir_all(&out).unwrap();
}

#[test]
fn run_experiment_runs_one_definition_and_rejects_misuse() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let out = std::env::temp_dir().join(format!("ossd-run-experiment-{}", std::process::id()));
    let ossd = || {
        let mut c = Command::new(env!("CARGO_BIN_EXE_ossd"));
        c.current_dir(root);
        c
    };
    let ok = ossd()
        .args(["run", "--experiment", "experiments/000-vi-b-base.toml"])
        .args(["--scale", "0.01", "--seed", "7", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let results: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    assert_eq!(results.as_array().unwrap().len(), 1);
    assert_eq!(results[0]["name"], "000-vi-b-base");
    std::fs::remove_dir_all(&out).unwrap();
    for (args, says) in [
        (&["run", "--experiment", "no/such.toml"][..], "no/such.toml"),
        (
            &["run", "--scale", "0.5", "--workload", "hotcold"][..],
            "--experiment",
        ),
        (
            &[
                "run",
                "--experiment",
                "experiments/000-vi-b-base.toml",
                "--scale",
                "2",
            ][..],
            "--scale",
        ),
        (
            &[
                "run",
                "--experiment",
                "experiments/000-vi-b-base.toml",
                "--stack",
                "ftl",
            ][..],
            "--stack",
        ),
    ] {
        let r = ossd().args(args).output().unwrap();
        let err = String::from_utf8_lossy(&r.stderr);
        assert!(!r.status.success() && err.contains(says), "{args:?}: {err}");
    }
}
