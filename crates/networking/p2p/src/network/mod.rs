//! The network service: listens and dials, runs one task per peer, and ties peers to the
//! pool (admission of their transactions, gossip of ours) and to the chain (serving).
//!
//! ```text
//!  TCP ─▶ RLPx ─▶ Hello/Status ─▶ peer task ─┬─ Ping ─▶ Pong
//!                                           ├─ Get* ─▶ serve (store) ─▶ reply
//!                                           ├─ BlockHeaders / BlockBodies ─▶ the chain
//!                                           │    request of that id (get_headers, get_bodies)
//!                                           ├─ Transactions ─▶ blob? fault : pool
//!                                           ├─ announcement ─▶ fetcher ─▶ GetPooledTransactions
//!                                           └─ PooledTransactions ─▶ validate_requested,
//!                                                validate_cheap ─▶ pool ─▶ consequences
//!  pool's new pending txs ─▶ broadcaster ─▶ full txs to √peers, hashes to the rest
//! ```
//!
//! Peer consequences follow ../shared/DESIGN.md §2: a malformed or mismatched sidecar, a
//! blob tx without one, a delivery that contradicts its announcement, a full blob tx in
//! `Transactions` or a malformed message is a fault → Disconnect (subprotocol error).
//! Other invalid transactions cost reputation; below the threshold the peer is dropped.
//! What each pool rejection costs is the pool's table ([`Rejection::peer_cost`]).
//!
//! Admission CPU: a peer's transactions are admitted in chunks, each measured with the
//! thread CPU clock and charged to the peer's budget in the pool
//! (`moat_mempool::budget`); before each chunk the network asks the budget
//! and obeys: go on, wait (its reader then stops reading), or drop a peer whose CPU buys
//! almost no admitted transactions. Where a peer's work runs (its reader, its admission,
//! its announcements) is its lane, from its standing (`moat_mempool::Standing`, run by
//! `moat_sched`): new, poor and over-budget peers on low-priority threads, proven ones on the runtime.
//!
//! The service and its peer table live here (listening, dialling, static peers, the
//! handshake); the rest is split by job:
//! - `peer`: the peer task (reader, writer, dispatch, faults);
//! - `ingress`: transactions in, announcements, fetches and admission;
//! - `broadcast`: gossip of our pending transactions, `choice`: which peers get one whole;
//! - `cells`: eth/72's blob cells, asked for and served; `sampler`: which blob txs are
//!   fetched whole and which as the custody's cells only (EIP-8070);
//! - `chain`: headers and bodies requests for the syncer;
//! - `tracker`: which peers deliver txs that get mined; `cull`: a random peer dropped
//!   now and then while the table is full, sparing those.
//!
//! [`Rejection::peer_cost`]: moat_mempool::Rejection::peer_cost

mod broadcast;
mod cells;
mod chain;
mod choice;
mod cull;
mod ingress;
mod peer;
mod sampler;
mod snap_requests;
mod tracker;

use peer::Peer;

use crate::Enode;
use crate::eth::{EthMessage, Status};
use crate::fetcher::{Fetcher, FetcherConfig};
use crate::gate::{GateConfig, HandshakeGate};
use crate::p2p::DisconnectReason;
use crate::requests::{self};
use crate::rlpx::{PeerId, RlpxStream};
use crate::session::{self, LocalIdentity, Session, check_status};
use alloy_primitives::B256;
use moat_blockchain::chain::Chain;
use moat_common::config::ForkFilter;
use moat_common::throttle::Throttle;
use moat_common::transaction::BlobRules;
use moat_mempool::{PeerBudget, Pool};
use moat_sched::{CeilingMutex, CeilingRwLock};
use parking_lot::Mutex;
use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tokio::net::{TcpListener, TcpStream};

type Map<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

/// Transactions above this size are only announced, never sent whole (geth's rule).
pub const MAX_BROADCAST_TX_SIZE: usize = 4096;
/// Static peers at most (`--bootnodes` and `admin_addPeer` together).
pub const MAX_STATIC_PEERS: usize = 1024;
/// Static peers dialled at once by the redial loop.
const STATIC_DIALS_AT_ONCE: usize = 16;
/// Head blocks between two BlockRangeUpdate messages.
const RANGE_UPDATE_EVERY: u64 = 32;

