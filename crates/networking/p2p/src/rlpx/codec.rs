//! The frame layer: encryption and authentication of frames once the handshake has
//! produced the session secrets.
//!
//! On the wire a frame is
//!
//! ```text
//! header-ciphertext (16) || header-mac (16) || body-ciphertext (padded to 16) || body-mac (16)
//! ```
//!
//! The plaintext header is the 24-bit big-endian payload size followed by RLP header
//! data, zero-filled to 16 bytes. Header and body are encrypted with one AES-256-CTR
//! key stream per direction (key `aes-secret`, all-zero initial counter), so the
//! header and body of consecutive frames continue the same stream.
//!
//! Each direction also keeps a running Keccak-256 state, seeded by the handshake.
//! A MAC is produced by encrypting the first 16 bytes of the state's current digest
//! with AES-256 under `mac-secret` (a single block, i.e. ECB), XOR-ing in a 16-byte
//! seed, absorbing the result, and taking the first 16 bytes of the new digest. For
//! the header the seed is the header ciphertext; for the body, the body ciphertext is
//! absorbed first and the seed is the digest prefix after that.

use aes::Aes256;
use aes::cipher::{BlockEncrypt, KeyInit, KeyIvInit, StreamCipher};
use alloy_primitives::B256;
use keccak_asm::{Digest, Keccak256};

use super::RlpxError;

/// The largest frame payload RLPx can carry: the frame size field is 24 bits wide.
///
/// This is also the default limit on frames a reader accepts; see
/// [`RlpxStream::set_max_frame_size`](super::RlpxStream::set_max_frame_size).
pub const MAX_FRAME_SIZE: usize = (1 << 24) - 1;

/// Length of the encrypted header, and of every MAC.
pub(crate) const BLOCK: usize = 16;
/// Header ciphertext plus header MAC.
pub(crate) const HEADER_LEN: usize = 2 * BLOCK;

/// Header data we send: the RLP list `[0, 0]` (capability-id, context-id), which
/// is what every deployed client sends and nobody reads.
const HEADER_DATA: [u8; 3] = [0xc2, 0x80, 0x80];

type FrameCipher = ctr::Ctr128BE<Aes256>;

/// What the handshake hands to the frame layer.
pub(crate) struct Secrets {
    pub aes: B256,
    pub mac: B256,
    /// Keccak state authenticating what we send.
    pub egress_mac: Keccak256,
    /// Keccak state authenticating what we receive.
    pub ingress_mac: Keccak256,
}

impl Secrets {
    /// The two independent halves of a session: sending and receiving.
    pub(crate) fn into_codec(self) -> (FrameEncoder, FrameDecoder) {
        let encoder = FrameEncoder {
            cipher: frame_cipher(&self.aes),
            mac: MacState::new(&self.mac, self.egress_mac),
        };
        let decoder = FrameDecoder {
            cipher: frame_cipher(&self.aes),
            mac: MacState::new(&self.mac, self.ingress_mac),
            max_frame_size: MAX_FRAME_SIZE,
        };
        (encoder, decoder)
    }
}

/// Fixed secrets whose encoder and decoder mirror each other, as after a handshake
/// (tests and the fuzz targets).
pub(crate) fn seeded_secrets(seed: u8) -> Secrets {
    let mut hash = Keccak256::new();
    hash.update([seed; 32]);
    Secrets {
        aes: B256::repeat_byte(seed),
        mac: B256::repeat_byte(seed.wrapping_add(1)),
        egress_mac: hash.clone(),
        ingress_mac: hash,
    }
}

fn frame_cipher(key: &B256) -> FrameCipher {
    FrameCipher::new(&key.0.into(), &[0u8; BLOCK].into())
}

/// Payload size rounded up to whole cipher blocks.
pub(crate) fn padded_len(size: usize) -> usize {
    size.next_multiple_of(BLOCK)
}

/// Compares two MACs without an early exit on the first differing byte.
fn mac_eq(expected: &[u8; BLOCK], received: &[u8]) -> bool {
    received.len() == BLOCK
        && expected
            .iter()
            .zip(received)
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
}

/// One direction's MAC: the running Keccak state and the AES-256 block cipher keyed
/// with `mac-secret`.
struct MacState {
    hash: Keccak256,
    cipher: Aes256,
}

