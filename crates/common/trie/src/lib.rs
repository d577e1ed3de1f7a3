//! moat-trie: the Merkle Patricia trie of Ethereum state, stored node by node under its
//! path, updated in place, so that a block costs what it changes.
//!
//! # Storage model
//! A trie is named by its **owner**: the zero hash for the account trie, the keccak of
//! an address for that account's storage trie. Each node lives at its **path**: the
//! nibbles of the key consumed from the root to reach it. The stored value is the node's
//! own RLP (the encoding that is hashed), children referenced as in any Ethereum trie: by
//! hash, or inline when their RLP is under 32 bytes. Inline children are stored at their
//! own path too, so every node is reached the same way: by loading the path below.
//!
//! Invariants (the store holds exactly the current trie):
//! - a node exists at a path if and only if the trie has a node there;
//! - branches never move: inserting and removing keys only creates, moves, merges or
//!   deletes leaves and extensions (a split adds a branch at a new path; a branch left
//!   with one child becomes a leaf or extension at its own path), so an unchanged
//!   subtree keeps its paths and its stored hashes stay valid;
//! - a node's reference in its parent is the hash (or inline RLP) of the node stored at
//!   the child path.
//!
//! # Updating
//! [`Trie`] keeps an overlay of the nodes it read and changed. [`Trie::insert`] and
//! [`Trie::remove`] walk from the root, loading only the nodes on the key's path, and
//! mark what they change; [`Trie::commit`] encodes and hashes the changed nodes bottom up
//! (unchanged children keep the reference their parent already holds) and returns the
//! root with the writes to apply and, for each written path, what the store held before
//! (the undo of the change). Cost: O(changed keys × depth) reads and hashes.
//!
//! [`subtrie`] updates the 16 subtries below a root branch independently (on worker
//! threads) and merges them into the root, with the sequential commit's writes.
//! [`proof`] gives the nodes on a key's path, as `eth_getProof` (EIP-1186) wants them.
//! [`range`] serves and verifies the ranges of snap/1: leaves in key order from an
//! origin, boundary proofs, and the range-proof verifier a syncing node checks them with.
//! [`node`] is the node codec (a node's RLP read and written, hex-prefix keys, child
//! references), also what snap sync reads and writes single nodes with.
//! The store behind the trie is a [`NodeSource`]; no database code lives here.
//!
//! # Checked reads
//! A walk from the root knows what each node below the root must hash to before it loads
//! it: its parent's reference; the root itself is checked when a caller gives its hash
//! ([`Trie::with_root`], [`subtrie::RootBranch::read_expecting`]). Every such node is
//! checked ([`NodeSource::node_expected`]; a source that keeps
//! checked nodes, as the store's cache does, answers those without hashing again), and an
//! update refuses a node under an empty slot: a node that rotted on disk is a
//! [`TrieError::Corrupt`], never a wrong root or a wrong value.

use alloy_primitives::{B256, keccak256};
use std::collections::{HashMap as StdHashMap, HashSet as StdHashSet};

pub mod node;
pub mod range;
pub mod sorted;
pub mod subtrie;

use node::{
    Child, Node, NodeRef, compact, decode_node, empty_children, encode_node, from_compact,
    node_items, string_payload,
};
pub use node::{NodeView, compact_path, node_ref, view_node};
pub use sorted::SortedBuilder;

/// The overlay's maps: keyed by nibble paths of hashed keys, hashed with foldhash (the
/// default SipHash was a tenth of a block's state-root update).
type HashMap<K, V> = StdHashMap<K, V, foldhash::fast::RandomState>;
type HashSet<K> = StdHashSet<K, foldhash::fast::RandomState>;

/// keccak256 of the RLP of an empty string: the root of an empty trie.
pub const EMPTY_ROOT: B256 =
    alloy_primitives::b256!("56e81f171bcc55a6ff8345e692c0f86e5b48e01b996cadc001622fb5e363b421");

