//! The on-disk backend: one redb file, one redb table per [`Table`].
//!
//! Reads go through a shared [`Snapshot`]: a read transaction with every table already
//! open, replaced after each commit. A point read is then a shared lock, an `Arc` clone
//! and a B-tree lookup, instead of a new read transaction and a table open per field,
//! which matters when the EVM and JSON-RPC read thousands of accounts and slots.
//!
//! A commit is one redb write transaction with immediate durability: redb's
//! copy-on-write pages and its commit protocol mean a crash leaves the file at the last
//! committed transaction, so a batch lands entirely or not at all.
//!
//! Once a flusher runs, relaxed commits are written behind: each becomes a layer over
//! the snapshot (`super::pending`), and the flusher writes the waiting layers in one
//! durable transaction.

use super::pending::{Directory, Layer, Lookup, Overlay, Visit, Write, key_hash};
use super::{Op, Table, range_bounds};
use crate::codec::{META_SCHEMA, SCHEMA_VERSION, decode_schema};
use crate::error::StoreError;
use ::redb::{
    Database, DatabaseError, Durability, ReadOnlyTable, ReadableDatabase, ReadableTable,
    TableDefinition,
};
use parking_lot::{Mutex, RwLock};
use std::path::Path;
use std::sync::Arc;

type Def = TableDefinition<'static, &'static [u8], &'static [u8]>;

fn definition(table: Table) -> Def {
    TableDefinition::new(table.name())
}

/// Turns a redb error into [`StoreError::Db`], saying what the store was doing; an I/O
/// failure (after which redb takes no more writes) is [`StoreError::WriteFailed`].
fn db_err(context: &'static str) -> impl FnOnce(::redb::Error) -> StoreError {
    move |err| match err {
        ::redb::Error::Io(e) => StoreError::WriteFailed(format!("{context}: {e}")),
        ::redb::Error::PreviousIo => {
            StoreError::WriteFailed(format!("{context}: an earlier I/O error occurred"))
        }
        ::redb::Error::Corrupted(why) => {
            StoreError::Corrupt(format!("{context}: the database file is damaged ({why})"))
        }
        other => StoreError::Db(format!("{context}: {other}")),
    }
}

/// Every table of one read transaction, opened once and shared by all readers.
struct Snapshot {
    tables: Vec<ReadOnlyTable<&'static [u8], &'static [u8]>>,
}

impl Snapshot {
    fn begin(db: &Database) -> Result<Snapshot, StoreError> {
        let txn = db
            .begin_read()
            .map_err(|e| db_err("beginning a read transaction")(e.into()))?;
        let tables = Table::ALL
            .iter()
            .map(|table| {
                txn.open_table(definition(*table))
                    .map_err(|e| db_err("opening a table to read")(e.into()))
            })
            .collect::<Result<_, _>>()?;
        Ok(Snapshot { tables })
    }
}

/// The commits written behind, oldest first.
type Layers = Arc<Vec<Arc<Layer>>>;

/// What readers see: the file's snapshot and, over it, the commits not yet written
/// into the file (oldest first).
struct View {
    /// `None` only if refreshing after a commit failed; the next read rebuilds it.
    snapshot: Option<Arc<Snapshot>>,
    layers: Layers,
    /// Which of `layers` touched each key last: changed with `layers`, under the same
    /// lock.
    directory: Directory,
}

pub(crate) struct RedbBackend {
    db: Database,
    /// Serialises the file's write transactions together with the view swap that
    /// follows each, so the shared snapshot can never go back to a state older than a
    /// returned commit. It holds when the last durable commit was made and how many
    /// relaxed ones followed. Only its holder takes layers off the view (from the
    /// front); a relaxed commit written behind adds one (at the back) without it, so a
    /// commit written behind and a direct one that run at the same time land in either
    /// order: writers of the same keys serialise above the store (block import holds
    /// the chain's writer lock for all of its commits).
    writer: Mutex<Lag>,
    view: RwLock<View>,
    /// The page cache's size given to redb.
    cache_bytes: usize,
    /// The first damage a read or write met (a page redb could not make sense of, or a
    /// value that does not decode): latched for the node to act on.
    pub(crate) damage: std::sync::OnceLock<String>,
    /// Set by a relaxed commit: a flusher waiting in [`RedbBackend::wait_for_flush`]
    /// makes it durable at once, beside the next block's execution (which needs the
    /// writer only at its end).
    flush_wanted: Mutex<bool>,
    flush_signal: parking_lot::Condvar,
    /// Transactions that wrote layers, counted; signalled after each (room was made).
    rounds: Mutex<u64>,
    round_done: parking_lot::Condvar,
    /// Whether a flusher runs ([`RedbBackend::wait_for_flush`] was called).
    flusher: std::sync::atomic::AtomicBool,
    /// The flusher's pace, and the commits slowed to it ([`slowdown`]).
    pace: Mutex<Pace>,
    /// Reads that found the view without a snapshot, for tests.
    #[cfg(test)]
    met_no_snapshot: std::sync::atomic::AtomicU64,
}

