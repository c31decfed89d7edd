//! A minimal blocking S3 client: HTTP/1.1 over one kept-alive TCP connection, SigV4 header
//! signing and presigned URLs. It exists for the tests and `ossd bench-net --s3`, so that they
//! need no SDK; ordinary users use boto3, the AWS CLI or s3cmd.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

/// Why a request got no HTTP response.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// Connecting, sending or receiving failed.
    #[error("{addr}: {source}")]
    Io {
        /// The server.
        addr: String,
        /// Why.
        source: std::io::Error,
    },
    /// The server's reply is not HTTP this client reads (says what).
    #[error("{addr}: bad response: {what}")]
    BadResponse {
        /// The server.
        addr: String,
        /// What was wrong.
        what: String,
    },
}

/// An HTTP response.
#[derive(Clone, Debug)]
pub struct Response {
    /// Status code.
    pub status: u16,
    /// Headers, names lower-case.
    pub headers: Vec<(String, String)>,
    /// Body.
    pub body: Vec<u8>,
}

impl Response {
    /// A header's value.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The `<Code>` of an S3 XML error document.
    pub fn error_code(&self) -> Option<String> {
        xml_field(&self.body, "Code")
    }
}

/// The text of the first `<tag>...</tag>` in `xml`.
pub fn xml_field(xml: &[u8], tag: &str) -> Option<String> {
    let s = std::str::from_utf8(xml).ok()?;
    let open = format!("<{tag}>");
    let start = s.find(&open)? + open.len();
    let end = s[start..].find(&format!("</{tag}>"))? + start;
    Some(s[start..end].to_string())
}

