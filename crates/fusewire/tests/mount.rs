//! The prototype server on a real FUSE mount: over /dev/fuse, and over
//! io_uring where the kernel offers it. Needs root and /dev/fuse (skipped
//! with a message otherwise; a failure under CI, see walkfs-testkit).

use std::os::unix::fs::DirEntryExt;
use std::path::Path;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

use walkfs_fusewire::{kmount, proto, Config, SessionInfo, Transport};

fn can_mount() -> bool {
    walkfs_testkit::need_fuse()
}

struct Mounted(std::path::PathBuf);

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = kmount::unmount(&self.0);
    }
}

fn mount(dir: &Path, tree: &Arc<proto::Tree>, uring: bool) -> (Mounted, Arc<SessionInfo>) {
    let spec = kmount::Spec {
        fsname: "walkfs-proto-test",
        read_only: true,
        default_permissions: true,
        allow_other: false,
        flags: libc::MS_NOSUID | libc::MS_NODEV,
    };
    let fd = kmount::mount(dir, &spec).expect("mount");
    let cfg = Config {
        threads: 2,
        transport: if uring {
            Transport::Uring
        } else {
            Transport::Dev
        },
        ..Config::default()
    };
    let info = proto::serve(tree, fd, cfg).expect("session");
    (Mounted(dir.to_path_buf()), info)
}

/// Stats and a listing give the synthetic tree's answers.
fn check_tree(mnt: &Path, files: u64) {
    for i in [0, files / 2, files - 1] {
        let m = std::fs::symlink_metadata(mnt.join(format!("f{i}"))).expect("stat");
        assert_eq!((m.len(), m.is_file()), (42, true));
    }
    let e = std::fs::symlink_metadata(mnt.join(format!("f{files}"))).expect_err("no such file");
    assert_eq!(e.raw_os_error(), Some(libc::ENOENT));
    let mut names: Vec<(String, u64)> = std::fs::read_dir(mnt)
        .expect("list")
        .map(|d| {
            let d = d.expect("entry");
            (d.file_name().to_string_lossy().into_owned(), d.ino())
        })
        .collect();
    names.sort();
    let mut want: Vec<(String, u64)> = (0..files).map(|i| (format!("f{i}"), i + 2)).collect();
    want.sort();
    assert_eq!(names, want, "every name once, with its inode number");
}

#[test]
fn the_wire_served_over_dev_fuse() {
    if !can_mount() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tmp");
    let tree = proto::Tree::new(500, false);
    let (_m, info) = mount(tmp.path(), &tree, false);
    check_tree(tmp.path(), 500);
    assert_eq!(info.uring_requests.load(Relaxed), 0);
    assert!(info.dev_requests.load(Relaxed) > 4);
}

#[test]
fn a_bare_listing_names_every_file_and_gives_the_kernel_no_attributes() {
    if !can_mount() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tmp");
    let tree = proto::Tree::new(300, true);
    let (_m, _) = mount(tmp.path(), &tree, false);
    check_tree(tmp.path(), 300);
    // Listed bare: the kernel keeps no entry for f7, so a stat asks.
    let _ = std::fs::read_dir(tmp.path()).expect("list").count();
    let before = tree.counts.lookups.load(Relaxed);
    std::fs::symlink_metadata(tmp.path().join("f7")).expect("stat");
    assert!(
        tree.counts.lookups.load(Relaxed) > before,
        "a LOOKUP after a bare listing"
    );
}

#[test]
fn the_wire_served_over_io_uring_where_the_kernel_offers_it() {
    if !can_mount() {
        return;
    }
    if !walkfs_fusewire::session::uring_enabled() {
        walkfs_testkit::skip(
            "FUSE over io_uring is off (/sys/module/fuse/parameters/enable_uring; scripts/test.sh turns it on)",
        );
        return;
    }
    let tmp = tempfile::tempdir().expect("tmp");
    let tree = proto::Tree::new(500, false);
    let (_m, info) = mount(tmp.path(), &tree, true);
    // The rings come up after INIT; until every queue is registered the
    // kernel still uses /dev/fuse.
    let t = Instant::now();
    while info.uring_requests.load(Relaxed) == 0 && t.elapsed() < Duration::from_secs(5) {
        let _ = std::fs::symlink_metadata(tmp.path().join("f1"));
    }
    assert!(
        info.uring_requests.load(Relaxed) > 0,
        "requests came through the ring"
    );
    let before = info.uring_requests.load(Relaxed);
    check_tree(tmp.path(), 500);
    // Once the rings are up, requests keep coming through them (3
    // stats, a miss, the listing).
    assert!(info.uring_requests.load(Relaxed) > before + 4);
}
