//! `ossd txn` on an image (issue 16 item 8): a script of commands over several objects is
//! applied whole; a script with a refused command (or a bad line) changes nothing and says
//! which line or command, with a non-zero exit.

mod cli_rig;

use cli_rig::{ok, run, scratch};

#[test]
fn a_script_is_applied_whole_or_not_at_all() {
    let d = scratch("txn-cli");
    ok(&["format", "--image", "d.img", "--device", "tiny"], &d);
    std::fs::write(d.join("a"), vec![b'a'; 40_000]).unwrap();
    std::fs::write(d.join("b"), b"bee").unwrap();
    let old = ok(&["put", "--image", "d.img", "--id", "0x20000", "b"], &d);
    assert_eq!(old.trim(), "0x20000");
    std::fs::write(
        d.join("t1"),
        "# two objects made, one changed, all at once\n\
         create 0x20001\n\
         put 0x20001 a\n\
         create\n\
         write 0x20000 3 b\n\
         setattr 0x20000 0x1001 tagged\n",
    )
    .unwrap();
    let out = ok(&["txn", "--image", "d.img", "t1"], &d);
    assert!(out.contains("created 0x20001"), "{out}");
    ok(
        &["get", "--image", "d.img", "--id", "0x20001", "-o", "out"],
        &d,
    );
    assert_eq!(std::fs::read(d.join("out")).unwrap(), vec![b'a'; 40_000]);
    ok(
        &["get", "--image", "d.img", "--id", "0x20000", "-o", "out"],
        &d,
    );
    assert_eq!(std::fs::read(d.join("out")).unwrap(), b"beebee");
    // The third command names an object that does not exist: nothing of the script happens.
    std::fs::write(
        d.join("t2"),
        "rm 0x20001\ntruncate 0x20000 1\nwrite 0x29999 0 b\n",
    )
    .unwrap();
    let bad = run(&["txn", "--image", "d.img", "t2"], &d);
    assert!(!bad.status.success());
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(
        err.contains("command 3") && err.contains("nothing applied"),
        "{err}"
    );
    ok(
        &["get", "--image", "d.img", "--id", "0x20001", "-o", "out"],
        &d,
    );
    assert_eq!(std::fs::read(d.join("out")).unwrap().len(), 40_000);
    // A bad line is named before anything is opened.
    std::fs::write(d.join("t3"), "create\nfrobnicate 0x20000\n").unwrap();
    let bad = run(&["txn", "--image", "d.img", "t3"], &d);
    assert!(!bad.status.success());
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(err.contains("line 2"), "{err}");
    let fsck = ok(&["fsck", "--image", "d.img"], &d);
    assert!(fsck.contains("clean"), "{fsck}");
}
