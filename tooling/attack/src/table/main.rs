//! moat-attack-table: attack scenarios against a running node while honest traffic flows,
//! and what the honest traffic got (`make attack-table`).
//!
//! Honest traffic, all the time:
//! - one peer gossiping valid transfers (`Transactions`, every 20 ms) of a funded key, or
//!   in turn of `--peer-senders` fresh keys that key funds first (dev mode: a network's
//!   gossip comes from many senders, and one sender at 200 tx/s runs into the pool's
//!   per-sender limits once pending is half full); a second, silent peer (the observer) times each one from its send until the node
//!   gossips it on, i.e. until it is pending;
//! - one RPC client sending valid transfers of another funded key with
//!   `eth_sendRawTransaction`, one at a time; its latency is the call's (the node answers
//!   once the tx is pooled).
//!
//! The honest clients run on a runtime (one thread) of their own, apart from the
//! attackers', so that what they time is the node and not the tool's own queue; the
//! attackers' threads run at `SCHED_IDLE` (nice 19 where that is refused, or with
//! `ATTACKERS_NICE19=1`) and yield the core before each message or call, and between the
//! 64 KB steps in which a large frame is encrypted and MACed, since their CPU stands for
//! remote machines'. For the same reason a blob reply is framed from its list of txs
//! compressed once (`Framing::pooled_transactions`), not compressed again per delivery.
//!
//! Phases: honest traffic alone (the reference), then for each scenario the attack beside
//! it, then the attack stopped until honest throughput is back to ≥ 90 % of the reference.
//! Attacking peers have fresh keys and connect again with a new key when dropped. Attacker
//! `i` binds 127.0.0.(10+i) and keeps that address across its identities, so a new
//! identity inherits its address's history, and all share the honest peers' /24
//! (`--same-ip`: everyone from 127.0.0.1).
//!
//! Scenarios (numbers of the list):
//! - `fresh-keys` (1): many new EOAs, unfunded, 128 txs a message;
//! - `cache-churn` (2): distinct txs, half from fresh unfunded keys (each a new sender
//!   cache entry), half for another chain id (each a new recent-failure entry);
//! - `repeat` (3): one unfunded tx again and again, one copy a message;
//! - `rpc-flood` (7): four RPC connections sending invalid (bad signature) and
//!   underpriced txs as fast as answers come;
//! - `announce` (6): 4,096 hashes a message announced and never delivered;
//! - `blob-v0`, `blob-v1` (4): blob txs of funded senders (`--blob-keys`), 6 blobs each,
//!   with well-formed sidecars whose proofs do not verify (each blob carries another's),
//!   announced one at a time and delivered when the node asks; each attacker cycles
//!   through 16 such txs, reconnecting with a new identity from a new /24 whenever it is
//!   dropped (127.(1+i).k.1: a botnet, which per-/24 history cannot stop). With
//!   `--metrics` the node's KZG checks are counted against the unique txs delivered;
//! - `cells` (4, eth/72): the `blob-v1` txs over eth/72: announced with every cell, the
//!   body served without blobs, then, when the node asks, data cells that fail the
//!   sidecar's proofs (the same botnet reconnection);
//! - `invalidation` (5): 2,000 fresh senders (`--storm-senders`) are funded by RPC from
//!   `--storm-key`, each for exactly two transfers, and mined; then the attackers gossip
//!   four transfers of each sender (8,000 txs, 1 gwei tip). The node's blocks (dev mode,
//!   every 2 s) include the first ones and leave the rest unable to pay: each head change
//!   revalidates the senders in bulk. With `--metrics` the head changes' revalidation
//!   time and accounts read are printed beside the reference phase's. No reorg: the dev
//!   node's only way back, `evm_revert`, restores a snapshot's chain, state and pool
//!   whole (the blocks' txs are dropped, not returned to the pool as a reorg returns
//!   them, and the honest senders' later nonces are left behind a gap), so it measures
//!   a reset, not a reorg.
//!
//! Without `--target` only the RPC forms run (honest RPC, `rpc-flood`): go-ethereum's dev
//! mode has no p2p.
//!
//! The attackers' CPU share is the node's extra CPU during the attack (`/proc/<pid>/stat`,
//! over the reference phase) as a share of the machine's cores, against `--budget-share`
//! (what the node's budgets allow all attackers: moat's peers budget is half the machine).
//!
//! The code, by job: `args` (the scenarios and the command line), `run` (the phases and
//! the table), `honest` (what the honest traffic got: completions, latencies), `attack`
//! (one attacker's loop per scenario), `material` (the pre-signed attack transactions,
//! blob sets and the invalidation storm, and funding by RPC), `node` (the node's JSON-RPC,
//! engine API, Prometheus counters and CPU), `peer` (devp2p connections to the node) and
//! `sched` (the attackers' threads kept below the node's).

mod args;
mod attack;
mod honest;
mod material;
mod node;
mod peer;
mod run;
mod sched;

use args::Args;
use clap::Parser;
use run::run;
use sched::lower_attacker;

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    // Two runtimes: the honest clients' (one thread, normal priority) and everyone
    // else's, whose workers (the attackers) run at `SCHED_IDLE`. The attackers stand for
    // remote machines: at normal priority their own CPU (RLPx encryption, handshakes,
    // the send loops) took the node's trusted threads' cores for up to 4 ms at a time on
    // this 2-core machine (perf sched timehist), and the table measured the tool. At
    // nice 19 they still did in row 4: each 786 KB blob reply (compression, encryption,
    // MAC) is 1-4 ms of CPU in one piece, and a waking node thread waited behind it for
    // the scheduler tick (~520 waits >= 1 ms per 10 s attack, 2026-11-23 18:56 UTC).
    // At `SCHED_IDLE` they share what is left with the node's own `SCHED_IDLE` lane.
    let honest = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("honest")
        .enable_all()
        .build();
    let attackers = tokio::runtime::Builder::new_multi_thread()
        .thread_name("attackers")
        .on_thread_start(lower_attacker)
        .enable_all()
        .build();
    let result = match (honest, attackers) {
        (Ok(honest), Ok(attackers)) => {
            let r = attackers.block_on(run(args, honest.handle().clone()));
            honest.shutdown_background();
            attackers.shutdown_background();
            r
        }
        (Err(e), _) | (_, Err(e)) => Err(format!("runtime: {e}")),
    };
    match result {
        Ok(ok) => {
            if ok {
                std::process::ExitCode::SUCCESS
            } else {
                std::process::ExitCode::from(2)
            }
        }
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
