//! The download stages, in order: account ranges over the 16 chunks of the hash
//! space (the account trie built below its root as they come, when the pivot never
//! moved), storage ranges for every account with storage, then the codes not yet
//! held. Each answer is checked (`verify.rs`) and written with the progress record
//! in one commit.

use super::build::local_storage_root;
use super::chunk_trie::{TrieJob, TrieWriter};
use super::progress::{Progress, b256_after, chunks_left};
use super::requests::{Requests, Work};
use super::verify::{check_accounts, check_storage};
use super::{Run, SnapError};
use crate::source::BlockSource;
use alloy_primitives::{B256, KECCAK256_EMPTY, keccak256};
use moat_p2p::snap::SnapMessage;
use moat_storage::{Account, WriteBatch};
use moat_trie::EMPTY_ROOT;
use std::collections::{HashSet, VecDeque};
use std::time::Instant;

/// Code hashes per bytecode request.
pub(super) const CODE_BATCH: usize = 256;

impl<S: BlockSource> Run<'_, S> {
    /// Asks the chunks not done and not in flight of the idle peers.
    pub(super) fn ask_chunks(
        &mut self,
        set: &mut Requests,
        p: &Progress,
        in_flight: &mut HashSet<usize>,
    ) {
        while let Some(i) =
            (0..p.chunks.len()).find(|&i| !p.chunks[i].done && !in_flight.contains(&i))
        {
            let Some(peer) = self.idle_peer() else { break };
            let c = p.chunks[i];
            in_flight.insert(i);
            let work = Work::Accounts {
                chunk: i,
                origin: c.next,
                limit: c.limit,
            };
            self.spawn(set, peer, work, p.state_root);
        }
    }

    pub(super) async fn accounts(&mut self, p: &mut Progress) -> Result<(), SnapError> {
        let mut set = Requests::new();
        let mut in_flight: HashSet<usize> = HashSet::new();
        let mut waited = Instant::now();
        // The account trie's nodes are built and every answer committed on threads of
        // their own, in order, while the next answers are checked.
        let mut writer = if p.trie_during_download() {
            Some(TrieWriter::start(self.chain.store().clone())?)
        } else {
            None
        };
        while p.chunks.iter().any(|c| !c.done) {
            self.ask_chunks(&mut set, p, &mut in_flight);
            let Some(a) = self.next(&mut set, waited).await? else {
                continue;
            };
            let Work::Accounts { chunk, .. } = a.work else {
                continue;
            };
            // Other chunks go to the idle peers (the one that answered among them)
            // before this answer is checked and written: a single peer serves the next
            // range meanwhile.
            self.ask_chunks(&mut set, p, &mut in_flight);
            in_flight.remove(&chunk);
            let (accounts, proof) = match a.result {
                Ok(SnapMessage::AccountRange {
                    accounts, proof, ..
                }) => (accounts, proof),
                Ok(_) => {
                    self.fault(a.peer, "not an account range");
                    continue;
                }
                Err(_) => {
                    self.rest(a.peer);
                    continue;
                }
            };
            if accounts.is_empty() && proof.is_empty() {
                self.empty(a.peer)?;
                continue;
            }
            let c = p.chunks[chunk];
            match check_accounts(p.state_root, &c.next, &accounts, &proof) {
                Err(why) => self.fault(a.peer, &why),
                Ok((decoded, more)) => {
                    self.useful();
                    waited = Instant::now();
                    let mut batch = WriteBatch::new();
                    let mut size = 0u64;
                    for (hash, account) in &decoded {
                        batch.put_snap_account(*hash, account);
                    }
                    for (_, slim) in &accounts {
                        size += 32 + slim.len() as u64;
                    }
                    let last = decoded.last().map(|d| d.0);
                    let chunk_ref = &mut p.chunks[chunk];
                    match last.and_then(|l| (more && l < c.limit).then(|| b256_after(&l))) {
                        Some(Some(next)) => chunk_ref.next = next,
                        _ => chunk_ref.done = true,
                    }
                    // Accounts outside the chunk's range (past its limit, or before its
                    // start in a whole trie sent without proof) are another's: counted once.
                    let ours: Vec<(B256, Account)> = decoded
                        .into_iter()
                        .filter(|d| c.next <= d.0 && d.0 <= c.limit)
                        .collect();
                    p.accounts += ours.len() as u64;
                    p.bytes += size;
                    match &mut writer {
                        Some(w) => {
                            batch.set_snap_progress(Some(p.encode()));
                            let done = p.chunks[chunk].done;
                            w.send(TrieJob {
                                chunk,
                                at: c,
                                accounts: ours,
                                done,
                                batch,
                            })?;
                            self.publish(p);
                        }
                        None => self.save(p, batch)?,
                    }
                    let left = chunks_left(p);
                    self.line(p, left);
                }
            }
        }
        if let Some(w) = writer {
            let (build, commit) = w.finish()?;
            tracing::info!(
                build_secs = format!("{:.1}", build.as_secs_f64()),
                commit_secs = format!("{:.1}", commit.as_secs_f64()),
                "snap sync: account trie built during the download"
            );
        }
        Ok(())
    }

    pub(super) async fn storage(&mut self, p: &mut Progress) -> Result<(), SnapError> {
        // (hash, storage root) of every account from the cursor on with storage.
        let mut list: Vec<(B256, B256)> = Vec::new();
        let store = self.chain.store().clone();
        store.snap_accounts_from(&p.storage_cursor, |hash, a| {
            if a.storage_root != EMPTY_ROOT {
                list.push((hash, a.storage_root));
            }
            true
        })?;
        // Slots already held (a resumed stage, or a download kept over a new pivot) are
        // kept where they build the account's storage root; others are dropped and
        // downloaded again.
        let (mut kept, mut wipe) = (0usize, WriteBatch::new());
        let mut needed = Vec::with_capacity(list.len());
        for (hash, root) in list {
            let (local, slots) = local_storage_root(&store, &hash)?;
            if local == root {
                kept += 1;
            } else {
                if slots > 0 {
                    wipe.clear_snap_slots(hash);
                }
                needed.push((hash, root));
            }
        }
        store.commit(wipe)?;
        if kept > 0 {
            tracing::info!(kept, "snap sync: storage tries already held kept");
        }
        let list = needed;
        let total = list.len().max(1);
        let mut done = vec![false; list.len()];
        let mut lowest_open = 0usize;
        let mut queue: VecDeque<Work> = list
            .chunks(self.cfg.storage_batch.max(1))
            .enumerate()
            .map(|(i, c)| Work::Storage {
                first: i * self.cfg.storage_batch.max(1),
                accounts: c.to_vec(),
                origin: B256::ZERO,
            })
            .collect();
        let mut set = Requests::new();
        let mut waited = Instant::now();
        while !queue.is_empty() || !set.is_empty() {
            // What fails is asked again (of another peer first: this one rests).
            let answer = self.dispatch(
                &mut set,
                &mut queue,
                p.state_root,
                waited,
                "not a storage range",
                |m| match m {
                    SnapMessage::StorageRanges { slots, proof, .. } => Some((slots, proof)),
                    _ => None,
                },
            );
            let Some((peer, work, (slots, proof))) = answer.await? else {
                continue;
            };
            let Work::Storage {
                first,
                accounts,
                origin,
            } = &work
            else {
                continue;
            };
            let (first, origin) = (*first, *origin);
            // After a pivot move one account's empty answer may say it has no slots at the
            // new root (an account without slots adds no list): it is left to healing,
            // which finds out. Staleness shows in the answers for several accounts.
            if slots.is_empty() && p.heal && accounts.len() == 1 {
                self.skip_storage(p, &list, &mut done, &mut lowest_open, first)?;
                continue;
            }
            if slots.is_empty() {
                self.empty(peer)?;
                queue.push_back(work);
                continue;
            }
            let (decoded, more) = match check_storage(accounts, origin, &slots, &proof) {
                Ok(r) => r,
                // After a pivot move an account's storage root may be an older root's,
                // and an account may be gone at the new root (its list missing, the next
                // ones shifted): the whole tries leading the answer are taken, the first
                // that fails is asked alone and left to healing if it fails again, the
                // rest asked again (a peer that lies costs time, not correctness: healed
                // nodes are checked by hash).
                Err(_) if p.heal && accounts.len() > 1 => {
                    // Each leading trie checked whole, once; lists beyond the accounts
                    // asked (a peer's excess) are never read.
                    let mut whole = Vec::new();
                    for i in 0..slots.len().min(accounts.len()) {
                        let from = if i == 0 { origin } else { B256::ZERO };
                        match check_storage(&accounts[i..=i], from, &slots[i..=i], &[]) {
                            Ok((mut d, _)) => whole.append(&mut d),
                            Err(_) => break,
                        }
                    }
                    if whole.is_empty() {
                        queue.push_back(Work::Storage {
                            first,
                            accounts: vec![accounts[0]],
                            origin,
                        });
                        queue.push_back(Work::Storage {
                            first: first + 1,
                            accounts: accounts[1..].to_vec(),
                            origin: B256::ZERO,
                        });
                        continue;
                    }
                    (whole, false)
                }
                Err(_) if p.heal => {
                    self.skip_storage(p, &list, &mut done, &mut lowest_open, first)?;
                    continue;
                }
                Err(why) => {
                    self.fault(peer, &why);
                    queue.push_back(work);
                    continue;
                }
            };
            self.useful();
            waited = Instant::now();
            let mut batch = WriteBatch::new();
            let answered = decoded.len();
            // Where the last answered account's trie goes on (after its last slot), when
            // the proof shows more: a trie that holds more has a last slot below the top.
            let next = decoded
                .last()
                .and_then(|s| s.last())
                .and_then(|(s, _)| b256_after(s))
                .filter(|_| more);
            for (i, account_slots) in decoded.iter().enumerate() {
                let owner = accounts[i].0;
                for (slot, value) in account_slots {
                    batch.put_snap_slot(owner, *slot, *value);
                    p.bytes += 64;
                }
                p.slots += account_slots.len() as u64;
                let partial = i + 1 == answered && next.is_some();
                if !partial {
                    done[first + i] = true;
                }
            }
            if let Some(next) = next {
                let i = answered - 1;
                queue.push_front(Work::Storage {
                    first: first + i,
                    accounts: vec![accounts[i]],
                    origin: next,
                });
            }
            // Accounts the answer did not reach are asked again.
            if answered < accounts.len() {
                queue.push_back(Work::Storage {
                    first: first + answered,
                    accounts: accounts[answered..].to_vec(),
                    origin: B256::ZERO,
                });
            }
            while lowest_open < done.len() && done[lowest_open] {
                lowest_open += 1;
            }
            p.storage_cursor = list
                .get(lowest_open)
                .map_or(B256::repeat_byte(0xff), |a| a.0);
            self.save(p, batch)?;
            let left = (done.len() - lowest_open) as f64 / total as f64;
            self.line(p, left);
        }
        Ok(())
    }

    pub(super) async fn codes(&mut self, p: &mut Progress) -> Result<(), SnapError> {
        let store = self.chain.store().clone();
        let mut wanted: Vec<B256> = Vec::new();
        let mut seen = HashSet::new();
        let mut err = None;
        store.snap_accounts_from(&B256::ZERO, |_, a| {
            if a.code_hash != KECCAK256_EMPTY && seen.insert(a.code_hash) {
                match store.code(&a.code_hash) {
                    Ok(Some(_)) => {}
                    Ok(None) => wanted.push(a.code_hash),
                    Err(e) => {
                        err = Some(e);
                        return false;
                    }
                }
            }
            true
        })?;
        if let Some(e) = err {
            return Err(e.into());
        }
        let total = wanted.len().max(1);
        let mut left = wanted.len();
        if self.healing {
            self.heal.pending_codes = left as u64;
        }
        let mut queue: VecDeque<Work> = wanted
            .chunks(CODE_BATCH)
            .map(|c| Work::Codes { hashes: c.to_vec() })
            .collect();
        let mut set = Requests::new();
        let mut waited = Instant::now();
        while !queue.is_empty() || !set.is_empty() {
            let answer = self.dispatch(
                &mut set,
                &mut queue,
                p.state_root,
                waited,
                "not bytecodes",
                |m| match m {
                    SnapMessage::ByteCodes { codes, .. } => Some(codes),
                    _ => None,
                },
            );
            let Some((peer, work, codes)) = answer.await? else {
                continue;
            };
            let Work::Codes { hashes } = &work else {
                continue;
            };
            if codes.is_empty() {
                // Codes are not served by root: an empty answer says nothing of the
                // pivot, so the peer is only rested (no answer at all ends in NoPeers,
                // the stage resumed by the next attempt).
                self.rest(peer);
                queue.push_back(work);
                continue;
            }
            // Every code must be one asked for and not yet given; nothing is counted or
            // written before the whole answer passes.
            let mut missing: HashSet<B256> = hashes.iter().copied().collect();
            let mut batch = WriteBatch::new();
            let (mut bytes, mut count) = (0u64, 0u64);
            let mut bad = false;
            for code in codes {
                let h = keccak256(&code);
                if !missing.remove(&h) {
                    bad = true;
                    break;
                }
                bytes += code.len() as u64;
                count += 1;
                batch.put_code(h, code);
            }
            if bad {
                self.fault(peer, "a code not asked for, or given twice");
                queue.push_back(work);
                continue;
            }
            p.bytes += bytes;
            p.codes += count;
            self.useful();
            waited = Instant::now();
            left -= hashes.len() - missing.len();
            if self.healing {
                self.heal.codes += count;
                self.heal.pending_codes = left as u64;
            }
            if !missing.is_empty() {
                queue.push_back(Work::Codes {
                    hashes: missing.into_iter().collect(),
                });
            }
            self.save(p, batch)?;
            self.line(p, left as f64 / total as f64);
        }
        Ok(())
    }

    /// Leaves the storage of account `i` of the storage stage's `list` to healing.
    pub(super) fn skip_storage(
        &mut self,
        p: &mut Progress,
        list: &[(B256, B256)],
        done: &mut [bool],
        lowest_open: &mut usize,
        i: usize,
    ) -> Result<(), SnapError> {
        done[i] = true;
        while *lowest_open < done.len() && done[*lowest_open] {
            *lowest_open += 1;
        }
        p.storage_cursor = list
            .get(*lowest_open)
            .map_or(B256::repeat_byte(0xff), |a| a.0);
        self.save(p, WriteBatch::new())
    }
}
