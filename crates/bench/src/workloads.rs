//! `walkfs bench workloads`: the metadata-heavy jobs users of shares
//! complain about, timed natively and through each mount a user might
//! pick, side by side in one run.
//!
//! Workloads (each on a fresh copy and, where it says cold, a fresh mount
//! after the kernel's caches were dropped):
//! - `untar-hostap`: Debian's wpa (hostap 2.10) source tarball extracted
//!   onto an empty share;
//! - `git-commit`: `git init` + `git add .` + `git commit` of that tree;
//! - `git-status-cold` / `git-status-warm`: `git status` of the committed
//!   tree on a fresh mount, then again;
//! - `find` and `du-s`: one run each, cold;
//! - `rm-rf`: the tree removed;
//! - `untar-npm`: a project with its `node_modules` (crates/bench/npm,
//!   installed once natively with `npm ci`, kept as a tar outside the
//!   tree) extracted onto an empty share;
//! - `node-require`: node requiring the project's large packages, cold
//!   (module resolution: mostly lookups of names that do not exist).
//!
//! Configurations: native ext4, `walkfs mount` (the vfs over the
//! directory) with `cache=loose,negtimeout=-1`, the same with every change
//! waited for (`sync_metadata=1`: what `--direct` was), with `cache=coherent`,
//! the same loose mount through the whole 9P stack (`--via-9p`), bindfs,
//! sshfs over 127.0.0.1; with `--reply-delay-us N` the walkfs rows again
//! behind `walkfs serve --reply-delay-us N`. Repetitions are interleaved
//! across configurations; medians are reported, with the RPCs (by type)
//! each workload cost a walkfs mount.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use serde::Serialize;

use crate::build::{self, BuildOpts, Config, Kind, Sshd};
use crate::files::{find_in, untar};
use crate::proc::{drop_caches, is_mounted, sh};
use crate::report::{median_of, median_sample, progress, progress_done, table, Steps};

/// The npm project (package.json + package-lock.json) and the script
/// that requires its packages.
const NPM_PACKAGE: &str = include_str!("../npm/package.json");
const NPM_LOCK: &str = include_str!("../npm/package-lock.json");
const NPM_REQUIRE: &str = include_str!("../npm/require.js");

const CACHE: &str = "/var/tmp/walkfs-bench-workloads";

/// The workloads, in the order they run and are reported.
pub const WORKLOADS: &[&str] = &[
    "untar-hostap",
    "git-commit",
    "git-status-cold",
    "git-status-warm",
    "find",
    "du-s",
    "rm-rf",
    "untar-npm",
    "node-require",
];

#[derive(Clone, Debug)]
pub struct WorkloadOpts {
    /// One repetition, no sshfs.
    pub quick: bool,
    /// The `walkfs` executable.
    pub walkfs: PathBuf,
    /// Repetitions (median reported); default 3, 1 with --quick.
    pub reps: Option<usize>,
    /// Delay per reply of the slow-link rows, µs (0: none).
    pub reply_delay_us: u64,
    /// Only these workloads (default all).
    pub only: Vec<String>,
    /// Only these configurations, native always (default all).
    pub fs: Vec<String>,
}

/// One measured row.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    pub bench: &'static str,
    pub workload: String,
    pub fs: String,
    /// Median seconds.
    pub seconds: f64,
    pub ratio_to_native: f64,
    pub reps: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rpcs: Option<u64>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub rpcs_by_type: BTreeMap<String, u64>,
    /// Calls into the backend below the vfs, and how many of them a
    /// caller waited for (walkfs rows).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backend_calls: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backend_waited: Option<u64>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub backend_by_op: BTreeMap<String, u64>,
    /// FUSE requests the kernel sent (walkfs rows), by opcode, and the
    /// milliseconds spent answering them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fuse_requests: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fuse_ms: Option<f64>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub fuse_by_op: BTreeMap<String, u64>,
}

pub struct WorkloadResult {
    pub rows: Vec<Row>,
    /// Reply delay of the slow rows (0: none).
    pub delay_us: u64,
}

