//! `moat tx decode`: the `cast decode-transaction` of moat, plus the pool's stateless verdict.

use alloy_primitives::{B256, TxKind, hex};
use moat_common::config::Fork;
use moat_common::transaction::{
    BlobRules, PooledTransaction, StatelessRules, Transaction, check_stateless,
};
use serde_json::{Value, json};
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub(crate) struct DecodeArgs {
    /// Fork whose rules apply, spelled as the execution test suites spell it
    /// (Shanghai, Cancun, Prague, Osaka, …).
    #[arg(long, default_value_t = Fork::LATEST)]
    fork: Fork,
    /// Expected chain id; when given, a transaction signed for another chain is invalid.
    #[arg(long)]
    chain_id: Option<u64>,
    /// The transaction as hex (0x optional), or @FILE holding hex or raw bytes.
    input: String,
}

/// Reads the argument into bytes: hex text, or a file of hex text or raw bytes.
fn read_input(arg: &str) -> Result<Vec<u8>, String> {
    let text = match arg.strip_prefix('@') {
        Some(path) => {
            let raw = std::fs::read(path).map_err(|e| format!("cannot read {path}: {e}"))?;
            match std::str::from_utf8(&raw) {
                Ok(s) if hex::decode(s.trim()).is_ok() => s.trim().to_string(),
                _ => return Ok(raw),
            }
        }
        None => arg.trim().to_string(),
    };
    hex::decode(&text).map_err(|e| format!("input is not hex: {e}"))
}

fn quantity(v: u128) -> String {
    v.to_string()
}

fn describe(pooled: &PooledTransaction, fork: Fork, chain_id: Option<u64>) -> (Value, Vec<String>) {
    let signed = pooled.tx();
    let tx: &Transaction = signed.tx();
    let mut violations = Vec::new();

    let sender = match signed.recover_sender() {
        Ok(a) => Value::String(a.to_checksum(None)),
        Err(e) => {
            violations.push(format!("invalid sender: {e}"));
            Value::Null
        }
    };
    let blob_rules = BlobRules::for_fork(fork);
    let rules = StatelessRules {
        chain_id,
        max_blobs_per_tx: blob_rules.map(|r| r.max_blobs_per_tx),
        ..StatelessRules::new(fork)
    };
    let (intrinsic, errors) = check_stateless(signed, &rules);
    violations.extend(errors.iter().map(|e| e.to_string()));

    let mut out = json!({
        "type": signed.tx_type() as u8,
        "typeName": signed.tx_type().name(),
        "hash": signed.hash(),
        "sender": sender,
        "chainId": tx.chain_id(),
        "nonce": tx.nonce(),
        "gasLimit": tx.gas_limit(),
        "to": match tx.to() { TxKind::Call(a) => Value::String(a.to_checksum(None)), TxKind::Create => Value::Null },
        "value": tx.value().to_string(),
        "inputLength": tx.input().len(),
        "size": signed.size(),
        "signature": {
            "v": signed.v(),
            "r": B256::from(signed.signature().r.to_be_bytes::<32>()),
            "s": B256::from(signed.signature().s.to_be_bytes::<32>()),
        },
        "fork": fork.name(),
        "intrinsicGas": intrinsic.gas,
        "floorDataGas": intrinsic.floor,
    });
    let obj = out
        .as_object_mut()
        .expect("json! of an object literal is an object");
    match tx {
        Transaction::Legacy(_) | Transaction::Eip2930(_) => {
            obj.insert("gasPrice".into(), quantity(tx.max_fee_per_gas()).into());
        }
        _ => {
            obj.insert("maxFeePerGas".into(), quantity(tx.max_fee_per_gas()).into());
            obj.insert(
                "maxPriorityFeePerGas".into(),
                quantity(tx.max_priority_fee_per_gas()).into(),
            );
        }
    }
    if tx.tx_type() != moat_common::TxType::Legacy {
        let list: Vec<Value> = tx
            .access_list()
            .iter()
            .map(|i| json!({ "address": i.address, "storageKeys": i.storage_keys }))
            .collect();
        obj.insert("accessList".into(), list.into());
    }
    if let Some(blob_fee) = tx.max_fee_per_blob_gas() {
        obj.insert("maxFeePerBlobGas".into(), quantity(blob_fee).into());
        obj.insert(
            "blobVersionedHashes".into(),
            json!(tx.blob_versioned_hashes()),
        );
        match (pooled.sidecar(), blob_rules) {
            (Some(sidecar), Some(rules)) => {
                obj.insert(
                    "sidecar".into(),
                    json!({
                        "version": sidecar.version as u8,
                        "blobs": sidecar.blobs.len(),
                        "commitments": sidecar.commitments.len(),
                        "proofs": sidecar.proofs.len(),
                    }),
                );
                if let Err(e) = pooled.validate(&rules) {
                    violations.push(format!("blob sidecar: {e}"));
                }
            }
            (Some(_), None) => {}
            (None, _) => {
                obj.insert("sidecar".into(), Value::Null);
            }
        }
    }
    if tx.tx_type() == moat_common::TxType::Eip7702 {
        let auths: Vec<Value> = tx
            .authorization_list()
            .iter()
            .map(|a| {
                json!({
                    "chainId": a.chain_id.to_string(),
                    "address": a.address,
                    "nonce": a.nonce,
                    "yParity": a.y_parity,
                    "r": B256::from(a.r.to_be_bytes::<32>()),
                    "s": B256::from(a.s.to_be_bytes::<32>()),
                    "authority": a.recover_authority(),
                })
            })
            .collect();
        obj.insert("authorizationList".into(), auths.into());
    }
    obj.insert("valid".into(), violations.is_empty().into());
    obj.insert("violations".into(), json!(violations));
    (out, violations)
}

pub(crate) fn run(args: &DecodeArgs) -> ExitCode {
    let bytes = match read_input(&args.input) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(1);
        }
    };
    let pooled = match PooledTransaction::decode_2718(&bytes) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: invalid transaction: {e}");
            return ExitCode::from(1);
        }
    };
    let (json, violations) = describe(&pooled, args.fork, args.chain_id);
    println!(
        "{}",
        serde_json::to_string_pretty(&json).expect("a json Value always serializes")
    );
    match violations.first() {
        None => ExitCode::SUCCESS,
        Some(first) => {
            eprintln!("error: invalid at {}: {first}", args.fork);
            ExitCode::from(1)
        }
    }
}
