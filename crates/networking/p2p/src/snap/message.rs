//! The snap/1 messages: ids, [`SnapMessage`] with its encoding and typed decoding, and
//! the empty answer a request gets for a root that is not served.

use alloy_primitives::{B256, Bytes};
use alloy_rlp::Encodable;
use moat_common::rlp::{self, Fields, RlpError};

/// The snap version spoken.
pub const SNAP1: u64 = 1;
/// Message ids snap/1 uses after its offset.
pub const PROTOCOL_LENGTH: u64 = 8;

/// GetAccountRange (0x00).
pub const GET_ACCOUNT_RANGE: u64 = 0x00;
/// AccountRange (0x01).
pub const ACCOUNT_RANGE: u64 = 0x01;
/// GetStorageRanges (0x02).
pub const GET_STORAGE_RANGES: u64 = 0x02;
/// StorageRanges (0x03).
pub const STORAGE_RANGES: u64 = 0x03;
/// GetByteCodes (0x04).
pub const GET_BYTE_CODES: u64 = 0x04;
/// ByteCodes (0x05).
pub const BYTE_CODES: u64 = 0x05;
/// GetTrieNodes (0x06).
pub const GET_TRIE_NODES: u64 = 0x06;
/// TrieNodes (0x07).
pub const TRIE_NODES: u64 = 0x07;

/// A snap/1 message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SnapMessage {
    /// Asks for the accounts of state `root` whose hashed addresses lie in `origin..=limit`.
    GetAccountRange {
        /// Chosen by the requester; the reply echoes it.
        request_id: u64,
        /// The state root served from.
        root: B256,
        /// The first account hash wanted.
        origin: B256,
        /// The last account hash wanted (the reply may stop before it).
        limit: B256,
        /// Soft limit on the reply's size, in bytes (`responseBytes` on the wire).
        bytes: u64,
    },
    /// Accounts as (hashed address, slim account RLP), and the boundary proof.
    AccountRange {
        /// The `request_id` of the request answered.
        request_id: u64,
        /// (account hash, slim account RLP), ascending by hash.
        accounts: Vec<(B256, Bytes)>,
        /// Trie nodes proving the range's first and last accounts.
        proof: Vec<Bytes>,
    },
    /// `origin` and `limit` apply to the first account only; on the wire they may be
    /// empty (zero and all-ones).
    GetStorageRanges {
        /// Chosen by the requester; the reply echoes it.
        request_id: u64,
        /// The state root served from.
        root: B256,
        /// The hashed addresses of the accounts whose storage is wanted.
        accounts: Vec<B256>,
        /// The first slot hash wanted (`startingHash` on the wire).
        origin: B256,
        /// The last slot hash wanted (`limitHash` on the wire).
        limit: B256,
        /// Soft limit on the reply's size, in bytes (`responseBytes` on the wire).
        bytes: u64,
    },
    /// Per account, its slots as (hashed slot, RLP of the value); the proof of the last
    /// (partial) range.
    StorageRanges {
        /// The `request_id` of the request answered.
        request_id: u64,
        /// One list per account answered, in request order.
        slots: Vec<Vec<(B256, Bytes)>>,
        /// Trie nodes proving the last range, when it is cut short.
        proof: Vec<Bytes>,
    },
    /// Asks for contract bytecodes by code hash.
    GetByteCodes {
        /// Chosen by the requester; the reply echoes it.
        request_id: u64,
        /// The code hashes wanted.
        hashes: Vec<B256>,
        /// Soft limit on the reply's size, in bytes.
        bytes: u64,
    },
    /// Answers GetByteCodes.
    ByteCodes {
        /// The `request_id` of the request answered.
        request_id: u64,
        /// The codes found, in request order (unknown ones left out).
        codes: Vec<Bytes>,
    },
    /// Path sets: `[compact path]` for the account trie, `[account hash, compact
    /// path...]` for a storage trie.
    GetTrieNodes {
        /// Chosen by the requester; the reply echoes it.
        request_id: u64,
        /// The state root served from.
        root: B256,
        /// The path sets wanted.
        paths: Vec<Vec<Bytes>>,
        /// Soft limit on the reply's size, in bytes.
        bytes: u64,
    },
    /// Answers GetTrieNodes.
    TrieNodes {
        /// The `request_id` of the request answered.
        request_id: u64,
        /// The nodes found (RLP), in request order.
        nodes: Vec<Bytes>,
    },
}

