//! Where page contents and block state live: in memory ([`MemStore`]) or in an image file
//! ([`crate::image::ImageStore`]). The [`crate::Nand`] enforces the physics; a store only keeps
//! bytes.
//!
//! Whether a page is programmed is not stored per page: pages are programmed in order, so the
//! pages below a block's `next_page` are programmed and the rest are erased. Erasing a block
//! is therefore just resetting `next_page` (and forgetting the contents, to give memory back).

use crate::{BlockInfo, Content, FlashError, Geometry, Payload, NOT_STORED};

/// Keeps what a [`crate::Nand`] programs: page contents, OOB records and block state.
pub trait PageStore {
    /// Block state as stored; `None` for a store that starts blank.
    fn load_blocks(&mut self) -> Result<Option<Vec<BlockInfo>>, FlashError>;
    /// Persists a block's erase count and bad flags (called on erase and on marking bad).
    fn put_block(&mut self, index: u32, info: &BlockInfo) -> Result<(), FlashError>;
    /// Stores a programmed page; `epoch` is the block's erase count, which an image keeps
    /// with the page to tell pages written since the last erase from older ones.
    fn put_page(
        &mut self,
        block: u32,
        page: u32,
        epoch: u32,
        payload: Payload<'_>,
        oob: &[u8],
    ) -> Result<(), FlashError>;
    /// Reads a programmed page; `data` is empty when only the OOB is wanted.
    fn get_page(
        &mut self,
        block: u32,
        page: u32,
        data: &mut [u8],
        oob: &mut [u8],
    ) -> Result<Content, FlashError>;
    /// Forgets a block's contents after an erase.
    fn drop_block(&mut self, block: u32);
    /// Makes everything stored so far durable (a no-op in memory).
    fn sync(&mut self) -> Result<(), FlashError>;
    /// Bytes of memory the store holds for page contents (for the memory report).
    fn resident_bytes(&self) -> u64;
}

/// Contents of one block, allocated at its first program after an erase and freed at erase.
/// Whether a page is programmed follows from the block's write pointer, so a page costs 8 bytes
/// (its fingerprint, or where its bytes are) and one bit (bytes or fingerprint) plus its OOB
/// record if it has one, and a page programmed with bytes its bytes.
#[derive(Clone)]
struct MemBlock {
    /// Per page: its fingerprint, or for a page of bytes where they are in `bytes` (in pages).
    fingerprints: Box<[u64]>,
    /// Bit set: the page holds bytes rather than a fingerprint.
    is_bytes: Box<[u64]>,
    /// OOB bytes, `oob_stride` per page, and each page's record length; allocated at the first
    /// page with a record. The stride grows to the longest record written, so a stack writing
    /// 20-byte records does not pay for a 64-byte spare area, and blocks whose pages carry no
    /// record (the later pages of a ganged write unit) pay nothing.
    oob: Vec<u8>,
    oob_stride: usize,
    oob_len: Vec<u8>,
    /// The bytes of the pages programmed with `Payload::Bytes`, one page size each, in the
    /// order they were programmed (each page's place is in `fingerprints`): a block that mixes a few bytes pages (metadata) with
    /// fingerprint pages (data) holds only those few. A whole-block area allocated zeroed
    /// held up to 3.5 times the bytes stored, and how much of it the process's RSS showed
    /// depended on whether the allocator handed back untouched pages (docs/PERFORMANCE.md
    /// "Bytes pages stored compactly").
    bytes: Vec<u8>,
}

/// The in-memory store: sparse, one allocation per programmed block; or, timing-only, nothing
/// per page at all.
#[derive(Clone)]
pub struct MemStore {
    geometry: Geometry,
    blocks: Vec<Option<Box<MemBlock>>>,
    resident: u64,
    /// Keep page contents and OOB records (false: a timing-only device).
    keep: bool,
    /// Bytes areas of erased blocks that had mostly filled them (emptied, their capacity
    /// kept), for the next blocks programmed with bytes: growing a fresh one page by page
    /// reallocates and copies it, and allocating a zeroed whole-block area was a tenth of a
    /// LittleFS run. At most [`SPARE_AREAS`]; not counted as resident (no page's content is in
    /// them).
    spare: Vec<Vec<u8>>,
}

/// Bytes areas of erased blocks a [`MemStore`] keeps for reuse.
const SPARE_AREAS: usize = 8;

impl MemStore {
    /// An empty store for a device of this geometry, every block erased.
    pub fn new(geometry: Geometry) -> Self {
        let mut blocks = Vec::new();
        blocks.resize_with(geometry.blocks() as usize, || None);
        MemStore {
            geometry,
            blocks,
            resident: 0,
            keep: true,
            spare: Vec::new(),
        }
    }

    /// A store that keeps nothing per page ([`crate::PayloadMode::Timing`]): programs are
    /// dropped, and a programmed page reads as the fingerprint [`NOT_STORED`] with an erased
    /// (all 0xFF) OOB area. The device above still enforces the NAND contract and times every
    /// operation: whether a page is programmed is its block's write pointer, not stored here.
    pub fn timing_only(geometry: Geometry) -> Self {
        MemStore {
            geometry,
            blocks: Vec::new(),
            resident: 0,
            keep: false,
            spare: Vec::new(),
        }
    }

