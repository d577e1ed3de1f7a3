//! eth wire protocol messages, versions 68 to 71.
//!
//! What changes between versions:
//! - 68: `Status` carries total difficulty and head hash; `Receipts` carry blooms.
//! - 69: `Status` carries the served block range instead; `Receipts` drop the bloom and
//!   carry the tx type as a field; `BlockRangeUpdate` appears.
//! - 70: `GetReceipts` names the first receipt index of the first block and `Receipts`
//!   says whether the last block's list was cut short (partial receipts).
//! - 71 (EIP-8159): `GetBlockAccessLists`/`BlockAccessLists` (0x12/0x13), a block's
//!   access list by block hash; one with none (every block before Amsterdam) is answered
//!   with the RLP empty string in its place, as go-ethereum answers.
//!
//! Bodies of transactions, headers and blocks are kept as raw RLP here: the pipeline
//! decodes transactions itself (hash before decode), and served headers and bodies go out
//! as stored.

use alloy_primitives::{Address, B256, Bytes, U256};
use alloy_rlp::Encodable;
use moat_common::config::ForkId;
use moat_common::rlp::{self, Fields, RlpError};
use moat_common::transaction::{DecodeError, network_envelope};
use moat_crypto::kzg::BYTES_PER_CELL;

/// eth/68.
pub const ETH68: u32 = 68;
/// eth/69 (EIP-7642): Status with the served block range, receipts without blooms.
pub const ETH69: u32 = 69;
/// eth/70: partial receipts.
pub const ETH70: u32 = 70;
/// eth/71 (EIP-8159): block access lists.
pub const ETH71: u32 = 71;
/// eth/72 (EIP-8070, the sparse blobpool): announcements carry which cells of their blob
/// txs the sender holds, `PooledTransactions` carries blob txs without their blobs, and
/// the blobs travel as cells (`GetCells`/`Cells`).
pub const ETH72: u32 = 72;
/// eth/73 (EIP-8077, draft; the version Nethermind gives it): eth/72 with each
/// announced tx's sender and nonce, so a peer can leave hopeless txs unfetched. Spoken
/// only with peers that offer it (moat nodes, Nethermind); go-ethereum stops at eth/72.
pub const ETH73: u32 = 73;
/// Versions we speak, best first.
pub const SUPPORTED_VERSIONS: [u32; 6] = [ETH73, ETH72, ETH71, ETH70, ETH69, ETH68];

/// Status (0x00): the handshake.
pub const STATUS: u64 = 0x00;
/// NewBlockHashes (0x01): pre-merge block announcement.
pub const NEW_BLOCK_HASHES: u64 = 0x01;
/// Transactions (0x02): full transactions, pushed.
pub const TRANSACTIONS: u64 = 0x02;
/// GetBlockHeaders (0x03).
pub const GET_BLOCK_HEADERS: u64 = 0x03;
/// BlockHeaders (0x04).
pub const BLOCK_HEADERS: u64 = 0x04;
/// GetBlockBodies (0x05).
pub const GET_BLOCK_BODIES: u64 = 0x05;
/// BlockBodies (0x06).
pub const BLOCK_BODIES: u64 = 0x06;
/// NewBlock (0x07): pre-merge block propagation.
pub const NEW_BLOCK: u64 = 0x07;
/// NewPooledTransactionHashes (0x08): transaction announcements.
pub const NEW_POOLED_TRANSACTION_HASHES: u64 = 0x08;
/// GetPooledTransactions (0x09).
pub const GET_POOLED_TRANSACTIONS: u64 = 0x09;
/// PooledTransactions (0x0a).
pub const POOLED_TRANSACTIONS: u64 = 0x0a;
/// GetReceipts (0x0f).
pub const GET_RECEIPTS: u64 = 0x0f;
/// Receipts (0x10).
pub const RECEIPTS: u64 = 0x10;
/// BlockRangeUpdate (0x11, eth/69+): the sender's served block range moved.
pub const BLOCK_RANGE_UPDATE: u64 = 0x11;
/// GetBlockAccessLists (0x12, eth/71+).
pub const GET_BLOCK_ACCESS_LISTS: u64 = 0x12;
/// BlockAccessLists (0x13, eth/71+).
pub const BLOCK_ACCESS_LISTS: u64 = 0x13;

/// GetCells (0x14, eth/72+).
pub const GET_CELLS: u64 = 0x14;
/// Cells (0x15, eth/72+).
pub const CELLS: u64 = 0x15;

pub use moat_common::transaction::{ALL_CELLS, CellMask, DATA_CELLS, mask_covers, mask_indices};
/// Most bytes of a `Cells` body read at all: 1,792 cells (a 1,024-cell budget plus the
/// one transaction of 6 × 128 cells a server may start past it) of 2,048 bytes and their
/// RLP headers, with room for the hashes.
pub const MAX_CELLS_BODY: usize = 1_792 * (2_048 + 3) + 64 * 1024;

/// The RLP empty string: a block access list the node does not have (EIP-8159; an
/// empty list is a valid access list, so absence is told apart).
pub const NO_ACCESS_LIST: [u8; 1] = [0x80];

/// How many message ids a version uses (the next capability starts after them).
pub fn protocol_length(version: u32) -> u64 {
    if version >= ETH72 {
        22
    } else if version >= ETH71 {
        20
    } else if version >= ETH69 {
        18
    } else {
        17
    }
}

