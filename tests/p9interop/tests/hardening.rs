//! Issue 6's attacks on `walkfs serve`, through raw 9P messages and the
//! walkfs client: authentication, the socket's mode, special files,
//! confinement (symlinks out, names that climb, a directory swapped for a
//! symlink while clients walk under it). Each asserts that nothing outside
//! the export is read, written, created or opened.

use std::io::Write;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use walkfs_p9::{Data, Fcall, Names, Str, NOFID};
use walkfs_server::auth::Secret;
use walkfs_server::Config;
use walkfs_source::SourceOptions;
use walkfs_vfs::{Errno, AT_FDCWD};

mod common;
use common::*;

const SECRET: &[u8] = b"a shared secret of some length";

fn decoded(frame: &[u8]) -> Fcall<'_> {
    Fcall::decode(frame).expect("decode").1
}

fn attach(s: &mut std::os::unix::net::UnixStream, fid: u32, afid: u32, aname: &[u8]) -> Vec<u8> {
    rpc(
        s,
        1,
        Fcall::Tattach {
            fid,
            afid,
            uname: Str(b""),
            aname: Str(aname),
            n_uname: 0,
        },
    )
    .expect("attach reply")
}

#[test]
fn a_secret_is_needed_to_attach() {
    let t = tempfile::tempdir().expect("tempdir");
    let dir = t.path().join("export");
    make_tree(&dir);
    let sock = t.path().join("s.sock");
    let cfg = Config {
        secret: Some(Secret::new(SECRET).expect("secret")),
        ..Config::default()
    };
    let _server = serve_with(&dir, &sock, cfg);
    let mut s = raw(&sock);
    let eacces = Some(libc::EACCES as u32);
    // No secret at all; a wrong one in the attach name.
    assert_eq!(errno_of(&attach(&mut s, 1, NOFID, b"")), eacces);
    assert_eq!(
        errno_of(&attach(&mut s, 1, NOFID, b"secret=not the secret at all")),
        eacces
    );
    // Tauth + a wrong secret written to the auth fid.
    let auth = |s: &mut std::os::unix::net::UnixStream, afid: u32, secret: &[u8]| {
        let r = rpc(
            s,
            2,
            Fcall::Tauth {
                afid,
                uname: Str(b""),
                aname: Str(b""),
                n_uname: 0,
            },
        )
        .expect("auth");
        assert!(
            matches!(decoded(&r), Fcall::Rauth { aqid } if aqid.ty == walkfs_p9::QTAUTH),
            "{:?}",
            decoded(&r)
        );
        let r = rpc(
            s,
            3,
            Fcall::Twrite {
                fid: afid,
                offset: 0,
                data: Data(secret),
            },
        )
        .expect("write");
        assert!(matches!(decoded(&r), Fcall::Rwrite { .. }));
    };
    auth(&mut s, 5, b"guess guess guess guess");
    assert_eq!(errno_of(&attach(&mut s, 1, 5, b"")), eacces);
    // An auth fid is not a file: no walk from it, no getattr of it.
    let r = rpc(
        &mut s,
        4,
        Fcall::Twalk {
            fid: 5,
            newfid: 9,
            names: Names::new(&[]).expect("names"),
        },
    )
    .expect("walk");
    assert_eq!(errno_of(&r), Some(libc::EBADF as u32));
    // The right secret, by Tauth and (the Linux client's way) by aname.
    auth(&mut s, 6, SECRET);
    assert!(matches!(
        decoded(&attach(&mut s, 1, 6, b"")),
        Fcall::Rattach { .. }
    ));
    let mut s2 = raw(&sock);
    let mut aname = b"/ignored,secret=".to_vec();
    aname.extend_from_slice(SECRET);
    assert!(matches!(
        decoded(&attach(&mut s2, 1, NOFID, &aname)),
        Fcall::Rattach { .. }
    ));
    // The walkfs client: with the secret file it attaches, without it or
    // with a wrong one it is refused, and a secret file others may read
    // is not used at all.
    let key = t.path().join("key");
    let write_key = |data: &[u8], mode: u32| {
        std::fs::write(&key, data).expect("key");
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(mode)).expect("chmod");
    };
    let source = format!("unix:{}", sock.display());
    let open =
        |opts: &str| walkfs_source::open(&source, &SourceOptions::parse(opts).expect("opts"));
    let with_key = format!("secret_file={}", key.display());
    write_key(&[SECRET, b"\n"].concat(), 0o600);
    let vfs = open(&with_key).expect("attach with the secret");
    let ctx = vfs.context(walkfs_vfs::Creds::root());
    assert_eq!(
        ctx.fstatat(AT_FDCWD, b"/hello.txt", 0)
            .expect("stat")
            .st_size,
        10
    );
    assert_eq!(open("").err(), Some(Errno::EACCES));
    write_key(b"wrong wrong wrong wrong", 0o600);
    assert_eq!(open(&with_key).err(), Some(Errno::EACCES));
    write_key(SECRET, 0o644);
    assert_eq!(open(&with_key).err(), Some(Errno::EACCES));
}

