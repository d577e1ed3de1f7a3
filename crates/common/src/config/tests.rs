use super::*;
use alloy_primitives::{address, b256};
use std::path::Path;

const ETHTEST_GENESIS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../../shared/testdata/ethtest/genesis.json"
);
const ETHTEST_GENESIS_HASH: B256 =
    b256!("bd6a252af394d80904c5993b859574bd4669642cea00a116970ec7887db67533");

fn ethtest() -> Genesis {
    Genesis::from_file(Path::new(ETHTEST_GENESIS)).expect("ethtest genesis parses")
}

fn id(hash: u32, next: u64) -> ForkId {
    ForkId {
        hash: hash.to_be_bytes(),
        next,
    }
}

#[test]
fn ethtest_genesis_parses() {
    let g = ethtest();
    let c = &g.config;
    assert_eq!(c.chain_id, 3_503_995_874_084_926);
    assert_eq!(c.terminal_total_difficulty, Some(U256::from(131_072)));
    assert_eq!(c.merge_netsplit_block, Some(0));
    assert_eq!(
        (c.shanghai_time, c.cancun_time, c.prague_time, c.osaka_time),
        (Some(0), Some(60), Some(120), None)
    );
    assert_eq!(c.deposit_contract_address, Some(Address::ZERO));
    assert_eq!(c.blob_schedule.len(), 2);

    assert_eq!(g.timestamp, 0);
    assert_eq!(g.gas_limit, 0x11e1a300);
    assert_eq!(g.difficulty, U256::from(0x20000));
    assert_eq!(g.extra_data.as_ref(), b"hivechain");
    assert_eq!(g.base_fee_per_gas, Some(1_000_000_000));
    assert_eq!((g.excess_blob_gas, g.blob_gas_used), (None, None));
    assert_eq!(g.alloc.len(), 27);
    // The EIP-4788 beacon roots contract is pre-deployed with code.
    let beacon_roots = &g.alloc[&address!("000f3df6d732807ef1319fb7b8bb8522d0beac02")];
    assert!(!beacon_roots.code.is_empty());
    assert!(g.alloc.values().any(|a| !a.storage.is_empty()));
}

#[test]
fn ethtest_fork_schedule() {
    let c = ethtest().config;
    assert_eq!(c.fork_at(0, 0), Fork::Shanghai);
    assert_eq!(c.fork_at(0, 59), Fork::Shanghai);
    assert_eq!(c.fork_at(0, 60), Fork::Cancun);
    assert_eq!(c.fork_at(1, 119), Fork::Cancun);
    assert_eq!(c.fork_at(2, 120), Fork::Prague);
    assert_eq!(c.fork_at(600, 6000), Fork::Prague);
    assert!(c.is_active(Fork::Paris, 0, 0));
    assert!(c.is_active(Fork::London, 0, 0));
    assert!(!c.is_active(Fork::Osaka, 600, u64::MAX));
    assert_eq!(c.activation(Fork::Cancun), Some(Activation::Timestamp(60)));
    assert_eq!(c.activation(Fork::Paris), Some(Activation::Block(0)));
    assert_eq!(c.activation(Fork::Osaka), None);

    assert_eq!(c.blob_params_at(59), None);
    assert_eq!(c.blob_params_at(60), Some(BlobParams::CANCUN));
    assert_eq!(
        c.blob_params_at(6000),
        Some(BlobParams {
            target: 6,
            max: 9,
            base_fee_update_fraction: 5_007_716
        })
    );
    assert_eq!(c.max_blobs_per_tx(59), None);
    assert_eq!(c.max_blobs_per_tx(60), Some(6));
    assert_eq!(c.max_blobs_per_tx(6000), Some(9));
}

#[test]
fn ethtest_fork_id() {
    let c = ethtest().config;
    let at = |n, t| c.fork_id(ETHTEST_GENESIS_HASH, 0, n, t);
    assert_eq!(at(600, 6000), id(0x377aaa78, 0));
    // Shanghai at time 0 is part of the genesis, so the first fork point is Cancun.
    assert_eq!(at(0, 0).next, 60);
    assert_eq!(
        at(0, 0).hash,
        crc32fast::hash(ETHTEST_GENESIS_HASH.as_slice()).to_be_bytes()
    );
    assert_eq!(at(1, 60).next, 120);
    assert_eq!(at(2, 120), at(600, 6000));

    let filter = c.fork_filter(ETHTEST_GENESIS_HASH, 0);
    assert_eq!(filter.validate(at(600, 6000), 600, 6000), Ok(()));
    // A peer still at genesis that knows Cancun is coming is merely behind.
    assert_eq!(filter.validate(at(0, 0), 600, 6000), Ok(()));
    // One that knows of no fork at all needs an update.
    assert_eq!(
        filter.validate(id(u32::from_be_bytes(at(0, 0).hash), 0), 600, 6000),
        Err(ForkIdError::RemoteStale)
    );
    assert_eq!(
        filter.validate(id(0xdeadbeef, 0), 600, 6000),
        Err(ForkIdError::LocalIncompatibleOrStale)
    );
}

