//! The blob pool on disk: every pooled blob transaction, with its sidecar, kept in a
//! file of its own so that a restart (graceful or `kill -9`) finds the blob pool as it
//! was, and pays no KZG for sidecars that were verified before it.
//!
//! - **What is kept.** Each blob tx the pool holds (from peers and from RPC alike), in its
//!   network form, with its sender and whether it is local. Txs waiting in the gapped
//!   buffer are not: their sidecars were never verified; nor sampled ones (eth/72, some
//!   cells of their blobs): peers have them whole. The store mirrors the pool: a
//!   writer thread ([`BlobStore::run`]) compares the pool's blob txs with what is on disk
//!   and, in one redb write transaction, writes the newcomers and deletes what left
//!   (mined, replaced, evicted, expired). It runs when a blob tx is pooled (woken at
//!   once, at most every [`MIN_GAP`]) and every [`PERIOD`] otherwise, so a tx pooled from
//!   a peer is on disk within milliseconds, and a departure within a second (a departed
//!   tx found at a start is refused again by admission, and deleted then).
//! - **Durability.** Each write transaction commits with `fdatasync` (redb's immediate
//!   durability): a crash leaves the file at its last commit, whole. Nothing is
//!   acknowledged to anyone on it: a peer's tx pooled just before a crash may be missing
//!   after it, as with any client; a local tx is in the journal too, synced before its
//!   RPC answer.
//! - **Bound.** What is on disk is what the blob subpool holds, so it is bounded by its
//!   byte limit (`--blobpool.datacap`) and follows its eviction order.
//! - **At a start.** [`BlobStore::open`] reads every record back, checks its checksum,
//!   that it decodes to the hash it is filed under, and that its sidecar's commitments
//!   give the tx's versioned hashes; a record that fails is dropped with a warning
//!   (counted in [`BlobStoreContents::damaged`]), never a panic.
//!   [`Pool::reload_blob_store`](crate::Pool::reload_blob_store) offers the rest to
//!   admission, which checks nonce, balance and fees against the current state as for
//!   any tx, but skips stage 9: the sidecar's proofs were verified when it was first
//!   pooled (a version-0 sidecar reloaded after Osaka is converted as at RPC).
//!
//! A record is `crc32 (u32 LE) | format (1) | flags (1: bit 0 local) | sender (20) |
//! network bytes`, the checksum over everything after it, under the tx hash.

mod reload;

pub use reload::BlobReload;

use crate::{Counter, FastSet, PoolMetrics, PoolTx};
use alloy_primitives::{Address, B256};
use moat_common::transaction::PooledTransaction;
use parking_lot::{Condvar, Mutex};
use redb::{Database, Durability, ReadableTable, TableDefinition};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

const TABLE: TableDefinition<'static, &'static [u8], &'static [u8]> =
    TableDefinition::new("blob_txs");

/// The record format written now.
const FORMAT: u8 = 1;
const HEADER: usize = 4 + 1 + 1 + 20;
const LOCAL: u8 = 1;

/// The writer's pace when nothing wakes it: departures reach the disk within this.
pub(crate) const PERIOD: Duration = Duration::from_secs(1);
/// The least time between two commits: pooled txs arriving together share one.
pub(crate) const MIN_GAP: Duration = Duration::from_millis(20);

/// A blob tx read back from the store.
#[derive(Debug)]
pub struct StoredBlobTx {
    /// The tx with its sidecar.
    pub tx: PooledTransaction,
    /// Its sender, as recovered when it was first pooled.
    pub sender: Address,
    /// Whether it was local (RPC or journal) when written.
    pub local: bool,
}

/// What [`BlobStore::open`] read back.
#[derive(Debug, Default)]
pub struct BlobStoreContents {
    /// The intact records.
    pub txs: Vec<StoredBlobTx>,
    /// Records dropped as damaged (bad checksum, undecodable, filed under another hash,
    /// or a sidecar whose commitments do not give the tx's versioned hashes).
    pub damaged: usize,
}

