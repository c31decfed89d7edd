//! Every S3 operation of the face over real HTTP with SigV4 (the crate's small client), the
//! error documents and status codes, authentication refusals (wrong signature, unknown access
//! key, no signature, expired and altered presigned URLs), and durability across a restart.

mod common;

use std::time::{Duration, SystemTime};

use common::*;
use s3::client::{xml_field, Client};
use s3::S3Config;

fn b64(bytes: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for c in bytes.chunks(3) {
        let n = (c[0] as u32) << 16
            | (*c.get(1).unwrap_or(&0) as u32) << 8
            | *c.get(2).unwrap_or(&0) as u32;
        for i in 0..4 {
            out.push(if i <= c.len() {
                A[(n >> (18 - 6 * i) & 63) as usize] as char
            } else {
                '='
            });
        }
    }
    out
}

fn md5_b64(data: &[u8]) -> String {
    use md5::{Digest, Md5};
    b64(&Md5::digest(data))
}

fn ok(r: &s3::client::Response) {
    assert!(
        (200..300).contains(&r.status),
        "status {} body {}",
        r.status,
        String::from_utf8_lossy(&r.body)
    );
}

fn err(r: &s3::client::Response, status: u16, code: &str) {
    assert_eq!(
        (r.status, r.error_code().as_deref()),
        (status, Some(code)),
        "body {}",
        String::from_utf8_lossy(&r.body)
    );
}

fn all(xml: &[u8], tag: &str) -> Vec<String> {
    let s = String::from_utf8_lossy(xml).to_string();
    let (open, close) = (format!("<{tag}>"), format!("</{tag}>"));
    let mut out = Vec::new();
    let mut rest = s.as_str();
    while let Some(i) = rest.find(&open) {
        let after = &rest[i + open.len()..];
        let Some(j) = after.find(&close) else { break };
        out.push(after[..j].to_string());
        rest = &after[j + close.len()..];
    }
    out
}