/// geth's core/forkid TestCreation vectors for mainnet (the pre-Shanghai ones are
/// EIP-2124's own).
#[test]
fn mainnet_fork_ids() {
    let cases: &[(u64, u64, u32, u64)] = &[
        (0, 0, 0xfc64ec04, 1_150_000),
        (1_149_999, 0, 0xfc64ec04, 1_150_000),
        (1_150_000, 0, 0x97c2c34c, 1_920_000),
        (1_919_999, 0, 0x97c2c34c, 1_920_000),
        (1_920_000, 0, 0x91d1f948, 2_463_000),
        (2_462_999, 0, 0x91d1f948, 2_463_000),
        (2_463_000, 0, 0x7a64da13, 2_675_000),
        (2_674_999, 0, 0x7a64da13, 2_675_000),
        (2_675_000, 0, 0x3edd5b10, 4_370_000),
        (4_369_999, 0, 0x3edd5b10, 4_370_000),
        (4_370_000, 0, 0xa00bc324, 7_280_000),
        (7_279_999, 0, 0xa00bc324, 7_280_000),
        (7_280_000, 0, 0x668db0af, 9_069_000),
        (9_068_999, 0, 0x668db0af, 9_069_000),
        (9_069_000, 0, 0x879d6e30, 9_200_000),
        (9_199_999, 0, 0x879d6e30, 9_200_000),
        (9_200_000, 0, 0xe029e991, 12_244_000),
        (12_243_999, 0, 0xe029e991, 12_244_000),
        (12_244_000, 0, 0x0eb440f6, 12_965_000),
        (12_964_999, 0, 0x0eb440f6, 12_965_000),
        (12_965_000, 0, 0xb715077d, 13_773_000),
        (13_772_999, 0, 0xb715077d, 13_773_000),
        (13_773_000, 0, 0x20c327fc, 15_050_000),
        (15_049_999, 0, 0x20c327fc, 15_050_000),
        (15_050_000, 0, 0xf0afd0e3, 1_681_338_455),
        (20_000_000, 1_681_338_454, 0xf0afd0e3, 1_681_338_455),
        (20_000_000, 1_681_338_455, 0xdce96c2d, 1_710_338_135),
        (30_000_000, 1_710_338_134, 0xdce96c2d, 1_710_338_135),
        (30_000_000, 1_710_338_135, 0x9f3d2254, 1_746_612_311),
        (30_000_000, 1_746_022_486, 0x9f3d2254, 1_746_612_311),
        (30_000_000, 1_746_612_311, 0xc376cf8b, 1_764_798_551),
        (30_000_000, 1_764_798_550, 0xc376cf8b, 1_764_798_551),
        (30_000_000, 1_764_798_551, 0x5167e2a6, 1_765_290_071),
        (30_000_000, 1_765_290_070, 0x5167e2a6, 1_765_290_071),
        (30_000_000, 1_765_290_071, 0xcba2a1c0, 1_767_747_671),
        (30_000_000, 1_767_747_670, 0xcba2a1c0, 1_767_747_671),
        (30_000_000, 1_767_747_671, 0x07c9462e, 0),
        (50_000_000, 2_000_000_000, 0x07c9462e, 0),
    ];
    check_fork_ids(Network::Mainnet, cases);
}

#[test]
fn sepolia_fork_ids() {
    let cases: &[(u64, u64, u32, u64)] = &[
        (0, 0, 0xfe3366e7, 1_735_371),
        (1_735_370, 0, 0xfe3366e7, 1_735_371),
        (1_735_371, 0, 0xb96cbd13, 1_677_557_088),
        (1_735_372, 1_677_557_087, 0xb96cbd13, 1_677_557_088),
        (1_735_372, 1_677_557_088, 0xf7f9bc08, 1_706_655_072),
        (1_735_372, 1_706_655_072, 0x88cf81d9, 1_741_159_776),
        (1_735_372, 1_741_159_776, 0xed88b5fd, 1_760_427_360),
        (1_735_372, 1_760_427_360, 0xe2ae4999, 1_761_017_184),
        (1_735_372, 1_761_017_184, 0x56078a1e, 1_761_607_008),
        (1_735_372, 1_761_607_007, 0x56078a1e, 1_761_607_008),
        (1_735_372, 1_761_607_008, 0x268956b6, 0),
        (1_735_372, 2_000_000_000, 0x268956b6, 0),
    ];
    check_fork_ids(Network::Sepolia, cases);
}

