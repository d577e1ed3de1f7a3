//! The node under test: its genesis, its start on loopback ports in a fresh temporary
//! directory, and its stop (SIGTERM, SIGKILL after a grace period, and SIGKILL whenever
//! the tool ends without stopping it: on an error path, a panic, or the tool's own death).

use alloy_primitives::{Address, Bytes, U256};
use moat_common::config::{BlobParams, ChainConfig, Fork, Genesis, GenesisAccount};
use std::collections::BTreeMap;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// The soak chain's id.
pub const CHAIN_ID: u64 = 75_310;

/// The last fork active from genesis: Osaka (payloads through engine_getPayloadV5). Both
/// clients take every fork through it at block 0; BPO1–5 only move blob parameters and
/// are left out (the load carries no blobs).
pub const LAST_FORK: Fork = Fork::Osaka;

/// Block gas limit of the genesis and of the clients' builders (`--miner.gaslimit`), so
/// neither moves it during the run.
pub const GAS_LIMIT: u64 = 60_000_000;

/// Each sender's genesis balance: 10,000 ether.
const BALANCE: u128 = 10_000 * 1_000_000_000_000_000_000;

/// The soak genesis: every fork through [`LAST_FORK`] at block 0 (post-merge: terminal
/// total difficulty 0, so blocks come only through the engine API), the system contracts,
/// and `senders` funded.
pub fn genesis(senders: &[Address], timestamp: u64) -> Genesis {
    let mut config = ChainConfig::all_forks_at_genesis(CHAIN_ID, LAST_FORK);
    // geth wants a blobSchedule entry for every scheduled fork from Cancun on.
    config.blob_schedule.insert(Fork::Osaka, BlobParams::PRAGUE);
    config.deposit_contract_address = Some(Address::ZERO);
    let mut alloc = BTreeMap::new();
    for &a in senders {
        alloc.insert(
            a,
            GenesisAccount {
                balance: U256::from(BALANCE),
                ..Default::default()
            },
        );
    }
    // The system contracts a post-Prague chain needs at genesis (EIP-4788, EIP-2935,
    // EIP-7002, EIP-7251), as the dev chain has them.
    for (address, code) in moat_common::system_contracts::ALL {
        alloc.insert(
            address
                .parse()
                .expect("system contract addresses are valid"),
            GenesisAccount {
                balance: U256::from(1),
                nonce: 1,
                code: code.parse::<Bytes>().expect("system contract code is hex"),
                ..Default::default()
            },
        );
    }
    Genesis {
        config,
        timestamp,
        extra_data: Bytes::from_static(b"moat soak"),
        gas_limit: GAS_LIMIT,
        alloc,
        base_fee_per_gas: Some(1_000_000_000),
        excess_blob_gas: Some(0),
        blob_gas_used: Some(0),
        ..Default::default()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Moat,
    Geth,
}

impl Kind {
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
    pub p2p: u16,
    pub http: u16,
    pub auth: u16,
}

impl Ports {
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
    pub kind: Kind,
    pub bin: &'a Path,
    pub ports: Ports,
    pub genesis: &'a Path,
    pub jwt: &'a Path,
    pub node_key_hex: &'a str,
    /// Where its database, log and the files above live.
    pub dir: &'a Path,
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
/// eth, net, txpool and web3, the engine API on its own port with the JWT secret, full
/// sync (blocks come from us), the builder's gas limit pinned.
pub fn command(s: &Setup<'_>) -> Command {
    let db = s.dir.join("db");
    let (p2p, http, auth) = (
        s.ports.p2p.to_string(),
        s.ports.http.to_string(),
        s.ports.auth.to_string(),
    );
    let gas = GAS_LIMIT.to_string();
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
            c.args(["--networkid", &CHAIN_ID.to_string()]).args([
                "--nat",
                "none",
                "--netrestrict",
                "127.0.0.0/8",
                "--ipcdisable",
            ]);
        }
    }
    c.args(["--syncmode", "full", "--port", &p2p])
        .args(["--nodiscover", "--bootnodes=", "--maxpeers", "5"])
        .args(["--nodekeyhex", s.node_key_hex])
        .args(["--http", "--http.addr", "127.0.0.1", "--http.port", &http])
        .args(["--http.api", "eth,net,txpool,web3"])
        .args(["--authrpc.addr", "127.0.0.1", "--authrpc.port", &auth])
        .arg("--authrpc.jwtsecret")
        .arg(s.jwt)
        .args(["--miner.gaslimit", &gas])
        .args(&s.extra);
    c
}

