//! Cuts power after every flash operation of a scripted workload in turn (LittleFS-style), both
//! between operations and in the middle of one (torn program, interrupted erase), and checks the
//! recovery contract at each point:
//! - the store reopens and fsck is clean;
//! - every object as of the last FLUSH that completed before the cut reads back exactly (its
//!   existence, length and bytes), unless a later command (the one the cut interrupted
//!   included) changed it: then it holds its flushed or its later contents, byte by byte, its
//!   length is one it had since the flush (or a write-unit boundary between them: a write that
//!   extended it landed in part), and it is gone only if a later command removed it;
//! - no object holds bytes that were never written to it.

use std::collections::BTreeMap;

use flash::fault::{CutMode, Faulty};
use flash::{preset, DeviceConfig, Nand};
use fml::FmlConfig;
use osd::{
    Attr, AttrValue, FlushScope, ObjectId, ObjectStore, Oid, Osd, OsdConfig, OsdError, PartitionId,
    Placement,
};

const P: u64 = 0x10000;

fn device() -> DeviceConfig {
    let mut c = preset("tiny").unwrap();
    c.geometry.dies_per_channel = 1;
    c.geometry.blocks_per_plane = 24;
    c.geometry.pages_per_block = 8;
    c.gang.units_per_superblock = 1;
    c
}

fn config(placement: Placement, svc: Services) -> OsdConfig {
    OsdConfig {
        placement,
        metadata_copies: svc.metadata_copies,
        buffer_bytes: 8 << 10,
        checkpoint_units: 24,
        // Chunks of 4 units, so that the larger objects have several (compressed sweeps).
        compression_chunk_units: 4,
        fml: FmlConfig::for_blocks(48),
        ..OsdConfig::default()
    }
}

/// The object services every object of a sweep gets at creation.
#[derive(Clone, Copy, Debug)]
struct Services {
    encrypt: bool,
    /// The `compression` attribute (0 none, 1 lz4, 2 zstd, 3 auto).
    compression: u64,
    /// The store's `metadata_copies` (1 or 2).
    metadata_copies: u8,
}

const PLAIN: Services = Services {
    encrypt: false,
    compression: 0,
    metadata_copies: 1,
};

#[derive(Clone, Copy, Debug)]
enum Step {
    Create(u64),
    Write(u64, u64, u64, u8),
    Append(u64, u64, u8),
    Truncate(u64, u64),
    Remove(u64),
    /// A read: changes no contents, but journals or records an access time.
    Read(u64),
    Flush,
}

/// Enough data to fill the small device several times over, so GC and checkpoints run.
fn script() -> Vec<Step> {
    use Step::*;
    let mut s = vec![
        Create(1),
        Create(2),
        Create(3),
        Write(1, 0, 20_000, 1),
        Write(2, 5_000, 9_000, 2),
        // Small objects (the small-object buffer packs them into shared pages).
        Create(5),
        Create(6),
        Create(7),
        Flush,
    ];
    for round in 0..24u8 {
        let r = round as u64;
        // 5 stays small; 6 grows past a write unit (spills), is emptied and grows again; 7
        // is removed and made anew.
        s.extend([
            Write(5, (r * 50) % 400, 200, 50 + round),
            Append(6, 350, 60 + round),
            Write(7, r % 3 * 100, 100, 70 + round),
        ]);
        if round % 12 == 11 {
            s.push(Truncate(6, 0));
        }
        if round == 10 {
            s.extend([Remove(7), Create(7)]);
        }
        if round % 8 == 5 {
            s.extend([Truncate(5, 0), Flush, Truncate(7, 50)]);
        }
        s.extend([
            Write(1, (r * 7_000) % 30_000, 12_000, 10 + round),
            Append(2, 6_000, 20 + round),
            Read(1),
            Read(2),
            Write(3, 0, 16_384, 30 + round),
            Read(3),
            Flush,
            Truncate(2, 4_000 + r * 500),
            Write(3, 8_000, 3_000, 40 + round),
            Flush,
        ]);
        if round == 2 {
            s.extend([
                Remove(3),
                Create(4),
                Write(4, 0, 30_000, 99),
                Flush,
                Create(3),
            ]);
        }
    }
    s
}

/// Bytes of 16 symbols per seed at random: zstd stores a chunk of them in about half its
/// units (so a new generation takes several programs a cut can tear), lz4 not at all (raw
/// chunks).
fn bytes(seed: u8, len: u64) -> Vec<u8> {
    (0..len)
        .map(|i| {
            // splitmix64 of (seed, i)
            let mut z = ((seed as u64) << 40 ^ i).wrapping_mul(0x9E37_79B9_7F4A_7C15);
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            seed.wrapping_mul(37) ^ ((z ^ (z >> 31)) >> 60) as u8
        })
        .collect()
}

