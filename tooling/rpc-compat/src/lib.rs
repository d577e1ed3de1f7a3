//! moat-rpc-compat: the rpc-compat suite of ethereum/execution-apis run the way hive's
//! `simulators/ethereum/rpc-compat` runs it, without docker.
//!
//! ```text
//!  tests/ ─▶ temp datadir: init genesis.json, import chain.rlp ─▶ start the node on
//!  loopback (--nodiscover) ─▶ headfcu.json to the engine API (JWT) ─▶ each `.io` file:
//!  send every `>>` line over HTTP, compare the reply with the next `<<` line
//! ```
//!
//! This library holds what needs no node: the `.io` file reader ([`load_test`]) and the
//! comparison ([`compare`]), both as hive has them.

use serde_json::Value;

/// One `.io` file: its messages in order and whether it is a "speconly" test (the
/// recorded response is one valid example, not the answer).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RpcTest {
    /// The test's name as given to [`load_test`] (the runner passes `<method dir>/<file stem>`).
    pub name: String,
    /// The `//` header lines before the first message, `// ` stripped, each ending in `
    /// `.
    pub comment: String,
    /// A header line starts with `speconly:`; [`compare`] then takes any successful result of
    /// the example's JSON type.
    pub speconly: bool,
    /// (is a request, JSON text).
    pub messages: Vec<(bool, String)>,
}

/// Reads a `.io` file as hive's `loadTestFile`: `//` comment lines before the first
/// message form the description (`speconly:` marks the test), `>>` and `<<` lines are
/// requests and expected responses, blank lines are skipped, anything else is an error.
pub fn load_test(name: &str, text: &str) -> Result<RpcTest, String> {
    let mut test = RpcTest {
        name: name.to_string(),
        comment: String::new(),
        speconly: false,
        messages: Vec::new(),
    };
    let mut in_header = true;
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        if let Some(comment) = line.strip_prefix("//") {
            if !in_header {
                continue;
            }
            let text = comment.strip_prefix(' ').unwrap_or(comment);
            test.comment.push_str(text);
            test.comment.push('\n');
            if text.starts_with("speconly:") {
                test.speconly = true;
            }
        } else if line.starts_with(">>") || line.starts_with("<<") {
            in_header = false;
            let data = line[2..].trim();
            serde_json::from_str::<Value>(data)
                .map_err(|e| format!("invalid JSON in line {line:?}: {e}"))?;
            test.messages
                .push((line.starts_with(">>"), data.to_string()));
        } else {
            return Err(format!("invalid test line: {line:?}"));
        }
    }
    Ok(test)
}

/// Removes `message` from every `error` object present in both trees, walking the
/// expected tree (hive's `redactErrorMessages`): the wording of errors is the client's,
/// their code and shape are not. Does not descend into error objects.
pub fn redact_error_messages(resp: &mut Value, expected: &mut Value) -> bool {
    match (resp, expected) {
        (Value::Object(r), Value::Object(e)) => {
            let mut redacted = false;
            let keys: Vec<String> = e.keys().cloned().collect();
            for k in keys {
                let (Some(rc), Some(ec)) = (r.get_mut(&k), e.get_mut(&k)) else {
                    continue;
                };
                if k == "error" {
                    if let (Value::Object(ro), Value::Object(eo)) = (rc, ec)
                        && ro.contains_key("message")
                        && eo.contains_key("message")
                    {
                        ro.remove("message");
                        eo.remove("message");
                        redacted = true;
                    }
                    continue;
                }
                redacted |= redact_error_messages(rc, ec);
            }
            redacted
        }
        (Value::Array(r), Value::Array(e)) => {
            let mut redacted = false;
            for (rc, ec) in r.iter_mut().zip(e.iter_mut()) {
                redacted |= redact_error_messages(rc, ec);
            }
            redacted
        }
        _ => false,
    }
}

/// Whether two numbers are equal as hive's `numbersEqual` judges: as floats.
fn numbers_equal(a: &serde_json::Number, b: &serde_json::Number) -> bool {
    match (a.as_f64(), b.as_f64()) {
        (Some(x), Some(y)) => x == y,
        _ => a == b,
    }
}

/// The differences between `resp` and `expected` as jsondiff's full match sees them
/// (same keys, same array lengths, equal leaves; numbers as floats), each a path with
/// `-- client ++ test` values.
pub fn diff(resp: &Value, expected: &Value, path: &str, out: &mut Vec<String>) {
    match (resp, expected) {
        (Value::Object(r), Value::Object(e)) => {
            for (k, ev) in e {
                let p = format!("{path}.{k}");
                match r.get(k) {
                    Some(rv) => diff(rv, ev, &p, out),
                    None => out.push(format!("{p}: missing (++ {ev})")),
                }
            }
            for (k, rv) in r {
                if !e.contains_key(k) {
                    out.push(format!("{path}.{k}: unexpected (-- {rv})"));
                }
            }
        }
        (Value::Array(r), Value::Array(e)) => {
            if r.len() != e.len() {
                out.push(format!(
                    "{path}: {} elements, expected {}",
                    r.len(),
                    e.len()
                ));
            }
            for (i, (rv, ev)) in r.iter().zip(e).enumerate() {
                diff(rv, ev, &format!("{path}[{i}]"), out);
            }
        }
        (Value::Number(a), Value::Number(b)) if numbers_equal(a, b) => {}
        (a, b) if a == b => {}
        (a, b) => out.push(format!("{path}: -- {a} ++ {b}")),
    }
}

