//! The operations of the differential tests, and how each side runs them.
//!
//! The kernel side runs in the `kernel-twin` process, chrooted into its
//! directory so absolute paths mean the same on both sides, with the ids of
//! the test. The walkfs side runs the same operations through a [`Ctx`]
//! over hostfs on a twin directory. Each operation's [`Outcome`] must be
//! equal, and so must the trees they leave.

use std::ffi::CString;

use serde::{Deserialize, Serialize};
use walkfs_vfs::{Ctx, Errno, AT_FDCWD};

/// One call. Paths are relative to the chroot/ctx root, or to a directory
/// descriptor held in a slot.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Op {
    Access {
        dir: Option<usize>,
        path: Vec<u8>,
        mode: i32,
        nofollow: bool,
    },
    Stat {
        dir: Option<usize>,
        path: Vec<u8>,
        nofollow: bool,
    },
    Readlink {
        path: Vec<u8>,
    },
    /// `readlinkat` from a slot's descriptor (an empty path reads the
    /// descriptor itself).
    ReadlinkAt {
        dir: Option<usize>,
        path: Vec<u8>,
    },
    /// `mknod` (a fifo, a socket, a device, a regular file).
    Mknod {
        path: Vec<u8>,
        mode: u32,
        dev: u64,
    },
    Open {
        dir: Option<usize>,
        path: Vec<u8>,
        flags: i32,
        mode: u32,
    },
    Close {
        slot: usize,
    },
    Write {
        slot: usize,
        len: usize,
        byte: u8,
    },
    Pread {
        slot: usize,
        off: u64,
        len: usize,
    },
    Fstat {
        slot: usize,
    },
    Ftruncate {
        slot: usize,
        len: i64,
    },
    Mkdir {
        path: Vec<u8>,
        mode: u32,
    },
    Unlink {
        path: Vec<u8>,
        rmdir: bool,
    },
    Rename {
        old: Vec<u8>,
        new: Vec<u8>,
        flags: u32,
    },
    Symlink {
        target: Vec<u8>,
        path: Vec<u8>,
    },
    Link {
        old: Vec<u8>,
        new: Vec<u8>,
        follow: bool,
    },
    Chmod {
        path: Vec<u8>,
        mode: u32,
        nofollow: bool,
    },
    Chown {
        path: Vec<u8>,
        uid: u32,
        gid: u32,
        nofollow: bool,
    },
    List {
        path: Vec<u8>,
    },
}

/// What a call returned, reduced to what both sides must agree on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Outcome {
    Err(i32),
    Ok,
    Opened,
    Count(i64),
    Data(Vec<u8>),
    /// mode, nlink, uid, gid, size (size only for files and symlinks).
    Stat(u32, u64, u32, u32, u64),
    Names(Vec<Vec<u8>>),
    /// The op named an empty slot (not run on either side).
    NoSlot,
}

/// The ids a run uses.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Who {
    pub uid: u32,
    pub gid: u32,
    pub groups: Vec<u32>,
}

fn stat_outcome(mode: u32, nlink: u64, uid: u32, gid: u32, size: u64) -> Outcome {
    let t = mode & libc::S_IFMT;
    let size = if t == libc::S_IFREG || t == libc::S_IFLNK {
        size
    } else {
        0
    };
    Outcome::Stat(mode, nlink, uid, gid, size)
}

fn data(byte: u8, len: usize) -> Vec<u8> {
    (0..len).map(|i| byte.wrapping_add(i as u8)).collect()
}

// ---------------------------------------------------------------- kernel

fn c(p: &[u8]) -> CString {
    CString::new(p).unwrap_or_default()
}

fn kret(r: i64) -> Result<i64, i32> {
    if r < 0 {
        Err(std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO))
    } else {
        Ok(r)
    }
}

fn done(r: Result<i64, i32>, ok: impl FnOnce(i64) -> Outcome) -> Outcome {
    match r {
        Ok(v) => ok(v),
        Err(e) => Outcome::Err(e),
    }
}

