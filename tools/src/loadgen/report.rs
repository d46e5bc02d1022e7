//! What a load run leaves behind: percentiles as text and JSON, the
//! `.hgrm` percentile distribution (HdrHistogram's
//! `outputPercentileDistribution` text, as wrk2 prints it, readable by the
//! HdrHistogram plotter), and a percentile plot as a self-contained SVG.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::{Context, Result};
use hdrhistogram::Histogram;
use serde_json::{json, Value};

/// Latencies are recorded in microseconds, from 1 µs to 10 minutes.
pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 600_000_000, 3).expect("valid histogram bounds")
}

/// The percentiles every table and JSON record shows.
pub const PERCENTILES: [(f64, &str); 6] = [
    (50.0, "p50"),
    (90.0, "p90"),
    (99.0, "p99"),
    (99.9, "p99.9"),
    (99.99, "p99.99"),
    (100.0, "max"),
];

/// Microseconds as a short human figure.
pub fn human_us(us: u64) -> String {
    if us < 1_000 {
        format!("{us} µs")
    } else if us < 1_000_000 {
        format!("{:.2} ms", us as f64 / 1e3)
    } else {
        format!("{:.2} s", us as f64 / 1e6)
    }
}

/// One histogram as JSON: count, mean and the percentiles in microseconds.
pub fn summary_json(h: &Histogram<u64>) -> Value {
    let mut map = serde_json::Map::new();
    map.insert("count".into(), json!(h.len()));
    if h.is_empty() {
        return Value::Object(map);
    }
    map.insert("min_us".into(), json!(h.min()));
    map.insert("mean_us".into(), json!((h.mean() * 10.0).round() / 10.0));
    for (p, name) in PERCENTILES {
        let key = if name == "max" {
            "max_us".to_string()
        } else {
            format!("{}_us", name.replace('.', "_"))
        };
        map.insert(key, json!(h.value_at_percentile(p)));
    }
    Value::Object(map)
}

/// A row of the percentile table: name, count, then each percentile.
pub fn table_row(name: &str, h: &Histogram<u64>) -> String {
    let mut row = format!("{name:<16} {:>9}", h.len());
    for (p, _) in PERCENTILES {
        let cell = if h.is_empty() {
            "-".to_string()
        } else {
            human_us(h.value_at_percentile(p))
        };
        let _ = write!(row, " {cell:>10}");
    }
    row
}

/// The header of [`table_row`].
pub fn table_header() -> String {
    let mut row = format!("{:<16} {:>9}", "request", "count");
    for (_, name) in PERCENTILES {
        let _ = write!(row, " {name:>10}");
    }
    row
}

/// HdrHistogram's percentile distribution text, values in milliseconds
/// (recorded in microseconds, scaled by 1000), 5 ticks per half distance.
pub fn hgrm_text(h: &Histogram<u64>) -> String {
    let scale = 1000.0;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:>12} {:>14} {:>10} {:>14}\n",
        "Value", "Percentile", "TotalCount", "1/(1-Percentile)"
    );
    let mut total = 0u64;
    if !h.is_empty() {
        for v in h.iter_quantiles(5) {
            total += v.count_since_last_iteration();
            let value = h.highest_equivalent(v.value_iterated_to()) as f64 / scale;
            let q = v.quantile_iterated_to();
            if q < 1.0 {
                let _ = writeln!(
                    out,
                    "{value:12.3} {q:2.12} {total:10} {:14.2}",
                    1.0 / (1.0 - q)
                );
            } else {
                let _ = writeln!(out, "{value:12.3} {q:2.12} {total:10}");
            }
        }
    }
    let (mean, stdev, max) = if h.is_empty() {
        (0.0, 0.0, 0.0)
    } else {
        (
            h.mean() / scale,
            h.stdev() / scale,
            h.highest_equivalent(h.max()) as f64 / scale,
        )
    };
    // SubBuckets: 2^ceil(log2(2 * 10^sigfig)), as HdrHistogram sizes them.
    let single_unit = 2.0 * 10f64.powi(i32::from(h.sigfig()));
    let sub_buckets = 1u64 << (single_unit.log2().ceil() as u32);
    let _ = writeln!(
        out,
        "#[Mean    = {mean:12.3}, StdDeviation   = {stdev:12.3}]"
    );
    let _ = writeln!(
        out,
        "#[Max     = {max:12.3}, Total count    = {:12}]",
        h.len()
    );
    let _ = writeln!(
        out,
        "#[Buckets = {:12}, SubBuckets     = {sub_buckets:12}]",
        h.buckets()
    );
    out
}