/// Where nodes come from: the store, or a map in tests.
pub trait NodeSource {
    /// The RLP of the node at `path` (nibbles) of trie `owner`, if there is one.
    fn node(&self, owner: &B256, path: &[u8]) -> Result<Option<Vec<u8>>, TrieError>;

    /// The node at `path` that its parent (or, for a root, whoever holds the root hash)
    /// names as `expected`: an error when the source holds none there or one that does
    /// not hash to that name. A source that keeps nodes it has checked before (the
    /// store's node cache) may answer those without hashing them again; what comes from
    /// a disk is always checked.
    fn node_expected(
        &self,
        owner: &B256,
        path: &[u8],
        expected: Expected<'_>,
    ) -> Result<Vec<u8>, TrieError> {
        let rlp = self
            .node(owner, path)?
            .ok_or_else(|| TrieError::missing(owner, path))?;
        expected.check(owner, path, &rlp)?;
        Ok(rlp)
    }
}

/// What a node must hash to: the name its parent or its holder gives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expected<'a> {
    /// A child's reference as its parent's RLP holds it: the hash with its RLP header
    /// (33 bytes), or the node's own RLP when that is under 32 bytes.
    Ref(&'a [u8]),
    /// A trie's root hash (a root is named by its hash whatever its size).
    Root(&'a B256),
}

impl Expected<'_> {
    /// Whether `rlp` is the node this names.
    pub fn matches(&self, rlp: &[u8]) -> bool {
        match self {
            Expected::Ref(r) => NodeRef::to_node(rlp).as_slice() == *r,
            Expected::Root(root) => keccak256(rlp) == **root,
        }
    }

    /// [`Self::matches`] as an error naming the node.
    pub fn check(&self, owner: &B256, path: &[u8], rlp: &[u8]) -> Result<(), TrieError> {
        if self.matches(rlp) {
            Ok(())
        } else {
            Err(corrupt_at(
                owner,
                path,
                "the node does not hash to what its parent names",
            ))
        }
    }
}

fn corrupt_at(owner: &B256, path: &[u8], reason: &'static str) -> TrieError {
    TrieError::Corrupt {
        owner: *owner,
        path: path_text(path),
        reason,
    }
}

impl TrieError {
    /// A node its parent names that the source does not hold.
    pub fn missing(owner: &B256, path: &[u8]) -> TrieError {
        corrupt_at(owner, path, "a node its parent names is missing")
    }
}

/// What the walk down to a node knows of it before loading it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    /// Nothing: a root whose hash was not given, or a node this update already holds.
    Unknown,
    /// Its parent has an empty slot there: the source must hold nothing.
    Absent,
    /// Its parent's reference.
    Ref(NodeRef),
    /// The trie's root hash.
    Root(B256),
}

impl Expect {
    fn of(child: &Child) -> Expect {
        match child {
            Child::Empty => Expect::Absent,
            Child::Stored(r) => Expect::Ref(*r),
            Child::Dirty => Expect::Unknown,
        }
    }
}

/// Why a trie operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TrieError {
    /// The [`NodeSource`] failed to read (a database error, as its text), or its
    /// caller's input was inconsistent.
    #[error("trie node source: {0}")]
    Source(String),
    /// A stored node does not decode or does not match what its parent names.
    #[error("corrupt trie node of {owner} at path {path}: {reason}")]
    Corrupt {
        /// The trie's owner: zero for the account trie, keccak256(address) for a storage
        /// trie.
        owner: B256,
        /// The node's path from the root, as hex nibbles.
        path: String,
        /// What is wrong with the node.
        reason: &'static str,
    },
}

/// The nibbles of a 32-byte key, high nibble first.
pub fn nibbles(key: &B256) -> Vec<u8> {
    key.iter().flat_map(|b| [b >> 4, b & 0x0f]).collect()
}

fn joined(a: &[u8], b: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(a.len() + b.len());
    out.extend_from_slice(a);
    out.extend_from_slice(b);
    out
}

fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

fn path_text(path: &[u8]) -> String {
    path.iter().map(|n| format!("{n:x}")).collect()
}