/// The kernel side: run `op` with real syscalls. `fds` holds the slots.
pub fn kernel_exec(op: &Op, fds: &mut Vec<Option<i32>>) -> Outcome {
    let dirfd = |d: &Option<usize>, fds: &Vec<Option<i32>>| -> Option<i32> {
        match d {
            None => Some(libc::AT_FDCWD),
            Some(s) => fds.get(*s).copied().flatten(),
        }
    };
    // SAFETY (all blocks below): plain syscalls on valid C strings and
    // buffers owned by this function.
    unsafe {
        match op {
            Op::Access {
                dir,
                path,
                mode,
                nofollow,
            } => {
                let Some(d) = dirfd(dir, fds) else {
                    return Outcome::NoSlot;
                };
                let fl = if *nofollow {
                    libc::AT_SYMLINK_NOFOLLOW
                } else {
                    0
                };
                let r = libc::syscall(libc::SYS_faccessat2, d, c(path).as_ptr(), *mode, fl);
                done(kret(r), |_| Outcome::Ok)
            }
            Op::Stat {
                dir,
                path,
                nofollow,
            } => {
                let Some(d) = dirfd(dir, fds) else {
                    return Outcome::NoSlot;
                };
                let mut st: libc::stat = std::mem::zeroed();
                let fl = if *nofollow {
                    libc::AT_SYMLINK_NOFOLLOW
                } else {
                    0
                };
                let r = libc::fstatat(d, c(path).as_ptr(), &mut st, fl);
                done(kret(r as i64), |_| {
                    stat_outcome(
                        st.st_mode,
                        st.st_nlink,
                        st.st_uid,
                        st.st_gid,
                        st.st_size as u64,
                    )
                })
            }
            Op::Readlink { path } => {
                let mut buf = vec![0u8; 4096];
                let r = libc::readlink(c(path).as_ptr(), buf.as_mut_ptr().cast(), buf.len());
                done(kret(r as i64), |n| {
                    Outcome::Data(buf[..n as usize].to_vec())
                })
            }
            Op::ReadlinkAt { dir, path } => {
                let Some(d) = dirfd(dir, fds) else {
                    return Outcome::NoSlot;
                };
                let mut buf = vec![0u8; 4096];
                let r = libc::readlinkat(d, c(path).as_ptr(), buf.as_mut_ptr().cast(), buf.len());
                done(kret(r as i64), |n| {
                    Outcome::Data(buf[..n as usize].to_vec())
                })
            }
            Op::Mknod { path, mode, dev } => done(
                kret(libc::mknod(c(path).as_ptr(), *mode, *dev) as i64),
                |_| Outcome::Ok,
            ),
            Op::Open {
                dir,
                path,
                flags,
                mode,
            } => {
                let Some(d) = dirfd(dir, fds) else {
                    return Outcome::NoSlot;
                };
                let r = libc::openat(d, c(path).as_ptr(), *flags | libc::O_CLOEXEC, *mode);
                done(kret(r as i64), |fd| {
                    fds.push(Some(fd as i32));
                    Outcome::Opened
                })
            }
            Op::Close { slot } => match fds.get_mut(*slot).and_then(Option::take) {
                Some(fd) => done(kret(libc::close(fd) as i64), |_| Outcome::Ok),
                None => Outcome::NoSlot,
            },
            Op::Write { slot, len, byte } => match fds.get(*slot).copied().flatten() {
                Some(fd) => {
                    let d = data(*byte, *len);
                    done(
                        kret(libc::write(fd, d.as_ptr().cast(), d.len()) as i64),
                        Outcome::Count,
                    )
                }
                None => Outcome::NoSlot,
            },
            Op::Pread { slot, off, len } => match fds.get(*slot).copied().flatten() {
                Some(fd) => {
                    let mut buf = vec![0u8; *len];
                    let r = libc::pread(fd, buf.as_mut_ptr().cast(), buf.len(), *off as i64);
                    done(kret(r as i64), |n| {
                        Outcome::Data(buf[..n as usize].to_vec())
                    })
                }
                None => Outcome::NoSlot,
            },
            Op::Fstat { slot } => match fds.get(*slot).copied().flatten() {
                Some(fd) => {
                    let mut st: libc::stat = std::mem::zeroed();
                    let r = libc::fstat(fd, &mut st);
                    done(kret(r as i64), |_| {
                        stat_outcome(
                            st.st_mode,
                            st.st_nlink,
                            st.st_uid,
                            st.st_gid,
                            st.st_size as u64,
                        )
                    })
                }
                None => Outcome::NoSlot,
            },
            Op::Ftruncate { slot, len } => match fds.get(*slot).copied().flatten() {
                Some(fd) => done(kret(libc::ftruncate(fd, *len) as i64), |_| Outcome::Ok),
                None => Outcome::NoSlot,
            },
            Op::Mkdir { path, mode } => {
                done(kret(libc::mkdir(c(path).as_ptr(), *mode) as i64), |_| {
                    Outcome::Ok
                })
            }
            Op::Unlink { path, rmdir } => {
                let fl = if *rmdir { libc::AT_REMOVEDIR } else { 0 };
                done(
                    kret(libc::unlinkat(libc::AT_FDCWD, c(path).as_ptr(), fl) as i64),
                    |_| Outcome::Ok,
                )
            }
            Op::Rename { old, new, flags } => {
                let r = libc::syscall(
                    libc::SYS_renameat2,
                    libc::AT_FDCWD,
                    c(old).as_ptr(),
                    libc::AT_FDCWD,
                    c(new).as_ptr(),
                    *flags,
                );
                done(kret(r), |_| Outcome::Ok)
            }
            Op::Symlink { target, path } => done(
                kret(libc::symlink(c(target).as_ptr(), c(path).as_ptr()) as i64),
                |_| Outcome::Ok,
            ),
            Op::Link { old, new, follow } => {
                let fl = if *follow { libc::AT_SYMLINK_FOLLOW } else { 0 };
                let r = libc::linkat(
                    libc::AT_FDCWD,
                    c(old).as_ptr(),
                    libc::AT_FDCWD,
                    c(new).as_ptr(),
                    fl,
                );
                done(kret(r as i64), |_| Outcome::Ok)
            }
            Op::Chmod {
                path,
                mode,
                nofollow,
            } => {
                let fl = if *nofollow {
                    libc::AT_SYMLINK_NOFOLLOW
                } else {
                    0
                };
                let r = libc::syscall(
                    libc::SYS_fchmodat2,
                    libc::AT_FDCWD,
                    c(path).as_ptr(),
                    *mode,
                    fl,
                );
                done(kret(r), |_| Outcome::Ok)
            }
            Op::Chown {
                path,
                uid,
                gid,
                nofollow,
            } => {
                let fl = if *nofollow {
                    libc::AT_SYMLINK_NOFOLLOW
                } else {
                    0
                };
                let r = libc::fchownat(libc::AT_FDCWD, c(path).as_ptr(), *uid, *gid, fl);
                done(kret(r as i64), |_| Outcome::Ok)
            }
            Op::List { path } => {
                let fd = libc::open(
                    c(path).as_ptr(),
                    libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
                );
                if fd < 0 {
                    return Outcome::Err(
                        std::io::Error::last_os_error().raw_os_error().unwrap_or(0),
                    );
                }
                let mut names = Vec::new();
                let mut buf = vec![0u8; 16384];
                loop {
                    let n = libc::syscall(libc::SYS_getdents64, fd, buf.as_mut_ptr(), buf.len());
                    if n <= 0 {
                        break;
                    }
                    let mut off = 0usize;
                    while off < n as usize {
                        let reclen = u16::from_ne_bytes([buf[off + 16], buf[off + 17]]) as usize;
                        let name = &buf[off + 19..off + reclen];
                        let name = &name[..name.iter().position(|&b| b == 0).unwrap_or(name.len())];
                        if name != b"." && name != b".." {
                            names.push(name.to_vec());
                        }
                        off += reclen;
                    }
                }
                libc::close(fd);
                names.sort();
                Outcome::Names(names)
            }
        }
    }
}