/// The handshake message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    /// The eth version the sender speaks on this connection.
    pub version: u32,
    /// The network id (equal to the chain id on the public networks).
    pub network_id: u64,
    /// The hash of the chain's genesis block.
    pub genesis: B256,
    /// The sender's EIP-2124 fork id (`forkid` on the wire).
    pub fork_id: ForkId,
    /// eth/68 only.
    pub total_difficulty: U256,
    /// The head hash (eth/68's `blockhash`, eth/69's `latestBlockHash`).
    pub head: B256,
    /// eth/69+: the block range served.
    pub earliest: u64,
    /// eth/69+: the sender's head block number (`latestBlock` on the wire).
    pub latest: u64,
}

impl Status {
    /// The Status of a peer whose head is the genesis block of `genesis`, speaking
    /// `version`: any node of the chain accepts it (load and test tools use it).
    pub fn at_genesis(genesis: &moat_common::config::Genesis, version: u32) -> Status {
        let hash = genesis.header().hash();
        Status {
            version,
            network_id: genesis.config.chain_id,
            genesis: hash,
            fork_id: genesis
                .config
                .fork_id(hash, genesis.timestamp, 0, genesis.timestamp),
            total_difficulty: genesis.difficulty,
            head: hash,
            earliest: 0,
            latest: 0,
        }
    }
}

/// Start of a header query.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HashOrNumber {
    /// Start at the block with this hash.
    Hash(B256),
    /// Start at the block with this number.
    Number(u64),
}

/// Every eth message this node reads or writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EthMessage {
    /// The handshake, sent once each way before anything else.
    Status(Status),
    /// Pre-merge block gossip; ignored.
    NewBlockHashes,
    /// Pre-merge block gossip; ignored.
    NewBlock,
    /// Transaction envelopes (2718 bytes).
    Transactions(Vec<Bytes>),
    /// Asks for up to `amount` headers from `origin`, every `skip + 1`-th one.
    GetBlockHeaders {
        /// Chosen by the requester; the reply echoes it.
        request_id: u64,
        /// The first header wanted.
        origin: HashOrNumber,
        /// Most headers wanted.
        amount: u64,
        /// Headers left out between two returned (0 for consecutive).
        skip: u64,
        /// Walk towards genesis instead of towards the head.
        reverse: bool,
    },
    /// Header RLP items.
    BlockHeaders {
        /// The `request_id` of the request answered.
        request_id: u64,
        /// The headers found, in walk order.
        headers: Vec<Bytes>,
    },
    /// Asks for block bodies by block hash.
    GetBlockBodies {
        /// Chosen by the requester; the reply echoes it.
        request_id: u64,
        /// The block hashes wanted.
        hashes: Vec<B256>,
    },
    /// Body RLP items.
    BlockBodies {
        /// The `request_id` of the request answered.
        request_id: u64,
        /// The bodies found, in request order (the reply may stop early).
        bodies: Vec<Bytes>,
    },
    /// Transaction hashes announced, with their types and sizes.
    NewPooledTransactionHashes(Announcement),
    /// Asks for announced transactions by hash.
    GetPooledTransactions {
        /// Chosen by the requester; the reply echoes it.
        request_id: u64,
        /// The transaction hashes wanted.
        hashes: Vec<B256>,
    },
    /// Transaction envelopes (2718 bytes, blob txs with their sidecars).
    PooledTransactions {
        /// The `request_id` of the request answered.
        request_id: u64,
        /// The transactions found, in request order (unknown ones left out).
        txs: Vec<Bytes>,
    },
    /// Asks for the receipts of blocks by block hash.
    GetReceipts {
        /// Chosen by the requester; the reply echoes it.
        request_id: u64,
        /// eth/70: the receipt index to start at in the first block.
        first_index: u64,
        /// The block hashes wanted.
        hashes: Vec<B256>,
    },
    /// One RLP list item per block, in the version's receipt format.
    Receipts {
        /// The `request_id` of the request answered.
        request_id: u64,
        /// eth/70: the last block's list is cut short.
        incomplete: bool,
        /// Per block, its receipts list (RLP), in request order.
        blocks: Vec<Bytes>,
    },
    /// eth/71+: asks for the access lists of blocks by block hash.
    GetBlockAccessLists {
        /// Chosen by the requester; the reply echoes it.
        request_id: u64,
        /// The block hashes wanted.
        hashes: Vec<B256>,
    },
    /// eth/71+: per block asked, its access list (RLP), or [`NO_ACCESS_LIST`].
    BlockAccessLists {
        /// The `request_id` of the request answered.
        request_id: u64,
        /// In request order (the reply may stop early).
        lists: Vec<Bytes>,
    },
    /// eth/72+: asks for cells of blob txs by tx hash, the same cells of every blob.
    GetCells {
        /// Chosen by the requester; the reply echoes it.
        request_id: u64,
        /// The blob tx hashes.
        hashes: Vec<B256>,
        /// The cells wanted of each of their blobs.
        mask: CellMask,
    },
    /// eth/72+: per tx served, its cells: blob by blob, each blob's cells of the mask in
    /// ascending index (`blobs × cells of the mask` items of 2,048 bytes; no proofs, they
    /// are in the tx's sidecar).
    Cells {
        /// The `request_id` of the request answered.
        request_id: u64,
        /// The txs served, in request order (unknown ones left out).
        hashes: Vec<B256>,
        /// Per tx served, its cells.
        cells: Vec<Vec<Bytes>>,
        /// The cells each blob's list holds (the request's mask, echoed).
        mask: CellMask,
    },
    /// eth/69+: the sender's served block range changed.
    BlockRangeUpdate {
        /// The oldest block it serves.
        earliest: u64,
        /// Its head block number.
        latest: u64,
        /// Its head block hash.
        latest_hash: B256,
    },
}

