//! A datadir whose database file rotted (bytes changed on disk, as the issue of a bad
//! disk or a bad copy leaves it): `moat db verify` lists what is wrong, and a node started
//! on it stops with a message saying so, never a panicking thread.

mod common;

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn verify(datadir: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_moat"))
        .args(["db", "verify", "--datadir"])
        .arg(datadir)
        .output()
        .expect("moat runs")
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Changes `count` bytes at seeded places in the pages of `file` that hold data (not the
/// first, the database's header: rot there leaves no database to verify, whichever bytes
/// the seed lands on as the file's layout changes).
fn rot(file: &Path, seed: u64, count: usize) {
    let mut bytes = std::fs::read(file).unwrap();
    let used: Vec<usize> = (1..bytes.len() / 4096)
        .filter(|p| bytes[p * 4096..(p + 1) * 4096].iter().any(|b| *b != 0))
        .collect();
    let mut x = seed;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for _ in 0..count {
        let page = used[next() as usize % used.len()];
        let at = page * 4096 + next() as usize % 4096;
        bytes[at] ^= (next() % 255 + 1) as u8;
    }
    std::fs::write(file, bytes).unwrap();
}

fn no_thread_panicked(log: &str) {
    assert!(
        !log.lines()
            .any(|l| l.starts_with("thread '") && l.contains("panicked")),
        "a thread panicked:\n{log}"
    );
}

#[test]
fn a_rotted_datadir_is_reported_by_verify_and_stops_the_node() {
    let dir = common::temp_path("damaged");
    let datadir: &Path = &dir;
    common::import_ethtest(datadir);

    let clean = verify(datadir);
    assert_eq!(clean.status.code(), Some(0), "{}", text(&clean));
    let out = text(&clean);
    assert!(out.contains("ok: no problem found"), "{out}");
    assert!(
        out.contains("601 blocks") && out.contains("194 accounts"),
        "{out}"
    );

    // The same datadir's tables, as `moat db inspect` prints them.
    let inspect = Command::new(env!("CARGO_BIN_EXE_moat"))
        .args(["db", "inspect", "--datadir"])
        .arg(datadir)
        .output()
        .expect("moat runs");
    let out = text(&inspect);
    assert_eq!(inspect.status.code(), Some(0), "{out}");
    let accounts = out
        .lines()
        .find(|l| l.starts_with("accounts "))
        .unwrap_or_else(|| panic!("no accounts row: {out}"));
    assert_eq!(accounts.split_whitespace().nth(1), Some("194"), "{out}");
    assert!(out.lines().any(|l| l.starts_with("trie_nodes ")), "{out}");
    assert!(out.lines().any(|l| l.starts_with("total ")), "{out}");

    let file = datadir.join(moat_storage::DB_FILE);
    let intact = std::fs::read(&file).unwrap();
    rot(&file, 0x9e37_79b9_7f4a_7c15, 200);

    let damaged = verify(datadir);
    let out = text(&damaged);
    assert_eq!(damaged.status.code(), Some(1), "{out}");
    assert!(out.contains("problems found"), "{out}");
    no_thread_panicked(&out);

    // The state root's node rotted on disk (every copy of its bytes in the file: old
    // pages may still hold it): the node checks it against the head's state root as it
    // opens the chain, and stops with exit status 1 and a message naming the remedy.
    std::fs::write(&file, &intact).unwrap();
    let root = {
        let store = moat_storage::Store::open(datadir, None).unwrap();
        store.trie_node(&Default::default(), &[]).unwrap().unwrap()
    };
    let mut bytes = intact;
    let mut copies = 0;
    let mut at = 0;
    while let Some(found) = bytes[at..].windows(root.len()).position(|w| w == root) {
        let start = at + found;
        bytes[start + root.len() / 2] ^= 0x04;
        copies += 1;
        at = start + root.len();
    }
    assert!(copies > 0, "the root node is in the file");
    std::fs::write(&file, bytes).unwrap();
    let log = datadir.with_extension("log");
    let mut node = Command::new(env!("CARGO_BIN_EXE_moat"))
        .args(["--network"])
        .arg(common::testdata("genesis.json"))
        .arg("--datadir")
        .arg(datadir)
        .args(["--nodiscover", "--maxpeers", "0", "--port", "0"])
        .args([
            "--discovery.v5.port",
            "0",
            "--http.port",
            "0",
            "--authrpc.port",
            "0",
        ])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("moat starts");
    let started = Instant::now();
    let status = loop {
        if let Some(status) = node.try_wait().unwrap() {
            break Some(status);
        }
        if started.elapsed() > Duration::from_secs(60) {
            let _ = node.kill();
            let _ = node.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let log = std::fs::read_to_string(&log).unwrap();
    let status = status.unwrap_or_else(|| panic!("the node ran on a damaged database:\n{log}"));
    assert_eq!(status.code(), Some(1), "{log}");
    assert!(log.contains("is damaged"), "{log}");
    assert!(log.contains("moat db verify"), "{log}");
    no_thread_panicked(&log);
}
