//! OSSD-13 VI-C torrent benchmark: several downloads at once, as µTorrent writes them. Each
//! download first preallocates its file with a sequential dummy write of the whole size, then
//! fills it piece by piece in random order, its pieces interleaved with the other downloads'.
//! When a download completes while the files take more than `usage_limit_bytes`, randomly
//! chosen finished files are deleted until they do not (the paper deletes "a file"; with 8
//! downloads in flight one deletion per completion would not hold the usage); a new download
//! starts in its place, keeping the number of concurrent downloads constant, until
//! `total_bytes` have been written (dummy writes count).
//!
//! The paper replays traces it captured; ours generates the same pattern. File sizes are
//! uniform within a quarter of the mean either side (the paper gives only the 400 MB mean), pieces are
//! 256 KiB (a common BitTorrent piece size; not given) and written with one call each.

use rand::seq::SliceRandom;
use serde::{Deserialize, Serialize};
use vfs::{FsError, Ino, ROOT};

use super::{Meter, Phases};

/// The torrent workload's parameters (OSSD-13 VI-C; see the module docs).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Torrent {
    /// Concurrent downloads (2, 4 or 8 in the paper).
    pub downloads: u64,
    /// Mean file size; sizes are uniform in [3 mean/4, 5 mean/4], whole pieces.
    pub file_bytes_mean: u64,
    /// Size of a piece, in bytes: each is written with one call.
    pub piece_bytes: u64,
    /// Preallocation write call size.
    pub io_bytes: u64,
    /// A finished file is deleted when a download completes while the files hold more.
    pub usage_limit_bytes: u64,
    /// Bytes written (dummy and pieces) before the run stops.
    pub total_bytes: u64,
}

impl Default for Torrent {
    /// OSSD-13 VI-C: 4 downloads of 400 MiB on average, delete above 3.2 GiB, until 24 GiB.
    fn default() -> Self {
        Torrent {
            downloads: 4,
            file_bytes_mean: 400 << 20,
            piece_bytes: 256 << 10,
            io_bytes: 128 << 10,
            usage_limit_bytes: 3200 << 20,
            total_bytes: 24 << 30,
        }
    }
}

/// A download under way: its file and the pieces still to come, in the order they will arrive.
struct Download {
    number: u64,
    ino: Ino,
    bytes: u64,
    pieces: Vec<u64>,
}

struct Swarm<'w> {
    w: &'w Torrent,
    next: u64,
    /// Finished files: (number, bytes).
    finished: Vec<(u64, u64)>,
    /// Bytes of every live file, finished or not.
    usage: u64,
    written: u64,
}

impl Swarm<'_> {
    /// Creates the next file, preallocates it and shuffles its pieces.
    fn start(&mut self, m: &mut Meter) -> Result<Download, FsError> {
        let w = self.w;
        let mean_pieces = (w.file_bytes_mean / w.piece_bytes).max(1);
        let lo = (mean_pieces - mean_pieces / 4).max(1);
        let n = m.between(lo, mean_pieces + mean_pieces / 4);
        let bytes = n * w.piece_bytes;
        let number = self.next;
        self.next += 1;
        let ino = m.create(ROOT, &name(number))?;
        m.write_chunks(ino, 0, bytes, w.io_bytes)?;
        self.written += bytes;
        self.usage += bytes;
        let mut pieces: Vec<u64> = (0..n).collect();
        pieces.shuffle(&mut m.rng);
        Ok(Download {
            number,
            ino,
            bytes,
            pieces,
        })
    }

    /// A download finished: delete random finished files while over the limit.
    fn finish(&mut self, m: &mut Meter, d: &Download) -> Result<(), FsError> {
        // "A file randomly selected from the already downloaded files": this one included.
        self.finished.push((d.number, d.bytes));
        while self.usage > self.w.usage_limit_bytes && !self.finished.is_empty() {
            let i = m.between(0, self.finished.len() as u64 - 1) as usize;
            let (gone, bytes) = self.finished.swap_remove(i);
            m.unlink(ROOT, &name(gone))?;
            self.usage -= bytes;
        }
        m.stats.transactions += 1;
        Ok(())
    }
}

