//! A short generated chain: it round-trips through chain.rlp's encoding and genesis.json,
//! re-imports into a fresh chain (senders recovered from the signatures, no cache) to the
//! same head, carries every kind of transaction, and comes out the same twice. The
//! options for deployments of distinct code and for contracts at genesis do what they say.

use alloy_primitives::{B256, U256};
use moat_blockchain::chain::{Chain, ImportOutcome};
use moat_chaingen::{Generator, Params, STORE_RUNTIME};
use moat_common::block::Block;
use moat_common::config::Genesis;
use moat_storage::Store;

const BLOCKS: u64 = 20;

fn params() -> Params {
    Params {
        senders: 40,
        txs_per_block: 30,
        // Enough deployments early for calls from block 2 on.
        deploy_percent: 10,
        ..Params::default()
    }
}

/// Generates `BLOCKS` blocks; returns the generator, chain.rlp's bytes and genesis.json.
fn generate() -> (Generator, Vec<u8>, String) {
    let mut g = Generator::new(params()).unwrap();
    let genesis_json = serde_json::to_string_pretty(g.genesis()).unwrap();
    let mut rlp = Vec::new();
    for _ in 0..BLOCKS {
        rlp.extend_from_slice(&g.next_block().unwrap().encode());
    }
    (g, rlp, genesis_json)
}

#[test]
fn generated_blocks_reimport_into_a_fresh_chain() {
    let (g, rlp, genesis_json) = generate();
    let (head_number, head_hash) = g.chain().head().unwrap();
    assert_eq!(head_number, BLOCKS);

    let s = g.stats();
    assert_eq!(s.blocks, BLOCKS);
    assert_eq!(s.txs, BLOCKS * 30);
    assert!(s.transfers > 0 && s.fresh_transfers > 0, "{s:?}");
    assert!(s.deployments > 0 && s.calls > 0, "{s:?}");
    assert!(
        s.slots_new > 0 && s.slots_overwritten > 0 && s.slots_zeroed > 0,
        "{s:?}"
    );

    // genesis.json as written reads back to the same genesis.
    let genesis = Genesis::from_json(&genesis_json).unwrap();
    assert_eq!(&genesis, g.genesis());
    let fresh = Chain::init(Store::in_memory(), &genesis).unwrap();
    assert_eq!(fresh.genesis_hash(), g.chain().genesis_hash());

    let blocks = Block::decode_all(&rlp).unwrap();
    assert_eq!(blocks.len() as u64, BLOCKS);
    let mut gas = 0;
    for (i, block) in blocks.iter().enumerate() {
        assert_eq!(block.header.number, i as u64 + 1);
        match fresh.import(block).unwrap() {
            ImportOutcome::Imported { gas_used, .. } => gas += gas_used,
            other => panic!("block {} not imported: {other:?}", i + 1),
        }
    }
    assert_eq!(fresh.head().unwrap(), (BLOCKS, head_hash));
    assert_eq!(gas, s.gas);
    let head = fresh.head_header().unwrap();
    assert_eq!(head.timestamp, genesis.timestamp + 12 * BLOCKS);

    // The contracts hold their runtime and storage the calls wrote.
    let store = fresh.store();
    let mut with_storage = 0;
    for (address, account) in store.accounts().unwrap() {
        if account.code_hash == alloy_primitives::keccak256(STORE_RUNTIME) {
            let slots = store.storage_slots(&address).unwrap();
            assert!(slots.iter().all(|(_, v)| *v != U256::ZERO));
            // The constructor's CALLER slot, unless a call zeroed it.
            if slots.len() > 2 {
                with_storage += 1;
            }
        }
    }
    assert!(with_storage > 0, "no contract got storage from calls");
    assert_ne!(head.state_root, B256::ZERO);
}

#[test]
fn the_same_parameters_give_the_same_chain() {
    let (a, rlp_a, _) = generate();
    let (b, rlp_b, _) = generate();
    assert_eq!(a.chain().head().unwrap(), b.chain().head().unwrap());
    assert!(rlp_a == rlp_b);
}