/// Why a snap message could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SnapDecodeError {
    /// The message id is not one of snap/1's.
    #[error("unknown snap message id {0:#x}")]
    UnknownId(u64),
    /// The body is not the message's RLP layout.
    #[error("snap message {id:#x}: {source}")]
    Rlp {
        /// The snap message id (relative to the snap offset).
        id: u64,
        /// The RLP error.
        source: RlpError,
    },
    /// The body decodes but breaks the message's rules (the rule broken).
    #[error("snap message {id:#x}: {reason}")]
    Invalid {
        /// The snap message id (relative to the snap offset).
        id: u64,
        /// The rule broken.
        reason: &'static str,
    },
}

/// A 32-byte hash from a byte string of at most 32 bytes, left-padded (go-ethereum's
/// `BytesToHash`, which the storage range bounds go through); `empty` when there are none.
pub(super) fn padded_hash(bytes: &[u8], empty: B256) -> Option<B256> {
    if bytes.is_empty() {
        return Some(empty);
    }
    if bytes.len() > 32 {
        return None;
    }
    let mut out = B256::ZERO;
    out[32 - bytes.len()..].copy_from_slice(bytes);
    Some(out)
}

fn string_list(items: &[Bytes], out: &mut Vec<u8>) {
    let mut payload = Vec::new();
    for i in items {
        i.as_ref().encode(&mut payload);
    }
    rlp::encode_list_payload(&payload, out);
}

fn read_strings(f: &mut Fields<'_>, field: &'static str) -> Result<Vec<Bytes>, RlpError> {
    let mut list = f.list(field)?;
    let mut out = Vec::new();
    while !list.is_empty() {
        out.push(list.data(field)?);
    }
    Ok(out)
}

impl SnapMessage {
    /// The message id relative to the snap offset.
    pub fn id(&self) -> u64 {
        match self {
            SnapMessage::GetAccountRange { .. } => GET_ACCOUNT_RANGE,
            SnapMessage::AccountRange { .. } => ACCOUNT_RANGE,
            SnapMessage::GetStorageRanges { .. } => GET_STORAGE_RANGES,
            SnapMessage::StorageRanges { .. } => STORAGE_RANGES,
            SnapMessage::GetByteCodes { .. } => GET_BYTE_CODES,
            SnapMessage::ByteCodes { .. } => BYTE_CODES,
            SnapMessage::GetTrieNodes { .. } => GET_TRIE_NODES,
            SnapMessage::TrieNodes { .. } => TRIE_NODES,
        }
    }

    /// How many items an answer carries (accounts, slots, codes, trie nodes); a
    /// request's are 0.
    pub fn items(&self) -> usize {
        match self {
            SnapMessage::AccountRange { accounts, .. } => accounts.len(),
            SnapMessage::StorageRanges { slots, .. } => slots.iter().map(Vec::len).sum(),
            SnapMessage::ByteCodes { codes, .. } => codes.len(),
            SnapMessage::TrieNodes { nodes, .. } => nodes.len(),
            SnapMessage::GetAccountRange { .. }
            | SnapMessage::GetStorageRanges { .. }
            | SnapMessage::GetByteCodes { .. }
            | SnapMessage::GetTrieNodes { .. } => 0,
        }
    }

    /// The request id of an answer (`AccountRange`, `StorageRanges`, `ByteCodes`,
    /// `TrieNodes`); `None` for a request.
    pub fn answer_id(&self) -> Option<u64> {
        match self {
            SnapMessage::AccountRange { request_id, .. }
            | SnapMessage::StorageRanges { request_id, .. }
            | SnapMessage::ByteCodes { request_id, .. }
            | SnapMessage::TrieNodes { request_id, .. } => Some(*request_id),
            SnapMessage::GetAccountRange { .. }
            | SnapMessage::GetStorageRanges { .. }
            | SnapMessage::GetByteCodes { .. }
            | SnapMessage::GetTrieNodes { .. } => None,
        }
    }

