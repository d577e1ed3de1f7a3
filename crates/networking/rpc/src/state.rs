//! The pool's window on the store and the fees of the next block, which both the pool
//! and the fee methods need: kept in `moat_blockchain::maintain` (the engine API and the
//! dev node share them) and named here for the RPC methods.

pub(crate) use moat_blockchain::maintain::block_blob_base_fee;
pub use moat_blockchain::maintain::{StoreStateView, head_info, next_block_fees};
