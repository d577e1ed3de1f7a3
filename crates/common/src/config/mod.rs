//! Chain configuration: which rules apply at which block, and which network we are on.
//!
//! A chain's history is a list of hard forks. The early ones switch on at a block number,
//! the merge switched on when the chain reached a total difficulty, and everything from
//! Shanghai on switches on at a timestamp. [`ChainConfig`] holds that schedule (in the
//! shape of geth's `config` object in a genesis file) and answers the questions the rest
//! of moat asks about it:
//!
//! ```text
//!  genesis.json ──► Genesis::from_json ──► Genesis { config: ChainConfig, alloc, header fields }
//!                                                    │
//!        Network::{Mainnet,Sepolia,Hoodi}.config() ──┤
//!                                                    ▼
//!            fork_at(block, time) ──► Fork ──► .rules() ──► EVM / tx validation rules
//!            blob_params_at(time) ──► BlobParams (per-block blob target, max, fee fraction)
//!            fork_id(genesis, head) ─► ForkId (eth handshake, EIP-2124 / EIP-6122)
//!            fork_filter(genesis) ──► ForkFilter::validate(remote id) (peer admission)
//! ```
//!
//! Blob-parameter-only forks (BPO1..BPO5) change nothing but the blob schedule, so they
//! appear in [`Fork`] (they count for the fork id and for "which fork is this?") while
//! [`Fork::rules`] maps them back to the named fork whose EVM they run.

mod forkid;
mod genesis;
mod genesis_stream;
#[cfg(test)]
mod tests;

pub use forkid::{ForkFilter, ForkId, ForkIdError};
pub use genesis::{Genesis, GenesisAccount};
pub use genesis_stream::AllocEntries;

use alloy_primitives::{Address, B256, U256, address, b256};
use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

/// Everything that can be wrong with a genesis file or a fork schedule.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A fork name (in a genesis file, a test fixture or a flag) that is no known fork.
    #[error("unknown fork {0:?}")]
    UnknownFork(String),
    /// The genesis JSON does not deserialize (a missing or mistyped field).
    #[error("invalid genesis json: {0}")]
    Json(#[from] serde_json::Error),
    /// The genesis file is not one well-formed JSON object (byte offset of the fault).
    #[error("invalid genesis json at byte {offset}: {reason}")]
    Malformed {
        /// Byte offset in the file where reading stopped.
        offset: u64,
        /// What was wrong there.
        reason: &'static str,
    },
    /// An allocation entry was refused (a bad address, or by whoever took it in).
    #[error("genesis alloc entry {address}: {reason}")]
    Alloc {
        /// The entry's key as written.
        address: String,
        /// Why it was refused.
        reason: String,
    },
    /// The genesis file could not be read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A mandatory fork is unset while a later one is scheduled (names are genesis keys).
    #[error("unsupported fork ordering: {missing} is not enabled, but {later} is")]
    MissingFork {
        /// The unset fork's genesis key (e.g. `londonBlock`).
        missing: &'static str,
        /// The later fork that is scheduled.
        later: &'static str,
    },
    /// A fork is scheduled before one that must precede it (names are genesis keys).
    #[error("unsupported fork ordering: {later} at {later_at} is before {earlier} at {earlier_at}")]
    ForkOrder {
        /// The fork that must come first.
        earlier: &'static str,
        /// Its block number or timestamp.
        earlier_at: u64,
        /// The fork scheduled too early.
        later: &'static str,
        /// Its block number or timestamp.
        later_at: u64,
    },
    /// A blob-parameter-only fork is scheduled without saying what its parameters are.
    #[error("{0} is scheduled but blobSchedule has no entry for it")]
    MissingBlobParams(Fork),
    /// A `blobSchedule` entry the fee arithmetic cannot work with.
    #[error("invalid blobSchedule entry for {fork}: {reason}")]
    InvalidBlobParams {
        /// The fork whose entry it is.
        fork: Fork,
        /// What is wrong with it.
        reason: &'static str,
    },
}

