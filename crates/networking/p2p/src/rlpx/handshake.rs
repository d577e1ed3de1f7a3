//! The RLPx handshake: one `auth` message from the initiator, one `ack` from the
//! recipient, both ECIES-encrypted to the other side's static key.
//!
//! `auth` proves the initiator holds its static key and tells the recipient its
//! ephemeral key: the initiator signs `static-shared-secret ^ initiator-nonce` with
//! its ephemeral key, and the recipient, who can compute the same static shared
//! secret, recovers the ephemeral public key from that signature. `ack` carries the
//! recipient's ephemeral key and nonce in the clear (inside the ECIES envelope).
//!
//! Two encodings exist:
//!
//! * EIP-8: a 2-byte big-endian size prefix, then ECIES of an RLP list followed by
//!   random padding; the prefix is also fed to the ECIES tag. Lists may grow extra
//!   trailing elements, which are ignored. This is what we send.
//! * The original fixed-size layout (307-byte auth, 210-byte ack), without prefix.
//!   We still accept it, and reply to such an auth in kind.
//!
//! Session secrets are then derived from the ephemeral ECDH secret, both nonces and
//! the two messages exactly as they crossed the wire (see [`derive_secrets`]).

use std::borrow::Cow;

use alloy_primitives::{B256, B512};
use alloy_rlp::{Decodable, Encodable, Header};
use keccak_asm::{Digest, Keccak256};
use secp256k1::ecdsa::{RecoverableSignature, RecoveryId};
use secp256k1::{Message, PublicKey, SECP256K1, SecretKey, ecdh};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::codec::Secrets;
use super::{PeerId, RlpxError, ecies, peer_id, public_key, random_bytes, random_secret_key};

const SIG_LEN: usize = 65;
const ID_LEN: usize = 64;
const NONCE_LEN: usize = 32;

/// Handshake version we announce.
const VERSION: u64 = 4;

/// Plaintext of an old-style auth: `sig || keccak(ephemeral-id) || id || nonce || 0x00`.
const OLD_AUTH_PLAIN: usize = SIG_LEN + 32 + ID_LEN + NONCE_LEN + 1;
/// Plaintext of an old-style ack: `ephemeral-id || nonce || 0x00`.
const OLD_ACK_PLAIN: usize = ID_LEN + NONCE_LEN + 1;

/// Largest EIP-8 size prefix we accept. Real messages are a few hundred bytes.
const MAX_EIP8_SIZE: usize = 2048;

/// Shortest RLP encodings of the EIP-8 bodies: each list needs a two-byte header,
/// the signature and ids two-byte string headers, the nonce a one-byte one, and
/// the version at least one byte.
const MIN_AUTH_RLP: usize = 2 + (2 + SIG_LEN) + (2 + ID_LEN) + (1 + NONCE_LEN) + 1;
const MIN_ACK_RLP: usize = 2 + (2 + ID_LEN) + (1 + NONCE_LEN) + 1;

/// Random padding added to the EIP-8 messages we send; at least 100 bytes keeps
/// them from being mistaken for the old fixed sizes.
const PADDING: std::ops::RangeInclusive<usize> = 100..=300;

/// Which encoding a handshake message used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Fixed-size, pre-EIP-8.
    Old,
    /// Size-prefixed RLP.
    Eip8,
}

#[derive(Clone, Copy, Debug)]
enum Kind {
    Auth,
    Ack,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Auth => "auth",
            Kind::Ack => "ack",
        }
    }

    /// Wire size of the old fixed-size encoding.
    fn old_len(self) -> usize {
        ecies::OVERHEAD
            + match self {
                Kind::Auth => OLD_AUTH_PLAIN,
                Kind::Ack => OLD_ACK_PLAIN,
            }
    }

    /// Smallest size prefix an EIP-8 message of this kind can carry.
    fn min_eip8_size(self) -> usize {
        ecies::OVERHEAD
            + match self {
                Kind::Auth => MIN_AUTH_RLP,
                Kind::Ack => MIN_ACK_RLP,
            }
    }
}

/// The initiator's message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Auth {
    /// Recoverable signature `r || s || v` of `static-shared-secret ^ nonce` by the
    /// initiator's ephemeral key.
    pub signature: [u8; SIG_LEN],
    /// The initiator's static key.
    pub initiator: PeerId,
    /// The initiator's random nonce (32 bytes), mixed into the session secrets.
    pub nonce: B256,
    /// The initiator's handshake version (`auth-vsn`; we send 4).
    pub version: u64,
    /// Old encoding only: hash of the initiator's ephemeral public key.
    pub ephemeral_hash: Option<B256>,
}

/// The recipient's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ack {
    /// The recipient's ephemeral public key.
    pub ephemeral: PeerId,
    /// The recipient's random nonce (32 bytes), mixed into the session secrets.
    pub nonce: B256,
    /// The recipient's handshake version (`ack-vsn`; we send 4).
    pub version: u64,
}

fn rlp_error(kind: Kind, err: alloy_rlp::Error) -> RlpxError {
    RlpxError::Handshake(Cow::Owned(format!("{} body: {err}", kind.name())))
}

fn rlp_fixed<const N: usize>(buf: &mut &[u8], kind: Kind) -> Result<[u8; N], RlpxError> {
    let bytes = Header::decode_bytes(buf, false).map_err(|e| rlp_error(kind, e))?;
    bytes.try_into().map_err(|_| {
        RlpxError::Handshake(Cow::Owned(format!(
            "{} body: field of {} bytes, expected {N}",
            kind.name(),
            bytes.len()
        )))
    })
}

