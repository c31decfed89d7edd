//! Replays a user's block trace on a file-level stack (POFTL-14 IV-B replays home02 on p-OFTL),
//! in any format [`crate::trace`] reads: MQSim, MSR Cambridge, blkparse, FIU.
//!
//! **Block addresses to objects.** A block trace names no files, so the block address space is
//! cut into fixed regions of `object_bytes` (default 1 MiB): the bytes at address `a` are
//! those of file `t<a / object_bytes>` (created at its first write) at offset
//! `a % object_bytes`; a request crossing a region boundary is split. A region stands for a
//! file: a file system allocates a file's blocks close together, so logically contiguous
//! addresses mostly belong to one file, which is the continuity p-OFTL's grouping works on.
//! Within a region the mapping keeps offsets, so a region's size is the largest offset written
//! in it.
//!
//! **Requests.** Writes and reads are issued in trace order, one at a time as fast as the stack
//! serves them (closed loop, as the paper's replay measures runtime): time stamps only order
//! the requests. A read of a region never written, or past what was written, reads what there
//! is (nothing). A discard covering a whole region empties that file (truncate to 0); a partial
//! discard is counted and otherwise ignored (the file layers have no hole punching). A flush
//! syncs the file system.
//!
//! **Passes and cold fill.** A small trace does not fill a device, so it never makes GC run. An
//! experiment may replay it `passes` times in a row (each pass the same requests in the same
//! order), after `fill_bytes` of cold files (1 MiB each, `c<n>`, written once and never touched
//! again; phase "fill") have taken their share of the device, as a file system's static data
//! would.
//!
//! A malformed line stops the replay with an error naming the file and the line.

use std::path::{Path, PathBuf};

use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};
use vfs::{FsError, Ino, ROOT};

use super::{Meter, Phases};
use crate::trace::{TraceFormat, TraceReader, UnknownTraceFormat};
use controller::request::Op;

/// A block trace to replay onto files, and how.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TraceReplay {
    /// The trace file; a relative path is taken from the experiment file's directory.
    pub path: PathBuf,
    /// mqsim, msr, blkparse or fiu; guessed from the file (`TraceFormat::detect`) when absent.
    #[serde(default)]
    pub format: Option<String>,
    /// Bytes of block address space per object (file); default 1 MiB.
    #[serde(default = "default_object_bytes")]
    pub object_bytes: u64,
    /// Replay at most this many requests (all when absent). `--scale` multiplies it, when set.
    #[serde(default)]
    pub max_requests: Option<u64>,
    /// Times the trace is replayed, one pass after another (default 1; `--scale` leaves it).
    #[serde(default = "default_passes")]
    pub passes: u64,
    /// Bytes of cold files written before the replay and never touched again (default 0).
    #[serde(default)]
    pub fill_bytes: u64,
}

fn default_passes() -> u64 {
    1
}

/// Size of each cold fill file.
const FILL_FILE_BYTES: u64 = 1 << 20;

fn default_object_bytes() -> u64 {
    1 << 20
}

impl TraceReplay {
    /// Checks that `object_bytes` is at least one 512-byte sector and `passes` at least one.
    pub fn validate(&self) -> Result<(), TraceReplayError> {
        if self.object_bytes < 512 {
            return Err(TraceReplayError::ObjectBytes {
                bytes: self.object_bytes,
            });
        }
        if self.passes == 0 {
            return Err(TraceReplayError::NoPasses);
        }
        Ok(())
    }

    /// The trace's format: `format` parsed, or detected from the file when absent.
    pub fn format(&self) -> Result<TraceFormat, TraceReplayError> {
        match &self.format {
            Some(f) => Ok(f.parse()?),
            None => TraceFormat::detect(&self.path).ok_or_else(|| TraceReplayError::Undetected {
                path: self.path.clone(),
            }),
        }
    }

    /// Resolves a relative `path` against `dir` (the experiment file's directory).
    pub fn resolve(&mut self, dir: &Path) {
        if self.path.is_relative() {
            self.path = dir.join(&self.path);
        }
    }
}

/// Why a [`TraceReplay`]'s parameters were refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TraceReplayError {
    /// `object_bytes` is less than a 512-byte sector.
    #[error("trace: object_bytes = {bytes} must be at least one 512-byte sector")]
    ObjectBytes {
        /// The value.
        bytes: u64,
    },
    /// `passes` is 0.
    #[error("trace: passes = 0; the trace must be replayed at least once")]
    NoPasses,
    /// `format` names no trace format.
    #[error(transparent)]
    Format(#[from] UnknownTraceFormat),
    /// No `format`, and the file's name and first lines do not tell it.
    #[error("{}: cannot tell the trace format from the name; set format = \"mqsim\", \"msr\", \"blkparse\" or \"fiu\"", .path.display())]
    Undetected {
        /// The trace file.
        path: PathBuf,
    },
}

