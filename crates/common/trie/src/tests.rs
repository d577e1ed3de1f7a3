use super::*;
use alloy_primitives::{Bytes, U256};
use proptest::prelude::*;
use std::collections::BTreeMap;

const OWNER: B256 = B256::ZERO;

fn value(v: u64) -> Vec<u8> {
    alloy_rlp::encode(U256::from(v))
}

/// The reference root: alloy-trie's builder over the whole key set.
fn reference_root(state: &BTreeMap<B256, u64>) -> B256 {
    alloy_trie::root::storage_root_unsorted(state.iter().map(|(k, v)| (*k, U256::from(*v))))
}

/// The nodes a trie built from scratch over `state` stores.
fn fresh(state: &BTreeMap<B256, u64>) -> MemoryNodes {
    let mut nodes = MemoryNodes::default();
    let mut trie = Trie::new(&nodes, OWNER);
    for (k, v) in state {
        trie.insert(k, value(*v)).unwrap();
    }
    let commit = trie.commit().unwrap();
    nodes.apply(&OWNER, &commit);
    nodes
}

/// Applies `ops` (key, Some(value) to set, None to remove) as one commit; checks the
/// root against the reference, the stored nodes against a fresh build, and that the old
/// values undo the commit exactly.
fn step(nodes: &mut MemoryNodes, state: &mut BTreeMap<B256, u64>, ops: &[(B256, Option<u64>)]) {
    let before = nodes.clone();
    let mut trie = Trie::new(&*nodes, OWNER);
    for (k, v) in ops {
        match v {
            Some(v) => {
                trie.insert(k, value(*v)).unwrap();
                state.insert(*k, *v);
            }
            None => {
                trie.remove(k).unwrap();
                state.remove(k);
            }
        }
    }
    let commit = trie.commit().unwrap();
    assert_eq!(commit.root, reference_root(state));
    nodes.apply(&OWNER, &commit);
    assert_eq!(root(&*nodes, &OWNER).unwrap(), commit.root);
    assert_eq!(
        nodes.nodes,
        fresh(state).nodes,
        "the store holds exactly the trie"
    );
    // The old values take the store back.
    let mut undone = nodes.clone();
    for w in &commit.writes {
        match &w.old {
            Some(rlp) => undone.nodes.insert((OWNER, w.path.clone()), rlp.clone()),
            None => undone.nodes.remove(&(OWNER, w.path.clone())),
        };
    }
    assert_eq!(undone.nodes, before.nodes);
}

/// Keys that share long prefixes, so that deep, short (inline) nodes appear.
fn clustered(i: u8, j: u8) -> B256 {
    let mut k = B256::repeat_byte(0xab);
    k[30] = i;
    k[31] = j;
    k
}

#[test]
fn empty_and_single_key() {
    let mut nodes = MemoryNodes::default();
    let mut state = BTreeMap::new();
    assert_eq!(root(&nodes, &OWNER).unwrap(), EMPTY_ROOT);
    step(&mut nodes, &mut state, &[(B256::repeat_byte(1), Some(5))]);
    step(&mut nodes, &mut state, &[(B256::repeat_byte(1), Some(6))]);
    step(&mut nodes, &mut state, &[(B256::repeat_byte(1), None)]);
    assert!(nodes.nodes.is_empty());
    assert_eq!(root(&nodes, &OWNER).unwrap(), EMPTY_ROOT);
}

#[test]
fn inline_nodes_deep_in_the_trie() {
    let mut nodes = MemoryNodes::default();
    let mut state = BTreeMap::new();
    let ops: Vec<_> = (0..16u8)
        .flat_map(|i| (0..4u8).map(move |j| (clustered(i, j), Some(1 + j as u64))))
        .collect();
    step(&mut nodes, &mut state, &ops);
    // Inline leaves exist (a node under 32 bytes stored at its own path).
    assert!(nodes.nodes.values().any(|rlp| rlp.len() < 32));
    let removals: Vec<_> = (0..16u8)
        .flat_map(|i| (1..4u8).map(move |j| (clustered(i, j), None)))
        .collect();
    step(&mut nodes, &mut state, &removals);
    step(&mut nodes, &mut state, &[(clustered(3, 0), None)]);
}

#[test]
fn a_wiped_trie_starts_empty() {
    let mut nodes = MemoryNodes::default();
    let mut state = BTreeMap::new();
    step(
        &mut nodes,
        &mut state,
        &[
            (B256::repeat_byte(1), Some(1)),
            (B256::repeat_byte(2), Some(2)),
        ],
    );
    let mut trie = Trie::wiped(&nodes, OWNER);
    trie.insert(&B256::repeat_byte(3), value(3)).unwrap();
    let commit = trie.commit().unwrap();
    let only: BTreeMap<B256, u64> = [(B256::repeat_byte(3), 3)].into();
    assert_eq!(commit.root, reference_root(&only));
    nodes.wipe(&OWNER);
    nodes.apply(&OWNER, &commit);
    assert_eq!(nodes.nodes, fresh(&only).nodes);
}

