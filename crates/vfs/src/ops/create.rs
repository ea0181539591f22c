//! Making names: `mkdirat`, `symlinkat`, `mknodat`, `linkat`, the create
//! of `openat`, all through [`Ctx::modify`], which holds the directory's
//! lock across the backend call (dirlock.rs) and the writer mutex only for
//! the cache update that follows.

use super::prelude::*;

/// What a make call (`mkdirat`, `symlinkat`, `mknodat`, `linkat`) made:
/// a handle on it and its attributes as made. A front end answers with
/// them, rather than walking the name again (a second walk costs a
/// lookup, and could find what another writer put there meanwhile).
#[derive(Debug)]
pub struct Made {
    pub handle: Handle,
    pub stat: Statx,
}
use walkfs_fsapi::Make;

/// The host's `fs.protected_hardlinks`, read at each link (links are
/// few; an administrator may change it at any time): on where it cannot
/// be read, as Debian has it.
fn protected_hardlinks() -> bool {
    std::fs::read_to_string("/proc/sys/fs/protected_hardlinks").map_or(true, |v| v.trim() != "0")
}

thread_local! {
    /// The umask of the caller this thread acts for ([`with_umask`]).
    static CALLER_UMASK: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// Run `f` for a caller whose umask is `umask`, as a process's umask: the
/// nodes it makes lose those permission bits, unless their directory has
/// a default ACL, which then decides alone (as in Linux). A front end
/// that is handed the caller's umask apart from the mode (FUSE's
/// `DONT_MASK`) makes nodes inside it.
pub fn with_umask<R>(umask: u32, f: impl FnOnce() -> R) -> R {
    let old = CALLER_UMASK.with(|u| u.replace(umask & 0o777));
    let r = f();
    CALLER_UMASK.with(|u| u.set(old));
    r
}

impl Ctx {
    /// Run a backend change that makes name `name` in `dir`, and bring the
    /// cache in line with its result: the name's dentry becomes positive on
    /// the entry returned (or is forgotten when the backend says the cache
    /// was wrong), the directory's attributes become stale. With `pin` the
    /// new dentry comes back pinned (the create of `openat`, which must not
    /// start over once the file exists).
    ///
    /// Locking: the directory's lock, exclusively, from before the check
    /// that `dir` is still what the walk found until the cache shows the
    /// result, so no miss in `dir` can cache an answer older than this
    /// change; the writer mutex only for the cache update, after the
    /// backend answered. Changes in other directories run meanwhile.
    fn modify<T>(
        &self,
        dir: Cur,
        name: &[u8],
        pin: bool,
        op: impl FnOnce(&dyn walkfs_fsapi::FileSystem) -> Result<(walkfs_fsapi::Entry, T)>,
    ) -> Res<(Cur, T)> {
        let inner = self.inner();
        let dc = &inner.dc;
        let ds = dc.inode_snap(dir.ino).ok_or(Step::Restart)?;
        let fs = inner.sb(ds.sb())?;
        let _locked = inner.dirs.exclusive(&[dir.ino]);
        if !dc.unchanged(&dir) {
            return Err(Step::Restart);
        }
        let hash = hash_name(name);
        let res = op(&*fs);
        inner.names_changed(ds.sb(), ds.node);
        let mut w = inner.writer();
        w.changed();
        let existing = w.d_find(dc, dir.d, name, hash);
        let (entry, t) = match res {
            Ok(r) => r,
            Err(e) => {
                // The backend knows better than our cache: forget the name.
                if let (Some(idx), Errno::EEXIST | Errno::ENOENT) = (existing, e) {
                    w.d_kill(dc, idx);
                }
                return Err(e.into());
            }
        };
        let ino = w.iget(dc, ds.sb(), &entry, true).ok_or(Errno::ENOMEM)?;
        let idx = w
            .d_instantiate(dc, dir.d, name, hash, existing, ino)
            .ok_or(Errno::ENOMEM)?;
        if inner.defers(&*fs) {
            let sub = i32::from(entry.attr.is_dir());
            w.touched(dc, dir.ino, Ctx::now(), sub, 0);
        } else {
            w.mark_stale(dc, dir.ino);
        }
        if pin {
            w.get_dentry(dc, idx);
        }
        // Under the mutex nothing else changes the new dentry.
        let c = Cur::of(dc, idx).map_err(|_| Errno::EIO)?;
        Ok((c, t))
    }

    /// With the write-back on and a backend that grants node identities
    /// ahead (a walkfs server), make `what` behind the caller
    /// (writeback.rs): the entry is final at once, the server makes the
    /// node in order before anything asked of it later. `None`: make it
    /// now, with the ordinary call.
    fn make_behind(
        &self,
        fs: &dyn walkfs_fsapi::FileSystem,
        ds: &InodeSnap,
        dir: Cur,
        name: &[u8],
        owner: walkfs_fsapi::Owner,
        what: Make<'_>,
    ) -> Option<Result<(walkfs_fsapi::Entry, Option<FileHandle>)>> {
        let inner = self.inner();
        if !inner.defers(fs) {
            return None;
        }
        let g = fs.ordered()?.grant(owner)?;
        Some(inner.make_behind(fs, ds.sb(), ds.node, name, owner, g, what, dir.d))
    }

    /// `may_create` on a live directory.
    pub(super) fn may_create(&self, dir: Cur) -> Res<InodeSnap> {
        let ds = self.inner().dc.inode_snap(dir.ino).ok_or(Step::Restart)?;
        if dir.flags & D_DEAD != 0 {
            return Err(Errno::ENOENT.into());
        }
        let acl = self.acl_for(&ds)?;
        policy::may_create(&self.creds, &ds, acl::access(&acl))?;
        Ok(ds)
    }

    /// The owner and mode of a node made in `ds` (policy.rs). A directory
    /// with a default ACL cuts the mode by it, and no umask applies
    /// (`posix_acl_create`); otherwise the mount's umask and the caller's
    /// ([`with_umask`]) do. The backend gives the node the inherited ACL
    /// (a host file system does it itself).
    pub(super) fn new_owner(
        &self,
        ds: &InodeSnap,
        mode: u32,
        is_dir: bool,
    ) -> Res<(walkfs_fsapi::Owner, u32)> {
        let inner = self.inner();
        let pair = if ds.flags & I_ACL_ASSUMED != 0 {
            // A server's directory whose "no ACL" is a guess: a default
            // ACL there decides the new node's mode (asked once; the
            // answer is then known).
            Some(inner.acls_asked(ds)?)
        } else if ds.flags & I_ACL_KNOWN == 0 || ds.flags & I_DEFACL != 0 {
            Some(inner.acls(ds)?)
        } else {
            None
        };
        if let Some(default) = pair.as_ref().and_then(|p| p.default.as_ref()) {
            let (owner, mode) = policy::new_owner(&self.creds, 0, ds, mode, is_dir);
            let (perm, _) = default.inherit(mode & 0o777);
            return Ok((owner, (mode & !0o777) | perm));
        }
        let umask = inner.sw.umask.load(AtomicOrdering::Relaxed) | CALLER_UMASK.with(|u| u.get());
        Ok(policy::new_owner(&self.creds, umask, ds, mode, is_dir))
    }

    /// A node just made in `ds` by this vfs: it has no capability; when
    /// `ds` is known to have no default ACL, the node is known to have no
    /// ACL either (no backend question before the walk may pass it on
    /// the fast path).
    pub(super) fn born(&self, ds: &InodeSnap, c: Cur) {
        let inner = self.inner();
        let mut w = inner.writer();
        // Nothing gives a new node a capability.
        w.set_nocap(&inner.dc, c.ino, true);
        if ds.flags & (I_ACL_KNOWN | I_DEFACL | I_ACL_ASSUMED) == I_ACL_KNOWN {
            w.set_acl_state(&inner.dc, c.ino, Some((false, false)));
        }
    }

    /// The create of `openat(O_CREAT)`: the new file's dentry, pinned for
    /// the descriptor, and the handle the backend opened it with.
    pub(super) fn create_file(
        &self,
        dir: Cur,
        name: &[u8],
        mode: u32,
        flags: i32,
    ) -> Res<(Cur, FileHandle)> {
        let _later = crate::writeback::SettleLater::new();
        self.check_writable()?;
        let ds = self.may_create(dir)?;
        let (owner, mode) = self.new_owner(&ds, mode, false)?;
        let acc = OpenFlags(flags & O_ACCMODE);
        let (c, fh) = self.modify(dir, name, true, |fs| {
            let what = Make::File { mode, flags: acc };
            if let Some(r) = self.make_behind(fs, &ds, dir, name, owner, what) {
                let (e, fh) = r?;
                return Ok((e, fh.ok_or(Errno::EIO)?));
            }
            fs.create(NodeId(ds.node), name, mode, owner, acc)
        })?;
        self.born(&ds, c);
        Ok((c, fh))
    }

    /// `mkdirat(dirfd, path, mode)`: what it made.
    pub fn mkdirat<'h>(&self, dirfd: impl Into<At<'h>>, path: &[u8], mode: u32) -> Result<Made> {
        let _later = crate::writeback::SettleLater::new();
        let dirfd = dirfd.into();
        self.run(|| {
            let (dir, last, _trailing) = self.lookup_parent(dirfd, path)?;
            let Last::Normal(name) = last else {
                return Err(Errno::EEXIST.into());
            };
            if self.lookup_child(dir, &name)?.is_some() {
                return Err(Errno::EEXIST.into());
            }
            self.check_writable()?;
            let ds = self.may_create(dir)?;
            let (owner, mode) = self.new_owner(&ds, mode, true)?;
            let (c, ()) = self.modify(dir, &name, true, |fs| {
                let what = Make::Dir { mode };
                if let Some(r) = self.make_behind(fs, &ds, dir, &name, owner, what) {
                    return Ok((r?.0, ()));
                }
                Ok((fs.mkdir(NodeId(ds.node), &name, mode, owner)?, ()))
            })?;
            self.born(&ds, c);
            // Made empty here: a miss in it needs no backend (until a
            // child is evicted or a change is reported).
            let inner = self.inner();
            inner.writer().set_complete(&inner.dc, c.ino, true);
            Ok(Handle::adopt(&self.vfs.inner, c.d))
        })
        .and_then(|h| self.made(h))
    }

    /// What a make call returns for the node it made (`h`, pinned by the
    /// make, so no walk of the name again could find another's).
    fn made(&self, h: Handle) -> Result<Made> {
        let stat = self.statx(
            &h,
            b"",
            libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW,
            libc::STATX_BASIC_STATS | libc::STATX_BTIME,
        )?;
        Ok(Made { handle: h, stat })
    }

    /// The checks common to creating a non-directory name (symlink, link):
    /// the parent, the new name, and `EEXIST`/`ENOENT` as Linux's
    /// `filename_create` gives them.
    fn create_target(&self, dirfd: At<'_>, path: &[u8]) -> Res<(Cur, Vec<u8>)> {
        let (dir, last, trailing) = self.lookup_parent(dirfd, path)?;
        let Last::Normal(name) = last else {
            return Err(Errno::EEXIST.into());
        };
        if self.lookup_child(dir, &name)?.is_some() {
            return Err(Errno::EEXIST.into());
        }
        if trailing {
            return Err(Errno::ENOENT.into());
        }
        self.check_writable()?;
        Ok((dir, name))
    }

    /// `symlinkat(target, newdirfd, linkpath)`.
    pub fn symlinkat<'h>(
        &self,
        target: &[u8],
        newdirfd: impl Into<At<'h>>,
        linkpath: &[u8],
    ) -> Result<Made> {
        let _later = crate::writeback::SettleLater::new();
        let newdirfd = newdirfd.into();
        if target.is_empty() {
            return Err(Errno::ENOENT);
        }
        if target.len() >= walkfs_fsapi::PATH_MAX {
            return Err(Errno::ENAMETOOLONG);
        }
        self.run(|| {
            let (dir, name) = self.create_target(newdirfd, linkpath)?;
            let ds = self.may_create(dir)?;
            // A symlink takes no ACL and no umask.
            let (owner, _) = policy::new_owner(&self.creds, 0, &ds, 0o777, false);
            let (c, ()) = self.modify(dir, &name, true, |fs| {
                let what = Make::Symlink { target };
                if let Some(r) = self.make_behind(fs, &ds, dir, &name, owner, what) {
                    return Ok((r?.0, ()));
                }
                Ok((fs.symlink(NodeId(ds.node), &name, target, owner)?, ()))
            })?;
            self.born(&ds, c);
            Ok(Handle::adopt(&self.vfs.inner, c.d))
        })
        .and_then(|h| self.made(h))
    }

    /// `mknodat(dirfd, path, mode, dev)`: a fifo, a socket, a device node
    /// or (type 0 or `S_IFREG`) an empty regular file. Checks in Linux's
    /// order: the type (`EPERM` for a directory, `EINVAL` for no known
    /// type) before the path, then `filename_create`'s, then permission
    /// on the parent, then `CAP_MKNOD` for devices. Special files are made,
    /// never opened: opening one through walkfs stays refused.
    pub fn mknodat<'h>(
        &self,
        dirfd: impl Into<At<'h>>,
        path: &[u8],
        mode: u32,
        dev: u64,
    ) -> Result<Made> {
        let _later = crate::writeback::SettleLater::new();
        let dirfd = dirfd.into();
        let kind = match mode & libc::S_IFMT {
            0 | libc::S_IFREG => libc::S_IFREG,
            t @ (libc::S_IFCHR | libc::S_IFBLK | libc::S_IFIFO | libc::S_IFSOCK) => t,
            libc::S_IFDIR => return Err(Errno::EPERM),
            _ => return Err(Errno::EINVAL),
        };
        self.run(|| {
            let (dir, name) = self.create_target(dirfd, path)?;
            let ds = self.may_create(dir)?;
            let is_dev = kind == libc::S_IFCHR || kind == libc::S_IFBLK;
            if is_dev && !self.creds.is_root() {
                return Err(Errno::EPERM.into());
            }
            let (owner, perm) = self.new_owner(&ds, mode, false)?;
            let rdev = if is_dev { dev } else { 0 };
            let (c, ()) = self.modify(dir, &name, true, |fs| {
                let parent = NodeId(ds.node);
                let what = if kind == libc::S_IFREG {
                    Make::File {
                        mode: perm,
                        flags: OpenFlags(libc::O_RDONLY),
                    }
                } else {
                    Make::Special {
                        mode: kind | perm,
                        rdev,
                    }
                };
                if let Some(r) = self.make_behind(fs, &ds, dir, &name, owner, what) {
                    let (entry, fh) = r?;
                    if let Some(fh) = fh {
                        fs.release(entry.node, fh);
                    }
                    return Ok((entry, ()));
                }
                if kind == libc::S_IFREG {
                    let (entry, fh) =
                        fs.create(parent, &name, perm, owner, OpenFlags(libc::O_RDONLY))?;
                    fs.release(entry.node, fh);
                    return Ok((entry, ()));
                }
                Ok((fs.mknod(parent, &name, kind | perm, rdev, owner)?, ()))
            })?;
            self.born(&ds, c);
            Ok(Handle::adopt(&self.vfs.inner, c.d))
        })
        .and_then(|h| self.made(h))
    }

    /// `linkat(olddirfd, oldpath, newdirfd, newpath, flags)`; flags
    /// `AT_SYMLINK_FOLLOW`, `AT_EMPTY_PATH`.
    pub fn linkat<'a, 'b>(
        &self,
        olddirfd: impl Into<At<'a>>,
        oldpath: &[u8],
        newdirfd: impl Into<At<'b>>,
        newpath: &[u8],
        flags: i32,
    ) -> Result<Made> {
        let _later = crate::writeback::SettleLater::new();
        let (olddirfd, newdirfd) = (olddirfd.into(), newdirfd.into());
        check_at_flags(flags, libc::AT_SYMLINK_FOLLOW | libc::AT_EMPTY_PATH)?;
        self.run(|| {
            let follow = flags & libc::AT_SYMLINK_FOLLOW != 0;
            let old =
                self.lookup_at(olddirfd, oldpath, follow, flags & libc::AT_EMPTY_PATH != 0)?;
            let (dir, name) = self.create_target(newdirfd, newpath)?;
            let inner = self.inner();
            let os = inner.dc.inode_snap(old.ino).ok_or(Step::Restart)?;
            let ds = inner.dc.inode_snap(dir.ino).ok_or(Step::Restart)?;
            if os.sb() != ds.sb() {
                return Err(Errno::EXDEV.into());
            }
            if protected_hardlinks() {
                let acl = self.acl_for(&os)?;
                policy::may_link(&self.creds, &os, acl::access(&acl))?;
            }
            self.may_create(dir)?;
            if os.is_dir() {
                return Err(Errno::EPERM.into());
            }
            // Behind the caller when the file's attributes are known: the
            // entry shows them with the link counted.
            let behind = os.flags & I_STALE == 0;
            let (c, behind) = self.modify(dir, &name, true, |fs| {
                if behind && inner.defers(fs) {
                    let op = walkfs_fsapi::Deferred::Link {
                        node: NodeId(os.node),
                        newparent: NodeId(ds.node),
                        newname: &name,
                    };
                    inner.name_behind(fs, ds.sb(), ds.node, &name, os.node, dir.d, op)?;
                    let mut attr = os.attr();
                    attr.nlink += 1;
                    attr.ctime = Ctx::now();
                    let node = NodeId(os.node);
                    return Ok((walkfs_fsapi::Entry { node, attr }, true));
                }
                Ok((fs.link(NodeId(os.node), NodeId(ds.node), &name)?, false))
            })?;
            if !behind {
                // Its link count moved.
                inner.writer().mark_stale(&inner.dc, old.ino);
            }
            // Shown with the new count wherever its other names are listed.
            inner.attrs_changed(os.sb(), os.node);
            Ok(Handle::adopt(&self.vfs.inner, c.d))
        })
        .and_then(|h| self.made(h))
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use crate::tests_util::{mem_vfs, user, with_dirs, GatedFs};
    use crate::{Creds, Errno, Options, Vfs, AT_FDCWD};
    use std::sync::atomic::Ordering;
    use std::sync::mpsc;
    use std::time::Duration;

    /// The design this module rests on: a create holds its own directory
    /// across the backend call, and nothing else. While one is stuck in
    /// the backend, misses and creates elsewhere go on, and a miss in the
    /// same directory waits (its answer could predate the create).
    #[test]
    fn a_slow_create_holds_only_its_own_directory() {
        let fs = GatedFs::new();
        let vfs = Vfs::new(fs.clone(), &Options::default()).expect("vfs");
        with_dirs(&vfs, &["/a", "/b"]);
        let v = vfs.clone();
        let stuck = std::thread::spawn(move || {
            v.context(Creds::root())
                .mkdirat(AT_FDCWD, b"/a/slow", 0o755)
                .map(drop)
        });
        fs.gate.wait_for(1);
        // Elsewhere: a miss, a create, a lookup of what was created.
        let (tx, rx) = mpsc::channel();
        let v = vfs.clone();
        std::thread::spawn(move || {
            let ctx = v.context(Creds::root());
            let r = (
                ctx.faccessat(AT_FDCWD, b"/b/none", 0, 0),
                ctx.mkdirat(AT_FDCWD, b"/b/new", 0o755).map(drop),
                ctx.faccessat(AT_FDCWD, b"/b/new", 0, 0),
            );
            let _ = tx.send(r);
        });
        let r = rx
            .recv_timeout(Duration::from_secs(20))
            .expect("calls in another directory waited for a create in /a");
        assert_eq!(r, (Err(Errno::ENOENT), Ok(()), Ok(())));
        // In the same directory: a miss (a name not cached) waits for the
        // create. (The name being made is cached negative by the create's
        // own lookup: a stat of it meanwhile says ENOENT at once, ordered
        // before the mkdir, as in Linux.)
        let (tx, rx) = mpsc::channel();
        let v = vfs.clone();
        std::thread::spawn(move || {
            let ctx = v.context(Creds::root());
            let _ = tx.send(ctx.faccessat(AT_FDCWD, b"/a/other", 0, 0));
        });
        assert!(
            rx.recv_timeout(Duration::from_millis(200)).is_err(),
            "a miss in /a ran while a create there was in the backend"
        );
        fs.gate.open();
        assert_eq!(stuck.join().expect("join"), Ok(()));
        assert_eq!(
            rx.recv_timeout(Duration::from_secs(20)),
            Ok(Err(Errno::ENOENT))
        );
        let ctx = vfs.context(Creds::root());
        assert_eq!(ctx.faccessat(AT_FDCWD, b"/a/slow", 0, 0), Ok(()));
        assert!(fs.lookups.load(Ordering::Relaxed) > 0);
    }

    #[test]
    fn made_names_are_cached_and_failures_forget_what_the_backend_denies() {
        let vfs = mem_vfs("");
        let ctx = with_dirs(&vfs, &["/d"]);
        ctx.symlinkat(b"target", AT_FDCWD, b"/d/l")
            .expect("symlink");
        ctx.mknodat(AT_FDCWD, b"/d/p", libc::S_IFIFO | 0o600, 0)
            .expect("fifo");
        let before = vfs.cache_stats().backend_lookups;
        for p in [&b"/d/l"[..], b"/d/p"] {
            assert_eq!(
                ctx.faccessat(AT_FDCWD, p, 0, libc::AT_SYMLINK_NOFOLLOW),
                Ok(())
            );
        }
        assert_eq!(
            vfs.cache_stats().backend_lookups,
            before,
            "cached by the create"
        );
        assert_eq!(
            ctx.mkdirat(AT_FDCWD, b"/d/l", 0o755).map(drop),
            Err(Errno::EEXIST)
        );
        assert_eq!(
            ctx.mkdirat(AT_FDCWD, b"/nope/x", 0o755).map(drop),
            Err(Errno::ENOENT)
        );
        assert_eq!(
            ctx.linkat(AT_FDCWD, b"/d", AT_FDCWD, b"/d2", 0).map(drop),
            Err(Errno::EPERM),
            "no hard links to directories"
        );
    }

    #[test]
    fn new_nodes_get_their_owner_from_policy() {
        let vfs = mem_vfs("umask=022");
        let ctx = with_dirs(&vfs, &["/g"]);
        ctx.fchownat(AT_FDCWD, b"/g", 0, 50, 0).expect("chown");
        ctx.fchmodat(AT_FDCWD, b"/g", 0o2777, 0).expect("chmod");
        let user = vfs.context(user(1000, 1000, &[]));
        user.mkdirat(AT_FDCWD, b"/g/sub", 0o777).expect("mkdir");
        let st = user
            .statx(AT_FDCWD, b"/g/sub", 0, libc::STATX_BASIC_STATS)
            .expect("stat");
        assert_eq!((st.stx_uid, st.stx_gid), (1000, 50));
        assert_eq!(st.stx_mode as u32 & 0o7777, 0o2755);
    }
}
