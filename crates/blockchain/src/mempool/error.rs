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
    pub const ALL: [SubPool; 4] = [
        SubPool::Pending,
        SubPool::BaseFee,
        SubPool::Queued,
        SubPool::Blob,
    ];

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
    pub hash: B256,
    pub subpool: SubPool,
    /// The transaction it replaced (same sender and nonce), if any.
    pub replaced: Option<B256>,
}

/// Why the pool turned a transaction away. `Display` uses geth's wording where geth has
/// one: wallets and libraries match on those strings.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Rejection {
    #[error("txpool is busy")]
    Busy,
    #[error("too many concurrent submissions from this origin")]
    OriginBusy,
    #[error("oversized data: {size} bytes, limit {max}")]
    Oversized { size: usize, max: usize },
    #[error("invalid transaction: {0}")]
    Decode(DecodeError),
    #[error("transaction recently failed validation")]
    RecentlyFailed,
    #[error("already known")]
    AlreadyKnown,
    #[error("invalid blob sidecar: {0}")]
    Sidecar(BlobsBundleError),
    #[error("{0}")]
    Stateless(StatelessError),
    #[error("invalid sender: {0}")]
    InvalidSender(SignatureError),
    #[error("nonce too low: next nonce {state}, tx nonce {tx}")]
    NonceTooLow { state: u64, tx: u64 },
    #[error("insufficient funds for gas * price + value: balance {balance}, tx cost {cost}, overshot {}", cost - balance)]
    InsufficientFunds { balance: U256, cost: U256 },
    #[error("transaction would cause overdraft: balance {balance}, pooled and new cost {cost}")]
    Overdraft { balance: U256, cost: U256 },
    #[error("sender not an eoa")]
    SenderHasCode,
    #[error("account limit exceeded: {slots} transactions pooled for this sender")]
    AccountLimit { slots: usize },
    #[error(
        "nonce too high: blob transactions must not leave a gap (next nonce {expected}, tx nonce {found})"
    )]
    BlobNonceGap { expected: u64, found: u64 },
    #[error("max fee per blob gas below the minimum of 1 wei")]
    BlobFeeCapTooLow,
    #[error("replacement transaction underpriced")]
    ReplacementUnderpriced,
    #[error("transaction underpriced")]
    Underpriced,
    #[error("address already reserved")]
    AlreadyReserved,
    #[error("in-flight transaction limit reached for delegated accounts")]
    InflightLimit,
    #[error("authority already reserved")]
    AuthorityReserved,
    #[error("too many authorizations: {count}, limit {max}")]
    TooManyAuthorizations { count: usize, max: usize },
    #[error("blob transactions are not accepted before Cancun")]
    BlobsNotActive,
    #[error("transaction verification was aborted")]
    Aborted,
}

impl Rejection {
    /// Number of distinct [`Rejection::reason`] values (metrics arrays are sized by it).
    pub const REASONS: usize = 24;

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
        }
    }

    /// Whether the transaction's bytes alone decide this failure, so the same hash will fail
    /// the same way again and may be turned away by the recent-failure set. State-dependent
    /// failures (funds, pool full, underpriced) and anything about a sidecar are not: the
    /// hash does not commit to the sidecar, and an honest peer may hold the good one.
    pub fn is_hash_determined(&self) -> bool {
        matches!(
            self,
            Rejection::Stateless(_)
                | Rejection::InvalidSender(_)
                | Rejection::NonceTooLow { .. }
                | Rejection::TooManyAuthorizations { .. }
                | Rejection::BlobFeeCapTooLow
        )
    }

    /// Whether a peer that delivered this committed a protocol fault (disconnect), rather
    /// than sending a transaction that is merely not wanted.
    pub fn is_peer_fault(&self) -> bool {
        match self {
            // Oversized is not: the protocol allows large messages; the tx costs
            // reputation instead.
            Rejection::Decode(_) => true,
            Rejection::Sidecar(e) => e.is_peer_fault(),
            _ => false,
        }
    }
}

/// The result of one admission.
pub type AddResult = Result<Added, Rejection>;
