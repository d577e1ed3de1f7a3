use super::system::{DEPOSIT_REQUEST_SIZE, parse_deposit};
use super::*;
use alloy_primitives::{TxKind, keccak256};
use moat_common::block::{Header, Withdrawal};
use moat_common::transaction::{Eip1559Tx, Eip7702Tx, Transaction};
use moat_common::{Authorization, SignedTransaction};
use moat_crypto::secp::Signer;
use revm::primitives::KECCAK_EMPTY;
use std::collections::HashMap;

const CHAIN_ID: u64 = 1;
const BASE_FEE: u64 = 1_000_000_000;
const COINBASE: Address = Address::repeat_byte(0xc0);

#[derive(Default)]
struct MemState {
    accounts: HashMap<Address, AccountInfo>,
    storage: HashMap<(Address, B256), U256>,
    code: HashMap<B256, Bytes>,
}

impl MemState {
    fn fund(&mut self, address: Address, wei: u128) {
        self.accounts.insert(
            address,
            AccountInfo {
                nonce: 0,
                balance: U256::from(wei),
                code_hash: KECCAK_EMPTY,
            },
        );
    }

    fn deploy(&mut self, address: Address, code: &[u8]) {
        let hash = keccak256(code);
        self.code.insert(hash, Bytes::copy_from_slice(code));
        self.accounts.insert(
            address,
            AccountInfo {
                nonce: 1,
                balance: U256::ZERO,
                code_hash: hash,
            },
        );
    }
}

impl StateReader for MemState {
    fn account(&self, address: &Address) -> Result<Option<AccountInfo>, VmError> {
        Ok(self.accounts.get(address).copied())
    }
    fn storage(&self, address: &Address, slot: &B256) -> Result<U256, VmError> {
        Ok(self
            .storage
            .get(&(*address, *slot))
            .copied()
            .unwrap_or_default())
    }
    fn code(&self, code_hash: &B256) -> Result<Option<Bytes>, VmError> {
        Ok(self.code.get(code_hash).cloned())
    }
    fn block_hash(&self, number: u64) -> Result<B256, VmError> {
        Ok(B256::from(U256::from(number)))
    }
}

fn header(fork: Fork) -> Header {
    Header {
        number: 1,
        gas_limit: 30_000_000,
        timestamp: 12,
        beneficiary: COINBASE,
        base_fee_per_gas: Some(BASE_FEE),
        excess_blob_gas: (fork >= Fork::Cancun).then_some(0),
        blob_gas_used: (fork >= Fork::Cancun).then_some(0),
        parent_beacon_block_root: (fork >= Fork::Cancun).then_some(B256::repeat_byte(0xbb)),
        ..Default::default()
    }
}

fn block(fork: Fork, txs: Vec<SignedTransaction>, withdrawals: Option<Vec<Withdrawal>>) -> Block {
    let header = header(fork);
    Block {
        hash: header.hash(),
        header,
        transactions: txs,
        ommers: vec![],
        withdrawals,
    }
}

fn call(
    signer: &Signer,
    nonce: u64,
    to: TxKind,
    value: u64,
    input: Vec<u8>,
    gas: u64,
) -> SignedTransaction {
    SignedTransaction::sign(
        Transaction::Eip1559(Eip1559Tx {
            chain_id: CHAIN_ID,
            nonce,
            max_priority_fee_per_gas: 1_000_000_000,
            max_fee_per_gas: 3_000_000_000,
            gas_limit: gas,
            to,
            value: U256::from(value),
            input: input.into(),
            access_list: vec![],
        }),
        signer,
    )
}

fn run(
    fork: Fork,
    state: &MemState,
    block: &Block,
    senders: &[Address],
) -> Result<ExecutedBlock, VmError> {
    let config = ChainConfig::all_forks_at_genesis(CHAIN_ID, fork);
    execute_block(&config, block, senders, state)
}

fn change(out: &ExecutedBlock, address: Address) -> &AccountChange {
    out.changes
        .iter()
        .find(|c| c.address == address)
        .unwrap_or_else(|| panic!("no change for {address}"))
}

const ETH: u128 = 1_000_000_000_000_000_000;

