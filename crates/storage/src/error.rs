//! The one error type of the crate.

use crate::ChainMeta;
use std::path::PathBuf;

/// Why a store operation failed: the engine, the datadir's chain or schema, a failed
/// write, damaged data, or the filesystem.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database engine failed; the message names what the store was doing at the time.
    #[error("database error: {0}")]
    Db(String),

    /// The datadir was initialised for another network. Refusing to open it keeps a node
    /// configured for one chain from importing blocks on top of another chain's state.
    #[error(
        "the datadir {} belongs to another chain: it holds chain id {} with genesis {}, \
         but this node is configured for chain id {} with genesis {}; \
         choose another datadir or remove this one",
        datadir.display(),
        found.chain_id,
        found.genesis_hash,
        expected.chain_id,
        expected.genesis_hash
    )]
    ChainMismatch {
        /// The datadir opened.
        datadir: PathBuf,
        /// The chain this node is configured for.
        expected: ChainMeta,
        /// The chain the datadir was initialised for (its stored meta).
        found: ChainMeta,
    },

    /// The datadir was written by a version of moat with another on-disk layout.
    #[error(
        "the datadir {} uses storage schema version {found}, but this build of moat reads \
         version {supported}; use a matching moat version or resync into a new datadir",
        datadir.display()
    )]
    UnsupportedSchema {
        /// The datadir opened.
        datadir: PathBuf,
        /// The schema version stored in the datadir.
        found: u32,
        /// The one schema version this build reads and writes.
        supported: u32,
    },

    /// A write failed for a reason of the disk (full, or an I/O error): the database must
    /// be closed and reopened before it is written again, so the store refuses every
    /// later write ([`crate::Store::write_failure`]).
    #[error("the database cannot be written: {0}")]
    WriteFailed(String),

    /// A stored value does not decode: the file was damaged or written by something else.
    #[error("corrupt database: {0}")]
    Corrupt(String),

    /// A filesystem call on the datadir failed (creating it, or the database file).
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or directory the call was on.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}
