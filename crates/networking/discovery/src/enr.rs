//! Ethereum Node Records (EIP-778) with the "v4" identity scheme, and the `eth` entry
//! (EIP-2124 fork id) that execution clients put in them.
//!
//! A record is the RLP list `[signature, seq, k1, v1, k2, v2, ...]`: keys are byte
//! strings in strictly increasing order, values any RLP item, the whole at most 300
//! bytes. Under "v4" the signature is the 64-byte `r || s` secp256k1 signature of
//! `keccak256(rlp([seq, k1, v1, ...]))` by the key in the `secp256k1` entry (33 bytes,
//! compressed), and the node id is that key uncompressed (see [`crate::NodeId`]).
//!
//! Values are kept as the raw RLP the signer wrote, so a record received is served
//! again byte for byte, whatever entries it has that we do not know.

use crate::NodeId;
use crate::rlp::{self, RlpReader};
use alloy_primitives::{B256, keccak256};
use alloy_rlp::Encodable;
use base64::Engine;
use moat_common::config::ForkId;
use secp256k1::{Message, PublicKey, SECP256K1, SecretKey};
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Largest encoded record EIP-778 allows.
pub const MAX_ENR_SIZE: usize = 300;

/// Why a record cannot be decoded, built or trusted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EnrError {
    /// The encoding is larger than [`MAX_ENR_SIZE`] (its size in bytes).
    #[error("record is {0} bytes, more than 300")]
    TooBig(usize),
    /// The record is not well-formed RLP.
    #[error("record RLP: {0}")]
    Rlp(#[from] rlp::RlpError),
    /// The key/value list has an odd number of items.
    #[error("record has a key without a value")]
    OddPairs,
    /// Keys are not sorted or repeat (EIP-778 requires strictly increasing order).
    #[error("record keys are not in strictly increasing order")]
    UnsortedKeys,
    /// The `id` (identity scheme) entry is missing.
    #[error("record has no \"id\" entry")]
    NoScheme,
    /// The identity scheme is not `v4` (the scheme named).
    #[error("record uses identity scheme {0:?}, not \"v4\"")]
    UnknownScheme(String),
    /// The `secp256k1` entry is missing or not a valid compressed public key.
    #[error("record has no valid \"secp256k1\" public key")]
    BadPublicKey,
    /// The signature is not 64 bytes (`r || s`).
    #[error("record signature is not 64 bytes")]
    BadSignatureLength,
    /// The signature does not verify against the record's public key.
    #[error("record signature does not verify")]
    BadSignature,
    /// Text form is not `enr:` followed by unpadded base64url.
    #[error("record text must be \"enr:\" followed by unpadded base64url")]
    BadText,
    /// Bytes follow the record's RLP list.
    #[error("record has bytes after its end")]
    TrailingBytes,
}

/// A verified node record.
#[derive(Clone, PartialEq, Eq)]
pub struct Enr {
    seq: u64,
    /// Sorted by key; values are raw RLP items.
    pairs: Vec<(Vec<u8>, Vec<u8>)>,
    id: NodeId,
    /// The record's full encoding, as received or as signed.
    raw: Vec<u8>,
}

/// What our own record says (besides the identity): addresses and the fork id (with
/// which the record also names snap/1).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EnrFields {
    /// Our address: written as `ip` (IPv4) or `ip6` (IPv6).
    pub ip: Option<IpAddr>,
    /// Our RLPx port (`tcp` or `tcp6`, following `ip`'s family).
    pub tcp: Option<u16>,
    /// Our discovery port (`udp` or `udp6`, following `ip`'s family).
    pub udp: Option<u16>,
    /// Our EIP-2124 fork id, written as the `eth` entry.
    pub fork_id: Option<ForkId>,
}

