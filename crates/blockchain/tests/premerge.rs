//! A short proof-of-work chain built here and imported: Homestead blocks whose receipts
//! carry post-state roots, the DAO fork block, a London block with an ommer, then the
//! terminal-total-difficulty transition to proof of stake. Balances say the rewards and
//! the DAO drain were applied; the chain refuses proof of work past the terminal total
//! difficulty and proof of stake before it, and bad ommers.

use alloy_primitives::{Address, B256, Bloom, Bytes, TxKind, U256};
use moat_blockchain::chain::{Chain, ChainError, state_root_after};
use moat_blockchain::header::{next_block_base_fee, ommers_hash};
use moat_blockchain::history::StateAtBlock;
use moat_blockchain::premerge::{calc_difficulty, dao};
use moat_blockchain::vm;
use moat_common::SignedTransaction;
use moat_common::block::{Block, Header};
use moat_common::config::Genesis;
use moat_common::receipt;
use moat_common::transaction::{LegacyTx, Transaction};
use moat_crypto::secp::Signer;
use moat_storage::Store;

const ETHER: u128 = 1_000_000_000_000_000_000;
const GAS_PRICE: u128 = 2_000_000_000;
const CHAIN_ID: u64 = 1337;
/// Genesis and the next four blocks at about 131,072 each: reached by block 4.
const TTD: u64 = 5 * 131_072;

fn signer() -> Signer {
    Signer::from_bytes(&B256::repeat_byte(0x42)).unwrap()
}

fn genesis() -> Genesis {
    let json = format!(
        r#"{{
        "config": {{
            "chainId": {CHAIN_ID}, "homesteadBlock": 0, "daoForkBlock": 2, "daoForkSupport": true,
            "eip150Block": 2, "eip155Block": 2, "eip158Block": 2,
            "byzantiumBlock": 3, "constantinopleBlock": 3, "petersburgBlock": 3,
            "istanbulBlock": 3, "berlinBlock": 3, "londonBlock": 3,
            "terminalTotalDifficulty": {TTD}
        }},
        "difficulty": "0x20000", "gasLimit": "0x1000000", "timestamp": "0x0",
        "extraData": "0x", "nonce": "0x0", "mixHash": "0x{zero}", "coinbase": "0x{zeroa}",
        "alloc": {{
            "{sender}": {{ "balance": "{fund}" }},
            "{dao0}": {{ "balance": "{ether}" }},
            "{dao1}": {{ "balance": "{ether}" }}
        }}
    }}"#,
        zero = "00".repeat(32),
        zeroa = "00".repeat(20),
        sender = signer().address(),
        dao0 = dao::DRAIN_LIST[0],
        dao1 = dao::DRAIN_LIST[1],
        fund = 1000 * ETHER,
        ether = ETHER,
    );
    Genesis::from_json(&json).unwrap()
}

fn transfer(nonce: u64, to: Address, value: u64) -> SignedTransaction {
    SignedTransaction::sign(
        Transaction::Legacy(LegacyTx {
            chain_id: None,
            nonce,
            gas_price: GAS_PRICE,
            gas_limit: 21_000,
            to: TxKind::Call(to),
            value: U256::from(value),
            input: Bytes::new(),
        }),
        &signer(),
    )
}

/// What one block should hold.
struct Spec {
    txs: Vec<SignedTransaction>,
    ommers: Vec<Header>,
    miner: Address,
    extra: &'static [u8],
    pos: bool,
    /// Seconds after the parent.
    gap: u64,
}

impl Spec {
    fn new(miner: u8) -> Self {
        Spec {
            txs: Vec::new(),
            ommers: Vec::new(),
            miner: Address::repeat_byte(miner),
            extra: b"",
            pos: false,
            gap: 10,
        }
    }
}

/// Seals a block on `parent` whose roots come from executing it on the chain's head.
fn seal(chain: &Chain, parent: &Header, spec: Spec) -> Block {
    let config = chain.config();
    let number = parent.number + 1;
    let timestamp = parent.timestamp + spec.gap;
    let base_fee = next_block_base_fee(config, parent, timestamp);
    let gas_limit = if base_fee.is_some() && parent.base_fee_per_gas.is_none() {
        parent.gas_limit * 2
    } else {
        parent.gas_limit
    };
    let mut block = Block {
        header: Header {
            parent_hash: parent.hash(),
            ommers_hash: ommers_hash(&spec.ommers),
            beneficiary: spec.miner,
            difficulty: if spec.pos {
                U256::ZERO
            } else {
                calc_difficulty(config, timestamp, parent)
            },
            number,
            gas_limit,
            timestamp,
            extra_data: Bytes::from_static(spec.extra),
            mix_hash: if spec.pos {
                B256::repeat_byte(5)
            } else {
                B256::ZERO
            },
            base_fee_per_gas: base_fee,
            ..Header::default()
        },
        hash: B256::ZERO,
        transactions: spec.txs,
        ommers: spec.ommers,
        withdrawals: None,
    };
    block.header.transactions_root = block.transactions_root();
    let senders = vec![signer().address(); block.transactions.len()];
    if chain.head().unwrap().1 == block.header.parent_hash {
        let state = StateAtBlock::head(chain.store().clone());
        let executed = vm::execute_block(config, &block, &senders, &state).unwrap();
        block.header.gas_used = executed.gas_used;
        block.header.receipts_root = receipt::receipts_root(&executed.receipts);
        block.header.logs_bloom = executed
            .receipts
            .iter()
            .fold(Bloom::ZERO, |acc, r| acc | r.bloom());
        block.header.state_root = state_root_after(chain.store(), &executed.changes)
            .unwrap()
            .0;
    }
    block.hash = block.header.hash();
    block
}

