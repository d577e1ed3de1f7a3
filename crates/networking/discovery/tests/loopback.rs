//! discv4 on 127.0.0.1 with ephemeral ports: instances find each other through one
//! bootnode, and a hand-driven peer checks the protocol rules (bonding, expiry,
//! malformed and unsolicited packets).

use alloy_primitives::{B256, B512};
use moat_discovery::packet::{
    self, Decoded, Endpoint, EnrRequest, FindNode, Neighbor, Neighbors, Packet, Ping, Pong,
};
use moat_discovery::{Discv4, Discv4Config, ForkId, NodeId, NodeRecord, node_id};
use secp256k1::{SECP256K1, SecretKey};
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::net::UdpSocket;

const FORK: ForkId = ForkId {
    hash: [0xfc, 0x64, 0xec, 0x04],
    next: 1_150_000,
};

fn key(b: u8) -> SecretKey {
    let mut k = [b; 32];
    k[0] = 0x5a;
    SecretKey::from_byte_array(k).unwrap()
}

fn config(k: u8, bootnodes: Vec<NodeRecord>) -> Discv4Config {
    let mut cfg = Discv4Config::new(key(k), SocketAddr::from(([127, 0, 0, 1], 0)));
    cfg.tcp_port = 30303;
    cfg.bootnodes = bootnodes;
    cfg.fork_id = Some(FORK);
    cfg.ping_interval = Duration::from_millis(200);
    cfg.sparse_refresh_interval = Duration::from_millis(500);
    cfg
}

/// A node that neither refreshes nor revalidates during a test: only the hand-driven
/// peer's packets make it send anything.
fn quiet_config(k: u8) -> Discv4Config {
    let mut cfg = config(k, vec![]);
    cfg.ping_interval = Duration::from_secs(600);
    cfg.sparse_refresh_interval = Duration::from_secs(600);
    cfg
}

