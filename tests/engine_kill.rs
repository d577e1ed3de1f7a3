//! `kill -9` of a node while the engine API feeds it the conformance chain, at moments
//! picked at random: each time the datadir reopens at a head whose stored state is that
//! head's (the state trie's root is the head header's state root), the head never goes
//! back past a state seen durable before, and the node takes the rest of the chain from
//! there.

mod common;

use common::{engine_post, start_engine_node, testdata};
use std::time::Duration;

/// Sends the payloads of blocks `from..` until one is not answered VALID (the node was
/// killed) or they run out; the number of VALID answers.
fn feed(auth: u16, requests: &[serde_json::Value], from: usize) -> usize {
    let mut valid = 0;
    for r in &requests[from..] {
        match engine_post(auth, &r.to_string()) {
            Some((200, v)) if v["result"]["status"] == "VALID" => valid += 1,
            _ => break,
        }
    }
    valid
}

#[test]
fn a_node_killed_during_newpayload_reopens_at_a_consistent_head() {
    let dir = common::temp_path("engine-kill");
    let requests: std::sync::Arc<Vec<serde_json::Value>> = std::sync::Arc::new(
        serde_json::from_str(&std::fs::read_to_string(testdata("newpayload.json")).unwrap())
            .unwrap(),
    );
    assert_eq!(requests.len(), 601, "payloads of blocks 0-600");
    let mut seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos() as u64
        | 1;
    let mut head = 0u64;
    let mut killed_mid_stream = 0;
    for trial in 0..4 {
        let (mut node, _, auth) = start_engine_node(&dir);
        let from = head as usize + 1;
        let feeder = {
            let requests = requests.clone();
            std::thread::spawn(move || feed(auth, &requests, from))
        };
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let wait = Duration::from_millis(200 + seed % 1_000);
        std::thread::sleep(wait);
        let _ = node.0.kill();
        let _ = node.0.wait();
        let valid = feeder.join().unwrap();
        if from + valid < requests.len() {
            killed_mid_stream += 1;
        }
        let (number, _) =
            common::consistent_head(&dir).expect("genesis was written before the kill");
        eprintln!(
            "trial {trial}: {valid} payloads VALID from #{from}, killed after {wait:?}, reopened at #{number}"
        );
        assert!(
            number >= head,
            "the head went back from #{head} to #{number}"
        );
        head = number;
    }
    assert!(killed_mid_stream > 0, "no kill landed while blocks came in");
    // The rest of the chain, from the reopened head: every payload VALID, up to #600.
    let (mut node, _, auth) = start_engine_node(&dir);
    let from = head as usize + 1;
    assert_eq!(feed(auth, &requests, from), requests.len() - from);
    // Stopped as an operator would (SIGINT flushes the relaxed commits).
    let status = std::process::Command::new("kill")
        .args(["-INT", &node.0.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    assert!(node.0.wait().unwrap().success());
    assert_eq!(common::consistent_head(&dir).map(|(n, _)| n), Some(600));
}
