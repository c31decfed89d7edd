//! `ossd reliability`: OSCM-11 V-E (Table III) on the simulated NANDsim device, with the parity
//! counters the lab's generic metrics do not have, and a fault trial.
//!
//! For each file count, PostMark (V-D's parameters: read/append 5, 30,000 transactions, files
//! of 512 B to 16 KiB) runs on OFS over the object store (split+atime, inode embedding, the
//! small-object buffer) with and without one parity unit per group of 16 data units of every
//! object; a checkpoint at the end puts the parity still in memory on flash, so it is counted.
//! Then the fault trial: 64 objects of 4 to 256 KiB are written into each run's store, one
//! data unit per parity group (of every object with data units) is made unreadable (bit errors
//! past the ECC), and every object is read back whole: with parity each must read back exactly, without it each damaged object must
//! fail with an error. Wrong bytes are counted in both.

use std::path::PathBuf;

use anyhow::{anyhow, bail, Result};
use flash::fault::Faulty;
use flash::{preset, Flash, Nand};
use fml::FmlConfig;
use ofs::{Ofs, OfsConfig};
use osd::{Attr, AttrValue, ObjectStore, Oid, Osd, OsdConfig, OsdError, PartitionId, Placement};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use workload::files::postmark::PostMark;
use workload::files::Meter;

/// Arguments of `ossd reliability`.
#[derive(clap::Args)]
pub struct Args {
    /// PostMark file counts (Table III: 500, 750, 1000).
    #[arg(long, value_delimiter = ',', default_value = "500,750,1000")]
    pub files: Vec<u64>,
    /// PostMark transactions.
    #[arg(long, default_value_t = 30_000)]
    pub transactions: u64,
    /// Data units per parity group.
    #[arg(long, default_value_t = 16)]
    pub group: u8,
    /// Seed of the workload and of the fault draw.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Also write the table as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// One run of PostMark at one file count, with or without parity.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    /// PostMark files.
    pub files: u64,
    /// Parity units per group (0: none).
    pub reliability: u8,
    /// Flash pages read and programmed, the whole run (pool creation and transactions).
    pub page_reads: u64,
    /// Flash pages programmed.
    pub page_writes: u64,
    /// Parity units read, and data units read for parity (old contents for the delta update,
    /// groups recomputed).
    pub parity_reads: u64,
    /// Of `parity_reads`: the data units.
    pub parity_data_reads: u64,
    /// Parity units programmed.
    pub parity_writes: u64,
    /// Parity page I/Os over all page I/Os, percent.
    pub overhead_percent: f64,
    /// Virtual seconds of the run.
    pub seconds: f64,
    /// Fault trial: units made unreadable (one per parity group).
    pub units_failed: u64,
    /// Objects read back exactly.
    pub objects_exact: u64,
    /// Objects whose read failed with an uncorrectable or corrupted error.
    pub objects_failed: u64,
    /// Objects that read back wrong bytes (must be 0).
    pub objects_wrong: u64,
    /// Units rebuilt from parity during the reads.
    pub units_corrected: u64,
}

type Dev = Faulty<Nand>;

/// Runs the table and prints it.
pub fn run(args: Args) -> Result<()> {
    let mut rows = Vec::new();
    for &files in &args.files {
        for reliability in [1u8, 0] {
            let row = one(&args, files, reliability)?;
            eprintln!(
                "{files} files, reliability {reliability}: {} reads, {} writes",
                row.page_reads, row.page_writes
            );
            rows.push(row);
        }
    }
    print(&rows);
    if let Some(p) = &args.json {
        std::fs::write(p, serde_json::to_string_pretty(&rows)? + "\n")?;
        println!("wrote {}", p.display());
    }
    if let Some(r) = rows.iter().find(|r| r.objects_wrong > 0) {
        bail!(
            "{} files, reliability {}: {} objects read back wrong bytes",
            r.files,
            r.reliability,
            r.objects_wrong
        );
    }
    Ok(())
}

fn print(rows: &[Row]) {
    println!("OSCM-11 Table III (paper: parity under 10% of page I/Os; 500 files 93,633 reads 43,822 writes 2,437 parity reads 3,388 parity writes 16.50 s vs 15.25 s)");
    println!(
        "{:>6} {:>4} {:>11} {:>11} {:>8} {:>8} {:>8} {:>9} {:>8} | {:>6} {:>6} {:>6} {:>6} {:>9}",
        "files",
        "rel",
        "page reads",
        "page writes",
        "par rd",
        "(data)",
        "par wr",
        "overhead",
        "seconds",
        "failed",
        "exact",
        "errors",
        "wrong",
        "corrected"
    );
    for r in rows {
        println!(
            "{:>6} {:>4} {:>11} {:>11} {:>8} {:>8} {:>8} {:>8.2}% {:>8.3} | {:>6} {:>6} {:>6} {:>6} {:>9}",
            r.files,
            r.reliability,
            r.page_reads,
            r.page_writes,
            r.parity_reads,
            r.parity_data_reads,
            r.parity_writes,
            r.overhead_percent,
            r.seconds,
            r.units_failed,
            r.objects_exact,
            r.objects_failed,
            r.objects_wrong,
            r.units_corrected
        );
    }
}

