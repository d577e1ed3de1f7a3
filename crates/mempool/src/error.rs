//! What admission returns: where a transaction went, or why it was turned away.

use alloy_primitives::{B256, U256};
use moat_common::transaction::{BlobsBundleError, DecodeError, StatelessError};
use moat_crypto::secp::SignatureError;

/// The subpool a transaction sits in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SubPool {
    /// Executable in the next block: gapless from the state nonce, affordable, fee cap ≥
    /// base fee (and blob fee cap ≥ blob base fee for blob transactions).
    Pending = 0,
    /// Gapless and affordable, but the fee cap is below the current base fee.
    BaseFee = 1,
    /// Behind a nonce gap, or not affordable with the sender's balance.
    Queued = 2,
    /// Blob transactions that are not executable yet, whatever the reason.
    Blob = 3,
}

impl SubPool {
    /// Every subpool, in discriminant order.
    pub const ALL: [SubPool; 4] = [
        SubPool::Pending,
        SubPool::BaseFee,
        SubPool::Queued,
        SubPool::Blob,
    ];

    /// The subpool's label in metrics and logs (`pending`, `basefee`, `queued`, `blob`).
    pub fn name(self) -> &'static str {
        match self {
            SubPool::Pending => "pending",
            SubPool::BaseFee => "basefee",
            SubPool::Queued => "queued",
            SubPool::Blob => "blob",
        }
    }
}

/// A transaction the pool took.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Added {
    /// Hash of the transaction taken.
    pub hash: B256,
    /// The subpool it went to.
    pub subpool: SubPool,
    /// The transaction it replaced (same sender and nonce), if any.
    pub replaced: Option<B256>,
    /// Held in the gapped reorder buffer (a blob tx whose nonce is ahead of its sender's
    /// next, [`crate::GappedLimits`]): not pooled or announced until the gap fills.
    pub gapped: bool,
}