fn configs(opts: &WorkloadOpts) -> Vec<Config> {
    let walkfs = |name: &str, o: &'static str, delay_us: u64| {
        Config::walkfs(name, o, delay_us, name.contains("-9p"))
    };
    let mut v = vec![
        Config::new("native", Kind::Native),
        walkfs("walkfs-loose", "cache=loose,negtimeout=-1", 0),
        // The kernel's write-back cache instead of passthrough (the
        // fuse crate's passthrough.rs), where the default would use it.
        walkfs(
            "walkfs-loose-writeback",
            "cache=loose,negtimeout=-1,passthrough=0",
            0,
        ),
        // What `--direct` was before the write-back moved into the vfs:
        // the vfs over the directory, every change waited for.
        walkfs(
            "walkfs-loose-sync",
            "cache=loose,negtimeout=-1,sync_metadata=1",
            0,
        ),
        walkfs("walkfs-coherent", "cache=coherent,negtimeout=-1", 0),
        walkfs("walkfs-9p-loose", "cache=loose,negtimeout=-1", 0),
        Config::new("bindfs", Kind::Bindfs),
    ];
    if !opts.quick {
        v.push(Config::new("sshfs", Kind::Sshfs));
    }
    if opts.reply_delay_us > 0 {
        let d = opts.reply_delay_us;
        v.push(walkfs(
            &format!("walkfs-loose-{d}us"),
            "cache=loose,negtimeout=-1",
            d,
        ));
        v.push(walkfs(
            &format!("walkfs-coherent-{d}us"),
            "cache=coherent,negtimeout=-1",
            d,
        ));
        // Writes go to the daemon as they come (the vfs gathers them)
        // rather than through the kernel's write-back cache.
        v.push(walkfs(
            &format!("walkfs-loose-wt-{d}us"),
            "cache=loose,negtimeout=-1,writeback_cache=0",
            d,
        ));
        // Attributes left as the cache worked them out (no settling
        // request per file changed): its cost, when asked for by name.
        let nosettle = format!("walkfs-loose-nosettle-{d}us");
        if opts.fs.contains(&nosettle) {
            v.push(walkfs(&nosettle, "cache=loose,negtimeout=-1,settle=0", d));
        }
    }
    // CONFIG-as-K, when named: CONFIG mounted as a guest running Linux
    // K would mount it (FUSE's INIT answered as K asked, K one of
    // walkfs_fusewire's KERNELS).
    for name in &opts.fs {
        let Some((base, k)) = name.rsplit_once("-as-") else {
            continue;
        };
        let Some(k) = walkfs_fusewire::abi::KernelAbi::named(k) else {
            continue;
        };
        let Some(c) = v.iter().find(|c| c.name == base) else {
            continue;
        };
        let mut c = Config::new(name, c.kind.clone());
        if let Kind::Walkfs { as_kernel, .. } = &mut c.kind {
            *as_kernel = Some(k.name);
            v.push(c);
        }
    }
    if !opts.fs.is_empty() {
        v.retain(|c| c.name == "native" || opts.fs.contains(&c.name));
    }
    v
}

/// The npm project, installed once natively (`npm ci`) and kept as a tar
/// outside the tree: the tar's path.
pub fn npm_project() -> Result<PathBuf, String> {
    let dir = Path::new(CACHE).join("npm");
    let tar = Path::new(CACHE).join("npm-project.tar");
    let stamp = dir.join(".lock-installed");
    let installed = std::fs::read_to_string(&stamp).is_ok_and(|s| s == NPM_LOCK);
    if installed && tar.is_file() {
        return Ok(tar);
    }
    if Command::new("npm").arg("--version").output().is_err() {
        sh(Command::new("apt-get")
            .args(["install", "-y", "-qq", "nodejs", "npm"])
            .env("DEBIAN_FRONTEND", "noninteractive"))?;
    }
    let _ = std::fs::remove_dir_all(&dir);
    let proj = dir.join("proj");
    std::fs::create_dir_all(&proj).map_err(|e| format!("{}: {e}", proj.display()))?;
    for (name, text) in [
        ("package.json", NPM_PACKAGE),
        ("package-lock.json", NPM_LOCK),
        ("require.js", NPM_REQUIRE),
    ] {
        std::fs::write(proj.join(name), text).map_err(|e| format!("{name}: {e}"))?;
    }
    progress("workloads: npm ci (once)...");
    sh(Command::new("npm")
        .args(["ci", "--ignore-scripts", "--no-audit", "--no-fund"])
        .current_dir(&proj)
        .stdout(Stdio::null()))?;
    sh(Command::new("tar")
        .arg("cf")
        .arg(&tar)
        .arg("-C")
        .arg(&dir)
        .arg("proj"))?;
    std::fs::write(&stamp, NPM_LOCK).map_err(|e| e.to_string())?;
    Ok(tar)
}

