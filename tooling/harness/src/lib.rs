//! `moat-harness`: what the whole-node tools (moat-soak, moat-devnet) share.
//!
//! - [`http`]: a small blocking JSON-RPC client over one kept-alive HTTP/1.1 connection,
//!   with the engine API's JWT when given a secret, and plain GETs for REST APIs such as a
//!   beacon node's.
//! - [`genesis`]: a post-merge genesis through Osaka that both clients read.
//! - [`el`]: an execution client — moat, or go-ethereum given by path — initialised and
//!   started on loopback ports with no discovery, stopped (SIGTERM then SIGKILL) or killed
//!   (`kill -9`), and never outliving the tool (`PR_SET_PDEATHSIG`); [`process`] does the
//!   same for any other child (a consensus client).
//!
//! Nothing here dials anything but the addresses it is given; the tools give 127.0.0.1.

pub mod el;
pub mod genesis;
pub mod http;
pub mod process;