/// A hard fork. Ordered: later forks compare greater.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Fork {
    /// The launch rules (mainnet block 0).
    Frontier,
    /// EIP-2 (low-s signatures, costlier creation), EIP-7 `DELEGATECALL`.
    Homestead,
    /// EIP-150 ("Tangerine Whistle").
    Tangerine,
    /// EIP-155 + EIP-158.
    SpuriousDragon,
    /// EIP-658 receipt status, `REVERT`, `STATICCALL`, the pairing precompiles.
    Byzantium,
    /// EIP-145 shifts, EIP-1014 `CREATE2`, EIP-1052 `EXTCODEHASH`, EIP-1283.
    Constantinople,
    /// Constantinople without EIP-1283 ("ConstantinopleFix" in the test suites).
    Petersburg,
    /// EIP-1344 `CHAINID`, EIP-2028 cheaper calldata, EIP-2200 `SSTORE` metering.
    Istanbul,
    /// EIP-2384: delays the difficulty bomb, nothing else.
    MuirGlacier,
    /// EIP-2929 access costs, EIP-2930 access lists, EIP-2718 typed transactions.
    Berlin,
    /// EIP-1559 base fee and fee-market transactions, EIP-3529 smaller refunds.
    London,
    /// EIP-4345: delays the difficulty bomb, nothing else.
    ArrowGlacier,
    /// EIP-5133: delays the difficulty bomb, nothing else.
    GrayGlacier,
    /// The merge.
    Paris,
    /// EIP-4895 withdrawals, EIP-3855 `PUSH0`, EIP-3860 init-code limit.
    Shanghai,
    /// EIP-4844 blob transactions, EIP-4788 beacon root, EIP-1153, EIP-6780.
    Cancun,
    /// EIP-7702 set-code transactions, EIP-7685 requests, EIP-7623, EIP-7691 more blobs.
    Prague,
    /// EIP-7594 PeerDAS (cell proofs), EIP-7825 per-transaction gas cap.
    Osaka,
    /// The first blob-parameter-only fork (EIP-7892): changes the blob schedule only.
    Bpo1,
    /// The second blob-parameter-only fork.
    Bpo2,
    /// The third blob-parameter-only fork.
    Bpo3,
    /// The fourth blob-parameter-only fork.
    Bpo4,
    /// The fifth blob-parameter-only fork.
    Bpo5,
}

/// Test-suite spelling first; the rest are aliases people also write.
const FORK_NAMES: [(Fork, &str, &[&str]); 23] = [
    (Fork::Frontier, "Frontier", &[]),
    (Fork::Homestead, "Homestead", &[]),
    (
        Fork::Tangerine,
        "EIP150",
        &["Tangerine", "TangerineWhistle"],
    ),
    (
        Fork::SpuriousDragon,
        "EIP158",
        &["SpuriousDragon", "Spurious"],
    ),
    (Fork::Byzantium, "Byzantium", &[]),
    (Fork::Constantinople, "Constantinople", &[]),
    (Fork::Petersburg, "ConstantinopleFix", &["Petersburg"]),
    (Fork::Istanbul, "Istanbul", &[]),
    (Fork::MuirGlacier, "MuirGlacier", &[]),
    (Fork::Berlin, "Berlin", &[]),
    (Fork::London, "London", &[]),
    (Fork::ArrowGlacier, "ArrowGlacier", &[]),
    (Fork::GrayGlacier, "GrayGlacier", &[]),
    (Fork::Paris, "Paris", &["Merge"]),
    (Fork::Shanghai, "Shanghai", &[]),
    (Fork::Cancun, "Cancun", &[]),
    (Fork::Prague, "Prague", &[]),
    (Fork::Osaka, "Osaka", &[]),
    (Fork::Bpo1, "BPO1", &[]),
    (Fork::Bpo2, "BPO2", &[]),
    (Fork::Bpo3, "BPO3", &[]),
    (Fork::Bpo4, "BPO4", &[]),
    (Fork::Bpo5, "BPO5", &[]),
];

impl Fork {
    /// The latest named hard fork moat implements.
    pub const LATEST: Fork = Fork::Osaka;

    /// Every fork, oldest first.
    pub const ALL: [Fork; 23] = {
        let mut all = [Fork::Frontier; 23];
        let mut i = 0;
        while i < 23 {
            all[i] = FORK_NAMES[i].0;
            i += 1;
        }
        all
    };

    /// Parses a fork name as the execution test suites spell it ("EIP150", "EIP158",
    /// "ConstantinopleFix", "Merge", "BPO1", ...) or by its common name ("Tangerine",
    /// "SpuriousDragon", "Petersburg"). Case-insensitive.
    pub fn from_name(s: &str) -> Option<Fork> {
        FORK_NAMES.iter().find_map(|(fork, name, aliases)| {
            let hit =
                name.eq_ignore_ascii_case(s) || aliases.iter().any(|a| a.eq_ignore_ascii_case(s));
            hit.then_some(*fork)
        })
    }