/// What a commit changes: the new root, and per path the node to write (`None`:
/// delete) with the node the store held there before.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrieCommit {
    /// The trie's root hash after the commit (the empty-trie root when it holds nothing).
    pub root: B256,
    /// The node writes to apply to the store, one per changed path.
    pub writes: Vec<TrieWrite>,
}

/// One path of a [`TrieCommit`]: the node to store there and the one it replaces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrieWrite {
    /// The node's path from the root, in nibbles (one per byte, 0..=15).
    pub path: Vec<u8>,
    /// The node's new RLP; `None` deletes the node at `path`.
    pub node: Option<Vec<u8>>,
    /// The RLP the store held at `path` before (`None`: nothing): the undo of the write.
    pub old: Option<Vec<u8>>,
}

/// One trie being updated over a [`NodeSource`].
pub struct Trie<'s, S: NodeSource + ?Sized> {
    source: &'s S,
    owner: B256,
    /// The trie starts empty: the source's nodes of this owner are being dropped.
    wiped: bool,
    nodes: HashMap<PathKey, Option<Node>>,
    /// What the source held at each path read.
    original: HashMap<PathKey, Option<Vec<u8>>>,
    /// Paths written or deleted.
    touched: HashSet<PathKey>,
    /// The root hash the trie's root node must have (see [`Trie::with_root`]).
    root: Option<B256>,
}

/// A nibble path as the overlay's map key: packed two nibbles a byte on the stack, so
/// that a map operation neither allocates nor compares a heap slice. Paths of a trie of
/// 32-byte keys have at most 64 nibbles (nibbles past 64 are not packed; the length
/// still tells such paths apart from shorter ones).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct PathKey {
    packed: [u8; 32],
    len: u8,
}

impl PathKey {
    fn of(path: &[u8]) -> PathKey {
        let mut packed = [0u8; 32];
        for (slot, pair) in packed.iter_mut().zip(path.chunks(2)) {
            *slot = (pair[0] << 4) | pair.get(1).copied().unwrap_or(0);
        }
        PathKey {
            packed,
            len: path.len().min(255) as u8,
        }
    }

    fn nibbles(&self) -> Vec<u8> {
        self.packed
            .iter()
            .flat_map(|b| [b >> 4, b & 0x0f])
            .take(self.len as usize)
            .collect()
    }
}

impl<'s, S: NodeSource + ?Sized> Trie<'s, S> {
    /// The trie `owner` as the source holds it.
    pub fn new(source: &'s S, owner: B256) -> Self {
        Self {
            source,
            owner,
            wiped: false,
            nodes: HashMap::default(),
            original: HashMap::default(),
            touched: HashSet::default(),
            root: None,
        }
    }

    /// The same trie, whose stored root must hash to `root` (the state root of the block
    /// the store holds, or an account's storage root): a root node that does not is a
    /// [`TrieError::Corrupt`], as is any node below that does not hash to the reference
    /// its parent holds. Without it, the nodes below the root are still checked.
    pub fn with_root(mut self, root: B256) -> Self {
        self.root = Some(root);
        self
    }

    /// The hash of the root the source held, when the update has read it (the empty
    /// root when the source held none); `None` when it has not been read.
    pub fn original_root(&self) -> Option<B256> {
        self.original
            .get(&PathKey::of(&[]))
            .map(|raw| raw.as_deref().map_or(EMPTY_ROOT, keccak256))
    }

    fn root_expect(&self) -> Expect {
        match self.root {
            Some(root) if root == EMPTY_ROOT => Expect::Absent,
            Some(root) => Expect::Root(root),
            None => Expect::Unknown,
        }
    }

    /// The trie `owner` emptied: the caller drops the source's nodes of `owner` in the
    /// same write as this trie's commit.
    pub fn wiped(source: &'s S, owner: B256) -> Self {
        Self {
            wiped: true,
            ..Self::new(source, owner)
        }
    }

    /// The trie's owner: zero for the account trie, keccak256(address) for a storage trie.
    pub fn owner(&self) -> B256 {
        self.owner
    }

