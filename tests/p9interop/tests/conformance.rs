//! 9P2000.L conformance of `walkfs serve` and of the walkfs client: one
//! qid per file in every reply, every message answered (unknown types
//! too), Tmknod, and a client that keeps a misbehaving server's errnos
//! out of the vfs's retry loops.

use std::io::Write;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::os::unix::net::UnixListener;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use walkfs_p9::{Fcall, Names, Qid, Qids, Str, QTDIR, VERSION};
use walkfs_vfs::{Errno, AT_FDCWD};

mod common;
use common::*;

fn decoded(frame: &[u8]) -> Fcall<'_> {
    Fcall::decode(frame).expect("a well-formed reply").1
}

fn qid_of_reply(frame: &[u8]) -> Qid {
    match decoded(frame) {
        Fcall::Rattach { qid }
        | Fcall::Rlopen { qid, .. }
        | Fcall::Rlcreate { qid, .. }
        | Fcall::Rmkdir { qid }
        | Fcall::Rsymlink { qid }
        | Fcall::Rmknod { qid } => qid,
        Fcall::Rgetattr { st } => st.qid,
        Fcall::Rwalk { qids } => *qids.as_slice().last().expect("a walked qid"),
        f => panic!("no qid in {f:?}"),
    }
}

fn getattr(s: &mut std::os::unix::net::UnixStream, fid: u32) -> Qid {
    qid_of_reply(
        &rpc(
            s,
            3,
            Fcall::Tgetattr {
                fid,
                request_mask: 0x7ff,
            },
        )
        .expect("getattr"),
    )
}

fn walk(s: &mut std::os::unix::net::UnixStream, fid: u32, newfid: u32, names: &[&[u8]]) -> Qid {
    qid_of_reply(
        &rpc(
            s,
            2,
            Fcall::Twalk {
                fid,
                newfid,
                names: Names::new(names).expect("names"),
            },
        )
        .expect("walk"),
    )
}

