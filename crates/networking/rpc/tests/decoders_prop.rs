//! Property tests: whatever a client sends — random JSON parameters shaped like the real
//! ones, random values, random bytes — every public and engine method answers, and no
//! parameter decoder panics.
//!
//! Calls go through the method tables in process. A panic in a handler that runs on the
//! blocking pool would be turned into an internal error by jsonrpsee, so a panic hook
//! counts panics and each case checks the count stayed at zero.

use moat_blockchain::chain::Chain;
use moat_blockchain::payload::PayloadService;
use moat_common::config::Genesis;
use moat_mempool::{Pool, PoolConfig};
use moat_rpc::engine::EngineContext;
use moat_rpc::{RpcContext, StoreStateView};
use moat_storage::Store;
use proptest::prelude::*;
use serde_json::{Map, Value, json};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

static PANICS: AtomicUsize = AtomicUsize::new(0);

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            PANICS.fetch_add(1, Ordering::SeqCst);
            default(info);
        }));
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
    })
}

fn chain_and_pool() -> (Chain, Pool) {
    let genesis = Genesis::from_json(
        r#"{
        "config": {
            "chainId": 1337, "homesteadBlock": 0, "eip150Block": 0, "eip155Block": 0,
            "eip158Block": 0, "byzantiumBlock": 0, "constantinopleBlock": 0, "petersburgBlock": 0,
            "istanbulBlock": 0, "berlinBlock": 0, "londonBlock": 0, "mergeNetsplitBlock": 0,
            "terminalTotalDifficulty": 0, "shanghaiTime": 0, "cancunTime": 0, "pragueTime": 0
        },
        "gasLimit": "0x1c9c380", "difficulty": "0x0", "timestamp": "0x0",
        "alloc": { "1111111111111111111111111111111111111111": { "balance": "0x1000", "code": "0x5b600056" } }
    }"#,
    )
    .unwrap();
    let store = Store::in_memory();
    let chain = Chain::init(store.clone(), &genesis).unwrap();
    let view = StoreStateView::new(store, chain.config().clone());
    let pool = Pool::new(PoolConfig::new(chain.config().clone()), Arc::new(view));
    (chain, pool)
}

struct Tables {
    public: jsonrpsee::Methods,
    public_names: Vec<&'static str>,
    engine: jsonrpsee::Methods,
    engine_names: Vec<&'static str>,
}

fn tables() -> &'static Tables {
    static T: OnceLock<Tables> = OnceLock::new();
    T.get_or_init(|| {
        let _rt = runtime().enter();
        let (chain, pool) = chain_and_pool();
        let mut ctx = RpcContext::new(chain.clone(), pool.clone());
        // Calls that run code stop early: the cases are many.
        ctx.gas_cap = 200_000;
        let public = moat_rpc::module(ctx, "moat/test".into()).unwrap();
        let payloads = PayloadService::new(chain.clone(), pool.clone());
        let engine = moat_rpc::engine::methods(EngineContext::new(
            chain.clone(),
            pool.clone(),
            payloads,
            moat_blockchain::maintain::spawn(&chain, &pool),
        ))
        .unwrap();
        Tables {
            public_names: public
                .method_names()
                .filter(|m| !m.ends_with("subscribe"))
                .collect(),
            engine_names: engine.method_names().collect(),
            public: public.into(),
            engine: engine.into(),
        }
    })
}

/// Strings of the kinds parameters are made of: hex of every length, numbers, tags,
/// and junk.
fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..80)
            .prop_map(|b| format!("0x{}", alloy_primitives::hex::encode(b))),
        "0x[0-9a-fA-F]{0,70}",
        Just("latest".to_string()),
        Just("pending".to_string()),
        Just("0x".to_string()),
        Just("0x0".to_string()),
        Just(format!("0x{}", "f".repeat(64))),
        ".{0,24}",
    ]
}

