//! The space of a file's data: `fallocate` and `SEEK_DATA`/`SEEK_HOLE`
//! on the handle's host descriptor, in whatever modes the host's file
//! system offers (the vfs checked the caller and the mode's form).

use std::os::fd::AsFd;

use walkfs_fsapi::{caps, NodeId, Result};

use crate::{sys, HostFs};

/// Allocation and holes: the host file system's own, on the handle's
/// descriptor.
impl caps::Space for HostFs {
    fn fallocate(
        &self,
        node: NodeId,
        fh: walkfs_fsapi::FileHandle,
        mode: i32,
        off: u64,
        len: u64,
    ) -> Result<()> {
        self.behind.settle(&[node.0]);
        let _changing = self.own.changing();
        let fd = self.handle(fh)?;
        sys::fallocate(fd.as_fd(), mode, off, len)?;
        if let Ok(attr) = sys::statx(fd.as_fd()) {
            self.own.inode(node.0, &attr);
        }
        Ok(())
    }

    fn seek_data(
        &self,
        node: NodeId,
        fh: walkfs_fsapi::FileHandle,
        off: u64,
        whence: i32,
    ) -> Result<u64> {
        self.behind.settle(&[node.0]);
        sys::seek_data(self.handle(fh)?.as_fd(), off, whence)
    }
}
