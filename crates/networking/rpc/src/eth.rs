//! `eth_` methods over the chain (blocks, transactions, receipts, head state) and the pool.

use crate::RpcContext;
use crate::json::{self, ReceiptContext, TxPlace, q, q256};
use crate::params::{
    BlockRef, RpcResult, Tag, header_not_found, historical_state, internal, invalid_params,
    parse_block_number, parse_block_ref, parse_slot, server_error,
};
use alloy_primitives::{Address, B256, Bytes};
use jsonrpsee::types::Params;
use moat_blockchain::chain::{ChainError, Mark};
use moat_blockchain::history::StateAtBlock;
use moat_common::block::{Block, Header};
use moat_mempool::TxInput;
use serde_json::Value;

/// Which state a state query reads: the head's, or that of a block the undo records
/// reach (`Chain::undo_floor`; older state is not kept).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StateAt {
    /// The state after the head block.
    Head,
    /// The head state plus the pool (only the nonce differs).
    Pending,
    /// The state after canonical block `n`, below the head.
    Past(u64),
}

impl RpcContext {
    pub(crate) fn head(&self) -> RpcResult<(u64, B256)> {
        self.chain.head().map_err(internal)
    }

    pub(crate) fn head_header(&self) -> RpcResult<Header> {
        self.chain.head_header().map_err(internal)
    }

    /// The block a tag names, as (number, hash): the head for latest and pending, genesis
    /// for earliest, and for safe and finalized the blocks the consensus layer last named
    /// (an error, as geth's, before it has named one).
    pub(crate) fn tag_block(&self, tag: Tag) -> RpcResult<(u64, B256)> {
        let mark = match tag {
            Tag::Latest | Tag::Pending => return self.head(),
            Tag::Earliest => return Ok((0, self.chain.genesis_hash())),
            Tag::Safe => Mark::Safe,
            Tag::Finalized => Mark::Finalized,
        };
        self.chain
            .mark(mark)
            .map_err(internal)?
            .ok_or_else(|| server_error(format!("{} block not found", mark.name())))
    }

    /// The canonical block hash a reference names, `None` if there is no such block.
    pub(crate) fn resolve(&self, r: BlockRef) -> RpcResult<Option<B256>> {
        match r {
            BlockRef::Hash(h) => Ok(self
                .chain
                .store()
                .block_number(&h)
                .map_err(internal)?
                .map(|_| h)),
            BlockRef::Tag(tag) => Ok(Some(self.tag_block(tag)?.1)),
            BlockRef::Number(n) => self.chain.store().canonical_hash(n).map_err(internal),
        }
    }

    /// Which state a block reference allows reading, or an error.
    pub(crate) fn state_at(&self, r: BlockRef) -> RpcResult<StateAt> {
        let (head_number, head_hash) = self.head()?;
        let past = |n: u64| {
            // The undo records reach back to the floor (the last 128 blocks, or back to
            // the finalized block under the configured ceiling).
            if n < self.chain.undo_floor().map_err(internal)? {
                Err(historical_state())
            } else {
                Ok(StateAt::Past(n))
            }
        };
        let number = match r {
            BlockRef::Tag(Tag::Pending) => return Ok(StateAt::Pending),
            BlockRef::Tag(Tag::Latest) => return Ok(StateAt::Head),
            BlockRef::Tag(tag @ (Tag::Earliest | Tag::Safe | Tag::Finalized)) => {
                self.tag_block(tag)?.0
            }
            BlockRef::Number(n) => n,
            BlockRef::Hash(h) if h == head_hash => return Ok(StateAt::Head),
            BlockRef::Hash(h) => {
                return match self.chain.store().block_number(&h).map_err(internal)? {
                    Some(n) if self.chain.is_canonical(&h).map_err(internal)? => past(n),
                    Some(_) => Err(historical_state()),
                    None => Err(header_not_found()),
                };
            }
        };
        match number.cmp(&head_number) {
            std::cmp::Ordering::Equal => Ok(StateAt::Head),
            std::cmp::Ordering::Less => past(number),
            std::cmp::Ordering::Greater => Err(header_not_found()),
        }
    }