/// The oracle: object contents after each step.
fn apply(model: &mut BTreeMap<u64, Vec<u8>>, step: Step) {
    match step {
        Step::Create(o) => {
            model.insert(o, Vec::new());
        }
        Step::Write(o, off, len, seed) => {
            let d = model.get_mut(&o).unwrap();
            let end = (off + len) as usize;
            if d.len() < end {
                d.resize(end, 0);
            }
            d[off as usize..end].copy_from_slice(&bytes(seed, len));
        }
        Step::Append(o, len, seed) => {
            let d = model.get_mut(&o).unwrap();
            d.extend(bytes(seed, len));
        }
        Step::Truncate(o, len) => model.get_mut(&o).unwrap().resize(len as usize, 0),
        Step::Remove(o) => {
            model.remove(&o);
        }
        Step::Read(_) | Step::Flush => {}
    }
}

/// Write unit of [`device`]: a write cut short may leave an object's length at a unit boundary
/// of its data (roll-forward extends the length to the end of each unit it finds).
const UNIT: u64 = 4096;

/// Checks one object after recovery against the state at the last completed flush and every
/// state since (the step the cut interrupted included: it may have landed or not).
///
/// - An object no step since the flush changed must come back exactly as flushed: same
///   existence, same length, same bytes.
/// - Otherwise it may be gone only if one of those states lacks it; its length is one of those
///   states' lengths, or a write-unit boundary between the shortest and the longest of them (a
///   write that extended it landed in part); each byte comes from one of those states.
fn check_object(
    o: u64,
    got: Option<&Vec<u8>>,
    flushed: &BTreeMap<u64, Vec<u8>>,
    since: &[BTreeMap<u64, Vec<u8>>],
) -> Result<(), String> {
    let was = flushed.get(&o);
    let candidates: Vec<Option<&Vec<u8>>> = std::iter::once(was)
        .chain(since.iter().map(|m| m.get(&o)))
        .collect();
    if candidates.iter().all(|c| *c == was) {
        return match (was, got) {
            (None, None) => Ok(()),
            (Some(_), None) => Err(format!("object {o} vanished")),
            (None, Some(g)) => Err(format!(
                "object {o} came back ({} bytes) though it did not exist at the flush and nothing since made it",
                g.len()
            )),
            (Some(f), Some(g)) if f.len() != g.len() => Err(format!(
                "object {o} length {} differs from its flushed length {} (no step since touched it)",
                g.len(),
                f.len()
            )),
            (Some(f), Some(g)) => match f.iter().zip(g).position(|(a, b)| a != b) {
                None => Ok(()),
                Some(i) => Err(format!(
                    "object {o} byte {i} = {} differs from its flushed value {} (no step since touched it)",
                    g[i], f[i]
                )),
            },
        };
    }
    let Some(g) = got else {
        if candidates.iter().all(|c| c.is_some()) {
            return Err(format!("object {o} vanished"));
        }
        return Ok(());
    };
    let lens: Vec<u64> = candidates
        .iter()
        .flatten()
        .map(|c| c.len() as u64)
        .collect();
    let (Some(&lo), Some(&hi)) = (lens.iter().min(), lens.iter().max()) else {
        return Err(format!(
            "object {o} came back ({} bytes) though no state since the flush had it",
            g.len()
        ));
    };
    let len = g.len() as u64;
    if !(lens.contains(&len) || (len.is_multiple_of(UNIT) && lo < len && len < hi)) {
        return Err(format!(
            "object {o} length {len}: not a length it had since the flush ({lens:?}) nor a unit boundary between them"
        ));
    }
    // Each byte must come from one of the states the object went through.
    for (i, b) in g.iter().enumerate() {
        if !candidates
            .iter()
            .any(|c| c.and_then(|c| c.get(i)) == Some(b))
        {
            return Err(format!("object {o} byte {i} = {b} was never written there"));
        }
    }
    Ok(())
}

fn oid(o: u64) -> Oid {
    Oid::new(P, P + o)
}

fn key() -> osd::MasterKey {
    osd::MasterKey::from_bytes([3; 32])
}

fn run(s: &mut ObjectStore<Faulty<Nand>>, step: Step, svc: Services) -> Result<(), OsdError> {
    match step {
        Step::Create(o) => {
            s.create(PartitionId(P), Some(ObjectId(P + o)))?;
            if svc.encrypt {
                s.set_attr(oid(o), Attr::Encryption, AttrValue::U64(1))?;
            }
            if svc.compression != 0 {
                s.set_attr(oid(o), Attr::Compression, AttrValue::U64(svc.compression))?;
            }
            Ok(())
        }
        Step::Write(o, off, len, seed) => s.write(oid(o), off, &bytes(seed, len)),
        Step::Append(o, len, seed) => s.append(oid(o), &bytes(seed, len)).map(|_| ()),
        Step::Truncate(o, len) => s.truncate(oid(o), len),
        Step::Remove(o) => s.remove(oid(o)),
        Step::Read(o) => {
            let mut buf = vec![0u8; 64 << 10];
            match s.read(oid(o), 0, &mut buf) {
                Err(OsdError::NotFound(_)) => Ok(()),
                r => r.map(|_| ()),
            }
        }
        Step::Flush => s.flush(FlushScope::Device),
    }
}