#[test]
fn proofs_verify_against_the_root() {
    let mut nodes = MemoryNodes::default();
    let mut state = BTreeMap::new();
    let ops: Vec<_> = (0..200u64)
        .map(|i| (keccak256(i.to_be_bytes()), Some(i + 1)))
        .chain((0..8u8).map(|j| (clustered(1, j), Some(7))))
        .collect();
    step(&mut nodes, &mut state, &ops);
    let root = root(&nodes, &OWNER).unwrap();
    for key in state
        .keys()
        .copied()
        .chain([B256::repeat_byte(0x55), clustered(1, 9)])
    {
        let proof: Vec<Bytes> = proof(&nodes, &OWNER, &key)
            .unwrap()
            .into_iter()
            .map(Bytes::from)
            .collect();
        let expected = state.get(&key).map(|v| value(*v));
        alloy_trie::proof::verify_proof(
            root,
            alloy_trie::Nibbles::unpack(key),
            expected,
            proof.iter(),
        )
        .unwrap_or_else(|e| panic!("proof of {key}: {e:?}"));
    }
}

#[test]
fn a_corrupt_node_is_an_error_not_a_panic() {
    let mut nodes = MemoryNodes::default();
    nodes.nodes.insert((OWNER, Vec::new()), vec![0xc2, 0x01]);
    let mut trie = Trie::new(&nodes, OWNER);
    assert!(matches!(
        trie.insert(&B256::repeat_byte(1), value(1)),
        Err(TrieError::Corrupt { .. })
    ));
}

