//! Where the controller's requests come from: the host side (a workload, a trace, OAQ).

use flash::Nanos;

use crate::Request;

/// A host request the controller completed, handed back to the source it came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completion {
    /// The tag the source gave it in [`Source::take`].
    pub tag: u64,
    /// The request as the source handed it over (its own priority, even when the device does
    /// not honor priorities).
    pub request: Request,
    /// When it reached the controller's queue: its arrival, or the run's start if earlier.
    pub arrival_ns: Nanos,
    /// When the device completed it.
    pub done_ns: Nanos,
}

/// A host-side source of requests. The controller asks it, at each decision time, for what has
/// arrived; it may hold requests back on its own side (OAQ holds what the device's queue has no
/// room for, so requests wait and merge on the host).
pub trait Source {
    /// What a source reports when it cannot go on.
    type Error;

    /// The next request that has arrived by `t` and that the source hands over now, with a tag
    /// naming it in [`Source::completed`]. `queued(priority)` is how many requests the
    /// controller's queue for that priority holds.
    fn take(
        &mut self,
        t: Nanos,
        queued: &dyn Fn(u8) -> usize,
    ) -> Result<Option<(Request, u64)>, Self::Error>;
    /// When the next request arrives, if one will (not before the last `take`'s time).
    fn next_arrival(&self) -> Option<Nanos>;
    /// One of the source's requests completed.
    fn completed(&mut self, c: Completion) -> Result<(), Self::Error>;
    /// Whether the run is over even though requests may still arrive (an endless background
    /// writer behind a finite measured one).
    fn finished(&self) -> bool {
        false
    }
}
