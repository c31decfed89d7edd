//! The block file system's behaviour one feature at a time: persistence, discard, the
//! allocator, fdatasync's metadata writes, fingerprint mode, fsck, damaged images, crashes.

mod common;

use blockfs::{BlockFs, BlockFsConfig};
use common::*;
use ftl::{Data, Ftl};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use vfs::{FileData, FileSystem, FsError, ReadInto, ROOT};

fn cfg() -> BlockFsConfig {
    BlockFsConfig::default()
}

#[test]
fn files_and_directories_survive_unmount_and_remount() {
    let mut fs = format(cfg());
    let d = fs.mkdir(ROOT, "docs").unwrap();
    let a = fs.create(d, "a").unwrap();
    let b = fs.create(ROOT, "b").unwrap();
    let da = pattern(1, 0, 10_000);
    write(&mut fs, a, 0, &da);
    write(&mut fs, b, 5000, &pattern(2, 5000, 300));
    // Many entries: the directory grows past one block.
    for k in 0..300 {
        fs.create(d, &format!("file-with-a-longish-name-{k:04}"))
            .unwrap();
    }
    assert!(fs.check().unwrap().is_empty());
    let mut fs = remount(fs, cfg());
    assert!(fs.problems().is_empty(), "{:?}", fs.problems());
    assert!(fs.was_clean());
    assert_eq!(fs.lookup(ROOT, "docs").unwrap(), Some(d));
    assert_eq!(read_all(&mut fs, a), da);
    let rb = read_all(&mut fs, b);
    assert_eq!(rb.len(), 5300);
    assert!(rb[..5000].iter().all(|&x| x == 0));
    assert_eq!(&rb[5000..], &pattern(2, 5000, 300)[..]);
    assert_eq!(fs.readdir(d).unwrap().len(), 301);
    assert!(fs.stat(d).unwrap().size > 4096);
    assert!(counter(&fs, "dir_blocks_read") >= 2);
    assert!(fs.check().unwrap().is_empty());
}

#[test]
fn unlink_discards_the_freed_blocks() {
    let mut fs = format(cfg());
    let f = fs.create(ROOT, "f").unwrap();
    write(&mut fs, f, 0, &pattern(3, 0, 64 * 4096));
    fs.sync().unwrap();
    let trims = fs.ftl().stats().trims;
    fs.unlink(ROOT, "f").unwrap();
    assert_eq!(counter(&fs, "discarded_blocks"), 64);
    assert!(fs.ftl().stats().trims > trims);
    assert!(fs.check().unwrap().is_empty());

    // With discard off, the FTL hears nothing of the delete.
    let off = BlockFsConfig {
        discard: false,
        ..cfg()
    };
    let mut fs = format(off);
    let f = fs.create(ROOT, "f").unwrap();
    write(&mut fs, f, 0, &pattern(3, 0, 64 * 4096));
    let trims = fs.ftl().stats().trims;
    fs.unlink(ROOT, "f").unwrap();
    assert_eq!(fs.ftl().stats().trims, trims);
    assert_eq!(counter(&fs, "discards"), 0);
}

#[test]
fn discard_trims_only_write_units_left_entirely_free() {
    // 1 KiB blocks on 4 KiB write units: four blocks share a unit.
    let small = BlockFsConfig {
        block_bytes: 1024,
        ..cfg()
    };
    let mut fs = format(small);
    let a = fs.create(ROOT, "a").unwrap();
    let b = fs.create(ROOT, "b").unwrap();
    write(&mut fs, a, 0, &pattern(1, 0, 2048)); // blocks 0-1 of a unit
    write(&mut fs, b, 0, &pattern(2, 0, 2048)); // blocks 2-3 of the same unit
    let ea = fs.extents(a).unwrap();
    let eb = fs.extents(b).unwrap();
    assert_eq!(eb[0].start, ea[0].start + 2, "b continues where a ended");
    fs.unlink(ROOT, "a").unwrap();
    assert_eq!(counter(&fs, "discards"), 0, "the unit still holds b");
    fs.unlink(ROOT, "b").unwrap();
    assert_eq!(
        counter(&fs, "discarded_blocks"),
        4,
        "now the whole unit is free"
    );
    assert!(fs.check().unwrap().is_empty());
}

