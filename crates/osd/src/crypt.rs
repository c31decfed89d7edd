//! Per-object encryption (issue 16 item 7; docs/SECURITY.md, "Data at rest"): the key
//! hierarchy and the AEAD of data units.
//!
//! - The **device master key** (32 bytes, the `ossd keygen` file) is given when the store is
//!   opened ([`crate::ObjectStore::set_master_key`]); it is never stored on flash.
//! - The **key-encryption key** is `HMAC-SHA256(master, "ossd object data-key wrapping v1")`,
//!   so the same master key file can also sign capabilities (`proto`) without either use
//!   weakening the other.
//! - Each encrypted object has a random 32-byte **data key**, kept in its onode wrapped by
//!   the key-encryption key with XChaCha20-Poly1305 (a random 24-byte nonce, the object id as
//!   associated data): [`WRAPPED_KEY_BYTES`] bytes.
//! - Each data unit is sealed with XChaCha20-Poly1305 under its object's data key. The nonce is
//!   the sequence number of the program that sealed it and the unit index; the associated data
//!   are the object id and the unit index, so a unit moved to another object or offset fails to
//!   open. The 16-byte tag is in the unit's OOB record (record kinds 9 and 10).

use chacha20poly1305::aead::{AeadInPlace, KeyInit};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::id::Oid;
use crate::record::TAG_BYTES;

/// Bytes of a key (master, key-encryption, data).
pub const KEY_BYTES: usize = 32;
/// Bytes of a wrapped data key in an onode: the 24-byte nonce, the 32-byte key encrypted and
/// its 16-byte tag.
pub const WRAPPED_KEY_BYTES: usize = 24 + KEY_BYTES + TAG_BYTES;
/// Domain separation of the key-encryption key from the master key's other uses.
const KEK_LABEL: &[u8] = b"ossd object data-key wrapping v1";
/// Associated data prefix of a wrapped data key.
const WRAP_AD: &[u8; 8] = b"ossd-dk1";

/// The device master key (32 bytes); its `Debug` does not show it.
#[derive(Clone)]
pub struct MasterKey([u8; KEY_BYTES]);

impl std::fmt::Debug for MasterKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MasterKey(..)")
    }
}

impl MasterKey {
    /// A master key from its 32 bytes.
    pub fn from_bytes(b: [u8; KEY_BYTES]) -> MasterKey {
        MasterKey(b)
    }

    fn kek(&self) -> XChaCha20Poly1305 {
        // HMAC takes a key of any length: this cannot fail.
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&self.0)
            .unwrap_or_else(|_| unreachable!("HMAC accepts any key length"));
        mac.update(KEK_LABEL);
        let kek = mac.finalize().into_bytes();
        XChaCha20Poly1305::new(&kek)
    }

    /// Wraps `data_key` of object `oid` under this master key, with a fresh random nonce.
    pub fn wrap(
        &self,
        oid: Oid,
        data_key: &[u8; KEY_BYTES],
    ) -> Result<[u8; WRAPPED_KEY_BYTES], CryptError> {
        let mut out = [0u8; WRAPPED_KEY_BYTES];
        random_bytes(&mut out[..24])?;
        let nonce = *XNonce::from_slice(&out[..24]);
        let mut body = *data_key;
        let tag = self
            .kek()
            .encrypt_in_place_detached(&nonce, &wrap_ad(oid), &mut body)
            .map_err(|_| CryptError::Cipher)?;
        out[24..24 + KEY_BYTES].copy_from_slice(&body);
        out[24 + KEY_BYTES..].copy_from_slice(&tag);
        Ok(out)
    }

    /// The data key of object `oid` wrapped in `wrapped`, or `None` when this is not the key it
    /// was wrapped with (or the bytes were altered).
    pub fn unwrap(&self, oid: Oid, wrapped: &[u8; WRAPPED_KEY_BYTES]) -> Option<[u8; KEY_BYTES]> {
        let nonce = XNonce::from_slice(&wrapped[..24]);
        let mut body = [0u8; KEY_BYTES];
        body.copy_from_slice(&wrapped[24..24 + KEY_BYTES]);
        let tag = chacha20poly1305::Tag::from_slice(&wrapped[24 + KEY_BYTES..]);
        self.kek()
            .decrypt_in_place_detached(nonce, &wrap_ad(oid), &mut body, tag)
            .ok()?;
        Some(body)
    }
}

fn wrap_ad(oid: Oid) -> [u8; 24] {
    let mut ad = [0u8; 24];
    ad[..8].copy_from_slice(WRAP_AD);
    ad[8..].copy_from_slice(&oid.as_u128().to_le_bytes());
    ad
}

/// Why a cryptographic operation failed (never because of the data: that is an
/// authentication failure, reported by the caller with the unit it concerns).
#[derive(Debug, thiserror::Error)]
pub enum CryptError {
    /// The operating system gave no random numbers.
    #[error("no random numbers from the operating system: {0}")]
    Random(String),
    /// The cipher refused the buffer (longer than it can seal).
    #[error("the cipher refused the buffer")]
    Cipher,
}

