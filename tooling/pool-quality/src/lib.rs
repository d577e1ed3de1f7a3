//! `moat-pool-quality`: how much a block built from a pool is worth, against the most
//! valuable block the same stream of transactions allowed.
//!
//! A seeded stream comes from a genesis of the tool's own (the ethtest chain's config and
//! system contracts, a 30M gas limit, thousands of funded senders, one in ten poor):
//!
//! ```text
//!  per sender: nonces 0..k in order, tips skewed ─┬─ a held-back nonce sent last (gap + filler)
//!                                                 ├─ replacements at 0–100 % bumps, duplicates
//!                                                 └─ invalid classes: underpriced, unaffordable,
//!                                                    oversized, low gas, wrong chain
//!  senders interleaved at random, each delivered as local (RPC) or remote (a peer)
//! ```
//!
//! [`run_in_process`] feeds the stream through a moat pool over an in-memory chain, then
//! builds one payload; [`ideal_value`] is the exact optimum (a knapsack over each sender's
//! valid nonce prefix, solved by dynamic programming over the block's transfer count). The
//! binary also feeds the stream to any node over RPC and builds through its engine API.
//!
//! The library, by job: `tx` (a stream transaction and the class of case it exercises),
//! `stream` (the senders, the tool's genesis and the seeded plain stream), `blobs` (the
//! Osaka genesis and the seeded blob stream, with its cache of blobs and proofs), `ideal`
//! (the first block's limits and the most valuable block a stream allows) and
//! `in_process` (a stream through moat's pool and one payload built from it).

mod blobs;
mod ideal;
mod in_process;
mod stream;
mod tx;

pub use blobs::{BlobCache, blob_stream, blob_stream_estimate, osaka_genesis};
pub use ideal::{
    BLOB_PRICE_BUMP, BLOCK_TIME, BlockLimits, GAS_PER_BLOB, MINER_GAS_LIMIT, PRICE_BUMP,
    first_base_fee, ideal_block, ideal_value,
};
pub use in_process::{ClassCount, Outcome, PEERS, peer_of, run_in_process};
pub use stream::{StreamParams, genesis, senders, stream};
pub use tx::{Class, StreamTx};

/// Gas of a plain transfer.
pub const TRANSFER_GAS: u64 = 21_000;
/// The tool genesis' block gas limit: a block holds 1,428 transfers.
pub const GAS_LIMIT: u64 = 30_000_000;
const ETHER: u128 = 1_000_000_000_000_000_000;
const GWEI: u128 = 1_000_000_000;
