//! The object commands' work on an open store image, returning data instead of printing it:
//! `ossd put / get / ls / stat / setattr / fsck` (crates/ossd/src/objects.rs) print what these
//! return, and the Python package's `ossd.ObjectStore` (crates/py) hands it to Python.

use std::path::Path;

use anyhow::{anyhow, bail, Result};
use flash::image::ImageStore;
use flash::Nand;
use osd::{Attr, AttrValue, FlushScope, ObjectId, ObjectStore, Oid, Osd, PartitionId};

/// An object store on a device image file.
pub type Store = ObjectStore<Nand<ImageStore>>;

/// The partition the commands use unless told otherwise (created at format).
pub const DEFAULT_PARTITION: u64 = osd::id::FIRST_USER_ID;

/// Parses an id in decimal or 0x-hex.
pub fn parse_id(s: &str) -> Result<u64> {
    let r = match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16),
        None => s.parse(),
    };
    r.map_err(|_| anyhow!("'{s}' is not an id (decimal, or hex with 0x)"))
}

/// The object `id` (decimal or 0x-hex) of `partition`.
pub fn oid(partition: u64, id: &str) -> Result<Oid> {
    Ok(Oid {
        partition: PartitionId(partition),
        object: ObjectId(parse_id(id)?),
    })
}

/// Creates `image` as an empty object store on `device` with `placement`, with one partition
/// ([`DEFAULT_PARTITION`]).
pub fn format(image: &Path, device: flash::DeviceConfig, placement: osd::Placement) -> Result<()> {
    format_with_copies(image, device, placement, 1)
}

/// [`format()`] with `metadata_copies` copies of every metadata unit (1 or 2; docs/FORMAT.md,
/// "Metadata copies"): the image keeps writing that many.
pub fn format_with_copies(
    image: &Path,
    device: flash::DeviceConfig,
    placement: osd::Placement,
    metadata_copies: u8,
) -> Result<()> {
    use flash::image::ImageContent;
    let cfg = osd::OsdConfig {
        metadata_copies,
        ..mount::image::store_config(&device, placement)
    };
    let store = ImageStore::create_for(image, &device, ImageContent::ObjectStore)?;
    let nand = Nand::open(device, store)?;
    let mut s = ObjectStore::format(nand, cfg).map_err(|e| anyhow!(e))?;
    s.create_partition(Some(PartitionId(DEFAULT_PARTITION)))
        .map_err(|e| anyhow!(e))?;
    s.close().map_err(|e| anyhow!(e))?;
    Ok(())
}

/// Opens the store on `image` under the image's lock, which the caller holds as long as it
/// uses the store (no mount or other command may open the image meanwhile).
pub fn open_locked(image: &Path) -> Result<(Store, mount::image::ImageLock)> {
    let lock = mount::image::lock(image)?;
    Ok((mount::image::open_store(image)?, lock))
}

/// Creates an object (with id `id`, or one the device picks), gives it parity units
/// (`reliability`) or encryption (the store's master key must be set), writes `data` and
/// flushes the device. Returns the object's id.
pub fn put(
    s: &mut Store,
    partition: u64,
    id: Option<u64>,
    reliability: u8,
    encrypt: bool,
    compression: osd::compress::Compression,
    data: &[u8],
) -> Result<ObjectId> {
    if encrypt && reliability > 0 {
        bail!("encryption is not combined with parity (reliability) yet");
    }
    let compress = compression != osd::compress::Compression::None;
    if compress && reliability > 0 {
        bail!("--compression and --reliability are not combined yet (docs/DESIGN.md)");
    }
    let object = s
        .create(PartitionId(partition), id.map(ObjectId))
        .map_err(|e| anyhow!(e))?;
    let oid = Oid {
        partition: PartitionId(partition),
        object,
    };
    if encrypt {
        // While the object is empty, before any parity (the two are not combined yet).
        s.set_attr(oid, Attr::Reliability, AttrValue::U64(0))
            .map_err(|e| anyhow!(e))?;
        s.set_attr(oid, Attr::Encryption, AttrValue::U64(1))
            .map_err(|e| anyhow!(e))?;
    }
    if compress {
        // While the object is empty, before any parity (the two are not combined yet).
        s.set_attr(oid, Attr::Reliability, AttrValue::U64(0))
            .map_err(|e| anyhow!(e))?;
        s.set_attr(oid, Attr::Compression, AttrValue::U64(compression.code()))
            .map_err(|e| anyhow!(e))?;
    }
    if reliability > 0 {
        s.set_attr(oid, Attr::Reliability, AttrValue::U64(reliability as u64))
            .map_err(|e| anyhow!(e))?;
    }
    s.write(oid, 0, data).map_err(|e| anyhow!(e))?;
    s.flush(FlushScope::Device).map_err(|e| anyhow!(e))?;
    Ok(object)
}

