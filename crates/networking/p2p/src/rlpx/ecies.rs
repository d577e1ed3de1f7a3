//! ECIES, in the flavour RLPx uses to protect its two handshake messages.
//!
//! A message encrypted to the static key `K` of a node is
//! `R || iv || c || d`, where `R` is a fresh ephemeral public key (65 bytes,
//! uncompressed), `c` is the plaintext under AES-128-CTR starting from `iv`, and `d`
//! is an HMAC-SHA-256 tag over `iv || c || auth_data`. Both keys come from the
//! x-coordinate of the ECDH point `r·K` through the NIST SP 800-56 concatenation KDF
//! with SHA-256: its first 16 bytes are the AES key, and the SHA-256 of its last 16
//! bytes is the HMAC key. `auth_data` is authenticated but not sent: RLPx passes the
//! 2-byte size prefix of EIP-8 messages there, and nothing for the older format.

use aes::cipher::{KeyIvInit, StreamCipher};
use hmac::{Hmac, Mac};
use secp256k1::{PublicKey, SECP256K1, SecretKey, ecdh};
use sha2::{Digest, Sha256};

use super::{RlpxError, random_bytes, random_secret_key};

type Aes128Ctr = ctr::Ctr128BE<aes::Aes128>;
type HmacSha256 = Hmac<Sha256>;

const KEY_LEN: usize = 65;
const IV_LEN: usize = 16;
const TAG_LEN: usize = 32;

/// Bytes ECIES adds to a plaintext.
pub(crate) const OVERHEAD: usize = KEY_LEN + IV_LEN + TAG_LEN;

struct Keys {
    cipher: [u8; 16],
    mac: [u8; 32],
}

fn derive_keys(remote: &PublicKey, secret: &SecretKey) -> Keys {
    let point = ecdh::shared_secret_point(remote, secret);
    // One round of the concat KDF yields the 32 bytes we need: counter 1, then Z,
    // with an empty OtherInfo.
    let mut kdf = Sha256::new();
    kdf.update(1u32.to_be_bytes());
    kdf.update(&point[..32]);
    let derived = kdf.finalize();
    let mut cipher = [0u8; 16];
    cipher.copy_from_slice(&derived[..16]);
    Keys {
        cipher,
        mac: Sha256::digest(&derived[16..]).into(),
    }
}

fn tag(key: &[u8; 32], iv_and_ciphertext: &[u8], auth_data: &[u8]) -> HmacSha256 {
    let mut mac = HmacSha256::new_from_slice(key).expect("HMAC accepts keys of any length");
    mac.update(iv_and_ciphertext);
    mac.update(auth_data);
    mac
}

/// Encrypts `plaintext` to `remote`, authenticating `auth_data` alongside.
pub(crate) fn encrypt(
    remote: &PublicKey,
    plaintext: &[u8],
    auth_data: &[u8],
) -> Result<Vec<u8>, RlpxError> {
    let ephemeral = random_secret_key()?;
    let mut iv = [0u8; IV_LEN];
    random_bytes(&mut iv)?;
    Ok(encrypt_with(remote, &ephemeral, &iv, plaintext, auth_data))
}

fn encrypt_with(
    remote: &PublicKey,
    ephemeral: &SecretKey,
    iv: &[u8; IV_LEN],
    plaintext: &[u8],
    auth_data: &[u8],
) -> Vec<u8> {
    let keys = derive_keys(remote, ephemeral);
    let mut out = Vec::with_capacity(OVERHEAD + plaintext.len());
    out.extend_from_slice(&ephemeral.public_key(SECP256K1).serialize_uncompressed());
    out.extend_from_slice(iv);
    out.extend_from_slice(plaintext);
    Aes128Ctr::new(&keys.cipher.into(), &(*iv).into())
        .apply_keystream(&mut out[KEY_LEN + IV_LEN..]);
    let d = tag(&keys.mac, &out[KEY_LEN..], auth_data)
        .finalize()
        .into_bytes();
    out.extend_from_slice(&d);
    out
}

