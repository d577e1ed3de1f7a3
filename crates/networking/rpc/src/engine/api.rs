//! The engine method table and its handlers.

use super::EngineContext;
use super::errors::{
    invalid_attributes, invalid_forkchoice_state, invalid_params, too_large, unknown_payload,
    unsupported_fork,
};
use super::types::{
    self, NewPayload, Status, Version, b256, envelope_json, hashes, hex0x, object, opt, quantity,
    req,
};
use crate::count;
use crate::params::{RpcResult, internal};
use alloy_primitives::{Address, B256};
use jsonrpsee::RpcModule;
use jsonrpsee::server::RegisterMethodError;
use jsonrpsee::types::Params;
use moat_blockchain::chain::{ChainError, ImportOutcome};
use moat_blockchain::payload::PayloadAttributes;
use moat_common::block::{Block, Header};
use moat_common::config::Fork;
use moat_common::transaction::SidecarVersion;
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// Most versioned hashes one getBlobs call may ask for (the spec's limit).
const MAX_BLOB_REQUEST: usize = 128;

/// Most bodies one getPayloadBodies call may ask for (geth's limit; the spec asks for at
/// least 32).
const MAX_BODIES_REQUEST: usize = 1024;

/// Every method served, as `engine_exchangeCapabilities` reports them.
const CAPABILITIES: &[&str] = &[
    "engine_forkchoiceUpdatedV1",
    "engine_forkchoiceUpdatedV2",
    "engine_forkchoiceUpdatedV3",
    "engine_getPayloadV1",
    "engine_getPayloadV2",
    "engine_getPayloadV3",
    "engine_getPayloadV4",
    "engine_getPayloadV5",
    "engine_newPayloadV1",
    "engine_newPayloadV2",
    "engine_newPayloadV3",
    "engine_newPayloadV4",
    "engine_getBlobsV1",
    "engine_getBlobsV2",
    "engine_getBlobsV3",
    "engine_getBlobsV4",
    "engine_hasBlobs",
    "engine_getInclusionListV1",
    "engine_getClientVersionV1",
    "engine_getPayloadBodiesByHashV1",
    "engine_getPayloadBodiesByRangeV1",
];

/// Positional parameters; absent params read as none.
fn args(params: &Params<'_>) -> RpcResult<Vec<Value>> {
    if params.as_str().is_none() {
        return Ok(Vec::new());
    }
    if params.is_object() {
        return Err(invalid_params("engine methods take positional params"));
    }
    params.parse()
}

fn chain_err(e: ChainError) -> jsonrpsee::types::ErrorObjectOwned {
    internal(e)
}

fn join_err(e: tokio::task::JoinError) -> jsonrpsee::types::ErrorObjectOwned {
    internal(e)
}

impl EngineContext {
    /// Hands a block the chain does not hold to the syncer, if the node runs one.
    fn request_sync(&self, hash: B256) {
        if let Some(sync) = &self.sync {
            metrics::counter!("moat_engine_sync_requests_total").increment(1);
            sync.sync_to(hash);
        }
    }

    /// Whether the syncer refused `hash` (a block of its chain failed validation): its
    /// latest valid hash and why, remembered with the engine's own rejections.
    fn sync_verdict(&self, hash: B256) -> Option<(Option<B256>, String)> {
        let (lvh, why) = self.sync.as_ref()?.invalid(hash)?;
        self.shared.invalid.lock().insert(hash, lvh);
        metrics::counter!("moat_engine_invalid_payloads_total").increment(1);
        Some((lvh, why))
    }

    /// The consensus client's head is one the chain holds: a sync towards an older
    /// target must not carry the chain away from it (the syncer sees it canonical and
    /// stops).
    fn head_is_known(&self, head: B256) {
        if let Some(sync) = &self.sync {
            sync.sync_to(head);
        }
    }

