//! What the tool asks of the node outside devp2p: JSON-RPC over a kept-alive HTTP
//! connection, an engine API call with a fresh JWT, Prometheus counters (the pool's head
//! change and KZG figures), and the node process' CPU time from `/proc`.

use alloy_primitives::hex;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// An HS256 JWT with the current `iat`, as the engine API wants.
pub(crate) fn engine_jwt(secret_hex: &str) -> Result<String, String> {
    use base64::Engine;
    use hmac::{Hmac, Mac};
    let secret = hex::decode(secret_hex.trim().trim_start_matches("0x"))
        .map_err(|e| format!("jwt secret: {e}"))?;
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let iat = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let head = b64.encode(br#"{"alg":"HS256","typ":"JWT"}"#);
    let claims = b64.encode(format!(r#"{{"iat":{iat}}}"#));
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(&secret).map_err(|e| e.to_string())?;
    mac.update(format!("{head}.{claims}").as_bytes());
    let sig = b64.encode(mac.finalize().into_bytes());
    Ok(format!("{head}.{claims}.{sig}"))
}

/// Posts `body` to the engine API with a fresh JWT; the answer must hold a result.
pub(crate) async fn engine_call(
    addr: SocketAddr,
    secret_hex: &str,
    body: &str,
) -> Result<String, String> {
    let token = engine_jwt(secret_hex)?;
    let mut s = TcpStream::connect(addr)
        .await
        .map_err(|e| format!("engine {addr}: {e}"))?;
    let req = format!(
        "POST / HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nAuthorization: Bearer {token}\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut answer = String::new();
    tokio::time::timeout(Duration::from_secs(30), s.read_to_string(&mut answer))
        .await
        .map_err(|_| "engine API did not answer in 30 s".to_string())?
        .map_err(|e| e.to_string())?;
    if answer.contains("\"result\"") {
        Ok(answer)
    } else {
        Err(format!(
            "engine API: {}",
            answer.lines().last().unwrap_or_default()
        ))
    }
}

/// User + system CPU seconds of process `pid`.
pub(crate) fn cpu_seconds(pid: u32) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return 0.0;
    };
    let f: Vec<&str> = rest.split_whitespace().collect();
    let t = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (t(11) + t(12)) / 100.0
}

/// A kept-alive HTTP/1.1 JSON-RPC connection (answers with Content-Length).
pub(crate) struct Rpc {
    pub(crate) io: BufReader<TcpStream>,
}

impl Rpc {
    pub(crate) async fn connect(addr: SocketAddr) -> std::io::Result<Self> {
        let s = TcpStream::connect(addr).await?;
        s.set_nodelay(true)?;
        Ok(Self {
            io: BufReader::new(s),
        })
    }

    pub(crate) async fn call(
        &mut self,
        method: &str,
        params: &str,
    ) -> std::io::Result<serde_json::Value> {
        let body = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"{method}","params":{params}}}"#);
        let req = format!(
            "POST / HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        self.io.get_mut().write_all(req.as_bytes()).await?;
        let mut len = 0usize;
        loop {
            let mut line = String::new();
            if self.io.read_line(&mut line).await? == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            if let Some((k, v)) = line.split_once(':')
                && k.eq_ignore_ascii_case("content-length")
            {
                len = v.trim().parse().unwrap_or(0);
            }
        }
        let mut buf = vec![0; len.min(1 << 20)];
        self.io.read_exact(&mut buf).await?;
        serde_json::from_slice(&buf).map_err(std::io::Error::other)
    }
}

/// A JSON-RPC answer's `result` as a hex quantity.
pub(crate) fn result_u64(v: &serde_json::Value) -> Option<u64> {
    v["result"]
        .as_str()
        .and_then(|s| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok())
}

/// The node's head changes so far: (count, seconds of revalidation in all, accounts
/// read), from moat's metrics.
pub(crate) async fn head_changes(metrics: Option<SocketAddr>) -> Option<(f64, f64, f64)> {
    let m = metrics?;
    Some((
        scrape(m, "moat_pool_head_change_seconds_count").await?,
        scrape(m, "moat_pool_head_change_seconds_sum").await?,
        scrape(m, "moat_pool_head_change_accounts_total")
            .await
            .unwrap_or(0.0),
    ))
}

pub(crate) fn describe_head_changes(
    a: Option<(f64, f64, f64)>,
    b: Option<(f64, f64, f64)>,
) -> String {
    match (a, b) {
        (Some(a), Some(b)) if b.0 > a.0 => {
            let n = b.0 - a.0;
            format!(
                "; {n:.0} head changes, revalidation {:.2} ms each on average, {:.0} accounts read each",
                (b.1 - a.1) / n * 1e3,
                (b.2 - a.2) / n
            )
        }
        _ => String::new(),
    }
}

/// The value of a Prometheus counter (summed over its labels), `None` when unreachable.
pub(crate) async fn scrape(addr: SocketAddr, name: &str) -> Option<f64> {
    let mut s = TcpStream::connect(addr).await.ok()?;
    s.write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n")
        .await
        .ok()?;
    let mut body = String::new();
    tokio::time::timeout(Duration::from_secs(2), s.read_to_string(&mut body))
        .await
        .ok()?
        .ok()?;
    let mut total = None;
    for line in body.lines() {
        if let Some(rest) = line.strip_prefix(name)
            && (rest.starts_with(' ') || rest.starts_with('{'))
            && let Some(v) = rest.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok())
        {
            *total.get_or_insert(0.0) += v;
        }
    }
    total
}
