//! Built-in block workloads.
//!
//! A [`Workload`] is a deterministic, closed-loop request generator (every request has
//! `arrival_ns: None`): the same [`WorkloadConfig`] (seed included) always yields the same
//! sequence. All randomness comes from a [`ChaCha8Rng`] seeded with
//! [`WorkloadConfig::seed`]. The logical space is divided into *slots* of
//! [`WorkloadConfig::request_bytes`]; every request covers exactly one slot, so every offset
//! is aligned to `request_bytes` and lies in `[0, footprint)` with the footprint rounded
//! down to a whole number of slots.
//!
//! Generating a request allocates nothing and costs a few random draws (the Zipf sampler
//! adds a handful of `ln`/`exp` calls), so generators keep up with a simulator running
//! millions of requests per second.

use std::fmt;
use std::iter::FusedIterator;
use std::str::FromStr;

use rand::distributions::{Distribution, Uniform};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use controller::request::{Op, Request};

/// Sector size (a power of two): request sizes must be a multiple of it.
const SECTOR_BYTES: u64 = 512;

/// Which access pattern a [`Workload`] generates.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WorkloadKind {
    /// Writes at consecutive offsets from 0, wrapping around at the footprint.
    SeqWrite,
    /// Reads at consecutive offsets from 0, wrapping around at the footprint.
    SeqRead,
    /// Writes at uniformly random slots.
    RandWrite,
    /// Reads at uniformly random slots.
    RandRead,
    /// Zipf-distributed slots (popular slots scattered over the footprint); reads or writes
    /// by [`WorkloadConfig::read_fraction`].
    Zipf,
    /// A hot part of the footprint that gets most accesses, and a cold rest; reads or
    /// writes by [`WorkloadConfig::read_fraction`].
    #[serde(rename = "hotcold")]
    HotCold,
}

impl WorkloadKind {
    /// Every kind, in the order they are documented.
    pub const ALL: [WorkloadKind; 6] = [
        WorkloadKind::SeqWrite,
        WorkloadKind::SeqRead,
        WorkloadKind::RandWrite,
        WorkloadKind::RandRead,
        WorkloadKind::Zipf,
        WorkloadKind::HotCold,
    ];

    /// The name used by [`FromStr`], [`fmt::Display`] and serde.
    pub fn name(self) -> &'static str {
        match self {
            WorkloadKind::SeqWrite => "seq-write",
            WorkloadKind::SeqRead => "seq-read",
            WorkloadKind::RandWrite => "rand-write",
            WorkloadKind::RandRead => "rand-read",
            WorkloadKind::Zipf => "zipf",
            WorkloadKind::HotCold => "hotcold",
        }
    }

    /// Whether the kind mixes reads and writes by [`WorkloadConfig::read_fraction`].
    pub fn uses_read_fraction(self) -> bool {
        matches!(self, WorkloadKind::Zipf | WorkloadKind::HotCold)
    }
}

impl fmt::Display for WorkloadKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for WorkloadKind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        WorkloadKind::ALL
            .into_iter()
            .find(|k| k.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| {
                let names: Vec<&str> = WorkloadKind::ALL.iter().map(|k| k.name()).collect();
                format!("unknown workload \"{s}\" (valid: {})", names.join(", "))
            })
    }
}

/// Parameters of a built-in workload. Missing fields take their [`Default`] values when
/// deserialized.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "snake_case")]
pub struct WorkloadConfig {
    /// Access pattern. Default: `rand-write`.
    pub kind: WorkloadKind,
    /// Size of every request, and the alignment of every offset; a positive multiple of
    /// 512. Default: 4096.
    pub request_bytes: u64,
    /// Logical space the workload touches, from offset 0 (rounded down to a multiple of
    /// `request_bytes`). The caller usually derives it from a target utilisation of the
    /// device's logical capacity. Default: 1 GiB.
    pub footprint_bytes: u64,
    /// Number of requests to generate. Default: 100 000.
    pub requests: u64,
    /// For `zipf` and `hotcold`: probability that a request is a read (else a write).
    /// Default: 0.0.
    pub read_fraction: f64,
    /// For `zipf`: the exponent θ; slot of popularity rank `k` is drawn with probability
    /// proportional to `1 / k^θ`. Finite and > 0. Default: 0.99.
    pub zipf_theta: f64,
    /// For `hotcold`: share of the footprint that is hot (the lowest slots). Default: 0.1.
    pub hot_fraction: f64,
    /// For `hotcold`: share of accesses that go to the hot part. Default: 0.9.
    pub hot_access_fraction: f64,
    /// Seed of the random number generator. Default: 0.
    pub seed: u64,
}