    /// The same message under request id `id`.
    pub fn with_request_id(mut self, id: u64) -> Self {
        match &mut self {
            SnapMessage::GetAccountRange { request_id, .. }
            | SnapMessage::AccountRange { request_id, .. }
            | SnapMessage::GetStorageRanges { request_id, .. }
            | SnapMessage::StorageRanges { request_id, .. }
            | SnapMessage::GetByteCodes { request_id, .. }
            | SnapMessage::ByteCodes { request_id, .. }
            | SnapMessage::GetTrieNodes { request_id, .. }
            | SnapMessage::TrieNodes { request_id, .. } => *request_id = id,
        }
        self
    }

    /// Whether `answer` is the kind of message that answers this request.
    pub fn answered_by(&self, answer: &SnapMessage) -> bool {
        matches!(
            (self, answer),
            (
                SnapMessage::GetAccountRange { .. },
                SnapMessage::AccountRange { .. }
            ) | (
                SnapMessage::GetStorageRanges { .. },
                SnapMessage::StorageRanges { .. }
            ) | (
                SnapMessage::GetByteCodes { .. },
                SnapMessage::ByteCodes { .. }
            ) | (
                SnapMessage::GetTrieNodes { .. },
                SnapMessage::TrieNodes { .. }
            )
        )
    }

