//! Directories: hashed lookup in a large directory reads one bucket (asserted on the store's
//! counters), the tree survives remount, and damaged directory bytes are reported as
//! corruption, never a panic.

mod common;

use ofs::layout::{data_oid, ATTR_INODE};
use ofs::OfsConfig;
use osd::{Attr, AttrValue, Osd, Placement};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use vfs::{FileData, FileSystem, FsError, ReadInto, ROOT};

const FILES: usize = 5000;

fn name(i: usize) -> String {
    format!("file-{i:05}.dat")
}

/// Creates `FILES` files in the root, then looks names up and counts the units read.
fn large_directory(config: OfsConfig, units_per_lookup: u64) {
    // Entry objects take a write unit each until the store packs small objects.
    let blocks = if config.dirent_objects { 512 } else { 128 };
    let (mut fs, cfg) = common::fresh(Placement::Semantic, blocks, config);
    for i in 0..FILES {
        fs.create(ROOT, &name(i)).unwrap();
    }
    fs.sync().unwrap();
    let block = fs.config().dir_block_bytes as u64;
    let dir_len = match fs
        .store_mut()
        .get_attr(data_oid(ROOT), Attr::LogicalLength)
        .unwrap()
    {
        AttrValue::U64(l) => l,
        v => panic!("{v:?}"),
    };
    let buckets = dir_len / block;
    assert!(buckets >= 16, "only {buckets} buckets for {FILES} entries");

    // Remount, so that nothing of the directory is buffered or cached.
    let mut fs = common::remount(fs, cfg);
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let lookups = 200u64;
    let before = fs.store().stats();
    let buckets_before = fs.ofs_counters().dir_buckets_read;
    for k in 0..lookups {
        let i = rng.gen_range(0..FILES + 500);
        let got = fs.lookup(ROOT, &name(i)).unwrap();
        assert_eq!(got.is_some(), i < FILES, "lookup #{k} of {}", name(i));
    }
    let after = fs.store().stats();
    let units = after.data_units_read - before.data_units_read;
    assert_eq!(fs.ofs_counters().dir_buckets_read - buckets_before, lookups);
    assert!(
        units <= lookups * units_per_lookup,
        "{lookups} lookups read {units} data units"
    );
    assert!(
        units * 8 < lookups * buckets,
        "lookups read {units} units; a scan would read {}",
        lookups * buckets
    );

    // A listing reads every bucket, and finds every name.
    let names = fs.readdir(ROOT).unwrap();
    assert_eq!(names.len(), FILES);
    assert_eq!(names[0].0, name(0));
    assert_eq!(fs.stat(ROOT).unwrap().size, 5000 * (14 + 14));

    // Removing most of them keeps the rest reachable (directories do not shrink).
    for i in (0..FILES).filter(|i| i % 5 != 0) {
        fs.unlink(ROOT, &name(i)).unwrap();
    }
    assert_eq!(fs.readdir(ROOT).unwrap().len(), FILES / 5);
    assert!(fs.lookup(ROOT, &name(10)).unwrap().is_some());
    assert!(fs.lookup(ROOT, &name(11)).unwrap().is_none());
    common::assert_clean(&mut fs);
}

#[test]
fn lookup_in_a_large_directory_reads_one_bucket() {
    large_directory(OfsConfig::default(), 1);
}

#[test]
fn lookup_with_entry_objects_reads_a_bucket_and_an_entry() {
    large_directory(
        OfsConfig {
            dirent_objects: true,
            ..OfsConfig::default()
        },
        2,
    );
}