impl Enr {
    /// Signs a record with `key` holding `fields`.
    pub fn build(key: &SecretKey, seq: u64, fields: &EnrFields) -> Result<Enr, EnrError> {
        let mut pairs: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        let ip6 = matches!(fields.ip, Some(IpAddr::V6(_)));
        if let Some(fork) = fields.fork_id {
            pairs.push((b"eth".to_vec(), encode_eth_entry(fork)));
            // A node that speaks eth serves snap/1 beside it; geth's `snap` entry is an
            // empty list.
            pairs.push((b"snap".to_vec(), vec![alloy_rlp::EMPTY_LIST_CODE]));
        }
        match fields.ip {
            Some(IpAddr::V4(ip)) => pairs.push((b"ip".to_vec(), rlp::bytes(&ip.octets()))),
            Some(IpAddr::V6(ip)) => pairs.push((b"ip6".to_vec(), rlp::bytes(&ip.octets()))),
            None => {}
        }
        if let Some(tcp) = fields.tcp {
            let k: &[u8] = if ip6 { b"tcp6" } else { b"tcp" };
            pairs.push((k.to_vec(), rlp::uint(u64::from(tcp))));
        }
        if let Some(udp) = fields.udp {
            let k: &[u8] = if ip6 { b"udp6" } else { b"udp" };
            pairs.push((k.to_vec(), rlp::uint(u64::from(udp))));
        }
        Enr::sign(key, seq, pairs)
    }

    /// Signs a record with arbitrary entries (values as RLP items) plus the identity
    /// entries `id` and `secp256k1`, which this adds.
    pub fn sign(
        key: &SecretKey,
        seq: u64,
        mut pairs: Vec<(Vec<u8>, Vec<u8>)>,
    ) -> Result<Enr, EnrError> {
        let public = key.public_key(SECP256K1);
        pairs.retain(|(k, _)| k != b"id" && k != b"secp256k1");
        pairs.push((b"id".to_vec(), rlp::bytes(b"v4")));
        pairs.push((b"secp256k1".to_vec(), rlp::bytes(&public.serialize())));
        pairs.sort_by(|a, b| a.0.cmp(&b.0));
        if pairs.windows(2).any(|w| w[0].0 == w[1].0) {
            return Err(EnrError::UnsortedKeys);
        }
        let mut content = Vec::new();
        seq.encode(&mut content);
        for (k, v) in &pairs {
            k.as_slice().encode(&mut content);
            content.extend_from_slice(v);
        }
        let digest = keccak256(rlp::list(&content));
        let signature = SECP256K1
            .sign_ecdsa(Message::from_digest(digest.0), key)
            .serialize_compact();
        let mut payload = rlp::bytes(&signature);
        payload.extend_from_slice(&content);
        let raw = rlp::list(&payload);
        if raw.len() > MAX_ENR_SIZE {
            return Err(EnrError::TooBig(raw.len()));
        }
        Ok(Enr {
            seq,
            pairs,
            id: crate::node_id(&public),
            raw,
        })
    }

