//! The whole node against a hostile local user, as issue 17 reproduced it: slow request
//! bodies, a web page's Host and Origin, idle sockets past the open-file limit, idle
//! WebSockets, and the logs of the conformance chain's block 11 (20 MiB of JSON). Each
//! test runs a node on loopback and is bounded in time. (The p2p handshake flood and the
//! static-peer cap are in p2p.rs, next to its peers.)

mod common;

use common::{Node, free_port, import_ethtest, rpc, testdata, wait_for};
use serde_json::Value;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Raises this test process's own open-file limit: the tests hold thousands of sockets.
fn raise_own_fd_limit() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: plain calls on a struct we own.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max.min(1 << 20);
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}

/// A dev node on `http` with `extra` flags, started through `sh` with `ulimit` first
/// when `ulimit` is given (e.g. "-S -n 1024").
fn dev_node(http: u16, ulimit: Option<&str>, extra: &[&str]) -> Node {
    let auth = free_port().to_string();
    let http = http.to_string();
    let mut args = vec![
        "--dev",
        "--http.port",
        &http,
        "--authrpc.port",
        &auth,
        "--port",
        "0",
    ];
    args.extend_from_slice(extra);
    // Its datadir, removed after the node is killed (moat's own temporary one would be
    // left behind by the kill).
    let datadir = common::dev_datadir(&args);
    let datadir_arg = datadir
        .as_ref()
        .map(|d| d.path().to_str().unwrap().to_string());
    if let Some(d) = &datadir_arg {
        args.extend_from_slice(&["--datadir", d]);
    }
    let child = match ulimit {
        None => Command::new(env!("CARGO_BIN_EXE_moat"))
            .args(&args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn(),
        Some(limit) => Command::new("sh")
            .arg("-c")
            .arg(format!("ulimit {limit} && exec \"$0\" \"$@\""))
            .arg(env!("CARGO_BIN_EXE_moat"))
            .args(&args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn(),
    }
    .expect("moat starts");
    let node = Node(child, datadir);
    wait_for("the RPC server", || {
        rpc(http.parse().unwrap(), "eth_chainId", "[]")
    });
    node
}

/// A TCP connection to `port` from the loopback address `from`.
fn connect_from(from: [u8; 4], port: u16) -> std::io::Result<TcpStream> {
    // std has no bind-before-connect: go through tokio's socket on a small runtime.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let s = tokio::net::TcpSocket::new_v4()?;
        s.bind((Ipv4Addr::from(from), 0).into())?;
        let stream = s.connect(SocketAddr::from(([127, 0, 0, 1], port))).await?;
        stream.into_std()
    })
    .and_then(|s| {
        s.set_nonblocking(false)?;
        Ok(s)
    })
}

/// POSTs a call (Host: localhost) over `s`; (status, parsed body). `None` when the node
/// closes the connection or does not answer within 10 s.
fn call_over(mut s: TcpStream, method: &str) -> Option<(u16, Value)> {
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    let body = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"{method}","params":[]}}"#);
    write!(
        s,
        "POST / HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .ok()?;
    let mut answer = String::new();
    s.read_to_string(&mut answer).ok()?;
    let status = answer.split_whitespace().nth(1)?.parse().ok()?;
    let json = answer.split("\r\n\r\n").nth(1).unwrap_or_default();
    Some((status, serde_json::from_str(json).unwrap_or(Value::Null)))
}

/// `eth_blockNumber` from `from`: its status and how long it took.
fn timed_call(from: [u8; 4], port: u16) -> (Option<u16>, Duration) {
    let start = Instant::now();
    let status = connect_from(from, port)
        .ok()
        .and_then(|s| call_over(s, "eth_blockNumber"))
        .map(|(status, _)| status);
    (status, start.elapsed())
}

/// CPU seconds (user + system) the process has used.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command name (which may hold spaces) start at ") ".
    let rest = stat.rsplit_once(") ").unwrap().1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
    // SAFETY: sysconf has no preconditions.
    ticks / unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64
}

