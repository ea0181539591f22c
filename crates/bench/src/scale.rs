//! `walkfs bench scale`: issue 14's trees of real size through a walkfs
//! stack, with the descriptors and memory each process holds.
//!
//! Three parts, each optional:
//!
//! 1. kernel: Debian's `linux-source-6.1` tarball (fetched with `apt-get
//!    download`, decompressed once into the cache so the steps measure the
//!    file system, not xz) untarred, committed to git, `git status`ed
//!    twice, counted with `find`, sized with `du` and removed, natively
//!    and on a fresh `walkfs serve` + `walkfs mount` of an empty
//!    directory, in the same run. The walkfs outputs must equal the
//!    native ones.
//! 2. synthetic: N empty files (1,000 to a directory) made natively, then
//!    `find` and an lstat of every file through a fresh stack; the
//!    memory each process grew by, per file.
//! 3. clients: one `walkfs serve`, many 9P clients (threads of this
//!    process, the vfs over the 9P client backend), each walking and
//!    stating a subtree of its own.
//!
//! While walkfs runs, a thread polls its processes every 100 ms: entries
//! of /proc/PID/fd and VmRSS / VmHWM. Every step has a time limit and
//! every in-process walk a stall detector; a walkfs process that stops
//! answering is killed (a FUSE mount then fails its callers with
//! ENOTCONN), so a broken stack shows as failed rows, never as a hang.

use std::collections::BTreeMap;
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;
use walkfs_source::SourceOptions;
use walkfs_vfs::{Creds, Ctx, AT_FDCWD};

use crate::proc::{wait_until, KillOnDrop};
use crate::report::{progress, progress_done, table};

/// Everything the bench fetches, makes and runs in.
pub const CACHE: &str = "/var/tmp/walkfs-bench-scale";
/// The Debian package holding the kernel tarball.
const KERNEL_PKG: &str = "linux-source-6.1";
/// Files to a directory in the synthetic trees.
pub const PER_DIR: u64 = 1000;
/// How often the sampler polls the walkfs processes.
const SAMPLE_EVERY: Duration = Duration::from_millis(100);
/// An in-process walk that makes no progress for this long has a walkfs
/// process that stopped answering: it is killed so the walk ends.
const STALL: Duration = Duration::from_secs(60);
/// The goal for daemon + server memory per cached file.
const TARGET_BYTES_PER_FILE: f64 = 300.0;
/// In the error of a command that ran out of time (a walkfs stack that
/// let one step run out is not given the next ones).
const TIMED_OUT: &str = "ran out of its time limit";
/// How many problems of a kind are kept as examples.
const KEEP_PROBLEMS: usize = 5;

#[derive(Clone, Debug)]
pub struct ScaleOpts {
    pub quick: bool,
    /// The `walkfs` executable (for `walkfs serve` and `walkfs mount`).
    pub walkfs: PathBuf,
    /// Files of the synthetic tree (default 1,000,000; 100,000 quick).
    pub synthetic_files: Option<u64>,
    pub skip_kernel: bool,
    pub skip_synthetic: bool,
    /// 9P clients of the many-clients part (default 32; 4 quick; 0 skips).
    pub serve_clients: Option<usize>,
    /// Files of each client's subtree (default 100,000; 5,000 quick).
    pub client_files: Option<u64>,
}

impl ScaleOpts {
    fn synthetic_files(&self) -> u64 {
        self.synthetic_files
            .unwrap_or(if self.quick { 100_000 } else { 1_000_000 })
    }
    fn serve_clients(&self) -> usize {
        self.serve_clients
            .unwrap_or(if self.quick { 4 } else { 32 })
    }
    fn client_files(&self) -> u64 {
        self.client_files
            .unwrap_or(if self.quick { 5_000 } else { 100_000 })
    }
}

/// One measured row: a step of a part on one file system.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    pub bench: &'static str,
    /// kernel, synthetic or clients.
    pub part: &'static str,
    pub step: String,
    /// native or walkfs.
    pub fs: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seconds: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ratio_to_native: Option<f64>,
    /// The step succeeded and its checked output is what it must be.
    pub ok: bool,
    /// The checked output (a count, a size), when the step has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peak_fds_daemon: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peak_fds_server: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peak_rss_daemon_mib: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peak_rss_server_mib: Option<f64>,
    /// The processes' soft RLIMIT_NOFILE ("overall" rows): the ceiling the
    /// fd peaks are to be read against.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fd_limit_daemon: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fd_limit_server: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub files: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clients: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ops_per_sec: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub errors: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes_per_file_daemon: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes_per_file_server: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes_per_file: Option<f64>,
    /// `walkfs stats MNT --json` at the end of a walkfs run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stats: Option<serde_json::Value>,
}

impl Row {
    fn new(part: &'static str, step: &str, fs: &str) -> Row {
        Row {
            bench: "scale",
            part,
            step: step.into(),
            fs: fs.into(),
            seconds: None,
            ratio_to_native: None,
            ok: true,
            output: None,
            error: None,
            peak_fds_daemon: None,
            peak_fds_server: None,
            peak_rss_daemon_mib: None,
            peak_rss_server_mib: None,
            fd_limit_daemon: None,
            fd_limit_server: None,
            files: None,
            clients: None,
            ops_per_sec: None,
            errors: None,
            bytes_per_file_daemon: None,
            bytes_per_file_server: None,
            bytes_per_file: None,
            stats: None,
        }
    }

    fn peaks(&mut self, p: &[Peaks; 2]) {
        let mib = |k: u64| k as f64 / 1024.0;
        if p[DAEMON].samples > 0 {
            self.peak_fds_daemon = Some(p[DAEMON].fds);
            self.peak_rss_daemon_mib = Some(mib(p[DAEMON].rss_kib));
        }
        if p[SERVER].samples > 0 {
            self.peak_fds_server = Some(p[SERVER].fds);
            self.peak_rss_server_mib = Some(mib(p[SERVER].rss_kib));
        }
    }
}

#[derive(Debug, Default)]
pub struct ScaleResult {
    pub rows: Vec<Row>,
    /// Every failed step, mismatch and part that could not run; the bench
    /// fails if there is any.
    pub failures: Vec<String>,
}

impl ScaleResult {
    fn fail(&mut self, what: String) {
        // To the log, and said at once (not at ERROR level, which the
        // default log filter would print a second time): a long run's
        // first failure is worth seeing before the table.
        tracing::info!("scale failure: {what}");
        progress_done();
        eprintln!("walkfs: scale: {what}");
        self.failures.push(what);
    }
}

