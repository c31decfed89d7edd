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
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use vfs::FileSystem;

mod fuse_rig;

use fuse_rig::{missing_fuse, pattern, Rig, OSSD};

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

/// What only the blockfs tests ask of the rig.
impl Rig {
    /// blockfs's own check of the (unmounted) image, in this process.
    fn check(&self) -> Vec<String> {
        let (mut fs, _lock) = mount::blockfs_mount::open(&self.image).unwrap();
        let mut found = fs.inner().problems().to_vec();
        found.extend(fs.check().unwrap());
        found
    }
}

#[test]
fn blockfs_files_survive_a_clean_remount_and_unkept_calls_are_eopnotsupp() {
    require_fuse!("blockfs_files_survive_a_clean_remount_and_unkept_calls_are_eopnotsupp");
    let mut r = Rig::new("blockfs", "clean");
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
    let mut r = Rig::new("blockfs", "kill9");
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
