//! A run on a timing-only device (`device_config.payload = timing`) reports the same virtual
//! times, latencies, counters and write amplification as the same run on a full device (same
//! seed), and the combinations it cannot serve are refused before the run starts.

use flash::{preset, PayloadMode};
use lab::run::{ConfigError, RunWorkload};
use lab::{run, RunConfig, RunReport, StackKind};
use workload::block::WorkloadKind;

fn config(stack: StackKind, payload: PayloadMode) -> RunConfig {
    let mut device = preset("tiny").unwrap();
    device.payload = payload;
    RunConfig {
        stack,
        device_config: Some(device),
        utilisation: 0.5,
        verify: false,
        seed: 5,
        workload: RunWorkload {
            kind: WorkloadKind::Zipf,
            request_bytes: 8192,
            requests: 20_000,
            read_fraction: 0.3,
            ..RunWorkload::default()
        },
        ..RunConfig::default()
    }
}

/// The report without what differs by nature: wall-clock figures, the device's memory and the
/// settings (which name the payload mode).
fn figures(r: &RunReport) -> String {
    let mut r = r.clone();
    r.wall_seconds = 0.0;
    r.requests_per_wall_second = 0.0;
    r.device_memory_bytes = 0;
    r.config = RunConfig::default();
    format!("{r:?}")
}

#[test]
fn timing_only_runs_report_what_full_runs_report() {
    for stack in [StackKind::Ftl, StackKind::Dftl] {
        let full = run(&config(stack, PayloadMode::Full), &mut |_, _, _| {}).unwrap();
        let timing = run(&config(stack, PayloadMode::Timing), &mut |_, _, _| {}).unwrap();
        assert!(
            full.gc_page_copies > 1000 && full.host_read_bytes > 0,
            "{stack:?}: the run must read and exercise GC: {full:?}"
        );
        assert_eq!(figures(&full), figures(&timing), "{stack:?}");
        assert!(
            timing.device_memory_bytes < full.device_memory_bytes / 2,
            "{stack:?}: {} bytes on the timing-only device, {} on the full one",
            timing.device_memory_bytes,
            full.device_memory_bytes
        );
    }
}

#[test]
fn verify_and_the_object_store_are_refused_on_a_timing_only_device() {
    let mut c = config(StackKind::Ftl, PayloadMode::Timing);
    c.verify = true;
    let e = c.device_config().unwrap_err();
    assert!(matches!(e, ConfigError::TimingVerify), "{e}");
    assert!(e.to_string().contains("verify = false"), "{e}");
    let c = config(StackKind::Osd, PayloadMode::Timing);
    let e = c.device_config().unwrap_err();
    assert!(matches!(e, ConfigError::TimingStack { .. }), "{e}");
    let e = run(&c, &mut |_, _, _| {}).unwrap_err();
    assert!(e.to_string().contains("only ftl and dftl"), "{e}");
    // Full devices are unaffected.
    let mut c = config(StackKind::Osd, PayloadMode::Full);
    c.verify = true;
    c.device_config().unwrap();
}
