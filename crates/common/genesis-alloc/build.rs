//! Fetches the pinned `@ethereumjs/genesis` tarball from the npm registry (or takes it from
//! `MOAT_GENESIS_PACKAGE`), checks its SHA-512, and writes each network's allocation into
//! `OUT_DIR` as a geth-style `alloc` JSON object.

use serde_json::{Map, Value};
use sha2::{Digest, Sha512};
use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

const PACKAGE: &str = "@ethereumjs/genesis@10.1.3";
const TARBALL: &str = "ethereumjs-genesis-10.1.3.tgz";
const SHA512: &str = "94432f6042088470189894a59c685712fc9aba1f6568f1f259e620cbf52c2455\
                      5a16f13310381f2ee88468f07a7748764015bf36596767e8b08746f4b717c227";
const NETWORKS: [&str; 3] = ["mainnet", "sepolia", "hoodi"];

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=MOAT_GENESIS_PACKAGE");
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let tarball = locate_tarball(&out);
    let unpacked = out.join("package-src");
    let _ = fs::remove_dir_all(&unpacked);
    fs::create_dir_all(&unpacked).unwrap_or_else(|e| fail(&format!("{e}")));
    let members: Vec<String> = NETWORKS
        .iter()
        .map(|n| format!("package/src/genesisStates/{n}.ts"))
        .collect();
    run(Command::new("tar")
        .arg("-xzf")
        .arg(&tarball)
        .arg("-C")
        .arg(&unpacked)
        .args(&members));
    for (net, member) in NETWORKS.iter().zip(&members) {
        let source = fs::read_to_string(unpacked.join(member))
            .unwrap_or_else(|e| fail(&format!("reading {member}: {e}")));
        let alloc = to_geth_alloc(&source).unwrap_or_else(|e| fail(&format!("{member}: {e}")));
        fs::write(out.join(format!("{net}.json")), alloc)
            .unwrap_or_else(|e| fail(&format!("writing {net}.json: {e}")));
    }
}

fn fail(message: &str) -> ! {
    eprintln!(
        "moat-genesis-alloc: {message}\n\
         The built-in genesis allocations come from the npm package {PACKAGE}. Install npm \
         (the build runs `npm pack`), or download {TARBALL} and set MOAT_GENESIS_PACKAGE to \
         its absolute path."
    );
    std::process::exit(1)
}

fn run(cmd: &mut Command) {
    match cmd.status() {
        Ok(s) if s.success() => {}
        Ok(s) => fail(&format!("{cmd:?} exited with {s}")),
        Err(e) => fail(&format!("cannot run {cmd:?}: {e}")),
    }
}

/// The tarball: the one named by `MOAT_GENESIS_PACKAGE`, else a copy cached under the
/// target directory, else a fresh `npm pack` into that cache. Its hash is checked in
/// every case.
fn locate_tarball(out: &Path) -> PathBuf {
    if let Some(path) = env::var_os("MOAT_GENESIS_PACKAGE") {
        let path = PathBuf::from(path);
        check_hash(&path);
        return path;
    }
    // OUT_DIR is <target>/<profile>/build/<crate>-<hash>/out: cache beside the profiles so
    // debug, release and check builds share one download.
    let cache = out
        .ancestors()
        .nth(4)
        .map(|t| t.join("npm-genesis"))
        .unwrap_or_else(|| out.join("npm-genesis"));
    fs::create_dir_all(&cache).unwrap_or_else(|e| fail(&format!("{}: {e}", cache.display())));
    let path = cache.join(TARBALL);
    // A cached copy that fails the check (an interrupted download) is fetched again.
    if path.exists() && hash_of(&path).as_deref() != Some(want_hash().as_str()) {
        let _ = fs::remove_file(&path);
    }
    if !path.exists() {
        // Packed into this build's own directory, checked, then moved into the cache in
        // one rename: a concurrent build never reads a half-written file.
        let staging = out.join("npm-staging");
        let _ = fs::remove_dir_all(&staging);
        fs::create_dir_all(&staging).unwrap_or_else(|e| fail(&format!("{e}")));
        run(Command::new("npm")
            .args(["pack", "--silent", PACKAGE, "--pack-destination"])
            .arg(&staging)
            .current_dir(&staging));
        check_hash(&staging.join(TARBALL));
        fs::rename(staging.join(TARBALL), &path)
            .unwrap_or_else(|e| fail(&format!("caching {}: {e}", path.display())));
    }
    check_hash(&path);
    path
}

fn want_hash() -> String {
    SHA512.split_whitespace().collect()
}

fn hash_of(path: &Path) -> Option<String> {
    let bytes = fs::read(path).ok()?;
    Some(
        Sha512::digest(&bytes)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect(),
    )
}

fn check_hash(path: &Path) {
    let hex = hash_of(path).unwrap_or_else(|| fail(&format!("cannot read {}", path.display())));
    let want = want_hash();
    if hex != want {
        fail(&format!(
            "{} has SHA-512 {hex}, expected {want}",
            path.display()
        ));
    }
}

/// Turns the package's TypeScript module (`export const x: GenesisState = { ... }`, each
/// account either `'0xaddr': '0xbalance'` or `'0xaddr': [balance, code, [[key, value],
/// ...], nonce]`) into geth's `alloc` object.
fn to_geth_alloc(source: &str) -> Result<String, String> {
    let start = source.find("= {").ok_or("no object literal")? + 2;
    let end = source.rfind('}').ok_or("no closing brace")? + 1;
    let json = strip_trailing_commas(&source[start..end].replace('\'', "\""));
    let accounts: Map<String, Value> =
        serde_json::from_str(&json).map_err(|e| format!("not a JSON-like object: {e}"))?;
    let mut alloc = Map::new();
    for (address, account) in accounts {
        let mut entry = Map::new();
        match account {
            Value::String(balance) => {
                entry.insert("balance".into(), Value::String(balance));
            }
            Value::Array(fields) => {
                let text = |i: usize| fields.get(i).and_then(Value::as_str);
                let balance = text(0).ok_or_else(|| format!("{address}: no balance"))?;
                entry.insert("balance".into(), balance.into());
                if let Some(code) = text(1).filter(|c| *c != "0x") {
                    entry.insert("code".into(), code.into());
                }
                let mut storage = Map::new();
                for pair in fields
                    .get(2)
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    match pair.as_array().map(Vec::as_slice) {
                        Some([Value::String(k), Value::String(v)]) => {
                            storage.insert(k.clone(), Value::String(v.clone()));
                        }
                        _ => return Err(format!("{address}: a storage entry is not a pair")),
                    }
                }
                if !storage.is_empty() {
                    entry.insert("storage".into(), Value::Object(storage));
                }
                if let Some(nonce) = text(3) {
                    entry.insert("nonce".into(), nonce.into());
                }
            }
            _ => return Err(format!("{address}: neither a balance nor an account")),
        }
        alloc.insert(address, Value::Object(entry));
    }
    serde_json::to_string(&alloc).map_err(|e| e.to_string())
}

/// Drops each comma that only whitespace separates from a closing `]` or `}`.
fn strip_trailing_commas(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let bytes = s.as_bytes();
    for (i, c) in s.char_indices() {
        if c == ',' {
            let next = bytes[i + 1..]
                .iter()
                .find(|b| !b.is_ascii_whitespace())
                .copied();
            if matches!(next, Some(b']') | Some(b'}')) {
                continue;
            }
        }
        out.push(c);
    }
    out
}
