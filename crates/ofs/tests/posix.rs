//! POSIX behaviour a mount needs that the lab's calls never ask for (found by pjdfstest on the
//! FUSE mount): a directory's link count, and a file removed while it is open.

mod common;

use common::{assert_clean, fresh, remount};
use ofs::OfsConfig;
use osd::{ObjectStore, Placement};
use vfs::{FileData, FileSystem, FsError, Ino, ReadInto, ROOT};

fn nlink<F: FileSystem>(fs: &mut F, ino: Ino) -> u32 {
    fs.getattr(ino).unwrap().nlink
}

#[test]
fn a_directory_links_from_its_name_its_dot_and_each_subdirectory() {
    for dirent_objects in [false, true] {
        let config = OfsConfig {
            dirent_objects,
            dir_block_bytes: 512,
            ..OfsConfig::default()
        };
        let (mut fs, cfg) = fresh(Placement::Semantic, 64, config);
        assert_eq!(nlink(&mut fs, ROOT), 2);
        let a = fs.mkdir(ROOT, "a").unwrap();
        let b = fs.mkdir(ROOT, "b").unwrap();
        fs.create(a, "f").unwrap();
        fs.symlink(
            a,
            "l",
            b"f",
            vfs::Owner::default_for(vfs::FileKind::Symlink),
        )
        .unwrap();
        fs.mkdir(a, "s").unwrap();
        assert_eq!(
            [ROOT, a, b].map(|d| nlink(&mut fs, d)),
            [4, 3, 2],
            "files and links do not count"
        );
        // rename across directories moves the count; over an empty directory it drops one
        fs.rename(a, "s", b, "s").unwrap();
        assert_eq!([a, b].map(|d| nlink(&mut fs, d)), [2, 3]);
        fs.mkdir(b, "t").unwrap();
        assert_eq!(nlink(&mut fs, b), 4);
        fs.rename(b, "s", b, "t").unwrap();
        assert_eq!(nlink(&mut fs, b), 3);
        fs.rmdir(b, "t").unwrap();
        assert_eq!(nlink(&mut fs, b), 2);
        // many subdirectories (the directory splits), counted again from the buckets after a
        // remount
        for i in 0..60 {
            fs.mkdir(a, &format!("sub-{i:03}")).unwrap();
        }
        assert_eq!(nlink(&mut fs, a), 62);
        let mut fs = remount(fs, cfg);
        assert_eq!([ROOT, a, b].map(|d| nlink(&mut fs, d)), [4, 62, 2]);
        fs.rmdir(a, "sub-007").unwrap();
        assert_eq!(nlink(&mut fs, a), 61);
        assert_clean(&mut fs);
    }
}

fn read_all<F: FileSystem>(fs: &mut F, ino: Ino) -> Result<Vec<u8>, FsError> {
    let mut buf = vec![0u8; 64];
    let n = fs.read(ino, 0, ReadInto::Bytes(&mut buf))?;
    buf.truncate(n as usize);
    Ok(buf)
}

