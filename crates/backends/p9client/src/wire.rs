//! Conversions between 9P messages and the fsapi's types: attributes,
//! errors, attribute changes, directory entry types.

use walkfs_fsapi::{Attr, Errno, FileType, Owner, SetAttr, TimeSet, Timespec};
use walkfs_p9::{self as p9, Fcall};

pub(crate) fn attr_of(st: &p9::Stat) -> Attr {
    Attr {
        ino: st.qid.path,
        mode: st.mode,
        nlink: st.nlink as u32,
        uid: st.uid,
        gid: st.gid,
        rdev: st.rdev,
        size: st.size,
        blocks: st.blocks,
        atime: Timespec {
            sec: st.atime_sec as i64,
            nsec: st.atime_nsec as u32,
        },
        mtime: Timespec {
            sec: st.mtime_sec as i64,
            nsec: st.mtime_nsec as u32,
        },
        ctime: Timespec {
            sec: st.ctime_sec as i64,
            nsec: st.ctime_nsec as u32,
        },
        btime: if st.valid & p9::GETATTR_BTIME != 0 {
            Timespec {
                sec: st.btime_sec as i64,
                nsec: st.btime_nsec as u32,
            }
        } else {
            Timespec::default()
        },
        has_acl: false,
    }
}

pub(crate) fn err_of(f: &Fcall<'_>) -> Errno {
    match f {
        Fcall::Rlerror { ecode } => Errno::from_wire(*ecode),
        _ => Errno::EPROTO,
    }
}

/// The 9P form of an attribute change.
pub(crate) fn p9_setattr(set: &SetAttr) -> p9::SetAttr {
    let mut a = p9::SetAttr::default();
    if let Some(m) = set.mode {
        a.valid |= p9::SETATTR_MODE;
        a.mode = m;
    }
    if let Some(u) = set.uid {
        a.valid |= p9::SETATTR_UID;
        a.uid = u;
    }
    if let Some(g) = set.gid {
        a.valid |= p9::SETATTR_GID;
        a.gid = g;
    }
    if let Some(s) = set.size {
        a.valid |= p9::SETATTR_SIZE;
        a.size = s;
    }
    for (t, set_bit, given_bit, sec, nsec) in [
        (
            set.atime,
            p9::SETATTR_ATIME,
            p9::SETATTR_ATIME_SET,
            &mut a.atime_sec,
            &mut a.atime_nsec,
        ),
        (
            set.mtime,
            p9::SETATTR_MTIME,
            p9::SETATTR_MTIME_SET,
            &mut a.mtime_sec,
            &mut a.mtime_nsec,
        ),
    ] {
        match t {
            None => {}
            Some(TimeSet::Now) => a.valid |= set_bit,
            Some(TimeSet::At(ts)) => {
                a.valid |= set_bit | given_bit;
                *sec = ts.sec as u64;
                *nsec = ts.nsec as u64;
            }
        }
    }
    a
}

/// The `Tsetattr` that gives a file just made (mode `mode`) to `owner`:
/// its set-id bits go along (a chown alone would clear them); a symlink's
/// mode cannot be set at all.
pub(crate) fn handover(owner: Owner, mode: u32) -> p9::SetAttr {
    let keep_mode = mode & 0o6000 != 0 && mode & libc::S_IFMT != libc::S_IFLNK;
    p9::SetAttr {
        valid: p9::SETATTR_UID | if keep_mode { p9::SETATTR_MODE } else { 0 },
        uid: owner.uid,
        mode: mode & 0o7777,
        ..Default::default()
    }
}

pub(crate) fn kind_of_dtype(t: u8) -> Option<FileType> {
    FileType::from_mode((t as u32) << 12)
}
