//! The regression gate (`make bench-check`): today's quick table against the committed
//! baseline, `docs/bench-baseline.json`.
//!
//! A slow or busy machine makes every row slower, so rows are not compared in
//! nanoseconds. The reference rows (raw secp256k1 recovery, keccak, c-kzg: fixed work
//! measured in the same run) give the machine's speed today against the baseline's day:
//! the geometric mean of their ratios. Each other row's ratio to its baseline is divided
//! by that factor. At [`WARN`] a row is reported; at [`FAIL`] the check fails, naming the
//! row, the baseline and today's figure.
//!
//! Rows that work over a large pool are bound by memory latency, not by the core: on a
//! shared host the last-level cache left to this machine moves them 2–4× while the
//! compute references hold still. They are marked [`Scale::Memory`] and divided by the
//! memory factor instead: the ratio of the memory reference rows (random dependent reads
//! over a buffer the size of such a pool), measured in the same run. A baseline without
//! a memory reference falls back to the compute factor.
//!
//! A row at [`FAIL`] is measured again before it fails the check: the table runs up to
//! [`ATTEMPTS`] times, and a row fails only if it is at [`FAIL`] in every attempt
//! ([`best_of`]). Each attempt is judged against its own references.
//!
//! Tail-latency rows (names with `p99`) are shown but never fail: a single slow
//! scheduling moment moves them more than any code change would.
//!
//! The baseline is written by `make bench-baseline` and changes only in a commit that says
//! why, with the figures before and after.

use serde_json::{Value, json};

/// A row's machine-adjusted ratio to its baseline from which it is reported.
pub(crate) const WARN: f64 = 1.5;
/// ... and from which the check fails.
pub(crate) const FAIL: f64 = 2.0;
/// How many times in all the table is measured while a row stays at [`FAIL`] or more.
pub(crate) const ATTEMPTS: usize = 3;

/// What bounds a row's time, so which references its figure is read against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scale {
    /// The core: compute references (the default).
    Cpu,
    /// Memory latency: the memory references.
    Memory,
}

/// One row as the table measured it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Figure {
    pub name: String,
    pub ns: f64,
    pub reference: bool,
    pub scale: Scale,
}

/// The machine's speed today against the baseline's day, per [`Scale`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Factors {
    pub cpu: f64,
    pub memory: f64,
}

impl Factors {
    fn of(&self, scale: Scale) -> f64 {
        match scale {
            Scale::Cpu => self.cpu,
            Scale::Memory => self.memory,
        }
    }
}

/// The verdict on one row.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Verdict {
    Ok,
    Warn,
    Fail,
    /// In today's table, not in the baseline.
    New,
    /// In the baseline, not measured today.
    Missing,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Compared {
    pub name: String,
    pub baseline_ns: Option<f64>,
    pub now_ns: Option<f64>,
    /// Today / baseline, divided by the machine factor.
    pub adjusted: Option<f64>,
    pub verdict: Verdict,
}

/// The baseline file's form: `{"rows": [{"name", "ns", "reference"}]}`.
pub(crate) fn to_json(figures: &[Figure]) -> Value {
    json!({
        "rows": figures
            .iter()
            .map(|f| {
                let mut row = json!({"name": f.name, "ns": f.ns, "reference": f.reference});
                if f.scale == Scale::Memory {
                    row["memory"] = json!(true);
                }
                row
            })
            .collect::<Vec<_>>(),
    })
}

pub(crate) fn from_json(v: &Value) -> Result<Vec<Figure>, String> {
    let rows = v["rows"].as_array().ok_or("baseline: no \"rows\" array")?;
    rows.iter()
        .map(|r| {
            Ok(Figure {
                name: r["name"]
                    .as_str()
                    .ok_or("baseline: a row without a name")?
                    .to_string(),
                ns: r["ns"]
                    .as_f64()
                    .filter(|ns| *ns > 0.0)
                    .ok_or("baseline: a row without a positive ns")?,
                reference: r["reference"].as_bool().unwrap_or(false),
                scale: if r["memory"].as_bool().unwrap_or(false) {
                    Scale::Memory
                } else {
                    Scale::Cpu
                },
            })
        })
        .collect()
}

