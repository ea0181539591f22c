//! Nodes made behind the caller with server-granted inode numbers
//! (docs/inode-grants.md), through the whole stack in one process: vfs ->
//! 9P client -> walkfs serve -> host directory, with one server and as
//! many clients (connections) as a test needs.

use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use walkfs_p9::Stream;
use walkfs_source::{open_9p, ServerConfig, SourceOptions};
use walkfs_vfs::{Creds, Ctx, Errno, Vfs, AT_FDCWD};

/// The first number a server grants (crates/server/src/inos.rs).
const GRANTED: u64 = 0x7f00_0000_0000_0000;

/// One server over a fresh host directory, replying `delay` late; its
/// clients cache with `cache=loose,negtimeout=-1`.
struct Served {
    server: Arc<walkfs_server::Server>,
    opts: SourceOptions,
    export: tempfile::TempDir,
}

impl Served {
    fn new(delay: Duration) -> Served {
        let export = tempfile::tempdir().expect("tempdir");
        let dir = export.path().to_str().expect("utf8");
        let vfs = walkfs_source::open(dir, &SourceOptions::default()).expect("export");
        let cfg = ServerConfig {
            reply_delay: delay,
            ..Default::default()
        };
        Served {
            server: walkfs_server::Server::new(vfs, cfg),
            opts: SourceOptions::parse("cache=loose,negtimeout=-1").expect("options"),
            export,
        }
    }

    /// The exported host directory.
    fn path(&self) -> &Path {
        self.export.path()
    }

    /// A new client: a connection of its own, a vfs of its own.
    fn client(&self) -> Vfs {
        let (a, b) = UnixStream::pair().expect("socketpair");
        self.server.serve_stream(Stream::Unix(a));
        open_9p(Stream::Unix(b), &self.opts).expect("attach")
    }
}

fn waits(vfs: &Vfs) -> u64 {
    vfs.rpc_stats().expect("9p").waits
}

fn sent(vfs: &Vfs, msg: &str) -> u64 {
    let s = vfs.rpc_stats().expect("9p");
    s.rpcs
        .iter()
        .find(|(n, _)| *n == msg)
        .map_or(0, |(_, c)| *c)
}

fn ino(ctx: &Ctx, path: &[u8]) -> u64 {
    ctx.fstatat(AT_FDCWD, path, libc::AT_SYMLINK_NOFOLLOW)
        .expect("stat")
        .st_ino
}