#[test]
fn the_unix_socket_is_private_and_never_replaces_a_file() {
    let t = tempfile::tempdir().expect("tempdir");
    let sock = t.path().join("s.sock");
    let addr = walkfs_p9::Addr::Unix(sock.display().to_string());
    let l = addr.listen().expect("listen");
    let mode = std::fs::symlink_metadata(&sock)
        .expect("stat")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "{mode:o}");
    // No temporary name left behind.
    assert_eq!(std::fs::read_dir(t.path()).expect("ls").count(), 1);
    drop(l);
    // A regular file in the way stays; listening fails.
    let f = t.path().join("file");
    std::fs::write(&f, b"keep me").expect("write");
    let addr = walkfs_p9::Addr::Unix(f.display().to_string());
    assert!(addr.listen().is_err());
    assert_eq!(std::fs::read(&f).expect("read"), b"keep me");
    // Loopback TCP is not exposed; any other address is.
    let tcp = |s: &str| walkfs_p9::Addr::parse(s).expect("addr").is_exposed();
    assert!(!tcp("tcp:127.0.0.1:564").expect("lo"));
    assert!(!tcp("tcp:[::1]:564").expect("lo6"));
    assert!(!tcp("tcp:localhost:564").expect("localhost"));
    assert!(tcp("tcp:0.0.0.0:564").expect("any"));
}

/// Device nodes, fifos and sockets made on the host: a client may see
/// them but the server never opens one (a fifo would hang a worker, a
/// device would hand the client the host's device).
#[test]
fn special_files_are_never_opened() {
    let t = tempfile::tempdir().expect("tempdir");
    let dir = t.path().join("export");
    make_tree(&dir);
    let c = |p: &Path| std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).expect("c");
    // SAFETY: valid C strings; plain syscalls.
    unsafe {
        assert_eq!(libc::mkfifo(c(&dir.join("fifo")).as_ptr(), 0o666), 0);
        let null = libc::makedev(1, 3);
        assert_eq!(
            libc::mknod(c(&dir.join("null")).as_ptr(), libc::S_IFCHR | 0o666, null),
            0
        );
    }
    let _bound = std::os::unix::net::UnixListener::bind(dir.join("sock")).expect("bind");
    let sock = t.path().join("s.sock");
    let _server = serve(&dir, &sock);
    let mut s = attached(&sock);
    for (i, name) in [&b"fifo"[..], b"null", b"sock"].iter().enumerate() {
        let fid = 10 + i as u32;
        let r = walk_to(&mut s, fid, &[name]);
        assert!(matches!(decoded(&r), Fcall::Rwalk { .. }), "walk {name:?}");
        let r = rpc(
            &mut s,
            5,
            Fcall::Tgetattr {
                fid,
                request_mask: 0x7ff,
            },
        )
        .expect("getattr");
        assert!(matches!(decoded(&r), Fcall::Rgetattr { .. }));
        for flags in [libc::O_RDONLY, libc::O_WRONLY, libc::O_RDWR] {
            let t0 = Instant::now();
            let r = rpc(
                &mut s,
                6,
                Fcall::Tlopen {
                    fid,
                    flags: flags as u32,
                },
            )
            .expect("an answer, not a hang");
            assert!(errno_of(&r).is_some(), "{name:?} opened: {:?}", decoded(&r));
            assert!(t0.elapsed() < Duration::from_secs(5));
        }
    }
    // Through the walkfs client too.
    let ctx = client(&format!("unix:{}", sock.display()), "");
    for p in [&b"/fifo"[..], b"/null", b"/sock"] {
        assert!(ctx.openat(AT_FDCWD, p, libc::O_RDONLY, 0).is_err());
        assert!(ctx.fstatat(AT_FDCWD, p, 0).is_ok());
    }
}

