//! `moat tx decode` as a user runs it: the binary, its JSON, its exit status.

use moat_common::TxType;
use moat_common::testing::{sample_blob_tx, sample_signed};
use moat_common::transaction::SidecarVersion;
use moat_crypto::secp::Signer;
use serde_json::Value;
use std::process::{Command, Output};

const EIP155_EXAMPLE: &str = "0xf86c098504a817c800825208943535353535353535353535353535353535353535880de0b6b3a76400008025a028ef61340bd939bc2195fe537567866003e1a15d3c71ff63e1590620aa636276a067cbe9d8997f761aecb703304b3800ccf555c9f3dc64214b297fb1966a3b6d83";

fn moat(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_moat"))
        .args(args)
        .output()
        .expect("the moat binary runs")
}

fn json(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).expect("stdout is JSON")
}

#[test]
fn decodes_the_eip155_example() {
    let out = moat(&["tx", "decode", "--fork", "Prague", EIP155_EXAMPLE]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v = json(&out);
    assert_eq!(v["type"], 0);
    assert_eq!(v["sender"], "0x9d8A62f656a8d1615C1294fd71e9CFb3E4855A4F");
    assert_eq!(v["nonce"], 9);
    assert_eq!(v["chainId"], 1);
    assert_eq!(v["intrinsicGas"], 21000);
    assert_eq!(v["valid"], true);
    assert_eq!(v["violations"].as_array().unwrap().len(), 0);
}

#[test]
fn a_rule_broken_at_the_fork_exits_1_with_a_reason() {
    let out = moat(&["tx", "decode", "--chain-id", "5", EIP155_EXAMPLE]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1);
    assert!(stderr.contains("invalid chain id"), "{stderr}");
    assert_eq!(json(&out)["valid"], false);

    // A set-code transaction before Prague.
    let tx = sample_signed(TxType::Eip7702, 0, &Signer::from_seed(1));
    let hex = alloy_primitives::hex::encode_prefixed(tx.encoded_2718());
    let out = moat(&["tx", "decode", "--fork", "Cancun", &hex]);
    assert_eq!(out.status.code(), Some(1));
    let v = json(&out);
    assert!(v["violations"][0].as_str().unwrap().contains("not active"));
    assert_eq!(
        v["authorizationList"][0]["authority"]
            .as_str()
            .unwrap()
            .to_lowercase(),
        Signer::from_seed(0xa0).address().to_string().to_lowercase()
    );
}

#[test]
fn malformed_input_exits_1() {
    for bad in ["0x02c0", "zz", "0x"] {
        let out = moat(&["tx", "decode", bad]);
        assert_eq!(out.status.code(), Some(1), "{bad}");
        assert!(out.stdout.is_empty());
        assert!(String::from_utf8_lossy(&out.stderr).starts_with("error: "));
    }
    let out = moat(&["tx", "decode", "--fork", "Atlantis", EIP155_EXAMPLE]);
    assert!(!out.status.success());
}

#[test]
fn blob_tx_with_sidecar_from_a_file() {
    let dir = tempfile::Builder::new()
        .prefix("moat-decode-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap();
    let tx = sample_blob_tx(SidecarVersion::V0, 2, 0, &Signer::from_seed(2));
    let path = dir.path().join("blob.bin");
    std::fs::write(&path, tx.encoded_2718()).unwrap();
    let arg = format!("@{}", path.display());

    let out = moat(&["tx", "decode", "--fork", "Prague", &arg]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v = json(&out);
    assert_eq!(v["type"], 3);
    assert_eq!(v["sidecar"]["blobs"], 2);
    assert_eq!(v["blobVersionedHashes"].as_array().unwrap().len(), 2);

    // Version-0 proofs are not what Osaka takes.
    let out = moat(&["tx", "decode", "--fork", "Osaka", &arg]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("sidecar"));
}
