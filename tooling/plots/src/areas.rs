//! The four plots of docs/BENCHMARKS.md, one per area: what each reads and how it is drawn.
//!
//! Inputs are the benches' own JSON where the repository holds it (`docs/bench-baseline.json`,
//! written by `make bench-baseline`), and otherwise the small files of `docs/plots/data/`,
//! filled from the figures of docs/BENCHMARKS.md and naming the run they come from; their
//! fields are those of the tool that measured them (`moat-rpc-load --json`,
//! `moat-state-bench root --json`) so a new run's lines can be pasted in.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

use crate::svg::{
    BarChart, BarSeries, LineChart, LineSeries, Panel, Point, RefLine, Scale, figure, fmt_num,
    linear_from_zero, log_decades,
};

const MOAT: &str = "#1f5fa8";
const MOAT_LIGHT: &str = "#7fb2e5";
const GETH: &str = "#d95f02";
const GETH_LIGHT: &str = "#fdb97d";
const TYPICAL: &str = "#2e8b57";
const TYPICAL_LIGHT: &str = "#8fd19e";
const BASELINE: &str = "#666666";

/// Reads and parses a JSON file.
fn read<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<T, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// One node's honest p99s in one attack row.
#[derive(Deserialize, Debug, Clone, Copy)]
pub(crate) struct HonestP99 {
    pub peer_p99_ms: f64,
    pub rpc_p99_ms: f64,
}

/// One row of the attack table.
#[derive(Deserialize, Debug)]
pub(crate) struct AttackRow {
    pub row: String,
    pub moat: HonestP99,
    pub geth: Option<HonestP99>,
}

/// `docs/plots/data/attack.json`.
#[derive(Deserialize, Debug)]
pub(crate) struct Attack {
    pub source: String,
    pub target_p99_ms: f64,
    pub rows: Vec<AttackRow>,
}

/// The attack table's honest p99s, moat beside go-ethereum, on a log axis.
pub(crate) fn attack(data: &Attack) -> String {
    let (mut lo, mut hi) = (data.target_p99_ms, data.target_p99_ms);
    for r in &data.rows {
        for p in std::iter::once(r.moat).chain(r.geth) {
            lo = lo.min(p.peer_p99_ms).min(p.rpc_p99_ms);
            hi = hi.max(p.peer_p99_ms).max(p.rpc_p99_ms);
        }
    }
    let col = |f: fn(&AttackRow) -> Option<f64>| data.rows.iter().map(f).collect::<Vec<_>>();
    let chart = BarChart {
        title: "Honest p99 under each attack (lower is better)".into(),
        y_label: "honest p99, ms (log scale)".into(),
        scale: log_decades(lo, hi),
        categories: data.rows.iter().map(|r| r.row.clone()).collect(),
        series: vec![
            BarSeries {
                name: "moat, peer".into(),
                color: MOAT,
                values: col(|r| Some(r.moat.peer_p99_ms)),
            },
            BarSeries {
                name: "moat, RPC".into(),
                color: MOAT_LIGHT,
                values: col(|r| Some(r.moat.rpc_p99_ms)),
            },
            BarSeries {
                name: "go-ethereum, peer".into(),
                color: GETH,
                values: col(|r| r.geth.map(|g| g.peer_p99_ms)),
            },
            BarSeries {
                name: "go-ethereum, RPC".into(),
                color: GETH_LIGHT,
                values: col(|r| r.geth.map(|g| g.rpc_p99_ms)),
            },
        ],
        refs: vec![RefLine {
            value: data.target_p99_ms,
            label: format!("target: p99 ≤ {} ms", data.target_p99_ms),
        }],
        decimals: 2,
    };
    figure(
        "Under attack, honest traffic beside it",
        "Data: docs/plots/data/attack.json (the table in docs/BENCHMARKS.md). Regenerate: make plots",
        &data.source,
        &[Panel::Bars(chart)],
    )
}