/// Compares a reply with the expected one as hive does: error messages present on both
/// sides are left out, then the two must match fully. For a speconly test hive checks a
/// successful result against the method's OpenRPC schema; this runner, without the
/// generated spec, accepts any successful result of the example's JSON type.
pub fn compare(resp: &str, expected: &str, speconly: bool) -> Result<(), String> {
    let mut resp: Value =
        serde_json::from_str(resp.trim()).map_err(|e| format!("invalid JSON response: {e}"))?;
    let mut expected: Value =
        serde_json::from_str(expected).map_err(|e| format!("invalid expected JSON: {e}"))?;
    if speconly && resp.get("error").is_none() {
        let (r, e) = (&resp["result"], &expected["result"]);
        let kind = |v: &Value| match v {
            Value::Null => "null",
            Value::Bool(_) => "bool",
            Value::Number(_) => "number",
            Value::String(_) => "string",
            Value::Array(_) => "array",
            Value::Object(_) => "object",
        };
        if resp.get("result").is_none() || kind(r) != kind(e) {
            return Err(format!(
                "speconly: result is {}, the example is {}",
                kind(r),
                kind(e)
            ));
        }
        return Ok(());
    }
    redact_error_messages(&mut resp, &mut expected);
    let mut out = Vec::new();
    diff(&resp, &expected, "", &mut out);
    if out.is_empty() {
        Ok(())
    } else {
        Err(out.join("\n"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_compare_as_floats_and_keys_in_any_order() {
        assert_eq!(
            compare(
                r#"{"id":1,"result":{"a":1.0,"b":[1,2]}}"#,
                r#"{"result":{"b":[1,2],"a":1},"id":1}"#,
                false
            ),
            Ok(())
        );
    }

    #[test]
    fn missing_extra_and_changed_fields_fail() {
        let e = r#"{"id":1,"result":{"a":"0x1","b":"0x2"}}"#;
        let err = compare(r#"{"id":1,"result":{"a":"0x1"}}"#, e, false).unwrap_err();
        assert!(err.contains(".result.b: missing"), "{err}");
        let err =
            compare(r#"{"id":1,"result":{"a":"0x1","b":"0x2","c":0}}"#, e, false).unwrap_err();
        assert!(err.contains(".result.c: unexpected"), "{err}");
        let err = compare(r#"{"id":1,"result":{"a":"0x1","b":"0x3"}}"#, e, false).unwrap_err();
        assert!(err.contains(".result.b"), "{err}");
        let err = compare(
            r#"{"id":1,"result":[1]}"#,
            r#"{"id":1,"result":[1,2]}"#,
            false,
        )
        .unwrap_err();
        assert!(err.contains("1 elements, expected 2"), "{err}");
    }

    #[test]
    fn error_messages_are_not_compared_but_codes_are() {
        let expected = r#"{"id":1,"error":{"code":-32000,"message":"nonce too low"}}"#;
        assert_eq!(
            compare(
                r#"{"id":1,"error":{"code":-32000,"message":"nonce is too low"}}"#,
                expected,
                false
            ),
            Ok(())
        );
        assert!(
            compare(
                r#"{"id":1,"error":{"code":-32602,"message":"nonce too low"}}"#,
                expected,
                false
            )
            .is_err()
        );
        // Nested errors (eth_simulateV1's calls[].error) too.
        assert_eq!(
            compare(
                r#"{"id":1,"result":[{"calls":[{"error":{"code":3,"message":"x"}}]}]}"#,
                r#"{"id":1,"result":[{"calls":[{"error":{"code":3,"message":"y"}}]}]}"#,
                false
            ),
            Ok(())
        );
        // An error where a result is expected fails.
        assert!(
            compare(
                r#"{"id":1,"error":{"code":1,"message":"m"}}"#,
                r#"{"id":1,"result":"0x1"}"#,
                false
            )
            .is_err()
        );
    }

    #[test]
    fn speconly_takes_any_result_of_the_example_type() {
        assert_eq!(
            compare(
                r#"{"id":1,"result":{"x":1}}"#,
                r#"{"id":1,"result":{"y":2}}"#,
                true
            ),
            Ok(())
        );
        assert!(
            compare(
                r#"{"id":1,"result":"0x1"}"#,
                r#"{"id":1,"result":{"y":2}}"#,
                true
            )
            .is_err()
        );
        assert!(
            compare(
                r#"{"id":1,"error":{"code":-32601,"message":"no"}}"#,
                r#"{"id":1,"result":{"y":2}}"#,
                true
            )
            .is_err()
        );
    }

    #[test]
    fn io_files_load_as_hive_loads_them() {
        let text = "// Gets a block.\n// speconly: shape only\n\n>> {\"id\":1}\n<< {\"id\":1,\"result\":null}\n// later comment\n";
        let t = load_test("eth_x/y", text).unwrap();
        assert!(t.speconly);
        assert_eq!(t.comment, "Gets a block.\nspeconly: shape only\n");
        assert_eq!(t.messages.len(), 2);
        assert!(t.messages[0].0 && !t.messages[1].0);
        assert!(load_test("bad", "what\n").is_err());
        assert!(load_test("bad", ">> {not json\n").is_err());
    }
}