/// How fast the flusher writes commits, and how the commits written behind are slowed
/// to that speed once many wait.
#[derive(Default)]
struct Pace {
    /// Moving averages of the flusher's rounds' time, in seconds, and of the commits
    /// they wrote ([`Pace::wrote`], [`Pace::per_layer`]).
    round_secs: f64,
    round_layers: f64,
    /// When the last commit written behind returned.
    last: Option<std::time::Instant>,
    /// Commits slowed, and the time they were held in all.
    slowed: u64,
    slowed_for: std::time::Duration,
}

impl Pace {
    /// A round took `took` to write `layers` commits. The time per commit is the
    /// average round's time over the average round's commits, not the average of each
    /// round's time per commit: a round's cost is mostly per page it changes, and a
    /// round of a few commits costs several times more per commit than one of 64, so an
    /// average of per-commit figures would hold commits to the small rounds' pace just
    /// when the queue is long and the rounds are large.
    fn wrote(&mut self, took: std::time::Duration, layers: usize) {
        let (secs, layers) = (took.as_secs_f64(), layers as f64);
        if self.round_layers == 0.0 {
            (self.round_secs, self.round_layers) = (secs, layers);
        } else {
            self.round_secs = (self.round_secs * 3.0 + secs) / 4.0;
            self.round_layers = (self.round_layers * 3.0 + layers) / 4.0;
        }
    }

    /// The flusher's time per commit written: zero before its first round.
    fn per_layer(&self) -> std::time::Duration {
        if self.round_layers == 0.0 {
            return std::time::Duration::ZERO;
        }
        std::time::Duration::from_secs_f64(self.round_secs / self.round_layers)
    }
}

/// How far the file lags behind the last commit.
pub(crate) struct Lag {
    durable_at: std::time::Instant,
    relaxed: usize,
}

/// A relaxed commit is made durable at the latest this long after the last durable one,
/// or after this many relaxed commits.
const MAX_LAG: std::time::Duration = std::time::Duration::from_secs(1);
const MAX_RELAXED: usize = 256;

/// At most this many commits, or this many bytes of them, wait to be written behind; a
/// commit past either writes them itself. Reads past them cost one probe of the
/// [`Directory`] however many wait.
const MAX_LAYERS: usize = 128;
const MAX_LAYER_BYTES: usize = 1 << 30;
/// A flusher's transaction writes at most this many waiting commits. A round takes what
/// waits, so rounds grow only while commits come faster than the file takes them; the
/// larger the round the fewer pages a commit costs (each page of the file a round
/// changes is copied and written once however many of its commits change it: the
/// trie's upper nodes, and a random key's page more often the more keys a round has),
/// and that is what lets a file of tens of millions of keys keep up with blocks that
/// come back to back.
const ROUND_LAYERS: usize = 64;
/// How long a commit waits for the flusher to make room before it writes the waiting
/// commits itself.
const ROOM_WAIT: std::time::Duration = std::time::Duration::from_secs(30);
/// Past this many commits waiting, a commit written behind returns no sooner than the
/// flusher's time per commit after the one before ([`slowdown`]).
const SOFT_LAYERS: usize = MAX_LAYERS * 3 / 4;
/// The longest a commit is held by [`slowdown`].
const MAX_SLOWDOWN: std::time::Duration = std::time::Duration::from_millis(500);

/// How long to hold a commit written behind that leaves `waiting` commits for the
/// flusher, `since_last` after the previous one returned, when a round takes
/// `per_layer` per commit it writes. Up to [`SOFT_LAYERS`] waiting, not at all; past
/// it, until the commits come no faster than the flusher writes them, and slower the
/// fuller the queue (up to 1.5 times the flusher's time at [`MAX_LAYERS`]), so that a stream
/// of blocks faster than the disk settles at the disk's pace a block at a time rather
/// than filling the queue and stopping for a whole round (a write stall's slowdown
/// before its stop); never more than [`MAX_SLOWDOWN`].
fn slowdown(
    waiting: usize,
    per_layer: std::time::Duration,
    since_last: std::time::Duration,
) -> std::time::Duration {
    if waiting <= SOFT_LAYERS {
        return std::time::Duration::ZERO;
    }
    let span = (MAX_LAYERS - SOFT_LAYERS) as u32;
    let over = (waiting - SOFT_LAYERS).min(MAX_LAYERS - SOFT_LAYERS) as u32;
    let gap = per_layer * (2 * span + over) / (2 * span);
    gap.saturating_sub(since_last).min(MAX_SLOWDOWN)
}

