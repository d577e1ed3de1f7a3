//! Reading a genesis file in one pass without holding its allocation.
//!
//! A genesis of millions of accounts is a file of gigabytes; parsed whole it costs several
//! times its size in memory. [`Genesis::stream_file`] scans the file's top-level object
//! byte by byte: every key but `alloc` is kept as written (a few kilobytes) and parsed as
//! [`Genesis::from_json`] parses a whole file, while each entry of `alloc` is read alone,
//! parsed as the whole-file parser would parse it, and handed to the caller. Memory: one
//! account's JSON and a read buffer.

use super::genesis::{parse_alloc_address, quote_large_integers};
use super::{ConfigError, Genesis, GenesisAccount};
use alloy_primitives::Address;
use std::io::Read;
use std::path::Path;

const BUFFER: usize = 1 << 20;

/// What [`Genesis::stream_file`] does with each allocation entry.
pub enum AllocEntries<'f> {
    /// Parse it and hand it over; an error from the callback stops the read.
    Parse(&'f mut dyn FnMut(Address, GenesisAccount) -> Result<(), String>),
    /// Only check that the JSON is well formed (the allocation is already written).
    Skip,
}

struct Scanner<R> {
    reader: R,
    buf: Vec<u8>,
    pos: usize,
    len: usize,
    /// Bytes consumed before `buf`.
    base: u64,
}

impl<R: Read> Scanner<R> {
    fn malformed(&self, reason: &'static str) -> ConfigError {
        ConfigError::Malformed {
            offset: self.base + self.pos as u64,
            reason,
        }
    }

    fn peek(&mut self, path: &Path) -> Result<Option<u8>, ConfigError> {
        if self.pos == self.len {
            self.base += self.len as u64;
            self.pos = 0;
            self.len = loop {
                match self.reader.read(&mut self.buf) {
                    Ok(n) => break n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(source) => {
                        return Err(ConfigError::Io {
                            path: path.to_owned(),
                            source,
                        });
                    }
                }
            };
            if self.len == 0 {
                return Ok(None);
            }
        }
        Ok(Some(self.buf[self.pos]))
    }

    fn next(&mut self, path: &Path) -> Result<Option<u8>, ConfigError> {
        let b = self.peek(path)?;
        if b.is_some() {
            self.pos += 1;
        }
        Ok(b)
    }

    fn skip_ws(&mut self, path: &Path) -> Result<Option<u8>, ConfigError> {
        while let Some(b) = self.peek(path)? {
            if !matches!(b, b' ' | b'\t' | b'\n' | b'\r') {
                return Ok(Some(b));
            }
            self.pos += 1;
        }
        Ok(None)
    }

    fn expect(&mut self, path: &Path, want: u8, reason: &'static str) -> Result<(), ConfigError> {
        match self.skip_ws(path)? {
            Some(b) if b == want => {
                self.pos += 1;
                Ok(())
            }
            _ => Err(self.malformed(reason)),
        }
    }

    /// Appends a string (quotes included) to `out`; the next byte is its opening quote.
    fn string(&mut self, path: &Path, out: &mut Vec<u8>) -> Result<(), ConfigError> {
        if self.next(path)? != Some(b'"') {
            return Err(self.malformed("expected a string"));
        }
        out.push(b'"');
        let mut escaped = false;
        loop {
            // Copy the run up to the next quote or backslash at once.
            if self.peek(path)?.is_none() {
                return Err(self.malformed("unterminated string"));
            }
            let chunk = &self.buf[self.pos..self.len];
            let stop = if escaped {
                0
            } else {
                chunk
                    .iter()
                    .position(|b| *b == b'"' || *b == b'\\')
                    .unwrap_or(chunk.len())
            };
            out.extend_from_slice(&chunk[..stop]);
            self.pos += stop;
            if stop == chunk.len() {
                continue;
            }
            let b = self.buf[self.pos];
            self.pos += 1;
            out.push(b);
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else {
                return Ok(());
            }
        }
    }

    /// Appends one JSON value (raw, as written) to `out`.
    fn value(&mut self, path: &Path, out: &mut Vec<u8>) -> Result<(), ConfigError> {
        match self.skip_ws(path)? {
            None => Err(self.malformed("expected a value")),
            Some(b'"') => self.string(path, out),
            Some(b'{' | b'[') => {
                let mut depth = 0usize;
                loop {
                    match self.peek(path)? {
                        None => return Err(self.malformed("unterminated object or array")),
                        Some(b'"') => self.string(path, out)?,
                        Some(b) => {
                            self.pos += 1;
                            out.push(b);
                            match b {
                                b'{' | b'[' => depth += 1,
                                b'}' | b']' => {
                                    depth -= 1;
                                    if depth == 0 {
                                        return Ok(());
                                    }
                                }
                                _ => {}
                            }
                        }
                    }
                }
            }
            Some(_) => {
                // A number or literal: up to the next delimiter.
                while let Some(b) = self.peek(path)? {
                    if matches!(b, b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r') {
                        break;
                    }
                    self.pos += 1;
                    out.push(b);
                }
                Ok(())
            }
        }
    }
}

