//! secp256k1 ECDSA: recover the signer of a digest, sign a digest (tests and tools).

use alloy_primitives::{Address, B256, U256, keccak256};
use secp256k1::{
    Message, PublicKey, SECP256K1, SecretKey,
    ecdsa::{RecoverableSignature, RecoveryId},
};

/// The secp256k1 group order n.
pub const SECP256K1N: U256 = U256::from_be_bytes([
    0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfe,
    0xba, 0xae, 0xdc, 0xe6, 0xaf, 0x48, 0xa0, 0x3b, 0xbf, 0xd2, 0x5e, 0x8c, 0xd0, 0x36, 0x41, 0x41,
]);

/// n / 2: EIP-2 rejects signatures whose `s` lies above it.
pub const SECP256K1N_HALF: U256 = U256::from_be_bytes([
    0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
    0x5d, 0x57, 0x6e, 0x73, 0x57, 0xa4, 0x50, 0x1d, 0xdf, 0xe9, 0x2f, 0x46, 0x68, 0x1b, 0x20, 0xa0,
]);

/// Why a signature yields no signer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    /// `r` or `s` is zero or not below the curve order n.
    #[error("signature r or s is zero or not below the curve order")]
    OutOfRange,
    /// `s` is above n/2 where low-s is required (EIP-2, transactions since Homestead).
    #[error("signature s is in the upper half of the curve order (EIP-2)")]
    HighS,
    /// The values are in range but recovery yields no public key (no curve point has
    /// x = r).
    #[error("signature does not recover to a public key")]
    Unrecoverable,
}

/// Checks `r` and `s` are in [1, n) and, when `low_s` is asked for, that s ≤ n/2.
pub fn check_signature_values(r: U256, s: U256, low_s: bool) -> Result<(), SignatureError> {
    if r.is_zero() || s.is_zero() || r >= SECP256K1N || s >= SECP256K1N {
        return Err(SignatureError::OutOfRange);
    }
    if low_s && s > SECP256K1N_HALF {
        return Err(SignatureError::HighS);
    }
    Ok(())
}

/// Recovers the address that signed `digest` with (r, s, y_parity).
///
/// The caller has already range-checked r and s where its rules demand it; libsecp256k1
/// itself accepts high-s signatures on recovery, which pre-Homestead history needs.
pub fn recover_signer(
    digest: &B256,
    r: U256,
    s: U256,
    y_parity: bool,
) -> Result<Address, SignatureError> {
    let mut compact = [0u8; 64];
    compact[..32].copy_from_slice(&r.to_be_bytes::<32>());
    compact[32..].copy_from_slice(&s.to_be_bytes::<32>());
    let recid = if y_parity {
        RecoveryId::One
    } else {
        RecoveryId::Zero
    };
    let sig = RecoverableSignature::from_compact(&compact, recid)
        .map_err(|_| SignatureError::OutOfRange)?;
    let key = SECP256K1
        .recover_ecdsa(Message::from_digest(digest.0), &sig)
        .map_err(|_| SignatureError::Unrecoverable)?;
    Ok(public_key_to_address(&key))
}

/// Ethereum address of a public key: the last 20 bytes of keccak(uncompressed x || y).
pub fn public_key_to_address(key: &PublicKey) -> Address {
    let uncompressed = key.serialize_uncompressed();
    Address::from_slice(&keccak256(&uncompressed[1..])[12..])
}

/// A secp256k1 secret key with its address, for signing in tests and tools.
#[derive(Clone)]
pub struct Signer {
    secret: SecretKey,
    address: Address,
}

/// A signature as Ethereum stores it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawSignature {
    /// Parity of the y coordinate of the signature's curve point R (the recovery id; `v`
    /// is derived from it).
    pub y_parity: bool,
    /// The x coordinate of R, mod n.
    pub r: U256,
    /// The signature's s value (low-s: at most n/2, as signing here produces).
    pub s: U256,
}

impl Signer {
    /// A signer from 32 secret bytes; `None` when they are not a valid key.
    pub fn from_bytes(secret: &B256) -> Option<Self> {
        let secret = SecretKey::from_byte_array(secret.0).ok()?;
        let address = public_key_to_address(&PublicKey::from_secret_key_global(&secret));
        Some(Self { secret, address })
    }

    /// A deterministic signer derived from a seed, for tests and load tools.
    pub fn from_seed(seed: u64) -> Self {
        let mut counter = 0u64;
        loop {
            let mut material = [0u8; 16];
            material[..8].copy_from_slice(&seed.to_be_bytes());
            material[8..].copy_from_slice(&counter.to_be_bytes());
            if let Some(signer) = Self::from_bytes(&keccak256(material)) {
                return signer;
            }
            counter += 1;
        }
    }

    /// The address of the signer's key: the last 20 bytes of keccak256 of its public key.
    pub fn address(&self) -> Address {
        self.address
    }

    /// The secret key bytes (tools print them for dev accounts).
    pub fn secret_bytes(&self) -> B256 {
        B256::from(self.secret.secret_bytes())
    }

    /// Signs a 32-byte digest; libsecp256k1 always yields low-s signatures.
    pub fn sign(&self, digest: &B256) -> RawSignature {
        let sig = SECP256K1.sign_ecdsa_recoverable(Message::from_digest(digest.0), &self.secret);
        let (recid, bytes) = sig.serialize_compact();
        RawSignature {
            y_parity: i32::from(recid) == 1,
            r: U256::from_be_slice(&bytes[..32]),
            s: U256::from_be_slice(&bytes[32..]),
        }
    }
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Signer")
            .field("address", &self.address)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sign_then_recover_round_trips() {
        let signer = Signer::from_seed(7);
        let digest = keccak256(b"moat");
        let sig = signer.sign(&digest);
        check_signature_values(sig.r, sig.s, true).unwrap();
        assert_eq!(
            recover_signer(&digest, sig.r, sig.s, sig.y_parity).unwrap(),
            signer.address()
        );
        // The other parity recovers some other key, never the signer.
        let other = recover_signer(&digest, sig.r, sig.s, !sig.y_parity);
        assert_ne!(other.ok(), Some(signer.address()));
    }

    #[test]
    fn known_key_has_known_address() {
        // The EIP-155 example key 0x4646…46.
        let signer = Signer::from_bytes(&B256::repeat_byte(0x46)).unwrap();
        assert_eq!(
            signer.address(),
            "0x9d8a62f656a8d1615c1294fd71e9cfb3e4855a4f"
                .parse::<Address>()
                .unwrap()
        );
    }

    #[test]
    fn range_checks() {
        assert_eq!(
            check_signature_values(U256::ZERO, U256::from(1), true),
            Err(SignatureError::OutOfRange)
        );
        assert_eq!(
            check_signature_values(U256::from(1), SECP256K1N, false),
            Err(SignatureError::OutOfRange)
        );
        assert_eq!(
            check_signature_values(U256::from(1), SECP256K1N_HALF + U256::from(1), true),
            Err(SignatureError::HighS)
        );
        assert!(check_signature_values(U256::from(1), SECP256K1N_HALF, true).is_ok());
        assert!(
            check_signature_values(U256::from(1), SECP256K1N_HALF + U256::from(1), false).is_ok()
        );
    }
}
