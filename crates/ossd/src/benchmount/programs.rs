//! The real programs `ossd bench-mount` runs, and what it reads from them: fio (its JSON
//! output), PostMark (its text report, commands on standard input) and the video-read scenario
//! (a reader at a fixed frame rate and a background writer, both in this process).

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use workload::latency::LatencySummary;

use super::stack::run;
use super::BenchError;

/// What one program run measured, in the units of [`workload::files::FileSummary`].
#[derive(Clone, Debug, Default)]
pub struct Measured {
    /// Wall-clock seconds of the run (with `--timing emulate`, the device's time is felt).
    pub seconds: f64,
    /// Bytes the program wrote.
    pub write_bytes: u64,
    /// Bytes the program read.
    pub read_bytes: u64,
    /// The program's own unit of work (PostMark transactions, frames, I/O requests).
    pub transactions: u64,
    /// Files created and deleted.
    pub creates: u64,
    /// Files deleted.
    pub deletes: u64,
    /// Read and write latency, where the program reports it.
    pub read_latency: LatencySummary,
    /// Write latency (fio: without the fdatasync calls).
    pub write_latency: LatencySummary,
    /// Units of work completed in each wall-clock second (the video's frames).
    pub per_second: Vec<u64>,
}

/// One fio job.
pub struct FioJob<'a> {
    /// fio's `--rw`.
    pub rw: &'a str,
    /// Request size in bytes.
    pub bs: u64,
    /// File size in bytes.
    pub size: u64,
    /// fdatasync after every write.
    pub fdatasync: bool,
    /// O_DIRECT.
    pub direct: bool,
    /// Run for this long (time-based) instead of once over the file.
    pub runtime_s: Option<u64>,
}

/// Runs `job` on the file `file` (fio's own file name), `--output-format=json`.
pub fn fio(file: &Path, job: &FioJob) -> Result<Measured, BenchError> {
    let mut cmd = Command::new("fio");
    cmd.arg("--name=bench")
        .arg(format!("--filename={}", file.display()))
        .arg(format!("--rw={}", job.rw))
        .arg(format!("--bs={}", job.bs))
        .arg(format!("--size={}", job.size))
        .arg("--ioengine=psync")
        // Neither mount implements fallocate for preallocation; fio writes the file instead.
        .arg("--fallocate=none")
        .arg(format!("--direct={}", u8::from(job.direct)))
        .arg("--randrepeat=1")
        .arg("--output-format=json");
    if job.fdatasync {
        cmd.arg("--fdatasync=1");
    }
    if job.rw.contains("write") && !job.fdatasync {
        // Buffered data reaches the device within the measured time.
        cmd.arg("--end_fsync=1");
    }
    if let Some(t) = job.runtime_s {
        cmd.arg("--time_based").arg(format!("--runtime={t}"));
    }
    let out = run(&mut cmd)?;
    parse_fio(&out)
}

fn lat(v: &Value) -> LatencySummary {
    let ns = |x: &Value| x.as_f64().unwrap_or(0.0) / 1000.0;
    let pct = |p: &str| ns(&v["clat_ns"]["percentile"][p]);
    LatencySummary {
        count: v["total_ios"].as_u64().unwrap_or(0),
        mean_us: ns(&v["lat_ns"]["mean"]),
        p50_us: pct("50.000000"),
        p99_us: pct("99.000000"),
        p999_us: pct("99.900000"),
        max_us: ns(&v["lat_ns"]["max"]),
    }
}

/// fio's JSON report (what precedes the first `{` is fio's own messages).
pub fn parse_fio(out: &str) -> Result<Measured, BenchError> {
    let start = out.find('{').ok_or_else(|| BenchError::Parse {
        program: "fio",
        what: "no JSON in its output".into(),
    })?;
    let v: Value = serde_json::from_str(&out[start..]).map_err(|e| BenchError::Parse {
        program: "fio",
        what: e.to_string(),
    })?;
    let job = &v["jobs"][0];
    if job.is_null() {
        return Err(BenchError::Parse {
            program: "fio",
            what: "no job in the JSON report".into(),
        });
    }
    if let Some(err) = job["error"].as_i64().filter(|e| *e != 0) {
        return Err(BenchError::Parse {
            program: "fio",
            what: format!("the job failed with error {err}"),
        });
    }
    let (r, w) = (&job["read"], &job["write"]);
    let ms = job["job_runtime"]
        .as_f64()
        .unwrap_or(0.0)
        .max(r["runtime"].as_f64().unwrap_or(0.0))
        .max(w["runtime"].as_f64().unwrap_or(0.0));
    let ios = r["total_ios"].as_u64().unwrap_or(0) + w["total_ios"].as_u64().unwrap_or(0);
    Ok(Measured {
        seconds: ms / 1000.0,
        write_bytes: w["io_bytes"].as_u64().unwrap_or(0),
        read_bytes: r["io_bytes"].as_u64().unwrap_or(0),
        transactions: ios,
        read_latency: lat(r),
        write_latency: lat(w),
        ..Measured::default()
    })
}

