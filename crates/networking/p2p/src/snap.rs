//! snap/1: the state snapshot protocol, served beside eth.
//!
//! - The messages: `GetAccountRange`/`AccountRange`, `GetStorageRanges`/`StorageRanges`,
//!   `GetByteCodes`/`ByteCodes`, `GetTrieNodes`/`TrieNodes` ([`SnapMessage`]), with typed
//!   decode errors. Accounts travel in the slim form ([`slim_account`], [`full_account`]).
//! - The answers, from the tries of any of the last [`SERVED_ROOTS`] canonical state
//!   roots: the head's straight from the store, older ones through the undo records
//!   ([`moat_blockchain::history`]), whose nodes are the trie as it was. Ranges are
//!   walked in the trie (the flat tables are keyed by address, not by hashed key) and come
//!   with the boundary proofs of [`moat_trie::range`]. A root not served gets an empty
//!   answer, never a disconnect.
//! - Limits as go-ethereum's: an answer stops growing past the request's byte budget,
//!   capped at [`SOFT_RESPONSE_LIMIT`]; at most [`MAX_CODE_LOOKUPS`] codes and
//!   [`MAX_TRIE_NODE_LOOKUPS`] trie-node reads; and [`TIME_BUDGET`] per request, after
//!   which what was gathered (with its proof) is sent.

use crate::serve::SOFT_RESPONSE_LIMIT;
use alloy_primitives::{B256, Bytes, KECCAK256_EMPTY};
use alloy_rlp::Encodable;
use moat_blockchain::chain::Chain;
use moat_blockchain::history::StateAtBlock;
use moat_common::rlp::{self, Fields, RlpError};
use moat_trie::{EMPTY_ROOT, NodeSource, TrieError, range};
use parking_lot::Mutex;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The snap version spoken.
pub const SNAP1: u64 = 1;
/// Message ids snap/1 uses after its offset.
pub const PROTOCOL_LENGTH: u64 = 8;

pub const GET_ACCOUNT_RANGE: u64 = 0x00;
pub const ACCOUNT_RANGE: u64 = 0x01;
pub const GET_STORAGE_RANGES: u64 = 0x02;
pub const STORAGE_RANGES: u64 = 0x03;
pub const GET_BYTE_CODES: u64 = 0x04;
pub const BYTE_CODES: u64 = 0x05;
pub const GET_TRIE_NODES: u64 = 0x06;
pub const TRIE_NODES: u64 = 0x07;

/// How many recent canonical state roots are served (the head and the 127 before it).
pub const SERVED_ROOTS: u64 = 128;
/// Most codes looked up for one request.
pub const MAX_CODE_LOOKUPS: usize = 1024;
/// Most trie-node reads for one `GetTrieNodes`.
pub const MAX_TRIE_NODE_LOOKUPS: usize = 1024;
/// How long one request may take; past it the answer is sent as it stands.
pub const TIME_BUDGET: Duration = Duration::from_secs(5);
/// How far a storage answer may pass the byte budget to finish an account's slots
/// (go-ethereum's `stateLookupSlack`): a tenth.
const STORAGE_SLACK_DIVISOR: u64 = 10;

/// A snap/1 message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SnapMessage {
    GetAccountRange {
        request_id: u64,
        root: B256,
        origin: B256,
        limit: B256,
        bytes: u64,
    },
    /// Accounts as (hashed address, slim account RLP), and the boundary proof.
    AccountRange {
        request_id: u64,
        accounts: Vec<(B256, Bytes)>,
        proof: Vec<Bytes>,
    },
    /// `origin` and `limit` apply to the first account only; on the wire they may be
    /// empty (zero and all-ones).
    GetStorageRanges {
        request_id: u64,
        root: B256,
        accounts: Vec<B256>,
        origin: B256,
        limit: B256,
        bytes: u64,
    },
    /// Per account, its slots as (hashed slot, RLP of the value); the proof of the last
    /// (partial) range.
    StorageRanges {
        request_id: u64,
        slots: Vec<Vec<(B256, Bytes)>>,
        proof: Vec<Bytes>,
    },
    GetByteCodes {
        request_id: u64,
        hashes: Vec<B256>,
        bytes: u64,
    },
    ByteCodes {
        request_id: u64,
        codes: Vec<Bytes>,
    },
    /// Path sets: `[compact path]` for the account trie, `[account hash, compact
    /// path...]` for a storage trie.
    GetTrieNodes {
        request_id: u64,
        root: B256,
        paths: Vec<Vec<Bytes>>,
        bytes: u64,
    },
    TrieNodes {
        request_id: u64,
        nodes: Vec<Bytes>,
    },
}

/// Why a snap message could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SnapDecodeError {
    #[error("unknown snap message id {0:#x}")]
    UnknownId(u64),
    #[error("snap message {id:#x}: {source}")]
    Rlp { id: u64, source: RlpError },
    #[error("snap message {id:#x}: {reason}")]
    Invalid { id: u64, reason: &'static str },
}

/// A 32-byte hash from a byte string of at most 32 bytes, left-padded (go-ethereum's
/// `BytesToHash`, which the storage range bounds go through); `empty` when there are none.
fn padded_hash(bytes: &[u8], empty: B256) -> Option<B256> {
    if bytes.is_empty() {
        return Some(empty);
    }
    if bytes.len() > 32 {
        return None;
    }
    let mut out = B256::ZERO;
    out[32 - bytes.len()..].copy_from_slice(bytes);
    Some(out)
}

fn string_list(items: &[Bytes], out: &mut Vec<u8>) {
    let mut payload = Vec::new();
    for i in items {
        i.as_ref().encode(&mut payload);
    }
    rlp::encode_list_payload(&payload, out);
}

fn read_strings(f: &mut Fields<'_>, field: &'static str) -> Result<Vec<Bytes>, RlpError> {
    let mut list = f.list(field)?;
    let mut out = Vec::new();
    while !list.is_empty() {
        out.push(list.data(field)?);
    }
    Ok(out)
}

impl SnapMessage {
    /// The message id relative to the snap offset.
    pub fn id(&self) -> u64 {
        match self {
            SnapMessage::GetAccountRange { .. } => GET_ACCOUNT_RANGE,
            SnapMessage::AccountRange { .. } => ACCOUNT_RANGE,
            SnapMessage::GetStorageRanges { .. } => GET_STORAGE_RANGES,
            SnapMessage::StorageRanges { .. } => STORAGE_RANGES,
            SnapMessage::GetByteCodes { .. } => GET_BYTE_CODES,
            SnapMessage::ByteCodes { .. } => BYTE_CODES,
            SnapMessage::GetTrieNodes { .. } => GET_TRIE_NODES,
            SnapMessage::TrieNodes { .. } => TRIE_NODES,
        }
    }

    /// How many items an answer carries (accounts, slots, codes, trie nodes); a
    /// request's are 0.
    pub fn items(&self) -> usize {
        match self {
            SnapMessage::AccountRange { accounts, .. } => accounts.len(),
            SnapMessage::StorageRanges { slots, .. } => slots.iter().map(Vec::len).sum(),
            SnapMessage::ByteCodes { codes, .. } => codes.len(),
            SnapMessage::TrieNodes { nodes, .. } => nodes.len(),
            SnapMessage::GetAccountRange { .. }
            | SnapMessage::GetStorageRanges { .. }
            | SnapMessage::GetByteCodes { .. }
            | SnapMessage::GetTrieNodes { .. } => 0,
        }
    }

    /// The request id of an answer (`AccountRange`, `StorageRanges`, `ByteCodes`,
    /// `TrieNodes`); `None` for a request.
    pub fn answer_id(&self) -> Option<u64> {
        match self {
            SnapMessage::AccountRange { request_id, .. }
            | SnapMessage::StorageRanges { request_id, .. }
            | SnapMessage::ByteCodes { request_id, .. }
            | SnapMessage::TrieNodes { request_id, .. } => Some(*request_id),
            SnapMessage::GetAccountRange { .. }
            | SnapMessage::GetStorageRanges { .. }
            | SnapMessage::GetByteCodes { .. }
            | SnapMessage::GetTrieNodes { .. } => None,
        }
    }

    /// The same message under request id `id`.
    pub fn with_request_id(mut self, id: u64) -> Self {
        match &mut self {
            SnapMessage::GetAccountRange { request_id, .. }
            | SnapMessage::AccountRange { request_id, .. }
            | SnapMessage::GetStorageRanges { request_id, .. }
            | SnapMessage::StorageRanges { request_id, .. }
            | SnapMessage::GetByteCodes { request_id, .. }
            | SnapMessage::ByteCodes { request_id, .. }
            | SnapMessage::GetTrieNodes { request_id, .. }
            | SnapMessage::TrieNodes { request_id, .. } => *request_id = id,
        }
        self
    }

    /// Whether `answer` is the kind of message that answers this request.
    pub fn answered_by(&self, answer: &SnapMessage) -> bool {
        matches!(
            (self, answer),
            (
                SnapMessage::GetAccountRange { .. },
                SnapMessage::AccountRange { .. }
            ) | (
                SnapMessage::GetStorageRanges { .. },
                SnapMessage::StorageRanges { .. }
            ) | (
                SnapMessage::GetByteCodes { .. },
                SnapMessage::ByteCodes { .. }
            ) | (
                SnapMessage::GetTrieNodes { .. },
                SnapMessage::TrieNodes { .. }
            )
        )
    }