/// A running node; killed (SIGKILL) when dropped without [`Node::stop`].
pub struct Node {
    child: Child,
    pub pid: u32,
    pub log: PathBuf,
    stopped: bool,
}

impl Node {
    /// Initialises the datadir (geth) and starts the node, its output to `dir/node.log`.
    pub fn start(s: &Setup<'_>) -> Result<Node, String> {
        if s.kind == Kind::Geth {
            run(Command::new(s.bin)
                .arg("init")
                .arg("--datadir")
                .arg(s.dir.join("db"))
                .arg(s.genesis))?;
        }
        let log_path = s.dir.join("node.log");
        let log =
            std::fs::File::create(&log_path).map_err(|e| format!("{}: {e}", log_path.display()))?;
        let log2 = log.try_clone().map_err(|e| e.to_string())?;
        let mut cmd = command(s);
        cmd.stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(log2));
        // SAFETY: prctl is async-signal-safe; between fork and exec it only asks the
        // kernel to SIGKILL the child when this process (the thread that forked it: the
        // main thread, alive for the whole run) dies, so a killed tool leaves no node.
        unsafe {
            cmd.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd.spawn().map_err(|e| format!("{cmd:?}: {e}"))?;
        Ok(Node {
            pid: child.id(),
            child,
            log: log_path,
            stopped: false,
        })
    }

    /// `None` while running; its exit status once it has exited.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// SIGTERM, then up to `grace` for it to exit, then SIGKILL. Its exit status (a
    /// signal when it had to be killed) and how long it took.
    pub fn stop(&mut self, grace: Duration) -> (Option<ExitStatus>, Duration, bool) {
        let t = Instant::now();
        self.stopped = true;
        if let Some(status) = self.exited() {
            return (Some(status), Duration::ZERO, false);
        }
        // SAFETY: kill(2) on our own child's pid, which has not been reaped (try_wait
        // above saw it running), so the pid cannot have been reused.
        unsafe { libc::kill(self.pid as libc::pid_t, libc::SIGTERM) };
        while t.elapsed() < grace {
            if let Some(status) = self.exited() {
                return (Some(status), t.elapsed(), false);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        (self.child.wait().ok(), t.elapsed(), true)
    }

    /// The last `n` lines of the node's log.
    pub fn log_tail(&self, n: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if !self.stopped {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_genesis_is_post_merge_with_every_fork_through_osaka_at_block_0() {
        let g = genesis(&[Address::repeat_byte(1)], 1_700_000_000);
        let c = &g.config;
        assert_eq!(c.terminal_total_difficulty, Some(U256::ZERO));
        for fork in [
            Fork::London,
            Fork::Shanghai,
            Fork::Cancun,
            Fork::Prague,
            Fork::Osaka,
        ] {
            assert!(c.is_active(fork, 0, g.timestamp), "{fork}");
        }
        assert!(!c.is_active(Fork::Bpo1, 0, u64::MAX));
        // Written as geth reads it, and read back the same.
        let json = serde_json::to_string(&g).unwrap();
        assert!(json.contains("\"osakaTime\":0"), "{json}");
        assert!(json.contains("\"osaka\":{"), "{json}");
        assert_eq!(Genesis::from_json(&json).unwrap(), g);
        assert_eq!(g.alloc.len(), 1 + moat_common::system_contracts::ALL.len());
    }

    #[test]
    fn both_command_lines_stay_on_loopback_without_discovery() {
        let dir = Path::new("/tmp/x");
        for kind in [Kind::Moat, Kind::Geth] {
            let s = Setup {
                kind,
                bin: Path::new("node"),
                ports: Ports::from_base(40_000),
                genesis: &dir.join("genesis.json"),
                jwt: &dir.join("jwt.hex"),
                node_key_hex: "aa",
                dir,
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
            assert!(after("--http.api").contains("txpool"));
            assert_eq!(args[args.len() - 2..], ["--cache", "256"]);
            match kind {
                Kind::Moat => assert_eq!(after("--p2p.addr"), "127.0.0.1"),
                Kind::Geth => assert_eq!(after("--netrestrict"), "127.0.0.0/8"),
            }
        }
    }
}
