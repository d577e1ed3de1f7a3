//! Transaction ingress and fetch: `Transactions` messages, announcements to the fetcher
//! and its `GetPooledTransactions` requests, `PooledTransactions` replies checked against
//! what was asked, and each peer's admission worker, which admits in chunks charged to
//! the peer's CPU budget and applies the pool's verdicts to the peer.

use crate::eth::{ALL_CELLS, Announcement, EthMessage};
use crate::fetcher::{Delivered, DeliveryError, FetchRequest, Meta};
use crate::p2p::DisconnectReason;
use alloy_primitives::{B256, Bytes};
use moat_common::TxType;
use moat_common::transaction::{BlobRules, PooledTransaction};
use moat_mempool::{CpuMeter, PeerCost, TxInput, TxOrigin, Verdict};
use moat_sched::{self as lanes, Lane};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

use super::sampler::Verdict as Sampled;
use super::{Network, Peer, short, unix_now};

/// Transactions of one message admitted, measured and charged as one unit: the peer's
/// CPU budget is asked before each.
const ADMISSION_CHUNK: usize = 256;
/// Cost of one transaction that the bytes alone prove invalid.
const INVALID_TX_PENALTY: i64 = 5;

/// One message's transactions on their way into the pool.
pub(super) struct AdmissionJob {
    pub(super) txs: Vec<(Option<B256>, TxInput)>,
    /// Fetched (a `PooledTransactions` reply): the fetcher learns the outcome.
    pub(super) fetched: bool,
}

impl Network {
    /// A `Transactions` message: whole transactions a peer gossips to us.
    pub(super) async fn on_transactions(&self, peer: &Arc<Peer>, txs: Vec<Bytes>) {
        if !self.inner.synced.load(Ordering::Acquire) {
            return;
        }
        if txs
            .iter()
            .any(|t| t.first() == Some(&(TxType::Eip4844 as u8)))
        {
            self.fault(peer, "blob tx broadcast", "full blob tx in Transactions");
            return;
        }
        let admitted = txs
            .into_iter()
            .map(|env| {
                let hash = PooledTransaction::hash_of_envelope(&env);
                (hash, env)
            })
            .collect::<Vec<_>>();
        // Two copies of one tx in a message is a fault (as in geth): no honest
        // peer sends them, and each copy would cost a trip through the pool.
        let mut distinct = std::collections::HashSet::with_capacity(admitted.len());
        if let Some(dup) = admitted
            .iter()
            .filter_map(|(h, _)| *h)
            .find(|h| !distinct.insert(*h))
        {
            self.fault(
                peer,
                "duplicate tx",
                &format!("transaction {dup} twice in one Transactions message"),
            );
            return;
        }
        // A hash this peer sent before (or was sent, or announced) is not admitted
        // again: no honest peer sends a tx twice to one peer, and a repeat would cost a
        // trip through the pool each time. It costs the peer its reader's CPU, counted
        // as a rejection (see `ReaderCpu`).
        let mut repeats = 0;
        let admitted: Vec<_> = {
            let mut known = peer.known.lock();
            admitted
                .into_iter()
                .filter(|(h, _)| match h {
                    Some(h) if !known.insert(*h) => {
                        repeats += 1;
                        false
                    }
                    _ => true,
                })
                // The hash goes with the bytes: the pool does not take it again.
                .map(|(h, e)| match h {
                    Some(hash) => (h, TxInput::Hashed(e, hash)),
                    None => (h, TxInput::Raw(e)),
                })
                .collect()
        };
        if repeats > 0 {
            peer.repeats.fetch_add(repeats, Ordering::Relaxed);
            metrics::counter!("moat_p2p_repeated_txs_total").increment(repeats);
        }
        if admitted.is_empty() {
            return;
        }
        self.spawn_admission(peer, admitted, false).await;
    }