/// Opens the RLP list at the start of `plain`. Whatever follows it is padding.
fn rlp_list(plain: &[u8], kind: Kind) -> Result<&[u8], RlpxError> {
    let mut buf = plain;
    Header::decode_bytes(&mut buf, true).map_err(|e| rlp_error(kind, e))
}

fn rlp_list_encode(fields: &[&dyn Encodable]) -> Vec<u8> {
    let payload_length = fields.iter().map(|f| f.length()).sum();
    let mut out = Vec::with_capacity(payload_length + 3);
    Header {
        list: true,
        payload_length,
    }
    .encode(&mut out);
    for field in fields {
        field.encode(&mut out);
    }
    out
}

impl Auth {
    /// Reads a decrypted auth body in `format`.
    pub fn decode(plain: &[u8], format: Format) -> Result<Self, RlpxError> {
        match format {
            Format::Eip8 => {
                let mut list = rlp_list(plain, Kind::Auth)?;
                let signature = rlp_fixed::<SIG_LEN>(&mut list, Kind::Auth)?;
                let initiator = B512::from(rlp_fixed::<ID_LEN>(&mut list, Kind::Auth)?);
                let nonce = B256::from(rlp_fixed::<NONCE_LEN>(&mut list, Kind::Auth)?);
                let version = u64::decode(&mut list).map_err(|e| rlp_error(Kind::Auth, e))?;
                // Further list elements are reserved for future versions.
                Ok(Self {
                    signature,
                    initiator,
                    nonce,
                    version,
                    ephemeral_hash: None,
                })
            }
            Format::Old => {
                if plain.len() != OLD_AUTH_PLAIN {
                    return Err(RlpxError::handshake("old-format auth of the wrong size"));
                }
                let (signature, rest) = plain.split_at(SIG_LEN);
                let (hash, rest) = rest.split_at(32);
                let (initiator, rest) = rest.split_at(ID_LEN);
                Ok(Self {
                    signature: signature.try_into().expect("split at SIG_LEN"),
                    initiator: B512::from_slice(initiator),
                    nonce: B256::from_slice(&rest[..NONCE_LEN]),
                    version: VERSION,
                    ephemeral_hash: Some(B256::from_slice(hash)),
                })
            }
        }
    }

    /// The EIP-8 body (RLP list, no padding).
    pub fn encode_eip8(&self) -> Vec<u8> {
        rlp_list_encode(&[
            &&self.signature[..],
            &self.initiator.as_slice(),
            &self.nonce.as_slice(),
            &self.version,
        ])
    }

    /// Checks the signature against our view of the static shared secret and
    /// returns the initiator's ephemeral public key.
    fn recover_ephemeral(
        &self,
        our_key: &SecretKey,
        initiator: &PublicKey,
    ) -> Result<PublicKey, RlpxError> {
        let message = signed_message(our_key, initiator, &self.nonce);
        let recovery_id = RecoveryId::try_from(i32::from(self.signature[64]))
            .map_err(|_| RlpxError::handshake("auth signature has a bad recovery id"))?;
        let signature = RecoverableSignature::from_compact(&self.signature[..64], recovery_id)
            .map_err(|_| RlpxError::handshake("auth signature is malformed"))?;
        let ephemeral = SECP256K1
            .recover_ecdsa(message, &signature)
            .map_err(|_| RlpxError::handshake("auth signature does not verify"))?;
        if let Some(hash) = self.ephemeral_hash
            && keccak(peer_id(&ephemeral).as_slice()) != hash
        {
            return Err(RlpxError::handshake(
                "auth ephemeral key hash does not match its signature",
            ));
        }
        Ok(ephemeral)
    }
}

impl Ack {
    /// Reads a decrypted ack body in `format`.
    pub fn decode(plain: &[u8], format: Format) -> Result<Self, RlpxError> {
        match format {
            Format::Eip8 => {
                let mut list = rlp_list(plain, Kind::Ack)?;
                let ephemeral = B512::from(rlp_fixed::<ID_LEN>(&mut list, Kind::Ack)?);
                let nonce = B256::from(rlp_fixed::<NONCE_LEN>(&mut list, Kind::Ack)?);
                let version = u64::decode(&mut list).map_err(|e| rlp_error(Kind::Ack, e))?;
                Ok(Self {
                    ephemeral,
                    nonce,
                    version,
                })
            }
            Format::Old => {
                if plain.len() != OLD_ACK_PLAIN {
                    return Err(RlpxError::handshake("old-format ack of the wrong size"));
                }
                Ok(Self {
                    ephemeral: B512::from_slice(&plain[..ID_LEN]),
                    nonce: B256::from_slice(&plain[ID_LEN..ID_LEN + NONCE_LEN]),
                    version: VERSION,
                })
            }
        }
    }

    /// The EIP-8 body (RLP list, no padding).
    pub fn encode_eip8(&self) -> Vec<u8> {
        rlp_list_encode(&[
            &self.ephemeral.as_slice(),
            &self.nonce.as_slice(),
            &self.version,
        ])
    }

    /// The old fixed-size body.
    pub fn encode_old(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(OLD_ACK_PLAIN);
        out.extend_from_slice(self.ephemeral.as_slice());
        out.extend_from_slice(self.nonce.as_slice());
        out.push(0);
        out
    }
}

