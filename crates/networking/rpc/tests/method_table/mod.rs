//! What the tests that drive the method table directly (no server) share.

use jsonrpsee::RpcModule;
use moat_rpc::RpcContext;
use serde_json::{Value, json};

/// The JSON-RPC answer of `method` with `params` (the whole response object).
pub(crate) async fn call(m: &RpcModule<RpcContext>, method: &str, params: Value) -> Value {
    let request = json!({ "jsonrpc": "2.0", "id": 1, "method": method, "params": params });
    let (response, _) = m
        .raw_json_request(&request.to_string(), 1)
        .await
        .expect("a response");
    serde_json::from_str(response.get()).unwrap()
}