/// Run `cmd` in `dir` (output discarded), timed.
fn timed(cmd: &mut Command) -> Result<f64, String> {
    let t0 = Instant::now();
    sh(cmd.stdout(Stdio::null()))?;
    Ok(t0.elapsed().as_secs_f64())
}

fn git(dir: &Path, args: &[&str]) -> Command {
    let mut c = Command::new("git");
    c.arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_AUTHOR_NAME", "bench")
        .env("GIT_AUTHOR_EMAIL", "bench@walkfs")
        .env("GIT_COMMITTER_NAME", "bench")
        .env("GIT_COMMITTER_EMAIL", "bench@walkfs")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", CACHE);
    c
}

/// A measurement: seconds and, on a walkfs mount, the RPCs and backend
/// calls it cost.
struct Sample {
    seconds: f64,
    counts: Option<build::Counts>,
}

/// The state of one configuration's run of the workloads.
struct Run<'a> {
    c: &'a Config,
    bopts: &'a BuildOpts,
    sshd: Option<&'a Sshd>,
    src: PathBuf,
    mnt: PathBuf,
    want: &'a [String],
    out: Vec<(&'static str, Sample)>,
}

impl Run<'_> {
    fn wants(&self, w: &str) -> bool {
        self.want.is_empty() || self.want.iter().any(|x| x == w)
    }

    /// A fresh mount of the source directory (none natively).
    fn mount(&self) -> Result<Option<build::Mounted>, String> {
        build::mount(self.c, self.bopts, &self.src, &self.mnt, self.sshd)
    }

    fn root(&self, m: &Option<build::Mounted>) -> PathBuf {
        if m.is_some() {
            self.mnt.clone()
        } else {
            self.src.clone()
        }
    }

    /// Time `f` on the mount `m` (what it cost, from `walkfs stats`
    /// before and after, on a walkfs mount).
    fn measure(
        &mut self,
        w: &'static str,
        m: &Option<build::Mounted>,
        f: impl FnOnce(&Path) -> Result<f64, String>,
    ) -> Result<(), String> {
        let walkfs = m.is_some() && matches!(self.c.kind, Kind::Walkfs { .. });
        let before = walkfs
            .then(|| build::counts(self.bopts, &self.mnt))
            .flatten();
        let seconds = f(&self.root(m))?;
        if m.is_some() && !is_mounted(&self.mnt) {
            return Err(format!("{}: the mount vanished during {w}", self.c.name));
        }
        let counts = walkfs
            .then(|| build::counts(self.bopts, &self.mnt))
            .flatten()
            .map(|now| match &before {
                Some(b) => now.since(b),
                None => now,
            });
        self.out.push((w, Sample { seconds, counts }));
        Ok(())
    }
}

