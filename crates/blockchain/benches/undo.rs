//! The undo record of a 60M-gas block (the shape moat-chaingen's mainnet-like mix
//! gives at 1M accounts: ~1,500 accounts, ~1,200 slots and ~7,700 old trie nodes, ~3 MB)
//! encoded for its commit: part of every block's `commit` phase.

use alloy_primitives::{Address, B256, U256};
use criterion::{Criterion, black_box, criterion_main};
use moat_blockchain::undo::Undo;
use moat_storage::Account;

fn busy_block_record() -> Undo {
    let accounts = (0..1_500u32)
        .map(|i| {
            let account = (i % 10 != 0).then(|| Account {
                nonce: u64::from(i),
                balance: U256::from(i) * U256::from(10u64.pow(18)),
                code_hash: B256::repeat_byte(i as u8),
                storage_root: B256::repeat_byte((i >> 8) as u8),
            });
            (Address::repeat_byte(i as u8), account)
        })
        .collect();
    let slots = (0..1_200u32)
        .map(|i| {
            (
                Address::repeat_byte((i % 7) as u8),
                B256::repeat_byte(i as u8),
                U256::from(i),
            )
        })
        .collect();
    // Branches (~530 bytes) and leaves (~110 bytes) at paths of up to eight nibbles.
    let trie = (0..7_700u32)
        .map(|i| {
            let len = if i % 5 < 3 { 532 } else { 110 };
            let path = vec![(i % 16) as u8; (i % 9) as usize];
            let owner = if i % 2 == 0 {
                B256::ZERO
            } else {
                B256::repeat_byte(7)
            };
            (owner, path, (i % 50 != 0).then(|| vec![i as u8; len]))
        })
        .collect();
    Undo {
        accounts,
        slots,
        trie,
        ..Undo::default()
    }
}

fn bench_encode(c: &mut Criterion) {
    let record = busy_block_record();
    let bytes = record.encode().len();
    let mut g = c.benchmark_group("undo_record");
    g.throughput(criterion::Throughput::Bytes(bytes as u64));
    g.bench_function("encode_60m_gas_block", |b| {
        b.iter(|| black_box(&record).encode())
    });
    g.finish();
}

/// Runs every benchmark of this file with criterion's command-line configuration (what
/// `criterion_group!` would generate, written out so it can carry this doc).
fn benches() {
    let mut criterion = Criterion::default().configure_from_args();
    bench_encode(&mut criterion);
}
criterion_main!(benches);