fn keccak(data: &[u8]) -> B256 {
    B256::from(<[u8; 32]>::from(Keccak256::digest(data)))
}

fn keccak_pair(a: &[u8], b: &[u8]) -> B256 {
    let mut hasher = Keccak256::new();
    hasher.update(a);
    hasher.update(b);
    B256::from(<[u8; 32]>::from(hasher.finalize()))
}

/// x-coordinate of the ECDH point.
fn ecdh_x(public: &PublicKey, secret: &SecretKey) -> B256 {
    B256::from_slice(&ecdh::shared_secret_point(public, secret)[..32])
}

/// What the initiator signs: `ecdh(initiator, recipient) ^ initiator-nonce`.
fn signed_message(our_static: &SecretKey, their_static: &PublicKey, nonce: &B256) -> Message {
    Message::from_digest((ecdh_x(their_static, our_static) ^ *nonce).0)
}

fn random_nonce() -> Result<B256, RlpxError> {
    let mut nonce = B256::ZERO;
    random_bytes(nonce.as_mut_slice())?;
    Ok(nonce)
}

fn make_auth(our_key: &SecretKey, remote: &PublicKey, ephemeral: &SecretKey, nonce: B256) -> Auth {
    let message = signed_message(our_key, remote, &nonce);
    let (recovery_id, rs) = SECP256K1
        .sign_ecdsa_recoverable(message, ephemeral)
        .serialize_compact();
    let mut signature = [0u8; SIG_LEN];
    signature[..64].copy_from_slice(&rs);
    signature[64] = i32::from(recovery_id) as u8;
    Auth {
        signature,
        initiator: peer_id(&our_key.public_key(SECP256K1)),
        nonce,
        version: VERSION,
        ephemeral_hash: None,
    }
}

/// Pads an RLP body, encrypts it to `remote` and prepends the size prefix.
pub(crate) fn seal_eip8(remote: &PublicKey, body: &[u8]) -> Result<Vec<u8>, RlpxError> {
    let mut pick = [0u8; 2];
    random_bytes(&mut pick)?;
    let span = PADDING.end() - PADDING.start() + 1;
    let padding = PADDING.start() + usize::from(u16::from_be_bytes(pick)) % span;

    let mut plain = Vec::with_capacity(body.len() + padding);
    plain.extend_from_slice(body);
    plain.resize(body.len() + padding, 0);
    random_bytes(&mut plain[body.len()..])?;

    let size = plain.len() + ecies::OVERHEAD;
    let prefix = u16::try_from(size)
        .map_err(|_| RlpxError::handshake("handshake message too large to send"))?
        .to_be_bytes();
    let sealed = ecies::encrypt(remote, &plain, &prefix)?;
    let mut wire = Vec::with_capacity(2 + sealed.len());
    wire.extend_from_slice(&prefix);
    wire.extend_from_slice(&sealed);
    Ok(wire)
}

/// Reads exactly `buf.len()` bytes; an early end of stream is [`RlpxError::Closed`].
async fn read_exact<R: AsyncRead + Unpin>(io: &mut R, buf: &mut [u8]) -> Result<(), RlpxError> {
    match io.read_exact(buf).await {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Err(RlpxError::Closed),
        Err(e) => Err(e.into()),
    }
}

async fn write_all<W: AsyncWrite + Unpin>(io: &mut W, bytes: &[u8]) -> Result<(), RlpxError> {
    io.write_all(bytes).await?;
    io.flush().await?;
    Ok(())
}

/// A handshake message as received: its exact wire bytes, decrypted body, encoding.
struct Received {
    wire: Vec<u8>,
    plain: Vec<u8>,
    format: Format,
}

/// Reads one handshake message in either encoding, consuming exactly its bytes.
async fn read_message<R: AsyncRead + Unpin>(
    io: &mut R,
    our_key: &SecretKey,
    kind: Kind,
) -> Result<Received, RlpxError> {
    let mut wire = vec![0u8; 2];
    read_exact(io, &mut wire).await?;

    // An old-style message starts with the 0x04 of its uncompressed ECIES key. An
    // EIP-8 one can too (a size prefix of 1024..=1279), so if the fixed-size read
    // does not decrypt, treat the same bytes as the start of an EIP-8 message; its
    // total length is then larger than the fixed size, so nothing was over-read.
    if wire[0] == 0x04 {
        wire.resize(kind.old_len(), 0);
        read_exact(io, &mut wire[2..]).await?;
        if let Ok(plain) = ecies::decrypt(our_key, &wire, &[]) {
            return Ok(Received {
                wire,
                plain,
                format: Format::Old,
            });
        }
    }

    let size = usize::from(u16::from_be_bytes([wire[0], wire[1]]));
    if size > MAX_EIP8_SIZE {
        return Err(RlpxError::Handshake(Cow::Owned(format!(
            "{} size prefix {size} exceeds {MAX_EIP8_SIZE}",
            kind.name()
        ))));
    }
    if size < kind.min_eip8_size() {
        return Err(RlpxError::Handshake(Cow::Owned(format!(
            "{} size prefix {size} is too small (at least {})",
            kind.name(),
            kind.min_eip8_size()
        ))));
    }
    let have = wire.len();
    wire.resize(2 + size, 0);
    read_exact(io, &mut wire[have..]).await?;
    let (prefix, sealed) = wire.split_at(2);
    let plain = ecies::decrypt(our_key, sealed, prefix)?;
    Ok(Received {
        wire,
        plain,
        format: Format::Eip8,
    })
}

