//! `renameat2`: both directories locked in a fixed order, cross-directory
//! renames serialised by the rename lock while ancestry is checked (as
//! Linux's `lock_rename` does).

use super::prelude::*;

impl Ctx {
    /// Is dentry `a` an ancestor of (or equal to) `b`?
    fn is_ancestor(&self, a: DIdx, mut b: DIdx) -> bool {
        let dc = &self.inner().dc;
        for _ in 0..4096 {
            if a == b {
                return true;
            }
            let Some(d) = dc.dentry(b) else { return false };
            let p = DIdx(d.parent.load(Relaxed));
            if p == b || p.is_none() {
                return false;
            }
            b = p;
        }
        false
    }

    /// `renameat2(olddirfd, oldpath, newdirfd, newpath, flags)`; flags
    /// `RENAME_NOREPLACE`, `RENAME_EXCHANGE`, `RENAME_WHITEOUT` (root
    /// only, `CAP_MKNOD`; the backend makes the whiteout, or refuses with
    /// `EINVAL` as a file system without them does).
    pub fn renameat2<'a, 'b>(
        &self,
        olddirfd: impl Into<At<'a>>,
        oldpath: &[u8],
        newdirfd: impl Into<At<'b>>,
        newpath: &[u8],
        flags: u32,
    ) -> Result<()> {
        let _later = crate::writeback::SettleLater::new();
        let (olddirfd, newdirfd) = (olddirfd.into(), newdirfd.into());
        if flags & !(RENAME_NOREPLACE | RENAME_EXCHANGE | RENAME_WHITEOUT) != 0
            || flags & RENAME_EXCHANGE != 0 && flags & (RENAME_NOREPLACE | RENAME_WHITEOUT) != 0
        {
            return Err(Errno::EINVAL);
        }
        let whiteout = flags & RENAME_WHITEOUT != 0;
        if whiteout && !self.creds.is_root() {
            return Err(Errno::EPERM);
        }
        let exchange = flags & RENAME_EXCHANGE != 0;
        self.run(|| {
            let (odir, olast, otrail) = self.lookup_parent(olddirfd, oldpath)?;
            let (ndir, nlast, ntrail) = self.lookup_parent(newdirfd, newpath)?;
            let inner = self.inner();
            let dc = &inner.dc;
            let ods = dc.inode_snap(odir.ino).ok_or(Step::Restart)?;
            let nds = dc.inode_snap(ndir.ino).ok_or(Step::Restart)?;
            if ods.sb() != nds.sb() {
                return Err(Errno::EXDEV.into());
            }
            let Last::Normal(oname) = olast else {
                return Err(Errno::EBUSY.into());
            };
            let nname = match nlast {
                Last::Normal(n) => n,
                _ if flags & RENAME_NOREPLACE != 0 => return Err(Errno::EEXIST.into()),
                _ => return Err(Errno::EBUSY.into()),
            };
            self.check_writable()?;
            // Between directories, ancestry is checked and acted on under
            // the rename lock: no other such rename can make a loop of it.
            let _cross = (odir.d != ndir.d).then(|| inner.rename_lock.lock());
            let old = self.lookup_victim(odir, &oname)?.ok_or(Errno::ENOENT)?;
            let new = self.lookup_victim(ndir, &nname)?;
            if flags & RENAME_NOREPLACE != 0 && new.is_some() {
                return Err(Errno::EEXIST.into());
            }
            if exchange && new.is_none() {
                return Err(Errno::ENOENT.into());
            }
            if !old.is_dir() && (otrail || !exchange && ntrail) {
                return Err(Errno::ENOTDIR.into());
            }
            if exchange && ntrail && new.is_some_and(|n| !n.is_dir()) {
                return Err(Errno::ENOTDIR.into());
            }
            // Source an ancestor of the target's directory: EINVAL; target
            // an ancestor of the source's directory: ENOTEMPTY.
            if self.is_ancestor(old.d, ndir.d) {
                return Err(Errno::EINVAL.into());
            }
            if let Some(n) = new {
                if self.is_ancestor(n.d, odir.d) {
                    return Err(if exchange {
                        Errno::EINVAL
                    } else {
                        Errno::ENOTEMPTY
                    }
                    .into());
                }
                if n.ino == old.ino {
                    return Ok(()); // the same file: nothing to do
                }
            }
            let is_dir = old.is_dir();
            self.may_delete(odir, old, is_dir)?;
            match new {
                Some(n) => self.may_delete(ndir, n, if exchange { n.is_dir() } else { is_dir })?,
                None => {
                    self.may_create(ndir)?;
                }
            }
            if odir.d != ndir.d {
                let os = dc.inode_snap(old.ino).ok_or(Step::Restart)?;
                if is_dir {
                    self.permission(&os, MAY_WRITE)?;
                }
                if let (true, Some(n)) = (exchange, new) {
                    if n.is_dir() {
                        let ns = dc.inode_snap(n.ino).ok_or(Step::Restart)?;
                        self.permission(&ns, MAY_WRITE)?;
                    }
                }
            }
            if old.flags & (D_MOUNTPOINT | D_MOUNTROOT) != 0
                || new.is_some_and(|n| n.flags & (D_MOUNTPOINT | D_MOUNTROOT) != 0)
            {
                return Err(Errno::EBUSY.into());
            }
            let fs = inner.sb(ods.sb())?;
            // Both directories, and the directories moved or replaced
            // (their `..` changes; nothing may be created in one being
            // replaced), in the fixed order dirlock.rs takes them.
            let dir_of = |c: Option<Cur>| c.filter(Cur::is_dir).map_or(odir.ino, |c| c.ino);
            let _locked =
                inner
                    .dirs
                    .exclusive(&[odir.ino, ndir.ino, dir_of(Some(old)), dir_of(new)]);
            let moved = |c: &Cur| !dc.unchanged(c);
            if moved(&odir) || moved(&ndir) || moved(&old) || new.as_ref().is_some_and(moved) {
                return Err(Step::Restart);
            }
            // A plain rename runs behind the caller when the cache can
            // decide it (writeback.rs): names found and permissions checked
            // above, and what it replaces, if anything, a file whose link
            // count is cached (a directory replaced must be empty: asked).
            let fresh = |c: Cur| dc.inode_snap(c.ino).is_some_and(|s| s.fresh());
            let behind = flags == 0
                && inner.defers(&*fs)
                && fresh(old)
                && new.is_none_or(|n| !n.is_dir() && fresh(n));
            let r = if behind {
                let onode = dc.inode_snap(old.ino).map_or(0, |s| s.node);
                inner.rename_behind(
                    &*fs,
                    ods.sb(),
                    ods.node,
                    &oname,
                    nds.node,
                    &nname,
                    onode,
                    odir.d,
                )
            } else {
                fs.rename(NodeId(ods.node), &oname, NodeId(nds.node), &nname, flags)
            };
            inner.names_changed(ods.sb(), ods.node);
            inner.names_changed(nds.sb(), nds.node);
            let mut w = inner.writer();
            w.changed();
            if r.is_ok() {
                let nhash = hash_name(&nname);
                let ohash = hash_name(&oname);
                if behind {
                    // As the server will have them: no round trip to learn.
                    let now = Ctx::now();
                    let sub = i32::from(is_dir);
                    if odir.ino == ndir.ino {
                        w.touched(dc, odir.ino, now, 0, 0);
                    } else {
                        w.touched(dc, odir.ino, now, -sub, 0);
                        w.touched(dc, ndir.ino, now, sub, 0);
                    }
                    w.ctime_changed(dc, old.ino, now, 0);
                    if let Some(n) = new {
                        w.ctime_changed(dc, n.ino, now, -1);
                    }
                } else {
                    w.mark_stale(dc, odir.ino);
                    w.mark_stale(dc, ndir.ino);
                    w.mark_stale(dc, old.ino);
                }
                if exchange {
                    if let Some(n) = new {
                        w.mark_stale(dc, n.ino);
                        w.d_move(dc, n.d, odir.d, &oname, ohash);
                    }
                    w.d_move(dc, old.d, ndir.d, &nname, nhash);
                } else {
                    if let Some(n) = new {
                        if !behind {
                            w.mark_stale(dc, n.ino);
                        }
                        w.d_kill(dc, n.d);
                    } else if let Some(neg) = w.d_find(dc, ndir.d, &nname, nhash) {
                        // The negative entry the victim's lookup found goes:
                        // the moved dentry takes the name, and a stale one
                        // left beside it would answer for the name once the
                        // file moves on (a whiteout leaves no negative entry
                        // of its own to cover it).
                        if neg != old.d {
                            w.d_kill(dc, neg);
                        }
                    }
                    w.d_move(dc, old.d, ndir.d, &nname, nhash);
                    // The old name is gone, or now a whiteout (found by
                    // the next lookup).
                    if let (Some(exp), false) = (inner.neg_expiry(), whiteout) {
                        let _ = w.d_add(dc, odir.d, &oname, ohash, IIdx::NONE, exp);
                    }
                }
            } else if r == Err(Errno::ENOENT) {
                w.d_kill(dc, old.d);
            }
            drop(w);
            Ok(r?)
        })
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use crate::tests_util::{mem_vfs, with_dirs};
    use crate::{Creds, Errno, AT_FDCWD};

    #[test]
    fn a_directory_cannot_move_under_itself() {
        let vfs = mem_vfs("");
        let ctx = with_dirs(&vfs, &["/a", "/a/b", "/c"]);
        assert_eq!(
            ctx.renameat2(AT_FDCWD, b"/a", AT_FDCWD, b"/a/b/a", 0),
            Err(Errno::EINVAL)
        );
        assert_eq!(
            ctx.renameat2(AT_FDCWD, b"/a/b", AT_FDCWD, b"/a", 0),
            Err(Errno::ENOTEMPTY)
        );
        ctx.renameat2(AT_FDCWD, b"/a/b", AT_FDCWD, b"/c/b", 0)
            .expect("rename");
        assert_eq!(ctx.faccessat(AT_FDCWD, b"/a/b", 0, 0), Err(Errno::ENOENT));
        assert_eq!(ctx.faccessat(AT_FDCWD, b"/c/b", 0, 0), Ok(()));
    }

    /// Crossing renames in opposite directions (each locks both
    /// directories) never deadlock, and never make a directory its own
    /// ancestor: every rename either happens or fails with EINVAL/ENOENT.
    #[test]
    fn crossing_renames_neither_deadlock_nor_loop() {
        let vfs = mem_vfs("");
        with_dirs(&vfs, &["/p", "/q"]);
        let threads: Vec<_> = [(b"/p", b"/q"), (b"/q", b"/p")]
            .into_iter()
            .map(|(from, to)| {
                let v = vfs.clone();
                std::thread::spawn(move || {
                    let ctx = v.context(Creds::root());
                    for _ in 0..300 {
                        let src = [&from[..], b"/x"].concat();
                        let dst = [&to[..], b"/x"].concat();
                        let _ = ctx.mkdirat(AT_FDCWD, &src, 0o755);
                        match ctx.renameat2(AT_FDCWD, &src, AT_FDCWD, &dst, 0) {
                            Ok(()) | Err(Errno::ENOENT | Errno::ENOTEMPTY | Errno::EINVAL) => {}
                            Err(e) => panic!("rename: {e}"),
                        }
                        let _ = ctx.unlinkat(AT_FDCWD, &dst, libc::AT_REMOVEDIR);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("no panic");
        }
        let ctx = vfs.context(Creds::root());
        assert_eq!(ctx.faccessat(AT_FDCWD, b"/p", 0, 0), Ok(()));
        assert_eq!(ctx.faccessat(AT_FDCWD, b"/q", 0, 0), Ok(()));
    }

    /// The classic race: one thread moves /p into /q while another moves
    /// /q into /p. Checked one by one, both moves look legal; done
    /// together they would cut both directories off the tree. The rename
    /// lock makes one of them see the other's result.
    #[test]
    fn concurrent_renames_never_cut_a_directory_off() {
        let vfs = mem_vfs("");
        with_dirs(&vfs, &["/p", "/q"]);
        let threads: Vec<_> = [(b"p", b"q"), (b"q", b"p")]
            .into_iter()
            .map(|(me, other)| {
                let v = vfs.clone();
                std::thread::spawn(move || {
                    let ctx = v.context(Creds::root());
                    let top = [&b"/"[..], me].concat();
                    let inside = [&b"/"[..], other, b"/", me].concat();
                    for _ in 0..300 {
                        let _ = ctx.renameat2(AT_FDCWD, &top, AT_FDCWD, &inside, 0);
                        let _ = ctx.renameat2(AT_FDCWD, &inside, AT_FDCWD, &top, 0);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("no panic");
        }
        let ctx = vfs.context(Creds::root());
        let found = |a: &[u8], b: &[u8]| {
            ctx.faccessat(AT_FDCWD, a, 0, 0).is_ok() || ctx.faccessat(AT_FDCWD, b, 0, 0).is_ok()
        };
        assert!(found(b"/p", b"/q/p"), "/p cut off");
        assert!(found(b"/q", b"/p/q"), "/q cut off");
    }
}
