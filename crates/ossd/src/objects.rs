//! Object store commands on a device image: put, get, rm, ls, stat, setattr, fsck, scrub.

use std::io::{Read, Write};
use std::path::Path;

use anyhow::{anyhow, bail, Context, Result};
use flash::image::{ImageContent, ImageStore};
use flash::Nand;
use osd::{
    Attr, AttrValue, FlushScope, ObjectId, ObjectStore, Oid, Osd, OsdConfig, PartitionId, Placement,
};

/// The partition the CLI uses unless told otherwise (created at format).
pub const DEFAULT_PARTITION: u64 = osd::id::FIRST_USER_ID;

pub type Store = ObjectStore<Nand<ImageStore>>;

fn config(device: &flash::DeviceConfig, placement: Placement) -> OsdConfig {
    mount::image::store_config(device, placement)
}

/// Parses an id in decimal or 0x-hex.
pub fn parse_id(s: &str) -> Result<u64> {
    let r = match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16),
        None => s.parse(),
    };
    r.map_err(|_| anyhow!("'{s}' is not an id (decimal, or hex with 0x)"))
}

/// Formats an image as an empty object store with one partition.
pub fn format(image: &Path, device: flash::DeviceConfig, placement: Placement) -> Result<()> {
    let store = ImageStore::create_for(image, &device, ImageContent::ObjectStore)?;
    let nand = Nand::open(device, store)?;
    let mut s = ObjectStore::format(nand, config(&device, placement)).map_err(|e| anyhow!(e))?;
    s.create_partition(Some(PartitionId(DEFAULT_PARTITION)))
        .map_err(|e| anyhow!(e))?;
    s.close().map_err(|e| anyhow!(e))?;
    Ok(())
}

pub fn open(image: &Path) -> Result<Store> {
    // Held until this one-shot command exits: no mount may use the image meanwhile.
    std::mem::forget(mount::image::lock(image)?);
    Ok(mount::image::open_store(image)?)
}

/// Opens the image with the device master key in `key_file`, if given (encrypted objects
/// refuse reads and writes without it).
pub fn open_keyed(image: &Path, key_file: Option<&Path>) -> Result<Store> {
    let key = key_file.map(crate::net::read_store_key).transpose()?;
    let mut s = open(image)?;
    s.set_master_key(key);
    Ok(s)
}

pub fn close(s: Store) -> Result<()> {
    s.close().map_err(|e| anyhow!(e))?;
    Ok(())
}

fn oid(partition: u64, id: &str) -> Result<Oid> {
    Ok(Oid {
        partition: PartitionId(partition),
        object: ObjectId(parse_id(id)?),
    })
}

/// How `put` stores an object.
pub struct PutOptions<'a> {
    /// Parity units per group (0: none).
    pub reliability: u8,
    /// Encrypt the object under a fresh data key wrapped by the master key in `key_file`.
    pub encrypt: bool,
    /// Per-object compression.
    pub compression: osd::compress::Compression,
    /// The device master key file.
    pub key_file: Option<&'a Path>,
}

/// Stores a file (or standard input, for `-`) as an object; prints its id.
pub fn put(
    image: &Path,
    partition: u64,
    id: Option<&str>,
    opts: &PutOptions<'_>,
    file: &str,
) -> Result<()> {
    if opts.encrypt && opts.key_file.is_none() {
        bail!("--encrypt needs the device master key: --key-file K (from `ossd keygen`)");
    }
    let mut data = Vec::new();
    if file == "-" {
        std::io::stdin()
            .read_to_end(&mut data)
            .context("reading standard input")?;
    } else {
        data = std::fs::read(file).with_context(|| format!("reading {file}"))?;
    }
    let mut s = open_keyed(image, opts.key_file)?;
    let want = id.map(parse_id).transpose()?.map(ObjectId);
    let object = s
        .create(PartitionId(partition), want)
        .map_err(|e| anyhow!(e))?;
    let oid = Oid {
        partition: PartitionId(partition),
        object,
    };
    if opts.encrypt {
        // While the object is empty, before any parity (the two are not combined yet).
        s.set_attr(oid, Attr::Reliability, AttrValue::U64(0))
            .map_err(|e| anyhow!(e))?;
        s.set_attr(oid, Attr::Encryption, AttrValue::U64(1))
            .map_err(|e| anyhow!(e))?;
    }
    if opts.compression != osd::compress::Compression::None {
        if opts.reliability > 0 {
            bail!("--compression and --reliability are not combined yet (docs/DESIGN.md)");
        }
        // While the object is empty, before any parity (the two are not combined yet).
        s.set_attr(oid, Attr::Reliability, AttrValue::U64(0))
            .map_err(|e| anyhow!(e))?;
        s.set_attr(
            oid,
            Attr::Compression,
            AttrValue::U64(opts.compression.code()),
        )
        .map_err(|e| anyhow!(e))?;
    }
    if opts.reliability > 0 {
        s.set_attr(
            oid,
            Attr::Reliability,
            AttrValue::U64(opts.reliability as u64),
        )
        .map_err(|e| anyhow!(e))?;
    }
    s.write(oid, 0, &data).map_err(|e| anyhow!(e))?;
    s.flush(FlushScope::Device).map_err(|e| anyhow!(e))?;
    close(s)?;
    println!("{:#x}", object.0);
    Ok(())
}