/// Derives the session secrets. `initiator` says which side we are; the ephemeral
/// keys are ours (secret) and theirs (public).
fn derive_secrets(
    initiator: bool,
    our_ephemeral: &SecretKey,
    their_ephemeral: &PublicKey,
    initiator_nonce: &B256,
    recipient_nonce: &B256,
    auth_wire: &[u8],
    ack_wire: &[u8],
) -> Secrets {
    let ephemeral_key = ecdh_x(their_ephemeral, our_ephemeral);
    let nonce_hash = keccak_pair(recipient_nonce.as_slice(), initiator_nonce.as_slice());
    let shared_secret = keccak_pair(ephemeral_key.as_slice(), nonce_hash.as_slice());
    let aes = keccak_pair(ephemeral_key.as_slice(), shared_secret.as_slice());
    let mac = keccak_pair(ephemeral_key.as_slice(), aes.as_slice());

    // The initiator's egress MAC starts from what it sent (auth), keyed with the
    // nonce it received; its ingress MAC from what it received (ack), keyed with
    // its own nonce. The recipient's are the same two states, swapped.
    let mut auth_side = Keccak256::new();
    auth_side.update(mac ^ *recipient_nonce);
    auth_side.update(auth_wire);
    let mut ack_side = Keccak256::new();
    ack_side.update(mac ^ *initiator_nonce);
    ack_side.update(ack_wire);
    let (egress_mac, ingress_mac) = if initiator {
        (auth_side, ack_side)
    } else {
        (ack_side, auth_side)
    };
    Secrets {
        aes,
        mac,
        egress_mac,
        ingress_mac,
    }
}

/// Runs the initiator side: sends auth, reads ack.
pub(crate) async fn initiate<S>(
    io: &mut S,
    our_key: &SecretKey,
    remote: &PeerId,
) -> Result<Secrets, RlpxError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let remote_key = public_key(remote)?;
    let ephemeral = random_secret_key()?;
    let nonce = random_nonce()?;
    let auth = make_auth(our_key, &remote_key, &ephemeral, nonce);
    let auth_wire = seal_eip8(&remote_key, &auth.encode_eip8())?;
    write_all(io, &auth_wire).await?;

    let received = read_message(io, our_key, Kind::Ack).await?;
    let ack = Ack::decode(&received.plain, received.format)?;
    let their_ephemeral = public_key(&ack.ephemeral)?;
    Ok(derive_secrets(
        true,
        &ephemeral,
        &their_ephemeral,
        &nonce,
        &ack.nonce,
        &auth_wire,
        &received.wire,
    ))
}

/// Runs the recipient side: reads auth, sends ack. Returns the initiator's id.
pub(crate) async fn respond<S>(
    io: &mut S,
    our_key: &SecretKey,
) -> Result<(PeerId, Secrets), RlpxError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let received = read_message(io, our_key, Kind::Auth).await?;
    let auth = Auth::decode(&received.plain, received.format)?;
    let initiator_key = public_key(&auth.initiator)?;
    let their_ephemeral = auth.recover_ephemeral(our_key, &initiator_key)?;

    let ephemeral = random_secret_key()?;
    let ack = Ack {
        ephemeral: peer_id(&ephemeral.public_key(SECP256K1)),
        nonce: random_nonce()?,
        version: VERSION,
    };
    let ack_wire = match received.format {
        Format::Eip8 => seal_eip8(&initiator_key, &ack.encode_eip8())?,
        Format::Old => ecies::encrypt(&initiator_key, &ack.encode_old(), &[])?,
    };
    write_all(io, &ack_wire).await?;

    let secrets = derive_secrets(
        false,
        &ephemeral,
        &their_ephemeral,
        &auth.nonce,
        &ack.nonce,
        &received.wire,
        &ack_wire,
    );
    Ok((auth.initiator, secrets))
}

/// Initiator side in the old fixed-size encoding, as pre-EIP-8 clients ran it. We
/// never send this; it exists to exercise the recipient's support for it.
#[cfg(test)]
pub(crate) async fn initiate_old<S>(
    io: &mut S,
    our_key: &SecretKey,
    remote: &PeerId,
) -> Result<Secrets, RlpxError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let remote_key = public_key(remote)?;
    let ephemeral = random_secret_key()?;
    let nonce = random_nonce()?;
    let auth = make_auth(our_key, &remote_key, &ephemeral, nonce);
    let mut plain = Vec::with_capacity(OLD_AUTH_PLAIN);
    plain.extend_from_slice(&auth.signature);
    plain
        .extend_from_slice(keccak(peer_id(&ephemeral.public_key(SECP256K1)).as_slice()).as_slice());
    plain.extend_from_slice(auth.initiator.as_slice());
    plain.extend_from_slice(nonce.as_slice());
    plain.push(0);
    let auth_wire = ecies::encrypt(&remote_key, &plain, &[])?;
    assert_eq!(auth_wire.len(), Kind::Auth.old_len());
    write_all(io, &auth_wire).await?;

    let received = read_message(io, our_key, Kind::Ack).await?;
    assert_eq!(received.format, Format::Old, "old auth must get an old ack");
    let ack = Ack::decode(&received.plain, received.format)?;
    let their_ephemeral = public_key(&ack.ephemeral)?;
    Ok(derive_secrets(
        true,
        &ephemeral,
        &their_ephemeral,
        &nonce,
        &ack.nonce,
        &auth_wire,
        &received.wire,
    ))
}