/// How the network is set up.
#[derive(Debug, Clone)]
pub struct NetworkConfig {
    /// Our node key: signs the RLPx handshake; its public key is our node id.
    pub secret_key: secp256k1::SecretKey,
    /// Where to listen; `None` for no inbound connections.
    pub listen: Option<SocketAddr>,
    /// Most peers in all; inbound ones may take all but a third of the slots.
    pub max_peers: usize,
    /// Peers dialled at start and kept connected (at most [`MAX_STATIC_PEERS`]).
    pub static_peers: Vec<Enode>,
    /// How inbound handshake slots are shared out (see [`crate::gate`]).
    pub handshakes: GateConfig,
    /// Our client name sent in Hello (default `moat/v<version>`).
    pub client_id: String,
    /// The chain's network id, sent and checked in Status.
    pub network_id: u64,
    /// Limits of the transaction fetcher (announcements to requests).
    pub fetcher: FetcherConfig,
    /// How long a peer has to answer a headers or bodies request.
    pub request_timeout: Duration,
    /// The wait between two culls of a full peer table is drawn from this range
    /// (3 to 7 minutes, go-ethereum's).
    pub cull_wait: (Duration, Duration),
    /// The cells of each blob kept of a sampled blob tx (EIP-8070: the consensus
    /// client's custody columns). Every cell (the default) fetches every blob tx whole.
    pub blob_custody: crate::eth::CellMask,
    /// Percent of blob txs fetched whole all the same when sampling (15, go-ethereum's).
    pub blob_fetch_percent: u8,
}

impl NetworkConfig {
    /// Defaults for `secret_key` on `network_id`: listening on 0.0.0.0:30303, 50 peers.
    pub fn new(secret_key: secp256k1::SecretKey, network_id: u64) -> Self {
        Self {
            secret_key,
            listen: Some(SocketAddr::from(([0, 0, 0, 0], 30303))),
            max_peers: 50,
            static_peers: Vec::new(),
            handshakes: GateConfig::default(),
            client_id: format!("moat/v{}", env!("CARGO_PKG_VERSION")),
            network_id,
            fetcher: FetcherConfig::default(),
            request_timeout: requests::REQUEST_TIMEOUT,
            cull_wait: (cull::CULL_MIN, cull::CULL_MAX),
            blob_custody: crate::eth::ALL_CELLS,
            blob_fetch_percent: sampler::DEFAULT_FETCH_PERCENT,
        }
    }
}

/// What `admin_peers` shows of one peer.
#[derive(Debug, Clone)]
pub struct PeerInfo {
    /// The peer's node id.
    pub id: PeerId,
    /// The peer's remote TCP address.
    pub addr: SocketAddr,
    /// The client name its Hello gave.
    pub client_id: String,
    /// The eth version negotiated (68, 69 or 70).
    pub eth_version: u32,
    /// Whether it dialled us.
    pub inbound: bool,
    /// Its score: starts at 0, lowered by penalties; the peer is dropped at -100.
    pub reputation: i64,
    /// The head hash its Status announced.
    pub head: B256,
    /// Its admission CPU account: spent, admitted, rejected, budget state.
    pub budget: Option<PeerBudget>,
    /// Its delivery record (the tracker's moving averages of the txs it delivered first
    /// that blocks included, and that finality confirmed): (included, finalized).
    pub delivered: Option<(f64, f64)>,
}

/// An outbound slot held by a dial in progress; freed on drop.
struct DialSlot(Arc<AtomicUsize>);

impl Drop for DialSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

