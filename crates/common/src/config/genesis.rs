//! geth-style `genesis.json` files.
//!
//! The format is geth's: a `config` object with the fork schedule, the genesis header
//! fields, and an `alloc` of pre-funded accounts. Quantities are read the way geth reads
//! them: JSON numbers, `"0x"` hex strings and decimal strings all work. Keys moat does not
//! use (`ethash`, `clique`, an account's `privateKey`, ...) are ignored.

use super::{BlobParams, ChainConfig, ConfigError, Fork, Network};
use alloy_primitives::{Address, B256, Bytes, U256};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::path::Path;

/// A genesis file: the chain's schedule, the fields of block 0, and its initial state.
/// (The default is all zeros and empty, for struct updates that set what a chain needs.)
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Genesis {
    /// The chain id and fork schedule (geth's `config` object).
    pub config: ChainConfig,
    /// Block 0's header nonce (the proof-of-work nonce; zero on chains born merged).
    #[serde(default, with = "quantity::hex_u64")]
    pub nonce: u64,
    /// Block 0's timestamp, in seconds since the Unix epoch.
    #[serde(default, with = "quantity::hex_u64")]
    pub timestamp: u64,
    /// Block 0's header `extraData`.
    #[serde(default, deserialize_with = "nullable")]
    pub extra_data: Bytes,
    /// Block 0's gas limit, in gas.
    #[serde(with = "quantity::hex_u64")]
    pub gas_limit: u64,
    /// Block 0's proof-of-work difficulty (zero on chains born merged).
    #[serde(with = "quantity::hex_u256")]
    pub difficulty: U256,
    /// Block 0's `mixHash` (after the merge, `prevRandao`).
    #[serde(default, deserialize_with = "nullable")]
    pub mix_hash: B256,
    /// Block 0's beneficiary (`miner` in the header).
    #[serde(default, deserialize_with = "nullable")]
    pub coinbase: Address,
    /// The initial state: the accounts that exist in block 0, by address.
    #[serde(deserialize_with = "alloc_map")]
    pub alloc: BTreeMap<Address, GenesisAccount>,
    /// The genesis block's number (normally 0).
    #[serde(default, with = "quantity::hex_u64")]
    pub number: u64,
    /// Block 0's gas used, in gas (0: it holds no transactions).
    #[serde(default, with = "quantity::hex_u64")]
    pub gas_used: u64,
    /// Block 0's parent hash (zero).
    #[serde(default, deserialize_with = "nullable")]
    pub parent_hash: B256,
    /// The header's base fee. geth writes it for chains that start at London or later;
    /// when it is absent on such a chain, block 0 carries the EIP-1559 initial base fee
    /// (1 gwei), which is for whoever builds the genesis header to fill in.
    #[serde(
        default,
        with = "quantity::hex_opt_u64",
        skip_serializing_if = "Option::is_none"
    )]
    pub base_fee_per_gas: Option<u64>,
    /// The header's excess blob gas (EIP-4844), for a chain born at Cancun or later; absent
    /// means zero there.
    #[serde(
        default,
        with = "quantity::hex_opt_u64",
        skip_serializing_if = "Option::is_none"
    )]
    pub excess_blob_gas: Option<u64>,
    /// The header's blob gas used (EIP-4844), for a chain born at Cancun or later; absent
    /// means zero there.
    #[serde(
        default,
        with = "quantity::hex_opt_u64",
        skip_serializing_if = "Option::is_none"
    )]
    pub blob_gas_used: Option<u64>,
}

/// An account in the genesis state.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GenesisAccount {
    /// Balance in wei.
    #[serde(with = "quantity::hex_u256")]
    pub balance: U256,
    /// The account's nonce (0 when absent).
    #[serde(default, with = "quantity::hex_u64")]
    pub nonce: u64,
    /// The contract's runtime bytecode (empty for an externally owned account).
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "<[u8]>::is_empty"
    )]
    pub code: Bytes,
    /// The contract's storage: slot → value, both as 32-byte words.
    #[serde(
        default,
        deserialize_with = "storage_map",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub storage: BTreeMap<B256, B256>,
}

