//! JWT authentication of the engine API: an HS256 token in `Authorization: Bearer …` on
//! every HTTP request (and on the WebSocket upgrade), checked by a tower layer before
//! jsonrpsee sees the request.
//!
//! Only what the engine API spec asks for is checked: the `alg` is HS256, the signature
//! verifies with the shared secret, and `iat` is within [`IAT_WINDOW_SECS`] of our clock.
//! Other claims (`id`, `clv`, `exp`) are ignored, as geth ignores them.

use crate::middleware::{BoxFuture, HttpMiddleware, HttpService, Middleware, answer, pass};
use base64::Engine as _;
use base64::alphabet::URL_SAFE;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use hmac::{Hmac, Mac};
use jsonrpsee::server::{HttpBody, HttpRequest, HttpResponse};
use sha2::Sha256;
use std::path::Path;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

/// How far a token's `iat` may be from our clock, either way (the spec's ±60 s).
pub const IAT_WINDOW_SECS: u64 = 60;

/// Longest `Authorization` header we look at; a real token is ~150 bytes, and anything
/// much longer is only work for us.
const MAX_TOKEN_LEN: usize = 4096;

/// Tokens are base64url; be lenient about padding since some clients add it.
const B64: GeneralPurpose = GeneralPurpose::new(
    &URL_SAFE,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// Why a JWT secret file or a token was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum JwtError {
    /// The secret file could not be read.
    #[error("cannot read JWT secret {path}: {reason}")]
    SecretFile {
        /// The file's path, as given.
        path: String,
        /// The operating system's error, as text.
        reason: String,
    },
    /// The secret file does not hold 64 hex digits (`0x` optional).
    #[error("JWT secret is not 32 bytes of hex")]
    SecretFormat,
    /// The request has no `Authorization: Bearer …` header.
    #[error("missing Authorization: Bearer token")]
    Missing,
    /// The token is not three base64url parts of JSON, or is over 4096 bytes.
    #[error("malformed token")]
    Malformed,
    /// The token's header names an `alg` other than HS256 (`none` included).
    #[error("unsupported token algorithm")]
    Algorithm,
    /// The HMAC-SHA256 signature does not verify with the shared secret.
    #[error("signature invalid")]
    Signature,
    /// The claims carry no numeric `iat`.
    #[error("token has no iat claim")]
    NoIssuedAt,
    /// The `iat` is more than [`IAT_WINDOW_SECS`] away from our clock.
    #[error("stale token (iat {iat}, now {now})")]
    Stale {
        /// The token's issue time, in Unix seconds.
        iat: u64,
        /// Our clock, in Unix seconds.
        now: u64,
    },
}

/// Parses a secret as geth writes it (`--authrpc.jwtsecret`): 64 hex digits, `0x`
/// optional, surrounding whitespace ignored.
pub fn parse_jwt_secret(text: &str) -> Result<[u8; 32], JwtError> {
    let t = text.trim();
    let digits = t
        .strip_prefix("0x")
        .or_else(|| t.strip_prefix("0X"))
        .unwrap_or(t);
    let mut out = [0u8; 32];
    alloy_primitives::hex::decode_to_slice(digits, &mut out).map_err(|_| JwtError::SecretFormat)?;
    Ok(out)
}

/// Reads a JWT secret file.
pub fn read_jwt_secret(path: impl AsRef<Path>) -> Result<[u8; 32], JwtError> {
    let path = path.as_ref();
    let text = std::fs::read_to_string(path).map_err(|e| JwtError::SecretFile {
        path: path.display().to_string(),
        reason: e.to_string(),
    })?;
    parse_jwt_secret(&text)
}

/// Seconds since the Unix epoch; a clock before 1970 reads as 0 and fails every token.
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Checks `token` (the part after `Bearer `) against `secret` at time `now`.
pub fn verify_token(token: &str, secret: &[u8; 32], now: u64) -> Result<(), JwtError> {
    if token.len() > MAX_TOKEN_LEN {
        return Err(JwtError::Malformed);
    }
    let mut parts = token.split('.');
    let (Some(header_b64), Some(claims_b64), Some(sig_b64), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(JwtError::Malformed);
    };
    let header: serde_json::Value = B64
        .decode(header_b64)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .ok_or(JwtError::Malformed)?;
    // Pinning the algorithm rules out "none" and any other downgrade.
    if header.get("alg").and_then(|a| a.as_str()) != Some("HS256") {
        return Err(JwtError::Algorithm);
    }
    // The signature is checked before the claims are parsed: unauthenticated JSON is
    // parsed as little as possible.
    let sig = B64.decode(sig_b64).map_err(|_| JwtError::Malformed)?;
    let signing_input = &token[..header_b64.len() + 1 + claims_b64.len()];
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC accepts keys of any length");
    mac.update(signing_input.as_bytes());
    // verify_slice compares in constant time.
    mac.verify_slice(&sig).map_err(|_| JwtError::Signature)?;

    let claims: serde_json::Value = B64
        .decode(claims_b64)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .ok_or(JwtError::Malformed)?;
    let iat = claims
        .get("iat")
        .and_then(|v| v.as_u64().or_else(|| v.as_f64().map(|f| f as u64)))
        .ok_or(JwtError::NoIssuedAt)?;
    if iat.abs_diff(now) > IAT_WINDOW_SECS {
        return Err(JwtError::Stale { iat, now });
    }
    Ok(())
}

