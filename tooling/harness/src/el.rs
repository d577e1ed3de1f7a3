//! An execution client under test — moat or go-ethereum — on loopback ports: its command
//! line (no discovery, no bootnodes, HTTP and the engine API on 127.0.0.1, full sync), its
//! datadir initialised from a genesis file, its start with output to a log file, its stop
//! (SIGTERM, SIGKILL after a grace period), `kill -9`, and SIGKILL whenever the tool ends
//! without stopping it: on an error path, a panic, or the tool's own death.

use std::path::Path;
use std::process::Command;

/// Which execution client a [`Setup`] starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// moat, the node this workspace builds.
    Moat,
    /// go-ethereum (`geth`), the reference it is compared with.
    Geth,
}

impl Kind {
    /// The client's name in logs and reports (`moat`, `go-ethereum`).
    pub fn name(self) -> &'static str {
        match self {
            Kind::Moat => "moat",
            Kind::Geth => "go-ethereum",
        }
    }
}

/// The node's loopback ports.
#[derive(Debug, Clone, Copy)]
pub struct Ports {
    /// devp2p TCP port (`--port`).
    pub p2p: u16,
    /// JSON-RPC over HTTP (`--http.port`).
    pub http: u16,
    /// Engine API, JWT-authenticated (`--authrpc.port`).
    pub auth: u16,
}

impl Ports {
    /// Three consecutive ports from `base`: p2p, HTTP, then engine API.
    pub fn from_base(base: u16) -> Self {
        Self {
            p2p: base,
            http: base + 1,
            auth: base + 2,
        }
    }
}

/// What the node is started with.
pub struct Setup<'a> {
    /// Which client `bin` is.
    pub kind: Kind,
    /// The client's executable.
    pub bin: &'a Path,
    /// Its loopback ports.
    pub ports: Ports,
    /// The genesis file (geth reads it at `init`, moat at every start).
    pub genesis: &'a Path,
    /// The chain's network id (geth's `--networkid`; moat takes it from the genesis).
    pub network_id: u64,
    /// The engine API's JWT secret file (`--authrpc.jwtsecret`).
    pub jwt: &'a Path,
    /// The devp2p private key in hex (`--nodekeyhex`): fixes the node's enode id.
    pub node_key_hex: &'a str,
    /// Where its database (`db/`) and log (`node.log`) live.
    pub dir: &'a Path,
    /// JSON-RPC namespaces over HTTP.
    pub http_api: &'a str,
    /// Most devp2p peers (peers come only from `admin_addPeer`: no discovery).
    pub max_peers: u32,
    /// More flags, after ours.
    pub extra: Vec<&'a str>,
}

fn run(cmd: &mut Command) -> Result<(), String> {
    let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{cmd:?} failed ({}): {}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(())
}

/// Makes the datadir from the genesis file: `geth init`, or `moat init --network`.
pub fn init(s: &Setup<'_>) -> Result<(), String> {
    let db = s.dir.join("db");
    match s.kind {
        Kind::Geth => run(Command::new(s.bin)
            .arg("init")
            .arg("--datadir")
            .arg(&db)
            .arg(s.genesis)),
        Kind::Moat => run(Command::new(s.bin)
            .arg("init")
            .arg("--network")
            .arg(s.genesis)
            .arg("--datadir")
            .arg(&db)),
    }
}

/// The binary's `--version` (first line), for the report.
pub fn version(bin: &Path, kind: Kind) -> String {
    let mut cmd = Command::new(bin);
    match kind {
        Kind::Moat => cmd.arg("--version"),
        Kind::Geth => cmd.arg("version"),
    };
    cmd.output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Version:") || l.starts_with("moat"))
                .map(|l| l.trim().to_string())
        })
        .unwrap_or_else(|| "version unknown".into())
}

