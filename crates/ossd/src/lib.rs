//! The parts of the `ossd` command line that other crates use: run settings (defaults, TOML
//! files, `--set` values), the fuzz entry points (the `fuzz/` crate and a stable test share
//! them), `ossd reproduce`'s runner and the object commands' work on an image (the Python
//! package, crates/py, calls both, so the CLI and Python run the same code).

#![deny(clippy::unwrap_used, clippy::expect_used)]
#![warn(missing_docs)]

pub mod fuzz;
pub mod reproduce;
pub mod settings;
pub mod store;
