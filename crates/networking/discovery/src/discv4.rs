//! The discv4 service: one UDP socket, the node table, and the tasks that keep it
//! filled.
//!
//! Rules, as geth's `p2p/discover/v4_udp.go`:
//! - Every Ping is answered with a Pong echoing its hash and the address it came from.
//!   A sender we have no recent Pong from (no endpoint proof) is pinged back, and enters
//!   the table once it answers.
//! - A node is bonded for 12 hours after a Pong from it that echoes one of our Pings,
//!   keyed by (id, IP). FindNode and ENRRequest from unbonded nodes are dropped: a
//!   spoofed source address must not make us send big answers to a victim.
//! - Replies (Pong, Neighbors, ENRResponse) are taken only if they match a request we
//!   sent to that id at that IP; anything else is unsolicited and dropped.
//! - Expired packets (expiration before now) are dropped.
//! - Neighbors go out in packets of at most 12 nodes (under 1280 bytes), only nodes the
//!   asker may be told of (no LAN addresses to a WAN asker).
//! - Before asking a node for neighbors, we make sure it has bonded us (we ping it and
//!   wait for its ping back), or it would drop our FindNode.
//! - EIP-868: Ping and Pong carry our record's sequence number; a node whose Pong
//!   shows a newer record than ours of it is sent an ENRRequest.

use crate::enr::{Enr, EnrFields};
use crate::packet::{
    self, Endpoint, EnrRequest, EnrResponse, FindNode, MAX_NEIGHBORS, MAX_PACKET_SIZE, Neighbor,
    Neighbors, Packet, Ping, Pong,
};
use crate::table::{AddResult, BUCKET_SIZE, Rng, Table};
use crate::{ForkId, NodeId, NodeRecord, node_hash, node_id, relay_allowed};
use alloy_primitives::B256;
use parking_lot::{Mutex, RwLock};
use secp256k1::{SECP256K1, SecretKey};
use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::net::UdpSocket;
use tokio::sync::{Semaphore, broadcast, mpsc};
use tokio::task::{JoinHandle, JoinSet};

/// Kademlia's concurrency factor: FindNode requests in flight per lookup.
pub const ALPHA: usize = 3;
/// Seconds a packet we send stays valid.
const EXPIRATION: u64 = 20;
/// Consecutive failed FindNode requests after which a node leaves the table (if its
/// bucket has others).
const MAX_FIND_FAILS: u32 = 5;
/// Bond records kept; past this the oldest go.
const MAX_BONDS: usize = 20_000;
/// Requests awaiting a reply at once.
const MAX_PENDING: usize = 4096;
/// Ping-backs to unbonded senders in flight at once.
const MAX_PING_BACKS: usize = 256;
/// Found-node notifications buffered per subscriber.
const EVENT_BUFFER: usize = 1024;

/// How discovery is set up.
#[derive(Debug, Clone)]
pub struct Discv4Config {
    /// Our node key: signs every packet and our record; its public key is our node id.
    pub secret_key: SecretKey,
    /// The UDP address to listen on.
    pub listen: SocketAddr,
    /// The address other nodes reach us at, when it differs from `listen` (`--nat
    /// extip:IP`); our record and Pings announce it.
    pub external_ip: Option<IpAddr>,
    /// Our RLPx (TCP) port, announced in the record and in Pings; 0 for none.
    pub tcp_port: u16,
    /// Nodes to start from.
    pub bootnodes: Vec<NodeRecord>,
    /// Our chain's EIP-2124 fork id, put in the record's `eth` entry.
    pub fork_id: Option<ForkId>,
    /// How long a request waits for its reply (geth: 500 ms).
    pub request_timeout: Duration,
    /// Average time between two liveness checks (geth: 3 s).
    pub ping_interval: Duration,
    /// Time between two table refreshes (a self lookup and three random ones), when
    /// the table is well filled (geth: 30 min).
    pub refresh_interval: Duration,
    /// Time between refreshes while the table holds fewer than 16 nodes.
    pub sparse_refresh_interval: Duration,
    /// How long a Pong keeps a node bonded.
    pub bond_expiration: Duration,
}

impl Discv4Config {
    /// Defaults (geth's timings) for `secret_key` listening on `listen`, announcing the same port for RLPx.
    pub fn new(secret_key: SecretKey, listen: SocketAddr) -> Self {
        Discv4Config {
            secret_key,
            listen,
            external_ip: None,
            tcp_port: listen.port(),
            bootnodes: Vec::new(),
            fork_id: None,
            request_timeout: Duration::from_millis(500),
            ping_interval: Duration::from_secs(3),
            refresh_interval: Duration::from_secs(30 * 60),
            sparse_refresh_interval: Duration::from_secs(30),
            bond_expiration: Duration::from_secs(12 * 3600),
        }
    }
}

