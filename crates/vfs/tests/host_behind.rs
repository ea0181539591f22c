//! hostfs with its changes run behind the caller (`host_behind=1`,
//! hostfs behind.rs): the same program run through a vfs over a host
//! directory with the engine on and off leaves the same tree on the host,
//! and what the vfs answers meanwhile is what the host then holds.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::Arc;

use walkfs_vfs::{Creds, Ctx, Errno, Options, TimeSet, Timespec, Vfs, AT_FDCWD};

fn vfs_over(dir: &Path, behind: bool) -> (Vfs, Arc<walkfs_hostfs::HostFs>) {
    let fs = Arc::new(walkfs_hostfs::HostFs::new(dir).expect("hostfs"));
    fs.set_changes_behind(behind);
    let vfs = Vfs::new(fs.clone(), &Options::default()).expect("vfs");
    (vfs, fs)
}

fn write_file(c: &Ctx, path: &str, body: &[u8], mode: u32) {
    let fd = c
        .openat(
            AT_FDCWD,
            path.as_bytes(),
            libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY,
            mode,
        )
        .expect("create");
    assert_eq!(c.write(fd, body).expect("write"), body.len());
    c.close(fd).expect("close");
}

/// What a build and a clean-up do: a tree made, its files written and
/// given modes and times (as tar does), some renamed over others and
/// some removed, whole directories removed depth first (as `rm -r`),
/// one directory renamed over an emptied one.
fn program(c: &Ctx, hold: &dyn Fn()) {
    for d in ["/a", "/a/b", "/a/b/c", "/keep", "/over"] {
        c.mkdirat(AT_FDCWD, d.as_bytes(), 0o755).expect("mkdir");
    }
    for i in 0..40 {
        let dir = ["/a", "/a/b", "/a/b/c", "/a", "/a/b"][i % 5];
        let path = format!("{dir}/f{i}");
        write_file(c, &path, format!("body {i}\n").as_bytes(), 0o600);
        c.fchmodat(AT_FDCWD, path.as_bytes(), 0o640 + (i as u32 % 2), 0)
            .expect("chmod");
        let t = Timespec {
            sec: 1_600_000_000 + i as i64,
            nsec: 0,
        };
        c.utimensat(
            AT_FDCWD,
            path.as_bytes(),
            [Some(TimeSet::At(t)), Some(TimeSet::At(t))],
            0,
        )
        .expect("utimes");
    }
    write_file(c, "/over/x", b"to be emptied", 0o644);
    // Renames over existing files, then unlinks.
    c.renameat2(AT_FDCWD, b"/a/f0", AT_FDCWD, b"/a/f5", 0)
        .expect("rename over");
    c.renameat2(AT_FDCWD, b"/a/b/f1", AT_FDCWD, b"/keep/moved", 0)
        .expect("rename across");
    c.unlinkat(AT_FDCWD, b"/a/b/c/f2", 0).expect("unlink");
    // A file truncated and appended to.
    let fd = c
        .openat(AT_FDCWD, b"/a/f10", libc::O_WRONLY, 0)
        .expect("open");
    c.ftruncate(fd, 2).expect("truncate");
    c.pwrite(fd, b"++", 2).expect("pwrite");
    c.close(fd).expect("close");
    // Its times set after the writes (the trees are compared with their
    // mtimes: "now" would differ between the two runs).
    let t = Timespec {
        sec: 1_500_000_000,
        nsec: 0,
    };
    c.utimensat(
        AT_FDCWD,
        b"/a/f10",
        [Some(TimeSet::At(t)), Some(TimeSet::At(t))],
        0,
    )
    .expect("utimes");
    // Every name of /gone looked up (cached), then the queue held: the
    // unlinks below are answered at once and stay queued, and each
    // rmdir must wait for them.
    for i in 0..40 {
        let sub = if i % 2 == 0 { "/gone" } else { "/gone/sub" };
        c.fstatat(AT_FDCWD, format!("{sub}/f{i}").as_bytes(), 0)
            .expect("stat");
    }
    hold();
    // rm -r /gone (made on the host before: the vfs does not know these
    // directories whole, so each rmdir is the host's to refuse), depth
    // first: each rmdir right after its unlinks.
    for dir in ["/gone/sub", "/gone"] {
        for i in 0..40 {
            let path = format!("{dir}/f{i}");
            match c.unlinkat(AT_FDCWD, path.as_bytes(), 0) {
                Ok(()) | Err(Errno::ENOENT) => {}
                Err(e) => panic!("unlink {path}: {e:?}"),
            }
        }
        c.unlinkat(AT_FDCWD, dir.as_bytes(), libc::AT_REMOVEDIR)
            .unwrap_or_else(|e| panic!("rmdir {dir}: {e:?}"));
    }
    // A directory renamed over one just emptied.
    c.unlinkat(AT_FDCWD, b"/over/x", 0).expect("unlink");
    c.renameat2(AT_FDCWD, b"/a/b/c", AT_FDCWD, b"/over", 0)
        .expect("rename dir over emptied dir");
}

