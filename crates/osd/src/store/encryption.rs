//! Per-object encryption in the store (issue 16 item 7; docs/DESIGN.md "Per-object
//! encryption", docs/SECURITY.md "Data at rest"): data keys, sealing units as they are
//! programmed, opening them as they are read, rotation of the master key.

use super::*;
use crate::crypt::{new_data_key, CryptError, DataKey, MasterKey};
use crate::record::{Seal, ENCRYPTED_RECORD_BYTES};

/// Sequence numbers skipped at every open of a store that may hold encrypted units. A unit's
/// nonce is the sequence number of its program, which must never be used twice under one
/// data key; recovery resumes after the highest sequence number it can read, and a program
/// whose record cannot be read (a torn program at a power cut, at most one per cut; or
/// damage) may have used the next ones. Skipping 2^24 makes a reuse need more than 2^24
/// unreadable records newer than every readable one; at 2^48 sequence numbers, 2^24 opens
/// remain.
pub const SEQ_GAP_AT_OPEN: u64 = 1 << 24;

fn crypt_err(e: CryptError) -> OsdError {
    OsdError::Internal(format!("encryption: {e}"))
}

impl<F: Flash> ObjectStore<F> {
    /// Sets the device master key that wraps the data keys of encrypted objects (`None`: no
    /// key; encrypted objects then refuse reads and writes with [`OsdError::KeyRequired`]).
    /// The key is never written to flash; give it at every open. Data keys unwrapped under a
    /// previous key are forgotten.
    pub fn set_master_key(&mut self, key: Option<MasterKey>) {
        self.master = key;
        self.data_keys.clear();
    }

    /// Whether `oid` is encrypted.
    pub(super) fn is_encrypted(&mut self, oid: Oid) -> Result<bool, OsdError> {
        Ok(self.onode_mut(oid)?.onode.wrapped_key.is_some())
    }

    /// The data key of encrypted object `oid`, unwrapped with the master key (and kept).
    pub(super) fn data_key(&mut self, oid: Oid) -> Result<DataKey, OsdError> {
        if let Some(k) = self.data_keys.get(&oid) {
            return Ok(k.clone());
        }
        let wrapped = self.onode_mut(oid)?.onode.wrapped_key;
        let Some(wrapped) = wrapped else {
            return Err(OsdError::Internal(format!("object {oid} is not encrypted")));
        };
        let master = self.master.as_ref().ok_or(OsdError::KeyRequired(oid))?;
        let raw = master
            .unwrap(oid, &wrapped)
            .ok_or(OsdError::WrongKey(oid))?;
        let key = DataKey::new(&raw);
        self.data_keys.insert(oid, key.clone());
        Ok(key)
    }

    /// From now on GC copies and data reads transfer whole encrypted records (their tags):
    /// set when the first object is encrypted, and at open when the checkpoint or a record
    /// rolled forward says encrypted units may exist. Kept in the checkpoint (byte 36 bit 0).
    pub(super) fn widen_records(&mut self) {
        if !self.wide_records {
            self.wide_records = true;
            self.fml.set_oob_record_bytes(ENCRYPTED_RECORD_BYTES);
        }
    }

    /// Turns encryption of `oid` on (a fresh random data key, wrapped by the master key) or
    /// off. Only while the object is empty: its units are sealed as they are programmed, and a
    /// unit is never re-encrypted in place.
    pub(super) fn set_encryption(&mut self, oid: Oid, on: u64) -> Result<(), OsdError> {
        if on > 1 {
            return Err(OsdError::InvalidArgument(format!(
                "encryption {on}: 0 (none) or 1 (xchacha20-poly1305)"
            )));
        }
        let o = &self.onode_mut(oid)?.onode;
        if o.read_only {
            return Err(OsdError::ReadOnly(oid));
        }
        if (o.wrapped_key.is_some()) == (on == 1) {
            return Ok(());
        }
        if o.logical_length != 0 || o.used_bytes != 0 || o.inline.is_some() {
            return Err(OsdError::InvalidArgument(format!(
                "object {oid} holds data: encryption is set at creation or while the object is \
                 empty (truncate it to 0 first)"
            )));
        }
        if o.reliability != 0 {
            return Err(OsdError::InvalidArgument(format!(
                "object {oid} has parity (reliability {}): encryption and parity are not \
                 combined yet (docs/DESIGN.md)",
                o.reliability
            )));
        }
        if oid.is_partition_root() {
            return Err(OsdError::InvalidArgument(
                "a partition holds no data to encrypt".into(),
            ));
        }
        let wrapped = if on == 1 {
            let mut bigger = o.clone();
            bigger.wrapped_key = Some([0; crate::crypt::WRAPPED_KEY_BYTES]);
            if bigger.encoded_len() > ONODE_MAX_BYTES {
                return Err(OsdError::InvalidArgument(format!(
                    "object {oid}: its user attributes leave no room in the {ONODE_MAX_BYTES}-byte \
                     onode for a wrapped data key ({} bytes over)",
                    bigger.encoded_len() - ONODE_MAX_BYTES
                )));
            }
            if self.fml.oob_bytes_per_page() < ENCRYPTED_RECORD_BYTES {
                return Err(OsdError::InvalidArgument(format!(
                    "the device's spare area ({} bytes per page) cannot hold an encrypted unit's \
                     {ENCRYPTED_RECORD_BYTES}-byte record",
                    self.fml.oob_bytes_per_page()
                )));
            }
            let master = self.master.as_ref().ok_or(OsdError::KeyRequired(oid))?;
            let raw = new_data_key().map_err(crypt_err)?;
            let wrapped = master.wrap(oid, &raw).map_err(crypt_err)?;
            self.data_keys.insert(oid, DataKey::new(&raw));
            self.widen_records();
            Some(wrapped)
        } else {
            self.data_keys.remove(&oid);
            None
        };
        let now = self.now;
        let c = self.onode_mut(oid)?;
        c.onode.wrapped_key = wrapped;
        c.onode.attr_changed_ns = now;
        c.dirty = true;
        // The onode reaches flash before any unit of the new kind: otherwise a crash could
        // roll sealed units forward into an object whose durable onode is plain (or plain
        // units into an encrypted one), and they would read as corruption.
        self.flush_all()
    }