    fn corrupt(&self, path: &[u8], reason: &'static str) -> TrieError {
        TrieError::Corrupt {
            owner: self.owner,
            path: path_text(path),
            reason,
        }
    }

    fn read_source(&mut self, path: &[u8]) -> Result<Option<Vec<u8>>, TrieError> {
        self.load_original(path)?;
        Ok(self.original.get(&PathKey::of(path)).cloned().flatten())
    }

    /// Makes sure `original` holds what the source has at `path`.
    fn load_original(&mut self, path: &[u8]) -> Result<(), TrieError> {
        self.load_original_at(PathKey::of(path), path)
    }

    fn load_original_at(&mut self, key: PathKey, path: &[u8]) -> Result<(), TrieError> {
        self.load_expected(key, path, Expect::Unknown)
    }

    /// [`Self::load_original_at`], checking what the source holds against what the walk
    /// down to it knows.
    fn load_expected(
        &mut self,
        key: PathKey,
        path: &[u8],
        expect: Expect,
    ) -> Result<(), TrieError> {
        if let std::collections::hash_map::Entry::Vacant(slot) = self.original.entry(key) {
            let raw = if self.wiped {
                None
            } else {
                let (source, owner) = (self.source, &self.owner);
                match expect {
                    Expect::Unknown => source.node(owner, path)?,
                    Expect::Absent => match source.node(owner, path)? {
                        Some(_) => {
                            return Err(corrupt_at(
                                owner,
                                path,
                                "a node where its parent names none",
                            ));
                        }
                        None => None,
                    },
                    Expect::Ref(r) => {
                        Some(source.node_expected(owner, path, Expected::Ref(r.as_slice()))?)
                    }
                    Expect::Root(root) => {
                        Some(source.node_expected(owner, path, Expected::Root(&root))?)
                    }
                }
            };
            slot.insert(raw);
        }
        Ok(())
    }

    /// Takes the node at `path` out of the overlay (reading the source on a miss, and
    /// checking what it reads against `expect`); the caller puts it back with
    /// [`Self::keep`] or replaces it with [`Self::set`].
    fn take(&mut self, path: &[u8], expect: Expect) -> Result<Option<Node>, TrieError> {
        let key = PathKey::of(path);
        if let Some(entry) = self.nodes.remove(&key) {
            return Ok(entry);
        }
        self.load_expected(key, path, expect)?;
        match self.original.get(&key) {
            Some(Some(raw)) => decode_node(raw)
                .map(Some)
                .ok_or_else(|| self.corrupt(path, "undecodable node")),
            _ => Ok(None),
        }
    }

    /// Puts back what [`Self::take`] returned, unchanged.
    fn keep(&mut self, path: Vec<u8>, node: Option<Node>) {
        self.nodes.insert(PathKey::of(&path), node);
    }

    fn set(&mut self, path: Vec<u8>, node: Option<Node>) {
        let key = PathKey::of(&path);
        self.touched.insert(key);
        self.nodes.insert(key, node);
    }

    /// Sets `key` (32 bytes, hashed) to `value` (the leaf's payload: an account's or a
    /// slot value's RLP); returns the value it had.
    pub fn insert(&mut self, key: &B256, value: Vec<u8>) -> Result<Option<Vec<u8>>, TrieError> {
        let expect = self.root_expect();
        self.insert_at(Vec::new(), expect, &nibbles(key), |_| Ok(value))
    }

    /// Sets `key` to what `value` makes of its current value (`None`: absent), in one
    /// walk down the key's path; returns the value it had.
    pub fn insert_with(
        &mut self,
        key: &B256,
        value: impl FnOnce(Option<&[u8]>) -> Result<Vec<u8>, TrieError>,
    ) -> Result<Option<Vec<u8>>, TrieError> {
        let expect = self.root_expect();
        self.insert_at(Vec::new(), expect, &nibbles(key), value)
    }

    /// Removes `key`; absent keys change nothing. Returns the value it had.
    pub fn remove(&mut self, key: &B256) -> Result<Option<Vec<u8>>, TrieError> {
        let expect = self.root_expect();
        self.remove_at(Vec::new(), expect, &nibbles(key))
    }