/// Why the pool turned a transaction away. `Display` uses geth's wording where geth has
/// one: wallets and libraries match on those strings.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Rejection {
    /// Too many admissions in progress in all: refused before any work (pre-flight).
    #[error("txpool is busy")]
    Busy,
    /// Too many admissions in progress from this origin: refused before any work.
    #[error("too many concurrent submissions from this origin")]
    OriginBusy,
    /// Wire bytes over the size cap (larger for blob txs with their sidecars).
    #[error("oversized data: {size} bytes, limit {max}")]
    Oversized {
        /// Wire size of the transaction, bytes.
        size: usize,
        /// The cap it is over, bytes.
        max: usize,
    },
    /// The bytes do not decode as a transaction envelope.
    #[error("invalid transaction: {0}")]
    Decode(DecodeError),
    /// The hash failed for a reason its bytes decide, within the failure TTL.
    #[error("transaction recently failed validation")]
    RecentlyFailed,
    /// Pooled already, or being admitted right now.
    #[error("already known")]
    AlreadyKnown,
    /// A blob sidecar that is malformed, does not match its tx, or fails KZG.
    #[error("invalid blob sidecar: {0}")]
    Sidecar(BlobsBundleError),
    /// Against the stateless rules of the next block's fork (chain id, gas, fees, size).
    #[error("{0}")]
    Stateless(StatelessError),
    /// The signature does not recover a sender.
    #[error("invalid sender: {0}")]
    InvalidSender(SignatureError),
    /// The nonce is below the sender's state nonce.
    #[error("nonce too low: next nonce {state}, tx nonce {tx}")]
    NonceTooLow {
        /// The sender's nonce in the head state.
        state: u64,
        /// The transaction's nonce.
        tx: u64,
    },
    /// The sender's balance does not cover this tx's most cost.
    #[error("insufficient funds for gas * price + value: balance {balance}, tx cost {cost}, overshot {}", cost - balance)]
    InsufficientFunds {
        /// The sender's balance in the head state, wei.
        balance: U256,
        /// The transaction's most cost (gas × fee cap + blob gas × blob fee cap + value), wei.
        cost: U256,
    },
    /// The sender's balance does not cover its pooled txs and this one together.
    #[error("transaction would cause overdraft: balance {balance}, pooled and new cost {cost}")]
    Overdraft {
        /// The sender's balance in the head state, wei.
        balance: U256,
        /// The most cost of its pooled txs (less any this one replaces) and this one, wei.
        cost: U256,
    },
    /// The sender has code that is not an EIP-7702 delegation.
    #[error("sender not an eoa")]
    SenderHasCode,
    /// The sender holds as many pooled txs as it may.
    #[error("account limit exceeded: {slots} transactions pooled for this sender")]
    AccountLimit {
        /// The sender's pooled txs that count against the limit it hit (queued, or
        /// executable).
        slots: usize,
    },
    /// A blob tx whose nonce leaves a gap after the sender's pooled and state nonces.
    #[error(
        "nonce too high: blob transactions must not leave a gap (next nonce {expected}, tx nonce {found})"
    )]
    BlobNonceGap {
        /// The nonce that would leave no gap.
        expected: u64,
        /// The transaction's nonce.
        found: u64,
    },
    /// A blob tx with a blob fee cap of zero, which no block can include.
    #[error("max fee per blob gas below the minimum of 1 wei")]
    BlobFeeCapTooLow,
    /// Same sender and nonce as a pooled tx, without the required fee bump.
    #[error("replacement transaction underpriced")]
    ReplacementUnderpriced,
    /// Below the least tip, or too cheap to evict anything from a full pool.
    #[error("transaction underpriced")]
    Underpriced,
    /// The sender has txs in the other pool (blob vs non-blob) — geth's reservation.
    #[error("address already reserved")]
    AlreadyReserved,
    /// A delegated sender (or pooled authority) already has its one pooled tx.
    #[error("in-flight transaction limit reached for delegated accounts")]
    InflightLimit,
    /// An authorization's authority already has pooled txs of its own.
    #[error("authority already reserved")]
    AuthorityReserved,
    /// An EIP-7702 tx with more authorizations than the pool recovers.
    #[error("too many authorizations: {count}, limit {max}")]
    TooManyAuthorizations {
        /// Authorizations in the transaction.
        count: usize,
        /// The most the pool recovers ([`crate::PoolConfig::max_authorizations`]).
        max: usize,
    },
    /// A blob tx before the fork that allows them.
    #[error("blob transactions are not accepted before Cancun")]
    BlobsNotActive,
    /// KZG verification did not answer (its worker went away, e.g. at shutdown).
    #[error("transaction verification was aborted")]
    Aborted,
    /// A local tx the journal could not make durable (the disk is full, or a write or
    /// sync failed): it is not admitted, since the answer promises it survives a crash.
    #[error("{}", journal_message(.0))]
    JournalFailed(JournalFailure),
}

/// Why the journal could not keep a tx: the kind of the I/O error and its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JournalFailure {
    /// The I/O error's kind (e.g. `StorageFull` when the disk is full).
    pub kind: std::io::ErrorKind,
    /// The I/O error's text.
    pub message: String,
}

impl From<&std::io::Error> for JournalFailure {
    fn from(e: &std::io::Error) -> Self {
        JournalFailure {
            kind: e.kind(),
            message: e.to_string(),
        }
    }
}

/// geth's words for a full disk (what its own writes fail with); the error as it is
/// otherwise.
fn journal_message(f: &JournalFailure) -> String {
    if f.kind == std::io::ErrorKind::StorageFull {
        "no space left on device".to_string()
    } else {
        format!("transaction not journaled: {}", f.message)
    }
}

impl Rejection {
    /// Number of distinct [`Rejection::reason`] values (metrics arrays are sized by it).
    pub const REASONS: usize = 25;

