//! Who may use the servers and for how long: the Host, Origin, CORS and namespace checks
//! (geth's rules and defaults), the connection and WebSocket caps per client address and
//! in all, WebSocket pings, and the engine port's Host check. Real sockets on loopback;
//! clients bind to other 127.0.0.x addresses to play other hosts.

use alloy_primitives::Address;
use moat_blockchain::chain::Chain;
use moat_blockchain::payload::PayloadService;
use moat_common::config::Genesis;
use moat_mempool::{Pool, PoolConfig};
use moat_rpc::engine::{EngineConfig, EngineContext, make_token, unix_now};
use moat_rpc::{
    AllowedOrigins, ConnLimits, CorsDomains, Namespaces, RpcConfig, RpcContext, RpcHandle,
    StoreStateView, VirtualHosts,
};
use moat_storage::Store;
use serde_json::{Value, json};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

fn genesis() -> Genesis {
    let rich = Address::repeat_byte(0x11);
    Genesis::from_json(&format!(
        r#"{{
        "config": {{
            "chainId": 1337, "homesteadBlock": 0, "eip150Block": 0, "eip155Block": 0,
            "eip158Block": 0, "byzantiumBlock": 0, "constantinopleBlock": 0, "petersburgBlock": 0,
            "istanbulBlock": 0, "berlinBlock": 0, "londonBlock": 0, "mergeNetsplitBlock": 0,
            "terminalTotalDifficulty": 0, "shanghaiTime": 0, "cancunTime": 0, "pragueTime": 0
        }},
        "gasLimit": "0x1c9c380", "difficulty": "0x0", "timestamp": "0x0",
        "alloc": {{ "{rich:x}": {{ "balance": "0x1000" }} }}
    }}"#
    ))
    .expect("test genesis parses")
}

fn chain_and_pool() -> (Chain, Pool) {
    let store = Store::in_memory();
    let chain = Chain::init(store.clone(), &genesis()).expect("genesis initialises");
    let view = StoreStateView::new(store, chain.config().clone());
    let pool = Pool::new(PoolConfig::new(chain.config().clone()), Arc::new(view));
    (chain, pool)
}

/// A server on one loopback port for HTTP and WebSocket, with `config`'s checks.
async fn server(config: RpcConfig) -> RpcHandle {
    let (chain, pool) = chain_and_pool();
    let config = RpcConfig {
        http_addr: "127.0.0.1:0".parse().unwrap(),
        ..config
    };
    let shared = RpcConfig {
        ws_addr: Some(config.http_addr),
        ..config
    };
    // One port for both: bind HTTP first, then learn its port.
    moat_rpc::start(shared, RpcContext::new(chain, pool))
        .await
        .expect("server starts")
}

/// A TCP connection to `addr` from the loopback address `from`.
async fn connect_from(from: [u8; 4], addr: SocketAddr) -> TcpStream {
    let s = TcpSocket::new_v4().unwrap();
    s.bind(SocketAddr::new(IpAddr::from(from), 0)).unwrap();
    s.connect(addr).await.unwrap()
}