    /// Name for logs and metrics.
    pub fn name(&self) -> &'static str {
        match self {
            SnapMessage::GetAccountRange { .. } => "GetAccountRange",
            SnapMessage::AccountRange { .. } => "AccountRange",
            SnapMessage::GetStorageRanges { .. } => "GetStorageRanges",
            SnapMessage::StorageRanges { .. } => "StorageRanges",
            SnapMessage::GetByteCodes { .. } => "GetByteCodes",
            SnapMessage::ByteCodes { .. } => "ByteCodes",
            SnapMessage::GetTrieNodes { .. } => "GetTrieNodes",
            SnapMessage::TrieNodes { .. } => "TrieNodes",
        }
    }

    /// The body (without the id).
    pub fn encode(&self) -> Vec<u8> {
        let mut p = Vec::new();
        match self {
            SnapMessage::GetAccountRange {
                request_id,
                root,
                origin,
                limit,
                bytes,
            } => {
                request_id.encode(&mut p);
                root.encode(&mut p);
                origin.encode(&mut p);
                limit.encode(&mut p);
                bytes.encode(&mut p);
            }
            SnapMessage::AccountRange {
                request_id,
                accounts,
                proof,
            } => {
                request_id.encode(&mut p);
                // Each item's header written from its length: no allocation per account
                // (an answer holds thousands), the list sized once.
                let item_len = |body: &Bytes| {
                    let payload = 33 + body.len();
                    alloy_rlp::length_of_length(payload) + payload
                };
                let mut list = Vec::with_capacity(accounts.iter().map(|(_, b)| item_len(b)).sum());
                for (hash, body) in accounts {
                    alloy_rlp::Header {
                        list: true,
                        payload_length: 33 + body.len(),
                    }
                    .encode(&mut list);
                    hash.encode(&mut list);
                    // The slim account is a list: it goes in as it is.
                    list.extend_from_slice(body);
                }
                rlp::encode_list_payload(&list, &mut p);
                string_list(proof, &mut p);
            }
            SnapMessage::GetStorageRanges {
                request_id,
                root,
                accounts,
                origin,
                limit,
                bytes,
            } => {
                request_id.encode(&mut p);
                root.encode(&mut p);
                let mut list = Vec::with_capacity(accounts.len() * 33);
                for a in accounts {
                    a.encode(&mut list);
                }
                rlp::encode_list_payload(&list, &mut p);
                origin.encode(&mut p);
                limit.encode(&mut p);
                bytes.encode(&mut p);
            }
            SnapMessage::StorageRanges {
                request_id,
                slots,
                proof,
            } => {
                request_id.encode(&mut p);
                let mut outer = Vec::new();
                for account in slots {
                    let mut inner = Vec::new();
                    for (hash, value) in account {
                        let mut item = Vec::with_capacity(34 + value.len());
                        hash.encode(&mut item);
                        value.as_ref().encode(&mut item);
                        rlp::encode_list_payload(&item, &mut inner);
                    }
                    rlp::encode_list_payload(&inner, &mut outer);
                }
                rlp::encode_list_payload(&outer, &mut p);
                string_list(proof, &mut p);
            }
            SnapMessage::GetByteCodes {
                request_id,
                hashes,
                bytes,
            } => {
                request_id.encode(&mut p);
                let mut list = Vec::with_capacity(hashes.len() * 33);
                for h in hashes {
                    h.encode(&mut list);
                }
                rlp::encode_list_payload(&list, &mut p);
                bytes.encode(&mut p);
            }
            SnapMessage::ByteCodes { request_id, codes } => {
                request_id.encode(&mut p);
                string_list(codes, &mut p);
            }
            SnapMessage::GetTrieNodes {
                request_id,
                root,
                paths,
                bytes,
            } => {
                request_id.encode(&mut p);
                root.encode(&mut p);
                let mut sets = Vec::new();
                for set in paths {
                    let mut one = Vec::new();
                    string_list(set, &mut one);
                    sets.extend_from_slice(&one);
                }
                rlp::encode_list_payload(&sets, &mut p);
                bytes.encode(&mut p);
            }
            SnapMessage::TrieNodes { request_id, nodes } => {
                request_id.encode(&mut p);
                string_list(nodes, &mut p);
            }
        }
        let mut out = Vec::with_capacity(p.len() + 5);
        rlp::encode_list_payload(&p, &mut out);
        out
    }

    /// Decodes a message body. The layout is exact: no missing or trailing fields.
    pub fn decode(id: u64, body: &[u8]) -> Result<Self, SnapDecodeError> {
        if id >= PROTOCOL_LENGTH {
            return Err(SnapDecodeError::UnknownId(id));
        }
        let rlp_err = |source| SnapDecodeError::Rlp { id, source };
        let invalid = |reason| SnapDecodeError::Invalid { id, reason };
        let mut buf = body;
        let mut f = rlp::list(&mut buf, "snap message").map_err(rlp_err)?;
        if !buf.is_empty() {
            return Err(rlp_err(RlpError::TrailingBytes {
                field: "snap message",
                extra: buf.len(),
            }));
        }
        let request_id = f.u64("request id").map_err(rlp_err)?;
        let msg = match id {
            GET_ACCOUNT_RANGE => (|| {
                Ok(SnapMessage::GetAccountRange {
                    request_id,
                    root: f.b256("root")?,
                    origin: f.b256("origin")?,
                    limit: f.b256("limit")?,
                    bytes: f.u64("response bytes")?,
                })
            })()
            .map_err(rlp_err)?,
            ACCOUNT_RANGE => {
                let mut list = f.list("accounts").map_err(rlp_err)?;
                let mut accounts = Vec::new();
                while !list.is_empty() {
                    let mut item = list.list("account").map_err(rlp_err)?;
                    let hash = item.b256("account hash").map_err(rlp_err)?;
                    if !item.next_is_list() {
                        return Err(invalid("account body is not a list"));
                    }
                    let body = item.raw_item("account body").map_err(rlp_err)?;
                    item.finish().map_err(rlp_err)?;
                    accounts.push((hash, Bytes::copy_from_slice(body)));
                }
                let proof = read_strings(&mut f, "proof").map_err(rlp_err)?;
                SnapMessage::AccountRange {
                    request_id,
                    accounts,
                    proof,
                }
            }
            GET_STORAGE_RANGES => {
                let root = f.b256("root").map_err(rlp_err)?;
                let accounts = f.b256_list("accounts").map_err(rlp_err)?;
                let origin = f.bytes("origin").map_err(rlp_err)?;
                let origin =
                    padded_hash(origin, B256::ZERO).ok_or(invalid("origin over 32 bytes"))?;
                let limit = f.bytes("limit").map_err(rlp_err)?;
                let limit = padded_hash(limit, B256::repeat_byte(0xff))
                    .ok_or(invalid("limit over 32 bytes"))?;
                let bytes = f.u64("response bytes").map_err(rlp_err)?;
                SnapMessage::GetStorageRanges {
                    request_id,
                    root,
                    accounts,
                    origin,
                    limit,
                    bytes,
                }
            }
            STORAGE_RANGES => {
                let mut outer = f.list("slots").map_err(rlp_err)?;
                let mut slots = Vec::new();
                while !outer.is_empty() {
                    let mut inner = outer.list("account slots").map_err(rlp_err)?;
                    let mut account = Vec::new();
                    while !inner.is_empty() {
                        let mut item = inner.list("slot").map_err(rlp_err)?;
                        let hash = item.b256("slot hash").map_err(rlp_err)?;
                        let value = item.data("slot value").map_err(rlp_err)?;
                        item.finish().map_err(rlp_err)?;
                        account.push((hash, value));
                    }
                    slots.push(account);
                }
                let proof = read_strings(&mut f, "proof").map_err(rlp_err)?;
                SnapMessage::StorageRanges {
                    request_id,
                    slots,
                    proof,
                }
            }
            GET_BYTE_CODES => SnapMessage::GetByteCodes {
                request_id,
                hashes: f.b256_list("hashes").map_err(rlp_err)?,
                bytes: f.u64("response bytes").map_err(rlp_err)?,
            },
            BYTE_CODES => SnapMessage::ByteCodes {
                request_id,
                codes: read_strings(&mut f, "codes").map_err(rlp_err)?,
            },
            GET_TRIE_NODES => {
                let root = f.b256("root").map_err(rlp_err)?;
                let mut sets = f.list("path sets").map_err(rlp_err)?;
                let mut paths = Vec::new();
                while !sets.is_empty() {
                    let mut set = sets.list("path set").map_err(rlp_err)?;
                    let mut one = Vec::new();
                    while !set.is_empty() {
                        one.push(set.data("path").map_err(rlp_err)?);
                    }
                    if one.is_empty() {
                        return Err(invalid("empty path set"));
                    }
                    paths.push(one);
                }
                let bytes = f.u64("response bytes").map_err(rlp_err)?;
                SnapMessage::GetTrieNodes {
                    request_id,
                    root,
                    paths,
                    bytes,
                }
            }
            TRIE_NODES => SnapMessage::TrieNodes {
                request_id,
                nodes: read_strings(&mut f, "nodes").map_err(rlp_err)?,
            },
            other => return Err(SnapDecodeError::UnknownId(other)),
        };
        f.finish().map_err(rlp_err)?;
        Ok(msg)
    }
}

