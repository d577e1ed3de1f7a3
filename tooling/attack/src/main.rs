//! moat-attack: plays a hostile peer against any execution node (moat, geth, ...) over
//! RLPx and measures what the attack costs the node.
//!
//! The tool connects like any eth/68–70 peer (its Status is built from the genesis file the
//! node runs), pushes `Transactions` messages of one scenario, and reads the node's CPU time
//! from `/proc/<pid>/stat` before the first message and once the node has gone idle after
//! the last. When the node disconnects it, it connects again with a fresh key and goes on,
//! as an attacker would; the reconnections are counted and their handshakes are part of
//! the cost.
//!
//! Scenarios:
//! - `repeat-unfunded`: one transaction signed by a key that owns nothing, again and again
//!   (one copy per message: two copies in one message are a protocol fault).
//!   Every copy needs the sender to reject it; a node that remembers senders by hash pays
//!   one recovery in all.
//! - `fresh-unfunded`: distinct transactions from keys that own nothing. Each costs a
//!   recovery anywhere: the floor.
//! - `duplicate`: one valid, funded transaction, again and again.
//!
//! ```text
//! moat-attack --target enode://…@127.0.0.1:30303 --pid 1234 \
//!     --network ../shared/testdata/ethtest/genesis.json --scenario repeat-unfunded --txs 5000
//! ```

use alloy_primitives::{Address, Bytes, TxKind, U256};
use clap::{Parser, ValueEnum};
use moat_common::config::Genesis;
use moat_common::transaction::{Eip1559Tx, SignedTransaction, Transaction};
use moat_crypto::secp::Signer;
use moat_p2p::Enode;
use moat_p2p::client::Client;
use moat_p2p::eth::{EthMessage, Status};
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Scenario {
    RepeatUnfunded,
    FreshUnfunded,
    Duplicate,
}

#[derive(Parser, Debug)]
#[command(about = "Attack a node over RLPx and measure its CPU per attack transaction")]
struct Args {
    /// The node to attack.
    #[arg(long)]
    target: Enode,
    /// The node's process id, to read its CPU time (Linux /proc).
    #[arg(long)]
    pid: u32,
    /// The genesis file the node runs (for the Status handshake and the chain id).
    #[arg(long)]
    network: PathBuf,
    #[arg(long, value_enum)]
    scenario: Scenario,
    /// Transactions to send in all.
    #[arg(long, default_value_t = 5_000)]
    txs: usize,
    /// Transactions per `Transactions` message (`fresh-unfunded`; the repeat scenarios send
    /// one per message).
    #[arg(long, default_value_t = 128)]
    batch: usize,
    /// The eth version to offer.
    #[arg(long, default_value_t = 70)]
    eth: u32,
    /// For `duplicate`: the hex private key of a funded account of the genesis.
    #[arg(long)]
    funded_key: Option<String>,
}

/// User + system CPU seconds of process `pid` so far.
fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / 100.0)
}

/// Waits until the node spends at most one 10 ms clock tick (2 % of a core) over a 500 ms window (or 60 s
/// passed); returns its CPU seconds then.
async fn wait_idle(pid: u32) -> Option<f64> {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut last = cpu_seconds(pid)?;
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = cpu_seconds(pid)?;
        if now - last <= 0.0101 || Instant::now() > deadline {
            return Some(now);
        }
        last = now;
    }
}

fn transfer(chain_id: u64, signer: &Signer, nonce: u64, fee_cap: u128) -> Bytes {
    let tx = Transaction::Eip1559(Eip1559Tx {
        chain_id,
        nonce,
        max_priority_fee_per_gas: fee_cap,
        max_fee_per_gas: fee_cap,
        gas_limit: 21_000,
        to: TxKind::Call(Address::repeat_byte(0x66)),
        value: U256::from(1),
        input: Bytes::new(),
        access_list: vec![],
    });
    SignedTransaction::sign(tx, signer).encoded_2718().into()
}

