//! The dev node's accounts: `eth_accounts` and `eth_sign` with the keys the node holds.
//! Only the dev node holds keys; elsewhere `eth_accounts` is empty and signing gets geth's
//! "unknown account", as geth without a keystore answers.

use crate::RpcContext;
use crate::dev_methods::arg;
use crate::eth::positional;
use crate::params::{RpcResult, invalid_params, server_error};
use alloy_primitives::{Address, Bytes, keccak256};
use jsonrpsee::types::Params;
use moat_crypto::secp::Signer;
use serde_json::{Value, json};

/// `eth_accounts`: the addresses of the keys the node holds.
pub(crate) fn accounts(ctx: &RpcContext, _: Params<'_>) -> RpcResult<Value> {
    Ok(json!(
        ctx.dev_keys.iter().map(Signer::address).collect::<Vec<_>>()
    ))
}

/// The held key of `address`, or geth's "unknown account".
pub(crate) fn key_of(ctx: &RpcContext, address: &Address) -> RpcResult<Signer> {
    ctx.dev_keys
        .iter()
        .find(|s| s.address() == *address)
        .cloned()
        .ok_or_else(|| server_error("unknown account"))
}

/// EIP-191's personal-message digest: keccak256("\x19Ethereum Signed Message:\n" ‖ len ‖ data).
pub(crate) fn personal_digest(data: &[u8]) -> alloy_primitives::B256 {
    let mut msg = format!("\x19Ethereum Signed Message:\n{}", data.len()).into_bytes();
    msg.extend_from_slice(data);
    keccak256(msg)
}

/// `eth_sign(address, data)`: the 65-byte r ‖ s ‖ v signature of the EIP-191 digest, v 27
/// or 28 (geth's format).
pub(crate) fn sign(ctx: &RpcContext, params: Params<'_>) -> RpcResult<Value> {
    let [address, data] = positional::<2>(&params)?;
    let address: Address = arg(address, 0)?;
    let data: Bytes = arg(data, 1)?;
    let key = key_of(ctx, &address)?;
    Ok(json!(signature_bytes(&key, &personal_digest(&data))))
}

/// `personal_sign(data, address)`: `eth_sign` with its arguments the other way round, as
/// MetaMask, anvil and ethers' `JsonRpcSigner.signMessage` have it. Dev node only.
pub(crate) fn personal_sign(ctx: &RpcContext, params: Params<'_>) -> RpcResult<Value> {
    // geth has no personal namespace: only the dev node (anvil's) serves it.
    crate::dev_methods::require_dev(ctx, "personal_sign")?;
    let [data, address] = positional::<2>(&params)?;
    let swapped = json!([address, data]).to_string();
    sign(ctx, Params::new(Some(&swapped)))
}

/// r ‖ s ‖ v of `digest` signed by `key`, v 27 or 28 (geth's format).
fn signature_bytes(key: &Signer, digest: &alloy_primitives::B256) -> Bytes {
    let sig = key.sign(digest);
    let mut out = Vec::with_capacity(65);
    out.extend_from_slice(&sig.r.to_be_bytes::<32>());
    out.extend_from_slice(&sig.s.to_be_bytes::<32>());
    out.push(27 + u8::from(sig.y_parity));
    Bytes::from(out)
}

/// `eth_signTypedData_v4(address, typedData)`: the EIP-712 signature (r ‖ s ‖ v, v 27 or
/// 28) of the typed data, given as a JSON object or as a string holding one (MetaMask's
/// form, which ethers and viem send). Dev node only: elsewhere "method not found", as geth.
pub(crate) fn sign_typed_data_v4(ctx: &RpcContext, params: Params<'_>) -> RpcResult<Value> {
    // geth does not have it: only the dev node (as anvil) serves it.
    crate::dev_methods::require_dev(ctx, "eth_signTypedData_v4")?;
    let [address, typed] = positional::<2>(&params)?;
    let address: Address = arg(address, 0)?;
    let typed = match typed {
        Some(Value::String(s)) => serde_json::from_str(&s)
            .map_err(|e| invalid_params(format!("invalid argument 1: {e}")))?,
        Some(v @ Value::Object(_)) => v,
        _ => return Err(invalid_params("missing value for required argument 1")),
    };
    let key = key_of(ctx, &address)?;
    let digest = crate::typed_data::signing_hash(&typed)
        .map_err(|e| invalid_params(format!("invalid argument 1: {e}")))?;
    Ok(json!(signature_bytes(&key, &digest)))
}

/// A field of a transaction object, `None` when absent or null.
fn field<T: serde::de::DeserializeOwned>(
    o: &serde_json::Map<String, Value>,
    name: &str,
) -> RpcResult<Option<T>> {
    match o.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => serde_json::from_value(v.clone())
            .map(Some)
            .map_err(|e| invalid_params(format!("invalid {name}: {e}"))),
    }
}

