//! Each 9P2000.L request as vfs calls. Errors are the vfs's errnos, sent
//! as `Rlerror` by the caller.

use std::sync::Arc;

use walkfs_p9::{self as p9, msg, Data, Fcall, Names, Qid, Qids, Str};
use walkfs_vfs::{
    Creds, Ctx, Errno, Handle, NameStep, OpenFile, Result, Statx, TimeSet, Timespec, WriteAs,
};

use crate::fid::{Fid, FidState};
use crate::inos::Inos;
use crate::session::Session;
use crate::users;

mod locks;
pub(crate) mod xattr;

/// The open flags a client may ask for (the rest are the client kernel's
/// business or meaningless here).
const OPEN_MASK: u32 =
    (libc::O_ACCMODE | libc::O_TRUNC | libc::O_APPEND | libc::O_DIRECTORY) as u32;

/// One qid per file, the same in every reply (walk, getattr, attach,
/// open, the creates, listings), its path the number clients see for
/// host inode `ino` (inos.rs). The version is 0: walkfs cannot track a file's
/// version across the changes made on the host, and Linux's v9fs matches
/// inodes by type, version and path, so a version derived from mtime and
/// size would split one file into several inodes in a kernel client
/// whenever it changed (and a walk answered from the cache has no
/// attributes to derive it from).
/// The qid of the host file `ino` of type `mode` born at `born` (0:
/// unknown): its number as clients know it, its generation as version.
fn qid_of(inos: &Inos, mode: u32, ino: u64, born: i64) -> Qid {
    qid_raw(mode, inos.shown_born(ino, born), born)
}

/// The qid of a file of type `mode` with wire number `path`, born at
/// `born`.
fn qid_raw(mode: u32, path: u64, born: i64) -> Qid {
    let ty = match mode & libc::S_IFMT {
        libc::S_IFDIR => p9::QTDIR,
        libc::S_IFLNK => p9::QTSYMLINK,
        _ => p9::QTFILE,
    };
    Qid {
        ty,
        version: walkfs_vfs::generation_of(born),
        path,
    }
}

fn qid_of_statx(inos: &Inos, st: &Statx) -> Qid {
    qid_of(inos, st.stx_mode as u32, st.stx_ino, st.born())
}

fn qid_of_step(inos: &Inos, s: &NameStep) -> Qid {
    qid_of(inos, s.mode, s.ino, s.born)
}

/// `Rgetattr`'s stat of a file.
fn stat_of(inos: &Inos, x: &Statx) -> p9::Stat {
    let born = x.stx_mask & libc::STATX_BTIME != 0;
    p9::Stat {
        valid: p9::GETATTR_BASIC
            | if born {
                p9::GETATTR_BTIME | p9::GETATTR_GEN
            } else {
                0
            },
        qid: qid_of_statx(inos, x),
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
        btime_sec: x.stx_btime.tv_sec as u64,
        btime_nsec: u64::from(x.stx_btime.tv_nsec),
        gen: u64::from(walkfs_vfs::generation_of(x.born())),
        ..p9::Stat::default()
    }
}

/// The listing of directory `st` with each entry's attributes and a
/// symlink's body (p9::dirplus). An entry removed while listed is left
/// out; `E2BIG` past the extension's limit.
fn listing_of(inos: &Inos, st: &FidState) -> Result<Vec<u8>> {
    let ctx = &st.ctx;
    let dir = node(st)?;
    let entries = ctx
        .reopen_file(dir, libc::O_RDONLY | libc::O_DIRECTORY)?
        .getdents()?;
    let mut out = Vec::new();
    for e in entries {
        if e.name == b"." || e.name == b".." {
            continue;
        }
        let x = match ctx.statx(
            dir,
            &e.name,
            libc::AT_SYMLINK_NOFOLLOW,
            libc::STATX_BASIC_STATS | libc::STATX_BTIME,
        ) {
            Ok(x) => x,
            Err(Errno::ENOENT) => continue,
            Err(e) => return Err(e),
        };
        let link = if u32::from(x.stx_mode) & libc::S_IFMT == libc::S_IFLNK {
            ctx.readlinkat(dir, &e.name).unwrap_or_default()
        } else {
            Vec::new()
        };
        p9::dirplus::encode(&e.name, &stat_of(inos, &x), &link, &mut out);
        if out.len() > p9::dirplus::MAX_LISTING {
            return Err(Errno::E2BIG);
        }
    }
    Ok(out)
}

/// The file a fid names (`EBADF` for a fid that names none).
fn node(st: &FidState) -> Result<&Handle> {
    st.node.as_ref().ok_or(Errno::EBADF)
}

fn fstatx(st: &FidState) -> Result<Statx> {
    let mut out = Statx::default();
    st.ctx.statx_into(
        node(st)?,
        b"",
        libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW,
        libc::STATX_BASIC_STATS | libc::STATX_BTIME,
        &mut out,
    )?;
    Ok(out)
}

