//! The parts of the `ossd` command line that other crates test: run settings (defaults, TOML
//! files, `--set` values) and the fuzz entry points (the `fuzz/` crate and a stable test share
//! them).

#![deny(clippy::unwrap_used, clippy::expect_used)]
#![warn(missing_docs)]

pub mod fuzz;
pub mod settings;
