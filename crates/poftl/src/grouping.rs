//! Semantic-aware data grouping (POFTL-14 III-B) and its baselines.
//!
//! The pieces are pure functions so they can be tested on hand-computed cases:
//! - [`hotness`]: a page's degree of hot and cold, `h_p = W_p / (T - T_p^m)` (writes per
//!   second), and [`appended_hotness`], `h_0`, the mean of up to 5 adjacent pages, for pages
//!   written for the first time (III-B-1).
//! - [`group`]: the greedy merge of III-B-2 over the `L` pages of one write: start with one group
//!   per page; repeatedly merge the adjacent pair with the largest decrease of
//!   `W = sum delta(G_i) + lambda * k^2`; stop when no merge decreases `W`.
//! - [`Regions`]: each group goes to the write region closest in update frequency.
//!
//! ## Reading the paper precisely
//! `delta(G_i) = (1/m) sum |h_p - H_i|` is the *mean* absolute deviation of the group's hotness
//! from its mean `H_i` (not the sum). With `f(k) = k^2`, merging two groups lowers `k` by one,
//! so the decrease of the weight is `delta(G_a) + delta(G_b) - delta(G_c) + lambda (k^2 -
//! (k-1)^2) = delta(G_a) + delta(G_b) - delta(G_c) + lambda (2k - 1)`, `k` the group count
//! before the merge. The paper prints the last term as `2 lambda f(k_j) - lambda`, which would
//! be `lambda (2k^2 - 1)`; that does not follow from its own definition of `W`, so we use the
//! difference of `W` itself (the test `merge_gain_is_the_difference_of_weights` pins it).
//! Ties between pairs with the same decrease go to the leftmost pair.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::ops::Range;

use serde::{Deserialize, Serialize};

/// How pages of a write are spread over the write regions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum GroupingPolicy {
    /// POFTL-14 III-B: contiguous groups by hotness and continuity, each to its closest region.
    #[default]
    SemanticAware,
    /// SFS-style (POFTL-14 \[8\]): every page to the region closest to its own update frequency,
    /// from its own write history only (a page with none counts as cold: without object
    /// semantics there is nothing to infer it from).
    Sfs,
    /// No grouping: every page to one region, in logical order.
    None,
}

impl std::str::FromStr for GroupingPolicy {
    type Err = UnknownGrouping;
    fn from_str(s: &str) -> Result<Self, UnknownGrouping> {
        match s {
            "semantic-aware" | "sa" => Ok(GroupingPolicy::SemanticAware),
            "sfs" => Ok(GroupingPolicy::Sfs),
            "none" => Ok(GroupingPolicy::None),
            _ => Err(UnknownGrouping { name: s.into() }),
        }
    }
}

/// A grouping policy name [`GroupingPolicy`]'s `FromStr` does not know.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown grouping '{name}' (semantic-aware, sfs or none)")]
pub struct UnknownGrouping {
    /// The name given.
    pub name: String,
}

/// Pages `h_0` averages over (POFTL-14 III-B-1: "limited to 5 pages at most").
pub const ADJACENT_PAGES: usize = 5;

/// `h_p = W_p / (T - T_p^m)` in writes per second of virtual time, or `None` for a page never
/// written (`W_p = 0`), whose hotness is [`appended_hotness`]. A page modified in the same
/// nanosecond counts one nanosecond of age.
pub fn hotness(writes: u32, last_modified_ns: u64, now_ns: u64) -> Option<f64> {
    (writes > 0).then(|| {
        let age_s = now_ns.saturating_sub(last_modified_ns).max(1) as f64 / 1e9;
        writes as f64 / age_s
    })
}

/// `h_0 = (1/n) sum h_i` over the (at most [`ADJACENT_PAGES`]) adjacent pages given; 0 when
/// there are none (the first pages of a new object have no neighbour with a history).
pub fn appended_hotness(adjacent: &[f64]) -> f64 {
    let n = adjacent.len().min(ADJACENT_PAGES);
    if n == 0 {
        return 0.0;
    }
    adjacent[..n].iter().sum::<f64>() / n as f64
}

/// `H_i`, the mean hotness of a group.
pub fn mean(h: &[f64]) -> f64 {
    if h.is_empty() {
        return 0.0;
    }
    h.iter().sum::<f64>() / h.len() as f64
}