/// Writes an object's bytes to a file, or to standard output.
pub fn get(
    image: &Path,
    key_file: Option<&Path>,
    partition: u64,
    id: &str,
    out: Option<&Path>,
) -> Result<()> {
    let mut s = open_keyed(image, key_file)?;
    let oid = oid(partition, id)?;
    let AttrValue::U64(len) = s
        .get_attr(oid, Attr::LogicalLength)
        .map_err(|e| anyhow!(e))?
    else {
        unreachable!()
    };
    let mut data = vec![0u8; len as usize];
    // The whole object is read (and every unit checked) before a byte is written out.
    let n = s.read(oid, 0, &mut data).map_err(|e| match e {
        osd::OsdError::KeyRequired(_) | osd::OsdError::WrongKey(_) => anyhow!(e),
        e => anyhow!("object {oid} is damaged, nothing written: {e}"),
    })?;
    data.truncate(n);
    match out {
        Some(p) => std::fs::write(p, &data).with_context(|| format!("writing {}", p.display()))?,
        None => std::io::stdout().write_all(&data)?,
    }
    Ok(())
}

pub fn rm(image: &Path, partition: u64, id: &str) -> Result<()> {
    let mut s = open(image)?;
    s.remove(oid(partition, id)?).map_err(|e| anyhow!(e))?;
    close(s)
}

pub fn ls(image: &Path, partition: Option<u64>) -> Result<()> {
    let mut s = open(image)?;
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
    for p in partitions {
        println!("partition {:#x}", p.0);
        let mut token = 0;
        loop {
            let (objects, next) = s.list(p, token, 1000).map_err(|e| anyhow!(e))?;
            for o in objects {
                let oid = Oid {
                    partition: p,
                    object: o,
                };
                let len = s
                    .get_attr(oid, Attr::LogicalLength)
                    .map_err(|e| anyhow!(e))?;
                let AttrValue::U64(len) = len else {
                    unreachable!()
                };
                println!("  {:#x}  {len} bytes", o.0);
            }
            match next {
                Some(t) => token = t,
                None => break,
            }
        }
    }
    Ok(())
}

