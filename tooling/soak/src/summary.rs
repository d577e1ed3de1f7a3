//! The end-of-run summary: per metric, the mean of each third of the run and whether it
//! levels off.
//!
//! The rule. The run's samples are split by time into thirds (`t < T/3`, `t < 2T/3`, the
//! rest; `T` is the time of the last sample). A metric's allowance is the larger of
//! `tolerance` × its middle-third mean and a floor of its own (its ordinary jitter: 8 MiB
//! of RSS, 8 fds, 4 threads, one slot's worth of offered transactions in the pool). It
//! levels off when both
//!
//! 1. the last-third mean exceeds the middle-third mean by at most the allowance, and
//! 2. the least-squares slope through the samples of the last half (`t >= T/2`),
//!    projected over one hour, is at most twice the allowance (with the defaults: it
//!    grows by less than 10 % an hour at the rate of the end of the run).
//!
//! The first condition catches growth that has not stopped by the middle of the run; the
//! second a slow steady climb that is still small between two thirds (0.5 MiB a minute
//! on 200 MiB is +2.4 % from the middle third to the last, but 15 % an hour). The first
//! third is warm-up (caches filling, the pool reaching its steady size) and is shown,
//! not judged. Falling is always fine. Fewer than two samples in a third, or three in
//! the last half, give no verdict.

/// One metric's series and how it is judged.
#[derive(Debug, Clone)]
pub(crate) struct Series {
    pub name: &'static str,
    pub unit: &'static str,
    /// The smallest allowance, in the metric's unit.
    pub floor: f64,
    /// (seconds into the run, value).
    pub points: Vec<(f64, f64)>,
}

/// What the rule found for one series.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Verdict {
    /// Means of the first, middle and last third.
    pub thirds: [f64; 3],
    /// Last-third mean minus middle-third mean.
    pub growth: f64,
    /// The last half's least-squares slope, per hour.
    pub per_hour: f64,
    pub allowance: f64,
    pub levels_off: bool,
}