/// Phase "downloads" (transactions = files downloaded).
pub fn run(m: &mut Meter, w: &Torrent) -> Result<Phases, FsError> {
    if w.downloads == 0 || w.piece_bytes == 0 || w.io_bytes == 0 || w.file_bytes_mean == 0 {
        return Err(FsError::Invalid(
            "torrent: downloads, file_bytes_mean, piece_bytes and io_bytes must be at least 1"
                .into(),
        ));
    }
    let mut swarm = Swarm {
        w,
        next: 0,
        finished: Vec::new(),
        usage: 0,
        written: 0,
    };
    let mut active = Vec::new();
    for _ in 0..w.downloads {
        active.push(swarm.start(m)?);
    }
    while swarm.written < w.total_bytes {
        for d in active.iter_mut() {
            let Some(piece) = d.pieces.pop() else {
                continue;
            };
            m.write(d.ino, piece * w.piece_bytes, w.piece_bytes)?;
            swarm.written += w.piece_bytes;
            if d.pieces.is_empty() {
                swarm.finish(m, d)?;
                if swarm.written < w.total_bytes {
                    *d = swarm.start(m)?;
                }
            }
        }
    }
    m.sync()?;
    Ok(vec![("downloads", m.restart())])
}

fn name(n: u64) -> String {
    format!("t{n:07}")
}

#[cfg(test)]
mod tests {
    use vfs::oracle::MemFs;
    use vfs::FileSystem;

    use super::*;
    use crate::files::tests::meter;

    /// The size of every file left in the root.
    fn sizes(fs: &mut MemFs) -> Vec<u64> {
        fs.readdir(ROOT)
            .unwrap()
            .into_iter()
            .map(|(_, ino)| fs.stat(ino).unwrap().size)
            .collect()
    }

    fn small() -> Torrent {
        Torrent {
            downloads: 3,
            file_bytes_mean: 1 << 20,
            piece_bytes: 64 << 10,
            io_bytes: 128 << 10,
            usage_limit_bytes: 6 << 20,
            total_bytes: 40 << 20,
        }
    }

    #[test]
    fn downloads_stay_under_the_limit_and_complete_whole_files() {
        let mut fs = MemFs::default();
        let w = small();
        let p = run(&mut meter(&mut fs), &w).unwrap();
        let s = &p[0].1;
        assert!(s.write_bytes >= w.total_bytes);
        assert!(s.transactions >= 10, "{} files downloaded", s.transactions);
        // Downloads still under way at the end were created but not finished.
        assert!(s.creates - s.transactions <= w.downloads);
        assert_eq!(
            fs.readdir(ROOT).unwrap().len() as u64,
            s.creates - s.deletes
        );
        assert!(s.deletes > 0);
        let sizes = sizes(&mut fs);
        let usage: u64 = sizes.iter().sum();
        // Within the limit, but for the downloads started since the last completion (one each
        // at most, 1.25x the mean).
        assert!(usage <= w.usage_limit_bytes + w.downloads * 5 * w.file_bytes_mean / 4);
        for s in sizes {
            assert_eq!(s % w.piece_bytes, 0);
            assert!((3 * w.file_bytes_mean / 4..=5 * w.file_bytes_mean / 4).contains(&s));
        }
    }

    #[test]
    fn files_are_preallocated_then_written_one_call_per_piece() {
        let mut fs = MemFs::default();
        let w = Torrent {
            downloads: 2,
            usage_limit_bytes: u64::MAX,
            total_bytes: 8 << 20,
            ..small()
        };
        let p = run(&mut meter(&mut fs), &w).unwrap();
        let s = &p[0].1;
        assert_eq!(s.deletes, 0);
        let sizes = sizes(&mut fs);
        assert_eq!(sizes.len() as u64, s.creates);
        let preallocated: u64 = sizes.iter().sum();
        let pieces = s.write_bytes - preallocated;
        assert_eq!(pieces % w.piece_bytes, 0);
        let calls: u64 = sizes.iter().map(|b| b.div_ceil(w.io_bytes)).sum();
        assert_eq!(s.writes, calls + pieces / w.piece_bytes);
        assert!(s.transactions >= 1);
    }
}
