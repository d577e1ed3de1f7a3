//! discv5 through sigp's `discv5` crate (the implementation reth and lighthouse run).
//!
//! The crate owns its UDP socket, so discv5 listens on a port of its own (geth shares
//! one socket between v4 and v5; the crate cannot). Its record is ours: the same key,
//! sequence number, `ip`, `tcp` and `eth` entry as the discv4 record, built by
//! [`Enr::build`] and handed to the crate, with only `udp` naming the discv5 port. The
//! crate is told not to rewrite it from peers' votes; [`Discv5::sync_record`] copies
//! changes of the discv4 record (fork id, learned IP) into it.
//!
//! Found nodes are offered to the dialer as [`NodeRecord`]s like discv4's: records of
//! other identity schemes than "v4" cannot be dialled over RLPx and are dropped.

use crate::enr::{Enr, EnrFields};
use crate::{ForkId, NodeRecord};
use alloy_primitives::B256;
use discv5::{ConfigBuilder, Event, ListenConfig};
use enr::{CombinedKey, NodeId as V5NodeId};
use secp256k1::SecretKey;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::broadcast;

/// The crate's record type (`enr::Enr<CombinedKey>`).
pub type V5Enr = discv5::Enr;

/// How often a random lookup runs while the table is small, and otherwise.
const LOOKUP_SMALL: Duration = Duration::from_secs(10);
const LOOKUP_EVERY: Duration = Duration::from_secs(60);
/// How often each node in the table is pinged (the first time: this long after it
/// connects).
const PING_INTERVAL: Duration = Duration::from_secs(20);
/// Below this many nodes the table counts as small.
const SMALL_TABLE: usize = 16;

/// What discv5 needs to start.
#[derive(Debug, Clone)]
pub struct Discv5Config {
    /// Our node key (the same as discv4's): signs the record and the sessions' handshakes.
    pub secret_key: SecretKey,
    /// Where to listen (IPv4 or IPv6).
    pub listen: SocketAddr,
    /// The record's fields; `udp` is replaced by the bound port.
    pub fields: EnrFields,
    /// The record's sequence number (the discv4 record's).
    pub seq: u64,
    /// Nodes to start from (their `enr:` records).
    pub bootnodes: Vec<Enr>,
}

/// Why discv5 did not start.
#[derive(Debug, thiserror::Error)]
pub enum Discv5Error {
    /// Our record could not be built for discv5 (the reason as text).
    #[error("discv5 record: {0}")]
    Record(String),
    /// The discv5 service failed to start (the reason as text).
    #[error("discv5: {0}")]
    Start(String),
}

/// A running discv5 service. Cheap to clone.
#[derive(Clone)]
pub struct Discv5 {
    inner: Arc<discv5::Discv5>,
    found: broadcast::Sender<NodeRecord>,
    listen: SocketAddr,
}

impl std::fmt::Debug for Discv5 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Discv5")
            .field("listen", &self.listen)
            .finish()
    }
}

/// An RLP item written as is (the `eth` entry is already encoded).
struct RawRlp<'a>(&'a [u8]);

impl alloy_rlp::Encodable for RawRlp<'_> {
    fn encode(&self, out: &mut dyn alloy_rlp::BufMut) {
        out.put_slice(self.0);
    }

    fn length(&self) -> usize {
        self.0.len()
    }
}

/// Our record as the crate's type (same bytes, same signature).
pub fn to_v5(enr: &Enr) -> Result<V5Enr, String> {
    alloy_rlp::Decodable::decode(&mut enr.as_bytes()).map_err(|e| e.to_string())
}

/// The crate's record as ours, if it is a "v4" record.
pub fn from_v5(enr: &V5Enr) -> Option<Enr> {
    Enr::decode_exact(&alloy_rlp::encode(enr)).ok()
}

