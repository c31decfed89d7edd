//! The S3 operations: s3s's `S3` trait over the [`Engine`]. s3s has parsed the request, checked
//! its SigV4 signature (header or presigned URL) and will write the XML reply; this module maps
//! each operation onto the engine and each [`Error`] onto an S3 error code.
//!
//! The engine is synchronous and owns the store, so every call into it runs on tokio's blocking
//! pool under one mutex (`OssdS3::run`); the per-byte work (MD5, SigV4 payload hashing, HTTP)
//! stays on the async workers, in parallel across connections.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::{Bytes, BytesMut};
use futures::StreamExt;
use md5::{Digest, Md5};
use osd::{Oid, Osd, OsdError};
use s3s::dto::*;
use s3s::{S3Error, S3ErrorCode, S3Request, S3Response, S3Result, S3};

use crate::dir::{self, Etag, ObjectMeta};
use crate::engine::{check_key_and_meta, Engine, NewPart, CHUNK_BYTES};
use crate::server::S3Config;
use crate::Error;

/// Bodies up to this size are collected and stored in one engine call.
const SMALL_BYTES: usize = 1 << 20;
/// Parts a multipart upload may have (S3's limit).
const MAX_PARTS: i32 = 10_000;

/// State shared by every request: the engine (taken at shutdown) and the settings.
pub(crate) struct Shared<S> {
    pub(crate) engine: Mutex<Option<Engine<S>>>,
    pub(crate) config: S3Config,
}

/// The S3 service over an OSD store.
pub struct OssdS3<S> {
    shared: Arc<Shared<S>>,
}

impl<S> Clone for OssdS3<S> {
    fn clone(&self) -> Self {
        OssdS3 {
            shared: self.shared.clone(),
        }
    }
}