    /// Stable metric label.
    pub fn reason(&self) -> &'static str {
        self.reason_and_index().0
    }

    pub(crate) fn index(&self) -> usize {
        self.reason_and_index().1
    }

    fn reason_and_index(&self) -> (&'static str, usize) {
        match self {
            Rejection::Busy => ("busy", 0),
            Rejection::OriginBusy => ("origin_busy", 1),
            Rejection::Oversized { .. } => ("oversized", 2),
            Rejection::Decode(_) => ("decode", 3),
            Rejection::RecentlyFailed => ("recently_failed", 4),
            Rejection::AlreadyKnown => ("already_known", 5),
            Rejection::Sidecar(_) => ("sidecar", 6),
            Rejection::Stateless(_) => ("stateless", 7),
            Rejection::InvalidSender(_) => ("invalid_sender", 8),
            Rejection::NonceTooLow { .. } => ("nonce_too_low", 9),
            Rejection::InsufficientFunds { .. } => ("insufficient_funds", 10),
            Rejection::Overdraft { .. } => ("overdraft", 11),
            Rejection::SenderHasCode => ("sender_has_code", 12),
            Rejection::AccountLimit { .. } => ("account_limit", 13),
            Rejection::ReplacementUnderpriced => ("replacement_underpriced", 14),
            Rejection::Underpriced => ("underpriced", 15),
            Rejection::AlreadyReserved => ("already_reserved", 16),
            Rejection::InflightLimit => ("inflight_limit", 17),
            Rejection::AuthorityReserved => ("authority_reserved", 18),
            Rejection::TooManyAuthorizations { .. } => ("too_many_authorizations", 19),
            Rejection::BlobsNotActive => ("blobs_not_active", 20),
            Rejection::Aborted => ("aborted", 21),
            Rejection::BlobNonceGap { .. } => ("blob_nonce_gap", 22),
            Rejection::BlobFeeCapTooLow => ("blob_fee_cap_too_low", 23),
            Rejection::JournalFailed(_) => ("journal_failed", 24),
        }
    }

    /// Whether the transaction's bytes alone decide this failure, so the same hash will fail
    /// the same way again and may be turned away by the recent-failure set. State-dependent
    /// failures (funds, pool full, underpriced) and anything about a sidecar are not: the
    /// hash does not commit to the sidecar, and an honest peer may hold the good one.
    pub fn is_hash_determined(&self) -> bool {
        self.rule().1
    }

    /// What delivering a transaction rejected this way costs a peer.
    pub fn peer_cost(&self) -> PeerCost {
        self.rule().0
    }

    /// Whether a peer that delivered this committed a protocol fault (disconnect), rather
    /// than sending a transaction that is merely not wanted.
    pub fn is_peer_fault(&self) -> bool {
        self.peer_cost() == PeerCost::Fault
    }

    /// The rule table: each rejection's cost to the peer that delivered it, and whether
    /// the hash decides it (see [`Self::is_hash_determined`]). No wildcard: a new variant
    /// must be placed here.
    fn rule(&self) -> (PeerCost, bool) {
        use PeerCost::{Fault, None, Penalty};
        match self {
            // The node's own load: nothing the peer did.
            Rejection::Busy | Rejection::OriginBusy => (None, false),
            // The protocol allows large messages; a tx no pool takes costs reputation.
            Rejection::Oversized { .. } => (Penalty, false),
            // Bytes that are no transaction break the protocol.
            Rejection::Decode(_) => (Fault, false),
            // A repeat of a failure: its first delivery was judged already.
            Rejection::RecentlyFailed => (None, false),
            // Gossip delivers one tx from many peers; duplicates are normal.
            Rejection::AlreadyKnown => (None, false),
            // A malformed or mismatched sidecar, proofs that fail KZG, or a blob tx
            // without one break the protocol; a sidecar version the next block's fork
            // does not allow is not the peer's doing (forks move under it): none.
            // The hash does not commit to the sidecar.
            Rejection::Sidecar(e) => (if e.is_peer_fault() { Fault } else { None }, false),
            // A tip under our `--txpool.pricelimit`: our price policy, not a fault (geth
            // counts it as underpriced, neither drops nor throttles the peer, and only
            // does not fetch the hash again for a while). The bytes decide it.
            Rejection::Stateless(StatelessError::TipBelowMinimum { .. }) => (None, true),
            // Against the fork's rules: no honest peer relays it.
            Rejection::Stateless(
                StatelessError::ChainId { .. }
                | StatelessError::TypeNotActive { .. }
                | StatelessError::TooLarge { .. }
                | StatelessError::IntrinsicGas { .. }
                | StatelessError::FloorDataGas { .. }
                | StatelessError::InitCodeTooLarge { .. }
                | StatelessError::GasLimitAboveCap { .. }
                | StatelessError::GasLimitAboveBlock { .. }
                | StatelessError::TipAboveFeeCap { .. }
                | StatelessError::NoBlobHashes
                | StatelessError::TooManyBlobs { .. }
                | StatelessError::EmptyAuthorizationList
                | StatelessError::NonceMax,
            ) => (Penalty, true),
            // A signature recovering no sender: no honest peer relays it.
            Rejection::InvalidSender(_) => (Penalty, true),
            // Mined since the peer learned of it: a race, not a fault. The state nonce
            // only grows, so the hash stays stale (a reorg re-admits as `Reorg`).
            Rejection::NonceTooLow { .. } => (None, true),
            // State-dependent: the peer's view of the chain may differ from ours.
            Rejection::InsufficientFunds { .. } | Rejection::Overdraft { .. } => (None, false),
            Rejection::SenderHasCode => (None, false),
            // Pool policy (our limits, our prices): nothing the peer could know.
            Rejection::AccountLimit { .. } => (None, false),
            Rejection::BlobNonceGap { .. } => (None, false),
            // The bytes decide it, but geth relays such txs: no penalty.
            Rejection::BlobFeeCapTooLow => (None, true),
            Rejection::ReplacementUnderpriced | Rejection::Underpriced => (None, false),
            Rejection::AlreadyReserved
            | Rejection::InflightLimit
            | Rejection::AuthorityReserved => (None, false),
            // Our own cap on authorizations, not a protocol rule; the bytes decide it.
            Rejection::TooManyAuthorizations { .. } => (None, true),
            // Blob txs before Cancun: no honest peer relays them.
            Rejection::BlobsNotActive => (Penalty, false),
            // Our shutdown or our disk, not the peer.
            Rejection::Aborted | Rejection::JournalFailed(_) => (None, false),
        }
    }
}

