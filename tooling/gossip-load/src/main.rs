//! moat-gossip-load: how fast one peer can push transactions into moat's pool.
//!
//! Starts an in-process node (in-memory chain with funded senders, pool, devp2p on
//! loopback), connects one peer over real RLPx, and sends signed transfers in
//! `Transactions` messages. Prints the time until the pool holds them all, txs/s, and the
//! process CPU time per transaction (both sides of the connection run in this process,
//! so the sending peer's signing-free share — framing, snappy, encryption — is included).
//!
//! ```text
//! cargo run --release -p moat-gossip-load -- --txs 20000 --senders 2000
//! cargo run --release -p moat-gossip-load -- --announce --txs 20000 --spam-percent 50
//! ```
//!
//! `--announce`: the peer announces instead (`NewPooledTransactionHashes`) and serves what
//! the node asks for, `--spam-percent` of the txs from unfunded fresh keys (a spamming
//! peer); run once on eth/72 and once on eth/73 (EIP-8077: sender and nonce in the
//! announcement), each on a fresh node. Prints per version the txs and bytes the node
//! fetched, its sender recoveries, the process CPU, and what was pooled.

use alloy_primitives::{Address, B256, Bytes, TxKind, U256};
use clap::Parser;
use moat_blockchain::chain::Chain;
use moat_common::config::{ChainConfig, Fork, Genesis, GenesisAccount};
use moat_common::transaction::{Eip1559Tx, SignedTransaction, Transaction};
use moat_crypto::secp::Signer;
use moat_mempool::{Counter, Pool, PoolConfig};
use moat_p2p::client::Client;
use moat_p2p::eth::EthMessage;
use moat_p2p::{Enode, Network, NetworkConfig};
use moat_rpc::StoreStateView;
use moat_storage::Store;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

#[derive(Parser, Debug)]
#[command(about = "Push transactions through one peer into an in-process moat")]
struct Args {
    /// Transactions to send.
    #[arg(long, default_value_t = 20_000)]
    txs: usize,
    /// Distinct senders (txs are spread over them, nonces in order).
    #[arg(long, default_value_t = 2_000)]
    senders: usize,
    /// Transactions per `Transactions` message.
    #[arg(long, default_value_t = 200)]
    batch: usize,
    /// The peer's admission CPU budget, CPU-µs per second (burst: half of it), for all
    /// peers too [default: the node's, an eighth of the machine per peer].
    #[arg(long)]
    peer_cpu: Option<u64>,
    /// Announce the txs and serve them when asked, on eth/72 then eth/73.
    #[arg(long)]
    announce: bool,
    /// With `--announce`: percent of the txs from unfunded fresh keys.
    #[arg(long, default_value_t = 50)]
    spam_percent: usize,
}

const CHAIN_ID: u64 = 7_777;

fn genesis(senders: &[Signer]) -> Genesis {
    let mut alloc = BTreeMap::new();
    for s in senders {
        alloc.insert(
            s.address(),
            GenesisAccount {
                balance: U256::from(10u128.pow(24)),
                ..Default::default()
            },
        );
    }
    Genesis {
        config: ChainConfig::all_forks_at_genesis(CHAIN_ID, Fork::Prague),
        nonce: 0,
        timestamp: 0,
        extra_data: Bytes::new(),
        gas_limit: 30_000_000,
        difficulty: U256::ZERO,
        mix_hash: B256::ZERO,
        coinbase: Address::ZERO,
        alloc,
        number: 0,
        gas_used: 0,
        parent_hash: B256::ZERO,
        base_fee_per_gas: Some(1_000_000_000),
        excess_blob_gas: None,
        blob_gas_used: None,
    }
}

/// User + system CPU seconds of this process so far (Linux /proc).
fn cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / 100.0)
}