/// Linux's v9fs matches inodes by qid type, version and path: the same
/// file must have the same qid in every reply that names it, or one file
/// becomes several inodes in a kernel client.
#[test]
fn one_qid_per_file_in_every_reply() {
    let t = tempfile::tempdir().expect("tempdir");
    let dir = t.path().join("export");
    make_tree(&dir);
    let sock = t.path().join("s.sock");
    let _server = serve(&dir, &sock);
    let mut s = raw(&sock);
    let attach = rpc(
        &mut s,
        1,
        Fcall::Tattach {
            fid: 1,
            afid: walkfs_p9::NOFID,
            uname: Str(b"root"),
            aname: Str(b""),
            n_uname: 0,
        },
    )
    .expect("attach");
    let root = qid_of_reply(&attach);
    assert_eq!(root.ty, QTDIR);
    assert_eq!(getattr(&mut s, 1), root, "attach vs getattr of the root");
    // `..` of the root is the root; a walk through `..` lands on the
    // same qids as the direct walk.
    assert_eq!(walk(&mut s, 1, 2, &[b".."]), root, "walk .. of the root");
    let usr = walk(&mut s, 1, 3, &[b"usr"]);
    assert_eq!(getattr(&mut s, 3), usr, "walk vs getattr of a directory");
    assert_eq!(walk(&mut s, 3, 4, &[b"lib", b".."]), usr, "walk lib/..");
    let file = walk(&mut s, 1, 5, &[b"hello.txt"]);
    assert_eq!(getattr(&mut s, 5), file, "walk vs getattr of a file");
    let open = rpc(&mut s, 4, Fcall::Tlopen { fid: 5, flags: 0 }).expect("lopen");
    assert_eq!(qid_of_reply(&open), file, "walk vs lopen");
    // Changing the file's contents does not change its qid.
    std::fs::write(dir.join("hello.txt"), b"other, longer contents").expect("write");
    assert_eq!(getattr(&mut s, 5), file, "getattr after a write");
    assert_eq!(
        walk(&mut s, 1, 6, &[b"hello.txt"]),
        file,
        "walk after a write"
    );

    // Every create's qid is the one a later walk and getattr give.
    let _ = walk_to(&mut s, 10, &[]);
    let created = rpc(
        &mut s,
        5,
        Fcall::Tlcreate {
            fid: 10,
            name: Str(b"new"),
            flags: libc::O_WRONLY as u32,
            mode: 0o644,
            gid: 0,
        },
    )
    .expect("lcreate");
    let q = qid_of_reply(&created);
    assert_eq!(walk(&mut s, 1, 11, &[b"new"]), q, "lcreate vs walk");
    assert_eq!(getattr(&mut s, 11), q, "lcreate vs getattr");
    let made: [(&[u8], Fcall<'_>); 3] = [
        (
            b"d",
            Fcall::Tmkdir {
                dfid: 1,
                name: Str(b"d"),
                mode: 0o755,
                gid: 0,
            },
        ),
        (
            b"ln",
            Fcall::Tsymlink {
                fid: 1,
                name: Str(b"ln"),
                symtgt: Str(b"hello.txt"),
                gid: 0,
            },
        ),
        (
            b"fifo",
            Fcall::Tmknod {
                dfid: 1,
                name: Str(b"fifo"),
                mode: libc::S_IFIFO | 0o644,
                major: 0,
                minor: 0,
                gid: 0,
            },
        ),
    ];
    for (i, (name, f)) in made.into_iter().enumerate() {
        let q = qid_of_reply(&rpc(&mut s, 6, f).expect("create"));
        let fid = 20 + i as u32;
        assert_eq!(
            walk(&mut s, 1, fid, &[name]),
            q,
            "create vs walk of {name:?}"
        );
        assert_eq!(getattr(&mut s, fid), q, "create vs getattr of {name:?}");
    }
}

/// A frame of a type the server does not know gets an `Rlerror` with its
/// tag (never silence, which would leave the client waiting for ever),
/// and the connection goes on serving.
#[test]
fn unknown_message_types_are_answered() {
    let t = tempfile::tempdir().expect("tempdir");
    let dir = t.path().join("export");
    make_tree(&dir);
    let sock = t.path().join("s.sock");
    let _server = serve(&dir, &sock);
    let mut s = attached(&sock);
    for (ty, tag) in [
        (7u8, 70u16),
        (99, 99),
        (117, 117),
        (255, 255),
        (0, 1000),
        (1, 1001),
    ] {
        let mut frame = Vec::new();
        frame.extend_from_slice(&11u32.to_le_bytes());
        frame.push(ty);
        frame.extend_from_slice(&tag.to_le_bytes());
        frame.extend_from_slice(&[0xab; 4]);
        s.write_all(&frame).expect("send");
        let r = reply(&mut s).unwrap_or_else(|| panic!("no answer to type {ty}"));
        let (rtag, f) = Fcall::decode(&r).expect("a well-formed reply");
        assert_eq!(rtag, tag, "type {ty}");
        let Fcall::Rlerror { ecode } = f else {
            panic!("type {ty}: {f:?}");
        };
        if walkfs_p9::type_name(ty) == "unknown" {
            assert_eq!(ecode, libc::EOPNOTSUPP as u32, "type {ty}");
        }
    }
    // Still serving.
    let usr = walk(&mut s, 1, 3, &[b"usr"]);
    assert_eq!(getattr(&mut s, 3), usr);
}

/// Tmknod makes fifos, sockets and (the server being root) device nodes
/// in the export, checks names like every create, and the walkfs client's
/// `mknodat` goes through it.
#[test]
fn tmknod_makes_special_files() {
    let t = tempfile::tempdir().expect("tempdir");
    let dir = t.path().join("export");
    make_tree(&dir);
    let sock = t.path().join("s.sock");
    let _server = serve(&dir, &sock);
    let mut s = attached(&sock);
    let mknod =
        |s: &mut std::os::unix::net::UnixStream, name: &[u8], mode: u32, dev: (u32, u32)| {
            rpc(
                s,
                7,
                Fcall::Tmknod {
                    dfid: 1,
                    name: Str(name),
                    mode,
                    major: dev.0,
                    minor: dev.1,
                    gid: 0,
                },
            )
            .expect("mknod")
        };
    let r = mknod(&mut s, b"fifo", libc::S_IFIFO | 0o640, (0, 0));
    assert!(
        matches!(decoded(&r), Fcall::Rmknod { .. }),
        "{:?}",
        decoded(&r)
    );
    let r = mknod(&mut s, b"sock", libc::S_IFSOCK | 0o600, (0, 0));
    assert!(matches!(decoded(&r), Fcall::Rmknod { .. }));
    let md = std::fs::symlink_metadata(dir.join("fifo")).expect("fifo on the host");
    assert!(md.file_type().is_fifo());
    assert_eq!(md.mode() & 0o7777, 0o640);
    assert!(std::fs::symlink_metadata(dir.join("sock"))
        .expect("sock")
        .file_type()
        .is_socket());
    if walkfs_testkit::need_root("a device node") {
        let r = mknod(&mut s, b"null", libc::S_IFCHR | 0o600, (1, 3));
        assert!(matches!(decoded(&r), Fcall::Rmknod { .. }));
        let md = std::fs::symlink_metadata(dir.join("null")).expect("null");
        assert!(md.file_type().is_char_device());
        assert_eq!(md.rdev(), libc::makedev(1, 3));
    }
    for (name, mode, want) in [
        (&b"fifo"[..], libc::S_IFIFO | 0o600, libc::EEXIST),
        (b"../escape", libc::S_IFIFO | 0o600, libc::EINVAL),
        (b"a/b", libc::S_IFIFO | 0o600, libc::EINVAL),
        (b"dir", libc::S_IFDIR | 0o755, libc::EPERM),
    ] {
        let r = mknod(&mut s, name, mode, (0, 0));
        assert_eq!(errno_of(&r), Some(want as u32), "{name:?}");
    }
    assert!(!t.path().join("escape").exists());

    let ctx = client(&format!("unix:{}", sock.display()), "");
    ctx.mknodat(AT_FDCWD, b"/usr/fifo2", libc::S_IFIFO | 0o600, 0)
        .expect("mknodat over 9P");
    // Made behind the caller (a granted inode number): on the host once
    // synced.
    ctx.vfs().sync().expect("sync");
    assert!(std::fs::symlink_metadata(dir.join("usr/fifo2"))
        .expect("fifo2")
        .file_type()
        .is_fifo());
    let st = ctx
        .fstatat(AT_FDCWD, b"/usr/fifo2", libc::AT_SYMLINK_NOFOLLOW)
        .expect("stat");
    assert_eq!(st.st_mode, libc::S_IFIFO | 0o600);
    assert_eq!(
        ctx.mknodat(AT_FDCWD, b"/usr/fifo2", libc::S_IFIFO | 0o600, 0)
            .map(drop),
        Err(Errno::EEXIST)
    );
    // Made, never opened.
    assert!(ctx
        .openat(
            AT_FDCWD,
            b"/usr/fifo2",
            libc::O_RDONLY | libc::O_NONBLOCK,
            0
        )
        .is_err());
}

/// A fake 9P server that attaches, describes its root, and answers every
/// walk with `ecode`. Counts the Twalks it was sent.
fn fake_server(sock: &Path, ecode: u32) -> Arc<AtomicU64> {
    let walks = Arc::new(AtomicU64::new(0));
    let counted = Arc::clone(&walks);
    let l = UnixListener::bind(sock).expect("bind");
    std::thread::spawn(move || {
        let Ok((mut c, _)) = l.accept() else { return };
        let root = Qid {
            ty: QTDIR,
            version: 0,
            path: 1,
        };
        let mut buf = Vec::new();
        while let Some(frame) = {
            buf.clear();
            walkfs_p9::read_frame(&mut c, &mut buf, 1 << 20)
                .ok()
                .and_then(|more| more.then_some(&buf))
        } {
            let Ok((tag, f)) = Fcall::decode(frame) else {
                return;
            };
            let r = match f {
                Fcall::Tversion { msize, .. } => Fcall::Rversion {
                    msize,
                    version: Str(VERSION),
                },
                Fcall::Tattach { .. } => Fcall::Rattach { qid: root },
                Fcall::Tgetattr { .. } => Fcall::Rgetattr {
                    st: walkfs_p9::Stat {
                        valid: 0x7ff,
                        qid: root,
                        mode: libc::S_IFDIR | 0o755,
                        nlink: 2,
                        ..Default::default()
                    },
                },
                Fcall::Twalk { names, .. } if names.as_slice().is_empty() => Fcall::Rwalk {
                    qids: Qids::default(),
                },
                Fcall::Twalk { .. } => {
                    counted.fetch_add(1, Ordering::SeqCst);
                    Fcall::Rlerror { ecode }
                }
                Fcall::Tclunk { .. } => Fcall::Rclunk {},
                _ => Fcall::Rlerror {
                    ecode: libc::EOPNOTSUPP as u32,
                },
            };
            let mut out = Vec::new();
            r.encode(tag, &mut out);
            if c.write_all(&out).is_err() {
                return;
            }
        }
    });
    walks
}

/// A server's errno is not trusted to mean what the vfs means by it:
/// `ECHILD` (the vfs's old "walk again") and numbers the client does not
/// know become `EIO`, `EAGAIN` stays itself, and each lookup sends
/// exactly one Twalk and fails at once.
#[test]
fn a_servers_errnos_never_steer_the_client() {
    for (ecode, want) in [
        (libc::ECHILD as u32, Errno::EIO),
        (libc::EAGAIN as u32, Errno::EAGAIN),
        (4000, Errno::EIO),
        (0, Errno::EIO),
        (libc::ENOENT as u32, Errno::ENOENT),
    ] {
        let t = tempfile::tempdir().expect("tempdir");
        let sock = t.path().join("fake.sock");
        let walks = fake_server(&sock, ecode);
        let ctx = client(&format!("unix:{}", sock.display()), "cache=none");
        let before = walks.load(Ordering::SeqCst);
        let t0 = Instant::now();
        let r = ctx.fstatat(AT_FDCWD, b"/x", 0);
        assert!(
            t0.elapsed() < Duration::from_millis(500),
            "errno {ecode}: slow"
        );
        assert_eq!(r.err(), Some(want), "errno {ecode}");
        assert_eq!(
            walks.load(Ordering::SeqCst) - before,
            1,
            "errno {ecode}: Twalks for one lookup"
        );
    }
}

fn attach_as(s: &mut std::os::unix::net::UnixStream, fid: u32, uid: u32) {
    let r = rpc(
        s,
        1,
        Fcall::Tattach {
            fid,
            afid: walkfs_p9::NOFID,
            uname: Str(b""),
            aname: Str(b""),
            n_uname: uid,
        },
    )
    .expect("attach");
    assert!(
        matches!(decoded(&r), Fcall::Rattach { .. }),
        "{:?}",
        decoded(&r)
    );
}

/// The ids a client sends: a create's gid is taken as sent (9P2000.L
/// carries no supplementary groups, so the server cannot judge it), and
/// with `trust_client_permissions` group access the client kernel granted
/// is not refused again by the server's own user database.
#[test]
fn the_clients_ids_are_honoured() {
    if !walkfs_testkit::need_root("files owned by other users") {
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    for trust in [false, true] {
        let t = tempfile::tempdir().expect("tempdir");
        let dir = t.path().join("export");
        make_tree(&dir);
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).expect("chmod");
        std::fs::write(dir.join("group-only"), b"for group 65534").expect("write");
        std::os::unix::fs::chown(dir.join("group-only"), Some(0), Some(65534)).expect("chown");
        std::fs::set_permissions(
            dir.join("group-only"),
            std::fs::Permissions::from_mode(0o040),
        )
        .expect("chmod");
        let sock = t.path().join("s.sock");
        let cfg = walkfs_server::Config {
            trust_client_permissions: trust,
            ..Default::default()
        };
        let _server = serve_with(&dir, &sock, cfg);
        let mut s = raw(&sock);
        attach_as(&mut s, 1, 65533);
        let _ = walk_to(&mut s, 10, &[]);
        let r = rpc(
            &mut s,
            5,
            Fcall::Tlcreate {
                fid: 10,
                name: Str(b"made"),
                flags: libc::O_WRONLY as u32,
                mode: 0o644,
                gid: 65532,
            },
        )
        .expect("lcreate");
        assert!(
            matches!(decoded(&r), Fcall::Rlcreate { .. }),
            "{:?}",
            decoded(&r)
        );
        let md = std::fs::metadata(dir.join("made")).expect("made");
        assert_eq!((md.uid(), md.gid()), (65533, 65532), "trust={trust}");
        let r = rpc(
            &mut s,
            6,
            Fcall::Tmkdir {
                dfid: 1,
                name: Str(b"d"),
                mode: 0o755,
                gid: 65532,
            },
        )
        .expect("mkdir");
        assert!(matches!(decoded(&r), Fcall::Rmkdir { .. }));
        assert_eq!(std::fs::metadata(dir.join("d")).expect("d").gid(), 65532);
        // A write by a user who is not root drops the set-id bits of
        // root's file, trusted or not (no CAP_FSETID behind a uid != 0).
        std::fs::write(dir.join("setid"), b"x").expect("write");
        std::fs::set_permissions(dir.join("setid"), std::fs::Permissions::from_mode(0o6777))
            .expect("chmod");
        let _ = walk_to(&mut s, 12, &[b"setid"]);
        let r = rpc(
            &mut s,
            8,
            Fcall::Tlopen {
                fid: 12,
                flags: libc::O_WRONLY as u32,
            },
        )
        .expect("lopen");
        assert!(
            matches!(decoded(&r), Fcall::Rlopen { .. }),
            "{:?}",
            decoded(&r)
        );
        let r = rpc(
            &mut s,
            9,
            Fcall::Twrite {
                fid: 12,
                offset: 0,
                data: walkfs_p9::Data(b"y"),
            },
        )
        .expect("write");
        assert!(
            matches!(decoded(&r), Fcall::Rwrite { .. }),
            "{:?}",
            decoded(&r)
        );
        let mode = std::fs::metadata(dir.join("setid")).expect("setid").mode();
        assert_eq!(mode & 0o7777, 0o777, "trust={trust}: {mode:o}");
        // Group access by a group the server's user database does not
        // give uid 65533.
        let _ = walk_to(&mut s, 11, &[b"group-only"]);
        let r = rpc(&mut s, 7, Fcall::Tlopen { fid: 11, flags: 0 }).expect("lopen");
        if trust {
            assert!(
                matches!(decoded(&r), Fcall::Rlopen { .. }),
                "{:?}",
                decoded(&r)
            );
        } else {
            assert_eq!(errno_of(&r), Some(libc::EACCES as u32));
        }
    }
}

/// Treadlink of a fid that names no symlink is EINVAL, as readlink(2),
/// diod and QEMU answer (the vfs's readlinkat(fd, "") says ENOENT, as
/// Linux's does for a descriptor that is no symlink: the C ABI keeps
/// that, and the server must not pass it on).
#[test]
fn readlink_of_what_is_no_symlink_is_einval() {
    let t = tempfile::tempdir().expect("tempdir");
    let dir = t.path().join("export");
    make_tree(&dir);
    let sock = t.path().join("s.sock");
    let _server = serve(&dir, &sock);
    let mut s = raw(&sock);
    rpc(
        &mut s,
        1,
        Fcall::Tattach {
            fid: 1,
            afid: walkfs_p9::NOFID,
            uname: Str(b"root"),
            aname: Str(b""),
            n_uname: 0,
        },
    )
    .expect("attach");
    let readlink = |s: &mut std::os::unix::net::UnixStream, fid: u32| {
        let r = rpc(s, 9, Fcall::Treadlink { fid }).expect("a reply");
        match decoded(&r) {
            Fcall::Rreadlink { target } => Ok(target.0.to_vec()),
            Fcall::Rlerror { ecode } => Err(ecode),
            f => panic!("unexpected {f:?}"),
        }
    };
    walk(&mut s, 1, 2, &[b"hello.txt"]);
    walk(&mut s, 1, 3, &[b"usr"]);
    walk(&mut s, 1, 4, &[b"rel"]);
    assert_eq!(readlink(&mut s, 2), Err(libc::EINVAL as u32), "a file");
    assert_eq!(readlink(&mut s, 3), Err(libc::EINVAL as u32), "a directory");
    assert_eq!(readlink(&mut s, 1), Err(libc::EINVAL as u32), "the root");
    assert_eq!(
        readlink(&mut s, 4),
        Ok(b"usr/lib/gcc/crtendS.o".to_vec()),
        "a symlink"
    );
}