impl Genesis {
    /// Parses a genesis file and checks its fork schedule.
    pub fn from_json(s: &str) -> Result<Genesis, ConfigError> {
        let genesis: Genesis = serde_json::from_str(&quote_large_integers(s))?;
        genesis.config.validate()?;
        Ok(genesis)
    }

    /// Reads and parses a genesis file ([`Genesis::from_json`]).
    pub fn from_file(path: &Path) -> Result<Genesis, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Io {
            path: path.to_owned(),
            source,
        })?;
        Genesis::from_json(&text)
    }
}

impl Network {
    /// The network's genesis: its fork schedule, the fields of its block 0 and its
    /// allocation (embedded by `moat-genesis-alloc`). The block it makes hashes to
    /// [`Network::genesis_hash`].
    pub fn genesis(self) -> Genesis {
        // (allocation, nonce, timestamp, extra data, gas limit, difficulty)
        let (alloc, nonce, timestamp, extra_data, gas_limit, difficulty): (_, _, _, &[u8], _, _) =
            match self {
                Network::Mainnet => (
                    moat_genesis_alloc::MAINNET,
                    0x42,
                    0,
                    &alloy_primitives::hex!(
                        "11bbe8db4e347b4e8c937c1c8370e4b5ed33adb3db69cbdb7a38e1e50b1b82fa"
                    ),
                    5_000,
                    17_179_869_184u64,
                ),
                Network::Sepolia => (
                    moat_genesis_alloc::SEPOLIA,
                    0,
                    self.genesis_timestamp(),
                    b"Sepolia, Athens, Attica, Greece!",
                    30_000_000,
                    0x20000,
                ),
                Network::Hoodi => (
                    moat_genesis_alloc::HOODI,
                    0x1234,
                    self.genesis_timestamp(),
                    b"",
                    36_000_000,
                    1,
                ),
            };
        let alloc = alloc_map(&mut serde_json::Deserializer::from_str(alloc))
            .expect("the embedded allocation is a geth alloc object (tested)");
        Genesis {
            config: self.config(),
            nonce,
            timestamp,
            extra_data: Bytes::copy_from_slice(extra_data),
            gas_limit,
            difficulty: U256::from(difficulty),
            mix_hash: B256::ZERO,
            coinbase: Address::ZERO,
            alloc,
            number: 0,
            gas_used: 0,
            parent_hash: B256::ZERO,
            base_fee_per_gas: None,
            excess_blob_gas: None,
            blob_gas_used: None,
        }
    }
}

/// Wraps integer literals too large for a `u64` in quotes.
///
/// geth writes a large terminal total difficulty as a bare JSON number (mainnet's is
/// 58750000000000000000000). serde_json would read it as an `f64` and lose digits; as a
/// string it reaches our decimal parser intact.
pub(super) fn quote_large_integers(json: &str) -> Cow<'_, str> {
    let bytes = json.as_bytes();
    let mut out: Option<String> = None;
    let mut copied = 0;
    let mut in_string = false;
    let mut escaped = false;
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            i += 1;
            continue;
        }
        if b == b'"' {
            in_string = true;
            i += 1;
            continue;
        }
        if !(b.is_ascii_digit() || b == b'-') {
            i += 1;
            continue;
        }
        // A number token outside a string. Only a plain run of digits is an integer;
        // signs, fractions and exponents are left for serde_json to judge.
        let start = i;
        while i < bytes.len() && matches!(bytes[i], b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E')
        {
            i += 1;
        }
        let token = &json[start..i];
        if token.bytes().all(|c| c.is_ascii_digit()) && token.parse::<u64>().is_err() {
            let buf = out.get_or_insert_with(|| String::with_capacity(json.len() + 16));
            buf.push_str(&json[copied..start]);
            buf.push('"');
            buf.push_str(token);
            buf.push('"');
            copied = i;
        }
    }
    match out {
        None => Cow::Borrowed(json),
        Some(mut buf) => {
            buf.push_str(&json[copied..]);
            Cow::Owned(buf)
        }
    }
}

