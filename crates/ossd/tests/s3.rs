//! `ossd serve --s3` as a process: kill -9 during concurrent PUTs, restart, every acknowledged
//! object intact; graceful SIGTERM; both faces on one image; CLI errors.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use s3::client::Client;

const BIN: &str = env!("CARGO_BIN_EXE_ossd");
const ACCESS: &str = "ossdtest";
const SECRET: &str = "ossd-test-secret";

fn ossd(args: &[&str]) -> std::process::Output {
    Command::new(BIN).args(args).output().unwrap()
}

fn tempdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ossd-s3-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A formatted image and a credentials file.
fn setup(dir: &Path) -> (String, String) {
    let image = dir.join("dev.img").display().to_string();
    let creds = dir.join("creds.toml");
    std::fs::write(
        &creds,
        format!("[[credentials]]\naccess_key = \"{ACCESS}\"\nsecret_key = \"{SECRET}\"\n"),
    )
    .unwrap();
    let out = ossd(&["format", "--image", &image, "--device", "tiny"]);
    assert!(out.status.success(), "{out:?}");
    (image, creds.display().to_string())
}

/// Starts `ossd serve` with `args`; returns the child and the addresses it printed
/// (`listening on` for the OSD face, `s3 listening on` for S3), in order.
fn serve(args: &[&str]) -> (Child, Vec<String>) {
    let mut child = Command::new(BIN)
        .arg("serve")
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let faces = args
        .iter()
        .filter(|a| **a == "--s3" || **a == "--listen")
        .count();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut addrs = Vec::new();
    for _ in 0..faces {
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        let addr = line
            .split("listening on ")
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
            .unwrap_or_else(|| panic!("unexpected line {line:?}"))
            .to_string();
        addrs.push(addr);
    }
    // Keep draining stdout so the server never blocks on a full pipe.
    std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
    (child, addrs)
}