impl MacState {
    fn new(secret: &B256, hash: Keccak256) -> Self {
        Self {
            hash,
            cipher: Aes256::new(&secret.0.into()),
        }
    }

    /// First 16 bytes of the digest of everything absorbed so far; the state itself
    /// keeps running.
    fn digest_prefix(&self) -> [u8; BLOCK] {
        let digest = self.hash.clone().finalize();
        let mut prefix = [0u8; BLOCK];
        prefix.copy_from_slice(&digest[..BLOCK]);
        prefix
    }

    fn absorb_seed(&mut self, seed: &[u8; BLOCK]) -> [u8; BLOCK] {
        let mut block = aes::Block::from(self.digest_prefix());
        self.cipher.encrypt_block(&mut block);
        for (b, s) in block.iter_mut().zip(seed) {
            *b ^= s;
        }
        self.hash.update(block);
        self.digest_prefix()
    }

    fn header(&mut self, header_ciphertext: &[u8; BLOCK]) -> [u8; BLOCK] {
        self.absorb_seed(header_ciphertext)
    }

    /// Absorbs the next piece of a body's ciphertext ([`Self::finish_body`] ends it).
    fn absorb(&mut self, piece: &[u8]) {
        self.hash.update(piece);
    }

    /// The MAC of the body absorbed so far.
    fn finish_body(&mut self) -> [u8; BLOCK] {
        let seed = self.digest_prefix();
        self.absorb_seed(&seed)
    }
}

/// How much of a frame body is encrypted (or decrypted) and MACed in one step before
/// the caller's pause ([`FrameEncoder::encode_with`], [`FrameDecoder::absorb_body`]):
/// about 0.1 ms of Keccak and AES here, so a thread that gives way between steps holds
/// its core that long at most.
pub(crate) const STEP: usize = 64 * 1024;

/// Nothing between steps: the default pause.
pub(crate) fn no_pause() {}

/// Sending half of the frame layer.
pub(crate) struct FrameEncoder {
    cipher: FrameCipher,
    mac: MacState,
}

impl FrameEncoder {
    /// Appends one complete frame carrying `payload` to `out`.
    #[cfg(test)]
    pub(crate) fn encode(&mut self, payload: &[u8], out: &mut Vec<u8>) -> Result<(), RlpxError> {
        self.encode_with(payload, out, no_pause)
    }

    /// As [`Self::encode`], encrypting and MACing the body in [`STEP`]s with `pause`
    /// called between them (the frame on the wire is the same).
    pub(crate) fn encode_with(
        &mut self,
        payload: &[u8],
        out: &mut Vec<u8>,
        pause: fn(),
    ) -> Result<(), RlpxError> {
        let size = payload.len();
        if size > MAX_FRAME_SIZE {
            return Err(RlpxError::FrameTooLarge {
                size,
                max: MAX_FRAME_SIZE,
            });
        }
        out.reserve(HEADER_LEN + padded_len(size) + BLOCK);

        let mut header = [0u8; BLOCK];
        header[..3].copy_from_slice(&(size as u32).to_be_bytes()[1..]);
        header[3..3 + HEADER_DATA.len()].copy_from_slice(&HEADER_DATA);
        self.cipher.apply_keystream(&mut header);
        out.extend_from_slice(&header);
        out.extend_from_slice(&self.mac.header(&header));

        let body = out.len();
        out.extend_from_slice(payload);
        out.resize(body + padded_len(size), 0);
        for (i, step) in out[body..].chunks_mut(STEP).enumerate() {
            if i > 0 {
                pause();
            }
            self.cipher.apply_keystream(step);
            self.mac.absorb(step);
        }
        let mac = self.mac.finish_body();
        out.extend_from_slice(&mac);
        Ok(())
    }
}

impl FrameEncoder {
    /// Appends a frame of this plaintext header and body as they stand, whatever the
    /// size field says and however long the body is: a peer's frame, for the fuzz
    /// targets. The ciphers and MACs are the real ones.
    pub(crate) fn encode_raw(&mut self, header: [u8; BLOCK], body: &[u8], out: &mut Vec<u8>) {
        let mut header = header;
        self.cipher.apply_keystream(&mut header);
        out.extend_from_slice(&header);
        out.extend_from_slice(&self.mac.header(&header));
        let at = out.len();
        out.extend_from_slice(body);
        self.cipher.apply_keystream(&mut out[at..]);
        self.mac.absorb(&out[at..]);
        let mac = self.mac.finish_body();
        out.extend_from_slice(&mac);
    }
}

