//! The host path under the mount (OSSD-13 IV-C, V-C, VI-E): OFS -> OAQ -> the device-side
//! controller -> the object store, for real programs.
//!
//! ```text
//!   FUSE read/write --submit--> OAQ (merge per object, one FIFO per priority)
//!                                  |
//!        device thread: controller::policy::decide(View) -> GC step | issue OAQ's head
//!                                  |
//!                     one OFS read/write of the file's data object per OREQ -> replies
//! ```
//!
//! - A read or write of whole 512-byte sectors of a regular file becomes an object I/O
//!   instance (OIO) of the file's data object at the file's priority (`user.ossd.priority`, the
//!   object's `Priority` attribute). OAQ merges contiguous OIOs of one object, direction and
//!   priority into one object request (OREQ), as the prototype's OAQ does.
//! - One device thread plays the device-side controller. It asks the controller's policy
//!   ([`controller::policy::decide`], the same pure function the lab's virtual-time controller
//!   runs) what to do next: a GC step (cleaning as preemptible steps, priority-aware by
//!   default), or the head of the highest priority class OAQ holds. It runs each OREQ as one OFS
//!   read or write and replies to every OIO the OREQ carried.
//! - Everything else (metadata calls, unaligned or `O_APPEND` writes) is a barrier: it waits
//!   until OAQ is empty, then runs on OFS directly. So a call never overtakes a read or write
//!   the kernel has already been answered for, and `fsync` covers every acknowledged write.
//! - Time. The controller's clock is the wall clock (ns since the Unix epoch) or, when the
//!   device model is behind, the device model's time. With [`Timing::Emulate`] the thread waits
//!   on the wall clock for what the policy waits for, and each reply is held until the device
//!   model's completion time; with [`Timing::None`] it jumps its clock instead and replies at
//!   once. Die contention is resolved inside the device model (the store issues each command
//!   at the controller's time and the dies queue it), so the policy sees every queued request
//!   as ready now.
//!
//! Simplifications against the lab's controller, each because the live path gains nothing from
//! it: FCFS within a class (no SWTF), no stripe merging beyond OAQ's, no device-side queue
//! depth (OAQ is the only queue).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use controller::policy::{decide, Action, ClassView, Decision, View};
use controller::ControllerConfig;
use flash::{DieId, Flash, Nanos};
use sched::{Direction, Oaq, OaqConfig, ObjectId, Oio, OioId, Oreq, Priority};
use vfs::{FileData, FileSystem, FsError, Ino, ReadInto};

use crate::fuse::wall_ns;
use crate::stats::{HostPathStats, Latencies};
use crate::{Backend, DirectOfs, Timing};
use ofs::Ofs;

/// OAQ's sector: OIOs are whole sectors of an object.
pub const SECTOR_BYTES: u64 = 512;

/// A read or write of file data for the host path.
#[derive(Debug)]
pub struct FileIo {
    /// The regular file.
    pub ino: Ino,
    /// Byte offset in the file; a multiple of [`SECTOR_BYTES`].
    pub offset: u64,
    /// What to do.
    pub op: IoOp,
}

/// The direction of a [`FileIo`], with its data.
#[derive(Debug)]
pub enum IoOp {
    /// Read this many bytes (a multiple of [`SECTOR_BYTES`]).
    Read {
        /// Bytes.
        len: u32,
    },
    /// Write these bytes (a multiple of [`SECTOR_BYTES`] of them).
    Write {
        /// The data.
        data: Vec<u8>,
    },
}

impl FileIo {
    /// Bytes it moves.
    pub fn len(&self) -> u64 {
        match &self.op {
            IoOp::Read { len } => *len as u64,
            IoOp::Write { data } => data.len() as u64,
        }
    }

    /// Whether it moves nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether the host path can queue it: whole, non-empty sectors (OAQ counts sectors).
    pub fn schedulable(offset: u64, len: u64) -> bool {
        len > 0 && offset.is_multiple_of(SECTOR_BYTES) && len.is_multiple_of(SECTOR_BYTES)
    }
}

