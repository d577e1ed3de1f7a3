//! The snap stage against a served chain in process: the client's requests are answered
//! by moat's own snap/1 server over a generated chain (accounts, contracts with storage
//! and code), so what is tested is the client: verification, the writes, the trie build,
//! the pivot as head, resume from the progress record, and peers that lie.

use alloy_primitives::{B256, Bytes, keccak256};
use moat_blockchain::chain::Chain;
use moat_blockchain::state_root::{account_leaf, stored_state_root};
use moat_chaingen::{Generator, Params};
use moat_common::block::Block;
use moat_p2p::eth::HashOrNumber;
use moat_p2p::rlpx::PeerId;
use moat_p2p::snap::{SnapMessage, SnapServer};
use moat_p2p::{HeadersRequest, RequestError, SealedHeader, SyncPeer};
use moat_storage::Store;
use moat_sync::BlockSource;
use moat_sync::snap::{self, PIVOT_DISTANCE, Progress, SnapConfig, SnapError, SnapStatus, Stage};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

/// How a test peer misbehaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Honest,
    /// Changes a byte of the first account of every account range.
    Lies,
    /// Answers every snap request empty (as for a root it does not serve).
    Empty,
    /// Spoils its answers of one kind (0 account ranges, 1 storage ranges, 2 codes, 3 trie
    /// nodes) a different way each time (see `spoil`), answers the others honestly.
    Hostile(usize),
    /// Panics on the first snap request any such peer gets, answers honestly after.
    PanicsFirst,
    /// Adds one more slot list (a copy of its last) to every storage answer.
    ExtraSlotList,
}

/// Peers answering from one served chain: `modes[i]` is peer i's behaviour.
struct Served {
    chain: Chain,
    server: SnapServer,
    modes: Vec<Mode>,
    /// Snap requests answered before every further one fails (none: no limit).
    budget: Option<AtomicUsize>,
    faults: Mutex<Vec<PeerId>>,
    /// Requests answered, by kind: account ranges, storage ranges, trie nodes.
    asked: [AtomicUsize; 3],
    /// Trie-node requests answered before every further one fails.
    nodes_left: AtomicUsize,
    /// Answers hostile peers spoiled, by kind.
    spoiled: [AtomicUsize; 4],
    /// Whether a `PanicsFirst` peer panicked already.
    panicked: std::sync::atomic::AtomicBool,
}

fn peer_id(i: usize) -> PeerId {
    PeerId::from([i as u8 + 1; 64])
}

impl Served {
    fn new(chain: Chain, modes: Vec<Mode>, budget: Option<usize>) -> Arc<Self> {
        Arc::new(Self {
            chain,
            server: SnapServer::default(),
            modes,
            budget: budget.map(AtomicUsize::new),
            faults: Mutex::new(Vec::new()),
            asked: Default::default(),
            nodes_left: AtomicUsize::new(usize::MAX),
            spoiled: Default::default(),
            panicked: Default::default(),
        })
    }

    fn mode(&self, peer: &PeerId) -> Mode {
        (0..self.modes.len())
            .find(|&i| peer_id(i) == *peer)
            .map_or(Mode::Empty, |i| self.modes[i])
    }

    fn sealed(&self, hash: &B256) -> Option<SealedHeader> {
        let raw = self.chain.store().header_rlp(hash).ok()??;
        SealedHeader::decode(raw.into()).ok()
    }
}

impl BlockSource for Served {
    fn peers(&self) -> Vec<SyncPeer> {
        let head = self.chain.head().unwrap().1;
        (0..self.modes.len())
            .map(|i| SyncPeer {
                id: peer_id(i),
                eth_version: 68,
                head,
                range: None,
                in_flight: 0,
                reputation: 0,
            })
            .collect()
    }

    async fn headers(
        &self,
        _peer: PeerId,
        req: HeadersRequest,
    ) -> Result<Vec<SealedHeader>, RequestError> {
        let HashOrNumber::Hash(mut hash) = req.origin else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        while (out.len() as u64) < req.amount {
            let Some(h) = self.sealed(&hash) else { break };
            hash = h.header.parent_hash;
            let genesis = h.number() == 0;
            out.push(h);
            if genesis || !req.reverse {
                break;
            }
        }
        Ok(out)
    }

    async fn bodies(
        &self,
        _peer: PeerId,
        headers: Vec<SealedHeader>,
    ) -> Result<Vec<Block>, RequestError> {
        Ok(headers
            .iter()
            .filter_map(|h| self.chain.block(&h.hash).ok().flatten())
            .collect())
    }

    fn snap_peers(&self) -> Vec<PeerId> {
        (0..self.modes.len()).map(peer_id).collect()
    }