/// Why the store could not be opened or written.
#[derive(Debug, thiserror::Error)]
pub enum BlobStoreError {
    /// The file could not be opened or created.
    #[error("cannot open the blob pool store {path}: {why}")]
    Open {
        /// The store's file.
        path: PathBuf,
        /// redb's or the OS's reason.
        why: String,
    },
    /// A read or write transaction failed.
    #[error("blob pool store: {0}")]
    Db(String),
}

fn db_err(context: &'static str) -> impl FnOnce(redb::Error) -> BlobStoreError {
    move |e| BlobStoreError::Db(format!("{context}: {e}"))
}

struct Inner {
    db: Database,
    path: PathBuf,
    /// Hashes on disk as of the last commit.
    on_disk: Mutex<FastSet<B256>>,
    /// Set by [`BlobStore::wake`]; the writer sleeps on `woken` until then or [`PERIOD`].
    wake: Mutex<Wake>,
    woken: Condvar,
}

#[derive(Default)]
struct Wake {
    pending: bool,
    stop: bool,
    stopped: bool,
}

/// The blob pool's file: a redb database of blob txs by hash. Cloning shares it.
#[derive(Clone)]
pub struct BlobStore {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for BlobStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlobStore")
            .field("path", &self.inner.path)
            .field("on_disk", &self.len())
            .finish()
    }
}

/// A record's bytes for `tx`.
fn encode(tx: &PoolTx) -> Vec<u8> {
    let body = tx.tx.encoded_2718();
    let mut out = Vec::with_capacity(HEADER + body.len());
    out.extend_from_slice(&[0; 4]);
    out.push(FORMAT);
    out.push(if tx.origin.is_local() { LOCAL } else { 0 });
    out.extend_from_slice(tx.sender.as_slice());
    out.extend_from_slice(&body);
    let crc = crc32fast::hash(&out[4..]);
    out[..4].copy_from_slice(&crc.to_le_bytes());
    out
}

/// A record back, if intact and filed under its own hash.
fn decode(key: &[u8], value: &[u8]) -> Option<StoredBlobTx> {
    if value.len() < HEADER || key.len() != 32 {
        return None;
    }
    let crc = u32::from_le_bytes(value[..4].try_into().ok()?);
    if crc32fast::hash(&value[4..]) != crc || value[4] != FORMAT {
        return None;
    }
    let local = value[5] & LOCAL != 0;
    let sender = Address::from_slice(&value[6..HEADER]);
    let tx = PooledTransaction::decode_2718(&value[HEADER..]).ok()?;
    if tx.hash().as_slice() != key {
        return None;
    }
    // The sidecar is the one the tx commits to (a cheap hash per blob).
    let bundle = tx.sidecar()?;
    if bundle.versioned_hashes() != tx.tx().tx().blob_versioned_hashes() {
        return None;
    }
    Some(StoredBlobTx { tx, sender, local })
}