/// One PostMark run (`set` commands, then `run`).
pub struct PostMark {
    /// Files in the pool.
    pub files: u64,
    /// Transactions.
    pub transactions: u64,
    /// Smallest and largest file, in bytes.
    pub size: (u64, u64),
    /// Read and write request size in bytes.
    pub io_bytes: u64,
    /// PostMark's create bias (-1: transactions only read and append).
    pub create_bias: i32,
}

/// Runs PostMark in `dir`; the time is the whole run's wall clock (PostMark's own report has
/// whole seconds only).
pub fn postmark(dir: &Path, p: &PostMark) -> Result<Measured, BenchError> {
    let script = format!(
        "set location {}\nset number {}\nset transactions {}\nset size {} {}\n\
         set read {}\nset write {}\nset buffering false\nset bias create {}\nrun\nquit\n",
        dir.display(),
        p.files,
        p.transactions,
        p.size.0,
        p.size.1,
        p.io_bytes,
        p.io_bytes,
        p.create_bias
    );
    let started = Instant::now();
    let mut child = Command::new("postmark")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| BenchError::Spawn {
            cmd: "postmark".into(),
            source,
        })?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(script.as_bytes())
            .map_err(|source| BenchError::Spawn {
                cmd: "postmark (its standard input)".into(),
                source,
            })?;
    }
    let out = child
        .wait_with_output()
        .map_err(|source| BenchError::Spawn {
            cmd: "postmark".into(),
            source,
        })?;
    let seconds = started.elapsed().as_secs_f64();
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() || !text.contains("Deleting files") {
        return Err(BenchError::Failed {
            cmd: "postmark".into(),
            status: out.status.to_string(),
            stderr: format!("{}{}", text, String::from_utf8_lossy(&out.stderr)),
        });
    }
    let mut m = parse_postmark(&text)?;
    m.seconds = seconds;
    m.transactions = p.transactions;
    Ok(m)
}

/// PostMark's text report: data read and written, files created and deleted.
pub fn parse_postmark(text: &str) -> Result<Measured, BenchError> {
    let bytes = |line: &str| -> Option<u64> {
        let mut w = line.split_whitespace();
        let n: f64 = w.next()?.parse().ok()?;
        let unit = match w.next()? {
            "bytes" => 1.0,
            "kilobytes" => 1024.0,
            "megabytes" => 1024.0 * 1024.0,
            "gigabytes" => 1024.0 * 1024.0 * 1024.0,
            _ => return None,
        };
        Some((n * unit) as u64)
    };
    let count = |line: &str| -> Option<u64> { line.split_whitespace().next()?.parse().ok() };
    let mut m = Measured::default();
    let (mut read, mut written) = (None, None);
    for line in text.lines().map(str::trim) {
        if line.contains(" read (") {
            read = read.or(bytes(line));
        } else if line.contains(" written (") {
            written = written.or(bytes(line));
        } else if line.contains(" created (") && m.creates == 0 {
            m.creates = count(line).unwrap_or(0);
        } else if line.contains(" deleted (") && m.deletes == 0 {
            m.deletes = count(line).unwrap_or(0);
        }
    }
    match (read, written) {
        (Some(r), Some(w)) => {
            m.read_bytes = r;
            m.write_bytes = w;
            Ok(m)
        }
        _ => Err(BenchError::Parse {
            program: "postmark",
            what: "no \"Data:\" lines in its report".into(),
        }),
    }
}

/// The video scenario: a reader reads `video` (made here) at `fps` frames of `frame_bytes`
/// each second for `seconds` seconds, while a writer writes files of `writer_file_bytes` in
/// 128 KiB requests (fsync after each file, the fourth-newest deleted) into `dir`.
pub struct Video {
    /// Frames per second the reader asks for.
    pub fps: u64,
    /// Bytes of one frame.
    pub frame_bytes: u64,
    /// How long the reader plays.
    pub seconds: u64,
    /// Bytes of each file the writer writes.
    pub writer_file_bytes: u64,
}

