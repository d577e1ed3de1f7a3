//! The inclusion list the pool proposes (`inclusion.rs`).

use super::*;
use crate::budget::Spent;
use crate::inclusion::{MAX_BYTES_PER_INCLUSION_LIST, MinedBlock};
use std::time::Instant;

fn hashes(list: &[Bytes]) -> Vec<B256> {
    list.iter()
        .map(|b| PooledTransaction::hash_of_envelope(b).unwrap())
        .collect()
}

/// A builder censors senders c1 and c2 for three blocks that had room for them while
/// twenty others outbid them: the list, too small for everyone, holds the censored
/// senders' runs first, then the others round-robin, and never a blob tx, a queued tx, or a
/// distrusted peer's tx.
#[tokio::test]
async fn an_inclusion_list_from_a_pool_with_censored_senders_holds_them() {
    let (pool, state) = setup();
    let censored: Vec<Signer> = (0..2).map(|i| funded(&state, 900 + i)).collect();
    let rich: Vec<Signer> = (0..20).map(|i| funded(&state, 910 + i)).collect();
    for s in &censored {
        add(&pool, &tx1559(s, 0, 3, 100)).await.unwrap();
        add(&pool, &tx1559(s, 1, 3, 100)).await.unwrap();
    }
    // Three blocks with room for them pass the censored senders over; twenty richer
    // senders arrive after them.
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    for n in 101..104 {
        pool.note_mined_block(MinedBlock {
            number: n,
            base_fee: BASE_FEE,
            gas_left: 10_000_000,
            min_tip: Some(2),
            min_tip_gas: 21_000,
        });
    }
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    for s in &rich {
        add(&pool, &tx1559(s, 0, 50, 100)).await.unwrap();
    }
    // Not for a list: a queued tx, a blob tx, a poor peer's tx.
    let gapped = funded(&state, 950);
    add(&pool, &tx1559(&gapped, 5, 90, 100)).await.unwrap();
    let blobber = funded(&state, 951);
    let blob = blob_tx(&blobber, 0, 90, 100, 10);
    add(&pool, &blob).await.unwrap();
    let spammer = funded(&state, 952);
    let spam = tx1559(&spammer, 0, 90, 100);
    let id = alloy_primitives::B512::repeat_byte(0x5a);
    pool.budgets()
        .attach_peer(id, "10.0.0.1".parse().unwrap(), Instant::now());
    pool.add_transaction(raw(&spam), TxOrigin::Peer(id))
        .await
        .unwrap();
    pool.budgets().charge_peer(
        &id,
        Spent {
            cpu_us: 1,
            useful_us: 0,
            admitted: 1,
            rejected: 10_000,
        },
        Instant::now(),
    );
    assert_eq!(
        pool.budgets().standing(&id, Instant::now()),
        Standing::PeerPoor
    );

    let before = hashes(&pool.inclusion_list(MAX_BYTES_PER_INCLUSION_LIST));
    assert!(!before.contains(&blob.hash()));
    assert!(!before.contains(&spam.hash()));
    assert!(
        !before
            .iter()
            .any(|h| pool.get(h).unwrap().sender == gapped.address())
    );

    // Room for five txs: the censored senders' runs first (round-robin between them),
    // then the others'.
    let one = tx1559(&censored[0], 0, 3, 100).encoded_2718().len();
    let small = crate::inclusion::rlp_list_len(5 * (one + 3));
    let list = hashes(&pool.inclusion_list(small));
    assert_eq!(list.len(), 5, "{list:?}");
    let txs: Vec<Arc<PoolTx>> = list.iter().map(|h| pool.get(h).unwrap()).collect();
    let want: Vec<Address> = censored.iter().map(|s| s.address()).collect();
    let firsts: Vec<(Address, u64)> = txs[..4].iter().map(|t| (t.sender, t.nonce())).collect();
    assert!(
        firsts[..2].iter().all(|(s, n)| want.contains(s) && *n == 0),
        "{firsts:?}"
    );
    assert!(
        firsts[2..].iter().all(|(s, n)| want.contains(s) && *n == 1),
        "{firsts:?}"
    );
    assert!(!want.contains(&txs[4].sender), "then the others");
    // The whole list (8 KiB holds all 20 + 4 txs) has every appendable tx once.
    let all = hashes(&pool.inclusion_list(MAX_BYTES_PER_INCLUSION_LIST));
    assert_eq!(all.len(), 24);
    let encoded: usize = pool
        .inclusion_list(MAX_BYTES_PER_INCLUSION_LIST)
        .iter()
        .map(|b| b.len() + 3)
        .sum();
    assert!(crate::inclusion::rlp_list_len(encoded) <= MAX_BYTES_PER_INCLUSION_LIST);
}

/// A block passes a tx over only if the tx could pay its base fee with a tip the block
/// took, and fitted in the gas it left or beat its least tip in its place.
#[test]
fn passed_over_needs_a_payable_tx_and_room_or_a_better_tip() {
    let s = Signer::from_seed(1);
    let tx = tx1559(&s, 0, 5, 100);
    let pooled = PoolTx {
        tx,
        sender: s.address(),
        origin: TxOrigin::Local,
        added_at: Instant::now(),
        authorities: vec![],
        cost: U256::ZERO,
    };
    let block = |base_fee, gas_left, min_tip| MinedBlock {
        number: 1,
        base_fee,
        gas_left,
        min_tip,
        min_tip_gas: 21_000,
    };
    assert!(
        block(7, 21_000, Some(5)).passed_over(&pooled),
        "room, a tip that paid"
    );
    assert!(
        block(7, 21_000, None).passed_over(&pooled),
        "room in an empty block"
    );
    assert!(
        !block(7, 21_000, Some(6)).passed_over(&pooled),
        "room, but too low a tip"
    );
    assert!(
        block(7, 0, Some(4)).passed_over(&pooled),
        "beat the least tip, fits its place"
    );
    assert!(
        !block(7, 0, Some(5)).passed_over(&pooled),
        "full of tips as good"
    );
    assert!(
        !block(101, 1_000_000, None).passed_over(&pooled),
        "could not pay"
    );
}