/// A `NewPooledTransactionHashes` announcement (eth/68+).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Announcement {
    /// Per hash, its transaction type (EIP-2718 type byte).
    pub types: Vec<u8>,
    /// Per hash, the transaction's encoded size in bytes.
    pub sizes: Vec<u32>,
    /// The announced transaction hashes.
    pub hashes: Vec<B256>,
    /// eth/72+: the cells the sender holds of every blob tx announced ([`ALL_CELLS`]
    /// when it holds their blobs whole); zero (`None`) in a batch without blob txs.
    pub mask: Option<CellMask>,
    /// eth/73+ (EIP-8077): per hash, the account whose nonce the tx uses, and that nonce.
    /// Empty on older versions; on eth/73 as long as the hashes.
    pub origins: Vec<(Address, u64)>,
}

impl Announcement {
    /// How many hashes it announces.
    pub fn len(&self) -> usize {
        self.hashes.len()
    }

    /// Whether it announces nothing.
    pub fn is_empty(&self) -> bool {
        self.hashes.is_empty()
    }

    /// Appends one transaction: its type, encoded size (bytes) and hash.
    pub fn push(&mut self, ty: u8, size: u32, hash: B256) {
        self.types.push(ty);
        self.sizes.push(size);
        self.hashes.push(hash);
    }

    /// Appends one transaction with its sender and nonce (eth/73's fields).
    pub fn push_with_origin(&mut self, ty: u8, size: u32, hash: B256, sender: Address, nonce: u64) {
        self.push(ty, size, hash);
        self.origins.push((sender, nonce));
    }

    /// The entries `range` (a message's worth), the mask and origins kept with them.
    pub fn slice(&self, range: std::ops::Range<usize>) -> Announcement {
        Announcement {
            types: self.types[range.clone()].to_vec(),
            sizes: self.sizes[range.clone()].to_vec(),
            hashes: self.hashes[range.clone()].to_vec(),
            mask: self.mask,
            origins: if self.origins.len() == self.hashes.len() {
                self.origins[range].to_vec()
            } else {
                Vec::new()
            },
        }
    }
}

/// Why a message could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EthDecodeError {
    /// The message id is not one of eth's.
    #[error("unknown eth message id {0:#x}")]
    UnknownId(u64),
    /// The body is not the message's RLP layout.
    #[error("eth message {id:#x}: {source}")]
    Rlp {
        /// The eth message id (relative to the eth offset).
        id: u64,
        /// The RLP error.
        source: RlpError,
    },
    /// The body decodes but breaks the message's rules (the rule broken).
    #[error("eth message {id:#x}: {reason}")]
    Invalid {
        /// The eth message id (relative to the eth offset).
        id: u64,
        /// The rule broken.
        reason: &'static str,
    },
}

fn list_of(items: &[Bytes], out: &mut Vec<u8>) {
    let len: usize = items.iter().map(|i| i.len()).sum();
    alloy_rlp::Header {
        list: true,
        payload_length: len,
    }
    .encode(out);
    for i in items {
        out.extend_from_slice(i);
    }
}

/// Writes tx envelopes as a list of network elements (typed ones wrapped as strings).
fn tx_list(txs: &[Bytes], out: &mut Vec<u8>) {
    let mut payload = Vec::with_capacity(txs.iter().map(|t| t.len() + 4).sum());
    for env in txs {
        if env.first().is_some_and(|b| *b >= 0xc0) {
            payload.extend_from_slice(env);
        } else {
            env.as_ref().encode(&mut payload);
        }
    }
    rlp::encode_list_payload(&payload, out);
}

fn read_tx_list(f: &mut Fields<'_>, field: &'static str) -> Result<Vec<Bytes>, RlpError> {
    let list = f.list(field)?;
    let mut rest = list.remaining();
    let mut out = Vec::with_capacity(rest.len() / 128 + 1);
    while !rest.is_empty() {
        let env = network_envelope(&mut rest).map_err(|e| match e {
            DecodeError::Rlp(r) => r,
            _ => RlpError::NonCanonical(field),
        })?;
        out.push(Bytes::copy_from_slice(env));
    }
    Ok(out)
}

fn read_raw_list(f: &mut Fields<'_>, field: &'static str) -> Result<Vec<Bytes>, RlpError> {
    let mut list = f.list(field)?;
    let mut out = Vec::new();
    while !list.is_empty() {
        out.push(Bytes::copy_from_slice(list.raw_item(field)?));
    }
    Ok(out)
}

fn hashes(list: &[B256], out: &mut Vec<u8>) {
    let mut payload = Vec::with_capacity(list.len() * 33);
    for h in list {
        h.encode(&mut payload);
    }
    rlp::encode_list_payload(&payload, out);
}