#[test]
fn plain_transfer() {
    let alice = Signer::from_seed(1);
    let bob = Address::repeat_byte(0xb0);
    let mut state = MemState::default();
    state.fund(alice.address(), ETH);
    let tx = call(&alice, 0, TxKind::Call(bob), 1_000, vec![], 21_000);
    let out = run(
        Fork::Shanghai,
        &state,
        &block(Fork::Shanghai, vec![tx], Some(vec![])),
        &[alice.address()],
    )
    .unwrap();

    assert_eq!(out.gas_used, 21_000);
    assert_eq!(out.receipts.len(), 1);
    assert!(out.receipts[0].success);
    assert_eq!(out.receipts[0].cumulative_gas_used, 21_000);
    assert!(out.requests.is_empty());
    // Effective price: base fee + the full 1 gwei tip (under the 3 gwei cap).
    let fee = 21_000u128 * 2_000_000_000;
    let a = change(&out, alice.address()).info.unwrap();
    assert_eq!(a.nonce, 1);
    assert_eq!(a.balance, U256::from(ETH - 1_000 - fee));
    let b = change(&out, bob).info.unwrap();
    assert_eq!(
        (b.nonce, b.balance, b.code_hash),
        (0, U256::from(1_000), KECCAK_EMPTY)
    );
    let c = change(&out, COINBASE).info.unwrap();
    assert_eq!(c.balance, U256::from(21_000u128 * 1_000_000_000));
    assert_eq!(out.changes.len(), 3);
    assert!(
        out.changes
            .iter()
            .all(|c| !c.storage_wiped && c.new_code.is_none())
    );
}

#[test]
fn deploy_then_call_writes_storage() {
    let alice = Signer::from_seed(2);
    let mut state = MemState::default();
    state.fund(alice.address(), ETH);
    // Runtime: sstore(0, calldataload(0)).
    let runtime = [0x60, 0x00, 0x35, 0x60, 0x00, 0x55, 0x00];
    // Init: codecopy(0, 12, 7); return(0, 7) — followed by the runtime at offset 12.
    let mut init = vec![
        0x60, 0x07, 0x60, 0x0c, 0x60, 0x00, 0x39, 0x60, 0x07, 0x60, 0x00, 0xf3,
    ];
    init.extend_from_slice(&runtime);
    let contract = alice.address().create(0);
    let deploy = call(&alice, 0, TxKind::Create, 0, init, 200_000);
    let set = call(
        &alice,
        1,
        TxKind::Call(contract),
        0,
        U256::from(42).to_be_bytes_vec(),
        100_000,
    );
    let senders = [alice.address(); 2];
    let out = run(
        Fork::Cancun,
        &state,
        &block(Fork::Cancun, vec![deploy, set], Some(vec![])),
        &senders,
    )
    .unwrap();

    assert!(out.receipts.iter().all(|r| r.success));
    assert_eq!(out.receipts[1].cumulative_gas_used, out.gas_used);
    let c = change(&out, contract);
    let info = c.info.unwrap();
    assert_eq!(info.nonce, 1, "EIP-161: contracts start at nonce 1");
    assert_eq!(info.code_hash, keccak256(runtime));
    assert_eq!(c.new_code.as_ref().map(|b| &b[..]), Some(&runtime[..]));
    assert_eq!(c.storage, vec![(B256::ZERO, U256::from(42))]);
    assert_eq!(change(&out, alice.address()).info.unwrap().nonce, 2);
}

