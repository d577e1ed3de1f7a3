//! Commits accepted but not yet written into the database file: the write-behind layers
//! of the redb backend.
//!
//! Once a flusher thread runs, a relaxed commit (a block's) is not applied on the
//! caller's thread: its ops become a [`Layer`], put on top of the shared read view at
//! once, and the flusher writes every waiting layer, in order, in one durable redb
//! transaction. Readers see the layers over the file's snapshot (newest first), so a
//! commit is visible the moment it returns, as before; the block's writer only pays for
//! sorting its ops into the layer, and the pages of several blocks' commits are copied
//! and written once instead of once a block.
//!
//! A layer keeps, per table, the final value of every key its ops touched (`None`: a
//! delete) and the ranges it deleted. Writing a layer deletes its ranges first, then
//! puts its keys: the same result as its ops in order, because a key put before a range
//! delete of the same commit was dropped from the layer by that delete.

use super::{Op, Table};
use crate::error::StoreError;
use std::collections::{BTreeMap, HashSet};
use std::hash::BuildHasher;
use std::ops::Bound;

/// A scan's visitor of one entry.
pub(crate) type Visit<'a> = dyn FnMut(&[u8], &[u8]) -> Result<(), StoreError> + 'a;

/// A range `start..=end` (`end: None`: to the end of the table).
type Range = (Vec<u8>, Option<Vec<u8>>);

#[derive(Default)]
struct TableWrites {
    /// key → its value after the commit; `None`: deleted.
    entries: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    /// The [`key_hash`] of every key of `entries` (and of keys a later range delete of
    /// the commit dropped from it): a read that misses here skips the ordered map, so a
    /// read past many waiting layers costs a hash probe each rather than a tree search.
    hashes: HashSet<u64, KeyHasher>,
    /// Ranges deleted, applied before `entries`.
    cleared: Vec<Range>,
}

/// The hasher of [`TableWrites::hashes`]: fixed, so one key's hash serves every layer.
type KeyHasher = foldhash::fast::FixedState;

/// A key's hash, computed once per read and probed in each layer.
pub(crate) fn key_hash(key: &[u8]) -> u64 {
    KeyHasher::default().hash_one(key)
}

fn in_range(key: &[u8], (start, end): &Range) -> bool {
    key >= start.as_slice() && end.as_deref().is_none_or(|end| key <= end)
}

fn overlaps(a: &Range, start: &[u8], end: Option<&[u8]>) -> bool {
    let a_before_b = a.1.as_deref().is_some_and(|a_end| a_end < start);
    let b_before_a = end.is_some_and(|b_end| b_end < a.0.as_slice());
    !a_before_b && !b_before_a
}

/// Whether `start..=end` holds no key (as redb reads it; `BTreeMap::range` would panic).
fn is_empty(start: &[u8], end: Option<&[u8]>) -> bool {
    end.is_some_and(|end| end < start)
}

fn bounds<'a>(start: &'a [u8], end: Option<&'a [u8]>) -> (Bound<&'a [u8]>, Bound<&'a [u8]>) {
    super::range_bounds(start, end)
}

/// One write of a layer, as [`Layer::write`] hands it out.
pub(crate) enum Write<'a> {
    Clear(&'a [u8], Option<&'a [u8]>),
    Put(&'a [u8], &'a [u8]),
    Delete(&'a [u8]),
}

/// Whether `ops` hold a test's injected failure: such a commit is applied directly.
pub(crate) fn holds_failure(ops: &[Op]) -> bool {
    #[cfg(test)]
    return ops.iter().any(|op| matches!(op, Op::Fail | Op::FailDisk));
    #[cfg(not(test))]
    {
        let _ = ops;
        false
    }
}

/// What a layer says of one key.
pub(crate) enum Lookup<'a> {
    /// Written by this layer.
    Value(&'a [u8]),
    /// Deleted by this layer, alone or in a range.
    Deleted,
    /// Not touched: ask the layer below.
    Untouched,
}

/// One relaxed commit waiting to be written.
pub(crate) struct Layer {
    tables: Vec<TableWrites>,
    /// The ops' size in bytes, for the bound on what may wait.
    pub(crate) bytes: usize,
}