fn build_txs(args: &Args, chain_id: u64) -> Result<Vec<Bytes>, String> {
    // Well above any base fee of a test chain.
    const FEE_CAP: u128 = 100_000_000_000;
    Ok(match args.scenario {
        Scenario::RepeatUnfunded => {
            let one = transfer(chain_id, &Signer::from_seed(0xa77ac), 0, FEE_CAP);
            vec![one; args.txs]
        }
        Scenario::FreshUnfunded => (0..args.txs as u64)
            .map(|i| {
                transfer(
                    chain_id,
                    &Signer::from_seed(0x000a_77ac_0000 + i),
                    0,
                    FEE_CAP,
                )
            })
            .collect(),
        Scenario::Duplicate => {
            let key = args
                .funded_key
                .as_deref()
                .ok_or("duplicate needs --funded-key")?;
            let key = moat_p2p::parse_node_key(key)?;
            let signer = Signer::from_bytes(&key.secret_bytes().into())
                .ok_or("--funded-key is not a valid key")?;
            // A nonce far ahead: the node keeps it (queued) without it ever being mined.
            let one = transfer(chain_id, &signer, 1_000, FEE_CAP);
            vec![one; args.txs]
        }
    })
}

async fn connect(args: &Args, status: &Status, attempt: u64) -> Result<Client, String> {
    let mut seed = [0u8; 32];
    seed[..8].copy_from_slice(&(0x5eed_0000 + attempt).to_be_bytes());
    seed[31] = 1;
    let key = secp256k1::SecretKey::from_byte_array(seed).map_err(|e| e.to_string())?;
    Client::connect(&args.target, key, &[args.eth], status.clone())
        .await
        .map_err(|e| format!("handshake with {}: {e}", args.target))
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    match run(Args::parse()).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> Result<(), String> {
    let genesis = Genesis::from_file(&args.network).map_err(|e| e.to_string())?;
    let status = Status::at_genesis(&genesis, args.eth);
    eprintln!("signing {} transactions ({:?})…", args.txs, args.scenario);
    let txs = build_txs(&args, genesis.config.chain_id)?;

    let mut client = connect(&args, &status, 0).await?;
    let mut reconnects = 0u64;
    let cpu_before = wait_idle(args.pid)
        .await
        .ok_or_else(|| format!("cannot read /proc/{}/stat", args.pid))?;
    let start = Instant::now();
    // Copies of one tx travel one per message: two in one message are a protocol fault
    // to geth and moat alike, and the point is what each copy costs.
    let per_message = match args.scenario {
        Scenario::FreshUnfunded => args.batch.max(1),
        Scenario::RepeatUnfunded | Scenario::Duplicate => 1,
    };
    for chunk in txs.chunks(per_message) {
        let msg = EthMessage::Transactions(chunk.to_vec());
        // A dropped connection is dialled again (the node may refuse for a while).
        while client.send(&msg).await.is_err() {
            reconnects += 1;
            let mut tries = 0;
            client = loop {
                match connect(&args, &status, reconnects * 100 + tries).await {
                    Ok(c) => break c,
                    Err(e) if tries >= 50 => return Err(e),
                    Err(_) => {
                        tries += 1;
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
            };
        }
    }
    let written = start.elapsed();
    let cpu_after = wait_idle(args.pid)
        .await
        .ok_or_else(|| format!("cannot read /proc/{}/stat", args.pid))?;
    let idle_at = start.elapsed();
    let cpu = cpu_after - cpu_before;
    println!("scenario:            {:?}", args.scenario);
    println!("transactions sent:   {}", txs.len());
    println!("messages:            {}", txs.len().div_ceil(per_message));
    println!("written in:          {:.2} s", written.as_secs_f64());
    println!("node idle after:     {:.2} s", idle_at.as_secs_f64());
    println!("reconnections:       {reconnects}");
    println!("node CPU:            {:.3} s", cpu);
    println!(
        "node CPU per tx:     {:.1} µs",
        cpu * 1e6 / txs.len().max(1) as f64
    );
    client
        .disconnect(moat_p2p::p2p::DisconnectReason::ClientQuitting)
        .await;
    Ok(())
}