/// Called once with an OIO's outcome: the bytes read (empty for a write) or the error.
pub type IoDone = Box<dyn FnOnce(Result<Vec<u8>, FsError>) + Send>;

/// An OIO waiting in OAQ or for its reply.
struct Waiting {
    io: FileIo,
    done: IoDone,
    priority: u8,
    submitted_ns: u64,
}

/// GC bookkeeping of the controller mechanism (as `controller::Controller` keeps it).
#[derive(Default)]
struct GcBook {
    /// No step may start before this (the store's clock was ahead at the last try).
    hold_ns: Nanos,
    /// The last step did nothing and no write has run since.
    stalled: bool,
    /// Steps owed to prioritized writes.
    debt: u64,
    /// Completion times of prioritized OREQs issued.
    priority_in_flight: BinaryHeap<Reverse<Nanos>>,
}

/// What the device thread and the FUSE thread share.
struct State<S: HostStore> {
    /// `None` once shut down or poisoned (a panic below, or dropped without a shutdown).
    ofs: Option<Ofs<S>>,
    oaq: Oaq,
    waiting: HashMap<OioId, Waiting>,
    /// Priority classes of files, as OAQ queues them (cleared by every barrier call, which may
    /// have changed one).
    priorities: HashMap<Ino, u8>,
    /// The controller's clock.
    clock: Nanos,
    gc: GcBook,
    stop: bool,
    /// Tests hold the device thread so that OIOs queue (and merge) deterministically.
    held: bool,
    stats: HostPathStats,
}

struct Shared<S: HostStore> {
    state: Mutex<State<S>>,
    /// Signalled when OIOs arrive, when an OREQ completes (barriers wait for OAQ to empty), on
    /// release of a hold and at stop.
    changed: Condvar,
    answers: Arc<Answers>,
    timing: Timing,
    controller: ControllerConfig,
}

/// Replies to OIOs, recording their latencies (shared with the reply thread).
#[derive(Default)]
struct Answers {
    latencies: Mutex<Latencies>,
}

impl Answers {
    /// Answers an OIO and records its latency (wall clock, submission to reply).
    fn reply(&self, w: Waiting, r: Result<Vec<u8>, FsError>) {
        let write = matches!(w.io.op, IoOp::Write { .. });
        let latency = wall_ns().saturating_sub(w.submitted_ns);
        self.latencies
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .record(w.priority, write, latency);
        (w.done)(r);
    }
}

impl<S: HostStore> Shared<S> {
    fn lock(&self) -> MutexGuard<'_, State<S>> {
        // A panic while holding the state leaves `ofs` as it was; callers check it.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn wait<'a>(&self, g: MutexGuard<'a, State<S>>) -> MutexGuard<'a, State<S>> {
        self.changed.wait(g).unwrap_or_else(|p| p.into_inner())
    }

    fn wait_for<'a>(&self, g: MutexGuard<'a, State<S>>, ns: u64) -> MutexGuard<'a, State<S>> {
        let d = Duration::from_nanos(ns.clamp(1_000, 100_000_000));
        match self.changed.wait_timeout(g, d) {
            Ok((g, _)) => g,
            Err(p) => p.into_inner().0,
        }
    }

    fn reply(&self, w: Waiting, r: Result<Vec<u8>, FsError>) {
        self.answers.reply(w, r)
    }
}

/// OFS whose file reads and writes go through OAQ and the device-side controller: the mount's
/// default [`Backend`].
pub struct ScheduledOfs<S: HostStore = crate::ImageObjectStore> {
    shared: Arc<Shared<S>>,
    device: Option<JoinHandle<()>>,
    replier: Option<Replier>,
}

/// A cloneable handle to submit OIOs.
#[derive(Clone)]
pub struct IoQueue(Arc<dyn Submit>);

impl IoQueue {
    /// Queues a read or write (see [`FileIo::schedulable`]); `done` is called once, from the
    /// device thread or the replier, with its outcome.
    pub fn submit(&self, io: FileIo, done: IoDone) {
        self.0.submit(io, done)
    }
}

/// What [`IoQueue`] hides: the queue of a host path over some store.
trait Submit: Send + Sync {
    fn submit(&self, io: FileIo, done: IoDone);
}

