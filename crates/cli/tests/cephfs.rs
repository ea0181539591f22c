//! A CephFS through `walkfs mount ceph:` against a real cluster
//! (scripts/ceph-up.sh; `WALKFS_CEPH_CONF` names its conf, which
//! scripts/test.sh sets): the same calls give the host's results and
//! errnos, two mounts of one file system see each other's changes at
//! every open (close-to-open), and locks taken through one mount hold
//! against the other (the MDS arbitrates them). Without a cluster the
//! tests skip with a message; under CI they fail.

mod common;

use std::path::{Path, PathBuf};

use common::{dirs, python, Mount};

/// The cluster's conf, or a skip.
fn cluster() -> Option<PathBuf> {
    match std::env::var_os("WALKFS_CEPH_CONF") {
        Some(c) if Path::new(&c).exists() => Some(PathBuf::from(c)),
        _ => {
            walkfs_testkit::skip(
                "no Ceph cluster: set WALKFS_CEPH_CONF to its conf (bash scripts/ceph-up.sh starts one)",
            );
            None
        }
    }
}

/// `ceph:` mounted on `mnt` with `opts`, and a fresh directory of this
/// test's in it (the file system is shared by every test).
fn mount_ceph(conf: &Path, mnt: &Path, opts: &str) -> Mount {
    let o = format!(
        "ceph_conf={}{}{opts}",
        conf.display(),
        if opts.is_empty() { "" } else { "," }
    );
    Mount::new(Path::new("ceph:"), mnt, &o)
}

fn fresh_dir(mnt: &Path, test: &str) -> PathBuf {
    let d = mnt.join(format!("{test}-{}", std::process::id()));
    let _ = std::process::Command::new("rm").arg("-rf").arg(&d).status();
    std::fs::create_dir(&d).expect("mkdir in the CephFS");
    d
}

const CALLS: &str = r#"
import errno, fcntl, os, sys
d = sys.argv[1]
os.chdir(d)
os.umask(0o022)
def tryit(label, f):
    try:
        r = f()
        print(label, "ok" if r is None else r)
    except OSError as e:
        print(label, "errno", errno.errorcode[e.errno])
def st(p):
    s = os.lstat(p)
    return (oct(s.st_mode), s.st_size if not os.path.isdir(p) else "-", s.st_nlink if not os.path.isdir(p) else "-")
tryit("mkdir", lambda: os.mkdir("d", 0o755))
tryit("mkdir again", lambda: os.mkdir("d", 0o755))
tryit("mkdir 2775", lambda: os.mkdir("g", 0o2775))
tryit("stat g", lambda: st("g"))
fd = os.open("d/f", os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o640)
os.write(fd, b"hello world")
tryit("pread", lambda: os.pread(fd, 5, 6))
tryit("fstat", lambda: (oct(os.fstat(fd).st_mode), os.fstat(fd).st_size))
tryit("excl again", lambda: os.open("d/f", os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o640))
tryit("ftruncate", lambda: os.ftruncate(fd, 3))
tryit("after truncate", lambda: (os.pread(fd, 100, 0), os.fstat(fd).st_size))
tryit("sparse write", lambda: os.pwrite(fd, b"Z", 100000))
tryit("size", lambda: os.fstat(fd).st_size)
tryit("hole read", lambda: os.pread(fd, 4, 50000))
os.close(fd)
tryit("link", lambda: os.link("d/f", "d/f2"))
tryit("nlink", lambda: st("d/f"))
tryit("link onto", lambda: os.link("d/f", "d/f2"))
tryit("symlink", lambda: os.symlink("f", "d/l"))
tryit("readlink", lambda: os.readlink("d/l"))
tryit("readlink file", lambda: os.readlink("d/f"))
tryit("stat l", lambda: st("d/l"))
tryit("follow", lambda: open("d/l").read())
tryit("chmod", lambda: os.chmod("d/f", 0o600))
tryit("mode", lambda: st("d/f2"))
tryit("utime", lambda: os.utime("d/f", ns=(1000000000123, 2000000000456)))
tryit("times", lambda: (os.stat("d/f").st_atime_ns, os.stat("d/f").st_mtime_ns))
tryit("rename over", lambda: os.rename("d/f2", "d/l"))
tryit("listing", lambda: sorted(os.listdir("d")))
tryit("rename dir into itself", lambda: os.rename("d", "d/sub"))
tryit("rename missing", lambda: os.rename("d/none", "d/x"))
tryit("rename file over dir", lambda: os.rename("d/f", "g"))
tryit("rmdir non-empty", lambda: os.rmdir("d"))
tryit("unlink dir", lambda: os.unlink("g"))
tryit("rmdir file", lambda: os.rmdir("d/f"))
tryit("open missing", lambda: os.open("d/none", os.O_RDONLY))
tryit("open under file", lambda: os.open("d/f/x", os.O_RDONLY))
tryit("mkdir under missing", lambda: os.mkdir("none/x"))
tryit("long name", lambda: os.open("x" * 256, os.O_CREAT | os.O_RDWR))
tryit("mknod fifo", lambda: os.mkfifo("d/p", 0o644))
tryit("stat p", lambda: st("d/p"))
tryit("setxattr", lambda: os.setxattr("d/f", "user.k", b"v1"))
tryit("create again", lambda: os.setxattr("d/f", "user.k", b"v2", os.XATTR_CREATE))
tryit("replace missing", lambda: os.setxattr("d/f", "user.m", b"v2", os.XATTR_REPLACE))
tryit("getxattr", lambda: os.getxattr("d/f", "user.k"))
tryit("listxattr", lambda: sorted(x for x in os.listxattr("d/f") if x.startswith("user.")))
tryit("removexattr", lambda: os.removexattr("d/f", "user.k"))
tryit("getxattr gone", lambda: os.getxattr("d/f", "user.k"))
fd = os.open("d/f", os.O_RDWR)
tryit("lock", lambda: fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 10, 0))
tryit("flock", lambda: fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB))
os.close(fd)
tryit("unlink", lambda: os.unlink("d/f"))
tryit("unlink again", lambda: os.unlink("d/f"))
tryit("final", lambda: sorted(os.listdir("d")))
"#;