struct Inner {
    cfg: NetworkConfig,
    local: LocalIdentity,
    chain: Chain,
    pool: Pool,
    synced: Arc<AtomicBool>,
    filter: ForkFilter,
    genesis_timestamp: u64,
    peers: CeilingRwLock<Map<PeerId, Arc<Peer>>>,
    fetcher: CeilingMutex<Fetcher>,
    static_peers: Mutex<StaticPeers>,
    listen_addr: Mutex<Option<SocketAddr>>,
    gate: HandshakeGate,
    blob_rules: Mutex<(B256, Option<BlobRules>)>,
    /// Head number of the last BlockRangeUpdate (or of the head at start).
    range_sent: AtomicU64,
    /// Dials of discovered nodes between their start and the end of the RLPx
    /// handshake: they hold outbound slots.
    dialing: Arc<AtomicUsize>,
    /// Request ids of chain requests (their own space: answers come as other messages
    /// than the fetcher's).
    next_request: AtomicU64,
    /// Answers snap/1 requests.
    snap: crate::snap::SnapServer,
    /// The node's runtime (the one the network started on): snap answers are computed on
    /// its blocking pool, at normal priority, whatever lane the peer's reader is in.
    runtime: tokio::runtime::Handle,
    /// The secret behind the choice of peers that get a sender's txs whole.
    broadcast_key: choice::BroadcastKey,
    /// Which peer delivered which accepted tx, and each peer's mined record.
    tracker: Mutex<tracker::TxTracker>,
    /// eth/72 blob tx bodies waiting for their cells.
    cell_fetches: Mutex<cells::CellFetches>,
    /// Which blob txs are fetched whole, which sampled, and those waiting for providers.
    sampler: Mutex<sampler::Sampler>,
}

/// The devp2p network. Cloning shares it.
#[derive(Clone)]
pub struct Network {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Network {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Network")
            .field("id", &self.inner.local.id)
            .field("peers", &self.inner.peers.read().len())
            .finish()
    }
}

/// Why the network could not start.
#[derive(Debug, thiserror::Error)]
pub enum NetworkError {
    /// The listening TCP socket could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        /// The address asked for.
        addr: SocketAddr,
        /// The OS error.
        source: std::io::Error,
    },
    /// The chain's genesis header could not be read at start (the reason as text).
    #[error("chain: {0}")]
    Chain(String),
}

impl Network {
    /// Starts listening and dialling. `synced` gates peers' transactions: they are taken
    /// only once it is set (engine forkchoiceUpdated to a known head, or dev mode).
    pub async fn start(
        cfg: NetworkConfig,
        chain: Chain,
        pool: Pool,
        synced: Arc<AtomicBool>,
    ) -> Result<Network, NetworkError> {
        let genesis = chain
            .header_by_number(0)
            .map_err(|e| NetworkError::Chain(e.to_string()))?
            .ok_or_else(|| NetworkError::Chain("no genesis header".into()))?;
        let filter = chain
            .config()
            .fork_filter(chain.genesis_hash(), genesis.timestamp);
        let start_head = chain.head().map(|(n, _)| n).unwrap_or(0);
        let finalized = chain
            .store()
            .finalized()
            .ok()
            .flatten()
            .map_or(0, |(n, _)| n);
        let listener = match cfg.listen {
            Some(addr) => Some(
                TcpListener::bind(addr)
                    .await
                    .map_err(|source| NetworkError::Listen { addr, source })?,
            ),
            None => None,
        };
        let listen_addr = listener.as_ref().and_then(|l| l.local_addr().ok());
        let local = LocalIdentity::new(
            cfg.secret_key,
            &cfg.client_id,
            listen_addr.map_or(0, |a| a.port()),
        )
        .with_snap();
        let gate_cfg = cfg.handshakes;
        let mut seed = [0u8; 8];
        let _ = getrandom::fill(&mut seed);
        let sampler = sampler::Sampler::new(
            cfg.blob_custody,
            cfg.blob_fetch_percent,
            u64::from_le_bytes(seed),
        );
        let inner = Arc::new(Inner {
            runtime: tokio::runtime::Handle::current(),
            fetcher: CeilingMutex::named("fetcher", Fetcher::new(cfg.fetcher)),
            static_peers: Mutex::new(StaticPeers::default()),
            cfg,
            local,
            chain,
            pool,
            synced,
            filter,
            genesis_timestamp: genesis.timestamp,
            peers: CeilingRwLock::named("peer_table", Map::default()),
            listen_addr: Mutex::new(listen_addr),
            gate: HandshakeGate::new(gate_cfg),
            blob_rules: Mutex::new((B256::ZERO, None)),
            range_sent: AtomicU64::new(start_head),
            dialing: Arc::new(AtomicUsize::new(0)),
            next_request: AtomicU64::new(1),
            snap: crate::snap::SnapServer::default(),
            broadcast_key: choice::BroadcastKey::new(),
            tracker: Mutex::new(tracker::TxTracker::new(finalized)),
            cell_fetches: Mutex::new(cells::CellFetches::default()),
            sampler: Mutex::new(sampler),
        });
        let net = Network { inner };
        // In the background; the handle is not kept (the thread ends on its own).
        drop(net.inner.snap.warm(&net.inner.chain));
        for enode in net.inner.cfg.static_peers.clone() {
            if let Err(e) = net.keep_static(enode) {
                tracing::warn!(error = %e, "static peer not kept");
            }
        }
        if let Some(listener) = listener {
            tokio::spawn(net.clone().accept_loop(listener));
        }
        tokio::spawn(net.clone().broadcast_loop());
        tokio::spawn(net.clone().fetch_timer());
        tokio::spawn(net.clone().static_dialer());
        tokio::spawn(net.clone().tracker_loop());
        tokio::spawn(net.clone().cull_loop());
        Ok(net)
    }

