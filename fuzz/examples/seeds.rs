//! Writes the seed corpus of every fuzz target (`fuzz/corpus/<target>/`) from moat's own
//! encoders: valid messages, records and requests of each kind, laid out as each target
//! reads its input (see the target's overview). Run with `make fuzz-seeds`; the files are
//! small and deterministic except where a handshake seals with fresh randomness.

use alloy_primitives::{Address, B256, Bytes as Raw, U256, keccak256};
use moat_common::block::{Block, Header, Withdrawal};
use moat_common::config::ForkId;
use moat_common::testing::{sample_blob_tx, sample_signed};
use moat_common::transaction::{BlobsBundle, PooledTransaction, SidecarVersion, TxType};
use moat_discovery::enr::EnrFields;
use moat_discovery::packet::{
    Endpoint, EnrRequest, EnrResponse, FindNode, Neighbor, Neighbors, Packet, Ping, Pong,
};
use moat_discovery::{Enr, NodeRecord, node_id};
use moat_fuzz::{dev_key, engine_table, node, rpc_table};
use moat_mempool::journal_record;
use moat_p2p::eth::{self, Announcement, EthMessage, HashOrNumber, Status};
use moat_p2p::p2p::{self, Capability, DisconnectReason, Hello};
use moat_p2p::rlpx::fuzzing::{Ack, Auth, seal_eip8};
use moat_p2p::rlpx::peer_id;
use moat_p2p::session::Framing;
use moat_p2p::snap::{SnapMessage, SnapServer};
use moat_rpc::fuzzing::payload_json;
use moat_sync::snap::{Chunk, Progress, Stage};
use secp256k1::{Message, SECP256K1, SecretKey, ecdh};
use serde_json::{Value, json};
use std::net::IpAddr;
use std::path::{Path, PathBuf};

struct Corpus {
    dir: PathBuf,
    count: usize,
}

impl Corpus {
    fn new(root: &Path, target: &str) -> Self {
        let dir = root.join(target);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("corpus folder");
        Self { dir, count: 0 }
    }

    fn add(&mut self, name: &str, bytes: impl AsRef<[u8]>) {
        self.count += 1;
        let file = self.dir.join(format!("{:02}-{name}", self.count));
        std::fs::write(file, bytes).expect("seed written");
    }

    /// `head` then `rest`.
    fn add2(&mut self, name: &str, head: &[u8], rest: impl AsRef<[u8]>) {
        let mut b = head.to_vec();
        b.extend_from_slice(rest.as_ref());
        self.add(name, b);
    }
}

fn key(b: u8) -> SecretKey {
    SecretKey::from_byte_array([b; 32]).unwrap()
}

fn txs() -> Vec<(TxType, Vec<u8>)> {
    let signer = moat_crypto::secp::Signer::from_seed(7);
    [
        TxType::Legacy,
        TxType::Eip2930,
        TxType::Eip1559,
        TxType::Eip4844,
        TxType::Eip7702,
    ]
    .into_iter()
    .map(|ty| (ty, sample_signed(ty, 3, &signer).encoded_2718()))
    .collect()
}

/// Blob transactions with empty sidecars of both versions (small: no blob).
fn empty_sidecars() -> Vec<Vec<u8>> {
    let signer = moat_crypto::secp::Signer::from_seed(8);
    [SidecarVersion::V0, SidecarVersion::V1]
        .into_iter()
        .map(|v| {
            let tx = sample_blob_tx(v, 0, 1, &signer);
            let (signed, _) = tx.into_parts();
            PooledTransaction::new(signed, Some(BlobsBundle::build(v, Vec::new()).unwrap()))
                .encoded_2718()
        })
        .collect()
}

