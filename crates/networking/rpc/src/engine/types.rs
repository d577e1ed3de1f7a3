//! The engine API's JSON: execution payloads in (parsed into a [`Block`]), built payloads
//! and payload statuses out.
//!
//! Parsing has two kinds of failure, and the spec treats them differently: a request
//! whose shape is wrong (a missing field, bad hex, a field the version forbids) is
//! `-32602`, while a well-formed payload that is not a valid block (an undecodable
//! transaction, a block hash that does not match) is answered with status `INVALID`.

use super::errors::{invalid_params, unsupported_fork};
use crate::json::{q, q256, withdrawals_json};
use crate::params::{RpcResult, parse_quantity};
use alloy_primitives::{Address, B256, Bloom, Bytes, U256, hex};
use moat_blockchain::payload::BuiltPayload;
use moat_common::SignedTransaction;
use moat_common::block::{Block, Header, Withdrawal};
use moat_common::config::{ChainConfig, Fork};
use moat_common::constants::EMPTY_OMMERS_HASH;
use moat_common::transaction::BlobsBundle;
use serde_json::{Map, Value, json};

/// geth's `params.MaximumExtraDataSize`.
const MAX_EXTRA_DATA: usize = 32;

/// `0x`-prefixed lowercase hex of raw bytes.
pub(crate) fn hex0x(bytes: impl AsRef<[u8]>) -> Value {
    Value::String(hex::encode_prefixed(bytes))
}

fn missing(name: &str) -> jsonrpsee::types::ErrorObjectOwned {
    invalid_params(format!("missing required field '{name}'"))
}

fn bad(name: &str) -> jsonrpsee::types::ErrorObjectOwned {
    invalid_params(format!("invalid value for '{name}'"))
}

/// A field that may be absent or null.
pub(crate) fn opt<'a>(o: &'a Map<String, Value>, name: &str) -> Option<&'a Value> {
    o.get(name).filter(|v| !v.is_null())
}

pub(crate) fn req<'a>(o: &'a Map<String, Value>, name: &str) -> RpcResult<&'a Value> {
    opt(o, name).ok_or_else(|| missing(name))
}

pub(crate) fn object<'a>(v: &'a Value, name: &str) -> RpcResult<&'a Map<String, Value>> {
    v.as_object().ok_or_else(|| bad(name))
}

fn str_of<'a>(v: &'a Value, name: &str) -> RpcResult<&'a str> {
    v.as_str().ok_or_else(|| bad(name))
}

/// Hex data; the `0x` prefix is required, as geth's `hexutil.Bytes` requires it.
pub(crate) fn bytes(v: &Value, name: &str) -> RpcResult<Vec<u8>> {
    let s = str_of(v, name)?;
    let digits = s.strip_prefix("0x").ok_or_else(|| bad(name))?;
    hex::decode(digits).map_err(|_| bad(name))
}

fn fixed<const N: usize>(v: &Value, name: &str) -> RpcResult<[u8; N]> {
    bytes(v, name)?.try_into().map_err(|_| bad(name))
}

pub(crate) fn b256(v: &Value, name: &str) -> RpcResult<B256> {
    fixed::<32>(v, name).map(B256::from)
}

fn address(v: &Value, name: &str) -> RpcResult<Address> {
    fixed::<20>(v, name).map(Address::from)
}

pub(crate) fn quantity(v: &Value, name: &str) -> RpcResult<u64> {
    parse_quantity(str_of(v, name)?).map_err(|_| bad(name))
}

fn quantity256(v: &Value, name: &str) -> RpcResult<U256> {
    let s = str_of(v, name)?;
    let digits = s.strip_prefix("0x").ok_or_else(|| bad(name))?;
    if digits.is_empty() || digits.len() > 64 {
        return Err(bad(name));
    }
    U256::from_str_radix(digits, 16).map_err(|_| bad(name))
}

