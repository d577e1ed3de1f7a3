//! EIP-712 typed structured data: the digest `eth_signTypedData_v4` signs.
//!
//! `keccak256(0x19 ‖ 0x01 ‖ hashStruct(EIP712Domain, domain) ‖ hashStruct(primaryType,
//! message))`, with `hashStruct(T, v) = keccak256(typeHash(T) ‖ encodeData(T, v))`.
//! `typeHash` hashes `encodeType`: the type's own signature followed by those of the
//! struct types it refers to (through fields and arrays, at any depth), sorted by name.
//! Atomic values are one 32-byte word each; `string` and `bytes` are their keccak256;
//! a struct is its `hashStruct`; an array (`T[]` or `T[n]`) is the keccak256 of its
//! elements' encodings laid end to end.
//!
//! Every malformed input (an unknown type, a missing field, a number out of its type's
//! range, a cycle of types) is a [`TypedDataError`], never a panic.

use alloy_primitives::{Address, B256, I256, U256, keccak256};
use serde_json::{Map, Value};
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};

/// Why typed data cannot be hashed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum TypedDataError {
    #[error("typed data is not an object with types, primaryType, domain and message")]
    Shape,
    #[error("type {0} is not defined")]
    UnknownType(String),
    #[error("type {0}: field list is malformed")]
    BadFields(String),
    #[error("field {field} of {ty} is missing")]
    MissingField { ty: String, field: String },
    #[error("value {value} is not a valid {ty}")]
    BadValue { ty: String, value: String },
    #[error("array of {ty} has {found} elements, its type says {expected}")]
    ArrayLength {
        ty: String,
        expected: usize,
        found: usize,
    },
    #[error("types nest deeper than {0}")]
    TooDeep(usize),
    #[error("{0:?} is not a struct, field or type name")]
    BadName(String),
}

/// Deepest nesting of structs and arrays followed (a cycle of types ends here).
const MAX_DEPTH: usize = 64;

/// One struct type's fields: (name, type), in declared order.
type Fields = Vec<(String, String)>;

/// The parsed `types` table, with each struct's `typeHash` kept once computed (a message
/// may hold many instances of a type whose `encodeType` is long).
struct Types {
    structs: BTreeMap<String, Fields>,
    type_hashes: RefCell<BTreeMap<String, B256>>,
}

impl Types {
    fn parse(types: &Map<String, Value>) -> Result<Self, TypedDataError> {
        let mut out = BTreeMap::new();
        for (name, fields) in types {
            let Value::Array(list) = fields else {
                return Err(TypedDataError::BadFields(name.clone()));
            };
            // Names go into encodeType as written: one with a space, comma or bracket
            // could make two different type tables encode alike. A struct may not take an
            // atomic type's name either.
            if !identifier(name) || is_atomic(name) {
                return Err(TypedDataError::BadName(name.clone()));
            }
            let mut parsed = Vec::with_capacity(list.len());
            for f in list {
                match (f.get("name"), f.get("type")) {
                    (Some(Value::String(n)), Some(Value::String(t))) => {
                        if !identifier(n) {
                            return Err(TypedDataError::BadName(n.clone()));
                        }
                        if !type_name(t) {
                            return Err(TypedDataError::BadName(t.clone()));
                        }
                        parsed.push((n.clone(), t.clone()));
                    }
                    _ => return Err(TypedDataError::BadFields(name.clone())),
                }
            }
            out.insert(name.clone(), parsed);
        }
        Ok(Self {
            structs: out,
            type_hashes: RefCell::default(),
        })
    }

    fn fields(&self, ty: &str) -> Result<&Fields, TypedDataError> {
        self.structs
            .get(ty)
            .ok_or_else(|| TypedDataError::UnknownType(ty.to_string()))
    }

