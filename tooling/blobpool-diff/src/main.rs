//! `moat-blobpool-diff`: moat's blob pool beside go-ethereum's, answer by answer.
//!
//! Both clients start on one post-merge genesis with every fork through Osaka at block 0
//! (`moat_harness::genesis::osaka`), fresh datadirs, loopback ports, no peers, no
//! consensus client (the pools judge against the genesis state). One seeded stream of
//! blob transactions goes to each over `eth_sendRawTransaction`, tx by tx, moat then
//! geth; each answer is *accepted* (the hash) or *refused* (the error's message). The
//! stream draws per tx one of the [`Case`]s: a valid next nonce with a version-1 or a
//! version-0 sidecar (converted after Osaka by both), a nonce ahead of the sender's
//! next (the gapped buffers), replacements under and at the blob pool's 100 % bump, a
//! tip of zero, a fee cap under the base fee, a zero blob fee cap, seven blobs, a
//! sidecar of other blobs, another chain's id.
//!
//! A sender whose next-nonce tx the two answered differently is retired (its nonces
//! would differ from there on). The report gives, per case, how many answers agreed,
//! and each difference with both messages; the exit status is 0 whether or not they
//! agree (the differences are the finding), unless `--strict`.
//!
//! ```sh
//! cargo build -p moat -p moat-blobpool-diff
//! target/debug/moat-blobpool-diff --moat target/debug/moat --geth ~/geth-bin/geth --txs 240 --seed 1
//! target/debug/moat-blobpool-diff --moat target/debug/moat --geth ~/geth-bin/geth --peers
//! ```
//!
//! `--peers` runs no stream: the two are peered instead, and a blob tx sent to each
//! must reach the other (`peers.rs`). `--peers --sampler` starts moat as an eth/72
//! sampler between two geth nodes: a blob tx sent to one geth must reach moat as its
//! body and the custody's cells.
//!
//! ```sh
//! target/debug/moat-blobpool-diff --moat target/debug/moat --geth ~/geth-bin/geth --peers --sampler [--to-both]
//! ```

use alloy_primitives::{Address, Bytes, U256};
use clap::Parser;
use moat_common::transaction::{
    BlobsBundle, Eip4844Tx, PooledTransaction, SidecarVersion, SignedTransaction, Transaction,
};
use moat_crypto::kzg;
use moat_crypto::secp::Signer;
use moat_harness::el::{self, Kind, Node, Ports, Setup};
use moat_harness::http::{CallError, RpcClient};
use serde_json::json;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

mod peers;

const CHAIN_ID: u64 = 75_311;
/// The genesis base fee (1 gwei); the blob base fee is its floor, 1 wei.
const BASE_FEE: u128 = 1_000_000_000;
/// Distinct blobs the stream draws from (each computed once, in both versions).
const BLOBS: usize = 8;

#[derive(Parser, Debug)]
#[command(about = "moat's blob pool beside go-ethereum's on one seeded stream")]
struct Args {
    /// The moat binary.
    #[arg(long)]
    moat: PathBuf,
    /// The go-ethereum binary.
    #[arg(long)]
    geth: PathBuf,
    /// Transactions in the stream.
    #[arg(long, default_value_t = 240)]
    txs: usize,
    /// Seed of the stream (the same seed, the same transactions).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Funded senders.
    #[arg(long, default_value_t = 16)]
    senders: usize,
    /// First of ten loopback ports (three per client, moat's metrics on the tenth).
    #[arg(long, default_value_t = 41_300)]
    base_port: u16,
    /// Exit with status 1 if any answer differs.
    #[arg(long)]
    strict: bool,
    /// Peer the two nodes and check a blob tx each way instead of the stream.
    #[arg(long)]
    peers: bool,
    /// With `--peers`: moat as an eth/72 sampler (a custody of 8 cells, no blob tx
    /// fetched whole) between two go-ethereum nodes (the second on the next three
    /// ports): a blob tx sent to one geth must be pooled by moat from the custody's cells.
    #[arg(long, requires = "peers")]
    sampler: bool,
    /// With `--sampler`: the blob tx is sent to both geth nodes at once.
    #[arg(long, requires = "sampler")]
    to_both: bool,
}

/// The sampler's custody in `--sampler` runs: cells 0, 9, 18, 27, 64, 73, 82, 91.
const SAMPLER_CUSTODY: &str = "0x01020408000000000102040800000000";

