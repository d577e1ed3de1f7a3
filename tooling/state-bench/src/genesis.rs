//! `genesis`: the base genesis (small, read whole) written field by field, its `alloc`
//! followed by the synthetic accounts, written one by one as they are made.

use crate::{Layout, slot_key, slot_value, synthetic_address};
use alloy_primitives::{Address, hex};
use serde_json::{Value, json};
use std::collections::HashSet;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

#[derive(clap::Args, Debug)]
pub(crate) struct GenesisArgs {
    /// Synthetic accounts to add.
    #[arg(long)]
    pub(crate) accounts: u64,
    #[command(flatten)]
    pub(crate) layout: Layout,
    /// The genesis whose config, header fields and allocation come first.
    #[arg(long, default_value = "../shared/testdata/ethtest/genesis.json")]
    pub(crate) base: PathBuf,
    /// Where to write the genesis ("-": standard output).
    #[arg(long)]
    pub(crate) out: PathBuf,
    /// Print the summary as one JSON line.
    #[arg(long)]
    pub(crate) json: bool,
}

/// 1 ether, in wei, as a JSON quantity.
const ONE_ETHER: &str = "0xde0b6b3a7640000";
/// The synthetic contracts' code: STOP.
const CODE: &str = "0x00";

pub(crate) fn run(args: &GenesisArgs) -> Result<ExitCode, String> {
    let started = Instant::now();
    let text = std::fs::read_to_string(&args.base)
        .map_err(|e| format!("cannot read {}: {e}", args.base.display()))?;
    let base: Value = serde_json::from_str(&text)
        .map_err(|e| format!("{} is not JSON: {e}", args.base.display()))?;
    let Some(fields) = base.as_object() else {
        return Err(format!("{} is not a JSON object", args.base.display()));
    };
    let empty = serde_json::Map::new();
    let base_alloc = fields
        .get("alloc")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    // A synthetic address equal to a base one would make a duplicate key: skip it.
    let taken: HashSet<Address> = base_alloc
        .keys()
        .filter_map(|k| k.trim_start_matches("0x").parse::<Address>().ok())
        .collect();

    let sink: Box<dyn Write> = if args.out.as_os_str() == "-" {
        Box::new(std::io::stdout().lock())
    } else {
        Box::new(
            File::create(&args.out)
                .map_err(|e| format!("cannot create {}: {e}", args.out.display()))?,
        )
    };
    let mut out = BufWriter::with_capacity(1 << 20, sink);
    let io = |e: std::io::Error| format!("cannot write {}: {e}", args.out.display());

    // Header fields and config in the base's order, alloc last.
    out.write_all(b"{\n").map_err(io)?;
    for (key, value) in fields.iter().filter(|(k, _)| *k != "alloc") {
        writeln!(out, "  {}: {},", json!(key), value).map_err(io)?;
    }
    out.write_all(b"  \"alloc\": {").map_err(io)?;
    let mut first = true;
    let mut sep = |out: &mut BufWriter<Box<dyn Write>>| -> std::io::Result<()> {
        let s: &[u8] = if first { b"\n    " } else { b",\n    " };
        first = false;
        out.write_all(s)
    };
    for (address, account) in base_alloc {
        sep(&mut out).map_err(io)?;
        write!(out, "{}: {}", json!(address), account).map_err(io)?;
    }

    let (mut contracts, mut slots, mut skipped) = (0u64, 0u64, 0u64);
    for i in 0..args.accounts {
        let address = synthetic_address(i);
        if taken.contains(&address) {
            skipped += 1;
            continue;
        }
        sep(&mut out).map_err(io)?;
        write!(
            out,
            "\"{}\": {{\"balance\": \"{ONE_ETHER}\"",
            hex::encode(address)
        )
        .map_err(io)?;
        if args.layout.is_contract(i) {
            contracts += 1;
            write!(out, ", \"code\": \"{CODE}\", \"storage\": {{").map_err(io)?;
            for j in 0..args.layout.slots_per_contract {
                let comma = if j == 0 { "" } else { ", " };
                write!(
                    out,
                    "{comma}\"{}\": \"0x{:064x}\"",
                    slot_key(j),
                    slot_value(i, j)
                )
                .map_err(io)?;
                slots += 1;
            }
            out.write_all(b"}").map_err(io)?;
        }
        out.write_all(b"}").map_err(io)?;
    }
    out.write_all(b"\n  }\n}\n").map_err(io)?;
    out.flush().map_err(io)?;
    drop(out);

    let bytes = if args.out.as_os_str() == "-" {
        None
    } else {
        std::fs::metadata(&args.out).ok().map(|m| m.len())
    };
    let secs = started.elapsed().as_secs_f64();
    let written = args.accounts - skipped;
    let report = if args.json {
        json!({
            "out": args.out.display().to_string(),
            "base_accounts": base_alloc.len(),
            "synthetic_accounts": written,
            "contracts": contracts,
            "slots": slots,
            "skipped": skipped,
            "bytes": bytes,
            "wall_s": secs,
        })
        .to_string()
    } else {
        let mut lines = vec![
            format!("base accounts:       {}", base_alloc.len()),
            format!("synthetic accounts:  {written} ({contracts} contracts, {slots} slots)"),
        ];
        if skipped > 0 {
            lines.push(format!(
                "skipped:             {skipped} (address already in the base)"
            ));
        }
        lines.push(format!(
            "written:             {} ({}) in {secs:.2} s",
            args.out.display(),
            bytes.map_or("standard output".into(), |b| format!(
                "{:.1} MB",
                b as f64 / 1e6
            ))
        ));
        lines.join("\n")
    };
    // The genesis itself may be on standard output: the summary goes beside it.
    if args.out.as_os_str() == "-" {
        eprintln!("{report}");
    } else {
        println!("{report}");
    }
    Ok(ExitCode::SUCCESS)
}
