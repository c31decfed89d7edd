//! Bad input over the wire gets an error or a closed connection, never a panic or corrupted
//! data, and the server keeps serving: absurd and wrong lengths, truncated bodies, stalled
//! headers and bodies, bodies over the limit, garbage. Then 16 clients mixing reads and writes
//! for a fixed time, every read checked.

mod common;

use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::time::{Duration, Instant};

use common::*;
use s3::client::Client;
use s3::S3Config;

fn config() -> S3Config {
    S3Config {
        limits: s3::Limits {
            max_object_bytes: 1 << 20,
            ..s3::Limits::default()
        },
        header_timeout: Duration::from_secs(1),
        body_timeout: Duration::from_secs(1),
        ..S3Config::default()
    }
}

/// Sends `head` and `body` on a fresh connection, optionally half-closing it, and returns what
/// the server answered before closing (empty when it closed without a word).
fn exchange(addr: &str, head: &[u8], body: &[u8], half_close: bool) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let _ = s.write_all(head);
    let _ = s.write_all(body);
    if half_close {
        let _ = s.shutdown(Shutdown::Write);
    }
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
        }
        if out.windows(8).any(|w| w == b"</Error>") {
            break;
        }
    }
    let out = String::from_utf8_lossy(&out).to_string();
    eprintln!("answer: {:?}", out.lines().next().unwrap_or("(closed)"));
    out
}

fn still_serving(c: &mut Client) {
    let r = c.put("robust", "alive", b"yes").unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(c.get("robust", "alive").unwrap().body, b"yes");
}

fn absent(c: &mut Client, key: &str) {
    let r = c.get("robust", key).unwrap();
    assert_eq!(
        (r.status, r.error_code().as_deref()),
        (404, Some("NoSuchKey")),
        "{key} must not exist"
    );
}

