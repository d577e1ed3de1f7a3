//! Snap sync: the state at a pivot block downloaded as proven ranges, the tries built
//! from it, and the pivot made the head, so that full sync only executes the last
//! stretch.
//!
//! ```text
//!  pivot      target − 64 (the target itself on a shorter chain): its header walked
//!             back from the target by hash, its body fetched
//!  accounts   the hash space in CHUNKS chunks (one per first nibble), one
//!             GetAccountRange in flight per peer; each answer checked against its
//!             boundary proof and the pivot's state root, then written (snap_accounts)
//!             with the chunk's new start and the nodes of the account trie below the
//!             root that it finishes (ChunkTrie): one commit
//!  storage    accounts with a storage root, in hash order, up to 128 per
//!             GetStorageRanges; every complete trie checked whole against its root,
//!             a partial last one against its proof and continued alone in chunks;
//!             written (snap_storage) with the cursor below which all is done
//!  codes      GetByteCodes for the code hashes not yet held, each checked by its hash
//!  heal       only after a pivot move: the tries of what is held built unchecked,
//!             then healed to the pivot's root with GetTrieNodes (see below), then the
//!             codes of healed accounts
//!  tries      per account, its storage trie over its slots (SortedBuilder), checked
//!             against its storage root; then the account trie's root branch over the
//!             16 chunks' nodes at [i] (the account trie built whole after a pivot
//!             move), checked against the pivot's state root; the flat by-address state
//!             of genesis is dropped
//!  head       the pivot's header, body, canonical entry and the head: one commit that
//!             also removes the progress record
//! ```
//!
//! The progress record ([`Progress`], in the store's meta table) is written in the same
//! commit as every range it covers, so a node killed at any point resumes at the stage
//! and boundaries it had reached, never before. A peer whose proof does not verify is
//! dropped (reported to the source as a fault); one that answers empty for the pivot's
//! root (it no longer serves that state) is rested, and when every peer does so for a
//! while the pivot is stale: the sync gives up on it with [`SnapError::Stale`] and the
//! caller picks a new pivot.
//!
//! Healing. After a pivot move the record keeps its stage, chunk starts and storage
//! cursor; the rest of the ranges come at the new root ([`Progress::heal`] set). In the
//! storage stage an account's recorded storage root may be an older root's (or the
//! account gone): an answer that fails its proof then keeps the whole tries leading it,
//! asks the first failing account alone and leaves it to healing if it fails again (no
//! fault: healing checks every node by hash). Then the tries are built from the flat
//! state without checks (the account trie's root node is not written: the store keeps
//! genesis' root until the end) and walked from the new root: a node is asked for
//! (`GetTrieNodes` by path, [`HEAL_BATCH`] a request) when the local trie has another
//! node, or none, at its path; a node is taken only if it hashes to what its parent
//! names. From each healed node the flat state is patched: a leaf's account or slot is
//! written, and flat entries under the node's path that it no longer holds (an empty
//! branch slot, off an extension's key, another key under a leaf; an account's slots
//! with it) are deleted. The account trie first, then every storage trie whose stored
//! root is not its account's. The patches are committed every [`HEAL_COMMIT_EVERY`]
//! answers, each commit with healing's record ([`HealRecord`]: the root, the phase, and
//! every node asked for, queued or found and not yet taken). A node killed while
//! healing resumes from that record: the tries built unchecked are still stored (the
//! record is written only after they are), so it neither builds them again nor asks
//! again a node whose patches were committed. Then the codes stage runs again and the
//! tries are built checked as without a move.
//!
//! Where each step lives:
//!
//! - `mod.rs`: [`run`], the steps above in order; the configuration, the errors, and
//!   the state one run carries (`Run`, whose methods the files below share).
//! - `pivot.rs`: the pivot chosen, or a record left by an earlier run taken up (a
//!   stale pivot's download gets a new pivot); the pivot block fetched.
//! - `download.rs`: the download stages, accounts, storage and codes.
//! - `verify.rs`: an account or storage range checked against its proof and root
//!   before anything of it is written.
//! - `chunk_trie.rs`: the account trie built chunk by chunk, on threads of its own,
//!   while the accounts come; its root branch over the 16 chunks.
//! - `heal.rs`: healing after a pivot move: its record ([`HealRecord`]), the walks by
//!   `GetTrieNodes`, the flat state patched from each node taken.
//! - `build.rs`: the tries built from the flat state (checked against the pivot's
//!   roots, or unchecked before healing) and the pivot made the head.
//! - `progress.rs`: the progress record ([`Progress`]) and its encoding, the figures
//!   `eth_syncing` shows ([`SnapFigures`]), the progress lines and their ETA.
//! - `requests.rs`: asking peers: the work a request carries, idle and resting peers,
//!   waiting for answers, faults, and when the pivot counts as stale.
//!
//! Nodes are read and written with moat-trie's node codec ([`moat_trie::node`]).

mod build;
mod chunk_trie;
mod download;
mod heal;
mod pivot;
mod progress;
mod requests;
mod verify;

pub use heal::HealRecord;
pub use progress::{Chunk, HealFigures, Progress, SnapFigures, SnapStatus, Stage};

use crate::source::BlockSource;
use alloy_primitives::B256;
use moat_blockchain::chain::Chain;
use moat_p2p::rlpx::PeerId;
use moat_storage::StoreError;
use requests::{Peers, Work};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How far behind the target the pivot sits.
pub const PIVOT_DISTANCE: u64 = 64;

/// Trie nodes asked per `GetTrieNodes` while healing.
pub const HEAL_BATCH: usize = 128;

/// Healed answers between two commits of the flat state's patches.
pub const HEAL_COMMIT_EVERY: usize = 16;