/// A file next to the export that no client may reach.
fn outside(t: &Path) -> std::path::PathBuf {
    let o = t.join("outside");
    std::fs::create_dir(&o).expect("mkdir");
    std::fs::write(o.join("f"), b"OUTSIDE").expect("write");
    o
}

#[test]
fn no_name_or_link_leads_outside() {
    let t = tempfile::tempdir().expect("tempdir");
    let dir = t.path().join("export");
    make_tree(&dir);
    let out = outside(t.path());
    symlink(&out, dir.join("hostabs")).expect("symlink");
    symlink("../outside", dir.join("hostrel")).expect("symlink");
    let sock = t.path().join("s.sock");
    let _server = serve(&dir, &sock);
    let mut s = attached(&sock);
    let fails = |r: &[u8]| errno_of(r).is_some();
    // Client-made symlinks out: their bodies are data, walking through
    // them never leaves.
    for (i, tgt) in [&b"/outside"[..], b"../outside", b"../../../../.."]
        .iter()
        .enumerate()
    {
        let name = format!("cl{i}");
        let r = rpc(
            &mut s,
            3,
            Fcall::Tsymlink {
                fid: 1,
                name: Str(name.as_bytes()),
                symtgt: Str(tgt),
                gid: 0,
            },
        )
        .expect("symlink");
        assert!(matches!(decoded(&r), Fcall::Rsymlink { .. }));
    }
    for link in [&b"cl0"[..], b"cl1", b"cl2", b"hostabs", b"hostrel"] {
        // 9P stops a walk at the link: an error or a partial walk (one
        // qid, the link's own; no new fid), never the file behind it.
        let r = walk_to(&mut s, 20, &[link, b"f"]);
        let partial = matches!(decoded(&r), Fcall::Rwalk { ref qids } if qids.as_slice().len() < 2);
        assert!(
            fails(&r) || partial,
            "walk through {link:?}: {:?}",
            decoded(&r)
        );
        let r = rpc(
            &mut s,
            4,
            Fcall::Tgetattr {
                fid: 20,
                request_mask: 0,
            },
        )
        .expect("getattr");
        assert_eq!(errno_of(&r), Some(libc::EBADF as u32), "no fid 20 was made");
        // The link itself: open refuses, so nothing is read through it.
        let r = walk_to(&mut s, 21, &[link]);
        assert!(matches!(decoded(&r), Fcall::Rwalk { .. }));
        let r = rpc(&mut s, 4, Fcall::Tlopen { fid: 21, flags: 0 }).expect("open");
        assert!(fails(&r), "open of {link:?}");
        rpc(&mut s, 4, Fcall::Tclunk { fid: 21 }).expect("clunk");
    }
    // Names that climb or smuggle a path, in every message that takes one.
    let bad: [&[u8]; 6] = [b"..", b".", b"", b"../x", b"a/b", b"/etc"];
    for name in bad {
        let replies = [
            rpc(
                &mut s,
                5,
                Fcall::Tlcreate {
                    fid: 1,
                    name: Str(name),
                    flags: libc::O_RDWR as u32,
                    mode: 0o644,
                    gid: 0,
                },
            ),
            rpc(
                &mut s,
                5,
                Fcall::Tmkdir {
                    dfid: 1,
                    name: Str(name),
                    mode: 0o755,
                    gid: 0,
                },
            ),
            rpc(
                &mut s,
                5,
                Fcall::Tsymlink {
                    fid: 1,
                    name: Str(name),
                    symtgt: Str(b"x"),
                    gid: 0,
                },
            ),
            rpc(
                &mut s,
                5,
                Fcall::Trenameat {
                    olddirfid: 1,
                    oldname: Str(b"hello.txt"),
                    newdirfid: 1,
                    newname: Str(name),
                },
            ),
            rpc(
                &mut s,
                5,
                Fcall::Tunlinkat {
                    dirfid: 1,
                    name: Str(name),
                    flags: 0,
                },
            ),
        ];
        for r in replies {
            let r = r.expect("reply");
            assert!(fails(&r), "{name:?}: {:?}", decoded(&r));
        }
    }
    // A hard link of a link to the outside is only another name for the
    // link; a rename into a linked directory does not follow it.
    let r = walk_to(&mut s, 22, &[b"hostabs"]);
    assert!(matches!(decoded(&r), Fcall::Rwalk { .. }));
    let r = rpc(
        &mut s,
        6,
        Fcall::Tlink {
            dfid: 1,
            fid: 22,
            name: Str(b"hard"),
        },
    )
    .expect("link");
    assert!(errno_of(&r).is_none(), "{:?}", decoded(&r));
    assert_eq!(
        std::fs::read_link(dir.join("hard")).expect("readlink"),
        out.as_path()
    );
    let r = walk_to(&mut s, 23, &[b"hostrel"]);
    assert!(matches!(decoded(&r), Fcall::Rwalk { .. }));
    let r = rpc(
        &mut s,
        6,
        Fcall::Trenameat {
            olddirfid: 1,
            oldname: Str(b"hello.txt"),
            newdirfid: 23,
            newname: Str(b"moved"),
        },
    )
    .expect("rename");
    assert!(fails(&r));
    // The outside is as it was.
    let names: Vec<_> = std::fs::read_dir(&out)
        .expect("ls")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert_eq!(names, ["f"]);
    assert_eq!(std::fs::read(out.join("f")).expect("read"), b"OUTSIDE");
    assert!(dir.join("hello.txt").exists());
}

