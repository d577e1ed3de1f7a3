//! `moat-chaingen`'s generator: a post-merge chain of any length, built block by block
//! with moat's own code over an in-memory store.
//!
//! ```text
//!  Params ─▶ genesis(): all forks through Prague at block 0, the EIP-4788/2935/7002/7251
//!            system contracts, `senders` funded keys (Signer::from_seed(i), i = 0..N)
//!         ─▶ Generator::new: Chain::init(Store::in_memory(), &genesis) + a Pool on its head
//!  per block:
//!    ~txs_per_block txs from rotating senders ─▶ signed ─▶ pool.add_transaction
//!    chain.build_payload(&pool, head, attrs 12 s later) ─▶ chain.import(&block)
//!    every receipt must be a success, every tx must be in the block ─▶ pool.on_head_change
//! ```
//!
//! The transactions, all EIP-1559, chosen with a seeded PRNG (same parameters, same chain):
//! - transfers of up to 0.001 ether, to a fresh address (a new account) or to one that
//!   exists (a sender, an earlier fresh address or, with `holders`, one of the funded
//!   keyless accounts that make the state large, [`holder_address`]);
//! - deployments of [`STORE_INITCODE`], whose constructor writes two slots (slot 0 =
//!   TIMESTAMP, slot 1 = CALLER) and whose runtime writes every (key, value) pair of its
//!   calldata: `SSTORE(CALLDATALOAD(i), CALLDATALOAD(i + 32))` for i = 0, 64, …
//!   (with `code_bytes`, each deployment's runtime is that one padded to a code of its
//!   own, [`distinct_runtime`]; with `genesis_contracts`, the genesis also holds such
//!   contracts with `genesis_slots` slots each, [`genesis_contract`]);
//! - calls to deployed contracts with one to three pairs, each a new slot, an overwrite of
//!   a slot written before, or a zero written to one (a delete);
//! - with `token_percent`, ERC-20 token txs ([`contracts::token_runtime`], in genesis at
//!   [`TOKEN_ADDRESS`] with every sender holding tokens): 80 % `transfer`s to a sender or
//!   to a fresh holder, 20 % `approve`s;
//! - with `nft_percent`, NFT mints ([`contracts::nft_runtime`], at [`NFT_ADDRESS`]);
//! - with `swap_percent`, AMM swaps through a router ([`contracts::router_runtime`], at
//!   [`ROUTER_ADDRESS`]) across two of [`AMM_POOLS`] constant-product pools
//!   ([`contracts::pool_runtime`], at [`amm_pool_address`]): reads and writes in three
//!   contracts a tx;
//! - with `calldata_percent`, calldata-heavy txs: `calldata_bytes` random bytes sent to
//!   a sender (EIP-7623's floor, 40 gas a byte, prices them);
//! - with `genesis_contract_calls`, the calls also go to the genesis contracts and their
//!   `genesis_slots` slots (large-storage contracts).
//!
//! Nothing is on disk and nothing goes over the network; the caller writes the blocks
//! (as RLP, and as EXPB's engine API request lines with [`expb_requests`]).

pub mod contracts;
mod expb;

pub use expb::expb_requests;

use alloy_primitives::{Address, B256, Bytes, TxKind, U256, keccak256};
use moat_blockchain::chain::{Chain, ImportOutcome, next_block_base_fee};
use moat_blockchain::payload::PayloadAttributes;
use moat_common::PooledTransaction;
use moat_common::block::Block;
use moat_common::config::{ChainConfig, Fork, Genesis, GenesisAccount};
use moat_common::transaction::{Eip1559Tx, SignedTransaction, Transaction};
use moat_crypto::secp::Signer;
use moat_mempool::{
    AccountState, CodeKind, HeadInfo, HeadUpdate, Pool, PoolConfig, StateView, SubPoolLimit,
    TxInput, TxOrigin,
};
use moat_storage::Store;
use std::collections::BTreeMap;
use std::sync::Arc;

/// The default chain id: "moat" in ASCII.
pub const DEFAULT_CHAIN_ID: u64 = 0x6d6f_6174;