    /// Decodes and verifies one record at the front of `buf`, advancing it.
    pub fn decode(buf: &mut &[u8]) -> Result<Enr, EnrError> {
        let start = *buf;
        let mut payload = rlp::take_list(buf)?;
        let raw = &start[..start.len() - buf.len()];
        if raw.len() > MAX_ENR_SIZE {
            return Err(EnrError::TooBig(raw.len()));
        }
        let signature = rlp::take_bytes(&mut payload)?;
        // The signed content is the rest of the list, re-wrapped as a list.
        let content = payload;
        let mut r = RlpReader::new(payload);
        let seq = r.uint::<u64>()?;
        let mut pairs: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        while !r.is_empty() {
            let key = r.bytes()?;
            if r.is_empty() {
                return Err(EnrError::OddPairs);
            }
            let value = r.raw()?;
            if let Some((last, _)) = pairs.last()
                && last.as_slice() >= key
            {
                return Err(EnrError::UnsortedKeys);
            }
            pairs.push((key.to_vec(), value.to_vec()));
        }
        let lookup = |k: &[u8]| pairs.iter().find(|(key, _)| key == k).map(|(_, v)| v);
        let scheme = lookup(b"id").ok_or(EnrError::NoScheme)?;
        let scheme = rlp::decode_bytes_exact(scheme).map_err(|_| EnrError::NoScheme)?;
        if scheme != b"v4" {
            return Err(EnrError::UnknownScheme(
                String::from_utf8_lossy(scheme).into_owned(),
            ));
        }
        let key_bytes = lookup(b"secp256k1")
            .and_then(|v| rlp::decode_bytes_exact(v).ok())
            .filter(|b| b.len() == 33)
            .ok_or(EnrError::BadPublicKey)?;
        let public = PublicKey::from_slice(key_bytes).map_err(|_| EnrError::BadPublicKey)?;
        if signature.len() != 64 {
            return Err(EnrError::BadSignatureLength);
        }
        let sig = secp256k1::ecdsa::Signature::from_compact(signature)
            .map_err(|_| EnrError::BadSignature)?;
        let digest = keccak256(rlp::list(content));
        SECP256K1
            .verify_ecdsa(Message::from_digest(digest.0), &sig, &public)
            .map_err(|_| EnrError::BadSignature)?;
        Ok(Enr {
            seq,
            pairs,
            id: crate::node_id(&public),
            raw: raw.to_vec(),
        })
    }

    /// Decodes a record that must fill `bytes` exactly.
    pub fn decode_exact(mut bytes: &[u8]) -> Result<Enr, EnrError> {
        let enr = Enr::decode(&mut bytes)?;
        if !bytes.is_empty() {
            return Err(EnrError::TrailingBytes);
        }
        Ok(enr)
    }

    /// The sequence number: a record with a higher one replaces a lower one.
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// The node id (the signer's public key, uncompressed).
    pub fn id(&self) -> NodeId {
        self.id
    }

    /// `keccak256(id)`, the key of the node table.
    pub fn node_hash(&self) -> B256 {
        keccak256(self.id)
    }

    /// The encoded record.
    pub fn as_bytes(&self) -> &[u8] {
        &self.raw
    }

    /// The raw RLP value of an entry.
    pub fn get(&self, key: &[u8]) -> Option<&[u8]> {
        self.pairs
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_slice())
    }

    /// Every entry's key and raw RLP value, in key order.
    pub fn entries(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.pairs.iter().map(|(k, v)| (k.as_slice(), v.as_slice()))
    }

    fn get_uint16(&self, key: &[u8]) -> Option<u16> {
        let mut r = self.get(key)?;
        let v = rlp::take_uint::<u16>(&mut r).ok()?;
        r.is_empty().then_some(v)
    }

    /// The `ip` entry: the node's IPv4 address.
    pub fn ip4(&self) -> Option<Ipv4Addr> {
        let b = rlp::decode_bytes_exact(self.get(b"ip")?).ok()?;
        <[u8; 4]>::try_from(b).ok().map(Ipv4Addr::from)
    }

    /// The `ip6` entry: the node's IPv6 address.
    pub fn ip6(&self) -> Option<Ipv6Addr> {
        let b = rlp::decode_bytes_exact(self.get(b"ip6")?).ok()?;
        <[u8; 16]>::try_from(b).ok().map(Ipv6Addr::from)
    }

    /// The `tcp` entry: the RLPx port on the IPv4 address.
    pub fn tcp4(&self) -> Option<u16> {
        self.get_uint16(b"tcp")
    }

    /// The `udp` entry: the discovery port on the IPv4 address.
    pub fn udp4(&self) -> Option<u16> {
        self.get_uint16(b"udp")
    }

    /// The `tcp6` entry: the RLPx port on the IPv6 address.
    pub fn tcp6(&self) -> Option<u16> {
        self.get_uint16(b"tcp6")
    }

    /// The `udp6` entry: the discovery port on the IPv6 address.
    pub fn udp6(&self) -> Option<u16> {
        self.get_uint16(b"udp6")
    }

    /// The IPv4 address and ports if the record has them, else the IPv6 ones.
    pub fn ip(&self) -> Option<IpAddr> {
        self.ip4()
            .map(IpAddr::V4)
            .or_else(|| self.ip6().map(IpAddr::V6))
    }

    /// The TCP port that goes with [`Enr::ip`].
    pub fn tcp(&self) -> Option<u16> {
        match self.ip()? {
            IpAddr::V4(_) => self.tcp4(),
            IpAddr::V6(_) => self.tcp6().or_else(|| self.tcp4()),
        }
    }

    /// The UDP port that goes with [`Enr::ip`].
    pub fn udp(&self) -> Option<u16> {
        match self.ip()? {
            IpAddr::V4(_) => self.udp4(),
            IpAddr::V6(_) => self.udp6().or_else(|| self.udp4()),
        }
    }

    /// The fork id of the `eth` entry: `[[fork_hash, fork_next], ...]`, later elements
    /// ignored (forward compatibility, as geth).
    pub fn eth_fork_id(&self) -> Option<ForkId> {
        decode_eth_entry(self.get(b"eth")?)
    }

    /// The text form: `enr:` and the record in unpadded base64url.
    pub fn to_text(&self) -> String {
        format!(
            "enr:{}",
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&self.raw)
        )
    }
}

