//! moat-common: the data every other moat crate speaks.
//!
//! - [`transaction`]: the five transaction types, their strict EIP-2718 decoding, hashes,
//!   signing hashes and sender recovery; blob sidecars ([`transaction::BlobsBundle`]) with
//!   `validate_cheap` (structure) and `validate` (structure + KZG); intrinsic gas and the
//!   stateless rules of each fork.
//! - [`block`]: headers and bodies as they travel in `chain.rlp` files and eth messages.
//! - [`config`]: geth-style genesis files, fork schedules, blob parameters and the EIP-2124
//!   fork id, with mainnet, sepolia and hoodi built in.
//! - [`rlp`]: the strict RLP reader the decoders share.
//! - [`enode`]: node ids and enode URLs (`enode://<id>@<ip>:<port>`), read by the p2p
//!   network and by discovery alike.
//! - [`throttle`]: a log line at most once per period (the p2p and RPC servers').
//! - [`net`]: the address a peer or client is counted under (an IPv6 address by its /64).
//! - [`system_contracts`]: the runtime code and addresses of the post-Prague system
//!   contracts a genesis deploys (the dev chain, test tools).
//!
//! Data flows one way: bytes from a peer or an RPC client → [`rlp`] → typed values that
//! hash themselves at decode time. Nothing in this crate touches state; anything that
//! needs an account lives in moat-blockchain.

pub mod block;
pub mod config;
pub mod constants;
pub mod enode;
pub mod fees;
pub mod genesis_block;
pub mod net;
pub mod receipt;
pub mod rlp;
pub mod system_contracts;
pub mod testing;
pub mod throttle;
pub mod transaction;

pub use transaction::{
    AccessListItem, Authorization, BlobsBundle, BlobsBundleError, DecodeError, PooledTransaction,
    SignedTransaction, Transaction, TxType,
};
