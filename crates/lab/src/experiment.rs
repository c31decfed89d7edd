//! Experiments of the seed papers as data: a file-level workload, the stack variants it runs on
//! (all on the same device model), the metric the paper's claim is about, and the claim. The
//! runner measures every variant, the report sets the measurement beside the claim and says
//! whether they agree; nothing is adjusted toward the paper.

use std::path::{Path, PathBuf};

use flash::DeviceConfig;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use stacks::{Counters, StackError};
use vfs::FsError;
use workload::files::{
    appendhot::AppendHot, hotcold::HotColdFiles, largefile::LargeFile, multistream::MultiStream,
    postmark::PostMark, seqbase::SeqBase, sizes::SizeLatency, tracereplay::TraceReplay, FileStack,
    FileSummary, Meter,
};

/// A file-level workload with its parameters at paper scale.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum FileWorkload {
    /// PostMark (OSSD-13 VI-F, OSCM-11 V-A/V-D): a file pool, then create/delete and
    /// read/append transactions.
    PostMark(PostMark),
    /// OSSD-13 VI-D: small files rewritten whole, most rewrites on a few hot files.
    HotCold(HotColdFiles),
    /// OSSD-13 VI-C multi-threaded write: several writers' files interleaved on a full device.
    MultiStream(MultiStream),
    /// OSSD-13 VI-B base performance: one large file written and read sequentially.
    SeqBase(SeqBase),
    /// Seltzer's largefile (OSCM-11 V-C): one large file written and read sequentially and at
    /// random offsets.
    LargeFile(LargeFile),
    /// Not a file workload: BLOCKMGMT-09's open-loop block requests through the device-side
    /// scheduler ([`crate::prio`]).
    Synthetic(crate::prio::Synthetic),
    /// Not a file workload: a block trace replayed at its own arrival times through the
    /// device-side scheduler (BLOCKMGMT-09 Table 4).
    BlockTrace(crate::prio::BlockTrace),
    /// Not a file workload: OSSD-13 VI-E's video played at a fixed frame rate while a
    /// background writer runs, through the device-side scheduler.
    Video(crate::prio::Video),
    /// Not a file workload: OSSD-13 VI-E's prioritized files written while a background
    /// writer runs, through the device-side scheduler.
    FileWrites(crate::prio::FileWrites),
    /// POFTL-14's home02 stand-in (skewed, append-heavy file updates).
    AppendHot(AppendHot),
    /// POFTL-14 Fig. 2 and 3: latency by data size.
    SizeLatency(SizeLatency),
    /// OSSD-13 VI-F FILEB: Filebench videoserver, threads replacing large files.
    VideoServer(workload::files::videoserver::VideoServer),
    /// OSSD-13 VI-C torrent: concurrent downloads, preallocated, pieces in random order.
    Torrent(workload::files::torrent::Torrent),
    /// A user's block trace replayed onto files (fixed address regions as files).
    Trace(TraceReplay),
}

impl FileWorkload {
    /// Shrinks sizes and counts by `s` (sizes of single calls and files stay, except where a
    /// file is the whole workload).
    pub fn scale(&mut self, s: f64) {
        let n = |v: &mut u64| *v = ((*v as f64 * s).round() as u64).max(1);
        match self {
            FileWorkload::PostMark(p) => {
                n(&mut p.files);
                n(&mut p.transactions);
                p.aging.scale(s);
            }
            FileWorkload::HotCold(h) => {
                n(&mut h.files);
                n(&mut h.total_bytes);
            }
            FileWorkload::MultiStream(m) => {
                n(&mut m.fill_bytes);
                n(&mut m.round_bytes);
                n(&mut m.total_bytes);
                n(&mut m.file_bytes);
            }
            FileWorkload::SeqBase(b) => n(&mut b.file_bytes),
            FileWorkload::LargeFile(l) => n(&mut l.file_bytes),
            FileWorkload::Synthetic(w) => n(&mut w.requests),
            FileWorkload::BlockTrace(t) => {
                if let Some(m) = t.max_requests.as_mut() {
                    n(m);
                }
            }
            FileWorkload::Video(v) => n(&mut v.seconds),
            FileWorkload::FileWrites(f) => n(&mut f.files),
            FileWorkload::AppendHot(a) => {
                n(&mut a.files);
                n(&mut a.total_bytes);
            }
            FileWorkload::SizeLatency(z) => n(&mut z.files_per_size),
            FileWorkload::VideoServer(v) => {
                n(&mut v.files);
                v.files = v.files.max(2);
                n(&mut v.total_bytes);
                v.aging.scale(s);
            }
            FileWorkload::Torrent(t) => {
                n(&mut t.file_bytes_mean);
                n(&mut t.usage_limit_bytes);
                n(&mut t.total_bytes);
            }
            // A trace is what it is; only a request limit, when given, shrinks.
            FileWorkload::Trace(t) => {
                if let Some(m) = t.max_requests.as_mut() {
                    n(m);
                }
            }
        }
    }

    fn run(&self, m: &mut Meter) -> Result<workload::files::Phases, VariantRunError> {
        let r = match self {
            FileWorkload::PostMark(p) => workload::files::postmark::run(m, p),
            FileWorkload::HotCold(h) => workload::files::hotcold::run(m, h),
            FileWorkload::MultiStream(w) => workload::files::multistream::run(m, w),
            FileWorkload::SeqBase(s) => workload::files::seqbase::run(m, s),
            FileWorkload::LargeFile(l) => workload::files::largefile::run(m, l),
            FileWorkload::AppendHot(a) => workload::files::appendhot::run(m, a),
            FileWorkload::SizeLatency(z) => workload::files::sizes::run(m, z),
            FileWorkload::VideoServer(v) => workload::files::videoserver::run(m, v),
            FileWorkload::Torrent(t) => workload::files::torrent::run(m, t),
            FileWorkload::Trace(t) => workload::files::tracereplay::run(m, t),
            FileWorkload::Synthetic(_)
            | FileWorkload::BlockTrace(_)
            | FileWorkload::Video(_)
            | FileWorkload::FileWrites(_) => return Err(VariantRunError::BlockWorkload),
        };
        Ok(r?)
    }
}

pub use crate::variant::Variant;

/// What the paper claims, as a comparison the runner can check.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Claim {
    /// The paper's words (with its figure or table).
    pub text: String,
    /// The phase and metric compared (a key of [`VariantResult::metric`]).
    pub phase: String,
    /// The metric's name (see [`VariantResult::metric`] for the names).
    pub metric: String,
    /// Whether smaller is better for the metric.
    pub lower_is_better: bool,
    /// The variant the paper says wins, and the one it beats.
    pub better: String,
    /// The label of the variant the paper says loses.
    pub worse: String,
    /// When set, the claim is that the two variants are alike: it agrees when they differ by
    /// at most this many percent (of `worse`), whichever is lower.
    #[serde(default)]
    pub alike_within_percent: Option<f64>,
    /// The number the paper states for the claim, where it states one, with the tolerance
    /// within which a measurement agrees in magnitude (judged apart from the direction).
    #[serde(default)]
    pub paper: Option<PaperNumber>,
    /// What was found about why ossd disagrees, where it does at paper scale; the report shows
    /// it beside a disagreeing verdict (a result is explained, never adjusted).
    #[serde(default)]
    pub why: Option<String>,
}

