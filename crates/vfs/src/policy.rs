//! Who may do what: the decisions of Linux's fs/namei.c, fs/attr.c and
//! fs/inode.c that go beyond one permission check (perm.rs), as functions
//! of the caller's credentials and snapshots of the inodes involved. The
//! calls in ops/ ask here and act on the answer; nothing here touches the
//! cache or a backend.

use walkfs_fsapi::acl::Acl;
use walkfs_fsapi::{Errno, Owner, Result};

use crate::dcache::InodeSnap;
use crate::perm::{self, Creds, MAY_EXEC, MAY_READ, MAY_WRITE};

/// `may_create`: write and search permission on the directory.
pub(crate) fn may_create(creds: &Creds, dir: &InodeSnap, acl: Option<&Acl>) -> Result<()> {
    perm::check(creds, dir, acl, MAY_WRITE | MAY_EXEC)
}

/// The owner and mode of a node created in `dir`: the caller's ids, or
/// the directory's group when it is set-group-id (which a new directory
/// inherits), the umask applied, and set-group-id dropped from a file
/// whose group the caller is not in (`inode_init_owner`,
/// `mode_strip_sgid`).
pub(crate) fn new_owner(
    creds: &Creds,
    umask: u32,
    dir: &InodeSnap,
    mode: u32,
    is_dir: bool,
) -> (Owner, u32) {
    let setgid_dir = dir.mode & libc::S_ISGID != 0;
    let gid = if setgid_dir { dir.gid } else { creds.gid };
    let mut mode = if is_dir { mode & 0o1777 } else { mode & 0o7777 } & !umask;
    if is_dir && setgid_dir {
        mode |= libc::S_ISGID;
    }
    if !is_dir
        && mode & libc::S_ISGID != 0
        && mode & 0o010 != 0
        && !creds.in_group(gid)
        && !creds.is_root()
    {
        mode &= !libc::S_ISGID;
    }
    (
        Owner {
            uid: creds.uid,
            gid,
        },
        mode,
    )
}

/// `fs.protected_hardlinks` (on in Debian): only the owner, or someone
/// who may read and write a plain file that is not set-id, may link to it.
pub(crate) fn may_link(creds: &Creds, s: &InodeSnap, acl: Option<&Acl>) -> Result<()> {
    if creds.owns(s.uid) {
        return Ok(());
    }
    let setid =
        s.mode & libc::S_ISUID != 0 || s.mode & (libc::S_ISGID | 0o010) == libc::S_ISGID | 0o010;
    if !s.is_reg() || setid || perm::check(creds, s, acl, MAY_READ | MAY_WRITE).is_err() {
        return Err(Errno::EPERM);
    }
    Ok(())
}

/// The permission half of `may_delete`: write and search on the
/// directory, and in a sticky directory ownership of the file or of the
/// directory.
pub(crate) fn may_delete(
    creds: &Creds,
    dir: &InodeSnap,
    acl: Option<&Acl>,
    victim: &InodeSnap,
) -> Result<()> {
    perm::check(creds, dir, acl, MAY_WRITE | MAY_EXEC)?;
    if dir.mode & libc::S_ISVTX != 0 && !creds.owns(victim.uid) && creds.uid != dir.uid {
        return Err(Errno::EPERM);
    }
    Ok(())
}

/// The set-id bits a write or truncate by `creds` must drop (Linux's
/// `setattr_should_drop_suidgid`): set-user-id always, set-group-id when
/// group-executable or not the caller's group; none for a caller with
/// `CAP_FSETID`. That is uid 0 only: `privileged` credentials (a client
/// that checked permissions itself) do not carry it, since the writer
/// behind them is not root, and Linux's 9p client leaves dropping the
/// bits on write to the server.
pub(crate) fn privs_to_kill(creds: &Creds, s: &InodeSnap) -> u32 {
    if creds.uid == 0 || !s.is_reg() {
        return 0;
    }
    let mut kill = s.mode & libc::S_ISUID;
    if s.mode & libc::S_ISGID != 0 && (s.mode & 0o010 != 0 || !creds.in_group(s.gid)) {
        kill |= libc::S_ISGID;
    }
    kill
}

/// `chmod` by `creds` of `s` to `mode`: the mode to set, or `EPERM` for a
/// caller who does not own the file. Set-group-id is dropped for a caller
/// outside the file's group.
pub(crate) fn chmod_mode(creds: &Creds, s: &InodeSnap, mode: u32) -> Result<u32> {
    if !creds.owns(s.uid) {
        return Err(Errno::EPERM);
    }
    let mut mode = mode & 0o7777;
    if !creds.is_root() && !creds.in_group(s.gid) {
        mode &= !libc::S_ISGID;
    }
    Ok(mode)
}

