//! Trees larger than any per-file resource: a 100,000-file tree served
//! by `walkfs serve` with a small fid limit (`--max-fids 256`) and a small
//! host descriptor cache, read by clients whose fid budget is smaller
//! still, so fids and descriptors are released and found again by name
//! all the time. Every answer is checked, the server's descriptors stay
//! bounded, and files renamed, replaced or removed on the host while
//! their fids were released are then found (or not) correctly, in
//! `cache=none` and `cache=coherent`; and the same through a FUSE mount.

mod common;

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, Instant};

use common::{serve, walkfs, Kill, Mount};
use walkfs_source::SourceOptions;
use walkfs_vfs::{Creds, Ctx, Errno, Vfs, AT_FDCWD};

const DIRS: usize = 100;
const PER_DIR: usize = 1000;

/// File `f` of directory `d`: empty but every 97th, which holds its own
/// name (so sizes differ and are checked).
fn make_tree(root: &Path, dirs: usize) {
    for d in 0..dirs {
        let dir = root.join(format!("d{d}"));
        std::fs::create_dir(&dir).expect("mkdir");
        for f in 0..PER_DIR {
            let p = dir.join(format!("f{f}"));
            let body = if f.is_multiple_of(97) {
                format!("d{d}/f{f}")
            } else {
                String::new()
            };
            std::fs::write(&p, body).expect("write");
        }
    }
}

fn expected_size(d: usize, f: usize) -> u64 {
    if f.is_multiple_of(97) {
        format!("d{d}/f{f}").len() as u64
    } else {
        0
    }
}

fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

fn client(sock: &Path, opts: &str) -> (Vfs, Ctx) {
    let o = SourceOptions::parse(opts).expect("options");
    let vfs = walkfs_source::open(&format!("unix:{}", sock.display()), &o).expect("attach");
    let ctx = vfs.context(Creds::root());
    (vfs, ctx)
}

fn ino(ctx: &Ctx, path: &str) -> Result<u64, Errno> {
    ctx.statx(AT_FDCWD, path.as_bytes(), libc::AT_SYMLINK_NOFOLLOW, 0x7ff)
        .map(|x| x.stx_ino)
}

/// `walkfs serve` of `dir` with a small fid limit and descriptor cache.
fn small_server(dir: &Path, sock: &Path) -> Kill {
    let child = walkfs()
        .args(["serve", dir.to_str().expect("utf8"), "--listen"])
        .arg(format!("unix:{}", sock.display()))
        .args(["--max-fids", "256", "-o", "host_fds=64"])
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start walkfs serve");
    let t0 = Instant::now();
    while std::os::unix::net::UnixStream::connect(sock).is_err() {
        assert!(t0.elapsed() < Duration::from_secs(10), "never listened");
        std::thread::sleep(Duration::from_millis(20));
    }
    Kill(child)
}

