//! A host inode number reused for a new file is another file through every
//! front end: ext4 gives a deleted file's number to the next file made,
//! and a cache keyed by the number alone would show the old file's pages
//! and attributes as the new one's (docs/inode-grants.md, "Generations").
//! Over 9P the server keeps the old file open through the client's fid
//! until the client forgets it, so the host reuses the number at a time
//! no test can choose: the 9P client's side is checked by its node
//! table's tests (crates/backends/p9client/src/nodes.rs).

mod common;

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use common::Mount;

const OLD: &[u8] = b"the old file, deleted on the host while open through the mount\n";
const NEW: &[u8] = b"the new file\n";

/// Make files in `dir` until one gets inode number `ino`: ext4 hands a
/// freed number out again at once, once the last descriptor of the old
/// file is closed (the kernel sends FUSE's release behind the close).
fn file_numbered(dir: &Path, ino: u64) -> PathBuf {
    let t0 = std::time::Instant::now();
    for i in 0.. {
        let p = dir.join(format!("new-{i}"));
        std::fs::write(&p, NEW).expect("write new");
        if std::fs::metadata(&p).expect("stat new").ino() == ino {
            return p;
        }
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(5),
            "the host filesystem did not give inode {ino} to a new file (not ext4?)"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    unreachable!()
}

/// A file read through the mount is deleted on the host and its number
/// given to a new file. `host_fds=1` and `io_fds=1` let walkfs keep no
/// descriptor of it (as for most files of a tree larger than the
/// descriptor caches), so the host can reuse the number. Through the
/// mount the new file is itself, and the old name, still cached by a loose mount, never shows the new
/// file's bytes or attributes: it shows the old file's or an error, as
/// NFS gives `ESTALE`.
fn reused_number_is_another_file(opts: &str) {
    // One at a time: a file another test makes could take the number.
    static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
    let d = common::dirs();
    std::fs::write(d.src.join("old"), OLD).expect("write old");
    for i in 0..4 {
        std::fs::write(d.src.join(format!("other-{i}")), b"x").expect("write other");
    }
    // io_fds=1: without passthrough (a guest's kernel, or
    // WALKFS_FUSE_AS_KERNEL) reads go through one open file per recently
    // read node, kept after the reader closed; the read of another file
    // below lets `old` go.
    let opts = format!("{opts},host_fds=1,io_fds=1");
    let _m = Mount::new(&d.src, &d.mnt, &opts);
    assert_eq!(std::fs::read(d.mnt.join("old")).expect("read old"), OLD);
    let ino = std::fs::metadata(d.mnt.join("old"))
        .expect("stat old")
        .ino();
    assert_eq!(
        ino,
        std::fs::metadata(d.src.join("old"))
            .expect("host stat")
            .ino()
    );
    for i in 0..4 {
        std::fs::metadata(d.mnt.join(format!("other-{i}"))).expect("stat other");
    }
    std::fs::read(d.mnt.join("other-0")).expect("read other");

    std::fs::remove_file(d.src.join("old")).expect("host unlink");
    let new = file_numbered(&d.src, ino);
    let through = d.mnt.join(new.file_name().expect("name"));
    // The host's write reaches a coherent mount by a report, shortly
    // after the create.
    common::wait_until("the new file's size seen", || {
        std::fs::metadata(&through).is_ok_and(|m| m.len() == NEW.len() as u64)
    });
    let st = std::fs::metadata(&through).expect("stat new through the mount");
    assert_eq!(st.ino(), ino, "the new file shows the host's number");
    assert_eq!(std::fs::read(&through).expect("read new"), NEW);

    // The old name: the old file or an error, never the new file.
    if let Ok(m) = std::fs::metadata(d.mnt.join("old")) {
        assert_eq!(m.len(), OLD.len() as u64, "the old name shows the new file");
    }
    if let Ok(b) = std::fs::read(d.mnt.join("old")) {
        assert_eq!(b, OLD, "the old name reads the new file");
    }
    assert_eq!(std::fs::read(&through).expect("read new again"), NEW);
}

#[test]
fn a_reused_host_number_is_another_file_through_a_local_mount() {
    reused_number_is_another_file("cache=loose");
}
