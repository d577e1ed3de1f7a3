//! The tries built from the downloaded flat state: every storage trie, then the account
//! trie (or only its root branch, when the download built the rest), each root checked
//! against the pivot's; the pivot then made the head in one commit with the record
//! removed. Before healing the same build runs unchecked.

use super::SnapError;
use super::chunk_trie::root_from_chunks;
use super::progress::{Progress, b256_after};
use alloy_primitives::{B256, keccak256};
use moat_blockchain::state_root::account_leaf;
use moat_common::block::Block;
use moat_storage::{Account, StoreError, WriteBatch};
use moat_trie::{EMPTY_ROOT, SortedBuilder};
use std::time::Instant;

/// Accounts read from the store at a time while the tries are built.
pub(super) const ACCOUNTS_PAGE: usize = 8192;

/// Trie nodes per commit while the tries are built.
pub(super) const NODES_PER_COMMIT: usize = 50_000;

/// Builds every storage trie and the account trie from the downloaded ranges (or only
/// the account trie's root, when the download built the rest), checks their roots, and
/// writes the pivot as the head; the last commit removes the record.
pub(super) fn build_tries(
    store: &moat_storage::Store,
    p: &Progress,
    pivot: &Block,
) -> Result<(), SnapError> {
    let started = Instant::now();
    // The account trie below the root is held when the download built it and its root
    // is a branch (fewer than two chunks with accounts: built whole).
    let held = p.trie_during_download() && root_from_chunks(store)?.is_some();
    let (accounts, (storage_tries, _, mut batch)) = build_all(store, Some(p.state_root), held)?;
    let header = &pivot.header;
    let hash = p.pivot_hash;
    batch
        .put_header(hash, header.number, header.encoded())
        .put_body(hash, pivot.encode_body())
        .set_canonical(header.number, hash)
        .set_head(header.number, hash)
        .set_snap_progress(None)
        .set_snap_heal(None);
    store.commit(batch)?;
    tracing::info!(
        storage_tries,
        accounts,
        account_trie = if held {
            "built during the download"
        } else {
            "built now"
        },
        secs = format!("{:.1}", started.elapsed().as_secs_f64()),
        "snap sync: tries built, root matches the pivot's"
    );
    Ok(())
}

/// Builds the tries of the flat state held, whatever roots they come to (the account
/// trie's root node is not written: the store keeps genesis' root until the healed
/// tries are built checked); returns the account trie's root.
pub(super) fn build_unchecked(
    store: &moat_storage::Store,
    p: &Progress,
) -> Result<B256, SnapError> {
    let (accounts, (storage_tries, root, batch)) = build_all(store, None, false)?;
    store.commit(batch)?;
    tracing::info!(
        storage_tries,
        accounts,
        pivot = p.pivot_number,
        "snap sync: tries of the download built, healing them to the pivot's root"
    );
    Ok(root)
}

pub(super) type Built = (u64, B256, WriteBatch);

/// Visits the downloaded accounts in key order, [`ACCOUNTS_PAGE`] at a time (no read
/// held open while `visit` runs, and no more than a page in memory); returns how many.
pub(super) fn for_each_account_page(
    store: &moat_storage::Store,
    mut visit: impl FnMut(&[(B256, Account)]) -> Result<(), SnapError>,
) -> Result<u64, SnapError> {
    let (mut from, mut count) = (B256::ZERO, 0u64);
    loop {
        let mut page = Vec::with_capacity(ACCOUNTS_PAGE);
        store.snap_accounts_from(&from, |h, a| {
            page.push((h, a));
            page.len() < ACCOUNTS_PAGE
        })?;
        count += page.len() as u64;
        visit(&page)?;
        match page.last().and_then(|l| b256_after(&l.0)) {
            Some(next) if page.len() == ACCOUNTS_PAGE => from = next,
            _ => return Ok(count),
        }
    }
}

/// The tries built from the flat state ([`build_nodes`]), their nodes committed on a
/// thread of their own while the next ones are built; also how many accounts there are.
pub(super) fn build_all(
    store: &moat_storage::Store,
    expected: Option<B256>,
    held: bool,
) -> Result<(u64, Built), SnapError> {
    let (tx, rx) = std::sync::mpsc::sync_channel::<WriteBatch>(2);
    let (built, written) = std::thread::scope(|scope| {
        let writer = scope.spawn(move || -> Result<(), StoreError> {
            for batch in rx {
                store.commit_bulk(batch)?;
            }
            Ok(())
        });
        let built = build_nodes(store, expected, held, tx);
        let written = writer
            .join()
            .unwrap_or_else(|_| Err(StoreError::Db("the trie writer panicked".into())));
        (built, written)
    });
    written?;
    built
}

