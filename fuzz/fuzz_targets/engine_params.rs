//! Engine API requests as a consensus client sends them: the JWT of the `Authorization`
//! header (`verify_token`), every engine method's params through the real method table
//! (`moat_rpc::engine::methods`) over a small in-memory chain, and `newPayload`'s parser
//! (`parse_new_payload`, then `NewPayload::into_block`) with a round trip through the
//! payload encoder.
//!
//! The first byte picks a method (below 0x70, the names in sorted order), a token (0x70:
//! as sent; 0x78: claims the target signs with the secret, so that they are read), or,
//! from 0x80, the direct parser and the payload version; the rest is the params, the
//! token or the claims. Each request must be answered with a result or an error; signed
//! claims must pass exactly when their `iat` is a number within the window; a payload
//! that makes a block (its claimed hash replaced by the computed one) must encode
//! (`payload_json`) to a payload that parses to the same block.

#![no_main]

use alloy_primitives::B256;
use base64::Engine;
use hmac::{Hmac, Mac};
use libfuzzer_sys::fuzz_target;
use moat_fuzz::{call, engine_table, node};
use moat_rpc::engine::IAT_WINDOW_SECS;
use moat_rpc::fuzzing::{Version, parse_new_payload, payload_json, verify_token};
use serde_json::Value;

const VERSIONS: [Version; 4] = [Version::V1, Version::V2, Version::V3, Version::V4];

/// `into_block`'s complaint about the claimed hash names the computed one.
fn computed_hash(err: &str) -> Option<B256> {
    let got = err
        .strip_prefix("blockhash mismatch")?
        .rsplit("got ")
        .next()?;
    got.trim().trim_start_matches("0x").parse().ok()
}

fn round_trip(version: Version, params: &[u8]) {
    let Ok(args) = serde_json::from_slice::<Vec<Value>>(params) else {
        return;
    };
    let config = node().0.config();
    let Ok(payload) = parse_new_payload(&args, version, config) else {
        return;
    };
    let block = match payload.into_block() {
        Ok(block) => block,
        Err(e) => {
            let Some(hash) = computed_hash(&e) else {
                return;
            };
            let mut payload = parse_new_payload(&args, version, config).expect("parsed before");
            payload.block_hash = hash;
            payload
                .into_block()
                .expect("a payload with its computed hash is a block")
        }
    };
    let mut again = args.clone();
    again[0] = payload_json(&block);
    let back = parse_new_payload(&again, version, config)
        .expect("an encoded payload parses")
        .into_block()
        .expect("an encoded payload is the block");
    assert_eq!(back, block);
}

const SECRET: [u8; 32] = [0x5e; 32];
const NOW: u64 = 1_800_000_000;

fn token(raw: &[u8]) {
    let text = String::from_utf8_lossy(raw);
    let _ = verify_token(&text, &SECRET, NOW);
}

/// A token whose header and claims are the input's (split at the first 0x00 byte),
/// signed with the secret.
fn signed(raw: &[u8]) {
    let (header, claims) = match raw.iter().position(|b| *b == 0) {
        Some(at) => (&raw[..at], &raw[at + 1..]),
        None => (&br#"{"alg":"HS256","typ":"JWT"}"#[..], raw),
    };
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let input = format!("{}.{}", b64.encode(header), b64.encode(claims));
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(&SECRET).expect("any key length");
    mac.update(input.as_bytes());
    let token = format!("{input}.{}", b64.encode(mac.finalize().into_bytes()));
    let verdict = verify_token(&token, &SECRET, NOW);
    let header: Option<Value> = serde_json::from_slice(header).ok();
    let claims: Option<Value> = serde_json::from_slice(claims).ok();
    let hs256 = header
        .as_ref()
        .and_then(|h| h.get("alg"))
        .and_then(Value::as_str)
        == Some("HS256");
    let iat = claims
        .as_ref()
        .and_then(|c| c.get("iat"))
        .and_then(|v| v.as_u64().or_else(|| v.as_f64().map(|f| f as u64)));
    let fresh = hs256 && iat.is_some_and(|iat| iat.abs_diff(NOW) <= IAT_WINDOW_SECS);
    if token.len() <= 4096 {
        assert_eq!(verdict.is_ok(), fresh, "{token}: {verdict:?}");
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&pick, params)) = data.split_first() else {
        return;
    };
    match pick {
        0x70..=0x77 => return token(params),
        0x78..=0x7f => return signed(params),
        0x80.. => return round_trip(VERSIONS[pick as usize % VERSIONS.len()], params),
        _ => {}
    }
    let table = engine_table();
    call(table, table.1[pick as usize % table.1.len()], params);
});
