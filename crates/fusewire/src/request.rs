//! Requests off the wire: a header and a typed [`Operation`] borrowing
//! names and data from the transport's buffer.
//!
//! Decoding trusts nothing: a request shorter than its operation's
//! header, or a name without its terminating NUL, is `EINVAL` to the
//! kernel (which never sends one; a corrupted buffer must not become a
//! wrong call).

use crate::abi::{self, fattr, op, Pod};

/// Who asks, about what: the request header.
#[derive(Clone, Copy, Debug)]
pub struct Request {
    pub unique: u64,
    /// The node the request is about (for LINK, the new parent).
    pub nodeid: u64,
    pub uid: u32,
    pub gid: u32,
    pub pid: u32,
}

/// A time a SETATTR sets: a given one, or the daemon's clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimeArg {
    Now,
    At { sec: i64, nsec: u32 },
}

/// SETATTR's fields, each present when the kernel set its bit.
#[derive(Clone, Copy, Debug, Default)]
pub struct Setattr {
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    pub atime: Option<TimeArg>,
    pub mtime: Option<TimeArg>,
    /// The open file the change comes through (FATTR_FH), handle 0
    /// included.
    pub fh: Option<u64>,
}

/// A directory read: READDIR or READDIRPLUS.
#[derive(Clone, Copy, Debug)]
pub struct DirRead {
    pub fh: u64,
    pub offset: u64,
    /// Bytes the kernel's buffer holds.
    pub size: u32,
}

/// A lock request's file, owner and lock.
#[derive(Clone, Copy, Debug)]
pub struct Lk {
    pub fh: u64,
    pub owner: u64,
    /// First and last byte (inclusive; `OFFSET_MAX` for "to the end").
    pub start: u64,
    pub end: u64,
    /// `F_RDLCK`, `F_WRLCK` or `F_UNLCK`.
    pub ty: u32,
    pub pid: u32,
    /// A `flock` lock (`LK_FLOCK`), not a record lock.
    pub flock: bool,
}

/// What a request asks, with its arguments.
#[derive(Debug)]
pub enum Operation<'a> {
    Lookup {
        name: &'a [u8],
    },
    Forget {
        nlookup: u64,
    },
    /// (node, lookups to drop) pairs.
    BatchForget {
        items: Vec<(u64, u64)>,
    },
    Getattr {
        fh: Option<u64>,
    },
    Setattr(Setattr),
    Readlink,
    Symlink {
        name: &'a [u8],
        target: &'a [u8],
    },
    Mknod {
        name: &'a [u8],
        mode: u32,
        rdev: u32,
        umask: u32,
    },
    Mkdir {
        name: &'a [u8],
        mode: u32,
        umask: u32,
    },
    Unlink {
        name: &'a [u8],
    },
    Rmdir {
        name: &'a [u8],
    },
    Rename {
        newdir: u64,
        name: &'a [u8],
        newname: &'a [u8],
        flags: u32,
    },
    Link {
        oldnodeid: u64,
        newname: &'a [u8],
    },
    Open {
        flags: i32,
    },
    Read {
        fh: u64,
        offset: u64,
        size: u32,
    },
    Write {
        fh: u64,
        offset: u64,
        write_flags: u32,
        data: &'a [u8],
    },
    Statfs,
    Release {
        fh: u64,
        /// The owner of the flock locks taken through it, which go with
        /// it (`RELEASE_FLOCK_UNLOCK`).
        flock_owner: Option<u64>,
    },
    Fsync {
        fh: u64,
        datasync: bool,
    },
    Getxattr {
        name: &'a [u8],
        size: u32,
    },
    Listxattr {
        size: u32,
    },
    Setxattr {
        name: &'a [u8],
        value: &'a [u8],
        /// `XATTR_CREATE`, `XATTR_REPLACE`.
        flags: i32,
    },
    Removexattr {
        name: &'a [u8],
    },
    Flush {
        fh: u64,
        /// The closing process's lock owner: its record locks on the
        /// file go.
        lock_owner: u64,
    },
    /// GETLK, SETLK (`sleep: false`), SETLKW (`sleep: true`).
    Getlk(Lk),
    Setlk {
        lk: Lk,
        sleep: bool,
    },
    Opendir {
        flags: i32,
    },
    Readdir(DirRead),
    Readdirplus(DirRead),
    Releasedir {
        fh: u64,
    },
    Fsyncdir {
        fh: u64,
        datasync: bool,
    },
    Access {
        mask: u32,
    },
    Create {
        name: &'a [u8],
        flags: i32,
        mode: u32,
        umask: u32,
    },
    /// `O_TMPFILE` in the directory: a regular file with no name, opened.
    Tmpfile {
        flags: i32,
        mode: u32,
        umask: u32,
    },
    Ioctl {
        fh: u64,
        cmd: u32,
        in_data: &'a [u8],
        out_size: u32,
    },
    Fallocate {
        fh: u64,
        offset: u64,
        length: u64,
        mode: i32,
    },
    /// `SEEK_DATA` or `SEEK_HOLE` from `offset`.
    Lseek {
        fh: u64,
        offset: u64,
        whence: i32,
    },
    /// The kernel gave up waiting for request `unique` (a signal): a
    /// request still waiting (SETLKW) should fail with EINTR.
    Interrupt {
        unique: u64,
    },
    Destroy,
    /// INIT is the session's own; anything else is not spoken here.
    Other(u32),
}

