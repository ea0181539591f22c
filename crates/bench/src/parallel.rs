//! `walkfs bench parallel`: namespace changes in parallel over a slow
//! server (issue 16's figures).
//!
//! One vfs (one 9P connection, `cache=loose`) over `walkfs serve
//! --reply-delay-us D`; 1, 2 and 8 threads, each creating empty files in
//! a directory of its own for a fixed time. Total creates per second
//! should grow with the threads: a create holds only its own directory's
//! lock across its round trip, so the round trips of different
//! directories overlap. Then the latency of a cache miss (a lookup of a
//! name never seen, one round trip) made by another thread, alone and
//! while 8 threads create elsewhere: it should stay near the delay,
//! since nothing global is held across a backend call.
//!
//! Last, issue 26's figure: one thread creating files through a FUSE
//! mount (`walkfs mount` of the same server, `cache=loose,negtimeout=-1`)
//! against the same loop on the export's own file system, interleaved.
//! The mount's creates run behind the caller (server-granted inode
//! numbers, docs/inode-grants.md), so the reply delay should not show.
//!
//! Each row is the median of the repetitions; the restarts the vfs
//! counted (calls that started over because what they stood on moved)
//! are shown with each row.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;
use walkfs_source::SourceOptions;
use walkfs_vfs::{Creds, Vfs, AT_FDCWD};

use crate::proc::{sh, wait_mounted, Unmount};
use crate::report::{median, progress, progress_done, table};
use crate::timing::together;

#[derive(Clone, Debug)]
pub struct ParallelOpts {
    /// The `walkfs` executable to start `walkfs serve` with.
    pub walkfs: PathBuf,
    pub reply_delay_us: u64,
    pub threads: Vec<usize>,
    pub seconds: f64,
    pub reps: usize,
}

/// One row; the JSON form is exactly these fields.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    pub bench: &'static str,
    /// "creates" or "miss".
    pub what: &'static str,
    pub reply_delay_us: u64,
    /// Creating threads (for "miss": creating elsewhere meanwhile).
    pub threads: usize,
    /// creates: total creates per second.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ops_per_sec: Option<f64>,
    /// creates: per second over the 1-thread row of the same run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub speedup: Option<f64>,
    /// miss: latency percentiles in microseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p50_us: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p99_us: Option<f64>,
    /// miss: p99 over the reply delay.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p99_over_delay: Option<f64>,
    /// mount-creates: creates per second through the mount over those
    /// made natively in the same run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vs_native: Option<f64>,
    /// 9P requests the client sent per create, or per miss.
    pub rpcs_per_op: f64,
    /// Calls the vfs started over during the row.
    pub restarts: u64,
}

/// Create files in `dir` until `stop`; how many.
fn creator(vfs: &Vfs, dir: &str, stop: &AtomicBool) -> Result<u64, String> {
    let ctx = vfs.context(Creds::root());
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let p = format!("{dir}/f{n}");
        let fd = ctx
            .openat(
                AT_FDCWD,
                p.as_bytes(),
                libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY,
                0o644,
            )
            .map_err(|e| format!("create {p}: {e}"))?;
        ctx.close(fd).map_err(|e| format!("close {p}: {e}"))?;
        n += 1;
    }
    Ok(n)
}

/// `threads` creators for `secs`: (creates, seconds, and with `probe` the
/// latencies in microseconds of the misses another thread made meanwhile).
fn run_once(
    vfs: &Vfs,
    export: &std::path::Path,
    round: &AtomicU64,
    threads: usize,
    secs: f64,
    probe: bool,
) -> Result<(u64, f64, Vec<f64>), String> {
    let r = round.fetch_add(1, Ordering::Relaxed);
    let ctx = vfs.context(Creds::root());
    let dirs: Vec<String> = (0..threads).map(|i| format!("/r{r}-t{i}")).collect();
    for d in &dirs {
        ctx.mkdirat(AT_FDCWD, d.as_bytes(), 0o755)
            .map_err(|e| format!("mkdir {d}: {e}"))?;
    }
    // Made on the host, not through the vfs: a directory the vfs made
    // itself is known complete, and a miss in it needs no round trip.
    let probe_dir = format!("/r{r}-probe");
    std::fs::create_dir(export.join(&probe_dir[1..]))
        .map_err(|e| format!("mkdir {probe_dir}: {e}"))?;
    let run = together(
        threads,
        |i| {
            let d = &dirs[i];
            move |stop: &AtomicBool| creator(vfs, d, stop)
        },
        || -> Result<Vec<f64>, String> {
            let t0 = Instant::now();
            let mut lat = Vec::new();
            if probe {
                let mut k = 0u64;
                while t0.elapsed().as_secs_f64() < secs {
                    k += 1;
                    let p = format!("{probe_dir}/missing-{k}");
                    let t = Instant::now();
                    let r = ctx.faccessat(AT_FDCWD, p.as_bytes(), libc::F_OK, 0);
                    lat.push(t.elapsed().as_secs_f64() * 1e6);
                    if r != Err(walkfs_vfs::Errno::ENOENT) {
                        return Err(format!("probe {p}: {r:?}, expected ENOENT"));
                    }
                }
            } else {
                std::thread::sleep(Duration::from_secs_f64(secs));
            }
            Ok(lat)
        },
    );
    let lat = run.meanwhile?;
    let mut total = 0;
    for r in run.results {
        total += r.ok_or_else(|| "a creator panicked".to_string())??;
    }
    Ok((total, run.seconds, lat))
}

