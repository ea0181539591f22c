//! Processes a benchmark starts: servers and mounts it waits for and
//! stops.

use std::process::Child;
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