    /// newPayload after parsing: build the block, then import it (blocking).
    fn import_payload(&self, payload: NewPayload) -> RpcResult<(Status, bool)> {
        let parent_hash = payload.header.parent_hash;
        // The block is rebuilt from every field of the call and must hash to the claimed
        // hash before anything else is believed: a known `blockHash` proves nothing about
        // the fields that came with it.
        let block = match payload.into_block() {
            Ok(b) => b,
            // No latest valid hash: the block is not what it claims to be.
            Err(e) => {
                metrics::counter!("moat_engine_invalid_payloads_total").increment(1);
                return Ok((Status::Invalid(None, e), false));
            }
        };
        // A block we hold and have executed is VALID without executing it again:
        // canonical now, or with receipts from an earlier stint on the canonical chain.
        // A side block stored unexecuted is not.
        let store = self.chain.store();
        if self.chain.is_canonical(&block.hash).map_err(chain_err)?
            || store.receipts_rlp(&block.hash).map_err(internal)?.is_some()
        {
            return Ok((Status::Valid(block.hash), false));
        }
        let hash = block.hash;
        {
            let mut invalid = self.shared.invalid.lock();
            if let Some(lvh) = invalid.get(&hash).or_else(|| invalid.get(&parent_hash)) {
                // A child of a rejected block is rejected too, and remembered as such.
                invalid.insert(hash, lvh);
                return Ok((
                    Status::Invalid(lvh, "links to previously rejected block".into()),
                    false,
                ));
            }
        }
        let Some(parent) = self.chain.header(&parent_hash).map_err(chain_err)? else {
            if let Some((lvh, why)) = self.sync_verdict(parent_hash) {
                self.shared.invalid.lock().insert(hash, lvh);
                return Ok((Status::Invalid(lvh, why), false));
            }
            // Peers may hold the parent; the block itself comes again once it is here.
            self.request_sync(parent_hash);
            return Ok((Status::Syncing, false));
        };
        match self.chain.import(&block) {
            Ok(ImportOutcome::Imported { .. }) => Ok((Status::Valid(hash), true)),
            Ok(ImportOutcome::AlreadyKnown) => Ok((Status::Valid(hash), false)),
            Err(ChainError::UnknownParent { .. }) => {
                self.request_sync(parent_hash);
                Ok((Status::Syncing, false))
            }
            // Off our head: kept, and executed if a forkchoiceUpdated makes it head.
            Err(ChainError::NotOnHead { .. }) => match self.chain.store_side_block(&block) {
                Ok(()) => Ok((Status::Accepted, false)),
                Err(
                    e @ (ChainError::Mismatch { .. }
                    | ChainError::Header { .. }
                    | ChainError::Invalid { .. }),
                ) => {
                    self.shared.invalid.lock().insert(hash, Some(parent_hash));
                    Ok((Status::Invalid(Some(parent_hash), e.to_string()), false))
                }
                Err(e) => Err(chain_err(e)),
            },
            Err(
                e @ (ChainError::Mismatch { .. }
                | ChainError::Header { .. }
                | ChainError::Invalid { .. }),
            ) => {
                // A PoW parent has no valid post-merge ancestor to name: the zero hash.
                let lvh = if parent.difficulty.is_zero() {
                    parent_hash
                } else {
                    B256::ZERO
                };
                self.shared.invalid.lock().insert(hash, Some(lvh));
                metrics::counter!("moat_engine_invalid_payloads_total").increment(1);
                Ok((Status::Invalid(Some(lvh), e.to_string()), false))
            }
            Err(e) => Err(chain_err(e)),
        }
    }

