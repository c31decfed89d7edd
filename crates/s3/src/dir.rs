//! The key directory of one bucket: an append-only log of records kept in one object of the
//! bucket's partition (byte layout: docs/FORMAT.md section 5), and the in-memory state that
//! replaying it gives.
//!
//! The same [`Directory::apply`] runs when a request changes the directory and when the log is
//! replayed at start-up, so the state after a restart is, by construction, the state the
//! acknowledged records described.

use std::collections::BTreeMap;

use osd::ObjectId;

use crate::Error;

/// Directory format version written in the header record.
pub const FORMAT_VERSION: u8 = 1;

/// Longest record body accepted on decode (a record holds one key and its metadata, each bounded
/// well below this), so a damaged length cannot make the reader allocate gigabytes.
pub const MAX_RECORD_BYTES: u32 = 64 * 1024;

/// Bytes of a record's frame before its body: length (u32) and CRC-32C (u32).
pub const RECORD_HEADER_BYTES: usize = 8;

/// An object's ETag: the MD5 of its bytes, or for a multipart object the MD5 of its parts' MD5s
/// with the part count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Etag {
    /// The digest.
    pub md5: [u8; 16],
    /// 0 for an object from one PUT or copy; the part count for a multipart object.
    pub parts: u32,
}

impl Etag {
    /// The ETag as S3 shows it, without quotes: 32 hex digits, then `-N` for N parts.
    pub fn to_s3(&self) -> String {
        let mut s = hex(&self.md5);
        if self.parts > 0 {
            s.push_str(&format!("-{}", self.parts));
        }
        s
    }
}

/// Lower-case hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// What S3 keeps about an object besides its bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectMeta {
    /// Length in bytes.
    pub size: u64,
    /// ETag.
    pub etag: Etag,
    /// Last modification, Unix milliseconds.
    pub modified_ms: u64,
    /// `Content-Type` given at upload (empty: none).
    pub content_type: String,
    /// User metadata (`x-amz-meta-NAME: VALUE`), names lower-case, sorted.
    pub user: Vec<(String, String)>,
}

/// A key's directory entry: the object holding its bytes and its metadata.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The object in the bucket's partition.
    pub object: ObjectId,
    /// Its metadata.
    pub meta: ObjectMeta,
}

/// One uploaded part of a multipart upload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Part {
    /// The object holding the part's bytes.
    pub object: ObjectId,
    /// Length in bytes.
    pub size: u64,
    /// MD5 of the part (its ETag).
    pub md5: [u8; 16],
    /// When it was uploaded, Unix milliseconds.
    pub modified_ms: u64,
}

/// A multipart upload in progress.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Upload {
    /// The key it will create.
    pub key: String,
    /// When it was created, Unix milliseconds.
    pub created_ms: u64,
    /// Content type of the object it will create.
    pub content_type: String,
    /// User metadata of the object it will create.
    pub user: Vec<(String, String)>,
    /// Parts uploaded so far, by part number.
    pub parts: BTreeMap<u32, Part>,
}

/// One record of the directory log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Record {
    /// First record of every log: the bucket's name and creation time, and the next upload id
    /// (so ids are not reused after the log is compacted).
    Header {
        /// Bucket name.
        name: String,
        /// Creation, Unix milliseconds.
        created_ms: u64,
        /// Upload ids at least this are free.
        next_upload: u64,
    },
    /// `key` now names `entry`; when `ends_upload` is set, that upload is completed by it (one
    /// record, so completion is atomic).
    Put {
        /// The key.
        key: String,
        /// Its new entry.
        entry: Entry,
        /// The multipart upload this completes, if any.
        ends_upload: Option<u64>,
    },
    /// `key` is removed.
    Delete {
        /// The key.
        key: String,
    },
    /// A multipart upload is created.
    UploadCreate {
        /// Upload id.
        id: u64,
        /// The upload (with no parts).
        upload: Upload,
    },
    /// A part is uploaded (replacing an earlier part of the same number).
    UploadPart {
        /// Upload id.
        id: u64,
        /// Part number (1..=10,000).
        number: u32,
        /// The part.
        part: Part,
    },
    /// A multipart upload is aborted.
    UploadAbort {
        /// Upload id.
        id: u64,
    },
}

