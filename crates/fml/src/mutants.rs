//! Test-only mutants (feature `mutants`): deliberately broken variants of the object store, the
//! FTL and this layer, each one small realistic bug in the real code path, so that a torture
//! campaign can prove its oracle catches them (issue 15, item 5; docs/RELIABILITY.md "Mutants").
//!
//! The mutant is chosen at run time, per thread ([`set`]), so one build runs every mutant and
//! parallel runs do not disturb each other. Without the feature none of this is compiled and no
//! code path changes.

use std::cell::Cell;

/// One deliberately broken variant. Where each lives and what it breaks is in its doc.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mutant {
    /// osd `store/recovery.rs` `recover`: drops every record found after the checkpoint
    /// (object-store recovery without roll-forward).
    OsdNoRollForward,
    /// osd `store/recovery.rs` `roll_descriptor`: passes over tombstones, so a remove flushed
    /// since the last checkpoint is undone by a crash (a remove not durable at flush).
    RemoveNotDurable,
    /// osd `store/commands.rs` `truncate`: the new length does not mark the onode dirty, so it
    /// is never written (a stale length after truncate).
    TruncateStaleLength,
    /// fml `gc_step`: GC also copies the invalid (superseded) units it passes in a victim, and
    /// the owner remaps them (GC copying a stale version).
    GcCopiesStale,
    /// osd `store/data.rs` `read_data_unit`: a unit that cannot be read (uncorrectable, or its
    /// payload fails its checksum) is returned as zeros instead of an error (zero-filling
    /// unreadable units).
    ZeroFillUnreadable,
    /// fml `mark_valid` (recovery's rebuild of the valid units): an off-by-one comparison
    /// calls the last programmed unit of a block never programmed (a spurious `Corrupted` at
    /// open).
    SpuriousCorrupted,
    /// osd `store/commands.rs` `set_attr`: a user attribute change does not mark the onode
    /// dirty (an attribute change lost).
    AttrLost,
    /// osd `store/checkpoint.rs` `checkpoint_inner`: the index is committed before the write
    /// buffer and dirty onodes are flushed, and the checkpoint's sequence number then claims
    /// them (a checkpoint written before the data it covers).
    CheckpointBeforeData,
    /// ftl `recovery.rs` `recover`: the walk does not stop at the checkpoint for data units,
    /// so units older than it are rolled forward over the checkpoint's map and a trimmed page
    /// comes back (an FTL that forgets a TRIM on recovery).
    FtlForgetsTrim,
    /// osd `store/data.rs` `read_data_unit`: the unit is not checked against its OOB record:
    /// a unit that reads erased (its write went elsewhere) or holds another unit (another's
    /// write landed there) is returned as read (a misdirected write not caught on read).
    MisdirectedUncaught,
}

impl Mutant {
    /// Every mutant, in the order of issue 15's list.
    pub const ALL: [Mutant; 10] = [
        Mutant::OsdNoRollForward,
        Mutant::RemoveNotDurable,
        Mutant::TruncateStaleLength,
        Mutant::GcCopiesStale,
        Mutant::ZeroFillUnreadable,
        Mutant::SpuriousCorrupted,
        Mutant::AttrLost,
        Mutant::CheckpointBeforeData,
        Mutant::FtlForgetsTrim,
        Mutant::MisdirectedUncaught,
    ];

    /// A short name, for tables and the command line.
    pub fn name(self) -> &'static str {
        match self {
            Mutant::OsdNoRollForward => "osd-no-roll-forward",
            Mutant::RemoveNotDurable => "remove-not-durable",
            Mutant::TruncateStaleLength => "truncate-stale-length",
            Mutant::GcCopiesStale => "gc-copies-stale",
            Mutant::ZeroFillUnreadable => "zero-fill-unreadable",
            Mutant::SpuriousCorrupted => "spurious-corrupted",
            Mutant::AttrLost => "attr-lost",
            Mutant::CheckpointBeforeData => "checkpoint-before-data",
            Mutant::FtlForgetsTrim => "ftl-forgets-trim",
            Mutant::MisdirectedUncaught => "misdirected-uncaught",
        }
    }

    /// Whether the mutant lives in the FTL (tortured with `--stack ftl`) rather than the object
    /// store.
    pub fn ftl(self) -> bool {
        self == Mutant::FtlForgetsTrim
    }
}

thread_local! {
    static ACTIVE: Cell<Option<Mutant>> = const { Cell::new(None) };
}

/// Chooses the mutant the calling thread runs with (`None`: the real code).
pub fn set(m: Option<Mutant>) {
    ACTIVE.with(|a| a.set(m));
}

/// The calling thread's mutant.
pub fn active() -> Option<Mutant> {
    ACTIVE.with(|a| a.get())
}

/// Whether the calling thread runs with mutant `m`.
pub fn on(m: Mutant) -> bool {
    active() == Some(m)
}
