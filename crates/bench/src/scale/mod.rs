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

mod clients;
mod cmd;
mod kernel;
mod render;
mod sample;
mod stack;
mod synthetic;
mod tree;

use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;

use crate::report::progress_done;
use sample::{DAEMON, SERVER};

pub use crate::proc::parse_status_kib;
pub use kernel::{fetch_kernel, parse_du};
pub use render::render;
pub use sample::{parse_fd_limit, sample, Peaks, ProcSample};
pub use tree::{make_tree, synth_dirs, synth_rel};

/// Everything the bench fetches, makes and runs in.
pub const CACHE: &str = "/var/tmp/walkfs-bench-scale";
/// Files to a directory in the synthetic trees.
pub const PER_DIR: u64 = 1000;
/// In the error of a command that ran out of time (a walkfs stack that
/// let one step run out is not given the next ones).
const TIMED_OUT: &str = "ran out of its time limit";

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

    /// The step failed: `error` says why.
    fn failed(&mut self, error: String) {
        self.ok = false;
        self.error = Some(error);
    }

    /// Whether the step failed by running out of its time limit.
    fn timed_out(&self) -> bool {
        self.error.as_deref().is_some_and(|e| e.contains(TIMED_OUT))
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

    /// `row` failed, and with it the run, for the same reason.
    fn fail_row(&mut self, row: &mut Row, what: String) {
        row.failed(what.clone());
        self.fail(what);
    }
}

/// The time limit of a step: natively an hour; on walkfs 30 times what
/// it took natively, at least 5 min (an hour if it failed natively).
fn step_limit(native_seconds: Option<f64>) -> Duration {
    native_seconds.map_or(Duration::from_secs(3600), |s| {
        Duration::from_secs_f64((s * 30.0).max(300.0))
    })
}

/// Run the parts asked for. Failures are collected, not returned: what
/// was measured is reported either way.
pub fn run(opts: &ScaleOpts) -> ScaleResult {
    let mut res = ScaleResult::default();
    if let Err(e) = std::fs::create_dir_all(CACHE) {
        res.fail(format!("{CACHE}: {e}"));
        return res;
    }
    stack::ensure_tools(&mut res);
    if !opts.skip_kernel {
        if let Err(e) = kernel::kernel(opts, &mut res) {
            res.fail(format!("kernel: {e}"));
        }
    }
    if !opts.skip_synthetic {
        if let Err(e) = synthetic::synthetic(opts, &mut res) {
            res.fail(format!("synthetic: {e}"));
        }
    }
    if opts.serve_clients() > 0 {
        if let Err(e) = clients::clients(opts, &mut res) {
            res.fail(format!("clients: {e}"));
        }
    }
    progress_done();
    res
}
