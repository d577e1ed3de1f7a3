//! Typed transactions: legacy (pre-EIP-155 and EIP-155), EIP-2930, EIP-1559, EIP-4844 and
//! EIP-7702, with their EIP-2718 envelopes.
//!
//! Decoding is strict (see [`crate::rlp`]): a decoded transaction re-encodes to exactly the
//! bytes it came from, so the hash is taken over the input without re-encoding. Signature
//! values are range-checked at decode time (r, s in [1, n), s ≤ n/2, yParity 0 or 1, legacy
//! `v` 27/28 or ≥ 35); the signer itself is recovered only on request, because that is the
//! expensive step the pool shields with its cache.
//!
//! Forms:
//! - envelope (`*_2718`): `rlp(legacy)` or `type || rlp(fields)`; what `eth_sendRawTransaction`
//!   carries and what the hash covers;
//! - network element (`*_network`): inside an RLP list (block bodies, eth `Transactions`),
//!   typed envelopes are wrapped as RLP strings;
//! - pooled ([`PooledTransaction`]): blob transactions carry their [`BlobsBundle`].

mod blobs;
mod gas;

pub use blobs::MAX_BLOBS_PER_TX_OSAKA;
pub use blobs::{
    ALL_CELLS, BlobRules, BlobsBundle, BlobsBundleError, CellMask, DATA_CELLS, PooledTransaction,
    SampledCells, SidecarVersion, mask_count, mask_covers, mask_indices, mask_of,
};
pub use gas::{
    IntrinsicGas, MAX_INIT_CODE_SIZE, MAX_TX_GAS_OSAKA, MAX_TX_SIZE, StatelessError,
    StatelessRules, check_stateless, intrinsic_gas, validate_stateless,
};

use crate::rlp::{self, Fields, RlpError};
use alloy_primitives::{Address, B256, Bytes, Keccak256, TxKind, U256, keccak256};
use alloy_rlp::{BufMut, Encodable};
use moat_crypto::secp::{self, SignatureError, Signer};

/// The EIP-2718 type byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum TxType {
    /// The untyped RLP list of Frontier (no type byte on the wire).
    Legacy = 0,
    /// Access-list transactions (EIP-2930, Berlin).
    Eip2930 = 1,
    /// Fee-market transactions (EIP-1559, London).
    Eip1559 = 2,
    /// Blob transactions (EIP-4844, Cancun).
    Eip4844 = 3,
    /// Set-code transactions (EIP-7702, Prague).
    Eip7702 = 4,
}

impl TxType {
    /// The type of an EIP-2718 type byte; `None` for an unknown one.
    pub fn from_byte(b: u8) -> Option<Self> {
        Some(match b {
            0 => TxType::Legacy,
            1 => TxType::Eip2930,
            2 => TxType::Eip1559,
            3 => TxType::Eip4844,
            4 => TxType::Eip7702,
            _ => return None,
        })
    }

    /// The type's lowercase name (`legacy`, `eip1559`, ...), as logs and metrics label it.
    pub fn name(self) -> &'static str {
        match self {
            TxType::Legacy => "legacy",
            TxType::Eip2930 => "eip2930",
            TxType::Eip1559 => "eip1559",
            TxType::Eip4844 => "eip4844",
            TxType::Eip7702 => "eip7702",
        }
    }
}

/// Why bytes are not a transaction.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// No bytes at all.
    #[error("empty transaction bytes")]
    Empty,
    /// The first byte is neither an RLP list nor a known EIP-2718 type.
    #[error("unknown transaction type 0x{0:02x}")]
    UnknownType(u8),
    /// The fields are not strict RLP of the type's layout.
    #[error(transparent)]
    Rlp(#[from] RlpError),
    /// Bytes follow the transaction's RLP list.
    #[error("{extra} trailing bytes after the transaction")]
    TrailingBytes {
        /// How many bytes follow.
        extra: usize,
    },
    /// A legacy `v` that is neither 27/28 nor `chain_id * 2 + 35/36` (EIP-155).
    #[error("invalid legacy v value {0}")]
    InvalidV(u64),
    /// A typed transaction's `yParity` other than 0 or 1.
    #[error("invalid yParity {0}")]
    InvalidYParity(u64),
    /// The signature is refused ([`SignatureError`]: out of range, high s, no key).
    #[error("invalid signature: {0}")]
    Signature(#[from] SignatureError),
    /// A blob sidecar's version byte other than 1 (EIP-7594 cell proofs).
    #[error("unsupported blob sidecar version {0}")]
    UnknownSidecarVersion(u8),
}

/// One entry of an EIP-2930 access list.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct AccessListItem {
    /// The account made warm.
    pub address: Address,
    /// Its storage slots made warm (`storageKeys` on the wire).
    pub storage_keys: Vec<B256>,
}

