//! walkfs's 9P client and server against each other and against real
//! peers: Debian's `diod` server and its `diodls`/`diodcat` clients
//! (installed by scripts/test.sh). Every answer through 9P is compared
//! with the same call on the host directory.

use std::io::Write;
use std::net::TcpListener;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use walkfs_p9::{Addr, Fcall, Names, Str, NOFID};
use walkfs_server::{Config, Server};
use walkfs_source::SourceOptions;
use walkfs_vfs::{Creds, Ctx, Errno, AT_FDCWD};

mod common;
use common::*;

fn host_errno(r: std::io::Result<impl Sized>) -> Option<i32> {
    r.err().map(|e| e.raw_os_error().unwrap_or(0))
}

/// The operations of the issue through a walkfs client, each compared
/// with the host: attach, walk, getattr, readlink, read, readdir, create,
/// write, mkdir, rename, unlink.
fn exercise(c: &Ctx, host: &Path) {
    // getattr / walk
    let st = c
        .fstatat(AT_FDCWD, b"/usr/lib/gcc/crtendS.o", 0)
        .expect("stat");
    let hm = std::fs::metadata(host.join("usr/lib/gcc/crtendS.o")).expect("host stat");
    assert_eq!(st.st_size as u64, hm.len());
    assert_eq!(st.st_mode, hm.mode());
    assert_eq!(st.st_ino, hm.ino());
    // walk through a relative symlink, and an absolute one stays inside
    let st = c.fstatat(AT_FDCWD, b"/rel", 0).expect("stat via symlink");
    assert_eq!(st.st_ino, hm.ino());
    assert_eq!(
        c.fstatat(AT_FDCWD, b"/abs", 0).err(),
        Some(Errno::ENOENT),
        "an absolute symlink resolves inside the export"
    );
    let st = c
        .fstatat(AT_FDCWD, b"/usr/up", 0)
        .expect("dotdot clamps at the root");
    assert_eq!(
        st.st_ino,
        std::fs::metadata(host.join("usr")).expect("usr").ino()
    );
    // readlink
    assert_eq!(
        c.readlinkat(AT_FDCWD, b"/rel").expect("readlink"),
        b"usr/lib/gcc/crtendS.o"
    );
    assert_eq!(
        c.readlinkat(AT_FDCWD, b"/abs").expect("readlink"),
        b"/etc/passwd"
    );
    // errnos as the host gives them
    for p in ["nope", "hello.txt/x", "usr/nope/x"] {
        let want = host_errno(std::fs::metadata(host.join(p)));
        let got = c
            .fstatat(AT_FDCWD, format!("/{p}").as_bytes(), 0)
            .err()
            .map(|e| e.0);
        assert_eq!(got, want, "stat {p}");
    }
    // read
    let fd = c
        .openat(AT_FDCWD, b"/hello.txt", libc::O_RDONLY, 0)
        .expect("open");
    let mut buf = [0u8; 64];
    let n = c.read(fd, &mut buf).expect("read");
    assert_eq!(&buf[..n], b"hello, 9p\n");
    c.close(fd).expect("close");
    // readdir
    let fd = c
        .openat(AT_FDCWD, b"/", libc::O_RDONLY | libc::O_DIRECTORY, 0)
        .expect("opendir");
    let mut names: Vec<Vec<u8>> = c
        .getdents(fd)
        .expect("getdents")
        .into_iter()
        .map(|e| e.name)
        .filter(|n| n != b"." && n != b"..")
        .collect();
    names.sort();
    c.close(fd).expect("close");
    let mut want: Vec<Vec<u8>> = std::fs::read_dir(host)
        .expect("read_dir")
        .map(|e| e.expect("entry").file_name().into_encoded_bytes())
        .collect();
    want.sort();
    assert_eq!(names, want);
    // create + write, then the host sees it
    let fd = c
        .openat(
            AT_FDCWD,
            b"/new.c",
            libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY,
            0o640,
        )
        .expect("create");
    assert_eq!(c.write(fd, b"int main(){}\n").expect("write"), 13);
    // Written back (asynchronous changes, where the server keeps order):
    // on the server once fsync returns.
    c.fsync(fd).expect("fsync");
    c.close(fd).expect("close");
    assert_eq!(
        std::fs::read(host.join("new.c")).expect("host read"),
        b"int main(){}\n"
    );
    assert_eq!(
        std::fs::metadata(host.join("new.c")).expect("meta").mode() & 0o777,
        0o640
    );
    assert_eq!(
        c.openat(
            AT_FDCWD,
            b"/new.c",
            libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY,
            0o640
        )
        .err(),
        Some(Errno::EEXIST)
    );
    // mkdir, rename, unlink, rmdir
    c.mkdirat(AT_FDCWD, b"/d", 0o750).expect("mkdir");
    // Made behind the caller (a granted inode number): there once synced.
    c.vfs().sync().expect("sync");
    assert!(host.join("d").is_dir());
    c.renameat2(AT_FDCWD, b"/new.c", AT_FDCWD, b"/d/moved.c", 0)
        .expect("rename");
    assert!(host.join("d/moved.c").exists() && !host.join("new.c").exists());
    assert_eq!(c.fstatat(AT_FDCWD, b"/new.c", 0).err(), Some(Errno::ENOENT));
    assert_eq!(
        c.unlinkat(AT_FDCWD, b"/d", libc::AT_REMOVEDIR).err(),
        Some(Errno::ENOTEMPTY)
    );
    c.unlinkat(AT_FDCWD, b"/d/moved.c", 0).expect("unlink");
    c.unlinkat(AT_FDCWD, b"/d", libc::AT_REMOVEDIR)
        .expect("rmdir");
    c.vfs().sync().expect("sync");
    assert!(!host.join("d").exists());
}

