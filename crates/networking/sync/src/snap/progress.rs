//! What a snap sync has done: the progress record the store keeps ([`Progress`],
//! committed with every range it covers), the figures `eth_syncing` shows
//! ([`SnapFigures`], [`HealFigures`]), and the progress lines with their ETA.

use super::{Run, SnapError};
use crate::source::BlockSource;
use alloy_primitives::{B256, U256};
use moat_p2p::SealedHeader;
use moat_storage::WriteBatch;
use parking_lot::Mutex;
use std::sync::Arc;
use std::time::Instant;

/// Chunks the account hash space is split into: one per first nibble of the key, so
/// that the account trie below path `[i]` is chunk `i`'s alone
/// ([`ChunkTrie`](super::chunk_trie::ChunkTrie)).
pub(super) const CHUNKS: usize = 16;

/// Version byte of the progress record (1: without the healing flag, still read).
pub(super) const RECORD_VERSION: u8 = 2;

/// The stage a snap sync is at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Downloading account ranges (`GetAccountRange`), chunk by chunk.
    Accounts,
    /// Downloading the storage of the accounts held (`GetStorageRanges`).
    Storage,
    /// Downloading the bytecodes not yet held (`GetByteCodes`).
    Codes,
    /// Building the tries from the download and checking them against the pivot's state root.
    Tries,
}

impl Stage {
    fn byte(self) -> u8 {
        match self {
            Stage::Accounts => 0,
            Stage::Storage => 1,
            Stage::Codes => 2,
            Stage::Tries => 3,
        }
    }

    fn from_byte(b: u8) -> Option<Self> {
        match b {
            0 => Some(Stage::Accounts),
            1 => Some(Stage::Storage),
            2 => Some(Stage::Codes),
            3 => Some(Stage::Tries),
            _ => None,
        }
    }

    /// The stage's name in progress lines and logs.
    pub fn name(self) -> &'static str {
        match self {
            Stage::Accounts => "accounts",
            Stage::Storage => "storage",
            Stage::Codes => "codes",
            Stage::Tries => "tries",
        }
    }
}

/// One chunk of the account hash space: `next` is where its download goes on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chunk {
    /// First account hash not yet downloaded.
    pub next: B256,
    /// Last account hash of the chunk (inclusive).
    pub limit: B256,
    /// Whether the chunk is downloaded up to `limit`.
    pub done: bool,
}

/// What the store keeps of a snap sync under way.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Progress {
    /// Block number of the pivot whose state is downloaded.
    pub pivot_number: u64,
    /// Block hash of the pivot.
    pub pivot_hash: B256,
    /// The pivot's state root, which every range is proven against.
    pub state_root: B256,
    /// The stage the download is at (where a restart resumes).
    pub stage: Stage,
    /// The chunks of the account hash space, in order (16 for a new record).
    pub chunks: Vec<Chunk>,
    /// Every account whose hash is below this has all its storage.
    pub storage_cursor: B256,
    /// Accounts downloaded so far.
    pub accounts: u64,
    /// Storage slots downloaded so far.
    pub slots: u64,
    /// Bytecodes downloaded so far.
    pub codes: u64,
    /// Bytes downloaded so far (slim accounts with their hashes, 64 per slot, code lengths).
    pub bytes: u64,
    /// The pivot moved during the download: the ranges held come from older roots, so
    /// the tries built from them are healed to the pivot's root.
    pub heal: bool,
}

pub(super) fn b256_after(h: &B256) -> Option<B256> {
    let v = U256::from_be_bytes(h.0);
    v.checked_add(U256::from(1))
        .map(|n| B256::from(n.to_be_bytes()))
}

/// The first key of chunk `i`: the keys whose first nibble is `i`.
pub(super) fn chunk_start(i: usize) -> B256 {
    let mut b = [0u8; 32];
    b[0] = (i as u8) << 4;
    B256::from(b)
}

/// The last key of chunk `i`.
pub(super) fn chunk_limit(i: usize) -> B256 {
    let mut b = [0xffu8; 32];
    b[0] = ((i as u8) << 4) | 0x0f;
    B256::from(b)
}

impl Progress {
    pub(super) fn new(pivot: &SealedHeader) -> Self {
        let chunks = (0..CHUNKS)
            .map(|i| Chunk {
                next: chunk_start(i),
                limit: chunk_limit(i),
                done: false,
            })
            .collect();
        Self {
            pivot_number: pivot.number(),
            pivot_hash: pivot.hash,
            state_root: pivot.header.state_root,
            stage: Stage::Accounts,
            chunks,
            storage_cursor: B256::ZERO,
            accounts: 0,
            slots: 0,
            codes: 0,
            bytes: 0,
            heal: false,
        }
    }

    /// Whether the store's tries below the root are no longer genesis': a record whose
    /// chunks are the 16 first nibbles clears them in the commit that starts it (an
    /// older record's chunks split the space otherwise, and its tries are replaced only
    /// when they are built after the download). Genesis' state can then no longer be
    /// executed on: the sync must finish by snap.
    pub fn tries_replaced(&self) -> bool {
        self.chunks.len() == CHUNKS
            && (self.chunks.iter().enumerate()).all(|(i, c)| c.limit == chunk_limit(i))
    }