fn fresh(placement: Placement, svc: Services) -> ObjectStore<Faulty<Nand>> {
    let mut s = ObjectStore::format(
        Faulty::new(Nand::in_memory(device()).unwrap()),
        config(placement, svc),
    )
    .unwrap();
    s.set_master_key(Some(key()));
    s.create_partition(Some(PartitionId(P))).unwrap();
    s.flush(FlushScope::Device).unwrap();
    s
}

/// Runs the script with power cut after `cut` operations; returns whether the cut happened.
fn cut_at(placement: Placement, cut: u64, mode: CutMode, svc: Services) -> Result<bool, String> {
    let mut s = fresh(placement, svc);
    let script = script();
    s.device_mut().cut_power_after(cut, mode);
    let mut model = BTreeMap::new();
    // The state at the last completed flush, and every state since (a crash may land on any
    // byte of any of them).
    let mut flushed: BTreeMap<u64, Vec<u8>> = BTreeMap::new();
    let mut since: Vec<BTreeMap<u64, Vec<u8>>> = Vec::new();
    let mut cut_happened = false;
    for &step in &script {
        apply(&mut model, step);
        since.push(model.clone());
        match run(&mut s, step, svc) {
            Ok(()) => {
                if matches!(step, Step::Flush) {
                    flushed = model.clone();
                    since.clear();
                }
            }
            Err(e) if e.to_string().contains("power is off") => {
                cut_happened = true;
                break;
            }
            Err(e) => return Err(format!("cut {cut}: {step:?}: {e}")),
        }
    }
    // Reboot: recover, retrying if the cut was still pending.
    let mut dev = s.crash();
    let mut store = None;
    for _ in 0..10 {
        dev.restore_power();
        match ObjectStore::open_or_return(dev, config(placement, svc)) {
            Ok(mut st) => {
                st.set_master_key(Some(key()));
                store = Some(st);
                break;
            }
            Err((e, Some(d))) if e.to_string().contains("power is off") => dev = d,
            Err((e, _)) => return Err(format!("cut {cut}: recovery failed: {e}")),
        }
    }
    let mut s = store.ok_or_else(|| format!("cut {cut}: recovery kept losing power"))?;
    let report = s.fsck().map_err(|e| format!("cut {cut}: fsck: {e}"))?;
    if !report.problems.is_empty() {
        return Err(format!("cut {cut}: fsck: {:?}", report.problems));
    }
    for o in 1..=7u64 {
        let got = match s.get_attr(oid(o), Attr::LogicalLength) {
            Ok(AttrValue::U64(len)) => {
                let mut d = vec![0u8; len as usize];
                s.read(oid(o), 0, &mut d)
                    .map_err(|e| format!("cut {cut}: read {o}: {e}"))?;
                Some(d)
            }
            Err(OsdError::NotFound(_)) => None,
            other => return Err(format!("cut {cut}: object {o}: {other:?}")),
        };
        check_object(o, got.as_ref(), &flushed, &since).map_err(|e| format!("cut {cut}: {e}"))?;
    }
    Ok(cut_happened)
}

