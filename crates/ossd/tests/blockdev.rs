//! `ossd blockdev` end to end: the page-mapping FTL on an image, exported through FUSE as one
//! file, carries a real ext4 on a loop device (`mkfs.ext4`, `mount -o discard`, `fstrim`); the
//! files survive unmounting everything and exporting the image again, and `fsck.ext4` finds the
//! file system clean. Also: each command refuses an image formatted for the other layer.
//!
//! The ext4 test needs root, /dev/fuse, losetup, mkfs.ext4 and fsck.ext4; without them it
//! prints `SKIPPED: ...` to stderr and returns.

use std::path::{Path, PathBuf};
use std::process::Command;

use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

const OSSD: &str = env!("CARGO_BIN_EXE_ossd");

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ossd-blockdev-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
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

fn ossd(args: &[&str]) -> Command {
    let mut c = Command::new(OSSD);
    c.args(args);
    c
}

/// Why the ext4 test cannot run here, if it cannot.
fn missing() -> Option<String> {
    if !Path::new("/dev/fuse").exists() {
        return Some("/dev/fuse is missing".into());
    }
    if !rustix::process::geteuid().is_root() {
        return Some("not root (loop devices and mount need it)".into());
    }
    for tool in [
        "losetup",
        "mkfs.ext4",
        "fsck.ext4",
        "fstrim",
        "mount",
        "umount",
    ] {
        if Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .output()
            .map_or(true, |o| !o.status.success())
        {
            return Some(format!(
                "{tool} is missing (apt-get install e2fsprogs util-linux mount)"
            ));
        }
    }
    None
}

/// Everything the test set up, torn down in reverse order however it ends.
struct Rig {
    dir: PathBuf,
    loopdev: Option<String>,
    ext_mounted: bool,
    exported: bool,
}

impl Rig {
    fn mnt(&self) -> PathBuf {
        self.dir.join("mnt")
    }
    fn ext(&self) -> PathBuf {
        self.dir.join("ext")
    }
    fn image(&self) -> PathBuf {
        self.dir.join("dev.img")
    }

    fn export(&mut self) {
        let (img, mnt) = (self.image(), self.mnt());
        run(ossd(&["blockdev", "--daemon", "--image"])
            .arg(&img)
            .arg(&mnt));
        self.exported = true;
        let out = run(Command::new("losetup")
            .args(["-f", "--show"])
            .arg(mnt.join("disk")));
        self.loopdev = Some(out.trim().to_string());
    }

    fn mount_ext4(&mut self, opts: &str) {
        let dev = self.loopdev.clone().unwrap();
        run(Command::new("mount")
            .args(["-o", opts, &dev])
            .arg(self.ext()));
        self.ext_mounted = true;
    }

    /// Unmounts ext4, detaches the loop device and ends the export (the FTL checkpoints and
    /// closes the image); waits until the daemon has released the image.
    fn teardown(&mut self) {
        if std::mem::take(&mut self.ext_mounted) {
            let _ = Command::new("umount").arg(self.ext()).status();
        }
        if let Some(dev) = self.loopdev.take() {
            let _ = Command::new("losetup").args(["-d", &dev]).status();
        }
        if std::mem::take(&mut self.exported) {
            let _ = Command::new("fusermount3")
                .arg("-u")
                .arg(self.mnt())
                .status();
            let _ = Command::new("umount")
                .arg(self.mnt())
                .stderr(std::process::Stdio::null())
                .status();
            // The daemon closes the image after the session ends: wait for its lock.
            for _ in 0..500 {
                let f = std::fs::File::open(self.image()).unwrap();
                if f.try_lock().is_ok() {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        }
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        self.teardown();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[test]
fn real_ext4_on_the_exported_ftl_keeps_its_files_and_stays_clean() {
    if let Some(why) = missing() {
        eprintln!("SKIPPED: ext4 on ossd blockdev: {why}; the block export was NOT tested");
        return;
    }
    let dir = scratch("ext4");
    std::fs::create_dir_all(dir.join("mnt")).unwrap();
    std::fs::create_dir_all(dir.join("ext")).unwrap();
    let mut rig = Rig {
        dir,
        loopdev: None,
        ext_mounted: false,
        exported: false,
    };
    run(ossd(&["format", "--device", "tiny", "--block", "--image"]).arg(rig.image()));
    rig.export();
    let size = std::fs::metadata(rig.mnt().join("disk")).unwrap().len();
    assert_eq!(size, 12 << 20, "disk is the FTL's logical space");
    run(Command::new("mkfs.ext4")
        .args(["-q", "-F"])
        .arg(rig.loopdev.clone().unwrap()));
    rig.mount_ext4("discard");

    // Files of several sizes, one removed again and trimmed away.
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let mut files = Vec::new();
    std::fs::create_dir_all(rig.ext().join("d")).unwrap();
    for (i, len) in [1usize, 4095, 4096, 100_000, 1 << 20, 3 << 20]
        .iter()
        .enumerate()
    {
        let mut data = vec![0u8; *len];
        rng.fill_bytes(&mut data);
        let path = rig.ext().join("d").join(format!("f{i}"));
        std::fs::write(&path, &data).unwrap();
        files.push((path, data));
    }
    let doomed = rig.ext().join("doomed");
    std::fs::write(&doomed, vec![0xAB; 2 << 20]).unwrap();
    run(&mut Command::new("sync"));
    std::fs::remove_file(&doomed).unwrap();
    let trimmed = run(Command::new("fstrim").arg("-v").arg(rig.ext()));
    assert!(trimmed.contains("trimmed"), "{trimmed}");
    rig.teardown();

    // Exported again from the closed image: clean, and every byte back.
    rig.export();
    let fsck = Command::new("fsck.ext4")
        .arg("-fn")
        .arg(rig.loopdev.clone().unwrap())
        .output()
        .unwrap();
    assert!(
        fsck.status.success(),
        "fsck.ext4 found problems: {}",
        String::from_utf8_lossy(&fsck.stdout)
    );
    rig.mount_ext4("ro");
    for (path, data) in &files {
        assert_eq!(&std::fs::read(path).unwrap(), data, "{}", path.display());
    }
    assert!(!doomed.exists());
    rig.teardown();
}

#[test]
fn each_export_refuses_an_image_of_the_other_layer() {
    let dir = scratch("refuse");
    let (block, store) = (dir.join("block.img"), dir.join("store.img"));
    run(ossd(&["format", "--device", "tiny", "--block", "--image"]).arg(&block));
    run(ossd(&["format", "--device", "tiny", "--fs", "ofs", "--image"]).arg(&store));
    std::fs::create_dir_all(dir.join("mnt")).unwrap();
    for (cmd, img, wanted) in [
        ("blockdev", &store, "not a block device"),
        ("mount", &block, "not an object store"),
    ] {
        let out = ossd(&[cmd, "--image"])
            .arg(img)
            .arg(dir.join("mnt"))
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{cmd} accepted {}", img.display());
        assert!(err.contains(wanted), "{cmd}: {err}");
    }
    // The object commands refuse the block image too.
    let out = ossd(&["ls", "--image"]).arg(&block).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not an object store"));
    std::fs::remove_dir_all(&dir).unwrap();
}