impl BlobStore {
    /// Opens (or creates) the store at `path` and reads back every intact record;
    /// damaged ones are deleted.
    pub fn open(path: &Path) -> Result<(BlobStore, BlobStoreContents), BlobStoreError> {
        let open_err = |why: String| BlobStoreError::Open {
            path: path.to_path_buf(),
            why,
        };
        if let Some(dir) = path.parent()
            && !dir.as_os_str().is_empty()
        {
            std::fs::create_dir_all(dir).map_err(|e| open_err(e.to_string()))?;
        }
        let db = redb::Builder::new()
            // Records are read once at start and written once: little to cache.
            .set_cache_size(16 << 20)
            .create(path)
            .map_err(|e| match e {
                redb::DatabaseError::DatabaseAlreadyOpen => {
                    open_err("already open: is another moat running on this datadir?".into())
                }
                other => open_err(other.to_string()),
            })?;
        let mut contents = BlobStoreContents::default();
        let mut on_disk = FastSet::default();
        let mut damaged = Vec::new();
        {
            let txn = db
                .begin_write()
                .map_err(|e| db_err("beginning the first write")(e.into()))?;
            {
                let table = txn
                    .open_table(TABLE)
                    .map_err(|e| db_err("opening the table")(e.into()))?;
                for item in table
                    .iter()
                    .map_err(|e| db_err("reading the records")(e.into()))?
                {
                    let (k, v) = item.map_err(|e| db_err("reading a record")(e.into()))?;
                    match decode(k.value(), v.value()) {
                        Some(stored) => {
                            on_disk.insert(stored.tx.hash());
                            contents.txs.push(stored);
                        }
                        None => damaged.push(k.value().to_vec()),
                    }
                }
            }
            if !damaged.is_empty() {
                let mut table = txn
                    .open_table(TABLE)
                    .map_err(|e| db_err("opening the table")(e.into()))?;
                for key in &damaged {
                    table
                        .remove(key.as_slice())
                        .map_err(|e| db_err("deleting a damaged record")(e.into()))?;
                }
                tracing::warn!(
                    records = damaged.len(),
                    path = %path.display(),
                    "damaged blob pool records dropped"
                );
            }
            txn.commit()
                .map_err(|e| db_err("committing the first write")(e.into()))?;
        }
        contents.damaged = damaged.len();
        let store = BlobStore {
            inner: Arc::new(Inner {
                db,
                path: path.to_path_buf(),
                on_disk: Mutex::new(on_disk),
                wake: Mutex::new(Wake::default()),
                woken: Condvar::new(),
            }),
        };
        Ok((store, contents))
    }

    /// Blob txs on disk as of the last commit.
    pub fn len(&self) -> usize {
        self.inner.on_disk.lock().len()
    }

    /// Whether nothing is on disk.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Makes the disk hold exactly `txs` (the pool's blob txs): writes those it lacks,
    /// deletes those no longer in it, in one durable commit (none if nothing changed).
    /// Returns how many were written and deleted.
    pub fn sync_with(&self, txs: &[Arc<PoolTx>]) -> Result<(usize, usize), BlobStoreError> {
        let inner = &*self.inner;
        let (new, gone) = {
            let on_disk = inner.on_disk.lock();
            // Sampled blob txs (some cells of their blobs) are not kept: a restart
            // fetches them again from peers.
            let txs: Vec<&Arc<PoolTx>> = txs.iter().filter(|t| t.tx.has_whole_blobs()).collect();
            let wanted: FastSet<B256> = txs.iter().map(|t| t.hash()).collect();
            let new: Vec<&Arc<PoolTx>> = txs
                .into_iter()
                .filter(|t| !on_disk.contains(&t.hash()))
                .collect();
            let gone: Vec<B256> = on_disk
                .iter()
                .filter(|h| !wanted.contains(*h))
                .copied()
                .collect();
            (new, gone)
        };
        if new.is_empty() && gone.is_empty() {
            return Ok((0, 0));
        }
        // Encoded before the write transaction: redb has one writer at a time.
        let records: Vec<(B256, Vec<u8>)> = new.iter().map(|t| (t.hash(), encode(t))).collect();
        let result = (|| {
            let mut txn = inner
                .db
                .begin_write()
                .map_err(|e| db_err("beginning a write")(e.into()))?;
            txn.set_durability(Durability::Immediate)
                .map_err(|e| BlobStoreError::Db(format!("setting durability: {e}")))?;
            {
                let mut table = txn
                    .open_table(TABLE)
                    .map_err(|e| db_err("opening the table")(e.into()))?;
                for (hash, record) in &records {
                    table
                        .insert(hash.as_slice(), record.as_slice())
                        .map_err(|e| db_err("writing a record")(e.into()))?;
                }
                for hash in &gone {
                    table
                        .remove(hash.as_slice())
                        .map_err(|e| db_err("deleting a record")(e.into()))?;
                }
            }
            txn.commit().map_err(|e| db_err("committing")(e.into()))
        })();
        result?;
        {
            let mut on_disk = inner.on_disk.lock();
            for (hash, _) in &records {
                on_disk.insert(*hash);
            }
            for hash in &gone {
                on_disk.remove(hash);
            }
        }
        Ok((records.len(), gone.len()))
    }

