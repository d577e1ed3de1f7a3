use super::*;

/// A tiny state: accounts and code; its "root" is a digest of the changes given.
#[derive(Default)]
struct Mem {
    accounts: HashMap<Address, AccountInfo>,
    code: HashMap<B256, Bytes>,
}

impl StateReader for Mem {
    fn account(&self, a: &Address) -> Result<Option<AccountInfo>, VmError> {
        Ok(self.accounts.get(a).copied())
    }
    fn storage(&self, _: &Address, _: &B256) -> Result<U256, VmError> {
        Ok(U256::ZERO)
    }
    fn code(&self, h: &B256) -> Result<Option<Bytes>, VmError> {
        Ok(self.code.get(h).cloned())
    }
    fn block_hash(&self, n: u64) -> Result<B256, VmError> {
        Ok(B256::from(U256::from(n)))
    }
    fn state_root_with(&self, changes: &[AccountChange]) -> Result<Option<B256>, VmError> {
        Ok(Some(alloy_primitives::keccak256(format!("{changes:?}"))))
    }
}

const FROM: Address = Address::repeat_byte(0xc0);
const TO: Address = Address::repeat_byte(0xc1);

fn header() -> Header {
    Header {
        number: 1,
        timestamp: 12,
        gas_limit: 30_000_000,
        base_fee_per_gas: Some(0),
        excess_blob_gas: Some(0),
        blob_gas_used: Some(0),
        parent_beacon_block_root: Some(B256::ZERO),
        ..Default::default()
    }
}

fn transfer(value: u64) -> SimCall {
    SimCall {
        req: CallRequest {
            from: Some(FROM),
            to: Some(TO),
            value: Some(U256::from(value)),
            ..Default::default()
        },
        ..Default::default()
    }
}

fn funded(wei: u64) -> BTreeMap<Address, SimOverride> {
    BTreeMap::from([(
        FROM,
        SimOverride {
            balance: Some(U256::from(wei)),
            ..Default::default()
        },
    )])
}

#[test]
fn a_block_of_overridden_state_and_transfers_is_simulated_with_transfer_logs() {
    let config = ChainConfig::all_forks_at_genesis(1, Fork::Cancun);
    let mem = Mem::default();
    let mut sim = Simulator::new(&config, &mem, false, true, 0);
    let out = sim
        .simulate_block(SimBlock {
            header: header(),
            overrides: funded(1_000),
            calls: vec![transfer(300), transfer(200)],
            ..Default::default()
        })
        .unwrap();
    assert_eq!(out.calls.len(), 2);
    assert!(out.calls.iter().all(|c| c.status == SimStatus::Success));
    assert_eq!(out.calls[0].gas_used, 21_000);
    assert_eq!(out.block.header.gas_used, 42_000);
    // The nonce the call left out came from the state, and went up.
    assert_eq!(out.block.transactions[1].tx().nonce(), 1);
    let log = &out.calls[1].logs[0];
    assert_eq!(log.log.address, TRANSFER_LOG_ADDRESS);
    assert_eq!(log.log.topics()[2], TO.into_word());
    assert_eq!(log.log_index, 1);
    assert_eq!(
        sim.state().account(&TO).unwrap().unwrap().balance,
        U256::from(500)
    );
    assert_eq!(
        sim.state().account(&FROM).unwrap().unwrap().balance,
        U256::from(500)
    );
}

#[test]
fn a_call_the_block_could_not_include_fails_the_simulation_with_its_kind() {
    let config = ChainConfig::all_forks_at_genesis(1, Fork::Cancun);
    let mem = Mem::default();
    let mut sim = Simulator::new(&config, &mem, false, false, 0);
    let e = sim
        .simulate_block(SimBlock {
            header: header(),
            calls: vec![transfer(1)],
            ..Default::default()
        })
        .unwrap_err();
    assert!(matches!(
        e,
        SimError::InvalidTransaction {
            kind: SimTxErrorKind::InsufficientFunds,
            ..
        }
    ));
    // With validation, a nonce ahead of the state's is refused before anything else.
    let mut sim = Simulator::new(&config, &mem, true, false, 0);
    let mut call = transfer(0);
    call.req.nonce = Some(5);
    let e = sim
        .simulate_block(SimBlock {
            header: header(),
            calls: vec![call],
            ..Default::default()
        })
        .unwrap_err();
    assert!(matches!(
        e,
        SimError::InvalidTransaction {
            kind: SimTxErrorKind::NonceTooHigh,
            ..
        }
    ));
    // Another chain's call, and contradicting fee fields.
    let mut call = transfer(0);
    call.chain_id = Some(999);
    let mut both = transfer(0);
    both.req.gas_price = Some(1);
    both.req.max_fee_per_gas = Some(1);
    for bad in [call, both] {
        let e = sim
            .simulate_block(SimBlock {
                header: header(),
                calls: vec![bad],
                ..Default::default()
            })
            .unwrap_err();
        assert!(matches!(e, SimError::InvalidParams(_)), "{e}");
    }
    // More gas than the block has left.
    let mut call = transfer(0);
    call.req.gas = Some(40_000_000);
    let e = sim
        .simulate_block(SimBlock {
            header: header(),
            calls: vec![call],
            ..Default::default()
        })
        .unwrap_err();
    assert!(matches!(e, SimError::BlockGasLimitReached { .. }));
}

