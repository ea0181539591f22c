//! The walkfs stack a part measures (`walkfs serve` of a directory and
//! `walkfs mount` of the server), the tools the parts need, and the
//! processes killed when a step is stuck.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use super::cmd::{run_cmd, sh};
use super::sample::{fd_limit, Sampler, DAEMON, SERVER};
use super::{Row, ScaleResult, CACHE};
use crate::proc::{is_mounted, wait_mounted, KillOnDrop};
use crate::report::{last_lines, progress};

/// SIGKILL the given processes.
pub(super) fn kill_pids(pids: &[Option<u32>]) {
    for pid in pids.iter().flatten() {
        // SAFETY: kill(2) has no memory effects. Each pid is a child of
        // this process that is only reaped when its KillOnDrop drops, so
        // it cannot have been reused by another process.
        unsafe {
            libc::kill(*pid as libc::pid_t, libc::SIGKILL);
        }
    }
}

pub(super) fn have(tool: &str) -> bool {
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
    last_lines(&s, 5).join(" | ")
}

/// `walkfs serve EXPORT --listen unix:SOCK` and `walkfs mount unix:SOCK
/// MNT` (default options): unmounted and killed when dropped.
pub(super) struct Stack {
    pub(super) mnt: PathBuf,
    sock: PathBuf,
    log: PathBuf,
    /// The mount runs in the foreground, as a child of this process: its
    /// pid is the daemon's (a background mount forks away from it).
    daemon: KillOnDrop,
    server: KillOnDrop,
}

impl Stack {
    /// On walkfs (`on_walkfs`), a fresh stack exporting `export`; natively
    /// none. `part` names it on the progress line.
    pub(super) fn start_if(
        on_walkfs: bool,
        walkfs: &Path,
        export: &Path,
        name: &str,
        part: &str,
    ) -> Result<Option<Stack>, String> {
        if !on_walkfs {
            return Ok(None);
        }
        progress(&format!(
            "scale: {part}: starting walkfs serve + walkfs mount"
        ));
        Stack::start(walkfs, export, name).map(Some)
    }

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
        wait_mounted(&mnt, "walkfs mount", || {
            daemon
                .exited()
                .map(|why| format!("{why}: {}", log_tail(&log)))
        })?;
        Ok(stack)
    }

    pub(super) fn pids(&self) -> [Option<u32>; 2] {
        [Some(self.daemon.0.id()), Some(self.server.0.id())]
    }

    /// Why the stack can no longer answer, if it cannot.
    pub(super) fn broken(&mut self) -> Option<String> {
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

/// Where a part's steps run and the processes its sampler watches: the
/// stack's mount and its daemon and server, or natively `native` and none.
pub(super) fn target(stack: Option<&Stack>, native: &Path) -> (PathBuf, [Option<u32>; 2]) {
    match stack {
        Some(s) => (s.mnt.clone(), s.pids()),
        None => (native.to_path_buf(), [None, None]),
    }
}

/// The "overall" row of a part on `stack`: whether it still stands
/// (`dead` says why not), its counters if it does, and its processes'
/// peaks over the whole part with the fd limits they are to be read
/// against.
pub(super) fn overall_row(
    part: &'static str,
    stack: &Stack,
    dead: Option<String>,
    sampler: &Sampler,
    walkfs: &Path,
) -> Row {
    let pids = stack.pids();
    let mut row = Row::new(part, "overall", "walkfs");
    row.ok = dead.is_none();
    if dead.is_none() {
        row.stats = stack.stats(walkfs);
    }
    row.error = dead;
    row.peaks(&sampler.overall());
    row.fd_limit_daemon = pids[DAEMON].and_then(fd_limit);
    row.fd_limit_server = pids[SERVER].and_then(fd_limit);
    row
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

/// Debian packages the parts use, installed if missing (fuse3 for
/// fusermount3; the mount works without it as root, so its absence is
/// not a failure).
pub(super) fn ensure_tools(res: &mut ScaleResult) {
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
