//! The page-cache warm-up after a start (`SnapServer::warm`): it reads the state's trie
//! nodes in the background on a store with a page cache, goes on when a peer asks before
//! it is done, and is not started on a store without one.

use alloy_primitives::B256;
use moat_blockchain::chain::Chain;
use moat_common::config::Genesis;
use moat_p2p::snap::{SnapMessage, SnapServer};
use moat_storage::{Store, WarmEnd};
use std::path::PathBuf;

fn genesis() -> Genesis {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../../../shared/testdata/ethtest/genesis.json");
    Genesis::from_file(&path).unwrap()
}

/// A fresh datadir under the system temp dir, removed on drop.
struct Dir(PathBuf);

impl Dir {
    fn new(label: &str) -> Dir {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        Dir(std::env::temp_dir().join(format!(
            "moat-p2p-warm-{label}-{}-{nanos}",
            std::process::id()
        )))
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn account_range(root: B256) -> SnapMessage {
    SnapMessage::GetAccountRange {
        request_id: 1,
        root,
        origin: B256::ZERO,
        limit: B256::repeat_byte(0xff),
        bytes: 1 << 20,
    }
}

#[test]
fn a_started_server_warms_the_page_cache_with_every_trie_node() {
    let dir = Dir::new("all");
    let chain = Chain::init(Store::open(&dir.0, None).unwrap(), &genesis()).unwrap();
    let mut nodes = 0u64;
    chain
        .store()
        .trie_node_entries_from(&B256::ZERO, &[], |_, _| {
            nodes += 1;
            true
        })
        .unwrap();
    assert!(nodes > 1, "the genesis has an account trie");
    let warmed = SnapServer::default()
        .warm(&chain)
        .expect("a store with a page cache is warmed")
        .join()
        .unwrap()
        .unwrap();
    assert_eq!(warmed.end, WarmEnd::Done);
    // The account trie and any storage tries.
    assert!(warmed.entries >= nodes);
}

#[test]
fn the_warm_up_goes_on_past_the_first_snap_request() {
    let dir = Dir::new("asked");
    let chain = Chain::init(Store::open(&dir.0, None).unwrap(), &genesis()).unwrap();
    let root = chain.header_by_number(0).unwrap().unwrap().state_root;
    let server = SnapServer::default();
    let Some(SnapMessage::AccountRange { accounts, .. }) =
        server.answer(&chain, &account_range(root))
    else {
        panic!("an account range is answered");
    };
    assert!(!accounts.is_empty());
    assert_eq!(server.answered(), 1);
    let warmed = server.warm(&chain).unwrap().join().unwrap().unwrap();
    // A peer asking does not stop it: it reads ahead of that peer's pass.
    assert_eq!(warmed.end, WarmEnd::Done);
    assert!(warmed.entries > 1);
}

#[test]
fn a_store_without_a_page_cache_is_not_warmed() {
    let chain = Chain::init(Store::in_memory(), &genesis()).unwrap();
    assert!(SnapServer::default().warm(&chain).is_none());
}
