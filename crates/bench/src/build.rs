//! `walkfs bench build`: seed 003's workload — a clean build of hostapd
//! and wpa_supplicant (Debian's `wpa` source, hostap 2.10) — timed on the
//! native file system, on `walkfs mount` in each cache mode, and on the
//! FUSE peers a user would pick instead (bindfs, sshfs over 127.0.0.1);
//! then the walkfs rows again behind a slow link (`walkfs serve
//! --reply-delay-us`). The shorter workloads users complain about on
//! shares are `walkfs bench workloads` (workloads.rs), on the same
//! mounts.
//!
//! Every build starts from a fresh copy of the source and a fresh mount;
//! configurations are interleaved across repetitions so a noisy moment
//! of the machine spreads over all of them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::files::{file_name, find_in, untar};
use crate::proc::{free_port, is_mounted, listening, sh, spawn_ready, wait_mounted, KillOnDrop};
use crate::report::{median_of, median_sample, progress, progress_done, table, Steps};

/// The feature set of upstream's tests/hwsim/build.sh, appended to each
/// program's defconfig (Debian's tarball ships no tests/).
pub const HOSTAPD_CONFIG: &str = include_str!("../hostap/hostapd.config");
pub const WPA_SUPPLICANT_CONFIG: &str = include_str!("../hostap/wpa_supplicant.config");

/// Debian packages the build and the peers need.
pub const APT_NEEDS: &[&str] = &[
    "dpkg-dev",
    "gcc",
    "make",
    "pkg-config",
    "libssl-dev",
    "libnl-3-dev",
    "libnl-genl-3-dev",
    "libnl-route-3-dev",
    "libdbus-1-dev",
    "fuse3",
    "bindfs",
    "sshfs",
    "openssh-server",
    "openssh-client",
    "git",
    "xz-utils",
];

const DEB_SRC: &str = "/etc/apt/sources.list.d/walkfs-deb-src.sources";
const DEB_SRC_LIST: &str = "/etc/apt/sources.list.d/walkfs-deb-src.list";
const CACHE: &str = "/var/tmp/walkfs-bench-build";

#[derive(Clone, Debug)]
pub struct BuildOpts {
    pub quick: bool,
    /// The `walkfs` executable (for `walkfs mount` and `walkfs serve`).
    pub walkfs: PathBuf,
    /// Only these configurations (by row name); default all.
    pub only: Vec<String>,
    /// Repetitions (median reported); default 3, 1 with --quick.
    pub reps: Option<usize>,
    /// Delay per reply of the slow-link rows, µs (0: no slow-link rows).
    pub slow_us: u64,
    /// Another `walkfs` executable (an earlier release): every walkfs row
    /// also runs with it, as `NAME@baseline`, interleaved in the same run.
    pub baseline: Option<PathBuf>,
}

/// One measured row; JSON as the issue specifies, plus the RPCs of the
/// run for walkfs rows.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    pub bench: String,
    pub fs: String,
    pub seconds: f64,
    pub ratio_to_native: f64,
    /// CPU seconds (user + system) of the build's processes, median: the
    /// same compile work takes more of them when the machine's CPUs run
    /// slower (a shared host), so it tells noise from overhead.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_seconds: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rpcs: Option<u64>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub rpcs_by_type: BTreeMap<String, u64>,
}

/// A file system configuration under test.
#[derive(Clone, Debug)]
pub(crate) enum Kind {
    Native,
    /// `walkfs mount` of the local directory with these options (the vfs
    /// over the directory; with `via_9p` through the 9P client and an
    /// in-process server); with a delay, a separate `walkfs serve
    /// --reply-delay-us` and `walkfs mount unix:...`.
    Walkfs {
        opts: &'static str,
        delay_us: u64,
        via_9p: bool,
        /// Run with [`BuildOpts::baseline`] instead of [`BuildOpts::walkfs`].
        baseline: bool,
        /// The mount answers FUSE's INIT as this older kernel would have
        /// asked (`WALKFS_FUSE_AS_KERNEL`): what a guest running it gets.
        as_kernel: Option<&'static str>,
    },
    Bindfs,
    Sshfs,
}

#[derive(Clone, Debug)]
pub(crate) struct Config {
    pub name: String,
    pub kind: Kind,
}

impl Config {
    pub(crate) fn new(name: &str, kind: Kind) -> Config {
        Config {
            name: name.into(),
            kind,
        }
    }