#[test]
fn hoodi_fork_ids() {
    // Shanghai and Cancun are at time 0, before Hoodi's genesis time: not fork points.
    let cases: &[(u64, u64, u32, u64)] = &[
        (0, 0, 0xbef71d30, 1_742_999_832),
        (123, 1_742_999_831, 0xbef71d30, 1_742_999_832),
        (123, 1_742_999_832, 0x0929e24e, 1_761_677_592),
        (123, 1_761_677_592, 0xe7e0e7ff, 1_762_365_720),
        (123, 1_762_365_720, 0x3893353e, 1_762_955_544),
        (123, 1_762_955_543, 0x3893353e, 1_762_955_544),
        (123, 1_762_955_544, 0x23aa1351, 0),
        (123, 2_000_000_000, 0x23aa1351, 0),
    ];
    check_fork_ids(Network::Hoodi, cases);
}

fn check_fork_ids(network: Network, cases: &[(u64, u64, u32, u64)]) {
    for &(head, time, hash, next) in cases {
        assert_eq!(
            network.fork_id(head, time),
            id(hash, next),
            "{network} at #{head} t={time}"
        );
    }
}

/// EIP-6122: a time fork at or before the genesis time is part of the genesis.
#[test]
fn time_forks_at_genesis_are_skipped() {
    let genesis_time = 1_690_475_657;
    let genesis_hash = B256::repeat_byte(0x42);
    let genesis_only = crc32fast::hash(genesis_hash.as_slice()).to_be_bytes();
    for (shanghai, cancun) in [
        (genesis_time - 1, genesis_time + 1),
        (genesis_time, genesis_time + 1),
        (genesis_time + 1, genesis_time + 2),
    ] {
        let c = ChainConfig {
            shanghai_time: Some(shanghai),
            cancun_time: Some(cancun),
            ..ChainConfig::all_forks_at_genesis(1337, Fork::Paris)
        };
        let want = ForkId {
            hash: genesis_only,
            next: genesis_time + 1,
        };
        assert_eq!(c.fork_id(genesis_hash, genesis_time, 0, genesis_time), want);
    }
}

