//! `eth_config` (EIP-7910): the fork in force at the head, the next scheduled one and the
//! last one, each with its activation time, blob parameters, chain id, fork id,
//! precompiles and system contracts; and `eth_capabilities`, what history the node
//! serves.

use crate::RpcContext;
use crate::json::q;
use crate::params::{RpcResult, internal};
use alloy_primitives::Address;
use jsonrpsee::types::Params;
use moat_blockchain::vm::{
    BEACON_ROOTS_ADDRESS, CONSOLIDATION_REQUEST_ADDRESS, HISTORY_STORAGE_ADDRESS,
    WITHDRAWAL_REQUEST_ADDRESS,
};
use moat_common::config::{Activation, ChainConfig, Fork};
use serde_json::{Map, Value, json};

/// The precompiles of a fork, by EIP-7910 name.
fn precompiles(fork: Fork) -> Vec<(&'static str, u16)> {
    let mut out = vec![("ECREC", 1), ("SHA256", 2), ("RIPEMD160", 3), ("ID", 4)];
    if fork >= Fork::Byzantium {
        out.extend([
            ("MODEXP", 5),
            ("BN254_ADD", 6),
            ("BN254_MUL", 7),
            ("BN254_PAIRING", 8),
        ]);
    }
    if fork >= Fork::Istanbul {
        out.push(("BLAKE2F", 9));
    }
    if fork >= Fork::Cancun {
        out.push(("KZG_POINT_EVALUATION", 0x0a));
    }
    if fork >= Fork::Prague {
        out.extend([
            ("BLS12_G1ADD", 0x0b),
            ("BLS12_G1MSM", 0x0c),
            ("BLS12_G2ADD", 0x0d),
            ("BLS12_G2MSM", 0x0e),
            ("BLS12_PAIRING_CHECK", 0x0f),
            ("BLS12_MAP_FP_TO_G1", 0x10),
            ("BLS12_MAP_FP2_TO_G2", 0x11),
        ]);
    }
    if fork >= Fork::Osaka {
        out.push(("P256VERIFY", 0x100));
    }
    out
}

fn system_contracts(config: &ChainConfig, fork: Fork) -> Map<String, Value> {
    let mut m = Map::new();
    if fork >= Fork::Cancun {
        m.insert("BEACON_ROOTS_ADDRESS".into(), json!(BEACON_ROOTS_ADDRESS));
    }
    if fork >= Fork::Prague {
        m.insert(
            "CONSOLIDATION_REQUEST_PREDEPLOY_ADDRESS".into(),
            json!(CONSOLIDATION_REQUEST_ADDRESS),
        );
        m.insert(
            "DEPOSIT_CONTRACT_ADDRESS".into(),
            json!(config.deposit_contract_address.unwrap_or_default()),
        );
        m.insert(
            "HISTORY_STORAGE_ADDRESS".into(),
            json!(HISTORY_STORAGE_ADDRESS),
        );
        m.insert(
            "WITHDRAWAL_REQUEST_PREDEPLOY_ADDRESS".into(),
            json!(WITHDRAWAL_REQUEST_ADDRESS),
        );
    }
    m
}

/// One fork's entry: `null` for a fork without a timestamp (EIP-7910 covers the
/// time-scheduled forks).
fn fork_entry(ctx: &RpcContext, fork: Fork, genesis_timestamp: u64) -> Value {
    let config = ctx.chain.config();
    let Some(Activation::Timestamp(time)) = config.activation(fork) else {
        return Value::Null;
    };
    let blob = if fork >= Fork::Cancun {
        config.blob_params_at(time).map_or(Value::Null, |p| {
            json!({
                "target": p.target,
                "max": p.max,
                "baseFeeUpdateFraction": p.base_fee_update_fraction,
            })
        })
    } else {
        Value::Null
    };
    // The fork id of a block at the fork's activation (every block fork passed).
    let id = config.fork_id(ctx.chain.genesis_hash(), genesis_timestamp, u64::MAX, time);
    let precompiles: Map<String, Value> = precompiles(fork)
        .into_iter()
        .map(|(name, n)| {
            let mut a = [0u8; 20];
            a[18..].copy_from_slice(&n.to_be_bytes());
            (name.to_string(), json!(Address::from(a)))
        })
        .collect();
    json!({
        // EIP-7910: a fork active at genesis reports 0 (go-ethereum does the same).
        "activationTime": if time <= genesis_timestamp { 0 } else { time },
        "blobSchedule": blob,
        "chainId": q(config.chain_id),
        "forkId": format!("0x{}", alloy_primitives::hex::encode(id.hash)),
        "precompiles": precompiles,
        "systemContracts": system_contracts(config, fork),
    })
}

