//! Block headers and bodies in their RLP form.
//!
//! Headers grow a field with most forks; the optional tail fields (base fee, withdrawals
//! root, blob gas, beacon root, requests hash) are present as a prefix: a later field is
//! only present when every earlier one is.

use crate::rlp::{self, Fields, RlpError};
use crate::transaction::{DecodeError, SignedTransaction};
use alloy_primitives::{Address, B256, Bloom, Bytes, U256, keccak256};
use alloy_rlp::Encodable;

/// A block header, field by field in RLP order (the Yellow Paper's, plus the fork
/// fields); its hash is the block hash.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Header {
    /// Hash of the parent block's header.
    pub parent_hash: B256,
    /// keccak256 of the RLP list of ommer headers (`sha3Uncles`; the empty list's hash
    /// since the merge).
    pub ommers_hash: B256,
    /// The address that receives the priority fees (`miner`, `feeRecipient`).
    pub beneficiary: Address,
    /// Root of the state trie after the block.
    pub state_root: B256,
    /// Root of the trie of the block's transactions, keyed by RLP index.
    pub transactions_root: B256,
    /// Root of the trie of the block's receipts, keyed by RLP index.
    pub receipts_root: B256,
    /// The union of its receipts' blooms (2048 bits).
    pub logs_bloom: Bloom,
    /// Proof-of-work difficulty; zero since the merge.
    pub difficulty: U256,
    /// The block's height; genesis is 0.
    pub number: u64,
    /// Most gas the block's transactions may use together.
    pub gas_limit: u64,
    /// Gas the block's transactions used together.
    pub gas_used: u64,
    /// Seconds since the Unix epoch.
    pub timestamp: u64,
    /// Up to 32 bytes the producer chooses.
    pub extra_data: Bytes,
    /// Proof-of-work mix digest; since the merge the beacon chain's `prevRandao`.
    pub mix_hash: B256,
    /// Proof-of-work nonce, 8 bytes; zero since the merge.
    pub nonce: [u8; 8],
    /// Base fee in wei per gas (EIP-1559), from London.
    pub base_fee_per_gas: Option<u64>,
    /// Root of the trie of the block's withdrawals (EIP-4895), from Shanghai.
    pub withdrawals_root: Option<B256>,
    /// Blob gas the block's blob transactions used (EIP-4844), from Cancun.
    pub blob_gas_used: Option<u64>,
    /// Blob gas above the target carried over from earlier blocks (EIP-4844), from
    /// Cancun; sets the blob base fee.
    pub excess_blob_gas: Option<u64>,
    /// The parent beacon block's root (EIP-4788), from Cancun.
    pub parent_beacon_block_root: Option<B256>,
    /// sha256 commitment to the block's execution-layer requests (EIP-7685), from Prague.
    pub requests_hash: Option<B256>,
}

impl Header {
    /// Decodes a header from the front of `buf`.
    pub fn decode(buf: &mut &[u8]) -> Result<Self, RlpError> {
        let mut f = rlp::list(buf, "header")?;
        let mut h = Header {
            parent_hash: f.b256("parentHash")?,
            ommers_hash: f.b256("ommersHash")?,
            beneficiary: f.address("beneficiary")?,
            state_root: f.b256("stateRoot")?,
            transactions_root: f.b256("transactionsRoot")?,
            receipts_root: f.b256("receiptsRoot")?,
            logs_bloom: Bloom::from(f.fixed::<256>("logsBloom")?),
            difficulty: f.u256("difficulty")?,
            number: f.u64("number")?,
            gas_limit: f.u64("gasLimit")?,
            gas_used: f.u64("gasUsed")?,
            timestamp: f.u64("timestamp")?,
            extra_data: f.data("extraData")?,
            mix_hash: f.b256("mixHash")?,
            nonce: f.fixed::<8>("nonce")?,
            ..Default::default()
        };
        if !f.is_empty() {
            h.base_fee_per_gas = Some(f.u64("baseFeePerGas")?);
        }
        if !f.is_empty() {
            h.withdrawals_root = Some(f.b256("withdrawalsRoot")?);
        }
        if !f.is_empty() {
            h.blob_gas_used = Some(f.u64("blobGasUsed")?);
            h.excess_blob_gas = Some(f.u64("excessBlobGas")?);
        }
        if !f.is_empty() {
            h.parent_beacon_block_root = Some(f.b256("parentBeaconBlockRoot")?);
        }
        if !f.is_empty() {
            h.requests_hash = Some(f.b256("requestsHash")?);
        }
        f.finish()?;
        Ok(h)
    }