    fn insert_at<F>(
        &mut self,
        path: Vec<u8>,
        expect: Expect,
        rest: &[u8],
        value: F,
    ) -> Result<Option<Vec<u8>>, TrieError>
    where
        F: FnOnce(Option<&[u8]>) -> Result<Vec<u8>, TrieError>,
    {
        match self.take(&path, expect)? {
            None => {
                let value = value(None)?;
                self.set(
                    path,
                    Some(Node::Leaf {
                        key: rest.to_vec(),
                        value,
                    }),
                )
            }
            Some(Node::Leaf { key, value: old }) => {
                if key == rest {
                    let value = match value(Some(&old)) {
                        Ok(v) => v,
                        Err(e) => {
                            self.keep(path, Some(Node::Leaf { key, value: old }));
                            return Err(e);
                        }
                    };
                    if old == value {
                        self.keep(path, Some(Node::Leaf { key, value }));
                    } else {
                        self.set(path, Some(Node::Leaf { key, value }));
                    }
                    return Ok(Some(old));
                }
                let value = match value(None) {
                    Ok(v) => v,
                    Err(e) => {
                        self.keep(path, Some(Node::Leaf { key, value: old }));
                        return Err(e);
                    }
                };
                let c = common_prefix(&key, rest);
                if c >= key.len() || c >= rest.len() {
                    return Err(self.corrupt(&path, "keys of different lengths"));
                }
                let branch_path = joined(&path, &key[..c]);
                let mut children = empty_children();
                children[key[c] as usize] = Child::Dirty;
                children[rest[c] as usize] = Child::Dirty;
                self.set(
                    joined(&branch_path, &[key[c]]),
                    Some(Node::Leaf {
                        key: key[c + 1..].to_vec(),
                        value: old,
                    }),
                );
                self.set(
                    joined(&branch_path, &[rest[c]]),
                    Some(Node::Leaf {
                        key: rest[c + 1..].to_vec(),
                        value,
                    }),
                );
                self.place_branch(path, &key[..c], branch_path, children);
            }
            Some(Node::Extension { key, child }) => {
                let c = common_prefix(&key, rest);
                if c == key.len() {
                    let below = joined(&path, &key);
                    let expect = Expect::of(&child);
                    self.set(
                        path,
                        Some(Node::Extension {
                            key: key.clone(),
                            child: Child::Dirty,
                        }),
                    );
                    return self.insert_at(below, expect, &rest[c..], value);
                }
                if c >= rest.len() {
                    return Err(self.corrupt(&path, "keys of different lengths"));
                }
                let value = value(None)?;
                // Split the extension at `c`: a branch there, the old child under one
                // slot (through a shorter extension if nibbles remain), the new leaf
                // under another. The old child keeps its path.
                let branch_path = joined(&path, &key[..c]);
                let mut children = empty_children();
                let tail = &key[c + 1..];
                if tail.is_empty() {
                    children[key[c] as usize] = child;
                } else {
                    self.set(
                        joined(&branch_path, &[key[c]]),
                        Some(Node::Extension {
                            key: tail.to_vec(),
                            child,
                        }),
                    );
                    children[key[c] as usize] = Child::Dirty;
                }
                self.set(
                    joined(&branch_path, &[rest[c]]),
                    Some(Node::Leaf {
                        key: rest[c + 1..].to_vec(),
                        value,
                    }),
                );
                children[rest[c] as usize] = Child::Dirty;
                self.place_branch(path, &key[..c], branch_path, children);
            }
            Some(Node::Branch { mut children }) => {
                let Some(&n) = rest.first() else {
                    return Err(self.corrupt(&path, "a key ends at a branch"));
                };
                let expect = Expect::of(&children[n as usize]);
                children[n as usize] = Child::Dirty;
                let below = joined(&path, &[n]);
                self.set(path, Some(Node::Branch { children }));
                return self.insert_at(below, expect, &rest[1..], value);
            }
        }
        Ok(None)
    }