    async fn snap_request(
        &self,
        peer: PeerId,
        msg: SnapMessage,
    ) -> Result<SnapMessage, RequestError> {
        if let Some(b) = &self.budget
            && b.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_err()
        {
            return Err(RequestError::Disconnected);
        }
        if matches!(msg, SnapMessage::GetTrieNodes { .. })
            && self
                .nodes_left
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_err()
        {
            return Err(RequestError::Disconnected);
        }
        match msg {
            SnapMessage::GetAccountRange { .. } => self.asked[0].fetch_add(1, Ordering::SeqCst),
            SnapMessage::GetStorageRanges { .. } => self.asked[1].fetch_add(1, Ordering::SeqCst),
            SnapMessage::GetTrieNodes { .. } => self.asked[2].fetch_add(1, Ordering::SeqCst),
            _ => 0,
        };
        if self.mode(&peer) == Mode::PanicsFirst && !self.panicked.swap(true, Ordering::SeqCst) {
            panic!("the request task of a peer panics");
        }
        let kind = match msg {
            SnapMessage::GetAccountRange { .. } => 0,
            SnapMessage::GetStorageRanges { .. } => 1,
            SnapMessage::GetTrieNodes { .. } => 3,
            _ => 2,
        };
        let spoiling = self.mode(&peer) == Mode::Hostile(kind);
        let n = self.spoiled[kind].load(Ordering::SeqCst);
        let answer = match (self.mode(&peer), &msg) {
            (Mode::Empty, _) => moat_p2p::snap::empty_answer(&msg),
            // An answer for another root (the head's).
            (_, SnapMessage::GetAccountRange { .. }) if spoiling && n % 5 == 4 => {
                let head = self.chain.head().unwrap().1;
                let root = self.chain.header(&head).unwrap().unwrap().state_root;
                let SnapMessage::GetAccountRange {
                    request_id,
                    origin,
                    limit,
                    bytes,
                    ..
                } = msg.clone()
                else {
                    unreachable!()
                };
                let other = SnapMessage::GetAccountRange {
                    request_id,
                    root,
                    origin,
                    limit,
                    bytes,
                };
                self.server.answer(&self.chain, &other)
            }
            _ => self.server.answer(&self.chain, &msg),
        };
        let mut answer = answer.ok_or(RequestError::Timeout)?;
        if spoiling {
            spoil(
                &mut answer,
                self.spoiled[kind].fetch_add(1, Ordering::SeqCst),
            );
        }
        // A whole answer (every account asked, no proof) and one list more.
        if self.mode(&peer) == Mode::ExtraSlotList
            && let SnapMessage::GetStorageRanges { accounts, .. } = &msg
            && let SnapMessage::StorageRanges { slots, proof, .. } = &mut answer
            && slots.len() == accounts.len()
            && proof.is_empty()
            && let Some(last) = slots.last().cloned()
        {
            self.spoiled[1].fetch_add(1, Ordering::SeqCst);
            slots.push(last);
        }
        if self.mode(&peer) == Mode::Lies
            && let SnapMessage::AccountRange { accounts, .. } = &mut answer
            && let Some((_, slim)) = accounts.first_mut()
        {
            let mut v = slim.to_vec();
            let last = v.len() - 1;
            v[last] ^= 1;
            *slim = Bytes::from(v);
        }
        Ok(answer)
    }

    fn report_snap_fault(&self, peer: &PeerId, _why: &str) {
        self.faults.lock().push(*peer);
    }
}

