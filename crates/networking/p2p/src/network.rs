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
//! (`moat_blockchain::mempool::budget`); before each chunk the network asks the budget
//! and obeys: go on, wait (its reader then stops reading), or drop a peer whose CPU buys
//! almost no admitted transactions.
//!
//! [`Rejection::peer_cost`]: moat_blockchain::mempool::Rejection::peer_cost

use crate::eth::{Announcement, EthMessage, Status};
use crate::fetcher::{Delivered, DeliveryError, FetchRequest, Fetcher, FetcherConfig, Meta};
use crate::gate::{GateConfig, HandshakeGate};
use crate::p2p::DisconnectReason;
use crate::requests::{
    self, HeadersRequest, MAX_BODIES, MAX_HEADERS, MAX_IN_FLIGHT, RequestError, SealedHeader,
    SyncPeer,
};
use crate::rlpx::{PeerId, RlpxStream};
use crate::session::{self, Incoming, LocalIdentity, Session, check_status};
use crate::{Enode, serve};
use alloy_primitives::{B256, Bytes};
use moat_blockchain::chain::Chain;
use moat_blockchain::mempool::{CpuMeter, PeerBudget, PeerCost, Pool, TxInput, TxOrigin, Verdict};
use moat_common::TxType;
use moat_common::block::Block;
use moat_common::config::ForkFilter;
use moat_common::transaction::{BlobRules, PooledTransaction};
use parking_lot::{Mutex, RwLock};
use std::collections::{HashMap, HashSet, VecDeque};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, oneshot, watch};

type Map<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

/// Transactions above this size are only announced, never sent whole (geth's rule).
pub const MAX_BROADCAST_TX_SIZE: usize = 4096;
/// Hashes a peer is remembered to know.
const KNOWN_TXS: usize = 32_768;
/// A peer whose reputation (starting at 0) reaches this is dropped.
const REPUTATION_FLOOR: i64 = -100;
/// Cost of one transaction that the bytes alone prove invalid.
const INVALID_TX_PENALTY: i64 = 5;
/// Frames queued to a peer before broadcasts to it are dropped.
const PEER_QUEUE: usize = 1024;
/// `Transactions` / `PooledTransactions` messages from one peer waiting for admission;
/// past it the peer's reads wait (backpressure on its TCP stream).
const ADMISSION_QUEUE: usize = 8;
/// Transactions of one message admitted, measured and charged as one unit: the peer's
/// CPU budget is asked before each.
const ADMISSION_CHUNK: usize = 256;
/// Static peers at most (`--bootnodes` and `admin_addPeer` together).
pub const MAX_STATIC_PEERS: usize = 1024;
/// Static peers dialled at once by the redial loop.
const STATIC_DIALS_AT_ONCE: usize = 16;
/// Head blocks between two BlockRangeUpdate messages.
const RANGE_UPDATE_EVERY: u64 = 32;
const PING_INTERVAL: Duration = Duration::from_secs(15);
/// A peer silent this long (pings included) is dropped.
const READ_TIMEOUT: Duration = Duration::from_secs(45);
/// Most hashes in one announcement message we send.
const MAX_ANNOUNCE: usize = 4096;
/// A `Transactions` message we send stops growing past this many bytes.
const MAX_TXS_MESSAGE: usize = 100 * 1024;
/// A `PooledTransactions` answer stops growing past this many bytes.
const MAX_POOLED_ANSWER: usize = 2 * 1024 * 1024;
/// Most hashes served from one `GetPooledTransactions`.
const MAX_POOLED_SERVE: usize = 256;
/// Reputation a peer loses for a chain request it leaves unanswered.
const TIMEOUT_PENALTY: i64 = 10;

/// How the network is set up.
#[derive(Debug, Clone)]
pub struct NetworkConfig {
    pub secret_key: secp256k1::SecretKey,
    /// Where to listen; `None` for no inbound connections.
    pub listen: Option<SocketAddr>,
    /// Most peers in all; inbound ones may take all but a third of the slots.
    pub max_peers: usize,
    /// Peers dialled at start and kept connected (at most [`MAX_STATIC_PEERS`]).
    pub static_peers: Vec<Enode>,
    /// How inbound handshake slots are shared out (see [`crate::gate`]).
    pub handshakes: GateConfig,
    pub client_id: String,
    pub network_id: u64,
    pub fetcher: FetcherConfig,
    /// How long a peer has to answer a headers or bodies request.
    pub request_timeout: Duration,
}

impl NetworkConfig {
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
        }
    }
}

/// What `admin_peers` shows of one peer.
#[derive(Debug, Clone)]
pub struct PeerInfo {
    pub id: PeerId,
    pub addr: SocketAddr,
    pub client_id: String,
    pub eth_version: u32,
    pub inbound: bool,
    pub reputation: i64,
    pub head: B256,
    /// Its admission CPU account: spent, admitted, rejected, budget state.
    pub budget: Option<PeerBudget>,
}