#[test]
fn allocator_keeps_files_contiguous() {
    // Without preallocation: files laid out one after another, each growing from its end.
    let plain = BlockFsConfig {
        prealloc_max_bytes: 0,
        ..cfg()
    };
    let mut fs = format(plain);
    let a = fs.create(ROOT, "a").unwrap();
    let b = fs.create(ROOT, "b").unwrap();
    // Appends in 16 KiB pieces stay one extent.
    for k in 0..32u64 {
        write(&mut fs, a, k * 16384, &pattern(k, 0, 16384));
    }
    assert_eq!(fs.extents(a).unwrap().len(), 1);
    // The next file starts right after the first.
    write(&mut fs, b, 0, &pattern(9, 0, 40_000));
    let (ea, eb) = (fs.extents(a).unwrap(), fs.extents(b).unwrap());
    assert_eq!(eb.len(), 1);
    assert_eq!(eb[0].start, ea[0].start + ea[0].len);
    // A file that grows after another took the blocks after it continues right after those.
    write(&mut fs, a, 32 * 16384, &pattern(1, 0, 8192));
    let ea = fs.extents(a).unwrap();
    assert_eq!(ea.len(), 2);
    assert_eq!(ea[1].start, eb[0].start + eb[0].len);
    // Blocks freed by truncation are found again by the goal search.
    fs.truncate(a, 4096).unwrap();
    assert_eq!(
        fs.extents(a).unwrap(),
        vec![blockfs::inode::Extent { len: 1, ..ea[0] }]
    );
    write(&mut fs, a, 4096, &pattern(1, 0, 4096));
    assert_eq!(fs.extents(a).unwrap()[0].len, 2, "regrows in place");
    assert!(fs.check().unwrap().is_empty());

    // With preallocation (the default) the first file keeps room after it: the second
    // starts past that room, and the first grows into it.
    let mut fs = format(cfg());
    let a = fs.create(ROOT, "a").unwrap();
    let b = fs.create(ROOT, "b").unwrap();
    for k in 0..32u64 {
        write(&mut fs, a, k * 16384, &pattern(k, 0, 16384));
    }
    write(&mut fs, b, 0, &pattern(9, 0, 40_000));
    let (ea, eb) = (fs.extents(a).unwrap(), fs.extents(b).unwrap());
    assert!(eb[0].start > ea[0].start + ea[0].len, "room left after a");
    write(&mut fs, a, 32 * 16384, &pattern(1, 0, 8192));
    assert_eq!(fs.extents(a).unwrap().len(), 1, "grew into its window");
    assert!(fs.check().unwrap().is_empty());
    // The window is memory only: the bitmap on disk holds exactly the blocks in use.
    let mut fs = remount(fs, cfg());
    assert!(fs.check().unwrap().is_empty());
}

#[test]
fn preallocation_keeps_files_written_at_the_same_time_apart() {
    let run = |cfg: BlockFsConfig| {
        let mut fs = format(cfg);
        let files: Vec<u64> = (0..4)
            .map(|k| fs.create(ROOT, &format!("stream{k}")).unwrap())
            .collect();
        // Four writers append 128 KiB pieces in turn, 2 MiB each.
        for piece in 0..16u64 {
            for (k, &f) in files.iter().enumerate() {
                fs.write(f, piece * 131072, 131072, FileData::Token(k as u64))
                    .unwrap();
            }
        }
        assert!(fs.check().unwrap().is_empty());
        let extents: usize = files.iter().map(|&f| fs.extents(f).unwrap().len()).sum();
        let mut fs = remount(fs, cfg);
        assert!(fs.check().unwrap().is_empty());
        extents
    };
    // Windows of up to 1 MiB: the tiny device has no room for many of 8 MiB.
    let with = run(BlockFsConfig {
        prealloc_max_bytes: 1 << 20,
        ..cfg()
    });
    let without = run(BlockFsConfig {
        prealloc_max_bytes: 0,
        ..cfg()
    });
    assert_eq!(without, 64, "every piece its own extent");
    assert!(with <= 16, "{with} extents with preallocation");
}