/// The slim form of an account's RLP (`[nonce, balance, root, codeHash]`): the empty
/// storage root and the empty code hash become empty strings.
pub fn slim_account(full: &[u8]) -> Result<Vec<u8>, RlpError> {
    let mut out = Vec::new();
    slim_account_into(full, &mut out)?;
    Ok(out)
}

/// [`slim_account`] appended to `out`: what an account range writes its accounts into,
/// one buffer for the whole answer instead of an allocation per account.
fn slim_account_into(full: &[u8], out: &mut Vec<u8>) -> Result<(), RlpError> {
    if !slim_by_copy(full, out) {
        out.extend_from_slice(&convert_account(full, true)?);
    }
    Ok(())
}

/// The slim form of a well-formed full account, copied rather than decoded and encoded
/// again (what serving a million accounts does): nonce and balance as they stand, once
/// checked minimal, and the two hashes, the last 66 bytes, appended to `out`. `false`
/// (nothing appended) for anything else, which [`convert_account`] then reads (or
/// refuses) as before.
fn slim_by_copy(full: &[u8], out: &mut Vec<u8>) -> bool {
    let mut buf = full;
    let Ok(mut items) = rlp::list(&mut buf, "account") else {
        return false;
    };
    if !buf.is_empty() {
        return false;
    }
    let (Ok(nonce), Ok(balance)) = (items.raw_item("nonce"), items.raw_item("balance")) else {
        return false;
    };
    let hashes = items.remaining();
    if !minimal_uint(nonce, 8)
        || !minimal_uint(balance, 32)
        || hashes.len() != 66
        || hashes[0] != 0xa0
        || hashes[33] != 0xa0
    {
        return false;
    }
    let hash_items = [
        (&hashes[..33], EMPTY_ROOT),
        (&hashes[33..], KECCAK256_EMPTY),
    ];
    let slim_len = |item: &[u8], empty: B256| if item[1..] == empty[..] { 1 } else { 33 };
    let payload = nonce.len()
        + balance.len()
        + hash_items
            .iter()
            .map(|(item, empty)| slim_len(item, *empty))
            .sum::<usize>();
    alloy_rlp::Header {
        list: true,
        payload_length: payload,
    }
    .encode(out);
    out.extend_from_slice(nonce);
    out.extend_from_slice(balance);
    for (item, empty) in hash_items {
        if slim_len(item, empty) == 1 {
            out.push(alloy_rlp::EMPTY_STRING_CODE);
        } else {
            out.extend_from_slice(item);
        }
    }
    true
}

/// Whether `item` is the minimal RLP of an unsigned integer of at most `max` bytes.
fn minimal_uint(item: &[u8], max: usize) -> bool {
    match item {
        [] => false,
        [b] => *b == alloy_rlp::EMPTY_STRING_CODE || (1..0x80).contains(b),
        [h, first, ..] => {
            let n = usize::from(*h).wrapping_sub(0x80);
            n == item.len() - 1 && n <= max && n <= 55 && *first != 0 && (n > 1 || *first >= 0x80)
        }
    }
}

/// The account RLP that the trie holds, from its slim form.
pub fn full_account(slim: &[u8]) -> Result<Vec<u8>, RlpError> {
    convert_account(slim, false)
}

fn convert_account(input: &[u8], to_slim: bool) -> Result<Vec<u8>, RlpError> {
    let mut buf = input;
    let mut f = rlp::list(&mut buf, "account")?;
    if !buf.is_empty() {
        return Err(RlpError::TrailingBytes {
            field: "account",
            extra: buf.len(),
        });
    }
    let nonce = f.u64("nonce")?;
    let balance = f.u256("balance")?;
    let mut hash_field = |field, empty: B256| -> Result<B256, RlpError> {
        let b = f.bytes(field)?;
        match (b.len(), to_slim) {
            (32, _) => Ok(B256::from_slice(b)),
            (0, false) => Ok(empty),
            (found, _) => Err(RlpError::BadLength {
                field,
                expected: 32,
                found,
            }),
        }
    };
    let root = hash_field("storage root", EMPTY_ROOT)?;
    let code = hash_field("code hash", KECCAK256_EMPTY)?;
    f.finish()?;
    let mut p = Vec::with_capacity(80);
    nonce.encode(&mut p);
    balance.encode(&mut p);
    for (hash, empty) in [(root, EMPTY_ROOT), (code, KECCAK256_EMPTY)] {
        if to_slim && hash == empty {
            p.push(alloy_rlp::EMPTY_STRING_CODE);
        } else {
            hash.encode(&mut p);
        }
    }
    let mut out = Vec::with_capacity(p.len() + 2);
    rlp::encode_list_payload(&p, &mut out);
    Ok(out)
}

/// The account trie's owner.
const ACCOUNTS: B256 = B256::ZERO;

/// Calls `f` with the leaves of trie `owner` from `origin` on, in key order, until it
/// returns `false`. With `scan` (the same state as `state`) they are read with one range
/// scan of the trie-node table, merged for an older state with the nodes the blocks
/// since changed ([`StateAtBlock::trie_node_entries_from`]): the leaf on the origin's own path
/// first, then every leaf stored after the origin's key. Without it the trie is walked
/// node by node.
fn leaves_from<S: NodeSource + ?Sized>(
    state: &S,
    scan: Option<&StateAtBlock>,
    owner: &B256,
    origin: &B256,
    mut f: impl FnMut(B256, &[u8]) -> bool,
) -> Result<(), TrieError> {
    let Some(scan) = scan else {
        return range::walk_from(state, owner, origin, f);
    };
    let mut last = None;
    if let Some((key, value)) = range::leaf_on_path(state, owner, origin)?
        && key >= *origin
    {
        if !f(key, &value) {
            return Ok(());
        }
        last = Some(key);
    }
    let mut corrupt = false;
    scan.trie_node_entries_from(owner, &moat_trie::nibbles(origin), |stored, rlp| {
        let Some((compact, value)) = leaf_parts(rlp) else {
            return true;
        };
        let Some(key) = leaf_key(stored, compact) else {
            corrupt = true;
            return false;
        };
        // Nodes on the origin's path may sort after it (their length byte).
        if key < *origin || last.is_some_and(|l| key <= l) {
            return true;
        }
        last = Some(key);
        f(key, value)
    })
    .map_err(|e| TrieError::Source(e.to_string()))?;
    if corrupt {
        return Err(TrieError::Corrupt {
            owner: *owner,
            path: String::new(),
            reason: "leaf key of the wrong length",
        });
    }
    Ok(())
}

/// The compact path and the value of a leaf node's RLP, read in place (a scan meets a
/// million nodes: no allocation, and a branch is told apart by its item count without
/// decoding its children); `None` for a branch, an extension or what does not decode.
/// Matches [`range::decode_leaf`] on every well-formed node.
fn leaf_parts(rlp: &[u8]) -> Option<(&[u8], &[u8])> {
    let mut buf = rlp;
    let mut items = rlp::list(&mut buf, "trie node").ok()?;
    if !buf.is_empty() || items.next_is_list() {
        return None;
    }
    let compact = items.bytes("leaf path").ok()?;
    if items.next_is_list() {
        return None;
    }
    let value = items.bytes("leaf value").ok()?;
    if !items.is_empty() {
        return None;
    }
    match compact.first().map(|b| (b >> 4, b & 0x0f)) {
        Some((2, 0) | (3, _)) => Some((compact, value)),
        _ => None,
    }
}

/// The full key of the leaf stored under table key `stored` (owner, packed path, path
/// length: [`moat_storage::trie_node_key`]) with the compact path `compact` of a leaf;
/// `None` unless the two spell exactly 64 nibbles.
fn leaf_key(stored: &[u8], compact: &[u8]) -> Option<B256> {
    let (&len, packed) = stored.get(32..)?.split_last()?;
    let len = len as usize;
    let (&flag, rest) = compact.split_first()?;
    let odd = flag >> 4 == 3;
    if packed.len() != len.div_ceil(2) || len + 2 * rest.len() + usize::from(odd) != 64 {
        return None;
    }
    let mut out = B256::ZERO;
    let mut at = 0usize;
    let mut put = |nibble: u8| {
        out[at / 2] |= if at.is_multiple_of(2) {
            nibble << 4
        } else {
            nibble
        };
        at += 1;
    };
    for i in 0..len {
        put((packed[i / 2] >> if i.is_multiple_of(2) { 4 } else { 0 }) & 0x0f);
    }
    if odd {
        put(flag & 0x0f);
    }
    for b in rest {
        put(b >> 4);
        put(b & 0x0f);
    }
    Some(out)
}

/// Leaves of a range as (hashed key, value) pairs.
pub type Leaves = Vec<(B256, Bytes)>;
/// Proof nodes.
pub type Proof = Vec<Bytes>;
/// The served roots with their block numbers, and the head hash they were read under.
type RootIndex = Option<(B256, Vec<(B256, u64)>)>;