/// The fixed header of `T` in `head`.
fn hdr<T: Pod>(head: &[u8]) -> Result<T, i32> {
    T::read(head).ok_or(libc::EINVAL)
}

/// The size of each operation's own fixed header: what comes after the
/// request header and before names or data. Over io_uring the kernel
/// puts it in the entry's operation area and the rest in the payload;
/// over `/dev/fuse` the two follow each other.
pub fn op_header_size(opcode: u32) -> usize {
    use std::mem::size_of;
    match opcode {
        op::FORGET
        | op::BATCH_FORGET
        | op::MKDIR
        | op::RENAME
        | op::LINK
        | op::OPEN
        | op::OPENDIR
        | op::GETXATTR
        | op::LISTXATTR
        | op::SETXATTR
        | op::ACCESS => 8,
        op::GETATTR | op::FSYNC | op::FSYNCDIR => 16,
        op::MKNOD | op::RENAME2 | op::CREATE | op::TMPFILE => 16,
        op::RELEASE | op::RELEASEDIR | op::FLUSH => 24,
        op::GETLK | op::SETLK | op::SETLKW => size_of::<abi::LkIn>(),
        op::INTERRUPT => 8,
        op::FALLOCATE => size_of::<abi::FallocateIn>(),
        op::LSEEK => size_of::<abi::LseekIn>(),
        op::IOCTL => size_of::<abi::IoctlIn>(),
        op::READ | op::READDIR | op::READDIRPLUS => size_of::<abi::ReadIn>(),
        op::WRITE => size_of::<abi::WriteIn>(),
        op::SETATTR => size_of::<abi::SetattrIn>(),
        op::INIT => size_of::<abi::InitIn>(),
        _ => 0,
    }
}

/// Split a request's body as `/dev/fuse` delivers it (everything after
/// the request header) into its operation header and the rest.
pub fn split_body(opcode: u32, body: &[u8]) -> (&[u8], &[u8]) {
    body.split_at(op_header_size(opcode).min(body.len()))
}

/// The NUL-terminated string at the start of `b`, and what follows it.
fn cstr(b: &[u8]) -> Result<(&[u8], &[u8]), i32> {
    let end = b.iter().position(|c| *c == 0).ok_or(libc::EINVAL)?;
    Ok((&b[..end], &b[end + 1..]))
}

fn time_arg(valid: u32, set: u32, now: u32, sec: u64, nsec: u32) -> Option<TimeArg> {
    if valid & now != 0 {
        Some(TimeArg::Now)
    } else if valid & set != 0 {
        Some(TimeArg::At {
            sec: sec as i64,
            nsec,
        })
    } else {
        None
    }
}