    fn block_bytes(b: &MemBlock) -> u64 {
        (b.fingerprints.len() * 8
            + b.is_bytes.len() * 8
            + b.oob.capacity()
            + b.oob_len.capacity()
            + b.bytes.capacity()) as u64
    }
}

impl PageStore for MemStore {
    fn load_blocks(&mut self) -> Result<Option<Vec<BlockInfo>>, FlashError> {
        Ok(None)
    }

    fn put_block(&mut self, _index: u32, _info: &BlockInfo) -> Result<(), FlashError> {
        Ok(())
    }

    fn put_page(
        &mut self,
        block: u32,
        page: u32,
        _epoch: u32,
        payload: Payload<'_>,
        oob: &[u8],
    ) -> Result<(), FlashError> {
        if !self.keep {
            return Ok(());
        }
        let ppb = self.geometry.pages_per_block as usize;
        let page_size = self.geometry.page_size_bytes as usize;
        let spare = &mut self.spare;
        let slot = &mut self.blocks[block as usize];
        let existed = slot.is_some();
        let b = slot.get_or_insert_with(|| {
            Box::new(MemBlock {
                fingerprints: vec![0; ppb].into_boxed_slice(),
                is_bytes: vec![0; ppb.div_ceil(64)].into_boxed_slice(),
                oob: Vec::new(),
                oob_stride: 0,
                oob_len: Vec::new(),
                bytes: Vec::new(),
            })
        });
        let before = if existed { Self::block_bytes(b) } else { 0 };
        let p = page as usize;
        let bit = 1u64 << (p % 64);
        match payload {
            Payload::Fingerprint(fp) => {
                b.is_bytes[p / 64] &= !bit;
                b.fingerprints[p] = fp;
            }
            Payload::Bytes(data) => {
                // Pages are packed by position: a short one would shift every later page (the
                // device checks sizes before it stores; this guards other callers).
                assert_eq!(data.len(), page_size, "a page's bytes are one page long");
                if b.bytes.capacity() == 0 {
                    if let Some(area) = spare.pop() {
                        b.bytes = area;
                    }
                }
                if b.is_bytes[p / 64] & bit != 0 {
                    // Programmed again before an erase (only a device that lets a fault
                    // through does): the new bytes take the old ones' place.
                    let at = b.fingerprints[p] as usize * page_size;
                    b.bytes[at..at + page_size].copy_from_slice(data);
                } else {
                    b.fingerprints[p] = (b.bytes.len() / page_size) as u64;
                    if b.bytes.len() == b.bytes.capacity() {
                        // Double, but never past a whole block (Vec's own growth would).
                        let room = (ppb * page_size).saturating_sub(b.bytes.len());
                        b.bytes
                            .reserve_exact(b.bytes.len().max(page_size).min(room));
                    }
                    b.bytes.extend_from_slice(data);
                    b.is_bytes[p / 64] |= bit;
                }
            }
        }
        if oob.len() > b.oob_stride {
            let stride = oob.len();
            let mut grown = vec![0xFFu8; ppb * stride];
            for i in 0..b.oob_len.len() {
                let n = b.oob_len[i] as usize;
                grown[i * stride..i * stride + n]
                    .copy_from_slice(&b.oob[i * b.oob_stride..i * b.oob_stride + n]);
            }
            b.oob = grown;
            b.oob_stride = stride;
            b.oob_len.resize(ppb, 0);
        }
        if !b.oob_len.is_empty() {
            b.oob[p * b.oob_stride..p * b.oob_stride + oob.len()].copy_from_slice(oob);
            b.oob_len[p] = oob.len() as u8;
        }
        self.resident = self.resident + Self::block_bytes(b) - before;
        Ok(())
    }

    fn get_page(
        &mut self,
        block: u32,
        page: u32,
        data: &mut [u8],
        oob: &mut [u8],
    ) -> Result<Content, FlashError> {
        let page_size = self.geometry.page_size_bytes as usize;
        // Most reads ask for no spare area (LittleFS's, data reads of the FTL's later pages):
        // even an empty fill costs a masked vector store in libc's memset.
        if !oob.is_empty() {
            oob.fill(0xFF);
        }
        if !self.keep {
            return Ok(Content::Fingerprint(NOT_STORED));
        }
        let Some(b) = self.blocks[block as usize].as_ref() else {
            return Ok(Content::Erased);
        };
        let p = page as usize;
        if let Some(&len) = b.oob_len.get(p) {
            let n = (len as usize).min(oob.len());
            oob[..n].copy_from_slice(&b.oob[p * b.oob_stride..p * b.oob_stride + n]);
        }
        if b.is_bytes[p / 64] & (1 << (p % 64)) == 0 {
            return Ok(Content::Fingerprint(b.fingerprints[p]));
        }
        if !data.is_empty() {
            let at = b.fingerprints[p] as usize * page_size;
            data.copy_from_slice(&b.bytes[at..at + page_size]);
        }
        Ok(Content::Bytes)
    }