/// Every workload once on configuration `c`.
fn run_config(
    c: &Config,
    bopts: &BuildOpts,
    sshd: Option<&Sshd>,
    hostap: &Path,
    npm: &Path,
    want: &[String],
) -> Result<Vec<(&'static str, Sample)>, String> {
    let work = Path::new(CACHE).join("run");
    // A run cut short may have left its file system mounted.
    let _ = Command::new("umount").arg("-R").arg(&work).output();
    let _ = std::fs::remove_dir_all(&work);
    // Every configuration on a new ext4 (freshfs.rs: the disk's deletion
    // history must not be measured); the directory as it is where none
    // can be made.
    let _fresh = match crate::freshfs::FreshFs::new(&work, 4) {
        Ok(f) => Some(f),
        Err(e) => {
            tracing::warn!("workloads: no fresh ext4 for the run ({e}); using {CACHE}");
            None
        }
    };
    let src = work.join("src");
    std::fs::create_dir_all(&src).map_err(|e| e.to_string())?;
    let mut r = Run {
        c,
        bopts,
        sshd,
        src,
        mnt: work.join("mnt"),
        want,
        out: Vec::new(),
    };
    let tree = |dir: &Path| -> Result<PathBuf, String> {
        find_in(dir, Path::is_dir)
            .map_err(|e| e.to_string())?
            .ok_or_else(|| "the tarball made no tree".to_string())
    };
    // The hostap tree: extracted onto the share when that is measured,
    // natively otherwise.
    if r.wants("untar-hostap") {
        let m = r.mount()?;
        r.measure("untar-hostap", &m, |d| timed(&mut untar(hostap, d)))?;
    } else {
        sh(&mut untar(hostap, &r.src))?;
    }
    let rel = tree(&r.src)?
        .strip_prefix(&r.src)
        .map_err(|e| e.to_string())?
        .to_path_buf();
    if r.wants("git-commit") {
        drop_caches()?;
        let m = r.mount()?;
        r.measure("git-commit", &m, |d| {
            let d = d.join(&rel);
            let t0 = Instant::now();
            sh(git(&d, &["init", "-q"]).stdout(Stdio::null()))?;
            sh(git(&d, &["add", "."]).stdout(Stdio::null()))?;
            sh(git(&d, &["commit", "-q", "-m", "tree"]).stdout(Stdio::null()))?;
            Ok(t0.elapsed().as_secs_f64())
        })?;
    } else {
        let d = r.src.join(&rel);
        for a in [
            &["init", "-q"][..],
            &["add", "."],
            &["commit", "-q", "-m", "tree"],
        ] {
            sh(git(&d, a).stdout(Stdio::null()))?;
        }
    }
    if r.wants("git-status-cold") || r.wants("git-status-warm") {
        drop_caches()?;
        let m = r.mount()?;
        for w in ["git-status-cold", "git-status-warm"] {
            r.measure(w, &m, |d| {
                timed(&mut git(&d.join(&rel), &["status", "--porcelain"]))
            })?;
        }
    }
    for (w, args) in [("find", &["."][..]), ("du-s", &["-s", "."])] {
        if !r.wants(w) {
            continue;
        }
        drop_caches()?;
        let m = r.mount()?;
        let prog = if w == "find" { "find" } else { "du" };
        r.measure(w, &m, |d| {
            timed(Command::new(prog).args(args).current_dir(d.join(&rel)))
        })?;
    }
    if r.wants("rm-rf") {
        let m = r.mount()?;
        r.measure("rm-rf", &m, |d| {
            timed(Command::new("rm").arg("-rf").arg(d.join(&rel)))
        })?;
    }
    if r.wants("untar-npm") || r.wants("node-require") {
        if r.wants("untar-npm") {
            let m = r.mount()?;
            r.measure("untar-npm", &m, |d| timed(&mut untar(npm, d)))?;
        } else {
            sh(&mut untar(npm, &r.src))?;
        }
        if r.wants("node-require") {
            drop_caches()?;
            let m = r.mount()?;
            r.measure("node-require", &m, |d| {
                timed(
                    Command::new("node")
                        .arg("require.js")
                        .current_dir(d.join("proj")),
                )
            })?;
        }
    }
    let out = std::mem::take(&mut r.out);
    drop(r);
    let _ = std::fs::remove_dir_all(&work);
    Ok(out)
}