/// Receiving half of the frame layer. Frames are decoded in two steps, header then
/// body, so the caller learns how much to read before reading it.
pub(crate) struct FrameDecoder {
    cipher: FrameCipher,
    mac: MacState,
    max_frame_size: usize,
}

impl FrameDecoder {
    pub(crate) fn max_frame_size(&self) -> usize {
        self.max_frame_size
    }

    pub(crate) fn set_max_frame_size(&mut self, max: usize) {
        self.max_frame_size = max.min(MAX_FRAME_SIZE);
    }

    /// Authenticates and decrypts a header (ciphertext then MAC, 32 bytes), and
    /// returns the payload size it declares, once checked against the limit.
    pub(crate) fn decode_header(&mut self, header: &[u8; HEADER_LEN]) -> Result<usize, RlpxError> {
        let mut plain = [0u8; BLOCK];
        plain.copy_from_slice(&header[..BLOCK]);
        let expected = self.mac.header(&plain);
        if !mac_eq(&expected, &header[BLOCK..]) {
            return Err(RlpxError::HeaderMac);
        }
        self.cipher.apply_keystream(&mut plain);
        // The header data after the size (capability and context ids) is unused by
        // every deployed client and ignored here.
        let size = u32::from_be_bytes([0, plain[0], plain[1], plain[2]]) as usize;
        if size > self.max_frame_size {
            return Err(RlpxError::FrameTooLarge {
                size,
                max: self.max_frame_size,
            });
        }
        Ok(size)
    }

    /// Absorbs the next piece of a body's padded ciphertext into the MAC and decrypts it
    /// in place, piece by piece as it arrives; [`Self::finish_body`] then checks the MAC
    /// before the plaintext is used. Pieces go in order, the body's MAC not among them.
    pub(crate) fn absorb_body(&mut self, piece: &mut [u8]) {
        self.mac.absorb(piece);
        self.cipher.apply_keystream(piece);
    }

    /// Checks the MAC of the body absorbed since the header ([`Self::absorb_body`]).
    pub(crate) fn finish_body(&mut self, mac: &[u8]) -> Result<(), RlpxError> {
        let expected = self.mac.finish_body();
        if !mac_eq(&expected, mac) {
            return Err(RlpxError::FrameMac);
        }
        Ok(())
    }

