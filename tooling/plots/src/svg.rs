//! SVG written as text: axes (linear or logarithmic), grouped bar charts and line charts
//! with whiskers, legends and reference lines, laid out as one or more panels side by side
//! in a figure. The output is deterministic (same input, same bytes), so a regenerated
//! plot only shows in a diff when a figure changed.

use std::fmt::Write as _;

/// Width of one panel, in SVG user units (pixels).
pub(crate) const PANEL_WIDTH: f64 = 760.0;
/// Height of one panel.
pub(crate) const PANEL_HEIGHT: f64 = 420.0;

const MARGIN_LEFT: f64 = 70.0;
const MARGIN_RIGHT: f64 = 45.0;
const MARGIN_TOP: f64 = 78.0;
const MARGIN_BOTTOM: f64 = 70.0;
const REF_COLOR: &str = "#c00000";
const FONT: &str = "font-family=\"Helvetica, Arial, sans-serif\"";

/// A value axis: maps a value to a fraction of the axis' length (0 at `min`, 1 at `max`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Scale {
    /// Evenly spaced values.
    Linear { min: f64, max: f64 },
    /// Evenly spaced powers of ten; `min` must be positive.
    Log { min: f64, max: f64 },
}

impl Scale {
    /// The fraction of the axis at which `v` lies, clamped to the axis.
    pub(crate) fn frac(&self, v: f64) -> f64 {
        let f = match *self {
            Scale::Linear { min, max } => (v - min) / (max - min),
            Scale::Log { min, max } => {
                (v.max(f64::MIN_POSITIVE).log10() - min.log10()) / (max.log10() - min.log10())
            }
        };
        f.clamp(0.0, 1.0)
    }

    /// The lowest value the axis shows (where bars start).
    pub(crate) fn min(&self) -> f64 {
        match *self {
            Scale::Linear { min, .. } | Scale::Log { min, .. } => min,
        }
    }

    /// Tick values, ascending, all within the axis.
    pub(crate) fn ticks(&self) -> Vec<f64> {
        match *self {
            Scale::Linear { min, max } => {
                let step = nice_step((max - min) / 6.0);
                // k / (1 / step) for steps under 1: 3 / 5 is 0.6, where 3 * 0.2 is not.
                let at = |k: f64| {
                    if step < 1.0 {
                        k / (1.0 / step).round()
                    } else {
                        k * step
                    }
                };
                let first = (min / step - 1e-9).ceil() as i64;
                let last = (max / step + 1e-9).floor() as i64;
                (first..=last).map(|k| at(k as f64)).collect()
            }
            Scale::Log { min, max } => {
                let decades = (max / min).log10();
                let mults: &[f64] = if decades <= 2.5 {
                    &[1.0, 2.0, 5.0]
                } else {
                    &[1.0]
                };
                let mut out = Vec::new();
                let mut p = 10f64.powf(min.log10().floor());
                while p <= max * (1.0 + 1e-9) {
                    for m in mults {
                        let v = p * m;
                        if v >= min * (1.0 - 1e-9) && v <= max * (1.0 + 1e-9) {
                            out.push(v);
                        }
                    }
                    p *= 10.0;
                }
                out
            }
        }
    }
}

/// 1, 2 or 5 times a power of ten, at least `raw`.
fn nice_step(raw: f64) -> f64 {
    let mag = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw * (1.0 - 1e-9))
        .unwrap_or(10.0 * mag)
}

/// A linear axis from 0 to a nice value at or above `max`.
pub(crate) fn linear_from_zero(max: f64) -> Scale {
    let step = nice_step(max / 6.0);
    Scale::Linear {
        min: 0.0,
        max: (max / step).ceil() * step,
    }
}

/// A log axis spanning whole decades around `lo` and `hi`.
pub(crate) fn log_decades(lo: f64, hi: f64) -> Scale {
    Scale::Log {
        min: 10f64.powf(lo.log10().floor()),
        max: 10f64.powf(hi.log10().ceil()),
    }
}