/// Runtime code of the storage contract: for each 64-byte (key, value) pair of the
/// calldata, `SSTORE(key, value)`; then STOP.
///
/// ```text
/// 00 PUSH0                 i = 0
/// 01 JUMPDEST              loop:
/// 02 DUP1 CALLDATASIZE GT ISZERO PUSH1 0x17 JUMPI     if !(size > i) goto end
/// 09 DUP1 PUSH1 0x20 ADD CALLDATALOAD                 value = cd[i + 32]
/// 0e DUP2 CALLDATALOAD SSTORE                         SSTORE(cd[i], value)
/// 11 PUSH1 0x40 ADD PUSH1 0x01 JUMP                   i += 64; goto loop
/// 17 JUMPDEST STOP         end:
/// ```
pub const STORE_RUNTIME: [u8; 25] = [
    0x5f, 0x5b, 0x80, 0x36, 0x11, 0x15, 0x60, 0x17, 0x57, 0x80, 0x60, 0x20, 0x01, 0x35, 0x81, 0x35,
    0x55, 0x60, 0x40, 0x01, 0x60, 0x01, 0x56, 0x5b, 0x00,
];

/// Init code: `SSTORE(0, TIMESTAMP)`, `SSTORE(1, CALLER)`, then returns [`STORE_RUNTIME`].
///
/// ```text
/// TIMESTAMP PUSH0 SSTORE  CALLER PUSH1 1 SSTORE
/// PUSH1 25 DUP1 PUSH1 16 PUSH0 CODECOPY PUSH0 RETURN     (runtime at offset 16)
/// ```
pub const STORE_INITCODE: [u8; 41] = {
    let prefix = [
        0x42, 0x5f, 0x55, 0x33, 0x60, 0x01, 0x55, 0x60, 0x19, 0x80, 0x60, 0x10, 0x5f, 0x39, 0x5f,
        0xf3,
    ];
    let mut out = [0u8; 41];
    let mut i = 0;
    while i < 16 {
        out[i] = prefix[i];
        i += 1;
    }
    while i < 41 {
        out[i] = STORE_RUNTIME[i - 16];
        i += 1;
    }
    out
};

/// [`STORE_RUNTIME`] followed by `n` (8 bytes) and padding to `bytes` (at least 33):
/// past the STOP, never run, but a code hash of its own.
pub fn distinct_runtime(n: u64, bytes: usize) -> Vec<u8> {
    let mut code = STORE_RUNTIME.to_vec();
    code.extend_from_slice(&n.to_be_bytes());
    code.resize(bytes.max(code.len()), 0xfe);
    code
}

/// Init code as [`STORE_INITCODE`]'s, returning `runtime` (at most 64 KiB):
/// `... PUSH2 len DUP1 PUSH1 17 PUSH0 CODECOPY PUSH0 RETURN` (runtime at offset 17).
pub fn store_initcode(runtime: &[u8]) -> Vec<u8> {
    let len = u16::try_from(runtime.len())
        .unwrap_or(u16::MAX)
        .to_be_bytes();
    let mut out = vec![
        0x42, 0x5f, 0x55, 0x33, 0x60, 0x01, 0x55, 0x61, len[0], len[1], 0x80, 0x60, 0x11, 0x5f,
        0x39, 0x5f, 0xf3,
    ];
    out.extend_from_slice(&runtime[..usize::from(u16::from_be_bytes(len))]);
    out
}

/// Where the ERC-20 token of the token mix lives (in genesis).
pub const TOKEN_ADDRESS: Address = Address::new([
    0x70, 0xce, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01,
]);
/// Where the NFT of the token mix lives (in genesis).
pub const NFT_ADDRESS: Address = Address::new([
    0x70, 0xce, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x02,
]);
/// Where the AMM mix's router lives (in genesis).
pub const ROUTER_ADDRESS: Address = Address::new([
    0x70, 0xce, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x03,
]);
/// The AMM mix's pools, each holding [`POOL_RESERVE`] of both its tokens at genesis.
pub const AMM_POOLS: u8 = 8;
const POOL_RESERVE: u128 = 1_000_000_000_000_000_000_000_000;
const SWAP_GAS: u64 = 250_000;

/// Pool `i` of the AMM mix.
pub fn amm_pool_address(i: u8) -> Address {
    let mut a = [0u8; 20];
    a[..2].copy_from_slice(&[0x70, 0xce]);
    a[18] = 0x10;
    a[19] = i;
    Address::from(a)
}

/// Tokens every sender holds at genesis.
const TOKEN_BALANCE: u128 = 1_000_000_000_000_000_000_000_000;
const TOKEN_GAS: u64 = 80_000;
const MINT_GAS: u64 = 100_000;

