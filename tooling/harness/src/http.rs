//! A small blocking JSON-RPC client over one kept-alive HTTP/1.1 connection: bodies
//! framed by `Content-Length` or chunked encoding, a fresh engine-API JWT on each request
//! when it holds a secret, one reconnection when the server has closed the connection.
//! [`RpcClient::get`] and [`RpcClient::post_path`] speak to REST APIs (a beacon node's)
//! the same way.

use serde_json::{Value, json};
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// Answers above this are refused (the calls here get a few kB back).
const MAX_BODY: usize = 16 << 20;

fn invalid(msg: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.into())
}

/// What a call came to: the `result`, or an error (the node's message, or the transport's).
#[derive(Debug)]
pub enum CallError {
    /// The node answered with a JSON-RPC error; its message.
    Rpc(String),
    /// No usable answer (connection, timeout, HTTP status, not JSON).
    Transport(String),
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::Rpc(m) => write!(f, "{m}"),
            CallError::Transport(m) => write!(f, "transport: {m}"),
        }
    }
}

/// A JSON-RPC (or engine API) client of one node; see the module docs.
pub struct RpcClient {
    addr: SocketAddr,
    secret: Option<[u8; 32]>,
    timeout: Duration,
    stream: Option<BufReader<TcpStream>>,
    id: u64,
}

impl RpcClient {
    /// A client of `addr`; it connects on its first call. `secret`: the engine API's JWT
    /// secret.
    pub fn new(addr: SocketAddr, secret: Option<[u8; 32]>, timeout: Duration) -> Self {
        Self {
            addr,
            secret,
            timeout,
            stream: None,
            id: 0,
        }
    }

    fn connect(&mut self) -> io::Result<&mut BufReader<TcpStream>> {
        if self.stream.is_none() {
            let s =
                TcpStream::connect_timeout(&self.addr, self.timeout.min(Duration::from_secs(5)))?;
            s.set_nodelay(true)?;
            s.set_read_timeout(Some(self.timeout))?;
            s.set_write_timeout(Some(self.timeout))?;
            self.stream = Some(BufReader::new(s));
        }
        Ok(self.stream.as_mut().expect("connected above"))
    }

    /// Calls `method` with `params`.
    pub fn call(&mut self, method: &str, params: Value) -> Result<Value, CallError> {
        self.id += 1;
        let body = json!({"jsonrpc": "2.0", "id": self.id, "method": method, "params": params})
            .to_string();
        let answer = self.post_json(&body)?;
        answer_result(answer).map_err(|e| match e {
            CallError::Rpc(m) => CallError::Rpc(m),
            CallError::Transport(m) => CallError::Transport(format!("{method}: {m}")),
        })
    }

    /// Calls `method` once per item of `params` in one batch request; the answers in the
    /// order of `params`.
    pub fn batch(
        &mut self,
        method: &str,
        params: &[Value],
    ) -> Result<Vec<Result<Value, CallError>>, CallError> {
        let first = self.id + 1;
        let calls: Vec<Value> = params
            .iter()
            .map(|p| {
                self.id += 1;
                json!({"jsonrpc": "2.0", "id": self.id, "method": method, "params": p})
            })
            .collect();
        let answer = self.post_json(&Value::Array(calls).to_string())?;
        let Value::Array(items) = answer else {
            return Err(CallError::Transport(format!(
                "{method} batch: not an array: {}",
                short(&answer.to_string())
            )));
        };
        let mut out: Vec<Option<Result<Value, CallError>>> =
            (0..params.len()).map(|_| None).collect();
        for item in items {
            let Some(i) = item["id"]
                .as_u64()
                .and_then(|id| id.checked_sub(first))
                .filter(|&i| (i as usize) < out.len())
            else {
                continue;
            };
            out[i as usize] = Some(answer_result(item));
        }
        Ok(out
            .into_iter()
            .map(|a| a.unwrap_or_else(|| Err(CallError::Transport("no answer in batch".into()))))
            .collect())
    }