fn serve_s3(image: &str, creds: &str) -> (Child, String) {
    let (child, addrs) = serve(&[
        "--image",
        image,
        "--s3",
        "127.0.0.1:0",
        "--s3-credentials",
        creds,
    ]);
    (child, addrs[0].clone())
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

fn term(server: &mut Child) {
    let st = Command::new("kill")
        .args(["-TERM", &server.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    assert!(server.wait().unwrap().success());
}

#[test]
fn kill_9_during_concurrent_puts_loses_no_acknowledged_object() {
    let dir = tempdir("kill9");
    let (image, creds) = setup(&dir);
    let (mut server, addr) = serve_s3(&image, &creds);
    let mut c = Client::new(&addr, ACCESS, SECRET);
    assert_eq!(c.create_bucket("crash").unwrap().status, 200);
    let acked = Arc::new(Mutex::new(Vec::<u64>::new()));
    let threads: Vec<_> = (0..8u64)
        .map(|t| {
            let (addr, acked) = (addr.clone(), acked.clone());
            std::thread::spawn(move || {
                let mut c = Client::new(&addr, ACCESS, SECRET);
                c.timeout = Duration::from_secs(10);
                for i in 0..200u64 {
                    let id = t * 1000 + i;
                    match c.put("crash", &format!("t{t}/o{i}"), &payload(id)) {
                        Ok(r) if r.status == 200 => acked.lock().unwrap().push(id),
                        Ok(r) => panic!(
                            "PUT refused with {}: {}",
                            r.status,
                            String::from_utf8_lossy(&r.body)
                        ),
                        Err(_) => return, // the server died
                    }
                }
            })
        })
        .collect();
    let start = Instant::now();
    while acked.lock().unwrap().len() < 400 && start.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(5));
    }
    server.kill().unwrap(); // SIGKILL, while the PUTs go on
    server.wait().unwrap();
    for t in threads {
        t.join().unwrap();
    }
    let acked = acked.lock().unwrap().clone();
    assert!(acked.len() >= 400, "only {} PUTs acknowledged", acked.len());

    let (mut server, addr) = serve_s3(&image, &creds);
    let mut c = Client::new(&addr, ACCESS, SECRET);
    let mut lost = 0;
    for id in &acked {
        let key = format!("t{}/o{}", id / 1000, id % 1000);
        let r = c.get("crash", &key).unwrap();
        if r.status != 200 || r.body != payload(*id) {
            lost += 1;
            eprintln!(
                "acknowledged {key}: status {} ({} bytes)",
                r.status,
                r.body.len()
            );
        }
    }
    println!(
        "kill -9 during 8 clients' PUTs: {} acknowledged, {lost} lost",
        acked.len()
    );
    assert_eq!(lost, 0);
    // The listing holds every acknowledged key (and perhaps PUTs that completed unacknowledged).
    let mut listed = 0;
    let mut token: Option<String> = None;
    loop {
        let mut q = vec![("list-type", "2")];
        if let Some(t) = &token {
            q.push(("continuation-token", t.as_str()));
        }
        let r = c.request("GET", "/crash", &q, &[], &[]).unwrap();
        assert_eq!(r.status, 200);
        listed += String::from_utf8_lossy(&r.body).matches("<Key>").count();
        match s3::client::xml_field(&r.body, "NextContinuationToken") {
            Some(t) => token = Some(t),
            None => break,
        }
    }
    assert!(listed >= acked.len(), "{listed} keys listed");
    term(&mut server);
    let out = ossd(&["fsck", "--image", &image]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn sigterm_drains_flushes_and_both_faces_share_one_image() {
    let dir = tempdir("term");
    let (image, creds) = setup(&dir);
    let key = dir.join("key").display().to_string();
    assert!(ossd(&["keygen", "--out", &key]).status.success());
    let (mut server, addrs) = serve(&[
        "--image",
        &image,
        "--listen",
        "127.0.0.1:0",
        "--key-file",
        &key,
        "--s3",
        "127.0.0.1:0",
        "--s3-credentials",
        &creds,
    ]);
    let (osd_addr, s3_addr) = (addrs[0].clone(), addrs[1].clone());
    let mut c = Client::new(&s3_addr, ACCESS, SECRET);
    assert_eq!(c.create_bucket("both").unwrap().status, 200);
    for i in 0..20u64 {
        assert_eq!(
            c.put("both", &format!("k{i}"), &payload(i)).unwrap().status,
            200
        );
    }
    // The OSD face serves the same store: it sees the bucket's partition.
    let master = proto::MasterKey::parse(&std::fs::read(&key).unwrap()).unwrap();
    let mut oc =
        client::Client::connect(osd_addr.as_str(), client::Credentials::Key(master)).unwrap();
    use osd::Osd;
    let (parts, _) = oc.list_partitions(0, 100).unwrap();
    assert!(parts.len() >= 2, "{parts:?}");
    drop(oc);
    term(&mut server);

    let (mut server, addr) = serve_s3(&image, &creds);
    let mut c = Client::new(&addr, ACCESS, SECRET);
    for i in 0..20u64 {
        assert_eq!(c.get("both", &format!("k{i}")).unwrap().body, payload(i));
    }
    term(&mut server);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn cli_refuses_incomplete_or_bad_s3_settings() {
    let dir = tempdir("cli");
    let (image, creds) = setup(&dir);
    let bad = dir.join("bad.toml");
    std::fs::write(&bad, "[[credentials]]\naccess_key = \"a\"\n").unwrap();
    let bad = bad.display().to_string();
    for (args, want) in [
        (
            vec!["serve", "--image", &image, "--s3", "127.0.0.1:0"],
            "--s3-credentials",
        ),
        (
            vec![
                "serve",
                "--image",
                &image,
                "--s3",
                "127.0.0.1:0",
                "--s3-credentials",
                &bad,
            ],
            "secret_key",
        ),
        (
            vec![
                "serve",
                "--image",
                &image,
                "--s3",
                "127.0.0.1:0",
                "--s3-credentials",
                "/nonexistent",
            ],
            "/nonexistent",
        ),
        (
            vec![
                "serve",
                "--image",
                &image,
                "--listen",
                "127.0.0.1:0",
                "--s3-credentials",
                &creds,
            ],
            "--key-file",
        ),
    ] {
        let out = ossd(&args);
        assert!(!out.status.success(), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(want), "{args:?}: {err}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