    fn encode_fields(&self, out: &mut Vec<u8>) {
        self.parent_hash.encode(out);
        self.ommers_hash.encode(out);
        self.beneficiary.encode(out);
        self.state_root.encode(out);
        self.transactions_root.encode(out);
        self.receipts_root.encode(out);
        self.logs_bloom.encode(out);
        self.difficulty.encode(out);
        self.number.encode(out);
        self.gas_limit.encode(out);
        self.gas_used.encode(out);
        self.timestamp.encode(out);
        self.extra_data.encode(out);
        self.mix_hash.encode(out);
        self.nonce.as_slice().encode(out);
        // The optional tail is a prefix: stop at the first absent field.
        let Some(base_fee) = self.base_fee_per_gas else {
            return;
        };
        base_fee.encode(out);
        let Some(root) = self.withdrawals_root else {
            return;
        };
        root.encode(out);
        let (Some(used), Some(excess)) = (self.blob_gas_used, self.excess_blob_gas) else {
            return;
        };
        used.encode(out);
        excess.encode(out);
        let Some(beacon) = self.parent_beacon_block_root else {
            return;
        };
        beacon.encode(out);
        if let Some(requests) = self.requests_hash {
            requests.encode(out);
        }
    }

    /// Appends the header's RLP list to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let mut fields = Vec::with_capacity(600);
        self.encode_fields(&mut fields);
        rlp::encode_list_payload(&fields, out);
    }

    /// The header's RLP in a new buffer (what [`Header::hash`] hashes).
    pub fn encoded(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(640);
        self.encode(&mut out);
        out
    }

    /// The block hash: keccak of the header's RLP.
    pub fn hash(&self) -> B256 {
        keccak256(self.encoded())
    }
}

/// An EIP-4895 withdrawal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Withdrawal {
    /// The withdrawal's sequence number, counted by the consensus layer across blocks.
    pub index: u64,
    /// Index of the validator the withdrawal is from.
    pub validator_index: u64,
    /// The execution-layer address credited.
    pub address: Address,
    /// In gwei.
    pub amount: u64,
}

impl Withdrawal {
    fn fields_len(&self) -> usize {
        self.index.length()
            + self.validator_index.length()
            + self.address.length()
            + self.amount.length()
    }

    /// RLP of the withdrawal (what the withdrawals root commits to).
    pub fn encode(&self, out: &mut Vec<u8>) {
        alloy_rlp::Header {
            list: true,
            payload_length: self.fields_len(),
        }
        .encode(out);
        self.index.encode(out);
        self.validator_index.encode(out);
        self.address.encode(out);
        self.amount.encode(out);
    }

    fn decode(f: &mut Fields<'_>) -> Result<Self, RlpError> {
        let mut w = f.list("withdrawal")?;
        let out = Withdrawal {
            index: w.u64("withdrawal index")?,
            validator_index: w.u64("withdrawal validatorIndex")?,
            address: w.address("withdrawal address")?,
            amount: w.u64("withdrawal amount")?,
        };
        w.finish()?;
        Ok(out)
    }
}

/// Why bytes are not a block.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BlockDecodeError {
    /// The header (or an ommer header) does not decode.
    #[error("header: {0}")]
    Header(RlpError),
    /// A transaction of the body does not decode.
    #[error("transaction {index}: {source}")]
    Transaction {
        /// The transaction's position in the block, from 0.
        index: usize,
        /// Why it does not decode.
        source: DecodeError,
    },
    /// The block's or body's list structure is wrong (a list missing, bytes left over).
    #[error("body: {0}")]
    Body(#[from] RlpError),
}

/// A full block: header, transactions, ommers and (from Shanghai) withdrawals.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Block {
    /// The block's header.
    pub header: Header,
    /// The block hash: keccak256 of the header's RLP (computed once, on decode).
    pub hash: B256,
    /// The block's transactions, in execution order.
    pub transactions: Vec<SignedTransaction>,
    /// Ommer ("uncle") headers; empty since the merge.
    pub ommers: Vec<Header>,
    /// EIP-4895 withdrawals, present from Shanghai.
    pub withdrawals: Option<Vec<Withdrawal>>,
}

