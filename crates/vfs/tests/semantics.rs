//! path_resolution(7) semantics of the walk, over memfs.

use std::sync::Arc;

use walkfs_vfs::{Creds, Errno, Options, Vfs, AT_FDCWD};

fn setup() -> (Vfs, walkfs_vfs::Ctx) {
    let vfs = Vfs::new(Arc::new(walkfs_memfs::MemFs::new()), &Options::default()).unwrap();
    let ctx = vfs.context(Creds::root());
    for d in ["/usr", "/usr/lib", "/usr/lib/gcc", "/d", "/d/sub"] {
        ctx.mkdirat(AT_FDCWD, d.as_bytes(), 0o755).unwrap();
    }
    let fd = ctx
        .openat(
            AT_FDCWD,
            b"/usr/lib/crt.o",
            libc::O_CREAT | libc::O_WRONLY,
            0o644,
        )
        .unwrap();
    ctx.write(fd, b"object").unwrap();
    ctx.close(fd).unwrap();
    ctx.symlinkat(b"usr/lib", AT_FDCWD, b"/lib").unwrap();
    ctx.symlinkat(b"/usr/lib/crt.o", AT_FDCWD, b"/abs").unwrap();
    ctx.symlinkat(b"missing", AT_FDCWD, b"/dangling").unwrap();
    ctx.symlinkat(b"loop2", AT_FDCWD, b"/loop1").unwrap();
    ctx.symlinkat(b"loop1", AT_FDCWD, b"/loop2").unwrap();
    (vfs, ctx)
}

#[test]
fn dots_slashes_and_symlinks() {
    let (_v, c) = setup();
    assert_eq!(c.faccessat(AT_FDCWD, b"/lib/crt.o", libc::R_OK, 0), Ok(()));
    assert_eq!(
        c.faccessat(AT_FDCWD, b"//usr/./lib/../lib//crt.o", 0, 0),
        Ok(())
    );
    assert_eq!(c.faccessat(AT_FDCWD, b"/../../usr", 0, 0), Ok(()));
    assert_eq!(
        c.faccessat(AT_FDCWD, b"/lib/crt.o/", 0, 0),
        Err(Errno::ENOTDIR)
    );
    assert_eq!(
        c.faccessat(AT_FDCWD, b"/usr/lib/crt.o/x", 0, 0),
        Err(Errno::ENOTDIR)
    );
    assert_eq!(
        c.faccessat(AT_FDCWD, b"/usr/nope/x", 0, 0),
        Err(Errno::ENOENT)
    );
    assert_eq!(c.faccessat(AT_FDCWD, b"", 0, 0), Err(Errno::ENOENT));
    assert_eq!(
        c.faccessat(AT_FDCWD, b"/dangling", 0, 0),
        Err(Errno::ENOENT)
    );
    assert_eq!(
        c.faccessat(AT_FDCWD, b"/dangling", 0, libc::AT_SYMLINK_NOFOLLOW),
        Ok(())
    );
    assert_eq!(c.faccessat(AT_FDCWD, b"/loop1", 0, 0), Err(Errno::ELOOP));
    assert_eq!(c.faccessat(AT_FDCWD, b"/abs", 0, 0), Ok(()));
    // `..` after a symlinked directory is the target's parent.
    assert_eq!(c.faccessat(AT_FDCWD, b"/lib/../lib/gcc", 0, 0), Ok(()));
    assert_eq!(
        c.faccessat(AT_FDCWD, b"/lib/../gcc", 0, 0),
        Err(Errno::ENOENT)
    );
    let long = vec![b'a'; 256];
    assert_eq!(c.faccessat(AT_FDCWD, &long, 0, 0), Err(Errno::ENAMETOOLONG));
    let deep = b"/x".repeat(2048);
    assert_eq!(c.faccessat(AT_FDCWD, &deep, 0, 0), Err(Errno::ENAMETOOLONG));
    assert_eq!(c.readlinkat(AT_FDCWD, b"/lib").unwrap(), b"usr/lib");
    assert_eq!(c.readlinkat(AT_FDCWD, b"/usr"), Err(Errno::EINVAL));
    let st = c.fstatat(AT_FDCWD, b"/lib", 0).unwrap();
    assert_eq!(st.st_mode & libc::S_IFMT, libc::S_IFDIR);
    let st = c
        .fstatat(AT_FDCWD, b"/lib", libc::AT_SYMLINK_NOFOLLOW)
        .unwrap();
    assert_eq!(st.st_mode & libc::S_IFMT, libc::S_IFLNK);
    assert_eq!(st.st_size, 7);
    // A trailing slash follows the link even with NOFOLLOW.
    let st = c
        .fstatat(AT_FDCWD, b"/lib/", libc::AT_SYMLINK_NOFOLLOW)
        .unwrap();
    assert_eq!(st.st_mode & libc::S_IFMT, libc::S_IFDIR);
}