    /// forkchoiceUpdated's head checks (blocking). `Ok(Err(status))` ends the call with
    /// that status and no payload; `Ok(Ok(..))` is the current head.
    fn forkchoice(
        &self,
        head: B256,
        safe: B256,
        finalized: B256,
    ) -> RpcResult<Result<Forkchoice, Status>> {
        if head.is_zero() {
            return Ok(Err(Status::Invalid(
                None,
                "forkchoice requested update to zero hash".into(),
            )));
        }
        if let Some(lvh) = self.shared.invalid.lock().get(&head) {
            return Ok(Err(Status::Invalid(
                lvh,
                "links to previously rejected block".into(),
            )));
        }
        let Some(header) = self.chain.header(&head).map_err(chain_err)? else {
            if let Some((lvh, why)) = self.sync_verdict(head) {
                return Ok(Err(Status::Invalid(lvh, why)));
            }
            self.request_sync(head);
            return Ok(Err(Status::Syncing));
        };
        if !self.chain.is_canonical(&head).map_err(chain_err)? {
            // Known but off the canonical chain: reorg to it.
            match self.chain.set_head(head) {
                Ok(change) => {
                    tracing::info!(
                        removed = change.removed.len(),
                        added = change.added.len(),
                        head = %head,
                        "chain reorganised"
                    );
                    if !change.removed.is_empty() {
                        metrics::counter!("moat_engine_reorgs_total").increment(1);
                    }
                }
                Err(
                    e @ (ChainError::Mismatch { hash, .. }
                    | ChainError::Header { hash, .. }
                    | ChainError::Invalid { hash, .. }),
                ) => {
                    let lvh = self
                        .chain
                        .header(&hash)
                        .map_err(chain_err)?
                        .map(|h| h.parent_hash);
                    let mut invalid = self.shared.invalid.lock();
                    invalid.insert(hash, lvh);
                    invalid.insert(head, lvh);
                    metrics::counter!("moat_engine_invalid_payloads_total").increment(1);
                    return Ok(Err(Status::Invalid(lvh, e.to_string())));
                }
                Err(ChainError::UnknownBlock(_)) => {
                    // A block of its branch is missing: peers may have it.
                    self.request_sync(head);
                    return Ok(Err(Status::Syncing));
                }
                Err(ChainError::ReorgTooDeep { .. }) => return Ok(Err(Status::Syncing)),
                Err(e @ ChainError::BelowFinalized { .. }) => {
                    return Err(invalid_forkchoice_state(e.to_string()));
                }
                Err(e) => return Err(chain_err(e)),
            }
        }
        let (_, current) = self.chain.head().map_err(chain_err)?;
        if current != head {
            // A canonical ancestor: the CL is catching up; keep our head, as geth does.
            return Ok(Err(Status::Valid(head)));
        }
        // The head is ours: the safe and finalized blocks are kept for their tags and as
        // the floor of later reorgs; a block off the head's chain is refused (engine
        // spec). An old head above leaves them as they were, as geth does.
        // Refused marks do not undo a reorg made above: the pool still follows it.
        let refused = match self.chain.set_marks(safe, finalized) {
            Ok(()) => None,
            Err(e @ ChainError::NotCanonical { .. }) => {
                Some(invalid_forkchoice_state(e.to_string()))
            }
            Err(e) => return Err(chain_err(e)),
        };
        Ok(Ok(Forkchoice { header, refused }))
    }
}

/// What forkchoiceUpdated's head checks found for a head that is ours: its header, and
/// the error to answer if the safe or finalized block was refused (after the pool has
/// followed: a reorg made is not undone).
struct Forkchoice {
    header: Header,
    refused: Option<jsonrpsee::types::ErrorObjectOwned>,
}

/// Parses payload attributes of a forkchoiceUpdated `version` (2 or 3).
pub(crate) fn parse_attributes(v: &Value, version: Version) -> RpcResult<PayloadAttributes> {
    let o = object(v, "payloadAttributes")?;
    let withdrawals = opt(o, "withdrawals").map(types::withdrawals).transpose()?;
    let beacon_root = opt(o, "parentBeaconBlockRoot")
        .map(|r| b256(r, "parentBeaconBlockRoot"))
        .transpose()?;
    if version == Version::V1 && (withdrawals.is_some() || beacon_root.is_some()) {
        return Err(invalid_params(
            "withdrawals and beacon root not supported in V1",
        ));
    }
    if version >= Version::V3 {
        if withdrawals.is_none() {
            return Err(invalid_attributes("missing withdrawals"));
        }
        if beacon_root.is_none() {
            return Err(invalid_attributes("missing beacon root"));
        }
    } else if beacon_root.is_some() {
        return Err(invalid_attributes(
            "parentBeaconBlockRoot not supported in V2",
        ));
    }
    Ok(PayloadAttributes {
        timestamp: quantity(req(o, "timestamp")?, "timestamp")?,
        prev_randao: b256(req(o, "prevRandao")?, "prevRandao")?,
        suggested_fee_recipient: {
            let raw = types::bytes(req(o, "suggestedFeeRecipient")?, "suggestedFeeRecipient")?;
            let raw: [u8; 20] = raw
                .try_into()
                .map_err(|_| invalid_params("invalid value for 'suggestedFeeRecipient'"))?;
            Address::from(raw)
        },
        withdrawals,
        parent_beacon_block_root: beacon_root,
    })
}

