//! Blocks through the engine API, as a consensus client makes them: one a slot, and now
//! and then a reorg.
//!
//! ```text
//!  slot k:    getPayloadV5(id) ─▶ newPayloadV4 ─▶ forkchoiceUpdatedV3(new head, attributes) ─▶ id
//!  reorg slot: B1 = getPayloadV5(id)                    (built on head H over the slot)
//!             forkchoiceUpdatedV3(H, other attributes) ─▶ B2 = getPayloadV5 at once
//!             newPayloadV4(B1), forkchoiceUpdatedV3(B1)  (head B1)
//!             newPayloadV4(B2)                           (a side block: VALID or ACCEPTED)
//!  next slot: forkchoiceUpdatedV3(B2, attributes)        (head B1 → B2: a one-block reorg)
//! ```
//!
//! B2 shares B1's parent but has another fee recipient and randao, and is taken as soon
//! as it is asked for (geth's is then empty; moat builds a first payload before it
//! answers forkchoiceUpdated, so its sibling holds much of what B1 holds): the reorg
//! hands the transactions of B1 that B2 lacks back to the pool. Safe and finalized trail
//! the head by 32 and 64 blocks. A failed call is counted and the driver starts again from the node's latest
//! block; ten failures in a row end the run.

use crate::Shared;
use alloy_primitives::{Address, B256, keccak256};
use moat_harness::http::{CallError, RpcClient, quantity};
use serde_json::{Value, json};
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Canonical hashes kept for safe (32 below the head) and finalized (64 below).
const KEEP: usize = 65;
/// Failed slots in a row that end the run.
const MAX_FAILURES: u32 = 10;

#[derive(Debug, Clone, Copy)]
struct Head {
    hash: B256,
    number: u64,
    timestamp: u64,
}

/// A payload being built: its id and the beacon root its attributes named.
#[derive(Debug, Clone)]
struct Building {
    id: Value,
    beacon_root: B256,
}

/// A block taken from getPayload, ready for newPayload.
struct Built {
    payload: Value,
    requests: Value,
    beacon_root: B256,
    head: Head,
    txs: u64,
}

pub(crate) struct Engine {
    auth: RpcClient,
    eth: RpcClient,
    head: Head,
    /// Canonical hashes up to the head, oldest first.
    recent: VecDeque<B256>,
    building: Option<Building>,
    /// A side block to move the head to at the next slot.
    reorg_to: Option<Head>,
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn head_of(block: &Value) -> Result<Head, String> {
    Ok(Head {
        hash: block["hash"]
            .as_str()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| format!("block without hash: {block}"))?,
        number: quantity(&block["number"]).ok_or("block without number")?,
        timestamp: quantity(&block["timestamp"]).ok_or("block without timestamp")?,
    })
}

fn rpc_err(what: &str) -> impl Fn(CallError) -> String + '_ {
    move |e| format!("{what}: {e}")
}

impl Engine {
    /// Takes the node's head and starts the first payload on it (the node counts as
    /// synced from this first forkchoiceUpdated on: geth takes peers' txs only then).
    pub(crate) fn new(auth: RpcClient, mut eth: RpcClient) -> Result<Engine, String> {
        let latest = eth
            .call("eth_getBlockByNumber", json!(["latest", false]))
            .map_err(rpc_err("eth_getBlockByNumber"))?;
        let head = head_of(&latest)?;
        let mut e = Engine {
            auth,
            eth,
            head,
            recent: VecDeque::from([head.hash]),
            building: None,
            reorg_to: None,
        };
        e.building = Some(
            e.forkchoice(head.hash, Some(e.attributes(&head, 0)))?
                .ok_or("forkchoiceUpdatedV3 with attributes gave no payloadId")?,
        );
        Ok(e)
    }

    /// Payload attributes for a child of `parent`, timestamped now (at least a second
    /// after the parent); `variant` 1 makes the sibling of a reorg (another fee recipient
    /// and randao).
    fn attributes(&self, parent: &Head, variant: u8) -> (Value, B256) {
        let ts = (parent.timestamp + 1).max(unix_now());
        let tag = format!("moat-soak {} {variant}", parent.number + 1);
        let beacon_root = keccak256(format!("beacon root {tag}"));
        let attrs = json!({
            "timestamp": format!("{ts:#x}"),
            "prevRandao": keccak256(format!("randao {tag}")),
            "suggestedFeeRecipient": Address::with_last_byte(0xf0 + variant),
            "withdrawals": [],
            "parentBeaconBlockRoot": beacon_root,
        });
        (attrs, beacon_root)
    }

    fn state(&self, head: B256) -> Value {
        let back = |n: usize| self.recent[self.recent.len().saturating_sub(n + 1)];
        // `recent` ends at the current head; when moving to a new head its parent is the
        // last entry, so the trailing blocks are one fewer back: near enough for a soak.
        json!({
            "headBlockHash": head,
            "safeBlockHash": back(32),
            "finalizedBlockHash": back(64),
        })
    }