#[test]
fn buckets_objects_ranges_copies_and_errors() {
    let srv = start(S3Config::default());
    let mut c = srv.client();
    ok(&c.create_bucket("alpha").unwrap());
    err(
        &c.create_bucket("alpha").unwrap(),
        409,
        "BucketAlreadyOwnedByYou",
    );
    ok(&c.create_bucket("beta").unwrap());
    let r = c.request("GET", "/", &[], &[], &[]).unwrap();
    ok(&r);
    assert_eq!(all(&r.body, "Name"), ["alpha", "beta"]);
    err(
        &c.put("nope-bucket", "k", b"x").unwrap(),
        404,
        "NoSuchBucket",
    );

    // Put with metadata and content type; Get, Head, Range.
    let data = payload(1, 300_000);
    let r = c
        .request(
            "PUT",
            &Client::path("alpha", "dir/obj one"),
            &[],
            &[("content-type", "image/png"), ("x-amz-meta-Colour", "blue")],
            &data,
        )
        .unwrap();
    ok(&r);
    assert_eq!(r.header("etag").unwrap(), format!("\"{}\"", md5_hex(&data)));
    let r = c.get("alpha", "dir/obj one").unwrap();
    ok(&r);
    assert_eq!(r.body, data);
    assert_eq!(r.header("content-type"), Some("image/png"));
    assert_eq!(r.header("x-amz-meta-colour"), Some("blue"));
    let r = c
        .request("HEAD", &Client::path("alpha", "dir/obj one"), &[], &[], &[])
        .unwrap();
    ok(&r);
    assert_eq!(r.header("content-length"), Some("300000"));
    for (range, want) in [
        ("bytes=10-19", &data[10..20]),
        ("bytes=299990-", &data[299_990..]),
        ("bytes=-5", &data[299_995..]),
        ("bytes=299999-400000", &data[299_999..]),
    ] {
        let r = c
            .request(
                "GET",
                &Client::path("alpha", "dir/obj one"),
                &[],
                &[("range", range)],
                &[],
            )
            .unwrap();
        assert_eq!(r.status, 206, "{range}");
        assert_eq!(r.body, want, "{range}");
    }
    let r = c
        .request(
            "GET",
            &Client::path("alpha", "dir/obj one"),
            &[],
            &[("range", "bytes=300000-")],
            &[],
        )
        .unwrap();
    err(&r, 416, "InvalidRange");
    err(&c.get("alpha", "missing").unwrap(), 404, "NoSuchKey");
    let r = c
        .request("HEAD", &Client::path("alpha", "missing"), &[], &[], &[])
        .unwrap();
    assert_eq!(r.status, 404);

    // Bad Content-MD5.
    let r = c
        .request(
            "PUT",
            &Client::path("alpha", "md5"),
            &[],
            &[("content-md5", &md5_b64(b"other"))],
            b"body",
        )
        .unwrap();
    assert_eq!(r.status, 400);
    err(&c.get("alpha", "md5").unwrap(), 404, "NoSuchKey");

    // Copy, keeping and replacing metadata.
    let r = c
        .request(
            "PUT",
            &Client::path("beta", "copy"),
            &[],
            &[("x-amz-copy-source", "/alpha/dir/obj%20one")],
            &[],
        )
        .unwrap();
    ok(&r);
    assert!(xml_field(&r.body, "ETag")
        .unwrap()
        .contains(&md5_hex(&data)));
    let r = c.get("beta", "copy").unwrap();
    assert_eq!(r.body, data);
    assert_eq!(r.header("x-amz-meta-colour"), Some("blue"));
    let r = c
        .request(
            "PUT",
            &Client::path("beta", "copy2"),
            &[],
            &[
                ("x-amz-copy-source", "/alpha/dir/obj%20one"),
                ("x-amz-metadata-directive", "REPLACE"),
                ("x-amz-meta-shape", "round"),
            ],
            &[],
        )
        .unwrap();
    ok(&r);
    let r = c.get("beta", "copy2").unwrap();
    assert_eq!(r.header("x-amz-meta-shape"), Some("round"));
    assert_eq!(r.header("x-amz-meta-colour"), None);
    let r = c
        .request(
            "PUT",
            &Client::path("beta", "c3"),
            &[],
            &[("x-amz-copy-source", "/alpha/none")],
            &[],
        )
        .unwrap();
    err(&r, 404, "NoSuchKey");

    // Overwrite, delete, delete of a missing key (204 as S3), bucket not empty.
    ok(&c.put("alpha", "dir/obj one", b"short").unwrap());
    assert_eq!(c.get("alpha", "dir/obj one").unwrap().body, b"short");
    err(
        &c.request("DELETE", &Client::path("alpha", ""), &[], &[], &[])
            .unwrap(),
        409,
        "BucketNotEmpty",
    );
    assert_eq!(c.delete("alpha", "dir/obj one").unwrap().status, 204);
    assert_eq!(c.delete("alpha", "dir/obj one").unwrap().status, 204);
    err(&c.get("alpha", "dir/obj one").unwrap(), 404, "NoSuchKey");

    // DeleteObjects.
    for k in ["d1", "d2", "d3"] {
        ok(&c.put("beta", k, k.as_bytes()).unwrap());
    }
    let body = b"<Delete><Object><Key>d1</Key></Object><Object><Key>d3</Key></Object><Object><Key>never</Key></Object></Delete>";
    let r = c
        .request(
            "POST",
            &Client::path("beta", ""),
            &[("delete", "")],
            &[("content-md5", &md5_b64(body))],
            body,
        )
        .unwrap();
    ok(&r);
    assert_eq!(all(&r.body, "Key"), ["d1", "d3", "never"]);
    err(&c.get("beta", "d1").unwrap(), 404, "NoSuchKey");
    assert_eq!(c.get("beta", "d2").unwrap().body, b"d2");

    // Delete buckets.
    ok(&c
        .request("DELETE", &Client::path("alpha", ""), &[], &[], &[])
        .unwrap());
    err(
        &c.request("DELETE", &Client::path("alpha", ""), &[], &[], &[])
            .unwrap(),
        404,
        "NoSuchBucket",
    );
    drop(srv.stop());
}