/// What a rejected transaction costs the peer that delivered it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerCost {
    /// A protocol fault: the peer is disconnected.
    Fault,
    /// Reputation: a peer that sends enough of these is dropped.
    Penalty,
    /// Nothing: an honest peer may send it.
    None,
}

/// The result of one admission.
pub type AddResult = Result<Added, Rejection>;

#[cfg(test)]
mod tests {
    use super::*;
    use moat_crypto::kzg::KzgError;

    /// What wallets and client libraries match on: each admission refusal begins with
    /// go-ethereum's own string for it (core/txpool/errors.go, core/error.go).
    #[test]
    fn refusals_begin_with_geths_words() {
        let table: Vec<(Rejection, &str)> = vec![
            (Rejection::AlreadyKnown, "already known"),
            (
                Rejection::ReplacementUnderpriced,
                "replacement transaction underpriced",
            ),
            (Rejection::Underpriced, "transaction underpriced"),
            (Rejection::NonceTooLow { state: 2, tx: 1 }, "nonce too low"),
            (
                Rejection::BlobNonceGap {
                    expected: 1,
                    found: 3,
                },
                "nonce too high",
            ),
            (
                Rejection::InsufficientFunds {
                    balance: U256::from(1),
                    cost: U256::from(2),
                },
                "insufficient funds for gas * price + value",
            ),
            (
                Rejection::Stateless(StatelessError::IntrinsicGas {
                    have: 1,
                    need: 21_000,
                }),
                "intrinsic gas too low",
            ),
            (
                Rejection::Stateless(StatelessError::GasLimitAboveBlock { have: 2, limit: 1 }),
                "exceeds block gas limit",
            ),
            (
                Rejection::Stateless(StatelessError::TipAboveFeeCap { tip: 2, fee_cap: 1 }),
                "max priority fee per gas higher than max fee per gas",
            ),
            (Rejection::SenderHasCode, "sender not an eoa"),
            (Rejection::AlreadyReserved, "address already reserved"),
            (
                Rejection::JournalFailed(JournalFailure {
                    kind: std::io::ErrorKind::StorageFull,
                    message: String::new(),
                }),
                "no space left on device",
            ),
        ];
        for (rejection, geth) in table {
            let ours = rejection.to_string();
            assert!(ours.starts_with(geth), "{ours:?} is not geth's {geth:?}");
        }
    }

