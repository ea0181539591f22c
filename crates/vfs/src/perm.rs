//! Credentials and the permission check (Linux's `generic_permission`).

use walkfs_fsapi::acl::Acl;
use walkfs_fsapi::{Errno, Result};

use crate::dcache::InodeSnap;

pub const MAY_EXEC: u32 = 1;
pub const MAY_WRITE: u32 = 2;
pub const MAY_READ: u32 = 4;

/// Who is asking: the ids every permission check and every new node's
/// owner come from. Root (uid 0) has the capabilities Linux gives it
/// (`CAP_DAC_OVERRIDE`, `CAP_DAC_READ_SEARCH`, `CAP_FOWNER`, `CAP_CHOWN`,
/// `CAP_FSETID`, `CAP_MKNOD`); any other uid has none unless
/// `privileged`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Creds {
    pub uid: u32,
    pub gid: u32,
    pub groups: Vec<u32>,
    /// Root's capabilities under another uid, but for `CAP_FSETID` (a
    /// write still drops set-id bits): for a caller that has already
    /// checked permissions itself with credentials walkfs cannot see (a
    /// Linux 9p client mounted `access=client` checks with the process's
    /// full group list, which 9P2000.L never carries). New nodes still
    /// belong to `uid`/`gid`.
    pub privileged: bool,
}

impl Creds {
    pub fn root() -> Creds {
        Creds {
            uid: 0,
            gid: 0,
            groups: Vec::new(),
            privileged: false,
        }
    }

    /// The calling process's own effective ids and groups.
    pub fn current() -> Creds {
        // SAFETY: getgroups with size 0 only returns the count.
        let n = unsafe { libc::getgroups(0, std::ptr::null_mut()) };
        let mut groups = vec![0u32; n.max(0) as usize];
        // SAFETY: `groups` has room for `n` entries.
        let n = unsafe { libc::getgroups(n, groups.as_mut_ptr()) };
        groups.truncate(n.max(0) as usize);
        // SAFETY: no failure mode.
        let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
        Creds {
            uid,
            gid,
            groups,
            privileged: false,
        }
    }

    /// Has root's capabilities (uid 0, or `privileged`).
    pub fn is_root(&self) -> bool {
        self.uid == 0 || self.privileged
    }

    pub fn in_group(&self, gid: u32) -> bool {
        self.gid == gid || self.groups.contains(&gid)
    }

    /// May these credentials act as the owner of `uid`'s files (owner, or
    /// `CAP_FOWNER`)?
    pub fn owns(&self, uid: u32) -> bool {
        self.is_root() || self.uid == uid
    }
}

/// The permission check for `mask` (MAY_*), with root's overrides
/// (`generic_permission`): the owner's bits for the owner; the access
/// ACL `acl` (acl.rs) for anyone else while the group bits grant
/// anything; otherwise the group's or other's bits.
#[inline]
pub fn check(creds: &Creds, ino: &InodeSnap, acl: Option<&Acl>, mask: u32) -> Result<()> {
    let mode = ino.mode;
    let granted = if creds.uid == ino.uid {
        mask & !(mode >> 6) & 7 == 0
    } else if let (Some(a), true) = (acl, mode & 0o070 != 0) {
        a.permits(creds.uid, false, |g| creds.in_group(g), ino.gid, mask)
    } else {
        let bits = if creds.in_group(ino.gid) {
            mode >> 3
        } else {
            mode
        } & 7;
        mask & !bits == 0
    };
    if granted {
        return Ok(());
    }
    if creds.is_root() {
        // CAP_DAC_OVERRIDE: anything, except executing a non-directory
        // that nobody may execute.
        if mask & MAY_EXEC == 0 || ino.is_dir() || mode & 0o111 != 0 {
            return Ok(());
        }
    }
    Err(Errno::EACCES)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests_util::snap;

    #[test]
    fn owner_group_other() {
        let u = Creds {
            uid: 1000,
            gid: 100,
            groups: vec![200],
            privileged: false,
        };
        let f = snap(libc::S_IFREG | 0o640, 1000, 100);
        assert!(check(&u, &f, None, MAY_READ | MAY_WRITE).is_ok());
        assert_eq!(check(&u, &f, None, MAY_EXEC), Err(Errno::EACCES));
        let g = snap(libc::S_IFREG | 0o640, 1, 200);
        assert!(check(&u, &g, None, MAY_READ).is_ok());
        assert_eq!(check(&u, &g, None, MAY_WRITE), Err(Errno::EACCES));
        // The owner class decides even when "other" would allow more.
        let o = snap(libc::S_IFREG | 0o007, 1000, 1);
        assert_eq!(check(&u, &o, None, MAY_READ), Err(Errno::EACCES));
    }

    #[test]
    fn root_overrides_but_not_exec_of_non_executables() {
        let r = Creds::root();
        assert!(check(&r, &snap(libc::S_IFREG, 5, 5), None, MAY_READ | MAY_WRITE).is_ok());
        assert_eq!(
            check(&r, &snap(libc::S_IFREG | 0o644, 5, 5), None, MAY_EXEC),
            Err(Errno::EACCES)
        );
        assert!(check(&r, &snap(libc::S_IFREG | 0o001, 5, 5), None, MAY_EXEC).is_ok());
        assert!(check(&r, &snap(libc::S_IFDIR, 5, 5), None, MAY_EXEC).is_ok());
    }
}