    /// The test-suite spelling, which [`Fork::from_name`] reads back.
    pub fn name(self) -> &'static str {
        FORK_NAMES[self as usize].1
    }

    /// The named hard fork whose EVM and transaction rules apply: a BPO fork only moves
    /// the blob schedule, so it runs the rules of Osaka.
    pub fn rules(self) -> Fork {
        if self > Fork::Osaka {
            Fork::Osaka
        } else {
            self
        }
    }

    /// Whether the fork is switched on by timestamp rather than block number.
    pub fn is_timestamp_based(self) -> bool {
        self >= Fork::Shanghai
    }

    /// The key of this fork's entry in a genesis `blobSchedule`, for forks that can have one.
    fn blob_schedule_key(self) -> Option<&'static str> {
        Some(match self {
            Fork::Cancun => "cancun",
            Fork::Prague => "prague",
            Fork::Osaka => "osaka",
            Fork::Bpo1 => "bpo1",
            Fork::Bpo2 => "bpo2",
            Fork::Bpo3 => "bpo3",
            Fork::Bpo4 => "bpo4",
            Fork::Bpo5 => "bpo5",
            _ => return None,
        })
    }
}

impl fmt::Display for Fork {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Fork {
    type Err = ConfigError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Fork::from_name(s).ok_or_else(|| ConfigError::UnknownFork(s.to_owned()))
    }
}

// By name rather than by variant, so that fixtures and configs written with the
// test-suite spelling read back, and so that `Fork` works as a JSON map key.
impl serde::Serialize for Fork {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl<'de> serde::Deserialize<'de> for Fork {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        Fork::from_name(&name)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown fork {name:?}")))
    }
}

/// When a fork switches on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Activation {
    /// At this block number and after.
    Block(u64),
    /// At the first block whose timestamp is at least this.
    Timestamp(u64),
}

/// Blob parameters of one fork (EIP-7840's `blobSchedule` entry).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BlobParams {
    /// Blobs per block the blob base fee steers towards.
    #[serde(deserialize_with = "genesis::quantity::de_u64")]
    pub target: u64,
    /// Blobs a block may hold.
    #[serde(deserialize_with = "genesis::quantity::de_u64")]
    pub max: u64,
    /// Denominator of the blob base fee's exponential (how fast it reacts).
    #[serde(deserialize_with = "genesis::quantity::de_u64")]
    pub base_fee_update_fraction: u64,
}

impl BlobParams {
    /// EIP-4844's parameters, from Cancun: target 3, max 6.
    pub const CANCUN: BlobParams = BlobParams {
        target: 3,
        max: 6,
        base_fee_update_fraction: 3_338_477,
    };
    /// EIP-7691's parameters, from Prague: target 6, max 9.
    pub const PRAGUE: BlobParams = BlobParams {
        target: 6,
        max: 9,
        base_fee_update_fraction: 5_007_716,
    };
    /// The first blob-parameter-only fork as scheduled on mainnet, sepolia and hoodi.
    pub const BPO1: BlobParams = BlobParams {
        target: 10,
        max: 15,
        base_fee_update_fraction: 8_346_193,
    };
    /// The second blob-parameter-only fork as scheduled on mainnet, sepolia and hoodi.
    pub const BPO2: BlobParams = BlobParams {
        target: 14,
        max: 21,
        base_fee_update_fraction: 11_684_671,
    };

    /// Rejects parameters the fee arithmetic cannot work with: a zero fraction divides
    /// by zero, and a target above the max makes the Osaka excess-gas formula underflow.
    fn check(&self, fork: Fork) -> Result<(), ConfigError> {
        let reason = if self.base_fee_update_fraction == 0 {
            "baseFeeUpdateFraction must not be zero"
        } else if self.target > self.max {
            "target exceeds max"
        } else {
            return Ok(());
        };
        Err(ConfigError::InvalidBlobParams { fork, reason })
    }
}

/// EIP-7594 (Osaka) caps a single transaction at 6 blobs, whatever a block may hold.
const MAX_BLOBS_PER_TX_OSAKA: u64 = 6;