/// Sends `head` (and `body`) and reads the answer: (status, head lowercased, body).
async fn exchange(s: &mut TcpStream, head: &str, body: &str) -> (u16, String, String) {
    s.write_all(head.as_bytes()).await.unwrap();
    s.write_all(body.as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    let read = async {
        let mut chunk = [0u8; 4096];
        loop {
            let text = String::from_utf8_lossy(&buf).into_owned();
            if let Some((h, b)) = text.split_once("\r\n\r\n") {
                let h = h.to_ascii_lowercase();
                let len = h
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .and_then(|v| v.trim().parse::<usize>().ok());
                // An upgrade (101) or a response without a body ends at its head.
                if h.starts_with("http/1.1 101") || len.is_some_and(|n| b.len() >= n) {
                    let status = h
                        .split(' ')
                        .nth(1)
                        .and_then(|c| c.parse().ok())
                        .unwrap_or(0);
                    return (status, h, b.to_string());
                }
            }
            let n = s.read(&mut chunk).await.unwrap_or(0);
            if n == 0 {
                let status = text
                    .split(' ')
                    .nth(1)
                    .and_then(|c| c.parse().ok())
                    .unwrap_or(0);
                return (status, text.to_ascii_lowercase(), String::new());
            }
            buf.extend_from_slice(&chunk[..n]);
        }
    };
    tokio::time::timeout(Duration::from_secs(20), read)
        .await
        .expect("an answer within 20 s")
}

/// POSTs one call with `headers` (full lines), `Host` included.
async fn post(addr: SocketAddr, headers: &str, method: &str) -> (u16, String, Value) {
    let body = json!({"jsonrpc":"2.0","id":1,"method":method,"params":[]}).to_string();
    let head = format!(
        "POST / HTTP/1.1\r\n{headers}Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let mut s = TcpStream::connect(addr).await.unwrap();
    let (status, head, body) = exchange(&mut s, &head, &body).await;
    (
        status,
        head,
        serde_json::from_str(&body).unwrap_or(Value::Null),
    )
}

/// A WebSocket upgrade from `from` with extra header lines; (status, the open socket).
async fn upgrade(from: [u8; 4], addr: SocketAddr, headers: &str) -> (u16, TcpStream) {
    let mut s = connect_from(from, addr).await;
    let head = format!(
        "GET / HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n{headers}\r\n"
    );
    let (status, _, _) = exchange(&mut s, &head, "").await;
    (status, s)
}

/// A masked text frame.
fn ws_frame(v: &Value) -> Vec<u8> {
    let payload = v.to_string().into_bytes();
    assert!(payload.len() < 126);
    let mut frame = vec![0x81u8, 0x80 | payload.len() as u8, 0, 0, 0, 0];
    frame.extend_from_slice(&payload);
    frame
}

/// Reads frames until a text one; its JSON.
async fn ws_text(s: &mut TcpStream) -> Value {
    loop {
        let mut h = [0u8; 2];
        s.read_exact(&mut h).await.unwrap();
        let len = match h[1] & 0x7f {
            126 => {
                let mut b = [0u8; 2];
                s.read_exact(&mut b).await.unwrap();
                u16::from_be_bytes(b) as usize
            }
            127 => {
                let mut b = [0u8; 8];
                s.read_exact(&mut b).await.unwrap();
                u64::from_be_bytes(b) as usize
            }
            n => n as usize,
        };
        let mut payload = vec![0u8; len];
        s.read_exact(&mut payload).await.unwrap();
        if h[0] & 0x0f == 1 {
            return serde_json::from_slice(&payload).unwrap();
        }
    }
}

async fn ws_call(s: &mut TcpStream, method: &str) -> Value {
    s.write_all(&ws_frame(
        &json!({"jsonrpc":"2.0","id":1,"method":method,"params":[]}),
    ))
    .await
    .unwrap();
    tokio::time::timeout(Duration::from_secs(10), ws_text(s))
        .await
        .expect("an answer within 10 s")
}

/// Whether the server closes `s` within `secs` (reads until EOF or error).
async fn closed_within(s: &mut TcpStream, secs: u64) -> bool {
    let mut buf = [0u8; 1024];
    let drain = async {
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(secs), drain)
        .await
        .is_ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_host_is_refused_as_geth_refuses_it() {
    let h = server(RpcConfig::default()).await;
    let addr = h.http_addr().unwrap();
    // DNS rebinding: the page's own name arrives as Host.
    let (status, head, _) = post(addr, "Host: evil.example\r\n", "eth_chainId").await;
    assert_eq!(status, 403, "{head}");
    let (status, _, _) = post(addr, "Host: evil.example:8545\r\n", "eth_chainId").await;
    assert_eq!(status, 403);
    for host in [
        "localhost",
        "LocalHost:8545",
        "127.0.0.1:8545",
        "[::1]:8545",
    ] {
        let (status, _, body) = post(addr, &format!("Host: {host}\r\n"), "eth_chainId").await;
        assert_eq!((status, &body["result"]), (200, &json!("0x539")), "{host}");
    }
    h.stop();

    let any = server(RpcConfig {
        vhosts: VirtualHosts::any(),
        ..RpcConfig::default()
    })
    .await;
    let (status, _, _) = post(
        any.http_addr().unwrap(),
        "Host: evil.example\r\n",
        "eth_chainId",
    )
    .await;
    assert_eq!(status, 200, "--http.vhosts=* serves any host");
    any.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websockets_from_foreign_origins_are_refused() {
    let h = server(RpcConfig::default()).await;
    let addr = h.http_addr().unwrap();
    let (status, _) = upgrade([127, 0, 0, 1], addr, "Origin: http://evil.example\r\n").await;
    assert_eq!(status, 403);
    let (status, _) = upgrade([127, 0, 0, 1], addr, "Origin: null\r\n").await;
    assert_eq!(status, 403);
    let (status, mut ws) = upgrade([127, 0, 0, 1], addr, "Origin: http://localhost:3000\r\n").await;
    assert_eq!(status, 101);
    assert_eq!(ws_call(&mut ws, "eth_chainId").await["result"], "0x539");
    // No Origin: not a browser.
    let (status, mut ws) = upgrade([127, 0, 0, 1], addr, "").await;
    assert_eq!(status, 101);
    // admin_ is not served over WebSocket unless --ws.api names it.
    assert_eq!(
        ws_call(&mut ws, "admin_nodeInfo").await["error"]["code"],
        -32601
    );
    h.stop();

    let open = server(RpcConfig {
        ws_origins: AllowedOrigins::any(),
        ws_api: Namespaces::new(&["eth", "admin"]),
        ..RpcConfig::default()
    })
    .await;
    let (status, mut ws) = upgrade(
        [127, 0, 0, 1],
        open.http_addr().unwrap(),
        "Origin: http://evil.example\r\n",
    )
    .await;
    assert_eq!(status, 101, "--ws.origins=* allows any");
    // Served (this server has no p2p, hence the server error rather than -32601).
    let info = ws_call(&mut ws, "admin_nodeInfo").await;
    assert_eq!(
        info["error"]["message"], "p2p networking is disabled",
        "{info}"
    );
    open.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespaces_are_geths_defaults_unless_listed() {
    let h = server(RpcConfig::default()).await;
    let addr = h.http_addr().unwrap();
    let host = "Host: localhost\r\n";
    for method in ["eth_chainId", "net_version", "web3_clientVersion"] {
        let (_, _, body) = post(addr, host, method).await;
        assert!(body.get("result").is_some(), "{method}: {body}");
    }
    for method in [
        "admin_nodeInfo",
        "admin_addPeer",
        "txpool_content",
        "txpool_status",
    ] {
        let (_, _, body) = post(addr, host, method).await;
        assert_eq!(body["error"]["code"], -32601, "{method}: {body}");
    }
    // In a batch, each call is judged alone.
    let batch = json!([
        {"jsonrpc":"2.0","id":1,"method":"eth_chainId"},
        {"jsonrpc":"2.0","id":2,"method":"admin_peers"}
    ])
    .to_string();
    let mut s = TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST / HTTP/1.1\r\n{host}Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        batch.len()
    );
    let (_, _, body) = exchange(&mut s, &head, &batch).await;
    let body: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body[0]["result"], "0x539", "{body}");
    assert_eq!(body[1]["error"]["code"], -32601, "{body}");
    h.stop();

    let listed = server(RpcConfig {
        http_api: Namespaces::new(&["eth", "txpool"]),
        ..RpcConfig::default()
    })
    .await;
    let addr = listed.http_addr().unwrap();
    let (_, _, body) = post(addr, host, "txpool_status").await;
    assert_eq!(body["result"]["pending"], "0x0", "{body}");
    let (_, _, body) = post(addr, host, "web3_clientVersion").await;
    assert_eq!(body["error"]["code"], -32601, "not listed: {body}");
    listed.stop();

    // A plain eth_sendRawTransaction call takes its own path past jsonrpsee; it is
    // refused all the same where `eth` is not served.
    let no_eth = server(RpcConfig {
        http_api: Namespaces::new(&["txpool"]),
        ..RpcConfig::default()
    })
    .await;
    let addr = no_eth.http_addr().unwrap();
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"eth_sendRawTransaction","params":["0x00"]}"#;
    let head = format!(
        "POST / HTTP/1.1\r\n{host}Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let (_, _, answer) = exchange(&mut TcpStream::connect(addr).await.unwrap(), &head, body).await;
    let answer: Value = serde_json::from_str(&answer).unwrap();
    assert_eq!(answer["error"]["code"], -32601, "not listed: {answer}");
    no_eth.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cors_headers_only_for_listed_origins() {
    let preflight = "OPTIONS / HTTP/1.1\r\nHost: localhost\r\nOrigin: http://app.example\r\n\
        Access-Control-Request-Method: POST\r\nAccess-Control-Request-Headers: content-type\r\n\
        Content-Length: 0\r\nConnection: close\r\n\r\n";
    let h = server(RpcConfig::default()).await;
    let addr = h.http_addr().unwrap();
    let (_, head, _) = exchange(&mut TcpStream::connect(addr).await.unwrap(), preflight, "").await;
    assert!(!head.contains("access-control-allow-origin"), "{head}");
    let (_, head, _) = post(
        addr,
        "Host: localhost\r\nOrigin: http://app.example\r\n",
        "eth_chainId",
    )
    .await;
    assert!(!head.contains("access-control-allow-origin"), "{head}");
    h.stop();

    let cors = server(RpcConfig {
        cors: CorsDomains::new(&["http://app.example"]),
        ..RpcConfig::default()
    })
    .await;
    let addr = cors.http_addr().unwrap();
    let (status, head, _) =
        exchange(&mut TcpStream::connect(addr).await.unwrap(), preflight, "").await;
    assert_eq!(status, 204, "{head}");
    assert!(
        head.contains("access-control-allow-origin: http://app.example"),
        "{head}"
    );
    assert!(
        head.contains("access-control-allow-headers: content-type"),
        "{head}"
    );
    let (status, head, body) = post(
        addr,
        "Host: localhost\r\nOrigin: http://app.example\r\n",
        "eth_chainId",
    )
    .await;
    assert_eq!((status, &body["result"]), (200, &json!("0x539")));
    assert!(
        head.contains("access-control-allow-origin: http://app.example"),
        "{head}"
    );
    let (_, head, _) = post(
        addr,
        "Host: localhost\r\nOrigin: http://evil.example\r\n",
        "eth_chainId",
    )
    .await;
    assert!(!head.contains("access-control-allow-origin"), "{head}");
    cors.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websockets_are_capped_per_address_and_in_all() {
    let h = server(RpcConfig {
        ws_connections: ConnLimits {
            total: 3,
            per_ip: 2,
        },
        ..RpcConfig::default()
    })
    .await;
    let addr = h.http_addr().unwrap();
    let (s1, _a) = upgrade([127, 0, 0, 1], addr, "").await;
    let (s2, b) = upgrade([127, 0, 0, 1], addr, "").await;
    assert_eq!((s1, s2), (101, 101));
    let (s3, _) = upgrade([127, 0, 0, 1], addr, "").await;
    assert_eq!(s3, 429, "a third from one address");
    let (s4, mut c) = upgrade([127, 0, 0, 2], addr, "").await;
    assert_eq!(s4, 101, "another address still gets in");
    assert_eq!(ws_call(&mut c, "eth_chainId").await["result"], "0x539");
    let (s5, _) = upgrade([127, 0, 0, 3], addr, "").await;
    assert_eq!(s5, 429, "past the total");
    // HTTP calls are not WebSockets: still served.
    let (status, _, _) = post(addr, "Host: localhost\r\n", "eth_chainId").await;
    assert_eq!(status, 200);
    // A closed WebSocket frees its slot.
    drop(b);
    let mut freed = false;
    for _ in 0..100 {
        if upgrade([127, 0, 0, 1], addr, "").await.0 == 101 {
            freed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(freed, "the slot of a closed WebSocket came back");
    h.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_are_capped_per_address() {
    let h = server(RpcConfig {
        connections: ConnLimits {
            total: 4,
            per_ip: 2,
        },
        ..RpcConfig::default()
    })
    .await;
    let addr = h.http_addr().unwrap();
    let _a = connect_from([127, 0, 0, 1], addr).await;
    let _b = connect_from([127, 0, 0, 1], addr).await;
    let mut c = connect_from([127, 0, 0, 1], addr).await;
    assert!(
        closed_within(&mut c, 5).await,
        "a third from one address is closed"
    );
    // Another address is served.
    let mut d = connect_from([127, 0, 0, 2], addr).await;
    let body = json!({"jsonrpc":"2.0","id":1,"method":"eth_chainId"}).to_string();
    let head = format!(
        "POST / HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    let (status, _, _) = exchange(&mut d, &head, &body).await;
    assert_eq!(status, 200);
    h.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_websocket_that_answers_no_ping_is_closed() {
    let h = server(RpcConfig {
        ws_ping_interval: Duration::from_millis(300),
        ..RpcConfig::default()
    })
    .await;
    let addr = h.http_addr().unwrap();
    let (status, mut ws) = upgrade([127, 0, 0, 1], addr, "").await;
    assert_eq!(status, 101);
    // This client reads (and so sees the pings) but never answers one.
    assert!(
        closed_within(&mut ws, 10).await,
        "a dead WebSocket stays open"
    );
    h.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_engine_port_checks_the_jwt_then_the_host() {
    let (chain, pool) = chain_and_pool();
    let payloads = PayloadService::new(chain.clone(), pool.clone());
    let ctx = EngineContext::new(
        chain.clone(),
        pool.clone(),
        payloads,
        moat_blockchain::maintain::spawn(&chain, &pool),
    );
    let secret = [7u8; 32];
    let handle = moat_rpc::start_engine(
        EngineConfig {
            addr: "127.0.0.1:0".parse().unwrap(),
            ..EngineConfig::new(secret)
        },
        ctx,
    )
    .await
    .unwrap();
    let addr = handle.local_addr();
    let auth = format!(
        "Authorization: Bearer {}\r\n",
        make_token(&secret, unix_now())
    );
    let (status, _, body) = post(
        addr,
        &format!("Host: localhost\r\n{auth}"),
        "engine_exchangeCapabilities",
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let (status, _, _) = post(
        addr,
        &format!("Host: cl.evil.example\r\n{auth}"),
        "engine_exchangeCapabilities",
    )
    .await;
    assert_eq!(status, 403, "--authrpc.vhosts defaults to localhost");
    let (status, _, _) = post(
        addr,
        "Host: cl.evil.example\r\n",
        "engine_exchangeCapabilities",
    )
    .await;
    assert_eq!(status, 401, "the JWT is checked first, as geth does");
    handle.stop();
}

/// One call on a kept-alive connection; the result or error object.
async fn call_on(s: &mut TcpStream, method: &str, params: Value) -> Value {
    let body = json!({"jsonrpc":"2.0","id":1,"method":method,"params":params}).to_string();
    let head = format!(
        "POST / HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    let (status, _, body) = exchange(s, &head, &body).await;
    assert_eq!(status, 200);
    serde_json::from_str(&body).unwrap()
}

#[tokio::test]
async fn a_connection_whose_submissions_are_mostly_refused_is_served_in_the_untrusted_lane() {
    use moat_sched::{self as lanes, Lane};
    let handle = server(RpcConfig::default()).await;
    let addr = handle.http_addr().unwrap();
    let mut flood = connect_from([127, 0, 0, 1], addr).await;
    // 64 refused submissions are forgiven: the connection is still trusted.
    for _ in 0..64 {
        let v = call_on(&mut flood, "eth_sendRawTransaction", json!(["0x00"])).await;
        assert!(v.get("error").is_some(), "{v}");
    }
    let before = lanes::units(Lane::Untrusted);
    call_on(&mut flood, "eth_chainId", json!([])).await;
    assert_eq!(lanes::units(Lane::Untrusted), before, "trusted after 64");
    // The 65th makes its record poor: its next requests run in the untrusted lane,
    // and are still answered.
    call_on(&mut flood, "eth_sendRawTransaction", json!(["0x00"])).await;
    for _ in 0..5 {
        let v = call_on(&mut flood, "eth_chainId", json!([])).await;
        assert_eq!(v["result"], "0x539");
    }
    assert!(lanes::units(Lane::Untrusted) >= before + 5);
    // Another connection of the same client keeps its own record: trusted.
    let mut honest = connect_from([127, 0, 0, 1], addr).await;
    let at = lanes::units(Lane::Untrusted);
    for _ in 0..5 {
        call_on(&mut honest, "eth_chainId", json!([])).await;
    }
    assert_eq!(lanes::units(Lane::Untrusted), at);
}