    /// Our node id.
    pub fn local_id(&self) -> PeerId {
        self.inner.local.id
    }

    /// The TCP address bound for inbound peers; `None` when not listening.
    pub fn listen_addr(&self) -> Option<SocketAddr> {
        *self.inner.listen_addr.lock()
    }

    /// Our enode URL; an unspecified listen address shows as 127.0.0.1.
    pub fn enode(&self) -> String {
        let addr = self
            .listen_addr()
            .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 0)));
        let ip = if addr.ip().is_unspecified() {
            std::net::IpAddr::from([127, 0, 0, 1])
        } else {
            addr.ip()
        };
        Enode {
            id: self.local_id(),
            addr: SocketAddr::new(ip, addr.port()),
        }
        .to_string()
    }

    /// The network id we announce in Status.
    pub fn network_id(&self) -> u64 {
        self.inner.cfg.network_id
    }

    /// The hash of our chain's genesis block.
    pub fn genesis_hash(&self) -> B256 {
        self.inner.chain.genesis_hash()
    }

    /// Our client name, as sent in Hello.
    pub fn client_id(&self) -> &str {
        &self.inner.cfg.client_id
    }

    /// Peers connected now (past the Status exchange).
    pub fn peer_count(&self) -> usize {
        self.inner.peers.read().len()
    }

    /// The connected peers as `admin_peers` shows them.
    pub fn peers(&self) -> Vec<PeerInfo> {
        self.inner
            .peers
            .read()
            .values()
            .map(|p| PeerInfo {
                reputation: p.reputation.load(Ordering::Relaxed),
                budget: self.inner.pool.budgets().peer(&p.info.id, Instant::now()),
                delivered: self
                    .inner
                    .tracker
                    .lock()
                    .stats_of(&p.info.id)
                    .map(|s| (s.included, s.finalized)),
                ..p.info.clone()
            })
            .collect()
    }

    /// Adds a static peer and dials it now (`admin_addPeer`); refused once there are
    /// [`MAX_STATIC_PEERS`].
    pub fn add_peer(&self, enode: Enode) -> Result<(), StaticPeersFull> {
        if self.keep_static(enode.clone())? {
            self.dial_static(enode);
        }
        Ok(())
    }

    /// Static peers kept now.
    pub fn static_peer_count(&self) -> usize {
        self.inner.static_peers.lock().peers.len()
    }

    /// Adds `enode` to the static peers (replacing an entry of the same id); whether it
    /// needs a dial now (it is not connected, and no dial of it is in flight).
    fn keep_static(&self, enode: Enode) -> Result<bool, StaticPeersFull> {
        let mut list = self.inner.static_peers.lock();
        if !list.peers.contains_key(&enode.id) && list.peers.len() >= MAX_STATIC_PEERS {
            return Err(StaticPeersFull(MAX_STATIC_PEERS));
        }
        if let Some(old) = list.peers.insert(enode.id, enode.clone()) {
            self.inner.gate.set_static(old.addr.ip(), false);
        }
        self.inner.gate.set_static(enode.addr.ip(), true);
        Ok(!list.dialing.contains(&enode.id) && !self.is_connected(&enode.id))
    }

    /// Dials a static peer unless a dial of it is in flight.
    fn dial_static(&self, enode: Enode) {
        if !self.inner.static_peers.lock().dialing.insert(enode.id) {
            return;
        }
        let net = self.clone();
        tokio::spawn(async move {
            let id = enode.id;
            net.clone().dial(enode, None).await;
            net.inner.static_peers.lock().dialing.remove(&id);
        });
    }

    /// Outbound connections that may start now: the dialled share of `max_peers` (a
    /// third, at least one: geth's dial ratio) less outbound peers and dials in
    /// progress, and never more than the free slots.
    pub fn free_outbound_slots(&self) -> usize {
        let max = self.inner.cfg.max_peers;
        let max_out = (max - max_inbound(max)).max(1);
        let peers = self.inner.peers.read();
        let outbound = peers.values().filter(|p| !p.info.inbound).count();
        let dialing = self.inner.dialing.load(Ordering::Relaxed);
        max_out
            .saturating_sub(outbound + dialing)
            .min(max.saturating_sub(peers.len() + dialing))
    }

    /// Whether peer `id` is connected now.
    pub fn is_connected(&self, id: &PeerId) -> bool {
        self.inner.peers.read().contains_key(id)
    }

    /// Dials a node once, without keeping it as a static peer (nodes found by
    /// discovery). The dial holds an outbound slot until its RLPx handshake ends.
    pub fn dial_once(&self, enode: Enode) {
        self.inner.dialing.fetch_add(1, Ordering::Relaxed);
        let slot = DialSlot(self.inner.dialing.clone());
        metrics::counter!("moat_p2p_discovered_dials_total").increment(1);
        tokio::spawn(self.clone().dial(enode, Some(slot)));
    }

    /// Disconnects a peer and forgets it as static.
    pub fn remove_peer(&self, id: &PeerId) -> bool {
        {
            let mut list = self.inner.static_peers.lock();
            if let Some(old) = list.peers.remove(id) {
                self.inner.gate.set_static(old.addr.ip(), false);
            }
            list.shrink();
        }
        match self.inner.peers.read().get(id) {
            Some(p) => {
                p.disconnect(DisconnectReason::Requested);
                true
            }
            None => false,
        }
    }

    /// Tells eth/69+ peers the new served range after a head change: when the head has
    /// moved 32 blocks since the last update, or gone back (geth's rhythm; peers need
    /// no more).
    pub fn on_new_head(&self) {
        let Ok((number, hash)) = self.inner.chain.head() else {
            return;
        };
        let last = self.inner.range_sent.load(Ordering::Relaxed);
        if number < last.saturating_add(RANGE_UPDATE_EVERY) && number >= last {
            return;
        }
        self.inner.range_sent.store(number, Ordering::Relaxed);
        let msg = EthMessage::BlockRangeUpdate {
            earliest: 0,
            latest: number,
            latest_hash: hash,
        };
        for p in self.inner.peers.read().values() {
            if p.framing.version >= crate::eth::ETH69 {
                p.send(p.framing.eth(&msg));
            }
        }
    }

    fn our_status(&self, version: u32) -> (Status, u64, u64) {
        let chain = &self.inner.chain;
        let (number, hash, timestamp) = match chain.head_header() {
            Ok(h) => (h.number, h.hash(), h.timestamp),
            Err(_) => (0, chain.genesis_hash(), self.inner.genesis_timestamp),
        };
        let fork_id = chain.config().fork_id(
            chain.genesis_hash(),
            self.inner.genesis_timestamp,
            number,
            timestamp,
        );
        let status = Status {
            version,
            network_id: self.inner.cfg.network_id,
            genesis: chain.genesis_hash(),
            fork_id,
            total_difficulty: chain.config().terminal_total_difficulty.unwrap_or_default(),
            head: hash,
            earliest: 0,
            latest: number,
        };
        (status, number, timestamp)
    }

    async fn accept_loop(self, listener: TcpListener) {
        static REFUSED_LOG: Throttle = Throttle::new(Duration::from_secs(10));
        let mut backoff = ACCEPT_BACKOFF_MIN;
        loop {
            let (stream, addr) = match listener.accept().await {
                Ok(c) => {
                    backoff = ACCEPT_BACKOFF_MIN;
                    c
                }
                Err(e) => {
                    // Out of descriptors (or buffers): the connection stays queued; wait,
                    // longer each time, instead of spinning on the same error.
                    tracing::debug!(error = %e, "accept failed");
                    metrics::counter!("moat_p2p_accept_errors_total").increment(1);
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(ACCEPT_BACKOFF_MAX);
                    continue;
                }
            };
            // A subnet whose peer was just dropped for useless admission CPU waits out
            // the window before it costs another handshake.
            if self.inner.pool.budgets().refuses(addr.ip(), Instant::now()) {
                metrics::counter!("moat_p2p_handshakes_refused_total", "reason" => "useless_subnet")
                    .increment(1);
                continue;
            }
            let permit = match self.inner.gate.admit(addr.ip()) {
                Ok(p) => p,
                Err(why) => {
                    metrics::counter!("moat_p2p_handshakes_refused_total", "reason" => why.as_str())
                        .increment(1);
                    if let Some(held) = REFUSED_LOG.allow() {
                        tracing::debug!(%addr, reason = why.as_str(), held_back = held, pending = self.inner.gate.pending(), "inbound connection refused: handshake slots taken");
                    }
                    continue;
                }
            };
            let net = self.clone();
            tokio::spawn(async move {
                let _ = stream.set_nodelay(true);
                let timeout = permit.timeout;
                // The whole handshake, RLPx to Status, within the gate's time. It stays
                // in the trusted lane: at the lowest priority a busy node would starve
                // every newcomer's handshake past the gate's timeout (the gate and the
                // useless-subnet refusal bound what reconnecting identities cost).
                let session = tokio::time::timeout(timeout, async {
                    let rlpx = RlpxStream::accept(stream, &net.inner.local.key)
                        .await
                        .map_err(|e| format!("rlpx: {e}"))?;
                    net.session(rlpx, addr, true).await.ok_or_else(String::new)
                })
                .await;
                // The slot is free as soon as the handshake is over.
                drop(permit);
                match session {
                    Ok(Ok(session)) => net.run_peer(session, addr, true).await,
                    Ok(Err(e)) => {
                        if !e.is_empty() {
                            tracing::debug!(%addr, error = %e, "inbound handshake failed");
                            metrics::counter!("moat_p2p_handshake_failures_total").increment(1);
                        }
                    }
                    Err(_) => {
                        tracing::debug!(%addr, ?timeout, "inbound handshake timed out");
                        metrics::counter!("moat_p2p_handshake_failures_total").increment(1);
                    }
                }
            });
        }
    }

    async fn dial(self, enode: Enode, slot: Option<DialSlot>) {
        if enode.id == self.inner.local.id || self.inner.peers.read().contains_key(&enode.id) {
            return;
        }
        let stream =
            match tokio::time::timeout(session::HANDSHAKE_TIMEOUT, TcpStream::connect(enode.addr))
                .await
            {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => {
                    tracing::debug!(peer = %enode, error = %e, "dial failed");
                    dial_failed("connect");
                    return;
                }
                Err(_) => {
                    tracing::debug!(peer = %enode, "dial timed out");
                    dial_failed("timeout");
                    return;
                }
            };
        let _ = stream.set_nodelay(true);
        let rlpx = match tokio::time::timeout(
            session::HANDSHAKE_TIMEOUT,
            RlpxStream::connect(stream, &self.inner.local.key, enode.id),
        )
        .await
        {
            Ok(Ok(r)) => r,
            _ => {
                tracing::debug!(peer = %enode, "outbound rlpx handshake failed");
                dial_failed("rlpx");
                return;
            }
        };
        drop(slot);
        self.establish(rlpx, enode.addr, false).await;
    }

    /// Redials static peers that are not connected, every 10 s, a few at a time and
    /// never twice at once.
    async fn static_dialer(self) {
        loop {
            let due: Vec<Enode> = {
                let list = self.inner.static_peers.lock();
                list.peers
                    .values()
                    .filter(|e| !list.dialing.contains(&e.id) && !self.is_connected(&e.id))
                    .cloned()
                    .collect()
            };
            for chunk in due.chunks(STATIC_DIALS_AT_ONCE) {
                for enode in chunk {
                    self.dial_static(enode.clone());
                }
                // Let this round's dials get under way before the next.
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            tokio::time::sleep(Duration::from_secs(10)).await;
        }
    }

    async fn establish(self, rlpx: RlpxStream<TcpStream>, addr: SocketAddr, inbound: bool) {
        if let Some(session) = self.session(rlpx, addr, inbound).await {
            self.run_peer(session, addr, inbound).await;
        }
    }

    /// Hello and Status over an RLPx connection; `None` (logged) when they fail.
    async fn session(
        &self,
        rlpx: RlpxStream<TcpStream>,
        addr: SocketAddr,
        inbound: bool,
    ) -> Option<Session<TcpStream>> {
        let (base, number, timestamp) = self.our_status(crate::eth::ETH70);
        let filter = &self.inner.filter;
        let result = session::handshake(
            rlpx,
            &self.inner.local,
            |version| Status { version, ..base },
            |ours, theirs| check_status(ours, theirs, filter, number, timestamp),
        )
        .await;
        match result {
            Ok(s) => Some(s),
            Err(e) => {
                tracing::debug!(%addr, inbound, error = %e, "eth handshake failed");
                metrics::counter!("moat_p2p_handshake_failures_total").increment(1);
                if !inbound {
                    dial_failed("handshake");
                }
                None
            }
        }
    }

    /// Our Status for eth `version`, from the chain's head now.
    pub fn status_for(&self, version: u32) -> Status {
        self.our_status(version).0
    }
}