/// Builds the storage tries, then the account trie, of the downloaded accounts (read a
/// page at a time), sending their nodes to `tx` in batches; returns how many accounts
/// and storage tries there were, the account trie's root, and the last nodes (the
/// account trie's root among them) for the caller's final commit. With `held` the
/// account trie below its root was built during the download: only the root is made
/// (from the 16 nodes at `[i]`), and nothing is cleared (genesis' tries went when the
/// sync started); without, the first batch clears every trie but the account trie's
/// root node. With `expected` (the pivot's state root) every root is checked and the
/// last batch drops the by-address state; without, nothing is checked and the account
/// trie's root node is left out.
pub(super) fn build_nodes(
    store: &moat_storage::Store,
    expected: Option<B256>,
    held: bool,
    tx: std::sync::mpsc::SyncSender<WriteBatch>,
) -> Result<(u64, Built), SnapError> {
    let gone = || SnapError::Store(StoreError::Db("the trie writer stopped".into()));
    // The store's trie must be exactly the pivot's: genesis' nodes go first, all but the
    // account trie's root, which stays until the last commit replaces it (a node killed
    // meanwhile opens at genesis' root and resumes this stage the same way). Genesis'
    // by-address state goes in that last commit.
    if !held {
        let mut clear = WriteBatch::new();
        clear.clear_tries_but_root();
        tx.send(clear).map_err(|_| gone())?;
    }
    let mut batch = WriteBatch::new();
    let mut in_batch = 0usize;
    let mut storage_tries = 0u64;
    let accounts = for_each_account_page(store, |page| {
        for (hash, account) in page {
            if account.storage_root == EMPTY_ROOT {
                continue;
            }
            let mut builder = SortedBuilder::new();
            let mut err = None;
            store.snap_slots_of(hash, |slot, value| {
                if err.is_none()
                    && let Err(e) = builder.push(&slot, alloy_rlp::encode(value))
                {
                    err = Some(e.to_string());
                }
            })?;
            if let Some(e) = err {
                return Err(SnapError::Mismatch(e));
            }
            let (root, nodes) = builder.finish();
            if expected.is_some() && root != account.storage_root {
                return Err(SnapError::Mismatch(format!(
                    "storage trie of {hash}: {root}, expected {}",
                    account.storage_root
                )));
            }
            storage_tries += 1;
            in_batch += nodes.len();
            for (path, rlp) in nodes {
                batch.set_trie_node(*hash, path, Some(rlp));
            }
            if in_batch >= NODES_PER_COMMIT {
                tx.send(std::mem::take(&mut batch)).map_err(|_| gone())?;
                in_batch = 0;
            }
        }
        Ok(())
    })?;
    let (root, nodes) = if held {
        let rlp = root_from_chunks(store)?
            .ok_or_else(|| SnapError::Mismatch("no root branch over the chunks".into()))?;
        (keccak256(&rlp), vec![(Vec::new(), rlp)])
    } else {
        let mut builder = SortedBuilder::new();
        for_each_account_page(store, |page| {
            for (hash, account) in page {
                builder
                    .push(hash, account_leaf(account))
                    .map_err(|e| SnapError::Mismatch(e.to_string()))?;
            }
            if builder.pending_nodes() >= NODES_PER_COMMIT {
                for (path, rlp) in builder.take_nodes() {
                    batch.set_trie_node(B256::ZERO, path, Some(rlp));
                }
                tx.send(std::mem::take(&mut batch)).map_err(|_| gone())?;
            }
            Ok(())
        })?;
        builder.finish()
    };
    let Some(expected) = expected else {
        for (path, rlp) in nodes {
            if !path.is_empty() {
                batch.set_trie_node(B256::ZERO, path, Some(rlp));
            }
        }
        return Ok((accounts, (storage_tries, root, batch)));
    };
    if root != expected {
        return Err(SnapError::Mismatch(format!(
            "account trie {root}, expected {expected}"
        )));
    }
    if !nodes.iter().any(|(path, _)| path.is_empty()) {
        // An empty state has no root node: genesis' must go.
        batch.set_trie_node(B256::ZERO, Vec::new(), None);
    }
    for (path, rlp) in nodes {
        batch.set_trie_node(B256::ZERO, path, Some(rlp));
    }
    batch.clear_flat_state();
    Ok((accounts, (storage_tries, root, batch)))
}

/// The root of the storage trie the downloaded slots of `owner` build, and how many
/// slots there are.
pub(super) fn local_storage_root(
    store: &moat_storage::Store,
    owner: &B256,
) -> Result<(B256, usize), SnapError> {
    let mut builder = SortedBuilder::new();
    let (mut slots, mut bad) = (0usize, false);
    store.snap_slots_of(owner, |slot, value| {
        slots += 1;
        bad |= builder.push(&slot, alloy_rlp::encode(value)).is_err();
        // The nodes are not kept: only the root is wanted.
        builder.take_nodes();
    })?;
    if bad {
        return Ok((B256::ZERO, slots));
    }
    Ok((builder.finish().0, slots))
}
