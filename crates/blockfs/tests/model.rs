//! Model-based test: random mixes of every operation on the block file system and on the
//! in-memory oracle (`vfs::oracle::MemFs`), compared result by result (errors by kind), with
//! clean unmount/remount, sync followed by a crash, idle time long enough for the flusher, and
//! fsck. After every remount the whole tree and every byte of every file are compared. Both a
//! block the size of the FTL's write unit and blocks four to a unit are covered, with and
//! without discard.

mod common;

use blockfs::{BlockFs, BlockFsConfig};
use common::*;
use flash::Nand;
use proptest::prelude::*;
use vfs::oracle::MemFs;
use vfs::{FileData, FileKind, FileSystem, FsError, Ino, ReadInto, ROOT};

const NAMES: [&str; 6] = ["a", "b", "c", "dd", "a-rather-long-name-for-an-entry", "f"];

#[derive(Clone, Debug)]
enum Op {
    Create {
        dir: usize,
        name: usize,
    },
    Mkdir {
        dir: usize,
        name: usize,
    },
    Unlink {
        dir: usize,
        name: usize,
    },
    Rmdir {
        dir: usize,
        name: usize,
    },
    Lookup {
        dir: usize,
        name: usize,
    },
    Readdir {
        dir: usize,
    },
    Write {
        node: usize,
        offset: u32,
        len: u32,
        seed: u64,
    },
    Read {
        node: usize,
        offset: u32,
        len: u32,
    },
    Truncate {
        node: usize,
        size: u32,
    },
    Stat {
        node: usize,
    },
    Fsync {
        node: usize,
        data_only: bool,
    },
    Sync,
    Idle,
    Remount,
    SyncCrash,
    Check,
    BadName {
        dir: usize,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let n = NAMES.len();
    prop_oneof![
        6 => (any::<usize>(), 0..n).prop_map(|(dir, name)| Op::Create { dir, name }),
        2 => (any::<usize>(), 0..n).prop_map(|(dir, name)| Op::Mkdir { dir, name }),
        3 => (any::<usize>(), 0..n).prop_map(|(dir, name)| Op::Unlink { dir, name }),
        1 => (any::<usize>(), 0..n).prop_map(|(dir, name)| Op::Rmdir { dir, name }),
        1 => (any::<usize>(), 0..n).prop_map(|(dir, name)| Op::Lookup { dir, name }),
        1 => any::<usize>().prop_map(|dir| Op::Readdir { dir }),
        10 => (any::<usize>(), 0u32..70_000, 0u32..20_000, any::<u64>())
            .prop_map(|(node, offset, len, seed)| Op::Write { node, offset, len, seed }),
        4 => (any::<usize>(), 0u32..80_000, 0u32..30_000)
            .prop_map(|(node, offset, len)| Op::Read { node, offset, len }),
        3 => (any::<usize>(), 0u32..80_000).prop_map(|(node, size)| Op::Truncate { node, size }),
        1 => any::<usize>().prop_map(|node| Op::Stat { node }),
        2 => (any::<usize>(), any::<bool>()).prop_map(|(node, data_only)| Op::Fsync { node, data_only }),
        1 => Just(Op::Sync),
        1 => Just(Op::Idle),
        2 => Just(Op::Remount),
        1 => Just(Op::SyncCrash),
        1 => Just(Op::Check),
        1 => any::<usize>().prop_map(|dir| Op::BadName { dir }),
    ]
}

/// A node both file systems have: (oracle inode, file system inode, is a directory).
#[derive(Clone, Copy, Debug)]
struct Node {
    model: Ino,
    real: Ino,
    dir: bool,
}

struct Rig {
    fs: Option<BlockFs<Nand>>,
    model: MemFs,
    nodes: Vec<Node>,
    cfg: BlockFsConfig,
}

fn same_error<T: std::fmt::Debug>(
    what: &str,
    model: &Result<T, FsError>,
    real: &Result<T, FsError>,
) -> Result<(), TestCaseError> {
    match (model, real) {
        (Ok(_), Ok(_)) => Ok(()),
        (Err(a), Err(b)) if std::mem::discriminant(a) == std::mem::discriminant(b) => Ok(()),
        _ => Err(TestCaseError::fail(format!(
            "{what}: oracle {model:?}, blockfs {real:?}"
        ))),
    }
}

impl Rig {
    fn fs(&mut self) -> &mut BlockFs<Nand> {
        self.fs.as_mut().unwrap()
    }