/// `v` with exactly `decimals` decimals, thousands separated (as the tables print them).
pub(crate) fn fmt_fixed(v: f64, decimals: usize) -> String {
    let s = format!("{v:.decimals$}");
    let (sign, rest) = s.strip_prefix('-').map_or(("", s.as_str()), |r| ("-", r));
    let (int, frac) = rest
        .split_once('.')
        .map_or((rest, None), |(i, f)| (i, Some(f)));
    let mut grouped = String::new();
    for (i, c) in int.chars().enumerate() {
        if i > 0 && (int.len() - i) % 3 == 0 {
            grouped.push(',');
        }
        grouped.push(c);
    }
    match frac {
        Some(f) => format!("{sign}{grouped}.{f}"),
        None => format!("{sign}{grouped}"),
    }
}

/// `v` with up to `decimals` decimals, trailing zeros dropped, thousands separated.
pub(crate) fn fmt_num(v: f64, decimals: usize) -> String {
    let s = fmt_fixed(v, decimals);
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// A count as 10k, 1M, 2.5M.
pub(crate) fn fmt_count(v: f64) -> String {
    if v >= 1e6 {
        format!("{}M", fmt_num(v / 1e6, 2))
    } else if v >= 1e3 {
        format!("{}k", fmt_num(v / 1e3, 2))
    } else {
        fmt_num(v, 2)
    }
}

/// Text made safe for SVG content and attribute values.
pub(crate) fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            _ => out.push(c),
        }
    }
    out
}

/// A horizontal line across the plot at a value (a target, the ideal).
#[derive(Clone, Debug)]
pub(crate) struct RefLine {
    pub value: f64,
    pub label: String,
}

/// One series of a bar chart: a value per category, `None` where it was not measured.
#[derive(Clone, Debug)]
pub(crate) struct BarSeries {
    pub name: String,
    pub color: &'static str,
    pub values: Vec<Option<f64>>,
}

/// Bars grouped by category, one bar per series in each group.
#[derive(Clone, Debug)]
pub(crate) struct BarChart {
    pub title: String,
    pub y_label: String,
    pub scale: Scale,
    pub categories: Vec<String>,
    pub series: Vec<BarSeries>,
    pub refs: Vec<RefLine>,
    /// Decimals of the value printed on each bar.
    pub decimals: usize,
}

/// One point of a line: its value and, where several rounds were run, their range.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Point {
    pub x: f64,
    pub y: f64,
    pub lo: f64,
    pub hi: f64,
}

/// One line of a line chart.
#[derive(Clone, Debug)]
pub(crate) struct LineSeries {
    pub name: String,
    pub color: &'static str,
    pub dashed: bool,
    pub points: Vec<Point>,
}

/// Lines over a numeric x axis; each point with a whisker from `lo` to `hi`.
#[derive(Clone, Debug)]
pub(crate) struct LineChart {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub x: Scale,
    pub y: Scale,
    pub series: Vec<LineSeries>,
    /// Decimals of the value printed beside each point.
    pub decimals: usize,
}

/// `text` split at spaces into lines of at most `width` characters (a longer word alone).
pub(crate) fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    for word in text.split_whitespace() {
        match lines.last_mut() {
            Some(l) if l.chars().count() + 1 + word.chars().count() <= width => {
                l.push(' ');
                l.push_str(word);
            }
            _ => lines.push(word.to_string()),
        }
    }
    lines
}

/// What a figure's panel holds.
#[derive(Clone, Debug)]
pub(crate) enum Panel {
    Bars(BarChart),
    Lines(LineChart),
}

/// The plotting area of a panel placed at `left`.
struct Area {
    x0: f64,
    y0: f64,
    w: f64,
    h: f64,
}

