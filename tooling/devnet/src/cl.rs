//! The consensus clients: a beacon node started from a kit in ../shared/devnet (Lodestar
//! v1.22 at Deneb, Prysm v7.1.6 at Fulu), with or without validators, driving one
//! execution client through its engine API; and what the tool reads of the CL's view over
//! the standard beacon REST API (head, finalized and justified checkpoints, the execution
//! block hash of a beacon block).

use alloy_primitives::B256;
use moat_harness::http::{CallError, RpcClient};
use moat_harness::process::Process;
use serde_json::Value;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// Which consensus client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ClKind {
    Lodestar,
    Prysm,
}

impl ClKind {
    pub(crate) fn name(self) -> &'static str {
        match self {
            ClKind::Lodestar => "Lodestar v1.22 (Deneb)",
            ClKind::Prysm => "Prysm v7.1.6 (Fulu)",
        }
    }

    /// Slots of an epoch: both kits run the minimal preset.
    pub(crate) const SLOTS_PER_EPOCH: u64 = 8;
}

/// Where a kit and its build are.
#[derive(Debug, Clone)]
pub(crate) struct Kit {
    pub kind: ClKind,
    /// The kit's directory (README, devnet.sh, el-genesis.json).
    pub dir: PathBuf,
    /// Its build: Lodestar's tree, or the directory of Prysm's binaries.
    pub build: PathBuf,
}

impl Kit {
    /// The kit of `kind` beside the repository (`<repo>/../shared/devnet/...`) and its
    /// default build directory, or where `LODESTAR_KIT`/`LSDEVNET_DIR` and
    /// `PRYSM_KIT`/`PRYSM_DIR` say.
    pub(crate) fn locate(kind: ClKind, repo: &Path) -> Kit {
        let home = PathBuf::from(std::env::var("HOME").unwrap_or_else(|_| "/root".into()));
        let env = |k: &str| std::env::var_os(k).map(PathBuf::from);
        match kind {
            ClKind::Lodestar => Kit {
                kind,
                dir: env("LODESTAR_KIT").unwrap_or_else(|| repo.join("../shared/devnet/lodestar")),
                build: env("LSDEVNET_DIR")
                    .unwrap_or_else(|| home.join(".cache/lodestar-devnet"))
                    .join("ls"),
            },
            ClKind::Prysm => Kit {
                kind,
                dir: env("PRYSM_KIT").unwrap_or_else(|| repo.join("../shared/devnet/prysm")),
                build: env("PRYSM_DIR")
                    .unwrap_or_else(|| home.join(".cache/prysm-devnet"))
                    .join("bin-minimal"),
            },
        }
    }

    /// `Err` with what to do when the kit or its build is missing.
    pub(crate) fn check(&self) -> Result<(), String> {
        if !self.dir.join("el-genesis.json").is_file() {
            return Err(format!(
                "the {} kit is not at {} (set {})",
                self.kind.name(),
                self.dir.display(),
                match self.kind {
                    ClKind::Lodestar => "LODESTAR_KIT",
                    ClKind::Prysm => "PRYSM_KIT",
                }
            ));
        }
        let built = match self.kind {
            ClKind::Lodestar => self.build.join("packages/cli/lib/index.js"),
            ClKind::Prysm => self.build.join("beacon-chain"),
        };
        if !built.is_file() {
            return Err(format!(
                "the {} kit is not built ({} is missing); build it once as {}/README.md says",
                self.kind.name(),
                built.display(),
                self.dir.display()
            ));
        }
        Ok(())
    }

    pub(crate) fn el_genesis(&self) -> PathBuf {
        self.dir.join("el-genesis.json")
    }
}

/// How one beacon node is started.
pub(crate) struct BeaconSpec<'a> {
    pub kit: &'a Kit,
    /// Its own directory (database, logs).
    pub dir: PathBuf,
    /// Its execution client's engine API.
    pub engine: String,
    pub jwt: &'a Path,
    /// Interop validators it runs (inclusive range of indices), if any.
    pub validators: Option<(u32, u32)>,
    /// Of the whole devnet: the CL genesis time and the EL's block-0 hash.
    pub genesis_time: u64,
    pub el_genesis: B256,
    /// Port base: REST at `base`, libp2p at `base + 1` (Prysm also uses base + 2..5).
    pub base: u16,
    pub slot_seconds: u64,
    /// Prysm: the devnet's CL genesis state, made by the first beacon node's start.
    pub genesis_ssz: PathBuf,
    /// Beacon nodes already running: (peer id, multiaddr), for Prysm's `--peer`.
    pub peers: Vec<(String, String)>,
}

