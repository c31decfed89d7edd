//! `ossd mount --fs blockfs` end to end, through the kernel: the ext4-like block file system on
//! the page-mapping FTL of an image, mounted with the same FUSE adapter as OFS. Files and
//! directories survive a clean unmount (SIGTERM) and remount; what blockfs does not keep
//! (rename, chmod) fails with EOPNOTSUPP; and a kill -9 loop (a writer creating, writing and
//! fsyncing files while the daemon is killed at random moments) keeps every fsync'ed file, with
//! the file system's own check clean at the end. Each export refuses the other's images.
//!
//! Without /dev/fuse (or, when not root, without fusermount3) the tests print `SKIPPED: ...`
//! to stderr and return.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rustix::process::{Pid, Signal};
use vfs::FileSystem;

const OSSD: &str = env!("CARGO_BIN_EXE_ossd");

fn missing_fuse() -> Option<String> {
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

macro_rules! require_fuse {
    ($test:expr) => {
        if let Some(why) = missing_fuse() {
            eprintln!(
                "SKIPPED: {}: {why}; the blockfs mount was NOT tested",
                $test
            );
            return;
        }
    };
}

struct Rig {
    dir: PathBuf,
    image: PathBuf,
    mnt: PathBuf,
    pid: Option<i32>,
}

fn signal(pid: i32, sig: Signal) {
    if let Some(pid) = Pid::from_raw(pid) {
        let _ = rustix::process::kill_process(pid, sig);
    }
}

fn alive(pid: i32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|s| !s.split(") ").nth(1).is_some_and(|r| r.starts_with('Z')))
}

fn wait_gone(pid: i32) {
    let start = Instant::now();
    while alive(pid) {
        assert!(start.elapsed() < Duration::from_secs(60), "{pid} lives on");
        std::thread::sleep(Duration::from_millis(10));
    }
}

impl Rig {
    fn new(name: &str) -> Rig {
        let dir = std::env::temp_dir().join(format!("ossd-blockfs-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(dir.join("mnt")).unwrap();
        let image = dir.join("dev.img");
        let out = Command::new(OSSD)
            .args(["format", "--device", "tiny", "--fs", "blockfs", "--image"])
            .arg(&image)
            .output()
            .unwrap();
        assert!(out.status.success(), "format: {out:?}");
        Rig {
            mnt: dir.join("mnt"),
            dir,
            image,
            pid: None,
        }
    }

    fn p(&self, rel: &str) -> PathBuf {
        self.mnt.join(rel)
    }

    fn log(&self) -> String {
        fs::read_to_string(self.dir.join("daemon.log")).unwrap_or_default()
    }

    fn mount(&mut self) {
        let out = Command::new(OSSD)
            .args(["mount", "--fs", "blockfs", "--daemon", "--image"])
            .arg(&self.image)
            .arg(&self.mnt)
            .arg("--log")
            .arg(self.dir.join("daemon.log"))
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "mount: {out:?}; log: {}", self.log());
        let pid = text
            .split("daemon pid ")
            .nth(1)
            .and_then(|s| s.split(')').next())
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("no pid in {text:?}"));
        self.pid = Some(pid);
    }

    fn unmount(&mut self) {
        let pid = self.pid.take().unwrap();
        signal(pid, Signal::TERM);
        wait_gone(pid);
        assert!(self.log().ends_with("closed cleanly\n"), "{}", self.log());
    }

    fn kill9(&mut self) {
        let pid = self.pid.take().unwrap();
        signal(pid, Signal::KILL);
        wait_gone(pid);
    }

    /// blockfs's own check of the (unmounted) image, in this process.
    fn check(&self) -> Vec<String> {
        let (mut fs, _lock) = mount::blockfs_mount::open(&self.image).unwrap();
        let mut found = fs.inner().problems().to_vec();
        found.extend(fs.check().unwrap());
        found
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

fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..len).map(|_| rng.gen()).collect()
}

