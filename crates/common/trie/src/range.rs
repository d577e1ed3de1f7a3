//! Ranges of a trie, as snap/1 moves state: the leaves from an origin in key order, the
//! boundary proof of a range, and the verifier that checks a range against a root.
//!
//! The server side ([`walk_from`], [`get`], [`range_proof`]) reads any [`NodeSource`]:
//! the store's head trie, or an older state seen through its undo records. The client
//! side ([`verify_range_proof`]) needs no store at all: it rebuilds, from the proof
//! nodes and the leaves, the part of the trie the range covers and checks its root.
//!
//! # How a range is verified
//! A response for `[origin, last]` carries the leaves in that interval and the nodes on
//! the paths to `origin` and to `last` (the latter absent when no leaf came back). From
//! the proof the verifier opens every node whose key span straddles a boundary; nodes
//! wholly outside `[origin, last]` stay as the hashes their parents hold, nodes wholly
//! inside are dropped, and the leaves are inserted back in their place. The rebuilt root
//! equals the expected one exactly when the leaves are all the trie holds in the interval
//! with the values it holds. With no leaf at all the interval is `[origin, 0xff..ff]`: the
//! proof then shows that nothing lies at or after the origin.

use crate::{
    Child, EMPTY_ROOT, Expected, Node, NodeSource, TrieError, compact, decode_node, from_compact,
    nibbles, node_items, node_ref, path_text, proof, string_payload,
};
use alloy_primitives::{B256, keccak256};
use alloy_rlp::{Encodable, Header};
use std::collections::{HashMap, HashSet};

/// Nibbles of a full key.
const KEY_NIBBLES: usize = 64;

/// The 32-byte key a full nibble path spells.
pub fn key_of(path: &[u8]) -> B256 {
    let mut out = B256::ZERO;
    for (i, pair) in path.chunks(2).take(32).enumerate() {
        out[i] = (pair[0] << 4) | pair.get(1).copied().unwrap_or(0);
    }
    out
}

fn corrupt(owner: &B256, path: &[u8], reason: &'static str) -> TrieError {
    TrieError::Corrupt {
        owner: *owner,
        path: path_text(path),
        reason,
    }
}

/// Calls `f` with every leaf (key, value) of trie `owner` whose key is `>= origin`, in key
/// order, until `f` returns `false`. Only the nodes on the way are read: the subtrees
/// left of the origin are skipped without loading them.
pub fn walk_from<S: NodeSource + ?Sized>(
    source: &S,
    owner: &B256,
    origin: &B256,
    mut f: impl FnMut(B256, &[u8]) -> bool,
) -> Result<(), TrieError> {
    let origin = nibbles(origin);
    let mut path = Vec::with_capacity(KEY_NIBBLES);
    walk(source, owner, &mut path, None, &origin, true, &mut f).map(|_| ())
}

/// The node at `path`: the root as the source holds it (`expected` none), or a child
/// checked against its parent's reference.
fn load<S: NodeSource + ?Sized>(
    source: &S,
    owner: &B256,
    path: &[u8],
    expected: Option<&Child>,
) -> Result<Option<Vec<u8>>, TrieError> {
    match expected {
        None => source.node(owner, path),
        Some(Child::Stored(r)) => source
            .node_expected(owner, path, Expected::Ref(r.as_slice()))
            .map(Some),
        Some(Child::Empty | Child::Dirty) => Err(corrupt(
            owner,
            path,
            "an empty reference where a child is named",
        )),
    }
}