    /// The struct types `ty` refers to, itself included, collected into `found`.
    fn dependencies(
        &self,
        ty: &str,
        found: &mut BTreeSet<String>,
        depth: usize,
    ) -> Result<(), TypedDataError> {
        if depth > MAX_DEPTH {
            return Err(TypedDataError::TooDeep(MAX_DEPTH));
        }
        let base = element_base(ty);
        if found.contains(base) || !self.structs.contains_key(base) {
            return Ok(());
        }
        found.insert(base.to_string());
        for (_, field_ty) in self.fields(base)? {
            self.dependencies(field_ty, found, depth + 1)?;
        }
        Ok(())
    }

    /// `encodeType(ty)`: `ty`'s signature, then its dependencies' sorted by name.
    fn encode_type(&self, ty: &str) -> Result<String, TypedDataError> {
        let mut deps = BTreeSet::new();
        self.dependencies(ty, &mut deps, 0)?;
        deps.remove(ty);
        let mut out = String::new();
        for name in std::iter::once(ty).chain(deps.iter().map(String::as_str)) {
            let fields = self.fields(name)?;
            out.push_str(name);
            out.push('(');
            let sig: Vec<String> = fields.iter().map(|(n, t)| format!("{t} {n}")).collect();
            out.push_str(&sig.join(","));
            out.push(')');
        }
        Ok(out)
    }

    fn type_hash(&self, ty: &str) -> Result<B256, TypedDataError> {
        if let Some(hash) = self.type_hashes.borrow().get(ty) {
            return Ok(*hash);
        }
        let hash = keccak256(self.encode_type(ty)?.as_bytes());
        self.type_hashes.borrow_mut().insert(ty.to_string(), hash);
        Ok(hash)
    }

    /// `hashStruct(ty, value)`.
    fn hash_struct(&self, ty: &str, value: &Value, depth: usize) -> Result<B256, TypedDataError> {
        if depth > MAX_DEPTH {
            return Err(TypedDataError::TooDeep(MAX_DEPTH));
        }
        let fields = self.fields(ty)?;
        let Value::Object(obj) = value else {
            return Err(bad(ty, value));
        };
        let mut enc = Vec::with_capacity(32 * (fields.len() + 1));
        enc.extend_from_slice(self.type_hash(ty)?.as_slice());
        for (name, field_ty) in fields {
            let v = obj.get(name).ok_or_else(|| TypedDataError::MissingField {
                ty: ty.to_string(),
                field: name.clone(),
            })?;
            enc.extend_from_slice(self.encode_value(field_ty, v, depth + 1)?.as_slice());
        }
        Ok(keccak256(enc))
    }

    /// One field's 32-byte word.
    fn encode_value(&self, ty: &str, value: &Value, depth: usize) -> Result<B256, TypedDataError> {
        if depth > MAX_DEPTH {
            return Err(TypedDataError::TooDeep(MAX_DEPTH));
        }
        if let Some((inner, len)) = array_parts(ty) {
            let Value::Array(items) = value else {
                return Err(bad(ty, value));
            };
            if let Some(expected) = len
                && expected != items.len()
            {
                return Err(TypedDataError::ArrayLength {
                    ty: ty.to_string(),
                    expected,
                    found: items.len(),
                });
            }
            let mut enc = Vec::with_capacity(32 * items.len());
            for item in items {
                enc.extend_from_slice(self.encode_value(inner, item, depth + 1)?.as_slice());
            }
            return Ok(keccak256(enc));
        }
        if self.structs.contains_key(ty) {
            return self.hash_struct(ty, value, depth);
        }
        encode_atomic(ty, value)
    }
}

fn bad(ty: &str, value: &Value) -> TypedDataError {
    TypedDataError::BadValue {
        ty: ty.to_string(),
        value: value.to_string(),
    }
}

/// `T[]` → (T, None), `T[n]` → (T, Some(n)); `None` for a type that is not an array.
fn array_parts(ty: &str) -> Option<(&str, Option<usize>)> {
    let body = ty.strip_suffix(']')?;
    let open = body.rfind('[')?;
    let (inner, len) = (&body[..open], &body[open + 1..]);
    if len.is_empty() {
        return Some((inner, None));
    }
    len.parse().ok().map(|n| (inner, Some(n)))
}