    /// Encrypts a unit of `oid` about to be programmed with sequence number `seq` in place;
    /// returns the seal for its record.
    pub(super) fn seal_unit(
        &mut self,
        oid: Oid,
        unit: u64,
        seq: u64,
        bytes: &mut [u8],
    ) -> Result<Seal, OsdError> {
        let key = self.data_key(oid)?;
        let tag = key.seal(oid, unit, seq, bytes).map_err(crypt_err)?;
        Ok(Seal {
            nonce_seq: seq,
            tag: Some(tag),
        })
    }

    /// Decrypts unit `u` of `oid`, just read into the scratch buffer from write unit `v` with
    /// `seal`. A unit whose tag does not authenticate it is lost, never returned.
    pub(super) fn open_scratch(
        &mut self,
        oid: Oid,
        u: u64,
        v: u32,
        seal: Seal,
    ) -> Result<(), OsdError> {
        let key = self.data_key(oid)?;
        let unit = self.unit as u64;
        let what = || {
            format!(
                "object {oid} bytes {}..{} (unit {u})",
                u * unit,
                (u + 1) * unit
            )
        };
        let Some(tag) = seal.tag else {
            return Err(OsdError::Corrupted {
                what: format!("{}: its OOB record has no tag", what()),
                location: format!("unit {v}"),
                unit: Some(v),
            });
        };
        if !key.open(oid, u, seal.nonce_seq, &mut self.scratch, &tag) {
            return Err(OsdError::Uncorrectable {
                what: format!("{} (fails authentication)", what()),
                location: format!("unit {v}"),
                unit: Some(v),
            });
        }
        Ok(())
    }

    /// Rotates the master key: every encrypted object's data key is unwrapped with the current
    /// master key and wrapped again with `new` (no data is rewritten), the onodes are written
    /// and a checkpoint makes the change durable; from then on `new` is the store's key.
    /// Returns the objects rewrapped. An object whose data key `new` unwraps already is left
    /// alone (a rotation a crash interrupted is finished by running it again). Fails, changing
    /// nothing, with [`OsdError::KeyRequired`] / [`OsdError::WrongKey`] when neither key
    /// unwraps a data key.
    pub fn rekey(&mut self, new: MasterKey) -> Result<u64, OsdError> {
        self.check_writable()?;
        self.flush_all()?;
        let onodes =
            self.with_index(|ix, io| ix.range(io, &IndexKey::MIN, &IndexKey::MAX, usize::MAX))?;
        let mut plan = Vec::new();
        for (k, _) in onodes {
            if k.kind != KIND_ONODE {
                continue;
            }
            let oid = Oid::from_u128(k.oid);
            let Some(c) = self.load_onode(oid)? else {
                continue;
            };
            let Some(wrapped) = c.onode.wrapped_key else {
                continue;
            };
            let master = self.master.as_ref().ok_or(OsdError::KeyRequired(oid))?;
            let Some(raw) = master.unwrap(oid, &wrapped) else {
                if new.unwrap(oid, &wrapped).is_some() {
                    // Rewrapped already, by a rotation a crash interrupted: run again, it
                    // finishes.
                    continue;
                }
                return Err(OsdError::WrongKey(oid));
            };
            plan.push((oid, new.wrap(oid, &raw).map_err(crypt_err)?));
        }
        for (oid, wrapped) in &plan {
            let c = self.onode_mut(*oid)?;
            c.onode.wrapped_key = Some(*wrapped);
            c.dirty = true;
        }
        self.set_master_key(Some(new));
        self.checkpoint()?;
        Ok(plan.len() as u64)
    }
}
