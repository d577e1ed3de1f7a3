//! The peer task: a connected peer's record ([`Peer`]), its entry in the peer table, its
//! writer (queued frames, pings, the closing Disconnect) and its reader, which decodes each
//! message and dispatches it: chain requests are served here, answers go to
//! [`super::chain`], transactions and announcements to [`super::ingress`]. Faults and
//! reputation penalties are applied here too.

use crate::eth::EthMessage;
use crate::p2p::DisconnectReason;
use crate::requests::MAX_IN_FLIGHT;
use crate::rlpx::RlpxReader;
use crate::serve;
use crate::session::{self, Incoming, Session};
use alloy_primitives::{B256, Bytes};
use parking_lot::Mutex;
use std::collections::{HashSet, VecDeque};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU8, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::net::TcpStream;
use tokio::sync::{Semaphore, mpsc, watch};

use super::chain::{Pending, Reply, ReplyKind};
use super::ingress::AdmissionJob;
use super::{Map, Network, PeerInfo, max_inbound, short};
use moat_mempool::Spent;
use moat_sched::{self as lanes, Lane, thread_cpu_ns};

/// The reading half of a peer's connection.
type PeerReader = RlpxReader<tokio::net::tcp::OwnedReadHalf>;

/// `Transactions` / `PooledTransactions` messages from one peer waiting for admission;
/// past it the peer's reads wait (backpressure on its TCP stream).
const ADMISSION_QUEUE: usize = 8;
/// Hashes a peer is remembered to know.
const KNOWN_TXS: usize = 32_768;
/// A `PooledTransactions` answer stops growing past this many bytes.
const MAX_POOLED_ANSWER: usize = 2 * 1024 * 1024;
/// Most hashes served from one `GetPooledTransactions`.
const MAX_POOLED_SERVE: usize = 256;
/// Frames queued to a peer before broadcasts to it are dropped.
const PEER_QUEUE: usize = 1024;
const PING_INTERVAL: Duration = Duration::from_secs(15);
/// A peer silent this long (pings included) is dropped.
const READ_TIMEOUT: Duration = Duration::from_secs(45);
/// A peer whose reputation (starting at 0) reaches this is dropped.
const REPUTATION_FLOOR: i64 = -100;

#[derive(Debug, Default)]
pub(super) struct KnownTxs {
    pub(super) set: HashSet<B256, foldhash::fast::RandomState>,
    pub(super) order: VecDeque<B256>,
}

impl KnownTxs {
    pub(super) fn insert(&mut self, hash: B256) -> bool {
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
    pub(super) fn contains(&self, hash: &B256) -> bool {
        self.set.contains(hash)
    }
}

#[derive(Debug, Clone, Copy)]
pub(super) struct ChainStatus {
    pub(super) head: B256,
    pub(super) range: Option<(u64, u64)>,
}

/// A connected peer as the rest of the node sees it.
pub(super) struct Peer {
    pub(super) info: PeerInfo,
    pub(super) framing: session::Framing,
    pub(super) out: mpsc::Sender<Vec<u8>>,
    pub(super) close: watch::Sender<Option<DisconnectReason>>,
    pub(super) known: Mutex<KnownTxs>,
    pub(super) reputation: AtomicI64,
    /// Transactions it sent in `Transactions` again since its reader's last charge:
    /// skipped without admission, and counted against it as rejected.
    pub(super) repeats: AtomicU64,
    /// Batches of this peer's txs, admitted in arrival order by one worker: a sender's
    /// nonces sent in order stay in order.
    pub(super) admissions: mpsc::Sender<AdmissionJob>,
    /// Our chain requests awaiting its answer, by request id.
    pub(super) pending: Mutex<Map<u64, Pending>>,
    /// One permit per chain request in flight (at most [`MAX_IN_FLIGHT`]).
    pub(super) request_slots: Arc<Semaphore>,
    pub(super) chain_status: Mutex<ChainStatus>,
    /// What the peer has sent so far ([`Asks`]): a peer that only asks for chain or
    /// state data has its reader at normal priority (see [`Network::reader_lane`]).
    pub(super) asks: AtomicU8,
    /// When it joined the peer table (the cull spares young peers).
    pub(super) connected_at: Instant,
}

/// What a peer has sent so far, for its reader's lane ([`Network::reader_lane`]): nothing
/// yet, only requests (it syncs from us), or transactions (its first `Transactions`,
/// announcement or `PooledTransactions` ends the asking state for good).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(super) enum Asks {
    Nothing = 0,
    OnlyAsked = 1,
    SentTransactions = 2,
}

