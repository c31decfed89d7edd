//! What the payload checksums (issue 16) cost the object store's host CPU with real bytes: the
//! time the store takes for 1 MiB sequential writes, 4 KiB random writes and whole-object reads
//! on an in-memory `nandsim-128m`, against the time CRC-32C takes over the bytes the store
//! programmed and read (one checksum per unit written, one per unit read). A measurement, not a
//! check: `cargo test -p osd --test crc_cost -- --ignored --nocapture`, figures in
//! docs/PERFORMANCE.md.

use std::time::Instant;

use flash::{preset, Nand};
use fml::FmlConfig;
use osd::{FlushScope, ObjectId, ObjectStore, Oid, Osd, OsdConfig, PartitionId};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const P: u64 = 0x10000;
const OBJECTS: u64 = 8;
const OBJECT_BYTES: usize = 4 << 20;

/// One measured phase: a name and what it does to the store.
type Phase<'a> = (
    &'a str,
    Box<dyn Fn(&mut ObjectStore<Nand>, &mut ChaCha8Rng) + 'a>,
);

fn crc_seconds(units: u64, unit: usize) -> f64 {
    let page: Vec<u8> = (0..unit).map(|i| (i * 7) as u8).collect();
    let t = Instant::now();
    let mut acc = 0u32;
    for i in 0..units {
        acc ^= crc32c::crc32c(&page).wrapping_add(i as u32);
    }
    std::hint::black_box(acc);
    t.elapsed().as_secs_f64()
}

#[test]
#[ignore = "a measurement for docs/PERFORMANCE.md"]
fn checksum_share_of_store_cpu_time() {
    let dev = preset("nandsim-128m").unwrap();
    let cfg = OsdConfig {
        fml: FmlConfig::for_blocks(dev.gang.superblocks(&dev.geometry)),
        ..OsdConfig::default()
    };
    let mut s = ObjectStore::format(Nand::in_memory(dev).unwrap(), cfg).unwrap();
    s.create_partition(Some(PartitionId(P))).unwrap();
    let unit = s.unit_bytes();
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let data: Vec<u8> = (0..1 << 20).map(|_| rng.gen()).collect();
    for k in 0..OBJECTS {
        s.create(PartitionId(P), Some(ObjectId(P + 1 + k))).unwrap();
    }
    let phases: [Phase; 3] = [
        (
            "1 MiB sequential writes",
            Box::new(|s, _| {
                for k in 0..OBJECTS {
                    for m in 0..OBJECT_BYTES / (1 << 20) {
                        s.write(Oid::new(P, P + 1 + k), (m << 20) as u64, &data)
                            .unwrap();
                    }
                }
                s.flush(FlushScope::Device).unwrap();
            }),
        ),
        (
            "4 KiB random writes",
            Box::new(|s, rng| {
                for _ in 0..OBJECTS * (OBJECT_BYTES as u64 >> 12) {
                    let k = rng.gen_range(0..OBJECTS);
                    let at = rng.gen_range(0..OBJECT_BYTES as u64 >> 12) << 12;
                    s.write(Oid::new(P, P + 1 + k), at, &data[..4096]).unwrap();
                }
                s.flush(FlushScope::Device).unwrap();
            }),
        ),
        (
            "whole-object reads",
            Box::new(|s, _| {
                let mut buf = vec![0u8; OBJECT_BYTES];
                for k in 0..OBJECTS {
                    s.read(Oid::new(P, P + 1 + k), 0, &mut buf).unwrap();
                }
            }),
        ),
    ];
    for (name, run) in phases.iter() {
        let before = s.stats();
        let t = Instant::now();
        run(&mut s, &mut rng);
        let store = t.elapsed().as_secs_f64();
        let after = s.stats();
        // Every unit programmed or read is checksummed once: data, descriptor and index units,
        // checkpoints; GC copies are not (their checksum is copied).
        let units = (after.data_units_written - before.data_units_written)
            + (after.data_units_read - before.data_units_read)
            + (after.rmw_reads - before.rmw_reads)
            + (after.index_nodes_written - before.index_nodes_written)
            + (after.index_nodes_read - before.index_nodes_read)
            + (after.descriptor_pages_written - before.descriptor_pages_written)
            + (after.descriptor_pages_read - before.descriptor_pages_read)
            + (after.checkpoints - before.checkpoints);
        let crc = crc_seconds(units, unit);
        println!(
            "{name}: store {:.1} ms, CRC-32C over its {units} units of {unit} bytes {:.2} ms = \
             {:.2}% of the store's time",
            store * 1e3,
            crc * 1e3,
            100.0 * crc / store
        );
    }
}
