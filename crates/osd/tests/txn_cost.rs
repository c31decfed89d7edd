//! What a transaction costs (issue 16 item 8): a COMMIT of 1, 10 and 100 one-unit writes spread
//! over four objects, against the same writes done plainly and then a device FLUSH (the plain
//! way to make them durable, without atomicity). Flash commands (programs, reads and erases the
//! store issued, GC and checkpoints included), units programmed by kind, and virtual time, each
//! the mean of 20 rounds on a warmed-up in-memory `nandsim-128m`. A measurement, not a check:
//! `cargo test -p osd --test txn_cost -- --ignored --nocapture` (counts and virtual time are
//! deterministic, the same in a debug build), figures in
//! docs/PERFORMANCE.md "Transactions".

use flash::fault::Faulty;
use flash::{preset, Nand};
use fml::FmlConfig;
use osd::{FlushScope, ObjectId, ObjectStore, Oid, Osd, OsdConfig, PartitionId, TxnOp};

const P: u64 = 0x10000;
const ROUNDS: u64 = 20;

type Store = ObjectStore<Faulty<Nand>>;

fn oid(o: u64) -> Oid {
    Oid::new(P, P + o)
}

/// The `n` writes of round `r`: whole units at spread offsets of four 1 MiB objects.
fn writes(n: u64, r: u64, unit: u64) -> Vec<(Oid, u64, Vec<u8>)> {
    (0..n)
        .map(|i| {
            let k = i + r * 131;
            let units = (1 << 20) / unit;
            (
                oid(k % 4),
                (k * 37 % units) * unit,
                vec![(k % 251) as u8; unit as usize],
            )
        })
        .collect()
}

#[derive(Default, Clone, Copy)]
struct Cost {
    commands: u64,
    data: u64,
    log: u64,
    meta: u64,
    ns: u64,
}

fn measure(s: &mut Store, n: u64, txn: bool) -> Cost {
    let unit = s.unit_bytes() as u64;
    let mut total = Cost::default();
    for r in 0..ROUNDS {
        let w = writes(n, r, unit);
        let (c0, st0, t0) = (s.device_mut().ops(), s.stats(), s.now());
        if txn {
            let t = s.begin_txn(PartitionId(P)).unwrap();
            for (oid, offset, data) in w {
                s.txn_op(t, TxnOp::Write { oid, offset, data }).unwrap();
            }
            s.commit_txn(t).unwrap();
        } else {
            for (oid, offset, data) in w {
                s.write(oid, offset, &data).unwrap();
            }
            s.flush(FlushScope::Device).unwrap();
        }
        let st = s.stats();
        total.commands += s.device_mut().ops() - c0;
        total.data += st.data_units_written - st0.data_units_written;
        total.log += st.txn_log_units_written - st0.txn_log_units_written;
        total.meta += (st.descriptor_pages_written + st.index_nodes_written + st.checkpoints)
            - (st0.descriptor_pages_written + st0.index_nodes_written + st0.checkpoints);
        total.ns += s.now() - t0;
    }
    total
}

#[test]
#[ignore = "a measurement for docs/PERFORMANCE.md"]
fn the_cost_of_a_commit() {
    let dev = preset("nandsim-128m").unwrap();
    let cfg = OsdConfig {
        fml: FmlConfig::for_blocks(dev.gang.superblocks(&dev.geometry)),
        ..OsdConfig::default()
    };
    let mut s = ObjectStore::format(Faulty::new(Nand::in_memory(dev).unwrap()), cfg).unwrap();
    s.create_partition(Some(PartitionId(P))).unwrap();
    let unit = s.unit_bytes();
    for o in 0..4 {
        s.create(PartitionId(P), Some(ObjectId(P + o))).unwrap();
        s.write(oid(o), 0, &vec![1u8; 1 << 20]).unwrap();
    }
    s.flush(FlushScope::Device).unwrap();
    // Warm up: GC and checkpoints in their steady state.
    measure(&mut s, 100, false);
    measure(&mut s, 100, true);
    println!("unit {unit} bytes; mean of {ROUNDS} rounds");
    println!("| writes | way | flash commands | data units | log units | metadata units | virtual time (us) |");
    println!("|---|---|---|---|---|---|---|");
    for n in [1u64, 10, 100] {
        for txn in [false, true] {
            let c = measure(&mut s, n, txn);
            let per = |x: u64| x as f64 / ROUNDS as f64;
            println!(
                "| {n} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.0} |",
                if txn { "transaction" } else { "plain + FLUSH" },
                per(c.commands),
                per(c.data),
                per(c.log),
                per(c.meta),
                per(c.ns) / 1e3
            );
        }
    }
}
