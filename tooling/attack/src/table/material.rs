//! The attack material, signed before the attack so that signing costs the attackers
//! nothing during it: fresh-key and cache-churn floods, a repeated failure, bad RPC
//! transactions, blob txs with sidecars whose proofs do not verify, and the invalidation
//! storm's senders and their funding (sent by RPC and waited for until mined).

use crate::node::{Rpc, result_u64};
use alloy_primitives::{Address, B256, Bytes, TxKind, U256, hex};
use moat_common::transaction::{
    BlobsBundle, Eip1559Tx, Eip4844Tx, PooledTransaction, SidecarVersion, SignedTransaction,
    Transaction,
};
use moat_crypto::secp::Signer;
use moat_p2p::p2p::CompressedTail;
use moat_p2p::session::Framing;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
pub(crate) fn transfer(
    chain_id: u64,
    signer: &Signer,
    nonce: u64,
    fee_cap: u128,
    tip: u128,
) -> Bytes {
    let tx = Transaction::Eip1559(Eip1559Tx {
        chain_id,
        nonce,
        max_priority_fee_per_gas: tip,
        max_fee_per_gas: fee_cap,
        gas_limit: 21_000,
        to: TxKind::Call(Address::repeat_byte(0x66)),
        value: U256::from(1),
        input: Bytes::new(),
        access_list: vec![],
    });
    SignedTransaction::sign(tx, signer).encoded_2718().into()
}

pub(crate) fn signer(hex_key: &str) -> Result<Signer, String> {
    let key: B256 = hex_key.parse().map_err(|e| format!("key: {e}"))?;
    Signer::from_bytes(&key).ok_or_else(|| "key: not a valid secret".to_string())
}

pub(crate) const FEE_CAP: u128 = 100_000_000_000;
pub(crate) const TIP: u128 = 2_000_000_000;

/// One blob spammer's transactions: distinct txs (same blobs, other values) of one funded
/// sender, each with a well-formed sidecar whose proofs do not verify.
pub(crate) struct BlobSet {
    pub(crate) envs: Vec<Bytes>,
    /// Per tx, the `PooledTransactions` reply's list of that one tx, compressed once:
    /// every delivery of it is framed without compressing 786 KB again.
    pub(crate) replies: Vec<CompressedTail>,
    pub(crate) hashes: Vec<B256>,
    pub(crate) sizes: Vec<u32>,
    pub(crate) index: HashMap<B256, usize>,
    /// Version 1: per tx, its body without blobs (eth/72's `PooledTransactions` form),
    /// that body's size, and its blobs' data cells (which fail the sidecar's proofs).
    pub(crate) bodies: Vec<Bytes>,
    pub(crate) body_sizes: Vec<u32>,
    pub(crate) cells: Vec<Vec<Bytes>>,
}

/// Distinct blob txs per attacker; the attackers cycle through them, so most deliveries
/// repeat a (tx, sidecar) the node has seen fail.
pub(crate) const BLOB_TXS_PER_ATTACKER: usize = 16;
/// Blobs per tx: the most a tx may carry from Osaka on.
pub(crate) const BLOBS_PER_TX: usize = 6;