/// The accounts of `[origin, ..]`, stopping after the first at or past `limit` or once
/// the answer passes `bytes` (at least one account when there is one), with the proof
/// of the origin and of the last account.
pub fn account_range<S: NodeSource + ?Sized>(
    state: &S,
    scan: Option<&StateAtBlock>,
    origin: &B256,
    limit: &B256,
    bytes: u64,
    deadline: Instant,
) -> Result<(Leaves, Proof), TrieError> {
    let bytes = bytes.min(SOFT_RESPONSE_LIMIT as u64);
    // Every slim account goes into one buffer, handed out as slices of it: no
    // allocation per account (an answer holds thousands).
    let mut slims: Vec<u8> = Vec::with_capacity(bytes as usize + 256);
    let mut spans: Vec<(B256, usize, usize)> = Vec::with_capacity(bytes as usize / 96 + 1);
    let mut size = 0u64;
    let mut bad = None;
    leaves_from(state, scan, &ACCOUNTS, origin, |hash, full| {
        let start = slims.len();
        if let Err(e) = slim_account_into(full, &mut slims) {
            bad = Some(e);
            return false;
        }
        size += 32 + (slims.len() - start) as u64;
        spans.push((hash, start, slims.len()));
        hash < *limit && size <= bytes && Instant::now() < deadline
    })?;
    if let Some(e) = bad {
        return Err(TrieError::Source(format!("account leaf: {e}")));
    }
    let slims = Bytes::from(slims);
    let accounts: Leaves = spans
        .into_iter()
        .map(|(hash, start, end)| (hash, slims.slice(start..end)))
        .collect();
    let last = accounts.last().map(|(h, _)| *h);
    let proof = range::range_proof(state, &ACCOUNTS, origin, last.as_ref())?;
    Ok((accounts, proof.into_iter().map(Bytes::from).collect()))
}

/// The storage of `accounts`, as go-ethereum serves it: the first account's range from
/// `origin` to `limit`, the rest whole; an account without slots adds no list. A range
/// that starts past zero or is cut short comes with its proof and ends the answer.
pub fn storage_ranges<S: NodeSource + ?Sized>(
    state: &S,
    scan: Option<&StateAtBlock>,
    accounts: &[B256],
    origin: &B256,
    limit: &B256,
    bytes: u64,
    deadline: Instant,
) -> Result<(Vec<Leaves>, Proof), TrieError> {
    let bytes = bytes.min(SOFT_RESPONSE_LIMIT as u64);
    let hard_limit = bytes + bytes / STORAGE_SLACK_DIVISOR;
    let mut out = Vec::new();
    let mut size = 0u64;
    for (i, account) in accounts.iter().enumerate() {
        if size >= bytes || Instant::now() >= deadline {
            break;
        }
        let (from, to) = if i == 0 {
            (*origin, *limit)
        } else {
            (B256::ZERO, B256::repeat_byte(0xff))
        };
        let mut slots = Vec::new();
        let mut stopped = false;
        leaves_from(state, scan, account, &from, |hash, value| {
            if size >= hard_limit || Instant::now() >= deadline {
                stopped = true;
                return false;
            }
            size += 32 + value.len() as u64;
            slots.push((hash, Bytes::copy_from_slice(value)));
            if hash >= to {
                stopped = true;
                return false;
            }
            true
        })?;
        let last = slots.last().map(|(h, _)| *h);
        if !slots.is_empty() {
            out.push(slots);
        }
        if !from.is_zero() || (stopped && last.is_some()) {
            if range::get(state, &ACCOUNTS, account)?.is_none() {
                // No such account: nothing to prove against.
                return Ok((Vec::new(), Vec::new()));
            }
            let proof = range::range_proof(state, account, &from, last.as_ref())?;
            return Ok((out, proof.into_iter().map(Bytes::from).collect()));
        }
    }
    Ok((out, Vec::new()))
}

/// Codes by hash, in request order, unknown ones left out; the empty code is answered
/// as an empty item without a lookup.
pub fn byte_codes(
    code: impl Fn(&B256) -> Option<Bytes>,
    hashes: &[B256],
    bytes: u64,
) -> Vec<Bytes> {
    let bytes = bytes.min(SOFT_RESPONSE_LIMIT as u64);
    let mut out = Vec::new();
    let mut size = 0u64;
    for hash in hashes.iter().take(MAX_CODE_LOOKUPS) {
        if *hash == KECCAK256_EMPTY {
            out.push(Bytes::new());
        } else if let Some(c) = code(hash).filter(|c| !c.is_empty()) {
            size += c.len() as u64;
            out.push(c);
        }
        if size > bytes {
            break;
        }
    }
    out
}

/// The nibbles of a hex-prefix (compact) path; `None` for a leaf-flagged or malformed
/// one, which names no node. An empty string names the root, as go-ethereum reads it.
fn path_nibbles(compact: &[u8]) -> Option<Vec<u8>> {
    let Some(&first) = compact.first() else {
        return Some(Vec::new());
    };
    // A key has 64 nibbles: at most 33 bytes (the flag byte and 32), checked before
    // anything is sized by the peer's string.
    if compact.len() > 33 {
        return None;
    }
    let flag = first >> 4;
    let mut out = Vec::with_capacity(compact.len() * 2);
    match flag {
        0 if first & 0x0f == 0 => {}
        1 => out.push(first & 0x0f),
        _ => return None,
    }
    for b in &compact[1..] {
        out.push(b >> 4);
        out.push(b & 0x0f);
    }
    (out.len() <= 64).then_some(out)
}

/// Trie nodes by path, as go-ethereum answers: an empty item where no node starts at
/// the path, nothing for a node embedded in its parent, and nothing for a storage path
/// set whose account does not exist.
pub fn trie_nodes<S: NodeSource + ?Sized>(
    state: &S,
    paths: &[Vec<Bytes>],
    bytes: u64,
    deadline: Instant,
) -> Result<Vec<Bytes>, TrieError> {
    let bytes = bytes.min(SOFT_RESPONSE_LIMIT as u64);
    let mut out = Vec::new();
    let mut size = 0u64;
    let mut loads = 0usize;
    let node_at = |owner: &B256, compact: &[u8]| -> Result<Option<Bytes>, TrieError> {
        let Some(path) = path_nibbles(compact) else {
            return Ok(Some(Bytes::new()));
        };
        Ok(match state.node(owner, &path)? {
            None => Some(Bytes::new()),
            Some(rlp) if path.is_empty() || rlp.len() >= 32 => Some(Bytes::from(rlp)),
            Some(_) => None,
        })
    };
    let over = |size: u64, loads: usize| {
        size > bytes || loads > MAX_TRIE_NODE_LOOKUPS || Instant::now() >= deadline
    };
    for set in paths {
        let Some((first, rest)) = set.split_first() else {
            continue;
        };
        if rest.is_empty() {
            loads += 1;
            if let Some(node) = node_at(&ACCOUNTS, first)? {
                size += node.len() as u64;
                out.push(node);
            }
        } else {
            let account = padded_hash(&first[first.len().saturating_sub(32)..], B256::ZERO)
                .unwrap_or_default();
            loads += 8;
            if range::get(state, &ACCOUNTS, &account)?.is_none() {
                continue;
            }
            for path in rest {
                loads += 1;
                if let Some(node) = node_at(&account, path)? {
                    size += node.len() as u64;
                    out.push(node);
                }
                if over(size, loads) {
                    break;
                }
            }
        }
        if over(size, loads) {
            break;
        }
    }
    Ok(out)
}

/// Finds the state of a served root and answers snap requests from it. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct SnapServer {
    /// The served roots with their block numbers (newest first), for the head they
    /// were read at.
    roots: Arc<Mutex<RootIndex>>,
    /// The states last served, by head hash and block number: an older state is the
    /// head's with up to 127 undo records laid over it, too costly to rebuild for every
    /// request of a peer that syncs from it.
    states: Arc<Mutex<Vec<CachedState>>>,
    /// Requests answered since the start; the page-cache warm-up ([`SnapServer::warm`])
    /// holds a weak handle to it and stops once the server is dropped.
    answered: Arc<AtomicU64>,
}

/// A state kept for the next requests: (head hash, block number, state).
type CachedState = (B256, u64, Arc<StateAtBlock>);
/// How many states are kept.
const CACHED_STATES: usize = 4;

impl SnapServer {
    /// The number of the newest of the last [`SERVED_ROOTS`] canonical blocks whose
    /// state root is `root`, with the head hash it was found under.
    fn block_of(&self, chain: &Chain, root: &B256) -> Option<(u64, B256)> {
        let (head, head_hash) = chain.head().ok()?;
        let mut roots = self.roots.lock();
        if roots.as_ref().is_none_or(|(h, _)| *h != head_hash) {
            let mut list = Vec::with_capacity(SERVED_ROOTS as usize);
            for n in (head.saturating_sub(SERVED_ROOTS - 1)..=head).rev() {
                if let Ok(Some(header)) = chain.header_by_number(n) {
                    list.push((header.state_root, n));
                }
            }
            *roots = Some((head_hash, list));
        }
        let (_, list) = roots.as_ref()?;
        list.iter()
            .find(|(r, _)| r == root)
            .map(|(_, n)| (*n, head_hash))
    }

    /// The state after block `number` under head `head_hash`, from the cache or built.
    fn state(&self, chain: &Chain, head_hash: B256, number: u64) -> Option<Arc<StateAtBlock>> {
        {
            let mut states = self.states.lock();
            states.retain(|(h, _, _)| *h == head_hash);
            if let Some((_, _, s)) = states.iter().find(|(_, n, _)| *n == number) {
                return Some(s.clone());
            }
        }
        // Built outside the lock: two requests may build the same state at once.
        let state = Arc::new(chain.state_at(number).ok()?);
        let mut states = self.states.lock();
        if states.len() >= CACHED_STATES {
            states.remove(0);
        }
        states.push((head_hash, number, state.clone()));
        Some(state)
    }

