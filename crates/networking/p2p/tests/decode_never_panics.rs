//! Whatever bytes a peer sends, decoding answers with a value or an error, never a panic:
//! random payloads for every message id and version, and valid messages with bytes
//! flipped, cut off or inserted.

use alloy_primitives::{B256, Bytes};
use moat_common::TxType;
use moat_common::config::ForkId;
use moat_common::testing::sample_signed;
use moat_crypto::secp::Signer;
use moat_p2p::eth::{Announcement, EthMessage, HashOrNumber, Status};
use moat_p2p::p2p::{DisconnectReason, Hello};
use moat_p2p::session::Framing;
use proptest::prelude::*;

const VERSIONS: [u32; 3] = [68, 69, 70];

/// One valid message of each kind that carries data.
fn samples() -> Vec<EthMessage> {
    let signer = Signer::from_seed(7);
    let txs: Vec<Bytes> = [TxType::Legacy, TxType::Eip1559, TxType::Eip7702]
        .into_iter()
        .map(|ty| Bytes::from(sample_signed(ty, 3, &signer).encoded_2718()))
        .collect();
    let hashes = vec![B256::repeat_byte(1), B256::repeat_byte(2)];
    vec![
        EthMessage::Status(Status {
            version: 70,
            network_id: 1,
            genesis: B256::repeat_byte(3),
            fork_id: ForkId {
                hash: [1, 2, 3, 4],
                next: 99,
            },
            total_difficulty: Default::default(),
            head: B256::repeat_byte(4),
            earliest: 0,
            latest: 600,
        }),
        EthMessage::Transactions(txs.clone()),
        EthMessage::GetBlockHeaders {
            request_id: 9,
            origin: HashOrNumber::Hash(B256::repeat_byte(5)),
            amount: 3,
            skip: 1,
            reverse: true,
        },
        EthMessage::BlockHeaders {
            request_id: 9,
            headers: vec![Bytes::from_static(&[0xc1, 0x80])],
        },
        EthMessage::GetBlockBodies {
            request_id: 1,
            hashes: hashes.clone(),
        },
        EthMessage::NewPooledTransactionHashes(Announcement {
            types: vec![2, 3],
            sizes: vec![120, 131_000],
            hashes: hashes.clone(),
            mask: None,
            origins: vec![],
        }),
        EthMessage::GetPooledTransactions {
            request_id: 2,
            hashes: hashes.clone(),
        },
        EthMessage::PooledTransactions { request_id: 2, txs },
        EthMessage::GetReceipts {
            request_id: 3,
            first_index: 1,
            hashes,
        },
        EthMessage::Receipts {
            request_id: 3,
            incomplete: true,
            blocks: vec![Bytes::from_static(&[0xc0])],
        },
        EthMessage::BlockRangeUpdate {
            earliest: 1,
            latest: 2,
            latest_hash: B256::repeat_byte(6),
        },
    ]
}

/// Every decoder a peer's bytes can reach.
fn decode_everything(bytes: &[u8]) {
    for version in VERSIONS {
        for id in 0..=0x12 {
            let _ = EthMessage::decode(id, version, bytes);
        }
        for snappy in [false, true] {
            for snap in [false, true] {
                let _ = Framing {
                    version,
                    snap,
                    snappy,
                }
                .decode(bytes);
            }
        }
    }
    for id in 0..=8 {
        let _ = moat_p2p::snap::SnapMessage::decode(id, bytes);
    }
    let _ = Hello::decode(bytes);
    let _ = DisconnectReason::decode(bytes);
}

#[derive(Debug, Clone)]
enum Mutation {
    Flip(usize, u8),
    Cut(usize),
    Insert(usize, u8),
}

fn mutate(mut bytes: Vec<u8>, m: &Mutation) -> Vec<u8> {
    if bytes.is_empty() {
        return bytes;
    }
    match *m {
        Mutation::Flip(at, x) => {
            let i = at % bytes.len();
            bytes[i] ^= x.max(1);
        }
        Mutation::Cut(at) => bytes.truncate(at % bytes.len()),
        Mutation::Insert(at, x) => bytes.insert(at % bytes.len(), x),
    }
    bytes
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), any::<u8>()).prop_map(|(a, x)| Mutation::Flip(a, x)),
        any::<usize>().prop_map(Mutation::Cut),
        (any::<usize>(), any::<u8>()).prop_map(|(a, x)| Mutation::Insert(a, x)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
        decode_everything(&bytes);
    }

    #[test]
    fn damaged_messages_never_panic(
        which in 0usize..11,
        version in prop::sample::select(VERSIONS.to_vec()),
        snappy in any::<bool>(),
        mutations in proptest::collection::vec(mutation(), 1..4),
    ) {
        let msgs = samples();
        let msg = &msgs[which % msgs.len()];
        let framing = Framing {
            version,
            snap: true,
            snappy,
        };
        let mut body = msg.encode(version);
        let mut frame = framing.eth(msg);
        for m in &mutations {
            body = mutate(body, m);
            frame = mutate(frame, m);
        }
        let _ = EthMessage::decode(msg.id(), version, &body);
        let _ = framing.decode(&frame);
        decode_everything(&body);
    }
}

#[test]
fn the_samples_round_trip() {
    for version in VERSIONS {
        for msg in samples() {
            if version == 68 && matches!(msg, EthMessage::BlockRangeUpdate { .. }) {
                continue; // eth/69 and later
            }
            let framing = Framing {
                version,
                snap: true,
                snappy: true,
            };
            match framing.decode(&framing.eth(&msg)) {
                // Status carries per-version fields; eth/70's receipt fields do not
                // exist before it. The rest reads back as it was written.
                Ok(moat_p2p::session::Incoming::Eth(back)) => {
                    if version == 70 && !matches!(msg, EthMessage::Status(_)) {
                        assert_eq!(back, msg);
                    }
                }
                other => panic!("eth/{version} {msg:?}: {other:?}"),
            }
        }
    }
}