#[test]
fn a_moved_precompile_answers_at_its_new_address_only() {
    let config = ChainConfig::all_forks_at_genesis(1, Fork::Cancun);
    let mem = Mem::default();
    let identity = Address::with_last_byte(4);
    let elsewhere = Address::repeat_byte(0x77);
    let mut overrides = funded(0);
    overrides.insert(
        identity,
        SimOverride {
            move_precompile_to: Some(elsewhere),
            ..Default::default()
        },
    );
    let call_to = |to: Address| SimCall {
        req: CallRequest {
            from: Some(FROM),
            to: Some(to),
            input: Bytes::from_static(b"echo"),
            ..Default::default()
        },
        ..Default::default()
    };
    let mut sim = Simulator::new(&config, &mem, false, false, 0);
    let out = sim
        .simulate_block(SimBlock {
            header: header(),
            overrides,
            calls: vec![call_to(elsewhere), call_to(identity)],
            ..Default::default()
        })
        .unwrap();
    assert_eq!(out.calls[0].return_data, Bytes::from_static(b"echo"));
    assert!(out.calls[1].return_data.is_empty());
    // Only a precompile moves.
    let mut sim = Simulator::new(&config, &mem, false, false, 0);
    let e = sim
        .simulate_block(SimBlock {
            header: header(),
            overrides: BTreeMap::from([(
                TO,
                SimOverride {
                    move_precompile_to: Some(elsewhere),
                    ..Default::default()
                },
            )]),
            ..Default::default()
        })
        .unwrap_err();
    assert!(matches!(e, SimError::Override(m) if m.contains("is not a precompile")));
}

#[test]
fn an_authorization_list_delegates_the_signer_to_code_for_the_call() {
    let config = ChainConfig::all_forks_at_genesis(1, Fork::Prague);
    // The delegate returns 32 bytes of 0x2a.
    let delegate = Address::repeat_byte(0xde);
    let code = Bytes::from_static(&[0x60, 0x2a, 0x60, 0x00, 0x52, 0x60, 0x20, 0x60, 0x00, 0xf3]);
    let mut mem = Mem::default();
    let hash = alloy_primitives::keccak256(&code);
    mem.code.insert(hash, code);
    mem.accounts.insert(
        delegate,
        AccountInfo {
            nonce: 1,
            balance: U256::ZERO,
            code_hash: hash,
        },
    );
    // Prague blocks call the request contracts: the ones of the conformance genesis.
    let genesis: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../../shared/testdata/ethtest/genesis.json"
        ))
        .unwrap(),
    )
    .unwrap();
    for address in [
        crate::vm::WITHDRAWAL_REQUEST_ADDRESS,
        crate::vm::CONSOLIDATION_REQUEST_ADDRESS,
    ] {
        let code: Bytes = serde_json::from_value(
            genesis["alloc"][format!("{address:x}").trim_start_matches("0x")]["code"].clone(),
        )
        .unwrap();
        let hash = alloy_primitives::keccak256(&code);
        mem.code.insert(hash, code);
        mem.accounts.insert(
            address,
            AccountInfo {
                nonce: 1,
                balance: U256::ZERO,
                code_hash: hash,
            },
        );
    }
    let signer = moat_crypto::secp::Signer::from_seed(7);
    let auth = moat_common::Authorization::sign(U256::from(1), delegate, 0, &signer);
    let call = SimCall {
        req: CallRequest {
            from: Some(FROM),
            to: Some(signer.address()),
            ..Default::default()
        },
        authorization_list: Some(vec![auth]),
        ..Default::default()
    };
    let mut sim = Simulator::new(&config, &mem, false, false, 0);
    let mut h = header();
    h.requests_hash = None;
    let out = sim
        .simulate_block(SimBlock {
            header: h,
            calls: vec![call],
            ..Default::default()
        })
        .unwrap();
    assert_eq!(out.calls[0].status, SimStatus::Success);
    assert_eq!(out.calls[0].return_data[31], 0x2a);
    assert_eq!(
        out.block.transactions[0].tx_type(),
        moat_common::TxType::Eip7702
    );
    // The signer now holds the delegation, its nonce bumped.
    let info = sim.state().account(&signer.address()).unwrap().unwrap();
    assert_eq!(info.nonce, 1);
}