/// What a paper's number measures, for [`PaperNumber::quantity`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Quantity {
    /// The improvement of `better` over `worse`, in percent of `worse`'s value (for a
    /// lower-is-better metric, how much lower).
    GainPercent,
    /// The `better` variant's value of the metric, in the metric's unit.
    Better,
    /// The `worse` variant's value of the metric, in the metric's unit.
    Worse,
    /// `better`'s value over `worse`'s (BLOCKMGMT-09 Table 5's "relative pages moved").
    Ratio,
    /// By how much `better` beats `worse`, in the metric's unit (for a lower-is-better metric,
    /// how much lower): OSCM-11 Fig. 7(b)'s "around 1000" fewer page writes.
    Difference,
}

impl Quantity {
    /// The quantity of a measurement: `better` and `worse` are the two variants' values.
    pub fn of(self, better: f64, worse: f64, lower_is_better: bool) -> Option<f64> {
        match self {
            Quantity::Better => Some(better),
            Quantity::Worse => Some(worse),
            Quantity::GainPercent | Quantity::Ratio if worse == 0.0 => None,
            Quantity::Ratio => Some(better / worse),
            Quantity::Difference if lower_is_better => Some(worse - better),
            Quantity::Difference => Some(better - worse),
            Quantity::GainPercent if lower_is_better => Some((worse - better) / worse * 100.0),
            Quantity::GainPercent => Some((better - worse) / worse * 100.0),
        }
    }

    /// How the quantity reads in a sentence.
    pub fn describe(self) -> &'static str {
        match self {
            Quantity::GainPercent => "gain",
            Quantity::Better => "the better variant's value",
            Quantity::Worse => "the worse variant's value",
            Quantity::Ratio => "better/worse ratio",
            Quantity::Difference => "difference",
        }
    }
}

/// A number a paper states for a claim: a value or a range of the [`Quantity`], and the
/// tolerance (in the quantity's unit) within which a measurement agrees with it in magnitude.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PaperNumber {
    /// What the number measures.
    pub quantity: Quantity,
    /// The paper's value (`value`) or range (`range = [low, high]`): exactly one is given.
    #[serde(default)]
    pub value: Option<f64>,
    /// The paper's range, when it states one (several rows, "15.1-32.5%").
    #[serde(default)]
    pub range: Option<[f64; 2]>,
    /// How far outside the paper's value or range a measurement still agrees, in the
    /// quantity's unit (percentage points for a gain).
    pub tolerance: f64,
    /// Why this tolerance: the paper's precision, the spread of its own rows, what it reads
    /// off a figure.
    pub tolerance_why: String,
    /// Where the paper states the number (section, figure or table).
    pub cite: String,
}

impl PaperNumber {
    /// The paper's range (a value is a range of width 0).
    pub fn bounds(&self) -> [f64; 2] {
        match (self.value, self.range) {
            (Some(v), _) => [v, v],
            (None, Some(r)) => r,
            (None, None) => [f64::NAN, f64::NAN],
        }
    }

    /// Whether `measured` lies within the tolerance of the paper's range.
    pub fn agrees(&self, measured: f64) -> bool {
        let [lo, hi] = self.bounds();
        (lo - self.tolerance..=hi + self.tolerance).contains(&measured)
    }

    /// The paper's number as the report states it: "9.9% ± 3 (Fig. 11)".
    pub fn describe(&self) -> String {
        let unit = if self.quantity == Quantity::GainPercent {
            "%"
        } else {
            ""
        };
        let [lo, hi] = self.bounds();
        let v = if lo == hi {
            format!("{}{unit}", num(lo))
        } else {
            format!("{}-{}{unit}", num(lo), num(hi))
        };
        format!(
            "{} {v} ± {} ({})",
            self.quantity.describe(),
            num(self.tolerance),
            self.cite
        )
    }

    fn check(&self) -> Result<(), String> {
        match (self.value, self.range) {
            (Some(_), Some(_)) => return Err("give `value` or `range`, not both".into()),
            (None, None) => return Err("give the paper's `value` or `range`".into()),
            _ => {}
        }
        let [lo, hi] = self.bounds();
        if !(lo.is_finite() && hi.is_finite() && lo <= hi) {
            return Err(format!("range [{lo}, {hi}] is not low <= high"));
        }
        if !(self.tolerance.is_finite() && self.tolerance >= 0.0) {
            return Err(format!("tolerance {} must be >= 0", self.tolerance));
        }
        if self.tolerance_why.trim().is_empty() || self.cite.trim().is_empty() {
            return Err("a paper number needs `tolerance_why` and `cite`".into());
        }
        Ok(())
    }
}

/// A number as the report prints it: thousands separators, at most three significant
/// decimals, no trailing zeros ("75,916", "54.49", "0.012", "0").
pub fn num(v: f64) -> String {
    if !v.is_finite() {
        return v.to_string();
    }
    let a = v.abs();
    let decimals = if a >= 100.0 || a == 0.0 {
        0
    } else if a >= 10.0 {
        1
    } else if a >= 1.0 {
        2
    } else {
        // Three significant digits below 1.
        (2 - a.log10().floor() as i32).clamp(0, 9) as usize
    };
    let s = format!("{a:.decimals$}");
    let (int, frac) = s.split_once('.').unwrap_or((&s, ""));
    let frac = frac.trim_end_matches('0');
    let mut grouped = String::new();
    for (i, c) in int.chars().enumerate() {
        if i > 0 && (int.len() - i) % 3 == 0 {
            grouped.push(',');
        }
        grouped.push(c);
    }
    let sign = if v < 0.0 && (int != "0" || !frac.is_empty()) {
        "-"
    } else {
        ""
    };
    if frac.is_empty() {
        format!("{sign}{grouped}")
    } else {
        format!("{sign}{grouped}.{frac}")
    }
}

/// One experiment of a seed paper, as its TOML file states it: a workload, the stack variants it
/// runs on, and the paper's claims about them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Experiment {
    /// Short name, by convention the file's stem (`000-vi-b-base`); report and plot files
    /// are named after it.
    pub name: String,
    /// One-line title for reports.
    pub title: String,
    /// Seed paper and section.
    pub source: String,
    /// Device preset.
    pub device: String,
    /// The workload every variant runs (at paper scale; a variant may change its parameters).
    pub workload: FileWorkload,
    /// The stack configurations compared (at least one).
    pub variants: Vec<Variant>,
    /// What the paper claims about the variants (none: measure only).
    #[serde(default)]
    pub claims: Vec<Claim>,
    /// Seed of the workload's random stream (default 42); every variant runs the same one.
    #[serde(default = "default_seed")]
    pub seed: u64,
    /// Share of the preset's blocks the device has at scale 1 (default 1; BLOCKMGMT-09 Table 5's
    /// 8 GB SSD is `ssd-004` at 0.25). `--scale` shrinks it further.
    #[serde(default = "default_device_scale")]
    pub device_scale: f64,
}