fn block() -> Block {
    let signer = moat_crypto::secp::Signer::from_seed(9);
    let (chain, _) = node();
    let genesis = chain.header_by_number(0).unwrap().unwrap();
    let mut block = Block {
        header: Header {
            parent_hash: genesis.hash(),
            ommers_hash: moat_common::constants::EMPTY_OMMERS_HASH,
            beneficiary: Address::repeat_byte(0xfe),
            state_root: genesis.state_root,
            number: 1,
            gas_limit: genesis.gas_limit,
            gas_used: 0,
            timestamp: 12,
            base_fee_per_gas: Some(7),
            blob_gas_used: Some(0),
            excess_blob_gas: Some(0),
            parent_beacon_block_root: Some(B256::repeat_byte(0xbe)),
            ..Default::default()
        },
        hash: B256::ZERO,
        transactions: vec![
            sample_signed(TxType::Eip1559, 0, &signer),
            sample_signed(TxType::Legacy, 1, &signer),
        ],
        ommers: Vec::new(),
        withdrawals: Some(vec![Withdrawal {
            index: 1,
            validator_index: 2,
            address: Address::repeat_byte(0x77),
            amount: 1000,
        }]),
    };
    block.header.transactions_root = block.transactions_root();
    block.header.withdrawals_root = block.withdrawals_root();
    block.hash = block.header.hash();
    block
}

fn tx_envelope(c: &mut Corpus) {
    for (ty, env) in txs() {
        c.add(&format!("{ty:?}"), &env);
        let mut net = Vec::new();
        moat_common::transaction::wrap_network(&env, ty, &mut net);
        c.add(&format!("{ty:?}-network"), &net);
    }
    for (i, env) in empty_sidecars().into_iter().enumerate() {
        c.add(&format!("blob-v{i}-no-blobs"), env);
    }
}

fn blob_sidecar(c: &mut Corpus) {
    // version, hashes, (same blobs), (same commitments), (proofs as due), then per blob
    // a length choice and a piece of its content, per commitment a length choice and 48
    // bytes; past the end every choice reads zero: proofs of zeros, hashes of the
    // commitments, no trailing item.
    let describe = |version: u8, n: u8| {
        let mut d = vec![version, n, 0, 0, 0];
        for i in 0..n {
            d.extend_from_slice(&[0, 4, 1, 2, 3, i]);
        }
        for i in 0..n {
            d.push(0);
            d.extend_from_slice(&[0xc0 | i; 48]);
        }
        d
    };
    c.add("v0-one-blob", describe(0, 1));
    c.add("v0-two-blobs", describe(0, 2));
    c.add("v1-one-blob", describe(2, 1));
    c.add("v0-no-blobs", describe(0, 0));
    c.add("v0-seven-blobs", describe(0, 7));
}

/// An auth from `initiator` to `recipient` as a peer makes it: the EIP-8 body, the old
/// plain body.
fn auth(recipient: &SecretKey, initiator: &SecretKey) -> (Vec<u8>, Vec<u8>) {
    let ephemeral = key(0x44);
    let nonce = B256::repeat_byte(0x45);
    let shared = ecdh::shared_secret_point(&recipient.public_key(SECP256K1), initiator);
    let msg = B256::from_slice(&shared[..32]) ^ nonce;
    let (recid, rs) = SECP256K1
        .sign_ecdsa_recoverable(Message::from_digest(msg.0), &ephemeral)
        .serialize_compact();
    let mut signature = [0u8; 65];
    signature[..64].copy_from_slice(&rs);
    signature[64] = i32::from(recid) as u8;
    let a = Auth {
        signature,
        initiator: peer_id(&initiator.public_key(SECP256K1)),
        nonce,
        version: 4,
        ephemeral_hash: None,
    };
    let mut old = signature.to_vec();
    old.extend_from_slice(keccak256(peer_id(&ephemeral.public_key(SECP256K1))).as_slice());
    old.extend_from_slice(a.initiator.as_slice());
    old.extend_from_slice(nonce.as_slice());
    old.push(0);
    (a.encode_eip8(), old)
}

