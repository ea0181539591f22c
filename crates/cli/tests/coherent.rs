//! `cache=coherent`: a change made behind a client's back, on the host or
//! by a second client, is seen by the client within 100 ms (p99; printed,
//! and asserted with headroom for a loaded machine), through
//! the vfs API and through a FUSE mount, for every kind of change: create
//! (a cached negative entry turning positive), unlink, rename, write,
//! truncate, chmod, chown, symlink retarget, a directory listing.
//!
//! Each trial first makes the observer cache the old state (that is what
//! could go stale), then changes it, then polls the observer until it
//! shows the new state. Without invalidation the observer never does: the
//! same trials against `cache=loose` time out (checked below).

mod common;

use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use walkfs_source::SourceOptions;
use walkfs_vfs::{Creds, Ctx, AT_FDCWD};

/// What a client sees: the same questions through the vfs API or through
/// a mount.
trait View {
    /// (size, permission bits, uid) of `rel`.
    fn stat(&self, rel: &str) -> io::Result<(u64, u32, u32)>;
    fn readlink(&self, rel: &str) -> io::Result<Vec<u8>>;
    fn read(&self, rel: &str) -> io::Result<Vec<u8>>;
    /// Sorted names in directory `rel`.
    fn list(&self, rel: &str) -> io::Result<Vec<Vec<u8>>>;
}

/// A file tree a change can be made in: the host directory itself, or a
/// second client.
trait Changer {
    fn write(&self, rel: &str, data: &[u8]) -> io::Result<()>;
    fn truncate(&self, rel: &str, len: u64) -> io::Result<()>;
    fn unlink(&self, rel: &str) -> io::Result<()>;
    fn rename(&self, from: &str, to: &str) -> io::Result<()>;
    fn chmod(&self, rel: &str, mode: u32) -> io::Result<()>;
    fn chown(&self, rel: &str, uid: u32) -> io::Result<()>;
    fn symlink(&self, target: &str, rel: &str) -> io::Result<()>;
    fn mkdir(&self, rel: &str) -> io::Result<()>;
}

fn err(e: walkfs_vfs::Errno) -> io::Error {
    io::Error::from_raw_os_error(e.0)
}

/// A vfs caller, rooted at the vfs root.
struct VfsView(Ctx);

impl VfsView {
    fn path(rel: &str) -> Vec<u8> {
        format!("/{rel}").into_bytes()
    }
}

impl View for VfsView {
    fn stat(&self, rel: &str) -> io::Result<(u64, u32, u32)> {
        let st = self
            .0
            .statx(AT_FDCWD, &Self::path(rel), libc::AT_SYMLINK_NOFOLLOW, 0xfff)
            .map_err(err)?;
        Ok((st.stx_size, st.stx_mode as u32 & 0o7777, st.stx_uid))
    }
    fn readlink(&self, rel: &str) -> io::Result<Vec<u8>> {
        self.0.readlinkat(AT_FDCWD, &Self::path(rel)).map_err(err)
    }
    fn read(&self, rel: &str) -> io::Result<Vec<u8>> {
        let fd = self
            .0
            .openat(AT_FDCWD, &Self::path(rel), libc::O_RDONLY, 0)
            .map_err(err)?;
        let mut out = Vec::new();
        let mut buf = [0u8; 4096];
        let r = loop {
            match self.0.read(fd, &mut buf) {
                Ok(0) => break Ok(out),
                Ok(n) => out.extend_from_slice(&buf[..n]),
                Err(e) => break Err(err(e)),
            }
        };
        let _ = self.0.close(fd);
        r
    }
    fn list(&self, rel: &str) -> io::Result<Vec<Vec<u8>>> {
        let fd = self
            .0
            .openat(
                AT_FDCWD,
                &Self::path(rel),
                libc::O_RDONLY | libc::O_DIRECTORY,
                0,
            )
            .map_err(err)?;
        let mut names = Vec::new();
        let r = loop {
            match self.0.getdents(fd) {
                Ok(v) if v.is_empty() => break Ok(()),
                Ok(v) => names.extend(
                    v.into_iter()
                        .map(|e| e.name)
                        .filter(|n| n != b"." && n != b".."),
                ),
                Err(e) => break Err(err(e)),
            }
        };
        let _ = self.0.close(fd);
        r?;
        names.sort();
        Ok(names)
    }
}

