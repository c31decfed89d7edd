//! OSSD-13 VI-C multi-threaded write: fill the device with files, then rounds of deleting files
//! at random and several writers each writing files of their own at the same time (their calls
//! interleaved), until a total is written. Streams of different files mixed in one update block
//! are what makes GC copy on a block device; the object store gives large objects their own.

use serde::{Deserialize, Serialize};
use vfs::{FsError, Ino, ROOT};

use super::{Meter, Phases};

/// The multi-threaded write workload's parameters.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MultiStream {
    /// Bytes of files written before the rounds (whole files of `file_bytes`).
    pub fill_bytes: u64,
    /// Deleted (whole files, at random) before each round; the round writes as much.
    pub round_bytes: u64,
    /// Size of every file, in bytes.
    pub file_bytes: u64,
    /// Writers in a round, each writing files of its own (at most the files in a round).
    pub threads: u64,
    /// Rounds continue until this much is written (counting the fill).
    pub total_bytes: u64,
    /// Write call size, in bytes.
    pub io_bytes: u64,
}

impl Default for MultiStream {
    /// OSSD-13 VI-C: fill 3.2 GiB, rounds of 800 MiB, 25 MiB files, 4 threads, 24 GiB.
    fn default() -> Self {
        MultiStream {
            fill_bytes: 3200 << 20,
            round_bytes: 800 << 20,
            file_bytes: 25 << 20,
            threads: 4,
            total_bytes: 24 << 30,
            io_bytes: 128 << 10,
        }
    }
}

struct Files {
    live: Vec<(String, Ino)>,
    next: u64,
}

impl Files {
    fn create(&mut self, m: &mut Meter) -> Result<Ino, FsError> {
        let name = format!("m{:07}", self.next);
        self.next += 1;
        let ino = m.create(ROOT, &name)?;
        self.live.push((name, ino));
        Ok(ino)
    }
}

/// Phases "fill" and "rounds".
pub fn run(m: &mut Meter, w: &MultiStream) -> Result<Phases, FsError> {
    let mut files = Files {
        live: Vec::new(),
        next: 0,
    };
    let per_file = w.file_bytes.max(1);
    for _ in 0..w.fill_bytes / per_file {
        let ino = files.create(m)?;
        m.write_chunks(ino, 0, per_file, w.io_bytes)?;
    }
    m.sync()?;
    let fill = m.restart();
    let mut written = fill.write_bytes;
    while written < w.total_bytes {
        let mut freed = 0;
        while freed < w.round_bytes && !files.live.is_empty() {
            let i = m.between(0, files.live.len() as u64 - 1) as usize;
            let (name, _) = files.live.swap_remove(i);
            m.unlink(ROOT, &name)?;
            freed += per_file;
        }
        written += round(m, w, &mut files)?;
        m.stats.transactions += 1;
    }
    m.sync()?;
    Ok(vec![("fill", fill), ("rounds", m.restart())])
}

/// The writers of one round, one call each in turn; returns the bytes written.
fn round(m: &mut Meter, w: &MultiStream, files: &mut Files) -> Result<u64, FsError> {
    let files_per_round = (w.round_bytes / w.file_bytes.max(1)).max(1);
    let threads = w.threads.clamp(1, files_per_round);
    // Each writer's files, and where it is in its current one.
    let mut queue: Vec<Vec<()>> = vec![Vec::new(); threads as usize];
    for i in 0..files_per_round {
        queue[(i % threads) as usize].push(());
    }
    let mut current: Vec<Option<(Ino, u64)>> = vec![None; threads as usize];
    let mut written = 0;
    loop {
        let mut active = false;
        for t in 0..threads as usize {
            if current[t].is_none() && queue[t].pop().is_some() {
                current[t] = Some((files.create(m)?, 0));
            }
            let Some((ino, at)) = current[t] else {
                continue;
            };
            active = true;
            let n = w.io_bytes.min(w.file_bytes - at);
            m.write(ino, at, n)?;
            written += n;
            current[t] = (at + n < w.file_bytes).then_some((ino, at + n));
        }
        if !active {
            return Ok(written);
        }
    }
}

#[cfg(test)]
mod tests {
    use vfs::oracle::MemFs;
    use vfs::FileSystem;

    use super::*;
    use crate::files::tests::meter;

    #[test]
    fn rounds_replace_what_they_delete() {
        let mut fs = MemFs::default();
        let w = MultiStream {
            fill_bytes: 40 << 20,
            round_bytes: 10 << 20,
            file_bytes: 1 << 20,
            threads: 4,
            total_bytes: 100 << 20,
            io_bytes: 128 << 10,
        };
        let p = run(&mut meter(&mut fs), &w).unwrap();
        assert_eq!(p[0].1.write_bytes, 40 << 20);
        assert_eq!(p[1].1.write_bytes, 60 << 20);
        assert_eq!(p[1].1.transactions, 6);
        assert_eq!(fs.readdir(ROOT).unwrap().len(), 40);
    }
}
