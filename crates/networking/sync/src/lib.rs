//! moat-sync: catching up with the chain from peers.
//!
//! After the merge the consensus client decides the head; the execution node's job when
//! it is behind is to fetch and execute the blocks up to that head. The engine API hands
//! the head's hash to the syncer ([`SyncHandle::set_target`]) whenever it names a block
//! the node does not hold; the syncer then runs a *full sync*: every block is executed.
//!
//! ```text
//!  engine API ─ forkchoiceUpdated / newPayload to an unknown block ─▶ set_target(hash)
//!
//!  1 headers back   target ◀─ parent ◀─ … (192 per GetBlockHeaders, by hash, reverse)
//!                   until a header's parent is on the local canonical chain (or in the
//!                   skeleton of an earlier target): the skeleton, ascending
//!  2 bodies forward GetBlockBodies for the next blocks past the head, up to 8 requests
//!                   over the peers, each body checked against its header's roots
//!  3 senders        batches of 32, in order, through a thread that recovers their
//!                   transactions' senders into the chain's sender cache (when the node
//!                   gives it one), one batch ahead of the importer
//!  4 import         in order on the importer thread: Chain::import, one atomic commit per
//!                   block, durable within a second (at once when nothing more is
//!                   queued); a block whose parent is not the head (the target's chain
//!                   forks below it) is stored aside and made head (set_head, the fork
//!                   point not below Chain::oldest_undoable)
//!  5 done           target canonical ─▶ "synced" flag on, eth_syncing false again
//! ```
//!
//! Peers are asked through a [`BlockSource`] (the p2p [`moat_p2p::Network`] in the node):
//! answers come checked for shape (headers start where asked and chain by hash; bodies
//! match their headers), and a peer that lies is dropped there. A peer that does not have
//! what was asked, times out or fails is rested for a moment and another is asked.
//!
//! Every block is its own atomic commit, durable within a second (the store's relaxed
//! commit: one fsync a second however many blocks), so a node killed mid-sync restarts
//! at a consistent head at most about a second of blocks short of where it was; the next target walks back to that head and goes on from there. A new target
//! replaces the old one: headers walked for the old target are kept when the new one
//! builds on them, so a consensus client moving the head every slot costs one header
//! request, not a new walk.
//!
//! [`SyncHandle::progress`] gives `eth_syncing` its starting, current and highest block;
//! a line with blocks/s, Mgas/s and an ETA is logged every 8 seconds while it runs.
//!
//! **Snap sync** ([`snap`], with [`SyncConfig::snap`]: the node's default
//! `--syncmode snap`) runs first when the node holds nothing past genesis (or an earlier
//! run left a snap download under way): the state at a pivot 64 blocks below the target
//! comes as account ranges, storage ranges and bytecodes from the peers that speak
//! snap/1, each range verified against its proof before it is written (with the progress
//! record, in one commit); the tries are built from the download and checked against the
//! pivot's state root; the pivot becomes the head in one commit; then the full sync above
//! runs from the pivot to the target. No snap/1 peer within 10 s: full sync from genesis.
//!
//! When a pivot goes stale (no peer serves its root any more: more than 128 blocks old)
//! a new one is picked and the download goes on where it was, against the new root:
//! what is held (from older roots) is kept, the tries are built from it, and then
//! *healed* with GetTrieNodes: the new root's tries are walked from their roots, the
//! nodes the local tries lack are asked by path (each taken only if it hashes to what
//! its parent names), and the flat state is patched from them until it builds the new
//! root. A node killed while healing builds the tries again and walks from the root.
//! The walked headers are held in memory (about 1 KiB each), which suits catching up
//! days, not years.

pub mod snap;
mod source;
mod syncer;

pub use source::BlockSource;
pub use syncer::{InvalidChain, SyncConfig, SyncHandle, SyncProgress, spawn};