/// `[[fork_hash, fork_next]]`, the value of the `eth` entry.
pub fn encode_eth_entry(fork: ForkId) -> Vec<u8> {
    let mut inner = rlp::bytes(&fork.hash);
    fork.next.encode(&mut inner);
    rlp::list(&rlp::list(&inner))
}

/// Reads the value of an `eth` entry; `None` if it is not `[[bytes4, uint], ...]`.
pub fn decode_eth_entry(value: &[u8]) -> Option<ForkId> {
    let mut v = value;
    let mut outer = rlp::take_list(&mut v).ok()?;
    if !v.is_empty() {
        return None;
    }
    let mut fork = rlp::take_list(&mut outer).ok()?;
    let hash: [u8; 4] = rlp::take_bytes(&mut fork).ok()?.try_into().ok()?;
    let next = rlp::take_uint::<u64>(&mut fork).ok()?;
    Some(ForkId { hash, next })
}

impl std::str::FromStr for Enr {
    type Err = EnrError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let text = s.trim().strip_prefix("enr:").ok_or(EnrError::BadText)?;
        let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(text)
            .map_err(|_| EnrError::BadText)?;
        Enr::decode_exact(&raw)
    }
}

impl fmt::Display for Enr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_text())
    }
}

impl fmt::Debug for Enr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Enr")
            .field("seq", &self.seq)
            .field("id", &self.id)
            .field("ip", &self.ip())
            .field("tcp", &self.tcp())
            .field("udp", &self.udp())
            .field("eth", &self.eth_fork_id())
            .finish()
    }
}

impl Encodable for Enr {
    fn encode(&self, out: &mut dyn alloy_rlp::BufMut) {
        out.put_slice(&self.raw);
    }