#[test]
fn the_tree_survives_remount() {
    let (mut fs, cfg) = common::fresh(
        Placement::One,
        64,
        OfsConfig {
            dir_block_bytes: 512,
            ..OfsConfig::default()
        },
    );
    let a = fs.mkdir(ROOT, "a").unwrap();
    let b = fs.mkdir(a, "b").unwrap();
    let mut files = Vec::new();
    for i in 0..100 {
        let f = fs.create(if i % 2 == 0 { a } else { b }, &name(i)).unwrap();
        let data = vec![i as u8; 100 * i + 1];
        fs.write(f, 0, data.len() as u64, FileData::Bytes(&data))
            .unwrap();
        files.push((f, data));
    }
    let next = fs.next_ino();
    let mut fs = common::remount(fs, cfg);
    assert_eq!(fs.next_ino(), next, "the inode allocator survives");
    assert_eq!(fs.lookup(ROOT, "a").unwrap(), Some(a));
    assert_eq!(fs.lookup(a, "b").unwrap(), Some(b));
    assert_eq!(fs.readdir(b).unwrap().len(), 50);
    for (i, (f, data)) in files.iter().enumerate() {
        let dir = if i % 2 == 0 { a } else { b };
        assert_eq!(fs.lookup(dir, &name(i)).unwrap(), Some(*f));
        let mut back = vec![0u8; data.len()];
        assert_eq!(
            fs.read(*f, 0, ReadInto::Bytes(&mut back)).unwrap(),
            data.len() as u64
        );
        assert_eq!(&back, data);
    }
    let new = fs.create(ROOT, "new").unwrap();
    assert_eq!(new, next);
    assert_eq!(fs.ofs_counters().repairs, 0);
    common::assert_clean(&mut fs);
}

fn is_corrupted<T: std::fmt::Debug>(r: Result<T, FsError>) -> bool {
    matches!(r, Err(FsError::Corrupted(_)))
}

#[test]
fn damaged_directory_bytes_are_corruption() {
    let (mut fs, _) = common::fresh(Placement::Semantic, 64, OfsConfig::default());
    let d = fs.mkdir(ROOT, "d").unwrap();
    for i in 0..20 {
        fs.create(d, &name(i)).unwrap();
    }
    // Flip a byte inside the bucket, behind OFS's back.
    let oid = data_oid(d);
    let mut b = [0u8; 1];
    fs.store_mut().read(oid, 40, &mut b).unwrap();
    fs.store_mut().write(oid, 40, &[b[0] ^ 0x10]).unwrap();
    assert!(is_corrupted(fs.lookup(d, &name(3))));
    assert!(is_corrupted(fs.readdir(d)));
    assert!(is_corrupted(fs.create(d, "x")));
    assert!(is_corrupted(fs.unlink(d, &name(3))));
    let problems = fs.check().unwrap();
    assert!(
        problems.iter().any(|p| p.contains("unreadable")),
        "{problems:?}"
    );
    // The rest of the tree still works.
    fs.create(ROOT, "fine").unwrap();

    // A directory whose length is not a whole number of buckets.
    let e = fs.mkdir(ROOT, "e").unwrap();
    fs.store_mut().write(data_oid(e), 5000, b"junk").unwrap();
    assert!(is_corrupted(fs.lookup(e, "x")));

    // A damaged inode record (the inode table must not have it cached: remount).
    let f = fs.create(ROOT, "f").unwrap();
    fs.store_mut()
        .set_attr(data_oid(f), ATTR_INODE, AttrValue::Bytes(vec![1, 2, 3]))
        .unwrap();
    fs.store_mut().flush(osd::FlushScope::Device).unwrap();
    let store = fs.abandon();
    let cfg = *store.config();
    let mut fs = ofs::Ofs::mount(osd::ObjectStore::open(store.crash(), cfg).unwrap()).unwrap();
    assert!(is_corrupted(fs.stat(f)));
    // The unclean mount repaired what it could, and left the unreadable directory and what it
    // may hold alone.
    assert_eq!(fs.ofs_counters().repairs, 1);
    assert!(is_corrupted(fs.readdir(d)));
    assert!(fs.lookup(ROOT, "fine").unwrap().is_some());
}

