//! A synthetic stand-in for the home02 trace of POFTL-14 IV-B (Harvard SOS traces of a campus
//! general-purpose server's home directories), which ossd cannot ship: many files of skewed
//! popularity, updated mostly by appends, some in-place overwrites, whole-file rewrites (an
//! editor's save), deletions and re-creations, and reads, until a total volume is written.
//!
//! What makes it fit the paper's argument: pages of one file tend to be written, rewritten and
//! deleted together (appends to a hot log, rewrites of a whole file, deletes), and appended
//! pages have no history of their own. An append that would take a file past
//! `rotate_factor` times its initial size first empties it (a log rotated, a mailbox emptied),
//! so a file's size cycles between 0 and that cap and the live footprint stays near the sum of
//! the initial sizes: hot files turn over often, cold ones rarely.
//!
//! Transactions come in runs on one file (`run_transactions_mean`, geometric, default 8): a
//! file is drawn by Zipf popularity (`zipf_theta`; ranks scattered over the files), then each
//! transaction of the run draws one operation by the given shares. Runs stand for a user or a
//! program working on one file for a while (a burst of appends to a log or mailbox, a file
//! edited and saved several times); with a mean of 1 every transaction draws its file afresh
//! (this workload's first version, which had no temporal locality beyond popularity). Sizes are drawn uniformly in the given
//! ranges, in bytes (not page-aligned, so partial pages occur as in a real trace).

use rand::seq::SliceRandom;
use serde::{Deserialize, Serialize};
use vfs::{FsError, Ino, ROOT};

use super::{Meter, Phases};
use crate::block::ZipfSampler;

/// The append-heavy home02 stand-in's parameters (see the module docs).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AppendHot {
    /// Files created by the initial fill (at least 1).
    pub files: u64,
    /// Initial file sizes: uniform in this range.
    pub file_bytes_min: u64,
    /// Largest initial file size, in bytes.
    pub file_bytes_max: u64,
    /// A file is emptied before an append would take it past this many times its initial size.
    pub rotate_factor: f64,
    /// Writing continues until this much is written, counting the initial fill.
    pub total_bytes: u64,
    /// Popularity skew over files.
    pub zipf_theta: f64,
    /// Shares of the operations (normalized): append, overwrite in place, rewrite the whole
    /// file, delete and re-create, read.
    pub append_share: f64,
    /// Share of in-place overwrites.
    pub overwrite_share: f64,
    /// Share of whole-file rewrites (an editor's save).
    pub rewrite_share: f64,
    /// Share of deletions followed by re-creation.
    pub recreate_share: f64,
    /// Share of reads.
    pub read_share: f64,
    /// Smallest append, in bytes.
    pub append_bytes_min: u64,
    /// Largest append, in bytes.
    pub append_bytes_max: u64,
    /// Smallest in-place overwrite or read, in bytes.
    pub overwrite_bytes_min: u64,
    /// Largest in-place overwrite or read, in bytes.
    pub overwrite_bytes_max: u64,
    /// Probability that a transaction ends with an fsync of its file.
    pub fsync_probability: f64,
    /// Mean length, in transactions, of a run on one file (geometric; 1 = every transaction
    /// draws its file afresh). A user works on a file for a while: a burst of appends to a
    /// log, a mailbox, an edited file saved and overwritten a few times, then moves on.
    pub run_transactions_mean: f64,
}

impl Default for AppendHot {
    /// Scaled for the 3.64 GB p-OFTL device of POFTL-14: 8,000 files of 16 KiB to 600 KiB
    /// (about 2.3 GiB live, 63% of the device), 20 GB written in total (IV-E). Half of the
    /// operations append, and appends are the largest share of the bytes written (about 40%,
    /// against 20% for in-place overwrites and 40% for whole-file rewrites and re-creations).
    fn default() -> Self {
        AppendHot {
            files: 8_000,
            file_bytes_min: 16 << 10,
            file_bytes_max: 600 << 10,
            rotate_factor: 2.0,
            total_bytes: 20_000_000_000,
            zipf_theta: 0.9,
            append_share: 0.5,
            overwrite_share: 0.2,
            rewrite_share: 0.03,
            recreate_share: 0.02,
            read_share: 0.25,
            append_bytes_min: 1 << 10,
            append_bytes_max: 64 << 10,
            overwrite_bytes_min: 4 << 10,
            overwrite_bytes_max: 64 << 10,
            fsync_probability: 0.05,
            run_transactions_mean: 8.0,
        }
    }
}