/// Waits until the process `pid` is idle (under a quarter of a CPU second in half a
/// second, at most 60 s): the work a node does once at start (the KZG trusted setup,
/// loaded on a thread of its own) is over before a test measures what idleness costs.
fn settled(pid: u32) {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let before = cpu_seconds(pid);
        std::thread::sleep(Duration::from_millis(500));
        if cpu_seconds(pid) - before < 0.25 {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the node is still busy 60 s after its start"
        );
    }
}

/// The soft and hard "Max open files" of a process.
fn fd_limits(pid: u32) -> (String, String) {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap();
    let f: Vec<&str> = line.split_whitespace().collect();
    (f[3].to_string(), f[4].to_string())
}

#[test]
fn slow_request_bodies_lock_no_client_out() {
    let port = free_port();
    // Fewer request slots than slow clients: before, each slow body held one.
    let node = dev_node(
        port,
        None,
        &[
            "--http.readtimeout",
            "3s",
            "--rpc.max-concurrent-requests",
            "64",
        ],
    );
    // 100 connections send their headers, a body length of 100000 and go silent.
    let mut slow = Vec::new();
    for _ in 0..100 {
        let mut s = connect_from([127, 0, 0, 1], port).unwrap();
        write!(
            s,
            "POST / HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{{\"jsonrpc\""
        )
        .unwrap();
        slow.push(s);
    }
    std::thread::sleep(Duration::from_millis(500));
    // Honest calls are answered at once (before: HTTP 429 for as long as they stay).
    for _ in 0..5 {
        let (status, took) = timed_call([127, 0, 0, 1], port);
        assert_eq!(status, Some(200));
        assert!(took < Duration::from_secs(2), "{took:?}");
    }
    // Past the read timeout the slow ones are answered 408 and closed.
    let start = Instant::now();
    for mut s in slow {
        s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
        let mut answer = String::new();
        let _ = s.read_to_string(&mut answer);
        assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    }
    assert!(start.elapsed() < Duration::from_secs(15));
    assert_eq!(timed_call([127, 0, 0, 1], port).0, Some(200));
    drop(node);
}

#[test]
fn a_web_page_cannot_drive_the_node() {
    let port = free_port();
    let _node = dev_node(port, None, &["--ws", "--ws.port", &port.to_string()]);
    let post = |host: &str, method: &str| {
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let body = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"{method}","params":[]}}"#);
        write!(
            s,
            "POST / HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut answer = String::new();
        s.read_to_string(&mut answer).unwrap();
        answer
    };
    // DNS rebinding: the page's domain arrives as Host.
    assert!(post("rebind.evil.example", "eth_chainId").starts_with("HTTP/1.1 403"));
    assert!(post(&format!("localhost:{port}"), "eth_chainId").starts_with("HTTP/1.1 200"));
    // admin_ is not served unless --http.api names it.
    assert!(post("localhost", "admin_nodeInfo").contains("-32601"));
    // A WebSocket from a page's origin is refused; one without an Origin is not.
    let upgrade = |origin: &str| {
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        write!(
            s,
            "GET / HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
             Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n{origin}\r\n"
        )
        .unwrap();
        let mut head = [0u8; 12];
        s.read_exact(&mut head).unwrap();
        String::from_utf8_lossy(&head).into_owned()
    };
    assert_eq!(upgrade("Origin: http://evil.example\r\n"), "HTTP/1.1 403");
    assert_eq!(upgrade(""), "HTTP/1.1 101");
    assert_eq!(upgrade("Origin: http://localhost:8080\r\n"), "HTTP/1.1 101");
}