    /// A reader of the state `at` names (the pool's nonces aside).
    pub(crate) fn reader(&self, at: StateAt) -> RpcResult<StateAtBlock> {
        match at {
            StateAt::Head | StateAt::Pending => Ok(StateAtBlock::head(self.chain.store().clone())),
            StateAt::Past(n) => self.chain.state_at(n).map_err(|e| match e {
                ChainError::HistoryUnavailable { .. } => historical_state(),
                other => internal(other),
            }),
        }
    }

    pub(crate) fn block(&self, hash: &B256) -> RpcResult<Option<Block>> {
        self.chain.block(hash).map_err(internal)
    }

    /// Senders of a stored block: from the shared sender cache where block import or the
    /// pool already paid for the ECDSA, else recovered.
    pub(crate) fn senders(&self, block: &Block) -> Vec<Address> {
        let cache = self.pool.sender_cache();
        block
            .transactions
            .iter()
            .map(|tx| {
                cache.get(&tx.hash()).unwrap_or_else(|| {
                    // Imported blocks were checked on import; a failure here can only
                    // come from a damaged store, and the zero address shows it plainly.
                    tx.recover_sender().unwrap_or_default()
                })
            })
            .collect()
    }
}

fn address_param(v: Option<Value>) -> RpcResult<Address> {
    let v = v.ok_or_else(|| invalid_params("missing value for required argument 0"))?;
    serde_json::from_value(v).map_err(|e| invalid_params(format!("invalid address: {e}")))
}

pub(crate) fn block_param(v: Option<Value>) -> RpcResult<BlockRef> {
    v.as_ref().map_or(Ok(BlockRef::default()), parse_block_ref)
}

fn hash_param(v: Option<Value>) -> RpcResult<B256> {
    let v = v.ok_or_else(|| invalid_params("missing value for required argument 0"))?;
    serde_json::from_value(v).map_err(|e| invalid_params(format!("invalid hash: {e}")))
}

fn bool_param(v: Option<Value>) -> RpcResult<bool> {
    match v {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(b),
        Some(_) => Err(invalid_params("expected a boolean")),
    }
}

/// Up to `N` positional parameters as raw JSON values.
pub(crate) fn positional<const N: usize>(params: &Params<'_>) -> RpcResult<[Option<Value>; N]> {
    let mut out: [Option<Value>; N] = std::array::from_fn(|_| None);
    if params.is_object() {
        return Err(invalid_params("positional parameters expected"));
    }
    let values: Vec<Value> = if params.as_str().is_none() {
        Vec::new()
    } else {
        params.parse()?
    };
    if values.len() > N {
        return Err(invalid_params(format!(
            "too many arguments, want at most {N}"
        )));
    }
    for (slot, v) in out.iter_mut().zip(values) {
        *slot = Some(v);
    }
    Ok(out)
}

pub(crate) fn get_balance(ctx: &RpcContext, params: Params<'_>) -> RpcResult<Value> {
    let [a, b] = positional::<2>(&params)?;
    let (address, at) = (address_param(a)?, block_param(b)?);
    let state = ctx.reader(ctx.state_at(at)?)?;
    let account = state.account(&address).map_err(internal)?;
    Ok(q256(account.map(|a| a.balance).unwrap_or_default()))
}

pub(crate) fn get_transaction_count(ctx: &RpcContext, params: Params<'_>) -> RpcResult<Value> {
    let [a, b] = positional::<2>(&params)?;
    let (address, at) = (address_param(a)?, block_param(b)?);
    let at = ctx.state_at(at)?;
    let nonce = match at {
        StateAt::Pending => ctx.pool.pending_nonce(&address),
        _ => ctx
            .reader(at)?
            .account(&address)
            .map_err(internal)?
            .map_or(0, |a| a.nonce),
    };
    Ok(q(nonce))
}