/// An EIP-7702 authorization tuple with its signature.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Authorization {
    /// The chain the authorization is valid on; 0 means any chain.
    pub chain_id: U256,
    /// The contract whose code the authority delegates to (zero address: clears it).
    pub address: Address,
    /// The authority's nonce the authorization is valid at.
    pub nonce: u64,
    /// Kept as sent: an out-of-range parity only voids this authorization, not the tx.
    pub y_parity: u8,
    /// The signature's `r`.
    pub r: U256,
    /// The signature's `s` (must be at most n/2 for the authorization to count).
    pub s: U256,
}

/// The magic byte that prefixes an EIP-7702 authorization's signing payload.
pub const AUTHORIZATION_MAGIC: u8 = 0x05;

impl Authorization {
    /// keccak(0x05 || rlp([chain_id, address, nonce])).
    pub fn signing_hash(&self) -> B256 {
        let payload_len = self.chain_id.length() + self.address.length() + self.nonce.length();
        let mut buf = Vec::with_capacity(1 + rlp::list_length(payload_len));
        buf.push(AUTHORIZATION_MAGIC);
        alloy_rlp::Header {
            list: true,
            payload_length: payload_len,
        }
        .encode(&mut buf);
        self.chain_id.encode(&mut buf);
        self.address.encode(&mut buf);
        self.nonce.encode(&mut buf);
        keccak256(&buf)
    }

    /// The account that signed this authorization, or `None` when the signature is one
    /// EIP-7702 says to skip (parity above 1, high s, out-of-range values, no key).
    pub fn recover_authority(&self) -> Option<Address> {
        if self.y_parity > 1 {
            return None;
        }
        secp::check_signature_values(self.r, self.s, true).ok()?;
        secp::recover_signer(&self.signing_hash(), self.r, self.s, self.y_parity == 1).ok()
    }

    /// Signs an authorization (tests and tools).
    pub fn sign(chain_id: U256, address: Address, nonce: u64, signer: &Signer) -> Self {
        let mut auth = Authorization {
            chain_id,
            address,
            nonce,
            ..Default::default()
        };
        let sig = signer.sign(&auth.signing_hash());
        auth.y_parity = sig.y_parity as u8;
        auth.r = sig.r;
        auth.s = sig.s;
        auth
    }

    fn fields_len(&self) -> usize {
        self.chain_id.length()
            + self.address.length()
            + self.nonce.length()
            + self.y_parity.length()
            + self.r.length()
            + self.s.length()
    }

    fn encode(&self, out: &mut dyn BufMut) {
        alloy_rlp::Header {
            list: true,
            payload_length: self.fields_len(),
        }
        .encode(out);
        self.chain_id.encode(out);
        self.address.encode(out);
        self.nonce.encode(out);
        self.y_parity.encode(out);
        self.r.encode(out);
        self.s.encode(out);
    }
}

/// Pre-EIP-2718 transaction; `chain_id` is `None` for pre-EIP-155 signatures.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LegacyTx {
    /// The EIP-155 chain id the transaction is signed for; `None` before EIP-155.
    pub chain_id: Option<u64>,
    /// The sender's nonce this transaction uses: its account nonce when it executes.
    pub nonce: u64,
    /// Wei per gas the sender pays (from London the base fee of it is burnt, the rest tips).
    pub gas_price: u128,
    /// Most gas execution may use; the sender prepays it at the fee cap.
    pub gas_limit: u64,
    /// The recipient, or `Create` (an empty `to` on the wire) for a contract creation.
    pub to: TxKind,
    /// Wei sent to the recipient.
    pub value: U256,
    /// Calldata, or the init code of a creation.
    pub input: Bytes,
}

/// An access-list transaction (EIP-2930, type 1).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Eip2930Tx {
    /// The EIP-155 chain id the transaction is signed for.
    pub chain_id: u64,
    /// The sender's nonce this transaction uses: its account nonce when it executes.
    pub nonce: u64,
    /// Wei per gas the sender pays (from London the base fee of it is burnt, the rest tips).
    pub gas_price: u128,
    /// Most gas execution may use; the sender prepays it at the fee cap.
    pub gas_limit: u64,
    /// The recipient, or `Create` (an empty `to` on the wire) for a contract creation.
    pub to: TxKind,
    /// Wei sent to the recipient.
    pub value: U256,
    /// Calldata, or the init code of a creation.
    pub input: Bytes,
    /// Addresses and slots made warm up front (EIP-2930), each charged in intrinsic gas.
    pub access_list: Vec<AccessListItem>,
}

