//! moat-crypto: the expensive primitives every other crate leans on.
//!
//! - [`keccak256`] (re-exported from alloy-primitives) for hashes and addresses.
//! - [`secp`]: ECDSA sender recovery and signing over libsecp256k1 (the `secp256k1` crate).
//!   Recovery is the dominant per-transaction CPU cost of admission, so it is kept to one
//!   call with no extra allocation; the pool puts a cache in front of it.
//! - [`kzg`]: EIP-4844 / EIP-7594 proof verification over c-kzg with the embedded mainnet
//!   trusted setup, loaded once ([`kzg::warm_up`] lets the node pay for it at start).
//!
//! Nothing here knows about transactions: callers hand over digests, signatures and raw
//! blob bytes, and get addresses or verdicts back.

pub mod kzg;
pub mod secp;

pub use alloy_primitives::keccak256;