const KIND_HEADER: u8 = 1;
const KIND_PUT: u8 = 2;
const KIND_DELETE: u8 = 3;
const KIND_UPLOAD_CREATE: u8 = 4;
const KIND_UPLOAD_PART: u8 = 5;
const KIND_UPLOAD_ABORT: u8 = 6;

fn put_str(out: &mut Vec<u8>, s: &str) {
    // Callers bound every string far below 64 KiB (keys 1,024 bytes, metadata 2 KiB in all).
    let len = u16::try_from(s.len()).unwrap_or(u16::MAX);
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&s.as_bytes()[..len as usize]);
}

fn put_user(out: &mut Vec<u8>, user: &[(String, String)]) {
    let n = u16::try_from(user.len()).unwrap_or(u16::MAX);
    out.extend_from_slice(&n.to_le_bytes());
    for (k, v) in user.iter().take(n as usize) {
        put_str(out, k);
        put_str(out, v);
    }
}

fn put_meta(out: &mut Vec<u8>, m: &ObjectMeta) {
    out.extend_from_slice(&m.size.to_le_bytes());
    out.extend_from_slice(&m.etag.md5);
    out.extend_from_slice(&m.etag.parts.to_le_bytes());
    out.extend_from_slice(&m.modified_ms.to_le_bytes());
    put_str(out, &m.content_type);
    put_user(out, &m.user);
}

fn put_part(out: &mut Vec<u8>, p: &Part) {
    out.extend_from_slice(&p.object.0.to_le_bytes());
    out.extend_from_slice(&p.size.to_le_bytes());
    out.extend_from_slice(&p.md5);
    out.extend_from_slice(&p.modified_ms.to_le_bytes());
}

impl Record {
    /// The record's body: kind byte and fields.
    fn body(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(64);
        match self {
            Record::Header {
                name,
                created_ms,
                next_upload,
            } => {
                b.push(KIND_HEADER);
                b.push(FORMAT_VERSION);
                put_str(&mut b, name);
                b.extend_from_slice(&created_ms.to_le_bytes());
                b.extend_from_slice(&next_upload.to_le_bytes());
            }
            Record::Put {
                key,
                entry,
                ends_upload,
            } => {
                b.push(KIND_PUT);
                put_str(&mut b, key);
                b.extend_from_slice(&entry.object.0.to_le_bytes());
                put_meta(&mut b, &entry.meta);
                // 0 = no upload: upload ids start at 1.
                b.extend_from_slice(&ends_upload.unwrap_or(0).to_le_bytes());
            }
            Record::Delete { key } => {
                b.push(KIND_DELETE);
                put_str(&mut b, key);
            }
            Record::UploadCreate { id, upload } => {
                b.push(KIND_UPLOAD_CREATE);
                b.extend_from_slice(&id.to_le_bytes());
                put_str(&mut b, &upload.key);
                b.extend_from_slice(&upload.created_ms.to_le_bytes());
                put_str(&mut b, &upload.content_type);
                put_user(&mut b, &upload.user);
            }
            Record::UploadPart { id, number, part } => {
                b.push(KIND_UPLOAD_PART);
                b.extend_from_slice(&id.to_le_bytes());
                b.extend_from_slice(&number.to_le_bytes());
                put_part(&mut b, part);
            }
            Record::UploadAbort { id } => {
                b.push(KIND_UPLOAD_ABORT);
                b.extend_from_slice(&id.to_le_bytes());
            }
        }
        b
    }

    /// The record framed for the log: body length (u32 LE), CRC-32C of the body (u32 LE), body.
    pub fn encode(&self) -> Vec<u8> {
        let body = self.body();
        let mut out = Vec::with_capacity(RECORD_HEADER_BYTES + body.len());
        out.extend_from_slice(&(body.len() as u32).to_le_bytes());
        out.extend_from_slice(&crc32c::crc32c(&body).to_le_bytes());
        out.extend_from_slice(&body);
        out
    }