/// geth reads `null` for a byte string or hash as empty / zero.
fn nullable<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// Alloc keys may come with or without `0x`.
fn alloc_map<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<BTreeMap<Address, GenesisAccount>, D::Error> {
    let raw = BTreeMap::<String, GenesisAccount>::deserialize(d)?;
    raw.into_iter()
        .map(|(key, account)| {
            let address = parse_alloc_address(&key).map_err(serde::de::Error::custom)?;
            Ok((address, account))
        })
        .collect()
}

/// An alloc key: 40 hex digits, with or without `0x`.
pub(super) fn parse_alloc_address(key: &str) -> Result<Address, String> {
    let digits = strip_0x(key);
    let mut addr = [0u8; 20];
    if digits.len() != 40 || hex::decode_to_slice(digits, &mut addr).is_err() {
        return Err(format!("invalid alloc address {key:?}"));
    }
    Ok(Address::new(addr))
}

/// Storage keys and values may be shorter than 32 bytes (left-padded) and may leave out
/// `0x`. geth wants an even number of digits; we also take "0x1".
fn storage_map<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<B256, B256>, D::Error> {
    let Some(raw) = Option::<BTreeMap<String, String>>::deserialize(d)? else {
        return Ok(BTreeMap::new());
    };
    let word = |s: &str| -> Result<B256, D::Error> {
        let digits = strip_0x(s);
        if digits.len() > 64 {
            return Err(serde::de::Error::custom(format!(
                "storage word {s:?} is longer than 32 bytes"
            )));
        }
        let padded = format!("{digits:0>64}");
        let mut out = [0u8; 32];
        hex::decode_to_slice(&padded, &mut out)
            .map_err(|_| serde::de::Error::custom(format!("invalid hex storage word {s:?}")))?;
        Ok(B256::new(out))
    };
    raw.iter().map(|(k, v)| Ok((word(k)?, word(v)?))).collect()
}

fn strip_0x(s: &str) -> &str {
    s.strip_prefix("0x")
        .or_else(|| s.strip_prefix("0X"))
        .unwrap_or(s)
}

/// Readers and writers for numeric fields.
pub(super) mod quantity {
    use alloy_primitives::U256;
    use serde::de::{self, Visitor};
    use serde::{Deserialize, Deserializer, Serializer};
    use std::fmt;

    /// Largest integer an `f64` holds exactly.
    const F64_EXACT: f64 = 9_007_199_254_740_992.0;