    /// The answer to a request; `None` for a message that is not one (we ask peers for
    /// nothing over snap yet, so their answers are dropped).
    pub fn answer(&self, chain: &Chain, msg: &SnapMessage) -> Option<SnapMessage> {
        let started = Instant::now();
        self.answered.fetch_add(1, Ordering::Relaxed);
        let deadline = started + TIME_BUDGET;
        // A block imported while the answer is read changes the trie under it: read
        // again once, then give up with an empty answer.
        let mut answer = None;
        for _ in 0..2 {
            let (read, stable) = self.answer_once(chain, msg, deadline)?;
            if stable {
                answer = Some(read);
                break;
            }
        }
        metrics::histogram!("moat_snap_serve_seconds", "msg" => msg.name())
            .record(started.elapsed());
        answer.or_else(|| empty_answer(msg))
    }

    /// The answer, and whether the head stayed the same while it was read.
    fn answer_once(
        &self,
        chain: &Chain,
        msg: &SnapMessage,
        deadline: Instant,
    ) -> Option<(SnapMessage, bool)> {
        // Leaves are scanned from the trie-node table, through the undo records for an
        // older state.
        let state_for = |root: &B256| {
            let (number, head_hash) = self.block_of(chain, root)?;
            Some((self.state(chain, head_hash, number)?, head_hash))
        };
        let unchanged = |head_hash: B256| chain.head().ok().map(|(_, h)| h) == Some(head_hash);
        Some(match msg {
            SnapMessage::GetAccountRange {
                request_id,
                root,
                origin,
                limit,
                bytes,
            } => {
                let Some((state, head)) = state_for(root) else {
                    return Some((empty_answer(msg)?, true));
                };
                let (accounts, proof) =
                    account_range(&*state, Some(&state), origin, limit, *bytes, deadline)
                        .unwrap_or_else(|e| {
                            tracing::warn!(error = %e, "snap: account range not served");
                            Default::default()
                        });
                let answer = SnapMessage::AccountRange {
                    request_id: *request_id,
                    accounts,
                    proof,
                };
                (answer, unchanged(head))
            }
            SnapMessage::GetStorageRanges {
                request_id,
                root,
                accounts,
                origin,
                limit,
                bytes,
            } => {
                let Some((state, head)) = state_for(root) else {
                    return Some((empty_answer(msg)?, true));
                };
                let (slots, proof) = storage_ranges(
                    &*state,
                    Some(&state),
                    accounts,
                    origin,
                    limit,
                    *bytes,
                    deadline,
                )
                .unwrap_or_else(|e| {
                    tracing::warn!(error = %e, "snap: storage ranges not served");
                    Default::default()
                });
                let answer = SnapMessage::StorageRanges {
                    request_id: *request_id,
                    slots,
                    proof,
                };
                (answer, unchanged(head))
            }
            SnapMessage::GetByteCodes {
                request_id,
                hashes,
                bytes,
            } => {
                let store = chain.store();
                let codes = byte_codes(|h| store.code(h).ok().flatten(), hashes, *bytes);
                let answer = SnapMessage::ByteCodes {
                    request_id: *request_id,
                    codes,
                };
                (answer, true)
            }
            SnapMessage::GetTrieNodes {
                request_id,
                root,
                paths,
                bytes,
            } => {
                let Some((state, head)) = state_for(root) else {
                    return Some((empty_answer(msg)?, true));
                };
                let nodes = trie_nodes(&*state, paths, *bytes, deadline).unwrap_or_else(|e| {
                    tracing::warn!(error = %e, "snap: trie nodes not served");
                    Vec::new()
                });
                let answer = SnapMessage::TrieNodes {
                    request_id: *request_id,
                    nodes,
                };
                (answer, unchanged(head))
            }
            SnapMessage::AccountRange { .. }
            | SnapMessage::StorageRanges { .. }
            | SnapMessage::ByteCodes { .. }
            | SnapMessage::TrieNodes { .. } => return None,
        })
    }
}

impl SnapServer {
    /// Warms the database's page cache with the trie-node table
    /// ([`moat_storage::Store::warm_trie_nodes`], bounded by the page cache's share of
    /// `--cache`) on a thread of its own at nice 19, so that the first peer to sync from
    /// a node just started does not wait for the pages to be read and the memory for them
    /// handed out. Returns at once: the node serves meanwhile. A peer that asks before
    /// the read is done does not stop it: the read goes on ahead of that peer's pass over
    /// the trie (both go in key order), on the CPU the serving leaves idle, since a nice-19
    /// thread gets about 1.5 % of a core that a serving thread wants. The thread stops
    /// once this server is dropped or when it is done; it is never started for a store
    /// without a page cache.
    /// The thread's handle gives what it read (`None` when no thread was started).
    pub fn warm(
        &self,
        chain: &Chain,
    ) -> Option<std::thread::JoinHandle<Result<moat_storage::Warmed, moat_storage::StoreError>>>
    {
        let store = chain.store().clone();
        if store.warm_budget() == 0 {
            return None;
        }
        let answered = Arc::downgrade(&self.answered);
        let spawned = std::thread::Builder::new()
            .name("moat-warm".into())
            .spawn(move || {
                // Failure leaves the thread at normal priority.
                moat_blockchain::mempool::lanes::nice_this_thread();
                let started = Instant::now();
                // The server's counter is the liveness token: gone once it is dropped.
                let go_on = || answered.strong_count() > 0;
                let warmed = store.warm_trie_nodes(go_on);
                match &warmed {
                    Ok(w) => tracing::info!(
                        nodes = w.entries,
                        mb = w.bytes >> 20,
                        end = ?w.end,
                        secs = format!("{:.2}", started.elapsed().as_secs_f64()),
                        "page cache warmed with the trie nodes"
                    ),
                    Err(e) => tracing::warn!(error = %e, "page cache warm-up failed"),
                }
                warmed
            });
        spawned
            .inspect_err(|e| tracing::warn!(error = %e, "page cache warm-up not started"))
            .ok()
    }

    /// Requests answered since the start.
    pub fn answered(&self) -> u64 {
        self.answered.load(Ordering::Relaxed)
    }
}

