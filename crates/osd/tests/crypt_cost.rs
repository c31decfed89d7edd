//! What per-object encryption (issue 16 item 7) costs the object store, with real bytes on an
//! in-memory `nandsim-128m`: 1 MiB sequential writes, 4 KiB random writes and whole-object
//! reads into 8 objects of 4 MiB, every object plain or every object encrypted. Reports host
//! wall time (the cipher is host CPU) and virtual time (the device: encrypted records transfer
//! 64 bytes of spare area where plain ones transfer 44). A measurement, not a check:
//! `cargo test -p osd --test crypt_cost -- --ignored --nocapture`, figures in
//! docs/PERFORMANCE.md.

use std::time::Instant;

use flash::{preset, Nand};
use fml::FmlConfig;
use osd::{
    Attr, AttrValue, FlushScope, MasterKey, ObjectId, ObjectStore, Oid, Osd, OsdConfig, PartitionId,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const P: u64 = 0x10000;
const OBJECTS: u64 = 8;
const OBJECT_BYTES: usize = 4 << 20;

fn measure(encrypt: bool, round: u32) {
    let dev = preset("nandsim-128m").unwrap();
    let cfg = OsdConfig {
        fml: FmlConfig::for_blocks(dev.gang.superblocks(&dev.geometry)),
        ..OsdConfig::default()
    };
    let mut s = ObjectStore::format(Nand::in_memory(dev).unwrap(), cfg).unwrap();
    s.set_master_key(Some(MasterKey::from_bytes([1; 32])));
    s.create_partition(Some(PartitionId(P))).unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let data: Vec<u8> = (0..1 << 20).map(|_| rng.gen()).collect();
    for k in 0..OBJECTS {
        s.create(PartitionId(P), Some(ObjectId(P + 1 + k))).unwrap();
        if encrypt {
            s.set_attr(Oid::new(P, P + 1 + k), Attr::Encryption, AttrValue::U64(1))
                .unwrap();
        }
    }
    let total = OBJECTS * OBJECT_BYTES as u64;
    let phase =
        |name: &str, s: &mut ObjectStore<Nand>, f: &mut dyn FnMut(&mut ObjectStore<Nand>)| {
            let v0 = s.now();
            let t = Instant::now();
            f(s);
            let wall = t.elapsed().as_secs_f64();
            let virt = (s.now() - v0) as f64 / 1e9;
            let mib = total as f64 / (1 << 20) as f64;
            println!(
            "round {round} {} {name}: wall {:.0} ms = {:.0} MiB/s; virtual {:.3} s = {:.1} MiB/s",
            if encrypt { "encrypted" } else { "plain    " },
            wall * 1e3,
            mib / wall,
            virt,
            mib / virt
        );
        };
    phase("1 MiB sequential writes", &mut s, &mut |s| {
        for k in 0..OBJECTS {
            for m in 0..OBJECT_BYTES / (1 << 20) {
                s.write(Oid::new(P, P + 1 + k), (m << 20) as u64, &data)
                    .unwrap();
            }
        }
        s.flush(FlushScope::Device).unwrap();
    });
    let mut rng = ChaCha8Rng::seed_from_u64(8);
    phase("4 KiB random writes    ", &mut s, &mut |s| {
        for _ in 0..OBJECTS * (OBJECT_BYTES as u64 >> 12) {
            let k = rng.gen_range(0..OBJECTS);
            let at = rng.gen_range(0..OBJECT_BYTES as u64 >> 12) << 12;
            s.write(Oid::new(P, P + 1 + k), at, &data[..4096]).unwrap();
        }
        s.flush(FlushScope::Device).unwrap();
    });
    phase("whole-object reads     ", &mut s, &mut |s| {
        let mut buf = vec![0u8; OBJECT_BYTES];
        for k in 0..OBJECTS {
            s.read(Oid::new(P, P + 1 + k), 0, &mut buf).unwrap();
        }
    });
}

#[test]
#[ignore = "a measurement for docs/PERFORMANCE.md"]
fn encryption_cost() {
    for round in 0..3 {
        measure(false, round);
        measure(true, round);
    }
}