    /// Forgets that `hash` is on disk, so that the next round writes its record again
    /// (its sidecar was converted), and wakes the writer.
    pub(crate) fn rewrite(&self, hash: B256) {
        self.inner.on_disk.lock().remove(&hash);
        self.wake();
    }

    /// Asks the writer to run now (a blob tx was pooled).
    pub(crate) fn wake(&self) {
        let mut w = self.inner.wake.lock();
        if !w.pending {
            w.pending = true;
            self.inner.woken.notify_one();
        }
    }

    /// The writer's loop: mirrors `snapshot()` (the pool's blob txs; `None` once the
    /// pool is gone) to disk when woken or every [`PERIOD`], until [`BlobStore::close`].
    /// Runs on a thread of its own (it does file I/O and `fdatasync`).
    pub(crate) fn run(
        &self,
        metrics: &PoolMetrics,
        snapshot: impl Fn() -> Option<Vec<Arc<PoolTx>>>,
    ) {
        let inner = &*self.inner;
        // Whether the last round failed: a failing spell is logged once.
        let mut failing = false;
        loop {
            let stop = {
                let mut w = inner.wake.lock();
                if !w.pending && !w.stop {
                    inner.woken.wait_for(&mut w, PERIOD);
                }
                w.pending = false;
                w.stop
            };
            let Some(txs) = snapshot() else { break };
            match self.sync_with(&txs) {
                Ok((written, deleted)) => {
                    metrics.add(Counter::blobstore_written, written as u64);
                    metrics.add(Counter::blobstore_deleted, deleted as u64);
                    if std::mem::take(&mut failing) {
                        tracing::info!("blob pool store writes again");
                    }
                }
                Err(e) => {
                    metrics.inc(Counter::blobstore_write_failures);
                    // The next round tries again.
                    if !std::mem::replace(&mut failing, true) {
                        tracing::warn!(error = %e, "blob pool store could not be written");
                    }
                }
            }
            if stop {
                break;
            }
            std::thread::sleep(MIN_GAP);
        }
        let mut w = inner.wake.lock();
        w.stopped = true;
        inner.woken.notify_all();
    }

