//! `ossd mount`: OFS on a device image, mounted with FUSE (crates/mount), or with `--fs blockfs`
//! the ext4-like block file system (`mount::blockfs_mount`); `ossd blockdev`: the page-mapping
//! FTL on a device image, exported through FUSE as one file (`mount::blockdev`).

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

/// What a mount serves.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Export {
    /// OFS on the object store (`ossd mount`).
    Ofs,
    /// The FTL as the file `disk` (`ossd blockdev`).
    Block,
    /// The ext4-like block file system on the FTL (`ossd mount --fs blockfs`).
    BlockFs,
}

impl Export {
    fn command(self) -> &'static str {
        match self {
            Export::Ofs | Export::BlockFs => "mount",
            Export::Block => "blockdev",
        }
    }

    /// What `ossd mount --fs NAME` mounts.
    pub fn for_fs(name: &str) -> Result<Export> {
        match name {
            "ofs" => Ok(Export::Ofs),
            "blockfs" => Ok(Export::BlockFs),
            other => bail!("--fs {other}: the file systems ossd mounts are ofs and blockfs"),
        }
    }

    /// How `ossd format` makes an image for it.
    fn format_flag(self) -> &'static str {
        match self {
            Export::Ofs => "--fs ofs",
            Export::Block => "--block",
            Export::BlockFs => "--fs blockfs",
        }
    }
}

pub struct Args {
    pub export: Export,
    pub image: PathBuf,
    pub mountpoint: PathBuf,
    pub daemon: bool,
    pub log: Option<PathBuf>,
    pub timing: String,
    pub allow_other: bool,
}

pub fn run(a: Args) -> Result<()> {
    let timing: mount::Timing = a.timing.parse()?;
    if !a.image.is_file() {
        bail!(
            "{}: no such image (make one with ossd format {})",
            a.image.display(),
            a.export.format_flag()
        );
    }
    if !a.mountpoint.is_dir() {
        bail!(
            "{}: the mount point must be a directory",
            a.mountpoint.display()
        );
    }
    if a.daemon {
        return daemon(&a);
    }
    let opts = mount::MountOptions {
        timing,
        allow_other: a.allow_other,
    };
    match a.export {
        Export::Block => return blockdev(&a, &opts),
        Export::BlockFs => return blockfs(&a, &opts),
        Export::Ofs => {}
    }
    let (fs, lock) = mount::image::open_ofs(&a.image)?;
    let c = fs.ofs_counters();
    if c.repairs > 0 {
        eprintln!(
            "{}: was not unmounted cleanly; repaired ({} fixes)",
            a.image.display(),
            c.repair_fixes
        );
    }
    let (image, mp) = (a.image.display(), a.mountpoint.display());
    mount::mount(fs, &a.mountpoint, &opts, true, || {
        eprintln!(
            "mounted {image} at {mp} (pid {}); Ctrl-C, SIGTERM or fusermount3 -u {mp} unmounts",
            std::process::id()
        )
    })?;
    drop(lock);
    eprintln!("unmounted {mp}; {image} closed cleanly");
    Ok(())
}

/// `ossd mount --fs blockfs` in the foreground.
fn blockfs(a: &Args, opts: &mount::MountOptions) -> Result<()> {
    let (fs, lock) = mount::blockfs_mount::open(&a.image)?;
    if !fs.inner().was_clean() {
        eprintln!(
            "{}: was not unmounted cleanly (no journal: files fsync'ed before the end are intact, \
             other recent changes may be lost)",
            a.image.display()
        );
    }
    let problems = fs.inner().problems();
    if !problems.is_empty() {
        eprintln!(
            "{}: {} problem(s) found; mounted read-only (writes fail with EIO). The first: {}",
            a.image.display(),
            problems.len(),
            problems[0]
        );
    }
    let (image, mp) = (a.image.display(), a.mountpoint.display());
    mount::mount(fs, &a.mountpoint, opts, true, || {
        eprintln!(
            "mounted {image} (blockfs) at {mp} (pid {}); Ctrl-C, SIGTERM or fusermount3 -u {mp} unmounts",
            std::process::id()
        )
    })?;
    drop(lock);
    eprintln!("unmounted {mp}; {image} closed cleanly");
    Ok(())
}