/// A list of 32-byte hashes.
pub(crate) fn hashes(v: &Value, name: &str) -> RpcResult<Vec<B256>> {
    v.as_array()
        .ok_or_else(|| bad(name))?
        .iter()
        .map(|h| b256(h, name))
        .collect()
}

pub(crate) fn withdrawals(v: &Value) -> RpcResult<Vec<Withdrawal>> {
    let list = v.as_array().ok_or_else(|| bad("withdrawals"))?;
    list.iter()
        .map(|w| {
            let o = object(w, "withdrawal")?;
            Ok(Withdrawal {
                index: quantity(req(o, "index")?, "index")?,
                validator_index: quantity(req(o, "validatorIndex")?, "validatorIndex")?,
                address: address(req(o, "address")?, "address")?,
                amount: quantity(req(o, "amount")?, "amount")?,
            })
        })
        .collect()
}

/// Which `engine_newPayload` / `engine_getPayload` version a call is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Version {
    /// Paris (the merge) payloads: no withdrawals.
    V1 = 1,
    /// Shanghai payloads: withdrawals (EIP-4895).
    V2 = 2,
    /// Cancun payloads: blob gas fields, versioned hashes and the parent beacon root.
    V3 = 3,
    /// Prague payloads: execution requests (EIP-7685).
    V4 = 4,
    /// Osaka (`engine_getPayloadV5`): blobs bundled with cell proofs (EIP-7594).
    V5 = 5,
}

/// Whether a payload of `fork` may travel in a `version` call (newPayload,
/// forkchoiceUpdated attributes); geth's `checkFork` for each method.
pub(crate) fn check_fork(version: Version, fork: Fork) -> RpcResult<()> {
    let ok = match version {
        Version::V1 => fork < Fork::Shanghai,
        Version::V2 => fork < Fork::Cancun,
        Version::V3 => fork == Fork::Cancun,
        Version::V4 | Version::V5 => fork >= Fork::Prague,
    };
    if ok { Ok(()) } else { Err(unsupported_fork()) }
}

/// A `newPayload` call, parsed but not yet checked against the chain.
#[derive(Debug)]
pub struct NewPayload {
    /// The header the payload's fields give, with the call's parent beacon root and
    /// requests hash; its transactions and withdrawals roots are still to be computed.
    pub header: Header,
    /// The payload's `blockHash`: the consensus client's claim, to check against `header`.
    pub block_hash: B256,
    /// The payload's transactions, each in its EIP-2718 encoding.
    pub transactions: Vec<Vec<u8>>,
    /// The payload's withdrawals (EIP-4895); `None` before Shanghai.
    pub withdrawals: Option<Vec<Withdrawal>>,
    /// `expectedBlobVersionedHashes`, from V3.
    pub versioned_hashes: Option<Vec<B256>>,
}