impl Changer for VfsView {
    fn write(&self, rel: &str, data: &[u8]) -> io::Result<()> {
        let fd = self
            .0
            .openat(
                AT_FDCWD,
                &Self::path(rel),
                libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC,
                0o644,
            )
            .map_err(err)?;
        let r = self.0.write(fd, data).map_err(err);
        let _ = self.0.close(fd);
        r.map(drop)
    }
    fn truncate(&self, rel: &str, len: u64) -> io::Result<()> {
        let fd = self
            .0
            .openat(AT_FDCWD, &Self::path(rel), libc::O_WRONLY, 0)
            .map_err(err)?;
        let r = self.0.ftruncate(fd, len as i64).map_err(err);
        let _ = self.0.close(fd);
        r
    }
    fn unlink(&self, rel: &str) -> io::Result<()> {
        self.0.unlinkat(AT_FDCWD, &Self::path(rel), 0).map_err(err)
    }
    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        self.0
            .renameat2(AT_FDCWD, &Self::path(from), AT_FDCWD, &Self::path(to), 0)
            .map_err(err)
    }
    fn chmod(&self, rel: &str, mode: u32) -> io::Result<()> {
        self.0
            .fchmodat(AT_FDCWD, &Self::path(rel), mode, 0)
            .map_err(err)
    }
    fn chown(&self, rel: &str, uid: u32) -> io::Result<()> {
        self.0
            .fchownat(AT_FDCWD, &Self::path(rel), uid, u32::MAX, 0)
            .map_err(err)
    }
    fn symlink(&self, target: &str, rel: &str) -> io::Result<()> {
        self.0
            .symlinkat(target.as_bytes(), AT_FDCWD, &Self::path(rel))
            .map(drop)
            .map_err(err)
    }
    fn mkdir(&self, rel: &str) -> io::Result<()> {
        self.0
            .mkdirat(AT_FDCWD, &Self::path(rel), 0o755)
            .map(drop)
            .map_err(err)
    }
}

/// A directory of the host (the export itself, or a mount of it).
struct PathView(PathBuf);

impl View for PathView {
    fn stat(&self, rel: &str) -> io::Result<(u64, u32, u32)> {
        let m = std::fs::symlink_metadata(self.0.join(rel))?;
        Ok((m.len(), m.mode() & 0o7777, m.uid()))
    }
    fn readlink(&self, rel: &str) -> io::Result<Vec<u8>> {
        Ok(std::fs::read_link(self.0.join(rel))?
            .into_os_string()
            .into_encoded_bytes())
    }
    fn read(&self, rel: &str) -> io::Result<Vec<u8>> {
        std::fs::read(self.0.join(rel))
    }
    fn list(&self, rel: &str) -> io::Result<Vec<Vec<u8>>> {
        let mut names = std::fs::read_dir(self.0.join(rel))?
            .map(|e| e.map(|e| e.file_name().into_encoded_bytes()))
            .collect::<io::Result<Vec<_>>>()?;
        names.sort();
        Ok(names)
    }
}

impl Changer for PathView {
    fn write(&self, rel: &str, data: &[u8]) -> io::Result<()> {
        std::fs::write(self.0.join(rel), data)
    }
    fn truncate(&self, rel: &str, len: u64) -> io::Result<()> {
        std::fs::OpenOptions::new()
            .write(true)
            .open(self.0.join(rel))?
            .set_len(len)
    }
    fn unlink(&self, rel: &str) -> io::Result<()> {
        std::fs::remove_file(self.0.join(rel))
    }
    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        std::fs::rename(self.0.join(from), self.0.join(to))
    }
    fn chmod(&self, rel: &str, mode: u32) -> io::Result<()> {
        std::fs::set_permissions(self.0.join(rel), std::fs::Permissions::from_mode(mode))
    }
    fn chown(&self, rel: &str, uid: u32) -> io::Result<()> {
        std::os::unix::fs::lchown(self.0.join(rel), Some(uid), None)
    }
    fn symlink(&self, target: &str, rel: &str) -> io::Result<()> {
        std::os::unix::fs::symlink(target, self.0.join(rel))
    }
    fn mkdir(&self, rel: &str) -> io::Result<()> {
        std::fs::create_dir(self.0.join(rel))
    }
}