impl<S: Osd + Send + 'static> OssdS3<S> {
    pub(crate) fn new(shared: Arc<Shared<S>>) -> Self {
        OssdS3 { shared }
    }

    /// Runs `f` on the engine, on the blocking pool.
    async fn run<T, F>(&self, f: F) -> Result<T, Error>
    where
        F: FnOnce(&mut Engine<S>) -> Result<T, Error> + Send + 'static,
        T: Send + 'static,
    {
        let shared = self.shared.clone();
        tokio::task::spawn_blocking(move || {
            let mut guard = shared
                .engine
                .lock()
                .map_err(|_| Error::Poisoned("a request panicked holding the store".into()))?;
            let engine = guard
                .as_mut()
                .ok_or_else(|| Error::Unavailable("the server is shutting down".into()))?;
            f(engine)
        })
        .await
        .map_err(|e| Error::Poisoned(format!("a store task failed: {e}")))?
    }

    /// Waits until change `seq` is durable.
    async fn durable(&self, seq: u64) -> Result<(), Error> {
        self.run(move |e| e.sync(seq)).await
    }

    /// Reads a request body into a fresh object of `bucket`, checking its length, Content-MD5
    /// and the limits; returns the object, its size and MD5. On any failure the object is
    /// removed. Small bodies go to the store in one call with `small` (which commits them).
    async fn receive(
        &self,
        bucket: &str,
        body: Option<StreamingBlob>,
        declared: Option<i64>,
        content_md5: Option<&str>,
    ) -> Result<Received, Error> {
        let max = self.shared.config.limits.max_object_bytes;
        if let Some(n) = declared {
            if n < 0 {
                return Err(Error::InvalidArgument(format!("Content-Length {n}")));
            }
            if n as u64 > max {
                return Err(Error::EntityTooLarge {
                    size_bytes: n as u64,
                    max_bytes: max,
                });
            }
        }
        let mut body = body;
        let timeout = self.shared.config.body_timeout;
        let mut hasher = Md5::new();
        // Sized for the declared body (up to the one-call limit), so it is never regrown.
        let capacity = declared.map_or(64 << 10, |n| {
            (n.max(0) as usize).min(SMALL_BYTES + (64 << 10))
        });
        let mut buf = BytesMut::with_capacity(capacity);
        let mut total: u64 = 0;
        let mut oid: Option<Oid> = None;
        let result = async {
            loop {
                let chunk = match body.as_mut() {
                    None => None,
                    Some(b) => match tokio::time::timeout(timeout, b.next()).await {
                        Err(_) => {
                            return Err(Error::IncompleteBody(format!(
                                "no body bytes for {timeout:?} after {total} bytes"
                            )))
                        }
                        Ok(None) => None,
                        Ok(Some(Err(e))) => {
                            return Err(Error::IncompleteBody(format!("after {total} bytes: {e}")))
                        }
                        Ok(Some(Ok(c))) => Some(c),
                    },
                };
                let Some(chunk) = chunk else { break };
                total += chunk.len() as u64;
                if total > max {
                    return Err(Error::EntityTooLarge {
                        size_bytes: total,
                        max_bytes: max,
                    });
                }
                hasher.update(&chunk);
                buf.extend_from_slice(&chunk);
                // A body of up to SMALL_BYTES stays in memory and is stored in one call.
                if buf.len() > SMALL_BYTES {
                    let o = match oid {
                        Some(o) => o,
                        None => {
                            let b = bucket.to_string();
                            let o = self.run(move |e| e.new_object(&b)).await?;
                            oid = Some(o);
                            o
                        }
                    };
                    let data = buf.split().freeze();
                    let at = total - data.len() as u64;
                    self.run(move |e| e.write(o, at, &data)).await?;
                }
            }
            if let Some(n) = declared {
                if n as u64 != total {
                    return Err(Error::IncompleteBody(format!(
                        "{total} bytes received, Content-Length {n}"
                    )));
                }
            }
            let md5: [u8; 16] = hasher.finalize().into();
            if let Some(want) = content_md5 {
                if base64_md5(&md5) != want.trim() {
                    return Err(Error::BadDigest);
                }
            }
            if let Some(o) = oid {
                if !buf.is_empty() {
                    let data = buf.split().freeze();
                    let at = total - data.len() as u64;
                    self.run(move |e| e.write(o, at, &data)).await?;
                }
            }
            Ok(md5)
        }
        .await;
        match (result, oid) {
            (Ok(md5), Some(o)) => Ok(Received {
                oid: Some(o),
                small: Bytes::new(),
                size: total,
                md5,
            }),
            (Ok(md5), None) => Ok(Received {
                oid: None,
                small: buf.freeze(),
                size: total,
                md5,
            }),
            (Err(e), Some(o)) => {
                let _ = self
                    .run(move |en| {
                        en.discard(o);
                        Ok(())
                    })
                    .await;
                Err(e)
            }
            (Err(e), None) => Err(e),
        }
    }

    /// Stores a received body as an object of `bucket` (small bodies are written now) and
    /// returns it.
    async fn materialize(&self, bucket: &str, r: Received) -> Result<Oid, Error> {
        match r.oid {
            Some(o) => Ok(o),
            None => {
                let b = bucket.to_string();
                self.run(move |e| {
                    let o = e.new_object(&b)?;
                    if !r.small.is_empty() {
                        if let Err(err) = e.write(o, 0, &r.small) {
                            e.discard(o);
                            return Err(err);
                        }
                    }
                    Ok(o)
                })
                .await
            }
        }
    }

    /// Copies `len` bytes of `src` into a fresh object of `bucket`, chunk by chunk (the store
    /// lock is released between chunks); `src` is pinned meanwhile.
    async fn copy_into(&self, bucket: &str, sources: Vec<(Oid, u64)>) -> Result<Oid, Error> {
        let b = bucket.to_string();
        let pins: Vec<Oid> = sources.iter().map(|(o, _)| *o).collect();
        let dst = self.run(move |e| e.new_object(&b)).await?;
        let result = async {
            let mut at = 0u64;
            for (src, len) in sources {
                let mut off = 0u64;
                while off < len {
                    let n = (len - off).min(CHUNK_BYTES as u64) as usize;
                    let data = self
                        .run(move |e| {
                            let mut buf = vec![0u8; n];
                            let got = e.read(src, off, &mut buf)?;
                            if got != n {
                                return Err(Error::Store(OsdError::Internal(format!(
                                    "object {src} shorter than its directory entry"
                                ))));
                            }
                            e.write(dst, at, &buf)?;
                            Ok(())
                        })
                        .await;
                    data?;
                    off += n as u64;
                    at += n as u64;
                }
            }
            Ok(())
        }
        .await;
        let failed = result.is_err();
        let _ = self
            .run(move |e| {
                for p in pins {
                    e.unpin(p);
                }
                if failed {
                    e.discard(dst);
                }
                Ok(())
            })
            .await;
        result.map(|()| dst)
    }
}

struct Received {
    /// The object holding the body, for bodies larger than [`SMALL_BYTES`].
    oid: Option<Oid>,
    /// The body itself otherwise.
    small: Bytes,
    size: u64,
    md5: [u8; 16],
}