    fn parse_u256(s: &str) -> Result<U256, String> {
        let (digits, radix) = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
            Some(hex) => (hex, 16),
            None => (s, 10),
        };
        let valid = !digits.is_empty()
            && digits.bytes().all(|b| {
                if radix == 16 {
                    b.is_ascii_hexdigit()
                } else {
                    b.is_ascii_digit()
                }
            });
        if !valid {
            return Err(format!("{s:?} is not a hex (0x) or decimal integer"));
        }
        U256::from_str_radix(digits, radix).map_err(|_| format!("{s:?} does not fit in 256 bits"))
    }

    /// A non-negative integer written as a JSON number or a hex or decimal string.
    struct Quantity<T>(T);

    impl<'de> Deserialize<'de> for Quantity<U256> {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            d.deserialize_any(QuantityVisitor).map(Quantity)
        }
    }

    impl<'de> Deserialize<'de> for Quantity<u64> {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            let n = d.deserialize_any(QuantityVisitor)?;
            u64::try_from(n)
                .map(Quantity)
                .map_err(|_| de::Error::custom(format!("{n} does not fit in 64 bits")))
        }
    }

    struct QuantityVisitor;

    impl Visitor<'_> for QuantityVisitor {
        type Value = U256;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a non-negative integer, as a JSON number or a hex (0x) or decimal string")
        }

        fn visit_u64<E: de::Error>(self, v: u64) -> Result<U256, E> {
            Ok(U256::from(v))
        }

        fn visit_i64<E: de::Error>(self, v: i64) -> Result<U256, E> {
            u64::try_from(v)
                .map(U256::from)
                .map_err(|_| E::custom(format!("negative quantity {v}")))
        }

        // serde_json hands over integers beyond u64 as floats; only take those that
        // are still exact.
        fn visit_f64<E: de::Error>(self, v: f64) -> Result<U256, E> {
            if (0.0..=F64_EXACT).contains(&v) && v.fract() == 0.0 {
                Ok(U256::from(v as u64))
            } else {
                Err(E::custom(format!(
                    "{v} is not an exact integer; write large quantities as strings"
                )))
            }
        }

        fn visit_str<E: de::Error>(self, v: &str) -> Result<U256, E> {
            parse_u256(v).map_err(E::custom)
        }
    }

    pub(crate) fn de_u64<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        Quantity::<u64>::deserialize(d).map(|q| q.0)
    }

    pub(crate) fn de_opt_u64<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
        Ok(Option::<Quantity<u64>>::deserialize(d)?.map(|q| q.0))
    }

    pub(crate) fn de_opt_u256<'de, D: Deserializer<'de>>(d: D) -> Result<Option<U256>, D::Error> {
        Ok(Option::<Quantity<U256>>::deserialize(d)?.map(|q| q.0))
    }

    /// Hex on the way out, as geth writes a genesis header's quantities.
    pub(crate) mod hex_u64 {
        use super::*;

        pub(crate) fn serialize<S: Serializer>(v: &u64, s: S) -> Result<S::Ok, S::Error> {
            s.serialize_str(&format!("{v:#x}"))
        }

        pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
            // Missing fields are handled by `#[serde(default)]`; an explicit null reads as 0.
            Ok(de_opt_u64(d)?.unwrap_or_default())
        }
    }

    pub(crate) mod hex_opt_u64 {
        use super::*;

        pub(crate) fn serialize<S: Serializer>(v: &Option<u64>, s: S) -> Result<S::Ok, S::Error> {
            match v {
                Some(v) => s.serialize_str(&format!("{v:#x}")),
                None => s.serialize_none(),
            }
        }

        pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
            d: D,
        ) -> Result<Option<u64>, D::Error> {
            de_opt_u64(d)
        }
    }

    pub(crate) mod hex_u256 {
        use super::*;

        pub(crate) fn serialize<S: Serializer>(v: &U256, s: S) -> Result<S::Ok, S::Error> {
            s.serialize_str(&format!("{v:#x}"))
        }

        pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<U256, D::Error> {
            Quantity::<U256>::deserialize(d).map(|q| q.0)
        }
    }
}