    fn dir(&self, k: usize) -> Node {
        let dirs: Vec<Node> = self.nodes.iter().copied().filter(|n| n.dir).collect();
        dirs[k % dirs.len()]
    }

    fn node(&self, k: usize) -> Node {
        self.nodes[k % self.nodes.len()]
    }

    fn real_of(&self, model: Ino) -> Ino {
        self.nodes.iter().find(|n| n.model == model).unwrap().real
    }

    fn forget(&mut self, model: Ino) {
        self.nodes.retain(|n| n.model != model);
    }

    fn make(&mut self, d: Node, name: &str, dir: bool) -> Result<(), TestCaseError> {
        let (m, r) = if dir {
            (
                self.model.mkdir(d.model, name),
                self.fs().mkdir(d.real, name),
            )
        } else {
            (
                self.model.create(d.model, name),
                self.fs().create(d.real, name),
            )
        };
        same_error(&format!("make {name:?} in {d:?}"), &m, &r)?;
        if let (Ok(model), Ok(real)) = (m, r) {
            self.nodes.push(Node { model, real, dir });
        }
        Ok(())
    }

    fn remove(&mut self, d: Node, name: &str, dir: bool) -> Result<(), TestCaseError> {
        let target = self.model.lookup(d.model, name).ok().flatten();
        let (m, r) = if dir {
            (
                self.model.rmdir(d.model, name),
                self.fs().rmdir(d.real, name),
            )
        } else {
            (
                self.model.unlink(d.model, name),
                self.fs().unlink(d.real, name),
            )
        };
        same_error(&format!("remove {name:?} from {d:?}"), &m, &r)?;
        if m.is_ok() {
            self.forget(target.unwrap());
        }
        Ok(())
    }

    fn compare_readdir(&mut self, d: Node) -> Result<(), TestCaseError> {
        let m = self.model.readdir(d.model);
        let r = self.fs().readdir(d.real);
        same_error("readdir", &m, &r)?;
        if let (Ok(m), Ok(r)) = (m, r) {
            let m: Vec<(String, Ino)> = m.into_iter().map(|(n, i)| (n, self.real_of(i))).collect();
            prop_assert_eq!(m, r, "readdir of {:?}", d);
        }
        Ok(())
    }

    fn compare_read(&mut self, n: Node, offset: u64, len: usize) -> Result<(), TestCaseError> {
        let mut a = vec![0u8; len];
        let mut b = vec![0xEEu8; len];
        let m = self.model.read(n.model, offset, ReadInto::Bytes(&mut a));
        let r = self.fs().read(n.real, offset, ReadInto::Bytes(&mut b));
        same_error("read", &m, &r)?;
        if let (Ok(x), Ok(y)) = (&m, &r) {
            prop_assert_eq!(x, y, "bytes read from {:?} at {}", n, offset);
            prop_assert!(
                a[..*x as usize] == b[..*y as usize],
                "contents of {:?} at {}",
                n,
                offset
            );
        }
        Ok(())
    }

    fn compare_stat(&mut self, n: Node) -> Result<(), TestCaseError> {
        let m = self.model.stat(n.model);
        let r = self.fs().stat(n.real);
        same_error("stat", &m, &r)?;
        if let (Ok(m), Ok(r)) = (m, r) {
            prop_assert_eq!(m.kind, r.kind);
            if m.kind == FileKind::File {
                prop_assert_eq!(m.size, r.size, "size of {:?}", n);
            }
        }
        Ok(())
    }

    /// Everything: the tree, every file's bytes, and fsck.
    fn compare_all(&mut self) -> Result<(), TestCaseError> {
        for n in self.nodes.clone() {
            self.compare_stat(n)?;
            if n.dir {
                self.compare_readdir(n)?;
            } else {
                let size = self.model.stat(n.model).unwrap().size;
                self.compare_read(n, 0, size as usize + 10)?;
            }
        }
        self.check()
    }

    fn check(&mut self) -> Result<(), TestCaseError> {
        let found = self.fs().check().unwrap();
        prop_assert!(found.is_empty(), "fsck: {:?}", found);
        Ok(())
    }