/// Why discovery could not start.
#[derive(Debug, thiserror::Error)]
pub enum Discv4Error {
    /// The UDP socket could not be bound.
    #[error("cannot bind UDP {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// The OS error.
        source: std::io::Error,
    },
    /// Our ENR could not be built or signed.
    #[error("cannot sign our node record: {0}")]
    Record(#[from] crate::EnrError),
}

/// Why a request to another node failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    /// No reply within `request_timeout`.
    #[error("no reply in time")]
    Timeout,
    /// The pending-reply table is full.
    #[error("too many requests in flight")]
    Busy,
    /// The UDP send failed (the OS error as text).
    #[error("cannot send: {0}")]
    Send(String),
    /// The ENRResponse's record is for another node id.
    #[error("the record returned is not the node's")]
    WrongRecord,
}

/// What we know of a (node, IP) pair's endpoint proofs.
#[derive(Debug, Clone, Copy)]
struct Bond {
    /// Last Ping from it: it has our Pong, so it has bonded us.
    ping_received: Option<Instant>,
    /// Last Pong from it matching our Ping: we have bonded it.
    pong_received: Option<Instant>,
    find_fails: u32,
    touched: Instant,
}

#[derive(Debug, Default)]
struct Bonds {
    map: HashMap<(NodeId, IpAddr), Bond>,
}

impl Bonds {
    fn entry(&mut self, id: NodeId, ip: IpAddr, now: Instant) -> &mut Bond {
        if self.map.len() >= MAX_BONDS && !self.map.contains_key(&(id, ip)) {
            // Keep the most recently touched nine tenths.
            let mut times: Vec<Instant> = self.map.values().map(|b| b.touched).collect();
            times.sort_unstable();
            let cut = times[times.len() / 10];
            self.map.retain(|_, b| b.touched > cut);
        }
        let b = self.map.entry((id, ip)).or_insert(Bond {
            ping_received: None,
            pong_received: None,
            find_fails: 0,
            touched: now,
        });
        b.touched = now;
        b
    }

    fn get(&self, id: &NodeId, ip: &IpAddr) -> Option<&Bond> {
        self.map.get(&(*id, *ip))
    }
}

/// Statements of other nodes about our endpoint, one per reporting host.
#[derive(Debug, Default)]
struct Predictor {
    statements: HashMap<IpAddr, (SocketAddr, Instant)>,
}

impl Predictor {
    const WINDOW: Duration = Duration::from_secs(300);
    const MIN_STATEMENTS: usize = 10;
    const MAX_HOSTS: usize = 1024;

    /// Records a statement; returns the endpoint most hosts agree on, if enough do.
    fn add(&mut self, reporter: IpAddr, endpoint: SocketAddr, now: Instant) -> Option<SocketAddr> {
        if self.statements.len() >= Self::MAX_HOSTS && !self.statements.contains_key(&reporter) {
            self.statements
                .retain(|_, (_, t)| now.saturating_duration_since(*t) < Self::WINDOW);
            if self.statements.len() >= Self::MAX_HOSTS {
                return None;
            }
        }
        self.statements.insert(reporter, (endpoint, now));
        let mut counts: HashMap<SocketAddr, usize> = HashMap::new();
        for (e, t) in self.statements.values() {
            if now.saturating_duration_since(*t) < Self::WINDOW {
                *counts.entry(*e).or_default() += 1;
            }
        }
        counts
            .into_iter()
            .filter(|(_, c)| *c >= Self::MIN_STATEMENTS)
            .max_by_key(|(_, c)| *c)
            .map(|(e, _)| e)
    }
}

/// What a pending request waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    Pong(B256),
    Neighbors,
    EnrResponse(B256),
}

struct PendingRequest {
    key: u64,
    id: NodeId,
    ip: IpAddr,
    expect: Expect,
    tx: mpsc::Sender<Packet>,
}

struct Inner {
    socket: UdpSocket,
    key: SecretKey,
    id: NodeId,
    local_addr: SocketAddr,
    cfg: Discv4Config,
    enr: RwLock<Enr>,
    enr_fields: Mutex<EnrFields>,
    predictor: Mutex<Predictor>,
    table: Mutex<Table>,
    bonds: Mutex<Bonds>,
    pending: Mutex<Vec<PendingRequest>>,
    next_key: AtomicU64,
    events: broadcast::Sender<NodeRecord>,
    /// Inbound nodes join the table only once the first refresh is done (geth's rule:
    /// a flood of Pings must not fill an empty table before bootnodes answer).
    init_done: AtomicBool,
    ping_backs: Arc<Semaphore>,
    enr_in_flight: Mutex<HashSet<NodeId>>,
    rng: Mutex<Rng>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
}

