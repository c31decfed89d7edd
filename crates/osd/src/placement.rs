//! Placement policies: which update block (FML stream) each page goes to, decided from what the
//! device knows about the page's object. A policy is a small state machine over pure decisions,
//! chosen in config.
//!
//! - `one` (OFS-ONE, OSSD-13 VI-A): the FML's three update blocks (object descriptors, index
//!   nodes, data) with one data update block shared by every object, so no semantics of the
//!   data is used.
//! - `combined` (OSCM-11 V-A's "combined" segments): every page, metadata included, into one
//!   update block. Before 2026-11-24 this was `one`; it stays as an ablation of OFS-ONE.
//! - `semantic` (OSSD-13 V-F; `ossd` is accepted as its old name): descriptors, index nodes and data in separate update blocks; an object
//!   larger than a virtual erase block gets an update block of its own; smaller objects go to a
//!   hot or a cold update block by their write count against tau = 2 x object size / write unit,
//!   the count being decremented when GC copies the object's pages. As an option
//!   (`osd.realtime_update_blocks`), the data of real-time objects (priority attribute above
//!   0) goes to update blocks dedicated to them (OSSD-13 IV-C), so a real-time write never
//!   shares a block, or its fill rate, with background data.
//! - `split` (OSCM-11 III-B): metadata (onodes, index nodes) in metadata segments, data in data
//!   segments.
//! - `split+atime` (OSCM-11 IV): as `split`, with access times journaled in segments of their own.

use fml::{SegmentClass, StreamId};
use serde::{Deserialize, Serialize};

use crate::id::Oid;

/// A placement policy (see the module documentation); TOML and `--set` take the names in
/// quotes below.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Placement {
    /// `one` (OFS-ONE, OSSD-13 VI-A): descriptors, index nodes and data in three update
    /// blocks, the data of every object sharing one.
    #[serde(rename = "one")]
    One,
    /// `combined`: every page, metadata included, into one update block (OSCM-11 V-A's
    /// combined segments; an ablation of OFS-ONE).
    #[serde(rename = "combined")]
    Combined,
    /// `semantic` (the default; `ossd` is its old name): metadata, index and data apart, hot and
    /// cold data apart, large objects in update blocks of their own (OSSD-13 V-F).
    #[default]
    #[serde(rename = "semantic", alias = "ossd")]
    Semantic,
    /// `split`: metadata segments and data segments (OSCM-11 III-B).
    #[serde(rename = "split")]
    Split,
    /// `split+atime`: as `split`, with access times journaled in segments of their own
    /// (OSCM-11 IV).
    #[serde(rename = "split+atime")]
    SplitAtime,
}

impl std::str::FromStr for Placement {
    type Err = UnknownPlacement;
    fn from_str(s: &str) -> Result<Self, UnknownPlacement> {
        match s {
            "one" => Ok(Placement::One),
            "combined" => Ok(Placement::Combined),
            "semantic" | "ossd" => Ok(Placement::Semantic),
            "split" => Ok(Placement::Split),
            "split+atime" => Ok(Placement::SplitAtime),
            _ => Err(UnknownPlacement { name: s.into() }),
        }
    }
}

/// A placement name [`Placement`]'s `FromStr` does not know.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown placement '{name}'; use one, combined, semantic, split or split+atime")]
pub struct UnknownPlacement {
    /// The name given.
    pub name: String,
}

impl std::fmt::Display for Placement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Placement::One => "one",
            Placement::Combined => "combined",
            Placement::Semantic => "semantic",
            Placement::Split => "split",
            Placement::SplitAtime => "split+atime",
        })
    }
}

/// What a page holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PageKind {
    /// Object data units.
    Data,
    /// Parity units of an object's data (OSCM-11 III), written with the hot data.
    Parity,
    /// Onodes (descriptor page).
    Descriptor,
    /// Index (B+tree) node.
    Index,
    /// Access-time journal entries.
    Atime,
    /// Checkpoint part.
    Checkpoint,
    /// Small-object page: data of several small objects packed together.
    SmallObjects,
}