/// With `code_bytes`, every deployment holds a runtime of its own of that size (the store
/// contract's, then padding), and the calls to them still write storage; with
/// `genesis_contracts`, the genesis holds those contracts and their slots.
#[test]
fn deployments_of_distinct_code_and_genesis_contracts() {
    let mut g = Generator::new(Params {
        senders: 20,
        txs_per_block: 20,
        deploy_percent: 50,
        call_percent: 40,
        code_bytes: 300,
        genesis_contracts: 5,
        genesis_slots: 3,
        ..Params::default()
    })
    .unwrap();
    for _ in 0..4 {
        g.next_block().unwrap();
    }
    let store = g.chain().store();
    let (mut hashes, mut with_storage) = (std::collections::HashSet::new(), 0);
    for (address, account) in store.accounts().unwrap() {
        let Some(code) = store.code(&account.code_hash).unwrap() else {
            continue;
        };
        if code.len() == 300 {
            assert!(code.starts_with(&STORE_RUNTIME));
            assert!(hashes.insert(account.code_hash), "a code twice");
            if store.storage_slots(&address).unwrap().len() > 2 {
                with_storage += 1;
            }
        }
    }
    assert_eq!(hashes.len() as u64, g.stats().deployments);
    assert!(
        hashes.len() > 10 && with_storage > 0,
        "{hashes:?} {with_storage}"
    );

    let (address, account) = moat_chaingen::genesis_contract(2, 3);
    assert_eq!(&g.genesis().alloc[&address], &account);
    let slots = store.storage_slots(&address).unwrap();
    assert_eq!(slots.len(), 3);
    assert!(
        slots
            .iter()
            .all(|(k, v)| *v == U256::from_be_bytes(k.0) + U256::from(2)),
        "{slots:?}"
    );
}

/// The token mix: ERC-20 transfers and approvals and NFT mints all succeed (the generator
/// refuses a block with a failed tx), move token balances in their keccak-mapped slots,
/// set allowances, count and own the minted ids, and log one event each.
#[test]
fn the_token_mix_moves_balances_sets_allowances_and_mints() {
    use moat_chaingen::{NFT_ADDRESS, TOKEN_ADDRESS, contracts};
    let mut g = Generator::new(Params {
        senders: 20,
        txs_per_block: 40,
        deploy_percent: 0,
        call_percent: 0,
        token_percent: 70,
        nft_percent: 20,
        ..Params::default()
    })
    .unwrap();
    let mut logs = 0;
    let mut token_txs = 0;
    for _ in 0..5 {
        let block = g.next_block().unwrap();
        let receipts = g.chain().receipts(&block.hash).unwrap().unwrap();
        for (tx, r) in block.transactions.iter().zip(&receipts) {
            assert!(r.success);
            if let alloy_primitives::TxKind::Call(to) = tx.tx().to()
                && (to == TOKEN_ADDRESS || to == NFT_ADDRESS)
            {
                token_txs += 1;
                assert_eq!(r.logs.len(), 1, "one event a token tx");
                logs += 1;
            }
        }
    }
    let s = g.stats().clone();
    assert!(
        s.token_transfers > 0 && s.approvals > 0 && s.mints > 0,
        "{s:?}"
    );
    assert_eq!(token_txs, s.token_transfers + s.approvals + s.mints);
    assert_eq!(logs, token_txs);
    let store = g.chain().store();
    // The NFT's counter is the number of mints, and the last id has an owner.
    let counter = store.storage(&NFT_ADDRESS, &B256::ZERO).unwrap();
    assert_eq!(counter, U256::from(s.mints));
    let owner = store
        .storage(&NFT_ADDRESS, &contracts::owner_slot(s.mints))
        .unwrap();
    assert!(
        g.senders()
            .iter()
            .any(|k| U256::from_be_slice(k.address().as_slice()) == owner)
    );
    // Token: the senders' balances moved off the genesis amount, and nothing was minted.
    let genesis_balance = U256::from(1_000_000_000_000_000_000_000_000u128);
    let moved = senders_slots(&g, TOKEN_ADDRESS, contracts::balance_slot)
        .iter()
        .filter(|v| **v != genesis_balance)
        .count();
    assert!(moved > 0);
    // Some allowance was set by an approve.
    let any_allowance = g.senders().iter().any(|o| {
        g.senders().iter().any(|sp| {
            store
                .storage(
                    &TOKEN_ADDRESS,
                    &contracts::allowance_slot(&o.address(), &sp.address()),
                )
                .unwrap()
                > U256::ZERO
        })
    });
    assert!(any_allowance);
    // A call to neither function reverts (not generated; checked on the code's shape:
    // the token's runtime begins with the selector dispatch).
    assert_eq!(contracts::token_runtime()[0], 0x5f);
}

/// Each sender's value in `contract`'s slot `slot_of(sender)`, on the generator's head.
fn senders_slots(
    g: &Generator,
    contract: alloy_primitives::Address,
    slot_of: fn(&alloy_primitives::Address) -> B256,
) -> Vec<U256> {
    g.senders()
        .iter()
        .map(|k| {
            g.chain()
                .store()
                .storage(&contract, &slot_of(&k.address()))
                .unwrap()
        })
        .collect()
}