#[test]
fn blockfs_files_survive_a_clean_remount_and_unkept_calls_are_eopnotsupp() {
    require_fuse!("blockfs_files_survive_a_clean_remount_and_unkept_calls_are_eopnotsupp");
    let mut r = Rig::new("clean");
    r.mount();
    fs::create_dir_all(r.p("a/b")).unwrap();
    let sizes = [0usize, 1, 4095, 4096, 70_000, 1 << 20];
    for (i, len) in sizes.iter().enumerate() {
        fs::write(r.p(&format!("a/b/f{i}")), pattern(i as u64, *len)).unwrap();
    }
    // Overwrite in the middle, then truncate.
    let mut f = fs::OpenOptions::new()
        .write(true)
        .open(r.p("a/b/f5"))
        .unwrap();
    std::io::Seek::seek(&mut f, std::io::SeekFrom::Start(1000)).unwrap();
    f.write_all(&[7u8; 5000]).unwrap();
    f.set_len(300_000).unwrap();
    f.sync_all().unwrap();
    drop(f);
    let mut f5 = pattern(5, 1 << 20);
    f5[1000..6000].fill(7);
    f5.truncate(300_000);
    fs::write(r.p("gone"), b"x").unwrap();
    fs::remove_file(r.p("gone")).unwrap();
    let e = |res: std::io::Result<()>| res.unwrap_err().raw_os_error();
    assert_eq!(
        e(fs::rename(r.p("a/b/f1"), r.p("a/f1"))),
        Some(libc_eopnotsupp())
    );
    assert_eq!(
        e(fs::hard_link(r.p("a/b/f1"), r.p("a/h"))),
        Some(libc_eopnotsupp())
    );
    assert_eq!(
        e(fs::remove_dir(r.p("a"))),
        Some(rustix::io::Errno::NOTEMPTY.raw_os_error())
    );
    let vfs = rustix::fs::statvfs(&r.mnt).unwrap();
    assert!(
        vfs.f_bfree > 0 && vfs.f_bfree < vfs.f_blocks,
        "{} {}",
        vfs.f_bfree,
        vfs.f_blocks
    );
    r.unmount();

    r.mount();
    for (i, len) in sizes.iter().enumerate().take(5) {
        assert_eq!(
            fs::read(r.p(&format!("a/b/f{i}"))).unwrap(),
            pattern(i as u64, *len),
            "f{i}"
        );
    }
    assert!(fs::read(r.p("a/b/f5")).unwrap() == f5, "f5 after remount");
    assert!(!r.p("gone").exists());
    r.unmount();
    assert_eq!(r.check(), Vec::<String>::new());

    // The raw block export and the OFS mount refuse the image.
    for args in [&["blockdev"][..], &["mount"][..]] {
        let out = Command::new(OSSD)
            .args(args)
            .arg("--image")
            .arg(&r.image)
            .arg(&r.mnt)
            .output()
            .unwrap();
        assert!(!out.status.success());
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("ext4-like block file system"),
            "{out:?}"
        );
    }
}

fn libc_eopnotsupp() -> i32 {
    rustix::io::Errno::OPNOTSUPP.raw_os_error()
}

#[test]
fn blockfs_keeps_fsynced_files_through_kill_9_of_the_daemon() {
    require_fuse!("blockfs_keeps_fsynced_files_through_kill_9_of_the_daemon");
    const CYCLES: u64 = 20;
    const FILES_PER_CYCLE: u64 = 25;
    let mut r = Rig::new("kill9");
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    let synced: Arc<Mutex<Vec<(String, u64, usize)>>> = Arc::default();
    for cycle in 0..CYCLES {
        r.mount();
        for (name, seed, len) in synced.lock().unwrap().iter() {
            let got = fs::read(r.p(name)).unwrap_or_else(|e| panic!("cycle {cycle}: {name}: {e}"));
            assert!(got == pattern(*seed, *len), "cycle {cycle}: {name} changed");
        }
        let mnt = r.mnt.clone();
        let log = synced.clone();
        let killed = Arc::new(AtomicBool::new(false));
        let was_killed = killed.clone();
        let writer = std::thread::spawn(move || {
            for i in 0..FILES_PER_CYCLE {
                let name = format!("c{cycle:02}-{i:04}");
                let seed = cycle * 10_000 + i;
                let len = 1 + (seed * 7919 % 9_000) as usize;
                let step = || -> std::io::Result<()> {
                    let mut f = fs::File::create_new(mnt.join(&name))?;
                    f.write_all(&pattern(seed, len))?;
                    f.sync_all()
                };
                match step() {
                    Ok(()) => log.lock().unwrap().push((name, seed, len)),
                    Err(_) if killed.load(Ordering::SeqCst) => return,
                    Err(e) => panic!("cycle {cycle}: {name}: {e} while the daemon lived"),
                }
            }
            while !killed.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(1));
            }
        });
        std::thread::sleep(Duration::from_millis(rng.gen_range(20..300)));
        was_killed.store(true, Ordering::SeqCst);
        r.kill9();
        writer.join().unwrap();
        mount::request_unmount(&r.mnt).unwrap();
    }
    r.mount();
    let n = synced.lock().unwrap().len();
    for (name, seed, len) in synced.lock().unwrap().iter() {
        assert!(
            fs::read(r.p(name)).unwrap() == pattern(*seed, *len),
            "{name} after the last kill"
        );
    }
    r.unmount();
    let problems = r.check();
    eprintln!(
        "blockfs kill -9 loop: {CYCLES} cycles, {n} fsync'ed files all intact; check after the \
         last clean unmount: {} problem(s) {problems:?}",
        problems.len()
    );
    assert!(problems.is_empty(), "{problems:?}");
    assert!(n >= CYCLES as usize, "too few files written: {n}");
}
