//! A datadir checked against itself (`moat db verify`): what a running node trusts
//! without looking, looked at once, offline.
//!
//! - **The canonical chain**: from the head down to genesis, each number's hash has its
//!   header, the header hashes to it and carries that number, its parent is the canonical
//!   block below, and the hash → number index agrees.
//! - **The head's state**: the account trie is walked from the head's state root, every
//!   node hashed against the reference its parent holds; each leaf is compared with the
//!   flat account the EVM reads, each account's storage trie is walked the same way from
//!   the storage root its leaf names and compared with the flat slots, and each contract's
//!   code is hashed against its code hash. Flat entries no trie leaf accounts for are
//!   reported too.
//! - **The pool's journal** (when given): every record intact and decodable as a
//!   transaction in network form; a torn tail (a write cut by a crash, cut off at the
//!   next start) is a note, not a problem.
//!
//! The check writes nothing of its own (opening the database may let the engine finish
//! an interrupted commit, as any open does). It reads every trie node and flat entry
//! once: its cost is linear in the state (docs/OPERATING.md gives a figure).
//!
//! At run time the same rule guards verdicts: before a block is called invalid, the flat
//! values its execution read are compared with the state trie ([`confirm_flat_reads`]),
//! so a rotted flat entry is reported as damage rather than blamed on the block.

use crate::chain::ChainError;
use crate::history::StateAtBlock;
use crate::state_root::{
    ACCOUNT_TRIE, StoreNodes, account_leaf, hashed_address, hashed_slot, head_state_root,
};
use crate::vm::{self, AccountChange, AccountInfo, StateReader, VmError};
use alloy_primitives::{Address, B256, Bytes, KECCAK256_EMPTY, U256, keccak256};
use alloy_trie::EMPTY_ROOT_HASH;
use moat_common::block::{Block, Header};
use moat_common::config::ChainConfig;
use moat_common::transaction::PooledTransaction;
use moat_mempool::read_journal;
use moat_storage::{Account, Store, StoreError};
use moat_trie::{Expected, NodeSource, range};
use parking_lot::Mutex;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Which part of the datadir a finding is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Area {
    /// The canonical chain: headers, their hashes and the number index.
    Chain,
    /// The head's state: the account and storage tries against the flat state.
    State,
    /// Contract code against its code hash.
    Code,
    /// The transaction pool's journal file.
    Journal,
}

impl Area {
    /// The area's name in the report.
    pub fn name(self) -> &'static str {
        match self {
            Area::Chain => "chain",
            Area::State => "state",
            Area::Code => "code",
            Area::Journal => "journal",
        }
    }
}

/// One thing found wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// The part of the datadir it is about.
    pub area: Area,
    /// What is wrong, in words.
    pub message: String,
}

/// What to check besides the store.
#[derive(Debug, Clone)]
pub struct VerifyOptions {
    /// The pool's journal file, if there is one to check.
    pub journal: Option<PathBuf>,
    /// Findings kept (the rest are counted).
    pub max_findings: usize,
}

impl Default for VerifyOptions {
    fn default() -> Self {
        VerifyOptions {
            journal: None,
            max_findings: 100,
        }
    }
}

/// What a check saw and found.
#[derive(Debug, Clone, Default)]
pub struct VerifyReport {
    /// The head's number and hash; `None` when the store has no head.
    pub head: Option<(u64, B256)>,
    /// The head's state root checked against.
    pub state_root: Option<B256>,
    /// Canonical headers checked.
    pub blocks: u64,
    /// Accounts in the account trie.
    pub accounts: u64,
    /// Slots in the storage tries.
    pub slots: u64,
    /// Distinct contract codes hashed.
    pub codes: u64,
    /// Journal records read.
    pub journal_records: u64,
    /// Problems, at most `max_findings` of them.
    pub findings: Vec<Finding>,
    /// Problems in all.
    pub problems: u64,
    /// Remarks that are not problems (a torn journal tail).
    pub notes: Vec<String>,
    /// Time spent checking the canonical chain.
    pub chain_time: Duration,
    /// Time spent walking the state tries (and code).
    pub state_time: Duration,
}

