//! `ossd mount --remote` end to end, through the kernel and over TCP: OSSD-13's two-machine
//! stack on one machine. `ossd serve` runs the object store on an image (the target); `ossd
//! mount --remote` runs OFS on the host and sends OSD commands, signed with capabilities, over
//! loopback. Checked: a store without OFS is refused until `--format`; a wrong key is refused;
//! files survive a clean remount, a kill -9 of the host and a kill -9 of the target (every
//! fsync'ed file intact); the
//! image, once the target has stopped, is clean under `ossd fsck` and mounts locally with the
//! same tree (the remote and the local OFS are one format).
//!
//! Without /dev/fuse these tests print `SKIPPED: ...` to stderr and return.

use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use rustix::process::Signal;

mod fuse_rig;

use fuse_rig::{daemon_pid, missing_fuse, pattern, signal, wait_gone, OSSD};

/// A scratch directory with a target serving an object-store image, and a mount point.
struct Remote {
    dir: PathBuf,
    image: PathBuf,
    key: PathBuf,
    mnt: PathBuf,
    server: Option<Child>,
    /// The target's stdout, kept open: it prints when it has closed the image.
    server_out: Option<BufReader<std::process::ChildStdout>>,
    addr: String,
    daemon: Option<i32>,
    /// `--direct` or nothing (OAQ on the host, the default).
    path: &'static [&'static str],
}

