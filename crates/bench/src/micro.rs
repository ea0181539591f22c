//! `walkfs bench micro`: the seeds' lookup microbenchmarks, the host kernel
//! and walkfs side by side in one run, each walkfs optimization on and off.
//!
//! | bench | seed | the call |
//! |---|---|---|
//! | readlink | 000 | `readlink("initrd.img")`, a symlink to `boot/initrd.img-6.1.0-99-amd64` |
//! | access | 002 | `access("/usr/lib/gcc/x86_64-linux-gnu/12/crtendS.o", R_OK)` |
//! | trace | 001 | the gcc 12 trace, call by call with each call's syscall and flags |
//! | trace_access | 001 | `access(path, F_OK)` on every path of the trace |
//! | fstat, statx | 004 | `fstat(fd)` and `statx(fd, "", AT_EMPTY_PATH, STATX_BASIC_STATS)` |
//!
//! The kernel runs on ext4 (the machine's own `/` for access, trace and
//! stat; a scratch directory for readlink) and on tmpfs (`/dev/shm`);
//! walkfs runs over hostfs on the same ext4 paths and over memfs holding a
//! mirror of them. Ops/s are totals over all threads; each thread loops on
//! its own (will-it-scale style).

use std::ffi::CString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use walkfs_source::SourceOptions;
use walkfs_vfs::{Creds, Ctx, Errno, Vfs, AT_FDCWD};

use crate::proc::{KillOnDrop, Unmount};
use crate::report::{median, progress, progress_done, table, Steps};
use crate::timing::together;
use crate::trace::{self, Call};

pub const ACCESS_PATH: &str = "/usr/lib/gcc/x86_64-linux-gnu/12/crtendS.o";
const LINK_NAME: &str = "initrd.img";
const LINK_TARGET: &str = "boot/initrd.img-6.1.0-99-amd64";

/// What to run.
#[derive(Clone, Debug)]
pub struct MicroOpts {
    pub quick: bool,
    /// Thread counts to run (default: 1 and every core).
    pub threads: Vec<usize>,
    /// Only this walkfs source: a host directory (paths resolve inside it),
    /// `mem:`, a 9P server exporting `/` (`unix:PATH`, `tcp:HOST:PORT`), or
    /// `9p` to start one (`walkfs serve / --read-only` on a private unix
    /// socket). Default: hostfs over `/` and memfs.
    pub source: Option<String>,
    /// The `walkfs` executable, to start a server for `--source 9p` and
    /// to mount for `fuse`.
    pub walkfs: Option<PathBuf>,
    /// Also the kernel-side rows with their paths under a `walkfs mount`
    /// of the host's `/` (cache=loose,negtimeout=-1): warm lookups
    /// through FUSE should never leave the kernel.
    pub fuse: bool,
    /// Only these benches (default: all).
    pub benches: Vec<String>,
    /// Only these walkfs variants (default: all of [`VARIANTS`]).
    pub variants: Vec<String>,
}

/// One measured row; the JSON form is exactly these fields.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    pub bench: &'static str,
    pub target: &'static str,
    pub fs: String,
    pub variant: &'static str,
    pub threads: usize,
    pub ops_per_sec: f64,
    /// Over 9P: the RPCs one replay sends once the first has run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rpcs: Option<u64>,
    /// Over 9P: the RPCs of the first replay, from a cold cache.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rpcs_first: Option<u64>,
}

/// The walkfs variants: all optimizations on, then each one off alone.
pub const VARIANTS: &[(&str, &str)] = &[
    ("all", ""),
    ("no-fastpath", "fastpath=0"),
    ("no-fastperm", "fastperm=0"),
    ("no-cache-symlinks", "cache_symlinks=0"),
    ("no-negative", "negtimeout=0"),
];

const BENCHES: &[&str] = &[
    "readlink",
    "access",
    "trace",
    "trace_access",
    "fstat",
    "statx",
];

/// A thread's loop body: runs a batch, returns how many ops it did.
type Body = Box<dyn FnMut() -> u64 + Send>;
/// Makes a fresh body for each thread.
type Maker = Arc<dyn Fn() -> Body + Send + Sync>;

/// Run `make()` bodies on `threads` threads for about `dur`; total ops/s.
/// Each thread's rate is its ops over the time up to the end of its last
/// whole batch, so a slow batch (a replay over 9P with nothing cached
/// takes a second) that runs past the deadline is counted with its time.
fn measure(threads: usize, dur: Duration, make: &Maker) -> f64 {
    let run = together(
        threads,
        |_| {
            let mut body = make();
            body(); // warm the caches before the clock starts
            move |stop: &AtomicBool| {
                let t0 = Instant::now();
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    n += body();
                }
                n as f64 / t0.elapsed().as_secs_f64()
            }
        },
        || std::thread::sleep(dur),
    );
    run.results.into_iter().map(|r| r.unwrap_or(0.0)).sum()
}

fn c(s: &[u8]) -> CString {
    CString::new(s).unwrap_or_default()
}

fn open_dir(p: &Path) -> std::io::Result<OwnedFd> {
    std::fs::File::open(p).map(OwnedFd::from)
}

/// The scratch trees the kernel rows use.
struct Scratch {
    ext4: tempfile::TempDir,
    tmpfs: tempfile::TempDir,
}