#[test]
fn permissions_in_the_middle_of_a_path() {
    let (_v, root) = setup();
    root.mkdirat(AT_FDCWD, b"/private", 0o700).unwrap();
    root.mkdirat(AT_FDCWD, b"/private/in", 0o755).unwrap();
    let user = root.vfs().context(Creds {
        uid: 1000,
        gid: 1000,
        groups: vec![],
        privileged: false,
    });
    assert_eq!(
        user.faccessat(AT_FDCWD, b"/private/in", 0, 0),
        Err(Errno::EACCES)
    );
    assert_eq!(
        user.faccessat(AT_FDCWD, b"/private/missing", 0, 0),
        Err(Errno::EACCES)
    );
    assert_eq!(
        user.faccessat(AT_FDCWD, b"/private", libc::R_OK, 0),
        Err(Errno::EACCES)
    );
    assert_eq!(user.faccessat(AT_FDCWD, b"/private", 0, 0), Ok(()));
    assert_eq!(
        user.mkdirat(AT_FDCWD, b"/mine", 0o755).map(drop),
        Err(Errno::EACCES)
    );
    assert_eq!(
        root.faccessat(AT_FDCWD, b"/usr/lib/crt.o", libc::X_OK, 0),
        Err(Errno::EACCES)
    );
}

#[test]
fn changes_update_the_cache() {
    let (_v, c) = setup();
    assert_eq!(c.faccessat(AT_FDCWD, b"/d/new", 0, 0), Err(Errno::ENOENT));
    c.mkdirat(AT_FDCWD, b"/d/new", 0o755).unwrap();
    assert_eq!(c.faccessat(AT_FDCWD, b"/d/new", 0, 0), Ok(()));
    c.renameat2(AT_FDCWD, b"/d/new", AT_FDCWD, b"/d/moved", 0)
        .unwrap();
    assert_eq!(c.faccessat(AT_FDCWD, b"/d/new", 0, 0), Err(Errno::ENOENT));
    assert_eq!(c.faccessat(AT_FDCWD, b"/d/moved", 0, 0), Ok(()));
    assert_eq!(
        c.renameat2(AT_FDCWD, b"/d", AT_FDCWD, b"/d/sub/x", 0),
        Err(Errno::EINVAL)
    );
    c.unlinkat(AT_FDCWD, b"/d/moved", libc::AT_REMOVEDIR)
        .unwrap();
    assert_eq!(c.faccessat(AT_FDCWD, b"/d/moved", 0, 0), Err(Errno::ENOENT));
    assert_eq!(
        c.unlinkat(AT_FDCWD, b"/d", libc::AT_REMOVEDIR),
        Err(Errno::ENOTEMPTY)
    );
    assert_eq!(c.unlinkat(AT_FDCWD, b"/d", 0), Err(Errno::EISDIR));
    assert_eq!(
        c.unlinkat(AT_FDCWD, b"/d/.", libc::AT_REMOVEDIR),
        Err(Errno::EINVAL)
    );
    assert_eq!(
        c.mkdirat(AT_FDCWD, b"/d/sub", 0o755).map(drop),
        Err(Errno::EEXIST)
    );
    assert_eq!(
        c.mkdirat(AT_FDCWD, b"/dangling", 0o755).map(drop),
        Err(Errno::EEXIST)
    );
    // O_CREAT through a dangling symlink creates its target.
    let fd = c
        .openat(
            AT_FDCWD,
            b"/dangling",
            libc::O_CREAT | libc::O_WRONLY,
            0o600,
        )
        .unwrap();
    c.close(fd).unwrap();
    assert_eq!(c.faccessat(AT_FDCWD, b"/missing", 0, 0), Ok(()));
    assert_eq!(
        c.openat(
            AT_FDCWD,
            b"/abs",
            libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY,
            0o600
        ),
        Err(Errno::EEXIST)
    );
    assert_eq!(
        c.openat(AT_FDCWD, b"/abs", libc::O_RDONLY | libc::O_NOFOLLOW, 0),
        Err(Errno::ELOOP)
    );
}