    /// A new branch at `branch_path`, reached from `path` through `prefix` (an
    /// extension at `path` when the prefix is not empty).
    fn place_branch(
        &mut self,
        path: Vec<u8>,
        prefix: &[u8],
        branch_path: Vec<u8>,
        children: Box<[Child; 16]>,
    ) {
        if prefix.is_empty() {
            self.set(path, Some(Node::Branch { children }));
        } else {
            self.set(
                path,
                Some(Node::Extension {
                    key: prefix.to_vec(),
                    child: Child::Dirty,
                }),
            );
            self.set(branch_path, Some(Node::Branch { children }));
        }
    }

    /// Removes the key `rest` below `path`; the value it had, if it was there.
    fn remove_at(
        &mut self,
        path: Vec<u8>,
        expect: Expect,
        rest: &[u8],
    ) -> Result<Option<Vec<u8>>, TrieError> {
        match self.take(&path, expect)? {
            None => {
                self.keep(path, None);
                Ok(None)
            }
            Some(Node::Leaf { key, value }) => {
                if key == rest {
                    self.set(path, None);
                    Ok(Some(value))
                } else {
                    self.keep(path, Some(Node::Leaf { key, value }));
                    Ok(None)
                }
            }
            Some(Node::Extension { key, child }) => {
                if !rest.starts_with(&key) {
                    self.keep(path, Some(Node::Extension { key, child }));
                    return Ok(None);
                }
                let below = joined(&path, &key);
                let expect = Expect::of(&child);
                let Some(old) = self.remove_at(below.clone(), expect, &rest[key.len()..])? else {
                    self.keep(path, Some(Node::Extension { key, child }));
                    return Ok(None);
                };
                // The child changed: merge it up if it is no longer a branch.
                match self.take(&below, Expect::Unknown)? {
                    None => self.set(path, None),
                    Some(Node::Leaf { key: k2, value }) => {
                        self.set(below, None);
                        let key = joined(&key, &k2);
                        self.set(path, Some(Node::Leaf { key, value }));
                    }
                    Some(Node::Extension { key: k2, child }) => {
                        self.set(below, None);
                        let key = joined(&key, &k2);
                        self.set(path, Some(Node::Extension { key, child }));
                    }
                    Some(branch @ Node::Branch { .. }) => {
                        self.keep(below, Some(branch));
                        let child = Child::Dirty;
                        self.set(path, Some(Node::Extension { key, child }));
                    }
                }
                Ok(Some(old))
            }
            Some(Node::Branch { mut children }) => {
                let Some(&n) = rest.first() else {
                    self.keep(path, Some(Node::Branch { children }));
                    return Ok(None);
                };
                let below = joined(&path, &[n]);
                let expect = Expect::of(&children[n as usize]);
                let Some(old) = self.remove_at(below.clone(), expect, &rest[1..])? else {
                    self.keep(path, Some(Node::Branch { children }));
                    return Ok(None);
                };
                let still = self.take(&below, Expect::Unknown)?;
                children[n as usize] = if still.is_some() {
                    Child::Dirty
                } else {
                    Child::Empty
                };
                self.keep(below, still);
                let left: Vec<usize> = (0..16).filter(|i| children[*i] != Child::Empty).collect();
                match left.as_slice() {
                    [] => self.set(path, None),
                    [only] => {
                        // One child left: the branch becomes that child, one nibble up.
                        let only_path = joined(&path, &[*only as u8]);
                        match self.take(&only_path, Expect::of(&children[*only]))? {
                            Some(Node::Leaf { key, value }) => {
                                self.set(only_path, None);
                                let key = joined(&[*only as u8], &key);
                                self.set(path, Some(Node::Leaf { key, value }));
                            }
                            Some(Node::Extension { key, child }) => {
                                self.set(only_path, None);
                                let key = joined(&[*only as u8], &key);
                                self.set(path, Some(Node::Extension { key, child }));
                            }
                            Some(branch @ Node::Branch { .. }) => {
                                self.keep(only_path, Some(branch));
                                let child = std::mem::replace(&mut children[*only], Child::Empty);
                                let key = vec![*only as u8];
                                self.set(path, Some(Node::Extension { key, child }));
                            }
                            None => return Err(self.corrupt(&only_path, "missing child")),
                        }
                    }
                    _ => self.set(path, Some(Node::Branch { children })),
                }
                Ok(Some(old))
            }
        }
    }