impl EthMessage {
    /// The message id relative to the eth offset.
    pub fn id(&self) -> u64 {
        match self {
            EthMessage::Status(_) => STATUS,
            EthMessage::NewBlockHashes => NEW_BLOCK_HASHES,
            EthMessage::NewBlock => NEW_BLOCK,
            EthMessage::Transactions(_) => TRANSACTIONS,
            EthMessage::GetBlockHeaders { .. } => GET_BLOCK_HEADERS,
            EthMessage::BlockHeaders { .. } => BLOCK_HEADERS,
            EthMessage::GetBlockBodies { .. } => GET_BLOCK_BODIES,
            EthMessage::BlockBodies { .. } => BLOCK_BODIES,
            EthMessage::NewPooledTransactionHashes(_) => NEW_POOLED_TRANSACTION_HASHES,
            EthMessage::GetPooledTransactions { .. } => GET_POOLED_TRANSACTIONS,
            EthMessage::PooledTransactions { .. } => POOLED_TRANSACTIONS,
            EthMessage::GetReceipts { .. } => GET_RECEIPTS,
            EthMessage::Receipts { .. } => RECEIPTS,
            EthMessage::BlockRangeUpdate { .. } => BLOCK_RANGE_UPDATE,
            EthMessage::GetBlockAccessLists { .. } => GET_BLOCK_ACCESS_LISTS,
            EthMessage::BlockAccessLists { .. } => BLOCK_ACCESS_LISTS,
            EthMessage::GetCells { .. } => GET_CELLS,
            EthMessage::Cells { .. } => CELLS,
        }
    }