/// A running discv4 service. Cloning shares it.
#[derive(Clone)]
pub struct Discv4 {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Discv4 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Discv4")
            .field("addr", &self.inner.local_addr)
            .field("table", &self.table_len())
            .finish()
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn unix_millis() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// IPv4-mapped IPv6 source addresses read as IPv4.
fn canonical(addr: SocketAddr) -> SocketAddr {
    match addr.ip() {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => SocketAddr::new(IpAddr::V4(v4), addr.port()),
            None => addr,
        },
        IpAddr::V4(_) => addr,
    }
}

/// Removes a pending request when its requester stops waiting.
struct PendingGuard<'a> {
    inner: &'a Inner,
    key: u64,
}

impl Drop for PendingGuard<'_> {
    fn drop(&mut self) {
        self.inner.pending.lock().retain(|p| p.key != self.key);
    }
}

impl Discv4 {
    /// Binds the socket and starts answering, refreshing and revalidating.
    pub async fn spawn(cfg: Discv4Config) -> Result<Discv4, Discv4Error> {
        let socket = UdpSocket::bind(cfg.listen)
            .await
            .map_err(|source| Discv4Error::Bind {
                addr: cfg.listen,
                source,
            })?;
        let local_addr = socket.local_addr().map_err(|source| Discv4Error::Bind {
            addr: cfg.listen,
            source,
        })?;
        let key = cfg.secret_key;
        let id = node_id(&key.public_key(SECP256K1));
        // As geth: the external IP if given, else the listening one, else loopback until
        // other nodes tell us where they see us (see `endpoint_statement`).
        let fallback_ip = match local_addr.ip() {
            ip if !ip.is_unspecified() => ip,
            IpAddr::V4(_) => IpAddr::from([127, 0, 0, 1]),
            IpAddr::V6(_) => IpAddr::from(std::net::Ipv6Addr::LOCALHOST),
        };
        let ip = Some(cfg.external_ip.unwrap_or(fallback_ip));
        let fields = EnrFields {
            ip,
            tcp: (cfg.tcp_port != 0).then_some(cfg.tcp_port),
            udp: Some(local_addr.port()),
            fork_id: cfg.fork_id,
        };
        // Unix milliseconds: a restart signs a newer record without keeping state.
        let enr = Enr::build(&key, unix_millis(), &fields)?;
        let (events, _) = broadcast::channel(EVENT_BUFFER);
        let inner = Arc::new(Inner {
            socket,
            key,
            id,
            local_addr,
            enr: RwLock::new(enr),
            enr_fields: Mutex::new(fields),
            predictor: Mutex::new(Predictor::default()),
            table: Mutex::new(Table::new(id)),
            bonds: Mutex::new(Bonds::default()),
            pending: Mutex::new(Vec::new()),
            next_key: AtomicU64::new(1),
            events,
            init_done: AtomicBool::new(false),
            ping_backs: Arc::new(Semaphore::new(MAX_PING_BACKS)),
            enr_in_flight: Mutex::new(HashSet::new()),
            rng: Mutex::new(Rng::new()),
            tasks: Mutex::new(Vec::new()),
            cfg,
        });
        let disc = Discv4 { inner };
        let tasks = vec![
            tokio::spawn(disc.clone().recv_loop()),
            tokio::spawn(disc.clone().refresh_loop()),
            tokio::spawn(disc.clone().revalidation_loop()),
        ];
        disc.inner.tasks.lock().extend(tasks);
        tracing::info!(addr = %local_addr, enode = %disc.local_enode(), "discv4 listening");
        Ok(disc)
    }

    /// Stops the service's tasks (requests in progress fail).
    pub fn shutdown(&self) {
        for t in self.inner.tasks.lock().drain(..) {
            t.abort();
        }
    }

    /// Our node id (the public key of `secret_key`).
    pub fn local_id(&self) -> NodeId {
        self.inner.id
    }

    /// The UDP address bound.
    pub fn local_addr(&self) -> SocketAddr {
        self.inner.local_addr
    }

    /// Our current signed record.
    pub fn local_enr(&self) -> Enr {
        self.inner.enr.read().clone()
    }

    /// Our enode URL (`?discport=` when UDP and TCP ports differ); an unspecified
    /// address shows as 127.0.0.1.
    pub fn local_enode(&self) -> String {
        let fields = *self.inner.enr_fields.lock();
        let ip = fields.ip.unwrap_or_else(|| IpAddr::from([127, 0, 0, 1]));
        NodeRecord::new(
            self.inner.id,
            ip,
            self.inner.local_addr.port(),
            fields.tcp.unwrap_or(self.inner.local_addr.port()),
        )
        .enode_url()
    }