#[test]
fn list_objects_v2_prefix_delimiter_pages_start_after() {
    let srv = start(S3Config::default());
    let mut c = srv.client();
    ok(&c.create_bucket("list").unwrap());
    let keys = ["a", "a/1", "a/2", "a/b/3", "b", "b/4", "c/5", "c/6", "d"];
    for k in keys {
        ok(&c.put("list", k, k.as_bytes()).unwrap());
    }
    let list = |c: &mut Client, q: &[(&str, &str)]| {
        let mut q2 = vec![("list-type", "2")];
        q2.extend_from_slice(q);
        let r = c
            .request("GET", &Client::path("list", ""), &q2, &[], &[])
            .unwrap();
        ok(&r);
        r
    };
    let r = list(&mut c, &[]);
    assert_eq!(all(&r.body, "Key"), keys);
    let r = list(&mut c, &[("delimiter", "/")]);
    assert_eq!(all(&r.body, "Key"), ["a", "b", "d"]);
    let prefixes: Vec<String> = all(&r.body, "Prefix")
        .into_iter()
        .filter(|p| !p.is_empty())
        .collect();
    assert_eq!(prefixes, ["a/", "b/", "c/"]);
    let r = list(&mut c, &[("prefix", "a/"), ("delimiter", "/")]);
    assert_eq!(all(&r.body, "Key"), ["a/1", "a/2"]);
    assert!(all(&r.body, "Prefix").contains(&"a/b/".to_string()));
    let r = list(&mut c, &[("start-after", "b")]);
    assert_eq!(all(&r.body, "Key"), ["b/4", "c/5", "c/6", "d"]);
    // Pages of 2, with and without a delimiter, rebuild the whole listing.
    for delim in [None, Some("/")] {
        let mut seen = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let mut q = vec![("max-keys", "2")];
            if let Some(d) = delim {
                q.push(("delimiter", d));
            }
            if let Some(t) = &token {
                q.push(("continuation-token", t.as_str()));
            }
            let r = list(&mut c, &q);
            assert!(all(&r.body, "KeyCount")[0].parse::<usize>().unwrap() <= 2);
            seen.extend(all(&r.body, "Key"));
            if delim.is_some() {
                seen.extend(
                    all(&r.body, "Prefix")
                        .into_iter()
                        .filter(|p| p.ends_with('/')),
                );
            }
            match xml_field(&r.body, "NextContinuationToken") {
                Some(t) => token = Some(t),
                None => break,
            }
        }
        seen.sort();
        let want: Vec<String> = match delim {
            None => keys.iter().map(|k| k.to_string()).collect(),
            Some(_) => ["a", "a/", "b", "b/", "c/", "d"]
                .iter()
                .map(|k| k.to_string())
                .collect(),
        };
        assert_eq!(seen, want, "delimiter {delim:?}");
    }
    // ListObjects (v1) with a marker, as s3cmd uses it.
    let r = c
        .request(
            "GET",
            &Client::path("list", ""),
            &[("marker", "c/5")],
            &[],
            &[],
        )
        .unwrap();
    ok(&r);
    assert_eq!(all(&r.body, "Key"), ["c/6", "d"]);
    let r = c
        .request(
            "GET",
            &Client::path("list", ""),
            &[("list-type", "2"), ("continuation-token", "zz")],
            &[],
            &[],
        )
        .unwrap();
    err(&r, 400, "InvalidArgument");
    drop(srv.stop());
}