impl Default for WorkloadConfig {
    fn default() -> Self {
        WorkloadConfig {
            kind: WorkloadKind::RandWrite,
            request_bytes: 4096,
            footprint_bytes: 1 << 30,
            requests: 100_000,
            read_fraction: 0.0,
            zipf_theta: 0.99,
            hot_fraction: 0.1,
            hot_access_fraction: 0.9,
            seed: 0,
        }
    }
}

impl WorkloadConfig {
    /// Number of `request_bytes` slots in the footprint (0 if `request_bytes` is 0).
    pub fn slots(&self) -> u64 {
        self.footprint_bytes
            .checked_div(self.request_bytes)
            .unwrap_or(0)
    }

    /// Checks every field; the error names the field that is wrong and its value.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.request_bytes == 0 || self.request_bytes & (SECTOR_BYTES - 1) != 0 {
            return Err(ConfigError::RequestBytes {
                bytes: self.request_bytes,
            });
        }
        if self.footprint_bytes < self.request_bytes {
            return Err(ConfigError::Footprint {
                footprint_bytes: self.footprint_bytes,
                request_bytes: self.request_bytes,
            });
        }
        for (field, value) in [
            ("read_fraction", self.read_fraction),
            ("hot_fraction", self.hot_fraction),
            ("hot_access_fraction", self.hot_access_fraction),
        ] {
            if !(0.0..=1.0).contains(&value) {
                return Err(ConfigError::Fraction { field, value });
            }
        }
        if !(self.zipf_theta.is_finite() && self.zipf_theta > 0.0) {
            return Err(ConfigError::ZipfTheta {
                theta: self.zipf_theta,
            });
        }
        Ok(())
    }
}

/// Why [`WorkloadConfig::validate`] refused a configuration.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ConfigError {
    /// `request_bytes` is 0 or not a multiple of the 512-byte sector.
    #[error("request_bytes must be a positive multiple of {SECTOR_BYTES}, got {bytes}")]
    RequestBytes {
        /// The value.
        bytes: u64,
    },
    /// `footprint_bytes` is smaller than one request.
    #[error("footprint_bytes ({footprint_bytes}) must hold at least one request of request_bytes ({request_bytes})")]
    Footprint {
        /// The footprint in bytes.
        footprint_bytes: u64,
        /// The request size in bytes.
        request_bytes: u64,
    },
    /// A share (`read_fraction`, `hot_fraction`, `hot_access_fraction`) outside 0..=1.
    #[error("{field} must be between 0 and 1, got {value}")]
    Fraction {
        /// The field.
        field: &'static str,
        /// Its value.
        value: f64,
    },
    /// `zipf_theta` is not a finite number above 0.
    #[error("zipf_theta must be a finite number greater than 0, got {theta}")]
    ZipfTheta {
        /// The value.
        theta: f64,
    },
}

/// How slots are chosen.
#[derive(Clone, Debug)]
enum Pattern {
    /// Next slot of a sequential sweep.
    Seq {
        next: u64,
    },
    Uniform(Uniform<u64>),
    Zipf {
        zipf: ZipfSampler,
        scatter: Scatter,
    },
    HotCold {
        hot: Option<Uniform<u64>>,
        cold: Option<Uniform<u64>>,
        hot_access: f64,
    },
}

/// How the operation is chosen.
#[derive(Clone, Copy, Debug)]
enum OpMix {
    Always(Op),
    /// Read with this probability, else write.
    Reads(f64),
}