    /// A `NewPooledTransactionHashes` message: hashes for the fetcher.
    pub(super) async fn on_hashes(&self, peer: &Arc<Peer>, a: Announcement) {
        if !self.inner.synced.load(Ordering::Acquire) {
            return;
        }
        // Announcements cost lookups in the pool and the fetcher: measured and
        // charged like admission, and a peer in debt waits here, in its reader.
        if !self.await_budget(peer).await {
            return;
        }
        // Their lookups are a unit of work in the peer's lane, as its messages are.
        let lane = self.lane_of(peer);
        let (net, peer) = (self.clone(), peer.clone());
        lanes::run(lane, async move {
            let meter = CpuMeter::start();
            net.on_announcement(&peer, a);
            net.inner.pool.charge(TxOrigin::Peer(peer.info.id), meter);
        })
        .await;
    }

    pub(super) fn on_announcement(&self, peer: &Arc<Peer>, a: Announcement) {
        let pool = &self.inner.pool;
        // The peer's known set is locked for the inserts alone: the broadcaster locks it
        // too, for every tx it gossips, and must not wait out the pool lookups below
        // (done in this peer's lane, maybe at low priority).
        {
            let mut known = peer.known.lock();
            for hash in &a.hashes {
                known.insert(*hash);
            }
        }
        // eth/72: a blob tx is fetched as its body then cells, whole or sampled (the
        // sampler says which, and from which announcers).
        let eth72 = peer.framing.version >= crate::eth::ETH72;
        let mask = a.mask.unwrap_or_default();
        let now = Instant::now();
        let mut released = Vec::new();
        // eth/72 states a blob tx's size without its blobs: one past what such a body
        // can be is not fetched (its body would be a fault).
        let max_body = (peer.framing.version >= crate::eth::ETH72)
            .then(|| self.blob_rules())
            .flatten()
            .map(|r| super::cells::max_body_without_blobs(r.max_blobs_per_tx));
        let mut entries = Vec::with_capacity(a.len());
        // Hashes being admitted from another peer's delivery: this peer is kept as their
        // next announcer while the fetcher still tracks them, so that if the delivery
        // fails (bad cells, a bad sidecar) the tx is asked for again from it.
        let mut alternates = Vec::new();
        let with_origins = peer.framing.version >= crate::eth::ETH73;
        for (i, ((hash, ty), size)) in a.hashes.iter().zip(&a.types).zip(&a.sizes).enumerate() {
            let blob = *ty == TxType::Eip4844 as u8;
            if blob && max_body.is_some_and(|m| *size as usize > m) {
                continue;
            }
            if pool.contains(hash) {
                continue;
            }
            let meta = Meta {
                ty: *ty,
                size: *size,
                origin: with_origins.then(|| a.origins.get(i).copied()).flatten(),
            };
            if pool.is_importing(hash) {
                // On eth/72 only an announcer of every cell can serve whatever the tx
                // is fetched with (its data cells, or a sampler's custody).
                if !(blob && eth72 && mask != ALL_CELLS) {
                    alternates.push((*hash, meta));
                }
                continue;
            }
            // eth/73: a tx its sender's state rules out is not fetched at all.
            if let Some((sender, nonce)) = meta.origin
                && let Some(why) = pool.hopeless(&sender, nonce)
            {
                metrics::counter!("moat_p2p_announcements_hopeless_total", "reason" => why)
                    .increment(1);
                continue;
            }
            if blob && eth72 {
                let verdict =
                    self.inner
                        .sampler
                        .lock()
                        .announced(*hash, peer.info.id, mask, meta, now);
                match verdict {
                    Sampled::Fetch => {}
                    Sampled::Skip | Sampled::Held => continue,
                    Sampled::Release(from) => {
                        released.push((*hash, from));
                        continue;
                    }
                }
            }
            entries.push((*hash, meta));
        }
        let released = self.still_here(released);
        let requests = {
            let mut f = self.inner.fetcher.lock();
            let alternates: Vec<_> = alternates
                .into_iter()
                .filter(|(hash, _)| f.contains(hash))
                .collect();
            let dropped = f.announce(peer.info.id, entries.into_iter().chain(alternates))
                + Self::announce_released_in(&mut f, released);
            if dropped > 0 {
                metrics::counter!("moat_p2p_announcements_dropped_total").increment(dropped as u64);
            }
            f.schedule(Instant::now())
        };
        self.send_requests(requests);
    }