fn default_device_scale() -> f64 {
    1.0
}

fn default_seed() -> u64 {
    42
}

impl Experiment {
    /// Parses and checks an experiment: at least one variant, `device_scale` in (0, 1], every
    /// variant's workload and device valid, every claim naming defined variants. Errors name
    /// `origin` (the file name), and the line for a file that does not parse.
    pub fn from_toml(text: &str, origin: &str) -> Result<Experiment, ExperimentError> {
        let e: Experiment = toml::from_str(text).map_err(|source| ExperimentError::Parse {
            origin: origin.to_string(),
            line: line_of(text, &source),
            source: Box::new(source),
        })?;
        if e.variants.is_empty() {
            return Err(ExperimentError::NoVariants {
                origin: origin.to_string(),
            });
        }
        if !(e.device_scale > 0.0 && e.device_scale <= 1.0) {
            return Err(ExperimentError::DeviceScale {
                origin: origin.to_string(),
                scale: e.device_scale,
            });
        }
        let in_variant = |source| ExperimentError::Variant {
            origin: origin.to_string(),
            source,
        };
        for v in &e.variants {
            e.workload_of(v).map_err(in_variant)?;
            e.device_of(v).map_err(in_variant)?;
        }
        for c in &e.claims {
            if let Some(p) = &c.paper {
                p.check().map_err(|reason| ExperimentError::PaperNumber {
                    origin: origin.to_string(),
                    claim: c.text.clone(),
                    reason,
                })?;
            }
            for v in [&c.better, &c.worse] {
                if !e.variants.iter().any(|x| &x.label == v) {
                    return Err(ExperimentError::ClaimVariant {
                        origin: origin.to_string(),
                        label: v.clone(),
                    });
                }
            }
        }
        Ok(e)
    }

    /// The workload a variant runs: the experiment's, with the variant's changes.
    pub fn workload_of(&self, v: &Variant) -> Result<FileWorkload, VariantError> {
        let Some(changes) = &v.workload else {
            return Ok(self.workload.clone());
        };
        let label = || v.label.clone();
        if changes.contains_key("kind") {
            return Err(VariantError::KindChange { label: label() });
        }
        let mut t = toml::Table::try_from(&self.workload).map_err(|source| {
            VariantError::WorkloadTable {
                label: label(),
                source,
            }
        })?;
        for (k, val) in changes {
            t.insert(k.clone(), val.clone());
        }
        t.try_into()
            .map_err(|source: toml::de::Error| VariantError::Workload {
                label: label(),
                source: Box::new(source),
            })
    }

    /// The preset a variant runs on, at scale 1.
    pub fn device_of(&self, v: &Variant) -> Result<DeviceConfig, VariantError> {
        let name = v.device.as_deref().unwrap_or(&self.device);
        let device = flash::preset(name).map_err(|preset| VariantError::Device {
            label: v.label.clone(),
            preset,
        })?;
        Ok(scale_device(device, self.device_scale))
    }

