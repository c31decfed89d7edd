//! The workloads of the scheduled experiments, as requests with arrival times:
//! BLOCKMGMT-09's open-loop synthetic workload (3.2, 3.4, 3.6) and OSSD-13 VI-E's video and
//! prioritized file writes. The lab runs them through the device-side controller
//! (`lab::prio`, `lab::scheduled`).

use controller::request::{Op, Request};
use flash::Nanos;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

/// The open-loop synthetic workload of BLOCKMGMT-09 (3.2, 3.4, 3.6): fixed-size requests with
/// uniformly distributed inter-arrival times, a share of writes, a share of priority
/// requests, and a probability that a request continues where the previous one ended.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Synthetic {
    /// Requests measured (default 100,000).
    pub requests: u64,
    /// Bytes per request (default 4096).
    pub request_bytes: u64,
    /// Share of writes, in percent (default 50).
    pub write_percent: f64,
    /// Share of priority requests, in percent (default 10, BLOCKMGMT-09 3.6).
    pub priority_percent: f64,
    /// Inter-arrival times are uniform in `[0, interarrival_max_ns]` (default 0.1 ms).
    pub interarrival_max_ns: Nanos,
    /// Probability that a request starts where the previous one ended (default 0).
    pub sequential_probability: f64,
    /// Share of the logical capacity the workload touches, written before measuring (default
    /// 0.75; BLOCKMGMT-09 does not give it).
    pub utilisation: f64,
}

impl Default for Synthetic {
    fn default() -> Self {
        Synthetic {
            requests: 100_000,
            request_bytes: 4096,
            write_percent: 50.0,
            priority_percent: 10.0,
            interarrival_max_ns: 100_000,
            sequential_probability: 0.0,
            utilisation: 0.75,
        }
    }
}

impl Synthetic {
    /// Checks the parameters: `request_bytes` a positive multiple of 512, the percentages in
    /// 0..=100, `sequential_probability` in 0..=1, `utilisation` in (0, 1].
    pub fn validate(&self) -> Result<(), PlanError> {
        if self.request_bytes == 0 || !self.request_bytes.is_multiple_of(512) {
            return Err(PlanError::RequestBytes {
                bytes: self.request_bytes,
            });
        }
        for (field, value) in [
            ("write_percent", self.write_percent),
            ("priority_percent", self.priority_percent),
        ] {
            if !(0.0..=100.0).contains(&value) {
                return Err(PlanError::Percent { field, value });
            }
        }
        if !(0.0..=1.0).contains(&self.sequential_probability) {
            return Err(PlanError::SequentialProbability {
                value: self.sequential_probability,
            });
        }
        if !(self.utilisation > 0.0 && self.utilisation <= 1.0) {
            return Err(PlanError::Utilisation {
                value: self.utilisation,
            });
        }
        Ok(())
    }

    /// The requests over a footprint of `footprint_bytes` from `start_ns`, drawn from `seed`.
    pub fn requests(
        &self,
        footprint_bytes: u64,
        start_ns: Nanos,
        seed: u64,
    ) -> impl Iterator<Item = Request> + '_ {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let slots = (footprint_bytes / self.request_bytes).max(1);
        let mut t = start_ns;
        let mut next_offset = 0u64;
        (0..self.requests).map(move |_| {
            t += rng.gen_range(0..=self.interarrival_max_ns);
            let op = if rng.gen_bool(self.write_percent / 100.0) {
                Op::Write
            } else {
                Op::Read
            };
            let priority = rng.gen_bool(self.priority_percent / 100.0) as u8;
            let offset = if rng.gen_bool(self.sequential_probability) {
                next_offset
            } else {
                rng.gen_range(0..slots) * self.request_bytes
            };
            next_offset = (offset + self.request_bytes) % (slots * self.request_bytes);
            Request {
                op,
                offset_bytes: offset,
                len_bytes: self.request_bytes,
                priority,
                arrival_ns: Some(t),
            }
        })
    }
}