    /// A `walkfs mount` row with these options, behind `walkfs serve
    /// --reply-delay-us` if `delay_us` > 0, through the 9P stack if
    /// `via_9p`; the current executable, the kernel's own INIT.
    pub(crate) fn walkfs(name: &str, opts: &'static str, delay_us: u64, via_9p: bool) -> Config {
        Config::new(
            name,
            Kind::Walkfs {
                opts,
                delay_us,
                via_9p,
                baseline: false,
                as_kernel: None,
            },
        )
    }
}

fn configs(opts: &BuildOpts) -> Result<Vec<Config>, String> {
    let mut v = vec![Config::new("native", Kind::Native)];
    let walkfs_modes: &[(&str, &str)] = &[
        ("walkfs-none", "cache=none"),
        ("walkfs-loose", "cache=loose,negtimeout=0"),
        ("walkfs-loose-neg", "cache=loose,negtimeout=-1"),
        (
            "walkfs-loose-neg-nosymcache",
            "cache=loose,negtimeout=-1,cache_symlinks=0",
        ),
        // Loose caching kept true by the server's change notifications.
        ("walkfs-coherent", "cache=coherent,negtimeout=-1"),
    ];
    for &(name, o) in walkfs_modes {
        v.push(Config::walkfs(name, o, 0, false));
    }
    v.push(Config::new("bindfs", Kind::Bindfs));
    v.push(Config::new("sshfs", Kind::Sshfs));
    if opts.slow_us > 0 {
        for &(name, o) in walkfs_modes {
            let name = format!("{name}-slow{}us", opts.slow_us);
            v.push(Config::walkfs(&name, o, opts.slow_us, false));
        }
    }
    if opts.quick && opts.only.is_empty() {
        v.retain(|c| {
            ["native", "walkfs-loose-neg", "walkfs-coherent", "bindfs"].contains(&c.name.as_str())
        });
    } else if !opts.only.is_empty() {
        if let Some(bad) = opts.only.iter().find(|o| !v.iter().any(|c| &c.name == *o)) {
            let names: Vec<&str> = v.iter().map(|c| c.name.as_str()).collect();
            return Err(format!(
                "--only {bad}: no such configuration (known: {})",
                names.join(", ")
            ));
        }
        // Native always runs: every ratio is to it, measured in this run.
        v.retain(|c| c.name == "native" || opts.only.contains(&c.name));
    }
    if opts.baseline.is_some() {
        let twins: Vec<Config> = v
            .iter()
            .filter_map(|c| {
                let mut twin = Config::new(&format!("{}@baseline", c.name), c.kind.clone());
                match &mut twin.kind {
                    Kind::Walkfs { baseline, .. } => *baseline = true,
                    _ => return None,
                }
                Some(twin)
            })
            .collect();
        v.extend(twins);
    }
    Ok(v)
}

/// Install what is missing, add a deb-src entry if there is none, and
/// fetch `wpa`'s upstream tarball with `apt-get source`. Returns the
/// tarball's path (cached across runs).
pub fn fetch() -> Result<PathBuf, String> {
    std::fs::create_dir_all(CACHE).map_err(|e| format!("{CACHE}: {e}"))?;
    if let Some(t) = find_tarball() {
        return Ok(t);
    }
    let missing: Vec<&str> = APT_NEEDS
        .iter()
        .copied()
        .filter(|p| {
            !Command::new("dpkg-query")
                .args(["-W", "-f=${Status}", p])
                .output()
                .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("ok installed"))
        })
        .collect();
    if !has_deb_src() {
        let (deb822, one_line) = deb_src_entries(&apt_source_files());
        if deb822.is_empty() && one_line.is_empty() {
            return Err(
                "no deb-src entry, and no `deb` entry in the apt sources to derive \
                        one from: add a deb-src entry for the distribution's archive"
                    .into(),
            );
        }
        for (path, text) in [(DEB_SRC, deb822), (DEB_SRC_LIST, one_line)] {
            if !text.is_empty() {
                std::fs::write(path, text).map_err(|e| format!("{path}: {e}"))?;
            }
        }
    }
    sh(Command::new("apt-get").args(["update", "-qq"]))?;
    if !missing.is_empty() {
        sh(Command::new("apt-get")
            .args(["install", "-y", "-qq"])
            .args(&missing)
            .env("DEBIAN_FRONTEND", "noninteractive"))?;
    }
    sh(Command::new("apt-get")
        .args(["source", "-qq", "--download-only", "wpa"])
        .current_dir(CACHE))?;
    find_tarball().ok_or_else(|| "apt-get source wpa fetched no orig tarball".into())
}

