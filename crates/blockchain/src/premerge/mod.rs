//! Proof-of-work era rules: difficulty, block and ommer rewards, ommer validation, the
//! DAO fork and the terminal-total-difficulty transition.
//!
//! ```text
//!  header ─▶ block_fork (TTD: difficulty 0 ⇒ Paris) ─▶ difficulty = calc_difficulty(parent)
//!  body   ─▶ ommers: ≤ 2, unique, not ancestors, parent among the last 7 ancestors
//!  state  ─▶ DAO drain (fork block) ─▶ transactions ─▶ rewards (miner, ommers)
//! ```
//!
//! Ethash seals (mix hash and nonce) are not verified, as reth does not verify them:
//! proof-of-work blocks come from import files and peers of a chain whose history is
//! settled, and the consensus client vouches for everything after the merge.

pub mod dao;

use alloy_primitives::{B256, U256};
use moat_common::block::Header;
use moat_common::config::{ChainConfig, Fork};
use moat_common::constants::EMPTY_OMMERS_HASH;

/// geth's `params.MinimumDifficulty`.
pub const MINIMUM_DIFFICULTY: u64 = 131_072;
/// geth's `params.DifficultyBoundDivisor`.
const BOUND_DIVISOR: u64 = 2048;
/// geth's `params.DurationLimit` (Frontier).
const DURATION_LIMIT: u64 = 13;
/// Blocks per period of the difficulty bomb.
const BOMB_PERIOD: u64 = 100_000;
/// How many generations back an ommer's parent may lie.
pub const MAX_OMMER_DEPTH: u64 = 7;
/// Ommers a block may carry.
pub const MAX_OMMERS: usize = 2;

/// The fork whose rules a block follows. On a chain with a terminal total difficulty
/// the merge is found by the header itself, as geth's beacon engine does: a difficulty of
/// zero is a proof-of-stake block (Paris at least), a non-zero one a proof-of-work block
/// of the latest block-numbered fork (never Paris). Whether the total difficulty allows
/// either is checked by the chain, which knows the parent's total difficulty.
pub fn block_fork(config: &ChainConfig, header: &Header) -> Fork {
    let fork = config.fork_at(header.number, header.timestamp);
    match config.terminal_total_difficulty {
        Some(ttd) if !ttd.is_zero() && fork <= Fork::Paris => {
            if header.difficulty.is_zero() {
                Fork::Paris
            } else {
                Fork::ALL
                    .iter()
                    .rev()
                    .copied()
                    .filter(|&f| f < Fork::Paris)
                    .find(|&f| config.is_active(f, header.number, header.timestamp))
                    .unwrap_or(Fork::Frontier)
            }
        }
        _ => fork,
    }
}

/// Whether a block of this fork is a proof-of-work block.
pub fn is_pow(fork: Fork) -> bool {
    fork < Fork::Paris
}

/// The difficulty bomb's delay (in blocks) of the rules in force, `None` for the rules
/// before Byzantium (Frontier and Homestead count the bomb from the real number).
fn bomb_delay(fork: Fork) -> Option<u64> {
    match fork {
        Fork::Frontier | Fork::Homestead | Fork::Tangerine | Fork::SpuriousDragon => None,
        Fork::Byzantium => Some(3_000_000),
        Fork::Constantinople | Fork::Petersburg | Fork::Istanbul => Some(5_000_000),
        Fork::MuirGlacier | Fork::Berlin => Some(9_000_000),
        Fork::London => Some(9_700_000),
        Fork::ArrowGlacier => Some(10_700_000),
        Fork::GrayGlacier
        | Fork::Paris
        | Fork::Shanghai
        | Fork::Cancun
        | Fork::Prague
        | Fork::Osaka
        | Fork::Bpo1
        | Fork::Bpo2
        | Fork::Bpo3
        | Fork::Bpo4
        | Fork::Bpo5 => Some(11_400_000),
    }
}

