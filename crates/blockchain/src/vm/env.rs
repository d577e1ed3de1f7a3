//! Translation of our block, fork and transaction types into revm's environments.

use super::VmError;
use super::db::ReaderDb;
use alloy_primitives::{Address, U256};
use moat_common::SignedTransaction;
use moat_common::TxType;
use moat_common::block::Header;
use moat_common::config::{ChainConfig, Fork};
use revm::context::{BlockEnv, CfgEnv, Context, TxEnv};
use revm::context_interface::either::Either;
use revm::context_interface::transaction::{
    AccessList, AccessListItem, Authorization, RecoveredAuthority, RecoveredAuthorization,
};
use revm::database::State;
use revm::primitives::hardfork::SpecId;
use revm::{MainBuilder, MainContext, MainnetEvm, handler::MainnetContext};

/// The EVM the executor drives: mainnet instructions and precompiles over revm's `State`
/// cache on top of the caller's reader.
pub(super) type BlockEvm<'a> = MainnetEvm<MainnetContext<State<ReaderDb<'a>>>>;

/// The revm spec of a fork. revm has no spec for Constantinople with EIP-1283: it runs
/// as Petersburg (mainnet activated both at one block).
pub(super) fn spec_id(fork: Fork) -> Result<SpecId, VmError> {
    Ok(match fork {
        Fork::Frontier => SpecId::FRONTIER,
        Fork::Homestead => SpecId::HOMESTEAD,
        Fork::Tangerine => SpecId::TANGERINE,
        Fork::SpuriousDragon => SpecId::SPURIOUS_DRAGON,
        Fork::Byzantium => SpecId::BYZANTIUM,
        Fork::Constantinople | Fork::Petersburg => SpecId::PETERSBURG,
        Fork::Istanbul | Fork::MuirGlacier => SpecId::ISTANBUL,
        Fork::Berlin => SpecId::BERLIN,
        Fork::London | Fork::ArrowGlacier | Fork::GrayGlacier => SpecId::LONDON,
        Fork::Paris => SpecId::MERGE,
        Fork::Shanghai => SpecId::SHANGHAI,
        Fork::Cancun => SpecId::CANCUN,
        Fork::Prague => SpecId::PRAGUE,
        // The blob-parameter-only forks change no EVM rule, only blob limits, which come
        // from the chain config.
        Fork::Osaka | Fork::Bpo1 | Fork::Bpo2 | Fork::Bpo3 | Fork::Bpo4 | Fork::Bpo5 => {
            SpecId::OSAKA
        }
    })
}

/// Block and chain environment for one block.
pub(super) struct BlockSetup {
    block: BlockEnv,
    cfg: CfgEnv,
}

impl BlockSetup {
    pub(super) fn new(config: &ChainConfig, header: &Header, fork: Fork) -> Result<Self, VmError> {
        let spec = spec_id(fork)?;
        let mut cfg = CfgEnv::new_with_spec(spec);
        cfg.chain_id = config.chain_id;
        cfg.max_blobs_per_tx = config.max_blobs_per_tx(header.timestamp);

        let basefee = match header.base_fee_per_gas {
            Some(fee) => fee,
            None if fork < Fork::London => 0,
            None => {
                return Err(VmError::InvalidBlock(
                    "post-London block without base fee".into(),
                ));
            }
        };
        let mut block = BlockEnv {
            number: U256::from(header.number),
            beneficiary: header.beneficiary,
            timestamp: U256::from(header.timestamp),
            gas_limit: header.gas_limit,
            basefee,
            difficulty: header.difficulty,
            // EIP-4399: after the merge the mix hash field carries the beacon randomness.
            prevrandao: (fork >= Fork::Paris).then_some(header.mix_hash),
            blob_excess_gas_and_price: None,
            slot_num: 0,
        };
        if fork >= Fork::Cancun {
            let params = config.blob_params_at(header.timestamp).ok_or_else(|| {
                VmError::InvalidBlock("no blob parameters for a Cancun+ block".into())
            })?;
            if params.base_fee_update_fraction == 0 {
                return Err(VmError::InvalidBlock(
                    "blob base fee update fraction is zero".into(),
                ));
            }
            let excess = header.excess_blob_gas.ok_or_else(|| {
                VmError::InvalidBlock("Cancun block without excess blob gas".into())
            })?;
            cfg.blob_base_fee_update_fraction = Some(params.base_fee_update_fraction);
            block.set_blob_excess_gas_and_price(excess, params.base_fee_update_fraction);
        }
        Ok(BlockSetup { block, cfg })
    }

