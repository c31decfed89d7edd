//! Fuzz entry points: each takes arbitrary bytes and must return (any error is fine) without
//! panicking. `fuzz/` runs them under cargo-fuzz; `tests/fuzz_inputs.rs` runs them over seeded
//! random inputs on stable, so `cargo test` covers them too.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use flash::{BlockAddr, Flash, Nand, PageAddr, Payload, ProgramOp};
use fml::FmlConfig;
use ftl::{Ftl, FtlConfig};
use osd::{ObjectStore, Osd, OsdConfig, PartitionId};

/// The device images are built on: small, so an input covers a good share of it.
fn device() -> flash::DeviceConfig {
    torture::sweep::sweep_device()
}

/// Programs pages of a fresh device from `data`, as a damaged or hostile image would hold them:
/// the first two bytes say how many pages, then each page takes 16 bytes of OOB and 64 bytes of
/// payload (zero-padded), in block order, so records and page headers are under the input's
/// control.
#[expect(
    clippy::expect_used,
    reason = "the fuzz harness's own fixed device config is valid; a panic here is a harness bug"
)]
pub fn image_from_bytes(data: &[u8]) -> Nand {
    let cfg = device();
    let g = cfg.geometry;
    let mut nand = Nand::in_memory(cfg).expect("the sweep device is valid");
    let (count, mut rest) = match data {
        [a, b, rest @ ..] => (u16::from_le_bytes([*a, *b]) as u64, rest),
        _ => (0, data),
    };
    let pages = count.min(g.pages());
    let page_bytes = g.page_size_bytes as usize;
    let mut payload = vec![0u8; page_bytes];
    for i in 0..pages {
        let block = (i / g.pages_per_block as u64) as u32;
        let page = (i % g.pages_per_block as u64) as u32;
        let BlockAddr { die, plane, block } = g.block_at(block);
        let addr = PageAddr {
            die,
            plane,
            block,
            page,
        };
        let (oob, r) = rest.split_at(rest.len().min(16));
        let (head, r) = r.split_at(r.len().min(64));
        rest = r;
        payload.fill(0);
        payload[..head.len()].copy_from_slice(head);
        let op = ProgramOp {
            addr,
            payload: Payload::Bytes(&payload),
            oob,
        };
        // A page the NAND refuses (a bad block) is simply left out.
        let _ = nand.program(0, &[op]);
    }
    nand
}

/// Opens an image built from `data` as an object store and as an FTL; whichever opens is
/// checked and read. Errors are the expected outcome; a panic is the bug.
pub fn open_image(data: &[u8]) {
    let blocks = device().gang.superblocks(&device().geometry);
    let osd_cfg = OsdConfig {
        buffer_bytes: 0,
        checkpoint_units: 24,
        fml: FmlConfig::for_blocks(blocks),
        ..OsdConfig::default()
    };
    if let Ok(mut s) = ObjectStore::open(image_from_bytes(data), osd_cfg) {
        let _ = s.fsck();
        if let Ok((parts, _)) = s.list_partitions(0, 8) {
            for p in parts {
                let _ = list_and_read(&mut s, p);
            }
        }
    }
    let ftl_cfg = FtlConfig {
        fml: FmlConfig::for_blocks(blocks),
        buffer_bytes: 0,
        ..FtlConfig::default()
    };
    if let Ok(mut f) = Ftl::open(image_from_bytes(data), ftl_cfg) {
        let _ = f.check();
        let mut buf = vec![0u8; f.unit_bytes()];
        let units = f.capacity_bytes() / f.unit_bytes() as u64;
        for u in 0..units.min(64) {
            let _ = f.read(
                0,
                u * f.unit_bytes() as u64,
                f.unit_bytes() as u64,
                ftl::ReadOut::Bytes(&mut buf),
            );
        }
    }
}

fn list_and_read(s: &mut ObjectStore<Nand>, p: PartitionId) -> Result<(), osd::OsdError> {
    let (objects, _) = s.list(p, 0, 8)?;
    let mut buf = vec![0u8; 8192];
    for o in objects {
        let oid = osd::Oid::new(p.0, o.0);
        let _ = s.get_attr(oid, osd::Attr::LogicalLength);
        let _ = s.read(oid, 0, &mut buf);
    }
    Ok(())
}

/// Parses `data` as a run settings TOML file.
pub fn parse_config(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = crate::settings::build_text(Some((text, "fuzz.toml")), &[]);
    }
}

/// Parses `data` as `--set` arguments, one per line.
pub fn parse_sets(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let sets: Vec<String> = text.lines().map(str::to_string).collect();
    let _ = crate::settings::build_text(None, &sets);
}

/// Reads `data` as a trace file in every format (through a temporary file: the readers stream
/// from files), consuming at most a few thousand requests.
pub fn parse_trace(data: &[u8]) {
    static N: AtomicU64 = AtomicU64::new(0);
    let path: PathBuf = std::env::temp_dir().join(format!(
        "ossd-fuzz-trace-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    if std::fs::write(&path, data).is_err() {
        return;
    }
    for format in workload::trace::TraceFormat::ALL {
        if let Ok(reader) = workload::trace::TraceReader::open(&path, format) {
            for r in reader.take(4096) {
                let _ = r;
            }
        }
    }
    let _ = std::fs::remove_file(&path);
}
