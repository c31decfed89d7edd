//! Must-show of OSSD-13 VI-E (Fig. 7) on files: the video is a file on OFS, its reads and the
//! background writer's writes go as OIOs through OAQ to the device-side controller and the
//! object store. At a tenth of the experiment's length on a device scaled alike, under
//! background GC throughout, the video whose priority the player set through OFS plays at 30
//! FPS in every second, each frame read waiting for at most one GC step; the same run without
//! that priority dips.

use lab::experiment::{scale_device, Experiment, FileWorkload, Variant};
use lab::ofsprio::HostStats;
use lab::prio::Plan;
use lab::scheduled::run_ofs_variant as run_variant;
use lab::scheduled::VariantRun;

fn experiment() -> Experiment {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../experiments/000-vi-e-prioritized-read.toml");
    Experiment::load(&path).unwrap()
}

fn run(e: &Experiment, v: &Variant, scale: f64) -> (VariantRun, HostStats) {
    let device = scale_device(flash::preset(&e.device).unwrap(), scale);
    let mut w = e.workload.clone();
    w.scale(scale);
    let plan = match &w {
        FileWorkload::Video(video) => Plan::Video(video),
        FileWorkload::FileWrites(f) => Plan::FileWrites(f),
        _ => panic!("{} is not a 000 VI-E workload", e.name),
    };
    let (r, h) = run_variant(plan, v, device, e.seed).unwrap();
    assert!(
        r.fsck_problems.is_empty(),
        "{}: {:?}",
        v.label,
        r.fsck_problems
    );
    (r, h)
}

/// One page copy + one erase + the frame's own reads and transfers (its write units read one
/// after another, each unit's pages moved one after another: the worst placement), on the
/// preset's timing; as `tests/prio.rs` bounds a one-unit read.
fn frame_bound_ns(e: &Experiment, frame_bytes: u64) -> u64 {
    let c = flash::preset(&e.device).unwrap();
    let t = c.timing;
    let page = c.geometry.page_size_bytes;
    let oob = c.geometry.oob_size_bytes;
    let pages = c.gang.pages_per_unit() as u64;
    let units = frame_bytes.div_ceil(pages * page as u64);
    let copy = t.command_ns
        + t.read_ns
        + pages * t.transfer_ns(page + oob)
        + t.command_ns
        + pages * t.transfer_ns(page + oob)
        + t.program_ns;
    let erase = t.command_ns + t.erase_ns;
    let own = units * (t.command_ns + t.read_ns + pages * t.transfer_ns(page));
    copy + erase + own
}

fn variant(e: &Experiment, label: &str) -> Variant {
    e.variants
        .iter()
        .find(|v| v.label == label)
        .unwrap()
        .clone()
}

fn phase<'a>(r: &'a VariantRun, name: &str) -> &'a workload::files::FileStats {
    &r.phases.iter().find(|(n, _)| *n == name).unwrap().1
}

#[test]
fn prioritized_video_file_through_oaq_holds_30_fps_every_second_and_unprioritized_dips() {
    let e = experiment();
    let seconds = 20u64;
    let frames = seconds * 30;

    let prioritized = variant(&e, "OFS (prioritized)");
    let (r, h) = run(&e, &prioritized, 0.1);
    let fg = phase(&r, "foreground");
    assert_eq!(fg.reads, frames);
    // Every frame and every background write went through OAQ as an OIO, and every video
    // OREQ left OAQ at the file's priority.
    let bg = phase(&r, "background");
    assert_eq!(h.oios, frames + bg.writes);
    assert!(h.oreqs > 0 && h.oreqs + h.merges == h.oios, "{h:?}");
    assert!(
        h.prioritized_oreqs > 0 && h.prioritized_oreqs <= frames,
        "{h:?}"
    );
    // Background GC ran throughout: thousands of valid units copied, and on average more than
    // one super-block (16 physical blocks on this preset) erased in every second.
    let all = phase(&r, "all");
    assert!(
        all.counters.gc_page_copies > 2000 && all.counters.flash_blocks_erased > 16 * seconds,
        "{:?}",
        all.counters
    );
    // A frame read waits for at most the GC step under way on its dies.
    let FileWorkload::Video(video) = &e.workload else {
        panic!("a video workload")
    };
    let bound = frame_bound_ns(&e, video.frame_bytes);
    let p99 = fg.read_latency.value_at_quantile(0.99);
    assert!(
        p99 <= bound + bound / 1000,
        "frame read p99 {p99} ns > {bound} ns"
    );
    let fps = &fg.per_second_transactions;
    assert!(fps.len() as u64 >= seconds - 1, "{fps:?}");
    // The last second is partial (the video ends within it).
    assert!(fps[..fps.len() - 1].iter().all(|&f| f == 30), "{fps:?}");

    // The same run, the player not setting the file's priority: OAQ queues its OREQs with the
    // writer's, the device sees no priority, frames wait for whole collections.
    let mut normal = prioritized.clone();
    normal.set.insert("host.priority".into(), "none".into());
    let (r, h) = run(&e, &normal, 0.1);
    assert_eq!(h.prioritized_oreqs, 0);
    let p99 = phase(&r, "foreground").read_latency.value_at_quantile(0.99);
    assert!(p99 > bound, "unprioritized frame read p99 {p99} ns");
    let fps = &phase(&r, "foreground").per_second_transactions;
    assert!(fps.iter().any(|&f| f < 30), "{fps:?}");
    // The priority on each frame's OIO instead of the file's attribute does as well.
    let (r, h) = run(&e, &variant(&e, "OFS (prioritized per request)"), 0.1);
    assert!(
        h.prioritized_oreqs > 0 && h.prioritized_oreqs <= frames,
        "{h:?}"
    );
    let fps = &phase(&r, "foreground").per_second_transactions;
    assert!(fps[..fps.len() - 1].iter().all(|&f| f == 30), "{fps:?}");

    // The experiment's own unprioritized OFS variant is that run.
    assert_eq!(variant(&e, "OFS (normal)").set, normal.set);
}

/// OSSD-13 VI-E's prioritized write on files, at a fiftieth of its files: every file is
/// written through OAQ and accounted for once, at the files' priority when the camcorder set
/// it and at 0 when it did not.
#[test]
fn prioritized_file_writes_on_ofs_go_through_oaq_and_account_for_every_file() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../experiments/000-vi-e-prioritized-write.toml");
    let e = Experiment::load(&path).unwrap();
    for label in ["OFS (prioritized)", "OFS (normal)"] {
        let v = variant(&e, label);
        let (r, h) = run(&e, &v, 0.02);
        let fg = phase(&r, "foreground");
        assert_eq!(fg.transactions, 20, "{label}");
        assert_eq!(fg.write_latency.len(), 20, "{label}");
        assert_eq!(fg.write_bytes, 20 << 21, "{label}");
        assert_eq!(
            fg.per_second_transactions.iter().sum::<u64>(),
            20,
            "{label}"
        );
        // 16 writes of 128 KiB per file, each its own OREQ (256 sectors, OAQ's largest).
        let bg = phase(&r, "background");
        assert!(h.oios >= 20 * 16 + bg.writes, "{label}: {h:?}");
        if label == "OFS (prioritized)" {
            assert_eq!(h.prioritized_oreqs, 20 * 16, "{h:?}");
        } else {
            assert_eq!(h.prioritized_oreqs, 0, "{h:?}");
        }
    }
}