type WriteTable<'t> = ::redb::Table<'t, &'static [u8], &'static [u8]>;

/// `table`'s handle in `txn`, opened at its first write.
fn opened<'a, 't>(
    txn: &'t ::redb::WriteTransaction,
    open: &'a mut [Option<WriteTable<'t>>; Table::COUNT],
    table: Table,
) -> Result<&'a mut WriteTable<'t>, StoreError> {
    Ok(match &mut open[table.index()] {
        Some(handle) => handle,
        slot => slot.insert(
            txn.open_table(definition(table))
                .map_err(|e| db_err("opening a table to write")(e.into()))?,
        ),
    })
}

fn put(handle: &mut WriteTable<'_>, key: &[u8], value: &[u8]) -> Result<(), StoreError> {
    handle
        .insert(key, value)
        .map(drop)
        .map_err(|e| db_err("writing a value")(e.into()))
}

fn delete(handle: &mut WriteTable<'_>, key: &[u8]) -> Result<(), StoreError> {
    handle
        .remove(key)
        .map(drop)
        .map_err(|e| db_err("deleting a value")(e.into()))
}

fn clear(handle: &mut WriteTable<'_>, start: &[u8], end: Option<&[u8]>) -> Result<(), StoreError> {
    handle
        .retain_in::<&[u8], _>(range_bounds(start, end), |_, _| false)
        .map_err(|e| db_err("deleting a range")(e.into()))
}

impl RedbBackend {
    /// Latches the first [`StoreError::Corrupt`] of `result` as the file's damage.
    pub(crate) fn latched<R>(&self, result: Result<R, StoreError>) -> Result<R, StoreError> {
        if let Err(StoreError::Corrupt(why)) = &result {
            let _ = self.damage.set(why.clone());
        }
        result
    }

    /// Opens or creates `path`, creates any missing table and checks the schema version.
    pub(crate) fn open(
        path: &Path,
        datadir: &Path,
        cache_bytes: usize,
    ) -> Result<RedbBackend, StoreError> {
        if !path.exists() {
            Self::create_whole(path, datadir)?;
        }
        let db = ::redb::Builder::new()
            .set_cache_size(cache_bytes)
            .create(path)
            .map_err(|err| match err {
                DatabaseError::DatabaseAlreadyOpen => StoreError::Db(format!(
                    "{} is already open: is another moat running on this datadir?",
                    path.display()
                )),
                other => StoreError::Db(format!("opening {}: {other}", path.display())),
            })?;
        Self::init_tables(&db, datadir)?;
        let snapshot = Snapshot::begin(&db)?;
        Ok(RedbBackend {
            db,
            writer: Mutex::new(Lag {
                durable_at: std::time::Instant::now(),
                relaxed: 0,
            }),
            view: RwLock::new(View {
                snapshot: Some(Arc::new(snapshot)),
                layers: Arc::new(Vec::new()),
                directory: Directory::default(),
            }),
            cache_bytes,
            damage: std::sync::OnceLock::new(),
            flush_wanted: Mutex::new(false),
            flush_signal: parking_lot::Condvar::new(),
            rounds: Mutex::new(0),
            round_done: parking_lot::Condvar::new(),
            flusher: std::sync::atomic::AtomicBool::new(false),
            pace: Mutex::new(Pace::default()),
            #[cfg(test)]
            met_no_snapshot: std::sync::atomic::AtomicU64::new(0),
        })
    }

