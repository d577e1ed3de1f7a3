//! The pool's side of the journal: appending a local tx and what a failed append
//! undoes, the rotation's snapshot of the pool's local txs, and the rules for each
//! journaled tx at start ([`Pool::reload_journal`], [`reload_fate`]).

use super::{Coming, JournalContents};
use crate::{CpuMeter, FastSet, JournalFailure, Pool, PoolTx, Rejection, TxInput, TxOrigin};
use alloy_primitives::{Address, B256};
use moat_common::transaction::PooledTransaction;
use std::sync::Arc;

/// Why a journal entry left the journal at a reload, or stayed out of the pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ReloadFate {
    /// Back in the pool.
    Readmitted,
    /// Its nonce is used on chain: mined (or another tx of the sender's was).
    Mined,
    /// A later journal entry, or a pooled tx, has the same sender and nonce.
    Replaced,
    /// The sender can no longer pay for it.
    Unaffordable,
    /// Not a valid transaction against the current chain (bytes, signature, rules).
    Invalid,
    /// Refused for now (pool full, busy, sender's slots): kept in the journal and
    /// offered again at the next start.
    Held,
}

impl ReloadFate {
    /// Every fate, in declaration order.
    pub const ALL: [ReloadFate; 6] = [
        ReloadFate::Readmitted,
        ReloadFate::Mined,
        ReloadFate::Replaced,
        ReloadFate::Unaffordable,
        ReloadFate::Invalid,
        ReloadFate::Held,
    ];

    /// The fate's label in logs and metrics (`readmitted`, `mined`, ...).
    pub fn name(self) -> &'static str {
        match self {
            ReloadFate::Readmitted => "readmitted",
            ReloadFate::Mined => "mined",
            ReloadFate::Replaced => "replaced",
            ReloadFate::Unaffordable => "unaffordable",
            ReloadFate::Invalid => "invalid",
            ReloadFate::Held => "held",
        }
    }

    /// Whether the entry stays in the journal.
    pub fn kept(self) -> bool {
        match self {
            ReloadFate::Readmitted | ReloadFate::Held => true,
            ReloadFate::Mined
            | ReloadFate::Replaced
            | ReloadFate::Unaffordable
            | ReloadFate::Invalid => false,
        }
    }
}

/// What becomes of a journal entry the pool refused at a reload. The rule table:
/// refusals that depend on the chain's state decide the entry's end, those that depend on
/// the pool's momentary state keep it.
pub(crate) fn reload_fate(refusal: &Rejection) -> ReloadFate {
    match refusal {
        Rejection::AlreadyKnown => ReloadFate::Readmitted,
        Rejection::NonceTooLow { .. } => ReloadFate::Mined,
        Rejection::ReplacementUnderpriced => ReloadFate::Replaced,
        Rejection::InsufficientFunds { .. } | Rejection::Overdraft { .. } => {
            ReloadFate::Unaffordable
        }
        Rejection::Busy
        | Rejection::OriginBusy
        | Rejection::Aborted
        | Rejection::Underpriced
        | Rejection::AccountLimit { .. }
        | Rejection::AlreadyReserved
        | Rejection::InflightLimit
        | Rejection::AuthorityReserved
        | Rejection::BlobNonceGap { .. }
        | Rejection::JournalFailed(_) => ReloadFate::Held,
        Rejection::Oversized { .. }
        | Rejection::Decode(_)
        | Rejection::RecentlyFailed
        | Rejection::Sidecar(_)
        | Rejection::Stateless(_)
        | Rejection::InvalidSender(_)
        | Rejection::SenderHasCode
        | Rejection::TooManyAuthorizations { .. }
        | Rejection::BlobsNotActive
        | Rejection::BlobFeeCapTooLow => ReloadFate::Invalid,
    }
}

/// What reloading the journal did: a count per fate, and the damage skipped.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JournalReload {
    /// Entries reloaded per fate (a fate no entry met is absent).
    pub counts: std::collections::BTreeMap<ReloadFate, usize>,
    /// Bytes of damaged records at the file's end, skipped (a write a crash cut short).
    pub damaged_tail: u64,
    /// Hashes of the readmitted txs, in the order they were admitted.
    pub readmitted: Vec<B256>,
}

impl JournalReload {
    /// Entries that met `fate` (0 if none).
    pub fn count(&self, fate: ReloadFate) -> usize {
        self.counts.get(&fate).copied().unwrap_or(0)
    }

    /// Entries reloaded, all fates together.
    pub fn total(&self) -> usize {
        self.counts.values().sum()
    }

    pub(crate) fn note(&mut self, fate: ReloadFate) {
        *self.counts.entry(fate).or_default() += 1;
    }
}

impl Pool {
    /// Appends a local tx to the journal and waits until it is durable (group commit:
    /// concurrent submissions share one sync): when the RPC call returns, the tx
    /// survives a crash. If the journal cannot make it durable, the tx leaves the pool
    /// again and the caller gets [`Rejection::JournalFailed`].
    pub(crate) async fn journal_record(&self, hash: &B256) -> Result<(), Rejection> {
        self.journal_append(hash, None, None).await
    }