/// Counts of what the replay did not turn into file calls.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Skipped {
    /// Discards that did not cover a whole region.
    pub partial_discards: u64,
    /// Reads of regions never written.
    pub unwritten_reads: u64,
}

/// Runs the replay; phases "fill" (when `fill_bytes` is set) and "run".
pub fn run(m: &mut Meter, t: &TraceReplay) -> Result<Phases, FsError> {
    run_counted(m, t).map(|(p, _)| p)
}

/// Runs the replay like [`run`] and also returns what was skipped.
pub fn run_counted(m: &mut Meter, t: &TraceReplay) -> Result<(Phases, Skipped), FsError> {
    t.validate().map_err(|e| FsError::Invalid(e.to_string()))?;
    let format = t.format().map_err(|e| FsError::Invalid(e.to_string()))?;
    let mut phases = Vec::new();
    if t.fill_bytes > 0 {
        m.restart();
        fill(m, t.fill_bytes)?;
        m.sync()?;
        phases.push(("fill", m.restart()));
    }
    let mut replay = Replay {
        files: FxHashMap::default(),
        skipped: Skipped::default(),
        left: t.max_requests.unwrap_or(u64::MAX),
        object_bytes: t.object_bytes,
    };
    for _ in 0..t.passes {
        let reader =
            TraceReader::open(&t.path, format).map_err(|e| FsError::Invalid(e.to_string()))?;
        for request in reader {
            if replay.left == 0 {
                break;
            }
            replay.left -= 1;
            let r = request.map_err(|e| FsError::Invalid(e.to_string()))?;
            replay.request(m, &r)?;
        }
    }
    m.sync()?;
    phases.push(("run", m.restart()));
    Ok((phases, replay.skipped))
}

/// Writes `bytes` of cold files, [`FILL_FILE_BYTES`] each (the last one shorter).
fn fill(m: &mut Meter, bytes: u64) -> Result<(), FsError> {
    let mut left = bytes;
    let mut n = 0u64;
    while left > 0 {
        let len = left.min(FILL_FILE_BYTES);
        let ino = m.create(ROOT, &format!("c{n}"))?;
        m.write_chunks(ino, 0, len, 1 << 20)?;
        left -= len;
        n += 1;
    }
    Ok(())
}

/// The replay's state across passes: which region is which file, and what was skipped.
struct Replay {
    files: FxHashMap<u64, Ino>,
    skipped: Skipped,
    /// Requests still allowed by `max_requests`.
    left: u64,
    object_bytes: u64,
}

