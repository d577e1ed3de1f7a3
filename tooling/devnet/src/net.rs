//! One devnet: a temporary directory, a JWT secret, the kit's EL genesis, the execution
//! clients and the beacon nodes driving them, and the watch that compares what each
//! execution client answers for `latest`, `safe` and `finalized` with what its beacon
//! node says, poll by poll.

use crate::cl::{Beacon, BeaconSpec, ClKind, ClView, Kit};
use crate::el::{El, ElConfig, Tagged};
use alloy_primitives::B256;
use moat_harness::el::{Kind, Ports};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The chain id and network id of both kits' EL genesis.
pub(crate) const CHAIN_ID: u64 = 1337;

pub(crate) struct Devnet {
    pub kit: Kit,
    pub dir: tempfile::TempDir,
    pub jwt: PathBuf,
    pub secret: [u8; 32],
    pub els: Vec<El>,
    pub beacons: Vec<Beacon>,
    /// Which execution client each beacon node drives (index into `els`).
    pub driven: Vec<usize>,
    pub el_genesis: B256,
    pub genesis_time: u64,
    pub slot_seconds: u64,
    pub base_port: u16,
    pub started: Instant,
    /// Where logs are copied when the devnet ends (`--log-dir`).
    pub log_dir: Option<PathBuf>,
}

impl Devnet {
    pub(crate) fn new(
        kit: Kit,
        slot_seconds: u64,
        base_port: u16,
        log_dir: Option<PathBuf>,
    ) -> Result<Devnet, String> {
        kit.check()?;
        let dir = tempfile::Builder::new()
            .prefix("moat-devnet.")
            .tempdir()
            .map_err(|e| format!("temporary directory: {e}"))?;
        let secret = random32()?;
        let jwt = dir.path().join("jwt.hex");
        std::fs::write(&jwt, alloy_primitives::hex::encode(secret)).map_err(|e| e.to_string())?;
        Ok(Devnet {
            kit,
            dir,
            jwt,
            secret,
            els: Vec::new(),
            beacons: Vec::new(),
            driven: Vec::new(),
            el_genesis: B256::ZERO,
            genesis_time: 0,
            slot_seconds,
            base_port,
            started: Instant::now(),
            log_dir,
        })
    }

    pub(crate) fn note(&self, what: impl AsRef<str>) {
        println!(
            "[{:>5.0} s] {}",
            self.started.elapsed().as_secs_f64(),
            what.as_ref()
        );
    }

    /// Starts an execution client (`geth` when given, else moat) on ports
    /// `base_port + 10 × index` (p2p, HTTP, engine), from the kit's EL genesis; checks
    /// that every client agrees on block 0.
    pub(crate) fn add_el(
        &mut self,
        name: &str,
        kind: Kind,
        bin: &Path,
        extra: &[&str],
    ) -> Result<usize, String> {
        let index = self.els.len();
        let base = self.base_port + 10 * index as u16;
        let key = random32()?;
        let config = ElConfig {
            kind,
            bin: bin.to_path_buf(),
            ports: Ports {
                p2p: base,
                http: base + 1,
                auth: base + 2,
            },
            genesis: self.kit.el_genesis(),
            network_id: CHAIN_ID,
            jwt: self.jwt.clone(),
            node_key_hex: alloy_primitives::hex::encode(key),
            dir: self.dir.path().join(name),
            extra: extra.iter().map(|s| s.to_string()).collect(),
        };
        let mut el = El::start(name, config, self.secret)?;
        let (hash, _) = el.tag("0x0")?;
        if self.els.is_empty() {
            self.el_genesis = hash;
        } else if hash != self.el_genesis {
            return Err(format!(
                "{name}'s block 0 is {hash}, the others' {}",
                self.el_genesis
            ));
        }
        self.note(format!(
            "{name}: {} (pid ports p2p {} http {} engine {}), block 0 {hash}",
            el.version(),
            el.config.ports.p2p,
            el.config.ports.http,
            el.config.ports.auth
        ));
        self.els.push(el);
        Ok(index)
    }

