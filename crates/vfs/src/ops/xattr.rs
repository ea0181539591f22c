//! Extended attributes: `getxattr`, `listxattr`, `setxattr`,
//! `removexattr` (with `AT_SYMLINK_NOFOLLOW` the `l*` calls, with
//! `AT_EMPTY_PATH` the `f*` ones), with the rules of Linux's fs/xattr.c
//! (`xattr_permission`) and fs/posix_acl.c: who may read or change which
//! namespace, and what a change of ACL does to the mode and to what the
//! permission check knows (acl.rs).

use super::prelude::*;
use walkfs_fsapi::acl::{self as facl, Acl};

/// Longest name, and largest value or list, Linux takes.
const XATTR_NAME_MAX: usize = 255;
const XATTR_SIZE_MAX: usize = 65536;

/// The file capability, which the kernel asks for before writes.
const CAPABILITY: &[u8] = b"security.capability";

/// The namespaces a name may be in; anything else is `EOPNOTSUPP`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Space {
    User,
    Trusted,
    Security,
    /// `system.posix_acl_access` / `system.posix_acl_default`.
    Acl,
}

fn space(name: &[u8]) -> Result<Space> {
    if name.is_empty() || name.len() > XATTR_NAME_MAX {
        return Err(Errno::ERANGE);
    }
    let after = |p: &[u8]| name.strip_prefix(p).filter(|rest| !rest.is_empty());
    if after(b"user.").is_some() {
        Ok(Space::User)
    } else if after(b"trusted.").is_some() {
        Ok(Space::Trusted)
    } else if after(b"security.").is_some() {
        Ok(Space::Security)
    } else if name == facl::ACCESS || name == facl::DEFAULT {
        Ok(Space::Acl)
    } else {
        Err(Errno::EOPNOTSUPP)
    }
}

impl Ctx {
    /// `xattr_permission` for `name` on `s` (`write`: a change).
    fn xattr_permission(&self, s: &InodeSnap, sp: Space, write: bool) -> Res<()> {
        let root = self.creds.is_root();
        let denied = if write { Errno::EPERM } else { Errno::ENODATA };
        match sp {
            // CAP_SYS_ADMIN (CAP_SETFCAP for security.capability) to
            // change; anyone reads.
            Space::Security if write && !root => Err(Errno::EPERM.into()),
            Space::Security => Ok(()),
            Space::Trusted if !root => Err(denied.into()),
            Space::Trusted => Ok(()),
            // An ACL is its owner's to change; anyone reads it.
            Space::Acl if write && !self.creds.owns(s.uid) => Err(Errno::EPERM.into()),
            Space::Acl => Ok(()),
            Space::User => {
                if !s.is_reg() && !s.is_dir() {
                    return Err(denied.into());
                }
                if write && s.is_dir() && s.mode & libc::S_ISVTX != 0 && !self.creds.owns(s.uid) {
                    return Err(Errno::EPERM.into());
                }
                self.permission(s, if write { MAY_WRITE } else { MAY_READ })
            }
        }
    }