/// Walks the subtree at `path` (the root when `expected` is none, else the child its
/// parent names so); `bounded` while `path` is a prefix of the origin. Returns whether
/// to go on.
fn walk<S: NodeSource + ?Sized>(
    source: &S,
    owner: &B256,
    path: &mut Vec<u8>,
    expected: Option<&Child>,
    origin: &[u8],
    bounded: bool,
    f: &mut impl FnMut(B256, &[u8]) -> bool,
) -> Result<bool, TrieError> {
    // An empty trie has no root; a missing child is an error of `load`.
    let Some(rlp) = load(source, owner, path, expected)? else {
        return Ok(true);
    };
    let node = decode_node(&rlp).ok_or_else(|| corrupt(owner, path, "undecodable node"))?;
    match node {
        Node::Leaf { key, value } => {
            let depth = path.len();
            path.extend_from_slice(&key);
            if path.len() != KEY_NIBBLES {
                return Err(corrupt(owner, path, "leaf key of the wrong length"));
            }
            let go_on = if bounded && path.as_slice() < origin {
                true
            } else {
                f(key_of(path), &value)
            };
            path.truncate(depth);
            Ok(go_on)
        }
        Node::Extension { key, child } => {
            let depth = path.len();
            path.extend_from_slice(&key);
            if path.len() >= KEY_NIBBLES {
                return Err(corrupt(owner, path, "extension past the key length"));
            }
            let below = &origin[..path.len()];
            let result = if bounded && path.as_slice() < below {
                // Every key below is left of the origin.
                Ok(true)
            } else {
                let still = bounded && path.as_slice() == below;
                walk(source, owner, path, Some(&child), origin, still, f)
            };
            path.truncate(depth);
            result
        }
        Node::Branch { children } => {
            if path.len() >= KEY_NIBBLES {
                return Err(corrupt(owner, path, "branch at the key length"));
            }
            let first = if bounded { origin[path.len()] } else { 0 };
            for i in first..16 {
                if children[i as usize] == Child::Empty {
                    continue;
                }
                path.push(i);
                let child = Some(&children[i as usize]);
                let go_on = walk(source, owner, path, child, origin, bounded && i == first, f);
                path.pop();
                if !go_on? {
                    return Ok(false);
                }
            }
            Ok(true)
        }
    }
}

/// The value of `key` in trie `owner`, if it holds one: the leaf on its path, if that
/// leaf's key is `key`.
pub fn get<S: NodeSource + ?Sized>(
    source: &S,
    owner: &B256,
    key: &B256,
) -> Result<Option<Vec<u8>>, TrieError> {
    Ok(leaf_on_path(source, owner, key)?
        .and_then(|(found, value)| (found == *key).then_some(value)))
}

/// The key nibbles and value of a leaf node's RLP; `None` for any other node.
pub fn decode_leaf(rlp: &[u8]) -> Option<(Vec<u8>, Vec<u8>)> {
    match decode_node(rlp)? {
        Node::Leaf { key, value } => Some((key, value)),
        Node::Extension { .. } | Node::Branch { .. } => None,
    }
}

/// The leaf where the path of `key` ends in trie `owner`, whatever its key: (its full
/// key, its value). `None` when the path ends at an empty slot or off an extension.
pub fn leaf_on_path<S: NodeSource + ?Sized>(
    source: &S,
    owner: &B256,
    key: &B256,
) -> Result<Option<(B256, Vec<u8>)>, TrieError> {
    let key = nibbles(key);
    let mut path = Vec::with_capacity(KEY_NIBBLES);
    let mut expected: Option<Child> = None;
    while let Some(rlp) = load(source, owner, &path, expected.as_ref())? {
        let node = decode_node(&rlp).ok_or_else(|| corrupt(owner, &path, "undecodable node"))?;
        let rest = &key[path.len()..];
        match node {
            Node::Leaf { key: k, value } => {
                path.extend_from_slice(&k);
                if path.len() != KEY_NIBBLES {
                    return Err(corrupt(owner, &path, "leaf key of the wrong length"));
                }
                return Ok(Some((key_of(&path), value)));
            }
            Node::Extension { key: k, child } => {
                if !rest.starts_with(&k) {
                    return Ok(None);
                }
                path.extend_from_slice(&k);
                expected = Some(child);
            }
            Node::Branch { mut children } => {
                let Some(&n) = rest.first() else {
                    return Ok(None);
                };
                if children[n as usize] == Child::Empty {
                    return Ok(None);
                }
                path.push(n);
                expected = Some(std::mem::replace(&mut children[n as usize], Child::Empty));
            }
        }
    }
    Ok(None)
}

