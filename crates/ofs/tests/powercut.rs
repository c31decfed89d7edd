//! Power cuts, clean and torn, at random flash operations of a file workload (creates, writes,
//! truncates, unlinks in directories whose small buckets split often, with fsyncs and syncs).
//! After each cut the store is reopened and OFS mounted, which repairs the tree (power sometimes
//! failing again during the repair). Then `check`
//! must be clean, and every file as it was at the last sync (or its own fsync since), and not
//! changed since, must read back whole under its name.

mod common;

use std::collections::{BTreeMap, BTreeSet};

use flash::fault::{CutMode, Faulty};
use flash::Nand;
use ofs::{Ofs, OfsConfig};
use osd::{ObjectStore, OsdConfig, Placement};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use vfs::{FileData, FileSystem, FsError, Ino, ReadInto, ROOT};

type Key = (usize, String);

struct Rig {
    fs: Option<Ofs<osd::ObjectStore<Faulty<Nand>>>>,
    cfg: OsdConfig,
    rng: ChaCha8Rng,
    dirs: Vec<Ino>,
    /// What each file holds now, and its inode.
    files: BTreeMap<Key, (Ino, Vec<u8>)>,
    /// What each file held at the last durability point that covered it.
    durable: BTreeMap<Key, Vec<u8>>,
    /// Files changed or removed since they were last made durable.
    touched: BTreeSet<Key>,
    stamp: u8,
    cuts: u32,
    /// Durable files found intact after cuts.
    verified: u32,
    fixes: u64,
    cuts_in_repair: u32,
}

impl Rig {
    fn fs(&mut self) -> &mut Ofs<osd::ObjectStore<Faulty<Nand>>> {
        self.fs.as_mut().unwrap()
    }

    fn powered(&self) -> bool {
        self.fs.as_ref().unwrap().store().fml().flash().powered()
    }

    fn pick(&mut self) -> Option<Key> {
        if self.files.is_empty() {
            return None;
        }
        let i = self.rng.gen_range(0..self.files.len());
        self.files.keys().nth(i).cloned()
    }

    /// One random operation; an error is returned only as power loss shows it.
    fn step(&mut self) -> Result<(), FsError> {
        let roll = self.rng.gen_range(0..100);
        match roll {
            0..=24 => {
                let d = self.rng.gen_range(0..self.dirs.len());
                let name = format!("file-number-{:03}", self.rng.gen_range(0..40));
                if self.files.contains_key(&(d, name.clone())) {
                    return Ok(());
                }
                let dir = self.dirs[d];
                let ino = self.fs().create(dir, &name)?;
                self.files.insert((d, name), (ino, Vec::new()));
            }
            25..=59 => {
                let Some(k) = self.pick() else { return Ok(()) };
                let offset = self.rng.gen_range(0..20_000u64);
                let len = self.rng.gen_range(1..8_000u64);
                self.stamp = self.stamp.wrapping_add(1).max(1);
                let s = self.stamp;
                let data: Vec<u8> = (0..len).map(|i| s ^ (i as u8).wrapping_mul(13)).collect();
                let ino = self.files[&k].0;
                self.touched.insert(k.clone());
                self.fs().write(ino, offset, len, FileData::Bytes(&data))?;
                let f = &mut self.files.get_mut(&k).unwrap().1;
                let end = (offset + len) as usize;
                if f.len() < end {
                    f.resize(end, 0);
                }
                f[offset as usize..end].copy_from_slice(&data);
            }
            60..=67 => {
                let Some(k) = self.pick() else { return Ok(()) };
                let size = self.rng.gen_range(0..20_000u64);
                let ino = self.files[&k].0;
                self.touched.insert(k.clone());
                self.fs().truncate(ino, size)?;
                self.files.get_mut(&k).unwrap().1.resize(size as usize, 0);
            }
            68..=79 => {
                let Some(k) = self.pick() else { return Ok(()) };
                self.touched.insert(k.clone());
                let dir = self.dirs[k.0];
                self.fs().unlink(dir, &k.1)?;
                self.files.remove(&k);
            }
            80..=89 => {
                // fsync makes the file's data and attributes durable; its name is durable
                // only if it was before.
                let Some(k) = self.pick() else { return Ok(()) };
                let (ino, data) = self.files[&k].clone();
                let data_only = self.rng.gen_bool(0.5);
                self.fs().fsync(ino, data_only)?;
                if self.durable.contains_key(&k) {
                    self.durable.insert(k.clone(), data);
                    self.touched.remove(&k);
                }
            }
            90..=94 => {
                self.fs().sync()?;
                self.mark_durable();
            }
            _ => {
                let t = self.fs().now();
                self.fs().background(t, t + 10_000_000)?;
            }
        }
        Ok(())
    }

    fn mark_durable(&mut self) {
        self.durable = self
            .files
            .iter()
            .map(|(k, (_, d))| (k.clone(), d.clone()))
            .collect();
        self.touched.clear();
    }

