//! Removing names: `unlinkat` (and `AT_REMOVEDIR`), under the locks of
//! the directory and, for rmdir, of the victim.

use super::prelude::*;
use walkfs_fsapi::Deferred;

impl Ctx {
    /// `may_delete`: may the caller remove `victim` from `dir`? The
    /// permission half is policy.rs's; the rest is about dentries.
    pub(super) fn may_delete(&self, dir: Cur, victim: Cur, isdir: bool) -> Res<()> {
        let inner = self.inner();
        let ds = inner.dc.inode_snap(dir.ino).ok_or(Step::Restart)?;
        let vs = inner.dc.inode_snap(victim.ino).ok_or(Step::Restart)?;
        let acl = self.acl_for(&ds)?;
        policy::may_delete(&self.creds, &ds, acl::access(&acl), &vs)?;
        if isdir {
            if !victim.is_dir() {
                return Err(Errno::ENOTDIR.into());
            }
            // The root of a file system (IS_ROOT in Linux). A mount point
            // is checked by the callers, after every permission check.
            if victim.flags & D_MOUNTROOT != 0 || victim.d == inner.root {
                return Err(Errno::EBUSY.into());
            }
        } else if victim.is_dir() {
            return Err(Errno::EISDIR.into());
        }
        if dir.flags & D_DEAD != 0 {
            return Err(Errno::ENOENT.into());
        }
        Ok(())
    }

    /// Remove name `name` (dentry `victim`) from `dir` after the backend
    /// did: the dentry dies, a negative one takes its place.
    fn forget_name(
        &self,
        w: &mut crate::writer::Writer,
        dir: Cur,
        name: &[u8],
        victim: Cur,
        behind: bool,
    ) {
        let inner = self.inner();
        let sub = -i32::from(victim.is_dir());
        let dc = &inner.dc;
        let hash = hash_name(name);
        if !victim.ino.is_none() {
            if behind {
                // Its link count and ctime, as the server will have them
                // (no round trip for them, and none for a file that now
                // has no name to be walked to by). Its mtime stays: an
                // unlink changes the file's inode, not its contents.
                w.ctime_changed(dc, victim.ino, Ctx::now(), -1);
            } else {
                w.mark_stale(dc, victim.ino);
            }
        }
        w.d_kill(dc, victim.d);
        if let Some(exp) = inner.neg_expiry() {
            let _ = w.d_add(dc, dir.d, name, hash, IIdx::NONE, exp);
        }
        if behind {
            w.touched(dc, dir.ino, Ctx::now(), sub, 0);
        } else {
            w.mark_stale(dc, dir.ino);
        }
    }