/// Balance of every sender at genesis: a million ether.
const SENDER_BALANCE: u128 = 1_000_000 * 1_000_000_000_000_000_000;
/// Gas limits the transactions are signed with (what they use is less).
const TRANSFER_GAS: u64 = 21_000;
const DEPLOY_GAS: u64 = 150_000;
const CALL_BASE_GAS: u64 = 30_000;
const CALL_PAIR_GAS: u64 = 25_000;
/// Fee caps: the base fee starts at 1 gwei and only falls while blocks stay under target.
const MAX_FEE_PER_GAS: u128 = 10_000_000_000;
const MIN_TIP: u128 = 1_000_000_000;

/// What to generate.
#[derive(Debug, Clone)]
pub struct Params {
    /// The chain id in the genesis config, which every transaction signs over (EIP-155).
    pub chain_id: u64,
    /// Funded senders, keys `Signer::from_seed(0..senders)`.
    pub senders: usize,
    /// Transactions in each block; every one must fit, or generation fails.
    pub txs_per_block: usize,
    /// Share of deployments among the txs, in percent.
    pub deploy_percent: u32,
    /// Share of calls to deployed contracts, in percent (the rest are transfers).
    pub call_percent: u32,
    /// Share of transfers that go to a fresh address, in percent.
    pub fresh_percent: u32,
    /// Gas limit of the genesis block, in gas.
    pub gas_limit: u64,
    /// Timestamp of the genesis block, Unix seconds.
    pub genesis_time: u64,
    /// Seconds between a block and its parent.
    pub block_time: u64,
    /// Seeds the choice of transactions (not the keys).
    pub seed: u64,
    /// Contracts at genesis ([`genesis_contract`]), each with
    /// [`Params::genesis_slots`] storage slots: many storage tries for a snap sync to
    /// download and build.
    pub genesis_contracts: usize,
    /// 0: every deployment's runtime code is [`STORE_RUNTIME`]. Otherwise each one's is
    /// its own ([`distinct_runtime`], this many bytes): as many code hashes as
    /// deployments, for a snap sync's bytecodes stage to fetch.
    pub code_bytes: usize,
    /// Storage slots of each genesis contract.
    pub genesis_slots: usize,
    /// Share of ERC-20 token txs (transfers and approvals), in percent.
    pub token_percent: u32,
    /// Share of NFT mints, in percent.
    pub nft_percent: u32,
    /// Share of AMM swaps (router and two pools), in percent.
    pub swap_percent: u32,
    /// Share of calldata-heavy txs, in percent.
    pub calldata_percent: u32,
    /// Calldata bytes of each calldata-heavy tx.
    pub calldata_bytes: usize,
    /// Whether calls also go to the genesis contracts (and their slots).
    pub genesis_contract_calls: bool,
    /// Funded accounts without keys ([`holder_address`]), there only to make the state
    /// large: transfers to an existing account may go to one of them.
    pub holders: usize,
}

impl Default for Params {
    fn default() -> Self {
        Self {
            chain_id: DEFAULT_CHAIN_ID,
            senders: 1_000,
            txs_per_block: 50,
            deploy_percent: 4,
            call_percent: 30,
            fresh_percent: 40,
            gas_limit: 30_000_000,
            genesis_time: 1_735_689_600,
            block_time: 12,
            seed: 1,
            genesis_contracts: 0,
            genesis_slots: 0,
            code_bytes: 0,
            token_percent: 0,
            nft_percent: 0,
            swap_percent: 0,
            calldata_percent: 0,
            calldata_bytes: 4096,
            genesis_contract_calls: false,
            holders: 0,
        }
    }
}

/// The senders' keys: `Signer::from_seed(i)` for i in 0..n (keccak256 of i and a counter
/// as two 8-byte big-endian words, the counter 0 unless that is not a valid key).
pub fn sender_keys(n: usize) -> Vec<Signer> {
    (0..n as u64).map(Signer::from_seed).collect()
}

/// Holder number `i`: keccak256("chaingen holder " ‖ i as 8 bytes big-endian)[12..], a
/// funded account nobody holds the key of.
pub fn holder_address(i: u64) -> Address {
    tagged_address(b"chaingen holder ", i)
}

/// keccak256(`tag` ‖ `i` as 8 bytes big-endian)[12..]: an address of a numbered series
/// (holders, fresh recipients) nobody holds the key of.
fn tagged_address(tag: &[u8; 16], i: u64) -> Address {
    let mut material = [0u8; 24];
    material[..16].copy_from_slice(tag);
    material[16..].copy_from_slice(&i.to_be_bytes());
    Address::from_slice(&keccak256(material)[12..])
}

/// Balance of every holder at genesis: one ether.
const HOLDER_BALANCE: u128 = 1_000_000_000_000_000_000;

