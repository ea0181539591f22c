//! Commands a step runs: timed to the moment they exit, their output
//! counted and kept in part, killed at their time limit.

use std::io::Read;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use super::TIMED_OUT;
use crate::report::{last_lines, progress};

/// What a command printed and how long it took.
pub(super) struct Ran {
    pub(super) seconds: f64,
    /// Lines of stdout (as `wc -l` counts them).
    pub(super) lines: u64,
    /// The first 64 KiB of stdout.
    pub(super) head: Vec<u8>,
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
        let last = last_lines(&tail, 3);
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
pub(super) fn run_cmd(
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
pub(super) fn sh(label: &str, cmd: &mut Command) -> Result<Ran, String> {
    run_cmd(label, cmd, Duration::from_secs(3600), &|| {})
}

#[cfg(test)]
mod tests {
    use super::*;

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
