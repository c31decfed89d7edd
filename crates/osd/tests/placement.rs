//! The placement and index claims of the seed papers, measured on small devices:
//! - seed 000 VI-C multi-stream write: objects larger than a virtual erase block written
//!   concurrently, some deleted, rewritten; `ossd` placement gives each its own update block,
//!   so deleting one frees whole blocks and GC copies next to nothing, unlike `one`;
//! - seed 000 VI-D hot/cold: whole-object rewrites with 90% of them on 10% of the objects;
//!   `ossd` separates hot from cold and copies fewer pages than `one`;
//! - seed 001 V-C largefile: extent mapping writes fewer index pages than per-page mapping when
//!   one large object is written sequentially and rewritten at random.

use flash::{preset, DeviceConfig, Nand};
use fml::FmlConfig;
use osd::{
    FlushScope, IndexMode, ObjectId, ObjectStore, Oid, Osd, OsdConfig, PartitionId, Placement,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const P: u64 = 0x10000;

/// RawSSD's ganging (16 KiB write units, 8 MiB virtual erase blocks) on 48 blocks per plane:
/// 96 virtual erase blocks, 768 MiB.
fn rawssd_small() -> DeviceConfig {
    let mut c = preset("rawssd").unwrap();
    c.geometry.blocks_per_plane = 48;
    c
}

fn store(placement: Placement, index_mode: IndexMode, device: DeviceConfig) -> ObjectStore<Nand> {
    let cfg = OsdConfig {
        placement,
        index_mode,
        fml: FmlConfig::for_blocks(device.gang.superblocks(&device.geometry)),
        ..OsdConfig::default()
    };
    let mut s = ObjectStore::format(Nand::in_memory(device).unwrap(), cfg).unwrap();
    s.create_partition(Some(PartitionId(P))).unwrap();
    s
}

fn oid(k: u64) -> Oid {
    Oid::new(P, P + k)
}

/// Seed 000 VI-C at small scale: 16 MiB objects, 6 written at a time in 256 KiB pieces
/// round-robin; each round deletes 6 random live objects first. Returns GC unit copies.
fn multi_stream(placement: Placement) -> u64 {
    let mut s = store(placement, IndexMode::Extent, rawssd_small());
    let object = 16u64 << 20;
    let piece = 256u64 << 10;
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let mut live: Vec<u64> = Vec::new();
    let mut next = 0u64;
    let mut token = 0;
    for round in 0..14 {
        if round >= 4 {
            for _ in 0..6 {
                let k = live.swap_remove(rng.gen_range(0..live.len()));
                s.remove(oid(k)).unwrap();
            }
        }
        let batch: Vec<u64> = (next..next + 6).collect();
        next += 6;
        for &k in &batch {
            s.create(PartitionId(P), Some(ObjectId(P + k))).unwrap();
            // The host says how large the object will be (a placement hint).
            s.set_attr(oid(k), osd::Attr::ExpectedSize, osd::AttrValue::U64(object))
                .unwrap();
        }
        for off in (0..object).step_by(piece as usize) {
            for &k in &batch {
                token += 1;
                s.write_token(oid(k), off, piece, token).unwrap();
            }
        }
        s.flush(FlushScope::Device).unwrap();
        live.extend(batch);
    }
    let report = s.fsck().unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    s.fml().stats().gc_units_copied
}

#[test]
fn multi_stream_ossd_copies_next_to_nothing() {
    let one = multi_stream(Placement::One);
    let ossd = multi_stream(Placement::Ossd);
    println!("multi-stream GC unit copies: one {one}, ossd {ossd}");
    assert!(
        one > 1000,
        "the benchmark must make `one` collect garbage (it copied {one})"
    );
    assert!(ossd * 20 < one, "ossd copied {ossd}, one {one}");
}

/// Seed 000 VI-D at quarter scale: 2,000 objects of 128 KiB on a 768 MiB device, whole-object
/// rewrites, 90% on 10% of the objects, 6x the data written.
fn hot_cold(placement: Placement) -> u64 {
    let mut s = store(placement, IndexMode::Extent, rawssd_small());
    let objects = 2000u64;
    let size = 128u64 << 10;
    let mut token = 0;
    for k in 0..objects {
        s.create(PartitionId(P), Some(ObjectId(P + k))).unwrap();
        token += 1;
        s.write_token(oid(k), 0, size, token).unwrap();
    }
    let mut rng = ChaCha8Rng::seed_from_u64(9);
    for _ in 0..objects * 6 {
        let k = if rng.gen_bool(0.9) {
            rng.gen_range(0..objects / 10)
        } else {
            rng.gen_range(objects / 10..objects)
        };
        token += 1;
        s.write_token(oid(k), 0, size, token).unwrap();
    }
    s.flush(FlushScope::Device).unwrap();
    let report = s.fsck().unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    s.fml().stats().gc_units_copied
}

#[test]
fn hot_cold_ossd_copies_fewer_pages_than_one() {
    let one = hot_cold(Placement::One);
    let ossd = hot_cold(Placement::Ossd);
    println!("hot/cold GC unit copies: one {one}, ossd {ossd}");
    assert!(one > 0, "the benchmark must make `one` collect garbage");
    assert!(ossd < one, "ossd copied {ossd}, one {one}");
}

/// Seed 001 V-C largefile: one 64 MiB object written sequentially, then 4,096 random 16 KiB
/// rewrites, with a checkpoint after each phase. Returns index nodes written.
fn largefile(mode: IndexMode) -> u64 {
    let mut s = store(Placement::Ossd, mode, rawssd_small());
    s.create(PartitionId(P), Some(ObjectId(P))).unwrap();
    let size = 64u64 << 20;
    let unit = 16u64 << 10;
    let mut token = 0;
    for off in (0..size).step_by(unit as usize) {
        token += 1;
        s.write_token(oid(0), off, unit, token).unwrap();
    }
    s.checkpoint().unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    for _ in 0..4096 {
        token += 1;
        s.write_token(oid(0), rng.gen_range(0..size / unit) * unit, unit, token)
            .unwrap();
    }
    s.checkpoint().unwrap();
    s.stats().index_nodes_written
}

#[test]
fn extents_write_fewer_index_pages_than_per_page_mapping() {
    let extent = largefile(IndexMode::Extent);
    let page = largefile(IndexMode::Page);
    println!("largefile index nodes written: extent {extent}, page {page}");
    assert!(
        extent < page,
        "extent mode wrote {extent} index nodes, per-page {page}"
    );
}

/// Seed 001 V-C at its own scale: a 64 MiB object on the 128 MiB NANDsim device with a
/// per-page index, rewritten at random with no flush until the end. A per-page index dirties a
/// leaf for nearly every unit flushed; before dirty nodes were written back as they
/// accumulated, the checkpoint's commit outgrew the free blocks ("no space" with half the
/// data units invalid).
#[test]
fn a_per_page_index_commits_within_the_gc_reserve() {
    let device = preset("nandsim-128m").unwrap();
    let mut s = store(Placement::Split, IndexMode::Page, device);
    s.create(PartitionId(P), Some(ObjectId(P))).unwrap();
    let size = 64u64 << 20;
    let io = 8u64 << 10;
    let mut token = 0;
    for off in (0..size).step_by(io as usize) {
        token += 1;
        s.write_token(oid(0), off, io, token).unwrap();
    }
    s.flush(FlushScope::Device).unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    for _ in 0..size / io {
        token += 1;
        s.write_token(oid(0), rng.gen_range(0..size / io) * io, io, token)
            .unwrap();
    }
    s.flush(FlushScope::Device).unwrap();
    let report = s.fsck().unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
}
