//! The node codec: a node's RLP read and written, hex-prefix keys, and a child's
//! reference as its parent holds it (its hash, or its RLP inline under 32 bytes).
//!
//! The trie's own walks use the overlay's `Node`; other crates see a node as a
//! [`NodeView`] ([`view_node`] reads one, [`NodeView::encode`] writes one) and name a
//! node by its path in hex-prefix form ([`compact_path`]).

use alloy_primitives::keccak256;
use alloy_rlp::{Encodable, Header};

/// A node's reference as its parent holds it: the RLP of its hash, or its RLP itself
/// when that is under 32 bytes.
pub fn node_ref(rlp: &[u8]) -> Vec<u8> {
    NodeRef::to_node(rlp).as_slice().to_vec()
}

/// A child's reference as its parent's RLP holds it (a hash with its RLP header, or an
/// inline node under 32 bytes), held inline: decoding a branch allocates nothing per
/// child.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NodeRef {
    pub(crate) len: u8,
    pub(crate) bytes: [u8; 33],
}

impl NodeRef {
    /// A reference as it appears in a parent (at most 33 bytes).
    pub(crate) fn from_item(item: &[u8]) -> Option<NodeRef> {
        let mut bytes = [0u8; 33];
        bytes.get_mut(..item.len())?.copy_from_slice(item);
        Some(NodeRef {
            len: item.len() as u8,
            bytes,
        })
    }

    /// The reference to the node whose RLP is `rlp`.
    pub(crate) fn to_node(rlp: &[u8]) -> NodeRef {
        if rlp.len() < 32 {
            let mut bytes = [0u8; 33];
            bytes[..rlp.len()].copy_from_slice(rlp);
            NodeRef {
                len: rlp.len() as u8,
                bytes,
            }
        } else {
            let mut bytes = [0u8; 33];
            bytes[0] = 0xa0;
            bytes[1..].copy_from_slice(keccak256(rlp).as_slice());
            NodeRef { len: 33, bytes }
        }
    }

    pub(crate) fn as_slice(&self) -> &[u8] {
        &self.bytes[..self.len as usize]
    }
}

/// A child slot of a node in the overlay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Child {
    Empty,
    /// Unchanged: the reference the parent's stored RLP holds.
    Stored(NodeRef),
    /// Changed in this update: the node at the child path must be hashed again.
    Dirty,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Node {
    Leaf { key: Vec<u8>, value: Vec<u8> },
    Extension { key: Vec<u8>, child: Child },
    Branch { children: Box<[Child; 16]> },
}

pub(crate) fn empty_children() -> Box<[Child; 16]> {
    Box::new(std::array::from_fn(|_| Child::Empty))
}

/// Hex-prefix encoding of a node's key nibbles.
pub(crate) fn compact(nibbles: &[u8], leaf: bool) -> Vec<u8> {
    let flag = if leaf { 2u8 } else { 0 };
    let mut out = Vec::with_capacity(nibbles.len() / 2 + 1);
    let rest = if nibbles.len() % 2 == 1 {
        out.push(((flag | 1) << 4) | nibbles[0]);
        &nibbles[1..]
    } else {
        out.push(flag << 4);
        nibbles
    };
    for pair in rest.chunks(2) {
        out.push((pair[0] << 4) | pair[1]);
    }
    out
}

/// The nibbles and leaf flag of a hex-prefix key.
pub(crate) fn from_compact(bytes: &[u8]) -> Option<(Vec<u8>, bool)> {
    let first = *bytes.first()?;
    let flag = first >> 4;
    if flag > 3 {
        return None;
    }
    let mut out = Vec::with_capacity(bytes.len() * 2);
    if flag & 1 == 1 {
        out.push(first & 0x0f);
    } else if first & 0x0f != 0 {
        return None;
    }
    for b in &bytes[1..] {
        out.push(b >> 4);
        out.push(b & 0x0f);
    }
    Some((out, flag & 2 == 2))
}

/// The payload of an RLP string item.
pub(crate) fn string_payload(mut item: &[u8]) -> Option<&[u8]> {
    let h = Header::decode(&mut item).ok()?;
    (!h.list && h.payload_length == item.len()).then_some(item)
}

