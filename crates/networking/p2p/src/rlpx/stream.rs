//! The async face of RLPx: a handshaken connection that sends and receives frames.

use std::fmt;

use secp256k1::SecretKey;
use tokio::io::{
    AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, DuplexStream, ReadHalf, WriteHalf,
};
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};

use super::codec::{
    BLOCK, FrameDecoder, FrameEncoder, HEADER_LEN, STEP, Secrets, no_pause, padded_len,
};
use super::{PeerId, RlpxError, handshake};

/// Body bytes are buffered in steps of this size, so that a peer announcing a large
/// frame gets memory only as fast as it actually sends data. Each step is MACed and
/// decrypted as it arrives (the codec's step).
const READ_CHUNK: usize = STEP;

/// A byte stream that splits into a reading and a writing half for two tasks.
///
/// A `TcpStream` splits into owned halves that share no lock. `tokio::io::split` (what
/// other streams get) holds one mutex across every read and write of either half: a
/// peer's reader, run on the untrusted admission lane's lowest-priority threads, could
/// be preempted inside a read while holding it, and the peer's writer, on a runtime
/// worker, would block that worker (and every task queued on it) until the reader ran
/// again.
pub trait Split: AsyncRead + AsyncWrite + Unpin + Send {
    /// The reading half.
    type Read: AsyncRead + Unpin + Send;
    /// The writing half.
    type Write: AsyncWrite + Unpin + Send;
    /// Splits the stream into its halves.
    fn split_io(self) -> (Self::Read, Self::Write);
}

impl Split for TcpStream {
    type Read = OwnedReadHalf;
    type Write = OwnedWriteHalf;
    fn split_io(self) -> (OwnedReadHalf, OwnedWriteHalf) {
        self.into_split()
    }
}

impl Split for DuplexStream {
    type Read = ReadHalf<DuplexStream>;
    type Write = WriteHalf<DuplexStream>;
    fn split_io(self) -> (Self::Read, Self::Write) {
        tokio::io::split(self)
    }
}

/// An established RLPx connection over `S` (typically a `TcpStream`).
///
/// Neither the handshake nor [`recv`](Self::recv) has a timeout of its own: wrap
/// them in [`tokio::time::timeout`]. `recv` is cancel-safe, so it can also sit in a
/// `tokio::select!`; `send`, `connect` and `accept` are not, and once one of them is
/// cancelled the connection must be dropped.
pub struct RlpxStream<S> {
    io: S,
    ingress: Ingress,
    egress: Egress,
    remote: PeerId,
}

/// The receiving half of a [split](RlpxStream::split) connection.
pub struct RlpxReader<R> {
    io: R,
    ingress: Ingress,
    remote: PeerId,
}

/// The sending half of a [split](RlpxStream::split) connection.
pub struct RlpxWriter<W> {
    io: W,
    egress: Egress,
    remote: PeerId,
}

impl<S> RlpxStream<S>
where
    S: AsyncRead + AsyncWrite + Unpin + Send,
{
    /// Dialling side of the handshake: sends an EIP-8 `auth` to `remote`, then reads its
    /// `ack` (EIP-8 or the old fixed-size encoding).
    pub async fn connect(
        mut stream: S,
        our_key: &SecretKey,
        remote: PeerId,
    ) -> Result<Self, RlpxError> {
        let secrets = handshake::initiate(&mut stream, our_key, &remote).await?;
        Ok(Self::new(stream, secrets, remote))
    }

    /// Listening side of the handshake: reads an `auth` (EIP-8 or old encoding) and
    /// answers with an `ack` in the same encoding. The initiator's identity is then
    /// available from [`remote_id`](Self::remote_id).
    pub async fn accept(mut stream: S, our_key: &SecretKey) -> Result<Self, RlpxError> {
        let (remote, secrets) = handshake::respond(&mut stream, our_key).await?;
        Ok(Self::new(stream, secrets, remote))
    }

    /// Sends one frame carrying `payload` (for devp2p: `rlp(msg-id) || msg-data`,
    /// already compressed if compression is on). At most [`MAX_FRAME_SIZE`] bytes.
    ///
    /// [`MAX_FRAME_SIZE`]: super::MAX_FRAME_SIZE
    pub async fn send(&mut self, payload: &[u8]) -> Result<(), RlpxError> {
        self.egress.send(&mut self.io, payload).await
    }

    /// Receives one frame and returns its payload, padding removed. Cancel-safe.
    pub async fn recv(&mut self) -> Result<Vec<u8>, RlpxError> {
        self.ingress.recv(&mut self.io).await
    }

    /// Splits the connection into halves that can be used from different tasks.
    pub fn split(self) -> (RlpxReader<S::Read>, RlpxWriter<S::Write>)
    where
        S: Split,
    {
        let (read, write) = self.io.split_io();
        (
            RlpxReader {
                io: read,
                ingress: self.ingress,
                remote: self.remote,
            },
            RlpxWriter {
                io: write,
                egress: self.egress,
                remote: self.remote,
            },
        )
    }
}