#[test]
fn multipart_upload_create_parts_list_complete_abort() {
    let config = S3Config {
        limits: s3::Limits {
            min_part_bytes: 1000,
            ..s3::Limits::default()
        },
        ..S3Config::default()
    };
    let srv = start(config);
    let mut c = srv.client();
    ok(&c.create_bucket("mpu").unwrap());
    let path = Client::path("mpu", "big/object");
    let r = c
        .request(
            "POST",
            &path,
            &[("uploads", "")],
            &[("content-type", "text/x-parts"), ("x-amz-meta-k", "v")],
            &[],
        )
        .unwrap();
    ok(&r);
    let id = xml_field(&r.body, "UploadId").unwrap();
    let parts: Vec<Vec<u8>> = vec![payload(10, 1500), payload(11, 1200), payload(12, 7)];
    let mut etags = Vec::new();
    for (i, p) in parts.iter().enumerate() {
        let n = (i + 1).to_string();
        let r = c
            .request(
                "PUT",
                &path,
                &[("partNumber", &n), ("uploadId", &id)],
                &[],
                p,
            )
            .unwrap();
        ok(&r);
        assert_eq!(r.header("etag").unwrap(), format!("\"{}\"", md5_hex(p)));
        etags.push(r.header("etag").unwrap().to_string());
    }
    // Part 2 again: the newer one counts.
    let p2 = payload(13, 1100);
    let r = c
        .request(
            "PUT",
            &path,
            &[("partNumber", "2"), ("uploadId", &id)],
            &[],
            &p2,
        )
        .unwrap();
    ok(&r);
    etags[1] = r.header("etag").unwrap().to_string();
    let r = c
        .request("GET", &path, &[("uploadId", &id)], &[], &[])
        .unwrap();
    ok(&r);
    assert_eq!(all(&r.body, "PartNumber"), ["1", "2", "3"]);
    assert_eq!(all(&r.body, "Size"), ["1500", "1100", "7"]);
    let r = c
        .request(
            "GET",
            &path,
            &[("uploadId", &id), ("max-parts", "2")],
            &[],
            &[],
        )
        .unwrap();
    assert_eq!(xml_field(&r.body, "IsTruncated").as_deref(), Some("true"));

    let complete = |parts: &[(usize, &str)]| -> Vec<u8> {
        let mut x = String::from("<CompleteMultipartUpload>");
        for (n, e) in parts {
            x.push_str(&format!(
                "<Part><PartNumber>{n}</PartNumber><ETag>{e}</ETag></Part>"
            ));
        }
        x.push_str("</CompleteMultipartUpload>");
        x.into_bytes()
    };
    // Refusals: a part never uploaded, a wrong ETag, parts out of order, a small middle part.
    let r = c
        .request(
            "POST",
            &path,
            &[("uploadId", &id)],
            &[],
            &complete(&[(1, &etags[0]), (4, &etags[0])]),
        )
        .unwrap();
    err(&r, 400, "InvalidPart");
    let r = c
        .request(
            "POST",
            &path,
            &[("uploadId", &id)],
            &[],
            &complete(&[(1, &etags[1])]),
        )
        .unwrap();
    err(&r, 400, "InvalidPart");
    let r = c
        .request(
            "POST",
            &path,
            &[("uploadId", &id)],
            &[],
            &complete(&[(2, &etags[1]), (1, &etags[0])]),
        )
        .unwrap();
    err(&r, 400, "InvalidPartOrder");
    let r = c
        .request(
            "POST",
            &path,
            &[("uploadId", &id)],
            &[],
            &complete(&[(3, &etags[2]), (4, &etags[2])]),
        )
        .unwrap();
    assert_eq!(r.status, 400);

    let r = c
        .request(
            "POST",
            &path,
            &[("uploadId", &id)],
            &[],
            &complete(&[(1, &etags[0]), (2, &etags[1]), (3, &etags[2])]),
        )
        .unwrap();
    ok(&r);
    // The multipart ETag: MD5 of the parts' MD5s, then "-3".
    let mut cat = Vec::new();
    for p in [&parts[0], &p2, &parts[2]] {
        use md5::{Digest, Md5};
        cat.extend_from_slice(&Md5::digest(p));
    }
    let want_etag = format!("{}-3", md5_hex(&cat));
    assert!(
        String::from_utf8_lossy(&r.body).contains(&want_etag),
        "{}",
        String::from_utf8_lossy(&r.body)
    );
    let r = c.get("mpu", "big/object").unwrap();
    ok(&r);
    let mut whole = parts[0].clone();
    whole.extend_from_slice(&p2);
    whole.extend_from_slice(&parts[2]);
    assert_eq!(r.body, whole);
    assert_eq!(r.header("content-type"), Some("text/x-parts"));
    assert_eq!(r.header("x-amz-meta-k"), Some("v"));
    assert_eq!(r.header("etag").unwrap(), format!("\"{want_etag}\""));
    // The upload is gone.
    let r = c
        .request("GET", &path, &[("uploadId", &id)], &[], &[])
        .unwrap();
    err(&r, 404, "NoSuchUpload");

    // Abort.
    let r = c
        .request("POST", &path, &[("uploads", "")], &[], &[])
        .unwrap();
    let id2 = xml_field(&r.body, "UploadId").unwrap();
    ok(&c
        .request(
            "PUT",
            &path,
            &[("partNumber", "1"), ("uploadId", &id2)],
            &[],
            b"abc",
        )
        .unwrap());
    assert_eq!(
        c.request("DELETE", &path, &[("uploadId", &id2)], &[], &[])
            .unwrap()
            .status,
        204
    );
    let r = c
        .request(
            "PUT",
            &path,
            &[("partNumber", "2"), ("uploadId", &id2)],
            &[],
            b"abc",
        )
        .unwrap();
    err(&r, 404, "NoSuchUpload");
    let r = c
        .request(
            "PUT",
            &path,
            &[("partNumber", "1"), ("uploadId", "not-an-id")],
            &[],
            b"abc",
        )
        .unwrap();
    err(&r, 404, "NoSuchUpload");
    // The completed object is still whole.
    assert_eq!(c.get("mpu", "big/object").unwrap().body, whole);
    drop(srv.stop());
}

