//! Scheduled experiment variants (workload kinds `synthetic`, `video`, `file-writes`): the
//! variant's stack and device-side controller built from its settings, the device filled and
//! aged, then the measured requests run through the controller ([`crate::prio`]), or, for
//! `stack = "ofs"`, through the host path of the `host` crate ([`crate::ofsprio`]).

use controller::ControllerConfig;
use flash::Nanos;
use host::{Files, OfsStack, ScheduledFile};
use ofs::Ofs;
use sched::{Oaq, OaqConfig, Priority};
use stacks::{Stack, StackKind};
use vfs::FileSystem;

use crate::engine::Verifier;
use crate::ofsprio::{HostConfig, HostStats, OfsHost, PriorityBy};
use crate::prio::{
    file_writes_region, fill_and_age, run_with, video_requests, Arrivals, Chain, Plan, PrioOutcome,
    Synthetic,
};
use crate::request::Request;
use crate::variant::Variant;
use workload::files::FileStats;

/// A scheduled variant's controller config (its `prio.*` settings) and stack spec (the rest):
/// the FML's watermarks leave cleaning to the controller ([`stacks::FmlBase::Controlled`]),
/// and the FTL writes through, so every request reaches the dies the controller orders.
/// `other` takes the settings of the caller's own layers first (returns whether it did).
pub(crate) fn scheduled_spec(
    v: &Variant,
    mut other: impl FnMut(&str, &str) -> Result<bool, String>,
) -> Result<(ControllerConfig, stacks::StackSpec), String> {
    let at = |e: String| format!("variant {}: {e}", v.label);
    let mut prio = ControllerConfig::default();
    let mut spec = stacks::StackSpec::new(v.stack);
    spec.ftl.buffer_bytes = 0;
    for (k, val) in &v.set {
        match k.split_once('.') {
            Some(("prio", f)) => stacks::apply(&mut prio, f, val).map_err(|e| at(e.to_string()))?,
            _ if other(k, val).map_err(at)? => {}
            _ => spec
                .set(k, val)
                .map_err(|e| at(format!("{e}; and prio.*")))?,
        }
    }
    prio.validate().map_err(|e| at(e.to_string()))?;
    spec.fml = stacks::FmlBase::Controlled(prio);
    Ok((prio, spec))
}