pub fn write_hgrm(path: &Path, h: &Histogram<u64>) -> Result<()> {
    std::fs::write(path, hgrm_text(h)).with_context(|| format!("writing {}", path.display()))
}

/// The (x, y) points of a percentile curve: x = log10(1 / (1 - q)), y in ms.
fn curve(h: &Histogram<u64>, x_max: f64) -> Vec<(f64, f64)> {
    let mut points = Vec::new();
    if h.is_empty() {
        return points;
    }
    for v in h.iter_quantiles(5) {
        let q = v.quantile_iterated_to();
        let x = if q < 1.0 {
            (1.0 / (1.0 - q)).log10().min(x_max)
        } else {
            x_max
        };
        let y = h.highest_equivalent(v.value_iterated_to()) as f64 / 1000.0;
        points.push((x, y));
    }
    points
}

/// A round step for about `ticks` ticks up to `max`.
fn nice_step(max: f64, ticks: f64) -> f64 {
    let raw = (max / ticks).max(1e-9);
    let magnitude = 10f64.powf(raw.log10().floor());
    let fraction = raw / magnitude;
    let nice = if fraction <= 1.0 {
        1.0
    } else if fraction <= 2.0 {
        2.0
    } else if fraction <= 2.5 {
        2.5
    } else if fraction <= 5.0 {
        5.0
    } else {
        10.0
    };
    nice * magnitude
}

/// Percentile label of a decade on the x axis: 0 -> 0%, 1 -> 90%, 2 -> 99%...
fn decade_label(decade: u32) -> String {
    if decade == 0 {
        return "0%".into();
    }
    let nines = 100.0 - 100.0 / 10f64.powi(decade as i32);
    let text = format!("{nines:.*}", decade.saturating_sub(2) as usize);
    format!("{text}%")
}

