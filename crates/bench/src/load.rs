//! `walkfs bench load`: many clients changing files at once through one
//! `walkfs serve`, and nothing lost (issue 6's load without loss).
//!
//! fsx-style: each client (its own 9P connection, `cache=loose`, a thread)
//! keeps a model of the files it owns and does random writes, reads,
//! truncates, creates, renames and unlinks, for a fixed time: its own
//! files live in a directory of its own and, under names that carry its
//! number, in directories every client changes at once. Every read is
//! compared with the model as it happens; after the run every file on the
//! host is compared with the model, byte for byte, and every shared
//! directory's listing with the union of the models. A row reports the
//! operations per second held, the errors (calls that failed) and the
//! mismatches (bytes or names that differ), both of which must be zero,
//! and the server's memory at the end.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use walkfs_source::SourceOptions;
use walkfs_vfs::{Creds, Ctx, AT_FDCWD};

use crate::proc::status_kib;
use crate::report::{progress, progress_done, table};

#[derive(Clone, Debug)]
pub struct LoadOpts {
    pub clients: usize,
    pub seconds: f64,
    /// The `walkfs` executable to start `walkfs serve` with.
    pub walkfs: PathBuf,
    pub seed: u64,
    /// The server holds every reply this long (`--reply-delay-us`): a slow
    /// link, under which nothing may be lost either.
    pub reply_delay_us: u64,
}

/// The result; the JSON form is exactly these fields.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    pub bench: &'static str,
    pub clients: usize,
    pub seconds: f64,
    pub reply_delay_us: u64,
    pub ops: u64,
    pub ops_per_sec: f64,
    /// Calls that failed.
    pub errors: u64,
    /// Reads, files or listings that differ from the model.
    pub mismatches: u64,
    /// Files checked at the end.
    pub files: usize,
    pub bytes_written: u64,
    /// The server's resident memory at the end, and its peak.
    pub server_rss_kib: u64,
    pub server_peak_kib: u64,
}

/// Directories every client changes.
const SHARED: usize = 4;
/// Largest file a client grows.
const MAX_SIZE: u64 = 64 * 1024;
/// Files a client keeps at most.
const MAX_FILES: usize = 12;

/// xorshift64*: reproducible from the seed, no dependency.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

#[derive(Default)]
struct Tally {
    ops: u64,
    errors: u64,
    mismatches: u64,
    bytes_written: u64,
    /// Path (relative to the export) -> content, at the end.
    files: BTreeMap<String, Vec<u8>>,
    first_problem: Option<String>,
}

impl Tally {
    fn problem(&mut self, what: String, mismatch: bool) {
        if mismatch {
            self.mismatches += 1;
        } else {
            self.errors += 1;
        }
        if self.first_problem.is_none() {
            self.first_problem = Some(what);
        }
    }
}