/// A fee field as u128.
fn fee(o: &serde_json::Map<String, Value>, name: &str) -> RpcResult<Option<u128>> {
    field::<alloy_primitives::U256>(o, name)?
        .map(|v| u128::try_from(v).map_err(|_| invalid_params(format!("{name} too large"))))
        .transpose()
}

/// `eth_sendTransaction(tx)`: fills what the sender left out as geth does (the pending
/// nonce, an estimated gas limit, the suggested tip and a fee cap of tip + 2 × base fee,
/// the chain id), signs with the held key of `from`, and submits it to the pool as local.
/// A `gasPrice` makes a legacy transaction (an EIP-2930 one with an `accessList`), as in
/// geth. Blob and set-code fields are refused rather than dropped: a transaction without
/// them is not the one asked for.
pub(crate) async fn send_transaction(ctx: &RpcContext, params: Params<'_>) -> RpcResult<Value> {
    use moat_common::transaction::{
        AccessListItem, Eip1559Tx, Eip2930Tx, LegacyTx, SignedTransaction, Transaction,
    };
    let [tx] = positional::<1>(&params)?;
    let Some(Value::Object(o)) = tx else {
        return Err(invalid_params("missing value for required argument 0"));
    };
    for unsupported in ["authorizationList", "blobVersionedHashes", "blobs"] {
        if o.get(unsupported).is_some_and(|v| !v.is_null()) {
            return Err(invalid_params(format!(
                "{unsupported}: eth_sendTransaction does not build blob or set-code transactions; sign them and use eth_sendRawTransaction"
            )));
        }
    }
    // The fields a call takes, checked as eth_estimateGas checks them; the access list
    // goes into the transaction.
    let access_list: Vec<AccessListItem> =
        crate::call::parse_request(Some(Value::Object(o.clone())))?
            .access_list
            .into_iter()
            .map(|(address, storage_keys)| AccessListItem {
                address,
                storage_keys,
            })
            .collect();
    let from: Address = field(&o, "from")?.unwrap_or_default();
    // A held key signs; an address the dev node impersonates gets a placeholder
    // signature and its sender is told to the pool directly.
    let key = match key_of(ctx, &from) {
        Ok(key) => Some(key),
        Err(_) if ctx.mine.is_some() && ctx.impersonated.lock().contains(&from) => None,
        Err(e) => return Err(e),
    };
    let chain_id = ctx.chain.config().chain_id;
    if let Some(id) = field::<alloy_primitives::U256>(&o, "chainId")?
        && id != alloy_primitives::U256::from(chain_id)
    {
        return Err(server_error(format!(
            "chainId does not match node's (have={id}, want={chain_id})"
        )));
    }
    let data: Option<Bytes> = field(&o, "data")?;
    let input: Option<Bytes> = field(&o, "input")?;
    let input = match (input, data) {
        (Some(i), Some(d)) if i != d => {
            return Err(server_error(
                "both \"data\" and \"input\" are set and not equal. Please use \"input\" to pass transaction call data",
            ));
        }
        (Some(i), _) | (None, Some(i)) => i,
        (None, None) => Bytes::new(),
    };
    let to: Option<Address> = field(&o, "to")?;
    if to.is_none() && input.is_empty() {
        return Err(server_error("contract creation without any data provided"));
    }
    let value: alloy_primitives::U256 = field(&o, "value")?.unwrap_or_default();
    let nonce = match field::<alloy_primitives::U64>(&o, "nonce")? {
        Some(n) => n.to::<u64>(),
        None => ctx.pool.pending_nonce(&from),
    };
    let gas_limit = match field::<alloy_primitives::U64>(&o, "gas")? {
        Some(g) => g.to::<u64>(),
        None => {
            let c = ctx.clone();
            let call = serde_json::json!([Value::Object(o.clone())]).to_string();
            let est = tokio::task::spawn_blocking(move || {
                crate::call::estimate_gas(&c, Params::new(Some(&call)))
            })
            .await
            .map_err(crate::params::internal)??;
            let est: alloy_primitives::U64 =
                serde_json::from_value(est).map_err(crate::params::internal)?;
            est.to::<u64>()
        }
    };
    let kind = to.map_or(
        alloy_primitives::TxKind::Create,
        alloy_primitives::TxKind::Call,
    );
    let tx = match fee(&o, "gasPrice")? {
        Some(gas_price) if access_list.is_empty() => Transaction::Legacy(LegacyTx {
            chain_id: Some(chain_id),
            nonce,
            gas_price,
            gas_limit,
            to: kind,
            value,
            input,
        }),
        Some(gas_price) => Transaction::Eip2930(Eip2930Tx {
            chain_id,
            nonce,
            gas_price,
            gas_limit,
            to: kind,
            value,
            input,
            access_list,
        }),
        None => {
            let tip = match fee(&o, "maxPriorityFeePerGas")? {
                Some(t) => t,
                None => ctx.suggested_tip()?,
            };
            let cap = match fee(&o, "maxFeePerGas")? {
                Some(c) => c,
                None => {
                    let base = ctx.head_header()?.base_fee_per_gas.unwrap_or(0);
                    tip.saturating_add(u128::from(base).saturating_mul(2))
                }
            };
            if cap < tip {
                return Err(server_error(format!(
                    "maxFeePerGas ({cap}) < maxPriorityFeePerGas ({tip})"
                )));
            }
            Transaction::Eip1559(Eip1559Tx {
                chain_id,
                nonce,
                max_priority_fee_per_gas: tip,
                max_fee_per_gas: cap,
                gas_limit,
                to: kind,
                value,
                input,
                access_list,
            })
        }
    };
    let signed = match &key {
        Some(key) => SignedTransaction::sign(tx, key),
        None => {
            let signed = SignedTransaction::new(tx, impersonated_signature(&from));
            // The sender cache is where the pool, block import and the RPC's `from`
            // look first: the impersonated address is the sender while the node runs.
            ctx.pool.sender_cache().insert(signed.hash(), from);
            signed
        }
    };
    let raw = Bytes::from(signed.encoded_2718());
    match ctx.pool.submit_local(moat_mempool::TxInput::Raw(raw)).await {
        Ok(added) => {
            crate::dev_methods::automine(ctx).await;
            Ok(json!(added.hash))
        }
        Err(rejection) => Err(server_error(rejection.to_string())),
    }
}