    fn run(&mut self, op: &Op) -> Result<(), TestCaseError> {
        let t = self.fs().now() + 1_000;
        self.fs().set_time(t);
        self.model.set_time(t);
        match *op {
            Op::Create { dir, name } => self.make(self.dir(dir), NAMES[name], false),
            Op::Mkdir { dir, name } => self.make(self.dir(dir), NAMES[name], true),
            Op::Unlink { dir, name } => self.remove(self.dir(dir), NAMES[name], false),
            Op::Rmdir { dir, name } => self.remove(self.dir(dir), NAMES[name], true),
            Op::Lookup { dir, name } => {
                let d = self.dir(dir);
                let m = self.model.lookup(d.model, NAMES[name]).unwrap();
                let r = self.fs().lookup(d.real, NAMES[name]).unwrap();
                prop_assert_eq!(m.map(|i| self.real_of(i)), r);
                Ok(())
            }
            Op::Readdir { dir } => self.compare_readdir(self.dir(dir)),
            Op::Write {
                node,
                offset,
                len,
                seed,
            } => {
                let n = self.node(node);
                let data = pattern(seed, offset as u64, len as usize);
                let m =
                    self.model
                        .write(n.model, offset as u64, len as u64, FileData::Bytes(&data));
                let r = self
                    .fs()
                    .write(n.real, offset as u64, len as u64, FileData::Bytes(&data));
                same_error("write", &m, &r)
            }
            Op::Read { node, offset, len } => {
                self.compare_read(self.node(node), offset as u64, len as usize)
            }
            Op::Truncate { node, size } => {
                let n = self.node(node);
                let m = self.model.truncate(n.model, size as u64);
                let r = self.fs().truncate(n.real, size as u64);
                same_error("truncate", &m, &r)
            }
            Op::Stat { node } => self.compare_stat(self.node(node)),
            Op::Fsync { node, data_only } => {
                let n = self.node(node);
                let r = self.fs().fsync(n.real, data_only);
                prop_assert!(r.is_ok(), "fsync: {:?}", r);
                Ok(())
            }
            Op::Sync => {
                self.fs().sync().unwrap();
                Ok(())
            }
            Op::Idle => {
                // Past the flusher's interval: the next operation writes metadata back.
                let t = self.fs().now() + 31_000_000_000;
                let done = self.fs().background(t, t + 1_000_000).unwrap();
                prop_assert!(done >= t);
                Ok(())
            }
            Op::Remount => {
                let fs = self.fs.take().unwrap();
                self.fs = Some(remount(fs, self.cfg));
                prop_assert!(
                    self.fs().problems().is_empty(),
                    "{:?}",
                    self.fs().problems()
                );
                self.compare_all()
            }
            Op::SyncCrash => {
                self.fs().sync().unwrap();
                let fs = self.fs.take().unwrap();
                self.fs = Some(crash_and_mount(fs, self.cfg).unwrap());
                prop_assert!(
                    self.fs().problems().is_empty(),
                    "{:?}",
                    self.fs().problems()
                );
                self.compare_all()
            }
            Op::Check => self.check(),
            Op::BadName { dir } => {
                let d = self.dir(dir);
                for bad in ["", ".", "..", "a/b"] {
                    let r = self.fs().create(d.real, bad);
                    prop_assert!(matches!(r, Err(FsError::Invalid(_))), "{:?}: {:?}", bad, r);
                }
                let long = "x".repeat(256);
                prop_assert!(matches!(
                    self.fs().mkdir(d.real, &long),
                    Err(FsError::Invalid(_))
                ));
                Ok(())
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn blockfs_agrees_with_the_oracle(
        small_blocks in any::<bool>(),
        discard in any::<bool>(),
        ops in prop::collection::vec(op(), 1..120),
    ) {
        let cfg = BlockFsConfig {
            block_bytes: if small_blocks { 1024 } else { 4096 },
            discard,
            ..BlockFsConfig::default()
        };
        let mut rig = Rig {
            fs: Some(format(cfg)),
            model: MemFs::default(),
            nodes: vec![Node { model: ROOT, real: ROOT, dir: true }],
            cfg,
        };
        for op in &ops {
            rig.run(op)?;
        }
        let fs = rig.fs.take().unwrap();
        rig.fs = Some(remount(fs, cfg));
        rig.compare_all()?;
    }
}
