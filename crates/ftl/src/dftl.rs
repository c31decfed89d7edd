//! DFTL's cached mapping table (CMT): a bounded LRU of mapping entries in device RAM, with the
//! full table kept in translation pages on flash and located by the global translation
//! directory (GTD). (Gupta et al., ASPLOS 2009.)
//!
//! The simulator keeps the authoritative logical-to-physical table in host memory (it is what
//! the translation pages say plus what the cache has changed); the CMT decides which accesses
//! cost a translation-page read, and which evictions cost a translation-page write-back. A
//! write-back carries every dirty cached entry of that translation page (batch update).

use rustc_hash::FxHashMap as HashMap;

const NIL: u32 = u32::MAX;

#[derive(Clone)]
struct Node {
    lpn: u32,
    dirty: bool,
    prev: u32,
    next: u32,
}

/// Translation I/O an access needs, in this order: write back `writeback`, then fetch `fetch`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CmtIo {
    /// The translation page to write back first (an evicted dirty entry's page).
    pub writeback: Option<u32>,
    /// The translation page to read (a miss).
    pub fetch: Option<u32>,
}

/// DFTL's cached mapping table: an LRU of mapping entries that tracks which translation pages
/// hold dirty entries, or a cache whose hit rate is held ([`Cmt::with_hit_rate`]).
#[derive(Clone)]
pub struct Cmt {
    capacity: usize,
    entries_per_tpage: u32,
    index: HashMap<u32, u32>,
    nodes: Vec<Node>,
    free_nodes: Vec<u32>,
    head: u32,
    tail: u32,
    dirty_by_tpage: HashMap<u32, Vec<u32>>,
    /// Lookups that found their entry cached.
    pub hits: u64,
    /// Lookups that did not.
    pub misses: u64,
    /// POFTL-14 IV-C: the hit rate held at this fraction instead of decided by the LRU.
    forced_hit_rate: Option<f64>,
    lookups: u64,
}

impl Cmt {
    /// An LRU of at most `capacity_entries` entries (at least 1), over translation pages of
    /// `entries_per_tpage` entries each.
    pub fn new(capacity_entries: usize, entries_per_tpage: u32) -> Self {
        Cmt {
            capacity: capacity_entries.max(1),
            entries_per_tpage,
            index: HashMap::default(),
            nodes: Vec::new(),
            free_nodes: Vec::new(),
            head: NIL,
            tail: NIL,
            dirty_by_tpage: HashMap::default(),
            hits: 0,
            misses: 0,
            forced_hit_rate: None,
            lookups: 0,
        }
    }

    /// A cache whose hit rate is held at `rate` (0..=1), as POFTL-14 IV-C sets it
    /// "artificially": each lookup hits with that probability, drawn from a hash of the
    /// lookup's number (deterministic; no seed needed). A miss reads the entry's translation page; a miss that changes the mapping
    /// also writes that translation page back (the entry it displaces is dirty in a
    /// write-mostly steady state), so a write miss costs two page reads and one page write, as
    /// an LRU miss whose eviction is dirty does.
    pub fn with_hit_rate(rate: f64, entries_per_tpage: u32) -> Self {
        Cmt {
            forced_hit_rate: Some(rate.clamp(0.0, 1.0)),
            ..Cmt::new(1, entries_per_tpage)
        }
    }

    /// The translation page holding `lpn`'s entry.
    pub fn tpage_of(&self, lpn: u32) -> u32 {
        lpn / self.entries_per_tpage
    }

    /// Entries cached (always 0 with a held hit rate).
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// Whether no entry is cached.
    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    fn unlink(&mut self, i: u32) {
        let (prev, next) = (self.nodes[i as usize].prev, self.nodes[i as usize].next);
        if prev == NIL {
            self.head = next;
        } else {
            self.nodes[prev as usize].next = next;
        }
        if next == NIL {
            self.tail = prev;
        } else {
            self.nodes[next as usize].prev = prev;
        }
    }

    fn push_front(&mut self, i: u32) {
        self.nodes[i as usize].prev = NIL;
        self.nodes[i as usize].next = self.head;
        if self.head != NIL {
            self.nodes[self.head as usize].prev = i;
        }
        self.head = i;
        if self.tail == NIL {
            self.tail = i;
        }
    }

    fn set_dirty(&mut self, i: u32) {
        let n = &mut self.nodes[i as usize];
        if !n.dirty {
            n.dirty = true;
            let (lpn, tp) = (n.lpn, n.lpn / self.entries_per_tpage);
            self.dirty_by_tpage.entry(tp).or_default().push(lpn);
        }
    }

