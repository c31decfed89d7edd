//! The log of creations, truncations and removals: which entries a mount still needs, and
//! which epoch of the log a mount reads (docs/FORMAT.md section 4, "Record pages").
//!
//! p-OFTL has no checkpoint: a mount rebuilds objects from every data page's OOB record, and an
//! entry is what tells it that an older page, still on flash until its block is erased, was cut.
//! The log is bounded by snapshots: from time to time the store writes the entries a mount
//! still needs into fresh record pages (a new epoch) and frees every page of the epochs before.
//! These are the policies; the store programs the pages.

use crate::store::record::{Entry, LogPage, Op};

/// The first page index (of the object's) an entry cuts, for data pages older than it: a
/// creation or removal cuts every page, a truncation those at and past its new size.
pub fn cut_from(op: Op, size: u64, page_bytes: u64) -> u64 {
    match op {
        Op::Truncate => size.div_ceil(page_bytes),
        Op::Create | Op::Remove => 0,
    }
}

/// Drops the entries of one object (sorted by sequence number) that a mount does not need.
///
/// A mount cuts a data page of sequence `s` from the smallest cut of the entries newer than
/// `s`, and takes the object's existence and size from its newest entry. An entry whose cut
/// is no smaller than that of some newer entry changes neither: every page it cuts, the newer
/// one cuts too. So the entries kept are the newest and those whose cut is below every later
/// one's (a staircase: an object's kept cuts rise with their sequence numbers). A removal,
/// cutting everything, leaves itself alone.
pub fn keep_needed(entries: &mut Vec<Entry>, page_bytes: u64) {
    let mut later_min = u64::MAX;
    let mut keep = vec![false; entries.len()];
    for (i, &(op, _, size, _)) in entries.iter().enumerate().rev() {
        let cut = cut_from(op, size, page_bytes);
        keep[i] = i + 1 == entries.len() || cut < later_min;
        later_min = later_min.min(cut);
    }
    let mut k = keep.into_iter();
    entries.retain(|_| k.next().unwrap_or(true));
}

/// The epoch a mount reads: the newest one whose snapshot is whole (every page of it read
/// back with its checksums), or 0, the epoch before any snapshot. A snapshot cut short by a
/// power loss leaves the epoch before it whole, since its pages are freed only once the
/// snapshot is on flash.
pub fn current_epoch(pages: &[LogPage]) -> u64 {
    let mut snapshots: Vec<(u64, u16, u16)> = pages
        .iter()
        .filter_map(|p| p.snapshot.map(|(i, n)| (p.epoch, n, i)))
        .collect();
    snapshots.sort_unstable();
    snapshots.dedup();
    let mut best = 0;
    for run in snapshots.chunk_by(|a, b| a.0 == b.0 && a.1 == b.1) {
        let (epoch, pages, _) = run[0];
        let whole = run.len() == pages as usize && run.iter().zip(0..).all(|(r, i)| r.2 == i);
        if whole {
            best = best.max(epoch);
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(epoch: u64, snapshot: Option<(u16, u16)>) -> LogPage {
        LogPage {
            count: 0,
            payload_crc: 0,
            seq: 0,
            epoch,
            snapshot,
        }
    }

    #[test]
    fn the_newest_whole_snapshot_wins() {
        assert_eq!(current_epoch(&[]), 0);
        assert_eq!(current_epoch(&[page(0, None), page(0, None)]), 0);
        let whole = [
            page(10, Some((0, 2))),
            page(10, Some((1, 2))),
            page(10, None),
        ];
        assert_eq!(current_epoch(&whole), 10);
        // Epoch 20 lost its second page to a power cut: 10 stands.
        let mut torn = whole.to_vec();
        torn.push(page(20, Some((0, 2))));
        assert_eq!(current_epoch(&torn), 10);
        torn.push(page(20, Some((1, 2))));
        assert_eq!(current_epoch(&torn), 20);
        // A snapshot missing its first page is not whole either.
        assert_eq!(current_epoch(&[page(30, Some((1, 2)))]), 0);
    }

    #[test]
    fn only_entries_that_cut_more_than_every_later_one_are_kept() {
        let pb = 4096;
        let mut e = vec![
            (Op::Create, 1, 0, 1),
            (Op::Truncate, 1, 10 * pb, 2),
            (Op::Truncate, 1, 3 * pb, 3),
            (Op::Truncate, 1, 8 * pb, 4),
            (Op::Truncate, 1, 20 * pb, 5),
        ];
        keep_needed(&mut e, pb);
        // seq 2 (cut 10) is covered by seq 3's cut 3; the rest rise.
        let seqs: Vec<u64> = e.iter().map(|e| e.3).collect();
        assert_eq!(seqs, [1, 3, 4, 5]);
        let mut r = vec![
            (Op::Create, 1, 0, 1),
            (Op::Truncate, 1, pb, 2),
            (Op::Remove, 1, 0, 3),
        ];
        keep_needed(&mut r, pb);
        assert_eq!(r, [(Op::Remove, 1, 0, 3)]);
        let mut empty: Vec<Entry> = Vec::new();
        keep_needed(&mut empty, pb);
        assert!(empty.is_empty());
    }
}