/// The queue of a host path over store `S`: what the FUSE threads and the device thread use.
struct Queue<S: HostStore> {
    shared: Arc<Shared<S>>,
    replier: Option<Arc<ReplierShared>>,
}

impl<S: HostStore> Clone for Queue<S> {
    fn clone(&self) -> Self {
        Queue {
            shared: self.shared.clone(),
            replier: self.replier.clone(),
        }
    }
}

impl<S: HostStore> Submit for Queue<S> {
    fn submit(&self, io: FileIo, done: IoDone) {
        Queue::submit(self, io, done)
    }
}

/// What the host path needs of the store under OFS beyond [`ofs::Store`]: what the
/// device-side controller's policy sees (GC state, the dies GC would use), a count that moves
/// with device work, the write unit, and the statistics and shutdown of the mount.
pub trait HostStore: ofs::Store + Send + 'static {
    /// Free and total blocks and whether a collection is under way.
    fn gc_state(&self) -> controller::GcState;
    /// When the dies the next GC step would use are free (at least `now`).
    fn gc_dies_free_ns(&self, now: Nanos) -> Nanos;
    /// A count that moves whenever the device does any work.
    fn work_done(&self) -> u64;
    /// Bytes of a write unit.
    fn write_unit_bytes(&self) -> u64;
    /// What the statistics document calls this host path.
    const PATH: &'static str;
    /// The device part of the statistics document.
    fn device_json(ofs: &mut Ofs<Self>) -> serde_json::Value
    where
        Self: Sized;
    /// Marks OFS clean and closes the store.
    fn shutdown(ofs: Ofs<Self>) -> Result<(), FsError>
    where
        Self: Sized;
}

impl HostStore for crate::ImageObjectStore {
    fn gc_state(&self) -> controller::GcState {
        stacks::gc_state_of(self.fml())
    }

    fn gc_dies_free_ns(&self, now: Nanos) -> Nanos {
        let mut dies: Vec<DieId> = Vec::new();
        let fml = self.fml();
        stacks::gc_dies_of(fml, None, &mut dies);
        dies.iter()
            .map(|&d| fml.flash().die_free_ns(d))
            .max()
            .unwrap_or(0)
            .max(now)
    }

    fn work_done(&self) -> u64 {
        let f = self.fml().flash().stats();
        f.pages_programmed
            .wrapping_add(f.pages_read)
            .wrapping_add(f.blocks_erased)
    }

    fn write_unit_bytes(&self) -> u64 {
        self.unit_bytes() as u64
    }

    const PATH: &'static str = "OFS -> OAQ -> device-side controller";

    fn device_json(ofs: &mut DirectOfs) -> serde_json::Value {
        crate::stats::ofs_json(ofs)
    }

    fn shutdown(ofs: DirectOfs) -> Result<(), FsError> {
        Backend::shutdown(ofs)
    }
}

/// OSSD-13 §III: OAQ on the host, the device-side controller (and its GC) on the target. The
/// host's policy sees a device that never needs cleaning, so it only orders OAQ's requests.
impl HostStore for client::Client {
    fn gc_state(&self) -> controller::GcState {
        controller::GcState {
            free_blocks: 1,
            blocks: 1,
            collecting: false,
        }
    }

    fn gc_dies_free_ns(&self, now: Nanos) -> Nanos {
        now
    }

    fn work_done(&self) -> u64 {
        0
    }

    /// Only GC debt is counted in write units, and the host never owes the target GC steps.
    fn write_unit_bytes(&self) -> u64 {
        SECTOR_BYTES
    }

    const PATH: &'static str = "OFS -> OAQ -> OSD commands to a remote target";

    fn device_json(ofs: &mut crate::remote::RemoteOfs) -> serde_json::Value {
        crate::remote::device_json(ofs)
    }

    fn shutdown(ofs: crate::remote::RemoteOfs) -> Result<(), FsError> {
        Backend::shutdown(ofs)
    }
}