    /// Nodes in the table (replacements not counted).
    pub fn table_len(&self) -> usize {
        self.inner.table.lock().len()
    }

    /// Up to `n` nodes of the table in random order, those that answered a check first.
    pub fn random_nodes(&self, n: usize) -> Vec<NodeRecord> {
        self.inner.table.lock().random_nodes(n)
    }

    /// The `n` table nodes closest to a node id.
    pub fn closest(&self, target: &NodeId, n: usize) -> Vec<NodeRecord> {
        self.inner
            .table
            .lock()
            .closest(&node_hash(target), n, false)
    }

    /// Nodes as they enter the table, and again when their record arrives.
    pub fn subscribe(&self) -> broadcast::Receiver<NodeRecord> {
        self.inner.events.subscribe()
    }

    /// Announces a new fork id (the chain passed a fork): re-signs our record with the
    /// next sequence number, which peers learn from our next Ping or Pong.
    pub fn set_fork_id(&self, fork_id: ForkId) {
        let mut fields = self.inner.enr_fields.lock();
        if fields.fork_id == Some(fork_id) {
            return;
        }
        fields.fork_id = Some(fork_id);
        let mut enr = self.inner.enr.write();
        match Enr::build(&self.inner.key, enr.seq() + 1, &fields) {
            Ok(new) => *enr = new,
            Err(e) => tracing::warn!(error = %e, "cannot re-sign our node record"),
        }
    }

    /// What another node says our endpoint is (the `to` of its Ping, or of its Pong to
    /// ours). Without `--nat extip`, the endpoint most nodes agree on (10 at least,
    /// within 5 minutes: geth's rule) goes into our record.
    fn endpoint_statement(&self, reporter: IpAddr, ours: Endpoint) {
        if self.inner.cfg.external_ip.is_some() {
            return;
        }
        let Some(ip) = ours.ip else {
            return;
        };
        if ip.is_unspecified()
            || ip.is_multicast()
            || ip.is_ipv4() != self.inner.local_addr.is_ipv4()
        {
            return;
        }
        let predicted = self.inner.predictor.lock().add(
            reporter,
            SocketAddr::new(ip, ours.udp),
            Instant::now(),
        );
        let Some(endpoint) = predicted else {
            return;
        };
        let mut fields = self.inner.enr_fields.lock();
        if fields.ip == Some(endpoint.ip()) && fields.udp == Some(endpoint.port()) {
            return;
        }
        fields.ip = Some(endpoint.ip());
        fields.udp = Some(endpoint.port());
        let mut enr = self.inner.enr.write();
        match Enr::build(&self.inner.key, enr.seq() + 1, &fields) {
            Ok(new) => {
                tracing::info!(%endpoint, "discv4: other nodes see us at a new endpoint");
                *enr = new;
            }
            Err(e) => tracing::warn!(error = %e, "cannot re-sign our node record"),
        }
    }

    /// Offers a node to the table as if a lookup had found it.
    pub fn add_node(&self, node: NodeRecord) {
        self.add_found(node);
    }

    fn update_table_gauge(&self, len: usize) {
        metrics::gauge!("moat_discovery_table_nodes").set(len as f64);
    }

    fn add_found(&self, node: NodeRecord) {
        let (result, len) = {
            let mut t = self.inner.table.lock();
            (t.add(node.clone(), false, Instant::now()), t.len())
        };
        if result == AddResult::Added {
            self.update_table_gauge(len);
            let _ = self.inner.events.send(node);
        }
    }

    fn add_verified(&self, node: NodeRecord) {
        if !self.inner.init_done.load(Ordering::Relaxed) {
            return;
        }
        let (result, len) = {
            let mut t = self.inner.table.lock();
            (t.add(node.clone(), true, Instant::now()), t.len())
        };
        if result == AddResult::Added {
            self.update_table_gauge(len);
            let _ = self.inner.events.send(node);
        }
    }

    fn our_endpoint(&self) -> Endpoint {
        let fields = *self.inner.enr_fields.lock();
        Endpoint {
            ip: fields.ip,
            udp: self.inner.local_addr.port(),
            tcp: fields.tcp.unwrap_or(0),
        }
    }

    fn send(&self, to: SocketAddr, packet: &Packet) -> Result<B256, RequestError> {
        let (bytes, hash) = packet.encode(&self.inner.key);
        debug_assert!(bytes.len() <= MAX_PACKET_SIZE);
        match self.inner.socket.try_send_to(&bytes, to) {
            Ok(_) => {
                metrics::counter!("moat_discovery_packets_out_total", "type" => packet.kind().name())
                    .increment(1);
                Ok(hash)
            }
            Err(e) => {
                tracing::trace!(%to, error = %e, "discv4 send failed");
                Err(RequestError::Send(e.to_string()))
            }
        }
    }