#[test]
fn a_100k_tree_through_a_small_fid_budget() {
    let t = tempfile::tempdir().expect("tempdir");
    let root = t.path().join("tree");
    std::fs::create_dir(&root).expect("mkdir");
    make_tree(&root, DIRS);
    let sock = t.path().join("s.sock");
    let server = small_server(&root, &sock);
    let pid = server.0.id();

    // Two clients, each with a 64-fid budget, stat every file at once in
    // opposite orders (each release races the other's walks).
    let peak = std::sync::atomic::AtomicUsize::new(0);
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                peak.fetch_max(open_fds(pid), std::sync::atomic::Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(10));
            }
        });
        let workers: Vec<_> = [false, true]
            .into_iter()
            .map(|rev| {
                let sock = &sock;
                s.spawn(move || {
                    let (vfs, ctx) = client(sock, "cache=loose,fids=64");
                    let mut order: Vec<usize> = (0..DIRS).collect();
                    if rev {
                        order.reverse();
                    }
                    for d in order {
                        for f in 0..PER_DIR {
                            let p = format!("/d{d}/f{f}");
                            let x = ctx
                                .statx(AT_FDCWD, p.as_bytes(), 0, 0x7ff)
                                .unwrap_or_else(|e| panic!("{p}: {e}"));
                            assert_eq!(x.stx_size, expected_size(d, f), "{p}");
                            assert_eq!(u32::from(x.stx_mode) & libc::S_IFMT, libc::S_IFREG);
                        }
                    }
                    let fs = vfs.remote_handles().expect("9p");
                    assert!(fs.held <= 64, "{fs:?}");
                    // 100,000 files known (each directory listed with
                    // attributes on its first miss, or walked to one by
                    // one), on 64 fids.
                    assert!(fs.nodes > 90_000 || fs.released > 90_000, "{fs:?}");
                    // A file's contents, through a fid walked to again.
                    let fd = ctx.openat(AT_FDCWD, b"/d7/f0", libc::O_RDONLY, 0);
                    let fd = fd.expect("open");
                    let mut buf = [0u8; 16];
                    let n = ctx.read(fd, &mut buf).expect("read");
                    assert_eq!(&buf[..n], b"d7/f0");
                    ctx.close(fd).expect("close");
                })
            })
            .collect();
        for w in workers {
            w.join().expect("client");
        }
        done.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    let peak = peak.into_inner();
    // 64 cached host descriptors, a few open files, the listener and the
    // connections, whatever the tree's size.
    assert!(
        peak > 0 && peak < 200,
        "server descriptors peaked at {peak}"
    );

    // Host changes made while the client's fids were released.
    for opts in ["cache=none,fids=8", "cache=coherent,fids=8"] {
        let (vfs, ctx) = client(&sock, opts);
        let (a, b, c, e) = (
            ino(&ctx, "/d1/f1").expect("a"),
            ino(&ctx, "/d1/f2").expect("b"),
            ino(&ctx, "/d1/f3").expect("c"),
            ino(&ctx, "/d1/f4").expect("e"),
        );
        assert!(ino(&ctx, "/d1/f1-moved").is_err());
        // Churn: every fid of d1's files goes (reading takes a fid; a
        // stat may be answered from a listing, which takes none).
        for f in 0..500 {
            let p = format!("/d2/f{f}");
            let fd = ctx.openat(AT_FDCWD, p.as_bytes(), libc::O_RDONLY, 0);
            let fd = fd.expect("churn");
            ctx.read(fd, &mut [0u8; 8]).expect("read");
            ctx.close(fd).expect("close");
        }
        let fs = vfs.remote_handles().expect("9p");
        assert!(fs.released > 400, "{opts}: {fs:?}");
        let d1 = root.join("d1");
        std::fs::rename(d1.join("f1"), d1.join("f1-moved")).expect("rename");
        std::fs::remove_file(d1.join("f2")).expect("rm");
        std::fs::write(d1.join("f2"), b"a new file").expect("replace");
        std::fs::remove_file(d1.join("f3")).expect("rm");
        // Replaced by a rename over it (a new inode for certain; f2's may
        // be its old number again, reused by the host).
        std::fs::write(d1.join("f4.tmp"), b"xyz").expect("write");
        std::fs::rename(d1.join("f4.tmp"), d1.join("f4")).expect("rename over");
        let new_b = std::fs::metadata(d1.join("f2")).expect("stat").ino();
        let new_e = std::fs::metadata(d1.join("f4")).expect("stat").ino();
        assert_ne!(new_e, e);
        let want = |ctx: &Ctx| {
            ino(ctx, "/d1/f1") == Err(Errno::ENOENT)
                && ino(ctx, "/d1/f1-moved") == Ok(a)
                && ino(ctx, "/d1/f2") == Ok(new_b)
                && ino(ctx, "/d1/f3") == Err(Errno::ENOENT)
                && ino(ctx, "/d1/f4") == Ok(new_e)
        };
        let t0 = Instant::now();
        while !want(&ctx) {
            assert!(
                t0.elapsed() < Duration::from_secs(2),
                "{opts}: f1 {:?}, f1-moved {:?} (was {a}), f2 {:?} (want {new_b}, was {b}), f3 {:?} (was {c})",
                ino(&ctx, "/d1/f1"),
                ino(&ctx, "/d1/f1-moved"),
                ino(&ctx, "/d1/f2"),
                ino(&ctx, "/d1/f3"),
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        let x = ctx.statx(AT_FDCWD, b"/d1/f2", 0, 0x7ff).expect("stat");
        assert_eq!(x.stx_size, 10);
        let x = ctx.statx(AT_FDCWD, b"/d1/f4", 0, 0x7ff).expect("stat");
        assert_eq!(x.stx_size, 3);
        // Put the tree back for the next mode.
        std::fs::rename(d1.join("f1-moved"), d1.join("f1")).expect("rename");
        std::fs::write(d1.join("f3"), b"").expect("recreate");
    }
    drop(server);
}

#[test]
fn a_fuse_mount_holds_more_files_than_its_fid_and_descriptor_budgets() {
    let t = tempfile::tempdir().expect("tempdir");
    let root = t.path().join("tree");
    let mnt = t.path().join("mnt");
    std::fs::create_dir(&root).expect("mkdir");
    std::fs::create_dir(&mnt).expect("mkdir");
    make_tree(&root, 20);
    let sock = t.path().join("s.sock");
    let server = serve(&root, &sock);
    let _m = Mount::new(
        Path::new(&format!("unix:{}", sock.display())),
        &mnt,
        "fids=32",
    );
    // Everything, twice (the second time through released fids).
    for _ in 0..2 {
        for d in 0..20 {
            for f in 0..PER_DIR {
                let m = std::fs::symlink_metadata(mnt.join(format!("d{d}/f{f}")))
                    .expect("stat through the mount");
                assert_eq!(m.len(), expected_size(d, f));
            }
        }
    }
    // Extract a tree onto the mount: files made through it and read back.
    let dst = mnt.join("copy");
    std::fs::create_dir(&dst).expect("mkdir");
    for f in 0..3000 {
        std::fs::write(dst.join(format!("n{f}")), format!("{f}")).expect("create");
    }
    for f in (0..3000).rev() {
        let body = std::fs::read(dst.join(format!("n{f}"))).expect("read back");
        assert_eq!(body, format!("{f}").into_bytes());
    }
    assert!(open_fds(server.0.id()) < 2600);
    let stats = walkfs()
        .args(["stats", mnt.to_str().expect("utf8"), "--json"])
        .output()
        .expect("stats");
    let s: serde_json::Value = serde_json::from_slice(&stats.stdout).expect("json");
    let res: std::collections::HashMap<String, u64> =
        serde_json::from_value::<Vec<(String, u64)>>(s["resources"].clone())
            .expect("resources")
            .into_iter()
            .collect();
    // Fids: the budget, plus the nodes with a file open (the mount keeps
    // at most io_fds_max files open for handle-less I/O).
    assert!(res["9p_fids_held"] <= 32 + res["io_fds_max"] + 4, "{res:?}");
    assert!(res["nodes"] > 20_000, "{res:?}");
}
