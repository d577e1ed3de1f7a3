//! Who may start an inbound handshake, and for how long.
//!
//! A node has a fixed number of inbound handshakes in progress (RLPx, Hello, Status); a
//! flood of connections that open a socket and say nothing can hold them all, and then
//! no honest peer gets in (go-ethereum too, which keeps 50 and no per-address cap on
//! loopback or LAN). The gate shares the slots out:
//!
//! - **per address and per subnet:** one IPv4 address (IPv6 /64) holds at most
//!   [`GateConfig::per_ip`] pending handshakes, and one /24 (IPv6 /48) at most
//!   [`GateConfig::per_subnet`], so a flood from one host or one network takes only a
//!   small share;
//! - **a reserve for peers seen before:** [`GateConfig::reserved`] slots are kept for
//!   addresses of static peers and of peers that completed a handshake and left with a
//!   non-negative score; addresses never seen use the rest;
//! - **short timeouts under load:** once half the slots are taken, a new handshake must
//!   finish within [`GateConfig::short_timeout`] instead of [`GateConfig::timeout`], so
//!   idle sockets are recycled quickly while an honest handshake (three round trips)
//!   still fits.

use moat_common::net::host_key;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The gate's limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GateConfig {
    /// Inbound handshakes in progress at once.
    pub total: usize,
    /// Of those, the slots only known addresses may take.
    pub reserved: usize,
    /// Pending handshakes from one address (IPv4, IPv6 /64).
    pub per_ip: usize,
    /// Pending handshakes from one subnet (IPv4 /24, IPv6 /48) of unknown addresses.
    pub per_subnet: usize,
    /// Time for a whole inbound handshake.
    pub timeout: Duration,
    /// Time for a whole inbound handshake started while half the slots are taken.
    pub short_timeout: Duration,
    /// Known addresses remembered (the oldest is forgotten first).
    pub known_cap: usize,
}

impl Default for GateConfig {
    fn default() -> Self {
        Self {
            total: 64,
            reserved: 16,
            per_ip: 8,
            per_subnet: 16,
            timeout: Duration::from_secs(10),
            short_timeout: Duration::from_secs(2),
            known_cap: 4096,
        }
    }
}

impl GateConfig {
    /// The default shares of `total` slots (at least 4): a quarter reserved, a quarter
    /// per subnet, an eighth per address.
    pub fn with_total(total: usize) -> Self {
        let total = total.max(4);
        Self {
            total,
            reserved: total / 4,
            per_ip: (total / 8).max(1),
            per_subnet: (total / 4).max(1),
            ..Self::default()
        }
    }
}

/// Why the gate turned a connection away.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GateRefusal {
    /// Every slot open to this address is taken.
    Full,
    /// The address has [`GateConfig::per_ip`] handshakes pending already.
    PerIp,
    /// The address's subnet has [`GateConfig::per_subnet`] handshakes pending already.
    PerSubnet,
}

impl GateRefusal {
    /// Stable label for logs and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Full => "full",
            Self::PerIp => "per_ip",
            Self::PerSubnet => "per_subnet",
        }
    }
}

/// The subnet of an address: IPv4 /24, IPv6 /48.
fn subnet_key(ip: IpAddr) -> IpAddr {
    match host_key(ip) {
        IpAddr::V4(v4) => {
            let o = v4.octets();
            IpAddr::from([o[0], o[1], o[2], 0])
        }
        IpAddr::V6(v6) => {
            let mut s = v6.segments();
            s[3..].fill(0);
            IpAddr::V6(s.into())
        }
    }
}

#[derive(Debug, Default)]
struct Pending {
    total: usize,
    per_ip: HashMap<IpAddr, usize>,
    per_subnet: HashMap<IpAddr, usize>,
}

#[derive(Debug, Default)]
struct Known {
    /// Addresses of peers that completed a handshake and left in good standing, with
    /// when they were last seen.
    seen: HashMap<IpAddr, Instant>,
    /// Addresses of static peers, with how many static peers share each.
    statics: HashMap<IpAddr, usize>,
}