/// Run the parts asked for. Failures are collected, not returned: what
/// was measured is reported either way.
pub fn run(opts: &ScaleOpts) -> ScaleResult {
    let mut res = ScaleResult::default();
    if let Err(e) = std::fs::create_dir_all(CACHE) {
        res.fail(format!("{CACHE}: {e}"));
        return res;
    }
    ensure_tools(&mut res);
    if !opts.skip_kernel {
        if let Err(e) = kernel(opts, &mut res) {
            res.fail(format!("kernel: {e}"));
        }
    }
    if !opts.skip_synthetic {
        if let Err(e) = synthetic(opts, &mut res) {
            res.fail(format!("synthetic: {e}"));
        }
    }
    if opts.serve_clients() > 0 {
        if let Err(e) = clients(opts, &mut res) {
            res.fail(format!("clients: {e}"));
        }
    }
    progress_done();
    res
}

// ---------------------------------------------------------------------
// Sampling /proc

/// Index of the FUSE daemon (`walkfs mount`) in per-process arrays.
const DAEMON: usize = 0;
/// Index of `walkfs serve`.
const SERVER: usize = 1;

/// One look at a process.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProcSample {
    pub fds: u64,
    pub rss_kib: u64,
    pub hwm_kib: u64,
}

/// The largest of each figure over the samples taken.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Peaks {
    pub fds: u64,
    pub rss_kib: u64,
    pub hwm_kib: u64,
    pub samples: u64,
}

impl Peaks {
    fn add(&mut self, s: &ProcSample) {
        self.fds = self.fds.max(s.fds);
        self.rss_kib = self.rss_kib.max(s.rss_kib);
        self.hwm_kib = self.hwm_kib.max(s.hwm_kib);
        self.samples += 1;
    }
}

/// A `Field:   1234 kB` line of /proc/PID/status, in KiB.
pub fn parse_status_kib(status: &str, field: &str) -> Option<u64> {
    status.lines().find_map(|l| {
        let rest = l.strip_prefix(field)?.strip_prefix(':')?;
        rest.split_whitespace().next()?.parse().ok()
    })
}

