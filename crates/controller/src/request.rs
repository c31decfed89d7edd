//! Host requests as the controller (and the lab's engine) sees them, whatever produced them: a
//! built-in workload, a trace file, or OAQ's object requests laid out in one byte space.

use flash::Nanos;

/// What a host request asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// Read the range.
    Read,
    /// Write the range.
    Write,
    /// Discard (TRIM): the range no longer holds data the host cares about.
    Trim,
    /// Make every completed write durable.
    Flush,
}

/// One host request on a byte-addressed logical space.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    /// What it asks for.
    pub op: Op,
    /// Where the range starts.
    pub offset_bytes: u64,
    /// How long the range is.
    pub len_bytes: u64,
    /// Priority class; 0 is normal, higher is more urgent.
    pub priority: u8,
    /// Arrival time for open-loop replay (trace timestamps); `None` in closed loop.
    pub arrival_ns: Option<Nanos>,
}

impl Request {
    /// A request at priority 0 with no arrival time.
    pub fn new(op: Op, offset_bytes: u64, len_bytes: u64) -> Self {
        Request {
            op,
            offset_bytes,
            len_bytes,
            priority: 0,
            arrival_ns: None,
        }
    }
}
