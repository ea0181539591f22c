//! Capabilities: what only some backends can do, each an extension trait
//! a [`FileSystem`] hands out through an accessor (`ordered()`,
//! `listings()`, ...), `None` when it lacks it. The core trait stays what
//! every backend answers; the vfs asks for a capability where it would
//! use one, and does without it otherwise (gVisor's optional `*Impl`
//! interfaces, Linux's operation tables with NULL entries).
//!
//! | capability | memfs | hostfs | 9P client |
//! |---|---|---|---|
//! | [`Ordered`] | – | while the vfs writes back | yes |
//! | [`Listings`] | – | attributes | attributes, ahead, complete |
//! | [`HostFiles`] | – | yes | – |
//! | [`Watch`] | – | fanotify | the server's reports |
//! | [`Remote`] | – | – | RPCs, fids, open+read in one |
//! | [`Locks`] | – (the vfs keeps them) | on the host file | at the server |
//! | [`Xattrs`] | kept in memory | the host file's | the server's (`Txattrwalk`) |
//! | [`Space`] | zeroes kept | the host file system's | the server's (extension) |

use std::os::fd::OwnedFd;
use std::sync::Arc;

use crate::{
    open_then_read, run_inline, AttrThen, ChangeSink, Deferred, DirPlus, Done, FidStats,
    FileHandle, FileLock, FileSystem, Granted, ListAhead, LockOwner, Make, NodeId, OpenFlags,
    Owner, Result, RpcStats,
};

/// Changes carried out behind their callers, in order: submitted changes
/// run in the order they were submitted, and before anything the backend
/// is asked after `submit` returned (a 9P server that promises order:
/// docs/9p-ordering.md). So the vfs never waits before a later call.
/// A backend without it carries every change out before its call
/// returns, and running behind the caller would buy nothing (a local
/// disk, memory).
#[allow(unused_variables)]
pub trait Ordered: Send + Sync {
    /// Start `op` and report its outcome to `done`, exactly once, maybe
    /// after returning. `Err` when the change could not even be started
    /// (the connection is gone): then `done` is never called. The vfs has
    /// decided the change's result from its cache and checked the
    /// permission; a failure reported to `done` is a refusal the cache
    /// could not foresee (another client, a full disk).
    fn submit(&self, op: Deferred<'_>, done: Done) -> Result<()>;

    /// An identity for a node `owner` is about to make behind the caller
    /// ([`make_behind`](Ordered::make_behind)): from numbers the
    /// backend's server granted ahead, so the node's number is final
    /// before the server has made it. `None` when the backend cannot
    /// (no grants; a node for `owner` would not be theirs on the
    /// server): then the vfs makes nodes with the ordinary methods.
    fn grant(&self, owner: Owner) -> Option<Granted> {
        None
    }

    /// Make `what` as `name` in `parent` for `owner`, as the node
    /// `node` (from [`grant`](Ordered::grant)), behind the caller: the
    /// node exists for every later call (the backend carries it out
    /// first), its outcome goes to `done`, and a file comes back with its
    /// open handle. `Err` when it could not even be started (then `done`
    /// is never called).
    fn make_behind(
        &self,
        parent: NodeId,
        name: &[u8],
        owner: Owner,
        node: Granted,
        what: Make<'_>,
        done: Done,
    ) -> Result<Option<FileHandle>> {
        Err(crate::Errno::ENOSYS)
    }

    /// Ask for `node`'s attributes behind the caller: `then` gets them.
    /// `false` when the backend cannot without waiting itself (a remote
    /// handle it would first have to walk to): then `then` is dropped
    /// uncalled. The vfs gives its cache the server's attributes this way
    /// once the changes it ran behind have landed.
    fn getattr_behind(&self, node: NodeId, then: AttrThen) -> bool {
        false
    }

    /// Does the backend hold a lease covering `node`: a file it made
    /// under a directory's lease (its server recalls the lease before
    /// anyone else opens the file, so a close need not wait for the
    /// file's changes), or a directory leased (this client is the one
    /// making its names)?
    fn leased(&self, node: NodeId) -> bool {
        false
    }
}

/// Listings with attributes.
#[allow(unused_variables)]
pub trait Listings: Send + Sync {
    /// Every entry of a directory with its attributes, each counted as a
    /// lookup, in one go (a remote backend: one round trip rather than
    /// one per name). `None` when this directory cannot be listed that
    /// way (then [`FileSystem::readdir`]).
    fn readdir_plus(&self, node: NodeId) -> Option<Result<Vec<DirPlus>>>;

