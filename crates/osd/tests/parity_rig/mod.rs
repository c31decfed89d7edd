//! The rig the parity and background-scrub tests share: a `tiny` device, stores with parity,
//! and damage to a write unit.

#![allow(dead_code)] // each test file uses its own part of the rig

use flash::fault::Faulty;
use flash::gang::Vpa;
use flash::{preset, DeviceConfig, Nand};
use fml::FmlConfig;
use osd::{Attr, AttrValue, ObjectStore, Oid, Osd, OsdConfig, OsdError, PartitionId};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// The partition the objects live in.
pub const P: u64 = 0x10000;

pub fn device() -> DeviceConfig {
    let mut c = preset("tiny").unwrap();
    c.endurance_cycles = 1_000_000;
    c
}

/// `reliability` parity units per group of `group` data units for new objects.
pub fn config(reliability: u8, group: u8) -> OsdConfig {
    OsdConfig {
        default_reliability: reliability,
        parity_group_units: group,
        fml: FmlConfig::for_blocks(device().gang.superblocks(&device().geometry)),
        ..OsdConfig::default()
    }
}

/// `n` random bytes from `seed`.
pub fn bytes(seed: u64, n: usize) -> Vec<u8> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..n).map(|_| rng.gen()).collect()
}

pub type Store = ObjectStore<Faulty<Nand>>;

/// A formatted store on a fresh device, with partition [`P`].
pub fn fresh(cfg: OsdConfig) -> Store {
    let mut s = ObjectStore::format(Faulty::new(Nand::in_memory(device()).unwrap()), cfg).unwrap();
    s.create_partition(Some(PartitionId(P))).unwrap();
    s
}

pub fn oid(n: u64) -> Oid {
    Oid::new(P, P + n)
}

/// The write unit holding byte `offset` of `oid` (from the store's memory).
pub fn unit_of(s: &Store, oid: Oid, offset: u64) -> Vpa {
    let mut v = Vec::new();
    assert!(
        s.peek_read_units(oid, offset, 1, &mut v),
        "index not cached"
    );
    v[0]
}

/// Makes the page(s) of write unit `v` unreadable (bit errors past the ECC).
pub fn fail_unit(s: &mut Store, v: Vpa) {
    let layout = *s.fml().layout();
    for i in 0..layout.pages_per_unit() {
        let p = layout.page(v, i);
        s.device_mut().flip_bits(p, 1000);
    }
}

/// The whole object.
pub fn read_all(s: &mut Store, oid: Oid) -> Result<Vec<u8>, OsdError> {
    let AttrValue::U64(len) = s.get_attr(oid, Attr::LogicalLength)? else {
        panic!("length")
    };
    let mut b = vec![0u8; len as usize];
    let n = s.read(oid, 0, &mut b)?;
    b.truncate(n);
    Ok(b)
}