impl Layer {
    /// The layer of `ops` (a test's injected failures, which only a direct commit
    /// meets, are left out: see [`holds_failure`]).
    pub(crate) fn of(ops: Vec<Op>) -> Layer {
        let mut tables: Vec<TableWrites> =
            (0..Table::COUNT).map(|_| TableWrites::default()).collect();
        let mut bytes = 0;
        for op in ops {
            match op {
                Op::Put { table, key, value } => {
                    bytes += key.len() + value.len();
                    let writes = &mut tables[table.index()];
                    writes.hashes.insert(key_hash(&key));
                    writes.entries.insert(key, Some(value));
                }
                Op::Delete { table, key } => {
                    bytes += key.len();
                    let writes = &mut tables[table.index()];
                    writes.hashes.insert(key_hash(&key));
                    writes.entries.insert(key, None);
                }
                Op::DeleteRange { start, end, .. } if is_empty(&start, end.as_deref()) => {}
                Op::DeleteRange { table, start, end } => {
                    let writes = &mut tables[table.index()];
                    let doomed: Vec<Vec<u8>> = writes
                        .entries
                        .range::<[u8], _>(bounds(&start, end.as_deref()))
                        .map(|(key, _)| key.clone())
                        .collect();
                    for key in doomed {
                        writes.entries.remove(&key);
                    }
                    bytes += start.len() + end.as_ref().map_or(0, Vec::len);
                    writes.cleared.push((start, end));
                }
                #[cfg(test)]
                Op::Fail | Op::FailDisk => {}
            }
        }
        Layer { tables, bytes }
    }

    /// What this layer says of `key`, whose [`key_hash`] is `hash`.
    pub(crate) fn lookup(&self, table: Table, key: &[u8], hash: u64) -> Lookup<'_> {
        let writes = &self.tables[table.index()];
        let written = if writes.hashes.contains(&hash) {
            writes.entries.get(key)
        } else {
            None
        };
        match written {
            Some(Some(value)) => Lookup::Value(value),
            Some(None) => Lookup::Deleted,
            None if writes.cleared.iter().any(|r| in_range(key, r)) => Lookup::Deleted,
            None => Lookup::Untouched,
        }
    }

    /// Whether this layer wrote anything in `table` within `start..=end`.
    fn touches(&self, table: Table, start: &[u8], end: Option<&[u8]>) -> bool {
        if is_empty(start, end) {
            return false;
        }
        let writes = &self.tables[table.index()];
        writes.cleared.iter().any(|r| overlaps(r, start, end))
            || writes
                .entries
                .range::<[u8], _>(bounds(start, end))
                .next()
                .is_some()
    }
}

