//! p-OFTL's recovery against a plain model: random creations, writes (partial pages
//! included), truncations, removals and flushes on a small device where GC erases throughout;
//! power is cut at a random command (clean or torn), the store is remounted from the device
//! alone, and every object untouched since the last completed flush must be exactly as it was
//! then (existence, size, bytes), removed objects must stay removed, and the store's
//! whole-structure check must pass. Objects touched since that flush may hold either state, in
//! part; they must read without error. A clean remount after a flush must equal the model.
//!
//! Pins: a write that filled the buffer flushed its first pages with the object's size from
//! before the write, so a remount cut the pages past that size (found by seed 4 of the
//! power-cut test; the size now grows page by page).

use std::collections::{BTreeMap, BTreeSet};

use flash::fault::{CutMode, Faulty};
use flash::{preset, Nand};
use fml::FmlConfig;
use poftl::{Data, GroupingPolicy, PoftlConfig, PoftlStore, ReadOut};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

type Model = BTreeMap<u64, Vec<u8>>;

fn config(degree: u32, grouping: GroupingPolicy) -> (PoftlConfig, flash::DeviceConfig) {
    let mut c = PoftlConfig {
        parallelism_degree: degree,
        grouping,
        buffer_pages: 32,
        ..PoftlConfig::default()
    };
    let mut base = preset("tiny").unwrap();
    base.geometry.blocks_per_plane = 16;
    let device = c.device(base).unwrap();
    c.fml = FmlConfig::for_blocks(flash::gang::Layout::new(&device).superblocks);
    (c, device)
}

fn read_all<F: flash::Flash>(s: &mut PoftlStore<F>, id: u64) -> Vec<u8> {
    let size = s.size(id).unwrap();
    let mut out = vec![0u8; size as usize];
    let n = s.read(id, 0, ReadOut::Bytes(&mut out)).unwrap();
    assert_eq!(n, size);
    out
}

/// Checks the remounted store against `durable` for every object not in `touched`.
fn check_recovered<F: flash::Flash>(
    s: &mut PoftlStore<F>,
    durable: &Model,
    touched: &BTreeSet<u64>,
    ctx: &str,
) {
    s.check().unwrap_or_else(|e| panic!("{ctx}: {e}"));
    for id in 1..=12u64 {
        if touched.contains(&id) {
            if s.exists(id) {
                read_all(s, id);
            }
            continue;
        }
        match durable.get(&id) {
            None => assert!(!s.exists(id), "{ctx}: object {id} came back"),
            Some(want) => {
                assert!(s.exists(id), "{ctx}: object {id} lost");
                let got = read_all(s, id);
                assert_eq!(got.len(), want.len(), "{ctx}: object {id} size");
                assert!(got == *want, "{ctx}: object {id} contents differ");
            }
        }
    }
}

/// Runs random operations until `ops` are done or the device loses power; returns the model
/// as of the last completed flush, the objects touched since, and whether power was lost.
fn run(
    s: &mut PoftlStore<Faulty<Nand>>,
    rng: &mut ChaCha8Rng,
    model: &mut Model,
    ops: usize,
) -> (Model, BTreeSet<u64>, bool) {
    let mut durable = model.clone();
    let mut touched = BTreeSet::new();
    for _ in 0..ops {
        let id = rng.gen_range(1..=12u64);
        let r = match rng.gen_range(0..100) {
            0..=7 if !model.contains_key(&id) => s.create(id).map(|()| {
                model.insert(id, Vec::new());
            }),
            0..=7 => s.remove(id).map(|()| {
                model.remove(&id);
            }),
            8..=14 if model.contains_key(&id) => {
                let len = model[&id].len();
                let size = rng.gen_range(0..=len + 6000);
                s.truncate(id, size as u64).map(|()| {
                    model.get_mut(&id).unwrap().resize(size, 0);
                })
            }
            15..=24 => s.flush().map(|()| {
                durable = model.clone();
                touched.clear();
            }),
            _ if model.contains_key(&id) => {
                let off = rng.gen_range(0..48_000usize);
                let len = rng.gen_range(1..=24_000usize);
                let bytes: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
                s.write(id, off as u64, Data::Bytes(&bytes)).map(|()| {
                    let m = model.get_mut(&id).unwrap();
                    if m.len() < off + len {
                        m.resize(off + len, 0);
                    }
                    m[off..off + len].copy_from_slice(&bytes);
                })
            }
            _ => Ok(()),
        };
        touched.insert(id);
        if r.is_err() {
            return (durable, touched, true);
        }
    }
    (durable, touched, false)
}

#[test]
fn a_clean_remount_after_a_flush_equals_the_model() {
    for (degree, g) in [(1, GroupingPolicy::SemanticAware), (4, GroupingPolicy::Sfs)] {
        let (c, device) = config(degree, g);
        let mut s = PoftlStore::format(Faulty::new(Nand::in_memory(device).unwrap()), c).unwrap();
        let mut rng = ChaCha8Rng::seed_from_u64(degree as u64);
        let mut model = Model::new();
        let (_, _, lost) = run(&mut s, &mut rng, &mut model, 3000);
        assert!(!lost);
        s.flush().unwrap();
        assert!(s.fml().stats().blocks_erased > 0, "GC never ran");
        let mut s = PoftlStore::mount(s.into_flash(), c).unwrap();
        check_recovered(&mut s, &model, &BTreeSet::new(), "clean remount");
        // And it goes on working: more operations, another remount.
        let (_, _, lost) = run(&mut s, &mut rng, &mut model, 300);
        assert!(!lost);
        s.flush().unwrap();
        let mut s = PoftlStore::mount(s.into_flash(), c).unwrap();
        check_recovered(&mut s, &model, &BTreeSet::new(), "second remount");
    }
}

#[test]
fn power_cuts_lose_nothing_flushed_and_bring_nothing_back() {
    let (mut cuts, mut collected) = (0, 0);
    for seed in 0..60u64 {
        let degree = [1, 2, 4][seed as usize % 3];
        let g = [
            GroupingPolicy::SemanticAware,
            GroupingPolicy::Sfs,
            GroupingPolicy::None,
        ][seed as usize % 3];
        let (c, device) = config(degree, g);
        let mut rng = ChaCha8Rng::seed_from_u64(1000 + seed);
        let mut flash = Faulty::new(Nand::in_memory(device).unwrap());
        let mode = if seed % 2 == 0 {
            CutMode::Clean
        } else {
            CutMode::Torn
        };
        flash.cut_power_after(rng.gen_range(100..4000), mode);
        let mut s = PoftlStore::format(flash, c).unwrap();
        let mut model = Model::new();
        let (durable, touched, lost) = run(&mut s, &mut rng, &mut model, 2000);
        collected += (s.fml().stats().blocks_erased > 0) as u32;
        let mut flash = s.into_flash();
        flash.restore_power();
        let ctx = format!("seed {seed} (degree {degree}, {g:?}, {mode:?}, cut: {lost})");
        let mut s = PoftlStore::mount(flash, c).unwrap_or_else(|e| panic!("{ctx}: {e}"));
        if !lost {
            // No cut happened: nothing flushed since the last flush is promised either.
            continue;
        }
        cuts += 1;
        check_recovered(&mut s, &durable, &touched, &ctx);
    }
    // The scenarios did cut power, and GC had erased blocks before most cuts.
    assert!(cuts >= 45, "{cuts} cuts");
    assert!(collected >= 30, "GC ran in {collected} runs");
}