const WRITER_REQUEST: usize = 128 << 10;

/// Writes the video file (`fps * seconds` frames), synced and dropped from the page cache.
pub fn make_video(path: &Path, v: &Video) -> Result<(), BenchError> {
    let io = |source| BenchError::Io {
        path: path.to_owned(),
        source,
    };
    let mut f = File::create(path).map_err(io)?;
    let frame: Vec<u8> = (0..v.frame_bytes).map(|i| (i * 31 % 251) as u8).collect();
    for _ in 0..v.fps * v.seconds {
        f.write_all(&frame).map_err(io)?;
    }
    f.sync_all().map_err(io)?;
    drop_cache(&f).map_err(io)
}

fn drop_cache(f: &File) -> std::io::Result<()> {
    rustix::fs::fadvise(f, 0, None, rustix::fs::Advice::DontNeed).map_err(std::io::Error::from)
}

/// Plays the video while the writer writes; `per_second` holds the frames delivered in each
/// second of play (a frame counts in the second its read completed; a late reader does not
/// skip frames, and frames not read by the end are not delivered).
pub fn play(video: &Path, writer_dir: &Path, v: &Video) -> Result<Measured, BenchError> {
    let io = |p: &Path| {
        let p = p.to_owned();
        move |source| BenchError::Io { path: p, source }
    };
    let stop = Arc::new(AtomicBool::new(false));
    let written = Arc::new(AtomicU64::new(0));
    let writer = {
        let (stop, written, dir) = (stop.clone(), written.clone(), writer_dir.to_owned());
        let file_bytes = v.writer_file_bytes;
        std::thread::spawn(move || -> Result<u64, BenchError> {
            std::fs::create_dir_all(&dir).map_err(io(&dir))?;
            let buf = vec![0x5Au8; WRITER_REQUEST];
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let path = dir.join(format!("w{n:05}"));
                let mut f = File::create(&path).map_err(io(&path))?;
                let mut done = 0u64;
                while done < file_bytes && !stop.load(Ordering::Relaxed) {
                    f.write_all(&buf).map_err(io(&path))?;
                    done += buf.len() as u64;
                    written.fetch_add(buf.len() as u64, Ordering::Relaxed);
                }
                f.sync_all().map_err(io(&path))?;
                if n >= 3 {
                    let old = dir.join(format!("w{:05}", n - 3));
                    std::fs::remove_file(&old).map_err(io(&old))?;
                }
                n += 1;
            }
            Ok(n)
        })
    };
    let mut f = File::open(video).map_err(io(video))?;
    f.seek(SeekFrom::Start(0)).map_err(io(video))?;
    let mut frame = vec![0u8; v.frame_bytes as usize];
    let mut per_second = vec![0u64; v.seconds as usize];
    let mut lat = Vec::new();
    let start = Instant::now();
    let end = Duration::from_secs(v.seconds);
    let mut read_bytes = 0;
    let frames = v.fps * v.seconds;
    let result = (|| {
        for i in 0..frames {
            let due = Duration::from_nanos(i * 1_000_000_000 / v.fps);
            let now = start.elapsed();
            if now >= end {
                break;
            }
            if due > now {
                std::thread::sleep(due - now);
            }
            let t = Instant::now();
            f.read_exact_at(&mut frame, i * v.frame_bytes)
                .map_err(io(video))?;
            lat.push(t.elapsed().as_nanos() as u64);
            let done = start.elapsed();
            if done < end {
                per_second[done.as_secs() as usize] += 1;
                read_bytes += v.frame_bytes;
            }
        }
        Ok::<(), BenchError>(())
    })();
    stop.store(true, Ordering::Relaxed);
    let files = writer.join().map_err(|_| BenchError::WriterPanicked)??;
    result?;
    // Drain the file handle's read so the video can be played again cold.
    let _ = f.read(&mut [0u8; 0]);
    drop_cache(&f).map_err(io(video))?;
    let seconds = start.elapsed().as_secs_f64();
    Ok(Measured {
        seconds,
        write_bytes: written.load(Ordering::Relaxed),
        read_bytes,
        transactions: per_second.iter().sum(),
        creates: files,
        read_latency: summarize(&mut lat),
        per_second,
        ..Measured::default()
    })
}