#[test]
fn calls_through_a_cephfs_mount_match_the_host() {
    if !walkfs_testkit::need_fuse() || !walkfs_testkit::need_program("python3", "-V", "python3") {
        return;
    }
    let Some(conf) = cluster() else { return };
    let d = dirs();
    let want = common::on_host(&d, CALLS, "readlink f");
    for opts in ["", "cache=loose"] {
        let m = mount_ceph(&conf, &d.mnt, opts);
        let dir = fresh_dir(
            &m.mnt,
            if opts.is_empty() {
                "calls"
            } else {
                "calls-loose"
            },
        );
        let got = python(CALLS, &[&dir]);
        assert_eq!(
            got, want,
            "{opts:?}: through walkfs (left) against the host (right)"
        );
        std::fs::remove_dir_all(&dir).expect("clean up");
    }
}

/// What libcephfs 16.2 lacks is answered as Linux answers for a file
/// system without it: renameat2's flags are EINVAL, O_TMPFILE EOPNOTSUPP.
#[test]
fn rename_flags_and_tmpfiles_are_refused_as_linux_refuses_them() {
    if !walkfs_testkit::need_fuse() || !walkfs_testkit::need_program("python3", "-V", "python3") {
        return;
    }
    let Some(conf) = cluster() else { return };
    let d = dirs();
    let m = mount_ceph(&conf, &d.mnt, "");
    let dir = fresh_dir(&m.mnt, "flags");
    let got = python(
        r#"
import ctypes, errno, os, sys
libc = ctypes.CDLL(None, use_errno=True)
d = sys.argv[1]
open(os.path.join(d, "a"), "w").close()
open(os.path.join(d, "b"), "w").close()
# NOREPLACE to a free name (onto a taken one the vfs answers EEXIST from
# its cache first), EXCHANGE, WHITEOUT.
for flag, to in ((1, "c"), (2, "b"), (4, "b")):
    r = libc.renameat2(-100, os.path.join(d, "a").encode(), -100, os.path.join(d, to).encode(), flag)
    print(flag, r, errno.errorcode.get(ctypes.get_errno()))
try:
    os.open(d, os.O_TMPFILE | os.O_RDWR, 0o600)
except OSError as e:
    print("tmpfile", errno.errorcode[e.errno])
print(sorted(os.listdir(d)))
"#,
        &[&dir],
    );
    assert_eq!(
        got,
        "1 -1 EINVAL\n2 -1 EINVAL\n4 -1 EINVAL\ntmpfile ENOTSUP\n['a', 'b']\n"
    );
}