pub(crate) fn child_of(item: &[u8]) -> Option<Child> {
    if item == [alloy_rlp::EMPTY_STRING_CODE] {
        return Some(Child::Empty);
    }
    // A hash (33 bytes with its header) or an inline node (a list under 32 bytes).
    let ok = (item.len() == 33 && item[0] == 0xa0) || (item[0] >= 0xc0 && item.len() < 32);
    if ok {
        NodeRef::from_item(item).map(Child::Stored)
    } else {
        None
    }
}

/// The raw items (headers included) of a node's RLP list: 2 or 17 of them, read
/// without allocating (a longer list is not a node).
pub(crate) fn node_items(mut rlp: &[u8]) -> Option<([&[u8]; 17], usize)> {
    let header = Header::decode(&mut rlp).ok()?;
    if !header.list || header.payload_length != rlp.len() {
        return None;
    }
    let mut items: [&[u8]; 17] = [&[]; 17];
    let mut n = 0;
    while !rlp.is_empty() {
        let start = rlp;
        let h = Header::decode(&mut rlp).ok()?;
        if h.payload_length > rlp.len() {
            return None;
        }
        rlp = &rlp[h.payload_length..];
        *items.get_mut(n)? = &start[..start.len() - rlp.len()];
        n += 1;
    }
    Some((items, n))
}

/// A branch whose 16 children are each empty or a hash and whose value is empty (every
/// branch of a trie of hashed keys but one with an inline child), read in one pass over
/// its bytes: the general item walk below decodes each of the 17 items' headers, and full
/// branches are most of what a large trie's update decodes. `None` for anything else,
/// which the general walk decodes; what this accepts, the walk decodes the same way.
fn decode_plain_branch(rlp: &[u8]) -> Option<Box<[Child; 16]>> {
    let mut body = rlp;
    let header = Header::decode(&mut body).ok()?;
    if !header.list || header.payload_length != body.len() {
        return None;
    }
    let mut children = empty_children();
    let mut at = 0;
    for slot in children.iter_mut() {
        match *body.get(at)? {
            alloy_rlp::EMPTY_STRING_CODE => at += 1,
            0xa0 => {
                *slot = Child::Stored(NodeRef::from_item(body.get(at..at + 33)?)?);
                at += 33;
            }
            _ => return None,
        }
    }
    (body.get(at..)? == [alloy_rlp::EMPTY_STRING_CODE]).then_some(children)
}

pub(crate) fn decode_node(rlp: &[u8]) -> Option<Node> {
    if let Some(children) = decode_plain_branch(rlp) {
        return Some(Node::Branch { children });
    }
    let (items, n) = node_items(rlp)?;
    match n {
        2 => {
            let (key, leaf) = from_compact(string_payload(items[0])?)?;
            if leaf {
                Some(Node::Leaf {
                    key,
                    value: string_payload(items[1])?.to_vec(),
                })
            } else {
                let child = child_of(items[1])?;
                (child != Child::Empty && !key.is_empty()).then_some(Node::Extension { key, child })
            }
        }
        17 => {
            let mut children = empty_children();
            for (slot, item) in children.iter_mut().zip(&items[..16]) {
                *slot = child_of(item)?;
            }
            Some(Node::Branch { children })
        }
        _ => None,
    }
}

/// A node's RLP decoded for a walk by hash (snap healing): child references are the
/// raw items of the parent (a hash with its RLP header, 33 bytes, or an inline node
/// under 32 bytes); an empty reference is an empty slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeView {
    /// Key nibbles and value.
    Leaf(Vec<u8>, Vec<u8>),
    /// Key nibbles and the child's reference.
    Extension(Vec<u8>, Vec<u8>),
    /// The 16 children's references.
    Branch(Vec<Vec<u8>>),
}

/// The node whose RLP is `rlp`; `None` for anything that is not a trie node.
pub fn view_node(rlp: &[u8]) -> Option<NodeView> {
    let child = |c: &Child| match c {
        Child::Empty => Some(Vec::new()),
        Child::Stored(r) => Some(r.as_slice().to_vec()),
        Child::Dirty => None,
    };
    Some(match decode_node(rlp)? {
        Node::Leaf { key, value } => NodeView::Leaf(key, value),
        Node::Extension { key, child: c } => NodeView::Extension(key, child(&c)?),
        Node::Branch { children } => {
            NodeView::Branch(children.iter().map(child).collect::<Option<Vec<_>>>()?)
        }
    })
}

