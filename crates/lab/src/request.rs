//! Host requests as the engine sees them, whatever produced them (a built-in workload or a
//! trace file).

use flash::Nanos;

/// What a host request asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    Read,
    Write,
    /// Discard (TRIM): the range no longer holds data the host cares about.
    Trim,
    /// Make every completed write durable.
    Flush,
}

/// One host request on a byte-addressed logical space.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    pub op: Op,
    pub offset_bytes: u64,
    pub len_bytes: u64,
    /// Priority class; 0 is normal, higher is more urgent.
    pub priority: u8,
    /// Arrival time for open-loop replay (trace timestamps); `None` in closed loop.
    pub arrival_ns: Option<Nanos>,
}

impl Request {
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