impl VerifyReport {
    /// Whether no problem was found.
    pub fn is_clean(&self) -> bool {
        self.problems == 0
    }

    fn problem(&mut self, max: usize, area: Area, message: String) {
        self.problems += 1;
        if self.findings.len() < max {
            self.findings.push(Finding { area, message });
        }
    }
}

/// Checks `store` (and the journal `options` names); `progress` hears a line now and
/// then. An error is a store that cannot be read at all; everything else is a finding.
pub fn verify(
    store: &Store,
    options: &VerifyOptions,
    mut progress: impl FnMut(&str),
) -> Result<VerifyReport, StoreError> {
    let mut report = VerifyReport::default();
    let max = options.max_findings;
    let started = Instant::now();
    report.head = store.head()?;
    progress("checking the canonical chain");
    let mut head_header = None;
    let chain = check_chain(store, &mut report, max, &mut progress, &mut head_header);
    stopped_by(chain, &mut report, max, Area::Chain)?;
    report.chain_time = started.elapsed();

    let started = Instant::now();
    if let Some(header) = head_header {
        report.state_root = Some(header.state_root);
        progress("checking the head's state");
        let state = check_state(store, header.state_root, &mut report, max, &mut progress);
        stopped_by(state, &mut report, max, Area::State)?;
    }
    report.state_time = started.elapsed();

    if let Some(path) = &options.journal {
        check_journal(path, &mut report, max);
    }
    match store.journal() {
        Ok(records) => {
            for (_, raw) in records {
                report.journal_records += 1;
                if let Err(e) = PooledTransaction::decode_2718(&raw) {
                    let message =
                        format!("a record of the store's journal table does not decode: {e}");
                    report.problem(max, Area::Journal, message);
                }
            }
        }
        Err(e) => {
            let message = format!("the store's journal table cannot be read: {e}");
            report.problem(max, Area::Journal, message);
        }
    }
    Ok(report)
}

/// A phase's result: a read that failed (a damaged page) stops that phase and is a
/// finding; the next phase still runs.
fn stopped_by<T>(
    result: Result<T, StoreError>,
    report: &mut VerifyReport,
    max: usize,
    area: Area,
) -> Result<Option<T>, StoreError> {
    match result {
        Ok(value) => Ok(Some(value)),
        Err(e) => {
            let message = format!(
                "a read failed and stopped the check of the {}: {e}",
                area.name()
            );
            report.problem(max, area, message);
            Ok(None)
        }
    }
}