/// The scheduled time forks, oldest first (the fork a BPO entry repeats counts once).
fn time_forks(config: &ChainConfig) -> Vec<(Fork, u64)> {
    Fork::ALL
        .iter()
        .filter_map(|&f| match config.activation(f) {
            Some(Activation::Timestamp(t)) => Some((f, t)),
            _ => None,
        })
        .collect()
}

pub(crate) fn eth_config(ctx: &RpcContext, _params: Params<'_>) -> RpcResult<Value> {
    let head = ctx.head_header()?;
    let genesis = ctx
        .chain
        .header_by_number(0)
        .map_err(internal)?
        .ok_or_else(|| internal("no genesis header"))?;
    let forks = time_forks(ctx.chain.config());
    // Forks at one timestamp: the latest of them is the one in force.
    let current = forks
        .iter()
        .rev()
        .find(|(_, t)| *t <= head.timestamp)
        .map(|(f, _)| *f);
    let next = forks
        .iter()
        .filter(|(_, t)| *t > head.timestamp)
        .map(|(f, t)| (*f, *t))
        .fold(None::<(Fork, u64)>, |acc, (f, t)| match acc {
            Some((_, at)) if at < t => acc,
            _ => Some((f, t)),
        })
        .map(|(f, _)| f);
    let last = forks
        .last()
        .map(|(f, _)| *f)
        .filter(|f| Some(*f) != current);
    let entry = |f: Option<Fork>| f.map_or(Value::Null, |f| fork_entry(ctx, f, genesis.timestamp));
    Ok(json!({
        "current": entry(current),
        "next": entry(next),
        "last": entry(last),
    }))
}

/// `eth_capabilities`: what this node serves. Blocks, transactions, receipts and logs go
/// back to genesis; state (and proofs) only as far as the undo records reach.
pub(crate) fn capabilities(ctx: &RpcContext, _params: Params<'_>) -> RpcResult<Value> {
    let (number, hash) = ctx.head()?;
    let oldest_state = ctx.chain.undo_floor().map_err(internal)?.min(number);
    let full = json!({ "disabled": false, "oldestBlock": q(0u64) });
    Ok(json!({
        "head": { "number": q(number), "hash": hash },
        "state": { "disabled": false, "oldestBlock": q(oldest_state) },
        "tx": full,
        "logs": full,
        "receipts": full,
        "blocks": full,
        "stateproofs": { "disabled": false, "oldestBlock": q(oldest_state) },
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use moat_blockchain::chain::Chain;
    use moat_common::config::Genesis;
    use moat_mempool::{InMemoryState, Pool, PoolConfig};
    use moat_storage::Store;
    use std::sync::Arc;

    /// A chain whose genesis (time 1,000) already has Cancun (its config says 0, as
    /// Hoodi's does), with Prague scheduled at 2,000.
    fn context() -> RpcContext {
        let genesis = Genesis::from_json(
            &json!({
                "config": {
                    "chainId": 7, "homesteadBlock": 0, "eip150Block": 0, "eip155Block": 0,
                    "eip158Block": 0, "byzantiumBlock": 0, "constantinopleBlock": 0,
                    "petersburgBlock": 0, "istanbulBlock": 0, "berlinBlock": 0,
                    "londonBlock": 0, "mergeNetsplitBlock": 0, "terminalTotalDifficulty": 0,
                    "shanghaiTime": 0, "cancunTime": 0, "pragueTime": 2000,
                    "depositContractAddress": "0x0000000000000000000000000000000000000000"
                },
                "gasLimit": "0x1c9c380", "difficulty": "0x0", "timestamp": "0x3e8",
                "alloc": {},
            })
            .to_string(),
        )
        .unwrap();
        let chain = Chain::init(Store::in_memory(), &genesis).unwrap();
        let pool = Pool::new(
            PoolConfig::new(chain.config().clone()),
            Arc::new(InMemoryState::new(Default::default())),
        );
        RpcContext::new(chain, pool)
    }

    #[test]
    fn a_fork_active_at_genesis_reports_activation_time_zero() {
        let config = eth_config(&context(), Params::new(None)).unwrap();
        // EIP-7910 and go-ethereum: 0 for a fork at genesis, not the genesis time.
        assert_eq!(config["current"]["activationTime"], json!(0));
        assert_eq!(config["next"]["activationTime"], json!(2000));
    }
}