fn percentile(v: &mut [f64], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

pub fn run(opts: &ParallelOpts) -> Result<Vec<Row>, String> {
    // The export on tmpfs when there is one: the figure is about the vfs
    // and the protocol, not the host's inode allocator (ext4's, on a disk
    // that has seen millions of deletions, costs more per create than the
    // rest of the stack).
    let tmp = tempfile::Builder::new()
        .prefix("walkfs-parallel")
        .tempdir_in("/dev/shm")
        .or_else(|_| tempfile::tempdir())
        .map_err(|e| format!("tempdir: {e}"))?;
    let export = tmp.path().join("export");
    std::fs::create_dir_all(&export).map_err(|e| format!("mkdir: {e}"))?;
    let sock = tmp.path().join("s.sock");
    let delay = opts.reply_delay_us.to_string();
    // The server keeps what it learns but does not watch the export
    // (cache=loose): client and server share this machine's cores, and
    // the work of reporting every create to subscribers (none here) is
    // not the figure.
    let _server = crate::proc::walkfs_serve(
        &opts.walkfs,
        &export,
        &sock,
        &["--reply-delay-us", &delay, "-o", "cache=loose"],
    )?;
    let source = format!("unix:{}", sock.display());
    let o = SourceOptions::parse("cache=loose").map_err(|e| e.to_string())?;
    let vfs = walkfs_source::open(&source, &o).map_err(|e| format!("connect: {e}"))?;
    let round = AtomicU64::new(0);
    let mut rows = Vec::new();
    // Creates: thread counts interleaved within each repetition.
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); opts.threads.len()];
    let mut restarts = vec![0u64; opts.threads.len()];
    let mut rpcs = vec![(0u64, 0u64); opts.threads.len()];
    let sent = |v: &Vfs| v.rpc_stats().map_or(0, |s| s.total_rpcs);
    for rep in 0..opts.reps {
        for (i, &t) in opts.threads.iter().enumerate() {
            progress(&format!(
                "parallel: creates, {t} threads, run {}/{}",
                rep + 1,
                opts.reps
            ));
            let before = vfs.cache_stats().retries;
            let sent0 = sent(&vfs);
            let (n, secs, _) = run_once(&vfs, &export, &round, t, opts.seconds, false)?;
            restarts[i] += vfs.cache_stats().retries - before;
            rpcs[i].0 += sent(&vfs) - sent0;
            rpcs[i].1 += n;
            rates[i].push(n as f64 / secs);
        }
    }
    let base = median(&mut rates[0].clone());
    for (i, &t) in opts.threads.iter().enumerate() {
        let m = median(&mut rates[i]);
        rows.push(Row {
            bench: "parallel",
            what: "creates",
            reply_delay_us: opts.reply_delay_us,
            threads: t,
            ops_per_sec: Some(m),
            speedup: Some(m / base),
            p50_us: None,
            p99_us: None,
            p99_over_delay: None,
            vs_native: None,
            rpcs_per_op: rpcs[i].0 as f64 / rpcs[i].1.max(1) as f64,
            restarts: restarts[i],
        });
    }
    // Misses alone, then with the most creating threads.
    let busiest = opts.threads.iter().copied().max().unwrap_or(8);
    for load in [0, busiest] {
        let mut all = Vec::new();
        let before = vfs.cache_stats().retries;
        let (mut sent_n, mut made) = (0, 0);
        for rep in 0..opts.reps {
            progress(&format!(
                "parallel: misses, {load} threads creating, run {}/{}",
                rep + 1,
                opts.reps
            ));
            let sent0 = sent(&vfs);
            let (n, _, lat) = run_once(&vfs, &export, &round, load, opts.seconds, true)?;
            sent_n += sent(&vfs) - sent0;
            made += n + lat.len() as u64;
            all.extend(lat);
        }
        let p50 = percentile(&mut all, 0.50);
        let p99 = percentile(&mut all, 0.99);
        rows.push(Row {
            bench: "parallel",
            what: "miss",
            reply_delay_us: opts.reply_delay_us,
            threads: load,
            ops_per_sec: None,
            speedup: None,
            p50_us: Some(p50),
            p99_us: Some(p99),
            p99_over_delay: Some(p99 / opts.reply_delay_us.max(1) as f64),
            vs_native: None,
            // Creates and misses together when both ran.
            rpcs_per_op: sent_n as f64 / made.max(1) as f64,
            restarts: vfs.cache_stats().retries - before,
        });
    }
    drop(vfs);
    match mount_creates(opts, &export, &source, tmp.path()) {
        Ok(r) => rows.extend(r),
        Err(e) => eprintln!("parallel: creates through a mount skipped: {e}"),
    }
    progress_done();
    Ok(rows)
}