/// Decrypts a message encrypted to `our_key`, checking its tag over `auth_data`.
pub(crate) fn decrypt(
    our_key: &SecretKey,
    message: &[u8],
    auth_data: &[u8],
) -> Result<Vec<u8>, RlpxError> {
    if message.len() < OVERHEAD {
        return Err(RlpxError::handshake("ECIES message too short"));
    }
    let (ephemeral, rest) = message.split_at(KEY_LEN);
    if ephemeral[0] != 0x04 {
        return Err(RlpxError::handshake(
            "ECIES ephemeral key is not in uncompressed form",
        ));
    }
    let ephemeral = PublicKey::from_slice(ephemeral).map_err(|_| RlpxError::InvalidPublicKey)?;
    let keys = derive_keys(&ephemeral, our_key);

    let (iv_and_ciphertext, d) = rest.split_at(rest.len() - TAG_LEN);
    tag(&keys.mac, iv_and_ciphertext, auth_data)
        .verify_slice(d)
        .map_err(|_| RlpxError::EciesMac)?;

    let (iv, ciphertext) = iv_and_ciphertext
        .split_first_chunk::<IV_LEN>()
        .expect("length checked against OVERHEAD");
    let mut plaintext = ciphertext.to_vec();
    Aes128Ctr::new(&keys.cipher.into(), &(*iv).into()).apply_keystream(&mut plaintext);
    Ok(plaintext)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keypair() -> (SecretKey, PublicKey) {
        let secret = random_secret_key().unwrap();
        (secret, secret.public_key(SECP256K1))
    }

    #[test]
    fn round_trip() {
        let (secret, public) = keypair();
        for len in [0usize, 1, 15, 16, 17, 200] {
            let plaintext: Vec<u8> = (0..len).map(|i| i as u8).collect();
            let sealed = encrypt(&public, &plaintext, b"ad").unwrap();
            assert_eq!(sealed.len(), plaintext.len() + OVERHEAD);
            assert_eq!(sealed[0], 0x04);
            assert_eq!(decrypt(&secret, &sealed, b"ad").unwrap(), plaintext);
        }
    }

    #[test]
    fn deterministic_given_ephemeral_and_iv() {
        let (secret, public) = keypair();
        let (ephemeral, _) = keypair();
        let iv = [7u8; IV_LEN];
        let a = encrypt_with(&public, &ephemeral, &iv, b"hello", &[]);
        let b = encrypt_with(&public, &ephemeral, &iv, b"hello", &[]);
        assert_eq!(a, b);
        assert_eq!(decrypt(&secret, &a, &[]).unwrap(), b"hello");
    }

    #[test]
    fn tampering_is_detected() {
        let (secret, public) = keypair();
        let sealed = encrypt(&public, b"some handshake body", &[0x01, 0x02]).unwrap();

        // Wrong authenticated data.
        assert!(matches!(
            decrypt(&secret, &sealed, &[0x01, 0x03]),
            Err(RlpxError::EciesMac)
        ));
        assert!(matches!(
            decrypt(&secret, &sealed, &[]),
            Err(RlpxError::EciesMac)
        ));
        // Any flipped bit in iv, ciphertext or tag.
        for i in KEY_LEN..sealed.len() {
            let mut bad = sealed.clone();
            bad[i] ^= 0x01;
            assert!(matches!(
                decrypt(&secret, &bad, &[0x01, 0x02]),
                Err(RlpxError::EciesMac)
            ));
        }
        // Encrypted to someone else.
        let (other, _) = keypair();
        assert!(matches!(
            decrypt(&other, &sealed, &[0x01, 0x02]),
            Err(RlpxError::EciesMac)
        ));
    }

    #[test]
    fn malformed_input_is_an_error() {
        let (secret, public) = keypair();
        let sealed = encrypt(&public, b"x", &[]).unwrap();
        for len in 0..OVERHEAD {
            assert!(matches!(
                decrypt(&secret, &sealed[..len], &[]),
                Err(RlpxError::Handshake(_))
            ));
        }
        let mut compressed_flag = sealed.clone();
        compressed_flag[0] = 0x02;
        assert!(matches!(
            decrypt(&secret, &compressed_flag, &[]),
            Err(RlpxError::Handshake(_))
        ));
        let mut off_curve = sealed.clone();
        off_curve[1..KEY_LEN].fill(0);
        assert!(matches!(
            decrypt(&secret, &off_curve, &[]),
            Err(RlpxError::InvalidPublicKey)
        ));
    }
}