impl ScheduledOfs {
    /// Starts the host path over `ofs` on an image with the default OAQ and controller
    /// settings.
    pub fn start(ofs: DirectOfs, timing: Timing) -> Result<ScheduledOfs, FsError> {
        Self::start_with(
            ofs,
            timing,
            OaqConfig::default(),
            ControllerConfig::default(),
        )
    }
}

impl<S: HostStore> ScheduledOfs<S> {
    /// Starts the host path over `ofs` (on any store) with the default OAQ and controller
    /// settings.
    pub fn start_on(ofs: Ofs<S>, timing: Timing) -> Result<ScheduledOfs<S>, FsError> {
        Self::start_with(
            ofs,
            timing,
            OaqConfig::default(),
            ControllerConfig::default(),
        )
    }

    /// Starts the host path over `ofs` with these OAQ and controller settings.
    pub fn start_with(
        mut ofs: Ofs<S>,
        timing: Timing,
        oaq: OaqConfig,
        controller: ControllerConfig,
    ) -> Result<ScheduledOfs<S>, FsError> {
        controller
            .validate()
            .map_err(|e| FsError::Invalid(format!("controller settings: {e}")))?;
        let oaq = Oaq::new(oaq).map_err(|e| FsError::Invalid(e.to_string()))?;
        let clock = wall_ns().max(ofs.now());
        ofs.set_time(clock);
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                ofs: Some(ofs),
                oaq,
                waiting: HashMap::new(),
                priorities: HashMap::new(),
                clock,
                gc: GcBook::default(),
                stop: false,
                held: false,
                stats: HostPathStats::default(),
            }),
            changed: Condvar::new(),
            answers: Arc::new(Answers::default()),
            timing,
            controller,
        });
        let replier = match timing {
            Timing::Emulate => Some(Replier::start(shared.answers.clone())?),
            Timing::None => None,
        };
        let queue = Queue::new(&shared, replier.as_ref());
        let device = std::thread::Builder::new()
            .name("ossd-controller".into())
            .spawn(move || {
                quiet_signals();
                device_thread(queue)
            })
            .map_err(|e| FsError::Device(format!("starting the controller thread: {e}")))?;
        Ok(ScheduledOfs {
            shared,
            device: Some(device),
            replier,
        })
    }

    /// A handle to submit OIOs with.
    pub fn queue(&self) -> IoQueue {
        IoQueue(Arc::new(Queue::new(&self.shared, self.replier.as_ref())))
    }

    /// Holds (true) or releases (false) the device thread: while held, OIOs queue in OAQ and
    /// barrier calls would wait forever, so only tests use it.
    #[doc(hidden)]
    pub fn hold(&self, held: bool) {
        self.shared.lock().held = held;
        self.shared.changed.notify_all();
    }

    /// What OAQ and the controller have done so far.
    pub fn host_stats(&self) -> HostPathStats {
        let s = self.shared.lock();
        HostPathStats {
            merges: s.oaq.merges(),
            ..s.stats
        }
    }

    /// Stops the threads: the device thread after OAQ is empty, then the replier after the
    /// replies it holds.
    fn stop_threads(&mut self) {
        self.shared.lock().stop = true;
        self.shared.changed.notify_all();
        if let Some(t) = self.device.take() {
            let _ = t.join();
        }
        if let Some(r) = self.replier.take() {
            r.stop();
        }
    }
}

impl<S: HostStore> Backend for ScheduledOfs<S> {
    type Fs = Ofs<S>;

    /// A barrier: waits until OAQ is empty (everything submitted has run), then calls OFS.
    fn call<T>(&mut self, f: impl FnOnce(&mut Ofs<S>) -> T) -> Result<T, FsError> {
        let mut s = self.shared.lock();
        while !s.oaq.is_empty() && s.ofs.is_some() && !s.held {
            s = self.shared.wait(s);
        }
        s.priorities.clear();
        s.stats.barriers += 1;
        let ofs = s.ofs.as_mut().ok_or_else(poisoned)?;
        let r = f(ofs);
        // The call may have moved the store's clock (its own device work).
        s.clock = s.clock.max(s.ofs.as_ref().map_or(0, |o| o.now()));
        Ok(r)
    }

    fn io_queue(&self) -> Option<IoQueue> {
        Some(self.queue())
    }