/// The genesis: every fork through Prague active at block 0 (terminal total difficulty
/// 0, difficulty 0), the four system contracts Prague block execution calls, and the
/// senders funded.
pub fn genesis(params: &Params, senders: &[Signer]) -> Genesis {
    let mut config = ChainConfig::all_forks_at_genesis(params.chain_id, Fork::Prague);
    // As the ethtest genesis writes it; no contract deployed here lives at address zero.
    config.deposit_contract_address = Some(Address::ZERO);
    let mut alloc = BTreeMap::new();
    for s in senders {
        alloc.insert(
            s.address(),
            GenesisAccount {
                balance: U256::from(SENDER_BALANCE),
                ..Default::default()
            },
        );
    }
    for i in 0..params.holders as u64 {
        alloc.insert(
            holder_address(i),
            GenesisAccount {
                balance: U256::from(HOLDER_BALANCE),
                ..Default::default()
            },
        );
    }
    alloc.extend(moat_common::system_contracts::genesis_accounts());
    if params.token_percent > 0 {
        let storage = senders
            .iter()
            .map(|s| {
                (
                    contracts::balance_slot(&s.address()),
                    B256::from(U256::from(TOKEN_BALANCE)),
                )
            })
            .collect();
        alloc.insert(
            TOKEN_ADDRESS,
            GenesisAccount {
                balance: U256::ZERO,
                nonce: 1,
                code: Bytes::from(contracts::token_runtime()),
                storage,
            },
        );
    }
    if params.nft_percent > 0 {
        alloc.insert(
            NFT_ADDRESS,
            GenesisAccount {
                balance: U256::ZERO,
                nonce: 1,
                code: Bytes::from(contracts::nft_runtime()),
                storage: BTreeMap::new(),
            },
        );
    }
    if params.swap_percent > 0 {
        alloc.insert(
            ROUTER_ADDRESS,
            GenesisAccount {
                balance: U256::ZERO,
                nonce: 1,
                code: Bytes::from(contracts::router_runtime()),
                storage: BTreeMap::new(),
            },
        );
        let reserve = B256::from(U256::from(POOL_RESERVE));
        for i in 0..AMM_POOLS {
            alloc.insert(
                amm_pool_address(i),
                GenesisAccount {
                    balance: U256::ZERO,
                    nonce: 1,
                    code: Bytes::from(contracts::pool_runtime()),
                    storage: [(B256::ZERO, reserve), (B256::with_last_byte(1), reserve)].into(),
                },
            );
        }
    }
    for i in 0..params.genesis_contracts {
        let (address, account) = genesis_contract(i as u64, params.genesis_slots);
        alloc.insert(address, account);
    }
    Genesis {
        config,
        nonce: 0,
        timestamp: params.genesis_time,
        extra_data: Bytes::from_static(b"moat-chaingen"),
        gas_limit: params.gas_limit,
        difficulty: U256::ZERO,
        mix_hash: B256::ZERO,
        coinbase: Address::ZERO,
        alloc,
        number: 0,
        gas_used: 0,
        parent_hash: B256::ZERO,
        base_fee_per_gas: Some(1_000_000_000),
        excess_blob_gas: None,
        blob_gas_used: None,
    }
}

/// Genesis contract number `i`: at address `0xc0de…` ‖ `i`, its code [`STORE_RUNTIME`]
/// and slots 1..=`slots` holding `i + slot`.
pub fn genesis_contract(i: u64, slots: usize) -> (Address, GenesisAccount) {
    let mut address = [0u8; 20];
    address[..2].copy_from_slice(&[0xc0, 0xde]);
    address[12..].copy_from_slice(&i.to_be_bytes());
    let code = STORE_RUNTIME.to_vec();
    let storage = (1..=slots as u64)
        .map(|s| (B256::from(U256::from(s)), B256::from(U256::from(i + s))))
        .collect();
    (
        Address::from(address),
        GenesisAccount {
            balance: U256::from(1),
            nonce: 1,
            code: Bytes::from(code),
            storage,
        },
    )
}

/// The keys as the ethtest chain's `accounts.json` lists them (address -> {"key"}), which
/// `moat-rpc-load --accounts` reads.
pub fn accounts_json(senders: &[Signer]) -> serde_json::Value {
    let map: serde_json::Map<String, serde_json::Value> = senders
        .iter()
        .map(|s| {
            (
                s.address().to_string().to_lowercase(),
                serde_json::json!({ "key": s.secret_bytes().to_string() }),
            )
        })
        .collect();
    serde_json::Value::Object(map)
}