/// The figures `moat-rpc-load --json` prints that the plot uses.
#[derive(Deserialize, Debug, Clone, Copy)]
pub(crate) struct RpcRun {
    pub tx_per_s: f64,
    pub p99_ms: f64,
}

/// One round: moat's run and go-ethereum's.
#[derive(Deserialize, Debug)]
pub(crate) struct RpcRound {
    pub round: u32,
    pub moat: RpcRun,
    pub geth: RpcRun,
}

/// `docs/plots/data/rpc-ingestion.json`.
#[derive(Deserialize, Debug)]
pub(crate) struct Rpc {
    pub source: String,
    pub target_p99_ms: f64,
    pub rounds: Vec<RpcRound>,
}

/// RPC ingestion, round by round: accepted tx/s and the calls' p99, two panels.
pub(crate) fn rpc(data: &Rpc) -> String {
    let categories: Vec<String> = data
        .rounds
        .iter()
        .map(|r| format!("round {}", r.round))
        .collect();
    let max_rate = data
        .rounds
        .iter()
        .map(|r| r.moat.tx_per_s.max(r.geth.tx_per_s))
        .fold(0.0, f64::max);
    let max_p99 = data
        .rounds
        .iter()
        .map(|r| r.moat.p99_ms.max(r.geth.p99_ms))
        .fold(data.target_p99_ms, f64::max);
    let rate = BarChart {
        title: "Accepted tx/s (higher is better)".into(),
        y_label: "tx/s".into(),
        scale: linear_from_zero(max_rate),
        categories: categories.clone(),
        series: vec![
            BarSeries {
                name: "moat".into(),
                color: MOAT,
                values: data.rounds.iter().map(|r| Some(r.moat.tx_per_s)).collect(),
            },
            BarSeries {
                name: "go-ethereum".into(),
                color: GETH,
                values: data.rounds.iter().map(|r| Some(r.geth.tx_per_s)).collect(),
            },
        ],
        refs: vec![],
        decimals: 0,
    };
    let p99 = BarChart {
        title: "Call latency p99 (lower is better)".into(),
        y_label: "p99, ms".into(),
        scale: linear_from_zero(max_p99),
        categories,
        series: vec![
            BarSeries {
                name: "moat".into(),
                color: MOAT,
                values: data.rounds.iter().map(|r| Some(r.moat.p99_ms)).collect(),
            },
            BarSeries {
                name: "go-ethereum".into(),
                color: GETH,
                values: data.rounds.iter().map(|r| Some(r.geth.p99_ms)).collect(),
            },
        ],
        refs: vec![RefLine {
            value: data.target_p99_ms,
            label: format!("target: p99 ≤ {} ms", data.target_p99_ms),
        }],
        decimals: 2,
    };
    figure(
        "RPC ingestion: eth_sendRawTransaction over 16 connections, at the most each node takes",
        "Data: docs/plots/data/rpc-ingestion.json (the table in docs/BENCHMARKS.md). Regenerate: make plots",
        &data.source,
        &[Panel::Bars(rate), Panel::Bars(p99)],
    )
}

/// One `moat-state-bench root --json` line, the fields the plot uses.
#[derive(Deserialize, Debug, Clone, Copy)]
pub(crate) struct RootRun {
    pub synthetic_accounts: u64,
    pub changed_accounts: u64,
    pub changed_slots: u64,
    pub workers: u64,
    pub p50_us: f64,
}

/// `docs/plots/data/state-root.json`.
#[derive(Deserialize, Debug)]
pub(crate) struct StateRoot {
    pub source: String,
    pub runs: Vec<RootRun>,
}

/// `docs/bench-baseline.json` as `moat-bench-table --json` writes it.
#[derive(Deserialize, Debug)]
pub(crate) struct Baseline {
    pub rows: Vec<BaselineRow>,
}

/// One row of the bench table.
#[derive(Deserialize, Debug)]
pub(crate) struct BaselineRow {
    pub name: String,
    pub ns: f64,
}