/// The placeholder signature of a transaction from an impersonated address (anvil's
/// way): r is the address (with bit 160 set, so never zero) and s is 1. It differs per
/// sender, so two senders' otherwise equal transactions have different hashes; and it
/// does not recover to the address, so a node that was not told the sender (any node
/// but the dev node that made it) attributes the transaction to someone else or
/// refuses it.
pub fn impersonated_signature(from: &Address) -> moat_common::transaction::Signature {
    moat_common::transaction::Signature {
        y_parity: false,
        r: alloy_primitives::U256::from_be_slice(from.as_slice())
            | (alloy_primitives::U256::from(1) << 160),
        s: alloy_primitives::U256::from(1),
    }
}

/// `anvil_impersonateAccount(address)` and `anvil_stopImpersonatingAccount(address)`
/// (answering null), and their `hardhat_` names (answering true):
/// `eth_sendTransaction` from the address is signed with a placeholder (dev node only).
pub(crate) fn impersonate(ctx: &RpcContext, params: Params<'_>, method: &str) -> RpcResult<Value> {
    crate::dev_methods::require_dev(ctx, method)?;
    let on = !method.ends_with("stopImpersonatingAccount");
    let [address] = positional::<1>(&params)?;
    let address: Address = arg(address, 0)?;
    let mut set = ctx.impersonated.lock();
    if on {
        set.insert(address);
    } else {
        set.remove(&address);
    }
    Ok(if method.starts_with("hardhat_") {
        Value::Bool(true)
    } else {
        Value::Null
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_impersonated_signature_does_not_recover_to_the_address() {
        use moat_common::transaction::{Eip1559Tx, SignedTransaction, Transaction};
        let from: Address = "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266"
            .parse()
            .unwrap();
        let tx = Transaction::Eip1559(Eip1559Tx {
            chain_id: 1337,
            nonce: 0,
            max_priority_fee_per_gas: 1,
            max_fee_per_gas: 2_000_000_000,
            gas_limit: 21_000,
            to: alloy_primitives::TxKind::Call(Address::ZERO),
            value: alloy_primitives::U256::from(1),
            input: Bytes::new(),
            access_list: Vec::new(),
        });
        let signed = SignedTransaction::new(tx.clone(), impersonated_signature(&from));
        assert_ne!(signed.recover_sender().ok(), Some(from));
        // Another sender, the same fields: another hash.
        let other = SignedTransaction::new(tx, impersonated_signature(&Address::ZERO));
        assert_ne!(signed.hash(), other.hash());
        assert!(!impersonated_signature(&Address::ZERO).r.is_zero());
    }

    #[test]
    fn personal_digest_matches_eip191() {
        // ethers' hashMessage("hello world").
        assert_eq!(
            personal_digest(b"hello world"),
            "0xd9eba16ed0ecae432b71fe008c98cc872bb4cc214d3220a36f365326cf807d68"
                .parse::<alloy_primitives::B256>()
                .unwrap()
        );
    }
}
