//! What per-object compression (issue 16 item 6) saves and costs. A measurement, not a check:
//! `cargo test -p osd --test compress_cost -- --ignored --nocapture`, figures in
//! docs/PERFORMANCE.md "Per-object compression".
//!
//! 1. The chunk codecs alone (`osd::compress`, 64 KiB chunks as the store cuts them) on a text
//!    corpus (this repository's sources and docs) and on random bytes: ratio and speed.
//! 2. The object store with real bytes on an in-memory `nandsim-128m` (2 KiB units, chunks of
//!    16 units = 32 KiB): 1 MiB sequential writes, 4 KiB random writes and whole-object reads
//!    into 8 objects of 4 MiB, every object `none`, `lz4` or `zstd`, text or random content;
//!    host wall time (the codec is host CPU), virtual time (the device) and flash used.

use std::path::Path;
use std::time::Instant;

use flash::{preset, Nand};
use fml::FmlConfig;
use osd::compress::{compress_chunk, decompress_chunk, Codec, Compression};
use osd::{Attr, AttrValue, FlushScope, ObjectId, ObjectStore, Oid, Osd, OsdConfig, PartitionId};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const P: u64 = 0x10000;
const OBJECTS: u64 = 8;
const OBJECT_BYTES: usize = 4 << 20;

