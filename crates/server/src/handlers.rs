//! Each 9P2000.L request as vfs calls. Errors are the vfs's errnos, sent
//! as `Rlerror` by the caller.

use std::sync::Arc;

use walkfs_p9::{self as p9, msg, Fcall, Qid, Qids, Str, IOHDRSZ};
use walkfs_vfs::{Creds, Ctx, Errno, NameStep, Result, Statx, TimeSet, Timespec};

use crate::conn::Conn;
use crate::fid::{Fid, FidState};
use crate::users;

/// The open flags a client may ask for (the rest are the client kernel's
/// business or meaningless here).
const OPEN_MASK: u32 =
    (libc::O_ACCMODE | libc::O_TRUNC | libc::O_APPEND | libc::O_DIRECTORY) as u32;

/// One qid per file, the same in every reply (walk, getattr, attach,
/// open, the creates). The version is 0: walkfs cannot track a file's
/// version across the changes made on the host, and Linux's v9fs matches
/// inodes by type, version and path, so a version derived from mtime and
/// size would split one file into several inodes in a kernel client
/// whenever it changed (and a walk answered from the cache has no
/// attributes to derive it from).
fn qid_of(mode: u32, ino: u64) -> Qid {
    let ty = match mode & libc::S_IFMT {
        libc::S_IFDIR => p9::QTDIR,
        libc::S_IFLNK => p9::QTSYMLINK,
        _ => p9::QTFILE,
    };
    Qid {
        ty,
        version: 0,
        path: ino,
    }
}

fn qid_of_statx(st: &Statx) -> Qid {
    qid_of(st.stx_mode as u32, st.stx_ino)
}

fn qid_of_step(s: &NameStep) -> Qid {
    qid_of(s.mode, s.ino)
}

/// `Rgetattr`'s stat of a file.
fn stat_of(x: &Statx) -> p9::Stat {
    p9::Stat {
        valid: p9::GETATTR_BASIC,
        qid: qid_of_statx(x),
        mode: x.stx_mode as u32,
        uid: x.stx_uid,
        gid: x.stx_gid,
        nlink: x.stx_nlink as u64,
        rdev: libc::makedev(x.stx_rdev_major, x.stx_rdev_minor),
        size: x.stx_size,
        blksize: x.stx_blksize as u64,
        blocks: x.stx_blocks,
        atime_sec: x.stx_atime.tv_sec as u64,
        atime_nsec: x.stx_atime.tv_nsec as u64,
        mtime_sec: x.stx_mtime.tv_sec as u64,
        mtime_nsec: x.stx_mtime.tv_nsec as u64,
        ctime_sec: x.stx_ctime.tv_sec as u64,
        ctime_nsec: x.stx_ctime.tv_nsec as u64,
        ..p9::Stat::default()
    }
}

/// The listing of directory `st` with each entry's attributes and a
/// symlink's body (p9::dirplus). An entry removed while listed is left
/// out; `E2BIG` past the extension's limit.
fn listing_of(st: &FidState) -> Result<Vec<u8>> {
    let ctx = &st.ctx;
    let d = ctx.reopen(st.fd, libc::O_RDONLY | libc::O_DIRECTORY)?;
    let entries = ctx.getdents(d);
    let _ = ctx.close(d);
    let mut out = Vec::new();
    for e in entries? {
        if e.name == b"." || e.name == b".." {
            continue;
        }
        let x = match ctx.statx(
            st.fd,
            &e.name,
            libc::AT_SYMLINK_NOFOLLOW,
            libc::STATX_BASIC_STATS,
        ) {
            Ok(x) => x,
            Err(Errno::ENOENT) => continue,
            Err(e) => return Err(e),
        };
        let link = if u32::from(x.stx_mode) & libc::S_IFMT == libc::S_IFLNK {
            ctx.readlinkat(st.fd, &e.name).unwrap_or_default()
        } else {
            Vec::new()
        };
        p9::dirplus::encode(&e.name, &stat_of(&x), &link, &mut out);
        if out.len() > p9::dirplus::MAX_LISTING {
            return Err(Errno::E2BIG);
        }
    }
    Ok(out)
}

