//! The one error type of the crate.

use crate::ChainMeta;
use std::path::PathBuf;

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
        datadir: PathBuf,
        expected: ChainMeta,
        found: ChainMeta,
    },

    /// The datadir was written by a version of moat with another on-disk layout.
    #[error(
        "the datadir {} uses storage schema version {found}, but this build of moat reads \
         version {supported}; use a matching moat version or resync into a new datadir",
        datadir.display()
    )]
    UnsupportedSchema {
        datadir: PathBuf,
        found: u32,
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

    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}
