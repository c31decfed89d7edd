//! Power cut after every flash command of scripted workloads, in both modes (between commands
//! and torn in the middle of one), for the object store and the block FTL; and once per cut
//! point a torn cut with a second one in the recovery after it and a third in the script
//! resumed after that.

use fml::FmlConfig;
use ftl::{FtlConfig, Mapping};
use osd::{OsdConfig, Placement};
use torture::subject::{Services, Variant};
use torture::sweep::{
    block_script, object_script, object_script_with_metadata_every, sweep_device, Script,
};

fn check(script: Script) {
    // The FTL's recovery issues no command a cut counts unless it passes over a torn unit.
    let recovery_programs = matches!(script.variant, Variant::Osd(..));
    let r = script.sweep().expect("the uncut script runs");
    println!(
        "{} flash commands, {} cuts struck ({} of them in a recovery after a first cut, {} in \
         the script resumed after it), {} blocks erased",
        r.flash_commands, r.cuts, r.recovery_cuts, r.resumed_cuts, r.blocks_erased
    );
    assert!(
        r.blocks_erased > 3,
        "the script must make GC erase blocks: {r:?}"
    );
    assert!(r.cuts > r.flash_commands, "{r:?}");
    assert!(
        !recovery_programs || r.recovery_cuts > r.flash_commands / 4,
        "second cuts must strike recoveries: {r:?}"
    );
    assert!(
        r.resumed_cuts > r.flash_commands / 4,
        "third cuts must strike the resumed script: {r:?}"
    );
    assert!(
        r.failures.is_empty(),
        "{} of {} cut points broke the contract, first: {:?}",
        r.failures.len(),
        4 * (r.flash_commands + 1),
        &r.failures[..r.failures.len().min(3)]
    );
}

fn blocks() -> u32 {
    let d = sweep_device();
    d.gang.superblocks(&d.geometry)
}

/// A small write buffer and frequent checkpoints, so that cuts land in every kind of write.
fn sweep_store_config() -> OsdConfig {
    OsdConfig {
        placement: Placement::Semantic,
        buffer_bytes: 8 << 10,
        checkpoint_units: 24,
        fml: FmlConfig::for_blocks(blocks()),
        ..OsdConfig::default()
    }
}

#[test]
fn object_store_survives_a_cut_after_every_flash_command() {
    let cfg = sweep_store_config();
    check(Script::new(
        Variant::Osd(cfg, Services::default()),
        object_script(),
    ));
    check(Script::new(
        Variant::Osd(cfg, Services::encrypted()),
        object_script(),
    ));
    let compressed = Services {
        encrypt: false,
        compression: osd::compress::Compression::Zstd,
    };
    let chunks = OsdConfig {
        compression_chunk_units: 4,
        metadata_copies: 1,
        ..cfg
    };
    check(Script::new(
        Variant::Osd(chunks, compressed),
        object_script(),
    ));
}

/// The object store's services sweep ([`torture::sweep::services_script`]: small objects,
/// byte-granular writes, empty creates, access times), on `placement` with `copies` of every
/// metadata unit and `svc` on every object. Until 2026-12-07 `crates/osd/tests/sweep.rs` ran
/// this script with an oracle of its own; the two sweeps are now this one.
fn services(placement: Placement, copies: u8, svc: Services) {
    let script = Script::services(Variant::Osd(OsdConfig::default(), svc));
    let d = script.device;
    let cfg = OsdConfig {
        placement,
        metadata_copies: copies,
        compression_chunk_units: 4,
        fml: FmlConfig::for_blocks(d.gang.superblocks(&d.geometry)),
        ..sweep_store_config()
    };
    check(Script {
        variant: Variant::Osd(cfg, svc),
        ..script
    });
}

#[test]
fn services_sweep_semantic() {
    services(Placement::Semantic, 1, Services::default());
}

#[test]
fn services_sweep_one_stream() {
    services(Placement::One, 1, Services::default());
}

/// Access times journaled in atime pages of their own, rolled forward by recovery.
#[test]
fn services_sweep_split_atime() {
    services(Placement::SplitAtime, 1, Services::default());
}

/// Every object compressed (zstd, chunks of 4 units): a chunk a cut tears half-way through its
/// new generation comes back whole, old or new; GC moves chunk units.
#[test]
fn services_sweep_compressed() {
    let zstd = Services {
        encrypt: false,
        compression: osd::compress::Compression::Zstd,
    };
    services(Placement::Semantic, 1, zstd);
}

/// Compressed (lz4) and encrypted: compress, then seal each unit of a chunk.
#[test]
fn services_sweep_compressed_encrypted() {
    let both = Services {
        encrypt: true,
        compression: osd::compress::Compression::Lz4,
    };
    services(Placement::Semantic, 1, both);
}

/// Two copies of every metadata unit: a cut between a unit and its copy leaves a unit nothing
/// references yet, and recovery and GC see pairs, never a copy alone.
#[test]
fn services_sweep_metadata_copies() {
    services(Placement::Semantic, 2, Services::default());
}

/// Every object encrypted: sealed units rolled forward, copied by GC and read back through
/// every cut (their nonces' sequence numbers skip ahead at each reopen).
#[test]
fn services_sweep_encrypted() {
    services(Placement::Semantic, 1, Services::encrypted());
}

#[test]
fn block_ftl_survives_a_cut_after_every_flash_command() {
    for mapping in [Mapping::Page, Mapping::Dftl] {
        let cfg = FtlConfig {
            mapping,
            buffer_bytes: 4 * 4096,
            dftl_cache_bytes: 8 * 64,
            overprovision_percent: 10.0,
            fml: FmlConfig::for_blocks(blocks()),
            ..FtlConfig::default()
        };
        check(Script::new(Variant::Ftl(cfg), block_script()));
    }
}

/// Truncations every fifth round. This caught a store bug (issue 15): a cut after flash command
/// 729 or 730 brought back slot 0's sector 70 with bytes from before a truncation. The object was
/// truncated (flushed) inside write unit 8, whose tail on flash kept the old bytes; a later
/// growing write's unit 9 reached flash before unit 8's zeroed copy, roll-forward extended the
/// length from unit 9's record, and the stale tail became readable. A shrinking truncate now
/// zeroes the kept unit's tail on flash together with the shorter onode.
#[test]
fn object_store_truncate_every_fifth_round() {
    let cfg = sweep_store_config();
    check(Script::new(
        Variant::Osd(cfg, Services::default()),
        object_script_with_metadata_every(5),
    ));
}