/// The canonical chain from the head down; `head_header` gets the head's header when it
/// could be read (before a later block stops the walk). A snap-synced datadir holds
/// genesis and the blocks from its pivot on: the gap between is noted, not a problem.
fn check_chain(
    store: &Store,
    report: &mut VerifyReport,
    max: usize,
    progress: &mut impl FnMut(&str),
    head_header: &mut Option<Header>,
) -> Result<(), StoreError> {
    let Some((head_number, head_hash)) = report.head else {
        report.problem(max, Area::Chain, "no head block".to_string());
        return Ok(());
    };
    if store.canonical_hash(head_number)? != Some(head_hash) {
        let message = format!("the head {head_number} {head_hash} is not the canonical block");
        report.problem(max, Area::Chain, message);
        return Ok(());
    }
    // The lowest block above genesis the datadir holds.
    let low = store.first_canonical_from(1)?.unwrap_or(head_number).max(1);
    if low > 1 {
        report.notes.push(format!(
            "blocks 1 to {} are not held (the datadir was snap-synced)",
            low - 1
        ));
    }
    // The block checked just before (one above), whose parent must be this one.
    let mut child: Option<(u64, B256)> = None;
    let numbers = (low..=head_number).rev().chain(std::iter::once(0));
    for number in numbers {
        if number % 100_000 == 0 && number != head_number {
            progress(&format!("chain: at block {number}"));
        }
        if number == 0 && low > 1 {
            child = None;
        }
        let Some(hash) = store.canonical_hash(number)? else {
            report.problem(
                max,
                Area::Chain,
                format!("no canonical hash for block {number}"),
            );
            child = None;
            continue;
        };
        report.blocks += 1;
        let header = match store.header_rlp(&hash)? {
            None => {
                report.problem(
                    max,
                    Area::Chain,
                    format!("block {number} {hash}: no header"),
                );
                None
            }
            Some(raw) if keccak256(&raw) != hash => {
                let message = format!("block {number} {hash}: its header hashes to something else");
                report.problem(max, Area::Chain, message);
                None
            }
            Some(raw) => match Header::decode(&mut raw.as_slice()) {
                Ok(h) => Some(h),
                Err(e) => {
                    let message = format!("block {number} {hash}: header does not decode: {e}");
                    report.problem(max, Area::Chain, message);
                    None
                }
            },
        };
        if store.block_number(&hash)? != Some(number) {
            let message = format!("block {number} {hash}: the hash → number index disagrees");
            report.problem(max, Area::Chain, message);
        }
        if let Some(h) = &header {
            if h.number != number {
                let message = format!("block {number} {hash}: its header says number {}", h.number);
                report.problem(max, Area::Chain, message);
            }
            if let Some((child_number, child_parent)) = child
                && child_parent != hash
            {
                let message = format!(
                    "block {child_number}'s parent is {child_parent}, the canonical block {number} is {hash}"
                );
                report.problem(max, Area::Chain, message);
            }
        }
        child = header.as_ref().map(|h| (number, h.parent_hash));
        if number == head_number {
            *head_header = header;
        }
    }
    Ok(())
}

/// Flat slots of one account: (hashed slot, the slot when known, value).
type FlatSlots = Vec<(B256, Option<B256>, U256)>;

/// An account as execution reads it: by address, or (after a snap sync, until it is
/// written again) by hashed address in the downloaded tables.
struct FlatAccount {
    hashed: B256,
    /// `None` for an account of the downloaded tables.
    address: Option<Address>,
    account: Account,
}

impl FlatAccount {
    fn name(&self) -> String {
        match self.address {
            Some(a) => format!("account {a}"),
            None => format!("account of hashed address {}", self.hashed),
        }
    }
}

