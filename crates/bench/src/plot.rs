//! `--plot FILE.png`: horizontal bar charts (log scale). The micro
//! benchmark's single-thread rows as nanoseconds per call, kernel rows
//! red, walkfs with every optimization blue, each optimization off grey,
//! grouped by bench so each group reads like a seed's before/after; the
//! build benchmark's seconds per file system.

use crate::micro::Row;
use plotters::prelude::*;
use plotters::style::FontStyle;

/// Fonts tried in order; Debian's fonts-dejavu-core provides the first.
const FONTS: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
];

fn register_font() -> Result<(), String> {
    for path in FONTS {
        if let Ok(bytes) = std::fs::read(path) {
            // The font registry wants 'static bytes; one leak per process.
            let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
            return plotters::style::register_font("sans-serif", FontStyle::Normal, bytes)
                .map_err(|_| format!("{path}: not a usable font"));
        }
    }
    Err(format!(
        "no font for the plot: install fonts-dejavu-core (looked for {})",
        FONTS.join(", ")
    ))
}

const ROW_PX: u32 = 22;
const LABEL_PX: i32 = 330;

/// One bar of a chart.
pub struct Bar {
    pub label: String,
    pub value: f64,
    pub color: RGBColor,
}

pub const KERNEL: RGBColor = RGBColor(220, 40, 40);
pub const WALKFS: RGBColor = RGBColor(40, 70, 220);
pub const OTHER: RGBColor = RGBColor(160, 160, 160);

/// The colour of a row by its file system: native red, walkfs blue, the
/// peers (bindfs, sshfs) grey.
pub fn fs_color(fs: &str) -> RGBColor {
    if fs == "native" {
        KERNEL
    } else if fs.starts_with("walkfs") {
        WALKFS
    } else {
        OTHER
    }
}

/// Draw `rows` (those with `threads == 1`) into the PNG file `path`.
pub fn plot(rows: &[Row], path: &str) -> Result<(), String> {
    let mut rows: Vec<&Row> = rows.iter().filter(|r| r.threads == 1).collect();
    if rows.is_empty() {
        return Err("nothing to plot: no single-thread rows".into());
    }
    // Keep the run's order of benches, kernel first within each.
    let order: Vec<&str> = {
        let mut o: Vec<&str> = Vec::new();
        for r in &rows {
            if !o.contains(&r.bench) {
                o.push(r.bench);
            }
        }
        o
    };
    rows.sort_by_key(|r| {
        (
            order.iter().position(|b| *b == r.bench),
            r.target != "kernel",
        )
    });
    let bars: Vec<Bar> = rows
        .iter()
        .map(|r| Bar {
            label: if r.target == "kernel" {
                format!("{}  kernel {}", r.bench, r.fs)
            } else {
                format!("{}  walkfs {} {}", r.bench, r.fs, r.variant)
            },
            value: 1e9 / r.ops_per_sec,
            color: match (r.target, r.variant) {
                ("kernel", _) => KERNEL,
                (_, "all") => WALKFS,
                _ => OTHER,
            },
        })
        .collect();
    bar_chart(
        path,
        "walkfs bench micro: ns per call, 1 thread (log scale; shorter is faster)",
        "ns per call",
        &bars,
    )
}

/// Horizontal bars (log scale), top to bottom in the order given, each
/// labelled on the left and with its value at its end.
pub fn bar_chart(path: &str, title: &str, x_desc: &str, bars: &[Bar]) -> Result<(), String> {
    register_font()?;
    if bars.is_empty() {
        return Err("nothing to plot".into());
    }
    let lo = bars
        .iter()
        .map(|b| b.value)
        .fold(f64::MAX, f64::min)
        .max(0.1)
        / 2.0;
    let hi = bars.iter().map(|b| b.value).fold(0.0, f64::max) * 3.0;
    let n = bars.len();
    let height = 120 + ROW_PX * n as u32;
    let err = |e: &dyn std::fmt::Display| format!("plot {path}: {e}");

    let root = BitMapBackend::new(path, (1100, height)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let (left, right) = root.split_horizontally(LABEL_PX);
    let mut chart = ChartBuilder::on(&right)
        .caption(title, ("sans-serif", 18))
        .margin(10)
        .x_label_area_size(30)
        .build_cartesian_2d((lo..hi).log_scale(), 0f64..n as f64)
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .disable_y_axis()
        .x_desc(x_desc)
        .x_label_style(("sans-serif", 13))
        .draw()
        .map_err(|e| err(&e))?;
    for (i, b) in bars.iter().enumerate() {
        // Bar 0 at the top.
        let y = (n - 1 - i) as f64;
        let v = b.value;
        chart
            .draw_series(std::iter::once(Rectangle::new(
                [(lo, y + 0.15), (v, y + 0.85)],
                b.color.filled(),
            )))
            .map_err(|e| err(&e))?;
        chart
            .draw_series(std::iter::once(Text::new(
                format!("{v:.1}"),
                (v * 1.05, y + 0.75),
                ("sans-serif", 12).into_font(),
            )))
            .map_err(|e| err(&e))?;
        // The label sits left of the chart, on the bar's pixel row.
        let (_, py) = chart.backend_coord(&(lo, y + 0.5));
        left.draw(&Text::new(
            b.label.clone(),
            (8, py - 7),
            ("sans-serif", 13).into_font(),
        ))
        .map_err(|e| err(&e))?;
    }
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_a_png() {
        register_font().expect("a font (scripts/test.sh installs fonts-dejavu-core)");
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("m.png");
        let row = |target, fs: &str, variant, ops| Row {
            bench: "access",
            target,
            fs: fs.into(),
            variant,
            threads: 1,
            ops_per_sec: ops,
            rpcs: None,
            rpcs_first: None,
        };
        let rows = vec![
            row("kernel", "ext4", "all", 3.0e6),
            row("walkfs", "hostfs", "all", 9.0e7),
            row("walkfs", "hostfs", "no-fastperm", 3.0e7),
        ];
        plot(&rows, path.to_str().expect("utf8")).expect("plot");
        let bytes = std::fs::read(&path).expect("read png");
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
        assert!(bytes.len() > 1000);
    }
}