fn find_tarball() -> Option<PathBuf> {
    find_in(Path::new(CACHE), |p| {
        file_name(p).is_some_and(|n| n.starts_with("wpa_") && n.contains(".orig.tar"))
    })
    .ok()
    .flatten()
}

/// The files apt reads its sources from.
fn apt_source_files() -> Vec<PathBuf> {
    let mut files = vec![PathBuf::from("/etc/apt/sources.list")];
    if let Ok(d) = std::fs::read_dir("/etc/apt/sources.list.d") {
        let mut more: Vec<PathBuf> = d
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "list" || x == "sources"))
            .collect();
        more.sort();
        files.extend(more);
    }
    files
}

/// A deb-src entry for the archives the machine already installs from:
/// every enabled `deb` entry of `files` (one-line `.list` or deb822
/// `.sources`) with its type changed, so sources come from the same
/// place (mirror, proxy or snapshot) as the binary packages. Returns the
/// deb822 entries and the one-line ones (each goes in a file of its own
/// format); both empty when there is no `deb` entry at all.
fn deb_src_entries(files: &[PathBuf]) -> (String, String) {
    let (mut out, mut lines) = (String::new(), String::new());
    for f in files {
        let Ok(text) = std::fs::read_to_string(f) else {
            continue;
        };
        if f.extension().is_some_and(|x| x == "sources") {
            for stanza in text.split("\n\n") {
                let fields: Vec<&str> = stanza
                    .lines()
                    .map(str::trim_end)
                    .filter(|l| !l.trim_start().starts_with('#') && !l.is_empty())
                    .collect();
                let is_deb = fields.iter().any(|l| {
                    l.strip_prefix("Types:")
                        .is_some_and(|t| t.split_whitespace().any(|t| t == "deb"))
                });
                let disabled = fields.iter().any(|l| {
                    l.strip_prefix("Enabled:")
                        .is_some_and(|v| v.trim().eq_ignore_ascii_case("no"))
                });
                if !is_deb || disabled {
                    continue;
                }
                out.push_str("Types: deb-src\n");
                for l in fields.iter().filter(|l| !l.starts_with("Types:")) {
                    out.push_str(l);
                    out.push('\n');
                }
                out.push('\n');
            }
        } else {
            for l in text.lines() {
                if let Some(rest) = l.trim().strip_prefix("deb ") {
                    lines.push_str("deb-src ");
                    lines.push_str(rest);
                    lines.push('\n');
                }
            }
        }
    }
    (out, lines)
}

fn has_deb_src() -> bool {
    let files = apt_source_files();
    files.iter().any(|f| {
        std::fs::read_to_string(f).is_ok_and(|s| {
            s.lines().any(|l| {
                let l = l.trim();
                l.starts_with("deb-src") || (l.starts_with("Types:") && l.contains("deb-src"))
            })
        })
    })
}

/// Extract a fresh, configured source tree into `dir`; the tree's root.
fn fresh_tree(tarball: &Path, dir: &Path) -> Result<PathBuf, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    sh(&mut untar(tarball, dir))?;
    let root = find_in(dir, |p| p.join("hostapd").is_dir())
        .map_err(|e| e.to_string())?
        .ok_or("the tarball holds no hostapd/")?;
    for (prog, extra) in [
        ("hostapd", HOSTAPD_CONFIG),
        ("wpa_supplicant", WPA_SUPPLICANT_CONFIG),
    ] {
        let base = std::fs::read_to_string(root.join(prog).join("defconfig"))
            .map_err(|e| format!("{prog}/defconfig: {e}"))?;
        std::fs::write(root.join(prog).join(".config"), base + extra)
            .map_err(|e| format!("{prog}/.config: {e}"))?;
    }
    Ok(root)
}

/// Whatever runs a mount: killed and unmounted when dropped.
pub(crate) struct Mounted {
    mnt: PathBuf,
    /// Killed after the unmount (fields drop after `drop` runs).
    children: Vec<KillOnDrop>,
}

