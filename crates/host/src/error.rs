//! The host path's errors.

use sched::OioId;

/// Why the host path refused a request or lost track of one.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    /// OAQ refused an OIO or a priority.
    #[error("OAQ: {0}")]
    Sched(#[from] sched::SchedError),
    /// OFS refused to open a file for scheduled I/O, or its range.
    #[error("file system: {0}")]
    Fs(#[from] vfs::FsError),
    /// `host.device_queue_depth` is 0.
    #[error("host.device_queue_depth must be at least 1")]
    QueueDepth,
    /// OAQ dispatched an OREQ none of whose OIOs the host queued (a bug in OAQ or the host).
    #[error("OAQ dispatched an OREQ of object {object} with no OIO the host queued")]
    UnqueuedOreq {
        /// The OREQ's object.
        object: u64,
    },
    /// OAQ dispatched an OREQ of an object that is none of the files (a bug in OAQ or the
    /// host).
    #[error("OAQ dispatched object {object}, which is none of the files")]
    NotAFile {
        /// The OREQ's object.
        object: u64,
    },
    /// A byte range of the flat space that no file (or more than one) holds.
    #[error("bytes {offset}+{len}: {why}")]
    Range {
        /// First byte of the flat space.
        offset: u64,
        /// Bytes.
        len: u64,
        /// What is wrong with it.
        why: &'static str,
    },
    /// A completion for a tag no OREQ in flight carries.
    #[error("no OREQ in flight is tagged {0}")]
    UnknownTag(u64),
    /// An OIO that completed twice, or was never submitted.
    #[error("OIO {0:?} completed twice")]
    CompletedTwice(OioId),
}