pub fn run(opts: &WorkloadOpts) -> Result<WorkloadResult, String> {
    if let Some(bad) = opts.only.iter().find(|w| !WORKLOADS.contains(&w.as_str())) {
        return Err(format!(
            "--only {bad}: no such workload (known: {})",
            WORKLOADS.join(", ")
        ));
    }
    std::fs::create_dir_all(CACHE).map_err(|e| format!("{CACHE}: {e}"))?;
    progress("workloads: fetching wpa (apt-get source wpa)...");
    let hostap = build::fetch()?;
    let needs_npm = opts.only.is_empty()
        || opts
            .only
            .iter()
            .any(|w| w == "untar-npm" || w == "node-require");
    let npm = if needs_npm {
        npm_project()?
    } else {
        PathBuf::new()
    };
    let cfgs = configs(opts);
    let sshd = if cfgs.iter().any(|c| matches!(c.kind, Kind::Sshfs)) {
        Some(build::start_sshd()?)
    } else {
        None
    };
    let bopts = BuildOpts {
        quick: opts.quick,
        walkfs: opts.walkfs.clone(),
        only: Vec::new(),
        reps: None,
        slow_us: 0,
        baseline: None,
    };
    let reps = opts.reps.unwrap_or(if opts.quick { 1 } else { 3 }).max(1);
    let mut samples: BTreeMap<(&'static str, String), Vec<Sample>> = BTreeMap::new();
    let mut steps = Steps::new("workloads", reps * cfgs.len());
    for _ in 0..reps {
        for c in &cfgs {
            steps.next(&format!("{} ...", c.name));
            match run_config(c, &bopts, sshd.as_ref(), &hostap, &npm, &opts.only) {
                Ok(v) => {
                    for (w, s) in v {
                        tracing::info!(fs = %c.name, workload = w, seconds = s.seconds, "sample");
                        samples.entry((w, c.name.clone())).or_default().push(s);
                    }
                }
                // A configuration that fails loses its rows, not the run.
                Err(e) => {
                    tracing::error!("workloads on {}: {e}", c.name);
                    eprintln!("walkfs: workloads on {}: {e}", c.name);
                }
            }
        }
    }
    progress_done();
    let mut natives = BTreeMap::new();
    for ((w, f), v) in &samples {
        if f == "native" {
            natives.insert(*w, median_of(v, |x| x.seconds));
        }
    }
    let mut rows = Vec::new();
    for w in WORKLOADS {
        for c in &cfgs {
            let Some(v) = samples.get(&(*w, c.name.clone())) else {
                continue;
            };
            // The counts of the sample nearest the median.
            let (seconds, mid) = median_sample(v, |x| x.seconds);
            let k = mid.and_then(|m| m.counts.clone());
            rows.push(Row {
                bench: "workloads",
                workload: (*w).into(),
                fs: c.name.clone(),
                seconds,
                ratio_to_native: seconds / natives.get(w).copied().unwrap_or(f64::NAN),
                reps: v.len(),
                rpcs: k.as_ref().map(|x| x.rpcs).filter(|n| *n > 0),
                backend_calls: k.as_ref().map(|x| x.backend),
                backend_waited: k.as_ref().map(|x| x.backend_waited),
                rpcs_by_type: k
                    .as_ref()
                    .map(|x| x.rpcs_by_type.clone())
                    .unwrap_or_default(),
                fuse_requests: k.as_ref().map(|x| x.fuse).filter(|n| *n > 0),
                fuse_ms: k
                    .as_ref()
                    .filter(|x| x.fuse > 0)
                    .map(|x| x.fuse_us as f64 / 1000.0),
                fuse_by_op: k.as_ref().map(|x| x.fuse_by_op.clone()).unwrap_or_default(),
                backend_by_op: k.map(|x| x.backend_by_op).unwrap_or_default(),
            });
        }
    }
    Ok(WorkloadResult {
        rows,
        delay_us: opts.reply_delay_us,
    })
}

/// The table: a row per workload, native seconds, then each
/// configuration's ratio to native; then the RPCs of the walkfs rows.
pub fn render(res: &WorkloadResult) -> String {
    let mut fss: Vec<String> = Vec::new();
    for r in &res.rows {
        if !fss.contains(&r.fs) {
            fss.push(r.fs.clone());
        }
    }
    let mut t = Vec::new();
    for w in WORKLOADS {
        let of = |f: &str| res.rows.iter().find(|r| r.workload == *w && r.fs == f);
        let Some(native) = of("native") else { continue };
        let mut line = vec![(*w).to_string(), format!("{:.3}", native.seconds)];
        for f in fss.iter().filter(|f| *f != "native") {
            line.push(of(f).map_or("-".into(), |r| format!("{:.2}x", r.ratio_to_native)));
        }
        t.push(line);
    }
    let mut header = vec!["workload", "native s"];
    header.extend(fss.iter().filter(|f| *f != "native").map(String::as_str));
    let mut out = table(&header, &t);
    out.push_str("\nRPCs (walkfs rows):\n");
    let mut rt = Vec::new();
    for r in res.rows.iter().filter(|r| r.rpcs.is_some()) {
        let by: Vec<String> = r
            .rpcs_by_type
            .iter()
            .map(|(k, v)| format!("{} {v}", k.trim_start_matches('T')))
            .collect();
        rt.push(vec![
            r.workload.clone(),
            r.fs.clone(),
            r.rpcs.unwrap_or(0).to_string(),
            by.join(", "),
        ]);
    }
    out.push_str(&table(&["workload", "fs", "RPCs", "by type"], &rt));
    out.push_str(
        "\nBackend calls below the vfs (walkfs rows; waited: the caller waited for the answer):\n",
    );
    let mut bt = Vec::new();
    for r in res.rows.iter().filter(|r| r.backend_calls.is_some()) {
        let by: Vec<String> = r
            .backend_by_op
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        bt.push(vec![
            r.workload.clone(),
            r.fs.clone(),
            r.backend_calls.unwrap_or(0).to_string(),
            r.backend_waited.unwrap_or(0).to_string(),
            by.join(", "),
        ]);
    }
    out.push_str(&table(
        &["workload", "fs", "calls", "waited", "by operation"],
        &bt,
    ));
    out.push_str("\nFUSE requests from the kernel (walkfs rows; ms: time spent answering):\n");
    let mut ft = Vec::new();
    for r in res.rows.iter().filter(|r| r.fuse_requests.is_some()) {
        let by: Vec<String> = r
            .fuse_by_op
            .iter()
            .filter(|(k, _)| k.as_str() != "lookup_negative")
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        ft.push(vec![
            r.workload.clone(),
            r.fs.clone(),
            r.fuse_requests.unwrap_or(0).to_string(),
            format!("{:.0}", r.fuse_ms.unwrap_or(0.0)),
            by.join(", "),
        ]);
    }
    out.push_str(&table(
        &["workload", "fs", "requests", "ms", "by opcode"],
        &ft,
    ));
    out
}

/// Ratios to native as a bar chart (walkfs blue, the peers grey).
pub fn plot(res: &WorkloadResult, path: &str) -> Result<(), String> {
    use crate::plot::{bar_chart, fs_color, Bar};
    let bars: Vec<Bar> = res
        .rows
        .iter()
        .filter(|r| r.fs != "native")
        .map(|r| Bar {
            label: format!("{}  {}", r.workload, r.fs),
            value: r.ratio_to_native,
            color: fs_color(&r.fs),
        })
        .collect();
    bar_chart(
        path,
        "walkfs bench workloads: time / native (log scale; 1 = native)",
        "x native",
        &bars,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_npm_project_is_in_the_repo_and_pinned() {
        let p: serde_json::Value = serde_json::from_str(NPM_PACKAGE).expect("package.json");
        let deps = p["dependencies"].as_object().expect("dependencies");
        assert!(deps.len() >= 5);
        // Exact versions: the lock and the tree never drift.
        for (name, v) in deps {
            let v = v.as_str().expect("version");
            assert!(
                v.chars().all(|c| c.is_ascii_digit() || c == '.'),
                "{name}: {v}"
            );
        }
        let l: serde_json::Value = serde_json::from_str(NPM_LOCK).expect("package-lock.json");
        assert!(l["packages"].as_object().is_some_and(|m| m.len() > 100));
        // require.js requires each dependency.
        for name in deps.keys() {
            assert!(
                NPM_REQUIRE.contains(name.as_str()),
                "require.js misses {name}"
            );
        }
    }

    #[test]
    fn configurations_follow_the_options() {
        let mut o = WorkloadOpts {
            quick: false,
            walkfs: PathBuf::from("walkfs"),
            reps: None,
            reply_delay_us: 200,
            only: Vec::new(),
            fs: Vec::new(),
        };
        let names: Vec<String> = configs(&o).into_iter().map(|c| c.name).collect();
        assert_eq!(
            names,
            [
                "native",
                "walkfs-loose",
                "walkfs-loose-writeback",
                "walkfs-loose-sync",
                "walkfs-coherent",
                "walkfs-9p-loose",
                "bindfs",
                "sshfs",
                "walkfs-loose-200us",
                "walkfs-coherent-200us",
                "walkfs-loose-wt-200us"
            ]
        );
        // Only the -9p row goes through the 9P stack of a local mount.
        for c in configs(&o) {
            if let Kind::Walkfs { via_9p, .. } = c.kind {
                assert_eq!(via_9p, c.name == "walkfs-9p-loose", "{}", c.name);
            }
        }
        o.quick = true;
        o.reply_delay_us = 0;
        assert_eq!(configs(&o).len(), 7);
        o.fs = vec!["bindfs".into(), "walkfs-loose".into()];
        let names: Vec<String> = configs(&o).into_iter().map(|c| c.name).collect();
        assert_eq!(names, ["native", "walkfs-loose", "bindfs"]);
    }
}
