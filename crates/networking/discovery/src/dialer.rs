//! Which found nodes the p2p network should dial, and when.
//!
//! The dialer takes nodes as discovery finds them and from the tables of every
//! [`NodeSource`] (discv4, discv5), and offers them to the network while it has free
//! outbound slots:
//! - a node whose record announces a fork id our chain refuses is skipped; a node
//!   without one (no record yet, or none in it) is tried, and the eth handshake
//!   decides;
//! - a node is dialled at most once per backoff period, which doubles on each try (30 s
//!   up to 10 min): a node that refuses us is not hammered;
//! - at most a few dials start per tick.
//!
//! The network stays behind [`DialTarget`], so this crate does not depend on the p2p
//! crate.

use crate::discv4::Discv4;
use crate::discv5::Discv5;
use crate::{ForkId, NodeId, NodeRecord};
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::broadcast;
use tokio::sync::broadcast::error::TryRecvError;
use tokio::task::JoinHandle;

/// The network as the dialer sees it.
pub trait DialTarget: Send + Sync + 'static {
    /// Outbound connections that may start now (free slots less dials in progress).
    fn free_outbound_slots(&self) -> usize;
    /// Whether the node is connected already.
    fn is_connected(&self, id: &NodeId) -> bool;
    /// Starts a connection attempt and returns at once.
    fn dial(&self, node: &NodeRecord);
}

/// Where the dialer's candidates come from: a discovery service.
pub trait NodeSource: Send + Sync + 'static {
    /// Nodes as the service finds them.
    fn subscribe(&self) -> broadcast::Receiver<NodeRecord>;
    /// Up to `n` nodes of its table, in random order.
    fn random_nodes(&self, n: usize) -> Vec<NodeRecord>;
}

impl NodeSource for Discv4 {
    fn subscribe(&self) -> broadcast::Receiver<NodeRecord> {
        Discv4::subscribe(self)
    }

    fn random_nodes(&self, n: usize) -> Vec<NodeRecord> {
        Discv4::random_nodes(self, n)
    }
}

impl NodeSource for Discv5 {
    fn subscribe(&self) -> broadcast::Receiver<NodeRecord> {
        Discv5::subscribe(self)
    }

    fn random_nodes(&self, n: usize) -> Vec<NodeRecord> {
        Discv5::random_nodes(self, n)
    }
}

/// Whether a fork id is one our chain can talk to (EIP-2124's rules, our head).
pub type ForkCheck = Arc<dyn Fn(&ForkId) -> bool + Send + Sync>;

/// The dialer's pace.
#[derive(Debug, Clone)]
pub struct DialerConfig {
    /// How often it looks for free slots.
    pub tick: Duration,
    /// Most dials started per tick.
    pub max_dials_per_tick: usize,
    /// Wait before a node is dialled again, doubled per try up to `max_backoff`.
    pub initial_backoff: Duration,
    /// Ceiling of the doubling backoff between dials of one node.
    pub max_backoff: Duration,
}

impl Default for DialerConfig {
    fn default() -> Self {
        DialerConfig {
            tick: Duration::from_secs(1),
            max_dials_per_tick: 4,
            initial_backoff: Duration::from_secs(30),
            max_backoff: Duration::from_secs(600),
        }
    }
}

/// Candidates waiting to be dialled.
const QUEUE: usize = 256;
/// Backoff records kept.
const MAX_BACKOFFS: usize = 8192;

/// The dial decisions, apart from the clock and the network (unit-testable).
#[derive(Debug)]
pub struct DialPolicy {
    cfg: DialerConfig,
    queue: VecDeque<NodeRecord>,
    /// Node → (not before, next backoff).
    backoff: HashMap<NodeId, (Instant, Duration)>,
}

impl DialPolicy {
    /// A policy with an empty queue and no backoff records.
    pub fn new(cfg: DialerConfig) -> Self {
        DialPolicy {
            cfg,
            queue: VecDeque::new(),
            backoff: HashMap::new(),
        }
    }

    /// Queues a node found by discovery (newest replace oldest past the limit).
    pub fn offer(&mut self, node: NodeRecord) {
        if let Some(q) = self.queue.iter_mut().find(|q| q.id == node.id) {
            // A later notification may carry the record.
            if node.enr.is_some() {
                *q = node;
            }
            return;
        }
        if self.queue.len() >= QUEUE {
            self.queue.pop_front();
        }
        self.queue.push_back(node);
    }

    fn allowed(&self, node: &NodeRecord, now: Instant, fork_ok: &dyn Fn(&ForkId) -> bool) -> bool {
        if node.fork_id().is_some_and(|f| !fork_ok(&f)) {
            metrics::counter!("moat_discovery_dial_skips_total", "reason" => "fork_id")
                .increment(1);
            return false;
        }
        node.tcp != 0 && self.backoff.get(&node.id).is_none_or(|(at, _)| now >= *at)
    }