/// The text of a JSON string token (quotes included), escapes resolved.
fn string_text(raw: &[u8]) -> Result<String, ConfigError> {
    if !raw.contains(&b'\\') {
        let inner = &raw[1..raw.len() - 1];
        return std::str::from_utf8(inner)
            .map(str::to_owned)
            .map_err(|_| ConfigError::Malformed {
                offset: 0,
                reason: "a key is not UTF-8",
            });
    }
    Ok(serde_json::from_slice(raw)?)
}

impl Genesis {
    /// Reads the genesis file at `path` in one pass, handing each allocation entry to
    /// `alloc` as it is read (see the module docs); the returned genesis has an empty
    /// `alloc`. Entries come in the file's order; an address given twice is the caller's
    /// to refuse. Everything else is checked as [`Genesis::from_json`] checks it.
    pub fn stream_file(path: &Path, mut alloc: AllocEntries<'_>) -> Result<Genesis, ConfigError> {
        let file = std::fs::File::open(path).map_err(|source| ConfigError::Io {
            path: path.to_owned(),
            source,
        })?;
        let mut s = Scanner {
            reader: file,
            buf: vec![0; BUFFER],
            pos: 0,
            len: 0,
            base: 0,
        };
        // The file without its allocation's entries.
        let mut rest = Vec::with_capacity(4096);
        let mut key = Vec::new();
        let mut entry = Vec::new();
        let mut alloc_seen = false;
        s.expect(path, b'{', "a genesis file is a JSON object")?;
        rest.push(b'{');
        if s.skip_ws(path)? == Some(b'}') {
            s.pos += 1;
        } else {
            loop {
                key.clear();
                if s.skip_ws(path)? != Some(b'"') {
                    return Err(s.malformed("expected a key"));
                }
                s.string(path, &mut key)?;
                s.expect(path, b':', "expected ':' after a key")?;
                let streamed = key == b"\"alloc\"" && s.skip_ws(path)? == Some(b'{') && !alloc_seen;
                if streamed {
                    alloc_seen = true;
                    if rest.len() > 1 {
                        rest.push(b',');
                    }
                    rest.extend_from_slice(b"\"alloc\":{}");
                    read_alloc(&mut s, path, &mut alloc, &mut key, &mut entry)?;
                } else {
                    if rest.len() > 1 {
                        rest.push(b',');
                    }
                    rest.extend_from_slice(&key);
                    rest.push(b':');
                    s.value(path, &mut rest)?;
                }
                match s.skip_ws(path)? {
                    Some(b',') => s.pos += 1,
                    Some(b'}') => {
                        s.pos += 1;
                        break;
                    }
                    _ => return Err(s.malformed("expected ',' or '}' after a value")),
                }
            }
        }
        rest.push(b'}');
        if s.skip_ws(path)?.is_some() {
            return Err(s.malformed("trailing characters after the genesis object"));
        }
        let rest = String::from_utf8(rest).map_err(|_| ConfigError::Malformed {
            offset: 0,
            reason: "the genesis file is not UTF-8",
        })?;
        Genesis::from_json(&rest)
    }
}

/// Reads the allocation object (the scanner is at its `{`), entry by entry.
fn read_alloc<R: Read>(
    s: &mut Scanner<R>,
    path: &Path,
    alloc: &mut AllocEntries<'_>,
    key: &mut Vec<u8>,
    entry: &mut Vec<u8>,
) -> Result<(), ConfigError> {
    s.expect(path, b'{', "alloc is an object")?;
    if s.skip_ws(path)? == Some(b'}') {
        s.pos += 1;
        return Ok(());
    }
    loop {
        key.clear();
        entry.clear();
        if s.skip_ws(path)? != Some(b'"') {
            return Err(s.malformed("expected an alloc address"));
        }
        s.string(path, key)?;
        s.expect(path, b':', "expected ':' after an alloc address")?;
        s.value(path, entry)?;
        if let AllocEntries::Parse(add) = alloc {
            let text = string_text(key)?;
            let address = parse_alloc_address(&text).map_err(|reason| ConfigError::Alloc {
                address: text.clone(),
                reason,
            })?;
            let json = std::str::from_utf8(entry).map_err(|_| ConfigError::Malformed {
                offset: s.base + s.pos as u64,
                reason: "an alloc entry is not UTF-8",
            })?;
            let account: GenesisAccount = serde_json::from_str(&quote_large_integers(json))?;
            add(address, account).map_err(|reason| ConfigError::Alloc {
                address: text,
                reason,
            })?;
        }
        match s.skip_ws(path)? {
            Some(b',') => s.pos += 1,
            Some(b'}') => {
                s.pos += 1;
                return Ok(());
            }
            _ => return Err(s.malformed("expected ',' or '}' in alloc")),
        }
    }
}