/// A fee-market transaction (EIP-1559, type 2).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Eip1559Tx {
    /// The EIP-155 chain id the transaction is signed for.
    pub chain_id: u64,
    /// The sender's nonce this transaction uses: its account nonce when it executes.
    pub nonce: u64,
    /// Most wei per gas the producer may get above the base fee (EIP-1559 tip cap).
    pub max_priority_fee_per_gas: u128,
    /// Most wei per gas the sender pays in all, base fee included (EIP-1559).
    pub max_fee_per_gas: u128,
    /// Most gas execution may use; the sender prepays it at the fee cap.
    pub gas_limit: u64,
    /// The recipient, or `Create` (an empty `to` on the wire) for a contract creation.
    pub to: TxKind,
    /// Wei sent to the recipient.
    pub value: U256,
    /// Calldata, or the init code of a creation.
    pub input: Bytes,
    /// Addresses and slots made warm up front (EIP-2930), each charged in intrinsic gas.
    pub access_list: Vec<AccessListItem>,
}

/// A blob transaction in its canonical form (the sidecar travels separately).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Eip4844Tx {
    /// The EIP-155 chain id the transaction is signed for.
    pub chain_id: u64,
    /// The sender's nonce this transaction uses: its account nonce when it executes.
    pub nonce: u64,
    /// Most wei per gas the producer may get above the base fee (EIP-1559 tip cap).
    pub max_priority_fee_per_gas: u128,
    /// Most wei per gas the sender pays in all, base fee included (EIP-1559).
    pub max_fee_per_gas: u128,
    /// Most gas execution may use; the sender prepays it at the fee cap.
    pub gas_limit: u64,
    /// The recipient; this type cannot create a contract.
    pub to: Address,
    /// Wei sent to the recipient.
    pub value: U256,
    /// Calldata, or the init code of a creation.
    pub input: Bytes,
    /// Addresses and slots made warm up front (EIP-2930), each charged in intrinsic gas.
    pub access_list: Vec<AccessListItem>,
    /// Most wei per blob gas the sender pays (EIP-4844).
    pub max_fee_per_blob_gas: u128,
    /// One hash per blob: `0x01 || sha256(commitment)[1..]` (EIP-4844).
    pub blob_versioned_hashes: Vec<B256>,
}

/// A set-code transaction (EIP-7702, type 4): a fee-market call that also installs
/// code delegations.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Eip7702Tx {
    /// The EIP-155 chain id the transaction is signed for.
    pub chain_id: u64,
    /// The sender's nonce this transaction uses: its account nonce when it executes.
    pub nonce: u64,
    /// Most wei per gas the producer may get above the base fee (EIP-1559 tip cap).
    pub max_priority_fee_per_gas: u128,
    /// Most wei per gas the sender pays in all, base fee included (EIP-1559).
    pub max_fee_per_gas: u128,
    /// Most gas execution may use; the sender prepays it at the fee cap.
    pub gas_limit: u64,
    /// The recipient; this type cannot create a contract.
    pub to: Address,
    /// Wei sent to the recipient.
    pub value: U256,
    /// Calldata, or the init code of a creation.
    pub input: Bytes,
    /// Addresses and slots made warm up front (EIP-2930), each charged in intrinsic gas.
    pub access_list: Vec<AccessListItem>,
    /// The EIP-7702 authorizations: code each authority delegates to.
    pub authorization_list: Vec<Authorization>,
}

/// The unsigned body of any transaction type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transaction {
    /// Type 0.
    Legacy(LegacyTx),
    /// Type 1.
    Eip2930(Eip2930Tx),
    /// Type 2.
    Eip1559(Eip1559Tx),
    /// Type 3.
    Eip4844(Eip4844Tx),
    /// Type 4.
    Eip7702(Eip7702Tx),
}

/// An ECDSA signature in Ethereum's (yParity, r, s) form.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Signature {
    /// Parity of R's y coordinate (the recovery id; legacy `v` is derived from it).
    pub y_parity: bool,
    /// The x coordinate of R, mod n.
    pub r: U256,
    /// The signature's `s` (at most n/2 since Homestead, EIP-2).
    pub s: U256,
}

impl Transaction {
    /// The transaction's EIP-2718 type.
    pub fn tx_type(&self) -> TxType {
        match self {
            Transaction::Legacy(_) => TxType::Legacy,
            Transaction::Eip2930(_) => TxType::Eip2930,
            Transaction::Eip1559(_) => TxType::Eip1559,
            Transaction::Eip4844(_) => TxType::Eip4844,
            Transaction::Eip7702(_) => TxType::Eip7702,
        }
    }

    /// `None` only for pre-EIP-155 legacy transactions.
    pub fn chain_id(&self) -> Option<u64> {
        match self {
            Transaction::Legacy(t) => t.chain_id,
            Transaction::Eip2930(t) => Some(t.chain_id),
            Transaction::Eip1559(t) => Some(t.chain_id),
            Transaction::Eip4844(t) => Some(t.chain_id),
            Transaction::Eip7702(t) => Some(t.chain_id),
        }
    }

    /// The sender's nonce this transaction uses.
    pub fn nonce(&self) -> u64 {
        match self {
            Transaction::Legacy(t) => t.nonce,
            Transaction::Eip2930(t) => t.nonce,
            Transaction::Eip1559(t) => t.nonce,
            Transaction::Eip4844(t) => t.nonce,
            Transaction::Eip7702(t) => t.nonce,
        }
    }

