//! What the CLI tests on images share (`compress_cli.rs`, `encrypt_cli.rs`): a scratch
//! directory, and `ossd` run in it.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub const OSSD: &str = env!("CARGO_BIN_EXE_ossd");

/// A fresh `ossd-{name}-{pid}` directory under the temp dir.
pub fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ossd-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// `ossd ARGS` in `dir`.
pub fn run(args: &[&str], dir: &Path) -> Output {
    Command::new(OSSD)
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap()
}

/// `ossd ARGS` in `dir`, which must succeed; its stdout.
pub fn ok(args: &[&str], dir: &Path) -> String {
    let out = run(args, dir);
    assert!(
        out.status.success(),
        "ossd {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}