/// `chown` by `creds` of `s` (`u32::MAX` leaves an id): only root changes
/// the owner; the owner may change the group to one of its own.
pub(crate) fn may_chown(creds: &Creds, s: &InodeSnap, uid: u32, gid: u32) -> Result<()> {
    let uid_ok = uid == u32::MAX || uid == s.uid && creds.uid == s.uid || creds.is_root();
    let gid_ok = gid == u32::MAX
        || creds.is_root()
        || creds.uid == s.uid && (gid == s.gid || creds.in_group(gid));
    if uid_ok && gid_ok {
        Ok(())
    } else {
        Err(Errno::EPERM)
    }
}

/// The set-id bits a change of owner drops: set-user-id, and
/// set-group-id when group-executable; a directory keeps both.
pub(crate) fn chown_kills(s: &InodeSnap) -> u32 {
    if s.is_dir() {
        return 0;
    }
    let sgid = if s.mode & (libc::S_ISGID | 0o010) == libc::S_ISGID | 0o010 {
        libc::S_ISGID
    } else {
        0
    };
    (s.mode & libc::S_ISUID) | sgid
}

/// `utimensat` by `creds` of `s`: explicit times need ownership; "now"
/// needs ownership or write permission.
pub(crate) fn may_set_times(
    creds: &Creds,
    s: &InodeSnap,
    acl: Option<&Acl>,
    explicit: bool,
) -> Result<()> {
    if creds.owns(s.uid) {
        return Ok(());
    }
    if explicit {
        return Err(Errno::EPERM);
    }
    perm::check(creds, s, acl, MAY_WRITE)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::tests_util::{snap, user};

    #[test]
    fn new_nodes_take_a_setgid_directorys_group() {
        let dir = snap(libc::S_IFDIR | 0o2775, 0, 50);
        let u = user(1000, 1000, &[]);
        let (o, m) = new_owner(&u, 0o022, &dir, 0o777, true);
        assert_eq!((o.uid, o.gid), (1000, 50));
        assert_eq!(m, 0o2755);
        // A group-executable set-gid file in a group the caller is not in
        // loses the bit.
        let (_, m) = new_owner(&u, 0, &dir, 0o2775, false);
        assert_eq!(m, 0o775);
    }

    #[test]
    fn sticky_directories_and_hard_links() {
        let dir = snap(libc::S_IFDIR | 0o1777, 0, 0);
        let f = snap(libc::S_IFREG | 0o666, 1001, 1001);
        assert_eq!(
            may_delete(&user(1000, 1000, &[]), &dir, None, &f),
            Err(Errno::EPERM)
        );
        assert_eq!(may_delete(&user(1001, 1001, &[]), &dir, None, &f), Ok(()));
        let setuid = snap(libc::S_IFREG | 0o4777, 1001, 1001);
        assert_eq!(
            may_link(&user(1000, 1000, &[]), &setuid, None),
            Err(Errno::EPERM)
        );
        assert_eq!(may_link(&user(1000, 1000, &[]), &f, None), Ok(()));
    }

    #[test]
    fn writes_drop_set_id_bits_except_for_root() {
        let f = snap(libc::S_IFREG | 0o6755, 1000, 1000);
        assert_eq!(
            privs_to_kill(&user(1000, 1000, &[]), &f),
            libc::S_ISUID | libc::S_ISGID
        );
        assert_eq!(privs_to_kill(&Creds::root(), &f), 0);
        let mut p = user(1000, 1000, &[]);
        p.privileged = true;
        assert_ne!(privs_to_kill(&p, &f), 0, "privileged is not CAP_FSETID");
        // Not group-executable, caller in the group: set-gid stays.
        let g = snap(libc::S_IFREG | 0o2644, 1000, 1000);
        assert_eq!(privs_to_kill(&user(1000, 1000, &[]), &g), 0);
    }

    #[test]
    fn ownership_rules() {
        let f = snap(libc::S_IFREG | 0o2755, 1000, 1000);
        assert_eq!(
            chmod_mode(&user(1001, 1001, &[]), &f, 0o777),
            Err(Errno::EPERM)
        );
        assert_eq!(chmod_mode(&user(1000, 5, &[]), &f, 0o2777), Ok(0o777));
        assert_eq!(may_chown(&user(1000, 1000, &[7]), &f, u32::MAX, 7), Ok(()));
        assert_eq!(
            may_chown(&user(1000, 1000, &[]), &f, 0, u32::MAX),
            Err(Errno::EPERM)
        );
        assert_eq!(chown_kills(&f), libc::S_ISGID);
        assert_eq!(
            may_set_times(&user(1001, 1001, &[]), &f, None, true),
            Err(Errno::EPERM)
        );
    }
}
