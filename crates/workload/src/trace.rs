//! Block trace readers.
//!
//! A [`TraceReader`] streams a trace file line by line (it never loads the whole file) and
//! yields one [`Request`] per I/O in the trace. Three text formats are understood:
//!
//! * [`TraceFormat::Mqsim`]: MQSim's ASCII format,
//!   `arrival_time_ns device_number start_lba_sectors size_sectors type`, space separated,
//!   where type 0 is a write and 1 a read.
//! * [`TraceFormat::MsrCsv`]: the MSR Cambridge traces,
//!   `Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime`, where `Timestamp` is a
//!   Windows filetime (100 ns ticks), `Type` is `Read` or `Write` and `Offset`/`Size` are
//!   bytes. An optional header line whose first field is `Timestamp` is skipped.
//! * [`TraceFormat::Blkparse`]: the default text output of `blkparse`. Only `Q` (queued)
//!   events produce requests; every other line (other actions, per-CPU summaries) is
//!   skipped.
//! * [`TraceFormat::Fiu`]: the FIU SRCMap / I/O-deduplication traces (`homes`, `mail`,
//!   `web-vm`), `timestamp_ns pid process lba_sectors size_sectors R|W major minor md5`,
//!   space separated; the process name may itself contain spaces. The FIU files are named
//!   `*.blkparse` although they are not blkparse output, so a `.blkparse` or `.txt` file whose
//!   first request line has this shape is read as FIU ([`TraceFormat::sniff`]).
//!
//! A sector is 512 bytes. Blank lines and lines starting with `#` are skipped in every
//! format. Arrival times are made relative to the first request, which arrives at 0; a
//! request time-stamped before the first one (a trace that is not sorted) arrives at 0.

use std::fmt;
use std::fs::File;
use std::io::{self, BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::str::FromStr;

use flash::Nanos;

use controller::request::{Op, Request};

/// Bytes per sector in every trace format.
pub const SECTOR_BYTES: u64 = 512;

/// The text formats a [`TraceReader`] understands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TraceFormat {
    /// MQSim ASCII: `arrival_time_ns device_number start_lba_sectors size_sectors type`.
    Mqsim,
    /// MSR Cambridge CSV: `Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime`.
    MsrCsv,
    /// `blkparse` default text output.
    Blkparse,
    /// FIU: `timestamp_ns pid process lba_sectors size_sectors R|W major minor md5`.
    Fiu,
}

impl TraceFormat {
    /// Every format, in the order they are documented.
    pub const ALL: [TraceFormat; 4] = [
        TraceFormat::Mqsim,
        TraceFormat::MsrCsv,
        TraceFormat::Blkparse,
        TraceFormat::Fiu,
    ];

    /// The name accepted by [`FromStr`] and printed by [`fmt::Display`].
    pub fn name(self) -> &'static str {
        match self {
            TraceFormat::Mqsim => "mqsim",
            TraceFormat::MsrCsv => "msr",
            TraceFormat::Blkparse => "blkparse",
            TraceFormat::Fiu => "fiu",
        }
    }

    /// Guesses the format from the file extension: `.trace` is MQSim, `.csv` is MSR, `.fiu`
    /// is FIU, `.blkparse` and `.txt` are blkparse output unless the file's first request line
    /// is FIU-shaped ([`TraceFormat::sniff`]; the FIU traces ship as `*.blkparse`).
    /// Case-insensitive.
    pub fn detect(path: &Path) -> Option<TraceFormat> {
        let ext = path.extension()?.to_str()?;
        if ext.eq_ignore_ascii_case("trace") {
            Some(TraceFormat::Mqsim)
        } else if ext.eq_ignore_ascii_case("csv") {
            Some(TraceFormat::MsrCsv)
        } else if ext.eq_ignore_ascii_case("fiu") {
            Some(TraceFormat::Fiu)
        } else if ext.eq_ignore_ascii_case("blkparse") || ext.eq_ignore_ascii_case("txt") {
            match TraceFormat::sniff(path) {
                Some(TraceFormat::Fiu) => Some(TraceFormat::Fiu),
                _ => Some(TraceFormat::Blkparse),
            }
        } else {
            None
        }
    }

    /// Looks at the first line that is neither blank nor a comment (within the first 64 KiB):
    /// FIU if it parses as an FIU request, blkparse if its first field is a `major,minor`
    /// device; `None` otherwise or if the file cannot be read.
    pub fn sniff(path: &Path) -> Option<TraceFormat> {
        use std::io::Read;
        let mut head = Vec::with_capacity(64 << 10);
        File::open(path)
            .ok()?
            .take(64 << 10)
            .read_to_end(&mut head)
            .ok()?;
        let text = String::from_utf8_lossy(&head);
        let line = text
            .lines()
            .map(str::trim)
            .find(|l| !l.is_empty() && !l.starts_with('#'))?;
        if parse_fiu(line).is_ok() {
            Some(TraceFormat::Fiu)
        } else if line.split_ascii_whitespace().next().is_some_and(is_device) {
            Some(TraceFormat::Blkparse)
        } else {
            None
        }
    }
}

/// Guesses a trace format from the file extension; see [`TraceFormat::detect`].
pub fn detect(path: &Path) -> Option<TraceFormat> {
    TraceFormat::detect(path)
}

impl fmt::Display for TraceFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for TraceFormat {
    type Err = UnknownTraceFormat;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        TraceFormat::ALL
            .into_iter()
            .find(|f| f.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| UnknownTraceFormat { name: s.into() })
    }
}