/// The machine's speed today against the baseline's, per scale: geometric mean of that
/// scale's reference rows' ratios. The compute factor is 1.0 when no compute reference
/// is in both; the memory factor falls back to the compute one.
pub(crate) fn machine_factors(baseline: &[Figure], now: &[Figure]) -> Factors {
    let factor = |scale: Scale| {
        let ratios: Vec<f64> = now
            .iter()
            .filter(|f| f.reference && f.scale == scale)
            .filter_map(|f| {
                baseline
                    .iter()
                    .find(|b| b.name == f.name && b.reference && b.scale == scale)
                    .map(|b| f.ns / b.ns)
            })
            .collect();
        (!ratios.is_empty())
            .then(|| (ratios.iter().map(|r| r.ln()).sum::<f64>() / ratios.len() as f64).exp())
    };
    let cpu = factor(Scale::Cpu).unwrap_or(1.0);
    Factors {
        cpu,
        memory: factor(Scale::Memory).unwrap_or(cpu),
    }
}

/// The verdict on a row at `adjusted` times its baseline.
fn verdict_of(name: &str, adjusted: f64) -> Verdict {
    let gated = !name.contains("p99");
    if gated && adjusted >= FAIL {
        Verdict::Fail
    } else if adjusted >= WARN {
        Verdict::Warn
    } else {
        Verdict::Ok
    }
}

/// Two attempts' comparisons merged: each row keeps the attempt in which it came out
/// lowest against its baseline (machine speed aside), and its verdict is that attempt's.
/// A row fails only if it failed in both. Rows of `b` not in `a` are added.
pub(crate) fn best_of(a: Vec<Compared>, b: Vec<Compared>) -> Vec<Compared> {
    let mut out = a;
    for next in b {
        match out.iter_mut().find(|c| c.name == next.name) {
            Some(c) => {
                if let (Some(now), Some(then)) = (next.adjusted, c.adjusted)
                    && now < then
                {
                    *c = next;
                }
            }
            None => out.push(next),
        }
    }
    for c in &mut out {
        if let Some(adjusted) = c.adjusted {
            c.verdict = verdict_of(&c.name, adjusted);
        }
    }
    out
}