/// `delta(G_i) = (1/m) sum |h_p - H_i|`: the mean absolute deviation within a group.
pub fn delta(h: &[f64]) -> f64 {
    if h.is_empty() {
        return 0.0;
    }
    let m = mean(h);
    // The same sum as `mean` of the deviations collected first, without the allocation (the
    // greedy merge computes three of these per candidate).
    h.iter().map(|x| (x - m).abs()).sum::<f64>() / h.len() as f64
}

/// `W_g = sum delta(G_i) + lambda k^2` of a grouping of `h` into contiguous ranges.
pub fn weight(h: &[f64], groups: &[Range<usize>], lambda: f64) -> f64 {
    let k = groups.len() as f64;
    groups.iter().map(|g| delta(&h[g.clone()])).sum::<f64>() + lambda * k * k
}

/// The decrease of `W` from merging adjacent groups `a` and `b` (`a` just before `b`) when
/// there are `k` groups: `delta(G_a) + delta(G_b) - delta(G_c) + lambda (2k - 1)`.
pub fn merge_gain(h: &[f64], a: Range<usize>, b: Range<usize>, k: usize, lambda: f64) -> f64 {
    debug_assert_eq!(a.end, b.start);
    delta(&h[a.clone()]) + delta(&h[b.clone()]) - delta(&h[a.start..b.end])
        + lambda * (2.0 * k as f64 - 1.0)
}

/// One merge candidate in the heap: the pair starting at group `left`, valid while both groups
/// are unchanged (their versions match).
#[derive(Clone, Copy, Debug)]
struct Candidate {
    /// `delta(G_a) + delta(G_b) - delta(G_c)`: the gain less the `lambda` term, which is the same
    /// for every pair at a given `k` and so does not change which pair is best.
    gain: f64,
    /// `delta(G_c)` of the merged group, kept for the group once the merge is made.
    merged: f64,
    left: usize,
    versions: (u32, u32),
}

impl PartialEq for Candidate {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for Candidate {}
impl PartialOrd for Candidate {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Candidate {
    /// Larger gain first; at equal gain, the leftmost pair first.
    fn cmp(&self, o: &Self) -> Ordering {
        self.gain
            .total_cmp(&o.gain)
            .then_with(|| o.left.cmp(&self.left))
    }
}

/// The greedy merge of POFTL-14 III-B-2 over the hotness of `L` pages in logical order; returns
/// the groups as contiguous ranges, left to right. Non-finite hotness is treated as 0.
pub fn group(h: &[f64], lambda: f64) -> Vec<Range<usize>> {
    group_traced(h, lambda, &mut |_, _| {})
}

/// [`group`], reporting each merge (the two ranges merged) in order, for tests.
pub fn group_traced(
    h: &[f64],
    lambda: f64,
    trace: &mut dyn FnMut(Range<usize>, Range<usize>),
) -> Vec<Range<usize>> {
    let h: Vec<f64> = h
        .iter()
        .map(|&x| if x.is_finite() { x } else { 0.0 })
        .collect();
    let n = h.len();
    if n == 0 {
        return Vec::new();
    }
    // Groups as a doubly linked list over their first page: end, previous group, version.
    let mut end: Vec<usize> = (1..=n).collect();
    let mut prev: Vec<Option<usize>> = (0..n).map(|i| i.checked_sub(1)).collect();
    let mut version = vec![0u32; n];
    let mut alive = vec![true; n];
    let mut k = n;
    // Each group's delta, by its first page: a candidate computes only its merged group's.
    let mut dl: Vec<f64> = (0..n).map(|i| delta(&h[i..i + 1])).collect();
    let mut heap = BinaryHeap::with_capacity(n);
    let candidate = |left: usize, end: &[usize], version: &[u32], dl: &[f64]| {
        let mid = end[left];
        let right_end = end[mid];
        let merged = delta(&h[left..right_end]);
        Candidate {
            gain: dl[left] + dl[mid] - merged,
            merged,
            left,
            versions: (version[left], version[mid]),
        }
    };
    for left in 0..n.saturating_sub(1) {
        heap.push(candidate(left, &end, &version, &dl));
    }
    while let Some(c) = heap.pop() {
        let mid = end[c.left];
        if !alive[c.left] || mid >= n || (version[c.left], version[mid]) != c.versions {
            continue; // stale: one of its groups has merged since
        }
        // Stopping rule: the best merge does not decrease W.
        if c.gain + lambda * (2.0 * k as f64 - 1.0) <= 0.0 {
            break;
        }
        let right_end = end[mid];
        trace(c.left..mid, mid..right_end);
        end[c.left] = right_end;
        dl[c.left] = c.merged;
        alive[mid] = false;
        version[c.left] += 1;
        if right_end < n {
            prev[right_end] = Some(c.left);
        }
        k -= 1;
        if let Some(p) = prev[c.left] {
            heap.push(candidate(p, &end, &version, &dl));
        }
        if right_end < n {
            heap.push(candidate(c.left, &end, &version, &dl));
        }
    }
    let mut out = Vec::with_capacity(k);
    let mut at = 0;
    while at < n {
        out.push(at..end[at]);
        at = end[at];
    }
    out
}

/// The write regions and their update frequencies (POFTL-14 III-B-2, last step: "find the
/// region that is the most proximal in update frequency from the whole write regions").
///
/// The paper does not say how a region's update frequency is set. Here the regions' frequencies
/// are the centres of a one-dimensional k-means (Lloyd's iteration, started from evenly spaced
/// quantiles) of the log-hotness of the last [`Regions::WINDOW`] pages written, recomputed at
/// each write: SFS quantizes hotness the same way (iterative segment quantization), and unlike
/// plain quantiles it keeps the regions apart when many pages share one hotness (pages with
/// no history). Log space, because update frequencies spread over orders of magnitude. A group
/// goes to the region whose centre is closest to its mean; regions are ordered coldest first.
#[derive(Clone, Debug)]
pub struct Regions {
    count: usize,
    window: std::collections::VecDeque<f64>,
    /// The window's values in ascending order (`f64::total_cmp`), merged with each write's
    /// values and those leaving: sorting a copy of the window at every write was a seventh of
    /// a grouping run's time.
    sorted: Vec<f64>,
    /// Room for the merge.
    scratch: Vec<f64>,
    centers: Vec<f64>,
}

impl Regions {
    /// Pages of recent history the region frequencies follow.
    pub const WINDOW: usize = 4096;
    /// Hotness below this (writes per second) counts as this, so `ln` stays finite.
    pub const FLOOR: f64 = 1e-6;
    /// Lloyd iterations per recomputation.
    const ITERATIONS: usize = 8;

