//! Model-based test of OFS against the in-memory oracle (`vfs::oracle::MemFs`): every file
//! system operation, clean remounts (unmount, close and reopen of the store), `check` and idle
//! time, under every layout option and placement policy, with small directory buckets so that
//! directories split. Every result is compared: values, error kinds, byte contents, directory
//! listings, sizes.

mod common;

use std::mem::discriminant;

use ofs::OfsConfig;
use osd::Placement;
use proptest::prelude::*;
use rustc_hash::FxHashMap;
use vfs::oracle::MemFs;
use vfs::{
    FileData, FileKind, FileSystem, FsError, Ino, Owner, ReadInto, SetAttr, Special, XattrMode,
    ROOT,
};

const NAMES: &[&str] = &[
    "a", "b", "c", "d", "e", "f", "g", "h", "postmark.0001", "video.mkv", "répertoire",
    // A long name, so that few fit in a small bucket.
    "a_long_name_xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
    // Names no directory may hold.
    "", ".", "x/y",
];
const SPAN: u64 = 40_000;

#[derive(Clone, Debug)]
enum Op {
    Create(usize, usize),
    Mkdir(usize, usize),
    Unlink(usize, usize),
    Rmdir(usize, usize),
    Lookup(usize, usize),
    Readdir(usize),
    Write {
        node: usize,
        offset: u64,
        len: u64,
    },
    Read {
        node: usize,
        offset: u64,
        len: u64,
    },
    Truncate {
        node: usize,
        size: u64,
    },
    Stat(usize),
    Fsync(usize, bool),
    Sync,
    Remount,
    Check,
    Idle,
    /// Many files in one directory, so that its buckets split.
    Burst {
        node: usize,
        count: usize,
    },
    /// A file or directory with an owner and permissions.
    CreateAs(usize, usize, bool, u32),
    Symlink(usize, usize, usize),
    /// A FIFO, socket or device node: (directory, name, kind, device number).
    Mknod(usize, usize, usize, u64),
    Readlink(usize),
    /// (inode: file, symlink or directory; directory; name).
    Link(usize, usize, usize),
    /// (directory, entry, new directory, new name).
    Rename(usize, usize, usize, usize),
    Getattr(usize),
    Setattr {
        node: usize,
        perm: Option<u32>,
        owner: Option<u32>,
        size: Option<u64>,
        mtime: Option<u64>,
    },
    SetXattr(usize, usize, usize, u8),
    GetXattr(usize, usize),
    ListXattr(usize),
    RemoveXattr(usize, usize),
    /// A program opens an inode (a file removed while open keeps its data until released).
    Open(usize),
    /// Releases one open (or, with none, an inode never opened: nothing happens).
    Release(usize),
}

/// Extended attribute names; `ossd.priority` is the object's priority class.
const XNAMES: &[&str] = &["a", "user-colour", "ossd.priority", "k", ""];
/// Values: short ones, and one too long for an onode (OFS reports no space; the oracle
/// does not model that limit, so such a set is skipped on both).
const XVALUES: &[&[u8]] = &[b"1", b"blue", b"", b"200", b"x300", &[7u8; 120]];

fn xmode(m: u8) -> XattrMode {
    match m % 3 {
        0 => XattrMode::Any,
        1 => XattrMode::Create,
        _ => XattrMode::Replace,
    }
}