fn make_tree(dir: &Path, with_access_path: bool) -> std::io::Result<()> {
    std::fs::create_dir_all(dir.join("boot"))?;
    std::fs::write(dir.join(LINK_TARGET), b"initrd")?;
    std::os::unix::fs::symlink(LINK_TARGET, dir.join(LINK_NAME))?;
    if with_access_path {
        let p = dir.join(&ACCESS_PATH[1..]);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&p, b"crtendS")?;
    }
    Ok(())
}

impl Scratch {
    fn new() -> std::io::Result<Scratch> {
        let ext4 = tempfile::Builder::new()
            .prefix("walkfs-bench-")
            .tempdir_in("/var/tmp")?;
        let tmpfs = tempfile::Builder::new()
            .prefix("walkfs-bench-")
            .tempdir_in("/dev/shm")?;
        make_tree(ext4.path(), false)?;
        make_tree(tmpfs.path(), true)?;
        Ok(Scratch { ext4, tmpfs })
    }
}

/// Copy into `ctx` (as root) the host objects `path` passes through:
/// directories, files (empty, same mode), symlinks (same target, and what
/// they point to).
fn mirror(ctx: &Ctx, path: &[u8], depth: u32) {
    if depth > 8 {
        return;
    }
    let mut prefix = Vec::with_capacity(path.len());
    for comp in path.split(|&b| b == b'/').filter(|c| !c.is_empty()) {
        prefix.push(b'/');
        prefix.extend_from_slice(comp);
        let Ok(md) =
            std::fs::symlink_metadata(std::ffi::OsStr::from_encoded_bytes_checked(&prefix))
        else {
            return;
        };
        if ctx
            .faccessat(AT_FDCWD, &prefix, 0, libc::AT_SYMLINK_NOFOLLOW)
            .is_ok()
        {
            continue;
        }
        use std::os::unix::fs::PermissionsExt;
        let mode = md.permissions().mode() & 0o7777;
        let ft = md.file_type();
        if ft.is_dir() {
            let _ = ctx.mkdirat(AT_FDCWD, &prefix, mode);
        } else if ft.is_file() {
            if let Ok(fd) = ctx.openat(AT_FDCWD, &prefix, libc::O_CREAT | libc::O_WRONLY, mode) {
                let _ = ctx.close(fd);
            }
        } else if ft.is_symlink() {
            let Ok(target) =
                std::fs::read_link(std::ffi::OsStr::from_encoded_bytes_checked(&prefix))
            else {
                return;
            };
            let target = target.as_os_str().as_encoded_bytes().to_vec();
            let _ = ctx.symlinkat(&target, AT_FDCWD, &prefix);
            let resolved = if target.first() == Some(&b'/') {
                target
            } else {
                let parent = &prefix[..prefix.iter().rposition(|&b| b == b'/').unwrap_or(0)];
                [parent, b"/", &target].concat()
            };
            mirror(ctx, &resolved, depth + 1);
        } else {
            return;
        }
    }
}

trait OsStrExt2 {
    fn from_encoded_bytes_checked(b: &[u8]) -> &std::ffi::OsStr;
}

impl OsStrExt2 for std::ffi::OsStr {
    fn from_encoded_bytes_checked(b: &[u8]) -> &std::ffi::OsStr {
        use std::os::unix::ffi::OsStrExt;
        std::ffi::OsStr::from_bytes(b)
    }
}

/// A walkfs source under test.
struct Source {
    /// "hostfs" or "memfs".
    fs: &'static str,
    /// The vfs for access, trace and stat (paths as on the host).
    main: Vfs,
    /// The vfs for readlink (a tree with `initrd.img` at its root).
    links: Vfs,
}

fn sources(opts: &MicroOpts, scratch: &Scratch) -> Result<Vec<Source>, String> {
    let err = |e: Errno| e.to_string();
    let mut out = Vec::new();
    let want_host = opts.source.as_deref().is_none_or(|s| s != "mem:");
    let want_mem = opts.source.as_deref().is_none_or(|s| s == "mem:");
    if want_host {
        let dir = opts.source.clone().unwrap_or_else(|| "/".to_string());
        let main = walkfs_source::open(&dir, &SourceOptions::default()).map_err(err)?;
        let links = walkfs_source::open(
            scratch.ext4.path().to_str().unwrap_or("/"),
            &SourceOptions::default(),
        )
        .map_err(err)?;
        out.push(Source {
            fs: "hostfs",
            main,
            links,
        });
    }
    if want_mem {
        let main = walkfs_source::open("mem:", &SourceOptions::default()).map_err(err)?;
        let ctx = main.context(Creds::root());
        for call in trace::calls() {
            mirror(&ctx, call.path(), 0);
        }
        mirror(&ctx, ACCESS_PATH.as_bytes(), 0);
        let links = walkfs_source::open("mem:", &SourceOptions::default()).map_err(err)?;
        let l = links.context(Creds::root());
        l.mkdirat(AT_FDCWD, b"/boot", 0o755).map_err(err)?;
        let fd = l
            .openat(
                AT_FDCWD,
                format!("/{LINK_TARGET}").as_bytes(),
                libc::O_CREAT | libc::O_WRONLY,
                0o644,
            )
            .map_err(err)?;
        l.close(fd).map_err(err)?;
        l.symlinkat(
            LINK_TARGET.as_bytes(),
            AT_FDCWD,
            format!("/{LINK_NAME}").as_bytes(),
        )
        .map_err(err)?;
        out.push(Source {
            fs: "memfs",
            main,
            links,
        });
    }
    Ok(out)
}