/// splitmix64: small, seeded, and the same everywhere.
#[derive(Debug, Clone)]
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform enough in 0..n (n > 0).
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn percent(&mut self, p: u32) -> bool {
        self.next() % 100 < u64::from(p)
    }

    fn word(&mut self) -> B256 {
        let mut out = [0u8; 32];
        for chunk in out.chunks_mut(8) {
            chunk.copy_from_slice(&self.next().to_be_bytes());
        }
        B256::new(out)
    }
}

/// Counts of what went into the chain.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    /// Blocks generated (the genesis not counted).
    pub blocks: u64,
    /// Transactions in those blocks.
    pub txs: u64,
    /// Gas those blocks used.
    pub gas: u64,
    /// Value transfers.
    pub transfers: u64,
    /// Transfers that created an account.
    pub fresh_transfers: u64,
    /// Contract deployments.
    pub deployments: u64,
    /// Calls to deployed contracts.
    pub calls: u64,
    /// Storage slots written for the first time.
    pub slots_new: u64,
    /// Storage slots written again with a nonzero value.
    pub slots_overwritten: u64,
    /// Storage slots set to zero (deleted).
    pub slots_zeroed: u64,
    /// ERC-20 `transfer`s.
    pub token_transfers: u64,
    /// ERC-20 `approve`s.
    pub approvals: u64,
    /// NFT mints.
    pub mints: u64,
    /// AMM swaps.
    pub swaps: u64,
    /// Calldata-heavy txs.
    pub calldata_txs: u64,
}

/// A deployed storage contract and the slots it holds (as far as the generator knows:
/// two writes to one slot in one block may land in either order, which only changes
/// whether a later write counts as new or as an overwrite).
#[derive(Debug, Clone)]
struct Contract {
    address: Address,
    slots: Vec<B256>,
}

/// The pool's view of the chain head.
struct HeadState {
    chain: Chain,
    block_time: u64,
}

impl StateView for HeadState {
    fn account(&self, address: &Address) -> AccountState {
        let a = self
            .chain
            .store()
            .account(address)
            .ok()
            .flatten()
            .unwrap_or_default();
        AccountState {
            nonce: a.nonce,
            balance: a.balance,
            // Only the generator's senders send, and they are keys.
            code: CodeKind::None,
        }
    }

    fn head(&self) -> HeadInfo {
        let h = self.chain.head_header().expect("the chain has a head");
        head_info(self.chain.config(), &h, self.block_time)
    }
}

fn head_info(config: &ChainConfig, h: &moat_common::block::Header, block_time: u64) -> HeadInfo {
    HeadInfo {
        number: h.number,
        timestamp: h.timestamp,
        base_fee: next_block_base_fee(config, h, h.timestamp + block_time).unwrap_or(0),
        // No blob transactions here.
        blob_base_fee: 1,
        gas_limit: h.gas_limit,
    }
}

/// One transaction before it is signed.
struct Planned {
    sender: usize,
    tx: Transaction,
}

/// Builds and imports blocks one at a time; see the crate docs.
pub struct Generator {
    params: Params,
    chain: Chain,
    pool: Pool,
    runtime: tokio::runtime::Runtime,
    senders: Vec<Signer>,
    sender_addresses: Vec<Address>,
    nonces: Vec<u64>,
    next_sender: usize,
    /// Accounts created by transfers, in order.
    fresh: Vec<Address>,
    contracts: Vec<Contract>,
    /// Deployed by the block being made.
    deployed: Vec<Contract>,
    rng: Rng,
    stats: Stats,
    genesis: Genesis,
}