/// Field names the decoders look for.
const KEYS: &[&str] = &[
    "parentHash",
    "feeRecipient",
    "stateRoot",
    "receiptsRoot",
    "logsBloom",
    "prevRandao",
    "blockNumber",
    "gasLimit",
    "gasUsed",
    "timestamp",
    "extraData",
    "baseFeePerGas",
    "blockHash",
    "transactions",
    "withdrawals",
    "blobGasUsed",
    "excessBlobGas",
    "headBlockHash",
    "safeBlockHash",
    "finalizedBlockHash",
    "suggestedFeeRecipient",
    "parentBeaconBlockRoot",
    "index",
    "validatorIndex",
    "address",
    "amount",
    "from",
    "to",
    "gas",
    "gasPrice",
    "maxFeePerGas",
    "maxPriorityFeePerGas",
    "value",
    "data",
    "input",
    "nonce",
    "accessList",
    "topics",
    "fromBlock",
    "toBlock",
    "blockHash",
    "storageKeys",
    "chainId",
    "type",
    "blobVersionedHashes",
    "maxFeePerBlobGas",
];

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<f64>()
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        text().prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 8, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            proptest::collection::vec((proptest::sample::select(KEYS), inner), 0..10).prop_map(
                |kv| {
                    Value::Object(
                        kv.into_iter()
                            .map(|(k, v)| (k.to_string(), v))
                            .collect::<Map<String, Value>>(),
                    )
                }
            ),
        ]
    })
}

/// Calls `method` with `params` (any JSON, positional or not) on `methods`.
fn call(methods: &jsonrpsee::Methods, method: &str, params: &Value) -> Result<(), String> {
    let before = PANICS.load(Ordering::SeqCst);
    let request = json!({"jsonrpc":"2.0","id":1,"method":method,"params":params}).to_string();
    let answer = runtime().block_on(methods.raw_json_request(&request, 16));
    if PANICS.load(Ordering::SeqCst) != before {
        return Err(format!("{method} panicked on {params}"));
    }
    let (answer, _) = answer.map_err(|e| format!("{method}: no answer: {e}"))?;
    let v: Value = serde_json::from_str(answer.get()).map_err(|e| e.to_string())?;
    if v.get("result").is_none() && v.get("error").is_none() {
        return Err(format!("{method}: not a JSON-RPC answer: {v}"));
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, .. ProptestConfig::default() })]

    #[test]
    fn public_methods_answer_any_params(
        pick in any::<prop::sample::Index>(),
        params in proptest::collection::vec(json_value(), 0..4),
    ) {
        let t = tables();
        let method = t.public_names[pick.index(t.public_names.len())];
        call(&t.public, method, &Value::Array(params)).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn engine_methods_answer_any_params(
        pick in any::<prop::sample::Index>(),
        params in proptest::collection::vec(json_value(), 0..4),
    ) {
        let t = tables();
        let method = t.engine_names[pick.index(t.engine_names.len())];
        call(&t.engine, method, &Value::Array(params)).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn any_params_value_is_answered(pick in any::<prop::sample::Index>(), params in json_value()) {
        let t = tables();
        let all: Vec<(&jsonrpsee::Methods, &str)> = t
            .public_names
            .iter()
            .map(|m| (&t.public, *m))
            .chain(t.engine_names.iter().map(|m| (&t.engine, *m)))
            .collect();
        let (methods, method) = all[pick.index(all.len())];
        // A params member that is not an array or object is itself invalid: jsonrpsee
        // refuses the request before the decoders; objects reach them.
        if params.is_array() || params.is_object() {
            call(methods, method, &params).map_err(TestCaseError::fail)?;
        }
    }

    #[test]
    fn random_bytes_never_panic_the_request_path(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let t = tables();
        let text = String::from_utf8_lossy(&bytes);
        let before = PANICS.load(Ordering::SeqCst);
        for methods in [&t.public, &t.engine] {
            let _ = runtime().block_on(methods.raw_json_request(&text, 16));
        }
        // Bytes placed where each engine decoder reads a field.
        let hex = Value::String(format!("0x{}", alloy_primitives::hex::encode(&bytes)));
        for method in &t.engine_names {
            let payload: Map<String, Value> = KEYS.iter().map(|k| (k.to_string(), hex.clone())).collect();
            call(&t.engine, method, &json!([payload, [hex.clone()], hex.clone()]))
                .map_err(TestCaseError::fail)?;
        }
        prop_assert_eq!(PANICS.load(Ordering::SeqCst), before);
    }
}

#[test]
fn every_method_is_covered() {
    let t = tables();
    assert!(t.public_names.len() > 30, "{:?}", t.public_names);
    assert!(
        t.engine_names
            .iter()
            .any(|m| m.starts_with("engine_newPayload"))
    );
    assert!(
        t.engine_names
            .iter()
            .any(|m| m.starts_with("engine_forkchoiceUpdated"))
    );
}