/// A tree the host made before the vfs was: /gone/f*, /gone/sub/f*.
fn host_tree(dir: &Path) {
    std::fs::create_dir_all(dir.join("gone/sub")).expect("mkdir");
    for i in 0..40 {
        let sub = if i % 2 == 0 { "gone" } else { "gone/sub" };
        std::fs::write(dir.join(format!("{sub}/f{i}")), b"old").expect("write");
    }
}

/// path -> (mode, size, mtime, body) of everything under `root`.
fn tree(root: &Path) -> BTreeMap<String, (u32, u64, i64, Vec<u8>)> {
    let mut out = BTreeMap::new();
    let mut todo = vec![root.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).expect("read_dir") {
            let e = e.expect("entry");
            let m = std::fs::symlink_metadata(e.path()).expect("stat");
            let rel = e
                .path()
                .strip_prefix(root)
                .expect("rel")
                .display()
                .to_string();
            let body = if m.is_file() {
                std::fs::read(e.path()).expect("read")
            } else {
                todo.push(e.path());
                Vec::new()
            };
            let mtime = if m.is_dir() { 0 } else { m.mtime() };
            let size = if m.is_dir() { 0 } else { m.size() };
            out.insert(rel, (m.mode(), size, mtime, body));
        }
    }
    out
}

#[test]
fn the_host_tree_is_the_same_with_changes_behind() {
    let (on, off) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut trees = Vec::new();
    for (dir, behind) in [(on.path(), true), (off.path(), false)] {
        host_tree(dir);
        let (vfs, fs) = vfs_over(dir, behind);
        let c = vfs.context(Creds::root());
        // The queue held a while: every call that depends on a change
        // queued before it must wait for it (an rmdir for the unlinks in
        // the directory, a rename over a directory for its emptying).
        let release = std::sync::Mutex::new(None);
        let hold = || {
            fs.hold_changes_behind(true);
            let fs = fs.clone();
            *release.lock().unwrap() = Some(std::thread::spawn(move || {
                std::thread::sleep(std::time::Duration::from_millis(300));
                fs.hold_changes_behind(false);
            }));
        };
        program(&c, &hold);
        if let Some(t) = release.lock().unwrap().take() {
            t.join().expect("release");
        }
        // What the vfs shows before anything was waited for ...
        let st = c.fstatat(AT_FDCWD, b"/a/f5", 0).expect("stat");
        assert_eq!(st.st_mode & 0o7777, 0o640);
        assert_eq!(st.st_mtime, 1_600_000_000);
        vfs.sync().expect("sync");
        // ... is what the host holds once it was.
        let host = std::fs::metadata(dir.join("a/f5")).expect("host stat");
        assert_eq!((host.mode() & 0o7777, host.mtime()), (0o640, 1_600_000_000));
        drop(c);
        drop(vfs);
        drop(fs);
        trees.push(tree(dir));
    }
    assert!(trees[0].contains_key("keep/moved") && !trees[0].contains_key("gone"));
    assert_eq!(trees[0], trees[1]);
}

#[test]
fn a_change_the_host_refuses_later_is_reported_at_sync() {
    let dir = tempfile::tempdir().unwrap();
    let (vfs, _fs) = vfs_over(dir.path(), true);
    let c = vfs.context(Creds::root());
    c.mkdirat(AT_FDCWD, b"/d", 0o755).expect("mkdir");
    write_file(&c, "/d/f", b"x", 0o644);
    vfs.sync().expect("sync");
    // The host takes the file away behind the vfs's back; the vfs still
    // knows the name, answers the unlink, and the host refuses it.
    std::fs::remove_file(dir.path().join("d/f")).expect("host rm");
    assert_eq!(c.unlinkat(AT_FDCWD, b"/d/f", 0), Ok(()));
    assert_eq!(vfs.sync(), Err(Errno::ENOENT));
    // Reported once.
    assert_eq!(vfs.sync(), Ok(()));
}