fn fstatx(st: &FidState) -> Result<Statx> {
    let mut out = Statx::default();
    st.ctx
        .fstatx_into(st.fd, libc::STATX_BASIC_STATS, &mut out)?;
    Ok(out)
}

/// The context for a create with group `gid` asked by the client: the
/// fid's user with that group. The client's word is taken for the group
/// as it is for the user (`Tattach`'s uid): 9P2000.L carries the gid the
/// client kernel chose (the caller's fsgid, or a setgid directory's group)
/// and no supplementary groups, so the server's own user database cannot
/// judge it. `NOGID` (~0) keeps the fid's group.
fn ctx_with_gid(conn: &Conn, st: &FidState, gid: u32) -> Arc<Ctx> {
    let c = st.ctx.creds();
    if gid == c.gid || gid == u32::MAX {
        return Arc::clone(&st.ctx);
    }
    conn.ctx_for(Creds {
        uid: c.uid,
        gid,
        groups: c.groups.clone(),
        privileged: c.privileged,
    })
}

/// What every creating request checks first, in this order: the export
/// is writable, the name is one plain name, the directory fid is known.
/// The directory's state and the context to create with (group `gid`).
fn creating(
    conn: &Conn,
    dir: impl FnOnce() -> Result<FidState>,
    name: &[u8],
    gid: u32,
) -> Result<(FidState, Arc<Ctx>)> {
    writable(conn)?;
    check_name(name)?;
    let st = dir()?;
    let ctx = ctx_with_gid(conn, &st, gid);
    Ok((st, ctx))
}

fn check_name(name: &[u8]) -> Result<()> {
    if name.is_empty() || name == b"." || name == b".." || name.contains(&b'/') || name.contains(&0)
    {
        return Err(Errno::EINVAL);
    }
    Ok(())
}

fn writable(conn: &Conn) -> Result<()> {
    if conn.server.cfg.read_only {
        Err(Errno::EROFS)
    } else {
        Ok(())
    }
}

fn iounit(conn: &Conn) -> u32 {
    conn.msize.load(std::sync::atomic::Ordering::Relaxed) - IOHDRSZ
}

/// The qid of `name` in the directory `dirfd` (after creating it).
fn qid_at(ctx: &Ctx, dirfd: i32, name: &[u8]) -> Result<Qid> {
    let mut st = Statx::default();
    ctx.statx_into(
        dirfd,
        name,
        libc::AT_SYMLINK_NOFOLLOW,
        libc::STATX_BASIC_STATS,
        &mut st,
    )?;
    Ok(qid_of_statx(&st))
}