pub(crate) fn get_code(ctx: &RpcContext, params: Params<'_>) -> RpcResult<Value> {
    let [a, b] = positional::<2>(&params)?;
    let (address, at) = (address_param(a)?, block_param(b)?);
    let state = ctx.reader(ctx.state_at(at)?)?;
    let code = match state.account(&address).map_err(internal)? {
        Some(acc) => state
            .code(&acc.code_hash)
            .map_err(internal)?
            .unwrap_or_default(),
        None => Bytes::new(),
    };
    Ok(serde_json::json!(code))
}

pub(crate) fn get_storage_at(ctx: &RpcContext, params: Params<'_>) -> RpcResult<Value> {
    let [a, s, b] = positional::<3>(&params)?;
    let address = address_param(a)?;
    let slot = match s {
        Some(Value::String(s)) => parse_slot(&s)?,
        _ => return Err(invalid_params("missing value for required argument 1")),
    };
    let state = ctx.reader(ctx.state_at(block_param(b)?)?)?;
    let value = state.storage(&address, &slot).map_err(internal)?;
    Ok(serde_json::json!(B256::from(value.to_be_bytes::<32>())))
}

/// `eth_getProof(address, storageKeys, block)` (EIP-1186): the account and each slot
/// with the trie nodes that prove them against the block's state root; the head's and
/// those of the blocks the undo records reach. Keys are echoed as given, values are quantities, as geth does.
pub(crate) fn get_proof(ctx: &RpcContext, params: Params<'_>) -> RpcResult<Value> {
    let [a, k, b] = positional::<3>(&params)?;
    let address = address_param(a)?;
    let keys: Vec<String> = match k {
        Some(Value::Array(list)) => list
            .into_iter()
            .map(|v| match v {
                Value::String(s) => Ok(s),
                _ => Err(invalid_params("storage keys must be hex strings")),
            })
            .collect::<RpcResult<_>>()?,
        None | Some(Value::Null) => Vec::new(),
        _ => return Err(invalid_params("storage keys must be an array")),
    };
    let slots = keys
        .iter()
        .map(|k| parse_slot(k))
        .collect::<RpcResult<Vec<B256>>>()?;
    let state = ctx.reader(ctx.state_at(block_param(b)?)?)?;
    let p = moat_blockchain::state_root::prove(&state, &address, &slots).map_err(internal)?;
    let hex_list = |nodes: &[Vec<u8>]| {
        Value::Array(
            nodes
                .iter()
                .map(|n| serde_json::json!(Bytes::copy_from_slice(n)))
                .collect(),
        )
    };
    // An absent account reads as zeros, both hashes included (as geth answers it).
    let account = p.account.unwrap_or_default();
    let storage: Vec<Value> = keys
        .iter()
        .zip(&p.storage)
        .map(|(key, s)| {
            // geth echoes a 32-byte key as given and any other as a quantity.
            let digits = key.trim_start_matches("0x").trim_start_matches("0X");
            let key = if digits.len().div_ceil(2) == 32 {
                key.clone()
            } else {
                q256(alloy_primitives::U256::from_be_bytes(
                    parse_slot(key).unwrap_or_default().0,
                ))
                .as_str()
                .unwrap_or_default()
                .to_string()
            };
            serde_json::json!({ "key": key, "value": q256(s.value), "proof": hex_list(&s.proof) })
        })
        .collect();
    Ok(serde_json::json!({
        "address": address,
        "accountProof": hex_list(&p.proof),
        "balance": q256(account.balance),
        "codeHash": account.code_hash,
        "nonce": q(account.nonce),
        "storageHash": account.storage_root,
        "storageProof": storage,
    }))
}

fn block_response(ctx: &RpcContext, hash: Option<B256>, full: bool) -> RpcResult<Value> {
    let Some(hash) = hash else {
        return Ok(Value::Null);
    };
    let Some(block) = ctx.block(&hash)? else {
        return Ok(Value::Null);
    };
    let senders = full.then(|| ctx.senders(&block));
    Ok(json::block_json(&block, senders.as_deref()))
}

