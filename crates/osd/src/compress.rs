//! Per-object compression's codecs (issue 16 item 6; docs/DESIGN.md "Per-object
//! compression", docs/FORMAT.md "Compressed chunks"): the `compression` attribute, the
//! onode's compression byte, sniffing content that is compressed already, and a chunk's
//! stored form (an 8-byte header, then an LZ4 block or a Zstandard frame, padded to whole
//! units). Bytes read back are untrusted: decoding returns [`ChunkError`], never panics.

/// The `compression` attribute as the host sets it (`Attr::Compression`: 0 none, 1 lz4,
/// 2 zstd, 3 auto).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Compression {
    /// Stored as written.
    #[default]
    None,
    /// LZ4 (the `lz4_flex` crate): fast, smaller ratio.
    Lz4,
    /// Zstandard level 1 (the `zstd` crate).
    Zstd,
    /// Zstandard unless the first bytes written at offset 0 are compressed already.
    Auto,
}

impl Compression {
    /// The attribute's number.
    pub fn code(self) -> u64 {
        match self {
            Compression::None => 0,
            Compression::Lz4 => 1,
            Compression::Zstd => 2,
            Compression::Auto => 3,
        }
    }

    /// From the attribute's number.
    pub fn from_code(c: u64) -> Option<Self> {
        Some(match c {
            0 => Compression::None,
            1 => Compression::Lz4,
            2 => Compression::Zstd,
            3 => Compression::Auto,
            _ => return None,
        })
    }

    /// The name the CLI takes and prints.
    pub fn name(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Lz4 => "lz4",
            Compression::Zstd => "zstd",
            Compression::Auto => "auto",
        }
    }

    /// From a name (`none`, `lz4`, `zstd`, `auto`).
    pub fn from_name(s: &str) -> Option<Self> {
        [
            Compression::None,
            Compression::Lz4,
            Compression::Zstd,
            Compression::Auto,
        ]
        .into_iter()
        .find(|c| c.name() == s)
    }
}

/// A codec a chunk is stored with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Codec {
    /// An LZ4 block.
    Lz4,
    /// A Zstandard frame, level 1.
    Zstd,
}

impl Codec {
    fn code(self) -> u8 {
        match self {
            Codec::Lz4 => 1,
            Codec::Zstd => 2,
        }
    }
    fn from_code(c: u8) -> Option<Self> {
        match c {
            1 => Some(Codec::Lz4),
            2 => Some(Codec::Zstd),
            _ => None,
        }
    }
}

/// Zstandard's level: level 1 compresses text about 3x at a few hundred MB/s per core
/// (docs/PERFORMANCE.md "Per-object compression").
const ZSTD_LEVEL: i32 = 1;

/// The onode's compression byte (byte 2 of the services, docs/FORMAT.md): bits 0-1 the
/// codec in effect (0 none, 1 lz4, 2 zstd), bits 2-4 log2 of the chunk's units, bit 6 the
/// host asked for `auto`, bit 7 `auto` has not chosen yet (the object is empty).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CompressionState(pub u8);

const CODEC_MASK: u8 = 0b11;
const CHUNK_SHIFT: u8 = 2;
const CHUNK_MASK: u8 = 0b111 << CHUNK_SHIFT;
const AUTO: u8 = 1 << 6;
const UNDECIDED: u8 = 1 << 7;
/// Chunks hold at most this many units (log2 5: 32).
pub const MAX_CHUNK_UNITS: u32 = 32;

impl CompressionState {
    /// The state of an object given `attr` with chunks of `chunk_units` (a power of two, at
    /// most [`MAX_CHUNK_UNITS`]).
    pub fn new(attr: Compression, chunk_units: u32) -> Self {
        let log = (chunk_units.max(1).trailing_zeros() as u8) << CHUNK_SHIFT;
        CompressionState(match attr {
            Compression::None => 0,
            Compression::Lz4 => 1 | log,
            Compression::Zstd => 2 | log,
            Compression::Auto => AUTO | UNDECIDED | log,
        })
    }

    /// Whether the byte is one this build writes (an onode's byte is checked when decoded).
    pub fn is_valid(self) -> bool {
        let b = self.0;
        let codec = b & CODEC_MASK;
        let undecided = b & UNDECIDED != 0;
        b & (1 << 5) == 0
            && codec != 3
            && (b & CHUNK_MASK) >> CHUNK_SHIFT <= MAX_CHUNK_UNITS.trailing_zeros() as u8
            && (!undecided || (b & AUTO != 0 && codec == 0))
    }

    /// The attribute as the host set it.
    pub fn attr(self) -> Compression {
        if self.0 & AUTO != 0 {
            return Compression::Auto;
        }
        match self.0 & CODEC_MASK {
            1 => Compression::Lz4,
            2 => Compression::Zstd,
            _ => Compression::None,
        }
    }