    /// Looks `lpn` up (and marks it dirty when the access changes the mapping).
    pub fn access(&mut self, lpn: u32, dirty: bool) -> CmtIo {
        if let Some(rate) = self.forced_hit_rate {
            // Lookup n hits when a hash of n, as a fraction of 2^64, falls below the rate:
            // deterministic, and without the period an evenly spread pattern would have (which
            // resonates with a file system's fixed pattern of data and metadata lookups, so
            // that the misses always fell on the same kind of block).
            let u = flash::fingerprint::mix(self.lookups) as f64 / 18_446_744_073_709_551_616.0;
            self.lookups += 1;
            if u < rate {
                self.hits += 1;
                return CmtIo::default();
            }
            self.misses += 1;
            let tp = self.tpage_of(lpn);
            return CmtIo {
                fetch: Some(tp),
                writeback: dirty.then_some(tp),
            };
        }
        if let Some(&i) = self.index.get(&lpn) {
            self.hits += 1;
            self.unlink(i);
            self.push_front(i);
            if dirty {
                self.set_dirty(i);
            }
            return CmtIo::default();
        }
        self.misses += 1;
        let mut io = CmtIo {
            fetch: Some(self.tpage_of(lpn)),
            writeback: None,
        };
        if self.index.len() >= self.capacity {
            io.writeback = self.evict();
        }
        let node = Node {
            lpn,
            dirty: false,
            prev: NIL,
            next: NIL,
        };
        let i = match self.free_nodes.pop() {
            Some(i) => {
                self.nodes[i as usize] = node;
                i
            }
            None => {
                self.nodes.push(node);
                (self.nodes.len() - 1) as u32
            }
        };
        self.index.insert(lpn, i);
        self.push_front(i);
        if dirty {
            self.set_dirty(i);
        }
        io
    }

    /// Evicts the least recently used entry; a dirty one makes its translation page need a
    /// write-back, which cleans every dirty entry of that page.
    fn evict(&mut self) -> Option<u32> {
        let i = self.tail;
        self.unlink(i);
        let Node { lpn, dirty, .. } = self.nodes[i as usize];
        self.index.remove(&lpn);
        self.free_nodes.push(i);
        if !dirty {
            return None;
        }
        let tp = self.tpage_of(lpn);
        self.clean_tpage(tp);
        Some(tp)
    }

    /// Marks every cached entry of a translation page clean (it was just written back).
    pub fn clean_tpage(&mut self, tp: u32) {
        for lpn in self.dirty_by_tpage.remove(&tp).unwrap_or_default() {
            if let Some(&j) = self.index.get(&lpn) {
                self.nodes[j as usize].dirty = false;
            }
        }
    }

    /// Marks a cached entry dirty without touching recency (GC moved its unit). Returns false
    /// if the entry is not cached.
    pub fn mark_dirty_if_cached(&mut self, lpn: u32) -> bool {
        match self.index.get(&lpn) {
            Some(&i) => {
                self.set_dirty(i);
                true
            }
            None => false,
        }
    }

    /// Translation pages that hold dirty cached entries.
    pub fn dirty_tpages(&self) -> Vec<u32> {
        let mut v: Vec<u32> = self.dirty_by_tpage.keys().copied().collect();
        v.sort_unstable();
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lru_hits_misses_and_batched_writeback() {
        let mut c = Cmt::new(2, 10);
        assert_eq!(
            c.access(1, true),
            CmtIo {
                fetch: Some(0),
                writeback: None
            }
        );
        assert_eq!(
            c.access(2, true),
            CmtIo {
                fetch: Some(0),
                writeback: None
            }
        );
        assert_eq!(c.access(1, false), CmtIo::default());
        // 2 is least recent and dirty: writing back page 0 also cleans 1.
        assert_eq!(
            c.access(25, false),
            CmtIo {
                fetch: Some(2),
                writeback: Some(0)
            }
        );
        // 1 is now clean: evicting it costs nothing.
        assert_eq!(
            c.access(33, false),
            CmtIo {
                fetch: Some(3),
                writeback: None
            }
        );
        assert_eq!((c.hits, c.misses), (1, 4));
        assert!(c.dirty_tpages().is_empty());
    }

    #[test]
    fn a_forced_hit_rate_is_held() {
        for rate in [1.0, 0.95, 0.9, 0.85, 0.8] {
            let mut c = Cmt::with_hit_rate(rate, 10);
            for i in 0..20_000 {
                c.access(i % 7, false);
            }
            let got = c.hits as f64 / 20_000.0;
            assert!((got - rate).abs() < 0.01, "rate {rate}: {got}");
            assert_eq!(c.hits + c.misses, 20_000);
        }
        // A write miss also writes its page back; a read miss only fetches it.
        let mut c = Cmt::with_hit_rate(0.5, 10);
        let ios: Vec<CmtIo> = (0..50).map(|_| c.access(42, true)).collect();
        assert!(ios.contains(&CmtIo {
            fetch: Some(4),
            writeback: Some(4)
        }));
        assert!(ios.contains(&CmtIo::default()));
        let read_miss = (0..50)
            .map(|_| c.access(42, false))
            .find(|io| io.fetch.is_some());
        assert_eq!(
            read_miss,
            Some(CmtIo {
                fetch: Some(4),
                writeback: None
            })
        );
        assert!(c.dirty_tpages().is_empty());
    }
}