impl Asks {
    fn of(v: u8) -> Self {
        match v {
            0 => Asks::Nothing,
            1 => Asks::OnlyAsked,
            _ => Asks::SentTransactions,
        }
    }

    /// Records in `cell` what `msg` says of its sender: a request moves a peer that sent
    /// nothing yet to [`Asks::OnlyAsked`]; a transaction message moves any peer to
    /// [`Asks::SentTransactions`], where it stays.
    fn note(cell: &AtomicU8, msg: &Incoming) {
        match Asks::after(msg) {
            Some(Asks::SentTransactions) => {
                cell.store(Asks::SentTransactions as u8, Ordering::Relaxed)
            }
            Some(Asks::OnlyAsked) => {
                let _ = cell.compare_exchange(
                    Asks::Nothing as u8,
                    Asks::OnlyAsked as u8,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                );
            }
            Some(Asks::Nothing) | None => {}
        }
    }

    /// What a message says of its sender: a request for chain or state data makes it a
    /// peer that asks, a transaction message one that sends transactions; `None` for
    /// the rest (answers to our requests, announcements of blocks, pings).
    fn after(msg: &Incoming) -> Option<Asks> {
        match msg {
            Incoming::Eth(m) => match m {
                EthMessage::Transactions(_)
                | EthMessage::NewPooledTransactionHashes(_)
                | EthMessage::PooledTransactions { .. }
                | EthMessage::Cells { .. } => Some(Asks::SentTransactions),
                EthMessage::GetBlockHeaders { .. }
                | EthMessage::GetBlockBodies { .. }
                | EthMessage::GetReceipts { .. }
                | EthMessage::GetBlockAccessLists { .. } => Some(Asks::OnlyAsked),
                EthMessage::Status(_)
                | EthMessage::NewBlockHashes
                | EthMessage::NewBlock
                | EthMessage::BlockHeaders { .. }
                | EthMessage::BlockBodies { .. }
                | EthMessage::GetPooledTransactions { .. }
                | EthMessage::Receipts { .. }
                | EthMessage::BlockAccessLists { .. }
                | EthMessage::GetCells { .. }
                | EthMessage::BlockRangeUpdate { .. } => None,
            },
            Incoming::Snap(m) => m.answer_id().is_none().then_some(Asks::OnlyAsked),
            Incoming::Ping | Incoming::Pong | Incoming::Disconnect(_) => None,
        }
    }
}

impl Peer {
    /// What it has sent so far.
    pub(super) fn asks(&self) -> Asks {
        Asks::of(self.asks.load(Ordering::Relaxed))
    }

    pub(super) fn send(&self, frame: Vec<u8>) -> bool {
        self.out.try_send(frame).is_ok()
    }

    pub(super) fn disconnect(&self, reason: DisconnectReason) {
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

/// What a peer's reader spent since its last charge.
#[derive(Debug, Default)]
pub(super) struct ReaderCpu {
    ns: u64,
}

impl ReaderCpu {
    /// Charged once it reaches this (one ledger lock per ~50 µs of reading, not per
    /// message).
    const CHARGE_EVERY_NS: u64 = 50_000;

    fn due(&self) -> bool {
        self.ns >= Self::CHARGE_EVERY_NS
    }
}

/// A future whose polls' thread CPU is added to a counter: the work done inside each
/// poll is this future's, whichever thread runs it, and time spent parked is not.
struct Metered<'a, F> {
    inner: F,
    ns: &'a mut u64,
}

impl<'a, F> Metered<'a, F> {
    fn new(inner: F, ns: &'a mut u64) -> Self {
        Self { inner, ns }
    }
}

impl<F: Future + Unpin> Future for Metered<'_, F> {
    type Output = F::Output;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<F::Output> {
        let started = thread_cpu_ns();
        let r = std::pin::Pin::new(&mut self.inner).poll(cx);
        *self.ns += thread_cpu_ns().saturating_sub(started);
        r
    }
}