pub(crate) fn handle(
    conn: &Conn,
    f: &Fcall<'_>,
    fids: &[Arc<Fid>],
    newfid: Option<&Arc<Fid>>,
    tag: u16,
    out: &mut Vec<u8>,
) -> Result<()> {
    let fid = |i: usize| -> Result<FidState> { fids.get(i).ok_or(Errno::EBADF)?.get() };
    let reply = |f: Fcall<'_>, out: &mut Vec<u8>| {
        f.encode(tag, out);
        Ok(())
    };
    match *f {
        Fcall::Tattach {
            uname,
            n_uname,
            afid,
            aname,
            ..
        } => {
            if let Some(secret) = &conn.server.cfg.secret {
                let ok = conn.auth_ok(afid, secret)
                    || crate::auth::secret_in_aname(aname.0).is_some_and(|s| secret.matches(s));
                if !ok {
                    tracing::warn!("{}: attach refused: no or wrong secret", conn.peer);
                    return Err(Errno::EACCES);
                }
            }
            let mut creds = users::creds_for(n_uname, uname.0).ok_or(Errno::EACCES)?;
            // A client that checks permissions itself (Linux's v9fs,
            // access=client) has already decided with groups the server
            // never sees: the server then checks none of its own.
            creds.privileged = conn.server.cfg.trust_client_permissions;
            let ctx = conn.ctx_for(creds);
            let mut steps = Vec::new();
            let fd = ctx
                .walk_names(walkfs_vfs::AT_FDCWD, &[], &mut steps)?
                .ok_or(Errno::EIO)?;
            let st = FidState {
                ctx,
                fd,
                open: None,
                listing: None,
            };
            let qid = qid_of_statx(&fstatx(&st)?);
            newfid.ok_or(Errno::EBADF)?.complete(st);
            reply(Fcall::Rattach { qid }, out)
        }
        Fcall::Twalk { names, .. } => {
            let from = fid(0)?;
            let names = names.as_slice();
            let mut steps = Vec::with_capacity(names.len());
            let fd = from.ctx.walk_names(from.fd, names, &mut steps)?;
            let mut qids = Qids::default();
            for s in &steps {
                qids.push(qid_of_step(s));
            }
            match (fd, newfid) {
                (Some(fd), Some(nf)) => nf.complete(FidState {
                    ctx: Arc::clone(&from.ctx),
                    fd,
                    open: None,
                    listing: None,
                }),
                // A walk of the fid onto itself.
                (Some(fd), None) => {
                    let r = fids[0].update(|st| st.fd = fd);
                    if r.is_err() {
                        let _ = from.ctx.close(fd);
                    }
                    r?
                }
                // A partial walk makes no fid.
                (None, Some(nf)) => {
                    nf.fail();
                    let mut t = conn.fids.lock();
                    t.retain(|_, x| !Arc::ptr_eq(x, nf));
                }
                (None, None) => {}
            }
            reply(Fcall::Rwalk { qids }, out)
        }
        Fcall::Tgetattr { .. } => {
            let st = fid(0)?;
            let x = fstatx(&st)?;
            reply(Fcall::Rgetattr { st: stat_of(&x) }, out)
        }
        Fcall::Treadlink { .. } => {
            let st = fid(0)?;
            let mut buf = [0u8; libc::PATH_MAX as usize];
            let n = match st.ctx.readlinkat_into(st.fd, b"", &mut buf) {
                // The vfs's readlinkat(fd, "") of a non-symlink is ENOENT
                // (Linux's do_readlinkat); a fid names its file, and
                // readlink(2) of a file that is no symlink is EINVAL, as
                // diod and QEMU answer.
                Err(Errno::ENOENT) if !is_symlink(&st) => return Err(Errno::EINVAL),
                r => r?,
            };
            reply(
                Fcall::Rreadlink {
                    target: Str(&buf[..n]),
                },
                out,
            )
        }
        Fcall::Tlopen { flags, .. } => {
            let st = fid(0)?;
            if st.open.is_some() {
                return Err(Errno::EBADF);
            }
            let flags = flags & OPEN_MASK;
            if flags & libc::O_ACCMODE as u32 != libc::O_RDONLY as u32
                || flags & libc::O_TRUNC as u32 != 0
            {
                writable(conn)?;
            }
            let fd = st.ctx.reopen(st.fd, flags as i32)?;
            let x = fstatx(&st)?;
            let r = fids[0].update(|s| s.open = Some(fd));
            if r.is_err() {
                let _ = st.ctx.close(fd);
            }
            r?;
            reply(
                Fcall::Rlopen {
                    qid: qid_of_statx(&x),
                    iounit: iounit(conn),
                },
                out,
            )
        }
        Fcall::Tlcreate {
            name,
            flags,
            mode,
            gid,
            ..
        } => {
            let (st, ctx) = creating(conn, || fid(0), name.0, gid)?;
            let flags = (flags & OPEN_MASK) as i32 | libc::O_CREAT | libc::O_EXCL;
            let fd = ctx.openat(st.fd, name.0, flags, mode & 0o7777)?;
            let path = match ctx.reopen(fd, libc::O_PATH) {
                Ok(p) => p,
                Err(e) => {
                    let _ = ctx.close(fd);
                    return Err(e);
                }
            };
            let mut x = Statx::default();
            ctx.fstatx_into(path, libc::STATX_BASIC_STATS, &mut x)?;
            let r = fids[0].update(|s| {
                s.fd = path;
                s.open = Some(fd);
            });
            if r.is_err() {
                let _ = ctx.close(fd);
                let _ = ctx.close(path);
            }
            r?;
            reply(
                Fcall::Rlcreate {
                    qid: qid_of_statx(&x),
                    iounit: iounit(conn),
                },
                out,
            )
        }
        Fcall::Tread { offset, count, .. } => {
            let st = fid(0)?;
            if let Some(l) = &st.listing {
                let from = (offset.min(l.len() as u64)) as usize;
                let n = (count.min(iounit(conn)) as usize).min(l.len() - from);
                let data = p9::Data(&l[from..from + n]);
                return reply(Fcall::Rread { data }, out);
            }
            let fd = st.open.ok_or(Errno::EBADF)?;
            let n = count.min(iounit(conn)) as usize;
            let start = p9::begin(out, msg::Rread, tag);
            let at = out.len();
            out.resize(at + 4 + n, 0);
            // The file's bytes go straight into the reply.
            let got = st.ctx.pread(fd, &mut out[at + 4..], offset)?;
            out.truncate(at + 4 + got);
            out[at..at + 4].copy_from_slice(&(got as u32).to_le_bytes());
            p9::finish(out, start);
            Ok(())
        }
        Fcall::Twrite { offset, data, .. } => {
            writable(conn)?;
            let st = fid(0)?;
            let fd = st.open.ok_or(Errno::EBADF)?;
            let n = st.ctx.pwrite(fd, data.0, offset)?;
            reply(Fcall::Rwrite { count: n as u32 }, out)
        }
        Fcall::Treaddir { offset, count, .. } => {
            let st = fid(0)?;
            let fd = st.open.ok_or(Errno::EBADF)?;
            // Offsets are positions in the listing: entry i carries i + 1,
            // where the next read starts.
            st.ctx.lseek(fd, offset as i64, libc::SEEK_SET)?;
            let entries = st.ctx.getdents(fd)?;
            let max = count.min(iounit(conn)) as usize;
            let start = p9::begin(out, msg::Rreaddir, tag);
            let at = out.len();
            out.extend_from_slice(&[0; 4]);
            let mut used = 0;
            for (i, e) in entries.iter().enumerate() {
                let len = p9::dirent_len(&e.name);
                if used + len > max {
                    break;
                }
                let mode = e.kind.mode_bits();
                p9::put_dirent(
                    out,
                    qid_of(mode, e.ino),
                    offset + i as u64 + 1,
                    e.kind.dtype(),
                    &e.name,
                );
                used += len;
            }
            out[at..at + 4].copy_from_slice(&(used as u32).to_le_bytes());
            p9::finish(out, start);
            Ok(())
        }
        Fcall::Tstatfs { .. } => {
            let st = fid(0)?;
            let s = st.ctx.statfs(st.fd, b"")?;
            reply(
                Fcall::Rstatfs {
                    st: p9::StatFs {
                        ty: 0x01021997, // V9FS_MAGIC
                        bsize: s.bsize as u32,
                        blocks: s.blocks,
                        bfree: s.bfree,
                        bavail: s.bavail,
                        files: s.files,
                        ffree: s.ffree,
                        fsid: 0,
                        namelen: s.namelen as u32,
                    },
                },
                out,
            )
        }
        Fcall::Tmkdir {
            name, mode, gid, ..
        } => {
            let (st, ctx) = creating(conn, || fid(0), name.0, gid)?;
            ctx.mkdirat(st.fd, name.0, mode & 0o7777)?;
            let qid = qid_at(&ctx, st.fd, name.0)?;
            reply(Fcall::Rmkdir { qid }, out)
        }
        Fcall::Tsymlink {
            name, symtgt, gid, ..
        } => {
            let (st, ctx) = creating(conn, || fid(0), name.0, gid)?;
            ctx.symlinkat(symtgt.0, st.fd, name.0)?;
            let qid = qid_at(&ctx, st.fd, name.0)?;
            reply(Fcall::Rsymlink { qid }, out)
        }
        Fcall::Tlink { name, .. } => {
            writable(conn)?;
            check_name(name.0)?;
            let dir = fid(0)?;
            let target = fid(1)?;
            dir.ctx
                .linkat(target.fd, b"", dir.fd, name.0, libc::AT_EMPTY_PATH)?;
            reply(Fcall::Rlink {}, out)
        }
        Fcall::Trenameat {
            oldname, newname, ..
        } => {
            writable(conn)?;
            check_name(oldname.0)?;
            check_name(newname.0)?;
            let od = fid(0)?;
            let nd = fid(1)?;
            od.ctx.renameat2(od.fd, oldname.0, nd.fd, newname.0, 0)?;
            reply(Fcall::Rrenameat {}, out)
        }
        Fcall::Tunlinkat { name, flags, .. } => {
            writable(conn)?;
            check_name(name.0)?;
            let st = fid(0)?;
            let fl = if flags & p9::AT_REMOVEDIR != 0 {
                libc::AT_REMOVEDIR
            } else {
                0
            };
            st.ctx.unlinkat(st.fd, name.0, fl)?;
            reply(Fcall::Runlinkat {}, out)
        }
        Fcall::Tsetattr { attr, .. } => {
            writable(conn)?;
            let st = fid(0)?;
            setattr(&st, &attr)?;
            reply(Fcall::Rsetattr {}, out)
        }
        Fcall::Tfsync { .. } => {
            // Writes reach the backend at once (no write-back cache here);
            // the backends have no durability call to pass on.
            fid(0)?;
            reply(Fcall::Rfsync {}, out)
        }
        Fcall::Tlock { .. } => {
            // Locks are advisory and kept by each client kernel.
            fid(0)?;
            reply(Fcall::Rlock { status: 0 }, out)
        }
        Fcall::Tgetlock {
            start,
            length,
            proc_id,
            client_id,
            ..
        } => {
            fid(0)?;
            reply(
                Fcall::Rgetlock {
                    ty: 2, // P9_LOCK_TYPE_UNLCK: nothing here holds a lock
                    start,
                    length,
                    proc_id,
                    client_id,
                },
                out,
            )
        }
        Fcall::Tclunk { .. } => {
            // The fid left the table on arrival; it closes when the last
            // request using it is done.
            reply(Fcall::Rclunk {}, out)
        }
        // The fid left the table on arrival: Tremove clunks it whether
        // or not the removal succeeds.
        Fcall::Tremove { .. } => {
            writable(conn)?;
            let st = fid(0)?;
            let (pfd, name) = located(&st)?;
            let dir = st
                .ctx
                .fstatx(st.fd, libc::STATX_TYPE)
                .map(|x| u32::from(x.stx_mode) & libc::S_IFMT == libc::S_IFDIR);
            let r = dir.and_then(|dir| {
                let fl = if dir { libc::AT_REMOVEDIR } else { 0 };
                st.ctx.unlinkat(pfd, &name, fl)
            });
            let _ = st.ctx.close(pfd);
            r?;
            reply(Fcall::Rremove {}, out)
        }
        Fcall::Trename { name, .. } => {
            writable(conn)?;
            check_name(name.0)?;
            let st = fid(0)?;
            let nd = fid(1)?;
            let (pfd, old) = located(&st)?;
            let r = st.ctx.renameat2(pfd, &old, nd.fd, name.0, 0);
            let _ = st.ctx.close(pfd);
            r?;
            reply(Fcall::Rrename {}, out)
        }
        Fcall::Txattrwalk { name, .. } if name.0 == p9::dirplus::NAME => {
            let st = fid(0)?;
            let nf = newfid.ok_or(Errno::EINVAL)?;
            let l = listing_of(&st)?;
            let size = l.len() as u64;
            // The fid names no file of its own: only reads of the
            // listing work on it (anything else finds no descriptor).
            nf.complete(FidState {
                ctx: Arc::clone(&st.ctx),
                fd: -1,
                open: None,
                listing: Some(Arc::new(l)),
            });
            reply(Fcall::Rxattrwalk { size }, out)
        }
        Fcall::Txattrwalk { name, .. } if name.0 == p9::order::NAME => {
            // This server keeps a connection's order (conn.rs): say so.
            let st = fid(0)?;
            newfid.ok_or(Errno::EINVAL)?.complete(FidState {
                ctx: Arc::clone(&st.ctx),
                fd: -1,
                open: None,
                listing: Some(Arc::new(Vec::new())),
            });
            reply(
                Fcall::Rxattrwalk {
                    size: p9::order::VERSION,
                },
                out,
            )
        }
        Fcall::Txattrwalk { .. } | Fcall::Txattrcreate { .. } => Err(Errno::EOPNOTSUPP),
        Fcall::Tmknod {
            name,
            mode,
            major,
            minor,
            gid,
            ..
        } => {
            let (st, ctx) = creating(conn, || fid(0), name.0, gid)?;
            // Made, never opened: Tlopen refuses anything but regular
            // files and directories, so a client's fifo or socket is its
            // own kernel's business, and a device node here is inert.
            let dev = libc::makedev(major, minor);
            ctx.mknodat(st.fd, name.0, mode, dev)?;
            let qid = qid_at(&ctx, st.fd, name.0)?;
            reply(Fcall::Rmknod { qid }, out)
        }
        // ENOENT is how 9P2000.L servers say "no authentication
        // required" (diod's clients then attach with afid = NOFID).
        Fcall::Tauth { .. } => Err(Errno::ENOENT),
        _ => Err(Errno::EOPNOTSUPP),
    }
}