fn rlpx_handshake(c: &mut Corpus) {
    // The target's keys: it is 0x41 and its peer 0x42.
    let (ours, theirs) = (key(0x41), key(0x43));
    let (eip8, old) = auth(&ours, &theirs);
    let ack = Ack {
        ephemeral: peer_id(&key(0x46).public_key(SECP256K1)),
        nonce: B256::repeat_byte(0x47),
        version: 4,
    };
    let wire = seal_eip8(&ours.public_key(SECP256K1), &eip8).unwrap();
    c.add2("raw-auth-wire", &[0, 0], &wire);
    c.add2("auth-eip8", &[1, 0], &eip8);
    c.add2("auth-eip8-chunked", &[1, 13], &eip8);
    c.add2("auth-old", &[2, 0], &old);
    c.add2("ack-eip8", &[3, 0], ack.encode_eip8());
    c.add2("ack-old", &[4, 0], ack.encode_old());
    c.add2("bodies", &[5, 0], &eip8);
}

fn rlpx_frame(c: &mut Corpus) {
    c.add("one-frame", [0, 0, 0, 5, 0x02, 0xc0, 1, 2, 3]);
    c.add(
        "two-frames-chunked",
        [3, 0, 0, 3, 0x08, 0xc1, 0x01, 0, 4, 1, 2, 3, 4],
    );
    c.add("large-frame", [0, 0, 0x80, 4, 9, 8, 7, 6]);
    let mut raw = vec![0, 0, 2];
    raw.extend_from_slice(&[0, 0, 16, 0xc2, 0x80, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    raw.push(16);
    raw.extend_from_slice(&[0x11; 16]);
    c.add("raw-frame", raw);
    c.add("limited", [0, 1, 0, 80, 0x55]);
}

fn eth_messages() -> Vec<(EthMessage, u32)> {
    let txs: Vec<Raw> = txs().into_iter().map(|(_, e)| Raw::from(e)).collect();
    let block = block();
    let status = Status {
        version: 69,
        network_id: 1337,
        genesis: B256::repeat_byte(3),
        fork_id: ForkId {
            hash: [1, 2, 3, 4],
            next: 99,
        },
        total_difficulty: U256::from(17u64),
        head: B256::repeat_byte(4),
        earliest: 0,
        latest: 600,
    };
    vec![
        (EthMessage::Status(status.clone()), 69),
        (
            EthMessage::Status(Status {
                version: 68,
                ..status
            }),
            68,
        ),
        (EthMessage::Transactions(txs.clone()), 68),
        (
            EthMessage::GetBlockHeaders {
                request_id: 1,
                origin: HashOrNumber::Number(7),
                amount: 3,
                skip: 0,
                reverse: true,
            },
            69,
        ),
        (
            EthMessage::GetBlockHeaders {
                request_id: 2,
                origin: HashOrNumber::Hash(block.hash),
                amount: 1,
                skip: 2,
                reverse: false,
            },
            70,
        ),
        (
            EthMessage::BlockHeaders {
                request_id: 3,
                headers: vec![
                    Raw::from(block.header.encoded()),
                    Raw::from(Header::default().encoded()),
                ],
            },
            69,
        ),
        (
            EthMessage::GetBlockBodies {
                request_id: 4,
                hashes: vec![block.hash],
            },
            69,
        ),
        (
            EthMessage::BlockBodies {
                request_id: 5,
                bodies: vec![Raw::from(block.encode_body())],
            },
            69,
        ),
        (
            EthMessage::NewPooledTransactionHashes(Announcement {
                types: vec![2, 3],
                sizes: vec![120, 131_300],
                hashes: vec![B256::repeat_byte(5), B256::repeat_byte(6)],
            }),
            68,
        ),
        (
            EthMessage::GetPooledTransactions {
                request_id: 6,
                hashes: vec![B256::repeat_byte(5)],
            },
            69,
        ),
        (
            EthMessage::PooledTransactions {
                request_id: 7,
                txs: empty_sidecars()
                    .into_iter()
                    .map(Raw::from)
                    .chain(txs)
                    .collect(),
            },
            70,
        ),
        (
            EthMessage::GetReceipts {
                request_id: 8,
                first_index: 2,
                hashes: vec![block.hash],
            },
            70,
        ),
        (
            EthMessage::Receipts {
                request_id: 9,
                incomplete: true,
                blocks: vec![Raw::from(vec![0xc0])],
            },
            70,
        ),
        (
            EthMessage::BlockRangeUpdate {
                earliest: 1,
                latest: 9,
                latest_hash: B256::repeat_byte(9),
            },
            69,
        ),
    ]
}

fn eth_message(c: &mut Corpus) {
    for (msg, version) in eth_messages() {
        let v = eth::SUPPORTED_VERSIONS
            .iter()
            .position(|x| *x == version)
            .unwrap() as u8;
        c.add2(msg.name(), &[msg.id() as u8, v], msg.encode(version));
    }
    c.add2("block", &[0xff, 0], block().encode());
}

fn snap_messages() -> Vec<SnapMessage> {
    vec![
        SnapMessage::GetAccountRange {
            request_id: 1,
            root: B256::ZERO,
            origin: B256::ZERO,
            limit: B256::repeat_byte(0xff),
            bytes: 50_000,
        },
        SnapMessage::GetStorageRanges {
            request_id: 2,
            root: B256::ZERO,
            accounts: vec![B256::ZERO],
            origin: B256::ZERO,
            limit: B256::repeat_byte(0xff),
            bytes: 50_000,
        },
        SnapMessage::GetByteCodes {
            request_id: 3,
            hashes: vec![keccak256([0x60, 0x01, 0x60, 0x00, 0xf3])],
            bytes: 50_000,
        },
        SnapMessage::GetTrieNodes {
            request_id: 4,
            root: B256::ZERO,
            paths: vec![vec![Raw::from(vec![0x00])], vec![Raw::from(vec![0x11])]],
            bytes: 50_000,
        },
        SnapMessage::ByteCodes {
            request_id: 5,
            codes: vec![Raw::from(vec![0x60, 0x00])],
        },
    ]
}

fn snap_message(c: &mut Corpus) {
    let (chain, _) = node();
    let server = SnapServer::default();
    let root = chain.header_by_number(0).unwrap().unwrap().state_root;
    let with_storage = keccak256(Address::repeat_byte(0x22));
    for msg in snap_messages() {
        c.add2(msg.name(), &[msg.id() as u8], msg.encode());
        // The server's answers: ranges with their proofs, codes, nodes.
        let msg = match msg {
            SnapMessage::GetAccountRange { .. } => SnapMessage::GetAccountRange {
                request_id: 1,
                root,
                origin: B256::ZERO,
                limit: B256::repeat_byte(0xff),
                bytes: 300,
            },
            SnapMessage::GetStorageRanges { .. } => SnapMessage::GetStorageRanges {
                request_id: 2,
                root,
                accounts: vec![with_storage],
                origin: B256::ZERO,
                limit: B256::repeat_byte(0xff),
                bytes: 100,
            },
            SnapMessage::GetTrieNodes { .. } => SnapMessage::GetTrieNodes {
                request_id: 4,
                root,
                paths: vec![
                    vec![Raw::from(vec![0x00])],
                    vec![with_storage.to_vec().into(), Raw::from(vec![0x00])],
                ],
                bytes: 50_000,
            },
            other => other,
        };
        if let Some(answer) = server.answer(chain, &msg) {
            c.add2(answer.name(), &[answer.id() as u8], answer.encode());
            if let SnapMessage::AccountRange { accounts, .. } = &answer
                && let Some((_, slim)) = accounts.first()
            {
                c.add2("slim-account", &[0x0f], slim);
                c.add2(
                    "full-account",
                    &[0x0f],
                    moat_p2p::snap::full_account(slim).unwrap(),
                );
            }
        }
    }
}

fn p2p_message(c: &mut Corpus) {
    let hello = Hello {
        protocol_version: 5,
        client_id: "moat/fuzz".into(),
        capabilities: vec![
            Capability::new("eth", 68),
            Capability::new("eth", 69),
            Capability::new("snap", 1),
        ],
        listen_port: 30303,
        id: peer_id(&key(5).public_key(SECP256K1)),
    };
    c.add2("hello", &[0x00], hello.encode());
    c.add2(
        "disconnect",
        &[0x30],
        DisconnectReason::TooManyPeers.encode(),
    );
    c.add2(
        "unframe-snappy",
        &[0x41],
        p2p::frame(0x12, &[0xc2, 0x01, 0x02], true),
    );
    for (msg, version) in eth_messages() {
        let v = eth::SUPPORTED_VERSIONS
            .iter()
            .position(|x| *x == version)
            .unwrap() as u8;
        for snappy in [false, true] {
            let framing = Framing {
                version,
                snap: true,
                snappy,
            };
            let flags = 0x60 | (v << 1) | 0x08 | u8::from(snappy);
            c.add2(
                &format!("{}-{snappy}", msg.name()),
                &[flags],
                framing.eth(&msg),
            );
        }
    }
    let framing = Framing {
        version: 69,
        snap: true,
        snappy: true,
    };
    for msg in snap_messages() {
        c.add2(msg.name(), &[0x60 | (1 << 1) | 0x09], framing.snap(&msg));
    }
    c.add2("ping", &[0x61], framing.ping());
}

fn discv4_packet(c: &mut Corpus) {
    let k = key(0x11);
    let enr = Enr::build(
        &key(3),
        5,
        &EnrFields {
            ip: Some(IpAddr::from([127, 0, 0, 1])),
            tcp: Some(30303),
            udp: Some(30303),
            fork_id: Some(ForkId {
                hash: [1, 2, 3, 4],
                next: 0,
            }),
        },
    )
    .unwrap();
    let ep = Endpoint {
        ip: Some(IpAddr::from([127, 0, 0, 1])),
        udp: 30303,
        tcp: 30303,
    };
    let packets = vec![
        Packet::Ping(Ping {
            version: 4,
            from: ep,
            to: ep,
            expiration: 1_900_000_000,
            enr_seq: Some(7),
        }),
        Packet::Pong(Pong {
            to: ep,
            ping_hash: B256::repeat_byte(9),
            expiration: 1_900_000_000,
            enr_seq: None,
        }),
        Packet::FindNode(FindNode {
            target: node_id(&key(4).public_key(SECP256K1)),
            expiration: 1_900_000_000,
        }),
        Packet::Neighbors(Neighbors {
            nodes: vec![Neighbor {
                ip: Some("::1".parse().unwrap()),
                udp: 1,
                tcp: 2,
                id: node_id(&key(4).public_key(SECP256K1)),
            }],
            expiration: 1_900_000_000,
        }),
        Packet::EnrRequest(EnrRequest {
            expiration: 1_900_000_000,
        }),
        Packet::EnrResponse(EnrResponse {
            request_hash: B256::repeat_byte(1),
            enr,
        }),
    ];
    for p in packets {
        let (wire, _) = p.encode(&k);
        c.add2(&format!("{:?}-raw", p.kind()), &[0], &wire);
        c.add2(&format!("{:?}-body", p.kind()), &[0x10], &wire[97..]);
    }
}

fn records() -> Vec<Enr> {
    let fork = ForkId {
        hash: [0xde, 0xad, 0xbe, 0xef],
        next: 1_700_000_000,
    };
    vec![
        Enr::build(
            &key(7),
            3,
            &EnrFields {
                ip: Some(IpAddr::from([127, 0, 0, 1])),
                tcp: Some(30303),
                udp: Some(30304),
                fork_id: Some(fork),
            },
        )
        .unwrap(),
        Enr::build(
            &key(8),
            1,
            &EnrFields {
                ip: Some("::1".parse().unwrap()),
                tcp: Some(1),
                udp: Some(2),
                fork_id: None,
            },
        )
        .unwrap(),
    ]
}

/// A record's content as the signing modes of `enr` and `discv5_enr` read it.
fn content(keys: &[u8]) -> Vec<u8> {
    let mut d = 9u64.to_be_bytes().to_vec();
    d.push(keys.len() as u8);
    for k in keys {
        d.extend_from_slice(&[*k, 0, 4, 127, 0, 0, 1]);
    }
    d
}

fn enr(c: &mut Corpus) {
    for (i, r) in records().iter().enumerate() {
        c.add2(&format!("record-{i}"), &[0], r.as_bytes());
        c.add2(&format!("text-{i}"), &[1], r.to_text());
        if let Some(node) = NodeRecord::from_enr(r.clone()) {
            c.add2(&format!("enode-{i}"), &[1], node.enode_url());
        }
    }
    // Keys by index in the target's list: ip (2), tcp (6), udp (8).
    c.add2("signed-ip", &[2], content(&[2]));
    let mut d = 1u64.to_be_bytes().to_vec();
    d.extend_from_slice(&[
        3, 2, 0, 4, 127, 0, 0, 1, 6, 1, 0, 0, 0, 0, 0, 0, 0x76, 0x5f, 8, 1,
    ]);
    d.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0x76, 0x5f]);
    c.add2("signed-ip-ports", &[2], d);
}

