//! What OFS needs from the object store below it: the OSD command set ([`Osd`], including its
//! DESCRIBE for the write unit and the space), plus the lab's hooks, so that one OFS runs on a
//! local [`ObjectStore`] (the lab, `ossd mount`) and on a remote target over the OSD wire
//! protocol ([`client::Client`]: `ossd mount --remote`, OSSD-13 §III's host/target split).

use client::Client;
use flash::{Flash, Nanos};
use osd::{ObjectStore, Oid, Osd, OsdError};

/// An object store OFS can run on.
pub trait Store: Osd {
    /// Writes `len` bytes that a fingerprint `token` stands for (the lab's fingerprint-mode
    /// data). Only a local store keeps fingerprints; a remote one refuses.
    fn write_token(&mut self, oid: Oid, offset: u64, len: u64, token: u64) -> Result<(), OsdError>;

    /// Reads `len` bytes from `offset` without handing them back (the lab's reads of
    /// fingerprint data); `out` collects the fingerprints read, when the store keeps them.
    fn read_discard(
        &mut self,
        oid: Oid,
        offset: u64,
        len: u64,
        out: &mut Vec<u64>,
    ) -> Result<(), OsdError>;

    /// Issue time of the next command (virtual ns); a store without virtual time ignores it.
    fn set_time(&mut self, at: Nanos);

    /// Completion time of the last command (virtual ns).
    fn now(&self) -> Nanos;

    /// Lets the store collect garbage in idle time from `from` to `until`; returns when that
    /// work ends. A remote target collects on its own (its device-side controller).
    fn background(&mut self, from: Nanos, until: Nanos) -> Result<Nanos, OsdError>;

    /// Problems the store's own structure check finds (index, extents, block accounting); a
    /// remote target is checked where it runs (`ossd fsck` on its image), so none here.
    fn check_structure(&mut self) -> Result<Vec<String>, OsdError>;
}

impl<F: Flash> Store for ObjectStore<F> {
    fn write_token(&mut self, oid: Oid, offset: u64, len: u64, token: u64) -> Result<(), OsdError> {
        ObjectStore::write_token(self, oid, offset, len, token)
    }

    fn read_discard(
        &mut self,
        oid: Oid,
        offset: u64,
        len: u64,
        out: &mut Vec<u64>,
    ) -> Result<(), OsdError> {
        self.read_fingerprints(oid, offset, len, out)
    }

    fn set_time(&mut self, at: Nanos) {
        ObjectStore::set_time(self, at)
    }

    fn now(&self) -> Nanos {
        ObjectStore::now(self)
    }

    fn background(&mut self, from: Nanos, until: Nanos) -> Result<Nanos, OsdError> {
        ObjectStore::background(self, from, until)
    }

    fn check_structure(&mut self) -> Result<Vec<String>, OsdError> {
        Ok(self.fsck_structure()?.problems)
    }
}

impl Store for Client {
    fn write_token(&mut self, oid: Oid, _: u64, _: u64, _: u64) -> Result<(), OsdError> {
        Err(OsdError::InvalidArgument(format!(
            "object {oid}: fingerprint data (the lab's) cannot be sent to a remote target"
        )))
    }

    fn read_discard(
        &mut self,
        oid: Oid,
        offset: u64,
        len: u64,
        _: &mut Vec<u64>,
    ) -> Result<(), OsdError> {
        let mut scratch = vec![0; len.min(1 << 20) as usize];
        let mut at = offset;
        while at < offset + len {
            let n = scratch.len().min((offset + len - at) as usize);
            if self.read(oid, at, &mut scratch[..n])? < n {
                break;
            }
            at += n as u64;
        }
        Ok(())
    }

    fn set_time(&mut self, _: Nanos) {}

    /// A remote target keeps no virtual time for the host: the host's wall clock (ns since the
    /// Unix epoch), which is also the time the target stamps objects with (`ossd serve`).
    fn now(&self) -> Nanos {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
    }

    fn background(&mut self, from: Nanos, _: Nanos) -> Result<Nanos, OsdError> {
        Ok(from)
    }

    fn check_structure(&mut self) -> Result<Vec<String>, OsdError> {
        Ok(Vec::new())
    }
}