pub(crate) fn blob_sets(
    version: SidecarVersion,
    chain_id: u64,
    attackers: usize,
    keys: &[(Signer, u64)],
) -> Result<Vec<BlobSet>, String> {
    let blobs: Vec<_> = (0..BLOBS_PER_TX as u64)
        .map(|i| *moat_crypto::kzg::sample_blob(0xb10b + i))
        .collect();
    let mut bundle = BlobsBundle::build(version, blobs).map_err(|e| format!("blobs: {e}"))?;
    // Well-formed, but each blob gets another blob's proof(s): KZG fails.
    let per = version.proofs_per_blob();
    bundle.proofs.rotate_left(per);
    let hashes = bundle.versioned_hashes();
    let mut sets = Vec::with_capacity(attackers);
    for a in 0..attackers {
        let (signer, nonce) = &keys[a % keys.len()];
        let mut set = BlobSet {
            envs: Vec::new(),
            replies: Vec::new(),
            hashes: Vec::new(),
            sizes: Vec::new(),
            index: HashMap::new(),
            bodies: Vec::new(),
            body_sizes: Vec::new(),
            cells: Vec::new(),
        };
        for j in 0..BLOB_TXS_PER_ATTACKER {
            let tx = Transaction::Eip4844(Eip4844Tx {
                chain_id,
                nonce: *nonce,
                max_priority_fee_per_gas: TIP,
                max_fee_per_gas: FEE_CAP,
                gas_limit: 21_000,
                to: Address::repeat_byte(0x66),
                value: U256::from(1 + a * BLOB_TXS_PER_ATTACKER + j),
                input: Bytes::new(),
                access_list: vec![],
                max_fee_per_blob_gas: 1_000_000_000,
                blob_versioned_hashes: hashes.clone(),
            });
            let pooled =
                PooledTransaction::new(SignedTransaction::sign(tx, signer), Some(bundle.clone()));
            let env: Bytes = pooled.encoded_2718().into();
            set.index.insert(pooled.hash(), set.envs.len());
            set.hashes.push(pooled.hash());
            set.sizes.push(env.len() as u32);
            set.replies
                .push(Framing::pooled_transactions_tail(std::slice::from_ref(
                    &env,
                )));
            set.envs.push(env);
            if version == SidecarVersion::V1 {
                let body: Bytes = pooled.encoded_2718_without_blobs().into();
                set.body_sizes.push(body.len() as u32);
                set.bodies.push(body);
                let data: Vec<usize> = (0..moat_crypto::kzg::DATA_CELLS).collect();
                let cells = (0..bundle.blobs.len())
                    .filter_map(|b| bundle.cells(b, &data))
                    .flatten()
                    .map(|c| Bytes::copy_from_slice(&c))
                    .collect();
                set.cells.push(cells);
            }
        }
        sets.push(set);
    }
    Ok(sets)
}
/// Pre-signed attack material, so signing costs nothing during the attack.
pub(crate) struct Material {
    pub(crate) fresh: Vec<Vec<Bytes>>,
    pub(crate) churn: Vec<Vec<Bytes>>,
    pub(crate) repeat: Bytes,
    pub(crate) rpc_bad: Vec<Bytes>,
    /// Per blob scenario, one set per attacker.
    pub(crate) blobs: HashMap<SidecarVersion, Vec<BlobSet>>,
    /// The invalidation storm: the funder's transfers (sent by RPC before the attack),
    /// and per attacker its senders' transactions.
    pub(crate) storm_funding: Vec<Bytes>,
    pub(crate) storm: Vec<Vec<Bytes>>,
}

/// The storm's transfers pay at most this per gas and 1 gwei of tip (below the honest
/// traffic's 2 gwei).
pub(crate) const STORM_FEE_CAP: u128 = 10_000_000_000;
pub(crate) const STORM_TIP: u128 = 1_000_000_000;
/// Transfers per storm sender; each sender is funded for two of them.
pub(crate) const STORM_TXS_PER_SENDER: u64 = 4;