/// Bounded memory of hashes a peer has or was sent.
#[derive(Debug, Default)]
struct KnownTxs {
    set: HashSet<B256, foldhash::fast::RandomState>,
    order: VecDeque<B256>,
}

impl KnownTxs {
    fn insert(&mut self, hash: B256) -> bool {
        if !self.set.insert(hash) {
            return false;
        }
        self.order.push_back(hash);
        if self.order.len() > KNOWN_TXS
            && let Some(old) = self.order.pop_front()
        {
            self.set.remove(&old);
        }
        true
    }

    #[cfg(test)]
    fn contains(&self, hash: &B256) -> bool {
        self.set.contains(hash)
    }
}

/// An outbound slot held by a dial in progress; freed on drop.
struct DialSlot(Arc<AtomicUsize>);

impl Drop for DialSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Which answer a pending request waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ReplyKind {
    Headers,
    Bodies,
}

/// A chain request waiting for its answer.
struct Pending {
    kind: ReplyKind,
    reply: oneshot::Sender<Vec<Bytes>>,
}

/// Removes a pending request when its caller stops waiting.
struct PendingEntry {
    peer: Arc<Peer>,
    id: u64,
}

impl Drop for PendingEntry {
    fn drop(&mut self) {
        self.peer.pending.lock().remove(&self.id);
    }
}

/// What a peer says of its chain: the head of its Status, then of its range updates.
#[derive(Debug, Clone, Copy)]
struct ChainStatus {
    head: B256,
    range: Option<(u64, u64)>,
}

/// A connected peer as the rest of the node sees it.
struct Peer {
    info: PeerInfo,
    framing: session::Framing,
    out: mpsc::Sender<Vec<u8>>,
    close: watch::Sender<Option<DisconnectReason>>,
    known: Mutex<KnownTxs>,
    reputation: AtomicI64,
    /// Batches of this peer's txs, admitted in arrival order by one worker: a sender's
    /// nonces sent in order stay in order.
    admissions: mpsc::Sender<AdmissionJob>,
    /// Our chain requests awaiting its answer, by request id.
    pending: Mutex<Map<u64, Pending>>,
    /// One permit per chain request in flight (at most [`MAX_IN_FLIGHT`]).
    request_slots: Arc<Semaphore>,
    chain_status: Mutex<ChainStatus>,
}

impl Peer {
    fn send(&self, frame: Vec<u8>) -> bool {
        self.out.try_send(frame).is_ok()
    }

    fn disconnect(&self, reason: DisconnectReason) {
        self.close.send_if_modified(|r| {
            if r.is_none() {
                *r = Some(reason);
                true
            } else {
                false
            }
        });
    }
}

/// One message's transactions on their way into the pool.
struct AdmissionJob {
    txs: Vec<(Option<B256>, TxInput)>,
    /// Fetched (a `PooledTransactions` reply): the fetcher learns the outcome.
    fetched: bool,
}