pub(crate) fn get_block_by_number(ctx: &RpcContext, params: Params<'_>) -> RpcResult<Value> {
    let [n, f] = positional::<2>(&params)?;
    let n = n.ok_or_else(|| invalid_params("missing value for required argument 0"))?;
    let hash = ctx.resolve(parse_block_number(&n)?)?;
    block_response(ctx, hash, bool_param(f)?)
}

pub(crate) fn get_block_by_hash(ctx: &RpcContext, params: Params<'_>) -> RpcResult<Value> {
    let [h, f] = positional::<2>(&params)?;
    let hash = hash_param(h)?;
    let known = ctx
        .chain
        .store()
        .block_number(&hash)
        .map_err(internal)?
        .map(|_| hash);
    block_response(ctx, known, bool_param(f)?)
}

pub(crate) fn get_transaction_by_hash(ctx: &RpcContext, params: Params<'_>) -> RpcResult<Value> {
    let [h] = positional::<1>(&params)?;
    let hash = hash_param(h)?;
    // The chain first: a transaction just mined may still sit in the pool for a moment.
    if let Some(loc) = ctx.chain.store().tx_location(&hash).map_err(internal)?
        && let Some(block) = ctx.block(&loc.block_hash)?
        && let Some(tx) = block.transactions.get(loc.index as usize)
    {
        let from = ctx
            .pool
            .sender_cache()
            .get(&hash)
            .unwrap_or_else(|| tx.recover_sender().unwrap_or_default());
        let place = TxPlace {
            block_hash: loc.block_hash,
            block_number: loc.block_number,
            index: loc.index,
            base_fee: block.header.base_fee_per_gas,
            block_timestamp: block.header.timestamp,
        };
        return Ok(json::tx_json(tx, from, Some(place)));
    }
    Ok(match ctx.pool.get(&hash) {
        Some(ptx) => json::tx_json(ptx.tx.tx(), ptx.sender, None),
        None => Value::Null,
    })
}

pub(crate) fn get_transaction_receipt(ctx: &RpcContext, params: Params<'_>) -> RpcResult<Value> {
    let [h] = positional::<1>(&params)?;
    let hash = hash_param(h)?;
    receipt_of(ctx, hash)
}

/// The receipt of the mined transaction `hash` (JSON), or null.
pub(crate) fn receipt_of(ctx: &RpcContext, hash: B256) -> RpcResult<Value> {
    let Some(loc) = ctx.chain.store().tx_location(&hash).map_err(internal)? else {
        return Ok(Value::Null);
    };
    let Some(block) = ctx.block(&loc.block_hash)? else {
        return Ok(Value::Null);
    };
    let Some(receipts) = ctx.chain.receipts(&loc.block_hash).map_err(internal)? else {
        return Ok(Value::Null);
    };
    let index = loc.index as usize;
    let (Some(receipt), Some(tx)) = (receipts.get(index), block.transactions.get(index)) else {
        return Ok(Value::Null);
    };
    let prior = &receipts[..index];
    let from = ctx
        .pool
        .sender_cache()
        .get(&hash)
        .unwrap_or_else(|| tx.recover_sender().unwrap_or_default());
    let c = ReceiptContext {
        block: &block,
        index,
        from,
        prior_gas: prior.last().map_or(0, |r| r.cumulative_gas_used),
        prior_logs: prior.iter().map(|r| r.logs.len()).sum(),
        blob_gas_price: crate::state::block_blob_base_fee(ctx.chain.config(), &block.header),
    };
    Ok(json::receipt_json(receipt, &c))
}

