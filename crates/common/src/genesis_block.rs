//! Block 0 from a genesis file: its state root and header.

use crate::block::Header;
use crate::config::{Fork, Genesis, GenesisAccount};
use crate::constants::{EMPTY_OMMERS_HASH, EMPTY_REQUESTS_HASH, INITIAL_BASE_FEE};
use alloy_primitives::{Address, B256, Bloom, U256, keccak256};
use alloy_trie::{EMPTY_ROOT_HASH, TrieAccount};

/// The storage root of an account's genesis storage (zero values are absent).
pub fn genesis_storage_root(account: &GenesisAccount) -> B256 {
    let slots = account
        .storage
        .iter()
        .map(|(k, v)| (*k, U256::from_be_bytes(v.0)))
        .filter(|(_, v)| !v.is_zero());
    alloy_trie::root::storage_root_unhashed(slots)
}

/// The state root of the genesis allocation.
pub fn genesis_state_root(alloc: &std::collections::BTreeMap<Address, GenesisAccount>) -> B256 {
    if alloc.is_empty() {
        return EMPTY_ROOT_HASH;
    }
    alloy_trie::root::state_root_unhashed(alloc.iter().map(|(address, account)| {
        let trie = TrieAccount {
            nonce: account.nonce,
            balance: account.balance,
            storage_root: genesis_storage_root(account),
            code_hash: keccak256(&account.code),
        };
        (*address, trie)
    }))
}

impl Genesis {
    /// The genesis header, with the fields each fork active at block 0 adds.
    pub fn header(&self) -> Header {
        self.header_with_state_root(genesis_state_root(&self.alloc))
    }

    /// The genesis header over a state root computed elsewhere (an allocation streamed
    /// from a file, [`Genesis::stream_file`], leaves `alloc` empty).
    pub fn header_with_state_root(&self, state_root: B256) -> Header {
        let cfg = &self.config;
        let active = |fork: Fork| cfg.is_active(fork, self.number, self.timestamp);
        let london = active(Fork::London);
        let cancun = active(Fork::Cancun);
        Header {
            parent_hash: self.parent_hash,
            ommers_hash: EMPTY_OMMERS_HASH,
            beneficiary: self.coinbase,
            state_root,
            transactions_root: EMPTY_ROOT_HASH,
            receipts_root: EMPTY_ROOT_HASH,
            logs_bloom: Bloom::ZERO,
            difficulty: self.difficulty,
            number: self.number,
            gas_limit: self.gas_limit,
            gas_used: self.gas_used,
            timestamp: self.timestamp,
            extra_data: self.extra_data.clone(),
            mix_hash: self.mix_hash,
            nonce: self.nonce.to_be_bytes(),
            base_fee_per_gas: london.then(|| self.base_fee_per_gas.unwrap_or(INITIAL_BASE_FEE)),
            withdrawals_root: active(Fork::Shanghai).then_some(EMPTY_ROOT_HASH),
            blob_gas_used: cancun.then(|| self.blob_gas_used.unwrap_or(0)),
            excess_blob_gas: cancun.then(|| self.excess_blob_gas.unwrap_or(0)),
            parent_beacon_block_root: cancun.then_some(B256::ZERO),
            requests_hash: active(Fork::Prague).then_some(EMPTY_REQUESTS_HASH),
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::config::Genesis;
    use alloy_primitives::B256;

    #[test]
    fn ethtest_genesis_hashes_to_the_suites_value() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../../shared/testdata/ethtest/genesis.json"
        );
        let genesis = Genesis::from_file(std::path::Path::new(path)).unwrap();
        let header = genesis.header();
        let want: B256 = "0xbd6a252af394d80904c5993b859574bd4669642cea00a116970ec7887db67533"
            .parse()
            .unwrap();
        assert_eq!(header.hash(), want);
    }
}
