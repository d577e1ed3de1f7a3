//! Transaction receipts: status, cumulative gas, logs and their bloom.
//!
//! Encodings: the consensus form (what the receipts root commits to) is `rlp(receipt)` for
//! legacy transactions and `type || rlp(receipt)` for typed ones; inside RLP lists (eth
//! `Receipts`, storage) typed receipts are wrapped as strings, like transactions.

use crate::TxType;
use crate::rlp::{self, Fields, RlpError};
use alloy_primitives::{Address, B256, Bloom, Bytes, Log, LogData};
use alloy_rlp::{BufMut, Encodable, Header};

/// The receipt of one transaction, as the receipts root commits to it (the bloom is
/// computed from the logs, not stored).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Receipt {
    /// The transaction's type (EIP-2718), which prefixes a typed receipt's encoding.
    pub tx_type: TxType,
    /// Whether execution succeeded (status 1) or reverted (0), since Byzantium.
    pub success: bool,
    /// Before Byzantium (EIP-658) a receipt carried the state root after its
    /// transaction in place of the status; `Some` encodes that root instead of `success`.
    pub post_state: Option<B256>,
    /// Gas used in the block up to and including this transaction.
    pub cumulative_gas_used: u64,
    /// The logs the transaction emitted, in order.
    pub logs: Vec<Log>,
}

fn log_payload_len(log: &Log) -> usize {
    log.address.length() + log.data.topics().to_vec().length() + log.data.data.length()
}

fn encode_log(log: &Log, out: &mut dyn BufMut) {
    Header {
        list: true,
        payload_length: log_payload_len(log),
    }
    .encode(out);
    log.address.encode(out);
    log.data.topics().to_vec().encode(out);
    log.data.data.encode(out);
}

/// The bloom filter of a set of logs (addresses and topics).
pub fn logs_bloom<'a>(logs: impl IntoIterator<Item = &'a Log>) -> Bloom {
    let mut bloom = Bloom::ZERO;
    for log in logs {
        bloom.accrue_log(log);
    }
    bloom
}

impl Receipt {
    /// The 2048-bit bloom of the receipt's log addresses and topics.
    pub fn bloom(&self) -> Bloom {
        logs_bloom(&self.logs)
    }

    fn status_length(&self) -> usize {
        match &self.post_state {
            Some(root) => root.length(),
            None => self.success.length(),
        }
    }

    fn payload_len(&self, bloom: &Bloom) -> usize {
        let logs: usize = self
            .logs
            .iter()
            .map(|l| rlp::list_length(log_payload_len(l)))
            .sum();
        self.status_length()
            + self.cumulative_gas_used.length()
            + bloom.length()
            + rlp::list_length(logs)
    }

    /// The consensus encoding (EIP-2718 envelope).
    pub fn encode_2718(&self, out: &mut Vec<u8>) {
        let bloom = self.bloom();
        if self.tx_type != TxType::Legacy {
            out.push(self.tx_type as u8);
        }
        Header {
            list: true,
            payload_length: self.payload_len(&bloom),
        }
        .encode(out);
        match &self.post_state {
            Some(root) => root.encode(out),
            None => self.success.encode(out),
        }
        self.cumulative_gas_used.encode(out);
        bloom.encode(out);
        let logs: usize = self
            .logs
            .iter()
            .map(|l| rlp::list_length(log_payload_len(l)))
            .sum();
        Header {
            list: true,
            payload_length: logs,
        }
        .encode(out);
        for log in &self.logs {
            encode_log(log, out);
        }
    }

    /// The consensus encoding ([`Receipt::encode_2718`]) in a new buffer.
    pub fn encoded_2718(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(300 + self.logs.len() * 128);
        self.encode_2718(&mut out);
        out
    }

    /// As an element of an RLP list: typed receipts wrapped as strings.
    pub fn encode_network(&self, out: &mut Vec<u8>) {
        let env = self.encoded_2718();
        crate::transaction::wrap_network(&env, self.tx_type, out);
    }