/// The head's account trie against `root` and the flat state, each storage trie against
/// its account's storage root and the flat slots, each code against its hash.
fn check_state(
    store: &Store,
    root: B256,
    report: &mut VerifyReport,
    max: usize,
    progress: &mut impl FnMut(&str),
) -> Result<(), StoreError> {
    let source = StoreNodes(store);
    // The flat accounts by hashed address, to meet the trie's leaves in their order.
    let mut flat: Vec<FlatAccount> = store
        .accounts()?
        .into_iter()
        .map(|(a, account)| FlatAccount {
            hashed: hashed_address(&a),
            address: Some(a),
            account,
        })
        .collect();
    store.snap_accounts_from(&B256::ZERO, |hashed, account| {
        flat.push(FlatAccount {
            hashed,
            address: None,
            account,
        });
        true
    })?;
    // An account in both tables is read by address (writes by address retire the other).
    flat.sort_by_key(|f| (f.hashed, f.address.is_none()));
    flat.dedup_by_key(|f| f.hashed);
    progress(&format!("state: {} flat accounts", flat.len()));

    let root_ok = match store.trie_node(&ACCOUNT_TRIE, &[])? {
        None if root != EMPTY_ROOT_HASH => {
            let message = format!("the state root {root} has no root node");
            report.problem(max, Area::State, message);
            false
        }
        Some(rlp) if keccak256(&rlp) != root => {
            let message = format!(
                "the account trie's root node hashes to {}, the head's state root is {root}",
                keccak256(&rlp)
            );
            report.problem(max, Area::State, message);
            false
        }
        _ => true,
    };

    // The account trie's leaves against the flat accounts.
    if root_ok {
        let mut at = 0usize;
        let walked = range::walk_from(&source, &ACCOUNT_TRIE, &B256::ZERO, |key, leaf| {
            report.accounts += 1;
            if report.accounts.is_multiple_of(250_000) {
                progress(&format!("state: {} accounts", report.accounts));
            }
            while at < flat.len() && flat[at].hashed < key {
                let message = format!("flat {} is in no trie leaf", flat[at].name());
                report.problem(max, Area::State, message);
                at += 1;
            }
            if at < flat.len() && flat[at].hashed == key {
                if account_leaf(&flat[at].account) != leaf {
                    let message = format!(
                        "{}: the flat record differs from its trie leaf",
                        flat[at].name()
                    );
                    report.problem(max, Area::State, message);
                }
                at += 1;
            } else {
                let message = format!("the trie leaf of hashed address {key} has no flat account");
                report.problem(max, Area::State, message);
            }
            true
        });
        match walked {
            Err(e) => {
                let message = format!("the account trie (its walk stops here): {e}");
                report.problem(max, Area::State, message);
            }
            Ok(()) => {
                for f in &flat[at..] {
                    report.problem(
                        max,
                        Area::State,
                        format!("flat {} is in no trie leaf", f.name()),
                    );
                }
            }
        }
    }

    // Storage and code are checked against the flat accounts (what execution reads),
    // whether or not the account trie could be walked to them.
    progress(&format!(
        "state: {} accounts; checking storage",
        report.accounts
    ));
    let by_address: HashMap<Address, usize> = flat
        .iter()
        .enumerate()
        .filter_map(|(i, f)| f.address.map(|a| (a, i)))
        .collect();
    let mut seen = vec![false; flat.len()];
    // Slots by address: one scan of the table, grouped as it comes.
    let mut group: Option<(Address, FlatSlots)> = None;
    let mut finish = |(address, slots): (Address, FlatSlots), report: &mut VerifyReport| {
        report.slots += slots.len() as u64;
        let owner = hashed_address(&address);
        match by_address.get(&address) {
            Some(&i) => {
                seen[i] = true;
                let name = flat[i].name();
                check_storage(
                    &source,
                    &owner,
                    &name,
                    flat[i].account.storage_root,
                    slots,
                    report,
                    max,
                );
            }
            None => {
                let message = format!(
                    "{} flat slots of {address}, which has no account",
                    slots.len()
                );
                report.problem(max, Area::State, message);
            }
        }
    };
    store.storage_entries(|address, slot, value| {
        let entry = (hashed_slot(&slot), Some(slot), value);
        match &mut group {
            Some((a, slots)) if *a == address => slots.push(entry),
            _ => {
                if let Some(done) = group.replace((address, vec![entry])) {
                    finish(done, report);
                }
            }
        }
        Ok(true)
    })?;
    if let Some(done) = group.take() {
        finish(done, report);
    }
    // Accounts of the downloaded tables: their slots are kept by hashed slot.
    for (i, f) in flat.iter().enumerate() {
        if f.address.is_some() || f.account.storage_root == EMPTY_ROOT_HASH {
            continue;
        }
        let mut slots = Vec::new();
        store.snap_slots_of(&f.hashed, |hashed, value| slots.push((hashed, None, value)))?;
        report.slots += slots.len() as u64;
        seen[i] = true;
        check_storage(
            &source,
            &f.hashed,
            &f.name(),
            f.account.storage_root,
            slots,
            report,
            max,
        );
    }
    for (f, seen) in flat.iter().zip(&seen) {
        if !seen && f.account.storage_root != EMPTY_ROOT_HASH {
            let message = format!(
                "{}: storage root {} but no flat slots",
                f.name(),
                f.account.storage_root
            );
            report.problem(max, Area::State, message);
        }
    }

    let codes: HashSet<B256> = flat
        .iter()
        .map(|f| f.account.code_hash)
        .filter(|h| *h != KECCAK256_EMPTY)
        .collect();
    progress(&format!("code: {} contracts", codes.len()));
    for hash in codes {
        report.codes += 1;
        match store.code(&hash)? {
            None => report.problem(max, Area::Code, format!("code {hash} is missing")),
            Some(code) if keccak256(&code) != hash => report.problem(
                max,
                Area::Code,
                format!("code {hash} hashes to something else"),
            ),
            Some(_) => {}
        }
    }
    Ok(())
}