    fn stats(&mut self) -> Result<serde_json::Value, FsError> {
        let host = self.host_stats();
        let latencies = self
            .shared
            .answers
            .latencies
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .to_json();
        let timing = self.shared.timing;
        let device = self.call(|ofs| S::device_json(ofs))?;
        Ok(crate::stats::mount_json(
            S::PATH,
            timing,
            device,
            Some(host),
            latencies,
        ))
    }

    fn shutdown(mut self) -> Result<(), FsError> {
        self.stop_threads();
        let ofs = self.shared.lock().ofs.take().ok_or_else(poisoned)?;
        S::shutdown(ofs)
    }
}

impl<S: HostStore> Drop for ScheduledOfs<S> {
    /// Without a shutdown (a panic in a call, or the process ending): the threads stop and OFS
    /// is dropped as it is, not marked clean, as a crash would leave it.
    fn drop(&mut self) {
        {
            let mut s = self.shared.lock();
            if s.ofs.take().is_some() {
                s.stop = true;
            }
        }
        self.stop_threads();
    }
}

fn poisoned() -> FsError {
    FsError::Device(
        "the mount's host path failed earlier (a panic below OAQ); unmount, and the next \
         mount repairs the file system"
            .into(),
    )
}

impl<S: HostStore> Queue<S> {
    fn new(shared: &Arc<Shared<S>>, replier: Option<&Replier>) -> Queue<S> {
        Queue {
            shared: shared.clone(),
            replier: replier.map(|r| r.shared.clone()),
        }
    }

    fn submit(&self, io: FileIo, done: IoDone) {
        let mut s = self.shared.lock();
        if s.ofs.is_none() {
            drop(s);
            done(Err(poisoned()));
            return;
        }
        let len = io.len();
        if !FileIo::schedulable(io.offset, len) || len / SECTOR_BYTES > u32::MAX as u64 {
            drop(s);
            done(Err(FsError::Invalid(format!(
                "{len} bytes at {}: the host path takes whole sectors",
                io.offset
            ))));
            return;
        }
        let priority = match s.priorities.get(&io.ino) {
            Some(&p) => p,
            None => {
                let levels = s.oaq.config().priority_levels;
                // A file's class; anything else (not a regular file, an unreadable attribute)
                // queues as normal and fails in its OFS call if it must.
                let p = s
                    .ofs
                    .as_mut()
                    .and_then(|o| o.priority(io.ino).ok())
                    .unwrap_or(0)
                    .min(levels.saturating_sub(1));
                s.priorities.insert(io.ino, p);
                p
            }
        };
        let oio = Oio {
            oid: ObjectId(io.ino),
            dir: match io.op {
                IoOp::Read { .. } => Direction::Read,
                IoOp::Write { .. } => Direction::Write,
            },
            offset_sectors: io.offset / SECTOR_BYTES,
            sectors: (len / SECTOR_BYTES) as u32,
            priority: Some(Priority(priority)),
        };
        match s.oaq.submit(oio) {
            Ok(id) => {
                s.stats.oios += 1;
                s.waiting.insert(
                    id,
                    Waiting {
                        io,
                        done,
                        priority,
                        submitted_ns: wall_ns(),
                    },
                );
                s.stats.max_queued = s.stats.max_queued.max(s.oaq.queued() as u64);
                drop(self.issue_inline(s));
                self.shared.changed.notify_all();
            }
            Err(e) => {
                drop(s);
                done(Err(FsError::Invalid(e.to_string())));
            }
        }
    }

    /// When OAQ holds only the OIO just submitted, asks the policy on the caller's thread and,
    /// if it says to issue it now, runs it here: handing it to the device thread would change
    /// nothing but the cost of two thread wake-ups. Everything the device thread does happens
    /// under the same lock, so the two never run the store at once.
    fn issue_inline<'a>(&'a self, mut s: MutexGuard<'a, State<S>>) -> MutexGuard<'a, State<S>> {
        if s.held || s.oaq.queued() != 1 || s.ofs.is_none() {
            return s;
        }
        let d = consult(&self.shared, &mut s);
        match d.action {
            Action::Issue { at_ns, .. } if at_ns <= s.clock => {
                s.stats.inline += 1;
                issue(self, s, d.want_gc)
            }
            _ => s,
        }
    }