/// Percent-encodes as SigV4 wants (RFC 3986 unreserved characters kept; `/` kept when asked).
pub fn uri_encode(s: &str, keep_slash: bool) -> String {
    let mut out = String::with_capacity(s.len());
    for &b in s.as_bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'_' | b'-' | b'~' | b'.' => {
                out.push(b as char)
            }
            b'/' if keep_slash => out.push('/'),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

fn hex(b: &[u8]) -> String {
    crate::dir::hex(b)
}

fn sha256_hex(b: &[u8]) -> String {
    hex(&Sha256::digest(b))
}

fn hmac(key: &[u8], data: &[u8]) -> Vec<u8> {
    // HMAC takes keys of any length: `new_from_slice` cannot fail for it.
    match Hmac::<Sha256>::new_from_slice(key) {
        Ok(mut m) => {
            m.update(data);
            m.finalize().into_bytes().to_vec()
        }
        Err(_) => Vec::new(),
    }
}

/// SigV4's signing key for a day (`YYYYMMDD`), region and service.
fn signing_key(secret: &str, day: &str, region: &str, service: &str) -> Vec<u8> {
    let k = hmac(format!("AWS4{secret}").as_bytes(), day.as_bytes());
    let k = hmac(&k, region.as_bytes());
    let k = hmac(&k, service.as_bytes());
    hmac(&k, b"aws4_request")
}

/// `YYYYMMDDTHHMMSSZ` of a time (UTC).
pub fn amz_date(t: SystemTime) -> String {
    let secs = t
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}{m:02}{d:02}T{:02}{:02}{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// A blocking S3 client for one server.
pub struct Client {
    addr: String,
    access_key: String,
    secret_key: String,
    region: String,
    /// Sign the payload's SHA-256 (true) or send `UNSIGNED-PAYLOAD` (false, the default).
    pub sign_payload: bool,
    /// Read and write timeout of the connection.
    pub timeout: Duration,
    /// Seconds added to the clock when dating a request (tests of clock skew).
    pub clock_offset_s: i64,
    conn: Option<BufReader<TcpStream>>,
}

impl Client {
    /// A client of `addr` (host:port) with these credentials; it connects on first use.
    pub fn new(addr: &str, access_key: &str, secret_key: &str) -> Self {
        Client {
            addr: addr.to_string(),
            access_key: access_key.to_string(),
            secret_key: secret_key.to_string(),
            region: "us-east-1".into(),
            sign_payload: false,
            timeout: Duration::from_secs(60),
            clock_offset_s: 0,
            conn: None,
        }
    }

    fn io(&self, source: std::io::Error) -> ClientError {
        ClientError::Io {
            addr: self.addr.clone(),
            source,
        }
    }

    fn signing_key(&self, day: &str) -> Vec<u8> {
        signing_key(&self.secret_key, day, &self.region, "s3")
    }

    fn canonical_query(query: &[(String, String)]) -> String {
        let mut q: Vec<(String, String)> = query
            .iter()
            .map(|(k, v)| (uri_encode(k, false), uri_encode(v, false)))
            .collect();
        q.sort();
        q.iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join("&")
    }

    /// The path of `bucket` and `key`, encoded.
    pub fn path(bucket: &str, key: &str) -> String {
        if key.is_empty() {
            format!("/{}", uri_encode(bucket, false))
        } else {
            format!("/{}/{}", uri_encode(bucket, false), uri_encode(key, true))
        }
    }

    /// A presigned URL path and query (`/bucket/key?X-Amz-...`) for `method`, valid
    /// `expires_s` seconds from `now`.
    pub fn presign(&self, method: &str, path: &str, expires_s: u64, now: SystemTime) -> String {
        let date = amz_date(now);
        let day = &date[..8];
        let scope = format!("{day}/{}/s3/aws4_request", self.region);
        let query = vec![
            (
                "X-Amz-Algorithm".to_string(),
                "AWS4-HMAC-SHA256".to_string(),
            ),
            (
                "X-Amz-Credential".to_string(),
                format!("{}/{scope}", self.access_key),
            ),
            ("X-Amz-Date".to_string(), date.clone()),
            ("X-Amz-Expires".to_string(), expires_s.to_string()),
            ("X-Amz-SignedHeaders".to_string(), "host".to_string()),
        ];
        let cq = Self::canonical_query(&query);
        let canonical = format!(
            "{method}\n{path}\n{cq}\nhost:{}\n\nhost\nUNSIGNED-PAYLOAD",
            self.addr
        );
        let to_sign = format!(
            "AWS4-HMAC-SHA256\n{date}\n{scope}\n{}",
            sha256_hex(canonical.as_bytes())
        );
        let sig = hex(&hmac(&self.signing_key(day), to_sign.as_bytes()));
        format!("{path}?{cq}&X-Amz-Signature={sig}")
    }

    /// Sends a SigV4-signed request and reads the response. `path` is encoded
    /// ([`Client::path`]); `query` and `headers` are raw.
    pub fn request(
        &mut self,
        method: &str,
        path: &str,
        query: &[(&str, &str)],
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Result<Response, ClientError> {
        let payload = if self.sign_payload {
            sha256_hex(body)
        } else {
            "UNSIGNED-PAYLOAD".to_string()
        };
        let head = self.signed_head(method, path, query, headers, body.len() as u64, &payload);
        self.raw(method, head.as_bytes(), body)
    }

    /// The head (request line and headers, with the blank line) of a SigV4-signed request
    /// declaring `content_length` body bytes whose SHA-256 is `payload` (or
    /// `UNSIGNED-PAYLOAD`); the body is the caller's to send (tests send wrong ones).
    pub fn signed_head(
        &self,
        method: &str,
        path: &str,
        query: &[(&str, &str)],
        headers: &[(&str, &str)],
        content_length: u64,
        payload: &str,
    ) -> String {
        let query: Vec<(String, String)> = query
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let now = SystemTime::now();
        let skewed = if self.clock_offset_s >= 0 {
            now + Duration::from_secs(self.clock_offset_s as u64)
        } else {
            now - Duration::from_secs(self.clock_offset_s.unsigned_abs())
        };
        let date = amz_date(skewed);
        let mut signed: Vec<(String, String)> = vec![
            ("host".into(), self.addr.clone()),
            ("x-amz-content-sha256".into(), payload.to_string()),
            ("x-amz-date".into(), date.clone()),
        ];
        for (k, v) in headers {
            let k = k.to_ascii_lowercase();
            if k.starts_with("x-amz-") || k == "content-type" || k == "content-md5" {
                signed.push((k, v.trim().to_string()));
            }
        }
        signed.sort();
        let cq = Self::canonical_query(&query);
        let canonical_headers: String = signed.iter().map(|(k, v)| format!("{k}:{v}\n")).collect();
        let names = signed
            .iter()
            .map(|(k, _)| k.as_str())
            .collect::<Vec<_>>()
            .join(";");
        let canonical = format!("{method}\n{path}\n{cq}\n{canonical_headers}\n{names}\n{payload}");
        let day = &date[..8];
        let scope = format!("{day}/{}/s3/aws4_request", self.region);
        let to_sign = format!(
            "AWS4-HMAC-SHA256\n{date}\n{scope}\n{}",
            sha256_hex(canonical.as_bytes())
        );
        let sig = hex(&hmac(&self.signing_key(day), to_sign.as_bytes()));
        let auth = format!(
            "AWS4-HMAC-SHA256 Credential={}/{scope}, SignedHeaders={names}, Signature={sig}",
            self.access_key
        );
        let mut head = format!(
            "{method} {path}{}{cq} HTTP/1.1\r\nhost: {}\r\nx-amz-date: {date}\r\nx-amz-content-sha256: {payload}\r\nauthorization: {auth}\r\ncontent-length: {content_length}\r\n",
            if cq.is_empty() { "" } else { "?" },
            self.addr,
        );
        for (k, v) in headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        head.push_str("\r\n");
        head
    }

    /// Sends bytes as they are (for presigned URLs and malformed requests) and reads the
    /// response; `method` tells whether a body follows.
    pub fn raw(&mut self, method: &str, head: &[u8], body: &[u8]) -> Result<Response, ClientError> {
        // A kept-alive connection the server closed meanwhile fails at once: retry on a fresh one.
        let reused = self.conn.is_some();
        match self.exchange(method, head, body) {
            Err(_) if reused => {
                self.conn = None;
                self.exchange(method, head, body)
            }
            r => r,
        }
    }

    /// A GET of a presigned URL path.
    pub fn get_url(&mut self, url_path: &str) -> Result<Response, ClientError> {
        let head = format!("GET {url_path} HTTP/1.1\r\nhost: {}\r\n\r\n", self.addr);
        self.raw("GET", head.as_bytes(), &[])
    }

    fn exchange(
        &mut self,
        method: &str,
        head: &[u8],
        body: &[u8],
    ) -> Result<Response, ClientError> {
        if self.conn.is_none() {
            let s = TcpStream::connect(&self.addr).map_err(|e| self.io(e))?;
            let _ = s.set_nodelay(true);
            s.set_read_timeout(Some(self.timeout))
                .map_err(|e| self.io(e))?;
            s.set_write_timeout(Some(self.timeout))
                .map_err(|e| self.io(e))?;
            self.conn = Some(BufReader::with_capacity(1 << 16, s));
        }
        let r = self.exchange_on(method, head, body);
        if r.is_err() {
            self.conn = None;
        }
        r
    }

    fn exchange_on(
        &mut self,
        method: &str,
        head: &[u8],
        body: &[u8],
    ) -> Result<Response, ClientError> {
        let addr = self.addr.clone();
        let bad = |what: String| ClientError::BadResponse {
            addr: addr.clone(),
            what,
        };
        let io = |source| ClientError::Io {
            addr: addr.clone(),
            source,
        };
        let Some(conn) = self.conn.as_mut() else {
            return Err(bad("no connection".into()));
        };
        {
            let s = conn.get_mut();
            s.write_all(head).map_err(io)?;
            s.write_all(body).map_err(io)?;
            s.flush().map_err(io)?;
        }
        let mut line = String::new();
        if conn.read_line(&mut line).map_err(io)? == 0 {
            return Err(io(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "connection closed before a response",
            )));
        }
        let status: u16 = line
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| bad(format!("status line {line:?}")))?;
        let mut headers = Vec::new();
        loop {
            line.clear();
            conn.read_line(&mut line).map_err(io)?;
            let l = line.trim_end();
            if l.is_empty() {
                break;
            }
            let (k, v) = l
                .split_once(':')
                .ok_or_else(|| bad(format!("header line {l:?}")))?;
            headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
        }
        let find = |n: &str| headers.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone());
        let mut body = Vec::new();
        let no_body = method == "HEAD" || status == 204 || status == 304;
        if !no_body {
            if find("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
                loop {
                    line.clear();
                    conn.read_line(&mut line).map_err(io)?;
                    let n = usize::from_str_radix(line.trim().split(';').next().unwrap_or(""), 16)
                        .map_err(|_| bad(format!("chunk size {line:?}")))?;
                    let start = body.len();
                    body.resize(start + n, 0);
                    conn.read_exact(&mut body[start..]).map_err(io)?;
                    line.clear();
                    conn.read_line(&mut line).map_err(io)?;
                    if n == 0 {
                        break;
                    }
                }
            } else if let Some(n) = find("content-length") {
                let n: usize = n
                    .parse()
                    .map_err(|_| bad(format!("content-length {n:?}")))?;
                body.resize(n, 0);
                conn.read_exact(&mut body).map_err(io)?;
            } else {
                conn.read_to_end(&mut body).map_err(io)?;
                self.conn = None;
            }
        }
        if find("connection").is_some_and(|v| v.eq_ignore_ascii_case("close")) {
            self.conn = None;
        }
        Ok(Response {
            status,
            headers,
            body,
        })
    }

    /// PUT an object.
    pub fn put(&mut self, bucket: &str, key: &str, data: &[u8]) -> Result<Response, ClientError> {
        self.request("PUT", &Self::path(bucket, key), &[], &[], data)
    }

    /// GET an object.
    pub fn get(&mut self, bucket: &str, key: &str) -> Result<Response, ClientError> {
        self.request("GET", &Self::path(bucket, key), &[], &[], &[])
    }

    /// DELETE an object.
    pub fn delete(&mut self, bucket: &str, key: &str) -> Result<Response, ClientError> {
        self.request("DELETE", &Self::path(bucket, key), &[], &[], &[])
    }

    /// Create a bucket.
    pub fn create_bucket(&mut self, bucket: &str) -> Result<Response, ClientError> {
        self.request("PUT", &Self::path(bucket, ""), &[], &[], &[])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_and_encoding() {
        assert_eq!(amz_date(UNIX_EPOCH), "19700101T000000Z");
        let t = UNIX_EPOCH + Duration::from_secs(1_709_210_096); // 2024-02-29 12:34:56
        assert_eq!(amz_date(t), "20240229T123456Z");
        assert_eq!(uri_encode("a b/c~", true), "a%20b/c~");
        assert_eq!(uri_encode("a/b", false), "a%2Fb");
    }

    #[test]
    fn signing_key_matches_aws_example() {
        // The AWS documentation's example secret and scope.
        let k = signing_key(
            "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
            "20150830",
            "us-east-1",
            "iam",
        );
        assert_eq!(
            hex(&k),
            "c4afb1cc5771d871763a393e44b703571b55cc28424d1a5e86da6ed3c154a4b9"
        );
    }
}
