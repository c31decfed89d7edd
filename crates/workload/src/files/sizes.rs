//! POFTL-14 IV-C and IV-D: read and write latency by data size. For each size, files of that
//! size are written one call each, each followed by an fsync so the data reaches flash (the
//! latency measured is the write and the fsync together), then read back one call each. The
//! device is fresh, so GC plays no part ("enough free space in flash so as not to be affected
//! by the garbage collection", IV-C).

use serde::{Deserialize, Serialize};
use vfs::{FsError, ReadInto, ROOT};

use super::{Meter, Phases};

/// Sizes the paper's Fig. 2 and Fig. 3 span (4 KB to 256 KB), with their phase names.
pub const SIZES: [(u64, &str); 7] = [
    (4 << 10, "4k"),
    (8 << 10, "8k"),
    (16 << 10, "16k"),
    (32 << 10, "32k"),
    (64 << 10, "64k"),
    (128 << 10, "128k"),
    (256 << 10, "256k"),
];

/// The latency-by-size workload's parameters.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SizeLatency {
    /// Data sizes in bytes, each one of [`SIZES`].
    pub sizes: Vec<u64>,
    /// Files written and read at each size.
    pub files_per_size: u64,
}

impl Default for SizeLatency {
    fn default() -> Self {
        SizeLatency {
            sizes: vec![4 << 10, 16 << 10, 64 << 10, 256 << 10],
            files_per_size: 200,
        }
    }
}

/// One phase per size, named as in [`SIZES`]; each holds the write (with fsync) and read
/// latencies of that size.
pub fn run(m: &mut Meter, w: &SizeLatency) -> Result<Phases, FsError> {
    let mut phases = Vec::new();
    m.restart();
    for &size in &w.sizes {
        let name = SIZES
            .iter()
            .find(|(s, _)| *s == size)
            .map(|(_, n)| *n)
            .ok_or_else(|| {
                FsError::Invalid(format!(
                    "size {size} is not one of {:?}",
                    SIZES.map(|s| s.0)
                ))
            })?;
        let mut inos = Vec::new();
        for i in 0..w.files_per_size {
            let ino = m.create(ROOT, &format!("s{name}-{i}"))?;
            let issued = m.fs.now();
            let token = rand::Rng::gen::<u64>(&mut m.rng) | 1;
            m.fs.write(ino, 0, size, vfs::FileData::Token(token))?;
            m.fs.fsync(ino, true)?;
            let end = m.fs.now();
            m.stats.end_ns = m.stats.end_ns.max(end);
            m.stats
                .write_latency
                .saturating_record((end - issued).max(1));
            m.stats.writes += 1;
            m.stats.write_bytes += size;
            inos.push(ino);
        }
        for &ino in &inos {
            let issued = m.fs.now();
            let n = m.fs.read(ino, 0, ReadInto::Discard(size))?;
            let end = m.fs.now();
            m.stats.end_ns = m.stats.end_ns.max(end);
            m.stats
                .read_latency
                .saturating_record((end - issued).max(1));
            m.stats.reads += 1;
            m.stats.read_bytes += n;
        }
        phases.push((name, m.restart()));
    }
    Ok(phases)
}

#[cfg(test)]
mod tests {
    use vfs::oracle::MemFs;

    use super::*;
    use crate::files::tests::meter;

    #[test]
    fn one_phase_per_size() {
        let mut fs = MemFs::default();
        let w = SizeLatency {
            sizes: vec![4096, 65536],
            files_per_size: 3,
        };
        let p = run(&mut meter(&mut fs), &w).unwrap();
        assert_eq!(p.len(), 2);
        assert_eq!(
            (p[1].0, p[1].1.write_bytes, p[1].1.read_bytes),
            ("64k", 3 * 65536, 3 * 65536)
        );
        let bad = SizeLatency {
            sizes: vec![5000],
            files_per_size: 1,
        };
        assert!(run(&mut meter(&mut fs), &bad).is_err());
    }
}