#[test]
fn nonce_too_high_is_invalid() {
    let alice = Signer::from_seed(3);
    let mut state = MemState::default();
    state.fund(alice.address(), ETH);
    let ok = call(&alice, 0, TxKind::Call(Address::ZERO), 0, vec![], 21_000);
    let gap = call(&alice, 5, TxKind::Call(Address::ZERO), 0, vec![], 21_000);
    let senders = [alice.address(); 2];
    let err = run(
        Fork::Shanghai,
        &state,
        &block(Fork::Shanghai, vec![ok, gap], None),
        &senders,
    )
    .unwrap_err();
    match err {
        VmError::InvalidTransaction { index, reason } => {
            assert_eq!(index, 1);
            assert!(reason.to_lowercase().contains("nonce"), "{reason}");
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn block_gas_is_shared_between_txs() {
    let alice = Signer::from_seed(4);
    let mut state = MemState::default();
    state.fund(alice.address(), ETH);
    let big = call(
        &alice,
        0,
        TxKind::Call(Address::ZERO),
        0,
        vec![],
        20_000_000,
    );
    let next = call(
        &alice,
        1,
        TxKind::Call(Address::ZERO),
        0,
        vec![],
        29_990_000,
    );
    let senders = [alice.address(); 2];
    // The first used 21000, so 29_979_000 gas is left: the second asks for more. revm only
    // compares a limit with the whole block limit; the cumulative rule is ours.
    let err = run(
        Fork::Shanghai,
        &state,
        &block(Fork::Shanghai, vec![big, next], None),
        &senders,
    )
    .unwrap_err();
    assert!(
        matches!(err, VmError::InvalidTransaction { index: 1, .. }),
        "{err:?}"
    );
}

#[test]
fn broke_sender_is_invalid() {
    let alice = Signer::from_seed(5);
    let state = MemState::default();
    let tx = call(&alice, 0, TxKind::Call(Address::ZERO), 1, vec![], 21_000);
    let err = run(
        Fork::Shanghai,
        &state,
        &block(Fork::Shanghai, vec![tx], None),
        &[alice.address()],
    )
    .unwrap_err();
    assert!(
        matches!(err, VmError::InvalidTransaction { index: 0, .. }),
        "{err:?}"
    );
}

#[test]
fn withdrawals_credit_balances() {
    let rich = Address::repeat_byte(0x11);
    let fresh = Address::repeat_byte(0x22);
    let mut state = MemState::default();
    state.fund(rich, 5);
    let w = |index, address, amount| Withdrawal {
        index,
        validator_index: index,
        address,
        amount,
    };
    let ws = vec![
        w(0, rich, 1),
        w(1, fresh, 7),
        w(2, rich, 2),
        w(3, Address::repeat_byte(0x33), 0),
    ];
    let out = run(
        Fork::Shanghai,
        &state,
        &block(Fork::Shanghai, vec![], Some(ws)),
        &[],
    )
    .unwrap();
    assert_eq!(out.gas_used, 0);
    assert_eq!(
        change(&out, rich).info.unwrap().balance,
        U256::from(5 + 3 * 1_000_000_000u64)
    );
    assert_eq!(
        change(&out, fresh).info.unwrap().balance,
        U256::from(7_000_000_000u64)
    );
    // A zero withdrawal to an absent account leaves nothing behind (EIP-161).
    assert_eq!(out.changes.len(), 2);
}

/// The two request contracts as bare `STOP`s: they exist and return no requests.
fn prague_state() -> MemState {
    let mut state = MemState::default();
    state.deploy(WITHDRAWAL_REQUEST_ADDRESS, &[0x00]);
    state.deploy(CONSOLIDATION_REQUEST_ADDRESS, &[0x00]);
    state
}

#[test]
fn prague_needs_request_contracts() {
    let err = run(
        Fork::Prague,
        &MemState::default(),
        &block(Fork::Prague, vec![], Some(vec![])),
        &[],
    )
    .unwrap_err();
    assert!(matches!(err, VmError::InvalidBlock(_)), "{err:?}");
    let out = run(
        Fork::Prague,
        &prague_state(),
        &block(Fork::Prague, vec![], Some(vec![])),
        &[],
    )
    .unwrap();
    assert!(out.requests.is_empty());
    // The system calls leave no trace: not the system address, not the contracts.
    assert!(out.changes.is_empty(), "{:?}", out.changes);
}

#[test]
fn system_call_storage_is_kept() {
    // A beacon-roots stand-in that stores calldata word 0 at slot 1.
    let mut state = MemState::default();
    state.deploy(
        BEACON_ROOTS_ADDRESS,
        &[0x60, 0x00, 0x35, 0x60, 0x01, 0x55, 0x00],
    );
    let out = run(
        Fork::Cancun,
        &state,
        &block(Fork::Cancun, vec![], Some(vec![])),
        &[],
    )
    .unwrap();
    let c = change(&out, BEACON_ROOTS_ADDRESS);
    let key = B256::from(U256::from(1));
    assert_eq!(c.storage, vec![(key, U256::from_be_bytes([0xbb; 32]))]);
    assert_eq!(out.changes.len(), 1);
}

#[test]
fn eip7702_delegation_reports_code() {
    let alice = Signer::from_seed(6);
    let authority = Signer::from_seed(7);
    let target = Address::repeat_byte(0x77);
    let mut state = prague_state();
    state.fund(alice.address(), ETH);
    let auth = Authorization::sign(U256::from(CHAIN_ID), target, 0, &authority);
    let tx = SignedTransaction::sign(
        Transaction::Eip7702(Eip7702Tx {
            chain_id: CHAIN_ID,
            nonce: 0,
            max_priority_fee_per_gas: 1_000_000_000,
            max_fee_per_gas: 3_000_000_000,
            gas_limit: 100_000,
            to: Address::repeat_byte(0x99),
            value: U256::ZERO,
            input: Bytes::new(),
            access_list: vec![],
            authorization_list: vec![auth],
        }),
        &alice,
    );
    let out = run(
        Fork::Prague,
        &state,
        &block(Fork::Prague, vec![tx], Some(vec![])),
        &[alice.address()],
    )
    .unwrap();
    assert!(out.receipts[0].success);
    let c = change(&out, authority.address());
    let mut code = vec![0xef, 0x01, 0x00];
    code.extend_from_slice(target.as_slice());
    assert_eq!(c.new_code.as_ref().map(|b| &b[..]), Some(&code[..]));
    let info = c.info.unwrap();
    assert_eq!(info.nonce, 1);
    assert_eq!(info.code_hash, keccak256(&code));
}

#[test]
fn a_pre_merge_block_pays_its_miner() {
    let out = run(
        Fork::London,
        &MemState::default(),
        &block(Fork::London, vec![], None),
        &[],
    )
    .unwrap();
    let miner = change(&out, COINBASE).info.unwrap();
    assert_eq!(miner.balance, U256::from(2_000_000_000_000_000_000u128));
    // After the merge, nothing.
    let out = run(
        Fork::Paris,
        &MemState::default(),
        &block(Fork::Paris, vec![], None),
        &[],
    )
    .unwrap();
    assert!(out.changes.iter().all(|c| c.address != COINBASE));
}

#[test]
fn senders_must_match_transactions() {
    let alice = Signer::from_seed(8);
    let tx = call(&alice, 0, TxKind::Call(Address::ZERO), 0, vec![], 21_000);
    let err = run(
        Fork::Shanghai,
        &MemState::default(),
        &block(Fork::Shanghai, vec![tx], None),
        &[],
    )
    .unwrap_err();
    assert!(matches!(err, VmError::InvalidBlock(_)), "{err:?}");
}

fn deposit_log_data() -> Vec<u8> {
    let mut data = vec![0u8; 576];
    let mut put_word =
        |at: usize, v: usize| data[at + 24..at + 32].copy_from_slice(&(v as u64).to_be_bytes());
    for (i, (offset, size)) in [(160, 48), (256, 32), (320, 8), (384, 96), (512, 8)]
        .into_iter()
        .enumerate()
    {
        put_word(i * 32, offset);
        put_word(offset, size);
    }
    for (offset, size, byte) in [
        (160, 48, 1u8),
        (256, 32, 2),
        (320, 8, 3),
        (384, 96, 4),
        (512, 8, 5),
    ] {
        data[offset + 32..offset + 32 + size].fill(byte);
    }
    data
}

#[test]
fn deposit_log_parses_to_request() {
    let mut out = Vec::new();
    parse_deposit(&deposit_log_data(), &mut out).unwrap();
    assert_eq!(out.len(), DEPOSIT_REQUEST_SIZE);
    let expect: Vec<u8> = [(48, 1u8), (32, 2), (8, 3), (96, 4), (8, 5)]
        .into_iter()
        .flat_map(|(n, b)| std::iter::repeat_n(b, n))
        .collect();
    assert_eq!(out, expect);
}

#[test]
fn malformed_deposit_log_is_invalid() {
    let mut short = deposit_log_data();
    short.pop();
    assert!(matches!(
        parse_deposit(&short, &mut Vec::new()),
        Err(VmError::InvalidBlock(_))
    ));
    let mut bad_offset = deposit_log_data();
    bad_offset[31] = 0xa1;
    assert!(matches!(
        parse_deposit(&bad_offset, &mut Vec::new()),
        Err(VmError::InvalidBlock(_))
    ));
    let mut bad_size = deposit_log_data();
    bad_size[160 + 31] = 47;
    assert!(matches!(
        parse_deposit(&bad_size, &mut Vec::new()),
        Err(VmError::InvalidBlock(_))
    ));
}

#[test]
fn osaka_caps_transaction_gas() {
    let alice = Signer::from_seed(9);
    let mut state = prague_state();
    state.fund(alice.address(), ETH);
    // EIP-7825: 2^24 is the most one transaction may ask for from Osaka on.
    let ok = call(&alice, 0, TxKind::Call(Address::ZERO), 0, vec![], 1 << 24);
    let out = run(
        Fork::Osaka,
        &state,
        &block(Fork::Osaka, vec![ok], Some(vec![])),
        &[alice.address()],
    )
    .unwrap();
    assert_eq!(out.gas_used, 21_000);
    let over = call(
        &alice,
        0,
        TxKind::Call(Address::ZERO),
        0,
        vec![],
        (1 << 24) + 1,
    );
    let err = run(
        Fork::Osaka,
        &state,
        &block(Fork::Osaka, vec![over], Some(vec![])),
        &[alice.address()],
    )
    .unwrap_err();
    assert!(
        matches!(err, VmError::InvalidTransaction { index: 0, .. }),
        "{err:?}"
    );
}

/// A state whose reads count, to tell the prewarm thread's reads from the executor's,
/// and which keeps what was read and whose trie paths the trie thread asked for.
struct Counted<'a> {
    inner: &'a MemState,
    reads: std::sync::atomic::AtomicU64,
    read: parking_lot::Mutex<std::collections::HashSet<(Address, Option<B256>)>>,
    paths: parking_lot::Mutex<Vec<(Address, Option<B256>)>>,
}

impl<'a> Counted<'a> {
    fn new(inner: &'a MemState) -> Self {
        Counted {
            inner,
            reads: 0.into(),
            read: Default::default(),
            paths: Default::default(),
        }
    }
}

impl StateReader for Counted<'_> {
    fn account(&self, address: &Address) -> Result<Option<AccountInfo>, VmError> {
        self.reads
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.read.lock().insert((*address, None));
        self.inner.account(address)
    }
    fn storage(&self, address: &Address, slot: &B256) -> Result<U256, VmError> {
        self.reads
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.read.lock().insert((*address, Some(*slot)));
        self.inner.storage(address, slot)
    }
    fn warm_trie_path(&self, address: &Address, slot: Option<&B256>) {
        self.paths.lock().push((*address, slot.copied()));
    }
    fn code(&self, code_hash: &B256) -> Result<Option<Bytes>, VmError> {
        self.reads
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.inner.code(code_hash)
    }
    fn block_hash(&self, number: u64) -> Result<B256, VmError> {
        self.inner.block_hash(number)
    }
}

#[test]
fn a_prewarmed_block_executes_as_the_plain_one_whatever_the_runs_ahead_read() {
    // A counter every tx bumps (slot 0) and a per-caller counter (slot = caller): each
    // tx reads what the txs before it wrote, which the prewarm thread's runs (each alone
    // on the pre-state) never see. Senders send several txs each, so their runs past the
    // first carry nonces the pre-state does not have.
    let runtime = [
        0x60, 0x00, 0x54, 0x60, 0x01, 0x01, 0x60, 0x00, 0x55, // slot0 += 1
        0x33, 0x54, 0x60, 0x01, 0x01, 0x33, 0x55, 0x00, // slot[caller] += 1
    ];
    let counter = Address::repeat_byte(0xcc);
    let signers: Vec<Signer> = (10..16).map(Signer::from_seed).collect();
    let mut state = MemState::default();
    state.deploy(counter, &runtime);
    // Prague's request contracts, so the block runs whole.
    state.deploy(WITHDRAWAL_REQUEST_ADDRESS, &[0x00]);
    state.deploy(CONSOLIDATION_REQUEST_ADDRESS, &[0x00]);
    state
        .storage
        .insert((counter, B256::ZERO), U256::from(1000));
    for s in &signers {
        state.fund(s.address(), ETH);
    }
    let (mut txs, mut senders) = (Vec::new(), Vec::new());
    for round in 0..6u64 {
        for (i, s) in signers.iter().enumerate() {
            let tx = if (round + i as u64).is_multiple_of(3) {
                let to = Address::repeat_byte(0x40 + i as u8);
                call(s, round, TxKind::Call(to), 1_000 + round, vec![], 21_000)
            } else {
                call(s, round, TxKind::Call(counter), 0, vec![], 100_000)
            };
            txs.push(tx);
            senders.push(s.address());
        }
    }
    assert!(txs.len() >= PREWARM_MIN_TXS);
    let config = ChainConfig::all_forks_at_genesis(CHAIN_ID, Fork::Prague);
    let block = block(Fork::Prague, txs, Some(vec![]));
    let plain = execute_block(&config, &block, &senders, &state).unwrap();
    let counted = Counted::new(&state);
    let (warmed, stats) =
        execute_block_prewarmed(&config, &block, &senders, &counted, true).unwrap();
    assert_eq!(warmed, plain);
    assert!(warmed.receipts.iter().all(|r| r.success));
    let slot0 = change(&warmed, counter)
        .storage
        .iter()
        .find(|(k, _)| *k == B256::ZERO)
        .map(|(_, v)| *v);
    let bumps = warmed.receipts.len() - signers.len() * 2;
    assert_eq!(slot0, Some(U256::from(1000 + bumps)));
    let cores = crate::cores();
    assert_eq!(stats.ran, cores >= 2, "one core: no prewarm thread");
    // Each value was read from the state once, by whichever thread came first: the
    // executor's reads the cache answered are the prewarm thread's.
    let reads = counted.reads.load(std::sync::atomic::Ordering::Relaxed);
    assert!(stats.cold_reads <= reads, "{stats:?} {reads}");
    assert!(stats.warm_reads + stats.cold_reads > 0, "{stats:?}");

    // Without the speculative runs (earlier blocks wait for the flusher): the prewarm
    // thread's reads and the trie thread beside the executor give the same result; the
    // trie thread asks for the trie paths of what was read from the state only.
    let counted = Counted::new(&state);
    let (warmed, stats) =
        execute_block_prewarmed(&config, &block, &senders, &counted, false).unwrap();
    assert_eq!(warmed, plain);
    assert!(!stats.ran, "{stats:?}");
    let read = counted.read.lock();
    let paths = counted.paths.lock();
    assert!(paths.iter().all(|p| read.contains(p)), "{paths:?}");
}

#[test]
fn a_prewarmed_block_reports_the_readers_failure() {
    struct Failing;
    impl StateReader for Failing {
        fn account(&self, _: &Address) -> Result<Option<AccountInfo>, VmError> {
            Err(VmError::State("disk on fire".into()))
        }
        fn storage(&self, _: &Address, _: &B256) -> Result<U256, VmError> {
            Err(VmError::State("disk on fire".into()))
        }
        fn code(&self, _: &B256) -> Result<Option<Bytes>, VmError> {
            Ok(None)
        }
        fn block_hash(&self, _: u64) -> Result<B256, VmError> {
            Ok(B256::ZERO)
        }
    }
    let signer = Signer::from_seed(3);
    let txs: Vec<_> = (0..PREWARM_MIN_TXS as u64)
        .map(|n| call(&signer, n, TxKind::Call(Address::ZERO), 1, vec![], 21_000))
        .collect();
    let senders = vec![signer.address(); txs.len()];
    let config = ChainConfig::all_forks_at_genesis(CHAIN_ID, Fork::Shanghai);
    let block = block(Fork::Shanghai, txs, Some(vec![]));
    match execute_block_prewarmed(&config, &block, &senders, &Failing, true) {
        Err(VmError::State(msg)) => assert!(msg.contains("disk on fire"), "{msg}"),
        other => panic!("{other:?}"),
    }
}
