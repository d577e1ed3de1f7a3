//! `moat-chaingen`: writes a long chain that moat and go-ethereum both import.
//!
//! Builds `--blocks` blocks on a genesis of its own, with moat's code in-process over an
//! in-memory store (see the library's docs for the flow and the transaction mix): each
//! block 12 s after its parent, ~`--txs-per-block` EIP-1559 transactions from rotating
//! senders (`--senders` funded keys, `Signer::from_seed(0..N)`): transfers to existing
//! and fresh addresses, deployments of a small contract whose constructor and runtime
//! write storage, and calls to those contracts writing new slots, overwriting slots and
//! zeroing them. Writes into `--out DIR`:
//!
//! - `genesis.json`: geth-style, post-merge from block 0 (terminal total difficulty 0,
//!   every fork through Prague at genesis, blob schedule, deposit contract address), the
//!   EIP-4788/2935/7002/7251 system contracts and the funded senders;
//! - `chain.rlp`: blocks 1..=N, concatenated RLP, as `moat import` and `geth import` read;
//! - `accounts.json`: the senders' keys (address -> {"key"}), as `moat-rpc-load` reads;
//! - `payloads.jsonl` and `fcus.jsonl`: each block's `engine_newPayloadV4` and
//!   `engine_forkchoiceUpdatedV3` request, one a line, as EXPB replays them and
//!   `moat-replay --file payloads.jsonl --fcus fcus.jsonl` sends them.
//!
//! Prints progress every 2 s and, at the end, blocks, transactions by kind, gas, the head
//! hash and state root, and the time taken.
//!
//! ```text
//! cargo run --release -p moat-chaingen -- --blocks 10000 --out /tmp/chain10k
//! moat import --network /tmp/chain10k/genesis.json --datadir /tmp/m10k /tmp/chain10k/chain.rlp
//! geth init --datadir /tmp/g10k /tmp/chain10k/genesis.json
//! geth import --datadir /tmp/g10k /tmp/chain10k/chain.rlp
//! ```
//!
//! Exit status 0 on success, 1 when anything failed (a transaction refused or failed, a
//! block short of its transactions, a file not written).

use clap::Parser;
use moat_chaingen::{Generator, Params, accounts_json};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

#[derive(Parser, Debug)]
#[command(
    name = "moat-chaingen",
    about = "Generate a long chain (genesis.json + chain.rlp) that moat and geth import"
)]
struct Args {
    /// Directory for genesis.json, chain.rlp and accounts.json (created if missing).
    #[arg(long)]
    out: PathBuf,
    /// Blocks to generate after genesis.
    #[arg(long, default_value_t = 10_000)]
    blocks: u64,
    /// Funded sender keys.
    #[arg(long, default_value_t = 1_000)]
    senders: usize,
    /// Transactions in every block.
    #[arg(long, default_value_t = 50)]
    txs_per_block: usize,
    /// Share of contract deployments, percent.
    #[arg(long, default_value_t = 4)]
    deploy_percent: u32,
    /// Share of calls writing contract storage, percent (the rest are transfers).
    #[arg(long, default_value_t = 30)]
    call_percent: u32,
    /// Share of transfers that create an account, percent (and of token transfers that
    /// go to a new holder).
    #[arg(long, default_value_t = 40)]
    fresh_percent: u32,
    /// Share of ERC-20 token txs (80 % transfers, 20 % approvals), percent.
    #[arg(long, default_value_t = 0)]
    token_percent: u32,
    /// Share of NFT mints, percent.
    #[arg(long, default_value_t = 0)]
    nft_percent: u32,
    /// Share of AMM swaps (a router calling two of eight constant-product pools), percent.
    #[arg(long, default_value_t = 0)]
    swap_percent: u32,
    /// Share of calldata-heavy txs (`--calldata-bytes` random bytes each), percent.
    #[arg(long, default_value_t = 0)]
    calldata_percent: u32,
    /// Calldata bytes of each calldata-heavy tx.
    #[arg(long, default_value_t = 4096)]
    calldata_bytes: usize,
    /// Large-storage contracts in genesis, called like deployed ones (with
    /// `--storage-slots` slots each).
    #[arg(long, default_value_t = 0)]
    storage_contracts: usize,
    /// Slots of each `--storage-contracts` contract.
    #[arg(long, default_value_t = 0)]
    storage_slots: usize,
    /// Funded accounts without keys in genesis, to make the state large (transfers to an
    /// existing account may go to them).
    #[arg(long, default_value_t = 0)]
    holders: usize,
    /// Chain id of the genesis.
    #[arg(long, default_value_t = moat_chaingen::DEFAULT_CHAIN_ID)]
    chain_id: u64,
    /// Block gas limit.
    #[arg(long, default_value_t = 30_000_000)]
    gas_limit: u64,
    /// Genesis timestamp; block n is 12·n seconds later.
    #[arg(long, default_value_t = 1_735_689_600)]
    genesis_time: u64,
    /// Seed of the transaction mix (the keys do not depend on it).
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
    }
}