// ---------------------------------------------------------------- walkfs

fn wdone<T>(r: Result<T, Errno>, ok: impl FnOnce(T) -> Outcome) -> Outcome {
    match r {
        Ok(v) => ok(v),
        Err(e) => Outcome::Err(e.0),
    }
}

/// The walkfs side: run `op` on `ctx`. `fds` holds the slots.
pub fn walkfs_exec(ctx: &Ctx, op: &Op, fds: &mut Vec<Option<i32>>) -> Outcome {
    let dirfd = |d: &Option<usize>, fds: &Vec<Option<i32>>| -> Option<i32> {
        match d {
            None => Some(AT_FDCWD),
            Some(s) => fds.get(*s).copied().flatten(),
        }
    };
    let st =
        |s: libc::stat| stat_outcome(s.st_mode, s.st_nlink, s.st_uid, s.st_gid, s.st_size as u64);
    match op {
        Op::Access {
            dir,
            path,
            mode,
            nofollow,
        } => {
            let Some(d) = dirfd(dir, fds) else {
                return Outcome::NoSlot;
            };
            let fl = if *nofollow {
                libc::AT_SYMLINK_NOFOLLOW
            } else {
                0
            };
            wdone(ctx.faccessat(d, path, *mode, fl), |_| Outcome::Ok)
        }
        Op::Stat {
            dir,
            path,
            nofollow,
        } => {
            let Some(d) = dirfd(dir, fds) else {
                return Outcome::NoSlot;
            };
            let fl = if *nofollow {
                libc::AT_SYMLINK_NOFOLLOW
            } else {
                0
            };
            wdone(ctx.fstatat(d, path, fl), st)
        }
        Op::Readlink { path } => wdone(ctx.readlinkat(AT_FDCWD, path), Outcome::Data),
        Op::ReadlinkAt { dir, path } => {
            let Some(d) = dirfd(dir, fds) else {
                return Outcome::NoSlot;
            };
            wdone(ctx.readlinkat(d, path), Outcome::Data)
        }
        Op::Mknod { path, mode, dev } => {
            wdone(ctx.mknodat(AT_FDCWD, path, *mode, *dev), |_| Outcome::Ok)
        }
        Op::Open {
            dir,
            path,
            flags,
            mode,
        } => {
            let Some(d) = dirfd(dir, fds) else {
                return Outcome::NoSlot;
            };
            wdone(ctx.openat(d, path, *flags, *mode), |fd| {
                fds.push(Some(fd));
                Outcome::Opened
            })
        }
        Op::Close { slot } => match fds.get_mut(*slot).and_then(Option::take) {
            Some(fd) => wdone(ctx.close(fd), |_| Outcome::Ok),
            None => Outcome::NoSlot,
        },
        Op::Write { slot, len, byte } => match fds.get(*slot).copied().flatten() {
            Some(fd) => wdone(ctx.write(fd, &data(*byte, *len)), |n| {
                Outcome::Count(n as i64)
            }),
            None => Outcome::NoSlot,
        },
        Op::Pread { slot, off, len } => match fds.get(*slot).copied().flatten() {
            Some(fd) => {
                let mut buf = vec![0u8; *len];
                wdone(ctx.pread(fd, &mut buf, *off), |n| {
                    Outcome::Data(buf[..n].to_vec())
                })
            }
            None => Outcome::NoSlot,
        },
        Op::Fstat { slot } => match fds.get(*slot).copied().flatten() {
            Some(fd) => wdone(ctx.fstat(fd), st),
            None => Outcome::NoSlot,
        },
        Op::Ftruncate { slot, len } => match fds.get(*slot).copied().flatten() {
            Some(fd) => wdone(ctx.ftruncate(fd, *len), |_| Outcome::Ok),
            None => Outcome::NoSlot,
        },
        Op::Mkdir { path, mode } => wdone(ctx.mkdirat(AT_FDCWD, path, *mode), |_| Outcome::Ok),
        Op::Unlink { path, rmdir } => {
            let fl = if *rmdir { libc::AT_REMOVEDIR } else { 0 };
            wdone(ctx.unlinkat(AT_FDCWD, path, fl), |_| Outcome::Ok)
        }
        Op::Rename { old, new, flags } => {
            wdone(ctx.renameat2(AT_FDCWD, old, AT_FDCWD, new, *flags), |_| {
                Outcome::Ok
            })
        }
        Op::Symlink { target, path } => {
            wdone(ctx.symlinkat(target, AT_FDCWD, path), |_| Outcome::Ok)
        }
        Op::Link { old, new, follow } => {
            let fl = if *follow { libc::AT_SYMLINK_FOLLOW } else { 0 };
            wdone(ctx.linkat(AT_FDCWD, old, AT_FDCWD, new, fl), |_| {
                Outcome::Ok
            })
        }
        Op::Chmod {
            path,
            mode,
            nofollow,
        } => {
            let fl = if *nofollow {
                libc::AT_SYMLINK_NOFOLLOW
            } else {
                0
            };
            wdone(ctx.fchmodat(AT_FDCWD, path, *mode, fl), |_| Outcome::Ok)
        }
        Op::Chown {
            path,
            uid,
            gid,
            nofollow,
        } => {
            let fl = if *nofollow {
                libc::AT_SYMLINK_NOFOLLOW
            } else {
                0
            };
            wdone(ctx.fchownat(AT_FDCWD, path, *uid, *gid, fl), |_| {
                Outcome::Ok
            })
        }
        Op::List { path } => {
            let fd = match ctx.openat(AT_FDCWD, path, libc::O_RDONLY | libc::O_DIRECTORY, 0) {
                Ok(fd) => fd,
                Err(e) => return Outcome::Err(e.0),
            };
            let r = ctx.getdents(fd);
            let _ = ctx.close(fd);
            wdone(r, |es| {
                let mut names: Vec<Vec<u8>> = es
                    .into_iter()
                    .map(|e| e.name)
                    .filter(|n| n != b"." && n != b"..")
                    .collect();
                names.sort();
                Outcome::Names(names)
            })
        }
    }
}

