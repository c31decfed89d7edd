//! File-level workloads of the seed papers (PostMark, hot/cold files, multi-stream writers, the
//! base sequential test, Seltzer's largefile, a user's block trace replayed onto files), run against any [`vfs::FileSystem`] in virtual
//! time. Each workload is a plain function over a [`Meter`], which issues every call at the file
//! system's current time (one outstanding call, as the papers' single-process benchmarks and
//! as the in-process stacks serve them) and measures it.

pub mod aging;
pub mod appendhot;
pub mod hotcold;
pub mod largefile;
pub mod multistream;
pub mod postmark;
pub mod seqbase;
pub mod sizes;
pub mod torrent;
pub mod tracereplay;
pub mod videoserver;

use flash::Nanos;
use hdrhistogram::Histogram;
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use vfs::{FileData, FsError, Ino, ReadInto};

use crate::latency::{summarize, LatencySummary};

pub use ::stacks::{Counters, FileStack};

/// A workload's measured phases, in order.
pub type Phases = Vec<(&'static str, FileStats)>;

/// What a workload phase did, measured at the file interface.
#[derive(Clone, Debug)]
pub struct FileStats {
    /// Bytes written by write calls.
    pub write_bytes: u64,
    /// Bytes read calls returned.
    pub read_bytes: u64,
    /// Write calls.
    pub writes: u64,
    /// Read calls.
    pub reads: u64,
    /// Files created.
    pub creates: u64,
    /// Files unlinked.
    pub deletes: u64,
    /// fsync, fdatasync and sync calls.
    pub syncs: u64,
    /// Completed PostMark transactions, files rewritten, ... (the workload's own unit).
    pub transactions: u64,
    /// Virtual time the phase began, in nanoseconds.
    pub start_ns: Nanos,
    /// Virtual time the phase's last call completed, in nanoseconds.
    pub end_ns: Nanos,
    /// Read call latencies, in nanoseconds of virtual time.
    pub read_latency: Histogram<u64>,
    /// Write call latencies (fsync and fdatasync included), in nanoseconds of virtual time.
    pub write_latency: Histogram<u64>,
    /// Bytes written and read in each virtual second since the start.
    pub per_second: Vec<(u64, u64)>,
    /// Transactions completed in each virtual second since the start, for workloads that
    /// count them over time (frames shown on time, OSSD-13 VI-E); empty otherwise.
    pub per_second_transactions: Vec<u64>,
    /// What the stack beneath did during the phase.
    pub counters: Counters,
}

/// A latency histogram from 1 ns to one hour, three significant digits.
#[expect(
    clippy::expect_used,
    reason = "constant bounds that new_with_bounds accepts: low 1, high above 2 x low, 3 digits"
)]
fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("valid histogram bounds")
}

impl FileStats {
    /// Empty statistics of a phase that starts at `start_ns` (per-second series count from it).
    pub fn new(start_ns: Nanos) -> FileStats {
        FileStats {
            write_bytes: 0,
            read_bytes: 0,
            writes: 0,
            reads: 0,
            creates: 0,
            deletes: 0,
            syncs: 0,
            transactions: 0,
            start_ns,
            end_ns: start_ns,
            read_latency: histogram(),
            write_latency: histogram(),
            per_second: Vec::new(),
            per_second_transactions: Vec::new(),
            counters: Counters::default(),
        }
    }

    /// The phase's virtual duration, in seconds.
    pub fn seconds(&self) -> f64 {
        (self.end_ns - self.start_ns) as f64 / 1e9
    }

    /// The figures a report shows: totals, rates per virtual second, latency percentiles.
    pub fn summary(&self) -> FileSummary {
        let secs = self.seconds().max(1e-9);
        FileSummary {
            virtual_seconds: self.seconds(),
            write_bytes: self.write_bytes,
            read_bytes: self.read_bytes,
            creates: self.creates,
            deletes: self.deletes,
            transactions: self.transactions,
            write_mib_s: self.write_bytes as f64 / secs / (1 << 20) as f64,
            read_mib_s: self.read_bytes as f64 / secs / (1 << 20) as f64,
            throughput_mib_s: (self.write_bytes + self.read_bytes) as f64 / secs / (1 << 20) as f64,
            transactions_per_s: self.transactions as f64 / secs,
            read_latency: summarize(&self.read_latency),
            write_latency: summarize(&self.write_latency),
            min_transactions_per_s: self.min_transactions_per_s(),
        }
    }