    /// [`Pool::journal_record`] of a tx whose network bytes the caller has (`wire`), or
    /// announced to the journal (`coming`).
    pub(crate) async fn journal_append(
        &self,
        hash: &B256,
        wire: Option<&[u8]>,
        coming: Option<Coming>,
    ) -> Result<(), Rejection> {
        let Some(journal) = self.inner.journal.get() else {
            return Ok(());
        };
        let replaced = self.inner.replaced_locals.lock().remove(hash);
        let encoded;
        let bytes = match wire {
            Some(bytes) => bytes,
            None => match self.get(hash) {
                Some(tx) => {
                    encoded = tx.tx.encoded_2718();
                    &encoded
                }
                None => return Ok(()),
            },
        };
        // The answer promises a tx that survives a crash: one the journal could not
        // keep is withdrawn (only it: its sender's later nonces were journaled on their
        // own) and refused. Its peers may have heard of it already; that is all.
        let Err(e) = journal.append_announced(bytes, coming).await else {
            return Ok(());
        };
        let withdrawn = self.inner.pool.lock().withdraw(hash);
        tracing::warn!(%hash, withdrawn, error = %e, "local tx refused: journal write failed");
        ::metrics::counter!("moat_pool_journal_failures_total").increment(1);
        let rejection = Rejection::JournalFailed(JournalFailure::from(&e));
        self.inner.metrics.rejected(&rejection);
        // The tx it replaced was acknowledged and journaled: it goes back in, or, if the
        // pool no longer takes it, stays in the journal for the next start.
        if let Some(old) = replaced {
            let back = self
                .add_metered(
                    TxInput::Decoded(Box::new(old.tx.clone())),
                    TxOrigin::Local,
                    &mut CpuMeter::off(),
                )
                .await;
            if let Ok(added) = back {
                // Journaled already: nothing it replaced now waits for its record.
                self.inner.replaced_locals.lock().remove(&added.hash);
            } else {
                journal.hold_more(vec![old.tx.encoded_2718()]);
            }
        }
        Err(rejection)
    }

    /// Re-admits the journal's entries (origin `Journal`) and rewrites the journal from
    /// what the pool then holds (DESIGN: a promise kept across restarts):
    /// - entries are offered per sender in nonce order, under the rules that admitted
    ///   them live (an unbroken nonce run may pass the sender's slots);
    /// - of two entries with one sender and nonce, the later (the replacement) wins;
    /// - an entry leaves the journal only when it is mined, replaced, unaffordable or
    ///   invalid against the current state; one refused for a transient reason (pool
    ///   full, sender's slots) is held: kept in the journal, offered again next start.
    pub async fn reload_journal(&self, contents: JournalContents) -> JournalReload {
        let mut out = JournalReload {
            damaged_tail: contents.damaged_tail,
            ..JournalReload::default()
        };
        struct Entry {
            sender: Address,
            nonce: u64,
            position: usize,
            tx: PooledTransaction,
            bytes: Vec<u8>,
        }
        let mut seen = FastSet::default();
        let mut entries = Vec::with_capacity(contents.entries.len());
        for (position, bytes) in contents.entries.into_iter().enumerate() {
            let Ok(tx) = PooledTransaction::decode_2718(&bytes) else {
                out.note(ReloadFate::Invalid);
                continue;
            };
            let hash = tx.hash();
            if !seen.insert(hash) {
                continue; // one tx written twice is one entry
            }
            let sender = match self.inner.sender_cache.get(&hash) {
                Some(sender) => sender,
                None => match tx.tx().recover_sender() {
                    Ok(sender) => {
                        self.inner.sender_cache.insert(hash, sender);
                        sender
                    }
                    Err(_) => {
                        out.note(ReloadFate::Invalid);
                        continue;
                    }
                },
            };
            let nonce = tx.tx().tx().nonce();
            entries.push(Entry {
                sender,
                nonce,
                position,
                tx,
                bytes,
            });
        }
        entries.sort_by_key(|e| (e.sender, e.nonce, e.position));
        let mut held = Vec::new();
        let mut entries = entries.into_iter().peekable();
        while let Some(e) = entries.next() {
            if entries
                .peek()
                .is_some_and(|next| next.sender == e.sender && next.nonce == e.nonce)
            {
                out.note(ReloadFate::Replaced);
                continue;
            }
            let hash = e.tx.hash();
            let fate = match self
                .add_transaction(TxInput::Decoded(Box::new(e.tx)), TxOrigin::Journal)
                .await
            {
                Ok(_) | Err(Rejection::AlreadyKnown) => ReloadFate::Readmitted,
                Err(r) => reload_fate(&r),
            };
            out.note(fate);
            match fate {
                ReloadFate::Readmitted => out.readmitted.push(hash),
                ReloadFate::Held => held.push(e.bytes),
                ReloadFate::Mined
                | ReloadFate::Replaced
                | ReloadFate::Unaffordable
                | ReloadFate::Invalid => {}
            }
        }
        if let Some(journal) = self.inner.journal.get() {
            journal.hold(held);
            if let Err(e) = self.rotate_journal().await {
                tracing::warn!(error = %e, "pool journal could not be rewritten");
            }
        }
        out
    }

    /// Rewrites the journal from the pool's local transactions (and the entries held at
    /// the last reload), dropping what was mined or replaced since. Returns the number
    /// of records written.
    pub async fn rotate_journal(&self) -> std::io::Result<usize> {
        let Some(journal) = self.inner.journal.get() else {
            return Ok(0);
        };
        let pool = self.clone();
        journal
            .rotate(Box::new(move || {
                let locals: Vec<Arc<PoolTx>> = pool
                    .content()
                    .into_iter()
                    .flat_map(|(_, txs)| txs.into_iter().map(|(tx, _)| tx))
                    .filter(|tx| tx.origin.is_local())
                    .collect();
                locals.iter().map(|tx| tx.tx.encoded_2718()).collect()
            }))
            .await
    }
}
