//! Backends walk again by the vfs's names (`walkfs_fsapi::Names`): hostfs
//! keeps a bounded set of descriptors and reopens any other node along
//! the path the dentry cache holds for it. The names follow renames made
//! through the vfs; a file replaced or moved on the host behind the vfs's
//! back is `ESTALE`, never the newcomer; a hard-linked file whose newest
//! name went is still found by its other one.

use std::sync::Arc;

use walkfs_vfs::{Creds, Ctx, Errno, Handle, Options, Vfs, AT_FDCWD};

/// Ask the backend for `h`'s attributes (not the cache): with its
/// descriptor evicted, hostfs must reopen it by name.
fn backend_ino(ctx: &Ctx, h: &Handle) -> Result<u64, Errno> {
    ctx.changed_outside(h)?;
    ctx.statx(h, b"", libc::AT_EMPTY_PATH, libc::STATX_INO)
        .map(|x| x.stx_ino)
}

#[test]
fn descriptors_stay_bounded_and_nodes_are_found_again_by_the_vfs_names() {
    let tmp = tempfile::tempdir().unwrap();
    for d in 0..4 {
        std::fs::create_dir(tmp.path().join(format!("d{d}"))).unwrap();
        for f in 0..50 {
            std::fs::write(tmp.path().join(format!("d{d}/f{f}")), [d as u8; 3]).unwrap();
        }
    }
    let fs = Arc::new(walkfs_hostfs::HostFs::with_cached_fds(tmp.path(), 8).unwrap());
    let vfs = Vfs::new(fs.clone(), &Options::default()).unwrap();
    let ctx = vfs.context(Creds::root());
    let mut files = Vec::new();
    for d in 0..4 {
        for f in 0..50 {
            let path = format!("/d{d}/f{f}");
            let h = ctx.handle(AT_FDCWD, path.as_bytes()).unwrap();
            let ino = std::fs::metadata(tmp.path().join(&path[1..]))
                .map(|m| std::os::unix::fs::MetadataExt::ino(&m))
                .unwrap();
            files.push((h, ino));
        }
    }
    let st = fs.fd_stats();
    assert!(st.cached <= 8, "{st:?}");
    assert!(st.evicted > 150, "{st:?}");
    // Every node answers, reopened by name where its descriptor went.
    for (h, ino) in &files {
        assert_eq!(backend_ino(&ctx, h), Ok(*ino));
    }
    assert!(fs.fd_stats().reopens > 100, "{:?}", fs.fd_stats());
    assert!(fs.fd_stats().cached <= 8);

    // Renamed through the vfs: found at its new place once its
    // descriptor is gone (the dentry moved; hostfs remembers nothing).
    ctx.renameat2(AT_FDCWD, b"/d0/f0", AT_FDCWD, b"/top", 0)
        .unwrap();
    for (h, _) in &files[100..] {
        backend_ino(&ctx, h).unwrap();
    }
    assert_eq!(backend_ino(&ctx, &files[0].0), Ok(files[0].1));

    // A hard link's newest name removed: the file is found by its other.
    ctx.linkat(AT_FDCWD, b"/d0/f2", AT_FDCWD, b"/d0/hard", 0)
        .unwrap();
    let hard = ctx.handle(AT_FDCWD, b"/d0/hard").unwrap();
    ctx.unlinkat(AT_FDCWD, b"/d0/hard", 0).unwrap();
    for (h, _) in &files[100..] {
        backend_ino(&ctx, h).unwrap();
    }
    assert_eq!(backend_ino(&ctx, &files[2].0), Ok(files[2].1));
    drop(hard);

    // Replaced on the host behind the vfs's back: ESTALE, never the
    // newcomer.
    std::fs::remove_file(tmp.path().join("d0/f1")).unwrap();
    std::fs::write(tmp.path().join("d0/f1"), b"other").unwrap();
    for (h, _) in &files[100..] {
        backend_ino(&ctx, h).unwrap();
    }
    assert_eq!(backend_ino(&ctx, &files[1].0), Err(Errno::ESTALE));

    // A whole directory renamed on the host: its files are stale once
    // their descriptors are gone...
    std::fs::rename(tmp.path().join("d3"), tmp.path().join("d3-moved")).unwrap();
    for (h, _) in &files[..100] {
        let _ = backend_ino(&ctx, h);
    }
    let (e3, ino3) = &files[199];
    assert_eq!(backend_ino(&ctx, e3), Err(Errno::ESTALE));
    // ...and found again once the vfs finds the new name: the newest name
    // of the directory is the one walked.
    let again = ctx.handle(AT_FDCWD, b"/d3-moved/f49").unwrap();
    assert_eq!(backend_ino(&ctx, &again), Ok(*ino3));
    assert_eq!(backend_ino(&ctx, e3), Ok(*ino3));
}
