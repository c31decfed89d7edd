//! Wear leveling.
//!
//! - **Dynamic**: a stream that needs a new update block gets the free block with the fewest
//!   erases ([`FreePool`]).
//! - **Static**: cold data pins its blocks at low erase counts while the rest wear out. When
//!   the spread between the most and least erased usable blocks exceeds a threshold, the next
//!   GC victim is the least-erased full block, whatever it holds, so its cold data moves on and
//!   the block rejoins the pool ([`static_victim`]).

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::block::{Block, BlockState};

/// Free blocks ordered by erase count (then id, for determinism).
#[derive(Clone, Default)]
pub struct FreePool {
    heap: BinaryHeap<Reverse<(u32, u32)>>,
}

impl FreePool {
    /// Returns block `id` with `erase_count` erases to the pool.
    pub fn push(&mut self, id: u32, erase_count: u32) {
        self.heap.push(Reverse((erase_count, id)));
    }
    /// Takes the free block with the fewest erases (lowest id on ties).
    pub fn pop_least_worn(&mut self) -> Option<u32> {
        self.heap.pop().map(|Reverse((_, id))| id)
    }
    /// Blocks in the pool.
    pub fn len(&self) -> u32 {
        self.heap.len() as u32
    }
    /// Whether the pool is empty.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}

/// The least-erased full block, if the erase-count spread over usable blocks exceeds
/// `threshold` (0 disables static wear leveling).
pub fn static_victim(blocks: &[Block], threshold: u32) -> Option<u32> {
    if threshold == 0 {
        return None;
    }
    let usable = blocks.iter().filter(|b| b.state != BlockState::Bad);
    let max = usable.clone().map(|b| b.erase_count).max()?;
    let (id, coldest) = blocks
        .iter()
        .enumerate()
        .filter(|(_, b)| b.state == BlockState::Full)
        .min_by_key(|(i, b)| (b.erase_count, *i))?;
    (max - coldest.erase_count > threshold).then_some(id as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(state: BlockState, erase_count: u32) -> Block {
        Block {
            state,
            valid: 1,
            next: 1,
            erase_count,
            seq: 0,
            last_write_ns: 0,
            retire: false,
            class: Default::default(),
        }
    }

    #[test]
    fn pool_hands_out_least_worn_first() {
        let mut p = FreePool::default();
        p.push(1, 9);
        p.push(2, 3);
        p.push(3, 3);
        assert_eq!(p.pop_least_worn(), Some(2));
        assert_eq!(p.pop_least_worn(), Some(3));
        assert_eq!(p.pop_least_worn(), Some(1));
        assert_eq!(p.pop_least_worn(), None);
    }

    #[test]
    fn static_leveling_kicks_in_past_the_threshold() {
        use BlockState::*;
        let t = [b(Full, 10), b(Free, 150), b(Full, 40), b(Bad, 500)];
        assert_eq!(static_victim(&t, 100), Some(0));
        assert_eq!(static_victim(&t, 200), None);
        assert_eq!(static_victim(&t, 0), None);
    }
}