    /// Most gas execution may use.
    pub fn gas_limit(&self) -> u64 {
        match self {
            Transaction::Legacy(t) => t.gas_limit,
            Transaction::Eip2930(t) => t.gas_limit,
            Transaction::Eip1559(t) => t.gas_limit,
            Transaction::Eip4844(t) => t.gas_limit,
            Transaction::Eip7702(t) => t.gas_limit,
        }
    }

    /// The fee cap per gas: `gas_price` before EIP-1559, `max_fee_per_gas` after.
    pub fn max_fee_per_gas(&self) -> u128 {
        match self {
            Transaction::Legacy(t) => t.gas_price,
            Transaction::Eip2930(t) => t.gas_price,
            Transaction::Eip1559(t) => t.max_fee_per_gas,
            Transaction::Eip4844(t) => t.max_fee_per_gas,
            Transaction::Eip7702(t) => t.max_fee_per_gas,
        }
    }

    /// The tip cap per gas: equal to the gas price for pre-1559 types.
    pub fn max_priority_fee_per_gas(&self) -> u128 {
        match self {
            Transaction::Legacy(t) => t.gas_price,
            Transaction::Eip2930(t) => t.gas_price,
            Transaction::Eip1559(t) => t.max_priority_fee_per_gas,
            Transaction::Eip4844(t) => t.max_priority_fee_per_gas,
            Transaction::Eip7702(t) => t.max_priority_fee_per_gas,
        }
    }

    /// Most wei per blob gas the sender pays; `None` for a non-blob transaction.
    pub fn max_fee_per_blob_gas(&self) -> Option<u128> {
        match self {
            Transaction::Eip4844(t) => Some(t.max_fee_per_blob_gas),
            _ => None,
        }
    }

    /// The tip a block at `base_fee` would earn per gas, or `None` if the fee cap is below it.
    pub fn effective_tip_per_gas(&self, base_fee: u64) -> Option<u128> {
        let base_fee = u128::from(base_fee);
        let cap = self.max_fee_per_gas();
        if cap < base_fee {
            return None;
        }
        Some((cap - base_fee).min(self.max_priority_fee_per_gas()))
    }

    /// The recipient, or `Create` for a contract creation.
    pub fn to(&self) -> TxKind {
        match self {
            Transaction::Legacy(t) => t.to,
            Transaction::Eip2930(t) => t.to,
            Transaction::Eip1559(t) => t.to,
            Transaction::Eip4844(t) => TxKind::Call(t.to),
            Transaction::Eip7702(t) => TxKind::Call(t.to),
        }
    }

    /// Whether the transaction creates a contract (no `to`).
    pub fn is_create(&self) -> bool {
        self.to().is_create()
    }

    /// Wei sent to the recipient.
    pub fn value(&self) -> U256 {
        match self {
            Transaction::Legacy(t) => t.value,
            Transaction::Eip2930(t) => t.value,
            Transaction::Eip1559(t) => t.value,
            Transaction::Eip4844(t) => t.value,
            Transaction::Eip7702(t) => t.value,
        }
    }

    /// Calldata, or the init code of a creation.
    pub fn input(&self) -> &Bytes {
        match self {
            Transaction::Legacy(t) => &t.input,
            Transaction::Eip2930(t) => &t.input,
            Transaction::Eip1559(t) => &t.input,
            Transaction::Eip4844(t) => &t.input,
            Transaction::Eip7702(t) => &t.input,
        }
    }

    /// The EIP-2930 access list; empty for legacy transactions.
    pub fn access_list(&self) -> &[AccessListItem] {
        match self {
            Transaction::Legacy(_) => &[],
            Transaction::Eip2930(t) => &t.access_list,
            Transaction::Eip1559(t) => &t.access_list,
            Transaction::Eip4844(t) => &t.access_list,
            Transaction::Eip7702(t) => &t.access_list,
        }
    }

    /// The blobs' versioned hashes; empty for a non-blob transaction.
    pub fn blob_versioned_hashes(&self) -> &[B256] {
        match self {
            Transaction::Eip4844(t) => &t.blob_versioned_hashes,
            _ => &[],
        }
    }

    /// The EIP-7702 authorizations; empty for other types.
    pub fn authorization_list(&self) -> &[Authorization] {
        match self {
            Transaction::Eip7702(t) => &t.authorization_list,
            _ => &[],
        }
    }

    /// Blob gas this transaction consumes (2^17 per blob).
    pub fn blob_gas(&self) -> u64 {
        self.blob_versioned_hashes().len() as u64 * crate::constants::GAS_PER_BLOB
    }

