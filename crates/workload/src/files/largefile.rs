//! Seltzer's largefile benchmark, as OSCM-11 V-C runs it: one large file written sequentially,
//! read sequentially, rewritten at random offsets and read at random offsets, in calls of one
//! size.

use rand::seq::SliceRandom;
use serde::{Deserialize, Serialize};
use vfs::{FsError, ROOT};

use super::{Meter, Phases};

/// The largefile benchmark's parameters (OSCM-11 V-C; see the module docs).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LargeFile {
    /// Size of the file, in bytes.
    pub file_bytes: u64,
    /// Size of every read and write call (one chunk), in bytes.
    pub io_bytes: u64,
}

impl Default for LargeFile {
    /// A 64 MiB file in 8 KiB calls, on the 128 MiB NANDsim of OSCM-11.
    fn default() -> Self {
        LargeFile {
            file_bytes: 64 << 20,
            io_bytes: 8 << 10,
        }
    }
}

/// Phases "sequential write", "sequential read", "random write", "random read"; each random
/// phase touches every chunk once, in a shuffled order.
pub fn run(m: &mut Meter, l: &LargeFile) -> Result<Phases, FsError> {
    let f = m.create(ROOT, "large")?;
    m.restart();
    m.write_chunks(f, 0, l.file_bytes, l.io_bytes)?;
    m.sync()?;
    let sw = m.restart();
    m.read_all(f, l.io_bytes)?;
    let sr = m.restart();
    let mut chunks: Vec<u64> = (0..l.file_bytes.div_ceil(l.io_bytes)).collect();
    chunks.shuffle(&mut m.rng);
    for &c in &chunks {
        let at = c * l.io_bytes;
        m.write(f, at, l.io_bytes.min(l.file_bytes - at))?;
    }
    m.sync()?;
    let rw = m.restart();
    chunks.shuffle(&mut m.rng);
    for &c in &chunks {
        let at = c * l.io_bytes;
        m.read(f, at, l.io_bytes.min(l.file_bytes - at))?;
    }
    let rr = m.restart();
    Ok(vec![
        ("sequential write", sw),
        ("sequential read", sr),
        ("random write", rw),
        ("random read", rr),
    ])
}

#[cfg(test)]
mod tests {
    use vfs::oracle::MemFs;

    use super::*;
    use crate::files::tests::meter;

    #[test]
    fn every_chunk_once_per_phase() {
        let mut fs = MemFs::default();
        let l = LargeFile {
            file_bytes: 100_000,
            io_bytes: 8192,
        };
        let p = run(&mut meter(&mut fs), &l).unwrap();
        for (name, s) in &p {
            assert_eq!(s.write_bytes + s.read_bytes, 100_000, "{name}");
        }
        assert_eq!(p[2].1.writes, 13);
    }
}
