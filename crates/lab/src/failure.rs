//! What can fail while a run is under way, apart from the modules that fail: the engine, the
//! controller's host queue and the OFS host all report a [`Failure`], and the OFS host's own
//! errors ([`OfsHostError`]) are one of its sources. Kept apart so the engine does not depend on
//! the OFS host that depends on it.

use stacks::StackFault;
use vfs::FsError;
use workload::trace::TraceError;

use crate::request::Op;

/// Why a request, a GC step or a source of requests failed during a run.
#[derive(Debug, thiserror::Error)]
pub enum Failure {
    /// The stack failed the request or the GC step.
    #[error(transparent)]
    Stack(#[from] StackFault),
    /// A read returned the wrong data.
    #[error(transparent)]
    Mismatch(#[from] Mismatch),
    /// A trace line could not be read or parsed.
    #[error(transparent)]
    Trace(#[from] TraceError),
    /// The host side of a scheduled OFS run (OAQ, the files) failed.
    #[error(transparent)]
    Host(#[from] OfsHostError),
    /// A completion tagged as the prioritized file writer's in a run that has none (a bug).
    #[error("a chained request without its chain")]
    NoChain,
    /// A completion tagged as the host's in a run that has none (a bug).
    #[error("a host request without its host")]
    NoHost,
}

/// Why the host side of a scheduled OFS run failed.
#[derive(Debug, thiserror::Error)]
pub enum OfsHostError {
    /// OAQ or the host queue refused an OIO, or lost track of one.
    #[error(transparent)]
    Host(#[from] host::HostError),
    /// An OIO of a file could not be made (a range that is not whole sectors, or too long).
    #[error(transparent)]
    Fs(#[from] FsError),
    /// A prioritized file writer with no files to write.
    #[error("file-writes: no file slots")]
    NoSlots,
    /// A completion of the file writer with none of its OIOs outstanding (a bug).
    #[error("a file write completed with none outstanding")]
    NoneOutstanding,
    /// A completion of a file write in a run without a file writer (a bug).
    #[error("a file write without its writer")]
    NoWriter,
    /// A request of an operation the scheduled OFS path does not carry (TRIM, FLUSH).
    #[error("the scheduled OFS path has no {op:?}")]
    Op {
        /// The operation.
        op: Op,
    },
    /// A request whose range is not within one file.
    #[error("request {offset}+{len} crosses a file boundary")]
    CrossesFiles {
        /// Its first byte in the flat space.
        offset: u64,
        /// Its length in bytes.
        len: u64,
    },
    /// The workload's requests arrived out of order.
    #[error("requests are not in arrival order")]
    ArrivalOrder,
}

/// A read that returned another fingerprint than the last whole write of its unit left there
/// ([`crate::engine::Verifier`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unit {unit} read back fingerprint {got:#x}, expected {expected:#x}")]
pub struct Mismatch {
    /// The write unit, numbered in the stack's flat byte space.
    pub unit: u64,
    /// The fingerprint read.
    pub got: u64,
    /// The fingerprint the last whole write left.
    pub expected: u64,
}
