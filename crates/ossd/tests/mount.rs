//! `ossd mount` end to end, through the kernel: the built `ossd` binary formats a small image,
//! mounts it in the background (`--daemon`), and real file operations run through `std::fs` and
//! rustix (xattr calls, statvfs) on the mount point. Then: a clean unmount (SIGTERM) and remount keep everything; and a
//! crash loop kills the daemon with SIGKILL at random moments while a writer creates, writes
//! and fsyncs files, remounts, and checks that every file whose fsync returned is intact, and
//! that fsck of the image is clean at the end.
//!
//! Without /dev/fuse (or, when not root, without fusermount3) these tests print `SKIPPED: ...`
//! to stderr and return.

use std::fs;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rustix::fs::{StatVfs, XattrFlags};
use rustix::io::Errno;

mod fuse_rig;

use fuse_rig::{missing_fuse, pattern, Rig, OSSD};

macro_rules! require_fuse {
    ($test:expr) => {
        if let Some(why) = missing_fuse() {
            eprintln!("SKIPPED: {}: {why}; the FUSE mount was NOT tested", $test);
            return;
        }
    };
}

/// What only the OFS tests ask of the rig.
impl Rig {
    fn detach(&self) {
        mount::request_unmount(&self.mnt).unwrap();
    }

    fn fsck(&self) -> String {
        let out = Command::new(OSSD)
            .args(["fsck", "--image"])
            .arg(&self.image)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(out.status.success(), "fsck: {text} {out:?}");
        text
    }
}

fn errno(r: std::io::Result<impl std::fmt::Debug>) -> i32 {
    r.expect_err("an error").raw_os_error().unwrap_or(0)
}

/// Sends `sig` to a process the test started (ignoring a process gone already).
/// setxattr(2): 0, or the errno.
fn setxattr(p: &Path, name: &str, value: &[u8], flags: XattrFlags) -> i32 {
    match rustix::fs::setxattr(p, name, value, flags) {
        Ok(()) => 0,
        Err(e) => e.raw_os_error(),
    }
}

/// getxattr(2) into a 256-byte buffer: the value, or the errno.
fn getxattr(p: &Path, name: &str) -> Result<Vec<u8>, i32> {
    let mut buf = vec![0u8; 256];
    let n = rustix::fs::getxattr(p, name, &mut buf[..]).map_err(|e| e.raw_os_error())?;
    buf.truncate(n);
    Ok(buf)
}

/// listxattr(2) into a 1,024-byte buffer: the names.
fn listxattr(p: &Path) -> Vec<String> {
    let mut buf = vec![0u8; 1024];
    let n = rustix::fs::listxattr(p, &mut buf[..]).unwrap_or_else(|e| panic!("listxattr: {e}"));
    buf.truncate(n);
    buf.split(|&b| b == 0)
        .filter(|s| !s.is_empty())
        .map(|s| String::from_utf8_lossy(s).to_string())
        .collect()
}

fn statvfs(p: &Path) -> StatVfs {
    rustix::fs::statvfs(p).unwrap()
}

const FIVE_GIB: u64 = 5 << 30;

