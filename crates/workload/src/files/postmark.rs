//! PostMark (Katcher, NetApp TR-3022), as OSSD-13 VI-F and OSCM-11 V-A/V-D run it: a pool of
//! files of random sizes, then transactions each made of a create or a delete and a read (of the
//! whole file) or an append (of a random amount below the size bound, none once a file is at
//! it), then every file deleted.

use serde::{Deserialize, Serialize};
use vfs::{FsError, Ino, ROOT};

use super::aging::Aging;
use super::{Meter, Phases};

/// PostMark's parameters (OSSD-13 VI-F, OSCM-11 V-A/V-D; see the module docs).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PostMark {
    /// Files in the initial pool.
    pub files: u64,
    /// Smallest file size, in bytes (files are uniform in `size_lo..=size_hi`).
    pub size_lo: u64,
    /// Largest file size, in bytes; appends stop there.
    pub size_hi: u64,
    /// Transactions run after the pool is created.
    pub transactions: u64,
    /// Read and write call size.
    pub io_bytes: u64,
    /// Reads out of 10 read-or-append halves (PostMark's read bias; "read/append 8" is 8).
    pub read_bias: u32,
    /// Creates out of 10 create-or-delete halves.
    pub create_bias: u32,
    /// Subdirectories the files are spread over (0: all in the root).
    pub subdirs: u64,
    /// fsync each file after writing it (a mail server's habit; PostMark itself does not).
    pub fsync: bool,
    /// Largest append (OSSD-13 VI-F: up to 16 KiB; PostMark itself: up to the size bound).
    pub append_max: u64,
    /// Whether a transaction also creates or deletes a file; false is PostMark's create bias
    /// -1 (OSSD-13 VI-F POST2: only reads and appends, no directory updates).
    pub create_delete: bool,
    /// Hot/cold aging of the device before the pool is created (OSSD-13 VI-F).
    pub aging: Aging,
}

impl Default for PostMark {
    /// OSSD-13 VI-F POST1.
    fn default() -> Self {
        PostMark {
            files: 2_000,
            size_lo: 16 << 10,
            size_hi: 256 << 10,
            transactions: 20_000,
            io_bytes: 16 << 10,
            read_bias: 5,
            create_bias: 5,
            subdirs: 0,
            fsync: false,
            append_max: 16 << 10,
            create_delete: true,
            aging: Aging::default(),
        }
    }
}

struct Pool {
    dirs: Vec<Ino>,
    /// Live files: (directory index, name number, inode, size).
    files: Vec<(usize, u64, Ino, u64)>,
    next_name: u64,
}

fn name(n: u64) -> String {
    format!("pm{n:08}")
}

impl Pool {
    fn create(&mut self, m: &mut Meter, p: &PostMark) -> Result<(), FsError> {
        let d = (self.next_name % self.dirs.len() as u64) as usize;
        let n = self.next_name;
        self.next_name += 1;
        let ino = m.create(self.dirs[d], &name(n))?;
        let size = m.between(p.size_lo, p.size_hi);
        m.write_chunks(ino, 0, size, p.io_bytes)?;
        if p.fsync {
            m.fsync(ino, false)?;
        }
        self.files.push((d, n, ino, size));
        Ok(())
    }

    fn delete(&mut self, m: &mut Meter) -> Result<(), FsError> {
        if self.files.is_empty() {
            return Ok(());
        }
        let i = m.between(0, self.files.len() as u64 - 1) as usize;
        let (d, n, _, _) = self.files.swap_remove(i);
        m.unlink(self.dirs[d], &name(n))
    }

    fn read_or_append(&mut self, m: &mut Meter, p: &PostMark) -> Result<(), FsError> {
        if self.files.is_empty() {
            return Ok(());
        }
        let i = m.between(0, self.files.len() as u64 - 1) as usize;
        let (_, _, ino, size) = self.files[i];
        if m.between(1, 10) <= p.read_bias as u64 {
            m.read_all(ino, p.io_bytes)?;
        } else if size < p.size_hi {
            let n = m.between(1, (p.size_hi - size).min(p.append_max.max(1)));
            m.write_chunks(ino, size, n, p.io_bytes)?;
            if p.fsync {
                m.fsync(ino, false)?;
            }
            self.files[i].3 = size + n;
        }
        Ok(())
    }
}

/// Runs PostMark; phases "aging" (when on), "create" (the pool), "transactions", "delete".
pub fn run(m: &mut Meter, p: &PostMark) -> Result<Phases, FsError> {
    let mut phases = p.aging.run(m)?;
    let mut pool = Pool {
        dirs: vec![ROOT],
        files: Vec::new(),
        next_name: 0,
    };
    if p.subdirs > 0 {
        pool.dirs = (0..p.subdirs)
            .map(|i| m.mkdir(ROOT, &format!("s{i}")))
            .collect::<Result<_, _>>()?;
    }
    m.restart();
    for _ in 0..p.files {
        pool.create(m, p)?;
    }
    let create = m.restart();
    for _ in 0..p.transactions {
        if p.create_delete {
            if m.between(1, 10) <= p.create_bias as u64 {
                pool.create(m, p)?;
            } else {
                pool.delete(m)?;
            }
        }
        pool.read_or_append(m, p)?;
        m.stats.transactions += 1;
    }
    m.sync()?;
    let transactions = m.restart();
    while let Some((d, n, _, _)) = pool.files.pop() {
        m.unlink(pool.dirs[d], &name(n))?;
    }
    m.sync()?;
    let delete = m.restart();
    phases.extend([
        ("create", create),
        ("transactions", transactions),
        ("delete", delete),
    ]);
    Ok(phases)
}

#[cfg(test)]
mod tests {
    use vfs::oracle::MemFs;
    use vfs::FileSystem;

    use super::*;
    use crate::files::tests::meter;

    #[test]
    fn postmark_creates_transacts_and_cleans_up() {
        let mut fs = MemFs::default();
        let p = PostMark {
            files: 50,
            transactions: 400,
            subdirs: 3,
            ..PostMark::default()
        };
        let phases = run(&mut meter(&mut fs), &p).unwrap();
        let t = &phases[1].1;
        assert_eq!(phases[0].1.creates, 50);
        assert_eq!(t.transactions, 400);
        // About half of the 400 transactions create, half delete; the rest reads or appends.
        assert!((150..250).contains(&t.creates), "{}", t.creates);
        assert!(t.reads > 0 && t.write_bytes > 0);
        assert_eq!(phases[2].1.deletes, 50 + t.creates - t.deletes);
        for d in 0..3 {
            let dir = fs.lookup(ROOT, &format!("s{d}")).unwrap().unwrap();
            assert!(fs.readdir(dir).unwrap().is_empty());
        }
    }

    #[test]
    fn without_create_delete_transactions_only_read_and_append() {
        let mut fs = MemFs::default();
        let p = PostMark {
            files: 20,
            transactions: 200,
            create_delete: false,
            aging: Aging {
                bytes: 8 << 12,
                rewrite_bytes: 8 << 12,
                file_bytes: 4096,
                ..Aging::default()
            },
            ..PostMark::default()
        };
        let phases = run(&mut meter(&mut fs), &p).unwrap();
        let names: Vec<&str> = phases.iter().map(|p| p.0).collect();
        assert_eq!(names, ["aging", "create", "transactions", "delete"]);
        let t = &phases[2].1;
        assert_eq!((t.creates, t.deletes, t.transactions), (0, 0, 200));
        assert!(t.reads > 0 && t.write_bytes > 0);
    }
}
