//! The key-value layer under [`crate::Store`].
//!
//! Both backends see the same thing: named tables of byte keys and byte values, point
//! reads, ordered scans, and one list of [`Op`]s applied atomically per commit. All
//! encoding and every rule of a [`crate::WriteBatch`] live above this layer, so the
//! in-memory backend that tests use behaves exactly like the redb one on disk.

mod memory;
mod pending;
mod redb;

pub(crate) use self::memory::MemoryBackend;
pub(crate) use self::redb::RedbBackend;

use crate::error::StoreError;
use std::ops::Bound;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Table {
    /// chain meta, head and schema version, under fixed names
    Meta,
    /// block hash → header RLP
    Headers,
    /// block hash → block number, so a number lookup does not read the whole header
    HeaderNumbers,
    /// block hash → body RLP
    Bodies,
    /// block hash → receipts RLP
    Receipts,
    /// block number → canonical block hash
    Canonical,
    /// tx hash → (block hash, block number, index)
    TxIndex,
    /// address → account
    Accounts,
    /// address ‖ slot → non-zero value
    Storage,
    /// code hash → bytecode
    Code,
    /// blob tx hash → the tx in network form with its sidecar (mined blob txs, kept for reorgs)
    Sidecars,
    /// local tx hash → raw tx, for the pool to reload after a restart
    Journal,
    /// block hash → the state the block overwrote, to take it back in a reorg
    Undo,
    /// trie owner (zero: accounts; keccak(address): its storage) ‖ packed nibble path ‖
    /// path length → the node's RLP
    TrieNodes,
    /// snap sync: hashed address → account, the state downloaded at the pivot
    SnapAccounts,
    /// snap sync: hashed address ‖ hashed slot → non-zero value
    SnapStorage,
}

impl Table {
    pub(crate) const ALL: [Table; 16] = [
        Table::Meta,
        Table::Headers,
        Table::HeaderNumbers,
        Table::Bodies,
        Table::Receipts,
        Table::Canonical,
        Table::TxIndex,
        Table::Accounts,
        Table::Storage,
        Table::Code,
        Table::Sidecars,
        Table::Journal,
        Table::Undo,
        Table::TrieNodes,
        Table::SnapAccounts,
        Table::SnapStorage,
    ];

    pub(crate) const COUNT: usize = Self::ALL.len();

    pub(crate) fn index(self) -> usize {
        self as usize
    }

    /// The on-disk table name: renaming one is a schema change.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Table::Meta => "meta",
            Table::Headers => "headers",
            Table::HeaderNumbers => "header_numbers",
            Table::Bodies => "bodies",
            Table::Receipts => "receipts",
            Table::Canonical => "canonical",
            Table::TxIndex => "tx_index",
            Table::Accounts => "accounts",
            Table::Storage => "storage",
            Table::Code => "code",
            Table::Sidecars => "sidecars",
            Table::Journal => "journal",
            Table::Undo => "undo",
            Table::TrieNodes => "trie_nodes",
            Table::SnapAccounts => "snap_accounts",
            Table::SnapStorage => "snap_storage",
        }
    }
}

/// One low-level write. A commit is a `Vec<Op>` applied in order, all or nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Op {
    Put {
        table: Table,
        key: Vec<u8>,
        value: Vec<u8>,
    },
    Delete {
        table: Table,
        key: Vec<u8>,
    },
    /// Deletes every key in `start..=end` (`end: None` means to the end of the table).
    DeleteRange {
        table: Table,
        start: Vec<u8>,
        end: Option<Vec<u8>>,
    },
    /// Makes the backend fail at this point of a commit, so tests can check that the ops
    /// before it were rolled back.
    #[cfg(test)]
    Fail,
    /// Makes the commit fail as a full disk makes it fail ([`StoreError::WriteFailed`]).
    #[cfg(test)]
    FailDisk,
}

pub(crate) fn range_bounds<'a>(
    start: &'a [u8],
    end: Option<&'a [u8]>,
) -> (Bound<&'a [u8]>, Bound<&'a [u8]>) {
    (
        Bound::Included(start),
        end.map_or(Bound::Unbounded, Bound::Included),
    )
}

/// The two backends, dispatched by hand: the read methods are generic over closures
/// (so values decode straight from redb's pages), which a trait object cannot offer.
#[allow(
    clippy::large_enum_variant,
    reason = "one per store, behind the store's Arc: its size costs nothing"
)]
pub(crate) enum Backend {
    Redb(RedbBackend),
    Memory(MemoryBackend),
}

thread_local! {
    /// Whether this thread is inside [`guarded`] (see [`in_guarded_read`]).
    static GUARDED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether the current thread is inside a database operation whose panic becomes a
/// [`StoreError::Corrupt`]: a panic hook can leave such a panic unprinted, since the
/// error that replaces it is reported where it is met.
pub fn in_guarded_read() -> bool {
    GUARDED.with(std::cell::Cell::get)
}

/// Runs a database operation, turning a panic inside it into [`StoreError::Corrupt`].
/// redb panics on some damaged pages (an index past a page's end) where it means to
/// return `Corrupted`: the work that read the page then stops with an error, and no
/// thread dies of a rotted file.
pub(crate) fn guarded<R>(
    what: &str,
    op: impl FnOnce() -> Result<R, StoreError>,
) -> Result<R, StoreError> {
    let outer = GUARDED.with(|g| g.replace(true));
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(op));
    GUARDED.with(|g| g.set(outer));
    result.unwrap_or_else(|payload| {
        let why = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic".into());
        Err(StoreError::Corrupt(format!(
            "{what}: the database file is damaged ({why})"
        )))
    })
}