/// A trace format name [`TraceFormat`]'s `FromStr` does not know (case-insensitive).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown trace format \"{name}\" (expected one of: mqsim, msr, blkparse, fiu)")]
pub struct UnknownTraceFormat {
    /// The name given, trimmed.
    pub name: String,
}

/// Why a trace could not be read. The message always names the file, and for a bad line
/// its 1-based line number.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// The file could not be opened.
    #[error("{}: cannot open trace: {source}", .path.display())]
    Io {
        /// The trace file.
        path: PathBuf,
        /// Why it could not be opened.
        #[source]
        source: io::Error,
    },
    /// Reading failed part-way through the file.
    #[error("{} line {line}: read error: {source}", .path.display())]
    Read {
        /// The trace file.
        path: PathBuf,
        /// The line that was being read (1-based).
        line: u64,
        /// Why reading failed.
        #[source]
        source: io::Error,
    },
    /// A line could not be parsed.
    #[error("{} line {line}: {reason}", .path.display())]
    Parse {
        /// The trace file.
        path: PathBuf,
        /// 1-based line number.
        line: u64,
        /// What was wrong with the line.
        #[source]
        reason: LineError,
    },
}

/// What was wrong with one line of a trace ([`TraceError::Parse`] adds the file and the line
/// number). Field names are the format's own (`size_sectors`, `Offset`, `nsectors`, ...).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LineError {
    /// The line is not UTF-8.
    #[error("line is not valid UTF-8 ({0})")]
    NotUtf8(#[source] std::str::Utf8Error),
    /// A time stamp so far after the first request's that nanoseconds overflow 64 bits.
    #[error("time stamp {time} is too far after the first request")]
    TimeOverflow {
        /// The raw time stamp, in the format's unit.
        time: u64,
    },
    /// Not as many fields as the format has.
    #[error("expected {expected} fields ({layout}), found {found}")]
    FieldCount {
        /// Fields the format has.
        expected: usize,
        /// The format's fields, as its documentation names them.
        layout: &'static str,
        /// Fields on the line.
        found: usize,
    },
    /// A numeric field that is not a number.
    #[error("{field} \"{value}\" is not a number")]
    NotANumber {
        /// The field.
        field: &'static str,
        /// Its text.
        value: String,
    },
    /// A request of zero bytes (a flush is not written this way).
    #[error("{field} is 0")]
    ZeroSize {
        /// The size field.
        field: &'static str,
    },
    /// A sector range whose byte offset or end does not fit 64 bits.
    #[error("sector range {offset_sectors} + {len_sectors} does not fit in a 64-bit byte address")]
    SectorRange {
        /// First sector.
        offset_sectors: u64,
        /// Sectors.
        len_sectors: u64,
    },
    /// A byte range whose end does not fit 64 bits (MSR).
    #[error("range {offset} + {len} does not fit in a 64-bit byte address")]
    ByteRange {
        /// Offset in bytes.
        offset: u64,
        /// Length in bytes.
        len: u64,
    },
    /// An MQSim type other than 0 (write) or 1 (read).
    #[error("type \"{value}\" is neither 0 (write) nor 1 (read)")]
    MqsimType {
        /// The field's text.
        value: String,
    },
    /// An MSR type other than Read or Write.
    #[error("Type \"{value}\" is neither Read nor Write")]
    MsrType {
        /// The field's text.
        value: String,
    },
    /// A FIU operation other than R or W.
    #[error("operation \"{value}\" is neither R nor W")]
    FiuOperation {
        /// The field's text.
        value: String,
    },
    /// A blkparse time that is not a decimal number of seconds.
    #[error("time \"{value}\" is not a decimal number of seconds")]
    Seconds {
        /// The field's text.
        value: String,
    },
    /// A blkparse time with more than 9 fraction digits (finer than a nanosecond).
    #[error("time \"{value}\" has more than 9 fraction digits")]
    FractionDigits {
        /// The field's text.
        value: String,
    },
    /// A blkparse time whose nanoseconds overflow 64 bits.
    #[error("time \"{value}\" is too large")]
    SecondsOverflow {
        /// The field's text.
        value: String,
    },
    /// A blkparse queue event without its RWBS field.
    #[error("queue event has no RWBS field")]
    NoRwbs,
    /// A blkparse queue event (not a flush) without a sector.
    #[error("queue event with RWBS \"{rwbs}\" has no sector")]
    NoSector {
        /// The RWBS field.
        rwbs: String,
    },
    /// Something other than "+" after a blkparse sector.
    #[error("expected \"+\" after the sector, found \"{found}\"")]
    NotPlus {
        /// What was there.
        found: String,
    },
    /// Nothing after a blkparse sector.
    #[error("expected \"+ nsectors\" after the sector")]
    NoPlus,
    /// No sector count after "+".
    #[error("missing nsectors after \"+\"")]
    NoSectorCount,
    /// A blkparse RWBS field naming no operation ossd replays.
    #[error("RWBS \"{rwbs}\" is none of read (R), write (W), discard (D), flush (F)")]
    Rwbs {
        /// The RWBS field.
        rwbs: String,
    },
}

impl TraceError {
    /// The file the error is about.
    pub fn path(&self) -> &Path {
        match self {
            TraceError::Io { path, .. }
            | TraceError::Read { path, .. }
            | TraceError::Parse { path, .. } => path,
        }
    }

