//! The file format of the log: records of `len: u32 LE | crc32(body): u32 LE | body`,
//! and reading them back up to the first that is not whole and intact.

/// Bytes before each record: length and checksum.
pub(super) const RECORD_HEADER: usize = 8;
/// No transaction on the wire is larger (a blob tx with its sidecar is a few MiB).
const MAX_RECORD: usize = 32 << 20;

/// One record of the file: `len | crc32 | tx`. Public for the fuzz targets only.
#[doc(hidden)]
pub fn encode_record(tx: &[u8]) -> Vec<u8> {
    let mut record = Vec::with_capacity(RECORD_HEADER + tx.len());
    record.extend_from_slice(&(tx.len() as u32).to_le_bytes());
    record.extend_from_slice(&crc32fast::hash(tx).to_le_bytes());
    record.extend_from_slice(tx);
    record
}

/// The intact records of `raw`, and how many bytes they span (the rest is damage).
/// Public for the fuzz targets only.
#[doc(hidden)]
pub fn parse_records(raw: &[u8]) -> (Vec<Vec<u8>>, usize) {
    let mut entries = Vec::new();
    let mut at = 0;
    while raw.len() - at >= RECORD_HEADER {
        let len = u32::from_le_bytes(raw[at..at + 4].try_into().expect("4 bytes")) as usize;
        let crc = u32::from_le_bytes(raw[at + 4..at + 8].try_into().expect("4 bytes"));
        let body = at + RECORD_HEADER;
        if len == 0 || len > MAX_RECORD || raw.len() - body < len {
            break;
        }
        let tx = &raw[body..body + len];
        if crc32fast::hash(tx) != crc {
            break;
        }
        entries.push(tx.to_vec());
        at = body + len;
    }
    (entries, at)
}