impl Area {
    fn at(left: f64) -> Area {
        Area {
            x0: left + MARGIN_LEFT,
            y0: MARGIN_TOP,
            w: PANEL_WIDTH - MARGIN_LEFT - MARGIN_RIGHT,
            h: PANEL_HEIGHT - MARGIN_TOP - MARGIN_BOTTOM,
        }
    }
    /// The SVG y coordinate of a value.
    fn y(&self, scale: &Scale, v: f64) -> f64 {
        self.y0 + self.h * (1.0 - scale.frac(v))
    }
    fn x(&self, scale: &Scale, v: f64) -> f64 {
        self.x0 + self.w * scale.frac(v)
    }
}

/// A whole SVG document: a title, an optional note under the panels, the panels side by
/// side; `source` (which run the figures come from) goes into the document's `<desc>`.
pub(crate) fn figure(title: &str, note: &str, source: &str, panels: &[Panel]) -> String {
    let width = PANEL_WIDTH * panels.len() as f64;
    let note_lines = wrap(note, (width / 6.3) as usize);
    let height = PANEL_HEIGHT + 30.0 + 16.0 * note_lines.len() as f64 + 8.0;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" viewBox=\"0 0 {width} {height}\" {FONT}>"
    );
    let _ = writeln!(s, "<title>{}</title>", escape(title));
    if !source.is_empty() {
        let _ = writeln!(s, "<desc>{}</desc>", escape(source));
    }
    let _ = writeln!(
        s,
        "<rect x=\"0\" y=\"0\" width=\"{width}\" height=\"{height}\" fill=\"#ffffff\"/>"
    );
    let _ = writeln!(
        s,
        "<text x=\"{}\" y=\"22\" font-size=\"16\" font-weight=\"bold\" text-anchor=\"middle\">{}</text>",
        width / 2.0,
        escape(title)
    );
    let _ = writeln!(s, "<g transform=\"translate(0,30)\">");
    for (i, panel) in panels.iter().enumerate() {
        let left = PANEL_WIDTH * i as f64;
        match panel {
            Panel::Bars(c) => bars(&mut s, c, left),
            Panel::Lines(c) => lines(&mut s, c, left),
        }
    }
    let _ = writeln!(s, "</g>");
    for (i, line) in note_lines.iter().enumerate() {
        let _ = writeln!(
            s,
            "<text x=\"10\" y=\"{}\" font-size=\"11\" fill=\"#555555\">{}</text>",
            PANEL_HEIGHT + 30.0 + 16.0 * (i as f64 + 1.0),
            escape(line)
        );
    }
    s.push_str("</svg>\n");
    s
}

/// One legend entry: a stroke of `width` in `color`, dashed or not, and its name.
struct Legend {
    name: String,
    color: &'static str,
    width: f64,
    dashed: bool,
}

impl Legend {
    /// The entries of reference lines (drawn thin, red, dashed).
    fn refs(refs: &[RefLine]) -> impl Iterator<Item = Legend> + '_ {
        refs.iter().map(|r| Legend {
            name: r.label.clone(),
            color: REF_COLOR,
            width: 2.0,
            dashed: true,
        })
    }
}

