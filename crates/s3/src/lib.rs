#![deny(clippy::unwrap_used, clippy::expect_used)]
#![warn(missing_docs)]
//! An S3-compatible HTTP face for an OSD object store (`osd::Osd`).
//!
//! - Buckets are partitions; each bucket's keys map to objects through a key directory kept on
//!   the device as an append-only log in one object of the partition ([`dir`], byte layout in
//!   docs/FORMAT.md section 5).
//! - The HTTP protocol, SigV4 header authentication, presigned URLs and the XML documents are
//!   [`s3s`]'s; this crate implements its `S3` trait ([`service::OssdS3`]) over a synchronous
//!   [`engine::Engine`] that owns the store behind one lock.
//! - A 200 to PutObject, CopyObject, CompleteMultipartUpload, DeleteObject(s), UploadPart and
//!   bucket creation and deletion means the change is durable (flushed), with group commit.
//!
//! [`serve`] runs the face on a listener until a shutdown future completes, then drains,
//! flushes and hands the store back.

pub mod auth;
pub mod client;
pub mod dir;
pub mod engine;
pub mod server;
pub mod service;

pub use auth::{CredentialError, Credentials};
pub use engine::{Engine, Limits};
pub use server::{serve, S3Config};

use osd::OsdError;

/// Errors of the S3 face; each maps to one S3 error code ([`service`]).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The bucket does not exist.
    #[error("bucket {0:?} does not exist")]
    NoSuchBucket(String),
    /// A bucket of that name exists (S3's BucketAlreadyOwnedByYou: every credential is one
    /// owner here).
    #[error("bucket {0:?} exists already")]
    BucketExists(String),
    /// DeleteBucket of a bucket that still has keys.
    #[error("bucket {0:?} is not empty")]
    BucketNotEmpty(String),
    /// The key does not exist.
    #[error("key {key:?} does not exist in bucket {bucket:?}")]
    NoSuchKey {
        /// Bucket.
        bucket: String,
        /// Key.
        key: String,
    },
    /// The multipart upload id (hex) is unknown, or belongs to another key.
    #[error("multipart upload {0} does not exist")]
    NoSuchUpload(String),
    /// CompleteMultipartUpload named a part that was not uploaded or has another ETag.
    #[error("invalid part: {0}")]
    InvalidPart(String),
    /// CompleteMultipartUpload listed parts out of ascending order.
    #[error("parts are not in ascending order: {0}")]
    InvalidPartOrder(String),
    /// A part other than the last is smaller than the minimum.
    #[error(
        "part {number} is {size_bytes} bytes; every part but the last must be at least {min_bytes}"
    )]
    EntityTooSmall {
        /// Part number.
        number: u32,
        /// Its size.
        size_bytes: u64,
        /// The minimum.
        min_bytes: u64,
    },
    /// A body or object is larger than the configured maximum.
    #[error("{size_bytes} bytes exceed the limit of {max_bytes}")]
    EntityTooLarge {
        /// Bytes declared or received so far.
        size_bytes: u64,
        /// The limit.
        max_bytes: u64,
    },
    /// A key is empty or longer than S3's 1,024 bytes.
    #[error("key of {0} bytes (1 to 1024 allowed)")]
    KeyTooLong(usize),
    /// User metadata and content type larger than S3 allows.
    #[error("metadata of {0} bytes exceeds 2 KiB")]
    MetadataTooLarge(usize),
    /// The body's MD5 is not the Content-MD5 the client sent.
    #[error("Content-MD5 does not match the body")]
    BadDigest,
    /// The body ended before its declared length, or the client stalled past the timeout.
    #[error("incomplete body: {0}")]
    IncompleteBody(String),
    /// A request field S3 would refuse (says which and why).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The object store failed.
    #[error("store: {0}")]
    Store(#[from] OsdError),
    /// A key directory read back that does not decode or check.
    #[error("corrupted {what} at {location}")]
    Corrupted {
        /// What is damaged.
        what: String,
        /// Where.
        location: String,
    },
    /// The server cannot take the request now (shutting down, or the device is full).
    #[error("unavailable: {0}")]
    Unavailable(String),
    /// An earlier change failed part way; writes are refused until the store is reopened.
    #[error("the S3 face stopped accepting writes after an earlier failure ({0}); restart it")]
    Poisoned(String),
}