#[test]
fn the_open_file_limit_is_raised_and_idle_sockets_lock_nothing() {
    raise_own_fd_limit();
    let port = free_port();
    // systemd's default soft limit.
    let node = dev_node(port, Some("-S -n 1024"), &[]);
    let pid = node.0.id();
    settled(pid);
    let (soft, hard) = fd_limits(pid);
    assert_eq!(soft, hard, "the soft limit is raised to the hard one");
    // 1100 idle connections: more than the soft limit moat was started with.
    let idle: Vec<TcpStream> = (0..1100)
        .map(|_| connect_from([127, 0, 0, 1], port).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    let cpu = cpu_seconds(pid);
    let (status, took) = timed_call([127, 0, 0, 1], port);
    assert_eq!(status, Some(200), "eth_blockNumber under 1100 idle sockets");
    assert!(took < Duration::from_secs(2), "{took:?}");
    std::thread::sleep(Duration::from_secs(2));
    let used = cpu_seconds(pid) - cpu;
    assert!(used < 1.0, "{used:.2} CPU seconds in 2 s while idle");
    drop(idle);
}

#[test]
fn a_low_hard_limit_caps_connections_instead_of_exhausting_descriptors() {
    raise_own_fd_limit();
    let port = free_port();
    // Soft and hard limits of 512: nothing to raise. The caps derived from it keep
    // descriptors free, and one address cannot take every connection.
    let node = dev_node(port, Some("-n 512"), &[]);
    let pid = node.0.id();
    settled(pid);
    assert_eq!(fd_limits(pid), ("512".into(), "512".into()));
    let idle: Vec<TcpStream> = (0..1100)
        .filter_map(|_| connect_from([127, 0, 0, 1], port).ok())
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    let cpu = cpu_seconds(pid);
    // Another client address is served at once (before: the accept loop spun on EMFILE
    // and every call timed out).
    let (status, took) = timed_call([127, 0, 0, 2], port);
    assert_eq!(status, Some(200));
    assert!(took < Duration::from_secs(2), "{took:?}");
    std::thread::sleep(Duration::from_secs(2));
    let used = cpu_seconds(pid) - cpu;
    assert!(
        used < 1.0,
        "{used:.2} CPU seconds in 2 s: a busy accept loop?"
    );
    drop(idle);
    // The flooding address is served again once its sockets are gone.
    wait_for("the flooding address to be served again", || {
        (timed_call([127, 0, 0, 1], port).0 == Some(200)).then_some(())
    });
}

#[test]
fn idle_websockets_lock_out_no_later_one() {
    raise_own_fd_limit();
    let port = free_port();
    // Before, open WebSockets were capped at the request slots + 100 (here 116).
    let _node = dev_node(
        port,
        None,
        &[
            "--ws",
            "--ws.port",
            &port.to_string(),
            "--rpc.max-concurrent-requests",
            "16",
        ],
    );
    let upgrade = || -> (String, TcpStream) {
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        write!(
            s,
            "GET / HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
             Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
        )
        .unwrap();
        let mut head = Vec::new();
        let mut b = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") && s.read_exact(&mut b).is_ok() {
            head.push(b[0]);
        }
        (String::from_utf8_lossy(&head).into_owned(), s)
    };
    // 150 idle WebSockets (before: the 117th and every later one got 429).
    let mut idle = Vec::new();
    for i in 0..150 {
        let (head, s) = upgrade();
        assert!(head.starts_with("HTTP/1.1 101"), "WebSocket {i}: {head}");
        idle.push(s);
    }
    let (head, mut ws) = upgrade();
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    // And it is served.
    let call = br#"{"jsonrpc":"2.0","id":1,"method":"eth_chainId","params":[]}"#;
    let mut frame = vec![0x81u8, 0x80 | call.len() as u8, 0, 0, 0, 0];
    frame.extend_from_slice(call);
    ws.write_all(&frame).unwrap();
    let v: Value = serde_json::from_slice(&read_text_frame(&mut ws)).unwrap();
    assert_eq!(v["result"], "0x539");
}

