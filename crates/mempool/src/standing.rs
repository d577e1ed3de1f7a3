//! Standing: what the node knows of an origin when it schedules the origin's next unit of
//! admission work, and the one table that maps it to a lane ([`Standing::lane`]).
//!
//! The lanes themselves (the untrusted lane's low-priority runtime, raised critical
//! sections, giving way) are `moat_sched`'s: this module only decides which lane an
//! origin's work is put in. Peers' standings come from their accounts in
//! [`crate::Budgets`] ([`crate::Budgets::lane`]); an RPC connection's from its
//! [`Record`]. KZG batches are per lane ([`crate::Pool`] keeps one batcher per lane).

use moat_sched::Lane;
use std::sync::atomic::{AtomicU64, Ordering};

/// What the node knows of an origin when it schedules the origin's next unit of work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standing {
    /// A local RPC connection whose record is not poor.
    LocalRpc,
    /// A local RPC connection whose submissions are mostly refused ([`is_poor`]).
    LocalRpcPoor,
    /// A peer with admitted transactions ([`PROVEN_ADMITTED`]), a record that is not poor,
    /// within its budget.
    PeerProven,
    /// A peer with (almost) no admitted transactions yet: new, or silent so far.
    PeerNew,
    /// A peer in debt, or spending while all peers are over their budget.
    PeerOverBudget,
    /// A peer whose transactions are mostly refused, or judged useless.
    PeerPoor,
    /// The node's own work (reorged-out and journaled transactions).
    Node,
}

impl Standing {
    /// The rule table: standing → lane.
    pub fn lane(self) -> Lane {
        match self {
            // The operator's own clients: trusted while they behave.
            Standing::LocalRpc => Lane::Trusted,
            // An RPC client flooding invalid or underpriced txs gets what is left over.
            Standing::LocalRpcPoor => Lane::Untrusted,
            // A peer whose transactions have been admitted relays real traffic.
            Standing::PeerProven => Lane::Trusted,
            // Anyone can open a connection with a fresh key: it earns its place first.
            Standing::PeerNew => Lane::Untrusted,
            // Past its budget a peer is being slowed; what it still gets, it gets last.
            Standing::PeerOverBudget => Lane::Untrusted,
            // Spending CPU that buys nothing.
            Standing::PeerPoor => Lane::Untrusted,
            // Head changes and restarts: the node's own bookkeeping.
            Standing::Node => Lane::Trusted,
        }
    }

    /// A peer's standing from its record (admitted and rejected transactions, history of
    /// its subnet included) and its budget's state.
    pub fn of_peer(admitted: u64, rejected: u64, over_budget: bool, useless: bool) -> Self {
        if useless || is_poor(admitted, rejected) {
            Standing::PeerPoor
        } else if over_budget {
            Standing::PeerOverBudget
        } else if admitted < PROVEN_ADMITTED {
            Standing::PeerNew
        } else {
            Standing::PeerProven
        }
    }

    /// A local RPC connection's standing from its record.
    pub fn of_rpc(admitted: u64, rejected: u64) -> Self {
        if is_poor(admitted, rejected) {
            Standing::LocalRpcPoor
        } else {
            Standing::LocalRpc
        }
    }
}

/// Admitted transactions that make a peer proven.
pub const PROVEN_ADMITTED: u64 = 8;
/// Rejections forgiven whatever the record (an honest client's nonce races, replacements
/// too cheap, txs a relay sent twice).
const POOR_SLACK: u64 = 64;
/// A record is poor past this many rejections per admitted transaction.
const POOR_RATIO: u64 = 4;

/// Whether a record of submissions is mostly refusals: more than [`POOR_RATIO`] per
/// admitted transaction, past [`POOR_SLACK`].
pub fn is_poor(admitted: u64, rejected: u64) -> bool {
    rejected > POOR_SLACK.saturating_add(admitted.saturating_mul(POOR_RATIO))
}

/// What one origin's submissions bought so far (an RPC connection's: peers keep theirs
/// in [`crate::Budgets`]).
#[derive(Debug, Default)]
pub struct Record {
    admitted: AtomicU64,
    rejected: AtomicU64,
}