async fn forkchoice_updated(
    ctx: Arc<EngineContext>,
    params: Params<'static>,
    version: Version,
) -> RpcResult<Value> {
    let args = args(&params)?;
    if args.is_empty() || args.len() > 2 {
        return Err(invalid_params(
            "expected forkchoiceState and payloadAttributes",
        ));
    }
    let state = object(&args[0], "forkchoiceState")?;
    let head = b256(req(state, "headBlockHash")?, "headBlockHash")?;
    let safe = b256(req(state, "safeBlockHash")?, "safeBlockHash")?;
    let finalized = b256(req(state, "finalizedBlockHash")?, "finalizedBlockHash")?;
    let attrs = match args.get(1).filter(|a| !a.is_null()) {
        Some(a) => Some(parse_attributes(a, version)?),
        None => None,
    };

    let _order = ctx.shared.order.lock().await;
    let c = Arc::clone(&ctx);
    let outcome = ctx
        .blocking(move || c.forkchoice(head, safe, finalized))
        .await
        .map_err(join_err)??;
    let Forkchoice { header, refused } = match outcome {
        Ok(found) => found,
        Err(status) => {
            if matches!(status, Status::Valid(_)) {
                ctx.synced.store(true, Ordering::Release);
                ctx.head_is_known(head);
            }
            return Ok(json!({ "payloadStatus": status.json(), "payloadId": null }));
        }
    };
    ctx.synced.store(true, Ordering::Release);
    ctx.head_is_known(head);
    // The pool follows the head (its upkeep task) before a payload is built on it.
    ctx.maintainer.caught_up().await;
    if let Some(refused) = refused {
        return Err(refused);
    }

    let mut payload_id = Value::Null;
    if let Some(attrs) = attrs {
        if attrs.timestamp <= header.timestamp {
            return Err(invalid_attributes(format!(
                "timestamp {} not after the head's {}",
                attrs.timestamp, header.timestamp
            )));
        }
        let fork = ctx
            .chain
            .config()
            .fork_at(header.number + 1, attrs.timestamp);
        let fork_ok = match version {
            Version::V1 => fork < Fork::Shanghai,
            Version::V2 => fork < Fork::Cancun,
            Version::V3 | Version::V4 | Version::V5 => fork >= Fork::Cancun,
        };
        if !fork_ok {
            return Err(if version == Version::V1 {
                // As geth: V1 has no unsupported-fork error; its params are wrong.
                invalid_params("forkchoiceUpdatedV1 called after Shanghai")
            } else {
                unsupported_fork()
            });
        }
        if version == Version::V2 && (fork >= Fork::Shanghai) != attrs.withdrawals.is_some() {
            return Err(invalid_attributes(
                "withdrawals must be given exactly from Shanghai",
            ));
        }
        let payloads = ctx.payloads.clone();
        let id = tokio::task::spawn_blocking(move || payloads.start(head, attrs))
            .await
            .map_err(join_err)?
            .map_err(|e| invalid_attributes(e.to_string()))?;
        payload_id = hex0x(id);
    }
    Ok(json!({
        "payloadStatus": Status::Valid(head).json(),
        "payloadId": payload_id,
    }))
}

async fn new_payload(
    ctx: Arc<EngineContext>,
    params: Params<'static>,
    version: Version,
) -> RpcResult<Value> {
    let args = args(&params)?;
    let payload = types::parse_new_payload(&args, version, ctx.chain.config())?;
    let gas_used = payload.header.gas_used;
    let started = std::time::Instant::now();
    let _order = ctx.shared.order.lock().await;
    let c = Arc::clone(&ctx);
    let (status, executed) = ctx
        .blocking(move || c.import_payload(payload))
        .await
        .map_err(join_err)??;
    if executed {
        // Answered once the pool has dropped what the block mined.
        let waited = std::time::Instant::now();
        ctx.maintainer.caught_up().await;
        metrics::histogram!("moat_block_import_seconds", "phase" => "pool")
            .record(waited.elapsed());
    }
    record_new_payload(&status, executed, gas_used, started.elapsed());
    Ok(status.json())
}