/// The difficulty of a proof-of-work block at `timestamp` on `parent` (geth's
/// `ethash.CalcDifficulty`): Frontier's 13-second rule, Homestead's (EIP-2), and from
/// Byzantium on EIP-100's (ommers count) with the bomb delayed by EIP-649, EIP-1234,
/// EIP-2384, EIP-3554, EIP-4345 and EIP-5133.
pub fn calc_difficulty(config: &ChainConfig, timestamp: u64, parent: &Header) -> U256 {
    let number = parent.number + 1;
    // The rules of the block being made, ignoring the merge: a block that needs a
    // difficulty is a proof-of-work block.
    let fork = Fork::ALL
        .iter()
        .rev()
        .copied()
        .filter(|&f| f < Fork::Paris)
        .find(|&f| config.is_active(f, number, timestamp))
        .unwrap_or(Fork::Frontier);
    let elapsed = timestamp.saturating_sub(parent.timestamp);
    let step = parent.difficulty / U256::from(BOUND_DIVISOR);
    let min = U256::from(MINIMUM_DIFFICULTY);
    // The adjustment as a signed multiple of `step`.
    let adjustment: i64 = match fork {
        Fork::Frontier => {
            if elapsed < DURATION_LIMIT {
                1
            } else {
                -1
            }
        }
        Fork::Homestead | Fork::Tangerine | Fork::SpuriousDragon => 1i64
            .saturating_sub((elapsed / 10).min(i64::MAX as u64) as i64)
            .max(-99),
        _ => {
            let base: i64 = if parent.ommers_hash == EMPTY_OMMERS_HASH {
                1
            } else {
                2
            };
            base.saturating_sub((elapsed / 9).min(i64::MAX as u64) as i64)
                .max(-99)
        }
    };
    let delta = step.saturating_mul(U256::from(adjustment.unsigned_abs()));
    let mut difficulty = if adjustment >= 0 {
        parent.difficulty.saturating_add(delta)
    } else {
        parent.difficulty.saturating_sub(delta)
    };
    difficulty = difficulty.max(min);
    // The bomb: from the (possibly delayed) block number.
    let bomb_number = match bomb_delay(fork) {
        None => number,
        // geth counts from the parent: fake = parent − (delay − 1).
        Some(delay) => parent.number.saturating_sub(delay - 1),
    };
    let periods = bomb_number / BOMB_PERIOD;
    if periods > 1 {
        let exp = periods - 2;
        if exp < 256 {
            difficulty = difficulty.saturating_add(U256::from(1) << (exp as usize));
        } else {
            difficulty = U256::MAX;
        }
    }
    difficulty
}

/// The reward of a block's miner, before the ommer inclusion bonus: 5 ether until
/// Byzantium (EIP-649: 3), Constantinople (EIP-1234: 2); none after the merge.
pub fn block_reward(fork: Fork) -> U256 {
    const ETHER: u128 = 1_000_000_000_000_000_000;
    U256::from(match fork {
        Fork::Frontier | Fork::Homestead | Fork::Tangerine | Fork::SpuriousDragon => 5 * ETHER,
        Fork::Byzantium => 3 * ETHER,
        Fork::Constantinople
        | Fork::Petersburg
        | Fork::Istanbul
        | Fork::MuirGlacier
        | Fork::Berlin
        | Fork::London
        | Fork::ArrowGlacier
        | Fork::GrayGlacier => 2 * ETHER,
        Fork::Paris
        | Fork::Shanghai
        | Fork::Cancun
        | Fork::Prague
        | Fork::Osaka
        | Fork::Bpo1
        | Fork::Bpo2
        | Fork::Bpo3
        | Fork::Bpo4
        | Fork::Bpo5 => 0,
    })
}