impl<S> RlpxStream<S> {
    fn new(io: S, secrets: Secrets, remote: PeerId) -> Self {
        let (encoder, decoder) = secrets.into_codec();
        Self {
            io,
            ingress: Ingress::new(decoder),
            egress: Egress::new(encoder),
            remote,
        }
    }

    /// The peer's identity. On an accepted connection the `auth` signature proved
    /// it; on a dialled one, only the holder of that key can produce frames that
    /// pass the MAC check, so the first successful [`recv`](Self::recv) proves it.
    pub fn remote_id(&self) -> PeerId {
        self.remote
    }

    /// Largest frame [`recv`](Self::recv) accepts; [`MAX_FRAME_SIZE`] unless lowered.
    ///
    /// [`MAX_FRAME_SIZE`]: super::MAX_FRAME_SIZE
    pub fn max_frame_size(&self) -> usize {
        self.ingress.decoder.max_frame_size()
    }

    /// Lowers (or restores) the largest frame [`recv`](Self::recv) accepts. A frame
    /// declaring more is refused with [`RlpxError::FrameTooLarge`] as soon as its
    /// header is read, before its body is buffered. Values above
    /// [`MAX_FRAME_SIZE`](super::MAX_FRAME_SIZE) are clamped to it. Carried over by
    /// [`split`](RlpxStream::split).
    pub fn set_max_frame_size(&mut self, max: usize) {
        self.ingress.decoder.set_max_frame_size(max);
    }
}

impl<R: AsyncRead + Unpin> RlpxReader<R> {
    /// Same as [`RlpxStream::recv`]. Cancel-safe.
    pub async fn recv(&mut self) -> Result<Vec<u8>, RlpxError> {
        self.ingress.recv(&mut self.io).await
    }
}

impl<R> RlpxReader<R> {
    /// A reader over `io` with the receiving half of `secrets`, no handshake (the fuzz
    /// targets').
    pub(crate) fn with_secrets(io: R, secrets: Secrets, remote: PeerId) -> Self {
        let (_, decoder) = secrets.into_codec();
        Self {
            io,
            ingress: Ingress::new(decoder),
            remote,
        }
    }

    /// The peer's identity; see [`RlpxStream::remote_id`].
    pub fn remote_id(&self) -> PeerId {
        self.remote
    }

    /// See [`RlpxStream::max_frame_size`].
    pub fn max_frame_size(&self) -> usize {
        self.ingress.decoder.max_frame_size()
    }

    /// See [`RlpxStream::set_max_frame_size`].
    pub fn set_max_frame_size(&mut self, max: usize) {
        self.ingress.decoder.set_max_frame_size(max);
    }

    /// Calls `pause` between the 64 KB steps in which a frame body is MACed and
    /// decrypted (none by default). A reader on a low-priority thread passes a function
    /// that gives the core to waiting threads, so that a large frame never holds it for
    /// more than one step.
    pub fn set_pause(&mut self, pause: fn()) {
        self.ingress.pause = pause;
    }
}

impl<W: AsyncWrite + Unpin> RlpxWriter<W> {
    /// Same as [`RlpxStream::send`].
    pub async fn send(&mut self, payload: &[u8]) -> Result<(), RlpxError> {
        self.egress.send(&mut self.io, payload).await
    }
}

impl<W> RlpxWriter<W> {
    /// The peer's identity; see [`RlpxStream::remote_id`].
    pub fn remote_id(&self) -> PeerId {
        self.remote
    }

    /// Calls `pause` between the 64 KB steps in which a frame body is encrypted and
    /// MACed (none by default); see [`RlpxReader::set_pause`].
    pub fn set_pause(&mut self, pause: fn()) {
        self.egress.pause = pause;
    }
}