    pub(super) fn send_requests(&self, requests: Vec<FetchRequest>) {
        if requests.is_empty() {
            return;
        }
        // The peer table's lock for the look-ups alone, not for the encoding: this may
        // run for an untrusted peer at low priority, and a peer leaving (a writer of the
        // table, on the runtime) would wait for it.
        let targets: Vec<_> = {
            let peers = self.inner.peers.read();
            requests
                .into_iter()
                .filter_map(|r| Some((peers.get(&r.peer)?.clone(), r)))
                .collect()
        };
        for (p, r) in targets {
            metrics::counter!("moat_p2p_fetch_requests_total").increment(1);
            p.send(p.framing.eth(&EthMessage::GetPooledTransactions {
                request_id: r.request_id,
                hashes: r.hashes,
            }));
        }
    }

    /// `validate_requested` and `validate_cheap` on a `PooledTransactions` reply, then
    /// admission.
    pub(super) async fn on_pooled(&self, peer: &Arc<Peer>, request_id: u64, txs: Vec<Bytes>) {
        let mut delivered = Vec::with_capacity(txs.len());
        let mut inputs = Vec::with_capacity(txs.len());
        for env in txs {
            let Some(hash) = PooledTransaction::hash_of_envelope(&env) else {
                self.fault(
                    peer,
                    "malformed message",
                    "undecodable tx in PooledTransactions",
                );
                self.inner
                    .fetcher
                    .lock()
                    .deliver(peer.info.id, request_id, &[])
                    .ok();
                return;
            };
            let ty = match env.first() {
                Some(b) if *b >= 0xc0 => 0,
                Some(b) => *b,
                None => 0,
            };
            delivered.push(Delivered {
                hash,
                ty,
                size: env.len(),
            });
            inputs.push((hash, env));
        }
        let verdict = self
            .inner
            .fetcher
            .lock()
            .deliver(peer.info.id, request_id, &delivered);
        match verdict {
            Ok(_) => {}
            Err(DeliveryError::Unsolicited(id)) => {
                // An answer after its timeout, or to nothing: ignored, not trusted.
                tracing::debug!(peer = %short(&peer.info.id), id, "unsolicited PooledTransactions");
                metrics::counter!("moat_p2p_unsolicited_replies_total").increment(1);
                self.reschedule();
                return;
            }
            Err(e) => {
                self.fault(peer, "delivery mismatch", &e.to_string());
                self.reschedule();
                return;
            }
        }
        // eth/73: each tx must be from the sender and at the nonce announced (EIP-8077:
        // a mismatch is a protocol violation). The sender found here is cached for
        // admission, which would recover it anyway.
        let checked = if peer.framing.version >= crate::eth::ETH73 {
            // Its signature recoveries are the peer's to pay, as admission's would be.
            let meter = CpuMeter::start();
            let checked = self.check_origins(peer, &inputs);
            self.inner.pool.charge(TxOrigin::Peer(peer.info.id), meter);
            checked
        } else {
            Ok(())
        };
        if let Err(why) = checked {
            self.fault(peer, "announcement mismatch", &why);
            self.reschedule();
            return;
        }
        // Blob sidecars get their structural checks here, before the pool's dedup and
        // KZG: a malformed or mismatched sidecar costs the peer its connection.
        let rules = self.blob_rules();
        let without_blobs = peer.framing.version >= crate::eth::ETH72;
        let mut bodies = Vec::new();
        let mut admit = Vec::with_capacity(inputs.len());
        // Known first, in one short lock (the broadcaster takes it too); the sidecars'
        // checks below run without it.
        {
            let mut known = peer.known.lock();
            for (hash, _) in &inputs {
                known.insert(*hash);
            }
        }
        for (hash, env) in inputs {
            if env.first() != Some(&(TxType::Eip4844 as u8)) {
                admit.push((Some(hash), TxInput::Hashed(env, hash)));
                continue;
            }
            if without_blobs {
                // eth/72: the body without blobs; the blobs come as cells. `Ok(None)`: a
                // body the fork does not take (a sidecar version of another fork), which
                // is no fault of the peer: forgotten, as the pool would refuse it.
                let checked = match rules {
                    Some(r)
                        if env.len() > super::cells::max_body_without_blobs(r.max_blobs_per_tx) =>
                    {
                        Err(format!("eth/72 blob tx body of {} bytes", env.len()))
                    }
                    _ => PooledTransaction::decode_2718(&env)
                        .map_err(|e| e.to_string())
                        .and_then(|tx| {
                            let hashes = tx.tx().tx().blob_versioned_hashes();
                            match (tx.sidecar(), rules) {
                                (None, _) => Err("blob tx without sidecar".to_string()),
                                (Some(s), _) if !s.blobs.is_empty() => {
                                    Err("eth/72 blob tx with its blobs".to_string())
                                }
                                (Some(_), None) => Err("blob tx before blobs".to_string()),
                                (Some(s), Some(r)) => match s.validate_without_blobs(hashes, &r) {
                                    Ok(()) => Ok(Some(tx)),
                                    Err(e) if e.is_peer_fault() => Err(e.to_string()),
                                    Err(_) => Ok(None),
                                },
                            }
                        }),
                };
                match checked {
                    Ok(Some(tx)) => bodies.push(tx),
                    Ok(None) => self.inner.fetcher.lock().settled(&hash),
                    Err(why) => {
                        self.inner.fetcher.lock().peer_fault(peer.info.id, &hash);
                        self.fault(peer, "bad sidecar", &format!("blob tx {hash}: {why}"));
                        self.reschedule();
                        return;
                    }
                }
                continue;
            }
            let checked = PooledTransaction::decode_2718(&env)
                .map_err(|e| e.to_string())
                .and_then(|tx| match rules {
                    None => Ok(tx),
                    Some(r) => match tx.validate_cheap(&r) {
                        Ok(()) => Ok(tx),
                        Err(e) if e.is_peer_fault() => Err(e.to_string()),
                        Err(_) => Ok(tx), // wrong version for the fork: the pool says so
                    },
                });
            match checked {
                Ok(tx) => admit.push((Some(hash), TxInput::Decoded(Box::new(tx)))),
                Err(why) => {
                    self.inner.fetcher.lock().peer_fault(peer.info.id, &hash);
                    self.fault(peer, "bad sidecar", &format!("blob tx {hash}: {why}"));
                    self.reschedule();
                    return;
                }
            }
        }
        if !bodies.is_empty() {
            self.fetch_cells(peer, bodies);
        }
        self.spawn_admission(peer, admit, true).await;
    }