    /// Reboots after a power cut: reopen, mount (repairing), check, compare with what was
    /// durable, then take what is there as the new state.
    fn reboot(&mut self) {
        self.cuts += 1;
        let mut dev = self.fs.take().unwrap().abandon().crash();
        let mut fs = loop {
            dev.restore_power();
            let mut store = match ObjectStore::open_or_return(dev, self.cfg) {
                Ok(s) => s,
                Err((e, Some(d))) if e.to_string().contains("power is off") => {
                    dev = d;
                    continue;
                }
                Err((e, _)) => panic!("reopen after cut {}: {e}", self.cuts),
            };
            // Sometimes power fails again during the repair.
            if self.rng.gen_bool(0.3) {
                let after = self.rng.gen_range(0..30);
                store.device_mut().cut_power_after(after, CutMode::Torn);
            }
            match Ofs::mount_or_return(store) {
                Ok(mut fs) => {
                    fs.store_mut().device_mut().restore_power();
                    break fs;
                }
                Err((_, store)) if !store.fml().flash().powered() => {
                    self.cuts_in_repair += 1;
                    dev = store.crash();
                }
                Err((e, _)) => panic!("mount after cut {}: {e}", self.cuts),
            }
        };
        assert_eq!(fs.ofs_counters().repairs, 1);
        self.fixes += fs.ofs_counters().repair_fixes;
        let problems = fs.check().unwrap();
        assert!(problems.is_empty(), "cut {}: {problems:#?}", self.cuts);
        for (k, want) in &self.durable {
            if self.touched.contains(k) {
                continue;
            }
            self.verified += 1;
            let ino = fs
                .lookup(self.dirs[k.0], &k.1)
                .unwrap()
                .unwrap_or_else(|| panic!("cut {}: durable {k:?} is gone", self.cuts));
            let mut got = vec![0u8; want.len() + 10];
            let n = fs.read(ino, 0, ReadInto::Bytes(&mut got)).unwrap();
            assert_eq!(n as usize, want.len(), "cut {}: size of {k:?}", self.cuts);
            assert!(got[..want.len()] == want[..], "cut {}: {k:?}", self.cuts);
        }
        // What survived is the new truth.
        self.files.clear();
        for d in 0..self.dirs.len() {
            for (name, ino) in fs.readdir(self.dirs[d]).unwrap() {
                if self.dirs.contains(&ino) {
                    continue;
                }
                let len = fs.stat(ino).unwrap().size;
                let mut data = vec![0u8; len as usize];
                fs.read(ino, 0, ReadInto::Bytes(&mut data)).unwrap();
                self.files.insert((d, name), (ino, data));
            }
        }
        self.fs = Some(fs);
        self.mark_durable();
    }
}

fn run(seed: u64, placement: Placement, config: OfsConfig, rounds: u32) {
    let (mut fs, cfg) = common::fresh(placement, 48, config);
    let a = fs.mkdir(ROOT, "a").unwrap();
    let b = fs.mkdir(a, "b").unwrap();
    fs.sync().unwrap();
    let mut rig = Rig {
        fs: Some(fs),
        cfg,
        rng: ChaCha8Rng::seed_from_u64(seed),
        dirs: vec![ROOT, a, b],
        files: BTreeMap::new(),
        durable: BTreeMap::new(),
        touched: BTreeSet::new(),
        stamp: 0,
        cuts: 0,
        verified: 0,
        fixes: 0,
        cuts_in_repair: 0,
    };
    for _ in 0..rounds {
        let after = rig.rng.gen_range(0..400);
        let mode = if rig.rng.gen_bool(0.5) {
            CutMode::Torn
        } else {
            CutMode::Clean
        };
        rig.fs()
            .store_mut()
            .device_mut()
            .cut_power_after(after, mode);
        let mut cut = false;
        for _ in 0..120 {
            match rig.step() {
                Ok(()) => {}
                Err(_) if !rig.powered() => {
                    cut = true;
                    break;
                }
                Err(e) => panic!("seed {seed}: {e}"),
            }
        }
        if cut {
            rig.reboot();
        } else {
            rig.fs().store_mut().device_mut().restore_power();
        }
    }
    assert!(rig.cuts >= rounds / 4, "only {} cuts landed", rig.cuts);
    assert!(rig.verified > 0 && rig.cuts_in_repair > 0);
    if std::env::var("OFS_DEBUG").is_ok() {
        eprintln!(
            "seed {seed}: {} cuts ({} more during repair), {} files verified, {} repair fixes",
            rig.cuts, rig.cuts_in_repair, rig.verified, rig.fixes
        );
    }
    let problems = rig.fs().check().unwrap();
    assert!(problems.is_empty(), "{problems:#?}");
}

fn small_buckets() -> OfsConfig {
    OfsConfig {
        dir_block_bytes: 512,
        ..OfsConfig::default()
    }
}

#[test]
fn power_cuts_keep_what_was_synced() {
    run(1, Placement::Semantic, small_buckets(), 200);
}

#[test]
fn power_cuts_with_inode_and_entry_objects() {
    let config = OfsConfig {
        inode_objects: true,
        dirent_objects: true,
        ..small_buckets()
    };
    run(2, Placement::One, config, 200);
}

#[test]
fn power_cuts_with_unembedded_inode_objects() {
    let config = OfsConfig {
        inode_objects: true,
        embed_inodes: false,
        ..small_buckets()
    };
    run(3, Placement::Split, config, 120);
}
