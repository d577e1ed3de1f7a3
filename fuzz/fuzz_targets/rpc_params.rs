//! JSON-RPC requests as clients send them: every public method's params through the
//! real method table (`moat_rpc::module`) over a small in-memory chain with a pool and a
//! dev key (so the dev-only decoders, `eth_signTypedData_v4` and kin, are reached), and
//! the decoders that run before the table: the plain `eth_sendRawTransaction` path of
//! the HTTP server (`raw_tx`), the batch count, and the EIP-712 parser on its own.
//!
//! The first byte picks a method (the names in sorted order) or one of those decoders;
//! the rest is the params (or the whole body) as sent. Each request must be answered
//! with a result or an error. A body the plain path takes must be the call jsonrpsee
//! would read from it: that method, that transaction, that id.

#![no_main]

use alloy_primitives::hex;
use jsonrpsee::types::Id;
use libfuzzer_sys::fuzz_target;
use moat_fuzz::{call, rpc_table};
use moat_rpc::fuzzing::{batch_over_limit, raw_send_transaction, typed_data_hash};
use serde_json::Value;

fn raw_tx(body: &[u8]) {
    let Some((id, tx)) = raw_send_transaction(body) else {
        return;
    };
    let v: Value = serde_json::from_slice(body).expect("a body the plain path took is JSON");
    assert_eq!(v["method"], "eth_sendRawTransaction");
    assert_eq!(v["jsonrpc"], "2.0");
    let param = v["params"][0].as_str().expect("one string param");
    assert_eq!(param.to_ascii_lowercase(), hex::encode_prefixed(&tx));
    match id {
        Id::Null => assert!(v["id"].is_null()),
        Id::Number(n) => assert_eq!(v["id"].as_u64(), Some(n)),
        Id::Str(s) => assert_eq!(v["id"].as_str(), Some(&*s)),
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    match pick {
        0..=0xdf => {
            let table = rpc_table();
            call(table, table.1[pick as usize % table.1.len()], rest);
        }
        0xe0..=0xeb => raw_tx(rest),
        0xec..=0xf3 => {
            let _ = batch_over_limit(rest, usize::from(pick - 0xec) * 3);
        }
        _ => {
            if let Ok(typed) = serde_json::from_slice::<Value>(rest) {
                let first = typed_data_hash(&typed);
                assert_eq!(first, typed_data_hash(&typed));
            }
        }
    }
});