impl AppendHot {
    /// Checks the parameters: `rotate_factor` and `run_transactions_mean` at least 1, at least
    /// one file, `zipf_theta` above 0, shares non-negative and not all 0, every size range
    /// `1 <= min <= max`. The error names the bad parameter.
    pub fn validate(&self) -> Result<(), AppendHotError> {
        if !(self.rotate_factor.is_finite() && self.rotate_factor >= 1.0) {
            return Err(AppendHotError::AtLeastOne {
                field: "rotate_factor",
                value: self.rotate_factor,
            });
        }
        if !(self.run_transactions_mean.is_finite() && self.run_transactions_mean >= 1.0) {
            return Err(AppendHotError::AtLeastOne {
                field: "run_transactions_mean",
                value: self.run_transactions_mean,
            });
        }
        if self.files == 0 {
            return Err(AppendHotError::NoFiles);
        }
        if !(self.zipf_theta.is_finite() && self.zipf_theta > 0.0) {
            return Err(AppendHotError::ZipfTheta {
                theta: self.zipf_theta,
            });
        }
        let shares = [
            self.append_share,
            self.overwrite_share,
            self.rewrite_share,
            self.recreate_share,
            self.read_share,
        ];
        if shares.iter().any(|s| !(s.is_finite() && *s >= 0.0)) || shares.iter().sum::<f64>() <= 0.0
        {
            return Err(AppendHotError::Shares);
        }
        for (name, lo, hi) in [
            ("file_bytes", self.file_bytes_min, self.file_bytes_max),
            ("append_bytes", self.append_bytes_min, self.append_bytes_max),
            (
                "overwrite_bytes",
                self.overwrite_bytes_min,
                self.overwrite_bytes_max,
            ),
        ] {
            if lo == 0 || lo > hi {
                return Err(AppendHotError::Range {
                    name,
                    min: lo,
                    max: hi,
                });
            }
        }
        Ok(())
    }
}

/// Why [`AppendHot::validate`] refused the parameters.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum AppendHotError {
    /// `rotate_factor` or `run_transactions_mean` below 1 (or not finite).
    #[error("append-hot: {field} = {value} must be at least 1")]
    AtLeastOne {
        /// The parameter.
        field: &'static str,
        /// Its value.
        value: f64,
    },
    /// `files` is 0.
    #[error("append-hot: files must be at least 1")]
    NoFiles,
    /// `zipf_theta` is not above 0 (or not finite).
    #[error("append-hot: zipf_theta = {theta} must be > 0")]
    ZipfTheta {
        /// The value.
        theta: f64,
    },
    /// An operation share below 0 or not finite, or all shares 0.
    #[error("append-hot: operation shares must be >= 0 and not all 0")]
    Shares,
    /// A size range (`file_bytes`, `append_bytes`, `overwrite_bytes`) with `min` 0 or above
    /// `max`.
    #[error("append-hot: {name}_min must be >= 1 and <= {name}_max (got {min} and {max})")]
    Range {
        /// The range's name (the parameters are `{name}_min` and `{name}_max`).
        name: &'static str,
        /// `{name}_min`.
        min: u64,
        /// `{name}_max`.
        max: u64,
    },
}

/// The size past which a file of initial size `initial` is rotated (at least one append).
fn cap(w: &AppendHot, initial: u64) -> u64 {
    ((initial as f64 * w.rotate_factor) as u64).max(w.append_bytes_max)
}

/// A geometric draw with the given mean (at least 1); no draw at all for a mean of 1.
fn run_length(m: &mut Meter, mean: f64) -> u64 {
    if mean <= 1.0 {
        return 1;
    }
    // P(length > n) = (1 - 1/mean)^n, by inversion of a uniform in (0, 1].
    let u = (m.between(1, 1 << 30) as f64) / (1u64 << 30) as f64;
    1 + (u.ln() / (1.0 - 1.0 / mean).ln()).floor() as u64
}