    fn drop_block(&mut self, block: u32) {
        if let Some(mut b) = self.blocks.get_mut(block as usize).and_then(Option::take) {
            self.resident -= Self::block_bytes(&b);
            let mut area = std::mem::take(&mut b.bytes);
            // Only an area the block mostly filled is kept: one a block of a few bytes pages
            // took from the spares goes, so large areas do not pile up in such blocks.
            if area.len() * 2 >= area.capacity()
                && area.capacity() > 0
                && self.spare.len() < SPARE_AREAS
            {
                area.clear();
                self.spare.push(area);
            }
        }
    }

    fn sync(&mut self) -> Result<(), FlashError> {
        Ok(())
    }

    fn resident_bytes(&self) -> u64 {
        self.resident + self.blocks.len() as u64 * 8
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Geometry;

    /// A store on one plane of `blocks` blocks of `pages` pages of `page_size` bytes.
    fn store(blocks: u32, pages: u32, page_size: u32) -> MemStore {
        MemStore::new(Geometry {
            channels: 1,
            dies_per_channel: 1,
            planes_per_die: 1,
            blocks_per_plane: blocks,
            pages_per_block: pages,
            page_size_bytes: page_size,
            oob_size_bytes: 16,
        })
    }

    /// A bytes area reused from an erased block never shows the old block's bytes: a page
    /// reads its own bytes once programmed, and reads as no bytes before.
    #[test]
    fn a_reused_bytes_area_shows_only_pages_programmed_since() {
        let mut s = store(4, 4, 512);
        let old = vec![0xA5u8; 512];
        for p in 0..4 {
            s.put_page(0, p, 0, Payload::Bytes(&old), &[1, 2]).unwrap();
        }
        s.drop_block(0);
        assert_eq!(s.spare.len(), 1);
        let new = vec![0x3Cu8; 512];
        s.put_page(1, 1, 0, Payload::Bytes(&new), &[3]).unwrap();
        assert!(s.spare.is_empty(), "the erased block's area was reused");
        let (mut data, mut oob) = (vec![0u8; 512], vec![0u8; 2]);
        assert_eq!(
            s.get_page(1, 1, &mut data, &mut oob).unwrap(),
            Content::Bytes
        );
        assert_eq!((data, oob), (new, vec![3, 0xFF]));
        let mut data = vec![7u8; 512];
        assert_eq!(
            s.get_page(1, 0, &mut data, &mut []).unwrap(),
            Content::Fingerprint(0),
            "a page not programmed since the erase holds no bytes"
        );
        assert_eq!(data, vec![7u8; 512], "and hands none back");
        assert_eq!(
            s.get_page(0, 0, &mut data, &mut []).unwrap(),
            Content::Erased
        );
    }

    /// A block mixing fingerprint pages with a bytes page holds that one page's bytes, not a
    /// whole block's, and each page reads back what it was programmed with.
    #[test]
    fn a_block_holds_the_bytes_of_its_bytes_pages_only() {
        let mut s = store(2, 64, 4096);
        let meta = vec![0x5Au8; 4096];
        for p in 0..64 {
            if p == 9 {
                s.put_page(0, p, 0, Payload::Bytes(&meta), &[]).unwrap();
            } else {
                s.put_page(0, p, 0, Payload::Fingerprint(u64::from(p) + 1), &[])
                    .unwrap();
            }
        }
        assert!(
            s.resident_bytes() < 2 * 4096,
            "{} bytes resident for one bytes page",
            s.resident_bytes()
        );
        let mut data = vec![0u8; 4096];
        assert_eq!(
            s.get_page(0, 9, &mut data, &mut []).unwrap(),
            Content::Bytes
        );
        assert_eq!(data, meta);
        for p in [0, 8, 10, 63] {
            assert_eq!(
                s.get_page(0, p, &mut data, &mut []).unwrap(),
                Content::Fingerprint(u64::from(p) + 1)
            );
        }
        // A block of bytes grows its area to one block, no more, and leaves it as a spare.
        s.drop_block(0);
        for p in 0..64 {
            s.put_page(1, p, 0, Payload::Bytes(&meta), &[]).unwrap();
        }
        s.drop_block(1);
        let spare: Vec<usize> = s.spare.iter().map(Vec::capacity).collect();
        assert!(spare.contains(&(64 * 4096)), "{spare:?}");
        assert!(spare.iter().all(|&c| c <= 64 * 4096), "{spare:?}");
        // A block that took that area for one bytes page does not give it back to the spares.
        s.spare.retain(|a| a.capacity() == 64 * 4096);
        s.put_page(0, 0, 0, Payload::Bytes(&meta), &[]).unwrap();
        assert!(s.spare.is_empty());
        s.drop_block(0);
        assert!(s.spare.is_empty(), "a mostly empty area is freed");
    }
}