/// Builds a variant of a scheduled experiment on a fresh device: stack `ftl` or `dftl` (the
/// page-mapping FTL) or `osd` (the object store, the byte space cut into objects of
/// `object_bytes`), with `prio.*` settings for the controller and the rest for the stack.
pub fn build(
    v: &Variant,
    device: flash::DeviceConfig,
) -> Result<(Box<dyn Stack>, ControllerConfig), String> {
    let (prio, spec) = scheduled_spec(v, |_, _| Ok(false))?;
    let stack = spec
        .build_block(device)
        .map_err(|e| format!("variant {}: {e}", v.label))?;
    Ok((stack, prio))
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
) -> Result<VariantRun, String> {
    if v.stack == StackKind::Ofs {
        return run_ofs_variant(plan, v, device, seed).map(|(run, _)| run);
    }
    let w = match plan {
        Plan::Synthetic(w) => w,
        Plan::Video(video) => &video.background,
        Plan::FileWrites(f) => &f.background,
    };
    w.validate()?;
    let (mut stack, cfg) = build(v, device)?;
    let unit = stack.unit_bytes();
    if !w.request_bytes.is_multiple_of(512) || w.request_bytes > unit * 64 {
        return Err(format!(
            "request_bytes = {} does not fit the device",
            w.request_bytes
        ));
    }
    let capacity = stack.capacity_bytes();
    let footprint = (capacity as f64 * w.utilisation) as u64 / unit * unit;
    let mut verifier = Verifier::new(capacity, unit);
    let t = fill_and_age(
        stack.as_mut(),
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
    let out = run_with(stack.as_mut(), &cfg, arrivals, t, seed, Some(&mut verifier))
        .map_err(|e| format!("measure: {e}"))?;
    finish(stack.as_mut(), out, before, t)
}

/// The phases of a measured run that started at `t`: its foreground, its background and both
/// with the stack's counters since `before`, and the stack's check.
pub(crate) fn finish(
    stack: &mut dyn Stack,
    out: PrioOutcome,
    before: stacks::Counters,
    t: Nanos,
) -> Result<VariantRun, String> {
    let counters = stack.counters() - before;
    let mut all = FileStats::new(t);
    for s in [&out.foreground, &out.background] {
        all.reads += s.reads;
        all.writes += s.writes;
        all.read_bytes += s.read_bytes;
        all.write_bytes += s.write_bytes;
        all.transactions += s.transactions;
        all.end_ns = all.end_ns.max(s.end_ns);
        all.read_latency
            .add(&s.read_latency)
            .map_err(|e| e.to_string())?;
        all.write_latency
            .add(&s.write_latency)
            .map_err(|e| e.to_string())?;
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
) -> Result<(VariantRun, HostStats), String> {
    let at = |e: String| format!("variant {}: {e}", v.label);
    let bg = match plan {
        Plan::Video(video) => &video.background,
        Plan::FileWrites(f) => &f.background,
        Plan::Synthetic(_) => {
            return Err(at(
                "stack 'ofs' runs the video and file-writes workloads only".into(),
            ))
        }
    };
    bg.validate().map_err(at)?;
    let mut oaq = OaqConfig::default();
    let mut host = HostConfig::default();
    let (prio, spec) = scheduled_spec(v, |k, val| match k.split_once('.') {
        Some(("oaq", f)) => stacks::apply(&mut oaq, f, val)
            .map(|()| true)
            .map_err(|e| e.to_string()),
        Some(("host", f)) => stacks::apply(&mut host, f, val)
            .map(|()| true)
            .map_err(|e| e.to_string()),
        _ => Ok(false),
    })?;
    let mut oaq = Oaq::new(oaq).map_err(|e| at(e.to_string()))?;
    let store = spec.object_store(device).map_err(|e| at(e.to_string()))?;
    let unit = store.unit_bytes() as u64;
    let capacity = store.fml().capacity_units() * unit;
    let mut ofs = Ofs::format(store, spec.ofs).map_err(|e| format!("format: {e}"))?;

    // The files: the foreground's (the video, or the writer's file slots), then the
    // background writer's files over the rest of the footprint.
    let footprint = (capacity as f64 * bg.utilisation) as u64;
    let (front, front_name, front_bytes, priority) = match plan {
        Plan::Video(video) => {
            let bytes = video.seconds * video.frames_per_second as u64 * video.frame_bytes;
            (1, "video", bytes, video.priority)
        }
        Plan::FileWrites(f) => {
            crate::prio::file_writes_region(f, footprint).map_err(at)?;
            (f.file_slots, "file", f.file_bytes, f.priority)
        }
        Plan::Synthetic(_) => unreachable!("refused above"),
    };
    if front_bytes == 0 || !front_bytes.is_multiple_of(unit) {
        return Err(at(format!(
            "a {front_name} of {front_bytes} bytes is not a positive multiple of the {unit}-byte write unit"
        )));
    }
    let front_total = front
        .checked_mul(front_bytes)
        .ok_or_else(|| at("the foreground's files overflow".into()))?;
    let grain = unit / gcd(unit, bg.request_bytes) * bg.request_bytes;
    let file_bytes = host.background_file_bytes;
    if file_bytes == 0 || !file_bytes.is_multiple_of(grain) {
        return Err(at(format!(
            "host.background_file_bytes = {file_bytes} must be a positive multiple of {grain} (the write unit and the background request)"
        )));
    }
    let rest = footprint.saturating_sub(front_total) / grain * grain;
    if rest < footprint / 4 {
        return Err(at(format!(
            "{front_total} bytes of {front_name}s leave too little of the {footprint}-byte footprint to the background writer"
        )));
    }
    let mut files = Files::default();
    let mut add = |ofs: &mut Ofs<_>, name: String, bytes: u64| -> Result<(), String> {
        let ino = ofs
            .create(vfs::ROOT, &name)
            .map_err(|e| format!("create {name}: {e}"))?;
        let file = ScheduledFile::open(ofs, ino).map_err(|e| e.to_string())?;
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
                .map_err(|e| format!("set the priority of inode {}: {e}", f.ino))?;
            oaq.set_object_priority(f.object(), Some(Priority(priority)))
                .map_err(|e| at(e.to_string()))?;
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
            OfsHost::new(oaq, files, requests, deadline, host.device_queue_depth).map_err(at)?
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
            .map_err(at)?
            .with_writer(f, foreground, t)
            .map_err(at)?
        }
        Plan::Synthetic(_) => unreachable!("refused above"),
    };
    if host.priority == PriorityBy::Request {
        h.set_request_priority(Priority(priority));
    }
    let before = stack.counters();
    let mut nothing = std::iter::empty();
    let arrivals = crate::prio::Arrivals::new(&mut nothing, t, None).with_host(&mut h);
    let out = crate::prio::run_with(&mut stack, &prio, arrivals, t, seed, Some(&mut verifier))
        .map_err(|e| format!("measure: {e}"))?;
    let outstanding = h.outstanding();
    if !h.all_done() {
        return Err(format!("measure: {outstanding} OIOs never completed"));
    }
    if verifier.mismatches > 0 {
        return Err(format!("measure: {} reads mismatched", verifier.mismatches));
    }
    let stats = h.stats();
    let run = finish(&mut stack, out, before, t)?;
    Ok((run, stats))
}