#[test]
fn many_extents_spill_into_extent_blocks_and_survive_remount() {
    let mut fs = format(BlockFsConfig {
        prealloc_max_bytes: 0,
        ..cfg()
    });
    let a = fs.create(ROOT, "a").unwrap();
    let b = fs.create(ROOT, "b").unwrap();
    // Interleaved single-block appends: every block of a is its own extent.
    for k in 0..60u64 {
        write(&mut fs, a, k * 4096, &pattern(k, 0, 4096));
        write(&mut fs, b, k * 4096, &pattern(k + 100, 0, 4096));
    }
    assert_eq!(fs.extents(a).unwrap().len(), 60);
    assert!(fs.check().unwrap().is_empty());
    let before = read_all(&mut fs, a);
    let cfg = BlockFsConfig {
        prealloc_max_bytes: 0,
        ..cfg()
    };
    let mut fs = remount(fs, cfg);
    assert!(fs.problems().is_empty(), "{:?}", fs.problems());
    assert!(counter(&fs, "extent_blocks_read") >= 1);
    assert_eq!(read_all(&mut fs, a), before);
    // Shrinking back under the inode's capacity gives the extent block back.
    fs.truncate(a, 5 * 4096).unwrap();
    assert!(fs.check().unwrap().is_empty());
    let mut fs = remount(fs, cfg);
    assert!(fs.problems().is_empty(), "{:?}", fs.problems());
    assert_eq!(read_all(&mut fs, a), before[..5 * 4096]);
}

#[test]
fn fdatasync_writes_the_bitmap_and_inode_an_append_dirtied() {
    let mut fs = format(cfg());
    let f = fs.create(ROOT, "log").unwrap();
    fs.sync().unwrap();
    let before = fs.stats();
    for k in 0..8u64 {
        write(&mut fs, f, k * 131072, &pattern(k, 0, 131072));
        fs.fsync(f, true).unwrap();
    }
    let s = fs.stats();
    // Every 128 KiB append allocates: one bitmap block and one inode block per fdatasync.
    assert_eq!(s.bitmap_blocks_written - before.bitmap_blocks_written, 8);
    assert_eq!(s.inode_blocks_written - before.inode_blocks_written, 8);
    assert_eq!(s.dir_blocks_written, before.dir_blocks_written);
    // Overwriting in place changes neither: fdatasync writes no metadata.
    write(&mut fs, f, 0, &pattern(99, 0, 131072));
    fs.fsync(f, true).unwrap();
    assert_eq!(
        fs.stats().metadata_blocks_written(),
        s.metadata_blocks_written()
    );
    // fsync does write the inode for the new mtime.
    write(&mut fs, f, 0, &pattern(98, 0, 4096));
    fs.fsync(f, false).unwrap();
    assert_eq!(fs.stats().inode_blocks_written, s.inode_blocks_written + 1);

    // The OSSD-13 VI-B variant: the inode goes elsewhere, only the bitmap reaches the device.
    let paper = BlockFsConfig {
        fdatasync_writes_inode: false,
        ..cfg()
    };
    let mut fs = format(paper);
    let f = fs.create(ROOT, "log").unwrap();
    fs.sync().unwrap();
    let before = fs.stats();
    for k in 0..8u64 {
        write(&mut fs, f, k * 131072, &pattern(k, 0, 131072));
        fs.fsync(f, true).unwrap();
    }
    let s = fs.stats();
    assert_eq!(s.bitmap_blocks_written - before.bitmap_blocks_written, 8);
    assert_eq!(s.inode_blocks_written, before.inode_blocks_written);
}

#[test]
fn fsync_of_a_new_file_writes_its_directory_entry() {
    let mut fs = format(cfg());
    let d = fs.mkdir(ROOT, "d").unwrap();
    fs.sync().unwrap();
    let before = fs.stats();
    let f = fs.create(d, "new").unwrap();
    write(&mut fs, f, 0, b"hello");
    fs.fsync(f, true).unwrap();
    let s = fs.stats();
    assert!(s.dir_blocks_written > before.dir_blocks_written);
    // A crash now keeps the file: its entry, inode and bitmaps were written.
    let mut fs = crash_and_mount(fs, cfg()).unwrap();
    assert!(!fs.was_clean());
    assert!(fs.problems().is_empty(), "{:?}", fs.problems());
    let f = fs.lookup(d, "new").unwrap().unwrap();
    assert_eq!(read_all(&mut fs, f), b"hello");
}