fn record_of(d: &Discv4) -> NodeRecord {
    d.local_enode().parse().unwrap()
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

async fn wait_for(what: &str, secs: u64, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_find_each_other_through_one_bootnode() {
    let a = Discv4::spawn(config(1, vec![])).await.unwrap();
    let boot = record_of(&a);
    assert_eq!(boot.udp, a.local_addr().port());
    let b = Discv4::spawn(config(2, vec![boot.clone()])).await.unwrap();
    let mut events = b.subscribe();
    let knows = |d: &Discv4, id: NodeId| d.random_nodes(100).iter().any(|n| n.id == id);
    // B may have added its bootnode before it was subscribed to: its event then went by.
    let b_knew_a = knows(&b, a.local_id());
    let c = Discv4::spawn(config(3, vec![boot])).await.unwrap();
    let ids = [a.local_id(), b.local_id(), c.local_id()];
    wait_for("every node to know the others", 20, || {
        [&a, &b, &c].iter().enumerate().all(|(i, d)| {
            ids.iter()
                .enumerate()
                .all(|(j, id)| i == j || knows(d, *id))
        })
    })
    .await;
    assert_eq!(a.table_len(), 2);
    // Records follow: each node learns the others' fork id (EIP-868 ENRRequest).
    wait_for("records with the fork id", 20, || {
        [&a, &b, &c].iter().all(|d| {
            let nodes = d.random_nodes(100);
            nodes.len() == 2 && nodes.iter().all(|n| n.fork_id() == Some(FORK))
        })
    })
    .await;
    // B was told of the nodes it found.
    let mut seen = Vec::new();
    while let Ok(n) = events.try_recv() {
        seen.push(n.id);
    }
    assert!(b_knew_a || seen.contains(&a.local_id()));
    assert!(seen.contains(&c.local_id()));
    // Our own record carries the fork id and endpoints.
    let enr = a.local_enr();
    assert_eq!(enr.eth_fork_id(), Some(FORK));
    assert_eq!(enr.udp(), Some(a.local_addr().port()));
    assert_eq!(enr.tcp(), Some(30303));
    assert_eq!(enr.id(), a.local_id());
    // A new fork id bumps the record.
    let next = ForkId {
        hash: [1, 2, 3, 4],
        next: 0,
    };
    a.set_fork_id(next);
    assert_eq!(a.local_enr().seq(), enr.seq() + 1);
    assert_eq!(a.local_enr().eth_fork_id(), Some(next));
    for d in [a, b, c] {
        d.shutdown();
    }
}

/// A peer driven by hand over its own socket.
struct Peer {
    sock: UdpSocket,
    key: SecretKey,
}

impl Peer {
    async fn new(k: u8) -> Peer {
        Peer {
            sock: UdpSocket::bind("127.0.0.1:0").await.unwrap(),
            key: key(k),
        }
    }

    fn endpoint(&self) -> Endpoint {
        let a = self.sock.local_addr().unwrap();
        Endpoint {
            ip: Some(a.ip()),
            udp: a.port(),
            tcp: a.port(),
        }
    }

    async fn send_raw(&self, to: SocketAddr, bytes: &[u8]) {
        self.sock.send_to(bytes, to).await.unwrap();
    }

    async fn send(&self, to: SocketAddr, p: &Packet) -> B256 {
        let (bytes, hash) = p.encode(&self.key);
        self.send_raw(to, &bytes).await;
        hash
    }

    /// Everything that arrives within `wait`.
    async fn recv_all(&self, wait: Duration) -> Vec<Decoded> {
        let mut out = Vec::new();
        let deadline = tokio::time::Instant::now() + wait;
        let mut buf = [0u8; 1500];
        while let Ok(Ok((n, _))) =
            tokio::time::timeout_at(deadline, self.sock.recv_from(&mut buf)).await
        {
            out.push(packet::decode(&buf[..n]).expect("the node sends valid packets"));
        }
        out
    }

    fn ping(&self, to: SocketAddr, expiration: u64) -> Packet {
        Packet::Ping(Ping {
            version: 4,
            from: self.endpoint(),
            to: Endpoint {
                ip: Some(to.ip()),
                udp: to.port(),
                tcp: 0,
            },
            expiration,
            enr_seq: None,
        })
    }

    /// Ping, answer the node's Ping back: both sides bonded.
    async fn bond(&self, to: SocketAddr) {
        let hash = self.send(to, &self.ping(to, now() + 20)).await;
        let mut got_pong = false;
        let mut got_ping = false;
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut buf = [0u8; 1500];
        while !(got_pong && got_ping) {
            assert!(Instant::now() < deadline, "bonding timed out");
            let Ok(Ok((n, _))) =
                tokio::time::timeout(Duration::from_secs(5), self.sock.recv_from(&mut buf)).await
            else {
                continue;
            };
            let d = packet::decode(&buf[..n]).unwrap();
            match d.packet {
                Packet::Pong(p) => {
                    assert_eq!(p.ping_hash, hash);
                    assert_eq!(p.to.udp, self.sock.local_addr().unwrap().port());
                    got_pong = true;
                }
                Packet::Ping(_) => {
                    let pong = Packet::Pong(Pong {
                        to: Endpoint {
                            ip: Some(to.ip()),
                            udp: to.port(),
                            tcp: 0,
                        },
                        ping_hash: d.hash,
                        expiration: now() + 20,
                        enr_seq: None,
                    });
                    self.send(to, &pong).await;
                    got_ping = true;
                }
                _ => {}
            }
        }
    }
}

fn find_node(target: NodeId) -> Packet {
    Packet::FindNode(FindNode {
        target,
        expiration: now() + 20,
    })
}

const QUIET: Duration = Duration::from_millis(400);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ping_is_answered_and_pinged_back() {
    let d = Discv4::spawn(quiet_config(10)).await.unwrap();
    let to = d.local_addr();
    let peer = Peer::new(11).await;
    let hash = peer.send(to, &peer.ping(to, now() + 20)).await;
    let got = peer.recv_all(QUIET).await;
    assert_eq!(got.len(), 2, "{got:?}");
    let pong = got
        .iter()
        .find_map(|d| match &d.packet {
            Packet::Pong(p) => Some(p.clone()),
            _ => None,
        })
        .expect("a pong");
    assert_eq!(pong.ping_hash, hash);
    assert_eq!(pong.to.ip, Some(IpAddr::from([127, 0, 0, 1])));
    assert_eq!(pong.to.udp, peer.sock.local_addr().unwrap().port());
    assert_eq!(pong.enr_seq, Some(d.local_enr().seq()));
    assert!(got.iter().any(|d| matches!(d.packet, Packet::Ping(_))));
    assert!(got.iter().all(|g| g.sender == d.local_id()));
    d.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_expired_and_unbonded_packets_are_ignored() {
    let d = Discv4::spawn(quiet_config(20)).await.unwrap();
    let to = d.local_addr();
    let peer = Peer::new(21).await;
    // Garbage, a packet with a bad hash, a truncated one, an unknown type.
    peer.send_raw(to, b"hello").await;
    let (mut good, _) = peer.ping(to, now() + 20).encode(&peer.key);
    good[40] ^= 0xff;
    peer.send_raw(to, &good).await;
    let (ping, _) = peer.ping(to, now() + 20).encode(&peer.key);
    peer.send_raw(to, &ping[..ping.len() - 3]).await;
    peer.send_raw(to, &[0u8; 98]).await;
    // Expired.
    peer.send(to, &peer.ping(to, now() - 1)).await;
    // geth's tester writes "the past" as -(now + 20) in a u64.
    peer.send(to, &peer.ping(to, 0u64.wrapping_sub(now() + 20)))
        .await;
    // FindNode and ENRRequest without an endpoint proof.
    peer.send(to, &find_node(B512::repeat_byte(7))).await;
    peer.send(
        to,
        &Packet::EnrRequest(EnrRequest {
            expiration: now() + 20,
        }),
    )
    .await;
    assert!(peer.recv_all(QUIET).await.is_empty());
    // The node still works.
    peer.send(to, &peer.ping(to, now() + 20)).await;
    assert_eq!(peer.recv_all(QUIET).await.len(), 2);
    d.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pong_with_a_wrong_hash_does_not_bond() {
    let d = Discv4::spawn(quiet_config(30)).await.unwrap();
    let to = d.local_addr();
    let peer = Peer::new(31).await;
    peer.send(to, &peer.ping(to, now() + 20)).await;
    let got = peer.recv_all(QUIET).await;
    assert!(got.iter().any(|g| matches!(g.packet, Packet::Ping(_))));
    let bad = Packet::Pong(Pong {
        to: Endpoint {
            ip: Some(to.ip()),
            udp: to.port(),
            tcp: 0,
        },
        ping_hash: B256::ZERO,
        expiration: now() + 20,
        enr_seq: None,
    });
    peer.send(to, &bad).await;
    peer.send(to, &find_node(B512::repeat_byte(9))).await;
    let got = peer.recv_all(QUIET).await;
    assert!(
        got.iter()
            .all(|g| !matches!(g.packet, Packet::Neighbors(_))),
        "{got:?}"
    );
    d.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bonded_peers_get_neighbors_and_the_record_but_not_unsolicited_nodes() {
    let d = Discv4::spawn(quiet_config(40)).await.unwrap();
    let to = d.local_addr();
    // Two other peers bond first, so the table has something to tell.
    let others = [Peer::new(41).await, Peer::new(42).await];
    for o in &others {
        o.bond(to).await;
    }
    wait_for("the bonded peers in the table", 5, || d.table_len() == 2).await;
    let peer = Peer::new(43).await;
    peer.bond(to).await;
    // ENRRequest → ENRResponse with our record, echoing the request hash.
    let hash = peer
        .send(
            to,
            &Packet::EnrRequest(EnrRequest {
                expiration: now() + 20,
            }),
        )
        .await;
    let got = peer.recv_all(QUIET).await;
    let resp = got
        .iter()
        .find_map(|g| match &g.packet {
            Packet::EnrResponse(r) => Some(r.clone()),
            _ => None,
        })
        .expect("an ENRResponse");
    assert_eq!(resp.request_hash, hash);
    assert_eq!(resp.enr, d.local_enr());
    assert_eq!(resp.enr.eth_fork_id(), Some(FORK));
    // An expired FindNode from a bonded peer is not answered.
    let expired = Packet::FindNode(FindNode {
        target: B512::repeat_byte(3),
        expiration: 0u64.wrapping_sub(now() + 20),
    });
    peer.send(to, &expired).await;
    let got = peer.recv_all(QUIET).await;
    assert!(
        got.iter()
            .all(|g| !matches!(g.packet, Packet::Neighbors(_))),
        "{got:?}"
    );
    // Unsolicited Neighbors are dropped: the fake node is never served.
    let fake = node_id(&key(99).public_key(SECP256K1));
    peer.send(
        to,
        &Packet::Neighbors(Neighbors {
            nodes: vec![Neighbor {
                ip: Some(IpAddr::from([127, 0, 0, 1])),
                udp: 30303,
                tcp: 30303,
                id: fake,
            }],
            expiration: now() + 20,
        }),
    )
    .await;
    peer.send(to, &find_node(fake)).await;
    let got = peer.recv_all(QUIET).await;
    let nodes: Vec<Neighbor> = got
        .iter()
        .filter_map(|g| match &g.packet {
            Packet::Neighbors(n) => Some(n.nodes.clone()),
            _ => None,
        })
        .flatten()
        .collect();
    assert!(!nodes.iter().any(|n| n.id == fake));
    let known: Vec<NodeId> = others
        .iter()
        .map(|o| node_id(&o.key.public_key(SECP256K1)))
        .collect();
    for k in &known {
        assert!(nodes.iter().any(|n| n.id == *k), "{nodes:?}");
    }
    // The same FindNode from another address of the same id gets nothing (bonds are
    // per IP).
    let sock2 = UdpSocket::bind("127.0.0.2:0").await;
    if let Ok(sock2) = sock2 {
        let (bytes, _) = find_node(fake).encode(&peer.key);
        sock2.send_to(&bytes, to).await.unwrap();
        let mut buf = [0u8; 1500];
        let r = tokio::time::timeout(QUIET, sock2.recv_from(&mut buf)).await;
        assert!(r.is_err(), "a FindNode from an unbonded IP was answered");
    }
    d.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn neighbors_answers_are_split_under_1280_bytes() {
    let d = Discv4::spawn(quiet_config(50)).await.unwrap();
    let to = d.local_addr();
    // Fill the table with 20 bonded peers.
    let mut peers = Vec::new();
    for i in 0..20u8 {
        let p = Peer::new(100 + i).await;
        p.bond(to).await;
        peers.push(p);
    }
    wait_for("20 nodes in the table", 5, || d.table_len() == 20).await;
    let asker = &peers[0];
    asker.send(to, &find_node(B512::repeat_byte(1))).await;
    let mut buf = [0u8; 1500];
    let mut sizes = Vec::new();
    let mut total = 0;
    while let Ok(Ok((n, _))) = tokio::time::timeout(QUIET, asker.sock.recv_from(&mut buf)).await {
        if let Packet::Neighbors(nb) = packet::decode(&buf[..n]).unwrap().packet {
            sizes.push(n);
            total += nb.nodes.len();
        }
    }
    assert_eq!(total, 16, "16 closest nodes");
    assert_eq!(sizes.len(), 2, "{sizes:?}");
    assert!(sizes.iter().all(|&s| s <= packet::MAX_PACKET_SIZE));
    d.shutdown();
}