    /// Ask for `node`'s [`readdir_plus`](Listings::readdir_plus) listing
    /// without waiting for it (the vfs's directory read-ahead). `None`
    /// when the backend cannot (then the vfs lists when it needs to):
    /// asking ahead pays only where the answer travels (a remote server
    /// that keeps a connection's order, so the listing reflects every
    /// change submitted before it).
    fn list_ahead(&self, node: NodeId) -> Option<Box<dyn ListAhead>> {
        None
    }

    /// Does [`list_ahead`](Listings::list_ahead) answer, for a backend
    /// without [`Ordered`]? Such a backend carries every change out before
    /// its call returns, so a listing asked after a change returned
    /// reflects it, which is the order the vfs's read-ahead relies on. A
    /// backend with `Ordered` need not say (its order is the promise).
    fn lists_ahead(&self) -> bool {
        false
    }

    /// May a listing stand for every name of the directory until a change
    /// is reported (a miss then lists a small directory, and a name the
    /// listing lacks is denied without asking)? Yes for a share whose
    /// other writers are other clients (the caller's negative-entry
    /// policy covers them); no for a local directory, which any program
    /// on the host changes without telling anyone.
    fn complete(&self) -> bool {
        false
    }
}

/// Host files under the nodes: a kernel can do a file's I/O itself
/// (FUSE passthrough), and a lookup costs what a listing's stat would.
pub trait HostFiles: Send + Sync {
    /// The host file behind open handle `fh`.
    fn host_file(&self, node: NodeId, fh: FileHandle) -> Option<Arc<OwnedFd>>;

    /// The backend's own descriptor for `node` (a host directory's
    /// `O_PATH` descriptor), where it keeps one.
    fn node_fd(&self, node: NodeId) -> Option<Arc<OwnedFd>> {
        let _ = node;
        None
    }
}

/// Reports of changes made behind the file system's back.
pub trait Watch: Send + Sync {
    /// Get ready to report changes to `sink` (one sink per file system: a
    /// second call replaces it): open what watching needs, while the
    /// process may still be privileged. Changes made from now on are
    /// reported once [`start`](Watch::start) is called.
    fn watch_changes(&self, sink: Arc<dyn ChangeSink>) -> Result<()>;

    /// Start reporting (on a thread of the backend's own). Separate from
    /// [`watch_changes`](Watch::watch_changes) so that a process can
    /// confine itself in between: a thread started before would escape
    /// the confinement (capabilities and mount namespaces are per thread).
    fn start(&self) -> Result<()> {
        Ok(())
    }

    /// Return once every change that happened before the call and is
    /// reported at all has been reported to the sink (and the sink's
    /// `changed` has returned): what a lock grant waits for, so that the
    /// holder sees what the previous holder changed. Without a queue of
    /// its own to drain, nothing to do.
    fn barrier(&self) {}
}

/// A server at the other end of a link: calls travel, so the backend
/// counts its messages and the handles it keeps there, and combines calls
/// a caller would otherwise wait for one by one.
#[allow(unused_variables)]
pub trait Remote: Send + Sync {
    /// Open `node` (a regular file) and read from `off` into `buf`: the
    /// first read of a file the vfs opened lazily, in one round trip.
    /// `None`: the backend does it as open, then read.
    fn open_read(
        &self,
        node: NodeId,
        flags: OpenFlags,
        off: u64,
        buf: &mut [u8],
    ) -> Option<Result<(FileHandle, usize)>> {
        None
    }

    /// Counters of the messages sent.
    fn rpc_stats(&self) -> RpcStats;

    /// Use of the remote handles kept for cached nodes (`None` when the
    /// backend keeps none).
    fn fid_stats(&self) -> Option<FidStats> {
        None
    }

    /// Zero the counters [`rpc_stats`](Remote::rpc_stats) reports.
    fn reset_stats(&self);
}

/// The capabilities' calls with their fallbacks, for callers holding any
/// file system.
impl dyn FileSystem + '_ {
    /// [`Ordered::submit`] where the backend runs changes behind, else
    /// the change carried out now ([`run_inline`]).
    pub fn submit(&self, op: Deferred<'_>, done: Done) -> Result<()> {
        match self.ordered() {
            Some(o) => o.submit(op, done),
            None => {
                run_inline(self, op, done);
                Ok(())
            }
        }
    }

    /// [`Remote::open_read`] where the backend has it, else open, then
    /// read.
    pub fn open_read(
        &self,
        node: NodeId,
        flags: OpenFlags,
        off: u64,
        buf: &mut [u8],
    ) -> Result<(FileHandle, usize)> {
        if let Some(r) = self
            .remote()
            .and_then(|o| o.open_read(node, flags, off, buf))
        {
            return r;
        }
        open_then_read(self, node, flags, off, buf)
    }

    /// Does a lease of the backend's cover `node` ([`Ordered::leased`])?
    pub fn leased(&self, node: NodeId) -> bool {
        self.ordered().is_some_and(|o| o.leased(node))
    }