/// geth's core/forkid TestValidation vectors (local is mainnet).
#[test]
fn fork_id_validation() {
    use ForkIdError::{LocalIncompatibleOrStale as Incompatible, RemoteStale as Stale};
    let crc_then = |crc: u32, fork: u64| {
        let mut h = crc32fast::Hasher::new_with_initial(crc);
        h.update(&fork.to_be_bytes());
        h.finalize()
    };
    let mut legacy = ChainConfig::mainnet();
    legacy.shanghai_time = None;
    legacy.cancun_time = None;
    legacy.prague_time = None;
    legacy.osaka_time = None;
    legacy.bpo1_time = None;
    legacy.bpo2_time = None;
    let mainnet = ChainConfig::mainnet();
    let max = u64::MAX;

    type Case<'a> = (&'a ChainConfig, u64, u64, ForkId, Result<(), ForkIdError>);
    let cases: Vec<Case<'_>> = vec![
        // Block-based.
        (&legacy, 15_050_000, 0, id(0xf0afd0e3, 0), Ok(())),
        (&legacy, 15_050_000, 0, id(0xf0afd0e3, max), Ok(())),
        (&legacy, 7_279_999, 0, id(0xa00bc324, 0), Ok(())),
        (&legacy, 7_279_999, 0, id(0xa00bc324, 7_280_000), Ok(())),
        (&legacy, 7_279_999, 0, id(0xa00bc324, max), Ok(())),
        (&legacy, 7_280_000, 0, id(0xa00bc324, 7_280_000), Ok(())),
        (&legacy, 7_987_396, 0, id(0xa00bc324, 7_280_000), Ok(())),
        (&legacy, 7_987_396, 0, id(0x3edd5b10, 4_370_000), Ok(())),
        (&legacy, 7_279_999, 0, id(0x668db0af, 0), Ok(())),
        (&legacy, 4_369_999, 0, id(0xa00bc324, 0), Ok(())),
        (&legacy, 7_987_396, 0, id(0xa00bc324, 0), Err(Stale)),
        (&legacy, 7_987_396, 0, id(0x5cddc0e1, 0), Err(Incompatible)),
        (&legacy, 7_279_999, 0, id(0x5cddc0e1, 0), Err(Incompatible)),
        (&legacy, 7_987_396, 0, id(0xafec6b27, 0), Err(Incompatible)),
        (
            &legacy,
            88_888_888,
            0,
            id(0xf0afd0e3, 88_888_888),
            Err(Incompatible),
        ),
        (
            &legacy,
            7_279_999,
            0,
            id(0xa00bc324, 7_279_999),
            Err(Incompatible),
        ),
        // Block to timestamp transition.
        (&mainnet, 15_050_000, 0, id(0xf0afd0e3, 0), Ok(())),
        (
            &mainnet,
            15_050_000,
            0,
            id(0xf0afd0e3, 1_681_338_455),
            Ok(()),
        ),
        (&mainnet, 15_050_000, 0, id(0xf0afd0e3, max), Ok(())),
        (
            &mainnet,
            20_000_000,
            1_681_338_455,
            id(0xf0afd0e3, 1_681_338_455),
            Ok(()),
        ),
        (
            &mainnet,
            20_123_456,
            1_681_338_456,
            id(0xf0afd0e3, 1_681_338_455),
            Ok(()),
        ),
        (
            &mainnet,
            20_000_000,
            1_681_338_455,
            id(0x20c327fc, 15_050_000),
            Ok(()),
        ),
        (&mainnet, 15_050_000, 0, id(0xdce96c2d, 0), Ok(())),
        (&mainnet, 13_773_000, 0, id(0xf0afd0e3, 0), Ok(())),
        (
            &mainnet,
            20_000_000,
            1_681_338_455,
            id(0xf0afd0e3, 0),
            Err(Stale),
        ),
        (
            &mainnet,
            15_050_000,
            0,
            id(crc_then(0xf0afd0e3, max), 0),
            Err(Incompatible),
        ),
        (
            &mainnet,
            15_050_000,
            0,
            id(crc_then(0xdce96c2d, max), 0),
            Err(Incompatible),
        ),
        (
            &mainnet,
            888_888_888,
            1_660_000_000,
            id(0xf0afd0e3, 1_660_000_000),
            Err(Incompatible),
        ),
        (
            &mainnet,
            19_999_999,
            1_667_999_999,
            id(0xf0afd0e3, 1_667_999_999),
            Err(Incompatible),
        ),
        // Timestamp-based.
        (
            &mainnet,
            20_000_000,
            1_681_338_455,
            id(0xdce96c2d, 0),
            Ok(()),
        ),
        (
            &mainnet,
            20_000_000,
            1_681_338_455,
            id(0xdce96c2d, max),
            Ok(()),
        ),
        (
            &mainnet,
            20_000_000,
            1_668_000_000,
            id(0xdce96c2d, 0),
            Ok(()),
        ),
        (
            &mainnet,
            20_000_000,
            1_668_000_000,
            id(0xdce96c2d, 1_710_338_135),
            Ok(()),
        ),
        (
            &mainnet,
            20_000_000,
            1_668_000_000,
            id(0xdce96c2d, max),
            Ok(()),
        ),
        (
            &mainnet,
            21_000_000,
            1_710_338_135,
            id(0xdce96c2d, 1_710_338_135),
            Ok(()),
        ),
        (
            &mainnet,
            21_123_456,
            1_710_338_136,
            id(0xdce96c2d, 1_710_338_135),
            Ok(()),
        ),
        (&mainnet, 0, 0, id(0x3edd5b10, 1_710_338_135), Ok(())),
        (
            &mainnet,
            21_000_000,
            1_700_000_000,
            id(0x9f3d2254, 0),
            Ok(()),
        ),
        (
            &mainnet,
            21_000_000,
            1_678_000_000,
            id(0xc376cf8b, 0),
            Ok(()),
        ),
        (
            &mainnet,
            21_000_000,
            1_710_338_135,
            id(0xdce96c2d, 0),
            Err(Stale),
        ),
        (
            &mainnet,
            20_000_000,
            1_681_338_455,
            id(crc_then(0xdce96c2d, max), 0),
            Err(Incompatible),
        ),
        (
            &mainnet,
            20_000_000,
            1_668_000_000,
            id(crc_then(0x9f3d2254, max), 0),
            Err(Incompatible),
        ),
        (
            &mainnet,
            20_000_000,
            1_681_338_455,
            id(0x12345678, 0),
            Err(Incompatible),
        ),
        (
            &mainnet,
            88_888_888,
            8_888_888_888,
            id(0x07c9462e, 8_888_888_888),
            Err(Incompatible),
        ),
        (
            &mainnet,
            20_999_999,
            1_699_999_999,
            id(0x71147644, 1_700_000_000),
            Err(Incompatible),
        ),
    ];
    for (i, (config, head, time, remote, want)) in cases.into_iter().enumerate() {
        let filter = config.fork_filter(MAINNET_GENESIS_HASH, 0);
        assert_eq!(
            filter.validate(remote, head, time),
            want,
            "case {i}: head #{head} t={time} remote {remote:?}"
        );
    }
}

#[test]
fn fork_names_round_trip() {
    for fork in Fork::ALL {
        assert_eq!(Fork::from_name(fork.name()), Some(fork));
        assert_eq!(Fork::from_name(&fork.name().to_lowercase()), Some(fork));
        assert_eq!(fork.to_string().parse::<Fork>().unwrap(), fork);
        let json = serde_json::to_string(&fork).unwrap();
        assert_eq!(serde_json::from_str::<Fork>(&json).unwrap(), fork);
    }
    for (name, fork) in [
        ("EIP150", Fork::Tangerine),
        ("TangerineWhistle", Fork::Tangerine),
        ("EIP158", Fork::SpuriousDragon),
        ("ConstantinopleFix", Fork::Petersburg),
        ("petersburg", Fork::Petersburg),
        ("Merge", Fork::Paris),
        ("PARIS", Fork::Paris),
        ("bpo3", Fork::Bpo3),
    ] {
        assert_eq!(Fork::from_name(name), Some(fork), "{name}");
    }
    assert!(
        matches!("Amsterdam".parse::<Fork>(), Err(ConfigError::UnknownFork(s)) if s == "Amsterdam")
    );
    assert_eq!(Fork::from_name(""), None);
    assert_eq!(Fork::ALL.len(), Fork::Bpo5 as usize + 1);
    assert!(Fork::ALL.windows(2).all(|w| w[0] < w[1]));
    assert_eq!(Fork::LATEST, Fork::Osaka);
    assert_eq!(Fork::Bpo2.rules(), Fork::Osaka);
    assert_eq!(Fork::Prague.rules(), Fork::Prague);
}