#[test]
fn a_file_removed_while_open_lives_until_its_last_release() {
    let (mut fs, cfg) = fresh(Placement::Semantic, 64, OfsConfig::default());
    let f = fs.create(ROOT, "f").unwrap();
    fs.write(f, 0, 5, FileData::Bytes(b"hello")).unwrap();
    fs.open(f).unwrap();
    fs.open(f).unwrap();
    fs.unlink(ROOT, "f").unwrap();
    assert_eq!(fs.lookup(ROOT, "f").unwrap(), None);
    assert_eq!(nlink(&mut fs, f), 0, "no name left");
    // I/O on the open file still works
    fs.write(f, 5, 1, FileData::Bytes(b"!")).unwrap();
    assert_eq!(read_all(&mut fs, f).unwrap(), b"hello!");
    assert!(matches!(
        fs.link(f, ROOT, "again"),
        Err(FsError::NotFound(_))
    ));
    assert_clean(&mut fs);
    fs.release(f).unwrap();
    assert_eq!(read_all(&mut fs, f).unwrap(), b"hello!", "one open left");
    fs.release(f).unwrap();
    assert!(matches!(fs.getattr(f), Err(FsError::NotFound(_))));
    fs.release(f).unwrap();
    assert_clean(&mut fs);

    // A file renamed over while open, and one with another name: the same.
    let g = fs.create(ROOT, "g").unwrap();
    let h = fs.create(ROOT, "h").unwrap();
    fs.link(h, ROOT, "h2").unwrap();
    fs.open(g).unwrap();
    fs.open(h).unwrap();
    fs.rename(ROOT, "h", ROOT, "g").unwrap();
    assert_eq!(nlink(&mut fs, g), 0);
    assert_eq!(nlink(&mut fs, h), 2);
    fs.unlink(ROOT, "h2").unwrap();
    assert_eq!(nlink(&mut fs, h), 1, "a name is left: not held");
    fs.release(h).unwrap();
    assert_eq!(nlink(&mut fs, h), 1);

    // Still open at unmount: removed then.
    let mut fs = remount(fs, cfg);
    assert!(matches!(fs.getattr(g), Err(FsError::NotFound(_))));
    assert_eq!(fs.lookup(ROOT, "g").unwrap(), Some(h));
    assert_clean(&mut fs);

    // Still open at a crash: an orphan, which the repair at mount removes.
    let k = fs.create(ROOT, "k").unwrap();
    fs.write(k, 0, 3, FileData::Bytes(b"abc")).unwrap();
    fs.open(k).unwrap();
    fs.unlink(ROOT, "k").unwrap();
    fs.sync().unwrap();
    let dev = fs.abandon().close().unwrap();
    let mut fs = ofs::Ofs::mount(ObjectStore::open(dev, cfg).unwrap()).unwrap();
    assert_eq!(fs.ofs_counters().repairs, 1);
    assert!(matches!(fs.getattr(k), Err(FsError::NotFound(_))));
    assert_clean(&mut fs);
}

#[test]
fn special_files_keep_their_kind_owner_and_device_number() {
    use vfs::{FileKind, Owner, Special};
    let (mut fs, cfg) = fresh(Placement::Semantic, 64, OfsConfig::default());
    let owner = Owner {
        perm: 0o640,
        uid: 12,
        gid: 34,
    };
    let mut made = Vec::new();
    for (name, kind, rdev) in [
        ("fifo", Special::Fifo, 99),
        ("sock", Special::Socket, 0),
        ("chr", Special::CharDevice, (1 << 8) | 3),
        ("blk", Special::BlockDevice, u64::MAX - 5),
    ] {
        let ino = fs.mknod(ROOT, name, kind, rdev, owner).unwrap();
        let rdev = if matches!(kind, Special::CharDevice | Special::BlockDevice) {
            rdev
        } else {
            0
        };
        made.push((name, ino, kind, rdev));
    }
    assert!(matches!(
        fs.mknod(ROOT, "fifo", Special::Fifo, 0, owner),
        Err(FsError::Exists(_))
    ));
    assert!(matches!(
        fs.create_as(ROOT, "x", FileKind::Special(Special::Fifo), owner),
        Err(FsError::Invalid(_))
    ));
    let chr = made[2].1;
    assert!(matches!(
        fs.write(chr, 0, 1, FileData::Bytes(b"x")),
        Err(FsError::Invalid(_))
    ));
    assert!(matches!(fs.rmdir(ROOT, "chr"), Err(FsError::NotDir(_))));
    let mut fs = remount(fs, cfg);
    for (name, ino, kind, rdev) in made {
        assert_eq!(fs.lookup(ROOT, name).unwrap(), Some(ino));
        let a = fs.getattr(ino).unwrap();
        assert_eq!(
            (a.kind, a.size, a.perm, a.uid, a.gid, a.nlink, a.rdev),
            (FileKind::Special(kind), 0, 0o640, 12, 34, 1, rdev),
            "{name}"
        );
    }
    fs.link(chr, ROOT, "chr2").unwrap();
    fs.rename(ROOT, "chr2", ROOT, "fifo").unwrap();
    fs.unlink(ROOT, "chr").unwrap();
    fs.unlink(ROOT, "sock").unwrap();
    assert_clean(&mut fs);
    let mut names: Vec<String> = fs.readdir(ROOT).unwrap().into_iter().map(|e| e.0).collect();
    names.sort();
    assert_eq!(names, ["blk", "fifo"]);
    assert_eq!(fs.getattr(chr).unwrap().rdev, (1 << 8) | 3);
}