/// The balance credits of a proof-of-work block (geth's `accumulateRewards`): each
/// ommer's miner gets `(ommer number + 8 − block number) / 8` of the reward, the block's
/// miner the reward plus 1/32 of it per ommer. Credits to one address are not merged:
/// the caller adds them up.
pub fn rewards(
    fork: Fork,
    header: &Header,
    ommers: &[Header],
) -> Vec<(alloy_primitives::Address, U256)> {
    let reward = block_reward(fork);
    if reward.is_zero() {
        return Vec::new();
    }
    let mut out = Vec::with_capacity(ommers.len() + 1);
    let mut miner = reward;
    for ommer in ommers {
        let generations = (ommer.number + 8).saturating_sub(header.number);
        out.push((
            ommer.beneficiary,
            U256::from(generations) * reward / U256::from(8),
        ));
        miner += reward / U256::from(32);
    }
    out.push((header.beneficiary, miner));
    out
}

/// Why a block's ommers are refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OmmerError {
    /// More than [`MAX_OMMERS`] ommers.
    #[error("too many ommers: {found}, at most {MAX_OMMERS}")]
    TooMany {
        /// The number of ommers the block carries.
        found: usize,
    },
    /// A proof-of-stake block with ommers.
    #[error("ommers after the merge")]
    AfterMerge,
    /// An ommer listed twice, already included by a recent ancestor, or the block itself.
    #[error("duplicate ommer {0}")]
    Duplicate(B256),
    /// An ommer that is one of the block's own ancestors.
    #[error("ommer {0} is an ancestor of the block")]
    IsAncestor(B256),
    /// An ommer whose parent is not one of the block's recent ancestors other than its
    /// parent.
    #[error(
        "ommer {hash}'s parent {parent} is not among the block's last {MAX_OMMER_DEPTH} ancestors (or is its parent)"
    )]
    Dangling {
        /// The ommer's hash.
        hash: B256,
        /// The parent hash the ommer names.
        parent: B256,
    },
    /// An ommer whose header is not valid on its own parent.
    #[error("ommer {hash}: {error}")]
    Header {
        /// The ommer's hash.
        hash: B256,
        /// The header rule it breaks.
        error: crate::header::HeaderError,
    },
}

/// The recent ancestry an ommer check needs: the block's last [`MAX_OMMER_DEPTH`]
/// ancestors (parent first) and the ommers those ancestors included.
#[derive(Debug, Clone, Default)]
pub struct Ancestry {
    /// The block's ancestors, parent first, at most [`MAX_OMMER_DEPTH`] of them.
    pub ancestors: Vec<Header>,
    /// Hashes of the ommers those ancestors included.
    pub ancestor_ommers: Vec<B256>,
}

/// geth's `verifyUncles`: at most two ommers, none included before in the last seven
/// generations, none an ancestor, each a child of one of the last seven ancestors other
/// than the parent, and each a valid header on its own parent.
pub fn validate_ommers(
    config: &ChainConfig,
    header: &Header,
    hash: B256,
    ommers: &[Header],
    ancestry: &Ancestry,
) -> Result<(), OmmerError> {
    if ommers.is_empty() {
        return Ok(());
    }
    if ommers.len() > MAX_OMMERS {
        return Err(OmmerError::TooMany {
            found: ommers.len(),
        });
    }
    let ancestor_hashes: Vec<B256> = ancestry.ancestors.iter().map(|h| h.hash()).collect();
    let mut seen: Vec<B256> = ancestry.ancestor_ommers.clone();
    seen.push(hash);
    for ommer in ommers {
        let ommer_hash = ommer.hash();
        if seen.contains(&ommer_hash) {
            return Err(OmmerError::Duplicate(ommer_hash));
        }
        seen.push(ommer_hash);
        if ancestor_hashes.contains(&ommer_hash) {
            return Err(OmmerError::IsAncestor(ommer_hash));
        }
        let parent = ancestor_hashes
            .iter()
            .position(|h| *h == ommer.parent_hash)
            .filter(|_| ommer.parent_hash != header.parent_hash)
            .map(|i| &ancestry.ancestors[i])
            .ok_or(OmmerError::Dangling {
                hash: ommer_hash,
                parent: ommer.parent_hash,
            })?;
        crate::header::validate_header_on_parent(config, parent, ommer).map_err(|error| {
            OmmerError::Header {
                hash: ommer_hash,
                error,
            }
        })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