fn discv5_enr(c: &mut Corpus) {
    for (i, r) in records().iter().enumerate() {
        c.add2(&format!("record-{i}"), &[0], r.as_bytes());
    }
    // Keys by index in the target's list: ip (1), udp (6).
    c.add2("signed-ip", &[0x40], content(&[1]));
    let mut d = 2u64.to_be_bytes().to_vec();
    d.extend_from_slice(&[2, 1, 0, 4, 10, 0, 0, 1, 6, 1, 0x76, 0x5f]);
    c.add2("signed-ip-udp", &[0x40], d);
}

fn params(v: Value) -> Vec<u8> {
    serde_json::to_vec(&v).unwrap()
}

fn engine_params(c: &mut Corpus) {
    let (_, names) = engine_table();
    let at = |m: &str| names.iter().position(|n| *n == m).unwrap() as u8;
    let (chain, _) = node();
    let genesis = chain.header_by_number(0).unwrap().unwrap().hash();
    let block = block();
    let payload = payload_json(&block);
    let zero = B256::ZERO;
    let v4 = json!([
        payload,
        [],
        block.header.parent_beacon_block_root,
        ["0x0001"]
    ]);
    let v3 = json!([payload, [], block.header.parent_beacon_block_root]);
    let mut v2_payload = payload.clone();
    v2_payload.as_object_mut().unwrap().remove("blobGasUsed");
    v2_payload.as_object_mut().unwrap().remove("excessBlobGas");
    // Direct parser: 0x80 + version index (V1..V4).
    c.add2("parse-v4", &[0x83], params(v4.clone()));
    c.add2("parse-v3", &[0x82], params(v3.clone()));
    c.add2("parse-v2", &[0x81], params(json!([v2_payload])));
    c.add2("newPayloadV4", &[at("engine_newPayloadV4")], params(v4));
    c.add2("newPayloadV3", &[at("engine_newPayloadV3")], params(v3));
    let state =
        json!({"headBlockHash": genesis, "safeBlockHash": genesis, "finalizedBlockHash": zero});
    let attrs = json!({
        "timestamp": "0xc", "prevRandao": zero, "suggestedFeeRecipient": Address::repeat_byte(1),
        "withdrawals": [{"index": "0x0", "validatorIndex": "0x1", "address": Address::repeat_byte(2), "amount": "0x10"}],
        "parentBeaconBlockRoot": zero
    });
    c.add2(
        "fcuV3",
        &[at("engine_forkchoiceUpdatedV3")],
        params(json!([state, attrs])),
    );
    c.add2(
        "fcuV3-no-attrs",
        &[at("engine_forkchoiceUpdatedV3")],
        params(json!([state, null])),
    );
    c.add2(
        "getPayloadV4",
        &[at("engine_getPayloadV4")],
        params(json!(["0x0000000000000001"])),
    );
    let vh = format!("0x01{}", "ab".repeat(31));
    c.add2(
        "getBlobsV1",
        &[at("engine_getBlobsV1")],
        params(json!([[vh]])),
    );
    // The target's secret and clock: a token as a consensus client makes it, and claims
    // for the target to sign.
    let (secret, now) = ([0x5e; 32], 1_800_000_000u64);
    c.add2("token", &[0x70], moat_rpc::engine::make_token(&secret, now));
    c.add2("claims", &[0x78], format!(r#"{{"iat":{now}}}"#));
    c.add2(
        "exchangeCapabilities",
        &[at("engine_exchangeCapabilities")],
        params(json!([["engine_newPayloadV4"]])),
    );
}

fn typed_data() -> Value {
    json!({
        "types": {
            "EIP712Domain": [
                {"name": "name", "type": "string"}, {"name": "version", "type": "string"},
                {"name": "chainId", "type": "uint256"}, {"name": "verifyingContract", "type": "address"}
            ],
            "Person": [{"name": "name", "type": "string"}, {"name": "wallet", "type": "address"}],
            "Mail": [
                {"name": "from", "type": "Person"}, {"name": "to", "type": "Person"},
                {"name": "contents", "type": "string"}, {"name": "tags", "type": "bytes32[2]"}
            ]
        },
        "primaryType": "Mail",
        "domain": {"name": "Ether Mail", "version": "1", "chainId": 1,
                   "verifyingContract": "0xCcCCccccCCCCcCCCCCCcCcCccCcCCCcCcccccccC"},
        "message": {
            "from": {"name": "Cow", "wallet": "0xCD2a3d9F938E13CD947Ec05AbC7FE734Df8DD826"},
            "to": {"name": "Bob", "wallet": "0xbBbBBBBbbBBBbbbBbbBbbbbBBbBbbbbBbBbbBBbB"},
            "contents": "Hello, Bob!",
            "tags": [format!("0x{}", "11".repeat(32)), format!("0x{}", "22".repeat(32))]
        }
    })
}

fn rpc_params(c: &mut Corpus) {
    let (_, names) = rpc_table();
    let rich = "0x2222222222222222222222222222222222222222";
    let dev = dev_key().address();
    let tx = txs()[2].1.clone();
    let calls = [
        ("eth_getBalance", json!([rich, "latest"])),
        ("eth_getStorageAt", json!([rich, "0x1", "latest"])),
        ("eth_getProof", json!([rich, ["0x1", "0xff"], "latest"])),
        (
            "eth_call",
            json!([{"to": rich, "data": "0x", "gas": "0x5208"}, "latest", {rich: {"balance": "0x1"}}]),
        ),
        (
            "eth_estimateGas",
            json!([{"from": dev, "to": rich, "value": "0x1"}]),
        ),
        ("eth_getBlockByNumber", json!(["0x0", true])),
        (
            "eth_getLogs",
            json!([{"fromBlock": "0x0", "toBlock": "latest", "address": rich, "topics": [null, [format!("0x{}", "00".repeat(32))]]}]),
        ),
        ("eth_feeHistory", json!(["0x1", "latest", [25.0, 75.0]])),
        (
            "eth_sendRawTransaction",
            json!([alloy_primitives::hex::encode_prefixed(&tx)]),
        ),
        ("eth_signTypedData_v4", json!([dev, typed_data()])),
        ("eth_sign", json!([dev, "0xdeadbeef"])),
        (
            "eth_sendTransaction",
            json!([{"from": dev, "to": rich, "value": "0x1", "maxFeePerGas": "0x10"}]),
        ),
        (
            "eth_simulateV1",
            json!([{"blockStateCalls": [{"calls": [{"from": dev, "to": rich}]}]}, "latest"]),
        ),
        (
            "debug_traceCall",
            json!([{"to": rich}, "latest", {"tracer": "callTracer"}]),
        ),
        ("anvil_setBalance", json!([rich, "0x10"])),
        ("evm_mine", json!([{"timestamp": 100}])),
        (
            "eth_newFilter",
            json!([{"fromBlock": "earliest", "address": [rich]}]),
        ),
        (
            "eth_getTransactionByBlockNumberAndIndex",
            json!(["latest", "0x0"]),
        ),
    ];
    for (method, p) in calls {
        if let Some(i) = names.iter().position(|n| *n == method) {
            c.add2(method, &[i as u8], params(p));
        }
    }
    let raw = json!({"jsonrpc": "2.0", "id": 7, "method": "eth_sendRawTransaction",
                     "params": [alloy_primitives::hex::encode_prefixed(&tx)]});
    c.add2("raw-tx-body", &[0xe0], params(raw));
    let batch = json!([{"jsonrpc": "2.0", "id": "a", "method": "eth_chainId"}, {"jsonrpc": "2.0", "id": 2, "method": "eth_blockNumber"}]);
    c.add2("batch", &[0xed], params(batch));
    c.add2("typed-data", &[0xf4], params(typed_data()));
}

fn journal_reload(c: &mut Corpus) {
    let mut file = Vec::new();
    for (_, env) in txs() {
        file.extend_from_slice(&journal_record(&env));
    }
    file.extend_from_slice(&[0u8; 16]);
    c.add2("records", &[0], &file);
    c.add("entries", [0x80, 3, 3, 1, 2, 3, 2, 0xc0, 0x80, 1, 0xff, 0]);
    c.add("cut", [0x80, 2, 4, 1, 2, 3, 4, 4, 5, 6, 7, 8, 0xc0, 0, 9]);
}

fn store_codecs(c: &mut Corpus) {
    c.add2("number", &[0], 77u64.to_be_bytes());
    c.add2("hash", &[1], [0x11; 32]);
    c.add2("address", &[2], [0x22; 20]);
    let mut nh = 9u64.to_be_bytes().to_vec();
    nh.extend_from_slice(&[0x33; 32]);
    c.add2("number-hash", &[3], &nh);
    c.add2("meta", &[4], &nh);
    let mut account = 5u64.to_be_bytes().to_vec();
    account.extend_from_slice(&U256::from(1000u64).to_be_bytes::<32>());
    account.extend_from_slice(&[0x44; 64]);
    c.add2("account", &[5], &account);
    c.add2("slot", &[6], [0x01, 0x02]);
    let mut loc = vec![0x55; 32];
    loc.extend_from_slice(&3u64.to_be_bytes());
    loc.extend_from_slice(&1u64.to_be_bytes());
    c.add2("tx-location", &[7], &loc);
    c.add2("schema", &[8], 1u32.to_be_bytes());
    c.add2(
        "trie-key",
        &[9],
        moat_storage::trie_node_key(&B256::repeat_byte(6), &[1, 2, 3]),
    );
    let progress = Progress {
        pivot_number: 100,
        pivot_hash: B256::repeat_byte(1),
        state_root: B256::repeat_byte(2),
        stage: Stage::Storage,
        chunks: vec![Chunk {
            next: B256::repeat_byte(3),
            limit: B256::repeat_byte(4),
            done: false,
        }],
        storage_cursor: B256::repeat_byte(5),
        accounts: 1,
        slots: 2,
        codes: 3,
        bytes: 4,
        heal: true,
    };
    c.add2("progress", &[10], progress.encode());
    // A heal record: version, root, phase, task count, then owner, hash, path.
    let mut heal = vec![1];
    heal.extend_from_slice(&[7; 32]);
    heal.push(0);
    heal.extend_from_slice(&1u32.to_be_bytes());
    heal.extend_from_slice(&[8; 64]);
    heal.extend_from_slice(&[2, 1, 2]);
    c.add2("heal", &[11], heal);
}

fn main() {
    let root = PathBuf::from(std::env::args().nth(1).unwrap_or_else(|| "corpus".into()));
    let all: [(&str, fn(&mut Corpus)); 14] = [
        ("tx_envelope", tx_envelope),
        ("blob_sidecar", blob_sidecar),
        ("rlpx_handshake", rlpx_handshake),
        ("rlpx_frame", rlpx_frame),
        ("p2p_message", p2p_message),
        ("eth_message", eth_message),
        ("snap_message", snap_message),
        ("discv4_packet", discv4_packet),
        ("enr", enr),
        ("discv5_enr", discv5_enr),
        ("engine_params", engine_params),
        ("rpc_params", rpc_params),
        ("journal_reload", journal_reload),
        ("store_codecs", store_codecs),
    ];
    for (target, make) in all {
        let mut c = Corpus::new(&root, target);
        make(&mut c);
        println!("{target}: {} seeds", c.count);
    }
}
