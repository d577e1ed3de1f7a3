//! `moat-rpc-compat <tests>`: imports the suite's chain into a fresh datadir, starts the
//! client (moat or geth) on loopback without discovery, sends `headfcu.json` to its
//! engine API and runs every `.io` test against its HTTP JSON-RPC, as hive does.

use clap::{Parser, ValueEnum};
use moat_rpc_compat::{RpcTest, compare, load_test};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
enum Client {
    Moat,
    Geth,
}

#[derive(Parser)]
#[command(about = "Runs the execution-apis rpc-compat tests against moat or geth")]
struct Args {
    /// The suite's `tests` folder (chain.rlp, genesis.json, headfcu.json, <method>/*.io).
    tests: PathBuf,
    #[arg(long, value_enum, default_value = "moat")]
    client: Client,
    /// The client's binary (default: target/release/moat, or geth on PATH).
    #[arg(long)]
    bin: Option<PathBuf>,
    /// Only tests whose name (`method/case`) contains this.
    #[arg(long)]
    filter: Option<String>,
    #[arg(long, default_value_t = 18545)]
    http_port: u16,
    #[arg(long, default_value_t = 18551)]
    authrpc_port: u16,
    /// Print the difference of each failing test.
    #[arg(long, short)]
    verbose: bool,
    /// Keep the datadir (its path is printed) instead of removing it.
    #[arg(long)]
    keep: bool,
}

const JWT_SECRET: &str = "0x7365637265747365637265747365637265747365637265747365637265747365";

/// Posts one JSON body over a fresh HTTP/1.1 connection and returns the response body.
fn post(port: u16, body: &str, token: Option<&str>) -> Result<String, String> {
    let io = |e: std::io::Error| e.to_string();
    let stream = TcpStream::connect(("127.0.0.1", port)).map_err(io)?;
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .map_err(io)?;
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    let request = format!(
        "POST / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n{auth}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let mut reader = BufReader::new(stream);
    reader.get_mut().write_all(request.as_bytes()).map_err(io)?;
    let mut status = String::new();
    reader.read_line(&mut status).map_err(io)?;
    let mut length = None;
    let mut chunked = false;
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).map_err(io)?;
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            if name.eq_ignore_ascii_case("content-length") {
                length = value.trim().parse::<usize>().ok();
            }
            if name.eq_ignore_ascii_case("transfer-encoding") && value.contains("chunked") {
                chunked = true;
            }
        }
    }
    let mut body = Vec::new();
    if chunked {
        loop {
            let mut size = String::new();
            reader.read_line(&mut size).map_err(io)?;
            let n = usize::from_str_radix(size.trim(), 16).map_err(|e| e.to_string())?;
            if n == 0 {
                break;
            }
            let mut chunk = vec![0u8; n + 2];
            reader.read_exact(&mut chunk).map_err(io)?;
            body.extend_from_slice(&chunk[..n]);
        }
    } else if let Some(n) = length {
        body.resize(n, 0);
        reader.read_exact(&mut body).map_err(io)?;
    } else {
        reader.read_to_end(&mut body).map_err(io)?;
    }
    Ok(String::from_utf8_lossy(&body).into_owned())
}

fn run(cmd: &mut Command) -> Result<(), String> {
    let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{cmd:?} failed: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(())
}

/// Imports the chain and starts the client; returns the running process.
fn start(args: &Args, datadir: &Path, bin: &Path) -> Result<Child, String> {
    let genesis = args.tests.join("genesis.json");
    let chain = args.tests.join("chain.rlp");
    let jwt = datadir.join("jwt.hex");
    std::fs::write(&jwt, JWT_SECRET).map_err(|e| e.to_string())?;
    let log = std::fs::File::create(datadir.join("node.log")).map_err(|e| e.to_string())?;
    let log2 = log.try_clone().map_err(|e| e.to_string())?;
    let http = args.http_port.to_string();
    let auth = args.authrpc_port.to_string();
    let db = datadir.join("db");
    let mut cmd = match args.client {
        Client::Moat => {
            // As hive, a failed import does not stop the run: the node starts on what
            // it has.
            if let Err(e) = run(Command::new(bin)
                .arg("import")
                .arg("--network")
                .arg(&genesis)
                .arg("--datadir")
                .arg(&db)
                .arg(&chain))
            {
                eprintln!("warning: import failed: {e}");
            }
            let mut c = Command::new(bin);
            // Newer builds serve HTTP only when asked (`--http`, as geth).
            let help = Command::new(bin)
                .arg("--help")
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                .unwrap_or_default();
            if help.lines().any(|l| {
                let l = l.trim_start();
                l == "--http" || l.starts_with("--http ")
            }) {
                c.arg("--http");
            }
            if help.contains("--http.api") {
                c.args(["--http.api", "admin,debug,eth,net,txpool,web3,testing"]);
            }
            c.arg("--network")
                .arg(&genesis)
                .arg("--datadir")
                .arg(&db)
                .args(["--http.addr", "127.0.0.1", "--http.port", &http])
                .args(["--authrpc.addr", "127.0.0.1", "--authrpc.port", &auth])
                .arg("--authrpc.jwtsecret")
                .arg(&jwt)
                .args(["--nodiscover", "--maxpeers", "0"]);
            c
        }
        Client::Geth => {
            run(Command::new(bin)
                .arg("--datadir")
                .arg(&db)
                .arg("init")
                .arg(&genesis))?;
            run(Command::new(bin)
                .arg("--datadir")
                .arg(&db)
                .arg("import")
                .arg(&chain))?;
            let mut c = Command::new(bin);
            c.arg("--datadir")
                .arg(&db)
                .args(["--http", "--http.addr", "127.0.0.1", "--http.port", &http])
                .args(["--http.api", "admin,debug,eth,net,txpool,web3,testing"])
                .args(["--authrpc.addr", "127.0.0.1", "--authrpc.port", &auth])
                .arg("--authrpc.jwtsecret")
                .arg(&jwt)
                .args(["--nodiscover", "--maxpeers", "0", "--port", "0"])
                .args(["--syncmode", "full", "--networkid", "3503995874084926"]);
            c
        }
    };
    cmd.stdout(Stdio::from(log)).stderr(Stdio::from(log2));
    cmd.spawn().map_err(|e| format!("{cmd:?}: {e}"))
}