/// Hands `layers`' writes (oldest first) to one transaction, layer after layer and in
/// each table by table: each deleted range, then each key written or deleted, in key
/// order; a key a later layer of the round writes or deletes again is skipped in the
/// earlier one (what it would write is overwritten in the same transaction: the trie's
/// upper nodes, a busy contract's account and slots come once in a round rather than
/// once a block). Which layer of the round touches a key last is looked up in one map
/// built for the round, so a round of many layers costs one probe a key, not one a layer.
pub(crate) fn write_layers(
    layers: &[&Layer],
    mut apply: impl FnMut(Table, Write<'_>) -> Result<(), StoreError>,
) -> Result<(), StoreError> {
    let mut last: std::collections::HashMap<u64, usize, KeyHasher> =
        std::collections::HashMap::with_hasher(KeyHasher::default());
    if layers.len() > 1 {
        for (i, layer) in layers.iter().enumerate() {
            for table in Table::ALL {
                for hash in &layer.tables[table.index()].hashes {
                    last.insert(slot(table, *hash), i);
                }
            }
        }
    }
    for (i, layer) in layers.iter().enumerate() {
        for table in Table::ALL {
            let writes = &layer.tables[table.index()];
            for (start, end) in &writes.cleared {
                apply(table, Write::Clear(start, end.as_deref()))?;
            }
            for (key, value) in &writes.entries {
                let again = match last.get(&slot(table, key_hash(key))) {
                    Some(&j) if j > i => {
                        // Another key of the same hash may be what layer `j` touched.
                        layers[j].tables[table.index()].entries.contains_key(key)
                            || layers[i + 1..j]
                                .iter()
                                .any(|l| l.tables[table.index()].entries.contains_key(key))
                    }
                    _ => false,
                };
                if again {
                    continue;
                }
                apply(
                    table,
                    match value {
                        Some(value) => Write::Put(key, value),
                        None => Write::Delete(key),
                    },
                )?;
            }
        }
    }
    Ok(())
}

/// A key's hash within its table: the key of [`Directory`] and of a round's map.
fn slot(table: Table, hash: u64) -> u64 {
    hash ^ (table.index() as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

/// Which waiting layer touched each key last, so that a read past many waiting layers
/// costs one hash probe rather than one a layer (a flusher behind by a hundred blocks
/// would otherwise make every state read of the block being executed probe a hundred
/// sets). It is kept beside the layers it describes and changed with them, under the
/// same lock: layer `i` of the waiting ones (oldest first) is number `first + i`.
#[derive(Default)]
pub(crate) struct Directory {
    /// The number of the oldest waiting layer.
    first: u64,
    /// [`slot`] → the number of the newest layer that wrote or deleted a key of that
    /// hash. An entry older than `first` is stale (its layer is in the file now, and no
    /// waiting one touched the key since) and reads as absent; the flusher removes them
    /// after each round ([`Directory::forget`]).
    newest: std::collections::HashMap<u64, u64, KeyHasher>,
    /// Every waiting layer's deleted ranges, with its number: rare (a storage wipe).
    cleared: Vec<(u64, Table, Range)>,
}

impl Directory {
    /// Records `layer`, pushed on top of the `waiting` layers.
    pub(crate) fn pushed(&mut self, layer: &Layer, waiting: usize) {
        let number = self.first + waiting as u64;
        for table in Table::ALL {
            let writes = &layer.tables[table.index()];
            for hash in &writes.hashes {
                self.newest.insert(slot(table, *hash), number);
            }
            for range in &writes.cleared {
                self.cleared.push((number, table, range.clone()));
            }
        }
    }

    /// The oldest `count` layers were written into the file: they are no longer waiting.
    pub(crate) fn drained(&mut self, count: usize) {
        self.first += count as u64;
        let first = self.first;
        self.cleared.retain(|(number, ..)| *number >= first);
    }

    /// Removes the entries of `layer` (once waiting as number `number`, written since)
    /// that no newer layer took over.
    pub(crate) fn forget(&mut self, layer: &Layer, number: u64) {
        for table in Table::ALL {
            for hash in &layer.tables[table.index()].hashes {
                let slot = slot(table, *hash);
                if self.newest.get(&slot) == Some(&number) {
                    self.newest.remove(&slot);
                }
            }
        }
    }

    /// The number the oldest waiting layer has.
    pub(crate) fn first(&self) -> u64 {
        self.first
    }

    /// What the waiting `layers` (oldest first, the ones this directory describes) say
    /// of `key`: the layer that wrote it last, `Err(())` when it is deleted, `Ok(None)`
    /// when none touched it.
    pub(crate) fn find<'a>(
        &self,
        layers: &'a [std::sync::Arc<Layer>],
        table: Table,
        key: &[u8],
        hash: u64,
    ) -> Result<Option<&'a std::sync::Arc<Layer>>, ()> {
        let number = self
            .newest
            .get(&slot(table, hash))
            .copied()
            .filter(|number| *number >= self.first);
        let found = match number {
            Some(number) => {
                let layer = layers.get((number - self.first) as usize);
                match layer.map(|layer| (layer, layer.lookup(table, key, hash))) {
                    Some((_, Lookup::Deleted)) => return Err(()),
                    Some((layer, Lookup::Value(_))) => Some((number, layer)),
                    // Another key of the same hash: ask every layer, newest first.
                    Some((_, Lookup::Untouched)) | None => {
                        return match newest(layers, table, key, hash) {
                            Some((_, Lookup::Deleted)) => Err(()),
                            Some((l, _)) => Ok(Some(l)),
                            None => Ok(None),
                        };
                    }
                }
            }
            None => None,
        };
        // A range a newer layer deleted hides it (the layer's own ranges were applied
        // before its keys, which `Layer::lookup` already weighed).
        let after = found.as_ref().map(|(number, _)| *number);
        let hidden = self.cleared.iter().any(|(number, t, range)| {
            *t == table && after.is_none_or(|after| *number > after) && in_range(key, range)
        });
        if hidden {
            return Err(());
        }
        Ok(found.map(|(_, layer)| layer))
    }
}

/// The value of `key` in `layers` (oldest first): `Some(lookup)` when a layer touched it.
pub(crate) fn lookup<'a>(
    layers: &'a [std::sync::Arc<Layer>],
    table: Table,
    key: &[u8],
) -> Option<Lookup<'a>> {
    newest(layers, table, key, key_hash(key)).map(|(_, found)| found)
}

