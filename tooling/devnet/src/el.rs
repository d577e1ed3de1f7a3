//! The execution clients of a devnet — moat, and go-ethereum beside it — as the tool runs
//! them: `moat-harness` starts them on loopback ports (no discovery), and this wraps what a
//! scenario asks of them over JSON-RPC and the engine API.

use alloy_primitives::{B256, Bytes};
use moat_harness::el::{self, Kind, Node, Ports, Setup};
use moat_harness::http::{CallError, RpcClient, quantity};
use serde_json::{Value, json};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Everything an execution client was started with, so it can be started again.
pub(crate) struct ElConfig {
    pub kind: Kind,
    pub bin: PathBuf,
    pub ports: Ports,
    pub genesis: PathBuf,
    pub network_id: u64,
    pub jwt: PathBuf,
    pub node_key_hex: String,
    pub dir: PathBuf,
    pub extra: Vec<String>,
}

pub(crate) struct El {
    pub name: String,
    pub config: ElConfig,
    node: Option<Node>,
    pub rpc: RpcClient,
    pub engine: RpcClient,
}

/// A block as a tag names it: (hash, number), or the node's error.
pub(crate) type Tagged = Result<(B256, u64), String>;

impl El {
    fn setup(&self) -> Setup<'_> {
        let c = &self.config;
        Setup {
            kind: c.kind,
            bin: &c.bin,
            ports: c.ports,
            genesis: &c.genesis,
            network_id: c.network_id,
            jwt: &c.jwt,
            node_key_hex: &c.node_key_hex,
            dir: &c.dir,
            http_api: "eth,net,txpool,web3,admin",
            max_peers: 5,
            extra: c.extra.iter().map(String::as_str).collect(),
        }
    }

    /// Initialises the datadir and starts the node; waits for its JSON-RPC.
    pub(crate) fn start(name: &str, config: ElConfig, secret: [u8; 32]) -> Result<El, String> {
        std::fs::create_dir_all(&config.dir).map_err(|e| e.to_string())?;
        let http = ([127, 0, 0, 1], config.ports.http).into();
        let auth = ([127, 0, 0, 1], config.ports.auth).into();
        let mut el = El {
            name: name.to_string(),
            config,
            node: None,
            rpc: RpcClient::new(http, None, Duration::from_secs(20)),
            engine: RpcClient::new(auth, Some(secret), Duration::from_secs(20)),
        };
        el.node = Some(Node::start(&el.setup())?);
        el.wait_ready()?;
        Ok(el)
    }

    /// Starts it again on its datadir, with the same flags.
    pub(crate) fn restart(&mut self) -> Result<(), String> {
        if self.node.as_mut().is_some_and(|n| n.exited().is_none()) {
            return Err(format!("{} is still running", self.name));
        }
        self.node = Some(Node::restart(&self.setup())?);
        self.wait_ready()
    }

    /// Starts it on its datadir with the engine API on another port, where no consensus
    /// client can reach it (to read what it kept through a crash).
    pub(crate) fn restart_unreachable(&mut self, auth_port: u16) -> Result<(), String> {
        let real = self.config.ports.auth;
        self.config.ports.auth = auth_port;
        let started = Node::restart(&self.setup());
        self.config.ports.auth = real;
        self.node = Some(started?);
        self.wait_ready()
    }

    fn wait_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            if let Some(n) = self.node.as_mut()
                && let Some(status) = n.exited()
            {
                return Err(format!(
                    "{} exited at start ({status}): {}",
                    self.name,
                    n.log_tail(15)
                ));
            }
            match self.rpc.call("eth_chainId", json!([])) {
                Ok(_) => return Ok(()),
                Err(e) if Instant::now() > deadline => {
                    return Err(format!("{}'s JSON-RPC did not come up: {e}", self.name));
                }
                Err(_) => std::thread::sleep(Duration::from_millis(300)),
            }
        }
    }

    pub(crate) fn kill9(&mut self) {
        if let Some(n) = self.node.as_mut() {
            n.kill9();
        }
    }

    pub(crate) fn stop(&mut self) {
        if let Some(n) = self.node.as_mut() {
            n.stop(Duration::from_secs(30));
        }
    }

    /// Why it is not running, if it is not.
    pub(crate) fn exited(&mut self) -> Option<String> {
        let n = self.node.as_mut()?;
        n.exited()
            .map(|s| format!("{} exited ({s}): {}", self.name, n.log_tail(10)))
    }

    pub(crate) fn log(&self) -> PathBuf {
        self.config.dir.join("node.log")
    }

    pub(crate) fn call(&mut self, method: &str, params: Value) -> Result<Value, String> {
        self.rpc
            .call(method, params)
            .map_err(|e| format!("{}: {method}: {e}", self.name))
    }

    /// The block a tag (`latest`, `safe`, `finalized`, a number) names.
    pub(crate) fn tag(&mut self, tag: &str) -> Tagged {
        match self.rpc.call("eth_getBlockByNumber", json!([tag, false])) {
            Ok(Value::Null) => Err("null".into()),
            Ok(b) => Ok((
                b["hash"]
                    .as_str()
                    .and_then(|h| h.parse().ok())
                    .ok_or("block without hash")?,
                quantity(&b["number"]).ok_or("block without number")?,
            )),
            Err(CallError::Rpc(m)) => Err(m),
            Err(e) => Err(e.to_string()),
        }
    }

    pub(crate) fn block_number(&mut self) -> Result<u64, String> {
        let v = self.call("eth_blockNumber", json!([]))?;
        quantity(&v).ok_or_else(|| format!("eth_blockNumber: {v}"))
    }

    /// Its enode URL (`admin_nodeInfo`).
    pub(crate) fn enode(&mut self) -> Result<String, String> {
        let info = self.call("admin_nodeInfo", json!([]))?;
        info["enode"]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| format!("admin_nodeInfo without enode: {info}"))
    }

    pub(crate) fn add_peer(&mut self, enode: &str) -> Result<(), String> {
        self.call("admin_addPeer", json!([enode])).map(drop)
    }

    pub(crate) fn remove_peer(&mut self, enode: &str) -> Result<(), String> {
        self.call("admin_removePeer", json!([enode])).map(drop)
    }

    pub(crate) fn peer_count(&mut self) -> Result<u64, String> {
        let v = self.call("net_peerCount", json!([]))?;
        quantity(&v).ok_or_else(|| format!("net_peerCount: {v}"))
    }

    pub(crate) fn send_raw(&mut self, raw: &Bytes) -> Result<B256, String> {
        let v = self.call("eth_sendRawTransaction", json!([raw]))?;
        v.as_str()
            .and_then(|h| h.parse().ok())
            .ok_or_else(|| format!("eth_sendRawTransaction: {v}"))
    }

    /// (block number, status) of a mined tx; `None` while it is not.
    pub(crate) fn receipt(&mut self, hash: B256) -> Result<Option<(u64, u64)>, String> {
        let r = self.call("eth_getTransactionReceipt", json!([hash]))?;
        if r.is_null() {
            return Ok(None);
        }
        Ok(Some((
            quantity(&r["blockNumber"]).ok_or("receipt without blockNumber")?,
            quantity(&r["status"]).ok_or("receipt without status")?,
        )))
    }

    /// Whether the tx is known and not mined (`eth_getTransactionByHash` with no block).
    pub(crate) fn pending(&mut self, hash: B256) -> Result<bool, String> {
        let t = self.call("eth_getTransactionByHash", json!([hash]))?;
        Ok(!t.is_null() && t["blockHash"].is_null())
    }

    pub(crate) fn nonce(
        &mut self,
        address: alloy_primitives::Address,
        tag: &str,
    ) -> Result<u64, String> {
        let v = self.call("eth_getTransactionCount", json!([address, tag]))?;
        quantity(&v).ok_or_else(|| format!("eth_getTransactionCount: {v}"))
    }

    /// `engine_getBlobsV1` (version-0 sidecars, before Osaka) or `engine_getBlobsV2`
    /// (cell proofs, from Osaka on) for `hashes`: per hash, the blob that came back. V2
    /// answers all or nothing (`null`).
    pub(crate) fn get_blobs(
        &mut self,
        hashes: &[B256],
        v2: bool,
    ) -> Result<Vec<Option<Bytes>>, String> {
        let method = if v2 {
            "engine_getBlobsV2"
        } else {
            "engine_getBlobsV1"
        };
        let v = self
            .engine
            .call(method, json!([hashes]))
            .map_err(|e| format!("{}: {method}: {e}", self.name))?;
        if v.is_null() && v2 {
            return Ok(vec![None; hashes.len()]);
        }
        let items = v
            .as_array()
            .ok_or_else(|| format!("{method}: not an array: {v}"))?;
        Ok(items
            .iter()
            .map(|i| i["blob"].as_str().and_then(|b| b.parse().ok()))
            .collect())
    }

    pub(crate) fn version(&self) -> String {
        el::version(&self.config.bin, self.config.kind)
    }
}

impl Drop for El {
    fn drop(&mut self) {
        self.stop();
    }
}
