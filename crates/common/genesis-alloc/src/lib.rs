//! The genesis allocations of the built-in networks (mainnet, sepolia, hoodi).
//!
//! The accounts are not kept in this repository. The build script takes them from the
//! `@ethereumjs/genesis` package on the npm registry (a pinned version whose tarball must
//! match a pinned SHA-512), and writes each network's allocation as the `alloc` object of a
//! geth-style genesis.json, which is embedded here. `moat-common` parses it into a
//! `Genesis`; the genesis hashes it yields are checked against the published ones by that
//! crate's tests.
//!
//! Offline builds point `MOAT_GENESIS_PACKAGE` at a copy of the tarball.

/// Mainnet's 8,893 pre-funded accounts, as a geth-style `alloc` JSON object.
pub const MAINNET: &str = include_str!(concat!(env!("OUT_DIR"), "/mainnet.json"));

/// Sepolia's allocation, as a geth-style `alloc` JSON object.
pub const SEPOLIA: &str = include_str!(concat!(env!("OUT_DIR"), "/sepolia.json"));

/// Hoodi's allocation (deposit and system contracts included), as a geth-style `alloc`
/// JSON object.
pub const HOODI: &str = include_str!(concat!(env!("OUT_DIR"), "/hoodi.json"));