/// Why the parameters of a scheduled workload ([`Synthetic`], [`Video`], [`FileWrites`]) were
/// refused, or do not fit the footprint they run on.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum PlanError {
    /// `request_bytes` of the synthetic workload is 0 or not a multiple of 512.
    #[error("request_bytes = {bytes} must be a positive multiple of 512")]
    RequestBytes {
        /// The value.
        bytes: u64,
    },
    /// `write_percent` or `priority_percent` outside 0..=100.
    #[error("{field} = {value} must lie in 0..=100")]
    Percent {
        /// The parameter.
        field: &'static str,
        /// Its value.
        value: f64,
    },
    /// `sequential_probability` outside 0..=1.
    #[error("sequential_probability = {value} must lie in 0..=1")]
    SequentialProbability {
        /// The value.
        value: f64,
    },
    /// `utilisation` outside (0, 1].
    #[error("utilisation = {value} must lie in (0, 1]")]
    Utilisation {
        /// The value.
        value: f64,
    },
    /// A file-writes run with no files, no file slots or priority 0.
    #[error("file-writes: files, file_slots and priority must be at least 1")]
    FileWritesZero,
    /// `file_bytes` or `request_bytes` of a file-writes run is 0 or not a multiple of 512.
    #[error("file-writes: {field} = {value} must be a positive multiple of 512")]
    FileWritesSectors {
        /// The parameter.
        field: &'static str,
        /// Its value.
        value: u64,
    },
    /// A file-writes request larger than its file.
    #[error("file-writes: request_bytes = {request_bytes} exceeds file_bytes = {file_bytes}")]
    RequestOverFile {
        /// `request_bytes`.
        request_bytes: u64,
        /// `file_bytes`.
        file_bytes: u64,
    },
    /// `file_slots x file_bytes` overflows 64 bits.
    #[error("file-writes: file_slots x file_bytes overflows")]
    FileSlotsOverflow,
    /// A video with no frames per second, frame bytes or priority.
    #[error("video: frames_per_second, frame_bytes and priority must be at least 1")]
    VideoZero,
    /// A video frame that is not whole sectors.
    #[error("video: frame_bytes = {bytes} is not a multiple of 512")]
    FrameBytes {
        /// `frame_bytes`.
        bytes: u64,
    },
    /// The foreground (the video, the file slots) leaves the background writer less than a
    /// quarter of the footprint.
    #[error("{workload}: {bytes} bytes of {what} leave too little of the {footprint}-byte footprint to the background writer")]
    TooLittleLeft {
        /// "video" or "file-writes".
        workload: &'static str,
        /// Bytes the foreground takes.
        bytes: u64,
        /// What takes them ("video", "file slots").
        what: &'static str,
        /// The footprint in bytes.
        footprint: u64,
    },
}

/// OSSD-13 VI-E's prioritized read: a video played at a fixed frame rate (one read of
/// `frame_bytes` per frame, sequentially through the video) while a background writer runs.
/// The video occupies the start of the footprint, the writer the rest; a frame is shown on
/// time when its read completes within one frame period.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Video {
    /// Default 30 (OSSD-13 VI-E).
    pub frames_per_second: u32,
    /// Length of the video (default 200 s, OSSD-13 VI-E); `--scale` shortens it.
    pub seconds: u64,
    /// Bytes read per frame (default 64 KiB, about a 15 Mbit/s stream; the paper does not
    /// give its video's bit rate).
    pub frame_bytes: u64,
    /// The video's priority (default 1).
    pub priority: u8,
    /// The background writer; its requests arrive for as long as the video plays (its
    /// `requests` count is not used) and its priority share is ignored (all normal).
    pub background: Synthetic,
}

impl Default for Video {
    fn default() -> Self {
        Video {
            frames_per_second: 30,
            seconds: 200,
            frame_bytes: 64 << 10,
            priority: 1,
            background: Synthetic {
                write_percent: 100.0,
                priority_percent: 0.0,
                ..Synthetic::default()
            },
        }
    }
}

/// OSSD-13 VI-E's prioritized write: files written one after another with priority (each as
/// a burst of requests, the next file once the last request of the previous one completes)
/// while the background writer runs. A file is one transaction; its write latency is from its
/// first request's issue by the host to its last request's completion.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FileWrites {
    /// Files written (default 1,000, OSSD-13 VI-E); `--scale` shrinks it.
    pub files: u64,
    /// Bytes per file (default 2 MiB, OSSD-13 VI-E).
    pub file_bytes: u64,
    /// Bytes per request (default 128 KiB: 256 sectors, OAQ's and RawSSD's largest request).
    pub request_bytes: u64,
    /// Places the files take in turn at the start of the footprint, a later file overwriting
    /// an earlier one as a camcorder's ring does (default 128: 256 MiB, so that the files and
    /// the background writer fit side by side on the 4 GiB preset).
    pub file_slots: u64,
    /// The files' priority (default 1).
    pub priority: u8,
    /// The background writer, as [`Video::background`]; it runs until the last file is done.
    pub background: Synthetic,
}

