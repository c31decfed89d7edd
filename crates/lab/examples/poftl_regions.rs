//! Diagnostic: runs append-hot on p-OFTL with each grouping policy and prints where GC's page
//! moves come from, per write region. Usage:
//! `cargo run --release -p lab --example poftl_regions -- SCALE DEGREE [key=value ...]`
//! (keys: append-hot fields, and poftl.lambda / poftl.write_regions).

use flash::Nand;
use lab::experiment::scale_device;
use poftl::fs::PoftlFs;
use poftl::{GroupingPolicy, PoftlConfig, PoftlStore};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use workload::files::appendhot::{self, AppendHot};
use workload::files::Meter;

fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("poftl_regions: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), String> {
    let args: Vec<String> = std::env::args().collect();
    let num = |i: usize, default: f64| -> Result<f64, String> {
        args.get(i).map_or(Ok(default), |s| {
            s.parse()
                .map_err(|_| format!("argument {i}: '{s}' is not a number"))
        })
    };
    let scale = num(1, 0.1)?;
    let degree = num(2, 1.0)? as u32;
    let mut base = PoftlConfig::default();
    let mut wt = toml::Value::try_from(AppendHot::default()).map_err(|e| e.to_string())?;
    for kv in args.iter().skip(3) {
        let (k, v) = kv
            .split_once('=')
            .ok_or_else(|| format!("'{kv}' is not key=value"))?;
        let val = format!("x = {v}")
            .parse::<toml::Table>()
            .map_err(|e| format!("{kv}: {e}"))?["x"]
            .clone();
        match k.strip_prefix("poftl.") {
            Some("lambda") => base.lambda = val.as_float().ok_or("poftl.lambda: a float")?,
            Some("write_regions") => {
                base.write_regions =
                    val.as_integer().ok_or("poftl.write_regions: an integer")? as u32
            }
            Some(f) => return Err(format!("unknown setting poftl.{f}")),
            None => {
                wt.as_table_mut()
                    .ok_or("not a table")?
                    .insert(k.into(), val);
            }
        }
    }
    let mut w: AppendHot = wt.try_into().map_err(|e: toml::de::Error| e.to_string())?;
    w.validate().map_err(|e| e.to_string())?;
    w.files = ((w.files as f64 * scale).round() as u64).max(1);
    w.total_bytes = ((w.total_bytes as f64 * scale).round() as u64).max(1);
    for g in [
        GroupingPolicy::SemanticAware,
        GroupingPolicy::Sfs,
        GroupingPolicy::None,
    ] {
        let cfg = PoftlConfig {
            parallelism_degree: degree,
            grouping: g,
            ..base
        };
        let dev = scale_device(
            flash::config::preset("poftl").map_err(|e| e.to_string())?,
            scale,
        );
        let dev = cfg.device(dev).map_err(|e| e.to_string())?;
        let cfg = PoftlConfig {
            fml: fml::FmlConfig::for_blocks(flash::gang::Layout::new(&dev).superblocks),
            ..cfg
        };
        let nand = Nand::in_memory(dev).map_err(|e| e.to_string())?;
        let store = PoftlStore::format(nand, cfg).map_err(|e| e.to_string())?;
        let mut fs = PoftlFs::new(store, "x");
        let phases = {
            let mut m = Meter::new(&mut fs, ChaCha8Rng::seed_from_u64(42));
            appendhot::run(&mut m, &w).map_err(|e| e.to_string())?
        };
        let st = fs.store();
        let f = st.fml().stats();
        // Per physical block erased, as the lab's pages_moved_per_erased_block.
        let erased = {
            use flash::Flash;
            st.fml().flash().stats().blocks_erased
        };
        let run = &phases[1].1;
        println!(
            "{g:?}: {:.2} s, blocks erased {}, pages moved {}, per erased block {:.2}, groups/flush {:.1}",
            run.seconds(),
            erased,
            f.gc_units_copied,
            f.gc_units_copied as f64 / erased.max(1) as f64,
            st.stats().groups as f64 / st.stats().flushes.max(1) as f64,
        );
        for (i, r) in st.region_stats().iter().enumerate() {
            println!(
                "   region {i}: written {:>9} victim super-blocks {:>6} moved {:>8} ({:.1}/victim)",
                r.pages_written,
                r.victims,
                r.pages_moved,
                r.pages_moved as f64 / r.victims.max(1) as f64
            );
        }
    }
    Ok(())
}
