//! Files found by id after the dcache forgot them (`drop_caches`): a
//! file comes back disconnected (no name, its data and attributes
//! intact), a directory connected to the tree (its names work), a file
//! the dcache still holds by its cached name; a removed file is stale,
//! and an id that is not the backend's too.

use std::sync::Arc;

use walkfs_vfs::{Creds, Ctx, Errno, Options, Vfs, AT_FDCWD};

fn write(ctx: &Ctx, p: &[u8], data: &[u8]) {
    let fd = ctx
        .openat(AT_FDCWD, p, libc::O_CREAT | libc::O_WRONLY, 0o644)
        .expect("create");
    ctx.write(fd, data).expect("write");
    ctx.close(fd).expect("close");
}

fn read_all(ctx: &Arc<Ctx>, h: &walkfs_vfs::Handle) -> Vec<u8> {
    let f = ctx.reopen_file(h, libc::O_RDONLY).expect("reopen");
    let mut buf = vec![0u8; 64];
    let n = f.pread(&mut buf, 0).expect("read");
    buf.truncate(n);
    buf
}

#[test]
fn forgotten_files_are_found_by_id_and_removed_ones_are_stale() {
    let vfs = Vfs::new(Arc::new(walkfs_memfs::MemFs::new()), &Options::default()).expect("vfs");
    let ctx = Arc::new(vfs.context(Creds::root()));
    ctx.mkdirat(AT_FDCWD, b"/d", 0o755).expect("mkdir");
    write(&ctx, b"/d/f", b"data");
    write(&ctx, b"/gone", b"x");
    let root = ctx.handle(AT_FDCWD, b"/").expect("root");
    let id = |p: &[u8]| {
        ctx.file_id(&ctx.handle(AT_FDCWD, p).expect("handle"))
            .expect("id")
    };
    let (fid, did, gid) = (id(b"/d/f"), id(b"/d"), id(b"/gone"));
    assert!(ctx.can_export(&root));

    // Still cached: the cached name.
    let h = ctx.open_by_id(&root, &fid).expect("cached");
    assert_eq!(ctx.parent_of(&h).map(|(_, n)| n), Ok(b"f".to_vec()));
    drop(h);

    ctx.unlinkat(AT_FDCWD, b"/gone", 0).expect("unlink");
    vfs.drop_caches();

    let f = ctx.open_by_id(&root, &fid).expect("file by id");
    assert_eq!(read_all(&ctx, &f), b"data");
    // Disconnected: no name to give.
    assert_eq!(ctx.parent_of(&f).err(), Some(Errno::ESTALE));

    let d = ctx.open_by_id(&root, &did).expect("dir by id");
    let mut steps = Vec::new();
    let g = ctx
        .walk_handle(&d, &[b"f".as_slice()], &mut steps)
        .expect("walk")
        .expect("f under d");
    assert_eq!(read_all(&ctx, &g), b"data");
    assert_eq!(ctx.parent_of(&d).map(|(_, n)| n), Ok(b"d".to_vec()));

    assert_eq!(ctx.open_by_id(&root, &gid).err(), Some(Errno::ESTALE));
    assert_eq!(ctx.open_by_id(&root, b"junk").err(), Some(Errno::ESTALE));
    // Only a file system's root finds ids.
    assert_eq!(ctx.open_by_id(&d, &fid).err(), Some(Errno::EINVAL));
}