    fn length(&self) -> usize {
        self.raw.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(b: u8) -> SecretKey {
        SecretKey::from_byte_array([b; 32]).unwrap()
    }

    #[test]
    fn eip778_example_record_decodes() {
        // The example record of EIP-778 (private key b71c71a6...291).
        let text = "enr:-IS4QHCYrYZbAKWCBRlAy5zzaDZXJBGkcnh4MHcBFZntXNFrdvJjX04jRzjzCBOonrkTfj499SZuOh8R33Ls8RRcy5wBgmlkgnY0gmlwhH8AAAGJc2VjcDI1NmsxoQPKY0yuDUmstAHYpMa2_oxVtw0RW_QAdpzBQA8yWM0xOIN1ZHCCdl8";
        let enr: Enr = text.parse().unwrap();
        assert_eq!(enr.seq(), 1);
        assert_eq!(enr.ip4(), Some(Ipv4Addr::new(127, 0, 0, 1)));
        assert_eq!(enr.udp4(), Some(30303));
        assert_eq!(enr.tcp4(), None);
        assert_eq!(
            alloy_primitives::hex::encode(enr.node_hash()),
            "a448f24c6d18e575453db13171562b71999873db5b286df957af199ec94617f7"
        );
        assert_eq!(enr.to_text(), text);
        let sk = SecretKey::from_byte_array(
            alloy_primitives::hex::decode(
                "b71c71a67e1177ad4e901695e1b4b9ee17ae16c6668d313eac2f96dbcda3f291",
            )
            .unwrap()
            .try_into()
            .unwrap(),
        )
        .unwrap();
        assert_eq!(enr.id(), crate::node_id(&sk.public_key(SECP256K1)));
    }

    #[test]
    fn build_round_trip_with_fork_id() {
        let fork = ForkId {
            hash: [0xde, 0xad, 0xbe, 0xef],
            next: 1_700_000_000,
        };
        let fields = EnrFields {
            ip: Some(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1))),
            tcp: Some(30303),
            udp: Some(30304),
            fork_id: Some(fork),
        };
        let enr = Enr::build(&key(7), 3, &fields).unwrap();
        let back = Enr::decode_exact(enr.as_bytes()).unwrap();
        assert_eq!(back, enr);
        assert_eq!(back.eth_fork_id(), Some(fork));
        assert_eq!(back.get(b"snap"), Some(&[0xc0][..]));
        assert_eq!(back.ip(), fields.ip);
        assert_eq!(back.tcp(), Some(30303));
        assert_eq!(back.udp(), Some(30304));
        assert_eq!(back.seq(), 3);
        let text: Enr = enr.to_text().parse().unwrap();
        assert_eq!(text, enr);
    }

    #[test]
    fn tampered_records_are_refused() {
        let enr = Enr::build(&key(9), 1, &EnrFields::default()).unwrap();
        let raw = enr.as_bytes().to_vec();
        // Flip a byte of the seq: the signature no longer verifies.
        let mut bad = raw.clone();
        let last = bad.len() - 1;
        bad[last] ^= 1;
        assert!(Enr::decode_exact(&bad).is_err());
        // Trailing bytes.
        let mut long = raw.clone();
        long.push(0x80);
        assert_eq!(Enr::decode_exact(&long), Err(EnrError::TrailingBytes));
        // Unsorted keys.
        let pairs = vec![(b"zz".to_vec(), rlp::bytes(b"1"))];
        let ok = Enr::sign(&key(9), 1, pairs).unwrap();
        assert!(Enr::decode_exact(ok.as_bytes()).is_ok());
        // Too big.
        let pairs = vec![(b"big".to_vec(), rlp::bytes(&[1u8; 300]))];
        assert!(matches!(
            Enr::sign(&key(9), 1, pairs),
            Err(EnrError::TooBig(_))
        ));
    }

    #[test]
    fn eth_entry_is_forward_compatible() {
        let fork = ForkId {
            hash: [1, 2, 3, 4],
            next: 0,
        };
        let plain = encode_eth_entry(fork);
        assert_eq!(decode_eth_entry(&plain), Some(fork));
        // [[hash, next, extra], extra]
        let mut inner = rlp::bytes(&fork.hash);
        fork.next.encode(&mut inner);
        7u64.encode(&mut inner);
        let mut outer = rlp::list(&inner);
        outer.extend_from_slice(&rlp::bytes(b"x"));
        assert_eq!(decode_eth_entry(&rlp::list(&outer)), Some(fork));
        assert_eq!(decode_eth_entry(&rlp::bytes(b"abcd")), None);
    }
}
