//! The open-file limit, and the connection caps derived from it.
//!
//! systemd starts services with a soft limit of 1024 descriptors (and a much higher
//! hard limit); a node that keeps it runs out after ~1000 sockets. At start the soft
//! limit is raised to the hard one, as geth and reth do, and every server's connection
//! cap is cut from what is left after a reserve, so that no flood of connections can use
//! up the descriptors the store, the journal and the other servers need:
//!
//! ```text
//!  limit ─▶ reserve (store, journal, logs, metrics, discovery: 128, or a quarter)
//!        ─▶ p2p (max peers + handshakes + dials; --maxpeers is cut to fit half)
//!        ─▶ engine port (1/16, 16..512)
//!        ─▶ the rest: HTTP + WebSocket sockets (a quarter per client address),
//!           of which WebSockets at most half (a quarter of that per address)
//! ```

use moat_p2p::GateConfig;
use moat_rpc::ConnLimits;

/// The descriptor limits before and after [`raise`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FdLimit {
    pub soft_before: u64,
    pub soft: u64,
    pub hard: u64,
}

/// Highest soft limit asked for when the hard limit is unlimited.
const UNLIMITED_TARGET: u64 = 1 << 20;

/// Raises the soft limit on open files to the hard limit (at most 2^20, and at most
/// what the kernel allows a process); returns the limits. Calling it again is harmless.
// `rlim_t` is u64 here and narrower elsewhere: the casts are for the other platforms.
#[allow(clippy::unnecessary_cast)]
pub(crate) fn raise() -> std::io::Result<FdLimit> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let before = lim.rlim_cur as u64;
    let mut target = if lim.rlim_max == libc::RLIM_INFINITY {
        UNLIMITED_TARGET
    } else {
        lim.rlim_max as u64
    };
    // The kernel refuses more than fs.nr_open per process.
    if let Some(nr_open) = std::fs::read_to_string("/proc/sys/fs/nr_open")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
    {
        target = target.min(nr_open);
    }
    #[cfg(target_os = "macos")]
    {
        // macOS refuses more than OPEN_MAX for the soft limit.
        target = target.min(10240);
    }
    if target > before {
        let raised = libc::rlimit {
            rlim_cur: target as libc::rlim_t,
            rlim_max: lim.rlim_max,
        };
        // SAFETY: setrlimit reads the struct we own.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        lim.rlim_cur = raised.rlim_cur;
    }
    Ok(FdLimit {
        soft_before: before,
        soft: lim.rlim_cur as u64,
        hard: if lim.rlim_max == libc::RLIM_INFINITY {
            u64::MAX
        } else {
            lim.rlim_max as u64
        },
    })
}

/// The connection caps of each server for a descriptor limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Budget {
    /// HTTP and WebSocket sockets of the public ports together.
    pub rpc: ConnLimits,
    /// Open WebSockets.
    pub ws: ConnLimits,
    pub engine: ConnLimits,
    /// Most peers (the `--maxpeers` asked for, cut to fit).
    pub max_peers: usize,
    /// Inbound handshake slots.
    pub handshakes: GateConfig,
}

impl Budget {
    /// The caps for `limit` descriptors and `max_peers` peers asked for.
    pub(crate) fn new(limit: u64, max_peers: usize) -> Self {
        let limit = usize::try_from(limit).unwrap_or(usize::MAX).min(1 << 24);
        let reserve = (limit / 4).min(128);
        let handshakes = if max_peers == 0 {
            0
        } else {
            (limit / 32).clamp(8, 64)
        };
        let p2p_room = (limit / 2).saturating_sub(handshakes + 16);
        let max_peers_fit = max_peers.min(p2p_room * 3 / 4);
        // Peers, handshakes, and dials (a third of the peers, plus discovery's).
        let p2p = if max_peers == 0 {
            0
        } else {
            max_peers_fit + handshakes + max_peers_fit / 3 + 16
        };
        let engine = (limit / 16).clamp(16, 512);
        let rest = limit.saturating_sub(reserve + p2p + engine).max(32);
        let ws = (rest / 2).max(16);
        Self {
            rpc: ConnLimits {
                total: rest,
                per_ip: (rest / 4).max(16),
            },
            ws: ConnLimits {
                total: ws,
                per_ip: (ws / 4).max(8),
            },
            engine: ConnLimits {
                total: engine,
                per_ip: engine,
            },
            max_peers: max_peers_fit,
            handshakes: GateConfig::with_total(handshakes.max(4)),
        }
    }

    /// Raises the limit (logging what it did, once) and gives the caps for it.
    pub(crate) fn at_start(max_peers: usize) -> Self {
        static LOGGED: std::sync::Once = std::sync::Once::new();
        let limit = match raise() {
            Ok(l) => {
                LOGGED.call_once(|| {
                    if l.soft > l.soft_before {
                        tracing::info!(from = l.soft_before, to = l.soft, "raised the open-file limit");
                    }
                    if l.soft < 4096 {
                        tracing::warn!(limit = l.soft, "low open-file limit (raise the hard limit, e.g. LimitNOFILE= in the systemd unit): connection caps are cut to fit");
                    }
                });
                l.soft
            }
            Err(e) => {
                LOGGED.call_once(|| {
                    tracing::warn!(error = %e, "cannot read or raise the open-file limit; assuming 1024")
                });
                1024
            }
        };
        let budget = Self::new(limit, max_peers);
        if budget.max_peers < max_peers {
            tracing::warn!(
                asked = max_peers,
                kept = budget.max_peers,
                limit,
                "--maxpeers cut to fit the open-file limit"
            );
        }
        budget
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_soft_limit_goes_up_to_the_hard_one() {
        let l = raise().expect("getrlimit works here");
        assert!(l.soft >= l.soft_before);
        assert!(l.soft <= l.hard);
        assert_eq!(
            raise().unwrap().soft,
            l.soft,
            "a second call changes nothing"
        );
    }

    #[test]
    fn budgets_fit_the_limit() {
        for (limit, peers) in [
            (256, 0),
            (1024, 50),
            (1024, 1000),
            (20_000, 50),
            (1 << 20, 50),
        ] {
            let b = Budget::new(limit, peers);
            let used = 128.min(limit as usize / 4)
                + b.rpc.total
                + b.engine.total
                + if peers == 0 {
                    0
                } else {
                    b.max_peers + b.handshakes.total + b.max_peers / 3 + 16
                };
            assert!(used <= limit as usize, "{limit} {peers}: {b:?}");
            assert!(b.ws.total <= b.rpc.total);
            assert!(b.rpc.per_ip <= b.rpc.total);
        }
        let b = Budget::new(20_000, 50);
        assert_eq!(b.max_peers, 50);
        assert!(
            b.rpc.per_ip > 1100,
            "1100 idle sockets from one address fit: {b:?}"
        );
        assert!(b.ws.per_ip > 150, "{b:?}");
        assert!(Budget::new(1024, 1000).max_peers < 1000);
    }
}
