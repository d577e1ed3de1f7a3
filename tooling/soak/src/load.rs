//! The transaction load: signed transfers over JSON-RPC from some senders, over one
//! devp2p peer's `Transactions` messages from others, and a nonce check that keeps both
//! in step with the node.
//!
//! Every loop is paced by a schedule (call or message `k` is due at a fixed time after the
//! start), ends at the run's end, and makes at most `rate × duration` calls or messages; a
//! call more than a second late is skipped rather than sent in a burst, so the offered
//! load stays the one asked for.

use crate::Shared;
use alloy_primitives::{Address, Bytes, TxKind, U256, hex, keccak256};
use moat_common::transaction::{Eip1559Tx, SignedTransaction, Transaction};
use moat_crypto::secp::Signer;
use moat_harness::http::{CallError, RpcClient, quantity};
use moat_p2p::Enode;
use moat_p2p::client::Client;
use moat_p2p::eth::{EthMessage, Status};
use moat_p2p::session::Incoming;
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::ops::Range;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// A call this late is skipped.
const LATE: Duration = Duration::from_secs(1);
/// 1 gwei tip, fee cap far above the base fee (1 gwei at genesis, falling in blocks below
/// half full).
const TIP: u128 = 1_000_000_000;
const FEE_CAP: u128 = 20_000_000_000;
/// Senders whose pending nonce one batch call asks for.
const NONCE_BATCH: usize = 100;

/// Every sender of the run; sender `j` pays sender `j + 1`, so the state keeps its size.
pub(crate) struct Wallet {
    pub signers: Vec<Signer>,
    pub addresses: Vec<Address>,
}

impl Wallet {
    pub(crate) fn new(count: usize) -> Self {
        let signers: Vec<Signer> = (0..count as u64)
            .map(|i| Signer::from_seed(0x50a4_0000 + i))
            .collect();
        let addresses = signers.iter().map(Signer::address).collect();
        Self { signers, addresses }
    }

    /// A 1-wei transfer from sender `j` at `nonce`, as 2718 bytes.
    pub(crate) fn transfer(&self, j: usize, nonce: u64) -> Vec<u8> {
        let to = self.addresses[(j + 1) % self.addresses.len()];
        let tx = Transaction::Eip1559(Eip1559Tx {
            chain_id: crate::node::CHAIN_ID,
            nonce,
            max_priority_fee_per_gas: TIP,
            max_fee_per_gas: FEE_CAP,
            gas_limit: 21_000,
            to: TxKind::Call(to),
            value: U256::from(1),
            input: Bytes::new(),
            access_list: Vec::new(),
        });
        SignedTransaction::sign(tx, &self.signers[j]).encoded_2718()
    }
}

/// When item `k` of a schedule of `rate` a second, offset by `lane` of `lanes`, is due.
pub(crate) fn due(start: Instant, k: u64, lanes: u64, lane: u64, rate: f64) -> Instant {
    start + Duration::from_secs_f64((k * lanes + lane) as f64 / rate)
}

/// Waits for `due`; `Some(true)` to go, `Some(false)` when the item is too late and is
/// skipped, `None` when the run is over.
fn wait_turn(due: Instant, end: Instant, shared: &Shared) -> Option<bool> {
    if due >= end || !crate::sleep_until(due, shared) {
        return None;
    }
    Some(Instant::now().saturating_duration_since(due) <= LATE)
}