/// One client's run.
fn client(ctx: Ctx, id: usize, seed: u64, stop: &AtomicBool) -> Tally {
    let mut rng = Rng(seed ^ (id as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let mut t = Tally::default();
    let own = format!("/c{id}");
    if let Err(e) = ctx.mkdirat(AT_FDCWD, own.as_bytes(), 0o755) {
        t.problem(format!("mkdir {own}: {e}"), false);
        return t;
    }
    let mut serial = 0u64;
    let mut new_name = |rng: &mut Rng| {
        serial += 1;
        if rng.below(2) == 0 {
            format!("{own}/f{serial}")
        } else {
            format!("/shared{}/c{id}-{serial}", rng.below(SHARED as u64))
        }
    };
    let mut model: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    while !stop.load(Ordering::Relaxed) {
        t.ops += 1;
        let pick = |rng: &mut Rng, m: &BTreeMap<String, Vec<u8>>| {
            let n = m.len() as u64;
            (n > 0).then(|| m.keys().nth(rng.below(n) as usize).cloned())?
        };
        let op = rng.below(100);
        let target = if model.is_empty() || (op < 8 && model.len() < MAX_FILES) {
            None
        } else {
            pick(&mut rng, &model)
        };
        let Some(path) = target else {
            // Create, with some content.
            let path = new_name(&mut rng);
            let len = rng.below(4096) as usize;
            let data: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
            let r = ctx
                .openat(
                    AT_FDCWD,
                    path.as_bytes(),
                    libc::O_CREAT | libc::O_EXCL | libc::O_RDWR,
                    0o644,
                )
                .and_then(|fd| {
                    let w = ctx.pwrite(fd, &data, 0);
                    let _ = ctx.close(fd);
                    w
                });
            match r {
                Ok(n) if n == data.len() => {
                    t.bytes_written += n as u64;
                    model.insert(path, data);
                }
                Ok(n) => t.problem(format!("create {path}: short write {n}"), false),
                Err(e) => t.problem(format!("create {path}: {e}"), false),
            }
            continue;
        };
        match op {
            // Write somewhere in or past the end.
            0..=39 => {
                let cur = model.get_mut(&path).expect("picked from the model");
                let off = rng.below((cur.len() as u64 + 1).min(MAX_SIZE));
                let len = rng.below(8192).min(MAX_SIZE - off) as usize;
                let data: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
                let r = ctx
                    .openat(AT_FDCWD, path.as_bytes(), libc::O_RDWR, 0)
                    .and_then(|fd| {
                        let w = ctx.pwrite(fd, &data, off);
                        let _ = ctx.close(fd);
                        w
                    });
                match r {
                    Ok(n) if n == len => {
                        let end = off as usize + len;
                        if cur.len() < end {
                            cur.resize(end, 0);
                        }
                        cur[off as usize..end].copy_from_slice(&data);
                        t.bytes_written += n as u64;
                    }
                    Ok(n) => t.problem(format!("write {path}: short {n}"), false),
                    Err(e) => t.problem(format!("write {path}: {e}"), false),
                }
            }
            // Read a range and compare.
            40..=69 => {
                let cur = &model[&path];
                let off = rng.below(cur.len() as u64 + 1);
                let mut buf = vec![0u8; rng.below(8192) as usize + 1];
                let r = ctx
                    .openat(AT_FDCWD, path.as_bytes(), libc::O_RDONLY, 0)
                    .and_then(|fd| {
                        let n = ctx.pread(fd, &mut buf, off);
                        let _ = ctx.close(fd);
                        n
                    });
                match r {
                    Ok(n) => {
                        let want = &cur[off as usize..(off as usize + buf.len()).min(cur.len())];
                        if &buf[..n] != want {
                            t.problem(format!("read {path} at {off}: content differs"), true);
                        }
                    }
                    Err(e) => t.problem(format!("read {path}: {e}"), false),
                }
            }
            // Truncate, shorter or longer.
            70..=79 => {
                let len = rng.below(MAX_SIZE / 2);
                let r = ctx
                    .openat(AT_FDCWD, path.as_bytes(), libc::O_WRONLY, 0)
                    .and_then(|fd| {
                        let r = ctx.ftruncate(fd, len as i64);
                        let _ = ctx.close(fd);
                        r
                    });
                match r {
                    Ok(()) => {
                        if let Some(cur) = model.get_mut(&path) {
                            cur.resize(len as usize, 0);
                        }
                    }
                    Err(e) => t.problem(format!("truncate {path}: {e}"), false),
                }
            }
            // Rename, within or across directories (shared ones too).
            80..=91 => {
                let to = new_name(&mut rng);
                match ctx.renameat2(AT_FDCWD, path.as_bytes(), AT_FDCWD, to.as_bytes(), 0) {
                    Ok(()) => {
                        if let Some(v) = model.remove(&path) {
                            model.insert(to, v);
                        }
                    }
                    Err(e) => t.problem(format!("rename {path} -> {to}: {e}"), false),
                }
            }
            // Unlink.
            _ => match ctx.unlinkat(AT_FDCWD, path.as_bytes(), 0) {
                Ok(()) => {
                    model.remove(&path);
                }
                Err(e) => t.problem(format!("unlink {path}: {e}"), false),
            },
        }
    }
    t.files = model;
    t
}

/// Compare the host tree with the models: contents and shared listings.
fn verify(export: &Path, tallies: &[Tally], problems: &mut Vec<String>) -> (usize, u64) {
    let mut mismatches = 0;
    let mut files = 0;
    let mut shared: Vec<BTreeSet<String>> = vec![BTreeSet::new(); SHARED];
    for t in tallies {
        for (path, want) in &t.files {
            files += 1;
            let host = export.join(path.trim_start_matches('/'));
            match std::fs::read(&host) {
                Ok(got) if &got == want => {}
                Ok(got) => {
                    mismatches += 1;
                    problems.push(format!(
                        "{path}: {} bytes on the host, {} in the model",
                        got.len(),
                        want.len()
                    ));
                }
                Err(e) => {
                    mismatches += 1;
                    problems.push(format!("{path}: {e}"));
                }
            }
            if let Some(rest) = path.strip_prefix("/shared") {
                if let Some((k, name)) = rest.split_once('/') {
                    if let Ok(k) = k.parse::<usize>() {
                        shared[k].insert(name.to_string());
                    }
                }
            }
        }
    }
    for (k, want) in shared.iter().enumerate() {
        let got: BTreeSet<String> = std::fs::read_dir(export.join(format!("shared{k}")))
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        if &got != want {
            mismatches += 1;
            problems.push(format!(
                "shared{k}: {} names on the host, {} in the models",
                got.len(),
                want.len()
            ));
        }
    }
    (files, mismatches)
}

pub fn run(opts: &LoadOpts) -> Result<(Row, Vec<String>), String> {
    let tmp = tempfile::tempdir().map_err(|e| format!("tempdir: {e}"))?;
    let export = tmp.path().join("export");
    for k in 0..SHARED {
        std::fs::create_dir_all(export.join(format!("shared{k}")))
            .map_err(|e| format!("mkdir: {e}"))?;
    }
    let sock = tmp.path().join("s.sock");
    let delay = opts.reply_delay_us.to_string();
    let server =
        crate::proc::walkfs_serve(&opts.walkfs, &export, &sock, &["--reply-delay-us", &delay])?;
    let source = format!("unix:{}", sock.display());
    let o = SourceOptions::parse("cache=loose").map_err(|e| e.to_string())?;
    let mut ctxs = Vec::new();
    for i in 0..opts.clients {
        let vfs = walkfs_source::open(&source, &o).map_err(|e| format!("client {i}: {e}"))?;
        ctxs.push(vfs.context(Creds::root()));
    }
    let stop = Arc::new(AtomicBool::new(false));
    let t0 = Instant::now();
    let handles: Vec<_> = ctxs
        .into_iter()
        .enumerate()
        .map(|(i, ctx)| {
            let stop = Arc::clone(&stop);
            let seed = opts.seed;
            std::thread::spawn(move || client(ctx, i, seed, &stop))
        })
        .collect();
    let total = Duration::from_secs_f64(opts.seconds);
    while t0.elapsed() < total {
        progress(&format!(
            "load: {} clients, {:.0}/{:.0} s",
            opts.clients,
            t0.elapsed().as_secs_f64(),
            opts.seconds
        ));
        std::thread::sleep(Duration::from_millis(200).min(total.saturating_sub(t0.elapsed())));
    }
    stop.store(true, Ordering::Relaxed);
    let mut tallies = Vec::new();
    for h in handles {
        tallies.push(
            h.join()
                .map_err(|_| "a client thread panicked".to_string())?,
        );
    }
    let secs = t0.elapsed().as_secs_f64();
    progress_done();
    let pid = server.0.id();
    let (rss, peak) = (status_kib(pid, "VmRSS"), status_kib(pid, "VmHWM"));
    let mut problems: Vec<String> = tallies
        .iter()
        .filter_map(|t| t.first_problem.clone())
        .collect();
    let (files, end_mismatches) = verify(&export, &tallies, &mut problems);
    let ops: u64 = tallies.iter().map(|t| t.ops).sum();
    let row = Row {
        bench: "load",
        clients: opts.clients,
        seconds: secs,
        reply_delay_us: opts.reply_delay_us,
        ops,
        ops_per_sec: ops as f64 / secs,
        errors: tallies.iter().map(|t| t.errors).sum(),
        mismatches: tallies.iter().map(|t| t.mismatches).sum::<u64>() + end_mismatches,
        files,
        bytes_written: tallies.iter().map(|t| t.bytes_written).sum(),
        server_rss_kib: rss,
        server_peak_kib: peak,
    };
    Ok((row, problems))
}

pub fn render(r: &Row) -> String {
    table(
        &[
            "clients",
            "seconds",
            "reply delay µs",
            "ops/s",
            "errors",
            "mismatches",
            "files",
            "MiB written",
            "server RSS MiB",
            "peak MiB",
        ],
        &[vec![
            r.clients.to_string(),
            format!("{:.1}", r.seconds),
            r.reply_delay_us.to_string(),
            format!("{:.0}", r.ops_per_sec),
            r.errors.to_string(),
            r.mismatches.to_string(),
            r.files.to_string(),
            format!("{:.1}", r.bytes_written as f64 / 1048576.0),
            format!("{:.1}", r.server_rss_kib as f64 / 1024.0),
            format!("{:.1}", r.server_peak_kib as f64 / 1024.0),
        ]],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rng_is_reproducible_and_spread() {
        let (mut a, mut b) = (Rng(7), Rng(7));
        let va: Vec<u64> = (0..100).map(|_| a.below(10)).collect();
        let vb: Vec<u64> = (0..100).map(|_| b.below(10)).collect();
        assert_eq!(va, vb);
        assert!((0..10).all(|k| va.contains(&k)));
    }
}
