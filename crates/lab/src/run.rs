//! One run: a stack on a device, a workload or a trace, and the report with every metric.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

use flash::DeviceConfig;
use ftl::{BufferPolicy, FtlConfig};
use serde::{Deserialize, Serialize};

use crate::engine::{self, Latencies, Load, Verifier};
use fml::FmlConfig;
use osd::{OsdConfig, Placement};
use stacks::{Counters, FmlBase, Stack, StackFault, StackSpec};
use workload::block::{prefill, Workload, WorkloadConfig, WorkloadKind};
pub use workload::latency::{summarize, LatencySummary};
use workload::trace::{TraceError, TraceFormat, TraceReader, UnknownTraceFormat};

pub use stacks::StackKind;

/// A run, as a TOML file or `--set key=value` pairs describe it. Defaults in [`Default`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RunConfig {
    pub stack: StackKind,
    /// Device preset name (see `ossd presets`).
    pub device: String,
    /// A whole device description, used instead of the preset when given.
    pub device_config: Option<DeviceConfig>,
    /// Logical footprint of the workload as a share of the device's physical capacity.
    pub utilisation: f64,
    /// Write the footprint once, sequentially, before measuring.
    pub prefill: bool,
    /// Check every read against what was written (fingerprint mode, whole units).
    pub verify: bool,
    /// Seed of all randomness in the run.
    pub seed: u64,
    pub workload: RunWorkload,
    /// Replay this block trace (open loop) instead of the workload.
    pub trace: Option<PathBuf>,
    /// Trace format: mqsim, msr or blkparse (guessed from the extension when absent).
    pub trace_format: Option<String>,
    pub load: Load,
    /// The flash management layer, shared by every stack.
    pub fml: FmlConfig,
    pub ftl: FtlConfig,
    /// Object placement policy of the `ossd` stack.
    pub placement: Placement,
    /// The `ossd` stack cuts the workload's byte space into objects of this size.
    pub object_bytes: u64,
    pub osd: OsdConfig,
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
        }
    }
}

impl RunConfig {
    /// The device the run uses: `device_config` when given, else the preset `device`, with the
    /// run's seed XORed into the device's, checked.
    pub fn device_config(&self) -> Result<DeviceConfig, ConfigError> {
        let mut c = match self.device_config {
            Some(c) => c,
            None => flash::preset(&self.device).map_err(ConfigError::Device)?,
        };
        c.seed ^= self.seed;
        c.validate().map_err(ConfigError::Device)?;
        Ok(c)
    }

    /// Checks the run's own settings and the FTL's: `utilisation` in (0, 1], at least one
    /// thread and queue slot, `object_bytes` a positive multiple of 512.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !(self.utilisation > 0.0 && self.utilisation <= 1.0) {
            return Err(ConfigError::Utilisation {
                value: self.utilisation,
            });
        }
        if self.load.threads == 0 || self.load.queue_depth == 0 {
            return Err(ConfigError::Load);
        }
        self.ftl.validate().map_err(ConfigError::Ftl)?;
        if self.object_bytes == 0 || !self.object_bytes.is_multiple_of(512) {
            return Err(ConfigError::ObjectBytes {
                bytes: self.object_bytes,
            });
        }
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
    /// `load.threads` or `load.queue_depth` is 0.
    #[error("load.threads and load.queue_depth must be at least 1")]
    Load,
    /// The FTL refused its settings (the `ftl` crate reports this as text).
    #[error("{0}")]
    Ftl(String),
    /// `object_bytes` is 0 or not a multiple of 512.
    #[error("object_bytes = {bytes} must be a positive multiple of 512")]
    ObjectBytes {
        /// The value.
        bytes: u64,
    },
    /// The device preset is unknown, or the device description is refused (the `flash` crate
    /// reports this as text).
    #[error("{0}")]
    Device(String),
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
    pub kind: WorkloadKind,
    pub request_bytes: u64,
    pub requests: u64,
    pub read_fraction: f64,
    pub zipf_theta: f64,
    pub hot_fraction: f64,
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

/// Everything a run measured. Top-level keys are the metric names of ARCHITECTURE.md.
#[derive(Clone, Debug, Serialize)]
pub struct RunReport {
    pub stack: String,
    pub device: String,
    pub workload: String,
    pub seed: u64,
    pub requests: u64,
    pub host_write_bytes: u64,
    pub host_read_bytes: u64,
    pub flash_pages_programmed: u64,
    pub flash_pages_read: u64,
    pub flash_blocks_erased: u64,
    pub gc_page_copies: u64,
    pub write_amplification: f64,
    pub index_pages_written: u64,
    pub index_pages_read: u64,
    pub metadata_pages_written: u64,
    pub rmw_reads: u64,
    pub virtual_seconds: f64,
    pub throughput_mib_s: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub max_us: f64,
    pub latency_by_priority: BTreeMap<String, LatencySummary>,
    pub read_latency: LatencySummary,
    pub write_latency: LatencySummary,
    pub erase_count_min: u32,
    pub erase_count_max: u32,
    pub erase_count_mean: f64,
    /// Wall-clock time of the whole run (setup and prefill included).
    pub wall_seconds: f64,
    /// Requests of the measured phase per wall-clock second of that phase.
    pub requests_per_wall_second: f64,
    pub verified_reads: u64,
    pub device_memory_bytes: u64,
    pub page_size_bytes: u32,
    pub write_unit_bytes: u64,
    pub logical_capacity_bytes: u64,
    pub footprint_bytes: u64,
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
        /// Why it stopped.
        source: engine::EngineError,
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
    spec.object_bytes = cfg.object_bytes;
    if cfg.stack == StackKind::Osd {
        spec.name = format!("osd ({})", cfg.placement);
    }
    Ok(spec.build_block(device)?)
}

/// Runs one configuration to completion.
pub fn run(cfg: &RunConfig, progress: Progress<'_>) -> Result<RunReport, RunError> {
    cfg.validate().map_err(RunError::Config)?;
    let device = cfg.device_config().map_err(RunError::Config)?;
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
            source,
        })?;
        t = phase.end_ns;
        // A write-back buffer acknowledges the prefill's last writes while up to a buffer's
        // worth of flushes are still in flight; the measured phase must not inherit them
        // (MQSim's preconditioning takes no simulated time), so the set-up ends with a flush.
        if cfg.ftl.buffer_policy == BufferPolicy::WriteBack {
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
                source,
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
                source,
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