/// What the placement decision may look at.
#[derive(Clone, Copy, Debug)]
pub struct Hint {
    /// What the page holds.
    pub kind: PageKind,
    /// The object of a data or parity page; the default (0:0) for metadata pages, which hold
    /// many objects'.
    pub oid: Oid,
    /// The larger of the object's logical length and its expected size (a host hint).
    pub object_bytes: u64,
    /// The object's write count in write units.
    pub write_count: u32,
    /// The object's priority attribute (0 normal, above 0 real-time).
    pub priority: u8,
}

// Streams of the `one` policy (OSSD-13 V-F: the FML's three update blocks; VI-A: one data update block for all objects).
const ONE_DESCRIPTOR: u8 = 0;
const ONE_INDEX: u8 = 1;
const ONE_DATA: u8 = 2;

// Streams of the `ossd` policy.
const SEMANTIC_DESCRIPTOR: u8 = 0;
const SEMANTIC_INDEX: u8 = 1;
const SEMANTIC_HOT: u8 = 2;
const SEMANTIC_COLD: u8 = 3;
const SEMANTIC_FIRST_DEDICATED: u8 = 4;
/// Objects larger than a virtual erase block written at the same time, each with an update
/// block of its own; the least recently written gives its block up to a newcomer.
pub const DEDICATED_STREAMS: u8 = 8;

/// Chooses each page's stream under a policy, and keeps which large objects hold the
/// dedicated update blocks.
pub struct Placer {
    policy: Placement,
    write_unit_bytes: u64,
    erase_block_bytes: u64,
    /// Object holding each dedicated stream, with the time (a counter) of its last write.
    dedicated: Vec<Option<(Oid, u64)>>,
    clock: u64,
    /// Update blocks dedicated to real-time objects (`ossd` policy only).
    realtime: u8,
    /// A dedicated stream just taken from another live object: its update block holds that
    /// object's units, so the newcomer must start a fresh one (OSSD-13 VI-C: each large object's
    /// data in blocks of its own, so that removing it leaves whole blocks invalid).
    sealed: Option<StreamId>,
}

impl Placer {
    /// A placer; `realtime` update blocks are dedicated to real-time objects under the `ossd`
    /// policy (the others ignore it).
    pub fn new(
        policy: Placement,
        write_unit_bytes: u64,
        erase_block_bytes: u64,
        realtime: u8,
    ) -> Placer {
        let n = if policy == Placement::Semantic {
            DEDICATED_STREAMS as usize
        } else {
            0
        };
        Placer {
            policy,
            write_unit_bytes,
            erase_block_bytes,
            dedicated: vec![None; n],
            clock: 0,
            sealed: None,
            realtime: if policy == Placement::Semantic {
                realtime
            } else {
                0
            },
        }
    }

    /// The policy.
    pub fn policy(&self) -> Placement {
        self.policy
    }

    /// Streams the policy uses, with `realtime` update blocks for real-time objects.
    pub fn streams(policy: Placement, realtime: u8) -> u8 {
        match policy {
            Placement::One => 3,
            Placement::Combined => 1,
            Placement::Semantic => SEMANTIC_FIRST_DEDICATED + DEDICATED_STREAMS + realtime,
            Placement::Split => 2,
            Placement::SplitAtime => 3,
        }
    }