fn op() -> impl Strategy<Value = Op> {
    let n = || 0usize..256;
    let name = || 0usize..NAMES.len() + 40;
    prop_oneof![
        6 => (n(), name()).prop_map(|(d, m)| Op::Create(d, m)),
        3 => (n(), name()).prop_map(|(d, m)| Op::Mkdir(d, m)),
        3 => (n(), name()).prop_map(|(d, m)| Op::Unlink(d, m)),
        2 => (n(), name()).prop_map(|(d, m)| Op::Rmdir(d, m)),
        3 => (n(), name()).prop_map(|(d, m)| Op::Lookup(d, m)),
        2 => n().prop_map(Op::Readdir),
        8 => (n(), 0..SPAN, 0u64..12_000).prop_map(|(node, offset, len)| Op::Write { node, offset, len }),
        3 => (n(), 0u64..200, 1u64..100).prop_map(|(node, offset, len)| Op::Write { node, offset, len }),
        5 => (n(), 0..SPAN, 1u64..16_000).prop_map(|(node, offset, len)| Op::Read { node, offset, len }),
        2 => (n(), 0..SPAN).prop_map(|(node, size)| Op::Truncate { node, size }),
        2 => n().prop_map(Op::Stat),
        1 => (n(), any::<bool>()).prop_map(|(a, b)| Op::Fsync(a, b)),
        1 => Just(Op::Sync),
        1 => Just(Op::Remount),
        1 => Just(Op::Check),
        1 => Just(Op::Idle),
        1 => (n(), 10usize..60).prop_map(|(node, count)| Op::Burst { node, count }),
        2 => (n(), name(), any::<bool>(), 0u32..0o10000).prop_map(|(d, m, dir, p)| Op::CreateAs(d, m, dir, p)),
        2 => (n(), name(), 0usize..4).prop_map(|(d, m, t)| Op::Symlink(d, m, t)),
        1 => n().prop_map(Op::Readlink),
        2 => (n(), name(), 0usize..4, any::<u64>()).prop_map(|(d, m, k, r)| Op::Mknod(d, m, k, r)),
        3 => (n(), n(), name()).prop_map(|(i, d, m)| Op::Link(i, d, m)),
        5 => (n(), name(), n(), name()).prop_map(|(d, m, e, o)| Op::Rename(d, m, e, o)),
        2 => n().prop_map(Op::Getattr),
        2 => (n(), prop::option::of(0u32..0o10000), prop::option::of(0u32..70000), prop::option::of(0u64..SPAN), prop::option::of(any::<u64>()))
            .prop_map(|(node, perm, owner, size, mtime)| Op::Setattr { node, perm, owner, size, mtime }),
        3 => (n(), 0..XNAMES.len(), 0..XVALUES.len(), any::<u8>()).prop_map(|(i, k, v, m)| Op::SetXattr(i, k, v, m)),
        2 => (n(), 0..XNAMES.len()).prop_map(|(i, k)| Op::GetXattr(i, k)),
        1 => n().prop_map(Op::ListXattr),
        1 => (n(), 0..XNAMES.len()).prop_map(|(i, k)| Op::RemoveXattr(i, k)),
        3 => n().prop_map(Op::Open),
        2 => n().prop_map(Op::Release),
    ]
}

/// Names past the fixed list: `n000`, `n001`, ...
fn name(i: usize) -> String {
    NAMES
        .get(i)
        .map_or_else(|| format!("n{:03}", i - NAMES.len()), |s| s.to_string())
}

struct Rig {
    fs: Option<ofs::Ofs<osd::ObjectStore<flash::fault::Faulty<flash::Nand>>>>,
    cfg: osd::OsdConfig,
    oracle: MemFs,
    /// Every inode ever made, as (oracle's number, OFS's number); removed ones stay, so
    /// operations on stale numbers are tried too.
    nodes: Vec<(Ino, Ino)>,
    to_ofs: FxHashMap<Ino, Ino>,
    stamp: u8,
    /// Opens not yet released, as (oracle's number, OFS's number).
    opened: Vec<(Ino, Ino)>,
}

fn same_err<T: std::fmt::Debug, U: std::fmt::Debug>(
    what: &str,
    want: &Result<T, FsError>,
    got: &Result<U, FsError>,
) -> Result<(), TestCaseError> {
    let ok = match (want, got) {
        (Ok(_), Ok(_)) => true,
        (Err(a), Err(b)) => discriminant(a) == discriminant(b),
        _ => false,
    };
    prop_assert!(ok, "{}: oracle {:?}, OFS {:?}", what, want, got);
    Ok(())
}

