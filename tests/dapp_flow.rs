//! A dapp developer's flow with real client libraries: `moat --dev` on loopback and
//! tooling/dapp-flow/flow.mjs run by node with ethers v6 and solcjs (versions pinned by
//! its package-lock.json). The script sends transfers whose fields ethers fills (one with
//! an access list), has the node sign transactions, messages and EIP-712 data, compiles
//! and deploys a contract, reads its event by eth_getLogs, by eth_newFilter +
//! eth_getFilterChanges and by contract.on over HTTP and WebSocket, checks a revert
//! reason in ethers' error, and uses evm_snapshot / anvil_setBalance / evm_revert.
//!
//! `npm ci` runs once into target/dapp-flow (again only when the lock file changes), as
//! the genesis-alloc build script caches its npm package; npm is already a build
//! requirement.

mod common;

use common::{Node, free_port, rpc, wait_for};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Runs `cmd` to its end within `limit`; its output is captured and returned with the
/// status (a run past the limit is killed and reported as such).
fn run_bounded(cmd: &mut Command, limit: Duration) -> (bool, String) {
    // Removed on drop, also when a panic below ends the test.
    let out = tempfile::Builder::new()
        .prefix("moat-dapp-flow-out-")
        .tempfile_in(env!("CARGO_TARGET_TMPDIR"))
        .expect("temp output file");
    let mut child = cmd
        .stdout(out.as_file().try_clone().expect("output handle"))
        .stderr(out.as_file().try_clone().expect("output handle"))
        .stdin(Stdio::null())
        .spawn()
        .expect("the command starts");
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break Some(status);
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let output = std::fs::read_to_string(out.path()).unwrap_or_default();
    match status {
        Some(s) => (s.success(), output),
        None => (false, format!("{output}\n(killed after {limit:?})")),
    }
}

/// The target directory this test binary was built in (target/<profile>/deps/…).
fn target_dir() -> PathBuf {
    std::env::current_exe()
        .expect("test binary path")
        .ancestors()
        .nth(3)
        .expect("target dir")
        .to_path_buf()
}

/// target/dapp-flow with the script and its node_modules installed by `npm ci`.
fn installed_flow() -> PathBuf {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tooling/dapp-flow");
    let cache = target_dir().join("dapp-flow");
    std::fs::create_dir_all(&cache).expect("cache dir");
    for f in ["package.json", "package-lock.json", "flow.mjs"] {
        std::fs::copy(source.join(f), cache.join(f)).expect("copy the flow's files");
    }
    let lock = std::fs::read(source.join("package-lock.json")).expect("lock file");
    let stamp = cache.join("installed-lock.json");
    if std::fs::read(&stamp).ok().as_deref() != Some(lock.as_slice())
        || !cache.join("node_modules/ethers").exists()
    {
        let (ok, output) = run_bounded(
            Command::new("npm")
                .args(["ci", "--no-audit", "--no-fund", "--ignore-scripts"])
                .current_dir(&cache),
            Duration::from_secs(600),
        );
        assert!(ok, "npm ci in {}:\n{output}", cache.display());
        std::fs::write(&stamp, &lock).expect("stamp");
    }
    cache
}

#[test]
fn ethers_and_solcjs_drive_the_dev_node() {
    let flow = installed_flow();
    let (port, ws_port) = (free_port(), free_port());
    let _node = Node::start(&[
        "--dev",
        "--dev.period",
        "0",
        "--http.port",
        &port.to_string(),
        "--ws",
        "--ws.port",
        &ws_port.to_string(),
        "--authrpc.port",
        &free_port().to_string(),
    ]);
    wait_for("the RPC server", || rpc(port, "eth_chainId", "[]"));
    let (ok, output) = run_bounded(
        Command::new("node")
            .arg("flow.mjs")
            .env("MOAT_HTTP", format!("http://127.0.0.1:{port}"))
            .env("MOAT_WS", format!("ws://127.0.0.1:{ws_port}"))
            .current_dir(&flow),
        Duration::from_secs(300),
    );
    println!("{output}");
    assert!(ok, "the dapp flow failed:\n{output}");
    assert!(output.contains(" passed, 0 failed"), "{output}");
}