/// A chain's fork schedule, as geth's genesis `config` object describes it.
///
/// `None` means the fork is not scheduled. A block-numbered fork at 0 and a time fork at or
/// before the genesis timestamp are active from genesis.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ChainConfig {
    /// The EIP-155 chain id (`chainId`).
    pub chain_id: u64,

    /// Homestead's block (`homesteadBlock`).
    pub homestead_block: Option<u64>,
    /// The irregular state change that returned The DAO's ether. Only counts for the fork id.
    pub dao_fork_block: Option<u64>,
    /// Whether this chain took the DAO fork (`daoForkSupport`; mainnet did).
    pub dao_fork_support: bool,
    /// Tangerine Whistle's block (`eip150Block`).
    pub eip150_block: Option<u64>,
    /// The block from which EIP-155 replay protection applies (`eip155Block`).
    pub eip155_block: Option<u64>,
    /// Spurious Dragon's block (`eip158Block`).
    pub eip158_block: Option<u64>,
    /// Byzantium's block (`byzantiumBlock`).
    pub byzantium_block: Option<u64>,
    /// Constantinople's block (`constantinopleBlock`).
    pub constantinople_block: Option<u64>,
    /// Unset means "together with Constantinople", as in geth.
    pub petersburg_block: Option<u64>,
    /// Istanbul's block (`istanbulBlock`).
    pub istanbul_block: Option<u64>,
    /// Muir Glacier's block (`muirGlacierBlock`).
    pub muir_glacier_block: Option<u64>,
    /// Berlin's block (`berlinBlock`).
    pub berlin_block: Option<u64>,
    /// London's block (`londonBlock`).
    pub london_block: Option<u64>,
    /// Arrow Glacier's block (`arrowGlacierBlock`).
    pub arrow_glacier_block: Option<u64>,
    /// Gray Glacier's block (`grayGlacierBlock`).
    pub gray_glacier_block: Option<u64>,

    /// The total difficulty at which proof of work ended. Zero means the chain started
    /// post-merge.
    pub terminal_total_difficulty: Option<U256>,
    /// A block after the merge at which the fork id changes, so that merged and unmerged
    /// nodes stop peering (it changes no rules).
    pub merge_netsplit_block: Option<u64>,
    /// The first post-merge block, when it is known. Not a genesis key: geth finds the
    /// merge by total difficulty, which a block number alone cannot tell; the built-in
    /// networks set it so that `fork_at` answers Paris for their post-merge,
    /// pre-Shanghai blocks.
    pub paris_block: Option<u64>,

    /// Shanghai's activation timestamp, in Unix seconds (`shanghaiTime`).
    pub shanghai_time: Option<u64>,
    /// Cancun's activation timestamp, in Unix seconds (`cancunTime`).
    pub cancun_time: Option<u64>,
    /// Prague's activation timestamp, in Unix seconds (`pragueTime`).
    pub prague_time: Option<u64>,
    /// Osaka's activation timestamp, in Unix seconds (`osakaTime`).
    pub osaka_time: Option<u64>,
    /// BPO1's activation timestamp, in Unix seconds (`bpo1Time`).
    pub bpo1_time: Option<u64>,
    /// BPO2's activation timestamp, in Unix seconds (`bpo2Time`).
    pub bpo2_time: Option<u64>,
    /// BPO3's activation timestamp, in Unix seconds (`bpo3Time`).
    pub bpo3_time: Option<u64>,
    /// BPO4's activation timestamp, in Unix seconds (`bpo4Time`).
    pub bpo4_time: Option<u64>,
    /// BPO5's activation timestamp, in Unix seconds (`bpo5Time`).
    pub bpo5_time: Option<u64>,

    /// The beacon deposit contract, whose logs become EIP-6110 deposit requests.
    pub deposit_contract_address: Option<Address>,
    /// Blob parameters by the fork that brings them in (Cancun, Prague, Osaka, BPO1..5).
    pub blob_schedule: BTreeMap<Fork, BlobParams>,
}

/// The forks that newer blob parameters can come with, newest first.
const BLOB_FORKS_NEWEST_FIRST: [Fork; 8] = [
    Fork::Bpo5,
    Fork::Bpo4,
    Fork::Bpo3,
    Fork::Bpo2,
    Fork::Bpo1,
    Fork::Osaka,
    Fork::Prague,
    Fork::Cancun,
];

impl ChainConfig {
    /// When `fork` switches on, or `None` if this chain does not schedule it.
    ///
    /// Paris has a block only when it is known: at 0 for a chain that starts merged (TTD 0),
    /// else the first post-merge block of a built-in network, else the merge netsplit block.
    pub fn activation(&self, fork: Fork) -> Option<Activation> {
        use Activation::{Block, Timestamp};
        let block = |b: Option<u64>| b.map(Block);
        let time = |t: Option<u64>| t.map(Timestamp);
        match fork {
            Fork::Frontier => Some(Block(0)),
            Fork::Homestead => block(self.homestead_block),
            Fork::Tangerine => block(self.eip150_block),
            Fork::SpuriousDragon => block(self.eip158_block),
            Fork::Byzantium => block(self.byzantium_block),
            Fork::Constantinople => block(self.constantinople_block),
            Fork::Petersburg => block(self.petersburg_block.or(self.constantinople_block)),
            Fork::Istanbul => block(self.istanbul_block),
            Fork::MuirGlacier => block(self.muir_glacier_block),
            Fork::Berlin => block(self.berlin_block),
            Fork::London => block(self.london_block),
            Fork::ArrowGlacier => block(self.arrow_glacier_block),
            Fork::GrayGlacier => block(self.gray_glacier_block),
            Fork::Paris => {
                if self.terminal_total_difficulty == Some(U256::ZERO) {
                    Some(Block(0))
                } else {
                    block(self.paris_block.or(self.merge_netsplit_block))
                }
            }
            Fork::Shanghai => time(self.shanghai_time),
            Fork::Cancun => time(self.cancun_time),
            Fork::Prague => time(self.prague_time),
            Fork::Osaka => time(self.osaka_time),
            Fork::Bpo1 => time(self.bpo1_time),
            Fork::Bpo2 => time(self.bpo2_time),
            Fork::Bpo3 => time(self.bpo3_time),
            Fork::Bpo4 => time(self.bpo4_time),
            Fork::Bpo5 => time(self.bpo5_time),
        }
    }

