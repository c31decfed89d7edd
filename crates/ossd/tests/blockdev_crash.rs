//! A kill -9 crash loop of the block export under real ext4: `ossd blockdev` exports the
//! page-mapping FTL of an image as one file, a loop device on it carries `mkfs.ext4` (with its
//! journal), and a writer creates files, writes them and fsyncs each file and its directory.
//! At a random moment the export's daemon is killed with SIGKILL (a power cut of the device:
//! whatever the FTL had not flushed is gone). Then: ext4 is lazily unmounted, the loop device
//! detached, the dead FUSE mount detached; the image is exported again, ext4 is mounted (which
//! replays its journal) and unmounted, `fsck.ext4 -fn` must find it clean, and after mounting it
//! once more every file whose fsync returned must read back byte for byte.
//!
//! Needs root, /dev/fuse, losetup, mkfs.ext4 and fsck.ext4; without them it prints
//! `SKIPPED: ...` to stderr and returns.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rustix::process::Signal;

mod fuse_rig;

use fuse_rig::{alive, daemon_pid, pattern, signal, wait_gone, OSSD};
const CYCLES: u64 = 20;
const FILES_PER_CYCLE: u64 = 20;

fn missing() -> Option<String> {
    if !Path::new("/dev/fuse").exists() {
        return Some("/dev/fuse is missing".into());
    }
    if !rustix::process::geteuid().is_root() {
        return Some("not root (loop devices and mount need it)".into());
    }
    for tool in ["losetup", "mkfs.ext4", "fsck.ext4", "mount", "umount"] {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .output()
            .is_ok_and(|o| o.status.success());
        if !found {
            return Some(format!(
                "{tool} is missing (apt-get install e2fsprogs util-linux mount)"
            ));
        }
    }
    None
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn kill9(pid: i32) {
    signal(pid, Signal::KILL);
    wait_gone(pid);
}

/// The export, its loop device and the ext4 mount; torn down however the test ends.
struct Rig {
    dir: PathBuf,
    pid: Option<i32>,
    loopdev: Option<String>,
    ext_mounted: bool,
}

impl Rig {
    fn image(&self) -> PathBuf {
        self.dir.join("dev.img")
    }
    fn mnt(&self) -> PathBuf {
        self.dir.join("mnt")
    }
    fn ext(&self) -> PathBuf {
        self.dir.join("ext")
    }

    /// `ossd blockdev --daemon` and a loop device on its file.
    fn export(&mut self) {
        let out = run(Command::new(OSSD)
            .args(["blockdev", "--daemon", "--image"])
            .arg(self.image())
            .arg(self.mnt())
            .arg("--log")
            .arg(self.dir.join("daemon.log")));
        self.pid = Some(daemon_pid(out.as_bytes()));
        let dev = run(Command::new("losetup")
            .args(["-f", "--show"])
            .arg(self.mnt().join("disk")));
        self.loopdev = Some(dev.trim().to_string());
    }

    fn mount_ext4(&mut self) {
        let dev = self.loopdev.clone().unwrap();
        run(Command::new("mount").arg(&dev).arg(self.ext()));
        self.ext_mounted = true;
    }

    fn umount_ext4(&mut self) {
        run(Command::new("umount").arg(self.ext()));
        self.ext_mounted = false;
    }

    fn fsck(&self) {
        let dev = self.loopdev.clone().unwrap();
        let out = Command::new("fsck.ext4")
            .arg("-fn")
            .arg(&dev)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "fsck.ext4 -fn {dev}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// After the daemon is dead: ext4 is detached lazily (its writes fail: the device is
    /// gone), then the loop device, then the dead FUSE mount.
    fn detach_dead(&mut self) {
        if std::mem::take(&mut self.ext_mounted) {
            let _ = Command::new("umount").arg("-l").arg(self.ext()).status();
        }
        if let Some(dev) = self.loopdev.take() {
            let _ = Command::new("losetup")
                .args(["-d", &dev])
                .stderr(Stdio::null())
                .status();
        }
        let _ = mount::request_unmount(&self.mnt());
    }

    /// A clean end: ext4 unmounted, loop detached, the export ended (the FTL checkpoints).
    fn teardown(&mut self) {
        if std::mem::take(&mut self.ext_mounted) {
            let _ = Command::new("umount").arg(self.ext()).status();
        }
        if let Some(dev) = self.loopdev.take() {
            let _ = Command::new("losetup").args(["-d", &dev]).status();
        }
        let _ = mount::request_unmount(&self.mnt());
        if let Some(pid) = self.pid.take() {
            let start = Instant::now();
            while alive(pid) && start.elapsed() < Duration::from_secs(60) {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        if let Some(pid) = self.pid.take() {
            kill9(pid);
        }
        self.detach_dead();
        let _ = fs::remove_dir_all(&self.dir);
    }
}

#[test]
fn ext4_on_the_export_keeps_fsynced_files_through_kill_9_of_the_daemon() {
    if let Some(why) = missing() {
        eprintln!(
            "SKIPPED: the ext4 kill -9 crash loop on ossd blockdev: {why}; it was NOT tested"
        );
        return;
    }
    let dir = std::env::temp_dir().join(format!("ossd-blockdev-crash-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(dir.join("mnt")).unwrap();
    fs::create_dir_all(dir.join("ext")).unwrap();
    let mut rig = Rig {
        dir,
        pid: None,
        loopdev: None,
        ext_mounted: false,
    };
    run(Command::new(OSSD)
        .args(["format", "--device", "tiny", "--block", "--image"])
        .arg(rig.image()));
    rig.export();
    run(Command::new("mkfs.ext4")
        .args(["-q", "-F"])
        .arg(rig.loopdev.clone().unwrap()));
    rig.mount_ext4();
    let mut rng = ChaCha8Rng::seed_from_u64(17);
    let synced: Arc<Mutex<Vec<(String, u64, usize)>>> = Arc::default();
    let mut checked = 0usize;
    for cycle in 0..CYCLES {
        let ext = rig.ext();
        let log = synced.clone();
        let killed = Arc::new(AtomicBool::new(false));
        let was_killed = killed.clone();
        let writer = std::thread::spawn(move || {
            let dir = ext.join(format!("c{cycle:02}"));
            let step = |name: &str, seed: u64, len: usize| -> std::io::Result<()> {
                fs::create_dir_all(&dir)?;
                let mut f = fs::File::create_new(dir.join(name))?;
                f.write_all(&pattern(seed, len))?;
                f.sync_all()?;
                // The new entry is durable once its directory is synced too.
                fs::File::open(&dir)?.sync_all()
            };
            for i in 0..FILES_PER_CYCLE {
                let name = format!("f{i:03}");
                let seed = cycle * 1000 + i;
                let len = 1 + (seed * 7919 % 20_000) as usize;
                match step(&name, seed, len) {
                    Ok(()) => log
                        .lock()
                        .unwrap()
                        .push((format!("c{cycle:02}/{name}"), seed, len)),
                    Err(_) if killed.load(Ordering::SeqCst) => return,
                    Err(e) => panic!("cycle {cycle}: {name}: {e} while the daemon lived"),
                }
            }
            while !killed.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(1));
            }
        });
        std::thread::sleep(Duration::from_millis(rng.gen_range(50..600)));
        was_killed.store(true, Ordering::SeqCst);
        kill9(rig.pid.take().unwrap());
        writer.join().unwrap();
        rig.detach_dead();

        // The device comes back: the journal is replayed at mount, then fsck must be clean.
        rig.export();
        rig.mount_ext4();
        rig.umount_ext4();
        rig.fsck();
        rig.mount_ext4();
        for (name, seed, len) in synced.lock().unwrap().iter() {
            let got = fs::read(rig.ext().join(name))
                .unwrap_or_else(|e| panic!("cycle {cycle}: {name}: {e}"));
            assert!(got == pattern(*seed, *len), "cycle {cycle}: {name} changed");
            checked += 1;
        }
    }
    rig.teardown();
    let n = synced.lock().unwrap().len();
    eprintln!(
        "ext4 on ossd blockdev, kill -9 loop: {CYCLES} cycles, fsck.ext4 -fn clean after each; \
         {n} fsync'ed files, {checked} file checks, all intact"
    );
    assert!(n >= CYCLES as usize, "too few files written: {n}");
}