    /// The fewest transactions in any whole second of the phase (a second with none counts),
    /// when the workload counts them over time.
    fn min_transactions_per_s(&self) -> Option<f64> {
        if self.per_second_transactions.is_empty() {
            return None;
        }
        let whole = ((self.end_ns - self.start_ns) / 1_000_000_000).max(1) as usize;
        let n = (0..whole)
            .map(|s| self.per_second_transactions.get(s).copied().unwrap_or(0))
            .min()
            .unwrap_or(0);
        Some(n as f64)
    }

    /// Counts a transaction completed at `at` in its second.
    pub fn account_transaction(&mut self, at: Nanos) {
        let s = ((at - self.start_ns) / 1_000_000_000) as usize;
        if self.per_second_transactions.len() <= s {
            self.per_second_transactions.resize(s + 1, 0);
        }
        self.per_second_transactions[s] += 1;
    }

    /// Adds bytes written and read by a request completed at `at` to its second.
    pub fn account_second(&mut self, at: Nanos, written: u64, read: u64) {
        let s = ((at - self.start_ns) / 1_000_000_000) as usize;
        if self.per_second.len() <= s {
            self.per_second.resize(s + 1, (0, 0));
        }
        self.per_second[s].0 += written;
        self.per_second[s].1 += read;
    }
}

/// The numbers a report shows for a phase.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct FileSummary {
    /// The phase's virtual duration, in seconds.
    pub virtual_seconds: f64,
    /// Bytes written.
    pub write_bytes: u64,
    /// Bytes read.
    pub read_bytes: u64,
    /// Files created.
    pub creates: u64,
    /// Files deleted.
    pub deletes: u64,
    /// Transactions completed (the workload's own unit).
    pub transactions: u64,
    /// Write throughput, in MiB per virtual second.
    pub write_mib_s: f64,
    /// Read throughput, in MiB per virtual second.
    pub read_mib_s: f64,
    /// Read plus write throughput, in MiB per virtual second.
    pub throughput_mib_s: f64,
    /// Transactions per virtual second.
    pub transactions_per_s: f64,
    /// Read call latency percentiles.
    pub read_latency: LatencySummary,
    /// Write call latency percentiles (syncs included).
    pub write_latency: LatencySummary,
    /// The fewest transactions in any whole second (see [`FileStats`]), if counted.
    pub min_transactions_per_s: Option<f64>,
}

/// Issues file system calls for a workload and measures them. Data is written in fingerprint
/// mode (a fresh token per write).
pub struct Meter<'a> {
    /// The stack under measurement.
    pub fs: &'a mut dyn FileStack,
    /// The stack's counters when the phase began.
    base: Counters,
    /// The workload's random stream (sizes, choices, write tokens).
    pub rng: ChaCha8Rng,
    /// What the current phase has done so far.
    pub stats: FileStats,
    /// Called with the bytes written so far, for progress bars.
    progress: Option<&'a mut dyn FnMut(u64)>,
    /// Background GC gets this much idle time after each call (0: none).
    pub think_ns: Nanos,
}

