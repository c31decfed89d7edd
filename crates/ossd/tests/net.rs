//! `ossd serve` as a process: kill -9 during concurrent PUT-like writes (write + FLUSH before
//! the acknowledgement), restart, every acknowledged object intact; graceful SIGTERM; CLI errors.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use client::{Client, Credentials};
use osd::{FlushScope, ObjectId, Oid, Osd, PartitionId};

const BIN: &str = env!("CARGO_BIN_EXE_ossd");
const P: u64 = 0x10000;

fn ossd(args: &[&str]) -> std::process::Output {
    Command::new(BIN).args(args).output().unwrap()
}

fn setup(dir: &Path) -> (String, String) {
    let image = dir.join("dev.img").display().to_string();
    let key = dir.join("key").display().to_string();
    let out = ossd(&["format", "--image", &image, "--device", "tiny"]);
    assert!(out.status.success(), "{out:?}");
    let out = ossd(&["keygen", "--out", &key]);
    assert!(out.status.success(), "{out:?}");
    (image, key)
}

/// Starts `ossd serve` on a free loopback port; returns the child and its address.
fn serve(image: &str, key: &str) -> (Child, String) {
    let mut child = Command::new(BIN)
        .args([
            "serve",
            "--image",
            image,
            "--key-file",
            key,
            "--listen",
            "127.0.0.1:0",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line
        .strip_prefix("listening on ")
        .and_then(|r| r.split_whitespace().next())
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .to_string();
    (child, addr)
}

fn payload(id: u64) -> Vec<u8> {
    let len = 1 + (id * 7919 % 12_000) as usize;
    let mut x = id.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn master(key: &str) -> proto::MasterKey {
    proto::MasterKey::parse(&std::fs::read(key).unwrap()).unwrap()
}

#[test]
fn kill_9_during_writes_loses_no_acknowledged_object() {
    let dir = tempdir("kill9");
    let (image, key) = setup(&dir);
    let (mut server, addr) = serve(&image, &key);
    let acked = Arc::new(Mutex::new(Vec::<u64>::new()));
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let (addr, acked, m) = (addr.clone(), acked.clone(), master(&key));
            std::thread::spawn(move || {
                let mut c = Client::connect(addr.as_str(), Credentials::Key(m)).unwrap();
                for i in 0..300u64 {
                    let id = 0x100000 + t * 0x10000 + i;
                    let oid = Oid::new(P, id);
                    let put = (|| -> Result<(), osd::OsdError> {
                        c.create(PartitionId(P), Some(ObjectId(id)))?;
                        c.write(oid, 0, &payload(id))?;
                        c.flush(FlushScope::Object(oid))
                    })();
                    if put.is_err() {
                        return; // the server died
                    }
                    acked.lock().unwrap().push(id);
                }
            })
        })
        .collect();
    let start = Instant::now();
    while acked.lock().unwrap().len() < 400 && start.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(5));
    }
    server.kill().unwrap(); // SIGKILL
    server.wait().unwrap();
    for t in threads {
        t.join().unwrap();
    }
    let acked = acked.lock().unwrap().clone();
    assert!(
        acked.len() >= 400,
        "only {} objects acknowledged",
        acked.len()
    );

    let (mut server, addr) = serve(&image, &key);
    let mut c = Client::connect(addr.as_str(), Credentials::Key(master(&key))).unwrap();
    for id in &acked {
        let want = payload(*id);
        let mut buf = vec![0u8; want.len() + 1];
        let n = c
            .read(Oid::new(P, *id), 0, &mut buf)
            .unwrap_or_else(|e| panic!("acknowledged object {id:#x}: {e}"));
        assert_eq!(n, want.len(), "object {id:#x}");
        assert!(buf[..n] == want[..], "object {id:#x} differs");
    }
    drop(c);
    // Graceful stop: SIGTERM, exit 0, image clean.
    let st = Command::new("kill")
        .args(["-TERM", &server.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    assert!(server.wait().unwrap().success());
    let out = ossd(&["fsck", "--image", &image]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    eprintln!("{} acknowledged objects intact after kill -9", acked.len());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn revoke_on_a_stopped_image_and_cli_errors() {
    let dir = tempdir("revoke");
    let (image, key) = setup(&dir);
    let out = ossd(&["revoke", "--image", &image, "--partition", "0x10000"]);
    assert!(out.status.success(), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("key version 0 -> 1"));
    let (mut server, addr) = serve(&image, &key);
    // An issued capability of the old version is refused; one of the new version works.
    for (version, ok) in [("0", false), ("1", true)] {
        let out = ossd(&[
            "cap",
            "--key-file",
            &key,
            "--partition",
            "0x10000",
            "--ops",
            "list",
            "--key-version",
            version,
        ]);
        assert!(out.status.success());
        let text = String::from_utf8(out.stdout).unwrap();
        let field = |name: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(name))
                .unwrap()
                .trim()
                .to_string()
        };
        let cap = proto::Capability::decode(&proto::cap::hex_decode(&field("capability")).unwrap())
            .unwrap();
        let k = proto::CapKey::from_hex(&field("key")).unwrap();
        let mut c =
            Client::connect(addr.as_str(), Credentials::Capabilities(vec![(cap, k)])).unwrap();
        let r = c.list(PartitionId(P), 0, 10);
        assert_eq!(r.is_ok(), ok, "version {version}: {r:?}");
        if !ok {
            assert!(format!("{:?}", r.unwrap_err()).contains("Revoked"));
        }
    }
    server.kill().unwrap();
    server.wait().unwrap();

    // Bad key files, flags and capabilities: an error naming the problem, never a panic.
    let bad = dir.join("bad.key");
    std::fs::write(&bad, "not a key").unwrap();
    let bad = bad.display().to_string();
    for (args, needle) in [
        (
            vec!["serve", "--image", &image, "--key-file", &bad],
            "bad.key",
        ),
        (
            vec!["serve", "--image", &image, "--key-file", "/nonexistent/k"],
            "/nonexistent/k",
        ),
        (
            vec![
                "cap",
                "--key-file",
                &key,
                "--partition",
                "1",
                "--ops",
                "fly",
            ],
            "'fly'",
        ),
        (
            vec![
                "cap",
                "--key-file",
                &key,
                "--partition",
                "zz",
                "--ops",
                "read",
            ],
            "zz",
        ),
        (
            vec![
                "cap",
                "--key-file",
                &key,
                "--partition",
                "1",
                "--ops",
                "read",
                "--expires",
                "18446744073709551615",
            ],
            "--expires",
        ),
        (
            vec![
                "serve",
                "--image",
                &image,
                "--key-file",
                &key,
                "--listen",
                "nowhere",
            ],
            "nowhere",
        ),
        (vec!["keygen", "--out", &key], "--force"),
    ] {
        let out = ossd(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}");
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

fn tempdir(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("ossd-net-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}
