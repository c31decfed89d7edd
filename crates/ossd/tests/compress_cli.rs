//! `ossd put --compression`, `ossd get`, `ossd stat`, `ossd info` on an image (issue 16 items
//! 6 and 9): compressed objects come back byte for byte, `stat` shows the attribute and the
//! space saved, `info` the totals, `auto` stores gzip content as written, and a bad value is
//! refused by name.

mod cli_rig;

use cli_rig::{ok, run, scratch};

#[test]
fn put_get_stat_info_with_compression() {
    let d = scratch("compress-cli");
    ok(&["format", "--image", "d.img", "--device", "tiny"], &d);
    let text: Vec<u8> = (0..20_000)
        .flat_map(|i: u32| format!("line {} of a text file\n", i % 977).into_bytes())
        .collect();
    std::fs::write(d.join("text"), &text).unwrap();
    let mut gz = vec![0x1f, 0x8b, 8, 0];
    gz.extend_from_slice(&text[..100_000]);
    std::fs::write(d.join("gz"), &gz).unwrap();
    let mut ids = Vec::new();
    for c in ["lz4", "zstd", "auto"] {
        let id = ok(&["put", "--image", "d.img", "--compression", c, "text"], &d);
        ids.push(id.trim().to_string());
    }
    let gz_id = ok(
        &["put", "--image", "d.img", "--compression", "auto", "gz"],
        &d,
    );
    for (id, name) in ids.iter().zip(["lz4", "zstd", "auto (chose Zstd)"]) {
        ok(&["get", "--image", "d.img", "--id", id, "-o", "out"], &d);
        assert_eq!(std::fs::read(d.join("out")).unwrap(), text, "{name}");
        let stat = ok(&["stat", "--image", "d.img", "--id", id], &d);
        assert!(
            stat.contains(&format!("compression              {name}")),
            "{stat}"
        );
        assert!(stat.contains("% saved"), "{stat}");
    }
    let stat = ok(&["stat", "--image", "d.img", "--id", gz_id.trim()], &d);
    assert!(stat.contains("auto (stored as written)"), "{stat}");
    ok(
        &["get", "--image", "d.img", "--id", gz_id.trim(), "-o", "out"],
        &d,
    );
    assert_eq!(std::fs::read(d.join("out")).unwrap(), gz);
    let info = ok(&["info", "--image", "d.img", "--json", "info.json"], &d);
    assert!(info.contains("compressed 3 objects"), "{info}");
    let json = std::fs::read_to_string(d.join("info.json")).unwrap();
    assert!(
        json.contains("\"compressed_objects\": 3") || json.contains("\"compressed_objects\":3"),
        "{json}"
    );
    ok(&["fsck", "--image", "d.img"], &d);
    let out = run(
        &["put", "--image", "d.img", "--compression", "brotli", "text"],
        &d,
    );
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("none, lz4, zstd or auto"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = run(
        &[
            "put",
            "--image",
            "d.img",
            "--compression",
            "zstd",
            "--reliability",
            "1",
            "text",
        ],
        &d,
    );
    assert!(!out.status.success());
    let _ = std::fs::remove_dir_all(&d);
}