impl Replay {
    /// Issues one trace request as file calls, split at region boundaries.
    fn request(&mut self, m: &mut Meter, r: &controller::request::Request) -> Result<(), FsError> {
        if r.op == Op::Flush {
            return m.sync();
        }
        let ob = self.object_bytes;
        let mut at = r.offset_bytes;
        let end = r.offset_bytes + r.len_bytes;
        while at < end {
            let object = at / ob;
            let off = at % ob;
            let len = (ob - off).min(end - at);
            match r.op {
                Op::Write => {
                    let ino = match self.files.get(&object) {
                        Some(&i) => i,
                        None => {
                            let i = m.create(ROOT, &format!("t{object}"))?;
                            self.files.insert(object, i);
                            i
                        }
                    };
                    m.write(ino, off, len)?;
                }
                Op::Read => match self.files.get(&object) {
                    Some(&ino) => {
                        m.read(ino, off, len)?;
                    }
                    None => self.skipped.unwritten_reads += 1,
                },
                Op::Trim => match self.files.get(&object) {
                    Some(&ino) if off == 0 && len == ob => m.fs.truncate(ino, 0)?,
                    _ => self.skipped.partial_discards += 1,
                },
                Op::Flush => unreachable!("handled above"),
            }
            at += len;
        }
        m.stats.transactions += 1;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use vfs::oracle::MemFs;
    use vfs::FileSystem;

    use super::*;
    use crate::files::tests::meter;

    fn temp(name: &str, text: &str) -> PathBuf {
        let p = std::env::temp_dir().join(format!("ossd-replay-{}-{name}", std::process::id()));
        std::fs::write(&p, text).unwrap();
        p
    }

    fn replay(path: PathBuf, object_bytes: u64) -> (MemFs, Result<(Phases, Skipped), FsError>) {
        let mut fs = MemFs::default();
        let t = TraceReplay {
            path,
            format: None,
            object_bytes,
            max_requests: None,
            passes: 1,
            fill_bytes: 0,
        };
        let r = run_counted(&mut meter(&mut fs), &t);
        (fs, r)
    }

    /// FIU lines: sector addresses cut into 64 KiB objects; a write across a boundary is split,
    /// a read of an unwritten region skipped.
    #[test]
    fn fiu_requests_map_to_fixed_regions() {
        let p = temp(
            "a.fiu",
            "\
100 1 cp 0 8 W 8 0 x
200 1 cp 120 16 W 8 0 x
300 2 cat 0 8 R 8 0 x
400 2 cat 1024 8 R 8 0 x
",
        );
        let (mut fs, r) = replay(p.clone(), 64 << 10);
        std::fs::remove_file(&p).unwrap();
        let (phases, skipped) = r.unwrap();
        let run = &phases[0].1;
        assert_eq!(run.write_bytes, 4096 + 8192);
        assert_eq!(run.read_bytes, 4096);
        assert_eq!(run.transactions, 4);
        assert_eq!(skipped.unwritten_reads, 1);
        // Sectors 120..136 straddle 64 KiB (sector 128): 4 KiB at the end of t0, 4 KiB at the
        // start of t1.
        let t0 = fs.lookup(ROOT, "t0").unwrap().unwrap();
        let t1 = fs.lookup(ROOT, "t1").unwrap().unwrap();
        assert_eq!(fs.stat(t0).unwrap().size, 64 << 10);
        assert_eq!(fs.stat(t1).unwrap().size, 4096);
        assert_eq!(fs.readdir(ROOT).unwrap().len(), 2);
    }

    /// The real MQSim TPC-C trace shipped in `traces/` replays to its write volume.
    #[test]
    fn the_shipped_tpcc_trace_replays() {
        let p = PathBuf::from(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../traces/mqsim/tpcc-small.trace"
        ));
        let summary =
            crate::trace::summarize(TraceReader::open(&p, TraceFormat::Mqsim).unwrap()).unwrap();
        let (_, r) = replay(p, 1 << 20);
        let (phases, _) = r.unwrap();
        assert_eq!(phases[0].1.write_bytes, summary.bytes_written);
        assert!(phases[0].1.read_bytes > 0);
    }

    /// Two passes write the trace twice over the same files, after the cold fill.
    #[test]
    fn passes_repeat_the_trace_after_a_cold_fill() {
        let p = temp("p.fiu", "100 1 cp 0 8 W 8 0 x\n200 1 cp 0 8 R 8 0 x\n");
        let mut fs = MemFs::default();
        let t = TraceReplay {
            path: p.clone(),
            format: None,
            object_bytes: 1 << 20,
            max_requests: None,
            passes: 2,
            fill_bytes: (5 << 20) / 2,
        };
        let r = run_counted(&mut meter(&mut fs), &t);
        std::fs::remove_file(&p).unwrap();
        let (phases, _) = r.unwrap();
        let names: Vec<&str> = phases.iter().map(|(n, _)| *n).collect();
        assert_eq!(names, ["fill", "run"]);
        assert_eq!(phases[0].1.write_bytes, (5 << 20) / 2);
        assert_eq!(phases[1].1.write_bytes, 2 * 4096);
        assert_eq!(phases[1].1.read_bytes, 2 * 4096);
        assert_eq!(phases[1].1.transactions, 4);
        let c2 = fs.lookup(ROOT, "c2").unwrap().unwrap();
        assert_eq!(fs.stat(c2).unwrap().size, 1 << 19);
        assert_eq!(fs.readdir(ROOT).unwrap().len(), 4);
        let t = TraceReplay { passes: 0, ..t };
        assert_eq!(t.validate(), Err(TraceReplayError::NoPasses));
    }

    /// A malformed line is an error naming the file and the line, not a panic.
    #[test]
    fn a_bad_line_is_an_error_with_its_line() {
        let p = temp("b.fiu", "100 1 cp 0 8 W 8 0 x\n200 1 cp 8 8 Q 8 0 x\n");
        let (_, r) = replay(p.clone(), 1 << 20);
        std::fs::remove_file(&p).unwrap();
        let msg = r.unwrap_err().to_string();
        assert!(
            msg.contains("b.fiu line 2:") && msg.contains("neither R nor W"),
            "{msg}"
        );
        let (_, r) = replay(PathBuf::from("/nonexistent/x.fiu"), 1 << 20);
        assert!(r.unwrap_err().to_string().contains("/nonexistent/x.fiu"));
        let (_, r) = replay(PathBuf::from("x.bin"), 1 << 20);
        assert!(r.unwrap_err().to_string().contains("set format"));
        let (_, r) = replay(PathBuf::from("x.fiu"), 100);
        assert!(r.unwrap_err().to_string().contains("object_bytes"));
    }
}