/// `ossd blockdev` in the foreground.
fn blockdev(a: &Args, opts: &mount::MountOptions) -> Result<()> {
    let (ftl, lock) = mount::blockdev::open(&a.image)?;
    let (image, mp) = (a.image.display(), a.mountpoint.display());
    let disk = mount::blockdev::disk_path(&a.mountpoint);
    let capacity = ftl.capacity_bytes();
    mount::blockdev::serve(ftl, &a.mountpoint, opts, true, || {
        eprintln!(
            "exported {image} at {} ({capacity} bytes; pid {}); Ctrl-C, SIGTERM or fusermount3 -u {mp} ends it",
            disk.display(),
            std::process::id()
        )
    })?;
    drop(lock);
    eprintln!("unmounted {mp}; {image} checkpointed and closed");
    Ok(())
}

/// Whether a FUSE file system is mounted at `mountpoint` (per /proc/self/mountinfo).
pub fn is_mounted(mountpoint: &Path) -> bool {
    let Ok(want) = mountpoint.canonicalize() else {
        return false;
    };
    let want = want.to_string_lossy().replace(' ', "\\040");
    std::fs::read_to_string("/proc/self/mountinfo").is_ok_and(|m| {
        m.lines().any(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            let fstype = f.iter().skip_while(|s| **s != "-").nth(1);
            f.get(4) == Some(&want.as_str()) && fstype.is_some_and(|t| t.starts_with("fuse"))
        })
    })
}

/// Starts the mount as a background process of its own session and returns once the mount is
/// in place (or the process has failed).
fn daemon(a: &Args) -> Result<()> {
    if is_mounted(&a.mountpoint) {
        bail!(
            "{}: something is mounted there already",
            a.mountpoint.display()
        );
    }
    let exe = std::env::current_exe().context("finding the ossd executable")?;
    let out = match &a.log {
        Some(p) => Stdio::from(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(p)
                .with_context(|| format!("opening the log {}", p.display()))?,
        ),
        None => Stdio::null(),
    };
    let err = match &a.log {
        Some(p) => Stdio::from(std::fs::OpenOptions::new().append(true).open(p)?),
        None => Stdio::null(),
    };
    let mut cmd = Command::new(exe);
    cmd.arg(a.export.command())
        .arg("--image")
        .arg(&a.image)
        .arg(&a.mountpoint)
        .args(["--timing", &a.timing]);
    if a.export == Export::BlockFs {
        cmd.args(["--fs", "blockfs"]);
    }
    if a.allow_other {
        cmd.arg("--allow-other");
    }
    cmd.stdin(Stdio::null()).stdout(out).stderr(err);
    // The child gets a process group of its own, so the caller's Ctrl-C (sent to the terminal's
    // foreground group) does not reach it.
    cmd.process_group(0);
    let mut child = cmd.spawn().context("starting the mount daemon")?;
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(60) {
        if let Some(status) = child.try_wait()? {
            bail!(
                "the mount daemon exited ({status}) before mounting{}",
                a.log.as_ref().map_or(
                    String::from("; rerun without --daemon to see why"),
                    |p| format!("; see {}", p.display())
                )
            );
        }
        if is_mounted(&a.mountpoint) {
            println!(
                "mounted {} at {} (daemon pid {}); unmount with fusermount3 -u {} or kill {}",
                a.image.display(),
                a.mountpoint.display(),
                child.id(),
                a.mountpoint.display(),
                child.id()
            );
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    bail!(
        "the mount daemon (pid {}) did not mount within 60 s",
        child.id()
    )
}