#[test]
fn mainnet_schedule_and_blobs() {
    let c = ChainConfig::mainnet();
    let osaka = c.osaka_time.unwrap();
    let bpo1 = c.bpo1_time.unwrap();
    let bpo2 = c.bpo2_time.unwrap();
    assert_eq!(c.blob_params_at(c.cancun_time.unwrap() - 1), None);
    assert_eq!(
        c.blob_params_at(c.cancun_time.unwrap()),
        Some(BlobParams::CANCUN)
    );
    assert_eq!(
        c.blob_params_at(c.prague_time.unwrap()),
        Some(BlobParams::PRAGUE)
    );
    // Osaka brings no blob parameters of its own.
    assert_eq!(c.blob_params_at(osaka), Some(BlobParams::PRAGUE));
    assert_eq!(
        c.blob_params_at(bpo1),
        Some(BlobParams {
            target: 10,
            max: 15,
            base_fee_update_fraction: 8_346_193
        })
    );
    assert_eq!(
        c.blob_params_at(bpo2),
        Some(BlobParams {
            target: 14,
            max: 21,
            base_fee_update_fraction: 11_684_671
        })
    );
    assert_eq!(c.max_blobs_per_tx(osaka - 1), Some(9));
    assert_eq!(c.max_blobs_per_tx(osaka), Some(6));
    assert_eq!(c.max_blobs_per_tx(bpo2), Some(6));

    assert_eq!(c.fork_at(0, 0), Fork::Frontier);
    assert_eq!(c.fork_at(1_920_000, 0), Fork::Homestead);
    assert_eq!(c.fork_at(7_280_000, 0), Fork::Petersburg);
    assert_eq!(c.fork_at(15_537_393, 1_663_224_162), Fork::GrayGlacier);
    assert_eq!(c.fork_at(15_537_394, 1_663_224_179), Fork::Paris);
    assert_eq!(c.fork_at(17_034_870, 1_681_338_479), Fork::Shanghai);
    assert_eq!(c.fork_at(23_000_000, osaka), Fork::Osaka);
    assert_eq!(c.fork_at(23_000_000, bpo1), Fork::Bpo1);
    assert_eq!(c.fork_at(23_000_000, bpo2), Fork::Bpo2);
    assert_eq!(c.fork_at(23_000_000, bpo2).rules(), Fork::Osaka);
    assert!(c.validate().is_ok());
}

#[test]
fn builtin_networks() {
    for network in Network::ALL {
        let c = network.config();
        assert_eq!(c.chain_id, network.chain_id());
        assert_eq!(
            Network::from_name(&network.name().to_uppercase()),
            Some(network)
        );
        assert_eq!(Network::from_chain_id(c.chain_id), Some(network));
        assert!(c.validate().is_ok(), "{network}");
        assert_eq!(c.blob_schedule.get(&Fork::Bpo2), Some(&BlobParams::BPO2));
        assert_eq!(c.fork_at(u64::MAX, u64::MAX), Fork::Bpo2);
    }
    assert_eq!(Network::Hoodi.genesis_hash(), HOODI_GENESIS_HASH);
    assert_eq!(Network::from_name("holesky"), None);
    let sepolia = ChainConfig::sepolia();
    assert_eq!(sepolia.fork_at(1_450_408, 0), Fork::London);
    assert_eq!(sepolia.fork_at(1_450_409, 0), Fork::Paris);
    assert_eq!(ChainConfig::hoodi().fork_at(0, 1_742_212_800), Fork::Cancun);
}