/// The type an array's elements are at the bottom (`Person[][2]` → `Person`).
fn element_base(ty: &str) -> &str {
    ty.find('[').map_or(ty, |i| &ty[..i])
}

/// A Solidity identifier: a letter, `_` or `$`, then letters, digits, `_` or `$`.
fn identifier(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == '$')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$')
}

/// A field's type: an identifier followed by any number of `[]` / `[n]`.
fn type_name(ty: &str) -> bool {
    let base = element_base(ty);
    let mut rest = &ty[base.len()..];
    while let Some(inner) = rest.strip_prefix('[') {
        let Some(close) = inner.find(']') else {
            return false;
        };
        if !inner[..close].chars().all(|c| c.is_ascii_digit()) {
            return false;
        }
        rest = &inner[close + 1..];
    }
    identifier(base) && rest.is_empty()
}

/// Whether `ty` names an atomic type (`encode_atomic` takes it).
fn is_atomic(ty: &str) -> bool {
    match ty {
        "string" | "bytes" | "bool" | "address" => true,
        _ => {
            if let Some(rest) = ty.strip_prefix("uint").or_else(|| ty.strip_prefix("int")) {
                width(rest).is_some()
            } else if let Some(rest) = ty.strip_prefix("bytes") {
                size(rest, 1..=32).is_some()
            } else {
                false
            }
        }
    }
}

/// Hex bytes of a `0x…` string (the prefix is required, as in geth and ethers).
fn hex_bytes(ty: &str, value: &Value) -> Result<Vec<u8>, TypedDataError> {
    let Value::String(s) = value else {
        return Err(bad(ty, value));
    };
    let digits = s.strip_prefix("0x").ok_or_else(|| bad(ty, value))?;
    alloy_primitives::hex::decode(digits).map_err(|_| bad(ty, value))
}

/// A number given as a JSON number, a decimal string or a `0x` hex string (a leading `-`
/// for a negative one). An empty string, a bare sign or prefix, or any character that is
/// not a digit of the radix is refused (ruint alone would read `""` as zero and skip `_`).
fn number(ty: &str, value: &Value) -> Result<(bool, U256), TypedDataError> {
    let text = match value {
        Value::Number(n) => n.to_string(),
        Value::String(s) => s.trim().to_string(),
        _ => return Err(bad(ty, value)),
    };
    let (negative, digits) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.as_str()),
    };
    let (radix, digits) = match digits
        .strip_prefix("0x")
        .or_else(|| digits.strip_prefix("0X"))
    {
        Some(hex) => (16, hex),
        None => (10, digits),
    };
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return Err(bad(ty, value));
    }
    let magnitude = U256::from_str_radix(digits, u64::from(radix)).map_err(|_| bad(ty, value))?;
    Ok((negative && !magnitude.is_zero(), magnitude))
}

/// The size `N` of a sized type's name (`uint` + `rest`, `bytes` + `rest`) when `rest` is
/// written as Solidity writes it (no sign, no leading zero) and lies in `range`.
fn size(rest: &str, range: std::ops::RangeInclusive<usize>) -> Option<usize> {
    let n: usize = rest.parse().ok()?;
    (range.contains(&n) && n.to_string() == rest).then_some(n)
}

/// The bit width of `uintN` / `intN` (`uint` is 256); `None` for a malformed width.
fn width(rest: &str) -> Option<usize> {
    if rest.is_empty() {
        return Some(256);
    }
    size(rest, 8..=256).filter(|bits| bits.is_multiple_of(8))
}