    /// Whether `fork` is active for a block with this number and timestamp.
    ///
    /// Time forks are judged by the timestamp alone: `validate` refuses a schedule with a
    /// time fork but no London, so there is no block-number condition left to check. Paris
    /// also counts as active once Shanghai is, as in geth: a chain cannot be at Shanghai
    /// without having merged, even where the merge block is unknown.
    pub fn is_active(&self, fork: Fork, block: u64, timestamp: u64) -> bool {
        let active = |a: Option<Activation>| match a {
            Some(Activation::Block(n)) => block >= n,
            Some(Activation::Timestamp(t)) => timestamp >= t,
            None => false,
        };
        active(self.activation(fork))
            || (fork == Fork::Paris && active(self.activation(Fork::Shanghai)))
    }

    /// The latest fork active at a block with this number and timestamp.
    pub fn fork_at(&self, block: u64, timestamp: u64) -> Fork {
        Fork::ALL
            .iter()
            .rev()
            .copied()
            .find(|&fork| self.is_active(fork, block, timestamp))
            .unwrap_or(Fork::Frontier)
    }

    /// Blob parameters in force at `timestamp`, `None` before Cancun.
    ///
    /// The newest scheduled fork with an entry wins; a fork without one (Osaka, normally)
    /// keeps what came before. Cancun and Prague fall back to their standard values when
    /// the genesis has no entry for them, as geth releases before the blobSchedule
    /// requirement did, so older genesis files keep working.
    pub fn blob_params_at(&self, timestamp: u64) -> Option<BlobParams> {
        for fork in BLOB_FORKS_NEWEST_FIRST {
            if !self.is_active(fork, 0, timestamp) {
                continue;
            }
            if let Some(params) = self.blob_schedule.get(&fork) {
                return Some(*params);
            }
            match fork {
                Fork::Prague => return Some(BlobParams::PRAGUE),
                Fork::Cancun => return Some(BlobParams::CANCUN),
                _ => {}
            }
        }
        None
    }

    /// The most blobs one transaction may carry at `timestamp`: the block max, capped at
    /// 6 from Osaka (EIP-7594). `None` before Cancun.
    pub fn max_blobs_per_tx(&self, timestamp: u64) -> Option<u64> {
        let max = self.blob_params_at(timestamp)?.max;
        Some(if self.is_active(Fork::Osaka, 0, timestamp) {
            max.min(MAX_BLOBS_PER_TX_OSAKA)
        } else {
            max
        })
    }

    /// Every fork that switches on after genesis, in the form the fork id hashes them.
    ///
    /// Block forks: sorted, repeats merged, and block 0 dropped (those are in the genesis
    /// already). Time forks: sorted, repeats merged, and those at or before the genesis
    /// timestamp dropped for the same reason (EIP-6122).
    fn fork_points(&self, genesis_timestamp: u64) -> (Vec<u64>, Vec<u64>) {
        let mut blocks: Vec<u64> = [
            self.homestead_block,
            self.dao_fork_block,
            self.eip150_block,
            self.eip155_block,
            self.eip158_block,
            self.byzantium_block,
            self.constantinople_block,
            self.petersburg_block,
            self.istanbul_block,
            self.muir_glacier_block,
            self.berlin_block,
            self.london_block,
            self.arrow_glacier_block,
            self.gray_glacier_block,
            self.merge_netsplit_block,
        ]
        .into_iter()
        .flatten()
        .filter(|&b| b != 0)
        .collect();
        blocks.sort_unstable();
        blocks.dedup();

        let mut times: Vec<u64> = [
            self.shanghai_time,
            self.cancun_time,
            self.prague_time,
            self.osaka_time,
            self.bpo1_time,
            self.bpo2_time,
            self.bpo3_time,
            self.bpo4_time,
            self.bpo5_time,
        ]
        .into_iter()
        .flatten()
        .filter(|&t| t > genesis_timestamp)
        .collect();
        times.sort_unstable();
        times.dedup();
        (blocks, times)
    }

    /// The EIP-2124 fork id this node announces with its head at `head_number` /
    /// `head_timestamp` (time forks per EIP-6122).
    pub fn fork_id(
        &self,
        genesis_hash: B256,
        genesis_timestamp: u64,
        head_number: u64,
        head_timestamp: u64,
    ) -> ForkId {
        let (blocks, times) = self.fork_points(genesis_timestamp);
        forkid::compute(genesis_hash, &blocks, &times, head_number, head_timestamp)
    }