/// The bench table's state-root rows ("state root, 1.5k-acct block, 10k"): (accounts, ms).
pub(crate) fn baseline_state_root(b: &Baseline) -> Vec<(f64, f64)> {
    let mut out: Vec<(f64, f64)> = b
        .rows
        .iter()
        .filter_map(|r| {
            let size = r.name.strip_prefix("state root, 1.5k-acct block, ")?;
            let (num, mult) = match size.chars().last()? {
                'k' => (&size[..size.len() - 1], 1e3),
                'M' => (&size[..size.len() - 1], 1e6),
                _ => (size, 1.0),
            };
            Some((num.parse::<f64>().ok()? * mult, r.ns / 1e6))
        })
        .collect();
    out.sort_by(|a, b| a.0.total_cmp(&b.0));
    out
}

/// The median and range of each (block, workers) cell, by state size: a point per size.
pub(crate) fn root_points(runs: &[RootRun], accounts: u64, workers: u64) -> Vec<Point> {
    let mut by_size: BTreeMap<u64, Vec<f64>> = BTreeMap::new();
    for r in runs
        .iter()
        .filter(|r| r.changed_accounts == accounts && r.workers == workers)
    {
        by_size
            .entry(r.synthetic_accounts)
            .or_default()
            .push(r.p50_us / 1e3);
    }
    by_size
        .into_iter()
        .map(|(n, mut ms)| {
            ms.sort_by(f64::total_cmp);
            // The median of an odd count is one of the measured figures.
            let y = ms[(ms.len() - 1) / 2];
            Point {
                x: n as f64,
                y,
                lo: ms[0],
                hi: ms[ms.len() - 1],
            }
        })
        .collect()
}

/// The state-root update against the state's size, a line per block and thread count.
pub(crate) fn state_root(data: &StateRoot, baseline: Option<&Baseline>) -> String {
    let mut series = Vec::new();
    let mut blocks: Vec<(u64, u64)> = data
        .runs
        .iter()
        .map(|r| (r.changed_accounts, r.changed_slots))
        .collect();
    blocks.sort_unstable_by(|a, b| b.cmp(a));
    blocks.dedup();
    for (i, (accounts, slots)) in blocks.iter().enumerate() {
        for workers in [1, 2] {
            let points = root_points(&data.runs, *accounts, workers);
            if points.is_empty() {
                continue;
            }
            let color = match (i, workers) {
                (0, 1) => MOAT,
                (0, _) => MOAT_LIGHT,
                (_, 1) => TYPICAL,
                _ => TYPICAL_LIGHT,
            };
            let threads = if workers == 1 {
                "1 thread"
            } else {
                "2 threads"
            };
            series.push(LineSeries {
                name: format!(
                    "{} accts / {} slots, {threads}",
                    fmt_num(*accounts as f64, 0),
                    fmt_num(*slots as f64, 0)
                ),
                color,
                dashed: false,
                points,
            });
        }
    }
    if let Some(b) = baseline {
        let points: Vec<Point> = baseline_state_root(b)
            .into_iter()
            .map(|(x, y)| Point { x, y, lo: y, hi: y })
            .collect();
        if !points.is_empty() {
            series.push(LineSeries {
                name: "1,500 / 2,000, 1 thread: docs/bench-baseline.json".into(),
                color: BASELINE,
                dashed: true,
                points,
            });
        }
    }
    let all = series.iter().flat_map(|s| s.points.iter());
    let (min_x, max_x) = all
        .clone()
        .fold((f64::MAX, 0.0f64), |(lo, hi), p| (lo.min(p.x), hi.max(p.x)));
    let max_y = all.fold(0.0f64, |m, p| m.max(p.hi));
    let chart = LineChart {
        title: "State-root update of one block (median of three rounds; whiskers: their range)"
            .into(),
        x_label: "accounts in the state (log scale)".into(),
        y_label: "wall time, ms".into(),
        x: log_decades(min_x, max_x),
        y: linear_from_zero(max_y),
        series,
        decimals: 1,
    };
    figure(
        "State at scale: the state-root update against the state's size",
        "Data: docs/plots/data/state-root.json (moat-state-bench root --json, the table in docs/BENCHMARKS.md) and docs/bench-baseline.json. Regenerate: make plots",
        &data.source,
        &[Panel::Lines(chart)],
    )
}

