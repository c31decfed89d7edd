//! OSSD-13 VI-D: many small files, each transaction rewriting a whole file, most of them on a
//! few hot files; the measure is how much GC copies.

use serde::{Deserialize, Serialize};
use vfs::{FsError, ROOT};

use super::{Meter, Phases};

/// The hot/cold files workload's parameters.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HotColdFiles {
    /// Files created by the initial fill.
    pub files: u64,
    /// Size of every file, in bytes; a rewrite writes it whole.
    pub file_bytes: u64,
    /// Share of transactions on the hot files (0.9 in the paper).
    pub hot_access: f64,
    /// Share of the files that are hot (0.1 in the paper).
    pub hot_files: f64,
    /// Rewrites continue until this much is written (counting the initial fill).
    pub total_bytes: u64,
    /// Write call size (a whole file in one call when at least the file size).
    pub io_bytes: u64,
    /// fdatasync after each rewrite.
    pub sync_each: bool,
}

impl Default for HotColdFiles {
    /// OSSD-13 VI-D: 8,000 files of 128 KiB, 90% of rewrites on 10% of them, 8 GiB written.
    fn default() -> Self {
        HotColdFiles {
            files: 8_000,
            file_bytes: 128 << 10,
            hot_access: 0.9,
            hot_files: 0.1,
            total_bytes: 8 << 30,
            io_bytes: 128 << 10,
            sync_each: false,
        }
    }
}

/// Runs the benchmark; phases "fill" and "rewrite".
pub fn run(m: &mut Meter, h: &HotColdFiles) -> Result<Phases, FsError> {
    let inos = (0..h.files)
        .map(|i| {
            let ino = m.create(ROOT, &format!("f{i:06}"))?;
            m.write_chunks(ino, 0, h.file_bytes, h.io_bytes)?;
            Ok(ino)
        })
        .collect::<Result<Vec<_>, FsError>>()?;
    m.sync()?;
    let fill = m.restart();
    let hot = ((h.files as f64 * h.hot_files).round() as u64).clamp(1, h.files);
    let mut written = fill.write_bytes;
    while written < h.total_bytes {
        let on_hot = m.between(0, 1_000_000) as f64 / 1e6 < h.hot_access;
        let i = if on_hot || hot == h.files {
            m.between(0, hot - 1)
        } else {
            m.between(hot, h.files - 1)
        };
        m.write_chunks(inos[i as usize], 0, h.file_bytes, h.io_bytes)?;
        if h.sync_each {
            m.fsync(inos[i as usize], true)?;
        }
        m.stats.transactions += 1;
        written += h.file_bytes;
    }
    m.sync()?;
    Ok(vec![("fill", fill), ("rewrite", m.restart())])
}

#[cfg(test)]
mod tests {
    use vfs::oracle::MemFs;

    use super::*;
    use crate::files::tests::meter;

    #[test]
    fn rewrites_until_the_total_mostly_on_hot_files() {
        let mut fs = MemFs::default();
        let h = HotColdFiles {
            files: 100,
            file_bytes: 4096,
            total_bytes: 100 * 4096 * 11,
            ..HotColdFiles::default()
        };
        let phases = run(&mut meter(&mut fs), &h).unwrap();
        assert_eq!(phases[0].1.write_bytes, 100 * 4096);
        assert_eq!(phases[1].1.transactions, 1000);
        assert_eq!(phases[1].1.write_bytes, 1000 * 4096);
    }
}