/// Spoils answer number `n` of a hostile peer: accounts out of order, twice or left out
/// under their proof, garbage proof nodes, more slot lists than accounts asked, slots of
/// one account for another, a slot value empty or over 32 bytes, codes not asked for,
/// twice, altered or empty, trie nodes altered, out of order or more than asked.
fn spoil(answer: &mut SnapMessage, n: usize) {
    let garbage = Bytes::from(vec![0xc2, 0x80, 0x80]);
    match answer {
        SnapMessage::AccountRange {
            accounts, proof, ..
        } => match n % 5 {
            0 => accounts.reverse(),
            1 => {
                if let Some(a) = accounts.first().cloned() {
                    accounts.push(a);
                }
            }
            2 => {
                proof.push(garbage);
                if let Some(p) = proof.first_mut() {
                    *p = Bytes::from(vec![0xff; 40]);
                }
            }
            3 => accounts.clear(),
            _ => {}
        },
        SnapMessage::StorageRanges { slots, proof, .. } => match n % 5 {
            0 => slots.push(vec![(B256::repeat_byte(0xff), Bytes::from(vec![1]))]),
            1 => {
                if slots.len() > 1 {
                    slots.swap(0, 1);
                } else if let Some(first) = slots.first_mut() {
                    first.insert(0, (B256::ZERO, Bytes::from(vec![0x01])));
                }
            }
            2 => {
                if let Some(s) = slots.first_mut().and_then(|s| s.first_mut()) {
                    s.1 = Bytes::new();
                }
            }
            3 => {
                if let Some(s) = slots.first_mut().and_then(|s| s.first_mut()) {
                    s.1 = Bytes::from([vec![0xa1], vec![0x11; 33]].concat());
                }
            }
            _ => {
                proof.clear();
                proof.push(garbage);
                slots.push(Vec::new());
            }
        },
        SnapMessage::ByteCodes { codes, .. } => match n % 5 {
            0 => codes.push(Bytes::from(vec![0x60, 0x00])),
            1 => {
                if let Some(c) = codes.first().cloned() {
                    codes.push(c);
                }
            }
            2 => {
                if let Some(c) = codes.first_mut() {
                    let mut v = c.to_vec();
                    v.push(0);
                    *c = Bytes::from(v);
                }
            }
            3 => codes.push(Bytes::new()),
            _ => codes.insert(0, Bytes::from(vec![0x5b; 1 << 16])),
        },
        SnapMessage::TrieNodes { nodes, .. } if !nodes.is_empty() => match n % 3 {
            // A node altered, the nodes out of order, one more than asked.
            0 => {
                let mut v = nodes[0].to_vec();
                v[1] ^= 1;
                nodes[0] = Bytes::from(v);
            }
            1 if nodes.len() > 1 => nodes.swap(0, 1),
            _ => nodes.extend(std::iter::repeat_n(Bytes::from(vec![0xc0]), 200)),
        },
        _ => {}
    }
}

/// A generated chain (accounts, contracts with storage and code): its generator, built
/// once for every test.
fn served_chain() -> &'static Chain {
    static CHAIN: OnceLock<Chain> = OnceLock::new();
    CHAIN.get_or_init(|| {
        let mut g = Generator::new(Params {
            senders: 3_000,
            txs_per_block: 40,
            deploy_percent: 25,
            call_percent: 35,
            fresh_percent: 60,
            ..Params::default()
        })
        .unwrap();
        for _ in 0..PIVOT_DISTANCE + 6 {
            g.next_block().unwrap();
        }
        g.chain().clone()
    })
}