/// One seed of the pool-quality table.
#[derive(Deserialize, Debug)]
pub(crate) struct Seed {
    pub seed: u32,
    pub ideal_ether: f64,
    pub moat_ether: f64,
    pub geth_ether: f64,
    pub moat_over_ideal: f64,
    pub geth_over_ideal: f64,
}

/// `docs/plots/data/pool-quality.json`.
#[derive(Deserialize, Debug)]
pub(crate) struct PoolQuality {
    pub source: String,
    pub seeds: Vec<Seed>,
}

impl PoolQuality {
    /// Each ratio is the table's, rounded to four places: it must agree with the values.
    pub(crate) fn check(&self) -> Result<(), String> {
        for s in &self.seeds {
            for (node, value, ratio) in [
                ("moat", s.moat_ether, s.moat_over_ideal),
                ("geth", s.geth_ether, s.geth_over_ideal),
            ] {
                if (value / s.ideal_ether - ratio).abs() > 1e-4 {
                    return Err(format!(
                        "pool-quality seed {}: {node} {value} / ideal {} is not {ratio}",
                        s.seed, s.ideal_ether
                    ));
                }
            }
        }
        Ok(())
    }
}

/// The built block's value as a share of the ideal block's, seed by seed.
pub(crate) fn pool_quality(data: &PoolQuality) -> String {
    let max = data
        .seeds
        .iter()
        .map(|s| s.moat_over_ideal.max(s.geth_over_ideal))
        .fold(1.0, f64::max);
    let chart = BarChart {
        title: "Block value / the ideal block's value (higher is better)".into(),
        y_label: "value / ideal".into(),
        scale: Scale::Linear {
            min: 0.0,
            max: (max * 10.0).ceil() / 10.0 + 0.1,
        },
        categories: data
            .seeds
            .iter()
            .map(|s| format!("seed {}", s.seed))
            .collect(),
        series: vec![
            BarSeries {
                name: "moat".into(),
                color: MOAT,
                values: data.seeds.iter().map(|s| Some(s.moat_over_ideal)).collect(),
            },
            BarSeries {
                name: "go-ethereum".into(),
                color: GETH,
                values: data.seeds.iter().map(|s| Some(s.geth_over_ideal)).collect(),
            },
        ],
        refs: vec![RefLine {
            value: 1.0,
            label: "the ideal block".into(),
        }],
        decimals: 4,
    };
    figure(
        "Pool quality: one payload built from a 13,000-tx stream, per seed",
        "Data: docs/plots/data/pool-quality.json (the table in docs/BENCHMARKS.md). Regenerate: make plots",
        &data.source,
        &[Panel::Bars(chart)],
    )
}