    /// Name for logs and metrics.
    pub fn name(&self) -> &'static str {
        match self {
            EthMessage::Status(_) => "Status",
            EthMessage::NewBlockHashes => "NewBlockHashes",
            EthMessage::NewBlock => "NewBlock",
            EthMessage::Transactions(_) => "Transactions",
            EthMessage::GetBlockHeaders { .. } => "GetBlockHeaders",
            EthMessage::BlockHeaders { .. } => "BlockHeaders",
            EthMessage::GetBlockBodies { .. } => "GetBlockBodies",
            EthMessage::BlockBodies { .. } => "BlockBodies",
            EthMessage::NewPooledTransactionHashes(_) => "NewPooledTransactionHashes",
            EthMessage::GetPooledTransactions { .. } => "GetPooledTransactions",
            EthMessage::PooledTransactions { .. } => "PooledTransactions",
            EthMessage::GetReceipts { .. } => "GetReceipts",
            EthMessage::Receipts { .. } => "Receipts",
            EthMessage::BlockRangeUpdate { .. } => "BlockRangeUpdate",
            EthMessage::GetBlockAccessLists { .. } => "GetBlockAccessLists",
            EthMessage::BlockAccessLists { .. } => "BlockAccessLists",
            EthMessage::GetCells { .. } => "GetCells",
            EthMessage::Cells { .. } => "Cells",
        }
    }

    /// Encodes the body (without the id) for protocol `version`.
    pub fn encode(&self, version: u32) -> Vec<u8> {
        let mut p = Vec::new();
        match self {
            EthMessage::Status(s) => {
                (version as u64).encode(&mut p);
                s.network_id.encode(&mut p);
                if version < ETH69 {
                    s.total_difficulty.encode(&mut p);
                    s.head.encode(&mut p);
                    s.genesis.encode(&mut p);
                    encode_fork_id(&s.fork_id, &mut p);
                } else {
                    s.genesis.encode(&mut p);
                    encode_fork_id(&s.fork_id, &mut p);
                    s.earliest.encode(&mut p);
                    s.latest.encode(&mut p);
                    s.head.encode(&mut p);
                }
            }
            EthMessage::NewBlockHashes | EthMessage::NewBlock => {}
            EthMessage::Transactions(txs) => {
                tx_list(txs, &mut p);
                return p;
            }
            EthMessage::GetBlockHeaders {
                request_id,
                origin,
                amount,
                skip,
                reverse,
            } => {
                request_id.encode(&mut p);
                let mut q = Vec::new();
                match origin {
                    HashOrNumber::Hash(h) => h.encode(&mut q),
                    HashOrNumber::Number(n) => n.encode(&mut q),
                }
                amount.encode(&mut q);
                skip.encode(&mut q);
                reverse.encode(&mut q);
                rlp::encode_list_payload(&q, &mut p);
            }
            EthMessage::BlockHeaders {
                request_id,
                headers,
            } => {
                request_id.encode(&mut p);
                list_of(headers, &mut p);
            }
            EthMessage::GetBlockBodies {
                request_id,
                hashes: h,
            }
            | EthMessage::GetPooledTransactions {
                request_id,
                hashes: h,
            }
            | EthMessage::GetBlockAccessLists {
                request_id,
                hashes: h,
            } => {
                request_id.encode(&mut p);
                hashes(h, &mut p);
            }
            EthMessage::BlockBodies { request_id, bodies }
            | EthMessage::BlockAccessLists {
                request_id,
                lists: bodies,
            } => {
                request_id.encode(&mut p);
                list_of(bodies, &mut p);
            }
            EthMessage::NewPooledTransactionHashes(a) => {
                a.types.as_slice().encode(&mut p);
                a.sizes.encode(&mut p);
                hashes(&a.hashes, &mut p);
                if version >= ETH72 {
                    a.mask.unwrap_or([0; 16]).as_slice().encode(&mut p);
                }
                if version >= ETH73 {
                    // Announcing without origins is a bug of ours: zeros would be lies.
                    debug_assert_eq!(a.origins.len(), a.hashes.len());
                    let mut senders = Vec::with_capacity(a.origins.len() * 21);
                    let mut nonces = Vec::with_capacity(a.origins.len() * 9);
                    for (sender, nonce) in &a.origins {
                        sender.encode(&mut senders);
                        nonce.encode(&mut nonces);
                    }
                    rlp::encode_list_payload(&senders, &mut p);
                    rlp::encode_list_payload(&nonces, &mut p);
                }
            }
            EthMessage::GetCells {
                request_id,
                hashes: h,
                mask,
            } => {
                request_id.encode(&mut p);
                hashes(h, &mut p);
                mask.as_slice().encode(&mut p);
            }
            EthMessage::Cells {
                request_id,
                hashes: h,
                cells,
                mask,
            } => {
                request_id.encode(&mut p);
                hashes(h, &mut p);
                let mut outer = Vec::new();
                for tx in cells {
                    let mut inner = Vec::with_capacity(tx.len() * (BYTES_PER_CELL + 3));
                    for cell in tx {
                        cell.as_ref().encode(&mut inner);
                    }
                    rlp::encode_list_payload(&inner, &mut outer);
                }
                rlp::encode_list_payload(&outer, &mut p);
                mask.as_slice().encode(&mut p);
            }
            EthMessage::PooledTransactions { request_id, txs } => {
                request_id.encode(&mut p);
                tx_list(txs, &mut p);
            }
            EthMessage::GetReceipts {
                request_id,
                first_index,
                hashes: h,
            } => {
                request_id.encode(&mut p);
                if version >= ETH70 {
                    first_index.encode(&mut p);
                }
                hashes(h, &mut p);
            }
            EthMessage::Receipts {
                request_id,
                incomplete,
                blocks,
            } => {
                request_id.encode(&mut p);
                if version >= ETH70 {
                    incomplete.encode(&mut p);
                }
                list_of(blocks, &mut p);
            }
            EthMessage::BlockRangeUpdate {
                earliest,
                latest,
                latest_hash,
            } => {
                earliest.encode(&mut p);
                latest.encode(&mut p);
                latest_hash.encode(&mut p);
            }
        }
        let mut out = Vec::with_capacity(p.len() + 5);
        rlp::encode_list_payload(&p, &mut out);
        out
    }

    /// Decodes a message body for protocol `version`. Trailing list fields are tolerated
    /// in `Status` and `BlockRangeUpdate` (forward compatibility); elsewhere the layout is
    /// exact.
    pub fn decode(id: u64, version: u32, body: &[u8]) -> Result<Self, EthDecodeError> {
        let rlp_err = |source| EthDecodeError::Rlp { id, source };
        let mut buf = body;
        if id == TRANSACTIONS {
            let mut whole = Fields::new(body, "transactions");
            let txs = read_tx_list(&mut whole, "transactions").map_err(rlp_err)?;
            whole.finish().map_err(rlp_err)?;
            return Ok(EthMessage::Transactions(txs));
        }
        if id == NEW_BLOCK_HASHES || id == NEW_BLOCK {
            return Ok(if id == NEW_BLOCK {
                EthMessage::NewBlock
            } else {
                EthMessage::NewBlockHashes
            });
        }
        if id == CELLS && version >= ETH72 && body.len() > MAX_CELLS_BODY {
            return Err(EthDecodeError::Invalid {
                id,
                reason: "Cells reply larger than any request asks for",
            });
        }
        let mut f = rlp::list(&mut buf, "eth message").map_err(rlp_err)?;
        if !buf.is_empty() {
            return Err(rlp_err(RlpError::TrailingBytes {
                field: "eth message",
                extra: buf.len(),
            }));
        }
        let msg = (|| -> Result<EthMessage, RlpError> {
            Ok(match id {
                STATUS => {
                    let v = f.u64("status version")?;
                    let network_id = f.u64("status network id")?;
                    let mut s = Status {
                        version: u32::try_from(v).map_err(|_| RlpError::OutOfRange("version"))?,
                        network_id,
                        genesis: B256::ZERO,
                        fork_id: ForkId {
                            hash: [0; 4],
                            next: 0,
                        },
                        total_difficulty: U256::ZERO,
                        head: B256::ZERO,
                        earliest: 0,
                        latest: 0,
                    };
                    if version < ETH69 {
                        s.total_difficulty = f.u256("status td")?;
                        s.head = f.b256("status head")?;
                        s.genesis = f.b256("status genesis")?;
                        s.fork_id = decode_fork_id(&mut f)?;
                    } else {
                        s.genesis = f.b256("status genesis")?;
                        s.fork_id = decode_fork_id(&mut f)?;
                        s.earliest = f.u64("status earliest")?;
                        s.latest = f.u64("status latest")?;
                        s.head = f.b256("status latest hash")?;
                    }
                    return Ok(EthMessage::Status(s));
                }
                GET_BLOCK_HEADERS => {
                    let request_id = f.u64("request id")?;
                    let mut q = f.list("header query")?;
                    let origin = match q.remaining().first() {
                        Some(0xa0) => HashOrNumber::Hash(q.b256("origin")?),
                        _ => HashOrNumber::Number(q.u64("origin")?),
                    };
                    let amount = q.u64("amount")?;
                    let skip = q.u64("skip")?;
                    let reverse = q.bool("reverse")?;
                    q.finish()?;
                    EthMessage::GetBlockHeaders {
                        request_id,
                        origin,
                        amount,
                        skip,
                        reverse,
                    }
                }
                BLOCK_HEADERS => EthMessage::BlockHeaders {
                    request_id: f.u64("request id")?,
                    headers: read_raw_list(&mut f, "headers")?,
                },
                GET_BLOCK_BODIES => EthMessage::GetBlockBodies {
                    request_id: f.u64("request id")?,
                    hashes: f.b256_list("hashes")?,
                },
                BLOCK_BODIES => EthMessage::BlockBodies {
                    request_id: f.u64("request id")?,
                    bodies: read_raw_list(&mut f, "bodies")?,
                },
                NEW_POOLED_TRANSACTION_HASHES => {
                    let types = f.bytes("announced types")?.to_vec();
                    let mut sizes_list = f.list("announced sizes")?;
                    let mut sizes = Vec::with_capacity(types.len());
                    while !sizes_list.is_empty() {
                        let s = sizes_list.u64("announced size")?;
                        sizes.push(
                            u32::try_from(s).map_err(|_| RlpError::OutOfRange("announced size"))?,
                        );
                    }
                    let hashes = f.b256_list("announced hashes")?;
                    let mask = if version >= ETH72 {
                        let m = f.fixed::<16>("announced cell mask")?;
                        (m != [0; 16]).then_some(m)
                    } else {
                        None
                    };
                    let mut origins = Vec::new();
                    if version >= ETH73 {
                        let mut senders = f.list("announced senders")?;
                        let mut nonces = f.list("announced nonces")?;
                        while !senders.is_empty() {
                            let sender = Address::from(senders.fixed::<20>("announced sender")?);
                            if nonces.is_empty() {
                                return Err(RlpError::OutOfRange("announced nonces"));
                            }
                            origins.push((sender, nonces.u64("announced nonce")?));
                        }
                        nonces.finish()?;
                        if origins.len() != hashes.len() {
                            return Err(RlpError::OutOfRange("announced senders"));
                        }
                    }
                    EthMessage::NewPooledTransactionHashes(Announcement {
                        types,
                        sizes,
                        hashes,
                        mask,
                        origins,
                    })
                }
                GET_POOLED_TRANSACTIONS => EthMessage::GetPooledTransactions {
                    request_id: f.u64("request id")?,
                    hashes: f.b256_list("hashes")?,
                },
                POOLED_TRANSACTIONS => EthMessage::PooledTransactions {
                    request_id: f.u64("request id")?,
                    txs: read_tx_list(&mut f, "pooled transactions")?,
                },
                GET_RECEIPTS => {
                    let request_id = f.u64("request id")?;
                    let first_index = if version >= ETH70 {
                        f.u64("first receipt index")?
                    } else {
                        0
                    };
                    EthMessage::GetReceipts {
                        request_id,
                        first_index,
                        hashes: f.b256_list("hashes")?,
                    }
                }
                RECEIPTS => {
                    let request_id = f.u64("request id")?;
                    let incomplete = version >= ETH70 && f.bool("last block incomplete")?;
                    EthMessage::Receipts {
                        request_id,
                        incomplete,
                        blocks: read_raw_list(&mut f, "receipts")?,
                    }
                }
                GET_BLOCK_ACCESS_LISTS if version >= ETH71 => EthMessage::GetBlockAccessLists {
                    request_id: f.u64("request id")?,
                    hashes: f.b256_list("hashes")?,
                },
                BLOCK_ACCESS_LISTS if version >= ETH71 => EthMessage::BlockAccessLists {
                    request_id: f.u64("request id")?,
                    lists: read_raw_list(&mut f, "block access lists")?,
                },
                GET_CELLS if version >= ETH72 => EthMessage::GetCells {
                    request_id: f.u64("request id")?,
                    hashes: f.b256_list("hashes")?,
                    mask: f.fixed::<16>("cell mask")?,
                },
                CELLS if version >= ETH72 => {
                    let request_id = f.u64("request id")?;
                    let hashes = f.b256_list("hashes")?;
                    let mut outer = f.list("cells")?;
                    let mut cells = Vec::new();
                    while !outer.is_empty() {
                        let mut inner = outer.list("cells of a tx")?;
                        let mut tx = Vec::new();
                        while !inner.is_empty() {
                            let cell = inner.bytes("cell")?;
                            if cell.len() != BYTES_PER_CELL {
                                return Err(RlpError::BadLength {
                                    field: "cell",
                                    expected: BYTES_PER_CELL,
                                    found: cell.len(),
                                });
                            }
                            tx.push(Bytes::copy_from_slice(cell));
                        }
                        cells.push(tx);
                    }
                    EthMessage::Cells {
                        request_id,
                        hashes,
                        cells,
                        mask: f.fixed::<16>("cell mask")?,
                    }
                }
                BLOCK_RANGE_UPDATE if version >= ETH69 => {
                    return Ok(EthMessage::BlockRangeUpdate {
                        earliest: f.u64("earliest")?,
                        latest: f.u64("latest")?,
                        latest_hash: f.b256("latest hash")?,
                    });
                }
                _ => return Err(RlpError::OutOfRange("message id")),
            })
        })();
        let msg = match msg {
            Ok(m) => m,
            Err(RlpError::OutOfRange("message id")) => return Err(EthDecodeError::UnknownId(id)),
            Err(e) => return Err(rlp_err(e)),
        };
        f.finish().map_err(rlp_err)?;
        if let EthMessage::NewPooledTransactionHashes(a) = &msg
            && (a.types.len() != a.hashes.len() || a.sizes.len() != a.hashes.len())
        {
            return Err(EthDecodeError::Invalid {
                id,
                reason: "announcement lists differ in length",
            });
        }
        if let EthMessage::Cells {
            hashes,
            cells,
            mask,
            ..
        } = &msg
        {
            if hashes.len() != cells.len() {
                return Err(EthDecodeError::Invalid {
                    id,
                    reason: "Cells: hashes and cell lists differ in length",
                });
            }
            if *mask == [0; 16] && cells.iter().any(|c| !c.is_empty()) {
                return Err(EthDecodeError::Invalid {
                    id,
                    reason: "Cells: cells under an empty mask",
                });
            }
        }
        Ok(msg)
    }
}

