//! geth's JSON shapes for headers, blocks, transactions, receipts and logs.
//!
//! Quantities are `0x`-prefixed minimal hex, hashes and byte strings `0x`-prefixed
//! lowercase hex, addresses lowercase (geth marshals `common.Address` in lowercase; only
//! map keys in `txpool_*` are checksummed, as geth's `Address.Hex()` makes them).

use alloy_primitives::{Address, B256, TxKind, U256};
use moat_common::block::{Block, Header, Withdrawal};
use moat_common::receipt::Receipt;
use moat_common::transaction::Transaction;
use moat_common::{SignedTransaction, TxType};
use serde_json::{Map, Value, json};

/// A `u64`/`u128` as a JSON-RPC quantity.
pub(crate) fn q(n: impl Into<u128>) -> Value {
    Value::String(format!("{:#x}", n.into()))
}

/// A `U256` as a JSON-RPC quantity.
pub(crate) fn q256(n: U256) -> Value {
    Value::String(format!("{n:#x}"))
}

/// Where a transaction sits in the chain; `None` for a pooled one.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TxPlace {
    pub block_hash: B256,
    pub block_number: u64,
    pub index: u64,
    pub base_fee: Option<u64>,
    pub block_timestamp: u64,
}

/// What a transaction paid per gas: the effective price once mined (base fee + capped
/// tip), the fee cap while pooled, as geth reports it.
pub(crate) fn effective_gas_price(tx: &Transaction, base_fee: Option<u64>) -> u128 {
    match (tx.tx_type(), base_fee) {
        (TxType::Legacy | TxType::Eip2930, _) | (_, None) => tx.max_fee_per_gas(),
        (_, Some(base)) => {
            let tip = tx.effective_tip_per_gas(base).unwrap_or(0);
            u128::from(base) + tip
        }
    }
}

fn access_list_json(tx: &Transaction) -> Value {
    Value::Array(
        tx.access_list()
            .iter()
            .map(|item| json!({ "address": item.address, "storageKeys": item.storage_keys }))
            .collect(),
    )
}

/// geth's `RPCTransaction`.
pub(crate) fn tx_json(stx: &SignedTransaction, from: Address, place: Option<TxPlace>) -> Value {
    let tx = stx.tx();
    let ty = tx.tx_type();
    let mut m = Map::new();
    let (bh, bn, ti) = match place {
        Some(p) => (json!(p.block_hash), q(p.block_number), q(p.index)),
        None => (Value::Null, Value::Null, Value::Null),
    };
    m.insert("blockHash".into(), bh);
    m.insert("blockNumber".into(), bn);
    if let Some(p) = place {
        m.insert("blockTimestamp".into(), q(p.block_timestamp));
    }
    m.insert("from".into(), json!(from));
    m.insert("gas".into(), q(tx.gas_limit()));
    let base_fee = place.and_then(|p| p.base_fee);
    m.insert("gasPrice".into(), q(effective_gas_price(tx, base_fee)));
    if !matches!(ty, TxType::Legacy | TxType::Eip2930) {
        m.insert("maxFeePerGas".into(), q(tx.max_fee_per_gas()));
        m.insert(
            "maxPriorityFeePerGas".into(),
            q(tx.max_priority_fee_per_gas()),
        );
    }
    if let Some(blob_cap) = tx.max_fee_per_blob_gas() {
        m.insert("maxFeePerBlobGas".into(), q(blob_cap));
    }
    m.insert("hash".into(), json!(stx.hash()));
    m.insert("input".into(), json!(tx.input()));
    m.insert("nonce".into(), q(tx.nonce()));
    m.insert(
        "to".into(),
        match tx.to() {
            TxKind::Call(to) => json!(to),
            TxKind::Create => Value::Null,
        },
    );
    m.insert("transactionIndex".into(), ti);
    m.insert("value".into(), q256(tx.value()));
    m.insert("type".into(), q(ty as u8));
    if ty != TxType::Legacy {
        m.insert("accessList".into(), access_list_json(tx));
    }
    // Legacy transactions carry a chain id only when EIP-155 protected.
    if let Some(id) = tx.chain_id() {
        m.insert("chainId".into(), q(id));
    }
    if ty == TxType::Eip4844 {
        m.insert(
            "blobVersionedHashes".into(),
            json!(tx.blob_versioned_hashes()),
        );
    }
    if ty == TxType::Eip7702 {
        let auths: Vec<Value> = tx
            .authorization_list()
            .iter()
            .map(|a| {
                json!({
                    "chainId": q256(a.chain_id),
                    "address": a.address,
                    "nonce": q(a.nonce),
                    "yParity": q(a.y_parity),
                    "r": q256(a.r),
                    "s": q256(a.s),
                })
            })
            .collect();
        m.insert("authorizationList".into(), Value::Array(auths));
    }
    let sig = stx.signature();
    m.insert("v".into(), q(stx.v()));
    m.insert("r".into(), q256(sig.r));
    m.insert("s".into(), q256(sig.s));
    if ty != TxType::Legacy {
        m.insert("yParity".into(), q(u8::from(sig.y_parity)));
    }
    Value::Object(m)
}

