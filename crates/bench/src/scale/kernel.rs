//! Part 1: the kernel source, untarred, committed, `git status`ed,
//! counted, sized and removed, natively and on a walkfs stack, every
//! walkfs output checked against the native one.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use super::cmd::{run_cmd, sh, Ran};
use super::sample::Sampler;
use super::stack::{kill_pids, overall_row, target, Stack};
use super::{step_limit, Row, ScaleOpts, ScaleResult, CACHE};
use crate::files::{file_name, find_in, untar};
use crate::report::progress;

/// The Debian package holding the kernel tarball.
const KERNEL_PKG: &str = "linux-source-6.1";

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
            find_in(cache, |p| {
                file_name(p).is_some_and(|n| {
                    n.starts_with(&format!("{KERNEL_PKG}_")) && n.ends_with(".deb")
                })
            })
            .ok()
            .flatten()
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
        find_in(dir, Path::is_dir)
            .map_err(|e| format!("{}: {e}", dir.display()))?
            .ok_or_else(|| format!("{}: no tree (the untar failed)", dir.display()))
    };
    let plain = |r: Ran| StepOut {
        seconds: r.seconds,
        output: None,
    };
    match step {
        "untar" => run_cmd(step, &mut untar(tar, dir), limit, stuck).map(plain),
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

pub(super) fn kernel(opts: &ScaleOpts, res: &mut ScaleResult) -> Result<(), String> {
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
    // Best effort: a failed sync leaves the start warmer, not wrong.
    let _ = crate::proc::drop_caches();
    let mut stack = Stack::start_if(native.is_some(), &opts.walkfs, &work, "kernel", "kernel")?;
    let (dir, pids) = target(stack.as_ref(), &work);
    let sampler = Sampler::start(pids);
    let stuck = move || kill_pids(&pids);
    let mut out = NativeSteps::new();
    let mut dead: Option<String> = None;
    for &step in KERNEL_STEPS {
        let mut row = Row::new("kernel", step, fs);
        if let Some(why) = &dead {
            row.failed(format!("not run: {why}"));
            res.rows.push(row);
            continue;
        }
        progress(&format!("scale: kernel on {fs}: {step}"));
        let want = native.and_then(|n| n.get(step));
        let limit = step_limit(want.and_then(|w| w.0));
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
                        let msg = format!(
                            "kernel {step} on walkfs: output {} differs from native {}",
                            s.output.as_deref().unwrap_or("-"),
                            nout.as_deref().unwrap_or("-")
                        );
                        res.fail_row(&mut row, msg);
                    }
                }
                out.insert(step.into(), (Some(s.seconds), s.output));
            }
            Err(e) => {
                row.failed(e.clone());
                res.fail(format!("kernel {step} on {fs}: {e}"));
                out.insert(step.into(), (None, None));
            }
        }
        let timed_out = row.timed_out();
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
        let row = overall_row("kernel", &s, dead.clone(), &sampler, &opts.walkfs);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn du_output_parses() {
        assert_eq!(parse_du(b"123456\t.\n"), Some(123456));
        assert_eq!(parse_du(b""), None);
    }
}