/// One storage trie (of `owner`, from the storage root `root` its account names) against
/// its flat slots: (hashed slot, the slot when known, value).
fn check_storage(
    source: &StoreNodes<'_>,
    owner: &B256,
    name: &str,
    root: B256,
    slots: FlatSlots,
    report: &mut VerifyReport,
    max: usize,
) {
    let slot_name = |hashed: &B256, slot: &Option<B256>| match slot {
        Some(s) => format!("slot {s} of {name}"),
        None => format!("slot of hashed key {hashed} of {name}"),
    };
    if root == EMPTY_ROOT_HASH {
        let message = format!(
            "{} flat slots of {name}, whose account has no storage",
            slots.len()
        );
        report.problem(max, Area::State, message);
        return;
    }
    match store_root(source, owner) {
        Ok(Some(found)) if found == root => {}
        Ok(found) => {
            let message = format!(
                "the storage trie of {name} has root {}, its account names {root}",
                found.unwrap_or(EMPTY_ROOT_HASH)
            );
            report.problem(max, Area::State, message);
            return;
        }
        Err(e) => {
            report.problem(max, Area::State, format!("the storage trie of {name}: {e}"));
            return;
        }
    }
    let mut flat = slots;
    flat.sort_unstable_by_key(|(h, _, _)| *h);
    let mut at = 0usize;
    let walked = range::walk_from(source, owner, &B256::ZERO, |key, leaf| {
        while at < flat.len() && flat[at].0 < key {
            let message = format!("{} is in no trie leaf", slot_name(&flat[at].0, &flat[at].1));
            report.problem(max, Area::State, message);
            at += 1;
        }
        if at < flat.len() && flat[at].0 == key {
            if alloy_rlp::encode(flat[at].2) != leaf {
                let message = format!(
                    "{}: the flat value differs from its trie leaf",
                    slot_name(&flat[at].0, &flat[at].1)
                );
                report.problem(max, Area::State, message);
            }
            at += 1;
        } else {
            let message = format!("the storage trie leaf {key} of {name} has no flat slot");
            report.problem(max, Area::State, message);
        }
        true
    });
    match walked {
        Err(e) => report.problem(max, Area::State, format!("the storage trie of {name}: {e}")),
        Ok(()) => {
            for (hashed, slot, _) in &flat[at..] {
                let message = format!("{} is in no trie leaf", slot_name(hashed, slot));
                report.problem(max, Area::State, message);
            }
        }
    }
}

/// The hash of the stored root node of trie `owner` (`None`: no root node).
fn store_root(source: &StoreNodes<'_>, owner: &B256) -> Result<Option<B256>, StoreError> {
    Ok(source.0.trie_node(owner, &[])?.map(keccak256))
}

/// The journal file at `path`: every record intact and a transaction.
fn check_journal(path: &std::path::Path, report: &mut VerifyReport, max: usize) {
    let contents = match read_journal(path) {
        Ok(c) => c,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            report
                .notes
                .push(format!("no journal at {}", path.display()));
            return;
        }
        Err(e) => {
            let message = format!("cannot read the journal {}: {e}", path.display());
            report.problem(max, Area::Journal, message);
            return;
        }
    };
    for (i, raw) in contents.entries.iter().enumerate() {
        report.journal_records += 1;
        if let Err(e) = PooledTransaction::decode_2718(raw) {
            let message = format!("journal record {i} does not decode as a transaction: {e}");
            report.problem(max, Area::Journal, message);
        }
    }
    if contents.damaged_tail > 0 {
        report.notes.push(format!(
            "{} bytes after the journal's last intact record (a record a crash cut, or \
             damage): the next start drops them",
            contents.damaged_tail
        ));
    }
}

