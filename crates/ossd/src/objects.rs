//! Object store commands on a device image: put, get, rm, ls, stat, setattr, fsck, scrub.

use std::io::{Read, Write};
use std::path::Path;

use anyhow::{anyhow, bail, Context, Result};
use osd::{Attr, AttrValue, Osd, Placement};
use ossd::store::{self as lib, oid};

pub use ossd::store::{parse_id, Store, DEFAULT_PARTITION};

/// Formats an image as an empty object store with one partition.
pub fn format(
    image: &Path,
    device: flash::DeviceConfig,
    placement: Placement,
    metadata_copies: u8,
) -> Result<()> {
    lib::format_with_copies(image, device, placement, metadata_copies)
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
    let want = id.map(parse_id).transpose()?;
    let object = lib::put(
        &mut s,
        partition,
        want,
        opts.reliability,
        opts.encrypt,
        opts.compression,
        &data,
    )?;
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
    let data = lib::get(&mut s, oid(partition, id)?)?;
    // The whole object is read (and every unit checked) before a byte is written out.
    match out {
        Some(p) => std::fs::write(p, &data).with_context(|| format!("writing {}", p.display()))?,
        None => std::io::stdout().write_all(&data)?,
    }
    Ok(())
}

/// Runs a transaction script (a file, or standard input for `-`): all of its commands, or none.
pub fn txn(image: &Path, key_file: Option<&Path>, partition: u64, script: &str) -> Result<()> {
    let text = if script == "-" {
        let mut t = String::new();
        std::io::stdin()
            .read_to_string(&mut t)
            .context("reading standard input")?;
        t
    } else {
        std::fs::read_to_string(script).with_context(|| format!("reading {script}"))?
    };
    let ops = lib::parse_txn_script(&text, partition)?;
    let n = ops.len();
    let mut s = open_keyed(image, key_file)?;
    let created = lib::txn(&mut s, partition, ops)?;
    close(s)?;
    for o in created {
        println!("created {:#x}", o.0);
    }
    eprintln!("committed {n} commands");
    Ok(())
}

pub fn rm(image: &Path, partition: u64, id: &str) -> Result<()> {
    let mut s = open(image)?;
    s.remove(oid(partition, id)?).map_err(|e| anyhow!(e))?;
    close(s)
}

pub fn ls(image: &Path, partition: Option<u64>) -> Result<()> {
    let mut s = open(image)?;
    for p in lib::ls(&mut s, partition)? {
        println!("partition {:#x}", p.partition);
        for (o, len) in p.objects {
            println!("  {o:#x}  {len} bytes");
        }
    }
    Ok(())
}

pub fn stat(image: &Path, partition: u64, id: &str) -> Result<()> {
    let mut s = open(image)?;
    let oid = oid(partition, id)?;
    let st = lib::stat(&mut s, oid)?;
    println!("object {oid}");
    println!(
        "  {:<24} {}",
        "encryption",
        if st.encrypted {
            "xchacha20-poly1305"
        } else {
            "none"
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
    for (name, v) in &st.attrs {
        println!("  {name:<24} {v:?}");
    }
    for (id, v) in &st.user {
        println!("  user {id:#x}{:<14} {:?}", "", String::from_utf8_lossy(v));
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
    lib::setattr(&mut s, oid(partition, id)?, attr, value)?;
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
    let f = lib::fsck(open(image)?)?;
    println!(
        "{}: {} objects and partitions, {} index entries; recovery scanned {} units, rolled forward {} records",
        image.display(),
        f.objects,
        f.index_entries,
        f.units_scanned,
        f.records_rolled_forward
    );
    if let Some(fixes) = f.ofs_repair_fixes {
        println!("OFS was not unmounted cleanly: repaired ({fixes} fixes)");
    }
    if f.ofs {
        let n = f.problems.iter().filter(|p| p.starts_with("OFS: ")).count();
        println!("OFS: {n} problems");
    }
    if f.problems.is_empty() && f.damaged.is_empty() && f.masked.is_empty() {
        println!("clean");
        return Ok(());
    }
    for p in &f.problems {
        println!("  problem: {p}");
    }
    for d in &f.damaged {
        println!("  damaged: {d}");
    }
    for m in &f.masked {
        println!("  masked: {m}");
    }
    bail!(
        "{} problems, {} damaged units and {} damaged metadata units masked by their copies found",
        f.problems.len(),
        f.damaged.len(),
        f.masked.len()
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
