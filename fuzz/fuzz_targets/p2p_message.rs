//! A frame's payload as the session reads it after the handshake: `Framing::decode`
//! (message id, snappy, dispatch to p2p, eth and snap), and the p2p base protocol's own
//! decoders (`Hello::decode`, `DisconnectReason::decode`, `p2p::unframe`).
//!
//! The first byte sets the framing (eth version, snap negotiated or not, snappy on or
//! off) and which decoder runs. Whatever decodes is encoded again and must decode to the
//! same value.

#![no_main]

use libfuzzer_sys::fuzz_target;
use moat_fuzz::Bytes;
use moat_p2p::eth::{EthMessage, SUPPORTED_VERSIONS};
use moat_p2p::p2p::{self, DisconnectReason, Hello};
use moat_p2p::session::{Framing, Incoming};

fuzz_target!(|data: &[u8]| {
    let mut r = Bytes(data);
    let b = r.u8();
    let framing = Framing {
        version: SUPPORTED_VERSIONS[(b as usize >> 1) % 3],
        snap: b & 0x08 != 0,
        snappy: b & 0x01 != 0,
    };
    let rest = r.rest();
    match b >> 4 {
        // Hello: extra trailing fields are allowed, the rest must round-trip.
        0..=2 => {
            if let Ok(hello) = Hello::decode(rest) {
                assert_eq!(Hello::decode(&hello.encode()).ok(), Some(hello));
            }
        }
        3 => {
            if let Some(reason) = DisconnectReason::decode(rest) {
                assert_eq!(DisconnectReason::decode(&reason.encode()), Some(reason));
            }
        }
        4..=5 => {
            if let Ok((id, body)) = p2p::unframe(rest, framing.snappy) {
                let again = p2p::frame(id, &body, framing.snappy);
                assert_eq!(p2p::unframe(&again, framing.snappy).ok(), Some((id, body)));
            }
        }
        _ => {
            let Ok(msg) = framing.decode(rest) else {
                return;
            };
            let again = match &msg {
                Incoming::Eth(m) => framing.eth(m),
                Incoming::Snap(m) => framing.snap(m),
                Incoming::Ping => framing.ping(),
                Incoming::Pong => framing.pong(),
                Incoming::Disconnect(Some(reason)) => framing.disconnect(*reason),
                Incoming::Disconnect(None) => return,
            };
            let back = framing.decode(&again).expect("own frame decodes");
            let msg = match msg {
                // The encoder writes the negotiated version into Status.
                Incoming::Eth(EthMessage::Status(mut s)) => {
                    s.version = framing.version;
                    Incoming::Eth(EthMessage::Status(s))
                }
                other => other,
            };
            assert_eq!(back, msg);
        }
    }
});
