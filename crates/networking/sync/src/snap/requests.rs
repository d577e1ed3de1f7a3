//! Asking peers: each request carries its [`Work`], goes to an idle snap/1 peer
//! (one request per peer), and comes back as an [`Answer`]. A peer that fails or
//! answers empty is rested for a moment; one that answers what was not asked is
//! reported as a fault; when every peer answers empty for a while, the pivot is stale.

use super::heal::HealTask;
use super::{Run, SnapError};
use crate::source::BlockSource;
use alloy_primitives::{B256, Bytes};
use moat_p2p::RequestError;
use moat_p2p::rlpx::PeerId;
use moat_p2p::snap::SnapMessage;
use moat_trie::compact_path;
use std::collections::{HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};
use tokio::task::JoinSet;

/// How long a peer that answered empty (or failed) is not asked again.
pub(super) const REST: Duration = Duration::from_secs(2);

/// Empty answers since the last useful one after which the pivot counts as stale, once
/// every snap peer has failed since that answer too. Few enough that a node with one
/// peer finds the pivot stale (a peer is asked once a `REST`) before `give_up_after`.
pub(super) const STALE_AFTER: u32 = 8;

/// One request and what it was for.
pub(super) enum Work {
    Accounts {
        chunk: usize,
        origin: B256,
        limit: B256,
    },
    /// Accounts (hash, storage root) by index into the storage list; `origin` is where
    /// the first one's slots start (non-zero for a large trie continued).
    Storage {
        first: usize,
        accounts: Vec<(B256, B256)>,
        origin: B256,
    },
    Codes {
        hashes: Vec<B256>,
    },
    /// Trie nodes to heal.
    Nodes {
        tasks: Vec<HealTask>,
    },
}

/// The requests in flight of a stage.
pub(super) type Requests = JoinSet<Result<SnapMessage, RequestError>>;

pub(super) struct Answer {
    pub(super) peer: PeerId,
    pub(super) work: Work,
    pub(super) result: Result<SnapMessage, RequestError>,
}

/// Which peers may be asked, and which are resting.
#[derive(Default)]
pub(super) struct Peers {
    busy: HashSet<PeerId>,
    resting: HashMap<PeerId, Instant>,
    /// Empty answers since the last useful one.
    empty_streak: u32,
    /// Peers that answered empty, failed or lied since the last useful answer: the
    /// pivot is stale only once every snap peer is among them.
    unhelpful: HashSet<PeerId>,
}