/// How the snap stage works.
#[derive(Debug, Clone)]
pub struct SnapConfig {
    /// The byte budget of each request (`responseBytes`).
    pub response_bytes: u64,
    /// Between two progress lines.
    pub progress_every: Duration,
    /// How long without a useful answer before the stage gives up ([`SnapError::NoPeers`]).
    pub give_up_after: Duration,
    /// How long to wait for a first peer that speaks snap/1.
    pub snap_peer_wait: Duration,
    /// Accounts per storage request.
    pub storage_batch: usize,
    /// Healed answers between two commits of the flat state's patches and healing's
    /// record ([`HEAL_COMMIT_EVERY`]).
    pub heal_commit_every: usize,
}

impl Default for SnapConfig {
    fn default() -> Self {
        Self {
            response_bytes: 512 * 1024,
            progress_every: Duration::from_secs(8),
            give_up_after: Duration::from_secs(60),
            snap_peer_wait: Duration::from_secs(10),
            storage_batch: 128,
            heal_commit_every: HEAL_COMMIT_EVERY,
        }
    }
}

/// Why the snap stage stopped short.
#[derive(Debug, thiserror::Error)]
pub enum SnapError {
    /// The store failed to read or commit.
    #[error("store: {0}")]
    Store(#[from] StoreError),
    /// Every peer answered empty for the pivot's root for a while: it is past what they serve
    /// (about 128 blocks), and the caller picks a new pivot.
    #[error("no peer serves the pivot's state any more")]
    Stale,
    /// No snap/1 peer came, no peer gave the pivot's header or body, or none gave a useful
    /// answer within `give_up_after`.
    #[error("no snap peer")]
    NoPeers,
    /// The pivot could not be set up or used (the chain moved past genesis, a task failed).
    #[error("pivot: {0}")]
    Pivot(String),
    /// A trie built from the download does not hash to the root it must have.
    #[error("built trie does not match: {0}")]
    Mismatch(String),
}

/// Runs the snap stage towards `target` (a block hash the consensus client gave); on
/// success the pivot is the chain's head and its state is complete.
pub async fn run<S: BlockSource>(
    chain: &Chain,
    source: &Arc<S>,
    target: B256,
    cfg: &SnapConfig,
    status: &SnapStatus,
) -> Result<(), SnapError> {
    // Peers offering snap/1 come with the first connections; without any the caller
    // falls back to full sync.
    let wait_until = Instant::now() + cfg.snap_peer_wait;
    while source.snap_peers().is_empty() {
        if Instant::now() > wait_until {
            return Err(SnapError::NoPeers);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let (mut progress, resumed, highest) = pivot::start(chain.store(), source, target).await?;
    let mut run = Run {
        chain,
        source,
        cfg,
        status,
        peers: Peers::default(),
        asked: HashMap::new(),
        started: Instant::now(),
        last_line: Instant::now(),
        stage_start: None,
        resumed,
        highest,
        heal: HealFigures::default(),
        healing: false,
    };
    run.publish(&progress);
    if progress.stage == Stage::Accounts {
        run.accounts(&mut progress).await?;
        run.next_stage(&mut progress, Stage::Storage)?;
    }
    if progress.stage == Stage::Storage {
        run.storage(&mut progress).await?;
        run.next_stage(&mut progress, Stage::Codes)?;
    }
    if progress.stage == Stage::Codes {
        run.codes(&mut progress).await?;
        run.next_stage(&mut progress, Stage::Tries)?;
    }
    run.publish(&progress);
    let pivot = pivot::fetch_pivot_block(source, &progress).await?;
    // Building the tries replaces the state: only while the chain is still at genesis
    // (the engine API may have imported blocks on genesis' state meanwhile).
    if chain.head().map_err(|e| SnapError::Pivot(e.to_string()))?.0 != 0 {
        return Err(SnapError::Pivot("the chain moved past genesis".into()));
    }
    if progress.heal {
        run.heal_after_move(&mut progress).await?;
    }
    let store = chain.store().clone();
    let p2 = progress.clone();
    tokio::task::spawn_blocking(move || build::build_tries(&store, &p2, &pivot))
        .await
        .map_err(|e| SnapError::Pivot(e.to_string()))??;
    // The pivot was written as head in the store directly: the pool's upkeep follows.
    chain.publish_head();
    *status.lock() = None;
    tracing::info!(
        pivot = progress.pivot_number,
        accounts = progress.accounts,
        slots = progress.slots,
        codes = progress.codes,
        mib = progress.bytes >> 20,
        secs = format!("{:.1}", run.started.elapsed().as_secs_f64()),
        "snap sync complete: the pivot is the head"
    );
    Ok(())
}

/// What one run of the snap stage carries from step to step: the chain and peers, the
/// requests in flight, and what the progress lines and `eth_syncing` show. Its methods
/// live with their step: `progress.rs` (the record, the lines), `requests.rs` (asking
/// peers), `download.rs` (the stages), `heal.rs` (healing).
struct Run<'a, S> {
    chain: &'a Chain,
    source: &'a Arc<S>,
    cfg: &'a SnapConfig,
    status: &'a SnapStatus,
    peers: Peers,
    started: Instant,
    last_line: Instant,
    /// When this run first logged progress in the current stage, and the share of the
    /// stage then left: the ETA's rate is measured from there (neither the stages before
    /// nor what a run before a restart did count).
    stage_start: Option<(Stage, Instant, f64)>,
    resumed: bool,
    highest: u64,
    /// The peer and work of each request in flight, by task: a task that ends without
    /// its answer (a panic) still gives its work back.
    asked: HashMap<tokio::task::Id, (PeerId, Work)>,
    /// Healing's figures (and whether the codes stage runs for healed accounts).
    heal: HealFigures,
    healing: bool,
}