    /// GET `path` of a REST API: the JSON body of a 2xx answer; any other status is an
    /// error carrying the body.
    pub fn get(&mut self, path: &str) -> Result<Value, CallError> {
        self.rest("GET", path, "")
    }

    /// POST `body` (JSON, may be empty) to `path` of a REST API; the JSON answer (`null`
    /// for an empty 2xx body).
    pub fn post_path(&mut self, path: &str, body: &str) -> Result<Value, CallError> {
        self.rest("POST", path, body)
    }

    fn rest(&mut self, method: &str, path: &str, body: &str) -> Result<Value, CallError> {
        let (status, bytes) = self
            .exchange(method, path, body)
            .map_err(|e| CallError::Transport(format!("{method} {path}: {e}")))?;
        if !(200..300).contains(&status) {
            return Err(CallError::Rpc(format!(
                "{method} {path}: http {status}: {}",
                short(&String::from_utf8_lossy(&bytes))
            )));
        }
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(Value::Null);
        }
        serde_json::from_slice(&bytes).map_err(|_| {
            CallError::Transport(format!(
                "{method} {path}: not JSON: {}",
                short(&String::from_utf8_lossy(&bytes))
            ))
        })
    }

    /// One request, tried again on a fresh connection when a kept-alive one the server
    /// closed meanwhile fails at once.
    fn exchange(&mut self, method: &str, path: &str, body: &str) -> io::Result<(u16, Vec<u8>)> {
        match self.send(method, path, body) {
            Ok(a) => Ok(a),
            Err(_) => {
                self.stream = None;
                self.send(method, path, body)
                    .inspect_err(|_| self.stream = None)
            }
        }
    }

    fn post_json(&mut self, body: &str) -> Result<Value, CallError> {
        let (status, bytes) = self
            .exchange("POST", "/", body)
            .map_err(|e| CallError::Transport(e.to_string()))?;
        serde_json::from_slice(&bytes).map_err(|_| {
            CallError::Transport(format!(
                "http {status}: {}",
                short(&String::from_utf8_lossy(&bytes))
            ))
        })
    }

    fn send(&mut self, method: &str, path: &str, body: &str) -> io::Result<(u16, Vec<u8>)> {
        let auth = self.secret.map_or(String::new(), |s| {
            format!(
                "Authorization: Bearer {}\r\n",
                moat_rpc::engine::make_token(&s, moat_rpc::engine::unix_now())
            )
        });
        // No content type on an empty body: some REST servers refuse "empty JSON".
        let content_type = if body.is_empty() {
            ""
        } else {
            "Content-Type: application/json\r\n"
        };
        let request = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nAccept: application/json\r\n{content_type}{auth}Content-Length: {}\r\n\r\n{body}",
            self.addr,
            body.len()
        );
        let stream = self.connect()?;
        stream.get_mut().write_all(request.as_bytes())?;
        let (status, body, close) = read_answer(stream)?;
        if close {
            self.stream = None;
        }
        Ok((status, body))
    }
}

/// The `result` of one JSON-RPC answer object, or its error.
fn answer_result(answer: Value) -> Result<Value, CallError> {
    if let Some(error) = answer.get("error") {
        let message = error["message"]
            .as_str()
            .map_or_else(|| error.to_string(), str::to_string);
        return Err(CallError::Rpc(message));
    }
    match answer.get("result") {
        Some(r) => Ok(r.clone()),
        None => Err(CallError::Transport(format!(
            "no result: {}",
            short(&answer.to_string())
        ))),
    }
}

fn short(text: &str) -> String {
    text.trim().chars().take(160).collect()
}