/// An in-process node: chain with `senders` funded, pool, devp2p on loopback.
async fn node(args: &Args, senders: &[Signer]) -> (Pool, Network, Enode) {
    let genesis = genesis(senders);
    let store = Store::in_memory();
    let chain = Chain::init(store.clone(), &genesis).expect("genesis");
    let config = chain.config().clone();
    let mut pool_cfg = PoolConfig::new(config.clone());
    pool_cfg.pending.max_txs = args.txs * 2;
    pool_cfg.pending.max_bytes = args.txs * 2 * 1024;
    if let Some(rate) = args.peer_cpu {
        pool_cfg.budget.peer_rate_us = rate;
        pool_cfg.budget.peer_burst_us = rate / 2;
        pool_cfg.budget.peers_rate_us = rate;
    }
    let pool = Pool::new(pool_cfg, Arc::new(StoreStateView::new(store, config)));

    let node_key = secp256k1::SecretKey::from_byte_array([0x11; 32]).expect("key");
    let mut net_cfg = NetworkConfig::new(node_key, CHAIN_ID);
    net_cfg.listen = Some(([127, 0, 0, 1], 0).into());
    let net = Network::start(
        net_cfg,
        chain.clone(),
        pool.clone(),
        Arc::new(AtomicBool::new(true)),
    )
    .await
    .expect("network");
    let enode = Enode {
        id: net.local_id(),
        addr: net.listen_addr().expect("listening"),
    };
    (pool, net, enode)
}

/// A transfer of `signer` at `nonce`, as 2718 bytes with its hash.
fn transfer(signer: &Signer, nonce: u64) -> (B256, Bytes) {
    let tx = Transaction::Eip1559(Eip1559Tx {
        chain_id: CHAIN_ID,
        nonce,
        max_priority_fee_per_gas: 1_000_000_000,
        max_fee_per_gas: 3_000_000_000,
        gas_limit: 21_000,
        to: TxKind::Call(Address::repeat_byte(0x55)),
        value: U256::from(1),
        input: Bytes::new(),
        access_list: vec![],
    });
    let signed = SignedTransaction::sign(tx, signer);
    (signed.hash(), Bytes::from(signed.encoded_2718()))
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    let senders: Vec<Signer> = (0..args.senders as u64)
        .map(|i| Signer::from_seed(1_000 + i))
        .collect();
    if args.announce {
        announce(&args, &senders).await;
        return;
    }
    let (pool, net, enode) = node(&args, &senders).await;

    eprintln!(
        "signing {} transfers from {} senders…",
        args.txs, args.senders
    );
    let per_sender = args.txs.div_ceil(args.senders);
    let mut txs: Vec<Bytes> = Vec::with_capacity(args.txs);
    'outer: for nonce in 0..per_sender as u64 {
        for s in &senders {
            if txs.len() == args.txs {
                break 'outer;
            }
            txs.push(transfer(s, nonce).1);
        }
    }

    let peer_key = secp256k1::SecretKey::from_byte_array([0x22; 32]).expect("key");
    let mut client = Client::connect(&enode, peer_key, &[70], net.status_for(70))
        .await
        .expect("handshake");

    let cpu0 = cpu_seconds();
    let start = Instant::now();
    for chunk in txs.chunks(args.batch) {
        client
            .send(&EthMessage::Transactions(chunk.to_vec()))
            .await
            .expect("send");
    }
    let sent = start.elapsed();
    let deadline = Instant::now() + Duration::from_secs(300);
    while pool.len() < txs.len() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let elapsed = start.elapsed();
    let cpu = cpu_seconds().zip(cpu0).map(|(b, a)| b - a);
    let pooled = pool.len();
    println!("transactions sent:   {}", txs.len());
    println!("pooled:              {pooled}");
    println!("written in:          {:.3} s", sent.as_secs_f64());
    println!("all pooled in:       {:.3} s", elapsed.as_secs_f64());
    println!(
        "throughput:          {:.0} tx/s",
        pooled as f64 / elapsed.as_secs_f64()
    );
    if let Some(cpu) = cpu {
        println!(
            "process CPU per tx:  {:.1} µs (node and sending peer together)",
            cpu * 1e6 / pooled.max(1) as f64
        );
    }
    let status = pool.status();
    println!("pool pending:        {}", status.pending.txs);
    let m = pool.metrics();
    println!(
        "sender recoveries:   {} (sender cache hits {})",
        m.get(Counter::sender_recoveries),
        m.get(Counter::sender_cache_hits)
    );
}