pub fn stat(image: &Path, partition: u64, id: &str) -> Result<()> {
    let mut s = open(image)?;
    let oid = oid(partition, id)?;
    let attrs = [
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
    println!("object {oid}");
    let enc = s.get_attr(oid, Attr::Encryption).map_err(|e| anyhow!(e))?;
    println!(
        "  {:<24} {}",
        "encryption",
        match enc {
            AttrValue::U64(1) => "xchacha20-poly1305",
            _ => "none",
        }
    );
    let (attr, codec) = s.compression_of(oid).map_err(|e| anyhow!(e))?;
    println!(
        "  {:<24} {}{}",
        "compression",
        attr.name(),
        match (attr, codec) {
            (osd::compress::Compression::Auto, Some(c)) => format!(" (chose {c:?})"),
            (osd::compress::Compression::Auto, None) => " (stored as written)".to_string(),
            _ => String::new(),
        }
    );
    let num = |v: AttrValue| if let AttrValue::U64(n) = v { n } else { 0 };
    let logical = num(s
        .get_attr(oid, Attr::LogicalLength)
        .map_err(|e| anyhow!(e))?);
    let physical = num(s
        .get_attr(oid, Attr::UsedCapacity)
        .map_err(|e| anyhow!(e))?);
    println!(
        "  {:<24} {logical} logical, {physical} physical ({})",
        "space",
        saved(logical, physical)
    );
    for (name, a) in attrs {
        println!(
            "  {name:<24} {:?}",
            s.get_attr(oid, a).map_err(|e| anyhow!(e))?
        );
    }
    for id in osd::onode::FIRST_USER_ATTR..=u16::MAX {
        if let AttrValue::Bytes(v) = s.get_attr(oid, Attr::User(id)).map_err(|e| anyhow!(e))? {
            println!("  user {id:#x}{:<14} {:?}", "", String::from_utf8_lossy(&v));
        }
    }
    Ok(())
}

/// "ratio 3.12x, 68% saved" (physical 0: nothing stored).
pub fn saved(logical: u64, physical: u64) -> String {
    if physical == 0 {
        return "nothing on flash".into();
    }
    let ratio = logical as f64 / physical as f64;
    let pct = 100.0 * (1.0 - physical as f64 / logical.max(1) as f64);
    if logical >= physical {
        format!("ratio {ratio:.2}x, {pct:.0}% saved")
    } else {
        format!(
            "ratio {ratio:.2}x, {} bytes more than logical",
            physical - logical
        )
    }
}

/// Sets an attribute: a predefined name (priority, expected-size, read-only, inode,
/// reliability) or a user
/// attribute id (0x1000 and up) whose value is taken as text.
pub fn setattr(
    image: &Path,
    key_file: Option<&Path>,
    partition: u64,
    id: &str,
    attr: &str,
    value: &str,
) -> Result<()> {
    let mut s = open_keyed(image, key_file)?;
    let oid = oid(partition, id)?;
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
    let (a, v) = match attr {
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
    };
    s.set_attr(oid, a, v).map_err(|e| anyhow!(e))?;
    close(s)
}

/// Rotates the device master key of a stopped image: every encrypted object's data key is
/// rewrapped from `old` to `new` (no data rewritten); prints how many.
pub fn rekey(image: &Path, old: &Path, new: &Path) -> Result<()> {
    let new_key = crate::net::read_store_key(new)?;
    let mut s = open_keyed(image, Some(old))?;
    let n = s.rekey(new_key).map_err(|e| anyhow!(e))?;
    close(s)?;
    println!(
        "{}: {n} data keys rewrapped under {}",
        image.display(),
        new.display()
    );
    Ok(())
}

/// Checks every invariant; a non-zero exit and a report on any problem.
pub fn fsck(image: &Path) -> Result<()> {
    let mut s = open(image)?;
    let report = s.fsck().map_err(|e| anyhow!(e))?;
    let r = s.recovery();
    println!(
        "{}: {} objects and partitions, {} index entries; recovery scanned {} units, rolled forward {} records",
        image.display(),
        report.objects,
        report.index_entries,
        r.units_scanned,
        r.records_rolled_forward
    );
    let mut problems = report.problems;
    let damaged = report.damaged;
    if s.get_attr(ofs::layout::data_oid(vfs::ROOT), ofs::layout::ATTR_SUPER)
        .is_ok_and(|v| matches!(v, AttrValue::Bytes(_)))
    {
        // OFS on the store: mount it (which repairs it after an unclean end, as `ossd mount`
        // would), check the tree, unmount cleanly.
        let mut fs = ofs::Ofs::mount(s).map_err(|e| anyhow!("OFS: {e}"))?;
        let c = fs.ofs_counters();
        if c.repairs > 0 {
            println!(
                "OFS was not unmounted cleanly: repaired ({} fixes)",
                c.repair_fixes
            );
        }
        let found = vfs::FileSystem::check(&mut fs).map_err(|e| anyhow!("OFS: {e}"))?;
        println!("OFS: {} problems", found.len());
        problems.extend(found.into_iter().map(|p| format!("OFS: {p}")));
        close(fs.unmount().map_err(|e| anyhow!(e))?)?;
    }
    if problems.is_empty() && damaged.is_empty() {
        println!("clean");
        return Ok(());
    }
    for p in &problems {
        println!("  problem: {p}");
    }
    for d in &damaged {
        println!("  damaged: {d}");
    }
    bail!(
        "{} problems and {} damaged units found",
        problems.len(),
        damaged.len()
    )
}

/// Scrubs the image's object store: every data unit checked, parity groups checked against
/// their data, and with `repair` damaged units rebuilt from parity (`quick`: parity groups
/// against their data's OOB records only). Fails while damage is left.
pub fn scrub(image: &Path, repair: bool, quick: bool, json: bool) -> Result<()> {
    let mut s = open(image)?;
    let report = if quick {
        s.scrub_quick()
    } else {
        s.scrub(repair)
    }
    .map_err(|e| anyhow!(e))?;
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!(
            "{}: {} objects ({} with parity), {} data units and {} parity groups checked; {} found, {} repaired, {} unrepairable",
            image.display(),
            report.objects,
            report.protected_objects,
            report.units_checked,
            report.parity_groups_checked,
            report.findings.len(),
            report.repaired,
            report.unrepairable
        );
        for f in &report.findings {
            println!(
                "  {:?}: object {} bytes {}..{} ({}): {}",
                f.outcome,
                f.object,
                f.offset,
                f.offset + f.length,
                f.kind,
                f.what
            );
        }
    }
    close(s)?;
    let left = report
        .findings
        .iter()
        .filter(|f| f.outcome != osd::store::ScrubOutcome::Repaired)
        .count();
    if left > 0 {
        bail!("{left} damaged units or parity groups left");
    }
    Ok(())
}