/// The host swaps a directory for a symlink to the outside and back as
/// fast as it can while clients walk under it (seconds of it); the
/// server asks the host at every step (cache=none). No client ever reads
/// the outside file.
#[test]
fn a_directory_swapped_for_a_symlink_never_leads_out() {
    let t = tempfile::tempdir().expect("tempdir");
    let dir = t.path().join("export");
    make_tree(&dir);
    let out = outside(t.path());
    std::fs::create_dir(dir.join("d")).expect("mkdir");
    std::fs::write(dir.join("d/f"), b"inside").expect("write");
    symlink(&out, dir.join("swap")).expect("symlink");
    let sock = t.path().join("s.sock");
    let vfs = walkfs_source::open(
        dir.to_str().expect("utf8"),
        &SourceOptions::parse("cache=none").expect("opts"),
    )
    .expect("vfs");
    let server = walkfs_server::Server::new(vfs, Config::default());
    let l = walkfs_p9::Addr::Unix(sock.display().to_string())
        .listen()
        .expect("listen");
    let srv = Arc::clone(&server);
    std::thread::spawn(move || srv.serve(l));

    let stop = Arc::new(AtomicBool::new(false));
    let swapper = {
        let (stop, dir) = (Arc::clone(&stop), dir.clone());
        std::thread::spawn(move || {
            let (a, b) = (
                std::ffi::CString::new(dir.join("d").into_os_string().into_encoded_bytes())
                    .expect("c"),
                std::ffi::CString::new(dir.join("swap").into_os_string().into_encoded_bytes())
                    .expect("c"),
            );
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                // SAFETY: valid C strings; an atomic exchange of two names.
                let r = unsafe {
                    libc::renameat2(
                        libc::AT_FDCWD,
                        a.as_ptr(),
                        libc::AT_FDCWD,
                        b.as_ptr(),
                        libc::RENAME_EXCHANGE,
                    )
                };
                assert_eq!(r, 0, "exchange");
                n += 1;
            }
            n
        })
    };
    // Three seconds at least, and on a loaded machine until the race has
    // been run enough to mean something (at most 20 s).
    let t0 = Instant::now();
    let (mut reads, mut tries) = (0u64, 0u64);
    let mut s = attached(&sock);
    let ctx = client(&format!("unix:{}", sock.display()), "cache=none");
    while t0.elapsed() < Duration::from_secs(3)
        || (reads == 0 || tries < 50) && t0.elapsed() < Duration::from_secs(20)
    {
        tries += 1;
        // Raw 9P: walk d/f, open, read.
        let r = walk_to(&mut s, 30, &[b"d", b"f"]);
        if matches!(decoded(&r), Fcall::Rwalk { ref qids } if qids.as_slice().len() == 2) {
            let r = rpc(&mut s, 7, Fcall::Tlopen { fid: 30, flags: 0 }).expect("open");
            if errno_of(&r).is_none() {
                let r = rpc(
                    &mut s,
                    8,
                    Fcall::Tread {
                        fid: 30,
                        offset: 0,
                        count: 64,
                    },
                )
                .expect("read");
                if let Fcall::Rread { data } = decoded(&r) {
                    assert_eq!(data.0, b"inside", "read through the swapped link");
                    reads += 1;
                }
            }
            rpc(&mut s, 9, Fcall::Tclunk { fid: 30 }).expect("clunk");
        }
        // The walkfs client, which does follow symlinks, but inside.
        if let Ok(fd) = ctx.openat(AT_FDCWD, b"/d/f", libc::O_RDONLY, 0) {
            let mut buf = [0u8; 64];
            let n = ctx.pread(fd, &mut buf, 0).unwrap_or(0);
            assert_ne!(&buf[..n], b"OUTSIDE");
            let _ = ctx.close(fd);
        }
    }
    stop.store(true, Ordering::Relaxed);
    let swaps = swapper.join().expect("swapper");
    eprintln!("{tries} walks, {reads} reads of d/f, {swaps} swaps");
    assert!(swaps > 100 && tries >= 50, "the race ran");
    assert!(reads > 0, "some walks found the directory");
    assert_eq!(std::fs::read(out.join("f")).expect("read"), b"OUTSIDE");
}

