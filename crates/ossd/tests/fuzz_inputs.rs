//! The fuzz targets' functions (`ossd::fuzz`, run by `fuzz/` under cargo-fuzz) over seeded
//! random inputs on stable: random bytes, and mutations of valid inputs so the parsers get past
//! their first checks. Any panic fails the test and names the input's seed.

use ossd::fuzz;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Runs `f` on `n` inputs from `make`, reporting the seed of an input that panics.
fn drive(name: &str, n: u64, make: impl Fn(&mut ChaCha8Rng) -> Vec<u8>, f: impl Fn(&[u8])) {
    for seed in 0..n {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let input = make(&mut rng);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&input)));
        assert!(
            r.is_ok(),
            "{name}: input of seed {seed} panicked: {:?}",
            String::from_utf8_lossy(&input)
        );
    }
}

fn random_bytes(rng: &mut ChaCha8Rng, max: usize) -> Vec<u8> {
    let len = rng.gen_range(0..max);
    (0..len).map(|_| rng.gen()).collect()
}

/// A valid input with a few bytes replaced, inserted or removed.
fn mutate(rng: &mut ChaCha8Rng, valid: &[u8]) -> Vec<u8> {
    const BYTES: &[u8] = b" =.,0123456789-\n\"[]x";
    let mut v = valid.to_vec();
    for _ in 0..rng.gen_range(1..6) {
        let at = rng.gen_range(0..=v.len());
        match rng.gen_range(0..3) {
            0 if at < v.len() => v[at] = rng.gen(),
            1 => v.insert(at, BYTES[rng.gen_range(0..BYTES.len())]),
            _ if at < v.len() => {
                v.remove(at);
            }
            _ => {}
        }
    }
    v
}

#[test]
fn images_from_arbitrary_bytes_never_panic() {
    drive(
        "open_image",
        400,
        |rng| {
            // Enough pages to reach records and headers.
            let pages: u16 = rng.gen_range(0..200);
            let mut v = pages.to_le_bytes().to_vec();
            v.extend(random_bytes(rng, pages as usize * 80 + 1));
            v
        },
        fuzz::open_image,
    );
}

const CONFIG: &str = "stack = \"ossd\"\ndevice = \"tiny\"\nutilisation = 0.5\nseed = 3\n\n[workload]\nkind = \"zipf\"\nrequests = 100\nzipf_theta = 0.9\n\n[fml]\nvictim_policy = \"fifo\"\nlow_watermark_blocks = 4\n\n[osd]\nbuffer_bytes = 0\n";

#[test]
fn config_files_never_panic() {
    drive(
        "parse_config",
        3000,
        |rng| {
            if rng.gen_bool(0.2) {
                random_bytes(rng, 200)
            } else {
                mutate(rng, CONFIG.as_bytes())
            }
        },
        fuzz::parse_config,
    );
}

const SETS: &str = "stack=ftl\ndevice=poftl\ndevice_config.geometry.blocks_per_plane=16\nworkload.request_bytes=4096\nftl.overprovision_percent=7\nplacement=split+atime\nfml.victim_policy=greedy\nload.threads=2";

#[test]
fn set_values_never_panic() {
    drive(
        "parse_sets",
        3000,
        |rng| {
            if rng.gen_bool(0.2) {
                random_bytes(rng, 120)
            } else {
                mutate(rng, SETS.as_bytes())
            }
        },
        fuzz::parse_sets,
    );
}

const TRACE: &str = "0 0 100 8 0\n1000 0 200 16 1\n128166372003061629,web,0,Read,1024,4096,10\nTimestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime\n  8,0    1        1     0.000000000  1234  Q   W 2048 + 8 [fio]\n";

#[test]
fn trace_files_never_panic() {
    drive(
        "parse_trace",
        2000,
        |rng| {
            if rng.gen_bool(0.2) {
                random_bytes(rng, 300)
            } else {
                mutate(rng, TRACE.as_bytes())
            }
        },
        fuzz::parse_trace,
    );
}