fn base64_md5(md5: &[u8; 16]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(24);
    for c in md5.chunks(3) {
        let n = (c[0] as u32) << 16
            | (*c.get(1).unwrap_or(&0) as u32) << 8
            | *c.get(2).unwrap_or(&0) as u32;
        for i in 0..4 {
            if i <= c.len() {
                out.push(A[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

fn timestamp(ms: u64) -> Timestamp {
    Timestamp::from(UNIX_EPOCH + Duration::from_millis(ms))
}

fn user_meta(m: Option<Metadata>) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = m
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k.to_ascii_lowercase(), v))
        .collect();
    v.sort();
    v
}

fn metadata(user: &[(String, String)]) -> Option<Metadata> {
    (!user.is_empty()).then(|| user.iter().cloned().collect())
}

fn etag(e: &Etag) -> ETag {
    ETag::Strong(e.to_s3())
}

/// Parses an upload id as this face issues it (16 hex digits).
fn upload_id(s: &str) -> Result<u64, Error> {
    if s.len() != 16 {
        return Err(Error::NoSuchUpload(s.to_string()));
    }
    u64::from_str_radix(s, 16).map_err(|_| Error::NoSuchUpload(s.to_string()))
}

fn part_number(n: i32) -> Result<u32, Error> {
    if (1..=MAX_PARTS).contains(&n) {
        Ok(n as u32)
    } else {
        Err(Error::InvalidArgument(format!(
            "part number {n}: must be 1 to {MAX_PARTS}"
        )))
    }
}

/// Continuation tokens are the hex of the last key or prefix listed: opaque to clients, safe
/// in XML and URLs whatever the key holds.
fn encode_token(s: &str) -> String {
    dir::hex(s.as_bytes())
}

fn decode_token(t: &str) -> Result<String, Error> {
    let bad = || {
        Error::InvalidArgument(format!(
            "continuation token {t:?} is not one this server issued"
        ))
    };
    if !t.len().is_multiple_of(2) {
        return Err(bad());
    }
    let bytes = (0..t.len())
        .step_by(2)
        .map(|i| t.get(i..i + 2).and_then(|h| u8::from_str_radix(h, 16).ok()))
        .collect::<Option<Vec<u8>>>()
        .ok_or_else(bad)?;
    String::from_utf8(bytes).map_err(|_| bad())
}

fn max_keys(m: Option<i32>) -> Result<usize, Error> {
    match m {
        None => Ok(1000),
        Some(n) if n < 0 => Err(Error::InvalidArgument(format!("max-keys {n}"))),
        Some(n) => Ok((n as usize).min(1000)),
    }
}

/// Maps an engine error onto S3's error code, status and message.
pub fn to_s3(e: Error) -> S3Error {
    use S3ErrorCode as C;
    let code = match &e {
        Error::NoSuchBucket(_) => C::NoSuchBucket,
        Error::BucketExists(_) => C::BucketAlreadyOwnedByYou,
        Error::BucketNotEmpty(_) => C::BucketNotEmpty,
        Error::NoSuchKey { .. } => C::NoSuchKey,
        Error::NoSuchUpload(_) => C::NoSuchUpload,
        Error::InvalidPart(_) => C::InvalidPart,
        Error::InvalidPartOrder(_) => C::InvalidPartOrder,
        Error::EntityTooSmall { .. } => C::EntityTooSmall,
        Error::EntityTooLarge { .. } => C::EntityTooLarge,
        Error::KeyTooLong(_) => C::KeyTooLongError,
        Error::MetadataTooLarge(_) => C::MetadataTooLarge,
        Error::BadDigest => C::BadDigest,
        Error::IncompleteBody(_) => C::IncompleteBody,
        Error::InvalidArgument(_) => C::InvalidArgument,
        Error::Unavailable(_) | Error::Store(OsdError::NoSpace { .. }) => C::ServiceUnavailable,
        Error::Store(_) | Error::Corrupted { .. } | Error::Poisoned(_) => {
            eprintln!("ossd serve --s3: internal error: {e}");
            C::InternalError
        }
    };
    S3Error::with_message(code, e.to_string())
}

fn ok<T>(output: T) -> S3Result<S3Response<T>> {
    Ok(S3Response::new(output))
}

#[async_trait::async_trait]
impl<S: Osd + Send + 'static> S3 for OssdS3<S> {
    async fn create_bucket(
        &self,
        req: S3Request<CreateBucketInput>,
    ) -> S3Result<S3Response<CreateBucketOutput>> {
        let name = req.input.bucket;
        let n = name.clone();
        self.run(move |e| e.create_bucket(&n))
            .await
            .map_err(to_s3)?;
        ok(CreateBucketOutput {
            location: Some(format!("/{name}")),
        })
    }

    async fn delete_bucket(
        &self,
        req: S3Request<DeleteBucketInput>,
    ) -> S3Result<S3Response<DeleteBucketOutput>> {
        let name = req.input.bucket;
        self.run(move |e| e.delete_bucket(&name))
            .await
            .map_err(to_s3)?;
        ok(DeleteBucketOutput {})
    }

    async fn head_bucket(
        &self,
        req: S3Request<HeadBucketInput>,
    ) -> S3Result<S3Response<HeadBucketOutput>> {
        let name = req.input.bucket;
        self.run(move |e| e.partition(&name).map(|_| ()))
            .await
            .map_err(to_s3)?;
        ok(HeadBucketOutput::default())
    }

    async fn get_bucket_location(
        &self,
        req: S3Request<GetBucketLocationInput>,
    ) -> S3Result<S3Response<GetBucketLocationOutput>> {
        let name = req.input.bucket;
        self.run(move |e| e.partition(&name).map(|_| ()))
            .await
            .map_err(to_s3)?;
        // One location; S3 answers us-east-1 with an empty constraint.
        ok(GetBucketLocationOutput::default())
    }

    async fn list_buckets(
        &self,
        _req: S3Request<ListBucketsInput>,
    ) -> S3Result<S3Response<ListBucketsOutput>> {
        let list = self.run(|e| Ok(e.list_buckets())).await.map_err(to_s3)?;
        let buckets = list
            .into_iter()
            .map(|(name, created)| Bucket {
                name: Some(name),
                creation_date: Some(timestamp(created)),
                bucket_region: None,
            })
            .collect();
        ok(ListBucketsOutput {
            buckets: Some(buckets),
            owner: Some(Owner {
                display_name: Some("ossd".into()),
                id: Some("ossd".into()),
            }),
            ..Default::default()
        })
    }

    async fn put_object(
        &self,
        req: S3Request<PutObjectInput>,
    ) -> S3Result<S3Response<PutObjectOutput>> {
        let i = req.input;
        let content_type = i.content_type.unwrap_or_default();
        let user = user_meta(i.metadata);
        check_key_and_meta(&i.key, &content_type, &user).map_err(to_s3)?;
        let bucket = i.bucket;
        let b = bucket.clone();
        // Refuse an unknown bucket before reading the body.
        self.run(move |e| e.partition(&b).map(|_| ()))
            .await
            .map_err(to_s3)?;
        let got = self
            .receive(&bucket, i.body, i.content_length, i.content_md5.as_deref())
            .await
            .map_err(to_s3)?;
        let meta = ObjectMeta {
            size: got.size,
            etag: Etag {
                md5: got.md5,
                parts: 0,
            },
            modified_ms: now_ms(),
            content_type,
            user,
        };
        let tag = etag(&meta.etag);
        let key = i.key;
        let seq = match got.oid {
            None => {
                let data = got.small;
                self.run(move |e| e.put_small(&bucket, &key, &data, meta))
                    .await
            }
            Some(o) => {
                self.run(move |e| {
                    e.commit(&bucket, &key, o, meta, None)
                        .inspect_err(|_| e.discard(o))
                })
                .await
            }
        }
        .map_err(to_s3)?;
        self.durable(seq).await.map_err(to_s3)?;
        ok(PutObjectOutput {
            e_tag: Some(tag),
            size: Some(got.size as i64),
            ..Default::default()
        })
    }

    async fn get_object(
        &self,
        req: S3Request<GetObjectInput>,
    ) -> S3Result<S3Response<GetObjectOutput>> {
        let i = req.input;
        let (bucket, key) = (i.bucket, i.key);
        // Look up and pin in one call, so the object cannot be removed before it is read.
        let (oid, entry) = self
            .run(move |e| {
                let (oid, entry) = e.lookup(&bucket, &key)?;
                e.pin(oid);
                Ok((oid, entry))
            })
            .await
            .map_err(to_s3)?;
        let pin = PinGuard {
            shared: Some(self.shared.clone()),
            oid,
        };
        let size = entry.meta.size;
        let (range, content_range) = match &i.range {
            None => (0..size, None),
            Some(r) => match r.check(size) {
                Ok(r) => {
                    let cr = format!("bytes {}-{}/{}", r.start, r.end - 1, size);
                    (r, Some(cr))
                }
                Err(_) => {
                    return Err(S3Error::with_message(
                        S3ErrorCode::InvalidRange,
                        format!(
                            "range {} of an object of {size} bytes",
                            r.to_header_string()
                        ),
                    ))
                }
            },
        };
        let len = range.end - range.start;
        let body = if len as usize <= SMALL_BYTES {
            let start = range.start;
            let data = self
                .run(move |e| {
                    let mut buf = vec![0u8; len as usize];
                    let n = e.read(oid, start, &mut buf)?;
                    buf.truncate(n);
                    Ok(buf)
                })
                .await
                .map_err(to_s3)?;
            drop(pin);
            if data.len() as u64 != len {
                return Err(to_s3(Error::Store(OsdError::Internal(format!(
                    "object {oid} shorter than its directory entry"
                )))));
            }
            StreamingBlob::wrap(futures::stream::once(async move {
                Ok::<_, std::io::Error>(Bytes::from(data))
            }))
        } else {
            self.stream(pin, range)
        };
        ok(GetObjectOutput {
            body: Some(body),
            content_length: Some(len as i64),
            content_range,
            content_type: (!entry.meta.content_type.is_empty())
                .then(|| entry.meta.content_type.clone()),
            e_tag: Some(etag(&entry.meta.etag)),
            last_modified: Some(timestamp(entry.meta.modified_ms)),
            metadata: metadata(&entry.meta.user),
            accept_ranges: Some("bytes".into()),
            parts_count: (entry.meta.etag.parts > 0).then_some(entry.meta.etag.parts as i32),
            ..Default::default()
        })
    }

    async fn head_object(
        &self,
        req: S3Request<HeadObjectInput>,
    ) -> S3Result<S3Response<HeadObjectOutput>> {
        let i = req.input;
        let (bucket, key) = (i.bucket, i.key);
        let (_, entry) = self
            .run(move |e| e.lookup(&bucket, &key))
            .await
            .map_err(to_s3)?;
        let m = entry.meta;
        ok(HeadObjectOutput {
            content_length: Some(m.size as i64),
            content_type: (!m.content_type.is_empty()).then_some(m.content_type),
            e_tag: Some(etag(&m.etag)),
            last_modified: Some(timestamp(m.modified_ms)),
            metadata: metadata(&m.user),
            accept_ranges: Some("bytes".into()),
            parts_count: (m.etag.parts > 0).then_some(m.etag.parts as i32),
            ..Default::default()
        })
    }

    async fn delete_object(
        &self,
        req: S3Request<DeleteObjectInput>,
    ) -> S3Result<S3Response<DeleteObjectOutput>> {
        let i = req.input;
        let (bucket, key) = (i.bucket, i.key);
        let seq = self
            .run(move |e| e.delete(&bucket, &key))
            .await
            .map_err(to_s3)?;
        if let Some(seq) = seq {
            self.durable(seq).await.map_err(to_s3)?;
        }
        Ok(S3Response::with_status(
            DeleteObjectOutput::default(),
            hyper::StatusCode::NO_CONTENT,
        ))
    }

    async fn delete_objects(
        &self,
        req: S3Request<DeleteObjectsInput>,
    ) -> S3Result<S3Response<DeleteObjectsOutput>> {
        let i = req.input;
        if i.delete.objects.len() > 1000 {
            return Err(to_s3(Error::InvalidArgument(format!(
                "{} keys in one DeleteObjects (1000 at most)",
                i.delete.objects.len()
            ))));
        }
        let quiet = i.delete.quiet.unwrap_or(false);
        let keys: Vec<String> = i.delete.objects.into_iter().map(|o| o.key).collect();
        let bucket = i.bucket;
        let (results, seq) = self
            .run(move |e| {
                e.partition(&bucket)?;
                let mut seq = 0;
                let mut results = Vec::new();
                for k in keys {
                    match e.delete(&bucket, &k) {
                        Ok(s) => {
                            seq = seq.max(s.unwrap_or(0));
                            results.push((k, None));
                        }
                        Err(err) => results.push((k, Some(to_s3(err)))),
                    }
                }
                Ok((results, seq))
            })
            .await
            .map_err(to_s3)?;
        self.durable(seq).await.map_err(to_s3)?;
        let mut deleted = Vec::new();
        let mut errors = Vec::new();
        for (key, err) in results {
            match err {
                None if quiet => {}
                None => deleted.push(DeletedObject {
                    key: Some(key),
                    ..Default::default()
                }),
                Some(e) => errors.push(s3s::dto::Error {
                    code: Some(e.code().as_str().to_string()),
                    key: Some(key),
                    message: e.message().map(str::to_string),
                    version_id: None,
                }),
            }
        }
        ok(DeleteObjectsOutput {
            deleted: Some(deleted),
            errors: (!errors.is_empty()).then_some(errors),
            ..Default::default()
        })
    }

    async fn copy_object(
        &self,
        req: S3Request<CopyObjectInput>,
    ) -> S3Result<S3Response<CopyObjectOutput>> {
        let i = req.input;
        let CopySource::Bucket {
            bucket: src_bucket,
            key: src_key,
            ..
        } = i.copy_source
        else {
            return Err(to_s3(Error::InvalidArgument(
                "copy source must be a bucket and key".into(),
            )));
        };
        let (sb, sk) = (src_bucket.to_string(), src_key.to_string());
        let (src, entry) = self
            .run(move |e| {
                let (oid, entry) = e.lookup(&sb, &sk)?;
                e.pin(oid);
                Ok((oid, entry))
            })
            .await
            .map_err(to_s3)?;
        let replace = i
            .metadata_directive
            .as_ref()
            .is_some_and(|d| d.as_str() == MetadataDirective::REPLACE);
        let (content_type, user) = if replace {
            (i.content_type.unwrap_or_default(), user_meta(i.metadata))
        } else {
            (entry.meta.content_type.clone(), entry.meta.user.clone())
        };
        let meta = ObjectMeta {
            modified_ms: now_ms(),
            content_type,
            user,
            ..entry.meta
        };
        let size = meta.size;
        let dst = self
            .copy_into(&i.bucket, vec![(src, size)])
            .await
            .map_err(to_s3)?;
        let tag = etag(&meta.etag);
        let modified = meta.modified_ms;
        let (bucket, key) = (i.bucket, i.key);
        let seq = self
            .run(move |e| {
                e.commit(&bucket, &key, dst, meta, None)
                    .inspect_err(|_| e.discard(dst))
            })
            .await
            .map_err(to_s3)?;
        self.durable(seq).await.map_err(to_s3)?;
        ok(CopyObjectOutput {
            copy_object_result: Some(CopyObjectResult {
                e_tag: Some(tag),
                last_modified: Some(timestamp(modified)),
                ..Default::default()
            }),
            ..Default::default()
        })
    }

    async fn list_objects_v2(
        &self,
        req: S3Request<ListObjectsV2Input>,
    ) -> S3Result<S3Response<ListObjectsV2Output>> {
        let i = req.input;
        let max = max_keys(i.max_keys).map_err(to_s3)?;
        let after = match (&i.continuation_token, &i.start_after) {
            (Some(t), _) => Some(decode_token(t).map_err(to_s3)?),
            (None, Some(s)) => Some(s.clone()),
            (None, None) => None,
        };
        let prefix = i.prefix.clone().unwrap_or_default();
        let delimiter = i.delimiter.clone();
        let bucket = i.bucket.clone();
        let page = self
            .run(move |e| {
                Ok(e.directory(&bucket)?
                    .list(&prefix, delimiter.as_deref(), after.as_deref(), max))
            })
            .await
            .map_err(to_s3)?;
        let count = page.entries.len() + page.prefixes.len();
        ok(ListObjectsV2Output {
            name: Some(i.bucket),
            prefix: i.prefix,
            delimiter: i.delimiter,
            max_keys: Some(max as i32),
            key_count: Some(count as i32),
            is_truncated: Some(page.truncated),
            continuation_token: i.continuation_token,
            start_after: i.start_after,
            next_continuation_token: page
                .truncated
                .then(|| page.last.as_deref().map(encode_token))
                .flatten(),
            contents: Some(objects(&page)),
            common_prefixes: prefixes(&page),
            encoding_type: None,
            request_charged: None,
        })
    }

    async fn list_objects(
        &self,
        req: S3Request<ListObjectsInput>,
    ) -> S3Result<S3Response<ListObjectsOutput>> {
        let i = req.input;
        let max = max_keys(i.max_keys).map_err(to_s3)?;
        let prefix = i.prefix.clone().unwrap_or_default();
        let delimiter = i.delimiter.clone();
        let after = i.marker.clone().filter(|m| !m.is_empty());
        let bucket = i.bucket.clone();
        let page = self
            .run(move |e| {
                Ok(e.directory(&bucket)?
                    .list(&prefix, delimiter.as_deref(), after.as_deref(), max))
            })
            .await
            .map_err(to_s3)?;
        ok(ListObjectsOutput {
            name: Some(i.bucket),
            prefix: i.prefix,
            marker: i.marker,
            max_keys: Some(max as i32),
            is_truncated: Some(page.truncated),
            next_marker: page.truncated.then(|| page.last.clone()).flatten(),
            contents: Some(objects(&page)),
            common_prefixes: prefixes(&page),
            delimiter: i.delimiter,
            encoding_type: None,
            request_charged: None,
        })
    }

    async fn create_multipart_upload(
        &self,
        req: S3Request<CreateMultipartUploadInput>,
    ) -> S3Result<S3Response<CreateMultipartUploadOutput>> {
        let i = req.input;
        let content_type = i.content_type.unwrap_or_default();
        let user = user_meta(i.metadata);
        let (bucket, key) = (i.bucket.clone(), i.key.clone());
        let (id, seq) = self
            .run(move |e| e.create_upload(&bucket, &key, content_type, user))
            .await
            .map_err(to_s3)?;
        self.durable(seq).await.map_err(to_s3)?;
        ok(CreateMultipartUploadOutput {
            bucket: Some(i.bucket),
            key: Some(i.key),
            upload_id: Some(format!("{id:016x}")),
            ..Default::default()
        })
    }

    async fn upload_part(
        &self,
        req: S3Request<UploadPartInput>,
    ) -> S3Result<S3Response<UploadPartOutput>> {
        let i = req.input;
        let id = upload_id(&i.upload_id).map_err(to_s3)?;
        let number = part_number(i.part_number).map_err(to_s3)?;
        let (b, k) = (i.bucket.clone(), i.key.clone());
        self.run(move |e| e.upload(&b, id, &k).map(|_| ()))
            .await
            .map_err(to_s3)?;
        let got = self
            .receive(
                &i.bucket,
                i.body,
                i.content_length,
                i.content_md5.as_deref(),
            )
            .await
            .map_err(to_s3)?;
        let (size, md5) = (got.size, got.md5);
        let oid = self.materialize(&i.bucket, got).await.map_err(to_s3)?;
        let (bucket, key) = (i.bucket, i.key);
        let seq = self
            .run(move |e| {
                let part = NewPart {
                    number,
                    oid,
                    size,
                    md5,
                };
                e.put_part(&bucket, &key, id, part)
                    .inspect_err(|_| e.discard(oid))
            })
            .await
            .map_err(to_s3)?;
        self.durable(seq).await.map_err(to_s3)?;
        ok(UploadPartOutput {
            e_tag: Some(ETag::Strong(dir::hex(&md5))),
            ..Default::default()
        })
    }

    async fn complete_multipart_upload(
        &self,
        req: S3Request<CompleteMultipartUploadInput>,
    ) -> S3Result<S3Response<CompleteMultipartUploadOutput>> {
        let i = req.input;
        let id = upload_id(&i.upload_id).map_err(to_s3)?;
        let asked = i.multipart_upload.and_then(|m| m.parts).unwrap_or_default();
        if asked.is_empty() {
            return Err(to_s3(Error::InvalidArgument(
                "CompleteMultipartUpload lists no parts".into(),
            )));
        }
        let min = self.shared.config.limits.min_part_bytes;
        let max = self.shared.config.limits.max_object_bytes;
        let (b, k) = (i.bucket.clone(), i.key.clone());
        // Check the list against the uploaded parts and pin them for the copy, in one call.
        let (sources, md5s, upload) = self
            .run(move |e| {
                let up = e.upload(&b, id, &k)?.clone();
                let p = e.partition(&b)?;
                let mut sources = Vec::new();
                let mut md5s = Vec::new();
                let mut last = 0u32;
                let mut total = 0u64;
                for (idx, cp) in asked.iter().enumerate() {
                    let n = part_number(cp.part_number.unwrap_or(0))?;
                    if n <= last {
                        return Err(Error::InvalidPartOrder(format!(
                            "part {n} after part {last}"
                        )));
                    }
                    last = n;
                    let part = up
                        .parts
                        .get(&n)
                        .ok_or_else(|| Error::InvalidPart(format!("part {n} was not uploaded")))?;
                    let want = dir::hex(&part.md5);
                    let given = cp
                        .e_tag
                        .as_ref()
                        .map(|t| t.value().trim_matches('"').to_string());
                    if given.as_deref().is_some_and(|g| g != want) {
                        return Err(Error::InvalidPart(format!(
                            "part {n} has ETag {want}, not {}",
                            given.unwrap_or_default()
                        )));
                    }
                    if idx + 1 < asked.len() && part.size < min {
                        return Err(Error::EntityTooSmall {
                            number: n,
                            size_bytes: part.size,
                            min_bytes: min,
                        });
                    }
                    total += part.size;
                    let oid = Oid {
                        partition: p,
                        object: part.object,
                    };
                    sources.push((oid, part.size));
                    md5s.push(part.md5);
                }
                if total > max {
                    return Err(Error::EntityTooLarge {
                        size_bytes: total,
                        max_bytes: max,
                    });
                }
                for (o, _) in &sources {
                    e.pin(*o);
                }
                Ok((sources, md5s, up))
            })
            .await
            .map_err(to_s3)?;
        let size = sources.iter().map(|(_, n)| n).sum();
        let dst = self.copy_into(&i.bucket, sources).await.map_err(to_s3)?;
        let mut h = Md5::new();
        for m in &md5s {
            h.update(m);
        }
        let meta = ObjectMeta {
            size,
            etag: Etag {
                md5: h.finalize().into(),
                parts: md5s.len() as u32,
            },
            modified_ms: now_ms(),
            content_type: upload.content_type,
            user: upload.user,
        };
        let tag = etag(&meta.etag);
        let (bucket, key) = (i.bucket.clone(), i.key.clone());
        let seq = self
            .run(move |e| {
                e.commit(&bucket, &key, dst, meta, Some(id))
                    .inspect_err(|_| e.discard(dst))
            })
            .await
            .map_err(to_s3)?;
        self.durable(seq).await.map_err(to_s3)?;
        ok(CompleteMultipartUploadOutput {
            bucket: Some(i.bucket.clone()),
            key: Some(i.key.clone()),
            e_tag: Some(tag),
            location: Some(format!("/{}/{}", i.bucket, i.key)),
            ..Default::default()
        })
    }

    async fn abort_multipart_upload(
        &self,
        req: S3Request<AbortMultipartUploadInput>,
    ) -> S3Result<S3Response<AbortMultipartUploadOutput>> {
        let i = req.input;
        let id = upload_id(&i.upload_id).map_err(to_s3)?;
        let (bucket, key) = (i.bucket, i.key);
        let seq = self
            .run(move |e| e.abort_upload(&bucket, &key, id))
            .await
            .map_err(to_s3)?;
        self.durable(seq).await.map_err(to_s3)?;
        Ok(S3Response::with_status(
            AbortMultipartUploadOutput::default(),
            hyper::StatusCode::NO_CONTENT,
        ))
    }

    async fn list_parts(
        &self,
        req: S3Request<ListPartsInput>,
    ) -> S3Result<S3Response<ListPartsOutput>> {
        let i = req.input;
        let id = upload_id(&i.upload_id).map_err(to_s3)?;
        let max = i.max_parts.unwrap_or(1000).clamp(0, 1000) as usize;
        let marker = i.part_number_marker.unwrap_or(0).max(0) as u32;
        let (b, k) = (i.bucket.clone(), i.key.clone());
        let up = self
            .run(move |e| Ok(e.upload(&b, id, &k)?.clone()))
            .await
            .map_err(to_s3)?;
        let mut rest = up.parts.range(marker.saturating_add(1)..);
        let parts: Vec<Part> = rest
            .by_ref()
            .take(max)
            .map(|(n, p)| Part {
                part_number: Some(*n as i32),
                e_tag: Some(ETag::Strong(dir::hex(&p.md5))),
                size: Some(p.size as i64),
                last_modified: Some(timestamp(p.modified_ms)),
                ..Default::default()
            })
            .collect();
        let truncated = rest.next().is_some();
        ok(ListPartsOutput {
            bucket: Some(i.bucket),
            key: Some(i.key),
            upload_id: Some(i.upload_id),
            max_parts: Some(max as i32),
            part_number_marker: i.part_number_marker,
            next_part_number_marker: parts.last().and_then(|p| p.part_number),
            is_truncated: Some(truncated),
            parts: Some(parts),
            ..Default::default()
        })
    }
}

fn objects(page: &dir::ListPage) -> Vec<Object> {
    page.entries
        .iter()
        .map(|(k, e)| Object {
            key: Some(k.clone()),
            size: Some(e.meta.size as i64),
            e_tag: Some(etag(&e.meta.etag)),
            last_modified: Some(timestamp(e.meta.modified_ms)),
            storage_class: Some(ObjectStorageClass::from_static(
                ObjectStorageClass::STANDARD,
            )),
            ..Default::default()
        })
        .collect()
}

fn prefixes(page: &dir::ListPage) -> Option<Vec<CommonPrefix>> {
    (!page.prefixes.is_empty()).then(|| {
        page.prefixes
            .iter()
            .map(|p| CommonPrefix {
                prefix: Some(p.clone()),
            })
            .collect()
    })
}

/// Unpins an object when a read of it ends, however it ends (a client that disconnects drops
/// the body stream, and with it this guard).
struct PinGuard<S: Osd + Send + 'static> {
    shared: Option<Arc<Shared<S>>>,
    oid: Oid,
}

impl<S: Osd + Send + 'static> Drop for PinGuard<S> {
    fn drop(&mut self) {
        let Some(shared) = self.shared.take() else {
            return;
        };
        let oid = self.oid;
        let unpin = move || {
            if let Ok(mut g) = shared.engine.lock() {
                if let Some(e) = g.as_mut() {
                    e.unpin(oid);
                }
            }
        };
        // Off the async workers when there is a runtime (the lock may be held by a long call).
        match tokio::runtime::Handle::try_current() {
            Ok(h) => {
                h.spawn_blocking(unpin);
            }
            Err(_) => unpin(),
        }
    }
}

