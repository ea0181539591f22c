//! The whole stack in one process (vfs -> 9P client -> walkfs serve ->
//! host directory) with asynchronous changes: the server keeps a
//! connection's order, errors the server meets later are reported at
//! fsync and syncfs, and directories listed with attributes answer
//! lookups without round trips.

use std::process::Command;

use walkfs_source::{open_served, ServerConfig, SourceOptions};
use walkfs_vfs::{Creds, Errno, Vfs, AT_FDCWD};

fn stack(dir: &std::path::Path, opts: &str) -> Vfs {
    let o = SourceOptions::parse(opts).expect("options");
    open_served(dir.to_str().expect("utf8"), &o, ServerConfig::default()).expect("open")
}

fn rpcs(vfs: &Vfs) -> u64 {
    vfs.rpc_stats().expect("9p").total_rpcs
}

/// Unlinks sent without waiting, then the directory's rmdir: the server
/// runs them in arrival order, so the rmdir finds the directory empty.
#[test]
fn dependent_changes_sent_without_waiting_run_in_order() {
    let t = tempfile::tempdir().expect("tempdir");
    let vfs = stack(t.path(), "cache=loose,negtimeout=-1");
    let ctx = vfs.context(Creds::root());
    for round in 0..5 {
        let d = format!("/d{round}");
        ctx.mkdirat(AT_FDCWD, d.as_bytes(), 0o755).expect("mkdir");
        for i in 0..60 {
            let p = format!("{d}/f{i}");
            let fd = ctx
                .openat(
                    AT_FDCWD,
                    p.as_bytes(),
                    libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY,
                    0o644,
                )
                .expect("create");
            ctx.write(fd, b"data").expect("write");
            ctx.close(fd).expect("close");
        }
        let before = vfs.write_back_stats().submitted;
        for i in 0..60 {
            ctx.unlinkat(AT_FDCWD, format!("{d}/f{i}").as_bytes(), 0)
                .expect("unlink");
        }
        assert!(
            vfs.write_back_stats().submitted >= before + 59,
            "unlinks were not sent asynchronously"
        );
        // The rmdir runs behind them too (the cache knows the directory
        // empty); the server, taking them in order, finds it empty.
        ctx.unlinkat(AT_FDCWD, d.as_bytes(), libc::AT_REMOVEDIR)
            .expect("rmdir after the unlinks");
        assert_eq!(vfs.sync(), Ok(()), "the server refused the rmdir");
        assert!(!t.path().join(&d[1..]).exists());
    }
    // Writes and the times set after them land in that order too.
    let fd = ctx
        .openat(AT_FDCWD, b"/t", libc::O_CREAT | libc::O_WRONLY, 0o644)
        .expect("create");
    ctx.write(fd, &[7u8; 100_000]).expect("write");
    ctx.close(fd).expect("close");
    let when = walkfs_vfs::Timespec {
        sec: 1_000_000,
        nsec: 5,
    };
    ctx.utimensat(
        AT_FDCWD,
        b"/t",
        [
            Some(walkfs_vfs::TimeSet::At(when)),
            Some(walkfs_vfs::TimeSet::At(when)),
        ],
        0,
    )
    .expect("utimensat");
    let fd = ctx
        .openat(AT_FDCWD, b"/", libc::O_RDONLY, 0)
        .expect("open /");
    ctx.syncfs(fd).expect("syncfs");
    let md = std::fs::metadata(t.path().join("t")).expect("on the host");
    assert_eq!(md.len(), 100_000);
    use std::os::unix::fs::MetadataExt;
    assert_eq!((md.mtime(), md.mtime_nsec()), (1_000_000, 5));
}