    /// Decodes a consensus (2718) encoding.
    pub fn decode_2718(bytes: &[u8]) -> Result<Self, RlpError> {
        let (tx_type, mut body) = match bytes.first() {
            Some(b) if *b >= 0xc0 => (TxType::Legacy, bytes),
            Some(b) => (
                TxType::from_byte(*b).ok_or(RlpError::OutOfRange("receipt type"))?,
                &bytes[1..],
            ),
            None => return Err(RlpError::InputTooShort("receipt")),
        };
        let mut f = rlp::list(&mut body, "receipt")?;
        if !body.is_empty() {
            return Err(RlpError::TrailingBytes {
                field: "receipt",
                extra: body.len(),
            });
        }
        // A 32-byte string is a pre-Byzantium post-state root; otherwise the status.
        let (success, post_state) = if f.remaining().first() == Some(&0xa0) {
            (true, Some(f.b256("postState")?))
        } else {
            (f.bool("status")?, None)
        };
        let cumulative_gas_used = f.u64("cumulativeGasUsed")?;
        let _bloom = f.fixed::<256>("logsBloom")?;
        let mut logs_list = f.list("logs")?;
        let mut logs = Vec::new();
        while !logs_list.is_empty() {
            logs.push(decode_log(&mut logs_list)?);
        }
        f.finish()?;
        Ok(Receipt {
            tx_type,
            success,
            post_state,
            cumulative_gas_used,
            logs,
        })
    }

    /// Decodes one element of an RLP list of receipts.
    pub fn decode_network(buf: &mut &[u8]) -> Result<Self, RlpError> {
        let env = if rlp::next_is_list(buf) {
            let start = *buf;
            let h = rlp::header(buf, "receipt")?;
            *buf = &buf[h.payload_length..];
            &start[..start.len() - buf.len()]
        } else {
            rlp::string(buf, "receipt")?
        };
        Self::decode_2718(env)
    }
}

fn decode_log(f: &mut Fields<'_>) -> Result<Log, RlpError> {
    let mut l = f.list("log")?;
    let address: Address = l.address("log address")?;
    let topics = l.b256_list("log topics")?;
    let data: Bytes = l.data("log data")?;
    l.finish()?;
    Ok(Log {
        address,
        data: LogData::new_unchecked(topics, data),
    })
}

/// Encodes a list of receipts as stored (network element form).
pub fn encode_receipts(receipts: &[Receipt]) -> Vec<u8> {
    let mut payload = Vec::new();
    for r in receipts {
        r.encode_network(&mut payload);
    }
    let mut out = Vec::with_capacity(payload.len() + 9);
    rlp::encode_list_payload(&payload, &mut out);
    out
}

/// Decodes what [`encode_receipts`] wrote.
pub fn decode_receipts(mut bytes: &[u8]) -> Result<Vec<Receipt>, RlpError> {
    let list = rlp::list(&mut bytes, "receipts")?;
    let mut rest = list.remaining();
    let mut out = Vec::new();
    while !rest.is_empty() {
        out.push(Receipt::decode_network(&mut rest)?);
    }
    Ok(out)
}

/// The receipts root of a block.
pub fn receipts_root(receipts: &[Receipt]) -> B256 {
    alloy_trie::root::ordered_trie_root_with_encoder(receipts, |r, buf| r.encode_2718(buf))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn receipts_round_trip_in_both_forms() {
        let log = Log {
            address: Address::repeat_byte(1),
            data: LogData::new_unchecked(vec![B256::repeat_byte(2)], Bytes::from_static(b"hi")),
        };
        let rs = vec![
            Receipt {
                tx_type: TxType::Legacy,
                success: true,
                post_state: None,
                cumulative_gas_used: 21_000,
                logs: vec![],
            },
            Receipt {
                tx_type: TxType::Legacy,
                success: true,
                post_state: Some(B256::repeat_byte(7)),
                cumulative_gas_used: 42_000,
                logs: vec![],
            },
            Receipt {
                tx_type: TxType::Eip1559,
                success: false,
                post_state: None,
                cumulative_gas_used: 50_000,
                logs: vec![log],
            },
        ];
        for r in &rs {
            assert_eq!(&Receipt::decode_2718(&r.encoded_2718()).unwrap(), r);
        }
        assert_eq!(decode_receipts(&encode_receipts(&rs)).unwrap(), rs);
        assert_ne!(rs[2].bloom(), Bloom::ZERO);
        assert_eq!(receipts_root(&[]), alloy_trie::EMPTY_ROOT_HASH);
    }
}