fn encode_atomic(ty: &str, value: &Value) -> Result<B256, TypedDataError> {
    match ty {
        "string" => match value {
            Value::String(s) => Ok(keccak256(s.as_bytes())),
            _ => Err(bad(ty, value)),
        },
        "bytes" => Ok(keccak256(hex_bytes(ty, value)?)),
        "bool" => {
            // A JSON bool, or the number 0 or 1. Strings are refused: ethers takes any
            // non-empty string (even "false") as true, other signers parse it.
            let b = match value {
                Value::Bool(b) => *b,
                Value::Number(_) => match number(ty, value)? {
                    (false, n) if n <= U256::from(1) => n == U256::from(1),
                    _ => return Err(bad(ty, value)),
                },
                _ => return Err(bad(ty, value)),
            };
            Ok(B256::from(U256::from(u8::from(b))))
        }
        "address" => {
            let Value::String(s) = value else {
                return Err(bad(ty, value));
            };
            let a: Address = s.parse().map_err(|_| bad(ty, value))?;
            Ok(a.into_word())
        }
        _ => {
            if let Some(rest) = ty.strip_prefix("uint") {
                let bits = width(rest).ok_or_else(|| TypedDataError::UnknownType(ty.into()))?;
                let (neg, n) = number(ty, value)?;
                if neg || (bits < 256 && n >> bits != U256::ZERO) {
                    return Err(bad(ty, value));
                }
                return Ok(B256::from(n));
            }
            if let Some(rest) = ty.strip_prefix("int") {
                let bits = width(rest).ok_or_else(|| TypedDataError::UnknownType(ty.into()))?;
                let (neg, n) = number(ty, value)?;
                // |min| = 2^(bits-1); max = 2^(bits-1) - 1.
                let limit = U256::from(1) << (bits - 1);
                if (neg && n > limit) || (!neg && n >= limit) {
                    return Err(bad(ty, value));
                }
                let v = I256::from_raw(n);
                let v = if neg { v.wrapping_neg() } else { v };
                return Ok(B256::from(v.into_raw()));
            }
            if let Some(rest) = ty.strip_prefix("bytes") {
                let n = size(rest, 1..=32).ok_or_else(|| TypedDataError::UnknownType(ty.into()))?;
                // Exactly N bytes, as geth, ethers and viem require.
                let b = hex_bytes(ty, value)?;
                if b.len() != n {
                    return Err(bad(ty, value));
                }
                let mut word = [0u8; 32];
                word[..b.len()].copy_from_slice(&b);
                return Ok(B256::from(word));
            }
            Err(TypedDataError::UnknownType(ty.to_string()))
        }
    }
}

/// The EIP712Domain fields in the EIP's order, for typed data whose `types` leave the
/// domain's type out: the fields the domain has.
fn implied_domain_type(domain: &Map<String, Value>) -> Fields {
    [
        ("name", "string"),
        ("version", "string"),
        ("chainId", "uint256"),
        ("verifyingContract", "address"),
        ("salt", "bytes32"),
    ]
    .into_iter()
    .filter(|(n, _)| domain.contains_key(*n))
    .map(|(n, t)| (n.to_string(), t.to_string()))
    .collect()
}