/// A [`StateReader`] that notes every account and slot read through it.
struct Recording<'a> {
    inner: &'a dyn StateReader,
    accounts: Mutex<BTreeSet<Address>>,
    slots: Mutex<BTreeSet<(Address, B256)>>,
}

impl StateReader for Recording<'_> {
    fn account(&self, address: &Address) -> Result<Option<AccountInfo>, VmError> {
        self.accounts.lock().insert(*address);
        self.inner.account(address)
    }
    fn storage(&self, address: &Address, slot: &B256) -> Result<U256, VmError> {
        self.accounts.lock().insert(*address);
        self.slots.lock().insert((*address, *slot));
        self.inner.storage(address, slot)
    }
    fn code(&self, code_hash: &B256) -> Result<Option<Bytes>, VmError> {
        self.inner.code(code_hash)
    }
    fn block_hash(&self, number: u64) -> Result<B256, VmError> {
        self.inner.block_hash(number)
    }
    fn state_root_with(&self, changes: &[AccountChange]) -> Result<Option<B256>, VmError> {
        self.inner.state_root_with(changes)
    }
}

/// Checks the flat state a block read against the state trie, before the block is
/// called invalid: `block` is executed again on the head's state with every account and
/// slot it reads noted, and each noted flat value is compared with the trie's leaf, read
/// from the head's state root with every node hashed against its parent's reference.
/// `Err` (a [`StoreError::Corrupt`]) when a flat value differs from its leaf: the
/// verdict would have been the file's fault, not the block's. Run only on the way to an
/// invalid verdict, so its cost (a second execution) is paid by rejected blocks alone.
pub fn confirm_flat_reads(
    config: &ChainConfig,
    store: &Store,
    block: &Block,
    senders: &dyn vm::Senders,
) -> Result<(), ChainError> {
    let Some(root) = head_state_root(store)? else {
        return Ok(());
    };
    let head = StateAtBlock::head(store.clone());
    let recording = Recording {
        inner: &head,
        accounts: Mutex::default(),
        slots: Mutex::default(),
    };
    // The outcome is known to be a failure; what matters is what it read.
    let _ = vm::execute_block_with(config, block, senders, &recording);
    let source = StoreNodes(store);
    let corrupt = |e: moat_trie::TrieError| ChainError::Store(StoreError::Corrupt(e.to_string()));
    if root != EMPTY_ROOT_HASH {
        source
            .node_expected(&ACCOUNT_TRIE, &[], Expected::Root(&root))
            .map_err(corrupt)?;
    }
    let differs = |what: String| {
        ChainError::Store(StoreError::Corrupt(format!(
            "{what}: the flat state differs from the state trie"
        )))
    };
    let mut storage_roots: HashMap<Address, B256> = HashMap::new();
    for address in recording.accounts.into_inner() {
        let leaf =
            range::get(&source, &ACCOUNT_TRIE, &hashed_address(&address)).map_err(corrupt)?;
        let flat = store.account(&address)?;
        if leaf != flat.as_ref().map(account_leaf) {
            return Err(differs(format!("account {address}")));
        }
        storage_roots.insert(address, flat.map_or(EMPTY_ROOT_HASH, |a| a.storage_root));
    }
    for (address, slot) in recording.slots.into_inner() {
        let storage_root = storage_roots
            .get(&address)
            .copied()
            .unwrap_or(EMPTY_ROOT_HASH);
        let owner = hashed_address(&address);
        let leaf = if storage_root == EMPTY_ROOT_HASH {
            None
        } else {
            source
                .node_expected(&owner, &[], Expected::Root(&storage_root))
                .map_err(corrupt)?;
            range::get(&source, &owner, &hashed_slot(&slot)).map_err(corrupt)?
        };
        let flat = store.storage(&address, &slot)?;
        let flat_leaf = (!flat.is_zero()).then(|| alloy_rlp::encode(flat));
        if leaf != flat_leaf {
            return Err(differs(format!("slot {slot} of {address}")));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
