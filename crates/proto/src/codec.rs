//! The frame header, the decoding error, and a bounds-checked reader and writer.

/// The first four bytes of every frame: "OSDW".
pub const MAGIC: [u8; 4] = *b"OSDW";
/// Bytes in a frame header.
pub const HEADER_LEN: usize = 20;
/// The largest body a peer accepts unless configured otherwise (16 MiB).
pub const DEFAULT_MAX_FRAME_BYTES: u32 = 16 << 20;

/// Header flag: the frame is a reply.
pub const FLAG_REPLY: u8 = 0x01;
/// Header flag: the body starts with a capability (requests) and ends with a 32-byte integrity
/// value (requests and replies).
pub const FLAG_SECURED: u8 = 0x02;
const KNOWN_FLAGS: u8 = FLAG_REPLY | FLAG_SECURED;

/// Why bytes from the wire could not be decoded. Each variant names the field and the byte
/// offset (within the body, or the header for header fields) where decoding stopped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtoError {
    /// Fewer bytes than the field needs.
    #[error("truncated {what} at byte {offset}: {needed} bytes needed, {have} left")]
    Truncated {
        /// The field.
        what: &'static str,
        /// Where it starts.
        offset: usize,
        /// Bytes it needs.
        needed: usize,
        /// Bytes left.
        have: usize,
    },
    /// The frame does not start with [`MAGIC`].
    #[error("bad magic {found:02x?} (expected \"OSDW\")")]
    BadMagic {
        /// The first four bytes.
        found: [u8; 4],
    },
    /// A protocol version this build does not speak.
    #[error("protocol version {version} is not supported")]
    UnsupportedVersion {
        /// The version.
        version: u8,
    },
    /// An opcode that is not one of `Opcode`.
    #[error("unknown opcode {opcode:#06x}")]
    UnknownOpcode {
        /// The opcode.
        opcode: u16,
    },
    /// A frame or a length over the limit.
    #[error("{what} of {len} bytes is too long (at most {max})")]
    TooLong {
        /// What is too long.
        what: &'static str,
        /// Its length in bytes.
        len: u64,
        /// The limit in bytes.
        max: u64,
    },
    /// A field whose value is not allowed.
    #[error("bad {what} value {value:#x} at byte {offset}")]
    BadValue {
        /// The field.
        what: &'static str,
        /// Its value.
        value: u64,
        /// Where it starts.
        offset: usize,
    },
    /// A string field that is not UTF-8.
    #[error("{what} is not UTF-8 at byte {offset}")]
    BadUtf8 {
        /// The field.
        what: &'static str,
        /// Where it starts.
        offset: usize,
    },
    /// Bytes left over after the last field.
    #[error("{extra} unexpected bytes after {what}")]
    TrailingBytes {
        /// What was decoded.
        what: &'static str,
        /// Bytes left over.
        extra: usize,
    },
    /// A structure that decodes but does not hold together.
    #[error("{what}: {why}")]
    Malformed {
        /// What.
        what: &'static str,
        /// Why.
        why: &'static str,
    },
}

/// A frame header (20 bytes, big-endian): magic, version, flags, opcode, request id, body length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// Protocol version (of the frame, or any in HELLO).
    pub version: u8,
    /// [`FLAG_REPLY`] and [`FLAG_SECURED`] bits.
    pub flags: u8,
    /// The command's opcode (a reply carries its request's).
    pub opcode: u16,
    /// Chosen by the client; a reply carries its request's.
    pub request_id: u64,
    /// Bytes of body after the header.
    pub body_len: u32,
}

impl Header {
    /// Whether the frame is a reply.
    pub fn is_reply(&self) -> bool {
        self.flags & FLAG_REPLY != 0
    }

    /// Whether the body carries a capability (requests) and an integrity value.
    pub fn is_secured(&self) -> bool {
        self.flags & FLAG_SECURED != 0
    }

    /// The 20 header bytes.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0..4].copy_from_slice(&MAGIC);
        b[4] = self.version;
        b[5] = self.flags;
        b[6..8].copy_from_slice(&self.opcode.to_be_bytes());
        b[8..16].copy_from_slice(&self.request_id.to_be_bytes());
        b[16..20].copy_from_slice(&self.body_len.to_be_bytes());
        b
    }

    /// Decodes a header and checks the body length against `max_body_bytes`. The version is not
    /// checked here (HELLO may carry any); the opcode is checked by the body decoders.
    pub fn decode(b: &[u8], max_body_bytes: u32) -> Result<Header, ProtoError> {
        if b.len() < HEADER_LEN {
            return Err(ProtoError::Truncated {
                what: "frame header",
                offset: 0,
                needed: HEADER_LEN,
                have: b.len(),
            });
        }
        let found = [b[0], b[1], b[2], b[3]];
        if found != MAGIC {
            return Err(ProtoError::BadMagic { found });
        }
        let flags = b[5];
        if flags & !KNOWN_FLAGS != 0 {
            return Err(ProtoError::BadValue {
                what: "header flags",
                value: flags as u64,
                offset: 5,
            });
        }
        let mut r = Reader::new(b);
        r.bytes(6, "header")?;
        let h = Header {
            version: b[4],
            flags,
            opcode: r.u16("opcode")?,
            request_id: r.u64("request id")?,
            body_len: r.u32("body length")?,
        };
        if h.body_len > max_body_bytes {
            return Err(ProtoError::TooLong {
                what: "frame body",
                len: h.body_len as u64,
                max: max_body_bytes as u64,
            });
        }
        Ok(h)
    }
}