    /// Registers a request before its packet goes out.
    fn expect(
        &self,
        id: NodeId,
        ip: IpAddr,
        expect: Expect,
    ) -> Result<(PendingGuard<'_>, mpsc::Receiver<Packet>), RequestError> {
        let (tx, rx) = mpsc::channel(8);
        let key = self.inner.next_key.fetch_add(1, Ordering::Relaxed);
        let mut pending = self.inner.pending.lock();
        if pending.len() >= MAX_PENDING {
            return Err(RequestError::Busy);
        }
        pending.push(PendingRequest {
            key,
            id,
            ip,
            expect,
            tx,
        });
        Ok((
            PendingGuard {
                inner: &self.inner,
                key,
            },
            rx,
        ))
    }

    /// Hands a reply to the request it answers; false if none does.
    fn deliver_reply(&self, sender: NodeId, ip: IpAddr, packet: Packet) -> bool {
        let mut pending = self.inner.pending.lock();
        let pos = pending.iter().position(|p| {
            p.id == sender
                && p.ip == ip
                && match (&p.expect, &packet) {
                    (Expect::Pong(h), Packet::Pong(pong)) => pong.ping_hash == *h,
                    (Expect::Neighbors, Packet::Neighbors(_)) => true,
                    (Expect::EnrResponse(h), Packet::EnrResponse(r)) => r.request_hash == *h,
                    _ => false,
                }
        });
        let Some(pos) = pos else {
            return false;
        };
        if pending[pos].expect == Expect::Neighbors {
            // More Neighbors packets may follow; the requester ends the wait.
            let _ = pending[pos].tx.try_send(packet);
        } else {
            let p = pending.swap_remove(pos);
            let _ = p.tx.try_send(packet);
        }
        true
    }

    /// Pings a node and waits for its Pong.
    pub async fn ping(&self, node: &NodeRecord) -> Result<Pong, RequestError> {
        let ping = Packet::Ping(Ping {
            version: 4,
            from: self.our_endpoint(),
            to: Endpoint {
                ip: Some(node.ip),
                udp: node.udp,
                tcp: node.tcp,
            },
            expiration: unix_now() + EXPIRATION,
            enr_seq: Some(self.inner.enr.read().seq()),
        });
        let (bytes, hash) = ping.encode(&self.inner.key);
        let (_guard, mut rx) = self.expect(node.id, node.ip, Expect::Pong(hash))?;
        self.inner
            .socket
            .send_to(&bytes, node.udp_addr())
            .await
            .map_err(|e| RequestError::Send(e.to_string()))?;
        metrics::counter!("moat_discovery_packets_out_total", "type" => "ping").increment(1);
        match tokio::time::timeout(self.inner.cfg.request_timeout, rx.recv()).await {
            Ok(Some(Packet::Pong(pong))) => Ok(pong),
            _ => Err(RequestError::Timeout),
        }
    }