    /// Delivered txs against the sender and nonce `peer` announced for them (eth/73).
    fn check_origins(&self, peer: &Peer, inputs: &[(B256, Bytes)]) -> Result<(), String> {
        let pool = &self.inner.pool;
        // What it announced of each, in one short lock: the recoveries below run without.
        let announced: Vec<Option<(alloy_primitives::Address, u64)>> = {
            let f = self.inner.fetcher.lock();
            inputs
                .iter()
                .map(|(hash, _)| f.announced_origin(peer.info.id, hash))
                .collect()
        };
        for ((hash, env), announced) in inputs.iter().zip(announced) {
            let Some((sender, nonce)) = announced else {
                continue;
            };
            // Undecodable or unsigned txs are admission's to judge (and cost the peer).
            let Ok(tx) = PooledTransaction::decode_2718(env) else {
                continue;
            };
            let signed = tx.tx();
            if signed.tx().nonce() != nonce {
                return Err(format!(
                    "tx {hash} has nonce {}, announced {nonce}",
                    signed.tx().nonce()
                ));
            }
            let found = match pool.sender_cache().get(hash) {
                Some(s) => s,
                None => {
                    let Ok(s) = signed.recover_sender() else {
                        continue;
                    };
                    pool.sender_cache().insert(*hash, s);
                    s
                }
            };
            if found != sender {
                return Err(format!("tx {hash} is from {found}, announced {sender}"));
            }
        }
        Ok(())
    }

