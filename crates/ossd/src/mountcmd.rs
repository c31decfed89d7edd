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
    /// The device image (`--image`); `None` with `--remote`.
    pub image: Option<PathBuf>,
    /// OFS on a remote target instead of an image (`ossd mount --remote`).
    pub remote: Option<Remote>,
    pub mountpoint: PathBuf,
    pub daemon: bool,
    pub log: Option<PathBuf>,
    pub timing: String,
    pub allow_other: bool,
    /// OFS called directly instead of through OAQ and the controller.
    pub direct: bool,
    pub stats_out: Option<PathBuf>,
}

/// `ossd mount --remote ADDR`: the target to mount OFS from.
pub struct Remote {
    /// The target's address (`ossd serve --listen`).
    pub addr: String,
    /// The master key file the target was started with (`ossd serve --key-file`).
    pub key_file: PathBuf,
    /// Format OFS on the target's store if it holds none.
    pub format: bool,
}

/// The image a mount of an image serves.
fn image_of(a: &Args) -> Result<&Path> {
    match &a.image {
        Some(p) => Ok(p),
        None => bail!(
            "--image IMAGE is required (or --remote ADDR --key-file K, for ossd mount of OFS)"
        ),
    }
}

pub fn run(a: Args) -> Result<()> {
    let timing: mount::Timing = a.timing.parse()?;
    if !a.mountpoint.is_dir() {
        bail!(
            "{}: the mount point must be a directory",
            a.mountpoint.display()
        );
    }
    if let Some(r) = &a.remote {
        if a.image.is_some() {
            bail!("--image and --remote exclude each other: OFS is mounted from one or the other");
        }
        if a.export != Export::Ofs {
            bail!("--remote mounts OFS only (the target serves an object store)");
        }
        if timing != mount::Timing::None {
            bail!("--timing applies to an image's device model, not to --remote");
        }
        if a.daemon {
            return daemon(&a);
        }
        return remote(&a, r);
    }
    let image = image_of(&a)?;
    if !image.is_file() {
        bail!(
            "{}: no such image (make one with ossd format {})",
            image.display(),
            a.export.format_flag()
        );
    }
    if a.daemon {
        return daemon(&a);
    }
    let stats_out = match (&a.stats_out, a.export) {
        (Some(p), _) => Some(p.clone()),
        (None, Export::Ofs) => Some(default_stats_path(image)),
        (None, Export::Block | Export::BlockFs) => None,
    };
    let opts = mount::MountOptions {
        timing,
        allow_other: a.allow_other,
        stats_out,
    };
    match a.export {
        Export::Block => return blockdev(&a, &opts),
        Export::BlockFs => return blockfs(&a, &opts),
        Export::Ofs => {}
    }
    let (fs, lock) = mount::image::open_ofs(image)?;
    report_repairs(&image.display().to_string(), fs.ofs_counters());
    let (image, mp) = (image.display(), a.mountpoint.display());
    let path = if a.direct {
        "OFS called directly"
    } else {
        "OFS -> OAQ -> device-side controller"
    };
    let ready = || {
        eprintln!(
            "mounted {image} at {mp} ({path}; pid {}); Ctrl-C, SIGTERM or fusermount3 -u {mp} unmounts",
            std::process::id()
        )
    };
    if a.direct {
        mount::mount(fs, &a.mountpoint, &opts, true, ready)?;
    } else {
        // Before the host path's threads start, so that none of them takes SIGTERM.
        mount::block_signals().context("blocking SIGINT, SIGTERM and SIGHUP")?;
        let fs = mount::ScheduledOfs::start(fs, timing)?;
        mount::mount(fs, &a.mountpoint, &opts, true, ready)?;
    }
    drop(lock);
    eprintln!("unmounted {mp}; {image} closed cleanly");
    Ok(())
}

/// Tells the user when the mount began with a repair after an unclean end.
fn report_repairs(what: &str, c: ofs::OfsCounters) {
    if c.repairs > 0 {
        eprintln!(
            "{what}: was not unmounted cleanly; repaired ({} fixes)",
            c.repair_fixes
        );
    }
}

/// `ossd mount --remote ADDR` in the foreground: OFS here, the object store at the target.
fn remote(a: &Args, r: &Remote) -> Result<()> {
    let key = crate::net::read_key(&r.key_file)?;
    let format = r.format.then(ofs::OfsConfig::default);
    let fs = mount::remote::connect(&r.addr, client::Credentials::Key(key), format)?;
    report_repairs(&r.addr, fs.ofs_counters());
    let opts = mount::MountOptions {
        timing: mount::Timing::None,
        allow_other: a.allow_other,
        stats_out: a.stats_out.clone(),
    };
    let (addr, mp) = (&r.addr, a.mountpoint.display());
    let path = if a.direct {
        "OFS called directly"
    } else {
        "OFS -> OAQ"
    };
    let ready = || {
        eprintln!(
            "mounted OFS of target {addr} at {mp} ({path} here, OSD commands over TCP; pid {}); \
             Ctrl-C, SIGTERM or fusermount3 -u {mp} unmounts",
            std::process::id()
        )
    };
    if a.direct {
        mount::mount(fs, &a.mountpoint, &opts, true, ready)?;
    } else {
        mount::block_signals().context("blocking SIGINT, SIGTERM and SIGHUP")?;
        let fs = mount::ScheduledOfs::start_on(fs, mount::Timing::None)?;
        mount::mount(fs, &a.mountpoint, &opts, true, ready)?;
    }
    eprintln!("unmounted {mp}; OFS on {addr} marked clean and flushed");
    Ok(())
}

