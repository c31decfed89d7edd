//! Fuzz target: see `proto::fuzz_frames` (frames of the OSD wire protocol, decoded as requests
//! and replies; a stable seeded test runs the same function in `cargo test -p proto`).
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| proto::fuzz_frames(data));
