//! [`SnapServer`]: finds the state of a served root (the head's, or an older one
//! through the undo records, kept in a small cache), answers a request from it within
//! the time budget, and warms the page cache for the first peers.

use super::message::{SnapMessage, empty_answer};
use super::serve::{TIME_BUDGET, account_range, byte_codes, storage_ranges, trie_nodes};
use alloy_primitives::B256;
use moat_blockchain::chain::Chain;
use moat_blockchain::history::StateAtBlock;
use parking_lot::Mutex;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// How many recent canonical state roots are served (the head and the 127 before it).
pub const SERVED_ROOTS: u64 = 128;
/// The served roots with their block numbers, and the head hash they were read under.
type RootIndex = Option<(B256, Vec<(B256, u64)>)>;

/// Finds the state of a served root and answers snap requests from it. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct SnapServer {
    /// The served roots with their block numbers (newest first), for the head they
    /// were read at.
    roots: Arc<Mutex<RootIndex>>,
    /// The states last served, by head hash and block number: an older state is the
    /// head's with up to 127 undo records laid over it, too costly to rebuild for every
    /// request of a peer that syncs from it.
    states: Arc<Mutex<Vec<CachedState>>>,
    /// Requests answered since the start; the page-cache warm-up ([`SnapServer::warm`])
    /// holds a weak handle to it and stops once the server is dropped.
    answered: Arc<AtomicU64>,
}

/// A state kept for the next requests: (head hash, block number, state).
type CachedState = (B256, u64, Arc<StateAtBlock>);
/// How many states are kept.
const CACHED_STATES: usize = 4;

impl SnapServer {
    /// The number of the newest of the last [`SERVED_ROOTS`] canonical blocks whose
    /// state root is `root`, with the head hash it was found under.
    fn block_of(&self, chain: &Chain, root: &B256) -> Option<(u64, B256)> {
        let (head, head_hash) = chain.head().ok()?;
        let mut roots = self.roots.lock();
        if roots.as_ref().is_none_or(|(h, _)| *h != head_hash) {
            let mut list = Vec::with_capacity(SERVED_ROOTS as usize);
            for n in (head.saturating_sub(SERVED_ROOTS - 1)..=head).rev() {
                if let Ok(Some(header)) = chain.header_by_number(n) {
                    list.push((header.state_root, n));
                }
            }
            *roots = Some((head_hash, list));
        }
        let (_, list) = roots.as_ref()?;
        list.iter()
            .find(|(r, _)| r == root)
            .map(|(_, n)| (*n, head_hash))
    }

    /// The state after block `number` under head `head_hash`, from the cache or built.
    fn state(&self, chain: &Chain, head_hash: B256, number: u64) -> Option<Arc<StateAtBlock>> {
        {
            let mut states = self.states.lock();
            states.retain(|(h, _, _)| *h == head_hash);
            if let Some((_, _, s)) = states.iter().find(|(_, n, _)| *n == number) {
                return Some(s.clone());
            }
        }
        // Built outside the lock: two requests may build the same state at once.
        let state = Arc::new(chain.state_at(number).ok()?);
        let mut states = self.states.lock();
        if states.len() >= CACHED_STATES {
            states.remove(0);
        }
        states.push((head_hash, number, state.clone()));
        Some(state)
    }

    /// The answer to a request; `None` for a message that is not one (we ask peers for
    /// nothing over snap yet, so their answers are dropped).
    pub fn answer(&self, chain: &Chain, msg: &SnapMessage) -> Option<SnapMessage> {
        let started = Instant::now();
        self.answered.fetch_add(1, Ordering::Relaxed);
        let deadline = started + TIME_BUDGET;
        // A block imported while the answer is read changes the trie under it: read
        // again once, then give up with an empty answer.
        let mut answer = None;
        for _ in 0..2 {
            let (read, stable) = self.answer_once(chain, msg, deadline)?;
            if stable {
                answer = Some(read);
                break;
            }
        }
        metrics::histogram!("moat_snap_serve_seconds", "msg" => msg.name())
            .record(started.elapsed());
        answer.or_else(|| empty_answer(msg))
    }