fn sweep(placement: Placement, svc: Services) {
    // Count the script's flash operations.
    let mut s = fresh(placement, svc);
    let before = s.device_mut().ops();
    for step in script() {
        run(&mut s, step, svc).unwrap();
    }
    let total = s.device_mut().ops() - before;
    let gc = s.fml().stats();
    assert!(
        gc.gc_victims > 3 && gc.blocks_erased > 3,
        "the script must make GC run: {gc:?}"
    );
    assert!(
        s.stats().checkpoints > 3,
        "the script must checkpoint: {:?}",
        s.stats()
    );
    assert_eq!(
        s.stats().metadata_copies_written > 0,
        svc.metadata_copies == 2,
        "{:?}",
        s.stats()
    );
    let mut failures = Vec::new();
    for cut in 0..=total {
        for mode in [CutMode::Clean, CutMode::Torn] {
            if let Err(e) = cut_at(placement, cut, mode, svc) {
                failures.push(format!("{mode:?} {e}"));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cuts broke the contract, first: {:?}",
        failures.len(),
        2 * (total + 1),
        &failures[..failures.len().min(3)]
    );
    if svc.compression != 0 {
        let st = s.stats();
        assert!(
            st.chunks_written > 50 && st.chunk_stored_bytes < st.chunk_logical_bytes,
            "the script must write compressed chunks: {st:?}"
        );
        println!(
            "chunks: {} written ({} raw), {} raw chunks updated in place",
            st.chunks_written, st.chunks_stored_raw, st.raw_units_in_place
        );
    }
    println!("{placement} ({svc:?}): {} power cuts over {total} flash operations ({} GC victims, {} checkpoints), contract held at every one", 2 * (total + 1), gc.gc_victims, s.stats().checkpoints);
}

#[test]
fn power_cut_after_every_flash_operation_ossd() {
    sweep(Placement::Semantic, PLAIN);
}

#[test]
fn power_cut_after_every_flash_operation_one() {
    sweep(Placement::One, PLAIN);
}

#[test]
fn power_cut_after_every_flash_operation_split_atime() {
    sweep(Placement::SplitAtime, PLAIN);
}

/// The same sweep with every object compressed (zstd, chunks of 4 units): a chunk a cut tears
/// half-way through its new generation comes back whole, old or new; GC moves chunk units.
#[test]
fn power_cut_after_every_flash_operation_compressed() {
    sweep(
        Placement::Semantic,
        Services {
            encrypt: false,
            compression: 2,
            metadata_copies: 1,
        },
    );
}

/// Compressed (lz4) and encrypted: compress, then seal each unit of a chunk.
#[test]
fn power_cut_after_every_flash_operation_compressed_encrypted() {
    sweep(
        Placement::Semantic,
        Services {
            encrypt: true,
            compression: 1,
            metadata_copies: 1,
        },
    );
}

/// The same sweep with two copies of every metadata unit: a cut between a unit and its copy
/// leaves a unit nothing references yet, and recovery and GC see pairs, never a copy alone.
#[test]
fn power_cut_after_every_flash_operation_metadata_copies() {
    sweep(
        Placement::Semantic,
        Services {
            metadata_copies: 2,
            ..PLAIN
        },
    );
}

/// The same sweep with every object encrypted: sealed units rolled forward, copied by GC and
/// read back through every cut (their nonces' sequence numbers skip ahead at each reopen).
#[test]
fn power_cut_after_every_flash_operation_encrypted() {
    sweep(
        Placement::Semantic,
        Services {
            encrypt: true,
            compression: 0,
            metadata_copies: 1,
        },
    );
}

/// The check above can fail: a shrunken, grown, altered, vanished or resurrected object is
/// caught when no step since the flush touched it, and a length no state had when one did.
#[test]
fn the_recovery_check_catches_wrong_lengths_and_resurrections() {
    let flushed: BTreeMap<u64, Vec<u8>> = [(1, vec![7u8; 10_000])].into();
    let mut other = flushed.clone();
    other.insert(2, vec![1u8; 100]);
    // Object 1 untouched since the flush (only object 2 changed).
    let since = vec![other.clone()];
    let exact = vec![7u8; 10_000];
    assert!(check_object(1, Some(&exact), &flushed, &since).is_ok());
    assert!(check_object(1, Some(&vec![7u8; 8_192]), &flushed, &since).is_err());
    assert!(check_object(1, Some(&vec![7u8; 10_001]), &flushed, &since).is_err());
    let mut altered = exact.clone();
    altered[5] = 8;
    assert!(check_object(1, Some(&altered), &flushed, &since).is_err());
    assert!(check_object(1, None, &flushed, &since).is_err());
    // Object 3 was never made: an empty object 3 is a resurrection.
    assert!(check_object(3, Some(&Vec::new()), &flushed, &since).is_err());
    // Object 2 was made since the flush: gone, empty (the create landed, not the write) is not
    // a state it had, its full contents are.
    assert!(check_object(2, None, &flushed, &since).is_ok());
    assert!(check_object(2, Some(&vec![1u8; 100]), &flushed, &since).is_ok());
    assert!(check_object(2, Some(&vec![1u8; 50]), &flushed, &since).is_err());
    // Object 1 grown by a write since the flush: the old length, the new, or a unit boundary
    // between them; never shorter than both.
    let mut grown = flushed.clone();
    grown.insert(1, vec![7u8; 20_000]);
    let since = vec![grown];
    assert!(check_object(1, Some(&vec![7u8; 10_000]), &flushed, &since).is_ok());
    assert!(check_object(1, Some(&vec![7u8; 16_384]), &flushed, &since).is_ok());
    assert!(check_object(1, Some(&vec![7u8; 20_000]), &flushed, &since).is_ok());
    assert!(check_object(1, Some(&vec![7u8; 15_000]), &flushed, &since).is_err());
    assert!(check_object(1, Some(&vec![7u8; 8_192]), &flushed, &since).is_err());
}