/// Answers one snap request and queues the answer to the peer's writer (on a blocking
/// thread). At debug level one line per request: how long it waited for a thread since
/// it was read, the answer's time, the frame's encoding and compression, and its size.
fn serve_snap(
    snap: &crate::snap::SnapServer,
    chain: &moat_blockchain::chain::Chain,
    peer: &Peer,
    msg: &crate::snap::SnapMessage,
    read: Instant,
) {
    let started = Instant::now();
    let Some(answer) = snap.answer(chain, msg) else {
        return;
    };
    let answered = Instant::now();
    let frame = peer.framing.snap(&answer);
    let bytes = frame.len();
    let queued = peer.send(frame);
    let done = Instant::now();
    metrics::histogram!("moat_snap_request_seconds", "msg" => msg.name())
        .record(done.duration_since(read));
    tracing::debug!(
        peer = %short(&peer.info.id),
        msg = msg.name(),
        items = answer.items(),
        bytes,
        queued,
        wait_us = started.duration_since(read).as_micros() as u64,
        answer_us = answered.duration_since(started).as_micros() as u64,
        frame_us = done.duration_since(answered).as_micros() as u64,
        "snap request served"
    );
}

/// Answers one eth chain request (headers, bodies, receipts) and queues the answer to the
/// peer's writer (on a blocking thread); any other message is not one and is ignored.
fn serve_chain(store: &moat_storage::Store, peer: &Peer, msg: EthMessage) {
    let answer = match msg {
        EthMessage::GetBlockHeaders {
            request_id,
            origin,
            amount,
            skip,
            reverse,
        } => EthMessage::BlockHeaders {
            request_id,
            headers: serve::headers(store, origin, amount, skip, reverse),
        },
        EthMessage::GetBlockBodies { request_id, hashes } => EthMessage::BlockBodies {
            request_id,
            bodies: serve::bodies(store, &hashes),
        },
        EthMessage::GetReceipts {
            request_id,
            first_index,
            hashes,
        } => {
            let (blocks, incomplete) =
                serve::receipts(store, peer.framing.version, first_index, &hashes);
            EthMessage::Receipts {
                request_id,
                incomplete,
                blocks,
            }
        }
        EthMessage::GetBlockAccessLists { request_id, hashes } => EthMessage::BlockAccessLists {
            request_id,
            lists: serve::access_lists(&hashes),
        },
        EthMessage::Status(_)
        | EthMessage::NewBlockHashes
        | EthMessage::NewBlock
        | EthMessage::Transactions(_)
        | EthMessage::BlockHeaders { .. }
        | EthMessage::BlockBodies { .. }
        | EthMessage::NewPooledTransactionHashes(_)
        | EthMessage::GetPooledTransactions { .. }
        | EthMessage::PooledTransactions { .. }
        | EthMessage::Receipts { .. }
        | EthMessage::BlockAccessLists { .. }
        | EthMessage::GetCells { .. }
        | EthMessage::Cells { .. }
        | EthMessage::BlockRangeUpdate { .. } => return,
    };
    peer.send(peer.framing.eth(&answer));
}

impl Network {
    /// The lane a peer's reader runs in: a peer that has only asked for chain or state
    /// data (a node syncing from us: its messages are requests, served at normal priority
    /// anyway) reads at normal priority, so that its next request is not read on a
    /// `SCHED_IDLE` thread while the machine is busy; everyone else in the lane of its
    /// standing ([`Network::lane_of`]). Its first transaction message ends that for the
    /// connection, so at most one message after a request is read at normal priority
    /// before a peer that sends transactions is in its standing's lane.
    pub(super) fn reader_lane(&self, peer: &Peer) -> Lane {
        match peer.asks() {
            Asks::OnlyAsked => Lane::Trusted,
            Asks::Nothing | Asks::SentTransactions => self.lane_of(peer),
        }
    }

    /// Registers the peer, then reads from it until it leaves or is dropped.
    pub(super) async fn run_peer(
        self,
        session: Session<TcpStream>,
        addr: SocketAddr,
        inbound: bool,
    ) {
        let Session {
            mut reader,
            mut writer,
            framing,
            hello,
            status,
            remote_id,
        } = session;
        // A large frame (a blob tx's sidecar is ~130 KB a blob) is MACed and decrypted in
        // 64 KB steps as it arrives; on the untrusted lane the reader gives its core to
        // any waiting thread between steps (a no-op on trusted threads).
        reader.set_pause(lanes::give_way);
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
                delivered: None,
            },
            framing,
            out: out_tx,
            close: close_tx,
            known: Mutex::new(KnownTxs::default()),
            reputation: AtomicI64::new(0),
            repeats: AtomicU64::new(0),
            admissions: admit_tx,
            pending: Mutex::new(Map::default()),
            request_slots: Arc::new(Semaphore::new(MAX_IN_FLIGHT)),
            chain_status: Mutex::new(ChainStatus {
                head: status.head,
                range: (framing.version >= crate::eth::ETH69)
                    .then_some((status.earliest, status.latest)),
            }),
            asks: AtomicU8::new(Asks::Nothing as u8),
            connected_at: Instant::now(),
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
        self.inner.tracker.lock().peer_attached(remote_id);
        // Its admission budget: fresh, or its subnet's if a peer from there left lately.
        self.inner
            .pool
            .budgets()
            .attach_peer(remote_id, addr.ip(), Instant::now());
        // Its delivery record in the fetcher: its subnet's, likewise.
        self.inner.fetcher.lock().attach_peer(remote_id, addr.ip());
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
        // A new peer hears of the pending transactions it may want (in its lane: a
        // peer that reconnects again and again pays for it at low priority).
        let (net, new_peer) = (self.clone(), peer.clone());
        lanes::run(self.lane_of(&peer), async move {
            net.announce_pool_to(&new_peer)
        })
        .await;