impl Generator {
    /// A generator at the genesis of `params`, its pool on the genesis head; `Err` when the
    /// parameters make no sense (no senders, percentages over 100).
    pub fn new(params: Params) -> Result<Self, String> {
        if params.senders == 0 || params.txs_per_block == 0 {
            return Err("need at least one sender and one transaction per block".into());
        }
        if params.deploy_percent
            + params.call_percent
            + params.token_percent
            + params.nft_percent
            + params.swap_percent
            + params.calldata_percent
            > 100
            || params.fresh_percent > 100
        {
            return Err("percentages above 100".into());
        }
        let senders = sender_keys(params.senders);
        let genesis = genesis(&params, &senders);
        let chain = Chain::init(Store::in_memory(), &genesis).map_err(|e| e.to_string())?;
        let mut cfg = PoolConfig::new(genesis.config.clone());
        // One block's worth at a time, more than one tx per sender when there are fewer
        // senders than txs.
        let room = (params.txs_per_block * 2).max(10_000);
        cfg.pending = SubPoolLimit::new(room, room * 1024);
        cfg.max_account_slots = params.txs_per_block.div_ceil(params.senders).max(16);
        cfg.max_in_flight = room;
        cfg.max_in_flight_per_origin = room;
        let pool = Pool::new(
            cfg,
            Arc::new(HeadState {
                chain: chain.clone(),
                block_time: params.block_time,
            }),
        );
        // Import reads the senders the pool recovered instead of recovering them again.
        let chain = chain.with_sender_cache(pool.sender_cache().clone());
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .map_err(|e| e.to_string())?;
        let sender_addresses = senders.iter().map(Signer::address).collect();
        let contracts = if params.genesis_contract_calls {
            (0..params.genesis_contracts as u64)
                .map(|i| Contract {
                    address: genesis_contract(i, 0).0,
                    slots: (1..=params.genesis_slots as u64)
                        .map(|s| B256::from(U256::from(s)))
                        .collect(),
                })
                .collect()
        } else {
            Vec::new()
        };
        Ok(Self {
            rng: Rng(params.seed),
            nonces: vec![0; params.senders],
            params,
            chain,
            pool,
            runtime,
            senders,
            sender_addresses,
            next_sender: 0,
            fresh: Vec::new(),
            contracts,
            deployed: Vec::new(),
            stats: Stats::default(),
            genesis,
        })
    }

    /// The genesis the chain starts from (write it out for a node to import the blocks).
    pub fn genesis(&self) -> &Genesis {
        &self.genesis
    }

    /// The funded senders' keys, `Signer::from_seed(0..senders)`.
    pub fn senders(&self) -> &[Signer] {
        &self.senders
    }

    /// The chain built so far, in its in-memory store.
    pub fn chain(&self) -> &Chain {
        &self.chain
    }

    /// Counts of what went into the chain so far.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Plans, signs, pools, builds and imports the next block, and returns it.
    pub fn next_block(&mut self) -> Result<Block, String> {
        let planned: Vec<Planned> = (0..self.params.txs_per_block)
            .map(|_| self.plan())
            .collect();
        let signed = sign_all(&self.senders, planned);
        let raw: Vec<Bytes> = signed.iter().map(|t| t.encoded_2718().into()).collect();

        let head = self.chain.head_header().map_err(|e| e.to_string())?;
        let number = head.number + 1;
        let pool = &self.pool;
        self.runtime.block_on(async {
            // Sender recovery spread over the cores, then admission in order.
            pool.warm_senders(&raw, &mut moat_mempool::CpuMeter::off())
                .await;
            for (i, bytes) in raw.into_iter().enumerate() {
                pool.add_transaction(TxInput::Raw(bytes), TxOrigin::Local)
                    .await
                    .map_err(|e| format!("block #{number}: the pool refused tx {i}: {e}"))?;
            }
            Ok::<_, String>(())
        })?;

        let attrs = PayloadAttributes {
            timestamp: head.timestamp + self.params.block_time,
            prev_randao: keccak256(head.hash()),
            suggested_fee_recipient: Address::repeat_byte(0xfe),
            withdrawals: Some(Vec::new()),
            parent_beacon_block_root: Some(keccak256(number.to_be_bytes())),
        };
        let built = self
            .chain
            .build_payload(&self.pool, head.hash(), &attrs)
            .map_err(|e| format!("building block #{number}: {e}"))?;
        let block = built.block;
        if block.transactions.len() != signed.len() {
            return Err(format!(
                "block #{number} holds {} of its {} transactions (gas limit {}?)",
                block.transactions.len(),
                signed.len(),
                block.header.gas_limit
            ));
        }
        match self.chain.import(&block) {
            Ok(ImportOutcome::Imported { .. }) => {}
            Ok(ImportOutcome::AlreadyKnown) => {
                return Err(format!("block #{number} was already known"));
            }
            Err(e) => return Err(format!("importing block #{number}: {e}")),
        }
        let receipts = self
            .chain
            .receipts(&block.hash)
            .map_err(|e| e.to_string())?
            .ok_or_else(|| format!("block #{number} has no receipts"))?;
        if let Some(i) = receipts.iter().position(|r| !r.success) {
            return Err(format!("block #{number}: transaction {i} failed"));
        }
        let info = head_info(self.chain.config(), &block.header, self.params.block_time);
        let mined = block.transactions.iter().map(|t| t.hash()).collect();
        self.runtime.block_on(self.pool.on_head_change(HeadUpdate {
            head: info,
            mined,
            ..Default::default()
        }));

        // Contracts deployed in this block can be called from the next one on.
        self.contracts.append(&mut self.deployed);
        self.stats.blocks += 1;
        self.stats.txs += block.transactions.len() as u64;
        self.stats.gas += block.header.gas_used;
        Ok(block)
    }