/// The built-in genesis (schedule, block 0 fields, embedded allocation) of each network
/// makes the block every client publishes.
#[test]
fn builtin_genesis_blocks_hash_to_the_published_values() {
    for network in Network::ALL {
        let genesis = network.genesis();
        let header = genesis.header();
        assert_eq!(header.hash(), network.genesis_hash(), "{network}");
        assert_eq!(header.timestamp, network.genesis_timestamp(), "{network}");
    }
    let mainnet = Network::Mainnet.genesis();
    assert_eq!(mainnet.alloc.len(), 8893);
    let total: U256 = mainnet.alloc.values().map(|a| a.balance).sum();
    // 72,009,990.49948 ether were allocated at launch.
    assert_eq!(total / U256::from(10u64.pow(18)), U256::from(72_009_990u64));
    // Hoodi starts with the deposit contract and the four system contracts.
    let hoodi = Network::Hoodi.genesis();
    let deposit = &hoodi.alloc[&address!("00000000219ab540356cbb839cbe05303d7705fa")];
    assert!(!deposit.code.is_empty() && !deposit.storage.is_empty());
    let history = &hoodi.alloc[&address!("0000f90827f1c53a10cb7a02335b175320002935")];
    assert_eq!(history.nonce, 1);
}

fn minimal_genesis(config: &str) -> String {
    format!(
        r#"{{"config": {config}, "gasLimit": "0x1c9c380", "difficulty": "0x0", "alloc": {{}}}}"#
    )
}

#[test]
fn blob_schedule_fallbacks() {
    // No blobSchedule at all: Cancun and Prague get their standard values.
    let g = Genesis::from_json(&minimal_genesis(
        r#"{"chainId": 7, "homesteadBlock": 0, "eip150Block": 0, "eip155Block": 0, "eip158Block": 0,
            "byzantiumBlock": 0, "constantinopleBlock": 0, "petersburgBlock": 0, "istanbulBlock": 0,
            "berlinBlock": 0, "londonBlock": 0, "shanghaiTime": 0, "cancunTime": 10, "pragueTime": 20,
            "osakaTime": 30, "bpo1Time": 40,
            "blobSchedule": {"osaka": {"target": 7, "max": 12, "baseFeeUpdateFraction": "0x1"},
                             "bpo1": {"target": 8, "max": 16, "baseFeeUpdateFraction": 2},
                             "amsterdam": {"target": 1, "max": 1, "baseFeeUpdateFraction": 1}}}"#,
    ))
    .unwrap();
    let c = &g.config;
    assert_eq!(c.blob_params_at(9), None);
    assert_eq!(c.blob_params_at(10), Some(BlobParams::CANCUN));
    assert_eq!(c.blob_params_at(20), Some(BlobParams::PRAGUE));
    assert_eq!(
        c.blob_params_at(30),
        Some(BlobParams {
            target: 7,
            max: 12,
            base_fee_update_fraction: 1
        })
    );
    assert_eq!(c.blob_params_at(40).map(|p| p.max), Some(16));
    assert_eq!(c.max_blobs_per_tx(29), Some(9));
    assert_eq!(c.max_blobs_per_tx(40), Some(6));
    assert_eq!(
        c.blob_schedule.len(),
        2,
        "unknown blobSchedule keys are ignored"
    );
}