/// `ossd stats MOUNTPOINT`: the mount's statistics document, whole (`--json`) or summarized.
pub fn stats(mountpoint: &Path, json: bool) -> Result<()> {
    let path = mountpoint.join(mount::stats::STATS_FILE);
    let text = std::fs::read_to_string(&path).with_context(|| {
        format!(
            "reading {} (is OFS mounted there with ossd mount?)",
            path.display()
        )
    })?;
    if json {
        print!("{text}");
        return Ok(());
    }
    let v: serde_json::Value = serde_json::from_str(&text)
        .with_context(|| format!("{}: not a statistics document", path.display()))?;
    print!("{}", stats_summary(&v));
    Ok(())
}

/// A few lines a person reads: the device's counters, the host path's work, latency by class.
fn stats_summary(v: &serde_json::Value) -> String {
    use std::fmt::Write as _;
    let d = &v["device"];
    let num = |x: &serde_json::Value| x.as_f64().unwrap_or(0.0);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "path: {} (timing {})",
        v["path"].as_str().unwrap_or("?"),
        v["timing"].as_str().unwrap_or("?")
    );
    let _ = writeln!(
        out,
        "device: {:.1} MiB written by the host, {:.1} MiB read; write amplification {:.3}; \
         {} GC page copies; {} blocks erased (erase count {}..{}); {} of {} blocks free",
        num(&d["host_write_bytes"]) / 1048576.0,
        num(&d["host_read_bytes"]) / 1048576.0,
        num(&d["write_amplification"]),
        d["gc_page_copies"],
        d["flash_blocks_erased"],
        d["erase_count_min"],
        d["erase_count_max"],
        d["free_blocks"],
        d["blocks"],
    );
    let h = &v["host_path"];
    if h.is_object() {
        let _ = writeln!(
            out,
            "host path: {} OIOs -> {} OREQs ({} merged, {} prioritized, at most {} queued); \
             {} issued on the FUSE thread; {} GC steps by the controller; {} barrier calls",
            h["oios"],
            h["oreqs"],
            h["merges"],
            h["prioritized_oreqs"],
            h["max_queued"],
            h["inline"],
            h["gc_steps"],
            h["barriers"],
        );
    }
    if let Some(classes) = v["latency"].as_object() {
        for (class, dirs) in classes {
            for dir in ["read", "write"] {
                let l = &dirs[dir];
                if l.is_object() {
                    let _ = writeln!(
                        out,
                        "{class} {dir}s: {} (p50 {:.0} us, p99 {:.0} us, p99.9 {:.0} us, max {:.0} us)",
                        l["count"],
                        num(&l["p50_us"]),
                        num(&l["p99_us"]),
                        num(&l["p999_us"]),
                        num(&l["max_us"]),
                    );
                }
            }
        }
    }
    out
}

/// Where a mount of `image` writes its statistics on unmount unless told otherwise.
pub fn default_stats_path(image: &Path) -> PathBuf {
    let mut p = image.as_os_str().to_owned();
    p.push(".stats.json");
    PathBuf::from(p)
}

/// `ossd mount --fs blockfs` in the foreground.
fn blockfs(a: &Args, opts: &mount::MountOptions) -> Result<()> {
    let image = image_of(a)?;
    let (fs, lock) = mount::blockfs_mount::open(image)?;
    if !fs.inner().was_clean() {
        eprintln!(
            "{}: was not unmounted cleanly (no journal: files fsync'ed before the end are intact, \
             other recent changes may be lost)",
            image.display()
        );
    }
    let problems = fs.inner().problems();
    if !problems.is_empty() {
        eprintln!(
            "{}: {} problem(s) found; mounted read-only (writes fail with EIO). The first: {}",
            image.display(),
            problems.len(),
            problems[0]
        );
    }
    let (image, mp) = (image.display(), a.mountpoint.display());
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
    let image = image_of(a)?;
    let (ftl, lock) = mount::blockdev::open(image)?;
    let (image, mp) = (image.display(), a.mountpoint.display());
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
    cmd.arg(a.export.command());
    let source = match (&a.remote, &a.image) {
        (Some(r), _) => {
            cmd.args(["--remote", &r.addr])
                .arg("--key-file")
                .arg(&r.key_file);
            if r.format {
                cmd.arg("--format");
            }
            format!("OFS of target {}", r.addr)
        }
        (None, _) => {
            let image = image_of(a)?;
            cmd.arg("--image").arg(image).args(["--timing", &a.timing]);
            image.display().to_string()
        }
    };
    cmd.arg(&a.mountpoint);
    if a.export == Export::BlockFs {
        cmd.args(["--fs", "blockfs"]);
    }
    if a.allow_other {
        cmd.arg("--allow-other");
    }
    if a.direct {
        cmd.arg("--direct");
    }
    if let Some(p) = &a.stats_out {
        cmd.arg("--stats-out").arg(p);
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
                source,
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