    /// Resolves the dirty children of the node at `path`, encodes it and appends the
    /// encoding to `encoded` (children before their parent; the node leaves the overlay);
    /// returns its reference (`None`: the node was removed).
    fn hash_at(
        &mut self,
        path: &[u8],
        encoded: &mut Vec<(Vec<u8>, Vec<u8>)>,
    ) -> Result<Option<NodeRef>, TrieError> {
        let key = PathKey::of(path);
        let Some(node) = self.nodes.remove(&key) else {
            return Err(self.corrupt(path, "a changed node is not in the overlay"));
        };
        let Some(mut node) = node else {
            self.nodes.insert(key, None);
            return Ok(None);
        };
        match &mut node {
            Node::Leaf { .. } => {}
            Node::Extension { key, child } => {
                if *child == Child::Dirty {
                    let below = joined(path, key);
                    let r = self
                        .hash_at(&below, encoded)?
                        .ok_or_else(|| self.corrupt(&below, "an extension without child"))?;
                    *child = Child::Stored(r);
                }
            }
            Node::Branch { children } => {
                let mut below = Vec::with_capacity(path.len() + 1);
                below.extend_from_slice(path);
                below.push(0);
                for (i, child) in children.iter_mut().enumerate() {
                    if *child == Child::Dirty {
                        *below.last_mut().expect("one nibble pushed") = i as u8;
                        *child = match self.hash_at(&below, encoded)? {
                            Some(r) => Child::Stored(r),
                            None => Child::Empty,
                        };
                    }
                }
            }
        }
        let rlp = encode_node(&node);
        let r = NodeRef::to_node(&rlp);
        encoded.push((path.to_vec(), rlp));
        Ok(Some(r))
    }

    /// The new root, the writes that make the store hold the updated trie, and the
    /// nodes they overwrite: the written nodes children first (the order the commit
    /// hashes them in), then the removed ones by path.
    pub fn commit(mut self) -> Result<TrieCommit, TrieError> {
        let mut encoded = Vec::with_capacity(self.touched.len());
        let root = if self.touched.contains(&PathKey::of(&[])) {
            match self.hash_at(&[], &mut encoded)? {
                // The root is hashed last.
                Some(_) => encoded.last().map(|(_, rlp)| keccak256(rlp)),
                None => None,
            }
        } else {
            self.read_source(&[])?.map(keccak256)
        };
        let root = root.unwrap_or(EMPTY_ROOT);
        let (mut writes, removed) = self.writes(encoded)?;
        writes.extend(removed);
        Ok(TrieCommit { root, writes })
    }

    /// The writes of hashed nodes `encoded` (those that differ from the store, with what
    /// it held) and the removals of the touched paths left empty (sorted by path).
    fn writes(
        &mut self,
        encoded: Vec<(Vec<u8>, Vec<u8>)>,
    ) -> Result<(Vec<TrieWrite>, Vec<TrieWrite>), TrieError> {
        let mut writes = Vec::with_capacity(encoded.len());
        for (path, rlp) in encoded {
            let key = PathKey::of(&path);
            self.load_original_at(key, &path)?;
            let old = self.original.remove(&key).flatten();
            if old.as_deref() == Some(rlp.as_slice()) {
                continue;
            }
            writes.push(TrieWrite {
                path,
                node: Some(rlp),
                old,
            });
        }
        // What is left of the touched paths in the overlay: removed nodes (hashed
        // nodes left it); a changed node still there was not reachable from the root.
        let mut removed = Vec::new();
        for key in std::mem::take(&mut self.touched) {
            match self.nodes.get(&key) {
                Some(None) => removed.push(key.nibbles()),
                Some(Some(_)) => {
                    return Err(self.corrupt(&key.nibbles(), "a changed node is unreachable"));
                }
                None => {}
            }
        }
        removed.sort_unstable();
        let mut removals = Vec::new();
        for path in removed {
            let key = PathKey::of(&path);
            self.load_original_at(key, &path)?;
            if let Some(old) = self.original.remove(&key).flatten() {
                removals.push(TrieWrite {
                    path,
                    node: None,
                    old: Some(old),
                });
            }
        }
        Ok((writes, removals))
    }
}