    /// The most the sender can be charged: gas × fee cap + value (+ blob gas × blob fee cap).
    pub fn max_cost(&self) -> U256 {
        let gas = U256::from(self.gas_limit()) * U256::from(self.max_fee_per_gas());
        let blob = U256::from(self.blob_gas())
            * U256::from(self.max_fee_per_blob_gas().unwrap_or_default());
        gas.saturating_add(blob).saturating_add(self.value())
    }

    /// Encodes the fields every type shares after the fee fields, in wire order.
    fn encode_unsigned_fields(&self, out: &mut Vec<u8>) {
        match self {
            Transaction::Legacy(t) => {
                t.nonce.encode(out);
                t.gas_price.encode(out);
                t.gas_limit.encode(out);
                rlp::encode_kind(&t.to, out);
                t.value.encode(out);
                t.input.encode(out);
            }
            Transaction::Eip2930(t) => {
                t.chain_id.encode(out);
                t.nonce.encode(out);
                t.gas_price.encode(out);
                t.gas_limit.encode(out);
                rlp::encode_kind(&t.to, out);
                t.value.encode(out);
                t.input.encode(out);
                encode_access_list(&t.access_list, out);
            }
            Transaction::Eip1559(t) => {
                t.chain_id.encode(out);
                t.nonce.encode(out);
                t.max_priority_fee_per_gas.encode(out);
                t.max_fee_per_gas.encode(out);
                t.gas_limit.encode(out);
                rlp::encode_kind(&t.to, out);
                t.value.encode(out);
                t.input.encode(out);
                encode_access_list(&t.access_list, out);
            }
            Transaction::Eip4844(t) => {
                t.chain_id.encode(out);
                t.nonce.encode(out);
                t.max_priority_fee_per_gas.encode(out);
                t.max_fee_per_gas.encode(out);
                t.gas_limit.encode(out);
                t.to.encode(out);
                t.value.encode(out);
                t.input.encode(out);
                encode_access_list(&t.access_list, out);
                t.max_fee_per_blob_gas.encode(out);
                t.blob_versioned_hashes.encode(out);
            }
            Transaction::Eip7702(t) => {
                t.chain_id.encode(out);
                t.nonce.encode(out);
                t.max_priority_fee_per_gas.encode(out);
                t.max_fee_per_gas.encode(out);
                t.gas_limit.encode(out);
                t.to.encode(out);
                t.value.encode(out);
                t.input.encode(out);
                encode_access_list(&t.access_list, out);
                let len: usize = t
                    .authorization_list
                    .iter()
                    .map(|a| rlp::list_length(a.fields_len()))
                    .sum();
                alloy_rlp::Header {
                    list: true,
                    payload_length: len,
                }
                .encode(out);
                for a in &t.authorization_list {
                    a.encode(out);
                }
            }
        }
    }

    /// The digest the sender signed.
    pub fn signing_hash(&self) -> B256 {
        // The fields are written after room for a type byte and the longest list header;
        // the header then goes right before them, so one buffer and one hash suffice.
        const ROOM: usize = 1 + 9;
        let mut buf = Vec::with_capacity(ROOM + 192 + self.input().len());
        buf.resize(ROOM, 0);
        self.encode_unsigned_fields(&mut buf);
        if let Transaction::Legacy(LegacyTx {
            chain_id: Some(id), ..
        }) = self
        {
            // EIP-155: the chain id and two empty fields join the signed list.
            id.encode(&mut buf);
            buf.push(alloy_rlp::EMPTY_STRING_CODE);
            buf.push(alloy_rlp::EMPTY_STRING_CODE);
        }
        let header = alloy_rlp::Header {
            list: true,
            payload_length: buf.len() - ROOM,
        };
        let mut start = ROOM - header.length();
        header.encode(&mut &mut buf[start..ROOM]);
        if !matches!(self, Transaction::Legacy(_)) {
            start -= 1;
            buf[start] = self.tx_type() as u8;
        }
        keccak256(&buf[start..])
    }
}

fn encode_access_list(list: &[AccessListItem], out: &mut Vec<u8>) {
    let item_len = |i: &AccessListItem| {
        let keys = i.storage_keys.length();
        rlp::list_length(i.address.length() + keys)
    };
    let total: usize = list.iter().map(item_len).sum();
    alloy_rlp::Header {
        list: true,
        payload_length: total,
    }
    .encode(out);
    for item in list {
        alloy_rlp::Header {
            list: true,
            payload_length: item.address.length() + item.storage_keys.length(),
        }
        .encode(out);
        item.address.encode(out);
        item.storage_keys.encode(out);
    }
}

fn decode_access_list(f: &mut Fields<'_>) -> Result<Vec<AccessListItem>, RlpError> {
    let mut list = f.list("accessList")?;
    let mut out = Vec::new();
    while !list.is_empty() {
        let mut item = list.list("accessList item")?;
        let address = item.address("accessList address")?;
        let storage_keys = item.b256_list("accessList storageKeys")?;
        item.finish()?;
        out.push(AccessListItem {
            address,
            storage_keys,
        });
    }
    Ok(out)
}

