#![deny(clippy::unwrap_used, clippy::expect_used)]
#![warn(missing_docs)]
//! The OSD wire protocol of ossd: framed binary codecs of the OSD command set (`osd::Osd`) and
//! capabilities after T10 OSD's CAPKEY security method (OSSD-13 IV-A: "each object is accessed
//! by a cryptographically signed capability which specifies the object and allowable
//! operations").
//!
//! Pure codecs: no I/O, no clocks, no randomness. Every decoder takes untrusted bytes and returns
//! a typed [`ProtoError`] naming what was wrong and where; none panics and none allocates more
//! than the frame it was given (every length is checked against the bytes present). The byte
//! layout is specified in `docs/PROTOCOL.md`; the threat model in `docs/SECURITY.md`.
//!
//! A frame is a 20-byte [`Header`] followed by `body_len` bytes of body. Requests other than
//! HELLO carry a [`Capability`] at the start of the body and a 32-byte integrity value (an
//! HMAC-SHA256 under the capability key) at its end; replies to authenticated requests carry an
//! integrity value under the same key.

pub mod auth;
pub mod cap;
pub mod codec;
pub mod msg;

pub use auth::Requirement;
pub use cap::{
    CapError, CapKey, CapObject, Capability, HexError, MasterKey, Ops, WorkingKey, CAPABILITY_LEN,
    MAC_LEN,
};
pub use codec::{Header, ProtoError, DEFAULT_MAX_FRAME_BYTES, HEADER_LEN, MAGIC};
pub use msg::{
    decode_reply, decode_request, encode_reply, encode_request, Command, Decoded, Failure, Opcode,
    Reply, ReplyBody, Request, Security, Status, SUPPORTED_VERSIONS, VERSION_1,
};

/// Fuzz entry point (the `fuzz/` crate's `proto_frame` target and a seeded stable test share
/// it): decodes every frame in `data` as a request and as a reply; must never panic.
#[expect(
    clippy::expect_used,
    reason = "a fuzz harness: a frame this crate encoded that does not decode again is the bug \
              it looks for, and must panic"
)]
pub fn fuzz_frames(data: &[u8]) {
    let mut rest = data;
    while rest.len() >= HEADER_LEN {
        let Ok(header) = Header::decode(&rest[..HEADER_LEN], DEFAULT_MAX_FRAME_BYTES) else {
            return;
        };
        let end = HEADER_LEN + header.body_len as usize;
        if rest.len() < end {
            return;
        }
        let body = &rest[HEADER_LEN..end];
        if let Ok(r) = decode_request(&header, body) {
            // Whatever decodes must re-encode to something that decodes the same way.
            let again = encode_request(
                header.version,
                &Request {
                    request_id: r.request_id,
                    command: r.command.clone(),
                },
                None,
            );
            let h2 = Header::decode(&again[..HEADER_LEN], u32::MAX).expect("own header");
            let r2 = decode_request(&h2, &again[HEADER_LEN..]).expect("own request");
            assert_eq!(r2.command, r.command);
        }
        let _ = decode_reply(&header, body);
        rest = &rest[end..];
    }
}