/// Parses a `newPayloadV{2,3,4}` parameter list.
pub fn parse_new_payload(
    args: &[Value],
    version: Version,
    config: &ChainConfig,
) -> RpcResult<NewPayload> {
    let expected_args = match version {
        Version::V1 | Version::V2 => 1,
        Version::V3 => 3,
        Version::V4 | Version::V5 => 4,
    };
    if args.len() != expected_args {
        return Err(invalid_params(format!(
            "expected {expected_args} params, got {}",
            args.len()
        )));
    }
    let p = object(&args[0], "executionPayload")?;
    if version == Version::V1 && opt(p, "withdrawals").is_some() {
        return Err(invalid_params("withdrawals not supported in V1"));
    }
    let extra_data = bytes(req(p, "extraData")?, "extraData")?;
    let base_fee = quantity256(req(p, "baseFeePerGas")?, "baseFeePerGas")?;
    let base_fee: u64 = base_fee.try_into().map_err(|_| bad("baseFeePerGas"))?;
    let mut header = Header {
        parent_hash: b256(req(p, "parentHash")?, "parentHash")?,
        ommers_hash: EMPTY_OMMERS_HASH,
        beneficiary: address(req(p, "feeRecipient")?, "feeRecipient")?,
        state_root: b256(req(p, "stateRoot")?, "stateRoot")?,
        transactions_root: B256::ZERO,
        receipts_root: b256(req(p, "receiptsRoot")?, "receiptsRoot")?,
        logs_bloom: Bloom::from(fixed::<256>(req(p, "logsBloom")?, "logsBloom")?),
        difficulty: U256::ZERO,
        number: quantity(req(p, "blockNumber")?, "blockNumber")?,
        gas_limit: quantity(req(p, "gasLimit")?, "gasLimit")?,
        gas_used: quantity(req(p, "gasUsed")?, "gasUsed")?,
        timestamp: quantity(req(p, "timestamp")?, "timestamp")?,
        extra_data: extra_data.into(),
        mix_hash: b256(req(p, "prevRandao")?, "prevRandao")?,
        nonce: [0; 8],
        base_fee_per_gas: Some(base_fee),
        withdrawals_root: None,
        blob_gas_used: None,
        excess_blob_gas: None,
        parent_beacon_block_root: None,
        requests_hash: None,
    };
    let fork = config.fork_at(header.number, header.timestamp);
    check_fork(version, fork)?;

    let withdrawals = match (opt(p, "withdrawals"), fork >= Fork::Shanghai) {
        (Some(w), true) => Some(withdrawals(w)?),
        (None, false) => None,
        (None, true) => return Err(missing("withdrawals")),
        (Some(_), false) => {
            return Err(invalid_params("withdrawals not supported before Shanghai"));
        }
    };
    let blob_fields = (opt(p, "blobGasUsed"), opt(p, "excessBlobGas"));
    if version >= Version::V3 {
        header.blob_gas_used = Some(quantity(req(p, "blobGasUsed")?, "blobGasUsed")?);
        header.excess_blob_gas = Some(quantity(req(p, "excessBlobGas")?, "excessBlobGas")?);
    } else if blob_fields.0.is_some() || blob_fields.1.is_some() {
        return Err(invalid_params(
            "blobGasUsed and excessBlobGas not supported before Cancun",
        ));
    }
    let transactions = req(p, "transactions")?
        .as_array()
        .ok_or_else(|| bad("transactions"))?
        .iter()
        .map(|t| bytes(t, "transactions"))
        .collect::<RpcResult<Vec<_>>>()?;

    let versioned_hashes = if version >= Version::V3 {
        let vh = args[1]
            .as_array()
            .map(|_| hashes(&args[1], "expectedBlobVersionedHashes"))
            .ok_or_else(|| missing("expectedBlobVersionedHashes"))??;
        if args[2].is_null() {
            return Err(missing("parentBeaconBlockRoot"));
        }
        header.parent_beacon_block_root = Some(b256(&args[2], "parentBeaconBlockRoot")?);
        Some(vh)
    } else {
        None
    };
    if version >= Version::V4 {
        let requests = parse_requests(&args[3])?;
        header.requests_hash = Some(moat_blockchain::chain::requests_hash(&requests));
    }
    Ok(NewPayload {
        header,
        block_hash: b256(req(p, "blockHash")?, "blockHash")?,
        transactions,
        withdrawals,
        versioned_hashes,
    })
}

/// EIP-7685 `executionRequests`: each `type || data`, data not empty, types strictly
/// ascending. The spec's form is hex; base64 is accepted too because go-ethereum's
/// ethtest `newpayload.json` (a `[][]byte` marshalled by Go) carries it.
fn parse_requests(v: &Value) -> RpcResult<Vec<Bytes>> {
    use base64::Engine as _;
    let list = v.as_array().ok_or_else(|| missing("executionRequests"))?;
    let mut out: Vec<Bytes> = Vec::with_capacity(list.len());
    for item in list {
        let s = str_of(item, "executionRequests")?;
        let raw = if s.starts_with("0x") {
            bytes(item, "executionRequests")?
        } else {
            base64::engine::general_purpose::STANDARD
                .decode(s)
                .map_err(|_| bad("executionRequests"))?
        };
        if raw.len() < 2 {
            return Err(invalid_params("empty request data"));
        }
        if out.last().is_some_and(|prev| prev[0] >= raw[0]) {
            return Err(invalid_params(
                "requests not in strictly ascending type order",
            ));
        }
        out.push(raw.into());
    }
    Ok(out)
}