impl Drop for Mounted {
    fn drop(&mut self) {
        for _ in 0..50 {
            let ok = Command::new("umount")
                .arg(&self.mnt)
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if ok || !is_mounted(&self.mnt) {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// A private sshd on 127.0.0.1 with a key made for this run (sshfs's
/// peer); nothing of the machine's ssh configuration is touched.
pub(crate) struct Sshd {
    port: u16,
    key: PathBuf,
    _child: KillOnDrop,
    _dir: tempfile::TempDir,
}

pub(crate) fn start_sshd() -> Result<Sshd, String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let d = dir.path();
    for (f, t) in [("host", "ed25519"), ("user", "ed25519")] {
        sh(Command::new("ssh-keygen")
            .args(["-q", "-t", t, "-N", "", "-f"])
            .arg(d.join(f)))?;
    }
    std::fs::copy(d.join("user.pub"), d.join("authorized_keys")).map_err(|e| e.to_string())?;
    let port = free_port().map_err(|e| e.to_string())?;
    let cfg = format!(
        "Port {port}\nListenAddress 127.0.0.1\nHostKey {h}\nAuthorizedKeysFile {a}\n\
         PermitRootLogin prohibit-password\nStrictModes no\nUsePAM no\nPidFile none\n\
         Subsystem sftp internal-sftp\n",
        h = d.join("host").display(),
        a = d.join("authorized_keys").display()
    );
    std::fs::write(d.join("sshd_config"), cfg).map_err(|e| e.to_string())?;
    std::fs::create_dir_all("/run/sshd").map_err(|e| e.to_string())?;
    let child = spawn_ready(
        Command::new("/usr/sbin/sshd")
            .arg("-D")
            .arg("-f")
            .arg(d.join("sshd_config")),
        |e| format!("sshd: {e} (apt-get install openssh-server)"),
        "sshd",
        || listening(port),
    )?;
    Ok(Sshd {
        port,
        key: d.join("user"),
        _child: child,
        _dir: dir,
    })
}

/// Mount `src` on `mnt` as configuration `c`.
pub(crate) fn mount(
    c: &Config,
    opts: &BuildOpts,
    src: &Path,
    mnt: &Path,
    sshd: Option<&Sshd>,
) -> Result<Option<Mounted>, String> {
    std::fs::create_dir_all(mnt).map_err(|e| e.to_string())?;
    let mut m = Mounted {
        mnt: mnt.to_path_buf(),
        children: Vec::new(),
    };
    match &c.kind {
        Kind::Native => return Ok(None),
        Kind::Walkfs {
            opts: o,
            delay_us,
            baseline,
            as_kernel,
            ..
        } if *delay_us > 0 => {
            let exe = exe_of(opts, *baseline);
            let sock = mnt.with_extension("sock");
            let addr = format!("unix:{}", sock.display());
            let delay = delay_us.to_string();
            let server = crate::proc::walkfs_serve(exe, src, &sock, &["--reply-delay-us", &delay])?;
            m.children.push(server);
            sh(Command::new(exe)
                .envs(as_kernel.map(|k| ("WALKFS_FUSE_AS_KERNEL", k)))
                .args(["mount", &addr])
                .arg(mnt)
                .args(["-o", o]))?;
        }
        Kind::Walkfs {
            opts: o,
            baseline,
            via_9p,
            as_kernel,
            ..
        } => {
            let mut cmd = Command::new(exe_of(opts, *baseline));
            cmd.envs(as_kernel.map(|k| ("WALKFS_FUSE_AS_KERNEL", k)));
            cmd.arg("mount").arg(src).arg(mnt).args(["-o", o]);
            if *via_9p {
                cmd.arg("--via-9p");
            } else if *baseline {
                // A release from before the local mount was the vfs over
                // the directory by default.
                cmd.arg("--direct");
            }
            sh(&mut cmd)?;
        }
        Kind::Bindfs => sh(Command::new("bindfs").arg(src).arg(mnt))?,
        Kind::Sshfs => {
            let s = sshd.ok_or("sshfs needs the private sshd")?;
            sh(Command::new("sshfs")
                .arg(format!("root@127.0.0.1:{}", src.display()))
                .arg(mnt)
                .args(["-p", &s.port.to_string()])
                .arg("-o")
                .arg(format!(
                    "IdentityFile={},StrictHostKeyChecking=no,UserKnownHostsFile=/dev/null",
                    s.key.display()
                )))?
        }
    }
    wait_mounted(mnt, "mount", || None)?;
    Ok(Some(m))
}

/// The executable a walkfs row runs.
fn exe_of(opts: &BuildOpts, baseline: bool) -> &Path {
    match (&opts.baseline, baseline) {
        (Some(b), true) => b,
        _ => &opts.walkfs,
    }
}

/// The mount's RPCs (walkfs rows only).
pub(crate) fn rpcs(opts: &BuildOpts, mnt: &Path) -> Option<(u64, BTreeMap<String, u64>)> {
    counts(opts, mnt).map(|c| (c.rpcs, c.rpcs_by_type))
}

/// What a walkfs mount has cost so far, from `walkfs stats`: its 9P RPCs
/// (by type) and its calls into the backend (by operation, and how many
/// a caller waited for).
#[derive(Clone, Debug, Default)]
pub(crate) struct Counts {
    pub rpcs: u64,
    pub rpcs_by_type: BTreeMap<String, u64>,
    pub backend: u64,
    pub backend_waited: u64,
    pub backend_by_op: BTreeMap<String, u64>,
    /// FUSE requests from the kernel, by opcode, and the microseconds
    /// spent answering them.
    pub fuse: u64,
    pub fuse_by_op: BTreeMap<String, u64>,
    pub fuse_us: u64,
}

impl Counts {
    /// What happened between `before` and `self`.
    pub fn since(self, before: &Counts) -> Counts {
        let delta = |now: BTreeMap<String, u64>, was: &BTreeMap<String, u64>| {
            now.into_iter()
                .map(|(k, v)| {
                    let d = v.saturating_sub(was.get(&k).copied().unwrap_or(0));
                    (k, d)
                })
                .filter(|(_, v)| *v > 0)
                .collect()
        };
        Counts {
            rpcs: self.rpcs.saturating_sub(before.rpcs),
            rpcs_by_type: delta(self.rpcs_by_type, &before.rpcs_by_type),
            backend: self.backend.saturating_sub(before.backend),
            backend_waited: self.backend_waited.saturating_sub(before.backend_waited),
            backend_by_op: delta(self.backend_by_op, &before.backend_by_op),
            fuse: self.fuse.saturating_sub(before.fuse),
            fuse_by_op: delta(self.fuse_by_op, &before.fuse_by_op),
            fuse_us: self.fuse_us.saturating_sub(before.fuse_us),
        }
    }
}

pub(crate) fn counts(opts: &BuildOpts, mnt: &Path) -> Option<Counts> {
    let out = Command::new(&opts.walkfs)
        .arg("stats")
        .arg(mnt)
        .arg("--json")
        .output()
        .ok()?;
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
    let pairs = |key: &str| -> BTreeMap<String, u64> {
        v[key]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|p| Some((p[0].as_str()?.to_string(), p[1].as_u64()?)))
                    .collect()
            })
            .unwrap_or_default()
    };
    Some(Counts {
        rpcs: v["total_rpcs"].as_u64()?,
        rpcs_by_type: pairs("rpcs"),
        backend: v["backend_total"].as_u64().unwrap_or(0),
        backend_waited: v["backend_waited"].as_u64().unwrap_or(0),
        backend_by_op: pairs("backend_calls"),
        fuse: v["fuse_total"].as_u64().unwrap_or(0),
        fuse_by_op: pairs("fuse"),
        fuse_us: pairs("fuse_us").values().sum(),
    })
}