#[cfg(test)]
mod tests {
    //! Test vectors from EIP-8 (also in the devp2p RLPx spec): two static keys, two
    //! ephemeral keys, two nonces, and handshake messages built from them in the
    //! old and the EIP-8 encodings.

    use super::*;

    fn unhex(s: &str) -> Vec<u8> {
        let clean: String = s.chars().filter(|c| !c.is_whitespace()).collect();
        hex::decode(clean).unwrap()
    }

    fn key(s: &str) -> SecretKey {
        SecretKey::from_byte_array(unhex(s).try_into().unwrap()).unwrap()
    }

    fn static_a() -> SecretKey {
        key("49a7b37aa6f6645917e7b807e9d1c00d4fa71f18343b0d4122a4d2df64dd6fee")
    }
    fn static_b() -> SecretKey {
        key("b71c71a67e1177ad4e901695e1b4b9ee17ae16c6668d313eac2f96dbcda3f291")
    }
    fn ephemeral_a() -> SecretKey {
        key("869d6ecf5211f1cc60418a13b9d870b22959d0c16f02bec714c960dd2298a32d")
    }
    fn ephemeral_b() -> SecretKey {
        key("e238eb8e04fee6511ab04c6dd3c89ce097b11f25d584863ac2b6d5b35b1847e4")
    }
    fn nonce_a() -> B256 {
        B256::from_slice(&unhex(
            "7e968bba13b6c50e2c4cd7f241cc0d64d1ac25c7f5952df231ac6a2bda8ee5d6",
        ))
    }
    fn nonce_b() -> B256 {
        B256::from_slice(&unhex(
            "559aead08264d5795d3909718cdd05abd49572e84fe55590eef31a88a08fdffd",
        ))
    }
    fn id(key: &SecretKey) -> PeerId {
        peer_id(&key.public_key(SECP256K1))
    }

    const AUTH_SIGNATURE: &str = "299ca6acfd35e3d72d8ba3d1e2b60b5561d5af5218eb5bc182045769eb4226910a301acae3b369fffc4a4899d6b02531e89fd4fe36a2cf0d93607ba470b50f7800";

    /// Auth₁: old encoding.
    const AUTH_1: &str = "
        048ca79ad18e4b0659fab4853fe5bc58eb83992980f4c9cc147d2aa31532efd29a3d3dc6a3d89eaf
        913150cfc777ce0ce4af2758bf4810235f6e6ceccfee1acc6b22c005e9e3a49d6448610a58e98744
        ba3ac0399e82692d67c1f58849050b3024e21a52c9d3b01d871ff5f210817912773e610443a9ef14
        2e91cdba0bd77b5fdf0769b05671fc35f83d83e4d3b0b000c6b2a1b1bba89e0fc51bf4e460df3105
        c444f14be226458940d6061c296350937ffd5e3acaceeaaefd3c6f74be8e23e0f45163cc7ebd7622
        0f0128410fd05250273156d548a414444ae2f7dea4dfca2d43c057adb701a715bf59f6fb66b2d1d2
        0f2c703f851cbf5ac47396d9ca65b6260bd141ac4d53e2de585a73d1750780db4c9ee4cd4d225173
        a4592ee77e2bd94d0be3691f3b406f9bba9b591fc63facc016bfa8";

    /// Auth₂: EIP-8 encoding, version 4.
    const AUTH_2: &str = "
        01b304ab7578555167be8154d5cc456f567d5ba302662433674222360f08d5f1534499d3678b513b
        0fca474f3a514b18e75683032eb63fccb16c156dc6eb2c0b1593f0d84ac74f6e475f1b8d56116b84
        9634a8c458705bf83a626ea0384d4d7341aae591fae42ce6bd5c850bfe0b999a694a49bbbaf3ef6c
        da61110601d3b4c02ab6c30437257a6e0117792631a4b47c1d52fc0f8f89caadeb7d02770bf999cc
        147d2df3b62e1ffb2c9d8c125a3984865356266bca11ce7d3a688663a51d82defaa8aad69da39ab6
        d5470e81ec5f2a7a47fb865ff7cca21516f9299a07b1bc63ba56c7a1a892112841ca44b6e0034dee
        70c9adabc15d76a54f443593fafdc3b27af8059703f88928e199cb122362a4b35f62386da7caad09
        c001edaeb5f8a06d2b26fb6cb93c52a9fca51853b68193916982358fe1e5369e249875bb8d0d0ec3
        6f917bc5e1eafd5896d46bd61ff23f1a863a8a8dcd54c7b109b771c8e61ec9c8908c733c0263440e
        2aa067241aaa433f0bb053c7b31a838504b148f570c0ad62837129e547678c5190341e4f1693956c
        3bf7678318e2d5b5340c9e488eefea198576344afbdf66db5f51204a6961a63ce072c8926c";