    /// A checker for the fork ids remote peers announce (EIP-2124's validation rules).
    pub fn fork_filter(&self, genesis_hash: B256, genesis_timestamp: u64) -> ForkFilter {
        let (blocks, times) = self.fork_points(genesis_timestamp);
        ForkFilter::new(genesis_hash, blocks, times)
    }

    /// Checks what geth checks before it runs a chain: forks in their order with no
    /// mandatory one missing, and usable blob parameters for every blob fork scheduled.
    ///
    /// Unlike geth, a missing Cancun or Prague blob entry is accepted (the standard
    /// values apply, see [`ChainConfig::blob_params_at`]); a scheduled BPO fork without an
    /// entry is not, since it has no standard values.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.check_fork_order()?;
        for (fork, params) in &self.blob_schedule {
            params.check(*fork)?;
        }
        for fork in [Fork::Bpo1, Fork::Bpo2, Fork::Bpo3, Fork::Bpo4, Fork::Bpo5] {
            if self.activation(fork).is_some() && !self.blob_schedule.contains_key(&fork) {
                return Err(ConfigError::MissingBlobParams(fork));
            }
        }
        Ok(())
    }

    fn check_fork_order(&self) -> Result<(), ConfigError> {
        // (genesis key, activation, optional). An optional fork may be left out with
        // later ones still scheduled; a mandatory one may not.
        let block = |b: Option<u64>| b.map(Activation::Block);
        let time = |t: Option<u64>| t.map(Activation::Timestamp);
        let order: [(&'static str, Option<Activation>, bool); 24] = [
            ("homesteadBlock", block(self.homestead_block), false),
            ("daoForkBlock", block(self.dao_fork_block), true),
            ("eip150Block", block(self.eip150_block), false),
            ("eip155Block", block(self.eip155_block), false),
            ("eip158Block", block(self.eip158_block), false),
            ("byzantiumBlock", block(self.byzantium_block), false),
            (
                "constantinopleBlock",
                block(self.constantinople_block),
                false,
            ),
            ("petersburgBlock", block(self.petersburg_block), false),
            ("istanbulBlock", block(self.istanbul_block), false),
            ("muirGlacierBlock", block(self.muir_glacier_block), true),
            ("berlinBlock", block(self.berlin_block), false),
            ("londonBlock", block(self.london_block), false),
            ("arrowGlacierBlock", block(self.arrow_glacier_block), true),
            ("grayGlacierBlock", block(self.gray_glacier_block), true),
            ("mergeNetsplitBlock", block(self.merge_netsplit_block), true),
            ("shanghaiTime", time(self.shanghai_time), false),
            ("cancunTime", time(self.cancun_time), true),
            ("pragueTime", time(self.prague_time), true),
            ("osakaTime", time(self.osaka_time), true),
            ("bpo1Time", time(self.bpo1_time), true),
            ("bpo2Time", time(self.bpo2_time), true),
            ("bpo3Time", time(self.bpo3_time), true),
            ("bpo4Time", time(self.bpo4_time), true),
            ("bpo5Time", time(self.bpo5_time), true),
        ];
        // The last fork that counts: any scheduled one, or an unscheduled mandatory one.
        let mut last: Option<(&'static str, Option<Activation>)> = None;
        for (name, at, optional) in order {
            if let (Some((last_name, last_at)), Some(cur)) = (last, at) {
                match (last_at, cur) {
                    (None, _) => {
                        return Err(ConfigError::MissingFork {
                            missing: last_name,
                            later: name,
                        });
                    }
                    (Some(Activation::Block(a)), Activation::Block(b))
                    | (Some(Activation::Timestamp(a)), Activation::Timestamp(b))
                        if a > b =>
                    {
                        return Err(ConfigError::ForkOrder {
                            earlier: last_name,
                            earlier_at: a,
                            later: name,
                            later_at: b,
                        });
                    }
                    // Block to time is the normal transition; time to block cannot
                    // happen because every time fork comes after every block fork here.
                    _ => {}
                }
            }
            if !optional || at.is_some() {
                last = Some((name, at));
            }
        }
        Ok(())
    }

    /// A schedule with every fork up to and including `last` active from genesis, for
    /// tests and dev chains. Blob forks get the mainnet parameters; BPO3..BPO5, which
    /// have none yet, repeat BPO2's.
    pub fn all_forks_at_genesis(chain_id: u64, last: Fork) -> ChainConfig {
        let on = |fork: Fork| (last >= fork).then_some(0);
        let mut blob_schedule = BTreeMap::new();
        for (fork, params) in [
            (Fork::Cancun, BlobParams::CANCUN),
            (Fork::Prague, BlobParams::PRAGUE),
            (Fork::Bpo1, BlobParams::BPO1),
            (Fork::Bpo2, BlobParams::BPO2),
            (Fork::Bpo3, BlobParams::BPO2),
            (Fork::Bpo4, BlobParams::BPO2),
            (Fork::Bpo5, BlobParams::BPO2),
        ] {
            if last >= fork {
                blob_schedule.insert(fork, params);
            }
        }
        ChainConfig {
            chain_id,
            homestead_block: on(Fork::Homestead),
            dao_fork_block: None,
            dao_fork_support: false,
            eip150_block: on(Fork::Tangerine),
            eip155_block: on(Fork::SpuriousDragon),
            eip158_block: on(Fork::SpuriousDragon),
            byzantium_block: on(Fork::Byzantium),
            constantinople_block: on(Fork::Constantinople),
            // Left unset, Petersburg would come with Constantinople; a Constantinople-only
            // chain has to push it out of reach instead.
            petersburg_block: if last == Fork::Constantinople {
                Some(u64::MAX)
            } else {
                on(Fork::Petersburg)
            },
            istanbul_block: on(Fork::Istanbul),
            muir_glacier_block: on(Fork::MuirGlacier),
            berlin_block: on(Fork::Berlin),
            london_block: on(Fork::London),
            arrow_glacier_block: on(Fork::ArrowGlacier),
            gray_glacier_block: on(Fork::GrayGlacier),
            terminal_total_difficulty: (last >= Fork::Paris).then_some(U256::ZERO),
            merge_netsplit_block: on(Fork::Paris),
            paris_block: None,
            shanghai_time: on(Fork::Shanghai),
            cancun_time: on(Fork::Cancun),
            prague_time: on(Fork::Prague),
            osaka_time: on(Fork::Osaka),
            bpo1_time: on(Fork::Bpo1),
            bpo2_time: on(Fork::Bpo2),
            bpo3_time: on(Fork::Bpo3),
            bpo4_time: on(Fork::Bpo4),
            bpo5_time: on(Fork::Bpo5),
            deposit_contract_address: None,
            blob_schedule,
        }
    }

    /// Ethereum mainnet.
    pub fn mainnet() -> ChainConfig {
        ChainConfig {
            chain_id: 1,
            homestead_block: Some(1_150_000),
            dao_fork_block: Some(1_920_000),
            dao_fork_support: true,
            eip150_block: Some(2_463_000),
            eip155_block: Some(2_675_000),
            eip158_block: Some(2_675_000),
            byzantium_block: Some(4_370_000),
            constantinople_block: Some(7_280_000),
            petersburg_block: Some(7_280_000),
            istanbul_block: Some(9_069_000),
            muir_glacier_block: Some(9_200_000),
            berlin_block: Some(12_244_000),
            london_block: Some(12_965_000),
            arrow_glacier_block: Some(13_773_000),
            gray_glacier_block: Some(15_050_000),
            terminal_total_difficulty: Some(U256::from(58_750_000_000_000_000_000_000_u128)),
            merge_netsplit_block: None,
            paris_block: Some(15_537_394),
            shanghai_time: Some(1_681_338_455),
            cancun_time: Some(1_710_338_135),
            prague_time: Some(1_746_612_311),
            osaka_time: Some(1_764_798_551),
            bpo1_time: Some(1_765_290_071),
            bpo2_time: Some(1_767_747_671),
            bpo3_time: None,
            bpo4_time: None,
            bpo5_time: None,
            deposit_contract_address: Some(address!("00000000219ab540356cbb839cbe05303d7705fa")),
            blob_schedule: standard_blob_schedule(),
        }
    }

    /// The Sepolia testnet.
    pub fn sepolia() -> ChainConfig {
        ChainConfig {
            chain_id: 11_155_111,
            terminal_total_difficulty: Some(U256::from(17_000_000_000_000_000_u64)),
            merge_netsplit_block: Some(1_735_371),
            paris_block: Some(1_450_409),
            shanghai_time: Some(1_677_557_088),
            cancun_time: Some(1_706_655_072),
            prague_time: Some(1_741_159_776),
            osaka_time: Some(1_760_427_360),
            bpo1_time: Some(1_761_017_184),
            bpo2_time: Some(1_761_607_008),
            deposit_contract_address: Some(address!("7f02c3e3c98b133055b8b348b2ac625669ed295d")),
            ..Self::london_at_genesis()
        }
    }

    /// The Hoodi testnet.
    pub fn hoodi() -> ChainConfig {
        ChainConfig {
            chain_id: 560_048,
            terminal_total_difficulty: Some(U256::ZERO),
            merge_netsplit_block: Some(0),
            shanghai_time: Some(0),
            cancun_time: Some(0),
            prague_time: Some(1_742_999_832),
            osaka_time: Some(1_761_677_592),
            bpo1_time: Some(1_762_365_720),
            bpo2_time: Some(1_762_955_544),
            deposit_contract_address: Some(address!("00000000219ab540356cbb839cbe05303d7705fa")),
            ..Self::london_at_genesis()
        }
    }

    /// The testnets' common start: every block fork through London at genesis, none of
    /// the later difficulty-bomb delays.
    fn london_at_genesis() -> ChainConfig {
        ChainConfig {
            homestead_block: Some(0),
            dao_fork_support: true,
            eip150_block: Some(0),
            eip155_block: Some(0),
            eip158_block: Some(0),
            byzantium_block: Some(0),
            constantinople_block: Some(0),
            petersburg_block: Some(0),
            istanbul_block: Some(0),
            muir_glacier_block: Some(0),
            berlin_block: Some(0),
            london_block: Some(0),
            blob_schedule: standard_blob_schedule(),
            ..ChainConfig::default()
        }
    }
}

/// Cancun, Prague, BPO1 and BPO2 as all three public networks schedule them.
fn standard_blob_schedule() -> BTreeMap<Fork, BlobParams> {
    BTreeMap::from([
        (Fork::Cancun, BlobParams::CANCUN),
        (Fork::Prague, BlobParams::PRAGUE),
        (Fork::Bpo1, BlobParams::BPO1),
        (Fork::Bpo2, BlobParams::BPO2),
    ])
}

/// Block 0 of mainnet, as every client publishes it.
pub const MAINNET_GENESIS_HASH: B256 =
    b256!("d4e56740f876aef8c010b86a40d5f56745a118d0906a34e69aec8c0db1cb8fa3");
/// Block 0 of Sepolia.
pub const SEPOLIA_GENESIS_HASH: B256 =
    b256!("25a5cc106eea7138acab33231d7160d69cb777ee0c2c553fcddf5138993e6dd9");
/// Block 0 of Hoodi.
pub const HOODI_GENESIS_HASH: B256 =
    b256!("bbe312868b376a3001692a646dd2d7d1e4406380dfd86b98aa8a34d1557c971b");

/// The networks moat knows without a genesis file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Network {
    /// Ethereum mainnet, chain id 1.
    Mainnet,
    /// The Sepolia testnet, chain id 11155111.
    Sepolia,
    /// The Hoodi testnet, chain id 560048.
    Hoodi,
}