impl Discv5 {
    /// Binds the socket and starts the service and its lookup loop.
    pub async fn spawn(cfg: Discv5Config) -> Result<Discv5, Discv5Error> {
        // The port is known only once bound: take it from a probe socket if 0.
        let mut listen = cfg.listen;
        if listen.port() == 0 {
            let probe =
                std::net::UdpSocket::bind(listen).map_err(|e| Discv5Error::Start(e.to_string()))?;
            listen = probe
                .local_addr()
                .map_err(|e| Discv5Error::Start(e.to_string()))?;
        }
        let mut fields = cfg.fields;
        fields.udp = Some(listen.port());
        let ours = Enr::build(&cfg.secret_key, cfg.seq, &fields)
            .map_err(|e| Discv5Error::Record(e.to_string()))?;
        let enr = to_v5(&ours).map_err(Discv5Error::Record)?;
        let mut bytes = cfg.secret_key.secret_bytes();
        let key = CombinedKey::secp256k1_from_bytes(&mut bytes)
            .map_err(|e| Discv5Error::Record(e.to_string()))?;
        let listen_cfg = match listen.ip() {
            IpAddr::V4(ip) => ListenConfig::Ipv4 {
                ip,
                port: listen.port(),
            },
            IpAddr::V6(ip) => ListenConfig::Ipv6 {
                ip,
                port: listen.port(),
            },
        };
        // The crate pings a new node only after `ping_interval` (default 5 min); geth
        // checks new nodes within seconds, and peers expect to hear from us soon.
        let config = ConfigBuilder::new(listen_cfg)
            .disable_enr_update()
            .ping_interval(PING_INTERVAL)
            .build();
        let mut service =
            discv5::Discv5::new(enr, key, config).map_err(|e| Discv5Error::Start(e.to_string()))?;
        for boot in &cfg.bootnodes {
            let Ok(b) = to_v5(boot) else { continue };
            if let Err(e) = service.add_enr(b) {
                tracing::debug!(error = e, "discv5 bootnode refused");
            }
        }
        service
            .start()
            .await
            .map_err(|e| Discv5Error::Start(format!("{e:?}")))?;
        let events = service
            .event_stream()
            .await
            .map_err(|e| Discv5Error::Start(format!("{e:?}")))?;
        let (found, _) = broadcast::channel(256);
        let disc = Discv5 {
            inner: Arc::new(service),
            found,
            listen,
        };
        tokio::spawn(disc.clone().event_loop(events));
        tokio::spawn(disc.clone().lookup_loop());
        Ok(disc)
    }

    /// The address the socket is bound to.
    pub fn local_addr(&self) -> SocketAddr {
        self.listen
    }

    /// Our record as discv5 serves it.
    pub fn local_enr(&self) -> V5Enr {
        self.inner.local_enr()
    }

    /// Nodes in the discv5 table.
    pub fn table_len(&self) -> usize {
        self.inner.table_entries_id().len()
    }