    /// Stops the writer after one last round (the pool as it is now on disk), and waits
    /// for it, at most `within`. Whether it stopped in time.
    pub fn close(&self, within: Duration) -> bool {
        let inner = &*self.inner;
        let mut w = inner.wake.lock();
        w.stop = true;
        inner.woken.notify_all();
        let deadline = Instant::now() + within;
        while !w.stopped {
            if inner.woken.wait_until(&mut w, deadline).timed_out() {
                return w.stopped;
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::TxOrigin;
    use moat_common::testing::blob_tx_on_chain;
    use moat_common::transaction::SidecarVersion;

    fn pooled(seed: u64, origin: TxOrigin) -> Arc<PoolTx> {
        let signer = moat_crypto::secp::Signer::from_bytes(&B256::with_last_byte(7)).unwrap();
        let tx = blob_tx_on_chain(SidecarVersion::V0, 1, seed, &signer, 1, 10_000_000_000, 1);
        Arc::new(PoolTx {
            cost: tx.tx().tx().max_cost(),
            tx,
            sender: signer.address(),
            origin,
            added_at: Instant::now(),
            authorities: Default::default(),
        })
    }

    #[test]
    fn the_store_mirrors_the_pool_and_reads_back_what_it_wrote() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("blobpool").join("blobs.redb");
        let (store, contents) = BlobStore::open(&path).unwrap();
        assert!(contents.txs.is_empty());
        let a = pooled(0, TxOrigin::Peer(Default::default()));
        let b = pooled(1, TxOrigin::Local);
        assert_eq!(store.sync_with(&[a.clone(), b.clone()]).unwrap(), (2, 0));
        assert_eq!(store.sync_with(&[a.clone(), b.clone()]).unwrap(), (0, 0));
        // `a` left the pool.
        assert_eq!(store.sync_with(std::slice::from_ref(&b)).unwrap(), (0, 1));
        drop(store);
        let (store, contents) = BlobStore::open(&path).unwrap();
        assert_eq!(contents.damaged, 0);
        assert_eq!(contents.txs.len(), 1);
        let back = &contents.txs[0];
        assert_eq!(back.tx.hash(), b.hash());
        assert_eq!(back.sender, b.sender);
        assert!(back.local);
        assert_eq!(
            back.tx.sidecar(),
            b.tx.sidecar(),
            "the sidecar comes back whole"
        );
        assert_eq!(store.len(), 1);
    }

    #[test]
    fn damaged_records_are_dropped_not_served() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("blobs.redb");
        let (store, _) = BlobStore::open(&path).unwrap();
        let good = pooled(0, TxOrigin::Local);
        store.sync_with(std::slice::from_ref(&good)).unwrap();
        // Records rotted in place, filed under the wrong hash, or with another tx's
        // sidecar, written behind the store's back.
        let other = pooled(1, TxOrigin::Local);
        let mut flipped = encode(&pooled(2, TxOrigin::Local));
        let last = flipped.len() - 1;
        flipped[last] ^= 1;
        let swapped = {
            let bad = PoolTx {
                tx: PooledTransaction::new(good.tx.tx().clone(), other.tx.sidecar().cloned()),
                sender: good.sender,
                origin: TxOrigin::Local,
                added_at: Instant::now(),
                authorities: Default::default(),
                cost: good.cost,
            };
            encode(&bad)
        };
        {
            let txn = store.inner.db.begin_write().unwrap();
            {
                let mut t = txn.open_table(TABLE).unwrap();
                t.insert(
                    pooled(2, TxOrigin::Local).hash().as_slice(),
                    flipped.as_slice(),
                )
                .unwrap();
                t.insert(B256::repeat_byte(9).as_slice(), encode(&other).as_slice())
                    .unwrap();
                t.insert(B256::repeat_byte(8).as_slice(), swapped.as_slice())
                    .unwrap();
            }
            txn.commit().unwrap();
        }
        drop(store);
        let (store, contents) = BlobStore::open(&path).unwrap();
        assert_eq!(contents.damaged, 3);
        assert_eq!(contents.txs.len(), 1);
        assert_eq!(contents.txs[0].tx.hash(), good.hash());
        drop(store);
        let (_, again) = BlobStore::open(&path).unwrap();
        assert_eq!(again.damaged, 0, "damaged records were deleted");
    }

    #[test]
    fn the_writer_stores_a_woken_pool_and_stops_on_close() {
        let dir = tempfile::tempdir().unwrap();
        let (store, _) = BlobStore::open(&dir.path().join("blobs.redb")).unwrap();
        let pool: Arc<Mutex<Vec<Arc<PoolTx>>>> = Arc::default();
        let writer = {
            let (store, pool) = (store.clone(), Arc::clone(&pool));
            std::thread::spawn(move || {
                store.run(&PoolMetrics::default(), || Some(pool.lock().clone()))
            })
        };
        pool.lock().push(pooled(0, TxOrigin::Local));
        store.wake();
        let deadline = Instant::now() + Duration::from_secs(10);
        while store.is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(store.len(), 1, "written once woken");
        // Closing writes the pool as it is at that moment.
        pool.lock().push(pooled(1, TxOrigin::Local));
        assert!(store.close(Duration::from_secs(10)));
        writer.join().unwrap();
        assert_eq!(store.len(), 2);
    }
}
