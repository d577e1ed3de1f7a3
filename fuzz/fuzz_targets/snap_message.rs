//! Every snap/1 message a peer sends (`SnapMessage::decode`), and what moat does with
//! them: a request is answered by the snap server (`SnapServer::answer`) from a small
//! chain's state, an answer's accounts go through the slim/full conversions
//! (`full_account`, `slim_account`) and its proofs through the range verifier snap sync
//! uses (`moat_trie::range::verify_range_proof`).
//!
//! The first byte picks the message id (and ids snap/1 does not have); the rest is the
//! body. A request whose root is all zeros asks for the chain's state root, and a storage
//! request's all-zero first account for the one account with storage, so the server's
//! walks are reached. Round trips: every message, and every account (slim → full → slim
//! → full gives the same full form; full → slim → full gives the input back).

#![no_main]

use alloy_primitives::{B256, keccak256};
use libfuzzer_sys::fuzz_target;
use moat_fuzz::node;
use moat_p2p::snap::{SnapMessage, SnapServer, full_account, slim_account};
use moat_trie::range::verify_range_proof;
use std::sync::OnceLock;

/// The chain's state root and the hashed address of its account with storage.
fn targets() -> &'static (B256, B256) {
    static T: OnceLock<(B256, B256)> = OnceLock::new();
    T.get_or_init(|| {
        let (chain, _) = node();
        let header = chain
            .header_by_number(0)
            .expect("the genesis header reads")
            .expect("the genesis header is there");
        let with_storage: alloy_primitives::Address = "0x2222222222222222222222222222222222222222"
            .parse()
            .unwrap();
        (header.state_root, keccak256(with_storage))
    })
}

fn server() -> &'static SnapServer {
    static S: OnceLock<SnapServer> = OnceLock::new();
    S.get_or_init(SnapServer::default)
}

fn account(bytes: &[u8]) {
    // Read as a slim account, as an AccountRange carries it.
    if let Ok(full) = full_account(bytes) {
        let slim = slim_account(&full).expect("a full account made here goes slim");
        assert_eq!(full_account(&slim).as_ref(), Ok(&full));
    }
    // Read as a full account, as the server slims it (by copy or by decoding).
    if let Ok(slim) = slim_account(bytes) {
        assert_eq!(
            full_account(&slim).as_deref(),
            Ok(bytes),
            "a slimmed account widens to other bytes"
        );
    }
}

fn answer(msg: SnapMessage) {
    let (root, storage_account) = *targets();
    let msg = match msg {
        SnapMessage::GetAccountRange {
            request_id,
            root: r,
            origin,
            limit,
            bytes,
        } => SnapMessage::GetAccountRange {
            request_id,
            root: if r.is_zero() { root } else { r },
            origin,
            limit,
            bytes,
        },
        SnapMessage::GetStorageRanges {
            request_id,
            root: r,
            mut accounts,
            origin,
            limit,
            bytes,
        } => {
            if let Some(first) = accounts.first_mut()
                && first.is_zero()
            {
                *first = storage_account;
            }
            SnapMessage::GetStorageRanges {
                request_id,
                root: if r.is_zero() { root } else { r },
                accounts,
                origin,
                limit,
                bytes,
            }
        }
        SnapMessage::GetTrieNodes {
            request_id,
            root: r,
            paths,
            bytes,
        } => SnapMessage::GetTrieNodes {
            request_id,
            root: if r.is_zero() { root } else { r },
            paths,
            bytes,
        },
        other => other,
    };
    let (chain, _) = node();
    if let Some(answer) = server().answer(chain, &msg) {
        assert!(
            msg.answered_by(&answer),
            "{} answered by {}",
            msg.name(),
            answer.name()
        );
        let enc = answer.encode();
        assert_eq!(SnapMessage::decode(answer.id(), &enc).as_ref(), Ok(&answer));
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&id, body)) = data.split_first() else {
        return;
    };
    let id = u64::from(id % 0x10);
    if id == 0x0f {
        // Bare account bodies.
        account(body);
        return;
    }
    let Ok(msg) = SnapMessage::decode(id, body) else {
        return;
    };
    let again = SnapMessage::decode(msg.id(), &msg.encode()).expect("own message decodes");
    assert_eq!(again, msg, "{} differs after a round trip", msg.name());
    match &msg {
        SnapMessage::AccountRange {
            accounts, proof, ..
        } => {
            let mut keys = Vec::new();
            let mut fulls = Vec::new();
            for (hash, slim) in accounts {
                account(slim);
                if let Ok(full) = full_account(slim) {
                    keys.push(*hash);
                    fulls.push(full);
                }
            }
            let root = proof.first().map_or(B256::ZERO, keccak256);
            let origin = keys.first().copied().unwrap_or_default();
            let _ = verify_range_proof(root, &origin, &keys, &fulls, proof);
            let _ = verify_range_proof(root, &B256::ZERO, &keys, &fulls, &[] as &[&[u8]]);
        }
        SnapMessage::StorageRanges { slots, proof, .. } => {
            let root = proof.first().map_or(B256::ZERO, keccak256);
            for account_slots in slots {
                let keys: Vec<B256> = account_slots.iter().map(|s| s.0).collect();
                let values: Vec<&[u8]> = account_slots.iter().map(|s| s.1.as_ref()).collect();
                let origin = keys.first().copied().unwrap_or_default();
                let _ = verify_range_proof(root, &origin, &keys, &values, proof);
            }
        }
        SnapMessage::TrieNodes { nodes, .. } => {
            for n in nodes {
                let _ = moat_trie::view_node(n);
            }
        }
        _ => answer(msg),
    }
});
