#![deny(clippy::unwrap_used, clippy::expect_used)]
#![warn(missing_docs)]
//! S3 face.
