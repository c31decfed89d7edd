//! `ossd put --encrypt --key-file K`, `ossd get --key-file K`, `ossd stat`, `ossd rekey` on an
//! image (issue 16 items 7 and 9): the bytes come back with the key, the command fails (and
//! writes nothing) without it or with another, and the image file holds no plaintext.

mod cli_rig;

use cli_rig::{ok, run, scratch};

#[test]
fn put_get_stat_rekey_with_keys() {
    let d = scratch("encrypt-cli");
    ok(&["format", "--image", "d.img", "--device", "tiny"], &d);
    ok(&["keygen", "--out", "k1"], &d);
    ok(&["keygen", "--out", "k2"], &d);
    let data: Vec<u8> = b"SECRET-LINE-0123456789\n".repeat(9000);
    std::fs::write(d.join("data"), &data).unwrap();
    let id = ok(
        &[
            "put",
            "--image",
            "d.img",
            "--encrypt",
            "--key-file",
            "k1",
            "data",
        ],
        &d,
    );
    let id = id.trim();
    let public: Vec<u8> = b"PUBLIC-LINE-0123456789\n".repeat(9000);
    std::fs::write(d.join("public"), &public).unwrap();
    let plain_id = ok(&["put", "--image", "d.img", "public"], &d);
    ok(
        &[
            "get",
            "--image",
            "d.img",
            "--id",
            id,
            "--key-file",
            "k1",
            "-o",
            "out",
        ],
        &d,
    );
    assert_eq!(std::fs::read(d.join("out")).unwrap(), data);
    let stat = ok(&["stat", "--image", "d.img", "--id", id], &d);
    assert!(stat.contains("xchacha20-poly1305"), "{stat}");
    let stat = ok(&["stat", "--image", "d.img", "--id", plain_id.trim()], &d);
    assert!(stat.contains("encryption               none"), "{stat}");
    // Without the key, or with another: a failure naming the cause, and no output file.
    for extra in [&[][..], &["--key-file", "k2"][..]] {
        let mut args = vec!["get", "--image", "d.img", "--id", id, "-o", "none"];
        args.extend_from_slice(extra);
        let out = run(&args, &d);
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("master key") && !err.contains("damaged"),
            "{err}"
        );
        assert!(!d.join("none").exists());
    }
    // The image holds the plain object's lines, and none of the encrypted one's.
    let image = std::fs::read(d.join("d.img")).unwrap();
    let count = |needle: &[u8]| image.windows(needle.len()).filter(|w| *w == needle).count();
    assert!(count(b"PUBLIC-LINE-0123456789") > 8000);
    assert_eq!(count(b"SECRET-LINE"), 0);
    // Rotation: the new key reads, the old one no longer does.
    let out = ok(
        &[
            "rekey",
            "--image",
            "d.img",
            "--key-file",
            "k1",
            "--new-key-file",
            "k2",
        ],
        &d,
    );
    assert!(out.contains("1 data keys rewrapped"), "{out}");
    ok(
        &[
            "get",
            "--image",
            "d.img",
            "--id",
            id,
            "--key-file",
            "k2",
            "-o",
            "out2",
        ],
        &d,
    );
    assert_eq!(std::fs::read(d.join("out2")).unwrap(), data);
    let out = run(
        &[
            "get",
            "--image",
            "d.img",
            "--id",
            id,
            "--key-file",
            "k1",
            "-o",
            "x",
        ],
        &d,
    );
    assert!(!out.status.success());
    ok(&["fsck", "--image", "d.img"], &d);
    std::fs::remove_dir_all(&d).unwrap();
}