/// What one transaction of the stream tries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Case {
    /// The sender's next nonce, a version-1 sidecar, fees that pay.
    NextV1,
    /// The same with a version-0 sidecar (one proof a blob): converted after Osaka.
    NextV0,
    /// One nonce past the sender's next.
    Gap,
    /// The sender's last accepted tx again with every fee ×1.5 (under the 100 % bump).
    ReplaceUnder,
    /// The same with every fee ×2.
    ReplaceAtBump,
    /// The next nonce with a tip of zero.
    ZeroTip,
    /// The next nonce with a fee cap at half the base fee.
    UnderBaseFee,
    /// The next nonce with a blob fee cap of zero.
    ZeroBlobFee,
    /// Seven blobs (Osaka's per-transaction cap is six).
    SevenBlobs,
    /// A sidecar whose blobs are not the ones the versioned hashes name.
    OtherSidecar,
    /// Signed for another chain.
    WrongChain,
}

impl Case {
    /// Draw weights (out of their sum).
    const ALL: [(Case, u32); 11] = [
        (Case::NextV1, 30),
        (Case::NextV0, 10),
        (Case::Gap, 8),
        (Case::ReplaceUnder, 8),
        (Case::ReplaceAtBump, 6),
        (Case::ZeroTip, 5),
        (Case::UnderBaseFee, 6),
        (Case::ZeroBlobFee, 4),
        (Case::SevenBlobs, 3),
        (Case::OtherSidecar, 4),
        (Case::WrongChain, 3),
    ];

    /// Whether, accepted by both, it takes the sender's next nonce.
    fn takes_next_nonce(self) -> bool {
        match self {
            Case::NextV1
            | Case::NextV0
            | Case::ZeroTip
            | Case::UnderBaseFee
            | Case::ZeroBlobFee
            | Case::SevenBlobs
            | Case::OtherSidecar
            | Case::WrongChain => true,
            Case::Gap | Case::ReplaceUnder | Case::ReplaceAtBump => false,
        }
    }
}

/// xorshift64*: the stream's only source of choices.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn case(&mut self) -> Case {
        let total: u32 = Case::ALL.iter().map(|(_, w)| w).sum();
        let mut pick = self.below(u64::from(total)) as u32;
        for (case, w) in Case::ALL {
            if pick < w {
                return case;
            }
            pick -= w;
        }
        Case::NextV1
    }
}

/// One blob in both sidecar versions.
struct Blob {
    v0: BlobsBundle,
    v1: BlobsBundle,
}

fn bundle(blobs: &[&Blob], version: SidecarVersion) -> BlobsBundle {
    let mut out = BlobsBundle {
        version,
        blobs: Vec::new(),
        commitments: Vec::new(),
        proofs: Vec::new(),
        sampled: None,
    };
    for b in blobs {
        let one = match version {
            SidecarVersion::V0 => &b.v0,
            SidecarVersion::V1 => &b.v1,
        };
        out.blobs.extend(one.blobs.iter().cloned());
        out.commitments.extend(one.commitments.iter().copied());
        out.proofs.extend(one.proofs.iter().copied());
    }
    out
}

/// The fees of a tx: tip, fee cap, blob fee cap.
#[derive(Clone, Copy)]
struct Fees {
    tip: u128,
    cap: u128,
    blob_cap: u128,
}

const PAYING: Fees = Fees {
    tip: 2_000_000_000,
    cap: 20 * BASE_FEE,
    blob_cap: 1_000_000_000,
};

struct Sender {
    signer: Signer,
    next: u64,
    /// The last tx both accepted at `next - 1`: what a replacement replaces.
    last: Option<(Fees, Vec<usize>, SidecarVersion)>,
    retired: bool,
}

#[allow(clippy::too_many_arguments)]
fn sign(
    signer: &Signer,
    chain_id: u64,
    nonce: u64,
    fees: Fees,
    blobs: &[&Blob],
    version: SidecarVersion,
    sidecar_of: Option<&[&Blob]>,
) -> PooledTransaction {
    let sidecar = bundle(blobs, version);
    let tx = Eip4844Tx {
        chain_id,
        nonce,
        max_priority_fee_per_gas: fees.tip,
        max_fee_per_gas: fees.cap,
        gas_limit: 21_000,
        to: Address::repeat_byte(0x42),
        value: U256::ZERO,
        input: Bytes::new(),
        access_list: vec![],
        max_fee_per_blob_gas: fees.blob_cap,
        blob_versioned_hashes: sidecar.versioned_hashes(),
    };
    let signed = SignedTransaction::sign(Transaction::Eip4844(tx), signer);
    let carried = match sidecar_of {
        Some(other) => bundle(other, version),
        None => sidecar,
    };
    PooledTransaction::new(signed, Some(carried))
}