fn decode_authorizations(f: &mut Fields<'_>) -> Result<Vec<Authorization>, RlpError> {
    let mut list = f.list("authorizationList")?;
    let mut out = Vec::new();
    while !list.is_empty() {
        let mut a = list.list("authorization")?;
        let auth = Authorization {
            chain_id: a.u256("authorization chainId")?,
            address: a.address("authorization address")?,
            nonce: a.u64("authorization nonce")?,
            y_parity: a.u8("authorization yParity")?,
            r: a.u256("authorization r")?,
            s: a.u256("authorization s")?,
        };
        a.finish()?;
        out.push(auth);
    }
    Ok(out)
}

/// Reads `yParity, r, s` and range-checks them.
fn decode_typed_signature(f: &mut Fields<'_>) -> Result<Signature, DecodeError> {
    let parity = f.u64("yParity")?;
    let r = f.u256("r")?;
    let s = f.u256("s")?;
    let y_parity = match parity {
        0 => false,
        1 => true,
        v => return Err(DecodeError::InvalidYParity(v)),
    };
    secp::check_signature_values(r, s, true)?;
    Ok(Signature { y_parity, r, s })
}

/// Decodes the fields of a typed transaction from `f` (the list after the type byte),
/// stopping before the signature.
fn decode_typed_fields(ty: TxType, f: &mut Fields<'_>) -> Result<Transaction, DecodeError> {
    Ok(match ty {
        TxType::Legacy => unreachable!("legacy transactions have no type byte"),
        TxType::Eip2930 => Transaction::Eip2930(Eip2930Tx {
            chain_id: f.u64("chainId")?,
            nonce: f.u64("nonce")?,
            gas_price: f.u128("gasPrice")?,
            gas_limit: f.u64("gasLimit")?,
            to: f.kind("to")?,
            value: f.u256("value")?,
            input: f.data("input")?,
            access_list: decode_access_list(f)?,
        }),
        TxType::Eip1559 => Transaction::Eip1559(Eip1559Tx {
            chain_id: f.u64("chainId")?,
            nonce: f.u64("nonce")?,
            max_priority_fee_per_gas: f.u128("maxPriorityFeePerGas")?,
            max_fee_per_gas: f.u128("maxFeePerGas")?,
            gas_limit: f.u64("gasLimit")?,
            to: f.kind("to")?,
            value: f.u256("value")?,
            input: f.data("input")?,
            access_list: decode_access_list(f)?,
        }),
        TxType::Eip4844 => Transaction::Eip4844(Eip4844Tx {
            chain_id: f.u64("chainId")?,
            nonce: f.u64("nonce")?,
            max_priority_fee_per_gas: f.u128("maxPriorityFeePerGas")?,
            max_fee_per_gas: f.u128("maxFeePerGas")?,
            gas_limit: f.u64("gasLimit")?,
            to: f.address("to")?,
            value: f.u256("value")?,
            input: f.data("input")?,
            access_list: decode_access_list(f)?,
            max_fee_per_blob_gas: f.u128("maxFeePerBlobGas")?,
            blob_versioned_hashes: f.b256_list("blobVersionedHashes")?,
        }),
        TxType::Eip7702 => Transaction::Eip7702(Eip7702Tx {
            chain_id: f.u64("chainId")?,
            nonce: f.u64("nonce")?,
            max_priority_fee_per_gas: f.u128("maxPriorityFeePerGas")?,
            max_fee_per_gas: f.u128("maxFeePerGas")?,
            gas_limit: f.u64("gasLimit")?,
            to: f.address("to")?,
            value: f.u256("value")?,
            input: f.data("input")?,
            access_list: decode_access_list(f)?,
            authorization_list: decode_authorizations(f)?,
        }),
    })
}

fn decode_legacy(mut f: Fields<'_>) -> Result<(Transaction, Signature), DecodeError> {
    let mut tx = LegacyTx {
        chain_id: None,
        nonce: f.u64("nonce")?,
        gas_price: f.u128("gasPrice")?,
        gas_limit: f.u64("gasLimit")?,
        to: f.kind("to")?,
        value: f.u256("value")?,
        input: f.data("input")?,
    };
    let v = f.u64("v")?;
    let r = f.u256("r")?;
    let s = f.u256("s")?;
    f.finish()?;
    let y_parity = match v {
        27 | 28 => v == 28,
        v if v >= 35 => {
            tx.chain_id = Some((v - 35) / 2);
            (v - 35) % 2 == 1
        }
        v => return Err(DecodeError::InvalidV(v)),
    };
    secp::check_signature_values(r, s, true)?;
    Ok((Transaction::Legacy(tx), Signature { y_parity, r, s }))
}

/// A transaction with its signature, hash and encoded size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedTransaction {
    tx: Transaction,
    signature: Signature,
    hash: B256,
    size: usize,
}