    /// Decodes the record at the start of `buf`; returns it and the bytes it took, or `None`
    /// when `buf` does not start with a whole, intact record (the end of the log, or a torn or
    /// damaged tail).
    pub fn decode(buf: &[u8]) -> Option<(Record, usize)> {
        let len = codec::le::u32_at(buf, 0).ok()?;
        let crc = codec::le::u32_at(buf, 4).ok()?;
        if len == 0 || len > MAX_RECORD_BYTES {
            return None;
        }
        let end = RECORD_HEADER_BYTES + len as usize;
        let body = buf.get(RECORD_HEADER_BYTES..end)?;
        if crc32c::crc32c(body) != crc {
            return None;
        }
        let rec = decode_body(body).ok()?;
        Some((rec, end))
    }
}

/// Why a record body does not decode (it is then treated as the end of the log).
type Short = String;

fn get_str(r: &mut codec::le::Le<'_>) -> Result<String, Short> {
    let n = r.u16()? as usize;
    // A body that passed its checksum but holds invalid UTF-8 was written by no version of
    // this code: treat it like a truncated one.
    String::from_utf8(r.bytes(n)?.to_vec()).map_err(|_| bad("string not UTF-8", r.pos()))
}

fn get_user(r: &mut codec::le::Le<'_>) -> Result<Vec<(String, String)>, Short> {
    let n = r.u16()?;
    (0..n).map(|_| Ok((get_str(r)?, get_str(r)?))).collect()
}

fn get_meta(r: &mut codec::le::Le<'_>) -> Result<ObjectMeta, Short> {
    Ok(ObjectMeta {
        size: r.u64()?,
        etag: Etag {
            md5: r.array()?,
            parts: r.u32()?,
        },
        modified_ms: r.u64()?,
        content_type: get_str(r)?,
        user: get_user(r)?,
    })
}

fn get_part(r: &mut codec::le::Le<'_>) -> Result<Part, Short> {
    Ok(Part {
        object: ObjectId(r.u64()?),
        size: r.u64()?,
        md5: r.array()?,
        modified_ms: r.u64()?,
    })
}

fn bad(what: &str, at: usize) -> Short {
    format!("{what} at offset {at}")
}

fn decode_body(body: &[u8]) -> Result<Record, Short> {
    let mut r = codec::le::Le::new(body);
    let rec = match r.u8()? {
        KIND_HEADER => {
            if r.u8()? != FORMAT_VERSION {
                return Err(bad("directory format version", 1));
            }
            Record::Header {
                name: get_str(&mut r)?,
                created_ms: r.u64()?,
                next_upload: r.u64()?,
            }
        }
        KIND_PUT => {
            let key = get_str(&mut r)?;
            let object = ObjectId(r.u64()?);
            let meta = get_meta(&mut r)?;
            let ends = r.u64()?;
            Record::Put {
                key,
                entry: Entry { object, meta },
                ends_upload: (ends != 0).then_some(ends),
            }
        }
        KIND_DELETE => Record::Delete {
            key: get_str(&mut r)?,
        },
        KIND_UPLOAD_CREATE => {
            let id = r.u64()?;
            let key = get_str(&mut r)?;
            let created_ms = r.u64()?;
            let content_type = get_str(&mut r)?;
            let user = get_user(&mut r)?;
            Record::UploadCreate {
                id,
                upload: Upload {
                    key,
                    created_ms,
                    content_type,
                    user,
                    parts: BTreeMap::new(),
                },
            }
        }
        KIND_UPLOAD_PART => Record::UploadPart {
            id: r.u64()?,
            number: r.u32()?,
            part: get_part(&mut r)?,
        },
        KIND_UPLOAD_ABORT => Record::UploadAbort { id: r.u64()? },
        _ => return Err(bad("record kind", 0)),
    };
    if r.remaining() != 0 {
        return Err(bad("trailing bytes in record", r.pos()));
    }
    Ok(rec)
}

/// The state of one bucket's directory.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Directory {
    /// Bucket name.
    pub name: String,
    /// Creation, Unix milliseconds.
    pub created_ms: u64,
    /// Keys in byte order (S3 lists keys in UTF-8 binary order, which `String`'s order is).
    pub keys: BTreeMap<String, Entry>,
    /// Multipart uploads in progress.
    pub uploads: BTreeMap<u64, Upload>,
    /// Next upload id to hand out (ids start at 1).
    pub next_upload: u64,
    /// Records in the log (for deciding when to compact).
    pub records: u64,
}