    /// Auth₃: EIP-8 encoding, version 56 and extra list elements.
    const AUTH_3: &str = "
        01b8044c6c312173685d1edd268aa95e1d495474c6959bcdd10067ba4c9013df9e40ff45f5bfd6f7
        2471f93a91b493f8e00abc4b80f682973de715d77ba3a005a242eb859f9a211d93a347fa64b597bf
        280a6b88e26299cf263b01b8dfdb712278464fd1c25840b995e84d367d743f66c0e54a586725b7bb
        f12acca27170ae3283c1073adda4b6d79f27656993aefccf16e0d0409fe07db2dc398a1b7e8ee93b
        cd181485fd332f381d6a050fba4c7641a5112ac1b0b61168d20f01b479e19adf7fdbfa0905f63352
        bfc7e23cf3357657455119d879c78d3cf8c8c06375f3f7d4861aa02a122467e069acaf513025ff19
        6641f6d2810ce493f51bee9c966b15c5043505350392b57645385a18c78f14669cc4d960446c1757
        1b7c5d725021babbcd786957f3d17089c084907bda22c2b2675b4378b114c601d858802a55345a15
        116bc61da4193996187ed70d16730e9ae6b3bb8787ebcaea1871d850997ddc08b4f4ea668fbf3740
        7ac044b55be0908ecb94d4ed172ece66fd31bfdadf2b97a8bc690163ee11f5b575a4b44e36e2bfb2
        f0fce91676fd64c7773bac6a003f481fddd0bae0a1f31aa27504e2a533af4cef3b623f4791b2cca6
        d490";

    /// Ack₁: old encoding.
    const ACK_1: &str = "
        049f8abcfa9c0dc65b982e98af921bc0ba6e4243169348a236abe9df5f93aa69d99cadddaa387662
        b0ff2c08e9006d5a11a278b1b3331e5aaabf0a32f01281b6f4ede0e09a2d5f585b26513cb794d963
        5a57563921c04a9090b4f14ee42be1a5461049af4ea7a7f49bf4c97a352d39c8d02ee4acc416388c
        1c66cec761d2bc1c72da6ba143477f049c9d2dde846c252c111b904f630ac98e51609b3b1f58168d
        dca6505b7196532e5f85b259a20c45e1979491683fee108e9660edbf38f3add489ae73e3dda2c71b
        d1497113d5c755e942d1";

    /// Ack₂: EIP-8 encoding, version 4.
    const ACK_2: &str = "
        01ea0451958701280a56482929d3b0757da8f7fbe5286784beead59d95089c217c9b917788989470
        b0e330cc6e4fb383c0340ed85fab836ec9fb8a49672712aeabbdfd1e837c1ff4cace34311cd7f4de
        05d59279e3524ab26ef753a0095637ac88f2b499b9914b5f64e143eae548a1066e14cd2f4bd7f814
        c4652f11b254f8a2d0191e2f5546fae6055694aed14d906df79ad3b407d94692694e259191cde171
        ad542fc588fa2b7333313d82a9f887332f1dfc36cea03f831cb9a23fea05b33deb999e85489e645f
        6aab1872475d488d7bd6c7c120caf28dbfc5d6833888155ed69d34dbdc39c1f299be1057810f34fb
        e754d021bfca14dc989753d61c413d261934e1a9c67ee060a25eefb54e81a4d14baff922180c395d
        3f998d70f46f6b58306f969627ae364497e73fc27f6d17ae45a413d322cb8814276be6ddd13b885b
        201b943213656cde498fa0e9ddc8e0b8f8a53824fbd82254f3e2c17e8eaea009c38b4aa0a3f306e8
        797db43c25d68e86f262e564086f59a2fc60511c42abfb3057c247a8a8fe4fb3ccbadde17514b7ac
        8000cdb6a912778426260c47f38919a91f25f4b5ffb455d6aaaf150f7e5529c100ce62d6d92826a7
        1778d809bdf60232ae21ce8a437eca8223f45ac37f6487452ce626f549b3b5fdee26afd2072e4bc7
        5833c2464c805246155289f4";

    /// Ack₃: EIP-8 encoding, version 57 and extra list elements.
    const ACK_3: &str = "
        01f004076e58aae772bb101ab1a8e64e01ee96e64857ce82b1113817c6cdd52c09d26f7b90981cd7
        ae835aeac72e1573b8a0225dd56d157a010846d888dac7464baf53f2ad4e3d584531fa203658fab0
        3a06c9fd5e35737e417bc28c1cbf5e5dfc666de7090f69c3b29754725f84f75382891c561040ea1d
        dc0d8f381ed1b9d0d4ad2a0ec021421d847820d6fa0ba66eaf58175f1b235e851c7e2124069fbc20
        2888ddb3ac4d56bcbd1b9b7eab59e78f2e2d400905050f4a92dec1c4bdf797b3fc9b2f8e84a482f3
        d800386186712dae00d5c386ec9387a5e9c9a1aca5a573ca91082c7d68421f388e79127a5177d4f8
        590237364fd348c9611fa39f78dcdceee3f390f07991b7b47e1daa3ebcb6ccc9607811cb17ce51f1
        c8c2c5098dbdd28fca547b3f58c01a424ac05f869f49c6a34672ea2cbbc558428aa1fe48bbfd6115
        8b1b735a65d99f21e70dbc020bfdface9f724a0d1fb5895db971cc81aa7608baa0920abb0a565c9c
        436e2fd13323428296c86385f2384e408a31e104670df0791d93e743a3a5194ee6b076fb6323ca59
        3011b7348c16cf58f66b9633906ba54a2ee803187344b394f75dd2e663a57b956cb830dd7a908d4f
        39a2336a61ef9fda549180d4ccde21514d117b6c6fd07a9102b5efe710a32af4eeacae2cb3b1dec0
        35b9593b48b9d3ca4c13d245d5f04169b0b1";