/// A deterministic request generator; see the [module documentation](self).
#[derive(Clone, Debug)]
pub struct Workload {
    rng: ChaCha8Rng,
    pattern: Pattern,
    ops: OpMix,
    slots: u64,
    request_bytes: u64,
    remaining: u64,
}

impl Workload {
    /// Builds the generator for `config`, after [`WorkloadConfig::validate`].
    pub fn new(config: &WorkloadConfig) -> Result<Workload, ConfigError> {
        config.validate()?;
        let n = config.slots();
        let pattern = match config.kind {
            WorkloadKind::SeqWrite | WorkloadKind::SeqRead => Pattern::Seq { next: 0 },
            WorkloadKind::RandWrite | WorkloadKind::RandRead => {
                Pattern::Uniform(Uniform::new(0, n))
            }
            WorkloadKind::Zipf => Pattern::Zipf {
                zipf: ZipfSampler::new(n, config.zipf_theta),
                scatter: Scatter::new(n),
            },
            WorkloadKind::HotCold => {
                let hot = hot_slots(n, config.hot_fraction);
                Pattern::HotCold {
                    hot: (hot > 0).then(|| Uniform::new(0, hot)),
                    cold: (hot < n).then(|| Uniform::new(hot, n)),
                    hot_access: config.hot_access_fraction,
                }
            }
        };
        let ops = match config.kind {
            WorkloadKind::SeqWrite | WorkloadKind::RandWrite => OpMix::Always(Op::Write),
            WorkloadKind::SeqRead | WorkloadKind::RandRead => OpMix::Always(Op::Read),
            WorkloadKind::Zipf | WorkloadKind::HotCold => match config.read_fraction {
                f if f <= 0.0 => OpMix::Always(Op::Write),
                f if f >= 1.0 => OpMix::Always(Op::Read),
                f => OpMix::Reads(f),
            },
        };
        Ok(Workload {
            rng: ChaCha8Rng::seed_from_u64(config.seed),
            pattern,
            ops,
            slots: n,
            request_bytes: config.request_bytes,
            remaining: config.requests,
        })
    }

    /// Number of slots (`request_bytes` units) the workload addresses.
    pub fn slots(&self) -> u64 {
        self.slots
    }

    /// Size of every request.
    pub fn request_bytes(&self) -> u64 {
        self.request_bytes
    }

    /// Requests still to be generated.
    pub fn remaining(&self) -> u64 {
        self.remaining
    }

    fn next_slot(&mut self) -> u64 {
        match &mut self.pattern {
            Pattern::Seq { next } => {
                let slot = *next;
                *next = if slot + 1 == self.slots { 0 } else { slot + 1 };
                slot
            }
            Pattern::Uniform(u) => u.sample(&mut self.rng),
            Pattern::Zipf { zipf, scatter } => scatter.map(zipf.sample(&mut self.rng) - 1),
            Pattern::HotCold {
                hot,
                cold,
                hot_access,
            } => {
                let part = match (hot.as_ref(), cold.as_ref()) {
                    (Some(h), Some(c)) => {
                        if self.rng.gen::<f64>() < *hot_access {
                            h
                        } else {
                            c
                        }
                    }
                    (Some(p), None) | (None, Some(p)) => p,
                    (None, None) => unreachable!("validate() guarantees at least one slot"),
                };
                part.sample(&mut self.rng)
            }
        }
    }
}

impl Iterator for Workload {
    type Item = Request;

    #[inline]
    fn next(&mut self) -> Option<Request> {
        if self.remaining == 0 {
            return None;
        }
        self.remaining -= 1;
        let slot = self.next_slot();
        let op = match self.ops {
            OpMix::Always(op) => op,
            OpMix::Reads(p) => {
                if self.rng.gen::<f64>() < p {
                    Op::Read
                } else {
                    Op::Write
                }
            }
        };
        Some(Request::new(
            op,
            slot * self.request_bytes,
            self.request_bytes,
        ))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        match usize::try_from(self.remaining) {
            Ok(n) => (n, Some(n)),
            Err(_) => (usize::MAX, None),
        }
    }
}

impl FusedIterator for Workload {}

impl ExactSizeIterator for Workload {}

