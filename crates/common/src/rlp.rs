//! Strict RLP reading on top of alloy-rlp.
//!
//! Everything a peer sends goes through here, so the reader refuses every non-canonical
//! form (long-form sizes that fit the short form, single bytes wrapped in a string header,
//! integers with leading zeros, integers wider than their field) and names the field it
//! was reading when it fails. Because of that, re-encoding a decoded value reproduces the
//! input byte for byte, which lets callers hash the bytes they were given.

use alloy_primitives::{Address, B256, Bytes, TxKind, U256};
use alloy_rlp::{BufMut, Encodable, Header};

/// Why bytes are not a valid encoding. Each variant names the field being read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RlpError {
    /// The input ends before the item (or its header) does.
    #[error("{0}: input too short")]
    InputTooShort(&'static str),
    /// A header in a longer form than needed, or a single byte below 0x80 wrapped in a
    /// string header.
    #[error("{0}: non-canonical rlp")]
    NonCanonical(&'static str),
    /// An integer written with leading zero bytes.
    #[error("{0}: integer has leading zero bytes")]
    LeadingZeros(&'static str),
    /// An integer wider than its field.
    #[error("{field}: value wider than {max_bytes} bytes")]
    Overlong {
        /// The field being read.
        field: &'static str,
        /// The field's width, in bytes.
        max_bytes: usize,
    },
    /// A fixed-width string (hash, address, bloom) of another length.
    #[error("{field}: expected exactly {expected} bytes, found {found}")]
    BadLength {
        /// The field being read.
        field: &'static str,
        /// The field's width, in bytes.
        expected: usize,
        /// The length found, in bytes.
        found: usize,
    },
    /// A string where the field is a list.
    #[error("{0}: expected a list, found a string")]
    ExpectedList(&'static str),
    /// A list where the field is a string.
    #[error("{0}: expected a string, found a list")]
    ExpectedString(&'static str),
    /// Bytes left after the last field of a list (or after the whole item).
    #[error("{field}: {extra} unexpected trailing bytes")]
    TrailingBytes {
        /// The list or item being read.
        field: &'static str,
        /// How many bytes were left over.
        extra: usize,
    },
    /// An integer outside the values its field allows (a bool other than 0 or 1, ...).
    #[error("{0}: value out of range")]
    OutOfRange(&'static str),
}

impl RlpError {
    fn from_alloy(field: &'static str, e: alloy_rlp::Error) -> Self {
        use alloy_rlp::Error as E;
        match e {
            E::Overflow => RlpError::Overlong {
                field,
                max_bytes: usize::BITS as usize / 8,
            },
            E::LeadingZero => RlpError::LeadingZeros(field),
            E::InputTooShort => RlpError::InputTooShort(field),
            E::UnexpectedList => RlpError::ExpectedString(field),
            E::UnexpectedString => RlpError::ExpectedList(field),
            _ => RlpError::NonCanonical(field),
        }
    }
}

/// Reads an item header, refusing one whose payload runs past the input.
pub fn header(buf: &mut &[u8], field: &'static str) -> Result<Header, RlpError> {
    let h = Header::decode(buf).map_err(|e| RlpError::from_alloy(field, e))?;
    if h.payload_length > buf.len() {
        return Err(RlpError::InputTooShort(field));
    }
    Ok(h)
}

/// Reads a string item and returns its payload.
pub fn string<'a>(buf: &mut &'a [u8], field: &'static str) -> Result<&'a [u8], RlpError> {
    // A string item whose payload is a single byte below 0x80 is the byte itself.
    let first = *buf.first().ok_or(RlpError::InputTooShort(field))?;
    if first < 0x80 {
        let (item, rest) = buf.split_at(1);
        *buf = rest;
        return Ok(item);
    }
    let h = header(buf, field)?;
    if h.list {
        return Err(RlpError::ExpectedString(field));
    }
    let (payload, rest) = buf.split_at(h.payload_length);
    *buf = rest;
    Ok(payload)
}

/// Reads a list item and returns a reader over its payload.
pub fn list<'a>(buf: &mut &'a [u8], field: &'static str) -> Result<Fields<'a>, RlpError> {
    let h = header(buf, field)?;
    if !h.list {
        return Err(RlpError::ExpectedList(field));
    }
    let (payload, rest) = buf.split_at(h.payload_length);
    *buf = rest;
    Ok(Fields {
        buf: payload,
        field,
    })
}

/// Whether the next item is a list (without consuming it).
pub fn next_is_list(buf: &[u8]) -> bool {
    buf.first().is_some_and(|b| *b >= 0xc0)
}

/// Big-endian unsigned integer of at most N bytes, minimal encoding.
fn uint_bytes<'a, const N: usize>(
    buf: &mut &'a [u8],
    field: &'static str,
) -> Result<&'a [u8], RlpError> {
    let bytes = string(buf, field)?;
    if bytes.len() > N {
        return Err(RlpError::Overlong {
            field,
            max_bytes: N,
        });
    }
    if bytes.first() == Some(&0) {
        return Err(RlpError::LeadingZeros(field));
    }
    Ok(bytes)
}

/// Reader over the payload of a list: one typed read per field, then [`Fields::finish`].
#[derive(Debug, Clone, Copy)]
pub struct Fields<'a> {
    buf: &'a [u8],
    field: &'static str,
}

impl<'a> Fields<'a> {
    /// A reader over raw list payload (for callers that framed it themselves).
    pub fn new(buf: &'a [u8], field: &'static str) -> Self {
        Self { buf, field }
    }

    /// Whether every item of the list was read.
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// The bytes not read yet.
    pub fn remaining(&self) -> &'a [u8] {
        self.buf
    }

    /// Whether the next item is a list (false at the end).
    pub fn next_is_list(&self) -> bool {
        next_is_list(self.buf)
    }

    /// Fails unless every byte of the list was consumed.
    pub fn finish(self) -> Result<(), RlpError> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(RlpError::TrailingBytes {
                field: self.field,
                extra: self.buf.len(),
            })
        }
    }

    /// The next item, a string: its payload, borrowed.
    pub fn bytes(&mut self, field: &'static str) -> Result<&'a [u8], RlpError> {
        string(&mut self.buf, field)
    }

    /// The next item, a list: a reader over its payload.
    pub fn list(&mut self, field: &'static str) -> Result<Fields<'a>, RlpError> {
        list(&mut self.buf, field)
    }

    /// The raw encoding of the next item, header included, without decoding it.
    pub fn raw_item(&mut self, field: &'static str) -> Result<&'a [u8], RlpError> {
        let start = self.buf;
        if start.first().is_some_and(|b| *b < 0x80) {
            self.buf = &start[1..];
            return Ok(&start[..1]);
        }
        let h = header(&mut self.buf, field)?;
        self.buf = &self.buf[h.payload_length..];
        Ok(&start[..start.len() - self.buf.len()])
    }

    /// The next item as an integer of at most 8 bytes, canonical (no leading zeros).
    pub fn u64(&mut self, field: &'static str) -> Result<u64, RlpError> {
        let b = uint_bytes::<8>(&mut self.buf, field)?;
        Ok(b.iter().fold(0u64, |acc, x| (acc << 8) | u64::from(*x)))
    }

    /// The next item as an integer of at most 16 bytes, canonical.
    pub fn u128(&mut self, field: &'static str) -> Result<u128, RlpError> {
        let b = uint_bytes::<16>(&mut self.buf, field)?;
        Ok(b.iter().fold(0u128, |acc, x| (acc << 8) | u128::from(*x)))
    }

    /// The next item as an integer of at most 32 bytes, canonical.
    pub fn u256(&mut self, field: &'static str) -> Result<U256, RlpError> {
        let b = uint_bytes::<32>(&mut self.buf, field)?;
        Ok(U256::from_be_slice(b))
    }

    /// The next item as an integer of at most 1 byte, canonical (0 is the empty string).
    pub fn u8(&mut self, field: &'static str) -> Result<u8, RlpError> {
        let b = uint_bytes::<1>(&mut self.buf, field)?;
        Ok(b.first().copied().unwrap_or(0))
    }

    /// The next item as an integer that must be 0 or 1.
    pub fn bool(&mut self, field: &'static str) -> Result<bool, RlpError> {
        match self.u64(field)? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(RlpError::OutOfRange(field)),
        }
    }

    /// The next item as a string of exactly `N` bytes.
    pub fn fixed<const N: usize>(&mut self, field: &'static str) -> Result<[u8; N], RlpError> {
        let b = self.bytes(field)?;
        b.try_into().map_err(|_| RlpError::BadLength {
            field,
            expected: N,
            found: b.len(),
        })
    }

    /// The next item as a 32-byte hash.
    pub fn b256(&mut self, field: &'static str) -> Result<B256, RlpError> {
        self.fixed::<32>(field).map(B256::from)
    }

    /// The next item as a 20-byte address.
    pub fn address(&mut self, field: &'static str) -> Result<Address, RlpError> {
        self.fixed::<20>(field).map(Address::from)
    }

    /// A `to` field: empty for contract creation, else an address.
    pub fn kind(&mut self, field: &'static str) -> Result<TxKind, RlpError> {
        let b = self.bytes(field)?;
        match b.len() {
            0 => Ok(TxKind::Create),
            20 => Ok(TxKind::Call(Address::from_slice(b))),
            n => Err(RlpError::BadLength {
                field,
                expected: 20,
                found: n,
            }),
        }
    }

    /// The next item, a string, copied out as bytes.
    pub fn data(&mut self, field: &'static str) -> Result<Bytes, RlpError> {
        self.bytes(field).map(Bytes::copy_from_slice)
    }

    /// A list of 32-byte hashes.
    pub fn b256_list(&mut self, field: &'static str) -> Result<Vec<B256>, RlpError> {
        let mut items = self.list(field)?;
        let mut out = Vec::with_capacity(items.buf.len() / 33);
        while !items.is_empty() {
            out.push(items.b256(field)?);
        }
        Ok(out)
    }
}

/// Writes a list header followed by a payload already encoded.
pub fn encode_list_payload(payload: &[u8], out: &mut dyn BufMut) {
    Header {
        list: true,
        payload_length: payload.len(),
    }
    .encode(out);
    out.put_slice(payload);
}

/// Length of a list whose payload is `payload_len` bytes, header included.
pub fn list_length(payload_len: usize) -> usize {
    Header {
        list: true,
        payload_length: payload_len,
    }
    .length_with_payload()
}

/// Encodes `kind` as a `to` field.
pub fn encode_kind(kind: &TxKind, out: &mut dyn BufMut) {
    match kind {
        TxKind::Create => out.put_u8(alloy_rlp::EMPTY_STRING_CODE),
        TxKind::Call(a) => a.encode(out),
    }
}

/// Length of `kind` as a `to` field ([`encode_kind`]), header included.
pub fn kind_length(kind: &TxKind) -> usize {
    match kind {
        TxKind::Create => 1,
        TxKind::Call(a) => a.length(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_u64(bytes: &[u8]) -> Result<u64, RlpError> {
        let mut f = Fields::new(bytes, "t");
        let v = f.u64("n")?;
        f.finish()?;
        Ok(v)
    }

    #[test]
    fn integers_are_strict() {
        assert_eq!(read_u64(&[0x80]), Ok(0));
        assert_eq!(read_u64(&[0x05]), Ok(5));
        assert_eq!(read_u64(&[0x82, 0x01, 0x00]), Ok(256));
        // 0x05 wrapped in a string header is non-canonical.
        assert_eq!(read_u64(&[0x81, 0x05]), Err(RlpError::NonCanonical("n")));
        assert_eq!(
            read_u64(&[0x82, 0x00, 0x01]),
            Err(RlpError::LeadingZeros("n"))
        );
        assert_eq!(read_u64(&[0x00]), Err(RlpError::LeadingZeros("n")));
        assert!(matches!(
            read_u64(&[0x89, 1, 0, 0, 0, 0, 0, 0, 0, 0]),
            Err(RlpError::Overlong { .. })
        ));
        assert_eq!(read_u64(&[0x82, 0x01]), Err(RlpError::InputTooShort("n")));
        assert!(matches!(
            read_u64(&[0x05, 0x06]),
            Err(RlpError::TrailingBytes { .. })
        ));
    }

    #[test]
    fn long_form_size_for_short_payload_is_refused() {
        // 0xb8 0x01 'a' encodes a 1-byte string with the long form: not canonical.
        let mut f = Fields::new(&[0xb8, 0x01, 0x61], "t");
        assert!(f.bytes("s").is_err());
    }
}