/// A bounds-checked big-endian reader over a body.
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    pub fn offset(&self) -> usize {
        self.pos
    }

    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    pub fn bytes(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], ProtoError> {
        if self.remaining() < n {
            return Err(ProtoError::Truncated {
                what,
                offset: self.pos,
                needed: n,
                have: self.remaining(),
            });
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    pub fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], ProtoError> {
        let s = self.bytes(N, what)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    pub fn u8(&mut self, what: &'static str) -> Result<u8, ProtoError> {
        Ok(self.array::<1>(what)?[0])
    }

    pub fn u16(&mut self, what: &'static str) -> Result<u16, ProtoError> {
        Ok(u16::from_be_bytes(self.array(what)?))
    }

    pub fn u32(&mut self, what: &'static str) -> Result<u32, ProtoError> {
        Ok(u32::from_be_bytes(self.array(what)?))
    }

    pub fn u64(&mut self, what: &'static str) -> Result<u64, ProtoError> {
        Ok(u64::from_be_bytes(self.array(what)?))
    }

    /// A flag byte that must be 0 or 1.
    pub fn bool(&mut self, what: &'static str) -> Result<bool, ProtoError> {
        let at = self.pos;
        match self.u8(what)? {
            0 => Ok(false),
            1 => Ok(true),
            v => Err(ProtoError::BadValue {
                what,
                value: v as u64,
                offset: at,
            }),
        }
    }

    /// A u32 length followed by that many bytes.
    pub fn blob(&mut self, what: &'static str) -> Result<&'a [u8], ProtoError> {
        let n = self.u32(what)? as usize;
        self.bytes(n, what)
    }

    /// A u16 length followed by that many bytes of UTF-8.
    pub fn string(&mut self, what: &'static str) -> Result<String, ProtoError> {
        let n = self.u16(what)? as usize;
        let at = self.pos;
        let b = self.bytes(n, what)?;
        String::from_utf8(b.to_vec()).map_err(|_| ProtoError::BadUtf8 { what, offset: at })
    }

    pub fn finish(&self, what: &'static str) -> Result<(), ProtoError> {
        match self.remaining() {
            0 => Ok(()),
            extra => Err(ProtoError::TrailingBytes { what, extra }),
        }
    }
}

/// A big-endian writer.
#[derive(Default)]
pub(crate) struct Writer {
    pub buf: Vec<u8>,
}

impl Writer {
    pub fn u8(&mut self, v: u8) {
        self.buf.push(v);
    }
    pub fn u16(&mut self, v: u16) {
        self.buf.extend_from_slice(&v.to_be_bytes());
    }
    pub fn u32(&mut self, v: u32) {
        self.buf.extend_from_slice(&v.to_be_bytes());
    }
    pub fn u64(&mut self, v: u64) {
        self.buf.extend_from_slice(&v.to_be_bytes());
    }
    pub fn bool(&mut self, v: bool) {
        self.buf.push(v as u8);
    }
    /// A u32 length and the bytes. Callers keep blobs under the frame limit (a u32).
    pub fn blob(&mut self, b: &[u8]) {
        self.u32(b.len() as u32);
        self.buf.extend_from_slice(b);
    }
    /// A u16 length and UTF-8; longer text is cut at a character boundary to fit.
    pub fn string(&mut self, s: &str) {
        let mut end = s.len().min(u16::MAX as usize);
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        self.u16(end as u16);
        self.buf.extend_from_slice(&s.as_bytes()[..end]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trip_and_errors() {
        let h = Header {
            version: 1,
            flags: FLAG_REPLY | FLAG_SECURED,
            opcode: 0x0123,
            request_id: 0xdead_beef_0102_0304,
            body_len: 77,
        };
        let b = h.encode();
        assert_eq!(&b[0..4], b"OSDW");
        assert_eq!(Header::decode(&b, 100), Ok(h));
        assert_eq!(
            Header::decode(&b, 76),
            Err(ProtoError::TooLong {
                what: "frame body",
                len: 77,
                max: 76
            })
        );
        assert!(matches!(
            Header::decode(&b[..19], 100),
            Err(ProtoError::Truncated {
                needed: 20,
                have: 19,
                ..
            })
        ));
        let mut bad = b;
        bad[0] = b'X';
        assert!(matches!(
            Header::decode(&bad, 100),
            Err(ProtoError::BadMagic { .. })
        ));
        let mut bad = b;
        bad[5] = 0x80;
        assert!(matches!(
            Header::decode(&bad, 100),
            Err(ProtoError::BadValue {
                what: "header flags",
                ..
            })
        ));
    }

    #[test]
    fn strings_are_cut_at_char_boundaries() {
        let s = "é".repeat(40_000); // 80,000 bytes
        let mut w = Writer::default();
        w.string(&s);
        let mut r = Reader::new(&w.buf);
        let back = r.string("s").unwrap();
        assert!(back.len() <= u16::MAX as usize && back.len().is_multiple_of(2));
        r.finish("s").unwrap();
    }
}