    /// Makes sure `node` has bonded us (else it drops our FindNode): if it has not
    /// pinged us lately, ping it and give it time to ping back.
    async fn ensure_bond(&self, node: &NodeRecord) -> Result<(), RequestError> {
        let expiry = self.inner.cfg.bond_expiration;
        let fresh = |inner: &Inner| {
            inner.bonds.lock().get(&node.id, &node.ip).is_some_and(|b| {
                b.ping_received.is_some_and(|t| t.elapsed() < expiry)
                    && b.find_fails <= MAX_FIND_FAILS
            })
        };
        if fresh(&self.inner) {
            return Ok(());
        }
        let pong = self.ping(node).await?;
        self.after_pong(node, &pong);
        // Its Ping back usually follows at once.
        let deadline = Instant::now() + self.inner.cfg.request_timeout;
        while Instant::now() < deadline {
            if fresh(&self.inner) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(())
    }

    /// A node answered our Ping: it is live; fetch its record if it has a newer one.
    fn after_pong(&self, node: &NodeRecord, pong: &Pong) {
        let known = {
            let mut t = self.inner.table.lock();
            t.mark_live(&node.id, Instant::now())
        };
        let Some(known) = known else {
            return;
        };
        if pong.enr_seq.unwrap_or(0) > known {
            self.spawn_enr_request(node.clone());
        }
    }

    fn spawn_enr_request(&self, node: NodeRecord) {
        if !self.inner.enr_in_flight.lock().insert(node.id) {
            return;
        }
        let disc = self.clone();
        tokio::spawn(async move {
            let result = disc.request_enr(&node).await;
            disc.inner.enr_in_flight.lock().remove(&node.id);
            match result {
                Ok(enr) => {
                    let updated = disc.inner.table.lock().set_enr(enr);
                    if let Some(n) = updated {
                        let _ = disc.inner.events.send(n);
                    }
                }
                Err(e) => tracing::trace!(node = %node, error = %e, "ENR request failed"),
            }
        });
    }

    /// Asks a node for its record (bonding first if needed).
    pub async fn request_enr(&self, node: &NodeRecord) -> Result<Enr, RequestError> {
        self.ensure_bond(node).await?;
        let req = Packet::EnrRequest(EnrRequest {
            expiration: unix_now() + EXPIRATION,
        });
        let (bytes, hash) = req.encode(&self.inner.key);
        let (_guard, mut rx) = self.expect(node.id, node.ip, Expect::EnrResponse(hash))?;
        self.inner
            .socket
            .send_to(&bytes, node.udp_addr())
            .await
            .map_err(|e| RequestError::Send(e.to_string()))?;
        metrics::counter!("moat_discovery_packets_out_total", "type" => "enrrequest").increment(1);
        match tokio::time::timeout(self.inner.cfg.request_timeout, rx.recv()).await {
            Ok(Some(Packet::EnrResponse(r))) if r.enr.id() == node.id => Ok(r.enr),
            Ok(Some(_)) => Err(RequestError::WrongRecord),
            _ => Err(RequestError::Timeout),
        }
    }

    /// Asks a node for the nodes it knows closest to `target`.
    pub async fn find_node(
        &self,
        node: &NodeRecord,
        target: NodeId,
    ) -> Result<Vec<NodeRecord>, RequestError> {
        self.ensure_bond(node).await?;
        let req = Packet::FindNode(FindNode {
            target,
            expiration: unix_now() + EXPIRATION,
        });
        let (bytes, _) = req.encode(&self.inner.key);
        let (_guard, mut rx) = self.expect(node.id, node.ip, Expect::Neighbors)?;
        self.inner
            .socket
            .send_to(&bytes, node.udp_addr())
            .await
            .map_err(|e| RequestError::Send(e.to_string()))?;
        metrics::counter!("moat_discovery_packets_out_total", "type" => "findnode").increment(1);
        let deadline = tokio::time::Instant::now() + self.inner.cfg.request_timeout;
        let mut received = 0usize;
        let mut found = Vec::new();
        while received < BUCKET_SIZE {
            match tokio::time::timeout_at(deadline, rx.recv()).await {
                Ok(Some(Packet::Neighbors(n))) => {
                    received += n.nodes.len();
                    found.extend(
                        n.nodes
                            .iter()
                            .filter_map(|nb| self.node_from_neighbor(node.ip, nb)),
                    );
                }
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => break,
            }
        }
        if received == 0 {
            return Err(RequestError::Timeout);
        }
        Ok(found)
    }

    /// A node from a Neighbors answer, if it can be one (geth's `nodeFromRPC`).
    fn node_from_neighbor(&self, sender: IpAddr, n: &Neighbor) -> Option<NodeRecord> {
        let ip = n.ip?;
        if n.udp <= 1024 || !relay_allowed(&sender, &ip) || n.id == self.inner.id {
            return None;
        }
        crate::public_key(&n.id)?;
        Some(NodeRecord::new(n.id, ip, n.udp, n.tcp))
    }

    fn note_find_result(&self, node: &NodeRecord, ok: bool) {
        let fails = {
            let mut bonds = self.inner.bonds.lock();
            let b = bonds.entry(node.id, node.ip, Instant::now());
            if ok {
                b.find_fails = 0;
            } else {
                b.find_fails += 1;
            }
            b.find_fails
        };
        if fails >= MAX_FIND_FAILS {
            let mut t = self.inner.table.lock();
            // Small test networks keep their few nodes (geth's rule).
            let crowded = t.entries().count() >= BUCKET_SIZE / 4;
            if crowded && t.contains(&node.id) {
                t.remove(&node.id);
                let len = t.len();
                drop(t);
                self.update_table_gauge(len);
            }
        }
    }

    /// An iterative Kademlia lookup: asks the closest known nodes (three at a time)
    /// for nodes closer to `target` until no closer ones turn up; returns the 16
    /// closest found. Found nodes enter the table.
    pub async fn lookup(&self, target: NodeId) -> Vec<NodeRecord> {
        metrics::counter!("moat_discovery_lookups_total").increment(1);
        let target_hash = node_hash(&target);
        let mut result = self
            .inner
            .table
            .lock()
            .closest(&target_hash, BUCKET_SIZE, false);
        let mut seen: HashSet<NodeId> = result.iter().map(|n| n.id).collect();
        seen.insert(self.inner.id);
        let mut asked: HashSet<NodeId> = HashSet::new();
        asked.insert(self.inner.id);
        let mut queries: JoinSet<(NodeRecord, Result<Vec<NodeRecord>, RequestError>)> =
            JoinSet::new();
        loop {
            for n in &result {
                if queries.len() >= ALPHA {
                    break;
                }
                if asked.insert(n.id) {
                    let disc = self.clone();
                    let n = n.clone();
                    queries.spawn(async move {
                        let r = disc.find_node(&n, target).await;
                        (n, r)
                    });
                }
            }
            let Some(done) = queries.join_next().await else {
                break;
            };
            let Ok((queried, reply)) = done else {
                continue;
            };
            let nodes = match reply {
                Ok(nodes) => {
                    self.note_find_result(&queried, !nodes.is_empty());
                    nodes
                }
                Err(_) => {
                    self.note_find_result(&queried, false);
                    Vec::new()
                }
            };
            for n in nodes {
                if seen.insert(n.id) {
                    self.add_found(n.clone());
                    result.push(n);
                }
            }
            result.sort_by_cached_key(|n| node_hash(&n.id) ^ target_hash);
            result.truncate(BUCKET_SIZE);
        }
        result
    }

    /// A lookup for a random target: explores another part of the keyspace.
    pub async fn lookup_random(&self) -> Vec<NodeRecord> {
        let mut target = [0u8; 64];
        let _ = getrandom::fill(&mut target);
        self.lookup(NodeId::from(target)).await
    }

    async fn recv_loop(self) {
        let mut buf = vec![0u8; MAX_PACKET_SIZE + 1];
        loop {
            let (n, from) = match self.inner.socket.recv_from(&mut buf).await {
                Ok(r) => r,
                Err(e) => {
                    tracing::trace!(error = %e, "discv4 receive failed");
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    continue;
                }
            };
            self.handle_packet(&buf[..n], canonical(from));
        }
    }

    fn dropped(reason: &'static str) {
        metrics::counter!("moat_discovery_packets_dropped_total", "reason" => reason).increment(1);
    }

    fn is_bonded(&self, id: &NodeId, ip: &IpAddr) -> bool {
        let expiry = self.inner.cfg.bond_expiration;
        self.inner
            .bonds
            .lock()
            .get(id, ip)
            .and_then(|b| b.pong_received)
            .is_some_and(|t| t.elapsed() < expiry)
    }

    /// Handles one datagram.
    fn handle_packet(&self, bytes: &[u8], from: SocketAddr) {
        let decoded = match packet::decode(bytes) {
            Ok(d) => d,
            Err(e) => {
                tracing::trace!(%from, error = %e, "discv4 packet refused");
                metrics::counter!("moat_discovery_packets_in_total", "type" => "invalid")
                    .increment(1);
                return;
            }
        };
        let kind = decoded.packet.kind();
        metrics::counter!("moat_discovery_packets_in_total", "type" => kind.name()).increment(1);
        let sender = decoded.sender;
        if sender == self.inner.id {
            return Self::dropped("self");
        }
        if decoded.packet.is_expired(unix_now()) {
            tracing::trace!(%from, kind = kind.name(), "discv4 packet expired");
            return Self::dropped("expired");
        }
        let ip = from.ip();
        match decoded.packet {
            Packet::Ping(ping) => self.handle_ping(ping, from, sender, decoded.hash),
            packet @ (Packet::Pong(_) | Packet::Neighbors(_) | Packet::EnrResponse(_)) => {
                let pong_to = match &packet {
                    Packet::Pong(p) => Some(p.to),
                    _ => None,
                };
                if !self.deliver_reply(sender, ip, packet) {
                    return Self::dropped("unsolicited");
                }
                if let Some(to) = pong_to {
                    // The Pong echoes one of our Pings: the endpoint is proven.
                    let now = Instant::now();
                    self.inner.bonds.lock().entry(sender, ip, now).pong_received = Some(now);
                    self.endpoint_statement(ip, to);
                }
            }
            Packet::FindNode(f) => {
                if !self.is_bonded(&sender, &ip) {
                    tracing::trace!(%from, "FindNode from an unbonded node dropped");
                    return Self::dropped("unbonded");
                }
                self.answer_find_node(&f, from, ip);
            }
            Packet::EnrRequest(_) => {
                if !self.is_bonded(&sender, &ip) {
                    return Self::dropped("unbonded");
                }
                let enr = self.local_enr();
                let _ = self.send(
                    from,
                    &Packet::EnrResponse(EnrResponse {
                        request_hash: decoded.hash,
                        enr,
                    }),
                );
            }
        }
    }

    fn handle_ping(&self, ping: Ping, from: SocketAddr, sender: NodeId, hash: B256) {
        let pong = Packet::Pong(Pong {
            to: Endpoint {
                ip: Some(from.ip()),
                udp: from.port(),
                tcp: ping.from.tcp,
            },
            ping_hash: hash,
            expiration: unix_now() + EXPIRATION,
            enr_seq: Some(self.inner.enr.read().seq()),
        });
        let _ = self.send(from, &pong);
        self.endpoint_statement(from.ip(), ping.to);
        let now = Instant::now();
        self.inner
            .bonds
            .lock()
            .entry(sender, from.ip(), now)
            .ping_received = Some(now);
        let node = NodeRecord::new(sender, from.ip(), from.port(), ping.from.tcp);
        if self.is_bonded(&sender, &from.ip()) {
            self.add_verified(node);
            return;
        }
        // Ping back: the node enters the table once it proves its endpoint.
        let Ok(permit) = self.inner.ping_backs.clone().try_acquire_owned() else {
            return;
        };
        let disc = self.clone();
        tokio::spawn(async move {
            let _permit = permit;
            if let Ok(pong) = disc.ping(&node).await {
                disc.add_verified(node.clone());
                disc.after_pong(&node, &pong);
            }
        });
    }

    fn answer_find_node(&self, f: &FindNode, to: SocketAddr, asker: IpAddr) {
        let closest = self
            .inner
            .table
            .lock()
            .closest(&node_hash(&f.target), BUCKET_SIZE, true);
        let nodes: Vec<Neighbor> = closest
            .iter()
            .filter(|n| relay_allowed(&asker, &n.ip))
            .map(|n| Neighbor {
                ip: Some(n.ip),
                udp: n.udp,
                tcp: n.tcp,
                id: n.id,
            })
            .collect();
        let expiration = unix_now() + EXPIRATION;
        if nodes.is_empty() {
            let _ = self.send(to, &Packet::Neighbors(Neighbors { nodes, expiration }));
            return;
        }
        for chunk in nodes.chunks(MAX_NEIGHBORS) {
            let _ = self.send(
                to,
                &Packet::Neighbors(Neighbors {
                    nodes: chunk.to_vec(),
                    expiration,
                }),
            );
        }
    }

    fn random_below(&self, max: Duration) -> Duration {
        let ms = max.as_millis().max(1) as usize;
        Duration::from_millis(self.inner.rng.lock().below(ms) as u64)
    }

    async fn refresh_loop(self) {
        loop {
            if self.table_len() == 0 {
                for b in self.inner.cfg.bootnodes.clone() {
                    self.add_found(b);
                }
            }
            let found = self.lookup(self.inner.id).await.len();
            for _ in 0..3 {
                self.lookup_random().await;
            }
            self.inner.init_done.store(true, Ordering::Relaxed);
            let len = self.table_len();
            self.update_table_gauge(len);
            tracing::debug!(table = len, closest = found, "discv4 table refreshed");
            let wait = if len < BUCKET_SIZE {
                self.inner.cfg.sparse_refresh_interval
            } else {
                let half = self.inner.cfg.refresh_interval / 2;
                half + self.random_below(half)
            };
            tokio::time::sleep(wait).await;
        }
    }

    /// Checks one node every so often: one that never answered first, else the least
    /// recently checked of a random bucket. Dead nodes leave (after repeated misses
    /// if they had answered before) and a replacement takes their place.
    async fn revalidation_loop(self) {
        let min_age = self.inner.cfg.ping_interval * 10;
        loop {
            let wait = self.random_below(self.inner.cfg.ping_interval);
            tokio::time::sleep(wait).await;
            let next = self
                .inner
                .table
                .lock()
                .next_to_check(Instant::now(), min_age);
            let Some(node) = next else {
                continue;
            };
            match self.ping(&node).await {
                Ok(pong) => self.after_pong(&node, &pong),
                Err(_) => {
                    let (promoted, len) = {
                        let mut t = self.inner.table.lock();
                        (t.mark_dead(&node.id, Instant::now()), t.len())
                    };
                    self.update_table_gauge(len);
                    if let Some(rep) = promoted {
                        let _ = self.inner.events.send(rep);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_prediction_needs_ten_hosts() {
        let mut p = Predictor::default();
        let now = Instant::now();
        let ours = SocketAddr::from(([203, 0, 113, 7], 30303));
        for i in 0..9u8 {
            assert_eq!(p.add(IpAddr::from([1, 1, 1, i]), ours, now), None);
        }
        // The same host again does not count twice.
        assert_eq!(p.add(IpAddr::from([1, 1, 1, 0]), ours, now), None);
        assert_eq!(p.add(IpAddr::from([1, 1, 1, 9]), ours, now), Some(ours));
        // Old statements stop counting.
        let later = now + Duration::from_secs(301);
        let other = SocketAddr::from(([198, 51, 100, 1], 30303));
        assert_eq!(p.add(IpAddr::from([2, 2, 2, 2]), other, later), None);
    }
}
