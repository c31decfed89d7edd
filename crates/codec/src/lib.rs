//! Helpers every on-flash codec shares, at the bottom of the crate graph (no dependency on any
//! layer), so the device model, the mapping layers and the file systems decode alike.

#![deny(clippy::unwrap_used, clippy::expect_used)]
#![warn(missing_docs)]

pub mod le;