fn make(dir: &Path, jobs: usize) -> Result<(), String> {
    for prog in ["hostapd", "wpa_supplicant"] {
        sh(Command::new("make")
            .arg(format!("-j{jobs}"))
            .arg("-s")
            .arg("-C")
            .arg(dir.join(prog))
            .stdout(Stdio::null()))?;
    }
    if !dir.join("hostapd/hostapd").is_file()
        || !dir.join("wpa_supplicant/wpa_supplicant").is_file()
    {
        return Err("the build made no hostapd/wpa_supplicant".into());
    }
    Ok(())
}

struct Sample {
    seconds: f64,
    cpu: f64,
    rpcs: Option<(u64, BTreeMap<String, u64>)>,
}

/// One clean build on configuration `c`: fresh tree, fresh mount.
fn one_build(
    c: &Config,
    opts: &BuildOpts,
    tarball: &Path,
    sshd: Option<&Sshd>,
) -> Result<Sample, String> {
    let work = Path::new(CACHE).join("run");
    let _ = std::fs::remove_dir_all(&work);
    let src = work.join("src");
    let root = fresh_tree(tarball, &src)?;
    let rel = root
        .strip_prefix(&src)
        .map_err(|e| e.to_string())?
        .to_path_buf();
    // Start cold: the kernel's caches of the fresh copy are dropped.
    crate::proc::drop_caches()?;
    let mnt = work.join("mnt");
    let m = mount(c, opts, &src, &mnt, sshd)?;
    let dir = if m.is_some() { mnt.join(&rel) } else { root };
    let jobs = std::thread::available_parallelism().map_or(2, |n| n.get());
    let cpu0 = children_cpu();
    let t0 = Instant::now();
    make(&dir, jobs)?;
    let seconds = t0.elapsed().as_secs_f64();
    let cpu = children_cpu() - cpu0;
    let rpcs = if matches!(c.kind, Kind::Walkfs { .. }) {
        rpcs(opts, &mnt)
    } else {
        None
    };
    drop(m);
    Ok(Sample { seconds, cpu, rpcs })
}

