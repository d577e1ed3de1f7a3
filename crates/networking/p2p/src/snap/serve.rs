//! Answers to snap/1 requests from a state: account and storage ranges with their
//! boundary proofs, bytecodes and trie nodes, within go-ethereum's limits.

use super::account::slim_account_into;
use super::message::padded_hash;
use crate::serve::SOFT_RESPONSE_LIMIT;
use alloy_primitives::{B256, Bytes, KECCAK256_EMPTY};
use moat_blockchain::history::StateAtBlock;
use moat_common::rlp;
use moat_trie::{NodeSource, TrieError, range};
use std::time::{Duration, Instant};

/// Most codes looked up for one request.
pub const MAX_CODE_LOOKUPS: usize = 1024;
/// Most trie-node reads for one `GetTrieNodes`.
pub const MAX_TRIE_NODE_LOOKUPS: usize = 1024;
/// How long one request may take; past it the answer is sent as it stands.
pub const TIME_BUDGET: Duration = Duration::from_secs(5);
/// How far a storage answer may pass the byte budget to finish an account's slots
/// (go-ethereum's `stateLookupSlack`): a tenth.
const STORAGE_SLACK_DIVISOR: u64 = 10;

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snap::account::full_account;
    use crate::snap::account::tests::full;
    use alloy_primitives::{U256, keccak256};
    use moat_blockchain::undo::Undo;
    use moat_storage::Store;
    use moat_trie::range::verify_range_proof;
    use moat_trie::{EMPTY_ROOT, MemoryNodes, Trie};

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