    /// The 1-based line number, when the error is about a line.
    pub fn line(&self) -> Option<u64> {
        match self {
            TraceError::Io { .. } => None,
            TraceError::Read { line, .. } | TraceError::Parse { line, .. } => Some(*line),
        }
    }
}

/// A parsed line: the request (arrival not yet set) and its raw time stamp in the
/// format's own unit.
type Parsed = Option<(Request, u64)>;

/// Streams the requests of a trace file; see the [module documentation](self).
///
/// Yields `Err` for a line that cannot be parsed and carries on with the next line; after
/// a read error it stops.
pub struct TraceReader {
    path: PathBuf,
    format: TraceFormat,
    reader: BufReader<File>,
    /// Reused line buffer (no allocation per line once it has grown).
    buf: Vec<u8>,
    /// Number of the last line read (1-based).
    line: u64,
    /// Raw time stamp of the first request, in the format's unit.
    first_time: Option<u64>,
    done: bool,
}

impl fmt::Debug for TraceReader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TraceReader")
            .field("path", &self.path)
            .field("format", &self.format)
            .field("line", &self.line)
            .finish_non_exhaustive()
    }
}

impl TraceReader {
    /// Opens `path` to be read as `format`.
    pub fn open(path: &Path, format: TraceFormat) -> Result<Self, TraceError> {
        let file = File::open(path).map_err(|source| TraceError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Ok(TraceReader {
            path: path.to_path_buf(),
            format,
            reader: BufReader::with_capacity(256 * 1024, file),
            buf: Vec::with_capacity(256),
            line: 0,
            first_time: None,
            done: false,
        })
    }

    /// The file being read.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The format the file is read as.
    pub fn format(&self) -> TraceFormat {
        self.format
    }

    /// Number of the last line read (1-based; 0 before the first line).
    pub fn line(&self) -> u64 {
        self.line
    }

    fn parse_error(&self, reason: LineError) -> TraceError {
        TraceError::Parse {
            path: self.path.clone(),
            line: self.line,
            reason,
        }
    }

    /// Nanoseconds per unit of the format's raw time stamps.
    fn ns_per_tick(&self) -> u64 {
        match self.format {
            TraceFormat::Mqsim | TraceFormat::Blkparse | TraceFormat::Fiu => 1,
            TraceFormat::MsrCsv => 100,
        }
    }
}

impl Iterator for TraceReader {
    type Item = Result<Request, TraceError>;

    fn next(&mut self) -> Option<Self::Item> {
        while !self.done {
            self.buf.clear();
            match self.reader.read_until(b'\n', &mut self.buf) {
                Ok(0) => {
                    self.done = true;
                    return None;
                }
                Ok(_) => {}
                Err(source) => {
                    self.done = true;
                    return Some(Err(TraceError::Read {
                        path: self.path.clone(),
                        line: self.line + 1,
                        source,
                    }));
                }
            }
            self.line += 1;
            let text = match std::str::from_utf8(&self.buf) {
                Ok(text) => text.trim(),
                Err(e) => return Some(Err(self.parse_error(LineError::NotUtf8(e)))),
            };
            if text.is_empty() || text.starts_with('#') {
                continue;
            }
            let parsed = match self.format {
                TraceFormat::Mqsim => parse_mqsim(text),
                TraceFormat::MsrCsv => parse_msr(text),
                TraceFormat::Blkparse => parse_blkparse(text),
                TraceFormat::Fiu => parse_fiu(text),
            };
            let (mut request, time) = match parsed {
                Ok(Some(p)) => p,
                Ok(None) => continue,
                Err(reason) => return Some(Err(self.parse_error(reason))),
            };
            let first = *self.first_time.get_or_insert(time);
            let Some(ns) = time.saturating_sub(first).checked_mul(self.ns_per_tick()) else {
                return Some(Err(self.parse_error(LineError::TimeOverflow { time })));
            };
            request.arrival_ns = Some(ns as Nanos);
            return Some(Ok(request));
        }
        None
    }
}

fn parse_u64(name: &'static str, field: &str) -> Result<u64, LineError> {
    field.parse::<u64>().map_err(|_| LineError::NotANumber {
        field: name,
        value: field.to_string(),
    })
}

/// `offset_sectors * 512` and `len_sectors * 512`, checking that the range fits in `u64`.
fn sector_range(offset_sectors: u64, len_sectors: u64) -> Result<(u64, u64), LineError> {
    let offset = offset_sectors.checked_mul(SECTOR_BYTES);
    let len = len_sectors.checked_mul(SECTOR_BYTES);
    match (offset, len) {
        (Some(o), Some(l)) if o.checked_add(l).is_some() => Ok((o, l)),
        _ => Err(LineError::SectorRange {
            offset_sectors,
            len_sectors,
        }),
    }
}

/// Collects exactly `N` fields, or says how many there were.
fn fields<'a, const N: usize>(
    mut it: impl Iterator<Item = &'a str>,
    what: &'static str,
) -> Result<[&'a str; N], LineError> {
    let mut out = [""; N];
    let mut count = 0;
    for field in it.by_ref() {
        if count < N {
            out[count] = field;
        }
        count += 1;
    }
    if count == N {
        Ok(out)
    } else {
        Err(LineError::FieldCount {
            expected: N,
            layout: what,
            found: count,
        })
    }
}

