//! [`Throttle`]: a log line at most once per period, for warnings an attacker can
//! trigger at will (refused connections, timeouts): the ones held back are counted into
//! the next. Shared by the p2p and RPC servers.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A warning logged at most once per period; the ones held back are counted into the
/// next.
#[derive(Debug)]
pub struct Throttle {
    period: Duration,
    /// When the last one was let through, and how many were held back since.
    state: Mutex<(Option<Instant>, u64)>,
}

impl Throttle {
    /// A throttle letting one warning through per `period`; the first goes through.
    pub const fn new(period: Duration) -> Self {
        Self {
            period,
            state: Mutex::new((None, 0)),
        }
    }

    /// `Some(how many were held back since the last one)` when this one may be logged.
    pub fn allow(&self) -> Option<u64> {
        self.allow_at(Instant::now())
    }

    /// [`Self::allow`] at `now`.
    pub fn allow_at(&self, now: Instant) -> Option<u64> {
        // The state is two numbers always left whole: a panic elsewhere cannot corrupt it.
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        match s.0 {
            Some(last) if now.saturating_duration_since(last) < self.period => {
                s.1 += 1;
                None
            }
            _ => {
                s.0 = Some(now);
                Some(std::mem::take(&mut s.1))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn throttle_counts_what_it_holds_back() {
        let t = Throttle::new(Duration::from_secs(3600));
        let start = Instant::now();
        assert_eq!(t.allow_at(start), Some(0));
        assert_eq!(t.allow_at(start), None);
        assert_eq!(t.allow_at(start + Duration::from_secs(3599)), None);
        assert_eq!(t.allow_at(start + Duration::from_secs(3600)), Some(2));
        assert_eq!(t.allow_at(start + Duration::from_secs(3601)), None);
    }
}
