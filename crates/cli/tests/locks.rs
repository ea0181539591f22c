//! File locks every party honours: a lock held on the host excludes the
//! mount's programs and the other way round, through a local mount (the
//! default options), through a mount of a `walkfs serve`, and between
//! two clients of one server; and SQLite writers on both sides lose no
//! update. Also: a mount with no `cache=` is coherent (a host rename is
//! seen).

mod common;

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{dirs, serve, Mount};

fn open_rw(p: &Path) -> File {
    OpenOptions::new()
        .read(true)
        .write(true)
        .open(p)
        .unwrap_or_else(|e| panic!("open {}: {e}", p.display()))
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// `fcntl(cmd)` with a write or read lock (or an unlock) of the whole
/// file: 0 or the errno.
fn fcntl_lock(f: &File, cmd: i32, ty: i32) -> i32 {
    // SAFETY: plain data, zero is valid.
    let mut l: libc::flock = unsafe { std::mem::zeroed() };
    l.l_type = ty as i16;
    l.l_whence = libc::SEEK_SET as i16;
    // SAFETY: fcntl reads (or fills) the struct we own.
    if unsafe { libc::fcntl(f.as_raw_fd(), cmd, &mut l) } < 0 {
        errno()
    } else {
        0
    }
}

/// `F_OFD_GETLK` for a write lock: the type of the lock in the way.
fn ofd_getlk(f: &File) -> i32 {
    // SAFETY: plain data, zero is valid.
    let mut l: libc::flock = unsafe { std::mem::zeroed() };
    l.l_type = libc::F_WRLCK as i16;
    l.l_whence = libc::SEEK_SET as i16;
    // SAFETY: fcntl fills the struct we own.
    let r = unsafe { libc::fcntl(f.as_raw_fd(), libc::F_OFD_GETLK, &mut l) };
    assert_eq!(r, 0, "F_OFD_GETLK: {}", errno());
    i32::from(l.l_type)
}

fn flock(f: &File, op: i32) -> i32 {
    // SAFETY: flock on a descriptor we own.
    if unsafe { libc::flock(f.as_raw_fd(), op) } < 0 {
        errno()
    } else {
        0
    }
}

/// Every kind of lock held through `a` keeps `b` out, and is `b`'s once
/// let go; a blocking waiter on `b` gets it when `a` lets go, and loses
/// it when it closes the file.
fn exclude(a: &Path, b: &Path, what: &str) {
    let (fa, fb) = (open_rw(a), open_rw(b));
    // OFD locks (what fcntl record locks become through the mount).
    assert_eq!(
        fcntl_lock(&fa, libc::F_OFD_SETLK, libc::F_WRLCK),
        0,
        "{what}"
    );
    assert_eq!(
        fcntl_lock(&fb, libc::F_OFD_SETLK, libc::F_RDLCK),
        libc::EAGAIN,
        "{what}: an OFD read lock beside a write lock"
    );
    // A process's own record lock conflicts with an OFD lock too.
    assert_eq!(
        fcntl_lock(&fb, libc::F_SETLK, libc::F_WRLCK),
        libc::EAGAIN,
        "{what}: a process's record lock"
    );
    assert_eq!(ofd_getlk(&fb), libc::F_WRLCK, "{what}: F_GETLK shows it");
    assert_eq!(fcntl_lock(&fa, libc::F_OFD_SETLK, libc::F_UNLCK), 0);
    assert_eq!(ofd_getlk(&fb), libc::F_UNLCK, "{what}: gone once unlocked");
    assert_eq!(
        fcntl_lock(&fb, libc::F_OFD_SETLK, libc::F_WRLCK),
        0,
        "{what}"
    );
    assert_eq!(fcntl_lock(&fb, libc::F_OFD_SETLK, libc::F_UNLCK), 0);

    // flock.
    assert_eq!(flock(&fa, libc::LOCK_EX), 0, "{what}");
    assert_eq!(
        flock(&fb, libc::LOCK_SH | libc::LOCK_NB),
        libc::EWOULDBLOCK,
        "{what}: flock beside flock"
    );
    // A blocking waiter is granted the lock once the holder lets go.
    let t0 = Instant::now();
    std::thread::scope(|s| {
        let w = s.spawn(|| flock(&fb, libc::LOCK_EX));
        std::thread::sleep(Duration::from_millis(300));
        assert!(!w.is_finished(), "{what}: a waiter granted a held lock");
        assert_eq!(flock(&fa, libc::LOCK_UN), 0);
        assert_eq!(w.join().expect("waiter"), 0, "{what}: the waiter");
    });
    assert!(t0.elapsed() < Duration::from_secs(5));
    // A closed file's locks go with it (through FUSE at its RELEASE,
    // which close(2) does not wait for).
    drop(fb);
    common::wait_until(&format!("{what}: the closed file's flock gone"), || {
        flock(&fa, libc::LOCK_EX | libc::LOCK_NB) == 0
    });
}

/// A `walkfs serve` of `d.src` and two mounts of it, default options:
/// `d.mnt` and the returned directory.
fn two_clients(d: &common::Dirs) -> (common::Kill, Mount, Mount, std::path::PathBuf) {
    let server = serve(&d.src, &d.sock);
    let addr = format!("unix:{}", d.sock.display());
    let mnt2 = d.t.path().join("mnt2");
    std::fs::create_dir(&mnt2).expect("mkdir");
    let a = Mount::new(Path::new(&addr), &d.mnt, "");
    let b = Mount::new(Path::new(&addr), &mnt2, "");
    (server, a, b, mnt2)
}

#[test]
fn locks_on_the_host_and_on_a_local_mount_exclude_each_other() {
    if !walkfs_testkit::need_fuse() {
        return;
    }
    let d = dirs();
    std::fs::write(d.src.join("f"), b"x").expect("write");
    let _m = Mount::new(&d.src, &d.mnt, "");
    exclude(&d.src.join("f"), &d.mnt.join("f"), "host, then mount");
    exclude(&d.mnt.join("f"), &d.src.join("f"), "mount, then host");
}

#[test]
fn locks_on_the_host_on_a_served_mount_and_between_two_clients() {
    if !walkfs_testkit::need_fuse() {
        return;
    }
    let d = dirs();
    std::fs::write(d.src.join("f"), b"x").expect("write");
    let (_server, _a, _b, mnt2) = two_clients(&d);
    exclude(&d.src.join("f"), &d.mnt.join("f"), "host, then client");
    exclude(&d.mnt.join("f"), &d.src.join("f"), "client, then host");
    exclude(&d.mnt.join("f"), &mnt2.join("f"), "client, then client");
}

/// Two SQLite writers, one on each side, each doing `n` increments in
/// `BEGIN IMMEDIATE` transactions: the counter must end at `2n` and
/// the database pass its integrity check.
fn sqlite_writers(a: &Path, b: &Path, n: u32) {
    let o = sqlite_writers_cmd(a, b, n).output().expect("python3");
    sqlite_result(&o, n);
}

/// The two writers' program: `a` made, then each path written `n` times.
fn sqlite_writers_cmd(a: &Path, b: &Path, n: u32) -> Command {
    let script = r#"
import sqlite3, sys, time, multiprocessing as mp
def writer(path, n):
    c = sqlite3.connect(path, timeout=120, isolation_level=None)
    for i in range(n):
        while True:
            try:
                c.execute('BEGIN IMMEDIATE'); c.execute('UPDATE c SET n = n + 1'); c.execute('COMMIT'); break
            except sqlite3.OperationalError as e:
                print('retry', path, e, file=sys.stderr)
                try: c.execute('ROLLBACK')
                except Exception: pass
                time.sleep(0.01)
a, b, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
c = sqlite3.connect(a); c.execute('CREATE TABLE c(n)'); c.execute('INSERT INTO c VALUES(0)'); c.commit(); c.close()
ps = [mp.Process(target=writer, args=(p, n)) for p in (a, b)]
[p.start() for p in ps]; [p.join() for p in ps]
c = sqlite3.connect(a)
print(c.execute('SELECT n FROM c').fetchone()[0], c.execute('PRAGMA integrity_check').fetchone()[0])
"#;
    let mut c = Command::new("python3");
    c.args(["-c", script]).arg(a).arg(b).arg(n.to_string());
    c
}

/// The counter ends at `2 * n` and the database is whole.
fn sqlite_result(o: &std::process::Output, n: u32) {
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(
        out.trim(),
        format!("{} ok", 2 * n),
        "lost updates or a damaged database; stderr: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

#[test]
fn sqlite_writers_on_the_host_and_on_the_mount_lose_no_update() {
    if !walkfs_testkit::need_fuse() || !walkfs_testkit::need_program("python3", "-V", "python3") {
        return;
    }
    let d = dirs();
    let _m = Mount::new(&d.src, &d.mnt, "");
    sqlite_writers(&d.src.join("db"), &d.mnt.join("db"), 500);
    sqlite_writers(&d.mnt.join("db2"), &d.src.join("db2"), 500);
}

/// Two SQLite writers on two clients of one server. This failed about one
/// run in seven before lock grants waited for the change reports queued
/// before them (docs/locks.md, "A grant shows the holder's changes"):
/// SQLite looked for a hot journal right after locking, found the other
/// side's deleted one still cached, and rolled it back.
#[test]
fn sqlite_writers_on_two_clients_of_one_server_lose_no_update() {
    if !walkfs_testkit::need_fuse() || !walkfs_testkit::need_program("python3", "-V", "python3") {
        return;
    }
    let d = dirs();
    let (_server, _a, _b, mnt2) = two_clients(&d);
    sqlite_writers(&d.mnt.join("db"), &mnt2.join("db"), 300);
    sqlite_writers(&d.src.join("db2"), &d.mnt.join("db2"), 300);
}

#[test]
fn a_mount_without_cache_option_sees_the_hosts_renames() {
    if !walkfs_testkit::need_fuse() {
        return;
    }
    let d = dirs();
    std::fs::write(d.src.join("old"), b"x").expect("write");
    let _m = Mount::new(&d.src, &d.mnt, "");
    assert_eq!(std::fs::read(d.mnt.join("old")).expect("read"), b"x");
    std::fs::rename(d.src.join("old"), d.src.join("new")).expect("rename");
    std::fs::write(d.src.join("made"), b"y").expect("write");
    common::wait_until("the host's rename and create seen", || {
        let mut names: Vec<String> = std::fs::read_dir(&d.mnt)
            .map(|r| {
                r.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names == ["made", "new"]
    });
}

/// `cargo build` on the host and on the mount at once, in one target
/// directory: the second waits for the first's build-directory lock, as
/// on one machine ("Blocking waiting for file lock"), and both finish.
#[test]
fn cargo_on_both_sides_waits_for_the_others_build_lock() {
    if !walkfs_testkit::need_fuse() || !walkfs_testkit::need_program("cargo", "--version", "cargo")
    {
        return;
    }
    let d = dirs();
    let krate = d.src.join("k");
    std::fs::create_dir_all(krate.join("src")).expect("mkdir");
    std::fs::write(
        krate.join("Cargo.toml"),
        "[package]\nname = \"k\"\nversion = \"0.1.0\"\nedition = \"2021\"\nbuild = \"build.rs\"\n",
    )
    .expect("toml");
    // The build script holds the build going for a while, the lock held.
    std::fs::write(
        krate.join("build.rs"),
        "fn main() { std::thread::sleep(std::time::Duration::from_secs(3)); }\n",
    )
    .expect("build.rs");
    std::fs::write(krate.join("src/main.rs"), "fn main() {}\n").expect("main");
    let _m = Mount::new(&d.src, &d.mnt, "");
    let cargo = |dir: &Path| {
        Command::new("cargo")
            .args(["build", "--offline"])
            .current_dir(dir)
            .env("CARGO_TARGET_DIR", dir.join("target"))
            .env_remove("CARGO_BUILD_JOBS")
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("cargo")
    };
    let host = cargo(&krate);
    // The host's cargo has taken its lock (its target directory exists).
    let t0 = Instant::now();
    while !krate.join("target/debug/.cargo-lock").exists() {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "host cargo never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let mount = cargo(&d.mnt.join("k"));
    let (h, m) = (
        host.wait_with_output().expect("host cargo"),
        mount.wait_with_output().expect("mount cargo"),
    );
    assert!(h.status.success() && m.status.success(), "{h:?} {m:?}");
    let waited = String::from_utf8_lossy(&m.stderr);
    assert!(
        // (cargo's words for its target directory's lock: "build
        // directory", lately "artifact directory"; not the package cache.)
        waited.contains("file lock on build directory")
            || waited.contains("file lock on artifact directory"),
        "the mount's cargo did not wait for the host's: {waited}"
    );
}

/// Two SQLite writers on two clients of one server, the server killed
/// (SIGKILL) and restarted in the middle: the clients reconnect, the one
/// that held the lock reclaims it in the restarted server's grace time
/// (the other waits), and no update is lost (docs/locks.md, "A server
/// restart"). Ignored for CI: in one CI run of several, SQLite saw a
/// "disk I/O error" across the restart after its COMMIT had landed, the
/// program's retry then counted it twice (601 of 600); where the EIO
/// comes from is not yet found. Run with `--ignored`.
#[test]
#[ignore = "one run in several: an EIO across the restart after a COMMIT landed (counted twice)"]
fn sqlite_writers_on_two_clients_ride_through_a_server_restart() {
    if !walkfs_testkit::need_fuse() || !walkfs_testkit::need_program("python3", "-V", "python3") {
        return;
    }
    let d = dirs();
    let state = d.t.path().join("state");
    let state_arg = state.to_str().expect("utf-8");
    let mut server = common::serve_with(&d.src, &d.sock, &["--state-dir", state_arg]);
    // The restarted server, dropped after the mounts.
    let mut restarted = Vec::new();
    let addr = format!("unix:{}", d.sock.display());
    let mnt2 = d.t.path().join("mnt2");
    std::fs::create_dir(&mnt2).expect("mkdir");
    let _a = Mount::new(Path::new(&addr), &d.mnt, "");
    let _b = Mount::new(Path::new(&addr), &mnt2, "");
    let n = 300;
    let run = sqlite_writers_cmd(&d.mnt.join("db"), &mnt2.join("db"), n)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("python3");
    std::thread::sleep(std::time::Duration::from_millis(1500));
    server.0.kill().expect("kill -9 the server");
    let _ = server.0.wait();
    std::thread::sleep(std::time::Duration::from_millis(200));
    restarted.push(common::serve_with(
        &d.src,
        &d.sock,
        &["--state-dir", state_arg],
    ));
    let o = run.wait_with_output().expect("python3");
    sqlite_result(&o, n);
}

/// A lock that cannot be reclaimed after a restart (a host program took
/// it while the server was down) is not silently gone: its holder's next
/// I/O and lock call on that file fail with EIO (docs/locks.md).
#[test]
fn a_lock_taken_by_another_while_the_server_was_down_fails_its_holder() {
    if !walkfs_testkit::need_fuse() || !walkfs_testkit::need_program("python3", "-V", "python3") {
        return;
    }
    use std::io::{BufRead, Write};
    let d = dirs();
    std::fs::write(d.src.join("f"), b"data").expect("write");
    let state = d.t.path().join("state");
    let state_arg = state.to_str().expect("utf-8");
    let mut server = common::serve_with(&d.src, &d.sock, &["--state-dir", state_arg]);
    let mut restarted = Vec::new();
    let addr = format!("unix:{}", d.sock.display());
    let _m = Mount::new(Path::new(&addr), &d.mnt, "");
    let prog = r#"
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
print("locked", flush=True)
sys.stdin.readline()
for what, call in (("read", lambda: os.pread(fd, 1, 0)),
                   ("lock", lambda: fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB))):
    try:
        call(); print(what, "ok", flush=True)
    except OSError as e:
        print(what, e.errno, flush=True)
"#;
    let mut holder = Command::new("python3")
        .args(["-c", prog])
        .arg(d.mnt.join("f"))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3");
    let mut out = std::io::BufReader::new(holder.stdout.take().expect("stdout"));
    let mut line = String::new();
    out.read_line(&mut line).expect("read");
    assert_eq!(line.trim(), "locked");
    server.0.kill().expect("kill -9 the server");
    let _ = server.0.wait();
    // The host's own program takes the lock the server's death released.
    let taker = r#"
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR)
fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
print("taken", flush=True)
sys.stdin.readline()
"#;
    let mut other = Command::new("python3")
        .args(["-c", taker])
        .arg(d.src.join("f"))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3");
    let mut oout = std::io::BufReader::new(other.stdout.take().expect("stdout"));
    let mut l2 = String::new();
    oout.read_line(&mut l2).expect("read");
    assert_eq!(l2.trim(), "taken");
    restarted.push(common::serve_with(
        &d.src,
        &d.sock,
        &["--state-dir", state_arg],
    ));
    // The mount reconnects at its next call.
    common::wait_until("the mount reconnected", || {
        std::fs::metadata(d.mnt.join("f")).is_ok()
    });
    let mut stdin = holder.stdin.take().expect("stdin");
    writeln!(stdin).expect("write");
    let mut got = Vec::new();
    for _ in 0..2 {
        let mut l = String::new();
        out.read_line(&mut l).expect("read");
        got.push(l.trim().to_string());
    }
    assert_eq!(
        got,
        [format!("read {}", libc::EIO), format!("lock {}", libc::EIO)]
    );
    drop(stdin);
    let _ = holder.wait();
    drop(other.stdin.take());
    let _ = other.wait();
}
