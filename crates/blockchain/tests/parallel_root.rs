//! The state root computed on several threads (subtries of the account trie and the
//! storage tries of their accounts on workers) is the single-threaded one: same root,
//! same account records, same trie writes and undo record in the same order, and the
//! root equals alloy-trie's over the whole state, block after block of random changes
//! (new, changed and deleted accounts, slots set and cleared, storage tries emptied and
//! wiped).

use alloy_primitives::{Address, B256, Bytes, U256, keccak256};
use alloy_trie::{EMPTY_ROOT_HASH, TrieAccount};
use moat_blockchain::state_root::{
    PARALLEL_MIN_ACCOUNTS, StateEntry, StateUpdate, state_update_with_workers,
    write_state_in_chunks,
};
use moat_blockchain::vm::{AccountChange, AccountInfo};
use moat_storage::{Store, WriteBatch};
use std::collections::BTreeMap;

/// A small deterministic generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn address(i: u64) -> Address {
    Address::from_slice(&keccak256(i.to_be_bytes())[..20])
}

fn slot(j: u64) -> B256 {
    B256::from(U256::from(j))
}

/// The model: every account with its slots (non-zero values only).
#[derive(Clone, Default)]
struct Model {
    accounts: BTreeMap<Address, (u64, U256, BTreeMap<B256, U256>)>,
}

impl Model {
    fn root(&self) -> B256 {
        alloy_trie::root::state_root_unhashed(self.accounts.iter().map(|(a, (nonce, bal, s))| {
            (
                *a,
                TrieAccount {
                    nonce: *nonce,
                    balance: *bal,
                    storage_root: if s.is_empty() {
                        EMPTY_ROOT_HASH
                    } else {
                        alloy_trie::root::storage_root_unhashed(s.iter().map(|(k, v)| (*k, *v)))
                    },
                    code_hash: keccak256([]),
                },
            )
        }))
    }
}

/// A random block of `n` changed accounts (some addresses twice) over `model`, applied
/// to the model.
fn random_block(rng: &mut Rng, model: &mut Model, universe: u64, n: usize) -> Vec<AccountChange> {
    let mut changes = Vec::new();
    for _ in 0..n {
        let a = address(rng.below(universe));
        let exists = model.accounts.contains_key(&a);
        let kind = rng.below(10);
        if exists && kind == 0 {
            // Deleted (its storage with it).
            model.accounts.remove(&a);
            changes.push(AccountChange {
                address: a,
                info: None,
                storage_wiped: true,
                ..AccountChange::default()
            });
            continue;
        }
        let entry = model
            .accounts
            .entry(a)
            .or_insert((0, U256::ZERO, BTreeMap::new()));
        let mut wiped = false;
        if exists && kind == 1 {
            // Storage wiped (re-created), maybe new slots after.
            entry.2.clear();
            wiped = true;
        }
        entry.0 += 1;
        entry.1 += U256::from(rng.below(1_000_000) + 1);
        let mut storage = BTreeMap::new();
        let slots = match rng.below(4) {
            0 | 1 => 0,
            2 => rng.below(4) + 1,
            _ => rng.below(12) + 1,
        };
        for _ in 0..slots {
            let k = slot(rng.below(16));
            // Often clear a slot that is there, so that storage tries empty.
            let v = if rng.below(3) == 0 {
                U256::ZERO
            } else {
                U256::from(rng.below(1 << 40) + 1)
            };
            storage.insert(k, v);
        }
        if kind == 2 {
            // Clear every slot the account has: its storage trie empties.
            for k in entry.2.keys() {
                storage.insert(*k, U256::ZERO);
            }
        }
        for (k, v) in &storage {
            if v.is_zero() {
                entry.2.remove(k);
            } else {
                entry.2.insert(*k, *v);
            }
        }
        changes.push(AccountChange {
            address: a,
            info: Some(AccountInfo {
                nonce: entry.0,
                balance: entry.1,
                code_hash: keccak256([]),
            }),
            new_code: None,
            storage_wiped: wiped,
            storage: storage.into_iter().collect(),
        });
    }
    changes
}