/// Create files in `dir` with std (open(2) with `O_CREAT|O_EXCL`, then
/// close(2)) for `secs`: creates per second.
fn creates_in(dir: &std::path::Path, secs: f64) -> Result<f64, String> {
    std::fs::create_dir(dir).map_err(|e| format!("mkdir {}: {e}", dir.display()))?;
    let t0 = Instant::now();
    let mut n = 0u64;
    while t0.elapsed().as_secs_f64() < secs {
        let p = dir.join(format!("f{n}"));
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&p)
            .map_err(|e| format!("create {}: {e}", p.display()))?;
        n += 1;
    }
    Ok(n as f64 / t0.elapsed().as_secs_f64())
}

/// One thread creating through `walkfs mount` of `source` and natively
/// in `export`, interleaved: the mount's and the native rows.
fn mount_creates(
    opts: &ParallelOpts,
    export: &std::path::Path,
    source: &str,
    tmp: &std::path::Path,
) -> Result<Vec<Row>, String> {
    if !std::path::Path::new("/dev/fuse").exists() {
        return Err("no /dev/fuse".into());
    }
    let mnt = tmp.join("mnt");
    std::fs::create_dir_all(&mnt).map_err(|e| format!("mkdir: {e}"))?;
    sh(std::process::Command::new(&opts.walkfs)
        .args(["mount", source])
        .arg(&mnt)
        .args(["-o", "cache=loose,negtimeout=-1"]))?;
    let _mounted = Unmount(mnt.clone());
    wait_mounted(&mnt, "mount", || None)?;
    let (mut native, mut mounted) = (Vec::new(), Vec::new());
    for rep in 0..opts.reps.max(2) {
        progress(&format!(
            "parallel: creates through a mount, run {}",
            rep + 1
        ));
        native.push(creates_in(
            &export.join(format!("native-{rep}")),
            opts.seconds,
        )?);
        mounted.push(creates_in(&mnt.join(format!("mount-{rep}")), opts.seconds)?);
    }
    let (n, m) = (median(&mut native), median(&mut mounted));
    let row = |what, rate, vs| Row {
        bench: "parallel",
        what,
        reply_delay_us: opts.reply_delay_us,
        threads: 1,
        ops_per_sec: Some(rate),
        speedup: None,
        p50_us: None,
        p99_us: None,
        p99_over_delay: None,
        vs_native: vs,
        rpcs_per_op: 0.0,
        restarts: 0,
    };
    Ok(vec![
        row("native-creates", n, None),
        row("mount-creates", m, Some(m / n)),
    ])
}

pub fn render(rows: &[Row]) -> String {
    let mut out = String::new();
    let f = |v: Option<f64>, p: usize| v.map_or(String::new(), |x| format!("{x:.p$}"));
    let creates: Vec<Vec<String>> = rows
        .iter()
        .filter(|r| r.what == "creates")
        .map(|r| {
            vec![
                r.threads.to_string(),
                f(r.ops_per_sec, 0),
                format!("{}x", f(r.speedup, 2)),
                format!("{:.2}", r.rpcs_per_op),
                r.restarts.to_string(),
            ]
        })
        .collect();
    if let Some(r) = rows.first() {
        out.push_str(&format!(
            "creates in a directory per thread, one vfs over walkfs serve --reply-delay-us {}\n",
            r.reply_delay_us
        ));
    }
    out.push_str(&table(
        &[
            "threads",
            "creates/s",
            "vs 1 thread",
            "RPCs/create",
            "restarts",
        ],
        &creates,
    ));
    out.push('\n');
    let misses: Vec<Vec<String>> = rows
        .iter()
        .filter(|r| r.what == "miss")
        .map(|r| {
            vec![
                r.threads.to_string(),
                f(r.p50_us, 0),
                f(r.p99_us, 0),
                format!("{}x", f(r.p99_over_delay, 2)),
                format!("{:.2}", r.rpcs_per_op),
                r.restarts.to_string(),
            ]
        })
        .collect();
    out.push_str("a cache miss (one lookup round trip) while threads create elsewhere\n");
    out.push_str(&table(
        &[
            "creating",
            "p50 us",
            "p99 us",
            "p99/delay",
            "RPCs/op",
            "restarts",
        ],
        &misses,
    ));
    let mount: Vec<Vec<String>> = rows
        .iter()
        .filter(|r| r.what.ends_with("-creates"))
        .map(|r| {
            vec![
                r.what.trim_end_matches("-creates").to_string(),
                f(r.ops_per_sec, 0),
                r.vs_native.map_or(String::new(), |v| format!("{v:.2}x")),
            ]
        })
        .collect();
    if !mount.is_empty() {
        out.push('\n');
        out.push_str(
            "one thread creating files: through walkfs mount of the server, and natively\n",
        );
        out.push_str(&table(&["where", "creates/s", "vs native"], &mount));
    }
    out
}