/// Where the file of fid `st` is now: its directory (an `O_PATH`
/// descriptor the caller closes) and its name there — checked to still be
/// the same file, so a remove or rename by fid never hits a newcomer that
/// took the name of a file unlinked meanwhile.
fn located(st: &FidState) -> Result<(i32, Vec<u8>)> {
    let (pfd, name) = st.ctx.parent_of(st.fd)?;
    let same = (|| {
        let mine = st.ctx.fstatx(st.fd, libc::STATX_INO)?;
        let there = st
            .ctx
            .statx(pfd, &name, libc::AT_SYMLINK_NOFOLLOW, libc::STATX_INO)?;
        Ok::<bool, Errno>(
            mine.stx_ino == there.stx_ino && mine.stx_dev_minor == there.stx_dev_minor,
        )
    })();
    match same {
        Ok(true) => Ok((pfd, name)),
        other => {
            let _ = st.ctx.close(pfd);
            Err(other.err().unwrap_or(Errno::ENOENT))
        }
    }
}

fn setattr(st: &FidState, a: &p9::SetAttr) -> Result<()> {
    let ctx = &st.ctx;
    let e = libc::AT_EMPTY_PATH;
    let uid = (a.valid & p9::SETATTR_UID != 0).then_some(a.uid);
    let gid = (a.valid & p9::SETATTR_GID != 0).then_some(a.gid);
    if uid.is_some() || gid.is_some() {
        ctx.fchownat(
            st.fd,
            b"",
            uid.unwrap_or(u32::MAX),
            gid.unwrap_or(u32::MAX),
            e | libc::AT_SYMLINK_NOFOLLOW,
        )?;
    }
    // After the owner: a chown clears set-id bits, and a mode given in
    // the same request is the one that stands (as in one notify_change).
    if a.valid & p9::SETATTR_MODE != 0 {
        ctx.fchmodat(st.fd, b"", a.mode & 0o7777, e)?;
    }
    if a.valid & p9::SETATTR_SIZE != 0 {
        let fd = match st.open {
            Some(o) => o,
            None => ctx.reopen(st.fd, libc::O_WRONLY)?,
        };
        let r = ctx.ftruncate(fd, a.size as i64);
        if st.open.is_none() {
            let _ = ctx.close(fd);
        }
        r?;
    }
    let time = |set: u32, given: u32, sec: u64, nsec: u64| {
        if a.valid & set == 0 {
            None
        } else if a.valid & given != 0 {
            Some(TimeSet::At(Timespec {
                sec: sec as i64,
                nsec: nsec as u32,
            }))
        } else {
            Some(TimeSet::Now)
        }
    };
    let times = [
        time(
            p9::SETATTR_ATIME,
            p9::SETATTR_ATIME_SET,
            a.atime_sec,
            a.atime_nsec,
        ),
        time(
            p9::SETATTR_MTIME,
            p9::SETATTR_MTIME_SET,
            a.mtime_sec,
            a.mtime_nsec,
        ),
    ];
    if times != [None, None] {
        ctx.utimensat(st.fd, b"", times, e | libc::AT_SYMLINK_NOFOLLOW)?;
    }
    Ok(())
}

/// Is the file a fid names a symlink?
fn is_symlink(st: &FidState) -> bool {
    st.ctx
        .fstatx(st.fd, libc::STATX_TYPE)
        .is_ok_and(|x| u32::from(x.stx_mode) & libc::S_IFMT == libc::S_IFLNK)
}
