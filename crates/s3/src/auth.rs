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
