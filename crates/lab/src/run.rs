//! One run: a stack on a device, a workload or a trace, and the report with every metric.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

use flash::{DeviceConfig, PayloadMode};
use ftl::{BufferPolicy, FtlConfig};
use serde::{Deserialize, Serialize};

use crate::engine::{self, Latencies, Load, Verifier};
use fml::FmlConfig;
use osd::{BackgroundScrubConfig, OsdConfig, Placement};
use stacks::{Counters, FmlBase, Stack, StackFault, StackSpec};
use workload::block::{prefill, Workload, WorkloadConfig, WorkloadKind};
pub use workload::latency::{summarize, LatencySummary};
use workload::trace::{TraceError, TraceFormat, TraceReader, UnknownTraceFormat};

pub use stacks::StackKind;

/// A run, as a TOML file or `--set key=value` pairs describe it. Defaults in [`Default`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RunConfig {
    /// The block-level stack run: `ftl`, `dftl` or `osd` (default `ftl`).
    pub stack: StackKind,
    /// Device preset name (see `ossd presets`; default `rawssd`, OSSD-13's RawSSD).
    pub device: String,
    /// A whole device description, used instead of the preset when given.
    pub device_config: Option<DeviceConfig>,
    /// Logical footprint of the workload as a share of the device's physical capacity, in
    /// (0, 1] (default 0.75).
    pub utilisation: f64,
    /// Write the footprint once, sequentially, before measuring (default true).
    pub prefill: bool,
    /// Check every read against what was written (fingerprint mode, whole units; default
    /// true).
    pub verify: bool,
    /// Seed of all randomness in the run (default 1); it is also XORed into the device's.
    pub seed: u64,
    /// The built-in workload, unless `trace` is set.
    pub workload: RunWorkload,
    /// Replay this block trace (open loop) instead of the workload.
    pub trace: Option<PathBuf>,
    /// Trace format: mqsim, msr, blkparse or fiu (guessed from the extension when absent).
    pub trace_format: Option<String>,
    /// The closed-loop load of the built-in workload (default one thread, queue depth 1, no
    /// think time); a trace is replayed open loop at its own times.
    pub load: Load,
    /// The flash management layer, shared by every stack.
    pub fml: FmlConfig,
    /// The page-mapping FTL (and DFTL) of the `ftl` and `dftl` stacks.
    pub ftl: FtlConfig,
    /// Object placement policy of the `osd` stack (default `semantic`, OSSD-13 V-F).
    pub placement: Placement,
    /// The `osd` stack cuts the workload's byte space into objects of this size (a positive
    /// multiple of 512; default 128 KiB).
    pub object_bytes: u64,
    /// The object store of the `osd` stack (its `placement` is the field above).
    pub osd: OsdConfig,
    /// The object store's background scrub (`scrub.*`; off by default).
    pub scrub: BackgroundScrubConfig,
}

impl Default for RunConfig {
    fn default() -> Self {
        RunConfig {
            stack: StackKind::Ftl,
            device: "rawssd".into(),
            device_config: None,
            utilisation: 0.75,
            prefill: true,
            verify: true,
            seed: 1,
            workload: RunWorkload::default(),
            trace: None,
            trace_format: None,
            load: Load {
                threads: 1,
                queue_depth: 1,
                think_time_ns: 0,
            },
            fml: FmlConfig::default(),
            ftl: FtlConfig::default(),
            placement: Placement::Semantic,
            object_bytes: 128 << 10,
            osd: OsdConfig::default(),
            scrub: BackgroundScrubConfig::default(),
        }
    }
}

impl RunConfig {
    /// The device the run uses: `device_config` when given, else the preset `device`, with the
    /// run's seed XORed into the device's, checked. A timing-only device (`payload = timing`)
    /// is refused with `verify` on (it keeps nothing to check reads against) and under a stack
    /// other than `ftl` and `dftl` (only they keep their own record of what each unit holds,
    /// which GC needs).
    pub fn device_config(&self) -> Result<DeviceConfig, ConfigError> {
        let mut c = match self.device_config {
            Some(c) => c,
            None => flash::preset(&self.device)?,
        };
        c.seed ^= self.seed;
        c.validate()?;
        if c.payload == PayloadMode::Timing {
            if self.verify {
                return Err(ConfigError::TimingVerify);
            }
            if !matches!(self.stack, StackKind::Ftl | StackKind::Dftl) {
                return Err(ConfigError::TimingStack { kind: self.stack });
            }
        }
        Ok(c)
    }