impl Rig {
    fn fs(&mut self) -> &mut ofs::Ofs<osd::ObjectStore<flash::fault::Faulty<flash::Nand>>> {
        self.fs.as_mut().unwrap()
    }

    /// Mostly a live inode of the kind an operation wants; one time in eight any inode ever
    /// made (maybe removed, maybe of the other kind), so the errors are exercised too.
    fn pick(&mut self, i: usize, kind: FileKind) -> (Ino, Ino) {
        if !i.is_multiple_of(8) {
            let live: Vec<(Ino, Ino)> = self
                .nodes
                .iter()
                .copied()
                .filter(|&(o, _)| self.oracle.stat(o).is_ok_and(|s| s.kind == kind))
                .collect();
            if !live.is_empty() {
                return live[i / 8 % live.len()];
            }
        }
        self.nodes[i % self.nodes.len()]
    }

    /// Mostly the name of an entry `dir` holds, else one from the pool.
    fn entry_name(&mut self, dir: Ino, m: usize) -> String {
        if !m.is_multiple_of(4) {
            if let Ok(entries) = self.oracle.readdir(dir) {
                if !entries.is_empty() {
                    return entries[m / 4 % entries.len()].0.clone();
                }
            }
        }
        name(m)
    }

    fn dir(&mut self, i: usize) -> (Ino, Ino) {
        self.pick(i, FileKind::Dir)
    }

    /// Any inode ever made, live ones mostly.
    fn any(&mut self, i: usize) -> (Ino, Ino) {
        match i % 4 {
            0 => self.pick(i / 4, FileKind::File),
            1 => self.pick(i / 4, FileKind::Dir),
            2 => self.pick(i / 4, FileKind::Symlink),
            _ => self.pick(i / 4, FileKind::Special(Special::CharDevice)),
        }
    }

    fn record(
        &mut self,
        what: &str,
        want: Result<Ino, FsError>,
        got: Result<Ino, FsError>,
    ) -> Result<(), TestCaseError> {
        same_err(what, &want, &got)?;
        if let (Ok(o), Ok(f)) = (want, got) {
            self.nodes.push((o, f));
            self.to_ofs.insert(o, f);
        }
        Ok(())
    }

    /// Compares the POSIX attributes OFS and the oracle both keep (not the times, which run
    /// on different clocks, nor a directory's size).
    fn same_attrs(&mut self, what: &str, o: Ino, f: Ino) -> Result<(), TestCaseError> {
        let want = self.oracle.getattr(o);
        let got = self.fs().getattr(f);
        same_err(what, &want, &got)?;
        if let (Ok(w), Ok(g)) = (want, got) {
            prop_assert_eq!(
                (w.kind, w.perm, w.uid, w.gid, w.nlink, w.rdev),
                (g.kind, g.perm, g.uid, g.gid, g.nlink, g.rdev),
                "{}",
                what
            );
            if w.kind != FileKind::Dir {
                prop_assert_eq!(w.size, g.size, "{}: size", what);
            }
            prop_assert_eq!(g.ino, f);
        }
        Ok(())
    }

    /// A clean remount: every open is released first (the kernel closes every file before an
    /// unmount ends; OFS drops files removed while open when unmounted).
    fn remount(&mut self) {
        for (o, _) in std::mem::take(&mut self.opened) {
            self.oracle.release(o).unwrap();
        }
        let fs = self.fs.take().unwrap();
        self.fs = Some(common::remount(fs, self.cfg));
    }

    fn node(&mut self, i: usize) -> (Ino, Ino) {
        self.pick(i, FileKind::File)
    }

    fn bytes(&mut self, len: u64) -> Vec<u8> {
        self.stamp = self.stamp.wrapping_add(1).max(1);
        let s = self.stamp;
        (0..len).map(|i| s ^ (i as u8).wrapping_mul(29)).collect()
    }