    /// [`Listings::complete`]: false for a backend without listings.
    pub fn listings_complete(&self) -> bool {
        self.listings().is_some_and(|l| l.complete())
    }
}

/// File locks taken where every party to the file sees them (a host
/// directory: on the host file; a 9P client: at its server), so the
/// host's programs, this vfs's callers and other clients exclude each
/// other. No call waits for a lock: a conflict is `EAGAIN` (the vfs
/// retries a blocking request; docs/locks.md).
pub trait Locks: Send + Sync {
    /// Take, convert or drop (`LockKind::Unlock`) `lock` on `node` for
    /// `owner`, through open handle `fh` (a lock taken through a handle
    /// goes when the handle is released, at the latest).
    fn setlk(&self, node: NodeId, fh: FileHandle, owner: LockOwner, lock: &FileLock) -> Result<()>;

    /// The first lock held by another owner, anywhere, that `lock` would
    /// conflict with; `None` when it could be taken now.
    fn getlk(
        &self,
        node: NodeId,
        fh: FileHandle,
        owner: LockOwner,
        lock: &FileLock,
    ) -> Result<Option<FileLock>>;

    /// `owner` closed a descriptor of `node`: its POSIX locks there go
    /// (its `flock` locks stay with their open file).
    fn unlock_owner(&self, node: NodeId, fh: FileHandle, owner: LockOwner);
}

/// Extended attributes, stored where the file lives (POSIX ACLs are the
/// `system.posix_acl_access` and `system.posix_acl_default` attributes,
/// in the kernel's binary form: crate::acl). The vfs has checked the
/// caller's permission and the name's namespace before it calls; a
/// backend stores and returns bytes. A backend that keeps ACLs itself
/// (memfs) also does what a file system does with them: a set access
/// ACL moves the mode, a chmod moves the ACL, a new node inherits its
/// directory's default ACL.
pub trait Xattrs: Send + Sync {
    /// The value of `name`; `ENODATA` when it has none.
    fn getxattr(&self, node: NodeId, name: &[u8]) -> Result<Vec<u8>>;

    /// Every name `node` has, each followed by a NUL.
    fn listxattr(&self, node: NodeId) -> Result<Vec<u8>>;

    /// Set `name` to `value`; `flags` is `XATTR_CREATE` (`EEXIST` when it
    /// has one), `XATTR_REPLACE` (`ENODATA` when it has none) or 0.
    fn setxattr(&self, node: NodeId, name: &[u8], value: &[u8], flags: i32) -> Result<()>;

    /// Remove `name`; `ENODATA` when it has none.
    fn removexattr(&self, node: NodeId, name: &[u8]) -> Result<()>;
}

/// The space a file's data takes: `fallocate(2)` in the modes the
/// backend's storage offers, and where data and holes are
/// (`SEEK_DATA`/`SEEK_HOLE`). The vfs has checked the caller, the mode's
/// form and the handle's access before it calls.
pub trait Space: Send + Sync {
    /// `fallocate(fh, mode, off, len)`; a mode the storage lacks is
    /// `EOPNOTSUPP`.
    fn fallocate(&self, node: NodeId, fh: FileHandle, mode: i32, off: u64, len: u64) -> Result<()>;

    /// Where the first data (`SEEK_DATA`) or hole (`SEEK_HOLE`) at or
    /// after `off` starts; `ENXIO` at or past the end.
    fn seek_data(&self, node: NodeId, fh: FileHandle, off: u64, whence: i32) -> Result<u64>;
}

/// The longest file id ([`Export::file_id`]) a backend gives.
pub const MAX_FILE_ID: usize = 64;

/// Files found again by an identity that outlives the vfs's lookup
/// references: what `name_to_handle_at`/`open_by_handle_at` and an NFS
/// re-export need once a file's node was forgotten. The id is the
/// backend's own (a host file handle, a node number with its
/// generation), opaque to the vfs, at most [`MAX_FILE_ID`] bytes.
pub trait Export: Send + Sync {
    /// `node`'s id.
    fn file_id(&self, node: NodeId) -> Result<Vec<u8>>;

    /// The file `id` names, with a lookup reference as [`lookup`]
    /// gives one; `ESTALE` when it is gone (removed, or its number now
    /// another file's), and for an id this backend never gave.
    ///
    /// [`lookup`]: crate::FileSystem::lookup
    fn open_id(&self, id: &[u8]) -> Result<crate::Entry>;

    /// The names from the root to directory `node` (empty for the root),
    /// so that the vfs can connect a directory found by its id to the
    /// tree; `ESTALE` when it is no longer under the root.
    fn path_of(&self, node: NodeId) -> Result<Vec<Vec<u8>>>;
}
