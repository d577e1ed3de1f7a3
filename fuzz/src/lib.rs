//! What moat's fuzz targets share (`fuzz_targets/`, one per decoder of outside bytes;
//! docs/COMMANDS.md lists them and how to run them).
//!
//! Each target feeds libFuzzer's bytes to the real decoder and, where an encoder exists,
//! checks the round trip (decode, encode, decode gives the same value, and for the strict
//! RLP decoders the same bytes), so a silent mis-decoding fails as loudly as a panic.
//! Targets whose input is guarded by a checksum, a MAC or a signature (RLPx frames and
//! handshakes, discv4 packets, ENRs, journal records) build the guard themselves around
//! bytes the fuzzer chose, so the decoder behind it is reached.
//!
//! Here: [`Bytes`], a reader that turns the fuzzer's bytes into choices; [`now`], which
//! runs a future that never waits (the in-memory streams); [`runtime`] and [`node`], a
//! tokio runtime and a small in-memory chain with a pool for the targets that call the
//! JSON-RPC and engine method tables ([`rpc_table`], [`engine_table`]) or the snap server
//! as a client or peer would. The seed generator (`examples/seeds.rs`) uses the same
//! pieces, so that its seeds pick the same methods and name the same chain.

use moat_blockchain::chain::Chain;
use moat_blockchain::payload::PayloadService;
use moat_common::config::Genesis;
use moat_crypto::secp::Signer;
use moat_mempool::{Pool, PoolConfig};
use moat_rpc::engine::EngineContext;
use moat_rpc::{RpcContext, StoreStateView};
use moat_storage::Store;
use std::future::Future;
use std::pin::pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll, Waker};

/// The fuzzer's bytes read front to back as choices; past the end every read gives
/// zeros or nothing.
#[derive(Debug, Clone, Copy)]
pub struct Bytes<'a>(pub &'a [u8]);

impl<'a> Bytes<'a> {
    pub fn u8(&mut self) -> u8 {
        match self.0.split_first() {
            Some((b, rest)) => {
                self.0 = rest;
                *b
            }
            None => 0,
        }
    }

    pub fn bool(&mut self) -> bool {
        self.u8() & 1 == 1
    }

    pub fn u16(&mut self) -> u16 {
        u16::from_be_bytes([self.u8(), self.u8()])
    }

    pub fn u64(&mut self) -> u64 {
        let mut b = [0u8; 8];
        for x in &mut b {
            *x = self.u8();
        }
        u64::from_be_bytes(b)
    }

    /// Up to `n` bytes (fewer at the end).
    pub fn take(&mut self, n: usize) -> &'a [u8] {
        let n = n.min(self.0.len());
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        head
    }

    /// Exactly `N` bytes, zero-filled past the end.
    pub fn array<const N: usize>(&mut self) -> [u8; N] {
        let mut out = [0u8; N];
        let got = self.take(N);
        out[..got.len()].copy_from_slice(got);
        out
    }

    /// A length-prefixed piece: one byte of length, then that many bytes.
    pub fn piece(&mut self) -> &'a [u8] {
        let n = self.u8() as usize;
        self.take(n)
    }

    pub fn rest(&mut self) -> &'a [u8] {
        self.take(self.0.len())
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Runs a future that completes without waiting (its I/O is in memory); panics if it
/// would wait, which would be a bug of the target.
pub fn now<F: Future>(f: F) -> F::Output {
    let mut f = pin!(f);
    match f.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(out) => out,
        Poll::Pending => panic!("an in-memory future waited"),
    }
}

/// One runtime for the targets that need tasks and timers.
pub fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .max_blocking_threads(2)
            .enable_all()
            .build()
            .expect("a tokio runtime")
    })
}

/// The chain id of [`node`]'s chain.
pub const CHAIN_ID: u64 = 1337;

