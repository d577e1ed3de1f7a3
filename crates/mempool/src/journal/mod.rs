//! The local-transaction journal: transactions submitted to this node (RPC) survive a
//! restart, a graceful stop as well as `kill -9`.
//!
//! - **What is journaled.** Each local tx the pool admits, in its network form (blob
//!   sidecar included), as one record of the log; txs from peers, reorgs or the journal
//!   itself are not. A local tx the pool lets go for room, or one put back after its
//!   replacement's record failed and no longer admitted, is held: written again by
//!   each rotation so that the next start offers it again.
//! - **When it is synced.** Before the RPC call returns: the append waits for its
//!   record's `fdatasync` (group commit: concurrent submissions share one sync). An
//!   append that cannot be made durable takes its tx out of the pool again and the
//!   caller is refused ([`crate::Rejection::JournalFailed`]); after a failed
//!   sync nothing is acknowledged until a rotation has rewritten the file.
//! - **What a restart does.** The file is read up to its last intact record (a torn
//!   tail is cut off), each entry is offered to the pool in its sender's nonce order,
//!   and its fate decides whether it stays: readmitted or held for a transient refusal
//!   it stays, mined, replaced, unaffordable or invalid it goes
//!   ([`ReloadFate`]). The journal is then rewritten from the pool's local txs and the
//!   held entries.
//!
//! Which file holds what:
//! - [`log`]: the write-ahead log, records of bytes knowing nothing of the pool: the
//!   handle, its options and held entries ([`Journal`]);
//!   - `log/record.rs`: the file format (`len | crc32 | bytes`) and reading it back;
//!   - `log/writer.rs`: the writer threads (group commit, pipelined syncs, interval,
//!     preallocation, rotation, failure handling);
//!   - `log/tests.rs`: the log's tests.
//! - [`reload`]: the pool's side: [`crate::Pool::reload_journal`] and the
//!   rules for each entry at start, the append of a local tx and what its failure
//!   undoes, and the rotation's snapshot of the pool.

mod log;
mod reload;

pub(crate) use log::Coming;
pub use log::{
    Journal, JournalContents, JournalOptions, Snapshot, encode_record, parse_records, read_journal,
};
pub use reload::{JournalReload, ReloadFate};
