//! Store behaviour, run on both backends through the same test bodies.

use crate::backend::{Backend, Op, Table};
use crate::codec::{META_SCHEMA, encode_account};
use crate::{Account, ChainMeta, DB_FILE, Store, StoreError, TxLocation, WriteBatch};
use alloy_primitives::{Address, B256, Bytes, KECCAK256_EMPTY, U256};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// A fresh directory under the system temp dir, removed on drop.
pub(crate) struct TempDir(PathBuf);

impl TempDir {
    pub(crate) fn new(label: &str) -> TempDir {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        let path = std::env::temp_dir().join(format!(
            "moat-storage-{label}-{}-{nanos}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        TempDir(path)
    }

    pub(crate) fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        // A test may have put a file where the directory would be.
        if std::fs::remove_dir_all(&self.0).is_err() {
            let _ = std::fs::remove_file(&self.0);
        }
    }
}

/// Runs `body` on an in-memory store and on a redb store in a fresh datadir.
fn on_both(label: &str, body: impl Fn(&Store)) {
    body(&Store::in_memory());
    let dir = TempDir::new(label);
    let store = Store::open(dir.path(), None).expect("open a fresh datadir");
    body(&store);
}

fn addr(n: u8) -> Address {
    Address::repeat_byte(n)
}

fn hash(n: u8) -> B256 {
    B256::repeat_byte(n)
}

fn slot(n: u64) -> B256 {
    B256::from(U256::from(n))
}

fn account(nonce: u64) -> Account {
    Account {
        nonce,
        balance: U256::from(1_000_000u64) << 100,
        code_hash: KECCAK256_EMPTY,
        storage_root: hash(0x56),
    }
}

fn meta(chain_id: u64) -> ChainMeta {
    ChainMeta {
        chain_id,
        genesis_hash: hash(chain_id as u8),
    }
}

fn commit(store: &Store, fill: impl FnOnce(&mut WriteBatch)) {
    let mut batch = WriteBatch::new();
    fill(&mut batch);
    store.commit(batch).expect("commit");
}

/// A relaxed commit of account `n` (nonce `n`).
fn commit_relaxed_account(store: &Store, n: u8) {
    let mut batch = WriteBatch::new();
    batch.set_account(addr(n), Some(account(n as u64)));
    store.commit_relaxed(batch).expect("relaxed commit");
}

#[test]
fn store_is_send_sync_and_clone() {
    fn check<T: Send + Sync + Clone + 'static>() {}
    check::<Store>();
}

#[test]
fn absent_things_read_as_none_or_zero() {
    on_both("absent", |store| {
        assert_eq!(store.chain_meta().unwrap(), None);
        assert_eq!(store.head().unwrap(), None);
        assert_eq!(store.header_rlp(&hash(1)).unwrap(), None);
        assert_eq!(store.body_rlp(&hash(1)).unwrap(), None);
        assert_eq!(store.receipts_rlp(&hash(1)).unwrap(), None);
        assert_eq!(store.block_number(&hash(1)).unwrap(), None);
        assert_eq!(store.canonical_hash(0).unwrap(), None);
        assert_eq!(store.tx_location(&hash(1)).unwrap(), None);
        assert_eq!(store.account(&addr(1)).unwrap(), None);
        assert_eq!(store.storage(&addr(1), &slot(1)).unwrap(), U256::ZERO);
        assert!(store.storage_slots(&addr(1)).unwrap().is_empty());
        assert!(store.accounts().unwrap().is_empty());
        assert_eq!(store.code(&hash(1)).unwrap(), None);
        assert_eq!(store.sidecar(&hash(1)).unwrap(), None);
        assert!(store.journal().unwrap().is_empty());
        // The empty code needs no entry.
        assert_eq!(store.code(&KECCAK256_EMPTY).unwrap(), Some(Bytes::new()));
    });
}

/// After a write the disk refused, the store tries no other (the engine needs closing and
/// reopening first) and says why; reads go on.
#[test]
fn a_write_the_disk_refused_stops_every_later_write() {
    on_both("disk", |store| {
        commit(store, |b| {
            b.set_head(1, hash(1));
        });
        assert_eq!(store.write_failure(), None);
        let mut ops = {
            let mut b = WriteBatch::new();
            b.set_head(2, hash(2));
            b.into_ops()
        };
        ops.push(Op::FailDisk);
        assert!(matches!(
            store.apply(ops, crate::Durable::Relaxed, false),
            Err(StoreError::WriteFailed(_))
        ));
        assert_eq!(store.write_failure(), Some("No space left on device"));
        let mut later = WriteBatch::new();
        later.set_head(3, hash(3));
        assert!(matches!(
            store.commit(later),
            Err(StoreError::WriteFailed(_))
        ));
        assert_eq!(store.head().unwrap(), Some((1, hash(1))));
    });
}

#[test]
fn forkchoice_marks_are_kept_and_forgotten() {
    on_both("marks", |store| {
        assert_eq!(store.safe().unwrap(), None);
        assert_eq!(store.finalized().unwrap(), None);
        commit(store, |b| {
            b.set_forkchoice_marks(Some((5, hash(5))), Some((3, hash(3))));
        });
        assert_eq!(store.safe().unwrap(), Some((5, hash(5))));
        assert_eq!(store.finalized().unwrap(), Some((3, hash(3))));
        // A batch that says nothing of them leaves them as they are.
        commit(store, |b| {
            b.set_head(6, hash(6));
        });
        assert_eq!(store.finalized().unwrap(), Some((3, hash(3))));
        commit(store, |b| {
            b.set_forkchoice_marks(None, Some((4, hash(4))));
        });
        assert_eq!(store.safe().unwrap(), None);
        assert_eq!(store.finalized().unwrap(), Some((4, hash(4))));
    });
}

#[test]
fn a_commit_is_visible_to_every_clone_when_it_returns() {
    on_both("visible", |store| {
        let other = store.clone();
        let code = Bytes::from_static(&[0x60, 0x00, 0x56]);
        commit(store, |b| {
            b.set_meta(meta(1))
                .put_header(hash(10), 7, vec![0xc1, 0x07])
                .put_body(hash(10), vec![0xc2, 0xc0, 0xc0])
                .put_receipts(hash(10), vec![0xc0])
                .set_canonical(7, hash(10))
                .set_account(addr(1), Some(account(3)))
                .set_storage(addr(1), slot(1), U256::from(42))
                .put_code(hash(0xcc), code.clone())
                .set_head(7, hash(10));
        });
        assert_eq!(other.chain_meta().unwrap(), Some(meta(1)));
        assert_eq!(other.head().unwrap(), Some((7, hash(10))));
        assert_eq!(other.header_rlp(&hash(10)).unwrap(), Some(vec![0xc1, 0x07]));
        assert_eq!(
            other.body_rlp(&hash(10)).unwrap(),
            Some(vec![0xc2, 0xc0, 0xc0])
        );
        assert_eq!(other.receipts_rlp(&hash(10)).unwrap(), Some(vec![0xc0]));
        assert_eq!(other.block_number(&hash(10)).unwrap(), Some(7));
        assert_eq!(other.canonical_hash(7).unwrap(), Some(hash(10)));
        assert_eq!(other.account(&addr(1)).unwrap(), Some(account(3)));
        assert_eq!(other.storage(&addr(1), &slot(1)).unwrap(), U256::from(42));
        assert_eq!(other.code(&hash(0xcc)).unwrap(), Some(code));

        // An empty batch is a no-op, not an error.
        store.commit(WriteBatch::new()).unwrap();
        assert_eq!(other.head().unwrap(), Some((7, hash(10))));
    });
}

#[test]
fn deleting_an_account_deletes_its_storage() {
    on_both("delete-account", |store| {
        commit(store, |b| {
            b.set_account(addr(1), Some(account(1)))
                .set_account(addr(2), Some(account(1)))
                .set_storage(addr(1), slot(1), U256::from(1))
                .set_storage(addr(1), slot(2), U256::from(2))
                .set_storage(addr(2), slot(1), U256::from(3));
        });
        commit(store, |b| {
            b.set_account(addr(1), None);
        });
        assert_eq!(store.account(&addr(1)).unwrap(), None);
        assert!(store.storage_slots(&addr(1)).unwrap().is_empty());
        assert_eq!(store.storage(&addr(1), &slot(2)).unwrap(), U256::ZERO);
        // Neighbours are untouched.
        assert_eq!(store.account(&addr(2)).unwrap(), Some(account(1)));
        assert_eq!(store.storage(&addr(2), &slot(1)).unwrap(), U256::from(3));
    });
}

#[test]
fn a_deleted_account_keeps_no_storage_written_in_the_same_batch() {
    on_both("delete-same-batch", |store| {
        commit(store, |b| {
            b.set_account(addr(1), Some(account(1)))
                .set_storage(addr(1), slot(1), U256::from(1))
                .set_account(addr(1), None);
        });
        assert_eq!(store.account(&addr(1)).unwrap(), None);
        assert!(store.storage_slots(&addr(1)).unwrap().is_empty());
    });
}

#[test]
fn an_account_deleted_then_recreated_in_one_batch_starts_with_fresh_storage() {
    on_both("recreate", |store| {
        commit(store, |b| {
            b.set_account(addr(1), Some(account(1)))
                .set_storage(addr(1), slot(1), U256::from(1))
                .set_storage(addr(1), slot(2), U256::from(2));
        });
        commit(store, |b| {
            b.set_account(addr(1), None)
                .set_account(addr(1), Some(account(9)))
                .set_storage(addr(1), slot(3), U256::from(3));
        });
        assert_eq!(store.account(&addr(1)).unwrap(), Some(account(9)));
        assert_eq!(
            store.storage_slots(&addr(1)).unwrap(),
            vec![(slot(3), U256::from(3))]
        );
    });
}

#[test]
fn wipe_storage_applies_before_the_batch_writes() {
    on_both("wipe", |store| {
        commit(store, |b| {
            b.set_account(addr(1), Some(account(1)))
                .set_storage(addr(1), slot(1), U256::from(1))
                .set_storage(addr(1), slot(2), U256::from(2))
                .set_storage(addr(2), slot(1), U256::from(5));
        });
        commit(store, |b| {
            // Called after the write on purpose: the wipe still goes first.
            b.set_storage(addr(1), slot(7), U256::from(7))
                .wipe_storage(addr(1));
        });
        assert_eq!(
            store.storage_slots(&addr(1)).unwrap(),
            vec![(slot(7), U256::from(7))]
        );
        // The account itself survives a wipe; other accounts' storage too.
        assert_eq!(store.account(&addr(1)).unwrap(), Some(account(1)));
        assert_eq!(store.storage(&addr(2), &slot(1)).unwrap(), U256::from(5));
    });
}

#[test]
fn zero_storage_deletes_and_slots_come_sorted() {
    on_both("slots", |store| {
        let big = U256::MAX - U256::from(1);
        commit(store, |b| {
            // Written out of order; includes the extreme slots of the key range.
            b.set_storage(addr(1), B256::repeat_byte(0xff), U256::from(9))
                .set_storage(addr(1), slot(300), big)
                .set_storage(addr(1), B256::ZERO, U256::from(1))
                .set_storage(addr(1), slot(2), U256::from(2))
                .set_storage(addr(0), slot(1), U256::from(1))
                .set_storage(addr(2), slot(1), U256::from(1));
        });
        assert_eq!(
            store.storage_slots(&addr(1)).unwrap(),
            vec![
                (B256::ZERO, U256::from(1)),
                (slot(2), U256::from(2)),
                (slot(300), big),
                (B256::repeat_byte(0xff), U256::from(9)),
            ]
        );
        commit(store, |b| {
            b.set_storage(addr(1), slot(2), U256::ZERO)
                .set_storage(addr(1), slot(300), U256::from(3))
                // Zero for a slot that never existed is fine.
                .set_storage(addr(1), slot(1000), U256::ZERO);
        });
        assert_eq!(store.storage(&addr(1), &slot(2)).unwrap(), U256::ZERO);
        assert_eq!(store.storage(&addr(1), &slot(300)).unwrap(), U256::from(3));
        assert_eq!(
            store.storage_slots(&addr(1)).unwrap(),
            vec![
                (B256::ZERO, U256::from(1)),
                (slot(300), U256::from(3)),
                (B256::repeat_byte(0xff), U256::from(9)),
            ]
        );
    });
}

#[test]
fn accounts_come_sorted_by_address() {
    on_both("accounts", |store| {
        commit(store, |b| {
            for n in [9u8, 0xff, 1, 0, 0x80] {
                b.set_account(addr(n), Some(account(n.into())));
            }
        });
        commit(store, |b| {
            b.set_account(addr(0x80), None);
        });
        let all = store.accounts().unwrap();
        let addresses: Vec<Address> = all.iter().map(|(a, _)| *a).collect();
        assert_eq!(addresses, vec![addr(0), addr(1), addr(9), addr(0xff)]);
        assert_eq!(all[2].1, account(9));
    });
}

#[test]
fn canonical_index_and_reorg() {
    on_both("canonical", |store| {
        commit(store, |b| {
            for n in 0..=5u8 {
                b.put_header(hash(n), n.into(), vec![n])
                    .set_canonical(n.into(), hash(n));
            }
            b.set_head(5, hash(5));
        });
        // Reorg at 2: the new branch 3'..4' replaces 3..5.
        commit(store, |b| {
            b.set_canonical(3, hash(0x33))
                .set_canonical(4, hash(0x44))
                .unset_canonical_above(2)
                .set_head(4, hash(0x44));
        });
        assert_eq!(store.canonical_hash(2).unwrap(), Some(hash(2)));
        assert_eq!(store.canonical_hash(3).unwrap(), Some(hash(0x33)));
        assert_eq!(store.canonical_hash(4).unwrap(), Some(hash(0x44)));
        assert_eq!(store.canonical_hash(5).unwrap(), None);
        assert_eq!(store.head().unwrap(), Some((4, hash(0x44))));
        // Headers of the abandoned branch stay readable by hash.
        assert_eq!(store.header_rlp(&hash(5)).unwrap(), Some(vec![5]));
        assert_eq!(store.block_number(&hash(5)).unwrap(), Some(5));

        // Two cuts in one batch: the lower one wins. u64::MAX cuts nothing.
        commit(store, |b| {
            b.unset_canonical_above(3).unset_canonical_above(u64::MAX);
        });
        assert_eq!(store.canonical_hash(3).unwrap(), Some(hash(0x33)));
        assert_eq!(store.canonical_hash(4).unwrap(), None);
        commit(store, |b| {
            b.unset_canonical_above(u64::MAX);
        });
        assert_eq!(store.canonical_hash(3).unwrap(), Some(hash(0x33)));
    });
}

#[test]
fn tx_locations_put_and_delete() {
    on_both("tx-index", |store| {
        let location = TxLocation {
            block_hash: hash(7),
            block_number: 7,
            index: 2,
        };
        commit(store, |b| {
            b.put_tx_location(hash(1), location).put_tx_location(
                hash(2),
                TxLocation {
                    index: 3,
                    ..location
                },
            );
        });
        assert_eq!(store.tx_location(&hash(1)).unwrap(), Some(location));
        commit(store, |b| {
            b.delete_tx_location(hash(1));
        });
        assert_eq!(store.tx_location(&hash(1)).unwrap(), None);
        assert_eq!(
            store.tx_location(&hash(2)).unwrap().map(|l| l.index),
            Some(3)
        );
    });
}

#[test]
fn sidecars_and_journal_put_and_delete() {
    on_both("sidecars", |store| {
        commit(store, |b| {
            b.put_sidecar(hash(1), vec![1, 1])
                .put_sidecar(hash(2), vec![2, 2])
                .put_journal(hash(9), vec![9])
                .put_journal(hash(3), vec![3]);
        });
        assert_eq!(store.sidecar(&hash(1)).unwrap(), Some(vec![1, 1]));
        assert_eq!(
            store.journal().unwrap(),
            vec![(hash(3), vec![3]), (hash(9), vec![9])]
        );
        commit(store, |b| {
            // Calls on the same key apply in order: the last one wins.
            b.delete_sidecar(hash(1))
                .put_sidecar(hash(2), vec![0x22])
                .delete_sidecar(hash(2))
                .put_sidecar(hash(2), vec![0x23])
                .delete_journal(hash(9));
        });
        assert_eq!(store.sidecar(&hash(1)).unwrap(), None);
        assert_eq!(store.sidecar(&hash(2)).unwrap(), Some(vec![0x23]));
        assert_eq!(store.journal().unwrap(), vec![(hash(3), vec![3])]);
    });
}

#[test]
fn a_failing_batch_leaves_nothing() {
    on_both("atomic", |store| {
        commit(store, |b| {
            b.set_account(addr(1), Some(account(1)))
                .set_storage(addr(1), slot(1), U256::from(1))
                .set_head(1, hash(1));
        });
        let mut batch = WriteBatch::new();
        batch
            .put_header(hash(2), 2, vec![2])
            .set_canonical(2, hash(2))
            .unset_canonical_above(0)
            .set_account(addr(1), None)
            .set_account(addr(2), Some(account(2)))
            .set_head(2, hash(2));
        let mut ops = batch.into_ops();
        // Fail after every other op has been applied inside the transaction.
        ops.push(Op::Fail);
        assert!(matches!(store.backend.apply(ops), Err(StoreError::Db(_))));

        assert_eq!(store.head().unwrap(), Some((1, hash(1))));
        assert_eq!(store.header_rlp(&hash(2)).unwrap(), None);
        assert_eq!(store.canonical_hash(2).unwrap(), None);
        assert_eq!(store.account(&addr(1)).unwrap(), Some(account(1)));
        assert_eq!(store.storage(&addr(1), &slot(1)).unwrap(), U256::from(1));
        assert_eq!(store.account(&addr(2)).unwrap(), None);
        // And the store still takes commits afterwards.
        commit(store, |b| {
            b.set_head(3, hash(3));
        });
        assert_eq!(store.head().unwrap(), Some((3, hash(3))));
    });
}

#[test]
fn an_undecodable_value_is_reported_as_corrupt() {
    on_both("corrupt", |store| {
        store
            .backend
            .apply(vec![Op::Put {
                table: Table::Accounts,
                key: addr(1).to_vec(),
                value: vec![1, 2, 3],
            }])
            .unwrap();
        let err = store.account(&addr(1)).unwrap_err();
        assert!(matches!(err, StoreError::Corrupt(_)), "{err}");
        assert!(store.accounts().is_err());

        // A storage key too short to hold a slot.
        let mut key = addr(1).to_vec();
        key.push(5);
        store
            .backend
            .apply(vec![Op::Put {
                table: Table::Storage,
                key,
                value: vec![1],
            }])
            .unwrap();
        let err = store.storage_slots(&addr(1)).unwrap_err();
        assert!(matches!(err, StoreError::Corrupt(_)), "{err}");
    });
}

#[test]
fn concurrent_readers_never_see_the_head_go_back() {
    on_both("concurrent", |store| {
        std::thread::scope(|scope| {
            let readers: Vec<_> = (0..2)
                .map(|_| {
                    let store = store.clone();
                    scope.spawn(move || {
                        let mut last = 0;
                        for _ in 0..2_000 {
                            if let Some((number, hash)) = store.head().unwrap() {
                                assert!(number >= last, "head went from {last} to {number}");
                                assert_eq!(store.canonical_hash(number).unwrap(), Some(hash));
                                last = number;
                            }
                        }
                    })
                })
                .collect();
            for n in 1..=30u64 {
                commit(store, |b| {
                    b.set_canonical(n, B256::from(U256::from(n)))
                        .set_head(n, B256::from(U256::from(n)));
                });
            }
            for reader in readers {
                reader.join().expect("reader thread");
            }
        });
    });
}

// redb only: what survives the process.

#[test]
fn reopening_a_datadir_finds_head_meta_and_state() {
    let dir = TempDir::new("reopen");
    {
        let store = Store::open(dir.path(), Some(meta(1))).unwrap();
        // Opening does not claim the datadir for a chain; the genesis commit does.
        assert_eq!(store.chain_meta().unwrap(), None);
        commit(&store, |b| {
            b.set_meta(meta(1))
                .put_header(hash(1), 0, vec![0xc0])
                .set_canonical(0, hash(1))
                .set_account(addr(1), Some(account(5)))
                .set_storage(addr(1), slot(1), U256::from(11))
                .put_journal(hash(4), vec![4])
                .set_head(0, hash(1));
        });
    }
    assert!(dir.path().join(DB_FILE).is_file());
    for meta in [Some(meta(1)), None] {
        let store = Store::open(dir.path(), meta).unwrap();
        assert_eq!(store.chain_meta().unwrap(), Some(super::tests::meta(1)));
        assert_eq!(store.head().unwrap(), Some((0, hash(1))));
        assert_eq!(store.header_rlp(&hash(1)).unwrap(), Some(vec![0xc0]));
        assert_eq!(store.account(&addr(1)).unwrap(), Some(account(5)));
        assert_eq!(store.storage(&addr(1), &slot(1)).unwrap(), U256::from(11));
        assert_eq!(store.journal().unwrap(), vec![(hash(4), vec![4])]);
    }
}

#[test]
fn opening_another_chains_datadir_is_refused_readably() {
    let dir = TempDir::new("mismatch");
    {
        let store = Store::open(dir.path(), None).unwrap();
        commit(&store, |b| {
            b.set_meta(meta(1)).set_head(0, hash(1));
        });
    }
    let err = Store::open(dir.path(), Some(meta(11155111))).unwrap_err();
    let StoreError::ChainMismatch {
        expected, found, ..
    } = &err
    else {
        panic!("expected ChainMismatch, got {err}");
    };
    assert_eq!((*expected, *found), (meta(11155111), meta(1)));
    let message = err.to_string();
    assert!(message.contains("belongs to another chain"), "{message}");
    assert!(
        message.contains(&dir.path().display().to_string()),
        "{message}"
    );
    assert!(message.contains("chain id 1 "), "{message}");
    assert!(message.contains("chain id 11155111 "), "{message}");
    assert!(
        message.contains(&meta(1).genesis_hash.to_string()),
        "{message}"
    );
    assert!(
        message.contains(&meta(11155111).genesis_hash.to_string()),
        "{message}"
    );
    // The same chain id with another genesis is another chain too.
    let forked = ChainMeta {
        chain_id: 1,
        genesis_hash: hash(0xee),
    };
    assert!(matches!(
        Store::open(dir.path(), Some(forked)),
        Err(StoreError::ChainMismatch { .. })
    ));
    // The refusal did not change the datadir.
    let store = Store::open(dir.path(), Some(meta(1))).unwrap();
    assert_eq!(store.head().unwrap(), Some((0, hash(1))));
}

#[test]
fn an_abandoned_write_transaction_leaves_nothing() {
    let dir = TempDir::new("abandon");
    {
        let store = Store::open(dir.path(), None).unwrap();
        commit(&store, |b| {
            b.set_head(1, hash(1));
        });
        let Backend::Redb(db) = &*store.backend else {
            panic!("Store::open builds a redb store");
        };
        let mut batch = WriteBatch::new();
        batch
            .put_header(hash(2), 2, vec![2])
            .set_account(addr(1), Some(account(1)))
            .set_head(2, hash(2));
        db.write_then_abandon(&batch.into_ops()).unwrap();
        assert_eq!(store.head().unwrap(), Some((1, hash(1))));
        assert_eq!(store.account(&addr(1)).unwrap(), None);
    }
    let store = Store::open(dir.path(), None).unwrap();
    assert_eq!(store.head().unwrap(), Some((1, hash(1))));
    assert_eq!(store.header_rlp(&hash(2)).unwrap(), None);
    assert_eq!(store.account(&addr(1)).unwrap(), None);
}

/// A kill while the database file was being created (its half-written file left under
/// the temporary name, none under the real one) does not keep the datadir from opening.
#[test]
fn a_kill_while_the_database_was_being_created_leaves_a_datadir_that_opens() {
    let dir = TempDir::new("half-created");
    std::fs::create_dir_all(dir.path()).unwrap();
    std::fs::write(dir.path().join("moat.redb.new"), [0u8; 100]).unwrap();
    let store = Store::open(dir.path(), None).unwrap();
    assert_eq!(store.head().unwrap(), None);
    drop(store);
    assert!(!dir.path().join("moat.redb.new").exists());
    Store::open(dir.path(), None).unwrap();
}

#[test]
fn a_datadir_in_use_is_refused() {
    let dir = TempDir::new("in-use");
    let _first = Store::open(dir.path(), None).unwrap();
    let err = Store::open(dir.path(), None).unwrap_err();
    assert!(err.to_string().contains("already open"), "{err}");
}

#[test]
fn a_datadir_of_another_schema_is_refused() {
    let dir = TempDir::new("schema");
    {
        let store = Store::open(dir.path(), None).unwrap();
        store
            .backend
            .apply(vec![Op::Put {
                table: Table::Meta,
                key: META_SCHEMA.to_vec(),
                value: 99u32.to_be_bytes().to_vec(),
            }])
            .unwrap();
    }
    let err = Store::open(dir.path(), None).unwrap_err();
    assert!(
        matches!(err, StoreError::UnsupportedSchema { found: 99, .. }),
        "{err}"
    );
}

#[test]
fn a_file_in_the_way_of_the_datadir_is_an_io_error() {
    let dir = TempDir::new("io");
    std::fs::write(dir.path(), b"not a directory").unwrap();
    let err = Store::open(&dir.path().join("sub"), None).unwrap_err();
    assert!(matches!(err, StoreError::Io { .. }), "{err}");
    let _ = std::fs::remove_file(dir.path());
}

#[test]
fn account_layout_is_what_the_store_reads() {
    // Guards against the codec and the store drifting apart on the account layout.
    let store = Store::in_memory();
    store
        .backend
        .apply(vec![Op::Put {
            table: Table::Accounts,
            key: addr(3).to_vec(),
            value: encode_account(&account(3)).to_vec(),
        }])
        .unwrap();
    assert_eq!(store.account(&addr(3)).unwrap(), Some(account(3)));
}

#[test]
fn undo_records_put_and_delete() {
    on_both("undo", |store| {
        commit(store, |b| {
            b.put_undo(hash(1), vec![1, 2, 3])
                .put_undo(hash(2), vec![4]);
        });
        assert_eq!(store.undo(&hash(1)).unwrap(), Some(vec![1, 2, 3]));
        commit(store, |b| {
            b.delete_undo(hash(1));
        });
        assert_eq!(store.undo(&hash(1)).unwrap(), None);
        assert_eq!(store.undo(&hash(2)).unwrap(), Some(vec![4]));
        assert!(!store.has_undo(&hash(1)).unwrap());
        assert!(store.has_undo(&hash(2)).unwrap());
    });
}

/// Relaxed commits are read at once, and made durable by `flush` or by dropping the
/// store: a reopened datadir holds every one of them.
#[test]
fn relaxed_commits_are_visible_at_once_and_durable_on_flush_or_drop() {
    let dir = TempDir::new("relaxed");
    {
        let store = Store::open(dir.path(), None).unwrap();
        for n in 1..=5u8 {
            commit_relaxed_account(&store, n);
            assert_eq!(store.account(&addr(n)).unwrap(), Some(account(n as u64)));
        }
        store.flush().unwrap();
        let mut batch = WriteBatch::new();
        batch.set_account(addr(9), Some(account(9)));
        store.commit_relaxed(batch).unwrap();
    }
    let store = Store::open(dir.path(), None).unwrap();
    for n in (1..=5u64).chain([9]) {
        assert_eq!(store.account(&addr(n as u8)).unwrap(), Some(account(n)));
    }
}

/// A flusher thread (`wait_for_flush`, then `flush`) is woken by each relaxed commit,
/// and once one waits, a relaxed commit made more than a second after the last sync
/// does not sync inline (it would carry a second of others' writes): it is left to the
/// flusher. The datadir reopens with every commit the flusher made durable.
#[test]
fn a_relaxed_commit_wakes_the_flusher_and_none_syncs_inline_once_one_waits() {
    let dir = TempDir::new("flusher");
    {
        let store = Store::open(dir.path(), None).unwrap();
        // Nothing to sync: the flusher waits its time out.
        assert!(!store.wait_for_flush(std::time::Duration::from_millis(10)));
        commit_relaxed_account(&store, 1);
        let woken = std::time::Instant::now();
        assert!(store.wait_for_flush(std::time::Duration::from_secs(30)));
        assert!(
            woken.elapsed() < std::time::Duration::from_secs(5),
            "woken at once"
        );
        store.flush().unwrap();
        assert!(!store.wait_for_flush(std::time::Duration::from_millis(10)));
        // Past a second since the last sync: still left to the flusher.
        std::thread::sleep(std::time::Duration::from_millis(1_100));
        commit_relaxed_account(&store, 2);
        assert!(store.wait_for_flush(std::time::Duration::from_millis(10)));
        store.flush().unwrap();
    }
    let store = Store::open(dir.path(), None).unwrap();
    for n in 1..=2u64 {
        assert_eq!(store.account(&addr(n as u8)).unwrap(), Some(account(n)));
    }
    // In memory there is nothing to sync.
    let mem = Store::in_memory();
    let mut batch = WriteBatch::new();
    batch.set_account(addr(3), Some(account(3)));
    mem.commit_relaxed(batch).unwrap();
    assert!(!mem.wait_for_flush(std::time::Duration::from_millis(1)));
}

/// Once a flusher waits, relaxed commits are written behind: read and scanned at once
/// (merged over the file, a wiped range hiding the file's keys), written before a later
/// durable commit in the same order, and durable on flush.
#[test]
fn relaxed_commits_written_behind_read_at_once_and_land_in_order() {
    let dir = TempDir::new("behind");
    let slot = |n: u8| hash(n);
    let value = |n: u64| U256::from(n);
    let slots = |store: &Store| -> Vec<(B256, U256)> { store.storage_slots(&addr(1)).unwrap() };
    let pending = |store: &Store| store.pending_commits().0;
    {
        let store = Store::open(dir.path(), None).unwrap();
        commit(&store, |b| {
            for n in 1..=3u8 {
                b.set_account(addr(n), Some(account(n as u64)));
                b.set_storage(addr(1), slot(n), value(10 * n as u64));
            }
        });
        // Without a flusher a relaxed commit is applied at once.
        commit_relaxed_account(&store, 7);
        assert_eq!(pending(&store), 0);
        // A flusher waits from now on.
        assert!(store.wait_for_flush(std::time::Duration::from_millis(10)));
        store.flush().unwrap();

        let mut a = WriteBatch::new();
        a.set_storage(addr(1), slot(2), value(21))
            .set_storage(addr(1), slot(4), value(40))
            .set_account(addr(3), None);
        store.commit_relaxed(a).unwrap();
        assert_eq!(pending(&store), 1, "written behind");
        assert_eq!(store.storage(&addr(1), &slot(2)).unwrap(), value(21));
        assert_eq!(store.account(&addr(3)).unwrap(), None);
        assert_eq!(
            slots(&store),
            vec![
                (slot(1), value(10)),
                (slot(2), value(21)),
                (slot(3), value(30)),
                (slot(4), value(40))
            ]
        );
        let mut b = WriteBatch::new();
        b.wipe_storage(addr(1))
            .set_storage(addr(1), slot(5), value(50));
        b.set_account(addr(2), Some(account(22)));
        store.commit_relaxed(b).unwrap();
        assert_eq!(pending(&store), 2);
        assert_eq!(slots(&store), vec![(slot(5), value(50))]);
        assert_eq!(store.storage(&addr(1), &slot(1)).unwrap(), U256::ZERO);
        assert_eq!(store.account(&addr(2)).unwrap(), Some(account(22)));
        // The whole table's scan sees the same.
        let mut all = Vec::new();
        store
            .storage_entries(|address, slot, value| {
                all.push((address, slot, value));
                Ok(true)
            })
            .unwrap();
        assert_eq!(all, vec![(addr(1), slot(5), value(50))]);

        // A durable commit writes the waiting ones first.
        commit(&store, |b| {
            b.set_storage(addr(1), slot(6), value(60));
            b.set_account(addr(3), Some(account(33)));
        });
        assert_eq!(pending(&store), 0);
        assert_eq!(
            slots(&store),
            vec![(slot(5), value(50)), (slot(6), value(60))]
        );

        commit_relaxed_account(&store, 4);
        assert_eq!(pending(&store), 1);
        assert!(store.wait_for_flush(std::time::Duration::from_millis(10)));
        store.flush().unwrap();
        assert_eq!(pending(&store), 0);
        assert_eq!(store.account(&addr(4)).unwrap(), Some(account(4)));

        // A flusher's round writes the oldest sixty-four and asks for another.
        for n in 10..78u8 {
            commit_relaxed_account(&store, n);
        }
        assert_eq!(pending(&store), 68);
        assert!(store.wait_for_flush(std::time::Duration::from_millis(10)));
        store.flush_round().unwrap();
        assert_eq!(pending(&store), 4);
        assert!(store.wait_for_flush(std::time::Duration::from_millis(10)));
        store.flush_round().unwrap();
        assert_eq!(pending(&store), 0);
    }
    let store = Store::open(dir.path(), None).unwrap();
    assert_eq!(
        slots(&store),
        vec![(slot(5), value(50)), (slot(6), value(60))]
    );
    for (n, nonce) in [(1, 1), (2, 22), (3, 33), (4, 4), (7, 7), (10, 10), (29, 29)] {
        assert_eq!(store.account(&addr(n)).unwrap(), Some(account(nonce)));
    }
}

#[test]
fn trie_node_reads_follow_every_commit_through_the_node_cache() {
    on_both("trie-node-cache", |store| {
        let (owner, other) = (hash(0), hash(7));
        commit(store, |b| {
            b.set_trie_node(owner, vec![1, 2], Some(b"first".to_vec()));
            b.set_trie_node(other, vec![1, 2], Some(b"other".to_vec()));
        });
        // The first read fills the cache, the second is served from it.
        for _ in 0..2 {
            assert_eq!(store.trie_node(&owner, &[1, 2]).unwrap().unwrap(), b"first");
        }
        // Overwritten, by a durable and by a relaxed commit.
        commit(store, |b| {
            b.set_trie_node(owner, vec![1, 2], Some(b"second".to_vec()));
        });
        assert_eq!(
            store.trie_node(&owner, &[1, 2]).unwrap().unwrap(),
            b"second"
        );
        let mut batch = WriteBatch::new();
        batch.set_trie_node(owner, vec![1, 2], Some(b"third".to_vec()));
        store.commit_relaxed(batch).unwrap();
        assert_eq!(store.trie_node(&owner, &[1, 2]).unwrap().unwrap(), b"third");
        // Removed.
        commit(store, |b| {
            b.set_trie_node(owner, vec![1, 2], None);
        });
        assert_eq!(store.trie_node(&owner, &[1, 2]).unwrap(), None);
        // A wiped trie is gone from reads too, and other tries keep their nodes.
        assert_eq!(store.trie_node(&other, &[1, 2]).unwrap().unwrap(), b"other");
        commit(store, |b| {
            b.wipe_trie(other);
        });
        assert_eq!(store.trie_node(&other, &[1, 2]).unwrap(), None);
    });
}

/// A panic inside a database operation (redb's on some damaged pages) is an error of
/// the operation, not a dead thread; the guard says so while it runs.
#[test]
fn a_panic_inside_the_database_is_a_corrupt_error() {
    use crate::backend::{guarded, in_guarded_read};
    assert!(!in_guarded_read());
    let e = guarded::<()>("reading a value", || {
        assert!(in_guarded_read());
        panic!("range end index 6080 out of range for slice of length 4096")
    })
    .unwrap_err();
    assert!(!in_guarded_read());
    assert!(
        matches!(&e, StoreError::Corrupt(m) if m.contains("damaged") && m.contains("6080")),
        "{e}"
    );
    assert_eq!(guarded("ok", || Ok(7)).unwrap(), 7);
}

/// The node cache holds only nodes that passed a check or that a trie update wrote: a
/// node a commit takes from a stored record (an undo record) is checked when next read,
/// and one that fails its check is not cached.
#[test]
fn nodes_from_records_are_checked_when_next_read() {
    let store = Store::in_memory();
    let owner = B256::repeat_byte(5);
    let mut batch = WriteBatch::new();
    batch.set_trie_node(owner, vec![1], Some(b"computed".to_vec()));
    store.commit(batch).unwrap();
    // Written by an update: trusted, answered without the check.
    let read = store.trie_node_checked(&owner, &[1], |_| false).unwrap();
    assert_eq!(read, Ok(b"computed".to_vec()));

    let mut batch = WriteBatch::new();
    batch
        .nodes_from_records()
        .set_trie_node(owner, vec![1], Some(b"restored".to_vec()));
    store.commit(batch).unwrap();
    // From a record: checked, and a failed check leaves it out of the cache.
    let read = store.trie_node_checked(&owner, &[1], |_| false).unwrap();
    assert_eq!(read, Err(Some(b"restored".to_vec())));
    let read = store
        .trie_node_checked(&owner, &[1], |n| n == b"restored")
        .unwrap();
    assert_eq!(read, Ok(b"restored".to_vec()));
    // Once checked it is cached.
    let read = store.trie_node_checked(&owner, &[1], |_| false).unwrap();
    assert_eq!(read, Ok(b"restored".to_vec()));
}
