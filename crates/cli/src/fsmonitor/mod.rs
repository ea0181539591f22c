//! `walkfs fsmonitor`: git's `core.fsmonitor` hook (protocol version 2),
//! answered from walkfs's change stream.
//!
//! git runs the hook in the work tree's root as `HOOK 2 TOKEN` and reads
//! `NEW_TOKEN NUL PATH NUL PATH NUL ...`: the paths changed since TOKEN
//! (a trailing `/` means a directory and all below it), or the single
//! path `/`, "everything may have changed, look at all of it". git trusts
//! the list: an entry not listed is not even stat'ed. So a wrong answer
//! is a stale `git status` until that file changes again; when in doubt
//! this answers `/`.
//!
//! A hook lives for one call, but the changes must be gathered between
//! calls, so the hook asks a daemon, one per work tree, over a Unix
//! socket, and starts it when none answers (its first answer is then `/`).
//! The daemon follows the tree with [`watch::follow`](crate::watch::follow) (on a walkfs mount,
//! the mount's own inotify events, which include other writers' changes
//! replayed: see fuse/src/replay.rs) and numbers each change.
//!
//! Invariants:
//! - a token is `walkfs:<daemon id>:<sequence number>`: a token of
//!   another daemon (restarted, or never seen) answers `/`;
//! - a change numbered `n` is listed by every query whose token is below
//!   `n`; the log keeps at most [`MAX_PATHS`] names, and when it drops
//!   them (or the stream lost changes) every token from before answers `/`;
//! - before answering, the daemon asks the mount to settle (SETTLE_IOCTL:
//!   every change made elsewhere before it applied and replayed; over 9P
//!   a poll of the server's notifications), then makes a cookie file and
//!   waits until the stream reports it: changes are reported in order, so
//!   every change made before the query is then in the log. On a mount of a local
//!   directory the cookie is made beside the host's copy, so it queues
//!   behind the host's own changes still being replayed, and the kernel's
//!   caches of the mount have been invalidated for all of them (the
//!   replay runs after the invalidation). A cookie not seen within
//!   [`COOKIE_WAIT`] answers `/`.

use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::DirBuilderExt;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub mod daemon;

/// Names the log keeps at most (a burst past it answers `/` once).
const MAX_PATHS: usize = 100_000;
/// How long a query waits for its cookie to come through the stream.
const COOKIE_WAIT: Duration = Duration::from_secs(5);
/// How long the hook waits for a daemon it started to watch the tree.
const START_WAIT: Duration = Duration::from_secs(120);
/// A daemon nobody asked for this long goes away.
const IDLE: Duration = Duration::from_secs(3600);
/// How often the daemon looks whether its tree is still there.
const WATCHDOG: Duration = Duration::from_secs(1);

/// The cookies' names start so (in the git directory, which is listed
/// to nobody: git ignores what changes in it).
const COOKIE: &str = "walkfs-fsmonitor-cookie-";

/// The hook: answer git's query for the work tree that is the current
/// directory.
pub fn hook(version: &str, token: &str) -> Result<(), String> {
    if version != "2" {
        return Err(format!(
            "fsmonitor protocol version {version} is not spoken here (only 2)"
        ));
    }
    let tree = std::env::current_dir().map_err(|e| format!("current directory: {e}"))?;
    let sock = socket_path(&tree)?;
    let answer = match ask(&sock, token) {
        Ok(a) => a,
        Err(_) => {
            start_daemon(&tree)?;
            let deadline = Instant::now() + START_WAIT;
            loop {
                match ask(&sock, token) {
                    Ok(a) => break a,
                    Err(e) if Instant::now() > deadline => {
                        tracing::warn!("fsmonitor daemon for {}: {e}", tree.display());
                        // A token no daemon gives: the next query is a
                        // full one too.
                        break b"walkfs:none:0\0/\0".to_vec();
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(20)),
                }
            }
        }
    };
    let mut out = std::io::stdout().lock();
    out.write_all(&answer)
        .and_then(|()| out.flush())
        .map_err(|e| format!("stdout: {e}"))
}

