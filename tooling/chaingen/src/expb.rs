//! A block as the two engine API requests EXPB (NethermindEth's
//! execution-payloads-benchmarks) replays for it: line i of `payloads.jsonl` is the
//! block's `engine_newPayload`, line i of `fcus.jsonl` its `engine_forkchoiceUpdated`
//! (one parameter: the block as head, zero safe and finalized hashes, no attributes).
//!
//! The versions follow the block's fields, as EXPB's generator picks them by fork:
//! newPayloadV1 (Paris), V2 (withdrawals), V3 (beacon root), V4 (requests hash);
//! forkchoiceUpdatedV1, V2, then V3 from Cancun on.

use alloy_primitives::{B256, Bytes};
use moat_common::block::Block;
use serde_json::{Value, json};

fn q(n: u64) -> Value {
    Value::String(format!("{n:#x}"))
}

/// The `engine_newPayloadV{1..4}` and `engine_forkchoiceUpdatedV{1..3}` requests for
/// `block`, each a one-line JSON text, with the block number as their id. A block whose
/// requests hash is not that of an empty list is refused: its execution requests are not
/// in the block, and the payload could not carry them.
pub fn expb_requests(block: &Block) -> Result<(String, String), String> {
    let h = &block.header;
    let mut payload = json!({
        "parentHash": h.parent_hash,
        "feeRecipient": h.beneficiary,
        "stateRoot": h.state_root,
        "receiptsRoot": h.receipts_root,
        "logsBloom": h.logs_bloom,
        "prevRandao": h.mix_hash,
        "blockNumber": q(h.number),
        "gasLimit": q(h.gas_limit),
        "gasUsed": q(h.gas_used),
        "timestamp": q(h.timestamp),
        "extraData": h.extra_data,
        "baseFeePerGas": q(h.base_fee_per_gas.ok_or("a pre-London block has no payload")?),
        "blockHash": block.hash,
        "transactions": block.transactions.iter()
            .map(|t| Bytes::from(t.encoded_2718()))
            .collect::<Vec<_>>(),
    });
    let mut version = 1;
    if let Some(ws) = &block.withdrawals {
        version = 2;
        payload["withdrawals"] = ws
            .iter()
            .map(|w| {
                json!({
                    "index": q(w.index),
                    "validatorIndex": q(w.validator_index),
                    "address": w.address,
                    "amount": q(w.amount),
                })
            })
            .collect();
    }
    let mut params = vec![];
    if let Some(root) = h.parent_beacon_block_root {
        version = 3;
        payload["blobGasUsed"] = q(h.blob_gas_used.unwrap_or_default());
        payload["excessBlobGas"] = q(h.excess_blob_gas.unwrap_or_default());
        let blob_hashes: Vec<B256> = block
            .transactions
            .iter()
            .flat_map(|tx| tx.tx().blob_versioned_hashes().iter().copied())
            .collect();
        params.push(json!(blob_hashes));
        params.push(json!(root));
    }
    if let Some(hash) = h.requests_hash {
        version = 4;
        if hash != moat_blockchain::chain::requests_hash(&[]) {
            return Err(format!(
                "block #{} has execution requests, which it does not carry",
                h.number
            ));
        }
        params.push(json!([]));
    }
    params.insert(0, payload);
    let new_payload = json!({
        "jsonrpc": "2.0",
        "id": h.number,
        "method": format!("engine_newPayloadV{version}"),
        "params": params,
    });
    let fcu_version = version.min(3);
    let fcu = json!({
        "jsonrpc": "2.0",
        "id": h.number,
        "method": format!("engine_forkchoiceUpdatedV{fcu_version}"),
        "params": [{
            "headBlockHash": block.hash,
            "safeBlockHash": B256::ZERO,
            "finalizedBlockHash": B256::ZERO,
        }],
    });
    Ok((new_payload.to_string(), fcu.to_string()))
}