/// Sequential writes covering the footprint once (rounded down to whole requests, like
/// [`Workload`]), to fill a device before measuring. Yields nothing if `request_bytes` is 0.
pub fn prefill(footprint_bytes: u64, request_bytes: u64) -> impl Iterator<Item = Request> {
    let n = footprint_bytes.checked_div(request_bytes).unwrap_or(0);
    (0..n).map(move |i| Request::new(Op::Write, i * request_bytes, request_bytes))
}

/// Number of hot slots for `hotcold`: `hot_fraction` of `n`, rounded, but at least one if
/// `hot_fraction > 0` and at most `n - 1` if `hot_fraction < 1` (when `n >= 2`), so that a
/// part that was asked for is never empty.
fn hot_slots(n: u64, hot_fraction: f64) -> u64 {
    let mut hot = ((n as f64) * hot_fraction).round() as u64;
    if hot_fraction > 0.0 {
        hot = hot.max(1);
    }
    if hot_fraction < 1.0 && n >= 2 {
        hot = hot.min(n - 1);
    }
    hot.min(n)
}

/// A bijection on `[0, n)` that spreads consecutive ranks over the space:
/// `rank * mult mod n`, with `mult` the integer nearest `n * (√5 - 1) / 2` that is coprime
/// to `n` (Fibonacci hashing: successive multiples of the golden ratio are as evenly spread
/// as possible), so the most popular slots are far apart.
#[derive(Clone, Copy, Debug)]
struct Scatter {
    n: u64,
    mult: u64,
}

impl Scatter {
    fn new(n: u64) -> Scatter {
        assert!(n > 0);
        let mut mult = (((n as f64) * 0.618_033_988_749_894_8) as u64).clamp(1, n);
        while gcd(mult, n) != 1 {
            mult += 1;
        }
        Scatter {
            n,
            mult: mult % n.max(1),
        }
    }

    #[inline]
    fn map(&self, rank: u64) -> u64 {
        if self.n <= 1 << 32 {
            // rank < n and mult < n, so the product fits in 64 bits.
            (rank * self.mult) % self.n
        } else {
            ((u128::from(rank) * u128::from(self.mult)) % u128::from(self.n)) as u64
        }
    }
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// Zipf sampler over ranks `1..=n`, `P(k) ∝ k^-θ`, by rejection-inversion (W. Hörmann and
/// G. Derflinger, "Rejection-inversion to generate variates from monotone discrete
/// distributions", ACM TOMACS 6(3), 1996), following the formulation of Apache Commons
/// RNG's `RejectionInversionZipfSampler`. It needs O(1) memory and set-up, whatever `n`,
/// and accepts more than 90% of candidates for any θ, so a sample costs a few `ln`/`exp`.
/// Works for every finite θ > 0, including θ = 1.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ZipfSampler {
    n: u64,
    theta: f64,
    h_integral_x1: f64,
    h_integral_n: f64,
    s: f64,
}

impl ZipfSampler {
    pub(crate) fn new(n: u64, theta: f64) -> ZipfSampler {
        assert!(n > 0 && theta.is_finite() && theta > 0.0);
        let h_integral_x1 = h_integral(1.5, theta) - 1.0;
        let h_integral_n = h_integral(n as f64 + 0.5, theta);
        let s = 2.0 - h_integral_inverse(h_integral(2.5, theta) - h(2.0, theta), theta);
        ZipfSampler {
            n,
            theta,
            h_integral_x1,
            h_integral_n,
            s,
        }
    }

    /// A rank in `1..=n`; rank 1 is the most popular.
    #[inline]
    pub(crate) fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> u64 {
        loop {
            // u is uniform in (h_integral_x1, h_integral_n].
            let u = self.h_integral_n + rng.gen::<f64>() * (self.h_integral_x1 - self.h_integral_n);
            let x = h_integral_inverse(u, self.theta);
            // x > 0.5 in exact arithmetic; clamp against rounding.
            let k = ((x + 0.5) as u64).clamp(1, self.n);
            let kf = k as f64;
            if kf - x <= self.s || u >= h_integral(kf + 0.5, self.theta) - h(kf, self.theta) {
                return k;
            }
        }
    }
}