/// `ChainConfig` as geth spells it in JSON.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ChainConfigJson {
    #[serde(deserialize_with = "quantity::de_u64")]
    chain_id: u64,
    #[serde(
        default,
        deserialize_with = "quantity::de_opt_u64",
        skip_serializing_if = "Option::is_none"
    )]
    homestead_block: Option<u64>,
    #[serde(
        default,
        deserialize_with = "quantity::de_opt_u64",
        skip_serializing_if = "Option::is_none"
    )]
    dao_fork_block: Option<u64>,
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "std::ops::Not::not"
    )]
    dao_fork_support: bool,
    #[serde(
        default,
        deserialize_with = "quantity::de_opt_u64",
        skip_serializing_if = "Option::is_none"
    )]
    eip150_block: Option<u64>,
    #[serde(
        default,
        deserialize_with = "quantity::de_opt_u64",
        skip_serializing_if = "Option::is_none"
    )]
    eip155_block: Option<u64>,
    #[serde(
        default,
        deserialize_with = "quantity::de_opt_u64",
        skip_serializing_if = "Option::is_none"
    )]
    eip158_block: Option<u64>,
    #[serde(
        default,
        deserialize_with = "quantity::de_opt_u64",
        skip_serializing_if = "Option::is_none"
    )]
    byzantium_block: Option<u64>,
    #[serde(
        default,
        deserialize_with = "quantity::de_opt_u64",
        skip_serializing_if = "Option::is_none"
    )]
    constantinople_block: Option<u64>,
    #[serde(
        default,
        deserialize_with = "quantity::de_opt_u64",
        skip_serializing_if = "Option::is_none"
    )]
    petersburg_block: Option<u64>,
    #[serde(
        default,
        deserialize_with = "quantity::de_opt_u64",
        skip_serializing_if = "Option::is_none"
    )]
    istanbul_block: Option<u64>,
    #[serde(
        default,
        deserialize_with = "quantity::de_opt_u64",
        skip_serializing_if = "Option::is_none"
    )]
    muir_glacier_block: Option<u64>,
    #[serde(
        default,
        deserialize_with = "quantity::de_opt_u64",
        skip_serializing_if = "Option::is_none"
    )]
    berlin_block: Option<u64>,
    #[serde(
        default,
        deserialize_with = "quantity::de_opt_u64",
        skip_serializing_if = "Option::is_none"
    )]
    london_block: Option<u64>,
    #[serde(
        default,
        deserialize_with = "quantity::de_opt_u64",
        skip_serializing_if = "Option::is_none"
    )]
    arrow_glacier_block: Option<u64>,
    #[serde(
        default,
        deserialize_with = "quantity::de_opt_u64",
        skip_serializing_if = "Option::is_none"
    )]
    gray_glacier_block: Option<u64>,
    #[serde(
        default,
        deserialize_with = "quantity::de_opt_u64",
        skip_serializing_if = "Option::is_none"
    )]
    merge_netsplit_block: Option<u64>,
    #[serde(
        default,
        deserialize_with = "quantity::de_opt_u64",
        skip_serializing_if = "Option::is_none"
    )]
    shanghai_time: Option<u64>,
    #[serde(
        default,
        deserialize_with = "quantity::de_opt_u64",
        skip_serializing_if = "Option::is_none"
    )]
    cancun_time: Option<u64>,
    #[serde(
        default,
        deserialize_with = "quantity::de_opt_u64",
        skip_serializing_if = "Option::is_none"
    )]
    prague_time: Option<u64>,
    #[serde(
        default,
        deserialize_with = "quantity::de_opt_u64",
        skip_serializing_if = "Option::is_none"
    )]
    osaka_time: Option<u64>,
    #[serde(
        default,
        deserialize_with = "quantity::de_opt_u64",
        skip_serializing_if = "Option::is_none"
    )]
    bpo1_time: Option<u64>,
    #[serde(
        default,
        deserialize_with = "quantity::de_opt_u64",
        skip_serializing_if = "Option::is_none"
    )]
    bpo2_time: Option<u64>,
    #[serde(
        default,
        deserialize_with = "quantity::de_opt_u64",
        skip_serializing_if = "Option::is_none"
    )]
    bpo3_time: Option<u64>,
    #[serde(
        default,
        deserialize_with = "quantity::de_opt_u64",
        skip_serializing_if = "Option::is_none"
    )]
    bpo4_time: Option<u64>,
    #[serde(
        default,
        deserialize_with = "quantity::de_opt_u64",
        skip_serializing_if = "Option::is_none"
    )]
    bpo5_time: Option<u64>,
    /// A number when it fits in 64 bits, else a decimal string (JSON numbers beyond
    /// that do not survive most parsers).
    #[serde(
        default,
        deserialize_with = "quantity::de_opt_u256",
        serialize_with = "ttd_out",
        skip_serializing_if = "Option::is_none"
    )]
    terminal_total_difficulty: Option<U256>,
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "Option::is_none"
    )]
    deposit_contract_address: Option<Address>,
    /// Keyed by lower-case fork name; keys for forks moat does not know are ignored.
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    blob_schedule: BTreeMap<String, BlobParams>,
}

fn ttd_out<S: Serializer>(v: &Option<U256>, s: S) -> Result<S::Ok, S::Error> {
    match v.map(u64::try_from) {
        Some(Ok(small)) => s.serialize_u64(small),
        Some(Err(_)) => s.serialize_str(&v.unwrap_or_default().to_string()),
        None => s.serialize_none(),
    }
}