fn one(args: &Args, files: u64, reliability: u8) -> Result<Row> {
    let device = preset("nandsim-128m").map_err(|e| anyhow!(e))?;
    let layout = flash::gang::Layout::new(&device);
    let cfg = OsdConfig {
        placement: Placement::SplitAtime,
        default_reliability: reliability,
        parity_group_units: args.group,
        fml: FmlConfig::for_blocks(layout.superblocks),
        ..OsdConfig::default()
    };
    let nand = Nand::in_memory(device).map_err(|e| anyhow!(e))?;
    let store = ObjectStore::format(Faulty::new(nand), cfg).map_err(|e| anyhow!(e))?;
    let ofs_cfg = OfsConfig {
        inode_objects: true,
        embed_inodes: true,
        dirent_objects: true,
        ..OfsConfig::default()
    };
    let mut fs = Ofs::format(store, ofs_cfg).map_err(|e| anyhow!("{e}"))?;
    let before = fs.store().fml().flash().stats();
    let start = fs.store().now();
    let p = PostMark {
        files,
        size_lo: 512,
        size_hi: 16 << 10,
        transactions: args.transactions,
        io_bytes: 4096,
        read_bias: 5,
        create_bias: 5,
        append_max: 16 << 10,
        ..PostMark::default()
    };
    {
        let mut m = Meter::new(&mut fs, ChaCha8Rng::seed_from_u64(args.seed));
        workload::files::postmark::run(&mut m, &p).map_err(|e| anyhow!("PostMark: {e}"))?;
    }
    let mut s = fs.unmount().map_err(|e| anyhow!("{e}"))?;
    // The parity still in memory goes to flash: counted with the run.
    s.checkpoint().map_err(|e| anyhow!(e))?;
    let after = s.fml().flash().stats();
    let st = s.stats();
    let page_reads = after.pages_read - before.pages_read;
    let page_writes = after.pages_programmed - before.pages_programmed;
    let parity_reads = st.parity_units_read + st.parity_data_reads;
    let parity_writes = st.parity_units_written;
    let mut row = Row {
        files,
        reliability,
        page_reads,
        page_writes,
        parity_reads,
        parity_data_reads: st.parity_data_reads,
        parity_writes,
        overhead_percent: 100.0 * (parity_reads + parity_writes) as f64
            / (page_reads + page_writes).max(1) as f64,
        seconds: (s.now() - start) as f64 / 1e9,
        units_failed: 0,
        objects_exact: 0,
        objects_failed: 0,
        objects_wrong: 0,
        units_corrected: 0,
    };
    fault_trial(&mut s, args, &mut row)?;
    Ok(row)
}

/// Every object of every partition with its bytes.
fn objects(s: &mut ObjectStore<Dev>) -> Result<Vec<(Oid, Vec<u8>)>> {
    let mut out = Vec::new();
    let (parts, _) = s.list_partitions(0, 1 << 20).map_err(|e| anyhow!(e))?;
    for p in parts {
        let mut token = 0;
        loop {
            let (ids, next) = s.list(p, token, 1024).map_err(|e| anyhow!(e))?;
            for object in ids {
                let oid = Oid {
                    partition: PartitionId(p.0),
                    object,
                };
                let bytes = read(s, oid).map_err(|e| anyhow!("{oid}: {e}"))?;
                out.push((oid, bytes));
            }
            match next {
                Some(t) => token = t,
                None => break,
            }
        }
    }
    Ok(out)
}

fn read(s: &mut ObjectStore<Dev>, oid: Oid) -> Result<Vec<u8>, OsdError> {
    let AttrValue::U64(len) = s.get_attr(oid, Attr::LogicalLength)? else {
        return Err(OsdError::Internal("length is not a number".into()));
    };
    let mut b = vec![0u8; len as usize];
    let n = s.read(oid, 0, &mut b)?;
    b.truncate(n);
    Ok(b)
}

/// One unreadable data unit per parity group of every object (whatever its own reliability,
/// the groups of `args.group` units), then every object read back.
fn fault_trial(s: &mut ObjectStore<Dev>, args: &Args, row: &mut Row) -> Result<()> {
    // PostMark removes its files at the end: the trial's objects are written now, 64 of
    // 4 KiB to 256 KiB, with the store's default reliability.
    let mut rng = ChaCha8Rng::seed_from_u64(args.seed ^ 0x7121);
    let p = s.create_partition(None).map_err(|e| anyhow!(e))?;
    for _ in 0..64 {
        let object = s.create(p, None).map_err(|e| anyhow!(e))?;
        let len = rng.gen_range(4096..256 << 10);
        let bytes: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
        s.write(
            Oid {
                partition: p,
                object,
            },
            0,
            &bytes,
        )
        .map_err(|e| anyhow!(e))?;
    }
    s.checkpoint().map_err(|e| anyhow!(e))?;
    let truth = objects(s)?;
    let unit = s.unit_bytes() as u64;
    let k = args.group as u64;
    let mut rng = ChaCha8Rng::seed_from_u64(args.seed ^ 0xF417);
    let layout = *s.fml().layout();
    let corrected = s.stats().units_corrected;
    for (oid, bytes) in &truth {
        let units = (bytes.len() as u64).div_ceil(unit);
        for g in 0..units.div_ceil(k) {
            let u = g * k + rng.gen_range(0..k.min(units - g * k));
            let mut v = Vec::new();
            if !s.peek_read_units(*oid, u * unit, 1, &mut v) {
                continue;
            }
            for vpa in v {
                for i in 0..layout.pages_per_unit() {
                    s.device_mut().flip_bits(layout.page(vpa, i), 1000);
                }
                row.units_failed += 1;
            }
        }
    }
    for (oid, want) in &truth {
        match read(s, *oid) {
            Ok(got) if &got == want => row.objects_exact += 1,
            Ok(_) => row.objects_wrong += 1,
            Err(OsdError::Uncorrectable { .. } | OsdError::Corrupted { .. }) => {
                row.objects_failed += 1
            }
            Err(e) => return Err(anyhow!("{oid}: {e}")),
        }
    }
    row.units_corrected = s.stats().units_corrected - corrected;
    Ok(())
}
