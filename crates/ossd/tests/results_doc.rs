//! docs/RESULTS.md and the README's headline are generated from the pinned paper-scale verdicts
//! (docs/results/reproduce-1.json) by `ossd results --write`; this fails when either was edited
//! by hand or not regenerated after the pinned file changed.

use std::path::Path;
use std::process::Command;

#[test]
fn the_results_documents_are_what_the_pinned_verdicts_generate() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = Command::new(env!("CARGO_BIN_EXE_ossd"))
        .args(["results", "--check", "--root"])
        .arg(&root)
        .output()
        .expect("ossd runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
