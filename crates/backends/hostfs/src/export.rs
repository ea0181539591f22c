//! File ids for `open_by_handle_at` through the mount: a node's id is its
//! host file handle, so a file the vfs forgot (and a file the kernel asks
//! for after walkfs restarted) is found again wherever it now is on the
//! export's host file system.
//!
//! Confinement: a directory found by its handle is accepted only while its
//! host path lies beneath the export (the kernel connects a directory it
//! opens by handle, so its path is known). A non-directory opened by handle
//! has no path to check; it is accepted when it is on the export's file
//! system, as Linux accepts it for a privileged caller of a bind mount of
//! a subtree. The capability is offered only where the host lets us open
//! by handle (`CAP_DAC_READ_SEARCH`), never by `walkfs serve`, whose
//! seccomp filter refuses the call.

use std::os::fd::{AsFd, AsRawFd, OwnedFd};

use walkfs_fsapi::{caps, Entry, Errno, NodeId, Result};

use crate::table::ROOT;
use crate::{sys, HostFs};

impl HostFs {
    /// A descriptor of the export's host file system to open handles on
    /// (`open_by_handle_at` takes no `O_PATH` one), where files can be
    /// opened by handle here. Asked once: the root's own handle must open.
    pub(crate) fn export_fd(&self) -> Option<&OwnedFd> {
        self.export_fd
            .get_or_init(|| {
                let r = self.fd(NodeId(ROOT)).and_then(|root| {
                    let m = self.reopen(&root, libc::O_RDONLY | libc::O_DIRECTORY)?;
                    let (kind, data) = sys::file_handle(root.as_fd())?;
                    sys::open_by_handle(m.as_fd(), kind, &data, libc::O_PATH)?;
                    Ok(m)
                });
                if let Err(e) = &r {
                    tracing::debug!("files are not found by handle here: {e}");
                }
                r.ok()
            })
            .as_ref()
    }

    /// The host path of descriptor `fd`, as `/proc` tells it.
    fn host_path(&self, fd: &OwnedFd) -> Result<Vec<u8>> {
        let name = sys::cstr(&sys::fd_name(fd.as_raw_fd()))?;
        sys::readlinkat(self.proc_fd.as_fd(), &name)
    }
}

/// `path` below `root` as names (empty for `root` itself); `None` when it
/// is not below it.
fn names_below(root: &[u8], path: &[u8]) -> Option<Vec<Vec<u8>>> {
    let rest = if root == b"/" {
        path.strip_prefix(b"/")?
    } else {
        let r = path.strip_prefix(root)?;
        if r.is_empty() {
            r
        } else {
            r.strip_prefix(b"/")?
        }
    };
    Some(
        rest.split(|&b| b == b'/')
            .filter(|n| !n.is_empty())
            .map(<[u8]>::to_vec)
            .collect(),
    )
}

impl caps::Export for HostFs {
    /// The host handle: its type (4 bytes, little-endian), then its bytes.
    fn file_id(&self, node: NodeId) -> Result<Vec<u8>> {
        let fd = self.fd(node)?;
        let (kind, data) = sys::file_handle(fd.as_fd())?;
        let mut id = Vec::with_capacity(4 + data.len());
        id.extend_from_slice(&kind.to_le_bytes());
        id.extend_from_slice(&data);
        if id.len() > caps::MAX_FILE_ID {
            return Err(Errno::EOVERFLOW);
        }
        Ok(id)
    }

    fn open_id(&self, id: &[u8]) -> Result<Entry> {
        let (kind, data) = id.split_at_checked(4).ok_or(Errno::ESTALE)?;
        let kind = i32::from_le_bytes(kind.try_into().map_err(|_| Errno::ESTALE)?);
        let root = self.fd(NodeId(ROOT))?;
        let m = self.export_fd().ok_or(Errno::ESTALE)?;
        let fd = sys::open_by_handle(m.as_fd(), kind, data, libc::O_PATH).map_err(|e| {
            // A handle the file system no longer knows, or never gave.
            if matches!(e, Errno::ENOENT | Errno::EINVAL | Errno::ELOOP) {
                Errno::ESTALE
            } else {
                e
            }
        })?;
        let (attr, key, born) = sys::identify(fd.as_fd())?;
        if attr.nlink == 0 {
            // Removed: only its holders' descriptors reach it now.
            return Err(Errno::ESTALE);
        }
        if attr.is_dir() {
            let root_path = self.host_path(&root)?;
            names_below(&root_path, &self.host_path(&fd)?).ok_or(Errno::ESTALE)?;
        }
        self.register_as((attr, key, born), Some(fd))
    }

    fn path_of(&self, node: NodeId) -> Result<Vec<Vec<u8>>> {
        let root = self.fd(NodeId(ROOT))?;
        let fd = self.fd(node)?;
        names_below(&self.host_path(&root)?, &self.host_path(&fd)?).ok_or(Errno::ESTALE)
    }
}

#[cfg(test)]
mod tests {
    use super::names_below;

    #[test]
    fn paths_below_the_root_become_names_and_others_are_refused() {
        let v = |s: &[&str]| s.iter().map(|n| n.as_bytes().to_vec()).collect::<Vec<_>>();
        assert_eq!(names_below(b"/srv/x", b"/srv/x/a/b"), Some(v(&["a", "b"])));
        assert_eq!(names_below(b"/srv/x", b"/srv/x"), Some(vec![]));
        assert_eq!(names_below(b"/srv/x", b"/srv/xy/a"), None);
        assert_eq!(names_below(b"/srv/x", b"/srv"), None);
        assert_eq!(names_below(b"/", b"/a"), Some(v(&["a"])));
        assert_eq!(
            names_below(b"/srv/x", b"/srv/x/a (deleted)"),
            Some(v(&["a (deleted)"]))
        );
    }
}

#[cfg(test)]
mod probe_tests {
    use walkfs_fsapi::FileSystem;

    #[test]
    fn a_host_directory_exports_where_handles_open() {
        let dir = tempfile::tempdir().expect("tmp");
        let fs = crate::HostFs::new(dir.path()).expect("hostfs");
        let root = fs.root();
        let ex = fs.export().expect("export");
        std::fs::create_dir(dir.path().join("a")).expect("mkdir");
        let e = fs.lookup(root, b"a").expect("a");
        let id = ex.file_id(e.node).expect("id");
        let again = ex.open_id(&id).expect("open");
        assert_eq!(again.node, e.node);
        assert_eq!(ex.path_of(e.node).expect("path"), vec![b"a".to_vec()]);
    }
}