/// One tx the spamming peer announces: hash, bytes, sender, nonce.
struct Announced {
    hash: B256,
    raw: Bytes,
    sender: Address,
    nonce: u64,
}

/// `--announce`: the same stream announced on eth/72, then on eth/73, each to a fresh node.
async fn announce(args: &Args, senders: &[Signer]) {
    let spam = args.txs * args.spam_percent.min(100) / 100;
    let valid = args.txs - spam;
    eprintln!("signing {valid} transfers of funded senders and {spam} of unfunded ones…");
    let mut stream = Vec::with_capacity(args.txs);
    for i in 0..args.txs {
        // Spam interleaved with the valid txs, each spam tx from a key of its own.
        let spam_slot = (i + 1) * spam / args.txs > i * spam / args.txs;
        let (signer, nonce) = if spam_slot {
            (Signer::from_seed(5_000_000 + i as u64), 0)
        } else {
            let s = &senders[i % senders.len()];
            (s.clone(), (i / senders.len()) as u64)
        };
        let (hash, raw) = transfer(&signer, nonce);
        stream.push(Announced {
            hash,
            raw,
            sender: signer.address(),
            nonce,
        });
    }
    println!(
        "{:<7} {:>9} {:>12} {:>11} {:>10} {:>8}",
        "version", "fetched", "bytes", "pool ECDSA", "CPU (s)", "pooled"
    );
    for version in [72u32, 73] {
        let (pool, net, enode) = node(args, senders).await;
        let peer_key = secp256k1::SecretKey::from_byte_array([0x22; 32]).expect("key");
        let mut client = Client::connect(&enode, peer_key, &[version], net.status_for(version))
            .await
            .expect("handshake");
        let index: std::collections::HashMap<B256, usize> = stream
            .iter()
            .enumerate()
            .map(|(i, a)| (a.hash, i))
            .collect();
        let cpu0 = cpu_seconds();
        for chunk in stream.chunks(256) {
            let mut a = moat_p2p::eth::Announcement::default();
            for t in chunk {
                if version >= 73 {
                    a.push_with_origin(2, t.raw.len() as u32, t.hash, t.sender, t.nonce);
                } else {
                    a.push(2, t.raw.len() as u32, t.hash);
                }
            }
            client
                .send(&EthMessage::NewPooledTransactionHashes(a))
                .await
                .expect("send");
        }
        let (mut fetched, mut bytes) = (0usize, 0usize);
        loop {
            match client.recv(Duration::from_secs(2)).await {
                Ok(Some(moat_p2p::session::Incoming::Eth(EthMessage::GetPooledTransactions {
                    request_id,
                    hashes,
                }))) => {
                    let txs: Vec<Bytes> = hashes
                        .iter()
                        .filter_map(|h| index.get(h))
                        .map(|&i| stream[i].raw.clone())
                        .collect();
                    fetched += txs.len();
                    bytes += txs.iter().map(|t| t.len()).sum::<usize>();
                    client
                        .send(&EthMessage::PooledTransactions { request_id, txs })
                        .await
                        .expect("reply");
                }
                Ok(Some(_)) => {}
                _ => break,
            }
        }
        // The replies' admission done: the pool holds every valid tx or stopped moving.
        let mut last = usize::MAX;
        while pool.len() != last {
            last = pool.len();
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        let cpu = cpu_seconds().zip(cpu0).map_or(f64::NAN, |(b, a)| b - a);
        println!(
            "eth/{version:<3} {fetched:>9} {bytes:>12} {:>11} {cpu:>10.3} {:>8}",
            pool.metrics().get(Counter::sender_recoveries),
            pool.len()
        );
    }
}
