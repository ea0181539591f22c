//! Output helpers: JSON lines, aligned tables, medians, progress.

use std::io::Write;

/// The median of `v` (the mean of the middle two for an even count).
pub fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// The median of `samples`' seconds and the sample nearest it (whose
/// other figures, e.g. RPC counts, go with the median's row).
pub fn median_sample<T>(samples: &[T], seconds: impl Fn(&T) -> f64) -> (f64, Option<&T>) {
    let mut s: Vec<f64> = samples.iter().map(&seconds).collect();
    let m = median(&mut s);
    let nearest = samples
        .iter()
        .min_by(|a, b| (seconds(a) - m).abs().total_cmp(&(seconds(b) - m).abs()));
    (m, nearest)
}

/// Print rows as an aligned text table.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut width: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            if i < width.len() {
                width[i] = width[i].max(c.len());
            }
        }
    }
    let mut out = String::new();
    let line = |cells: Vec<&str>, out: &mut String| {
        let parts: Vec<String> = cells
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{:>w$}", c, w = width[i]))
            .collect();
        out.push_str(&parts.join("  "));
        out.push('\n');
    };
    line(header.to_vec(), &mut out);
    line(
        width
            .iter()
            .map(|w| "-".repeat(*w))
            .collect::<Vec<_>>()
            .iter()
            .map(String::as_str)
            .collect(),
        &mut out,
    );
    for r in rows {
        line(r.iter().map(String::as_str).collect(), &mut out);
    }
    out
}

/// A one-line progress indicator on stderr (rewritten in place).
pub fn progress(msg: &str) {
    if !is_tty() {
        return;
    }
    let mut e = std::io::stderr();
    let _ = write!(e, "\r\x1b[2K{msg}");
    let _ = e.flush();
}

pub fn progress_done() {
    if !is_tty() {
        return;
    }
    let mut e = std::io::stderr();
    let _ = write!(e, "\r\x1b[2K");
    let _ = e.flush();
}

fn is_tty() -> bool {
    use std::io::IsTerminal;
    std::io::stderr().is_terminal()
}