    /// Peers two execution clients over devp2p (`admin_addPeer` on the first) and waits
    /// until both count the other (30 s at most).
    pub(crate) fn peer_els(&mut self, a: usize, b: usize) -> Result<(), String> {
        let enode = self.els[b].enode()?;
        self.els[a].add_peer(&enode)?;
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if self.els[a].peer_count()? > 0 && self.els[b].peer_count()? > 0 {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(300));
        }
        Err(format!(
            "{} and {} did not peer over devp2p in 30 s",
            self.els[a].name, self.els[b].name
        ))
    }

    pub(crate) fn unpeer_els(&mut self, a: usize, b: usize) -> Result<(), String> {
        let enode = self.els[b].enode()?;
        self.els[a].remove_peer(&enode)?;
        let enode = self.els[a].enode()?;
        let _ = self.els[b].remove_peer(&enode);
        Ok(())
    }

    /// The CL genesis time of the devnet: `delay` seconds from now (set once, before the
    /// first beacon node).
    pub(crate) fn set_genesis(&mut self, delay: u64) {
        self.genesis_time = unix_now() + delay;
    }

    /// Starts a beacon node driving `el` with `validators`; its ports at
    /// `base_port + 100 + 10 × index`.
    pub(crate) fn add_beacon(
        &mut self,
        name: &str,
        el: usize,
        validators: Option<(u32, u32)>,
    ) -> Result<usize, String> {
        let port = self.els[el].config.ports.auth;
        self.add_beacon_via(name, el, validators, port)
    }

    /// [`Devnet::add_beacon`] with the engine API reached on `engine_port` (a proxy in
    /// front of the execution client's).
    pub(crate) fn add_beacon_via(
        &mut self,
        name: &str,
        el: usize,
        validators: Option<(u32, u32)>,
        engine_port: u16,
    ) -> Result<usize, String> {
        let index = self.beacons.len();
        let spec = BeaconSpec {
            kit: &self.kit,
            dir: self.dir.path().join(name),
            engine: format!("http://127.0.0.1:{engine_port}"),
            jwt: &self.jwt,
            validators,
            genesis_time: self.genesis_time,
            el_genesis: self.el_genesis,
            base: self.base_port + 100 + 10 * index as u16,
            slot_seconds: self.slot_seconds,
            genesis_ssz: self.dir.path().join("genesis.ssz"),
            peers: self
                .beacons
                .iter_mut()
                .filter_map(|b| b.identity().ok())
                .collect(),
        };
        let mut beacon = Beacon::start(name, &spec)?;
        beacon.wait_ready(Duration::from_secs(120))?;
        self.note(format!(
            "{name}: {} beacon node, REST {}, validators {:?}, drives {}",
            self.kit.kind.name(),
            beacon.rest,
            validators,
            self.els[el].name
        ));
        self.beacons.push(beacon);
        self.driven.push(el);
        Ok(index)
    }

    /// Peers two beacon nodes (Lodestar: `connect_peer` on the first; Prysm nodes were
    /// given their peers at start) and waits until the first counts a peer.
    pub(crate) fn peer_beacons(&mut self, a: usize, b: usize) -> Result<(), String> {
        let id = self.beacons[b].identity()?;
        if self.kit.kind == ClKind::Lodestar {
            self.beacons[a].connect(&id)?;
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if self.beacons[a].peer_count().unwrap_or(0) > 0 {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        Err(format!(
            "{} and {} did not peer in 60 s",
            self.beacons[a].name, self.beacons[b].name
        ))
    }

    /// The slot the wall clock is in (0 before genesis).
    pub(crate) fn wall_slot(&self) -> u64 {
        unix_now().saturating_sub(self.genesis_time) / self.slot_seconds
    }

    pub(crate) fn epoch_seconds(&self) -> u64 {
        self.slot_seconds * ClKind::SLOTS_PER_EPOCH
    }

    /// Sleeps until `t` seconds into the current slot.
    pub(crate) fn sleep_into_slot(&self, t: f64) {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        let since = (now - self.genesis_time as f64).rem_euclid(self.slot_seconds as f64);
        let wait = (t - since).rem_euclid(self.slot_seconds as f64);
        std::thread::sleep(Duration::from_secs_f64(wait));
    }

    /// Copies every log to `--log-dir`, if given.
    pub(crate) fn keep_logs(&self) {
        let Some(to) = &self.log_dir else { return };
        let _ = std::fs::create_dir_all(to);
        let mut logs: Vec<(String, PathBuf)> = self
            .els
            .iter()
            .map(|e| (format!("{}.log", e.name), e.log()))
            .collect();
        for b in &self.beacons {
            for (i, l) in b.logs().into_iter().enumerate() {
                logs.push((format!("{}-{i}.log", b.name), l));
            }
        }
        for (name, from) in logs {
            let _ = std::fs::copy(&from, to.join(name));
        }
        println!("logs copied to {}", to.display());
    }

    /// Any process that has died.
    pub(crate) fn casualty(&mut self) -> Option<String> {
        for e in &mut self.els {
            if let Some(e) = e.exited() {
                return Some(e);
            }
        }
        for b in &mut self.beacons {
            if let Some(e) = b.exited() {
                return Some(e);
            }
        }
        None
    }
}

impl Drop for Devnet {
    fn drop(&mut self) {
        self.keep_logs();
        for b in &mut self.beacons {
            b.stop();
        }
        for e in &mut self.els {
            e.stop();
        }
    }
}

pub(crate) fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

pub(crate) fn random32() -> Result<[u8; 32], String> {
    let mut b = [0u8; 32];
    use std::io::Read;
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .map_err(|e| format!("/dev/urandom: {e}"))?;
    Ok(b)
}

/// What one execution client said for the three tags at one poll.
#[derive(Debug, Clone)]
pub(crate) struct ElTags {
    pub latest: Tagged,
    pub safe: Tagged,
    pub finalized: Tagged,
}

fn show(t: &Tagged) -> String {
    match t {
        Ok((_, n)) => n.to_string(),
        Err(e) => format!("ERR({})", e.chars().take(40).collect::<String>()),
    }
}

/// The running comparison of one beacon node's view with its execution client's tags.
#[derive(Debug, Default)]
pub(crate) struct PairWatch {
    pub polls: u64,
    pub matches: u64,
    pub transient: u64,
    pub persistent: Vec<String>,
    prev_bad: bool,
    /// Finalized epochs seen matching: (epoch, EL block number, slot).
    pub checkpoints: Vec<(u64, u64, u64)>,
    pub last: Option<ClView>,
}

impl PairWatch {
    /// Compares one poll. `latest` is compared with the CL's head too, but only the
    /// finalized and safe tags decide a mismatch: the head moves within a slot.
    pub(crate) fn judge(&mut self, name: &str, cl: &ClView, el: &ElTags) -> String {
        self.polls += 1;
        let agrees = |el: &Tagged, checkpoint: (B256, u64)| match el {
            Ok((hash, _)) => *hash == checkpoint.0,
            // A checkpoint at genesis that the CL sends as the zero hash: none yet.
            Err(e) => checkpoint.1 == 0 && cl.genesis_is_none && e.contains("not found"),
        };
        let fin_ok = agrees(&el.finalized, cl.finalized);
        let safe_ok = agrees(&el.safe, cl.justified);
        // Before the CL names a finalized block (slot 0, genesis), "not found" is right.
        let pre = cl.finalized.1 == 0
            && cl.justified.1 == 0
            && matches!((&el.finalized, &el.safe), (Err(_), Err(_)));
        let head_ok = el.latest.as_ref().ok().map(|t| t.0) == Some(cl.head.0);
        let verdict = if (fin_ok && safe_ok) || pre {
            self.matches += 1;
            self.prev_bad = false;
            if fin_ok && !self.checkpoints.iter().any(|c| c.0 == cl.finalized_epoch) {
                self.checkpoints
                    .push((cl.finalized_epoch, cl.finalized.1, cl.slot));
            }
            if pre { "yes (none yet)" } else { "yes" }
        } else if self.prev_bad {
            self.persistent.push(format!(
                "{name} slot {}: CL finalized #{} justified #{}, EL finalized {} safe {}",
                cl.slot,
                cl.finalized.1,
                cl.justified.1,
                show(&el.finalized),
                show(&el.safe)
            ));
            "NO (persistent)"
        } else {
            self.transient += 1;
            self.prev_bad = true;
            "no (transient)"
        };
        self.last = Some(cl.clone());
        format!(
            "{name}: slot {:>3} CL head #{} fin ep {} (#{}) just ep {} (#{}) | EL latest {}{} safe {} fin {} | {verdict}",
            cl.slot,
            cl.head.1,
            cl.finalized_epoch,
            cl.finalized.1,
            cl.justified_epoch,
            cl.justified.1,
            show(&el.latest),
            if head_ok { "" } else { "*" },
            show(&el.safe),
            show(&el.finalized)
        )
    }
}

impl Devnet {
    /// The three tags of execution client `el`.
    pub(crate) fn tags(&mut self, el: usize) -> ElTags {
        let e = &mut self.els[el];
        ElTags {
            latest: e.tag("latest"),
            safe: e.tag("safe"),
            finalized: e.tag("finalized"),
        }
    }

    /// One poll of every (beacon node, execution client) pair; lines to print.
    pub(crate) fn poll(&mut self, watches: &mut [PairWatch]) -> Vec<String> {
        let mut lines = Vec::new();
        for (b, watch) in watches.iter_mut().enumerate().take(self.beacons.len()) {
            let el = self.driven[b];
            let view = match self.beacons[b].view(self.el_genesis) {
                Ok(v) => v,
                Err(e) => {
                    lines.push(format!("{}: CL not answering ({e})", self.beacons[b].name));
                    continue;
                }
            };
            let tags = self.tags(el);
            let name = format!("{}/{}", self.beacons[b].name, self.els[el].name);
            lines.push(watch.judge(&name, &view, &tags));
        }
        lines
    }
}