/// The newest of `layers` (oldest first) that touched `key` (whose [`key_hash`] is
/// `hash`), with what it says of it.
fn newest<'a>(
    layers: &'a [std::sync::Arc<Layer>],
    table: Table,
    key: &[u8],
    hash: u64,
) -> Option<(&'a std::sync::Arc<Layer>, Lookup<'a>)> {
    layers
        .iter()
        .rev()
        .map(|layer| (layer, layer.lookup(table, key, hash)))
        .find(|(_, found)| !matches!(found, Lookup::Untouched))
}

/// What `layers` (oldest first) put over the file within `start..=end`: the keys they
/// wrote or deleted, newest value winning, and the ranges they cleared (which hide the
/// file's keys not written again). `None` when no layer touched the range.
pub(crate) struct Overlay {
    entries: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    cleared: Vec<Range>,
}

impl Overlay {
    pub(crate) fn of(
        layers: &[std::sync::Arc<Layer>],
        table: Table,
        start: &[u8],
        end: Option<&[u8]>,
    ) -> Option<Overlay> {
        if !layers.iter().any(|layer| layer.touches(table, start, end)) {
            return None;
        }
        let mut overlay = Overlay {
            entries: BTreeMap::new(),
            cleared: Vec::new(),
        };
        for layer in layers {
            let writes = &layer.tables[table.index()];
            for range in &writes.cleared {
                if !overlaps(range, start, end) {
                    continue;
                }
                let doomed: Vec<Vec<u8>> = overlay
                    .entries
                    .keys()
                    .filter(|key| in_range(key, range))
                    .cloned()
                    .collect();
                for key in doomed {
                    overlay.entries.remove(&key);
                }
                overlay.cleared.push(range.clone());
            }
            for (key, value) in writes.entries.range::<[u8], _>(bounds(start, end)) {
                overlay.entries.insert(key.clone(), value.clone());
            }
        }
        Some(overlay)
    }