/// geth's `RPCMarshalHeader`.
pub(crate) fn header_json(h: &Header, hash: B256) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("number".into(), q(h.number));
    m.insert("hash".into(), json!(hash));
    m.insert("parentHash".into(), json!(h.parent_hash));
    m.insert(
        "nonce".into(),
        Value::String(format!("0x{}", alloy_primitives::hex::encode(h.nonce))),
    );
    m.insert("mixHash".into(), json!(h.mix_hash));
    m.insert("sha3Uncles".into(), json!(h.ommers_hash));
    m.insert("logsBloom".into(), json!(h.logs_bloom));
    m.insert("stateRoot".into(), json!(h.state_root));
    m.insert("miner".into(), json!(h.beneficiary));
    m.insert("difficulty".into(), q256(h.difficulty));
    m.insert("extraData".into(), json!(h.extra_data));
    m.insert("gasLimit".into(), q(h.gas_limit));
    m.insert("gasUsed".into(), q(h.gas_used));
    m.insert("timestamp".into(), q(h.timestamp));
    m.insert("transactionsRoot".into(), json!(h.transactions_root));
    m.insert("receiptsRoot".into(), json!(h.receipts_root));
    if let Some(v) = h.base_fee_per_gas {
        m.insert("baseFeePerGas".into(), q(v));
    }
    if let Some(v) = h.withdrawals_root {
        m.insert("withdrawalsRoot".into(), json!(v));
    }
    if let Some(v) = h.blob_gas_used {
        m.insert("blobGasUsed".into(), q(v));
    }
    if let Some(v) = h.excess_blob_gas {
        m.insert("excessBlobGas".into(), q(v));
    }
    if let Some(v) = h.parent_beacon_block_root {
        m.insert("parentBeaconBlockRoot".into(), json!(v));
    }
    if let Some(v) = h.requests_hash {
        m.insert("requestsHash".into(), json!(v));
    }
    m
}

/// Withdrawals as blocks and engine payloads show them.
pub(crate) fn withdrawals_json(ws: &[Withdrawal]) -> Value {
    Value::Array(
        ws.iter()
            .map(|w| {
                json!({
                    "index": q(w.index),
                    "validatorIndex": q(w.validator_index),
                    "address": w.address,
                    "amount": q(w.amount),
                })
            })
            .collect(),
    )
}

