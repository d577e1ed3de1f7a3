//! Ranges checked before anything of them is written: an account range against the
//! pivot's state root and its boundary proof, storage ranges against the storage roots
//! of the accounts asked (whole tries without a proof, a last partial one with it).

use alloy_primitives::{B256, Bytes, U256};
use moat_common::rlp;
use moat_p2p::snap::full_account;
use moat_storage::Account;
use moat_trie::range::verify_range_proof;

/// An account range checked against the state root: the accounts decoded, and whether
/// the trie holds more after the last.
#[allow(clippy::type_complexity)]
pub(super) fn check_accounts(
    root: B256,
    origin: &B256,
    accounts: &[(B256, Bytes)],
    proof: &[Bytes],
) -> Result<(Vec<(B256, Account)>, bool), String> {
    let mut keys = Vec::with_capacity(accounts.len());
    let mut values = Vec::with_capacity(accounts.len());
    let mut decoded = Vec::with_capacity(accounts.len());
    for (hash, slim) in accounts {
        let full = full_account(slim).map_err(|e| format!("account {hash}: {e}"))?;
        decoded.push((
            *hash,
            decode_account(&full).map_err(|e| format!("account {hash}: {e}"))?,
        ));
        keys.push(*hash);
        values.push(full);
    }
    let more =
        verify_range_proof(root, origin, &keys, &values, proof).map_err(|e| e.to_string())?;
    Ok((decoded, more))
}

pub(super) fn decode_account(full: &[u8]) -> Result<Account, rlp::RlpError> {
    let mut buf = full;
    let mut f = rlp::list(&mut buf, "account")?;
    let a = Account {
        nonce: f.u64("nonce")?,
        balance: f.u256("balance")?,
        storage_root: f.b256("storage root")?,
        code_hash: f.b256("code hash")?,
    };
    f.finish()?;
    Ok(a)
}