/// A canonical description of a directory tree (as root, without
/// following links): relative path, type and permission bits, owner,
/// link count of non-directories, file contents, link targets.
pub fn snapshot(root: &std::path::Path) -> Vec<String> {
    use std::os::unix::fs::MetadataExt;
    let mut out = Vec::new();
    let mut stack = vec![std::path::PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let full = root.join(&rel);
        let Ok(md) = std::fs::symlink_metadata(&full) else {
            continue;
        };
        let kind = md.mode() & libc::S_IFMT;
        let detail = if kind == libc::S_IFREG {
            format!(
                "nlink={} data={:?}",
                md.nlink(),
                std::fs::read(&full).unwrap_or_default()
            )
        } else if kind == libc::S_IFLNK {
            format!("-> {:?}", std::fs::read_link(&full).unwrap_or_default())
        } else if kind == libc::S_IFCHR || kind == libc::S_IFBLK {
            format!("nlink={} rdev={:#x}", md.nlink(), md.rdev())
        } else {
            format!("nlink={}", md.nlink())
        };
        out.push(format!(
            "{} mode={:o} {}:{} {}",
            rel.display(),
            md.mode(),
            md.uid(),
            md.gid(),
            detail
        ));
        if kind == libc::S_IFDIR {
            if let Ok(rd) = std::fs::read_dir(&full) {
                for e in rd.flatten() {
                    stack.push(rel.join(e.file_name()));
                }
            }
        }
    }
    out.sort();
    out
}