/// The boundary proof of a range: the nodes on the path to `origin` (which shows the
/// origin's key or its absence) and, when leaves were returned, on the path to the `last`
/// one; each node once.
pub fn range_proof<S: NodeSource + ?Sized>(
    source: &S,
    owner: &B256,
    origin: &B256,
    last: Option<&B256>,
) -> Result<Vec<Vec<u8>>, TrieError> {
    let mut out = proof(source, owner, origin)?;
    if let Some(last) = last {
        let seen: HashSet<Vec<u8>> = out.iter().cloned().collect();
        for node in proof(source, owner, last)? {
            if !seen.contains(&node) {
                out.push(node);
            }
        }
    }
    Ok(out)
}

/// Why a range does not verify.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RangeProofError {
    /// The response pairs keys and values badly.
    #[error("{keys} keys but {values} values")]
    LengthMismatch {
        /// How many keys the range holds.
        keys: usize,
        /// How many values it holds.
        values: usize,
    },
    /// Two keys are out of order or repeated.
    #[error("keys are not strictly increasing")]
    NotIncreasing,
    /// A value is empty (a trie never stores one: an empty value is a deletion).
    #[error("a value is empty")]
    EmptyValue,
    /// The range starts below the origin that was asked for.
    #[error("the first key lies before the origin")]
    BeforeOrigin,
    /// A node on a boundary path, named by this hash, is not in the proof.
    #[error("proof node {0} is missing")]
    MissingNode(B256),
    /// A proof node, by its hash, does not decode as a trie node.
    #[error("proof node {0} does not decode as a trie node")]
    BadNode(B256),
    /// The proof's nodes and the keys do not fit together (a path too deep, a key that
    /// lands on an unopened subtree or on a leaf already there).
    #[error("the proof and the keys do not form one trie")]
    Malformed,
    /// The trie rebuilt from the proof and the range does not hash to the root.
    #[error("rebuilt root {found}, expected {expected}")]
    RootMismatch {
        /// The state root the range was asked against.
        expected: B256,
        /// The root the proof and the range rebuild.
        found: B256,
    },
}

/// A node of the partial trie the verifier rebuilds.
#[derive(Debug, Clone)]
enum Part {
    Empty,
    /// A subtree the proof does not open: its hash as its parent holds it.
    Hash(B256),
    Leaf {
        key: Vec<u8>,
        value: Vec<u8>,
    },
    Ext {
        key: Vec<u8>,
        child: Box<Part>,
    },
    Branch(Box<[Part; 16]>),
}

fn empty_parts() -> Box<[Part; 16]> {
    Box::new(std::array::from_fn(|_| Part::Empty))
}

/// Decodes a node's RLP into a partial node; `id` names it in errors.
fn decode_part(rlp: &[u8], id: B256) -> Result<Part, RangeProofError> {
    let bad = || RangeProofError::BadNode(id);
    let (items, n) = node_items(rlp).ok_or_else(bad)?;
    let child = |item: &[u8]| -> Result<Part, RangeProofError> {
        if item == [alloy_rlp::EMPTY_STRING_CODE] {
            Ok(Part::Empty)
        } else if item.len() == 33 && item[0] == 0xa0 {
            Ok(Part::Hash(B256::from_slice(&item[1..])))
        } else if item.first().is_some_and(|b| *b >= 0xc0) && item.len() < 32 {
            decode_part(item, id)
        } else {
            Err(bad())
        }
    };
    match n {
        2 => {
            let (key, leaf) =
                from_compact(string_payload(items[0]).ok_or_else(bad)?).ok_or_else(bad)?;
            if leaf {
                let value = string_payload(items[1]).ok_or_else(bad)?.to_vec();
                Ok(Part::Leaf { key, value })
            } else {
                let c = child(items[1])?;
                if key.is_empty() || matches!(c, Part::Empty) {
                    return Err(bad());
                }
                Ok(Part::Ext {
                    key,
                    child: Box::new(c),
                })
            }
        }
        17 => {
            // State tries hold values at leaves only.
            if items[16] != [alloy_rlp::EMPTY_STRING_CODE] {
                return Err(bad());
            }
            let mut children = empty_parts();
            for (slot, item) in children.iter_mut().zip(&items[..16]) {
                *slot = child(item)?;
            }
            Ok(Part::Branch(children))
        }
        _ => Err(bad()),
    }
}

/// Where the key span of the subtree at `path` lies against `[lo, hi]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Span {
    Inside,
    Outside,
    Straddles,
}