#[test]
fn walkfs_client_against_walkfs_serve() {
    let t = tempfile::tempdir().expect("tempdir");
    let dir = t.path().join("export");
    make_tree(&dir);
    let sock = t.path().join("s.sock");
    let _server = serve(&dir, &sock);
    let src = format!("unix:{}", sock.display());
    for opts in ["cache=loose,negtimeout=-1", "cache=none"] {
        exercise(&client(&src, opts), &dir);
    }
}

#[test]
fn loose_cache_second_replay_sends_nothing_none_asks_each_time() {
    let t = tempfile::tempdir().expect("tempdir");
    let dir = t.path().join("export");
    make_tree(&dir);
    let sock = t.path().join("s.sock");
    let _server = serve(&dir, &sock);
    let src = format!("unix:{}", sock.display());
    let paths: [&[u8]; 4] = [
        b"/usr/lib/gcc/crtendS.o",
        b"/rel",
        b"/nope.h",
        b"/usr/x/y.h",
    ];
    let replay = |c: &Ctx| {
        for p in paths {
            let _ = c.faccessat(AT_FDCWD, p, libc::R_OK, 0);
        }
    };
    let loose = client(&src, "cache=loose,negtimeout=-1");
    replay(&loose);
    let first = loose.vfs().rpc_stats().expect("stats").total_rpcs;
    assert!(first > 0);
    replay(&loose);
    assert_eq!(loose.vfs().rpc_stats().expect("stats").total_rpcs, first);
    let none = client(&src, "cache=none");
    replay(&none);
    let a = none.vfs().rpc_stats().expect("stats").total_rpcs;
    replay(&none);
    let b = none.vfs().rpc_stats().expect("stats").total_rpcs;
    assert!(b - a >= 4, "cache=none asks the server again: {a} then {b}");
    // A change made on the server by another client is seen at once with
    // cache=none, not by the loose client's negative entry.
    let other = client(&src, "");
    let fd = other
        .openat(AT_FDCWD, b"/nope.h", libc::O_CREAT | libc::O_WRONLY, 0o644)
        .expect("create elsewhere");
    // Made behind that client's caller: on the server once it returns
    // from fsync (loose caching promises nothing sooner).
    other.fsync(fd).expect("fsync");
    other.close(fd).expect("close");
    assert!(none.faccessat(AT_FDCWD, b"/nope.h", libc::F_OK, 0).is_ok());
    assert_eq!(
        loose.faccessat(AT_FDCWD, b"/nope.h", libc::F_OK, 0).err(),
        Some(Errno::ENOENT),
        "loose keeps its negative entry"
    );
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("port")
}

