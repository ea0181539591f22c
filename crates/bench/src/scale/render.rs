//! The report for people: a row per step, then the walkfs counters and
//! every failure.

use super::ScaleResult;
use crate::report::table;

/// The rows as a table, then each part's `walkfs stats` and what failed.
pub fn render(res: &ScaleResult) -> String {
    let opt = |v: Option<f64>, prec: usize| v.map(|x| format!("{x:.prec$}")).unwrap_or_default();
    let int = |v: Option<u64>| v.map(|x| x.to_string()).unwrap_or_default();
    let t: Vec<Vec<String>> = res
        .rows
        .iter()
        .map(|r| {
            let mut output = r.output.clone().unwrap_or_default();
            if let Some(l) = r.fd_limit_daemon.or(r.fd_limit_server) {
                output = format!("fd limit {l}");
            }
            if let Some(o) = r.ops_per_sec {
                output = format!("{output} {o:.0}/s");
            }
            vec![
                r.part.into(),
                r.step.clone(),
                r.fs.clone(),
                opt(r.seconds, 2),
                r.ratio_to_native
                    .map(|x| format!("{x:.2}x"))
                    .unwrap_or_default(),
                if r.ok { "ok" } else { "FAIL" }.into(),
                output.trim().to_string(),
                int(r.peak_fds_daemon),
                int(r.peak_fds_server),
                opt(r.peak_rss_daemon_mib, 1),
                opt(r.peak_rss_server_mib, 1),
            ]
        })
        .collect();
    let mut out = table(
        &[
            "part",
            "step",
            "fs",
            "seconds",
            "vs native",
            "check",
            "output",
            "fds daemon",
            "fds server",
            "RSS daemon MiB",
            "RSS server MiB",
        ],
        &t,
    );
    for r in &res.rows {
        if let Some(s) = &r.stats {
            out.push_str(&format!(
                "walkfs stats ({}): {} RPCs, {} dentries, {} backend lookups\n",
                r.part, s["total_rpcs"], s["vfs_dentries"], s["vfs_backend_lookups"]
            ));
        }
    }
    for r in res.rows.iter().filter(|r| !r.ok) {
        if let Some(e) = &r.error {
            out.push_str(&format!("FAIL {} {} {}: {e}\n", r.part, r.step, r.fs));
        }
    }
    out
}