fn span(path: &[u8], lo: &[u8], hi: &[u8]) -> Span {
    let n = path.len().min(KEY_NIBBLES);
    let (lo_head, hi_head) = (&lo[..n], &hi[..n]);
    if path < lo_head || path > hi_head {
        return Span::Outside;
    }
    let from_lo = path > lo_head || lo[n..].iter().all(|x| *x == 0);
    let to_hi = path < hi_head || hi[n..].iter().all(|x| *x == 0x0f);
    if from_lo && to_hi {
        Span::Inside
    } else {
        Span::Straddles
    }
}

struct Verifier<'a> {
    proof: HashMap<B256, &'a [u8]>,
    lo: Vec<u8>,
    hi: Vec<u8>,
}

impl Verifier<'_> {
    fn resolve(&self, hash: B256) -> Result<Part, RangeProofError> {
        let rlp = self
            .proof
            .get(&hash)
            .ok_or(RangeProofError::MissingNode(hash))?;
        decode_part(rlp, hash)
    }

    /// Drops what lies in `[lo, hi]`, opening through the proof every node that straddles
    /// a boundary.
    fn cut(&self, node: Part, path: &mut Vec<u8>) -> Result<Part, RangeProofError> {
        if path.len() > KEY_NIBBLES {
            return Err(RangeProofError::Malformed);
        }
        if let Part::Leaf { key, value } = node {
            let depth = path.len();
            path.extend_from_slice(&key);
            let inside =
                path.as_slice() >= self.lo.as_slice() && path.as_slice() <= self.hi.as_slice();
            path.truncate(depth);
            return Ok(if inside {
                Part::Empty
            } else {
                Part::Leaf { key, value }
            });
        }
        if matches!(node, Part::Empty) {
            return Ok(Part::Empty);
        }
        match span(path, &self.lo, &self.hi) {
            Span::Inside => return Ok(Part::Empty),
            Span::Outside => return Ok(node),
            Span::Straddles => {}
        }
        let node = match node {
            Part::Hash(h) => self.resolve(h)?,
            other => other,
        };
        match node {
            Part::Ext { key, child } => {
                let depth = path.len();
                path.extend_from_slice(&key);
                let result = match span(path, &self.lo, &self.hi) {
                    Span::Inside => Ok(Part::Empty),
                    Span::Outside => Ok(Part::Ext { key, child }),
                    Span::Straddles => self.cut(*child, path).map(|c| Part::Ext {
                        key,
                        child: Box::new(c),
                    }),
                };
                path.truncate(depth);
                result
            }
            Part::Branch(mut children) => {
                for (i, slot) in children.iter_mut().enumerate() {
                    path.push(i as u8);
                    let taken = std::mem::replace(slot, Part::Empty);
                    let cut = self.cut(taken, path);
                    path.pop();
                    *slot = cut?;
                }
                Ok(Part::Branch(children))
            }
            // A leaf (reached through a hash) is judged by its key.
            leaf @ Part::Leaf { .. } => self.cut(leaf, path),
            Part::Empty | Part::Hash(_) => Err(RangeProofError::Malformed),
        }
    }
}

fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// Inserts the key `rest` below `node`.
fn insert(node: Part, rest: &[u8], value: &[u8]) -> Result<Part, RangeProofError> {
    Ok(match node {
        Part::Empty => Part::Leaf {
            key: rest.to_vec(),
            value: value.to_vec(),
        },
        // Inside the range every subtree was opened or dropped.
        Part::Hash(_) => return Err(RangeProofError::Malformed),
        Part::Leaf { key, value: old } => {
            if key == rest {
                return Err(RangeProofError::Malformed);
            }
            let c = common_prefix(&key, rest);
            if c >= key.len() || c >= rest.len() {
                return Err(RangeProofError::Malformed);
            }
            let mut children = empty_parts();
            children[key[c] as usize] = Part::Leaf {
                key: key[c + 1..].to_vec(),
                value: old,
            };
            children[rest[c] as usize] = Part::Leaf {
                key: rest[c + 1..].to_vec(),
                value: value.to_vec(),
            };
            with_prefix(&key[..c], Part::Branch(children))
        }
        Part::Ext { key, child } => {
            let c = common_prefix(&key, rest);
            if c == key.len() {
                let child = insert(*child, &rest[c..], value)?;
                return Ok(Part::Ext {
                    key,
                    child: Box::new(child),
                });
            }
            if c >= rest.len() {
                return Err(RangeProofError::Malformed);
            }
            let mut children = empty_parts();
            children[key[c] as usize] = with_prefix(&key[c + 1..], *child);
            children[rest[c] as usize] = Part::Leaf {
                key: rest[c + 1..].to_vec(),
                value: value.to_vec(),
            };
            with_prefix(&key[..c], Part::Branch(children))
        }
        Part::Branch(mut children) => {
            let (&n, below) = rest.split_first().ok_or(RangeProofError::Malformed)?;
            let slot = std::mem::replace(&mut children[n as usize], Part::Empty);
            children[n as usize] = insert(slot, below, value)?;
            Part::Branch(children)
        }
    })
}