/// Shares inbound handshake slots out (see the module docs). Cloning shares it.
#[derive(Debug, Clone)]
pub struct HandshakeGate {
    cfg: GateConfig,
    pending: Arc<Mutex<Pending>>,
    known: Arc<Mutex<Known>>,
}

/// One admitted handshake's slot; given back on drop.
#[derive(Debug)]
pub struct GatePermit {
    pending: Arc<Mutex<Pending>>,
    ip: IpAddr,
    subnet: Option<IpAddr>,
    /// Time the handshake has.
    pub timeout: Duration,
    /// Whether the address was known (it may have used a reserved slot).
    pub known: bool,
}

fn decrement(map: &mut HashMap<IpAddr, usize>, key: &IpAddr) {
    if let Some(n) = map.get_mut(key) {
        *n -= 1;
        if *n == 0 {
            map.remove(key);
            if map.capacity() > 64 && map.len() < map.capacity() / 4 {
                map.shrink_to_fit();
            }
        }
    }
}

impl Drop for GatePermit {
    fn drop(&mut self) {
        let mut p = self.pending.lock();
        p.total -= 1;
        decrement(&mut p.per_ip, &self.ip);
        if let Some(subnet) = &self.subnet {
            decrement(&mut p.per_subnet, subnet);
        }
    }
}

impl HandshakeGate {
    /// A gate with limits `cfg`, clamped to be consistent (at least one slot, one left unreserved).
    pub fn new(cfg: GateConfig) -> Self {
        let cfg = GateConfig {
            total: cfg.total.max(1),
            reserved: cfg.reserved.min(cfg.total.saturating_sub(1)),
            per_ip: cfg.per_ip.max(1),
            per_subnet: cfg.per_subnet.max(1),
            ..cfg
        };
        Self {
            cfg,
            pending: Arc::default(),
            known: Arc::default(),
        }
    }

    /// The limits in force (after clamping).
    pub fn config(&self) -> GateConfig {
        self.cfg
    }

    /// Handshakes in progress now.
    pub fn pending(&self) -> usize {
        self.pending.lock().total
    }

    /// Whether `ip` is a known address: a static peer's, or one seen in good standing.
    pub fn is_known(&self, ip: IpAddr) -> bool {
        let key = host_key(ip);
        let k = self.known.lock();
        k.statics.contains_key(&key) || k.seen.contains_key(&key)
    }

    /// Remembers a peer's address as seen in good standing.
    pub fn remember(&self, ip: IpAddr) {
        let key = host_key(ip);
        let mut k = self.known.lock();
        if !k.seen.contains_key(&key)
            && k.seen.len() >= self.cfg.known_cap
            && let Some(oldest) = k.seen.iter().min_by_key(|(_, t)| **t).map(|(ip, _)| *ip)
        {
            k.seen.remove(&oldest);
        }
        k.seen.insert(key, Instant::now());
    }

    /// Counts a static peer's address as known (`add`) or one fewer (`!add`).
    pub fn set_static(&self, ip: IpAddr, add: bool) {
        let key = host_key(ip);
        let mut k = self.known.lock();
        if add {
            *k.statics.entry(key).or_insert(0) += 1;
        } else {
            decrement(&mut k.statics, &key);
        }
    }