    /// forkchoiceUpdatedV3 to `head`, with attributes when given; the payload started,
    /// if any. Anything but VALID is an error.
    fn forkchoice(
        &mut self,
        head: B256,
        attrs: Option<(Value, B256)>,
    ) -> Result<Option<Building>, String> {
        let state = self.state(head);
        let (attrs_json, root) = match attrs {
            Some((a, r)) => (a, Some(r)),
            None => (Value::Null, None),
        };
        let answer = self
            .auth
            .call("engine_forkchoiceUpdatedV3", json!([state, attrs_json]))
            .map_err(rpc_err("forkchoiceUpdatedV3"))?;
        let status = &answer["payloadStatus"];
        if status["status"].as_str() != Some("VALID") {
            return Err(format!("forkchoiceUpdatedV3 to {head}: {status}"));
        }
        Ok(match root {
            Some(beacon_root) if !answer["payloadId"].is_null() => Some(Building {
                id: answer["payloadId"].clone(),
                beacon_root,
            }),
            Some(_) => return Err(format!("forkchoiceUpdatedV3 gave no payloadId: {answer}")),
            None => None,
        })
    }

    fn get_payload(&mut self, b: &Building) -> Result<Built, String> {
        let answer = self
            .auth
            .call("engine_getPayloadV5", json!([b.id]))
            .map_err(rpc_err("getPayloadV5"))?;
        let payload = answer["executionPayload"].clone();
        let head = Head {
            hash: payload["blockHash"]
                .as_str()
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| format!("payload without blockHash: {answer}"))?,
            number: quantity(&payload["blockNumber"]).ok_or("payload without blockNumber")?,
            timestamp: quantity(&payload["timestamp"]).ok_or("payload without timestamp")?,
        };
        let txs = payload["transactions"].as_array().map_or(0, Vec::len) as u64;
        Ok(Built {
            requests: answer
                .get("executionRequests")
                .cloned()
                .unwrap_or_else(|| json!([])),
            payload,
            beacon_root: b.beacon_root,
            head,
            txs,
        })
    }

    /// newPayloadV4; the status (VALID, or ACCEPTED for a side block when `side`).
    fn new_payload(&mut self, b: &Built, side: bool, shared: &Shared) -> Result<(), String> {
        let t = Instant::now();
        let status = self
            .auth
            .call(
                "engine_newPayloadV4",
                json!([b.payload, [], b.beacon_root, b.requests]),
            )
            .map_err(rpc_err("newPayloadV4"))?;
        shared.stats.new_payload(t.elapsed());
        match status["status"].as_str() {
            Some("VALID") => Ok(()),
            Some("ACCEPTED") if side => Ok(()),
            _ => Err(format!(
                "newPayloadV4 of block {} ({}): {status}",
                b.head.number, b.head.hash
            )),
        }
    }

    /// Makes `head` the head: a child of the current head, or (a reorg) a block at or
    /// below its height whose parent is canonical.
    fn set_head(&mut self, head: Head) {
        if head.number <= self.head.number {
            let undo = (self.head.number - head.number + 1) as usize;
            if undo >= self.recent.len() {
                self.recent.clear();
            } else {
                self.recent.truncate(self.recent.len() - undo);
            }
        } else if head.number > self.head.number + 1 {
            self.recent.clear();
        }
        self.recent.push_back(head.hash);
        while self.recent.len() > KEEP {
            self.recent.pop_front();
        }
        self.head = head;
    }

    /// One slot: a block, or a reorg's first or second half.
    fn slot(&mut self, reorg_now: bool, shared: &Shared) -> Result<(), String> {
        if let Some(side) = self.reorg_to.take() {
            let attrs = self.attributes(&side, 0);
            self.building = self.forkchoice(side.hash, Some(attrs))?;
            self.set_head(side);
            shared.stats.reorgs.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        }
        let building = self.building.take().ok_or("no payload being built")?;
        let b1 = self.get_payload(&building)?;
        if reorg_now {
            let parent = self.head;
            let attrs = self.attributes(&parent, 1);
            let sibling = self
                .forkchoice(parent.hash, Some(attrs))?
                .ok_or("no payloadId for the sibling")?;
            let b2 = self.get_payload(&sibling)?;
            if b2.head.hash == b1.head.hash {
                return Err("the sibling block is the same block".into());
            }
            self.new_payload(&b1, false, shared)?;
            self.forkchoice(b1.head.hash, None)?;
            self.set_head(b1.head);
            shared.stats.block(b1.txs);
            self.new_payload(&b2, true, shared)?;
            shared.stats.side_txs.fetch_add(b2.txs, Ordering::Relaxed);
            self.reorg_to = Some(b2.head);
            return Ok(());
        }
        self.new_payload(&b1, false, shared)?;
        let attrs = self.attributes(&b1.head, 0);
        let parent = b1.head;
        self.building = self.forkchoice(parent.hash, Some(attrs))?;
        self.set_head(parent);
        shared.stats.block(b1.txs);
        Ok(())
    }

    /// After a failure: the node's latest block becomes the head, and a payload starts on it.
    fn recover(&mut self) -> Result<(), String> {
        self.reorg_to = None;
        self.building = None;
        let latest = self
            .eth
            .call("eth_getBlockByNumber", json!(["latest", false]))
            .map_err(rpc_err("eth_getBlockByNumber"))?;
        let head = head_of(&latest)?;
        self.recent = VecDeque::from([head.hash]);
        self.head = head;
        let attrs = self.attributes(&head, 0);
        self.building = self.forkchoice(head.hash, Some(attrs))?;
        Ok(())
    }

    /// Slots from `start` until `end` (or the stop flag): at most `(end - start) / slot`
    /// of them. A reorg every `reorg_every` (none when zero), the first one after it.
    pub(crate) fn run(
        mut self,
        shared: &Shared,
        start: Instant,
        end: Instant,
        slot: Duration,
        reorg_every: Duration,
    ) {
        let slots =
            (end.saturating_duration_since(start).as_secs_f64() / slot.as_secs_f64()) as u64;
        let mut next_reorg = (!reorg_every.is_zero()).then(|| start + reorg_every);
        let mut failures = 0u32;
        for k in 1..=slots {
            let due = start + slot.mul_f64(k as f64);
            if !crate::sleep_until(due, shared) || Instant::now() >= end {
                return;
            }
            let reorg_now = next_reorg.is_some_and(|t| Instant::now() >= t) && self.head.number > 0;
            match self.slot(reorg_now, shared) {
                Ok(()) => {
                    failures = 0;
                    if reorg_now {
                        next_reorg = next_reorg.map(|t| t + reorg_every);
                    }
                }
                Err(e) => {
                    failures += 1;
                    shared.stats.engine_errors.fetch_add(1, Ordering::Relaxed);
                    shared.note(format!("engine: {e}"));
                    if let Err(e) = self.recover() {
                        shared.note(format!("engine: recovery: {e}"));
                    }
                    if failures >= MAX_FAILURES {
                        shared.fail(format!("{MAX_FAILURES} failed slots in a row (last: {e})"));
                        return;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attributes_of_a_sibling_differ_only_where_they_must() {
        let e = Engine {
            auth: RpcClient::new(([127, 0, 0, 1], 1).into(), None, Duration::from_secs(1)),
            eth: RpcClient::new(([127, 0, 0, 1], 1).into(), None, Duration::from_secs(1)),
            head: Head {
                hash: B256::ZERO,
                number: 0,
                timestamp: 0,
            },
            recent: VecDeque::from([B256::ZERO]),
            building: None,
            reorg_to: None,
        };
        let parent = Head {
            hash: B256::repeat_byte(1),
            number: 7,
            timestamp: u64::MAX / 2,
        };
        let (a, ra) = e.attributes(&parent, 0);
        let (b, rb) = e.attributes(&parent, 1);
        assert_eq!(a["timestamp"], b["timestamp"]);
        assert_eq!(quantity(&a["timestamp"]), Some(parent.timestamp + 1));
        assert_ne!(a["suggestedFeeRecipient"], b["suggestedFeeRecipient"]);
        assert_ne!(a["prevRandao"], b["prevRandao"]);
        assert_ne!(ra, rb);
    }

    #[test]
    fn the_recent_hashes_follow_new_blocks_and_reorgs() {
        let mut e = Engine {
            auth: RpcClient::new(([127, 0, 0, 1], 1).into(), None, Duration::from_secs(1)),
            eth: RpcClient::new(([127, 0, 0, 1], 1).into(), None, Duration::from_secs(1)),
            head: Head {
                hash: B256::ZERO,
                number: 0,
                timestamp: 0,
            },
            recent: VecDeque::from([B256::ZERO]),
            building: None,
            reorg_to: None,
        };
        let at = |n: u64, tag: u8| {
            let mut hash = B256::repeat_byte(tag);
            hash.0[31] = n as u8;
            Head {
                hash,
                number: n,
                timestamp: n,
            }
        };
        for n in 1..=100 {
            e.set_head(at(n, 1));
        }
        assert_eq!(e.recent.len(), KEEP);
        assert_eq!(*e.recent.back().unwrap(), at(100, 1).hash);
        assert_eq!(*e.recent.front().unwrap(), at(36, 1).hash);
        // A sibling of the head replaces it; safe and finalized are still canonical.
        e.set_head(at(100, 2));
        assert_eq!(e.recent.len(), KEEP);
        assert_eq!(*e.recent.back().unwrap(), at(100, 2).hash);
        assert_eq!(e.recent[e.recent.len() - 2], at(99, 1).hash);
        let state = e.state(at(101, 2).hash);
        assert_eq!(state["finalizedBlockHash"], json!(at(36, 1).hash));
        assert_eq!(state["safeBlockHash"], json!(at(68, 1).hash));
    }
}
