//! `ossd bench-mount` end to end at a tiny scale on the `tiny` device: fio, PostMark and the
//! video scenario run on OFS mounted with FUSE and on real ext4 over `ossd blockdev`, and the
//! report (report.md, results.json, metrics.csv) holds every variant's phases and the judged
//! claims. No figure is asserted (they are wall-clock times): only that each program ran and
//! was read.
//!
//! Needs /dev/fuse, fio and postmark, and root for ext4 (losetup, mkfs.ext4, mount); without
//! them it prints `SKIPPED: ...` to stderr and returns (or checks that the report says so).

use std::path::Path;
use std::process::Command;

const OSSD: &str = env!("CARGO_BIN_EXE_ossd");

fn have(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

fn missing() -> Option<String> {
    if !Path::new("/dev/fuse").exists() {
        return Some("/dev/fuse is missing".into());
    }
    if !rustix::process::geteuid().is_root() {
        return Some("not root (ext4 on a loop device needs it)".into());
    }
    ["fio", "postmark", "losetup", "mkfs.ext4"]
        .into_iter()
        .find(|t| !have(t))
        .map(|t| format!("{t} is missing (apt-get install fio postmark e2fsprogs util-linux)"))
}

#[test]
fn bench_mount_runs_every_program_on_both_stacks_and_writes_the_report() {
    if let Some(why) = missing() {
        eprintln!("SKIPPED: ossd bench-mount: {why}; the real-program benchmark was NOT tested");
        return;
    }
    let out = std::env::temp_dir().join(format!("ossd-bench-mount-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let experiments = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../experiments");
    let run = Command::new(OSSD)
        .args([
            "bench-mount",
            "--device",
            "tiny",
            "--scale",
            "0.01",
            "--out",
        ])
        .arg(&out)
        .arg("--experiments")
        .arg(&experiments)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{stdout}\n{stderr}");
    assert!(!stderr.contains("SKIPPED"), "{stderr}");
    assert!(!stderr.contains("failed"), "{stderr}");

    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    let sections = json.as_array().unwrap();
    let phases = |name: &str, label: &str| -> Vec<String> {
        let s = sections
            .iter()
            .find(|s| s["name"] == name)
            .unwrap_or_else(|| panic!("no section {name}"));
        let v = s["variants"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["label"] == label)
            .unwrap_or_else(|| panic!("{name}: no variant {label}"));
        assert!(v["error"].is_null(), "{name} {label}: {}", v["error"]);
        v["phases"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                // Every program moved bytes, and took time.
                let f = &p["files"];
                assert!(
                    f["write_bytes"].as_u64().unwrap() + f["read_bytes"].as_u64().unwrap() > 0,
                    "{name} {label}: {p}"
                );
                assert!(f["virtual_seconds"].as_f64().unwrap() > 0.0);
                p["phase"].as_str().unwrap().to_string()
            })
            .collect()
    };
    let fio = [
        "buffered write",
        "dsync write",
        "sequential read",
        "random write 4k",
        "random read 4k",
    ];
    for label in ["OFS", "ext4"] {
        assert_eq!(phases("mount-000-vi-b-base", label), fio);
    }
    for label in ["OFS", "OFS-ONE", "ext4"] {
        assert_eq!(phases("mount-000-vi-f-post1", label), ["transactions"]);
        assert_eq!(phases("mount-000-vi-f-post2", label), ["transactions"]);
    }
    for label in ["OFS (priority 3)", "OFS (normal)", "ext4"] {
        assert_eq!(phases("mount-000-vi-e-prioritized-read", label), ["video"]);
    }
    // Every VI-B and POST claim was judged one way or the other (FILEB is not run).
    for s in sections {
        for v in s["verdicts"].as_array().unwrap() {
            let judged = !v["agrees"].is_null();
            assert_eq!(
                judged,
                s["name"] != "mount-000-vi-f-fileb",
                "{}: {v}",
                s["name"]
            );
        }
    }
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(md.starts_with("# ossd bench-mount report"), "{md}");
    assert!(md.contains("Not run: FILEB"));
    let csv = std::fs::read_to_string(out.join("metrics.csv")).unwrap();
    assert!(csv.lines().count() > 10, "{csv}");
    assert!(!out.join("work").exists(), "the work directory is removed");
    std::fs::remove_dir_all(&out).unwrap();
}
