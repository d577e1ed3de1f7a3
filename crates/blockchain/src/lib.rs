//! moat-blockchain: the chain, block execution and payload building.
//!
//! [`chain::Chain`] imports blocks onto the store: header checks ([`header`]), execution
//! by [`vm::execute_block`] (revm over a [`vm::StateReader`] of the parent state, with the
//! system calls, withdrawals and EIP-7685 requests of each fork; it returns receipts and
//! per-account changes), the state root ([`state_root`]) and one atomic commit with the
//! block's undo record ([`undo`]), so a reorg ([`chain::Chain::set_head`]) can unwind it.
//! [`history`] reads state at older blocks through those records; [`verify`] checks a
//! datadir (`moat db verify`).
//!
//! [`payload::PayloadService`] builds blocks from the transaction pool (the `moat-mempool`
//! crate) for the engine API and dev mode; [`maintain`] is the pool's window on the chain
//! (its state view, and what each block or reorg tells it).

pub mod chain;
pub mod genesis_state;
pub mod header;
pub mod history;
pub mod inclusion;
pub mod maintain;
pub mod payload;
pub mod premerge;
pub mod state_root;
pub mod undo;
pub mod verify;
pub mod vm;

/// The cores this process may use (`available_parallelism`, read once; 1 if unknown):
/// what sender recovery, the prewarm thread and the state root size their helpers by.
pub(crate) fn cores() -> usize {
    static CORES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}
