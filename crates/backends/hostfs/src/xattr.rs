//! Extended attributes and POSIX ACLs: the host file's own, read and
//! changed through `/proc/self/fd/N` of the node's `O_PATH` descriptor
//! (the xattr calls take no descriptor of that kind; sys.rs). The host's file
//! system keeps mode and ACL in step and makes new nodes inherit a
//! default ACL, as it does for its own programs; the vfs has checked the
//! caller.

use std::os::fd::AsFd;

use walkfs_fsapi::{caps, NodeId, Result};

use crate::{sys, HostFs};

impl caps::Xattrs for HostFs {
    fn getxattr(&self, node: NodeId, name: &[u8]) -> Result<Vec<u8>> {
        self.behind.settle(&[node.0]);
        sys::getxattr(self.proc_fd.as_fd(), self.fd(node)?.as_fd(), name)
    }

    fn listxattr(&self, node: NodeId) -> Result<Vec<u8>> {
        self.behind.settle(&[node.0]);
        sys::listxattr(self.proc_fd.as_fd(), self.fd(node)?.as_fd())
    }

    fn setxattr(&self, node: NodeId, name: &[u8], value: &[u8], flags: i32) -> Result<()> {
        self.changed_xattr(node, |fd| {
            sys::setxattr(self.proc_fd.as_fd(), fd, name, value, flags)
        })
    }

    fn removexattr(&self, node: NodeId, name: &[u8]) -> Result<()> {
        self.changed_xattr(node, |fd| sys::removexattr(self.proc_fd.as_fd(), fd, name))
    }
}

impl HostFs {
    /// Run a change of attributes, marked as ours so that its report (an
    /// attribute change on the host) is known for our own.
    fn changed_xattr(
        &self,
        node: NodeId,
        change: impl FnOnce(std::os::fd::BorrowedFd) -> Result<()>,
    ) -> Result<()> {
        self.behind.settle(&[node.0]);
        let _changing = self.own.changing();
        let fd = self.fd(node)?;
        change(fd.as_fd())?;
        if let Ok(attr) = sys::statx(fd.as_fd()) {
            self.own.inode(node.0, &attr);
        }
        Ok(())
    }
}
