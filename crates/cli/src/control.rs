//! The control client: how `walkfs sync`, `walkfs stats` and the
//! fsmonitor daemon reach a mount's daemon, by ioctls of the mount's root
//! directory (the daemon answers them; walkfs_fuse numbers them).

/// Ask the daemon of the mount at `mountpoint` with ioctl `cmd` on its
/// root directory, `buf` (of the size the number carries) for its answer
/// (how `walkfs stats` and `walkfs sync` reach the daemon). The ioctl's
/// result: the length of the answer.
fn mount_ioctl(mountpoint: &str, cmd: u32, buf: &mut [u8]) -> std::io::Result<usize> {
    use std::os::fd::AsRawFd;
    let dir = std::fs::File::open(mountpoint)?;
    // SAFETY: a descriptor we own, and a buffer at least as large as the
    // size `cmd` encodes (the kernel copies at most that much into it).
    let n = unsafe { libc::ioctl(dir.as_raw_fd(), cmd as _, buf.as_mut_ptr()) };
    usize::try_from(n).map_err(|_| std::io::Error::last_os_error())
}

/// Drain the mount at `mountpoint`: returns once every change that ran
/// behind its caller has been carried out, with the error of one that
/// failed since the last sync.
pub fn sync(mountpoint: &str) -> std::io::Result<()> {
    mount_ioctl(mountpoint, walkfs_fuse::SYNC_IOCTL, &mut []).map(drop)
}

/// The counters of the mount at `mountpoint`: a
/// [`walkfs_fuse::MountStats`] as JSON.
pub fn stats_json(mountpoint: &str) -> std::io::Result<Vec<u8>> {
    let mut buf = vec![0u8; walkfs_fuse::STATS_MAX];
    let n = mount_ioctl(mountpoint, walkfs_fuse::STATS_IOCTL, &mut buf)?;
    buf.truncate(n);
    Ok(buf)
}

/// Show on the mount at `mountpoint` every change made behind its back
/// before the call (walkfs_fuse::SETTLE_IOCTL).
pub fn settle(mountpoint: &std::path::Path) -> std::io::Result<()> {
    let p = mountpoint
        .to_str()
        .ok_or(std::io::ErrorKind::InvalidInput)?;
    mount_ioctl(p, walkfs_fuse::SETTLE_IOCTL, &mut []).map(drop)
}