    pub(super) fn blob_rules(&self) -> Option<BlobRules> {
        let chain = &self.inner.chain;
        let Ok(head) = chain.head_header() else {
            return None;
        };
        let mut cached = self.inner.blob_rules.lock();
        if cached.0 != head.hash() {
            *cached = (
                head.hash(),
                BlobRules::at(chain.config(), head.number + 1, head.timestamp + 1),
            );
        }
        cached.1
    }

    pub(super) fn reschedule(&self) {
        let requests = self.inner.fetcher.lock().schedule(Instant::now());
        self.send_requests(requests);
    }

    /// Queues a message's transactions for this peer's admission worker; waits only
    /// when the peer already has a full queue, so a flooding peer is slowed, not the node.
    pub(super) async fn spawn_admission(
        &self,
        peer: &Arc<Peer>,
        txs: Vec<(Option<B256>, TxInput)>,
        fetched: bool,
    ) {
        let _ = peer.admissions.send(AdmissionJob { txs, fetched }).await;
    }

    /// Admits one peer's transactions in the order they came and applies the
    /// consequences of what the pool says. Each message is one unit of work in the lane
    /// the peer's standing gives it when its turn comes (`moat_mempool::Standing`): a peer
    /// with a record of admitted transactions in the trusted lane, a new, poor or over-budget
    /// one on the untrusted lane's low-priority threads.
    pub(super) async fn admission_worker(
        self,
        peer: Arc<Peer>,
        mut jobs: mpsc::Receiver<AdmissionJob>,
    ) {
        while let Some(job) = jobs.recv().await {
            // One message's transactions, then the other tasks' turn (see run_peer).
            tokio::task::yield_now().await;
            let lane = self.lane_of(&peer);
            let unit = self.clone().admit_job(peer.clone(), job);
            if lanes::run(lane, unit).await != Some(true) {
                return;
            }
        }
    }

    /// The lane of a peer's next unit of work. Until the node is synced everything is
    /// trusted: no transactions are taken then, and the peers' work is the chain data
    /// that sync waits for.
    pub(super) fn lane_of(&self, peer: &Peer) -> Lane {
        if !self.inner.synced.load(Ordering::Acquire) {
            return Lane::Trusted;
        }
        self.inner
            .pool
            .budgets()
            .lane(&peer.info.id, Instant::now())
    }