#[test]
fn schedule_validation() {
    let base = r#""chainId": 1, "homesteadBlock": 0, "eip150Block": 0, "eip155Block": 0, "eip158Block": 0,
        "byzantiumBlock": 0, "constantinopleBlock": 0, "petersburgBlock": 0, "istanbulBlock": 0,
        "berlinBlock": 0"#;
    let parse = |rest: &str| Genesis::from_json(&minimal_genesis(&format!("{{{base}{rest}}}")));

    assert!(parse(r#", "londonBlock": 5, "shanghaiTime": 10"#).is_ok());
    assert!(matches!(
        parse(r#", "shanghaiTime": 10"#),
        Err(ConfigError::MissingFork {
            missing: "londonBlock",
            later: "shanghaiTime"
        })
    ));
    assert!(matches!(
        parse(r#", "londonBlock": 0, "shanghaiTime": 10, "cancunTime": 9"#),
        Err(ConfigError::ForkOrder {
            earlier: "shanghaiTime",
            later: "cancunTime",
            ..
        })
    ));
    assert!(matches!(
        parse(r#", "londonBlock": 0, "shanghaiTime": 0, "bpo1Time": 9"#),
        Err(ConfigError::MissingBlobParams(Fork::Bpo1))
    ));
    assert!(matches!(
        parse(
            r#", "londonBlock": 0, "shanghaiTime": 0, "cancunTime": 0,
               "blobSchedule": {"cancun": {"target": 3, "max": 6, "baseFeeUpdateFraction": 0}}"#
        ),
        Err(ConfigError::InvalidBlobParams {
            fork: Fork::Cancun,
            ..
        })
    ));
    // Optional forks may be skipped.
    assert!(parse(r#", "londonBlock": 0, "shanghaiTime": 0, "pragueTime": 5, "bpo2Time": 6, "blobSchedule": {"bpo2": {"target": 1, "max": 2, "baseFeeUpdateFraction": 3}}"#).is_ok());
}

#[test]
fn quantities_in_all_spellings() {
    let g = Genesis::from_json(
        r#"{
        "config": {"chainId": "0x10", "homesteadBlock": "5", "terminalTotalDifficulty": 58750000000000000000000},
        "nonce": 66, "timestamp": "1633267481", "gasLimit": 5000, "difficulty": "17179869184",
        "extraData": "0x1234", "baseFeePerGas": null,
        "alloc": {
            "a94f5374fce5edbac8e81a7e31f6ee4e96db2c6e": {"balance": "1000000000000000000000"},
            "0x000000000000000000000000000000000000Abcd": {"balance": "0xff", "nonce": "0x1", "code": "0x60",
                "storage": {"0x01": "0x1", "02": "0x0000000000000000000000000000000000000000000000000000000000000003"},
                "privateKey": "0x45a915e4d060149eb4365960e6a7a45f334393093061116b197e3240065ff2d8"}
        }}"#,
    )
    .unwrap();
    assert_eq!(g.config.chain_id, 16);
    assert_eq!(g.config.homestead_block, Some(5));
    assert_eq!(
        g.config.terminal_total_difficulty,
        Some(U256::from(58_750_000_000_000_000_000_000_u128))
    );
    assert_eq!(
        (g.nonce, g.timestamp, g.gas_limit),
        (66, 1_633_267_481, 5000)
    );
    assert_eq!(g.difficulty, U256::from(17_179_869_184_u64));
    assert_eq!(g.base_fee_per_gas, None);
    let plain = &g.alloc[&address!("a94f5374fce5edbac8e81a7e31f6ee4e96db2c6e")];
    assert_eq!(plain.balance, U256::from(10u128.pow(21)));
    let contract = &g.alloc[&address!("000000000000000000000000000000000000abcd")];
    assert_eq!(
        (contract.balance, contract.nonce, contract.code.as_ref()),
        (U256::from(255), 1, &[0x60][..])
    );
    assert_eq!(
        contract.storage[&B256::with_last_byte(1)],
        B256::with_last_byte(1)
    );
    assert_eq!(
        contract.storage[&B256::with_last_byte(2)],
        B256::with_last_byte(3)
    );
}

#[test]
fn bad_input_is_an_error() {
    let bad = [
        "",
        "[]",
        r#"{"config": {"chainId": 1}, "difficulty": "0x0", "alloc": {}}"#, // no gasLimit
        &minimal_genesis(r#"{"chainId": -1}"#),
        &minimal_genesis(r#"{"chainId": 1.5}"#),
        &minimal_genesis(r#"{"chainId": "0x10000000000000000"}"#),
        &minimal_genesis(r#"{"chainId": 18446744073709551616}"#),
        &minimal_genesis(r#"{"chainId": "0x"}"#),
        &minimal_genesis(r#"{"chainId": "12a"}"#),
        &minimal_genesis(r#"{"chainId": 1e400}"#),
        &minimal_genesis(
            r#"{"chainId": 1, "terminalTotalDifficulty": -123456789012345678901234567890}"#,
        ),
        r#"{"config": {"chainId": 1}, "gasLimit": 1, "difficulty": 0, "alloc": {"0x12": {"balance": "0x0"}}}"#,
        r#"{"config": {"chainId": 1}, "gasLimit": 1, "difficulty": 0, "alloc": {"0x0000000000000000000000000000000000000001": {}}}"#,
        r#"{"config": {"chainId": 1}, "gasLimit": 1, "difficulty": 0, "alloc": {"0x0000000000000000000000000000000000000001": {"balance": "0", "storage": {"0x1": "0xzz"}}}}"#,
    ];
    for json in bad {
        assert!(Genesis::from_json(json).is_err(), "accepted {json}");
    }
    let missing = Genesis::from_file(Path::new("/nonexistent/genesis.json"));
    assert!(matches!(missing, Err(ConfigError::Io { .. })));
}

#[test]
fn large_integers_are_quoted_only_outside_strings() {
    let json = r#"{"a": 123, "b": 123456789012345678901234567890, "c": "99999999999999999999999", "d": [1.5e30, -7]}"#;
    assert_eq!(
        genesis_quote(json),
        r#"{"a": 123, "b": "123456789012345678901234567890", "c": "99999999999999999999999", "d": [1.5e30, -7]}"#
    );
    let escaped = r#"{"k\"99999999999999999999999": 1}"#;
    assert_eq!(genesis_quote(escaped), escaped);
}

fn genesis_quote(s: &str) -> String {
    genesis::quote_large_integers(s).into_owned()
}

#[test]
fn json_round_trip() {
    let g = ethtest();
    let text = serde_json::to_string(&g).unwrap();
    assert_eq!(Genesis::from_json(&text).unwrap(), g);

    // paris_block has no genesis key, so it is the one thing a JSON round trip loses.
    let mainnet = ChainConfig::mainnet();
    let back: ChainConfig =
        serde_json::from_str(&serde_json::to_string(&mainnet).unwrap()).unwrap();
    assert_eq!(
        back,
        ChainConfig {
            paris_block: None,
            ..mainnet.clone()
        }
    );
    let value = serde_json::to_value(&mainnet).unwrap();
    assert_eq!(value["terminalTotalDifficulty"], "58750000000000000000000");
    assert_eq!(
        value["blobSchedule"]["bpo2"]["baseFeeUpdateFraction"],
        11_684_671
    );
    assert_eq!(value["bpo1Time"], 1_765_290_071);
}

#[test]
fn all_forks_at_genesis() {
    for fork in Fork::ALL {
        let c = ChainConfig::all_forks_at_genesis(1337, fork);
        assert_eq!(c.fork_at(0, 0), fork, "{fork}");
        assert!(c.validate().is_ok(), "{fork}");
        assert_eq!(c.blob_params_at(0).is_some(), fork >= Fork::Cancun);
    }
}

/// Streams `json` (written to a file) and collects the allocation.
fn stream(json: &str) -> Result<Genesis, ConfigError> {
    // Removed when dropped, also on a panic.
    let dir = tempfile::Builder::new()
        .prefix("moat-genesis-stream-")
        .tempdir()
        .unwrap();
    let path = dir.path().join("genesis.json");
    std::fs::write(&path, json).unwrap();
    let mut alloc = std::collections::BTreeMap::new();
    let mut add = |address, account| {
        alloc.insert(address, account);
        Ok(())
    };
    let streamed = Genesis::stream_file(&path, AllocEntries::Parse(&mut add));
    // Skipping the allocation reads the same genesis.
    let skipped = Genesis::stream_file(&path, AllocEntries::Skip);
    dir.close().unwrap();
    let mut g = streamed?;
    assert_eq!(skipped.map_err(|e| e.to_string()), Ok(g.clone()));
    assert!(g.alloc.is_empty());
    g.alloc = alloc;
    Ok(g)
}

#[test]
fn a_streamed_genesis_reads_as_the_whole_file_does() {
    let text = std::fs::read_to_string(ETHTEST_GENESIS).unwrap();
    let g = stream(&text).unwrap();
    assert_eq!(g, ethtest());
    assert_eq!(g.header().hash(), ETHTEST_GENESIS_HASH);
    // The allocation first, keys with and without 0x, escapes in strings, a huge bare
    // balance and a terminal total difficulty beyond 64 bits, odd whitespace.
    let json = r#" { "alloc" : { "0x00000000000000000000000000000000000000aa": {"balance": 1000000000000000000000000000000, "storage": {"0x01": "0x02"}, "code": "0x6001"},
        "00000000000000000000000000000000000000bb" : {"balance":"0x10","nonce":"0x2"} } ,
        "extraData": "0x", "comment": "a \"quoted\" } brace",
        "config": {"chainId": 7, "terminalTotalDifficulty": 58750000000000000000000},
        "gasLimit": "0x1c9c380", "difficulty": "0x0" }
"#;
    let g = stream(json).unwrap();
    assert_eq!(Some(&g), Genesis::from_json(json).ok().as_ref());
    assert_eq!(g.alloc.len(), 2);
}

#[test]
fn a_malformed_streamed_genesis_is_an_error() {
    let bad = [
        "",
        "[]",
        "{",
        r#"{"alloc": {"0xzz": {"balance": "0x1"}}}"#,
        r#"{"alloc": {"0x00000000000000000000000000000000000000aa": {"balance": "0x1"}"#,
        r#"{"alloc": {"0x00000000000000000000000000000000000000aa" {"balance": "0x1"}}}"#,
        r#"{"alloc": {"0x00000000000000000000000000000000000000aa": {"balance": -1}}}"#,
        r#"{"alloc": {"0x00000000000000000000000000000000000000aa": {"nonce": "0x1"}}}"#,
        r#"{"alloc": {}, "config": {"chainId": 1}, "gasLimit": "0x1", "difficulty": "0x0"} x"#,
        r#"{"alloc": {}, "config": {"chainId": 1}, "gasLimit": "0x1", "difficulty": "0x0""#,
        r#"{"alloc": {}, "config": {"chainId": 1}, "gasLimit": "0x1", "difficulty": "0x0", "extraData": "abc}"#,
        r#"{"config": {"chainId": 1}, "gasLimit": "0x1", "difficulty": "0x0"}"#,
        r#"{"alloc": null, "config": {"chainId": 1}, "gasLimit": "0x1", "difficulty": "0x0"}"#,
    ];
    for json in bad {
        assert!(stream(json).is_err(), "accepted {json:?}");
    }
    let mut refuse = |_, _| Err("refused".to_string());
    let dir = tempfile::Builder::new()
        .prefix("moat-genesis-refuse-")
        .tempdir()
        .unwrap();
    let path = dir.path().join("genesis.json");
    std::fs::copy(ETHTEST_GENESIS, &path).unwrap();
    let err = Genesis::stream_file(&path, AllocEntries::Parse(&mut refuse)).unwrap_err();
    dir.close().unwrap();
    assert!(matches!(err, ConfigError::Alloc { .. }), "{err}");
}
