//! Executes the devp2p ethtest chain (600 blocks, Shanghai → Cancun → Prague, blob,
//! 7702 and request-contract traffic) block by block with `vm::execute_block`, on an
//! in-memory state that starts from the genesis alloc and takes each block's changes.
//! Every header commitment execution decides is checked: gas used, blob gas used,
//! receipts root, logs bloom, requests hash and the state root.

use alloy_primitives::{Address, B256, Bloom, Bytes, U256, keccak256};
use alloy_trie::{EMPTY_ROOT_HASH, TrieAccount};
use moat_blockchain::vm::{self, AccountChange, AccountInfo, StateReader, VmError};
use moat_common::block::Block;
use moat_common::config::Genesis;
use moat_common::constants::EMPTY_REQUESTS_HASH;
use moat_common::receipt;
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

const KECCAK_EMPTY: B256 =
    alloy_primitives::b256!("c5d2460186f7233c927e7db2dcc703c0e500b653ca82273b7bfad8045d85a470");

#[derive(Default)]
struct MemState {
    accounts: BTreeMap<Address, AccountInfo>,
    storage: BTreeMap<Address, BTreeMap<B256, U256>>,
    code: HashMap<B256, Bytes>,
    hashes: HashMap<u64, B256>,
}

impl StateReader for MemState {
    fn account(&self, address: &Address) -> Result<Option<AccountInfo>, VmError> {
        Ok(self.accounts.get(address).copied())
    }
    fn storage(&self, address: &Address, slot: &B256) -> Result<U256, VmError> {
        Ok(self
            .storage
            .get(address)
            .and_then(|s| s.get(slot))
            .copied()
            .unwrap_or_default())
    }
    fn code(&self, code_hash: &B256) -> Result<Option<Bytes>, VmError> {
        Ok(self.code.get(code_hash).cloned())
    }
    fn block_hash(&self, number: u64) -> Result<B256, VmError> {
        self.hashes
            .get(&number)
            .copied()
            .ok_or_else(|| VmError::State(format!("no hash for block {number}")))
    }
}

impl MemState {
    fn apply(&mut self, changes: &[AccountChange]) {
        for c in changes {
            if c.storage_wiped {
                self.storage.remove(&c.address);
            }
            match c.info {
                Some(info) => {
                    self.accounts.insert(c.address, info);
                }
                None => {
                    self.accounts.remove(&c.address);
                    self.storage.remove(&c.address);
                }
            }
            if let (Some(code), Some(info)) = (&c.new_code, c.info) {
                assert_eq!(keccak256(code), info.code_hash, "new code matches its hash");
                self.code.insert(info.code_hash, code.clone());
            }
            let slots = self.storage.entry(c.address).or_default();
            for (k, v) in &c.storage {
                if v.is_zero() {
                    slots.remove(k);
                } else {
                    slots.insert(*k, *v);
                }
            }
        }
        self.storage.retain(|_, s| !s.is_empty());
    }

    fn state_root(&self) -> B256 {
        alloy_trie::root::state_root_unhashed(self.accounts.iter().map(|(address, info)| {
            let storage_root = match self.storage.get(address) {
                Some(slots) => {
                    alloy_trie::root::storage_root_unhashed(slots.iter().map(|(k, v)| (*k, *v)))
                }
                None => EMPTY_ROOT_HASH,
            };
            let account = TrieAccount {
                nonce: info.nonce,
                balance: info.balance,
                storage_root,
                code_hash: info.code_hash,
            };
            (*address, account)
        }))
    }
}

fn requests_hash(requests: &[Bytes]) -> B256 {
    if requests.is_empty() {
        return EMPTY_REQUESTS_HASH;
    }
    let mut outer = Sha256::new();
    for r in requests {
        outer.update(Sha256::digest(r));
    }
    B256::from_slice(&outer.finalize())
}

#[test]
fn vm_executes_ethtest_chain_to_every_header() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/testdata/ethtest");
    assert!(
        dir.join("chain.rlp").exists(),
        "{} is missing: the test suite reads the conformance chain from ../shared beside \
         the checkout (see the README, \"The test suite\")",
        dir.display()
    );
    let genesis = Genesis::from_file(&dir.join("genesis.json")).unwrap();
    let blocks = Block::decode_all(&std::fs::read(dir.join("chain.rlp")).unwrap()).unwrap();

    let mut state = MemState::default();
    for (address, account) in &genesis.alloc {
        let code_hash = if account.code.is_empty() {
            KECCAK_EMPTY
        } else {
            keccak256(&account.code)
        };
        state.code.insert(code_hash, account.code.clone());
        state.accounts.insert(
            *address,
            AccountInfo {
                nonce: account.nonce,
                balance: account.balance,
                code_hash,
            },
        );
        let slots: BTreeMap<B256, U256> = account
            .storage
            .iter()
            .map(|(k, v)| (*k, U256::from_be_bytes(v.0)))
            .filter(|(_, v)| !v.is_zero())
            .collect();
        if !slots.is_empty() {
            state.storage.insert(*address, slots);
        }
    }
    let genesis_header = genesis.header();
    assert_eq!(state.state_root(), genesis_header.state_root);
    state.hashes.insert(0, genesis_header.hash());

    let mut tx_types = BTreeMap::new();
    let mut requests = 0;
    for block in &blocks {
        let h = &block.header;
        let senders: Vec<Address> = block
            .transactions
            .iter()
            .map(|tx| tx.recover_sender().unwrap())
            .collect();
        for tx in &block.transactions {
            *tx_types.entry(tx.tx_type() as u8).or_insert(0usize) += 1;
        }
        let out = vm::execute_block(&genesis.config, block, &senders, &state)
            .unwrap_or_else(|e| panic!("block {}: {e}", h.number));
        let n = h.number;
        assert_eq!(out.gas_used, h.gas_used, "block {n} gas used");
        assert_eq!(
            Some(out.blob_gas_used),
            h.blob_gas_used.or(Some(0)),
            "block {n} blob gas used"
        );
        assert_eq!(
            receipt::receipts_root(&out.receipts),
            h.receipts_root,
            "block {n} receipts root"
        );
        let bloom = out.receipts.iter().fold(Bloom::ZERO, |mut b, r| {
            b |= r.bloom();
            b
        });
        assert_eq!(bloom, h.logs_bloom, "block {n} logs bloom");
        if let Some(expected) = h.requests_hash {
            assert_eq!(
                requests_hash(&out.requests),
                expected,
                "block {n} requests hash"
            );
        }
        requests += out.requests.len();
        state.apply(&out.changes);
        assert_eq!(state.state_root(), h.state_root, "block {n} state root");
        state.hashes.insert(n, block.hash);
    }
    assert_eq!(blocks.len(), 600);
    eprintln!("tx count per type: {tx_types:?}; non-empty request lists: {requests}");
    assert!(!tx_types.is_empty());
}