    /// Creates the database file under a temporary name and renames it into place once
    /// redb has written it whole, so that a kill while the file is being created leaves
    /// either no database (the next start creates it again) or a whole one, never a file
    /// without its header that no later start could open.
    fn create_whole(path: &Path, datadir: &Path) -> Result<(), StoreError> {
        let io = |source| StoreError::Io {
            path: path.to_path_buf(),
            source,
        };
        let fresh = path.with_extension("redb.new");
        match std::fs::remove_file(&fresh) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(io(e)),
            _ => {}
        }
        drop(
            ::redb::Builder::new()
                .create(&fresh)
                .map_err(|e| StoreError::Db(format!("creating {}: {e}", fresh.display())))?,
        );
        std::fs::File::open(&fresh)
            .and_then(|f| f.sync_all())
            .map_err(io)?;
        std::fs::rename(&fresh, path).map_err(io)?;
        // The rename is durable once the directory is.
        std::fs::File::open(datadir)
            .and_then(|d| d.sync_all())
            .map_err(io)
    }

    /// Read transactions cannot open a table that was never created, so a new file gets
    /// all of them (and its schema version) up front. This writes no chain data.
    fn init_tables(db: &Database, datadir: &Path) -> Result<(), StoreError> {
        let txn = db
            .begin_write()
            .map_err(|e| db_err("beginning the table setup")(e.into()))?;
        let mut found = None;
        for table in Table::ALL {
            let mut handle = txn
                .open_table(definition(table))
                .map_err(|e| db_err("creating a table")(e.into()))?;
            if table == Table::Meta {
                let stored = handle
                    .get(META_SCHEMA)
                    .map_err(|e| db_err("reading the schema version")(e.into()))?
                    .map(|guard| decode_schema(guard.value()))
                    .transpose()?;
                if stored.is_none() {
                    handle
                        .insert(META_SCHEMA, SCHEMA_VERSION.to_be_bytes().as_slice())
                        .map_err(|e| db_err("writing the schema version")(e.into()))?;
                }
                found = stored;
            }
        }
        if let Some(found) = found
            && found != SCHEMA_VERSION
        {
            // Dropping the transaction aborts it: an incompatible file stays untouched.
            return Err(StoreError::UnsupportedSchema {
                datadir: datadir.to_path_buf(),
                found,
                supported: SCHEMA_VERSION,
            });
        }
        txn.commit()
            .map_err(|e| db_err("committing the table setup")(e.into()))
    }

    /// The file's snapshot and the layers written behind over it, taken together.
    fn view(&self) -> Result<(Arc<Snapshot>, Layers), StoreError> {
        {
            let view = self.view.read();
            if let Some(snapshot) = view.snapshot.as_ref() {
                return Ok((Arc::clone(snapshot), Arc::clone(&view.layers)));
            }
        }
        #[cfg(test)]
        self.met_no_snapshot
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // Holding the writer lock keeps a commit from landing between our read
        // transaction and its installation, which would make it stale.
        let _writer = self.writer.lock();
        let mut view = self.view.write();
        if let Some(snapshot) = view.snapshot.as_ref() {
            return Ok((Arc::clone(snapshot), Arc::clone(&view.layers)));
        }
        let fresh = Arc::new(Snapshot::begin(&self.db)?);
        view.snapshot = Some(Arc::clone(&fresh));
        Ok((fresh, Arc::clone(&view.layers)))
    }

    /// How many commits wait to be written behind, and their size in bytes.
    pub(crate) fn pending(&self) -> (usize, usize) {
        let view = self.view.read();
        (
            view.layers.len(),
            view.layers.iter().map(|layer| layer.bytes).sum(),
        )
    }

    pub(crate) fn get_with<R>(
        &self,
        table: Table,
        key: &[u8],
        decode: impl FnOnce(&[u8]) -> Result<R, StoreError>,
    ) -> Result<Option<R>, StoreError> {
        let hash = key_hash(key);
        // One probe of the directory, under the view's lock, finds the layer that wrote
        // the key last (and the snapshot below them, taken together with it).
        let found = {
            let view = self.view.read();
            view.snapshot.as_ref().map(|snapshot| {
                let found = view
                    .directory
                    .find(&view.layers, table, key, hash)
                    .map(|layer| layer.cloned());
                (Arc::clone(snapshot), found)
            })
        };
        let snapshot = match found {
            Some((_, Err(()))) => return Ok(None),
            Some((_, Ok(Some(layer)))) => {
                return match layer.lookup(table, key, hash) {
                    Lookup::Value(value) => decode(value).map(Some),
                    Lookup::Deleted | Lookup::Untouched => Ok(None),
                };
            }
            Some((snapshot, Ok(None))) => snapshot,
            None => {
                let (snapshot, layers) = self.view()?;
                match super::pending::lookup(&layers, table, key) {
                    Some(Lookup::Value(value)) => return decode(value).map(Some),
                    Some(Lookup::Deleted) => return Ok(None),
                    Some(Lookup::Untouched) | None => {}
                }
                snapshot
            }
        };
        let value = snapshot.tables[table.index()]
            .get(key)
            .map_err(|e| db_err("reading a value")(e.into()))?;
        value.map(|guard| decode(guard.value())).transpose()
    }

    /// How `table` lies in the file's newest snapshot.
    pub(crate) fn table_pages(&self, table: Table) -> Result<super::TablePages, StoreError> {
        use ::redb::ReadableTableMetadata;
        let (snapshot, _) = self.view()?;
        let handle = &snapshot.tables[table.index()];
        let stats = handle
            .stats()
            .map_err(|e| db_err("reading a table's pages")(e.into()))?;
        Ok(super::TablePages {
            entries: handle
                .len()
                .map_err(|e| db_err("counting a table")(e.into()))?,
            leaf_pages: stats.leaf_pages(),
            stored_bytes: stats.stored_bytes(),
            fragmented_bytes: stats.fragmented_bytes(),
        })
    }

    /// The page cache's size given to redb.
    pub(crate) fn cache_bytes(&self) -> usize {
        self.cache_bytes
    }

    pub(crate) fn scan(
        &self,
        table: Table,
        start: &[u8],
        end: Option<&[u8]>,
        mut visit: impl FnMut(&[u8], &[u8]) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        let (snapshot, layers) = self.view()?;
        let file = |visit: &mut Visit<'_>| {
            let range = snapshot.tables[table.index()]
                .range::<&[u8]>(range_bounds(start, end))
                .map_err(|e| db_err("starting a range read")(e.into()))?;
            for entry in range {
                let (key, value) = entry.map_err(|e| db_err("reading a range")(e.into()))?;
                visit(key.value(), value.value())?;
            }
            Ok(())
        };
        match Overlay::of(&layers, table, start, end) {
            None => file(&mut visit),
            Some(overlay) => overlay.merge(file, visit),
        }
    }

    /// Applies `ops` in one write transaction. Any error returns before `commit`, and a
    /// dropped write transaction is rolled back, so a failed batch leaves no trace.
    /// Commits `ops` atomically. `relaxed`: durable within [`MAX_LAG`] (or
    /// [`MAX_RELAXED`] commits) rather than now; a crash before then reopens the file at
    /// the last durable commit, each commit whole or absent. The sync of relaxed commits
    /// is a flusher's ([`RedbBackend::wait_for_flush`]), woken by each, so that no commit
    /// carries a second of others' writes (without a flusher, the one past [`MAX_LAG`]
    /// does: redb writes out the pages of the commits since the last durable one then).
    pub(crate) fn apply(&self, ops: Vec<Op>, relaxed: bool) -> Result<(), StoreError> {
        self.apply_waking(ops, relaxed, true)
    }

    /// [`RedbBackend::apply`]; a relaxed commit wakes the flusher only if `wake` (a bulk
    /// writer's stream of commits is synced by the flusher's second instead, so that
    /// the syncs do not take the writer between every two of its commits).
    pub(crate) fn apply_waking(
        &self,
        ops: Vec<Op>,
        relaxed: bool,
        wake: bool,
    ) -> Result<(), StoreError> {
        let flusher = self.flusher.load(std::sync::atomic::Ordering::Relaxed);
        if relaxed && wake && flusher && !super::pending::holds_failure(&ops) {
            let layer = Arc::new(Layer::of(ops));
            // Past the bound the committer waits for the flusher's next round (the
            // flusher has fallen behind: memory stays bounded, and the importer goes at
            // the disk's pace); if none comes, it writes the waiting layers itself.
            loop {
                let round = *self.rounds.lock();
                let pushed = {
                    let mut view = self.view.write();
                    let bytes: usize = view.layers.iter().map(|l| l.bytes).sum();
                    let room =
                        view.layers.len() < MAX_LAYERS && bytes + layer.bytes <= MAX_LAYER_BYTES;
                    if room {
                        let waiting = view.layers.len();
                        view.directory.pushed(&layer, waiting);
                        let mut layers = Vec::clone(&view.layers);
                        layers.push(Arc::clone(&layer));
                        view.layers = Arc::new(layers);
                    }
                    // How full the queue is, in commits or in bytes, whichever is further.
                    room.then_some(
                        view.layers
                            .len()
                            .max((bytes + layer.bytes) / (MAX_LAYER_BYTES / MAX_LAYERS)),
                    )
                };
                *self.flush_wanted.lock() = true;
                self.flush_signal.notify_one();
                if let Some(waiting) = pushed {
                    self.keep_pace(waiting);
                    return Ok(());
                }
                let mut rounds = self.rounds.lock();
                if *rounds == round {
                    let _ = self.round_done.wait_for(&mut rounds, ROOM_WAIT);
                }
                if *rounds == round {
                    drop(rounds);
                    return self.apply_direct(
                        &[],
                        Some(&layer),
                        relaxed,
                        wake,
                        flusher,
                        usize::MAX,
                    );
                }
            }
        }
        if super::pending::holds_failure(&ops) {
            return self.apply_direct(&ops, None, relaxed, wake, flusher, usize::MAX);
        }
        // Written as a layer is: each table's keys in key order. A batch's writes come
        // in the order its builder made them (a trie builder's nodes children first,
        // so a parent lands before keys already written), and redb splits a full page
        // in halves for a key that lands between keys already written. Half-empty
        // pages are twice the pages to read and to write (the genesis writer's order
        // matters as much: moat_blockchain::genesis_state).
        let layer = Layer::of(ops);
        self.apply_direct(&[], Some(&layer), relaxed, wake, flusher, usize::MAX)
    }

    /// Holds a commit written behind that left `waiting` commits for the flusher as
    /// [`slowdown`] says, and counts it.
    fn keep_pace(&self, waiting: usize) {
        let now = std::time::Instant::now();
        let mut pace = self.pace.lock();
        let since_last = pace.last.map_or(std::time::Duration::MAX, |last| {
            now.saturating_duration_since(last)
        });
        let hold = slowdown(waiting, pace.per_layer(), since_last);
        pace.last = Some(now + hold);
        if !hold.is_zero() {
            pace.slowed += 1;
            pace.slowed_for += hold;
        }
        drop(pace);
        if !hold.is_zero() {
            std::thread::sleep(hold);
        }
    }

    /// Commits held to the flusher's pace so far, and the time they were held in all.
    pub(crate) fn slowed(&self) -> (u64, std::time::Duration) {
        let pace = self.pace.lock();
        (pace.slowed, pace.slowed_for)
    }

    /// One redb write transaction: the oldest `limit` layers waiting behind, then
    /// `extra` (a layer that found no room) and `ops`, in that order (`extra` and `ops`
    /// only with every layer: `limit` is for the flusher's empty rounds).
    fn apply_direct(
        &self,
        ops: &[Op],
        extra: Option<&Layer>,
        relaxed: bool,
        wake: bool,
        flusher: bool,
        limit: usize,
    ) -> Result<(), StoreError> {
        let mut lag = self.writer.lock();
        let started = std::time::Instant::now();
        let durable = !relaxed
            || lag.relaxed >= MAX_RELAXED
            || (!flusher && lag.durable_at.elapsed() >= MAX_LAG);
        // The commits written behind go first, in the same transaction: order is kept.
        let drained = {
            let layers = Arc::clone(&self.view.read().layers);
            if layers.len() > limit {
                Arc::new(layers[..limit].to_vec())
            } else {
                layers
            }
        };
        let mut txn = self
            .db
            .begin_write()
            .map_err(|e| db_err("beginning a write transaction")(e.into()))?;
        let durability = if durable {
            Durability::Immediate
        } else {
            Durability::None
        };
        txn.set_durability(durability)
            .map_err(|e| StoreError::Db(format!("setting durability: {e}")))?;
        {
            let mut open: [Option<WriteTable<'_>>; Table::COUNT] = std::array::from_fn(|_| None);
            let layers: Vec<&Layer> = drained.iter().map(|l| &**l).chain(extra).collect();
            super::pending::write_layers(&layers, |table, write| {
                let handle = opened(&txn, &mut open, table)?;
                match write {
                    Write::Clear(start, end) => clear(handle, start, end),
                    Write::Put(key, value) => put(handle, key, value),
                    Write::Delete(key) => delete(handle, key),
                }
            })?;
            for op in ops {
                let table = match op {
                    Op::Put { table, .. }
                    | Op::Delete { table, .. }
                    | Op::DeleteRange { table, .. } => *table,
                    #[cfg(test)]
                    Op::Fail => return Err(StoreError::Db("injected failure".into())),
                    #[cfg(test)]
                    Op::FailDisk => {
                        return Err(StoreError::WriteFailed("No space left on device".into()));
                    }
                };
                let handle = opened(&txn, &mut open, table)?;
                match op {
                    Op::Put { key, value, .. } => put(handle, key, value)?,
                    Op::Delete { key, .. } => delete(handle, key)?,
                    Op::DeleteRange { start, end, .. } => clear(handle, start, end.as_deref())?,
                    #[cfg(test)]
                    Op::Fail | Op::FailDisk => unreachable!("returned above"),
                }
            }
        }
        txn.commit()
            .map_err(|e| db_err("committing a write transaction")(e.into()))?;
        if durable {
            *lag = Lag {
                durable_at: std::time::Instant::now(),
                relaxed: 0,
            };
        } else {
            lag.relaxed += 1;
            // The flusher, if one waits, syncs it at once (and whatever commits come
            // while it does, with the next sync).
            if wake {
                *self.flush_wanted.lock() = true;
                self.flush_signal.notify_one();
            }
        }
        // The batch is committed now: a snapshot of the file with it replaces the old
        // one and the layers written leave the view in one swap, so that a reader always
        // finds a snapshot (one meeting none would wait for the writer lock, which the
        // flusher may take again for its next round before the reader wakes: a whole
        // round's wait, up to 1.8 s at 60M gas). Until the swap, readers see the old
        // snapshot with the layers over it: the same state. Should the fresh snapshot
        // fail, the view is left without one and the next reader builds it under the
        // writer lock.
        let fresh = Snapshot::begin(&self.db).ok().map(Arc::new);
        let (left, first) = {
            let mut view = self.view.write();
            view.snapshot = fresh;
            let first = view.directory.first();
            if !drained.is_empty() {
                view.layers = Arc::new(view.layers[drained.len()..].to_vec());
                view.directory.drained(drained.len());
            }
            (view.layers.len(), first)
        };
        // The written layers' entries in the directory are stale now (they read as
        // absent); they are removed a layer at a time, so that readers wait for one
        // layer's removal at most.
        for (i, layer) in drained.iter().enumerate() {
            self.view.write().directory.forget(layer, first + i as u64);
        }
        if !drained.is_empty() {
            self.pace.lock().wrote(started.elapsed(), drained.len());
            *self.rounds.lock() += 1;
            self.round_done.notify_all();
        }
        if left > 0 {
            // More wait: the flusher goes on at once.
            *self.flush_wanted.lock() = true;
            self.flush_signal.notify_one();
        }
        Ok(())
    }

    /// Blocks until relaxed commits are due to be made durable, or `timeout` passes:
    /// `true` when the caller should [`RedbBackend::flush`] now (a relaxed commit asked
    /// for it, or relaxed commits have waited [`MAX_LAG`]). The first call makes this
    /// backend count on a flusher: relaxed commits no longer sync inline past
    /// [`MAX_LAG`].
    pub(crate) fn wait_for_flush(&self, timeout: std::time::Duration) -> bool {
        self.flusher
            .store(true, std::sync::atomic::Ordering::Relaxed);
        let mut wanted = self.flush_wanted.lock();
        if !*wanted {
            let _ = self.flush_signal.wait_for(&mut wanted, timeout);
        }
        if std::mem::take(&mut *wanted) {
            return true;
        }
        drop(wanted);
        if !self.view.read().layers.is_empty() {
            return true;
        }
        let lag = self.writer.lock();
        lag.relaxed > 0 && lag.durable_at.elapsed() >= MAX_LAG
    }

    /// Makes every relaxed commit durable (an empty durable commit, which writes the
    /// layers waiting behind first).
    pub(crate) fn flush(&self) -> Result<(), StoreError> {
        self.flush_at_most(usize::MAX)
    }

    /// A flusher's round: [`RedbBackend::flush`] of the oldest [`ROUND_LAYERS`] layers
    /// waiting (and every relaxed commit before them); it asks for another round when
    /// more wait.
    pub(crate) fn flush_round(&self) -> Result<(), StoreError> {
        self.flush_at_most(ROUND_LAYERS)
    }

    fn flush_at_most(&self, limit: usize) -> Result<(), StoreError> {
        if self.writer.lock().relaxed == 0 && self.view.read().layers.is_empty() {
            return Ok(());
        }
        let flusher = self.flusher.load(std::sync::atomic::Ordering::Relaxed);
        self.apply_direct(&[], None, false, true, flusher, limit)
    }

    /// Starts a write, puts `ops` and drops the transaction uncommitted, as a crash
    /// between the writes and the commit would.
    #[cfg(test)]
    pub(crate) fn write_then_abandon(&self, ops: &[Op]) -> Result<(), StoreError> {
        let _lag = self.writer.lock();
        let txn = self
            .db
            .begin_write()
            .map_err(|e| db_err("beginning a write transaction")(e.into()))?;
        for op in ops {
            if let Op::Put { table, key, value } = op {
                let mut handle = txn
                    .open_table(definition(*table))
                    .map_err(|e| db_err("opening a table to write")(e.into()))?;
                handle
                    .insert(key.as_slice(), value.as_slice())
                    .map_err(|e| db_err("writing a value")(e.into()))?;
            }
        }
        drop(txn);
        Ok(())
    }
}