    /// Name for logs and metrics.
    pub fn name(&self) -> &'static str {
        match self {
            SnapMessage::GetAccountRange { .. } => "GetAccountRange",
            SnapMessage::AccountRange { .. } => "AccountRange",
            SnapMessage::GetStorageRanges { .. } => "GetStorageRanges",
            SnapMessage::StorageRanges { .. } => "StorageRanges",
            SnapMessage::GetByteCodes { .. } => "GetByteCodes",
            SnapMessage::ByteCodes { .. } => "ByteCodes",
            SnapMessage::GetTrieNodes { .. } => "GetTrieNodes",
            SnapMessage::TrieNodes { .. } => "TrieNodes",
        }
    }

    /// The body (without the id).
    pub fn encode(&self) -> Vec<u8> {
        let mut p = Vec::new();
        match self {
            SnapMessage::GetAccountRange {
                request_id,
                root,
                origin,
                limit,
                bytes,
            } => {
                request_id.encode(&mut p);
                root.encode(&mut p);
                origin.encode(&mut p);
                limit.encode(&mut p);
                bytes.encode(&mut p);
            }
            SnapMessage::AccountRange {
                request_id,
                accounts,
                proof,
            } => {
                request_id.encode(&mut p);
                // Each item's header written from its length: no allocation per account
                // (an answer holds thousands), the list sized once.
                let item_len = |body: &Bytes| {
                    let payload = 33 + body.len();
                    alloy_rlp::length_of_length(payload) + payload
                };
                let mut list = Vec::with_capacity(accounts.iter().map(|(_, b)| item_len(b)).sum());
                for (hash, body) in accounts {
                    alloy_rlp::Header {
                        list: true,
                        payload_length: 33 + body.len(),
                    }
                    .encode(&mut list);
                    hash.encode(&mut list);
                    // The slim account is a list: it goes in as it is.
                    list.extend_from_slice(body);
                }
                rlp::encode_list_payload(&list, &mut p);
                string_list(proof, &mut p);
            }
            SnapMessage::GetStorageRanges {
                request_id,
                root,
                accounts,
                origin,
                limit,
                bytes,
            } => {
                request_id.encode(&mut p);
                root.encode(&mut p);
                let mut list = Vec::with_capacity(accounts.len() * 33);
                for a in accounts {
                    a.encode(&mut list);
                }
                rlp::encode_list_payload(&list, &mut p);
                origin.encode(&mut p);
                limit.encode(&mut p);
                bytes.encode(&mut p);
            }
            SnapMessage::StorageRanges {
                request_id,
                slots,
                proof,
            } => {
                request_id.encode(&mut p);
                let mut outer = Vec::new();
                for account in slots {
                    let mut inner = Vec::new();
                    for (hash, value) in account {
                        let mut item = Vec::with_capacity(34 + value.len());
                        hash.encode(&mut item);
                        value.as_ref().encode(&mut item);
                        rlp::encode_list_payload(&item, &mut inner);
                    }
                    rlp::encode_list_payload(&inner, &mut outer);
                }
                rlp::encode_list_payload(&outer, &mut p);
                string_list(proof, &mut p);
            }
            SnapMessage::GetByteCodes {
                request_id,
                hashes,
                bytes,
            } => {
                request_id.encode(&mut p);
                let mut list = Vec::with_capacity(hashes.len() * 33);
                for h in hashes {
                    h.encode(&mut list);
                }
                rlp::encode_list_payload(&list, &mut p);
                bytes.encode(&mut p);
            }
            SnapMessage::ByteCodes { request_id, codes } => {
                request_id.encode(&mut p);
                string_list(codes, &mut p);
            }
            SnapMessage::GetTrieNodes {
                request_id,
                root,
                paths,
                bytes,
            } => {
                request_id.encode(&mut p);
                root.encode(&mut p);
                let mut sets = Vec::new();
                for set in paths {
                    let mut one = Vec::new();
                    string_list(set, &mut one);
                    sets.extend_from_slice(&one);
                }
                rlp::encode_list_payload(&sets, &mut p);
                bytes.encode(&mut p);
            }
            SnapMessage::TrieNodes { request_id, nodes } => {
                request_id.encode(&mut p);
                string_list(nodes, &mut p);
            }
        }
        let mut out = Vec::with_capacity(p.len() + 5);
        rlp::encode_list_payload(&p, &mut out);
        out
    }

    /// Decodes a message body. The layout is exact: no missing or trailing fields.
    pub fn decode(id: u64, body: &[u8]) -> Result<Self, SnapDecodeError> {
        if id >= PROTOCOL_LENGTH {
            return Err(SnapDecodeError::UnknownId(id));
        }
        let rlp_err = |source| SnapDecodeError::Rlp { id, source };
        let invalid = |reason| SnapDecodeError::Invalid { id, reason };
        let mut buf = body;
        let mut f = rlp::list(&mut buf, "snap message").map_err(rlp_err)?;
        if !buf.is_empty() {
            return Err(rlp_err(RlpError::TrailingBytes {
                field: "snap message",
                extra: buf.len(),
            }));
        }
        let request_id = f.u64("request id").map_err(rlp_err)?;
        let msg = match id {
            GET_ACCOUNT_RANGE => (|| {
                Ok(SnapMessage::GetAccountRange {
                    request_id,
                    root: f.b256("root")?,
                    origin: f.b256("origin")?,
                    limit: f.b256("limit")?,
                    bytes: f.u64("response bytes")?,
                })
            })()
            .map_err(rlp_err)?,
            ACCOUNT_RANGE => {
                let mut list = f.list("accounts").map_err(rlp_err)?;
                let mut accounts = Vec::new();
                while !list.is_empty() {
                    let mut item = list.list("account").map_err(rlp_err)?;
                    let hash = item.b256("account hash").map_err(rlp_err)?;
                    if !item.next_is_list() {
                        return Err(invalid("account body is not a list"));
                    }
                    let body = item.raw_item("account body").map_err(rlp_err)?;
                    item.finish().map_err(rlp_err)?;
                    accounts.push((hash, Bytes::copy_from_slice(body)));
                }
                let proof = read_strings(&mut f, "proof").map_err(rlp_err)?;
                SnapMessage::AccountRange {
                    request_id,
                    accounts,
                    proof,
                }
            }
            GET_STORAGE_RANGES => {
                let root = f.b256("root").map_err(rlp_err)?;
                let accounts = f.b256_list("accounts").map_err(rlp_err)?;
                let origin = f.bytes("origin").map_err(rlp_err)?;
                let origin =
                    padded_hash(origin, B256::ZERO).ok_or(invalid("origin over 32 bytes"))?;
                let limit = f.bytes("limit").map_err(rlp_err)?;
                let limit = padded_hash(limit, B256::repeat_byte(0xff))
                    .ok_or(invalid("limit over 32 bytes"))?;
                let bytes = f.u64("response bytes").map_err(rlp_err)?;
                SnapMessage::GetStorageRanges {
                    request_id,
                    root,
                    accounts,
                    origin,
                    limit,
                    bytes,
                }
            }
            STORAGE_RANGES => {
                let mut outer = f.list("slots").map_err(rlp_err)?;
                let mut slots = Vec::new();
                while !outer.is_empty() {
                    let mut inner = outer.list("account slots").map_err(rlp_err)?;
                    let mut account = Vec::new();
                    while !inner.is_empty() {
                        let mut item = inner.list("slot").map_err(rlp_err)?;
                        let hash = item.b256("slot hash").map_err(rlp_err)?;
                        let value = item.data("slot value").map_err(rlp_err)?;
                        item.finish().map_err(rlp_err)?;
                        account.push((hash, value));
                    }
                    slots.push(account);
                }
                let proof = read_strings(&mut f, "proof").map_err(rlp_err)?;
                SnapMessage::StorageRanges {
                    request_id,
                    slots,
                    proof,
                }
            }
            GET_BYTE_CODES => SnapMessage::GetByteCodes {
                request_id,
                hashes: f.b256_list("hashes").map_err(rlp_err)?,
                bytes: f.u64("response bytes").map_err(rlp_err)?,
            },
            BYTE_CODES => SnapMessage::ByteCodes {
                request_id,
                codes: read_strings(&mut f, "codes").map_err(rlp_err)?,
            },
            GET_TRIE_NODES => {
                let root = f.b256("root").map_err(rlp_err)?;
                let mut sets = f.list("path sets").map_err(rlp_err)?;
                let mut paths = Vec::new();
                while !sets.is_empty() {
                    let mut set = sets.list("path set").map_err(rlp_err)?;
                    let mut one = Vec::new();
                    while !set.is_empty() {
                        one.push(set.data("path").map_err(rlp_err)?);
                    }
                    if one.is_empty() {
                        return Err(invalid("empty path set"));
                    }
                    paths.push(one);
                }
                let bytes = f.u64("response bytes").map_err(rlp_err)?;
                SnapMessage::GetTrieNodes {
                    request_id,
                    root,
                    paths,
                    bytes,
                }
            }
            TRIE_NODES => SnapMessage::TrieNodes {
                request_id,
                nodes: read_strings(&mut f, "nodes").map_err(rlp_err)?,
            },
            other => return Err(SnapDecodeError::UnknownId(other)),
        };
        f.finish().map_err(rlp_err)?;
        Ok(msg)
    }
}

