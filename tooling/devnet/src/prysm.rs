//! Prysm as the kit in ../shared/devnet/prysm runs it (beacon-chain and validator built
//! with the minimal preset, every CL fork through Fulu at epoch 0), with our ports, a CL
//! genesis state made once per devnet by `prysmctl` from the kit's EL genesis, and peers
//! given at start (`--peer`) instead of `--p2p-max-peers 0`.

use crate::cl::{BeaconSpec, TOTAL_VALIDATORS};
use moat_harness::process::Process;
use std::path::Path;
use std::process::Command;

/// Makes the CL genesis state (if this devnet has none yet) and starts the beacon node
/// and, with validators, the validator client. Ports: REST `rest`, libp2p `p2p`, gRPC
/// `p2p + 1`, monitoring `p2p + 2`, the validator's `p2p + 3..=p2p + 5`.
pub(crate) fn start(spec: &BeaconSpec<'_>, rest: u16, p2p: u16) -> Result<Vec<Process>, String> {
    let bin = &spec.kit.build;
    let config = spec.kit.dir.join("config.yaml");
    if !spec.genesis_ssz.is_file() {
        let out = Command::new(bin.join("prysmctl"))
            .env("PRYSMCTL_KEEP_EL_GENESIS", "1")
            .args(["testnet", "generate-genesis", "--fork", "fulu"])
            .args(["--num-validators", &TOTAL_VALIDATORS.to_string()])
            .args(["--genesis-time", &spec.genesis_time.to_string()])
            .args(["--genesis-time-delay", "0"])
            .arg("--chain-config-file")
            .arg(&config)
            .arg("--geth-genesis-json-in")
            .arg(spec.kit.el_genesis())
            .arg("--geth-genesis-json-out")
            .arg(spec.dir.join("el-genesis.json"))
            .arg("--output-ssz")
            .arg(&spec.genesis_ssz)
            .output()
            .map_err(|e| format!("prysmctl: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "prysmctl testnet generate-genesis failed: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
    }
    let (grpc, mon) = (p2p + 1, p2p + 2);
    let mut beacon = Command::new(bin.join("beacon-chain"));
    beacon
        .args(["--accept-terms-of-use", "--force-clear-db"])
        .arg("--datadir")
        .arg(spec.dir.join("beacon"))
        .arg("--chain-config-file")
        .arg(&config)
        .arg("--genesis-state")
        .arg(&spec.genesis_ssz)
        .args(["--execution-endpoint", &spec.engine])
        .arg("--jwt-secret")
        .arg(spec.jwt)
        .args([
            "--interop-eth1data-votes",
            "--contract-deployment-block",
            "0",
        ])
        .args([
            "--deposit-contract",
            "0x4242424242424242424242424242424242424242",
        ])
        .args(["--minimum-peers-per-subnet", "0"])
        .args(["--no-discovery", "--p2p-max-peers", "8"])
        .args(["--p2p-local-ip", "127.0.0.1", "--p2p-host-ip", "127.0.0.1"])
        .args(["--p2p-tcp-port", &p2p.to_string()])
        .args(["--p2p-udp-port", &p2p.to_string()])
        .args(["--p2p-quic-port", &p2p.to_string()])
        .args(["--rpc-host", "127.0.0.1", "--rpc-port", &grpc.to_string()])
        .args(["--http-host", "127.0.0.1", "--http-port", &rest.to_string()])
        .args(["--monitoring-host", "127.0.0.1"])
        .args(["--monitoring-port", &mon.to_string()])
        .args([
            "--suggested-fee-recipient",
            "0x00000000000000000000000000000000000000fe",
            "--disable-ephemeral-log-file",
        ]);
    if spec.peers.is_empty() {
        beacon.args(["--min-sync-peers", "0"]);
    } else {
        beacon.args(["--min-sync-peers", "1"]);
    }
    for (peer_id, addr) in &spec.peers {
        beacon.args(["--peer", &format!("{addr}/p2p/{peer_id}")]);
    }
    let mut procs = vec![Process::spawn(beacon, &spec.dir.join("beacon.log"))?];
    if let Some((a, b)) = spec.validators {
        let mut v = Command::new(bin.join("validator"));
        v.args(["--accept-terms-of-use", "--force-clear-db"])
            .arg("--datadir")
            .arg(spec.dir.join("validator"))
            .arg("--chain-config-file")
            .arg(&config)
            .args(["--interop-num-validators", &(b - a + 1).to_string()])
            .args(["--interop-start-index", &a.to_string()])
            .args(["--beacon-rpc-provider", &format!("127.0.0.1:{grpc}")])
            .args([
                "--beacon-rest-api-provider",
                &format!("http://127.0.0.1:{rest}"),
            ])
            .args(["--rpc-port", &(p2p + 3).to_string()])
            .args(["--http-port", &(p2p + 4).to_string()])
            .args(["--monitoring-host", "127.0.0.1"])
            .args(["--monitoring-port", &(p2p + 5).to_string()])
            .args([
                "--suggested-fee-recipient",
                "0x00000000000000000000000000000000000000fe",
                "--disable-ephemeral-log-file",
            ]);
        procs.push(Process::spawn(v, &spec.dir.join("validator.log"))?);
    }
    Ok(procs)
}

/// The beacon node's peer id and loopback address, from the `multiAddr=` its log prints
/// once it listens (ANSI colours stripped); waits up to a minute for it.
pub(crate) fn identity(log: &Path, port: u16) -> Result<(String, String), String> {
    let want = format!("/ip4/127.0.0.1/tcp/{port}/p2p/");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if let Some(at) = text.find(&want) {
            let id: String = text[at + want.len()..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric())
                .collect();
            if !id.is_empty() {
                return Ok((id, format!("/ip4/127.0.0.1/tcp/{port}")));
            }
        }
        if std::time::Instant::now() > deadline {
            return Err(format!("no {want}… in {}", log.display()));
        }
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
}