/// An object's logical length.
pub fn length(s: &mut Store, oid: Oid) -> Result<u64> {
    match s
        .get_attr(oid, Attr::LogicalLength)
        .map_err(|e| anyhow!(e))?
    {
        AttrValue::U64(len) => Ok(len),
        other => bail!("object {oid}: logical length is {other:?}, not a number"),
    }
}

/// Reads a whole object; every unit is checked before anything is returned.
pub fn get(s: &mut Store, oid: Oid) -> Result<Vec<u8>> {
    let len = length(s, oid)?;
    let len = usize::try_from(len).map_err(|_| anyhow!("object {oid}: {len} bytes"))?;
    let mut data = vec![0u8; len];
    let n = s.read(oid, 0, &mut data).map_err(|e| match e {
        osd::OsdError::KeyRequired(_) | osd::OsdError::WrongKey(_) => anyhow!(e),
        e => anyhow!("object {oid} is damaged, nothing returned: {e}"),
    })?;
    data.truncate(n);
    Ok(data)
}

/// One partition's objects: (object id, logical length in bytes), in id order.
pub struct Listing {
    /// The partition's id.
    pub partition: u64,
    /// Its objects and their lengths.
    pub objects: Vec<(u64, u64)>,
}

/// Lists the objects of `partition`, or of every partition.
pub fn ls(s: &mut Store, partition: Option<u64>) -> Result<Vec<Listing>> {
    let partitions = match partition {
        Some(p) => vec![PartitionId(p)],
        None => {
            let mut all = Vec::new();
            let mut token = 0;
            loop {
                let (ps, next) = s.list_partitions(token, 1000).map_err(|e| anyhow!(e))?;
                all.extend(ps);
                match next {
                    Some(t) => token = t,
                    None => break,
                }
            }
            all
        }
    };
    let mut out = Vec::new();
    for p in partitions {
        let mut listing = Listing {
            partition: p.0,
            objects: Vec::new(),
        };
        let mut token = 0;
        loop {
            let (objects, next) = s.list(p, token, 1000).map_err(|e| anyhow!(e))?;
            for o in objects {
                let len = length(
                    s,
                    Oid {
                        partition: p,
                        object: o,
                    },
                )?;
                listing.objects.push((o.0, len));
            }
            match next {
                Some(t) => token = t,
                None => break,
            }
        }
        out.push(listing);
    }
    Ok(out)
}

/// The attributes `stat` shows, by name, in order (encryption first, then user attributes
/// by id after these).
pub const STAT_ATTRS: [(&str, Attr); 12] = [
    ("logical length", Attr::LogicalLength),
    ("used capacity", Attr::UsedCapacity),
    ("created (ns)", Attr::CreatedTime),
    ("modified (ns)", Attr::ModifiedTime),
    ("accessed (ns)", Attr::AccessedTime),
    ("attributes changed (ns)", Attr::AttrChangedTime),
    ("priority", Attr::Priority),
    ("expected size", Attr::ExpectedSize),
    ("access pattern", Attr::AccessPattern),
    ("read-only", Attr::ReadOnly),
    ("inode", Attr::InodeEmbedded),
    ("reliability", Attr::Reliability),
];