/// Every .rs, .md and .toml file of the repository, concatenated (sorted by path).
fn corpus() -> Vec<u8> {
    fn walk(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
        let Ok(rd) = std::fs::read_dir(dir) else {
            return;
        };
        for e in rd.flatten() {
            let p = e.path();
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if p.is_dir() {
                if !name.starts_with('.') && name != "target" && name != "out" {
                    walk(&p, out);
                }
            } else if name.ends_with(".rs") || name.ends_with(".md") || name.ends_with(".toml") {
                out.push(p);
            }
        }
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut files = Vec::new();
    walk(&root, &mut files);
    files.sort();
    let mut v = Vec::new();
    for f in files {
        v.extend(std::fs::read(f).unwrap_or_default());
    }
    v
}

fn random(n: usize) -> Vec<u8> {
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    (0..n).map(|_| rng.gen()).collect()
}

fn codecs(name: &str, data: &[u8]) {
    const CHUNK: usize = 64 << 10;
    const UNIT: usize = 4096;
    let chunks: Vec<&[u8]> = data.chunks_exact(CHUNK).collect();
    let mb = (chunks.len() * CHUNK) as f64 / 1e6;
    for codec in [Codec::Lz4, Codec::Zstd] {
        let t = Instant::now();
        let stored: Vec<Option<Vec<u8>>> = chunks
            .iter()
            .map(|c| compress_chunk(codec, c, UNIT))
            .collect();
        let ct = t.elapsed().as_secs_f64();
        let t = Instant::now();
        for (s, c) in stored.iter().zip(&chunks) {
            if let Some(s) = s {
                assert_eq!(&decompress_chunk(s, UNIT).unwrap(), c);
            }
        }
        let dt = t.elapsed().as_secs_f64();
        let on_flash: usize = stored
            .iter()
            .map(|s| s.as_ref().map_or(CHUNK, Vec::len))
            .sum();
        let raw = stored.iter().filter(|s| s.is_none()).count();
        // Raw chunks are never decompressed: speed over the compressed ones only.
        let compressed_mb = ((chunks.len() - raw) * CHUNK) as f64 / 1e6;
        let decompress = if raw == chunks.len() {
            "none to decompress".to_string()
        } else {
            format!("decompress {:.0} MB/s", compressed_mb / dt)
        };
        println!(
            "codec {name:<6} {codec:?}: {:.1} MB in 64 KiB chunks -> x{:.2} on flash (4 KiB units), \
             {raw} of {} chunks raw; compress {:.0} MB/s, {decompress}",
            mb,
            (chunks.len() * CHUNK) as f64 / on_flash as f64,
            chunks.len(),
            mb / ct,
        );
    }
}

fn store_run(compression: Compression, content: &str, data: &[u8]) {
    let dev = preset("nandsim-128m").unwrap();
    let cfg = OsdConfig {
        fml: FmlConfig::for_blocks(dev.gang.superblocks(&dev.geometry)),
        ..OsdConfig::default()
    };
    let mut s = ObjectStore::format(Nand::in_memory(dev).unwrap(), cfg).unwrap();
    s.create_partition(Some(PartitionId(P))).unwrap();
    for k in 0..OBJECTS {
        s.create(PartitionId(P), Some(ObjectId(P + 1 + k))).unwrap();
        s.set_attr(
            Oid::new(P, P + 1 + k),
            Attr::Compression,
            AttrValue::U64(compression.code()),
        )
        .unwrap();
    }
    let total = OBJECTS * OBJECT_BYTES as u64;
    let label = format!("{:<4} {content:<6}", compression.name());
    let phase =
        |name: &str, s: &mut ObjectStore<Nand>, f: &mut dyn FnMut(&mut ObjectStore<Nand>)| {
            let v0 = s.now();
            let t = Instant::now();
            f(s);
            let wall = t.elapsed().as_secs_f64();
            let virt = (s.now() - v0) as f64 / 1e9;
            let mib = total as f64 / (1 << 20) as f64;
            let used: u64 = (0..OBJECTS)
                .map(
                    |k| match s.get_attr(Oid::new(P, P + 1 + k), Attr::UsedCapacity) {
                        Ok(AttrValue::U64(u)) => u,
                        _ => 0,
                    },
                )
                .sum();
            println!(
                "store {label} {name}: wall {:.0} ms = {:.0} MiB/s; virtual {:.3} s = {:.1} MiB/s; \
                 flash used x{:.2}",
                wall * 1e3,
                mib / wall,
                virt,
                mib / virt,
                total as f64 / used.max(1) as f64
            );
        };
    phase("1 MiB sequential writes", &mut s, &mut |s| {
        for k in 0..OBJECTS {
            for m in 0..OBJECT_BYTES >> 20 {
                let at = (k as usize * OBJECT_BYTES + (m << 20)) % (data.len() - (1 << 20));
                s.write(
                    Oid::new(P, P + 1 + k),
                    (m << 20) as u64,
                    &data[at..at + (1 << 20)],
                )
                .unwrap();
            }
        }
        s.flush(FlushScope::Device).unwrap();
    });
    let mut rng = ChaCha8Rng::seed_from_u64(8);
    phase("4 KiB random writes    ", &mut s, &mut |s| {
        for _ in 0..OBJECTS * (OBJECT_BYTES as u64 >> 12) {
            let k = rng.gen_range(0..OBJECTS);
            let at = rng.gen_range(0..OBJECT_BYTES as u64 >> 12) << 12;
            let src = rng.gen_range(0..(data.len() - 4096) as u64 >> 12) << 12;
            s.write(
                Oid::new(P, P + 1 + k),
                at,
                &data[src as usize..src as usize + 4096],
            )
            .unwrap();
        }
        s.flush(FlushScope::Device).unwrap();
    });
    phase("whole-object reads     ", &mut s, &mut |s| {
        let mut buf = vec![0u8; OBJECT_BYTES];
        for k in 0..OBJECTS {
            s.read(Oid::new(P, P + 1 + k), 0, &mut buf).unwrap();
        }
    });
}

#[test]
#[ignore = "a measurement for docs/PERFORMANCE.md"]
fn compression_cost() {
    let text = corpus();
    let rand = random(32 << 20);
    println!(
        "corpus: {} bytes of the repository's .rs/.md/.toml",
        text.len()
    );
    codecs("text", &text);
    codecs("random", &rand);
    for c in [Compression::None, Compression::Lz4, Compression::Zstd] {
        store_run(c, "text", &text);
        store_run(c, "random", &rand);
    }
}