    /// Whether the account trie is built while the ranges come (below the root: each
    /// chunk's subtrie with the accounts it writes): the tries are replaced and the
    /// pivot never moved (healing builds the tries of a moved download whole).
    pub fn trie_during_download(&self) -> bool {
        !self.heal && self.tries_replaced()
    }

    /// The record as the store keeps it (version byte first); [`Progress::decode`] reads it back.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = vec![RECORD_VERSION];
        out.extend_from_slice(&self.pivot_number.to_be_bytes());
        out.extend_from_slice(self.pivot_hash.as_slice());
        out.extend_from_slice(self.state_root.as_slice());
        out.push(self.stage.byte());
        out.push(self.chunks.len() as u8);
        for c in &self.chunks {
            out.extend_from_slice(c.next.as_slice());
            out.extend_from_slice(c.limit.as_slice());
            out.push(c.done as u8);
        }
        out.extend_from_slice(self.storage_cursor.as_slice());
        for n in [self.accounts, self.slots, self.codes, self.bytes] {
            out.extend_from_slice(&n.to_be_bytes());
        }
        out.push(self.heal as u8);
        out
    }

    /// `None` for a record this version does not read (the sync then starts over).
    pub fn decode(mut b: &[u8]) -> Option<Self> {
        let u64_of = |s: &[u8]| u64::from_be_bytes(s.try_into().unwrap_or_default());
        let version = take(&mut b, 1)?[0];
        if version != 1 && version != RECORD_VERSION {
            return None;
        }
        let pivot_number = u64_of(take(&mut b, 8)?);
        let pivot_hash = B256::from_slice(take(&mut b, 32)?);
        let state_root = B256::from_slice(take(&mut b, 32)?);
        let stage = Stage::from_byte(take(&mut b, 1)?[0])?;
        let n = take(&mut b, 1)?[0] as usize;
        let mut chunks = Vec::with_capacity(n);
        for _ in 0..n {
            chunks.push(Chunk {
                next: B256::from_slice(take(&mut b, 32)?),
                limit: B256::from_slice(take(&mut b, 32)?),
                done: take(&mut b, 1)?[0] != 0,
            });
        }
        let storage_cursor = B256::from_slice(take(&mut b, 32)?);
        let mut n = [0u64; 4];
        for v in &mut n {
            *v = u64_of(take(&mut b, 8)?);
        }
        let heal = version == RECORD_VERSION && take(&mut b, 1)?[0] != 0;
        b.is_empty().then_some(Self {
            pivot_number,
            pivot_hash,
            state_root,
            stage,
            chunks,
            storage_cursor,
            accounts: n[0],
            slots: n[1],
            codes: n[2],
            bytes: n[3],
            heal,
        })
    }
}

/// The next `n` bytes of a record being decoded (the progress record, healing's), `b`
/// moved past them; `None` when fewer are left.
pub(super) fn take<'a>(b: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
    let (head, rest) = b.split_at_checked(n)?;
    *b = rest;
    Some(head)
}

/// What `eth_syncing` and the progress lines show of a snap sync.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnapFigures {
    /// Block number of the pivot.
    pub pivot: u64,
    /// The target's number (the pivot's after a resume, until the target is walked).
    pub highest: u64,
    /// The stage the download is at.
    pub stage: Stage,
    /// Accounts downloaded (`eth_syncing`'s `syncedAccounts`).
    pub accounts: u64,
    /// Storage slots downloaded (`syncedStorage`).
    pub slots: u64,
    /// Bytecodes downloaded (`syncedBytecodes`).
    pub codes: u64,
    /// Bytes downloaded, as counted in [`Progress::bytes`].
    pub bytes: u64,
    /// Whether this sync took up a record left by an earlier run.
    pub resumed: bool,
    /// Healing after a pivot move (zero without one).
    pub heal: HealFigures,
}

/// What healing did and has left to do (geth's `healedTrienodes`, `healedTrienodeBytes`,
/// `healedBytecodes`, `healingTrienodes`, `healingBytecode`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HealFigures {
    /// Trie nodes taken (`healedTrienodes`).
    pub nodes: u64,
    /// Bytes of the trie nodes taken (`healedTrienodeBytes`).
    pub node_bytes: u64,
    /// Codes of healed accounts taken.
    pub codes: u64,
    /// Trie nodes known to be needed and not yet taken: asked, queued, or found below
    /// the nodes taken (more are found as healing goes down the tries).
    pub pending_nodes: u64,
    /// Codes of healed accounts not yet taken.
    pub pending_codes: u64,
}

/// The figures of the snap sync running now, shared with the handle.
pub type SnapStatus = Arc<Mutex<Option<SnapFigures>>>;