    /// The codec the object's chunks are written with; `None` for a plain object (its data is
    /// in ordinary units).
    pub fn codec(self) -> Option<Codec> {
        Codec::from_code(self.0 & CODEC_MASK)
    }

    /// Units per chunk (meaningful when [`Self::codec`] is some).
    pub fn chunk_units(self) -> u64 {
        1 << ((self.0 & CHUNK_MASK) >> CHUNK_SHIFT)
    }

    /// `auto` waits for the first write to choose.
    pub fn undecided(self) -> bool {
        self.0 & UNDECIDED != 0
    }

    /// `auto` chose: `codec` (or none for content compressed already).
    pub fn decide(self, codec: Option<Codec>) -> Self {
        let keep = self.0 & (AUTO | CHUNK_MASK);
        CompressionState(keep | codec.map_or(0, Codec::code))
    }
}

/// Whether `first` (the first bytes written at offset 0) starts like content that is
/// compressed already: gzip, zstd, xz, bzip2, 7z, zip, PNG, JPEG, and the other formats
/// whose magic numbers are listed here. Compressing it again would cost time and save
/// nothing; `auto` then stores the object as written.
pub fn looks_compressed(first: &[u8]) -> bool {
    const MAGICS: &[&[u8]] = &[
        &[0x1f, 0x8b],                         // gzip
        &[0x28, 0xb5, 0x2f, 0xfd],             // zstd
        &[0xfd, b'7', b'z', b'X', b'Z', 0x00], // xz
        b"BZh",                                // bzip2
        &[b'7', b'z', 0xbc, 0xaf, 0x27, 0x1c], // 7z
        &[b'P', b'K', 0x03, 0x04],             // zip (and jar, docx, ...)
        &[0x89, b'P', b'N', b'G'],             // PNG
        &[0xff, 0xd8, 0xff],                   // JPEG
        &[0x04, 0x22, 0x4d, 0x18],             // LZ4 frame
        b"GIF8",                               // GIF
        b"OggS",                               // Ogg
        b"fLaC",                               // FLAC
        b"ID3",                                // MP3 with ID3 tag
    ];
    MAGICS.iter().any(|m| first.starts_with(m))
}

/// A chunk's stored-form header, in bytes: codec, logical units, two reserved bytes (0),
/// compressed length (u32 LE).
pub const CHUNK_HEADER_BYTES: usize = 8;

/// Why a stored chunk did not decode.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ChunkError {
    /// The header names no codec this build knows, or lengths that do not fit.
    #[error("chunk header {0}")]
    Header(String),
    /// The codec refused the stream, or it decoded to the wrong length.
    #[error("compressed stream does not decode: {0}")]
    Stream(String),
}

/// Compresses `logical` (whole units of `unit` bytes) with `codec` into its stored form,
/// padded to whole units, if that saves at least one unit; `None` otherwise (the chunk is
/// stored raw: random and already-compressed data cost nothing but the attempt).
pub fn compress_chunk(codec: Codec, logical: &[u8], unit: usize) -> Option<Vec<u8>> {
    let n = logical.len() / unit;
    debug_assert!(logical.len() == n * unit && n > 0 && n < 256);
    let mut out = vec![0u8; CHUNK_HEADER_BYTES];
    match codec {
        Codec::Lz4 => {
            let body = lz4_flex::block::compress(logical);
            out.extend_from_slice(&body);
        }
        Codec::Zstd => {
            // zstd::bulk on a Vec cannot fail except by a bug in libzstd; treat that as
            // "does not compress" (stored raw, still correct).
            let body = zstd::bulk::compress(logical, ZSTD_LEVEL).ok()?;
            out.extend_from_slice(&body);
        }
    }
    let clen = out.len() - CHUNK_HEADER_BYTES;
    let units = out.len().div_ceil(unit);
    if units >= n {
        return None;
    }
    out[0] = codec.code();
    out[1] = n as u8;
    out[4..8].copy_from_slice(&(clen as u32).to_le_bytes());
    out.resize(units * unit, 0);
    Some(out)
}