/// Reads every input under `data` (and `baseline`, when it exists) and writes the four SVGs
/// into `out`; returns the paths written.
pub(crate) fn write_all(data: &Path, baseline: &Path, out: &Path) -> Result<Vec<String>, String> {
    let base: Option<Baseline> = if baseline.exists() {
        Some(read(baseline)?)
    } else {
        None
    };
    let plots = [
        ("attack.svg", attack(&read(&data.join("attack.json"))?)),
        (
            "rpc-ingestion.svg",
            rpc(&read(&data.join("rpc-ingestion.json"))?),
        ),
        (
            "state-root.svg",
            state_root(&read(&data.join("state-root.json"))?, base.as_ref()),
        ),
        ("pool-quality.svg", {
            let pool: PoolQuality = read(&data.join("pool-quality.json"))?;
            pool.check()?;
            pool_quality(&pool)
        }),
    ];
    std::fs::create_dir_all(out).map_err(|e| format!("{}: {e}", out.display()))?;
    let mut written = Vec::new();
    for (name, svg) in plots {
        let path = out.join(name);
        std::fs::write(&path, svg).map_err(|e| format!("{}: {e}", path.display()))?;
        written.push(path.display().to_string());
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn repo() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
    }

    fn data<T: for<'de> Deserialize<'de>>(name: &str) -> T {
        read(&repo().join("docs/plots/data").join(name)).expect("the checked-in data parses")
    }

    #[test]
    fn attack_plot_has_a_bar_per_measured_p99() {
        let d: Attack = data("attack.json");
        assert!(!d.source.is_empty());
        let svg = attack(&d);
        let measured: usize = d
            .rows
            .iter()
            .map(|r| 2 + if r.geth.is_some() { 2 } else { 0 })
            .sum();
        assert_eq!(svg.matches("class=\"bar\"").count(), measured);
        assert_eq!(svg.matches("class=\"category\"").count(), d.rows.len());
        assert_eq!(
            svg.matches("class=\"missing\"").count(),
            4 * d.rows.len() - measured
        );
    }

    #[test]
    fn rpc_plot_has_two_panels_of_a_bar_per_node_and_round() {
        let d: Rpc = data("rpc-ingestion.json");
        let svg = rpc(&d);
        assert_eq!(svg.matches("class=\"bar\"").count(), 2 * 2 * d.rounds.len());
        assert_eq!(svg.matches("class=\"ref\"").count(), 1);
    }

    #[test]
    fn state_root_points_are_medians_of_the_rounds() {
        let d: StateRoot = data("state-root.json");
        let b: Baseline =
            read(&repo().join("docs/bench-baseline.json")).expect("the baseline parses");
        let one = root_points(&d.runs, 1500, 1);
        assert_eq!(
            one.iter().map(|p| p.x).collect::<Vec<_>>(),
            vec![1e4, 1e6, 1e7]
        );
        for p in &one {
            assert!(p.lo <= p.y && p.y <= p.hi, "{p:?}");
        }
        // Every plotted y is one of the runs' figures.
        for p in &one {
            assert!(d.runs.iter().any(|r| (r.p50_us / 1e3 - p.y).abs() < 1e-9));
        }
        let base = baseline_state_root(&b);
        assert!(!base.is_empty(), "the baseline has state-root rows");
        assert!(base.windows(2).all(|w| w[0].0 < w[1].0));
        let svg = state_root(&d, Some(&b));
        let cells = 4 * 3;
        assert_eq!(svg.matches("class=\"point\"").count(), cells + base.len());
        assert_eq!(svg.matches("class=\"line\"").count(), 5);
    }

    #[test]
    fn pool_quality_ratios_agree_with_the_values() {
        let d: PoolQuality = data("pool-quality.json");
        for s in &d.seeds {
            assert!(
                (s.moat_ether / s.ideal_ether - s.moat_over_ideal).abs() < 1e-4,
                "seed {}",
                s.seed
            );
            assert!(
                (s.geth_ether / s.ideal_ether - s.geth_over_ideal).abs() < 1e-4,
                "seed {}",
                s.seed
            );
        }
        let svg = pool_quality(&d);
        assert_eq!(svg.matches("class=\"bar\"").count(), 2 * d.seeds.len());
    }

    #[test]
    fn baseline_names_parse() {
        let b = Baseline {
            rows: vec![
                BaselineRow {
                    name: "state root, 1.5k-acct block, 1M".into(),
                    ns: 12e6,
                },
                BaselineRow {
                    name: "state root, 1.5k-acct block, 10k".into(),
                    ns: 9e6,
                },
                BaselineRow {
                    name: "pool: head change, 10k pooled".into(),
                    ns: 1.0,
                },
            ],
        };
        assert_eq!(baseline_state_root(&b), vec![(1e4, 9.0), (1e6, 12.0)]);
    }
}