    /// Reads a message from a byte slice and checks it consumed exactly that slice.
    async fn read_vector(input: &[u8], our_key: &SecretKey, kind: Kind) -> Received {
        let mut reader = input;
        let received = read_message(&mut reader, our_key, kind).await.unwrap();
        assert!(reader.is_empty(), "message not consumed entirely");
        assert_eq!(received.wire, input);
        received
    }

    #[tokio::test]
    async fn eip8_vectors_auth() {
        let cases = [
            (AUTH_1, Format::Old, 4),
            (AUTH_2, Format::Eip8, 4),
            (AUTH_3, Format::Eip8, 56),
        ];
        for (input, format, version) in cases {
            let received = read_vector(&unhex(input), &static_b(), Kind::Auth).await;
            assert_eq!(received.format, format);
            let auth = Auth::decode(&received.plain, received.format).unwrap();
            assert_eq!(auth.signature.as_slice(), unhex(AUTH_SIGNATURE));
            assert_eq!(auth.initiator, id(&static_a()));
            assert_eq!(auth.nonce, nonce_a());
            assert_eq!(auth.version, version);
            assert_eq!(auth.ephemeral_hash.is_some(), format == Format::Old);

            let ephemeral = auth
                .recover_ephemeral(&static_b(), &static_a().public_key(SECP256K1))
                .unwrap();
            assert_eq!(peer_id(&ephemeral), id(&ephemeral_a()));
        }
    }

    #[tokio::test]
    async fn eip8_vectors_ack() {
        let cases = [
            (ACK_1, Format::Old, 4),
            (ACK_2, Format::Eip8, 4),
            (ACK_3, Format::Eip8, 57),
        ];
        for (input, format, version) in cases {
            let received = read_vector(&unhex(input), &static_a(), Kind::Ack).await;
            assert_eq!(received.format, format);
            let ack = Ack::decode(&received.plain, received.format).unwrap();
            assert_eq!(
                ack,
                Ack {
                    ephemeral: id(&ephemeral_b()),
                    nonce: nonce_b(),
                    version,
                }
            );
        }
    }

    #[test]
    fn eip8_vectors_secrets() {
        let auth = unhex(AUTH_2);
        let ack = unhex(ACK_2);
        let recipient = derive_secrets(
            false,
            &ephemeral_b(),
            &ephemeral_a().public_key(SECP256K1),
            &nonce_a(),
            &nonce_b(),
            &auth,
            &ack,
        );
        assert_eq!(
            recipient.aes.as_slice(),
            unhex("80e8632c05fed6fc2a13b0f8d31a3cf645366239170ea067065aba8e28bac487")
        );
        assert_eq!(
            recipient.mac.as_slice(),
            unhex("2ea74ec5dae199227dff1af715362700e989d889d7a493cb0639691efb8e5f98")
        );
        let mut ingress = recipient.ingress_mac.clone();
        ingress.update(b"foo");
        assert_eq!(
            <[u8; 32]>::from(ingress.finalize()).to_vec(),
            unhex("0c7ec6340062cc46f5e9f1e3cf86f8c8c403c5a0964f5df0ebd34a75ddc86db5")
        );

        // The initiator, from its side of the same exchange, ends up with the same
        // secrets and the MAC states crossed over.
        let initiator = derive_secrets(
            true,
            &ephemeral_a(),
            &ephemeral_b().public_key(SECP256K1),
            &nonce_a(),
            &nonce_b(),
            &auth,
            &ack,
        );
        assert_eq!(initiator.aes, recipient.aes);
        assert_eq!(initiator.mac, recipient.mac);
        assert_eq!(
            initiator.egress_mac.finalize(),
            recipient.ingress_mac.finalize()
        );
        assert_eq!(
            initiator.ingress_mac.finalize(),
            recipient.egress_mac.finalize()
        );
    }

    #[test]
    fn our_auth_signature_recovers_our_ephemeral_key() {
        // The published signature was not made with RFC 6979 nonces, so ours
        // differs byte for byte; what matters is that the recipient recovers the
        // same ephemeral key from it, as it does from the published one.
        let auth = make_auth(
            &static_a(),
            &static_b().public_key(SECP256K1),
            &ephemeral_a(),
            nonce_a(),
        );
        assert_eq!(auth.initiator, id(&static_a()));
        assert!(auth.signature[64] <= 1);
        let recovered = auth
            .recover_ephemeral(&static_b(), &static_a().public_key(SECP256K1))
            .unwrap();
        assert_eq!(peer_id(&recovered), id(&ephemeral_a()));
        // And as an old-style auth, with the ephemeral key's hash alongside.
        let old = Auth {
            ephemeral_hash: Some(keccak(id(&ephemeral_a()).as_slice())),
            ..auth
        };
        assert!(
            old.recover_ephemeral(&static_b(), &static_a().public_key(SECP256K1))
                .is_ok()
        );
    }

    #[test]
    fn eip8_bodies_round_trip() {
        let auth = make_auth(
            &static_a(),
            &static_b().public_key(SECP256K1),
            &ephemeral_a(),
            nonce_a(),
        );
        let body = auth.encode_eip8();
        assert_eq!(body.len(), MIN_AUTH_RLP);
        let mut padded = body.clone();
        padded.extend_from_slice(&[0xff; 100]);
        assert_eq!(Auth::decode(&padded, Format::Eip8).unwrap(), auth);

        let ack = Ack {
            ephemeral: id(&ephemeral_b()),
            nonce: nonce_b(),
            version: VERSION,
        };
        let body = ack.encode_eip8();
        assert_eq!(body.len(), MIN_ACK_RLP);
        assert_eq!(Ack::decode(&body, Format::Eip8).unwrap(), ack);
        assert_eq!(Ack::decode(&ack.encode_old(), Format::Old).unwrap(), ack);
    }

