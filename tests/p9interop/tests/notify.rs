//! The change-notification extension (docs/notify-protocol.md) in raw 9P
//! messages: who may subscribe, what the records say, and how a parked
//! read ends (a change, `Tflush`, `Tclunk`), plus a subscriber that does
//! not read getting `ALL` instead of an unbounded queue.

use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use walkfs_p9::notify::{ALL, DEGRADED, ENTRY, INODE, MIN_READ, NAME as NOTIFY_NAME, VERSION};
use walkfs_p9::{Addr, Fcall, Str};
use walkfs_server::{Config, Server};
use walkfs_source::SourceOptions;
use walkfs_vfs::Errno;

mod common;
use common::*;

/// Notification fid of these tests.
const NFID: u32 = 77;

/// A server of `dir` whose vfs watches it (as `walkfs serve` does).
fn serve_coherent(dir: &Path, sock: &Path) -> Arc<Server> {
    let o = SourceOptions::parse("cache=coherent").expect("options");
    let vfs = walkfs_source::open(dir.to_str().expect("utf8"), &o).expect("vfs");
    assert!(vfs.is_coherent());
    let server = Server::new(vfs, Config::default());
    let l = Addr::Unix(sock.display().to_string())
        .listen()
        .expect("listen");
    let s = Arc::clone(&server);
    std::thread::spawn(move || s.serve(l));
    server
}

fn subscribe(s: &mut UnixStream, fid: u32) -> Vec<u8> {
    rpc(
        s,
        9,
        Fcall::Txattrwalk {
            fid,
            newfid: NFID,
            name: Str(NOTIFY_NAME),
        },
    )
    .expect("reply")
}

fn send(s: &mut UnixStream, tag: u16, f: Fcall<'_>) {
    let mut out = Vec::new();
    f.encode(tag, &mut out);
    s.write_all(&out).expect("send");
}

fn tread(count: u32) -> Fcall<'static> {
    Fcall::Tread {
        fid: NFID,
        offset: 0,
        count,
    }
}

/// (kind, ino, name) of each record in an `Rread`.
fn records(frame: &[u8]) -> Vec<(u8, u64, Vec<u8>)> {
    let Fcall::Rread { data } = Fcall::decode(frame).expect("decode").1 else {
        panic!("not an Rread: {:?}", Fcall::decode(frame));
    };
    walkfs_p9::notify::decode(data.0)
        .map(|(k, i, n)| (k, i, n.to_vec()))
        .collect()
}

fn tag_of(frame: &[u8]) -> u16 {
    walkfs_p9::peek_header(frame).expect("header").1
}

#[test]
fn only_an_attached_client_subscribes_once() {
    let t = tempfile::tempdir().expect("tempdir");
    let dir = t.path().join("export");
    make_tree(&dir);
    let sock = t.path().join("s.sock");
    let _server = serve_coherent(&dir, &sock);
    // Not attached: there is no fid 1 to subscribe through.
    let mut s = raw(&sock);
    assert_eq!(errno_of(&subscribe(&mut s, 1)), Some(Errno::EBADF.0 as u32));
    let mut s = attached(&sock);
    let r = subscribe(&mut s, 1);
    assert!(
        matches!(Fcall::decode(&r).expect("d").1, Fcall::Rxattrwalk { size } if size == VERSION)
    );
    // One subscription per connection, reads big enough for a record.
    assert_eq!(errno_of(&subscribe(&mut s, 1)), Some(Errno::EBUSY.0 as u32));
    let r = rpc(&mut s, 4, tread(MIN_READ - 1)).expect("reply");
    assert_eq!(errno_of(&r), Some(Errno::EINVAL.0 as u32));
    // Other xattr names are still the file system's.
    let r = rpc(
        &mut s,
        4,
        Fcall::Txattrwalk {
            fid: 1,
            newfid: 78,
            name: Str(b"user.walkfs.notify"),
        },
    )
    .expect("reply");
    assert!(errno_of(&r).is_some());
}