/// Decodes a chunk's stored form (`stored`: its units, concatenated) into its logical bytes.
pub fn decompress_chunk(stored: &[u8], unit: usize) -> Result<Vec<u8>, ChunkError> {
    if stored.len() < CHUNK_HEADER_BYTES {
        return Err(ChunkError::Header(format!(
            "in a stored form of {} bytes",
            stored.len()
        )));
    }
    let codec = Codec::from_code(stored[0])
        .ok_or_else(|| ChunkError::Header(format!("names codec {}", stored[0])))?;
    let n = stored[1] as usize;
    let clen = u32::from_le_bytes([stored[4], stored[5], stored[6], stored[7]]) as usize;
    if n == 0 || stored[2] != 0 || stored[3] != 0 || CHUNK_HEADER_BYTES + clen > stored.len() {
        return Err(ChunkError::Header(format!(
            "says {n} units and {clen} compressed bytes in {} stored bytes",
            stored.len()
        )));
    }
    let body = &stored[CHUNK_HEADER_BYTES..CHUNK_HEADER_BYTES + clen];
    let want = n * unit;
    let out = match codec {
        Codec::Lz4 => lz4_flex::block::decompress(body, want)
            .map_err(|e| ChunkError::Stream(format!("lz4: {e}")))?,
        Codec::Zstd => zstd::bulk::decompress(body, want)
            .map_err(|e| ChunkError::Stream(format!("zstd: {e}")))?,
    };
    if out.len() != want {
        return Err(ChunkError::Stream(format!(
            "{} bytes decoded, {want} expected",
            out.len()
        )));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(n: usize) -> Vec<u8> {
        let words = ["object", "flash ", "store ", "chunk ", "unit  ", "index "];
        (0..n)
            .map(|i| words[(i / 6 * 7) % 6].as_bytes()[i % 6])
            .collect()
    }

    #[test]
    fn text_compresses_and_round_trips_with_both_codecs() {
        for codec in [Codec::Lz4, Codec::Zstd] {
            let t = text(16 * 4096);
            let s = compress_chunk(codec, &t, 4096).expect("text compresses");
            assert!(s.len() <= 4 * 4096, "{codec:?}: {} bytes", s.len());
            assert_eq!(decompress_chunk(&s, 4096).unwrap(), t);
        }
    }

    #[test]
    fn random_bytes_are_stored_raw() {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let r: Vec<u8> = (0..16 * 4096)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        assert_eq!(compress_chunk(Codec::Zstd, &r, 4096), None);
        assert_eq!(compress_chunk(Codec::Lz4, &r, 4096), None);
    }

    #[test]
    fn damaged_stored_forms_are_errors_never_panics() {
        let t = text(8 * 4096);
        for codec in [Codec::Lz4, Codec::Zstd] {
            let s = compress_chunk(codec, &t, 4096).unwrap();
            for i in 0..s.len().min(600) {
                for bit in [0, 3, 7] {
                    let mut d = s.clone();
                    d[i] ^= 1 << bit;
                    // Either an error or (a flip the stream does not notice, such as one in
                    // padding) bytes of the right length: never a panic.
                    if let Ok(out) = decompress_chunk(&d, 4096) {
                        assert_eq!(out.len(), 8 * 4096);
                    }
                }
            }
            assert!(decompress_chunk(&s[..4], 4096).is_err());
            let mut d = s.clone();
            d[0] = 9;
            assert!(matches!(
                decompress_chunk(&d, 4096),
                Err(ChunkError::Header(_))
            ));
        }
    }

    #[test]
    fn sniffing_knows_compressed_formats_and_not_text() {
        assert!(looks_compressed(&[0x1f, 0x8b, 8, 0]));
        assert!(looks_compressed(&[0x28, 0xb5, 0x2f, 0xfd, 0]));
        assert!(looks_compressed(b"PK\x03\x04rest"));
        assert!(looks_compressed(&[0x89, b'P', b'N', b'G', 13, 10]));
        assert!(looks_compressed(&[0xff, 0xd8, 0xff, 0xe0]));
        assert!(!looks_compressed(b"hello world"));
        assert!(!looks_compressed(b""));
    }

    #[test]
    fn the_onode_byte_round_trips_and_refuses_nonsense() {
        for a in [
            Compression::None,
            Compression::Lz4,
            Compression::Zstd,
            Compression::Auto,
        ] {
            let s = CompressionState::new(a, 16);
            assert!(s.is_valid());
            assert_eq!(s.attr(), a);
            assert_eq!(Compression::from_code(a.code()), Some(a));
            assert_eq!(Compression::from_name(a.name()), Some(a));
        }
        let auto = CompressionState::new(Compression::Auto, 16);
        assert!(auto.undecided() && auto.codec().is_none());
        let z = auto.decide(Some(Codec::Zstd));
        assert_eq!(
            (z.attr(), z.codec(), z.chunk_units()),
            (Compression::Auto, Some(Codec::Zstd), 16)
        );
        assert!(!z.undecided() && z.is_valid());
        assert!(!CompressionState(3).is_valid());
        assert!(!CompressionState(UNDECIDED | 1).is_valid());
        assert!(!CompressionState(6 << CHUNK_SHIFT).is_valid());
    }
}