    #[test]
    fn malformed_bodies_are_errors() {
        let auth = make_auth(
            &static_a(),
            &static_b().public_key(SECP256K1),
            &ephemeral_a(),
            nonce_a(),
        );
        let body = auth.encode_eip8();
        for len in 0..body.len() {
            assert!(matches!(
                Auth::decode(&body[..len], Format::Eip8),
                Err(RlpxError::Handshake(_))
            ));
        }
        // Not a list at all.
        assert!(Auth::decode(&[0x82, 0x01, 0x02], Format::Eip8).is_err());
        // A list whose signature is one byte short.
        let short = rlp_list_encode(&[
            &&auth.signature[..64],
            &auth.initiator.as_slice(),
            &auth.nonce.as_slice(),
            &VERSION,
        ]);
        assert!(matches!(
            Auth::decode(&short, Format::Eip8),
            Err(RlpxError::Handshake(_))
        ));
        assert!(Auth::decode(&[0u8; OLD_AUTH_PLAIN - 1], Format::Old).is_err());
        assert!(Ack::decode(&[0u8; OLD_ACK_PLAIN + 1], Format::Old).is_err());
        assert!(Ack::decode(&[0xc0], Format::Eip8).is_err());
    }

    #[test]
    fn forged_auth_signature_is_rejected() {
        let mut auth = make_auth(
            &static_a(),
            &static_b().public_key(SECP256K1),
            &ephemeral_a(),
            nonce_a(),
        );
        // The recipient holding a different key computes another shared secret and
        // so recovers a different key; with an old-style hash that is caught here.
        auth.ephemeral_hash = Some(keccak(id(&ephemeral_a()).as_slice()));
        let other = random_secret_key().unwrap();
        assert!(matches!(
            auth.recover_ephemeral(&other, &static_a().public_key(SECP256K1)),
            Err(RlpxError::Handshake(_))
        ));
        auth.signature[64] = 7;
        assert!(matches!(
            auth.recover_ephemeral(&static_b(), &static_a().public_key(SECP256K1)),
            Err(RlpxError::Handshake(_))
        ));
    }

    #[tokio::test]
    async fn size_prefix_limits() {
        let key = static_b();
        for (prefix, kind) in [
            (0xffffu16, Kind::Auth),
            (2049, Kind::Auth),
            (2049, Kind::Ack),
            (0, Kind::Auth),
            (MIN_AUTH_RLP as u16 + ecies::OVERHEAD as u16 - 1, Kind::Auth),
            (MIN_ACK_RLP as u16 + ecies::OVERHEAD as u16 - 1, Kind::Ack),
        ] {
            // Plenty of bytes follow, so only the prefix check can stop it.
            let mut input = prefix.to_be_bytes().to_vec();
            input.resize(70_000, 0xab);
            let mut reader = &input[..];
            let err = read_message(&mut reader, &key, kind).await.err().unwrap();
            assert!(matches!(err, RlpxError::Handshake(_)), "{prefix}: {err}");
            assert_eq!(reader.len(), input.len() - 2, "read past the prefix");
        }
    }

    #[tokio::test]
    async fn old_and_eip8_sealing_both_read_back() {
        let b = static_b().public_key(SECP256K1);
        let ack = Ack {
            ephemeral: id(&ephemeral_a()),
            nonce: nonce_a(),
            version: VERSION,
        };
        for _ in 0..20 {
            let wire = seal_eip8(&b, &ack.encode_eip8()).unwrap();
            let received = read_vector(&wire, &static_b(), Kind::Ack).await;
            assert_eq!(received.format, Format::Eip8);
            assert_eq!(Ack::decode(&received.plain, Format::Eip8).unwrap(), ack);
        }
        let wire = ecies::encrypt(&b, &ack.encode_old(), &[]).unwrap();
        assert_eq!(wire.len(), Kind::Ack.old_len());
        let received = read_vector(&wire, &static_b(), Kind::Ack).await;
        assert_eq!(received.format, Format::Old);
    }

    #[tokio::test]
    async fn eip8_message_whose_prefix_starts_with_04() {
        // A size prefix of 0x04xx looks like the start of an old message. Build one
        // by hand (a body padded out to ~1100 bytes) and check it is still read.
        let b = static_b().public_key(SECP256K1);
        let ack = Ack {
            ephemeral: id(&ephemeral_a()),
            nonce: nonce_a(),
            version: VERSION,
        };
        let mut plain = ack.encode_eip8();
        plain.resize(1100 - ecies::OVERHEAD, 0);
        let prefix = 1100u16.to_be_bytes();
        assert_eq!(prefix[0], 0x04);
        let mut wire = prefix.to_vec();
        wire.extend_from_slice(&ecies::encrypt(&b, &plain, &prefix).unwrap());
        let received = read_vector(&wire, &static_b(), Kind::Ack).await;
        assert_eq!(received.format, Format::Eip8);
        assert_eq!(Ack::decode(&received.plain, Format::Eip8).unwrap(), ack);
    }
}