/// One answer: `Ok` accepted, `Err` the refusal's message.
type Answer = Result<(), String>;

fn send(rpc: &mut RpcClient, raw: &str) -> Answer {
    match rpc.call("eth_sendRawTransaction", json!([raw])) {
        Ok(_) => Ok(()),
        Err(CallError::Rpc(m)) => Err(m),
        Err(CallError::Transport(m)) => Err(format!("(no answer: {m})")),
    }
}

fn wait_ready(node: &mut Node, rpc: &mut RpcClient, name: &str) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(status) = node.exited() {
            return Err(format!("{name} exited at start: {status}"));
        }
        match rpc.call("eth_chainId", json!([])) {
            Ok(v) if moat_harness::http::quantity(&v) == Some(CHAIN_ID) => return Ok(()),
            Ok(v) => return Err(format!("{name}'s chain id is {v}")),
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(200)),
            Err(e) => return Err(format!("{name}'s JSON-RPC did not come up: {e}")),
        }
    }
}

struct Row {
    case: Case,
    sender: usize,
    nonce: u64,
    moat: Answer,
    geth: Answer,
}

fn main() {
    let args = Args::parse();
    match run(&args) {
        Ok(differ) if differ > 0 && args.strict => std::process::exit(1),
        Ok(_) => {}
        Err(e) => {
            eprintln!("moat-blobpool-diff: {e}");
            std::process::exit(2);
        }
    }
}

