//! A datadir on a disk that fills up (a 32 MB tmpfs, so this test must be able to mount
//! one: root, or CAP_SYS_ADMIN). A dev node (no block for ten minutes) takes 60 kB
//! transactions until its journal cannot grow: those calls get geth's "no space left on
//! device" and their txs are not pooled. A block asked for then cannot be written: the
//! node stops by itself with exit status 1 and a message saying why. With space freed it
//! starts again; every acknowledged tx is there, also after a kill -9, and the next block
//! mines them.

mod common;

use alloy_primitives::{Address, B256, Bytes, TxKind, U256};
use common::{DEV_KEYS, free_port, rpc, temp_dir, wait_for};
use moat_common::PooledTransaction;
use moat_common::transaction::{Eip1559Tx, SignedTransaction, Transaction};
use moat_crypto::secp::Signer;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A tmpfs mounted for the test, unmounted when dropped (also when the test panics).
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(at: &Path, size: &str) -> Tmpfs {
        std::fs::create_dir_all(at).unwrap();
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(at)
            .status()
            .is_ok_and(|s| s.success());
        assert!(
            mounted,
            "this test mounts a {size} tmpfs to fill it: run it as root (or with CAP_SYS_ADMIN)"
        );
        Tmpfs(at.to_path_buf())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// A node whose output goes to `log`; killed on drop.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start(datadir: &Path, port: u16, log: &Path) -> Proc {
    let out = std::fs::File::create(log).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_moat"))
        .args(["--dev", "--dev.period", "600", "--port", "0"])
        .args(["--discovery.v5.port", "0", "--http.port", &port.to_string()])
        .args(["--authrpc.port", &free_port().to_string()])
        .arg("--datadir")
        .arg(datadir)
        .env("NO_COLOR", "1")
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .stdin(Stdio::null())
        .spawn()
        .expect("moat starts");
    wait_for("the RPC server", || rpc(port, "eth_chainId", "[]"));
    Proc(child)
}

/// A tx of `nonce` from dev key 0 carrying 60 kB of calldata: (hash, raw hex).
fn big_tx(nonce: u64) -> (B256, String) {
    let signer = Signer::from_bytes(&DEV_KEYS[0].parse::<B256>().unwrap()).unwrap();
    let tx = Transaction::Eip1559(Eip1559Tx {
        chain_id: 1337,
        nonce,
        max_priority_fee_per_gas: 1_000_000_000,
        max_fee_per_gas: 100_000_000_000,
        gas_limit: 700_000,
        to: TxKind::Call(Address::repeat_byte(0x42)),
        value: U256::ZERO,
        input: Bytes::from(vec![0u8; 60_000]),
        access_list: Vec::new(),
    });
    let p = PooledTransaction::new(SignedTransaction::sign(tx, &signer), None);
    (
        p.hash(),
        alloy_primitives::hex::encode_prefixed(p.encoded_2718()),
    )
}

fn pooled_or_mined(port: u16, hash: &B256) -> bool {
    let found =
        rpc(port, "eth_getTransactionByHash", &format!(r#"["{hash}"]"#)).expect("an answer");
    !found["result"].is_null()
}

/// Fills `dir`'s file system but for `keep` bytes.
fn fill(dir: &Path, keep: u64) -> PathBuf {
    let path = dir.join("filler");
    let free = free_bytes(dir);
    let size = free.saturating_sub(keep);
    let chunk = vec![0x5au8; 1 << 20];
    let mut file = std::fs::File::create(&path).unwrap();
    let mut written = 0u64;
    while written < size {
        let n = (size - written).min(chunk.len() as u64) as usize;
        use std::io::Write;
        if file.write_all(&chunk[..n]).is_err() {
            break;
        }
        written += n as u64;
    }
    path
}

/// Appends to `filler` until its file system is full.
fn top_up(filler: &Path) {
    use std::io::Write;
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(filler)
        .unwrap();
    for size in [1 << 16, 1 << 12, 1] {
        let chunk = vec![0x5au8; size];
        while file.write_all(&chunk).is_ok() {}
    }
    let _ = file.sync_all();
}

fn free_bytes(dir: &Path) -> u64 {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).unwrap();
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated path and a writable statvfs.
    assert_eq!(unsafe { libc::statvfs(c.as_ptr(), &mut st) }, 0);
    st.f_bavail as u64 * st.f_frsize as u64
}

#[test]
fn a_full_disk_refuses_what_it_cannot_keep_and_loses_no_acknowledged_tx() {
    let root = temp_dir("disk-full");
    let mnt = root.path().join("mnt");
    let _tmpfs = Tmpfs::mount(&mnt, "32m");
    let datadir = mnt.join("data");
    let log = root.path().join("moat.log");
    let port = free_port();
    let mut node = start(&datadir, port, &log);
    // The start's relaxed commits (the dev chain's first marks) made durable first.
    std::thread::sleep(Duration::from_secs(2));

    // The disk full but for 2.5 MiB: the journal's next steps of zeroed space find no room.
    let filler = fill(&mnt, 5 << 19);
    let (mut acked, mut refused) = (Vec::new(), Vec::new());
    for nonce in 0..200 {
        let (hash, raw) = big_tx(nonce);
        let answer =
            rpc(port, "eth_sendRawTransaction", &format!(r#"["{raw}"]"#)).expect("an answer");
        if answer["result"] == serde_json::json!(hash) {
            assert!(refused.is_empty(), "acknowledged after a refusal: {answer}");
            acked.push(hash);
        } else {
            assert_eq!(answer["error"]["code"], -32000, "{answer}");
            assert_eq!(
                answer["error"]["message"], "no space left on device",
                "{answer}"
            );
            refused.push(hash);
            if refused.len() == 3 {
                break;
            }
        }
    }
    assert!(acked.len() >= 5, "only {} acknowledged", acked.len());
    assert_eq!(refused.len(), 3, "the disk never filled");
    for hash in &refused {
        assert!(!pooled_or_mined(port, hash), "refused {hash} is pooled");
    }
    for hash in &acked {
        assert!(
            pooled_or_mined(port, hash),
            "acknowledged {hash} is not pooled"
        );
    }

    // Not a byte left: a block cannot be written now, and the node stops by itself,
    // saying why.
    top_up(&filler);
    let _ = rpc(port, "evm_mine", "[]");
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = node.0.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "the node runs on with a full disk: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(status.code(), Some(1), "{text}");
    assert!(
        text.contains("cannot be written") && text.contains("free disk space"),
        "{text}"
    );
    assert!(!text.contains("panicked"), "{text}");

    // Space again: every acknowledged tx is back, also after a kill -9.
    std::fs::remove_file(&filler).unwrap();
    for round in ["after the stop", "after a kill -9"] {
        let node = start(&datadir, port, &log);
        for hash in &acked {
            assert!(pooled_or_mined(port, hash), "{round}: {hash} lost");
        }
        for hash in &refused {
            assert!(
                !pooled_or_mined(port, hash),
                "{round}: refused {hash} came back"
            );
        }
        if round == "after a kill -9" {
            // And blocks are made again: the next one mines them.
            let mined = rpc(port, "evm_mine", "[]").expect("an answer");
            assert!(mined["error"].is_null(), "{mined}");
            let receipt = wait_for("the receipt", || {
                let r = rpc(
                    port,
                    "eth_getTransactionReceipt",
                    &format!(r#"["{}"]"#, acked[0]),
                )?;
                (!r["result"].is_null()).then_some(r)
            });
            assert_eq!(receipt["result"]["status"], "0x1");
        }
        drop(node); // SIGKILL
    }
}