/// The invalidation storm's material: `senders` fresh keys, each funded (by `funder` from
/// `nonce`) for exactly two of its four transfers, so that once a block includes the
/// first two the other two can never pay.
pub(crate) fn storm_material(
    chain_id: u64,
    funder: &Signer,
    nonce: u64,
    senders: usize,
    attackers: usize,
) -> (Vec<Bytes>, Vec<Vec<Bytes>>) {
    let keys: Vec<Signer> = (0..senders as u64)
        .map(|i| Signer::from_seed(0x5707_0000_0000 + i))
        .collect();
    let per_tx = 21_000 * STORM_FEE_CAP + 1;
    let funding = keys
        .iter()
        .enumerate()
        .map(|(i, k)| {
            let tx = Transaction::Eip1559(Eip1559Tx {
                chain_id,
                nonce: nonce + i as u64,
                max_priority_fee_per_gas: TIP,
                max_fee_per_gas: FEE_CAP,
                gas_limit: 21_000,
                to: TxKind::Call(k.address()),
                value: U256::from(2 * per_tx),
                input: Bytes::new(),
                access_list: vec![],
            });
            SignedTransaction::sign(tx, funder).encoded_2718().into()
        })
        .collect();
    let storm = std::thread::scope(|s| {
        let handles: Vec<_> = (0..attackers)
            .map(|a| {
                let keys = &keys;
                s.spawn(move || {
                    let mut out = Vec::new();
                    for k in keys.iter().skip(a).step_by(attackers) {
                        for n in 0..STORM_TXS_PER_SENDER {
                            out.push(transfer(chain_id, k, n, STORM_FEE_CAP, STORM_TIP));
                        }
                    }
                    out
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_default())
            .collect()
    });
    (funding, storm)
}

/// Sends funding transfers (the storm's, the honest peer's senders') by RPC and waits
/// (up to 60 s) until a block has them all.
pub(crate) async fn fund_storm(
    addr: SocketAddr,
    funder: Address,
    funding: &[Bytes],
) -> Result<(), String> {
    let mut rpc = Rpc::connect(addr).await.map_err(|e| e.to_string())?;
    let q = format!(r#"["{funder}","latest"]"#);
    let start = result_u64(
        &rpc.call("eth_getTransactionCount", &q)
            .await
            .map_err(|e| e.to_string())?,
    )
    .ok_or("eth_getTransactionCount failed")?;
    for raw in funding {
        let params = format!(r#"["0x{}"]"#, hex::encode(raw));
        rpc.call("eth_sendRawTransaction", &params)
            .await
            .map_err(|e| e.to_string())?;
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let v = rpc
            .call("eth_getTransactionCount", &q)
            .await
            .map_err(|e| e.to_string())?;
        if result_u64(&v).is_some_and(|n| n >= start + funding.len() as u64) {
            return Ok(());
        }
    }
    Err("the storm's funding was not mined within 60 s".into())
}

pub(crate) fn material(chain_id: u64, attackers: usize, per_attacker: usize) -> Material {
    let fresh: Vec<Vec<Bytes>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..attackers)
            .map(|a| {
                s.spawn(move || {
                    (0..per_attacker as u64)
                        .map(|i| {
                            let seed = 0xa77a_c000_0000 + ((a as u64) << 24) + i;
                            transfer(chain_id, &Signer::from_seed(seed), 0, FEE_CAP, TIP)
                        })
                        .collect()
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_default())
            .collect()
    });
    let churn: Vec<Vec<Bytes>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..attackers)
            .map(|a| {
                s.spawn(move || {
                    (0..per_attacker as u64 / 2)
                        .map(|i| {
                            let seed = 0xc4c4_e000_0000 + ((a as u64) << 24) + i;
                            // Even: a new sender; odd: a stateless failure (other chain).
                            let chain = if i % 2 == 0 { chain_id } else { chain_id + 1 };
                            transfer(chain, &Signer::from_seed(seed), 0, FEE_CAP, TIP)
                        })
                        .collect()
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_default())
            .collect()
    });
    let repeat = transfer(chain_id, &Signer::from_seed(0xbad), 0, FEE_CAP, TIP);
    // Underpriced (fee cap 1 wei) from fresh keys, and the same with a broken signature.
    let mut rpc_bad = Vec::new();
    for i in 0..4_000u64 {
        let mut tx = transfer(chain_id, &Signer::from_seed(0xcafe_0000 + i), 0, 1, 1).to_vec();
        if i % 2 == 1 {
            let n = tx.len();
            tx[n - 40] ^= 0xff; // inside s: the signature no longer recovers this sender
        }
        rpc_bad.push(tx.into());
    }
    Material {
        fresh,
        churn,
        repeat,
        rpc_bad,
        blobs: HashMap::new(),
        storm_funding: Vec::new(),
        storm: Vec::new(),
    }
}