/// The genesis of [`node`]: every fork through Prague at 0, accounts with code,
/// storage and balance so that state methods and snap ranges have something to walk.
pub const GENESIS: &str = r#"{
    "config": {
        "chainId": 1337, "homesteadBlock": 0, "eip150Block": 0, "eip155Block": 0,
        "eip158Block": 0, "byzantiumBlock": 0, "constantinopleBlock": 0, "petersburgBlock": 0,
        "istanbulBlock": 0, "berlinBlock": 0, "londonBlock": 0, "mergeNetsplitBlock": 0,
        "terminalTotalDifficulty": 0, "shanghaiTime": 0, "cancunTime": 0, "pragueTime": 0
    },
    "gasLimit": "0x1c9c380", "difficulty": "0x0", "timestamp": "0x0",
    "alloc": {
        "1111111111111111111111111111111111111111": { "balance": "0x1000", "code": "0x5b600056" },
        "2222222222222222222222222222222222222222": {
            "balance": "0xde0b6b3a7640000", "nonce": "0x5", "code": "0x60016000f3",
            "storage": {
                "0x0000000000000000000000000000000000000000000000000000000000000001": "0x2a",
                "0x0000000000000000000000000000000000000000000000000000000000000002": "0xff00",
                "0x00000000000000000000000000000000000000000000000000000000000000ff": "0x01"
            }
        },
        "3333333333333333333333333333333333333333": { "balance": "0x1" },
        "4444444444444444444444444444444444444444": { "balance": "0x2" },
        "5555555555555555555555555555555555555555": { "balance": "0x3" },
        "f39fd6e51aad88f6f4ce6ab8827279cfffb92266": { "balance": "0x21e19e0c9bab2400000" }
    }
}"#;

/// A chain over an in-memory store at [`GENESIS`] and a pool over its state, built once
/// per process (inside [`runtime`], which the pool's tasks need).
pub fn node() -> &'static (Chain, Pool) {
    static NODE: OnceLock<(Chain, Pool)> = OnceLock::new();
    NODE.get_or_init(|| {
        let _rt = runtime().enter();
        let genesis = Genesis::from_json(GENESIS).expect("the fuzz genesis parses");
        let store = Store::in_memory();
        let chain = Chain::init(store.clone(), &genesis).expect("the fuzz chain starts");
        let view = StoreStateView::new(store, chain.config().clone());
        let pool = Pool::new(PoolConfig::new(chain.config().clone()), Arc::new(view));
        (chain, pool)
    })
}

/// Builds a JSON-RPC request around `params` exactly as the fuzzer gave them (not parsed
/// first, so the server's own JSON parser sees them too).
pub fn request(method: &str, params: &[u8]) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"{method}","params":{}}}"#,
        String::from_utf8_lossy(params)
    )
}

/// A method table and its method names in sorted order (a fuzz input picks a method by
/// its index here, so the order must not change between runs).
pub type Table = (jsonrpsee::Methods, Vec<&'static str>);

/// The dev key of [`rpc_table`]'s context (`eth_accounts`, `eth_sign`, ...).
pub fn dev_key() -> Signer {
    Signer::from_seed(1)
}

/// The public JSON-RPC table over [`node`], with a dev key and a dev block producer that
/// refuses every request (the dev methods read their params before they ask it);
/// subscriptions left out.
pub fn rpc_table() -> &'static Table {
    static T: OnceLock<Table> = OnceLock::new();
    T.get_or_init(|| {
        let _rt = runtime().enter();
        let (chain, pool) = node();
        let mut ctx = RpcContext::new(chain.clone(), pool.clone());
        // Calls that run code stop early.
        ctx.gas_cap = 200_000;
        ctx.dev_keys = Arc::new(vec![dev_key()]);
        let (tx, mut rx) = tokio::sync::mpsc::channel(64);
        runtime().spawn(async move { while rx.recv().await.is_some() {} });
        ctx.mine = Some(tx);
        let module = moat_rpc::module(ctx, "moat/fuzz".into()).expect("the table builds");
        let mut names: Vec<&'static str> = module
            .method_names()
            .filter(|m| !m.ends_with("subscribe"))
            .collect();
        names.sort_unstable();
        (module.into(), names)
    })
}

/// The engine API table over [`node`].
pub fn engine_table() -> &'static Table {
    static T: OnceLock<Table> = OnceLock::new();
    T.get_or_init(|| {
        let _rt = runtime().enter();
        let (chain, pool) = node();
        let payloads = PayloadService::new(chain.clone(), pool.clone());
        let engine = moat_rpc::engine::methods(EngineContext::new(
            chain.clone(),
            pool.clone(),
            payloads,
            moat_blockchain::maintain::spawn(&chain, &pool),
        ))
        .expect("the engine table builds");
        let mut names: Vec<&'static str> = engine.method_names().collect();
        names.sort_unstable();
        (engine.into(), names)
    })
}

/// Calls `method` of `table` with `params` as sent; the answer, which must be a
/// JSON-RPC answer (a result or an error).
pub fn call(table: &Table, method: &str, params: &[u8]) {
    let answer = runtime()
        .block_on(table.0.raw_json_request(&request(method, params), 1))
        .map(|(answer, _)| answer);
    if let Ok(answer) = answer {
        let v: serde_json::Value = serde_json::from_str(answer.get()).expect("answers are JSON");
        assert!(
            v.get("result").is_some() || v.get("error").is_some(),
            "{method}: not a JSON-RPC answer: {v}"
        );
    }
}