    /// Reads and parses the experiment file at `path`; a trace workload's relative path is
    /// taken from the file's directory.
    pub fn load(path: &Path) -> Result<Experiment, ExperimentError> {
        let text = std::fs::read_to_string(path).map_err(|source| ExperimentError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let mut e = Self::from_toml(&text, &path.display().to_string())?;
        // A trace's relative path is the experiment file's business, not the caller's cwd.
        let dir = path.parent().unwrap_or(Path::new("."));
        match &mut e.workload {
            FileWorkload::Trace(t) => t.resolve(dir),
            FileWorkload::BlockTrace(t) => t.resolve(dir),
            _ => {}
        }
        Ok(e)
    }
}

/// The 1-based line of `text` where a TOML error's span starts, when it has one.
fn line_of(text: &str, e: &toml::de::Error) -> Option<usize> {
    let start = e.span()?.start;
    Some(text.get(..start)?.matches('\n').count() + 1)
}

/// Why an experiment file could not be read or was refused.
#[derive(Debug, thiserror::Error)]
pub enum ExperimentError {
    /// The file could not be read.
    #[error("cannot read {}: {source}", .path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not TOML, or not an experiment (a missing or unknown field, a value of the
    /// wrong type); the TOML parser's message shows the line and column.
    #[error("{origin}: {source}")]
    Parse {
        /// Where the text came from (the file name).
        origin: String,
        /// The 1-based line the error starts on, when the parser says.
        line: Option<usize>,
        /// The parser's error.
        source: Box<toml::de::Error>,
    },
    /// No variant.
    #[error("{origin}: an experiment needs at least one variant")]
    NoVariants {
        /// Where the text came from.
        origin: String,
    },
    /// `device_scale` outside (0, 1].
    #[error("{origin}: device_scale = {scale} must be in (0, 1]")]
    DeviceScale {
        /// Where the text came from.
        origin: String,
        /// The value.
        scale: f64,
    },
    /// A variant's workload or device is refused.
    #[error("{origin}: {source}")]
    Variant {
        /// Where the text came from.
        origin: String,
        /// What is wrong with the variant.
        source: VariantError,
    },
    /// A claim's paper number is incomplete or inconsistent.
    #[error("{origin}: claim \"{claim}\": paper number: {reason}")]
    PaperNumber {
        /// Where the text came from.
        origin: String,
        /// The claim's text.
        claim: String,
        /// What is wrong.
        reason: String,
    },
    /// A claim names a variant the experiment does not define.
    #[error("{origin}: claim names variant '{label}', not defined")]
    ClaimVariant {
        /// Where the text came from.
        origin: String,
        /// The label the claim names.
        label: String,
    },
}

/// Why a variant's workload or device could not be derived ([`Experiment::workload_of`],
/// [`Experiment::device_of`]).
#[derive(Debug, thiserror::Error)]
pub enum VariantError {
    /// The variant's workload table sets `kind`.
    #[error("variant {label}: workload: a variant cannot change the workload's kind")]
    KindChange {
        /// The variant's label.
        label: String,
    },
    /// The experiment's workload does not serialize to a table (a bug).
    #[error("variant {label}: workload: {source}")]
    WorkloadTable {
        /// The variant's label.
        label: String,
        /// The serializer's error.
        source: toml::ser::Error,
    },
    /// The workload with the variant's changes is not a workload (an unknown field, a value of
    /// the wrong type).
    #[error("variant {label}: workload: {source}")]
    Workload {
        /// The variant's label.
        label: String,
        /// The parser's error.
        source: Box<toml::de::Error>,
    },
    /// The device preset is unknown (the refusal names the known presets).
    #[error("variant {label}: {preset}")]
    Device {
        /// The variant's label.
        label: String,
        /// The flash crate's refusal.
        preset: flash::UnknownPreset,
    },
}

/// Why a variant of an experiment did not run to the end ([`VariantResult::error`] holds its
/// message).
#[derive(Debug, thiserror::Error)]
pub enum VariantRunError {
    /// Its workload or device could not be derived.
    #[error(transparent)]
    Variant(#[from] VariantError),
    /// A scheduled workload (synthetic, video, file-writes) failed.
    #[error(transparent)]
    Scheduled(#[from] crate::scheduled::ScheduledError),
    /// Its file-level stack could not be built.
    #[error("variant {label}: {source}")]
    Build {
        /// The variant's label.
        label: String,
        /// Why.
        source: StackError,
    },
    /// A block workload given to a file system.
    #[error("a block workload does not run on a file system")]
    BlockWorkload,
    /// The file system failed a call of the workload, or its check.
    #[error(transparent)]
    Fs(#[from] FsError),
}

/// The device shrunk with the workload: blocks per plane scaled by `s`, so that a scaled run
/// fills the device as the paper's did, but never below 64 virtual erase blocks (the FML needs
/// free blocks for its streams and watermarks).
pub fn scale_device(mut d: DeviceConfig, s: f64) -> DeviceConfig {
    let full = d.geometry.blocks_per_plane;
    d.geometry.blocks_per_plane = ((full as f64 * s).ceil() as u32).clamp(1, full);
    while d.geometry.blocks_per_plane < full && flash::gang::Layout::new(&d).superblocks < 64 {
        d.geometry.blocks_per_plane = (d.geometry.blocks_per_plane * 2).min(full);
    }
    d
}

/// What one variant measured.
#[derive(Clone, Debug, Serialize)]
pub struct VariantResult {
    /// The variant's label.
    pub label: String,
    /// One result per workload phase, in the order the phases ran.
    pub phases: Vec<PhaseResult>,
    /// Fewest erases of any block at the end of the run (wear levelling).
    pub erase_count_min: u32,
    /// Most erases of any block at the end of the run.
    pub erase_count_max: u32,
    /// Mean erases per block at the end of the run.
    pub erase_count_mean: f64,
    /// Problems the stack's consistency check found after the run (empty when sound).
    pub fsck_problems: Vec<String>,
    /// Real (not virtual) seconds the variant took to run.
    pub wall_seconds: f64,
    /// Why the variant stopped before finishing, if it did.
    pub error: Option<String>,
}

/// What one phase of a variant's run measured: file-level figures and the stack's counters over
/// the phase.
#[derive(Clone, Debug, Serialize)]
pub struct PhaseResult {
    /// The phase's name as the workload gives it ("buffered write", "transactions", ...).
    pub phase: String,
    /// File-level throughput, latency and operation counts.
    pub files: FileSummary,
    /// Bytes the workload wrote through the file system.
    pub host_write_bytes: u64,
    /// Physical pages, counted by the device model.
    pub flash_pages_programmed: u64,
    /// Physical pages in one write unit; the counters below are in write units.
    pub pages_per_unit: u64,
    /// Write units programmed with host data.
    pub data_units_written: u64,
    /// Physical pages read, counted by the device model.
    pub flash_pages_read: u64,
    /// Physical blocks erased, counted by the device model.
    pub flash_blocks_erased: u64,
    /// Valid write units GC copied.
    pub gc_page_copies: u64,
    /// Bytes GC copied (valid units moved x unit size; OSCM-11 Fig. 6's "bytes copied").
    pub gc_bytes_copied: u64,
    /// Virtual seconds GC steps took, issue to completion (BLOCKMGMT-09 Table 5's cleaning time).
    pub cleaning_seconds: f64,
    /// Index write units written (the object store's index nodes, an FTL's mapping pages).
    pub index_pages_written: u64,
    /// Index write units read on cache misses.
    pub index_pages_read: u64,
    /// Metadata write units written (onodes, descriptors, checkpoints, access times, logs).
    pub metadata_pages_written: u64,
    /// Flash bytes programmed over bytes the file system was asked to write.
    pub write_amplification: f64,
    /// Transactions completed in each virtual second, where the workload counts them.
    pub transactions_per_second: Vec<u64>,
    /// Read latency distribution: (microseconds, fraction of reads at or below).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub read_latency_cdf: Vec<(f64, f64)>,
    /// Write latency distribution: (microseconds, fraction of writes at or below).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub write_latency_cdf: Vec<(f64, f64)>,
}

impl VariantResult {
    /// A metric of a phase by name: a counter or a file-level figure.
    pub fn metric(&self, phase: &str, metric: &str) -> Option<f64> {
        let p = self.phases.iter().find(|p| p.phase == phase)?;
        let f = &p.files;
        Some(match metric {
            "throughput_mib_s" => f.throughput_mib_s,
            "write_mib_s" => f.write_mib_s,
            "read_mib_s" => f.read_mib_s,
            "transactions_per_s" => f.transactions_per_s,
            "min_transactions_per_s" => f.min_transactions_per_s?,
            "virtual_seconds" => f.virtual_seconds,
            "gc_page_copies" => p.gc_page_copies as f64,
            "gc_bytes_copied" => p.gc_bytes_copied as f64,
            "cleaning_seconds" => p.cleaning_seconds,
            "flash_pages_programmed" => p.flash_pages_programmed as f64,
            "flash_pages_read" => p.flash_pages_read as f64,
            // OSCM-11 Table II's page I/Os: pages read and written.
            "flash_page_ios" => (p.flash_pages_read + p.flash_pages_programmed) as f64,
            "flash_blocks_erased" => p.flash_blocks_erased as f64,
            "index_pages_written" => p.index_pages_written as f64,
            "metadata_pages_written" => p.metadata_pages_written as f64,
            "write_amplification" => p.write_amplification,
            "write_p99_us" => f.write_latency.p99_us,
            "read_p99_us" => f.read_latency.p99_us,
            "read_mean_us" => f.read_latency.mean_us,
            "write_mean_us" => f.write_latency.mean_us,
            // Mean response time over reads and writes (BLOCKMGMT-09 Tables 3 and 6).
            "response_mean_us" => {
                let (r, w) = (&f.read_latency, &f.write_latency);
                let n = r.count + w.count;
                if n == 0 {
                    return None;
                }
                (r.mean_us * r.count as f64 + w.mean_us * w.count as f64) / n as f64
            }
            // POFTL-14 Fig. 4(b): pages moved by GC divided by the erase count (physical blocks).
            "pages_moved_per_erased_block" => {
                if p.flash_blocks_erased == 0 {
                    0.0
                } else {
                    p.gc_page_copies as f64 / p.flash_blocks_erased as f64
                }
            }
            _ => return None,
        })
    }
}

fn phase_result(name: &str, s: &workload::files::FileStats, page_bytes: u64) -> PhaseResult {
    let c: Counters = s.counters;
    let files = s.summary();
    PhaseResult {
        phase: name.to_string(),
        host_write_bytes: files.write_bytes,
        flash_pages_programmed: c.flash_pages_programmed,
        pages_per_unit: c.pages_per_unit,
        data_units_written: c.data_units_written,
        flash_pages_read: c.flash_pages_read,
        flash_blocks_erased: c.flash_blocks_erased,
        gc_page_copies: c.gc_page_copies,
        gc_bytes_copied: c.gc_page_copies * c.pages_per_unit * page_bytes,
        cleaning_seconds: c.gc_ns as f64 / 1e9,
        index_pages_written: c.index_pages_written,
        index_pages_read: c.index_pages_read,
        metadata_pages_written: c.metadata_pages_written,
        write_amplification: if files.write_bytes == 0 {
            0.0
        } else {
            (c.flash_pages_programmed * page_bytes) as f64 / files.write_bytes as f64
        },
        transactions_per_second: s.per_second_transactions.clone(),
        read_latency_cdf: crate::run::cdf(&s.read_latency),
        write_latency_cdf: crate::run::cdf(&s.write_latency),
        files,
    }
}

/// Builds the stack of a variant on a fresh device; returns it with its flash page size.
pub type StackBuilder<'a> =
    dyn Fn(&Variant, DeviceConfig) -> Result<(Box<dyn FileStack>, u64), StackError> + Sync + 'a;

/// The stack of a file-level variant (`ofs`, `blockfs` or `poftl`), built by
/// [`stacks::StackSpec`] with the variant's settings on a fresh device; returns it with the
/// flash page size. The [`StackBuilder`] `ossd reproduce` uses.
pub fn build_file_stack(
    v: &Variant,
    device: DeviceConfig,
) -> Result<(Box<dyn FileStack>, u64), StackError> {
    let mut spec = stacks::StackSpec::new(v.stack);
    spec.name = v.label.clone();
    for (k, val) in &v.set {
        spec.set(k, val)?;
    }
    spec.build_file(device)
}

/// Runs one variant of an experiment at scale `s`.
pub fn run_variant(
    e: &Experiment,
    v: &Variant,
    s: f64,
    build: &StackBuilder,
    progress: &mut dyn FnMut(u64),
) -> VariantResult {
    let started = std::time::Instant::now();
    let mut out = VariantResult {
        label: v.label.clone(),
        phases: Vec::new(),
        erase_count_min: 0,
        erase_count_max: 0,
        erase_count_mean: 0.0,
        fsck_problems: Vec::new(),
        wall_seconds: 0.0,
        error: None,
    };
    let r = (|| -> Result<(), VariantRunError> {
        let device = scale_device(e.device_of(v)?, s);
        let mut scaled = e.workload_of(v)?;
        scaled.scale(s);
        let plan = match &scaled {
            FileWorkload::Synthetic(w) => Some(crate::prio::Plan::Synthetic(w)),
            FileWorkload::BlockTrace(w) => Some(crate::prio::Plan::BlockTrace(w)),
            FileWorkload::Video(w) => Some(crate::prio::Plan::Video(w)),
            FileWorkload::FileWrites(w) => Some(crate::prio::Plan::FileWrites(w)),
            _ => None,
        };
        if let Some(plan) = plan {
            let run = crate::scheduled::run_variant(plan, v, device, e.seed)?;
            let page = device.geometry.page_size_bytes as u64;
            out.phases = run
                .phases
                .iter()
                .map(|(n, st)| phase_result(n, st, page))
                .collect();
            (
                out.erase_count_min,
                out.erase_count_max,
                out.erase_count_mean,
            ) = run.erase_counts;
            out.fsck_problems = run.fsck_problems;
            progress(out.phases.iter().map(|p| p.host_write_bytes).sum());
            return Ok(());
        }
        let (mut fs, page_bytes) = build(v, device).map_err(|source| VariantRunError::Build {
            label: v.label.clone(),
            source,
        })?;
        let w = scaled;
        let phases = {
            let mut m =
                Meter::new(fs.as_mut(), ChaCha8Rng::seed_from_u64(e.seed)).with_progress(progress);
            w.run(&mut m)?
        };
        out.phases = phases
            .iter()
            .map(|(n, st)| phase_result(n, st, page_bytes))
            .collect();
        (
            out.erase_count_min,
            out.erase_count_max,
            out.erase_count_mean,
        ) = fs.erase_counts();
        out.fsck_problems = fs.check()?;
        Ok(())
    })();
    out.error = r.err().map(|e| e.to_string());
    out.wall_seconds = started.elapsed().as_secs_f64();
    out
}

/// An experiment's results and how they compare with the paper.
#[derive(Clone, Debug, Serialize)]
pub struct ExperimentResult {
    /// The experiment's name.
    pub name: String,
    /// The experiment's title.
    pub title: String,
    /// Seed paper and section.
    pub source: String,
    /// Device preset.
    pub device: String,
    /// The scale the workload and device ran at (1: paper scale).
    pub scale: f64,
    /// The seeds every variant ran at, the experiment's own first (whose measurements are
    /// reported; the others feed the verdicts' stability).
    pub seeds: Vec<u64>,
    /// Each variant's results at the first seed, in the experiment's order.
    pub variants: Vec<VariantResult>,
    /// One verdict per claim, in the experiment's order.
    pub verdicts: Vec<Verdict>,
    /// The (phase, metric) of each claim.
    pub claimed: Vec<(String, String)>,
}

/// Runs every variant of `e` (one after another) and judges the claims.
pub fn run_experiment(
    e: &Experiment,
    s: f64,
    build: &StackBuilder,
    progress: &mut dyn FnMut(&str, u64),
) -> ExperimentResult {
    let variants: Vec<VariantResult> = e
        .variants
        .iter()
        .map(|v| run_variant(e, v, s, build, &mut |b| progress(&v.label, b)))
        .collect();
    ExperimentResult::new(e, s, variants)
}

/// The seeds an experiment runs at when `n` are asked for: its own, then the next ones.
pub fn seeds_of(e: &Experiment, n: usize) -> Vec<u64> {
    (0..n.max(1) as u64)
        .map(|i| e.seed.wrapping_add(i))
        .collect()
}

impl ExperimentResult {
    /// The result of `e` at scale `s` from its variants' results (in `e.variants` order), at
    /// the experiment's own seed only.
    pub fn new(e: &Experiment, s: f64, variants: Vec<VariantResult>) -> ExperimentResult {
        Self::over_seeds(e, s, vec![(e.seed, variants)])
    }

    /// The result of `e` at scale `s` from runs at several seeds, each (seed, its variants'
    /// results in `e.variants` order), the experiment's own seed first: the first run's
    /// measurements are reported, and every claim is judged at every seed (a verdict that
    /// changes with the seed is [`Outcome::Unstable`]).
    pub fn over_seeds(
        e: &Experiment,
        s: f64,
        mut runs: Vec<(u64, Vec<VariantResult>)>,
    ) -> ExperimentResult {
        let per_seed: Vec<(u64, Vec<Judged>)> = runs
            .iter()
            .map(|(seed, vs)| (*seed, judge_seed(e, vs)))
            .collect();
        let verdicts = e
            .claims
            .iter()
            .enumerate()
            .map(|(i, c)| combine(c, per_seed.iter().map(|(seed, j)| (*seed, &j[i]))))
            .collect();
        let variants = if runs.is_empty() {
            Vec::new()
        } else {
            runs.swap_remove(0).1
        };
        ExperimentResult {
            name: e.name.clone(),
            title: e.title.clone(),
            source: e.source.clone(),
            device: e.device.clone(),
            scale: s,
            seeds: per_seed.iter().map(|(seed, _)| *seed).collect(),
            verdicts,
            claimed: e
                .claims
                .iter()
                .map(|c| (c.phase.clone(), c.metric.clone()))
                .collect(),
            variants,
        }
    }
}

/// Where a claim stands over every seed it was judged at (direction or magnitude).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Agrees at every seed.
    Agrees,
    /// Disagrees at every seed.
    Disagrees,
    /// Agrees at some seeds and not at others: not counted as agreeing.
    Unstable,
    /// A variant's metric is missing at some seed (it failed).
    NotMeasured,
}

impl Outcome {
    /// The outcome of per-seed verdicts (`None`: not measured at that seed).
    pub fn over(per_seed: impl IntoIterator<Item = Option<bool>>) -> Outcome {
        let (mut yes, mut no) = (false, false);
        for v in per_seed {
            match v {
                None => return Outcome::NotMeasured,
                Some(true) => yes = true,
                Some(false) => no = true,
            }
        }
        match (yes, no) {
            (true, false) => Outcome::Agrees,
            (false, true) => Outcome::Disagrees,
            (true, true) => Outcome::Unstable,
            (false, false) => Outcome::NotMeasured,
        }
    }

    /// How the report says it.
    pub fn label(self) -> &'static str {
        match self {
            Outcome::Agrees => "agrees",
            Outcome::Disagrees => "disagrees",
            Outcome::Unstable => "unstable",
            Outcome::NotMeasured => "not measured",
        }
    }
}

/// One claim judged at one seed.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SeedVerdict {
    /// The workload's seed.
    pub seed: u64,
    /// Whether the measurement goes the paper's way; `None` when not measured.
    pub agrees: Option<bool>,
    /// Whether the measured quantity lies within the tolerance of the paper's number; `None`
    /// when the paper states none, or not measured.
    pub magnitude_agrees: Option<bool>,
    /// The paper-number's quantity as measured (the gain in percent, or a variant's value).
    pub quantity: Option<f64>,
}

/// A claim judged at one seed, with its measurements.
struct Judged {
    verdict: SeedVerdict,
    better: Option<f64>,
    worse: Option<f64>,
}

/// How one claim fared against the measurements, at every seed it ran at.
#[derive(Clone, Debug, Serialize)]
pub struct Verdict {
    /// The claim's text.
    pub claim: String,
    /// The measured values of both variants (and the quantity the paper states, where it
    /// states one) at the first seed, or why there are none.
    pub measured: String,
    /// Whether the measurement goes the paper's way at the first seed (the better variant is
    /// better, or alike when the claim says so).
    pub agrees: Option<bool>,
    /// Whether the measured quantity lies within the tolerance of the paper's number at the
    /// first seed; `None` when the paper states no number.
    pub magnitude_agrees: Option<bool>,
    /// The direction verdict over every seed.
    pub direction: Outcome,
    /// The magnitude verdict over every seed; `None` when the paper states no number.
    pub magnitude: Option<Outcome>,
    /// The paper's number, its tolerance and why, and where the paper states it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub paper: Option<PaperNumber>,
    /// The first seed's values of the better and the worse variant.
    pub better_value: Option<f64>,
    /// See `better_value`.
    pub worse_value: Option<f64>,
    /// Every seed's verdicts, the first seed first.
    pub seeds: Vec<SeedVerdict>,
    /// The claim's explanation, when a verdict is not agreement.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
}

/// Judges every claim of `e` at one seed, on that seed's variants' results.
fn judge_seed(e: &Experiment, variants: &[VariantResult]) -> Vec<Judged> {
    e.claims
        .iter()
        .map(|c| {
            let get = |label: &str| {
                variants
                    .iter()
                    .find(|v| v.label == label)
                    .and_then(|v| v.metric(&c.phase, &c.metric))
            };
            let (better, worse) = (get(&c.better), get(&c.worse));
            let (agrees, quantity) = match (better, worse) {
                (Some(b), Some(w)) => {
                    let agrees = match c.alike_within_percent {
                        Some(tol) => (b - w).abs() <= tol / 100.0 * w.abs(),
                        None if c.lower_is_better => b < w,
                        None => b > w,
                    };
                    let q = c
                        .paper
                        .as_ref()
                        .and_then(|p| p.quantity.of(b, w, c.lower_is_better));
                    (Some(agrees), q)
                }
                _ => (None, None),
            };
            let magnitude_agrees = match (&c.paper, agrees) {
                (Some(p), Some(_)) => Some(quantity.is_some_and(|q| p.agrees(q))),
                _ => None,
            };
            Judged {
                verdict: SeedVerdict {
                    seed: e.seed,
                    agrees,
                    magnitude_agrees,
                    quantity,
                },
                better,
                worse,
            }
        })
        .collect()
}

/// One claim's verdict over its per-seed judgements (the first is reported).
fn combine<'a>(c: &Claim, judged: impl Iterator<Item = (u64, &'a Judged)>) -> Verdict {
    let judged: Vec<(u64, &Judged)> = judged.collect();
    let seeds: Vec<SeedVerdict> = judged
        .iter()
        .map(|(seed, j)| SeedVerdict {
            seed: *seed,
            ..j.verdict.clone()
        })
        .collect();
    let direction = Outcome::over(seeds.iter().map(|s| s.agrees));
    let magnitude = c
        .paper
        .as_ref()
        .map(|_| Outcome::over(seeds.iter().map(|s| s.magnitude_agrees)));
    let first = judged.first().map(|(_, j)| *j);
    let (better, worse) = first.map_or((None, None), |j| (j.better, j.worse));
    let measured = match (better, worse) {
        (Some(b), Some(w)) => {
            let mut m = format!(
                "{} {}: {} {}, {} {}",
                c.phase,
                c.metric,
                c.better,
                num(b),
                c.worse,
                num(w)
            );
            if let Some(p) = &c.paper {
                let q = first.and_then(|j| j.verdict.quantity);
                let unit = if p.quantity == Quantity::GainPercent {
                    "%"
                } else {
                    ""
                };
                // A gain of nothing over nothing (both 0) has no value, and no unit.
                let ours = q.map_or(
                    "undefined (the worse variant measured 0)".to_string(),
                    |q| format!("{}{unit}", num(q)),
                );
                let _ = std::fmt::Write::write_fmt(
                    &mut m,
                    format_args!(
                        "; {} {ours} (the paper: {})",
                        p.quantity.describe(),
                        p.describe()
                    ),
                );
            }
            if seeds.len() > 1 {
                let per: Vec<String> = seeds
                    .iter()
                    .map(|s| {
                        let d = match s.agrees {
                            Some(true) => "yes",
                            Some(false) => "no",
                            None => "-",
                        };
                        match s.quantity {
                            Some(q) if c.paper.is_some() => format!("{} {d} ({})", s.seed, num(q)),
                            _ => format!("{} {d}", s.seed),
                        }
                    })
                    .collect();
                let _ = std::fmt::Write::write_fmt(
                    &mut m,
                    format_args!("; by seed: {}", per.join(", ")),
                );
            }
            m
        }
        _ => format!("{} {} not measured (a variant failed)", c.phase, c.metric),
    };
    let settled = direction == Outcome::Agrees && magnitude.is_none_or(|m| m == Outcome::Agrees);
    Verdict {
        claim: c.text.clone(),
        measured,
        agrees: first.and_then(|j| j.verdict.agrees),
        magnitude_agrees: first.and_then(|j| j.verdict.magnitude_agrees),
        direction,
        magnitude,
        paper: c.paper.clone(),
        better_value: better,
        worse_value: worse,
        seeds,
        why: (!settled && direction != Outcome::NotMeasured)
            .then(|| c.why.clone())
            .flatten(),
    }
}