#[test]
fn wrong_signatures_unknown_keys_and_presigned_urls() {
    let srv = start(S3Config::default());
    let addr = srv.addr.to_string();
    let mut c = srv.client();
    ok(&c.create_bucket("sec").unwrap());
    ok(&c.put("sec", "k", b"secret bytes").unwrap());

    let mut wrong = Client::new(&addr, ACCESS, "not-the-secret");
    err(
        &wrong.get("sec", "k").unwrap(),
        403,
        "SignatureDoesNotMatch",
    );
    err(
        &wrong.put("sec", "k", b"forged").unwrap(),
        403,
        "SignatureDoesNotMatch",
    );
    let mut unknown = Client::new(&addr, "nobody", SECRET);
    err(&unknown.get("sec", "k").unwrap(), 403, "InvalidAccessKeyId");
    // No signature at all.
    let r = c
        .raw(
            "GET",
            format!("GET /sec/k HTTP/1.1\r\nhost: {addr}\r\n\r\n").as_bytes(),
            &[],
        )
        .unwrap();
    err(&r, 403, "AccessDenied");
    // A signed payload hash that does not match the body.
    let mut signing = srv.client();
    signing.sign_payload = true;
    ok(&signing.put("sec", "signed", b"payload").unwrap());
    assert_eq!(c.get("sec", "signed").unwrap().body, b"payload");
    assert_eq!(
        c.get("sec", "k").unwrap().body,
        b"secret bytes",
        "forged PUTs changed nothing"
    );

    // A request dated an hour ago (a replay of a captured request) or an hour ahead.
    for offset in [-3600, 3600] {
        let mut skewed = srv.client();
        skewed.clock_offset_s = offset;
        err(
            &skewed.get("sec", "k").unwrap(),
            403,
            "RequestTimeTooSkewed",
        );
    }
    let mut near = srv.client();
    near.clock_offset_s = -300;
    ok(&near.get("sec", "k").unwrap());

    // Presigned URLs: valid, expired, altered, other key, valid for more than 7 days.
    let now = SystemTime::now();
    let url = c.presign("GET", "/sec/k", 300, now);
    let r = c.get_url(&url).unwrap();
    ok(&r);
    assert_eq!(r.body, b"secret bytes");
    let old = c.presign("GET", "/sec/k", 60, now - Duration::from_secs(3600));
    let r = c.get_url(&old).unwrap();
    err(&r, 403, "AccessDenied");
    let altered = url.replace("/sec/k", "/sec/signed");
    err(&c.get_url(&altered).unwrap(), 403, "SignatureDoesNotMatch");
    let stretched = url.replace("X-Amz-Expires=300", "X-Amz-Expires=999999");
    err(
        &c.get_url(&stretched).unwrap(),
        403,
        "SignatureDoesNotMatch",
    );
    let forged = wrong.presign("GET", "/sec/k", 300, now);
    err(&c.get_url(&forged).unwrap(), 403, "SignatureDoesNotMatch");
    let long = c.presign("GET", "/sec/k", 8 * 24 * 3600, now);
    assert_eq!(c.get_url(&long).unwrap().status, 400);
    // A presigned PUT.
    let put = c.presign("PUT", "/sec/up", 300, now);
    let head = format!("PUT {put} HTTP/1.1\r\nhost: {addr}\r\ncontent-length: 3\r\n\r\n");
    ok(&c.raw("PUT", head.as_bytes(), b"abc").unwrap());
    assert_eq!(c.get("sec", "up").unwrap().body, b"abc");
    drop(srv.stop());
}

#[test]
fn acknowledged_objects_survive_a_restart() {
    let srv = start(S3Config::default());
    let mut c = srv.client();
    ok(&c.create_bucket("keep").unwrap());
    for i in 0..50u64 {
        ok(&c
            .put("keep", &format!("k{i}"), &payload(i, (i * 1000) as usize))
            .unwrap());
    }
    ok(&c.delete("keep", "k7").unwrap());
    let store = srv.stop();
    // A clean close and reopen of the device, then a new server on it.
    let device = store.close().unwrap();
    let mut preset = flash::preset("tiny").unwrap();
    preset.geometry.blocks_per_plane = 128;
    let cfg = osd::OsdConfig {
        fml: fml::FmlConfig::for_blocks(preset.gang.superblocks(&preset.geometry)),
        ..osd::OsdConfig::default()
    };
    let store = osd::ObjectStore::open(device, cfg).unwrap();
    let srv = start_with(store, S3Config::default());
    let mut c = srv.client();
    for i in 0..50u64 {
        let r = c.get("keep", &format!("k{i}")).unwrap();
        if i == 7 {
            err(&r, 404, "NoSuchKey");
        } else {
            ok(&r);
            assert_eq!(r.body, payload(i, (i * 1000) as usize), "k{i}");
        }
    }
    drop(srv.stop());
}