/// Replay `calls` once on the kernel; returns how many succeeded.
fn kernel_replay(calls: &[(Call, CString)]) -> u64 {
    let mut ok = 0;
    let mut buf = [0u8; 1024];
    for (call, p) in calls {
        // SAFETY: valid C strings and buffers; descriptors opened here are
        // closed here.
        let r = unsafe {
            match call {
                Call::Readlink(_) => {
                    libc::readlink(p.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) as i64
                }
                Call::Open(_, fl) => {
                    let fd = libc::open(p.as_ptr(), *fl | libc::O_CLOEXEC);
                    if fd >= 0 {
                        libc::close(fd);
                    }
                    fd as i64
                }
                Call::Stat(_, fl) => {
                    let mut st: libc::stat = std::mem::zeroed();
                    libc::fstatat(libc::AT_FDCWD, p.as_ptr(), &mut st, *fl) as i64
                }
                Call::Access(_, m, fl) => {
                    libc::syscall(libc::SYS_faccessat2, libc::AT_FDCWD, p.as_ptr(), *m, *fl)
                }
            }
        };
        ok += (r >= 0) as u64;
    }
    ok
}

/// Replay `calls` once on walkfs; returns how many succeeded.
fn walkfs_replay(ctx: &Ctx, calls: &[(Call, CString)]) -> u64 {
    let mut ok = 0;
    let mut buf = [0u8; 1024];
    for (call, _) in calls {
        let r = match call {
            Call::Readlink(p) => ctx.readlinkat_into(AT_FDCWD, p, &mut buf).is_ok(),
            Call::Open(p, fl) => match ctx.openat(AT_FDCWD, p, *fl, 0) {
                Ok(fd) => ctx.close(fd).is_ok(),
                Err(_) => false,
            },
            Call::Stat(p, fl) => ctx.fstatat(AT_FDCWD, p, *fl).is_ok(),
            Call::Access(p, m, fl) => ctx.faccessat(AT_FDCWD, p, *m, *fl).is_ok(),
        };
        ok += r as u64;
    }
    ok
}

/// Each call's answer on both sides: (calls, mismatches, hits).
fn check_trace(ctx: &Ctx, calls: &[(Call, CString)]) -> (usize, usize, usize) {
    let mut mismatches = 0;
    let mut hits = 0;
    for c in calls {
        let one = std::slice::from_ref(c);
        let k = kernel_replay(one);
        let w = walkfs_replay(ctx, one);
        hits += k as usize;
        if k != w {
            mismatches += 1;
            tracing::warn!(call = ?c.0, kernel = k, walkfs = w, "trace answer differs");
        }
    }
    (calls.len(), mismatches, hits)
}

/// The measured cases: (bench, target, fs, variant, maker).
struct Case {
    bench: &'static str,
    target: &'static str,
    fs: String,
    variant: &'static str,
    /// Switches to set on the source's vfs before measuring.
    switches: &'static str,
    vfs: Option<Vfs>,
    make: Maker,
    /// Over 9P: (first replay, later replay) RPCs.
    rpcs: Option<(u64, u64)>,
}

impl Case {
    /// A kernel row: the host's own calls, with nothing to switch.
    fn kernel(bench: &'static str, fs: &str, make: Maker) -> Case {
        Case {
            bench,
            target: "kernel",
            fs: fs.to_string(),
            variant: "all",
            switches: "",
            vfs: None,
            make,
            rpcs: None,
        }
    }
}

fn kernel_cases(
    scratch: &Scratch,
    calls: &Arc<Vec<(Call, CString)>>,
    paths: &Arc<Vec<CString>>,
) -> Vec<Case> {
    let mut v = Vec::new();
    for (fs, dir) in [
        ("ext4", scratch.ext4.path().to_path_buf()),
        ("tmpfs", scratch.tmpfs.path().to_path_buf()),
    ] {
        v.push(Case::kernel("readlink", fs, kernel_readlink(dir.clone())));
        // ext4: the machine's own path; tmpfs: the mirror under /dev/shm.
        let base = if fs == "ext4" {
            PathBuf::from("/")
        } else {
            dir.clone()
        };
        let rel = &ACCESS_PATH[1..];
        v.push(Case::kernel("access", fs, kernel_access(base.clone())));
        for bench in ["fstat", "statx"] {
            let file = base.join(rel);
            v.push(Case::kernel(
                bench,
                fs,
                Arc::new(move || {
                    let f = std::fs::File::open(&file).ok();
                    let raw = f.as_ref().map_or(-1, |f| f.as_raw_fd());
                    Box::new(move || {
                        let _keep = &f;
                        for _ in 0..1000 {
                            // SAFETY: valid fd and output buffers.
                            unsafe {
                                if bench == "fstat" {
                                    let mut st: libc::stat = std::mem::zeroed();
                                    libc::fstat(raw, &mut st);
                                } else {
                                    let mut st: libc::statx = std::mem::zeroed();
                                    libc::statx(
                                        raw,
                                        c"".as_ptr(),
                                        libc::AT_EMPTY_PATH,
                                        libc::STATX_BASIC_STATS,
                                        &mut st,
                                    );
                                }
                            }
                        }
                        1000
                    })
                }),
            ));
        }
    }
    v.push(Case::kernel("trace", "ext4", kernel_trace(calls.clone())));
    v.push(Case::kernel(
        "trace_access",
        "ext4",
        kernel_trace_access(paths.clone()),
    ));
    v
}

