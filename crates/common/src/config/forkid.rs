//! EIP-2124 fork identifiers, with EIP-6122's time-based forks.
//!
//! A fork id is a CRC-32 over the genesis hash followed by every fork point the chain has
//! passed (each as 8 big-endian bytes), plus the next fork point it expects. Block forks
//! come first, then time forks; two nodes on the same chain and schedule agree on it, and
//! the "next" field lets a node tell a peer that is merely behind from one that is on a
//! different schedule.

use alloy_primitives::B256;

/// Timestamps of time forks are far above any block number a fork has been scheduled at;
/// a remote `next` above this value is read as a timestamp (this is mainnet's genesis
/// time, the threshold EIP-6122 clients share).
const TIMESTAMP_THRESHOLD: u64 = 1_438_269_973;

/// What a node says about its chain in the eth `Status` handshake.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ForkId {
    /// CRC-32 of the genesis hash and the fork points passed, big-endian.
    pub hash: [u8; 4],
    /// The next fork point (block or timestamp), or 0 if none is scheduled.
    pub next: u64,
}

/// Why a remote fork id is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ForkIdError {
    /// The remote has passed a fork point we have as well but does not know about a
    /// fork we already passed: it needs a software update.
    #[error("remote fork id is stale: remote needs a software update")]
    RemoteStale,
    /// The remote is on another chain or schedule, or knows of a fork we have passed
    /// without activating it.
    #[error("remote fork id is incompatible with ours, or we are stale")]
    LocalIncompatibleOrStale,
}

/// Extends a CRC-32 with one fork point.
fn extend(crc: u32, fork: u64) -> u32 {
    let mut hasher = crc32fast::Hasher::new_with_initial(crc);
    hasher.update(&fork.to_be_bytes());
    hasher.finalize()
}

fn genesis_crc(genesis_hash: B256) -> u32 {
    crc32fast::hash(genesis_hash.as_slice())
}

/// The fork id at a head, given the chain's fork points after genesis (sorted, unique).
pub(super) fn compute(
    genesis_hash: B256,
    blocks: &[u64],
    times: &[u64],
    head_number: u64,
    head_time: u64,
) -> ForkId {
    let mut crc = genesis_crc(genesis_hash);
    let points = blocks
        .iter()
        .map(|&b| (b, head_number))
        .chain(times.iter().map(|&t| (t, head_time)));
    for (fork, head) in points {
        if fork > head {
            return ForkId {
                hash: crc.to_be_bytes(),
                next: fork,
            };
        }
        crc = extend(crc, fork);
    }
    ForkId {
        hash: crc.to_be_bytes(),
        next: 0,
    }
}

/// Checks the fork ids of remote peers against our chain (EIP-2124's validation rules).
///
/// Build it once per chain with [`super::ChainConfig::fork_filter`]; `validate` takes
/// our current head so the filter never goes stale as the chain advances.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForkFilter {
    /// Block fork points, then time fork points.
    forks: Vec<u64>,
    /// How many of `forks` are block numbers.
    block_forks: usize,
    /// `sums[i]` is the fork hash after passing the first `i` forks; `sums[0]` is genesis.
    sums: Vec<[u8; 4]>,
}

impl ForkFilter {
    pub(super) fn new(genesis_hash: B256, blocks: Vec<u64>, times: Vec<u64>) -> ForkFilter {
        let block_forks = blocks.len();
        let mut forks = blocks;
        forks.extend(times);
        let mut crc = genesis_crc(genesis_hash);
        let mut sums = Vec::with_capacity(forks.len() + 1);
        sums.push(crc.to_be_bytes());
        for &fork in &forks {
            crc = extend(crc, fork);
            sums.push(crc.to_be_bytes());
        }
        ForkFilter {
            forks,
            block_forks,
            sums,
        }
    }

    /// Decides whether a peer announcing `remote` can be on our chain, with our head at
    /// `head_number` / `head_timestamp`.
    ///
    /// The rules, with "our state" being the fork hash of the forks we have passed:
    /// 1. Same state: fine, unless the remote announces a next fork we have already
    ///    reached without it (we would have seen it activate).
    /// 2. The remote's state is one we passed through: fine if its `next` is the fork we
    ///    took out of that state (it is merely behind), stale otherwise.
    /// 3. The remote's state is one still ahead of us on our schedule: we are behind; fine.
    /// 4. Anything else is another chain.
    pub fn validate(
        &self,
        remote: ForkId,
        head_number: u64,
        head_timestamp: u64,
    ) -> Result<(), ForkIdError> {
        // The head to compare fork `i` with; past the last fork, the kind of the last one.
        let head_for = |i: usize| {
            let is_block = if i < self.forks.len() {
                i < self.block_forks
            } else {
                self.block_forks == self.forks.len()
            };
            if is_block {
                head_number
            } else {
                head_timestamp
            }
        };
        // How many forks we have passed. Forks are passed in order, so stop at the first
        // one still ahead.
        let passed = self
            .forks
            .iter()
            .enumerate()
            .position(|(i, &fork)| head_for(i) < fork)
            .unwrap_or(self.forks.len());

        if self.sums[passed] == remote.hash {
            let head = head_for(passed);
            let reached = remote.next > 0
                && (head >= remote.next
                    || (remote.next > TIMESTAMP_THRESHOLD && head_timestamp >= remote.next));
            return if reached {
                Err(ForkIdError::LocalIncompatibleOrStale)
            } else {
                Ok(())
            };
        }
        if let Some(j) = self.sums[..passed].iter().position(|s| *s == remote.hash) {
            return if self.forks[j] == remote.next {
                Ok(())
            } else {
                Err(ForkIdError::RemoteStale)
            };
        }
        if self.sums[passed + 1..].contains(&remote.hash) {
            return Ok(());
        }
        Err(ForkIdError::LocalIncompatibleOrStale)
    }
}