/// Slots per account checked against their storage roots: every account but a last
/// partial one whole (no proof), that one against the proof from `origin`.
#[allow(clippy::type_complexity)]
pub(super) fn check_storage(
    accounts: &[(B256, B256)],
    origin: B256,
    slots: &[Vec<(B256, Bytes)>],
    proof: &[Bytes],
) -> Result<(Vec<Vec<(B256, U256)>>, bool), String> {
    if slots.len() > accounts.len() {
        return Err(format!(
            "slots of {} accounts for {} asked",
            slots.len(),
            accounts.len()
        ));
    }
    let mut out = Vec::with_capacity(slots.len());
    let mut more = false;
    for (i, account_slots) in slots.iter().enumerate() {
        let (hash, root) = accounts[i];
        let keys: Vec<B256> = account_slots.iter().map(|s| s.0).collect();
        let values: Vec<&[u8]> = account_slots.iter().map(|s| s.1.as_ref()).collect();
        let last = i + 1 == slots.len();
        let (from, p): (B256, &[Bytes]) = if last {
            (if i == 0 { origin } else { B256::ZERO }, proof)
        } else {
            (B256::ZERO, &[])
        };
        let m = verify_range_proof(root, &from, &keys, &values, p)
            .map_err(|e| format!("storage of {hash}: {e}"))?;
        if last {
            more = m;
        }
        let mut decoded = Vec::with_capacity(account_slots.len());
        for (slot, raw) in account_slots {
            let mut buf = raw.as_ref();
            let v = rlp::string(&mut buf, "slot value")
                .map_err(|e| format!("slot {slot} of {hash}: {e}"))?;
            if v.len() > 32 || !buf.is_empty() {
                return Err(format!("slot {slot} of {hash}: not a 32-byte value"));
            }
            decoded.push((*slot, U256::from_be_slice(v)));
        }
        out.push(decoded);
    }
    Ok((out, more))
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloy_primitives::{KECCAK256_EMPTY, keccak256};
    use moat_blockchain::state_root::account_leaf;
    use moat_trie::{EMPTY_ROOT, MemoryNodes, Trie};

    /// A storage trie of `n` slots (value i + 1 at keccak(i)): its nodes, root and the
    /// slots in key order as a peer sends them.
    fn storage(owner: B256, n: u64) -> (MemoryNodes, B256, Vec<(B256, Bytes)>) {
        let mut nodes = MemoryNodes::default();
        let mut slots: Vec<(B256, Bytes)> = (0..n)
            .map(|i| {
                let v = alloy_rlp::encode(U256::from(i + 1));
                (keccak256(i.to_be_bytes()), Bytes::from(v))
            })
            .collect();
        slots.sort();
        let mut trie = Trie::new(&nodes, owner);
        for (k, v) in &slots {
            trie.insert(k, v.to_vec()).unwrap();
        }
        let commit = trie.commit().unwrap();
        nodes.apply(&owner, &commit);
        (nodes, commit.root, slots)
    }

    fn proof(nodes: &MemoryNodes, owner: B256, origin: &B256, last: &B256) -> Vec<Bytes> {
        moat_trie::range::range_proof(nodes, &owner, origin, Some(last))
            .unwrap()
            .into_iter()
            .map(Bytes::from)
            .collect()
    }

    #[test]
    fn storage_answers_are_checked_against_the_accounts_asked() {
        let (a, b) = (B256::repeat_byte(0xaa), B256::repeat_byte(0xbb));
        let (_, root_a, slots_a) = storage(a, 5);
        let (nodes_b, root_b, slots_b) = storage(b, 40);
        let asked = [(a, root_a), (b, root_b)];
        // Whole tries: every account complete.
        let (got, more) =
            check_storage(&asked, B256::ZERO, &[slots_a.clone(), slots_b.clone()], &[]).unwrap();
        assert!(!more);
        assert_eq!(got[1].len(), 40);
        let mut values: Vec<U256> = got[0].iter().map(|s| s.1).collect();
        values.sort();
        assert_eq!(values, (1..=5u64).map(U256::from).collect::<Vec<_>>());
        // The last account cut short, with its proof: more to come.
        let part = &slots_b[..10];
        let p = proof(&nodes_b, b, &B256::ZERO, &part[9].0);
        let (got, more) =
            check_storage(&asked, B256::ZERO, &[slots_a.clone(), part.to_vec()], &p).unwrap();
        assert!(more);
        assert_eq!(got[1].len(), 10);
        // More slot lists than accounts asked, one account's slots for the other, a cut
        // without its proof, and a continued range with a slot before its origin.
        let extra = [slots_a.clone(), slots_b.clone(), slots_a.clone()];
        assert!(check_storage(&asked, B256::ZERO, &extra, &[]).is_err());
        let swapped = [slots_b.clone(), slots_a.clone()];
        assert!(check_storage(&asked, B256::ZERO, &swapped, &[]).is_err());
        assert!(check_storage(&asked, B256::ZERO, &[slots_a, part.to_vec()], &[]).is_err());
        let origin = slots_b[20].0;
        let p = proof(&nodes_b, b, &origin, &slots_b[30].0);
        let one = [(b, root_b)];
        assert!(
            check_storage(&one, origin, &[slots_b[20..=30].to_vec()], &p)
                .unwrap()
                .1
        );
        assert!(check_storage(&one, origin, &[slots_b[19..=30].to_vec()], &p).is_err());
        // No slots at all for a trie that has them, under a proof of its start.
        let p = proof(&nodes_b, b, &B256::ZERO, &slots_b[0].0);
        assert!(check_storage(&one, B256::ZERO, &[Vec::new()], &p).is_err());
    }

    #[test]
    fn account_ranges_outside_their_proof_are_refused() {
        let mut nodes = MemoryNodes::default();
        let mut leaves: Vec<(B256, Vec<u8>)> = (0..30u64)
            .map(|i| {
                let a = Account {
                    nonce: i,
                    balance: U256::from(i * 7),
                    storage_root: EMPTY_ROOT,
                    code_hash: KECCAK256_EMPTY,
                };
                (keccak256(i.to_be_bytes()), account_leaf(&a))
            })
            .collect();
        leaves.sort();
        let mut trie = Trie::new(&nodes, B256::ZERO);
        for (k, v) in &leaves {
            trie.insert(k, v.clone()).unwrap();
        }
        let commit = trie.commit().unwrap();
        nodes.apply(&B256::ZERO, &commit);
        let root = commit.root;
        let slim: Vec<(B256, Bytes)> = leaves
            .iter()
            .map(|(k, v)| (*k, Bytes::from(moat_p2p::snap::slim_account(v).unwrap())))
            .collect();
        let origin = leaves[10].0;
        let p = proof(&nodes, B256::ZERO, &origin, &leaves[19].0);
        let (got, more) = check_accounts(root, &origin, &slim[10..20], &p).unwrap();
        assert!(more);
        assert_eq!(got.len(), 10);
        assert_eq!(got[0].1.nonce, decode_account(&leaves[10].1).unwrap().nonce);
        // One before the origin, one twice, the order turned, one left out, one altered.
        assert!(check_accounts(root, &origin, &slim[9..20], &p).is_err());
        let twice = [&slim[10..20], &slim[19..20]].concat();
        assert!(check_accounts(root, &origin, &twice, &p).is_err());
        let mut turned = slim[10..20].to_vec();
        turned.reverse();
        assert!(check_accounts(root, &origin, &turned, &p).is_err());
        let gap = [&slim[10..14], &slim[15..20]].concat();
        assert!(check_accounts(root, &origin, &gap, &p).is_err());
        let mut altered = slim[10..20].to_vec();
        altered[3].1 = Bytes::from(moat_p2p::snap::slim_account(&leaves[4].1).unwrap());
        assert!(check_accounts(root, &origin, &altered, &p).is_err());
        // Garbage in the proof, or a body that is no account.
        let mut bad = p.clone();
        bad.push(Bytes::from(vec![0xc0]));
        bad[0] = Bytes::from(vec![0xff; 64]);
        assert!(check_accounts(root, &origin, &slim[10..20], &bad).is_err());
        let mut shape = slim[10..20].to_vec();
        shape[0].1 = Bytes::from(vec![0xc3, 0x80, 0x80, 0x80]);
        assert!(check_accounts(root, &origin, &shape, &p).is_err());
    }
}