/// The kernel's `readlinkat(dir, "initrd.img")`, 1000 per batch.
fn kernel_readlink(dir: PathBuf) -> Maker {
    Arc::new(move || {
        let fd = open_dir(&dir).ok();
        let raw = fd.as_ref().map_or(-1, |f| f.as_raw_fd());
        let name = c(LINK_NAME.as_bytes());
        let mut buf = [0u8; 256];
        Box::new(move || {
            let _keep = &fd;
            for _ in 0..1000 {
                // SAFETY: valid fd, C string and buffer.
                unsafe { libc::readlinkat(raw, name.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
            }
            1000
        })
    })
}

/// The kernel's `faccessat(base, ACCESS_PATH relative, R_OK)`, 1000 per
/// batch.
fn kernel_access(base: PathBuf) -> Maker {
    Arc::new(move || {
        let fd = open_dir(&base).ok();
        let raw = fd.as_ref().map_or(-1, |f| f.as_raw_fd());
        let p = c(&ACCESS_PATH.as_bytes()[1..]);
        Box::new(move || {
            let _keep = &fd;
            for _ in 0..1000 {
                // SAFETY: valid fd and C string.
                unsafe { libc::faccessat(raw, p.as_ptr(), libc::R_OK, 0) };
            }
            1000
        })
    })
}

/// The kernel replaying `calls` (their C paths), one replay per batch.
fn kernel_trace(calls: Arc<Vec<(Call, CString)>>) -> Maker {
    Arc::new(move || {
        let calls = calls.clone();
        Box::new(move || {
            kernel_replay(&calls);
            calls.len() as u64
        })
    })
}

/// walkfs replaying `calls` through `vfs`, one replay per batch.
fn walkfs_trace(vfs: Vfs, calls: Arc<Vec<(Call, CString)>>) -> Maker {
    Arc::new(move || {
        let ctx = vfs.context(Creds::root());
        let calls = calls.clone();
        Box::new(move || {
            walkfs_replay(&ctx, &calls);
            calls.len() as u64
        })
    })
}

/// walkfs's `faccessat(path, F_OK)` on every path, one pass per batch.
fn walkfs_trace_access(vfs: Vfs, paths: Arc<Vec<CString>>) -> Maker {
    Arc::new(move || {
        let ctx = vfs.context(Creds::root());
        let paths = paths.clone();
        Box::new(move || {
            for p in paths.iter() {
                let _ = std::hint::black_box(ctx.faccessat(AT_FDCWD, p.as_bytes(), libc::F_OK, 0));
            }
            paths.len() as u64
        })
    })
}

/// The kernel's `access(path, F_OK)` on every path, one pass per batch.
fn kernel_trace_access(paths: Arc<Vec<CString>>) -> Maker {
    Arc::new(move || {
        let paths = paths.clone();
        Box::new(move || {
            for p in paths.iter() {
                // SAFETY: valid C string.
                unsafe { libc::access(p.as_ptr(), libc::F_OK) };
            }
            paths.len() as u64
        })
    })
}

fn walkfs_cases(
    src: &Source,
    calls: &Arc<Vec<(Call, CString)>>,
    paths: &Arc<Vec<CString>>,
) -> Vec<Case> {
    let mut v = Vec::new();
    for &(variant, switches) in VARIANTS {
        let case = |bench, vfs: &Vfs, make: Maker| Case {
            bench,
            target: "walkfs",
            fs: src.fs.to_string(),
            variant,
            switches,
            vfs: Some(vfs.clone()),
            make,
            rpcs: None,
        };
        let links = src.links.clone();
        v.push(case(
            "readlink",
            &src.links,
            Arc::new(move || {
                let ctx = links.context(Creds::root());
                let name = format!("/{LINK_NAME}").into_bytes();
                let mut buf = [0u8; 256];
                Box::new(move || {
                    for _ in 0..1000 {
                        let _ =
                            std::hint::black_box(ctx.readlinkat_into(AT_FDCWD, &name, &mut buf));
                    }
                    1000
                })
            }),
        ));
        let main = src.main.clone();
        v.push(case(
            "access",
            &src.main,
            Arc::new(move || {
                let ctx = main.context(Creds::root());
                Box::new(move || {
                    for _ in 0..1000 {
                        let _ = std::hint::black_box(ctx.faccessat(
                            AT_FDCWD,
                            ACCESS_PATH.as_bytes(),
                            libc::R_OK,
                            0,
                        ));
                    }
                    1000
                })
            }),
        ));
        for bench in ["fstat", "statx"] {
            let main = src.main.clone();
            v.push(case(
                bench,
                &src.main,
                Arc::new(move || {
                    let ctx = main.context(Creds::root());
                    let fd = ctx
                        .openat(AT_FDCWD, ACCESS_PATH.as_bytes(), libc::O_RDONLY, 0)
                        .unwrap_or(-1);
                    // Both into a caller's buffer, as the kernel's calls are.
                    // SAFETY: `struct stat` is plain old data; zero is valid.
                    let mut st: libc::stat = unsafe { std::mem::zeroed() };
                    let mut sx = walkfs_vfs::Statx::default();
                    Box::new(move || {
                        for _ in 0..1000 {
                            if bench == "fstat" {
                                let _ = std::hint::black_box(ctx.fstat_into(fd, &mut st));
                            } else {
                                let _ = std::hint::black_box(ctx.statx_into(
                                    fd,
                                    b"",
                                    libc::AT_EMPTY_PATH,
                                    libc::STATX_BASIC_STATS,
                                    &mut sx,
                                ));
                            }
                            std::hint::black_box((&st, &sx));
                        }
                        1000
                    })
                }),
            ));
        }
        v.push(case(
            "trace",
            &src.main,
            walkfs_trace(src.main.clone(), calls.clone()),
        ));
        v.push(case(
            "trace_access",
            &src.main,
            walkfs_trace_access(src.main.clone(), paths.clone()),
        ));
    }
    v
}

/// Every optimization on, then `switches` (`name=value,...`) on top. A
/// switch the vfs refuses (a name it does not know, a value it cannot
/// take) or one without a value is an error naming it: ignored, its
/// variant would be measured as "all" under its own name.
fn set_switches(vfs: &Vfs, switches: &str) -> Result<(), String> {
    let set = |name: &str, value: &str| {
        vfs.set_option(name, value)
            .map_err(|e| format!("switch {name}={value}: {e}"))
    };
    for (name, value) in [
        ("fastpath", "1"),
        ("fastperm", "1"),
        ("cache_symlinks", "1"),
        ("negtimeout", "-1"),
    ] {
        set(name, value)?;
    }
    for kv in switches.split(',').filter(|s| !s.is_empty()) {
        let (k, v) = kv
            .split_once('=')
            .ok_or_else(|| format!("switch {kv}: not NAME=VALUE"))?;
        set(k, v)?;
    }
    Ok(())
}

/// Set `case`'s switches on its vfs (none for the kernel and 9P rows).
fn switch_case(case: &Case) -> Result<(), String> {
    match &case.vfs {
        Some(vfs) => set_switches(vfs, case.switches)
            .map_err(|e| format!("variant {} ({}): {e}", case.variant, case.fs)),
        None => Ok(()),
    }
}

/// The result of a run: rows (medians) and notes for the report.
pub struct MicroResult {
    pub rows: Vec<Row>,
    pub notes: Vec<String>,
}

/// Run the benchmark.
pub fn run(opts: &MicroOpts) -> Result<MicroResult, String> {
    if let Some(bad) = opts
        .variants
        .iter()
        .find(|v| !VARIANTS.iter().any(|(name, _)| name == v))
    {
        let names: Vec<&str> = VARIANTS.iter().map(|(name, _)| *name).collect();
        return Err(format!(
            "--variant {bad}: no such variant (known: {})",
            names.join(", ")
        ));
    }
    let scratch = Scratch::new().map_err(|e| format!("scratch trees: {e}"))?;
    let calls: Arc<Vec<(Call, CString)>> = Arc::new(
        trace::calls()
            .into_iter()
            .map(|call| {
                let p = c(call.path());
                (call, p)
            })
            .collect(),
    );
    let paths: Arc<Vec<CString>> = Arc::new(trace::replay_paths().iter().map(|p| c(p)).collect());
    if let Some(addr) = opts.source.as_deref().filter(|s| is_9p(s)) {
        return run_9p(opts, addr, &scratch, &calls, &paths);
    }
    progress("micro: building the memfs mirror...");
    let srcs = sources(opts, &scratch)?;
    let mut notes = Vec::new();
    for s in &srcs {
        let ctx = s.main.context(Creds::root());
        let (n, bad, hits) = check_trace(&ctx, &calls);
        notes.push(format!(
            "trace on {}: {n} calls, {hits} succeed and {} fail (ENOENT/ENOTDIR/EINVAL) on the kernel; walkfs answers differ on {bad}",
            s.fs,
            n - hits
        ));
    }
    let mut cases = kernel_cases(&scratch, &calls, &paths);
    for s in &srcs {
        cases.extend(walkfs_cases(s, &calls, &paths));
    }
    let _mount = if opts.fuse {
        let exe = opts
            .walkfs
            .as_deref()
            .ok_or("--fuse needs the walkfs executable")?;
        let m = FuseMount::new(exe)?;
        let (c, note) = fuse_cases(&m.mnt, &scratch, &calls, &paths);
        cases.extend(c);
        notes.push(note);
        Some(m)
    } else {
        None
    };
    measure_cases(opts, cases, notes)
}

/// `walkfs mount / MNT -o cache=loose,negtimeout=-1`, unmounted on drop.
struct FuseMount {
    mnt: PathBuf,
    // Unmounted before its mountpoint goes (fields drop in order).
    _mounted: Unmount,
    _dir: tempfile::TempDir,
}

impl FuseMount {
    fn new(walkfs: &Path) -> Result<FuseMount, String> {
        let dir = tempfile::Builder::new()
            .prefix("walkfs-bench-mnt-")
            .tempdir()
            .map_err(|e| format!("mountpoint: {e}"))?;
        let mnt = dir.path().to_path_buf();
        let out = std::process::Command::new(walkfs)
            .args(["mount", "/"])
            .arg(&mnt)
            .args(["-o", "cache=loose,negtimeout=-1"])
            .output()
            .map_err(|e| format!("walkfs mount: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "walkfs mount / {}: {}",
                mnt.display(),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(FuseMount {
            _mounted: Unmount(mnt.clone()),
            mnt,
            _dir: dir,
        })
    }
}

/// The kernel rows again with every path under the FUSE mount `mnt` of
/// the host's `/`: fs "walkfs-fuse", compared with the ext4 rows.
fn fuse_cases(
    mnt: &Path,
    scratch: &Scratch,
    calls: &[(Call, CString)],
    paths: &[CString],
) -> (Vec<Case>, String) {
    let under = |p: &[u8]| {
        let mut v = mnt.as_os_str().as_encoded_bytes().to_vec();
        v.extend_from_slice(p);
        c(&v)
    };
    let fcalls: Arc<Vec<(Call, CString)>> = Arc::new(
        calls
            .iter()
            .map(|(call, _)| (call.clone(), under(call.path())))
            .collect(),
    );
    let fpaths: Arc<Vec<CString>> = Arc::new(paths.iter().map(|p| under(p.as_bytes())).collect());
    // The answers through the mount against the kernel's own.
    let bad = calls
        .iter()
        .zip(fcalls.iter())
        .filter(|(k, f)| {
            kernel_replay(std::slice::from_ref(*k)) != kernel_replay(std::slice::from_ref(*f))
        })
        .count();
    let note = format!(
        "trace through the walkfs FUSE mount of / at {}: answers differ from the host on {bad} of {} calls",
        mnt.display(),
        calls.len()
    );
    let link_dir = mnt.join(
        scratch
            .ext4
            .path()
            .strip_prefix("/")
            .unwrap_or(scratch.ext4.path()),
    );
    let kernel = |bench, make: Maker| Case::kernel(bench, "walkfs-fuse", make);
    let v = vec![
        kernel("readlink", kernel_readlink(link_dir)),
        kernel("access", kernel_access(mnt.to_path_buf())),
        kernel("trace", kernel_trace(fcalls)),
        kernel("trace_access", kernel_trace_access(fpaths)),
    ];
    (v, note)
}

/// Measure every case on every thread count, repetitions interleaved.
fn measure_cases(
    opts: &MicroOpts,
    mut cases: Vec<Case>,
    notes: Vec<String>,
) -> Result<MicroResult, String> {
    if !opts.benches.is_empty() {
        cases.retain(|c| opts.benches.iter().any(|b| b == c.bench));
    }
    if !opts.variants.is_empty() {
        cases.retain(|c| c.target != "walkfs" || opts.variants.iter().any(|v| v == c.variant));
    }
    let (reps, dur) = if opts.quick {
        (1, Duration::from_millis(60))
    } else {
        (5, Duration::from_millis(300))
    };
    // Every case's switches are tried before anything is measured: a run
    // with one the vfs refuses fails here, not halfway through.
    for case in &cases {
        switch_case(case)?;
    }
    let mut steps = Steps::new("micro", cases.len() * opts.threads.len() * reps);
    let mut samples: Vec<Vec<f64>> = vec![Vec::new(); cases.len() * opts.threads.len()];
    // Repetitions are interleaved across cases, so a noisy moment of the
    // machine spreads over all of them instead of sinking one.
    for _ in 0..reps {
        for (ci, case) in cases.iter().enumerate() {
            switch_case(case)?;
            for (ti, &t) in opts.threads.iter().enumerate() {
                steps.next(&format!(
                    "{} {} {} {} x{t}",
                    case.bench, case.target, case.fs, case.variant
                ));
                samples[ci * opts.threads.len() + ti].push(measure(t, dur, &case.make));
            }
        }
    }
    progress_done();
    let mut rows = Vec::new();
    for (ci, case) in cases.iter().enumerate() {
        for (ti, &t) in opts.threads.iter().enumerate() {
            rows.push(Row {
                bench: case.bench,
                target: case.target,
                fs: case.fs.clone(),
                variant: case.variant,
                threads: t,
                ops_per_sec: median(&mut samples[ci * opts.threads.len() + ti]),
                rpcs: case.rpcs.map(|r| r.1),
                rpcs_first: case.rpcs.map(|r| r.0),
            });
        }
    }
    let _ = BENCHES;
    Ok(MicroResult { rows, notes })
}

fn is_9p(source: &str) -> bool {
    source == "9p" || walkfs_p9::Addr::parse(source).is_some()
}

/// The cache modes of the 9P rows, as the Linux client names them.
const P9_MODES: &[(&str, &str)] = &[
    ("9p-none", "cache=none"),
    ("9p-loose", "cache=loose,negtimeout=0"),
    ("9p-loose-neg", "cache=loose,negtimeout=-1"),
];

/// A `walkfs serve` child, killed when dropped (its socket's directory
/// goes after it).
struct ServerChild {
    _child: KillOnDrop,
    _sock_dir: tempfile::TempDir,
}

/// Start `walkfs serve / --read-only` on a private unix socket.
fn start_server(walkfs: &Path) -> Result<(ServerChild, String), String> {
    let dir = tempfile::Builder::new()
        .prefix("walkfs-bench-sock-")
        .tempdir()
        .map_err(|e| format!("socket dir: {e}"))?;
    let sock = dir.path().join("9p.sock");
    let addr = format!("unix:{}", sock.display());
    let child = crate::proc::walkfs_serve(walkfs, Path::new("/"), &sock, &["--read-only"])?;
    Ok((
        ServerChild {
            _child: child,
            _sock_dir: dir,
        },
        addr,
    ))
}

/// The trace replays over 9P: the server at `addr` exports the host's `/`
/// (or `9p`: start one). Each cache mode gets a fresh client; its first
/// replay runs from a cold cache, and the RPCs of the first and of a
/// later replay are counted.
fn run_9p(
    opts: &MicroOpts,
    addr: &str,
    scratch: &Scratch,
    calls: &Arc<Vec<(Call, CString)>>,
    paths: &Arc<Vec<CString>>,
) -> Result<MicroResult, String> {
    let (_child, addr) = if addr == "9p" {
        let exe = opts
            .walkfs
            .as_deref()
            .ok_or("--source 9p needs the walkfs executable")?;
        let (c, a) = start_server(exe)?;
        (Some(c), a)
    } else {
        (None, addr.to_string())
    };
    let mut notes = vec![format!(
        "9P server {addr}: the trace's paths resolve in its export (it must export /)"
    )];
    let mut cases: Vec<Case> = kernel_cases(scratch, calls, paths)
        .into_iter()
        .filter(|c| c.bench.starts_with("trace"))
        .collect();
    for &(fs, mode) in P9_MODES {
        let o = SourceOptions::parse(mode).map_err(|e| e.to_string())?;
        let vfs = walkfs_source::open(&addr, &o).map_err(|e| format!("{addr}: {e}"))?;
        let ctx = vfs.context(Creds::root());
        let count = |ctx: &Ctx| {
            vfs.reset_rpc_stats();
            walkfs_replay(ctx, calls);
            vfs.rpc_stats().map_or(0, |s| s.total_rpcs)
        };
        let first = count(&ctx);
        let later = count(&ctx);
        let (n, bad, hits) = check_trace(&ctx, calls);
        notes.push(format!(
            "trace over 9P ({mode}): {n} calls, {hits} succeed on the kernel; walkfs answers differ on {bad}; RPCs first replay {first}, later replays {later}"
        ));
        for bench in ["trace", "trace_access"] {
            let make = if bench == "trace" {
                walkfs_trace(vfs.clone(), calls.clone())
            } else {
                walkfs_trace_access(vfs.clone(), paths.clone())
            };
            cases.push(Case {
                bench,
                target: "walkfs",
                fs: fs.to_string(),
                variant: "all",
                switches: "",
                vfs: None,
                make,
                rpcs: (bench == "trace").then_some((first, later)),
            });
        }
    }
    measure_cases(opts, cases, notes)
}

/// The kernel row a walkfs row is compared with.
pub fn kernel_peer(fs: &str) -> &'static str {
    match fs {
        "memfs" => "tmpfs",
        _ => "ext4",
    }
}

fn find<'a>(
    rows: &'a [Row],
    bench: &str,
    target: &str,
    fs: &str,
    variant: &str,
    threads: usize,
) -> Option<&'a Row> {
    rows.iter().find(|r| {
        r.bench == bench
            && r.target == target
            && r.fs == fs
            && r.variant == variant
            && r.threads == threads
    })
}

/// The human report: every row, then the figures the targets are about.
pub fn render(res: &MicroResult) -> String {
    let rows = &res.rows;
    let mut out = String::new();
    let mut t = Vec::new();
    for r in rows {
        let peer = if r.target == "walkfs" {
            let kfs = if r.bench.starts_with("trace") {
                "ext4"
            } else {
                kernel_peer(&r.fs)
            };
            find(rows, r.bench, "kernel", kfs, "all", r.threads)
                .map(|k| format!("{:.1}x", r.ops_per_sec / k.ops_per_sec))
        } else {
            None
        };
        t.push(vec![
            r.bench.to_string(),
            r.target.to_string(),
            r.fs.clone(),
            r.variant.to_string(),
            r.threads.to_string(),
            format!("{:.0}", r.ops_per_sec),
            format!("{:.1}", 1e9 / r.ops_per_sec * r.threads as f64),
            peer.unwrap_or_default(),
        ]);
    }
    out.push_str(&table(
        &[
            "bench",
            "target",
            "fs",
            "variant",
            "threads",
            "ops/s",
            "ns/op/thread",
            "vs kernel",
        ],
        &t,
    ));
    out.push('\n');
    // Each optimization's own effect, on the case it targets.
    let mut s = Vec::new();
    for (variant, bench, fs) in [
        ("no-fastpath", "trace", "memfs"),
        ("no-fastpath", "access", "memfs"),
        ("no-fastperm", "access", "memfs"),
        ("no-cache-symlinks", "readlink", "hostfs"),
        ("no-cache-symlinks", "readlink", "memfs"),
        ("no-negative", "trace", "hostfs"),
    ] {
        if let (Some(all), Some(off)) = (
            find(rows, bench, "walkfs", fs, "all", 1),
            find(rows, bench, "walkfs", fs, variant, 1),
        ) {
            s.push(vec![
                variant.to_string(),
                bench.to_string(),
                fs.to_string(),
                format!("{:.0}", off.ops_per_sec),
                format!("{:.0}", all.ops_per_sec),
                format!("{:+.1}%", (all.ops_per_sec / off.ops_per_sec - 1.0) * 100.0),
            ]);
        }
    }
    if !s.is_empty() {
        out.push_str("each optimization alone (1 thread): off -> on\n");
        out.push_str(&table(
            &[
                "switched off",
                "bench",
                "fs",
                "off ops/s",
                "all ops/s",
                "gain",
            ],
            &s,
        ));
        out.push('\n');
    }
    let p9: Vec<Vec<String>> = rows
        .iter()
        .filter(|r| r.threads == 1)
        .filter_map(|r| {
            let later = r.rpcs?;
            let k = find(rows, r.bench, "kernel", "ext4", "all", 1)?;
            Some(vec![
                r.fs.clone(),
                r.rpcs_first.unwrap_or(0).to_string(),
                later.to_string(),
                format!("{:.1}", 1e9 / r.ops_per_sec),
                format!("{:.2}x", r.ops_per_sec / k.ops_per_sec),
            ])
        })
        .collect();
    if !p9.is_empty() {
        out.push_str("the gcc trace over 9P (1 thread): RPCs per replay\n");
        out.push_str(&table(
            &[
                "fs",
                "first replay",
                "later replays",
                "ns/call",
                "vs kernel ext4",
            ],
            &p9,
        ));
        out.push('\n');
    }
    let fuse: Vec<Vec<String>> = rows
        .iter()
        .filter(|r| r.fs == "walkfs-fuse")
        .filter_map(|r| {
            let k = find(rows, r.bench, "kernel", "ext4", "all", r.threads)?;
            Some(vec![
                r.bench.to_string(),
                r.threads.to_string(),
                format!("{:.1}", 1e9 / k.ops_per_sec * r.threads as f64),
                format!("{:.1}", 1e9 / r.ops_per_sec * r.threads as f64),
                format!("{:.2}x", r.ops_per_sec / k.ops_per_sec),
            ])
        })
        .collect();
    if !fuse.is_empty() {
        out.push_str("the kernel's calls on the host vs under a walkfs FUSE mount of / (cache=loose,negtimeout=-1)\n");
        out.push_str(&table(
            &[
                "bench",
                "threads",
                "host ns",
                "walkfs mount ns",
                "mount/host",
            ],
            &fuse,
        ));
        out.push('\n');
    }
    let max_t = rows.iter().map(|r| r.threads).max().unwrap_or(1);
    if max_t > 1 {
        let mut s = Vec::new();
        for bench in ["access", "trace", "readlink", "statx"] {
            for fs in ["hostfs", "memfs"] {
                if let (Some(a), Some(b)) = (
                    find(rows, bench, "walkfs", fs, "all", 1),
                    find(rows, bench, "walkfs", fs, "all", max_t),
                ) {
                    s.push(vec![
                        bench.to_string(),
                        fs.to_string(),
                        format!("{:.2}x", b.ops_per_sec / a.ops_per_sec),
                    ]);
                }
            }
        }
        out.push_str(&format!("scaling 1 -> {max_t} threads (walkfs, all on)\n"));
        out.push_str(&table(&["bench", "fs", "speedup"], &s));
        out.push('\n');
    }
    for n in &res.notes {
        out.push_str(n);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memfs_mirror_answers_the_trace_like_the_host() {
        let vfs = walkfs_source::open("mem:", &SourceOptions::default()).unwrap();
        let ctx = vfs.context(Creds::root());
        let calls: Vec<(Call, CString)> = trace::calls()
            .into_iter()
            .map(|x| {
                let p = c(x.path());
                (x, p)
            })
            .collect();
        for (call, _) in &calls {
            mirror(&ctx, call.path(), 0);
        }
        let (n, bad, _) = check_trace(&ctx, &calls);
        assert_eq!(n, 2247);
        assert_eq!(bad, 0, "the memfs mirror answers differently from the host");
    }

    #[test]
    fn every_variant_switches_and_a_bad_switch_is_named() {
        let vfs = walkfs_source::open("mem:", &SourceOptions::default()).unwrap();
        for (variant, switches) in VARIANTS {
            set_switches(&vfs, switches).unwrap_or_else(|e| panic!("{variant}: {e}"));
        }
        let e = set_switches(&vfs, "fastpth=0").unwrap_err();
        assert!(e.contains("fastpth"), "{e}");
        let e = set_switches(&vfs, "negtimeout=soon").unwrap_err();
        assert!(e.contains("negtimeout=soon"), "{e}");
        let e = set_switches(&vfs, "fastpath").unwrap_err();
        assert!(e.contains("fastpath"), "{e}");
        // A bad switch fails the run before any case is measured.
        let measured = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let m = measured.clone();
        let make: Maker = Arc::new(move || {
            m.fetch_add(1, Ordering::Relaxed);
            Box::new(|| 1)
        });
        let case = |variant, switches| Case {
            bench: "access",
            target: "walkfs",
            fs: "memfs".into(),
            variant,
            switches,
            vfs: Some(vfs.clone()),
            make: make.clone(),
            rpcs: None,
        };
        let opts = MicroOpts {
            quick: true,
            threads: vec![1],
            source: None,
            walkfs: None,
            fuse: false,
            benches: vec![],
            variants: vec![],
        };
        let cases = vec![case("all", ""), case("no-typo", "fastpth=0")];
        let e = measure_cases(&opts, cases, vec![]).err().expect("refused");
        assert!(e.contains("no-typo") && e.contains("fastpth"), "{e}");
        assert_eq!(measured.load(Ordering::Relaxed), 0);
        // So does a variant nobody defined.
        let e = run(&MicroOpts {
            variants: vec!["no-fastpth".into()],
            ..opts
        })
        .err()
        .expect("unknown variant");
        assert!(e.contains("no-fastpth"), "{e}");
    }

    #[test]
    fn measure_counts_ops() {
        let make: Maker = Arc::new(|| Box::new(|| 10));
        assert!(measure(2, Duration::from_millis(20), &make) > 0.0);
    }
}