impl<'a> Operation<'a> {
    /// Decode a request with `opcode`: its operation's fixed header
    /// `head` (see [`op_header_size`]) and what follows, `b`.
    pub fn parse(opcode: u32, head: &[u8], b: &'a [u8]) -> Result<Operation<'a>, i32> {
        Ok(match opcode {
            op::LOOKUP => Operation::Lookup { name: cstr(b)?.0 },
            op::FORGET => Operation::Forget {
                nlookup: hdr::<abi::ForgetIn>(head)?.nlookup,
            },
            op::BATCH_FORGET => {
                let h = hdr::<abi::BatchForgetIn>(head)?;
                let mut rest = b;
                let mut items = Vec::with_capacity((h.count as usize).min(rest.len() / 16));
                for _ in 0..h.count {
                    let one = hdr::<abi::ForgetOne>(rest)?;
                    items.push((one.nodeid, one.nlookup));
                    rest = &rest[std::mem::size_of::<abi::ForgetOne>()..];
                }
                Operation::BatchForget { items }
            }
            op::GETATTR => {
                let g = hdr::<abi::GetattrIn>(head)?;
                Operation::Getattr {
                    fh: (g.getattr_flags & abi::GETATTR_FH != 0).then_some(g.fh),
                }
            }
            op::SETATTR => {
                let s = hdr::<abi::SetattrIn>(head)?;
                let v = s.valid;
                let has = |bit: u32| v & bit != 0;
                Operation::Setattr(Setattr {
                    mode: has(fattr::MODE).then_some(s.mode),
                    uid: has(fattr::UID).then_some(s.uid),
                    gid: has(fattr::GID).then_some(s.gid),
                    size: has(fattr::SIZE).then_some(s.size),
                    atime: time_arg(v, fattr::ATIME, fattr::ATIME_NOW, s.atime, s.atimensec),
                    mtime: time_arg(v, fattr::MTIME, fattr::MTIME_NOW, s.mtime, s.mtimensec),
                    fh: has(fattr::FH).then_some(s.fh),
                })
            }
            op::READLINK => Operation::Readlink,
            op::SYMLINK => {
                let (name, rest) = cstr(b)?;
                Operation::Symlink {
                    name,
                    target: cstr(rest)?.0,
                }
            }
            op::MKNOD => {
                let m = hdr::<abi::MknodIn>(head)?;
                let rest = b;
                Operation::Mknod {
                    name: cstr(rest)?.0,
                    mode: m.mode,
                    rdev: m.rdev,
                    umask: m.umask,
                }
            }
            op::MKDIR => {
                let m = hdr::<abi::MkdirIn>(head)?;
                let rest = b;
                Operation::Mkdir {
                    name: cstr(rest)?.0,
                    mode: m.mode,
                    umask: m.umask,
                }
            }
            op::UNLINK => Operation::Unlink { name: cstr(b)?.0 },
            op::RMDIR => Operation::Rmdir { name: cstr(b)?.0 },
            op::RENAME | op::RENAME2 => {
                let (newdir, flags, rest) = if opcode == op::RENAME {
                    (hdr::<abi::RenameIn>(head)?.newdir, 0, b)
                } else {
                    let r = hdr::<abi::Rename2In>(head)?;
                    (r.newdir, r.flags, b)
                };
                let (name, rest) = cstr(rest)?;
                Operation::Rename {
                    newdir,
                    name,
                    newname: cstr(rest)?.0,
                    flags,
                }
            }
            op::LINK => {
                let l = hdr::<abi::LinkIn>(head)?;
                let rest = b;
                Operation::Link {
                    oldnodeid: l.oldnodeid,
                    newname: cstr(rest)?.0,
                }
            }
            op::OPEN | op::OPENDIR => {
                let flags = hdr::<abi::OpenIn>(head)?.flags as i32;
                if opcode == op::OPEN {
                    Operation::Open { flags }
                } else {
                    Operation::Opendir { flags }
                }
            }
            op::READ => {
                let r = hdr::<abi::ReadIn>(head)?;
                Operation::Read {
                    fh: r.fh,
                    offset: r.offset,
                    size: r.size,
                }
            }
            op::WRITE => {
                let w = hdr::<abi::WriteIn>(head)?;
                let rest = b;
                Operation::Write {
                    fh: w.fh,
                    offset: w.offset,
                    write_flags: w.write_flags,
                    data: rest.get(..w.size as usize).ok_or(libc::EINVAL)?,
                }
            }
            op::STATFS => Operation::Statfs,
            op::RELEASE | op::RELEASEDIR => {
                let r = hdr::<abi::ReleaseIn>(head)?;
                if opcode == op::RELEASE {
                    Operation::Release {
                        fh: r.fh,
                        flock_owner: (r.release_flags & abi::RELEASE_FLOCK_UNLOCK != 0)
                            .then_some(r.lock_owner),
                    }
                } else {
                    Operation::Releasedir { fh: r.fh }
                }
            }
            op::GETLK | op::SETLK | op::SETLKW => {
                let l = hdr::<abi::LkIn>(head)?;
                let lk = Lk {
                    fh: l.fh,
                    owner: l.owner,
                    start: l.start,
                    end: l.end,
                    ty: l.ty,
                    pid: l.pid,
                    flock: l.lk_flags & abi::LK_FLOCK != 0,
                };
                match opcode {
                    op::GETLK => Operation::Getlk(lk),
                    _ => Operation::Setlk {
                        lk,
                        sleep: opcode == op::SETLKW,
                    },
                }
            }
            op::FSYNC | op::FSYNCDIR => {
                let f = hdr::<abi::FsyncIn>(head)?;
                let (fh, datasync) = (f.fh, f.fsync_flags & 1 != 0);
                if opcode == op::FSYNC {
                    Operation::Fsync { fh, datasync }
                } else {
                    Operation::Fsyncdir { fh, datasync }
                }
            }
            op::GETXATTR => {
                let g = hdr::<abi::GetxattrIn>(head)?;
                let rest = b;
                Operation::Getxattr {
                    name: cstr(rest)?.0,
                    size: g.size,
                }
            }
            op::LISTXATTR => Operation::Listxattr {
                size: hdr::<abi::GetxattrIn>(head)?.size,
            },
            op::SETXATTR => {
                let x = hdr::<abi::SetxattrIn>(head)?;
                let (name, rest) = cstr(b)?;
                let value = rest.get(..x.size as usize).ok_or(libc::EINVAL)?;
                Operation::Setxattr {
                    name,
                    value,
                    flags: x.flags as i32,
                }
            }
            op::REMOVEXATTR => Operation::Removexattr { name: cstr(b)?.0 },
            op::FLUSH => {
                let f = hdr::<abi::FlushIn>(head)?;
                Operation::Flush {
                    fh: f.fh,
                    lock_owner: f.lock_owner,
                }
            }
            op::READDIR | op::READDIRPLUS => {
                let r = hdr::<abi::ReadIn>(head)?;
                let d = DirRead {
                    fh: r.fh,
                    offset: r.offset,
                    size: r.size,
                };
                if opcode == op::READDIR {
                    Operation::Readdir(d)
                } else {
                    Operation::Readdirplus(d)
                }
            }
            op::ACCESS => Operation::Access {
                mask: hdr::<abi::AccessIn>(head)?.mask,
            },
            op::CREATE => {
                let c = hdr::<abi::CreateIn>(head)?;
                let rest = b;
                Operation::Create {
                    name: cstr(rest)?.0,
                    flags: c.flags as i32,
                    mode: c.mode,
                    umask: c.umask,
                }
            }
            // A CREATE without a name to use (the kernel's is a
            // placeholder): `O_TMPFILE`.
            op::TMPFILE => {
                let c = hdr::<abi::CreateIn>(head)?;
                Operation::Tmpfile {
                    flags: c.flags as i32,
                    mode: c.mode,
                    umask: c.umask,
                }
            }
            op::IOCTL => {
                let i = hdr::<abi::IoctlIn>(head)?;
                let rest = b;
                Operation::Ioctl {
                    fh: i.fh,
                    cmd: i.cmd,
                    in_data: rest.get(..i.in_size as usize).ok_or(libc::EINVAL)?,
                    out_size: i.out_size,
                }
            }
            op::FALLOCATE => {
                let f = hdr::<abi::FallocateIn>(head)?;
                Operation::Fallocate {
                    fh: f.fh,
                    offset: f.offset,
                    length: f.length,
                    mode: f.mode as i32,
                }
            }
            op::LSEEK => {
                let l = hdr::<abi::LseekIn>(head)?;
                Operation::Lseek {
                    fh: l.fh,
                    offset: l.offset,
                    whence: l.whence as i32,
                }
            }
            op::INTERRUPT => Operation::Interrupt {
                unique: hdr::<abi::InterruptIn>(head)?.unique,
            },
            op::DESTROY => Operation::Destroy,
            other => Operation::Other(other),
        })
    }

    /// Requests the kernel expects no reply to.
    pub fn no_reply(opcode: u32) -> bool {
        matches!(opcode, op::FORGET | op::BATCH_FORGET | op::INTERRUPT)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes<T: Pod>(t: &T, tail: &[u8]) -> Vec<u8> {
        let mut v = t.as_bytes().to_vec();
        v.extend_from_slice(tail);
        v
    }

    /// Parse a request as it arrives over /dev/fuse: the operation's
    /// header and what follows in one buffer.
    fn parse(opcode: u32, body: &[u8]) -> Result<Operation<'_>, i32> {
        let (head, tail) = split_body(opcode, body);
        Operation::parse(opcode, head, tail)
    }

    #[test]
    fn names_need_their_nul_and_headers_their_length() {
        assert!(matches!(
            parse(op::LOOKUP, b"abc\0"),
            Ok(Operation::Lookup { name: b"abc" })
        ));
        assert_eq!(parse(op::LOOKUP, b"abc").err(), Some(libc::EINVAL));
        assert_eq!(parse(op::MKDIR, &[0u8; 7]).err(), Some(libc::EINVAL));
        let w = abi::WriteIn {
            size: 10,
            ..Default::default()
        };
        // Fewer data bytes than the header claims.
        assert_eq!(
            parse(op::WRITE, &bytes(&w, b"short")).err(),
            Some(libc::EINVAL)
        );
    }

    #[test]
    fn rename_symlink_and_setattr_fields_come_out_as_sent() {
        let r = abi::Rename2In {
            newdir: 9,
            flags: 1,
            padding: 0,
        };
        let body = bytes(&r, b"a\0bc\0");
        let Ok(Operation::Rename {
            newdir,
            name,
            newname,
            flags,
        }) = parse(op::RENAME2, &body)
        else {
            panic!("a rename")
        };
        assert_eq!(
            (newdir, name, newname, flags),
            (9, &b"a"[..], &b"bc"[..], 1)
        );
        let Ok(Operation::Symlink { name, target }) = parse(op::SYMLINK, b"l\0/t\0") else {
            panic!("a symlink")
        };
        assert_eq!((name, target), (&b"l"[..], &b"/t"[..]));
        let s = abi::SetattrIn {
            valid: fattr::MODE | fattr::ATIME_NOW | fattr::MTIME | fattr::FH,
            mode: 0o644,
            mtime: 5,
            mtimensec: 6,
            fh: 0,
            ..Default::default()
        };
        let Ok(Operation::Setattr(a)) = parse(op::SETATTR, s.as_bytes()) else {
            panic!("a setattr")
        };
        assert_eq!(a.mode, Some(0o644));
        assert_eq!((a.uid, a.size), (None, None));
        assert_eq!(a.atime, Some(TimeArg::Now));
        assert_eq!(a.mtime, Some(TimeArg::At { sec: 5, nsec: 6 }));
        assert_eq!(a.fh, Some(0));
    }

    #[test]
    fn xattr_fallocate_and_lseek_requests_come_out_as_sent() {
        let x = abi::SetxattrIn { size: 3, flags: 1 };
        let body = bytes(&x, b"user.a\0xyz");
        let Ok(Operation::Setxattr { name, value, flags }) = parse(op::SETXATTR, &body) else {
            panic!("a setxattr")
        };
        assert_eq!((name, value, flags), (&b"user.a"[..], &b"xyz"[..], 1));
        // A value shorter than its size, a name without its NUL.
        assert_eq!(
            parse(op::SETXATTR, &bytes(&x, b"user.a\0xy")).err(),
            Some(libc::EINVAL)
        );
        assert_eq!(parse(op::REMOVEXATTR, b"user.a").err(), Some(libc::EINVAL));
        assert!(matches!(
            parse(op::REMOVEXATTR, b"user.a\0"),
            Ok(Operation::Removexattr { name: b"user.a" })
        ));
        let f = abi::FallocateIn {
            fh: 7,
            offset: 4096,
            length: 8192,
            mode: 3,
            padding: 0,
        };
        assert!(matches!(
            parse(op::FALLOCATE, f.as_bytes()),
            Ok(Operation::Fallocate {
                fh: 7,
                offset: 4096,
                length: 8192,
                mode: 3
            })
        ));
        assert_eq!(
            parse(op::FALLOCATE, &f.as_bytes()[..20]).err(),
            Some(libc::EINVAL)
        );
        let l = abi::LseekIn {
            fh: 2,
            offset: 10,
            whence: libc::SEEK_HOLE as u32,
            padding: 0,
        };
        assert!(matches!(
            parse(op::LSEEK, l.as_bytes()),
            Ok(Operation::Lseek {
                fh: 2,
                offset: 10,
                whence: libc::SEEK_HOLE
            })
        ));
    }

    #[test]
    fn a_batch_forget_with_too_few_items_is_refused() {
        let h = abi::BatchForgetIn { count: 2, dummy: 0 };
        let one = abi::ForgetOne {
            nodeid: 5,
            nlookup: 3,
        };
        let ok = bytes(&h, &[one.as_bytes(), one.as_bytes()].concat());
        let Ok(Operation::BatchForget { items }) = parse(op::BATCH_FORGET, &ok) else {
            panic!("a batch")
        };
        assert_eq!(items, [(5, 3), (5, 3)]);
        let short = bytes(&h, one.as_bytes());
        assert!(parse(op::BATCH_FORGET, &short).is_err());
    }
}