/// geth's `RPCMarshalBlock`: the header plus size, uncles, transactions (full objects
/// with their senders, or hashes) and withdrawals. Post-merge, totalDifficulty is left out.
pub(crate) fn block_json(block: &Block, full: Option<&[Address]>) -> Value {
    let mut m = header_json(&block.header, block.hash);
    m.insert("size".into(), q(block.encode().len() as u64));
    let uncles: Vec<B256> = block.ommers.iter().map(Header::hash).collect();
    m.insert("uncles".into(), json!(uncles));
    let txs: Vec<Value> = match full {
        Some(senders) => block
            .transactions
            .iter()
            .zip(senders)
            .enumerate()
            .map(|(i, (tx, from))| {
                let place = TxPlace {
                    block_hash: block.hash,
                    block_number: block.header.number,
                    index: i as u64,
                    base_fee: block.header.base_fee_per_gas,
                    block_timestamp: block.header.timestamp,
                };
                tx_json(tx, *from, Some(place))
            })
            .collect(),
        None => block
            .transactions
            .iter()
            .map(|tx| json!(tx.hash()))
            .collect(),
    };
    m.insert("transactions".into(), Value::Array(txs));
    if let Some(ws) = &block.withdrawals {
        m.insert("withdrawals".into(), withdrawals_json(ws));
    }
    Value::Object(m)
}

/// Everything a receipt's JSON needs besides the receipt itself.
pub(crate) struct ReceiptContext<'a> {
    pub block: &'a Block,
    pub index: usize,
    pub from: Address,
    /// Gas used by the transactions before this one (the previous cumulative figure).
    pub prior_gas: u64,
    /// Logs of the transactions before this one in the block.
    pub prior_logs: usize,
    /// Blob base fee of the block, for blob transactions.
    pub blob_gas_price: Option<u128>,
}

/// geth's `MarshalReceipt`.
pub(crate) fn receipt_json(r: &Receipt, c: &ReceiptContext<'_>) -> Value {
    let block = c.block;
    let stx = &block.transactions[c.index];
    let tx = stx.tx();
    let h = &block.header;
    let logs: Vec<Value> = r
        .logs
        .iter()
        .enumerate()
        .map(|(j, log)| {
            json!({
                "address": log.address,
                "topics": log.data.topics(),
                "data": log.data.data,
                "blockNumber": q(h.number),
                "transactionHash": stx.hash(),
                "transactionIndex": q(c.index as u64),
                "blockHash": block.hash,
                "blockTimestamp": q(h.timestamp),
                "logIndex": q((c.prior_logs + j) as u64),
                "removed": false,
            })
        })
        .collect();
    let (to, contract) = match tx.to() {
        TxKind::Call(to) => (json!(to), Value::Null),
        TxKind::Create => (Value::Null, json!(c.from.create(tx.nonce()))),
    };
    let mut m = Map::new();
    m.insert("blockHash".into(), json!(block.hash));
    m.insert("blockNumber".into(), q(h.number));
    m.insert("contractAddress".into(), contract);
    m.insert("cumulativeGasUsed".into(), q(r.cumulative_gas_used));
    m.insert(
        "effectiveGasPrice".into(),
        q(effective_gas_price(tx, h.base_fee_per_gas)),
    );
    m.insert("from".into(), json!(c.from));
    m.insert(
        "gasUsed".into(),
        q(r.cumulative_gas_used.saturating_sub(c.prior_gas)),
    );
    m.insert("logs".into(), Value::Array(logs));
    m.insert("logsBloom".into(), json!(r.bloom()));
    // Before Byzantium (EIP-658) a receipt holds the post-state root, not a status.
    match r.post_state {
        Some(root) => m.insert("root".into(), json!(root)),
        None => m.insert("status".into(), q(u8::from(r.success))),
    };
    m.insert("to".into(), to);
    m.insert("transactionHash".into(), json!(stx.hash()));
    m.insert("transactionIndex".into(), q(c.index as u64));
    m.insert("type".into(), q(r.tx_type as u8));
    if r.tx_type == TxType::Eip4844 {
        m.insert("blobGasUsed".into(), q(tx.blob_gas()));
        if let Some(price) = c.blob_gas_price {
            m.insert("blobGasPrice".into(), q(price));
        }
    }
    Value::Object(m)
}
