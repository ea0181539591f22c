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

/// The median of one figure of `samples`.
pub fn median_of<T>(samples: &[T], figure: impl Fn(&T) -> f64) -> f64 {
    median(&mut samples.iter().map(figure).collect::<Vec<f64>>())
}

/// The median of `samples`' seconds and the sample nearest it (whose
/// other figures, e.g. RPC counts, go with the median's row).
pub fn median_sample<T>(samples: &[T], seconds: impl Fn(&T) -> f64) -> (f64, Option<&T>) {
    let m = median_of(samples, &seconds);
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

/// Counts the runs of an interleaved benchmark on the progress line:
/// `LABEL: [N/TOTAL] what`.
pub struct Steps {
    label: &'static str,
    done: usize,
    total: usize,
}

impl Steps {
    pub fn new(label: &'static str, total: usize) -> Steps {
        Steps {
            label,
            done: 0,
            total,
        }
    }

    /// The next run starts: shown, and its number (from 1).
    pub fn next(&mut self, what: &str) -> usize {
        self.done += 1;
        progress(&format!(
            "{}: [{}/{}] {what}",
            self.label, self.done, self.total
        ));
        self.done
    }
}

/// The last `n` lines of `s`, in order (for an error message).
pub fn last_lines(s: &str, n: usize) -> Vec<&str> {
    let mut v: Vec<&str> = s.lines().rev().take(n).collect();
    v.reverse();
    v
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_and_tails() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(&mut []).is_nan());
        let v = [(1, 5.0), (2, 1.0), (3, 3.0)];
        assert_eq!(median_of(&v, |x| x.1), 3.0);
        let (m, mid) = median_sample(&v, |x| x.1);
        assert_eq!((m, mid.map(|x| x.0)), (3.0, Some(3)));
        assert_eq!(last_lines("a\nb\nc\n", 2), ["b", "c"]);
        assert_eq!(last_lines("a", 5), ["a"]);
        let mut s = Steps::new("t", 2);
        assert_eq!((s.next("x"), s.next("y")), (1, 2));
    }
}