/// The panel's title, y axis with grid and tick labels, and legend.
fn frame(s: &mut String, a: &Area, title: &str, y_label: &str, y: &Scale, legend: &[Legend]) {
    let _ = writeln!(
        s,
        "<text x=\"{}\" y=\"{}\" font-size=\"14\" font-weight=\"bold\" text-anchor=\"middle\">{}</text>",
        a.x0 + a.w / 2.0,
        16,
        escape(title)
    );
    // Legend: rows under the title, wrapped at the panel's width.
    let (mut lx, mut ly) = (a.x0, 36.0);
    for e in legend {
        let w = 30.0 + 6.2 * e.name.chars().count() as f64;
        if lx > a.x0 && lx + w > a.x0 + a.w {
            (lx, ly) = (a.x0, ly + 16.0);
        }
        let dash = if e.dashed {
            " stroke-dasharray=\"5,3\""
        } else {
            ""
        };
        let _ = writeln!(
            s,
            "<line class=\"legend\" x1=\"{lx:.1}\" y1=\"{ly}\" x2=\"{:.1}\" y2=\"{ly}\" stroke=\"{}\" stroke-width=\"{}\"{dash}/>",
            lx + 16.0,
            e.color,
            e.width
        );
        let _ = writeln!(
            s,
            "<text x=\"{:.1}\" y=\"{}\" font-size=\"11\">{}</text>",
            lx + 20.0,
            ly + 4.0,
            escape(&e.name)
        );
        lx += w;
    }
    for t in y.ticks() {
        let ty = a.y(y, t);
        let _ = writeln!(
            s,
            "<line class=\"grid\" x1=\"{}\" y1=\"{ty:.1}\" x2=\"{}\" y2=\"{ty:.1}\" stroke=\"#dddddd\"/>",
            a.x0,
            a.x0 + a.w
        );
        let _ = writeln!(
            s,
            "<text class=\"ytick\" x=\"{}\" y=\"{:.1}\" font-size=\"11\" text-anchor=\"end\">{}</text>",
            a.x0 - 6.0,
            ty + 4.0,
            fmt_num(t, 3)
        );
    }
    let _ = writeln!(
        s,
        "<text x=\"{}\" y=\"{}\" font-size=\"12\" text-anchor=\"middle\" transform=\"rotate(-90 {} {})\">{}</text>",
        a.x0 - 50.0,
        a.y0 + a.h / 2.0,
        a.x0 - 50.0,
        a.y0 + a.h / 2.0,
        escape(y_label)
    );
    let _ = writeln!(
        s,
        "<path d=\"M{} {} V{} H{}\" fill=\"none\" stroke=\"#333333\"/>",
        a.x0,
        a.y0,
        a.y0 + a.h,
        a.x0 + a.w
    );
}

/// Dashed horizontal lines with their labels.
fn ref_lines(s: &mut String, a: &Area, y: &Scale, refs: &[RefLine]) {
    for r in refs {
        let ry = a.y(y, r.value);
        let _ = writeln!(
            s,
            "<line class=\"ref\" x1=\"{}\" y1=\"{ry:.1}\" x2=\"{}\" y2=\"{ry:.1}\" stroke=\"{REF_COLOR}\" stroke-width=\"1.5\" stroke-dasharray=\"6,4\"><title>{}</title></line>",
            a.x0,
            a.x0 + a.w,
            escape(&r.label)
        );
    }
}

/// A category label under its group, split over two lines at a space when long.
fn category_label(s: &mut String, x: f64, y: f64, label: &str) {
    let words: Vec<&str> = label.split(' ').collect();
    let mut lines = vec![String::new()];
    for w in words {
        let count = lines.len();
        let cur = lines.last_mut().expect("one line at least");
        if !cur.is_empty() && cur.len() + w.len() > 14 && count < 3 {
            lines.push(w.to_string());
        } else {
            if !cur.is_empty() {
                cur.push(' ');
            }
            cur.push_str(w);
        }
    }
    let _ = write!(
        s,
        "<text class=\"category\" x=\"{x:.1}\" y=\"{y:.1}\" font-size=\"11\" text-anchor=\"middle\">"
    );
    for (i, l) in lines.iter().enumerate() {
        let dy = if i == 0 { 0.0 } else { 13.0 };
        let _ = write!(s, "<tspan x=\"{x:.1}\" dy=\"{dy}\">{}</tspan>", escape(l));
    }
    let _ = writeln!(s, "</text>");
}