fn parse_mqsim(line: &str) -> Result<Parsed, LineError> {
    let [time, device, lba, size, kind] = fields::<5>(
        line.split_ascii_whitespace(),
        "arrival_time_ns device_number start_lba_sectors size_sectors type",
    )?;
    let time = parse_u64("arrival_time_ns", time)?;
    parse_u64("device_number", device)?;
    let lba = parse_u64("start_lba_sectors", lba)?;
    let size = parse_u64("size_sectors", size)?;
    if size == 0 {
        return Err(LineError::ZeroSize {
            field: "size_sectors",
        });
    }
    let op = match kind {
        "0" => Op::Write,
        "1" => Op::Read,
        other => {
            return Err(LineError::MqsimType {
                value: other.to_string(),
            })
        }
    };
    let (offset, len) = sector_range(lba, size)?;
    Ok(Some((Request::new(op, offset, len), time)))
}

fn parse_msr(line: &str) -> Result<Parsed, LineError> {
    let [time, _host, disk, kind, offset, size, _response] = fields::<7>(
        line.split(',').map(str::trim),
        "Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime",
    )?;
    if time.eq_ignore_ascii_case("timestamp") {
        return Ok(None); // header line
    }
    let time = parse_u64("Timestamp", time)?;
    parse_u64("DiskNumber", disk)?;
    let op = if kind.eq_ignore_ascii_case("read") {
        Op::Read
    } else if kind.eq_ignore_ascii_case("write") {
        Op::Write
    } else {
        return Err(LineError::MsrType {
            value: kind.to_string(),
        });
    };
    let offset = parse_u64("Offset", offset)?;
    let len = parse_u64("Size", size)?;
    if len == 0 {
        return Err(LineError::ZeroSize { field: "Size" });
    }
    if offset.checked_add(len).is_none() {
        return Err(LineError::ByteRange { offset, len });
    }
    Ok(Some((Request::new(op, offset, len), time)))
}

fn parse_fiu(line: &str) -> Result<Parsed, LineError> {
    const WHAT: &str = "timestamp_ns pid process lba_sectors size_sectors R|W major minor md5";
    let f: Vec<&str> = line.split_ascii_whitespace().collect();
    // The process name (third field on) may hold spaces: the last six fields are fixed.
    if f.len() < 9 {
        return Err(LineError::FieldCount {
            expected: 9,
            layout: WHAT,
            found: f.len(),
        });
    }
    let [lba, size, kind, major, minor, _md5] = [0, 1, 2, 3, 4, 5].map(|i| f[f.len() - 6 + i]);
    let time = parse_u64("timestamp_ns", f[0])?;
    parse_u64("pid", f[1])?;
    let lba = parse_u64("lba_sectors", lba)?;
    let size = parse_u64("size_sectors", size)?;
    parse_u64("major", major)?;
    parse_u64("minor", minor)?;
    if size == 0 {
        return Err(LineError::ZeroSize {
            field: "size_sectors",
        });
    }
    let op = match kind {
        "W" | "w" => Op::Write,
        "R" | "r" => Op::Read,
        other => {
            return Err(LineError::FiuOperation {
                value: other.to_string(),
            })
        }
    };
    let (offset, len) = sector_range(lba, size)?;
    Ok(Some((Request::new(op, offset, len), time)))
}

/// Parses `seconds.fraction` (up to 9 fraction digits) into integer nanoseconds, exactly.
fn parse_seconds_ns(field: &str) -> Result<u64, LineError> {
    let bad = || LineError::Seconds {
        value: field.to_string(),
    };
    let (int, frac) = field.split_once('.').unwrap_or((field, ""));
    if int.is_empty() && frac.is_empty() {
        return Err(bad());
    }
    if !int.bytes().all(|b| b.is_ascii_digit()) || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    if frac.len() > 9 {
        return Err(LineError::FractionDigits {
            value: field.to_string(),
        });
    }
    let secs = if int.is_empty() {
        0
    } else {
        int.parse::<u64>().map_err(|_| bad())?
    };
    let mut frac_ns = 0u64;
    for i in 0..9 {
        let digit = frac.as_bytes().get(i).map_or(0, |b| u64::from(b - b'0'));
        frac_ns = frac_ns * 10 + digit;
    }
    secs.checked_mul(1_000_000_000)
        .and_then(|ns| ns.checked_add(frac_ns))
        .ok_or_else(|| LineError::SecondsOverflow {
            value: field.to_string(),
        })
}

/// `major,minor` as blkparse prints a device.
fn is_device(field: &str) -> bool {
    match field.split_once(',') {
        Some((major, minor)) => {
            !major.is_empty()
                && !minor.is_empty()
                && major.bytes().all(|b| b.is_ascii_digit())
                && minor.bytes().all(|b| b.is_ascii_digit())
        }
        None => false,
    }
}

