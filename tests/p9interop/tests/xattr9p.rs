//! Extended attributes over 9P2000.L: walkfs's client against Debian's
//! diod (a server that runs a connection's requests at once, so each
//! set goes one request at a time) and against `walkfs serve`, compared
//! with the host file; and the wire itself, a whole set and read sent
//! back to back in one write, answered in order.

use std::io::Write;
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use walkfs_p9::{Data, Fcall, Names, Str};
use walkfs_source::SourceOptions;
use walkfs_vfs::{Creds, Ctx, Errno, AT_FDCWD};

mod common;
use common::*;

/// A temporary directory on tmpfs when there is one (ext4 keeps a
/// file's attributes in one block: too small for the large value).
fn tmp() -> tempfile::TempDir {
    tempfile::tempdir_in("/dev/shm")
        .or_else(|_| tempfile::tempdir())
        .expect("tempdir")
}

/// The host's own answer for `name` of `p`.
fn host_get(p: &Path, name: &str) -> Result<Vec<u8>, i32> {
    let path = std::ffi::CString::new(p.to_str().expect("utf8")).expect("path");
    let n = std::ffi::CString::new(name).expect("name");
    let mut buf = vec![0u8; 70_000];
    // SAFETY: valid C strings and a buffer with its length.
    let r = unsafe {
        libc::lgetxattr(
            path.as_ptr(),
            n.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    if r < 0 {
        return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0));
    }
    buf.truncate(r as usize);
    Ok(buf)
}

/// 10,000 bytes, not all alike: more than one message at msize 4096.
fn big() -> Vec<u8> {
    (0..10_000u32).map(|i| (i * 7 % 251) as u8).collect()
}

/// The names of `/hello.txt` through `c`, sorted.
fn names(c: &Ctx) -> Vec<Vec<u8>> {
    let l = c
        .listxattrat(AT_FDCWD, b"/hello.txt", 0)
        .expect("listxattr");
    let mut v: Vec<Vec<u8>> = l
        .split(|b| *b == 0)
        .filter(|n| !n.is_empty())
        .map(<[u8]>::to_vec)
        .collect();
    v.sort();
    v
}

/// Set, read, list, replace and remove attributes of `/hello.txt`
/// through the client `c` of an export of `host`, each checked on the
/// host file too.
fn exercise(c: &Ctx, host: &Path) {
    let (f, hf) = (&b"/hello.txt"[..], host.join("hello.txt"));
    let set = |name: &[u8], v: &[u8], fl: i32| c.setxattrat(AT_FDCWD, f, name, v, fl, 0);
    let get = |name: &[u8]| c.getxattrat(AT_FDCWD, f, name, 0);
    assert_eq!(get(b"user.a"), Err(Errno::ENODATA));
    set(b"user.a", b"1", 0).expect("set");
    assert!(set(b"user.big", &big(), 0).is_ok(), "set the big value");
    assert_eq!(get(b"user.a"), Ok(b"1".to_vec()));
    assert!(get(b"user.big") == Ok(big()), "the big value read back");
    assert!(host_get(&hf, "user.big") == Ok(big()), "on the host");
    assert_eq!(set(b"user.a", b"2", libc::XATTR_CREATE), Err(Errno::EEXIST));
    assert_eq!(
        set(b"user.b", b"2", libc::XATTR_REPLACE),
        Err(Errno::ENODATA)
    );
    set(b"user.a", b"3", libc::XATTR_REPLACE).expect("replace");
    assert_eq!(host_get(&hf, "user.a"), Ok(b"3".to_vec()));
    assert_eq!(names(c), [b"user.a".to_vec(), b"user.big".to_vec()]);
    c.removexattrat(AT_FDCWD, f, b"user.a", 0).expect("remove");
    assert_eq!(
        c.removexattrat(AT_FDCWD, f, b"user.a", 0),
        Err(Errno::ENODATA)
    );
    assert_eq!(host_get(&hf, "user.a"), Err(libc::ENODATA));
    assert_eq!(names(c), [b"user.big".to_vec()]);
    // Linux's namespaces are the vfs's to enforce, before any message.
    assert_eq!(set(b"bogus.a", b"1", 0), Err(Errno::EOPNOTSUPP));
}

struct Kill(Child);
impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
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

fn diod() -> String {
    for d in ["/usr/sbin", "/usr/bin", "/sbin"] {
        let p = format!("{d}/diod");
        if Path::new(&p).exists() {
            return p;
        }
    }
    panic!("diod not installed: run scripts/test.sh (it installs Debian's diod)");
}