impl Remote {
    fn new(name: &str) -> Remote {
        let dir = std::env::temp_dir().join(format!("ossd-remote-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(dir.join("mnt")).unwrap();
        let (image, key) = (dir.join("dev.img"), dir.join("key"));
        ossd(&["format", "--device", "tiny", "--image", path(&image)]);
        ossd(&["keygen", "--out", path(&key)]);
        let mut r = Remote {
            mnt: dir.join("mnt"),
            dir,
            image,
            key,
            server: None,
            server_out: None,
            addr: String::new(),
            daemon: None,
            path: &[],
        };
        r.serve();
        r
    }

    /// Starts the target on a port the system picks; returns once it listens.
    fn serve(&mut self) {
        let mut child = Command::new(OSSD)
            .args([
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--image",
                path(&self.image),
            ])
            .args(["--key-file", path(&self.key)])
            .stdout(Stdio::piped())
            .stderr(fs::File::create(self.dir.join("serve.log")).unwrap())
            .spawn()
            .unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        self.server_out = Some(out);
        self.addr = line
            .strip_prefix("listening on ")
            .and_then(|s| s.split(' ').next())
            .unwrap_or_else(|| panic!("serve printed {line:?}"))
            .to_string();
        self.server = Some(child);
    }

    /// SIGTERM to the target: it drains, flushes and closes the image.
    fn stop_server(&mut self) {
        let mut child = self.server.take().unwrap();
        signal(child.id() as i32, Signal::TERM);
        let status = child.wait().unwrap();
        let mut rest = String::new();
        let _ = std::io::Read::read_to_string(self.server_out.as_mut().unwrap(), &mut rest);
        let log = fs::read_to_string(self.dir.join("serve.log")).unwrap_or_default();
        assert!(status.success(), "serve ended with {status}: {rest} {log}");
        assert!(rest.contains("closed"), "serve printed {rest}");
    }

    fn log(&self) -> String {
        fs::read_to_string(self.dir.join("daemon.log")).unwrap_or_default()
    }

    /// `ossd mount --remote ADDR --key-file KEY [extra] MNT --daemon`.
    fn mount_with(&mut self, key: &Path, extra: &[&str]) -> std::process::Output {
        let out = Command::new(OSSD)
            .args(["mount", "--remote", &self.addr, "--key-file", path(key)])
            .args(extra)
            .args(self.path)
            .args(["--daemon", "--log", path(&self.dir.join("daemon.log"))])
            .arg(&self.mnt)
            .output()
            .unwrap();
        if out.status.success() {
            self.daemon = Some(daemon_pid(&out.stdout));
        }
        out
    }

    fn mount(&mut self, extra: &[&str]) {
        let key = self.key.clone();
        let out = self.mount_with(&key, extra);
        assert!(out.status.success(), "mount: {out:?}; log: {}", self.log());
    }

    fn unmount(&mut self) {
        let pid = self.daemon.take().unwrap();
        signal(pid, Signal::TERM);
        wait_gone(pid);
        let log = self.log();
        assert!(
            log.ends_with("marked clean and flushed\n"),
            "daemon log: {log}"
        );
    }

    fn kill9(&mut self) {
        let pid = self.daemon.take().unwrap();
        signal(pid, Signal::KILL);
        wait_gone(pid);
        mount::request_unmount(&self.mnt).unwrap();
    }

    fn p(&self, rel: &str) -> PathBuf {
        self.mnt.join(rel)
    }
}

impl Drop for Remote {
    fn drop(&mut self) {
        if let Some(pid) = self.daemon.take() {
            signal(pid, Signal::KILL);
            wait_gone(pid);
        }
        let _ = mount::request_unmount(&self.mnt);
        if let Some(mut c) = self.server.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = fs::remove_dir_all(&self.dir);
    }
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn ossd(args: &[&str]) -> String {
    let out = Command::new(OSSD).args(args).output().unwrap();
    assert!(out.status.success(), "ossd {args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Writes `len` bytes of `pattern(seed)` to a new file and fsyncs it.
fn write_synced(p: &Path, seed: u64, len: usize) {
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .open(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    f.write_all(&pattern(seed, len)).unwrap();
    f.sync_all().unwrap();
}

/// The files the test keeps: (path under the mount, seed, length).
type Tree = Vec<(String, u64, usize)>;

fn check(root: &Path, tree: &Tree, when: &str) {
    for (name, seed, len) in tree {
        let got = fs::read(root.join(name)).unwrap_or_else(|e| panic!("{when}: {name}: {e}"));
        assert!(got == pattern(*seed, *len), "{when}: {name} differs");
    }
}

#[test]
fn remote_ofs_through_oaq_survives_remount_and_kill_9_and_mounts_locally() {
    if let Some(why) = missing_fuse() {
        eprintln!("SKIPPED: remote_ofs_through_oaq_...: {why}; the remote mount was NOT tested");
        return;
    }
    scenario(Remote::new("oaq"), "OAQ");
}

#[test]
fn remote_ofs_called_directly_survives_remount_and_kill_9_and_mounts_locally() {
    if let Some(why) = missing_fuse() {
        eprintln!(
            "SKIPPED: remote_ofs_called_directly_...: {why}; the remote mount was NOT tested"
        );
        return;
    }
    let mut r = Remote::new("direct");
    r.path = &["--direct"];
    scenario(r, "direct calls");
}

fn scenario(mut r: Remote, host_path: &str) {
    // A store without OFS is refused until --format; a wrong key is refused by the target.
    let key = r.key.clone();
    let out = r.mount_with(&key, &[]);
    assert!(!out.status.success());
    assert!(r.log().contains("holds no OFS"), "{}", r.log());
    let wrong = r.dir.join("wrong.key");
    ossd(&["keygen", "--out", path(&wrong)]);
    let out = r.mount_with(&wrong, &["--format"]);
    assert!(!out.status.success(), "a wrong key mounted");
    assert!(r.log().contains("refused"), "{}", r.log());

    r.mount(&["--format"]);
    let mut tree: Tree = Vec::new();
    fs::create_dir_all(r.p("a/b")).unwrap();
    for i in 0..12u64 {
        let name = format!("a/b/f{i:02}");
        let len = (i as usize * 7_919) % 40_000 + 1;
        write_synced(&r.p(&name), i, len);
        tree.push((name, i, len));
    }
    fs::rename(r.p("a/b/f00"), r.p("a/renamed")).unwrap();
    tree[0].0 = "a/renamed".into();
    fs::remove_file(r.p("a/b/f01")).unwrap();
    tree.remove(1);
    std::os::unix::fs::symlink("b/f02", r.p("a/link")).unwrap();
    // Statistics of the remote mount name the target's device.
    let stats = fs::read_to_string(r.p(".ossd-stats.json")).unwrap();
    assert!(
        stats.contains("remote_target")
            && stats.contains("capacity_bytes")
            && stats.contains(host_path),
        "{stats}"
    );
    r.unmount();

    // A clean remount sees everything.
    r.mount(&[]);
    check(&r.mnt, &tree, "after a clean remount");
    assert_eq!(fs::read_link(r.p("a/link")).unwrap(), Path::new("b/f02"));
    assert!(!r.p("a/b/f01").exists());

    // kill -9 of the host side: every fsync'ed file is intact after the next mount.
    for i in 100..110u64 {
        let name = format!("k{i}");
        let len = (i as usize * 3_331) % 20_000 + 1;
        write_synced(&r.p(&name), i, len);
        tree.push((name, i, len));
    }
    r.kill9();
    r.mount(&[]);
    assert!(r.log().contains("repaired"), "{}", r.log());
    check(&r.mnt, &tree, "after kill -9 of the host");

    // kill -9 of the target: a FLUSH it replied to was durable on its flash, so every file
    // fsync'ed over the wire is intact after it restarts (recovery) and the host remounts.
    for i in 200..210u64 {
        let name = format!("t{i}");
        let len = (i as usize * 1_777) % 30_000 + 1;
        write_synced(&r.p(&name), i, len);
        tree.push((name, i, len));
    }
    let mut server = r.server.take().unwrap();
    server.kill().unwrap();
    server.wait().unwrap();
    assert!(
        fs::read(r.p("t200")).is_err(),
        "a read succeeded with the target gone"
    );
    r.kill9();
    r.serve();
    r.mount(&[]);
    check(&r.mnt, &tree, "after kill -9 of the target");
    r.unmount();

    // The target stops cleanly; the image is clean and mounts locally with the same tree.
    r.stop_server();
    let report = ossd(&["fsck", "--image", path(&r.image)]);
    assert!(report.contains("clean"), "{report}");
    let out = Command::new(OSSD)
        .args(["mount", "--daemon", "--image", path(&r.image)])
        .args(["--log", path(&r.dir.join("local.log"))])
        .arg(&r.mnt)
        .output()
        .unwrap();
    assert!(out.status.success(), "local mount: {out:?}");
    r.daemon = Some(daemon_pid(&out.stdout));
    check(&r.mnt, &tree, "mounted locally");
    let pid = r.daemon.take().unwrap();
    signal(pid, Signal::TERM);
    wait_gone(pid);
    eprintln!(
        "remote mount: {} files intact through a clean remount, kill -9 and a local mount",
        tree.len()
    );
}
