//! OSSD-13 VI-F FILEB, its modified Filebench videoserver: 64 files of 32 MiB; then four
//! threads each delete a randomly chosen file, fsync so the delete reaches the device, and
//! create a file of the same size; their write calls interleave. The paper does not say how
//! long it ran; here until `total_bytes` are written by the replacements.

use serde::{Deserialize, Serialize};
use vfs::{FsError, Ino, ROOT};

use super::aging::Aging;
use super::{Meter, Phases};

/// The videoserver workload's parameters (OSSD-13 VI-F FILEB; see the module docs).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct VideoServer {
    /// Files kept live (at least 2).
    pub files: u64,
    /// Size of every file, in bytes.
    pub file_bytes: u64,
    /// Threads replacing files at once (at most `files - 1` are used).
    pub threads: u64,
    /// The replacements run until they have written this much.
    pub total_bytes: u64,
    /// Write call size.
    pub io_bytes: u64,
    /// Hot/cold aging of the device before the files are created.
    pub aging: Aging,
}

impl Default for VideoServer {
    /// OSSD-13 VI-F: 64 files of 32 MiB, 4 threads; 4 GiB of replacements (ours).
    fn default() -> Self {
        VideoServer {
            files: 64,
            file_bytes: 32 << 20,
            threads: 4,
            total_bytes: 4 << 30,
            io_bytes: 128 << 10,
            aging: Aging::default(),
        }
    }
}

/// A file a thread is writing: its inode and how far it has come.
type Writing = Option<(Ino, u64)>;

/// Phases "aging" (when on), "create" and "replace" (transactions = files replaced).
pub fn run(m: &mut Meter, w: &VideoServer) -> Result<Phases, FsError> {
    if w.files < 2 || w.file_bytes == 0 || w.io_bytes == 0 {
        return Err(FsError::Invalid(
            "videoserver: files must be at least 2, file_bytes and io_bytes at least 1".into(),
        ));
    }
    let mut phases = w.aging.run(m)?;
    m.restart();
    let mut next = 0u64;
    // Live files not being written: (name number, inode).
    let mut idle: Vec<u64> = Vec::new();
    for _ in 0..w.files {
        let ino = m.create(ROOT, &name(next))?;
        m.write_chunks(ino, 0, w.file_bytes, w.io_bytes)?;
        idle.push(next);
        next += 1;
    }
    m.sync()?;
    phases.push(("create", m.restart()));
    // A thread replaces a file only while another stays live to be chosen next.
    let threads = w.threads.clamp(1, w.files - 1) as usize;
    let mut writing: Vec<(Writing, u64)> = vec![(None, 0); threads];
    let mut written = 0;
    while written < w.total_bytes {
        for (current, number) in writing.iter_mut() {
            if current.is_none() {
                let i = m.between(0, idle.len() as u64 - 1) as usize;
                let gone = idle.swap_remove(i);
                m.unlink(ROOT, &name(gone))?;
                m.sync()?;
                *number = next;
                next += 1;
                *current = Some((m.create(ROOT, &name(*number))?, 0));
            }
            let Some((ino, at)) = *current else {
                continue;
            };
            let n = w.io_bytes.min(w.file_bytes - at);
            m.write(ino, at, n)?;
            written += n;
            *current = (at + n < w.file_bytes).then_some((ino, at + n));
            if current.is_none() {
                idle.push(*number);
                m.stats.transactions += 1;
            }
        }
    }
    m.sync()?;
    phases.push(("replace", m.restart()));
    Ok(phases)
}

fn name(n: u64) -> String {
    format!("v{n:07}")
}

#[cfg(test)]
mod tests {
    use vfs::oracle::MemFs;
    use vfs::FileSystem;

    use super::*;
    use crate::files::tests::meter;

    #[test]
    fn threads_replace_files_of_the_same_size() {
        let mut fs = MemFs::default();
        let w = VideoServer {
            files: 8,
            file_bytes: 1 << 20,
            threads: 4,
            total_bytes: 12 << 20,
            io_bytes: 128 << 10,
            aging: Aging::default(),
        };
        let p = run(&mut meter(&mut fs), &w).unwrap();
        assert_eq!(p[0].0, "create");
        assert_eq!(p[0].1.write_bytes, 8 << 20);
        let r = &p[1].1;
        assert_eq!(r.write_bytes, 12 << 20);
        assert_eq!(r.transactions, 12);
        // Every thread deleted one file per file it started; 12 done, none left half-written.
        assert_eq!(r.deletes, r.creates);
        assert_eq!(fs.readdir(ROOT).unwrap().len(), 8);
        for (_, ino) in fs.readdir(ROOT).unwrap() {
            assert_eq!(fs.stat(ino).unwrap().size, 1 << 20);
        }
    }
}