    /// What each stream of a policy holds, for per-segment-type cleaning thresholds.
    pub fn stream_classes(policy: Placement, realtime: u8) -> Vec<(StreamId, SegmentClass)> {
        let data = |n: u8| (n, SegmentClass::Data);
        let meta = |n: u8| (n, SegmentClass::Metadata);
        let v: Vec<(u8, SegmentClass)> = match policy {
            Placement::One => vec![meta(ONE_DESCRIPTOR), meta(ONE_INDEX), data(ONE_DATA)],
            Placement::Combined => vec![data(0)],
            Placement::Split => vec![meta(0), data(1)],
            Placement::SplitAtime => vec![meta(0), data(1), (2, SegmentClass::Atime)],
            Placement::Semantic => {
                let mut v = vec![
                    meta(SEMANTIC_DESCRIPTOR),
                    meta(SEMANTIC_INDEX),
                    data(SEMANTIC_HOT),
                    data(SEMANTIC_COLD),
                ];
                v.extend(
                    (0..DEDICATED_STREAMS + realtime).map(|i| data(SEMANTIC_FIRST_DEDICATED + i)),
                );
                v
            }
        };
        v.into_iter().map(|(s, c)| (StreamId(s), c)).collect()
    }

    /// The hot/cold threshold of OSSD-13 V-F: tau = 2 x object size / write unit.
    pub fn tau(&self, object_bytes: u64) -> u64 {
        2 * object_bytes.div_ceil(self.write_unit_bytes).max(1)
    }

    /// The stream a page goes to (under `semantic`, this may give a large object a dedicated
    /// update block, taking it from the least recently written one).
    pub fn choose(&mut self, h: &Hint) -> StreamId {
        StreamId(match (self.policy, h.kind) {
            (Placement::Combined, _) => 0,
            (Placement::One, PageKind::Descriptor | PageKind::Checkpoint | PageKind::Atime) => {
                ONE_DESCRIPTOR
            }
            (Placement::One, PageKind::Index) => ONE_INDEX,
            (Placement::One, PageKind::Data | PageKind::SmallObjects | PageKind::Parity) => {
                ONE_DATA
            }
            (
                Placement::Split | Placement::SplitAtime,
                PageKind::Data | PageKind::SmallObjects | PageKind::Parity,
            ) => 1,
            (Placement::SplitAtime, PageKind::Atime) => 2,
            (Placement::Split | Placement::SplitAtime, _) => 0,
            (
                Placement::Semantic,
                PageKind::Descriptor | PageKind::Checkpoint | PageKind::Atime,
            ) => SEMANTIC_DESCRIPTOR,
            (Placement::Semantic, PageKind::Index) => SEMANTIC_INDEX,
            (Placement::Semantic, PageKind::Data) => self.data_stream(h),
            // Small objects (directory entries, say) are rewritten whole, so tau = 2 is soon
            // passed: they go with the hot data.
            (Placement::Semantic, PageKind::SmallObjects) => SEMANTIC_HOT,
            // Parity is rewritten whenever its group is: hot.
            (Placement::Semantic, PageKind::Parity) => SEMANTIC_HOT,
        })
    }

