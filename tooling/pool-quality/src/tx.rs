//! A transaction of the stream ([`StreamTx`]: its sender, nonce, fees, bytes, how it is
//! delivered, whether a builder could include it) and the [`Class`] of case it is meant
//! to exercise: valid, gap-filling, replacing, duplicate, or one of the ways a pool must
//! refuse it.

use alloy_primitives::{B256, Bytes, U256};

/// What a stream transaction is meant to exercise.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Class {
    /// A transfer at the sender's next nonce that a pool should take.
    Valid,
    /// A nonce held back and sent last: until it arrives, its sender's later txs wait.
    GapFiller,
    /// The same sender and nonce again with fees raised 0–120 %: it replaces the held tx
    /// only with the required bump.
    Replacement,
    /// A tx of the stream sent again, the same bytes: a pool answers "already known".
    Duplicate,
    /// A tip under the least a remote tx must pay (0).
    Underpriced,
    /// A value above the sender's balance.
    Unaffordable,
    /// Input above the 128 KiB a pooled tx may carry.
    Oversized,
    /// Gas below the intrinsic 21,000.
    LowGas,
    /// Signed for another chain id (EIP-155).
    WrongChain,
    /// A blob tx behind a nonce gap (its sender's held nonce comes last): every pool
    /// refuses it (blob txs must be contiguous), so it never counts for the ideal.
    BlobGap,
    /// A blob tx with a max fee per blob gas of 0, under the least blob base fee (1 wei).
    ZeroBlobFee,
    /// A blob tx whose sidecar carries a blob that does not match its commitment.
    BadBlob,
    /// A plain tx at a blob sender's next nonce: a pool holds one kind per sender, so it
    /// is refused while the sender has blob txs pooled.
    PlainFromBlobSender,
}

impl Class {
    /// Every class, in declaration order.
    pub const ALL: [Class; 13] = [
        Class::Valid,
        Class::GapFiller,
        Class::Replacement,
        Class::Duplicate,
        Class::Underpriced,
        Class::Unaffordable,
        Class::Oversized,
        Class::LowGas,
        Class::WrongChain,
        Class::BlobGap,
        Class::ZeroBlobFee,
        Class::BadBlob,
        Class::PlainFromBlobSender,
    ];

    /// Whether a node may count the class against the peer that relays it as a fault of
    /// the tx's bytes (moat: 5 reputation points each, 20 drop the peer; a sidecar that
    /// fails its proofs drops it at once): the tool sends these over RPC even from remote
    /// senders, as no honest peer relays them.
    pub fn peer_fault(self) -> bool {
        matches!(
            self,
            Class::Oversized | Class::LowGas | Class::WrongChain | Class::BadBlob
        )
    }

    /// Whether txs of the class have a hash no other stream tx has: a duplicate is its
    /// original again, and a bad blob's tx is the valid one (the sidecar is not hashed).
    pub fn own_hash(self) -> bool {
        !matches!(self, Class::Duplicate | Class::BadBlob)
    }

    /// The class's label in the report (`valid`, `gap-filler`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Class::Valid => "valid",
            Class::GapFiller => "gap-filler",
            Class::Replacement => "replacement",
            Class::Duplicate => "duplicate",
            Class::Underpriced => "underpriced",
            Class::Unaffordable => "unaffordable",
            Class::Oversized => "oversized",
            Class::LowGas => "low-gas",
            Class::WrongChain => "wrong-chain",
            Class::BlobGap => "blob-gap",
            Class::ZeroBlobFee => "zero-blob-fee",
            Class::BadBlob => "bad-blob",
            Class::PlainFromBlobSender => "plain-after-blob",
        }
    }
}

/// One transaction of the stream.
#[derive(Debug, Clone)]
pub struct StreamTx {
    /// The case it is meant to exercise.
    pub class: Class,
    /// Index of its sender among the stream's funded senders.
    pub sender: usize,
    /// Its nonce.
    pub nonce: u64,
    /// Max priority fee per gas (tip), wei.
    pub tip: u128,
    /// Max fee per gas, wei.
    pub max_fee: u128,
    /// Value transferred, wei.
    pub value: U256,
    /// Blobs carried (0: not a blob tx) and the max fee per blob gas.
    pub blobs: u64,
    /// Max fee per blob gas, wei (0 for a plain tx).
    pub blob_fee: u128,
    /// The signed tx as sent (for a blob tx, the network form with its sidecar).
    pub raw: Bytes,
    /// The transaction hash (of the envelope, sidecar excluded).
    pub hash: B256,
    /// Delivered by a peer (else over RPC, as a local tx).
    pub remote: bool,
    /// Valid against the chain (whatever a pool makes of it): a builder could include it.
    pub includable: bool,
}