    /// Grouping into `count` write regions (at least 1), with no history yet.
    pub fn new(count: usize) -> Regions {
        Regions {
            count: count.max(1),
            window: Default::default(),
            sorted: Vec::new(),
            scratch: Vec::new(),
            centers: Vec::new(),
        }
    }

    /// The natural log of hotness `h` (writes per second), floored at [`Regions::FLOOR`]: the scale
    /// regions are formed on.
    pub fn log(h: f64) -> f64 {
        h.max(Self::FLOOR).ln()
    }

    /// Adds the hotness of pages being written to the history and recomputes the regions'
    /// frequencies (once per write, not per page).
    pub fn observe(&mut self, h: impl IntoIterator<Item = f64>) {
        let (mut added, mut gone) = (Vec::new(), Vec::new());
        for x in h {
            if self.window.len() == Self::WINDOW {
                gone.extend(self.window.pop_front());
            }
            let v = Self::log(x);
            self.window.push_back(v);
            added.push(v);
        }
        added.sort_by(f64::total_cmp);
        gone.sort_by(f64::total_cmp);
        // The window's values: the old ones and the added merged, then those gone taken out
        // (they are among the two, possibly among the added). Values equal under `total_cmp`
        // are the same bits, so which copy goes does not matter.
        self.scratch.clear();
        let (mut i, mut j) = (0, 0);
        while i < self.sorted.len() || j < added.len() {
            let take_old = j == added.len()
                || (i < self.sorted.len() && self.sorted[i].total_cmp(&added[j]).is_le());
            if take_old {
                self.scratch.push(self.sorted[i]);
                i += 1;
            } else {
                self.scratch.push(added[j]);
                j += 1;
            }
        }
        self.sorted.clear();
        let mut g = 0;
        for &x in &self.scratch {
            while g < gone.len() && gone[g].total_cmp(&x).is_lt() {
                g += 1;
            }
            if g < gone.len() && gone[g].total_cmp(&x).is_eq() {
                g += 1;
            } else {
                self.sorted.push(x);
            }
        }
        debug_assert_eq!(self.sorted.len(), self.window.len());
        self.centers = kmeans_1d(&self.sorted, self.count, Self::ITERATIONS);
    }