    /// Replies to finished OIOs: at once, or at the device model's completion time.
    fn finish(&self, done_ns: Nanos, items: Vec<(Waiting, Result<Vec<u8>, FsError>)>) {
        match &self.replier {
            Some(r) => r.schedule(done_ns, items),
            None => {
                for (w, r) in items {
                    self.shared.reply(w, r);
                }
            }
        }
    }
}

/// The host path's threads never take the signals that unmount (SIGINT, SIGTERM, SIGHUP):
/// whichever thread the kernel picked would end the process by the default action before the
/// mount's signal thread could unmount cleanly.
fn quiet_signals() {
    if let Err(e) = crate::block_signals() {
        eprintln!("ossd mount: blocking signals in a host-path thread: {e}");
    }
}

/// The device-side controller's loop (see the module doc).
fn device_thread<S: HostStore>(q: Queue<S>) {
    let shared = &*q.shared;
    let mut s = shared.lock();
    loop {
        if s.ofs.is_none() {
            fail_all(&q, s);
            return;
        }
        if s.stop && s.oaq.is_empty() {
            return;
        }
        if s.held {
            s = shared.wait(s);
            continue;
        }
        let wall = wall_ns();
        let d = consult(shared, &mut s);
        match d.action {
            Action::GcStep => {
                let (now, before) = (s.clock, gc_state(&s));
                gc_step(&mut s, now, before)
            }
            Action::Issue { at_ns, .. } => {
                if shared.timing == Timing::Emulate && at_ns > wall {
                    s = shared.wait_for(s, at_ns - wall);
                    continue;
                }
                s.clock = s.clock.max(at_ns);
                s = issue(&q, s, d.want_gc);
            }
            Action::WaitUntil(t) => match shared.timing {
                Timing::Emulate => s = shared.wait_for(s, t.saturating_sub(wall)),
                Timing::None => s.clock = s.clock.max(t),
            },
            Action::Stalled if !s.oaq.is_empty() => {
                // The policy sees no way forward with requests queued (a policy bug or an
                // impossible configuration): serve them rather than hang the programs.
                s.stats.stalls += 1;
                s = issue(&q, s, d.want_gc);
            }
            Action::Stalled => s = shared.wait(s),
        }
    }
}

/// Moves the controller's clock to the wall clock (if behind) and asks the policy what to do
/// next.
fn consult<S: HostStore>(shared: &Shared<S>, s: &mut State<S>) -> Decision {
    s.clock = s.clock.max(wall_ns());
    let now = s.clock;
    while s
        .gc
        .priority_in_flight
        .peek()
        .is_some_and(|Reverse(d)| *d <= now)
    {
        s.gc.priority_in_flight.pop();
    }
    let d = decide(&shared.controller, &view(s, now));
    if !d.want_gc {
        s.gc.debt = 0;
    }
    d
}

fn gc_state<S: HostStore>(s: &State<S>) -> controller::GcState {
    match &s.ofs {
        Some(ofs) => ofs.store().gc_state(),
        None => controller::GcState {
            free_blocks: 0,
            blocks: 0,
            collecting: false,
        },
    }
}

/// What the policy sees now.
fn view<S: HostStore>(s: &State<S>, now: Nanos) -> View {
    let gc = gc_state(s);
    let gc_dies_free_ns = s
        .ofs
        .as_ref()
        .map_or(now, |ofs| ofs.store().gc_dies_free_ns(now));
    let levels = s.oaq.config().priority_levels;
    let classes = (0..levels)
        .filter(|&p| s.oaq.queued_at(Priority(p)) > 0)
        .map(|p| ClassView {
            priority: p,
            ready_ns: vec![now],
        })
        .collect();
    View {
        now_ns: now,
        gc,
        gc_dies_free_ns,
        gc_hold_ns: s.gc.hold_ns,
        gc_stalled: s.gc.stalled,
        gc_debt: s.gc.debt,
        priority_in_flight: !s.gc.priority_in_flight.is_empty(),
        next_arrival_ns: None,
        classes,
    }
}