/// Prometheus: each newPayload's time by status (`moat_engine_new_payload_seconds`, a
/// histogram), and for a block executed, its gas over its time
/// (`moat_engine_new_payload_gas_per_second`) and the gas executed so far.
fn record_new_payload(status: &Status, executed: bool, gas: u64, took: std::time::Duration) {
    let label = match status {
        Status::Valid(_) => "VALID",
        Status::Invalid(..) => "INVALID",
        Status::Syncing => "SYNCING",
        Status::Accepted => "ACCEPTED",
    };
    metrics::histogram!("moat_engine_new_payload_seconds", "status" => label)
        .record(took.as_secs_f64());
    if executed {
        metrics::gauge!("moat_engine_new_payload_gas_per_second")
            .set(gas as f64 / took.as_secs_f64().max(1e-9));
        metrics::counter!("moat_engine_new_payload_gas_total").increment(gas);
    }
}

fn parse_payload_id(args: &[Value]) -> RpcResult<[u8; 8]> {
    let [id] = args else {
        return Err(invalid_params("expected one payload id"));
    };
    types::bytes(id, "payloadId")?
        .try_into()
        .map_err(|_| invalid_params("payload id must be 8 bytes"))
}

async fn get_payload(
    ctx: Arc<EngineContext>,
    params: Params<'static>,
    version: Version,
) -> RpcResult<Value> {
    let started = std::time::Instant::now();
    let id = parse_payload_id(&args(&params)?)?;
    let built = ctx.payloads.get(id).await.ok_or_else(unknown_payload)?;
    // Prometheus: the answer's time (waiting for the build job's best block included).
    metrics::histogram!("moat_engine_get_payload_seconds").record(started.elapsed());
    metrics::gauge!("moat_engine_payload_txs").set(built.block.transactions.len() as f64);
    let h = &built.block.header;
    let fork = ctx.chain.config().fork_at(h.number, h.timestamp);
    let fork_ok = match version {
        Version::V1 => fork < Fork::Shanghai,
        Version::V2 => fork < Fork::Cancun,
        Version::V3 => fork == Fork::Cancun,
        Version::V4 => fork == Fork::Prague,
        Version::V5 => fork >= Fork::Osaka,
    };
    if !fork_ok {
        return Err(unsupported_fork());
    }
    Ok(envelope_json(&built, version))
}

/// Which getBlobs a call is: what it answers with, and for what is missing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum GetBlobs {
    /// Cancun/Prague: each blob with its version-0 proof, null where unknown or held only
    /// with cell proofs.
    V1,
    /// Osaka: each blob with its 128 cell proofs, or null for the whole answer if any is
    /// missing.
    V2,
    /// Osaka (execution-apis osaka.md): as V2, but null only in the places of the blobs
    /// missing (a partial answer); null for the whole answer before Osaka.
    V3,
}

/// The versioned hashes a getBlobs or hasBlobs call asks for, within the per-call limit.
fn wanted_hashes(params: &Params<'_>) -> RpcResult<Vec<B256>> {
    let args = args(params)?;
    let [list] = &args[..] else {
        return Err(invalid_params("expected one list of versioned hashes"));
    };
    if list.as_array().is_some_and(|l| l.len() > MAX_BLOB_REQUEST) {
        return Err(too_large(format!("more than {MAX_BLOB_REQUEST} blobs")));
    }
    hashes(list, "blobVersionedHashes")
}

/// Whether the head is at Osaka or later (the cell-proof getBlobs answer from there).
fn head_at_osaka(ctx: &EngineContext) -> RpcResult<bool> {
    let head = ctx.chain.head_header().map_err(chain_err)?;
    Ok(ctx.chain.config().fork_at(head.number, head.timestamp) >= Fork::Osaka)
}