impl From<ChainConfigJson> for ChainConfig {
    fn from(j: ChainConfigJson) -> ChainConfig {
        let blob_schedule = j
            .blob_schedule
            .into_iter()
            .filter_map(|(key, params)| {
                let fork = Fork::ALL.into_iter().find(|f| {
                    f.blob_schedule_key()
                        .is_some_and(|k| k.eq_ignore_ascii_case(&key))
                })?;
                Some((fork, params))
            })
            .collect();
        ChainConfig {
            chain_id: j.chain_id,
            homestead_block: j.homestead_block,
            dao_fork_block: j.dao_fork_block,
            dao_fork_support: j.dao_fork_support,
            eip150_block: j.eip150_block,
            eip155_block: j.eip155_block,
            eip158_block: j.eip158_block,
            byzantium_block: j.byzantium_block,
            constantinople_block: j.constantinople_block,
            petersburg_block: j.petersburg_block,
            istanbul_block: j.istanbul_block,
            muir_glacier_block: j.muir_glacier_block,
            berlin_block: j.berlin_block,
            london_block: j.london_block,
            arrow_glacier_block: j.arrow_glacier_block,
            gray_glacier_block: j.gray_glacier_block,
            terminal_total_difficulty: j.terminal_total_difficulty,
            merge_netsplit_block: j.merge_netsplit_block,
            paris_block: None,
            shanghai_time: j.shanghai_time,
            cancun_time: j.cancun_time,
            prague_time: j.prague_time,
            osaka_time: j.osaka_time,
            bpo1_time: j.bpo1_time,
            bpo2_time: j.bpo2_time,
            bpo3_time: j.bpo3_time,
            bpo4_time: j.bpo4_time,
            bpo5_time: j.bpo5_time,
            deposit_contract_address: j.deposit_contract_address,
            blob_schedule,
        }
    }
}

impl From<&ChainConfig> for ChainConfigJson {
    fn from(c: &ChainConfig) -> ChainConfigJson {
        ChainConfigJson {
            chain_id: c.chain_id,
            homestead_block: c.homestead_block,
            dao_fork_block: c.dao_fork_block,
            dao_fork_support: c.dao_fork_support,
            eip150_block: c.eip150_block,
            eip155_block: c.eip155_block,
            eip158_block: c.eip158_block,
            byzantium_block: c.byzantium_block,
            constantinople_block: c.constantinople_block,
            petersburg_block: c.petersburg_block,
            istanbul_block: c.istanbul_block,
            muir_glacier_block: c.muir_glacier_block,
            berlin_block: c.berlin_block,
            london_block: c.london_block,
            arrow_glacier_block: c.arrow_glacier_block,
            gray_glacier_block: c.gray_glacier_block,
            merge_netsplit_block: c.merge_netsplit_block,
            shanghai_time: c.shanghai_time,
            cancun_time: c.cancun_time,
            prague_time: c.prague_time,
            osaka_time: c.osaka_time,
            bpo1_time: c.bpo1_time,
            bpo2_time: c.bpo2_time,
            bpo3_time: c.bpo3_time,
            bpo4_time: c.bpo4_time,
            bpo5_time: c.bpo5_time,
            terminal_total_difficulty: c.terminal_total_difficulty,
            deposit_contract_address: c.deposit_contract_address,
            blob_schedule: c
                .blob_schedule
                .iter()
                .filter_map(|(fork, params)| Some((fork.blob_schedule_key()?.to_owned(), *params)))
                .collect(),
        }
    }
}

/// Written in geth's shape. `paris_block` has no genesis key and is left out.
impl Serialize for ChainConfig {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        ChainConfigJson::from(self).serialize(s)
    }
}

/// Read from geth's shape; the schedule is not checked here ([`Genesis::from_json`] and
/// [`ChainConfig::validate`] do that).
impl<'de> Deserialize<'de> for ChainConfig {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        ChainConfigJson::deserialize(d).map(ChainConfig::from)
    }
}