/// The digest EIP-712 signs for `typed` (the JSON of `eth_signTypedData_v4`).
pub(crate) fn signing_hash(typed: &Value) -> Result<B256, TypedDataError> {
    let (Some(Value::Object(types)), Some(Value::String(primary))) =
        (typed.get("types"), typed.get("primaryType"))
    else {
        return Err(TypedDataError::Shape);
    };
    let empty = Value::Object(Map::new());
    let domain = typed.get("domain").unwrap_or(&empty);
    let Value::Object(domain_fields) = domain else {
        return Err(TypedDataError::Shape);
    };
    let mut types = Types::parse(types)?;
    types
        .structs
        .entry("EIP712Domain".to_string())
        .or_insert_with(|| implied_domain_type(domain_fields));
    let mut out = Vec::with_capacity(66);
    out.extend_from_slice(&[0x19, 0x01]);
    out.extend_from_slice(types.hash_struct("EIP712Domain", domain, 0)?.as_slice());
    if primary != "EIP712Domain" {
        let message = typed.get("message").ok_or(TypedDataError::Shape)?;
        out.extend_from_slice(types.hash_struct(primary, message, 0)?.as_slice());
    }
    Ok(keccak256(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The EIP's example (eip-712.md's Example.sol and Example.js).
    fn mail() -> Value {
        json!({
            "types": {
                "EIP712Domain": [
                    {"name": "name", "type": "string"},
                    {"name": "version", "type": "string"},
                    {"name": "chainId", "type": "uint256"},
                    {"name": "verifyingContract", "type": "address"}
                ],
                "Person": [
                    {"name": "name", "type": "string"},
                    {"name": "wallet", "type": "address"}
                ],
                "Mail": [
                    {"name": "from", "type": "Person"},
                    {"name": "to", "type": "Person"},
                    {"name": "contents", "type": "string"}
                ]
            },
            "primaryType": "Mail",
            "domain": {
                "name": "Ether Mail",
                "version": "1",
                "chainId": 1,
                "verifyingContract": "0xCcCCccccCCCCcCCCCCCcCcCccCcCCCcCcccccccC"
            },
            "message": {
                "from": {"name": "Cow", "wallet": "0xCD2a3d9F938E13CD947Ec05AbC7FE734Df8DD826"},
                "to": {"name": "Bob", "wallet": "0xbBbBBBBbbBBBbbbBbbBbbbbBBbBbbbbBbBbbBBbB"},
                "contents": "Hello, Bob!"
            }
        })
    }

    #[test]
    fn the_eips_mail_example_hashes_as_published() {
        let t = mail();
        let types = Types::parse(t["types"].as_object().unwrap()).unwrap();
        assert_eq!(
            types.encode_type("Mail").unwrap(),
            "Mail(Person from,Person to,string contents)Person(string name,address wallet)"
        );
        assert_eq!(
            types.type_hash("Mail").unwrap(),
            "0xa0cedeb2dc280ba39b857546d74f5549c3a1d7bdc2dd96bf881f76108e23dac2"
                .parse::<B256>()
                .unwrap()
        );
        assert_eq!(
            types.hash_struct("EIP712Domain", &t["domain"], 0).unwrap(),
            "0xf2cee375fa42b42143804025fc449deafd50cc031ca257e0b194a650a912090f"
                .parse::<B256>()
                .unwrap()
        );
        assert_eq!(
            types.hash_struct("Mail", &t["message"], 0).unwrap(),
            "0xc52c0ee5d84264471806290a3f2c4cecfc5490626bf912d01f240d7a274b371e"
                .parse::<B256>()
                .unwrap()
        );
        assert_eq!(
            signing_hash(&t).unwrap(),
            "0xbe609aee343fb3c4b28e1df9e632fca64fcfaede20f02e86244efddf30957bd2"
                .parse::<B256>()
                .unwrap()
        );
    }

    #[test]
    fn the_mail_example_signed_by_cow_gives_the_published_signature() {
        let key = moat_crypto::secp::Signer::from_bytes(&keccak256(b"cow")).unwrap();
        assert_eq!(
            key.address(),
            "0xCD2a3d9F938E13CD947Ec05AbC7FE734Df8DD826"
                .parse::<Address>()
                .unwrap()
        );
        let sig = key.sign(&signing_hash(&mail()).unwrap());
        assert!(sig.y_parity, "v = 28");
        assert_eq!(
            B256::from(sig.r),
            "0x4355c47d63924e8a72e509b65029052eb6c299d53a04e167c5775fd466751c9d"
                .parse::<B256>()
                .unwrap()
        );
        assert_eq!(
            B256::from(sig.s),
            "0x07299936d304c153f6443dfa05f40ff007d72911b6f72307f996231605b91562"
                .parse::<B256>()
                .unwrap()
        );
    }

    #[test]
    fn arrays_of_structs_and_dependencies_are_encoded_in_order() {
        // The v4 extension: arrays of structs, a dependency reached only through an
        // array, sorted after the primary type.
        let mut t = mail();
        t["types"]["Mail"] = json!([
            {"name": "from", "type": "Person"},
            {"name": "to", "type": "Person[]"},
            {"name": "contents", "type": "string"},
            {"name": "attachments", "type": "Attachment[2]"}
        ]);
        t["types"]["Attachment"] = json!([{"name": "data", "type": "bytes"}]);
        t["message"]["to"] = json!([t["message"]["to"].clone()]);
        t["message"]["attachments"] = json!([{"data": "0x01"}, {"data": "0x"}]);
        let types = Types::parse(t["types"].as_object().unwrap()).unwrap();
        assert_eq!(
            types.encode_type("Mail").unwrap(),
            "Mail(Person from,Person[] to,string contents,Attachment[2] attachments)Attachment(bytes data)Person(string name,address wallet)"
        );
        let attachment = |d: &[u8]| {
            let mut e = types.type_hash("Attachment").unwrap().to_vec();
            e.extend_from_slice(keccak256(d).as_slice());
            keccak256(e)
        };
        let mut arr = attachment(&[1]).to_vec();
        arr.extend_from_slice(attachment(&[]).as_slice());
        assert_eq!(
            types
                .encode_value("Attachment[2]", &t["message"]["attachments"], 0)
                .unwrap(),
            keccak256(arr)
        );
        assert!(signing_hash(&t).is_ok());
        // A fixed-length array of the wrong length is refused.
        t["message"]["attachments"] = json!([{"data": "0x01"}]);
        assert!(matches!(
            signing_hash(&t),
            Err(TypedDataError::ArrayLength { .. })
        ));
    }

    #[test]
    fn atomic_values_are_checked_against_their_types() {
        let word = |ty: &str, v: Value| encode_atomic(ty, &v);
        assert_eq!(
            word("int8", json!(-1)).unwrap(),
            B256::from(U256::MAX),
            "two's complement"
        );
        assert_eq!(
            word("int8", json!("-128")).unwrap(),
            B256::from(I256::try_from(-128).unwrap().into_raw())
        );
        assert!(word("int8", json!(128)).is_err());
        assert!(word("uint8", json!(256)).is_err());
        assert!(word("uint8", json!(-1)).is_err());
        assert_eq!(
            word("uint256", json!("0x10")).unwrap(),
            B256::from(U256::from(16))
        );
        assert_eq!(
            word("bytes4", json!("0x01020304")).unwrap().as_slice()[..5],
            [1, 2, 3, 4, 0]
        );
        assert!(word("bytes2", json!("0x010203")).is_err());
        // bytesN takes exactly N bytes (geth, ethers and viem refuse a short value).
        assert!(word("bytes4", json!("0x01")).is_err());
        assert!(word("bytes04", json!("0x01020304")).is_err());
        assert!(word("bytes33", json!("0x01")).is_err());
        assert!(word("uint7", json!(1)).is_err());
        assert!(word("address", json!("0x12")).is_err());
        assert!(word("bool", json!(true)).unwrap() == B256::from(U256::from(1)));
        assert!(word("Nope", json!(1)).is_err());
    }

    #[test]
    fn numbers_bytes_and_bools_in_forms_that_other_signers_read_otherwise_are_refused() {
        let word = |ty: &str, v: Value| encode_atomic(ty, &v);
        // Strings ruint alone would read as zero or skip characters of.
        for v in ["", "-", "0x", "-0x", "1_000", "+1", "0x1g", "1.5", "1e3"] {
            assert!(word("uint256", json!(v)).is_err(), "{v:?}");
            assert!(word("int256", json!(v)).is_err(), "{v:?}");
        }
        assert!(word("uint256", json!(1.5)).is_err());
        assert_eq!(
            word("int16", json!("-0x10")).unwrap(),
            B256::from(I256::try_from(-16).unwrap().into_raw())
        );
        assert_eq!(word("int8", json!("-0")).unwrap(), B256::ZERO);
        // Widths as Solidity writes them.
        for ty in ["uint08", "uint0", "uint264", "int+8", "uint12"] {
            assert!(
                matches!(word(ty, json!(1)), Err(TypedDataError::UnknownType(_))),
                "{ty}"
            );
        }
        // Bytes need their 0x (geth and ethers refuse bare hex).
        assert!(word("bytes", json!("0102")).is_err());
        assert!(word("bytes1", json!("01")).is_err());
        assert!(word("bytes", json!("0x012")).is_err());
        // bool: a JSON bool or 0 / 1; a string is refused, since ethers signs any
        // non-empty string (even "false") as true.
        assert_eq!(word("bool", json!(false)).unwrap(), B256::ZERO);
        assert_eq!(word("bool", json!(1)).unwrap(), B256::with_last_byte(1));
        for v in [
            json!("false"),
            json!("true"),
            json!(2),
            json!(-1),
            json!(null),
        ] {
            assert!(word("bool", v.clone()).is_err(), "{v}");
        }
        // Extremes of int256 and uint256.
        assert_eq!(
            word("int256", json!(I256::MIN.to_string())).unwrap(),
            B256::from(I256::MIN.into_raw())
        );
        assert!(
            word(
                "int256",
                json!(format!("-{}", U256::from(1) << 255 | U256::from(1)))
            )
            .is_err()
        );
        assert_eq!(
            word("uint256", json!(U256::MAX.to_string())).unwrap(),
            B256::from(U256::MAX)
        );
        assert!(word("uint256", json!(format!("{}0", U256::MAX))).is_err());
    }

    /// Vectors computed with ethers 6.17.0's `TypedDataEncoder` (the pinned dapp-flow
    /// install; tooling/dapp-flow/eip712-vectors.mjs writes them): arrays of structs,
    /// fixed-size, nested and atomic arrays, bytes and bytesN, strings, bools, addresses,
    /// int/uint of several widths as JSON numbers, decimal, hex and negative strings,
    /// structs three deep, and domains with a salt, with a hex chainId, and with only a
    /// verifyingContract. Each is taken as written and as ethers' `JsonRpcSigner` sends
    /// it (`TypedDataEncoder.getPayload`: the domain type spelled out, numbers decimal).
    #[test]
    fn ethers_vectors_hash_as_ethers_does() {
        let vectors: Vec<Value> =
            serde_json::from_str(include_str!("../tests/data/eip712_ethers.json")).unwrap();
        assert_eq!(vectors.len(), 3);
        let hash = |v: &Value| v.as_str().unwrap().parse::<B256>().unwrap();
        for v in &vectors {
            let name = &v["name"];
            let typed = &v["typed"];
            let primary = typed["primaryType"].as_str().unwrap();
            let mut types = Types::parse(typed["types"].as_object().unwrap()).unwrap();
            assert_eq!(
                types.encode_type(primary).unwrap(),
                v["encodeType"],
                "{name}"
            );
            assert_eq!(
                types.hash_struct(primary, &typed["message"], 0).unwrap(),
                hash(&v["struct"]),
                "{name}"
            );
            types.structs.insert(
                "EIP712Domain".into(),
                implied_domain_type(typed["domain"].as_object().unwrap()),
            );
            assert_eq!(
                types
                    .hash_struct("EIP712Domain", &typed["domain"], 0)
                    .unwrap(),
                hash(&v["domain"]),
                "{name}"
            );
            assert_eq!(signing_hash(typed).unwrap(), hash(&v["digest"]), "{name}");
            assert_eq!(
                signing_hash(&v["payload"]).unwrap(),
                hash(&v["digest"]),
                "{name}"
            );
        }
    }

    #[test]
    fn malformed_typed_data_is_an_error() {
        assert_eq!(signing_hash(&json!(1)), Err(TypedDataError::Shape));
        let mut t = mail();
        t["message"].as_object_mut().unwrap().remove("contents");
        assert!(matches!(
            signing_hash(&t),
            Err(TypedDataError::MissingField { .. })
        ));
        // A type that contains itself through an array ends at the depth limit.
        let cyclic = json!({
            "types": {"Node": [{"name": "next", "type": "Node[]"}]},
            "primaryType": "Node",
            "domain": {},
            "message": {"next": [{"next": []}]}
        });
        assert!(signing_hash(&cyclic).is_ok());
        let mut deep = json!({"next": []});
        for _ in 0..100 {
            deep = json!({"next": [deep]});
        }
        let mut cyclic = cyclic;
        cyclic["message"] = deep;
        assert_eq!(
            signing_hash(&cyclic),
            Err(TypedDataError::TooDeep(MAX_DEPTH))
        );
    }

    #[test]
    fn names_that_could_make_two_type_tables_encode_alike_are_refused() {
        let with = |types: Value| {
            let mut t = mail();
            for (name, fields) in types.as_object().unwrap() {
                t["types"][name] = fields.clone();
            }
            signing_hash(&t)
        };
        // A field name or type with a space, comma or parenthesis; a struct named like an
        // atomic type or with a bracket; an empty name.
        for types in [
            json!({"Mail": [{"name": "from", "type": "Person"}, {"name": "to", "type": "Person"}, {"name": "contents,string x", "type": "string"}]}),
            json!({"Mail": [{"name": "from", "type": "Person"}, {"name": "to", "type": "Person)Person(string name"}, {"name": "contents", "type": "string"}]}),
            json!({"Mail": [{"name": "", "type": "Person"}]}),
            json!({"uint256": [{"name": "a", "type": "string"}]}),
            json!({"bytes32": [{"name": "a", "type": "string"}]}),
            json!({"Person[]": [{"name": "a", "type": "string"}]}),
            json!({"Mail": [{"name": "from", "type": "Person[x]"}]}),
            json!({"Mail": [{"name": "from", "type": "Person[2"}]}),
        ] {
            assert!(
                matches!(with(types.clone()), Err(TypedDataError::BadName(_))),
                "{types}"
            );
        }
        // What real types look like passes.
        assert!(type_name("Person[][3]") && type_name("uint256") && type_name("$_x9[12]"));
        assert!(is_atomic("int") && is_atomic("bytes1") && !is_atomic("bytes0"));
        assert!(!is_atomic("Person") && !is_atomic("uint7"));
    }

    #[test]
    fn each_type_hash_is_computed_once_however_many_instances() {
        // Q's encodeType lists 500 types (through an array that is empty in every
        // instance); 2,000 instances of Q cost one encodeType of Q, not 2,000.
        let mut types = serde_json::Map::new();
        let mut big = Vec::new();
        for i in 0..500 {
            types.insert(format!("T{i}"), json!([{"name": "x", "type": "uint8"}]));
            big.push(json!({"name": format!("f{i}"), "type": format!("T{i}")}));
        }
        types.insert("Big".into(), Value::Array(big));
        types.insert("Q".into(), json!([{"name": "big", "type": "Big[]"}]));
        types.insert("P".into(), json!([{"name": "a", "type": "Q[]"}]));
        let message = json!({"a": vec![json!({"big": []}); 2000]});
        let types = Types::parse(&types).unwrap();
        let hash = types.hash_struct("P", &message, 0).unwrap();
        let cached: Vec<String> = types.type_hashes.borrow().keys().cloned().collect();
        assert_eq!(cached, ["P", "Q"]);
        assert_eq!(
            types.type_hashes.borrow()["Q"],
            keccak256(types.encode_type("Q").unwrap())
        );
        // The same hash as with nothing cached.
        let fresh = Types::parse(&serde_json::Map::from_iter(types.structs.iter().map(
            |(name, fields)| {
                let list: Vec<Value> = fields
                    .iter()
                    .map(|(n, t)| json!({"name": n, "type": t}))
                    .collect();
                (name.clone(), Value::Array(list))
            },
        )))
        .unwrap();
        let mut enc = fresh.type_hash("Q").unwrap().to_vec();
        enc.extend_from_slice(keccak256([]).as_slice());
        let q = keccak256(enc);
        let items: Vec<u8> = std::iter::repeat_n(q.0, 2000).flatten().collect();
        let mut enc = fresh.type_hash("P").unwrap().to_vec();
        enc.extend_from_slice(keccak256(items).as_slice());
        assert_eq!(hash, keccak256(enc));
    }

    #[test]
    fn a_missing_domain_type_is_implied_from_the_domain() {
        let mut t = mail();
        let full = signing_hash(&t).unwrap();
        t["types"].as_object_mut().unwrap().remove("EIP712Domain");
        assert_eq!(signing_hash(&t).unwrap(), full);
    }
}
