//! `eth_simulateV1` against geth's own answers on the conformance chain (imported into
//! memory): `data/simulate_geth.io` holds requests and the responses go-ethereum gave to
//! them over the same chain (`>>` request, `<<` response, as in the execution-apis
//! tests). Blocks, hashes, state roots, logs, transfer logs, gas and error codes must be
//! the same; error messages are each client's own and are not compared.
//!
//! The cases: transfers over two blocks with transfer logs and full transactions; logs
//! of a reverted inner call; a state diff; a moved precompile; a base block in the past;
//! block-number gaps with fee recipient, prevRandao and withdrawals; validation with the
//! computed base fee; a nonce too low (-38010); numbers out of order (-38020); a blob
//! call with the blob base fee overridden; a contract creation with value; an EIP-7702
//! authorization delegating its signer to code; legacy (gasPrice) calls, shown unsigned.
//!
//! To add a case: `geth init` and `geth import` the ethtest genesis and chain.rlp, start
//! geth with `--http`, post the request and append both lines to the file.

use jsonrpsee::RpcModule;
use moat_blockchain::chain::Chain;
use moat_common::block::Block;
use moat_common::config::Genesis;
use moat_mempool::{Pool, PoolConfig};
use moat_rpc::{RpcContext, StoreStateView};
use moat_storage::Store;
use serde_json::Value;
use std::path::PathBuf;
use std::sync::Arc;

fn testdata(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../../../shared/testdata/ethtest")
        .join(name)
}

fn module() -> RpcModule<RpcContext> {
    let genesis = Genesis::from_file(&testdata("genesis.json")).unwrap();
    let store = Store::in_memory();
    let chain = Chain::init(store.clone(), &genesis).unwrap();
    let bytes = std::fs::read(testdata("chain.rlp")).unwrap();
    for block in Block::decode_all(&bytes).unwrap() {
        chain.import(&block).unwrap();
    }
    let view = StoreStateView::new(store, chain.config().clone());
    let pool = Pool::new(PoolConfig::new(chain.config().clone()), Arc::new(view));
    moat_rpc::module(RpcContext::new(chain, pool), "test".into()).unwrap()
}

/// Drops the message of an error object: only its code and data are compared.
fn without_message(mut v: Value) -> Value {
    if let Some(e) = v.get_mut("error").and_then(Value::as_object_mut) {
        e.remove("message");
    }
    v
}

#[tokio::test(flavor = "multi_thread")]
async fn simulated_blocks_match_geths_on_the_conformance_chain() {
    let m = module();
    let text = include_str!("data/simulate_geth.io");
    let mut cases = 0;
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    while let Some(request) = lines.next() {
        let request = request.strip_prefix(">> ").expect("a request line");
        let expected = lines
            .next()
            .and_then(|l| l.strip_prefix("<< "))
            .expect("a response line");
        let (response, _) = m.raw_json_request(request, 1).await.unwrap();
        let got: Value = serde_json::from_str(response.get()).unwrap();
        let want: Value = serde_json::from_str(expected).unwrap();
        assert_eq!(
            without_message(got),
            without_message(want),
            "request: {request}"
        );
        cases += 1;
    }
    assert_eq!(cases, 12);
}