impl Block {
    /// Decodes one block from the front of `buf` (as in a `chain.rlp` file).
    pub fn decode(buf: &mut &[u8]) -> Result<Self, BlockDecodeError> {
        let mut f = rlp::list(buf, "block")?;
        let header_raw = f.raw_item("header")?;
        let header = Header::decode(&mut &header_raw[..]).map_err(BlockDecodeError::Header)?;
        let hash = keccak256(header_raw);

        let mut txs = f.list("transactions")?;
        let mut transactions = Vec::new();
        let mut rest = txs.remaining();
        while !rest.is_empty() {
            let tx = SignedTransaction::decode_network(&mut rest).map_err(|source| {
                BlockDecodeError::Transaction {
                    index: transactions.len(),
                    source,
                }
            })?;
            transactions.push(tx);
        }
        txs = Fields::new(rest, "transactions");
        txs.finish()?;

        let mut ommer_list = f.list("ommers")?;
        let mut ommers = Vec::new();
        let mut rest = ommer_list.remaining();
        while !rest.is_empty() {
            ommers.push(Header::decode(&mut rest).map_err(BlockDecodeError::Header)?);
        }
        ommer_list = Fields::new(rest, "ommers");
        ommer_list.finish()?;

        let withdrawals = if f.is_empty() {
            None
        } else {
            let mut list = f.list("withdrawals")?;
            let mut out = Vec::new();
            while !list.is_empty() {
                out.push(Withdrawal::decode(&mut list)?);
            }
            Some(out)
        };
        f.finish()?;
        Ok(Block {
            header,
            hash,
            transactions,
            ommers,
            withdrawals,
        })
    }

    /// The body: `rlp([transactions, ommers, withdrawals?])`.
    pub fn encode_body(&self) -> Vec<u8> {
        let mut payload = Vec::new();
        let mut txs = Vec::new();
        for tx in &self.transactions {
            tx.encode_network(&mut txs);
        }
        rlp::encode_list_payload(&txs, &mut payload);
        let mut ommers = Vec::new();
        for o in &self.ommers {
            o.encode(&mut ommers);
        }
        rlp::encode_list_payload(&ommers, &mut payload);
        if let Some(ws) = &self.withdrawals {
            let mut w = Vec::new();
            for wd in ws {
                wd.encode(&mut w);
            }
            rlp::encode_list_payload(&w, &mut payload);
        }
        let mut out = Vec::with_capacity(payload.len() + 9);
        rlp::encode_list_payload(&payload, &mut out);
        out
    }

    /// The whole block: `rlp([header, transactions, ommers, withdrawals?])`.
    pub fn encode(&self) -> Vec<u8> {
        let body = self.encode_body();
        let mut body_payload = &body[..];
        let fields = rlp::list(&mut body_payload, "body").expect("encode_body writes a list");
        let mut payload = self.header.encoded();
        payload.extend_from_slice(fields.remaining());
        let mut out = Vec::with_capacity(payload.len() + 9);
        rlp::encode_list_payload(&payload, &mut out);
        out
    }

    /// Rebuilds a block from a stored header and body.
    pub fn from_parts(header_rlp: &[u8], body_rlp: &[u8]) -> Result<Self, BlockDecodeError> {
        let mut payload = header_rlp.to_vec();
        let mut body = body_rlp;
        let fields = rlp::list(&mut body, "body")?;
        payload.extend_from_slice(fields.remaining());
        let mut out = Vec::with_capacity(payload.len() + 9);
        rlp::encode_list_payload(&payload, &mut out);
        Block::decode(&mut &out[..])
    }

    /// Root of the transactions trie.
    pub fn transactions_root(&self) -> B256 {
        alloy_trie::root::ordered_trie_root_with_encoder(&self.transactions, |tx, buf| {
            tx.encode_2718(buf)
        })
    }

    /// Root of the withdrawals trie, if the block has withdrawals.
    pub fn withdrawals_root(&self) -> Option<B256> {
        self.withdrawals
            .as_ref()
            .map(|ws| alloy_trie::root::ordered_trie_root_with_encoder(ws, |w, buf| w.encode(buf)))
    }

    /// Decodes a concatenation of blocks (a `chain.rlp` file).
    pub fn decode_all(mut bytes: &[u8]) -> Result<Vec<Block>, BlockDecodeError> {
        let mut blocks = Vec::new();
        while !bytes.is_empty() {
            blocks.push(Block::decode(&mut bytes)?);
        }
        Ok(blocks)
    }
}
