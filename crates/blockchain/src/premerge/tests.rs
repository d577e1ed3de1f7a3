use super::*;
use alloy_primitives::Address;
use moat_common::config::Network;

const ETHER: u128 = 1_000_000_000_000_000_000;

fn header(number: u64, timestamp: u64, difficulty: u64) -> Header {
    Header {
        number,
        timestamp,
        difficulty: U256::from(difficulty),
        ommers_hash: EMPTY_OMMERS_HASH,
        gas_limit: 5_000,
        ..Header::default()
    }
}

/// A chain with only the given block-numbered fork active from genesis (and those
/// before it).
fn chain(last: Fork) -> ChainConfig {
    ChainConfig::all_forks_at_genesis(1, last)
}

#[test]
fn mainnet_blocks_1_and_2_have_their_published_difficulty() {
    let config = ChainConfig::mainnet();
    let genesis = Network::Mainnet.genesis().header();
    assert_eq!(genesis.difficulty, U256::from(17_179_869_184u64));
    // Block 1 came 1,438,269,988 s after genesis (timestamp 0): Frontier, slower than
    // 13 s, difficulty down by 1/2048.
    let one = calc_difficulty(&config, 1_438_269_988, &genesis);
    assert_eq!(one, U256::from(17_171_480_576u64));
    let block1 = Header {
        number: 1,
        timestamp: 1_438_269_988,
        difficulty: one,
        ..genesis.clone()
    };
    assert_eq!(
        calc_difficulty(&config, 1_438_270_017, &block1),
        U256::from(17_163_096_064u64)
    );
}

#[test]
fn frontier_homestead_and_byzantium_adjustments() {
    let d = 268_435_456u64; // step = d / 2048 = 131,072
    let step = 131_072u64;
    let frontier = chain(Fork::Frontier);
    assert_eq!(
        calc_difficulty(&frontier, 105, &header(10, 100, d)),
        U256::from(d + step)
    );
    assert_eq!(
        calc_difficulty(&frontier, 113, &header(10, 100, d)),
        U256::from(d - step)
    );
    let homestead = chain(Fork::Homestead);
    // 25 s: 1 − 25/10 = −1.
    assert_eq!(
        calc_difficulty(&homestead, 125, &header(10, 100, d)),
        U256::from(d - step)
    );
    // 9 s: +1; very slow: floored at −99.
    assert_eq!(
        calc_difficulty(&homestead, 109, &header(10, 100, d)),
        U256::from(d + step)
    );
    assert_eq!(
        calc_difficulty(&homestead, 100_000, &header(10, 100, d)),
        U256::from(d - 99 * step)
    );
    let byzantium = chain(Fork::Byzantium);
    // 10 s: 1 − 10/9 = 0; with ommers in the parent 2 − 1 = +1.
    assert_eq!(
        calc_difficulty(&byzantium, 110, &header(10, 100, d)),
        U256::from(d)
    );
    let mut with_ommers = header(10, 100, d);
    with_ommers.ommers_hash = B256::repeat_byte(1);
    assert_eq!(
        calc_difficulty(&byzantium, 110, &with_ommers),
        U256::from(d + step)
    );
    // Never below the minimum.
    assert_eq!(
        calc_difficulty(&homestead, 100_000, &header(10, 100, MINIMUM_DIFFICULTY)),
        U256::from(MINIMUM_DIFFICULTY)
    );
}

#[test]
fn the_bomb_and_its_delays() {
    let d = 268_435_456u64;
    let homestead = chain(Fork::Homestead);
    // Block 200,000: two periods, 2^0 added; 300,000: 2^1. (9 s keeps the +1 step.)
    let step = 131_072u64;
    assert_eq!(
        calc_difficulty(&homestead, 109, &header(199_999, 100, d)),
        U256::from(d + step + 1)
    );
    assert_eq!(
        calc_difficulty(&homestead, 109, &header(299_999, 100, d)),
        U256::from(d + step + 2)
    );
    // The delays count from the parent: parent − (delay − 1).
    for (fork, delay) in [
        (Fork::Byzantium, 3_000_000u64),
        (Fork::Constantinople, 5_000_000),
        (Fork::MuirGlacier, 9_000_000),
        (Fork::London, 9_700_000),
        (Fork::ArrowGlacier, 10_700_000),
        (Fork::GrayGlacier, 11_400_000),
    ] {
        let config = chain(fork);
        // 10 s, no ommers: no adjustment; the fake number is 200,000: +1.
        let parent = header(delay - 1 + 200_000, 100, d);
        assert_eq!(
            calc_difficulty(&config, 110, &parent),
            U256::from(d + 1),
            "{fork:?}"
        );
        // One period short: no bomb.
        let parent = header(delay - 1 + 199_999, 100, d);
        assert_eq!(
            calc_difficulty(&config, 110, &parent),
            U256::from(d),
            "{fork:?}"
        );
    }
}