    #[test]
    fn what_a_rejection_costs_the_peer_that_delivered_it() {
        let cases = [
            // Bytes that are no transaction, or a broken sidecar: a protocol fault.
            (
                Rejection::Decode(DecodeError::Empty),
                PeerCost::Fault,
                false,
            ),
            (
                Rejection::Sidecar(BlobsBundleError::MissingSidecar),
                PeerCost::Fault,
                false,
            ),
            (
                Rejection::Sidecar(BlobsBundleError::Kzg(KzgError::LengthMismatch("x"))),
                PeerCost::Fault,
                false,
            ),
            // A sidecar version the fork does not allow (yet, or any more): no fault.
            (
                Rejection::Sidecar(BlobsBundleError::VersionNotAllowed {
                    version: moat_common::transaction::SidecarVersion::V1,
                    fork: moat_common::config::Fork::Prague,
                }),
                PeerCost::None,
                false,
            ),
            // Invalid by its own bytes: reputation, and remembered by hash.
            (
                Rejection::InvalidSender(SignatureError::HighS),
                PeerCost::Penalty,
                true,
            ),
            (
                Rejection::Oversized { size: 2, max: 1 },
                PeerCost::Penalty,
                false,
            ),
            (Rejection::BlobsNotActive, PeerCost::Penalty, false),
            // Races and our own policy or load cost nothing.
            (
                Rejection::NonceTooLow { state: 2, tx: 1 },
                PeerCost::None,
                true,
            ),
            (Rejection::AlreadyKnown, PeerCost::None, false),
            (Rejection::Underpriced, PeerCost::None, false),
            (Rejection::ReplacementUnderpriced, PeerCost::None, false),
            // A tip under our price limit: policy, like underpriced (the hash decides it).
            (
                Rejection::Stateless(StatelessError::TipBelowMinimum { tip: 0, min: 1 }),
                PeerCost::None,
                true,
            ),
            // The fork's rules: no honest peer relays such a tx.
            (
                Rejection::Stateless(StatelessError::ChainId { have: 1, want: 2 }),
                PeerCost::Penalty,
                true,
            ),
            (
                Rejection::Stateless(StatelessError::IntrinsicGas { have: 1, need: 2 }),
                PeerCost::Penalty,
                true,
            ),
            (Rejection::Busy, PeerCost::None, false),
            (
                Rejection::InsufficientFunds {
                    balance: U256::ZERO,
                    cost: U256::from(1),
                },
                PeerCost::None,
                false,
            ),
        ];
        for (r, cost, by_hash) in cases {
            assert_eq!(r.peer_cost(), cost, "{r:?}");
            assert_eq!(r.is_peer_fault(), cost == PeerCost::Fault, "{r:?}");
            assert_eq!(r.is_hash_determined(), by_hash, "{r:?}");
        }
    }
}