/// A server that runs out of space after it answered nothing yet: the
/// write succeeds at once, fsync and syncfs report ENOSPC (each once),
/// the error is counted, and the cached size is corrected to what the
/// server has. With sync_metadata=1 the write itself fails.
#[test]
fn errors_the_server_meets_later_are_reported_at_fsync_and_syncfs() {
    let t = tempfile::tempdir().expect("tempdir");
    let small = t.path().join("small");
    std::fs::create_dir(&small).expect("mkdir");
    let ok = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=256k", "tmpfs"])
        .arg(&small)
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        walkfs_testkit::skip("cannot mount a tmpfs here (needs root)");
        return;
    }
    struct Umount(std::path::PathBuf);
    impl Drop for Umount {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        }
    }
    let _u = Umount(small.clone());
    let vfs = stack(&small, "cache=loose,negtimeout=-1");
    let ctx = vfs.context(Creds::root());
    let fd = ctx
        .openat(AT_FDCWD, b"/big", libc::O_CREAT | libc::O_RDWR, 0o644)
        .expect("create");
    let chunk = vec![1u8; 64 * 1024];
    for i in 0..16u64 {
        // Answered before the server has it.
        assert_eq!(
            ctx.pwrite(fd, &chunk, i * chunk.len() as u64),
            Ok(chunk.len())
        );
    }
    let root = ctx
        .openat(AT_FDCWD, b"/", libc::O_RDONLY, 0)
        .expect("open /");
    assert_eq!(ctx.syncfs(root), Err(Errno::ENOSPC));
    assert_eq!(ctx.syncfs(root), Ok(()), "reported once");
    assert_eq!(ctx.fsync(fd), Err(Errno::ENOSPC));
    assert_eq!(ctx.fsync(fd), Ok(()), "reported once");
    assert!(vfs.write_back_stats().failed >= 1);
    // The cache no longer claims the 1 MiB the server never stored.
    let on_host = std::fs::metadata(small.join("big"))
        .expect("on the host")
        .len();
    assert!(on_host < 16 * 64 * 1024);
    let mut seen = 0;
    for _ in 0..100 {
        seen = ctx.fstatx(fd, libc::STATX_SIZE).expect("fstatx").stx_size;
        if seen == on_host {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(seen, on_host);
    ctx.close(fd).expect("close");
    ctx.unlinkat(AT_FDCWD, b"/big", 0).expect("unlink");
    let _ = ctx.fsync(root);

    // Waiting for every change: the write reports it itself.
    let vfs = stack(&small, "cache=loose,negtimeout=-1,sync_metadata=1");
    let ctx = vfs.context(Creds::root());
    let fd = ctx
        .openat(AT_FDCWD, b"/big2", libc::O_CREAT | libc::O_RDWR, 0o644)
        .expect("create");
    let mut err = None;
    for i in 0..16u64 {
        match ctx.pwrite(fd, &chunk, i * chunk.len() as u64) {
            Ok(n) if n == chunk.len() => {}
            Ok(_) => {}
            Err(e) => {
                err = Some(e);
                break;
            }
        }
    }
    assert_eq!(err, Some(Errno::ENOSPC));
    assert_eq!(vfs.write_back_stats().submitted, 0);
}

/// A directory listed with attributes: every entry's lookup, its stat,
/// a symlink's body and a name that does not exist cost no round trip,
/// and agree with the host.
#[test]
fn a_listed_directory_answers_lookups_without_round_trips() {
    let t = tempfile::tempdir().expect("tempdir");
    let d = t.path().join("d");
    std::fs::create_dir(&d).expect("mkdir");
    for i in 0..50 {
        std::fs::write(d.join(format!("f{i}")), vec![b'x'; i]).expect("write");
    }
    std::fs::create_dir(d.join("sub")).expect("mkdir");
    std::os::unix::fs::symlink("f3", d.join("ln")).expect("symlink");
    let vfs = stack(t.path(), "cache=loose,negtimeout=-1");
    let ctx = vfs.context(Creds::root());
    let fd = ctx
        .openat(AT_FDCWD, b"/d", libc::O_RDONLY | libc::O_DIRECTORY, 0)
        .expect("open");
    let names: Vec<Vec<u8>> = ctx
        .getdents(fd)
        .expect("getdents")
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert_eq!(names.len(), 52 + 2);
    let before = rpcs(&vfs);
    for i in 0..50 {
        let st = ctx
            .fstatat(
                AT_FDCWD,
                format!("/d/f{i}").as_bytes(),
                libc::AT_SYMLINK_NOFOLLOW,
            )
            .expect("stat");
        let host = std::fs::symlink_metadata(d.join(format!("f{i}"))).expect("host");
        use std::os::unix::fs::MetadataExt;
        assert_eq!(
            (st.st_size as u64, st.st_ino, st.st_mode),
            (host.len(), host.ino(), host.mode())
        );
    }
    assert_eq!(ctx.readlinkat(AT_FDCWD, b"/d/ln"), Ok(b"f3".to_vec()));
    assert_eq!(
        ctx.fstatat(AT_FDCWD, b"/d/missing", 0).map(|_| ()),
        Err(Errno::ENOENT)
    );
    assert_eq!(
        rpcs(&vfs),
        before,
        "lookups in a listed directory went to the server"
    );
    ctx.close(fd).expect("close");
}

/// Listing a directory asks for its subdirectories' listings ahead; one
/// is used only while it is as fresh as the client's own view: not after
/// a change the client sent since, nor once older than a second (a host
/// change made meanwhile is then seen).
#[test]
fn subdirectories_are_read_ahead_and_used_only_while_fresh() {
    let t = tempfile::tempdir().expect("tempdir");
    let a = t.path().join("a");
    for s in 0..4 {
        let sub = a.join(format!("s{s}"));
        std::fs::create_dir_all(sub.join("deep")).expect("mkdir");
        for i in 0..5 {
            std::fs::write(sub.join(format!("x{i}")), b"x").expect("write");
        }
    }
    let vfs = stack(t.path(), "cache=loose,negtimeout=-1");
    let ctx = vfs.context(Creds::root());
    let list = |p: &str| -> Vec<Vec<u8>> {
        let fd = ctx
            .openat(
                AT_FDCWD,
                p.as_bytes(),
                libc::O_RDONLY | libc::O_DIRECTORY,
                0,
            )
            .expect("open");
        let mut v: Vec<Vec<u8>> = ctx
            .getdents(fd)
            .expect("getdents")
            .into_iter()
            .map(|e| e.name)
            .filter(|n| n != b"." && n != b"..")
            .collect();
        ctx.close(fd).expect("close");
        v.sort();
        v
    };
    let host = |p: &str| -> Vec<Vec<u8>> {
        use std::os::unix::ffi::OsStrExt;
        let mut v: Vec<Vec<u8>> = std::fs::read_dir(t.path().join(p))
            .expect("host")
            .map(|e| e.expect("entry").file_name().as_bytes().to_vec())
            .collect();
        v.sort();
        v
    };
    let counts = || {
        let s = vfs.cache_stats();
        (s.readahead_used, s.readahead_wasted)
    };
    assert_eq!(list("/a").len(), 4);
    // Every reply in: the host change below comes after the listings.
    std::thread::sleep(std::time::Duration::from_millis(200));
    let (used, wasted) = counts();
    assert_eq!(list("/a/s0"), host("a/s0"));
    assert_eq!(counts(), (used + 1, wasted), "s0 was not read ahead");

    // A change to the names of another directory (s0) since the ask
    // leaves s1's listing as good as a new one: it is used.
    ctx.unlinkat(AT_FDCWD, b"/a/s0/x0", 0).expect("unlink");
    assert_eq!(list("/a/s1"), host("a/s1"));
    assert_eq!(counts(), (used + 2, wasted), "s1's listing was not used");
    // The walk that listed s1 left its fid with s1: emptying it (what
    // `rm -rf` does next) walks nowhere.
    let walks = || {
        vfs.rpc_stats()
            .expect("9p")
            .rpcs
            .iter()
            .find(|(n, _)| *n == "Twalk")
            .map_or(0, |(_, c)| *c)
    };
    let before = walks();
    for i in 0..5 {
        let p = format!("/a/s1/x{i}");
        ctx.unlinkat(AT_FDCWD, p.as_bytes(), 0).expect("unlink");
    }
    vfs.sync().expect("sync");
    assert_eq!(walks(), before, "an unlink in a listed directory walked");
    assert_eq!(host("a/s1"), [b"deep".to_vec()]);

    // A change of permissions since (anywhere): s2's listing may show it
    // wrong, and is not used.
    ctx.fchmodat(AT_FDCWD, b"/a/s0/x1", 0o600, 0)
        .expect("chmod");
    assert_eq!(list("/a/s2"), host("a/s2"));
    assert_eq!(counts(), (used + 2, wasted + 1), "a stale listing was used");

    // Older than a second: a file the host made meanwhile is listed.
    std::fs::write(a.join("s3/new"), b"n").expect("host write");
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let got = list("/a/s3");
    assert!(got.contains(&b"new".to_vec()), "an old listing was used");
    assert_eq!(got, host("a/s3"));
    assert_eq!(counts(), (used + 2, wasted + 2));
}

/// With cache=coherent a miss lists its small directory: the listing
/// answers the miss itself (no lookup of the name follows), but it is not
/// trusted for later misses of other names, so a name the host makes next
/// is found at once.
#[test]
fn a_coherent_miss_is_answered_by_the_listing_it_makes() {
    let t = tempfile::tempdir().expect("tempdir");
    let d = t.path().join("d");
    std::fs::create_dir(&d).expect("mkdir");
    for i in 0..20 {
        std::fs::write(d.join(format!("f{i}")), b"x").expect("write");
    }
    let vfs = stack(t.path(), "cache=coherent");
    let ctx = vfs.context(Creds::root());
    let getattrs = || {
        let s = vfs.rpc_stats().expect("9p");
        s.rpcs
            .iter()
            .find(|(n, _)| *n == "Tgetattr")
            .map_or(0, |&(_, c)| c)
    };
    ctx.fstatat(AT_FDCWD, b"/d", 0).expect("stat /d");
    let before = getattrs();
    assert_eq!(
        ctx.fstatat(AT_FDCWD, b"/d/missing", 0).map(|_| ()),
        Err(Errno::ENOENT)
    );
    for i in 0..20 {
        ctx.fstatat(AT_FDCWD, format!("/d/f{i}").as_bytes(), 0)
            .expect("listed");
    }
    assert_eq!(getattrs(), before, "names were looked up one by one");
    // A name never looked up, made on the host: asked for, not denied
    // on the listing's word.
    std::fs::write(d.join("other"), b"now").expect("host write");
    let st = ctx
        .fstatat(AT_FDCWD, b"/d/other", 0)
        .expect("made on the host");
    assert_eq!(st.st_size, 3);
}

/// Read through vfs descriptor `fd` to its end.
fn read_all(ctx: &walkfs_vfs::Ctx, fd: i32) -> Vec<u8> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; 4096];
    loop {
        let n = ctx.read(fd, &mut buf).expect("read");
        if n == 0 {
            return out;
        }
        out.extend_from_slice(&buf[..n]);
    }
}