/// A client that dies in the middle of a message: the server drops its
/// connection and keeps serving the others.
#[test]
fn a_client_vanishing_mid_message_leaves_the_others_served() {
    let t = tempfile::tempdir().expect("tempdir");
    let dir = t.path().join("export");
    make_tree(&dir);
    let sock = t.path().join("s.sock");
    let server = serve(&dir, &sock);
    let good = client(&format!("unix:{}", sock.display()), "");
    for _ in 0..20 {
        let mut s = attached(&sock);
        for fid in 10..60 {
            walk_to(&mut s, fid, &[b"usr", b"lib"]);
        }
        // Half a Twrite: the size says 4000 bytes, 100 come.
        let mut half = Vec::new();
        half.extend_from_slice(&4000u32.to_le_bytes());
        half.push(walkfs_p9::msg::Twrite);
        half.extend_from_slice(&[0u8; 95]);
        s.write_all(&half).expect("send");
        drop(s);
    }
    assert_eq!(
        good.fstatat(AT_FDCWD, b"/hello.txt", 0)
            .expect("served")
            .st_size,
        10
    );
    let _ = server;
}

/// Walk fid 1 to `name` as `fid` and open it with `flags`.
fn open_fid(s: &mut std::os::unix::net::UnixStream, fid: u32, name: &[u8], flags: u32) {
    let r = walk_to(s, fid, &[name]);
    assert!(
        matches!(decoded(&r), Fcall::Rwalk { .. }),
        "{:?}",
        decoded(&r)
    );
    let r = rpc(s, 3, Fcall::Tlopen { fid, flags }).expect("open");
    assert!(
        matches!(decoded(&r), Fcall::Rlopen { .. }),
        "{:?}",
        decoded(&r)
    );
}

