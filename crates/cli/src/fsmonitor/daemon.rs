//! The daemon of one work tree: it follows the tree's changes, numbers
//! them, and answers the hooks' queries (the invariants are in the
//! parent module's doc).

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use walkfs_vfs::What;

use super::{socket_path, COOKIE, COOKIE_WAIT, IDLE, MAX_PATHS, WATCHDOG};
use crate::control;
use crate::watch::{self, Event};

/// The device `tree` is on (`None`: it cannot be reached).
fn tree_dev(tree: &Path) -> Option<u64> {
    std::fs::metadata(tree).ok().map(|m| m.dev())
}
/// Do watchers of `tree` hear of every writer's changes? A local file
/// system's inotify does; so does a walkfs mount with `cache=coherent`,
/// which replays other writers' changes on the mount. A network file
/// system, or a FUSE one of another kind (virtiofs, sshfs), shows only
/// what this machine did: answering from its events would leave `git
/// status` stale after an edit made elsewhere.
fn sees_others(tree: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    const FUSE: i64 = 0x6573_5546;
    // NFS, SMB, CIFS, SMB2, 9P, Ceph, AFS, Coda.
    const REMOTE: [i64; 8] = [
        0x6969,
        0x517B,
        0xFF53_4D42,
        0xFE53_4D42,
        0x0102_1997,
        0x00C3_6400,
        0x5346_414F,
        0x7375_7245,
    ];
    let Ok(c) = std::ffi::CString::new(tree.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: all-zero is a valid statfs; statfs fills it from a C string.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a C string, `st` valid for writes.
    if unsafe { libc::statfs(c.as_ptr(), &mut st) } != 0 {
        return false;
    }
    let kind = st.f_type as i64;
    if kind == FUSE {
        return coherent_walkfs_mount(tree);
    }
    !REMOTE.contains(&kind)
}

/// Is `tree` inside a walkfs mount with `cache=coherent`? Its daemon
/// answers the statistics ioctl on the mount's root: the topmost
/// directory above `tree` on the same device.
fn coherent_walkfs_mount(tree: &Path) -> bool {
    let Some(dev) = tree_dev(tree) else {
        return false;
    };
    let mut root = tree.to_path_buf();
    while let Some(up) = root.parent().filter(|p| tree_dev(p) == Some(dev)) {
        root = up.to_path_buf();
    }
    let Ok(buf) = control::stats_json(&root.to_string_lossy()) else {
        return false;
    };
    serde_json::from_slice::<walkfs_fuse::MountStats>(&buf).is_ok_and(|s| s.coherent)
}

/// The daemon's log of changes.
struct Log {
    /// Changes seen (the last one's number).
    seq: u64,
    /// Tokens below this answer `/`: changes before it were lost.
    since: u64,
    /// Each changed path (directories with a trailing `/`) with the
    /// number of its last change.
    paths: HashMap<String, u64>,
    /// Cookies made and not yet seen come back.
    waiting: HashMap<String, bool>,
}

struct Daemon {
    id: String,
    log: Mutex<Log>,
    seen: Condvar,
    /// The tree's file system shows this machine only its own changes
    /// (see [`sees_others`]): every answer is `/`.
    blind: bool,
}

impl Daemon {
    fn record(&self, e: Event<'_>) {
        let mut log = self.log.lock();
        log.seq += 1;
        let seq = log.seq;
        let (path, how) = match e {
            Event::Overflow => {
                log.paths.clear();
                log.since = seq;
                return;
            }
            Event::Path { path, how } => (path, how),
        };
        if let Some(rest) = path.strip_prefix(".git/") {
            if rest.starts_with(COOKIE) && how.what == What::Created {
                if let Some(seen) = log.waiting.get_mut(rest) {
                    *seen = true;
                    self.seen.notify_all();
                }
            }
            return;
        }
        if path == ".git" || path.is_empty() {
            // The git directory itself, or the root's own attributes:
            // no entry of the index.
            return;
        }
        if log.paths.len() >= MAX_PATHS && !log.paths.contains_key(path) {
            log.paths.clear();
            log.since = seq;
            return;
        }
        // A directory made, removed or renamed: all below it may differ.
        let name = if how.is_dir && how.what != What::Modified && how.what != What::Attrib {
            format!("{path}/")
        } else {
            path.to_string()
        };
        log.paths.insert(name, seq);
    }

    /// git's answer for `token`.
    fn answer(&self, token: &str, cookie: &Cookie) -> Vec<u8> {
        let from = token
            .strip_prefix("walkfs:")
            .and_then(|t| t.rsplit_once(':'))
            .filter(|(id, _)| *id == self.id)
            .and_then(|(_, n)| n.parse::<u64>().ok());
        let synced = cookie.sync(self);
        let log = self.log.lock();
        let mut out = format!("walkfs:{}:{}", self.id, log.seq).into_bytes();
        out.push(0);
        match from {
            Some(n) if synced && n >= log.since && !self.blind => {
                for (p, _) in log.paths.iter().filter(|(_, &s)| s > n) {
                    out.extend_from_slice(p.as_bytes());
                    out.push(0);
                }
            }
            _ => out.extend_from_slice(b"/\0"),
        }
        out
    }
}

/// Where the daemon makes its cookies, and how many it made.
struct Cookie {
    /// The git directory as the stream sees it (to make the cookie in
    /// when no host copy is known), and as the host has it.
    dirs: Option<(PathBuf, Option<PathBuf>)>,
    /// The walkfs mount the tree is on: asked to show every change made
    /// elsewhere before each cookie (a served mount's reports travel from
    /// the server; a cookie made through the mount would overtake them).
    mount: Option<PathBuf>,
    made: std::sync::atomic::AtomicU64,
}

impl Cookie {
    fn new(tree: &Path) -> Cookie {
        let git = tree.join(".git");
        let dirs = git.is_dir().then(|| {
            let host = host_copy(tree)
                .map(|t| t.join(".git"))
                .filter(|d| d.is_dir());
            (git, host)
        });
        Cookie {
            dirs,
            mount: walkfs_mount_of(tree).map(|(point, _)| point),
            made: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Make a cookie and wait until the stream reports it: false if it
    /// could not be made or did not come in time.
    fn sync(&self, d: &Daemon) -> bool {
        let Some((git, host)) = &self.dirs else {
            return false;
        };
        if let Some(m) = &self.mount {
            if let Err(e) = control::settle(m) {
                tracing::debug!("settle {}: {e}", m.display());
            }
        }
        let n = self.made.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let name = format!("{COOKIE}{}-{n}", std::process::id());
        let at = host.as_ref().unwrap_or(git).join(&name);
        d.log.lock().waiting.insert(name.clone(), false);
        let made = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&at)
            .is_ok();
        let mut log = d.log.lock();
        let deadline = Instant::now() + COOKIE_WAIT;
        while made && log.waiting.get(&name) == Some(&false) {
            if d.seen.wait_until(&mut log, deadline).timed_out() {
                break;
            }
        }
        let seen = log.waiting.remove(&name) == Some(true);
        drop(log);
        let _ = std::fs::remove_file(&at);
        seen
    }
}

/// The walkfs mount holding `tree`: its mount point, and its source as
/// mountinfo gives it (a host directory, or `unix:...` of a server).
fn walkfs_mount_of(tree: &Path) -> Option<(PathBuf, PathBuf)> {
    let tree = tree.canonicalize().ok()?;
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    // The innermost mount holding the tree is the last one listed.
    let mut found = None;
    for line in info.lines() {
        let (left, right) = line.split_once(" - ")?;
        let point = unescape(left.split(' ').nth(4)?);
        let mut r = right.split(' ');
        let (fstype, source) = (r.next()?, unescape(r.next()?));
        if tree.starts_with(&point) {
            found = (fstype == "fuse.walkfs").then_some((point, source));
        }
    }
    found
}

/// The host directory behind `tree` when `tree` is on a walkfs mount of
/// a local directory (the mount's source, in /proc/self/mountinfo).
fn host_copy(tree: &Path) -> Option<PathBuf> {
    let (point, source) = walkfs_mount_of(tree)?;
    let rest = tree
        .canonicalize()
        .ok()?
        .strip_prefix(&point)
        .ok()?
        .to_path_buf();
    (source.is_absolute() && source.is_dir()).then(|| source.join(rest))
}

/// mountinfo's octal escapes (`\040` for a space).
fn unescape(s: &str) -> PathBuf {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let oct = b.get(i + 1..i + 4).and_then(|o| {
            std::str::from_utf8(o)
                .ok()
                .and_then(|o| u8::from_str_radix(o, 8).ok())
        });
        match (b[i], oct) {
            (b'\\', Some(c)) => {
                out.push(c);
                i += 4;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    PathBuf::from(std::ffi::OsString::from(
        String::from_utf8_lossy(&out).into_owned(),
    ))
}

/// The daemon of the work tree that is the current directory.
pub fn run() -> Result<(), String> {
    let tree = std::env::current_dir().map_err(|e| format!("current directory: {e}"))?;
    let sock = socket_path(&tree)?;
    // One daemon per tree: the one holding the lock.
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(sock.with_extension("lock"))
        .map_err(|e| format!("{}: {e}", sock.display()))?;
    // SAFETY: flock on a file we own, with no pointers.
    if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        return Ok(());
    }
    let started = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let d = Arc::new(Daemon {
        id: format!("{}-{started:x}", std::process::id()),
        log: Mutex::new(Log {
            seq: 0,
            since: 0,
            paths: HashMap::new(),
            waiting: HashMap::new(),
        }),
        seen: Condvar::new(),
        blind: !sees_others(&tree),
    });
    if d.blind {
        tracing::warn!(
            "fsmonitor: {} is on a file system that does not report other machines' \
             changes (a network or FUSE file system other than a walkfs mount with \
             cache=coherent): every answer is \"look at everything\"",
            tree.display()
        );
    }
    let each = Arc::clone(&d);
    let dir = tree.to_string_lossy().into_owned();
    let _vfs = watch::follow(&dir, "", move |e| each.record(e))?;
    let cookie = Arc::new(Cookie::new(&tree));
    let _ = std::fs::remove_file(&sock);
    let listener = UnixListener::bind(&sock).map_err(|e| format!("{}: {e}", sock.display()))?;
    tracing::info!("fsmonitor for {dir} on {}", sock.display());
    // Who asks to stop every daemon under a directory finds this one by
    // its tree.
    let canon = tree.canonicalize().unwrap_or_else(|_| tree.clone());
    let _ = std::fs::write(
        sock.with_extension("tree"),
        canon.as_os_str().as_encoded_bytes(),
    );
    // The daemon holds nothing of the tree by its working directory: an
    // unmount is not kept busy by it.
    let _ = std::env::set_current_dir("/");
    let idle = Arc::new(Mutex::new(Instant::now()));
    {
        let idle = Arc::clone(&idle);
        let sock = sock.clone();
        let dev = tree_dev(&canon);
        std::thread::spawn(move || loop {
            std::thread::sleep(WATCHDOG);
            // Gone with its tree: the mount it follows was unmounted (the
            // path now leads elsewhere, or nowhere), or nobody asked for
            // an hour.
            let gone = dev.is_some() && tree_dev(&canon) != dev;
            if gone || idle.lock().elapsed() > IDLE {
                if gone {
                    tracing::info!("fsmonitor: {} is gone; stopping", canon.display());
                }
                let _ = std::fs::remove_file(&sock);
                let _ = std::fs::remove_file(sock.with_extension("tree"));
                release(&canon);
                std::process::exit(0);
            }
        });
    }
    // A thread per query: one client that never sends its token must not
    // hold up git's (each waits for its own cookie).
    for conn in listener.incoming() {
        let Ok(conn) = conn else { continue };
        *idle.lock() = Instant::now();
        let (d, cookie, sock, tree) = (
            Arc::clone(&d),
            Arc::clone(&cookie),
            sock.clone(),
            tree.clone(),
        );
        std::thread::spawn(move || serve_query(conn, &d, &cookie, &sock, &tree));
    }
    let _ = std::fs::remove_file(&sock);
    Ok(())
}

/// Answer one connection: a token, or the request to stop.
fn serve_query(mut conn: UnixStream, d: &Daemon, cookie: &Cookie, sock: &Path, tree: &Path) {
    let _ = conn.set_read_timeout(Some(Duration::from_secs(10)));
    let mut token = String::new();
    if BufReader::new(&conn).read_line(&mut token).is_err() {
        return;
    }
    let token = token.trim_end_matches('\n');
    if token == "\u{1}quit" {
        let _ = std::fs::remove_file(sock);
        let _ = std::fs::remove_file(sock.with_extension("tree"));
        release(&tree.canonicalize().unwrap_or_else(|_| tree.to_path_buf()));
        let _ = conn.write_all(b"bye");
        std::process::exit(0);
    }
    let answer = d.answer(token, cookie);
    let _ = conn.write_all(&answer);
}

/// Let go of everything held in `tree` (the current directory, the
/// source's open directories), so that whoever asked the daemon to stop
/// finds the tree free once it answers: what an exiting process holds is
/// let go only after its lock, in the kernel's order.
fn release(tree: &Path) {
    let _ = std::env::set_current_dir("/");
    let Ok(fds) = std::fs::read_dir("/proc/self/fd") else {
        return;
    };
    let held: Vec<i32> = fds
        .flatten()
        .filter_map(|e| {
            let fd = e.file_name().to_str()?.parse().ok()?;
            std::fs::read_link(e.path())
                .ok()
                .filter(|p| p.starts_with(tree))
                .map(|_| fd)
        })
        .collect();
    for fd in held {
        // SAFETY: the daemon exits right after; nothing uses these again.
        unsafe { libc::close(fd) };
    }
}