    /// Picks up to `n` nodes to dial now, from the queue then from `extra`, and starts
    /// their backoff.
    pub fn pick(
        &mut self,
        now: Instant,
        n: usize,
        extra: Vec<NodeRecord>,
        fork_ok: &dyn Fn(&ForkId) -> bool,
        connected: &dyn Fn(&NodeId) -> bool,
    ) -> Vec<NodeRecord> {
        let mut picked: Vec<NodeRecord> = Vec::new();
        let mut keep = VecDeque::new();
        let queued: Vec<NodeRecord> = self.queue.drain(..).collect();
        let all = queued
            .into_iter()
            .map(|node| (true, node))
            .chain(extra.into_iter().map(|node| (false, node)));
        for (from_queue, node) in all {
            if picked.len() >= n {
                // Unpicked queued nodes wait for the next tick; table nodes come again.
                if from_queue {
                    keep.push_back(node);
                }
                continue;
            }
            if picked.iter().any(|p| p.id == node.id)
                || connected(&node.id)
                || !self.allowed(&node, now, fork_ok)
            {
                continue;
            }
            let wait = self
                .backoff
                .get(&node.id)
                .map_or(self.cfg.initial_backoff, |(_, w)| *w);
            self.backoff
                .insert(node.id, (now + wait, (wait * 2).min(self.cfg.max_backoff)));
            picked.push(node);
        }
        self.queue = keep;
        if self.backoff.len() > MAX_BACKOFFS {
            let max = self.cfg.max_backoff;
            self.backoff.retain(|_, (at, _)| *at + max > now);
        }
        picked
    }
}

/// Runs the dialer until the returned task is aborted.
pub fn spawn_dialer(
    sources: Vec<Arc<dyn NodeSource>>,
    target: Arc<dyn DialTarget>,
    fork_ok: ForkCheck,
    cfg: DialerConfig,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut events: Vec<_> = sources.iter().map(|s| s.subscribe()).collect();
        let mut policy = DialPolicy::new(cfg.clone());
        let mut tick = tokio::time::interval(cfg.tick);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            for events in &mut events {
                loop {
                    match events.try_recv() {
                        Ok(node) => policy.offer(node),
                        Err(TryRecvError::Lagged(_)) => continue,
                        Err(_) => break,
                    }
                }
            }
            let free = target.free_outbound_slots().min(cfg.max_dials_per_tick);
            if free == 0 {
                continue;
            }
            let extra = sources.iter().flat_map(|s| s.random_nodes(32)).collect();
            let picked = policy.pick(Instant::now(), free, extra, &*fork_ok, &|id| {
                target.is_connected(id)
            });
            for node in picked {
                tracing::debug!(node = %node, fork_id = ?node.fork_id(), "dialling a discovered node");
                metrics::counter!("moat_discovery_dials_total").increment(1);
                target.dial(&node);
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::IpAddr;

    fn node(i: u8, tcp: u16) -> NodeRecord {
        NodeRecord::new(
            NodeId::repeat_byte(i),
            IpAddr::from([127, 0, 0, 1]),
            30303,
            tcp,
        )
    }

    #[test]
    fn picks_respect_backoff_limit_and_connections() {
        let mut p = DialPolicy::new(DialerConfig::default());
        let now = Instant::now();
        let any = |_: &ForkId| true;
        for i in 1..=5 {
            p.offer(node(i, 30303));
        }
        p.offer(node(6, 0)); // no TCP port: never dialled
        let connected = |id: &NodeId| *id == NodeId::repeat_byte(2);
        let got = p.pick(now, 2, vec![], &any, &connected);
        assert_eq!(
            got.iter().map(|n| n.id.0[0]).collect::<Vec<_>>(),
            vec![1, 3]
        );
        // The rest waits; 1 and 3 are backing off.
        let got = p.pick(now, 10, vec![node(1, 30303)], &any, &connected);
        assert_eq!(
            got.iter().map(|n| n.id.0[0]).collect::<Vec<_>>(),
            vec![4, 5]
        );
        // After the backoff, 1 may be dialled again; then it waits twice as long.
        let later = now + Duration::from_secs(31);
        assert_eq!(
            p.pick(later, 10, vec![node(1, 30303)], &any, &connected)
                .len(),
            1
        );
        let later2 = later + Duration::from_secs(31);
        assert!(
            p.pick(later2, 10, vec![node(1, 30303)], &any, &connected)
                .is_empty()
        );
        let later3 = later + Duration::from_secs(61);
        assert_eq!(
            p.pick(later3, 10, vec![node(1, 30303)], &any, &connected)
                .len(),
            1
        );
    }

    #[test]
    fn incompatible_fork_ids_are_skipped() {
        use crate::enr::{Enr, EnrFields};
        use secp256k1::SecretKey;
        let ours = ForkId {
            hash: [1, 1, 1, 1],
            next: 0,
        };
        let theirs = ForkId {
            hash: [2, 2, 2, 2],
            next: 0,
        };
        let record = |b: u8, fork| {
            let key = SecretKey::from_byte_array([b; 32]).unwrap();
            let enr = Enr::build(
                &key,
                1,
                &EnrFields {
                    ip: Some(IpAddr::from([127, 0, 0, 1])),
                    tcp: Some(30303),
                    udp: Some(30303),
                    fork_id: Some(fork),
                },
            )
            .unwrap();
            NodeRecord::from_enr(enr).unwrap()
        };
        let mut p = DialPolicy::new(DialerConfig::default());
        let check = |f: &ForkId| *f == ours;
        let none = |_: &NodeId| false;
        let got = p.pick(
            Instant::now(),
            10,
            vec![record(1, theirs), record(2, ours), node(3, 30303)],
            &check,
            &none,
        );
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].fork_id(), Some(ours));
        assert_eq!(got[1].fork_id(), None);
    }
}
