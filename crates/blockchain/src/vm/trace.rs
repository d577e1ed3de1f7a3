//! Transaction tracing (`debug_traceTransaction`, `debug_traceBlock*`) with the geth
//! tracers of revm-inspectors: the struct logger (default), `callTracer`,
//! `prestateTracer`, `4byteTracer`, `flatCallTracer`, `muxTracer` and `noopTracer`.
//!
//! A block is replayed on its parent's state as import runs it (system calls, the DAO
//! drain, the transactions before the traced one committed); the traced transaction runs
//! under a fresh inspector, and its result goes out as geth's JSON.

use super::db::ReaderDb;
use super::{StateReader, VmError, env, evm_error};
use alloy_primitives::{Address, B256};
use moat_common::block::Block;
use moat_common::config::ChainConfig;
use revm::database::State;
use revm::{ExecuteCommitEvm, InspectEvm};
use revm_inspectors::tracing::{DebugInspector, TransactionContext};

/// The tracing options of geth's `debug_trace*` (`tracer`, `tracerConfig`, the struct
/// logger's switches, `timeout`), as JSON-RPC clients send them.
pub type TraceOptions = alloy_rpc_types_trace::geth::GethDebugTracingOptions;

/// Why a trace could not be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TraceError {
    /// The options name a tracer this node does not have (JavaScript tracers), or are
    /// malformed.
    #[error("{0}")]
    Options(String),
    /// Executing the block or call failed.
    #[error(transparent)]
    Vm(#[from] VmError),
}

/// Traces a call (`debug_traceCall`) on the post-state of `header`, in that block's
/// environment as `eth_call` runs it.
pub fn trace_call(
    config: &ChainConfig,
    header: &moat_common::block::Header,
    req: &super::CallRequest,
    state: &dyn StateReader,
    opts: &TraceOptions,
) -> Result<serde_json::Value, TraceError> {
    let inspector =
        DebugInspector::new(opts.clone()).map_err(|e| TraceError::Options(e.to_string()))?;
    let cap = super::call_gas_cap(config, header);
    let gas = req.gas.unwrap_or(cap).min(cap);
    let setup = super::call::setup_for(config, header, req)?;
    let db = State::builder().with_database(ReaderDb::new(state)).build();
    let mut evm = setup.build_inspecting_evm(db, inspector);
    let tx_env = super::call::call_tx(config, req, gas);
    let result = evm
        .inspect_tx(tx_env.clone())
        .map_err(super::call::call_error)?;
    let trace = evm
        .inspector
        .get_result(
            None,
            &tx_env,
            setup.block_env(),
            &result,
            &mut evm.ctx.journaled_state.database,
        )
        .map_err(|e| VmError::State(e.to_string()))?;
    Ok(serde_json::to_value(&trace).map_err(|e| VmError::State(format!("trace encoding: {e}")))?)
}

/// Traces the transactions of `block` (only the one at `only`, if given) on the state
/// before it; each result is geth's JSON for that transaction, with its hash.
pub fn trace_block(
    config: &ChainConfig,
    block: &Block,
    senders: &[Address],
    state: &dyn StateReader,
    opts: &TraceOptions,
    only: Option<usize>,
) -> Result<Vec<(B256, serde_json::Value)>, TraceError> {
    let header = &block.header;
    if senders.len() != block.transactions.len() {
        return Err(VmError::InvalidBlock("senders do not match transactions".into()).into());
    }
    // Checked once up front: a tracer we cannot build fails the call before any work.
    DebugInspector::new(opts.clone()).map_err(|e| TraceError::Options(e.to_string()))?;
    let fork = crate::premerge::block_fork(config, header);
    let setup = env::BlockSetup::new(config, header, fork)?;
    let db = State::builder()
        .with_database(ReaderDb::new(state))
        .with_bundle_update()
        .build();
    let mut evm = setup.build_evm(db);
    super::before_transactions(&mut evm, config, header, fork)?;

    let mut out = Vec::new();
    for (index, (tx, sender)) in block.transactions.iter().zip(senders).enumerate() {
        if only.is_some_and(|i| i < index) {
            break;
        }
        let tx_env = env::tx_env(tx, *sender);
        if only.is_some_and(|i| i != index) {
            evm.transact_commit(tx_env)
                .map_err(|e| evm_error(e, Some(index)))?;
            continue;
        }
        let inspector =
            DebugInspector::new(opts.clone()).map_err(|e| TraceError::Options(e.to_string()))?;
        let db = evm.ctx.journaled_state.database;
        let mut tracing = setup.build_inspecting_evm(db, inspector);
        let result = tracing
            .inspect_tx(tx_env.clone())
            .map_err(|e| evm_error(e, Some(index)))?;
        let context = TransactionContext {
            block_hash: Some(block.hash),
            tx_hash: Some(tx.hash()),
            tx_index: Some(index),
        };
        let trace = tracing
            .inspector
            .get_result(
                Some(context),
                &tx_env,
                setup.block_env(),
                &result,
                &mut tracing.ctx.journaled_state.database,
            )
            .map_err(|e| VmError::State(e.to_string()))?;
        tracing.commit(result.state);
        let json = serde_json::to_value(&trace)
            .map_err(|e| VmError::State(format!("trace encoding: {e}")))?;
        out.push((tx.hash(), json));
        evm = setup.build_evm(tracing.ctx.journaled_state.database);
    }
    Ok(out)
}