impl Record {
    /// Counts one submission's outcome: admitted or rejected.
    pub fn note(&self, admitted: bool) {
        let counter = if admitted {
            &self.admitted
        } else {
            &self.rejected
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// (admitted, rejected).
    pub fn counts(&self) -> (u64, u64) {
        (
            self.admitted.load(Ordering::Relaxed),
            self.rejected.load(Ordering::Relaxed),
        )
    }

    /// The lane of an RPC connection with this record.
    pub fn rpc_lane(&self) -> Lane {
        let (admitted, rejected) = self.counts();
        Standing::of_rpc(admitted, rejected).lane()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use moat_sched::{current, run};
    use std::sync::Arc;

    #[test]
    fn the_table_puts_only_behaving_origins_in_the_trusted_lane() {
        let trusted = [Standing::LocalRpc, Standing::PeerProven, Standing::Node];
        let untrusted = [
            Standing::LocalRpcPoor,
            Standing::PeerNew,
            Standing::PeerOverBudget,
            Standing::PeerPoor,
        ];
        for s in trusted {
            assert_eq!(s.lane(), Lane::Trusted, "{s:?}");
        }
        for s in untrusted {
            assert_eq!(s.lane(), Lane::Untrusted, "{s:?}");
        }
        // Peers: a record of admitted txs is what earns trust; a poor record or being
        // over budget loses it, whatever was admitted before.
        assert_eq!(Standing::of_peer(0, 0, false, false), Standing::PeerNew);
        assert_eq!(Standing::of_peer(7, 0, false, false), Standing::PeerNew);
        assert_eq!(Standing::of_peer(8, 0, false, false), Standing::PeerProven);
        assert_eq!(
            Standing::of_peer(100, 400, false, false),
            Standing::PeerProven
        );
        assert_eq!(
            Standing::of_peer(100, 465, false, false),
            Standing::PeerPoor
        );
        assert_eq!(
            Standing::of_peer(100, 0, true, false),
            Standing::PeerOverBudget
        );
        assert_eq!(Standing::of_peer(100, 0, false, true), Standing::PeerPoor);
        assert_eq!(Standing::of_peer(0, 65, false, false), Standing::PeerPoor);
        // RPC connections start trusted and lose it by a poor record.
        assert_eq!(Standing::of_rpc(0, 0), Standing::LocalRpc);
        assert_eq!(Standing::of_rpc(0, 64), Standing::LocalRpc);
        assert_eq!(Standing::of_rpc(0, 65), Standing::LocalRpcPoor);
        assert_eq!(Standing::of_rpc(1_000, 3_000), Standing::LocalRpc);
        let r = Record::default();
        for _ in 0..70 {
            r.note(false);
        }
        assert_eq!(r.counts(), (0, 70));
        assert_eq!(r.rpc_lane(), Lane::Untrusted);
    }

    /// `moat_sched`'s `trusted_unit_waits_behind` test with real admissions: 4 attacking
    /// peers' fresh unfunded transfers (an ECDSA each) flood the pool while an honest
    /// funded transfer is admitted; how many flood admissions ran on the node's runtime thread between
    /// its arrival and its admission.
    fn trusted_admission_waits_behind(untrusted: Lane) -> u64 {
        use crate::bench_support::{funded_state, roomy_config, signed_transfers};
        use crate::{Pool, TxInput, TxOrigin};
        let flood = signed_transfers(200, 0xf100d, 2);
        let honest = signed_transfers(1, 0x40e57, 2);
        let pool = Pool::new(roomy_config(), funded_state(&[&honest]));
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        rt.block_on(async {
            let on_trusted = Arc::new(AtomicU64::new(0));
            let mut attackers = Vec::new();
            for (a, part) in flood.chunks(50).enumerate() {
                let (pool, part, on_trusted) = (pool.clone(), part.to_vec(), on_trusted.clone());
                let origin = TxOrigin::Peer(alloy_primitives::B512::repeat_byte(a as u8 + 1));
                attackers.push(tokio::spawn(async move {
                    for tx in part {
                        let (pool, on_trusted) = (pool.clone(), on_trusted.clone());
                        let unit = async move {
                            let r = pool.add_transaction(TxInput::Raw(tx.raw), origin).await;
                            if current() == Lane::Trusted {
                                on_trusted.fetch_add(1, Ordering::Relaxed);
                            }
                            r.is_err()
                        };
                        assert_eq!(run(untrusted, unit).await, Some(true), "unfunded");
                        tokio::task::yield_now().await;
                    }
                }));
            }
            tokio::task::yield_now().await;
            let before = on_trusted.load(Ordering::Relaxed);
            let tx = honest[0].raw.clone();
            let p = pool.clone();
            let admitted = tokio::spawn(run(Lane::Trusted, async move {
                p.add_transaction(TxInput::Raw(tx), TxOrigin::Local).await
            }));
            let admitted = admitted.await.unwrap().unwrap();
            let waited = on_trusted.load(Ordering::Relaxed) - before;
            assert!(admitted.is_ok(), "{admitted:?}");
            for a in attackers {
                a.await.unwrap();
            }
            waited
        })
    }

    #[test]
    fn an_untrusted_flood_does_not_delay_a_trusted_admission() {
        assert_eq!(trusted_admission_waits_behind(Lane::Untrusted), 0);
        assert!(trusted_admission_waits_behind(Lane::Trusted) >= 4);
    }
}