#[test]
fn files_read_write_stat() {
    let (_v, c) = setup();
    let fd = c
        .openat(AT_FDCWD, b"/f", libc::O_CREAT | libc::O_RDWR, 0o644)
        .unwrap();
    assert_eq!(c.write(fd, b"hello world").unwrap(), 11);
    assert_eq!(c.fstat(fd).unwrap().st_size, 11);
    let mut buf = [0u8; 5];
    assert_eq!(c.pread(fd, &mut buf, 6).unwrap(), 5);
    assert_eq!(&buf, b"world");
    c.ftruncate(fd, 5).unwrap();
    assert_eq!(c.fstatat(AT_FDCWD, b"/f", 0).unwrap().st_size, 5);
    c.unlinkat(AT_FDCWD, b"/f", 0).unwrap();
    // Still open: fstat works, nlink is 0.
    assert_eq!(c.fstat(fd).unwrap().st_nlink, 0);
    c.close(fd).unwrap();
    assert_eq!(c.fstat(fd).err(), Some(Errno::EBADF));
    let d = c
        .openat(AT_FDCWD, b"/usr", libc::O_RDONLY | libc::O_DIRECTORY, 0)
        .unwrap();
    let mut names: Vec<_> = c.getdents(d).unwrap().into_iter().map(|e| e.name).collect();
    names.sort();
    assert_eq!(names, vec![b".".to_vec(), b"..".to_vec(), b"lib".to_vec()]);
    assert!(c.getdents(d).unwrap().is_empty());
    assert_eq!(c.faccessat(d, b"lib/crt.o", 0, 0), Ok(()));
    assert_eq!(
        c.openat(AT_FDCWD, b"/usr", libc::O_WRONLY, 0),
        Err(Errno::EISDIR)
    );
}

/// A file's backend handle is released at close even when its name was
/// linked elsewhere and unlinked while it was open (how git writes its
/// objects): nothing held for it afterwards.
#[test]
fn a_file_unlinked_while_open_is_released_at_close() {
    let tmp = tempfile::tempdir().unwrap();
    let fs = Arc::new(walkfs_hostfs::HostFs::new(tmp.path()).unwrap());
    let vfs = Vfs::new(fs, &Options::default()).unwrap();
    let ctx = vfs.context(Creds::root());
    let count = || std::fs::read_dir("/proc/self/fd").unwrap().count();
    let before = count();
    for i in 0..50 {
        let tmpname = format!("/tmp_obj_{i}");
        let fd = ctx
            .openat(
                AT_FDCWD,
                tmpname.as_bytes(),
                libc::O_CREAT | libc::O_EXCL | libc::O_RDWR,
                0o444,
            )
            .unwrap();
        ctx.write(fd, b"object").unwrap();
        ctx.linkat(
            AT_FDCWD,
            tmpname.as_bytes(),
            AT_FDCWD,
            format!("/obj{i}").as_bytes(),
            0,
        )
        .unwrap();
        ctx.unlinkat(AT_FDCWD, tmpname.as_bytes(), 0).unwrap();
        ctx.close(fd).unwrap();
    }
    let after = count();
    // Cached O_PATH descriptors may stay (bounded); open files may not.
    let open_deleted = std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.unwrap().path()).ok())
        .filter(|p| p.to_string_lossy().contains("tmp_obj"))
        .count();
    assert_eq!(open_deleted, 0, "{before} -> {after} descriptors");
}