    /// One message's transactions: each chunk is measured in CPU and charged to the
    /// peer; before each, the peer's budget is asked, and a peer in debt waits (its queue
    /// fills and its reader stops reading). `false` when the peer is being dropped.
    async fn admit_job(self, peer: Arc<Peer>, job: AdmissionJob) -> bool {
        let origin = TxOrigin::Peer(peer.info.id);
        let pool = &self.inner.pool;
        let fetched = job.fetched;
        let mut txs = job.txs.into_iter().peekable();
        while txs.peek().is_some() {
            if !self.await_budget(&peer).await {
                return false;
            }
            let chunk: Vec<_> = txs.by_ref().take(ADMISSION_CHUNK).collect();
            let mut meter = CpuMeter::start();
            // Senders of a large chunk are recovered on all cores first; the in-order
            // admissions below then find them cached.
            let raw: Vec<(B256, Bytes)> = chunk
                .iter()
                .filter_map(|(_, input)| match input {
                    TxInput::Hashed(b, h) => Some((*h, b.clone())),
                    TxInput::Raw(_) | TxInput::Decoded(_) => None,
                })
                .collect();
            pool.warm_senders_hashed(&raw, &mut meter).await;
            let mut accepted = Vec::new();
            for (hash, input) in chunk {
                let result = pool.add_metered(input, origin, &mut meter).await;
                let cost = match &result {
                    Ok(added) => {
                        accepted.push(added.hash);
                        PeerCost::None
                    }
                    Err(r) => r.peer_cost(),
                };
                if fetched && let Some(h) = hash {
                    let mut f = self.inner.fetcher.lock();
                    if cost == PeerCost::Fault {
                        f.peer_fault(peer.info.id, &h);
                    } else {
                        f.settled(&h);
                    }
                }
                match (cost, &result) {
                    (PeerCost::Fault, Err(r)) => {
                        pool.charge(origin, meter);
                        let hash = hash.unwrap_or_default();
                        self.fault(&peer, r.reason(), &format!("transaction {hash}: {r}"));
                        if fetched {
                            self.reschedule();
                        }
                        return false;
                    }
                    (PeerCost::Penalty, Err(r)) => {
                        self.penalize(&peer, INVALID_TX_PENALTY, r.reason())
                    }
                    _ => {}
                }
            }
            self.inner
                .tracker
                .lock()
                .accepted(peer.info.id, &accepted, unix_now());
            pool.charge(origin, meter);
        }
        if fetched {
            self.reschedule();
        }
        true
    }

    /// Waits while the peer's admission budget says so; `false` when it says to drop
    /// the peer (its CPU bought almost no transactions), which is then done.
    pub(super) async fn await_budget(&self, peer: &Peer) -> bool {
        loop {
            let verdict = self
                .inner
                .pool
                .budgets()
                .verdict(&peer.info.id, Instant::now());
            match verdict {
                Verdict::Go => return true,
                Verdict::Wait(d) => tokio::time::sleep(d).await,
                Verdict::Disconnect(why) => {
                    tracing::info!(peer = %short(&peer.info.id), addr = %peer.info.addr, why = why.as_str(), "dropping peer: its admission CPU buys almost no transactions");
                    metrics::counter!("moat_p2p_peer_faults_total", "kind" => "useless_cpu")
                        .increment(1);
                    self.inner.fetcher.lock().remove_peer(peer.info.id);
                    peer.disconnect(DisconnectReason::UselessPeer);
                    return false;
                }
            }
        }
    }

    /// Re-asks timed-out requests of other announcers every half second.
    pub(super) async fn fetch_timer(self) {
        let mut tick = tokio::time::interval(Duration::from_millis(500));
        loop {
            tick.tick().await;
            let now = Instant::now();
            // On a blocking thread: an untrusted peer's work may hold the fetcher's lock
            // at low priority, and a runtime worker must not wait for it.
            let net = self.clone();
            let requests = tokio::task::spawn_blocking(move || {
                let late_cells = net.expired_cell_requests(now);
                // Sampled txs whose providers did not show: fetched whole.
                let unsampled = net.inner.sampler.lock().expired(now);
                let unsampled = net.still_here(unsampled);
                let mut f = net.inner.fetcher.lock();
                Self::forget_cell_requests_in(&mut f, late_cells);
                metrics::counter!("moat_p2p_blob_samples_unavailable_total")
                    .increment(unsampled.len() as u64);
                Self::announce_released_in(&mut f, unsampled);
                let late = f.expire(now);
                if !late.is_empty() {
                    metrics::counter!("moat_p2p_fetch_timeouts_total").increment(late.len() as u64);
                }
                f.schedule(now)
            })
            .await
            .unwrap_or_default();
            self.send_requests(requests);
        }
    }
}
