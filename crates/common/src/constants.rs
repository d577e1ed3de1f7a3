//! Protocol constants shared across crates.

/// Blob gas one blob consumes (EIP-4844).
pub const GAS_PER_BLOB: u64 = 1 << 17;
/// Base cost of every transaction.
pub const TX_GAS: u64 = 21_000;
/// Extra base cost of a contract creation (Homestead).
pub const TX_CREATE_GAS: u64 = 32_000;
/// Gas per zero byte of calldata.
pub const TX_DATA_ZERO_GAS: u64 = 4;
/// Gas per non-zero byte of calldata before Istanbul (EIP-2028 lowered it).
pub const TX_DATA_NON_ZERO_GAS_FRONTIER: u64 = 68;
/// EIP-2028 (Istanbul).
pub const TX_DATA_NON_ZERO_GAS: u64 = 16;
/// EIP-2930.
pub const ACCESS_LIST_ADDRESS_GAS: u64 = 2_400;
/// EIP-2930: per storage key of an access list.
pub const ACCESS_LIST_STORAGE_KEY_GAS: u64 = 1_900;
/// EIP-3860: per 32-byte word of init code.
pub const INIT_CODE_WORD_GAS: u64 = 2;
/// EIP-7702: charged per authorization up front.
pub const PER_EMPTY_ACCOUNT_COST: u64 = 25_000;
/// EIP-7623: floor cost per calldata token.
pub const TOTAL_COST_FLOOR_PER_TOKEN: u64 = 10;
/// EIP-170 / EIP-3860.
pub const MAX_CODE_SIZE: usize = 24_576;
/// keccak(rlp([])): the ommers hash of every post-merge block.
pub const EMPTY_OMMERS_HASH: alloy_primitives::B256 =
    alloy_primitives::b256!("1dcc4de8dec75d7aab85b567b6ccd41ad312451b948a7413f0a142fd40d49347");
/// sha256 of nothing: the requests hash of a block with no EIP-7685 requests.
pub const EMPTY_REQUESTS_HASH: alloy_primitives::B256 =
    alloy_primitives::b256!("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
/// EIP-1559: the base fee of the first London block.
pub const INITIAL_BASE_FEE: u64 = 1_000_000_000;