#[test]
fn block_by_block_roots_equal_roots_over_all_changes() {
    // A stored chain (genesis only) to simulate on: its head state can compute roots
    // both ways.
    let genesis = serde_json::json!({
        "config": {
            "chainId": 1, "homesteadBlock": 0, "eip150Block": 0, "eip155Block": 0,
            "eip158Block": 0, "byzantiumBlock": 0, "constantinopleBlock": 0,
            "petersburgBlock": 0, "istanbulBlock": 0, "berlinBlock": 0, "londonBlock": 0,
            "mergeNetsplitBlock": 0, "terminalTotalDifficulty": 0, "shanghaiTime": 0,
            "cancunTime": 0
        },
        "gasLimit": "0x1c9c380", "difficulty": "0x0", "timestamp": "0x0",
        "alloc": {
            format!("{TO:x}"): { "balance": "0x5", "storage": {
                "0x0000000000000000000000000000000000000000000000000000000000000001": "0x09",
                "0x0000000000000000000000000000000000000000000000000000000000000002": "0x0a"
            }, "code": "0x00" }
        }
    });
    let genesis = moat_common::config::Genesis::from_json(&genesis.to_string()).unwrap();
    let chain = crate::chain::Chain::init(moat_storage::Store::in_memory(), &genesis).unwrap();
    let base = crate::history::StateAtBlock::head(chain.store().clone());
    let slot = |n: u8| B256::with_last_byte(n);
    let blocks = || {
        (1..=4u64).map(|n| {
            let mut overrides = funded(1_000);
            // Slot edits, then the whole storage replaced, then a deletion by a zero.
            overrides.insert(
                TO,
                SimOverride {
                    state_diff: (n == 1).then(|| BTreeMap::from([(slot(3), U256::from(4))])),
                    state: (n == 2).then(|| BTreeMap::from([(slot(7), U256::from(8))])),
                    ..Default::default()
                },
            );
            if n == 4 {
                overrides.insert(
                    TO,
                    SimOverride {
                        state_diff: Some(BTreeMap::from([(slot(7), U256::ZERO)])),
                        ..Default::default()
                    },
                );
            }
            let mut h = header();
            h.number = n;
            h.timestamp = 12 * n;
            SimBlock {
                header: h,
                overrides,
                calls: vec![transfer(n)],
                ..Default::default()
            }
        })
    };
    let config = chain.config().clone();
    let mut whole = Simulator::new(&config, &base, false, false, 0);
    let mut stepwise = Simulator::new(&config, &base, false, false, 0).with_tries(&base);
    let mut roots = HashSet::new();
    for (a, b) in blocks().zip(blocks()) {
        let a = whole.simulate_block(a).unwrap().block.header.state_root;
        let b = stepwise.simulate_block(b).unwrap().block.header.state_root;
        assert_eq!(a, b);
        roots.insert(a);
    }
    assert_eq!(roots.len(), 4, "every block changed the state");
}

#[test]
fn the_rpc_gas_cap_is_shared_by_all_calls() {
    let config = ChainConfig::all_forks_at_genesis(1, Fork::Cancun);
    let mem = Mem::default();
    let mut sim = Simulator::new(&config, &mem, false, false, 30_000);
    let block = || SimBlock {
        header: header(),
        overrides: funded(10),
        calls: vec![transfer(1)],
        ..Default::default()
    };
    sim.simulate_block(block()).unwrap();
    // 9,000 gas left: below a transfer's intrinsic gas.
    let mut next = block();
    next.header.number = 2;
    next.header.timestamp = 24;
    assert!(sim.simulate_block(next).is_err());
}

#[test]
fn a_failed_frame_drops_its_logs_and_its_transfer() {
    let mut t = SimInspector {
        trace_transfers: true,
        ..Default::default()
    };
    let a = Address::repeat_byte(0xaa);
    let b = Address::repeat_byte(0xbb);
    t.frames.push(Vec::new());
    t.transfer(a, b, U256::from(5));
    t.frames.push(Vec::new());
    t.transfer(b, a, U256::from(1));
    t.exit(false);
    t.exit(true);
    let logs = t.take();
    assert_eq!(logs.len(), 1);
    assert_eq!(logs[0].0.address, TRANSFER_LOG_ADDRESS);
    assert_eq!(logs[0].0.topics()[1], a.into_word());
    // The dropped log still took index 1, as geth counts.
    assert_eq!(logs[0].1, 0);
    t.frames.push(Vec::new());
    t.transfer(a, b, U256::from(2));
    t.exit(true);
    assert_eq!(t.take()[0].1, 2);
}

#[test]
fn a_reverted_transaction_keeps_no_logs() {
    let mut t = SimInspector {
        trace_transfers: true,
        ..Default::default()
    };
    t.frames.push(Vec::new());
    t.transfer(Address::ZERO, Address::repeat_byte(1), U256::from(1));
    t.exit(false);
    assert!(t.take().is_empty());
}

#[test]
fn transfers_are_not_logged_unless_asked() {
    let mut t = SimInspector::default();
    t.frames.push(Vec::new());
    t.transfer(Address::ZERO, Address::repeat_byte(1), U256::from(1));
    t.exit(true);
    assert!(t.take().is_empty());
}