#[test]
fn bad_requests_get_errors_or_closed_connections() {
    let srv = start(config());
    let addr = srv.addr.to_string();
    let mut c = srv.client();
    assert_eq!(c.create_bucket("robust").unwrap().status, 200);
    let path = Client::path("robust", "k");

    // An absurd Content-Length: refused before any body byte is read.
    let head = c.signed_head("PUT", &path, &[], &[], 1 << 60, "UNSIGNED-PAYLOAD");
    let out = exchange(&addr, head.as_bytes(), b"", false);
    assert!(out.contains("EntityTooLarge") || out.is_empty(), "{out}");
    absent(&mut c, "k");

    // A Content-Length that does not parse.
    let head = c
        .signed_head("PUT", &path, &[], &[], 5, "UNSIGNED-PAYLOAD")
        .replace("content-length: 5", "content-length: 5x");
    let out = exchange(&addr, head.as_bytes(), b"12345", false);
    assert!(out.is_empty() || out.starts_with("HTTP/1.1 4"), "{out}");
    absent(&mut c, "k");

    // A body over the limit, with its true length declared.
    let big = vec![7u8; (1 << 20) + 1];
    let head = c.signed_head("PUT", &path, &[], &[], big.len() as u64, "UNSIGNED-PAYLOAD");
    let out = exchange(&addr, head.as_bytes(), &big, false);
    assert!(out.contains("EntityTooLarge") || out.is_empty(), "{out}");
    absent(&mut c, "k");

    // A chunked body (no length) that grows past the limit.
    let head = c
        .signed_head(
            "PUT",
            &path,
            &[],
            &[("transfer-encoding", "chunked")],
            0,
            "UNSIGNED-PAYLOAD",
        )
        .replace("content-length: 0\r\n", "");
    let mut body = Vec::new();
    for _ in 0..20 {
        body.extend_from_slice(format!("{:x}\r\n", 100_000).as_bytes());
        body.extend_from_slice(&[1u8; 100_000]);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(b"0\r\n\r\n");
    let out = exchange(&addr, head.as_bytes(), &body, false);
    assert!(out.starts_with("HTTP/1.1 4") || out.is_empty(), "{out}");
    absent(&mut c, "k");

    // A truncated body: 1,000 bytes declared, 10 sent, then the client closes its side.
    let head = c.signed_head("PUT", &path, &[], &[], 1000, "UNSIGNED-PAYLOAD");
    let out = exchange(&addr, head.as_bytes(), &[1u8; 10], true);
    assert!(!out.starts_with("HTTP/1.1 200"), "{out}");
    absent(&mut c, "k");

    // A body that stalls: refused after the body timeout, not held forever.
    let t = Instant::now();
    let mut s = TcpStream::connect(&addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let head = c.signed_head("PUT", &path, &[], &[], 1000, "UNSIGNED-PAYLOAD");
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(&[2u8; 10]).unwrap();
    let mut buf = vec![0u8; 4096];
    let n = s.read(&mut buf).unwrap_or(0);
    assert!(
        t.elapsed() < Duration::from_secs(9),
        "stalled body held {:?}",
        t.elapsed()
    );
    let out = String::from_utf8_lossy(&buf[..n]).to_string();
    assert!(out.is_empty() || out.starts_with("HTTP/1.1 4"), "{out}");
    drop(s);
    absent(&mut c, "k");

    // Headers that never finish: the connection is closed after the header timeout.
    let t = Instant::now();
    let mut s = TcpStream::connect(&addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"PUT /robust/k HTTP/1.1\r\nhost: x\r\n")
        .unwrap();
    let n = s.read(&mut buf).unwrap_or(0);
    assert!(
        t.elapsed() < Duration::from_secs(9),
        "slow headers held {:?}",
        t.elapsed()
    );
    let out = String::from_utf8_lossy(&buf[..n]).to_string();
    assert!(!out.starts_with("HTTP/1.1 2"), "{out}");
    drop(s);

    // Garbage, a huge header, an empty key, metadata over S3's 2 KiB.
    let out = exchange(&addr, b"\x00\x01GARBAGE\r\n\r\n", b"", false);
    assert!(out.is_empty() || out.starts_with("HTTP/1.1 4"), "{out}");
    let huge = format!(
        "GET /robust/alive HTTP/1.1\r\nhost: x\r\nx-big: {}\r\n\r\n",
        "a".repeat(1 << 20)
    );
    let out = exchange(&addr, huge.as_bytes(), b"", false);
    assert!(out.is_empty() || out.starts_with("HTTP/1.1 4"), "{out}");
    let meta = "m".repeat(3000);
    let r = c
        .request(
            "PUT",
            &path,
            &[],
            &[("x-amz-meta-big", meta.as_str())],
            b"x",
        )
        .unwrap();
    assert_eq!(r.status, 400, "{}", String::from_utf8_lossy(&r.body));
    absent(&mut c, "k");
    let long_key = "k".repeat(1025);
    let r = c.put("robust", &long_key, b"x").unwrap();
    assert_eq!(r.status, 400);

    still_serving(&mut c);
    drop(srv.stop());
}

/// Body: 8-byte seed, then bytes derived from it; any read is checkable alone.
fn body(seed: u64) -> Vec<u8> {
    let len = match seed % 10 {
        0 => 1_500_000, // past the streaming threshold
        1 => 0,
        _ => (seed % 97) as usize * 1000 + (seed % 13) as usize,
    };
    let mut v = seed.to_le_bytes().to_vec();
    v.extend(payload(seed, len));
    v
}

fn check(key: &str, data: &[u8]) -> Result<(), String> {
    let seed = u64::from_le_bytes(
        data.get(..8)
            .ok_or_else(|| format!("{key}: {} bytes", data.len()))?
            .try_into()
            .unwrap(),
    );
    if data != body(seed) {
        return Err(format!("{key}: bytes differ from seed {seed}'s"));
    }
    Ok(())
}

#[test]
fn sixteen_clients_mix_reads_and_writes() {
    let srv = start(S3Config::default());
    let addr = srv.addr.to_string();
    let mut c = srv.client();
    assert_eq!(c.create_bucket("mix").unwrap().status, 200);
    const KEYS: u64 = 48;
    let deadline = Instant::now() + Duration::from_secs(3);
    let results: Vec<(u64, u64, u64)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..16u64)
            .map(|t| {
                let addr = addr.clone();
                s.spawn(move || {
                    let mut c = Client::new(&addr, ACCESS, SECRET);
                    let (mut puts, mut gets, mut misses) = (0, 0, 0);
                    let mut i = 0u64;
                    while Instant::now() < deadline {
                        i += 1;
                        let key = format!("k{}", (t * 7919 + i * 31) % KEYS);
                        if i.is_multiple_of(3) {
                            let seed = t << 32 | i;
                            let data = body(seed);
                            let r = c.put("mix", &key, &data).unwrap();
                            assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
                            assert_eq!(
                                r.header("etag").unwrap(),
                                format!("\"{}\"", md5_hex(&data))
                            );
                            puts += 1;
                        } else {
                            let r = c.get("mix", &key).unwrap();
                            match r.status {
                                200 => {
                                    check(&key, &r.body).unwrap();
                                    assert_eq!(
                                        r.header("etag").unwrap(),
                                        format!("\"{}\"", md5_hex(&r.body))
                                    );
                                    gets += 1;
                                }
                                404 => misses += 1,
                                s => panic!("GET {key}: status {s}"),
                            }
                        }
                    }
                    (puts, gets, misses)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let (puts, gets, misses) = results
        .iter()
        .fold((0, 0, 0), |a, r| (a.0 + r.0, a.1 + r.1, a.2 + r.2));
    println!("16 clients, 3 s: {puts} PUTs, {gets} GETs checked, {misses} GETs before the first PUT of their key");
    assert!(puts > 0 && gets > 0);
    // Every key read once more after the storm: whole and consistent.
    for k in 0..KEYS {
        let key = format!("k{k}");
        let r = c.get("mix", &key).unwrap();
        if r.status == 200 {
            check(&key, &r.body).unwrap();
        }
    }
    drop(srv.stop());
}