/// Makes an HS256 token with `iat`; for tests and tools that talk to an engine endpoint.
pub fn make_token(secret: &[u8; 32], iat: u64) -> String {
    let enc = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let signing_input = format!(
        "{}.{}",
        enc.encode(br#"{"alg":"HS256","typ":"JWT"}"#),
        enc.encode(format!(r#"{{"iat":{iat}}}"#))
    );
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC accepts keys of any length");
    mac.update(signing_input.as_bytes());
    let sig = enc.encode(mac.finalize().into_bytes());
    format!("{signing_input}.{sig}")
}

fn check_request<B>(req: &HttpRequest<B>, secret: &[u8; 32]) -> Result<(), JwtError> {
    let value = req
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .ok_or(JwtError::Missing)?;
    let token = value
        .strip_prefix("Bearer ")
        .or_else(|| value.strip_prefix("bearer "))
        .ok_or(JwtError::Missing)?;
    verify_token(token.trim(), secret, unix_now())
}

fn unauthorized(e: &JwtError) -> HttpResponse {
    metrics::counter!("moat_engine_auth_rejected_total").increment(1);
    HttpResponse::builder()
        .status(401)
        .header("content-type", "text/plain")
        .body(HttpBody::from(format!("{e}\n")))
        .expect("a static status and header make a valid response")
}

/// The tower layer that refuses requests without a valid token with HTTP 401.
pub type JwtAuthLayer = Middleware<JwtAuth>;

impl JwtAuthLayer {
    /// The layer that checks every request's token against `secret`.
    pub fn new(secret: [u8; 32]) -> Self {
        Middleware(JwtAuth {
            secret: Arc::new(secret),
        })
    }
}

/// [`JwtAuthLayer`]'s logic.
#[derive(Clone)]
pub struct JwtAuth {
    secret: Arc<[u8; 32]>,
}

impl<B> HttpMiddleware<B> for JwtAuth {
    fn call<S: HttpService<B>>(&self, inner: &mut S, req: HttpRequest<B>) -> BoxFuture {
        if let Err(e) = check_request(&req, &self.secret) {
            return answer(unauthorized(&e));
        }
        pass(inner, req)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: [u8; 32] = [7; 32];

    #[test]
    fn tokens_verify_within_the_window_only() {
        let now = 1_700_000_000;
        assert_eq!(
            verify_token(&make_token(&SECRET, now), &SECRET, now),
            Ok(())
        );
        assert_eq!(
            verify_token(&make_token(&SECRET, now - 60), &SECRET, now),
            Ok(())
        );
        assert_eq!(
            verify_token(&make_token(&SECRET, now + 61), &SECRET, now),
            Err(JwtError::Stale { iat: now + 61, now })
        );
        assert_eq!(
            verify_token(&make_token(&[8; 32], now), &SECRET, now),
            Err(JwtError::Signature)
        );
    }

    #[test]
    fn malformed_and_unsigned_tokens_are_refused() {
        let now = 1_700_000_000;
        let good = make_token(&SECRET, now);
        let (signing_input, _) = good.rsplit_once('.').unwrap();
        for bad in [
            "",
            "a.b",
            "a.b.c.d",
            "!!.!!.!!",
            &format!("{signing_input}."),
        ] {
            assert!(verify_token(bad, &SECRET, now).is_err(), "{bad:?}");
        }
        // alg "none" with the good claims.
        let enc = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let none = format!(
            "{}.{}.",
            enc.encode(br#"{"alg":"none"}"#),
            signing_input.split('.').nth(1).unwrap()
        );
        assert_eq!(verify_token(&none, &SECRET, now), Err(JwtError::Algorithm));
    }

    #[test]
    fn secrets_parse_like_geth() {
        let hex = "7365637265747365637265747365637265747365637265747365637265747365";
        assert_eq!(
            parse_jwt_secret(hex).unwrap(),
            *b"secretsecretsecretsecretsecretse"
        );
        assert_eq!(
            parse_jwt_secret(&format!("0x{hex}\n")).unwrap(),
            parse_jwt_secret(hex).unwrap()
        );
        assert_eq!(parse_jwt_secret("0x1234"), Err(JwtError::SecretFormat));
        assert_eq!(
            parse_jwt_secret(&"zz".repeat(32)),
            Err(JwtError::SecretFormat)
        );
    }
}
