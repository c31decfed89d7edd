//! `ossd bench-mount`: real programs on OFS mounted with FUSE and on real ext4 on the
//! page-mapping FTL (`ossd blockdev` under a loop device), both on the same device model with
//! `--timing emulate`, so that each reply waits for the device model's completion time and the
//! programs' wall-clock figures are the simulated device's. Issue 17, item 6.
//!
//! Programs: fio (sequential write, buffered and with fdatasync after each request;
//! sequential read; 4 KiB random read and write), PostMark (POST1- and POST2-shaped) and the
//! video-read scenario (a reader at 30 frames/s under a background writer). The claims of
//! OSSD-13 VI-B and VI-F are read from `experiments/000-vi-b-base.toml` and
//! `000-vi-f-*.toml`, with "ext4-like" replaced by the real ext4, and judged by the lab's own
//! code (`lab::experiment::judge`); the report is `ossd reproduce`'s (`lab::report::write`):
//! report.md, report.html, results.json, metrics.csv, series.csv.

mod programs;
mod stack;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};
use lab::experiment::{Experiment, ExperimentResult, PhaseResult, VariantResult};
use mount::{MountOptions, Timing};
use osd::Placement;
use stacks::Counters;
use workload::files::FileSummary;

use programs::{FioJob, Measured, PostMark, Video};
use stack::Running;