/// Percentiles of latencies in ns, as microseconds.
fn summarize(ns: &mut [u64]) -> LatencySummary {
    if ns.is_empty() {
        return LatencySummary::default();
    }
    ns.sort_unstable();
    let at = |q: f64| ns[((ns.len() - 1) as f64 * q).round() as usize] as f64 / 1000.0;
    LatencySummary {
        count: ns.len() as u64,
        mean_us: ns.iter().sum::<u64>() as f64 / ns.len() as f64 / 1000.0,
        p50_us: at(0.5),
        p99_us: at(0.99),
        p999_us: at(0.999),
        max_us: at(1.0),
    }
}

/// Ages a file system as OSSD-13 VI-F did with its hot/cold benchmark (VI-D), through the
/// kernel: 128 KiB files in `DIR/aging` until `percent` of the file system's blocks are in use,
/// then as many whole-file rewrites, 90% of them on the first 10% of the files (seeded). The
/// files stay, so the measurements run on a device that full, with that much garbage collected.
pub fn age(
    dir: &Path,
    percent: f64,
    seed: u64,
    progress: &dyn Fn(String),
) -> Result<(), BenchError> {
    use rand::{Rng, SeedableRng};
    const FILE_BYTES: usize = 128 << 10;
    let root = dir.join("aging");
    let io = |p: &Path| {
        let p = p.to_owned();
        move |source| BenchError::Io { path: p, source }
    };
    std::fs::create_dir_all(&root).map_err(io(&root))?;
    let v = rustix::fs::statvfs(dir).map_err(|e| BenchError::Io {
        path: dir.to_owned(),
        source: e.into(),
    })?;
    let block = v.f_frsize.max(1);
    let total = v.f_blocks * block;
    let used = v.f_blocks.saturating_sub(v.f_bfree) * block;
    let target = (total as f64 * percent / 100.0) as u64;
    let files = target.saturating_sub(used) / FILE_BYTES as u64;
    let data = vec![0xA5u8; FILE_BYTES];
    let write = |i: u64| -> Result<(), BenchError> {
        let path = root.join(format!("f{i:06}"));
        let mut f = File::create(&path).map_err(io(&path))?;
        f.write_all(&data).map_err(io(&path))
    };
    for i in 0..files {
        if i % 256 == 0 {
            progress(format!("aging: writing file {i} of {files}"));
        }
        write(i)?;
    }
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let hot = (files / 10).max(1);
    for n in 0..files {
        if n % 256 == 0 {
            progress(format!("aging: rewrite {n} of {files}"));
        }
        let i = if rng.gen_bool(0.9) {
            rng.gen_range(0..hot)
        } else {
            rng.gen_range(0..files)
        };
        write(i)?;
    }
    run(Command::new("sync").arg("-f").arg(dir))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn postmark_report_is_parsed() {
        let text = "Time:\n\t1 seconds total\nFiles:\n\t46 created (46 per second)\n\t\tCreation alone: 20 files (20 per second)\n\t46 deleted (46 per second)\nData:\n\t953.65 kilobytes read (953.65 kilobytes per second)\n\t2.03 megabytes written (2.03 megabytes per second)\n";
        let m = parse_postmark(text).unwrap();
        assert_eq!(m.read_bytes, (953.65f64 * 1024.0) as u64);
        assert_eq!(m.write_bytes, (2.03f64 * 1024.0 * 1024.0) as u64);
        assert_eq!((m.creates, m.deletes), (46, 46));
        assert!(parse_postmark("pm>").is_err());
    }

    #[test]
    fn fio_json_is_parsed_and_failures_are_errors() {
        let json = r#"fio: note
{"jobs":[{"error":0,"job_runtime":2000,
 "read":{"io_bytes":0,"total_ios":0,"runtime":0,"lat_ns":{"mean":0,"max":0},"clat_ns":{}},
 "write":{"io_bytes":1048576,"total_ios":8,"runtime":2000,"lat_ns":{"mean":5000,"max":9000},
  "clat_ns":{"percentile":{"50.000000":4000,"99.000000":8000,"99.900000":9000}}}}]}"#;
        let m = parse_fio(json).unwrap();
        assert_eq!((m.write_bytes, m.transactions), (1 << 20, 8));
        assert_eq!(m.seconds, 2.0);
        assert_eq!(m.write_latency.p99_us, 8.0);
        assert!(parse_fio("nothing").is_err());
        assert!(parse_fio(r#"{"jobs":[{"error":5}]}"#).is_err());
    }
}
