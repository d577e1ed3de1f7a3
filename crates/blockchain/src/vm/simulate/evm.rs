//! What a simulated block's EVM runs with: its precompiles (some moved or removed) and
//! geth's simulation tracer (logs per call frame, ERC-7528 transfer logs).

use crate::vm::db::ReaderDb;
use alloy_primitives::{Address, Bytes, Log, LogData, U256};
use revm::Inspector;
use revm::context::{ContextTr, Evm, JournalTr};
use revm::database::State;
use revm::handler::instructions::EthInstructions;
use revm::handler::{EthFrame, EthPrecompiles, PrecompileProvider};
use revm::interpreter::interpreter::EthInterpreter;
use revm::interpreter::{CallInputs, CallOutcome, CallScheme, CreateInputs, CreateOutcome};
use revm::interpreter::{InterpreterResult, interpreter_types::InterpreterTypes};
use revm::primitives::AddressSet;
use std::collections::{HashMap, HashSet};

use super::{TRANSFER_LOG_ADDRESS, TRANSFER_TOPIC};

/// The precompiles of one simulated block: the fork's, with some moved elsewhere and
/// some removed (an override of a precompile's address removes it, as in geth).
pub struct SimPrecompiles {
    pub(super) inner: EthPrecompiles,
    /// New address → the precompile's own address.
    pub(super) moved: HashMap<Address, Address>,
    pub(super) removed: HashSet<Address>,
}

impl SimPrecompiles {
    pub(super) fn new(spec: revm::primitives::hardfork::SpecId) -> Self {
        Self {
            inner: EthPrecompiles::new(spec),
            moved: HashMap::new(),
            removed: HashSet::new(),
        }
    }

    pub(super) fn is_precompile(&self, address: &Address) -> bool {
        self.moved.contains_key(address)
            || (self.inner.contains(address) && !self.removed.contains(address))
    }
}

impl<CTX: ContextTr> PrecompileProvider<CTX> for SimPrecompiles
where
    EthPrecompiles: PrecompileProvider<CTX, Output = InterpreterResult>,
{
    type Output = InterpreterResult;

    fn set_spec(&mut self, spec: <CTX::Cfg as revm::context::Cfg>::Spec) -> bool {
        <EthPrecompiles as PrecompileProvider<CTX>>::set_spec(&mut self.inner, spec)
    }

    fn run(
        &mut self,
        context: &mut CTX,
        inputs: &CallInputs,
    ) -> Result<Option<InterpreterResult>, String> {
        if let Some(original) = self.moved.get(&inputs.bytecode_address) {
            let mut moved = inputs.clone();
            moved.bytecode_address = *original;
            return self.inner.run(context, &moved);
        }
        if self.removed.contains(&inputs.bytecode_address) {
            return Ok(None);
        }
        self.inner.run(context, inputs)
    }

    /// The fork's precompiles start warm, wherever they were moved (as in geth).
    fn warm_addresses(&self) -> &AddressSet {
        self.inner.warm_addresses()
    }

    fn contains(&self, address: &Address) -> bool {
        self.is_precompile(address)
    }
}

/// geth's simulation tracer: the logs of each open call frame (dropped when the frame
/// fails), and, when asked, a transfer log for every call or create that moves ether.
#[derive(Debug, Default)]
pub struct SimInspector {
    pub(super) trace_transfers: bool,
    pub(super) frames: Vec<Vec<(Log, u64)>>,
    pub(super) done: Vec<(Log, u64)>,
    /// Logs captured in this block so far (geth's log index counts dropped ones too).
    pub(super) count: u64,
}

impl SimInspector {
    fn capture(&mut self, log: Log) {
        let index = self.count;
        self.count += 1;
        if let Some(frame) = self.frames.last_mut() {
            frame.push((log, index));
        }
    }

    pub(super) fn transfer(&mut self, from: Address, to: Address, value: U256) {
        if !self.trace_transfers || value.is_zero() {
            return;
        }
        let topics = vec![TRANSFER_TOPIC, from.into_word(), to.into_word()];
        let data = Bytes::copy_from_slice(&value.to_be_bytes::<32>());
        self.capture(Log {
            address: TRANSFER_LOG_ADDRESS,
            data: LogData::new_unchecked(topics, data),
        });
    }

    pub(super) fn exit(&mut self, ok: bool) {
        let Some(frame) = self.frames.pop() else {
            return;
        };
        match self.frames.last_mut() {
            Some(parent) if ok => parent.extend(frame),
            Some(_) => {}
            None => self.done = if ok { frame } else { Vec::new() },
        }
    }

    pub(super) fn take(&mut self) -> Vec<(Log, u64)> {
        self.frames.clear();
        std::mem::take(&mut self.done)
    }
}

impl<CTX: ContextTr, INTR: InterpreterTypes> Inspector<CTX, INTR> for SimInspector {
    fn log(&mut self, _context: &mut CTX, log: Log) {
        self.capture(log);
    }

    fn call(&mut self, _context: &mut CTX, inputs: &mut CallInputs) -> Option<CallOutcome> {
        self.frames.push(Vec::new());
        if !matches!(
            inputs.scheme,
            CallScheme::DelegateCall | CallScheme::CallCode
        ) && let Some(value) = inputs.transfer_value()
        {
            self.transfer(inputs.caller, inputs.target_address, value);
        }
        None
    }

    fn call_end(&mut self, _context: &mut CTX, _inputs: &CallInputs, outcome: &mut CallOutcome) {
        self.exit(outcome.result.result.is_ok());
    }

    fn create(&mut self, context: &mut CTX, inputs: &mut CreateInputs) -> Option<CreateOutcome> {
        self.frames.push(Vec::new());
        if !inputs.value().is_zero() {
            let caller = inputs.caller();
            // The address the frame will get: the caller's nonce is read before the
            // frame bumps it.
            let nonce = context
                .journal_mut()
                .load_account(caller)
                .map(|a| a.data.info.nonce)
                .unwrap_or_default();
            let created = inputs.created_address(nonce);
            self.transfer(caller, created, inputs.value());
        }
        None
    }

    fn create_end(
        &mut self,
        _context: &mut CTX,
        _inputs: &CreateInputs,
        outcome: &mut CreateOutcome,
    ) {
        self.exit(outcome.result.result.is_ok());
    }

    fn selfdestruct(&mut self, contract: Address, target: Address, value: U256) {
        self.transfer(contract, target, value);
    }
}

type SimContext<'a> = revm::handler::MainnetContext<State<ReaderDb<'a>>>;
pub(super) type SimEvm<'a> = Evm<
    SimContext<'a>,
    SimInspector,
    EthInstructions<EthInterpreter, SimContext<'a>>,
    SimPrecompiles,
    EthFrame<EthInterpreter>,
>;