fn balance(chain: &Chain, a: Address) -> U256 {
    chain
        .store()
        .account(&a)
        .unwrap()
        .map_or(U256::ZERO, |a| a.balance)
}

fn import(chain: &Chain, block: &Block) {
    chain
        .import(block)
        .unwrap_or_else(|e| panic!("block {}: {e}", block.header.number));
}

#[test]
fn a_pow_chain_with_the_dao_fork_ommers_and_the_merge_imports() {
    let genesis = genesis();
    let chain = Chain::init(Store::in_memory(), &genesis).unwrap();
    let g = chain.head_header().unwrap();
    let fee = U256::from(21_000 * GAS_PRICE);

    // 1: Homestead, one transfer; its receipt carries a state root.
    let mut spec = Spec::new(0xa1);
    spec.txs = vec![transfer(0, Address::repeat_byte(0x11), 7)];
    let b1 = seal(&chain, &g, spec);
    import(&chain, &b1);
    let receipts = chain.receipts(&b1.hash).unwrap().unwrap();
    assert!(receipts[0].post_state.is_some());
    // Frontier-era reward plus the whole gas price (no base fee yet).
    assert_eq!(
        balance(&chain, Address::repeat_byte(0xa1)),
        U256::from(5 * ETHER) + fee
    );

    // 2: the DAO fork block must say so in its extra data.
    let mut spec = Spec::new(0xa2);
    spec.txs = vec![transfer(1, Address::repeat_byte(0x11), 7)];
    let unmarked = seal(&chain, &b1.header, spec);
    assert!(matches!(
        chain.import(&unmarked),
        Err(ChainError::Header { .. })
    ));
    let mut spec = Spec::new(0xa2);
    spec.txs = vec![transfer(1, Address::repeat_byte(0x11), 7)];
    spec.extra = dao::FORK_BLOCK_EXTRA;
    let b2 = seal(&chain, &b1.header, spec);
    import(&chain, &b2);
    assert_eq!(balance(&chain, dao::DRAIN_LIST[0]), U256::ZERO);
    assert_eq!(balance(&chain, dao::DRAIN_LIST[1]), U256::ZERO);
    assert_eq!(balance(&chain, dao::REFUND_CONTRACT), U256::from(2 * ETHER));
    assert_eq!(balance(&chain, Address::repeat_byte(0x11)), U256::from(14));

    // A sibling of block 2 (another miner), stored as a side block, then an ommer.
    let mut spec = Spec::new(0xee);
    spec.extra = dao::FORK_BLOCK_EXTRA;
    spec.gap = 11;
    let uncle = seal(&chain, &b1.header, spec);
    chain.store_side_block(&uncle).unwrap();
    assert!(!chain.is_canonical(&uncle.hash).unwrap());

    // 3: the first London (and Constantinople) block, with the ommer. Two copies of
    // it are refused.
    let mut spec = Spec::new(0xa3);
    spec.ommers = vec![uncle.header.clone(), uncle.header.clone()];
    spec.extra = dao::FORK_BLOCK_EXTRA;
    let twice = seal(&chain, &b2.header, spec);
    let err = chain.import(&twice).unwrap_err();
    assert!(err.to_string().contains("duplicate ommer"), "{err}");
    let mut spec = Spec::new(0xa3);
    spec.ommers = vec![uncle.header.clone()];
    spec.extra = dao::FORK_BLOCK_EXTRA;
    let b3 = seal(&chain, &b2.header, spec);
    import(&chain, &b3);
    // The ommer's miner: (2 + 8 − 3) / 8 of the 2-ether reward; the block's miner the
    // reward and 1/32 of it.
    assert_eq!(
        balance(&chain, Address::repeat_byte(0xee)),
        U256::from(2 * ETHER * 7 / 8)
    );
    assert_eq!(
        balance(&chain, Address::repeat_byte(0xa3)),
        U256::from(2 * ETHER + 2 * ETHER / 32)
    );
    assert!(chain.receipts(&b3.hash).unwrap().unwrap().is_empty());

    // 4: proof of stake is refused before the terminal total difficulty.
    let mut spec = Spec::new(0xa4);
    spec.pos = true;
    spec.extra = dao::FORK_BLOCK_EXTRA;
    let early = seal(&chain, &b3.header, spec);
    let err = chain.import(&early).unwrap_err();
    assert!(err.to_string().contains("before the terminal"), "{err}");
    let mut spec = Spec::new(0xa4);
    spec.extra = dao::FORK_BLOCK_EXTRA;
    let b4 = seal(&chain, &b3.header, spec);
    import(&chain, &b4);
    // Block 3 had an ommer, so block 4's difficulty rose by 1/2048.
    assert_eq!(b4.header.difficulty, U256::from(131_072 + 64));
    assert!(chain.total_difficulty(&b4.header).unwrap() >= U256::from(TTD));

    // 5: past the terminal total difficulty proof of work is refused, and the first
    // proof-of-stake block pays no reward.
    let mut spec = Spec::new(0xa5);
    spec.extra = dao::FORK_BLOCK_EXTRA;
    let late = seal(&chain, &b4.header, spec);
    let err = chain.import(&late).unwrap_err();
    assert!(err.to_string().contains("past the terminal"), "{err}");
    let mut spec = Spec::new(0xa5);
    spec.pos = true;
    let b5 = seal(&chain, &b4.header, spec);
    import(&chain, &b5);
    assert_eq!(balance(&chain, Address::repeat_byte(0xa5)), U256::ZERO);
    assert_eq!(chain.head().unwrap(), (5, b5.hash));
}