fn wait_port(port: u16) {
    let t0 = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "port {port} never opened"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

struct Kill(Child);
impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn tool(name: &str) -> String {
    for d in ["/usr/sbin", "/usr/bin", "/sbin"] {
        let p = format!("{d}/{name}");
        if Path::new(&p).exists() {
            return p;
        }
    }
    panic!("{name} not installed: run scripts/test.sh (it installs Debian's diod)");
}

#[test]
fn walkfs_client_against_diod() {
    let t = tempfile::tempdir().expect("tempdir");
    let dir = t.path().join("export");
    make_tree(&dir);
    let port = free_port();
    let _diod = Kill(
        Command::new(tool("diod"))
            .args(["-f", "-n", "-l", &format!("127.0.0.1:{port}")])
            .args(["-e", dir.to_str().expect("utf8"), "-L", "stderr"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start diod"),
    );
    wait_port(port);
    let src = format!("tcp:127.0.0.1:{port}");
    // diod listens before it is ready to serve: a connection that soon
    // after may be reset, so the first attach is tried a few times.
    let opts =
        SourceOptions::parse(&format!("aname={},cache=loose", dir.display())).expect("options");
    let mut tries = 0;
    let vfs = loop {
        match walkfs_source::open(&src, &opts) {
            Ok(v) => break v,
            Err(e) if tries < 20 => {
                tries += 1;
                eprintln!("diod not ready ({e}); again");
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            Err(e) => panic!("connect to diod: {e}"),
        }
    };
    let c = vfs.context(Creds::root());
    exercise(&c, &dir);
}

#[test]
fn diod_clients_against_walkfs_serve() {
    let t = tempfile::tempdir().expect("tempdir");
    let dir = t.path().join("export");
    make_tree(&dir);
    let vfs =
        walkfs_source::open(dir.to_str().expect("utf8"), &SourceOptions::default()).expect("vfs");
    let server = Server::new(vfs, Config::default());
    let l = Addr::Tcp("127.0.0.1:0".into()).listen().expect("listen");
    let addr = match l.local_addr().expect("addr") {
        Addr::Tcp(a) => a,
        a => panic!("{a}"),
    };
    let s = Arc::clone(&server);
    std::thread::spawn(move || s.serve(l));
    let run = |prog: &str, args: &[&str]| {
        let out = Command::new(tool(prog))
            .args(["-s", &addr, "-a", "/"])
            .args(args)
            .output()
            .expect("run");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (ok, out, err) = run("diodls", &["/"]);
    assert!(ok, "diodls: {err}");
    let mut got: Vec<&str> = out.lines().collect();
    got.sort();
    assert_eq!(got, ["abs", "hello.txt", "rel", "usr"]);
    let (ok, out, err) = run("diodls", &["-l", "/usr/lib/gcc"]);
    assert!(ok, "diodls -l: {err}");
    assert!(out.contains("crtendS.o") && out.contains("12"), "{out}");
    let (ok, out, err) = run("diodcat", &["/hello.txt"]);
    assert!(ok, "diodcat: {err}");
    assert_eq!(out, "hello, 9p\n");
    let (ok, _, err) = run("diodcat", &["/nope"]);
    assert!(!ok && err.contains("No such file"), "{err}");
    // The absolute symlink is not followed out of the export.
    let (ok, out, _) = run("diodcat", &["/abs"]);
    assert!(!ok && !out.contains("root:"), "{out}");
}

#[test]
fn hostile_messages_get_errors_and_others_keep_being_served() {
    let t = tempfile::tempdir().expect("tempdir");
    let dir = t.path().join("export");
    make_tree(&dir);
    let sock = t.path().join("s.sock");
    let _server = serve(&dir, &sock);
    let good = client(&format!("unix:{}", sock.display()), "");
    let mut s = raw(&sock);
    let attach = Fcall::Tattach {
        fid: 1,
        afid: NOFID,
        uname: Str(b""),
        aname: Str(b""),
        n_uname: 0,
    };
    assert!(matches!(
        Fcall::decode(&rpc(&mut s, 1, attach).expect("attach"))
            .expect("decode")
            .1,
        Fcall::Rattach { .. }
    ));
    // A body that lies about a string's length: Rlerror EINVAL.
    let mut bad = Vec::new();
    let st = walkfs_p9::begin(&mut bad, walkfs_p9::msg::Twalk, 2);
    bad.extend_from_slice(&1u32.to_le_bytes());
    bad.extend_from_slice(&2u32.to_le_bytes());
    bad.extend_from_slice(&1u16.to_le_bytes());
    bad.extend_from_slice(&200u16.to_le_bytes());
    bad.extend_from_slice(b"short");
    walkfs_p9::finish(&mut bad, st);
    s.write_all(&bad).expect("send");
    assert_eq!(
        errno_of(&reply(&mut s).expect("reply")),
        Some(libc::EINVAL as u32)
    );
    // Unknown fid, names that try to climb or smuggle a slash.
    let walk = |names: &[&'static [u8]]| Fcall::Twalk {
        fid: 1,
        newfid: 3,
        names: Names::new(names).expect("names"),
    };
    assert_eq!(
        errno_of(
            &rpc(
                &mut s,
                3,
                Fcall::Tgetattr {
                    fid: 99,
                    request_mask: 0
                }
            )
            .expect("r")
        ),
        Some(libc::EBADF as u32)
    );
    assert_eq!(
        errno_of(&rpc(&mut s, 4, walk(&[b"usr/lib"])).expect("r")),
        Some(libc::EINVAL as u32)
    );
    // `..` from the root stays at the root.
    let r = rpc(&mut s, 5, walk(&[b"..", b".."])).expect("r");
    assert!(matches!(
        Fcall::decode(&r).expect("d").1,
        Fcall::Rwalk { .. }
    ));
    let r = rpc(
        &mut s,
        6,
        Fcall::Tgetattr {
            fid: 3,
            request_mask: 0,
        },
    )
    .expect("r");
    match Fcall::decode(&r).expect("d").1 {
        Fcall::Rgetattr { st } => {
            assert_eq!(st.qid.path, std::fs::metadata(&dir).expect("m").ino())
        }
        f => panic!("{f:?}"),
    }
    // A create that names a parent directory.
    let r = rpc(
        &mut s,
        7,
        Fcall::Tlcreate {
            fid: 3,
            name: Str(b"../escape"),
            flags: 0,
            mode: 0o644,
            gid: 0,
        },
    )
    .expect("r");
    assert_eq!(errno_of(&r), Some(libc::EINVAL as u32));
    assert!(!t.path().join("escape").exists());
    // Walking through a symlink to the host's /etc fails.
    let r = rpc(
        &mut s,
        8,
        Fcall::Twalk {
            fid: 1,
            newfid: 4,
            names: Names::new(&[b"abs", b"passwd"]).expect("n"),
        },
    )
    .expect("r");
    match Fcall::decode(&r).expect("d").1 {
        Fcall::Rwalk { qids } => assert_eq!(qids.as_slice().len(), 1, "stops at the link"),
        Fcall::Rlerror { .. } => {}
        f => panic!("{f:?}"),
    }
    // Tflush of a tag not in flight is answered at once.
    assert!(matches!(
        Fcall::decode(&rpc(&mut s, 9, Fcall::Tflush { oldtag: 77 }).expect("r"))
            .expect("d")
            .1,
        Fcall::Rflush {}
    ));
    // A reply type sent as a request: an error, not a crash.
    assert_eq!(
        errno_of(&rpc(&mut s, 10, Fcall::Rclunk {}).expect("r")),
        Some(libc::EINVAL as u32)
    );
    // A frame bigger than msize: the connection is closed ...
    s.write_all(&(10u32 << 20).to_le_bytes()).expect("send");
    // The server may have closed already (it reads ahead): that is the
    // outcome under test, so a failed send is fine.
    let _ = s.write_all(&[0u8; 64]);
    assert!(reply(&mut s).is_none(), "connection closed");
    // ... a size field under the header closes another one ...
    let mut s2 = raw(&sock);
    s2.write_all(&3u32.to_le_bytes()).expect("send");
    assert!(reply(&mut s2).is_none());
    // ... and the other client is still served.
    let st = good
        .fstatat(AT_FDCWD, b"/hello.txt", 0)
        .expect("still served");
    assert_eq!(st.st_size, 10);
}

#[test]
fn remove_and_rename_by_fid_act_on_that_file_only() {
    let t = tempfile::tempdir().expect("tempdir");
    let dir = t.path().join("export");
    make_tree(&dir);
    std::fs::create_dir(dir.join("empty")).expect("mkdir");
    std::fs::write(dir.join("old.txt"), b"old").expect("write");
    std::fs::write(dir.join("victim"), b"first").expect("write");
    let sock = t.path().join("s.sock");
    let _server = serve(&dir, &sock);
    let mut s = attached(&sock);

    // Trename moves the fid's file into the directory of dfid.
    walk_to(&mut s, 10, &[b"old.txt"]);
    walk_to(&mut s, 11, &[b"usr"]);
    let r = rpc(
        &mut s,
        3,
        Fcall::Trename {
            fid: 10,
            dfid: 11,
            name: Str(b"new.txt"),
        },
    )
    .expect("rename");
    assert!(matches!(Fcall::decode(&r).expect("d").1, Fcall::Rrename {}));
    assert!(!dir.join("old.txt").exists());
    assert_eq!(
        std::fs::read(dir.join("usr/new.txt")).expect("moved"),
        b"old"
    );
    // A name with a slash is refused.
    walk_to(&mut s, 12, &[b"hello.txt"]);
    let r = rpc(
        &mut s,
        4,
        Fcall::Trename {
            fid: 12,
            dfid: 11,
            name: Str(b"../../x"),
        },
    )
    .expect("r");
    assert_eq!(errno_of(&r), Some(libc::EINVAL as u32));

    // Tremove removes a file and an empty directory, and clunks the fid.
    walk_to(&mut s, 13, &[b"hello.txt"]);
    let r = rpc(&mut s, 5, Fcall::Tremove { fid: 13 }).expect("remove");
    assert!(matches!(Fcall::decode(&r).expect("d").1, Fcall::Rremove {}));
    assert!(!dir.join("hello.txt").exists());
    let r = rpc(
        &mut s,
        6,
        Fcall::Tgetattr {
            fid: 13,
            request_mask: 0,
        },
    )
    .expect("r");
    assert_eq!(errno_of(&r), Some(libc::EBADF as u32), "fid was clunked");
    walk_to(&mut s, 14, &[b"empty"]);
    let r = rpc(&mut s, 7, Fcall::Tremove { fid: 14 }).expect("remove");
    assert!(matches!(Fcall::decode(&r).expect("d").1, Fcall::Rremove {}));
    assert!(!dir.join("empty").exists());
    // A non-empty directory: ENOTEMPTY, and the fid is gone anyway.
    walk_to(&mut s, 15, &[b"usr"]);
    let r = rpc(&mut s, 8, Fcall::Tremove { fid: 15 }).expect("r");
    assert_eq!(errno_of(&r), Some(libc::ENOTEMPTY as u32));
    // The root cannot be removed.
    walk_to(&mut s, 16, &[]);
    let r = rpc(&mut s, 9, Fcall::Tremove { fid: 16 }).expect("r");
    assert_eq!(errno_of(&r), Some(libc::EBUSY as u32));
    assert!(dir.exists());

    // The file a fid named was replaced (by this client, through the
    // server; changes made on the host behind the server's cache are the
    // coherent-caching issue's): the newcomer with its name stays.
    walk_to(&mut s, 17, &[b"victim"]);
    let r = rpc(
        &mut s,
        11,
        Fcall::Tunlinkat {
            dirfid: 1,
            name: Str(b"victim"),
            flags: 0,
        },
    )
    .expect("unlink");
    assert_eq!(errno_of(&r), None);
    walk_to(&mut s, 18, &[]);
    let r = rpc(
        &mut s,
        12,
        Fcall::Tlcreate {
            fid: 18,
            name: Str(b"victim"),
            flags: libc::O_WRONLY as u32,
            mode: 0o644,
            gid: 0,
        },
    )
    .expect("create");
    assert_eq!(errno_of(&r), None);
    assert!(dir.join("victim").exists());
    let r = rpc(&mut s, 10, Fcall::Tremove { fid: 17 }).expect("r");
    assert_eq!(errno_of(&r), Some(libc::ENOENT as u32));
    assert!(
        dir.join("victim").exists(),
        "removed a file the fid never named"
    );
}
