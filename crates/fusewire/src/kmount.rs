//! Mounting and unmounting the FUSE file system ourselves, so that an
//! unmount is only ever done by the one who decided it.
//!
//! (fuser unmounts the mount point's path again when its session ends,
//! also when the session ended because somebody else unmounted it: by
//! then another file system may be mounted on that directory — a script
//! that unmounts walkfs and mounts something else there — and it would
//! be the one unmounted. Here the path is unmounted only on our own
//! request, while our session is still running.)
//!
//! As root the mount is mount(2) of a fresh `/dev/fuse` descriptor; a
//! user goes through the setuid `fusermount3`, which mounts and passes
//! the descriptor back over a socket (libfuse's protocol: the socket's
//! number in `_FUSE_COMMFD`, the descriptor as `SCM_RIGHTS`).

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::process::Command;

/// What the mount says about itself.
pub struct Spec<'a> {
    /// Shown as the mount's source (`/proc/mounts`, `df`).
    pub fsname: &'a str,
    pub read_only: bool,
    pub default_permissions: bool,
    pub allow_other: bool,
    /// The generic mount flags asked for (`MS_NOATIME`, `MS_NODIRATIME`,
    /// `MS_RELATIME`, `MS_STRICTATIME`, `MS_LAZYTIME`, `MS_SYNCHRONOUS`,
    /// `MS_DIRSYNC`, `MS_NOEXEC`, `MS_NOSUID`, `MS_NODEV`): the kernel
    /// applies them to the mount as to any other.
    pub flags: u64,
}

/// The flags a mount made through `fusermount3` (by a user) always has:
/// only root may mount with set-id files and devices honoured.
const USER_FLAGS: u64 = libc::MS_NOSUID | libc::MS_NODEV;

/// The `fusermount3` option of each generic flag.
const FLAG_NAMES: &[(u64, &str)] = &[
    (libc::MS_NOATIME, "noatime"),
    (libc::MS_NODIRATIME, "nodiratime"),
    (libc::MS_RELATIME, "relatime"),
    (libc::MS_STRICTATIME, "strictatime"),
    (libc::MS_LAZYTIME, "lazytime"),
    (libc::MS_SYNCHRONOUS, "sync"),
    (libc::MS_DIRSYNC, "dirsync"),
    (libc::MS_NOEXEC, "noexec"),
];

fn is_root() -> bool {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// A name for the mount table: no commas (option separators) or spaces.
fn clean(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c == ',' || c.is_whitespace() {
                '_'
            } else {
                c
            }
        })
        .collect()
}

/// Mount FUSE on `mountpoint`; the descriptor the session reads.
pub fn mount(mountpoint: &Path, spec: &Spec<'_>) -> Result<OwnedFd, String> {
    if is_root() {
        mount_direct(mountpoint, spec)
    } else {
        mount_fusermount(mountpoint, spec)
    }
}

fn mount_direct(mountpoint: &Path, spec: &Spec<'_>) -> Result<OwnedFd, String> {
    let dev = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")
        .map_err(|e| format!("/dev/fuse: {e}"))?;
    let fd = OwnedFd::from(dev);
    // SAFETY: getuid/getgid cannot fail.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    let mut data = format!(
        "fd={},rootmode=40000,user_id={uid},group_id={gid}",
        fd.as_raw_fd()
    );
    if spec.default_permissions {
        data.push_str(",default_permissions");
    }
    if spec.allow_other {
        data.push_str(",allow_other");
    }
    let mut flags = spec.flags;
    if spec.read_only {
        flags |= libc::MS_RDONLY;
    }
    let c = |s: &[u8]| CString::new(s).map_err(|_| "a NUL in a mount argument".to_string());
    let (src, target, fstype, data) = (
        c(clean(spec.fsname).as_bytes())?,
        c(mountpoint.as_os_str().as_bytes())?,
        c(b"fuse.walkfs")?,
        c(data.as_bytes())?,
    );
    // SAFETY: valid C strings that outlive the call.
    let r = unsafe {
        libc::mount(
            src.as_ptr(),
            target.as_ptr(),
            fstype.as_ptr(),
            flags,
            data.as_ptr().cast(),
        )
    };
    if r != 0 {
        return Err(format!(
            "mount on {}: {}",
            mountpoint.display(),
            std::io::Error::last_os_error()
        ));
    }
    Ok(fd)
}