/// A client that pipelines big writes faster than the server answers is
/// slowed by its own socket: the server never holds more than its bound
/// of request bytes for one connection, and every write lands.
#[test]
fn a_pipelining_client_is_held_to_the_pending_bound() {
    const BOUND: usize = 256 * 1024;
    const N: usize = 64;
    const LEN: usize = 60_000;
    let t = tempfile::tempdir().expect("tempdir");
    let dir = t.path().join("export");
    make_tree(&dir);
    std::fs::write(dir.join("big"), b"").expect("write");
    let sock = t.path().join("s.sock");
    let cfg = Config {
        max_pending_bytes: BOUND,
        reply_delay: Duration::from_millis(5),
        threads: 2,
        ..Config::default()
    };
    let server = serve_with(&dir, &sock, cfg);
    let mut s = attached(&sock);
    open_fid(&mut s, 5, b"big", 2);
    let mut w = s.try_clone().expect("dup");
    let sender = std::thread::spawn(move || {
        let mut out = Vec::new();
        for i in 0..N {
            let fill = vec![i as u8 + 1; LEN];
            Fcall::Twrite {
                fid: 5,
                offset: (i * LEN) as u64,
                data: Data(&fill),
            }
            .encode(10 + i as u16, &mut out);
        }
        w.write_all(&out).expect("send");
    });
    for _ in 0..N {
        let r = reply(&mut s).expect("reply");
        assert!(
            matches!(decoded(&r), Fcall::Rwrite { count } if count as usize == LEN),
            "{:?}",
            decoded(&r)
        );
    }
    sender.join().expect("sender");
    let peak = server.stats.pending_peak.load(Ordering::Relaxed) as usize;
    assert!(peak > 0, "writes went through the pool");
    assert!(
        peak <= BOUND + 65536,
        "at most the bound plus one frame was pending: {peak}"
    );
    let got = std::fs::read(dir.join("big")).expect("read");
    assert_eq!(got.len(), N * LEN);
    for (i, c) in got.chunks(LEN).enumerate() {
        assert!(c.iter().all(|&b| b == i as u8 + 1), "chunk {i}");
    }
}

/// A client that sends reads and never takes the replies cannot hold the
/// server's workers: after the reply timeout its connection is closed and
/// another client is served.
#[test]
fn a_client_that_stops_reading_is_closed_and_the_others_served() {
    let t = tempfile::tempdir().expect("tempdir");
    let dir = t.path().join("export");
    make_tree(&dir);
    std::fs::write(dir.join("big"), vec![7u8; 1 << 20]).expect("write");
    let sock = t.path().join("s.sock");
    let cfg = Config {
        reply_timeout: Duration::from_secs(1),
        threads: 2,
        ..Config::default()
    };
    let server = serve_with(&dir, &sock, cfg);
    let mut s = attached(&sock);
    open_fid(&mut s, 5, b"big", 0);
    let mut out = Vec::new();
    for i in 0..200u16 {
        Fcall::Tread {
            fid: 5,
            offset: 0,
            count: 60_000,
        }
        .encode(10 + i, &mut out);
    }
    s.write_all(&out).expect("send");
    let t0 = Instant::now();
    while server.stats.stalled.load(Ordering::Relaxed) == 0 {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "the stalled connection was never closed"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let good = client(&format!("unix:{}", sock.display()), "cache=none");
    assert_eq!(
        good.fstatat(AT_FDCWD, b"/hello.txt", 0)
            .expect("served")
            .st_size,
        10
    );
    let fd = good
        .openat(AT_FDCWD, b"/big", libc::O_RDONLY, 0)
        .expect("open");
    let mut buf = vec![0u8; 1 << 16];
    assert_eq!(good.read(fd, &mut buf).expect("read"), 1 << 16);
    assert!(buf.iter().all(|&b| b == 7));
    // The stalled client finds its connection ended (what was sent
    // before the close, then end of file or a reset), not a hang.
    let mut rest = Vec::new();
    let r = std::io::Read::read_to_end(&mut s, &mut rest);
    assert!(
        !matches!(&r, Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
        "{r:?}"
    );
}
