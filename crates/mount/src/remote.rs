//! OSSD-13 §III's two-machine stack: OFS runs on the host and sends OSD commands over the wire
//! protocol (`crates/proto`) to a target (`ossd serve`) that runs the object store and the
//! flash management below it.
//!
//! ```text
//!   kernel FUSE -> OssdFuse -> RemoteOfs = Ofs<Client> --TCP, CAPKEY--> ossd serve -> ObjectStore
//! ```
//!
//! Every OFS call becomes one or more OSD commands, each one round trip, authenticated with a
//! capability the client mints from the master key. The target collects garbage itself; a
//! FLUSH over the wire is durable when the target replies. One host mounts a target's OFS at a
//! time: the target does not arbitrate between two hosts that both mount it (each caches
//! directory and inode state), which is the same rule as for two kernels mounting one disk.

use std::time::Duration;

use client::{Client, Credentials};
use ofs::{Ofs, OfsConfig};
use osd::Osd;
use serde_json::json;
use vfs::{FileSystem, FsError};

use crate::{stats, Backend, Timing};

/// OFS on a remote target.
pub type RemoteOfs = Ofs<Client>;

/// How long a command may wait for the target's reply before the call fails with EIO (a
/// target that went away must not hang the programs using the mount).
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(30);

/// Why a remote mount could not start.
#[derive(Debug, thiserror::Error)]
pub enum RemoteError {
    /// The connection or the HELLO failed.
    #[error("connecting to {addr}: {error}")]
    Connect {
        /// The target's address.
        addr: String,
        /// Why.
        error: client::ClientError,
    },
    /// OFS refused to mount or format the target's store.
    #[error("{addr}: {error}")]
    Fs {
        /// The target's address.
        addr: String,
        /// OFS's error.
        error: FsError,
    },
}

/// Connects to the target at `addr` and mounts the OFS its store holds; with `format`, a
/// store that holds none is formatted first (an OFS already there is never formatted over).
pub fn connect(
    addr: &str,
    credentials: Credentials,
    format: Option<OfsConfig>,
) -> Result<RemoteOfs, RemoteError> {
    let connect_err = |error| RemoteError::Connect {
        addr: addr.to_string(),
        error,
    };
    let fs_err = |error| RemoteError::Fs {
        addr: addr.to_string(),
        error,
    };
    let mut client = Client::connect(addr, credentials).map_err(connect_err)?;
    client
        .set_timeout(Some(REPLY_TIMEOUT))
        .map_err(connect_err)?;
    match Ofs::mount_or_return(client) {
        Ok(fs) => Ok(fs),
        Err((FsError::Invalid(why), client)) => match format {
            Some(config) => Ofs::format(*client, config).map_err(fs_err),
            None => Err(fs_err(FsError::Invalid(format!(
                "{why}; format it with ossd mount --remote ... --format"
            )))),
        },
        Err((e, _)) => Err(fs_err(e)),
    }
}

/// The device part of a remote mount's statistics: what the target's DESCRIBE says (its device
/// counters stay on the target) and OFS's own counters.
pub fn device_json(ofs: &mut RemoteOfs) -> serde_json::Value {
    let counters: serde_json::Map<String, serde_json::Value> = ofs
        .counters()
        .into_iter()
        .map(|(k, v)| (k.to_string(), json!(v)))
        .collect();
    match ofs.store_mut().describe() {
        Ok(d) => json!({
            "remote_target": true,
            "unit_bytes": d.unit_bytes,
            "capacity_bytes": d.capacity_bytes,
            "used_bytes": d.used_bytes,
            "placement": d.placement,
            "ofs": counters,
        }),
        Err(e) => json!({ "remote_target": true, "error": e.to_string(), "ofs": counters }),
    }
}

impl Backend for RemoteOfs {
    type Fs = Self;

    fn call<T>(&mut self, f: impl FnOnce(&mut Self) -> T) -> Result<T, FsError> {
        Ok(f(self))
    }

    fn stats(&mut self) -> Result<serde_json::Value, FsError> {
        Ok(stats::mount_json(
            "OFS (direct calls) -> OSD commands to a remote target",
            Timing::None,
            device_json(self),
            None,
            json!({}),
        ))
    }

    fn shutdown(self) -> Result<(), FsError> {
        // Marks the file system clean and flushes the target's device: durable on reply.
        self.unmount().map(drop)
    }
}
