//! Credentials (access key -> secret key) from a TOML file, and s3s's SigV4 lookup over them.
//!
//! ```toml
//! [[credentials]]
//! access_key = "ossdadmin"
//! secret_key = "a secret of at least 8 characters"
//! ```

use std::collections::HashMap;
use std::path::Path;

use s3s::auth::{S3Auth, SecretKey};
use s3s::{s3_error, S3Result};
use serde::Deserialize;

/// Why a credentials file was refused.
#[derive(Debug, thiserror::Error)]
pub enum CredentialError {
    /// The file could not be read.
    #[error("credentials file {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not the TOML this module reads.
    #[error("credentials file {path}: {message}")]
    Parse {
        /// The file.
        path: String,
        /// What is wrong and where (the TOML parser's message).
        message: String,
    },
    /// A credential that cannot be used (says which and why).
    #[error("credentials file {path}: {message}")]
    Invalid {
        /// The file.
        path: String,
        /// What is wrong.
        message: String,
    },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    credentials: Vec<Entry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    access_key: String,
    secret_key: String,
}

/// Access keys and their secret keys.
#[derive(Clone, Default)]
pub struct Credentials {
    keys: HashMap<String, String>,
}

impl std::fmt::Debug for Credentials {
    // Never print secrets.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("access_keys", &self.keys.len())
            .finish()
    }
}

impl Credentials {
    /// Credentials from (access key, secret key) pairs.
    pub fn new<I: IntoIterator<Item = (String, String)>>(pairs: I) -> Self {
        Credentials {
            keys: pairs.into_iter().collect(),
        }
    }

    /// Parses the TOML text of a credentials file (`path` names it in errors).
    pub fn parse(text: &str, path: &str) -> Result<Self, CredentialError> {
        let file: File = toml::from_str(text).map_err(|e| CredentialError::Parse {
            path: path.to_string(),
            message: e.to_string(),
        })?;
        let invalid = |message: String| CredentialError::Invalid {
            path: path.to_string(),
            message,
        };
        if file.credentials.is_empty() {
            return Err(invalid("no [[credentials]] entry".into()));
        }
        let mut keys = HashMap::new();
        for (i, e) in file.credentials.into_iter().enumerate() {
            let ok = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_graphic());
            if !ok(&e.access_key) || !ok(&e.secret_key) || e.secret_key.len() < 8 {
                return Err(invalid(format!(
                    "entry {}: access_key and secret_key must be printable ASCII without spaces, the secret at least 8 characters",
                    i + 1
                )));
            }
            if keys.insert(e.access_key.clone(), e.secret_key).is_some() {
                return Err(invalid(format!(
                    "entry {}: access key {:?} appears twice",
                    i + 1,
                    e.access_key
                )));
            }
        }
        Ok(Credentials { keys })
    }

    /// Reads a credentials file.
    pub fn load(path: &Path) -> Result<Self, CredentialError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| CredentialError::Io {
            path: shown.clone(),
            source,
        })?;
        Self::parse(&text, &shown)
    }

    /// The first access key (in byte order) and its secret: the one tools use.
    pub fn first(&self) -> Option<(&str, &str)> {
        self.keys
            .iter()
            .min_by(|a, b| a.0.cmp(b.0))
            .map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// How many access keys there are.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
}

