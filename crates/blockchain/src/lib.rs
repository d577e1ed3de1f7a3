//! moat-blockchain: the transaction pool and its admission pipeline.
//!
//! Every transaction — from RPC, a peer's broadcast or reply, a reorg, or the local
//! journal — enters through [`mempool::Pool::add_transaction`], which runs the stages of
//! DESIGN §2 cheapest first:
//!
//! ```text
//!  bytes ─▶ 1 pre-flight ─▶ 2 decode+hash ─▶ 3 recent failures ─▶ 4 dedup (pool + in-flight)
//!        ─▶ 5 validate_cheap ─▶ 6 stateless ─▶ 7 sender (cache, else ECDSA)
//!        ─▶ 8 stateful ─▶ 9 KZG (blob txs only, batched, off the runtime) ─▶ 10 insert
//! ```
//!
//! Each stage may reject with a typed [`mempool::Rejection`]; only failures the bytes
//! decide are remembered by hash, so a repeat costs a hash lookup instead of ECDSA or KZG.
//! The pool itself ([`mempool`]) keeps pending, basefee, queued and blob subpools, applies
//! head changes, and hands block building a best-transactions iterator; [`maintain`]
//! keeps it in step with the chain (its state view, and what each block or reorg tells it).
//!
//! Blocks are executed by [`vm::execute_block`]: revm over a [`vm::StateReader`] of the
//! parent state, with the system calls, withdrawals and EIP-7685 requests of each fork;
//! it returns receipts and per-account changes, and leaves roots to the caller.

pub mod chain;
pub mod genesis_state;
pub mod header;
pub mod history;
pub mod maintain;
pub mod mempool;
pub mod payload;
pub mod premerge;
pub mod state_root;
pub mod undo;
pub mod verify;
pub mod vm;