/// The AMM mix swaps through the router in two pools a tx (one `Swap` log each, both
/// reserves written, the product of the reserves never falling), records the trader's
/// volume in the router; calldata-heavy txs carry their bytes and pay EIP-7623's floor;
/// with `genesis_contract_calls` the calls write the large genesis contracts' slots.
#[test]
fn the_amm_calldata_and_storage_mix_swaps_in_two_pools_and_writes_big_contracts() {
    use moat_chaingen::{AMM_POOLS, ROUTER_ADDRESS, amm_pool_address, contracts, genesis_contract};
    let mut g = Generator::new(Params {
        senders: 20,
        txs_per_block: 40,
        deploy_percent: 0,
        call_percent: 20,
        swap_percent: 50,
        calldata_percent: 20,
        calldata_bytes: 1024,
        genesis_contracts: 2,
        genesis_slots: 1000,
        genesis_contract_calls: true,
        ..Params::default()
    })
    .unwrap();
    let (mut swap_logs, mut heavy, mut big_calls) = (0, 0, 0);
    for _ in 0..5 {
        let block = g.next_block().unwrap();
        let receipts = g.chain().receipts(&block.hash).unwrap().unwrap();
        let mut used = 0;
        for (tx, r) in block.transactions.iter().zip(&receipts) {
            assert!(r.success);
            let gas = r.cumulative_gas_used - used;
            used = r.cumulative_gas_used;
            let alloy_primitives::TxKind::Call(to) = tx.tx().to() else {
                continue;
            };
            if to == ROUTER_ADDRESS {
                assert_eq!(r.logs.len(), 2, "a Swap log from each of the two pools");
                swap_logs += r.logs.len() as u64;
            } else if tx.tx().input().len() == 1024 {
                heavy += 1;
                let zeros = tx.tx().input().iter().filter(|b| **b == 0).count() as u64;
                let tokens = zeros + 4 * (1024 - zeros);
                assert_eq!(gas, 21_000 + 10 * tokens, "EIP-7623's floor");
            } else if to == genesis_contract(0, 0).0 || to == genesis_contract(1, 0).0 {
                big_calls += 1;
            }
        }
    }
    let s = g.stats().clone();
    assert!(s.swaps > 0 && s.calldata_txs > 0 && big_calls > 0, "{s:?}");
    assert_eq!(swap_logs, 2 * s.swaps);
    assert_eq!(heavy, s.calldata_txs);
    let store = g.chain().store();
    let reserve = U256::from(1_000_000_000_000_000_000_000_000u128);
    let mut swaps_counted = U256::ZERO;
    for i in 0..AMM_POOLS {
        let pool = amm_pool_address(i);
        let r0 = store.storage(&pool, &B256::ZERO).unwrap();
        let r1 = store.storage(&pool, &B256::with_last_byte(1)).unwrap();
        assert!(
            r0 * r1 >= reserve * reserve,
            "pool {i}: the product never falls"
        );
        swaps_counted += store.storage(&pool, &B256::with_last_byte(2)).unwrap();
    }
    assert_eq!(swaps_counted, U256::from(2 * s.swaps));
    let traded = senders_slots(&g, ROUTER_ADDRESS, contracts::volume_slot)
        .iter()
        .filter(|v| **v > U256::ZERO)
        .count();
    assert!(traded > 0);
    // A genesis contract's slot 1..=1000 holds i + slot until a call writes it.
    let written = (0..2u64)
        .flat_map(|i| (1..=1000u64).map(move |slot| (i, slot)))
        .filter(|&(i, slot)| {
            store
                .storage(&genesis_contract(i, 0).0, &B256::from(U256::from(slot)))
                .unwrap()
                != U256::from(i + slot)
        })
        .count();
    assert!(written > 0, "the calls wrote the large contracts' slots");
}

/// With `holders`, the genesis funds that many keyless accounts and transfers to existing
/// accounts reach some of them: a large state the blocks really read.
#[test]
fn holders_are_funded_at_genesis_and_receive_transfers() {
    let mut g = Generator::new(Params {
        senders: 10,
        txs_per_block: 40,
        deploy_percent: 0,
        call_percent: 0,
        fresh_percent: 0,
        holders: 50,
        ..Params::default()
    })
    .unwrap();
    for _ in 0..3 {
        g.next_block().unwrap();
    }
    let one_ether = U256::from(1_000_000_000_000_000_000u128);
    let store = g.chain().store();
    let balances: Vec<U256> = (0..50)
        .map(|i| {
            let address = moat_chaingen::holder_address(i);
            assert_eq!(g.genesis().alloc[&address].balance, one_ether);
            store.account(&address).unwrap().expect("funded").balance
        })
        .collect();
    let paid = balances.iter().filter(|b| **b > one_ether).count();
    // 120 transfers to 60 known accounts, 50 of them holders.
    assert!(paid > 10, "{balances:?}");
}