fn bars(s: &mut String, c: &BarChart, left: f64) {
    let a = Area::at(left);
    let legend: Vec<Legend> = c
        .series
        .iter()
        .map(|x| Legend {
            name: x.name.clone(),
            color: x.color,
            width: 8.0,
            dashed: false,
        })
        .chain(Legend::refs(&c.refs))
        .collect();
    frame(s, &a, &c.title, &c.y_label, &c.scale, &legend);
    let groups = c.categories.len().max(1) as f64;
    let group_w = a.w / groups;
    let bar_w = group_w * 0.8 / c.series.len().max(1) as f64;
    let base = a.y(&c.scale, c.scale.min());
    // Under the bars and their labels.
    ref_lines(s, &a, &c.scale, &c.refs);
    for (gi, cat) in c.categories.iter().enumerate() {
        let gx = a.x0 + group_w * gi as f64 + group_w * 0.1;
        for (si, series) in c.series.iter().enumerate() {
            let bx = gx + bar_w * si as f64;
            let cx = bx + bar_w / 2.0;
            match series.values.get(gi).copied().flatten() {
                Some(v) => {
                    let top = a.y(&c.scale, v);
                    let _ = writeln!(
                        s,
                        "<rect class=\"bar\" x=\"{bx:.1}\" y=\"{top:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{}\"><title>{}: {}</title></rect>",
                        (bar_w - 1.0).max(1.0),
                        base - top,
                        series.color,
                        escape(&format!("{cat}, {}", series.name)),
                        fmt_num(v, c.decimals)
                    );
                    let _ = writeln!(
                        s,
                        "<text x=\"{cx:.1}\" y=\"{:.1}\" font-size=\"9\" text-anchor=\"start\" transform=\"rotate(-90 {cx:.1} {:.1})\" dominant-baseline=\"middle\">{}</text>",
                        top - 3.0,
                        top - 3.0,
                        fmt_fixed(v, c.decimals)
                    );
                }
                None => {
                    let _ = writeln!(
                        s,
                        "<text class=\"missing\" x=\"{cx:.1}\" y=\"{:.1}\" font-size=\"9\" fill=\"#888888\" text-anchor=\"start\" transform=\"rotate(-90 {cx:.1} {:.1})\" dominant-baseline=\"middle\">not run</text>",
                        base - 3.0,
                        base - 3.0
                    );
                }
            }
        }
        category_label(
            s,
            a.x0 + group_w * (gi as f64 + 0.5),
            a.y0 + a.h + 16.0,
            cat,
        );
    }
}

