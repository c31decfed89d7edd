//! Ordinary S3 clients against `ossd serve --s3`: boto3 (every operation, tests/s3_tools/
//! boto3_ops.py), the AWS CLI and s3cmd (buckets, small and multipart uploads, listings,
//! downloads, ranges, presigned URLs, deletes, a wrong secret). A tool that is not installed is
//! reported as `SKIPPED: ... NOT tested` and the test passes; `.ci/run` installs all three
//! (`pip install boto3 awscli s3cmd`).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_ossd");
const ACCESS: &str = "toolsuser";
const SECRET: &str = "tools-secret-key-123";

fn tempdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ossd-s3tools-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

struct Server {
    child: Child,
    addr: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }
}

/// `ossd serve --s3` on a fresh in-memory RawSSD (4 GiB; nothing persists).
fn serve(dir: &Path) -> Server {
    let creds = dir.join("creds.toml");
    std::fs::write(
        &creds,
        format!("[[credentials]]\naccess_key = \"{ACCESS}\"\nsecret_key = \"{SECRET}\"\n"),
    )
    .unwrap();
    let mut child = Command::new(BIN)
        .args([
            "serve",
            "--memory",
            "rawssd",
            "--s3",
            "127.0.0.1:0",
            "--s3-credentials",
        ])
        .arg(&creds)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    let addr = line
        .strip_prefix("s3 listening on ")
        .and_then(|r| r.split_whitespace().next())
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .to_string();
    std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
    Server { child, addr }
}

fn runs(cmd: &str, args: &[&str]) -> bool {
    Command::new(cmd)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn skipped(what: &str) {
    println!("SKIPPED: {what} NOT tested");
    eprintln!("SKIPPED: {what} NOT tested");
}

fn ok(out: &Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what}: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).to_string()
}