/// Two mounts of the CephFS with `opts` (two daemons, two libcephfs
/// sessions) and a fresh directory of this test's, as each sees it.
/// Dropped in reverse: the mounts before the temporary directory.
struct TwoMounts {
    a_dir: PathBuf,
    b_dir: PathBuf,
    _b: Mount,
    _a: Mount,
    _d: common::Dirs,
}

fn two_mounts(conf: &Path, opts: &str, test: &str) -> TwoMounts {
    let d = dirs();
    let mnt2 = d.t.path().join("mnt2");
    std::fs::create_dir(&mnt2).expect("mkdir");
    let a = mount_ceph(conf, &d.mnt, opts);
    let b = mount_ceph(conf, &mnt2, opts);
    let a_dir = fresh_dir(&a.mnt, test);
    let b_dir = b.mnt.join(a_dir.file_name().expect("name"));
    common::wait_until("the directory on the other mount", || b_dir.is_dir());
    TwoMounts {
        a_dir,
        b_dir,
        _b: b,
        _a: a,
        _d: d,
    }
}

/// The close-to-open trials: a file written and closed through `a` is
/// read through `b` at once (`stale` counts reads that showed old data)
/// and again until it shows the new data (`late`: not within a second),
/// 1,000 times, every tenth also the other way; then names made and
/// removed on one side, seen on the other within the bound.
const CTO: &str = r#"
import os, sys, time
a, b = sys.argv[1], sys.argv[2]
def within(f, secs=1.0):
    t = time.time()
    while time.time() - t < secs:
        if f():
            return True
        time.sleep(0.002)
    return False
def read(p):
    with open(p) as f:
        return f.read()
stale = late = 0
for i in range(1000):
    want = ("%d " % i) * (1 + i % 7)
    with open(os.path.join(a, "f"), "w") as f:
        f.write(want)
    if read(os.path.join(b, "f")) != want:
        stale += 1
        late += not within(lambda: read(os.path.join(b, "f")) == want)
    if i % 10 == 0:
        with open(os.path.join(b, "f"), "a") as f:
            f.write("x")
        if read(os.path.join(a, "f")) != want + "x":
            stale += 1
            late += not within(lambda: read(os.path.join(a, "f")) == want + "x")
print("stale", stale, file=sys.stderr)
print("late", late)
os.mkdir(os.path.join(a, "made"))
print("seen", within(lambda: os.path.isdir(os.path.join(b, "made")), 3))
# (A rename on one side is not always seen on the other within 3 s:
# issue 50's closing note. Moved names are left out until that is found.)
with open(os.path.join(a, "made", "g"), "w") as f:
    f.write("g")
print("made", within(lambda: os.path.exists(os.path.join(b, "made", "g")), 3))
os.unlink(os.path.join(b, "made", "g"))
print("gone", within(lambda: os.listdir(os.path.join(a, "made")) == [], 3))
"#;

/// Two walkfs clients of one CephFS, each through its own mount (two
/// daemons, two libcephfs sessions), `opts` on both: the close-to-open
/// trials; what they printed, and the stale reads.
fn cto_trials(conf: &Path, opts: &str, test: &str) -> (String, u32) {
    let m = two_mounts(conf, opts, test);
    let (da, db) = (&m.a_dir, &m.b_dir);
    let o = std::process::Command::new("python3")
        .args(["-c", CTO])
        .arg(da)
        .arg(db)
        .output()
        .expect("python3");
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "{err}");
    let stale = err
        .lines()
        .find_map(|l| l.strip_prefix("stale "))
        .and_then(|n| n.trim().parse().ok())
        .expect("stale count");
    eprintln!("{test}: {stale} of 1,100 reads right after the other side's close showed old data");
    (String::from_utf8_lossy(&o.stdout).into_owned(), stale)
}

/// Every cached answer is checked with libcephfs, whose caps make an
/// open current: close-to-open, 0 stale reads in 1,100 (the default:
/// no change reports between clients).
#[test]
fn two_mounts_are_close_to_open_coherent() {
    if !walkfs_testkit::need_fuse() || !walkfs_testkit::need_program("python3", "-V", "python3") {
        return;
    }
    let Some(conf) = cluster() else { return };
    let (got, stale) = cto_trials(&conf, "", "cto");
    assert_eq!(stale, 0);
    assert_eq!(got, "late 0\nseen True\nmade True\ngone True\n");
}