/// Streams `value` to `path` as pretty JSON (a genesis of millions of accounts is never
/// held as one string).
fn write_json(path: &Path, value: &impl serde::Serialize) -> Result<(), String> {
    let failed = |e: &dyn std::fmt::Display| format!("cannot write {}: {e}", path.display());
    let file = File::create(path).map_err(|e| failed(&e))?;
    let mut out = BufWriter::with_capacity(1 << 20, file);
    serde_json::to_writer_pretty(&mut out, value).map_err(|e| failed(&e))?;
    out.write_all(b"\n").map_err(|e| failed(&e))?;
    out.flush().map_err(|e| failed(&e))
}

fn run(args: &Args) -> Result<(), String> {
    let params = Params {
        chain_id: args.chain_id,
        senders: args.senders,
        txs_per_block: args.txs_per_block,
        deploy_percent: args.deploy_percent,
        call_percent: args.call_percent,
        fresh_percent: args.fresh_percent,
        token_percent: args.token_percent,
        nft_percent: args.nft_percent,
        swap_percent: args.swap_percent,
        calldata_percent: args.calldata_percent,
        calldata_bytes: args.calldata_bytes,
        genesis_contracts: args.storage_contracts,
        genesis_slots: args.storage_slots,
        genesis_contract_calls: args.storage_contracts > 0,
        holders: args.holders,
        gas_limit: args.gas_limit,
        genesis_time: args.genesis_time,
        seed: args.seed,
        ..Params::default()
    };
    let started = Instant::now();
    let mut generator = Generator::new(params)?;
    std::fs::create_dir_all(&args.out)
        .map_err(|e| format!("cannot create {}: {e}", args.out.display()))?;
    write_json(&args.out.join("genesis.json"), generator.genesis())?;
    write_json(
        &args.out.join("accounts.json"),
        &accounts_json(generator.senders()),
    )?;
    let rlp_path = args.out.join("chain.rlp");
    let file = File::create(&rlp_path)
        .map_err(|e| format!("cannot create {}: {e}", rlp_path.display()))?;
    let mut out = BufWriter::with_capacity(1 << 20, file);
    let jsonl = |name: &str| -> Result<BufWriter<File>, String> {
        let path = args.out.join(name);
        File::create(&path)
            .map(|f| BufWriter::with_capacity(1 << 20, f))
            .map_err(|e| format!("cannot create {}: {e}", path.display()))
    };
    let (mut payloads, mut fcus) = (jsonl("payloads.jsonl")?, jsonl("fcus.jsonl")?);
    println!(
        "genesis {} (chain id {}, {} senders), setup {:.1} s",
        generator.chain().genesis_hash(),
        args.chain_id,
        args.senders,
        started.elapsed().as_secs_f64()
    );

    let mut bytes = 0u64;
    let mut last_report = Instant::now();
    for _ in 0..args.blocks {
        let block = generator.next_block()?;
        let encoded = block.encode();
        bytes += encoded.len() as u64;
        out.write_all(&encoded)
            .map_err(|e| format!("cannot write {}: {e}", rlp_path.display()))?;
        let (payload, fcu) = moat_chaingen::expb_requests(&block)?;
        writeln!(payloads, "{payload}")
            .and_then(|()| writeln!(fcus, "{fcu}"))
            .map_err(|e| format!("cannot write the EXPB files: {e}"))?;
        if last_report.elapsed() >= Duration::from_secs(2) {
            let s = generator.stats();
            let secs = started.elapsed().as_secs_f64();
            println!(
                "block #{} of {}, {} txs, {:.1} Mgas, {:.1} blocks/s",
                block.header.number,
                args.blocks,
                s.txs,
                s.gas as f64 / 1e6,
                s.blocks as f64 / secs
            );
            last_report = Instant::now();
        }
    }
    out.flush()
        .map_err(|e| format!("cannot write {}: {e}", rlp_path.display()))?;
    payloads
        .flush()
        .and_then(|()| fcus.flush())
        .map_err(|e| format!("cannot write the EXPB files: {e}"))?;

    let s = generator.stats();
    let head = generator.chain().head_header().map_err(|e| e.to_string())?;
    let secs = started.elapsed().as_secs_f64();
    println!("blocks      {}", s.blocks);
    println!(
        "txs         {} (transfers {}, of which to fresh addresses {}; deployments {}; calls {})",
        s.txs, s.transfers, s.fresh_transfers, s.deployments, s.calls
    );
    println!(
        "slot writes new {}, overwritten {}, zeroed {}",
        s.slots_new, s.slots_overwritten, s.slots_zeroed
    );
    if s.token_transfers + s.approvals + s.mints > 0 {
        println!(
            "tokens      {} ERC-20 transfers, {} approvals, {} NFT mints",
            s.token_transfers, s.approvals, s.mints
        );
    }
    if s.swaps + s.calldata_txs > 0 {
        println!(
            "amm, data   {} swaps, {} calldata-heavy txs",
            s.swaps, s.calldata_txs
        );
    }
    println!("gas         {:.1} Mgas", s.gas as f64 / 1e6);
    println!("head        #{} {}", head.number, head.hash());
    println!("state root  {}", head.state_root);
    println!(
        "chain.rlp   {:.1} MB in {}",
        bytes as f64 / 1e6,
        args.out.display()
    );
    println!(
        "took        {secs:.1} s ({:.1} blocks/s, {:.1} Mgas/s)",
        s.blocks as f64 / secs,
        s.gas as f64 / 1e6 / secs
    );
    Ok(())
}