    /// The answer, and whether the head stayed the same while it was read.
    fn answer_once(
        &self,
        chain: &Chain,
        msg: &SnapMessage,
        deadline: Instant,
    ) -> Option<(SnapMessage, bool)> {
        // Leaves are scanned from the trie-node table, through the undo records for an
        // older state.
        let state_for = |root: &B256| {
            let (number, head_hash) = self.block_of(chain, root)?;
            Some((self.state(chain, head_hash, number)?, head_hash))
        };
        let unchanged = |head_hash: B256| chain.head().ok().map(|(_, h)| h) == Some(head_hash);
        Some(match msg {
            SnapMessage::GetAccountRange {
                request_id,
                root,
                origin,
                limit,
                bytes,
            } => {
                let Some((state, head)) = state_for(root) else {
                    return Some((empty_answer(msg)?, true));
                };
                let (accounts, proof) =
                    account_range(&*state, Some(&state), origin, limit, *bytes, deadline)
                        .unwrap_or_else(|e| {
                            tracing::warn!(error = %e, "snap: account range not served");
                            Default::default()
                        });
                let answer = SnapMessage::AccountRange {
                    request_id: *request_id,
                    accounts,
                    proof,
                };
                (answer, unchanged(head))
            }
            SnapMessage::GetStorageRanges {
                request_id,
                root,
                accounts,
                origin,
                limit,
                bytes,
            } => {
                let Some((state, head)) = state_for(root) else {
                    return Some((empty_answer(msg)?, true));
                };
                let (slots, proof) = storage_ranges(
                    &*state,
                    Some(&state),
                    accounts,
                    origin,
                    limit,
                    *bytes,
                    deadline,
                )
                .unwrap_or_else(|e| {
                    tracing::warn!(error = %e, "snap: storage ranges not served");
                    Default::default()
                });
                let answer = SnapMessage::StorageRanges {
                    request_id: *request_id,
                    slots,
                    proof,
                };
                (answer, unchanged(head))
            }
            SnapMessage::GetByteCodes {
                request_id,
                hashes,
                bytes,
            } => {
                let store = chain.store();
                let codes = byte_codes(|h| store.code(h).ok().flatten(), hashes, *bytes);
                let answer = SnapMessage::ByteCodes {
                    request_id: *request_id,
                    codes,
                };
                (answer, true)
            }
            SnapMessage::GetTrieNodes {
                request_id,
                root,
                paths,
                bytes,
            } => {
                let Some((state, head)) = state_for(root) else {
                    return Some((empty_answer(msg)?, true));
                };
                let nodes = trie_nodes(&*state, paths, *bytes, deadline).unwrap_or_else(|e| {
                    tracing::warn!(error = %e, "snap: trie nodes not served");
                    Vec::new()
                });
                let answer = SnapMessage::TrieNodes {
                    request_id: *request_id,
                    nodes,
                };
                (answer, unchanged(head))
            }
            SnapMessage::AccountRange { .. }
            | SnapMessage::StorageRanges { .. }
            | SnapMessage::ByteCodes { .. }
            | SnapMessage::TrieNodes { .. } => return None,
        })
    }
}

impl SnapServer {
    /// Warms the database's page cache with the trie-node table
    /// ([`moat_storage::Store::warm_trie_nodes`], bounded by the page cache's share of
    /// `--cache`) on a thread of its own at nice 19, so that the first peer to sync from
    /// a node just started does not wait for the pages to be read and the memory for them
    /// handed out. Returns at once: the node serves meanwhile. A peer that asks before
    /// the read is done does not stop it: the read goes on ahead of that peer's pass over
    /// the trie (both go in key order), on the CPU the serving leaves idle, since a nice-19
    /// thread gets about 1.5 % of a core that a serving thread wants. The thread stops
    /// once this server is dropped or when it is done; it is never started for a store
    /// without a page cache.
    /// The thread's handle gives what it read (`None` when no thread was started).
    pub fn warm(
        &self,
        chain: &Chain,
    ) -> Option<std::thread::JoinHandle<Result<moat_storage::Warmed, moat_storage::StoreError>>>
    {
        let store = chain.store().clone();
        if store.warm_budget() == 0 {
            return None;
        }
        let answered = Arc::downgrade(&self.answered);
        let spawned = std::thread::Builder::new()
            .name("moat-warm".into())
            .spawn(move || {
                // Failure leaves the thread at normal priority.
                moat_sched::nice_this_thread();
                let started = Instant::now();
                // The server's counter is the liveness token: gone once it is dropped.
                let go_on = || answered.strong_count() > 0;
                let warmed = store.warm_trie_nodes(go_on);
                match &warmed {
                    Ok(w) => tracing::info!(
                        nodes = w.entries,
                        mb = w.bytes >> 20,
                        end = ?w.end,
                        secs = format!("{:.2}", started.elapsed().as_secs_f64()),
                        "page cache warmed with the trie nodes"
                    ),
                    Err(e) => tracing::warn!(error = %e, "page cache warm-up failed"),
                }
                warmed
            });
        spawned
            .inspect_err(|e| tracing::warn!(error = %e, "page cache warm-up not started"))
            .ok()
    }

    /// Requests answered since the start.
    pub fn answered(&self) -> u64 {
        self.answered.load(Ordering::Relaxed)
    }
}