impl<S: Osd + Send + 'static> OssdS3<S> {
    /// A body that reads `range` of a pinned object chunk by chunk as the client takes it.
    fn stream(&self, pin: PinGuard<S>, range: std::ops::Range<u64>) -> StreamingBlob {
        let (tx, mut rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(2);
        let this = self.clone();
        tokio::spawn(async move {
            let oid = pin.oid;
            let mut at = range.start;
            while at < range.end {
                let n = (range.end - at).min(CHUNK_BYTES as u64) as usize;
                let r = this
                    .run(move |e| {
                        let mut buf = vec![0u8; n];
                        let got = e.read(oid, at, &mut buf)?;
                        buf.truncate(got);
                        Ok(buf)
                    })
                    .await;
                let item = match r {
                    Ok(b) if b.len() == n => Ok(Bytes::from(b)),
                    Ok(_) => Err(std::io::Error::other(format!(
                        "object {oid} shorter than its directory entry"
                    ))),
                    Err(e) => Err(std::io::Error::other(e.to_string())),
                };
                let failed = item.is_err();
                if tx.send(item).await.is_err() || failed {
                    break; // the client went away, or the read failed: end the body short
                }
                at += n as u64;
            }
            drop(pin);
        });
        StreamingBlob::wrap(futures::stream::poll_fn(move |cx| rx.poll_recv(cx)))
    }
}
