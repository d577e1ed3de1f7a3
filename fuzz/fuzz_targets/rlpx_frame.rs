//! RLPx frames as `RlpxReader::recv` reads them from a peer: header MAC, declared size
//! against the reader's limit, body read in pieces, body MAC, decryption.
//!
//! The input is a sequence of frames, each either well formed (sealed by the real
//! encoder) or made of a header and a body the input chooses (any size field, any body
//! length), sealed with the session's real ciphers and MACs, and sometimes with a byte of
//! the wire flipped. The reader reads the whole in chunks the input chooses. It must give
//! back exactly the payloads of the frames before the first faulty one, then an error.

#![no_main]

use libfuzzer_sys::fuzz_target;
use moat_fuzz::{Bytes, now};
use moat_p2p::rlpx::fuzzing::{self, FrameSealer};

const SEED: u8 = 7;

fuzz_target!(|data: &[u8]| {
    let mut r = Bytes(data);
    let chunk = match r.u8() {
        0 => usize::MAX,
        n => n as usize * 7,
    };
    let max = match r.u8() {
        0 => usize::MAX,
        n => n as usize * 64,
    };
    let mut sealer = FrameSealer::new(SEED);
    let mut wire = Vec::new();
    // The payloads the reader must return, until the first faulty frame.
    let mut expected: Vec<Vec<u8>> = Vec::new();
    let mut faulty = false;
    for _ in 0..8 {
        if r.is_empty() {
            break;
        }
        let kind = r.u8();
        let start = wire.len();
        let good = match kind % 4 {
            // Well formed, from the encoder; now and then larger than a body step.
            0 | 1 => {
                let mut payload = r.piece().to_vec();
                if kind & 0x80 != 0 && !payload.is_empty() {
                    let unit = payload.clone();
                    while payload.len() <= FrameSealer::STEP {
                        payload.extend_from_slice(&unit);
                    }
                }
                sealer
                    .frame(&payload, &mut wire)
                    .expect("small frames seal");
                Some(payload)
            }
            // Any header and body.
            _ => {
                let header = r.array::<16>();
                let body = r.piece();
                sealer.raw(header, body, &mut wire);
                let size = u32::from_be_bytes([0, header[0], header[1], header[2]]) as usize;
                let padded = size.next_multiple_of(FrameSealer::BLOCK);
                (body.len() == padded).then(|| body[..size].to_vec())
            }
        };
        // Now and then one byte of the frame is flipped.
        let flip = r.u8();
        let good = if flip >= 0xf0 && wire.len() > start {
            let at = start + r.u16() as usize % (wire.len() - start);
            wire[at] ^= 1 << (flip & 7);
            None
        } else {
            good
        };
        let good = good.filter(|p| p.len() <= max);
        if !faulty {
            match good {
                Some(p) => expected.push(p),
                None => faulty = true,
            }
        }
    }
    let mut reader = fuzzing::frame_reader(SEED, &wire, chunk);
    reader.set_max_frame_size(max);
    for want in &expected {
        match now(reader.recv()) {
            Ok(got) => assert_eq!(&got, want, "a frame read back differently"),
            Err(e) => panic!("a well-formed frame was refused: {e}"),
        }
    }
    // What follows is a faulty frame or the end of the stream.
    assert!(now(reader.recv()).is_err(), "a faulty frame was read");
});