/// Fills `out` from the operating system's generator (keys and wrapping nonces must be
/// unpredictable, so not from the simulation's seeded generators).
pub fn random_bytes(out: &mut [u8]) -> Result<(), CryptError> {
    use rand::RngCore;
    rand::rngs::OsRng
        .try_fill_bytes(out)
        .map_err(|e| CryptError::Random(e.to_string()))
}

/// A fresh random data key.
pub fn new_data_key() -> Result<[u8; KEY_BYTES], CryptError> {
    let mut k = [0u8; KEY_BYTES];
    random_bytes(&mut k)?;
    Ok(k)
}

/// An object's data key, ready to seal and open its units.
#[derive(Clone)]
pub struct DataKey(XChaCha20Poly1305);

impl std::fmt::Debug for DataKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DataKey(..)")
    }
}

/// The nonce of unit `unit` sealed by the program with sequence number `nonce_seq`: unique
/// under one data key as long as sequence numbers are never reused (docs/SECURITY.md).
fn unit_nonce(nonce_seq: u64, unit: u64) -> XNonce {
    let mut n = [0u8; 24];
    n[..8].copy_from_slice(&nonce_seq.to_le_bytes());
    n[8..16].copy_from_slice(&unit.to_le_bytes());
    n[16..].copy_from_slice(b"ossdunit");
    *XNonce::from_slice(&n)
}

fn unit_ad(oid: Oid, unit: u64) -> [u8; 24] {
    let mut ad = [0u8; 24];
    ad[..16].copy_from_slice(&oid.as_u128().to_le_bytes());
    ad[16..].copy_from_slice(&unit.to_le_bytes());
    ad
}

impl DataKey {
    /// The key from its 32 bytes.
    pub fn new(key: &[u8; KEY_BYTES]) -> DataKey {
        DataKey(XChaCha20Poly1305::new(key.into()))
    }

    /// Encrypts unit `unit` of `oid` in place; returns its tag.
    pub fn seal(
        &self,
        oid: Oid,
        unit: u64,
        nonce_seq: u64,
        buf: &mut [u8],
    ) -> Result<[u8; TAG_BYTES], CryptError> {
        let tag = self
            .0
            .encrypt_in_place_detached(&unit_nonce(nonce_seq, unit), &unit_ad(oid, unit), buf)
            .map_err(|_| CryptError::Cipher)?;
        Ok(tag.into())
    }

    /// Decrypts unit `unit` of `oid` in place; false (and `buf` unspecified) when the tag does
    /// not authenticate the bytes, the object, the unit index and the nonce.
    pub fn open(
        &self,
        oid: Oid,
        unit: u64,
        nonce_seq: u64,
        buf: &mut [u8],
        tag: &[u8; TAG_BYTES],
    ) -> bool {
        self.0
            .decrypt_in_place_detached(
                &unit_nonce(nonce_seq, unit),
                &unit_ad(oid, unit),
                buf,
                chacha20poly1305::Tag::from_slice(tag),
            )
            .is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrap_unwrap_and_refuse_the_wrong_key_or_object() {
        let m = MasterKey::from_bytes([1; 32]);
        let oid = Oid::new(0x10000, 0x10001);
        let dk = [9u8; 32];
        let w = m.wrap(oid, &dk).unwrap();
        assert_eq!(m.unwrap(oid, &w), Some(dk));
        assert_eq!(MasterKey::from_bytes([2; 32]).unwrap(oid, &w), None);
        assert_eq!(m.unwrap(Oid::new(0x10000, 0x10002), &w), None);
        let mut bad = w;
        bad[30] ^= 1;
        assert_eq!(m.unwrap(oid, &bad), None);
        // A fresh nonce every time: two wraps differ.
        assert_ne!(m.wrap(oid, &dk).unwrap(), w);
    }

    #[test]
    fn units_open_only_where_and_as_they_were_sealed() {
        let k = DataKey::new(&[5; 32]);
        let oid = Oid::new(0x10000, 0x10001);
        let plain: Vec<u8> = (0..4096).map(|i| (i * 7) as u8).collect();
        let mut b = plain.clone();
        let tag = k.seal(oid, 3, 77, &mut b).unwrap();
        assert_ne!(b, plain);
        let mut c = b.clone();
        assert!(k.open(oid, 3, 77, &mut c, &tag));
        assert_eq!(c, plain);
        for (o, u, n) in [
            (Oid::new(0x10000, 0x10002), 3, 77),
            (oid, 4, 77),
            (oid, 3, 78),
        ] {
            let mut c = b.clone();
            assert!(!k.open(o, u, n, &mut c, &tag), "{o} {u} {n}");
        }
        let mut c = b.clone();
        c[100] ^= 4;
        assert!(!k.open(oid, 3, 77, &mut c, &tag));
        let mut c = b.clone();
        assert!(!DataKey::new(&[6; 32]).open(oid, 3, 77, &mut c, &tag));
    }
}