impl Default for FileWrites {
    fn default() -> Self {
        FileWrites {
            files: 1000,
            file_bytes: 2 << 20,
            request_bytes: 128 << 10,
            file_slots: 128,
            priority: 1,
            background: Video::default().background,
        }
    }
}

/// The bytes the files of a [`FileWrites`] run take at the start of the footprint, and the
/// bytes left to the background writer after them.
pub fn file_writes_region(f: &FileWrites, footprint: u64) -> Result<(u64, u64), PlanError> {
    if f.files == 0 || f.file_slots == 0 || f.priority == 0 {
        return Err(PlanError::FileWritesZero);
    }
    for (field, value) in [
        ("file_bytes", f.file_bytes),
        ("request_bytes", f.request_bytes),
    ] {
        if value == 0 || !value.is_multiple_of(512) {
            return Err(PlanError::FileWritesSectors { field, value });
        }
    }
    if f.request_bytes > f.file_bytes {
        return Err(PlanError::RequestOverFile {
            request_bytes: f.request_bytes,
            file_bytes: f.file_bytes,
        });
    }
    let files = f
        .file_slots
        .checked_mul(f.file_bytes)
        .ok_or(PlanError::FileSlotsOverflow)?;
    let rest =
        footprint.saturating_sub(files) / f.background.request_bytes * f.background.request_bytes;
    if rest < footprint / 4 {
        return Err(PlanError::TooLittleLeft {
            workload: "file-writes",
            bytes: files,
            what: "file slots",
            footprint,
        });
    }
    Ok((files, rest))
}

/// The requests of a [`Video`] run from `start`: frame reads at the frame rate through the
/// video (the start of the footprint), and background requests over the rest of the footprint
/// for as long as the video plays; with the frame period as the on-time deadline.
pub fn video_requests(
    video: &Video,
    footprint: u64,
    start: Nanos,
    seed: u64,
) -> Result<(Vec<Request>, Option<Nanos>), PlanError> {
    if video.frames_per_second == 0 || video.frame_bytes == 0 || video.priority == 0 {
        return Err(PlanError::VideoZero);
    }
    if !video.frame_bytes.is_multiple_of(512) {
        return Err(PlanError::FrameBytes {
            bytes: video.frame_bytes,
        });
    }
    let frames = video.seconds * video.frames_per_second as u64;
    let video_bytes = frames * video.frame_bytes;
    let rest = footprint.saturating_sub(video_bytes) / video.background.request_bytes
        * video.background.request_bytes;
    if video_bytes == 0 || rest < footprint / 4 {
        return Err(PlanError::TooLittleLeft {
            workload: "video",
            bytes: video_bytes,
            what: "video",
            footprint,
        });
    }
    let period = 1_000_000_000 / video.frames_per_second as u64;
    let end = start + video.seconds * 1_000_000_000;
    let mut out: Vec<Request> = (0..frames)
        .map(|k| Request {
            priority: video.priority,
            arrival_ns: Some(start + k * period),
            ..Request::new(Op::Read, k * video.frame_bytes, video.frame_bytes)
        })
        .collect();
    let background = Synthetic {
        requests: u64::MAX,
        priority_percent: 0.0,
        ..video.background.clone()
    };
    out.extend(
        background
            .requests(rest, start, seed)
            .take_while(|r| r.arrival_ns.is_some_and(|a| a < end))
            .map(|r| Request {
                offset_bytes: r.offset_bytes + video_bytes,
                ..r
            }),
    );
    out.sort_by_key(|r| r.arrival_ns);
    Ok((out, Some(period)))
}

/// A block trace replayed through the device-side scheduler, open loop at the trace's own
/// arrival times (BLOCKMGMT-09 Table 4 replays traces of macro benchmarks this way). Reads
/// and writes only; a request's offset is folded into the footprint (modulo, then moved back
/// to end inside it), so any trace fits any device.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BlockTrace {
    /// The trace file; a relative path is taken from the experiment file's directory.
    pub path: std::path::PathBuf,
    /// mqsim, msr, blkparse or fiu; guessed from the file when absent.
    #[serde(default)]
    pub format: Option<String>,
    /// Replay at most this many requests (all when absent). `--scale` multiplies it, when set.
    #[serde(default)]
    pub max_requests: Option<u64>,
    /// Share of the logical capacity written before measuring, and into which the trace's
    /// offsets are folded (default 0.75, as [`Synthetic`]).
    #[serde(default = "default_utilisation")]
    pub utilisation: f64,
    /// Multiplies the trace's times since its first request (default 1: as traced; 2 arrives
    /// at half the rate). A trace recorded on another device may arrive faster than this one
    /// serves it, and then its response times are mostly queueing.
    #[serde(default = "default_time_scale")]
    pub time_scale: f64,
}

