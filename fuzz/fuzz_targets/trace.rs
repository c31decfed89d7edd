//! Fuzz target: see `ossd::fuzz::parse_trace`.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| ossd::fuzz::parse_trace(data));
