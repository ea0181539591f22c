//! Attributes that settle true: files made through a 9P mount are answered
//! from the cache (the client's clock, a new directory's size 0), and once
//! the changes have landed the mount shows the server's attributes, so a
//! program comparing stat snapshots across a remount sees no change that
//! did not happen (git's index, rsync, make).

mod common;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use common::Mount;

/// What a stat snapshot compares (git's index keeps these), less the
/// inode number, which the host shows differently for files made through
/// a grant.
type Seen = (u64, u32, u64, i64, i64, i64, i64);

fn seen(p: &Path) -> Seen {
    seen_now(p).expect("lstat")
}

fn seen_now(p: &Path) -> Option<Seen> {
    let m = std::fs::symlink_metadata(p).ok()?;
    Some((
        m.size(),
        m.mode(),
        m.nlink(),
        m.mtime(),
        m.mtime_nsec(),
        m.ctime(),
        m.ctime_nsec(),
    ))
}

fn snapshot(root: &Path, names: &[PathBuf]) -> Vec<(PathBuf, Seen, u64)> {
    names
        .iter()
        .map(|n| {
            let p = root.join(n);
            let ino = std::fs::symlink_metadata(&p).expect("lstat").ino();
            (n.clone(), seen(&p), ino)
        })
        .collect()
}

/// Make a tree through a mount (`opts`) of a 9P source, wait until the
/// mount shows what the host shows for every name `check` picks, and
/// return the mount's snapshot of them.
fn made_and_settled(
    d: &common::Dirs,
    opts: &str,
    check: impl Fn(&Path) -> bool,
) -> Vec<(PathBuf, Seen, u64)> {
    let m = Mount::via_9p(&d.src, &d.mnt, opts);
    let sub = m.mnt.join("sub");
    std::fs::create_dir(&sub).expect("mkdir");
    for i in 0..20 {
        let p = sub.join(format!("f{i}"));
        std::fs::write(&p, vec![b'x'; 100 + i]).expect("write");
        if i % 3 == 0 {
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        }
    }
    std::os::unix::fs::symlink("f1", sub.join("link")).expect("symlink");
    std::fs::create_dir(sub.join("empty")).expect("mkdir");
    common::run(common::walkfs().arg("sync").arg(&m.mnt));
    // Named, not listed: a listing through the mount brings the server's
    // attributes with it (readdirplus) and would settle them itself.
    let mut names: Vec<PathBuf> = ["sub", "sub/link", "sub/empty"]
        .iter()
        .map(PathBuf::from)
        .chain((0..20).map(|i| PathBuf::from(format!("sub/f{i}"))))
        .filter(|n| check(&m.mnt.join(n)))
        .collect();
    names.sort();
    let t0 = std::time::Instant::now();
    loop {
        let wrong: Vec<_> = names
            .iter()
            .filter(|n| seen_now(&m.mnt.join(n)) != seen_now(&d.src.join(n)))
            .collect();
        if wrong.is_empty() {
            break;
        }
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(10),
            "attributes never settled for {} of {}: {:?}: mount {:?}, host {:?}",
            wrong.len(),
            names.len(),
            wrong[0],
            seen_now(&m.mnt.join(wrong[0])),
            seen_now(&d.src.join(wrong[0]))
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    snapshot(&m.mnt, &names)
}

#[test]
fn attributes_made_behind_settle_to_the_servers_and_survive_a_remount() {
    // Without the kernel's write-back cache, which owns a regular file's
    // times and size while it caches the file (docs/write-back.md).
    let d = common::dirs();
    let before = made_and_settled(&d, "cache=loose,writeback_cache=0", |_| true);
    assert_eq!(before.len(), 23, "{before:?}");
    assert_eq!(
        std::fs::read_dir(d.src.join("sub")).expect("host").count(),
        22,
        "every file reached the host"
    );
    let m = Mount::via_9p(&d.src, &d.mnt, "cache=loose,writeback_cache=0");
    let names: Vec<PathBuf> = before.iter().map(|b| b.0.clone()).collect();
    assert_eq!(
        snapshot(&m.mnt, &names),
        before,
        "stat snapshots across a remount"
    );
}

#[test]
#[ignore = "flaky since the host watcher gathers bursts (2026-11-28): one CI run in two left one node unsettled after 10 s; run with --ignored"]
fn with_the_kernels_write_back_cache_directories_and_links_settle() {
    let d = common::dirs();
    let settled = made_and_settled(&d, "cache=loose", |p| !p.is_file() || p.is_symlink());
    assert_eq!(settled.len(), 3, "{settled:?}");
}

/// fsx's "Size error" (xfstests generic/091, 263, 760 through a served
/// mount): a truncate, an O_DIRECT write past the new end, a read, then a
/// stat. The truncate's completion asked the server for the attributes
/// while the write was still gathered, the read sent the write and it
/// landed before the answer came, and the answer (the truncated size)
/// replaced the written one. Before the fix a run of 2,000 rounds saw it
/// a few times.
const SIZE_ROUNDS: &str = r#"
import mmap, os, sys
fd = os.open(os.path.join(sys.argv[1], "f"), os.O_RDWR | os.O_CREAT | os.O_DIRECT, 0o644)
buf = mmap.mmap(-1, 0x10000)
buf.write(b"x" * 0x10000)
bad = []
for i in range(2000):
    os.ftruncate(fd, 0x3c000)
    os.pwrite(fd, memoryview(buf)[:0x8000], 0x70000)
    if os.preadv(fd, [memoryview(buf)[:0xd000]], 0x56000) != 0xd000:
        bad.append((i, "short read"))
    size = os.fstat(fd).st_size
    if size != 0x78000:
        bad.append((i, hex(size)))
print(bad[:5], len(bad))
"#;

#[test]
fn a_write_past_a_truncate_keeps_its_size_while_the_truncate_settles() {
    if !walkfs_testkit::need_fuse() || !walkfs_testkit::need_program("python3", "-V", "python3") {
        return;
    }
    let d = common::dirs();
    let _server = common::serve(&d.src, &d.sock);
    let _m = Mount::new(Path::new(&format!("unix:{}", d.sock.display())), &d.mnt, "");
    assert_eq!(common::python(SIZE_ROUNDS, &[&d.mnt]).trim(), "[] 0");
    assert_eq!(
        std::fs::metadata(d.src.join("f")).expect("host").len(),
        0x78000,
        "the host file"
    );
}
