//! `--plot FILE.png`: the micro benchmark's single-thread rows as one
//! horizontal bar chart of nanoseconds per call (log scale), kernel rows
//! red, walkfs with every optimization blue, each optimization off grey,
//! grouped by bench so each group reads like a seed's before/after.

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

/// Draw `rows` (those with `threads == 1`) into the PNG file `path`.
pub fn plot(rows: &[Row], path: &str) -> Result<(), String> {
    register_font()?;
    let mut bars: Vec<&Row> = rows.iter().filter(|r| r.threads == 1).collect();
    if bars.is_empty() {
        return Err("nothing to plot: no single-thread rows".into());
    }
    // Keep the run's order of benches, kernel first within each.
    let order: Vec<&str> = {
        let mut o: Vec<&str> = Vec::new();
        for r in &bars {
            if !o.contains(&r.bench) {
                o.push(r.bench);
            }
        }
        o
    };
    bars.sort_by_key(|r| {
        (
            order.iter().position(|b| *b == r.bench),
            r.target != "kernel",
        )
    });
    let ns: Vec<f64> = bars.iter().map(|r| 1e9 / r.ops_per_sec).collect();
    let lo = ns.iter().cloned().fold(f64::MAX, f64::min).max(0.1) / 2.0;
    let hi = ns.iter().cloned().fold(0.0, f64::max) * 3.0;
    let n = bars.len();
    let height = 120 + ROW_PX * n as u32;
    let err = |e: &dyn std::fmt::Display| format!("plot {path}: {e}");

    let root = BitMapBackend::new(path, (1100, height)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let (left, right) = root.split_horizontally(LABEL_PX);
    let mut chart = ChartBuilder::on(&right)
        .caption(
            "walkfs bench micro: ns per call, 1 thread (log scale; shorter is faster)",
            ("sans-serif", 18),
        )
        .margin(10)
        .x_label_area_size(30)
        .build_cartesian_2d((lo..hi).log_scale(), 0f64..n as f64)
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .disable_y_axis()
        .x_desc("ns per call")
        .x_label_style(("sans-serif", 13))
        .draw()
        .map_err(|e| err(&e))?;
    let grey = RGBColor(160, 160, 160);
    for (i, (r, &v)) in bars.iter().zip(&ns).enumerate() {
        // Row 0 at the top.
        let y = (n - 1 - i) as f64;
        let color = match (r.target, r.variant) {
            ("kernel", _) => RED,
            (_, "all") => BLUE,
            _ => grey,
        };
        chart
            .draw_series(std::iter::once(Rectangle::new(
                [(lo, y + 0.15), (v, y + 0.85)],
                color.filled(),
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
        let label = if r.target == "kernel" {
            format!("{}  kernel {}", r.bench, r.fs)
        } else {
            format!("{}  walkfs {} {}", r.bench, r.fs, r.variant)
        };
        left.draw(&Text::new(
            label,
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