    /// The region closest in (log) update frequency to `h`; the colder at equal distance.
    pub fn closest(&self, h: f64) -> usize {
        let x = Self::log(h);
        let mut best = 0;
        let mut best_d = f64::INFINITY;
        for (r, c) in self.centers.iter().enumerate() {
            let d = (x - c).abs();
            if d < best_d {
                best = r;
                best_d = d;
            }
        }
        best
    }

    /// The regions' centres, in log hotness (empty before the first observation).
    pub fn centers(&self) -> &[f64] {
        &self.centers
    }
}

/// Lloyd's k-means over sorted values: `k` centres (fewer if there are fewer values), started
/// at the `(2r + 1) / 2k` quantiles, ascending. A centre left with no value keeps its place.
pub fn kmeans_1d(sorted: &[f64], k: usize, iterations: usize) -> Vec<f64> {
    let n = sorted.len();
    if n == 0 {
        return Vec::new();
    }
    let mut c: Vec<f64> = (0..k)
        .map(|r| sorted[((2 * r + 1) * n / (2 * k)).min(n - 1)])
        .collect();
    for _ in 0..iterations {
        // Spread coinciding centres over the values above them, so a point mass (many pages
        // with the same hotness) holds one centre and the others move on.
        for r in 1..c.len() {
            if c[r] <= c[r - 1] {
                let i = sorted.partition_point(|&x| x <= c[r - 1]);
                c[r] = if i < n { sorted[i] } else { c[r - 1] };
            }
        }
        let mut sum = vec![0.0; c.len()];
        let mut cnt = vec![0usize; c.len()];
        // Values and centres ascend: the nearest centre only moves right, so each centre's
        // values are one run, summed in a register (the same additions in the same order as
        // into `sum[j]`, without a store and a load per value).
        let (mut j, mut acc, mut m) = (0, 0.0, 0);
        for &x in sorted {
            while j + 1 < c.len() && (x - c[j + 1]).abs() < (x - c[j]).abs() {
                (sum[j], cnt[j]) = (acc, m);
                (acc, m) = (0.0, 0);
                j += 1;
            }
            acc += x;
            m += 1;
        }
        (sum[j], cnt[j]) = (acc, m);
        let next: Vec<f64> = c
            .iter()
            .zip(sum.iter().zip(&cnt))
            .map(|(&old, (&s, &m))| if m > 0 { s / m as f64 } else { old })
            .collect();
        if next == c {
            break;
        }
        c = next;
    }
    c.dedup_by(|a, b| (*a - *b).abs() < 1e-9);
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-12
    }

    #[test]
    fn hotness_follows_the_definition() {
        assert_eq!(hotness(0, 0, 5_000_000_000), None);
        // 3 writes, last 2 s ago: 1.5 writes per second.
        assert!(close(
            hotness(3, 1_000_000_000, 3_000_000_000).unwrap(),
            1.5
        ));
        // Modified now: one nanosecond of age, not a division by zero.
        assert!((hotness(1, 7, 7).unwrap() - 1e9).abs() < 1e-3);
        // h_0: mean of the adjacent pages, at most 5 of them.
        assert!(close(appended_hotness(&[1.0, 2.0, 3.0]), 2.0));
        assert!(close(
            appended_hotness(&[1.0, 2.0, 3.0, 4.0, 5.0, 100.0]),
            3.0
        ));
        assert_eq!(appended_hotness(&[]), 0.0);
    }

    #[test]
    fn delta_is_the_mean_absolute_deviation() {
        // [0, 4]: mean 2, deviations 2 and 2: delta 2 (the sum would be 4).
        assert!(close(delta(&[0.0, 4.0]), 2.0));
        // [1, 1, 4]: mean 2, deviations 1, 1, 2: delta 4/3.
        assert!(close(delta(&[1.0, 1.0, 4.0]), 4.0 / 3.0));
        assert_eq!(delta(&[5.0]), 0.0);
        assert!(close(
            weight(&[1.0, 1.0, 4.0], &[0..2, 2..3], 0.5),
            0.0 + 0.0 + 0.5 * 4.0
        ));
    }