    /// Up to `n` dialable nodes from the table, in random order.
    pub fn random_nodes(&self, n: usize) -> Vec<NodeRecord> {
        let mut all: Vec<NodeRecord> = self
            .inner
            .table_entries_enr()
            .iter()
            .filter_map(from_v5)
            .filter_map(NodeRecord::from_enr)
            .collect();
        let mut seed = [0u8; 8];
        let _ = getrandom::fill(&mut seed);
        let mut x = u64::from_le_bytes(seed) | 1;
        for i in (1..all.len()).rev() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            all.swap(i, (x % (i as u64 + 1)) as usize);
        }
        all.truncate(n);
        all
    }

    /// Nodes as discovery finds them.
    pub fn subscribe(&self) -> broadcast::Receiver<NodeRecord> {
        self.found.subscribe()
    }

    /// One lookup toward a random target; returns what it found.
    pub async fn lookup_random(&self) -> Vec<NodeRecord> {
        metrics::counter!("moat_discovery_v5_lookups_total").increment(1);
        let mut target = [0u8; 32];
        let _ = getrandom::fill(&mut target);
        match self.inner.find_node(V5NodeId::new(&target)).await {
            Ok(found) => found
                .iter()
                .filter_map(from_v5)
                .filter_map(NodeRecord::from_enr)
                .collect(),
            Err(e) => {
                tracing::debug!(error = %e, "discv5 lookup failed");
                Vec::new()
            }
        }
    }

    /// Adds a node by its record (a discv5 bootnode, or a record discv4 fetched: geth
    /// serves both protocols on the port its record names). Returns whether the table
    /// took it.
    pub fn add_node(&self, enr: &Enr) -> bool {
        match to_v5(enr) {
            Ok(v5) => self.inner.add_enr(v5).is_ok(),
            Err(_) => false,
        }
    }

    /// Copies the discv4 record's IP and fork id into ours when they differ (each
    /// change raises our sequence number, as it raises discv4's).
    pub fn sync_record(&self, v4: &Enr) {
        let ours = self.inner.local_enr();
        if let Some(ip) = v4.ip() {
            let current = match ip {
                IpAddr::V4(_) => ours.ip4().map(IpAddr::V4),
                IpAddr::V6(_) => ours.ip6().map(IpAddr::V6),
            };
            if current != Some(ip) {
                self.inner
                    .update_local_enr_socket(SocketAddr::new(ip, self.listen.port()), false);
            }
        }
        if let Some(eth) = v4.get(b"eth")
            && ours.get_raw_rlp("eth") != Some(eth)
            && let Err(e) = self.inner.enr_insert("eth", &RawRlp(eth))
        {
            tracing::warn!(error = %e, "discv5 record: eth entry not updated");
        }
    }

    /// Puts a fork id in our record's `eth` entry, if it is not there already.
    pub fn set_fork_id(&self, fork: ForkId) {
        let eth = crate::enr::encode_eth_entry(fork);
        if self.inner.local_enr().get_raw_rlp("eth") != Some(eth.as_slice())
            && let Err(e) = self.inner.enr_insert("eth", &RawRlp(&eth))
        {
            tracing::warn!(error = %e, "discv5 record: eth entry not updated");
        }
    }

    /// The `eth` entry of our discv5 record.
    pub fn fork_id(&self) -> Option<ForkId> {
        from_v5(&self.inner.local_enr()).and_then(|e| e.eth_fork_id())
    }

    /// The node id discv5 uses for us (keccak256 of the public key).
    pub fn node_hash(&self) -> B256 {
        B256::from(self.inner.local_enr().node_id().raw())
    }

    async fn event_loop(self, mut events: tokio::sync::mpsc::Receiver<Event>) {
        while let Some(event) = events.recv().await {
            let enr = match event {
                Event::Discovered(enr) => enr,
                Event::SessionEstablished(enr, _) => enr,
                Event::NodeInserted { .. } => {
                    metrics::gauge!("moat_discovery_v5_table_nodes").set(self.table_len() as f64);
                    continue;
                }
                Event::UnverifiableEnr { .. }
                | Event::SessionsExpired(_)
                | Event::SocketUpdated(_)
                | Event::TalkRequest(_)
                | Event::UnrecognizedFrame(_) => continue,
                // The crate's enum is non-exhaustive: later events carry nothing to dial.
                _ => continue,
            };
            if let Some(node) = from_v5(&enr).and_then(NodeRecord::from_enr) {
                let _ = self.found.send(node);
            }
        }
    }

    /// Asks every node of a small table for its neighbours at distances 248–256 (all but
    /// 1/512 of them), and hands what they name to the dialer. A random lookup asks only
    /// for the few distances around a random target, so a handful of nodes can miss each
    /// other for many rounds; this finds them in one.
    async fn ask_table(&self) {
        let us = self.inner.local_enr().node_id();
        for enr in self.inner.table_entries_enr() {
            let distances: Vec<u64> = (248..=256).rev().collect();
            match self.inner.find_node_designated_peer(enr, distances).await {
                Ok(found) => {
                    for enr in found.into_iter().filter(|e| e.node_id() != us) {
                        if let Some(node) = from_v5(&enr).and_then(NodeRecord::from_enr) {
                            let _ = self.found.send(node);
                        }
                        let _ = self.inner.add_enr(enr);
                    }
                }
                Err(e) => tracing::debug!(error = %e, "discv5 neighbours request failed"),
            }
        }
    }

    async fn lookup_loop(self) {
        loop {
            // With an empty table there is nobody to ask (the crate warns if asked).
            if self.table_len() > 0 {
                if self.table_len() < SMALL_TABLE {
                    self.ask_table().await;
                }
                self.lookup_random().await;
            }
            let wait = if self.table_len() < SMALL_TABLE {
                LOOKUP_SMALL
            } else {
                LOOKUP_EVERY
            };
            metrics::gauge!("moat_discovery_v5_table_nodes").set(self.table_len() as f64);
            tokio::time::sleep(wait).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_convert_both_ways() {
        let key = SecretKey::from_byte_array([7; 32]).unwrap();
        let fork = ForkId {
            hash: [1, 2, 3, 4],
            next: 99,
        };
        let ours = Enr::build(
            &key,
            42,
            &EnrFields {
                ip: Some(IpAddr::from([127, 0, 0, 1])),
                udp: Some(9000),
                tcp: Some(30303),
                fork_id: Some(fork),
            },
        )
        .unwrap();
        let v5 = to_v5(&ours).unwrap();
        assert_eq!(v5.seq(), 42);
        assert_eq!(v5.udp4(), Some(9000));
        assert_eq!(B256::from(v5.node_id().raw()), ours.node_hash());
        let back = from_v5(&v5).unwrap();
        assert_eq!(back, ours);
        assert_eq!(back.eth_fork_id(), Some(fork));
    }

    #[tokio::test]
    async fn two_services_find_each_other_and_share_the_record() {
        let fork = ForkId {
            hash: [9, 9, 9, 9],
            next: 0,
        };
        let start = |b: u8, boot: Vec<Enr>| {
            let key = SecretKey::from_byte_array([b; 32]).unwrap();
            Discv5::spawn(Discv5Config {
                secret_key: key,
                listen: "127.0.0.1:0".parse().unwrap(),
                fields: EnrFields {
                    ip: Some(IpAddr::from([127, 0, 0, 1])),
                    udp: None,
                    tcp: Some(30000 + b as u16),
                    fork_id: Some(fork),
                },
                seq: 5,
                bootnodes: boot,
            })
        };
        let a = start(1, vec![]).await.unwrap();
        let a_enr = from_v5(&a.local_enr()).unwrap();
        assert_eq!(a_enr.udp(), Some(a.local_addr().port()));
        assert_eq!(a_enr.seq(), 5);
        let b = start(2, vec![a_enr.clone()]).await.unwrap();
        let mut found = b.subscribe();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        let mut seen = None;
        while seen.is_none() && tokio::time::Instant::now() < deadline {
            b.lookup_random().await;
            while let Ok(n) = found.try_recv() {
                if n.id == a_enr.id() {
                    seen = Some(n);
                }
            }
        }
        let seen = seen.expect("b found a over discv5");
        assert_eq!(seen.tcp, 30001);
        assert_eq!(seen.fork_id(), Some(fork));
        assert!(b.random_nodes(8).iter().any(|n| n.id == a_enr.id()));

        // A new fork id in the discv4 record reaches the discv5 one, with a new seq.
        let next = ForkId {
            hash: [8, 8, 8, 8],
            next: 0,
        };
        let key = SecretKey::from_byte_array([1; 32]).unwrap();
        let v4 = Enr::build(
            &key,
            6,
            &EnrFields {
                ip: Some(IpAddr::from([127, 0, 0, 1])),
                udp: Some(1),
                tcp: Some(30001),
                fork_id: Some(next),
            },
        )
        .unwrap();
        a.sync_record(&v4);
        assert_eq!(a.fork_id(), Some(next));
        assert!(a.local_enr().seq() > 5);
    }
}
