//! The engine API's error codes and messages (execution-apis `src/engine/common.md`).

use jsonrpsee::types::ErrorObjectOwned;

/// "Unknown payload": `engine_getPayload` named a payload id not (or no longer) built.
pub const UNKNOWN_PAYLOAD: i32 = -38001;
/// "Invalid forkchoice state": forkchoiceUpdated's safe or finalized block is off its
/// head's chain, or the head would reorg below the finalized block.
pub const INVALID_FORKCHOICE_STATE: i32 = -38002;
/// "Invalid payload attributes": forkchoiceUpdated's attributes are inconsistent (e.g. a
/// timestamp not after the head's).
pub const INVALID_PAYLOAD_ATTRIBUTES: i32 = -38003;
/// "Too large request": more entries asked for than the method serves at once
/// (getPayloadBodies, getBlobs).
pub const TOO_LARGE_REQUEST: i32 = -38004;
/// "Unsupported fork": the payload's fork is not the one this method version serves.
pub const UNSUPPORTED_FORK: i32 = -38005;

fn engine_error(code: i32, msg: &'static str, detail: Option<String>) -> ErrorObjectOwned {
    ErrorObjectOwned::owned(code, msg, detail.map(|d| serde_json::json!({ "err": d })))
}

pub(super) fn invalid_params(detail: impl Into<String>) -> ErrorObjectOwned {
    crate::params::invalid_params(detail)
}

pub(super) fn unknown_payload() -> ErrorObjectOwned {
    engine_error(UNKNOWN_PAYLOAD, "Unknown payload", None)
}

pub(super) fn invalid_forkchoice_state(detail: impl Into<String>) -> ErrorObjectOwned {
    engine_error(
        INVALID_FORKCHOICE_STATE,
        "Invalid forkchoice state",
        Some(detail.into()),
    )
}

pub(super) fn invalid_attributes(detail: impl Into<String>) -> ErrorObjectOwned {
    engine_error(
        INVALID_PAYLOAD_ATTRIBUTES,
        "Invalid payload attributes",
        Some(detail.into()),
    )
}

pub(super) fn too_large(detail: impl Into<String>) -> ErrorObjectOwned {
    engine_error(TOO_LARGE_REQUEST, "Too large request", Some(detail.into()))
}

pub(super) fn unsupported_fork() -> ErrorObjectOwned {
    engine_error(UNSUPPORTED_FORK, "Unsupported fork", None)
}
