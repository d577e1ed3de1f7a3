//! RLPx, the encrypted and authenticated transport that devp2p runs over TCP.
//!
//! The module is built in four layers, each depending only on the ones before it:
//!
//! 1. `ecies` — public-key encryption to a node's static secp256k1 key
//!    (ECDH, NIST concat KDF over SHA-256, AES-128-CTR, HMAC-SHA-256). It is used
//!    only to protect the two handshake messages.
//! 2. `handshake` — the initiator sends an `auth` message, the recipient answers with
//!    an `ack`. Both carry a fresh nonce and an ephemeral public key; from those and
//!    the exact bytes seen on the wire each side derives the session secrets. We
//!    always send the EIP-8 encoding (RLP body, random padding, 2-byte size prefix)
//!    but also accept the older fixed-size encoding, and answer an old-style `auth`
//!    with an old-style `ack`.
//! 3. `codec` — frames. Every frame is a 16-byte encrypted header (24-bit payload
//!    size plus header data) followed by its 16-byte MAC, then the payload padded to
//!    16 bytes, encrypted, followed by its own 16-byte MAC. Encryption is
//!    AES-256-CTR, one key stream per direction; the MACs chain a running Keccak-256
//!    state through AES-256 so each frame authenticates everything before it.
//! 4. [`RlpxStream`] — the async front end over any `AsyncRead + AsyncWrite`
//!    transport: [`RlpxStream::connect`] / [`RlpxStream::accept`] run the handshake,
//!    [`RlpxStream::send`] / [`RlpxStream::recv`] move one frame each, and
//!    [`RlpxStream::split`] separates the two directions into an [`RlpxReader`] and
//!    an [`RlpxWriter`], since their cipher and MAC states are independent.
//!
//! A frame's payload is opaque here: the layer above passes `rlp(msg-id) || data`
//! (already snappy-compressed where negotiated) and gets the same bytes back.
//!
//! This module sets no timeouts of its own. A peer that stops sending leaves
//! `connect`, `accept` or `recv` waiting, so callers wrap them in
//! [`tokio::time::timeout`]. What peers send is never trusted: sizes are checked
//! before anything is allocated, and every malformed or forged input surfaces as an
//! [`RlpxError`], never a panic. After any error the connection should be dropped:
//! the cipher and MAC states no longer match the peer's.

mod codec;
mod ecies;
#[doc(hidden)]
pub mod fuzzing;
mod handshake;
mod stream;

use std::borrow::Cow;

use alloy_primitives::B512;
use secp256k1::PublicKey;

pub use codec::MAX_FRAME_SIZE;
pub use stream::{RlpxReader, RlpxStream, RlpxWriter, Split};

/// A node's identity: its uncompressed secp256k1 public key without the leading
/// `0x04` byte (64 bytes, `x || y`).
pub type PeerId = B512;

/// The [`PeerId`] of a public key.
pub fn peer_id(pk: &PublicKey) -> PeerId {
    moat_common::enode::node_id(pk)
}

/// The public key a [`PeerId`] stands for, if it is a point on the curve.
pub fn public_key(id: &PeerId) -> Result<PublicKey, RlpxError> {
    moat_common::enode::public_key(id).ok_or(RlpxError::InvalidPublicKey)
}

/// Everything that can go wrong on an RLPx connection.
#[derive(Debug, thiserror::Error)]
pub enum RlpxError {
    /// The underlying transport failed.
    #[error("i/o error: {0}")]
    Io(#[from] std::io::Error),
    /// The peer closed the connection (end of stream) in the middle of, or before,
    /// a handshake message or a frame.
    #[error("connection closed by peer")]
    Closed,
    /// A handshake message could not be parsed or failed a consistency check.
    #[error("malformed handshake: {0}")]
    Handshake(Cow<'static, str>),
    /// An ECIES-encrypted handshake message failed its HMAC check: it was not
    /// encrypted to our key, or it was altered.
    #[error("ECIES message authentication failed")]
    EciesMac,
    /// A frame header's MAC did not match.
    #[error("bad frame header MAC")]
    HeaderMac,
    /// A frame body's MAC did not match.
    #[error("bad frame MAC")]
    FrameMac,
    /// A frame is larger than allowed: on receipt, than the reader's configured
    /// maximum; on sending, than the 24-bit size field can express.
    #[error("frame of {size} bytes exceeds the maximum of {max} bytes")]
    FrameTooLarge {
        /// Size declared by (or asked of) the frame.
        size: usize,
        /// The limit in force.
        max: usize,
    },
    /// A public key (a remote [`PeerId`], or one carried in a handshake message) is
    /// not a valid secp256k1 point.
    #[error("invalid public key")]
    InvalidPublicKey,
    /// The operating system's random number generator failed.
    #[error("random number generator failed: {0}")]
    Random(getrandom::Error),
}

impl RlpxError {
    fn handshake(reason: &'static str) -> Self {
        RlpxError::Handshake(Cow::Borrowed(reason))
    }
}

/// Fills `buf` from the operating system's random number generator.
fn random_bytes(buf: &mut [u8]) -> Result<(), RlpxError> {
    getrandom::fill(buf).map_err(RlpxError::Random)
}

/// A fresh random secret key.
fn random_secret_key() -> Result<secp256k1::SecretKey, RlpxError> {
    loop {
        let mut bytes = [0u8; 32];
        random_bytes(&mut bytes)?;
        // Out-of-range scalars (zero or ≥ the group order) are astronomically rare;
        // just draw again.
        if let Ok(key) = secp256k1::SecretKey::from_byte_array(bytes) {
            return Ok(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peer_id_round_trips() {
        let key = random_secret_key().unwrap();
        let pk = key.public_key(secp256k1::SECP256K1);
        let id = peer_id(&pk);
        assert_eq!(public_key(&id).unwrap(), pk);
    }

    #[test]
    fn peer_id_not_on_curve_is_rejected() {
        assert!(matches!(
            public_key(&PeerId::ZERO),
            Err(RlpxError::InvalidPublicKey)
        ));
        assert!(matches!(
            public_key(&PeerId::repeat_byte(0xff)),
            Err(RlpxError::InvalidPublicKey)
        ));
    }
}