/// Random damage to directory objects: every answer is either corruption or right (damage to the
/// unused end of a bucket harms nothing), and nothing panics.
#[test]
fn random_directory_damage_never_panics() {
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    let mut noticed = 0;
    for round in 0..40 {
        let config = OfsConfig {
            dirent_objects: round % 2 == 1,
            dir_block_bytes: 512,
            ..OfsConfig::default()
        };
        let (mut fs, _) = common::fresh(Placement::Semantic, 32, config);
        let d = fs.mkdir(ROOT, "d").unwrap();
        for i in 0..60 {
            fs.create(d, &name(i)).unwrap();
        }
        let oid = data_oid(d);
        let len = match fs.store_mut().get_attr(oid, Attr::LogicalLength).unwrap() {
            AttrValue::U64(l) => l,
            v => panic!("{v:?}"),
        };
        for _ in 0..rng.gen_range(1..4) {
            let at = rng.gen_range(0..len);
            let mut b = [0u8; 1];
            fs.store_mut().read(oid, at, &mut b).unwrap();
            let bit = 1u8 << rng.gen_range(0..8);
            fs.store_mut().write(oid, at, &[b[0] ^ bit]).unwrap();
        }
        let mut corrupted = 0;
        for i in 0..70 {
            match fs.lookup(d, &name(i)) {
                Err(FsError::Corrupted(_)) => corrupted += 1,
                Ok(found) => assert_eq!(found.is_some(), i < 60, "round {round}: {}", name(i)),
                Err(e) => panic!("round {round}: lookup: {e}"),
            }
        }
        match fs.readdir(d) {
            Err(FsError::Corrupted(_)) => corrupted += 1,
            Ok(names) => assert_eq!(names.len(), 60, "round {round}"),
            Err(e) => panic!("round {round}: readdir: {e}"),
        }
        let _ = fs.create(d, "new");
        let _ = fs.unlink(d, &name(5));
        let _ = fs.rmdir(ROOT, "d");
        let problems = fs.check().unwrap();
        assert_eq!(
            corrupted > 0,
            !problems.is_empty(),
            "round {round}: {problems:?}"
        );
        noticed += (corrupted > 0) as u32;
    }
    assert!(
        noticed > 20,
        "damage noticed in only {noticed} of 40 rounds"
    );
}

/// Puts the entry for `name` of directory `d` into bucket `wrong` as well, and, unless `keep`,
/// takes it out of its own bucket; writes behind OFS's back and flushes.
fn misplace<F: flash::Flash>(
    fs: &mut ofs::Ofs<osd::ObjectStore<F>>,
    d: vfs::Ino,
    name: &str,
    keep: bool,
) {
    use ofs::dir::{bucket_of, name_hash, Bucket};
    let block = fs.config().dir_block_bytes as u64;
    let oid = data_oid(d);
    let len = match fs.store_mut().get_attr(oid, Attr::LogicalLength).unwrap() {
        AttrValue::U64(l) => l,
        v => panic!("{v:?}"),
    };
    let n = len / block;
    assert!(n >= 2);
    let read = |fs: &mut ofs::Ofs<osd::ObjectStore<F>>, b: u64| {
        let mut buf = vec![0u8; block as usize];
        fs.store_mut().read(oid, b * block, &mut buf).unwrap();
        Bucket::decode(&buf, true, &|| "test".into()).unwrap()
    };
    let right = bucket_of(name_hash(name), n);
    let wrong = (right + 1) % n;
    let mut home = read(fs, right);
    let i = home.entries.iter().position(|e| e.name == name).unwrap();
    let e = home.entries[i].clone();
    let mut other = read(fs, wrong);
    other.entries.push(e);
    if !keep {
        home.entries.remove(i);
    }
    for (b, bucket) in [(right, home), (wrong, other)] {
        let mut bytes = bucket.encode();
        bytes.resize(block as usize, 0);
        fs.store_mut().write(oid, b * block, &bytes).unwrap();
    }
    fs.store_mut().flush(osd::FlushScope::Device).unwrap();
}

/// Mount-time repair of what a split cut short leaves (a copy in the wrong bucket too), and of
/// an entry only in a wrong bucket: both end with the entry once, in its own bucket.
#[test]
fn repair_puts_misplaced_entries_home() {
    for keep in [true, false] {
        let config = OfsConfig {
            dir_block_bytes: 512,
            ..OfsConfig::default()
        };
        let (mut fs, cfg) = common::fresh(Placement::Semantic, 64, config);
        let d = fs.mkdir(ROOT, "d").unwrap();
        for i in 0..80 {
            fs.create(d, &name(i)).unwrap();
        }
        let x = fs.lookup(d, &name(17)).unwrap().unwrap();
        fs.sync().unwrap();
        misplace(&mut fs, d, &name(17), keep);
        assert!(!fs.check().unwrap().is_empty(), "keep={keep}");
        let dev = fs.abandon().crash();
        let mut fs = ofs::Ofs::mount(osd::ObjectStore::open(dev, cfg).unwrap()).unwrap();
        assert!(fs.ofs_counters().repair_fixes >= 1);
        assert_eq!(fs.lookup(d, &name(17)).unwrap(), Some(x), "keep={keep}");
        assert_eq!(fs.readdir(d).unwrap().len(), 80);
        common::assert_clean(&mut fs);
    }
}