fn parse_blkparse(line: &str) -> Result<Parsed, LineError> {
    // dev cpu seq time pid action rwbs [sector + nsectors] [process]
    let mut it = line.split_ascii_whitespace();
    let dev = it.next().unwrap_or("");
    if !is_device(dev) {
        return Ok(None); // summary lines ("CPU0 (8,0):", "Total (8,0):", ...)
    }
    let (Some(_cpu), Some(_seq), Some(time), Some(_pid), Some(action)) =
        (it.next(), it.next(), it.next(), it.next(), it.next())
    else {
        return Ok(None);
    };
    if action != "Q" {
        return Ok(None);
    }
    let rwbs = it.next().ok_or(LineError::NoRwbs)?;
    let time = parse_seconds_ns(time)?;
    let flush = rwbs.contains('F');
    let sector = match it.next() {
        Some(s) if !s.starts_with('[') => s,
        _ if flush => return Ok(Some((Request::new(Op::Flush, 0, 0), time))),
        _ => {
            return Err(LineError::NoSector {
                rwbs: rwbs.to_string(),
            })
        }
    };
    let sector = parse_u64("sector", sector)?;
    match it.next() {
        Some("+") => {}
        Some(other) => {
            return Err(LineError::NotPlus {
                found: other.to_string(),
            })
        }
        None => return Err(LineError::NoPlus),
    }
    let nsectors = parse_u64("nsectors", it.next().ok_or(LineError::NoSectorCount)?)?;
    let op = if rwbs.contains('D') {
        Op::Trim
    } else if rwbs.contains('W') {
        Op::Write
    } else if rwbs.contains('R') {
        Op::Read
    } else if flush {
        return Ok(Some((Request::new(Op::Flush, 0, 0), time)));
    } else {
        return Err(LineError::Rwbs {
            rwbs: rwbs.to_string(),
        });
    };
    if nsectors == 0 {
        if flush {
            return Ok(Some((Request::new(Op::Flush, 0, 0), time)));
        }
        return Err(LineError::ZeroSize { field: "nsectors" });
    }
    let (offset, len) = sector_range(sector, nsectors)?;
    Ok(Some((Request::new(op, offset, len), time)))
}

/// Totals over a trace; see [`summarize`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct TraceSummary {
    /// All requests.
    pub requests: u64,
    /// Read requests.
    pub reads: u64,
    /// Write requests.
    pub writes: u64,
    /// Discard (TRIM) requests (blkparse `D`).
    pub trims: u64,
    /// Flush requests (blkparse `F` without data).
    pub flushes: u64,
    /// Bytes the reads ask for.
    pub bytes_read: u64,
    /// Bytes the writes carry.
    pub bytes_written: u64,
    /// Bytes the discards cover.
    pub bytes_trimmed: u64,
    /// Largest `offset + len` of any request: the logical space the trace needs.
    pub max_end_offset: u64,
    /// Latest arrival minus earliest arrival (0 without arrival times).
    pub duration_ns: Nanos,
}