    #[test]
    fn merge_gain_is_the_difference_of_weights() {
        let h = [1.0, 2.0, 7.0, 7.5];
        let lambda = 0.3;
        let before = [0..1, 1..2, 2..3, 3..4];
        let after = [0..1, 1..3, 3..4];
        let gain = merge_gain(&h, 1..2, 2..3, 4, lambda);
        assert!(close(
            gain,
            weight(&h, &before, lambda) - weight(&h, &after, lambda)
        ));
        // By hand: delta([2, 7]) = 2.5; gain = 0 + 0 - 2.5 + 0.3 * (2*4 - 1) = -0.4.
        assert!(close(gain, -0.4));
    }

    /// Hand-computed run: h = [1, 1, 1, 9, 9], lambda = 0.5.
    /// k=5: pairs (0,1), (1,2), (3,4) gain 0 + 0.5*9 = 4.5; pair (2,3) gains -4 + 4.5 = 0.5.
    ///      The leftmost best pair merges: {0,1}.
    /// k=4: {0,1}+{2}: delta([1,1,1]) = 0, gain 0.5*7 = 3.5; {3}+{4}: 3.5; {2}+{3}: -4 + 3.5 < 0.
    ///      Leftmost: {0,1,2}.
    /// k=3: {3}+{4}: 0.5*5 = 2.5; {0,1,2}+{3}: delta([1,1,1,9]) = 3 -> -3 + 2.5 = -0.5.
    ///      Merge {3,4}.
    /// k=2: {0,1,2}+{3,4}: mean 5.8, delta = (3*4.8 + 2*3.2)/5 = 4.16 -> -4.16 + 1.5 < 0.
    ///      Stop with two groups.
    #[test]
    fn merge_order_and_stopping_rule_by_hand() {
        let h = [1.0, 1.0, 1.0, 9.0, 9.0];
        let mut merges = Vec::new();
        let g = group_traced(&h, 0.5, &mut |a, b| merges.push((a, b)));
        assert_eq!(merges, vec![(0..1, 1..2), (0..2, 2..3), (3..4, 4..5)]);
        assert_eq!(g, vec![0..3, 3..5]);
        // The result is a local minimum of W: the one remaining merge would raise it.
        assert!(merge_gain(&h, 0..3, 3..5, 2, 0.5) <= 0.0);
    }

    /// A larger lambda makes the group count cost more: at lambda = 2, the last merge gains
    /// -4.16 + 2*3 = 1.84 > 0, so everything ends in one group.
    #[test]
    fn a_large_lambda_merges_everything_and_zero_keeps_equal_neighbours_only() {
        let h = [1.0, 1.0, 1.0, 9.0, 9.0];
        assert_eq!(group(&h, 2.0), vec![0..5]);
        // lambda = 0: only merges that do not raise the deviation... and those gain exactly 0,
        // which is not a decrease: nothing merges.
        assert_eq!(group(&h, 0.0), vec![0..1, 1..2, 2..3, 3..4, 4..5]);
    }

    /// Stopping rule at the boundary: a merge whose gain is exactly zero does not happen.
    /// h = [0, 2], lambda = 1/3: gain = 0 + 0 - 1 + (1/3) * 3 = 0 -> stop.
    #[test]
    fn a_merge_that_does_not_decrease_w_is_not_made() {
        assert_eq!(group(&[0.0, 2.0], 1.0 / 3.0), vec![0..1, 1..2]);
        assert_eq!(group(&[0.0, 2.0], 0.34), vec![0..2]);
    }

    /// Non-adjacent pages never share a group: hot pages split by a cold one stay apart when
    /// merging across would cost more than it saves.
    #[test]
    fn groups_are_contiguous() {
        let h = [10.0, 10.0, 0.0, 0.0, 10.0, 10.0];
        let g = group(&h, 0.2);
        assert_eq!(g, vec![0..2, 2..4, 4..6]);
        assert!(group(&[], 1.0).is_empty());
        assert_eq!(group(&[3.0], 1.0), vec![0..1]);
    }