impl Network {
    /// Every built-in network.
    pub const ALL: [Network; 3] = [Network::Mainnet, Network::Sepolia, Network::Hoodi];

    /// The network's fork schedule and chain id.
    pub fn config(self) -> ChainConfig {
        match self {
            Network::Mainnet => ChainConfig::mainnet(),
            Network::Sepolia => ChainConfig::sepolia(),
            Network::Hoodi => ChainConfig::hoodi(),
        }
    }

    /// The network's EIP-155 chain id.
    pub fn chain_id(self) -> u64 {
        match self {
            Network::Mainnet => 1,
            Network::Sepolia => 11_155_111,
            Network::Hoodi => 560_048,
        }
    }

    /// Hash of the network's block 0.
    pub fn genesis_hash(self) -> B256 {
        match self {
            Network::Mainnet => MAINNET_GENESIS_HASH,
            Network::Sepolia => SEPOLIA_GENESIS_HASH,
            Network::Hoodi => HOODI_GENESIS_HASH,
        }
    }

    /// The genesis block's timestamp; time forks at or before it are not in the fork id.
    pub fn genesis_timestamp(self) -> u64 {
        match self {
            Network::Mainnet => 0,
            Network::Sepolia => 1_633_267_481,
            Network::Hoodi => 1_742_212_800,
        }
    }

    /// The network's lowercase name, as `--network` takes it.
    pub fn name(self) -> &'static str {
        match self {
            Network::Mainnet => "mainnet",
            Network::Sepolia => "sepolia",
            Network::Hoodi => "hoodi",
        }
    }

    /// Case-insensitive.
    pub fn from_name(s: &str) -> Option<Network> {
        Network::ALL
            .into_iter()
            .find(|n| n.name().eq_ignore_ascii_case(s))
    }

    /// The network with this chain id, if it is a built-in one.
    pub fn from_chain_id(chain_id: u64) -> Option<Network> {
        Network::ALL.into_iter().find(|n| n.chain_id() == chain_id)
    }

    /// The fork id a node of this network announces at the given head.
    pub fn fork_id(self, head_number: u64, head_timestamp: u64) -> ForkId {
        self.config().fork_id(
            self.genesis_hash(),
            self.genesis_timestamp(),
            head_number,
            head_timestamp,
        )
    }
}

impl fmt::Display for Network {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