/// The command line of the node: loopback only, no discovery, no bootnodes, HTTP with
/// the namespaces asked for, the engine API on its own port with the JWT secret, full
/// sync (blocks come from a consensus client or the tool).
pub fn command(s: &Setup<'_>) -> Command {
    let db = s.dir.join("db");
    let (p2p, http, auth) = (
        s.ports.p2p.to_string(),
        s.ports.http.to_string(),
        s.ports.auth.to_string(),
    );
    let mut c = Command::new(s.bin);
    c.arg("--datadir").arg(&db);
    match s.kind {
        Kind::Moat => {
            c.arg("--network")
                .arg(s.genesis)
                .args(["--p2p.addr", "127.0.0.1"]);
        }
        Kind::Geth => {
            // As hive starts geth: --nat none, --netrestrict to our network, no IPC.
            c.args(["--networkid", &s.network_id.to_string()]).args([
                "--nat",
                "none",
                "--netrestrict",
                "127.0.0.0/8",
                "--ipcdisable",
            ]);
        }
    }
    c.args(["--syncmode", "full", "--port", &p2p])
        .args(["--nodiscover", "--bootnodes="])
        .args(["--maxpeers", &s.max_peers.to_string()])
        .args(["--nodekeyhex", s.node_key_hex])
        .args(["--http", "--http.addr", "127.0.0.1", "--http.port", &http])
        .args(["--http.api", s.http_api])
        .args(["--authrpc.addr", "127.0.0.1", "--authrpc.port", &auth])
        .arg("--authrpc.jwtsecret")
        .arg(s.jwt)
        .args(&s.extra);
    c
}

/// A running node (a [`Process`]; killed when dropped without being stopped).
pub use crate::process::Process as Node;

impl Node {
    /// Initialises the datadir from the genesis (`geth init`, `moat init`) and starts the
    /// node, its output to `dir/node.log`.
    pub fn start(s: &Setup<'_>) -> Result<Node, String> {
        init(s)?;
        Node::restart(s)
    }

    /// Starts the node on a datadir made before (by [`Node::start`]); its output is
    /// appended to `dir/node.log`.
    pub fn restart(s: &Setup<'_>) -> Result<Node, String> {
        Node::spawn(command(s), &s.dir.join("node.log"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_command_lines_stay_on_loopback_without_discovery() {
        let dir = Path::new("/tmp/x");
        for kind in [Kind::Moat, Kind::Geth] {
            let s = Setup {
                kind,
                bin: Path::new("node"),
                ports: Ports::from_base(40_000),
                genesis: &dir.join("genesis.json"),
                network_id: 1337,
                jwt: &dir.join("jwt.hex"),
                node_key_hex: "aa",
                dir,
                http_api: "eth,net,txpool,web3",
                max_peers: 5,
                extra: vec!["--cache", "256"],
            };
            let args: Vec<String> = command(&s)
                .get_args()
                .map(|a| a.to_string_lossy().into_owned())
                .collect();
            let after = |flag: &str| {
                let i = args
                    .iter()
                    .position(|a| a == flag)
                    .unwrap_or_else(|| panic!("{flag}"));
                args[i + 1].clone()
            };
            assert!(args.iter().any(|a| a == "--nodiscover"));
            assert!(args.iter().any(|a| a == "--bootnodes="));
            assert_eq!(after("--http.addr"), "127.0.0.1");
            assert_eq!(after("--authrpc.addr"), "127.0.0.1");
            assert_eq!(after("--port"), "40000");
            assert_eq!(after("--http.port"), "40001");
            assert_eq!(after("--authrpc.port"), "40002");
            assert_eq!(after("--maxpeers"), "5");
            assert!(after("--http.api").contains("txpool"));
            assert_eq!(args[args.len() - 2..], ["--cache", "256"]);
            match kind {
                Kind::Moat => assert_eq!(after("--p2p.addr"), "127.0.0.1"),
                Kind::Geth => {
                    assert_eq!(after("--netrestrict"), "127.0.0.0/8");
                    assert_eq!(after("--networkid"), "1337");
                }
            }
        }
    }
}