    /// Authenticates and decrypts a body in place, in one piece ([`Self::absorb_body`],
    /// [`Self::finish_body`]). `body` is the padded ciphertext followed by the 16-byte
    /// MAC; on success its leading bytes hold the plaintext.
    #[cfg(test)]
    pub(crate) fn decode_body(&mut self, body: &mut [u8]) -> Result<(), RlpxError> {
        let Some(mac_at) = body.len().checked_sub(BLOCK) else {
            return Err(RlpxError::FrameMac);
        };
        let (ciphertext, mac) = body.split_at_mut(mac_at);
        self.absorb_body(ciphertext);
        self.finish_body(mac)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Two codecs whose encoder and decoder states mirror each other, as after a
    /// handshake.
    pub(crate) fn mirrored(seed: u8) -> (FrameEncoder, FrameDecoder) {
        let (encoder, _) = seeded_secrets(seed).into_codec();
        let (_, decoder) = seeded_secrets(seed).into_codec();
        (encoder, decoder)
    }

    fn decode(decoder: &mut FrameDecoder, wire: &mut [u8]) -> Result<Vec<u8>, RlpxError> {
        let header: [u8; HEADER_LEN] = wire[..HEADER_LEN].try_into().unwrap();
        let size = decoder.decode_header(&header)?;
        let body = &mut wire[HEADER_LEN..HEADER_LEN + padded_len(size) + BLOCK];
        decoder.decode_body(body)?;
        Ok(body[..size].to_vec())
    }

    /// Frames written by go-ethereum's RLPx implementation from fixed secrets:
    /// `aes-secret = keccak("aes")`, `mac-secret = keccak("mac")`, and an egress MAC
    /// state that has absorbed `"egress-seed"`. Four consecutive frames, so the
    /// chaining of cipher and MAC state across frames is covered too.
    #[test]
    fn frames_match_reference_implementation() {
        let secrets = || {
            let mut seeded = Keccak256::new();
            seeded.update(b"egress-seed");
            Secrets {
                aes: alloy_primitives::keccak256(b"aes"),
                mac: alloy_primitives::keccak256(b"mac"),
                egress_mac: seeded.clone(),
                ingress_mac: seeded,
            }
        };
        let frames: [(&[u8], &str); 4] = [
            (
                &[0x08, 0xc4, 1, 2, 3, 4],
                "2c7ad087474564553de43436c5c186db6e5a3d2fba28caa0154b4a15ed47bfb8\
                 0d6f2bb9c376e6e53e0214698892e00b17e84ea0978d8c7dcf3ca79af904e201",
            ),
            (
                &[
                    0x10, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab,
                    0xab, 0xab, 0xab,
                ],
                "b2a615d7865d7b906455ab94d26af6ef93f36bfc813aa3a1bdd6e2a898b5c226\
                 be5b06964718ca5d695ffbc26a9df108d0e88842295349501ee297cedec704d5",
            ),
            (
                &[0x80],
                "3cce5f2567c96229a316536821f22dca29ef36145301248472cd8b2b439e7ab1\
                 7554f85954da8ff58bd1758bde4ce5ef2bbc8a850d36e78cd148c931356371f7",
            ),
            (
                &[
                    0x21, 0x5a, 0x5a, 0x5a, 0x5a, 0x5a, 0x5a, 0x5a, 0x5a, 0x5a, 0x5a, 0x5a, 0x5a,
                    0x5a, 0x5a, 0x5a, 0x5a, 0x5a, 0x5a, 0x5a, 0x5a, 0x5a, 0x5a, 0x5a, 0x5a, 0x5a,
                    0x5a, 0x5a, 0x5a, 0x5a, 0x5a, 0x5a, 0x5a, 0x5a, 0x5a, 0x5a, 0x5a, 0x5a, 0x5a,
                    0x5a, 0x5a,
                ],
                "15410f9576d61f27c6ab4cc625d8efed6c479088b5047a09b592d105e7b3d102\
                 9e91841058720b97f0ddb64113ccd5f1c9a513b12f7c291cef14ba8869e22ba0\
                 d6f5189b6f20509ef0f28c544d4fcb353966e5d4b4be9d6f6ad056ebc1ee6efc",
            ),
        ];
        let (mut encoder, _) = secrets().into_codec();
        let (_, mut decoder) = secrets().into_codec();
        for (payload, expected) in frames {
            let expected: String = expected.split_whitespace().collect();
            let mut wire = Vec::new();
            encoder.encode(payload, &mut wire).unwrap();
            assert_eq!(hex::encode(&wire), expected);
            assert_eq!(decode(&mut decoder, &mut wire).unwrap(), payload);
        }
    }

    #[test]
    fn frames_round_trip_and_chain() {
        let (mut encoder, mut decoder) = mirrored(3);
        for size in [0usize, 1, 15, 16, 17, 31, 32, 1000, 70_000] {
            let payload: Vec<u8> = (0..size).map(|i| (i * 7) as u8).collect();
            let mut wire = Vec::new();
            encoder.encode(&payload, &mut wire).unwrap();
            assert_eq!(wire.len(), HEADER_LEN + padded_len(size) + BLOCK);
            assert_eq!(decode(&mut decoder, &mut wire).unwrap(), payload);
        }
    }

    static PAUSES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

    fn count_pause() {
        PAUSES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// A large body is encrypted and MACed in steps with a pause between them, and the
    /// frame is the one encoded in one piece; decoding in pieces of any size reads it.
    #[test]
    fn large_bodies_go_in_steps_with_pauses_between() {
        let payload: Vec<u8> = (0..(STEP * 5 + 100)).map(|i| (i % 251) as u8).collect();
        let (mut stepped, mut decoder) = mirrored(4);
        let (mut whole, _) = mirrored(4);
        let before = PAUSES.load(std::sync::atomic::Ordering::Relaxed);
        let mut wire = Vec::new();
        stepped
            .encode_with(&payload, &mut wire, count_pause)
            .unwrap();
        // Six steps, five pauses (this is the only test that counts them).
        assert_eq!(
            PAUSES.load(std::sync::atomic::Ordering::Relaxed) - before,
            5
        );
        let mut reference = Vec::new();
        whole.encode(&payload, &mut reference).unwrap();
        assert_eq!(wire, reference);

        // Absorbed piece by piece (pieces that are not whole cipher blocks too).
        let header: [u8; HEADER_LEN] = wire[..HEADER_LEN].try_into().unwrap();
        assert_eq!(decoder.decode_header(&header).unwrap(), payload.len());
        let ciphertext = padded_len(payload.len());
        let (body, mac) = wire[HEADER_LEN..].split_at_mut(ciphertext);
        for piece in body.chunks_mut(STEP / 3 + 5) {
            decoder.absorb_body(piece);
        }
        decoder.finish_body(mac).unwrap();
        assert_eq!(&body[..payload.len()], &payload[..]);

        // A flipped bit in the middle is caught at the end.
        let (mut encoder, mut decoder) = mirrored(6);
        let mut wire = Vec::new();
        encoder.encode(&payload, &mut wire).unwrap();
        wire[HEADER_LEN + 2 * STEP + 7] ^= 1;
        let header: [u8; HEADER_LEN] = wire[..HEADER_LEN].try_into().unwrap();
        decoder.decode_header(&header).unwrap();
        let (body, mac) = wire[HEADER_LEN..].split_at_mut(ciphertext);
        for piece in body.chunks_mut(STEP) {
            decoder.absorb_body(piece);
        }
        assert!(matches!(decoder.finish_body(mac), Err(RlpxError::FrameMac)));
    }

    #[test]
    fn header_carries_size_and_zero_header_data() {
        // With the same key stream we can peek at the plaintext header.
        let (mut encoder, _) = mirrored(9);
        let mut peek = frame_cipher(&B256::repeat_byte(9));
        let mut wire = Vec::new();
        encoder.encode(&[0xaa; 0x01_02_03], &mut wire).unwrap();
        let mut header = [0u8; BLOCK];
        header.copy_from_slice(&wire[..BLOCK]);
        peek.apply_keystream(&mut header);
        assert_eq!(&header[..6], &[0x01, 0x02, 0x03, 0xc2, 0x80, 0x80]);
        assert!(header[6..].iter().all(|&b| b == 0));
    }

    #[test]
    fn tampering_is_detected() {
        let payload = b"0123456789abcdefXYZ"; // 19 bytes, padded to 32
        let mut clean = Vec::new();
        mirrored(5).0.encode(payload, &mut clean).unwrap();
        for i in 0..clean.len() {
            let mut wire = clean.clone();
            wire[i] ^= 0x80;
            let (_, mut decoder) = mirrored(5);
            let err = decode(&mut decoder, &mut wire).unwrap_err();
            if i < HEADER_LEN {
                assert!(matches!(err, RlpxError::HeaderMac), "byte {i}: {err}");
            } else {
                assert!(matches!(err, RlpxError::FrameMac), "byte {i}: {err}");
            }
        }
    }

    #[test]
    fn size_limit_is_enforced_before_the_body() {
        let (mut encoder, mut decoder) = mirrored(1);
        decoder.set_max_frame_size(100);
        let mut wire = Vec::new();
        encoder.encode(&[0u8; 101], &mut wire).unwrap();
        let header: [u8; HEADER_LEN] = wire[..HEADER_LEN].try_into().unwrap();
        assert!(matches!(
            decoder.decode_header(&header),
            Err(RlpxError::FrameTooLarge {
                size: 101,
                max: 100
            })
        ));
        // Limits above the protocol maximum are clamped.
        decoder.set_max_frame_size(usize::MAX);
        assert_eq!(decoder.max_frame_size(), MAX_FRAME_SIZE);
    }

    #[test]
    fn encoder_rejects_payloads_beyond_24_bits() {
        let (mut encoder, _) = mirrored(1);
        let mut wire = Vec::new();
        let err = encoder
            .encode(&vec![0u8; MAX_FRAME_SIZE + 1], &mut wire)
            .unwrap_err();
        assert!(matches!(
            err,
            RlpxError::FrameTooLarge { size, max: MAX_FRAME_SIZE } if size == MAX_FRAME_SIZE + 1
        ));
        assert!(wire.is_empty());
    }

    #[test]
    fn truncated_body_is_an_error() {
        let (_, mut decoder) = mirrored(1);
        assert!(matches!(
            decoder.decode_body(&mut [0u8; 5]),
            Err(RlpxError::FrameMac)
        ));
    }
}