fn run(args: &Args) -> Result<usize, String> {
    let dir = tempfile::Builder::new()
        .prefix("moat-blobpool-diff")
        .tempdir()
        .map_err(|e| e.to_string())?;
    // Every other sender starts at nonce 20: an account with history may have a blob
    // tx held ahead of its next nonce (⌊log10(nonce + 1)⌋ of them), a fresh one none.
    let mut senders: Vec<Sender> = (0..args.senders)
        .map(|i| Sender {
            signer: Signer::from_seed(args.seed.wrapping_mul(1_000) + i as u64 + 1),
            next: if i % 2 == 1 { 20 } else { 0 },
            last: None,
            retired: false,
        })
        .collect();
    let funded: Vec<Address> = senders.iter().map(|s| s.signer.address()).collect();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let genesis = moat_harness::genesis::osaka(
        CHAIN_ID,
        &funded,
        U256::from(10u128.pow(24)),
        60_000_000,
        now,
        b"moat blobpool diff",
    );
    let mut genesis = genesis;
    for s in &senders {
        if let Some(account) = genesis.alloc.get_mut(&s.signer.address()) {
            account.nonce = s.next;
        }
    }
    let genesis_path = dir.path().join("genesis.json");
    std::fs::write(
        &genesis_path,
        serde_json::to_string_pretty(&genesis).map_err(|e| e.to_string())?,
    )
    .map_err(|e| e.to_string())?;
    let jwt = dir.path().join("jwt.hex");
    std::fs::write(&jwt, "11".repeat(32)).map_err(|e| e.to_string())?;

    eprintln!("computing {BLOBS} blobs in both sidecar versions…");
    let blobs: Vec<Blob> = (0..BLOBS)
        .map(|i| {
            let blob = *kzg::sample_blob(args.seed.wrapping_mul(64) + i as u64);
            Ok(Blob {
                v0: BlobsBundle::build(SidecarVersion::V0, vec![blob.clone()])?,
                v1: BlobsBundle::build(SidecarVersion::V1, vec![blob])?,
            })
        })
        .collect::<Result<_, kzg::KzgError>>()
        .map_err(|e| format!("blobs: {e}"))?;

    let metrics_port = (args.base_port + 9).to_string();
    let mut nodes = Vec::new();
    let mut kinds = vec![(Kind::Moat, &args.moat), (Kind::Geth, &args.geth)];
    if args.sampler {
        kinds.push((Kind::Geth, &args.geth));
    }
    for (i, (kind, bin)) in kinds.into_iter().enumerate() {
        let node_dir = dir.path().join(format!("{}-{i}", kind.name()));
        std::fs::create_dir_all(&node_dir).map_err(|e| e.to_string())?;
        let ports = Ports::from_base(args.base_port + 3 * i as u16);
        let key = format!("{:064x}", 0x4242 + i);
        let setup = Setup {
            kind,
            bin,
            ports,
            genesis: &genesis_path,
            network_id: CHAIN_ID,
            jwt: &jwt,
            node_key_hex: &key,
            dir: &node_dir,
            http_api: "eth,net,web3,txpool,admin",
            max_peers: if args.peers { 5 } else { 1 },
            extra: match kind {
                Kind::Moat if args.sampler => vec![
                    "--metrics",
                    "--metrics.port",
                    &metrics_port,
                    "--blobpool.custody",
                    SAMPLER_CUSTODY,
                    "--blobpool.fetchprobability",
                    "0",
                ],
                Kind::Moat if args.peers => vec!["--metrics", "--metrics.port", &metrics_port],
                _ => Vec::new(),
            },
        };
        println!("{}: {}", kind.name(), el::version(bin, kind));
        let mut node = Node::start(&setup)?;
        let mut rpc = RpcClient::new(
            ([127, 0, 0, 1], ports.http).into(),
            None,
            Duration::from_secs(60),
        );
        wait_ready(&mut node, &mut rpc, kind.name())?;
        nodes.push((node, rpc));
    }

    if args.peers {
        let secret = [0x11u8; 32];
        let mut engines: Vec<RpcClient> = (0..nodes.len() as u16)
            .map(|i| {
                let ports = Ports::from_base(args.base_port + 3 * i);
                RpcClient::new(
                    ([127, 0, 0, 1], ports.auth).into(),
                    Some(secret),
                    Duration::from_secs(30),
                )
            })
            .collect();
        peers::synced(&mut nodes, &mut engines)?;
        if args.sampler {
            peers::sample(
                &mut nodes,
                &senders,
                &blobs,
                args.base_port + 9,
                args.to_both,
            )?;
        } else {
            peers::check(&mut nodes, &senders, &blobs, args.base_port + 9)?;
        }
        return Ok(0);
    }
    let mut rng = Rng(args.seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let mut rows = Vec::new();
    let started = Instant::now();
    for _ in 0..args.txs {
        let live: Vec<usize> = (0..senders.len())
            .filter(|i| !senders[*i].retired)
            .collect();
        if live.is_empty() {
            break;
        }
        let at = live[rng.below(live.len() as u64) as usize];
        let mut case = rng.case();
        let s = &senders[at];
        if matches!(case, Case::ReplaceUnder | Case::ReplaceAtBump) && s.last.is_none() {
            case = Case::NextV1;
        }
        let count = 1 + rng.below(3) as usize;
        let mut pick = |n: usize| -> Vec<&Blob> {
            (0..n)
                .map(|_| &blobs[rng.below(BLOBS as u64) as usize])
                .collect()
        };
        let (nonce, tx) = match case {
            Case::NextV1 | Case::NextV0 | Case::Gap => {
                let version = if case == Case::NextV0 {
                    SidecarVersion::V0
                } else {
                    SidecarVersion::V1
                };
                let nonce = if case == Case::Gap {
                    s.next + 1
                } else {
                    s.next
                };
                let chosen = pick(count);
                let tx = sign(&s.signer, CHAIN_ID, nonce, PAYING, &chosen, version, None);
                (nonce, tx)
            }
            Case::ReplaceUnder | Case::ReplaceAtBump => {
                let (fees, idx, version) = s.last.clone().expect("checked above");
                let (num, den) = if case == Case::ReplaceUnder {
                    (3, 2)
                } else {
                    (2, 1)
                };
                let bump = |f: u128| f * num / den;
                let fees = Fees {
                    tip: bump(fees.tip),
                    cap: bump(fees.cap),
                    blob_cap: bump(fees.blob_cap),
                };
                let chosen: Vec<&Blob> = idx.iter().map(|i| &blobs[*i]).collect();
                let tx = sign(
                    &s.signer,
                    CHAIN_ID,
                    s.next - 1,
                    fees,
                    &chosen,
                    version,
                    None,
                );
                (s.next - 1, tx)
            }
            Case::ZeroTip | Case::UnderBaseFee | Case::ZeroBlobFee => {
                let fees = match case {
                    Case::ZeroTip => Fees { tip: 0, ..PAYING },
                    Case::UnderBaseFee => Fees {
                        tip: BASE_FEE / 10,
                        cap: BASE_FEE / 2,
                        ..PAYING
                    },
                    _ => Fees {
                        blob_cap: 0,
                        ..PAYING
                    },
                };
                let chosen = pick(count);
                let tx = sign(
                    &s.signer,
                    CHAIN_ID,
                    s.next,
                    fees,
                    &chosen,
                    SidecarVersion::V1,
                    None,
                );
                (s.next, tx)
            }
            Case::SevenBlobs => {
                let chosen = pick(7);
                let tx = sign(
                    &s.signer,
                    CHAIN_ID,
                    s.next,
                    PAYING,
                    &chosen,
                    SidecarVersion::V1,
                    None,
                );
                (s.next, tx)
            }
            Case::OtherSidecar => {
                let named = vec![&blobs[0]];
                let carried = vec![&blobs[1]];
                let tx = sign(
                    &s.signer,
                    CHAIN_ID,
                    s.next,
                    PAYING,
                    &named,
                    SidecarVersion::V1,
                    Some(&carried),
                );
                (s.next, tx)
            }
            Case::WrongChain => {
                let chosen = pick(1);
                let tx = sign(
                    &s.signer,
                    CHAIN_ID + 1,
                    s.next,
                    PAYING,
                    &chosen,
                    SidecarVersion::V1,
                    None,
                );
                (s.next, tx)
            }
        };
        let raw = alloy_primitives::hex::encode_prefixed(tx.encoded_2718());
        let moat = send(&mut nodes[0].1, &raw);
        let geth = send(&mut nodes[1].1, &raw);
        let s = &mut senders[at];
        match (&moat, &geth) {
            (Ok(()), Ok(())) => {
                let inner = tx.tx().tx();
                let fees = Fees {
                    tip: inner.max_priority_fee_per_gas(),
                    cap: inner.max_fee_per_gas(),
                    blob_cap: inner.max_fee_per_blob_gas().unwrap_or(0),
                };
                let idx = tx
                    .sidecar()
                    .map(|b| {
                        b.commitments
                            .iter()
                            .filter_map(|c| blobs.iter().position(|x| x.v1.commitments[0] == *c))
                            .collect()
                    })
                    .unwrap_or_default();
                let version = tx.sidecar().map_or(SidecarVersion::V1, |b| b.version);
                if case.takes_next_nonce() {
                    s.next += 1;
                    s.last = Some((fees, idx, version));
                } else if matches!(case, Case::ReplaceAtBump) {
                    s.last = Some((fees, idx, version));
                } else if case == Case::Gap {
                    // Held by both: the next nonce fills the gap, and both take it.
                    s.retired = true;
                }
            }
            (Err(_), Err(_)) => {}
            _ => {
                if case.takes_next_nonce() || case == Case::Gap {
                    s.retired = true;
                }
            }
        }
        rows.push(Row {
            case,
            sender: at,
            nonce,
            moat,
            geth,
        });
    }
    let took = started.elapsed();
    Ok(report(args, &rows, took))
}

fn report(args: &Args, rows: &[Row], took: Duration) -> usize {
    let mut per: BTreeMap<Case, (usize, usize, usize)> = BTreeMap::new();
    let mut differ = Vec::new();
    for r in rows {
        let e = per.entry(r.case).or_default();
        e.0 += 1;
        match (&r.moat, &r.geth) {
            (Ok(()), Ok(())) => e.1 += 1,
            (Err(_), Err(_)) => e.2 += 1,
            _ => differ.push(r),
        }
    }
    let agree = rows.len() - differ.len();
    println!(
        "\nseed {}, {} txs in {:.1} s: {agree}/{} answers agree ({} differ)\n",
        args.seed,
        rows.len(),
        took.as_secs_f64(),
        rows.len(),
        differ.len()
    );
    println!("| case | txs | both accepted | both refused | differ |");
    println!("|---|---|---|---|---|");
    for (case, (n, acc, refused)) in &per {
        println!(
            "| {case:?} | {n} | {acc} | {refused} | {} |",
            n - acc - refused
        );
    }
    if !differ.is_empty() {
        println!("\ndifferences:");
        for r in &differ {
            let show = |a: &Answer| match a {
                Ok(()) => "accepted".to_string(),
                Err(m) => format!("refused: {m}"),
            };
            println!(
                "- {:?}, sender {} nonce {}: moat {}; geth {}",
                r.case,
                r.sender,
                r.nonce,
                show(&r.moat),
                show(&r.geth)
            );
        }
    }
    // The refusals' messages, for the reasons.
    let mut messages: BTreeMap<(Case, String, String), usize> = BTreeMap::new();
    for r in rows.iter().filter(|r| r.moat.is_err() && r.geth.is_err()) {
        let m = |a: &Answer| a.clone().err().unwrap_or_default();
        *messages
            .entry((r.case, m(&r.moat), m(&r.geth)))
            .or_default() += 1;
    }
    if !messages.is_empty() {
        println!("\nrefused by both (moat's message; geth's):");
        for ((case, moat, geth), n) in messages {
            println!("- {case:?} ×{n}: {moat}; {geth}");
        }
    }
    differ.len()
}
