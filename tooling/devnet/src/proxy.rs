//! A timing proxy in front of an execution client's engine API: the consensus client talks
//! to it, it forwards each request as it came (the JWT header included) and the answer
//! back, and records how long the execution client took for every method — the figure a
//! proposer lives by for `engine_getPayload*`. One thread per connection; loopback only.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Requests above this are refused (engine calls are well below: a payload of a full
/// block with blobs is a few MiB).
const MAX_REQUEST: usize = 64 << 20;

/// One forwarded call.
#[derive(Debug, Clone)]
pub(crate) struct Timed {
    pub method: String,
    pub took: Duration,
    pub ok: bool,
}

pub(crate) struct Proxy {
    pub port: u16,
    pub calls: Arc<Mutex<Vec<Timed>>>,
    stop: Arc<AtomicBool>,
}

impl Proxy {
    /// Listens on 127.0.0.1:`port` and forwards to `upstream`.
    pub(crate) fn start(port: u16, upstream: SocketAddr) -> Result<Proxy, String> {
        let listener = TcpListener::bind(("127.0.0.1", port))
            .map_err(|e| format!("proxy on 127.0.0.1:{port}: {e}"))?;
        listener.set_nonblocking(true).map_err(|e| e.to_string())?;
        let calls = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (c, s) = (calls.clone(), stop.clone());
        std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((client, _)) => {
                        let (c, s) = (c.clone(), s.clone());
                        std::thread::spawn(move || {
                            let _ = serve(client, upstream, &c, &s);
                        });
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(20)),
                }
            }
        });
        Ok(Proxy { port, calls, stop })
    }

    pub(crate) fn calls(&self) -> Vec<Timed> {
        self.calls.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Reads one request: (head bytes as received, body).
fn read_request(r: &mut impl BufRead) -> std::io::Result<Option<(Vec<u8>, Vec<u8>)>> {
    let mut head = Vec::new();
    let mut length = 0usize;
    loop {
        let mut line = String::new();
        if r.read_line(&mut line)? == 0 {
            return Ok(None);
        }
        if let Some((name, value)) = line.split_once(':')
            && name.trim().eq_ignore_ascii_case("content-length")
        {
            length = value.trim().parse().unwrap_or(0);
        }
        head.extend_from_slice(line.as_bytes());
        if line == "\r\n" || line == "\n" {
            break;
        }
        if head.len() > 64 << 10 {
            return Err(std::io::Error::other("headers too large"));
        }
    }
    if length > MAX_REQUEST {
        return Err(std::io::Error::other("request too large"));
    }
    let mut body = vec![0; length];
    r.read_exact(&mut body)?;
    Ok(Some((head, body)))
}

fn serve(
    client: TcpStream,
    upstream: SocketAddr,
    calls: &Mutex<Vec<Timed>>,
    stop: &AtomicBool,
) -> std::io::Result<()> {
    client.set_nonblocking(false)?;
    client.set_read_timeout(Some(Duration::from_secs(600)))?;
    let mut to_client = client.try_clone()?;
    let mut from_client = BufReader::new(client);
    let mut up: Option<BufReader<TcpStream>> = None;
    while !stop.load(Ordering::Relaxed) {
        let Some((head, body)) = read_request(&mut from_client)? else {
            return Ok(());
        };
        let method = serde_json::from_slice::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| v["method"].as_str().map(str::to_string))
            .unwrap_or_else(|| "batch".into());
        let t = Instant::now();
        let answer = (|| -> std::io::Result<(u16, Vec<u8>)> {
            if up.is_none() {
                let s = TcpStream::connect_timeout(&upstream, Duration::from_secs(5))?;
                s.set_read_timeout(Some(Duration::from_secs(60)))?;
                up = Some(BufReader::new(s));
            }
            let u = up.as_mut().expect("connected above");
            u.get_mut().write_all(&head)?;
            u.get_mut().write_all(&body)?;
            let (status, answer, close) = moat_harness::http::read_answer(u)?;
            if close {
                up = None;
            }
            Ok((status, answer))
        })();
        let took = t.elapsed();
        let (status, answer) = match answer {
            Ok(a) => a,
            Err(_) => {
                up = None;
                (502, b"upstream failed".to_vec())
            }
        };
        calls.lock().unwrap_or_else(|e| e.into_inner()).push(Timed {
            method,
            took,
            ok: status == 200 && !answer.windows(8).any(|w| w == b"\"error\":"),
        });
        let reason = if status == 200 { "OK" } else { "Error" };
        to_client.write_all(
            format!(
                "HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
                answer.len()
            )
            .as_bytes(),
        )?;
        to_client.write_all(&answer)?;
    }
    Ok(())
}

/// The p-th percentile (0–100) of `d`, by nearest rank.
pub(crate) fn percentile(d: &mut [Duration], p: f64) -> Option<Duration> {
    if d.is_empty() {
        return None;
    }
    d.sort();
    let rank = ((p / 100.0) * d.len() as f64).ceil().max(1.0) as usize;
    Some(d[rank.min(d.len()) - 1])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_by_nearest_rank() {
        let mut d: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(percentile(&mut d, 50.0), Some(Duration::from_millis(50)));
        assert_eq!(percentile(&mut d, 99.0), Some(Duration::from_millis(99)));
        assert_eq!(percentile(&mut d, 100.0), Some(Duration::from_millis(100)));
        assert_eq!(percentile(&mut [], 50.0), None);
    }

    #[test]
    fn a_request_is_read_whole_with_its_headers() {
        let raw = b"POST / HTTP/1.1\r\nAuthorization: Bearer x\r\nContent-Length: 2\r\n\r\n{}POST";
        let mut r = BufReader::new(&raw[..]);
        let (head, body) = read_request(&mut r).unwrap().unwrap();
        assert!(head.ends_with(b"\r\n\r\n"));
        assert!(String::from_utf8_lossy(&head).contains("Bearer x"));
        assert_eq!(body, b"{}");
    }
}