impl<S> fmt::Debug for RlpxStream<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RlpxStream")
            .field("remote", &self.remote)
            .finish_non_exhaustive()
    }
}

impl<R> fmt::Debug for RlpxReader<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RlpxReader")
            .field("remote", &self.remote)
            .finish_non_exhaustive()
    }
}

impl<W> fmt::Debug for RlpxWriter<W> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RlpxWriter")
            .field("remote", &self.remote)
            .finish_non_exhaustive()
    }
}

/// Sending state: the encoder and a reusable output buffer.
struct Egress {
    encoder: FrameEncoder,
    buf: Vec<u8>,
    pause: fn(),
}

impl Egress {
    fn new(encoder: FrameEncoder) -> Self {
        Self {
            encoder,
            buf: Vec::new(),
            pause: no_pause,
        }
    }

    async fn send<W: AsyncWrite + Unpin>(
        &mut self,
        io: &mut W,
        payload: &[u8],
    ) -> Result<(), RlpxError> {
        self.buf.clear();
        self.encoder
            .encode_with(payload, &mut self.buf, self.pause)?;
        io.write_all(&self.buf).await?;
        io.flush().await?;
        // Do not keep a megabyte around because one large message went out.
        if self.buf.capacity() > 4 * READ_CHUNK {
            self.buf = Vec::new();
        }
        Ok(())
    }
}

/// Where a partly received frame stands. Kept between calls so that a cancelled
/// `recv` loses nothing: the next call carries on from here.
enum Pending {
    /// Reading the 32-byte header; this many bytes are in already.
    Header { filled: usize },
    /// Header checked; reading `padded(size) + 16` body bytes into `body`, of which
    /// the first `done` are MACed and decrypted.
    Body {
        size: usize,
        filled: usize,
        done: usize,
    },
}

/// Receiving state.
struct Ingress {
    decoder: FrameDecoder,
    header: [u8; HEADER_LEN],
    body: Vec<u8>,
    pending: Pending,
    pause: fn(),
}

impl Ingress {
    fn new(decoder: FrameDecoder) -> Self {
        Self {
            decoder,
            header: [0u8; HEADER_LEN],
            body: Vec::new(),
            pending: Pending::Header { filled: 0 },
            pause: no_pause,
        }
    }

    /// Reads into `buf[*filled..]` until it is full. Each read either makes progress
    /// recorded in `filled` or is cancelled having read nothing, so this may be
    /// dropped at any await point.
    async fn fill<R: AsyncRead + Unpin>(
        io: &mut R,
        buf: &mut [u8],
        filled: &mut usize,
    ) -> Result<(), RlpxError> {
        while *filled < buf.len() {
            let n = io.read(&mut buf[*filled..]).await?;
            if n == 0 {
                return Err(RlpxError::Closed);
            }
            *filled += n;
        }
        Ok(())
    }

