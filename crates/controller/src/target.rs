//! What the controller needs from the device below it: a narrow trait any mapping layer (the
//! object store, the page-mapping FTL, p-OFTL) can be adapted to.

use flash::{DieId, Nanos};

use crate::Request;

/// Free space and GC progress of the FML under a target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GcState {
    /// Free (erased) blocks.
    pub free_blocks: u32,
    /// Usable blocks.
    pub blocks: u32,
    /// A victim is being collected (chosen, not yet erased).
    pub collecting: bool,
}

/// The device as the controller drives it. Every call happens at a virtual time the controller
/// chose; the target answers with completion times from its device model.
pub trait Target {
    /// What a failed request or GC step reports.
    type Error;

    /// Serves `req`, issued at `at`; returns when it completes.
    fn submit(&mut self, at: Nanos, req: &Request) -> Result<Nanos, Self::Error>;
    /// Runs at most one GC step, issued at `at`; returns when it completes (or, when the
    /// target's own clock is ahead, the earliest time a step could start).
    fn gc_step(&mut self, at: Nanos) -> Result<Nanos, Self::Error>;
    /// Bytes of the write unit (a stripe, for merging).
    fn unit_bytes(&self) -> u64;
    /// Free space and GC progress.
    fn gc_state(&self) -> GcState;
    /// A count that moves whenever the device does any work (flash operations); the controller
    /// tells a GC step that did something from one that found nothing to do by it.
    fn work_done(&self) -> u64;
    /// The dies `req` would use if issued now; nothing when the target cannot tell.
    fn dies_of(&self, req: &Request, out: &mut Vec<DieId>);
    /// The dies the next GC step would use; nothing when the target cannot tell.
    fn gc_dies(&self, out: &mut Vec<DieId>);
    /// When a die finishes the work issued to it so far.
    fn die_free_ns(&self, die: DieId) -> Nanos;
}