/// A fresh node's chain on the same genesis.
fn fresh() -> Chain {
    let served = served_chain();
    // The generator's genesis is rebuilt from the same parameters.
    let g = Generator::new(Params {
        senders: 3_000,
        ..Params::default()
    })
    .unwrap();
    let chain = Chain::init(Store::in_memory(), g.genesis()).unwrap();
    assert_eq!(chain.genesis_hash(), served.genesis_hash());
    chain
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn cfg() -> SnapConfig {
    SnapConfig {
        // Small answers: many requests, every chunk paged.
        response_bytes: 16 * 1024,
        give_up_after: std::time::Duration::from_secs(3),
        // Few accounts per storage request: several requests even for this state.
        storage_batch: 4,
        ..SnapConfig::default()
    }
}

/// A snap sync of `client` from `source` towards the served head.
fn sync(client: &Chain, source: &Arc<Served>, cfg: &SnapConfig) -> Result<(), SnapError> {
    let target = served_chain().head().unwrap().1;
    sync_to(&runtime(), client, source, target, cfg)
}

/// A snap sync of `client` from `source` towards `target`, on `rt`.
fn sync_to(
    rt: &tokio::runtime::Runtime,
    client: &Chain,
    source: &Arc<Served>,
    target: B256,
    cfg: &SnapConfig,
) -> Result<(), SnapError> {
    rt.block_on(snap::run(
        client,
        source,
        target,
        cfg,
        &SnapStatus::default(),
    ))
}

/// A snap sync as [`sync_to`], returning the distinct figures it published.
fn sync_watched(
    rt: &tokio::runtime::Runtime,
    client: &Chain,
    source: &Arc<Served>,
    target: B256,
    cfg: &SnapConfig,
) -> Vec<snap::SnapFigures> {
    let status = SnapStatus::default();
    let watch = status.clone();
    rt.block_on(async {
        let mut seen: Vec<snap::SnapFigures> = Vec::new();
        let run = snap::run(client, source, target, cfg, &status);
        tokio::pin!(run);
        loop {
            tokio::select! {
                r = &mut run => { r.unwrap(); return seen; }
                _ = tokio::time::sleep(std::time::Duration::from_millis(1)) => {
                    if let Some(f) = *watch.lock()
                        && seen.last() != Some(&f)
                    {
                        seen.push(f);
                    }
                }
            }
        }
    })
}

/// The pivot the client must take: 64 below the served head.
fn pivot() -> (u64, B256) {
    let served = served_chain();
    let (head, _) = served.head().unwrap();
    let n = head - PIVOT_DISTANCE;
    (n, served.store().canonical_hash(n).unwrap().unwrap())
}

/// The client's state equals the server's state at the pivot, read through the store.
fn assert_state_at_pivot(client: &Chain) {
    let (n, hash) = pivot();
    assert_eq!(client.head().unwrap(), (n, hash));
    let header = client.header(&hash).unwrap().unwrap();
    assert_eq!(
        stored_state_root(client.store()).unwrap(),
        header.state_root
    );
    assert!(
        client.block(&hash).unwrap().is_some(),
        "the pivot's body is stored"
    );
    assert!(
        client.store().snap_progress().unwrap().is_none(),
        "record removed"
    );
    // Every contract's code by hash.
    let mut codes = 0;
    client
        .store()
        .snap_accounts_from(&B256::ZERO, |_, a| {
            if a.code_hash != alloy_primitives::KECCAK256_EMPTY {
                let code = client.store().code(&a.code_hash).unwrap().unwrap();
                assert_eq!(keccak256(&code), a.code_hash);
                codes += 1;
            }
            true
        })
        .unwrap();
    assert!(codes > 10, "{codes} contracts");
}

#[test]
fn a_fresh_node_downloads_the_pivot_state_and_takes_the_pivot_as_head() {
    let served = served_chain();
    let client = fresh();
    let source = Served::new(served.clone(), vec![Mode::Honest; 3], None);
    let status = SnapStatus::default();
    let target = served.head().unwrap().1;
    runtime()
        .block_on(snap::run(&client, &source, target, &cfg(), &status))
        .unwrap();
    assert_state_at_pivot(&client);
    assert!(status.lock().is_none(), "figures cleared when done");
    assert!(source.faults.lock().is_empty());
}

#[test]
fn a_peer_with_bad_proofs_is_reported_and_the_others_finish_the_sync() {
    let served = served_chain();
    let client = fresh();
    let source = Served::new(
        served.clone(),
        vec![Mode::Lies, Mode::Honest, Mode::Empty],
        None,
    );
    sync(&client, &source, &cfg()).unwrap();
    assert_state_at_pivot(&client);
    let faults = source.faults.lock();
    assert!(!faults.is_empty());
    assert!(
        faults.iter().all(|p| *p == peer_id(0)),
        "only the liar is reported"
    );
}

#[test]
fn a_hostile_peer_cannot_panic_stall_or_write_into_the_sync() {
    let served = served_chain();
    let client = fresh();
    // Hostile peers (each rested after a fault) asked before the honest one: the
    // spoiled answers go through every kind of spoiling.
    let mut modes: Vec<Mode> = (0..15).map(|i| Mode::Hostile(2 - i / 5)).collect();
    modes.push(Mode::Honest);
    let source = Served::new(served.clone(), modes, None);
    sync(&client, &source, &cfg()).unwrap();
    // The state built is the pivot's (every account and slot proven, every code by
    // hash), whatever the hostile peer sent.
    assert_state_at_pivot(&client);
    // Account ranges, storage ranges and codes (no trie nodes without a pivot move).
    let spoiled: Vec<usize> = source.spoiled[..3]
        .iter()
        .map(|n| n.load(Ordering::SeqCst))
        .collect();
    assert!(
        spoiled.iter().all(|&n| n >= 5),
        "{spoiled:?} answers spoiled"
    );
    let faults = source.faults.lock();
    assert!(faults.len() >= 10, "{} faults", faults.len());
    assert!(
        !faults.contains(&peer_id(15)),
        "only the hostile peers are reported"
    );
}

#[test]
fn peers_answering_empty_do_not_make_a_served_pivot_stale() {
    let served = served_chain();
    let client = fresh();
    // Many peers that answer empty, asked before the one that serves the pivot.
    let mut modes = vec![Mode::Empty; 40];
    modes.push(Mode::Honest);
    let source = Served::new(served.clone(), modes, None);
    sync(&client, &source, &cfg()).unwrap();
    assert_state_at_pivot(&client);
}

#[test]
fn a_request_whose_task_panics_is_asked_again() {
    let served = served_chain();
    let client = fresh();
    let source = Served::new(served.clone(), vec![Mode::PanicsFirst], None);
    sync(&client, &source, &cfg()).unwrap();
    assert!(source.panicked.load(Ordering::SeqCst));
    assert_state_at_pivot(&client);
}

#[test]
fn a_pivot_no_peer_serves_is_stale() {
    let served = served_chain();
    let client = fresh();
    let source = Served::new(served.clone(), vec![Mode::Empty; 2], None);
    let cfg = SnapConfig {
        give_up_after: std::time::Duration::from_secs(30),
        ..cfg()
    };
    let started = std::time::Instant::now();
    let err = sync(&client, &source, &cfg);
    assert!(matches!(err, Err(SnapError::Stale)), "{err:?}");
    assert!(started.elapsed() < std::time::Duration::from_secs(20));
    assert!(source.faults.lock().is_empty());
}

#[test]
fn a_sync_cut_short_resumes_from_its_record() {
    let served = served_chain();
    let client = fresh();
    let target = served.head().unwrap().1;
    // The peers go away after 10 answers: the stage fails without peers.
    let cut = Served::new(served.clone(), vec![Mode::Honest; 2], Some(10));
    let rt = runtime();
    let cfg = cfg();
    let err = rt.block_on(async {
        tokio::time::timeout(
            std::time::Duration::from_secs(120),
            snap::run(&client, &cut, target, &cfg, &SnapStatus::default()),
        )
        .await
    });
    assert!(matches!(err, Ok(Err(SnapError::NoPeers))), "{err:?}");
    let record = client.store().snap_progress().unwrap().unwrap();
    let before = Progress::decode(&record).unwrap();
    assert_eq!(before.stage, Stage::Accounts);
    assert!(before.accounts > 0);
    assert_eq!(before.pivot_hash, pivot().1);

    let source = Served::new(served.clone(), vec![Mode::Honest; 2], None);
    let status = SnapStatus::default();
    let watch = status.clone();
    let seen = rt.block_on(async {
        let mut seen = false;
        let run = snap::run(&client, &source, target, &cfg, &status);
        tokio::pin!(run);
        // The first figures published say the sync took up the record.
        loop {
            tokio::select! {
                r = &mut run => { r.unwrap(); break seen; }
                _ = tokio::time::sleep(std::time::Duration::from_millis(1)) => {
                    if let Some(f) = *watch.lock() {
                        assert!(f.resumed);
                        assert!(f.accounts >= before.accounts);
                        seen = true;
                    }
                }
            }
        }
    });
    assert!(seen, "no figures published while resuming");
    assert_state_at_pivot(&client);
}

/// A fresh client of `served`'s genesis (`fresh`) whose download towards `target` was
/// cut in its storage stage after `share` (numerator, denominator) of the storage
/// requests a whole download asks, and whose pivot then went stale (as the syncer marks
/// it); also that cut download's record (its state root is the old pivot's).
fn cut_in_storage_and_stale(
    rt: &tokio::runtime::Runtime,
    served: &Chain,
    fresh: impl Fn() -> Chain,
    target: B256,
    cfg: &SnapConfig,
    share: (usize, usize),
) -> (Chain, Progress) {
    // What a whole download of the pivot asks.
    let baseline = Served::new(served.clone(), vec![Mode::Honest], None);
    sync_to(rt, &fresh(), &baseline, target, cfg).unwrap();
    let accounts_asked = baseline.asked[0].load(Ordering::SeqCst);
    let storage_asked = baseline.asked[1].load(Ordering::SeqCst);
    assert!(storage_asked >= 4, "{storage_asked} storage requests");
    // The accounts and part of the storage, then the peer is gone.
    let client = fresh();
    let budget = accounts_asked + storage_asked * share.0 / share.1;
    let cut = Served::new(served.clone(), vec![Mode::Honest], Some(budget));
    let err = sync_to(rt, &client, &cut, target, cfg);
    assert!(matches!(err, Err(SnapError::NoPeers)), "{err:?}");
    let record = Progress::decode(&client.store().snap_progress().unwrap().unwrap()).unwrap();
    assert_eq!(record.stage, Stage::Storage);
    (client, record)
}

/// Marks the pivot of `client`'s record stale, as the syncer does.
fn mark_stale(client: &Chain, mut record: Progress) {
    record.pivot_hash = B256::ZERO;
    let mut batch = moat_storage::WriteBatch::new();
    batch.set_snap_progress(Some(record.encode()));
    client.store().commit(batch).unwrap();
}

/// `client`'s head is `served`'s block `pivot`, with its state root stored.
fn assert_head_at(client: &Chain, served: &Chain, pivot: u64) {
    let hash = served.store().canonical_hash(pivot).unwrap().unwrap();
    assert_eq!(client.head().unwrap(), (pivot, hash));
    let header = client.header(&hash).unwrap().unwrap();
    assert_eq!(
        stored_state_root(client.store()).unwrap(),
        header.state_root
    );
}

#[test]
fn a_new_pivot_keeps_the_storage_tries_that_still_prove_out() {
    let served = served_chain();
    let rt = runtime();
    let cfg = cfg();
    let target = served.head().unwrap().1;
    // A download cut in its storage stage, whose pivot then goes stale.
    let (client, record) = cut_in_storage_and_stale(&rt, served, fresh, target, &cfg, (1, 2));
    mark_stale(&client, record);

    // The new target is one block lower: its pivot is one block lower too.
    let (head, _) = served.head().unwrap();
    let new_target = served.store().canonical_hash(head - 1).unwrap().unwrap();
    let source = Served::new(served.clone(), vec![Mode::Honest], None);
    sync_to(&rt, &client, &source, new_target, &cfg).unwrap();
    assert_head_at(&client, served, head - 1 - PIVOT_DISTANCE);
    // The accounts held are not asked again (the pivot moved back a block: accounts
    // and storage of its last block are healed away); the storage tries held that still
    // prove out are not asked again, the rest is asked or healed.
    assert_eq!(source.asked[0].load(Ordering::SeqCst), 0);
    assert!(source.asked[2].load(Ordering::SeqCst) > 0);
    assert!(source.faults.lock().is_empty(), "no honest peer blamed");
}

/// Every account of the state at `root` as `served` answers account ranges: (hashed
/// address, slim account RLP) in key order.
fn served_accounts(served: &Served, root: B256) -> Vec<(B256, Bytes)> {
    let mut out: Vec<(B256, Bytes)> = Vec::new();
    let mut origin = B256::ZERO;
    for _ in 0..1000 {
        let msg = SnapMessage::GetAccountRange {
            request_id: 1,
            root,
            origin,
            limit: B256::repeat_byte(0xff),
            bytes: 1 << 30,
        };
        let Some(SnapMessage::AccountRange { accounts, .. }) =
            served.server.answer(&served.chain, &msg)
        else {
            panic!("no account range");
        };
        let Some(last) = accounts.last().map(|a| a.0) else {
            return out;
        };
        out.extend(accounts);
        let next = alloy_primitives::U256::from_be_bytes(last.0) + alloy_primitives::U256::from(1);
        origin = B256::from(next.to_be_bytes());
    }
    panic!("account ranges do not end");
}

/// A chain of its own, the client's download of its state cut in the storage stage,
/// then 20 more blocks and the client's pivot marked stale: (the generator, the
/// client, the first pivot's state root).
fn moved_pivot(rt: &tokio::runtime::Runtime, cfg: &SnapConfig) -> (Generator, Chain, B256) {
    let params = || Params {
        senders: 3_000,
        txs_per_block: 40,
        deploy_percent: 25,
        call_percent: 35,
        fresh_percent: 60,
        ..Params::default()
    };
    let mut g = Generator::new(params()).unwrap();
    for _ in 0..PIVOT_DISTANCE + 6 {
        g.next_block().unwrap();
    }
    let served = g.chain().clone();
    let target = served.head().unwrap().1;
    let fresh = || Chain::init(Store::in_memory(), g.genesis()).unwrap();
    let (client, record) = cut_in_storage_and_stale(rt, &served, fresh, target, cfg, (1, 2));
    let old_root = record.state_root;

    // The chain goes on: blocks that change balances, nonces, storage and deploy code.
    for _ in 0..20 {
        g.next_block().unwrap();
    }
    // The pivot goes stale.
    mark_stale(&client, record);
    (g, client, old_root)
}

#[test]
fn a_moved_pivot_is_healed_without_downloading_the_accounts_again() {
    let rt = runtime();
    let cfg = cfg();
    let (g, client, old_root) = moved_pivot(&rt, &cfg);
    let served = g.chain().clone();
    let new_target = served.head().unwrap().1;
    // Healing cut short after 20 answers (a node killed while healing)...
    let cut = Served::new(served.clone(), vec![Mode::Honest; 2], None);
    cut.nodes_left.store(20, Ordering::SeqCst);
    let err = sync_to(&rt, &client, &cut, new_target, &cfg);
    assert!(matches!(err, Err(SnapError::NoPeers)), "{err:?}");
    let cut_record = Progress::decode(&client.store().snap_progress().unwrap().unwrap()).unwrap();
    assert_eq!((cut_record.stage, cut_record.heal), (Stage::Tries, true));
    assert_eq!(cut.asked[2].load(Ordering::SeqCst), 20);
    assert_eq!(cut.asked[0].load(Ordering::SeqCst), 0);
    // ...resumes from healing's record, healing's figures published as it goes.
    let source = Served::new(served.clone(), vec![Mode::Honest; 2], None);
    let seen = sync_watched(&rt, &client, &source, new_target, &cfg);
    let healing: Vec<snap::HealFigures> = seen.iter().map(|f| f.heal).collect();
    assert!(
        healing.iter().any(|h| h.pending_nodes > 0),
        "nodes left to heal shown"
    );
    assert!(
        healing.windows(2).all(|w| w[0].nodes <= w[1].nodes),
        "healed nodes only grow"
    );
    let last = healing.last().copied().unwrap_or_default();
    assert!(
        last.nodes > 0 && last.node_bytes > 32 * last.nodes,
        "{last:?}"
    );
    assert!(
        last.nodes <= 128 * source.asked[2].load(Ordering::SeqCst) as u64,
        "no more nodes counted than asked"
    );
    assert_eq!(source.asked[0].load(Ordering::SeqCst), 0);
    assert!(source.faults.lock().is_empty(), "no honest peer blamed");
    assert_healed(&source, &client, old_root);
}

#[test]
fn a_peer_sending_other_trie_nodes_is_reported_and_healing_goes_on() {
    let rt = runtime();
    let cfg = cfg();
    let (g, client, old_root) = moved_pivot(&rt, &cfg);
    let served = g.chain().clone();
    let new_target = served.head().unwrap().1;
    let source = Served::new(served.clone(), vec![Mode::Hostile(3), Mode::Honest], None);
    sync_to(&rt, &client, &source, new_target, &cfg).unwrap();
    assert!(source.spoiled[3].load(Ordering::SeqCst) > 0);
    let faults = source.faults.lock().clone();
    assert!(!faults.is_empty());
    assert!(
        faults.iter().all(|p| *p == peer_id(0)),
        "only the hostile peer"
    );
    assert_healed(&source, &client, old_root);
}

/// The client's head is the served chain's new pivot, its state that pivot's (root,
/// flat accounts one for one with the server's, codes), reached with trie nodes.
fn assert_healed(source: &Served, client: &Chain, old_root: B256) {
    let served = &source.chain;
    let (head, _) = served.head().unwrap();
    let pivot = head - PIVOT_DISTANCE;
    let hash = served.store().canonical_hash(pivot).unwrap().unwrap();
    assert_eq!(client.head().unwrap(), (pivot, hash));
    let root = served.header(&hash).unwrap().unwrap().state_root;
    assert_ne!(root, old_root, "the state changed between the pivots");
    assert_eq!(stored_state_root(client.store()).unwrap(), root);
    assert!(client.store().snap_progress().unwrap().is_none());
    // The difference came as trie nodes.
    assert!(source.asked[2].load(Ordering::SeqCst) > 0);
    // The downloaded accounts are the server's at the new pivot, one for one.
    let mut held = Vec::new();
    client
        .store()
        .snap_accounts_from(&B256::ZERO, |h, a| {
            held.push((
                h,
                Bytes::from(moat_p2p::snap::slim_account(&account_leaf(&a)).unwrap()),
            ));
            true
        })
        .unwrap();
    let want = served_accounts(source, root);
    assert!(want.len() > 3_000, "{} accounts", want.len());
    assert_eq!(held.len(), want.len());
    assert!(held == want, "the flat accounts differ from the server's");
    // Every contract's code, and every account's slots as the server gives them.
    let mut with_storage = 0;
    for (hash, slim) in &held {
        let full = moat_p2p::snap::full_account(slim).unwrap();
        let code_hash = B256::from_slice(&full[full.len() - 32..]);
        if code_hash != alloy_primitives::KECCAK256_EMPTY {
            assert!(client.store().code(&code_hash).unwrap().is_some());
        }
        let msg = SnapMessage::GetStorageRanges {
            request_id: 1,
            root,
            accounts: vec![*hash],
            origin: B256::ZERO,
            limit: B256::repeat_byte(0xff),
            bytes: 1 << 30,
        };
        let Some(SnapMessage::StorageRanges { slots, proof, .. }) =
            source.server.answer(&source.chain, &msg)
        else {
            panic!("no storage range");
        };
        assert!(proof.is_empty(), "a whole storage trie in one answer");
        let want: Vec<(B256, Bytes)> = slots.into_iter().next().unwrap_or_default();
        let mut got = Vec::new();
        client
            .store()
            .snap_slots_of(hash, |slot, value| {
                got.push((slot, Bytes::from(alloy_rlp::encode(value))));
            })
            .unwrap();
        assert_eq!(got, want, "slots of {hash}");
        with_storage += usize::from(!got.is_empty());
    }
    assert!(with_storage > 10, "{with_storage} accounts with storage");
}

/// After a pivot move, a peer whose storage answers carry more slot lists than accounts
/// asked is survived: the answer is checked list by list against the accounts asked
/// only (a list past them once made the sync index past its accounts and panic), and
/// the sync ends at the new pivot's root.
#[test]
fn a_peer_sending_extra_slot_lists_after_a_pivot_move_cannot_panic_the_sync() {
    let served = served_chain();
    let rt = runtime();
    let cfg = cfg();
    let target = served.head().unwrap().1;
    // A download cut early in its storage stage, whose pivot then goes stale.
    let (client, record) = cut_in_storage_and_stale(&rt, served, fresh, target, &cfg, (1, 4));
    mark_stale(&client, record);
    // The new pivot is one block lower: most storage tries are the same at both, so
    // whole answers with a list too many come back from the peers that add one.
    let (head, _) = served.head().unwrap();
    let new_target = served.store().canonical_hash(head - 1).unwrap().unwrap();
    let mut modes = vec![Mode::ExtraSlotList; 4];
    modes.push(Mode::Honest);
    let source = Served::new(served.clone(), modes, None);
    sync_to(&rt, &client, &source, new_target, &cfg).unwrap();
    assert!(
        source.spoiled[1].load(Ordering::SeqCst) >= 4,
        "extra lists sent"
    );
    assert_head_at(&client, served, head - 1 - PIVOT_DISTANCE);
}

/// Healing cut short resumes from its record: the nodes whose patches were committed
/// before the cut are not asked again, only those left (found, queued or in flight at
/// the last commit), and the tries are not built again.
#[test]
fn healing_cut_short_resumes_from_its_record() {
    let rt = runtime();
    // Every healed answer committed with the record, so that the cut falls just after
    // a commit.
    let cfg = SnapConfig {
        heal_commit_every: 1,
        ..cfg()
    };
    // Healing once, whole: how many trie-node requests it takes.
    let (g, client, _) = moved_pivot(&rt, &cfg);
    let served = g.chain().clone();
    let new_target = served.head().unwrap().1;
    let whole = Served::new(served.clone(), vec![Mode::Honest], None);
    sync_to(&rt, &client, &whole, new_target, &cfg).unwrap();
    let n = whole.asked[2].load(Ordering::SeqCst);
    let cut_at = n * 3 / 4;
    assert!(cut_at > 8, "{n} requests: too few to cut");
    // The same download healed again, cut after three quarters of those requests...
    let (g, client, old_root) = moved_pivot(&rt, &cfg);
    let cut = Served::new(g.chain().clone(), vec![Mode::Honest], None);
    cut.nodes_left.store(cut_at, Ordering::SeqCst);
    let err = sync_to(&rt, &client, &cut, new_target, &cfg);
    assert!(matches!(err, Err(SnapError::NoPeers)), "{err:?}");
    let record = client.store().snap_heal().unwrap().unwrap();
    let record = snap::HealRecord::decode(&record).unwrap();
    assert!(!record.done() && record.nodes_left() > 0, "{record:?}");
    // ...and resumed: only what was left is asked (no request of those answered
    // before the cut again; fewer still when the nodes left fill fewer requests).
    let source = Served::new(g.chain().clone(), vec![Mode::Honest], None);
    sync_to(&rt, &client, &source, new_target, &cfg).unwrap();
    let again = source.asked[2].load(Ordering::SeqCst);
    eprintln!("healing: {n} requests whole, {again} after a cut at {cut_at}");
    assert!(
        again <= n - cut_at,
        "{again} requests after the cut at {cut_at}, {n} whole"
    );
    assert_eq!(
        client.store().snap_heal().unwrap(),
        None,
        "the record is removed with the progress record"
    );
    assert_healed(&source, &client, old_root);
}

/// A storage trie too large for one answer is downloaded in chunks, each checked against
/// its proof and continued from where the last ended: the conformance chain's
/// beacon-roots contract (about a thousand slots at the pivot, #536) at 2 KiB an answer.
#[test]
fn a_large_storage_trie_comes_in_chunks_continued_to_its_end() {
    let testdata = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../../../shared/testdata/ethtest");
    let genesis = moat_common::config::Genesis::from_file(&testdata.join("genesis.json")).unwrap();
    let raw = std::fs::read(testdata.join("chain.rlp")).unwrap();
    let served = Chain::init(Store::in_memory(), &genesis).unwrap();
    for b in Block::decode_all(&raw).unwrap() {
        served.import(&b).unwrap();
    }
    let (head, target) = served.head().unwrap();
    let client = Chain::init(Store::in_memory(), &genesis).unwrap();
    let source = Served::new(served.clone(), vec![Mode::Honest; 2], None);
    let cfg = SnapConfig {
        response_bytes: 2048,
        give_up_after: std::time::Duration::from_secs(3),
        ..SnapConfig::default()
    };
    sync_to(&runtime(), &client, &source, target, &cfg).unwrap();
    // The tries, the beacon-roots storage trie among them, rebuilt from the download and
    // checked against the pivot's root.
    assert_head_at(&client, &served, head - PIVOT_DISTANCE);
    // ~1,060 slots of ~65 bytes at 2 KiB an answer: over 30 requests for that trie
    // alone (45 here with the other accounts' storage).
    let storage_asked = source.asked[1].load(Ordering::SeqCst);
    assert!(storage_asked >= 30, "{storage_asked} storage requests");
}