    /// Matches an exhaustive greedy (recompute every pair every step) on pseudo-random input.
    #[test]
    fn heap_greedy_equals_the_naive_greedy() {
        let mut x = 12345u64;
        for case in 0..200 {
            let n = 1 + case % 40;
            let h: Vec<f64> = (0..n)
                .map(|_| {
                    x = x
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    ((x >> 40) % 16) as f64 / 4.0
                })
                .collect();
            let lambda = [0.01, 0.05, 0.2][case % 3];
            let mut groups: Vec<Range<usize>> = (0..n).map(|i| i..i + 1).collect();
            loop {
                let k = groups.len();
                let best = (0..k.saturating_sub(1))
                    .map(|i| {
                        (
                            merge_gain(&h, groups[i].clone(), groups[i + 1].clone(), k, lambda),
                            i,
                        )
                    })
                    .fold(None::<(f64, usize)>, |b, c| match b {
                        Some(b) if b.0 >= c.0 => Some(b),
                        _ => Some(c),
                    });
                match best {
                    Some((g, i)) if g > 0.0 => {
                        let merged = groups[i].start..groups[i + 1].end;
                        groups.splice(i..i + 2, [merged]);
                    }
                    _ => break,
                }
            }
            assert_eq!(group(&h, lambda), groups, "case {case}: h = {h:?}");
        }
    }

    /// The sorted window kept as values come and go is the window sorted, duplicates, the
    /// floor and evictions included.
    #[test]
    fn the_sorted_window_follows_the_window() {
        let mut r = Regions::new(3);
        let mut x = 12345u64;
        for step in 0..3 * Regions::WINDOW / 7 {
            let batch: Vec<f64> = (0..7)
                .map(|_| {
                    x = x
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    ((x >> 40) % 50) as f64 * 0.5
                })
                .collect();
            r.observe(batch);
            if step % 64 == 0 || r.window.len() == Regions::WINDOW {
                let mut copy: Vec<f64> = r.window.iter().copied().collect();
                copy.sort_by(f64::total_cmp);
                assert_eq!(copy, r.sorted, "step {step}");
            }
        }
        // More values in one write than the window holds: some leave as they come.
        r.observe((0..Regions::WINDOW + 100).map(|i| (i % 37) as f64 * 0.25));
        let mut copy: Vec<f64> = r.window.iter().copied().collect();
        copy.sort_by(f64::total_cmp);
        assert_eq!(copy, r.sorted);
    }

    #[test]
    fn regions_split_recent_writes_cold_to_hot() {
        let mut r = Regions::new(4);
        // No history yet: everything to region 0.
        assert_eq!(r.closest(5.0), 0);
        // Four clusters in log space: around 0.01, 1, 100 and 10000 writes per second.
        r.observe([0.009, 0.011, 0.9, 1.1, 90.0, 110.0, 9000.0, 11000.0]);
        assert_eq!(r.centers().len(), 4);
        assert_eq!(r.closest(0.0), 0);
        assert_eq!(r.closest(0.5), 1);
        assert_eq!(r.closest(50.0), 2);
        assert_eq!(r.closest(1e6), 3);
    }

    /// Lloyd's iteration by hand: values 0, 1, 10, 11 with two centres start at the 1/4 and
    /// 3/4 quantiles (indexes 0 and 2: 0 and 10); the means of {0, 1} and {10, 11} are 0.5
    /// and 10.5, which assign the same way: done.
    #[test]
    fn kmeans_by_hand_and_with_a_point_mass() {
        assert_eq!(kmeans_1d(&[0.0, 1.0, 10.0, 11.0], 2, 8), vec![0.5, 10.5]);
        // Six values at the floor and two hot: quantiles would put three centres on the
        // floor; k-means keeps one there and spreads the others over the hot values.
        let mut v = vec![-8.0; 6];
        v.extend([1.0, 3.0]);
        let c = kmeans_1d(&v, 3, 8);
        assert_eq!(c, vec![-8.0, 1.0, 3.0]);
        assert!(kmeans_1d(&[], 4, 8).is_empty());
        assert_eq!(kmeans_1d(&[2.0, 2.0], 4, 8), vec![2.0]);
    }

    #[test]
    fn policies_parse() {
        assert_eq!("sa".parse(), Ok(GroupingPolicy::SemanticAware));
        assert_eq!("sfs".parse(), Ok(GroupingPolicy::Sfs));
        assert_eq!("none".parse(), Ok(GroupingPolicy::None));
        assert!("hot".parse::<GroupingPolicy>().is_err());
    }
}
