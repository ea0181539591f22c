//! Processes a benchmark starts: servers and mounts it waits for and
//! stops.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

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

/// A `walkfs serve` of `dir` (the executable `walkfs`) on unix socket
/// `sock`, with `extra` arguments, up and listening.
pub fn walkfs_serve(
    walkfs: &Path,
    dir: &Path,
    sock: &Path,
    extra: &[&str],
) -> Result<KillOnDrop, String> {
    let _ = std::fs::remove_file(sock);
    let child = Command::new(walkfs)
        .arg("serve")
        .arg(dir)
        .arg("--listen")
        .arg(format!("unix:{}", sock.display()))
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("start walkfs serve: {e}"))?;
    let mut server = KillOnDrop(child);
    wait_until(
        "walkfs serve",
        Duration::from_secs(10),
        || std::os::unix::net::UnixStream::connect(sock).is_ok(),
        || server.exited(),
    )?;
    Ok(server)
}
