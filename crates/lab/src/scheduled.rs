//! Scheduled experiment variants (workload kinds `synthetic`, `video`, `file-writes`): the
//! variant's stack and device-side controller built from its settings, the device filled and
//! aged, then the measured requests run through the controller ([`crate::prio`]), or, for
//! `stack = "ofs"`, through the host path of the `host` crate ([`crate::ofsprio`]).

use controller::ControllerConfig;
use flash::Nanos;
use host::{Files, OfsStack, ScheduledFile};
use ofs::Ofs;
use sched::{Oaq, OaqConfig, Priority};
use stacks::{SettingError, Stack, StackError, StackKind};
use vfs::{FileSystem, FsError};

use crate::engine::{PhaseError, Verifier};
use crate::ofsprio::{HostConfig, HostStats, OfsHost, PriorityBy};
use crate::prio::{
    file_writes_region, run_with, video_requests, Arrivals, Chain, Plan, PlanError, PrioOutcome,
    Synthetic,
};
use crate::request::Request;
use crate::variant::Variant;
use workload::files::FileStats;

/// Why a scheduled experiment variant could not be built or run.
#[derive(Debug, thiserror::Error)]
pub enum ScheduledError {
    /// A problem with the named variant's settings or files.
    #[error("variant {label}: {source}")]
    Variant {
        /// The variant's label.
        label: String,
        /// The problem.
        source: Box<ScheduledError>,
    },
    /// A `prio.*`, `oaq.*` or `host.*` setting the config does not take, or whose value does
    /// not fit.
    #[error(transparent)]
    Setting(#[from] SettingError),
    /// A setting the stack does not take (scheduled variants take `prio.*` too).
    #[error("{0}; and prio.*")]
    UnknownSetting(#[source] StackError),
    /// The stack refused a setting, or could not be built.
    #[error(transparent)]
    Stack(#[from] StackError),
    /// The device-side controller's settings are out of range.
    #[error(transparent)]
    Controller(#[from] controller::ConfigError),
    /// The workload's parameters are out of range, or do not fit the footprint.
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// The synthetic workload's requests are not whole sectors, or longer than 64 write
    /// units.
    #[error("request_bytes = {bytes} does not fit the device")]
    RequestBytes {
        /// `request_bytes`.
        bytes: u64,
    },
    /// Filling, aging or the measured run stopped.
    #[error(transparent)]
    Phase(#[from] PhaseError),
    /// Latency histograms of the foreground and background could not be added up.
    #[error("{0}")]
    Histogram(#[from] hdrhistogram::errors::AdditionError),
    /// A block trace could not be read, or does not fit the device.
    #[error(transparent)]
    BlockTrace(#[from] crate::prio::BlockTraceError),
    /// Stack `ofs` runs only the video and file-writes workloads.
    #[error("stack 'ofs' runs the video and file-writes workloads only")]
    OfsWorkload,
    /// OAQ refused its settings or a priority.
    #[error(transparent)]
    Oaq(#[from] sched::SchedError),
    /// OFS could not be formatted.
    #[error("format: {0}")]
    Format(#[source] FsError),
    /// A foreground file (the video, a file slot) that is not a positive multiple of the
    /// write unit.
    #[error("a {name} of {bytes} bytes is not a positive multiple of the {unit}-byte write unit")]
    ForegroundBytes {
        /// "video" or "file".
        name: &'static str,
        /// Its size in bytes.
        bytes: u64,
        /// The write unit in bytes.
        unit: u64,
    },
    /// The foreground's files take more than 2^64 bytes.
    #[error("the foreground's files overflow")]
    ForegroundOverflow,
    /// `host.background_file_bytes` is not a positive multiple of the write unit and the
    /// background request.
    #[error("host.background_file_bytes = {bytes} must be a positive multiple of {grain} (the write unit and the background request)")]
    BackgroundFileBytes {
        /// `host.background_file_bytes`.
        bytes: u64,
        /// The least common multiple of the write unit and the background request size.
        grain: u64,
    },
    /// The foreground leaves the background writer less than a quarter of the footprint.
    #[error("{bytes} bytes of {name}s leave too little of the {footprint}-byte footprint to the background writer")]
    TooLittleLeft {
        /// Bytes of the foreground.
        bytes: u64,
        /// "video" or "file".
        name: &'static str,
        /// The footprint in bytes.
        footprint: u64,
    },
    /// A file could not be created.
    #[error("create {name}: {source}")]
    Create {
        /// The file's name.
        name: String,
        /// Why.
        source: FsError,
    },
    /// A file could not be opened for scheduled I/O.
    #[error(transparent)]
    Open(FsError),
    /// A foreground file's priority could not be set.
    #[error("set the priority of inode {ino}: {source}")]
    SetPriority {
        /// The file's inode.
        ino: vfs::Ino,
        /// Why.
        source: FsError,
    },
    /// The host side could not be set up.
    #[error(transparent)]
    Host(#[from] crate::ofsprio::OfsHostError),
    /// The measured run ended with OIOs outstanding.
    #[error("measure: {outstanding} OIOs never completed")]
    NeverCompleted {
        /// OIOs outstanding.
        outstanding: usize,
    },
    /// Reads of the measured run returned the wrong data.
    #[error("measure: {reads} reads mismatched")]
    Mismatched {
        /// Reads that mismatched.
        reads: u64,
    },
}

impl ScheduledError {
    /// `e` as a problem of the variant labelled `label`.
    fn of(label: &str) -> impl Fn(ScheduledError) -> ScheduledError + '_ {
        move |e| ScheduledError::Variant {
            label: label.to_string(),
            source: Box::new(e),
        }
    }
}

/// A scheduled variant's controller config (its `prio.*` settings) and stack spec (the rest):
/// the FML's watermarks leave cleaning to the controller ([`stacks::FmlBase::Controlled`]),
/// and the FTL writes through, so every request reaches the dies the controller orders.
/// `other` takes the settings of the caller's own layers first (returns whether it did).
pub(crate) fn scheduled_spec(
    v: &Variant,
    mut other: impl FnMut(&str, &str) -> Result<bool, SettingError>,
) -> Result<(ControllerConfig, stacks::StackSpec), ScheduledError> {
    let at = ScheduledError::of(&v.label);
    let mut prio = ControllerConfig::default();
    let mut spec = stacks::StackSpec::new(v.stack);
    spec.ftl.buffer_bytes = 0;
    for (k, val) in &v.set {
        match k.split_once('.') {
            Some(("prio", f)) => stacks::apply(&mut prio, f, val).map_err(|e| at(e.into()))?,
            _ if other(k, val).map_err(|e| at(e.into()))? => {}
            _ => spec.set(k, val).map_err(|e| {
                at(match e {
                    e @ StackError::UnknownSetting { .. } => ScheduledError::UnknownSetting(e),
                    e => e.into(),
                })
            })?,
        }
    }
    prio.validate().map_err(|e| at(e.into()))?;
    spec.fml = stacks::FmlBase::Controlled(prio);
    Ok((prio, spec))
}

/// Builds a variant of a scheduled experiment on a fresh device: stack `ftl` or `dftl` (the
/// page-mapping FTL) or `osd` (the object store, the byte space cut into objects of
/// `object_bytes`), with `prio.*` settings for the controller and the rest for the stack.
pub fn build(
    v: &Variant,
    device: flash::DeviceConfig,
) -> Result<(Box<dyn Stack>, ControllerConfig), ScheduledError> {
    build_with_spec(v, device).map(|(stack, prio, _)| (stack, prio))
}

/// [`build`], with the stack's specification (the key of its aged device, [`set_up_key`]).
fn build_with_spec(
    v: &Variant,
    device: flash::DeviceConfig,
) -> Result<(Box<dyn Stack>, ControllerConfig, stacks::StackSpec), ScheduledError> {
    let (prio, spec) = scheduled_spec(v, |_, _| Ok(false))?;
    let stack = spec
        .build_block(device)
        .map_err(|e| ScheduledError::of(&v.label)(e.into()))?;
    Ok((stack, prio, spec))
}

/// The key of the device a set-up (fill and aging) builds from a stack of `spec` on `device`:
/// everything it reads ([`crate::aged`]).
fn set_up_key(
    spec: &stacks::StackSpec,
    device: flash::DeviceConfig,
    footprint: u64,
    low_free_percent: f64,
    seed: u64,
) -> String {
    crate::aged::key(
        format!("{device:?} {spec:?}"),
        footprint,
        low_free_percent,
        seed,
    )
}

/// What a scheduled experiment variant measured, as the file-level experiments report it:
/// phases `foreground` (priority requests), `background` (the others) and `all` (both, with
/// the stack's counters over the measured run).
pub struct VariantRun {
    /// The phases `foreground`, `background` and `all`, in that order.
    pub phases: Vec<(&'static str, FileStats)>,
    /// Erase counts over usable blocks at the end: (min, max, mean).
    pub erase_counts: (u32, u32, f64),
    /// Problems the stack's consistency check found after the run (empty when sound).
    pub fsck_problems: Vec<String>,
}

/// Runs a scheduled workload on a variant: fill the footprint, age the device to the cleaning
/// threshold, then the measured requests through the controller, reads verified.
pub fn run_variant(
    plan: Plan<'_>,
    v: &Variant,
    device: flash::DeviceConfig,
    seed: u64,
) -> Result<VariantRun, ScheduledError> {
    if v.stack == StackKind::Ofs {
        return run_ofs_variant(plan, v, device, seed).map(|(run, _)| run);
    }
    let w = match plan {
        Plan::BlockTrace(b) => return run_trace_variant(b, v, device, seed),
        Plan::Synthetic(w) => w,
        Plan::Video(video) => &video.background,
        Plan::FileWrites(f) => &f.background,
    };
    w.validate()?;
    let (mut stack, cfg, spec) = build_with_spec(v, device)?;
    let unit = stack.unit_bytes();
    if !w.request_bytes.is_multiple_of(512) || w.request_bytes > unit * 64 {
        return Err(ScheduledError::RequestBytes {
            bytes: w.request_bytes,
        });
    }
    let capacity = stack.capacity_bytes();
    let footprint = (capacity as f64 * w.utilisation) as u64 / unit * unit;
    let mut verifier = Verifier::new(capacity, unit);
    let t = crate::aged::fill_and_age(
        &mut stack,
        set_up_key(&spec, device, footprint, cfg.low_free_percent, seed),
        footprint,
        cfg.low_free_percent,
        seed,
        &mut verifier,
    )?;
    let mut chain = None;
    // The background writer of a file-writes run arrives until its last file is done.
    let endless = Synthetic {
        requests: u64::MAX,
        priority_percent: 0.0,
        ..w.clone()
    };
    let (mut requests, deadline): (Box<dyn Iterator<Item = Request>>, _) = match plan {
        Plan::Synthetic(w) => {
            let span = footprint / w.request_bytes * w.request_bytes;
            (Box::new(w.requests(span, t, seed)), None)
        }
        Plan::BlockTrace(_) => unreachable!("run above"),
        Plan::Video(video) => {
            let (r, d) = video_requests(video, footprint, t, seed)?;
            (Box::new(r.into_iter()), d)
        }
        Plan::FileWrites(f) => {
            let (files, rest) = file_writes_region(f, footprint)?;
            chain = Some(Chain::new(f, t));
            let r = endless.requests(rest, t, seed).map(move |r| Request {
                offset_bytes: r.offset_bytes + files,
                ..r
            });
            (Box::new(r), None)
        }
    };
    let before = stack.counters();
    let arrivals = Arrivals::new(&mut *requests, t, deadline).with_chain(chain.as_mut());
    let out = run_with(stack.as_mut(), &cfg, arrivals, t, seed, Some(&mut verifier)).map_err(
        |source| PhaseError {
            phase: "measure",
            source: Box::new(source),
        },
    )?;
    finish(stack.as_mut(), out, before, t)
}

/// Runs a block trace on a variant: fill the footprint, age the device to the cleaning
/// threshold, then the trace's requests through the controller at their own arrival times
/// (offset by the end of the aging), reads verified.
fn run_trace_variant(
    b: &crate::prio::BlockTrace,
    v: &Variant,
    device: flash::DeviceConfig,
    seed: u64,
) -> Result<VariantRun, ScheduledError> {
    let (mut stack, cfg, spec) = build_with_spec(v, device)?;
    let unit = stack.unit_bytes();
    let capacity = stack.capacity_bytes();
    let footprint = ((capacity as f64 * b.utilisation) as u64 / unit * unit).max(unit);
    // Checked before the fill, so that a bad trace fails at once.
    b.requests(footprint, unit * 64, 0)?;
    let mut verifier = Verifier::new(capacity, unit);
    let t = crate::aged::fill_and_age(
        &mut stack,
        set_up_key(&spec, device, footprint, cfg.low_free_percent, seed),
        footprint,
        cfg.low_free_percent,
        seed,
        &mut verifier,
    )?;
    let mut requests = b.requests(footprint, unit * 64, t)?.into_iter();
    let before = stack.counters();
    let arrivals = Arrivals::new(&mut requests, t, None);
    let out = run_with(stack.as_mut(), &cfg, arrivals, t, seed, Some(&mut verifier)).map_err(
        |source| PhaseError {
            phase: "measure",
            source: Box::new(source),
        },
    )?;
    finish(stack.as_mut(), out, before, t)
}

/// The phases of a measured run that started at `t`: its foreground, its background and both
/// with the stack's counters since `before`, and the stack's check.
pub(crate) fn finish(
    stack: &mut dyn Stack,
    out: PrioOutcome,
    before: stacks::Counters,
    t: Nanos,
) -> Result<VariantRun, ScheduledError> {
    let counters = stack.counters() - before;
    let mut all = FileStats::new(t);
    for s in [&out.foreground, &out.background] {
        all.reads += s.reads;
        all.writes += s.writes;
        all.read_bytes += s.read_bytes;
        all.write_bytes += s.write_bytes;
        all.transactions += s.transactions;
        all.end_ns = all.end_ns.max(s.end_ns);
        all.read_latency.add(&s.read_latency)?;
        all.write_latency.add(&s.write_latency)?;
    }
    all.counters = counters;
    let fsck_problems = match stack.check() {
        Ok(()) => Vec::new(),
        Err(e) => vec![e.to_string()],
    };
    Ok(VariantRun {
        phases: vec![
            ("foreground", out.foreground),
            ("background", out.background),
            ("all", all),
        ],
        erase_counts: stack.erase_counts(),
        fsck_problems,
    })
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// Runs a variant with `stack = "ofs"`: OSSD-13 VI-E's video, or its prioritized file writer,
/// on OFS through OAQ (see the module doc). Settings: `prio.*`, `osd.*`, `fml.*` (on top of
/// the watermarks [`stacks::controlled_fml`] derives), `oaq.*` ([`OaqConfig`]) and `host.*`
/// ([`HostConfig`]). Returns the run and what OAQ did.
pub fn run_ofs_variant(
    plan: Plan<'_>,
    v: &Variant,
    device: flash::DeviceConfig,
    seed: u64,
) -> Result<(VariantRun, HostStats), ScheduledError> {
    let at = ScheduledError::of(&v.label);
    let bg = match plan {
        Plan::Video(video) => &video.background,
        Plan::FileWrites(f) => &f.background,
        Plan::Synthetic(_) | Plan::BlockTrace(_) => return Err(at(ScheduledError::OfsWorkload)),
    };
    bg.validate().map_err(|e| at(e.into()))?;
    let mut oaq = OaqConfig::default();
    let mut host = HostConfig::default();
    let (prio, spec) = scheduled_spec(v, |k, val| match k.split_once('.') {
        Some(("oaq", f)) => stacks::apply(&mut oaq, f, val).map(|()| true),
        Some(("host", f)) => stacks::apply(&mut host, f, val).map(|()| true),
        _ => Ok(false),
    })?;
    let mut oaq = Oaq::new(oaq).map_err(|e| at(e.into()))?;
    let store = spec.object_store(device).map_err(|e| at(e.into()))?;
    let unit = store.unit_bytes() as u64;
    let capacity = store.fml().capacity_units() * unit;
    let mut ofs = Ofs::format(store, spec.ofs).map_err(ScheduledError::Format)?;

    // The files: the foreground's (the video, or the writer's file slots), then the
    // background writer's files over the rest of the footprint.
    let footprint = (capacity as f64 * bg.utilisation) as u64;
    let (front, front_name, front_bytes, priority) = match plan {
        Plan::Video(video) => {
            let bytes = video.seconds * video.frames_per_second as u64 * video.frame_bytes;
            (1, "video", bytes, video.priority)
        }
        Plan::FileWrites(f) => {
            crate::prio::file_writes_region(f, footprint).map_err(|e| at(e.into()))?;
            (f.file_slots, "file", f.file_bytes, f.priority)
        }
        Plan::Synthetic(_) | Plan::BlockTrace(_) => unreachable!("refused above"),
    };
    if front_bytes == 0 || !front_bytes.is_multiple_of(unit) {
        return Err(at(ScheduledError::ForegroundBytes {
            name: front_name,
            bytes: front_bytes,
            unit,
        }));
    }
    let front_total = front
        .checked_mul(front_bytes)
        .ok_or_else(|| at(ScheduledError::ForegroundOverflow))?;
    let grain = unit / gcd(unit, bg.request_bytes) * bg.request_bytes;
    let file_bytes = host.background_file_bytes;
    if file_bytes == 0 || !file_bytes.is_multiple_of(grain) {
        return Err(at(ScheduledError::BackgroundFileBytes {
            bytes: file_bytes,
            grain,
        }));
    }
    let rest = footprint.saturating_sub(front_total) / grain * grain;
    if rest < footprint / 4 {
        return Err(at(ScheduledError::TooLittleLeft {
            bytes: front_total,
            name: front_name,
            footprint,
        }));
    }
    let mut files = Files::default();
    let mut add = |ofs: &mut Ofs<_>, name: String, bytes: u64| -> Result<(), ScheduledError> {
        let ino = match ofs.create(vfs::ROOT, &name) {
            Ok(ino) => ino,
            Err(source) => return Err(ScheduledError::Create { name, source }),
        };
        let file = ScheduledFile::open(ofs, ino).map_err(ScheduledError::Open)?;
        files.push(file, bytes);
        Ok(())
    };
    for k in 0..front {
        add(&mut ofs, format!("{front_name}-{k:04}"), front_bytes)?;
    }
    let mut left = rest;
    let mut k = 0;
    while left > 0 {
        let n = left.min(file_bytes);
        add(&mut ofs, format!("background-{k:04}"), n)?;
        left -= n;
        k += 1;
    }
    let foreground: Vec<ScheduledFile> = files.spans()[..front as usize]
        .iter()
        .map(|s| s.file)
        .collect();
    let mut stack = OfsStack::new(ofs, files, |n: &flash::Nand| n.resident_bytes());
    let flat = stack.capacity_bytes();

    // Unmeasured set-up: write every file whole, then age the device to the cleaning
    // threshold, as the block-level variants do.
    let mut verifier = Verifier::new(flat, unit);
    let t =
        crate::prio::fill_and_age(&mut stack, flat, prio.low_free_percent, seed, &mut verifier)?;

    // The application sets its files' priority (the prototype's ioctl): the objects'
    // attribute, and OAQ's context for each object.
    if host.priority == PriorityBy::File {
        stack.ofs_mut().set_time(t);
        for f in &foreground {
            stack
                .ofs_mut()
                .set_priority(f.ino, priority)
                .map_err(|source| ScheduledError::SetPriority { ino: f.ino, source })?;
            oaq.set_object_priority(f.object(), Some(Priority(priority)))
                .map_err(|e| at(e.into()))?;
        }
    }
    let files = stack.files().clone();
    // The background writer of a file-writes run arrives until the last file is done.
    let endless = crate::prio::Synthetic {
        requests: if host.background { u64::MAX } else { 0 },
        priority_percent: 0.0,
        ..bg.clone()
    };
    let mut h = match plan {
        Plan::Video(video) => {
            let (mut requests, deadline) = crate::prio::video_requests(video, flat, t, seed)?;
            if !host.background {
                requests.retain(|r| r.priority > 0);
            }
            let requests = Box::new(requests.into_iter());
            OfsHost::new(oaq, files, requests, deadline, host.device_queue_depth)
                .map_err(|e| at(e.into()))?
        }
        Plan::FileWrites(f) => {
            let requests = endless.requests(rest, t, seed).map(move |r| Request {
                offset_bytes: r.offset_bytes + front_total,
                ..r
            });
            OfsHost::new(
                oaq,
                files,
                Box::new(requests),
                None,
                host.device_queue_depth,
            )
            .map_err(|e| at(e.into()))?
            .with_writer(f, foreground, t)
            .map_err(|e| at(e.into()))?
        }
        Plan::Synthetic(_) | Plan::BlockTrace(_) => unreachable!("refused above"),
    };
    if host.priority == PriorityBy::Request {
        h.set_request_priority(Priority(priority));
    }
    let before = stack.counters();
    let mut nothing = std::iter::empty();
    let arrivals = crate::prio::Arrivals::new(&mut nothing, t, None).with_host(&mut h);
    let out = crate::prio::run_with(&mut stack, &prio, arrivals, t, seed, Some(&mut verifier))
        .map_err(|source| PhaseError {
            phase: "measure",
            source: Box::new(source),
        })?;
    let outstanding = h.outstanding();
    if !h.all_done() {
        return Err(ScheduledError::NeverCompleted { outstanding });
    }
    if verifier.mismatches > 0 {
        return Err(ScheduledError::Mismatched {
            reads: verifier.mismatches,
        });
    }
    let stats = h.stats();
    let run = finish(&mut stack, out, before, t)?;
    Ok((run, stats))
}