    /// Checks the run's own settings and the FTL's: `utilisation` in (0, 1], at least one
    /// thread and queue slot, `object_bytes` a positive multiple of 512, the `scrub.*` ranges.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !(self.utilisation > 0.0 && self.utilisation <= 1.0) {
            return Err(ConfigError::Utilisation {
                value: self.utilisation,
            });
        }
        if self.load.threads == 0 || self.load.queue_depth == 0 {
            return Err(ConfigError::Load);
        }
        self.ftl.validate()?;
        if self.object_bytes == 0 || !self.object_bytes.is_multiple_of(512) {
            return Err(ConfigError::ObjectBytes {
                bytes: self.object_bytes,
            });
        }
        self.scrub.validate().map_err(ConfigError::Scrub)?;
        Ok(())
    }
}

/// Why a run's configuration was refused ([`RunConfig::validate`],
/// [`RunConfig::device_config`], and the checks [`run`] makes before it starts).
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// `utilisation` outside (0, 1].
    #[error("utilisation = {value} must lie in (0, 1]")]
    Utilisation {
        /// The value.
        value: f64,
    },
    /// A `scrub.*` setting out of range.
    #[error("scrub: {0}")]
    Scrub(osd::OsdError),
    /// `load.threads` or `load.queue_depth` is 0.
    #[error("load.threads and load.queue_depth must be at least 1")]
    Load,
    /// The FTL refused its settings.
    #[error(transparent)]
    Ftl(#[from] ftl::FtlConfigError),
    /// `object_bytes` is 0 or not a multiple of 512.
    #[error("object_bytes = {bytes} must be a positive multiple of 512")]
    ObjectBytes {
        /// The value.
        bytes: u64,
    },
    /// The device preset is unknown.
    #[error(transparent)]
    Preset(#[from] flash::UnknownPreset),
    /// The device description is refused.
    #[error(transparent)]
    Device(#[from] flash::DeviceConfigError),
    /// `verify` on a timing-only device.
    #[error("device_config.payload = timing keeps no page contents, so reads cannot be verified: set verify = false (or payload = full)")]
    TimingVerify,
    /// A stack that cannot run on a timing-only device.
    #[error("device_config.payload = timing keeps no OOB records, and the {} stack needs them for GC and recovery; only ftl and dftl run on a timing-only device", kind.name())]
    TimingStack {
        /// The stack.
        kind: StackKind,
    },
    /// A file-level stack, which `run` does not drive.
    #[error("stack '{kind}' is a file-level stack: it runs in experiments (ossd reproduce, ossd run --experiment); ossd run takes {}", StackKind::BLOCK_LEVEL.map(StackKind::name).join(", "))]
    FileLevelStack {
        /// The stack.
        kind: StackKind,
    },
    /// The footprint `utilisation` asks for is more than the stack exports.
    #[error("utilisation {utilisation} asks for {footprint} bytes but the {stack} stack exports {capacity} bytes ({:.3} of the device); lower utilisation or ftl.overprovision_percent", *.capacity as f64 / *.physical as f64)]
    Footprint {
        /// `utilisation`.
        utilisation: f64,
        /// Bytes asked for.
        footprint: u64,
        /// The stack's name.
        stack: String,
        /// Bytes the stack exports.
        capacity: u64,
        /// Bytes of the device.
        physical: u64,
    },
    /// `trace_format` names no trace format.
    #[error(transparent)]
    TraceFormat(#[from] UnknownTraceFormat),
    /// No `trace_format`, and the trace file's extension does not tell it.
    #[error("cannot tell the format of {} from its extension; set trace_format", .path.display())]
    UndetectedFormat {
        /// The trace file.
        path: PathBuf,
    },
    /// The workload's parameters are out of range.
    #[error(transparent)]
    Workload(#[from] workload::block::ConfigError),
}

/// A built-in workload as a run sets it: its footprint comes from `utilisation` and its seed
/// from the run's seed (see [`WorkloadConfig`] for each field).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RunWorkload {
    /// Access pattern (default `rand-write`).
    pub kind: WorkloadKind,
    /// Bytes per request, a positive multiple of 512 (default 4096).
    pub request_bytes: u64,
    /// Requests measured (default 100,000).
    pub requests: u64,
    /// Share of reads for `zipf` and `hotcold` (default 0).
    pub read_fraction: f64,
    /// Zipf exponent for `zipf` (default 0.99).
    pub zipf_theta: f64,
    /// Share of the footprint that is hot for `hotcold` (default 0.1).
    pub hot_fraction: f64,
    /// Share of accesses to the hot part for `hotcold` (default 0.9).
    pub hot_access_fraction: f64,
}

impl Default for RunWorkload {
    fn default() -> Self {
        let w = WorkloadConfig::default();
        RunWorkload {
            kind: w.kind,
            request_bytes: w.request_bytes,
            requests: w.requests,
            read_fraction: w.read_fraction,
            zipf_theta: w.zipf_theta,
            hot_fraction: w.hot_fraction,
            hot_access_fraction: w.hot_access_fraction,
        }
    }
}

impl RunWorkload {
    /// The generator's config over `footprint_bytes`, drawn from `seed`.
    pub fn config(&self, footprint_bytes: u64, seed: u64) -> WorkloadConfig {
        WorkloadConfig {
            kind: self.kind,
            request_bytes: self.request_bytes,
            footprint_bytes,
            requests: self.requests,
            read_fraction: self.read_fraction,
            zipf_theta: self.zipf_theta,
            hot_fraction: self.hot_fraction,
            hot_access_fraction: self.hot_access_fraction,
            seed,
        }
    }
}

/// A latency distribution as (microseconds, fraction at or below) points: every 2% and the
/// tail (99, 99.9, 99.99%, the maximum), enough to draw the CDF the papers plot.
pub(crate) fn cdf(h: &hdrhistogram::Histogram<u64>) -> Vec<(f64, f64)> {
    if h.is_empty() {
        return Vec::new();
    }
    let mut qs: Vec<f64> = (0..50).map(|i| i as f64 / 50.0).collect();
    qs.extend([0.99, 0.999, 0.9999, 1.0]);
    qs.iter()
        .map(|&q| (h.value_at_quantile(q) as f64 / 1000.0, q))
        .collect()
}

/// Everything a run measured. Top-level keys are the metric names of docs/DESIGN.md
/// ("Metrics"); counters cover the measured phase only (after the prefill).
#[derive(Clone, Debug, Serialize)]
pub struct RunReport {
    /// The stack's name ("ftl", "osd (semantic)", ...).
    pub stack: String,
    /// The device preset, or "custom" for a `device_config`.
    pub device: String,
    /// The workload's kind, or `trace:` and the trace's path.
    pub workload: String,
    /// The run's seed.
    pub seed: u64,
    /// Requests measured.
    pub requests: u64,
    /// Bytes the workload wrote.
    pub host_write_bytes: u64,
    /// Bytes the workload read.
    pub host_read_bytes: u64,
    /// Physical pages programmed (the device's count).
    pub flash_pages_programmed: u64,
    /// Physical pages read (the device's count).
    pub flash_pages_read: u64,
    /// Physical blocks erased (the device's count).
    pub flash_blocks_erased: u64,
    /// Valid write units GC copied.
    pub gc_page_copies: u64,
    /// Flash bytes programmed over host bytes written (GC, read-modify-write, metadata and
    /// mapping writes included); 0 without writes.
    pub write_amplification: f64,
    /// Index units written (the object store's index nodes, DFTL's translation pages).
    pub index_pages_written: u64,
    /// Index units read on cache misses.
    pub index_pages_read: u64,
    /// Metadata units written (onodes, checkpoints).
    pub metadata_pages_written: u64,
    /// Reads of a unit's old contents to merge a partial write into.
    pub rmw_reads: u64,
    /// Virtual time of the measured phase, in seconds.
    pub virtual_seconds: f64,
    /// Host bytes read and written per virtual second, in MiB/s.
    pub throughput_mib_s: f64,
    /// Median latency over every request, in microseconds.
    pub p50_us: f64,
    /// 99th percentile latency, in microseconds.
    pub p99_us: f64,
    /// 99.9th percentile latency, in microseconds.
    pub p999_us: f64,
    /// The slowest request, in microseconds.
    pub max_us: f64,
    /// Latency summaries per priority class (keys are the priorities, "0" for normal).
    pub latency_by_priority: BTreeMap<String, LatencySummary>,
    /// Reads' latency summary.
    pub read_latency: LatencySummary,
    /// Writes' latency summary.
    pub write_latency: LatencySummary,
    /// Fewest erases of a usable super-block at the end of the run.
    pub erase_count_min: u32,
    /// Most erases of a usable super-block at the end of the run.
    pub erase_count_max: u32,
    /// Mean erases per usable super-block at the end of the run.
    pub erase_count_mean: f64,
    /// Wall-clock time of the whole run (setup and prefill included).
    pub wall_seconds: f64,
    /// Requests of the measured phase per wall-clock second of that phase.
    pub requests_per_wall_second: f64,
    /// Write units read back and checked against what was written (0 without `verify`).
    pub verified_reads: u64,
    /// Bytes of memory the device model held at the end.
    pub device_memory_bytes: u64,
    /// The device's page size in bytes.
    pub page_size_bytes: u32,
    /// The stack's write unit in bytes.
    pub write_unit_bytes: u64,
    /// Bytes the stack exports.
    pub logical_capacity_bytes: u64,
    /// Bytes the workload touches (`utilisation` of the physical capacity, whole units).
    pub footprint_bytes: u64,
    /// The settings that produced the report.
    pub config: RunConfig,
}

/// Why a run stopped.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The configuration was refused.
    #[error("configuration: {0}")]
    Config(#[from] ConfigError),
    /// The flush that ends the prefill failed.
    #[error("flushing after the prefill: {0}")]
    Flush(#[source] StackFault),
    /// The trace could not be opened.
    #[error(transparent)]
    Trace(TraceError),
    /// A phase of the run ("prefill", "replay", "measure") stopped.
    #[error("{phase}: {source}")]
    Engine {
        /// The phase.
        phase: &'static str,
        /// Why it stopped (boxed: a run's result stays small).
        source: Box<engine::EngineError>,
    },
    /// The stack's consistency check failed after the run.
    #[error("consistency check failed after the run: {0}")]
    Check(#[source] StackFault),
    /// The stack could not be built.
    #[error(transparent)]
    Stack(#[from] stacks::StackError),
}

/// Progress callback: phase name, requests done, requests planned (0 if unknown).
pub type Progress<'a> = &'a mut dyn FnMut(&'static str, u64, u64);

/// The run's stack on a fresh device, through the one builder ([`stacks::StackSpec`]).
fn build_stack(cfg: &RunConfig, device: DeviceConfig) -> Result<Box<dyn Stack>, RunError> {
    if !StackKind::BLOCK_LEVEL.contains(&cfg.stack) {
        return Err(ConfigError::FileLevelStack { kind: cfg.stack }.into());
    }
    let mut spec = StackSpec::new(cfg.stack);
    spec.fml = FmlBase::Given(cfg.fml);
    spec.ftl = cfg.ftl;
    spec.osd = OsdConfig {
        placement: cfg.placement,
        ..cfg.osd
    };
    spec.scrub = cfg.scrub;
    spec.object_bytes = cfg.object_bytes;
    if cfg.stack == StackKind::Osd {
        spec.name = format!("osd ({})", cfg.placement);
    }
    Ok(spec.build_block(device)?)
}

/// Runs one configuration to completion: builds the stack on a fresh device, writes the
/// footprint once (when `prefill`), runs the workload closed loop or replays the trace open
/// loop, checks the stack's consistency, and reports the measured phase. `progress` gets the
/// phase ("prefill", "measure", "replay"), the requests done and the requests planned (0 when
/// unknown).
pub fn run(cfg: &RunConfig, progress: Progress<'_>) -> Result<RunReport, RunError> {
    cfg.validate()?;
    let device = cfg.device_config()?;
    let wall = Instant::now();
    let mut stack = build_stack(cfg, device)?;
    let capacity = stack.capacity_bytes();
    let unit = stack.unit_bytes();
    let physical = device.geometry.capacity_bytes();
    let footprint = ((physical as f64 * cfg.utilisation) as u64) / unit * unit;
    if footprint > capacity {
        return Err(ConfigError::Footprint {
            utilisation: cfg.utilisation,
            footprint,
            stack: stack.name().to_string(),
            capacity,
            physical,
        }
        .into());
    }
    let mut verifier = cfg.verify.then(|| Verifier::new(capacity, unit));
    let mut t = 0;
    if cfg.prefill {
        let req_bytes = (1 << 20) / unit * unit;
        let req_bytes = req_bytes.max(unit);
        let total = footprint.div_ceil(req_bytes);
        let mut fill = prefill(footprint, req_bytes);
        let phase = engine::run_closed(
            stack.as_mut(),
            &mut fill,
            Load::SET_UP,
            0,
            cfg.seed ^ 0xF111,
            verifier.as_mut(),
            &mut |d| progress("prefill", d, total),
        )
        .map_err(|source| RunError::Engine {
            phase: "prefill",
            source: Box::new(source),
        })?;
        t = phase.end_ns;
        // A write-back (or destage) buffer acknowledges the prefill's last writes while up to a buffer's
        // worth of flushes are still in flight; the measured phase must not inherit them
        // (MQSim's preconditioning takes no simulated time), so the set-up ends with a flush.
        if cfg.ftl.buffer_policy != BufferPolicy::Evict {
            let flush = crate::request::Request::new(crate::request::Op::Flush, 0, 0);
            t = stack
                .submit(t, &flush, 0, &mut Vec::new())
                .map_err(RunError::Flush)?;
        }
    }
    let before = stack.counters();
    let measure_wall = Instant::now();
    let (phase, workload_name) = match &cfg.trace {
        Some(path) => {
            let format = match &cfg.trace_format {
                Some(f) => f.parse::<TraceFormat>().map_err(ConfigError::from)?,
                None => TraceFormat::detect(path)
                    .ok_or_else(|| ConfigError::UndetectedFormat { path: path.clone() })?,
            };
            let mut reqs = TraceReader::open(path, format).map_err(RunError::Trace)?;
            let phase = engine::run_open(
                stack.as_mut(),
                &mut reqs,
                t,
                cfg.seed,
                verifier.as_mut(),
                &mut |d| progress("replay", d, 0),
            )
            .map_err(|source| RunError::Engine {
                phase: "replay",
                source: Box::new(source),
            })?;
            (phase, format!("trace:{}", path.display()))
        }
        None => {
            let wcfg = cfg.workload.config(footprint, cfg.seed);
            let mut w = Workload::new(&wcfg).map_err(ConfigError::from)?;
            let total = wcfg.requests;
            let phase = engine::run_closed(
                stack.as_mut(),
                &mut w,
                cfg.load,
                t,
                cfg.seed,
                verifier.as_mut(),
                &mut |d| progress("measure", d, total),
            )
            .map_err(|source| RunError::Engine {
                phase: "measure",
                source: Box::new(source),
            })?;
            (phase, wcfg.kind.to_string())
        }
    };
    let measure_seconds = measure_wall.elapsed().as_secs_f64();
    let wall_seconds = wall.elapsed().as_secs_f64();
    stack.check().map_err(RunError::Check)?;
    let c: Counters = stack.counters() - before;
    let (ec_min, ec_max, ec_mean) = stack.erase_counts();
    let virtual_seconds = (phase.end_ns - phase.start_ns) as f64 / 1e9;
    let page = device.geometry.page_size_bytes;
    let lat: &Latencies = &phase.latencies;
    let all = summarize(&lat.all);
    Ok(RunReport {
        stack: stack.name().to_string(),
        device: cfg
            .device_config
            .map_or(cfg.device.clone(), |_| "custom".into()),
        workload: workload_name,
        seed: cfg.seed,
        requests: phase.requests,
        host_write_bytes: c.host_write_bytes,
        host_read_bytes: c.host_read_bytes,
        flash_pages_programmed: c.flash_pages_programmed,
        flash_pages_read: c.flash_pages_read,
        flash_blocks_erased: c.flash_blocks_erased,
        gc_page_copies: c.gc_page_copies,
        write_amplification: if c.host_write_bytes == 0 {
            0.0
        } else {
            (c.flash_pages_programmed * page as u64) as f64 / c.host_write_bytes as f64
        },
        index_pages_written: c.index_pages_written,
        index_pages_read: c.index_pages_read,
        metadata_pages_written: c.metadata_pages_written,
        rmw_reads: c.rmw_reads,
        virtual_seconds,
        throughput_mib_s: if virtual_seconds > 0.0 {
            (c.host_write_bytes + c.host_read_bytes) as f64 / (1 << 20) as f64 / virtual_seconds
        } else {
            0.0
        },
        p50_us: all.p50_us,
        p99_us: all.p99_us,
        p999_us: all.p999_us,
        max_us: all.max_us,
        latency_by_priority: lat
            .by_priority
            .iter()
            .map(|(p, h)| (p.to_string(), summarize(h)))
            .collect(),
        read_latency: summarize(&lat.reads),
        write_latency: summarize(&lat.writes),
        erase_count_min: ec_min,
        erase_count_max: ec_max,
        erase_count_mean: ec_mean,
        wall_seconds,
        requests_per_wall_second: phase.requests as f64 / measure_seconds.max(1e-9),
        verified_reads: verifier.as_ref().map_or(0, |v| v.checked),
        device_memory_bytes: stack.device_resident_bytes(),
        page_size_bytes: page,
        write_unit_bytes: unit,
        logical_capacity_bytes: capacity,
        footprint_bytes: footprint,
        config: cfg.clone(),
    })
}