fn payload(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn md5_hex(data: &[u8]) -> String {
    use md5::{Digest, Md5};
    Md5::digest(data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[test]
fn boto3_every_operation() {
    if !runs("python3", &["-c", "import boto3"]) {
        return skipped("boto3 (pip install boto3) against ossd serve --s3:");
    }
    let dir = tempdir("boto3");
    let srv = serve(&dir);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/s3_tools/boto3_ops.py");
    let out = Command::new("python3")
        .arg(&script)
        .arg(format!("http://{}", srv.addr))
        .args([ACCESS, SECRET])
        .output()
        .unwrap();
    let stdout = ok(&out, "boto3_ops.py");
    println!("{}", stdout.lines().last().unwrap_or(""));
    drop(srv);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn aws_cli_buckets_copies_listings_multipart_presign() {
    if !runs("aws", &["--version"]) {
        return skipped("the AWS CLI (pip install awscli) against ossd serve --s3:");
    }
    let dir = tempdir("awscli");
    let srv = serve(&dir);
    let endpoint = format!("http://{}", srv.addr);
    let aws = |secret: &str, args: &[&str]| -> Output {
        Command::new("aws")
            .arg("--endpoint-url")
            .arg(&endpoint)
            .args(args)
            .env("AWS_ACCESS_KEY_ID", ACCESS)
            .env("AWS_SECRET_ACCESS_KEY", secret)
            .env("AWS_DEFAULT_REGION", "us-east-1")
            .env("AWS_CONFIG_FILE", dir.join("no-config"))
            .env("AWS_SHARED_CREDENTIALS_FILE", dir.join("no-credentials"))
            .env("AWS_EC2_METADATA_DISABLED", "true")
            .output()
            .unwrap()
    };
    let small = dir.join("small.txt");
    std::fs::write(&small, b"hello from the aws cli\n").unwrap();
    // 17 MiB: the CLI uploads it in 8 MiB parts (multipart).
    let big_data = payload(3, 17 << 20);
    let big = dir.join("big.bin");
    std::fs::write(&big, &big_data).unwrap();
    let s = |p: &Path| p.display().to_string();

    ok(&aws(SECRET, &["s3", "mb", "s3://cli-bucket"]), "mb");
    ok(
        &aws(
            SECRET,
            &["s3", "cp", &s(&small), "s3://cli-bucket/small.txt"],
        ),
        "cp small",
    );
    ok(
        &aws(
            SECRET,
            &["s3", "cp", &s(&big), "s3://cli-bucket/dir/big.bin"],
        ),
        "cp big",
    );
    let ls = ok(&aws(SECRET, &["s3", "ls", "s3://cli-bucket/"]), "ls");
    assert!(ls.contains("PRE dir/") && ls.contains("small.txt"), "{ls}");
    let ls = ok(
        &aws(SECRET, &["s3", "ls", "--recursive", "s3://cli-bucket/"]),
        "ls -r",
    );
    assert!(
        ls.contains("dir/big.bin") && ls.contains(&(17u64 << 20).to_string()),
        "{ls}"
    );
    let back = dir.join("big.back");
    ok(
        &aws(
            SECRET,
            &["s3", "cp", "s3://cli-bucket/dir/big.bin", &s(&back)],
        ),
        "cp down",
    );
    assert!(
        std::fs::read(&back).unwrap() == big_data,
        "downloaded bytes differ"
    );
    let head = ok(
        &aws(
            SECRET,
            &[
                "s3api",
                "head-object",
                "--bucket",
                "cli-bucket",
                "--key",
                "small.txt",
            ],
        ),
        "head-object",
    );
    assert!(
        head.contains(&md5_hex(b"hello from the aws cli\n")),
        "{head}"
    );
    let head = ok(
        &aws(
            SECRET,
            &[
                "s3api",
                "head-object",
                "--bucket",
                "cli-bucket",
                "--key",
                "dir/big.bin",
            ],
        ),
        "head-object big",
    );
    assert!(head.contains("-3\\\""), "a 3-part multipart ETag: {head}");
    let part = dir.join("part");
    ok(
        &aws(
            SECRET,
            &[
                "s3api",
                "get-object",
                "--bucket",
                "cli-bucket",
                "--key",
                "small.txt",
                "--range",
                "bytes=6-9",
                &s(&part),
            ],
        ),
        "get-object range",
    );
    assert_eq!(std::fs::read(&part).unwrap(), b"from");
    ok(
        &aws(
            SECRET,
            &[
                "s3",
                "cp",
                "s3://cli-bucket/small.txt",
                "s3://cli-bucket/copy.txt",
            ],
        ),
        "copy",
    );
    let url = ok(
        &aws(
            SECRET,
            &[
                "s3",
                "presign",
                "s3://cli-bucket/copy.txt",
                "--expires-in",
                "60",
            ],
        ),
        "presign",
    );
    let path = url
        .trim()
        .split_once(&srv.addr)
        .map(|(_, p)| p.to_string())
        .unwrap();
    let mut c = s3::client::Client::new(&srv.addr, "unused", "unused-secret");
    let r = c.get_url(&path).unwrap();
    assert_eq!(
        (r.status, r.body.as_slice()),
        (200, &b"hello from the aws cli\n"[..])
    );
    let bad = aws("wrong-secret", &["s3", "ls", "s3://cli-bucket/"]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("SignatureDoesNotMatch"));
    ok(
        &aws(SECRET, &["s3", "rm", "s3://cli-bucket/small.txt"]),
        "rm",
    );
    let rb = aws(SECRET, &["s3", "rb", "s3://cli-bucket"]);
    assert!(!rb.status.success(), "rb of a bucket with keys must fail");
    assert!(String::from_utf8_lossy(&rb.stderr).contains("BucketNotEmpty"));
    ok(
        &aws(SECRET, &["s3", "rb", "--force", "s3://cli-bucket"]),
        "rb --force",
    );
    let ls = ok(&aws(SECRET, &["s3", "ls"]), "ls buckets");
    assert!(!ls.contains("cli-bucket"), "{ls}");
    println!("aws cli: mb, cp (small, 3-part multipart, down, copy), ls, head-object, ranged get-object, presign, rm, rb checked");
    drop(srv);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn s3cmd_buckets_puts_multipart_gets_deletes() {
    if !runs("s3cmd", &["--version"]) {
        return skipped("s3cmd (pip install s3cmd) against ossd serve --s3:");
    }
    let dir = tempdir("s3cmd");
    let srv = serve(&dir);
    let cfg = dir.join("s3cfg");
    let write_cfg = |path: &Path, secret: &str| {
        std::fs::write(
            path,
            format!(
                "[default]\naccess_key = {ACCESS}\nsecret_key = {secret}\nhost_base = {0}\nhost_bucket = {0}\nuse_https = False\nsignature_v2 = False\nbucket_location = us-east-1\n",
                srv.addr
            ),
        )
        .unwrap();
    };
    write_cfg(&cfg, SECRET);
    let s3cmd = |cfg: &Path, args: &[&str]| -> Output {
        Command::new("s3cmd")
            .arg("-c")
            .arg(cfg)
            .args(args)
            .output()
            .unwrap()
    };
    let s = |p: &Path| p.display().to_string();
    let small = dir.join("a.txt");
    std::fs::write(&small, b"s3cmd small object").unwrap();
    let big_data = payload(9, 12 << 20);
    let big = dir.join("big.bin");
    std::fs::write(&big, &big_data).unwrap();

    ok(&s3cmd(&cfg, &["mb", "s3://s3cmd-bucket"]), "mb");
    ok(
        &s3cmd(&cfg, &["put", &s(&small), "s3://s3cmd-bucket/a.txt"]),
        "put",
    );
    ok(
        &s3cmd(
            &cfg,
            &[
                "put",
                "--multipart-chunk-size-mb=5",
                &s(&big),
                "s3://s3cmd-bucket/d/big.bin",
            ],
        ),
        "put multipart",
    );
    let ls = ok(&s3cmd(&cfg, &["ls", "s3://s3cmd-bucket/"]), "ls");
    assert!(
        ls.contains("DIR") && ls.contains("s3://s3cmd-bucket/d/") && ls.contains("a.txt"),
        "{ls}"
    );
    let la = ok(&s3cmd(&cfg, &["ls", "-r", "s3://s3cmd-bucket"]), "ls -r");
    assert!(la.contains("d/big.bin"), "{la}");
    let back = dir.join("big.back");
    ok(
        &s3cmd(&cfg, &["get", "s3://s3cmd-bucket/d/big.bin", &s(&back)]),
        "get",
    );
    assert!(
        std::fs::read(&back).unwrap() == big_data,
        "downloaded bytes differ"
    );
    let info = ok(&s3cmd(&cfg, &["info", "s3://s3cmd-bucket/a.txt"]), "info");
    assert!(info.contains(&md5_hex(b"s3cmd small object")), "{info}");
    let bad_cfg = dir.join("bad.s3cfg");
    write_cfg(&bad_cfg, "wrong-secret");
    let bad = s3cmd(&bad_cfg, &["ls", "s3://s3cmd-bucket/"]);
    assert!(!bad.status.success(), "a wrong secret must be refused");
    ok(
        &s3cmd(
            &cfg,
            &[
                "del",
                "s3://s3cmd-bucket/a.txt",
                "s3://s3cmd-bucket/d/big.bin",
            ],
        ),
        "del",
    );
    ok(&s3cmd(&cfg, &["rb", "s3://s3cmd-bucket"]), "rb");
    println!(
        "s3cmd: mb, put (small, 3-part multipart), ls, get, info, del, rb, wrong secret checked"
    );
    drop(srv);
    let _ = std::fs::remove_dir_all(&dir);
}
