//! Tables as `BTreeMap`s under one lock: the backend of tests and throwaway nodes.

use super::{Op, Table, range_bounds};
use crate::error::StoreError;
use parking_lot::RwLock;
use std::collections::BTreeMap;

type Map = BTreeMap<Vec<u8>, Vec<u8>>;

pub(crate) struct MemoryBackend {
    tables: RwLock<[Map; Table::COUNT]>,
}

impl MemoryBackend {
    pub(crate) fn new() -> Self {
        MemoryBackend {
            tables: RwLock::new(std::array::from_fn(|_| Map::new())),
        }
    }

    pub(crate) fn get_with<R>(
        &self,
        table: Table,
        key: &[u8],
        decode: impl FnOnce(&[u8]) -> Result<R, StoreError>,
    ) -> Result<Option<R>, StoreError> {
        let tables = self.tables.read();
        tables[table.index()]
            .get(key)
            .map(|value| decode(value))
            .transpose()
    }

    pub(crate) fn scan(
        &self,
        table: Table,
        start: &[u8],
        end: Option<&[u8]>,
        mut visit: impl FnMut(&[u8], &[u8]) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        let tables = self.tables.read();
        for (key, value) in tables[table.index()].range::<[u8], _>(range_bounds(start, end)) {
            visit(key, value)?;
        }
        Ok(())
    }

    /// Applies `ops` under the write lock, so readers see all of them or none. Nothing
    /// below can fail once the first op is applied, so no undo log is needed; the
    /// test-only [`Op::Fail`] is therefore checked before anything changes.
    pub(crate) fn apply(&self, ops: Vec<Op>) -> Result<(), StoreError> {
        #[cfg(test)]
        if ops.contains(&Op::Fail) {
            return Err(StoreError::Db("injected failure".into()));
        }
        #[cfg(test)]
        if ops.contains(&Op::FailDisk) {
            return Err(StoreError::WriteFailed("No space left on device".into()));
        }
        let mut tables = self.tables.write();
        for op in ops {
            match op {
                Op::Put { table, key, value } => {
                    tables[table.index()].insert(key, value);
                }
                Op::Delete { table, key } => {
                    tables[table.index()].remove(&key);
                }
                Op::DeleteRange { table, start, end } => {
                    let map = &mut tables[table.index()];
                    let doomed: Vec<Vec<u8>> = map
                        .range::<[u8], _>(range_bounds(&start, end.as_deref()))
                        .map(|(key, _)| key.clone())
                        .collect();
                    for key in doomed {
                        map.remove(&key);
                    }
                }
                #[cfg(test)]
                Op::Fail | Op::FailDisk => {
                    unreachable!("checked before the first op is applied")
                }
            }
        }
        Ok(())
    }
}
