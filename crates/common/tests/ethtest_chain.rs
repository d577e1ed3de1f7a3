//! Decodes every block and transaction of the devp2p conformance chain and checks hashes
//! and senders against the suite's own metadata.

use alloy_primitives::{Address, B256};
use moat_common::block::Block;
use moat_common::{PooledTransaction, SignedTransaction, TxType};
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;

fn testdata(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/testdata/ethtest")
        .join(name)
}

fn blocks() -> Vec<Block> {
    let bytes = std::fs::read(testdata("chain.rlp")).expect("chain.rlp is readable");
    Block::decode_all(&bytes).expect("chain.rlp decodes")
}

#[test]
fn chain_decodes_to_the_known_head() {
    let blocks = blocks();
    assert_eq!(blocks.len(), 600);
    for (i, b) in blocks.iter().enumerate() {
        assert_eq!(b.header.number, i as u64 + 1);
        if i > 0 {
            assert_eq!(b.header.parent_hash, blocks[i - 1].hash);
        }
        // Re-encoding the header reproduces the hash computed over the original bytes.
        assert_eq!(b.header.hash(), b.hash);
    }
    let head = blocks.last().unwrap();
    let expected: B256 = "0x44e3809c9a3cda717f00aea3a9da336d149612c8d5657fbc0028176ef8d94d2a"
        .parse()
        .unwrap();
    assert_eq!(head.hash, expected);
    assert_eq!(head.header.timestamp, 6000);
    assert_eq!(head.header.base_fee_per_gas, Some(7));
    assert!(head.header.requests_hash.is_some());
}

#[test]
fn every_transaction_decodes_recovers_and_matches_txinfo() {
    let info: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(testdata("txinfo.json")).unwrap()).unwrap();
    let mut expected: HashMap<B256, (Option<Address>, u64, u64)> = HashMap::new();
    for entries in info
        .as_object()
        .unwrap()
        .values()
        .filter_map(|v| v.as_array())
    {
        for e in entries {
            let hash: B256 = e["txhash"].as_str().unwrap().parse().unwrap();
            let sender = e["sender"].as_str().map(|s| s.parse().unwrap());
            let block =
                u64::from_str_radix(e["block"].as_str().unwrap().trim_start_matches("0x"), 16)
                    .unwrap();
            let index = e["indexInBlock"].as_u64().unwrap_or(0);
            expected.insert(hash, (sender, block, index));
        }
    }
    assert!(expected.len() > 300);

    let mut seen_types = HashSet::new();
    let mut checked = 0;
    let mut total = 0;
    for block in blocks() {
        for (index, tx) in block.transactions.iter().enumerate() {
            total += 1;
            seen_types.insert(tx.tx_type());
            let sender = tx
                .recover_sender()
                .expect("chain txs carry valid signatures");
            // Round trips through both forms.
            assert_eq!(
                &SignedTransaction::decode_2718(&tx.encoded_2718()).unwrap(),
                tx
            );
            assert_eq!(
                PooledTransaction::decode_2718(&tx.encoded_2718())
                    .unwrap()
                    .tx(),
                tx
            );
            if let Some((want_sender, want_block, want_index)) = expected.get(&tx.hash()) {
                if let Some(want) = want_sender {
                    assert_eq!(sender, *want, "sender of {}", tx.hash());
                }
                assert_eq!(block.header.number, *want_block);
                assert_eq!(index as u64, *want_index);
                checked += 1;
            }
        }
    }
    assert_eq!(
        checked,
        expected.len(),
        "every txinfo transaction was found in the chain"
    );
    assert!(total >= checked);
    for ty in [
        TxType::Legacy,
        TxType::Eip2930,
        TxType::Eip1559,
        TxType::Eip4844,
        TxType::Eip7702,
    ] {
        assert!(seen_types.contains(&ty), "chain has a {ty:?} transaction");
    }
}

#[test]
fn eip7702_authorization_in_chain_recovers_the_delegated_account() {
    let info: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(testdata("txinfo.json")).unwrap()).unwrap();
    let want_hash: B256 = info["tx-eip7702"]["authorizeTx"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let account: Address = info["tx-eip7702"]["account"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let proxy: Address = info["tx-eip7702"]["proxyAddr"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let tx = blocks()
        .into_iter()
        .flat_map(|b| b.transactions)
        .find(|t| t.hash() == want_hash)
        .expect("the authorize tx is in the chain");
    assert_eq!(tx.tx_type(), TxType::Eip7702);
    let auths = tx.tx().authorization_list();
    assert!(
        auths
            .iter()
            .any(|a| a.recover_authority() == Some(account) && a.address == proxy)
    );
}

#[test]
fn blocks_reencode_and_roots_match_headers() {
    let bytes = std::fs::read(testdata("chain.rlp")).unwrap();
    let mut rest = &bytes[..];
    for block in blocks() {
        let len = block.encode().len();
        assert_eq!(
            &block.encode()[..],
            &rest[..len],
            "block {} re-encodes",
            block.header.number
        );
        rest = &rest[len..];
        assert_eq!(block.transactions_root(), block.header.transactions_root);
        assert_eq!(block.withdrawals_root(), block.header.withdrawals_root);
        let again = Block::from_parts(&block.header.encoded(), &block.encode_body()).unwrap();
        assert_eq!(again, block);
    }
}