    /// Takes a slot for a handshake from `ip`, or says why not.
    pub fn admit(&self, ip: IpAddr) -> Result<GatePermit, GateRefusal> {
        let known = self.is_known(ip);
        let key = host_key(ip);
        let subnet = subnet_key(ip);
        let mut p = self.pending.lock();
        let room = if known {
            self.cfg.total
        } else {
            self.cfg.total - self.cfg.reserved
        };
        if p.total >= room {
            return Err(GateRefusal::Full);
        }
        if p.per_ip.get(&key).copied().unwrap_or(0) >= self.cfg.per_ip {
            return Err(GateRefusal::PerIp);
        }
        // Known addresses are not held to their subnet's share.
        if !known && p.per_subnet.get(&subnet).copied().unwrap_or(0) >= self.cfg.per_subnet {
            return Err(GateRefusal::PerSubnet);
        }
        let loaded = p.total * 2 >= self.cfg.total;
        p.total += 1;
        *p.per_ip.entry(key).or_insert(0) += 1;
        if !known {
            *p.per_subnet.entry(subnet).or_insert(0) += 1;
        }
        Ok(GatePermit {
            pending: Arc::clone(&self.pending),
            ip: key,
            subnet: (!known).then_some(subnet),
            timeout: if loaded {
                self.cfg.short_timeout
            } else {
                self.cfg.timeout
            },
            known,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn gate() -> HandshakeGate {
        HandshakeGate::new(GateConfig {
            total: 8,
            reserved: 2,
            per_ip: 2,
            per_subnet: 3,
            ..GateConfig::default()
        })
    }

    #[test]
    fn one_address_and_one_subnet_take_a_share_only() {
        let g = gate();
        let a = g.admit(ip("10.0.0.1")).unwrap();
        let _b = g.admit(ip("10.0.0.1")).unwrap();
        assert_eq!(g.admit(ip("10.0.0.1")).unwrap_err(), GateRefusal::PerIp);
        let _c = g.admit(ip("10.0.0.2")).unwrap();
        assert_eq!(g.admit(ip("10.0.0.3")).unwrap_err(), GateRefusal::PerSubnet);
        // Another subnet is still served.
        let _d = g.admit(ip("10.0.1.1")).unwrap();
        drop(a);
        let _e = g.admit(ip("10.0.0.3")).unwrap();
        assert_eq!(g.pending(), 4);
    }

    #[test]
    fn known_addresses_keep_the_reserve() {
        let g = gate();
        g.remember(ip("192.0.2.7"));
        g.set_static(ip("198.51.100.1"), true);
        // Six unknown subnets fill the unreserved six slots.
        let flood: Vec<_> = (0..6)
            .map(|i| g.admit(ip(&format!("10.{i}.0.1"))).unwrap())
            .collect();
        assert_eq!(g.admit(ip("10.9.0.1")).unwrap_err(), GateRefusal::Full);
        let known = g.admit(ip("192.0.2.7")).unwrap();
        assert!(known.known);
        let _static = g.admit(ip("198.51.100.1")).unwrap();
        assert_eq!(g.admit(ip("192.0.2.7")).unwrap_err(), GateRefusal::Full);
        g.set_static(ip("198.51.100.1"), false);
        assert!(!g.is_known(ip("198.51.100.1")));
        drop(flood);
        drop(known);
        assert_eq!(g.pending(), 1);
    }

    #[test]
    fn timeouts_shorten_once_half_the_slots_are_taken() {
        let g = gate();
        let held: Vec<_> = (0..4)
            .map(|i| g.admit(ip(&format!("10.{i}.0.1"))).unwrap())
            .collect();
        assert!(
            held.iter()
                .all(|p| p.timeout == GateConfig::default().timeout)
        );
        let next = g.admit(ip("10.7.0.1")).unwrap();
        assert_eq!(next.timeout, GateConfig::default().short_timeout);
    }

    #[test]
    fn ipv6_counts_by_64_and_48() {
        assert_eq!(
            host_key(ip("2001:db8:1:2::5")),
            host_key(ip("2001:db8:1:2:ffff::1"))
        );
        assert_eq!(
            subnet_key(ip("2001:db8:1:2::5")),
            subnet_key(ip("2001:db8:1:9::1"))
        );
        assert_ne!(
            subnet_key(ip("2001:db8:1::1")),
            subnet_key(ip("2001:db8:2::1"))
        );
        assert_eq!(subnet_key(ip("::ffff:10.1.2.3")), ip("10.1.2.0"));
    }

    #[test]
    fn the_known_list_is_bounded() {
        let g = HandshakeGate::new(GateConfig {
            known_cap: 3,
            ..GateConfig::default()
        });
        for i in 0..5 {
            g.remember(ip(&format!("10.0.0.{i}")));
            std::thread::sleep(Duration::from_millis(2));
        }
        assert!(!g.is_known(ip("10.0.0.0")));
        assert!(!g.is_known(ip("10.0.0.1")));
        assert!(g.is_known(ip("10.0.0.4")));
        assert_eq!(g.known.lock().seen.len(), 3);
    }
}
