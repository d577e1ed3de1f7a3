//! Pulls a node's whole account trie over snap/1 and times it: `GetAccountRange` from
//! zero to the end at the node's head root, every answer checked with the range-proof
//! verifier, as a syncing node would. For by-hand measurements of snap serving (moat or
//! any other client); loopback or a node you run yourself only. `--behind N` pulls the
//! state root of the block N below the head instead (a snap sync's pivot is 64 below).
//!
//! ```sh
//! cargo run --release -p moat-p2p --example snap_pull -- \
//!     --enode enode://…@127.0.0.1:30303 --genesis genesis.json [--bytes 524288] [--max-requests 100000] [--behind 64]
//! ```

use alloy_primitives::{B256, U256};
use moat_common::config::Genesis;
use moat_p2p::Enode;
use moat_p2p::client::Client;
use moat_p2p::eth::{EthMessage, HashOrNumber, Status};
use moat_p2p::session::Incoming;
use moat_p2p::snap::{SnapMessage, full_account};
use moat_trie::range::verify_range_proof;
use std::time::{Duration, Instant};

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), String> {
    let enode: Enode = arg("--enode")
        .ok_or("--enode is required")?
        .parse()
        .map_err(|e| format!("--enode: {e}"))?;
    let genesis = Genesis::from_file(arg("--genesis").ok_or("--genesis is required")?.as_ref())
        .map_err(|e| format!("--genesis: {e}"))?;
    let bytes: u64 = arg("--bytes")
        .map_or(Ok(512 * 1024), |b| b.parse())
        .map_err(|_| "--bytes")?;
    let max_requests: u64 = arg("--max-requests")
        .map_or(Ok(100_000), |b| b.parse())
        .map_err(|_| "--max-requests")?;
    let behind: u64 = arg("--behind")
        .map_or(Ok(0), |b| b.parse())
        .map_err(|_| "--behind")?;
    let genesis_hash = genesis.header().hash();
    // The fork id with every scheduled fork passed: what a node at the tip announces.
    let far = 1u64 << 62;
    let status = Status {
        version: 69,
        network_id: genesis.config.chain_id,
        genesis: genesis_hash,
        fork_id: genesis
            .config
            .fork_id(genesis_hash, genesis.timestamp, far, far),
        total_difficulty: U256::ZERO,
        head: genesis_hash,
        earliest: 0,
        latest: 0,
    };
    let key = {
        let mut b = [0u8; 32];
        getrandom::fill(&mut b).map_err(|e| e.to_string())?;
        secp256k1::SecretKey::from_byte_array(b).map_err(|e| e.to_string())?
    };
    let mut peer = Client::connect_snap(&enode, key, &[69, 68], status)
        .await
        .map_err(|e| format!("handshake: {e}"))?;
    if !peer.snap() {
        return Err("the node does not offer snap/1".into());
    }
    let head = peer.remote_status().head;
    // The head's header, then (with --behind) the one that many blocks below it.
    let mut header = None;
    for (request_id, origin) in [(1, HashOrNumber::Hash(head)), (2, HashOrNumber::Number(0))] {
        let origin = match (origin, &header) {
            (HashOrNumber::Hash(h), _) => HashOrNumber::Hash(h),
            (_, Some(moat_common::block::Header { number, .. })) if behind > 0 => {
                HashOrNumber::Number(number.saturating_sub(behind))
            }
            _ => break,
        };
        peer.send(&EthMessage::GetBlockHeaders {
            request_id,
            origin,
            amount: 1,
            skip: 0,
            reverse: false,
        })
        .await
        .map_err(|e| e.to_string())?;
        let rlp = peer
            .wait_for(Duration::from_secs(10), |m| match m {
                EthMessage::BlockHeaders { headers, .. } => headers.first().cloned(),
                _ => None,
            })
            .await
            .ok_or("no header")?;
        header =
            Some(moat_common::block::Header::decode(&mut &rlp[..]).map_err(|e| e.to_string())?);
    }
    let header = header.ok_or("no header")?;
    let root = header.state_root;
    println!(
        "block #{} root {root}, {bytes} bytes a request",
        header.number
    );

    let started = Instant::now();
    let (mut origin, mut accounts, mut requests, mut wire) = (B256::ZERO, 0u64, 0u64, 0u64);
    let (mut slowest, mut waited) = (Duration::ZERO, Duration::ZERO);
    loop {
        if requests >= max_requests {
            return Err(format!("stopped after {requests} requests"));
        }
        let asked = Instant::now();
        peer.send_snap(&SnapMessage::GetAccountRange {
            request_id: requests,
            root,
            origin,
            limit: B256::repeat_byte(0xff),
            bytes,
        })
        .await
        .map_err(|e| e.to_string())?;
        let answer = loop {
            match peer.recv(Duration::from_secs(30)).await {
                Ok(Some(Incoming::Snap(m))) => break m,
                Ok(Some(Incoming::Eth(_))) => continue,
                other => return Err(format!("no answer: {other:?}")),
            }
        };
        slowest = slowest.max(asked.elapsed());
        waited += asked.elapsed();
        requests += 1;
        wire += answer.encode().len() as u64;
        let SnapMessage::AccountRange {
            accounts: got,
            proof,
            ..
        } = answer
        else {
            return Err(format!("unexpected answer {}", answer.name()));
        };
        if got.is_empty() {
            return Err(format!("empty answer at {origin} (root not served?)"));
        }
        let keys: Vec<B256> = got.iter().map(|(k, _)| *k).collect();
        let values = got
            .iter()
            .map(|(_, slim)| full_account(slim))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("account body: {e}"))?;
        let more = verify_range_proof(root, &origin, &keys, &values, &proof)
            .map_err(|e| format!("range at {origin} does not verify: {e}"))?;
        accounts += keys.len() as u64;
        if !more {
            break;
        }
        let last = U256::from_be_bytes(keys[keys.len() - 1].0);
        origin = B256::from(last + U256::from(1));
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "{accounts} accounts in {requests} requests, {:.1} MB, {secs:.2} s ({:.2} s waiting for answers, the rest verifying): {:.0} accounts/s, {:.1} MB/s, slowest answer {} ms",
        wire as f64 / 1e6,
        waited.as_secs_f64(),
        accounts as f64 / secs,
        wire as f64 / 1e6 / secs,
        slowest.as_millis()
    );
    Ok(())
}