/// `node` behind an extension of `prefix` (none when it is empty).
fn with_prefix(prefix: &[u8], node: Part) -> Part {
    if prefix.is_empty() {
        node
    } else {
        Part::Ext {
            key: prefix.to_vec(),
            child: Box::new(node),
        }
    }
}

fn encode_part(node: &Part) -> Vec<u8> {
    let mut payload = Vec::new();
    match node {
        Part::Empty | Part::Hash(_) => return vec![alloy_rlp::EMPTY_STRING_CODE],
        Part::Leaf { key, value } => {
            compact(key, true).as_slice().encode(&mut payload);
            value.as_slice().encode(&mut payload);
        }
        Part::Ext { key, child } => {
            compact(key, false).as_slice().encode(&mut payload);
            payload.extend_from_slice(&part_ref(child));
        }
        Part::Branch(children) => {
            for c in children.iter() {
                payload.extend_from_slice(&part_ref(c));
            }
            payload.push(alloy_rlp::EMPTY_STRING_CODE);
        }
    }
    let mut out = Vec::with_capacity(payload.len() + 3);
    Header {
        list: true,
        payload_length: payload.len(),
    }
    .encode(&mut out);
    out.extend_from_slice(&payload);
    out
}

/// A child as its parent holds it.
fn part_ref(node: &Part) -> Vec<u8> {
    match node {
        Part::Empty => vec![alloy_rlp::EMPTY_STRING_CODE],
        Part::Hash(h) => {
            let mut out = Vec::with_capacity(33);
            h.as_slice().encode(&mut out);
            out
        }
        other => node_ref(&encode_part(other)),
    }
}

fn part_root(node: &Part) -> B256 {
    match node {
        Part::Empty => EMPTY_ROOT,
        Part::Hash(h) => *h,
        other => keccak256(encode_part(other)),
    }
}

/// Whether the rebuilt trie holds anything right of the full key `key` (from nibble `pos`).
fn has_right(node: &Part, key: &[u8], pos: usize) -> bool {
    match node {
        Part::Empty => false,
        // Not opened, so not on the key's path: the cut opened every node there.
        Part::Hash(_) => true,
        Part::Leaf { key: k, .. } => k.as_slice() > key.get(pos..).unwrap_or_default(),
        Part::Ext { key: k, child } => {
            let end = (pos + k.len()).min(key.len());
            let seg = key.get(pos..end).unwrap_or_default();
            if k.as_slice() == seg {
                has_right(child, key, end)
            } else {
                k.as_slice() > seg
            }
        }
        Part::Branch(children) => {
            let Some(&n) = key.get(pos) else {
                return false;
            };
            children[n as usize + 1..]
                .iter()
                .any(|c| !matches!(c, Part::Empty))
                || has_right(&children[n as usize], key, pos + 1)
        }
    }
}