impl<S: BlockSource> Run<'_, S> {
    pub(super) fn publish(&self, p: &Progress) {
        *self.status.lock() = Some(SnapFigures {
            pivot: p.pivot_number,
            highest: self.highest,
            stage: p.stage,
            accounts: p.accounts,
            slots: p.slots,
            codes: p.codes,
            bytes: p.bytes,
            resumed: self.resumed,
            heal: self.heal,
        });
    }

    /// Commits `batch` with the record, relaxed (durable with the next durable commit).
    pub(super) fn save(&self, p: &Progress, batch: WriteBatch) -> Result<(), SnapError> {
        self.record(p, batch, false)
    }

    /// Writes the record with `batch`, durably or relaxed, and publishes it.
    pub(super) fn record(
        &self,
        p: &Progress,
        mut batch: WriteBatch,
        durable: bool,
    ) -> Result<(), SnapError> {
        batch.set_snap_progress(Some(p.encode()));
        if durable {
            self.chain.store().commit(batch)?;
        } else {
            self.chain.store().commit_bulk(batch)?;
        }
        self.publish(p);
        Ok(())
    }

    /// Moves the record to stage `next`, committed durably: a node killed in that stage
    /// resumes in it, not in the stage before (which the relaxed commits of the last
    /// second could otherwise leave on disk). Then logs the stage done, so that the log
    /// line means the next stage is where a restart resumes.
    pub(super) fn next_stage(&self, p: &mut Progress, next: Stage) -> Result<(), SnapError> {
        let done = p.stage;
        p.stage = next;
        self.record(p, WriteBatch::new(), true)?;
        tracing::info!(
            stage = done.name(),
            accounts = p.accounts,
            slots = p.slots,
            codes = p.codes,
            secs = format!("{:.1}", self.started.elapsed().as_secs_f64()),
            "snap sync: stage done"
        );
        Ok(())
    }

    pub(super) fn line(&mut self, p: &Progress, left: f64) {
        let (_, since, left_then) = match self.stage_start {
            Some(start) if start.0 == p.stage => start,
            _ => {
                let start = (p.stage, Instant::now(), left);
                self.stage_start = Some(start);
                start
            }
        };
        if self.last_line.elapsed() < self.cfg.progress_every {
            return;
        }
        self.last_line = Instant::now();
        let eta = eta(since.elapsed().as_secs_f64(), left_then, left);
        tracing::info!(
            stage = p.stage.name(),
            pivot = p.pivot_number,
            accounts = p.accounts,
            slots = p.slots,
            codes = p.codes,
            mib = p.bytes >> 20,
            eta,
            "snap sync"
        );
    }
}

pub(super) fn chunks_left(p: &Progress) -> f64 {
    let mut left = U256::ZERO;
    for c in p.chunks.iter().filter(|c| !c.done) {
        left += U256::from_be_bytes(c.limit.0) - U256::from_be_bytes(c.next.0);
    }
    let shift = |v: U256| (v >> 192usize).to::<u64>() as f64;
    shift(left) / shift(U256::MAX).max(1.0)
}

/// The progress line's ETA: in `secs` the share of the stage left went from `left_then`
/// to `left`; what is left at that rate. "unknown" while nothing was done in that time
/// or nothing is left.
pub(super) fn eta(secs: f64, left_then: f64, left: f64) -> String {
    let done = left_then - left;
    if done > 0.0 && left > 0.0 && secs > 0.0 {
        format!("{:.0}s", secs * left / done)
    } else {
        "unknown".into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_progress_lines_eta_is_the_rate_so_far_over_what_is_left() {
        // A quarter done in 30 s: three quarters left take 90 s more.
        assert_eq!(eta(30.0, 1.0, 0.75), "90s");
        // Resumed at half done (the run before the restart did that half): the rate is
        // this run's, a tenth in 10 s, so the 40 % left take 40 s.
        assert_eq!(eta(10.0, 0.5, 0.4), "40s");
        // Nothing done since, nothing left, or no time yet: no rate to go by.
        assert_eq!(eta(5.0, 0.6, 0.6), "unknown");
        assert_eq!(eta(5.0, 0.6, 0.0), "unknown");
        assert_eq!(eta(0.0, 0.6, 0.5), "unknown");
        assert_eq!(eta(5.0, f64::NAN, 0.5), "unknown");
    }

    #[test]
    fn the_last_chunk_ends_at_the_top_of_the_hash_space() {
        let p = Progress::new(
            &SealedHeader::decode(moat_common::block::Header::default().encoded().into()).unwrap(),
        );
        assert_eq!(p.chunks.len(), CHUNKS);
        assert_eq!(p.chunks[0].next, B256::ZERO);
        assert_eq!(p.chunks[CHUNKS - 1].limit, B256::repeat_byte(0xff));
        for w in p.chunks.windows(2) {
            assert_eq!(
                b256_after(&w[0].limit),
                Some(w[1].next),
                "no gap, no overlap"
            );
        }
        assert_eq!(b256_after(&B256::repeat_byte(0xff)), None);
        assert_eq!(Progress::decode(&p.encode()), Some(p));
    }
}
