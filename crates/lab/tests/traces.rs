//! Both real traces replay on the page-mapping FTL and on DFTL with every request completed
//! and counted, and the per-run counters agree with the trace's own summary.

use lab::run::{run, RunConfig, StackKind};
use workload::trace::{summarize, TraceFormat, TraceReader};

fn trace(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../traces/mqsim")
        .join(name)
}

#[test]
fn both_traces_replay_on_ftl_and_dftl() {
    for name in ["tpcc-small.trace", "wsrch-small.trace"] {
        let path = trace(name);
        let summary = summarize(TraceReader::open(&path, TraceFormat::Mqsim).unwrap()).unwrap();
        for stack in [StackKind::Ftl, StackKind::Dftl] {
            let cfg = RunConfig {
                stack,
                device: "mqsim-default".into(),
                trace: Some(path.clone()),
                // Precondition only a little of the 512 GiB device, to keep the test quick.
                utilisation: 0.002,
                ..RunConfig::default()
            };
            let r = run(&cfg, &mut |_, _, _| {}).unwrap();
            assert_eq!(
                r.requests, summary.requests,
                "{name} on {stack:?}: requests"
            );
            assert_eq!(
                r.host_write_bytes, summary.bytes_written,
                "{name} on {stack:?}: bytes written"
            );
            assert_eq!(
                r.host_read_bytes, summary.bytes_read,
                "{name} on {stack:?}: bytes read"
            );
            assert_eq!(
                r.read_latency.count, summary.reads,
                "{name} on {stack:?}: reads"
            );
            assert_eq!(
                r.write_latency.count, summary.writes,
                "{name} on {stack:?}: writes"
            );
            assert!(r.virtual_seconds > 0.0);
            if stack == StackKind::Dftl && summary.reads > 0 {
                assert!(r.index_pages_read > 0, "{name}: DFTL read no mapping pages");
            }
        }
    }
}

#[test]
fn malformed_trace_names_file_and_line() {
    let dir = std::env::temp_dir().join(format!("ossd-trace-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("bad.trace");
    std::fs::write(&path, "0 0 8 8 0\n100 0 16 x 1\n").unwrap();
    let cfg = RunConfig {
        device: "tiny".into(),
        utilisation: 0.3,
        trace: Some(path.clone()),
        ..RunConfig::default()
    };
    let e = run(&cfg, &mut |_, _, _| {}).unwrap_err();
    let lab::run::RunError::Engine {
        phase: "replay",
        source,
    } = &e
    else {
        panic!("{e:?}")
    };
    assert!(
        matches!(
            &**source,
            lab::engine::EngineError::Source(lab::engine::Failure::Trace(
                workload::trace::TraceError::Parse {
                    line: 2,
                    reason: workload::trace::LineError::NotANumber {
                        field: "size_sectors",
                        ..
                    },
                    ..
                }
            ))
        ),
        "{e:?}"
    );
    let e = e.to_string();
    assert!(e.contains("bad.trace") && e.contains("line 2"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// MQSim's 256 MiB device-level write-back cache on `mqsim-default`: the 22 MiB the TPC-C
/// trace writes all fit, so every write completes when it arrives (virtual time), and the
/// prefill's flushes are done before the trace starts, so no read waits behind them.
#[test]
fn tpcc_writes_complete_on_arrival_with_the_write_back_cache() {
    let cfg = RunConfig {
        device: "mqsim-default".into(),
        trace: Some(trace("tpcc-small.trace")),
        utilisation: 0.002,
        verify: false,
        ftl: ftl::FtlConfig {
            buffer_bytes: 256 << 20,
            buffer_policy: ftl::BufferPolicy::WriteBack,
            ..ftl::FtlConfig::default()
        },
        ..RunConfig::default()
    };
    let r = run(&cfg, &mut |_, _, _| {}).unwrap();
    assert_eq!(r.requests, 6999);
    assert!(r.write_latency.max_us < 0.01, "{:?}", r.write_latency);
    assert!(
        r.flash_pages_programmed < 100,
        "{}",
        r.flash_pages_programmed
    );
}