/// Poll `seen` until it holds; the time from the call to then, or `None`
/// after `limit`.
fn latency(limit: Duration, mut seen: impl FnMut() -> bool) -> Option<Duration> {
    let t0 = Instant::now();
    loop {
        if seen() {
            return Some(t0.elapsed());
        }
        if t0.elapsed() > limit {
            return None;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// Wait until the observer shows the state a trial set up on the host
/// (its change reports run behind the host's calls, as every change's do:
/// what is timed is the change after it).
fn settle(what: &str, seen: impl FnMut() -> bool) {
    assert!(latency(Duration::from_secs(5), seen).is_some(), "{what}");
}

const KINDS: &[&str] = &[
    "create", "unlink", "rename", "write", "truncate", "chmod", "chown", "symlink", "readdir",
];

/// One trial of change `kind` (numbered `i`, so names never repeat): the
/// observer caches the old state, `ch` changes it, and the time until the
/// observer shows the new state is returned (`None`: never, within
/// `limit`).
fn trial(
    kind: &str,
    i: usize,
    host: &dyn Changer,
    ch: &dyn Changer,
    obs: &dyn View,
    limit: Duration,
) -> Option<Duration> {
    let d = format!("t{i}");
    host.mkdir(&d).expect("mkdir");
    let p = |n: &str| format!("{d}/{n}");
    let set_up = |f: &dyn Fn() -> io::Result<()>| f().expect("set up");
    let lat = match kind {
        "create" => {
            assert!(obs.stat(&p("c")).is_err());
            ch.write(&p("c"), b"new").expect("create");
            latency(limit, || obs.stat(&p("c")).is_ok())
        }
        "unlink" => {
            set_up(&|| host.write(&p("u"), b"x"));
            settle("the observer sees the host's new file", || {
                obs.stat(&p("u")).is_ok()
            });
            ch.unlink(&p("u")).expect("unlink");
            latency(limit, || obs.stat(&p("u")).is_err())
        }
        "rename" => {
            set_up(&|| host.write(&p("a"), b"x"));
            settle("the observer sees the host's new file", || {
                obs.stat(&p("a")).is_ok()
            });
            assert!(obs.stat(&p("b")).is_err());
            ch.rename(&p("a"), &p("b")).expect("rename");
            latency(limit, || {
                obs.stat(&p("a")).is_err() && obs.stat(&p("b")).is_ok()
            })
        }
        "write" => {
            set_up(&|| host.write(&p("w"), b"old"));
            settle("the observer reads the host's new file", || {
                obs.read(&p("w")).is_ok_and(|b| b == b"old")
            });
            ch.write(&p("w"), b"new and longer").expect("write");
            latency(limit, || {
                obs.stat(&p("w")).is_ok_and(|s| s.0 == 14)
                    && obs.read(&p("w")).is_ok_and(|b| b == b"new and longer")
            })
        }
        "truncate" => {
            set_up(&|| host.write(&p("t"), b"12345"));
            settle("the observer sees the host's new file", || {
                obs.stat(&p("t")).is_ok_and(|s| s.0 == 5)
            });
            ch.truncate(&p("t"), 2).expect("truncate");
            latency(limit, || obs.stat(&p("t")).is_ok_and(|s| s.0 == 2))
        }
        "chmod" => {
            set_up(&|| host.write(&p("m"), b"x"));
            settle("the observer sees the host's new file", || {
                obs.stat(&p("m")).is_ok_and(|s| s.1 == 0o644)
            });
            ch.chmod(&p("m"), 0o600).expect("chmod");
            latency(limit, || obs.stat(&p("m")).is_ok_and(|s| s.1 == 0o600))
        }
        "chown" => {
            set_up(&|| host.write(&p("o"), b"x"));
            settle("the observer sees the host's new file", || {
                obs.stat(&p("o")).is_ok_and(|s| s.2 == 0)
            });
            ch.chown(&p("o"), 4242).expect("chown");
            latency(limit, || obs.stat(&p("o")).is_ok_and(|s| s.2 == 4242))
        }
        "symlink" => {
            set_up(&|| host.symlink("one", &p("l")));
            settle("the observer reads the host's new symlink", || {
                obs.readlink(&p("l")).is_ok_and(|b| b == b"one")
            });
            // Retarget atomically, as `ln -sf` through a rename would.
            ch.symlink("two", &p("l.new")).expect("symlink");
            ch.rename(&p("l.new"), &p("l")).expect("rename");
            latency(limit, || obs.readlink(&p("l")).is_ok_and(|b| b == b"two"))
        }
        "readdir" => {
            set_up(&|| host.write(&p("x"), b""));
            settle("the observer lists the host's new file", || {
                obs.list(&d).is_ok_and(|l| l == vec![b"x".to_vec()])
            });
            ch.write(&p("y"), b"").expect("create");
            latency(limit, || {
                obs.list(&d)
                    .is_ok_and(|l| l == vec![b"x".to_vec(), b"y".to_vec()])
            })
        }
        _ => unreachable!("unknown change {kind}"),
    };
    lat
}

/// Run `rounds` trials of every kind; assert each was seen, and that the
/// p99 is under a second: ten times the 100 ms target, so that a loaded
/// machine (CI shares 2 cores) cannot fail the test while a change that
/// waits for some timeout instead of a notification still would. Prints
/// the figures; the 100 ms target is read from them, not asserted.
fn check_coherent(
    label: &str,
    host: &dyn Changer,
    ch: &dyn Changer,
    obs: &dyn View,
    rounds: usize,
) {
    static TRIALS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let mut all = Vec::new();
    for _ in 0..rounds {
        for kind in KINDS {
            let n = TRIALS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let lat = trial(kind, n, host, ch, obs, Duration::from_secs(5));
            let lat = lat.unwrap_or_else(|| panic!("{label}: {kind} never seen"));
            all.push(lat);
        }
    }
    all.sort();
    let p = |q: f64| all[((all.len() - 1) as f64 * q).round() as usize];
    eprintln!(
        "{label}: {} trials, median {:?}, p99 {:?}, max {:?}",
        all.len(),
        p(0.5),
        p(0.99),
        p(1.0)
    );
    assert!(
        p(0.99) < Duration::from_secs(1),
        "{label}: p99 {:?} over a second (target 100 ms)",
        p(0.99)
    );
}

fn as_root(host: &Path) {
    // Files the trials create are owned by root and chown'd; the uid the
    // observer checks for is the one that created them.
    assert_eq!(
        std::fs::metadata(host).expect("export").uid(),
        0,
        "run as root"
    );
}

fn vfs(source: &str, opts: &str) -> Ctx {
    let o = SourceOptions::parse(opts).expect("options");
    walkfs_source::open(source, &o)
        .expect("open vfs")
        .context(Creds::root())
}

#[test]
fn vfs_over_a_host_directory_sees_host_changes() {
    let tmp = tempfile::tempdir().expect("tmp");
    as_root(tmp.path());
    let host = PathView(tmp.path().to_path_buf());
    let obs = VfsView(vfs(tmp.path().to_str().expect("utf8"), "cache=coherent"));
    assert!(obs.0.vfs().is_coherent());
    check_coherent("vfs/hostfs, host changes", &host, &host, &obs, 12);
}

#[test]
fn without_coherence_the_same_changes_go_unseen() {
    // The trials are not trivially satisfied: a loose cache never sees
    // what happened behind its back. (Listings are not cached by the vfs:
    // the kernel's caches of them are checked through FUSE.)
    let tmp = tempfile::tempdir().expect("tmp");
    let host = PathView(tmp.path().to_path_buf());
    let obs = VfsView(vfs(tmp.path().to_str().expect("utf8"), "cache=loose"));
    for (i, kind) in KINDS.iter().enumerate().filter(|(_, k)| **k != "readdir") {
        let seen = trial(kind, i, &host, &host, &obs, Duration::from_millis(300));
        assert_eq!(seen, None, "{kind} seen without invalidation");
    }
}

#[test]
fn vfs_over_9p_sees_host_and_other_client_changes() {
    let tmp = tempfile::tempdir().expect("tmp");
    let export = tmp.path().join("export");
    std::fs::create_dir(&export).expect("mkdir");
    as_root(&export);
    let sock = tmp.path().join("sock");
    let _server = common::serve(&export, &sock);
    let src = format!("unix:{}", sock.display());
    let host = PathView(export.clone());
    let obs = VfsView(vfs(&src, "cache=coherent"));
    assert!(
        obs.0.vfs().is_coherent(),
        "the server offered notifications"
    );
    check_coherent("vfs/9p, host changes", &host, &host, &obs, 12);
    // The changer keeps no negative entries: with negtimeout=-1 a
    // directory it listed would answer for names the host adds later
    // (README, "negtimeout"), and it must find the host's files to change
    // them.
    let other = VfsView(vfs(&src, "cache=loose,negtimeout=0"));
    check_coherent("vfs/9p, another client's changes", &host, &other, &obs, 12);
}

#[test]
fn fuse_mounts_see_host_and_other_client_changes() {
    let tmp = tempfile::tempdir().expect("tmp");
    let export = tmp.path().join("export");
    let (m1, m2) = (tmp.path().join("m1"), tmp.path().join("m2"));
    for d in [&export, &m1, &m2] {
        std::fs::create_dir(d).expect("mkdir");
    }
    as_root(&export);
    let host = PathView(export.clone());
    // A host directory mounted directly: the kernel's caches follow the
    // host's changes.
    {
        let _m = common::Mount::new(&export, &m1, "cache=coherent,negtimeout=-1");
        let obs = PathView(m1.clone());
        check_coherent("fuse/hostfs, host changes", &host, &host, &obs, 6);
    }
    // Through a server: changes on the host and by another client.
    let sock = tmp.path().join("sock");
    let _server = common::serve(&export, &sock);
    let src = PathBuf::from(format!("unix:{}", sock.display()));
    let _m = common::Mount::new(&src, &m2, "cache=coherent,negtimeout=-1");
    let obs = PathView(m2.clone());
    check_coherent("fuse/9p, host changes", &host, &host, &obs, 6);
    let other = VfsView(vfs(
        &format!("unix:{}", sock.display()),
        "cache=loose,negtimeout=0",
    ));
    check_coherent("fuse/9p, another client's changes", &host, &other, &obs, 6);
    // The mount says what it was told.
    let o = common::run(common::walkfs().arg("stats").arg(&m2).arg("--json"));
    let stats: serde_json::Value = serde_json::from_slice(&o.stdout).expect("stats json");
    assert_eq!(stats["coherent"], true, "{stats}");
    assert!(stats["vfs_changes"].as_u64().unwrap_or(0) > 0, "{stats}");
}

/// Sets the inotify and fanotify `max_queued_events` (read when a watch
/// group is made) and puts the old values back when dropped.
struct QueueLimit(Vec<(&'static str, String)>);

impl QueueLimit {
    const PATHS: [&'static str; 2] = [
        "/proc/sys/fs/inotify/max_queued_events",
        "/proc/sys/fs/fanotify/max_queued_events",
    ];
    fn set(n: u32) -> QueueLimit {
        let mut old = Vec::new();
        for p in Self::PATHS {
            let Ok(v) = std::fs::read_to_string(p) else {
                continue;
            };
            std::fs::write(p, n.to_string()).expect("write sysctl (run as root)");
            old.push((p, v.trim().to_string()));
        }
        QueueLimit(old)
    }
}

impl Drop for QueueLimit {
    fn drop(&mut self) {
        for (p, v) in &self.0 {
            let _ = std::fs::write(p, v);
        }
    }
}

#[test]
fn a_watch_queue_overflow_drops_everything_and_recovers() {
    let tmp = tempfile::tempdir().expect("tmp");
    let export = tmp.path().join("export");
    std::fs::create_dir(&export).expect("mkdir");
    let host = PathView(export.clone());
    let names: Vec<String> = (0..200).map(|i| format!("f{i}")).collect();
    for n in &names {
        host.write(n, b"x").expect("create");
    }
    let sock = tmp.path().join("sock");
    // The server's watch queue holds 8 events: a burst overflows it.
    let server = {
        let _small = QueueLimit::set(8);
        common::serve(&export, &sock)
    };
    let obs = VfsView(vfs(&format!("unix:{}", sock.display()), "cache=coherent"));
    for n in &names {
        assert!(obs.stat(n).is_ok());
        assert!(obs.stat(&format!("{n}.new")).is_err());
    }
    // Bursts of changes until one overflows the queue: whether a burst
    // outruns the server's watch reader depends on the scheduler, so the
    // names go back and forth (each round leaves every old name cached as
    // present or absent) until the server has reported a loss.
    let mut round = 0;
    loop {
        let (from, to) = if round % 2 == 0 {
            ("", ".new")
        } else {
            (".new", "")
        };
        for n in &names {
            host.unlink(&format!("{n}{from}")).expect("unlink");
            host.write(&format!("{n}{to}"), b"y").expect("create");
        }
        round += 1;
        std::thread::sleep(Duration::from_millis(50));
        if obs.0.vfs().cache_stats().changes_lost > 0 || round >= 20 {
            break;
        }
        // Cache the state this round left, so the next round's changes
        // have something to invalidate.
        for n in &names {
            let _ = obs.stat(&format!("{n}{to}"));
            let _ = obs.stat(&format!("{n}{from}"));
        }
    }
    let (gone, there) = if round % 2 == 1 {
        ("", ".new")
    } else {
        (".new", "")
    };
    let all_seen = || {
        names.iter().all(|n| {
            obs.stat(&format!("{n}{gone}")).is_err() && obs.stat(&format!("{n}{there}")).is_ok()
        })
    };
    let lat = latency(Duration::from_secs(5), all_seen);
    let stats = obs.0.vfs().cache_stats();
    eprintln!("overflow: recovered in {lat:?}, {stats:?}");
    assert!(lat.is_some(), "changes lost in the overflow stayed unseen");
    assert!(
        stats.changes_lost > 0,
        "the server never reported an overflow (queue too large?)"
    );
    // And after it, changes are seen one by one again.
    let before = obs.0.vfs().cache_stats().changes;
    assert!(obs.stat("late").is_err());
    host.write("late", b"z").expect("create");
    assert!(latency(Duration::from_secs(5), || obs.stat("late").is_ok()).is_some());
    assert!(obs.0.vfs().cache_stats().changes > before);
    drop(server);
}

#[test]
fn against_diod_the_client_falls_back_to_revalidating() {
    let Some(diod) = ["/usr/sbin/diod", "/usr/bin/diod"]
        .into_iter()
        .find(|p| Path::new(p).exists())
    else {
        panic!("diod not installed: run scripts/test.sh (it installs Debian's diod)");
    };
    let tmp = tempfile::tempdir().expect("tmp");
    let export = tmp.path().join("export");
    std::fs::create_dir(&export).expect("mkdir");
    as_root(&export);
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let exp = export.to_str().expect("utf8");
    let _diod = common::Kill(
        std::process::Command::new(diod)
            .args(["-f", "-n", "-l", &format!("127.0.0.1:{port}"), "-e", exp])
            .args(["-L", "stderr"])
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start diod"),
    );
    common::wait_until("diod listening", || {
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    });
    let obs = VfsView(vfs(
        &format!("tcp:127.0.0.1:{port}"),
        &format!("cache=coherent,aname={exp}"),
    ));
    // diod answers the notification request with an error: the client
    // knows it will not be told, and revalidates instead of trusting its
    // cache (a negative entry lives a second).
    assert!(!obs.0.vfs().is_coherent());
    let host = PathView(export.clone());
    for (i, kind) in KINDS.iter().enumerate() {
        let seen = trial(kind, i, &host, &host, &obs, Duration::from_secs(3));
        assert!(seen.is_some(), "{kind}: stale against diod");
    }
}

/// A coherent mount writes through the kernel (no write-back cache) but
/// gathers a program's small writes itself: the server gets a few large
/// writes, and nothing can tell. The program's own stat and reads see
/// every byte at once, a truncate lands after the writes made before it,
/// the host sees the data within the write-behind age while the file is
/// still open, and whole at close.
#[test]
fn a_coherent_mount_gathers_small_writes_and_nothing_can_tell() {
    use std::io::{Read, Seek, SeekFrom, Write};
    let tmp = tempfile::tempdir().expect("tmp");
    let export = tmp.path().join("export");
    let mnt = tmp.path().join("mnt");
    for d in [&export, &mnt] {
        std::fs::create_dir(d).expect("mkdir");
    }
    let sock = tmp.path().join("sock");
    let _server = common::serve(&export, &sock);
    let src = PathBuf::from(format!("unix:{}", sock.display()));
    let _m = common::Mount::new(&src, &mnt, "cache=coherent,negtimeout=-1");
    let twrites = || {
        let o = common::run(common::walkfs().arg("stats").arg(&mnt).arg("--json"));
        let s: serde_json::Value = serde_json::from_slice(&o.stdout).expect("stats json");
        s["rpcs"]
            .as_array()
            .and_then(|a| a.iter().find(|p| p[0] == "Twrite"))
            .and_then(|p| p[1].as_u64())
            .unwrap_or(0)
    };

    let before = twrites();
    let mut model = Vec::new();
    let mut f = std::fs::File::create(mnt.join("out")).expect("create");
    for i in 0..1000u32 {
        let piece = format!("{i:07} piece of a file written in small writes\n");
        f.write_all(piece.as_bytes()).expect("write");
        model.extend_from_slice(piece.as_bytes());
    }
    // The writer's view: size and bytes, through other descriptors.
    let len = std::fs::metadata(mnt.join("out")).expect("stat").len();
    assert_eq!(len, model.len() as u64, "stat through the mount");
    let mut got = Vec::new();
    std::fs::File::open(mnt.join("out"))
        .expect("open")
        .read_to_end(&mut got)
        .expect("read");
    assert!(got == model, "read through the mount differs");
    // Still open: the host has it all within the write-behind age.
    let host = export.join("out");
    let seen = latency(Duration::from_millis(500), || {
        std::fs::read(&host).is_ok_and(|b| b == model)
    });
    assert!(seen.is_some(), "host never saw the writes of an open file");
    // Writes, then a truncate, then writes: in that order.
    f.write_all(b"lost to the truncate").expect("write");
    f.set_len(10).expect("truncate");
    f.seek(SeekFrom::Start(10)).expect("seek");
    f.write_all(b"|after").expect("write");
    model.truncate(10);
    model.extend_from_slice(b"|after");
    drop(f);
    // Closed: the host has it at once.
    assert_eq!(std::fs::read(&host).expect("host read"), model);
    let sent = twrites() - before;
    assert!(
        (1..100).contains(&sent),
        "1,000+ writes should reach the server as a few: {sent} Twrite"
    );
}

/// A coherent mount of a local directory hears its own changes back from
/// the host's watcher (hostfs own.rs): the files a program makes through
/// it stay in the kernel's cache (no FORGET, no second LOOKUP), and a
/// host that moves such a file away and back, the mount having seen it
/// gone in between, is seen undoing it (the record of what the mount made
/// no longer stands once the mount learned otherwise).
#[test]
fn a_coherent_local_mount_keeps_what_it_made_and_sees_the_host_undo_it() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (src, mnt) = (tmp.path().join("src"), tmp.path().join("mnt"));
    for d in [&src, &mnt] {
        std::fs::create_dir(d).expect("mkdir");
    }
    let _m = common::Mount::new(&src, &mnt, "cache=coherent");
    let stats = || {
        let o = common::run(common::walkfs().arg("stats").arg(&mnt).arg("--json"));
        serde_json::from_slice::<serde_json::Value>(&o.stdout).expect("stats json")
    };
    const FILES: u64 = 200;
    std::fs::create_dir(mnt.join("d")).expect("mkdir");
    for i in 0..FILES {
        std::fs::write(mnt.join(format!("d/f{i}")), format!("{i}\n")).expect("write");
    }
    common::wait_until("the reports of the creates", || {
        stats()["vfs_changes"].as_u64().unwrap_or(0) > FILES
    });
    let s = stats();
    let forgets = s["fuse"]
        .as_array()
        .and_then(|a| a.iter().find(|p| p[0] == "forget"))
        .and_then(|p| p[1].as_u64())
        .unwrap_or(0);
    let own = s["vfs_changes_own"].as_u64().unwrap_or(0);
    assert!(own > FILES, "reports of the mount's own creates kept: {s}");
    assert!(forgets < FILES / 10, "the kernel forgot new files: {s}");
    for i in 0..FILES {
        assert_eq!(
            std::fs::read_to_string(mnt.join(format!("d/f{i}"))).expect("read"),
            format!("{i}\n")
        );
    }
    // Away and back on the host, within the time a record lives.
    std::fs::write(mnt.join("d/z"), "z\n").expect("write");
    std::fs::rename(src.join("d/z"), src.join("away")).expect("rename");
    common::wait_until("the file seen gone", || {
        !mnt.join("d/z").exists() && mnt.join("away").exists()
    });
    std::fs::rename(src.join("away"), src.join("d/z")).expect("rename back");
    common::wait_until("the file seen back", || mnt.join("d/z").exists());
    assert_eq!(
        std::fs::read_to_string(mnt.join("d/z")).expect("read"),
        "z\n"
    );
}

/// generic/025: an exchange through the mount is reported back by the
/// host as two moves; both are the mount's own. Replaying the second as
/// another party's rename once left both names on one file in the
/// kernel (a regular file and a symlink swapped, the inode numbers ext4
/// had just reused).
#[test]
fn an_exchange_through_the_mount_shows_both_files_swapped() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (src, mnt) = (tmp.path().join("src"), tmp.path().join("mnt"));
    for d in [&src, &mnt] {
        std::fs::create_dir(d).expect("mkdir");
    }
    let _m = common::Mount::new(&src, &mnt, "");
    let exchange = || {
        let (a, b) = (
            std::ffi::CString::new(mnt.join("a").into_os_string().into_encoded_bytes()).unwrap(),
            std::ffi::CString::new(mnt.join("b").into_os_string().into_encoded_bytes()).unwrap(),
        );
        // SAFETY: two valid C strings.
        let r = unsafe {
            libc::renameat2(
                libc::AT_FDCWD,
                a.as_ptr(),
                libc::AT_FDCWD,
                b.as_ptr(),
                libc::RENAME_EXCHANGE,
            )
        };
        assert_eq!(r, 0, "exchange: {}", io::Error::last_os_error());
    };
    let kind = |n: &str| std::fs::symlink_metadata(mnt.join(n)).map(|m| m.file_type().is_symlink());
    for _ in 0..5 {
        std::fs::write(mnt.join("a"), "a").expect("write");
        std::fs::write(mnt.join("b"), "b").expect("write");
        exchange();
        std::fs::remove_file(mnt.join("a")).expect("rm");
        std::fs::remove_file(mnt.join("b")).expect("rm");
        std::fs::write(mnt.join("a"), "a").expect("write");
        std::os::unix::fs::symlink("t", mnt.join("b")).expect("symlink");
        exchange();
        // The reports come back meanwhile; the names stay swapped.
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(kind("a").ok(), Some(true), "a is the symlink");
        assert_eq!(kind("b").ok(), Some(false), "b is the file");
        assert_eq!(std::fs::read_to_string(mnt.join("b")).expect("read"), "a");
        std::fs::remove_file(mnt.join("a")).expect("rm");
        std::fs::remove_file(mnt.join("b")).expect("rm");
    }
}

/// Issue 38's ENOENT: a 9P client of `walkfs serve` makes a file; the host
/// moves it away (the client is told, and learns the name is gone) and
/// back, within the time the server remembers the client's own changes.
/// The file is again what the client made, so the server took the report
/// of its return for the client's own change and never sent it: the
/// client kept the negative entry, ENOENT on a file the host had just put
/// there. (ext4 reusing a freed inode number at once makes a new file at
/// the name look the same: the flake under load.)
#[test]
fn a_file_the_host_moves_away_and_back_is_seen_back_over_9p() {
    let tmp = tempfile::tempdir().expect("tmp");
    let export = tmp.path().join("export");
    std::fs::create_dir(&export).expect("mkdir");
    let sock = tmp.path().join("sock");
    let _server = common::serve(&export, &sock);
    let c = vfs(&format!("unix:{}", sock.display()), "cache=coherent");
    // Reports flowing (the server notes the client's changes from then
    // on): a host change seen by the client.
    assert_eq!(
        c.fstatat(AT_FDCWD, b"/warm", 0).err(),
        Some(walkfs_vfs::Errno::ENOENT)
    );
    std::fs::write(export.join("warm"), b"w").expect("write");
    settle("reports flowing", || {
        c.fstatat(AT_FDCWD, b"/warm", 0).is_ok()
    });
    c.mkdirat(AT_FDCWD, b"/d", 0o755).expect("mkdir");
    let fd = c
        .openat(AT_FDCWD, b"/d/f", libc::O_CREAT | libc::O_WRONLY, 0o644)
        .expect("create");
    c.write(fd, b"made by the client\n").expect("write");
    c.close(fd).expect("close");
    settle("the client's file on the host", || {
        export.join("d/f").exists()
    });
    std::fs::rename(export.join("d/f"), export.join("d/g")).expect("rename away");
    settle("the name seen gone", || {
        c.fstatat(AT_FDCWD, b"/d/f", 0) == Err(walkfs_vfs::Errno::ENOENT)
    });
    std::fs::rename(export.join("d/g"), export.join("d/f")).expect("rename back");
    settle("the file seen back", || {
        c.fstatat(AT_FDCWD, b"/d/f", 0).is_ok()
    });
}