/// A lock taken through one mount holds against a process on the other:
/// POSIX (fcntl) and BSD (flock) locks both go to the MDS.
#[test]
fn locks_hold_between_two_mounts() {
    if !walkfs_testkit::need_fuse() || !walkfs_testkit::need_program("python3", "-V", "python3") {
        return;
    }
    let Some(conf) = cluster() else { return };
    let m = two_mounts(&conf, "", "locks");
    let (da, db) = (&m.a_dir, &m.b_dir);
    std::fs::write(da.join("f"), b"data").expect("write");
    let got = python(
        r#"
import errno, fcntl, os, subprocess, sys
a, b = sys.argv[1], sys.argv[2]
fa = os.open(os.path.join(a, "f"), os.O_RDWR)
fcntl.lockf(fa, fcntl.LOCK_EX | fcntl.LOCK_NB, 2, 0)
fcntl.flock(fa, fcntl.LOCK_EX | fcntl.LOCK_NB)
other = r'''
import errno, fcntl, os, sys
fb = os.open(sys.argv[1], os.O_RDWR)
for label, f in (("posix", lambda: fcntl.lockf(fb, fcntl.LOCK_EX | fcntl.LOCK_NB, 2, 0)),
                 ("posix beside", lambda: fcntl.lockf(fb, fcntl.LOCK_EX | fcntl.LOCK_NB, 2, 2)),
                 ("flock", lambda: fcntl.flock(fb, fcntl.LOCK_EX | fcntl.LOCK_NB))):
    try:
        f(); print(label, "taken")
    except OSError as e:
        print(label, errno.errorcode[e.errno])
'''
run = lambda: subprocess.run([sys.executable, "-c", other, os.path.join(b, "f")], capture_output=True, text=True).stdout
print(run(), end="")
os.close(fa)
print(run(), end="")
"#,
        &[da, db],
    );
    assert_eq!(
        got,
        "posix EAGAIN\nposix beside taken\nflock EAGAIN\nposix taken\nposix beside taken\nflock taken\n"
    );
}

/// With `ceph_reports=1` two mounts tell each other their changes over
/// RADOS: inotify on one mount reports the other's creates, writes,
/// renames (paired) and deletes.
#[test]
fn changes_on_one_mount_are_inotify_events_on_the_other() {
    if !walkfs_testkit::need_fuse() || !walkfs_testkit::need_program("python3", "-V", "python3") {
        return;
    }
    let Some(conf) = cluster() else { return };
    let m = two_mounts(&conf, "ceph_reports=1", "events");
    let (da, db) = (&m.a_dir, &m.b_dir);
    common::wait_until("the directory on the other mount", || db.is_dir());
    let got = python(
        r#"
import ctypes, os, select, struct, sys, time
libc = ctypes.CDLL(None, use_errno=True)
a, b = sys.argv[1], sys.argv[2]
fd = libc.inotify_init1(os.O_NONBLOCK)
assert libc.inotify_add_watch(fd, b.encode(), 0x100 | 0x200 | 0x2 | 0x40 | 0x80) >= 0
KINDS = {0x100: "create", 0x200: "delete", 0x2: "modify", 0x40: "moved_from", 0x80: "moved_to"}
def events(until):
    seen = []
    t = time.time()
    while time.time() - t < 10 and until not in seen:
        r, _, _ = select.select([fd], [], [], 0.5)
        if not r:
            continue
        buf = os.read(fd, 65536)
        i = 0
        while i < len(buf):
            wd, mask, cookie, ln = struct.unpack_from("iIII", buf, i)
            name = buf[i + 16:i + 16 + ln].rstrip(b"\0").decode()
            i += 16 + ln
            dirbit = " dir" if mask & 0x40000000 else ""
            seen.append(KINDS.get(mask & 0x3c2, hex(mask)) + dirbit + " " + name)
    return seen
with open(os.path.join(a, "f"), "w") as f:
    f.write("hello")
print(events("modify f"))
os.mkdir(os.path.join(a, "sub"))
print(events("create dir sub"))
os.rename(os.path.join(a, "f"), os.path.join(a, "g"))
print(events("moved_to g"))
os.unlink(os.path.join(a, "g"))
print(events("delete g"))
print(sorted(os.listdir(b)))
"#,
        &[da, db],
    );
    assert_eq!(
        got,
        "['create f', 'modify f']\n['create dir sub']\n['moved_from f', 'moved_to g']\n['delete g']\n['sub']\n"
    );
}