/// getBlobsV1, V2 and V3 ([`GetBlobs`]).
fn get_blobs(ctx: &EngineContext, params: Params<'_>, which: GetBlobs) -> RpcResult<Value> {
    let wanted = wanted_hashes(&params)?;
    if which == GetBlobs::V3 && !head_at_osaka(ctx)? {
        return Ok(Value::Null);
    }
    let mut out = Vec::with_capacity(wanted.len());
    for vh in &wanted {
        let found = ctx.pool.blob_by_versioned_hash(vh).and_then(|(bundle, i)| {
            let blob = bundle.blobs.get(i)?;
            match (which, bundle.version) {
                (GetBlobs::V1, SidecarVersion::V0) => {
                    let proof = bundle.proofs.get(i)?;
                    Some(json!({ "blob": hex0x(&blob.0[..]), "proof": hex0x(proof) }))
                }
                (GetBlobs::V2 | GetBlobs::V3, SidecarVersion::V1) => {
                    let per = SidecarVersion::V1.proofs_per_blob();
                    let proofs = bundle.proofs.get(i * per..(i + 1) * per)?;
                    let proofs: Vec<Value> = proofs.iter().map(hex0x).collect();
                    Some(json!({ "blob": hex0x(&blob.0[..]), "proofs": proofs }))
                }
                (GetBlobs::V1, SidecarVersion::V1)
                | (GetBlobs::V2 | GetBlobs::V3, SidecarVersion::V0) => None,
            }
        });
        match (found, which) {
            (Some(v), _) => out.push(v),
            (None, GetBlobs::V2) => return Ok(Value::Null),
            (None, GetBlobs::V1 | GetBlobs::V3) => out.push(Value::Null),
        }
    }
    metrics::counter!("moat_engine_blobs_served_total")
        .increment(out.iter().filter(|v| !v.is_null()).count() as u64);
    Ok(Value::Array(out))
}

/// engine_getBlobsV4 (execution-apis amsterdam.md; go-ethereum serves it from Osaka):
/// versioned hashes and a 16-byte cell bitarray (bit `i` of byte `i / 8`, least
/// significant first); per hash, `{blob_cells, proofs}` with the cells at the set
/// indices and their cell proofs, or `null` for a blob the pool lacks (for a blob held
/// sampled, the cells outside its custody and their proofs are `null`). `null` before
/// Osaka; more than 128 hashes is too large a request. Extension cells are computed.
fn get_blobs_v4(ctx: &EngineContext, params: Params<'_>) -> RpcResult<Value> {
    let args = args(&params)?;
    let [list, bits] = &args[..] else {
        return Err(invalid_params(
            "expected versioned hashes and a cell bitarray",
        ));
    };
    if list.as_array().is_some_and(|l| l.len() > MAX_BLOB_REQUEST) {
        return Err(too_large(format!("more than {MAX_BLOB_REQUEST} blobs")));
    }
    let wanted = hashes(list, "versioned_blob_hashes")?;
    let bits = bits
        .as_str()
        .and_then(|s| alloy_primitives::hex::decode(s).ok())
        .filter(|b| b.len() == 16)
        .ok_or_else(|| invalid_params("indices_bitarray: 16 bytes of hex expected"))?;
    if !head_at_osaka(ctx)? {
        return Ok(Value::Null);
    }
    let indices: Vec<usize> = (0..128)
        .filter(|i| bits[i / 8] & (1 << (i % 8)) != 0)
        .collect();
    let per = SidecarVersion::V1.proofs_per_blob();
    let mut out = Vec::with_capacity(wanted.len());
    for vh in &wanted {
        let found = ctx.pool.blob_by_versioned_hash(vh).and_then(|(bundle, i)| {
            if bundle.version != SidecarVersion::V1 {
                return None;
            }
            let proofs = bundle.proofs.get(i * per..(i + 1) * per)?;
            // A sampled blob (EIP-8070) gives the cells of its custody; the others are
            // `null`, their proofs too.
            let cells: Vec<Option<moat_crypto::kzg::Cell>> = if bundle.is_sampled() {
                indices
                    .iter()
                    .map(|c| bundle.cells(i, &[*c]).map(|one| one[0]))
                    .collect()
            } else {
                bundle.cells(i, &indices)?.into_iter().map(Some).collect()
            };
            let proofs: Vec<Value> = indices
                .iter()
                .zip(&cells)
                .map(|(&c, cell)| cell.map_or(Value::Null, |_| hex0x(proofs[c])))
                .collect();
            let cells: Vec<Value> = cells
                .iter()
                .map(|c| c.as_ref().map_or(Value::Null, hex0x))
                .collect();
            Some(json!({ "blob_cells": cells, "proofs": proofs }))
        });
        out.push(found.unwrap_or(Value::Null));
    }
    metrics::counter!("moat_engine_blobs_served_total")
        .increment(out.iter().filter(|v| !v.is_null()).count() as u64);
    Ok(Value::Array(out))
}