/// Does `ok` come true within a second? (A refused change is undone in
/// the cache by a thread of its own, a moment after it is reported.)
fn eventually(mut ok: impl FnMut() -> bool) -> bool {
    for _ in 0..100 {
        if ok() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    false
}

fn create(ctx: &Ctx, path: &[u8], data: &[u8]) -> i32 {
    let fd = ctx
        .openat(
            AT_FDCWD,
            path,
            libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY,
            0o644,
        )
        .expect("create");
    assert_eq!(ctx.write(fd, data), Ok(data.len()));
    fd
}

/// Files, directories, symlinks and fifos are made without a round
/// trip, numbered from the grant; every client (and every name of a
/// hard-linked file) sees the same number, which is not the host's.
#[test]
fn nodes_are_made_without_waiting_and_numbered_alike_everywhere() {
    let srv = Served::new(Duration::from_millis(5));
    let a = srv.client();
    let ctx = a.context(Creds::root());
    // The one round trip: is the name free?
    assert_eq!(ctx.faccessat(AT_FDCWD, b"/d", 0, 0), Err(Errno::ENOENT));
    let before = waits(&a);
    ctx.mkdirat(AT_FDCWD, b"/d", 0o755).expect("mkdir");
    for i in 0..20 {
        let fd = create(&ctx, format!("/d/f{i}").as_bytes(), b"data");
        ctx.close(fd).expect("close");
    }
    ctx.symlinkat(b"f0", AT_FDCWD, b"/d/l").expect("symlink");
    ctx.mknodat(AT_FDCWD, b"/d/p", libc::S_IFIFO | 0o600, 0)
        .expect("mkfifo");
    // The only waits: each directory made in is asked its ACLs once (its
    // access and default ACL: a default ACL decides a new node's mode),
    // the root's and /d's.
    assert_eq!(
        waits(&a) - before,
        4,
        "a make behind the caller waited for a reply other than the ACL asks"
    );
    assert_eq!(sent(&a, "Tlcreatei"), 20);
    assert_eq!(sent(&a, "Tmkdiri"), 1);
    assert_eq!(sent(&a, "Tsymlinki"), 1);
    assert_eq!(sent(&a, "Tmknodi"), 1);
    let f0 = ino(&ctx, b"/d/f0");
    assert!(f0 >= GRANTED, "numbered from the grant: {f0:#x}");
    ctx.linkat(AT_FDCWD, b"/d/f0", AT_FDCWD, b"/d/hard", 0)
        .expect("link");
    assert_eq!(ino(&ctx, b"/d/hard"), f0);
    assert_eq!(a.sync(), Ok(()));

    // The host has it all; its own numbers differ.
    let host = srv.path().join("d");
    assert_eq!(std::fs::read(host.join("f7")).expect("f7"), b"data");
    assert_eq!(
        std::fs::read_link(host.join("l")).expect("l"),
        Path::new("f0")
    );
    let host_ino = std::fs::metadata(host.join("f0")).expect("f0").ino();
    assert_ne!(host_ino, f0);

    // Another client of the same server sees the same numbers.
    let b = srv.client();
    let cb = b.context(Creds::root());
    for p in [
        &b"/d"[..],
        b"/d/f0",
        b"/d/f19",
        b"/d/l",
        b"/d/p",
        b"/d/hard",
    ] {
        assert_eq!(ino(&cb, p), ino(&ctx, p), "{}", String::from_utf8_lossy(p));
    }
    // And so does a listing.
    let fd = cb
        .openat(AT_FDCWD, b"/d", libc::O_RDONLY | libc::O_DIRECTORY, 0)
        .expect("open d");
    let listed = cb.getdents(fd).expect("getdents");
    let f3 = listed.iter().find(|e| e.name == b"f3").expect("f3 listed");
    assert_eq!(f3.ino, ino(&ctx, b"/d/f3"));
    cb.close(fd).expect("close");
    assert_eq!(srv.server.granted_files(), 23, "d, 20 files, l, p");

    // Removing the last name frees the binding.
    let n = srv.server.granted_files();
    ctx.unlinkat(AT_FDCWD, b"/d/f19", 0).expect("unlink");
    assert_eq!(a.sync(), Ok(()));
    assert_eq!(srv.server.granted_files(), n - 1);
}

/// fsync of a file waits for its creation and data; fsync of a
/// directory for its entries; sync for everything.
#[test]
fn fsync_waits_for_what_it_covers() {
    let srv = Served::new(Duration::from_millis(20));
    let a = srv.client();
    let ctx = a.context(Creds::root());
    // (The server makes the file as soon as it reads the request; only
    // its reply is held back: what fsync guarantees is checked after it.)
    let fd = create(&ctx, b"/one", b"first");
    assert!(a.write_back_stats().inflight >= 1, "the create runs behind");
    ctx.fsync(fd).expect("fsync");
    assert_eq!(a.write_back_stats().inflight, 0);
    assert_eq!(
        std::fs::read(srv.path().join("one")).expect("one"),
        b"first"
    );
    ctx.close(fd).expect("close");

    ctx.mkdirat(AT_FDCWD, b"/d", 0o755).expect("mkdir");
    let fd = create(&ctx, b"/d/inner", b"x");
    ctx.close(fd).expect("close");
    let d = ctx
        .openat(AT_FDCWD, b"/d", libc::O_RDONLY | libc::O_DIRECTORY, 0)
        .expect("open d");
    ctx.fsync(d).expect("fsync d");
    assert!(
        srv.path().join("d/inner").exists(),
        "the entry is on the server"
    );
    ctx.close(d).expect("close");
}

/// The host takes a name first: the late create fails on the server,
/// the process hears it at fsync, and the cache drops the file it
/// showed for the host's.
#[test]
fn a_name_taken_first_on_the_host_fails_the_late_create() {
    let srv = Served::new(Duration::from_millis(2));
    let a = srv.client();
    let ctx = a.context(Creds::root());
    // The client caches that the name is free...
    assert_eq!(ctx.faccessat(AT_FDCWD, b"/x", 0, 0), Err(Errno::ENOENT));
    // ...the host takes it...
    std::fs::write(srv.path().join("x"), b"host").expect("host write");
    // ...and the client's create is answered from its cache.
    let fd = create(&ctx, b"/x", b"client");
    assert_eq!(ctx.fsync(fd), Err(Errno::EEXIST));
    assert_eq!(ctx.close(fd), Ok(()));
    assert_eq!(std::fs::read(srv.path().join("x")).expect("x"), b"host");
    let host_ino = std::fs::metadata(srv.path().join("x")).expect("x").ino();
    assert!(
        eventually(|| ino(&ctx, b"/x") == host_ino),
        "the cache shows the host's file"
    );
}

/// The host deletes a directory a client is still creating in: the
/// creates fail on the server and are reported; nothing lands elsewhere.
#[test]
fn the_host_deleting_a_directory_fails_the_creates_in_it() {
    let srv = Served::new(Duration::from_millis(2));
    let a = srv.client();
    let ctx = a.context(Creds::root());
    ctx.mkdirat(AT_FDCWD, b"/d", 0o755).expect("mkdir");
    assert_eq!(a.sync(), Ok(()));
    std::fs::remove_dir(srv.path().join("d")).expect("host rmdir");
    let fd = create(&ctx, b"/d/f", b"lost");
    assert_eq!(ctx.fsync(fd), Err(Errno::ENOENT));
    ctx.close(fd).expect("close");
    assert!(!srv.path().join("d").exists());
    assert!(!srv.path().join("f").exists());
}

/// Two clients race to create the same names: each name is made once,
/// by one of them; the other hears `EEXIST` at fsync; the file holds
/// the winner's data and both clients agree on its number at the end.
#[test]
fn two_clients_racing_for_names_each_name_made_once() {
    let srv = Served::new(Duration::from_millis(1));
    let clients = [srv.client(), srv.client()];
    const N: usize = 100;
    let won: Vec<Vec<bool>> = std::thread::scope(|s| {
        let hs: Vec<_> = clients
            .iter()
            .enumerate()
            .map(|(c, vfs)| {
                s.spawn(move || {
                    let ctx = vfs.context(Creds::root());
                    (0..N)
                        .map(|i| {
                            let p = format!("/n{i}");
                            let fd = match ctx.openat(
                                AT_FDCWD,
                                p.as_bytes(),
                                libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY,
                                0o644,
                            ) {
                                Ok(fd) => fd,
                                // The other client's create came back
                                // first (its entry reached our cache).
                                Err(Errno::EEXIST) => return false,
                                Err(e) => panic!("create {p}: {e}"),
                            };
                            let _ = ctx.write(fd, format!("client{c}").as_bytes());
                            let ok = match ctx.fsync(fd) {
                                Ok(()) => true,
                                Err(Errno::EEXIST) => false,
                                Err(e) => panic!("fsync {p}: {e}"),
                            };
                            ctx.close(fd).expect("close");
                            ok
                        })
                        .collect()
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().expect("client")).collect()
    });
    for (i, (a, b)) in won[0].iter().zip(&won[1]).enumerate() {
        let winners: Vec<usize> = [*a, *b]
            .iter()
            .enumerate()
            .filter(|(_, &w)| w)
            .map(|(c, _)| c)
            .collect();
        assert_eq!(winners.len(), 1, "n{i} made by exactly one client");
        let data = std::fs::read(srv.path().join(format!("n{i}"))).expect("on host");
        assert_eq!(data, format!("client{}", winners[0]).as_bytes(), "n{i}");
    }
    for vfs in &clients {
        // The losses were reported at fsync; sync reports them (once)
        // since the last sync, as syncfs does.
        let _ = vfs.sync();
        assert_eq!(vfs.sync(), Ok(()));
    }
    // Both see each file under one number once their caches let go of
    // the loser's guess (corrections run on a thread of their own).
    let c0 = clients[0].context(Creds::root());
    let c1 = clients[1].context(Creds::root());
    for i in 0..N {
        let p = format!("/n{i}");
        assert!(
            eventually(|| ino(&c0, p.as_bytes()) == ino(&c1, p.as_bytes())),
            "{p}: both clients agree on the number"
        );
    }
}

/// rm -rf's pattern: a directory listed, its entries unlinked, then the
/// directory removed: the rmdirs run behind the caller (the cache knows
/// the directories empty).
#[test]
fn a_directory_the_cache_knows_empty_is_removed_without_waiting() {
    let srv = Served::new(Duration::from_millis(5));
    for d in ["r", "r/sub"] {
        std::fs::create_dir(srv.path().join(d)).expect("mkdir");
    }
    for f in ["r/a", "r/b", "r/sub/c"] {
        std::fs::write(srv.path().join(f), b"x").expect("write");
    }
    let a = srv.client();
    let ctx = a.context(Creds::root());
    for d in [&b"/r"[..], b"/r/sub"] {
        let fd = ctx
            .openat(AT_FDCWD, d, libc::O_RDONLY | libc::O_DIRECTORY, 0)
            .expect("open");
        assert_eq!(
            ctx.getdents(fd).expect("list").len(),
            if d == b"/r" { 5 } else { 3 }
        );
        ctx.close(fd).expect("close");
    }
    for p in [&b"/r/a"[..], b"/r/b", b"/r/sub/c"] {
        ctx.unlinkat(AT_FDCWD, p, 0).expect("unlink");
    }
    let before = waits(&a);
    ctx.unlinkat(AT_FDCWD, b"/r/sub", libc::AT_REMOVEDIR)
        .expect("rmdir sub");
    ctx.unlinkat(AT_FDCWD, b"/r", libc::AT_REMOVEDIR)
        .expect("rmdir r");
    assert_eq!(waits(&a) - before, 0, "an rmdir waited for a reply");
    assert_eq!(ctx.faccessat(AT_FDCWD, b"/r", 0, 0), Err(Errno::ENOENT));
    assert_eq!(a.sync(), Ok(()));
    assert!(!srv.path().join("r").exists());

    // A directory the cache does not know empty asks the server.
    ctx.mkdirat(AT_FDCWD, b"/full", 0o755).expect("mkdir");
    let fd = create(&ctx, b"/full/f", b"");
    ctx.close(fd).expect("close");
    assert_eq!(
        ctx.unlinkat(AT_FDCWD, b"/full", libc::AT_REMOVEDIR),
        Err(Errno::ENOTEMPTY)
    );
}

/// The cache knows a directory empty, but the host put a file in it:
/// the rmdir fails on the server, is reported, and the directory is
/// found again.
#[test]
fn an_rmdir_the_host_made_wrong_is_reported_and_undone() {
    let srv = Served::new(Duration::from_millis(2));
    let a = srv.client();
    let ctx = a.context(Creds::root());
    ctx.mkdirat(AT_FDCWD, b"/s", 0o755).expect("mkdir");
    assert_eq!(a.sync(), Ok(()));
    std::fs::write(srv.path().join("s/host"), b"h").expect("host write");
    assert_eq!(ctx.unlinkat(AT_FDCWD, b"/s", libc::AT_REMOVEDIR), Ok(()));
    assert_eq!(a.sync(), Err(Errno::ENOTEMPTY));
    assert!(srv.path().join("s/host").exists());
    assert!(
        eventually(|| ctx.faccessat(AT_FDCWD, b"/s/host", 0, 0).is_ok()),
        "the directory and its file are found again"
    );
}

/// A file opened read-only is opened on its first read, and the open and
/// that read cost one round trip together.
#[test]
fn open_and_first_read_cost_one_round_trip() {
    let srv = Served::new(Duration::from_millis(2));
    let data: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(srv.path().join("r"), &data).expect("write");
    let a = srv.client();
    let ctx = a.context(Creds::root());
    assert_eq!(
        ino(&ctx, b"/r"),
        std::fs::metadata(srv.path().join("r")).expect("r").ino()
    );
    let before = waits(&a);
    let fd = ctx
        .openat(AT_FDCWD, b"/r", libc::O_RDONLY, 0)
        .expect("open");
    let mut buf = vec![0u8; 4096];
    assert_eq!(ctx.read(fd, &mut buf), Ok(4096));
    assert_eq!(&buf[..], &data[..4096]);
    assert_eq!(
        waits(&a) - before,
        1,
        "open and first read in one round trip"
    );
    let mut rest = vec![0u8; 10_000];
    assert_eq!(ctx.read(fd, &mut rest), Ok(10_000 - 4096));
    assert_eq!(&rest[..10_000 - 4096], &data[4096..]);
    ctx.close(fd).expect("close");
    // A directory opened read-only still lists.
    let d = ctx
        .openat(AT_FDCWD, b"/", libc::O_RDONLY | libc::O_DIRECTORY, 0)
        .expect("open /");
    assert_eq!(ctx.read(d, &mut buf), Err(Errno::EISDIR));
    ctx.close(d).expect("close");
}

/// A plain rename (also over a file) runs behind the caller; one the
/// server refuses (the host removed the source first) is reported and
/// both names are shown as the server has them.
#[test]
fn renames_run_behind_and_a_refused_one_is_undone() {
    let srv = Served::new(Duration::from_millis(5));
    let a = srv.client();
    let ctx = a.context(Creds::root());
    ctx.mkdirat(AT_FDCWD, b"/d", 0o755).expect("mkdir");
    for f in [&b"/a"[..], b"/b", b"/c", b"/w"] {
        let fd = create(&ctx, f, f);
        ctx.close(fd).expect("close");
    }
    // The connection's first rename waits: it learns whether the server
    // knows Trenameat (diod 1.0 does not; an asynchronous one could not
    // fall back).
    ctx.renameat2(AT_FDCWD, b"/w", AT_FDCWD, b"/w2", 0)
        .expect("first rename");
    let a_ino = ino(&ctx, b"/a");
    let mtime = ctx.fstatat(AT_FDCWD, b"/a", 0).expect("stat").st_mtime;
    let before = waits(&a);
    ctx.renameat2(AT_FDCWD, b"/a", AT_FDCWD, b"/d/a2", 0)
        .expect("rename across");
    ctx.renameat2(AT_FDCWD, b"/b", AT_FDCWD, b"/c", 0)
        .expect("rename over");
    assert_eq!(waits(&a) - before, 0, "a rename waited for a reply");
    assert_eq!(ino(&ctx, b"/d/a2"), a_ino);
    assert_eq!(
        ctx.fstatat(AT_FDCWD, b"/d/a2", 0).expect("stat").st_mtime,
        mtime,
        "a rename keeps the mtime"
    );
    assert_eq!(ctx.faccessat(AT_FDCWD, b"/a", 0, 0), Err(Errno::ENOENT));
    assert_eq!(a.sync(), Ok(()));
    assert_eq!(std::fs::read(srv.path().join("d/a2")).expect("a2"), b"/a");
    assert_eq!(std::fs::read(srv.path().join("c")).expect("c"), b"/b");
    assert!(!srv.path().join("b").exists());

    // The host takes the source away first.
    std::fs::remove_file(srv.path().join("c")).expect("host rm");
    ctx.renameat2(AT_FDCWD, b"/c", AT_FDCWD, b"/e", 0)
        .expect("answered from the cache");
    assert_eq!(a.sync(), Err(Errno::ENOENT));
    assert!(
        eventually(|| ctx.faccessat(AT_FDCWD, b"/e", 0, 0) == Err(Errno::ENOENT)),
        "the new name is gone again"
    );
    assert!(!srv.path().join("e").exists());
}

/// Times set after small writes (gathered, not yet sent) land after them:
/// the server keeps the times set, not the time of the write. A
/// truncation runs behind the caller, after the writes it cuts.
#[test]
fn times_set_after_gathered_writes_are_kept() {
    let srv = Served::new(Duration::from_millis(2));
    let a = srv.client();
    let ctx = a.context(Creds::root());
    let fd = create(&ctx, b"/f", b"small");
    let when = walkfs_vfs::Timespec {
        sec: 1_000_000_000,
        nsec: 0,
    };
    ctx.utimensat(AT_FDCWD, b"/f", [Some(walkfs_vfs::TimeSet::At(when)); 2], 0)
        .expect("utimensat");
    let fd2 = create(&ctx, b"/g", b"small");
    let before = waits(&a);
    ctx.ftruncate(fd2, 2).expect("ftruncate");
    assert_eq!(waits(&a) - before, 0, "a truncation waited for a reply");
    assert_eq!(ctx.fstat(fd2).expect("fstat").st_size, 2);
    assert_eq!(ctx.close(fd), Ok(()));
    assert_eq!(ctx.close(fd2), Ok(()));
    assert_eq!(a.sync(), Ok(()));
    let md = std::fs::metadata(srv.path().join("f")).expect("f");
    assert_eq!(
        md.mtime(),
        1_000_000_000,
        "the write landed after the times"
    );
    assert_eq!(std::fs::read(srv.path().join("g")).expect("g"), b"sm");
}
