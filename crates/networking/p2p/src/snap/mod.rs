//! snap/1: the state snapshot protocol, served beside eth.
//!
//! A syncing node asks for the state of a recent block in pieces: account ranges,
//! storage ranges, contract codes and trie nodes, each range with the proofs that let it
//! be checked against the state root without the rest of the trie. This module answers
//! such requests.
//!
//! - [`message`]: the messages, `GetAccountRange`/`AccountRange`,
//!   `GetStorageRanges`/`StorageRanges`, `GetByteCodes`/`ByteCodes`,
//!   `GetTrieNodes`/`TrieNodes` ([`SnapMessage`]), with typed decode errors, and the
//!   empty answer to a request ([`empty_answer`]).
//! - [`account`]: the slim form accounts travel in ([`slim_account`], [`full_account`]).
//! - [`serve`]: the answers, read from a state: ranges walked in the trie (the flat
//!   tables are keyed by address, not by hashed key) or scanned from the trie-node table,
//!   with the boundary proofs of [`moat_trie::range`]; codes and trie nodes by hash and
//!   by path. Limits as go-ethereum's: an answer stops growing past the request's byte
//!   budget, capped at [`SOFT_RESPONSE_LIMIT`]; at most [`MAX_CODE_LOOKUPS`] codes and
//!   [`MAX_TRIE_NODE_LOOKUPS`] trie-node reads; and [`TIME_BUDGET`] per request, after
//!   which what was gathered (with its proof) is sent.
//! - [`server`]: [`SnapServer`], which finds the state of any of the last
//!   [`SERVED_ROOTS`] canonical state roots: the head's straight from the store, older
//!   ones through the undo records ([`moat_blockchain::history`]), whose nodes are the
//!   trie as it was. A root not served gets an empty answer, never a disconnect.
//!
//! [`SOFT_RESPONSE_LIMIT`]: crate::serve::SOFT_RESPONSE_LIMIT

pub mod account;
pub mod message;
pub mod serve;
pub mod server;

pub use account::{full_account, slim_account};
pub use message::{
    ACCOUNT_RANGE, BYTE_CODES, GET_ACCOUNT_RANGE, GET_BYTE_CODES, GET_STORAGE_RANGES,
    GET_TRIE_NODES, PROTOCOL_LENGTH, SNAP1, STORAGE_RANGES, SnapDecodeError, SnapMessage,
    TRIE_NODES, empty_answer,
};
pub use serve::{
    Leaves, MAX_CODE_LOOKUPS, MAX_TRIE_NODE_LOOKUPS, Proof, TIME_BUDGET, account_range, byte_codes,
    storage_ranges, trie_nodes,
};
pub use server::{SERVED_ROOTS, SnapServer};