/// A running beacon node.
pub(crate) struct Beacon {
    pub name: String,
    pub kind: ClKind,
    pub rest: SocketAddr,
    pub p2p_port: u16,
    procs: Vec<Process>,
    client: RpcClient,
    exec_of_root: HashMap<String, (B256, u64)>,
}

/// The CL's view at one moment.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ClView {
    pub slot: u64,
    pub head: (B256, u64),
    pub finalized_epoch: u64,
    pub finalized: (B256, u64),
    pub justified_epoch: u64,
    pub justified: (B256, u64),
    /// The CL names a checkpoint at the genesis block with the zero hash, which the EL
    /// reads as "none yet" (Prysm); Lodestar names the EL genesis block.
    pub genesis_is_none: bool,
}

/// Interop validators in the genesis state of every devnet.
pub(crate) const TOTAL_VALIDATORS: u32 = 8;

impl Beacon {
    pub(crate) fn start(name: &str, spec: &BeaconSpec<'_>) -> Result<Beacon, String> {
        std::fs::create_dir_all(&spec.dir).map_err(|e| e.to_string())?;
        let rest_port = spec.base;
        let p2p_port = spec.base + 1;
        let log = spec.dir.join("beacon.log");
        let procs = match spec.kit.kind {
            ClKind::Lodestar => vec![Process::spawn(lodestar(spec, rest_port, p2p_port), &log)?],
            ClKind::Prysm => crate::prysm::start(spec, rest_port, p2p_port)?,
        };
        let rest: SocketAddr = ([127, 0, 0, 1], rest_port).into();
        Ok(Beacon {
            name: name.to_string(),
            kind: spec.kit.kind,
            rest,
            p2p_port,
            procs,
            client: RpcClient::new(rest, None, Duration::from_secs(10)),
            exec_of_root: HashMap::new(),
        })
    }

    /// Waits until the REST API answers (`limit` at most).
    pub(crate) fn wait_ready(&mut self, limit: Duration) -> Result<(), String> {
        let deadline = Instant::now() + limit;
        loop {
            for p in &mut self.procs {
                if let Some(status) = p.exited() {
                    return Err(format!(
                        "{} exited at start ({status}): {}",
                        self.name,
                        p.log_tail(15)
                    ));
                }
            }
            match self.client.get("/eth/v1/node/version") {
                Ok(_) => return Ok(()),
                Err(e) if Instant::now() > deadline => {
                    return Err(format!("{}'s REST API did not come up: {e}", self.name));
                }
                Err(_) => std::thread::sleep(Duration::from_millis(500)),
            }
        }
    }

    pub(crate) fn get(&mut self, path: &str) -> Result<Value, CallError> {
        self.client.get(path)
    }

    /// Its libp2p identity: (peer id, a loopback multiaddr without the peer id). Prysm
    /// without discovery has no ENR to answer `/eth/v1/node/identity` with; its log names
    /// the address it listens on.
    pub(crate) fn identity(&mut self) -> Result<(String, String), String> {
        if self.kind == ClKind::Prysm {
            return crate::prysm::identity(&self.procs[0].log, self.p2p_port);
        }
        let id = self
            .get("/eth/v1/node/identity")
            .map_err(|e| format!("{}: identity: {e}", self.name))?;
        let peer_id = id["data"]["peer_id"]
            .as_str()
            .ok_or("identity without peer_id")?
            .to_string();
        Ok((peer_id, format!("/ip4/127.0.0.1/tcp/{}", self.p2p_port)))
    }