#[test]
fn walkfs_client_against_diod() {
    let t = tmp();
    let dir = t.path().join("export");
    make_tree(&dir);
    let port = free_port();
    let _diod = Kill(
        Command::new(diod())
            .args(["-f", "-n", "-l", &format!("127.0.0.1:{port}")])
            .args(["-e", dir.to_str().expect("utf8"), "-L", "stderr"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start diod"),
    );
    wait_port(port);
    let src = format!("tcp:127.0.0.1:{port}");
    let opts = format!("aname={},cache=loose,msize=4096", dir.display());
    let opts = SourceOptions::parse(&opts).expect("options");
    // diod listens before it is ready to serve: the first attach is
    // tried a few times.
    let mut tries = 0;
    let vfs = loop {
        match walkfs_source::open(&src, &opts) {
            Ok(v) => break v,
            Err(e) if tries < 20 => {
                tries += 1;
                eprintln!("diod not ready ({e}); again");
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => panic!("connect to diod: {e}"),
        }
    };
    assert!(vfs.has_xattrs(), "diod keeps attributes");
    exercise(&vfs.context(Creds::root()), &dir);
}

#[test]
fn walkfs_client_against_walkfs_serve() {
    let t = tmp();
    let dir = t.path().join("export");
    make_tree(&dir);
    let sock = t.path().join("s.sock");
    let _server = serve(&dir, &sock);
    let src = format!("unix:{}", sock.display());
    exercise(&client(&src, "msize=4096"), &dir);
    // An empty value is kept as one (diod and QEMU remove on size 0).
    let c = client(&src, "");
    let f = &b"/hello.txt"[..];
    c.setxattrat(AT_FDCWD, f, b"user.e", b"", 0, 0)
        .expect("set empty");
    assert_eq!(c.getxattrat(AT_FDCWD, f, b"user.e", 0), Ok(Vec::new()));
    c.setxattrat(AT_FDCWD, f, b"user.e", b"", libc::XATTR_REPLACE, 0)
        .expect("replace with empty");
    assert_eq!(host_get(&dir.join("hello.txt"), "user.e"), Ok(Vec::new()));
}

/// The server keeps a connection's order: a set's clunk is done before
/// a read sent right behind it, and a clunk's reply is the set's outcome.
#[test]
fn a_set_and_read_sent_back_to_back_are_answered_in_order() {
    let t = tmp();
    let dir = t.path().join("export");
    make_tree(&dir);
    let sock = t.path().join("s.sock");
    let _server = serve(&dir, &sock);
    let mut s = attached(&sock);
    // Linux's v9fs way: a clone of the file's fid, Txattrcreate on it,
    // the value, the clunk that sets it; then a read of it back, all in
    // one write.
    let file = &b"hello.txt"[..];
    let walk = |newfid| Fcall::Twalk {
        fid: 1,
        newfid,
        names: Names::new(&[file]).expect("names"),
    };
    let reqs = [
        walk(2),
        Fcall::Txattrcreate {
            fid: 2,
            name: Str(b"user.wire"),
            attr_size: 5,
            flags: 0,
        },
        Fcall::Twrite {
            fid: 2,
            offset: 0,
            data: Data(b"va"),
        },
        Fcall::Twrite {
            fid: 2,
            offset: 2,
            data: Data(b"lue"),
        },
        Fcall::Tclunk { fid: 2 },
        walk(3),
        Fcall::Txattrwalk {
            fid: 3,
            newfid: 4,
            name: Str(b"user.wire"),
        },
        Fcall::Tread {
            fid: 4,
            offset: 0,
            count: 100,
        },
        // A removal, and one of a name that is not there.
        Fcall::Txattrcreate {
            fid: 3,
            name: Str(b"user.wire"),
            attr_size: 0,
            flags: libc::XATTR_REPLACE as u32,
        },
        Fcall::Tclunk { fid: 3 },
        walk(5),
        Fcall::Txattrcreate {
            fid: 5,
            name: Str(b"user.wire"),
            attr_size: 0,
            flags: libc::XATTR_REPLACE as u32,
        },
        Fcall::Tclunk { fid: 5 },
    ];
    let mut out = Vec::new();
    for (i, r) in reqs.iter().enumerate() {
        r.encode(10 + i as u16, &mut out);
    }
    s.write_all(&out).expect("send");
    let mut got = std::collections::HashMap::new();
    for _ in 0..reqs.len() {
        let frame = reply(&mut s).expect("a reply");
        let (tag, f) = Fcall::decode(&frame).expect("decode");
        let what = match f {
            Fcall::Rlerror { ecode } => format!("error {ecode}"),
            Fcall::Rread { data } => format!("read {:?}", String::from_utf8_lossy(data.0)),
            Fcall::Rxattrwalk { size } => format!("size {size}"),
            Fcall::Rwrite { count } => format!("wrote {count}"),
            other => format!("{}", other.msg_type()),
        };
        got.insert(tag - 10, what);
    }
    let at = |i: u16| got.get(&i).map(String::as_str).unwrap_or("none");
    assert_eq!(at(2), "wrote 2");
    assert_eq!(at(3), "wrote 3");
    assert_eq!(at(4), "121", "Rclunk: the value set");
    assert_eq!(at(6), "size 5");
    assert_eq!(at(7), "read \"value\"");
    assert_eq!(at(9), "121", "Rclunk: removed");
    assert_eq!(
        at(12),
        format!("error {}", libc::ENODATA),
        "nothing to remove"
    );
    assert_eq!(
        host_get(&dir.join("hello.txt"), "user.wire"),
        Err(libc::ENODATA)
    );
}
