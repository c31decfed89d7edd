//! Run settings: defaults, then a TOML file, then `--set key=value` pairs, checked once.

use std::path::Path;

use anyhow::{anyhow, bail, Context, Result};
use lab::RunConfig;
use toml::Value;

/// Every `--set` key, with its meaning and default (a device preset may ship its own `ftl.*`
/// defaults, [`flash::Preset::ftl_defaults`], applied before the file and the pairs). Shown by `ossd run --help` and kept in
/// step with [`RunConfig`] by a test.
pub const SET_KEYS_HELP: &str = "\
SETTINGS (--set KEY=VALUE, or the same keys in a --config TOML file):
  stack                              ftl | dftl | osd (the object store; also `ossd`) (default ftl)
  device                             device preset name (default rawssd)
  device_config.*                    override any device field, e.g. device_config.endurance_cycles=3000,
                                     device_config.timing.program_ns=900000, device_config.geometry.blocks_per_plane=128,
                                     device_config.factory_bad_ppm=2000 (fields of the chosen preset otherwise);
                                     device_config.payload=timing keeps no page contents or OOB records (MQSim-like,
                                     for memory at large geometries; ftl/dftl only, with verify=false)
  utilisation                        workload footprint / physical capacity (default 0.75)
  prefill                            write the footprint once before measuring (default true)
  verify                             check every read against what was written (default true)
  seed                               seed of all randomness (default 1)
  workload.kind                      seq-write | seq-read | rand-write | rand-read | zipf | hotcold (default rand-write)
  workload.request_bytes             request size, a multiple of 512 (default 4096)
  workload.requests                  requests to run after prefill (default 100000)
  workload.read_fraction             share of reads for zipf and hotcold (default 0)
  workload.zipf_theta                Zipf skew (default 0.99)
  workload.hot_fraction              hot share of the footprint for hotcold (default 0.1)
  workload.hot_access_fraction       share of accesses to the hot part (default 0.9)
  trace                              replay this block trace instead of the workload (open loop)
  trace_format                       mqsim | msr | blkparse (default: from the file extension)
  load.threads                       closed-loop threads (default 1)
  load.queue_depth                   requests in flight per thread (default 1)
  load.think_time_ns                 pause between a completion and the thread's next request (default 0)
  ftl.mapping_unit_bytes             logical page the map translates, 0 = the write unit; smaller (e.g. 4096 in 8 KiB pages)
                                     maps sub-pages, gathering that many logical pages per program (default 0;
                                     mqsim-default: 4096)
  ftl.buffer_bytes                   write buffer, 0 = write-through (default 2097152, OSSD-13 V-E; mqsim-default: 268435456)
  ftl.buffer_policy                  evict | write-back | destage: a write into a full buffer waits for a program, or
                                     the buffer acknowledges writes and flushes in the background, or (MQSim's destage
                                     buffer) acknowledges writes and writes cold pages back at once (default evict;
                                     mqsim-default: destage)
  ftl.checkpoint_every_units         a checkpoint once this many units were programmed since the last (0 = only at close; default 0)
  ftl.flush_percent                  write-back: buffered units beyond this share are flushed as writes arrive (default 50)
  ftl.hot_window_ns                  destage: a page written again within this many ns is hot and stays buffered
                                     (default 1000000000, MQSim's bloom_filter_reset_step)
  ftl.backpressure_bytes             destage: write-backs in flight before a write waits, 0 = one page per plane
                                     (default 0, MQSim's back_pressure_buffer_max_depth)
  ftl.cache_mb_s                     the write buffer's memory channel: a write into it and a read from it hold the
                                     channel for their bytes, one at a time (MB/s, 0 = free; default 0; mqsim-default:
                                     200, MQSim's data cache DRAM)
  ftl.dftl_cache_bytes               DFTL mapping cache, 8 bytes per entry (default 262144)
  ftl.dftl_hit_percent               hold DFTL's mapping-cache hit rate at this percentage, 0 = the LRU decides (default 0, POFTL-14 IV-C)
  ftl.overprovision_percent          flash held back from the logical space (default 7)
  ftl.separate_gc_stream             GC copies in an update block of their own (default true)
  placement                          object placement of the osd stack: one | combined | semantic | split | split+atime (default semantic; `ossd` is its old name; `one` = OFS-ONE's three update blocks, `combined` = one for everything)
  object_bytes                       the ossd stack cuts the workload's byte space into objects of this size (default 131072)
  osd.index_mode                     extent | page: how object data is indexed (default extent, OSCM-11 V-C)
  osd.buffer_bytes                   object data buffer, 0 = write-through (default 2097152, OSSD-13 V-E)
  osd.index_cache_bytes              index node cache (default 8388608, OSSD-13 V-E)
  osd.unit_map_bytes                 memory for the unit map, a complete in-memory map of the written objects' units ahead of the index (default 0 = off)
  osd.onode_cache_entries            onodes kept in memory (default 32768)
  osd.checkpoint_units               checkpoint after this many units written (default 4096)
  osd.atime                          reads update access times: journaled under split+atime, in the onode otherwise (default true)
  osd.atime_merge_pages              atime journal pages on flash before they are merged into onodes (default 4)
  osd.small_objects                  small-object buffer: objects under a write unit share pages (default true, OSCM-11 V-D)
  osd.fresh_update_block_per_object  semantic placement: an object taking a dedicated update block from another live object starts a fresh block (default false; OSSD-13 VI-C, costs the unfilled tail)
  osd.realtime_update_blocks         update blocks dedicated to real-time objects (priority > 0), semantic placement (default 0, at most 8, OSSD-13 IV-C)
  osd.default_reliability            parity units per parity group given to every new object (default 0 = none, at most 4, OSCM-11 III)
  osd.parity_group_units             data units per parity group for objects given parity (default 16)
  osd.metadata_copies                copies of every metadata unit (index nodes, descriptor pages, checkpoints, small-object pages):
                                     1 or 2; 2 masks one destroyed unit of each pair (default 1; a store that wrote copies keeps writing them)
  osd.compression_chunk_units        units per compression chunk of compressed objects (default 16)
  scrub.units_per_second             object store background scrub: data units checked per second of idle time, 0 = off
                                     (default 0; e.g. 1000: 4 MB/s of 4 KiB units, a few % of one die's time)
  scrub.max_units_per_call           most units one idle period checks; a longer idle period's credit is dropped
                                     (default 256, 1 to 65536)
  scrub.repair                       rewrite what parity rebuilds, recompute stale parity (default true)
  scrub.max_findings                 unrepairable findings kept in memory, the newest (default 64, at most 4096)
  fml.low_watermark_blocks           GC before writes below this many free blocks (default 10, OSSD-13 V-F)
  fml.high_watermark_busy_blocks     background GC target while busy (default 11)
  fml.high_watermark_idle_blocks     background GC target while idle (default 15)
  fml.victim_policy                  greedy | cost-benefit | fifo (default greedy)
  fml.static_wear_threshold          erase-count spread that triggers static wear leveling, 0 = off (default 1000)
  fml.bad_block_reserve_permille     blocks held for grown bad blocks (default 15 = 1.5%)
  fml.data_victim_threshold_percent  largest live share of a data victim (default 100 = pure policy, OSCM-11 V-B)
  fml.metadata_victim_threshold_percent  the same for metadata (onode, index) blocks (default 100)
  fml.atime_victim_threshold_percent largest live share of an atime victim (default 100)
  fml.victim_thresholds_bind         the thresholds bind below the low watermark too: no victim within them is out of space (default false, OSCM-11 V-B)
  fml.realtime_reserve_blocks        free blocks only real-time writes may take: normal writes collect below low + this (default 0, OSSD-13 IV-C)
";

/// Parses a value as TOML would (integer, float, boolean), else takes it as a string.
fn parse_value(raw: &str) -> Value {
    if let Ok(i) = raw.parse::<i64>() {
        return Value::Integer(i);
    }
    if let Ok(f) = raw.parse::<f64>() {
        if raw.contains('.') || raw.contains('e') {
            return Value::Float(f);
        }
    }
    match raw {
        "true" => Value::Boolean(true),
        "false" => Value::Boolean(false),
        _ => Value::String(raw.to_string()),
    }
}

fn set(root: &mut Value, key: &str, raw: &str) -> Result<()> {
    let parts: Vec<&str> = key.split('.').collect();
    if parts.iter().any(|p| p.is_empty()) {
        bail!("--set {key}={raw}: malformed key");
    }
    let mut node = root;
    for (i, p) in parts.iter().enumerate() {
        let table = node
            .as_table_mut()
            .ok_or_else(|| anyhow!("--set {key}: '{}' is not a table", parts[..i].join(".")))?;
        if i == parts.len() - 1 {
            table.insert(p.to_string(), parse_value(raw));
            return Ok(());
        }
        node = table
            .entry(p.to_string())
            .or_insert_with(|| Value::Table(Default::default()));
    }
    unreachable!()
}

/// Builds the run configuration from defaults, an optional TOML file and `key=value` pairs.
pub fn build(file: Option<&Path>, sets: &[String]) -> Result<RunConfig> {
    let text = match file {
        Some(path) => Some((
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?,
            path.display().to_string(),
        )),
        None => None,
    };
    build_text(
        text.as_ref().map(|(t, name)| (t.as_str(), name.as_str())),
        sets,
    )
}

/// [`build`] from the text of a TOML file (and its name, for errors) instead of its path.
#[expect(clippy::unwrap_used, reason = "the defaults serialize to a TOML table")]
pub fn build_text(file: Option<(&str, &str)>, sets: &[String]) -> Result<RunConfig> {
    let mut root = Value::try_from(RunConfig::default()).context("serializing defaults")?;
    let file_value: Option<Value> = match file {
        Some((text, name)) => {
            Some(toml::from_str(text).with_context(|| format!("{name} is not valid TOML"))?)
        }
        None => None,
    };
    // The chosen preset's controller settings (`ftl.*`, e.g. mqsim-default's sub-page mapping
    // and write-back cache) come before the file and the pairs, which override them.
    let device = sets
        .iter()
        .rev()
        .find_map(|s| s.strip_prefix("device="))
        .map(String::from)
        .or_else(|| {
            file_value
                .as_ref()
                .and_then(|f| f.get("device"))
                .and_then(|v| v.as_str())
                .map(String::from)
        })
        .unwrap_or_else(|| RunConfig::default().device);
    for (k, v) in flash::preset_ftl_defaults(&device) {
        set(&mut root, k, v)?;
    }
    if let Some(file_value) = file_value {
        merge(&mut root, file_value);
    }
    let pairs: Vec<(&str, &str)> = sets
        .iter()
        .map(|s| {
            s.split_once('=')
                .ok_or_else(|| anyhow!("--set {s}: expected KEY=VALUE"))
        })
        .collect::<Result<_>>()?;
    // Device overrides start from the chosen preset.
    if pairs.iter().any(|(k, _)| k.starts_with("device_config."))
        && root.get("device_config").is_none()
    {
        let name = pairs
            .iter()
            .rev()
            .find(|(k, _)| *k == "device")
            .map(|(_, v)| v.to_string());
        let name = name
            .or_else(|| {
                root.get("device")
                    .and_then(|v| v.as_str())
                    .map(String::from)
            })
            .unwrap_or_default();
        let preset = flash::preset(&name).map_err(|e| anyhow!(e))?;
        root.as_table_mut()
            .unwrap()
            .insert("device_config".into(), Value::try_from(preset)?);
    }
    for (k, v) in pairs {
        set(&mut root, k, v)?;
    }
    let cfg: RunConfig = root
        .try_into()
        .map_err(|e: toml::de::Error| anyhow!("invalid run settings: {}", e.message()))?;
    cfg.validate()
        .map_err(|e| anyhow!("invalid run settings: {e}"))?;
    cfg.device_config()
        .map_err(|e| anyhow!("invalid run settings: {e}"))?;
    Ok(cfg)
}

fn merge(into: &mut Value, from: Value) {
    match (into, from) {
        (Value::Table(a), Value::Table(b)) => {
            for (k, v) in b {
                match a.get_mut(&k) {
                    Some(slot) => merge(slot, v),
                    None => {
                        a.insert(k, v);
                    }
                }
            }
        }
        (slot, v) => *slot = v,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn build_sets(sets: &[&str]) -> Result<RunConfig> {
        build(
            None,
            &sets.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
        )
    }

    /// mqsim-default ships MQSim's controller settings (sub-page mapping, the 256 MiB
    /// destage buffer behind a 200 MB/s memory channel); a file or a pair overrides each; other presets keep the FTL's
    /// defaults.
    #[test]
    fn a_preset_s_ftl_defaults_apply_before_file_and_pairs() {
        let c = build_sets(&["device=mqsim-default"]).unwrap();
        assert_eq!(c.ftl.mapping_unit_bytes, 4096);
        assert_eq!(c.ftl.buffer_bytes, 256 << 20);
        assert_eq!(c.ftl.buffer_policy, ftl::BufferPolicy::Destage);
        assert_eq!(c.ftl.cache_mb_s, 200);
        let c = build_sets(&["device=mqsim-default", "ftl.mapping_unit_bytes=0"]).unwrap();
        assert_eq!(c.ftl.mapping_unit_bytes, 0);
        assert_eq!(c.ftl.buffer_bytes, 256 << 20);
        let c = build_text(
            Some((
                "device = \"mqsim-default\"\n[ftl]\nbuffer_policy = \"evict\"\n",
                "f.toml",
            )),
            &[],
        )
        .unwrap();
        assert_eq!(c.ftl.buffer_policy, ftl::BufferPolicy::Evict);
        assert_eq!(c.ftl.mapping_unit_bytes, 4096);
        for name in ["rawssd", "tiny", "poftl"] {
            let c = build_sets(&[&format!("device={name}")]).unwrap();
            assert_eq!(c.ftl, ftl::FtlConfig::default(), "{name}");
        }
    }

    #[test]
    fn sets_reach_nested_fields() {
        let c = build_sets(&[
            "fml.victim_policy=fifo",
            "placement=split+atime",
            "workload.requests=7",
            "utilisation=0.5",
            "device=poftl",
            "device_config.endurance_cycles=300",
        ])
        .unwrap();
        assert_eq!(c.fml.victim_policy, fml::VictimPolicy::Fifo);
        assert_eq!(c.placement, osd::Placement::SplitAtime);
        assert_eq!(c.workload.requests, 7);
        assert_eq!(c.utilisation, 0.5);
        assert_eq!(c.device_config.unwrap().endurance_cycles, 300);
        assert_eq!(
            c.device_config.unwrap().geometry.pages_per_block,
            64,
            "poftl preset fields kept"
        );
    }

    /// The background scrub's keys: defaults documented (off), values reach the run, a value
    /// out of range or an unknown key is refused with the key named.
    #[test]
    fn scrub_settings_parse_and_refuse_bad_values() {
        let d = build_sets(&[]).unwrap().scrub;
        assert_eq!(d, osd::BackgroundScrubConfig::default());
        assert_eq!(d.units_per_second, 0, "off by default");
        let c = build_sets(&["scrub.units_per_second=1000", "scrub.repair=false"]).unwrap();
        assert_eq!((c.scrub.units_per_second, c.scrub.repair), (1000, false));
        let c = build_text(
            Some((
                "[scrub]\nunits_per_second = 50\nmax_findings = 8\n",
                "f.toml",
            )),
            &[],
        )
        .unwrap();
        assert_eq!((c.scrub.units_per_second, c.scrub.max_findings), (50, 8));
        let e = build_sets(&["scrub.max_units_per_call=0"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("max_units_per_call"), "{e}");
        let e = build_sets(&["scrub.units_per_second=-1"])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("units_per_second") || e.contains("invalid value"),
            "{e}"
        );
        let e = build_sets(&["scrub.rate=1"]).unwrap_err().to_string();
        assert!(e.contains("unknown field") && e.contains("rate"), "{e}");
        // The typed error under the message.
        let bad = RunConfig {
            scrub: osd::BackgroundScrubConfig {
                max_findings: 1 << 20,
                ..Default::default()
            },
            ..RunConfig::default()
        };
        assert!(matches!(
            bad.validate(),
            Err(lab::run::ConfigError::Scrub(
                osd::OsdError::InvalidArgument(_)
            ))
        ));
    }

    #[test]
    fn bad_input_gives_clear_errors() {
        let e = build_sets(&["nope=1"]).unwrap_err().to_string();
        assert!(e.contains("unknown field") && e.contains("nope"), "{e}");
        let e = build_sets(&["utilisation=2.0"]).unwrap_err().to_string();
        assert!(e.contains("utilisation"), "{e}");
        let e = build_sets(&["device=nosuch"]).unwrap_err().to_string();
        assert!(e.contains("unknown device preset"), "{e}");
        let e = build_sets(&["workload.kind=bogus"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("bogus"), "{e}");
        let e = build_sets(&["seed"]).unwrap_err().to_string();
        assert!(e.contains("KEY=VALUE"), "{e}");
        let e = build_sets(&["fml.victim_policy=lru"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("lru"), "{e}");
    }

    /// Every documented key is accepted, and every leaf of the defaults is documented.
    #[test]
    fn help_lists_exactly_the_keys() {
        // A key starts a line after two spaces; continuation lines are indented further.
        let documented: Vec<&str> = SET_KEYS_HELP
            .lines()
            .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
            .filter_map(|l| l.split_whitespace().next())
            .filter(|k| !k.ends_with('*'))
            .collect();
        let mut leaves = Vec::new();
        fn walk(prefix: &str, v: &Value, out: &mut Vec<String>) {
            match v {
                Value::Table(t) => t.iter().for_each(|(k, v)| {
                    walk(
                        &if prefix.is_empty() {
                            k.clone()
                        } else {
                            format!("{prefix}.{k}")
                        },
                        v,
                        out,
                    )
                }),
                _ => out.push(prefix.to_string()),
            }
        }
        walk(
            "",
            &Value::try_from(RunConfig::default()).unwrap(),
            &mut leaves,
        );
        for leaf in &leaves {
            assert!(
                documented.contains(&leaf.as_str()),
                "--set key {leaf} is not documented"
            );
        }
        for key in documented {
            if key == "trace" || key == "trace_format" {
                continue;
            }
            assert!(
                leaves.iter().any(|l| l == key),
                "documented key {key} does not exist"
            );
        }
    }
}