    /// Connected libp2p peers.
    pub(crate) fn peer_count(&mut self) -> Result<u64, String> {
        let v = self
            .get("/eth/v1/node/peer_count")
            .map_err(|e| format!("{}: peer_count: {e}", self.name))?;
        v["data"]["connected"]
            .as_str()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| format!("peer_count: {v}"))
    }

    /// Dials `peer` (Lodestar's `lodestar` REST namespace; Prysm peers at start).
    pub(crate) fn connect(&mut self, peer: &(String, String)) -> Result<(), String> {
        match self.kind {
            ClKind::Lodestar => self
                .client
                .post_path(
                    &format!(
                        "/eth/v1/lodestar/connect_peer?peerId={}&multiaddr={}",
                        peer.0,
                        peer.1.replace('/', "%2F")
                    ),
                    "",
                )
                .map(drop)
                .map_err(|e| format!("{}: connect_peer: {e}", self.name)),
            ClKind::Prysm => Err("Prysm peers are given at start".into()),
        }
    }

    /// Drops the connection to `peer_id` (Lodestar's `lodestar` REST namespace).
    pub(crate) fn disconnect(&mut self, peer_id: &str) -> Result<(), String> {
        match self.kind {
            ClKind::Lodestar => self
                .client
                .post_path(
                    &format!("/eth/v1/lodestar/disconnect_peer?peerId={peer_id}"),
                    "",
                )
                .map(drop)
                .map_err(|e| format!("{}: disconnect_peer: {e}", self.name)),
            ClKind::Prysm => Err("disconnecting peers is not scripted for Prysm".into()),
        }
    }

    /// The execution block (hash, number) of the beacon block `root`; the zero root (an
    /// epoch-0 checkpoint) and blocks without a payload name the EL genesis.
    fn exec_of(&mut self, root: &str, el_genesis: B256) -> Result<(B256, u64), String> {
        if root.trim_start_matches("0x").bytes().all(|b| b == b'0') {
            return Ok((el_genesis, 0));
        }
        if let Some(v) = self.exec_of_root.get(root) {
            return Ok(*v);
        }
        let block = self
            .get(&self.block_path(root))
            .map_err(|e| format!("block {root}: {e}"))?;
        let found = exec_in(&block["data"]["message"], el_genesis)?;
        self.exec_of_root.insert(root.to_string(), found);
        Ok(found)
    }

    /// Where a beacon block's execution hash is read: the full block (Lodestar), or the
    /// blinded one (Prysm keeps blinded blocks and rebuilds full ones from the EL's
    /// payload bodies; the header is enough here).
    fn block_path(&self, id: &str) -> String {
        match self.kind {
            ClKind::Lodestar => format!("/eth/v2/beacon/blocks/{id}"),
            ClKind::Prysm => format!("/eth/v1/beacon/blinded_blocks/{id}"),
        }
    }

    /// The CL's head, finalized and justified checkpoints, as execution blocks: the
    /// checkpoints each CL puts in its forkchoiceUpdated. Lodestar names the head state's
    /// finalized and current-justified checkpoints; Prysm its fork-choice store's
    /// finalized and *unrealized* justified ones (`/eth/v1/debug/fork_choice`), which run
    /// up to an epoch ahead of the head state's.
    pub(crate) fn view(&mut self, el_genesis: B256) -> Result<ClView, String> {
        let (fin, just) = match self.kind {
            ClKind::Lodestar => {
                let fc = self
                    .get("/eth/v1/beacon/states/head/finality_checkpoints")
                    .map_err(|e| e.to_string())?;
                (
                    fc["data"]["finalized"].clone(),
                    fc["data"]["current_justified"].clone(),
                )
            }
            ClKind::Prysm => {
                let fc = self
                    .get("/eth/v1/debug/fork_choice")
                    .map_err(|e| e.to_string())?;
                (
                    fc["finalized_checkpoint"].clone(),
                    fc["extra_data"]["unrealized_justified_checkpoint"].clone(),
                )
            }
        };
        let head = self
            .get(&self.block_path("head"))
            .map_err(|e| e.to_string())?;
        let msg = &head["data"]["message"];
        let slot = num(&msg["slot"])?;
        let head = exec_in(msg, el_genesis)?;
        let (fin, just) = (&fin, &just);
        let fin_root = fin["root"].as_str().ok_or("no finalized root")?.to_string();
        let just_root = just["root"]
            .as_str()
            .ok_or("no justified root")?
            .to_string();
        Ok(ClView {
            slot,
            head,
            finalized_epoch: num(&fin["epoch"])?,
            finalized: self.exec_of(&fin_root, el_genesis)?,
            justified_epoch: num(&just["epoch"])?,
            justified: self.exec_of(&just_root, el_genesis)?,
            genesis_is_none: self.kind == ClKind::Prysm,
        })
    }

    /// Stops every process of the node (SIGTERM, then SIGKILL).
    pub(crate) fn stop(&mut self) {
        for p in self.procs.iter_mut().rev() {
            p.stop(Duration::from_secs(10));
        }
    }

    pub(crate) fn exited(&mut self) -> Option<String> {
        for p in &mut self.procs {
            if let Some(s) = p.exited() {
                return Some(format!("{} exited ({s}): {}", self.name, p.log_tail(10)));
            }
        }
        None
    }

    pub(crate) fn logs(&self) -> Vec<PathBuf> {
        self.procs.iter().map(|p| p.log.clone()).collect()
    }
}