#[test]
fn fingerprint_mode_writes_tokens_and_keeps_metadata_real() {
    let mut fs = format(cfg());
    let f = fs.create(ROOT, "big").unwrap();
    for k in 0..64u64 {
        fs.write(f, k * 131072, 131072, FileData::Token(k + 1))
            .unwrap();
    }
    assert_eq!(fs.stat(f).unwrap().size, 64 * 131072);
    assert_eq!(fs.read(f, 0, ReadInto::Discard(1 << 20)).unwrap(), 1 << 20);
    // Bytes cannot share the write units with fingerprints.
    let g = fs.create(ROOT, "small").unwrap();
    assert!(matches!(
        fs.write(g, 0, 3, FileData::Bytes(b"abc")),
        Err(FsError::Invalid(_))
    ));
    assert!(matches!(
        fs.read(f, 0, ReadInto::Bytes(&mut [0u8; 16])),
        Err(FsError::Invalid(_))
    ));
    fs.write(f, 100, 10, FileData::Token(7)).unwrap();
    fs.truncate(f, 1000).unwrap();
    let mut fs = remount(fs, cfg());
    assert!(fs.problems().is_empty(), "{:?}", fs.problems());
    assert_eq!(fs.stat(f).unwrap().size, 1000);
    assert!(fs.check().unwrap().is_empty());
}

#[test]
fn fsck_reports_a_damaged_block_bitmap_and_mount_goes_read_only() {
    let mut fs = format(cfg());
    let f = fs.create(ROOT, "f").unwrap();
    write(&mut fs, f, 0, &pattern(1, 0, 40_000));
    let first = fs.extents(f).unwrap()[0].start;
    let layout = *fs.layout();
    let (mut ftl, t) = fs.unmount().unwrap();
    // Clear the file's first block in the on-disk bitmap.
    let bb = layout.block_bitmap.start + first / layout.bits_per_block();
    let bit = first % layout.bits_per_block();
    let mut block = vec![0u8; 4096];
    ftl.read(t, bb as u64 * 4096, 4096, ftl::ReadOut::Bytes(&mut block))
        .unwrap();
    block[bit as usize / 8] &= !(1 << (bit % 8));
    ftl.write(t, bb as u64 * 4096, 4096, Data::Bytes(&block))
        .unwrap();
    let mut fs = BlockFs::mount(ftl, cfg(), t).unwrap();
    let found = fs.check().unwrap();
    assert!(
        found
            .iter()
            .any(|p| p.contains(&format!("block {first} of inode")) && p.contains("free")),
        "{found:?}"
    );
    assert!(matches!(fs.create(ROOT, "g"), Err(FsError::Corrupted(_))));
    // Reading still works.
    assert_eq!(read_all(&mut fs, f), pattern(1, 0, 40_000));
}

#[test]
fn mount_refuses_a_foreign_or_damaged_superblock() {
    let mut ftl = ftl();
    assert!(matches!(
        BlockFs::mount(ftl, cfg(), 0),
        Err(FsError::Corrupted(_))
    ));
    ftl = common::ftl();
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    let junk: Vec<u8> = (0..4096).map(|_| rng.gen()).collect();
    ftl.write(0, 0, 4096, Data::Bytes(&junk)).unwrap();
    assert!(matches!(
        BlockFs::mount(ftl, cfg(), 0),
        Err(FsError::Corrupted(_))
    ));
    // Fingerprint data where the superblock should be is no superblock either.
    let mut ftl = common::ftl();
    ftl.write(0, 0, 4096, Data::Token(3)).unwrap();
    assert!(matches!(
        BlockFs::mount(ftl, cfg(), 0),
        Err(FsError::Corrupted(_))
    ));
    // A superblock whose geometry exceeds the device.
    let fs = format(cfg());
    let (mut ftl, t) = fs.unmount().unwrap();
    let mut sb = vec![0u8; 4096];
    ftl.read(t, 0, 4096, ftl::ReadOut::Bytes(&mut sb)).unwrap();
    sb[16..20].copy_from_slice(&u32::MAX.to_le_bytes());
    ftl.write(t, 0, 4096, Data::Bytes(&sb)).unwrap();
    assert!(matches!(
        BlockFs::mount(ftl, cfg(), t),
        Err(FsError::Corrupted(_))
    ));
}

