//! One little-endian reader for the hand-written on-flash codecs (inodes, directory blocks,
//! superblocks, OOB records), so that a record shorter than its decoder expects is an error,
//! [`Truncated`], never a panic. Each layer maps it to its own "corrupted" error through `From`
//! (`vfs::FsError`, `osd`'s `OnodeError`, `ftl::FtlError`, `flash::FlashError`), or to a
//! `String` for decoders that report a reason.
//!
//! Two ways to read:
//! - in sequence: [`Le::new`] then [`Le::u8`], [`Le::u16`], [`Le::u32`], [`Le::u64`],
//!   [`Le::bytes`], [`Le::array`] and [`Le::skip`], each advancing the position;
//! - at fixed offsets: [`u16_at`], [`u32_at`], [`u64_at`] and [`array_at`].
//!

/// A read past the end of a record: `wanted` bytes at offset `at` of a `len`-byte buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("truncated record: {wanted} bytes wanted at offset {at} of {len}")]
pub struct Truncated {
    /// Offset of the read in the buffer.
    pub at: usize,
    /// Bytes the read wanted.
    pub wanted: usize,
    /// Length of the buffer.
    pub len: usize,
}

impl From<Truncated> for String {
    fn from(t: Truncated) -> Self {
        t.to_string()
    }
}

/// The `N` bytes at offset `at` of `buf`.
pub fn array_at<const N: usize>(buf: &[u8], at: usize) -> Result<[u8; N], Truncated> {
    at.checked_add(N)
        .and_then(|end| buf.get(at..end))
        .and_then(|s| <[u8; N]>::try_from(s).ok())
        .ok_or(Truncated {
            at,
            wanted: N,
            len: buf.len(),
        })
}

/// The little-endian `u16` at offset `at` of `buf`.
pub fn u16_at(buf: &[u8], at: usize) -> Result<u16, Truncated> {
    array_at(buf, at).map(u16::from_le_bytes)
}

/// The little-endian `u32` at offset `at` of `buf`.
pub fn u32_at(buf: &[u8], at: usize) -> Result<u32, Truncated> {
    array_at(buf, at).map(u32::from_le_bytes)
}

/// The little-endian `u64` at offset `at` of `buf`.
pub fn u64_at(buf: &[u8], at: usize) -> Result<u64, Truncated> {
    array_at(buf, at).map(u64::from_le_bytes)
}

/// Reads little-endian fields in sequence from a byte buffer; every read past the end is
/// [`Truncated`] and leaves the position where it was.
#[derive(Clone, Copy, Debug)]
pub struct Le<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Le<'a> {
    /// A reader at the start of `buf`.
    pub fn new(buf: &'a [u8]) -> Self {
        Le { buf, pos: 0 }
    }

    /// A reader at offset `pos` of `buf` (reads fail if `pos` is past the end).
    pub fn at(buf: &'a [u8], pos: usize) -> Self {
        Le { buf, pos }
    }

    /// Offset of the next read.
    pub fn pos(&self) -> usize {
        self.pos
    }

    /// Bytes left after the position (0 when past the end).
    pub fn remaining(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }

    /// The next `n` bytes.
    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8], Truncated> {
        let s = self
            .pos
            .checked_add(n)
            .and_then(|end| self.buf.get(self.pos..end))
            .ok_or(Truncated {
                at: self.pos,
                wanted: n,
                len: self.buf.len(),
            })?;
        self.pos += n;
        Ok(s)
    }

    /// Skips `n` bytes.
    pub fn skip(&mut self, n: usize) -> Result<(), Truncated> {
        self.bytes(n).map(|_| ())
    }

    /// The next `N` bytes, as an array.
    pub fn array<const N: usize>(&mut self) -> Result<[u8; N], Truncated> {
        let a = array_at(self.buf, self.pos)?;
        self.pos += N;
        Ok(a)
    }

    /// The next byte.
    pub fn u8(&mut self) -> Result<u8, Truncated> {
        self.array::<1>().map(|[b]| b)
    }

    /// The next little-endian `u16`.
    pub fn u16(&mut self) -> Result<u16, Truncated> {
        self.array().map(u16::from_le_bytes)
    }

    /// The next little-endian `u32`.
    pub fn u32(&mut self) -> Result<u32, Truncated> {
        self.array().map(u32::from_le_bytes)
    }

    /// The next little-endian `u64`.
    pub fn u64(&mut self) -> Result<u64, Truncated> {
        self.array().map(u64::from_le_bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_in_sequence_and_at_offsets() {
        let b = [1, 2, 0, 3, 0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0, 9];
        let mut r = Le::new(&b);
        assert_eq!(r.u8(), Ok(1));
        assert_eq!(r.u16(), Ok(2));
        assert_eq!(r.u32(), Ok(3));
        assert_eq!(r.u64(), Ok(4));
        assert_eq!(r.pos(), 15);
        assert_eq!(r.remaining(), 1);
        assert_eq!(r.bytes(1), Ok(&[9][..]));
        assert_eq!(u16_at(&b, 1), Ok(2));
        assert_eq!(u32_at(&b, 3), Ok(3));
        assert_eq!(u64_at(&b, 7), Ok(4));
    }

    #[test]
    fn a_short_buffer_is_truncated_not_a_panic() {
        let b = [1, 2, 3];
        let mut r = Le::new(&b);
        let t = Truncated {
            at: 0,
            wanted: 4,
            len: 3,
        };
        assert_eq!(r.u32(), Err(t));
        assert_eq!(r.pos(), 0, "a failed read does not move");
        assert_eq!(r.u16(), Ok(0x0201));
        assert!(r.u16().is_err());
        assert!(r.skip(2).is_err());
        assert_eq!(u64_at(&b, 0).map_err(|t| t.wanted), Err(8));
        assert!(u32_at(&b, usize::MAX).is_err());
        assert!(Le::at(&b, 10).u8().is_err());
        assert_eq!(Le::at(&b, 10).remaining(), 0);
        assert!(String::from(t).contains("truncated record"));
    }
}