fn num(v: &Value) -> Result<u64, String> {
    v.as_str()
        .and_then(|s| s.parse().ok())
        .or_else(|| v.as_u64())
        .ok_or_else(|| format!("not a number: {v}"))
}

/// The execution block of a beacon block message.
fn exec_in(msg: &Value, el_genesis: B256) -> Result<(B256, u64), String> {
    let body = &msg["body"];
    let payload = if body["execution_payload"].is_null() {
        &body["execution_payload_header"]
    } else {
        &body["execution_payload"]
    };
    if num(&msg["slot"])? == 0 || payload.is_null() {
        return Ok((el_genesis, 0));
    }
    let hash: B256 = payload["block_hash"]
        .as_str()
        .and_then(|h| h.parse().ok())
        .ok_or("payload without block_hash")?;
    if hash.is_zero() {
        return Ok((el_genesis, 0));
    }
    Ok((hash, num(&payload["block_number"])?))
}

/// Lodestar's `dev` command as the kit's devnet.sh runs it, with our ports, the
/// validators asked for (none: a beacon node alone), and every REST namespace (to peer
/// nodes with `connect_peer`). discv5 stays on (v1.22 fails at start with `--discv5
/// false`), bound to 127.0.0.1 and given no bootnodes, so peers come only as the tool
/// connects them.
fn lodestar(spec: &BeaconSpec<'_>, rest_port: u16, p2p_port: u16) -> Command {
    let ls = &spec.kit.build;
    let mut c = Command::new("node");
    c.current_dir(&spec.dir)
        .env("NODE_BACKEND", "js")
        .arg("--max-old-space-size=2048")
        .arg("--import")
        .arg(ls.join("polyfill.mjs"))
        .arg(ls.join("packages/cli/lib/index.js"))
        .arg("dev")
        .arg("--dataDir")
        .arg(spec.dir.join("data"))
        .arg("--reset")
        .args(["--genesisValidators", &TOTAL_VALIDATORS.to_string()])
        .args(["--genesisTime", &spec.genesis_time.to_string()])
        .args(["--genesisEth1Hash", &spec.el_genesis.to_string()])
        .args(["--execution.urls", &spec.engine])
        .arg("--jwtSecret")
        .arg(spec.jwt);
    if let Some((a, b)) = spec.validators {
        c.args(["--startValidators", &format!("{a}..{b}")]);
    }
    for fork in ["ALTAIR", "BELLATRIX", "CAPELLA", "DENEB"] {
        c.args([&format!("--params.{fork}_FORK_EPOCH"), "0"]);
    }
    c.args(["--params.TERMINAL_TOTAL_DIFFICULTY", "0"])
        .args(["--params.SECONDS_PER_SLOT", &spec.slot_seconds.to_string()])
        .args([
            "--suggestedFeeRecipient",
            "0x00000000000000000000000000000000000000fe",
        ])
        .args(["--rest.address", "127.0.0.1"])
        .args(["--rest.port", &rest_port.to_string()])
        .args(["--rest.swaggerUI", "false", "--rest.namespace", "*"])
        .args(["--beaconNodes", &format!("http://127.0.0.1:{rest_port}")])
        .args(["--listenAddress", "127.0.0.1"])
        .args(["--port", &p2p_port.to_string()])
        .args(["--logLevel", "info"]);
    c
}