impl NewPayload {
    /// Assembles the block from every field of the call and checks that it hashes to the
    /// claimed `blockHash`; `Err` is a validation error (status INVALID). The checks and
    /// their messages follow go-ethereum's `ExecutableDataToBlock`, in its order: the
    /// transactions decode, the extra data fits, the versioned hashes are the blob
    /// hashes of the transactions, then the hash of the whole block (beacon root and
    /// requests hash included) is the claimed one.
    pub fn into_block(self) -> Result<Block, String> {
        let transactions = self
            .transactions
            .iter()
            .enumerate()
            .map(|(i, raw)| {
                SignedTransaction::decode_2718(raw)
                    .map_err(|e| format!("invalid transaction {i}: {e}"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        if self.header.extra_data.len() > MAX_EXTRA_DATA {
            return Err(format!(
                "invalid extradata length: {}",
                self.header.extra_data.len()
            ));
        }
        // Before V3 no versioned hashes travel: a blob transaction then has none to match.
        let expected = self.versioned_hashes.unwrap_or_default();
        let found: Vec<B256> = transactions
            .iter()
            .flat_map(|tx| tx.tx().blob_versioned_hashes().iter().copied())
            .collect();
        if found.len() != expected.len() {
            return Err(format!(
                "invalid number of versionedHashes: {} blobHashes: {}",
                hash_list(&expected),
                hash_list(&found)
            ));
        }
        if let Some(i) = (0..found.len()).find(|&i| found[i] != expected[i]) {
            return Err(format!(
                "invalid versionedHash at {i}: {} blobHash: {}",
                expected[i], found[i]
            ));
        }
        let mut block = Block {
            header: self.header,
            hash: B256::ZERO,
            transactions,
            ommers: Vec::new(),
            withdrawals: self.withdrawals,
        };
        block.header.transactions_root = block.transactions_root();
        block.header.withdrawals_root = block.withdrawals_root();
        block.hash = block.header.hash();
        if block.hash != self.block_hash {
            return Err(format!(
                "blockhash mismatch, want {:x}, got {:x}",
                self.block_hash, block.hash
            ));
        }
        Ok(block)
    }
}

/// A list of hashes as go-ethereum prints one: `[0xab.. 0xcd..]`.
fn hash_list(hashes: &[B256]) -> String {
    let items: Vec<String> = hashes.iter().map(|h| h.to_string()).collect();
    format!("[{}]", items.join(" "))
}

/// `ExecutionPayloadV{1,2,3}` of a block (V3 from Cancun on; later versions reuse it).
pub fn payload_json(block: &Block) -> Value {
    let h = &block.header;
    let mut m = Map::new();
    m.insert("parentHash".into(), json!(h.parent_hash));
    m.insert("feeRecipient".into(), json!(h.beneficiary));
    m.insert("stateRoot".into(), json!(h.state_root));
    m.insert("receiptsRoot".into(), json!(h.receipts_root));
    m.insert("logsBloom".into(), json!(h.logs_bloom));
    m.insert("prevRandao".into(), json!(h.mix_hash));
    m.insert("blockNumber".into(), q(h.number));
    m.insert("gasLimit".into(), q(h.gas_limit));
    m.insert("gasUsed".into(), q(h.gas_used));
    m.insert("timestamp".into(), q(h.timestamp));
    m.insert("extraData".into(), json!(h.extra_data));
    m.insert(
        "baseFeePerGas".into(),
        q(h.base_fee_per_gas.unwrap_or_default()),
    );
    m.insert("blockHash".into(), json!(block.hash));
    m.insert(
        "transactions".into(),
        Value::Array(
            block
                .transactions
                .iter()
                .map(|tx| hex0x(tx.encoded_2718()))
                .collect(),
        ),
    );
    if let Some(ws) = &block.withdrawals {
        m.insert("withdrawals".into(), withdrawals_json(ws));
    }
    if let (Some(used), Some(excess)) = (h.blob_gas_used, h.excess_blob_gas) {
        m.insert("blobGasUsed".into(), q(used));
        m.insert("excessBlobGas".into(), q(excess));
    }
    Value::Object(m)
}

/// `BlobsBundleV1` (one proof per blob) or `V2` (cell proofs): the sidecars' parts
/// concatenated in transaction order.
fn blobs_bundle_json(sidecars: &[std::sync::Arc<BlobsBundle>]) -> Value {
    let (mut commitments, mut proofs, mut blobs) = (Vec::new(), Vec::new(), Vec::new());
    for s in sidecars {
        commitments.extend(s.commitments.iter().map(hex0x));
        proofs.extend(s.proofs.iter().map(hex0x));
        blobs.extend(s.blobs.iter().map(|b| hex0x(b.0)));
    }
    json!({ "commitments": commitments, "proofs": proofs, "blobs": blobs })
}

/// The `getPayload` response of `version`: V1 answers the bare payload, later versions
/// an envelope around it.
pub(crate) fn envelope_json(built: &BuiltPayload, version: Version) -> Value {
    if version == Version::V1 {
        return payload_json(&built.block);
    }
    let mut m = Map::new();
    m.insert("executionPayload".into(), payload_json(&built.block));
    m.insert("blockValue".into(), q256(built.block_value));
    if version >= Version::V3 {
        m.insert("blobsBundle".into(), blobs_bundle_json(&built.sidecars));
        m.insert("shouldOverrideBuilder".into(), Value::Bool(false));
    }
    if version >= Version::V4 {
        m.insert(
            "executionRequests".into(),
            Value::Array(built.requests.iter().map(hex0x).collect()),
        );
    }
    Value::Object(m)
}

/// What a `newPayload` or `forkchoiceUpdated` concluded about a block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Status {
    Valid(B256),
    /// The latest valid ancestor if known, and why.
    Invalid(Option<B256>, String),
    Syncing,
    Accepted,
}

impl Status {
    pub(crate) fn json(&self) -> Value {
        match self {
            Status::Valid(h) => {
                json!({ "status": "VALID", "latestValidHash": h, "validationError": null })
            }
            Status::Invalid(h, e) => {
                json!({ "status": "INVALID", "latestValidHash": h, "validationError": e })
            }
            Status::Syncing => {
                json!({ "status": "SYNCING", "latestValidHash": null, "validationError": null })
            }
            Status::Accepted => {
                json!({ "status": "ACCEPTED", "latestValidHash": null, "validationError": null })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_must_be_nonempty_and_ascending() {
        assert!(parse_requests(&json!(["0x0001", "0x01ff"])).is_ok());
        assert!(parse_requests(&json!(["0x00"])).is_err());
        assert!(parse_requests(&json!(["0x01aa", "0x00aa"])).is_err());
        assert!(parse_requests(&json!(["0x01aa", "0x01bb"])).is_err());
        // Base64, as go-ethereum's test data has it.
        assert_eq!(
            parse_requests(&json!(["AQI="])).unwrap(),
            vec![Bytes::from(vec![1u8, 2])]
        );
        assert!(parse_requests(&json!(null)).is_err());
    }

    #[test]
    fn hex_fields_need_the_prefix_and_the_length() {
        assert!(b256(&json!(format!("0x{}", "11".repeat(32))), "h").is_ok());
        assert!(b256(&json!("11".repeat(32)), "h").is_err());
        assert!(b256(&json!("0x11"), "h").is_err());
        assert!(quantity256(&json!("0x"), "q").is_err());
        assert_eq!(quantity256(&json!("0x10"), "q").unwrap(), U256::from(16));
    }
}