#[test]
fn rewards_per_fork_and_ommer_distance() {
    let miner = Address::repeat_byte(1);
    let mut block = header(10, 100, 1);
    block.beneficiary = miner;
    let ommer = |number: u64, who: u8| Header {
        beneficiary: Address::repeat_byte(who),
        ..header(number, 90, 1)
    };
    let ommers = [ommer(9, 2), ommer(8, 3)];
    let r = rewards(Fork::Byzantium, &block, &ommers);
    assert_eq!(
        r,
        vec![
            (Address::repeat_byte(2), U256::from(3 * ETHER * 7 / 8)),
            (Address::repeat_byte(3), U256::from(3 * ETHER * 6 / 8)),
            (miner, U256::from(3 * ETHER + 2 * (3 * ETHER / 32))),
        ]
    );
    assert_eq!(
        rewards(Fork::Frontier, &block, &[]),
        vec![(miner, U256::from(5 * ETHER))]
    );
    assert_eq!(
        rewards(Fork::Petersburg, &block, &[]),
        vec![(miner, U256::from(2 * ETHER))]
    );
    assert!(rewards(Fork::Paris, &block, &[]).is_empty());
}

#[test]
fn block_fork_follows_the_difficulty_on_a_ttd_chain() {
    let mut config = chain(Fork::GrayGlacier);
    config.terminal_total_difficulty = Some(U256::from(1_000_000u64));
    config.merge_netsplit_block = Some(5);
    // Difficulty > 0 at the netsplit block: still proof of work.
    assert_eq!(
        block_fork(&config, &header(5, 50, 131_072)),
        Fork::GrayGlacier
    );
    assert_eq!(block_fork(&config, &header(3, 30, 0)), Fork::Paris);
    // A chain that starts merged is Paris whatever the header says.
    let merged = chain(Fork::Paris);
    assert_eq!(block_fork(&merged, &header(3, 30, 0)), Fork::Paris);
}

/// A little PoW chain: `n` headers on the Homestead rules, each a valid child.
fn pow_chain(config: &ChainConfig, n: u64) -> Vec<Header> {
    let mut out = vec![Header {
        gas_limit: 5_000_000,
        ..header(0, 0, MINIMUM_DIFFICULTY)
    }];
    for i in 1..=n {
        let parent = out.last().unwrap().clone();
        let timestamp = parent.timestamp + 10;
        out.push(Header {
            parent_hash: parent.hash(),
            number: i,
            timestamp,
            difficulty: calc_difficulty(config, timestamp, &parent),
            gas_limit: parent.gas_limit,
            ..Header::default()
        });
    }
    out
}

fn ancestry_of(chain: &[Header], block: u64) -> Ancestry {
    let start = block.saturating_sub(MAX_OMMER_DEPTH) as usize;
    let mut ancestors: Vec<Header> = chain[start..block as usize].to_vec();
    ancestors.reverse();
    Ancestry {
        ancestors,
        ancestor_ommers: Vec::new(),
    }
}

/// A valid ommer: a sibling of canonical block `of`, with its own extra data.
fn sibling(config: &ChainConfig, chain: &[Header], of: u64) -> Header {
    let parent = &chain[of as usize - 1];
    let timestamp = parent.timestamp + 11;
    Header {
        parent_hash: parent.hash(),
        number: of,
        timestamp,
        difficulty: calc_difficulty(config, timestamp, parent),
        gas_limit: parent.gas_limit,
        extra_data: vec![0xaa].into(),
        ..Header::default()
    }
}

#[test]
fn ommer_rules() {
    let config = chain(Fork::Homestead);
    let headers = pow_chain(&config, 10);
    let block = headers[10].clone();
    let hash = block.hash();
    let ancestry = ancestry_of(&headers, 10);
    let check = |ommers: &[Header], ancestry: &Ancestry| {
        validate_ommers(&config, &block, hash, ommers, ancestry)
    };
    let good = sibling(&config, &headers, 8);
    assert_eq!(check(std::slice::from_ref(&good), &ancestry), Ok(()));
    assert_eq!(
        check(&[good.clone(), sibling(&config, &headers, 7)], &ancestry),
        Ok(())
    );
    // Three are too many.
    let three = [
        good.clone(),
        sibling(&config, &headers, 7),
        sibling(&config, &headers, 6),
    ];
    assert_eq!(
        check(&three, &ancestry),
        Err(OmmerError::TooMany { found: 3 })
    );
    // The same ommer twice, or one an ancestor already included.
    assert_eq!(
        check(&[good.clone(), good.clone()], &ancestry),
        Err(OmmerError::Duplicate(good.hash()))
    );
    let mut included = ancestry.clone();
    included.ancestor_ommers.push(good.hash());
    assert_eq!(
        check(std::slice::from_ref(&good), &included),
        Err(OmmerError::Duplicate(good.hash()))
    );
    // An ancestor is no ommer.
    assert_eq!(
        check(&[headers[8].clone()], &ancestry),
        Err(OmmerError::IsAncestor(headers[8].hash()))
    );
    // A sibling of the block itself (its parent is the block's parent), or too old.
    let same_parent = sibling(&config, &headers, 10);
    assert!(matches!(
        check(&[same_parent], &ancestry),
        Err(OmmerError::Dangling { .. })
    ));
    let too_old = sibling(&config, &headers, 2);
    assert!(matches!(
        check(&[too_old], &ancestry),
        Err(OmmerError::Dangling { .. })
    ));
    // An ommer with a wrong difficulty fails its own header rules.
    let mut bad = good.clone();
    bad.difficulty += U256::from(1);
    assert!(matches!(
        check(&[bad], &ancestry),
        Err(OmmerError::Header {
            error: crate::header::HeaderError::PowDifficulty { .. },
            ..
        })
    ));
}
