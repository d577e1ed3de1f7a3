//! The few RLP helpers the codec needs, over alloy-rlp's header parser: it checks
//! canonical sizes and never reads past its input, so nothing here can panic on any
//! bytes.

use alloy_rlp::{Decodable, Encodable, Header};

/// What is wrong with an RLP item.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RlpError {
    #[error("{0}")]
    Rlp(alloy_rlp::Error),
    #[error("list ends before a required element")]
    Missing,
    #[error("{got}-byte string where {want} bytes are expected")]
    Length { got: usize, want: usize },
}

impl From<alloy_rlp::Error> for RlpError {
    fn from(e: alloy_rlp::Error) -> Self {
        RlpError::Rlp(e)
    }
}

/// `b` as an RLP string.
pub(crate) fn bytes(b: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(b.len() + 3);
    b.encode(&mut out);
    out
}

/// `v` as an RLP unsigned integer.
pub(crate) fn uint(v: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(9);
    v.encode(&mut out);
    out
}

/// `payload` (concatenated items) wrapped as an RLP list.
pub(crate) fn list(payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(payload.len() + 3);
    Header {
        list: true,
        payload_length: payload.len(),
    }
    .encode(&mut out);
    out.extend_from_slice(payload);
    out
}

fn require(buf: &[u8]) -> Result<(), RlpError> {
    if buf.is_empty() {
        Err(RlpError::Missing)
    } else {
        Ok(())
    }
}

/// The payload of the list at the front of `buf`.
pub(crate) fn take_list<'a>(buf: &mut &'a [u8]) -> Result<&'a [u8], RlpError> {
    require(buf)?;
    Ok(Header::decode_bytes(buf, true)?)
}

/// The contents of the string at the front of `buf`.
pub(crate) fn take_bytes<'a>(buf: &mut &'a [u8]) -> Result<&'a [u8], RlpError> {
    require(buf)?;
    Ok(Header::decode_bytes(buf, false)?)
}

/// The canonical unsigned integer at the front of `buf`.
pub(crate) fn take_uint<T: Decodable>(buf: &mut &[u8]) -> Result<T, RlpError> {
    require(buf)?;
    Ok(T::decode(buf)?)
}

/// The whole item (header included) at the front of `buf`.
pub(crate) fn take_raw<'a>(buf: &mut &'a [u8]) -> Result<&'a [u8], RlpError> {
    require(buf)?;
    let start = *buf;
    let header = Header::decode(buf)?;
    // `Header::decode` has checked that the payload is there.
    let (_, rest) = buf
        .split_at_checked(header.payload_length)
        .ok_or(RlpError::Rlp(alloy_rlp::Error::InputTooShort))?;
    *buf = rest;
    Ok(&start[..start.len() - rest.len()])
}

/// A string item that must be all of `item`.
pub(crate) fn decode_bytes_exact(mut item: &[u8]) -> Result<&[u8], RlpError> {
    let b = take_bytes(&mut item)?;
    if !item.is_empty() {
        return Err(RlpError::Rlp(alloy_rlp::Error::UnexpectedLength));
    }
    Ok(b)
}

/// Reads the elements of a list payload in order.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RlpReader<'a> {
    buf: &'a [u8],
}

impl<'a> RlpReader<'a> {
    pub(crate) fn new(payload: &'a [u8]) -> Self {
        RlpReader { buf: payload }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    pub(crate) fn bytes(&mut self) -> Result<&'a [u8], RlpError> {
        take_bytes(&mut self.buf)
    }

    pub(crate) fn fixed<const N: usize>(&mut self) -> Result<[u8; N], RlpError> {
        let b = self.bytes()?;
        b.try_into().map_err(|_| RlpError::Length {
            got: b.len(),
            want: N,
        })
    }

    pub(crate) fn uint<T: Decodable>(&mut self) -> Result<T, RlpError> {
        take_uint(&mut self.buf)
    }

    pub(crate) fn list(&mut self) -> Result<RlpReader<'a>, RlpError> {
        take_list(&mut self.buf).map(RlpReader::new)
    }

    pub(crate) fn raw(&mut self) -> Result<&'a [u8], RlpError> {
        take_raw(&mut self.buf)
    }
}