/// User + system seconds of this process's waited-for children so far.
fn children_cpu() -> f64 {
    // SAFETY: getrusage fills the struct it is given.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru);
        ru
    };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

pub struct BuildResult {
    pub rows: Vec<Row>,
}

pub fn run(opts: &BuildOpts) -> Result<BuildResult, String> {
    progress("build: fetching wpa (apt-get source wpa)...");
    let tarball = fetch()?;
    let cfgs = configs(opts)?;
    let sshd = if cfgs.iter().any(|c| matches!(c.kind, Kind::Sshfs)) {
        Some(start_sshd()?)
    } else {
        None
    };
    let reps = opts.reps.unwrap_or(if opts.quick { 1 } else { 3 });
    let mut samples: Vec<Vec<Sample>> = cfgs.iter().map(|_| Vec::new()).collect();
    let total = reps * cfgs.len();
    let mut steps = Steps::new("build", total);
    for _ in 0..reps {
        for (i, c) in cfgs.iter().enumerate() {
            let n = steps.next(&format!("{} ...", c.name));
            tracing::info!("build {n}/{total}: {}", c.name);
            let s = one_build(c, opts, &tarball, sshd.as_ref())?;
            // Each sample also goes to the log as it is taken, so a run
            // cut short still leaves its figures behind.
            tracing::info!(
                fs = %c.name,
                seconds = s.seconds,
                cpu = s.cpu,
                rpcs = s.rpcs.as_ref().map(|r| r.0),
                "build sample"
            );
            samples[i].push(s);
        }
    }
    let mut rows = Vec::new();
    let native = median_of(&samples[0], |s| s.seconds);
    for (c, s) in cfgs.iter().zip(&samples).filter(|(_, s)| !s.is_empty()) {
        // The RPCs of the run whose time is nearest the median.
        let (seconds, mid) = median_sample(s, |x| x.seconds);
        let r = mid.and_then(|m| m.rpcs.clone());
        rows.push(Row {
            bench: "build-hostap".into(),
            fs: c.name.clone(),
            seconds,
            ratio_to_native: seconds / native,
            cpu_seconds: Some(median_of(s, |x| x.cpu)),
            rpcs: r.as_ref().map(|x| x.0),
            rpcs_by_type: r.map(|x| x.1).unwrap_or_default(),
        });
    }
    progress_done();
    let _ = std::fs::remove_dir_all(Path::new(CACHE).join("run"));
    Ok(BuildResult { rows })
}

pub fn render(res: &BuildResult) -> String {
    let t: Vec<Vec<String>> = res
        .rows
        .iter()
        .map(|r| {
            let walks = r.rpcs_by_type.get("Twalk").copied();
            vec![
                r.bench.clone(),
                r.fs.clone(),
                format!("{:.1}", r.seconds),
                format!("{:.2}x", r.ratio_to_native),
                r.cpu_seconds.map(|x| format!("{x:.0}")).unwrap_or_default(),
                r.rpcs.map(|x| x.to_string()).unwrap_or_default(),
                walks.map(|x| x.to_string()).unwrap_or_default(),
            ]
        })
        .collect();
    let mut out = table(
        &[
            "bench",
            "fs",
            "seconds",
            "vs native",
            "CPU s",
            "RPCs",
            "Twalk",
        ],
        &t,
    );
    for r in res.rows.iter().filter(|r| !r.rpcs_by_type.is_empty()) {
        let by: Vec<String> = r
            .rpcs_by_type
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        out.push_str(&format!("{}: {}\n", r.fs, by.join(", ")));
    }
    out
}