/// engine_hasBlobs (as go-ethereum serves it): for each versioned hash, whether the pool
/// holds its blob with the sidecar version the head's fork uses, so a consensus client
/// can ask before it pulls the blobs themselves.
fn has_blobs(ctx: &EngineContext, params: Params<'_>) -> RpcResult<Value> {
    let wanted = wanted_hashes(&params)?;
    let version = if head_at_osaka(ctx)? {
        SidecarVersion::V1
    } else {
        SidecarVersion::V0
    };
    let found: Vec<bool> = wanted
        .iter()
        .map(|vh| {
            ctx.pool
                .blob_by_versioned_hash(vh)
                .is_some_and(|(bundle, _)| bundle.version == version && !bundle.is_sampled())
        })
        .collect();
    Ok(json!(found))
}

/// engine_getInclusionListV1 (EIP-7805, execution-apis `bogota.md`): no parameters; the
/// 2718 envelopes of the list the pool proposes for the next block
/// ([`moat_mempool::inclusion`]), at most `MAX_BYTES_PER_INCLUSION_LIST` of RLP, no blob
/// txs. Served whatever the head's fork: a consensus client asks for it only once the
/// fork that brings inclusion lists is active.
fn inclusion_list(ctx: &EngineContext, params: Params<'_>) -> RpcResult<Value> {
    if !args(&params)?.is_empty() {
        return Err(invalid_params(
            "engine_getInclusionListV1 takes no parameters",
        ));
    }
    let list = ctx
        .pool
        .inclusion_list(moat_mempool::inclusion::MAX_BYTES_PER_INCLUSION_LIST);
    metrics::counter!("moat_engine_inclusion_list_txs_total").increment(list.len() as u64);
    Ok(json!(list.iter().map(hex0x).collect::<Vec<_>>()))
}

/// One block's body as getPayloadBodies answers it: its transactions (2718 bytes) and,
/// from Shanghai on, its withdrawals (`null` before).
fn body_json(block: &Block) -> Value {
    json!({
        "transactions": block
            .transactions
            .iter()
            .map(|tx| hex0x(tx.encoded_2718()))
            .collect::<Vec<_>>(),
        "withdrawals": block
            .withdrawals
            .as_deref()
            .map_or(Value::Null, crate::json::withdrawals_json),
    })
}

/// getPayloadBodiesByHashV1: a body per hash, `null` for a block not held.
fn bodies_by_hash(ctx: &EngineContext, params: Params<'_>) -> RpcResult<Value> {
    let args = args(&params)?;
    let [list] = &args[..] else {
        return Err(invalid_params("expected one list of block hashes"));
    };
    if list
        .as_array()
        .is_some_and(|l| l.len() > MAX_BODIES_REQUEST)
    {
        return Err(too_large(format!("more than {MAX_BODIES_REQUEST} bodies")));
    }
    let wanted = hashes(list, "blockHashes")?;
    let mut out = Vec::with_capacity(wanted.len());
    for hash in &wanted {
        let block = ctx.chain.block(hash).map_err(internal)?;
        out.push(block.as_ref().map_or(Value::Null, body_json));
    }
    Ok(Value::Array(out))
}

/// getPayloadBodiesByRangeV1: the bodies of canonical blocks `start..start + count`,
/// cut at the head (no trailing nulls), `null` for one not held.
fn bodies_by_range(ctx: &EngineContext, params: Params<'_>) -> RpcResult<Value> {
    let args = args(&params)?;
    let [start, count] = &args[..] else {
        return Err(invalid_params("expected start and count"));
    };
    let (start, count) = (quantity(start, "start")?, quantity(count, "count")?);
    if start == 0 || count == 0 {
        return Err(invalid_params("start and count must be at least 1"));
    }
    if count > MAX_BODIES_REQUEST as u64 {
        return Err(too_large(format!("more than {MAX_BODIES_REQUEST} bodies")));
    }
    let (head, _) = ctx.chain.head().map_err(internal)?;
    let last = start.saturating_add(count - 1).min(head);
    let mut out = Vec::new();
    for n in start..=last {
        let block = match ctx.chain.store().canonical_hash(n).map_err(internal)? {
            Some(hash) => ctx.chain.block(&hash).map_err(internal)?,
            None => None,
        };
        out.push(block.as_ref().map_or(Value::Null, body_json));
    }
    Ok(Value::Array(out))
}