/// Latency by percentile, one curve per histogram, on a log scale of
/// 1/(1-percentile) like the HdrHistogram plotter.
pub fn svg_plot(title: &str, series: &[(&str, &Histogram<u64>)]) -> String {
    const COLORS: [&str; 6] = [
        "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b",
    ];
    let (w, h) = (900.0, 520.0);
    let (left, right, top, bottom) = (80.0, 180.0, 50.0, 60.0);
    let (pw, ph) = (w - left - right, h - top - bottom);
    let most = series
        .iter()
        .map(|(_, s)| s.len())
        .max()
        .unwrap_or(0)
        .max(1);
    // Decades worth drawing: as many nines as the samples resolve, 2 to 6.
    let decades = ((most as f64).log10().ceil() as u32).clamp(2, 6);
    let x_max = f64::from(decades);
    let y_top = series
        .iter()
        .filter(|(_, s)| !s.is_empty())
        .map(|(_, s)| s.highest_equivalent(s.max()) as f64 / 1000.0)
        .fold(0.0, f64::max)
        .max(0.001);
    let step = nice_step(y_top, 6.0);
    let y_max = (y_top / step).ceil() * step;
    let px = |x: f64| left + x / x_max * pw;
    let py = |y: f64| top + ph - y / y_max * ph;
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(out, r#"<rect width="{w}" height="{h}" fill="white"/>"#);
    let _ = writeln!(
        out,
        r#"<text x="{}" y="24" text-anchor="middle" font-size="15">{}</text>"#,
        left + pw / 2.0,
        escape(title)
    );
    // Grid and ticks.
    let mut y = 0.0;
    while y <= y_max + step / 2.0 {
        let yy = py(y);
        let _ = writeln!(
            out,
            r##"<line x1="{left}" y1="{yy:.1}" x2="{:.1}" y2="{yy:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
            left + pw,
            left - 6.0,
            yy + 4.0,
            trim_number(y)
        );
        y += step;
    }
    for decade in 0..=decades {
        let xx = px(f64::from(decade));
        let _ = writeln!(
            out,
            r##"<line x1="{xx:.1}" y1="{top}" x2="{xx:.1}" y2="{:.1}" stroke="#ddd"/><text x="{xx:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
            top + ph,
            top + ph + 18.0,
            decade_label(decade)
        );
    }
    let _ = writeln!(
        out,
        r##"<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#444"/>"##
    );
    let _ = writeln!(
        out,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">percentile (log scale of 1/(1-p))</text>"#,
        left + pw / 2.0,
        h - 15.0
    );
    let _ = writeln!(
        out,
        r#"<text x="20" y="{:.1}" text-anchor="middle" transform="rotate(-90 20 {:.1})">latency (ms)</text>"#,
        top + ph / 2.0,
        top + ph / 2.0
    );
    for (i, (name, hist)) in series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let points = curve(hist, x_max);
        if !points.is_empty() {
            let mut path = String::new();
            for (j, (x, y)) in points.iter().enumerate() {
                let _ = write!(
                    path,
                    "{}{:.1},{:.1} ",
                    if j == 0 { "M" } else { "L" },
                    px(*x),
                    py(*y)
                );
            }
            let _ = writeln!(
                out,
                r#"<path d="{}" fill="none" stroke="{color}" stroke-width="2"/>"#,
                path.trim_end()
            );
        }
        let ly = top + 10.0 + 20.0 * i as f64;
        let lx = left + pw + 15.0;
        let _ = writeln!(
            out,
            r#"<line x1="{lx}" y1="{ly}" x2="{}" y2="{ly}" stroke="{color}" stroke-width="3"/><text x="{}" y="{}">{} ({})</text>"#,
            lx + 20.0,
            lx + 26.0,
            ly + 4.0,
            escape(name),
            hist.len()
        );
    }
    out.push_str("</svg>\n");
    out
}

pub fn write_svg(path: &Path, title: &str, series: &[(&str, &Histogram<u64>)]) -> Result<()> {
    std::fs::write(path, svg_plot(title, series))
        .with_context(|| format!("writing {}", path.display()))
}

fn trim_number(y: f64) -> String {
    let text = format!("{y:.3}");
    text.trim_end_matches('0').trim_end_matches('.').to_string()
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hgrm_and_svg_are_written() {
        let mut h = new_histogram();
        for v in 1..=10_000u64 {
            h.record(v * 10).unwrap();
        }
        let text = hgrm_text(&h);
        assert!(text.starts_with("       Value     Percentile TotalCount 1/(1-Percentile)\n\n"));
        assert!(text.contains("#[Max     ="));
        assert!(text.contains("Total count    =        10000]"));
        assert!(text.contains("SubBuckets     =         2048]"));
        let last_row = text
            .lines()
            .rfind(|l| !l.starts_with('#') && !l.is_empty())
            .unwrap();
        assert!(last_row.contains("1.000000000000"), "{last_row}");
        let svg = svg_plot("t", &[("all", &h)]);
        assert!(svg.contains("<path d=\"M"));
        assert!(svg.contains("99.99%"));
        assert_eq!(decade_label(1), "90%");
        assert_eq!(decade_label(3), "99.9%");
        let empty = new_histogram();
        assert!(hgrm_text(&empty).contains("Total count    =            0]"));
        assert!(svg_plot("t", &[("none", &empty)]).ends_with("</svg>\n"));
    }
}