/// Why the benchmark could not run (a program that is missing is not an error: its runs are
/// SKIPPED in the report).
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// A bad flag.
    #[error("{0}")]
    Usage(String),
    /// A program could not be started.
    #[error("{cmd}: {source}")]
    Spawn {
        /// The command.
        cmd: String,
        /// Why.
        source: std::io::Error,
    },
    /// A program failed.
    #[error("{cmd} failed ({status}): {stderr}")]
    Failed {
        /// The command.
        cmd: String,
        /// Its exit status.
        status: String,
        /// What it said.
        stderr: String,
    },
    /// A program's output was not what it should be.
    #[error("{program}: {what}")]
    Parse {
        /// The program.
        program: &'static str,
        /// What was wrong.
        what: String,
    },
    /// A file the harness reads or writes itself.
    #[error("{}: {source}", .path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Formatting or opening an image.
    #[error("{0}")]
    Image(#[from] mount::image::ImageError),
    /// Mounting or unmounting.
    #[error("{0}")]
    Mount(#[from] mount::MountError),
    /// Unmounting the export.
    #[error("unmounting: {0}")]
    Unmount(std::io::Error),
    /// The export's session ended before it was mounted.
    #[error("the block export ended before it was mounted")]
    ExportEnded,
    /// The stack's mount ended while a program ran on it.
    #[error("{0}")]
    Gone(String),
    /// The video scenario's writer thread panicked.
    #[error("the background writer panicked")]
    WriterPanicked,
    /// An experiment definition (the claims) could not be read.
    #[error("{0}")]
    Experiment(#[from] lab::experiment::ExperimentError),
    /// The report could not be written.
    #[error("{0}")]
    Report(#[from] lab::report::ReportError),
}

/// `ossd bench-mount`'s options.
pub struct Args {
    /// Device preset.
    pub device: String,
    /// Shrinks run lengths and sizes (1: the default run, a few minutes).
    pub scale: f64,
    /// Where the report goes.
    pub out: PathBuf,
    /// Where the images and mount points go (default: OUT/work), removed at the end.
    pub work: Option<PathBuf>,
    /// Where the experiment definitions (the claims) are.
    pub experiments: PathBuf,
    /// `emulate` (default) or `none`.
    pub timing: String,
    /// Before measuring, fill each file system to this percentage of its blocks with 128 KiB
    /// files and rewrite as many, hot/cold (0: no aging).
    pub age_percent: f64,
}

const OFS: &str = "OFS";
const OFS_ONE: &str = "OFS-ONE";
const EXT4: &str = "ext4";
const OFS_PRIO: &str = "OFS (priority 3)";
const OFS_NORMAL: &str = "OFS (normal)";

/// Run lengths and sizes at a scale.
struct Sizes {
    seq_bytes: u64,
    dsync_bytes: u64,
    rand_file_bytes: u64,
    rand_seconds: u64,
    post1: PostMark,
    post2: PostMark,
    video: Video,
}

fn scaled(x: f64, s: f64, min: u64) -> u64 {
    ((x * s) as u64).max(min)
}

impl Sizes {
    fn at(s: f64) -> Sizes {
        const MIB: f64 = 1024.0 * 1024.0;
        Sizes {
            seq_bytes: scaled(256.0 * MIB, s, 1 << 20),
            dsync_bytes: scaled(32.0 * MIB, s, 1 << 20),
            rand_file_bytes: scaled(64.0 * MIB, s, 1 << 20),
            rand_seconds: scaled(10.0, s, 2),
            // POST1 (OSSD-13 VI-F): 16-256 KiB files, 16 KiB I/O; the pool and the transactions
            // shrunk from 2,000 files and 20,000 transactions to fit a few minutes of device time.
            post1: PostMark {
                files: scaled(500.0, s, 10),
                transactions: scaled(4000.0, s, 50),
                size: (16 << 10, 256 << 10),
                io_bytes: 16 << 10,
                create_bias: 5,
            },
            // POST2: 256-512 KiB files, reads and appends only (create bias -1).
            post2: PostMark {
                files: scaled(100.0, s, 4),
                transactions: scaled(2000.0, s, 40),
                size: (256 << 10, 512 << 10),
                io_bytes: 16 << 10,
                create_bias: -1,
            },
            // OSSD-13 VI-E's video: 30 frames/s of 64 KiB (1.9 MiB/s).
            video: Video {
                fps: 30,
                frame_bytes: 64 << 10,
                seconds: scaled(15.0, s, 2),
                writer_file_bytes: scaled(8.0 * MIB, s, 256 << 10),
            },
        }
    }
}

/// Which programs are here, and why not.
struct Tools {
    fuse: Option<String>,
    ext4: Option<String>,
    fio: Option<String>,
    postmark: Option<String>,
}

fn have(tool: &str) -> bool {
    std::process::Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

impl Tools {
    fn find() -> Tools {
        let root = rustix::process::geteuid().is_root();
        let fuse = if !Path::new("/dev/fuse").exists() {
            Some("/dev/fuse is missing".to_string())
        } else if !root && !have("fusermount3") {
            Some("not root and fusermount3 is missing (apt-get install fuse3)".into())
        } else {
            None
        };
        let ext4 = if !root {
            Some("not root (loop devices and mount need it)".to_string())
        } else {
            ["losetup", "mkfs.ext4", "mount", "umount"]
                .iter()
                .find(|t| !have(t))
                .map(|t| format!("{t} is missing (apt-get install e2fsprogs util-linux mount)"))
        };
        let missing = |t: &str| (!have(t)).then(|| format!("{t} is missing (apt-get install {t})"));
        Tools {
            fuse,
            ext4,
            fio: missing("fio"),
            postmark: missing("postmark"),
        }
    }
}

/// One variant's phases as they are measured.
struct Collected {
    label: String,
    phases: Vec<PhaseResult>,
    errors: Vec<String>,
}

impl Collected {
    fn new(label: &str) -> Collected {
        Collected {
            label: label.to_string(),
            phases: Vec::new(),
            errors: Vec::new(),
        }
    }

    fn into_result(self) -> Option<VariantResult> {
        if self.phases.is_empty() && self.errors.is_empty() {
            return None;
        }
        Some(VariantResult {
            label: self.label,
            phases: self.phases,
            erase_count_min: 0,
            erase_count_max: 0,
            erase_count_mean: 0.0,
            fsck_problems: Vec::new(),
            wall_seconds: 0.0,
            error: (!self.errors.is_empty()).then(|| self.errors.join("; ")),
        })
    }
}

fn phase(name: &str, m: &Measured, before: &Counters, after: &Counters, page: u64) -> PhaseResult {
    let d = |f: fn(&Counters) -> u64| f(after).saturating_sub(f(before));
    let mib = |b: u64| {
        if m.seconds > 0.0 {
            b as f64 / (1 << 20) as f64 / m.seconds
        } else {
            0.0
        }
    };
    let programmed = d(|c| c.flash_pages_programmed);
    let min_per_second =
        (!m.per_second.is_empty()).then(|| m.per_second.iter().copied().min().unwrap_or(0) as f64);
    PhaseResult {
        phase: name.to_string(),
        files: FileSummary {
            virtual_seconds: m.seconds,
            write_bytes: m.write_bytes,
            read_bytes: m.read_bytes,
            creates: m.creates,
            deletes: m.deletes,
            transactions: m.transactions,
            write_mib_s: mib(m.write_bytes),
            read_mib_s: mib(m.read_bytes),
            throughput_mib_s: mib(m.write_bytes + m.read_bytes),
            transactions_per_s: if m.seconds > 0.0 {
                m.transactions as f64 / m.seconds
            } else {
                0.0
            },
            read_latency: m.read_latency,
            write_latency: m.write_latency,
            min_transactions_per_s: min_per_second,
        },
        host_write_bytes: m.write_bytes,
        flash_pages_programmed: programmed,
        pages_per_unit: after.pages_per_unit,
        data_units_written: d(|c| c.data_units_written),
        flash_pages_read: d(|c| c.flash_pages_read),
        flash_blocks_erased: d(|c| c.flash_blocks_erased),
        gc_page_copies: d(|c| c.gc_page_copies),
        gc_bytes_copied: d(|c| c.gc_page_copies) * after.pages_per_unit * page,
        cleaning_seconds: d(|c| c.gc_ns) as f64 / 1e9,
        index_pages_written: d(|c| c.index_pages_written),
        index_pages_read: d(|c| c.index_pages_read),
        metadata_pages_written: d(|c| c.metadata_pages_written),
        write_amplification: if m.write_bytes == 0 {
            0.0
        } else {
            (programmed * page) as f64 / m.write_bytes as f64
        },
        transactions_per_second: m.per_second.clone(),
        read_latency_cdf: Vec::new(),
        write_latency_cdf: Vec::new(),
    }
}

/// Runs one program on a stack and records its phase (or its failure).
fn measure(
    st: &Running,
    out: &mut Collected,
    name: &str,
    page: u64,
    bar: &ProgressBar,
    f: impl FnOnce() -> Result<Measured, BenchError>,
) {
    bar.set_message(format!("{}: {name}", st.label));
    if let Some(why) = st.gone() {
        out.errors.push(format!("{name}: not run: {why}"));
        bar.inc(1);
        return;
    }
    let before = st.counters();
    let r = f().and_then(|m| match st.gone() {
        Some(why) => Err(BenchError::Gone(why)),
        None => Ok(m),
    });
    match r {
        Ok(m) => {
            let after = st.counters();
            out.phases.push(phase(name, &m, &before, &after, page));
        }
        Err(e) => {
            bar.println(format!("{} {name} failed: {e}", st.label));
            out.errors.push(format!("{name}: {e}"));
        }
    }
    bar.inc(1);
}

fn fio_phases(st: &Running, out: &mut Collected, z: &Sizes, page: u64, bar: &ProgressBar) {
    let seq = st.dir.join("fio-seq");
    let dsync = st.dir.join("fio-dsync");
    let rand = st.dir.join("fio-rand");
    let jobs: [(&str, &Path, FioJob); 5] = [
        (
            "buffered write",
            &seq,
            job("write", 128 << 10, z.seq_bytes, false, false, None),
        ),
        (
            "dsync write",
            &dsync,
            job("write", 128 << 10, z.dsync_bytes, true, false, None),
        ),
        (
            "sequential read",
            &seq,
            job("read", 128 << 10, z.seq_bytes, false, false, None),
        ),
        (
            "random write 4k",
            &rand,
            job(
                "randwrite",
                4096,
                z.rand_file_bytes,
                false,
                true,
                Some(z.rand_seconds),
            ),
        ),
        (
            "random read 4k",
            &rand,
            job(
                "randread",
                4096,
                z.rand_file_bytes,
                false,
                true,
                Some(z.rand_seconds),
            ),
        ),
    ];
    for (name, file, j) in &jobs {
        measure(st, out, name, page, bar, || programs::fio(file, j));
    }
    for f in [&seq, &dsync, &rand] {
        let _ = std::fs::remove_file(f);
    }
}

fn job(
    rw: &str,
    bs: u64,
    size: u64,
    fdatasync: bool,
    direct: bool,
    runtime_s: Option<u64>,
) -> FioJob<'_> {
    FioJob {
        rw,
        bs,
        size,
        fdatasync,
        direct,
        runtime_s,
    }
}

fn postmark_phases(
    st: &Running,
    outs: [&mut Collected; 2],
    z: &Sizes,
    page: u64,
    bar: &ProgressBar,
) {
    for (out, p) in outs.into_iter().zip([&z.post1, &z.post2]) {
        let dir = st.dir.join("postmark");
        let made = std::fs::create_dir_all(&dir);
        measure(st, out, "transactions", page, bar, || {
            made.map_err(|source| BenchError::Io {
                path: dir.clone(),
                source,
            })?;
            programs::postmark(&dir, p)
        });
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// The video scenario on a stack: with OFS, played twice (the video file with
/// `user.ossd.priority` 3, then a copy without it).
fn video_phases(st: &Running, out: &mut [Collected], z: &Sizes, page: u64, bar: &ProgressBar) {
    for (i, o) in out.iter_mut().enumerate() {
        let video = st.dir.join(format!("video{i}"));
        let writer = st.dir.join("writer");
        let prio = st.is_ofs() && i == 0;
        measure(st, o, "video", page, bar, || {
            programs::make_video(&video, &z.video)?;
            if prio {
                rustix::fs::setxattr(
                    &video,
                    "user.ossd.priority",
                    b"3",
                    rustix::fs::XattrFlags::empty(),
                )
                .map_err(|e| BenchError::Io {
                    path: video.clone(),
                    source: e.into(),
                })?;
            }
            programs::play(&video, &writer, &z.video)
        });
        let _ = std::fs::remove_file(&video);
        let _ = std::fs::remove_dir_all(&writer);
    }
}

/// The experiment `name` from `dir`, as a report section on the mount: "ext4-like" in its
/// claims becomes the real ext4, the lab's explanations (about the simulated ext4-like file
/// system) are dropped, and `why` gives this run's where it has one.
fn section(
    dir: &Path,
    name: &str,
    title: &str,
    keep_claims: bool,
    aged: bool,
) -> Result<Experiment, BenchError> {
    let path = dir.join(format!("{name}.toml"));
    let mut e = Experiment::load(&path)?;
    e.name = format!("mount-{name}");
    e.title = title.to_string();
    if !keep_claims {
        e.claims.clear();
    }
    for c in &mut e.claims {
        for l in [&mut c.better, &mut c.worse] {
            if l == "ext4-like" {
                *l = EXT4.to_string();
            }
        }
        c.why = why_on_the_mount(&c.text, aged).map(str::to_string);
        c.paper = None;
    }
    Ok(e)
}

/// What is known about why a claim can come out otherwise on the mount than in the paper,
/// shown beside the verdict only when it disagrees. These are properties of the two stacks as
/// mounted here (checked in the phase's device counters), not tuning.
fn why_on_the_mount(claim: &str, aged: bool) -> Option<&'static str> {
    if claim.starts_with("With fdatasync, EXT4 is slower than OFS") {
        Some(
            "The device programs fewer pages for OFS (the next claim), so the difference is in \
             the host path, not the flash: every OFS write is a synchronous FUSE round trip \
             (the mount has no write-back cache) answered at the device model's completion \
             time, then the fdatasync is another round trip that flushes the buffered unit; \
             ext4 puts the 128 KiB into the page cache and its fdatasync sends one write and a \
             journal commit down the loop device. OSSD-13 ran OFS in the kernel.",
        )
    } else if claim.starts_with("EXT4 is much slower than OFS-ONE on POST1") {
        Some(
            "PostMark never calls fsync, and ext4 keeps its files in the host's page cache: \
             nearly all of the pool is created, appended, read and deleted without reaching \
             the device (see the phase's flash_pages_programmed: a few dozen pages against \
             OFS's hundred thousand). Every OFS call is a FUSE round trip answered at the \
             device model's completion time. This measures the mount's missing page cache, \
             not the two layouts; the paper's OFS was a kernel file system.",
        )
    } else if claim.starts_with("OFS outperforms OFS-ONE") && aged {
        Some(
            "Placement acts through garbage collection. Compare the two variants' \
             gc_page_copies in this phase: where both are near zero (POST2 writes little, so \
             even an aged device collects almost nothing), both program the same pages and \
             they differ only by the wall clock's run-to-run noise.",
        )
    } else if claim.starts_with("OFS outperforms OFS-ONE") && !aged {
        Some(
            "OSSD-13 aged the device to 85% full first, so garbage collection (which placement \
             changes) dominated. This run did not age the device (`--age 0`): the phase copies \
             no valid page (gc_page_copies is 0) and both placements program the same pages, \
             so the two differ only by the wall clock's run-to-run noise. `--age 85` ages it.",
        )
    } else {
        None
    }
}

fn spinner(len: u64) -> ProgressBar {
    let bar = ProgressBar::new(len);
    if let Ok(style) = ProgressStyle::with_template("{bar:30} {pos}/{len} {msg} [{elapsed}]") {
        bar.set_style(style);
    }
    bar.enable_steady_tick(std::time::Duration::from_millis(500));
    bar
}

/// Runs everything and writes the report; returns the path of report.md.
pub fn run(a: Args) -> Result<PathBuf, BenchError> {
    if !(a.scale > 0.0 && a.scale <= 10.0) {
        return Err(BenchError::Usage(format!(
            "--scale must be in (0, 10], got {}",
            a.scale
        )));
    }
    if !(0.0..=95.0).contains(&a.age_percent) {
        return Err(BenchError::Usage(format!(
            "--age must be a percentage from 0 to 95, got {}",
            a.age_percent
        )));
    }
    let timing: Timing = a
        .timing
        .parse()
        .map_err(|e: mount::UnknownTiming| BenchError::Usage(e.to_string()))?;
    let device = flash::preset(&a.device).map_err(|e| BenchError::Usage(e.to_string()))?;
    let page = device.geometry.page_size_bytes as u64;
    let z = Sizes::at(a.scale);
    let tools = Tools::find();
    // Read the claims first: a wrong --experiments fails before minutes of running.
    let sections = [
        section(
            &a.experiments,
            "000-vi-b-base",
            "fio on the mount: sequential write (buffered; fdatasync after each 128 KiB), sequential read, 4 KiB random write and read",
            true,
            a.age_percent > 0.0,
        )?,
        section(
            &a.experiments,
            "000-vi-f-post1",
            "PostMark (POST1-shaped: 16-256 KiB files, 16 KiB I/O) on the mount",
            true,
            a.age_percent > 0.0,
        )?,
        section(
            &a.experiments,
            "000-vi-f-post2",
            "PostMark (POST2-shaped: 256-512 KiB files, reads and appends only) on the mount",
            true,
            a.age_percent > 0.0,
        )?,
        section(
            &a.experiments,
            "000-vi-f-fileb",
            "FILEB (Filebench videoserver): NOT run on the mount",
            true,
            a.age_percent > 0.0,
        )?,
        section(
            &a.experiments,
            "000-vi-e-prioritized-read",
            "Video read at 30 frames/s of 64 KiB under a background writer, on the mount (measured only)",
            false,
            a.age_percent > 0.0,
        )?,
    ];
    let work = a.work.clone().unwrap_or_else(|| a.out.join("work"));
    let _ = std::fs::remove_dir_all(&work);
    for d in ["ofs", "ofs-one", "blk", "ext4"] {
        std::fs::create_dir_all(work.join(d)).map_err(|source| BenchError::Io {
            path: work.join(d),
            source,
        })?;
    }
    let opts = MountOptions {
        timing,
        allow_other: false,
        stats_out: None,
    };
    let mut skipped: Vec<String> = Vec::new();
    let mut skip = |what: &str, why: &Option<String>| {
        if let Some(why) = why {
            let line = format!("SKIPPED: {what}: {why}; NOT tested");
            eprintln!("{line}");
            skipped.push(line);
            true
        } else {
            false
        }
    };
    let no_fuse = skip("every run (OFS and ext4 both need FUSE)", &tools.fuse);
    let run_fio = !no_fuse && !skip("fio on both stacks", &tools.fio);
    let run_post = !no_fuse && !skip("PostMark on every stack", &tools.postmark);
    let run_ext4 = !no_fuse && !skip("real ext4 on ossd blockdev", &tools.ext4);
    let started = Instant::now();
    // Progress in programs run: OFS (fio, PostMark, two videos), OFS-ONE (PostMark), ext4
    // (fio, PostMark, one video).
    let (fio_n, post_n) = (5 * u64::from(run_fio), 2 * u64::from(run_post));
    let steps = (fio_n + post_n + 2) + post_n + u64::from(run_ext4) * (fio_n + post_n + 1);
    let bar = spinner(if no_fuse { 0 } else { steps });

    let mut fio = [Collected::new(OFS), Collected::new(EXT4)];
    let mut post1 = [
        Collected::new(OFS),
        Collected::new(OFS_ONE),
        Collected::new(EXT4),
    ];
    let mut post2 = [
        Collected::new(OFS),
        Collected::new(OFS_ONE),
        Collected::new(EXT4),
    ];
    let mut video = [
        Collected::new(OFS_PRIO),
        Collected::new(OFS_NORMAL),
        Collected::new(EXT4),
    ];
    let mut failures = Vec::new();
    let aging = |dir: &Path| {
        let b = bar.clone();
        programs::age(dir, a.age_percent, 42, &move |m: String| b.set_message(m))
    };
    let age: Option<stack::Age> = (a.age_percent > 0.0).then_some(&aging as stack::Age);
    if !no_fuse {
        // OFS (semantic placement): everything.
        bar.set_message("formatting and mounting OFS");
        let mnt = work.join("ofs");
        match stack::ofs(
            OFS,
            &work.join("ofs.img"),
            &mnt,
            device,
            Placement::Semantic,
            &opts,
            age,
        ) {
            Ok(mut st) => {
                if run_fio {
                    fio_phases(&st, &mut fio[0], &z, page, &bar);
                }
                if run_post {
                    postmark_phases(&st, [&mut post1[0], &mut post2[0]], &z, page, &bar);
                }
                video_phases(&st, &mut video[..2], &z, page, &bar);
                if let Err(e) = st.end() {
                    failures.push(format!("{OFS}: unmounting: {e}"));
                }
                // One image at a time: each is up to the device's size.
                let _ = std::fs::remove_file(work.join("ofs.img"));
            }
            Err(e) => failures.push(format!("{OFS}: {e}")),
        }
        // OFS-ONE: PostMark only (the VI-F claims compare it there).
        if run_post {
            bar.set_message("formatting and mounting OFS-ONE");
            let mnt = work.join("ofs-one");
            match stack::ofs(
                OFS_ONE,
                &work.join("ofs-one.img"),
                &mnt,
                device,
                Placement::One,
                &opts,
                age,
            ) {
                Ok(mut st) => {
                    postmark_phases(&st, [&mut post1[1], &mut post2[1]], &z, page, &bar);
                    if let Err(e) = st.end() {
                        failures.push(format!("{OFS_ONE}: unmounting: {e}"));
                    }
                    // One image at a time: each is up to the device's size.
                    let _ = std::fs::remove_file(work.join("ofs-one.img"));
                }
                Err(e) => failures.push(format!("{OFS_ONE}: {e}")),
            }
        }
        if run_ext4 {
            bar.set_message("formatting, exporting, mkfs.ext4");
            match stack::ext4(
                EXT4,
                &work.join("blk.img"),
                &work.join("blk"),
                &work.join("ext4"),
                device,
                &opts,
                age,
            ) {
                Ok(mut st) => {
                    if run_fio {
                        fio_phases(&st, &mut fio[1], &z, page, &bar);
                    }
                    if run_post {
                        postmark_phases(&st, [&mut post1[2], &mut post2[2]], &z, page, &bar);
                    }
                    video_phases(&st, &mut video[2..], &z, page, &bar);
                    if let Err(e) = st.end() {
                        failures.push(format!("{EXT4}: unmounting: {e}"));
                    }
                    // One image at a time: each is up to the device's size.
                    let _ = std::fs::remove_file(work.join("blk.img"));
                }
                Err(e) => failures.push(format!("{EXT4}: {e}")),
            }
        }
    }
    bar.finish_with_message(format!("done in {:.0} s", started.elapsed().as_secs_f64()));
    for f in &failures {
        eprintln!("bench-mount: {f}");
    }
    let _ = std::fs::remove_dir_all(&work);

    let collect = |c: [Collected; 3]| {
        c.into_iter()
            .filter_map(Collected::into_result)
            .collect::<Vec<_>>()
    };
    let [f0, f1] = fio;
    let variant_sets: [Vec<VariantResult>; 5] = [
        [f0, f1]
            .into_iter()
            .filter_map(Collected::into_result)
            .collect(),
        collect(post1),
        collect(post2),
        Vec::new(),
        collect(video),
    ];
    let results: Vec<ExperimentResult> = sections
        .iter()
        .zip(variant_sets)
        .map(|(e, v)| {
            let mut r = ExperimentResult::new(e, a.scale, v);
            r.device = a.device.clone();
            r
        })
        .collect();
    let report = lab::report::write(&a.out, &results)?;
    let preface = preface(&a, &z, &skipped, &failures, started.elapsed().as_secs_f64());
    let body = std::fs::read_to_string(&report).map_err(|source| BenchError::Io {
        path: report.clone(),
        source,
    })?;
    // The lab's own header and its labels (which describe the simulated ext4-like file
    // system) give way to this run's.
    let body = body.replacen("# ossd reproduction report\n\n", &preface, 1);
    let body = match body.find("Labels: OFS = the object file system") {
        Some(at) => match body[at..].find("\n\n") {
            Some(len) => format!("{}{}", &body[..at], &body[at + len + 2..]),
            None => body,
        },
        None => body,
    };
    std::fs::write(&report, body).map_err(|source| BenchError::Io {
        path: report.clone(),
        source,
    })?;
    for r in &results {
        println!("{} ({})", r.title, r.source);
        for v in &r.verdicts {
            let a = match v.agrees {
                Some(true) => "agrees",
                Some(false) => "DISAGREES",
                None => "not measured",
            };
            println!("  {a}: {}\n      {}", v.claim, v.measured);
        }
        for v in &r.variants {
            for p in &v.phases {
                let f = &p.files;
                println!(
                    "  {:<18} {:<16} {:>8.2} MiB/s write {:>8.2} MiB/s read {:>10.1} ops/s{}",
                    v.label,
                    p.phase,
                    f.write_mib_s,
                    f.read_mib_s,
                    f.transactions_per_s,
                    f.min_transactions_per_s
                        .map_or(String::new(), |m| format!(", worst second {m:.0} frames"))
                );
            }
        }
    }
    for s in &skipped {
        println!("{s}");
    }
    println!("report: {}", report.display());
    Ok(report)
}

/// What report.md says before the lab's sections: how it was run, what the labels mean, what
/// was skipped or failed.
fn preface(a: &Args, z: &Sizes, skipped: &[String], failures: &[String], seconds: f64) -> String {
    let mut s = String::from("# ossd bench-mount report: real programs on the mount\n\n");
    let _ = writeln!(
        s,
        "`ossd bench-mount --device {} --scale {} --timing {} --age {}` on {} ({} CPUs), {:.0} s of wall \
         time. Every figure is a real program's, timed by the wall clock; with `--timing \
         emulate` each reply waits for the device model's completion time, so the times are the \
         simulated device's plus the host's (FUSE, the kernel, the programs).\n",
        a.device,
        a.scale,
        a.timing,
        a.age_percent,
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map_or_else(|_| "this machine".into(), |h| h.trim().to_string()),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        seconds
    );
    let _ = writeln!(
        s,
        "Labels: OFS = OFS on the object store (`semantic` placement) mounted with `ossd mount`'s \
         FUSE adapter, called directly in the daemon (not through OAQ and the device-side \
         controller); OFS-ONE = the same with `one` placement; ext4 = Linux's ext4 (with its \
         journal, `mount -o discard`) on a loop device (direct I/O) over `ossd blockdev`'s file, \
         the page-mapping FTL on the same device model: OSSD-13's baseline. Device counters \
         (flash pages, GC copies, erases) are the device model's, read between programs after a \
         `sync`.\n"
    );
    let _ = writeln!(
        s,
        "Programs and sizes: fio 3 (`--ioengine=psync`, one job, queue depth 1): sequential \
         write of {} MiB in 128 KiB requests, buffered with `end_fsync`; the same with \
         `--fdatasync=1` over {} MiB (\"dsync write\"); sequential read of the first file \
         (buffered, page cache dropped by fio); 4 KiB random write then read with O_DIRECT on a \
         {} MiB file for {} s each. PostMark 1.51 POST1-shaped: {} files of 16-256 KiB, {} \
         transactions; POST2-shaped: {} files of 256-512 KiB, {} transactions, create bias -1; \
         16 KiB reads and writes, unbuffered; PostMark's figures are over its whole run (its own \
         timer counts whole seconds). Video: a reader reads frames of {} KiB at {} frames/s for \
         {} s (buffered, page cache dropped first) while a writer writes {} KiB files in 128 KiB \
         requests with an fsync after each; with OFS once with `user.ossd.priority` = 3 on the \
         video, once without; `transactions_per_s` is frames/s, `min_transactions_per_s` the \
         worst second.\n",
        z.seq_bytes >> 20,
        z.dsync_bytes >> 20,
        z.rand_file_bytes >> 20,
        z.rand_seconds,
        z.post1.files,
        z.post1.transactions,
        z.post2.files,
        z.post2.transactions,
        z.video.frame_bytes >> 10,
        z.video.fps,
        z.video.seconds,
        z.video.writer_file_bytes >> 10,
    );
    if a.age_percent > 0.0 {
        let _ = writeln!(
            s,
            "Aged first (`--age {}`): each file system, mounted with `--timing none`, was filled \
             with 128 KiB files until {}% of its blocks were in use and as many whole files were \
             rewritten, 90% of the rewrites on 10% of the files (OSSD-13 VI-F aged to 85% with \
             its hot/cold benchmark); the files stay during the measurements.\n",
            a.age_percent, a.age_percent
        );
    } else {
        let _ = writeln!(
            s,
            "Not aged (`--age 0`): the programs run on an empty device, so there is little or \
             no garbage collection; OSSD-13 VI-F aged the device to 85% first.\n"
        );
    }
    let _ = writeln!(
        s,
        "Not run: FILEB (the Filebench videoserver of VI-F; Filebench is not packaged in \
         Debian), so its claims stay \"not measured\". The claims are the lab's \
         (experiments/000-vi-b-base.toml, 000-vi-f-*.toml) with \"ext4-like\" read as the real \
         ext4; the lab's explanations of its own disagreements are about its simulated \
         ext4-like file system and are not repeated here. Nothing is adjusted toward the paper. \
         What the verdicts mean on the mount: see docs/PERFORMANCE.md \"bench-mount\".\n"
    );
    for l in skipped {
        let _ = writeln!(s, "**{l}**\n");
    }
    for f in failures {
        let _ = writeln!(s, "**FAILED**: {f}\n");
    }
    s
}