impl NodeView {
    /// The node's RLP, the inverse of [`view_node`]: keys in hex-prefix form, child
    /// references written as given (an empty one is an empty slot), a branch's value
    /// empty. `None` for a view that is no node: a reference that is neither a hash
    /// (33 bytes with its RLP header) nor an inline node under 32 bytes, a branch
    /// without 16 children, an extension without a key or a child.
    pub fn encode(&self) -> Option<Vec<u8>> {
        let child = |r: &[u8]| {
            if r.is_empty() {
                Some(Child::Empty)
            } else {
                child_of(r)
            }
        };
        let node = match self {
            NodeView::Leaf(key, value) => Node::Leaf {
                key: key.clone(),
                value: value.clone(),
            },
            NodeView::Extension(key, c) => {
                let c = child(c)?;
                if key.is_empty() || c == Child::Empty {
                    return None;
                }
                Node::Extension {
                    key: key.clone(),
                    child: c,
                }
            }
            NodeView::Branch(children) => {
                if children.len() != 16 {
                    return None;
                }
                let mut slots = empty_children();
                for (slot, c) in slots.iter_mut().zip(children) {
                    *slot = child(c)?;
                }
                Node::Branch { children: slots }
            }
        };
        Some(encode_node(&node))
    }
}

/// The hex-prefix encoding of a path (no leaf flag), as snap/1's `GetTrieNodes` names
/// a node.
pub fn compact_path(nibbles: &[u8]) -> Vec<u8> {
    compact(nibbles, false)
}

/// A hex-prefix key, on the stack for keys of up to 64 nibbles (every key of a 32-byte
/// hashed key's trie).
enum CompactKey {
    Inline([u8; 33], usize),
    Heap(Vec<u8>),
}

impl CompactKey {
    fn new(nibbles: &[u8], leaf: bool) -> CompactKey {
        if nibbles.len() > 64 {
            return CompactKey::Heap(compact(nibbles, leaf));
        }
        let flag = if leaf { 2u8 } else { 0 };
        let mut out = [0u8; 33];
        let rest = if nibbles.len() % 2 == 1 {
            out[0] = ((flag | 1) << 4) | nibbles[0];
            &nibbles[1..]
        } else {
            out[0] = flag << 4;
            nibbles
        };
        for (slot, pair) in out[1..].iter_mut().zip(rest.chunks(2)) {
            *slot = (pair[0] << 4) | pair[1];
        }
        CompactKey::Inline(out, 1 + rest.len() / 2)
    }

    fn as_slice(&self) -> &[u8] {
        match self {
            CompactKey::Inline(bytes, len) => &bytes[..*len],
            CompactKey::Heap(v) => v,
        }
    }
}

fn child_len(child: &Child) -> usize {
    match child {
        Child::Empty => 1,
        Child::Stored(r) => r.len as usize,
        Child::Dirty => unreachable!("children are resolved before a node is encoded"),
    }
}

/// RLP of a node whose children are all resolved (no `Dirty`), in one allocation of
/// its exact size.
pub(crate) fn encode_node(node: &Node) -> Vec<u8> {
    let (key, payload_length) = match node {
        Node::Leaf { key, value } => {
            let key = CompactKey::new(key, true);
            let len = key.as_slice().length() + value.as_slice().length();
            (Some(key), len)
        }
        Node::Extension { key, child } => {
            let key = CompactKey::new(key, false);
            let len = key.as_slice().length() + child_len(child);
            (Some(key), len)
        }
        Node::Branch { children } => (None, children.iter().map(child_len).sum::<usize>() + 1),
    };
    let header = Header {
        list: true,
        payload_length,
    };
    let mut out = Vec::with_capacity(header.length() + payload_length);
    header.encode(&mut out);
    if let Some(key) = &key {
        key.as_slice().encode(&mut out);
    }
    match node {
        Node::Leaf { value, .. } => value.as_slice().encode(&mut out),
        Node::Extension { child, .. } => push_child(child, &mut out),
        Node::Branch { children } => {
            for child in children.iter() {
                push_child(child, &mut out);
            }
            out.push(alloy_rlp::EMPTY_STRING_CODE);
        }
    }
    out
}

