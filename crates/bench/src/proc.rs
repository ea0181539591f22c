//! Processes a benchmark starts: servers and mounts it waits for and
//! stops, the commands it runs to set up, and what /proc says of them.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::report::last_lines;

/// A child process killed and reaped when dropped.
pub struct KillOnDrop(pub Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl KillOnDrop {
    /// Why the child is gone, if it exited.
    pub fn exited(&mut self) -> Option<String> {
        match self.0.try_wait() {
            Ok(Some(st)) => Some(format!("exited: {st}")),
            _ => None,
        }
    }
}

/// Poll `ready` every 20 ms until it holds. An error naming `what` when
/// `gone` reports the process it waits on has died, or after `limit`.
pub fn wait_until(
    what: &str,
    limit: Duration,
    mut ready: impl FnMut() -> bool,
    mut gone: impl FnMut() -> Option<String>,
) -> Result<(), String> {
    let t0 = Instant::now();
    while !ready() {
        if let Some(why) = gone() {
            return Err(format!("{what}: {why}"));
        }
        if t0.elapsed() > limit {
            return Err(format!("{what}: not ready after {limit:?}"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// Start `cmd` (its output discarded) and wait up to 10 s for `ready`: a
/// server up and listening, killed when dropped. `spawn_err` says why it
/// could not start; `what` names it while waiting.
pub fn spawn_ready(
    cmd: &mut Command,
    spawn_err: impl FnOnce(std::io::Error) -> String,
    what: &str,
    ready: impl FnMut() -> bool,
) -> Result<KillOnDrop, String> {
    let child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(spawn_err)?;
    let mut k = KillOnDrop(child);
    wait_until(what, Duration::from_secs(10), ready, || k.exited())?;
    Ok(k)
}

/// A `walkfs serve` of `dir` (the executable `walkfs`) on unix socket
/// `sock`, with `extra` arguments, up and listening.
pub fn walkfs_serve(
    walkfs: &Path,
    dir: &Path,
    sock: &Path,
    extra: &[&str],
) -> Result<KillOnDrop, String> {
    let _ = std::fs::remove_file(sock);
    spawn_ready(
        Command::new(walkfs)
            .arg("serve")
            .arg(dir)
            .arg("--listen")
            .arg(format!("unix:{}", sock.display()))
            .args(extra),
        |e| format!("start walkfs serve: {e}"),
        "walkfs serve",
        || std::os::unix::net::UnixStream::connect(sock).is_ok(),
    )
}

/// A TCP port of 127.0.0.1 free a moment ago.
pub fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// Whether something accepts connections on 127.0.0.1:`port`.
pub fn listening(port: u16) -> bool {
    std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
}

/// Run `cmd` to its end; its failure with the last lines of its stderr.
pub fn sh(cmd: &mut Command) -> Result<(), String> {
    let out = cmd
        .output()
        .map_err(|e| format!("{cmd:?}: cannot run: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        let err = String::from_utf8_lossy(&out.stderr);
        Err(format!(
            "{cmd:?} failed ({}):\n{}",
            out.status,
            last_lines(&err, 8).join("\n")
        ))
    }
}

/// Start cold: dirty data written out, the kernel's caches dropped (the
/// drop is best effort: it needs root).
pub fn drop_caches() -> Result<(), String> {
    sh(&mut Command::new("sync"))?;
    let _ = std::fs::write("/proc/sys/vm/drop_caches", "3");
    Ok(())
}

/// Whether a file system is mounted on `p` (as /proc/self/mounts names it).
pub fn is_mounted(p: &Path) -> bool {
    let m = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    let p = p.to_string_lossy();
    m.lines().any(|l| l.split(' ').nth(1) == Some(&*p))
}

/// Wait up to 20 s for a mount on `mnt` (`by` names what mounts it); an
/// error as soon as `gone` says what was to mount it has died.
pub fn wait_mounted(
    mnt: &Path,
    by: &str,
    gone: impl FnMut() -> Option<String>,
) -> Result<(), String> {
    wait_until(
        &format!("{by} on {}", mnt.display()),
        Duration::from_secs(20),
        || is_mounted(mnt),
        gone,
    )
}

/// `umount PATH` when dropped, its failure ignored (a mount a benchmark
/// made and must not leave behind).
pub struct Unmount(pub PathBuf);

impl Drop for Unmount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// A `Field:   1234 kB` line of /proc/PID/status, in KiB.
pub fn parse_status_kib(status: &str, field: &str) -> Option<u64> {
    status.lines().find_map(|l| {
        let rest = l.strip_prefix(field)?.strip_prefix(':')?;
        rest.split_whitespace().next()?.parse().ok()
    })
}

/// `field` of /proc/`pid`/status in KiB; 0 if the process is gone.
pub fn status_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| parse_status_kib(&s, field))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn setup_commands_say_why_they_failed() {
        assert!(sh(&mut Command::new("true")).is_ok());
        let e =
            sh(Command::new("sh").args(["-c", "echo one >&2; echo two >&2; exit 3"])).unwrap_err();
        assert!(e.ends_with("one\ntwo"), "{e}");
        assert!(!is_mounted(Path::new("/no/such/mount")));
        assert!(status_kib(std::process::id(), "VmRSS") > 0);
        assert_eq!(status_kib(std::process::id(), "NoSuchField"), 0);
    }
}