/// One GC step at `now`; learns whether it did anything (as `controller::Controller` does).
fn gc_step<S: HostStore>(s: &mut State<S>, now: Nanos, before: controller::GcState) {
    let Some(ofs) = s.ofs.as_mut() else { return };
    let work = ofs.store().work_done();
    let r = catch_unwind(AssertUnwindSafe(|| {
        ofs.store_mut().background(now, now.saturating_add(1))
    }));
    let done = match r {
        Ok(Ok(done)) => done,
        Ok(Err(e)) => {
            // A failed step is the store's to report on the next call that needs space; the
            // controller stops trying until a write changes something.
            eprintln!("ossd mount: background GC step failed: {e}");
            s.gc.stalled = true;
            return;
        }
        Err(_) => {
            eprintln!("ossd mount: a GC step panicked; every later call fails with EIO");
            s.ofs = None;
            return;
        }
    };
    let after = ofs.store().gc_state();
    if after != before || ofs.store().work_done() != work {
        s.stats.gc_steps += 1;
        s.gc.debt = s.gc.debt.saturating_sub(1);
        s.clock = s.clock.max(done);
    } else if done > now {
        s.gc.hold_ns = done;
    } else {
        s.gc.stalled = true;
    }
}

/// Issues OAQ's head as one OFS call and replies to its OIOs; returns the lock (released while
/// replying).
fn issue<'a, S: HostStore>(
    q: &'a Queue<S>,
    mut s: MutexGuard<'a, State<S>>,
    want_gc: bool,
) -> MutexGuard<'a, State<S>> {
    let Some(oreq) = s.oaq.dispatch() else {
        return s;
    };
    s.stats.oreqs += 1;
    if oreq.priority.0 > 0 {
        s.stats.prioritized_oreqs += 1;
    }
    let mut items: Vec<Waiting> = oreq
        .oios
        .iter()
        .filter_map(|id| s.waiting.remove(id))
        .collect();
    items.sort_by_key(|w| w.io.offset);
    let at = s.clock;
    let Some(ofs) = s.ofs.as_mut() else {
        drop(s);
        q.finish(
            at,
            items.into_iter().map(|w| (w, Err(poisoned()))).collect(),
        );
        return q.shared.lock();
    };
    ofs.set_time(at);
    let outcome = catch_unwind(AssertUnwindSafe(|| run(ofs, &oreq, &items)));
    let (results, done_ns) = match outcome {
        Ok(r) => (r, ofs.now().max(at)),
        Err(_) => {
            eprintln!("ossd mount: an object request panicked; every later call fails with EIO");
            s.ofs = None;
            let n = items.len();
            (
                std::iter::repeat_with(|| Err(poisoned())).take(n).collect(),
                at,
            )
        }
    };
    if oreq.dir == Direction::Write {
        s.gc.stalled = false;
        let preempt = q.shared.controller.gc_preemption != controller::GcPreemption::Collection;
        if oreq.priority.0 > 0 && preempt && want_gc {
            if let Some(ofs) = s.ofs.as_ref() {
                let unit = ofs.store().write_unit_bytes();
                let (lo, len) = (oreq.offset_sectors * SECTOR_BYTES, oreq.sectors as u64);
                s.gc.debt += (lo + len * SECTOR_BYTES).div_ceil(unit) - lo / unit;
            }
        }
    }
    if oreq.priority.0 > 0 {
        s.gc.priority_in_flight.push(Reverse(done_ns));
    }
    drop(s);
    q.shared.changed.notify_all();
    q.finish(done_ns, items.into_iter().zip(results).collect());
    q.shared.lock()
}

