//! `renameat2(RENAME_EXCHANGE)` over a host directory whose file system
//! hands a deleted file's inode number to the next new file (ext4): the
//! cache shows each name's new object after the exchange, as the host
//! does (xfstests generic/025).

use std::sync::Arc;

use walkfs_vfs::{Creds, Ctx, Options, Vfs, AT_FDCWD};

fn kind(ctx: &Ctx, p: &[u8]) -> u32 {
    ctx.statx(
        AT_FDCWD,
        p,
        libc::AT_SYMLINK_NOFOLLOW,
        libc::STATX_TYPE | libc::STATX_INO,
    )
    .map(|s| u32::from(s.stx_mode) & libc::S_IFMT)
    .unwrap_or(0)
}

fn make_file(ctx: &Ctx, p: &[u8]) {
    let fd = ctx
        .openat(
            AT_FDCWD,
            p,
            libc::O_CREAT | libc::O_WRONLY | libc::O_EXCL,
            0o644,
        )
        .expect("create");
    ctx.close(fd).expect("close");
}

#[test]
fn an_exchange_after_inode_numbers_were_reused_shows_the_host_state() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let fs = Arc::new(walkfs_hostfs::HostFs::new(tmp.path()).expect("hostfs"));
    let vfs = Vfs::new(fs, &Options::parse("cache=coherent").expect("options")).expect("vfs");
    let ctx = vfs.context(Creds::root());
    for _ in 0..3 {
        make_file(&ctx, b"/src");
        make_file(&ctx, b"/dst");
        ctx.renameat2(AT_FDCWD, b"/src", AT_FDCWD, b"/dst", libc::RENAME_EXCHANGE)
            .expect("exchange");
        ctx.unlinkat(AT_FDCWD, b"/src", 0).expect("unlink");
        ctx.unlinkat(AT_FDCWD, b"/dst", 0).expect("unlink");
        make_file(&ctx, b"/src");
        ctx.symlinkat(b"foo", AT_FDCWD, b"/dst").expect("symlink");
        ctx.renameat2(AT_FDCWD, b"/src", AT_FDCWD, b"/dst", libc::RENAME_EXCHANGE)
            .expect("exchange");
        assert_eq!(kind(&ctx, b"/src"), libc::S_IFLNK, "src is the symlink now");
        assert_eq!(kind(&ctx, b"/dst"), libc::S_IFREG, "dst is the file now");
        let host = |n: &str| {
            std::fs::symlink_metadata(tmp.path().join(n))
                .map(|m| std::os::unix::fs::MetadataExt::ino(&m))
                .expect("host")
        };
        let ino = |p: &[u8]| {
            ctx.statx(AT_FDCWD, p, libc::AT_SYMLINK_NOFOLLOW, libc::STATX_INO)
                .expect("stat")
                .stx_ino
        };
        assert_eq!((ino(b"/src"), ino(b"/dst")), (host("src"), host("dst")));
        // A listing says the same.
        let fd = ctx
            .openat(AT_FDCWD, b"/", libc::O_RDONLY | libc::O_DIRECTORY, 0)
            .expect("open dir");
        let mut listed: Vec<(Vec<u8>, u64)> = ctx
            .getdents(fd)
            .expect("getdents")
            .into_iter()
            .filter(|e| e.name == b"src" || e.name == b"dst")
            .map(|e| (e.name, e.ino))
            .collect();
        listed.sort();
        ctx.close(fd).expect("close");
        assert_eq!(
            listed,
            [
                (b"dst".to_vec(), host("dst")),
                (b"src".to_vec(), host("src"))
            ]
        );
        ctx.unlinkat(AT_FDCWD, b"/src", 0).expect("unlink");
        ctx.unlinkat(AT_FDCWD, b"/dst", 0).expect("unlink");
    }
}