struct Inner {
    cfg: NetworkConfig,
    local: LocalIdentity,
    chain: Chain,
    pool: Pool,
    synced: Arc<AtomicBool>,
    filter: ForkFilter,
    genesis_timestamp: u64,
    peers: RwLock<Map<PeerId, Arc<Peer>>>,
    fetcher: Mutex<Fetcher>,
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
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        source: std::io::Error,
    },
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
        let inner = Arc::new(Inner {
            fetcher: Mutex::new(Fetcher::new(cfg.fetcher)),
            static_peers: Mutex::new(StaticPeers::default()),
            cfg,
            local,
            chain,
            pool,
            synced,
            filter,
            genesis_timestamp: genesis.timestamp,
            peers: RwLock::new(Map::default()),
            listen_addr: Mutex::new(listen_addr),
            gate: HandshakeGate::new(gate_cfg),
            blob_rules: Mutex::new((B256::ZERO, None)),
            range_sent: AtomicU64::new(start_head),
            dialing: Arc::new(AtomicUsize::new(0)),
            next_request: AtomicU64::new(1),
            snap: crate::snap::SnapServer::default(),
        });
        let net = Network { inner };
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
        Ok(net)
    }

    pub fn local_id(&self) -> PeerId {
        self.inner.local.id
    }

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

    pub fn network_id(&self) -> u64 {
        self.inner.cfg.network_id
    }

    pub fn genesis_hash(&self) -> B256 {
        self.inner.chain.genesis_hash()
    }

    pub fn client_id(&self) -> &str {
        &self.inner.cfg.client_id
    }

    pub fn peer_count(&self) -> usize {
        self.inner.peers.read().len()
    }

    pub fn peers(&self) -> Vec<PeerInfo> {
        self.inner
            .peers
            .read()
            .values()
            .map(|p| PeerInfo {
                reputation: p.reputation.load(Ordering::Relaxed),
                budget: self.inner.pool.budgets().peer(&p.info.id, Instant::now()),
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
                // The whole handshake, RLPx to Status, within the gate's time.
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

    /// Registers the peer, then reads from it until it leaves or is dropped.
    async fn run_peer(self, session: Session<TcpStream>, addr: SocketAddr, inbound: bool) {
        let Session {
            mut reader,
            mut writer,
            framing,
            hello,
            status,
            remote_id,
        } = session;
        let (out_tx, mut out_rx) = mpsc::channel::<Vec<u8>>(PEER_QUEUE);
        let (close_tx, mut close_rx) = watch::channel(None);
        let (admit_tx, admit_rx) = mpsc::channel::<AdmissionJob>(ADMISSION_QUEUE);
        let peer = Arc::new(Peer {
            info: PeerInfo {
                id: remote_id,
                addr,
                client_id: hello.client_id.clone(),
                eth_version: framing.version,
                inbound,
                reputation: 0,
                head: status.head,
                budget: None,
            },
            framing,
            out: out_tx,
            close: close_tx,
            known: Mutex::new(KnownTxs::default()),
            reputation: AtomicI64::new(0),
            admissions: admit_tx,
            pending: Mutex::new(Map::default()),
            request_slots: Arc::new(Semaphore::new(MAX_IN_FLIGHT)),
            chain_status: Mutex::new(ChainStatus {
                head: status.head,
                range: (framing.version >= crate::eth::ETH69)
                    .then_some((status.earliest, status.latest)),
            }),
        });
        // Admission to the peer table.
        let refused = {
            let mut peers = self.inner.peers.write();
            if remote_id == self.inner.local.id {
                Some(DisconnectReason::ConnectedToSelf)
            } else if peers.contains_key(&remote_id) {
                Some(DisconnectReason::AlreadyConnected)
            } else if peers.len() >= self.inner.cfg.max_peers
                || (inbound
                    && peers.values().filter(|p| p.info.inbound).count()
                        >= max_inbound(self.inner.cfg.max_peers))
            {
                Some(DisconnectReason::TooManyPeers)
            } else {
                peers.insert(remote_id, peer.clone());
                None
            }
        };
        if let Some(reason) = refused {
            let _ = tokio::time::timeout(
                Duration::from_secs(1),
                writer.send(&framing.disconnect(reason)),
            )
            .await;
            tracing::debug!(peer = %short(&remote_id), %addr, %reason, "peer refused");
            return;
        }
        // Its admission budget: fresh, or its subnet's if a peer from there left lately.
        self.inner
            .pool
            .budgets()
            .attach_peer(remote_id, addr.ip(), Instant::now());
        metrics::gauge!("moat_p2p_peers").set(self.inner.peers.read().len() as f64);
        tracing::info!(peer = %short(&remote_id), %addr, inbound, client = %hello.client_id, eth = framing.version, "peer connected");

        // Writer: queued frames, pings, and the closing Disconnect.
        let mut writer_close = close_rx.clone();
        let writer_task = tokio::spawn(async move {
            let mut ping = tokio::time::interval(PING_INTERVAL);
            ping.tick().await;
            loop {
                tokio::select! {
                    frame = out_rx.recv() => match frame {
                        Some(f) => if writer.send(&f).await.is_err() { break },
                        None => break,
                    },
                    _ = ping.tick() => if writer.send(&framing.ping()).await.is_err() { break },
                    _ = writer_close.changed() => {
                        let reason = (*writer_close.borrow()).unwrap_or(DisconnectReason::Requested);
                        let _ = tokio::time::timeout(
                            Duration::from_secs(1),
                            writer.send(&framing.disconnect(reason)),
                        ).await;
                        break;
                    }
                }
            }
        });

        let admission_task = tokio::spawn(self.clone().admission_worker(peer.clone(), admit_rx));
        // A new peer hears of the pending transactions it may want.
        self.announce_pool_to(&peer);

        let end = loop {
            let payload = tokio::select! {
                r = tokio::time::timeout(READ_TIMEOUT, reader.recv()) => match r {
                    Ok(Ok(p)) => p,
                    Ok(Err(e)) => break format!("read: {e}"),
                    Err(_) => {
                        peer.disconnect(DisconnectReason::Timeout);
                        break "read timeout".to_string();
                    }
                },
                _ = close_rx.changed() => {
                    break format!("dropped: {}", close_rx.borrow().unwrap_or(DisconnectReason::Requested));
                }
            };
            let msg = match framing.decode(&payload) {
                Ok(m) => m,
                Err(e) => {
                    self.fault(&peer, "malformed message", &e.to_string());
                    continue;
                }
            };
            match msg {
                Incoming::Ping => {
                    peer.send(framing.pong());
                }
                Incoming::Pong => {}
                Incoming::Disconnect(r) => {
                    break format!(
                        "peer disconnected: {}",
                        r.map_or("unknown reason", |r| r.as_str())
                    );
                }
                Incoming::Eth(m) => {
                    metrics::counter!("moat_p2p_messages_total", "msg" => m.name()).increment(1);
                    self.handle(&peer, m).await;
                }
                Incoming::Snap(m) => {
                    metrics::counter!("moat_p2p_messages_total", "msg" => m.name()).increment(1);
                    // Served off the runtime (disk reads, up to the time budget); the
                    // peer's next message waits for this answer, as geth's handler does.
                    let (chain, snap) = (self.inner.chain.clone(), self.inner.snap.clone());
                    let answer = tokio::task::spawn_blocking(move || snap.answer(&chain, &m)).await;
                    if let Ok(Some(answer)) = answer {
                        peer.send(framing.snap(&answer));
                    }
                }
            }
        };
        self.inner.peers.write().remove(&remote_id);
        self.inner
            .pool
            .budgets()
            .detach_peer(&remote_id, Instant::now());
        // Callers waiting for its answers learn now that none will come.
        peer.pending.lock().clear();
        admission_task.abort();
        self.inner.fetcher.lock().remove_peer(remote_id);
        metrics::gauge!("moat_p2p_peers").set(self.inner.peers.read().len() as f64);
        // Let the writer send a pending Disconnect, then stop it.
        let _ = tokio::time::timeout(Duration::from_secs(2), async {
            peer.disconnect(DisconnectReason::Requested);
            let _ = writer_task.await;
        })
        .await;
        // A peer that left in good standing is let in first next time.
        if peer.reputation.load(Ordering::Relaxed) >= 0 {
            self.inner.gate.remember(addr.ip());
        }
        tracing::info!(peer = %short(&remote_id), %addr, why = %end, "peer disconnected");
        metrics::counter!("moat_p2p_disconnects_total").increment(1);
    }

    /// A protocol fault: disconnect with subprotocol error. `kind` is a fixed label (the
    /// metric's), `detail` what exactly happened (the log's).
    fn fault(&self, peer: &Peer, kind: &'static str, detail: &str) {
        tracing::info!(peer = %short(&peer.info.id), addr = %peer.info.addr, kind, detail, "dropping peer for a protocol fault");
        metrics::counter!("moat_p2p_peer_faults_total", "kind" => kind).increment(1);
        // Nothing more is asked of it: its other announcements go to other peers.
        self.inner.fetcher.lock().remove_peer(peer.info.id);
        peer.disconnect(DisconnectReason::SubprotocolError);
    }

    fn penalize(&self, peer: &Peer, points: i64, why: &str) {
        let score = peer.reputation.fetch_sub(points, Ordering::Relaxed) - points;
        if score <= REPUTATION_FLOOR {
            tracing::info!(peer = %short(&peer.info.id), score, why, "dropping peer: reputation too low");
            metrics::counter!("moat_p2p_peer_faults_total", "kind" => "reputation").increment(1);
            peer.disconnect(DisconnectReason::UselessPeer);
        }
    }

    async fn handle(&self, peer: &Arc<Peer>, msg: EthMessage) {
        let store = self.inner.chain.store();
        match msg {
            EthMessage::Status(_) => self.fault(peer, "second status", ""),
            EthMessage::NewBlockHashes | EthMessage::NewBlock => {}
            EthMessage::GetBlockHeaders {
                request_id,
                origin,
                amount,
                skip,
                reverse,
            } => {
                let headers = serve::headers(store, origin, amount, skip, reverse);
                peer.send(peer.framing.eth(&EthMessage::BlockHeaders {
                    request_id,
                    headers,
                }));
            }
            EthMessage::GetBlockBodies { request_id, hashes } => {
                let bodies = serve::bodies(store, &hashes);
                peer.send(
                    peer.framing
                        .eth(&EthMessage::BlockBodies { request_id, bodies }),
                );
            }
            EthMessage::GetReceipts {
                request_id,
                first_index,
                hashes,
            } => {
                let (blocks, incomplete) =
                    serve::receipts(store, peer.framing.version, first_index, &hashes);
                peer.send(peer.framing.eth(&EthMessage::Receipts {
                    request_id,
                    incomplete,
                    blocks,
                }));
            }
            EthMessage::BlockHeaders {
                request_id,
                headers,
            } => self.on_reply(peer, ReplyKind::Headers, request_id, headers),
            EthMessage::BlockBodies { request_id, bodies } => {
                self.on_reply(peer, ReplyKind::Bodies, request_id, bodies)
            }
            EthMessage::Receipts { .. } => {
                // We ask for none; a stray answer is ignored.
            }
            EthMessage::BlockRangeUpdate {
                earliest,
                latest,
                latest_hash,
            } => {
                if earliest > latest {
                    self.fault(peer, "invalid block range", "earliest > latest");
                } else {
                    *peer.chain_status.lock() = ChainStatus {
                        head: latest_hash,
                        range: Some((earliest, latest)),
                    };
                }
            }
            EthMessage::GetPooledTransactions { request_id, hashes } => {
                let mut txs = Vec::new();
                let mut bytes = 0;
                for h in hashes.iter().take(MAX_POOLED_SERVE) {
                    if bytes >= MAX_POOLED_ANSWER {
                        break;
                    }
                    if let Some(tx) = self.inner.pool.get(h) {
                        let env = tx.tx.encoded_2718();
                        bytes += env.len();
                        txs.push(Bytes::from(env));
                        peer.known.lock().insert(*h);
                    }
                }
                peer.send(
                    peer.framing
                        .eth(&EthMessage::PooledTransactions { request_id, txs }),
                );
            }
            EthMessage::Transactions(txs) => {
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
                {
                    let mut known = peer.known.lock();
                    for (h, _) in &admitted {
                        if let Some(h) = h {
                            known.insert(*h);
                        }
                    }
                }
                self.spawn_admission(
                    peer,
                    admitted
                        .into_iter()
                        .map(|(h, e)| (h, TxInput::Raw(e)))
                        .collect(),
                    false,
                )
                .await;
            }
            EthMessage::NewPooledTransactionHashes(a) => {
                if !self.inner.synced.load(Ordering::Acquire) {
                    return;
                }
                // Announcements cost lookups in the pool and the fetcher: measured and
                // charged like admission, and a peer in debt waits here, in its reader.
                if !self.await_budget(peer).await {
                    return;
                }
                let meter = CpuMeter::start();
                self.on_announcement(peer, a);
                self.inner.pool.charge(TxOrigin::Peer(peer.info.id), meter);
            }
            EthMessage::PooledTransactions { request_id, txs } => {
                self.on_pooled(peer, request_id, txs).await;
            }
        }
    }

    fn on_announcement(&self, peer: &Arc<Peer>, a: Announcement) {
        let pool = &self.inner.pool;
        let mut entries = Vec::with_capacity(a.len());
        {
            let mut known = peer.known.lock();
            for ((hash, ty), size) in a.hashes.iter().zip(&a.types).zip(&a.sizes) {
                known.insert(*hash);
                if !pool.is_known_or_importing(hash) {
                    entries.push((
                        *hash,
                        Meta {
                            ty: *ty,
                            size: *size,
                        },
                    ));
                }
            }
        }
        let requests = {
            let mut f = self.inner.fetcher.lock();
            let dropped = f.announce(peer.info.id, entries);
            if dropped > 0 {
                metrics::counter!("moat_p2p_announcements_dropped_total").increment(dropped as u64);
            }
            f.schedule(Instant::now())
        };
        self.send_requests(requests);
    }

    fn send_requests(&self, requests: Vec<FetchRequest>) {
        let peers = self.inner.peers.read();
        for r in requests {
            if let Some(p) = peers.get(&r.peer) {
                metrics::counter!("moat_p2p_fetch_requests_total").increment(1);
                p.send(p.framing.eth(&EthMessage::GetPooledTransactions {
                    request_id: r.request_id,
                    hashes: r.hashes,
                }));
            }
        }
    }

    /// `validate_requested` and `validate_cheap` on a `PooledTransactions` reply, then
    /// admission.
    async fn on_pooled(&self, peer: &Arc<Peer>, request_id: u64, txs: Vec<Bytes>) {
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
        // Blob sidecars get their structural checks here, before the pool's dedup and
        // KZG: a malformed or mismatched sidecar costs the peer its connection.
        let rules = self.blob_rules();
        let mut admit = Vec::with_capacity(inputs.len());
        {
            let mut known = peer.known.lock();
            for (hash, env) in inputs {
                known.insert(hash);
                if env.first() != Some(&(TxType::Eip4844 as u8)) {
                    admit.push((Some(hash), TxInput::Raw(env)));
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
                        drop(known);
                        self.inner.fetcher.lock().peer_fault(peer.info.id, &hash);
                        self.fault(peer, "bad sidecar", &format!("blob tx {hash}: {why}"));
                        self.reschedule();
                        return;
                    }
                }
            }
        }
        self.spawn_admission(peer, admit, true).await;
    }

    fn blob_rules(&self) -> Option<BlobRules> {
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

    fn reschedule(&self) {
        let requests = self.inner.fetcher.lock().schedule(Instant::now());
        self.send_requests(requests);
    }

    /// Queues a message's transactions for this peer's admission worker; waits only
    /// when the peer already has a full queue, so a flooding peer is slowed, not the node.
    async fn spawn_admission(
        &self,
        peer: &Arc<Peer>,
        txs: Vec<(Option<B256>, TxInput)>,
        fetched: bool,
    ) {
        let _ = peer.admissions.send(AdmissionJob { txs, fetched }).await;
    }

    /// Admits one peer's transactions in the order they came and applies the
    /// consequences of what the pool says. Each chunk of a message is measured in CPU
    /// and charged to the peer; before each, the peer's budget is asked, and a peer in
    /// debt waits: its queue fills and its reader stops reading.
    async fn admission_worker(self, peer: Arc<Peer>, mut jobs: mpsc::Receiver<AdmissionJob>) {
        let origin = TxOrigin::Peer(peer.info.id);
        let pool = &self.inner.pool;
        while let Some(job) = jobs.recv().await {
            let fetched = job.fetched;
            let mut txs = job.txs.into_iter().peekable();
            while txs.peek().is_some() {
                if !self.await_budget(&peer).await {
                    return;
                }
                let chunk: Vec<_> = txs.by_ref().take(ADMISSION_CHUNK).collect();
                let mut meter = CpuMeter::start();
                // Senders of a large chunk are recovered on all cores first; the in-order
                // admissions below then find them cached.
                let raw: Vec<Bytes> = chunk
                    .iter()
                    .filter_map(|(_, input)| match input {
                        TxInput::Raw(b) => Some(b.clone()),
                        TxInput::Decoded(_) => None,
                    })
                    .collect();
                pool.warm_senders(&raw, &mut meter).await;
                for (hash, input) in chunk {
                    let result = pool.add_metered(input, origin, &mut meter).await;
                    let cost = match &result {
                        Ok(_) => PeerCost::None,
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
                            return;
                        }
                        (PeerCost::Penalty, Err(r)) => {
                            self.penalize(&peer, INVALID_TX_PENALTY, r.reason())
                        }
                        _ => {}
                    }
                }
                pool.charge(origin, meter);
            }
            if fetched {
                self.reschedule();
            }
        }
    }

    /// Waits while the peer's admission budget says so; `false` when it says to drop
    /// the peer (its CPU bought almost no transactions), which is then done.
    async fn await_budget(&self, peer: &Peer) -> bool {
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
    async fn fetch_timer(self) {
        let mut tick = tokio::time::interval(Duration::from_millis(500));
        loop {
            tick.tick().await;
            let now = Instant::now();
            let requests = {
                let mut f = self.inner.fetcher.lock();
                let late = f.expire(now);
                if !late.is_empty() {
                    metrics::counter!("moat_p2p_fetch_timeouts_total").increment(late.len() as u64);
                }
                f.schedule(now)
            };
            self.send_requests(requests);
        }
    }

    /// Sends a new peer the hashes of the pending pool (announcements only).
    fn announce_pool_to(&self, peer: &Arc<Peer>) {
        let pool = &self.inner.pool;
        let mut ann = Announcement::default();
        let mut known = peer.known.lock();
        for hash in pool.hashes() {
            let Some(tx) = pool.get(&hash) else { continue };
            // Pending non-blob txs, as geth does; blob txs travel by fresh announcements.
            if tx.is_blob()
                || pool.subpool_of(&hash) != Some(moat_blockchain::mempool::SubPool::Pending)
            {
                continue;
            }
            known.insert(hash);
            ann.push(tx.tx.tx_type() as u8, tx.size() as u32, hash);
            if ann.len() >= MAX_ANNOUNCE {
                peer.send(peer.framing.eth(&EthMessage::NewPooledTransactionHashes(
                    std::mem::take(&mut ann),
                )));
            }
        }
        if !ann.is_empty() {
            peer.send(
                peer.framing
                    .eth(&EthMessage::NewPooledTransactionHashes(ann)),
            );
        }
    }

    /// Gossips new pending transactions: whole to ⌈√peers⌉ peers (small non-blob ones),
    /// by hash to the rest. A peer is never sent a hash it has or was sent.
    async fn broadcast_loop(self) {
        let mut events = self.inner.pool.subscribe_pending();
        loop {
            let first = match events.recv().await {
                Ok(h) => h,
                Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                    metrics::counter!("moat_p2p_broadcast_lagged_total").increment(n);
                    continue;
                }
                Err(_) => return,
            };
            let mut batch = vec![first];
            while batch.len() < 4096 {
                match events.try_recv() {
                    Ok(h) => batch.push(h),
                    Err(tokio::sync::broadcast::error::TryRecvError::Lagged(_)) => continue,
                    Err(_) => break,
                }
            }
            self.broadcast(&batch);
        }
    }

    fn broadcast(&self, hashes: &[B256]) {
        let peers: Vec<Arc<Peer>> = self.inner.peers.read().values().cloned().collect();
        if peers.is_empty() {
            return;
        }
        let full_count = (peers.len() as f64).sqrt().ceil() as usize;
        let mut full: Vec<Vec<Bytes>> = vec![Vec::new(); peers.len()];
        let mut anns: Vec<Announcement> = vec![Announcement::default(); peers.len()];
        for hash in hashes {
            let Some(tx) = self.inner.pool.get(hash) else {
                continue;
            };
            let whole = !tx.is_blob() && tx.size() <= MAX_BROADCAST_TX_SIZE;
            let mut sent_full = 0;
            let env = whole.then(|| Bytes::from(tx.tx.encoded_2718()));
            for (i, p) in peers.iter().enumerate() {
                if TxOrigin::Peer(p.info.id) == tx.origin || !p.known.lock().insert(*hash) {
                    continue;
                }
                match &env {
                    Some(e) if sent_full < full_count => {
                        full[i].push(e.clone());
                        sent_full += 1;
                    }
                    _ => anns[i].push(tx.tx.tx_type() as u8, tx.size() as u32, *hash),
                }
            }
        }
        for (i, p) in peers.iter().enumerate() {
            let mut batch = Vec::new();
            let mut bytes = 0;
            for e in full[i].drain(..) {
                if bytes + e.len() > MAX_TXS_MESSAGE && !batch.is_empty() {
                    self.send_or_count(p, EthMessage::Transactions(std::mem::take(&mut batch)));
                    bytes = 0;
                }
                bytes += e.len();
                batch.push(e);
            }
            if !batch.is_empty() {
                self.send_or_count(p, EthMessage::Transactions(batch));
            }
            let ann = std::mem::take(&mut anns[i]);
            for chunk in 0..ann.len().div_ceil(MAX_ANNOUNCE) {
                let r = chunk * MAX_ANNOUNCE..((chunk + 1) * MAX_ANNOUNCE).min(ann.len());
                self.send_or_count(
                    p,
                    EthMessage::NewPooledTransactionHashes(Announcement {
                        types: ann.types[r.clone()].to_vec(),
                        sizes: ann.sizes[r.clone()].to_vec(),
                        hashes: ann.hashes[r].to_vec(),
                    }),
                );
            }
        }
    }

    fn send_or_count(&self, p: &Peer, msg: EthMessage) {
        if !p.send(p.framing.eth(&msg)) {
            metrics::counter!("moat_p2p_broadcasts_dropped_total").increment(1);
        }
    }

    /// The local identity (for tools that play a peer of this node).
    pub fn status_for(&self, version: u32) -> Status {
        self.our_status(version).0
    }
}

/// Chain requests to peers, for the syncer (see [`crate::requests`]).
impl Network {
    /// The connected peers with what they say of their chains, for picking whom to ask.
    pub fn sync_peers(&self) -> Vec<SyncPeer> {
        self.inner
            .peers
            .read()
            .values()
            .map(|p| {
                let status = *p.chain_status.lock();
                SyncPeer {
                    id: p.info.id,
                    eth_version: p.info.eth_version,
                    head: status.head,
                    range: status.range,
                    in_flight: MAX_IN_FLIGHT - p.request_slots.available_permits(),
                    reputation: p.reputation.load(Ordering::Relaxed),
                }
            })
            .collect()
    }

    /// Asks `peer` for headers; the answer is checked against the request
    /// ([`requests::check_headers`]) and a peer that breaks the rules is dropped. An
    /// empty answer means the peer does not have them.
    pub async fn get_headers(
        &self,
        peer: &PeerId,
        req: HeadersRequest,
    ) -> Result<Vec<SealedHeader>, RequestError> {
        if req.amount > MAX_HEADERS {
            return Err(RequestError::TooLarge(req.amount as usize));
        }
        let (p, raw) = self
            .request(peer, ReplyKind::Headers, |request_id| {
                EthMessage::GetBlockHeaders {
                    request_id,
                    origin: req.origin,
                    amount: req.amount,
                    skip: req.skip,
                    reverse: req.reverse,
                }
            })
            .await?;
        requests::check_headers(&req, raw).map_err(|why| {
            self.fault(&p, "bad block headers", &why);
            RequestError::BadAnswer(why)
        })
    }

    /// Asks `peer` for the bodies of `headers` and returns the blocks it sent, each
    /// checked against its header's roots ([`requests::check_bodies`]); a peer may leave
    /// some out, one that sends a body no header commits to is dropped.
    pub async fn get_bodies(
        &self,
        peer: &PeerId,
        headers: &[SealedHeader],
    ) -> Result<Vec<Block>, RequestError> {
        if headers.len() > MAX_BODIES {
            return Err(RequestError::TooLarge(headers.len()));
        }
        let hashes: Vec<B256> = headers.iter().map(|h| h.hash).collect();
        let (p, raw) = self
            .request(peer, ReplyKind::Bodies, |request_id| {
                EthMessage::GetBlockBodies { request_id, hashes }
            })
            .await?;
        requests::check_bodies(headers, raw).map_err(|why| {
            self.fault(&p, "bad block bodies", &why);
            RequestError::BadAnswer(why)
        })
    }

    /// A fault the caller found in what `peer` sent (drops the peer).
    pub fn report_fault(&self, peer: &PeerId, detail: &str) {
        let p = self.inner.peers.read().get(peer).cloned();
        if let Some(p) = p {
            self.fault(&p, "bad chain data", detail);
        }
    }

    /// Sends one request and waits for its answer (bounded per peer and in time).
    async fn request(
        &self,
        peer: &PeerId,
        kind: ReplyKind,
        make: impl FnOnce(u64) -> EthMessage,
    ) -> Result<(Arc<Peer>, Vec<Bytes>), RequestError> {
        let p = self
            .inner
            .peers
            .read()
            .get(peer)
            .cloned()
            .ok_or(RequestError::NotConnected)?;
        let _slot: OwnedSemaphorePermit = p
            .request_slots
            .clone()
            .try_acquire_owned()
            .map_err(|_| RequestError::Busy)?;
        let id = self.inner.next_request.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        p.pending.lock().insert(id, Pending { kind, reply: tx });
        // Whatever ends the wait (answer, timeout, the caller giving up), the entry goes.
        let _entry = PendingEntry {
            peer: p.clone(),
            id,
        };
        let msg = make(id);
        metrics::counter!("moat_p2p_chain_requests_total", "msg" => msg.name()).increment(1);
        if !p.send(p.framing.eth(&msg)) {
            return Err(RequestError::Busy);
        }
        match tokio::time::timeout(self.inner.cfg.request_timeout, rx).await {
            Ok(Ok(answer)) => Ok((p, answer)),
            Ok(Err(_)) => Err(RequestError::Disconnected),
            Err(_) => {
                metrics::counter!("moat_p2p_chain_request_timeouts_total").increment(1);
                self.penalize(&p, TIMEOUT_PENALTY, "chain request timed out");
                Err(RequestError::Timeout)
            }
        }
    }

    /// Hands an answer to the request waiting for it. An answer to nothing (late, after
    /// its timeout, or never asked) is dropped; one of the wrong kind is a fault.
    fn on_reply(&self, peer: &Arc<Peer>, kind: ReplyKind, request_id: u64, items: Vec<Bytes>) {
        let pending = peer.pending.lock().remove(&request_id);
        match pending {
            Some(p) if p.kind == kind => {
                let _ = p.reply.send(items);
            }
            Some(_) => self.fault(
                peer,
                "delivery mismatch",
                &format!("answer of the wrong kind to request {request_id}"),
            ),
            None => {
                tracing::debug!(peer = %short(&peer.info.id), request_id, ?kind, "unsolicited chain answer");
                metrics::counter!("moat_p2p_unsolicited_replies_total").increment(1);
            }
        }
    }
}

/// Inbound peers may take all slots but a third, kept for the peers this node dials
/// (geth's dial ratio): a crowd of inbound connections cannot lock out static peers.
/// Least and most pause after a failed accept.
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

/// A log line at most once per period; the ones held back are counted into the next.
struct Throttle {
    period: Duration,
    state: Mutex<(Option<Instant>, u64)>,
}

impl Throttle {
    const fn new(period: Duration) -> Self {
        Self {
            period,
            state: Mutex::new((None, 0)),
        }
    }

    fn allow(&self) -> Option<u64> {
        let mut s = self.state.lock();
        let now = Instant::now();
        match s.0 {
            Some(last) if now.duration_since(last) < self.period => {
                s.1 += 1;
                None
            }
            _ => {
                s.0 = Some(now);
                Some(std::mem::take(&mut s.1))
            }
        }
    }
}

fn max_inbound(max_peers: usize) -> usize {
    max_peers - max_peers / 3
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

    #[test]
    fn known_txs_are_bounded() {
        let mut k = KnownTxs::default();
        for i in 0..(KNOWN_TXS + 10) as u64 {
            k.insert(B256::from(alloy_primitives::U256::from(i)));
        }
        assert_eq!(k.set.len(), KNOWN_TXS);
        assert!(!k.contains(&B256::ZERO));
        assert!(k.contains(&B256::from(alloy_primitives::U256::from(KNOWN_TXS as u64))));
        assert!(!k.insert(B256::from(alloy_primitives::U256::from(KNOWN_TXS as u64))));
    }
}