/// The soft "Max open files" of /proc/PID/limits.
pub fn parse_fd_limit(limits: &str) -> Option<u64> {
    let l = limits.lines().find(|l| l.starts_with("Max open files"))?;
    l["Max open files".len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Descriptors and memory of `pid`; `None` once it is gone.
pub fn sample(pid: u32) -> Option<ProcSample> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count() as u64;
    Some(ProcSample {
        fds,
        rss_kib: parse_status_kib(&status, "VmRSS")?,
        hwm_kib: parse_status_kib(&status, "VmHWM").unwrap_or(0),
    })
}

fn fd_limit(pid: u32) -> Option<u64> {
    parse_fd_limit(&std::fs::read_to_string(format!("/proc/{pid}/limits")).ok()?)
}

#[derive(Default)]
struct SamplerState {
    step: [Peaks; 2],
    overall: [Peaks; 2],
}

/// Polls the daemon and the server every 100 ms on a thread of its own;
/// peaks per step (between `begin` and `end`) and over its life.
struct Sampler {
    pids: [Option<u32>; 2],
    state: Arc<Mutex<SamplerState>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

fn take_samples(pids: &[Option<u32>; 2], state: &Mutex<SamplerState>) {
    let s: Vec<Option<ProcSample>> = pids.iter().map(|p| p.and_then(sample)).collect();
    // A poisoned lock only means a panic elsewhere; the figures are whole.
    let mut st = state.lock().unwrap_or_else(|e| e.into_inner());
    for (i, s) in s.iter().enumerate() {
        if let Some(s) = s {
            st.step[i].add(s);
            st.overall[i].add(s);
        }
    }
}

impl Sampler {
    fn start(pids: [Option<u32>; 2]) -> Sampler {
        let state = Arc::new(Mutex::new(SamplerState::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = if pids.iter().any(Option::is_some) {
            let (state, stop) = (Arc::clone(&state), Arc::clone(&stop));
            Some(std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    take_samples(&pids, &state);
                    std::thread::sleep(SAMPLE_EVERY);
                }
            }))
        } else {
            None
        };
        Sampler {
            pids,
            state,
            stop,
            thread,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, SamplerState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A step starts: its peaks from now, beginning with a sample now.
    fn begin(&self) {
        self.lock().step = Default::default();
        take_samples(&self.pids, &self.state);
    }

    /// A step ended: its peaks, including a sample taken now (a step
    /// shorter than the polling period still gets two).
    fn end(&self) -> [Peaks; 2] {
        take_samples(&self.pids, &self.state);
        self.lock().step
    }

    /// Peaks since the start, with each process's VmHWM counted (the
    /// kernel's own peak, which the polling may have missed).
    fn overall(&self) -> [Peaks; 2] {
        take_samples(&self.pids, &self.state);
        let mut p = self.lock().overall;
        for q in p.iter_mut() {
            q.rss_kib = q.rss_kib.max(q.hwm_kib);
        }
        p
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

// ---------------------------------------------------------------------
// Processes and mounts

/// SIGKILL the given processes.
fn kill_pids(pids: &[Option<u32>]) {
    for pid in pids.iter().flatten() {
        // SAFETY: kill(2) has no memory effects. Each pid is a child of
        // this process that is only reaped when its KillOnDrop drops, so
        // it cannot have been reused by another process.
        unsafe {
            libc::kill(*pid as libc::pid_t, libc::SIGKILL);
        }
    }
}

fn is_mounted(p: &Path) -> bool {
    let m = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    let p = p.to_string_lossy();
    m.lines().any(|l| l.split(' ').nth(1) == Some(&*p))
}

fn have(tool: &str) -> bool {
    crate::p9meta::tool(tool).is_some()
}

/// Unmount `mnt`: `fusermount3 -u` (or `umount` where fuse3 is not
/// installed; root needs no helper), a few tries while it is busy, then
/// lazily so nothing is left behind.
fn unmount(mnt: &Path) {
    let fuser = have("fusermount3");
    let try_once = |lazy: bool| {
        let mut c = if fuser {
            let mut c = Command::new("fusermount3");
            c.arg(if lazy { "-uz" } else { "-u" });
            c
        } else {
            let mut c = Command::new("umount");
            if lazy {
                c.arg("-l");
            }
            c
        };
        c.arg(mnt).stdout(Stdio::null()).stderr(Stdio::null());
        // A limit: an unmount should never be what hangs the bench.
        let _ = run_cmd("unmount", &mut c, Duration::from_secs(20), &|| {});
    };
    for _ in 0..10 {
        if !is_mounted(mnt) {
            return;
        }
        try_once(false);
        if !is_mounted(mnt) {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    try_once(true);
}

fn log_tail(log: &Path) -> String {
    let s = std::fs::read_to_string(log).unwrap_or_default();
    let tail: Vec<&str> = s.lines().rev().take(5).collect();
    tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
}

/// `walkfs serve EXPORT --listen unix:SOCK` and `walkfs mount unix:SOCK
/// MNT` (default options): unmounted and killed when dropped.
struct Stack {
    mnt: PathBuf,
    sock: PathBuf,
    log: PathBuf,
    /// The mount runs in the foreground, as a child of this process: its
    /// pid is the daemon's (a background mount forks away from it).
    daemon: KillOnDrop,
    server: KillOnDrop,
}

impl Stack {
    fn start(walkfs: &Path, export: &Path, name: &str) -> Result<Stack, String> {
        let mnt = Path::new(CACHE).join(format!("{name}-mnt"));
        // A run cut short may have left its mount.
        unmount(&mnt);
        std::fs::create_dir_all(&mnt).map_err(|e| format!("{}: {e}", mnt.display()))?;
        let sock = Path::new(CACHE).join(format!("{name}.sock"));
        let log = Path::new(CACHE).join(format!("{name}-mount.log"));
        let server = crate::proc::walkfs_serve(walkfs, export, &sock, &[])?;
        let logf = std::fs::File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
        let child = Command::new(walkfs)
            .arg("mount")
            .arg(format!("unix:{}", sock.display()))
            .arg(&mnt)
            .arg("--foreground")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(logf)
            .spawn()
            .map_err(|e| format!("start walkfs mount: {e}"))?;
        let mut stack = Stack {
            mnt,
            sock,
            log,
            daemon: KillOnDrop(child),
            server,
        };
        let (mnt, log) = (stack.mnt.clone(), stack.log.clone());
        let daemon = &mut stack.daemon;
        wait_until(
            &format!("walkfs mount on {}", mnt.display()),
            Duration::from_secs(20),
            || is_mounted(&mnt),
            || {
                daemon
                    .exited()
                    .map(|why| format!("{why}: {}", log_tail(&log)))
            },
        )?;
        Ok(stack)
    }

    fn pids(&self) -> [Option<u32>; 2] {
        [Some(self.daemon.0.id()), Some(self.server.0.id())]
    }

    /// Why the stack can no longer answer, if it cannot.
    fn broken(&mut self) -> Option<String> {
        if let Some(why) = self.daemon.exited() {
            return Some(format!("walkfs mount {why} (log: {})", log_tail(&self.log)));
        }
        if let Some(why) = self.server.exited() {
            return Some(format!("walkfs serve {why}"));
        }
        if !is_mounted(&self.mnt) {
            return Some(format!("{} is no longer mounted", self.mnt.display()));
        }
        None
    }

    /// The mount's counters, if it answers.
    fn stats(&self, walkfs: &Path) -> Option<serde_json::Value> {
        let mut c = Command::new(walkfs);
        c.arg("stats").arg(&self.mnt).arg("--json");
        let r = run_cmd("walkfs stats", &mut c, Duration::from_secs(20), &|| {}).ok()?;
        serde_json::from_slice(&r.head).ok()
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        // Unmounted first, so the daemon ends by itself; then the fields
        // drop: the daemon and the server are killed and reaped (a
        // killed server leaves its socket file behind).
        unmount(&self.mnt);
        let _ = std::fs::remove_file(&self.sock);
    }
}

/// What a command printed and how long it took.
struct Ran {
    seconds: f64,
    /// Lines of stdout (as `wc -l` counts them).
    lines: u64,
    /// The first 64 KiB of stdout.
    head: Vec<u8>,
}

/// Keeps the first and the last few KiB of a stream, and counts lines.
#[derive(Default)]
struct Capture {
    lines: u64,
    head: Vec<u8>,
    tail: Vec<u8>,
}

impl Capture {
    const KEEP: usize = 64 << 10;

    fn read_all(mut r: impl Read) -> Capture {
        let mut c = Capture::default();
        let mut buf = vec![0u8; 1 << 16];
        loop {
            let n = match r.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => break,
            };
            c.push(&buf[..n]);
        }
        c
    }

    fn push(&mut self, b: &[u8]) {
        self.lines += b.iter().filter(|&&x| x == b'\n').count() as u64;
        let room = Self::KEEP.saturating_sub(self.head.len());
        self.head.extend_from_slice(&b[..room.min(b.len())]);
        self.tail.extend_from_slice(b);
        if self.tail.len() > 2 * Self::KEEP {
            self.tail.drain(..self.tail.len() - Self::KEEP);
        }
    }

    /// The first and last lines, for an error message.
    fn summary(&self) -> String {
        let head = String::from_utf8_lossy(&self.head);
        let tail = String::from_utf8_lossy(&self.tail);
        let first: Vec<&str> = head.lines().take(3).collect();
        let mut last: Vec<&str> = tail.lines().rev().take(3).collect();
        last.reverse();
        if self.lines <= 6 {
            return head.lines().collect::<Vec<_>>().join(" | ");
        }
        format!(
            "{} | ... ({} lines) ... | {}",
            first.join(" | "),
            self.lines,
            last.join(" | ")
        )
    }
}

/// Block until `pid` has exited, without reaping it (the `Child` still
/// owns it, so its pid stays ours to kill until `wait`).
fn wait_exit_nowait(pid: u32) {
    loop {
        // SAFETY: waitid fills the siginfo it is given; WNOWAIT leaves
        // the child to be reaped by its owner.
        let r = unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            libc::waitid(
                libc::P_PID,
                pid as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOWAIT,
            )
        };
        if r == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return;
        }
    }
}

fn show(cmd: &Command) -> String {
    let mut v = vec![cmd.get_program().to_string_lossy().into_owned()];
    v.extend(cmd.get_args().map(|a| a.to_string_lossy().into_owned()));
    v.join(" ")
}

/// Run `cmd` to its end, or kill it after `limit`. A command the kill
/// does not end in 5 s is stuck in a walkfs request: `stuck` then kills
/// the walkfs processes, which fails the request.
fn run_cmd(
    label: &str,
    cmd: &mut Command,
    limit: Duration,
    stuck: &dyn Fn(),
) -> Result<Ran, String> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let t0 = Instant::now();
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("{}: cannot run: {e}", show(cmd)))?;
    let out = child
        .stdout
        .take()
        .map(|o| std::thread::spawn(|| Capture::read_all(o)));
    let err = child
        .stderr
        .take()
        .map(|e| std::thread::spawn(|| Capture::read_all(e)));
    // A waiter thread marks the exit as it happens (the time is exact)
    // while this thread keeps the Child to kill.
    let (tx, rx) = std::sync::mpsc::channel();
    let pid = child.id();
    std::thread::spawn(move || {
        wait_exit_nowait(pid);
        let _ = tx.send(Instant::now());
    });
    let mut timed_out = false;
    let mut killed_walkfs = false;
    let mut last_progress = Instant::now();
    let end = loop {
        match rx.recv_timeout(Duration::from_millis(250)) {
            Ok(t) => break t,
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break Instant::now(),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
        }
        if last_progress.elapsed() >= Duration::from_secs(1) {
            last_progress = Instant::now();
            progress(&format!(
                "scale: {label} ({:.0} s)",
                t0.elapsed().as_secs_f64()
            ));
        }
        if !timed_out && t0.elapsed() > limit {
            timed_out = true;
            let _ = child.kill();
            if let Ok(t) = rx.recv_timeout(Duration::from_secs(5)) {
                break t;
            }
            killed_walkfs = true;
            stuck();
        }
    };
    let status: Result<ExitStatus, String> = child.wait().map_err(|e| format!("wait: {e}"));
    let seconds = end.duration_since(t0).as_secs_f64();
    let out = out.and_then(|t| t.join().ok()).unwrap_or_default();
    let err = err.and_then(|t| t.join().ok()).unwrap_or_default();
    if timed_out {
        return Err(format!(
            "{label}: {TIMED_OUT} ({:.0} s); killed{}",
            limit.as_secs_f64(),
            if killed_walkfs {
                " (it did not die: walkfs was killed too)"
            } else {
                ""
            }
        ));
    }
    let status = status?;
    if !status.success() {
        // Some tools (git commit) say why on stdout.
        let why = if err.lines == 0 && err.head.is_empty() {
            out.summary()
        } else {
            err.summary()
        };
        return Err(format!("{label}: {status}: {why}"));
    }
    Ok(Ran {
        seconds,
        lines: out.lines,
        head: out.head,
    })
}

/// Run `cmd` with no limit worth speaking of, for setup commands.
fn sh(label: &str, cmd: &mut Command) -> Result<Ran, String> {
    run_cmd(label, cmd, Duration::from_secs(3600), &|| {})
}

/// Start cold: dirty data written out, the kernel's caches dropped (best
/// effort: it needs root).
fn drop_caches() {
    let _ = sh("sync", &mut Command::new("sync"));
    let _ = std::fs::write("/proc/sys/vm/drop_caches", "3");
}

/// Debian packages the parts use, installed if missing (fuse3 for
/// fusermount3; the mount works without it as root, so its absence is
/// not a failure).
fn ensure_tools(res: &mut ScaleResult) {
    let want = [("git", "git"), ("xz", "xz-utils"), ("fusermount3", "fuse3")];
    let missing: Vec<&str> = want
        .iter()
        .filter(|(t, _)| !have(t))
        .map(|(_, p)| *p)
        .collect();
    if missing.is_empty() {
        return;
    }
    progress(&format!("scale: apt-get install {}", missing.join(" ")));
    let install = || {
        sh(
            "apt-get install",
            Command::new("apt-get")
                .args(["install", "-y", "-qq"])
                .args(&missing)
                .env("DEBIAN_FRONTEND", "noninteractive"),
        )
    };
    // The package lists are refreshed only if the install needs it.
    let r = install().or_else(|_| {
        sh(
            "apt-get update",
            Command::new("apt-get").args(["update", "-qq"]),
        )?;
        install()
    });
    if let Err(e) = r {
        if missing.iter().any(|p| *p != "fuse3") {
            res.fail(format!("cannot install {}: {e}", missing.join(" ")));
        }
    }
}

// ---------------------------------------------------------------------
// Part 1: the kernel source

/// The kernel tarball, decompressed, in the cache: fetched with `apt-get
/// download` (after `apt-get update` only if that fails), the .tar.xz
/// taken out of the .deb once and kept, and decompressed once.
pub fn fetch_kernel() -> Result<PathBuf, String> {
    let cache = Path::new(CACHE);
    let tar = cache.join(format!("{KERNEL_PKG}.tar"));
    if tar.is_file() {
        return Ok(tar);
    }
    let txz = cache.join(format!("{KERNEL_PKG}.tar.xz"));
    if !txz.is_file() {
        let find_deb = || {
            std::fs::read_dir(cache).ok().and_then(|d| {
                d.flatten().map(|e| e.path()).find(|p| {
                    p.file_name().and_then(|n| n.to_str()).is_some_and(|n| {
                        n.starts_with(&format!("{KERNEL_PKG}_")) && n.ends_with(".deb")
                    })
                })
            })
        };
        if find_deb().is_none() {
            progress(&format!(
                "scale: apt-get download {KERNEL_PKG} (about 140 MB)"
            ));
            let download = || {
                sh(
                    "apt-get download",
                    Command::new("apt-get")
                        .args(["download", "-qq", KERNEL_PKG])
                        .current_dir(cache),
                )
            };
            if download().is_err() {
                sh(
                    "apt-get update",
                    Command::new("apt-get").args(["update", "-qq"]),
                )?;
                download()?;
            }
        }
        let deb = find_deb().ok_or(format!("apt-get download {KERNEL_PKG} left no .deb"))?;
        progress(&format!("scale: extracting {}", deb.display()));
        let x = cache.join("deb-x");
        let _ = std::fs::remove_dir_all(&x);
        sh(
            "dpkg-deb -x",
            Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&x),
        )?;
        let inner = x.join(format!("usr/src/{KERNEL_PKG}.tar.xz"));
        std::fs::rename(&inner, &txz)
            .map_err(|e| format!("{} -> {}: {e}", inner.display(), txz.display()))?;
        let _ = std::fs::remove_dir_all(&x);
    }
    progress(&format!("scale: decompressing {}", txz.display()));
    // Written under another name and renamed: a run cut short leaves no
    // half tarball that looks whole.
    let part = cache.join(format!("{KERNEL_PKG}.tar.part"));
    let f = std::fs::File::create(&part).map_err(|e| format!("{}: {e}", part.display()))?;
    let status = Command::new("xz")
        .arg("-dc")
        .arg(&txz)
        .stdout(f)
        .status()
        .map_err(|e| format!("xz: {e}"))?;
    if !status.success() {
        return Err(format!("xz -dc {}: {status}", txz.display()));
    }
    std::fs::rename(&part, &tar).map_err(|e| format!("{}: {e}", tar.display()))?;
    Ok(tar)
}

/// The steps of the kernel workload, in order.
const KERNEL_STEPS: &[&str] = &[
    "untar",
    "git-commit",
    "git-status-1",
    "git-status-2",
    "find",
    "du",
    "rm-rf",
];

/// The first number of `du -sb` output.
pub fn parse_du(out: &[u8]) -> Option<u64> {
    String::from_utf8_lossy(out)
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

fn git(root: &Path, args: &[&str]) -> Command {
    let mut c = Command::new("git");
    c.arg("-C").arg(root);
    // Identity for the commit; no fsmonitor daemon, so every status
    // walks the tree; no automatic gc, which would detach a repack in
    // the background of the next steps (the commit adds ~80,000 loose
    // objects); any owner accepted, as FUSE reports the server's.
    for kv in [
        "user.name=bench",
        "user.email=bench@walkfs",
        "core.fsmonitor=false",
        "gc.auto=0",
        "maintenance.auto=false",
        "safe.directory=*",
        "init.defaultBranch=main",
    ] {
        c.arg("-c").arg(kv);
    }
    c.args(args);
    // Fixed dates: the commit, its reflog and so `du` come out the same
    // byte for byte in both runs.
    c.env("GIT_AUTHOR_DATE", "2000-01-01T00:00:00Z")
        .env("GIT_COMMITTER_DATE", "2000-01-01T00:00:00Z");
    c
}

/// What one step gave: its time and its checked output.
struct StepOut {
    seconds: f64,
    output: Option<String>,
}

/// One step of the kernel workload in `dir` (the tree is `dir`'s only
/// directory once untarred).
fn kernel_step(
    step: &str,
    tar: &Path,
    dir: &Path,
    limit: Duration,
    stuck: &dyn Fn(),
) -> Result<StepOut, String> {
    let root = || -> Result<PathBuf, String> {
        std::fs::read_dir(dir)
            .map_err(|e| format!("{}: {e}", dir.display()))?
            .flatten()
            .map(|e| e.path())
            .find(|p| p.is_dir())
            .ok_or_else(|| format!("{}: no tree (the untar failed)", dir.display()))
    };
    let plain = |r: Ran| StepOut {
        seconds: r.seconds,
        output: None,
    };
    match step {
        "untar" => {
            let mut c = Command::new("tar");
            c.arg("xf").arg(tar).arg("-C").arg(dir);
            run_cmd(step, &mut c, limit, stuck).map(plain)
        }
        "git-commit" => {
            let root = root()?;
            let t0 = Instant::now();
            for args in [
                &["init", "-q"][..],
                // -f: Debian's tarball adds `/*` to the top .gitignore
                // (its packaging ignores everything at the top level), so
                // a plain `add -A` would add nothing.
                &["add", "-A", "-f"],
                &["commit", "-q", "-m", "x"],
            ] {
                let left = limit.saturating_sub(t0.elapsed());
                run_cmd(
                    &format!("{step}: git {}", args[0]),
                    &mut git(&root, args),
                    left,
                    stuck,
                )?;
            }
            Ok(StepOut {
                seconds: t0.elapsed().as_secs_f64(),
                output: None,
            })
        }
        "git-status-1" | "git-status-2" => {
            let r = run_cmd(
                step,
                &mut git(&root()?, &["status", "--porcelain"]),
                limit,
                stuck,
            )?;
            if !r.head.is_empty() {
                return Err(format!(
                    "{step}: not clean: {}",
                    String::from_utf8_lossy(&r.head)
                        .lines()
                        .take(3)
                        .collect::<Vec<_>>()
                        .join(" | ")
                ));
            }
            Ok(StepOut {
                seconds: r.seconds,
                output: Some("clean".into()),
            })
        }
        "find" => {
            // `find . -type f | wc -l`, the lines counted here: find's own
            // exit status is checked, which a shell pipe would hide.
            let mut c = Command::new("find");
            c.args([".", "-type", "f"]).current_dir(root()?);
            let r = run_cmd(step, &mut c, limit, stuck)?;
            Ok(StepOut {
                seconds: r.seconds,
                output: Some(r.lines.to_string()),
            })
        }
        "du" => {
            // Timed: the whole tree. Checked: the tree without .git, whose
            // directories differ in size from run to run even natively
            // (git writes each object under a random temporary name and
            // renames it, so their ext4 directory blocks fill
            // differently); its files are counted by `find`.
            let root = root()?;
            let mut c = Command::new("du");
            c.args(["-sb", "."]).current_dir(&root);
            let r = run_cmd(step, &mut c, limit, stuck)?;
            parse_du(&r.head).ok_or("du: no size in its output")?;
            let mut c = Command::new("du");
            c.args(["-sb", "--exclude=.git", "."]).current_dir(&root);
            let x = run_cmd(step, &mut c, limit, stuck)?;
            let n = parse_du(&x.head).ok_or("du: no size in its output")?;
            Ok(StepOut {
                seconds: r.seconds,
                output: Some(format!("{n} (no .git)")),
            })
        }
        "rm-rf" => {
            let mut c = Command::new("rm");
            c.arg("-rf").arg(root()?);
            run_cmd(step, &mut c, limit, stuck).map(plain)
        }
        _ => Err(format!("unknown step {step}")),
    }
}

/// Native results by step: seconds (if it succeeded) and output.
type NativeSteps = BTreeMap<String, (Option<f64>, Option<String>)>;

fn kernel(opts: &ScaleOpts, res: &mut ScaleResult) -> Result<(), String> {
    let tar = fetch_kernel()?;
    // Native first: every walkfs output is checked against it.
    let native = kernel_run(opts, &tar, None, res)?;
    kernel_run(opts, &tar, Some(&native), res)?;
    Ok(())
}

/// The kernel workload on one file system: natively if `native` is
/// `None`, else on walkfs, checked against it.
fn kernel_run(
    opts: &ScaleOpts,
    tar: &Path,
    native: Option<&NativeSteps>,
    res: &mut ScaleResult,
) -> Result<NativeSteps, String> {
    let fs = if native.is_some() { "walkfs" } else { "native" };
    let cache = Path::new(CACHE);
    // Fresh, empty directories; a run cut short may have left its own.
    let work = cache.join(format!("kernel-{fs}"));
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).map_err(|e| format!("{}: {e}", work.display()))?;
    drop_caches();
    let mut stack = match native {
        Some(_) => {
            progress("scale: kernel: starting walkfs serve + walkfs mount");
            Some(Stack::start(&opts.walkfs, &work, "kernel")?)
        }
        None => None,
    };
    let dir = stack.as_ref().map_or(work.clone(), |s| s.mnt.clone());
    let pids = stack.as_ref().map_or([None, None], Stack::pids);
    let sampler = Sampler::start(pids);
    let stuck = move || kill_pids(&pids);
    let mut out = NativeSteps::new();
    let mut dead: Option<String> = None;
    for &step in KERNEL_STEPS {
        let mut row = Row::new("kernel", step, fs);
        if let Some(why) = &dead {
            row.ok = false;
            row.error = Some(format!("not run: {why}"));
            res.rows.push(row);
            continue;
        }
        progress(&format!("scale: kernel on {fs}: {step}"));
        let want = native.and_then(|n| n.get(step));
        // Natively an hour; on walkfs 30 times native, at least 5 min.
        let limit = match want {
            None => Duration::from_secs(3600),
            Some((Some(s), _)) => Duration::from_secs_f64((s * 30.0).max(300.0)),
            Some((None, _)) => Duration::from_secs(3600),
        };
        sampler.begin();
        let r = kernel_step(step, tar, &dir, limit, &stuck);
        row.peaks(&sampler.end());
        match r {
            Ok(s) => {
                row.seconds = Some(s.seconds);
                row.output = s.output.clone();
                if let Some((ns, nout)) = want {
                    row.ratio_to_native = ns.map(|n| s.seconds / n);
                    if nout.is_some() && &s.output != nout {
                        row.ok = false;
                        let msg = format!(
                            "kernel {step} on walkfs: output {} differs from native {}",
                            s.output.as_deref().unwrap_or("-"),
                            nout.as_deref().unwrap_or("-")
                        );
                        row.error = Some(msg.clone());
                        res.fail(msg);
                    }
                }
                out.insert(step.into(), (Some(s.seconds), s.output));
            }
            Err(e) => {
                row.ok = false;
                row.error = Some(e.clone());
                res.fail(format!("kernel {step} on {fs}: {e}"));
                out.insert(step.into(), (None, None));
            }
        }
        let timed_out = row.error.as_deref().is_some_and(|e| e.contains(TIMED_OUT));
        res.rows.push(row);
        if let Some(s) = stack.as_mut() {
            dead = s.broken().or_else(|| {
                // Alive but not answering in time: each further step
                // would only wait out its own limit.
                timed_out.then(|| format!("{step} ran out of time"))
            });
        }
    }
    if let Some(s) = stack.take() {
        let mut row = Row::new("kernel", "overall", fs);
        row.ok = dead.is_none();
        row.error = dead.clone();
        row.stats = if dead.is_none() {
            s.stats(&opts.walkfs)
        } else {
            None
        };
        row.peaks(&sampler.overall());
        row.fd_limit_daemon = pids[DAEMON].and_then(fd_limit);
        row.fd_limit_server = pids[SERVER].and_then(fd_limit);
        res.rows.push(row);
        if let Some(why) = dead {
            res.fail(format!("kernel on walkfs: the stack broke: {why}"));
        }
        drop(sampler);
        drop(s);
    }
    // Whatever a failed rm -rf left, removed natively.
    let _ = std::fs::remove_dir_all(&work);
    Ok(out)
}

// ---------------------------------------------------------------------
// Part 2: the synthetic tree

/// Directories of a synthetic tree of `n` files.
pub fn synth_dirs(n: u64) -> u64 {
    n.div_ceil(PER_DIR)
}

/// The path of file `i` of a synthetic tree, relative to its root.
pub fn synth_rel(i: u64) -> String {
    format!("d{:06}/f{:03}", i / PER_DIR, i % PER_DIR)
}

/// Make `n` empty files under `root`, `PER_DIR` to a directory (existing
/// ones are kept, so an interrupted tree is completed).
pub fn make_tree(root: &Path, n: u64, label: &str) -> Result<(), String> {
    for d in 0..synth_dirs(n) {
        let dir = root.join(format!("d{d:06}"));
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        for i in d * PER_DIR..((d + 1) * PER_DIR).min(n) {
            let p = root.join(synth_rel(i));
            std::fs::File::create(&p).map_err(|e| format!("{}: {e}", p.display()))?;
        }
        if d % 10 == 0 {
            progress(&format!(
                "scale: making {label}: {} / {n} files",
                (d * PER_DIR).min(n)
            ));
        }
    }
    Ok(())
}

/// A synthetic tree of `n` files per subtree in the cache, made once
/// (the marker beside it says it is whole). The seconds it took, if it
/// was made now.
fn cached_tree(name: &str, subtrees: &[String], n: u64) -> Result<(PathBuf, Option<f64>), String> {
    let root = Path::new(CACHE).join(name);
    let done = Path::new(CACHE).join(format!("{name}.done"));
    if done.is_file() {
        return Ok((root, None));
    }
    let t0 = Instant::now();
    for s in subtrees {
        make_tree(&root.join(s), n, name)?;
    }
    std::fs::write(&done, b"").map_err(|e| format!("{}: {e}", done.display()))?;
    Ok((root, Some(t0.elapsed().as_secs_f64())))
}

/// Run `work` on a thread while this one shows its progress (`done` of
/// `total`) and, when `done` stands still for `STALL`, calls `on_stall`
/// once (which kills whatever the work waits on). Whether it stalled.
fn watched<T: Send>(
    label: &str,
    done: &AtomicU64,
    total: u64,
    on_stall: &dyn Fn(),
    work: impl FnOnce() -> T + Send,
) -> Result<(T, bool), String> {
    std::thread::scope(|s| {
        let h = s.spawn(work);
        let (mut seen, mut since) = (u64::MAX, Instant::now());
        let mut stalled = false;
        while !h.is_finished() {
            std::thread::sleep(Duration::from_millis(100));
            let n = done.load(Ordering::Relaxed);
            if n != seen {
                (seen, since) = (n, Instant::now());
            } else if !stalled && since.elapsed() > STALL {
                stalled = true;
                tracing::error!("{label}: no progress for {STALL:?} at {n}/{total}");
                on_stall();
            }
            progress(&format!("scale: {label}: {n} / {total}"));
        }
        let v = h
            .join()
            .map_err(|_| format!("{label}: the worker panicked"))?;
        Ok((v, stalled))
    })
}

/// Failures of a walk: how many, and the first few.
#[derive(Default)]
struct Problems {
    count: u64,
    examples: Vec<String>,
}

impl Problems {
    fn add(&mut self, what: impl FnOnce() -> String) {
        self.count += 1;
        if self.examples.len() < KEEP_PROBLEMS {
            self.examples.push(what());
        }
    }
    fn merge(&mut self, o: Problems) {
        self.count += o.count;
        for e in o.examples {
            if self.examples.len() < KEEP_PROBLEMS {
                self.examples.push(e);
            }
        }
    }
}

/// lstat every file of the synthetic tree under `root`; `want` is the
/// native (mode, size) of each (empty: a regular file of size 0).
fn stat_all(
    root: &Path,
    n: u64,
    want: &[(u32, u64)],
    done: &AtomicU64,
) -> (Vec<(u32, u64)>, Problems) {
    let mut got = Vec::with_capacity(if want.is_empty() { n as usize } else { 0 });
    let mut p = Problems::default();
    for i in 0..n {
        let rel = synth_rel(i);
        match std::fs::symlink_metadata(root.join(&rel)) {
            Ok(m) => {
                let (mode, size) = (m.mode(), m.size());
                match want.get(i as usize) {
                    Some(&(wm, ws)) if (wm, ws) != (mode, size) => {
                        p.add(|| format!("{rel}: mode {mode:o} size {size}, natively {wm:o} {ws}"))
                    }
                    None if !m.file_type().is_file() || size != 0 => {
                        p.add(|| format!("{rel}: mode {mode:o} size {size}"))
                    }
                    _ => {}
                }
                if want.is_empty() {
                    got.push((mode, size));
                }
            }
            Err(e) => p.add(|| format!("{rel}: {e}")),
        }
        done.store(i + 1, Ordering::Relaxed);
    }
    (got, p)
}

fn synthetic(opts: &ScaleOpts, res: &mut ScaleResult) -> Result<(), String> {
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
        drop_caches();
        let mut stack = if fs == "walkfs" {
            progress("scale: synthetic: starting walkfs serve + walkfs mount");
            Some(Stack::start(&opts.walkfs, &tree, "synth")?)
        } else {
            None
        };
        let dir = stack.as_ref().map_or(tree.clone(), |s| s.mnt.clone());
        let pids = stack.as_ref().map_or([None, None], Stack::pids);
        let sampler = Sampler::start(pids);
        let base: Vec<Option<ProcSample>> = pids.iter().map(|p| p.and_then(sample)).collect();
        let stuck = move || kill_pids(&pids);
        // `find MNT | wc -l`: every file, every directory and the root.
        progress(&format!("scale: synthetic on {fs}: find"));
        let limit = native_secs
            .get("find")
            .map_or(Duration::from_secs(3600), |s| {
                Duration::from_secs_f64((s * 30.0).max(300.0))
            });
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
                    row.ok = false;
                    let msg = format!(
                        "synthetic find on {fs}: {} entries, want {want_count}",
                        r.lines
                    );
                    row.error = Some(msg.clone());
                    res.fail(msg);
                }
            }
            Err(e) => {
                row.ok = false;
                row.error = Some(e.clone());
                res.fail(format!("synthetic find on {fs}: {e}"));
            }
        }
        let timed_out = row.error.as_deref().is_some_and(|e| e.contains(TIMED_OUT));
        res.rows.push(row);
        // lstat of every file, here, checked against the native answers.
        let mut row = Row::new("synthetic", "stat-all", fs);
        row.files = Some(n);
        let dead = stack.as_mut().and_then(|s| {
            s.broken()
                .or_else(|| timed_out.then(|| "find ran out of time".to_string()))
        });
        if let Some(why) = &dead {
            row.ok = false;
            row.error = Some(format!("not run: {why}"));
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
                row.ok = false;
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
                row.error = Some(msg.clone());
                res.fail(msg);
            }
            res.rows.push(row);
            // Memory grown per file, from right after the mount to now;
            // meaningless unless every file was cached.
            if stack.is_some() && (stalled || probs.count > 0) {
                let mut row = Row::new("synthetic", "bytes-per-file", fs);
                row.ok = false;
                row.error = Some("not measured: stat-all failed".into());
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
            let mut row = Row::new("synthetic", "overall", fs);
            row.ok = dead.is_none();
            row.error = dead.clone();
            if dead.is_none() {
                row.stats = s.stats(&opts.walkfs);
            }
            row.peaks(&sampler.overall());
            row.fd_limit_daemon = pids[DAEMON].and_then(fd_limit);
            row.fd_limit_server = pids[SERVER].and_then(fd_limit);
            res.rows.push(row);
            drop(sampler);
            drop(s);
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------
// Part 3: one server, many clients

/// Client `k`'s walk of `/c{k}`: list each directory (every expected name
/// there, nothing else), lstat each file (regular, size 0).
fn client_walk(ctx: &Ctx, k: usize, n: u64, done: &AtomicU64) -> Problems {
    let mut p = Problems::default();
    let base = format!("/c{k}");
    for d in 0..synth_dirs(n) {
        let dir = format!("{base}/d{d:06}");
        let lo = d * PER_DIR;
        let hi = ((d + 1) * PER_DIR).min(n);
        let names = ctx
            .openat(
                AT_FDCWD,
                dir.as_bytes(),
                libc::O_RDONLY | libc::O_DIRECTORY,
                0,
            )
            .and_then(|fd| {
                let mut names = std::collections::BTreeSet::new();
                // getdents hands out what it has not yet: until empty.
                let r = loop {
                    match ctx.getdents(fd) {
                        Ok(v) if v.is_empty() => break Ok(names),
                        Ok(v) => names.extend(v.into_iter().map(|e| e.name)),
                        Err(e) => break Err(e),
                    }
                };
                let _ = ctx.close(fd);
                r
            });
        match names {
            Ok(names) => {
                let extra = names.len() as u64
                    - names.iter().filter(|x| *x == b"." || *x == b"..").count() as u64;
                for i in lo..hi {
                    let f = format!("f{:03}", i % PER_DIR);
                    if !names.contains(f.as_bytes()) {
                        p.add(|| format!("{dir}: no {f} in the listing"));
                    }
                }
                if extra != hi - lo {
                    p.add(|| format!("{dir}: {extra} names listed, want {}", hi - lo));
                }
            }
            Err(e) => p.add(|| format!("{dir}: {e}")),
        }
        for i in lo..hi {
            let path = format!("{base}/{}", synth_rel(i));
            match ctx.statx(
                AT_FDCWD,
                path.as_bytes(),
                libc::AT_SYMLINK_NOFOLLOW,
                libc::STATX_BASIC_STATS,
            ) {
                Ok(st) => {
                    let kind = u32::from(st.stx_mode) & libc::S_IFMT;
                    if kind != libc::S_IFREG || st.stx_size != 0 {
                        p.add(|| format!("{path}: mode {:o} size {}", st.stx_mode, st.stx_size));
                    }
                }
                Err(e) => p.add(|| format!("{path}: {e}")),
            }
            done.fetch_add(1, Ordering::Relaxed);
        }
    }
    p
}

fn clients(opts: &ScaleOpts, res: &mut ScaleResult) -> Result<(), String> {
    let c = opts.serve_clients();
    let n = opts.client_files();
    let name = format!("clients-{c}x{n}");
    let subtrees: Vec<String> = (0..c).map(|k| format!("c{k}")).collect();
    let (tree, made) = cached_tree(&name, &subtrees, n)?;
    if let Some(s) = made {
        let mut row = Row::new("clients", "make-tree", "native");
        row.seconds = Some(s);
        row.files = Some(n * c as u64);
        res.rows.push(row);
    }
    let sock = Path::new(CACHE).join("clients.sock");
    progress("scale: clients: starting walkfs serve");
    let mut server = crate::proc::walkfs_serve(&opts.walkfs, &tree, &sock, &[])?;
    let pid = server.0.id();
    let pids = [None, Some(pid)];
    let sampler = Sampler::start(pids);
    let source = format!("unix:{}", sock.display());
    let o = SourceOptions::parse("cache=loose").map_err(|e| e.to_string())?;
    let mut ctxs = Vec::new();
    for k in 0..c {
        let vfs =
            walkfs_source::open(&source, &o).map_err(|e| format!("client {k}: connect: {e}"))?;
        ctxs.push(vfs.context(Creds::root()));
    }
    let total = n * c as u64;
    let done = AtomicU64::new(0);
    sampler.begin();
    let t0 = Instant::now();
    let (probs, stalled) = watched(
        &format!("clients: {c} walking {n} files each"),
        &done,
        total,
        &|| kill_pids(&pids),
        || {
            std::thread::scope(|s| {
                let hs: Vec<_> = ctxs
                    .into_iter()
                    .enumerate()
                    .map(|(k, ctx)| {
                        let done = &done;
                        s.spawn(move || client_walk(&ctx, k, n, done))
                    })
                    .collect();
                let mut all = Problems::default();
                for h in hs {
                    match h.join() {
                        Ok(p) => all.merge(p),
                        Err(_) => all.add(|| "a client thread panicked".into()),
                    }
                }
                all
            })
        },
    )?;
    let secs = t0.elapsed().as_secs_f64();
    let mut row = Row::new("clients", "walk-stat", "walkfs");
    row.peaks(&sampler.end());
    let stats = done.load(Ordering::Relaxed);
    row.seconds = Some(secs);
    row.clients = Some(c);
    row.files = Some(total);
    row.ops_per_sec = Some(stats as f64 / secs);
    row.errors = Some(probs.count);
    row.output = Some(format!("{stats} stats, {} errors", probs.count));
    let gone = server.exited();
    if probs.count > 0 || stalled || gone.is_some() {
        row.ok = false;
        let msg = format!(
            "clients: {} errors in {c} clients' {total} files{}{}: {}",
            probs.count,
            if stalled {
                " (the server stalled and was killed)"
            } else {
                ""
            },
            gone.map(|g| format!(" (walkfs serve {g})"))
                .unwrap_or_default(),
            probs.examples.join("; ")
        );
        row.error = Some(msg.clone());
        res.fail(msg);
    }
    res.rows.push(row);
    let mut row = Row::new("clients", "overall", "walkfs");
    row.clients = Some(c);
    row.peaks(&sampler.overall());
    row.fd_limit_server = fd_limit(pid);
    res.rows.push(row);
    drop(sampler);
    drop(server);
    let _ = std::fs::remove_file(&sock);
    Ok(())
}

// ---------------------------------------------------------------------
// Output

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_and_limits_parse() {
        let s = "Name:\twalkfs\nVmPeak:\t  900 kB\nVmHWM:\t    5120 kB\nVmRSS:\t    4096 kB\n";
        assert_eq!(parse_status_kib(s, "VmRSS"), Some(4096));
        assert_eq!(parse_status_kib(s, "VmHWM"), Some(5120));
        // A field is matched whole, not by prefix.
        assert_eq!(parse_status_kib(s, "VmR"), None);
        assert_eq!(parse_status_kib(s, "VmSwap"), None);
        let l = "Limit                     Soft Limit           Hard Limit           Units\n\
                 Max open files            20000                40000                files\n";
        assert_eq!(parse_fd_limit(l), Some(20000));
        assert_eq!(parse_du(b"123456\t.\n"), Some(123456));
        assert_eq!(parse_du(b""), None);
    }

    #[test]
    fn this_process_can_be_sampled() {
        let s = sample(std::process::id()).expect("/proc/self");
        assert!(s.fds >= 3 && s.rss_kib > 0 && s.hwm_kib >= s.rss_kib);
        let sampler = Sampler::start([Some(std::process::id()), None]);
        sampler.begin();
        let p = sampler.end();
        assert!(p[DAEMON].samples >= 2 && p[DAEMON].fds >= 3);
        assert_eq!(p[SERVER].samples, 0);
        let mut row = Row::new("t", "s", "walkfs");
        row.peaks(&p);
        assert!(row.peak_fds_daemon.is_some() && row.peak_fds_server.is_none());
    }

    #[test]
    fn synthetic_tree_is_as_named() {
        assert_eq!(synth_rel(0), "d000000/f000");
        assert_eq!(synth_rel(1999), "d000001/f999");
        assert_eq!(synth_dirs(2500), 3);
        assert_eq!(synth_dirs(3000), 3);
        let tmp = tempfile::tempdir().expect("tempdir");
        make_tree(tmp.path(), 2500, "test").expect("make_tree");
        // Idempotent: a second call completes, it does not fail.
        make_tree(tmp.path(), 2500, "test").expect("make_tree again");
        let mut files = 0;
        let mut dirs = 0;
        for d in std::fs::read_dir(tmp.path()).expect("read_dir").flatten() {
            dirs += 1;
            for f in std::fs::read_dir(d.path()).expect("read_dir").flatten() {
                assert_eq!(f.metadata().expect("stat").len(), 0);
                files += 1;
            }
        }
        assert_eq!((dirs, files), (3, 2500));
        let done = AtomicU64::new(0);
        let (got, p) = stat_all(tmp.path(), 2500, &[], &done);
        assert_eq!((got.len(), p.count), (2500, 0));
        assert_eq!(done.load(Ordering::Relaxed), 2500);
        // Checked against answers that differ, each is a problem.
        let mut want = got.clone();
        want[7].1 = 1;
        let (_, p) = stat_all(tmp.path(), 2500, &want, &done);
        assert_eq!(p.count, 1);
        assert!(p.examples[0].contains("d000000/f007"));
    }

    #[test]
    fn commands_are_timed_checked_and_limited() {
        let r = run_cmd(
            "printf",
            Command::new("printf").arg("a\nb\nc\n"),
            Duration::from_secs(10),
            &|| {},
        )
        .expect("printf");
        assert_eq!((r.lines, r.head.as_slice()), (3, &b"a\nb\nc\n"[..]));
        let e = run_cmd(
            "false",
            &mut Command::new("false"),
            Duration::from_secs(10),
            &|| {},
        )
        .err()
        .expect("false fails");
        assert!(e.contains("false"));
        let t0 = Instant::now();
        let e = run_cmd(
            "sleep",
            Command::new("sleep").arg("30"),
            Duration::from_millis(200),
            &|| panic!("sleep dies of SIGKILL"),
        )
        .err()
        .expect("killed");
        assert!(e.contains("killed") && t0.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn capture_keeps_both_ends() {
        let mut c = Capture::default();
        for i in 0..100_000 {
            c.push(format!("line {i}\n").as_bytes());
        }
        assert_eq!(c.lines, 100_000);
        let s = c.summary();
        assert!(s.starts_with("line 0 | line 1 | line 2"));
        assert!(s.ends_with("line 99999"), "{s}");
    }
}