        // The reader's own CPU for the transaction messages a peer sends unasked
        // (`Transactions`, announcements: frame decryption and MAC, decompression,
        // decoding) is admission work for the peer too: measured per poll and charged to
        // its budget in small sums. Replies to our requests (`PooledTransactions`, whose
        // size our requests bound; an honest blob tx's sidecar costs milliseconds to
        // read, which must not count as waste), chain data, snap and pings are not.
        let mut reader_cpu = ReaderCpu::default();
        // The reader runs in the lane the peer's standing gives it (`moat_mempool::Standing`):
        // a new, poor or over-budget peer's frames are decrypted, decoded and handled on
        // the untrusted lane's low-priority threads. It moves when its standing changes.
        let end = loop {
            let lane = self.reader_lane(&peer);
            let part = self
                .clone()
                .read_in_lane(peer.clone(), reader, close_rx, reader_cpu, lane);
            match lanes::run(lane, part).await {
                Some((r, c, cpu, None)) => (reader, close_rx, reader_cpu) = (r, c, cpu),
                Some((_, _, _, Some(end))) => break end,
                None => break "reader stopped".to_string(),
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
        // After its admissions stop: none can credit it again.
        self.inner.tracker.lock().peer_dropped(&remote_id);
        // Its announcements and the bodies waiting for its cells leave the fetcher; if the
        // fetcher is busy (maybe with an untrusted peer's work at low priority), on a
        // blocking thread, not this worker.
        let gone = self.take_cell_requests(&remote_id);
        self.inner.sampler.lock().peer_left(&remote_id);
        match self.inner.fetcher.try_lock() {
            Some(mut f) => {
                Self::forget_cell_requests_in(&mut f, gone);
                f.remove_peer(remote_id);
            }
            None => {
                let net = self.clone();
                tokio::task::spawn_blocking(move || {
                    let mut f = net.inner.fetcher.lock();
                    Self::forget_cell_requests_in(&mut f, gone);
                    f.remove_peer(remote_id)
                });
            }
        }
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

    /// The reader's loop, while the peer's lane stays `lane`: hands the reader back with
    /// `None` when the lane changes, or the reason the peer is done.
    async fn read_in_lane(
        self,
        peer: Arc<Peer>,
        mut reader: PeerReader,
        mut close_rx: watch::Receiver<Option<DisconnectReason>>,
        mut reader_cpu: ReaderCpu,
        lane: Lane,
    ) -> (
        PeerReader,
        watch::Receiver<Option<DisconnectReason>>,
        ReaderCpu,
        Option<String>,
    ) {
        let end = loop {
            if self.reader_lane(&peer) != lane {
                return (reader, close_rx, reader_cpu, None);
            }
            if reader_cpu.due() && !self.charge_reader(&peer, &mut reader_cpu).await {
                break "dropped: its admission CPU buys almost no transactions".to_string();
            }
            let mut message_ns = 0;
            let recv = std::pin::pin!(reader.recv());
            let payload = tokio::select! {
                r = tokio::time::timeout(READ_TIMEOUT, Metered::new(recv, &mut message_ns)) => match r {
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
            let started = thread_cpu_ns();
            let decoded = peer.framing.decode(&payload);
            message_ns += thread_cpu_ns().saturating_sub(started);
            let msg = match decoded {
                Ok(m) => m,
                Err(e) => {
                    self.fault(&peer, "malformed message", &e.to_string());
                    continue;
                }
            };
            // Transaction traffic is charged to the peer, asked for or not: a reply to our
            // GetPooledTransactions (a blob tx's is ~130 KB a blob, MACed, decrypted and
            // decompressed here) costs what an unasked message does, and a crowd of
            // identities replying with bad sidecars must run into the peers' shared budget.
            // Chain and state replies (a sync's) are not charged.
            if let Incoming::Eth(
                EthMessage::Transactions(_)
                | EthMessage::NewPooledTransactionHashes(_)
                | EthMessage::PooledTransactions { .. }
                | EthMessage::GetCells { .. }
                | EthMessage::Cells { .. },
            ) = &msg
            {
                reader_cpu.ns += message_ns;
            }
            Asks::note(&peer.asks, &msg);
            match msg {
                Incoming::Ping => {
                    peer.send(peer.framing.pong());
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
                    // One message, then the other tasks' turn: a peer whose messages
                    // are buffered would otherwise run a whole scheduling slice of them
                    // (128 here) while honest peers' and RPC's tasks wait behind it.
                    tokio::task::yield_now().await;
                }
                Incoming::Snap(m) => {
                    metrics::counter!("moat_p2p_messages_total", "msg" => m.name()).increment(1);
                    // An answer to our own request (snap sync) goes to the request.
                    if let Some(request_id) = m.answer_id() {
                        self.on_reply(&peer, ReplyKind::Snap, request_id, Reply::Snap(m));
                        continue;
                    }
                    // Served off the runtime (disk reads, up to the time budget); the
                    // peer's next message waits for this answer, as geth's handler does.
                    // Serving is not admission: the answer is computed, encoded,
                    // compressed and queued to the writer on the node runtime's blocking
                    // pool at normal priority, not in the reader's lane (a new peer's is
                    // the untrusted one, whose SCHED_IDLE threads a syncing peer on a
                    // busy machine would wait on), and without a hop back to the reader
                    // first. A request is bounded by its byte and time budgets, one at a
                    // time per peer.
                    let (chain, snap) = (self.inner.chain.clone(), self.inner.snap.clone());
                    let (to, read) = (peer.clone(), Instant::now());
                    let _ = self
                        .inner
                        .runtime
                        .spawn_blocking(move || serve_snap(&snap, &chain, &to, &m, read))
                        .await;
                }
            }
        };
        (reader, close_rx, reader_cpu, Some(end))
    }

    /// Charges what the reader spent since the last charge to the peer's budget, then
    /// waits while the budget says so; `false` when the peer is to be dropped.
    pub(super) async fn charge_reader(&self, peer: &Peer, cpu: &mut ReaderCpu) -> bool {
        let spent = Spent {
            cpu_us: cpu.ns / 1_000,
            rejected: peer.repeats.swap(0, Ordering::Relaxed),
            ..Spent::default()
        };
        cpu.ns %= 1_000;
        self.inner
            .pool
            .budgets()
            .charge_peer(&peer.info.id, spent, Instant::now());
        self.await_budget(peer).await
    }

    /// A protocol fault: disconnect with subprotocol error. `kind` is a fixed label (the
    /// metric's), `detail` what exactly happened (the log's).
    pub(super) fn fault(&self, peer: &Peer, kind: &'static str, detail: &str) {
        tracing::info!(peer = %short(&peer.info.id), addr = %peer.info.addr, kind, detail, "dropping peer for a protocol fault");
        metrics::counter!("moat_p2p_peer_faults_total", "kind" => kind).increment(1);
        // Nothing more is asked of it: its other announcements go to other peers.
        self.inner.fetcher.lock().remove_peer(peer.info.id);
        peer.disconnect(DisconnectReason::SubprotocolError);
    }

    pub(super) fn penalize(&self, peer: &Peer, points: i64, why: &str) {
        let score = peer.reputation.fetch_sub(points, Ordering::Relaxed) - points;
        if score <= REPUTATION_FLOOR {
            tracing::info!(peer = %short(&peer.info.id), score, why, "dropping peer: reputation too low");
            metrics::counter!("moat_p2p_peer_faults_total", "kind" => "reputation").increment(1);
            peer.disconnect(DisconnectReason::UselessPeer);
        }
    }

    pub(super) async fn handle(&self, peer: &Arc<Peer>, msg: EthMessage) {
        match msg {
            EthMessage::Status(_) => self.fault(peer, "second status", ""),
            EthMessage::NewBlockHashes | EthMessage::NewBlock => {}
            // Chain requests are served like snap's: read, encoded and queued to the
            // writer on the node runtime's blocking pool at normal priority (disk reads,
            // bounded by the item and byte limits of `serve`), one at a time per peer.
            m @ (EthMessage::GetBlockHeaders { .. }
            | EthMessage::GetBlockBodies { .. }
            | EthMessage::GetReceipts { .. }
            | EthMessage::GetBlockAccessLists { .. }) => {
                let (chain, to) = (self.inner.chain.clone(), peer.clone());
                let _ = self
                    .inner
                    .runtime
                    .spawn_blocking(move || serve_chain(chain.store(), &to, m))
                    .await;
            }
            EthMessage::BlockHeaders {
                request_id,
                headers,
            } => self.on_reply(peer, ReplyKind::Headers, request_id, Reply::Items(headers)),
            EthMessage::BlockBodies { request_id, bodies } => {
                self.on_reply(peer, ReplyKind::Bodies, request_id, Reply::Items(bodies))
            }
            EthMessage::Receipts { .. } | EthMessage::BlockAccessLists { .. } => {
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
                    if let Some(tx) = self.inner.pool.get_shareable(h) {
                        // eth/72: blob txs without their blobs (those go as cells), and
                        // only cell-proof sidecars (what eth/72 peers take).
                        let env = if peer.framing.version >= crate::eth::ETH72 && tx.is_blob() {
                            match tx.tx.sidecar().map(|s| s.version) {
                                Some(moat_common::transaction::SidecarVersion::V1) => {
                                    tx.tx.encoded_2718_without_blobs()
                                }
                                _ => continue,
                            }
                        } else if !tx.tx.has_whole_blobs() {
                            // Sampled: peers before eth/72 want the blobs whole.
                            continue;
                        } else {
                            tx.tx.encoded_2718()
                        };
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
            EthMessage::Transactions(txs) => self.on_transactions(peer, txs).await,
            EthMessage::NewPooledTransactionHashes(a) => self.on_hashes(peer, a).await,
            EthMessage::PooledTransactions { request_id, txs } => {
                self.on_pooled(peer, request_id, txs).await;
            }
            EthMessage::GetCells {
                request_id,
                hashes,
                mask,
            } => {
                // In the peer's lane: extension cells cost CPU, charged to it.
                let (net, to) = (self.clone(), peer.clone());
                lanes::run(self.lane_of(peer), async move {
                    net.serve_cells(&to, request_id, &hashes, mask)
                })
                .await;
            }
            EthMessage::Cells {
                request_id,
                hashes,
                cells,
                mask,
            } => self.on_cells(peer, request_id, hashes, cells, mask).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_peer_that_never_sent_transactions_counts_as_asking() {
        let snap_request = || {
            Incoming::Snap(crate::snap::SnapMessage::GetByteCodes {
                request_id: 1,
                hashes: vec![],
                bytes: 1024,
            })
        };
        let headers = Incoming::Eth(EthMessage::GetBlockHeaders {
            request_id: 1,
            origin: crate::eth::HashOrNumber::Number(0),
            amount: 1,
            skip: 0,
            reverse: false,
        });
        let txs = || Incoming::Eth(EthMessage::Transactions(vec![]));
        let asks = AtomicU8::new(Asks::Nothing as u8);
        let state = |a: &AtomicU8| Asks::of(a.load(Ordering::Relaxed));
        // Pings and answers to our requests say nothing.
        Asks::note(&asks, &Incoming::Ping);
        assert_eq!(state(&asks), Asks::Nothing);
        // A syncing peer: requests only.
        Asks::note(&asks, &snap_request());
        Asks::note(&asks, &headers);
        assert_eq!(state(&asks), Asks::OnlyAsked);
        // Its first transaction message ends that for the connection.
        Asks::note(&asks, &txs());
        Asks::note(&asks, &snap_request());
        assert_eq!(state(&asks), Asks::SentTransactions);
        // Transactions first: never asking.
        let asks = AtomicU8::new(Asks::Nothing as u8);
        Asks::note(&asks, &txs());
        Asks::note(&asks, &snap_request());
        assert_eq!(state(&asks), Asks::SentTransactions);
        // An answer to our own snap request is not a request.
        let asks = AtomicU8::new(Asks::Nothing as u8);
        Asks::note(
            &asks,
            &Incoming::Snap(crate::snap::SnapMessage::ByteCodes {
                request_id: 1,
                codes: vec![],
            }),
        );
        assert_eq!(state(&asks), Asks::Nothing);
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