    /// The next transaction: its sender, kind and nonce.
    fn plan(&mut self) -> Planned {
        let sender = self.next_sender;
        self.next_sender = (self.next_sender + 1) % self.senders.len();
        let nonce = self.nonces[sender];
        self.nonces[sender] += 1;
        let tip = MIN_TIP + u128::from(self.rng.next() % 1_000_000);
        let roll = self.rng.next() % 100;
        let p = &self.params;
        let calls_end = u64::from(p.deploy_percent + p.call_percent);
        let (to, value, input, gas_limit) = if roll < u64::from(p.deploy_percent) {
            self.stats.deployments += 1;
            self.deployed.push(Contract {
                address: self.sender_addresses[sender].create(nonce),
                // The constructor's two slots.
                slots: vec![B256::ZERO, B256::with_last_byte(1)],
            });
            if p.code_bytes == 0 {
                (
                    TxKind::Create,
                    U256::ZERO,
                    Bytes::from_static(&STORE_INITCODE),
                    DEPLOY_GAS,
                )
            } else {
                // 200 gas a byte of code stored, 16 a byte of calldata, and the copy.
                let runtime = distinct_runtime(self.stats.deployments, p.code_bytes);
                let gas = DEPLOY_GAS + 220 * runtime.len() as u64;
                (
                    TxKind::Create,
                    U256::ZERO,
                    Bytes::from(store_initcode(&runtime)),
                    gas,
                )
            }
        } else if let Some(token_tx) = self.plan_token(roll) {
            token_tx
        } else if let Some(tx) = self.plan_swap_or_calldata(roll) {
            tx
        } else if roll < calls_end && !self.contracts.is_empty() {
            let (to, input, pairs) = self.plan_call();
            (
                TxKind::Call(to),
                U256::ZERO,
                input,
                CALL_BASE_GAS + CALL_PAIR_GAS * pairs,
            )
        } else {
            let to = self.plan_recipient();
            let value = U256::from(1 + self.rng.next() % 1_000_000_000_000_000);
            self.stats.transfers += 1;
            (TxKind::Call(to), value, Bytes::new(), TRANSFER_GAS)
        };
        Planned {
            sender,
            tx: Transaction::Eip1559(Eip1559Tx {
                chain_id: self.params.chain_id,
                nonce,
                max_priority_fee_per_gas: tip,
                max_fee_per_gas: MAX_FEE_PER_GAS,
                gas_limit,
                to,
                value,
                input,
                access_list: Vec::new(),
            }),
        }
    }

    /// A token or NFT tx when `roll` falls in their share (after deployments and calls).
    fn plan_token(&mut self, roll: u64) -> Option<(TxKind, U256, Bytes, u64)> {
        let p = &self.params;
        let calls = u64::from(p.deploy_percent + p.call_percent);
        let tokens = calls + u64::from(p.token_percent);
        let nfts = tokens + u64::from(p.nft_percent);
        if roll < calls || roll >= nfts {
            return None;
        }
        if roll >= tokens {
            self.stats.mints += 1;
            return Some((
                TxKind::Call(NFT_ADDRESS),
                U256::ZERO,
                Bytes::copy_from_slice(&contracts::MINT),
                MINT_GAS,
            ));
        }
        let amount = U256::from(1 + self.rng.next() % 1_000_000_000);
        let input = if self.rng.percent(80) {
            self.stats.token_transfers += 1;
            // A sender, or (fresh_percent of the time) a new holder: a new slot.
            let to = if self.rng.percent(self.params.fresh_percent) {
                let n = self.stats.token_transfers;
                Address::from_slice(
                    &keccak256([b"chaingen holder ".as_slice(), &n.to_be_bytes()].concat())[12..],
                )
            } else {
                self.sender_addresses[self.rng.below(self.sender_addresses.len())]
            };
            contracts::call_data(contracts::TRANSFER, &to, amount)
        } else {
            self.stats.approvals += 1;
            let spender = self.sender_addresses[self.rng.below(self.sender_addresses.len())];
            contracts::call_data(contracts::APPROVE, &spender, amount)
        };
        Some((
            TxKind::Call(TOKEN_ADDRESS),
            U256::ZERO,
            Bytes::from(input),
            TOKEN_GAS,
        ))
    }