/// Stop the daemons of the work trees at or below the current directory
/// (git starts one in each work tree's root: `--stop` at a mount's root
/// stops those of every repository in it, so the mount can go).
pub fn stop() -> Result<(), String> {
    let here = std::env::current_dir()
        .and_then(|d| d.canonicalize())
        .map_err(|e| format!("current directory: {e}"))?;
    let mut socks = vec![socket_path(&here)?];
    let dir = runtime_dir()?;
    for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.extension().is_some_and(|x| x == "tree") {
            let Ok(tree) = std::fs::read_to_string(&p) else {
                continue;
            };
            let sock = p.with_extension("sock");
            if Path::new(&tree).starts_with(&here) && !socks.contains(&sock) {
                socks.push(sock);
            }
        }
    }
    for sock in socks {
        stop_one(&sock, &here)?;
    }
    Ok(())
}

/// Stop the daemon listening on `sock`, and wait until it has let go.
fn stop_one(sock: &Path, tree: &Path) -> Result<(), String> {
    match ask(sock, "\u{1}quit") {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
            // A daemon that died: its files stay behind.
            let _ = std::fs::remove_file(sock.with_extension("tree"));
            return Ok(());
        }
        Err(e) => return Err(format!("fsmonitor daemon of {}: {e}", tree.display())),
    }
    // Gone when its lock is free: it no longer holds the tree (an
    // unmount right after must not find it busy).
    let lock = std::fs::File::open(sock.with_extension("lock"))
        .map_err(|e| format!("{}: {e}", sock.display()))?;
    let deadline = Instant::now() + Duration::from_secs(10);
    // SAFETY: flock on a file we opened, with no pointers.
    while unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_SH | libc::LOCK_NB) } != 0 {
        if Instant::now() > deadline {
            return Err(format!(
                "the fsmonitor daemon of {} did not stop",
                tree.display()
            ));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(())
}

fn ask(sock: &Path, token: &str) -> std::io::Result<Vec<u8>> {
    let mut s = UnixStream::connect(sock)?;
    s.write_all(token.as_bytes())?;
    s.write_all(b"\n")?;
    let mut answer = Vec::new();
    s.read_to_end(&mut answer)?;
    if answer.is_empty() {
        return Err(std::io::Error::other("the daemon closed without answering"));
    }
    Ok(answer)
}

/// Where the daemon of `tree` listens: a private directory of the
/// user's (a socket on the tree itself could be on a file system that
/// has none), named by a hash of the tree's path.
fn socket_path(tree: &Path) -> Result<PathBuf, String> {
    let tree = tree
        .canonicalize()
        .map_err(|e| format!("{}: {e}", tree.display()))?;
    let dir = runtime_dir()?;
    // FNV-1a: stable across builds, unlike the std hasher.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in tree.as_os_str().as_encoded_bytes() {
        h = (h ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3);
    }
    Ok(dir.join(format!("fsmonitor-{h:016x}.sock")))
}

/// The user's private directory for the daemons' sockets.
fn runtime_dir() -> Result<PathBuf, String> {
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    let dir = match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(d) if !d.is_empty() => PathBuf::from(d).join("walkfs"),
        _ => PathBuf::from(format!("/tmp/walkfs-{uid}")),
    };
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?;
    Ok(dir)
}

fn start_daemon(tree: &Path) -> Result<(), String> {
    let exe = std::env::current_exe().map_err(|e| format!("own executable: {e}"))?;
    let mut cmd = std::process::Command::new(exe);
    cmd.args(["fsmonitor", "--daemon"])
        .current_dir(tree)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    // SAFETY: setsid is async-signal-safe; the child leaves git's session
    // so that it outlives the hook and takes none of its signals.
    unsafe {
        cmd.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    cmd.spawn()
        .map(drop)
        .map_err(|e| format!("starting the fsmonitor daemon: {e}"))
}