/// How one table lies in the database file ([`crate::Store::table_pages`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TablePages {
    /// Entries in the file (commits still written behind are not counted).
    pub entries: u64,
    /// Leaf pages of its tree: what a read of a random key finds one of, and what a
    /// write of one copies.
    pub leaf_pages: u64,
    /// The bytes of its keys and values.
    pub stored_bytes: u64,
    /// Bytes of its pages holding nothing: a table written out of key order leaves
    /// pages split in halves.
    pub fragmented_bytes: u64,
}

impl Backend {
    /// How each table lies in the database file; none in memory.
    pub(crate) fn table_pages(&self) -> Result<Vec<(&'static str, TablePages)>, StoreError> {
        match self {
            Backend::Redb(db) => db.latched(guarded("reading a table's pages", || {
                Table::ALL
                    .iter()
                    .map(|&table| Ok((table.name(), db.table_pages(table)?)))
                    .collect()
            })),
            Backend::Memory(_) => Ok(Vec::new()),
        }
    }

    /// Looks `key` up and hands its value to `decode` while it is still borrowed.
    pub(crate) fn get_with<R>(
        &self,
        table: Table,
        key: &[u8],
        decode: impl FnOnce(&[u8]) -> Result<R, StoreError>,
    ) -> Result<Option<R>, StoreError> {
        match self {
            Backend::Redb(db) => db.latched(guarded("reading a value", || {
                db.get_with(table, key, decode)
            })),
            Backend::Memory(mem) => mem.get_with(table, key, decode),
        }
    }

    /// Visits the entries of `start..=end` in key order.
    pub(crate) fn scan(
        &self,
        table: Table,
        start: &[u8],
        end: Option<&[u8]>,
        visit: impl FnMut(&[u8], &[u8]) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        match self {
            Backend::Redb(db) => db.latched(guarded("scanning a table", || {
                db.scan(table, start, end, visit)
            })),
            Backend::Memory(mem) => mem.scan(table, start, end, visit),
        }
    }

    /// [`Backend::scan`] until `visit` answers `Ok(false)`: stopping is not an error.
    pub(crate) fn scan_while(
        &self,
        table: Table,
        start: &[u8],
        end: Option<&[u8]>,
        mut visit: impl FnMut(&[u8], &[u8]) -> Result<bool, StoreError>,
    ) -> Result<(), StoreError> {
        let mut stopped = false;
        let result = self.scan(table, start, end, |key, value| {
            if visit(key, value)? {
                Ok(())
            } else {
                stopped = true;
                // Ends the scan; not an error to the caller.
                Err(StoreError::Db(String::new()))
            }
        });
        if stopped { Ok(()) } else { result }
    }

    pub(crate) fn apply(&self, ops: Vec<Op>) -> Result<(), StoreError> {
        self.apply_with(ops, false)
    }

    /// [`Backend::apply`], durable now or (`relaxed`) within a second.
    pub(crate) fn apply_with(&self, ops: Vec<Op>, relaxed: bool) -> Result<(), StoreError> {
        match self {
            Backend::Redb(db) => db.latched(guarded("writing", || db.apply(ops, relaxed))),
            Backend::Memory(mem) => mem.apply(ops),
        }
    }

    /// A relaxed commit that does not wake the flusher (a bulk writer's).
    pub(crate) fn apply_bulk(&self, ops: Vec<Op>) -> Result<(), StoreError> {
        match self {
            Backend::Redb(db) => {
                db.latched(guarded("writing", || db.apply_waking(ops, true, false)))
            }
            Backend::Memory(mem) => mem.apply(ops),
        }
    }

    pub(crate) fn flush(&self) -> Result<(), StoreError> {
        match self {
            Backend::Redb(db) => db.latched(guarded("flushing", || db.flush())),
            Backend::Memory(_) => Ok(()),
        }
    }

    /// A flusher's round ([`crate::Store::flush_round`]).
    pub(crate) fn flush_round(&self) -> Result<(), StoreError> {
        match self {
            Backend::Redb(db) => db.latched(guarded("flushing", || db.flush_round())),
            Backend::Memory(_) => Ok(()),
        }
    }

    /// Waits until relaxed commits are due to be made durable, at most `timeout`
    /// (see `RedbBackend::wait_for_flush`); in memory, where nothing is synced, waits out
    /// `timeout` and says no.
    pub(crate) fn wait_for_flush(&self, timeout: std::time::Duration) -> bool {
        match self {
            Backend::Redb(db) => db.wait_for_flush(timeout),
            Backend::Memory(_) => {
                std::thread::sleep(timeout);
                false
            }
        }
    }

    /// Commits written behind and waiting, and their bytes ([`crate::Store::pending_commits`]).
    pub(crate) fn pending(&self) -> (usize, usize) {
        match self {
            Backend::Redb(db) => db.pending(),
            Backend::Memory(_) => (0, 0),
        }
    }

    /// Commits held to the flusher's pace, and for how long in all
    /// ([`crate::Store::slowed_commits`]).
    pub(crate) fn slowed(&self) -> (u64, std::time::Duration) {
        match self {
            Backend::Redb(db) => db.slowed(),
            Backend::Memory(_) => (0, std::time::Duration::ZERO),
        }
    }

    /// The database's page cache size; 0 in memory, where there is none.
    pub(crate) fn page_cache_bytes(&self) -> usize {
        match self {
            Backend::Redb(db) => db.cache_bytes(),
            Backend::Memory(_) => 0,
        }
    }

    /// The first damage met in the database file ([`crate::Store::damage`]).
    pub(crate) fn damage(&self) -> Option<&str> {
        match self {
            Backend::Redb(db) => db.damage.get().map(String::as_str),
            Backend::Memory(_) => None,
        }
    }

    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Backend::Redb(_) => "redb",
            Backend::Memory(_) => "memory",
        }
    }
}