    async fn recv<R: AsyncRead + Unpin>(&mut self, io: &mut R) -> Result<Vec<u8>, RlpxError> {
        loop {
            match &mut self.pending {
                Pending::Header { filled } => {
                    Self::fill(io, &mut self.header, filled).await?;
                    let size = self.decoder.decode_header(&self.header)?;
                    self.body.clear();
                    self.pending = Pending::Body {
                        size,
                        filled: 0,
                        done: 0,
                    };
                }
                Pending::Body { size, filled, done } => {
                    let size = *size;
                    let ciphertext = padded_len(size);
                    let total = ciphertext + BLOCK;
                    while *filled < total {
                        // Grow the buffer only as data arrives.
                        let target = total.min(*filled + READ_CHUNK);
                        if self.body.len() < target {
                            self.body.resize(target, 0);
                        }
                        Self::fill(io, &mut self.body[..target], filled).await?;
                        // MAC and decrypt what came, one step at a time, giving way
                        // between steps (`set_pause`).
                        let upto = (*filled).min(ciphertext);
                        if *done > 0 && *done < upto {
                            (self.pause)();
                        }
                        if *done < upto {
                            self.decoder.absorb_body(&mut self.body[*done..upto]);
                            *done = upto;
                        }
                    }
                    self.pending = Pending::Header { filled: 0 };
                    self.decoder.finish_body(&self.body[ciphertext..total])?;
                    let mut payload = std::mem::take(&mut self.body);
                    payload.truncate(size);
                    return Ok(payload);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use secp256k1::SECP256K1;
    use tokio::io::{DuplexStream, duplex};
    use tokio::net::{TcpListener, TcpStream};

    use super::*;
    use crate::rlpx::codec::tests::mirrored;
    use crate::rlpx::{MAX_FRAME_SIZE, peer_id, random_secret_key};

    const LIMIT: Duration = Duration::from_secs(10);

    fn keys() -> (SecretKey, PeerId) {
        let key = random_secret_key().unwrap();
        let id = peer_id(&key.public_key(SECP256K1));
        (key, id)
    }

    /// A connected pair over an in-memory pipe: (initiator, recipient).
    async fn pair(
        buffer: usize,
    ) -> (
        RlpxStream<DuplexStream>,
        RlpxStream<DuplexStream>,
        PeerId,
        PeerId,
    ) {
        let (a, b) = duplex(buffer);
        let (key_a, id_a) = keys();
        let (key_b, id_b) = keys();
        let (client, server) = tokio::time::timeout(LIMIT, async {
            tokio::join!(
                RlpxStream::connect(a, &key_a, id_b),
                RlpxStream::accept(b, &key_b)
            )
        })
        .await
        .expect("handshake timed out");
        (client.unwrap(), server.unwrap(), id_a, id_b)
    }

    fn payloads() -> Vec<Vec<u8>> {
        vec![
            Vec::new(),
            vec![0x42],
            (0..16).collect(),
            (0..(1 << 20)).map(|i: u32| (i % 251) as u8).collect(),
            b"\x10hello".to_vec(),
        ]
    }

    /// The futures are spawned onto multi-threaded runtimes by the session code.
    #[allow(dead_code)]
    fn futures_are_send(
        io: DuplexStream,
        key: SecretKey,
        mut stream: RlpxStream<DuplexStream>,
        mut reader: RlpxReader<ReadHalf<DuplexStream>>,
        mut writer: RlpxWriter<WriteHalf<DuplexStream>>,
    ) {
        fn is_send<T: Send>(_: T) {}
        is_send(RlpxStream::connect(io, &key, PeerId::ZERO));
        is_send(stream.recv());
        is_send(stream.send(&[]));
        is_send(reader.recv());
        is_send(writer.send(&[]));
    }

    #[tokio::test]
    async fn loopback_over_duplex() {
        let (mut client, mut server, id_a, id_b) = pair(64 * 1024).await;
        assert_eq!(client.remote_id(), id_b);
        assert_eq!(server.remote_id(), id_a);

        for payload in payloads() {
            // Sends of a megabyte need the other side reading at the same time.
            let (sent, got) = tokio::join!(client.send(&payload), server.recv());
            sent.unwrap();
            assert_eq!(got.unwrap(), payload);
            let (sent, got) = tokio::join!(server.send(&payload), client.recv());
            sent.unwrap();
            assert_eq!(got.unwrap(), payload);
        }
    }

    static READER_PAUSES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

    fn count_reader_pause() {
        READER_PAUSES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// A megabyte frame read through a split reader is MACed and decrypted in 64 KB
    /// steps as it arrives, with the reader's pause between steps; frames read the same.
    #[tokio::test]
    async fn a_large_frame_is_read_in_steps_with_pauses() {
        let (client, server, _, _) = pair(READ_CHUNK / 2).await;
        let (_, mut writer) = client.split();
        let (mut reader, _) = server.split();
        reader.set_pause(count_reader_pause);
        let big: Vec<u8> = (0..(16 * READ_CHUNK) as u32)
            .map(|i| (i % 249) as u8)
            .collect();
        for payload in [big.clone(), vec![7u8; 100], big] {
            let before = READER_PAUSES.load(std::sync::atomic::Ordering::Relaxed);
            let (sent, got) = tokio::join!(writer.send(&payload), reader.recv());
            sent.unwrap();
            assert_eq!(got.unwrap(), payload);
            // 16 steps, a pause before each but the first; none for a small frame.
            let pauses = READER_PAUSES.load(std::sync::atomic::Ordering::Relaxed) - before;
            assert_eq!(pauses, (payload.len() / READ_CHUNK).saturating_sub(1));
        }
    }

    #[tokio::test]
    async fn loopback_over_tcp_with_split_halves() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (key_a, id_a) = keys();
        let (key_b, id_b) = keys();

        let server = tokio::spawn(async move {
            let (socket, _) = listener.accept().await.unwrap();
            let stream = RlpxStream::accept(socket, &key_b).await.unwrap();
            assert_eq!(stream.remote_id(), id_a);
            // Echo every frame back, reading and writing from separate tasks.
            let (mut reader, mut writer) = stream.split();
            assert_eq!(reader.remote_id(), id_a);
            assert_eq!(writer.remote_id(), id_a);
            let (tx, mut rx) = tokio::sync::mpsc::channel::<Vec<u8>>(4);
            let echo = tokio::spawn(async move {
                while let Some(frame) = rx.recv().await {
                    writer.send(&frame).await.unwrap();
                }
            });
            loop {
                match reader.recv().await {
                    Ok(frame) => tx.send(frame).await.unwrap(),
                    Err(RlpxError::Closed) => break,
                    Err(e) => panic!("server recv: {e}"),
                }
            }
            drop(tx);
            echo.await.unwrap();
        });

        let socket = TcpStream::connect(addr).await.unwrap();
        let stream = tokio::time::timeout(LIMIT, RlpxStream::connect(socket, &key_a, id_b))
            .await
            .unwrap()
            .unwrap();
        let (mut reader, mut writer) = stream.split();
        assert_eq!(reader.remote_id(), id_b);
        let expected = payloads();
        let to_send = expected.clone();
        let sender = tokio::spawn(async move {
            for payload in &to_send {
                writer.send(payload).await.unwrap();
            }
            writer
        });
        for payload in &expected {
            let got = tokio::time::timeout(LIMIT, reader.recv())
                .await
                .unwrap()
                .unwrap();
            assert_eq!(&got, payload);
        }
        // Closing our write side ends the server's loop.
        let writer = sender.await.unwrap();
        drop((reader, writer));
        tokio::time::timeout(LIMIT, server).await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn accepts_old_format_auth() {
        let (mut a, b) = duplex(64 * 1024);
        let (key_a, id_a) = keys();
        let (key_b, id_b) = keys();
        let (client, server) = tokio::join!(
            handshake::initiate_old(&mut a, &key_a, &id_b),
            RlpxStream::accept(b, &key_b)
        );
        let mut client = RlpxStream::new(a, client.unwrap(), id_b);
        let mut server = server.unwrap();
        assert_eq!(server.remote_id(), id_a);
        for payload in payloads() {
            let (sent, got) = tokio::join!(client.send(&payload), server.recv());
            sent.unwrap();
            assert_eq!(got.unwrap(), payload);
            let (sent, got) = tokio::join!(server.send(&payload), client.recv());
            sent.unwrap();
            assert_eq!(got.unwrap(), payload);
        }
    }

    #[tokio::test]
    async fn recv_survives_cancellation() {
        let (mut client, mut server, _, _) = pair(1024).await;
        let payload: Vec<u8> = (0..100_000u32).map(|i| i as u8).collect();
        let sender = tokio::spawn(async move {
            // Dribble the frame out so the reader is cancelled mid-header and
            // mid-body several times.
            client.send(&payload).await.unwrap();
            (client, payload)
        });
        let mut cancelled = 0;
        let got = loop {
            tokio::select! {
                biased;
                r = server.recv() => break r.unwrap(),
                _ = tokio::task::yield_now() => cancelled += 1,
            }
        };
        let (_, payload) = sender.await.unwrap();
        assert_eq!(got, payload);
        assert!(cancelled > 0);
    }

    #[tokio::test]
    async fn tampered_frame_is_a_mac_error() {
        for (flip_at, header) in [(5usize, true), (20, true), (40, false), (60, false)] {
            let (mut encoder, decoder) = mirrored(7);
            let mut wire = Vec::new();
            encoder
                .encode(b"a frame of some thirty bytes..", &mut wire)
                .unwrap();
            wire[flip_at] ^= 0x01;

            let (mut tx, rx) = duplex(4096);
            let mut reader = RlpxReader {
                io: rx,
                ingress: Ingress::new(decoder),
                remote: PeerId::ZERO,
            };
            tx.write_all(&wire).await.unwrap();
            let err = tokio::time::timeout(LIMIT, reader.recv())
                .await
                .unwrap()
                .unwrap_err();
            if header {
                assert!(matches!(err, RlpxError::HeaderMac), "{flip_at}: {err}");
            } else {
                assert!(matches!(err, RlpxError::FrameMac), "{flip_at}: {err}");
            }
        }
    }

    #[tokio::test]
    async fn tampered_frame_between_real_peers() {
        // A relay that flips one bit in the first frame after the handshake.
        let (a, relay_a) = duplex(64 * 1024);
        let (relay_b, b) = duplex(64 * 1024);
        let (key_a, _) = keys();
        let (key_b, id_b) = keys();
        let (mut relay_a_read, mut relay_a_write) = tokio::io::split(relay_a);
        let (mut relay_b_read, mut relay_b_write) = tokio::io::split(relay_b);
        // ack: pass through untouched.
        tokio::spawn(async move {
            let _ = tokio::io::copy(&mut relay_b_read, &mut relay_a_write).await;
        });
        // auth, then frames: the auth size is in its prefix; flip a body byte of the
        // first frame after it.
        tokio::spawn(async move {
            let mut prefix = [0u8; 2];
            relay_a_read.read_exact(&mut prefix).await.unwrap();
            let mut auth = vec![0u8; usize::from(u16::from_be_bytes(prefix))];
            relay_a_read.read_exact(&mut auth).await.unwrap();
            relay_b_write.write_all(&prefix).await.unwrap();
            relay_b_write.write_all(&auth).await.unwrap();
            let mut frame = [0u8; HEADER_LEN + 16 + 16];
            relay_a_read.read_exact(&mut frame).await.unwrap();
            frame[HEADER_LEN + 3] ^= 0x10;
            relay_b_write.write_all(&frame).await.unwrap();
            let _ = tokio::io::copy(&mut relay_a_read, &mut relay_b_write).await;
        });
        let (client, server) = tokio::join!(
            RlpxStream::connect(a, &key_a, id_b),
            RlpxStream::accept(b, &key_b)
        );
        let (mut client, mut server) = (client.unwrap(), server.unwrap());
        client.send(b"sixteen bytes!!!").await.unwrap();
        let err = tokio::time::timeout(LIMIT, server.recv())
            .await
            .unwrap()
            .unwrap_err();
        assert!(matches!(err, RlpxError::FrameMac), "{err}");
    }

    async fn accept_garbage(input: Vec<u8>) -> RlpxError {
        let (key, _) = keys();
        let (mut tx, rx) = duplex(8192);
        let accept = tokio::spawn(async move { RlpxStream::accept(rx, &key).await });
        // The peer may be refused before it finishes writing; ignore that.
        let _ = tx.write_all(&input).await;
        drop(tx);
        tokio::time::timeout(Duration::from_secs(2), accept)
            .await
            .expect("garbage handshake was not refused quickly")
            .unwrap()
            .unwrap_err()
    }

    #[tokio::test]
    async fn garbage_handshakes_fail_quickly() {
        let mut random = vec![0u8; 4000];
        crate::rlpx::random_bytes(&mut random).unwrap();

        // A size prefix of 65535 with bytes behind it.
        let mut huge = vec![0xff, 0xff];
        huge.extend_from_slice(&random);
        assert!(matches!(
            accept_garbage(huge).await,
            RlpxError::Handshake(_)
        ));

        // A plausible size, then random bytes: fails to decrypt.
        let mut plausible = 600u16.to_be_bytes().to_vec();
        plausible.push(0x04);
        plausible.extend_from_slice(&random[..599]);
        let err = accept_garbage(plausible).await;
        assert!(
            matches!(err, RlpxError::EciesMac | RlpxError::InvalidPublicKey),
            "{err}"
        );

        // Looks like the start of an old-format auth, then junk and EOF.
        let mut old = vec![0x04];
        old.extend_from_slice(&random[..400]);
        let err = accept_garbage(old).await;
        assert!(matches!(err, RlpxError::Closed), "{err}");

        // Too small to be an auth.
        assert!(matches!(
            accept_garbage(vec![0x00, 0x20, 1, 2, 3]).await,
            RlpxError::Handshake(_)
        ));

        // Nothing at all.
        assert!(matches!(
            accept_garbage(Vec::new()).await,
            RlpxError::Closed
        ));

        // Fully random input, whatever its first bytes say.
        for chunk in random.chunks(500) {
            let _ = accept_garbage(chunk.to_vec()).await;
        }
    }

    #[tokio::test]
    async fn garbage_ack_fails_quickly() {
        let (key_a, _) = keys();
        let (_, id_b) = keys();
        let (a, mut b) = duplex(8192);
        let connect = tokio::spawn(async move { RlpxStream::connect(a, &key_a, id_b).await });
        // Swallow the auth, answer with a huge size prefix.
        let mut prefix = [0u8; 2];
        b.read_exact(&mut prefix).await.unwrap();
        let mut auth = vec![0u8; usize::from(u16::from_be_bytes(prefix))];
        b.read_exact(&mut auth).await.unwrap();
        b.write_all(&[0xff, 0xff, 0, 0, 0, 0]).await.unwrap();
        let err = tokio::time::timeout(Duration::from_secs(2), connect)
            .await
            .unwrap()
            .unwrap()
            .unwrap_err();
        assert!(matches!(err, RlpxError::Handshake(_)), "{err}");
    }

    #[tokio::test]
    async fn connect_to_invalid_id_fails() {
        let (key_a, _) = keys();
        let (a, _b) = duplex(1024);
        let err = RlpxStream::connect(a, &key_a, PeerId::ZERO)
            .await
            .unwrap_err();
        assert!(matches!(err, RlpxError::InvalidPublicKey));
    }

    #[tokio::test]
    async fn wrong_remote_key_is_refused() {
        // The dialler believes it talks to C, but B answers: B cannot open the auth.
        let (a, b) = duplex(8192);
        let (key_a, _) = keys();
        let (key_b, _) = keys();
        let (_, id_c) = keys();
        let (client, server) = tokio::join!(
            tokio::time::timeout(Duration::from_secs(2), RlpxStream::connect(a, &key_a, id_c)),
            RlpxStream::accept(b, &key_b)
        );
        assert!(matches!(server.unwrap_err(), RlpxError::EciesMac));
        // With the server gone, the client sees the connection close.
        assert!(matches!(client.unwrap().unwrap_err(), RlpxError::Closed));
    }

    #[tokio::test]
    async fn oversized_declared_frame_is_rejected() {
        let (mut client, mut server, _, _) = pair(64 * 1024).await;
        assert_eq!(server.max_frame_size(), MAX_FRAME_SIZE);
        server.set_max_frame_size(1024);
        assert_eq!(server.max_frame_size(), 1024);

        // At the limit: fine.
        let (sent, got) = tokio::join!(client.send(&[1u8; 1024]), server.recv());
        sent.unwrap();
        assert_eq!(got.unwrap().len(), 1024);

        // One byte over: refused from the header alone. The body was never read,
        // so the client's send completes only because the pipe buffers it.
        client.send(&[2u8; 1025]).await.unwrap();
        let err = tokio::time::timeout(LIMIT, server.recv())
            .await
            .unwrap()
            .unwrap_err();
        assert!(
            matches!(
                err,
                RlpxError::FrameTooLarge {
                    size: 1025,
                    max: 1024
                }
            ),
            "{err}"
        );

        // Sending more than 24 bits can express is refused locally.
        let err = client
            .send(&vec![0u8; MAX_FRAME_SIZE + 1])
            .await
            .unwrap_err();
        assert!(matches!(
            err,
            RlpxError::FrameTooLarge {
                max: MAX_FRAME_SIZE,
                ..
            }
        ));
    }

    #[tokio::test]
    async fn limit_survives_split() {
        let (mut client, mut server, _, _) = pair(64 * 1024).await;
        server.set_max_frame_size(10);
        let (mut reader, _writer) = server.split();
        assert_eq!(reader.max_frame_size(), 10);
        client.send(&[0u8; 11]).await.unwrap();
        assert!(matches!(
            reader.recv().await.unwrap_err(),
            RlpxError::FrameTooLarge { size: 11, max: 10 }
        ));
    }

    #[tokio::test]
    async fn eof_mid_frame_is_closed() {
        let (mut encoder, _) = mirrored(2);
        let mut wire = Vec::new();
        encoder.encode(&[9u8; 100], &mut wire).unwrap();
        for cut in [0, 10, HEADER_LEN, HEADER_LEN + 50, wire.len() - 1] {
            let (mut tx, rx) = duplex(4096);
            let (_, decoder) = mirrored(2);
            let mut reader = RlpxReader {
                io: rx,
                ingress: Ingress::new(decoder),
                remote: PeerId::ZERO,
            };
            tx.write_all(&wire[..cut]).await.unwrap();
            drop(tx);
            assert!(
                matches!(reader.recv().await, Err(RlpxError::Closed)),
                "cut {cut}"
            );
        }
    }
}