/// A populated image, unmounted: the FTL and the metadata blocks in use.
fn populated() -> (Ftl<flash::Nand>, Vec<u32>, u64) {
    let mut fs = format(cfg());
    let d = fs.mkdir(ROOT, "d").unwrap();
    for k in 0..40u64 {
        let dir = if k % 2 == 0 { ROOT } else { d };
        let f = fs.create(dir, &format!("f{k}")).unwrap();
        write(&mut fs, f, 0, &pattern(k, 0, 3000 + 500 * k as usize));
    }
    let a = fs.create(ROOT, "frag").unwrap();
    let b = fs.create(ROOT, "frag2").unwrap();
    for k in 0..40u64 {
        write(&mut fs, a, k * 4096, &pattern(k, 0, 4096));
        write(&mut fs, b, k * 4096, &pattern(k, 0, 4096));
    }
    let l = *fs.layout();
    let mut meta: Vec<u32> = (0..l.inode_table.start + 2).collect();
    meta.extend(l.meta_zone.start..l.meta_zone.start + 8);
    let (ftl, t) = fs.unmount().unwrap();
    (ftl, meta, t)
}

/// Exercises everything a damaged mount offers; none of it may panic.
fn poke(fs: &mut BlockFs<flash::Nand>) {
    let _ = fs.check();
    let mut stack = vec![ROOT];
    let mut seen = 0;
    while let Some(d) = stack.pop() {
        seen += 1;
        if seen > 200 {
            break;
        }
        let Ok(list) = fs.readdir(d) else { continue };
        for (name, ino) in list {
            let _ = fs.lookup(d, &name);
            if let Ok(st) = fs.stat(ino) {
                if st.kind == vfs::FileKind::Dir {
                    stack.push(ino);
                } else {
                    let mut buf = vec![0u8; st.size.min(1 << 20) as usize];
                    let _ = fs.read(ino, 0, ReadInto::Bytes(&mut buf));
                }
            }
        }
    }
    let _ = fs.create(ROOT, "x");
    let _ = fs.sync();
}

#[test]
fn mount_over_damaged_metadata_never_panics() {
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    for round in 0..60 {
        let (mut ftl, meta, t) = populated();
        for _ in 0..rng.gen_range(1..4) {
            let b = meta[rng.gen_range(0..meta.len())];
            let mut block = vec![0u8; 4096];
            ftl.read(t, b as u64 * 4096, 4096, ftl::ReadOut::Bytes(&mut block))
                .unwrap();
            match rng.gen_range(0..3) {
                0 => rng.fill(&mut block[..]),
                1 => {
                    for _ in 0..rng.gen_range(1..8) {
                        let i = rng.gen_range(0..4096);
                        block[i] ^= 1 << rng.gen_range(0..8);
                    }
                }
                _ => {
                    // Plausible but wrong numbers: a random 32-bit word overwritten.
                    let i = rng.gen_range(0..1023) * 4;
                    block[i..i + 4].copy_from_slice(&rng.gen::<u32>().to_le_bytes());
                }
            }
            ftl.write(t, b as u64 * 4096, 4096, Data::Bytes(&block))
                .unwrap();
        }
        match BlockFs::mount(ftl, cfg(), t) {
            Ok(mut fs) => poke(&mut fs),
            Err(FsError::Corrupted(_)) => {}
            Err(e) => panic!("round {round}: {e}"),
        }
    }
}