impl Drop for RedbBackend {
    fn drop(&mut self) {
        // Nothing to report to at this point: a failure leaves the file at its last
        // durable commit, which the next open reads.
        let _ = self.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A batch whose keys come in any order (a trie builder hands out children before
    /// their parent, whose key sorts first) is written in key order, so its pages are
    /// as full as those of the same keys written in order: a genesis state's or a
    /// snap sync's trie nodes take no more pages to read and to write than they need.
    #[test]
    fn a_batch_is_written_in_key_order_whatever_order_it_came_in() {
        let dir = crate::tests::TempDir::new("order");
        std::fs::create_dir_all(dir.path()).unwrap();
        let backend = RedbBackend::open(&dir.path().join("db.redb"), dir.path(), 1 << 24).unwrap();
        let puts = |table: Table, order: &mut dyn Iterator<Item = u32>| -> Vec<Op> {
            order
                .map(|n| Op::Put {
                    table,
                    key: [n.to_be_bytes().as_slice(), &[7u8; 36]].concat(),
                    value: vec![n as u8; 100],
                })
                .collect()
        };
        let n = 20_000u32;
        backend
            .apply(puts(Table::Accounts, &mut (0..n)), false)
            .unwrap();
        backend
            .apply(puts(Table::TrieNodes, &mut (0..n).rev()), false)
            .unwrap();
        let in_order = backend.table_pages(Table::Accounts).unwrap().leaf_pages;
        let reversed = backend.table_pages(Table::TrieNodes).unwrap().leaf_pages;
        assert!(in_order > 500, "{in_order} pages");
        assert!(
            reversed * 10 <= in_order * 11,
            "{reversed} pages for keys written last first, {in_order} in order"
        );
    }

    /// While the flusher writes round after round, a reader always finds a snapshot in
    /// the view (a reader meeting none waits for the writer lock, which the flusher can
    /// take again for its next round first: a whole round's wait), and reads every
    /// value committed before its read, whether still waiting or written.
    #[test]
    fn readers_always_find_a_snapshot_while_the_flusher_writes_rounds() {
        let dir = crate::tests::TempDir::new("swap");
        std::fs::create_dir_all(dir.path()).unwrap();
        let backend = RedbBackend::open(&dir.path().join("db.redb"), dir.path(), 1 << 24).unwrap();
        // A flusher waits from now on: relaxed commits are written behind.
        assert!(!backend.wait_for_flush(Duration::from_millis(1)));
        let key = |n: u32| n.to_be_bytes().to_vec();
        let put = |n: u32| Op::Put {
            table: Table::Accounts,
            key: key(n),
            value: vec![n as u8; 64],
        };
        let committed = std::sync::atomic::AtomicU32::new(0);
        let stop = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|scope| {
            let reader = scope.spawn(|| {
                let mut reads = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Acquire) {
                    let upto = committed.load(std::sync::atomic::Ordering::Acquire);
                    for n in upto.saturating_sub(3)..upto {
                        let found = backend
                            .get_with(Table::Accounts, &key(n), |v| Ok(v.to_vec()))
                            .unwrap();
                        assert_eq!(found, Some(vec![n as u8; 64]), "value {n} lost");
                        reads += 1;
                    }
                }
                reads
            });
            for n in 0..300u32 {
                backend.apply(vec![put(n)], true).unwrap();
                committed.store(n + 1, std::sync::atomic::Ordering::Release);
                if n % 3 == 2 {
                    backend.flush_round().unwrap();
                }
            }
            backend.flush().unwrap();
            stop.store(true, std::sync::atomic::Ordering::Release);
            assert!(reader.join().unwrap() > 0);
        });
        assert_eq!(
            backend
                .met_no_snapshot
                .load(std::sync::atomic::Ordering::Relaxed),
            0
        );
        assert_eq!(backend.pending().0, 0);
    }

