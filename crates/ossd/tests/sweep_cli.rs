//! `ossd sweep`'s own checks, before it hands the grid to the Python driver: a missing grid,
//! and an interpreter that cannot be started, are clear errors. (The sweep itself, through the
//! CLI too, is tested with pytest in crates/py/tests, where the package is installed.)

use std::process::Command;

fn ossd(args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_ossd"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_missing_grid_is_named() {
    let (ok, err) = ossd(&["sweep", "/nonexistent/grid.toml"]);
    assert!(!ok);
    assert!(
        err.contains("/nonexistent/grid.toml") && err.contains("not a file"),
        "{err}"
    );
}

#[test]
fn without_python_it_says_what_to_install() {
    let dir = std::env::temp_dir().join(format!("ossd-sweep-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let grid = dir.join("grid.toml");
    std::fs::write(&grid, "[axes]\nseed = [1, 2]\n").unwrap();
    let (ok, err) = ossd(&[
        "sweep",
        grid.to_str().unwrap(),
        "--python",
        "/nonexistent/python3",
    ]);
    assert!(!ok);
    assert!(
        err.contains("driver in Python") && err.contains("pip install ./crates/py"),
        "{err}"
    );
    let (ok, err) = ossd(&["sweep", grid.to_str().unwrap(), "--jobs", "0"]);
    assert!(!ok && err.contains("--jobs"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}
