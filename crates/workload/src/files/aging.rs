//! Aging before a benchmark (OSSD-13 VI-F): "the device is aged by running the hot/cold
//! benchmark shown in Section VI-D ... the total 85% of the disk space (3.4GB) has been filled".
//! Files of the hot/cold benchmark fill `bytes` of the file system, then whole-file rewrites,
//! most of them on the hot files, scatter live and dead pages over the blocks until
//! `rewrite_bytes` more are written. The files stay (in their own directory), so the benchmark
//! after runs on a nearly full, fragmented device and its writes make GC copy.
//!
//! The paper does not say how long it ran the hot/cold benchmark; `rewrite_bytes` defaults to
//! one pass over the filled bytes.

use serde::{Deserialize, Serialize};
use vfs::{FsError, ROOT};

use super::{Meter, Phases};

/// How to age the file system before a benchmark: a hot/cold fill, then hot-skewed whole-file
/// rewrites (off by default).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Aging {
    /// Bytes of hot/cold files left on the device (0: no aging). OSSD-13: 3.4 GiB, 85% of
    /// its 4 GiB RawSSD.
    pub bytes: u64,
    /// Rewrites after the fill, in bytes.
    pub rewrite_bytes: u64,
    /// Size of each aging file, in bytes (default 128 KiB, as OSSD-13 VI-D).
    pub file_bytes: u64,
    /// Share of rewrites on the hot files (0.9, OSSD-13 VI-D).
    pub hot_access: f64,
    /// Share of the files that are hot (0.1, OSSD-13 VI-D).
    pub hot_files: f64,
}

impl Default for Aging {
    /// No aging; an experiment sets `bytes` (and may set the rest).
    fn default() -> Self {
        Aging {
            bytes: 0,
            rewrite_bytes: 0,
            file_bytes: 128 << 10,
            hot_access: 0.9,
            hot_files: 0.1,
        }
    }
}

impl Aging {
    /// OSSD-13 VI-F: 85% of the 4 GiB device, rewritten once.
    pub fn ossd13() -> Aging {
        let bytes = 3482 << 20;
        Aging {
            bytes,
            rewrite_bytes: bytes,
            ..Aging::default()
        }
    }

    /// Whether aging runs (`bytes` above zero).
    pub fn is_on(&self) -> bool {
        self.bytes > 0
    }

    /// Shrinks the filled and rewritten bytes by `s` (the device shrinks alike).
    pub fn scale(&mut self, s: f64) {
        if self.is_on() {
            self.bytes = ((self.bytes as f64 * s) as u64).max(self.file_bytes);
            self.rewrite_bytes = (self.rewrite_bytes as f64 * s) as u64;
        }
    }

    /// Runs the aging (phase "aging"), or nothing when it is off.
    pub fn run(&self, m: &mut Meter) -> Result<Phases, FsError> {
        if !self.is_on() {
            return Ok(Vec::new());
        }
        if self.file_bytes == 0 || !(0.0..=1.0).contains(&self.hot_access) {
            return Err(FsError::Invalid(
                "aging: file_bytes must be at least 1 and hot_access within 0..1".into(),
            ));
        }
        let dir = m.mkdir(ROOT, "aging")?;
        let files = (self.bytes / self.file_bytes).max(1);
        let mut inos = Vec::with_capacity(files as usize);
        for i in 0..files {
            let ino = m.create(dir, &format!("a{i:07}"))?;
            m.write_chunks(ino, 0, self.file_bytes, self.file_bytes)?;
            inos.push(ino);
        }
        let hot = ((files as f64 * self.hot_files).round() as u64).clamp(1, files);
        let mut written = 0;
        while written < self.rewrite_bytes {
            let on_hot = m.between(0, 999_999) as f64 / 1e6 < self.hot_access;
            let i = if on_hot || hot == files {
                m.between(0, hot - 1)
            } else {
                m.between(hot, files - 1)
            };
            m.write_chunks(inos[i as usize], 0, self.file_bytes, self.file_bytes)?;
            written += self.file_bytes;
        }
        m.sync()?;
        Ok(vec![("aging", m.restart())])
    }
}

#[cfg(test)]
mod tests {
    use vfs::oracle::MemFs;
    use vfs::FileSystem;

    use super::*;
    use crate::files::tests::meter;

    #[test]
    fn fills_then_rewrites_and_keeps_its_files() {
        let mut fs = MemFs::default();
        let a = Aging {
            bytes: 40 << 12,
            rewrite_bytes: 100 << 12,
            file_bytes: 4096,
            ..Aging::default()
        };
        let p = a.run(&mut meter(&mut fs)).unwrap();
        assert_eq!(p.len(), 1);
        assert_eq!(p[0].1.write_bytes, 140 << 12);
        let dir = fs.lookup(ROOT, "aging").unwrap().unwrap();
        assert_eq!(fs.readdir(dir).unwrap().len(), 40);
        assert!(Aging::default()
            .run(&mut meter(&mut fs))
            .unwrap()
            .is_empty());
    }
}