impl SignedTransaction {
    /// Assembles a signed transaction, computing its encoding's hash and size.
    pub fn new(tx: Transaction, signature: Signature) -> Self {
        let mut signed = Self {
            tx,
            signature,
            hash: B256::ZERO,
            size: 0,
        };
        let enc = signed.encoded_2718();
        signed.hash = keccak256(&enc);
        signed.size = enc.len();
        signed
    }

    /// Signs `tx` with `signer` (tests and tools).
    pub fn sign(tx: Transaction, signer: &Signer) -> Self {
        let sig = signer.sign(&tx.signing_hash());
        Self::new(
            tx,
            Signature {
                y_parity: sig.y_parity,
                r: sig.r,
                s: sig.s,
            },
        )
    }

    /// The unsigned body.
    pub fn tx(&self) -> &Transaction {
        &self.tx
    }

    /// The unsigned body, taken out.
    pub fn into_tx(self) -> Transaction {
        self.tx
    }

    /// The signature as (yParity, r, s).
    pub fn signature(&self) -> &Signature {
        &self.signature
    }

    /// The transaction's EIP-2718 type.
    pub fn tx_type(&self) -> TxType {
        self.tx.tx_type()
    }

    /// keccak256 of the EIP-2718 envelope.
    pub fn hash(&self) -> B256 {
        self.hash
    }

    /// Length of the EIP-2718 envelope in bytes.
    pub fn size(&self) -> usize {
        self.size
    }

    /// The legacy `v` value (27/28 or EIP-155), or the yParity for typed transactions.
    pub fn v(&self) -> u64 {
        let parity = self.signature.y_parity as u64;
        match &self.tx {
            Transaction::Legacy(LegacyTx {
                chain_id: Some(id), ..
            }) => id * 2 + 35 + parity,
            Transaction::Legacy(_) => 27 + parity,
            _ => parity,
        }
    }

    /// Recovers the sender with libsecp256k1: the costly step, ~40 µs.
    pub fn recover_sender(&self) -> Result<Address, SignatureError> {
        secp::recover_signer(
            &self.tx.signing_hash(),
            self.signature.r,
            self.signature.s,
            self.signature.y_parity,
        )
    }

    /// Recovers the sender, hashing the signing payload straight out of `envelope` instead
    /// of re-encoding the fields: admission has the wire bytes at hand, and this saves the
    /// re-encoding on the fresh-sender path.
    ///
    /// `envelope` must be the bytes this transaction was decoded from (its EIP-2718
    /// encoding); given other bytes the digest, and so the sender, is wrong. Bytes of
    /// another length or type are caught and the fields re-encoded instead.
    pub fn recover_sender_from_envelope(&self, envelope: &[u8]) -> Result<Address, SignatureError> {
        let same_shape = envelope.len() == self.size
            && (envelope.first().is_some_and(|b| *b >= 0xc0) == (self.tx_type() == TxType::Legacy));
        debug_assert!(
            !same_shape || keccak256(envelope) == self.hash,
            "envelope is not this transaction's"
        );
        let digest = match same_shape
            .then(|| signing_hash_of_envelope(envelope, self.tx.chain_id()))
            .flatten()
        {
            Some(d) => d,
            None => self.tx.signing_hash(),
        };
        secp::recover_signer(
            &digest,
            self.signature.r,
            self.signature.s,
            self.signature.y_parity,
        )
    }

    /// Decodes an EIP-2718 envelope (legacy RLP list or `type || rlp`), refusing trailing bytes.
    pub fn decode_2718(bytes: &[u8]) -> Result<Self, DecodeError> {
        let first = *bytes.first().ok_or(DecodeError::Empty)?;
        let (tx, signature) = if first >= 0xc0 {
            let mut buf = bytes;
            let fields = rlp::list(&mut buf, "transaction")?;
            if !buf.is_empty() {
                return Err(DecodeError::TrailingBytes { extra: buf.len() });
            }
            decode_legacy(fields)?
        } else {
            let ty = TxType::from_byte(first)
                .filter(|t| *t != TxType::Legacy)
                .ok_or(DecodeError::UnknownType(first))?;
            let mut buf = &bytes[1..];
            let mut fields = rlp::list(&mut buf, "transaction")?;
            if !buf.is_empty() {
                return Err(DecodeError::TrailingBytes { extra: buf.len() });
            }
            let tx = decode_typed_fields(ty, &mut fields)?;
            let sig = decode_typed_signature(&mut fields)?;
            fields.finish()?;
            (tx, sig)
        };
        Ok(Self {
            tx,
            signature,
            hash: keccak256(bytes),
            size: bytes.len(),
        })
    }

    /// Decodes one element of an RLP list of transactions (block body, eth `Transactions`):
    /// a legacy list, or a string holding a typed envelope.
    pub fn decode_network(buf: &mut &[u8]) -> Result<Self, DecodeError> {
        let envelope = network_envelope(buf)?;
        Self::decode_2718(envelope)
    }

