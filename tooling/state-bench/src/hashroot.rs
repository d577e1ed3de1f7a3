//! `hash-root`: the state root of a genesis file's allocation computed with alloy-trie's
//! `HashBuilder` (the trie code reth uses), not with moat-trie: an independent check of
//! the root `moat init` writes, for states too large for another client's init on this
//! machine.
//!
//! The allocation is read with moat's streaming genesis reader (entry by entry); each
//! account's storage root comes from `alloy_trie::root::storage_root_unhashed`, its leaf
//! is `TrieAccount`'s RLP under keccak256(address), and the leaves, sorted, go through
//! one `HashBuilder`. Memory: every leaf (about 150 bytes an account).

use alloy_primitives::{B256, keccak256};
use alloy_trie::{HashBuilder, Nibbles, TrieAccount};
use moat_common::config::{AllocEntries, Genesis, GenesisAccount};
use serde_json::json;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

#[derive(clap::Args, Debug)]
pub(crate) struct HashRootArgs {
    /// The genesis file.
    #[arg(long)]
    pub(crate) genesis: PathBuf,
    /// Print the figures as one JSON line.
    #[arg(long)]
    pub(crate) json: bool,
}

/// The root of `(hashed key, leaf)` pairs, in any order, through alloy-trie; a key
/// given twice is refused.
pub(crate) fn root_of(mut leaves: Vec<(B256, Vec<u8>)>) -> Result<B256, String> {
    leaves.sort_unstable_by_key(|e| e.0);
    if let Some(w) = leaves.windows(2).find(|w| w[0].0 == w[1].0) {
        return Err(format!("an account is given twice (hashed {})", w[0].0));
    }
    let mut builder = HashBuilder::default();
    for (key, leaf) in &leaves {
        builder.add_leaf(Nibbles::unpack(key), leaf);
    }
    Ok(builder.root())
}

/// The account-trie leaf of a genesis account.
pub(crate) fn account_leaf(account: &GenesisAccount) -> Vec<u8> {
    let slots = account
        .storage
        .iter()
        .map(|(slot, value)| (*slot, alloy_primitives::U256::from_be_bytes(value.0)));
    alloy_rlp::encode(TrieAccount {
        nonce: account.nonce,
        balance: account.balance,
        storage_root: alloy_trie::root::storage_root_unhashed(slots),
        code_hash: keccak256(&account.code),
    })
}

pub(crate) fn run(args: &HashRootArgs) -> Result<ExitCode, String> {
    let started = Instant::now();
    let mut leaves = Vec::new();
    let mut add = |address, account: GenesisAccount| {
        leaves.push((keccak256(address), account_leaf(&account)));
        Ok(())
    };
    let genesis = Genesis::stream_file(&args.genesis, AllocEntries::Parse(&mut add))
        .map_err(|e| format!("{}: {e}", args.genesis.display()))?;
    let read = started.elapsed();
    let accounts = leaves.len();
    let root = root_of(leaves)?;
    let hash = genesis.header_with_state_root(root).hash();
    let total = started.elapsed();
    if args.json {
        println!(
            "{}",
            json!({
                "genesis": args.genesis.display().to_string(),
                "accounts": accounts,
                "state_root": root.to_string(),
                "genesis_hash": hash.to_string(),
                "read_s": read.as_secs_f64(),
                "total_s": total.as_secs_f64(),
            })
        );
    } else {
        println!("accounts:     {accounts}");
        println!("state root:   {root} (alloy-trie HashBuilder)");
        println!("genesis hash: {hash}");
        println!(
            "time:         {:.1} s ({:.1} s reading the file)",
            total.as_secs_f64(),
            read.as_secs_f64()
        );
    }
    Ok(ExitCode::SUCCESS)
}