fn encode_fork_id(id: &ForkId, out: &mut Vec<u8>) {
    let mut p = Vec::new();
    id.hash.as_slice().encode(&mut p);
    id.next.encode(&mut p);
    rlp::encode_list_payload(&p, out);
}

fn decode_fork_id(f: &mut Fields<'_>) -> Result<ForkId, RlpError> {
    let mut l = f.list("fork id")?;
    let hash = l.fixed::<4>("fork hash")?;
    let next = l.u64("fork next")?;
    l.finish()?;
    Ok(ForkId { hash, next })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(msg: EthMessage, version: u32) {
        let enc = msg.encode(version);
        assert_eq!(
            EthMessage::decode(msg.id(), version, &enc).unwrap(),
            msg,
            "{}",
            msg.name()
        );
    }

    #[test]
    fn every_message_round_trips() {
        let status = Status {
            version: 69,
            network_id: 3503995874084926,
            genesis: B256::repeat_byte(1),
            fork_id: ForkId {
                hash: [1, 2, 3, 4],
                next: 60,
            },
            total_difficulty: U256::ZERO,
            head: B256::repeat_byte(2),
            earliest: 0,
            latest: 600,
        };
        round_trip(EthMessage::Status(status.clone()), 69);
        round_trip(
            EthMessage::Status(Status {
                version: 68,
                total_difficulty: U256::from(131072),
                earliest: 0,
                latest: 0,
                ..status
            }),
            68,
        );
        let legacy = Bytes::from(vec![0xc3, 0x01, 0x02, 0x03]);
        let typed = Bytes::from(vec![0x02, 0xc2, 0x01, 0x02]);
        round_trip(
            EthMessage::Transactions(vec![legacy.clone(), typed.clone()]),
            69,
        );
        round_trip(
            EthMessage::PooledTransactions {
                request_id: 7,
                txs: vec![typed, legacy],
            },
            70,
        );
        for origin in [HashOrNumber::Number(0), HashOrNumber::Hash(B256::ZERO)] {
            round_trip(
                EthMessage::GetBlockHeaders {
                    request_id: 0,
                    origin,
                    amount: 5,
                    skip: 2,
                    reverse: true,
                },
                69,
            );
        }
        round_trip(
            EthMessage::NewPooledTransactionHashes(Announcement {
                types: vec![2, 3],
                sizes: vec![100, 131_000],
                hashes: vec![B256::repeat_byte(3), B256::repeat_byte(4)],
                mask: None,
                origins: vec![],
            }),
            68,
        );
        let get_receipts = EthMessage::GetReceipts {
            request_id: 1,
            first_index: 3,
            hashes: vec![B256::repeat_byte(5)],
        };
        round_trip(get_receipts.clone(), 70);
        let receipts = EthMessage::Receipts {
            request_id: 1,
            incomplete: true,
            blocks: vec![Bytes::from(vec![0xc0])],
        };
        round_trip(receipts, 70);
        round_trip(
            EthMessage::BlockRangeUpdate {
                earliest: 0,
                latest: 9,
                latest_hash: B256::repeat_byte(9),
            },
            69,
        );
    }

    #[test]
    fn block_access_lists_are_eth_71_messages() {
        let ask = EthMessage::GetBlockAccessLists {
            request_id: 4,
            hashes: vec![B256::repeat_byte(6), B256::repeat_byte(7)],
        };
        round_trip(ask.clone(), 71);
        // An empty string for a list the node lacks, an empty list for an empty one.
        let answer = EthMessage::BlockAccessLists {
            request_id: 4,
            lists: vec![
                Bytes::from_static(&NO_ACCESS_LIST),
                Bytes::from_static(&[0xc0]),
            ],
        };
        round_trip(answer.clone(), 71);
        assert_eq!(answer.encode(71), vec![0xc4, 0x04, 0xc2, 0x80, 0xc0]);
        for msg in [ask, answer] {
            assert!(matches!(
                EthMessage::decode(msg.id(), 70, &msg.encode(71)),
                Err(EthDecodeError::UnknownId(_))
            ));
        }
        assert_eq!(protocol_length(71), 20);
        assert_eq!(protocol_length(70), 18);
    }

    #[test]
    fn cells_are_eth_72_messages_and_announcements_carry_a_mask() {
        let ask = EthMessage::GetCells {
            request_id: 9,
            hashes: vec![B256::repeat_byte(1), B256::repeat_byte(2)],
            mask: DATA_CELLS,
        };
        round_trip(ask.clone(), 72);
        let cells = EthMessage::Cells {
            request_id: 9,
            hashes: vec![B256::repeat_byte(1)],
            cells: vec![vec![Bytes::from(vec![7u8; BYTES_PER_CELL]); 3]],
            mask: DATA_CELLS,
        };
        round_trip(cells.clone(), 72);
        for msg in [&ask, &cells] {
            assert!(matches!(
                EthMessage::decode(msg.id(), 71, &msg.encode(72)),
                Err(EthDecodeError::UnknownId(_))
            ));
        }
        // go-ethereum's layout: [reqid, [hash], [[cell...]...], mask], mask a 16-byte string.
        let enc = cells.encode(72);
        assert_eq!(&enc[enc.len() - 17..enc.len() - 16], &[0x90]);
        // A cell of another size, and hashes without their cells, are refused.
        let short = EthMessage::Cells {
            request_id: 9,
            hashes: vec![B256::repeat_byte(1)],
            cells: vec![vec![Bytes::from(vec![7u8; 2047])]],
            mask: DATA_CELLS,
        };
        assert!(EthMessage::decode(CELLS, 72, &short.encode(72)).is_err());
        let unmatched = EthMessage::Cells {
            request_id: 9,
            hashes: vec![B256::repeat_byte(1), B256::repeat_byte(2)],
            cells: vec![vec![]],
            mask: DATA_CELLS,
        };
        assert!(EthMessage::decode(CELLS, 72, &unmatched.encode(72)).is_err());
        // Bigger than any reply: refused before a cell is read.
        let huge = vec![0u8; MAX_CELLS_BODY + 1];
        assert!(matches!(
            EthMessage::decode(CELLS, 72, &huge),
            Err(EthDecodeError::Invalid { .. })
        ));
        // Announcements: the mask is there from eth/72 on, zero meaning none.
        let mut a = Announcement::default();
        a.push(3, 1_000, B256::repeat_byte(5));
        a.mask = Some(ALL_CELLS);
        let msg = EthMessage::NewPooledTransactionHashes(a.clone());
        round_trip(msg.clone(), 72);
        let older = EthMessage::decode(NEW_POOLED_TRANSACTION_HASHES, 71, &msg.encode(71)).unwrap();
        a.mask = None;
        assert_eq!(older, EthMessage::NewPooledTransactionHashes(a.clone()));
        round_trip(EthMessage::NewPooledTransactionHashes(a), 72);
        assert_eq!(protocol_length(72), 22);
        assert_eq!(SUPPORTED_VERSIONS[..2], [ETH73, ETH72]);
        assert_eq!(protocol_length(73), 22);
    }

    #[test]
    fn eth_73_announcements_carry_each_txs_sender_and_nonce() {
        let mut a = Announcement::default();
        a.push_with_origin(2, 110, B256::repeat_byte(1), Address::repeat_byte(7), 3);
        a.push_with_origin(3, 900, B256::repeat_byte(2), Address::repeat_byte(8), 0);
        a.mask = Some(ALL_CELLS);
        let msg = EthMessage::NewPooledTransactionHashes(a.clone());
        round_trip(msg.clone(), 73);
        // Nethermind's layout: [types, [sizes], [hashes], mask, [senders], [nonces]].
        let enc = msg.encode(73);
        let mut f = rlp::list(&mut &enc[..], "t").unwrap();
        f.bytes("types").unwrap();
        f.list("sizes").unwrap();
        f.list("hashes").unwrap();
        assert_eq!(f.fixed::<16>("mask").unwrap(), ALL_CELLS);
        let mut senders = f.list("senders").unwrap();
        assert_eq!(senders.fixed::<20>("s").unwrap(), [7u8; 20]);
        // eth/72 drops the origins; a message whose lists disagree is refused.
        let older = EthMessage::decode(NEW_POOLED_TRANSACTION_HASHES, 72, &msg.encode(72)).unwrap();
        let EthMessage::NewPooledTransactionHashes(older) = older else {
            panic!("an announcement")
        };
        assert!(older.origins.is_empty());
        let mut short = a.clone();
        short.origins.pop();
        let mut body = Vec::new();
        short.types.as_slice().encode(&mut body);
        short.sizes.encode(&mut body);
        hashes(&short.hashes, &mut body);
        ALL_CELLS.as_slice().encode(&mut body);
        let mut s = Vec::new();
        let mut n = Vec::new();
        for (a, b) in &short.origins {
            a.encode(&mut s);
            b.encode(&mut n);
        }
        rlp::encode_list_payload(&s, &mut body);
        rlp::encode_list_payload(&n, &mut body);
        let mut framed = Vec::new();
        rlp::encode_list_payload(&body, &mut framed);
        assert!(EthMessage::decode(NEW_POOLED_TRANSACTION_HASHES, 73, &framed).is_err());
        // Slicing keeps the origins with their hashes.
        let one = a.slice(1..2);
        assert_eq!(one.origins, vec![(Address::repeat_byte(8), 0)]);
        assert_eq!(one.mask, Some(ALL_CELLS));
    }

    #[test]
    fn cell_masks_are_lsb_first() {
        assert_eq!(mask_indices(&DATA_CELLS), (0..64).collect::<Vec<_>>());
        assert_eq!(mask_indices(&ALL_CELLS).len(), 128);
        let mut m = [0u8; 16];
        m[0] = 0b0000_0101;
        m[15] = 0x80;
        assert_eq!(mask_indices(&m), vec![0, 2, 127]);
        assert!(mask_covers(&ALL_CELLS, &DATA_CELLS));
        assert!(!mask_covers(&DATA_CELLS, &ALL_CELLS));
    }

    #[test]
    fn malformed_messages_are_errors() {
        assert!(matches!(
            EthMessage::decode(0x55, 69, &[0xc0]),
            Err(EthDecodeError::UnknownId(0x55))
        ));
        assert!(EthMessage::decode(BLOCK_RANGE_UPDATE, 68, &[0xc0]).is_err());
        assert!(EthMessage::decode(GET_POOLED_TRANSACTIONS, 69, &[0xc2, 0x01]).is_err());
        // Announcement with lists of different lengths.
        let mut a = Announcement::default();
        a.push(2, 100, B256::ZERO);
        a.sizes.push(5);
        let enc = EthMessage::NewPooledTransactionHashes(a).encode(69);
        assert!(matches!(
            EthMessage::decode(NEW_POOLED_TRANSACTION_HASHES, 69, &enc),
            Err(EthDecodeError::Invalid { .. })
        ));
        // A legacy tx wrapped in a string is not canonical.
        let wrapped = [0xc5, 0x84, 0xc3, 0x01, 0x02, 0x03];
        assert!(EthMessage::decode(TRANSACTIONS, 69, &wrapped).is_err());
    }
}