/// Judges every claim of `e` on the variants' results at the experiment's seed: `agrees` is
/// `None` when a variant's metric is missing (it failed, or has no such phase or metric).
pub fn judge(e: &Experiment, variants: &[VariantResult]) -> Vec<Verdict> {
    let judged = judge_seed(e, variants);
    e.claims
        .iter()
        .zip(&judged)
        .map(|(c, j)| combine(c, std::iter::once((e.seed, j))))
        .collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) const HOTCOLD: &str = r#"
name = "hotcold"
title = "Hot/cold files"
source = "OSSD-13 VI-D"
device = "tiny"

[workload]
kind = "hot-cold"
files = 100
file_bytes = 8192
total_bytes = 4000000

[[variants]]
label = "A"
stack = "ofs"

[[variants]]
label = "B"
stack = "ofs"
set = { "placement" = "one" }

[[claims]]
text = "A copies fewer pages"
phase = "rewrite"
metric = "transactions_per_s"
lower_is_better = false
better = "A"
worse = "B"
"#;

    #[test]
    fn definitions_parse_scale_and_reject_mistakes() {
        let mut e = Experiment::from_toml(HOTCOLD, "t.toml").unwrap();
        assert_eq!(e.variants[1].set["placement"], "one");
        e.workload.scale(0.5);
        let FileWorkload::HotCold(h) = &e.workload else {
            panic!()
        };
        assert_eq!(
            (h.files, h.total_bytes, h.file_bytes),
            (50, 2_000_000, 8192)
        );
        let bad = HOTCOLD.replace("worse = \"B\"", "worse = \"C\"");
        assert!(matches!(
            Experiment::from_toml(&bad, "t.toml"),
            Err(ExperimentError::ClaimVariant { label, .. }) if label == "C"
        ));
        let bad = HOTCOLD.replace("kind = \"hot-cold\"", "kind = \"hotcold\"");
        let e = Experiment::from_toml(&bad, "t.toml").unwrap_err();
        assert!(
            matches!(&e, ExperimentError::Parse { origin, line: Some(8), .. } if origin == "t.toml"),
            "{e:?}"
        );
        assert!(e.to_string().starts_with("t.toml"), "{e}");
    }

    #[test]
    fn a_variant_may_change_the_device_and_workload_but_not_its_kind() {
        let with = |extra: &str| {
            HOTCOLD.replace(
                "set = { \"placement\" = \"one\" }",
                &format!("set = {{ \"placement\" = \"one\" }}\n{extra}"),
            )
        };
        let e = Experiment::from_toml(
            &with("device = \"nandsim-128m\"\nworkload = { files = 7 }"),
            "t.toml",
        )
        .unwrap();
        let FileWorkload::HotCold(h) = e.workload_of(&e.variants[1]).unwrap() else {
            panic!()
        };
        assert_eq!((h.files, h.file_bytes), (7, 8192));
        let FileWorkload::HotCold(h) = e.workload_of(&e.variants[0]).unwrap() else {
            panic!()
        };
        assert_eq!(h.files, 100);
        let nandsim = flash::preset("nandsim-128m").unwrap();
        assert_eq!(e.device_of(&e.variants[1]).unwrap(), nandsim);
        assert_eq!(
            e.device_of(&e.variants[0]).unwrap(),
            flash::preset("tiny").unwrap()
        );
        for (extra, says) in [
            ("workload = { kind = \"post-mark\" }", "kind"),
            ("workload = { filez = 7 }", "filez"),
            ("workload = { files = \"many\" }", "variant B"),
            ("device = \"floppy\"", "floppy"),
        ] {
            let err = match Experiment::from_toml(&with(extra), "t.toml") {
                Ok(e) => e.device_of(&e.variants[1]).unwrap_err().to_string(),
                Err(e) => e.to_string(),
            };
            assert!(err.contains(says), "{extra}: {err}");
        }
        let half = HOTCOLD.replace(
            "device = \"tiny\"",
            "device = \"nandsim-128m\"\ndevice_scale = 0.5",
        );
        let e = Experiment::from_toml(&half, "t.toml").unwrap();
        assert_eq!(
            e.device_of(&e.variants[0])
                .unwrap()
                .geometry
                .blocks_per_plane,
            nandsim.geometry.blocks_per_plane / 2
        );
        for bad in ["0.0", "1.5", "-1.0"] {
            let t = HOTCOLD.replace(
                "device = \"tiny\"",
                &format!("device = \"tiny\"\ndevice_scale = {bad}"),
            );
            assert!(matches!(
                Experiment::from_toml(&t, "t.toml"),
                Err(ExperimentError::DeviceScale { .. })
            ));
        }
    }

    /// The HOTCOLD experiment run on the in-memory oracle (no device time).
    pub(crate) fn hotcold_result() -> ExperimentResult {
        let e = Experiment::from_toml(HOTCOLD, "t.toml").unwrap();
        let build =
            |_: &Variant, _: DeviceConfig| -> Result<(Box<dyn FileStack>, u64), StackError> {
                Ok((Box::new(vfs::oracle::MemFs::default()), 4096))
            };
        run_experiment(&e, 1.0, &build, &mut |_, _| {})
    }

    #[test]
    fn numbers_print_with_separators_and_without_noise() {
        for (v, s) in [
            (75916.0, "75,916"),
            (1234567.4, "1,234,567"),
            (54.493, "54.5"),
            (4.5415, "4.54"),
            (0.0, "0"),
            (2.0, "2"),
            (0.012345, "0.0123"),
            (-448350.0, "-448,350"),
            (-0.0001, "-0.0001"),
        ] {
            assert_eq!(num(v), s, "{v}");
        }
    }

    /// A claim of HOTCOLD with `paper` set, judged on made-up values of A and B at each seed.
    fn judged(paper: &str, seeds: &[(f64, f64)]) -> Verdict {
        let text = HOTCOLD.replace(
            "worse = \"B\"",
            &format!("worse = \"B\"\npaper = {{ {paper}, tolerance_why = \"t\", cite = \"c\" }}"),
        );
        let e = Experiment::from_toml(&text, "t.toml").unwrap();
        let variant = |label: &str, tps: f64| {
            let mut files = vfs_summary();
            files.transactions_per_s = tps;
            VariantResult {
                label: label.into(),
                phases: vec![PhaseResult {
                    phase: "rewrite".into(),
                    files,
                    host_write_bytes: 0,
                    flash_pages_programmed: 0,
                    pages_per_unit: 1,
                    data_units_written: 0,
                    flash_pages_read: 0,
                    flash_blocks_erased: 0,
                    gc_page_copies: 0,
                    gc_bytes_copied: 0,
                    cleaning_seconds: 0.0,
                    index_pages_written: 0,
                    index_pages_read: 0,
                    metadata_pages_written: 0,
                    write_amplification: 0.0,
                    transactions_per_second: Vec::new(),
                    read_latency_cdf: Vec::new(),
                    write_latency_cdf: Vec::new(),
                }],
                erase_count_min: 0,
                erase_count_max: 0,
                erase_count_mean: 0.0,
                fsck_problems: Vec::new(),
                wall_seconds: 0.0,
                error: None,
            }
        };
        let runs = seeds
            .iter()
            .enumerate()
            .map(|(i, (a, b))| (42 + i as u64, vec![variant("A", *a), variant("B", *b)]))
            .collect();
        let mut r = ExperimentResult::over_seeds(&e, 1.0, runs);
        r.verdicts.remove(0)
    }

    fn vfs_summary() -> FileSummary {
        let r = hotcold_result();
        r.variants[0].phases[0].files
    }

    #[test]
    fn direction_and_magnitude_are_judged_apart_and_over_seeds() {
        let gain = "quantity = \"gain_percent\", value = 10.0, tolerance = 2.5";
        // A is 11% better than B: both agree.
        let v = judged(gain, &[(111.0, 100.0)]);
        assert_eq!(
            (v.direction, v.magnitude),
            (Outcome::Agrees, Some(Outcome::Agrees))
        );
        assert!(v.measured.contains("gain 11%"), "{}", v.measured);
        // 50% better: the direction agrees, the magnitude does not.
        let v = judged(gain, &[(150.0, 100.0)]);
        assert_eq!(
            (v.direction, v.magnitude),
            (Outcome::Agrees, Some(Outcome::Disagrees))
        );
        // Within the tolerance at the edge, outside just past it.
        assert_eq!(
            judged(gain, &[(112.5, 100.0)]).magnitude,
            Some(Outcome::Agrees)
        );
        assert_eq!(
            judged(gain, &[(112.6, 100.0)]).magnitude,
            Some(Outcome::Disagrees)
        );
        // A verdict that changes with the seed is unstable, of either kind.
        let v = judged(gain, &[(111.0, 100.0), (90.0, 100.0), (111.0, 100.0)]);
        assert_eq!(v.direction, Outcome::Unstable);
        assert_eq!(v.seeds.len(), 3);
        assert_eq!(v.agrees, Some(true), "the first seed's own verdict is kept");
        let v = judged(gain, &[(111.0, 100.0), (130.0, 100.0)]);
        assert_eq!(
            (v.direction, v.magnitude),
            (Outcome::Agrees, Some(Outcome::Unstable))
        );
        // The other quantities.
        let ratio = "quantity = \"ratio\", value = 0.31, tolerance = 0.08";
        assert_eq!(
            judged(ratio, &[(31.0, 100.0)]).magnitude,
            Some(Outcome::Agrees)
        );
        assert_eq!(
            judged(ratio, &[(21.0, 100.0)]).magnitude,
            Some(Outcome::Disagrees)
        );
        let diff = "quantity = \"difference\", value = 1000.0, tolerance = 500.0";
        assert_eq!(
            judged(diff, &[(1500.0, 100.0)]).magnitude,
            Some(Outcome::Agrees)
        );
        assert_eq!(
            judged(diff, &[(3000.0, 100.0)]).magnitude,
            Some(Outcome::Disagrees)
        );
        // For a lower-is-better metric the difference is how much lower `better` is.
        assert_eq!(Quantity::Difference.of(4.0, 10.0, true), Some(6.0));
        assert_eq!(Quantity::Difference.of(10.0, 4.0, true), Some(-6.0));
        let zero = "quantity = \"worse\", value = 0.0, tolerance = 0.0";
        assert_eq!(judged(zero, &[(1.0, 0.0)]).magnitude, Some(Outcome::Agrees));
        assert_eq!(
            judged(zero, &[(2.0, 1.0)]).magnitude,
            Some(Outcome::Disagrees)
        );
        let range = "quantity = \"better\", range = [10.0, 20.0], tolerance = 1.0";
        assert_eq!(
            judged(range, &[(21.0, 1.0)]).magnitude,
            Some(Outcome::Agrees)
        );
        assert_eq!(
            judged(range, &[(8.5, 1.0)]).magnitude,
            Some(Outcome::Disagrees)
        );
        // A claim without a number has no magnitude verdict.
        let e = Experiment::from_toml(HOTCOLD, "t.toml").unwrap();
        assert!(e.claims[0].paper.is_none());
    }

    #[test]
    fn a_paper_number_must_be_complete() {
        for (paper, says) in [
            ("quantity = \"gain_percent\", tolerance = 1.0", "value"),
            (
                "quantity = \"gain_percent\", value = 1.0, range = [1.0, 2.0], tolerance = 1.0",
                "not both",
            ),
            (
                "quantity = \"gain_percent\", range = [3.0, 2.0], tolerance = 1.0",
                "low <= high",
            ),
            (
                "quantity = \"gain_percent\", value = 1.0, tolerance = -1.0",
                "tolerance",
            ),
        ] {
            let text = HOTCOLD.replace(
                "worse = \"B\"",
                &format!(
                    "worse = \"B\"\npaper = {{ {paper}, tolerance_why = \"t\", cite = \"c\" }}"
                ),
            );
            let err = Experiment::from_toml(&text, "t.toml").unwrap_err();
            assert!(matches!(err, ExperimentError::PaperNumber { .. }), "{err}");
            assert!(err.to_string().contains(says), "{paper}: {err}");
        }
        let text = HOTCOLD.replace(
            "worse = \"B\"",
            "worse = \"B\"\npaper = { quantity = \"gain_percent\", value = 1.0, tolerance = 1.0, tolerance_why = \"t\" }",
        );
        assert!(matches!(
            Experiment::from_toml(&text, "t.toml"),
            Err(ExperimentError::Parse { .. })
        ));
        let old = HOTCOLD.replace("worse = \"B\"", "worse = \"B\"\npaper_percent = [1.0, 2.0]");
        assert!(
            Experiment::from_toml(&old, "t.toml").is_err(),
            "the old field is refused, not ignored"
        );
    }

    #[test]
    fn variants_run_and_claims_are_judged() {
        let e = Experiment::from_toml(HOTCOLD, "t.toml").unwrap();
        let r = hotcold_result();
        let results = &r.variants;
        assert!(results.iter().all(|r| r.error.is_none()), "{results:?}");
        assert_eq!(results[0].phases[1].phase, "rewrite");
        let v = judge(&e, results);
        // The oracle takes no time, so the comparison is undecided but measured.
        assert_eq!(v.len(), 1);
        assert!(v[0].measured.contains("transactions_per_s"));
    }
}