fn lines(s: &mut String, c: &LineChart, left: f64) {
    let a = Area::at(left);
    let legend: Vec<Legend> = c
        .series
        .iter()
        .map(|x| Legend {
            name: x.name.clone(),
            color: x.color,
            width: 2.5,
            dashed: x.dashed,
        })
        .collect();
    frame(s, &a, &c.title, &c.y_label, &c.y, &legend);
    for t in c.x.ticks() {
        let tx = a.x(&c.x, t);
        let _ = writeln!(
            s,
            "<line x1=\"{tx:.1}\" y1=\"{}\" x2=\"{tx:.1}\" y2=\"{}\" stroke=\"#333333\"/>",
            a.y0 + a.h,
            a.y0 + a.h + 5.0
        );
        let _ = writeln!(
            s,
            "<text class=\"xtick\" x=\"{tx:.1}\" y=\"{}\" font-size=\"11\" text-anchor=\"middle\">{}</text>",
            a.y0 + a.h + 18.0,
            fmt_count(t)
        );
    }
    let _ = writeln!(
        s,
        "<text x=\"{}\" y=\"{}\" font-size=\"12\" text-anchor=\"middle\">{}</text>",
        a.x0 + a.w / 2.0,
        a.y0 + a.h + 40.0,
        escape(&c.x_label)
    );
    for (si, series) in c.series.iter().enumerate() {
        // Labels above the points of even series, below those of odd ones.
        let label_dy = if si % 2 == 0 { -6.0 } else { 14.0 };
        let dash = if series.dashed {
            " stroke-dasharray=\"6,4\""
        } else {
            ""
        };
        let path: Vec<String> = series
            .points
            .iter()
            .map(|p| format!("{:.1},{:.1}", a.x(&c.x, p.x), a.y(&c.y, p.y)))
            .collect();
        let _ = writeln!(
            s,
            "<polyline class=\"line\" points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\"{dash}/>",
            path.join(" "),
            series.color
        );
        for p in &series.points {
            let (px, py) = (a.x(&c.x, p.x), a.y(&c.y, p.y));
            if p.hi > p.lo {
                let _ = writeln!(
                    s,
                    "<path d=\"M{:.1} {:.1} H{:.1} M{px:.1} {:.1} V{:.1} M{:.1} {:.1} H{:.1}\" stroke=\"{}\" fill=\"none\"/>",
                    px - 4.0,
                    a.y(&c.y, p.hi),
                    px + 4.0,
                    a.y(&c.y, p.hi),
                    a.y(&c.y, p.lo),
                    px - 4.0,
                    a.y(&c.y, p.lo),
                    px + 4.0,
                    series.color
                );
            }
            let _ = writeln!(
                s,
                "<circle class=\"point\" cx=\"{px:.1}\" cy=\"{py:.1}\" r=\"3.5\" fill=\"{}\"><title>{}: {} → {}</title></circle>",
                series.color,
                escape(&series.name),
                fmt_count(p.x),
                fmt_num(p.y, 2)
            );
            let _ = writeln!(
                s,
                "<text x=\"{:.1}\" y=\"{:.1}\" font-size=\"10\" fill=\"{}\">{}</text>",
                px + 6.0,
                py + label_dy,
                series.color,
                fmt_fixed(p.y, c.decimals)
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scales_are_monotonic_and_ticks_inside() {
        for scale in [
            Scale::Linear {
                min: 0.0,
                max: 20_000.0,
            },
            Scale::Linear { min: 0.0, max: 1.1 },
            Scale::Log {
                min: 0.1,
                max: 100.0,
            },
            Scale::Log { min: 1e4, max: 1e7 },
        ] {
            let (lo, hi) = match scale {
                Scale::Linear { min, max } | Scale::Log { min, max } => (min, max),
            };
            let mut last = -1.0;
            for i in 0..=100 {
                let v = lo + (hi - lo) * i as f64 / 100.0;
                let f = scale.frac(v);
                assert!(f >= last, "{scale:?}: frac({v}) = {f} < {last}");
                last = f;
            }
            assert_eq!(scale.frac(lo), 0.0);
            assert_eq!(scale.frac(hi), 1.0);
            let ticks = scale.ticks();
            assert!(ticks.len() >= 2, "{scale:?}: {ticks:?}");
            assert!(
                ticks.windows(2).all(|w| w[0] < w[1]),
                "{scale:?}: {ticks:?}"
            );
            assert!(
                ticks
                    .iter()
                    .all(|t| *t >= lo * (1.0 - 1e-9) && *t <= hi * (1.0 + 1e-9))
            );
        }
    }

    #[test]
    fn nice_axes() {
        assert_eq!(
            linear_from_zero(18_645.0),
            Scale::Linear {
                min: 0.0,
                max: 20_000.0
            }
        );
        assert_eq!(
            log_decades(0.3, 17.5),
            Scale::Log {
                min: 0.1,
                max: 100.0
            }
        );
        assert_eq!(
            Scale::Linear { min: 0.0, max: 1.0 }.ticks(),
            vec![0.0, 0.2, 0.4, 0.6, 0.8, 1.0]
        );
    }

    #[test]
    fn numbers_and_text() {
        assert_eq!(fmt_num(14981.0, 0), "14,981");
        assert_eq!(fmt_num(0.30000000000000004, 3), "0.3");
        assert_eq!(fmt_num(2.0, 2), "2");
        assert_eq!(fmt_count(10_000_000.0), "10M");
        assert_eq!(fmt_count(100_000.0), "100k");
        assert_eq!(escape("a < b & \"c\""), "a &lt; b &amp; &quot;c&quot;");
        assert_eq!(fmt_fixed(1.001, 4), "1.0010");
        assert_eq!(fmt_fixed(14981.0, 0), "14,981");
        assert_eq!(wrap("aa bb cc dd", 5), vec!["aa bb", "cc dd"]);
        assert!(wrap("", 5).is_empty());
    }

    fn chart(values: Vec<Vec<Option<f64>>>) -> BarChart {
        let n = values[0].len();
        BarChart {
            title: "t <&>".into(),
            y_label: "ms".into(),
            scale: Scale::Linear {
                min: 0.0,
                max: 10.0,
            },
            categories: (0..n).map(|i| format!("row {i}")).collect(),
            series: values
                .into_iter()
                .enumerate()
                .map(|(i, v)| BarSeries {
                    name: format!("s{i}"),
                    color: "#000000",
                    values: v,
                })
                .collect(),
            refs: vec![RefLine {
                value: 2.0,
                label: "target".into(),
            }],
            decimals: 2,
        }
    }

    /// The `height` attributes of the bars, in document order.
    fn bar_heights(svg: &str) -> Vec<f64> {
        svg.lines()
            .filter(|l| l.starts_with("<rect class=\"bar\""))
            .map(|l| {
                let h = l.split("height=\"").nth(1).expect("a height");
                h[..h.find('"').expect("quoted")].parse().expect("a number")
            })
            .collect()
    }

    #[test]
    fn one_bar_per_measured_value_heights_in_order() {
        let c = chart(vec![
            vec![Some(1.0), Some(2.0), Some(4.0), Some(8.0)],
            vec![Some(3.0), None, Some(5.0), None],
        ]);
        let svg = figure("f", "note", "a <run>", &[Panel::Bars(c)]);
        assert_eq!(svg.matches("class=\"bar\"").count(), 6);
        assert_eq!(svg.matches("class=\"missing\"").count(), 2);
        assert_eq!(svg.matches("class=\"category\"").count(), 4);
        assert_eq!(svg.matches("class=\"ref\"").count(), 1);
        let h = bar_heights(&svg);
        // Document order: category by category, series within.
        let first: Vec<f64> = [0, 2, 4, 5].iter().map(|i| h[*i]).collect();
        assert!(first.windows(2).all(|w| w[0] < w[1]), "{h:?}");
        assert!(
            (h[2] / h[0] - 2.0).abs() < 0.05,
            "linear: 2 is twice 1's height: {h:?}"
        );
        assert!(svg.contains("t &lt;&amp;&gt;") && !svg.contains("t <&>"));
        assert!(svg.contains("<desc>a &lt;run&gt;</desc>"));
        assert_eq!(svg.matches("<svg").count(), svg.matches("</svg>").count());
        assert_eq!(svg.matches("<text").count(), svg.matches("</text>").count());
        assert_eq!(svg.matches("<g").count(), svg.matches("</g>").count());
    }

    #[test]
    fn lines_have_a_point_each() {
        let c = LineChart {
            title: "root".into(),
            x_label: "accounts".into(),
            y_label: "ms".into(),
            x: Scale::Log { min: 1e4, max: 1e7 },
            y: Scale::Linear {
                min: 0.0,
                max: 20.0,
            },
            decimals: 1,
            series: vec![LineSeries {
                name: "a".into(),
                color: "#000000",
                dashed: false,
                points: [(1e4, 7.0), (1e6, 12.4), (1e7, 15.0)]
                    .iter()
                    .map(|(x, y)| Point {
                        x: *x,
                        y: *y,
                        lo: y - 0.5,
                        hi: y + 0.5,
                    })
                    .collect(),
            }],
        };
        let svg = figure("f", "", "", &[Panel::Lines(c)]);
        assert_eq!(svg.matches("class=\"point\"").count(), 3);
        assert_eq!(svg.matches("class=\"xtick\"").count(), 4);
        let cy: Vec<f64> = svg
            .lines()
            .filter(|l| l.starts_with("<circle"))
            .map(|l| {
                let v = l.split("cy=\"").nth(1).expect("cy");
                v[..v.find('"').expect("quoted")].parse().expect("a number")
            })
            .collect();
        // Larger values sit higher (smaller SVG y).
        assert!(cy.windows(2).all(|w| w[0] > w[1]), "{cy:?}");
    }
}