/// Reads one HTTP answer: status, body, and whether the server closes after it (bodies
/// above 16 MiB refused).
pub fn read_answer(stream: &mut impl BufRead) -> io::Result<(u16, Vec<u8>, bool)> {
    let mut line = String::new();
    if stream.read_line(&mut line)? == 0 {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "connection closed by the server",
        ));
    }
    let status: u16 = line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| invalid(format!("bad status line {line:?}")))?;
    let mut close = line.starts_with("HTTP/1.0");
    let (mut length, mut chunked) = (None, false);
    loop {
        line.clear();
        if stream.read_line(&mut line)? == 0 {
            return Err(invalid("headers cut short"));
        }
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        let Some((name, value)) = l.split_once(':') else {
            continue;
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("content-length") {
            let n: usize = value.parse().map_err(|_| invalid("bad content-length"))?;
            if n > MAX_BODY {
                return Err(invalid("answer too large"));
            }
            length = Some(n);
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = value.to_ascii_lowercase().contains("chunked");
        } else if name.eq_ignore_ascii_case("connection") {
            close = value.eq_ignore_ascii_case("close");
        }
    }
    let mut body = Vec::new();
    if chunked {
        loop {
            line.clear();
            stream.read_line(&mut line)?;
            let size = line.trim().split(';').next().unwrap_or_default();
            let size = usize::from_str_radix(size, 16).map_err(|_| invalid("bad chunk size"))?;
            if size == 0 {
                // Trailers, up to the blank line.
                loop {
                    line.clear();
                    if stream.read_line(&mut line)? == 0 || line.trim_end().is_empty() {
                        return Ok((status, body, close));
                    }
                }
            }
            if body.len() + size > MAX_BODY {
                return Err(invalid("answer too large"));
            }
            let at = body.len();
            body.resize(at + size, 0);
            stream.read_exact(&mut body[at..])?;
            let mut crlf = [0u8; 2];
            stream.read_exact(&mut crlf)?;
        }
    }
    match length {
        Some(n) => {
            body.resize(n, 0);
            stream.read_exact(&mut body)?;
        }
        None => {
            stream.take(MAX_BODY as u64).read_to_end(&mut body)?;
            close = true;
        }
    }
    Ok((status, body, close))
}

/// A JSON quantity (`"0x1a"`) as a number.
pub fn quantity(v: &Value) -> Option<u64> {
    u64::from_str_radix(v.as_str()?.strip_prefix("0x")?, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_length_chunked_and_to_close_answers_are_read() {
        let two = b"HTTP/1.1 200 OK\r\nContent-Length: 12\r\n\r\n{\"result\":1}HTTP/1.1 200 OK\r\ncontent-length: 2\r\nConnection: close\r\n\r\n{}";
        // Two answers back to back on one connection: each read takes its own bytes.
        let mut r = BufReader::new(&two[..]);
        assert_eq!(
            read_answer(&mut r).unwrap(),
            (200, b"{\"result\":1}".to_vec(), false)
        );
        assert_eq!(read_answer(&mut r).unwrap(), (200, b"{}".to_vec(), true));

        let chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\n{\"a\"\r\n3\r\n:1}\r\n0\r\n\r\n";
        let mut r = BufReader::new(&chunked[..]);
        assert_eq!(
            read_answer(&mut r).unwrap(),
            (200, b"{\"a\":1}".to_vec(), false)
        );

        let to_close = b"HTTP/1.0 503 Busy\r\n\r\nlater";
        let mut r = BufReader::new(&to_close[..]);
        assert_eq!(read_answer(&mut r).unwrap(), (503, b"later".to_vec(), true));
    }

    #[test]
    fn errors_keep_their_message_and_quantities_parse() {
        let e = answer_result(json!({"error": {"code": -32000, "message": "nonce too low"}}));
        assert!(matches!(e, Err(CallError::Rpc(m)) if m == "nonce too low"));
        assert_eq!(
            answer_result(json!({"result": "0x1"})).unwrap(),
            json!("0x1")
        );
        assert_eq!(quantity(&json!("0x1f")), Some(31));
        assert_eq!(quantity(&json!("1f")), None);
    }
}
