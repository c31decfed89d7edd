//! The layout options (OSCM-11 V-D: inode objects with and without embedding, directory entries
//! as objects), the superblock that keeps them, fingerprint mode, and the FLUSH mapping.

mod common;

use ofs::layout::{data_oid, dirent_oid, inode_oid, role, ObjectRole, PARTITION};
use ofs::{Ofs, OfsConfig};
use osd::store::OsdStats;
use osd::{Attr, AttrValue, ObjectStore, Osd, Placement};
use vfs::{FileData, FileSystem, FsError, ReadInto, ROOT};

const FILES: usize = 40;

/// Makes a directory of files with a little data each; returns the objects of the partition
/// by role (data, inode, entry) and the store's counters.
fn populate(
    config: OfsConfig,
) -> (
    Ofs<osd::ObjectStore<flash::fault::Faulty<flash::Nand>>>,
    [usize; 3],
    OsdStats,
) {
    let (mut fs, cfg) = common::fresh(Placement::Semantic, 64, config);
    let d = fs.mkdir(ROOT, "dir").unwrap();
    for i in 0..FILES {
        let f = fs.create(d, &format!("some-file-{i}")).unwrap();
        fs.write(f, 0, 100, FileData::Bytes(&[i as u8; 100]))
            .unwrap();
    }
    fs.sync().unwrap();
    let stats = fs.store().stats();
    let mut fs = common::remount(fs, cfg);
    let mut roles = [0usize; 3];
    let (ids, _) = fs.store_mut().list(PARTITION, 0, 10_000).unwrap();
    for id in ids {
        match role(id) {
            ObjectRole::Data(_) => roles[0] += 1,
            ObjectRole::Inode(_) => roles[1] += 1,
            ObjectRole::Dirent(_) => roles[2] += 1,
            ObjectRole::Unknown => panic!("unknown object {id:?}"),
        }
    }
    common::assert_clean(&mut fs);
    assert_eq!(fs.config().inode_objects, config.inode_objects);
    assert_eq!(fs.config().dirent_objects, config.dirent_objects);
    (fs, roles, stats)
}

fn u64_attr<F: flash::Flash>(fs: &mut Ofs<osd::ObjectStore<F>>, oid: osd::Oid, a: Attr) -> u64 {
    match fs.store_mut().get_attr(oid, a).unwrap() {
        AttrValue::U64(v) => v,
        v => panic!("{v:?}"),
    }
}

#[test]
fn default_layout_is_one_object_per_inode() {
    let (mut fs, roles, _) = populate(OfsConfig::default());
    assert_eq!(roles, [FILES + 2, 0, 0]);
    let d = fs.lookup(ROOT, "dir").unwrap().unwrap();
    // The directory is one small object: its entries, not a whole bucket block.
    let len = u64_attr(&mut fs, data_oid(d), Attr::LogicalLength);
    assert!(
        len < 4096 && len > (FILES * 20) as u64,
        "directory of {len} bytes"
    );
}

#[test]
fn inode_objects_are_embedded_in_their_onodes() {
    let (mut embedded, roles, with) = populate(OfsConfig {
        inode_objects: true,
        ..OfsConfig::default()
    });
    assert_eq!(roles, [FILES + 2, FILES + 2, 0]);
    let (mut apart, _, without) = populate(OfsConfig {
        inode_objects: true,
        embed_inodes: false,
        ..OfsConfig::default()
    });
    let f = embedded.lookup(ROOT, "dir").unwrap().unwrap() + 1;
    assert_eq!(
        embedded
            .store_mut()
            .get_attr(inode_oid(f), Attr::InodeEmbedded)
            .unwrap(),
        AttrValue::Bool(true)
    );
    assert_eq!(
        u64_attr(&mut embedded, inode_oid(f), Attr::UsedCapacity),
        0,
        "an embedded inode takes no data unit"
    );
    assert!(u64_attr(&mut apart, inode_oid(f), Attr::UsedCapacity) > 0);
    // OSCM-11 Table II: without embedding every inode object costs page writes.
    // (Data units and small-object pages: the store packs small objects together.)
    let pages = |s: &OsdStats| s.data_units_written + s.small_pages_written;
    assert!(
        pages(&without) > pages(&with),
        "{} data pages written without embedding, {} with",
        pages(&without),
        pages(&with)
    );
    // Both read the same.
    for fs in [&mut embedded, &mut apart] {
        assert_eq!(fs.stat(f).unwrap().kind, vfs::FileKind::File);
        let mut b = [0u8; 100];
        assert_eq!(fs.read(f, 0, ReadInto::Bytes(&mut b)).unwrap(), 100);
    }
}