fn key_strategy() -> impl Strategy<Value = B256> {
    // Half random keys, half clustered ones (long shared prefixes, inline nodes).
    prop_oneof![
        any::<[u8; 32]>().prop_map(B256::from),
        (0u8..4, 0u8..24).prop_map(|(i, j)| clustered(i, j)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Random inserts, updates and removals over several commits: every root matches
    /// alloy-trie's, the store always holds exactly the trie, and each commit's old
    /// values undo it.
    #[test]
    fn incremental_updates_match_a_full_rebuild(
        batches in proptest::collection::vec(
            proptest::collection::vec((key_strategy(), proptest::option::of(1u64..1000)), 1..40),
            1..6,
        )
    ) {
        let mut nodes = MemoryNodes::default();
        let mut state = BTreeMap::new();
        let mut known: Vec<B256> = Vec::new();
        for batch in batches {
            // Removals aim at keys that exist, half of the time.
            let ops: Vec<_> = batch
                .into_iter()
                .enumerate()
                .map(|(i, (k, v))| match (v, known.get(i * 7 % known.len().max(1))) {
                    (None, Some(existing)) if i % 2 == 0 => (*existing, None),
                    _ => (k, v),
                })
                .collect();
            known.extend(ops.iter().filter(|(_, v)| v.is_some()).map(|(k, _)| *k));
            step(&mut nodes, &mut state, &ops);
        }
    }

    /// Node decoding never panics on arbitrary bytes.
    #[test]
    fn decoding_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        let _ = decode_node(&bytes);
    }
}

/// Every node the sorted builder emits, as a map like the store's.
fn sorted_build(state: &BTreeMap<B256, u64>) -> (B256, MemoryNodes) {
    let mut builder = SortedBuilder::new();
    let mut nodes = MemoryNodes::default();
    for (k, v) in state {
        builder.push(k, value(*v)).unwrap();
        // Taking the nodes midway changes nothing.
        for (path, rlp) in builder.take_nodes() {
            assert!(
                nodes.nodes.insert((OWNER, path), rlp).is_none(),
                "a path emitted twice"
            );
        }
    }
    let (root, rest) = builder.finish();
    for (path, rlp) in rest {
        assert!(
            nodes.nodes.insert((OWNER, path), rlp).is_none(),
            "a path emitted twice"
        );
    }
    (root, nodes)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Keys drawn close together (shared prefixes, extensions, inline leaves) and far
    /// apart: the sorted build stores exactly what inserting the keys one by one does,
    /// and its root is alloy-trie's.
    #[test]
    fn sorted_build_equals_the_incremental_trie(
        keys in proptest::collection::vec((any::<[u8; 3]>(), 0u8..4, 1u64..1_000_000), 0..120)
    ) {
        let mut state = BTreeMap::new();
        for (bytes, spread, v) in keys {
            let mut k = [0u8; 32];
            // spread 0: keys differing only late (long extensions), 3: spread widely.
            let at = [29usize, 16, 2, 0][spread as usize];
            k[at..at + 3].copy_from_slice(&bytes);
            state.insert(B256::new(k), v);
        }
        let (root, nodes) = sorted_build(&state);
        prop_assert_eq!(root, reference_root(&state));
        prop_assert_eq!(nodes.nodes, fresh(&state).nodes);
    }
}

#[test]
fn sorted_build_refuses_keys_out_of_order_and_handles_tiny_tries() {
    let (root, nodes) = sorted_build(&BTreeMap::new());
    assert_eq!(root, EMPTY_ROOT);
    assert!(nodes.nodes.is_empty());
    let one: BTreeMap<B256, u64> = [(B256::repeat_byte(7), 5)].into();
    let (root, nodes) = sorted_build(&one);
    assert_eq!(root, reference_root(&one));
    assert_eq!(nodes.nodes, fresh(&one).nodes);

    let mut builder = SortedBuilder::new();
    builder.push(&B256::repeat_byte(2), value(1)).unwrap();
    assert!(builder.push(&B256::repeat_byte(2), value(1)).is_err());
    assert!(builder.push(&B256::repeat_byte(1), value(1)).is_err());
    // The refused keys left the build as it was.
    builder.push(&B256::repeat_byte(3), value(1)).unwrap();
    let two: BTreeMap<B256, u64> = [(B256::repeat_byte(2), 1), (B256::repeat_byte(3), 1)].into();
    assert_eq!(builder.finish().0, reference_root(&two));
}

/// A trie of 300 keys and one stored node below the root changed by a byte: every read
/// whose walk passes it (an update, a proof, a range walk, a point read) is an error that
/// names it, never a value read through it.
#[test]
fn a_node_that_does_not_hash_to_its_parents_reference_is_an_error() {
    let state: BTreeMap<B256, u64> = (0..300u64)
        .map(|i| (keccak256(i.to_be_bytes()), i + 1))
        .collect();
    let root_hash = reference_root(&state);
    let clean = fresh(&state);
    let key = *state.keys().nth(17).unwrap();
    let path = nibbles(&key)[..2].to_vec();
    let mut nodes = clean.clone();
    let stored = nodes.nodes.get_mut(&(OWNER, path.clone())).unwrap();
    let last = stored.len() - 2;
    stored[last] ^= 0x01;
    let corrupt =
        |e: TrieError| matches!(e, TrieError::Corrupt { reason, .. } if reason.contains("hash"));

    let mut trie = Trie::new(&nodes, OWNER).with_root(root_hash);
    assert!(corrupt(trie.insert(&key, value(9)).unwrap_err()));
    let mut trie = Trie::new(&nodes, OWNER);
    assert!(corrupt(trie.remove(&key).unwrap_err()));
    assert!(corrupt(proof(&nodes, &OWNER, &key).unwrap_err()));
    assert!(corrupt(range::get(&nodes, &OWNER, &key).unwrap_err()));
    assert!(corrupt(
        range::walk_from(&nodes, &OWNER, &B256::ZERO, |_, _| true).unwrap_err()
    ));
    // A key whose path avoids the damaged node is read and updated as before.
    let other = *state.keys().find(|k| nibbles(k)[..2] != path[..]).unwrap();
    assert!(range::get(&nodes, &OWNER, &other).unwrap().is_some());
    let mut trie = Trie::new(&nodes, OWNER).with_root(root_hash);
    trie.insert(&other, value(7)).unwrap();

    // The clean trie reads and updates under the same checks.
    let mut trie = Trie::new(&clean, OWNER).with_root(root_hash);
    trie.insert(&key, value(9)).unwrap();
    range::walk_from(&clean, &OWNER, &B256::ZERO, |_, _| true).unwrap();
}

#[test]
fn a_root_that_is_not_the_named_one_and_a_node_under_an_empty_slot_are_errors() {
    let state: BTreeMap<B256, u64> = (0..50u64)
        .map(|i| (keccak256(i.to_be_bytes()), i + 1))
        .collect();
    let nodes = fresh(&state);
    let key = *state.keys().next().unwrap();
    let mut trie = Trie::new(&nodes, OWNER).with_root(B256::repeat_byte(7));
    assert!(matches!(
        trie.insert(&key, value(1)),
        Err(TrieError::Corrupt { .. })
    ));
    // A trie said to be empty whose store holds a root.
    let mut trie = Trie::new(&nodes, OWNER).with_root(EMPTY_ROOT);
    assert!(matches!(
        trie.insert(&key, value(1)),
        Err(TrieError::Corrupt { .. })
    ));
    // A stray node at a path whose parent slot is empty (a trie of 4 keys: its root
    // branch has empty slots).
    let small: BTreeMap<B256, u64> = (0..4u64)
        .map(|i| (keccak256(i.to_be_bytes()), i + 1))
        .collect();
    let nodes = fresh(&small);
    let root_node = view_node(&nodes.nodes[&(OWNER, vec![])]).unwrap();
    let NodeView::Branch(children) = root_node else {
        panic!("these 4 keys make a root branch")
    };
    let empty = children
        .iter()
        .position(|c| c.is_empty())
        .expect("4 keys leave empty slots in a 16-slot branch");
    let mut stray = nodes.clone();
    stray.nodes.insert(
        (OWNER, vec![empty as u8]),
        nodes.nodes[&(OWNER, vec![])].clone(),
    );
    let mut key = [0u8; 32];
    key[0] = (empty as u8) << 4;
    let mut trie = Trie::new(&stray, OWNER);
    assert!(matches!(
        trie.insert(&B256::from(key), value(1)),
        Err(TrieError::Corrupt { .. })
    ));
}