impl<S: BlockSource> Run<'_, S> {
    /// A peer free to ask now, if any.
    pub(super) fn idle_peer(&mut self) -> Option<PeerId> {
        let now = Instant::now();
        self.peers.resting.retain(|_, until| *until > now);
        self.source
            .snap_peers()
            .into_iter()
            .find(|p| !self.peers.busy.contains(p) && !self.peers.resting.contains_key(p))
    }

    pub(super) fn spawn(&mut self, set: &mut Requests, peer: PeerId, work: Work, root: B256) {
        let bytes = self.cfg.response_bytes;
        let msg = match &work {
            Work::Accounts { origin, limit, .. } => SnapMessage::GetAccountRange {
                request_id: 0,
                root,
                origin: *origin,
                limit: *limit,
                bytes,
            },
            Work::Storage {
                accounts, origin, ..
            } => SnapMessage::GetStorageRanges {
                request_id: 0,
                root,
                accounts: accounts.iter().map(|a| a.0).collect(),
                origin: *origin,
                limit: B256::repeat_byte(0xff),
                bytes,
            },
            Work::Codes { hashes } => SnapMessage::GetByteCodes {
                request_id: 0,
                hashes: hashes.clone(),
                bytes,
            },
            Work::Nodes { tasks } => SnapMessage::GetTrieNodes {
                request_id: 0,
                root,
                paths: tasks
                    .iter()
                    .map(|t| {
                        let path = Bytes::from(compact_path(&t.path));
                        if t.owner == B256::ZERO {
                            vec![path]
                        } else {
                            vec![Bytes::copy_from_slice(t.owner.as_slice()), path]
                        }
                    })
                    .collect(),
                bytes,
            },
        };
        self.peers.busy.insert(peer);
        let source = self.source.clone();
        let task = set.spawn(async move { source.snap_request(peer, msg).await });
        self.asked.insert(task.id(), (peer, work));
    }

    /// Waits for the next answer, or a moment when nothing is in flight (`None`); gives
    /// up when no useful answer came since `waited` for `give_up_after`.
    pub(super) async fn next(
        &mut self,
        set: &mut Requests,
        waited: Instant,
    ) -> Result<Option<Answer>, SnapError> {
        let a = if set.is_empty() {
            tokio::time::sleep(Duration::from_millis(200)).await;
            None
        } else {
            // A request whose task panicked failed: its work is asked again.
            let (id, result) = match set.join_next_with_id().await {
                Some(Ok((id, result))) => (id, result),
                Some(Err(e)) => (e.id(), Err(RequestError::Disconnected)),
                None => return Ok(None),
            };
            self.asked.remove(&id).map(|(peer, work)| {
                self.peers.busy.remove(&peer);
                Answer { peer, work, result }
            })
        };
        if waited.elapsed() > self.cfg.give_up_after {
            return Err(SnapError::NoPeers);
        }
        Ok(a)
    }

    /// Hands queued work to the idle peers, then waits as [`Self::next`] and takes the
    /// answer as [`Self::content`]: its content when it is of the kind asked, `None`
    /// when nothing came yet or the answer was dealt with (its work queued again).
    pub(super) async fn dispatch<T>(
        &mut self,
        set: &mut Requests,
        queue: &mut VecDeque<Work>,
        root: B256,
        waited: Instant,
        not_asked: &str,
        pick: impl FnOnce(SnapMessage) -> Option<T>,
    ) -> Result<Option<(PeerId, Work, T)>, SnapError> {
        while !queue.is_empty() {
            let Some(peer) = self.idle_peer() else { break };
            let Some(w) = queue.pop_front() else { break };
            self.spawn(set, peer, w, root);
        }
        Ok(match self.next(set, waited).await? {
            Some(a) => self.content(a, queue, not_asked, pick),
            None => None,
        })
    }

    /// The content of an answer of the kind asked (`pick`); otherwise the peer is dealt
    /// with (a fault for another kind, a rest for a failed request), the work goes back
    /// on `queue` to be asked again, and `None`.
    fn content<T>(
        &mut self,
        a: Answer,
        queue: &mut VecDeque<Work>,
        not_asked: &str,
        pick: impl FnOnce(SnapMessage) -> Option<T>,
    ) -> Option<(PeerId, Work, T)> {
        match a.result.map(pick) {
            Ok(Some(t)) => return Some((a.peer, a.work, t)),
            Ok(None) => self.fault(a.peer, not_asked),
            Err(_) => self.rest(a.peer),
        }
        queue.push_back(a.work);
        None
    }

    /// A peer that failed to answer (or answered nothing of use) is not asked for a while.
    pub(super) fn rest(&mut self, peer: PeerId) {
        self.peers.resting.insert(peer, Instant::now() + REST);
        self.peers.unhelpful.insert(peer);
    }

    /// A useful answer: the pivot is still served.
    pub(super) fn useful(&mut self) {
        self.peers.empty_streak = 0;
        self.peers.unhelpful.clear();
    }

    /// An empty answer for the pivot's root: the peer is rested; too many in a row, with
    /// every snap peer failing since the last useful answer, and the pivot is stale (so
    /// peers that answer empty cannot make a sync that a good peer serves start over).
    pub(super) fn empty(&mut self, peer: PeerId) -> Result<(), SnapError> {
        self.rest(peer);
        self.peers.empty_streak = self.peers.empty_streak.saturating_add(1);
        if self.peers.empty_streak >= STALE_AFTER
            && self
                .source
                .snap_peers()
                .iter()
                .all(|p| self.peers.unhelpful.contains(p))
        {
            return Err(SnapError::Stale);
        }
        Ok(())
    }

    pub(super) fn fault(&mut self, peer: PeerId, why: &str) {
        tracing::warn!(peer = %short(&peer), why, "snap: bad answer, peer dropped");
        self.source.report_snap_fault(&peer, why);
        self.rest(peer);
    }
}

pub(super) fn short(id: &PeerId) -> String {
    let s = id.to_string();
    s.chars().take(10).collect()
}