/// Checks that `keys` with `values` are every leaf of the trie under `root` from `origin`
/// up to the last key (or, with no key, that the trie holds nothing from `origin` on),
/// given the boundary `proof`. An empty proof claims the keys are the whole trie.
/// Returns whether the trie holds more leaves after the last key.
pub fn verify_range_proof<V: AsRef<[u8]>, P: AsRef<[u8]>>(
    root: B256,
    origin: &B256,
    keys: &[B256],
    values: &[V],
    proof: &[P],
) -> Result<bool, RangeProofError> {
    if keys.len() != values.len() {
        return Err(RangeProofError::LengthMismatch {
            keys: keys.len(),
            values: values.len(),
        });
    }
    if keys.windows(2).any(|w| w[0] >= w[1]) {
        return Err(RangeProofError::NotIncreasing);
    }
    if values.iter().any(|v| v.as_ref().is_empty()) {
        return Err(RangeProofError::EmptyValue);
    }
    if proof.is_empty() {
        // The whole trie.
        let mut trie = Part::Empty;
        for (k, v) in keys.iter().zip(values) {
            trie = insert(trie, &nibbles(k), v.as_ref())?;
        }
        let found = part_root(&trie);
        return if found == root {
            Ok(false)
        } else {
            Err(RangeProofError::RootMismatch {
                expected: root,
                found,
            })
        };
    }
    if keys.first().is_some_and(|k| k < origin) {
        return Err(RangeProofError::BeforeOrigin);
    }
    let verifier = Verifier {
        proof: proof
            .iter()
            .map(|n| (keccak256(n.as_ref()), n.as_ref()))
            .collect(),
        lo: nibbles(origin),
        hi: keys.last().map_or_else(|| vec![0x0f; KEY_NIBBLES], nibbles),
    };
    let start = if root == EMPTY_ROOT {
        Part::Empty
    } else {
        Part::Hash(root)
    };
    let mut trie = verifier.cut(start, &mut Vec::with_capacity(KEY_NIBBLES))?;
    for (k, v) in keys.iter().zip(values) {
        trie = insert(trie, &nibbles(k), v.as_ref())?;
    }
    let found = part_root(&trie);
    if found != root {
        return Err(RangeProofError::RootMismatch {
            expected: root,
            found,
        });
    }
    Ok(!keys.is_empty() && has_right(&trie, &verifier.hi, 0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{MemoryNodes, Trie};
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    const OWNER: B256 = B256::ZERO;

    fn build(state: &BTreeMap<B256, Vec<u8>>) -> (MemoryNodes, B256) {
        let mut nodes = MemoryNodes::default();
        let mut trie = Trie::new(&nodes, OWNER);
        for (k, v) in state {
            trie.insert(k, v.clone()).unwrap();
        }
        let commit = trie.commit().unwrap();
        nodes.apply(&OWNER, &commit);
        (nodes, commit.root)
    }

    fn hashed(n: u64) -> B256 {
        keccak256(n.to_be_bytes())
    }

    fn value(n: u64) -> Vec<u8> {
        alloy_rlp::encode(alloy_primitives::U256::from(n + 1))
    }

    fn state_of(keys: impl IntoIterator<Item = B256>) -> BTreeMap<B256, Vec<u8>> {
        keys.into_iter()
            .enumerate()
            .map(|(i, k)| (k, value(i as u64)))
            .collect()
    }

    /// Keys that share long prefixes: extensions, and leaves short enough to be inlined.
    fn clustered() -> BTreeMap<B256, Vec<u8>> {
        let mut keys = Vec::new();
        for last in [0x00u8, 0x01, 0x02, 0x10, 0xf0, 0xff] {
            let mut k = B256::repeat_byte(0xaa);
            k[31] = last;
            keys.push(k);
        }
        keys.push(B256::repeat_byte(0x11));
        keys.push(B256::with_last_byte(5));
        state_of(keys)
    }

    /// What a server answers for `[origin, ..]` with at most `count` leaves.
    fn serve(
        nodes: &MemoryNodes,
        origin: &B256,
        count: usize,
    ) -> (Vec<B256>, Vec<Vec<u8>>, Vec<Vec<u8>>) {
        let (mut keys, mut values) = (Vec::new(), Vec::new());
        walk_from(nodes, &OWNER, origin, |k, v| {
            keys.push(k);
            values.push(v.to_vec());
            keys.len() < count
        })
        .unwrap();
        let proof = range_proof(nodes, &OWNER, origin, keys.last()).unwrap();
        (keys, values, proof)
    }

    fn after(state: &BTreeMap<B256, Vec<u8>>, key: &B256) -> bool {
        state
            .range((std::ops::Bound::Excluded(*key), std::ops::Bound::Unbounded))
            .next()
            .is_some()
    }

    fn origins(state: &BTreeMap<B256, Vec<u8>>) -> Vec<B256> {
        let mut out = vec![B256::ZERO, B256::repeat_byte(0xff)];
        for k in state.keys() {
            out.push(*k);
            let mut up = *k;
            up[31] = up[31].wrapping_add(1);
            out.push(up);
            let mut down = *k;
            down[31] = down[31].wrapping_sub(1);
            out.push(down);
        }
        out
    }

    #[test]
    fn walk_returns_the_leaves_from_the_origin_in_order() {
        for state in [state_of((0..300).map(hashed)), clustered()] {
            let (nodes, _) = build(&state);
            for origin in origins(&state) {
                let (keys, values, _) = serve(&nodes, &origin, usize::MAX);
                let want: Vec<_> = state.range(origin..).collect();
                assert_eq!(keys.len(), want.len(), "origin {origin}");
                for ((k, v), (wk, wv)) in keys.iter().zip(&values).zip(want) {
                    assert_eq!((k, v), (wk, wv));
                }
            }
        }
        // An empty trie has nothing to walk.
        let (keys, _, proof) = serve(&MemoryNodes::default(), &B256::ZERO, 10);
        assert!(keys.is_empty() && proof.is_empty());
    }

    #[test]
    fn get_reads_present_and_absent_keys() {
        let state = clustered();
        let (nodes, _) = build(&state);
        for k in origins(&state) {
            assert_eq!(get(&nodes, &OWNER, &k).unwrap(), state.get(&k).cloned());
        }
    }

    #[test]
    fn served_ranges_verify_with_the_right_more_flag() {
        for state in [
            state_of((0..300).map(hashed)),
            clustered(),
            state_of([hashed(1)]),
        ] {
            let (nodes, root) = build(&state);
            for origin in origins(&state) {
                for count in [1, 2, 7, 1000] {
                    let (keys, values, proof) = serve(&nodes, &origin, count);
                    let more = verify_range_proof(root, &origin, &keys, &values, &proof)
                        .unwrap_or_else(|e| panic!("origin {origin} count {count}: {e}"));
                    let want_more = keys.last().is_some_and(|last| after(&state, last));
                    assert_eq!(more, want_more, "origin {origin} count {count}");
                }
            }
            // The whole trie without a proof.
            let keys: Vec<B256> = state.keys().copied().collect();
            let values: Vec<Vec<u8>> = state.values().cloned().collect();
            let none: &[Vec<u8>] = &[];
            assert_eq!(
                verify_range_proof(root, &B256::ZERO, &keys, &values, none),
                Ok(false)
            );
        }
        // The empty trie.
        let none: &[Vec<u8>] = &[];
        assert_eq!(
            verify_range_proof(EMPTY_ROOT, &B256::ZERO, &[], none, none),
            Ok(false)
        );
    }

    #[test]
    fn tampered_ranges_fail() {
        let state = state_of((0..200).map(hashed));
        let (nodes, root) = build(&state);
        let origin = *state.keys().nth(20).unwrap();
        let (keys, values, proof) = serve(&nodes, &origin, 30);
        let check = |keys: &[B256], values: &[Vec<u8>], proof: &[Vec<u8>]| {
            verify_range_proof(root, &origin, keys, values, proof)
        };
        assert!(check(&keys, &values, &proof).is_ok());
        // A leaf left out in the middle.
        let (mut k, mut v) = (keys.clone(), values.clone());
        k.remove(10);
        v.remove(10);
        assert!(check(&k, &v, &proof).is_err());
        // The first leaf left out: the origin's proof shows it.
        assert!(check(&keys[1..], &values[1..], &proof).is_err());
        // A changed value.
        let mut v = values.clone();
        v[5] = value(999);
        assert!(matches!(
            check(&keys, &v, &proof),
            Err(RangeProofError::RootMismatch { .. })
        ));
        // A key the trie does not hold.
        let (mut k, mut v) = (keys.clone(), values.clone());
        let mut extra = k[3];
        extra[31] ^= 1;
        let at = k.binary_search(&extra).unwrap_err();
        k.insert(at, extra);
        v.insert(at, value(7));
        assert!(check(&k, &v, &proof).is_err());
        // Nothing at or after the origin: false while leaves are there.
        let none: &[Vec<u8>] = &[];
        let absent = range_proof(&nodes, &OWNER, &origin, None).unwrap();
        assert!(verify_range_proof(root, &origin, &[], none, &absent).is_err());
        // A node of the proof missing.
        let short: Vec<Vec<u8>> = proof[..proof.len() - 1].to_vec();
        assert!(check(&keys, &values, &short).is_err());
        // Input checks.
        let mut swapped = keys.clone();
        swapped.swap(0, 1);
        assert_eq!(
            check(&swapped, &values, &proof),
            Err(RangeProofError::NotIncreasing)
        );
        assert_eq!(
            check(&keys, &values[1..], &proof),
            Err(RangeProofError::LengthMismatch {
                keys: keys.len(),
                values: keys.len() - 1
            })
        );
        let mut v = values.clone();
        v[0].clear();
        assert_eq!(check(&keys, &v, &proof), Err(RangeProofError::EmptyValue));
        let later = keys[1];
        assert_eq!(
            verify_range_proof(root, &later, &keys, &values, &proof),
            Err(RangeProofError::BeforeOrigin)
        );
        // Against another root.
        let other = B256::repeat_byte(3);
        assert!(matches!(
            verify_range_proof(other, &origin, &keys, &values, &proof),
            Err(RangeProofError::MissingNode(h)) if h == other
        ));
        // Garbage proof nodes are refused, not panicked on.
        let junk = vec![vec![0xc3, 0x01, 0x02, 0x03], vec![0xff; 40]];
        assert!(verify_range_proof(keccak256(&junk[0]), &origin, &keys, &values, &junk).is_err());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn random_ranges_verify_and_gaps_do_not(
            seeds in proptest::collection::btree_set(any::<u16>(), 1..120),
            origin_seed in any::<u16>(),
            count in 1usize..40,
            drop in any::<prop::sample::Index>(),
        ) {
            // Short keys in the top bytes so that neighbours share prefixes.
            let keys = seeds.iter().map(|s| {
                let mut k = keccak256(s.to_be_bytes());
                k[0] = (*s >> 8) as u8 & 0x0f;
                k
            });
            let state = state_of(keys);
            let (nodes, root) = build(&state);
            let mut origin = keccak256(origin_seed.to_be_bytes());
            origin[0] = (origin_seed >> 8) as u8 & 0x0f;
            let (keys, values, proof) = serve(&nodes, &origin, count);
            let more = verify_range_proof(root, &origin, &keys, &values, &proof);
            let want_more = keys.last().is_some_and(|last| after(&state, last));
            prop_assert_eq!(more, Ok(want_more));
            if keys.len() >= 2 {
                let i = drop.index(keys.len() - 1);
                let (mut k, mut v) = (keys.clone(), values.clone());
                k.remove(i);
                v.remove(i);
                prop_assert!(verify_range_proof(root, &origin, &k, &v, &proof).is_err());
            }
        }

        #[test]
        fn damaged_proofs_are_refused_without_panicking(
            seeds in proptest::collection::btree_set(any::<u16>(), 2..80),
            origin_seed in any::<u16>(),
            count in 1usize..20,
            node in any::<prop::sample::Index>(),
            byte in any::<prop::sample::Index>(),
            flip in 1u8..=255,
        ) {
            let state = state_of(seeds.iter().map(|s| keccak256(s.to_be_bytes())));
            let (nodes, root) = build(&state);
            let origin = keccak256(origin_seed.to_be_bytes());
            let (keys, values, mut proof) = serve(&nodes, &origin, count);
            prop_assume!(!proof.is_empty());
            let n = node.index(proof.len());
            let at = byte.index(proof[n].len());
            proof[n][at] ^= flip;
            // A changed node no longer hashes to what its parent references, so the
            // range cannot verify (unless the node is not needed, which proofs of both
            // edges never hold).
            let result = verify_range_proof(root, &origin, &keys, &values, &proof);
            prop_assert!(result.is_err(), "{:?}", result);
        }
    }
}