#[test]
fn entry_objects_hold_the_names() {
    let (mut packed, _, _) = populate(OfsConfig::default());
    let (mut apart, roles, _) = populate(OfsConfig {
        dirent_objects: true,
        ..OfsConfig::default()
    });
    assert_eq!(roles, [FILES + 2, 0, FILES + 1]);
    let d = apart.lookup(ROOT, "dir").unwrap().unwrap();
    let f = apart.lookup(d, "some-file-7").unwrap().unwrap();
    assert!(u64_attr(&mut apart, dirent_oid(f), Attr::LogicalLength) > 0);
    // The directory object holds hashes and inode numbers only: shorter than packed entries;
    // the size stat reports does not depend on where names are kept.
    let short = u64_attr(&mut apart, data_oid(d), Attr::LogicalLength);
    let long = u64_attr(&mut packed, data_oid(d), Attr::LogicalLength);
    assert!(short < long, "{short} vs {long}");
    assert_eq!(apart.stat(d).unwrap().size, packed.stat(d).unwrap().size);
    assert_eq!(apart.readdir(d).unwrap(), packed.readdir(d).unwrap());
    apart.unlink(d, "some-file-7").unwrap();
    assert!(matches!(
        apart
            .store_mut()
            .get_attr(dirent_oid(f), Attr::LogicalLength),
        Err(osd::OsdError::NotFound(_))
    ));
    common::assert_clean(&mut apart);
}

#[test]
fn format_and_mount_refuse_what_they_cannot_use() {
    let nand = || flash::Nand::in_memory(common::device(32)).unwrap();
    let cfg = common::store_config(Placement::Semantic, 64);
    let bad = OfsConfig {
        dir_block_bytes: 1000,
        ..OfsConfig::default()
    };
    let store = ObjectStore::format(nand(), cfg).unwrap();
    assert!(matches!(Ofs::format(store, bad), Err(FsError::Invalid(_))));
    let store = ObjectStore::format(nand(), cfg).unwrap();
    assert!(matches!(Ofs::mount(store), Err(FsError::Invalid(_))));
    let store = ObjectStore::format(nand(), cfg).unwrap();
    let fs = Ofs::format(store, OfsConfig::default()).unwrap();
    let store = fs.unmount().unwrap();
    assert!(matches!(
        Ofs::format(store, OfsConfig::default()),
        Err(FsError::Exists(_))
    ));
}

#[test]
fn names_follow_the_placement() {
    let (fs, _) = common::fresh(Placement::Semantic, 32, OfsConfig::default());
    assert_eq!(fs.name(), "OFS");
    let (fs, _) = common::fresh(Placement::One, 32, OfsConfig::default());
    assert_eq!(fs.name(), "OFS-ONE");
    let (fs, _) = common::fresh(Placement::SplitAtime, 32, OfsConfig::default());
    assert_eq!(fs.name(), "OFS-split+atime");
}

#[test]
fn fingerprint_mode_does_the_io() {
    let (mut fs, _) = common::fresh(Placement::Semantic, 64, OfsConfig::default());
    let f = fs.create(ROOT, "big").unwrap();
    for k in 0..64u64 {
        fs.write(f, k * 16384, 16384, FileData::Token(k + 1))
            .unwrap();
    }
    assert_eq!(fs.stat(f).unwrap().size, 64 * 16384);
    fs.sync().unwrap();
    let before = fs.store().stats().data_units_read;
    assert_eq!(
        fs.read(f, 1000, ReadInto::Discard(1 << 20)).unwrap(),
        (1 << 20) - 1000
    );
    let units = fs.store().stats().data_units_read - before;
    assert!(units >= 256, "a 1 MiB fingerprint read read {units} units");
    assert_eq!(fs.read(f, 64 * 16384, ReadInto::Discard(10)).unwrap(), 0);
    let d = fs.mkdir(ROOT, "d").unwrap();
    assert!(matches!(
        fs.write(d, 0, 5, FileData::Token(1)),
        Err(FsError::IsDir(_))
    ));
}

#[test]
fn fsync_and_sync_are_flushes() {
    let (mut fs, _) = common::fresh(Placement::Semantic, 32, OfsConfig::default());
    let f = fs.create(ROOT, "f").unwrap();
    fs.write(f, 0, 3, FileData::Bytes(b"abc")).unwrap();
    let flushes = fs.ofs_counters().flushes;
    let written = |fs: &Ofs<osd::ObjectStore<flash::fault::Faulty<flash::Nand>>>| {
        let s = fs.store().stats();
        s.data_units_written + s.small_pages_written
    };
    let pages = written(&fs);
    fs.fsync(f, true).unwrap();
    assert_eq!(fs.ofs_counters().flushes, flushes + 1);
    assert!(written(&fs) > pages, "fdatasync wrote nothing");
    fs.fsync(f, false).unwrap();
    fs.sync().unwrap();
    assert_eq!(fs.ofs_counters().flushes, flushes + 3);
    assert!(matches!(fs.fsync(999, false), Err(FsError::NotFound(_))));
    // The data is on flash: a crash now keeps it.
    let cfg = *fs.store().config();
    let dev = fs.abandon().crash();
    let mut fs = Ofs::mount(ObjectStore::open(dev, cfg).unwrap()).unwrap();
    let mut b = [0u8; 3];
    assert_eq!(fs.read(f, 0, ReadInto::Bytes(&mut b)).unwrap(), 3);
    assert_eq!(&b, b"abc");
}