/// The empty answer to a request (for a root not served); `None` for an answer.
pub fn empty_answer(msg: &SnapMessage) -> Option<SnapMessage> {
    Some(match msg {
        SnapMessage::GetAccountRange { request_id, .. } => SnapMessage::AccountRange {
            request_id: *request_id,
            accounts: Vec::new(),
            proof: Vec::new(),
        },
        SnapMessage::GetStorageRanges { request_id, .. } => SnapMessage::StorageRanges {
            request_id: *request_id,
            slots: Vec::new(),
            proof: Vec::new(),
        },
        SnapMessage::GetByteCodes { request_id, .. } => SnapMessage::ByteCodes {
            request_id: *request_id,
            codes: Vec::new(),
        },
        SnapMessage::GetTrieNodes { request_id, .. } => SnapMessage::TrieNodes {
            request_id: *request_id,
            nodes: Vec::new(),
        },
        SnapMessage::AccountRange { .. }
        | SnapMessage::StorageRanges { .. }
        | SnapMessage::ByteCodes { .. }
        | SnapMessage::TrieNodes { .. } => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snap::account::slim_account;
    use crate::snap::account::tests::full;
    use alloy_primitives::KECCAK256_EMPTY;
    use moat_trie::EMPTY_ROOT;

    #[test]
    fn messages_round_trip_and_bad_ones_are_typed_errors() {
        let msgs = vec![
            SnapMessage::GetAccountRange {
                request_id: 1,
                root: B256::repeat_byte(1),
                origin: B256::ZERO,
                limit: B256::repeat_byte(0xff),
                bytes: 0,
            },
            SnapMessage::AccountRange {
                request_id: 2,
                accounts: vec![(
                    B256::repeat_byte(2),
                    Bytes::from(slim_account(&full(1, 2, EMPTY_ROOT, KECCAK256_EMPTY)).unwrap()),
                )],
                proof: vec![Bytes::from(vec![0xc1, 0x80])],
            },
            SnapMessage::GetStorageRanges {
                request_id: 3,
                root: B256::repeat_byte(3),
                accounts: vec![B256::repeat_byte(4), B256::repeat_byte(5)],
                origin: B256::with_last_byte(1),
                limit: B256::repeat_byte(0xee),
                bytes: 500,
            },
            SnapMessage::StorageRanges {
                request_id: 4,
                slots: vec![
                    vec![(B256::repeat_byte(6), Bytes::from(vec![0x02]))],
                    vec![],
                ],
                proof: vec![],
            },
            SnapMessage::GetByteCodes {
                request_id: 5,
                hashes: vec![KECCAK256_EMPTY],
                bytes: 1,
            },
            SnapMessage::ByteCodes {
                request_id: 6,
                codes: vec![Bytes::new(), Bytes::from(vec![0x60, 0x00])],
            },
            SnapMessage::GetTrieNodes {
                request_id: 7,
                root: B256::repeat_byte(7),
                paths: vec![
                    vec![Bytes::from(vec![0x00])],
                    vec![Bytes::from(vec![1; 32]), Bytes::from(vec![0x1b])],
                ],
                bytes: 5000,
            },
            SnapMessage::TrieNodes {
                request_id: 8,
                nodes: vec![Bytes::from(vec![0xc0])],
            },
        ];
        for msg in msgs {
            assert_eq!(
                SnapMessage::decode(msg.id(), &msg.encode()),
                Ok(msg.clone())
            );
        }
        // The storage range bounds may be empty or short (left-padded), as geth reads them.
        let mut p = Vec::new();
        9u64.encode(&mut p);
        B256::ZERO.encode(&mut p);
        rlp::encode_list_payload(&[], &mut p);
        [].as_slice().encode(&mut p);
        [0x01u8, 0x02].as_slice().encode(&mut p);
        10u64.encode(&mut p);
        let mut body = Vec::new();
        rlp::encode_list_payload(&p, &mut body);
        match SnapMessage::decode(GET_STORAGE_RANGES, &body).unwrap() {
            SnapMessage::GetStorageRanges { origin, limit, .. } => {
                assert_eq!(origin, B256::ZERO);
                assert_eq!(limit, B256::left_padding_from(&[1, 2]));
            }
            other => panic!("{other:?}"),
        }
        // An empty path set, an unknown id, trailing fields: typed errors.
        let mut p = Vec::new();
        1u64.encode(&mut p);
        B256::ZERO.encode(&mut p);
        rlp::encode_list_payload(&[0xc0], &mut p);
        1u64.encode(&mut p);
        let mut body = Vec::new();
        rlp::encode_list_payload(&p, &mut body);
        assert_eq!(
            SnapMessage::decode(GET_TRIE_NODES, &body),
            Err(SnapDecodeError::Invalid {
                id: GET_TRIE_NODES,
                reason: "empty path set"
            })
        );
        assert_eq!(
            SnapMessage::decode(8, &[0xc0]),
            Err(SnapDecodeError::UnknownId(8))
        );
        let msg = SnapMessage::ByteCodes {
            request_id: 1,
            codes: vec![],
        };
        let mut p = Vec::new();
        1u64.encode(&mut p);
        rlp::encode_list_payload(&[], &mut p);
        5u64.encode(&mut p);
        let mut body = Vec::new();
        rlp::encode_list_payload(&p, &mut body);
        assert!(matches!(
            SnapMessage::decode(msg.id(), &body),
            Err(SnapDecodeError::Rlp { .. })
        ));
    }
}