/// A reader going through a directory's small files in name order gets
/// the next ones opened and read ahead; one the client changed since it
/// was asked for is read anew, and a reader in another order asks for
/// nothing.
#[test]
fn small_files_read_in_order_are_read_ahead() {
    let t = tempfile::tempdir().expect("tempdir");
    for dir in ["d", "e"] {
        let d = t.path().join(dir);
        std::fs::create_dir(&d).expect("mkdir");
        for i in 0..20 {
            let body: Vec<u8> = (0..i * 997).map(|b| (b % 251) as u8).collect();
            std::fs::write(d.join(format!("f{i:02}")), body).expect("write");
        }
    }
    let vfs = stack(t.path(), "cache=loose,negtimeout=-1");
    let ctx = vfs.context(Creds::root());
    let list = |p: &[u8]| {
        let fd = ctx
            .openat(AT_FDCWD, p, libc::O_RDONLY | libc::O_DIRECTORY, 0)
            .expect("open");
        assert_eq!(ctx.getdents(fd).expect("getdents").len(), 22);
        ctx.close(fd).expect("close");
    };
    let cat = |p: &str| {
        let fd = ctx
            .openat(AT_FDCWD, p.as_bytes(), libc::O_RDONLY, 0)
            .expect("open");
        let got = read_all(&ctx, fd);
        ctx.close(fd).expect("close");
        got
    };
    let stats = || {
        let s = vfs.cache_stats();
        (s.fileahead_asked, s.fileahead_used, s.fileahead_wasted)
    };
    list(b"/d");
    for i in 0..20 {
        if i == 5 {
            // f06, asked for already, changed through the client.
            let fd = ctx
                .openat(AT_FDCWD, b"/d/f06", libc::O_WRONLY | libc::O_TRUNC, 0)
                .expect("open");
            assert_eq!(ctx.write(fd, b"changed"), Ok(7));
            ctx.close(fd).expect("close");
        }
        let want = if i == 6 {
            b"changed".to_vec()
        } else {
            std::fs::read(t.path().join(format!("d/f{i:02}"))).expect("host")
        };
        assert_eq!(cat(&format!("/d/f{i:02}")), want, "f{i:02}");
    }
    vfs.sync().expect("sync");
    assert_eq!(
        std::fs::read(t.path().join("d/f06")).expect("host"),
        b"changed"
    );
    let (asked, used, wasted) = stats();
    assert!(used >= 15, "{used} of {asked} files read ahead were used");
    assert!(
        wasted >= 1,
        "the file changed since it was asked for was used"
    );

    // Backwards: nothing is asked for.
    list(b"/e");
    for i in (0..20).rev() {
        let host = std::fs::read(t.path().join(format!("e/f{i:02}"))).expect("host");
        assert_eq!(cat(&format!("/e/f{i:02}")), host);
    }
    assert_eq!(stats().0, asked);
}
