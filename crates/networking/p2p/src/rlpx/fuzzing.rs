//! Entry points for the fuzz targets (`fuzz/`): the handshake and frame decoders fed with
//! bytes a peer chooses, over an in-memory stream instead of a socket. Nothing else uses
//! them; they are not part of the crate's API.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use secp256k1::{PublicKey, SecretKey};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::codec::{BLOCK, FrameEncoder, STEP, no_pause, seeded_secrets};
use super::{PeerId, RlpxError, RlpxReader, ecies, handshake};

pub use super::handshake::{Ack, Auth, Format};

/// A stream that reads `input` at most `chunk` bytes a read (then end of stream) and
/// swallows what is written.
#[derive(Debug)]
pub struct Scripted {
    input: Vec<u8>,
    at: usize,
    chunk: usize,
}

impl Scripted {
    pub fn new(input: &[u8], chunk: usize) -> Self {
        Self {
            input: input.to_vec(),
            at: 0,
            chunk: chunk.max(1),
        }
    }
}

impl AsyncRead for Scripted {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let n = (self.input.len() - self.at)
            .min(self.chunk)
            .min(buf.remaining());
        let at = self.at;
        buf.put_slice(&self.input[at..at + n]);
        self.at += n;
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for Scripted {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// `body` padded, encrypted to `remote` and size-prefixed: an EIP-8 handshake message.
pub fn seal_eip8(remote: &PublicKey, body: &[u8]) -> Result<Vec<u8>, RlpxError> {
    handshake::seal_eip8(remote, body)
}

/// `plain` encrypted to `remote` and size-prefixed as it stands, without the padding
/// [`seal_eip8`] adds: what the reader decrypts is exactly `plain`.
pub fn seal_eip8_unpadded(remote: &PublicKey, plain: &[u8]) -> Result<Vec<u8>, RlpxError> {
    let prefix = u16::try_from(plain.len() + ecies::OVERHEAD)
        .map_err(|_| RlpxError::handshake("handshake message too large to send"))?
        .to_be_bytes();
    let sealed = ecies::encrypt(remote, plain, &prefix)?;
    Ok([&prefix[..], &sealed].concat())
}

/// `plain` encrypted to `remote` without a prefix: an old fixed-size handshake message
/// when `plain` has the old size.
pub fn seal_old(remote: &PublicKey, plain: &[u8]) -> Result<Vec<u8>, RlpxError> {
    ecies::encrypt(remote, plain, &[])
}

/// The recipient's side over `wire`: reads an auth, answers it; the initiator's id.
pub async fn accept(our_key: &SecretKey, wire: &[u8], chunk: usize) -> Result<PeerId, RlpxError> {
    let mut io = Scripted::new(wire, chunk);
    handshake::respond(&mut io, our_key).await.map(|(id, _)| id)
}

/// The initiator's side toward `remote` over `wire`: sends an auth, reads the ack.
pub async fn connect(
    our_key: &SecretKey,
    remote: &PeerId,
    wire: &[u8],
    chunk: usize,
) -> Result<(), RlpxError> {
    let mut io = Scripted::new(wire, chunk);
    handshake::initiate(&mut io, our_key, remote)
        .await
        .map(|_| ())
}

/// A frame reader over `wire` whose secrets mirror [`FrameSealer::new`] with the same
/// seed.
pub fn frame_reader(seed: u8, wire: &[u8], chunk: usize) -> RlpxReader<Scripted> {
    RlpxReader::with_secrets(
        Scripted::new(wire, chunk),
        seeded_secrets(seed),
        PeerId::ZERO,
    )
}

/// The sending side of [`frame_reader`]'s secrets.
pub struct FrameSealer(FrameEncoder);

impl FrameSealer {
    /// Cipher block size: frame bodies are padded to it.
    pub const BLOCK: usize = BLOCK;
    /// Bodies are encrypted and MACed in steps of this size.
    pub const STEP: usize = STEP;

    pub fn new(seed: u8) -> Self {
        Self(seeded_secrets(seed).into_codec().0)
    }

    /// One frame as [`super::RlpxWriter::send`] writes it.
    pub fn frame(&mut self, payload: &[u8], out: &mut Vec<u8>) -> Result<(), RlpxError> {
        self.0.encode_with(payload, out, no_pause)
    }

    /// A frame of any plaintext header and body, consistent or not.
    pub fn raw(&mut self, header: [u8; BLOCK], body: &[u8], out: &mut Vec<u8>) {
        self.0.encode_raw(header, body, out);
    }
}
