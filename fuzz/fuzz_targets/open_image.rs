//! Fuzz target: see `ossd::fuzz::open_image`.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| ossd::fuzz::open_image(data));