/// One RPC connection's share: lane `lane` of `lanes` sends the txs of the senders
/// `j ≡ lane (mod lanes)` of `senders` in turn, `rate / lanes` a second.
#[allow(clippy::too_many_arguments)]
pub(crate) fn rpc_lane(
    lane: usize,
    lanes: usize,
    senders: Range<usize>,
    rate: f64,
    rpc: SocketAddr,
    wallet: &Wallet,
    shared: &Shared,
    start: Instant,
    end: Instant,
) {
    let mine: Vec<usize> = senders.filter(|j| j % lanes == lane).collect();
    if mine.is_empty() {
        return;
    }
    let mut client = RpcClient::new(rpc, None, Duration::from_secs(10));
    let limit = (rate * end.saturating_duration_since(start).as_secs_f64()) as u64 / lanes as u64;
    let stats = &shared.stats;
    for k in 0..limit {
        match wait_turn(due(start, k, lanes as u64, lane as u64, rate), end, shared) {
            None => return,
            Some(false) => {
                stats.rpc_skipped.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            Some(true) => {}
        }
        let j = mine[k as usize % mine.len()];
        let nonce = shared.nonces[j].load(Ordering::Relaxed);
        let raw = hex::encode_prefixed(wallet.transfer(j, nonce));
        stats.rpc_sent.fetch_add(1, Ordering::Relaxed);
        let advance = || {
            let _ = shared.nonces[j].compare_exchange(
                nonce,
                nonce + 1,
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
        };
        match client.call("eth_sendRawTransaction", json!([raw])) {
            Ok(_) => {
                stats.rpc_accepted.fetch_add(1, Ordering::Relaxed);
                advance();
            }
            Err(CallError::Rpc(m)) => {
                // Sent before and answered too late: the node holds it.
                if m.contains("already known") {
                    advance();
                }
                stats.rpc_error(&m);
            }
            Err(CallError::Transport(m)) => stats.rpc_error(&format!("transport: {m}")),
        }
    }
}

async fn connect(target: &Enode, status: &Status, attempt: u64) -> Result<Client, String> {
    let seed = keccak256(format!("moat-soak peer {attempt}"));
    let key = secp256k1::SecretKey::from_byte_array(seed.0).map_err(|e| e.to_string())?;
    match tokio::time::timeout(
        Duration::from_secs(10),
        Client::connect(target, key, &[70, 69], status.clone()),
    )
    .await
    {
        Ok(Ok(c)) => Ok(c),
        Ok(Err(e)) => Err(format!("handshake with {target:?}: {e}")),
        Err(_) => Err("handshake timed out".into()),
    }
}

/// The gossiping peer: `Transactions` messages of `batch` txs from the senders of
/// `senders`, in turn, `rate` txs a second. Between messages it reads what the node sends
/// (answering pings) and drops it. A lost connection is dialled again with a fresh key,
/// once a second at most.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn gossip(
    target: Enode,
    status: Status,
    senders: Range<usize>,
    rate: f64,
    batch: usize,
    wallet: &Wallet,
    shared: &Shared,
    start: Instant,
    end: Instant,
) {
    let senders: Vec<usize> = senders.collect();
    if senders.is_empty() || batch == 0 {
        return;
    }
    let stats = &shared.stats;
    let msg_rate = rate / batch as f64;
    let limit = (msg_rate * end.saturating_duration_since(start).as_secs_f64()) as u64;
    let mut attempt = 0u64;
    let mut client: Option<Client> = None;
    let mut next_dial = Instant::now();
    let mut turn = 0usize;
    for k in 0..limit {
        let due = due(start, k, 1, 0, msg_rate);
        if due >= end || shared.stopped() {
            break;
        }
        // Read until the message is due.
        while let Some(c) = client.as_mut() {
            let left = due.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            match c.recv(left.min(Duration::from_millis(200))).await {
                Ok(Some(Incoming::Disconnect(reason))) => {
                    shared.note(format!(
                        "gossip: the node disconnected the peer ({reason:?})"
                    ));
                    client = None;
                }
                Ok(_) => {}
                Err(e) => {
                    shared.note(format!("gossip: connection lost: {e}"));
                    client = None;
                }
            }
            if shared.stopped() {
                break;
            }
        }
        if client.is_none() {
            if !crate::sleep_until(due.max(next_dial), shared) {
                break;
            }
            next_dial = Instant::now() + Duration::from_secs(1);
            attempt += 1;
            match connect(&target, &status, attempt).await {
                Ok(c) => {
                    if attempt > 1 {
                        stats.reconnects.fetch_add(1, Ordering::Relaxed);
                    }
                    client = Some(c);
                }
                Err(e) => {
                    shared.note(format!("gossip: {e}"));
                    stats
                        .gossip_skipped
                        .fetch_add(batch as u64, Ordering::Relaxed);
                    continue;
                }
            }
        }
        if Instant::now().saturating_duration_since(due) > LATE {
            stats
                .gossip_skipped
                .fetch_add(batch as u64, Ordering::Relaxed);
            continue;
        }
        let txs: Vec<Bytes> = (0..batch)
            .map(|_| {
                let j = senders[turn % senders.len()];
                turn += 1;
                let nonce = shared.nonces[j].fetch_add(1, Ordering::Relaxed);
                Bytes::from(wallet.transfer(j, nonce))
            })
            .collect();
        let c = client.as_mut().expect("connected above");
        match c.send(&EthMessage::Transactions(txs)).await {
            Ok(()) => {
                stats.gossip_sent.fetch_add(batch as u64, Ordering::Relaxed);
                stats.gossip_messages.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                shared.note(format!("gossip: send failed: {e}"));
                client = None;
            }
        }
    }
    if let Some(mut c) = client {
        c.disconnect(moat_p2p::p2p::DisconnectReason::ClientQuitting)
            .await;
    }
}

/// Rewinds the senders the node has fallen behind: every `every`, each sender's pending
/// nonce is asked of the node, and a sender whose pending nonce is still below the nonce
/// we had reached at the check before (a tx sent at least `every` ago is missing: refused,
/// lost with a connection, or dropped later) sends again from the node's nonce. Without
/// it one lost tx would leave all of its sender's later ones queued for good.
pub(crate) fn resync(
    rpc: SocketAddr,
    wallet: &Wallet,
    shared: &Shared,
    start: Instant,
    end: Instant,
    every: Duration,
) {
    let mut client = RpcClient::new(rpc, None, Duration::from_secs(30));
    let n = wallet.addresses.len();
    let mut reached: Vec<u64> = (0..n)
        .map(|j| shared.nonces[j].load(Ordering::Relaxed))
        .collect();
    let rounds = (end.saturating_duration_since(start).as_secs_f64() / every.as_secs_f64()) as u64;
    for k in 1..=rounds {
        if wait_turn(start + every.mul_f64(k as f64), end, shared).is_none() {
            return;
        }
        for first in (0..n).step_by(NONCE_BATCH) {
            let range = first..(first + NONCE_BATCH).min(n);
            let params: Vec<Value> = range
                .clone()
                .map(|j| json!([wallet.addresses[j], "pending"]))
                .collect();
            let answers = match client.batch("eth_getTransactionCount", &params) {
                Ok(a) => a,
                Err(e) => {
                    shared.note(format!("nonce check: {e}"));
                    continue;
                }
            };
            for (j, answer) in range.zip(answers) {
                let Some(node) = answer.ok().as_ref().and_then(quantity) else {
                    continue;
                };
                if node < reached[j] {
                    shared.nonces[j].store(node, Ordering::Relaxed);
                    shared.stats.rewinds.fetch_add(1, Ordering::Relaxed);
                }
                reached[j] = shared.nonces[j].load(Ordering::Relaxed);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lanes_share_one_schedule_at_the_rate() {
        let start = Instant::now();
        // 4 lanes at 200/s: every 5 ms one of them; lane 1's calls at 5, 25, 45 ms.
        let ms = |k, lane| (due(start, k, 4, lane, 200.0) - start).as_secs_f64() * 1e3;
        assert!((ms(0, 1) - 5.0).abs() < 1e-6);
        assert!((ms(2, 1) - 45.0).abs() < 1e-6);
        let mut all: Vec<u64> = (0..4)
            .flat_map(|lane| (0..5).map(move |k| (k, lane)))
            .map(|(k, lane)| ms(k, lane).round() as u64)
            .collect();
        all.sort();
        assert_eq!(all, (0..20).map(|i| i * 5).collect::<Vec<u64>>());
    }

    #[test]
    fn transfers_go_round_the_senders_and_decode() {
        let w = Wallet::new(3);
        let raw = w.transfer(2, 5);
        let tx = SignedTransaction::decode_2718(&raw).unwrap();
        assert_eq!(tx.recover_sender().unwrap(), w.addresses[2]);
        assert_eq!(tx.tx().nonce(), 5);
        assert_eq!(tx.tx().to(), TxKind::Call(w.addresses[0]));
        assert_eq!(tx.tx().chain_id(), Some(crate::node::CHAIN_ID));
    }
}
