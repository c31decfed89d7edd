//! What the FUSE daemon tests share (`mount.rs`, `mount_blockfs.rs`, `blockdev_crash.rs`): the
//! check for /dev/fuse, signals to the daemon, and a scratch image mounted by `ossd mount
//! --daemon`, unmounted and killed however the test ends.

// Each test crate that includes this module uses part of it.
#![allow(dead_code)]

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rustix::process::{Pid, Signal};

pub const OSSD: &str = env!("CARGO_BIN_EXE_ossd");

/// Why the FUSE tests cannot run here, if they cannot.
pub fn missing_fuse() -> Option<String> {
    if !Path::new("/dev/fuse").exists() {
        return Some("/dev/fuse is missing".into());
    }
    let root = rustix::process::geteuid().is_root();
    let fusermount = Command::new("fusermount3").arg("-V").output().is_ok();
    if !root && !fusermount {
        return Some("not root and fusermount3 is missing (apt-get install fuse3)".into());
    }
    None
}

pub fn signal(pid: i32, sig: Signal) {
    if let Some(pid) = Pid::from_raw(pid) {
        let _ = rustix::process::kill_process(pid, sig);
    }
}

/// Whether `pid` runs. A zombie counts as gone: the daemon is not our child, but its parent
/// may be gone.
pub fn alive(pid: i32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|s| !s.split(") ").nth(1).is_some_and(|r| r.starts_with('Z')))
}

pub fn wait_gone(pid: i32) {
    let start = Instant::now();
    while alive(pid) {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "daemon {pid} did not end"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The daemon's pid in what `ossd mount --daemon` printed ("... (daemon pid N) ...").
pub fn daemon_pid(stdout: &[u8]) -> i32 {
    let text = String::from_utf8_lossy(stdout);
    text.split("daemon pid ")
        .nth(1)
        .and_then(|s| s.split(')').next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no pid in {text:?}"))
}

/// `len` bytes drawn from `seed`.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..len).map(|_| rng.gen()).collect()
}

/// A scratch directory with an image formatted for `fs` (`ossd format --fs`) and a mount
/// point; unmounts and kills what it started when dropped.
pub struct Rig {
    pub dir: PathBuf,
    pub image: PathBuf,
    pub mnt: PathBuf,
    pub pid: Option<i32>,
    fs: &'static str,
}

impl Rig {
    /// A fresh `tiny` image with `fs` on it, in `ossd-{fs}-{name}-{pid}` under the temp dir.
    pub fn new(fs_kind: &'static str, name: &str) -> Rig {
        let dir =
            std::env::temp_dir().join(format!("ossd-{fs_kind}-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(dir.join("mnt")).unwrap();
        let image = dir.join("dev.img");
        let out = Command::new(OSSD)
            .args(["format", "--device", "tiny", "--fs", fs_kind, "--image"])
            .arg(&image)
            .output()
            .unwrap();
        assert!(out.status.success(), "format: {out:?}");
        Rig {
            mnt: dir.join("mnt"),
            dir,
            image,
            pid: None,
            fs: fs_kind,
        }
    }

    pub fn p(&self, rel: &str) -> PathBuf {
        self.mnt.join(rel)
    }

    /// What the daemon printed.
    pub fn log(&self) -> String {
        fs::read_to_string(self.dir.join("daemon.log")).unwrap_or_default()
    }

    /// `ossd mount --fs FS --daemon`; returns once mounted.
    pub fn mount(&mut self) {
        let out = Command::new(OSSD)
            .args(["mount", "--fs", self.fs, "--daemon", "--image"])
            .arg(&self.image)
            .arg(&self.mnt)
            .arg("--log")
            .arg(self.dir.join("daemon.log"))
            .output()
            .unwrap();
        assert!(out.status.success(), "mount: {out:?}; log: {}", self.log());
        self.pid = Some(daemon_pid(&out.stdout));
    }

    /// SIGTERM: the daemon unmounts cleanly and exits.
    pub fn unmount(&mut self) {
        let pid = self.pid.take().unwrap();
        signal(pid, Signal::TERM);
        wait_gone(pid);
        let log = self.log();
        assert!(log.ends_with("closed cleanly\n"), "daemon log: {log}");
    }

    /// SIGKILL at whatever moment. The dead mount stays attached (every call on it fails
    /// with ENOTCONN) until it is unmounted.
    pub fn kill9(&mut self) {
        let pid = self.pid.take().unwrap();
        signal(pid, Signal::KILL);
        wait_gone(pid);
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        if let Some(pid) = self.pid.take() {
            signal(pid, Signal::KILL);
            wait_gone(pid);
        }
        let _ = mount::request_unmount(&self.mnt);
        let _ = fs::remove_dir_all(&self.dir);
    }
}
