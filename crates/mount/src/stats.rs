//! Live statistics of a mount: the device's counters (write amplification, GC copies, erases,
//! free space), what OAQ and the controller did, and the latency programs saw per priority
//! class. Read while mounted as the file `.ossd-stats.json` at the mount's root (`ossd stats
//! MOUNTPOINT`), and written beside the image on unmount. Key names are the lab's metric names
//! (ARCHITECTURE.md "Metrics").

use std::collections::btree_map::Entry;
use std::collections::BTreeMap;

use flash::Flash;
use hdrhistogram::Histogram;
use serde_json::{json, Value};
use vfs::FileSystem;

use crate::{DirectOfs, Timing};

/// The name of the statistics file at the mount's root.
pub const STATS_FILE: &str = ".ossd-stats.json";

/// What the mount's host path (OAQ and the device-side controller) has done.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HostPathStats {
    /// Reads and writes submitted to OAQ (OIOs).
    pub oios: u64,
    /// Object requests the controller issued (OREQs).
    pub oreqs: u64,
    /// OIOs OAQ merged into a queued OREQ.
    pub merges: u64,
    /// OREQs issued at a priority above 0.
    pub prioritized_oreqs: u64,
    /// Most OREQs OAQ held at once.
    pub max_queued: u64,
    /// GC steps the controller ran (cleaning as preemptible steps).
    pub gc_steps: u64,
    /// OREQs issued on the submitting thread (OAQ held only them and the policy said "now").
    pub inline: u64,
    /// Calls that waited for OAQ to empty (metadata, unaligned writes, fsync).
    pub barriers: u64,
    /// Times the policy saw no way forward with requests queued (0 unless a policy bug).
    pub stalls: u64,
}

/// Latency the mount's programs saw (submission to reply, wall clock), per priority class and
/// direction.
#[derive(Default)]
pub struct Latencies {
    classes: BTreeMap<(u8, bool), Histogram<u64>>,
}

impl Latencies {
    /// Records one OIO's latency in ns.
    pub fn record(&mut self, priority: u8, write: bool, ns: u64) {
        let h = match self.classes.entry((priority, write)) {
            Entry::Occupied(e) => e.into_mut(),
            Entry::Vacant(v) => {
                // 1 ns to an hour at 3 significant digits; longer waits count as an hour.
                let Ok(h) = Histogram::new_with_bounds(1, 3_600_000_000_000, 3) else {
                    return;
                };
                v.insert(h)
            }
        };
        h.saturating_record(ns.max(1));
    }

    /// Per class, `{"priority_0": {"read": {...}, "write": {...}}, ...}` with `count`,
    /// `p50_us`, `p99_us`, `p999_us`, `max_us`.
    pub fn to_json(&self) -> Value {
        let mut out = serde_json::Map::new();
        for (&(p, write), h) in &self.classes {
            let us = |q: f64| h.value_at_quantile(q) as f64 / 1000.0;
            let entry = out
                .entry(format!("priority_{p}"))
                .or_insert_with(|| json!({}));
            if let Some(m) = entry.as_object_mut() {
                m.insert(
                    if write { "write" } else { "read" }.into(),
                    json!({
                        "count": h.len(),
                        "p50_us": us(0.5),
                        "p99_us": us(0.99),
                        "p999_us": us(0.999),
                        "max_us": h.max() as f64 / 1000.0,
                    }),
                );
            }
        }
        Value::Object(out)
    }
}

/// The device side of the statistics: the object store's counters under OFS.
pub fn ofs_json(ofs: &DirectOfs) -> Value {
    let store = ofs.store();
    let c = stacks::osd_counters(store);
    let fml = store.fml();
    let page_bytes = fml.flash().config().geometry.page_size_bytes as u64;
    let programmed_bytes = c.flash_pages_programmed * page_bytes;
    let (erase_min, erase_max, erase_mean) = fml.erase_counts();
    let gc = stacks::gc_state_of(fml);
    json!({
        "host_write_bytes": c.host_write_bytes,
        "host_read_bytes": c.host_read_bytes,
        "flash_pages_programmed": c.flash_pages_programmed,
        "flash_pages_read": c.flash_pages_read,
        "flash_blocks_erased": c.flash_blocks_erased,
        "gc_page_copies": c.gc_page_copies,
        "index_pages_written": c.index_pages_written,
        "index_pages_read": c.index_pages_read,
        "metadata_pages_written": c.metadata_pages_written,
        "write_amplification": if c.host_write_bytes == 0 {
            0.0
        } else {
            programmed_bytes as f64 / c.host_write_bytes as f64
        },
        "erase_count_min": erase_min,
        "erase_count_max": erase_max,
        "erase_count_mean": erase_mean,
        "free_blocks": gc.free_blocks,
        "blocks": gc.blocks,
        "virtual_seconds": ofs.now() as f64 / 1e9,
    })
}

/// The whole statistics document.
pub fn mount_json(
    path: &str,
    timing: Timing,
    device: Value,
    host: Option<HostPathStats>,
    latencies: Value,
) -> Value {
    let host = host.map(|h| {
        json!({
            "oios": h.oios,
            "oreqs": h.oreqs,
            "merges": h.merges,
            "prioritized_oreqs": h.prioritized_oreqs,
            "max_queued": h.max_queued,
            "gc_steps": h.gc_steps,
            "inline": h.inline,
            "barriers": h.barriers,
            "stalls": h.stalls,
        })
    });
    json!({
        "path": path,
        "timing": match timing {
            Timing::None => "none",
            Timing::Emulate => "emulate",
        },
        "device": device,
        "host_path": host,
        "latency": latencies,
    })
}