/// Admits a transaction as local; a rejection is reported with code -32000 and the
/// pool's message, which uses geth's wording ("already known", "nonce too low", ...).
pub(crate) async fn send_raw_transaction(ctx: &RpcContext, params: Params<'_>) -> RpcResult<Value> {
    // The usual call, one 0x-prefixed hex string, is decoded straight from the request
    // text; anything else takes the general path, which words the errors.
    let fast = params
        .parse::<(&str,)>()
        .ok()
        .and_then(|(hex,)| hex.strip_prefix("0x"))
        .and_then(|digits| alloy_primitives::hex::decode(digits).ok());
    let bytes = match fast {
        Some(bytes) => Bytes::from(bytes),
        None => {
            let [raw] = positional::<1>(&params)?;
            let raw = raw.ok_or_else(|| invalid_params("missing value for required argument 0"))?;
            serde_json::from_value(raw)
                .map_err(|e| invalid_params(format!("invalid raw transaction: {e}")))?
        }
    };
    submit_raw(ctx, bytes)
        .await
        .map(|hash| serde_json::json!(hash))
}

/// geth's code for `eth_sendRawTransactionSync` giving up (`errCodeTxSyncTimeout`).
pub(crate) const TX_SYNC_TIMEOUT_CODE: i32 = 4;

/// `eth_sendRawTransactionSync` (EIP-7966): admits the transaction as
/// `eth_sendRawTransaction` does, then answers with its receipt once a block holds it.
/// The wait is the call's second parameter in milliseconds (capped at
/// [`crate::TxSyncTimeouts::max`]), else [`crate::TxSyncTimeouts::default`]; past it the
/// answer is geth's: code 4, "The transaction was added to the transaction pool but
/// wasn't processed in 20s", the hash as the error's data. The tx stays pooled.
pub(crate) async fn send_raw_transaction_sync(
    ctx: &RpcContext,
    params: Params<'_>,
) -> RpcResult<Value> {
    let [raw, timeout_ms] = positional::<2>(&params)?;
    let raw = raw.ok_or_else(|| invalid_params("missing value for required argument 0"))?;
    let bytes: Bytes = serde_json::from_value(raw)
        .map_err(|e| invalid_params(format!("invalid raw transaction: {e}")))?;
    let asked = match timeout_ms {
        None | Some(Value::Null) => None,
        Some(v) => Some(crate::params::parse_u64_lenient(&v)?),
    };
    let limits = ctx.tx_sync;
    let timeout = match asked {
        Some(ms) if ms > 0 => std::time::Duration::from_millis(ms).min(limits.max),
        _ => limits.default,
    };
    // Heads are watched before the tx goes in, so a block that takes it at once is seen.
    let mut heads = ctx.chain.subscribe_heads();
    let hash = submit_raw(ctx, bytes).await?;
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let receipt = receipt_of(ctx, hash)?;
        if !receipt.is_null() {
            return Ok(receipt);
        }
        match tokio::time::timeout_at(deadline, heads.changed()).await {
            Ok(Ok(())) => continue,
            // The chain is gone (shutting down): no receipt will come.
            Ok(Err(_)) => return Err(server_error("the node is shutting down")),
            Err(_) => {
                return Err(jsonrpsee::types::ErrorObjectOwned::owned(
                    TX_SYNC_TIMEOUT_CODE,
                    format!(
                        "The transaction was added to the transaction pool but wasn't processed in {}",
                        go_duration(timeout)
                    ),
                    Some(hash),
                ));
            }
        }
    }
}

/// A duration as Go prints it (`20s`, `1.5s`, `500ms`), for geth's wording.
fn go_duration(d: std::time::Duration) -> String {
    let ms = d.as_millis();
    if ms < 1_000 {
        format!("{ms}ms")
    } else if ms.is_multiple_of(1_000) {
        format!("{}s", ms / 1_000)
    } else {
        format!("{}s", ms as f64 / 1_000.0)
    }
}

/// Admits the envelope `bytes` as local and answers with its hash (the handler's part
/// after the parameter is decoded; [`crate::raw_tx`] calls it too).
pub(crate) async fn submit_raw(ctx: &RpcContext, bytes: Bytes) -> RpcResult<B256> {
    match ctx.pool.submit_local(TxInput::Raw(bytes)).await {
        Ok(added) => {
            // The dev node with --dev.period 0 answers once the tx is in a block.
            crate::dev_methods::automine(ctx).await;
            Ok(added.hash)
        }
        Err(rejection) => Err(server_error(rejection.to_string())),
    }
}