#[test]
fn rename_chmod_and_links_move_the_change_time_in_every_layout() {
    use vfs::SetAttr;
    for inode_objects in [false, true] {
        let config = OfsConfig {
            inode_objects,
            ..OfsConfig::default()
        };
        let (mut fs, _) = fresh(Placement::Semantic, 64, config);
        let f = fs.create(ROOT, "f").unwrap();
        let d = fs.mkdir(ROOT, "d").unwrap();
        let mut t = fs.now() + 1_000_000_000;
        let mut ctime_moves =
            |fs: &mut ofs::Ofs<_>, ino: Ino, what: &str, op: &dyn Fn(&mut ofs::Ofs<_>)| {
                t += 1_000_000_000;
                fs.set_time(t);
                op(fs);
                let c = fs.getattr(ino).unwrap().ctime_ns;
                assert!(
                    c >= t,
                    "{what} (inode_objects {inode_objects}): ctime {c} < {t}"
                );
            };
        ctime_moves(&mut fs, f, "rename of a file", &|fs| {
            fs.rename(ROOT, "f", d, "g").unwrap()
        });
        ctime_moves(&mut fs, f, "rename in place", &|fs| {
            fs.rename(d, "g", d, "h").unwrap()
        });
        ctime_moves(&mut fs, d, "rename of a directory", &|fs| {
            fs.rename(ROOT, "d", ROOT, "e").unwrap()
        });
        ctime_moves(&mut fs, f, "chmod", &|fs| {
            fs.setattr(
                f,
                SetAttr {
                    perm: Some(0o600),
                    ..SetAttr::default()
                },
            )
            .unwrap();
        });
        ctime_moves(&mut fs, f, "link", &|fs| fs.link(f, ROOT, "f2").unwrap());
        ctime_moves(&mut fs, f, "unlink of one name", &|fs| {
            fs.unlink(ROOT, "f2").unwrap()
        });
        assert_clean(&mut fs);
    }
}

#[test]
fn an_interrupted_xattr_removal_never_brings_an_older_value_back() {
    use ofs::layout::{data_oid, xattr_slot_bytes, ATTR_XATTR_FIRST};
    use osd::{Attr, AttrValue, Osd};
    use vfs::XattrMode;
    // docs/RELIABILITY.md, finding 41: removing `user.b` from slot 1 moves the last slot
    // (`user.c`) into slot 1 and then clears slot 2; the onode reached flash between the two
    // writes, so `user.c` stood in slots 1 and 2 after the crash. A later set changed slot 1
    // only, a later removal of `user.a` moved the stale slot 2 into slot 0, and reads found
    // `user.c`'s older value there.
    let (mut fs, cfg) = fresh(Placement::Semantic, 64, OfsConfig::default());
    let f = fs.create(ROOT, "f").unwrap();
    for (n, v) in [("user.a", b"1"), ("user.b", b"2"), ("user.c", b"3")] {
        fs.setxattr(f, n, v, XattrMode::Any).unwrap();
    }
    let slot = |s: u16| Attr::User(ATTR_XATTR_FIRST + s);
    fs.store_mut()
        .set_attr(
            data_oid(f),
            slot(1),
            AttrValue::Bytes(xattr_slot_bytes("user.c", b"3")),
        )
        .unwrap();
    // The state a crash between the two writes leaves, made durable.
    let mut fs = remount(fs, cfg);
    assert_eq!(
        fs.getxattr(f, "user.c").unwrap().as_deref(),
        Some(&b"3"[..])
    );
    assert_eq!(fs.getxattr(f, "user.b").unwrap(), None);
    fs.setxattr(f, "user.c", b"4", XattrMode::Any).unwrap();
    fs.removexattr(f, "user.a").unwrap();
    assert_eq!(
        fs.getxattr(f, "user.c").unwrap().as_deref(),
        Some(&b"4"[..])
    );
    assert_eq!(fs.listxattr(f).unwrap(), ["user.c"]);
    // The settled slots: one copy, and the slots consecutive again.
    let held: Vec<AttrValue> = (0..3)
        .map(|s| fs.store_mut().get_attr(data_oid(f), slot(s)).unwrap())
        .collect();
    assert_eq!(
        held,
        [
            AttrValue::Bytes(xattr_slot_bytes("user.c", b"4")),
            AttrValue::Absent,
            AttrValue::Absent
        ]
    );
    let mut fs = remount(fs, cfg);
    assert_eq!(
        fs.getxattr(f, "user.c").unwrap().as_deref(),
        Some(&b"4"[..])
    );
    fs.removexattr(f, "user.c").unwrap();
    assert_eq!(fs.getxattr(f, "user.c").unwrap(), None);
    assert_eq!(
        fs.removexattr(f, "user.c"),
        Err(FsError::NotFound("user.c".into()))
    );
    assert_clean(&mut fs);
}
