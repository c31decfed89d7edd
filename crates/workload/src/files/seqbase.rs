//! OSSD-13 VI-B base performance: one large file written sequentially (buffered, or with an
//! fdatasync after every call), then read back sequentially.

use serde::{Deserialize, Serialize};
use vfs::{FsError, ROOT};

use super::{Meter, Phases};

/// The base sequential test's parameters (OSSD-13 VI-B; see the module docs).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SeqBase {
    /// Size of the file, in bytes.
    pub file_bytes: u64,
    /// Size of every read and write call, in bytes.
    pub io_bytes: u64,
}

impl Default for SeqBase {
    /// OSSD-13 VI-B: 1 GiB in 128 KiB calls.
    fn default() -> Self {
        SeqBase {
            file_bytes: 1 << 30,
            io_bytes: 128 << 10,
        }
    }
}

/// Phases "buffered write", "sequential read", "dsync write" (a second file).
pub fn run(m: &mut Meter, s: &SeqBase) -> Result<Phases, FsError> {
    let f = m.create(ROOT, "seq")?;
    m.restart();
    m.write_chunks(f, 0, s.file_bytes, s.io_bytes)?;
    m.sync()?;
    let write = m.restart();
    m.read_all(f, s.io_bytes)?;
    let read = m.restart();
    m.unlink(ROOT, "seq")?;
    m.sync()?;
    let g = m.create(ROOT, "dsync")?;
    m.restart();
    let mut at = 0;
    while at < s.file_bytes {
        let n = s.io_bytes.min(s.file_bytes - at);
        m.write(g, at, n)?;
        m.fsync(g, true)?;
        at += n;
    }
    let dsync = m.restart();
    Ok(vec![
        ("buffered write", write),
        ("sequential read", read),
        ("dsync write", dsync),
    ])
}

#[cfg(test)]
mod tests {
    use vfs::oracle::MemFs;

    use super::*;
    use crate::files::tests::meter;

    #[test]
    fn three_phases_move_the_whole_file() {
        let mut fs = MemFs::default();
        let s = SeqBase {
            file_bytes: 1 << 20,
            io_bytes: 128 << 10,
        };
        let p = run(&mut meter(&mut fs), &s).unwrap();
        assert_eq!(p[0].1.write_bytes, 1 << 20);
        assert_eq!(p[1].1.read_bytes, 1 << 20);
        assert_eq!((p[2].1.write_bytes, p[2].1.syncs), (1 << 20, 8));
    }
}
