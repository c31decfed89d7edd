//! Bitmaps and the goal-based block allocator.
//!
//! Like ext4's, the allocator takes a goal (the block after the file's previous block, so a
//! file that grows stays contiguous) and searches forward from it for a free run, wrapping
//! around the zone once. A new file's goal is a per-zone rotor: the end of the last run given to
//! a file's first block, so files created one after another are laid out one after another.

use crate::layout::Region;

/// A bitmap of `len` bits, 1 = in use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bitmap {
    words: Vec<u64>,
    len: u32,
}

impl Bitmap {
    pub fn new(len: u32) -> Self {
        Bitmap {
            words: vec![0; (len as usize).div_ceil(64)],
            len,
        }
    }

    pub fn get(&self, i: u32) -> bool {
        self.words[i as usize / 64] & (1 << (i % 64)) != 0
    }

    pub fn set(&mut self, i: u32, v: bool) {
        let w = &mut self.words[i as usize / 64];
        if v {
            *w |= 1 << (i % 64);
        } else {
            *w &= !(1 << (i % 64));
        }
    }

    /// Bits in use in `[from, to)`.
    pub fn count_set(&self, from: u32, to: u32) -> u64 {
        (from..to).filter(|&i| self.get(i)).count() as u64
    }

    /// The first clear bit in `[from, to)`.
    pub fn next_clear(&self, from: u32, to: u32) -> Option<u32> {
        next_clear(|w| self.words[w], from, to)
    }

    /// Bits `[from, from + n)` as bytes, little-endian bit order (bit i of byte k is bit
    /// 8k + i), for writing a bitmap block.
    pub fn bytes(&self, from: u32, n: u32, out: &mut [u8]) {
        out.fill(0);
        for i in 0..n.min(self.len.saturating_sub(from)) {
            if self.get(from + i) {
                out[i as usize / 8] |= 1 << (i % 8);
            }
        }
    }

    /// Loads bits `[from, from + n)` from a bitmap block.
    pub fn load(&mut self, from: u32, n: u32, bytes: &[u8]) {
        for i in 0..n.min(self.len.saturating_sub(from)) {
            self.set(from + i, bytes[i as usize / 8] & (1 << (i % 8)) != 0);
        }
    }
}

/// The first clear bit in `[from, to)` of a bitmap given by its words.
fn next_clear(word: impl Fn(usize) -> u64, from: u32, to: u32) -> Option<u32> {
    let mut i = from;
    while i < to {
        let w = word(i as usize / 64) | ((1u64 << (i % 64)) - 1);
        if w != u64::MAX {
            let found = (i / 64) * 64 + w.trailing_ones();
            return (found < to).then_some(found);
        }
        i = (i / 64 + 1) * 64;
    }
    None
}

/// Free runs examined for one of at least the preferred length before settling for the
/// first (mballoc likewise bounds its search).
const RUNS_EXAMINED: usize = 64;

/// Finds a free run in `zone`, free in both `map` and `reserved` (the blocks set aside for
/// preallocation windows), searching forward from `goal` and wrapping once: the first run at
/// least `prefer` blocks long among the next [`RUNS_EXAMINED`], else the longest of those. The run is
/// cut to `want` blocks. Marks nothing.
pub fn find_run(
    map: &Bitmap,
    reserved: &Bitmap,
    zone: Region,
    goal: u32,
    want: u32,
    prefer: u32,
) -> Option<(u32, u32)> {
    let goal = if zone.contains(goal) {
        goal
    } else {
        zone.start
    };
    let word = |w: usize| map.words[w] | reserved.words[w];
    let mut longest: Option<(u32, u32)> = None;
    let mut examined = 0;
    for (from, to) in [(goal, zone.end()), (zone.start, goal)] {
        let mut at = from;
        while let Some(start) = next_clear(word, at, to) {
            let len = free_run(map, reserved, start, prefer.max(want), to);
            if len >= prefer {
                return Some((start, len.min(want)));
            }
            if longest.is_none_or(|(_, l)| len > l) {
                longest = Some((start, len));
            }
            examined += 1;
            if examined >= RUNS_EXAMINED {
                break;
            }
            at = start + len;
        }
    }
    longest.map(|(start, len)| (start, len.min(want)))
}

/// Length of the run from `from` free in both maps, at most `max`, not past `to`.
pub fn free_run(map: &Bitmap, reserved: &Bitmap, from: u32, max: u32, to: u32) -> u32 {
    let end = (from as u64 + max as u64).min(to as u64) as u32;
    (from..end)
        .take_while(|&i| !map.get(i) && !reserved.get(i))
        .count() as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_runs_from_the_goal_and_wraps() {
        let mut m = Bitmap::new(200);
        for i in 0..70 {
            m.set(i, true);
        }
        m.set(75, true);
        let z = Region {
            start: 10,
            len: 180,
        };
        let mut r = Bitmap::new(200);
        assert_eq!(find_run(&m, &r, z, 0, 10, 1), Some((70, 5)));
        assert_eq!(find_run(&m, &r, z, 76, 500, 1), Some((76, 114)));
        assert_eq!(
            find_run(&m, &r, z, 0, 10, 6),
            Some((76, 10)),
            "skips a short run"
        );
        r.set(72, true);
        assert_eq!(
            find_run(&m, &r, z, 0, 10, 1),
            Some((70, 2)),
            "stops at a reserved block"
        );
        for i in 76..190 {
            m.set(i, true);
        }
        assert_eq!(
            find_run(&m, &r, z, 100, 8, 1),
            Some((70, 2)),
            "wraps to the zone start"
        );
        let mut b = vec![0u8; 32];
        m.bytes(64, 200, &mut b);
        let mut back = Bitmap::new(200);
        back.load(64, 200, &b);
        assert_eq!(back.count_set(64, 200), m.count_set(64, 200));
    }
}