    /// Visits, in key order, the file's entries (`file`, itself a scan of `start..=end`
    /// that calls its visitor in key order) merged with the overlay's.
    pub(crate) fn merge(
        &self,
        file: impl FnOnce(&mut Visit<'_>) -> Result<(), StoreError>,
        mut visit: impl FnMut(&[u8], &[u8]) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        let mut mine = self.entries.iter().peekable();
        file(&mut |key, value| {
            while let Some((k, v)) = mine.next_if(|(k, _)| k.as_slice() < key) {
                if let Some(v) = v {
                    visit(k, v)?;
                }
            }
            if let Some((_, v)) = mine.next_if(|(k, _)| k.as_slice() == key) {
                return match v {
                    Some(v) => visit(key, v),
                    None => Ok(()),
                };
            }
            if self.cleared.iter().any(|r| in_range(key, r)) {
                return Ok(());
            }
            visit(key, value)
        })?;
        for (k, v) in mine {
            if let Some(v) = v {
                visit(k, v)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn put(key: &[u8], value: &[u8]) -> Op {
        Op::Put {
            table: Table::Storage,
            key: key.to_vec(),
            value: value.to_vec(),
        }
    }

    fn clear(start: &[u8], end: Option<&[u8]>) -> Op {
        Op::DeleteRange {
            table: Table::Storage,
            start: start.to_vec(),
            end: end.map(<[u8]>::to_vec),
        }
    }

    /// A range delete drops the same commit's earlier puts and hides the file's keys; a
    /// later put survives it; a reversed range deletes nothing (as in redb), and the
    /// scan of a reversed range visits nothing, without a panic.
    #[test]
    fn a_layer_keeps_its_ops_order_and_reversed_ranges_are_empty() {
        let layer = Arc::new(Layer::of(vec![
            put(b"b", b"1"),
            clear(b"a", Some(b"c")),
            put(b"c", b"2"),
            clear(b"z", Some(b"y")),
        ]));
        assert!(matches!(
            layer.lookup(Table::Storage, b"b", key_hash(b"b")),
            Lookup::Deleted
        ));
        assert!(matches!(
            layer.lookup(Table::Storage, b"c", key_hash(b"c")),
            Lookup::Value(b"2")
        ));
        assert!(matches!(
            layer.lookup(Table::Storage, b"d", key_hash(b"d")),
            Lookup::Untouched
        ));
        assert!(matches!(
            layer.lookup(Table::Storage, b"y", key_hash(b"y")),
            Lookup::Untouched
        ));
        let layers = [layer];
        let file: [(&[u8], &[u8]); 3] = [(b"a", b"f"), (b"c", b"f"), (b"d", b"f")];
        let overlay = Overlay::of(&layers, Table::Storage, b"", None).expect("touched");
        let mut seen = Vec::new();
        overlay
            .merge(
                |visit| file.iter().try_for_each(|(k, v)| visit(k, v)),
                |k, v| {
                    seen.push((k.to_vec(), v.to_vec()));
                    Ok(())
                },
            )
            .unwrap();
        assert_eq!(
            seen,
            vec![
                (b"c".to_vec(), b"2".to_vec()),
                (b"d".to_vec(), b"f".to_vec())
            ]
        );
        assert!(Overlay::of(&layers, Table::Storage, b"z", Some(b"a")).is_none());
    }

    /// A file's content: (key, value) in key order.
    type File = Vec<(Vec<u8>, Vec<u8>)>;

    /// A file (a sorted map) after `layers` are written into it by [`write_layers`], and
    /// the number of writes handed out.
    fn written(layers: &[&Layer], file: &[(&[u8], &[u8])]) -> (File, usize) {
        let mut map: std::collections::BTreeMap<Vec<u8>, Vec<u8>> =
            file.iter().map(|(k, v)| (k.to_vec(), v.to_vec())).collect();
        let mut writes = 0;
        write_layers(layers, |_, write| {
            writes += 1;
            match write {
                Write::Clear(start, end) => map.retain(|k, _| {
                    !(k.as_slice() >= start && end.is_none_or(|e| k.as_slice() <= e))
                }),
                Write::Put(k, v) => {
                    map.insert(k.to_vec(), v.to_vec());
                }
                Write::Delete(k) => {
                    map.remove(k);
                }
            }
            Ok(())
        })
        .unwrap();
        (map.into_iter().collect(), writes)
    }

    /// Layers written in one round give the file they give written one by one, and a
    /// key a later layer writes or deletes again is handed out once.
    #[test]
    fn a_round_skips_writes_a_later_layer_overwrites_and_ends_the_same() {
        let del = |key: &[u8]| Op::Delete {
            table: Table::Storage,
            key: key.to_vec(),
        };
        let first = Layer::of(vec![put(b"a", b"1"), put(b"b", b"1"), put(b"c", b"1")]);
        let second = Layer::of(vec![
            put(b"a", b"2"),
            del(b"b"),
            clear(b"c", Some(b"d")),
            put(b"e", b"2"),
        ]);
        let third = Layer::of(vec![put(b"b", b"3"), put(b"a", b"3")]);
        let file: [(&[u8], &[u8]); 2] = [(b"d", b"f"), (b"z", b"f")];
        let (together, writes) = written(&[&first, &second, &third], &file);
        let mut apart = file
            .iter()
            .map(|(k, v)| (k.to_vec(), v.to_vec()))
            .collect::<Vec<_>>();
        for layer in [&first, &second, &third] {
            let flat: Vec<(&[u8], &[u8])> = apart
                .iter()
                .map(|(k, v)| (k.as_slice(), v.as_slice()))
                .collect();
            apart = written(&[layer], &flat).0;
        }
        assert_eq!(together, apart);
        assert_eq!(
            together,
            vec![
                (b"a".to_vec(), b"3".to_vec()),
                (b"b".to_vec(), b"3".to_vec()),
                (b"e".to_vec(), b"2".to_vec()),
                (b"z".to_vec(), b"f".to_vec()),
            ]
        );
        // c (first), the clear (second), e (second), a and b (third): the first and
        // second layers' a and b are overwritten within the round.
        assert_eq!(writes, 5);
    }

    /// The directory answers every read as asking each waiting layer newest first
    /// would, while layers are pushed, written (drained and forgotten) and overwrite
    /// and delete each other's keys and ranges; an entry pointing at a layer that did
    /// not touch the key (another key of its hash) is answered by asking every layer.
    /// And a round of many layers leaves the file as writing each layer in turn would.
    #[test]
    fn the_directory_reads_as_the_layers_do_and_rounds_write_what_they_would_in_turn() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = move |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        let key = |n: u64| vec![b'k', n as u8];
        let mut layers: Vec<Arc<Layer>> = Vec::new();
        let mut directory = Directory::default();
        // What the file holds once every layer so far is written in turn.
        let mut file: std::collections::BTreeMap<Vec<u8>, Vec<u8>> = Default::default();
        let mut in_file = 0;
        for round in 0..400u64 {
            let ops: Vec<Op> = (0..1 + next(6))
                .map(|_| match next(10) {
                    0 => {
                        let a = next(40);
                        clear(&key(a), Some(&key(a + next(4))))
                    }
                    1 | 2 => Op::Delete {
                        table: Table::Storage,
                        key: key(next(40)),
                    },
                    _ => put(&key(next(40)), &round.to_be_bytes()),
                })
                .collect();
            let layer = Arc::new(Layer::of(ops));
            directory.pushed(&layer, layers.len());
            layers.push(layer);
            if next(5) == 0 {
                // A round writes the oldest few.
                let count = 1 + next(layers.len() as u64) as usize;
                let round: Vec<&Layer> = layers[..count].iter().map(|l| &**l).collect();
                // Each layer of the round written alone, in turn.
                let mut naive = file.clone();
                for layer in &round {
                    let pairs: Vec<(Vec<u8>, Vec<u8>)> = naive.into_iter().collect();
                    let pairs: Vec<(&[u8], &[u8])> = pairs
                        .iter()
                        .map(|(k, v)| (k.as_slice(), v.as_slice()))
                        .collect();
                    naive = written(&[layer], &pairs).0.into_iter().collect();
                }
                let naive: Vec<(Vec<u8>, Vec<u8>)> = naive.into_iter().collect();
                let pairs: Vec<(Vec<u8>, Vec<u8>)> = file.clone().into_iter().collect();
                let pairs: Vec<(&[u8], &[u8])> = pairs
                    .iter()
                    .map(|(k, v)| (k.as_slice(), v.as_slice()))
                    .collect();
                let (together, _) = written(&round, &pairs);
                assert_eq!(together, naive, "round ending at layer {}", in_file + count);
                file = together.into_iter().collect();
                let first = directory.first();
                let gone: Vec<Arc<Layer>> = layers.drain(..count).collect();
                directory.drained(count);
                in_file += count;
                for (i, layer) in gone.iter().enumerate() {
                    if next(2) == 0 {
                        directory.forget(layer, first + i as u64);
                    }
                }
            }
            if next(7) == 0 && !layers.is_empty() {
                // Another key of the same hash, written later: the entry points at a
                // newer layer that did not touch this key.
                let k = key(next(40));
                let slot = slot(Table::Storage, key_hash(&k));
                let newest = directory.first() + layers.len() as u64 - 1;
                let number = directory
                    .newest
                    .get(&slot)
                    .map_or(directory.first(), |n| (*n).max(directory.first()));
                directory
                    .newest
                    .insert(slot, number + next(newest - number + 1));
            }
            for n in 0..44 {
                let k = key(n);
                let plain = match lookup(&layers, Table::Storage, &k) {
                    Some(Lookup::Value(v)) => Some(Some(v.to_vec())),
                    Some(Lookup::Deleted) => Some(None),
                    Some(Lookup::Untouched) | None => None,
                };
                let found = match directory.find(&layers, Table::Storage, &k, key_hash(&k)) {
                    Err(()) => Some(None),
                    Ok(Some(layer)) => match layer.lookup(Table::Storage, &k, key_hash(&k)) {
                        Lookup::Value(v) => Some(Some(v.to_vec())),
                        other => {
                            panic!("the found layer says {}", matches!(other, Lookup::Deleted))
                        }
                    },
                    Ok(None) => None,
                };
                assert_eq!(found, plain, "key {n} after layer {round}");
            }
        }
    }
}