impl Directory {
    /// Applies one record; returns the objects it left unreferenced (to be removed once the
    /// record is durable). A record that does not fit the state (an unknown upload, a second
    /// header) is an error naming it: the log is then not one this code wrote.
    pub fn apply(&mut self, rec: Record) -> Result<Vec<ObjectId>, Error> {
        self.records += 1;
        let mut freed = Vec::new();
        match rec {
            Record::Header {
                name,
                created_ms,
                next_upload,
            } => {
                if self.records != 1 {
                    return Err(corrupt("a header record past the start of the log"));
                }
                self.name = name;
                self.created_ms = created_ms;
                self.next_upload = next_upload.max(1);
            }
            Record::Put {
                key,
                entry,
                ends_upload,
            } => {
                if let Some(id) = ends_upload {
                    let up = self
                        .uploads
                        .remove(&id)
                        .ok_or_else(|| corrupt("a completion of an unknown upload"))?;
                    freed.extend(up.parts.values().map(|p| p.object));
                }
                if let Some(old) = self.keys.insert(key, entry) {
                    freed.push(old.object);
                }
            }
            Record::Delete { key } => {
                if let Some(old) = self.keys.remove(&key) {
                    freed.push(old.object);
                }
            }
            Record::UploadCreate { id, upload } => {
                self.next_upload = self.next_upload.max(id.saturating_add(1));
                self.uploads.insert(id, upload);
            }
            Record::UploadPart { id, number, part } => {
                let up = self
                    .uploads
                    .get_mut(&id)
                    .ok_or_else(|| corrupt("a part of an unknown upload"))?;
                if let Some(old) = up.parts.insert(number, part) {
                    freed.push(old.object);
                }
            }
            Record::UploadAbort { id } => {
                if let Some(up) = self.uploads.remove(&id) {
                    freed.extend(up.parts.values().map(|p| p.object));
                }
            }
        }
        Ok(freed)
    }

    /// Every object the directory references.
    pub fn referenced(&self) -> impl Iterator<Item = ObjectId> + '_ {
        self.keys.values().map(|e| e.object).chain(
            self.uploads
                .values()
                .flat_map(|u| u.parts.values().map(|p| p.object)),
        )
    }

    /// The records that rebuild this state from nothing (for compaction).
    pub fn snapshot(&self) -> Vec<Record> {
        let mut out = vec![Record::Header {
            name: self.name.clone(),
            created_ms: self.created_ms,
            next_upload: self.next_upload,
        }];
        out.extend(self.keys.iter().map(|(k, e)| Record::Put {
            key: k.clone(),
            entry: e.clone(),
            ends_upload: None,
        }));
        for (id, up) in &self.uploads {
            out.push(Record::UploadCreate {
                id: *id,
                upload: Upload {
                    parts: BTreeMap::new(),
                    ..up.clone()
                },
            });
            out.extend(up.parts.iter().map(|(n, p)| Record::UploadPart {
                id: *id,
                number: *n,
                part: p.clone(),
            }));
        }
        out
    }

    /// Records that could be dropped by compaction.
    pub fn dead_records(&self) -> u64 {
        let live = 1
            + self.keys.len() as u64
            + self
                .uploads
                .values()
                .map(|u| 1 + u.parts.len() as u64)
                .sum::<u64>();
        self.records.saturating_sub(live)
    }
}

/// One page of a listing.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ListPage {
    /// Keys and their entries, in key order.
    pub entries: Vec<(String, Entry)>,
    /// Common prefixes (keys rolled up at the delimiter), in order.
    pub prefixes: Vec<String>,
    /// More keys or prefixes follow.
    pub truncated: bool,
    /// The last key or prefix returned: where the next page starts after.
    pub last: Option<String>,
}