/// `h(x) = x^-θ`.
#[inline]
fn h(x: f64, theta: f64) -> f64 {
    (-theta * x.ln()).exp()
}

/// `H(x) = (x^(1-θ) - 1) / (1 - θ)` (`ln x` for θ = 1), an antiderivative of `h`.
#[inline]
fn h_integral(x: f64, theta: f64) -> f64 {
    let log_x = x.ln();
    helper2((1.0 - theta) * log_x) * log_x
}

/// The inverse of [`h_integral`].
#[inline]
fn h_integral_inverse(x: f64, theta: f64) -> f64 {
    let t = (x * (1.0 - theta)).max(-1.0);
    (helper1(t) * x).exp()
}

/// `ln(1 + x) / x`, accurate near 0.
#[inline]
fn helper1(x: f64) -> f64 {
    if x.abs() > 1e-8 {
        x.ln_1p() / x
    } else {
        1.0 - x * (0.5 - x * (1.0 / 3.0 - 0.25 * x))
    }
}

/// `(e^x - 1) / x`, accurate near 0.
#[inline]
fn helper2(x: f64) -> f64 {
    if x.abs() > 1e-8 {
        x.exp_m1() / x
    } else {
        1.0 + x * 0.5 * (1.0 + x * (1.0 / 3.0) * (1.0 + 0.25 * x))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RB: u64 = 4096;

    fn config(kind: WorkloadKind, slots: u64, requests: u64, seed: u64) -> WorkloadConfig {
        WorkloadConfig {
            kind,
            request_bytes: RB,
            footprint_bytes: slots * RB,
            requests,
            seed,
            ..WorkloadConfig::default()
        }
    }

    fn slots_of(cfg: &WorkloadConfig) -> Vec<u64> {
        Workload::new(cfg)
            .unwrap()
            .map(|r| r.offset_bytes / cfg.request_bytes)
            .collect()
    }

    #[test]
    fn kind_names_round_trip() {
        for kind in WorkloadKind::ALL {
            assert_eq!(kind.to_string().parse::<WorkloadKind>(), Ok(kind));
            let json = serde_json::to_string(&kind).unwrap();
            assert_eq!(json, format!("\"{kind}\""));
            assert_eq!(serde_json::from_str::<WorkloadKind>(&json).unwrap(), kind);
        }
        let names: Vec<String> = WorkloadKind::ALL.iter().map(|k| k.to_string()).collect();
        assert_eq!(
            names,
            [
                "seq-write",
                "seq-read",
                "rand-write",
                "rand-read",
                "zipf",
                "hotcold"
            ]
        );
        let err = "random".parse::<WorkloadKind>().unwrap_err();
        assert!(err.contains("\"random\""), "{err}");
        assert!(
            err.contains("seq-write, seq-read, rand-write, rand-read, zipf, hotcold"),
            "{err}"
        );
    }

    #[test]
    fn config_serde_and_defaults() {
        let cfg: WorkloadConfig =
            serde_json::from_str(r#"{"kind": "hotcold", "footprint_bytes": 8192, "seed": 7}"#)
                .unwrap();
        assert_eq!(cfg.kind, WorkloadKind::HotCold);
        assert_eq!(cfg.footprint_bytes, 8192);
        assert_eq!(cfg.seed, 7);
        assert_eq!(cfg.request_bytes, 4096);
        assert_eq!(cfg.requests, 100_000);
        assert_eq!(cfg.zipf_theta, 0.99);
        let back: WorkloadConfig =
            serde_json::from_str(&serde_json::to_string(&cfg).unwrap()).unwrap();
        assert_eq!(back, cfg);
        assert!(serde_json::from_str::<WorkloadConfig>(r#"{"request_size": 4096}"#).is_err());
        assert_eq!(WorkloadConfig::default().validate(), Ok(()));
    }

    #[test]
    fn validation_messages() {
        let ok = WorkloadConfig::default();
        let check = |cfg: WorkloadConfig, needle: &str| {
            let err = cfg.validate().unwrap_err().to_string();
            assert!(err.contains(needle), "{err:?} should contain {needle:?}");
            assert!(Workload::new(&cfg).is_err());
        };
        check(
            WorkloadConfig {
                request_bytes: 0,
                ..ok.clone()
            },
            "request_bytes must be a positive multiple of 512",
        );
        check(
            WorkloadConfig {
                request_bytes: 1000,
                ..ok.clone()
            },
            "got 1000",
        );
        check(
            WorkloadConfig {
                footprint_bytes: 2048,
                ..ok.clone()
            },
            "footprint_bytes (2048)",
        );
        check(
            WorkloadConfig {
                read_fraction: 1.5,
                ..ok.clone()
            },
            "read_fraction must be between 0 and 1",
        );
        check(
            WorkloadConfig {
                hot_fraction: -0.1,
                ..ok.clone()
            },
            "hot_fraction",
        );
        check(
            WorkloadConfig {
                hot_access_fraction: f64::NAN,
                ..ok.clone()
            },
            "hot_access_fraction",
        );
        check(
            WorkloadConfig {
                zipf_theta: 0.0,
                ..ok.clone()
            },
            "zipf_theta",
        );
        check(
            WorkloadConfig {
                zipf_theta: f64::INFINITY,
                ..ok.clone()
            },
            "zipf_theta",
        );
        assert_eq!(
            WorkloadConfig {
                zipf_theta: 1.0,
                ..ok.clone()
            }
            .validate(),
            Ok(())
        );
        assert_eq!(
            WorkloadConfig {
                footprint_bytes: 4096,
                ..ok
            }
            .validate(),
            Ok(())
        );
    }

    #[test]
    fn deterministic_per_seed() {
        for kind in WorkloadKind::ALL {
            let mut cfg = config(kind, 10_000, 2_000, 42);
            cfg.read_fraction = 0.5;
            let a: Vec<Request> = Workload::new(&cfg).unwrap().collect();
            let b: Vec<Request> = Workload::new(&cfg).unwrap().collect();
            assert_eq!(a, b, "{kind}");
            assert_eq!(a.len(), 2_000);
            if !matches!(kind, WorkloadKind::SeqRead | WorkloadKind::SeqWrite) {
                cfg.seed = 43;
                let c: Vec<Request> = Workload::new(&cfg).unwrap().collect();
                assert_ne!(a, c, "{kind}");
            }
        }
    }

    #[test]
    fn bounds_alignment_and_ops() {
        for kind in WorkloadKind::ALL {
            for request_bytes in [512, 4096, 16384] {
                // A footprint that is not a whole number of requests: rounded down.
                let slots = 1_000;
                let cfg = WorkloadConfig {
                    kind,
                    request_bytes,
                    footprint_bytes: slots * request_bytes + 511,
                    requests: 20_000,
                    read_fraction: 0.3,
                    seed: 1,
                    ..WorkloadConfig::default()
                };
                let w = Workload::new(&cfg).unwrap();
                assert_eq!(w.slots(), slots);
                assert_eq!(w.len(), 20_000);
                let mut reads = 0;
                let mut max_slot = 0;
                for r in w {
                    assert_eq!(r.len_bytes, request_bytes);
                    assert_eq!(r.offset_bytes % request_bytes, 0);
                    assert!(
                        r.offset_bytes + r.len_bytes <= slots * request_bytes,
                        "{kind} {r:?}"
                    );
                    assert_eq!(r.arrival_ns, None);
                    assert_eq!(r.priority, 0);
                    max_slot = max_slot.max(r.offset_bytes / request_bytes);
                    match r.op {
                        Op::Read => reads += 1,
                        Op::Write => {}
                        op => panic!("{kind} generated {op:?}"),
                    }
                }
                assert!(max_slot > slots * 9 / 10, "{kind}: highest slot {max_slot}");
                match kind {
                    WorkloadKind::SeqWrite | WorkloadKind::RandWrite => assert_eq!(reads, 0),
                    WorkloadKind::SeqRead | WorkloadKind::RandRead => assert_eq!(reads, 20_000),
                    WorkloadKind::Zipf | WorkloadKind::HotCold => {
                        assert!(
                            (5_600..=6_400).contains(&reads),
                            "{kind}: {reads} reads of 20000"
                        )
                    }
                }
            }
        }
    }

    #[test]
    fn one_slot_footprint() {
        for kind in WorkloadKind::ALL {
            let cfg = config(kind, 1, 100, 3);
            assert!(slots_of(&cfg).iter().all(|&s| s == 0), "{kind}");
        }
    }

    #[test]
    fn sequential_wraps() {
        let cfg = config(WorkloadKind::SeqWrite, 4, 10, 0);
        assert_eq!(slots_of(&cfg), [0, 1, 2, 3, 0, 1, 2, 3, 0, 1]);
        let reqs: Vec<Request> = Workload::new(&config(WorkloadKind::SeqRead, 3, 4, 0))
            .unwrap()
            .collect();
        assert_eq!(
            reqs,
            [0, 1, 2, 0]
                .map(|s| Request::new(Op::Read, s * RB, RB))
                .to_vec()
        );
    }

    #[test]
    fn prefill_covers_footprint_once() {
        let reqs: Vec<Request> = prefill(3 * RB + 100, RB).collect();
        assert_eq!(
            reqs,
            [0, 1, 2]
                .map(|s| Request::new(Op::Write, s * RB, RB))
                .to_vec()
        );
        assert_eq!(prefill(1 << 30, 4096).count(), 1 << 18);
        assert_eq!(prefill(100, 4096).count(), 0);
        assert_eq!(prefill(100, 0).count(), 0);
    }

    #[test]
    fn uniform_mean_near_middle() {
        for kind in [WorkloadKind::RandWrite, WorkloadKind::RandRead] {
            let n = 1_000_000;
            let slots = slots_of(&config(kind, n, 100_000, 9));
            let mean = slots.iter().sum::<u64>() as f64 / slots.len() as f64;
            let middle = (n - 1) as f64 / 2.0;
            assert!(
                (mean - middle).abs() < n as f64 * 0.01,
                "{kind}: mean slot {mean}"
            );
            let low = slots.iter().filter(|&&s| s < n / 2).count();
            assert!(
                (48_500..=51_500).contains(&low),
                "{kind}: {low} in the lower half"
            );
        }
    }

    #[test]
    fn hotcold_split() {
        let n = 1_000;
        let mut cfg = config(WorkloadKind::HotCold, n, 100_000, 5);
        cfg.read_fraction = 0.25;
        let w = Workload::new(&cfg).unwrap();
        let mut hot = 0;
        let mut reads = 0;
        let mut seen = vec![false; n as usize];
        for r in w {
            let slot = r.offset_bytes / RB;
            seen[slot as usize] = true;
            if slot < n / 10 {
                hot += 1;
            }
            if r.op == Op::Read {
                reads += 1;
            }
        }
        let share = hot as f64 / 100_000.0;
        assert!((0.88..=0.92).contains(&share), "hot share {share}");
        let read_share = reads as f64 / 100_000.0;
        assert!(
            (0.24..=0.26).contains(&read_share),
            "read share {read_share}"
        );
        // Every slot, hot or cold, is reachable.
        assert!(seen.iter().all(|&s| s));
    }

    #[test]
    fn hotcold_degenerate_fractions() {
        let n = 100;
        let mut cfg = config(WorkloadKind::HotCold, n, 1_000, 5);
        cfg.hot_fraction = 0.0;
        assert!(slots_of(&cfg).iter().all(|&s| s < n));
        cfg.hot_fraction = 1.0;
        assert!(slots_of(&cfg).iter().all(|&s| s < n));
        cfg.hot_fraction = 0.001; // rounds to 0 slots but one is kept hot
        cfg.hot_access_fraction = 1.0;
        assert!(slots_of(&cfg).iter().all(|&s| s == 0));
        assert_eq!(hot_slots(10, 0.1), 1);
        assert_eq!(hot_slots(10, 0.99), 9);
        assert_eq!(hot_slots(1, 0.5), 1);
        assert_eq!(hot_slots(1, 0.0), 0);
    }

    #[test]
    fn zipf_skew() {
        let n: u64 = 10_000;
        let slots = slots_of(&config(WorkloadKind::Zipf, n, 200_000, 11));
        let mut counts = vec![0u64; n as usize];
        for &s in &slots {
            counts[s as usize] += 1;
        }
        // Rank 1 maps to slot 0 and is the most popular slot.
        let max = *counts.iter().max().unwrap();
        assert_eq!(counts[0], max);
        let mut sorted = counts.clone();
        sorted.sort_unstable_by(|a, b| b.cmp(a));
        let median = sorted[sorted.len() / 2].max(1);
        assert!(max > 100 * median, "top {max} vs median {median}");
        // For theta 0.99 the top 10% of slots get ~74% of accesses.
        let top: u64 = sorted[..(n / 10) as usize].iter().sum();
        let share = top as f64 / slots.len() as f64;
        assert!(share > 0.65, "top 10% share {share}");
        // The most popular slots are scattered, not adjacent.
        let mut by_count: Vec<usize> = (0..n as usize).collect();
        by_count.sort_by(|&a, &b| counts[b].cmp(&counts[a]));
        let top5 = &by_count[..5];
        for (i, &a) in top5.iter().enumerate() {
            for &b in &top5[i + 1..] {
                assert!(
                    a.abs_diff(b) > 100,
                    "popular slots {top5:?} are close together"
                );
            }
        }
    }

    /// The sampler matches the exact Zipf probabilities on a small space.
    #[test]
    fn zipf_sampler_matches_distribution() {
        for theta in [0.5, 0.99, 1.0, 1.5, 3.0] {
            let n = 20u64;
            let zipf = ZipfSampler::new(n, theta);
            let mut rng = ChaCha8Rng::seed_from_u64(1);
            let draws = 400_000;
            let mut counts = vec![0u64; n as usize + 1];
            for _ in 0..draws {
                let k = zipf.sample(&mut rng);
                assert!((1..=n).contains(&k));
                counts[k as usize] += 1;
            }
            let norm: f64 = (1..=n).map(|k| (k as f64).powf(-theta)).sum();
            for k in 1..=n {
                let p = (k as f64).powf(-theta) / norm;
                let observed = counts[k as usize] as f64 / draws as f64;
                let sigma = (p * (1.0 - p) / draws as f64).sqrt();
                assert!(
                    (observed - p).abs() < 5.0 * sigma + 1e-4,
                    "theta {theta} rank {k}: observed {observed}, expected {p}"
                );
            }
        }
    }

    #[test]
    fn zipf_large_space() {
        let n = 1u64 << 28;
        let zipf = ZipfSampler::new(n, 0.99);
        let scatter = Scatter::new(n);
        let mut rng = ChaCha8Rng::seed_from_u64(2);
        for _ in 0..10_000 {
            let k = zipf.sample(&mut rng);
            assert!((1..=n).contains(&k));
            assert!(scatter.map(k - 1) < n);
        }
        // Beyond 2^32 slots the 128-bit path is used.
        let big = Scatter::new((1 << 40) + 3);
        assert!(big.map((1 << 40) + 2) < (1 << 40) + 3);
    }

    #[test]
    fn scatter_is_a_bijection() {
        for n in [1u64, 2, 3, 10, 64, 97, 1000, 4096] {
            let s = Scatter::new(n);
            let mut seen = vec![false; n as usize];
            for r in 0..n {
                let m = s.map(r);
                assert!(!seen[m as usize], "n {n}: {m} hit twice");
                seen[m as usize] = true;
            }
        }
    }

    /// Throughput check: `cargo test -p lab --release -- --ignored --nocapture throughput`.
    #[test]
    #[ignore]
    fn throughput() {
        for kind in WorkloadKind::ALL {
            let mut cfg = config(kind, 1 << 28, 10_000_000, 1);
            cfg.read_fraction = 0.5;
            let start = std::time::Instant::now();
            let sum = Workload::new(&cfg)
                .unwrap()
                .fold(0u64, |a, r| a ^ r.offset_bytes);
            let secs = start.elapsed().as_secs_f64();
            println!("{kind}: {:.1} M requests/s ({sum})", 10.0 / secs);
        }
    }
}