    /// The same block, set up for a call (eth_call, eth_estimateGas): the sender's nonce
    /// is not checked, and a call without a gas price runs below the base fee.
    pub(super) fn for_call(mut self, without_fee: bool) -> Self {
        self.cfg.disable_nonce_check = true;
        self.cfg.disable_base_fee = without_fee;
        // As geth: a call that pays nothing sees a zero BASEFEE.
        if without_fee {
            self.block.basefee = 0;
        }
        self
    }

    pub(super) fn block_env(&self) -> &BlockEnv {
        &self.block
    }

    /// The chain settings, for callers that relax checks (eth_simulateV1).
    pub(super) fn cfg_mut(&mut self) -> &mut CfgEnv {
        &mut self.cfg
    }

    pub(super) fn block_env_mut(&mut self) -> &mut BlockEnv {
        &mut self.block
    }

    /// The context alone, for an EVM with its own precompiles.
    pub(super) fn context<'a>(
        &self,
        db: State<ReaderDb<'a>>,
    ) -> MainnetContext<State<ReaderDb<'a>>> {
        Context::mainnet()
            .with_db(db)
            .with_cfg(self.cfg.clone())
            .with_block(self.block.clone())
    }

    /// The EVM with an inspector (tracing).
    pub(super) fn build_inspecting_evm<'a, I>(
        &self,
        db: State<ReaderDb<'a>>,
        inspector: I,
    ) -> MainnetEvm<MainnetContext<State<ReaderDb<'a>>>, I> {
        Context::mainnet()
            .with_db(db)
            .with_cfg(self.cfg.clone())
            .with_block(self.block.clone())
            .build_mainnet_with_inspector(inspector)
    }

    pub(super) fn build_evm<'a>(&self, db: State<ReaderDb<'a>>) -> BlockEvm<'a> {
        Context::mainnet()
            .with_db(db)
            .with_cfg(self.cfg.clone())
            .with_block(self.block.clone())
            .build_mainnet()
    }
}

/// An EIP-7702 tuple as revm takes it, its authority recovered here. An authority that
/// does not recover voids only its own tuple: revm skips it.
pub(super) fn recovered_authorization(
    auth: &moat_common::Authorization,
) -> Either<revm::context_interface::transaction::SignedAuthorization, RecoveredAuthorization> {
    let authority = match auth.recover_authority() {
        Some(address) => RecoveredAuthority::Valid(address),
        None => RecoveredAuthority::Invalid,
    };
    let inner = Authorization {
        chain_id: auth.chain_id,
        address: auth.address,
        nonce: auth.nonce,
    };
    Either::Right(RecoveredAuthorization::new_unchecked(inner, authority))
}

/// revm's view of a signed transaction sent by `sender`.
pub(super) fn tx_env(tx: &SignedTransaction, sender: Address) -> TxEnv {
    let t = tx.tx();
    let ty = t.tx_type();
    let gas_priority_fee = match ty {
        TxType::Legacy | TxType::Eip2930 => None,
        TxType::Eip1559 | TxType::Eip4844 | TxType::Eip7702 => Some(t.max_priority_fee_per_gas()),
    };
    let access_list = AccessList(
        t.access_list()
            .iter()
            .map(|item| AccessListItem {
                address: item.address,
                storage_keys: item.storage_keys.clone(),
            })
            .collect(),
    );
    let authorization_list = t
        .authorization_list()
        .iter()
        .map(recovered_authorization)
        .collect();
    TxEnv {
        tx_type: ty as u8,
        caller: sender,
        gas_limit: t.gas_limit(),
        gas_price: t.max_fee_per_gas(),
        kind: t.to(),
        value: t.value(),
        data: t.input().clone(),
        nonce: t.nonce(),
        chain_id: t.chain_id(),
        access_list,
        gas_priority_fee,
        blob_hashes: t.blob_versioned_hashes().to_vec(),
        max_fee_per_blob_gas: t.max_fee_per_blob_gas().unwrap_or_default(),
        authorization_list,
    }
}