/// The root of trie `owner` as the source holds it.
pub fn root<S: NodeSource + ?Sized>(source: &S, owner: &B256) -> Result<B256, TrieError> {
    Ok(source
        .node(owner, &[])?
        .map_or(EMPTY_ROOT, |rlp| keccak256(&rlp)))
}

/// The nodes from the root towards `key` (EIP-1186 proof): the root, then every node on
/// the path that its parent references by hash (inline nodes travel inside their parent).
/// For an absent key the proof ends at the node that shows the absence.
pub fn proof<S: NodeSource + ?Sized>(
    source: &S,
    owner: &B256,
    key: &B256,
) -> Result<Vec<Vec<u8>>, TrieError> {
    let key = nibbles(key);
    let mut out = Vec::new();
    let mut path = Vec::new();
    let corrupt = |path: &[u8], reason| TrieError::Corrupt {
        owner: *owner,
        path: path_text(path),
        reason,
    };
    // Each node below the root is checked against its parent's reference.
    let mut expected: Option<NodeRef> = None;
    loop {
        let rlp = match &expected {
            None => match source.node(owner, &path)? {
                Some(rlp) => rlp,
                None => break,
            },
            Some(r) => source.node_expected(owner, &path, Expected::Ref(r.as_slice()))?,
        };
        let node = decode_node(&rlp).ok_or_else(|| corrupt(&path, "undecodable node"))?;
        if path.is_empty() || rlp.len() >= 32 {
            out.push(rlp);
        }
        let rest = &key[path.len()..];
        let child = match node {
            Node::Leaf { .. } => break,
            Node::Extension { key: ext, child } => {
                if !rest.starts_with(&ext) {
                    break;
                }
                path.extend_from_slice(&ext);
                child
            }
            Node::Branch { children } => {
                let Some(&n) = rest.first() else { break };
                if children[n as usize] == Child::Empty {
                    break;
                }
                path.push(n);
                children[n as usize].clone()
            }
        };
        expected = match child {
            Child::Stored(r) => Some(r),
            Child::Empty | Child::Dirty => {
                return Err(corrupt(&path, "an empty reference where a child is named"));
            }
        };
    }
    Ok(out)
}

/// A [`NodeSource`] over a map, with the writes of a commit applied to it: for tests
/// and for building a trie in memory.
#[derive(Debug, Clone, Default)]
pub struct MemoryNodes {
    /// Node RLP by (owner, nibble path).
    pub nodes: HashMap<(B256, Vec<u8>), Vec<u8>>,
}

impl MemoryNodes {
    /// Applies a commit of trie `owner`: stores its new nodes, removes its deleted ones.
    pub fn apply(&mut self, owner: &B256, commit: &TrieCommit) {
        for w in &commit.writes {
            match &w.node {
                Some(rlp) => {
                    self.nodes.insert((*owner, w.path.clone()), rlp.clone());
                }
                None => {
                    self.nodes.remove(&(*owner, w.path.clone()));
                }
            }
        }
    }

    /// Drops every node of `owner`.
    pub fn wipe(&mut self, owner: &B256) {
        self.nodes.retain(|(o, _), _| o != owner);
    }
}

impl NodeSource for MemoryNodes {
    fn node(&self, owner: &B256, path: &[u8]) -> Result<Option<Vec<u8>>, TrieError> {
        Ok(self.nodes.get(&(*owner, path.to_vec())).cloned())
    }
}

#[cfg(test)]
mod tests;
