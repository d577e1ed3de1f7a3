//! The pool journal as a restart reads it (`txpool.journal`): the record reader that
//! `Journal::open` runs (`len | crc32 | tx` records up to the first damaged one), then each
//! entry's decoding as `Pool::reload_journal` does it (`PooledTransaction::decode_2718`).
//!
//! Checksums guard records, so besides raw file bytes the input may be a list of entries
//! that the target writes as records (the real record encoder) and then damages: a byte
//! flipped, the file cut, zeros appended (preallocated space). The reader must give back
//! exactly the entries before the damage, say how many bytes they span, and those bytes
//! must be the records of those entries.

#![no_main]

use libfuzzer_sys::fuzz_target;
use moat_common::PooledTransaction;
use moat_fuzz::Bytes;
use moat_mempool::{journal_record, journal_records};

fn check(raw: &[u8]) -> Vec<Vec<u8>> {
    let (entries, good) = journal_records(raw);
    assert!(good <= raw.len());
    let rewritten: Vec<u8> = entries.iter().flat_map(|e| journal_record(e)).collect();
    assert_eq!(
        &rewritten[..],
        &raw[..good],
        "records read back differently"
    );
    assert_eq!(journal_records(&raw[..good]), (entries.clone(), good));
    for e in &entries {
        assert!(!e.is_empty(), "an empty record was read");
        if let Ok(tx) = PooledTransaction::decode_2718(e) {
            assert_eq!(tx.encoded_2718(), &e[..]);
        }
    }
    entries
}

fuzz_target!(|data: &[u8]| {
    let mut r = Bytes(data);
    if r.u8() < 0x40 {
        check(r.rest());
        return;
    }
    let mut file = Vec::new();
    let mut written = Vec::new();
    for _ in 0..r.u8() % 6 {
        let entry = r.piece();
        file.extend_from_slice(&journal_record(entry));
        written.push(entry.to_vec());
    }
    // Where the damage starts, if anywhere: a flipped byte or a cut.
    let damage = match r.u8() {
        0..=0x7f => None,
        0x80..=0xbf if !file.is_empty() => {
            let at = r.u16() as usize % file.len();
            file[at] ^= 1 << (r.u8() & 7);
            Some(at)
        }
        _ if !file.is_empty() => {
            let at = r.u16() as usize % file.len();
            file.truncate(at);
            Some(at)
        }
        _ => None,
    };
    // Preallocated space after the records.
    file.resize(file.len() + r.u8() as usize, 0);
    let entries = check(&file);
    // Entries wholly before the damage come back; an empty entry ends the file (a zero
    // length is free space).
    let mut at = 0;
    let mut expected = Vec::new();
    for e in &written {
        let end = at + 8 + e.len();
        if e.is_empty() || damage.is_some_and(|d| d < end) {
            break;
        }
        expected.push(e.clone());
        at = end;
    }
    assert!(entries.len() >= expected.len(), "intact records were lost");
    assert_eq!(&entries[..expected.len()], &expected[..]);
});