/// The update's writes into the store, as the chain commits a block.
fn apply(store: &Store, changes: &[AccountChange], update: &StateUpdate) {
    let mut batch = WriteBatch::new();
    update.write_trie(&mut batch);
    for (address, account) in &update.accounts {
        batch.set_account(*address, *account);
    }
    for change in changes {
        if change.storage_wiped {
            batch.wipe_storage(change.address);
        }
        for (slot, value) in &change.storage {
            batch.set_storage(change.address, *slot, *value);
        }
    }
    store.commit(batch).unwrap();
}

fn assert_same(seq: &StateUpdate, par: &StateUpdate) {
    assert_eq!(par.root, seq.root);
    assert_eq!(par.accounts, seq.accounts);
    assert_eq!(par.wiped_tries, seq.wiped_tries);
    assert_eq!(
        par.trie_writes, seq.trie_writes,
        "trie writes or their order differ"
    );
    assert_eq!(par.undo, seq.undo, "undo records differ");
}

fn initial_state(rng: &mut Rng, universe: u64) -> (Vec<StateEntry>, Model) {
    let mut model = Model::default();
    for i in 0..universe / 2 {
        let slots: BTreeMap<B256, U256> = if i % 3 == 0 {
            (0..rng.below(6) + 1)
                .map(|j| (slot(j), U256::from(rng.below(1000) + 1)))
                .collect()
        } else {
            BTreeMap::new()
        };
        model
            .accounts
            .insert(address(i), (i, U256::from(i * 7 + 1), slots));
    }
    let entries = model
        .accounts
        .iter()
        .map(|(a, (nonce, balance, slots))| {
            let slots: Vec<(B256, U256)> = slots.iter().map(|(k, v)| (*k, *v)).collect();
            let storage_root = alloy_trie::root::storage_root_unhashed(slots.iter().copied());
            let account = moat_storage::Account {
                nonce: *nonce,
                balance: *balance,
                code_hash: keccak256([]),
                storage_root,
            };
            (*a, account, slots, Bytes::new())
        })
        .collect();
    (entries, model)
}

#[test]
fn parallel_roots_equal_sequential_ones_and_alloy_tries() {
    for seed in 1..=4u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let universe = 600;
        let (entries, mut model) = initial_state(&mut rng, universe);
        let store = Store::in_memory();
        let root = write_state_in_chunks(&store, entries, 100).unwrap();
        assert_eq!(root, model.root());
        for block in 0..8 {
            // Most blocks large enough for the workers, one below the threshold.
            let n = if block == 3 {
                PARALLEL_MIN_ACCOUNTS / 2
            } else {
                PARALLEL_MIN_ACCOUNTS + rng.below(200) as usize
            };
            let changes = random_block(&mut rng, &mut model, universe, n);
            let seq = state_update_with_workers(&store, &changes, 1).unwrap();
            for workers in [2, 3, 16] {
                let par = state_update_with_workers(&store, &changes, workers).unwrap();
                assert_same(&seq, &par);
            }
            assert_eq!(seq.root, model.root(), "seed {seed} block {block}");
            apply(&store, &changes, &seq);
        }
    }
}

/// A block that deletes all but one account: the root branch would collapse, so the
/// update falls back to one thread; the result is still the sequential one.
#[test]
fn a_block_that_collapses_the_root_branch_gives_the_sequential_result() {
    let mut rng = Rng(77);
    let universe = 2 * (PARALLEL_MIN_ACCOUNTS as u64 + 20);
    let (entries, model) = initial_state(&mut rng, universe);
    let store = Store::in_memory();
    write_state_in_chunks(&store, entries, 1_000).unwrap();
    let mut changes: Vec<AccountChange> = model
        .accounts
        .keys()
        .skip(1)
        .map(|a| AccountChange {
            address: *a,
            info: None,
            storage_wiped: true,
            ..AccountChange::default()
        })
        .collect();
    changes.sort_by_key(|c| c.address);
    assert!(changes.len() >= PARALLEL_MIN_ACCOUNTS);
    let seq = state_update_with_workers(&store, &changes, 1).unwrap();
    let par = state_update_with_workers(&store, &changes, 2).unwrap();
    assert_same(&seq, &par);
    let mut left = Model::default();
    let (a, v) = model.accounts.iter().next().unwrap();
    left.accounts.insert(*a, v.clone());
    assert_eq!(seq.root, left.root());
}