/// Change the flags of the mount on `mountpoint` (`mount -o remount`):
/// read-only or not, and the generic flags of [`Spec::flags`]. The
/// daemon serving it goes on as it is; root only (a user's mount is
/// changed by unmounting it and mounting it again).
pub fn remount(mountpoint: &Path, flags: u64, read_only: bool) -> Result<(), String> {
    if !is_root() {
        return Err("remount: only root may change a mount's flags".into());
    }
    let target = CString::new(mountpoint.as_os_str().as_bytes())
        .map_err(|_| "a NUL in the mount point".to_string())?;
    let mut f = libc::MS_REMOUNT | flags;
    if read_only {
        f |= libc::MS_RDONLY;
    }
    // SAFETY: a valid C string that outlives the call; no source, type or
    // data for a remount.
    let r = unsafe {
        libc::mount(
            std::ptr::null(),
            target.as_ptr(),
            std::ptr::null(),
            f,
            std::ptr::null(),
        )
    };
    if r != 0 {
        return Err(format!(
            "remount of {}: {}",
            mountpoint.display(),
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}

fn mount_fusermount(mountpoint: &Path, spec: &Spec<'_>) -> Result<OwnedFd, String> {
    let (ours, theirs) =
        std::os::unix::net::UnixStream::pair().map_err(|e| format!("socketpair: {e}"))?;
    // The child must inherit its end: clear close-on-exec on it.
    // SAFETY: fcntl on a descriptor we own.
    unsafe { libc::fcntl(theirs.as_raw_fd(), libc::F_SETFD, 0) };
    let mut o = format!("fsname={},subtype=walkfs,nosuid,nodev", clean(spec.fsname));
    for (flag, name) in FLAG_NAMES {
        if spec.flags & !USER_FLAGS & flag != 0 {
            o.push(',');
            o.push_str(name);
        }
    }
    if spec.default_permissions {
        o.push_str(",default_permissions");
    }
    if spec.allow_other {
        o.push_str(",allow_other");
    }
    if spec.read_only {
        o.push_str(",ro");
    }
    let status = Command::new("fusermount3")
        .arg("-o")
        .arg(&o)
        .arg("--")
        .arg(mountpoint)
        .env("_FUSE_COMMFD", theirs.as_raw_fd().to_string())
        .status()
        .map_err(|e| format!("fusermount3: {e}"))?;
    drop(theirs);
    if !status.success() {
        return Err(format!(
            "fusermount3 could not mount on {}",
            mountpoint.display()
        ));
    }
    receive_fd(&ours).map_err(|e| format!("fusermount3: no descriptor passed: {e}"))
}

/// One descriptor sent as `SCM_RIGHTS` on `sock`.
fn receive_fd(sock: &std::os::unix::net::UnixStream) -> std::io::Result<OwnedFd> {
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    // Room for one descriptor's control message, aligned for cmsghdr.
    let mut ctl = [0u64; 8];
    // SAFETY: msghdr is plain data; every pointer in it refers to a live
    // local buffer of the stated length for the duration of recvmsg; the
    // control message is read only after checking its level, type and
    // length.
    unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = ctl.as_mut_ptr().cast();
        msg.msg_controllen = std::mem::size_of_val(&ctl);
        let n = libc::recvmsg(sock.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC);
        if n < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let cm = libc::CMSG_FIRSTHDR(&msg);
        if cm.is_null()
            || (*cm).cmsg_level != libc::SOL_SOCKET
            || (*cm).cmsg_type != libc::SCM_RIGHTS
            || (*cm).cmsg_len < libc::CMSG_LEN(std::mem::size_of::<i32>() as u32) as usize
        {
            return Err(std::io::Error::other("no SCM_RIGHTS message"));
        }
        let fd = std::ptr::read_unaligned(libc::CMSG_DATA(cm).cast::<i32>());
        Ok(OwnedFd::from_raw_fd(fd))
    }
}

/// Unmount `mountpoint` (ours, still mounted: the caller knows).
pub fn unmount(mountpoint: &Path) -> Result<(), String> {
    if is_root() {
        let target = CString::new(mountpoint.as_os_str().as_bytes())
            .map_err(|_| "a NUL in the mount point".to_string())?;
        // SAFETY: a valid C string.
        if unsafe { libc::umount2(target.as_ptr(), libc::UMOUNT_NOFOLLOW) } == 0 {
            return Ok(());
        }
        return Err(format!(
            "unmount {}: {}",
            mountpoint.display(),
            std::io::Error::last_os_error()
        ));
    }
    let st = Command::new("fusermount3")
        .arg("-u")
        .arg("--")
        .arg(mountpoint)
        .status()
        .map_err(|e| format!("fusermount3 -u: {e}"))?;
    if st.success() {
        Ok(())
    } else {
        Err(format!("fusermount3 -u {} failed", mountpoint.display()))
    }
}