fn push_child(child: &Child, out: &mut Vec<u8>) {
    match child {
        Child::Empty => out.push(alloy_rlp::EMPTY_STRING_CODE),
        Child::Stored(r) => out.extend_from_slice(r.as_slice()),
        Child::Dirty => unreachable!("children are resolved before a node is encoded"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The general walk alone (what `decode_node` did before the fast path).
    fn general(rlp: &[u8]) -> Option<Node> {
        let (items, n) = node_items(rlp)?;
        if n != 17 {
            return None;
        }
        let mut children = empty_children();
        for (slot, item) in children.iter_mut().zip(&items[..16]) {
            *slot = child_of(item)?;
        }
        Some(Node::Branch { children })
    }

    #[test]
    fn the_branch_fast_path_decodes_as_the_general_walk() {
        let hash = NodeRef::to_node(&[0x55; 40]);
        let inline = NodeRef::to_node(&[0xc2, 0x20, 0x01]);
        let mut x = 0x1234_5678_9abc_def1u64;
        let mut fast_taken = 0;
        for _ in 0..2000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let mut children = empty_children();
            for (i, slot) in children.iter_mut().enumerate() {
                *slot = match (x >> (i * 2)) & 3 {
                    0 | 1 => Child::Empty,
                    2 => Child::Stored(hash),
                    _ if x & (1 << 40) != 0 => Child::Stored(inline),
                    _ => Child::Stored(hash),
                };
            }
            let rlp = encode_node(&Node::Branch { children });
            let fast = decode_plain_branch(&rlp).map(|children| Node::Branch { children });
            if let Some(fast) = &fast {
                assert_eq!(Some(fast), general(&rlp).as_ref());
                fast_taken += 1;
            }
            assert_eq!(decode_node(&rlp), general(&rlp));
            // Damaged copies: whatever the fast path accepts, the walk gives the same.
            for cut in [1, 2, 33, rlp.len() / 2] {
                let short = &rlp[..rlp.len().saturating_sub(cut)];
                if let Some(children) = decode_plain_branch(short) {
                    assert_eq!(Some(Node::Branch { children }), general(short));
                }
            }
            let mut flipped = rlp.clone();
            let at = (x as usize) % flipped.len();
            flipped[at] ^= 0x20;
            if let Some(children) = decode_plain_branch(&flipped) {
                assert_eq!(Some(Node::Branch { children }), general(&flipped));
            }
        }
        // Branches of hashes only take the fast path; those with an inline child do not.
        assert!(fast_taken > 500 && fast_taken < 2000, "{fast_taken}");
    }

    /// Every node of a trie, read as a view and written again, is the same RLP: leaves,
    /// extensions and branches, children by hash and inline. Views that are no node
    /// are refused.
    #[test]
    fn a_viewed_node_encodes_back_to_its_rlp() {
        use crate::SortedBuilder;
        use alloy_primitives::B256;
        let mut keys: Vec<B256> = (0..300u64).map(|i| keccak256(i.to_be_bytes())).collect();
        // Keys sharing long prefixes (extensions), with one-byte values (inline leaves).
        for i in 0..8u8 {
            let mut k = [0x5au8; 32];
            k[31] = i;
            k[20] = i & 1;
            keys.push(B256::from(k));
        }
        keys.sort();
        let mut builder = SortedBuilder::new();
        for (i, k) in keys.iter().enumerate() {
            builder.push(k, vec![(i % 200) as u8 + 1]).unwrap();
        }
        let (_, nodes) = builder.finish();
        let mut kinds = [0usize; 3];
        for (_, rlp) in &nodes {
            let view = view_node(rlp).unwrap();
            kinds[match view {
                NodeView::Leaf(..) => 0,
                NodeView::Extension(..) => 1,
                NodeView::Branch(..) => 2,
            }] += 1;
            assert_eq!(view.encode().as_ref(), Some(rlp));
        }
        assert!(kinds.iter().all(|n| *n > 0), "{kinds:?}");
        let hash = node_ref(&[0x55; 40]);
        let mut fifteen = vec![Vec::new(); 15];
        fifteen[3] = hash.clone();
        assert_eq!(NodeView::Branch(fifteen).encode(), None);
        assert_eq!(NodeView::Extension(Vec::new(), hash.clone()).encode(), None);
        assert_eq!(NodeView::Extension(vec![1], Vec::new()).encode(), None);
        assert_eq!(NodeView::Extension(vec![1], vec![0x12; 5]).encode(), None);
        assert_eq!(
            NodeView::Extension(vec![1], [&hash[..], &[0]].concat()).encode(),
            None
        );
    }
}