/// Reads server frames until a text frame comes and returns its payload. The server pings
/// each WebSocket as it opens and every interval after, so control frames (opcode 8 and
/// up) may come first; they are skipped.
fn read_text_frame(ws: &mut TcpStream) -> Vec<u8> {
    loop {
        let mut h = [0u8; 2];
        ws.read_exact(&mut h).unwrap();
        let len = match h[1] & 0x7f {
            126 => {
                let mut l = [0u8; 2];
                ws.read_exact(&mut l).unwrap();
                u16::from_be_bytes(l) as usize
            }
            127 => {
                let mut l = [0u8; 8];
                ws.read_exact(&mut l).unwrap();
                u64::from_be_bytes(l) as usize
            }
            n => n as usize,
        };
        let mut payload = vec![0u8; len];
        ws.read_exact(&mut payload).unwrap();
        match h[0] & 0x0f {
            0x1 => return payload,
            op if op >= 0x8 => continue,
            op => panic!("unexpected WebSocket opcode {op:#x}"),
        }
    }
}

#[test]
fn get_logs_returns_the_20_mib_of_block_11() {
    let dir = common::temp_path("hardening-logs");
    import_ethtest(&dir);
    let http = free_port();
    let auth = free_port().to_string();
    let genesis = testdata("genesis.json");
    let start = |extra: &[&str]| {
        let mut args = vec![
            "--network",
            genesis.to_str().unwrap(),
            "--datadir",
            dir.to_str().unwrap(),
            "--http",
            "--http.port",
        ];
        let http_s = http.to_string();
        args.push(&http_s);
        args.extend_from_slice(&["--authrpc.port", &auth, "--maxpeers", "0"]);
        args.extend_from_slice(extra);
        let node = Node::start(&args);
        wait_for("the RPC server", || rpc(http, "eth_chainId", "[]"));
        node
    };
    let logs = |from: &str, to: &str| {
        rpc(
            http,
            "eth_getLogs",
            &format!(r#"[{{"fromBlock":"{from}","toBlock":"{to}"}}]"#),
        )
        .expect("an answer")
    };
    let node = start(&[]);
    let v = logs("0xb", "0xb");
    let list = v["result"]
        .as_array()
        .unwrap_or_else(|| panic!("{}", &v.to_string()[..200.min(v.to_string().len())]));
    assert_eq!(list.len(), 56);
    let bytes = v["result"].to_string().len();
    assert!(bytes > 20 << 20, "{bytes} bytes");
    // Any range holding it too.
    let v = logs("0x1", "0x20");
    let in_11 = v["result"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| l["blockNumber"] == "0xb")
        .count();
    assert_eq!(in_11, 56);
    drop(node);

    // A smaller cap stops the query as it passes the cap, with jsonrpsee's error.
    let node = start(&["--rpc.max-response-size", "10"]);
    let started = Instant::now();
    let v = logs("0x1", "0x20");
    assert_eq!(v["error"]["code"], -32008, "{v}");
    assert_eq!(v["error"]["message"], "Response is too big", "{v}");
    assert!(started.elapsed() < Duration::from_secs(10));
    drop(node);
}

#[test]
fn http_is_served_only_when_asked_for_outside_dev_mode() {
    let dir = common::temp_path("hardening-http");
    let genesis = testdata("genesis.json");
    let (http, ws, auth) = (free_port(), free_port(), free_port());
    let (http_s, ws_s, auth_s) = (http.to_string(), ws.to_string(), auth.to_string());
    let base = [
        "--network",
        genesis.to_str().unwrap(),
        "--datadir",
        dir.to_str().unwrap(),
        "--http.port",
        &http_s,
        "--authrpc.port",
        &auth_s,
        "--maxpeers",
        "0",
    ];
    // As geth: no --http, no HTTP server (the engine port is up).
    let mut args = base.to_vec();
    args.extend_from_slice(&["--ws", "--ws.port", &ws_s]);
    let node = Node::start(&args);
    wait_for("the engine port", || {
        TcpStream::connect(("127.0.0.1", auth)).ok()
    });
    wait_for("the WebSocket port", || {
        TcpStream::connect(("127.0.0.1", ws)).ok()
    });
    assert!(
        TcpStream::connect(("127.0.0.1", http)).is_err(),
        "HTTP served without --http"
    );
    drop(node);
    let mut args = base.to_vec();
    args.push("--http");
    let _node = Node::start(&args);
    wait_for("the RPC server", || rpc(http, "eth_chainId", "[]"));
}