    /// The node `path` names, its attributes fresh, and the backend's
    /// attributes capability (`EOPNOTSUPP` without one).
    fn xattr_target<'h>(
        &self,
        at: At<'h>,
        path: &[u8],
        flags: i32,
    ) -> Res<(Cur, InodeSnap, std::sync::Arc<dyn walkfs_fsapi::FileSystem>)> {
        check_at_flags(flags, libc::AT_SYMLINK_NOFOLLOW | libc::AT_EMPTY_PATH)?;
        let follow = flags & libc::AT_SYMLINK_NOFOLLOW == 0;
        let c = self.lookup_at(at, path, follow, flags & libc::AT_EMPTY_PATH != 0)?;
        let s = self.attrs(c)?;
        let fs = self.inner().sb(s.sb())?;
        if fs.xattrs().is_none() {
            return Err(Errno::EOPNOTSUPP.into());
        }
        Ok((c, s, fs))
    }

    /// `getxattrat(dirfd, path, name)`: the value (`ENODATA` when none).
    pub fn getxattrat<'h>(
        &self,
        dirfd: impl Into<At<'h>>,
        path: &[u8],
        name: &[u8],
        flags: i32,
    ) -> Result<Vec<u8>> {
        let dirfd = dirfd.into();
        let sp = space(name)?;
        let cap = name == CAPABILITY;
        self.run(|| {
            let (c, s, fs) = self.xattr_target(dirfd, path, flags)?;
            self.xattr_permission(&s, sp, false)?;
            if cap && s.flags & I_NOCAP != 0 {
                return Err(Errno::ENODATA.into());
            }
            let x = fs.xattrs().ok_or(Errno::EOPNOTSUPP)?;
            match x.getxattr(NodeId(s.node), name) {
                Err(Errno::ENODATA) if cap => {
                    let inner = self.inner();
                    inner.writer().set_nocap(&inner.dc, c.ino, true);
                    Err(Errno::ENODATA.into())
                }
                r => Ok(r?),
            }
        })
    }

    /// `listxattrat(dirfd, path)`: the names, each followed by a NUL;
    /// `trusted.` ones only for root, as Linux lists them.
    pub fn listxattrat<'h>(
        &self,
        dirfd: impl Into<At<'h>>,
        path: &[u8],
        flags: i32,
    ) -> Result<Vec<u8>> {
        let dirfd = dirfd.into();
        self.run(|| {
            let (_, s, fs) = self.xattr_target(dirfd, path, flags)?;
            let x = fs.xattrs().ok_or(Errno::EOPNOTSUPP)?;
            let all = x.listxattr(NodeId(s.node))?;
            let root = self.creds.is_root();
            let mut out = Vec::with_capacity(all.len());
            for n in all.split(|b| *b == 0).filter(|n| !n.is_empty()) {
                if root || !n.starts_with(b"trusted.") {
                    out.extend_from_slice(n);
                    out.push(0);
                }
            }
            if out.len() > XATTR_SIZE_MAX {
                return Err(Errno::E2BIG.into());
            }
            Ok(out)
        })
    }

    /// `setxattrat(dirfd, path, name, value, xflags)`: `xflags` is
    /// `XATTR_CREATE` or `XATTR_REPLACE` or 0.
    pub fn setxattrat<'h>(
        &self,
        dirfd: impl Into<At<'h>>,
        path: &[u8],
        name: &[u8],
        value: &[u8],
        xflags: i32,
        flags: i32,
    ) -> Result<()> {
        let dirfd = dirfd.into();
        if xflags & !(libc::XATTR_CREATE | libc::XATTR_REPLACE) != 0 {
            return Err(Errno::EINVAL);
        }
        let sp = space(name)?;
        if value.len() > XATTR_SIZE_MAX {
            return Err(Errno::E2BIG);
        }
        // An ACL is checked before anything stores it; an empty one is a
        // removal.
        let acl = if sp == Space::Acl {
            Acl::parse(value)?
        } else {
            None
        };
        self.run(|| {
            let (c, s, fs) = self.xattr_target(dirfd, path, flags)?;
            self.check_writable()?;
            self.xattr_permission(&s, sp, true)?;
            let x = fs.xattrs().ok_or(Errno::EOPNOTSUPP)?;
            if sp == Space::Acl && name == facl::DEFAULT && !s.is_dir() {
                return if acl.is_some() {
                    Err(Errno::EACCES.into())
                } else {
                    Ok(())
                };
            }
            if sp == Space::Acl && acl.is_none() {
                match x.removexattr(NodeId(s.node), name) {
                    Ok(()) | Err(Errno::ENODATA) => {}
                    Err(e) => return Err(e.into()),
                }
            } else {
                x.setxattr(NodeId(s.node), name, value, xflags)?;
            }
            self.xattr_changed(c, &s, sp, name)
        })
    }

    /// `removexattrat(dirfd, path, name)`.
    pub fn removexattrat<'h>(
        &self,
        dirfd: impl Into<At<'h>>,
        path: &[u8],
        name: &[u8],
        flags: i32,
    ) -> Result<()> {
        let dirfd = dirfd.into();
        let sp = space(name)?;
        self.run(|| {
            let (c, s, fs) = self.xattr_target(dirfd, path, flags)?;
            self.check_writable()?;
            self.xattr_permission(&s, sp, true)?;
            let x = fs.xattrs().ok_or(Errno::EOPNOTSUPP)?;
            x.removexattr(NodeId(s.node), name)?;
            self.xattr_changed(c, &s, sp, name)
        })
    }

    /// After a change of attribute: its ctime (and, for an ACL, its mode)
    /// moved; what was known of its ACLs goes. A new access ACL drops
    /// set-group-id for a caller outside the file's group without
    /// `CAP_FSETID` (`posix_acl_update_mode`), which a backend acting
    /// with its own privileges would not.
    fn xattr_changed(&self, c: Cur, s: &InodeSnap, sp: Space, name: &[u8]) -> Res<()> {
        let inner = self.inner();
        if sp == Space::Acl {
            inner.forget_acls(c.ino);
        }
        let mut w = inner.writer();
        w.mark_stale(&inner.dc, c.ino);
        if sp == Space::Security {
            w.set_nocap(&inner.dc, c.ino, false);
        }
        drop(w);
        if sp == Space::Acl
            && name == facl::ACCESS
            && !self.creds.is_root()
            && !self.creds.in_group(s.gid)
        {
            let now = self.attrs(c)?;
            if now.mode & libc::S_ISGID != 0 {
                self.setattr(
                    c,
                    &SetAttr {
                        mode: Some(now.mode & 0o7777 & !libc::S_ISGID),
                        ..SetAttr::default()
                    },
                )?;
            }
        }
        Ok(())
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use crate::tests_util::{mem_vfs, user, with_dirs};
    use crate::{Errno, AT_FDCWD};
    use walkfs_fsapi::acl::{self, Acl};

    /// `user::rw-,user:1001:rw-,group::r--,mask::rw-,other::---` in the
    /// attribute's form (entries: tag, perm, id).
    fn acl_1001_rw() -> Vec<u8> {
        let mut v = 2u32.to_le_bytes().to_vec();
        for (tag, perm, id) in [
            (0x01u16, 6u16, u32::MAX),
            (0x02, 6, 1001),
            (0x04, 4, u32::MAX),
            (0x10, 6, u32::MAX),
            (0x20, 0, u32::MAX),
        ] {
            v.extend_from_slice(&tag.to_le_bytes());
            v.extend_from_slice(&perm.to_le_bytes());
            v.extend_from_slice(&id.to_le_bytes());
        }
        v
    }

    #[test]
    fn namespaces_and_permissions_follow_linux() {
        let vfs = mem_vfs("");
        let root = with_dirs(&vfs, &["/d"]);
        let fd = root
            .openat(AT_FDCWD, b"/d/f", libc::O_CREAT | libc::O_WRONLY, 0o644)
            .expect("create");
        root.close(fd).expect("close");
        root.fchownat(AT_FDCWD, b"/d/f", 1000, 1000, 0)
            .expect("chown");
        let owner = vfs.context(user(1000, 1000, &[]));
        let other = vfs.context(user(1001, 1001, &[]));
        owner
            .setxattrat(AT_FDCWD, b"/d/f", b"user.a", b"1", 0, 0)
            .expect("set");
        assert_eq!(
            owner.getxattrat(AT_FDCWD, b"/d/f", b"user.a", 0),
            Ok(b"1".to_vec())
        );
        assert_eq!(
            owner.setxattrat(AT_FDCWD, b"/d/f", b"user.a", b"2", libc::XATTR_CREATE, 0),
            Err(Errno::EEXIST)
        );
        assert_eq!(
            owner.setxattrat(AT_FDCWD, b"/d/f", b"user.b", b"2", libc::XATTR_REPLACE, 0),
            Err(Errno::ENODATA)
        );
        // Reading needs read permission, changing needs write.
        assert_eq!(
            other.getxattrat(AT_FDCWD, b"/d/f", b"user.a", 0),
            Ok(b"1".to_vec())
        );
        assert_eq!(
            other.setxattrat(AT_FDCWD, b"/d/f", b"user.a", b"3", 0, 0),
            Err(Errno::EACCES)
        );
        // trusted. is root's: hidden from others' lists, unreadable.
        root.setxattrat(AT_FDCWD, b"/d/f", b"trusted.t", b"x", 0, 0)
            .expect("trusted");
        assert_eq!(
            owner.getxattrat(AT_FDCWD, b"/d/f", b"trusted.t", 0),
            Err(Errno::ENODATA)
        );
        assert_eq!(
            owner.listxattrat(AT_FDCWD, b"/d/f", 0),
            Ok(b"user.a\0".to_vec())
        );
        assert_eq!(
            root.listxattrat(AT_FDCWD, b"/d/f", 0),
            Ok(b"trusted.t\0user.a\0".to_vec())
        );
        assert_eq!(
            owner.setxattrat(AT_FDCWD, b"/d/f", b"security.s", b"x", 0, 0),
            Err(Errno::EPERM)
        );
        assert_eq!(
            owner.setxattrat(AT_FDCWD, b"/d/f", b"bogus.x", b"x", 0, 0),
            Err(Errno::EOPNOTSUPP)
        );
        assert_eq!(
            owner.getxattrat(AT_FDCWD, b"/d/f", b"", 0),
            Err(Errno::ERANGE)
        );
        owner
            .removexattrat(AT_FDCWD, b"/d/f", b"user.a", 0)
            .expect("remove");
        assert_eq!(
            owner.removexattrat(AT_FDCWD, b"/d/f", b"user.a", 0),
            Err(Errno::ENODATA)
        );
    }

    #[test]
    fn a_capability_known_absent_is_answered_until_one_is_set() {
        let vfs = mem_vfs("");
        let root = with_dirs(&vfs, &["/d"]);
        let fd = root
            .openat(AT_FDCWD, b"/d/f", libc::O_CREAT | libc::O_WRONLY, 0o755)
            .expect("create");
        root.close(fd).expect("close");
        let cap = &b"security.capability"[..];
        assert_eq!(
            root.getxattrat(AT_FDCWD, b"/d/f", cap, 0),
            Err(Errno::ENODATA)
        );
        root.setxattrat(AT_FDCWD, b"/d/f", cap, b"\x01\0\0\x02", 0, 0)
            .expect("setcap");
        assert_eq!(
            root.getxattrat(AT_FDCWD, b"/d/f", cap, 0),
            Ok(b"\x01\0\0\x02".to_vec())
        );
        root.removexattrat(AT_FDCWD, b"/d/f", cap, 0)
            .expect("remove");
        assert_eq!(
            root.getxattrat(AT_FDCWD, b"/d/f", cap, 0),
            Err(Errno::ENODATA)
        );
    }

    #[test]
    fn an_acl_grants_moves_the_mode_and_is_forgotten_when_removed() {
        let vfs = mem_vfs("");
        let root = with_dirs(&vfs, &["/d"]);
        let fd = root
            .openat(AT_FDCWD, b"/d/f", libc::O_CREAT | libc::O_WRONLY, 0o640)
            .expect("create");
        root.close(fd).expect("close");
        root.fchownat(AT_FDCWD, b"/d/f", 1000, 1000, 0)
            .expect("chown");
        let owner = vfs.context(user(1000, 1000, &[]));
        let named = vfs.context(user(1001, 1001, &[]));
        assert_eq!(
            named.faccessat(AT_FDCWD, b"/d/f", libc::R_OK, 0),
            Err(Errno::EACCES)
        );
        // Only the owner sets an ACL; a bad one is refused.
        assert_eq!(
            named.setxattrat(AT_FDCWD, b"/d/f", acl::ACCESS, &acl_1001_rw(), 0, 0),
            Err(Errno::EPERM)
        );
        assert_eq!(
            owner.setxattrat(AT_FDCWD, b"/d/f", acl::ACCESS, &[2, 0, 0, 0, 1], 0, 0),
            Err(Errno::EINVAL)
        );
        owner
            .setxattrat(AT_FDCWD, b"/d/f", acl::ACCESS, &acl_1001_rw(), 0, 0)
            .expect("setfacl");
        // The mask became the group bits; the named user may read and write.
        let st = owner
            .statx(AT_FDCWD, b"/d/f", 0, libc::STATX_MODE)
            .expect("stat");
        assert_eq!(st.stx_mode as u32 & 0o777, 0o660);
        assert_eq!(
            named.faccessat(AT_FDCWD, b"/d/f", libc::R_OK | libc::W_OK, 0),
            Ok(())
        );
        // A chmod cuts the mask, and with it the named user.
        owner.fchmodat(AT_FDCWD, b"/d/f", 0o600, 0).expect("chmod");
        assert_eq!(
            named.faccessat(AT_FDCWD, b"/d/f", libc::R_OK, 0),
            Err(Errno::EACCES)
        );
        owner.fchmodat(AT_FDCWD, b"/d/f", 0o640, 0).expect("chmod");
        assert_eq!(named.faccessat(AT_FDCWD, b"/d/f", libc::R_OK, 0), Ok(()));
        let got = owner
            .getxattrat(AT_FDCWD, b"/d/f", acl::ACCESS, 0)
            .expect("getfacl");
        assert!(Acl::parse(&got).expect("valid").is_some());
        owner
            .removexattrat(AT_FDCWD, b"/d/f", acl::ACCESS, 0)
            .expect("remove");
        assert_eq!(
            named.faccessat(AT_FDCWD, b"/d/f", libc::R_OK, 0),
            Err(Errno::EACCES)
        );
    }

    #[test]
    fn a_default_acl_is_inherited_and_the_umask_ignored() {
        let vfs = mem_vfs("umask=077");
        let root = with_dirs(&vfs, &["/d"]);
        root.fchmodat(AT_FDCWD, b"/d", 0o755, 0).expect("chmod");
        // A default ACL on a file is refused.
        let fd = root
            .openat(AT_FDCWD, b"/d/f", libc::O_CREAT | libc::O_WRONLY, 0o644)
            .expect("create");
        root.close(fd).expect("close");
        assert_eq!(
            root.setxattrat(AT_FDCWD, b"/d/f", acl::DEFAULT, &acl_1001_rw(), 0, 0),
            Err(Errno::EACCES)
        );
        root.setxattrat(AT_FDCWD, b"/d", acl::DEFAULT, &acl_1001_rw(), 0, 0)
            .expect("default acl");
        let fd = root
            .openat(AT_FDCWD, b"/d/g", libc::O_CREAT | libc::O_WRONLY, 0o666)
            .expect("create");
        root.close(fd).expect("close");
        let st = root
            .statx(AT_FDCWD, b"/d/g", 0, libc::STATX_MODE)
            .expect("stat");
        // 0666 cut by the default ACL (owner rw, mask rw, other none), no
        // umask.
        assert_eq!(st.stx_mode as u32 & 0o777, 0o660);
        let named = vfs.context(user(1001, 1001, &[]));
        assert_eq!(named.faccessat(AT_FDCWD, b"/d/g", libc::W_OK, 0), Ok(()));
        root.mkdirat(AT_FDCWD, b"/d/sub", 0o777).expect("mkdir");
        assert_eq!(
            root.getxattrat(AT_FDCWD, b"/d/sub", acl::DEFAULT, 0),
            Ok(acl_1001_rw())
        );
    }
}