    /// A swap or a calldata-heavy tx when `roll` falls in their share (after the tokens').
    fn plan_swap_or_calldata(&mut self, roll: u64) -> Option<(TxKind, U256, Bytes, u64)> {
        let p = &self.params;
        let before = u64::from(p.deploy_percent + p.call_percent + p.token_percent + p.nft_percent);
        let swaps = before + u64::from(p.swap_percent);
        let heavy = swaps + u64::from(p.calldata_percent);
        if roll < before || roll >= heavy {
            return None;
        }
        if roll < swaps {
            self.stats.swaps += 1;
            let a = self.rng.below(AMM_POOLS.into()) as u8;
            let b = (a + 1 + self.rng.below(usize::from(AMM_POOLS) - 1) as u8) % AMM_POOLS;
            let amount = U256::from(1 + self.rng.next() % 1_000_000_000_000_000_000);
            let direction = (self.rng.next() % 2) as u8;
            let input = contracts::swap_data(
                &amm_pool_address(a),
                &amm_pool_address(b),
                amount,
                direction,
            );
            return Some((
                TxKind::Call(ROUTER_ADDRESS),
                U256::ZERO,
                Bytes::from(input),
                SWAP_GAS,
            ));
        }
        self.stats.calldata_txs += 1;
        let len = self.params.calldata_bytes;
        let mut input = Vec::with_capacity(len + 32);
        while input.len() < len {
            input.extend_from_slice(self.rng.word().as_slice());
        }
        input.truncate(len);
        let to = self.sender_addresses[self.rng.below(self.sender_addresses.len())];
        // EIP-7623's floor: 10 gas a token, four tokens a nonzero byte.
        let gas = TRANSFER_GAS + 40 * len as u64;
        Some((TxKind::Call(to), U256::ZERO, Bytes::from(input), gas))
    }

    fn plan_recipient(&mut self) -> Address {
        if self.rng.percent(self.params.fresh_percent) {
            self.stats.fresh_transfers += 1;
            let a = tagged_address(b"chaingen fresh  ", self.fresh.len() as u64);
            self.fresh.push(a);
            return a;
        }
        let known = self.sender_addresses.len() + self.fresh.len() + self.params.holders;
        let i = self.rng.below(known);
        match i.checked_sub(self.sender_addresses.len()) {
            None => self.sender_addresses[i],
            Some(j) => match j.checked_sub(self.fresh.len()) {
                None => self.fresh[j],
                Some(k) => holder_address(k as u64),
            },
        }
    }

    /// A call to a deployed contract with one to three (slot, value) pairs.
    fn plan_call(&mut self) -> (Address, Bytes, u64) {
        self.stats.calls += 1;
        let c = self.rng.below(self.contracts.len());
        let pairs = 1 + self.rng.below(3);
        let mut input = Vec::with_capacity(64 * pairs);
        for _ in 0..pairs {
            let roll = self.rng.next() % 100;
            let value = U256::from(1 + self.rng.next() % (1 << 40));
            let slots = &self.contracts[c].slots;
            let (key, value) = if roll < 45 || slots.is_empty() {
                let key = self.rng.word();
                self.contracts[c].slots.push(key);
                self.stats.slots_new += 1;
                (key, value)
            } else if roll < 80 {
                let key = slots[self.rng.below(slots.len())];
                self.stats.slots_overwritten += 1;
                (key, value)
            } else {
                let i = self.rng.below(slots.len());
                let key = self.contracts[c].slots.swap_remove(i);
                self.stats.slots_zeroed += 1;
                (key, U256::ZERO)
            };
            input.extend_from_slice(key.as_slice());
            input.extend_from_slice(&value.to_be_bytes::<32>());
        }
        (self.contracts[c].address, input.into(), pairs as u64)
    }
}

/// Signs the planned transactions, spread over the cores, in their order.
fn sign_all(senders: &[Signer], planned: Vec<Planned>) -> Vec<PooledTransaction> {
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
    let chunk = planned.len().div_ceil(workers).max(8);
    let sign = |p: &[Planned]| -> Vec<PooledTransaction> {
        p.iter()
            .map(|p| {
                let tx = SignedTransaction::sign(p.tx.clone(), &senders[p.sender]);
                PooledTransaction::new(tx, None)
            })
            .collect()
    };
    if planned.len() <= chunk {
        return sign(&planned);
    }
    std::thread::scope(|s| {
        let handles: Vec<_> = planned
            .chunks(chunk)
            .map(|part| s.spawn(move || sign(part)))
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("signing does not panic"))
            .collect()
    })
}
