//! Building a whole trie from keys given in ascending order, in bounded memory.
//!
//! A genesis of millions of accounts cannot go through [`crate::Trie`]'s overlay at once,
//! and in chunks it rewrites the upper branches once per chunk. Over sorted keys the
//! trie's shape is known from each key's common prefix with its neighbours: a key's leaf
//! sits one nibble below the longer of its two common prefixes, and a branch sits at each
//! distinct common-prefix length. [`SortedBuilder`] keeps only the branches still open
//! on the current key's path (at most 64) and emits every finished node, with its path,
//! exactly as the stored trie holds it (leaves, extensions, branches; inline nodes at
//! their own path too), so that the caller can write them out as they come.

use crate::{Child, Node, NodeRef, TrieError, empty_children, encode_node, nibbles};
use alloy_primitives::{B256, keccak256};

/// A finished node: its path (nibbles) and its RLP.
pub type BuiltNode = (Vec<u8>, Vec<u8>);

struct OpenBranch {
    depth: usize,
    children: Box<[Child; 16]>,
}

/// Builds a trie from `(key, value)` pairs in strictly ascending key order.
#[derive(Default)]
pub struct SortedBuilder {
    /// The branches on the current key's path not yet finished, by increasing depth.
    stack: Vec<OpenBranch>,
    /// The last key pushed, waiting for its successor (which decides where its leaf sits),
    /// and its common prefix with its predecessor (-1: none).
    pending: Option<(Vec<u8>, Vec<u8>, isize)>,
    /// Finished nodes not yet taken.
    out: Vec<BuiltNode>,
    /// The root's RLP once finished.
    root: Option<Vec<u8>>,
}

/// Why a sorted build refused a key.
fn out_of_order(key: &[u8]) -> TrieError {
    TrieError::Corrupt {
        owner: B256::ZERO,
        path: crate::path_text(key),
        reason: "keys are not in strictly ascending order",
    }
}

impl SortedBuilder {
    /// A builder of an empty trie.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `key` with leaf payload `value` (not empty); keys must come in strictly
    /// ascending order.
    pub fn push(&mut self, key: &B256, value: Vec<u8>) -> Result<(), TrieError> {
        let key = nibbles(key);
        let lcp = match self.pending.take() {
            None => -1,
            Some((prev, prev_value, prev_lcp)) => {
                if key <= prev {
                    let err = out_of_order(&key);
                    self.pending = Some((prev, prev_value, prev_lcp));
                    return Err(err);
                }
                let lcp = crate::common_prefix(&prev, &key) as isize;
                self.place(&prev, prev_value, prev_lcp, lcp);
                lcp
            }
        };
        self.pending = Some((key, value, lcp));
        Ok(())
    }

    /// The finished nodes so far (the caller writes them and may drop them).
    pub fn take_nodes(&mut self) -> Vec<BuiltNode> {
        std::mem::take(&mut self.out)
    }

    /// Nodes finished and not yet taken.
    pub fn pending_nodes(&self) -> usize {
        self.out.len()
    }

    /// Ends the build: the root hash, and the last finished nodes (the root's among
    /// them, at the empty path). An empty build gives the empty root and no node.
    pub fn finish(mut self) -> (B256, Vec<BuiltNode>) {
        if let Some((key, value, lcp)) = self.pending.take() {
            self.place(&key, value, lcp, -1);
        }
        let root = self.root.as_ref().map_or(crate::EMPTY_ROOT, keccak256);
        (root, self.out)
    }

    fn emit(&mut self, path: &[u8], node: &Node) -> Vec<u8> {
        let rlp = encode_node(node);
        self.out.push((path.to_vec(), rlp.clone()));
        rlp
    }

    /// Places `key`'s leaf, given its common prefixes with its predecessor (`lp`) and its
    /// successor (`ln`), then finishes the branches no later key reaches.
    fn place(&mut self, key: &[u8], value: Vec<u8>, lp: isize, ln: isize) {
        // The branch where this key and the next part (deeper than any open one).
        if ln > lp {
            self.stack.push(OpenBranch {
                depth: ln as usize,
                children: empty_children(),
            });
        }
        let m = lp.max(ln);
        let h = (m + 1) as usize;
        let leaf = Node::Leaf {
            key: key[h..].to_vec(),
            value,
        };
        let rlp = self.emit(&key[..h], &leaf);
        if m < 0 {
            self.root = Some(rlp);
            return;
        }
        let top = self
            .stack
            .last_mut()
            .expect("a branch at the longer common prefix");
        top.children[key[m as usize] as usize] = Child::Stored(NodeRef::to_node(&rlp));
        // Branches deeper than the next key's common prefix are complete.
        while self.stack.last().is_some_and(|b| b.depth as isize > ln) {
            let branch = self.stack.pop().expect("checked");
            let below = self.stack.last().map_or(-1, |b| b.depth as isize);
            let parent = below.max(ln);
            if parent == ln && below != ln && ln >= 0 {
                self.stack.push(OpenBranch {
                    depth: ln as usize,
                    children: empty_children(),
                });
            }
            let depth = branch.depth;
            let mut rlp = self.emit(
                &key[..depth],
                &Node::Branch {
                    children: branch.children,
                },
            );
            let start = (parent + 1) as usize;
            if depth > start {
                let ext = Node::Extension {
                    key: key[start..depth].to_vec(),
                    child: Child::Stored(NodeRef::to_node(&rlp)),
                };
                rlp = self.emit(&key[..start], &ext);
            }
            match self.stack.last_mut() {
                Some(p) if parent >= 0 => {
                    p.children[key[parent as usize] as usize] =
                        Child::Stored(NodeRef::to_node(&rlp));
                }
                _ => self.root = Some(rlp),
            }
        }
    }
}