fn wait_ready(port: u16) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(60);
    let probe = r#"{"jsonrpc":"2.0","id":1,"method":"eth_chainId","params":[]}"#;
    while Instant::now() < deadline {
        if let Ok(body) = post(port, probe, None)
            && body.contains("result")
        {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    Err("the client's HTTP JSON-RPC did not come up in 60 s".into())
}

fn load_tests(root: &Path, filter: Option<&str>) -> Result<Vec<RpcTest>, String> {
    let mut tests = Vec::new();
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(root)
        .map_err(|e| e.to_string())?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    for dir in dirs {
        let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .map_err(|e| e.to_string())?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "io"))
            .collect();
        files.sort();
        for file in files {
            let name = format!(
                "{}/{}",
                dir.file_name().unwrap_or_default().to_string_lossy(),
                file.file_stem().unwrap_or_default().to_string_lossy()
            );
            if filter.is_some_and(|f| !name.contains(f)) {
                continue;
            }
            let text = std::fs::read_to_string(&file).map_err(|e| e.to_string())?;
            tests.push(load_test(&name, &text).map_err(|e| format!("{name}: {e}"))?);
        }
    }
    Ok(tests)
}

fn run_test(port: u16, test: &RpcTest) -> Result<(), String> {
    let mut response: Option<String> = None;
    for (send, data) in &test.messages {
        if *send {
            response = Some(post(port, data, None)?);
        } else {
            let resp = response
                .take()
                .ok_or("invalid test: response before request")?;
            compare(&resp, data, test.speconly)
                .map_err(|d| format!("{d}\n   got: {}", resp.trim()))?;
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    let args = Args::parse();
    let bin = args.bin.clone().unwrap_or_else(|| match args.client {
        Client::Moat => PathBuf::from("target/release/moat"),
        Client::Geth => PathBuf::from("geth"),
    });
    let tests = match load_tests(&args.tests, args.filter.as_deref()) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let datadir = std::env::temp_dir().join(format!(
        "moat-rpc-compat-{}-{}",
        std::process::id(),
        match args.client {
            Client::Moat => "moat",
            Client::Geth => "geth",
        }
    ));
    let _ = std::fs::remove_dir_all(&datadir);
    if let Err(e) = std::fs::create_dir_all(&datadir) {
        eprintln!("error: {e}");
        return ExitCode::FAILURE;
    }
    let mut child = match start(&args, &datadir, &bin) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let outcome = (|| -> Result<(usize, usize), String> {
        wait_ready(args.http_port)?;
        let fcu =
            std::fs::read_to_string(args.tests.join("headfcu.json")).map_err(|e| e.to_string())?;
        let secret = moat_rpc::engine::parse_jwt_secret(JWT_SECRET).map_err(|e| e.to_string())?;
        let token = moat_rpc::engine::make_token(&secret, moat_rpc::engine::unix_now());
        let reply = post(args.authrpc_port, &fcu, Some(&token))?;
        // hive fails only on an error reply; a SYNCING status lets the tests run.
        if !reply.contains("\"result\"") {
            return Err(format!("headfcu refused: {reply}"));
        }
        if !reply.contains("\"VALID\"") {
            eprintln!("warning: headfcu answered {}", reply.trim());
        }
        let mut passed = 0;
        for test in &tests {
            match run_test(args.http_port, test) {
                Ok(()) => {
                    passed += 1;
                    println!("PASS {}", test.name);
                }
                Err(e) => {
                    println!("FAIL {}", test.name);
                    if args.verbose {
                        for line in e.lines() {
                            println!("   {line}");
                        }
                    }
                }
            }
        }
        Ok((passed, tests.len()))
    })();
    let _ = child.kill();
    let _ = child.wait();
    if args.keep {
        println!("datadir kept at {}", datadir.display());
    } else {
        let _ = std::fs::remove_dir_all(&datadir);
    }
    match outcome {
        Ok((passed, total)) => {
            println!("{passed}/{total} passed");
            if passed == total {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