#[test]
fn records_name_what_changed_and_reads_end_cleanly() {
    let t = tempfile::tempdir().expect("tempdir");
    let dir = t.path().join("export");
    make_tree(&dir);
    let sock = t.path().join("s.sock");
    let _server = serve_coherent(&dir, &sock);
    let mut s = attached(&sock);
    assert!(errno_of(&subscribe(&mut s, 1)).is_none());
    let root_ino = std::fs::metadata(&dir).expect("stat").ino();

    // A parked read is answered when the host changes a name...
    send(&mut s, 5, tread(8192));
    std::fs::write(dir.join("new"), b"").expect("create");
    let r = reply(&mut s).expect("notification");
    assert_eq!(tag_of(&r), 5);
    assert!(
        records(&r).contains(&(ENTRY, root_ino, b"new".to_vec())),
        "{:?}",
        records(&r)
    );
    // ... or a file's data.
    let hello = std::fs::metadata(dir.join("hello.txt"))
        .expect("stat")
        .ino();
    send(&mut s, 6, tread(8192));
    std::fs::write(dir.join("hello.txt"), b"changed").expect("write");
    let mut seen = records(&reply(&mut s).expect("notification"));
    while !seen.iter().any(|r| r.0 == INODE && r.1 == hello) {
        send(&mut s, 6, tread(8192));
        seen = records(&reply(&mut s).expect("notification"));
    }

    // Tflush of a parked read: Rflush, with no Rread after it (late
    // events of the write may still answer the read before the flush
    // arrives: then its Rread comes first, as 9P allows).
    send(&mut s, 7, tread(8192));
    send(&mut s, 8, Fcall::Tflush { oldtag: 7 });
    let mut r = reply(&mut s).expect("reply");
    if tag_of(&r) == 7 {
        records(&r);
        r = reply(&mut s).expect("rflush");
    }
    assert_eq!(tag_of(&r), 8);
    assert!(matches!(Fcall::decode(&r).expect("d").1, Fcall::Rflush {}));

    // Tclunk with a read parked: an Rread for it (empty unless a change
    // came meanwhile), then Rclunk.
    send(&mut s, 10, tread(8192));
    send(&mut s, 11, Fcall::Tclunk { fid: NFID });
    let first = reply(&mut s).expect("rread");
    assert_eq!(tag_of(&first), 10);
    records(&first);
    let second = reply(&mut s).expect("rclunk");
    assert_eq!(tag_of(&second), 11);
    assert!(matches!(
        Fcall::decode(&second).expect("d").1,
        Fcall::Rclunk {}
    ));
    // The fid is gone: reading it is an ordinary (bad) read now.
    let r = rpc(&mut s, 12, tread(8192)).expect("reply");
    assert_eq!(errno_of(&r), Some(Errno::EBADF.0 as u32));
}

#[test]
fn a_subscriber_that_does_not_read_gets_all_instead_of_a_backlog() {
    let t = tempfile::tempdir().expect("tempdir");
    let dir = t.path().join("export");
    make_tree(&dir);
    let sock = t.path().join("s.sock");
    let server = serve_coherent(&dir, &sock);
    let mut s = attached(&sock);
    assert!(errno_of(&subscribe(&mut s, 1)).is_none());
    // About 3,000 records of 111 bytes: more than a subscriber's queue.
    let long = "n".repeat(100);
    for i in 0..3000 {
        std::fs::write(dir.join(format!("{long}{i:04}")), b"").expect("create");
    }
    std::thread::sleep(Duration::from_millis(300));
    let r = rpc(&mut s, 5, tread(60_000)).expect("reply");
    let recs = records(&r);
    assert_eq!(recs[0].0, ALL, "the lost backlog is one ALL record");
    assert!(
        recs.len() < 600,
        "the queue stayed bounded: {} records",
        recs.len()
    );
    // The server's own state is intact: others are served.
    let ctx = client(&format!("unix:{}", sock.display()), "");
    assert!(ctx.fstatat(walkfs_vfs::AT_FDCWD, b"/hello.txt", 0).is_ok());
    drop(server);
}

#[test]
fn a_server_that_cannot_watch_says_so_at_once() {
    // A memfs export reports no changes (changes by other clients would
    // go unseen): the first record a subscriber reads is DEGRADED.
    let t = tempfile::tempdir().expect("tempdir");
    let sock = t.path().join("s.sock");
    let o = SourceOptions::parse("cache=coherent").expect("options");
    let vfs = walkfs_source::open("mem:", &o).expect("vfs");
    assert!(!vfs.is_coherent());
    let server = Server::new(vfs, Config::default());
    let l = Addr::Unix(sock.display().to_string())
        .listen()
        .expect("listen");
    let srv = Arc::clone(&server);
    std::thread::spawn(move || srv.serve(l));
    let mut s = attached(&sock);
    assert!(errno_of(&subscribe(&mut s, 1)).is_none());
    let r = rpc(&mut s, 5, tread(8192)).expect("reply");
    assert_eq!(records(&r), vec![(DEGRADED, 0, Vec::new())]);
}