fn mean(v: &[f64]) -> Option<f64> {
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

/// Least-squares slope of `points` (value per second); `None` for fewer than two
/// distinct times.
pub(crate) fn slope(points: &[(f64, f64)]) -> Option<f64> {
    let n = points.len() as f64;
    let mt = mean(&points.iter().map(|p| p.0).collect::<Vec<_>>())?;
    let mv = mean(&points.iter().map(|p| p.1).collect::<Vec<_>>())?;
    let sxx: f64 = points.iter().map(|p| (p.0 - mt).powi(2)).sum();
    let sxy: f64 = points.iter().map(|p| (p.0 - mt) * (p.1 - mv)).sum();
    (n >= 2.0 && sxx > 0.0).then(|| sxy / sxx)
}

/// The rule of the module doc over `series`; `None` when there are too few samples.
pub(crate) fn judge(series: &Series, tolerance: f64) -> Option<Verdict> {
    let end = series.points.iter().map(|p| p.0).fold(0.0, f64::max);
    if end <= 0.0 {
        return None;
    }
    let mut parts: [Vec<f64>; 3] = Default::default();
    for &(t, v) in &series.points {
        let i = if t < end / 3.0 {
            0
        } else if t < 2.0 * end / 3.0 {
            1
        } else {
            2
        };
        parts[i].push(v);
    }
    if parts.iter().any(|p| p.len() < 2) {
        return None;
    }
    let thirds = [mean(&parts[0])?, mean(&parts[1])?, mean(&parts[2])?];
    let half: Vec<(f64, f64)> = series
        .points
        .iter()
        .copied()
        .filter(|p| p.0 >= end / 2.0)
        .collect();
    if half.len() < 3 {
        return None;
    }
    let per_hour = slope(&half)? * 3600.0;
    let growth = thirds[2] - thirds[1];
    let allowance = (tolerance * thirds[1].abs()).max(series.floor);
    Some(Verdict {
        thirds,
        growth,
        per_hour,
        allowance,
        levels_off: growth <= allowance && per_hour <= 2.0 * allowance,
    })
}

/// The summary table: one row per series.
pub(crate) fn table(series: &[Series], tolerance: f64) -> (String, bool) {
    let mut out = format!(
        "{:<16} {:>12} {:>12} {:>12} {:>10} {:>10} {:>10}  verdict\n",
        "metric", "first 1/3", "middle 1/3", "last 1/3", "growth", "per hour", "allowed"
    );
    let mut all = true;
    for s in series {
        let name = format!("{} ({})", s.name, s.unit);
        match judge(s, tolerance) {
            Some(v) => {
                all &= v.levels_off;
                out.push_str(&format!(
                    "{name:<16} {:>12.1} {:>12.1} {:>12.1} {:>+10.1} {:>+10.1} {:>10.1}  {}\n",
                    v.thirds[0],
                    v.thirds[1],
                    v.thirds[2],
                    v.growth,
                    v.per_hour,
                    v.allowance,
                    if v.levels_off { "levels off" } else { "GROWS" }
                ));
            }
            None => {
                all = false;
                out.push_str(&format!("{name:<16} too few samples for a verdict\n"));
            }
        }
    }
    (out, all)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(floor: f64, f: impl Fn(f64) -> f64) -> Series {
        Series {
            name: "x",
            unit: "u",
            floor,
            // 30 minutes, a sample every 10 s.
            points: (0..=180)
                .map(|i| (i as f64 * 10.0, f(i as f64 * 10.0)))
                .collect(),
        }
    }

    #[test]
    fn a_curve_that_rises_then_flattens_levels_off() {
        // Warm-up to 200 over the first five minutes, flat after.
        let s = series(8.0, |t| 100.0 + 100.0 * (t / 300.0).min(1.0));
        let v = judge(&s, 0.05).unwrap();
        assert!(v.levels_off, "{v:?}");
        assert!(v.thirds[0] < v.thirds[1]);
        assert!((v.thirds[2] - 200.0).abs() < 1e-9);
        assert!(v.per_hour.abs() < 1e-9);
    }

    #[test]
    fn a_steady_leak_does_not_level_off_even_when_the_thirds_are_close() {
        // 200 MiB growing 0.5 MiB a minute: the last third is only 5 MiB (2.4 %) above
        // the middle one, within 5 %, but the slope is 30 MiB an hour, above twice the
        // allowance (2 × 10.4).
        let s = series(4.0, |t| 200.0 + 0.5 * t / 60.0);
        let v = judge(&s, 0.05).unwrap();
        assert!(v.growth <= v.allowance, "{v:?}");
        assert!((v.per_hour - 30.0).abs() < 1e-6, "{v:?}");
        assert!(!v.levels_off);
        // A leak big enough breaks the first condition too.
        let v = judge(&series(4.0, |t| 200.0 + 3.0 * t / 60.0), 0.05).unwrap();
        assert!(v.growth > v.allowance && !v.levels_off, "{v:?}");
    }

    #[test]
    fn noise_and_falls_level_off_and_the_floor_covers_small_counts() {
        // Thread counts jumping between 30 and 33: under the floor of 4.
        let s = series(4.0, |t| 30.0 + ((t / 10.0) as u64 % 4) as f64);
        assert!(judge(&s, 0.05).unwrap().levels_off);
        // Falling: fine.
        let s = series(4.0, |t| 1000.0 - t / 10.0);
        let v = judge(&s, 0.05).unwrap();
        assert!(v.growth < 0.0 && v.levels_off, "{v:?}");
        // One fd more every five minutes: growth 2 and 12 an hour, under the floor of 8
        // and twice it.
        let s = series(8.0, |t| 50.0 + (t / 300.0).floor());
        assert!(judge(&s, 0.05).unwrap().levels_off);
    }

    #[test]
    fn too_few_samples_give_no_verdict() {
        let s = Series {
            name: "x",
            unit: "u",
            floor: 1.0,
            points: vec![(0.0, 1.0), (10.0, 1.0), (20.0, 1.0)],
        };
        assert_eq!(judge(&s, 0.05), None);
        let (text, all) = table(&[s], 0.05);
        assert!(!all);
        assert!(text.contains("too few samples"));
    }

    #[test]
    fn slope_is_least_squares() {
        let pts = [(0.0, 1.0), (1.0, 3.0), (2.0, 5.0)];
        assert!((slope(&pts).unwrap() - 2.0).abs() < 1e-12);
        assert_eq!(slope(&[(1.0, 1.0), (1.0, 2.0)]), None);
    }
}