/// An object's attributes: whether it is encrypted, the predefined attributes of
/// [`STAT_ATTRS`], and its user attributes (id, value).
pub struct Stat {
    /// Encrypted with XChaCha20-Poly1305.
    pub encrypted: bool,
    /// Each of [`STAT_ATTRS`] with its value.
    pub attrs: Vec<(&'static str, AttrValue)>,
    /// The user attributes set on the object.
    pub user: Vec<(u16, Vec<u8>)>,
}

/// Reads every attribute `ossd stat` shows.
pub fn stat(s: &mut Store, oid: Oid) -> Result<Stat> {
    let enc = s.get_attr(oid, Attr::Encryption).map_err(|e| anyhow!(e))?;
    let mut attrs = Vec::new();
    for (name, a) in STAT_ATTRS {
        attrs.push((name, s.get_attr(oid, a).map_err(|e| anyhow!(e))?));
    }
    let mut user = Vec::new();
    for id in osd::onode::FIRST_USER_ATTR..=u16::MAX {
        if let AttrValue::Bytes(v) = s.get_attr(oid, Attr::User(id)).map_err(|e| anyhow!(e))? {
            user.push((id, v));
        }
    }
    Ok(Stat {
        encrypted: matches!(enc, AttrValue::U64(1)),
        attrs,
        user,
    })
}

/// Parses `ossd setattr`'s attribute name and value: a predefined name (priority,
/// expected-size, length, read-only, inode, reliability, encryption, compression) or a user
/// attribute id
/// (0x1000 and up) whose value is taken as text.
pub fn parse_attr(attr: &str, value: &str) -> Result<(Attr, AttrValue)> {
    let num = || {
        value
            .parse::<u64>()
            .map_err(|_| anyhow!("attribute {attr} takes a number, not '{value}'"))
    };
    let flag = || match value {
        "true" | "1" | "yes" => Ok(true),
        "false" | "0" | "no" => Ok(false),
        _ => Err(anyhow!(
            "attribute {attr} takes true or false, not '{value}'"
        )),
    };
    Ok(match attr {
        "priority" => (Attr::Priority, AttrValue::U64(num()?)),
        "expected-size" => (Attr::ExpectedSize, AttrValue::U64(num()?)),
        "length" => (Attr::LogicalLength, AttrValue::U64(num()?)),
        "read-only" => (Attr::ReadOnly, AttrValue::Bool(flag()?)),
        "inode" => (Attr::InodeEmbedded, AttrValue::Bool(flag()?)),
        "reliability" => (Attr::Reliability, AttrValue::U64(num()?)),
        "compression" => (
            Attr::Compression,
            AttrValue::U64(
                osd::compress::Compression::from_name(value)
                    .ok_or_else(|| {
                        anyhow!("compression takes none, lz4, zstd or auto, not '{value}'")
                    })?
                    .code(),
            ),
        ),
        "encryption" => (
            Attr::Encryption,
            AttrValue::U64(match value {
                "none" | "0" => 0,
                "xchacha20-poly1305" | "1" => 1,
                _ => bail!("encryption takes none or xchacha20-poly1305, not '{value}'"),
            }),
        ),
        other => {
            let id = parse_id(other).map_err(|_| anyhow!("unknown attribute '{other}': use priority, expected-size, length, read-only, inode, reliability, encryption, compression, or a user attribute id (0x1000 and up)"))?;
            let id = u16::try_from(id).map_err(|_| anyhow!("user attribute ids fit 16 bits"))?;
            (Attr::User(id), AttrValue::Bytes(value.as_bytes().to_vec()))
        }
    })
}

/// Sets one attribute, named and valued as [`parse_attr`] takes them.
pub fn setattr(s: &mut Store, oid: Oid, attr: &str, value: &str) -> Result<()> {
    let (a, v) = parse_attr(attr, value)?;
    s.set_attr(oid, a, v).map_err(|e| anyhow!(e))?;
    Ok(())
}

/// What `fsck` found.
pub struct Fsck {
    /// Objects and partitions in the index.
    pub objects: u64,
    /// Entries in the index.
    pub index_entries: u64,
    /// Units recovery scanned when the image was opened.
    pub units_scanned: u64,
    /// Records recovery rolled forward.
    pub records_rolled_forward: u64,
    /// Whether OFS is on the store (then it was mounted, checked and unmounted).
    pub ofs: bool,
    /// OFS was not unmounted cleanly and its mount repaired it, with this many fixes.
    pub ofs_repair_fixes: Option<u64>,
    /// Inconsistencies, one sentence each (OFS's prefixed with "OFS: ").
    pub problems: Vec<String>,
    /// Units that failed their checksum or could not be read.
    pub damaged: Vec<String>,
    /// Metadata units (or their copies) damaged while the other copy is whole.
    pub masked: Vec<String>,
}

/// Checks every invariant of the store and, when OFS is on it, of OFS (mounting it repairs it
/// after an unclean end, as `ossd mount` would). Consumes the store and closes it.
pub fn fsck(mut s: Store) -> Result<Fsck> {
    let report = s.fsck().map_err(|e| anyhow!(e))?;
    let r = s.recovery();
    let mut out = Fsck {
        objects: report.objects,
        index_entries: report.index_entries,
        units_scanned: r.units_scanned,
        records_rolled_forward: r.records_rolled_forward,
        ofs: false,
        ofs_repair_fixes: None,
        problems: report.problems,
        damaged: report.damaged,
        masked: report.masked,
    };
    if s.get_attr(ofs::layout::data_oid(vfs::ROOT), ofs::layout::ATTR_SUPER)
        .is_ok_and(|v| matches!(v, AttrValue::Bytes(_)))
    {
        out.ofs = true;
        let mut fs = ofs::Ofs::mount(s).map_err(|e| anyhow!("OFS: {e}"))?;
        let c = fs.ofs_counters();
        if c.repairs > 0 {
            out.ofs_repair_fixes = Some(c.repair_fixes);
        }
        let found = vfs::FileSystem::check(&mut fs).map_err(|e| anyhow!("OFS: {e}"))?;
        out.problems
            .extend(found.into_iter().map(|p| format!("OFS: {p}")));
        fs.unmount()
            .map_err(|e| anyhow!(e))?
            .close()
            .map_err(|e| anyhow!(e))?;
    } else {
        s.close().map_err(|e| anyhow!(e))?;
    }
    Ok(out)
}

/// Parses an `ossd txn` script (docs in `ossd txn --help`): one command a line, `#` starts a
/// comment; files named by `put` and `write` are read now. Every error names its line.
pub fn parse_txn_script(text: &str, partition: u64) -> Result<Vec<osd::TxnOp>> {
    use osd::TxnOp;
    let p = PartitionId(partition);
    let mut ops = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        let line = line.split('#').next().unwrap_or("").trim();
        let words: Vec<&str> = line.split_whitespace().collect();
        let at = |e: anyhow::Error| anyhow!("line {n}: {e}");
        let id = |w: &str| oid(partition, w).map_err(at);
        let read = |f: &str| std::fs::read(f).map_err(|e| anyhow!("line {n}: reading {f}: {e}"));
        let num = |w: &str, what: &str| {
            w.parse::<u64>()
                .map_err(|_| anyhow!("line {n}: {what} must be a number, not '{w}'"))
        };
        match words.as_slice() {
            [] => {}
            ["create"] => ops.push(TxnOp::Create {
                partition: p,
                id: None,
            }),
            ["create", o] => ops.push(TxnOp::Create {
                partition: p,
                id: Some(id(o)?.object),
            }),
            ["put", o, file] => {
                let data = read(file)?;
                let oid = id(o)?;
                ops.push(TxnOp::Truncate { oid, length: 0 });
                ops.push(TxnOp::Write {
                    oid,
                    offset: 0,
                    data,
                });
            }
            ["write", o, off, file] => ops.push(TxnOp::Write {
                oid: id(o)?,
                offset: num(off, "the offset")?,
                data: read(file)?,
            }),
            ["truncate", o, len] => ops.push(TxnOp::Truncate {
                oid: id(o)?,
                length: num(len, "the length")?,
            }),
            ["setattr", o, attr, value] => {
                let (attr, value) = parse_attr(attr, value).map_err(at)?;
                ops.push(TxnOp::SetAttr {
                    oid: id(o)?,
                    attr,
                    value,
                });
            }
            ["rm", o] => ops.push(TxnOp::Remove { oid: id(o)? }),
            [cmd, ..] => bail!(
                "line {n}: '{line}': expected create [ID], put ID FILE, write ID OFFSET FILE, \
                 truncate ID LENGTH, setattr ID ATTR VALUE or rm ID{}",
                if matches!(
                    *cmd,
                    "create" | "put" | "write" | "truncate" | "setattr" | "rm"
                ) {
                    " (wrong number of words)"
                } else {
                    ""
                }
            ),
        }
    }
    Ok(ops)
}

/// Runs `ops` as one transaction: all of them, durably, or none (the store's error says which
/// command was refused). Returns the ids of the objects created.
pub fn txn(s: &mut Store, partition: u64, ops: Vec<osd::TxnOp>) -> Result<Vec<ObjectId>> {
    if ops.is_empty() {
        bail!("the transaction script holds no command");
    }
    let t = s
        .begin_txn(PartitionId(partition))
        .map_err(|e| anyhow!(e))?;
    let mut created = Vec::new();
    for (i, op) in ops.into_iter().enumerate() {
        match s.txn_op(t, op) {
            Ok(Some(o)) => created.push(o),
            Ok(None) => {}
            Err(e) => {
                s.abort_txn(t).map_err(|e| anyhow!(e))?;
                bail!(
                    "command {} of the transaction refused, nothing applied: {e}",
                    i + 1
                );
            }
        }
    }
    s.commit_txn(t)
        .map_err(|e| anyhow!("commit refused, nothing applied: {e}"))?;
    Ok(created)
}