impl Directory {
    /// Lists keys starting with `prefix` and after `after` (exclusive), rolling keys that hold
    /// `delimiter` past the prefix up into common prefixes; at most `max` keys and prefixes
    /// together. Resuming after a common prefix skips every key under it.
    pub fn list(
        &self,
        prefix: &str,
        delimiter: Option<&str>,
        after: Option<&str>,
        max: usize,
    ) -> ListPage {
        use std::ops::Bound;
        let delimiter = delimiter.filter(|d| !d.is_empty());
        let start = match after {
            Some(a) if a >= prefix => Bound::Excluded(a),
            _ => Bound::Included(prefix),
        };
        let mut page = ListPage::default();
        let mut count = 0;
        for (k, e) in self.keys.range::<str, _>((start, Bound::Unbounded)) {
            if !k.starts_with(prefix) {
                break; // keys with the prefix are contiguous, and we started at or past it
            }
            let rolled = delimiter.and_then(|d| {
                k[prefix.len()..]
                    .find(d)
                    .map(|i| &k[..prefix.len() + i + d.len()])
            });
            if let Some(cp) = rolled {
                if page.last.as_deref() == Some(cp) || after == Some(cp) {
                    continue;
                }
            }
            if count == max {
                page.truncated = true;
                break;
            }
            count += 1;
            match rolled {
                Some(cp) => {
                    page.prefixes.push(cp.to_string());
                    page.last = Some(cp.to_string());
                }
                None => {
                    page.entries.push((k.clone(), e.clone()));
                    page.last = Some(k.clone());
                }
            }
        }
        page
    }
}

fn corrupt(what: &str) -> Error {
    Error::Corrupted {
        what: format!("key directory: {what}"),
        location: String::new(),
    }
}

/// Replays a whole log; returns the state and the length of the intact prefix (bytes past it
/// are a torn tail, to be cut off).
pub fn replay(log: &[u8]) -> Result<(Directory, usize), Error> {
    let mut dir = Directory::default();
    let mut at = 0;
    while let Some((rec, n)) = log.get(at..).and_then(Record::decode) {
        if at == 0 && !matches!(rec, Record::Header { .. }) {
            return Err(corrupt("the log does not start with a header record"));
        }
        dir.apply(rec)?;
        at += n;
    }
    if at == 0 {
        return Err(corrupt("no intact header record"));
    }
    Ok((dir, at))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(size: u64) -> ObjectMeta {
        ObjectMeta {
            size,
            etag: Etag {
                md5: [7; 16],
                parts: 0,
            },
            modified_ms: 5,
            content_type: "text/plain".into(),
            user: vec![("a".into(), "b".into())],
        }
    }

    #[test]
    fn every_record_round_trips() {
        let recs = vec![
            Record::Header {
                name: "b".into(),
                created_ms: 1,
                next_upload: 3,
            },
            Record::Put {
                key: "k/é".into(),
                entry: Entry {
                    object: ObjectId(0x10001),
                    meta: meta(9),
                },
                ends_upload: Some(2),
            },
            Record::Delete { key: "x".into() },
            Record::UploadCreate {
                id: 4,
                upload: Upload {
                    key: "m".into(),
                    created_ms: 2,
                    content_type: String::new(),
                    user: vec![],
                    parts: BTreeMap::new(),
                },
            },
            Record::UploadPart {
                id: 4,
                number: 10_000,
                part: Part {
                    object: ObjectId(0x10002),
                    size: 5,
                    md5: [1; 16],
                    modified_ms: 3,
                },
            },
            Record::UploadAbort { id: 4 },
        ];
        for r in recs {
            let bytes = r.encode();
            let (back, n) = Record::decode(&bytes).unwrap();
            assert_eq!(back, r);
            assert_eq!(n, bytes.len());
            // Every strict prefix is a torn record, never a different one.
            for cut in 0..bytes.len() {
                assert!(Record::decode(&bytes[..cut]).is_none(), "cut at {cut}");
            }
        }
    }

    #[test]
    fn zeros_and_flipped_bits_are_not_records() {
        assert!(Record::decode(&[0u8; 64]).is_none());
        let mut bytes = Record::Delete { key: "abc".into() }.encode();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        assert!(Record::decode(&bytes).is_none());
    }

    #[test]
    fn replay_stops_at_a_torn_tail() {
        let mut log = Record::Header {
            name: "b".into(),
            created_ms: 1,
            next_upload: 1,
        }
        .encode();
        let good = log.len();
        log.extend_from_slice(&Record::Delete { key: "k".into() }.encode()[..5]);
        let (dir, n) = replay(&log).unwrap();
        assert_eq!(n, good);
        assert_eq!(dir.name, "b");
    }

    #[test]
    fn etag_forms() {
        let e = Etag {
            md5: [0xab; 16],
            parts: 3,
        };
        assert_eq!(e.to_s3(), format!("{}-3", "ab".repeat(16)));
    }
}