const ACCEPT_BACKOFF_MIN: Duration = Duration::from_millis(10);
const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);

/// Static peers: a map by node id (one entry per peer, found in O(1)) and the dials in
/// flight.
#[derive(Debug, Default)]
struct StaticPeers {
    peers: Map<PeerId, Enode>,
    dialing: HashSet<PeerId, foldhash::fast::RandomState>,
}

impl StaticPeers {
    /// Gives memory back once most of the entries are gone.
    fn shrink(&mut self) {
        if self.peers.capacity() > 64 && self.peers.len() < self.peers.capacity() / 4 {
            self.peers.shrink_to_fit();
        }
        if self.dialing.capacity() > 64 && self.dialing.len() < self.dialing.capacity() / 4 {
            self.dialing.shrink_to_fit();
        }
    }
}

/// `admin_addPeer` past [`MAX_STATIC_PEERS`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("too many static peers (at most {0})")]
pub struct StaticPeersFull(pub usize);

/// Inbound peers may take all slots but a third, kept for the peers this node dials
/// (geth's dial ratio): a crowd of inbound connections cannot lock out static peers.
fn max_inbound(max_peers: usize) -> usize {
    max_peers - max_peers / 3
}

/// Seconds since the Unix epoch.
fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn short(id: &PeerId) -> String {
    hex::encode(&id[..8])
}

/// Counts a failed outbound connection by where it failed: `connect` (TCP refused or
/// unreachable), `timeout` (TCP connect), `rlpx` (encryption handshake), `handshake`
/// (hello or eth status refused: other network, fork, genesis, too many peers).
fn dial_failed(reason: &'static str) {
    metrics::counter!("moat_p2p_dial_failures_total", "reason" => reason).increment(1);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_third_of_the_slots_is_kept_for_dialled_peers() {
        assert_eq!(max_inbound(50), 34);
        assert_eq!(max_inbound(3), 2);
        assert_eq!(max_inbound(1), 1);
    }
}