fn default_utilisation() -> f64 {
    0.75
}

fn default_time_scale() -> f64 {
    1.0
}

/// Why a [`BlockTrace`] could not be replayed.
#[derive(Debug, thiserror::Error)]
pub enum BlockTraceError {
    /// `format` names no format, or none was given and the file's could not be guessed.
    #[error("block-trace {}: {reason}", .path.display())]
    Format {
        /// The trace file.
        path: std::path::PathBuf,
        /// What was wrong.
        reason: String,
    },
    /// The file could not be read, or a line of it parsed.
    #[error(transparent)]
    Read(#[from] crate::trace::TraceError),
    /// `utilisation` outside (0, 1].
    #[error("block-trace: utilisation = {value} must lie in (0, 1]")]
    Utilisation {
        /// The value.
        value: f64,
    },
    /// `time_scale` not a positive finite number.
    #[error("block-trace: time_scale = {value} must be a positive number")]
    TimeScale {
        /// The value.
        value: f64,
    },
    /// A request larger than the footprint or than 64 write units, or not whole sectors.
    #[error("block-trace {} line {line}: a request of {bytes} bytes does not fit the device", .path.display())]
    RequestBytes {
        /// The trace file.
        path: std::path::PathBuf,
        /// Its line.
        line: u64,
        /// The request's length.
        bytes: u64,
    },
}

impl BlockTrace {
    /// Resolves a relative `path` against `dir` (the experiment file's directory).
    pub fn resolve(&mut self, dir: &std::path::Path) {
        if self.path.is_relative() {
            self.path = dir.join(&self.path);
        }
    }

    /// The trace's reads and writes, arriving from `start_ns` on, folded into `footprint`
    /// bytes; `max_bytes` is the longest request the device takes.
    pub fn requests(
        &self,
        footprint: u64,
        max_bytes: u64,
        start_ns: Nanos,
    ) -> Result<Vec<Request>, BlockTraceError> {
        if !(self.utilisation > 0.0 && self.utilisation <= 1.0) {
            return Err(BlockTraceError::Utilisation {
                value: self.utilisation,
            });
        }
        if !(self.time_scale.is_finite() && self.time_scale > 0.0) {
            return Err(BlockTraceError::TimeScale {
                value: self.time_scale,
            });
        }
        let format_error = |reason: String| BlockTraceError::Format {
            path: self.path.clone(),
            reason,
        };
        let format = match &self.format {
            Some(f) => f
                .parse::<crate::trace::TraceFormat>()
                .map_err(|e| format_error(e.to_string()))?,
            None => crate::trace::TraceFormat::detect(&self.path).ok_or_else(|| {
                format_error("cannot tell the trace's format; set `format`".into())
            })?,
        };
        let mut reader = crate::trace::TraceReader::open(&self.path, format)?;
        let limit = self.max_requests.unwrap_or(u64::MAX);
        let mut out = Vec::new();
        while (out.len() as u64) < limit {
            let Some(r) = reader.next() else { break };
            let r = r?;
            if !matches!(r.op, Op::Read | Op::Write) || r.len_bytes == 0 {
                continue;
            }
            if r.len_bytes > footprint || r.len_bytes > max_bytes || r.len_bytes % 512 != 0 {
                return Err(BlockTraceError::RequestBytes {
                    path: self.path.clone(),
                    line: reader.line(),
                    bytes: r.len_bytes,
                });
            }
            let mut offset = r.offset_bytes % footprint / 512 * 512;
            if offset + r.len_bytes > footprint {
                offset = (footprint - r.len_bytes) / 512 * 512;
            }
            out.push(Request {
                op: r.op,
                offset_bytes: offset,
                len_bytes: r.len_bytes,
                priority: 0,
                arrival_ns: Some(
                    start_ns + (r.arrival_ns.unwrap_or(0) as f64 * self.time_scale).round() as u64,
                ),
            });
        }
        Ok(out)
    }
}