/// Runs the workload; phases "fill" and "run".
pub fn run(m: &mut Meter, w: &AppendHot) -> Result<Phases, FsError> {
    w.validate().map_err(|e| FsError::Invalid(e.to_string()))?;
    let mut inos: Vec<Ino> = Vec::with_capacity(w.files as usize);
    let mut sizes: Vec<u64> = Vec::with_capacity(w.files as usize);
    let mut caps: Vec<u64> = Vec::with_capacity(w.files as usize);
    let mut generation = vec![0u64; w.files as usize];
    for i in 0..w.files {
        let ino = m.create(ROOT, &format!("h{i:06}.0"))?;
        let size = m.between(w.file_bytes_min, w.file_bytes_max);
        m.write_chunks(ino, 0, size, 256 << 10)?;
        inos.push(ino);
        sizes.push(size);
        caps.push(cap(w, size));
    }
    m.sync()?;
    let fill = m.restart();
    let zipf = ZipfSampler::new(w.files, w.zipf_theta);
    let mut rank_to_file: Vec<usize> = (0..w.files as usize).collect();
    rank_to_file.shuffle(&mut m.rng);
    let shares = [
        w.append_share,
        w.overwrite_share,
        w.rewrite_share,
        w.recreate_share,
        w.read_share,
    ];
    let total: f64 = shares.iter().sum();
    let mut written = fill.write_bytes;
    // The file of the current run and the transactions left in it.
    let (mut f, mut run_left) = (0usize, 0u64);
    while written < w.total_bytes {
        if run_left == 0 {
            f = rank_to_file[(zipf.sample(&mut m.rng) - 1) as usize];
            run_left = run_length(m, w.run_transactions_mean);
        }
        run_left -= 1;
        let mut pick = m.between(0, 1_000_000) as f64 / 1e6 * total;
        let op = shares
            .iter()
            .position(|s| {
                pick -= s;
                pick < 0.0
            })
            .unwrap_or(0);
        let size = sizes[f];
        match op {
            0 => {
                let n = m.between(w.append_bytes_min, w.append_bytes_max);
                if size + n > caps[f] {
                    // Log rotation: the file starts over.
                    m.fs.truncate(inos[f], 0)?;
                    sizes[f] = 0;
                }
                m.write(inos[f], sizes[f], n)?;
                sizes[f] += n;
                written += n;
            }
            1 if size > 0 => {
                let n = m
                    .between(w.overwrite_bytes_min, w.overwrite_bytes_max)
                    .min(size);
                let at = m.between(0, size - n);
                m.write(inos[f], at, n)?;
                written += n;
            }
            2 if size > 0 => {
                m.fs.truncate(inos[f], 0)?;
                m.write_chunks(inos[f], 0, size, 256 << 10)?;
                written += size;
            }
            3 => {
                generation[f] += 1;
                m.unlink(ROOT, &format!("h{f:06}.{}", generation[f] - 1))?;
                inos[f] = m.create(ROOT, &format!("h{f:06}.{}", generation[f]))?;
                let n = m.between(w.file_bytes_min, w.file_bytes_max);
                m.write_chunks(inos[f], 0, n, 256 << 10)?;
                sizes[f] = n;
                caps[f] = cap(w, n);
                written += n;
            }
            _ if size > 0 => {
                let n = m
                    .between(w.overwrite_bytes_min, w.overwrite_bytes_max)
                    .min(size);
                let at = m.between(0, size - n);
                m.read(inos[f], at, n)?;
            }
            _ => {}
        }
        if m.between(0, 1_000_000) as f64 / 1e6 < w.fsync_probability {
            m.fsync(inos[f], true)?;
        }
        m.stats.transactions += 1;
    }
    m.sync()?;
    Ok(vec![("fill", fill), ("run", m.restart())])
}

#[cfg(test)]
mod tests {
    use vfs::oracle::MemFs;
    use vfs::FileSystem;

    use super::*;
    use crate::files::tests::meter;

    #[test]
    fn run_lengths_are_geometric_with_the_given_mean() {
        let mut fs = MemFs::default();
        let mut m = meter(&mut fs);
        assert!((0..100).all(|_| run_length(&mut m, 1.0) == 1));
        let n = 20_000;
        let lengths: Vec<u64> = (0..n).map(|_| run_length(&mut m, 8.0)).collect();
        let mean = lengths.iter().sum::<u64>() as f64 / n as f64;
        assert!((mean - 8.0).abs() < 0.3, "mean {mean}");
        // Geometric: one in eight runs is a single transaction.
        let ones = lengths.iter().filter(|&&l| l == 1).count() as f64 / n as f64;
        assert!((ones - 0.125).abs() < 0.01, "{ones}");
        assert_eq!(
            AppendHot {
                run_transactions_mean: 0.5,
                ..AppendHot::default()
            }
            .validate(),
            Err(AppendHotError::AtLeastOne {
                field: "run_transactions_mean",
                value: 0.5
            })
        );
    }

    #[test]
    fn writes_the_total_and_rotates_files() {
        let mut fs = MemFs::default();
        let w = AppendHot {
            files: 50,
            file_bytes_min: 4096,
            file_bytes_max: 65536,
            total_bytes: 20 << 20,
            ..AppendHot::default()
        };
        let phases = run(&mut meter(&mut fs), &w).unwrap();
        let written = phases[0].1.write_bytes + phases[1].1.write_bytes;
        assert!(written >= 20 << 20, "{written}");
        assert!(phases[1].1.transactions > 100);
        assert!(phases[1].1.read_bytes > 0);
        let names = fs.readdir(ROOT).unwrap();
        assert_eq!(names.len(), 50);
        let live: u64 = names.iter().map(|(_, i)| fs.stat(*i).unwrap().size).sum();
        // Files never pass twice their initial size (at most 64 KiB each; 50 files).
        assert!(live <= (50 * 128) << 10, "live {live}");
        assert_eq!(
            AppendHot {
                zipf_theta: 0.0,
                ..w.clone()
            }
            .validate(),
            Err(AppendHotError::ZipfTheta { theta: 0.0 })
        );
    }
}