    fn make(&mut self, op: &Op, d: usize, m: usize, dir: bool) -> Result<(), TestCaseError> {
        let (od, fd) = self.dir(d);
        let n = name(m);
        let (want, got) = if dir {
            (self.oracle.mkdir(od, &n), self.fs().mkdir(fd, &n))
        } else {
            (self.oracle.create(od, &n), self.fs().create(fd, &n))
        };
        same_err(&format!("{op:?}"), &want, &got)?;
        if let (Ok(o), Ok(f)) = (want, got) {
            self.nodes.push((o, f));
            self.to_ofs.insert(o, f);
        }
        Ok(())
    }

    fn expected_dir_bytes(&mut self, dir: Ino) -> u64 {
        self.oracle
            .readdir(dir)
            .unwrap()
            .iter()
            .map(|(n, _)| ofs::dir::logical_entry_bytes(n))
            .sum()
    }

    fn run(&mut self, op: &Op) -> Result<(), TestCaseError> {
        let what = format!("{op:?}");
        match *op {
            Op::Create(d, m) => self.make(op, d, m, false)?,
            Op::Mkdir(d, m) => self.make(op, d, m, true)?,
            Op::Unlink(d, m) | Op::Rmdir(d, m) => {
                let (od, fd) = self.dir(d);
                let n = self.entry_name(od, m);
                let (want, got) = if matches!(op, Op::Unlink(..)) {
                    (self.oracle.unlink(od, &n), self.fs().unlink(fd, &n))
                } else {
                    (self.oracle.rmdir(od, &n), self.fs().rmdir(fd, &n))
                };
                same_err(&what, &want, &got)?;
            }
            Op::Lookup(d, m) => {
                let (od, fd) = self.dir(d);
                let n = self.entry_name(od, m);
                let want = self.oracle.lookup(od, &n);
                let got = self.fs().lookup(fd, &n);
                same_err(&what, &want, &got)?;
                if let (Ok(w), Ok(g)) = (want, got) {
                    prop_assert_eq!(w.map(|o| self.to_ofs[&o]), g, "{}", what);
                }
            }
            Op::Readdir(d) => {
                let (od, fd) = self.dir(d);
                let want = self.oracle.readdir(od);
                let got = self.fs().readdir(fd);
                same_err(&what, &want, &got)?;
                if let (Ok(w), Ok(g)) = (want, got) {
                    let w: Vec<(String, Ino)> =
                        w.into_iter().map(|(n, o)| (n, self.to_ofs[&o])).collect();
                    prop_assert_eq!(w, g, "{}", what);
                }
            }
            Op::Write { node, offset, len } => {
                let (o, f) = self.node(node);
                let data = self.bytes(len);
                let want = self.oracle.write(o, offset, len, FileData::Bytes(&data));
                let got = self.fs().write(f, offset, len, FileData::Bytes(&data));
                same_err(&what, &want, &got)?;
            }
            Op::Read { node, offset, len } => {
                let (o, f) = self.node(node);
                let mut a = vec![0u8; len as usize];
                let mut b = vec![0u8; len as usize];
                let want = self.oracle.read(o, offset, ReadInto::Bytes(&mut a));
                let got = self.fs().read(f, offset, ReadInto::Bytes(&mut b));
                same_err(&what, &want, &got)?;
                if let (Ok(w), Ok(g)) = (&want, &got) {
                    prop_assert_eq!(w, g, "{}: length", what);
                    let n = *w as usize;
                    if let Some(i) = (0..n).find(|&i| a[i] != b[i]) {
                        return Err(TestCaseError::fail(format!(
                            "{what}: byte {} is {}, expected {}",
                            offset as usize + i,
                            b[i],
                            a[i]
                        )));
                    }
                    // Fingerprint-mode reads count the same bytes.
                    let d = self.fs().read(f, offset, ReadInto::Discard(len));
                    prop_assert_eq!(d, Ok(*w), "{}: discard read", what);
                }
            }
            Op::Truncate { node, size } => {
                let (o, f) = self.node(node);
                let want = self.oracle.truncate(o, size);
                let got = self.fs().truncate(f, size);
                same_err(&what, &want, &got)?;
            }
            Op::Stat(node) => {
                let (o, f) = if node % 2 == 0 {
                    self.node(node / 2)
                } else {
                    self.dir(node / 2)
                };
                let want = self.oracle.stat(o);
                let got = self.fs().stat(f);
                same_err(&what, &want, &got)?;
                if let (Ok(w), Ok(g)) = (want, got) {
                    prop_assert_eq!(w.kind, g.kind, "{}", what);
                    prop_assert_eq!(g.ino, f);
                    let size = match w.kind {
                        FileKind::File | FileKind::Symlink | FileKind::Special(_) => w.size,
                        FileKind::Dir => self.expected_dir_bytes(o),
                    };
                    prop_assert_eq!(size, g.size, "{}: size", what);
                }
            }
            Op::Fsync(node, data_only) => {
                let (o, f) = self.node(node);
                let want = self.oracle.fsync(o, data_only);
                let got = self.fs().fsync(f, data_only);
                same_err(&what, &want, &got)?;
            }
            Op::Sync => self
                .fs()
                .sync()
                .map_err(|e| TestCaseError::fail(e.to_string()))?,
            Op::Remount => self.remount(),
            Op::Check => {
                let p = self
                    .fs()
                    .check()
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
                prop_assert!(p.is_empty(), "check: {:?}", p);
            }
            Op::Idle => {
                let t = self.fs().now();
                self.fs()
                    .background(t, t + 20_000_000)
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
            }
            Op::CreateAs(d, m, dir, perm) => {
                let (od, fd) = self.dir(d);
                let n = name(m);
                let kind = if dir { FileKind::Dir } else { FileKind::File };
                let owner = Owner {
                    perm,
                    uid: perm * 3,
                    gid: perm / 7,
                };
                let want = self.oracle.create_as(od, &n, kind, owner);
                let got = self.fs().create_as(fd, &n, kind, owner);
                self.record(&what, want, got)?;
            }
            Op::Symlink(d, m, t) => {
                let (od, fd) = self.dir(d);
                let n = name(m);
                let long = vec![b'x'; 5000];
                let target: &[u8] = match t {
                    0 => b"../some/where",
                    1 => b"",
                    2 => &long[..4095],
                    _ => &long,
                };
                let owner = Owner::default_for(FileKind::Symlink);
                let want = self.oracle.symlink(od, &n, target, owner);
                let got = self.fs().symlink(fd, &n, target, owner);
                self.record(&what, want, got)?;
            }
            Op::Mknod(d, m, k, rdev) => {
                let (od, fd) = self.dir(d);
                let n = name(m);
                let kind = [
                    Special::Fifo,
                    Special::Socket,
                    Special::CharDevice,
                    Special::BlockDevice,
                ][k];
                let owner = Owner {
                    perm: (rdev % 0o10000) as u32,
                    uid: 7,
                    gid: 8,
                };
                let want = self.oracle.mknod(od, &n, kind, rdev, owner);
                let got = self.fs().mknod(fd, &n, kind, rdev, owner);
                self.record(&what, want, got)?;
            }
            Op::Readlink(i) => {
                let (o, f) = self.any(i);
                let want = self.oracle.readlink(o);
                let got = self.fs().readlink(f);
                same_err(&what, &want, &got)?;
                if let (Ok(w), Ok(g)) = (want, got) {
                    prop_assert_eq!(w, g, "{}", what);
                }
            }
            Op::Link(i, d, m) => {
                let (o, f) = self.any(i);
                let (od, fd) = self.dir(d);
                let n = name(m);
                let got = self.fs().link(f, fd, &n);
                if matches!(got, Err(FsError::Unsupported(_))) {
                    // One name per inode with dirent_objects.
                    prop_assert!(self.fs().config().dirent_objects, "{}", what);
                    return Ok(());
                }
                let want = self.oracle.link(o, od, &n);
                same_err(&what, &want, &got)?;
                self.same_attrs(&what, o, f)?;
            }
            Op::Rename(d, m, e, k) => {
                let (od, fd) = self.dir(d);
                let n = self.entry_name(od, m);
                let (oe, fe) = self.dir(e);
                let nn = self.entry_name(oe, k);
                let want = self.oracle.rename(od, &n, oe, &nn);
                let got = self.fs().rename(fd, &n, fe, &nn);
                same_err(&what, &want, &got)?;
            }
            Op::Getattr(i) => {
                let (o, f) = self.any(i);
                self.same_attrs(&what, o, f)?;
            }
            Op::Setattr {
                node,
                perm,
                owner,
                size,
                mtime,
            } => {
                let (o, f) = self.any(node);
                let set = SetAttr {
                    perm,
                    uid: owner,
                    gid: owner.map(|u| u / 2),
                    size,
                    atime_ns: mtime.map(|t| t / 3),
                    mtime_ns: mtime,
                };
                let want = self.oracle.setattr(o, set);
                let got = self.fs().setattr(f, set);
                same_err(&what, &want, &got)?;
                if let (Ok(w), Ok(g)) = (want, got) {
                    if let Some(t) = mtime {
                        prop_assert_eq!((w.mtime_ns, w.atime_ns), (t, t / 3), "{}", what);
                        prop_assert_eq!((g.mtime_ns, g.atime_ns), (t, t / 3), "{}", what);
                    }
                }
                self.same_attrs(&what, o, f)?;
            }
            Op::SetXattr(i, k, v, m) => {
                let (o, f) = self.any(i);
                let got = self.fs().setxattr(f, XNAMES[k], XVALUES[v], xmode(m));
                if let Err(FsError::NoSpace(_)) = got {
                    // The onode is full: a limit the oracle does not model.
                    return Ok(());
                }
                let want = self.oracle.setxattr(o, XNAMES[k], XVALUES[v], xmode(m));
                same_err(&what, &want, &got)?;
            }
            Op::GetXattr(i, k) => {
                let (o, f) = self.any(i);
                let want = self.oracle.getxattr(o, XNAMES[k]);
                let got = self.fs().getxattr(f, XNAMES[k]);
                same_err(&what, &want, &got)?;
                if let (Ok(w), Ok(g)) = (want, got) {
                    prop_assert_eq!(w, g, "{}", what);
                }
            }
            Op::ListXattr(i) => {
                let (o, f) = self.any(i);
                let want = self.oracle.listxattr(o);
                let got = self.fs().listxattr(f);
                same_err(&what, &want, &got)?;
                if let (Ok(w), Ok(g)) = (want, got) {
                    prop_assert_eq!(w, g, "{}", what);
                }
            }
            Op::RemoveXattr(i, k) => {
                let (o, f) = self.any(i);
                let want = self.oracle.removexattr(o, XNAMES[k]);
                let got = self.fs().removexattr(f, XNAMES[k]);
                same_err(&what, &want, &got)?;
            }
            Op::Open(i) => {
                let (o, f) = self.any(i);
                let want = self.oracle.open(o);
                let got = self.fs().open(f);
                same_err(&what, &want, &got)?;
                if want.is_ok() {
                    self.opened.push((o, f));
                }
            }
            Op::Release(i) => {
                let (o, f) = if self.opened.is_empty() {
                    self.any(i)
                } else {
                    self.opened.swap_remove(i % self.opened.len())
                };
                let want = self.oracle.release(o);
                let got = self.fs().release(f);
                same_err(&what, &want, &got)?;
                self.same_attrs(&what, o, f)?;
            }
            Op::Burst { node, count } => {
                let (od, fd) = self.dir(node);
                for i in 0..count {
                    let n = name(NAMES.len() + i);
                    let want = self.oracle.create(od, &n);
                    let got = self.fs().create(fd, &n);
                    same_err(&format!("{what} #{i}"), &want, &got)?;
                    if let (Ok(o), Ok(f)) = (want, got) {
                        self.nodes.push((o, f));
                        self.to_ofs.insert(o, f);
                    }
                }
            }
        }
        Ok(())
    }
}