/// One OREQ as one OFS call: its OIOs are contiguous and sorted, so a write is their bytes laid
/// end to end and a read is cut back into them.
fn run<S: HostStore>(
    ofs: &mut Ofs<S>,
    oreq: &Oreq,
    items: &[Waiting],
) -> Vec<Result<Vec<u8>, FsError>> {
    let offset = oreq.offset_sectors * SECTOR_BYTES;
    let len = oreq.sectors as u64 * SECTOR_BYTES;
    match oreq.dir {
        Direction::Write => {
            let mut buf = Vec::with_capacity(len as usize);
            for w in items {
                if let IoOp::Write { data } = &w.io.op {
                    buf.extend_from_slice(data);
                }
            }
            let r = if buf.len() as u64 == len {
                ofs.write(oreq.oid.0, offset, len, FileData::Bytes(&buf))
            } else {
                Err(FsError::Device(format!(
                    "an object request of {len} bytes carried {} bytes of writes",
                    buf.len()
                )))
            };
            items
                .iter()
                .map(|_| r.clone().map(|()| Vec::new()))
                .collect()
        }
        Direction::Read => {
            let mut buf = vec![0u8; len as usize];
            match ofs.read(oreq.oid.0, offset, ReadInto::Bytes(&mut buf)) {
                Ok(n) => items
                    .iter()
                    .map(|w| {
                        let from = ((w.io.offset - offset).min(n)) as usize;
                        let to = ((w.io.offset - offset + w.io.len()).min(n)) as usize;
                        Ok(buf[from..to].to_vec())
                    })
                    .collect(),
                Err(e) => items.iter().map(|_| Err(e.clone())).collect(),
            }
        }
    }
}

/// Fails every waiting OIO (the host path is gone).
fn fail_all<S: HostStore>(q: &Queue<S>, mut s: MutexGuard<'_, State<S>>) {
    while s.oaq.dispatch().is_some() {}
    let items: Vec<Waiting> = s.waiting.drain().map(|(_, w)| w).collect();
    drop(s);
    q.shared.changed.notify_all();
    q.finish(0, items.into_iter().map(|w| (w, Err(poisoned()))).collect());
}

/// Holds replies until the device model's completion time ([`Timing::Emulate`]).
struct Replier {
    shared: Arc<ReplierShared>,
    thread: Option<JoinHandle<()>>,
}

type Replies = Vec<(Waiting, Result<Vec<u8>, FsError>)>;

#[derive(Default)]
struct ReplierState {
    due: BinaryHeap<Reverse<(Nanos, u64)>>,
    held: HashMap<u64, Replies>,
    next: u64,
    stop: bool,
}

struct ReplierShared {
    state: Mutex<ReplierState>,
    changed: Condvar,
    host: Arc<Answers>,
}

impl ReplierShared {
    fn lock(&self) -> MutexGuard<'_, ReplierState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn schedule(&self, done_ns: Nanos, items: Replies) {
        let mut s = self.lock();
        let n = s.next;
        s.next += 1;
        s.due.push(Reverse((done_ns, n)));
        s.held.insert(n, items);
        drop(s);
        self.changed.notify_all();
    }
}

impl Replier {
    fn start(host: Arc<Answers>) -> Result<Replier, FsError> {
        let shared = Arc::new(ReplierShared {
            state: Mutex::new(ReplierState::default()),
            changed: Condvar::new(),
            host,
        });
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name("ossd-replier".into())
            .spawn(move || {
                quiet_signals();
                replier_thread(&s)
            })
            .map_err(|e| FsError::Device(format!("starting the reply thread: {e}")))?;
        Ok(Replier {
            shared,
            thread: Some(thread),
        })
    }

    fn stop(mut self) {
        self.shared.lock().stop = true;
        self.shared.changed.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn replier_thread(r: &ReplierShared) {
    let mut s = r.lock();
    loop {
        let Some(&Reverse((due, n))) = s.due.peek() else {
            if s.stop {
                return;
            }
            s = r.changed.wait(s).unwrap_or_else(|p| p.into_inner());
            continue;
        };
        let now = wall_ns();
        if due > now && !s.stop {
            let d = Duration::from_nanos((due - now).min(10_000_000_000));
            s = match r.changed.wait_timeout(s, d) {
                Ok((g, _)) => g,
                Err(p) => p.into_inner().0,
            };
            continue;
        }
        s.due.pop();
        let items = s.held.remove(&n).unwrap_or_default();
        drop(s);
        for (w, res) in items {
            r.host.reply(w, res);
        }
        s = r.lock();
    }
}