/// Every non-reference row of either table, compared, each against its scale's factor.
pub(crate) fn compare(baseline: &[Figure], now: &[Figure]) -> (Factors, Vec<Compared>) {
    let factors = machine_factors(baseline, now);
    let mut out = Vec::new();
    for f in now.iter().filter(|f| !f.reference) {
        let base = baseline.iter().find(|b| b.name == f.name);
        let (adjusted, verdict) = match base {
            None => (None, Verdict::New),
            Some(b) => {
                let adjusted = f.ns / b.ns / factors.of(f.scale);
                (Some(adjusted), verdict_of(&f.name, adjusted))
            }
        };
        out.push(Compared {
            name: f.name.clone(),
            baseline_ns: base.map(|b| b.ns),
            now_ns: Some(f.ns),
            adjusted,
            verdict,
        });
    }
    for b in baseline.iter().filter(|b| !b.reference) {
        if !now.iter().any(|f| f.name == b.name) {
            out.push(Compared {
                name: b.name.clone(),
                baseline_ns: Some(b.ns),
                now_ns: None,
                adjusted: None,
                verdict: Verdict::Missing,
            });
        }
    }
    (factors, out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fig(name: &str, ns: f64, reference: bool) -> Figure {
        Figure {
            name: name.to_string(),
            ns,
            reference,
            scale: Scale::Cpu,
        }
    }

    fn memory(name: &str, ns: f64, reference: bool) -> Figure {
        Figure {
            scale: Scale::Memory,
            ..fig(name, ns, reference)
        }
    }

    fn baseline() -> Vec<Figure> {
        vec![
            fig("ref: a", 100.0, true),
            fig("ref: b", 1000.0, true),
            fig("row x", 50.0, false),
            fig("row y", 10.0, false),
        ]
    }

    fn verdict(out: &[Compared], name: &str) -> Verdict {
        out.iter().find(|c| c.name == name).unwrap().verdict.clone()
    }

    #[test]
    fn a_machine_twice_as_slow_is_not_a_regression() {
        let now: Vec<Figure> = baseline()
            .into_iter()
            .map(|f| fig(&f.name, f.ns * 2.0, f.reference))
            .collect();
        let (factors, out) = compare(&baseline(), &now);
        assert!((factors.cpu - 2.0).abs() < 1e-9);
        assert_eq!(
            factors.memory, factors.cpu,
            "no memory reference: the compute factor"
        );
        assert!(out.iter().all(|c| c.verdict == Verdict::Ok));
    }

    #[test]
    fn a_row_slower_than_the_machine_warns_then_fails() {
        let mut now = baseline();
        now[2].ns = 50.0 * 1.6; // row x: 1.6x on an unchanged machine
        now[3].ns = 10.0 * 2.5; // row y: 2.5x
        let (_, out) = compare(&baseline(), &now);
        assert_eq!(verdict(&out, "row x"), Verdict::Warn);
        assert_eq!(verdict(&out, "row y"), Verdict::Fail);
    }

    #[test]
    fn tail_latency_rows_warn_but_never_fail() {
        let mut base = baseline();
        base.push(fig("latency p99", 100.0, false));
        let mut now = base.clone();
        now[4].ns = 100.0 * 3.0;
        let (_, out) = compare(&base, &now);
        assert_eq!(verdict(&out, "latency p99"), Verdict::Warn);
    }

    #[test]
    fn new_and_missing_rows_are_named_not_failed() {
        let mut now = baseline();
        now.remove(3);
        now.push(fig("row z", 1.0, false));
        let (_, out) = compare(&baseline(), &now);
        assert_eq!(verdict(&out, "row y"), Verdict::Missing);
        assert_eq!(verdict(&out, "row z"), Verdict::New);
    }

    #[test]
    fn a_row_fails_only_if_it_fails_in_every_attempt() {
        let mut first = baseline();
        first[2].ns = 50.0 * 2.5; // row x: noise in the first attempt only
        first[3].ns = 10.0 * 2.5; // row y: slow in both
        let mut second = baseline();
        second[3].ns = 10.0 * 2.2;
        let (_, a) = compare(&baseline(), &first);
        let (_, b) = compare(&baseline(), &second);
        assert_eq!(verdict(&a, "row x"), Verdict::Fail);
        let best = best_of(a, b);
        assert_eq!(verdict(&best, "row x"), Verdict::Ok);
        assert_eq!(verdict(&best, "row y"), Verdict::Fail);
        let y = best.iter().find(|c| c.name == "row y").unwrap();
        assert_eq!(y.now_ns, Some(22.0), "the better attempt's figure is shown");
    }

    #[test]
    fn an_attempt_on_a_slower_machine_is_judged_by_its_own_references() {
        // The second attempt ran with the whole machine at 3x: row x at 3x is no
        // regression there, so it clears the first attempt's 2.5x.
        let mut first = baseline();
        first[2].ns = 50.0 * 2.5;
        let second: Vec<Figure> = baseline()
            .into_iter()
            .map(|f| fig(&f.name, f.ns * 3.0, f.reference))
            .collect();
        let (_, a) = compare(&baseline(), &first);
        let (_, b) = compare(&baseline(), &second);
        assert_eq!(verdict(&best_of(a, b), "row x"), Verdict::Ok);
    }

    #[test]
    fn a_memory_bound_row_is_read_against_the_memory_reference() {
        let mut base = baseline();
        base.push(memory("ref: random reads", 100.0, true));
        base.push(memory("pool walk", 1000.0, false));
        // The cache left to this machine shrank: random reads at 3x, the compute
        // references unchanged. The walk at 3.6x is 1.2x of that; row x at 2.5x still fails.
        let mut now = base.clone();
        now[2].ns = 50.0 * 2.5;
        now[4].ns = 300.0;
        now[5].ns = 3600.0;
        let (factors, out) = compare(&base, &now);
        assert!((factors.cpu - 1.0).abs() < 1e-9);
        assert!((factors.memory - 3.0).abs() < 1e-9);
        let walk = out.iter().find(|c| c.name == "pool walk").unwrap();
        assert!((walk.adjusted.unwrap() - 1.2).abs() < 1e-9);
        assert_eq!(walk.verdict, Verdict::Ok);
        assert_eq!(verdict(&out, "row x"), Verdict::Fail);
        // A walk that got slower on its own still fails.
        now[5].ns = 7000.0;
        assert_eq!(verdict(&compare(&base, &now).1, "pool walk"), Verdict::Fail);
    }

    #[test]
    fn the_baseline_file_round_trips() {
        let json = to_json(&baseline());
        assert_eq!(from_json(&json).unwrap(), baseline());
        let mut with_memory = baseline();
        with_memory.push(memory("ref: random reads", 100.0, true));
        with_memory.push(memory("pool walk", 1000.0, false));
        assert_eq!(from_json(&to_json(&with_memory)).unwrap(), with_memory);
        assert!(from_json(&json!({"rows": [{"name": "x", "ns": 0.0}]})).is_err());
        assert!(from_json(&json!({})).is_err());
    }
}
