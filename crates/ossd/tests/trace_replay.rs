//! The trace-replay example experiment (`examples/002-trace-replay.toml`) runs through
//! `ossd reproduce` on p-OFTL: a user's trace in a supported format, replayed onto objects.

use std::process::Command;

#[test]
fn the_trace_replay_example_runs() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let out = std::env::temp_dir().join(format!("ossd-trace-replay-{}", std::process::id()));
    let run = Command::new(env!("CARGO_BIN_EXE_ossd"))
        .current_dir(root)
        .args([
            "reproduce",
            "--experiments",
            "examples",
            "--only",
            "002-trace",
        ])
        .args(["--scale", "1", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let results: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    let e = &results.as_array().unwrap()[0];
    for v in e["variants"].as_array().unwrap() {
        assert!(v["error"].is_null(), "{}", v["error"]);
        let run = &v["phases"][0];
        assert_eq!(run["phase"], "run");
        // The TPC-C trace writes 2,618 requests of about 8 KiB.
        assert!(
            run["host_write_bytes"].as_u64().unwrap() > 20 << 20,
            "{run}"
        );
    }
    std::fs::remove_dir_all(&out).unwrap();
}

/// A malformed trace is reported with its file and line, and the run fails cleanly.
#[test]
fn a_malformed_trace_is_a_clear_error() {
    let dir = std::env::temp_dir().join(format!("ossd-bad-trace-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("bad.fiu"),
        "1 2 p 0 8 W 8 0 x\n2 2 p 8 8 W 8 zero x\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("t.toml"),
        r#"name = "t"
title = "t"
source = "t"
device = "poftl"
[workload]
kind = "trace"
path = "bad.fiu"
[[variants]]
label = "SA"
stack = "poftl"
"#,
    )
    .unwrap();
    let run = Command::new(env!("CARGO_BIN_EXE_ossd"))
        .args(["reproduce", "--scale", "0.05", "--experiments"])
        .arg(&dir)
        .arg("--out")
        .arg(dir.join("out"))
        .output()
        .unwrap();
    let results = std::fs::read_to_string(dir.join("out/results.json")).unwrap_or_default();
    let all = format!(
        "{}{}{results}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(all.contains("bad.fiu line 2"), "{all}");
    assert!(!all.contains("panicked"), "{all}");
    std::fs::remove_dir_all(&dir).unwrap();
}