fn client_version() -> Value {
    json!([{
        "code": "MO",
        "name": "moat",
        "version": env!("CARGO_PKG_VERSION"),
        "commit": "0x00000000",
    }])
}

/// The method table.
pub(super) fn module(ctx: EngineContext) -> Result<RpcModule<EngineContext>, RegisterMethodError> {
    let mut m = RpcModule::new(ctx);
    m.register_method("engine_exchangeCapabilities", |params, _, _| {
        count("engine_exchangeCapabilities");
        // The CL's list is required by the spec, though what it holds changes nothing.
        let args = args(&params)?;
        match args.first() {
            Some(Value::Array(_)) => RpcResult::Ok(json!(CAPABILITIES)),
            _ => Err(invalid_params("expected a list of method names")),
        }
    })?;
    m.register_method("engine_getClientVersionV1", |_, _, _| {
        count("engine_getClientVersionV1");
        RpcResult::Ok(client_version())
    })?;
    m.register_method("engine_getBlobsV1", |params, ctx, _| {
        count("engine_getBlobsV1");
        get_blobs(ctx, params, GetBlobs::V1)
    })?;
    m.register_method("engine_getBlobsV2", |params, ctx, _| {
        count("engine_getBlobsV2");
        get_blobs(ctx, params, GetBlobs::V2)
    })?;
    m.register_blocking_method("engine_getBlobsV3", |params, ctx, _| {
        count("engine_getBlobsV3");
        get_blobs(&ctx, params, GetBlobs::V3)
    })?;
    m.register_blocking_method("engine_getBlobsV4", |params, ctx, _| {
        count("engine_getBlobsV4");
        get_blobs_v4(&ctx, params)
    })?;
    m.register_blocking_method("engine_hasBlobs", |params, ctx, _| {
        count("engine_hasBlobs");
        has_blobs(&ctx, params)
    })?;
    m.register_blocking_method("engine_getInclusionListV1", |params, ctx, _| {
        count("engine_getInclusionListV1");
        inclusion_list(&ctx, params)
    })?;
    m.register_blocking_method("engine_getPayloadBodiesByHashV1", |params, ctx, _| {
        count("engine_getPayloadBodiesByHashV1");
        bodies_by_hash(&ctx, params)
    })?;
    m.register_blocking_method("engine_getPayloadBodiesByRangeV1", |params, ctx, _| {
        count("engine_getPayloadBodiesByRangeV1");
        bodies_by_range(&ctx, params)
    })?;
    for (name, version) in [
        ("engine_forkchoiceUpdatedV1", Version::V1),
        ("engine_forkchoiceUpdatedV2", Version::V2),
        ("engine_forkchoiceUpdatedV3", Version::V3),
    ] {
        m.register_async_method(name, move |params, ctx, _| async move {
            count(name);
            let started = std::time::Instant::now();
            let answer = forkchoice_updated(ctx, params, version).await;
            metrics::histogram!("moat_engine_forkchoice_updated_seconds").record(started.elapsed());
            answer
        })?;
    }
    for (name, version) in [
        ("engine_newPayloadV1", Version::V1),
        ("engine_newPayloadV2", Version::V2),
        ("engine_newPayloadV3", Version::V3),
        ("engine_newPayloadV4", Version::V4),
    ] {
        m.register_async_method(name, move |params, ctx, _| async move {
            count(name);
            new_payload(ctx, params, version).await
        })?;
    }
    for (name, version) in [
        ("engine_getPayloadV1", Version::V1),
        ("engine_getPayloadV2", Version::V2),
        ("engine_getPayloadV3", Version::V3),
        ("engine_getPayloadV4", Version::V4),
        ("engine_getPayloadV5", Version::V5),
    ] {
        m.register_async_method(name, move |params, ctx, _| async move {
            count(name);
            get_payload(ctx, params, version).await
        })?;
    }
    Ok(m)
}