/// The empty answer to a request (for a root not served); `None` for an answer.
pub fn empty_answer(msg: &SnapMessage) -> Option<SnapMessage> {
    Some(match msg {
        SnapMessage::GetAccountRange { request_id, .. } => SnapMessage::AccountRange {
            request_id: *request_id,
            accounts: Vec::new(),
            proof: Vec::new(),
        },
        SnapMessage::GetStorageRanges { request_id, .. } => SnapMessage::StorageRanges {
            request_id: *request_id,
            slots: Vec::new(),
            proof: Vec::new(),
        },
        SnapMessage::GetByteCodes { request_id, .. } => SnapMessage::ByteCodes {
            request_id: *request_id,
            codes: Vec::new(),
        },
        SnapMessage::GetTrieNodes { request_id, .. } => SnapMessage::TrieNodes {
            request_id: *request_id,
            nodes: Vec::new(),
        },
        SnapMessage::AccountRange { .. }
        | SnapMessage::StorageRanges { .. }
        | SnapMessage::ByteCodes { .. }
        | SnapMessage::TrieNodes { .. } => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloy_primitives::{U256, keccak256};
    use moat_blockchain::undo::Undo;
    use moat_storage::Store;
    use moat_trie::range::verify_range_proof;
    use moat_trie::{MemoryNodes, Trie};

    fn full(nonce: u64, balance: u64, root: B256, code: B256) -> Vec<u8> {
        let mut p = Vec::new();
        nonce.encode(&mut p);
        U256::from(balance).encode(&mut p);
        root.encode(&mut p);
        code.encode(&mut p);
        let mut out = Vec::new();
        rlp::encode_list_payload(&p, &mut out);
        out
    }

    fn commit(nodes: &mut MemoryNodes, owner: B256, leaves: &[(B256, Vec<u8>)]) -> B256 {
        let mut trie = Trie::new(&*nodes, owner);
        for (k, v) in leaves {
            trie.insert(k, v.clone()).unwrap();
        }
        let c = trie.commit().unwrap();
        nodes.apply(&owner, &c);
        c.root
    }

    /// 200 accounts; account 7 has 50 storage slots, account 9 has 3.
    struct World {
        nodes: MemoryNodes,
        root: B256,
        accounts: Vec<(B256, Vec<u8>)>,
        storage_owner: B256,
        slots: Vec<(B256, Vec<u8>)>,
        small_owner: B256,
    }

    fn world() -> World {
        let mut nodes = MemoryNodes::default();
        let storage_owner = keccak256([7u8]);
        let slots: Vec<(B256, Vec<u8>)> = (0..50u64)
            .map(|i| {
                (
                    keccak256(U256::from(i).to_be_bytes::<32>()),
                    alloy_rlp::encode(U256::from(i + 1)),
                )
            })
            .collect();
        let storage_root = commit(&mut nodes, storage_owner, &slots);
        let small_owner = keccak256([9u8]);
        let small: Vec<(B256, Vec<u8>)> = (0..3u64)
            .map(|i| {
                (
                    keccak256([i as u8, 1]),
                    alloy_rlp::encode(U256::from(i + 1)),
                )
            })
            .collect();
        let small_root = commit(&mut nodes, small_owner, &small);
        let mut accounts: Vec<(B256, Vec<u8>)> = (0..200u8)
            .map(|i| {
                let (root, code) = match i {
                    7 => (storage_root, keccak256([1u8])),
                    9 => (small_root, KECCAK256_EMPTY),
                    _ => (EMPTY_ROOT, KECCAK256_EMPTY),
                };
                (keccak256([i]), full(i as u64, 1000 + i as u64, root, code))
            })
            .collect();
        accounts.sort();
        let mut slots = slots;
        slots.sort();
        let root = commit(&mut nodes, ACCOUNTS, &accounts);
        World {
            nodes,
            root,
            accounts,
            storage_owner,
            slots,
            small_owner,
        }
    }

    fn later() -> Instant {
        Instant::now() + TIME_BUDGET
    }

    /// Checks an account range as a syncing node would; returns its "more" flag.
    fn verify_accounts(
        root: B256,
        origin: &B256,
        accounts: &[(B256, Bytes)],
        proof: &[Bytes],
    ) -> bool {
        let keys: Vec<B256> = accounts.iter().map(|(h, _)| *h).collect();
        let values: Vec<Vec<u8>> = accounts
            .iter()
            .map(|(_, slim)| full_account(slim).unwrap())
            .collect();
        verify_range_proof(root, origin, &keys, &values, proof).unwrap()
    }

    #[test]
    fn messages_round_trip_and_bad_ones_are_typed_errors() {
        let msgs = vec![
            SnapMessage::GetAccountRange {
                request_id: 1,
                root: B256::repeat_byte(1),
                origin: B256::ZERO,
                limit: B256::repeat_byte(0xff),
                bytes: 0,
            },
            SnapMessage::AccountRange {
                request_id: 2,
                accounts: vec![(
                    B256::repeat_byte(2),
                    Bytes::from(slim_account(&full(1, 2, EMPTY_ROOT, KECCAK256_EMPTY)).unwrap()),
                )],
                proof: vec![Bytes::from(vec![0xc1, 0x80])],
            },
            SnapMessage::GetStorageRanges {
                request_id: 3,
                root: B256::repeat_byte(3),
                accounts: vec![B256::repeat_byte(4), B256::repeat_byte(5)],
                origin: B256::with_last_byte(1),
                limit: B256::repeat_byte(0xee),
                bytes: 500,
            },
            SnapMessage::StorageRanges {
                request_id: 4,
                slots: vec![
                    vec![(B256::repeat_byte(6), Bytes::from(vec![0x02]))],
                    vec![],
                ],
                proof: vec![],
            },
            SnapMessage::GetByteCodes {
                request_id: 5,
                hashes: vec![KECCAK256_EMPTY],
                bytes: 1,
            },
            SnapMessage::ByteCodes {
                request_id: 6,
                codes: vec![Bytes::new(), Bytes::from(vec![0x60, 0x00])],
            },
            SnapMessage::GetTrieNodes {
                request_id: 7,
                root: B256::repeat_byte(7),
                paths: vec![
                    vec![Bytes::from(vec![0x00])],
                    vec![Bytes::from(vec![1; 32]), Bytes::from(vec![0x1b])],
                ],
                bytes: 5000,
            },
            SnapMessage::TrieNodes {
                request_id: 8,
                nodes: vec![Bytes::from(vec![0xc0])],
            },
        ];
        for msg in msgs {
            assert_eq!(
                SnapMessage::decode(msg.id(), &msg.encode()),
                Ok(msg.clone())
            );
        }
        // The storage range bounds may be empty or short (left-padded), as geth reads them.
        let mut p = Vec::new();
        9u64.encode(&mut p);
        B256::ZERO.encode(&mut p);
        rlp::encode_list_payload(&[], &mut p);
        [].as_slice().encode(&mut p);
        [0x01u8, 0x02].as_slice().encode(&mut p);
        10u64.encode(&mut p);
        let mut body = Vec::new();
        rlp::encode_list_payload(&p, &mut body);
        match SnapMessage::decode(GET_STORAGE_RANGES, &body).unwrap() {
            SnapMessage::GetStorageRanges { origin, limit, .. } => {
                assert_eq!(origin, B256::ZERO);
                assert_eq!(limit, B256::left_padding_from(&[1, 2]));
            }
            other => panic!("{other:?}"),
        }
        // An empty path set, an unknown id, trailing fields: typed errors.
        let mut p = Vec::new();
        1u64.encode(&mut p);
        B256::ZERO.encode(&mut p);
        rlp::encode_list_payload(&[0xc0], &mut p);
        1u64.encode(&mut p);
        let mut body = Vec::new();
        rlp::encode_list_payload(&p, &mut body);
        assert_eq!(
            SnapMessage::decode(GET_TRIE_NODES, &body),
            Err(SnapDecodeError::Invalid {
                id: GET_TRIE_NODES,
                reason: "empty path set"
            })
        );
        assert_eq!(
            SnapMessage::decode(8, &[0xc0]),
            Err(SnapDecodeError::UnknownId(8))
        );
        let msg = SnapMessage::ByteCodes {
            request_id: 1,
            codes: vec![],
        };
        let mut p = Vec::new();
        1u64.encode(&mut p);
        rlp::encode_list_payload(&[], &mut p);
        5u64.encode(&mut p);
        let mut body = Vec::new();
        rlp::encode_list_payload(&p, &mut body);
        assert!(matches!(
            SnapMessage::decode(msg.id(), &body),
            Err(SnapDecodeError::Rlp { .. })
        ));
    }

    #[test]
    fn slim_accounts_drop_the_empty_hashes_and_come_back() {
        let plain = full(3, 4, EMPTY_ROOT, KECCAK256_EMPTY);
        let slim = slim_account(&plain).unwrap();
        assert_eq!(slim, [0xc4, 0x03, 0x04, 0x80, 0x80]);
        assert_eq!(full_account(&slim).unwrap(), plain);
        let contract = full(1, 0, B256::repeat_byte(1), B256::repeat_byte(2));
        assert_eq!(slim_account(&contract).unwrap(), contract);
        assert_eq!(full_account(&contract).unwrap(), contract);
        assert!(slim_account(&[0xc0]).is_err());
        assert!(
            slim_account(&slim).is_err(),
            "a slim account is not a trie leaf"
        );
        // The copying path gives what decoding and encoding again gives.
        let big = U256::MAX;
        for nonce in [0, 1, 127, 128, 255, 256, u64::MAX] {
            for balance in [
                U256::ZERO,
                U256::from(1),
                U256::from(0x80),
                U256::from(1u64 << 40),
                big,
            ] {
                for (root, code) in [
                    (EMPTY_ROOT, KECCAK256_EMPTY),
                    (B256::repeat_byte(1), KECCAK256_EMPTY),
                    (EMPTY_ROOT, B256::repeat_byte(2)),
                ] {
                    let mut p = Vec::new();
                    nonce.encode(&mut p);
                    balance.encode(&mut p);
                    root.encode(&mut p);
                    code.encode(&mut p);
                    let mut plain = Vec::new();
                    rlp::encode_list_payload(&p, &mut plain);
                    // Appended after what the buffer holds.
                    let mut copied = vec![7u8];
                    assert!(slim_by_copy(&plain, &mut copied));
                    assert_eq!(copied.remove(0), 7);
                    assert_eq!(copied, convert_account(&plain, true).unwrap());
                    assert_eq!(full_account(&copied).unwrap(), plain);
                }
            }
        }
        // Not minimal, or not hashes at the end: left to the decoder, which refuses.
        for bad in [
            vec![0xe3, 0x00, 0x80, 0xa0],
            [vec![0xf8, 0x45, 0x81, 0x05, 0x80], vec![0xa0; 66]].concat(),
            [vec![0xf8, 0x46, 0x82, 0x00, 0x05, 0x80], vec![0xa0; 66]].concat(),
        ] {
            let mut out = vec![7u8];
            assert!(!slim_by_copy(&bad, &mut out));
            assert_eq!(out, [7], "nothing appended");
            assert!(slim_account(&bad).is_err());
        }
    }

    #[test]
    fn leaves_are_read_in_place_as_the_decoder_reads_them() {
        let w = world();
        let mut leaves = 0;
        for ((owner, path), rlp) in &w.nodes.nodes {
            let decoded = range::decode_leaf(rlp);
            let parts = leaf_parts(rlp);
            assert_eq!(
                parts.map(|(_, v)| v.to_vec()),
                decoded.clone().map(|(_, v)| v),
                "{owner} {path:?}"
            );
            if let (Some((compact, _)), Some((rest, _))) = (parts, decoded) {
                let stored = moat_storage::trie_node_key(owner, path);
                let full = [path.clone(), rest].concat();
                assert_eq!(leaf_key(&stored, compact), Some(range::key_of(&full)));
                // A key of the wrong length is no leaf key.
                let short =
                    moat_storage::trie_node_key(owner, &path[..path.len().saturating_sub(1)]);
                if !path.is_empty() {
                    assert_eq!(leaf_key(&short, compact), None);
                }
                leaves += 1;
            }
        }
        assert_eq!(leaves, 200 + 50 + 3);
    }

    #[test]
    fn account_ranges_are_proven_and_limited() {
        let w = world();
        let first = w.accounts[0].0;
        let max = B256::repeat_byte(0xff);
        // The whole state fits.
        let (all, proof) =
            account_range(&w.nodes, None, &B256::ZERO, &max, 1 << 20, later()).unwrap();
        assert_eq!(all.len(), 200);
        assert!(!verify_accounts(w.root, &B256::ZERO, &all, &proof));
        // Bytes: stop once past the budget; zero still gives one account.
        let (some, proof) =
            account_range(&w.nodes, None, &B256::ZERO, &max, 1000, later()).unwrap();
        let size: usize = some.iter().map(|(_, b)| 32 + b.len()).sum();
        assert!(size > 1000 && size - (32 + some.last().unwrap().1.len()) <= 1000);
        assert!(verify_accounts(w.root, &B256::ZERO, &some, &proof));
        let (one, proof) = account_range(&w.nodes, None, &B256::ZERO, &max, 0, later()).unwrap();
        assert_eq!(one.len(), 1);
        assert_eq!(one[0].0, first);
        assert!(verify_accounts(w.root, &B256::ZERO, &one, &proof));
        // The limit: the first account at or past it ends the range.
        let limit = w.accounts[10].0;
        let (to_limit, proof) =
            account_range(&w.nodes, None, &B256::ZERO, &limit, 1 << 20, later()).unwrap();
        assert_eq!(to_limit.len(), 11);
        assert!(verify_accounts(w.root, &B256::ZERO, &to_limit, &proof));
        // From between two keys.
        let mut origin = w.accounts[50].0;
        origin[31] = origin[31].wrapping_add(1);
        let (from, proof) = account_range(&w.nodes, None, &origin, &max, 3000, later()).unwrap();
        assert_eq!(from[0].0, w.accounts[51].0);
        assert!(verify_accounts(w.root, &origin, &from, &proof));
        // Past the last key: nothing, with the proof that nothing is there.
        let last = w.accounts.last().unwrap().0;
        let mut beyond = last;
        beyond[31] = beyond[31].wrapping_add(1);
        let (none, proof) =
            account_range(&w.nodes, None, &max, &B256::ZERO, 4000, later()).unwrap();
        assert!(none.is_empty() && !proof.is_empty());
        assert!(!verify_accounts(w.root, &max, &none, &proof));
        // A spent time budget still answers with a proven first account.
        let (rushed, proof) =
            account_range(&w.nodes, None, &B256::ZERO, &max, 1 << 20, Instant::now()).unwrap();
        assert_eq!(rushed.len(), 1);
        assert!(verify_accounts(w.root, &B256::ZERO, &rushed, &proof));
    }

    #[test]
    fn storage_ranges_follow_geths_rules() {
        let w = world();
        let max = B256::repeat_byte(0xff);
        let storage_root = moat_trie::root(&w.nodes, &w.storage_owner).unwrap();
        // Whole storage of two accounts, no proof.
        let (slots, proof) = storage_ranges(
            &w.nodes,
            None,
            &[w.small_owner, w.storage_owner],
            &B256::ZERO,
            &max,
            1 << 20,
            later(),
        )
        .unwrap();
        assert_eq!(slots.len(), 2);
        assert_eq!(slots[0].len(), 3);
        assert_eq!(slots[1].len(), 50);
        assert!(proof.is_empty());
        // An account without storage adds no list.
        let plain = w
            .accounts
            .iter()
            .find(|(h, _)| *h != w.storage_owner && *h != w.small_owner)
            .unwrap()
            .0;
        let (slots, _) =
            storage_ranges(&w.nodes, None, &[plain], &B256::ZERO, &max, 500, later()).unwrap();
        assert!(slots.is_empty());
        // Cut short by bytes: a proof, verified against the storage root.
        let (slots, proof) = storage_ranges(
            &w.nodes,
            None,
            &[w.storage_owner, w.small_owner],
            &B256::ZERO,
            &max,
            300,
            later(),
        )
        .unwrap();
        assert_eq!(slots.len(), 1, "the proof ends the answer");
        let got = &slots[0];
        assert!(got.len() < 50 && !proof.is_empty());
        let keys: Vec<B256> = got.iter().map(|(h, _)| *h).collect();
        let values: Vec<&[u8]> = got.iter().map(|(_, v)| v.as_ref()).collect();
        assert!(verify_range_proof(storage_root, &B256::ZERO, &keys, &values, &proof).unwrap());
        // From an origin between slots, up to a limit.
        let origin = {
            let mut o = w.slots[20].0;
            o[31] = o[31].wrapping_add(1);
            o
        };
        let limit = w.slots[25].0;
        let (slots, proof) = storage_ranges(
            &w.nodes,
            None,
            &[w.storage_owner],
            &origin,
            &limit,
            1 << 20,
            later(),
        )
        .unwrap();
        let got: Vec<B256> = slots[0].iter().map(|(h, _)| *h).collect();
        let want: Vec<B256> = w.slots[21..=25].iter().map(|(h, _)| *h).collect();
        assert_eq!(got, want);
        let values: Vec<&[u8]> = slots[0].iter().map(|(_, v)| v.as_ref()).collect();
        assert!(verify_range_proof(storage_root, &origin, &got, &values, &proof).unwrap());
        // An unknown account from a non-zero origin: nothing to prove against.
        let (slots, proof) = storage_ranges(
            &w.nodes,
            None,
            &[B256::repeat_byte(0x42)],
            &origin,
            &max,
            500,
            later(),
        )
        .unwrap();
        assert!(slots.is_empty() && proof.is_empty());
    }

    /// The world's tries in a store, as the head state.
    fn stored(w: &World) -> StateAtBlock {
        let store = Store::in_memory();
        let mut batch = moat_storage::WriteBatch::new();
        for ((owner, path), rlp) in &w.nodes.nodes {
            batch.set_trie_node(*owner, path.clone(), Some(rlp.clone()));
        }
        store.commit(batch).unwrap();
        StateAtBlock::head(store)
    }

    #[test]
    fn the_head_scan_gives_what_the_walk_gives() {
        let w = world();
        let head = stored(&w);
        let max = B256::repeat_byte(0xff);
        let mut origins = vec![B256::ZERO, max];
        for (k, _) in w.accounts.iter().chain(&w.slots) {
            origins.push(*k);
            let mut up = *k;
            up[31] = up[31].wrapping_add(1);
            origins.push(up);
            let mut down = *k;
            down[31] = down[31].wrapping_sub(1);
            origins.push(down);
        }
        for owner in [
            ACCOUNTS,
            w.storage_owner,
            w.small_owner,
            B256::repeat_byte(9),
        ] {
            for origin in &origins {
                let collect = |scan: Option<&StateAtBlock>| {
                    let mut out = Vec::new();
                    leaves_from(&head, scan, &owner, origin, |k, v| {
                        out.push((k, v.to_vec()));
                        true
                    })
                    .unwrap();
                    out
                };
                assert_eq!(collect(Some(&head)), collect(None), "{owner} from {origin}");
            }
        }
        for bytes in [0, 1000, 1 << 20] {
            for origin in &origins[..40] {
                let scanned =
                    account_range(&head, Some(&head), origin, &max, bytes, later()).unwrap();
                let walked = account_range(&head, None, origin, &max, bytes, later()).unwrap();
                assert_eq!(scanned, walked);
            }
        }
        let slots = |scan| {
            storage_ranges(
                &head,
                scan,
                &[w.storage_owner],
                &B256::ZERO,
                &max,
                300,
                later(),
            )
            .unwrap()
        };
        assert_eq!(slots(Some(&head)), slots(None));
    }

    /// The world one block later: accounts changed, created and deleted (account 9 with
    /// its storage), slots of account 7 changed, created and deleted, and a new account
    /// with storage. Its tries in a store, and the undo record that takes them back.
    fn next_block(w: &World) -> (Store, Undo, MemoryNodes) {
        let mut nodes = w.nodes.clone();
        let mut slots = Trie::new(&w.nodes, w.storage_owner);
        for (i, (k, _)) in w.slots.iter().enumerate() {
            match i % 5 {
                0 => {
                    slots.remove(k).unwrap();
                }
                1 => {
                    slots
                        .insert(k, alloy_rlp::encode(U256::from(1000 + i)))
                        .unwrap();
                }
                _ => {}
            }
        }
        for i in 0..20u64 {
            slots
                .insert(
                    &keccak256([i as u8, 2]),
                    alloy_rlp::encode(U256::from(i + 7)),
                )
                .unwrap();
        }
        let changed_slots = slots.commit().unwrap();
        nodes.apply(&w.storage_owner, &changed_slots);
        let created_owner = keccak256([250u8]);
        let created_slots: Vec<(B256, Vec<u8>)> = (0..30u64)
            .map(|i| {
                (
                    keccak256([i as u8, 3]),
                    alloy_rlp::encode(U256::from(i + 1)),
                )
            })
            .collect();
        let created_root = commit(&mut nodes, created_owner, &created_slots);
        nodes.nodes.retain(|(owner, _), _| *owner != w.small_owner);
        let mut accounts = Trie::new(&w.nodes, ACCOUNTS);
        for (i, (k, _)) in w.accounts.iter().enumerate() {
            if *k == w.small_owner || (i % 7 == 3 && *k != w.storage_owner) {
                accounts.remove(k).unwrap();
            } else if *k == w.storage_owner {
                let leaf = full(8, 1, changed_slots.root, keccak256([1u8]));
                accounts.insert(k, leaf).unwrap();
            } else if i % 7 == 5 {
                accounts
                    .insert(k, full(1, 5000 + i as u64, EMPTY_ROOT, KECCAK256_EMPTY))
                    .unwrap();
            }
        }
        for i in 250..=255u8 {
            let root = if i == 250 { created_root } else { EMPTY_ROOT };
            accounts
                .insert(&keccak256([i]), full(0, i as u64, root, KECCAK256_EMPTY))
                .unwrap();
        }
        let changed_accounts = accounts.commit().unwrap();
        nodes.apply(&ACCOUNTS, &changed_accounts);

        let mut undo = Undo::default();
        let mut batch = moat_storage::WriteBatch::new();
        for ((owner, path), rlp) in &nodes.nodes {
            batch.set_trie_node(*owner, path.clone(), Some(rlp.clone()));
        }
        for key in w.nodes.nodes.keys().chain(nodes.nodes.keys()) {
            let (old, new) = (w.nodes.nodes.get(key), nodes.nodes.get(key));
            if old != new && key.0 != w.small_owner {
                undo.trie.push((key.0, key.1.clone(), old.cloned()));
            }
        }
        let small: Vec<(Vec<u8>, Vec<u8>)> = w
            .nodes
            .nodes
            .iter()
            .filter(|((owner, _), _)| *owner == w.small_owner)
            .map(|((_, path), rlp)| (path.clone(), rlp.clone()))
            .collect();
        undo.wiped_tries.push((w.small_owner, small));
        let store = Store::in_memory();
        store.commit(batch).unwrap();
        (store, undo, nodes)
    }

    #[test]
    fn an_older_root_is_served_as_its_own_trie_walked() {
        let w = world();
        let (store, undo, new_nodes) = next_block(&w);
        let old = StateAtBlock::with_undo(store.clone(), [undo]);
        let head = StateAtBlock::head(store);
        assert_eq!(moat_trie::root(&old, &ACCOUNTS).unwrap(), w.root);
        let new_root = moat_trie::root(&new_nodes, &ACCOUNTS).unwrap();
        assert_ne!(new_root, w.root);
        assert_eq!(moat_trie::root(&head, &ACCOUNTS).unwrap(), new_root);

        let max = B256::repeat_byte(0xff);
        let created = keccak256([250u8]);
        let mut origins = vec![B256::ZERO, max];
        let keys = w.accounts.iter().chain(&w.slots).map(|(k, _)| *k);
        let new_keys = new_nodes.nodes.keys().filter(|(_, p)| p.len() == 64);
        for k in keys
            .chain(new_keys.map(|(_, p)| range::key_of(p)))
            .step_by(3)
        {
            origins.push(k);
            let mut up = k;
            up[31] = up[31].wrapping_add(1);
            origins.push(up);
        }
        // The old state scanned through its undo record against the old trie walked
        // in memory; the head likewise against the new one.
        for (state, truth) in [(&old, &w.nodes), (&head, &new_nodes)] {
            for owner in [ACCOUNTS, w.storage_owner, w.small_owner, created] {
                for origin in &origins {
                    let collect = |source: &dyn NodeSource, scan: Option<&StateAtBlock>| {
                        let mut out = Vec::new();
                        leaves_from(source, scan, &owner, origin, |k, v| {
                            out.push((k, v.to_vec()));
                            true
                        })
                        .unwrap();
                        out
                    };
                    assert_eq!(
                        collect(state, Some(state)),
                        collect(truth, None),
                        "{owner} from {origin}"
                    );
                }
            }
            for bytes in [0, 700, 5000, 1 << 20] {
                for origin in &origins[..60] {
                    let served =
                        account_range(state, Some(state), origin, &max, bytes, later()).unwrap();
                    let walked = account_range(truth, None, origin, &max, bytes, later()).unwrap();
                    assert_eq!(served, walked, "accounts from {origin}, {bytes} bytes");
                }
                for (origin, limit) in [(B256::ZERO, max), (w.slots[10].0, w.slots[30].0)] {
                    let owners = [w.storage_owner, w.small_owner, created];
                    let served = storage_ranges(
                        state,
                        Some(state),
                        &owners,
                        &origin,
                        &limit,
                        bytes,
                        later(),
                    )
                    .unwrap();
                    let walked =
                        storage_ranges(truth, None, &owners, &origin, &limit, bytes, later())
                            .unwrap();
                    assert_eq!(served, walked, "slots from {origin}, {bytes} bytes");
                }
            }
            let paths: Vec<Vec<Bytes>> = [vec![0x00], vec![0x13], vec![0x00, 0x45]]
                .into_iter()
                .map(|p| vec![Bytes::from(p)])
                .chain([
                    vec![Bytes::from(w.small_owner.to_vec()), Bytes::from(vec![0x00])],
                    vec![Bytes::from(created.to_vec()), Bytes::from(vec![0x00])],
                ])
                .collect();
            assert_eq!(
                trie_nodes(state, &paths, 1 << 20, later()).unwrap(),
                trie_nodes(truth, &paths, 1 << 20, later()).unwrap()
            );
        }
        // The old range holds what the head lost and not what it gained.
        let (all, proof) =
            account_range(&old, Some(&old), &B256::ZERO, &max, 1 << 20, later()).unwrap();
        assert_eq!(all.len(), 200);
        assert!(all.iter().any(|(k, _)| *k == w.small_owner));
        assert!(all.iter().all(|(k, _)| *k != created));
        assert!(!verify_accounts(w.root, &B256::ZERO, &all, &proof));
    }

    #[test]
    fn byte_codes_are_capped() {
        let code = |h: &B256| (*h == B256::repeat_byte(1)).then(|| Bytes::from(vec![0x60; 100]));
        let known = B256::repeat_byte(1);
        assert_eq!(
            byte_codes(code, &[known, B256::ZERO, known], 10_000).len(),
            2
        );
        assert_eq!(byte_codes(code, &[known, known, known], 0).len(), 1);
        assert_eq!(
            byte_codes(code, &[KECCAK256_EMPTY; 3], 0),
            vec![Bytes::new(); 3]
        );
        assert!(byte_codes(code, &[B256::repeat_byte(0x77)], 100).is_empty());
        let many = vec![KECCAK256_EMPTY; 5000];
        assert_eq!(byte_codes(code, &many, 1 << 20).len(), MAX_CODE_LOOKUPS);
    }

    #[test]
    fn path_nibbles_take_at_most_a_whole_key() {
        let even = |n: usize| [vec![0x00], vec![0xab; n]].concat();
        let odd = |n: usize| [vec![0x1c], vec![0xab; n]].concat();
        assert_eq!(path_nibbles(&even(32)).map(|p| p.len()), Some(64));
        assert_eq!(path_nibbles(&odd(31)).map(|p| p.len()), Some(63));
        assert_eq!(path_nibbles(&odd(31)).unwrap()[0], 0x0c);
        // 65 nibbles and more name no node, whatever the string's size.
        assert_eq!(path_nibbles(&even(33)), None);
        assert_eq!(path_nibbles(&odd(32)), None);
        assert_eq!(path_nibbles(&even(1 << 20)), None);
        assert_eq!(path_nibbles(&[]), Some(Vec::new()));
        assert_eq!(path_nibbles(&[0x05]), None, "even flag with a nibble set");
    }

    #[test]
    fn trie_nodes_by_path() {
        let w = world();
        let root_path = vec![Bytes::from(vec![0x00])];
        let nodes = trie_nodes(&w.nodes, std::slice::from_ref(&root_path), 5000, later()).unwrap();
        assert_eq!(nodes.len(), 1);
        assert_eq!(keccak256(&nodes[0]), w.root);
        // A path no node starts at, and a nonsense one: empty items.
        let long = vec![Bytes::from((0u8..60).collect::<Vec<_>>())];
        let leafy = vec![Bytes::from(vec![0x20])];
        let nodes = trie_nodes(&w.nodes, &[long, leafy], 5000, later()).unwrap();
        assert_eq!(nodes, vec![Bytes::new(), Bytes::new()]);
        // One nibble down: the child hashed in the root.
        let child = vec![Bytes::from(vec![0x13])];
        let nodes = trie_nodes(&w.nodes, &[child], 5000, later()).unwrap();
        let root_rlp = w.nodes.node(&ACCOUNTS, &[]).unwrap().unwrap();
        assert!(
            root_rlp
                .windows(32)
                .any(|win| win == keccak256(&nodes[0]).as_slice())
        );
        // A storage trie's root through its account; an unknown account gives nothing.
        let storage = vec![
            Bytes::from(w.storage_owner.to_vec()),
            Bytes::from(vec![0x00]),
        ];
        let unknown = vec![Bytes::from(vec![1u8]), Bytes::from(vec![0x00])];
        let nodes = trie_nodes(&w.nodes, &[storage, unknown], 5000, later()).unwrap();
        assert_eq!(nodes.len(), 1);
        assert_eq!(
            keccak256(&nodes[0]),
            moat_trie::root(&w.nodes, &w.storage_owner).unwrap()
        );
        // The byte budget stops after the node that passes it.
        let many = vec![root_path; 10];
        assert_eq!(trie_nodes(&w.nodes, &many, 1, later()).unwrap().len(), 1);
    }
}