/// Reads a whole trace (or any stream of requests) and totals it. Stops at the first error.
pub fn summarize<I>(reader: I) -> Result<TraceSummary, TraceError>
where
    I: IntoIterator<Item = Result<Request, TraceError>>,
{
    let mut s = TraceSummary::default();
    let mut first: Option<Nanos> = None;
    let mut last: Option<Nanos> = None;
    for request in reader {
        let r = request?;
        s.requests += 1;
        match r.op {
            Op::Read => {
                s.reads += 1;
                s.bytes_read += r.len_bytes;
            }
            Op::Write => {
                s.writes += 1;
                s.bytes_written += r.len_bytes;
            }
            Op::Trim => {
                s.trims += 1;
                s.bytes_trimmed += r.len_bytes;
            }
            Op::Flush => s.flushes += 1,
        }
        if r.len_bytes > 0 {
            s.max_end_offset = s
                .max_end_offset
                .max(r.offset_bytes.saturating_add(r.len_bytes));
        }
        if let Some(t) = r.arrival_ns {
            first = Some(first.map_or(t, |f| f.min(t)));
            last = Some(last.map_or(t, |l| l.max(t)));
        }
    }
    if let (Some(f), Some(l)) = (first, last) {
        s.duration_ns = l - f;
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    const TPCC: &str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../traces/mqsim/tpcc-small.trace"
    );
    const WSRCH: &str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../traces/mqsim/wsrch-small.trace"
    );

    /// A temporary file that is deleted when dropped.
    struct TempFile(PathBuf);

    impl TempFile {
        fn new(ext: &str, contents: &str) -> TempFile {
            static COUNTER: AtomicU64 = AtomicU64::new(0);
            let n = COUNTER.fetch_add(1, Ordering::Relaxed);
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos());
            let name = format!("ossd-lab-trace-{}-{nanos}-{n}.{ext}", std::process::id());
            let path = std::env::temp_dir().join(name);
            std::fs::write(&path, contents).unwrap();
            TempFile(path)
        }
    }

    impl Drop for TempFile {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    fn read_all(format: TraceFormat, ext: &str, contents: &str) -> Vec<Request> {
        let f = TempFile::new(ext, contents);
        TraceReader::open(&f.0, format)
            .unwrap()
            .collect::<Result<Vec<_>, _>>()
            .unwrap()
    }

    /// Reads until the first error and returns it with the file's name.
    fn first_error(format: TraceFormat, ext: &str, contents: &str) -> (TraceError, String) {
        let f = TempFile::new(ext, contents);
        let err = TraceReader::open(&f.0, format)
            .unwrap()
            .find_map(Result::err)
            .expect("an error");
        let name = f.0.file_name().unwrap().to_str().unwrap().to_string();
        (err, name)
    }

    fn assert_error(format: TraceFormat, contents: &str, line: u64, needle: &str) {
        let (err, name) = first_error(format, "txt", contents);
        let msg = err.to_string();
        assert!(msg.contains(&name), "{msg:?} should name the file {name}");
        assert!(
            msg.contains(&format!(" line {line}: ")),
            "{msg:?} should say line {line}"
        );
        assert!(msg.contains(needle), "{msg:?} should contain {needle:?}");
        assert_eq!(err.line(), Some(line));
    }

    fn req(op: Op, offset: u64, len: u64, at: Nanos) -> Request {
        Request {
            arrival_ns: Some(at),
            ..Request::new(op, offset, len)
        }
    }

    #[test]
    fn format_names_and_detection() {
        for f in TraceFormat::ALL {
            assert_eq!(f.to_string().parse::<TraceFormat>(), Ok(f));
        }
        assert_eq!("MSR".parse::<TraceFormat>(), Ok(TraceFormat::MsrCsv));
        let err = "fio".parse::<TraceFormat>().unwrap_err();
        assert_eq!(err, UnknownTraceFormat { name: "fio".into() });
        assert!(
            err.to_string().contains("mqsim, msr, blkparse, fiu"),
            "{err}"
        );
        assert_eq!(detect(Path::new("a/b.trace")), Some(TraceFormat::Mqsim));
        assert_eq!(detect(Path::new("b.CSV")), Some(TraceFormat::MsrCsv));
        assert_eq!(detect(Path::new("b.blkparse")), Some(TraceFormat::Blkparse));
        assert_eq!(detect(Path::new("b.txt")), Some(TraceFormat::Blkparse));
        assert_eq!(detect(Path::new("b.bin")), None);
        assert_eq!(detect(Path::new("trace")), None);
    }

    /// FIU lines (as in the `homes` traces), a process name with a space, sniffed from a
    /// `.blkparse` file as the FIU traces are named.
    const FIU: &str = "\
89966527949437 4364 syslogd 904265560 8 W 6 0 531a6f1bc1a3e9db5c82e1d4d6e1c0ab
89966528112345 4364 syslogd 904265568 16 W 6 0 8a80554c91d9fca8acb82f023de02f11
89966529000000 5021 gnome terminal 1024 8 R 6 0 d41d8cd98f00b204e9800998ecf8427e
";

    #[test]
    fn fiu_lines_parse_and_are_sniffed_from_blkparse_names() {
        let got = read_all(TraceFormat::Fiu, "fiu", FIU);
        assert_eq!(
            got,
            vec![
                req(Op::Write, 904265560 * 512, 4096, 0),
                req(Op::Write, 904265568 * 512, 8192, 162_908),
                req(Op::Read, 1024 * 512, 4096, 1_050_563),
            ]
        );
        let f = TempFile::new("blkparse", FIU);
        assert_eq!(detect(&f.0), Some(TraceFormat::Fiu));
        let b = TempFile::new(
            "blkparse",
            "  8,0    0        1     0.000000000  4162  Q  WS 1 + 8 [x]\n",
        );
        assert_eq!(detect(&b.0), Some(TraceFormat::Blkparse));
        assert_eq!("FIU".parse::<TraceFormat>(), Ok(TraceFormat::Fiu));
    }

    #[test]
    fn fiu_errors_name_the_line() {
        let fiu = TraceFormat::Fiu;
        let ok = "1 2 p 0 8 W 6 0 x\n";
        assert_error(
            fiu,
            &format!("{ok}1 2 p 0 8 W 6 0\n"),
            2,
            "expected 9 fields",
        );
        assert_error(
            fiu,
            &format!("{ok}{ok}1 2 p 0 8 X 6 0 x\n"),
            3,
            "neither R nor W",
        );
        assert_error(fiu, "1 2 p zero 8 W 6 0 x\n", 1, "lba_sectors \"zero\"");
        assert_error(fiu, "1 2 p 0 0 W 6 0 x\n", 1, "size_sectors is 0");
        assert_error(fiu, "t 2 p 0 8 W 6 0 x\n", 1, "timestamp_ns");
    }

    #[test]
    fn tpcc_trace_counts() {
        let reader = TraceReader::open(Path::new(TPCC), TraceFormat::Mqsim).unwrap();
        let s = summarize(reader).unwrap();
        assert_eq!(s.requests, 6_999);
        assert_eq!(s.writes, 2_618);
        assert_eq!(s.reads, 4_381);
        assert_eq!((s.trims, s.flushes), (0, 0));
        assert_eq!(s.bytes_written, 23_403_520);
        assert_eq!(s.bytes_read, 36_315_136);
        assert_eq!(s.max_end_offset, 232_713_410_560);
        assert_eq!(s.duration_ns, 136_489_000);

        let mut reader = TraceReader::open(Path::new(TPCC), TraceFormat::Mqsim).unwrap();
        let first = reader.next().unwrap().unwrap();
        // 938513000 4 264719034 16 0
        assert_eq!(first, req(Op::Write, 264_719_034 * 512, 16 * 512, 0));
        assert_eq!(reader.by_ref().count(), 6_998);
        assert_eq!(reader.line(), 6_999);
    }

    #[test]
    fn wsrch_trace_counts() {
        // 24,782 newline characters, and a last line without one: 24,783 lines.
        let reader = TraceReader::open(Path::new(WSRCH), TraceFormat::Mqsim).unwrap();
        let s = summarize(reader).unwrap();
        assert_eq!(s.requests, 24_783);
        assert_eq!(s.writes, 4);
        assert_eq!(s.reads, 24_779);
        assert_eq!((s.trims, s.flushes), (0, 0));
        assert_eq!(s.bytes_written, 32_768);
        assert_eq!(s.bytes_read, 382_085_120);
        assert_eq!(s.max_end_offset, 17_902_723_072);
        assert_eq!(s.duration_ns, 60_055_212_000);
    }

    #[test]
    fn mqsim_inline() {
        let text = "# comment\n\n100 0 8 16 0\r\n  150 1 0 1 1  \n400 2 10 8 1";
        let got = read_all(TraceFormat::Mqsim, "trace", text);
        assert_eq!(
            got,
            vec![
                req(Op::Write, 8 * 512, 16 * 512, 0),
                req(Op::Read, 0, 512, 50),
                req(Op::Read, 10 * 512, 8 * 512, 300),
            ]
        );
    }

    #[test]
    fn mqsim_errors() {
        let good = "1 0 0 8 0\n";
        assert_error(
            TraceFormat::Mqsim,
            &format!("{good}2 0 0 abc 0\n"),
            2,
            "size_sectors \"abc\" is not a number",
        );
        assert_error(
            TraceFormat::Mqsim,
            &format!("# c\n\n{good}{good}2 0 0 0 1\n"),
            5,
            "size_sectors is 0",
        );
        assert_error(
            TraceFormat::Mqsim,
            &format!("{good}2 0 0 8 2\n"),
            2,
            "type \"2\"",
        );
        assert_error(
            TraceFormat::Mqsim,
            &format!("{good}2 0 0 8\n"),
            2,
            "expected 5 fields",
        );
        assert_error(
            TraceFormat::Mqsim,
            &format!("{good}2 0 0 8 1 1\n"),
            2,
            "found 6",
        );
        assert_error(
            TraceFormat::Mqsim,
            "x 0 0 8 1\n",
            1,
            "arrival_time_ns \"x\"",
        );
        assert_error(
            TraceFormat::Mqsim,
            "1 0 -5 8 1\n",
            1,
            "start_lba_sectors \"-5\"",
        );
        assert_error(
            TraceFormat::Mqsim,
            "1 0 36028797018963968 8 1\n",
            1,
            "does not fit",
        );
    }

    #[test]
    fn error_names_the_path_and_keeps_going() {
        let f = TempFile::new("trace", "1 0 0 8 0\nbad line\n3 0 8 8 1\n");
        let got: Vec<_> = TraceReader::open(&f.0, TraceFormat::Mqsim)
            .unwrap()
            .collect();
        assert_eq!(got.len(), 3);
        let err = got[1].as_ref().unwrap_err();
        assert_eq!(err.path(), f.0.as_path());
        assert_eq!(
            err.to_string(),
            format!(
                "{} line 2: expected 5 fields (arrival_time_ns device_number start_lba_sectors size_sectors type), found 2",
                f.0.display()
            )
        );
        assert_eq!(
            got[2].as_ref().unwrap(),
            &req(Op::Read, 8 * 512, 8 * 512, 2)
        );
        // summarize stops at the error
        let err = summarize(TraceReader::open(&f.0, TraceFormat::Mqsim).unwrap()).unwrap_err();
        assert_eq!(err.line(), Some(2));
    }

    #[test]
    fn missing_file_is_io_error() {
        let path = std::env::temp_dir().join("ossd-lab-no-such-trace-file.trace");
        let err = TraceReader::open(&path, TraceFormat::Mqsim).unwrap_err();
        assert!(matches!(err, TraceError::Io { .. }));
        assert!(
            err.to_string()
                .contains("ossd-lab-no-such-trace-file.trace"),
            "{err}"
        );
        assert_eq!(err.line(), None);
    }

    #[test]
    fn invalid_utf8_is_a_line_error() {
        let f = TempFile::new("trace", "");
        std::fs::write(&f.0, b"1 0 0 8 0\n\xff\xfe 0 0 8 0\n").unwrap();
        let err = TraceReader::open(&f.0, TraceFormat::Mqsim)
            .unwrap()
            .find_map(Result::err)
            .unwrap();
        assert_eq!(err.line(), Some(2));
        assert!(err.to_string().contains("UTF-8"), "{err}");
    }

    #[test]
    fn msr_inline() {
        let text = "Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime\n\
                    128166372003061629,hm,1,Read,9332736,4096,2128\n\
                    128166372003061639,hm,1,write,9334784,8192,1000\n\
                    # comment\n\
                    128166372013061629, hm ,1, WRITE ,0,512,1\n";
        let got = read_all(TraceFormat::MsrCsv, "csv", text);
        assert_eq!(
            got,
            vec![
                req(Op::Read, 9_332_736, 4096, 0),
                req(Op::Write, 9_334_784, 8192, 1_000),
                req(Op::Write, 0, 512, 1_000_000_000),
            ]
        );
    }

    #[test]
    fn msr_errors() {
        let good = "128166372003061629,hm,1,Read,9332736,4096,2128\n";
        assert_error(
            TraceFormat::MsrCsv,
            &format!("{good}128166372003061629,hm,1,Trim,0,4096,1\n"),
            2,
            "Type \"Trim\"",
        );
        assert_error(
            TraceFormat::MsrCsv,
            &format!("{good}{good}1,hm,1,Read,0x10,4096,1\n"),
            3,
            "Offset \"0x10\" is not a number",
        );
        assert_error(
            TraceFormat::MsrCsv,
            &format!("{good}1,hm,1,Read,0,4096\n"),
            2,
            "expected 7 fields",
        );
        assert_error(
            TraceFormat::MsrCsv,
            &format!("{good}1,hm,1,Read,0,0,1\n"),
            2,
            "Size is 0",
        );
        assert_error(
            TraceFormat::MsrCsv,
            "now,hm,1,Read,0,512,1\n",
            1,
            "Timestamp \"now\"",
        );
    }

    const BLKPARSE: &str = "\
  8,0    3        1     0.000000000   697  Q   W 223490 + 8 [kjournald]
  8,0    3        2     0.000001000   697  G   W 223490 + 8 [kjournald]
  8,0    3        3     0.000002500   697  I   W 223490 + 8 [kjournald]
  8,0    0        0     0.000003000     0  m   N cfq697 insert_request
  8,0    1        4     0.100000001   700  Q   R 1000 + 16 [cat]
  8,0    1        5     0.2   700  Q  DS 2048 + 2048 [fstrim]
  8,0    1        6     1.000000000   700  Q  FWS [jbd2/sda1-8]
  8,0    1        7     1.5           700  Q  WSM 64 + 8 [kworker/u8:2]
  8,0    1        8     2.000000000   700  C   W 223490 + 8 [0]
CPU0 (8,0):
 Reads Queued:           1,        8KiB	 Writes Queued:           2,       8KiB
 Read Dispatches:        0,        0KiB	 Write Dispatches:        0,       0KiB
Total (8,0):
Throughput (R/W): 0KiB/s / 0KiB/s
Events (8,0): 9 entries
Skips: 0 forward (0 -   0.0%)
";

    #[test]
    fn blkparse_inline() {
        let got = read_all(TraceFormat::Blkparse, "blkparse", BLKPARSE);
        assert_eq!(
            got,
            vec![
                req(Op::Write, 223_490 * 512, 8 * 512, 0),
                req(Op::Read, 1000 * 512, 16 * 512, 100_000_001),
                req(Op::Trim, 2048 * 512, 2048 * 512, 200_000_000),
                req(Op::Flush, 0, 0, 1_000_000_000),
                req(Op::Write, 64 * 512, 8 * 512, 1_500_000_000),
            ]
        );
        let f = TempFile::new("txt", BLKPARSE);
        let s = summarize(TraceReader::open(&f.0, TraceFormat::Blkparse).unwrap()).unwrap();
        assert_eq!(
            (s.requests, s.reads, s.writes, s.trims, s.flushes),
            (5, 1, 2, 1, 1)
        );
        assert_eq!(s.bytes_written, 16 * 512);
        assert_eq!(s.bytes_read, 16 * 512);
        assert_eq!(s.bytes_trimmed, 2048 * 512);
        assert_eq!(s.max_end_offset, (223_490 + 8) * 512);
        assert_eq!(s.duration_ns, 1_500_000_000);
    }

    #[test]
    fn blkparse_relative_to_first_queue_event() {
        let text = "  8,0 0 1 5.000000000 1 C W 0 + 8 [x]\n  8,0 0 2 7.250000000 1 Q R 8 + 8 [x]\n  8,0 0 3 7.250000007 1 Q W 8 + 8 [x]\n";
        let got = read_all(TraceFormat::Blkparse, "txt", text);
        assert_eq!(
            got,
            vec![req(Op::Read, 4096, 4096, 0), req(Op::Write, 4096, 4096, 7)]
        );
    }

    #[test]
    fn blkparse_errors() {
        let good = "  8,0 0 1 0.000000000 1 Q W 0 + 8 [x]\n";
        let bl = TraceFormat::Blkparse;
        assert_error(
            bl,
            &format!("{good}  8,0 0 2 0.1 1 Q W abc + 8 [x]\n"),
            2,
            "sector \"abc\" is not a number",
        );
        assert_error(
            bl,
            &format!("{good}{good}  8,0 0 2 0.1 1 Q W 8 8 [x]\n"),
            3,
            "expected \"+\"",
        );
        assert_error(
            bl,
            &format!("{good}  8,0 0 2 0.1 1 Q W 8 +\n"),
            2,
            "missing nsectors",
        );
        assert_error(
            bl,
            &format!("{good}  8,0 0 2 1e3 1 Q W 8 + 8 [x]\n"),
            2,
            "time \"1e3\"",
        );
        assert_error(
            bl,
            &format!("{good}  8,0 0 2 0.0000000001 1 Q W 8 + 8 [x]\n"),
            2,
            "more than 9",
        );
        assert_error(
            bl,
            &format!("{good}  8,0 0 2 0.1 1 Q W [x]\n"),
            2,
            "has no sector",
        );
        assert_error(
            bl,
            &format!("{good}  8,0 0 2 0.1 1 Q N 8 + 8 [x]\n"),
            2,
            "RWBS \"N\"",
        );
        assert_error(
            bl,
            &format!("{good}  8,0 0 2 0.1 1 Q W 8 + 0 [x]\n"),
            2,
            "nsectors is 0",
        );
        assert_error(bl, &format!("{good}  8,0 0 2 0.1 1 Q\n"), 2, "no RWBS");
    }

    #[test]
    fn seconds_parse_exactly() {
        assert_eq!(parse_seconds_ns("0.000000000"), Ok(0));
        assert_eq!(parse_seconds_ns("12.3"), Ok(12_300_000_000));
        assert_eq!(parse_seconds_ns("1.000000001"), Ok(1_000_000_001));
        assert_eq!(parse_seconds_ns("3"), Ok(3_000_000_000));
        assert_eq!(parse_seconds_ns(".5"), Ok(500_000_000));
        assert_eq!(parse_seconds_ns("86399.999999999"), Ok(86_399_999_999_999));
        assert!(parse_seconds_ns(".").is_err());
        assert!(parse_seconds_ns("-1.0").is_err());
        assert!(parse_seconds_ns("1.2.3").is_err());
        assert!(parse_seconds_ns("99999999999999999999.0").is_err());
    }
}