impl<'a> Meter<'a> {
    /// A meter on `fs` whose first phase starts now, with no think time and no progress
    /// callback.
    pub fn new(fs: &'a mut dyn FileStack, rng: ChaCha8Rng) -> Meter<'a> {
        let start = fs.now();
        Meter {
            base: fs.stack_counters(),
            fs,
            rng,
            stats: FileStats::new(start),
            progress: None,
            think_ns: 0,
        }
    }

    /// Calls `p` with the bytes written so far in the phase after every write.
    pub fn with_progress(mut self, p: &'a mut dyn FnMut(u64)) -> Self {
        self.progress = Some(p);
        self
    }

    /// Ends the current phase and starts the next: returns what the phase did.
    pub fn restart(&mut self) -> FileStats {
        let now = self.fs.now();
        let counters = self.fs.stack_counters();
        let mut done = std::mem::replace(&mut self.stats, FileStats::new(now));
        done.counters = counters - self.base;
        self.base = counters;
        done
    }

    fn done(&mut self, issued: Nanos) -> Nanos {
        let end = self.fs.now();
        self.stats.end_ns = self.stats.end_ns.max(end);
        if self.think_ns > 0 {
            // Idle time for background work, as between a real program's calls.
            let _ = self.fs.background(end, end + self.think_ns);
            self.fs.set_time(end + self.think_ns);
        }
        end - issued
    }

    /// Writes `len` bytes at `offset` in one call (a fresh fingerprint token) and records its
    /// latency; a zero-length write issues nothing.
    pub fn write(&mut self, ino: Ino, offset: u64, len: u64) -> Result<(), FsError> {
        if len == 0 {
            return Ok(());
        }
        let issued = self.fs.now();
        let token = self.rng.gen::<u64>() | 1;
        self.fs.write(ino, offset, len, FileData::Token(token))?;
        let lat = self.done(issued);
        self.stats.write_latency.saturating_record(lat.max(1));
        self.stats.writes += 1;
        self.stats.write_bytes += len;
        self.stats.account_second(self.stats.end_ns, len, 0);
        if let Some(p) = self.progress.as_mut() {
            p(self.stats.write_bytes);
        }
        Ok(())
    }

    /// Writes `len` bytes from `offset` in calls of at most `io` bytes.
    pub fn write_chunks(
        &mut self,
        ino: Ino,
        offset: u64,
        len: u64,
        io: u64,
    ) -> Result<(), FsError> {
        let mut at = offset;
        while at < offset + len {
            let n = io.min(offset + len - at);
            self.write(ino, at, n)?;
            at += n;
        }
        Ok(())
    }

    /// Reads up to `len` bytes at `offset` in one call; returns the bytes the file held there.
    pub fn read(&mut self, ino: Ino, offset: u64, len: u64) -> Result<u64, FsError> {
        let issued = self.fs.now();
        let n = self.fs.read(ino, offset, ReadInto::Discard(len))?;
        let lat = self.done(issued);
        self.stats.read_latency.saturating_record(lat.max(1));
        self.stats.reads += 1;
        self.stats.read_bytes += n;
        self.stats.account_second(self.stats.end_ns, 0, n);
        Ok(n)
    }

    /// Reads the whole file in calls of `io` bytes.
    pub fn read_all(&mut self, ino: Ino, io: u64) -> Result<u64, FsError> {
        let size = self.fs.stat(ino)?.size;
        let mut at = 0;
        while at < size {
            at += self.read(ino, at, io.min(size - at))?.max(1);
        }
        Ok(size)
    }

    /// Creates file `name` in directory `dir`.
    pub fn create(&mut self, dir: Ino, name: &str) -> Result<Ino, FsError> {
        let issued = self.fs.now();
        let ino = self.fs.create(dir, name)?;
        self.done(issued);
        self.stats.creates += 1;
        Ok(ino)
    }

    /// Makes directory `name` in `dir` (timed, but counted in no statistic).
    pub fn mkdir(&mut self, dir: Ino, name: &str) -> Result<Ino, FsError> {
        let issued = self.fs.now();
        let ino = self.fs.mkdir(dir, name)?;
        self.done(issued);
        Ok(ino)
    }

    /// Removes `name` from directory `dir`.
    pub fn unlink(&mut self, dir: Ino, name: &str) -> Result<(), FsError> {
        let issued = self.fs.now();
        self.fs.unlink(dir, name)?;
        self.done(issued);
        self.stats.deletes += 1;
        Ok(())
    }

    /// fsync (or fdatasync with `data_only`) of one file; its latency counts as a write's.
    pub fn fsync(&mut self, ino: Ino, data_only: bool) -> Result<(), FsError> {
        let issued = self.fs.now();
        self.fs.fsync(ino, data_only)?;
        let lat = self.done(issued);
        self.stats.write_latency.saturating_record(lat.max(1));
        self.stats.syncs += 1;
        Ok(())
    }

    /// Syncs the whole file system.
    pub fn sync(&mut self) -> Result<(), FsError> {
        let issued = self.fs.now();
        self.fs.sync()?;
        self.done(issued);
        self.stats.syncs += 1;
        Ok(())
    }

    /// A uniform draw in `lo..=hi`.
    pub fn between(&mut self, lo: u64, hi: u64) -> u64 {
        if hi <= lo {
            lo
        } else {
            self.rng.gen_range(lo..=hi)
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use rand::SeedableRng;
    use vfs::oracle::MemFs;

    use super::*;

    pub(crate) fn meter(fs: &mut MemFs) -> Meter<'_> {
        Meter::new(fs, ChaCha8Rng::seed_from_u64(7))
    }

    #[test]
    fn meter_counts_calls_and_bytes() {
        let mut fs = MemFs::default();
        let mut m = meter(&mut fs);
        let f = m.create(vfs::ROOT, "f").unwrap();
        m.write_chunks(f, 0, 100_000, 16_384).unwrap();
        assert_eq!(m.read_all(f, 16_384).unwrap(), 100_000);
        let s = m.stats.summary();
        assert_eq!(
            (s.write_bytes, s.read_bytes, s.creates),
            (100_000, 100_000, 1)
        );
        assert_eq!(m.stats.writes, 7);
        assert_eq!(m.stats.reads, 7);
    }
}