    /// The flusher's time per commit is the recent rounds' time over their commits: a
    /// large round after small ones pulls it towards the large round's pace, which is
    /// the pace of a long queue.
    #[test]
    fn the_flushers_pace_weighs_rounds_by_the_commits_they_wrote() {
        let ms = Duration::from_millis;
        let mut pace = Pace::default();
        pace.wrote(ms(400), 2);
        assert_eq!(pace.per_layer(), ms(200));
        // Three small rounds at 200 ms a commit, then one of 64 commits at 60 ms each.
        pace.wrote(ms(400), 2);
        pace.wrote(ms(400), 2);
        pace.wrote(ms(3840), 64);
        // An average of per-commit figures would say 165 ms; the rounds' time over
        // their commits: (300 + 960) ms over (1.5 + 16) commits.
        assert_eq!(pace.per_layer(), ms(72));
    }

    /// Up to three quarters of the queue a commit is never held; past it, a commit is
    /// held until the flusher's time per commit (more the fuller the queue, up to 1.5
    /// times it) has passed since the one before, and never longer than the cap.
    #[test]
    fn commits_are_held_to_the_flushers_pace_only_past_three_quarters_of_the_queue() {
        let ms = Duration::from_millis;
        let per = ms(150);
        assert_eq!(SOFT_LAYERS, MAX_LAYERS * 3 / 4);
        for waiting in 0..=SOFT_LAYERS {
            assert_eq!(slowdown(waiting, per, ms(0)), Duration::ZERO);
        }
        // Just past it: a little more than the flusher's time, less what the block took
        // itself.
        let first = slowdown(SOFT_LAYERS + 1, per, ms(0));
        assert!(first > per && first < per * 2, "{first:?}");
        assert_eq!(slowdown(SOFT_LAYERS + 1, per, ms(100)), first - ms(100));
        // A block slower than the flusher is not held.
        assert_eq!(slowdown(SOFT_LAYERS + 1, per, ms(400)), Duration::ZERO);
        // Fuller, longer; at the bound 1.5 times the flusher's time.
        assert!(slowdown(SOFT_LAYERS + 4, per, ms(0)) > first);
        assert_eq!(slowdown(MAX_LAYERS, per, ms(0)), ms(225));
        assert_eq!(slowdown(MAX_LAYERS + 5, per, ms(0)), ms(225));
        // Never past the cap, however slow the disk.
        assert_eq!(
            slowdown(MAX_LAYERS, Duration::from_secs(5), ms(0)),
            MAX_SLOWDOWN
        );
        // The first commit (no previous one) is not held.
        assert_eq!(slowdown(MAX_LAYERS, per, Duration::MAX), Duration::ZERO);
    }
}