fn placement() -> impl Strategy<Value = Placement> {
    prop_oneof![
        Just(Placement::One),
        Just(Placement::Combined),
        Just(Placement::Semantic),
        Just(Placement::Split),
        Just(Placement::SplitAtime),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn ofs_matches_the_oracle(
        placement in placement(),
        inode_objects in any::<bool>(),
        embed_inodes in any::<bool>(),
        dirent_objects in any::<bool>(),
        small_buckets in any::<bool>(),
        ops in prop::collection::vec(op(), 1..400),
    ) {
        let config = OfsConfig {
            inode_objects,
            embed_inodes,
            dirent_objects,
            dir_block_bytes: if small_buckets { 512 } else { 0 },
        };
        let (fs, cfg) = common::fresh(placement, 64, config);
        let mut rig = Rig {
            fs: Some(fs),
            cfg,
            oracle: MemFs::default(),
            nodes: vec![(ROOT, ROOT)],
            to_ofs: [(ROOT, ROOT)].into_iter().collect(),
            stamp: 0,
            opened: Vec::new(),
        };
        for op in &ops {
            rig.run(op)?;
        }
        let p = rig.fs().check().map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert!(p.is_empty(), "final check: {:?}", p);
        if std::env::var("OFS_DEBUG").is_ok() { eprintln!("{} ops, {} nodes, {:?}", ops.len(), rig.nodes.len(), rig.fs().ofs_counters()); }
        // The whole tree survives a remount.
        rig.remount();
        for i in 0..rig.nodes.len() {
            let (o, f) = rig.nodes[i];
            let want = rig.oracle.stat(o);
            let got = rig.fs().stat(f);
            same_err("stat after remount", &want, &got)?;
            match want.map(|s| s.kind) {
                Ok(FileKind::Dir) => {
                    let w: Vec<(String, Ino)> = rig.oracle.readdir(o).unwrap().into_iter().map(|(n, o)| (n, rig.to_ofs[&o])).collect();
                    prop_assert_eq!(Ok(w), rig.fs().readdir(f));
                }
                Ok(FileKind::File) => {
                    let mut a = vec![0u8; (SPAN + 16_000) as usize];
                    let mut b = a.clone();
                    let n = rig.oracle.read(o, 0, ReadInto::Bytes(&mut a)).unwrap();
                    prop_assert_eq!(Ok(n), rig.fs().read(f, 0, ReadInto::Bytes(&mut b)));
                    prop_assert!(a == b, "contents of inode {} after remount", f);
                }
                Ok(FileKind::Symlink) => {
                    prop_assert_eq!(rig.oracle.readlink(o), rig.fs().readlink(f));
                }
                // Their attributes (the device number too) are compared below.
                Ok(FileKind::Special(_)) => {}
                Err(_) => {}
            }
            rig.same_attrs("attributes after remount", o, f)?;
            let want = rig.oracle.listxattr(o);
            let got = rig.fs().listxattr(f);
            same_err("xattrs after remount", &want, &got)?;
            if let (Ok(w), Ok(g)) = (want, got) {
                prop_assert_eq!(&w, &g, "xattrs after remount");
                for k in w {
                    prop_assert_eq!(rig.oracle.getxattr(o, &k), rig.fs().getxattr(f, &k));
                }
            }
        }
        prop_assert_eq!(rig.fs().ofs_counters().repairs, 0);
    }
}
