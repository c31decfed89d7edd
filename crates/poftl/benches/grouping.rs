//! CPU time of semantic-aware grouping (POFTL-14 III-B) per flush of the data buffer: the greedy
//! merge over the `L` pages' hotness, and the regions' k-means update with the closest-region
//! lookup of every group. Run: `cargo bench -p poftl --bench grouping`; numbers and machine in
//! docs/PERFORMANCE.md.
//!
//! The hotness is a deterministic stand-in for a buffer of mixed files: runs of 1 to 32 pages
//! (a file's part of the write) with a per-run hotness spread over six orders of magnitude,
//! +-50% per page, and one page in five without history (0) — what `PoftlStore::place` sees.

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion};
use poftl::grouping::{self, Regions};

fn buffer(pages: usize, seed: u64) -> Vec<f64> {
    let mut x = seed;
    let mut next = move || {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (x >> 11) as f64 / (1u64 << 53) as f64
    };
    let mut h = Vec::with_capacity(pages);
    while h.len() < pages {
        let run = 1 + (next() * 32.0) as usize;
        let base = 10f64.powf(next() * 6.0 - 3.0);
        for _ in 0..run.min(pages - h.len()) {
            h.push(if next() < 0.2 {
                0.0
            } else {
                base * (0.5 + next())
            });
        }
    }
    // As the store does: normalized to the write's mean so that lambda is dimensionless.
    let m = grouping::mean(&h);
    h.iter().map(|v| v / m).collect()
}

fn bench(c: &mut Criterion) {
    let lambda = poftl::PoftlConfig::default().lambda;
    let mut g = c.benchmark_group("grouping");
    for pages in [64usize, 512, 4096] {
        let h = buffer(pages, 42);
        g.bench_with_input(BenchmarkId::new("greedy_merge", pages), &h, |b, h| {
            b.iter(|| grouping::group(black_box(h), lambda))
        });
        let groups = grouping::group(&h, lambda);
        g.bench_with_input(
            BenchmarkId::new("regions_update_and_assign", pages),
            &h,
            |b, h| {
                let mut r = Regions::new(4);
                // A full window of history first, as in a running store.
                for seed in 0..8 {
                    r.observe(buffer(512, seed));
                }
                b.iter(|| {
                    r.observe(h.iter().copied());
                    groups
                        .iter()
                        .map(|g| r.closest(grouping::mean(&h[g.clone()])))
                        .sum::<usize>()
                })
            },
        );
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