    #[expect(
        clippy::expect_used,
        reason = "the ossd policy is built with at least one dedicated stream (Placer::new)"
    )]
    fn data_stream(&mut self, h: &Hint) -> u8 {
        self.clock += 1;
        if h.priority > 0 && self.realtime > 0 {
            // OSSD-13 IV-C: real-time objects spread over the update blocks dedicated to them.
            let slot = (h.oid.object.0 % self.realtime as u64) as u8;
            return SEMANTIC_FIRST_DEDICATED + DEDICATED_STREAMS + slot;
        }
        if h.object_bytes > self.erase_block_bytes {
            let slot = match self
                .dedicated
                .iter()
                .position(|d| d.is_some_and(|(o, _)| o == h.oid))
            {
                Some(s) => s,
                None => {
                    // A free slot, else the least recently written object's.
                    let s = self
                        .dedicated
                        .iter()
                        .enumerate()
                        .min_by_key(|(i, d)| (d.map_or(0, |(_, t)| t + 1), *i))
                        .map(|(i, _)| i)
                        .expect("the ossd policy has dedicated streams");
                    if self.dedicated[s].is_some() {
                        self.sealed = Some(StreamId(SEMANTIC_FIRST_DEDICATED + s as u8));
                    }
                    s
                }
            };
            self.dedicated[slot] = Some((h.oid, self.clock));
            return SEMANTIC_FIRST_DEDICATED + slot as u8;
        }
        if h.write_count as u64 > self.tau(h.object_bytes) {
            SEMANTIC_HOT
        } else {
            SEMANTIC_COLD
        }
    }

    /// The stream whose update block the last [`Placer::choose`] took from another live
    /// object, once: the caller closes that block before writing, so the newcomer starts a
    /// fresh one.
    pub fn take_sealed(&mut self) -> Option<StreamId> {
        self.sealed.take()
    }

    /// The object was removed: its dedicated stream (if any) is free for another. Its update
    /// block holds only dead units of it, so the next object may go on filling it.
    pub fn forget(&mut self, oid: Oid) {
        for d in self.dedicated.iter_mut() {
            if d.is_some_and(|(o, _)| o == oid) {
                *d = None;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hint(kind: PageKind, object: u64, object_bytes: u64, write_count: u32) -> Hint {
        Hint {
            kind,
            oid: Oid::new(0x10000, object),
            object_bytes,
            write_count,
            priority: 0,
        }
    }

    #[test]
    fn combined_puts_everything_together() {
        let mut p = Placer::new(Placement::Combined, 16384, 8 << 20, 0);
        for k in [
            PageKind::Data,
            PageKind::Descriptor,
            PageKind::Index,
            PageKind::Atime,
        ] {
            assert_eq!(p.choose(&hint(k, 1, 100, 0)), StreamId(0));
        }
    }

    #[test]
    fn one_keeps_three_update_blocks_and_shares_data() {
        // OSSD-13 VI-A: descriptors, index nodes and data apart; every object's data together,
        // large or small, hot or cold.
        let mut p = Placer::new(Placement::One, 16384, 8 << 20, 0);
        assert_eq!(Placer::streams(Placement::One, 0), 3);
        let d = p.choose(&hint(PageKind::Descriptor, 1, 0, 0));
        let i = p.choose(&hint(PageKind::Index, 1, 0, 0));
        assert_ne!(d, i);
        let data: std::collections::HashSet<StreamId> = [
            hint(PageKind::Data, 1, 100, 0),
            hint(PageKind::Data, 2, 64 << 20, 0),
            hint(PageKind::Data, 3, 128 << 10, 1000),
            hint(PageKind::SmallObjects, 4, 100, 0),
        ]
        .iter()
        .map(|h| p.choose(h))
        .collect();
        assert_eq!(data.len(), 1);
        assert!(!data.contains(&d) && !data.contains(&i));
        let classes = Placer::stream_classes(Placement::One, 0);
        assert!(classes.contains(&(d, SegmentClass::Metadata)));
        assert!(classes.contains(&(i, SegmentClass::Metadata)));
    }

    #[test]
    fn split_separates_metadata_and_atime() {
        let mut p = Placer::new(Placement::SplitAtime, 2048, 256 << 10, 0);
        assert_eq!(p.choose(&hint(PageKind::Data, 1, 100, 0)), StreamId(1));
        assert_eq!(
            p.choose(&hint(PageKind::Descriptor, 1, 100, 0)),
            StreamId(0)
        );
        assert_eq!(p.choose(&hint(PageKind::Index, 1, 100, 0)), StreamId(0));
        assert_eq!(p.choose(&hint(PageKind::Atime, 1, 100, 0)), StreamId(2));
        let mut s = Placer::new(Placement::Split, 2048, 256 << 10, 0);
        assert_eq!(s.choose(&hint(PageKind::Atime, 1, 100, 0)), StreamId(0));
    }

    #[test]
    fn ossd_hot_cold_by_tau() {
        let mut p = Placer::new(Placement::Semantic, 16384, 8 << 20, 0);
        // A 128 KiB object: tau = 2 x 8 units = 16.
        assert_eq!(p.tau(128 << 10), 16);
        assert_eq!(
            p.choose(&hint(PageKind::Data, 1, 128 << 10, 16)),
            StreamId(SEMANTIC_COLD)
        );
        assert_eq!(
            p.choose(&hint(PageKind::Data, 1, 128 << 10, 17)),
            StreamId(SEMANTIC_HOT)
        );
        assert_eq!(
            p.choose(&hint(PageKind::Descriptor, 1, 0, 0)),
            StreamId(SEMANTIC_DESCRIPTOR)
        );
        assert_eq!(
            p.choose(&hint(PageKind::Index, 1, 0, 0)),
            StreamId(SEMANTIC_INDEX)
        );
    }

    #[test]
    fn ossd_dedicates_streams_to_large_objects_lru() {
        let mut p = Placer::new(Placement::Semantic, 16384, 8 << 20, 0);
        let big = 9 << 20;
        let first: Vec<StreamId> = (0..8)
            .map(|o| p.choose(&hint(PageKind::Data, o, big, 0)))
            .collect();
        let distinct: std::collections::HashSet<_> = first.iter().collect();
        assert_eq!(distinct.len(), 8);
        // Object 0 keeps its stream; a ninth object takes the least recently written (object 1).
        assert_eq!(p.take_sealed(), None);
        assert_eq!(p.choose(&hint(PageKind::Data, 0, big, 0)), first[0]);
        assert_eq!(p.choose(&hint(PageKind::Data, 8, big, 0)), first[1]);
        // Object 1 is alive: its units fill that update block, so object 8 starts a fresh one.
        assert_eq!(p.take_sealed(), Some(first[1]));
        assert_eq!(p.take_sealed(), None);
        p.forget(Oid::new(0x10000, 8));
        // A removed object's block holds no live units: the next object goes on filling it.
        assert_eq!(p.choose(&hint(PageKind::Data, 9, big, 0)), first[1]);
        assert_eq!(p.take_sealed(), None);
    }

    #[test]
    fn ossd_dedicates_update_blocks_to_realtime_objects_when_asked() {
        let rt = |object: u64, object_bytes: u64| Hint {
            priority: 1,
            ..hint(PageKind::Data, object, object_bytes, 0)
        };
        let first_rt = SEMANTIC_FIRST_DEDICATED + DEDICATED_STREAMS;
        let mut p = Placer::new(Placement::Semantic, 16384, 8 << 20, 2);
        assert_eq!(Placer::streams(Placement::Semantic, 2), first_rt + 2);
        // Small or large, a real-time object's data goes to a real-time block; metadata does not.
        assert_eq!(p.choose(&rt(4, 128 << 10)), StreamId(first_rt));
        assert_eq!(p.choose(&rt(5, 9 << 20)), StreamId(first_rt + 1));
        assert_eq!(
            p.choose(&Hint {
                kind: PageKind::Index,
                ..rt(4, 0)
            }),
            StreamId(SEMANTIC_INDEX)
        );
        assert_eq!(
            p.choose(&hint(PageKind::Data, 4, 128 << 10, 0)),
            StreamId(SEMANTIC_COLD)
        );
        let classes = Placer::stream_classes(Placement::Semantic, 2);
        assert!(classes.contains(&(StreamId(first_rt + 1), SegmentClass::Data)));
        // Without dedicated blocks (the default), priority does not change placement.
        let mut q = Placer::new(Placement::Semantic, 16384, 8 << 20, 0);
        assert_eq!(q.choose(&rt(4, 128 << 10)), StreamId(SEMANTIC_COLD));
        let mut s = Placer::new(Placement::Split, 16384, 8 << 20, 2);
        assert_eq!(s.choose(&rt(4, 128 << 10)), StreamId(1));
    }
}