#[async_trait::async_trait]
impl S3Auth for Credentials {
    async fn get_secret_key(&self, access_key: &str) -> S3Result<SecretKey> {
        match self.keys.get(access_key) {
            Some(s) => Ok(SecretKey::from(s.as_str())),
            None => Err(s3_error!(
                InvalidAccessKeyId,
                "The AWS Access Key Id you provided does not exist in our records."
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_refuses() {
        let c = Credentials::parse(
            "[[credentials]]\naccess_key = \"a\"\nsecret_key = \"12345678\"\n",
            "f",
        )
        .unwrap();
        assert_eq!(c.len(), 1);
        for bad in [
            "",
            "[[credentials]]\naccess_key = \"a\"\nsecret_key = \"short\"\n",
            "[[credentials]]\naccess_key = \"a b\"\nsecret_key = \"12345678\"\n",
            "[[credentials]]\naccess_key = \"a\"\nsecret_key = \"12345678\"\n[[credentials]]\naccess_key = \"a\"\nsecret_key = \"12345678\"\n",
            "[[credentials]]\naccess_key = \"a\"\nsecret_key = \"12345678\"\nextra = 1\n",
        ] {
            assert!(Credentials::parse(bad, "f").is_err(), "{bad}");
        }
    }
}

/// Longest a header-signed request's `x-amz-date` may be from the server's clock (S3's 15 min).
pub const MAX_CLOCK_SKEW_S: i64 = 15 * 60;
/// Longest validity of a presigned URL (S3's 7 days).
pub const MAX_PRESIGNED_EXPIRES_S: u64 = 7 * 24 * 3600;

/// Unix seconds of an `x-amz-date` (`YYYYMMDDTHHMMSSZ`), or `None` if it is not one.
pub fn parse_amz_date(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    if b.len() != 16 || b[8] != b'T' || b[15] != b'Z' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<i64> { s.get(r)?.parse().ok() };
    let (y, m, d) = (num(0..4)?, num(4..6)?, num(6..8)?);
    let (hh, mm, ss) = (num(9..11)?, num(11..13)?, num(13..15)?);
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) || hh > 23 || mm > 59 || ss > 60 {
        return None;
    }
    // Days from 1970-01-01 of a civil date (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days * 86_400 + hh * 3600 + mm * 60 + ss)
}

/// What s3s leaves to the service: every request must be signed (s3s's default), a
/// header-signed request must be dated within [`MAX_CLOCK_SKEW_S`] of the server's clock (this
/// bounds how long a captured request can be replayed), and a presigned URL may not be valid for
/// more than [`MAX_PRESIGNED_EXPIRES_S`].
pub struct Access;

fn now_s() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

#[async_trait::async_trait]
impl s3s::access::S3Access for Access {
    async fn check(&self, cx: &mut s3s::access::S3AccessContext<'_>) -> S3Result<()> {
        if cx.credentials().is_none() {
            return Err(s3_error!(AccessDenied, "Signature is required"));
        }
        let query = cx.uri().query().unwrap_or("");
        if let Some(e) = query
            .split('&')
            .find_map(|kv| kv.strip_prefix("X-Amz-Expires="))
        {
            if e.parse::<u64>()
                .map_or(true, |e| e > MAX_PRESIGNED_EXPIRES_S)
            {
                return Err(s3_error!(
                    AuthorizationQueryParametersError,
                    "X-Amz-Expires must be at most 604800 seconds"
                ));
            }
            return Ok(());
        }
        if cx.headers().contains_key("authorization") {
            let date = cx
                .headers()
                .get("x-amz-date")
                .and_then(|v| v.to_str().ok())
                .and_then(parse_amz_date)
                .ok_or_else(|| {
                    s3_error!(AccessDenied, "a signed request needs a valid x-amz-date")
                })?;
            if (now_s() - date).abs() > MAX_CLOCK_SKEW_S {
                return Err(s3_error!(
                    RequestTimeTooSkewed,
                    "The difference between the request time and the server's time is too large."
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod date_tests {
    use super::*;

    #[test]
    fn amz_dates_parse() {
        assert_eq!(parse_amz_date("19700101T000000Z"), Some(0));
        assert_eq!(parse_amz_date("20240229T123456Z"), Some(1_709_210_096));
        for bad in [
            "",
            "20241301T000000Z",
            "2024-02-29T12:34Z",
            "20240229 123456Z",
        ] {
            assert_eq!(parse_amz_date(bad), None, "{bad}");
        }
    }
}
