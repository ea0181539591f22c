//! Part 2: a synthetic tree of N empty files, `find` and an lstat of
//! every file natively and through a fresh walkfs stack, and the memory
//! each walkfs process grew by, per file.

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::atomic::AtomicU64;
use std::time::Instant;

use super::cmd::run_cmd;
use super::sample::{sample, ProcSample, Sampler, DAEMON, SERVER};
use super::stack::{kill_pids, overall_row, target, Stack};
use super::tree::{cached_tree, stat_all, synth_dirs, watched};
use super::{step_limit, Row, ScaleOpts, ScaleResult};
use crate::report::progress;

/// The goal for daemon + server memory per cached file.
const TARGET_BYTES_PER_FILE: f64 = 300.0;

pub(super) fn synthetic(opts: &ScaleOpts, res: &mut ScaleResult) -> Result<(), String> {
    let n = opts.synthetic_files();
    let name = format!("synth-{n}");
    let (tree, made) = cached_tree(&name, &[String::new()], n)?;
    if let Some(s) = made {
        let mut row = Row::new("synthetic", "make-tree", "native");
        row.seconds = Some(s);
        row.files = Some(n);
        res.rows.push(row);
    }
    let want_count = n + synth_dirs(n) + 1;
    let mut native_secs: BTreeMap<&str, f64> = BTreeMap::new();
    let mut native_attrs: Vec<(u32, u64)> = Vec::new();
    for fs in ["native", "walkfs"] {
        // Best effort: a failed sync leaves the start warmer, not wrong.
        let _ = crate::proc::drop_caches();
        let mut stack = Stack::start_if(fs == "walkfs", &opts.walkfs, &tree, "synth", "synthetic")?;
        let (dir, pids) = target(stack.as_ref(), &tree);
        let sampler = Sampler::start(pids);
        let base: Vec<Option<ProcSample>> = pids.iter().map(|p| p.and_then(sample)).collect();
        let stuck = move || kill_pids(&pids);
        // `find MNT | wc -l`: every file, every directory and the root.
        progress(&format!("scale: synthetic on {fs}: find"));
        let limit = step_limit(native_secs.get("find").copied());
        let mut row = Row::new("synthetic", "find", fs);
        row.files = Some(n);
        sampler.begin();
        let r = run_cmd("find", Command::new("find").arg(&dir), limit, &stuck);
        row.peaks(&sampler.end());
        match r {
            Ok(r) => {
                row.seconds = Some(r.seconds);
                row.output = Some(r.lines.to_string());
                row.ratio_to_native = native_secs.get("find").map(|s| r.seconds / s);
                if fs == "native" {
                    native_secs.insert("find", r.seconds);
                }
                if r.lines != want_count {
                    let msg = format!(
                        "synthetic find on {fs}: {} entries, want {want_count}",
                        r.lines
                    );
                    res.fail_row(&mut row, msg);
                }
            }
            Err(e) => {
                row.failed(e.clone());
                res.fail(format!("synthetic find on {fs}: {e}"));
            }
        }
        let timed_out = row.timed_out();
        res.rows.push(row);
        // lstat of every file, here, checked against the native answers.
        let mut row = Row::new("synthetic", "stat-all", fs);
        row.files = Some(n);
        let dead = stack.as_mut().and_then(|s| {
            s.broken()
                .or_else(|| timed_out.then(|| "find ran out of time".to_string()))
        });
        if let Some(why) = &dead {
            row.failed(format!("not run: {why}"));
            res.fail(format!("synthetic on walkfs: the stack broke: {why}"));
            res.rows.push(row);
        } else {
            let done = AtomicU64::new(0);
            let want = &native_attrs;
            sampler.begin();
            let t0 = Instant::now();
            let ((got, probs), stalled) = watched(
                &format!("synthetic on {fs}: stat-all"),
                &done,
                n,
                &stuck,
                || stat_all(&dir, n, want, &done),
            )?;
            let secs = t0.elapsed().as_secs_f64();
            row.peaks(&sampler.end());
            row.seconds = Some(secs);
            row.ratio_to_native = native_secs.get("stat-all").map(|s| secs / s);
            row.errors = Some(probs.count);
            row.ops_per_sec = Some(n as f64 / secs);
            if fs == "native" {
                native_secs.insert("stat-all", secs);
                native_attrs = got;
            }
            if probs.count > 0 || stalled {
                let msg = format!(
                    "synthetic stat-all on {fs}: {} of {n} failed or differ{}: {}",
                    probs.count,
                    if stalled {
                        " (walkfs stalled and was killed)"
                    } else {
                        ""
                    },
                    probs.examples.join("; ")
                );
                res.fail_row(&mut row, msg);
            }
            res.rows.push(row);
            // Memory grown per file, from right after the mount to now;
            // meaningless unless every file was cached.
            if stack.is_some() && (stalled || probs.count > 0) {
                let mut row = Row::new("synthetic", "bytes-per-file", fs);
                row.failed("not measured: stat-all failed".into());
                res.rows.push(row);
            } else if stack.is_some() {
                let now: Vec<Option<ProcSample>> =
                    pids.iter().map(|p| p.and_then(sample)).collect();
                let per = |i: usize| -> Option<f64> {
                    let (a, b) = (base[i]?, now[i]?);
                    Some((b.rss_kib as f64 - a.rss_kib as f64) * 1024.0 / n as f64)
                };
                let mut row = Row::new("synthetic", "bytes-per-file", fs);
                row.files = Some(n);
                row.bytes_per_file_daemon = per(DAEMON);
                row.bytes_per_file_server = per(SERVER);
                if let (Some(d), Some(s)) = (row.bytes_per_file_daemon, row.bytes_per_file_server) {
                    row.bytes_per_file = Some(d + s);
                    row.output = Some(format!(
                        "daemon {d:.0} + server {s:.0} = {:.0} B/file (target <= {TARGET_BYTES_PER_FILE:.0}: {})",
                        d + s,
                        if d + s <= TARGET_BYTES_PER_FILE { "met" } else { "missed" }
                    ));
                }
                res.rows.push(row);
            }
        }
        if let Some(mut s) = stack.take() {
            let dead = s.broken();
            res.rows
                .push(overall_row("synthetic", &s, dead, &sampler, &opts.walkfs));
            drop(sampler);
            drop(s);
        }
    }
    Ok(())
}