    /// `unlinkat(dirfd, path, flags)`; flag `AT_REMOVEDIR`.
    pub fn unlinkat<'h>(&self, dirfd: impl Into<At<'h>>, path: &[u8], flags: i32) -> Result<()> {
        let _later = crate::writeback::SettleLater::new();
        let dirfd = dirfd.into();
        check_at_flags(flags, libc::AT_REMOVEDIR)?;
        let rmdir = flags & libc::AT_REMOVEDIR != 0;
        self.run(|| {
            let (dir, last, trailing) = self.lookup_parent(dirfd, path)?;
            let name = match last {
                Last::Normal(n) => n,
                Last::Dot if rmdir => return Err(Errno::EINVAL.into()),
                Last::DotDot if rmdir => return Err(Errno::ENOTEMPTY.into()),
                Last::Root if rmdir => return Err(Errno::EBUSY.into()),
                _ => return Err(Errno::EISDIR.into()),
            };
            let victim = self.lookup_victim(dir, &name)?;
            if !rmdir && trailing {
                return Err(match victim {
                    None => Errno::ENOENT,
                    Some(v) if v.is_dir() => Errno::EISDIR,
                    Some(_) => Errno::ENOTDIR,
                }
                .into());
            }
            self.check_writable()?;
            let victim = victim.ok_or(Errno::ENOENT)?;
            self.may_delete(dir, victim, rmdir)?;
            if victim.flags & D_MOUNTPOINT != 0 {
                return Err(Errno::EBUSY.into());
            }
            let inner = self.inner();
            let dc = &inner.dc;
            let ds = dc.inode_snap(dir.ino).ok_or(Step::Restart)?;
            let fs = inner.sb(ds.sb())?;
            // The directory, and a directory being removed (no create may
            // run in it meanwhile), as Linux's vfs_rmdir locks both.
            let victim_dir = if rmdir { victim.ino } else { dir.ino };
            let _locked = inner.dirs.exclusive(&[dir.ino, victim_dir]);
            if !dc.unchanged(&dir) || !dc.unchanged(&victim) {
                return Err(Step::Restart);
            }
            // An unlink runs behind the caller when it may (writeback.rs):
            // the name was found and the permission checked from the cache;
            // an rmdir when the cache also knows the directory empty (every
            // entry cached, none positive).
            let mut behind = inner.defers(&*fs);
            if rmdir && behind {
                let vs = dc.inode_snap(victim.ino).ok_or(Step::Restart)?;
                behind = inner.complete_dirs_of(&*fs, vs.node)
                    && vs.flags & I_COMPLETE != 0
                    && inner.writer().positive_children(victim.d) == 0;
            }
            let parent = NodeId(ds.node);
            let r = if behind {
                let vnode = dc.inode_snap(victim.ino).map_or(0, |v| v.node);
                let op = if rmdir {
                    Deferred::Rmdir {
                        parent,
                        name: &name,
                        node: NodeId(vnode),
                    }
                } else {
                    Deferred::Unlink {
                        parent,
                        name: &name,
                        node: NodeId(vnode),
                    }
                };
                inner.name_behind(&*fs, ds.sb(), ds.node, &name, vnode, dir.d, op)
            } else if rmdir {
                fs.rmdir(parent, &name)
            } else {
                fs.unlink(parent, &name)
            };
            inner.names_changed(ds.sb(), ds.node);
            // Its link count, shown wherever another name lists it.
            if let Some(v) = dc.inode_snap(victim.ino) {
                inner.attrs_changed(v.sb(), v.node);
            }
            let mut w = inner.writer();
            w.changed();
            if let Ok(()) | Err(Errno::ENOENT) = r {
                self.forget_name(&mut w, dir, &name, victim, behind);
            }
            drop(w);
            Ok(r?)
        })
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use crate::tests_util::{mem_vfs, with_dirs};
    use crate::{Errno, AT_FDCWD};

    #[test]
    fn a_removed_name_leaves_a_negative_entry() {
        let vfs = mem_vfs("");
        let ctx = with_dirs(&vfs, &["/d", "/d/sub"]);
        let fd = ctx
            .openat(AT_FDCWD, b"/d/f", libc::O_CREAT | libc::O_WRONLY, 0o644)
            .expect("create");
        ctx.close(fd).expect("close");
        ctx.unlinkat(AT_FDCWD, b"/d/f", 0).expect("unlink");
        ctx.unlinkat(AT_FDCWD, b"/d/sub", libc::AT_REMOVEDIR)
            .expect("rmdir");
        let before = vfs.cache_stats().backend_lookups;
        for p in [&b"/d/f"[..], b"/d/sub"] {
            assert_eq!(ctx.faccessat(AT_FDCWD, p, 0, 0), Err(Errno::ENOENT));
        }
        assert_eq!(vfs.cache_stats().backend_lookups, before);
    }

    #[test]
    fn errors_come_in_linuxs_order() {
        let vfs = mem_vfs("");
        let ctx = with_dirs(&vfs, &["/d", "/d/full", "/d/full/x"]);
        assert_eq!(ctx.unlinkat(AT_FDCWD, b"/d/full", 0), Err(Errno::EISDIR));
        assert_eq!(
            ctx.unlinkat(AT_FDCWD, b"/d/full", libc::AT_REMOVEDIR),
            Err(Errno::ENOTEMPTY)
        );
        assert_eq!(
            ctx.unlinkat(AT_FDCWD, b"/d/.", libc::AT_REMOVEDIR),
            Err(Errno::EINVAL)
        );
        assert_eq!(
            ctx.unlinkat(AT_FDCWD, b"/", libc::AT_REMOVEDIR),
            Err(Errno::EBUSY)
        );
        assert_eq!(ctx.unlinkat(AT_FDCWD, b"/d/none/", 0), Err(Errno::ENOENT));
        assert_eq!(ctx.unlinkat(AT_FDCWD, b"/d", 0x1000), Err(Errno::EINVAL));
    }
}