/// What the first mount leaves, checked again after a clean remount.
fn check_tree(r: &Rig) {
    assert_eq!(fs::read(r.p("dir2/renamed")).unwrap(), b"new contents");
    assert!(!r.p("dir1/old").exists());
    assert_eq!(
        fs::read_link(r.p("link")).unwrap(),
        Path::new("dir2/renamed")
    );
    assert_eq!(fs::read(r.p("link")).unwrap(), b"new contents");
    let a = fs::metadata(r.p("dir2/renamed")).unwrap();
    let b = fs::metadata(r.p("hard")).unwrap();
    assert_eq!((a.ino(), a.nlink()), (b.ino(), 2));
    assert_eq!(a.permissions().mode() & 0o7777, 0o640);
    assert_eq!(getxattr(&r.p("hard"), "user.colour"), Ok(b"blue".to_vec()));
    assert_eq!(
        getxattr(&r.p("hard"), "user.ossd.priority"),
        Ok(b"2".to_vec())
    );
    let mut names = listxattr(&r.p("hard"));
    names.sort();
    assert_eq!(names, ["user.colour", "user.ossd.priority"]);
    assert_eq!(
        getxattr(&r.p("hard"), "user.gone"),
        Err(Errno::NODATA.raw_os_error())
    );
    let log = fs::read(r.p("log")).unwrap();
    assert_eq!(log, b"one\ntwo\nthree\n");
    assert_eq!(fs::metadata(r.p("trunc")).unwrap().len(), 3000);
    assert_eq!(
        fs::read(r.p("trunc")).unwrap()[..1000],
        pattern(7, 1000)[..]
    );
    assert!(fs::read(r.p("trunc")).unwrap()[1000..]
        .iter()
        .all(|&b| b == 0));
    let mut f = fs::File::open(r.p("sparse")).unwrap();
    assert_eq!(f.metadata().unwrap().len(), FIVE_GIB + 5);
    let mut buf = [1u8; 4096];
    f.seek(SeekFrom::Start(FIVE_GIB - 4091)).unwrap();
    f.read_exact(&mut buf).unwrap();
    assert!(buf[..4091].iter().all(|&b| b == 0), "a hole reads as zeros");
    assert_eq!(&buf[4091..], &b"tail\0"[..5]);
    let mut big: Vec<String> = fs::read_dir(r.p("big"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .collect();
    big.sort();
    let mut want: Vec<String> = (0..1500).map(|i| format!("entry-{i:05}")).collect();
    want.sort();
    assert_eq!(big, want, "every entry of a large directory, once");
    assert_eq!(fs::read(r.p("big/entry-01234")).unwrap(), b"1234");
}

#[test]
fn posix_operations_survive_a_clean_remount() {
    require_fuse!("posix_operations_survive_a_clean_remount");
    let mut r = Rig::new("ofs", "posix");
    r.mount();

    // create, write, rename over an existing name and across directories
    fs::create_dir(r.p("dir1")).unwrap();
    fs::create_dir(r.p("dir2")).unwrap();
    fs::write(r.p("dir1/old"), b"new contents").unwrap();
    fs::write(r.p("dir2/renamed"), b"to be replaced").unwrap();
    fs::rename(r.p("dir1/old"), r.p("dir2/renamed")).unwrap();
    // symlink, hard link, chmod, xattrs (user.ossd.priority is the object's priority class)
    std::os::unix::fs::symlink("dir2/renamed", r.p("link")).unwrap();
    fs::hard_link(r.p("dir2/renamed"), r.p("hard")).unwrap();
    fs::set_permissions(r.p("hard"), fs::Permissions::from_mode(0o640)).unwrap();
    assert_eq!(
        setxattr(&r.p("hard"), "user.colour", b"blue", XattrFlags::empty()),
        0
    );
    assert_eq!(
        setxattr(&r.p("hard"), "user.colour", b"red", XattrFlags::CREATE),
        Errno::EXIST.raw_os_error()
    );
    assert_eq!(
        setxattr(&r.p("hard"), "user.gone", b"x", XattrFlags::empty()),
        0
    );
    assert_eq!(rustix::fs::removexattr(r.p("hard"), "user.gone"), Ok(()));
    assert_eq!(
        setxattr(
            &r.p("hard"),
            "user.ossd.priority",
            b"2",
            XattrFlags::empty()
        ),
        0
    );
    assert_eq!(
        setxattr(
            &r.p("hard"),
            "user.ossd.priority",
            b"999",
            XattrFlags::empty()
        ),
        Errno::INVAL.raw_os_error()
    );
    assert_eq!(
        setxattr(&r.p("hard"), "trusted.x", b"1", XattrFlags::empty()),
        Errno::OPNOTSUPP.raw_os_error()
    );
    assert_eq!(
        setxattr(&r.p("hard"), "user.big", &[b'x'; 200], XattrFlags::empty()),
        Errno::NOSPC.raw_os_error()
    );
    // O_APPEND
    for line in ["one\n", "two\n", "three\n"] {
        let mut f = fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(r.p("log"))
            .unwrap();
        f.write_all(line.as_bytes()).unwrap();
    }
    // truncate down and up, sparse files beyond 4 GiB, fsync and fdatasync
    {
        let mut f = fs::File::create(r.p("trunc")).unwrap();
        f.write_all(&pattern(7, 5000)).unwrap();
        f.set_len(1000).unwrap();
        f.set_len(3000).unwrap();
        f.sync_data().unwrap();
        let mut f = fs::File::create(r.p("sparse")).unwrap();
        f.seek(SeekFrom::Start(FIVE_GIB)).unwrap();
        f.write_all(b"tail\0").unwrap();
        f.sync_all().unwrap();
    }
    // a large directory, read with offsets
    fs::create_dir(r.p("big")).unwrap();
    for i in 0..1500 {
        fs::write(r.p(&format!("big/entry-{i:05}")), i.to_string()).unwrap();
    }
    // errors map to errno values
    assert_eq!(errno(fs::read(r.p("nothing"))), Errno::NOENT.raw_os_error());
    assert_eq!(
        errno(fs::create_dir(r.p("dir1"))),
        Errno::EXIST.raw_os_error()
    );
    assert_eq!(
        errno(fs::remove_dir(r.p("big"))),
        Errno::NOTEMPTY.raw_os_error()
    );
    assert_eq!(
        errno(fs::remove_file(r.p("dir1"))),
        Errno::ISDIR.raw_os_error()
    );
    assert_eq!(errno(fs::read(r.p("log/x"))), Errno::NOTDIR.raw_os_error());
    assert_eq!(
        errno(fs::write(r.p(&"n".repeat(300)), b"")),
        Errno::NAMETOOLONG.raw_os_error()
    );
    assert_eq!(
        errno(fs::rename(r.p("dir2"), r.p("dir2/inside"))),
        Errno::INVAL.raw_os_error()
    );
    assert_eq!(
        errno(fs::hard_link(r.p("dir1"), r.p("dirlink"))),
        Errno::PERM.raw_os_error()
    );
    let excl = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(r.p("log"));
    assert_eq!(errno(excl), Errno::EXIST.raw_os_error());
    // statfs reports the device's space: what the files take is not free
    let s = statvfs(&r.mnt);
    assert!(
        s.f_blocks > 0 && s.f_bfree < s.f_blocks,
        "statfs {} {}",
        s.f_bfree,
        s.f_blocks
    );
    check_tree(&r);

    r.unmount();
    assert!(r.fsck().contains("OFS: 0 problems"));
    r.mount();
    check_tree(&r);
    // chown and utimens keep too (as root only: others may not chown)
    let t = std::time::UNIX_EPOCH + Duration::from_secs(1_000_000_000);
    fs::File::options()
        .write(true)
        .open(r.p("log"))
        .unwrap()
        .set_modified(t)
        .unwrap();
    assert_eq!(fs::metadata(r.p("log")).unwrap().mtime(), 1_000_000_000);
    r.unmount();
    r.mount();
    assert_eq!(fs::metadata(r.p("log")).unwrap().mtime(), 1_000_000_000);
    r.unmount();
}

#[test]
fn fsynced_files_survive_kill_9_of_the_daemon() {
    require_fuse!("fsynced_files_survive_kill_9_of_the_daemon");
    const CYCLES: u64 = 24;
    const FILES_PER_CYCLE: u64 = 30;
    let mut r = Rig::new("ofs", "kill9");
    let mut rng = ChaCha8Rng::seed_from_u64(9);
    // Every file whose fsync returned: (name, seed, length).
    let synced: Arc<Mutex<Vec<(String, u64, usize)>>> = Arc::default();
    for cycle in 0..CYCLES {
        r.mount();
        // Everything fsync'ed before is intact.
        for (name, seed, len) in synced.lock().unwrap().iter() {
            let got = fs::read(r.p(name)).unwrap_or_else(|e| panic!("cycle {cycle}: {name}: {e}"));
            assert!(got == pattern(*seed, *len), "cycle {cycle}: {name} changed");
        }
        let mnt = r.mnt.clone();
        let log = synced.clone();
        let killed = Arc::new(AtomicBool::new(false));
        let was_killed = killed.clone();
        let writer = std::thread::spawn(move || {
            for i in 0.. {
                if i >= FILES_PER_CYCLE {
                    // The tiny device must not fill up: wait for the kill.
                    while !killed.load(Ordering::SeqCst) {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    return i;
                }
                let name = format!("c{cycle:02}-{i:04}");
                let seed = cycle * 10_000 + i;
                let len = 1 + (seed * 7919 % 6_000) as usize;
                let step = || -> std::io::Result<()> {
                    let mut f = fs::OpenOptions::new()
                        .write(true)
                        .create_new(true)
                        .mode(0o644)
                        .open(mnt.join(&name))?;
                    f.write_all(&pattern(seed, len))?;
                    f.sync_all()
                };
                match step() {
                    Ok(()) => log.lock().unwrap().push((name, seed, len)),
                    // The daemon is gone: the mount answers ENOTCONN or ECONNABORTED (or,
                    // for a call it was killed in the middle of, EIO).
                    Err(_) if killed.load(Ordering::SeqCst) => return i,
                    Err(e) => panic!("cycle {cycle}: {name}: {e} while the daemon lived"),
                }
            }
            unreachable!()
        });
        std::thread::sleep(Duration::from_millis(rng.gen_range(20..400)));
        was_killed.store(true, Ordering::SeqCst);
        r.kill9();
        // The writer stops at its first call on the dead mount; only then is it detached
        // (after that, calls would reach the empty directory beneath).
        writer.join().unwrap();
        r.detach();
    }
    r.mount();
    let n = synced.lock().unwrap().len();
    for (name, seed, len) in synced.lock().unwrap().iter() {
        assert!(
            fs::read(r.p(name)).unwrap() == pattern(*seed, *len),
            "{name} after the last cut"
        );
    }
    r.unmount();
    let report = r.fsck();
    assert!(
        report.contains("OFS: 0 problems") && report.contains("clean"),
        "{report}"
    );
    eprintln!("kill -9 loop: {CYCLES} cycles, {n} fsync'ed files all intact, fsck clean");
    assert!(
        n >= CYCLES as usize,
        "too few files were written to test anything: {n}"
    );
}

/// What pjdfstest found (scripts/mount-conformance.sh runs it): a file removed while open
/// stays readable and writable through its descriptor; FIFOs and device nodes; a directory's
/// link count; every call stamps a later time than the one before, even with no pause.
/// `.ossd-stats.json` at the root is a fresh, read-only document while mounted: host writes
/// and OAQ's OIOs grow with the program's I/O, the file refuses writes and cannot be replaced,
/// `ossd stats` summarizes it, and the same document lands beside the image on unmount.
#[test]
fn live_statistics_while_mounted_and_on_unmount() {
    require_fuse!("live_statistics_while_mounted_and_on_unmount");
    let mut r = Rig::new("ofs", "stats");
    r.mount();
    let stats = r.p(".ossd-stats.json");
    let read = || -> serde_json::Value {
        serde_json::from_str(&fs::read_to_string(r.p(".ossd-stats.json")).unwrap()).unwrap()
    };
    let before = read();
    assert_eq!(before["path"], "OFS -> OAQ -> device-side controller");
    let data = pattern(7, 1 << 20);
    fs::write(r.p("f"), &data).unwrap();
    assert_eq!(fs::read(r.p("f")).unwrap(), data);
    let after = read();
    let n = |v: &serde_json::Value, a: &str, b: &str| v[a][b].as_u64().unwrap();
    assert!(
        n(&after, "device", "host_write_bytes")
            >= n(&before, "device", "host_write_bytes") + (1 << 20),
        "{after}"
    );
    assert!(
        n(&after, "host_path", "oios") > n(&before, "host_path", "oios"),
        "{after}"
    );
    assert!(
        after["latency"]["priority_0"]["write"]["count"]
            .as_u64()
            .unwrap()
            > 0,
        "{after}"
    );
    assert_eq!(
        errno(fs::OpenOptions::new().write(true).open(&stats)),
        libc_errno::EACCES
    );
    assert_eq!(errno(fs::write(&stats, b"x")), libc_errno::EACCES);
    assert_eq!(errno(fs::rename(r.p("f"), &stats)), libc_errno::EPERM);
    // The store's own attributes of a file's object, read-only.
    fs::File::open(r.p("f")).unwrap().sync_all().unwrap();
    let on_flash: u64 = String::from_utf8(getxattr(&r.p("f"), "user.ossd.flash_bytes").unwrap())
        .unwrap()
        .parse()
        .unwrap();
    assert!(on_flash >= 1 << 20, "{on_flash} bytes on flash");
    assert_eq!(getxattr(&r.p("f"), "user.ossd.reliability").unwrap(), b"0");
    assert_eq!(
        setxattr(
            &r.p("f"),
            "user.ossd.flash_bytes",
            b"1",
            XattrFlags::empty()
        ),
        libc_errno::EPERM
    );
    assert!(!listxattr(&r.p("f"))
        .iter()
        .any(|n| n.contains("flash_bytes")));
    let out = Command::new(OSSD)
        .arg("stats")
        .arg(&r.mnt)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("write amplification"),
        "{out:?}"
    );
    r.unmount();
    let mut on_disk = r.image.clone().into_os_string();
    on_disk.push(".stats.json");
    let last: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(on_disk).unwrap()).unwrap();
    assert!(n(&last, "device", "host_write_bytes") >= 1 << 20, "{last}");
}

/// errno values the tests compare with.
mod libc_errno {
    pub const EACCES: i32 = 13;
    pub const EPERM: i32 = 1;
}

#[test]
fn open_unlinked_files_special_files_link_counts_and_times() {
    require_fuse!("open_unlinked_files_special_files_link_counts_and_times");
    let mut r = Rig::new("ofs", "details");
    r.mount();
    // unlinked while open
    let mut f = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(r.p("open"))
        .unwrap();
    f.write_all(b"kept").unwrap();
    fs::remove_file(r.p("open")).unwrap();
    assert!(!r.p("open").exists());
    assert_eq!(f.metadata().unwrap().nlink(), 0);
    f.write_all(b" while open").unwrap();
    let mut back = String::new();
    f.seek(SeekFrom::Start(0)).unwrap();
    f.read_to_string(&mut back).unwrap();
    assert_eq!(back, "kept while open");
    drop(f);
    // special files: the kernel serves them, OFS keeps kind, mode and device number
    let cwd = rustix::fs::CWD;
    let mode = rustix::fs::Mode::from_raw_mode(0o640);
    rustix::fs::mknodat(cwd, r.p("fifo"), rustix::fs::FileType::Fifo, mode, 0).unwrap();
    let dev = rustix::fs::makedev(1, 3);
    rustix::fs::mknodat(
        cwd,
        r.p("null"),
        rustix::fs::FileType::CharacterDevice,
        mode,
        dev,
    )
    .unwrap();
    use std::os::unix::fs::FileTypeExt;
    let m = fs::metadata(r.p("fifo")).unwrap();
    assert!(m.file_type().is_fifo());
    assert_eq!(m.permissions().mode() & 0o7777, 0o640);
    let m = fs::metadata(r.p("null")).unwrap();
    assert!(m.file_type().is_char_device());
    assert_eq!(m.rdev(), dev);
    // a FIFO carries data between a writer and a reader, through the kernel
    let path = r.p("fifo");
    let writer = std::thread::spawn(move || fs::write(path, b"through the pipe").unwrap());
    assert_eq!(fs::read(r.p("fifo")).unwrap(), b"through the pipe");
    writer.join().unwrap();
    // a directory links from its name, its '.' and each subdirectory's '..'
    fs::create_dir_all(r.p("a/b")).unwrap();
    fs::create_dir(r.p("a/c")).unwrap();
    fs::write(r.p("a/file"), b"").unwrap();
    assert_eq!(fs::metadata(r.p("a")).unwrap().nlink(), 4);
    fs::rename(r.p("a/c"), r.p("a/b/c")).unwrap();
    assert_eq!(fs::metadata(r.p("a")).unwrap().nlink(), 3);
    assert_eq!(fs::metadata(r.p("a/b")).unwrap().nlink(), 3);
    // times only move forward, call after call
    let ctime = |p: &Path| {
        let m = fs::symlink_metadata(p).unwrap();
        (m.ctime(), m.ctime_nsec())
    };
    let mut last = ctime(&r.p("a/file"));
    for i in 0..20 {
        let p = r.p("a/file");
        fs::set_permissions(&p, fs::Permissions::from_mode(0o600 + (i % 2) * 0o40)).unwrap();
        let now = ctime(&p);
        assert!(now > last, "chmod {i}: ctime {now:?} after {last:?}");
        last = now;
    }
    r.unmount();
    assert!(r.fsck().contains("OFS: 0 problems"));
    r.mount();
    assert!(fs::metadata(r.p("fifo")).unwrap().file_type().is_fifo());
    assert_eq!(fs::metadata(r.p("null")).unwrap().rdev(), dev);
    r.unmount();
}