/// The context for a create with group `gid` asked by the client: the
/// fid's user with that group. The client's word is taken for the group
/// as it is for the user (`Tattach`'s uid): 9P2000.L carries the gid the
/// client kernel chose (the caller's fsgid, or a setgid directory's group)
/// and no supplementary groups, so the server's own user database cannot
/// judge it. `NOGID` (~0) keeps the fid's group.
fn ctx_with_gid(s: &Session, st: &FidState, gid: u32) -> Arc<Ctx> {
    let c = st.ctx.creds();
    if gid == c.gid || gid == u32::MAX {
        return Arc::clone(&st.ctx);
    }
    s.ctx_for(Creds {
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
    s: &Session,
    dir: impl FnOnce() -> Result<FidState>,
    name: &[u8],
    gid: u32,
) -> Result<(FidState, Arc<Ctx>)> {
    writable(s)?;
    check_name(name)?;
    let st = dir()?;
    let ctx = ctx_with_gid(s, &st, gid);
    Ok((st, ctx))
}

fn check_name(name: &[u8]) -> Result<()> {
    if name.is_empty() || name == b"." || name == b".." || name.contains(&b'/') || name.contains(&0)
    {
        return Err(Errno::EINVAL);
    }
    Ok(())
}

fn writable(s: &Session) -> Result<()> {
    if s.server.cfg.read_only {
        Err(Errno::EROFS)
    } else {
        Ok(())
    }
}

/// The attributes of `name` in the directory `dir` (after creating it).
fn statx_at(ctx: &Ctx, dir: &Handle, name: &[u8]) -> Result<Statx> {
    let mut st = Statx::default();
    ctx.statx_into(
        dir,
        name,
        libc::AT_SYMLINK_NOFOLLOW,
        libc::STATX_BASIC_STATS | libc::STATX_BTIME,
        &mut st,
    )?;
    Ok(st)
}

/// One request being answered: what each message's function needs.
struct Req<'a> {
    s: &'a Session,
    /// The fids the request names, resolved on arrival (conn.rs).
    fids: &'a [Arc<Fid>],
    /// The fid it makes, pending until it completes or fails.
    newfid: Option<&'a Arc<Fid>>,
    tag: u16,
}

/// Answer `f` (whose fids `fids` and `newfid` were resolved on arrival)
/// into `out`; an error is sent as `Rlerror` by the caller.
pub(crate) fn handle(
    s: &Session,
    f: &Fcall<'_>,
    fids: &[Arc<Fid>],
    newfid: Option<&Arc<Fid>>,
    tag: u16,
    out: &mut Vec<u8>,
) -> Result<()> {
    let r = Req {
        s,
        fids,
        newfid,
        tag,
    };
    // Another client's lease on what this request names is recalled
    // first (lease.rs): its holder's changes are carried out before this
    // client is answered about the object.
    if !matches!(f, Fcall::Tclunk { .. }) {
        r.recall_others();
    }
    match *f {
        Fcall::Tattach {
            uname,
            n_uname,
            afid,
            aname,
            ..
        } => r.attach(uname, n_uname, afid, aname, out),
        Fcall::Twalk { names, .. } => r.walk(names, out),
        Fcall::Tgetattr { .. } => r.getattr(out),
        Fcall::Treadlink { .. } => r.readlink(out),
        Fcall::Tlopen { flags, .. } => r.lopen(flags, out),
        Fcall::Tlcreate {
            name,
            flags,
            mode,
            gid,
            ..
        } => r.lcreate(name, flags, mode, gid, None, out),
        Fcall::Tlcreatei {
            name,
            flags,
            mode,
            gid,
            ino,
            ..
        } => r.lcreate(name, flags, mode, gid, Some(ino), out),
        Fcall::Tread { offset, count, .. } => r.read(offset, count, out),
        Fcall::Twrite { offset, data, .. } => r.write(offset, data, out),
        Fcall::Treaddir { offset, count, .. } => r.readdir(offset, count, out),
        Fcall::Tstatfs { .. } => r.statfs(out),
        Fcall::Tmkdir {
            name, mode, gid, ..
        } => r.mkdir(name, mode, gid, None, out),
        Fcall::Tmkdiri {
            name,
            mode,
            gid,
            ino,
            ..
        } => r.mkdir(name, mode, gid, Some(ino), out),
        Fcall::Tsymlink {
            name, symtgt, gid, ..
        } => r.symlink(name, symtgt, gid, None, out),
        Fcall::Tsymlinki {
            name,
            symtgt,
            gid,
            ino,
            ..
        } => r.symlink(name, symtgt, gid, Some(ino), out),
        Fcall::Tlink { name, .. } => r.link(name, out),
        Fcall::Trenameat {
            oldname, newname, ..
        } => r.renameat(oldname, newname, out),
        Fcall::Tunlinkat { name, flags, .. } => r.unlinkat(name, flags, out),
        Fcall::Tsetattr { attr, .. } => r.set_attr(&attr, out),
        Fcall::Tfsync { .. } => r.fsync(out),
        Fcall::Tlock { flags, .. } => r.lock(f, flags, out),
        Fcall::Tgetlock { .. } => r.getlock(f, out),
        Fcall::Tclunk { .. } => r.clunk(out),
        Fcall::Tremove { .. } => r.remove(out),
        Fcall::Trename { name, .. } => r.rename(name, out),
        Fcall::Txattrwalk { name, .. } if name.0 == p9::dirplus::NAME => r.list_plus(out),
        Fcall::Txattrwalk { name, .. } if name.0 == p9::order::NAME => r.order(out),
        Fcall::Txattrwalk { name, .. } if name.0 == p9::inogrant::NAME => r.inogrant(out),
        Fcall::Txattrwalk { name, .. } if name.0.starts_with(p9::inogrant::RECLAIM) => {
            r.inoreclaim(&name.0[p9::inogrant::RECLAIM.len()..], out)
        }
        Fcall::Txattrwalk { name, newfid, .. } if name.0 == p9::lease::NAME => r.lease(newfid, out),
        Fcall::Txattrwalk { name, .. } if name.0.starts_with(p9::space::FALLOCATE) => {
            r.fallocate(&name.0[p9::space::FALLOCATE.len()..], out)
        }
        Fcall::Txattrwalk { name, .. } if name.0.starts_with(p9::space::SEEK) => {
            r.seek_data(&name.0[p9::space::SEEK.len()..], out)
        }
        Fcall::Txattrwalk { name, .. } => r.xattr_walk(name.0, out),
        Fcall::Txattrcreate {
            name,
            attr_size,
            flags,
            ..
        } => r.xattr_create(name.0, attr_size, flags, out),
        Fcall::Tmknod {
            name,
            mode,
            major,
            minor,
            gid,
            ..
        } => r.mknod(name, mode, major, minor, gid, None, out),
        Fcall::Tmknodi {
            name,
            mode,
            major,
            minor,
            gid,
            ino,
            ..
        } => r.mknod(name, mode, major, minor, gid, Some(ino), out),
        // ENOENT is how 9P2000.L servers say "no authentication
        // required" (diod's clients then attach with afid = NOFID).
        Fcall::Tauth { .. } => Err(Errno::ENOENT),
        _ => Err(Errno::EOPNOTSUPP),
    }
}

impl Req<'_> {
    fn inos(&self) -> &Inos {
        &self.s.server.inos
    }

    /// Is the server in its lock grace time (`Config::lock_grace`)?
    fn in_grace(&self) -> bool {
        self.s
            .server
            .grace_until
            .is_some_and(|t| std::time::Instant::now() < t)
    }

    /// Make `name` in `dir` with `make`, which returns what it made and
    /// its attributes: with `granted`, a number this connection was
    /// granted, the file is bound to it (inos.rs); the number is spent
    /// even if the create fails. Returns what was made and its qid.
    ///
    /// A create a reconnected client replays (it cannot know whether the
    /// server carried it out before the connection dropped) finds the
    /// file there, bound to the very number it names: that is the
    /// client's own file, and `again` gives what the create would have
    /// (an open of it, for `Tlcreatei`), never truncating what was
    /// written to it since.
    fn made<T>(
        &self,
        granted: Option<u64>,
        at: (&Ctx, &Handle, &[u8]),
        make: impl FnOnce() -> Result<(T, Statx)>,
        again: impl FnOnce(&Statx) -> Result<T>,
    ) -> Result<(T, Qid)> {
        let Some(g) = granted else {
            let (t, x) = make()?;
            return Ok((t, qid_of_statx(self.inos(), &x)));
        };
        let (ctx, dir, name) = at;
        let spent = self.s.unspent.lock().spend(g);
        let locate = || {
            let fd = ctx.backend_fd(dir).ok().flatten()?;
            crate::inostate::HostHandle::of(std::os::fd::AsFd::as_fd(&*fd), name).ok()
        };
        if spent {
            let r = self.inos().make(
                g,
                name,
                || {
                    let (t, x) = make()?;
                    Ok(((t, x.stx_mode as u32, x.born()), x.stx_ino, x.born()))
                },
                locate,
            );
            match r {
                Ok((t, mode, born)) => return Ok((t, qid_raw(mode, g, born))),
                Err(Errno::EEXIST) => {}
                Err(e) => return Err(e),
            }
        }
        let there = statx_at(ctx, dir, name).ok();
        let ours = |x: &Statx| {
            if self.inos().granted_born(x.stx_ino, x.born()) == Some(g) {
                return true;
            }
            // Made by a server that died before it bound the file?
            let born = match crate::own::named(ctx, dir, name) {
                Some(Some((ino, born))) if ino == x.stx_ino => born,
                _ => return false,
            };
            self.inos().adopt_intended(g, name, x.stx_ino, born, locate)
        };
        if let Some(x) = there.filter(ours) {
            tracing::debug!("{}: create of {g:#x} replayed", self.s.peer);
            let t = again(&x)?;
            return Ok((t, qid_raw(x.stx_mode as u32, g, x.born())));
        }
        if spent {
            return Err(Errno::EEXIST);
        }
        tracing::info!(
            "{}: create with number {g:#x}, not granted to it",
            self.s.peer
        );
        Err(Errno::EINVAL)
    }

    /// When something is bound (inos.rs) and `name` in `dir` is a
    /// directory or a file's last name, its host number: a removal of the
    /// name frees the number for another file, which must not show the
    /// granted one.
    fn last_name(&self, ctx: &Ctx, dir: &Handle, name: &[u8]) -> Option<u64> {
        if !self.inos().any() {
            return None;
        }
        let x = statx_at(ctx, dir, name).ok()?;
        let is_dir = u32::from(x.stx_mode) & libc::S_IFMT == libc::S_IFDIR;
        (is_dir || x.stx_nlink <= 1).then_some(x.stx_ino)
    }

    /// File `fd` was just made in the directory of `dir_fid`: if this
    /// connection holds a lease there, the host's opens of the file wait
    /// for it too (lease.rs). Before the create is answered.
    fn cover(&self, ctx: &Ctx, dir_fid: &FidState, made: &OpenFile) {
        let leases = &self.s.server.leases;
        if !leases.any() {
            return;
        }
        let (Some(me), Ok(dir)) = (self.s.me.get(), node(dir_fid)) else {
            return;
        };
        let Ok(Some(dfd)) = ctx.backend_fd(dir) else {
            return;
        };
        let Some(lease) = leases.held_by(me, std::os::fd::AsFd::as_fd(&*dfd)) else {
            return;
        };
        if let Ok(Some(file)) = made.host_file() {
            leases.cover(&lease, file);
        }
    }

    /// Recall the leases other connections hold on the files this
    /// request's fids name (lease.rs). Costs nothing while no other
    /// connection holds one.
    fn recall_others(&self) {
        let leases = &self.s.server.leases;
        let Some(me) = self.s.me.get() else { return };
        if !leases.others_hold(me) {
            return;
        }
        for fid in self.fids {
            let Ok(st) = fid.get() else { continue };
            let Some(h) = &st.node else { continue };
            let Ok(Some(fd)) = st.ctx.backend_fd(h) else {
                continue;
            };
            leases.recall_for(me, std::os::fd::AsFd::as_fd(&*fd));
        }
    }

    /// The state of the `i`th fid the request names.
    fn fid(&self, i: usize) -> Result<FidState> {
        self.fids.get(i).ok_or(Errno::EBADF)?.get()
    }

    fn reply(&self, f: Fcall<'_>, out: &mut Vec<u8>) -> Result<()> {
        f.encode(self.tag, out);
        Ok(())
    }

    /// `Tattach`: a fid for the export's root, acting as the user named.
    fn attach(
        &self,
        uname: Str<'_>,
        n_uname: u32,
        afid: u32,
        aname: Str<'_>,
        out: &mut Vec<u8>,
    ) -> Result<()> {
        if let Some(secret) = &self.s.server.cfg.secret {
            let ok = self.s.auth_ok(afid, secret)
                || crate::auth::secret_in_aname(aname.0).is_some_and(|s| secret.matches(s));
            if !ok {
                tracing::warn!("{}: attach refused: no or wrong secret", self.s.peer);
                return Err(Errno::EACCES);
            }
        }
        let mut creds = users::creds_for(n_uname, uname.0).ok_or(Errno::EACCES)?;
        // A client that checks permissions itself (Linux's v9fs,
        // access=client) has already decided with groups the server
        // never sees: the server then checks none of its own.
        creds.privileged = self.s.server.cfg.trust_client_permissions;
        let ctx = self.s.ctx_for(creds);
        let mut steps = Vec::new();
        let root = ctx
            .walk_handle(walkfs_vfs::AT_FDCWD, &[], &mut steps)?
            .ok_or(Errno::EIO)?;
        let st = FidState {
            ctx,
            node: Some(root),
            open: None,
            listing: None,
            lease: None,
            xattr: None,
        };
        let qid = qid_of_statx(self.inos(), &fstatx(&st)?);
        self.newfid.ok_or(Errno::EBADF)?.complete(st);
        self.reply(Fcall::Rattach { qid }, out)
    }

    /// `Twalk`: a new fid (or the same one) for what the names lead to; the qids of the steps taken.
    fn walk(&self, names: Names<'_>, out: &mut Vec<u8>) -> Result<()> {
        let from = self.fid(0)?;
        let names = names.as_slice();
        let mut steps = Vec::with_capacity(names.len());
        let to = from.ctx.walk_handle(node(&from)?, names, &mut steps);
        if self.s.own.any() {
            // The names walked, and the one found missing: the client
            // knows them as the host shows them now (own.rs).
            if let Ok(x) = fstatx(&from) {
                let mut dir = x.stx_ino;
                for (i, name) in names.iter().enumerate().take(steps.len() + 1) {
                    let seen = steps.get(i).map(|s| s.ino);
                    self.s.own.learned(dir, name, seen);
                    match seen {
                        Some(ino) => dir = ino,
                        None => break,
                    }
                }
            }
        }
        let to = to?;
        let mut qids = Qids::default();
        for s in &steps {
            qids.push(qid_of_step(self.inos(), s));
        }
        match (to, self.newfid) {
            (Some(h), Some(nf)) => nf.complete(FidState {
                ctx: Arc::clone(&from.ctx),
                node: Some(h),
                open: None,
                listing: None,
                lease: None,
                xattr: None,
            }),
            // A walk of the fid onto itself.
            (Some(h), None) => self.fids[0].update(|st| st.node = Some(h))?,
            // A partial walk makes no fid.
            (None, Some(nf)) => {
                nf.fail();
                let mut t = self.s.fids.lock();
                t.retain(|_, x| !Arc::ptr_eq(x, nf));
            }
            (None, None) => {}
        }
        self.reply(Fcall::Rwalk { qids }, out)
    }

    /// `Tgetattr`.
    fn getattr(&self, out: &mut Vec<u8>) -> Result<()> {
        let st = self.fid(0)?;
        let x = fstatx(&st)?;
        self.reply(
            Fcall::Rgetattr {
                st: stat_of(self.inos(), &x),
            },
            out,
        )
    }

    /// `Treadlink`.
    fn readlink(&self, out: &mut Vec<u8>) -> Result<()> {
        let st = self.fid(0)?;
        let mut buf = [0u8; libc::PATH_MAX as usize];
        let n = match st.ctx.readlinkat_into(node(&st)?, b"", &mut buf) {
            // The vfs's readlinkat(fd, "") of a non-symlink is ENOENT
            // (Linux's do_readlinkat); a fid names its file, and
            // readlink(2) of a file that is no symlink is EINVAL, as
            // diod and QEMU answer.
            Err(Errno::ENOENT) if !is_symlink(&st) => return Err(Errno::EINVAL),
            r => r?,
        };
        self.reply(
            Fcall::Rreadlink {
                target: Str(&buf[..n]),
            },
            out,
        )
    }

    /// `Tlopen`: the fid's file opened for I/O.
    fn lopen(&self, flags: u32, out: &mut Vec<u8>) -> Result<()> {
        let st = self.fid(0)?;
        if st.open.is_some() {
            return Err(Errno::EBADF);
        }
        let flags = flags & OPEN_MASK;
        if flags & libc::O_ACCMODE as u32 != libc::O_RDONLY as u32
            || flags & libc::O_TRUNC as u32 != 0
        {
            writable(self.s)?;
        }
        let file = st.ctx.reopen_file(node(&st)?, flags as i32)?;
        let x = fstatx(&st)?;
        // On an error the file closes here, unused.
        self.fids[0].update(|s| s.open = Some(file))?;
        self.reply(
            Fcall::Rlopen {
                qid: qid_of_statx(self.inos(), &x),
                iounit: self.s.iounit(),
            },
            out,
        )
    }

    /// `Tlcreate`: a new file, opened; the fid now names it. `Tlcreatei`
    /// with the granted number `ino`.
    fn lcreate(
        &self,
        name: Str<'_>,
        flags: u32,
        mode: u32,
        gid: u32,
        ino: Option<u64>,
        out: &mut Vec<u8>,
    ) -> Result<()> {
        let note = self.s.own.begin();
        let (st, ctx) = creating(self.s, || self.fid(0), name.0, gid)?;
        let flags = (flags & OPEN_MASK) as i32 | libc::O_CREAT | libc::O_EXCL;
        // A host open of the new file may come the moment it exists: it
        // waits until the file is noted under this connection's lease.
        let leases = &self.s.server.leases;
        let _making = leases.any().then(|| leases.begin_make());
        let dir = node(&st)?;
        // Make `file` the fid's file (on an error it closes, unused).
        let adopt = |file: &OpenFile| -> Result<Statx> {
            let h = file.handle()?;
            let x = file.statx(libc::STATX_BASIC_STATS | libc::STATX_BTIME)?;
            self.fids[0].update(|s| {
                s.node = Some(h);
                s.open = Some(file.clone());
            })?;
            Ok(x)
        };
        let ((), qid) = self.made(
            ino,
            (&ctx, dir, name.0),
            || {
                let file = ctx.open_file(dir, name.0, flags, mode & 0o7777)?;
                let x = adopt(&file)?;
                self.cover(&ctx, &st, &file);
                note.entry(&ctx, dir, name.0);
                Ok(((), x))
            },
            |_| {
                let keep = flags & !(libc::O_CREAT | libc::O_EXCL | libc::O_TRUNC);
                let file = ctx.open_file(dir, name.0, keep | libc::O_NOFOLLOW, 0)?;
                adopt(&file).map(|_| ())
            },
        )?;
        let iounit = self.s.iounit();
        self.reply(
            match ino {
                None => Fcall::Rlcreate { qid, iounit },
                Some(_) => Fcall::Rlcreatei { qid, iounit },
            },
            out,
        )
    }

    /// `Tread` of an open file, or of a listing fid.
    fn read(&self, offset: u64, count: u32, out: &mut Vec<u8>) -> Result<()> {
        let st = self.fid(0)?;
        if let Some(l) = &st.listing {
            let from = (offset.min(l.len() as u64)) as usize;
            let n = (count.min(self.s.iounit()) as usize).min(l.len() - from);
            let data = p9::Data(&l[from..from + n]);
            return self.reply(Fcall::Rread { data }, out);
        }
        let file = st.open.as_ref().ok_or(Errno::EBADF)?;
        let n = count.min(self.s.iounit()) as usize;
        let start = p9::begin(out, msg::Rread, self.tag);
        let at = out.len();
        out.resize(at + 4 + n, 0);
        // The file's bytes go straight into the reply.
        let got = file.pread(&mut out[at + 4..], offset)?;
        out.truncate(at + 4 + got);
        out[at..at + 4].copy_from_slice(&(got as u32).to_le_bytes());
        p9::finish(out, start);
        Ok(())
    }

    /// `Twrite`.
    fn write(&self, offset: u64, data: Data<'_>, out: &mut Vec<u8>) -> Result<()> {
        let note = self.s.own.begin();
        writable(self.s)?;
        let st = self.fid(0)?;
        if let Some(x) = &st.xattr {
            return self.xattr_write(x, offset, data, out);
        }
        let file = st.open.as_ref().ok_or(Errno::EBADF)?;
        let n = file.pwrite(data.0, offset)?;
        if let Some(h) = &st.node {
            note.inode(&st.ctx, h);
        }
        self.reply(Fcall::Rwrite { count: n as u32 }, out)
    }

    /// `Treaddir`.
    fn readdir(&self, offset: u64, count: u32, out: &mut Vec<u8>) -> Result<()> {
        let st = self.fid(0)?;
        let file = st.open.as_ref().ok_or(Errno::EBADF)?;
        // Offsets are positions in the listing: entry i carries i + 1,
        // where the next read starts.
        file.lseek(offset as i64, libc::SEEK_SET)?;
        let entries = file.getdents()?;
        if self.s.own.any() {
            if let Ok(x) = fstatx(&st) {
                let seen =
                    |name: &[u8]| entries.iter().find(|e| &e.name[..] == name).map(|e| e.ino);
                self.s.own.learned_dir(x.stx_ino, &seen, offset == 0);
            }
        }
        let max = count.min(self.s.iounit()) as usize;
        let start = p9::begin(out, msg::Rreaddir, self.tag);
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
                qid_raw(mode, self.inos().shown(e.ino), 0),
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

    /// `Tstatfs`.
    fn statfs(&self, out: &mut Vec<u8>) -> Result<()> {
        let st = self.fid(0)?;
        let s = st.ctx.statfs(node(&st)?, b"")?;
        self.reply(
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

    /// `Tmkdir`; `Tmkdiri` with the granted number `ino`.
    fn mkdir(
        &self,
        name: Str<'_>,
        mode: u32,
        gid: u32,
        ino: Option<u64>,
        out: &mut Vec<u8>,
    ) -> Result<()> {
        let note = self.s.own.begin();
        let (st, ctx) = creating(self.s, || self.fid(0), name.0, gid)?;
        let dir = node(&st)?;
        let ((), qid) = self.made(
            ino,
            (&ctx, dir, name.0),
            || {
                // Its attributes as made: no second walk of the name.
                let m = ctx.mkdirat(dir, name.0, mode & 0o7777)?;
                Ok(((), m.stat))
            },
            |_| Ok(()),
        )?;
        note.entry(&ctx, dir, name.0);
        self.reply(
            match ino {
                None => Fcall::Rmkdir { qid },
                Some(_) => Fcall::Rmkdiri { qid },
            },
            out,
        )
    }

    /// `Tsymlink`; `Tsymlinki` with the granted number `ino`.
    fn symlink(
        &self,
        name: Str<'_>,
        symtgt: Str<'_>,
        gid: u32,
        ino: Option<u64>,
        out: &mut Vec<u8>,
    ) -> Result<()> {
        let note = self.s.own.begin();
        let (st, ctx) = creating(self.s, || self.fid(0), name.0, gid)?;
        let dir = node(&st)?;
        let ((), qid) = self.made(
            ino,
            (&ctx, dir, name.0),
            || {
                // Its attributes as made: no second walk of the name.
                let m = ctx.symlinkat(symtgt.0, dir, name.0)?;
                Ok(((), m.stat))
            },
            |_| Ok(()),
        )?;
        note.entry(&ctx, dir, name.0);
        self.reply(
            match ino {
                None => Fcall::Rsymlink { qid },
                Some(_) => Fcall::Rsymlinki { qid },
            },
            out,
        )
    }

    /// `Tlink`.
    fn link(&self, name: Str<'_>, out: &mut Vec<u8>) -> Result<()> {
        let note = self.s.own.begin();
        writable(self.s)?;
        check_name(name.0)?;
        let dir = self.fid(0)?;
        let target = self.fid(1)?;
        dir.ctx.linkat(
            node(&target)?,
            b"",
            node(&dir)?,
            name.0,
            libc::AT_EMPTY_PATH,
        )?;
        note.entry(&dir.ctx, node(&dir)?, name.0);
        note.inode(&dir.ctx, node(&target)?);
        self.reply(Fcall::Rlink {}, out)
    }

    /// `Trenameat`.
    fn renameat(&self, oldname: Str<'_>, newname: Str<'_>, out: &mut Vec<u8>) -> Result<()> {
        let note = self.s.own.begin();
        writable(self.s)?;
        check_name(oldname.0)?;
        check_name(newname.0)?;
        let od = self.fid(0)?;
        let nd = self.fid(1)?;
        let replaced = self.last_name(&nd.ctx, node(&nd)?, newname.0);
        od.ctx
            .renameat2(node(&od)?, oldname.0, node(&nd)?, newname.0, 0)?;
        note.entry(&od.ctx, node(&od)?, oldname.0);
        note.entry(&od.ctx, node(&nd)?, newname.0);
        if let Some(host) = replaced {
            self.inos().unbind(host);
        }
        self.reply(Fcall::Rrenameat {}, out)
    }

    /// `Tunlinkat`.
    fn unlinkat(&self, name: Str<'_>, flags: u32, out: &mut Vec<u8>) -> Result<()> {
        let note = self.s.own.begin();
        writable(self.s)?;
        check_name(name.0)?;
        let st = self.fid(0)?;
        let fl = if flags & p9::AT_REMOVEDIR != 0 {
            libc::AT_REMOVEDIR
        } else {
            0
        };
        let dir = node(&st)?;
        let last = self.last_name(&st.ctx, dir, name.0);
        st.ctx.unlinkat(dir, name.0, fl)?;
        note.entry(&st.ctx, dir, name.0);
        if let Some(host) = last {
            self.inos().unbind(host);
        }
        self.reply(Fcall::Runlinkat {}, out)
    }

    /// `Tsetattr`.
    fn set_attr(&self, attr: &p9::SetAttr, out: &mut Vec<u8>) -> Result<()> {
        let note = self.s.own.begin();
        writable(self.s)?;
        let st = self.fid(0)?;
        setattr(&st, attr)?;
        if let Some(h) = &st.node {
            note.inode(&st.ctx, h);
        }
        self.reply(Fcall::Rsetattr {}, out)
    }

    /// `Tfsync`.
    fn fsync(&self, out: &mut Vec<u8>) -> Result<()> {
        // Writes reach the backend at once (no write-back cache here);
        // the backends have no durability call to pass on. The numbers
        // of the files made so far are made durable.
        self.fid(0)?;
        self.inos().sync();
        self.reply(Fcall::Rfsync {}, out)
    }

    /// `Tclunk`; of a fid after `Txattrcreate`, the attribute's set
    /// (handlers/xattr.rs), whose outcome the reply is.
    fn clunk(&self, out: &mut Vec<u8>) -> Result<()> {
        // The fid left the table on arrival; it closes when the last
        // request using it is done.
        if let Ok(st) = self.fid(0) {
            if let Some(x) = &st.xattr {
                self.xattr_commit(&st, x)?;
            }
        }
        self.reply(Fcall::Rclunk {}, out)
    }

    /// `Tremove`: the fid left the table on arrival, so it is clunked whether or not the removal succeeds.
    fn remove(&self, out: &mut Vec<u8>) -> Result<()> {
        writable(self.s)?;
        let st = self.fid(0)?;
        let (pfd, name) = located(&st)?;
        let dir = st
            .ctx
            .statx(node(&st)?, b"", libc::AT_EMPTY_PATH, libc::STATX_TYPE)
            .map(|x| u32::from(x.stx_mode) & libc::S_IFMT == libc::S_IFDIR);
        dir.and_then(|dir| {
            let fl = if dir { libc::AT_REMOVEDIR } else { 0 };
            st.ctx.unlinkat(&pfd, &name, fl)
        })?;
        self.reply(Fcall::Rremove {}, out)
    }

    /// `Trename` (by fid).
    fn rename(&self, name: Str<'_>, out: &mut Vec<u8>) -> Result<()> {
        writable(self.s)?;
        check_name(name.0)?;
        let st = self.fid(0)?;
        let nd = self.fid(1)?;
        let (pfd, old) = located(&st)?;
        st.ctx.renameat2(&pfd, &old, node(&nd)?, name.0, 0)?;
        self.reply(Fcall::Rrename {}, out)
    }

    /// `Txattrwalk("walkfs.readdirplus")`: a fid whose reads give the directory's listing with attributes (docs/readdirplus-protocol.md).
    fn list_plus(&self, out: &mut Vec<u8>) -> Result<()> {
        let st = self.fid(0)?;
        let nf = self.newfid.ok_or(Errno::EINVAL)?;
        let l = listing_of(self.inos(), &st)?;
        let size = l.len() as u64;
        // The fid names no file of its own: only reads of the
        // listing work on it (anything else finds no descriptor).
        nf.complete(FidState {
            ctx: Arc::clone(&st.ctx),
            node: None,
            open: None,
            listing: Some(Arc::new(l)),
            lease: None,
            xattr: None,
        });
        self.reply(Fcall::Rxattrwalk { size }, out)
    }

    /// `Txattrwalk("walkfs.order")`: this server keeps a connection's order (conn.rs), and says so.
    /// The reply `Rxattrwalk size` of a walkfs extension's `Txattrwalk`
    /// whose new fid names nothing and reads nothing (p9::order,
    /// p9::space).
    fn nothing_fid_reply(&self, st: &FidState, size: u64, out: &mut Vec<u8>) -> Result<()> {
        self.newfid.ok_or(Errno::EINVAL)?.complete(FidState {
            ctx: Arc::clone(&st.ctx),
            node: None,
            open: None,
            listing: Some(Arc::new(Vec::new())),
            lease: None,
            xattr: None,
        });
        self.reply(Fcall::Rxattrwalk { size }, out)
    }

    /// `fallocate` on the fid's open file (p9::space).
    fn fallocate(&self, args: &[u8], out: &mut Vec<u8>) -> Result<()> {
        let (mode, off, len) = p9::space::parse_fallocate(args).ok_or(Errno::EINVAL)?;
        let note = self.s.own.begin();
        writable(self.s)?;
        let st = self.fid(0)?;
        let file = st.open.as_ref().ok_or(Errno::EBADF)?;
        let off = i64::try_from(off).map_err(|_| Errno::EINVAL)?;
        let len = i64::try_from(len).map_err(|_| Errno::EINVAL)?;
        file.fallocate(mode, off, len)?;
        if let Some(h) = &st.node {
            note.inode(&st.ctx, h);
        }
        self.nothing_fid_reply(&st, 0, out)
    }

    /// `SEEK_DATA`/`SEEK_HOLE` on the fid's open file (p9::space).
    fn seek_data(&self, args: &[u8], out: &mut Vec<u8>) -> Result<()> {
        let (whence, off) = p9::space::parse_seek(args).ok_or(Errno::EINVAL)?;
        if whence != libc::SEEK_DATA && whence != libc::SEEK_HOLE {
            return Err(Errno::EINVAL);
        }
        let st = self.fid(0)?;
        let file = st.open.as_ref().ok_or(Errno::EBADF)?;
        let at = file.lseek(i64::try_from(off).map_err(|_| Errno::ENXIO)?, whence)?;
        self.nothing_fid_reply(&st, at, out)
    }

    fn order(&self, out: &mut Vec<u8>) -> Result<()> {
        // This server keeps a connection's order (self.s.rs): say so.
        let st = self.fid(0)?;
        self.nothing_fid_reply(&st, p9::order::VERSION, out)
    }

    /// `Tmknod`; `Tmknodi` with the granted number `ino`.
    #[allow(clippy::too_many_arguments)]
    fn mknod(
        &self,
        name: Str<'_>,
        mode: u32,
        major: u32,
        minor: u32,
        gid: u32,
        ino: Option<u64>,
        out: &mut Vec<u8>,
    ) -> Result<()> {
        let note = self.s.own.begin();
        let (st, ctx) = creating(self.s, || self.fid(0), name.0, gid)?;
        // Made, never opened: Tlopen refuses anything but regular
        // files and directories, so a client's fifo or socket is its
        // own kernel's business, and a device node here is inert.
        let dev = libc::makedev(major, minor);
        let dir = node(&st)?;
        let ((), qid) = self.made(
            ino,
            (&ctx, dir, name.0),
            || {
                // Its attributes as made: no second walk of the name.
                let m = ctx.mknodat(dir, name.0, mode, dev)?;
                Ok(((), m.stat))
            },
            |_| Ok(()),
        )?;
        note.entry(&ctx, dir, name.0);
        self.reply(
            match ino {
                None => Fcall::Rmknod { qid },
                Some(_) => Fcall::Rmknodi { qid },
            },
            out,
        )
    }

    /// `Txattrwalk("walkfs.lease")`: a lease on the fid's directory for
    /// lease fid `lf` (lease.rs, docs/lease-protocol.md).
    fn lease(&self, lf: u32, out: &mut Vec<u8>) -> Result<()> {
        writable(self.s)?;
        let st = self.fid(0)?;
        let nf = self.newfid.ok_or(Errno::EINVAL)?;
        let me = self.s.me.get().ok_or(Errno::EOPNOTSUPP)?;
        // A recall reaches a client through its notifications.
        if !me.upgrade().is_some_and(|p| crate::notify::subscribed(&*p)) {
            return Err(Errno::EOPNOTSUPP);
        }
        let dir = node(&st)?;
        let x = st
            .ctx
            .statx(dir, b"", libc::AT_EMPTY_PATH, libc::STATX_TYPE)?;
        if u32::from(x.stx_mode) & libc::S_IFMT != libc::S_IFDIR {
            return Err(Errno::ENOTDIR);
        }
        let fd = st.ctx.backend_fd(dir)?.ok_or(Errno::EOPNOTSUPP)?;
        let hold = self.s.server.leases.grant(me.clone(), lf, fd)?;
        tracing::debug!("{}: lease {lf} granted", self.s.peer);
        nf.complete(FidState {
            ctx: Arc::clone(&st.ctx),
            node: None,
            open: None,
            listing: Some(Arc::new(Vec::new())),
            lease: Some(Arc::new(hold)),
            xattr: None,
        });
        self.reply(
            Fcall::Rxattrwalk {
                size: p9::lease::VERSION,
            },
            out,
        )
    }

    /// `Txattrwalk("walkfs.inogrant")`: a fid whose read gives a range of
    /// inode numbers for this connection's creates (docs/inode-grants.md).
    fn inogrant(&self, out: &mut Vec<u8>) -> Result<()> {
        self.range_answer(|inos| Ok(inos.grant(crate::inos::GRANT)), true, out)
    }

    /// `Txattrwalk("walkfs.inoreclaim:" + record)`: a range granted
    /// before a reconnect is this connection's again, if its ticket is
    /// ours (inos.rs). Its numbers' creates may be replayed (see
    /// [`Req::made`]) and the rest spent as before.
    fn inoreclaim(&self, record: &[u8], out: &mut Vec<u8>) -> Result<()> {
        let g = p9::inogrant::Grant::decode(record).ok_or(Errno::EINVAL)?;
        let peer = &self.s.peer;
        let check = |inos: &Inos| {
            if inos.reclaim(&g) {
                return Ok(g);
            }
            tracing::info!("{peer}: reclaim of a range not granted here");
            Err(Errno::EPERM)
        };
        self.range_answer(check, false, out)
    }

    /// A range of numbers for this connection (from `get`), and the
    /// `Rxattrwalk` answering for it: with `readable`, the new fid reads
    /// the range's record; else it reads nothing.
    fn range_answer(
        &self,
        get: impl FnOnce(&Inos) -> Result<p9::inogrant::Grant>,
        readable: bool,
        out: &mut Vec<u8>,
    ) -> Result<()> {
        writable(self.s)?;
        let st = self.fid(0)?;
        let nf = self.newfid.ok_or(Errno::EINVAL)?;
        let g = get(self.inos())?;
        if !self.s.unspent.lock().add(g) {
            return Err(Errno::EAGAIN);
        }
        let body = if readable {
            g.encode().to_vec()
        } else {
            Vec::new()
        };
        let size = body.len() as u64;
        nf.complete(FidState {
            ctx: Arc::clone(&st.ctx),
            node: None,
            open: None,
            listing: Some(Arc::new(body)),
            lease: None,
            xattr: None,
        });
        self.reply(Fcall::Rxattrwalk { size }, out)
    }
}

/// Where the file of fid `st` is now: its directory and its name there — checked to still be
/// the same file, so a remove or rename by fid never hits a newcomer that
/// took the name of a file unlinked meanwhile.
fn located(st: &FidState) -> Result<(Handle, Vec<u8>)> {
    let me = node(st)?;
    let (pfd, name) = st.ctx.parent_of(me)?;
    let same = (|| {
        let mine = st
            .ctx
            .statx(me, b"", libc::AT_EMPTY_PATH, libc::STATX_INO)?;
        let there = st
            .ctx
            .statx(&pfd, &name, libc::AT_SYMLINK_NOFOLLOW, libc::STATX_INO)?;
        Ok::<bool, Errno>(
            mine.stx_ino == there.stx_ino && mine.stx_dev_minor == there.stx_dev_minor,
        )
    })();
    match same {
        Ok(true) => Ok((pfd, name)),
        other => Err(other.err().unwrap_or(Errno::ENOENT)),
    }
}

fn setattr(st: &FidState, a: &p9::SetAttr) -> Result<()> {
    let ctx = &st.ctx;
    let e = libc::AT_EMPTY_PATH;
    let uid = (a.valid & p9::SETATTR_UID != 0).then_some(a.uid);
    let gid = (a.valid & p9::SETATTR_GID != 0).then_some(a.gid);
    if uid.is_some() || gid.is_some() {
        ctx.fchownat(
            node(st)?,
            b"",
            uid.unwrap_or(u32::MAX),
            gid.unwrap_or(u32::MAX),
            e | libc::AT_SYMLINK_NOFOLLOW,
        )?;
    }
    // After the owner: a chown clears set-id bits, and a mode given in
    // the same request is the one that stands (as in one notify_change).
    if a.valid & p9::SETATTR_MODE != 0 {
        ctx.fchmodat(node(st)?, b"", a.mode & 0o7777, e)?;
    }
    if a.valid & p9::SETATTR_SIZE != 0 {
        // Set-id bits go as for a truncate by this request's caller.
        let by = WriteAs::As(ctx.creds());
        match &st.open {
            Some(f) => f.ftruncate_by(a.size as i64, by)?,
            None => ctx
                .reopen_file(node(st)?, libc::O_WRONLY)?
                .ftruncate_by(a.size as i64, by)?,
        }
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
        ctx.utimensat(node(st)?, b"", times, e | libc::AT_SYMLINK_NOFOLLOW)?;
    }
    Ok(())
}

/// Is the file a fid names a symlink?
fn is_symlink(st: &FidState) -> bool {
    node(st)
        .and_then(|h| st.ctx.statx(h, b"", libc::AT_EMPTY_PATH, libc::STATX_TYPE))
        .is_ok_and(|x| u32::from(x.stx_mode) & libc::S_IFMT == libc::S_IFLNK)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use walkfs_p9::{Fcall, Str};
    use walkfs_vfs::{Errno, Options, Vfs};

    use super::{check_name, handle};
    use crate::fid::Fid;
    use crate::session::Session;
    use crate::{Config, Server};

    fn session(read_only: bool) -> Session {
        let vfs = Vfs::new(Arc::new(walkfs_memfs::MemFs::new()), &Options::default()).expect("vfs");
        let cfg = Config {
            read_only,
            inline_all: true,
            ..Config::default()
        };
        Session::new(Server::new(vfs, cfg), "test".into())
    }

    /// `f` answered with the fids given, as conn.rs would call it: the
    /// reply's message type.
    fn answer(s: &Session, f: Fcall<'_>, fids: &[Arc<Fid>]) -> Result<u8, Errno> {
        let mut out = Vec::new();
        handle(s, &f, fids, None, 7, &mut out)?;
        let (tag, r) = Fcall::decode(&out).map_err(|_| Errno::EPROTO)?;
        assert_eq!(tag, 7, "the reply carries the request's tag");
        Ok(r.msg_type())
    }

    #[test]
    fn names_a_client_may_create() {
        for bad in [&b""[..], b".", b"..", b"a/b", b"a\0b"] {
            assert_eq!(check_name(bad), Err(Errno::EINVAL), "{bad:?}");
        }
        for good in [&b"a"[..], b"...", b".hidden", b"a b"] {
            assert_eq!(check_name(good), Ok(()), "{good:?}");
        }
    }

    #[test]
    fn a_request_naming_no_fid_it_has_is_ebadf() {
        let s = session(false);
        assert_eq!(
            answer(
                &s,
                Fcall::Tgetattr {
                    fid: 1,
                    request_mask: 0
                },
                &[]
            )
            .err(),
            Some(Errno::EBADF)
        );
        assert_eq!(
            answer(&s, Fcall::Tstatfs { fid: 1 }, &[]).err(),
            Some(Errno::EBADF)
        );
    }

    #[test]
    fn a_read_only_export_refuses_changes_before_looking_at_fids() {
        let s = session(true);
        let mkdir = Fcall::Tmkdir {
            dfid: 1,
            name: Str(b"d"),
            mode: 0o755,
            gid: 0,
        };
        assert_eq!(answer(&s, mkdir, &[]).err(), Some(Errno::EROFS));
        let unlink = Fcall::Tunlinkat {
            dirfid: 1,
            name: Str(b"d"),
            flags: 0,
        };
        assert_eq!(answer(&s, unlink, &[]).err(), Some(Errno::EROFS));
    }

    #[test]
    fn no_authentication_is_said_with_enoent_and_an_xattr_walk_needs_its_fid() {
        let s = session(false);
        let auth = Fcall::Tauth {
            afid: 1,
            uname: Str(b""),
            aname: Str(b""),
            n_uname: 0,
        };
        assert_eq!(answer(&s, auth, &[]).err(), Some(Errno::ENOENT));
        let x = Fcall::Txattrwalk {
            fid: 1,
            newfid: 2,
            name: Str(b"user.x"),
        };
        assert_eq!(answer(&s, x, &[]).err(), Some(Errno::EBADF));
    }
}