    /// Appends the canonical envelope: the RLP list for legacy, `type || rlp(fields)`
    /// for typed transactions (what the hash is taken of).
    pub fn encode_2718(&self, out: &mut Vec<u8>) {
        let mut payload = Vec::with_capacity(self.size.max(128));
        self.tx.encode_unsigned_fields(&mut payload);
        match &self.tx {
            Transaction::Legacy(_) => {
                self.v().encode(&mut payload);
                self.signature.r.encode(&mut payload);
                self.signature.s.encode(&mut payload);
                rlp::encode_list_payload(&payload, out);
            }
            tx => {
                self.signature.y_parity.encode(&mut payload);
                self.signature.r.encode(&mut payload);
                self.signature.s.encode(&mut payload);
                out.push(tx.tx_type() as u8);
                rlp::encode_list_payload(&payload, out);
            }
        }
    }

    /// The canonical envelope ([`Self::encode_2718`]) in a new buffer.
    pub fn encoded_2718(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.size.max(128));
        self.encode_2718(&mut out);
        out
    }

    /// Encodes as an element of an RLP list (typed envelopes wrapped as strings).
    pub fn encode_network(&self, out: &mut Vec<u8>) {
        let env = self.encoded_2718();
        wrap_network(&env, self.tx_type(), out);
    }

    /// Length of [`Self::encode_network`]'s output.
    pub fn network_len(&self) -> usize {
        match self.tx_type() {
            TxType::Legacy => self.size,
            _ => alloy_rlp::Header {
                list: false,
                payload_length: self.size,
            }
            .length_with_payload(),
        }
    }
}

/// The signing digest of a canonical envelope, read from its bytes: the fields before
/// the signature under a new list header (plus the EIP-155 tail for protected legacy txs).
fn signing_hash_of_envelope(envelope: &[u8], chain_id: Option<u64>) -> Option<B256> {
    let first = *envelope.first()?;
    let (ty, mut rest) = if first >= 0xc0 {
        (None, envelope)
    } else {
        (Some(first), &envelope[1..])
    };
    let fields = rlp::list(&mut rest, "transaction").ok()?;
    // Walk the items to find where the signature (the last three) begins.
    let mut starts = Vec::with_capacity(16);
    let mut walker = fields;
    let payload = fields.remaining();
    while !walker.is_empty() {
        starts.push(payload.len() - walker.remaining().len());
        walker.raw_item("field").ok()?;
    }
    let sig_start = *starts.get(starts.len().checked_sub(3)?)?;
    let unsigned = &payload[..sig_start];
    let mut tail = Vec::new();
    if ty.is_none()
        && let Some(id) = chain_id
    {
        id.encode(&mut tail);
        tail.push(alloy_rlp::EMPTY_STRING_CODE);
        tail.push(alloy_rlp::EMPTY_STRING_CODE);
    }
    let header = alloy_rlp::Header {
        list: true,
        payload_length: unsigned.len() + tail.len(),
    };
    let mut head = Vec::with_capacity(10);
    if let Some(t) = ty {
        head.push(t);
    }
    header.encode(&mut head);
    let mut h = Keccak256::new();
    h.update(&head);
    h.update(unsigned);
    h.update(&tail);
    Some(h.finalize())
}

/// Reads one network element and returns the envelope bytes it carries.
pub fn network_envelope<'a>(buf: &mut &'a [u8]) -> Result<&'a [u8], DecodeError> {
    if rlp::next_is_list(buf) {
        let start = *buf;
        let h = rlp::header(buf, "transaction")?;
        *buf = &buf[h.payload_length..];
        Ok(&start[..start.len() - buf.len()])
    } else {
        let env = rlp::string(buf, "typed transaction")?;
        if env.first().is_some_and(|b| *b >= 0xc0) {
            // A legacy list must not be wrapped in a string.
            return Err(DecodeError::Rlp(RlpError::NonCanonical(
                "typed transaction",
            )));
        }
        Ok(env)
    }
}

/// Writes a canonical envelope as an element of an RLP list of transactions (block body,
/// eth `Transactions`): a legacy list as it is, a typed envelope wrapped as a string.
pub fn wrap_network(envelope: &[u8], ty: TxType, out: &mut Vec<u8>) {
    if ty == TxType::Legacy {
        out.extend_from_slice(envelope);
    } else {
        alloy_rlp::Header {
            list: false,
            payload_length: envelope.len(),
        }
        .encode(out);
        out.extend_from_slice(envelope);
    }
}

/// keccak(prefix || body) without concatenating into a buffer.
pub(crate) fn keccak_prefixed(prefix: u8, body: &[u8]) -> B256 {
    let mut h = Keccak256::new();
    h.update([prefix]);
    h.update(body);
    h.finalize()
}

#[cfg(test)]
mod tests;
