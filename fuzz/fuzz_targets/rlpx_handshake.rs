//! The RLPx handshake as the recipient reads an `auth` and the initiator an `ack`:
//! `Auth::decode` and `Ack::decode` on the decrypted bodies (EIP-8 and the old fixed-size
//! layout), and the whole wire path (size prefix, ECIES, body, signature) through
//! `respond` and `initiate` over an in-memory stream read in chunks the input chooses.
//!
//! Random bytes never pass ECIES's MAC, so the input is mostly a body that the target
//! encrypts to the reading side's key, as a real peer would; raw wire bytes are tried too.
//! Round trips: a decoded body encodes (EIP-8) to a body that decodes to the same value,
//! and a handshake that completes names the initiator its auth carried.

#![no_main]

use libfuzzer_sys::fuzz_target;
use moat_fuzz::{Bytes, now};
use moat_p2p::rlpx::fuzzing::{self, Ack, Auth, Format};
use moat_p2p::rlpx::peer_id;
use secp256k1::{SECP256K1, SecretKey};
use std::sync::OnceLock;

/// Size of an old-style auth body and ack body.
const OLD_AUTH: usize = 65 + 32 + 64 + 32 + 1;
const OLD_ACK: usize = 64 + 32 + 1;

fn keys() -> &'static (SecretKey, SecretKey) {
    static K: OnceLock<(SecretKey, SecretKey)> = OnceLock::new();
    K.get_or_init(|| {
        (
            SecretKey::from_byte_array([0x41; 32]).unwrap(),
            SecretKey::from_byte_array([0x42; 32]).unwrap(),
        )
    })
}

fn check_auth(body: &[u8], format: Format) -> Option<Auth> {
    let auth = Auth::decode(body, format).ok()?;
    let again = Auth::decode(&auth.encode_eip8(), Format::Eip8).expect("own auth body decodes");
    assert_eq!(
        Auth {
            ephemeral_hash: auth.ephemeral_hash,
            ..again
        },
        auth
    );
    Some(auth)
}

fn check_ack(body: &[u8], format: Format) -> Option<Ack> {
    let ack = Ack::decode(body, format).ok()?;
    let again = Ack::decode(&ack.encode_eip8(), Format::Eip8).expect("own ack body decodes");
    assert_eq!(again, ack);
    if format == Format::Old {
        assert_eq!(
            Ack::decode(&ack.encode_old(), Format::Old).ok(),
            Some(ack.clone())
        );
    }
    Some(ack)
}

fuzz_target!(|data: &[u8]| {
    let (ours, theirs) = keys();
    let our_pub = ours.public_key(SECP256K1);
    let their_id = peer_id(&theirs.public_key(SECP256K1));
    let mut r = Bytes(data);
    let mode = r.u8();
    let chunk = match r.u8() {
        0 => usize::MAX,
        n => n as usize,
    };
    match mode % 6 {
        // Raw wire bytes, to the recipient and to the initiator.
        0 => {
            let wire = r.rest();
            let _ = now(fuzzing::accept(ours, wire, chunk));
            let _ = now(fuzzing::connect(ours, &their_id, wire, chunk));
        }
        // An EIP-8 auth body, sealed to us: as it stands (the reader decrypts exactly
        // these bytes) or padded as peers send it (then a body cut short may be completed
        // by the padding).
        1 => {
            let body = r.rest();
            let auth = check_auth(body, Format::Eip8);
            let exact = chunk % 2 == 1;
            let wire = if exact {
                fuzzing::seal_eip8_unpadded(&our_pub, body)
            } else {
                fuzzing::seal_eip8(&our_pub, body)
            };
            let Ok(wire) = wire else {
                return;
            };
            match (now(fuzzing::accept(ours, &wire, chunk)), auth) {
                (Ok(id), Some(auth)) => assert_eq!(id, auth.initiator),
                (Ok(_), None) => assert!(
                    !exact,
                    "a handshake completed on an auth that does not decode"
                ),
                (Err(_), _) => {}
            }
        }
        // An old-style auth body.
        2 => {
            let mut body = r.rest().to_vec();
            body.resize(OLD_AUTH, 0);
            let auth = check_auth(&body, Format::Old);
            assert!(
                auth.is_some(),
                "an old auth of the right size always decodes"
            );
            let Ok(wire) = fuzzing::seal_old(&our_pub, &body) else {
                return;
            };
            if let Ok(id) = now(fuzzing::accept(ours, &wire, chunk)) {
                assert_eq!(Some(id), auth.map(|a| a.initiator));
            }
        }
        // An EIP-8 ack body, sealed to us (the initiator), as it stands or padded.
        3 => {
            let body = r.rest();
            let ack = check_ack(body, Format::Eip8);
            let exact = chunk % 2 == 1;
            let wire = if exact {
                fuzzing::seal_eip8_unpadded(&our_pub, body)
            } else {
                fuzzing::seal_eip8(&our_pub, body)
            };
            let Ok(wire) = wire else {
                return;
            };
            if now(fuzzing::connect(ours, &their_id, &wire, chunk)).is_ok() && exact {
                assert!(
                    ack.is_some(),
                    "a handshake completed on an ack that does not decode"
                );
            }
        }
        // An old-style ack body.
        4 => {
            let mut body = r.rest().to_vec();
            body.resize(OLD_ACK, 0);
            assert!(check_ack(&body, Format::Old).is_some());
            if let Ok(wire) = fuzzing::seal_old(&our_pub, &body) {
                let _ = now(fuzzing::connect(ours, &their_id, &wire, chunk));
            }
        }
        // Bodies of any size in either layout, no wire.
        _ => {
            let body = r.rest();
            for format in [Format::Eip8, Format::Old] {
                let _ = check_auth(body, format);
                let _ = check_ack(body, format);
            }
        }
    }
});