#[test]
fn mount_after_a_crash_never_panics_and_synced_state_is_whole() {
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    for round in 0..20 {
        let mut fs = format(cfg());
        let mut files = Vec::new();
        for k in 0..rng.gen_range(5..30) {
            let f = fs.create(ROOT, &format!("f{k}")).unwrap();
            write(&mut fs, f, 0, &pattern(k, 0, rng.gen_range(1..30_000)));
            files.push((format!("f{k}"), f));
            if rng.gen_bool(0.2) {
                fs.fsync(f, rng.gen()).unwrap();
            }
            if rng.gen_bool(0.1) {
                let (name, _) = files.swap_remove(rng.gen_range(0..files.len()));
                fs.unlink(ROOT, &name).unwrap();
            }
        }
        let synced = rng.gen_bool(0.5);
        if synced {
            fs.sync().unwrap();
        }
        let mut fs = crash_and_mount(fs, cfg()).unwrap();
        if synced {
            assert!(
                fs.problems().is_empty(),
                "round {round}: {:?}",
                fs.problems()
            );
            assert_eq!(fs.readdir(ROOT).unwrap().len(), files.len());
        }
        poke(&mut fs);
    }
}

#[test]
fn churn_of_four_times_the_space_with_gc_keeps_every_byte() {
    for (block_bytes, tokens, discard) in [
        (1024, true, true),
        (4096, false, false),
        (1024, false, true),
    ] {
        let cfg = BlockFsConfig {
            block_bytes,
            discard,
            ..cfg()
        };
        let mut fs = format(cfg);
        let bs = block_bytes as u64;
        let space = fs.free_data_blocks() as u64 * bs;
        let mut rng = ChaCha8Rng::seed_from_u64(block_bytes as u64 + tokens as u64);
        let mut files: Vec<(String, u64, u64, u64)> = Vec::new();
        let (mut used, mut written, mut next) = (0u64, 0u64, 0u64);
        while written < 4 * space {
            if used > space * 7 / 10 {
                let (name, _, size, _) = files.swap_remove(rng.gen_range(0..files.len()));
                fs.unlink(ROOT, &name).unwrap();
                used -= size.div_ceil(bs) * bs;
                continue;
            }
            next += 1;
            let name = format!("f{next}");
            let f = fs.create(ROOT, &name).unwrap();
            let size = rng.gen_range(1..200_000u64);
            let mut off = 0;
            while off < size {
                let n = (size - off).min(16384);
                let data = if tokens {
                    FileData::Token(next * 1000 + off)
                } else {
                    FileData::Bytes(&[])
                };
                match data {
                    FileData::Token(_) => fs.write(f, off, n, data).unwrap(),
                    FileData::Bytes(_) => write(&mut fs, f, off, &pattern(next, off, n as usize)),
                }
                off += n;
            }
            if rng.gen_bool(0.3) {
                fs.fsync(f, true).unwrap();
            }
            files.push((name, f, size, next));
            used += size.div_ceil(bs) * bs;
            written += size;
        }
        assert!(
            fs.ftl().fml().stats().gc_units_copied > 0 || discard,
            "GC ran"
        );
        assert!(fs.check().unwrap().is_empty());
        let mut fs = remount(fs, cfg);
        assert!(fs.check().unwrap().is_empty());
        for (_, f, size, seed) in &files {
            assert_eq!(fs.stat(*f).unwrap().size, *size);
            if !tokens {
                assert_eq!(read_all(&mut fs, *f), pattern(*seed, 0, *size as usize));
            }
        }
    }
}

#[test]
fn a_full_file_system_says_no_space_and_stays_consistent() {
    let mut fs = format(cfg());
    let mut k = 0;
    let err = loop {
        let f = match fs.create(ROOT, &format!("f{k}")) {
            Ok(f) => f,
            Err(e) => break e,
        };
        if let Err(e) = fs.write(f, 0, 1 << 20, FileData::Token(k)) {
            break e;
        }
        k += 1;
    };
    assert!(matches!(err, FsError::NoSpace(_)), "{err:?}");
    assert!(k > 5);
    assert!(fs.check().unwrap().is_empty(), "{:?}", fs.check());
    fs.unlink(ROOT, "f0").unwrap();
    let f = fs.create(ROOT, "again").unwrap();
    fs.write(f, 0, 1 << 20, FileData::Token(1)).unwrap();
    let mut fs = remount(fs, cfg());
    assert!(fs.check().unwrap().is_empty());
}