/// The build rows as a bar chart of seconds (native red, walkfs blue,
/// the peers grey).
pub fn plot(res: &BuildResult, path: &str) -> Result<(), String> {
    use crate::plot::{bar_chart, fs_color, Bar};
    let bars: Vec<Bar> = res
        .rows
        .iter()
        .map(|r| Bar {
            label: format!("{}  {}", r.bench, r.fs),
            value: r.seconds,
            color: fs_color(&r.fs),
        })
        .collect();
    bar_chart(
        path,
        "walkfs bench build: seconds (log scale; shorter is faster)",
        "seconds",
        &bars,
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn deb_src_entries_follow_the_configured_sources() {
        let t = tempfile::tempdir().expect("tempdir");
        let sources = t.path().join("a.sources");
        std::fs::write(
            &sources,
            "Types: deb\n# a comment\nURIs: http://archive.example/debian\nSuites: stable\n\
             Components: main\n\nTypes: deb\nURIs: http://off.example\nSuites: x\n\
             Components: main\nEnabled: no\n\nTypes: deb-src\nURIs: http://src.example\n\
             Suites: y\nComponents: main\n",
        )
        .expect("write");
        let list = t.path().join("b.list");
        std::fs::write(
            &list,
            "# deb http://commented.example x main\ndeb [arch=amd64] http://one.example stable main\n",
        )
        .expect("write");
        let (deb822, one_line) = super::deb_src_entries(&[sources, list]);
        assert_eq!(
            deb822,
            "Types: deb-src\nURIs: http://archive.example/debian\nSuites: stable\n\
             Components: main\n\n"
        );
        assert_eq!(
            one_line,
            "deb-src [arch=amd64] http://one.example stable main\n"
        );
        assert_eq!(super::deb_src_entries(&[]), (String::new(), String::new()));
    }

    use super::*;

    #[test]
    fn quick_runs_native_loose_coherent_and_bindfs() {
        let o = BuildOpts {
            quick: true,
            walkfs: PathBuf::from("walkfs"),
            only: vec![],
            reps: None,
            slow_us: 200,
            baseline: None,
        };
        let names: Vec<String> = configs(&o).unwrap().into_iter().map(|c| c.name).collect();
        // Issue 5's three, and issue 7's coherent row beside loose-neg.
        assert_eq!(
            names,
            ["native", "walkfs-loose-neg", "walkfs-coherent", "bindfs"]
        );
        let full = configs(&BuildOpts {
            quick: false,
            ..o.clone()
        })
        .unwrap();
        assert!(full.iter().any(|c| c.name == "sshfs"));
        assert!(full.iter().any(|c| c.name == "walkfs-loose-neg-slow200us"));
        assert!(full.iter().any(|c| c.name == "walkfs-none"));
        // --only keeps native (every ratio is to it) and refuses a typo.
        let only = |v: &[&str]| {
            configs(&BuildOpts {
                quick: false,
                only: v.iter().map(|s| s.to_string()).collect(),
                ..o.clone()
            })
            .map(|c| c.into_iter().map(|c| c.name).collect::<Vec<_>>())
        };
        assert_eq!(only(&["sshfs"]).unwrap(), ["native", "sshfs"]);
        assert!(only(&["walkfs-fast"]).unwrap_err().contains("walkfs-fast"));
        // A baseline executable doubles the walkfs rows, in the same run.
        let with_base: Vec<String> = configs(&BuildOpts {
            baseline: Some(PathBuf::from("/old/walkfs")),
            ..o.clone()
        })
        .unwrap()
        .into_iter()
        .map(|c| c.name)
        .collect();
        assert_eq!(
            with_base,
            [
                "native",
                "walkfs-loose-neg",
                "walkfs-coherent",
                "bindfs",
                "walkfs-loose-neg@baseline",
                "walkfs-coherent@baseline"
            ]
        );
    }

    #[test]
    fn the_configs_are_in_the_repo() {
        assert!(HOSTAPD_CONFIG.contains("CONFIG_"));
        assert!(WPA_SUPPLICANT_CONFIG.contains("CONFIG_"));
    }
}
