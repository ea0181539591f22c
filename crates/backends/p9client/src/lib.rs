//! A 9P2000.L client as a walkfs backend: the export of a 9P server (walkfs
//! serve, diod, ...) as a [`FileSystem`], so the vfs and its caches sit on
//! top of a remote tree.
//!
//! A node is a file the vfs holds, known by its qid path (so hard links
//! and repeated lookups share one node). Nodes do not pin fids: a bounded
//! set of recently used ones keep theirs and the rest are walked to again
//! by name when needed (see nodes.rs), so a tree of any size costs the
//! server a bounded number of fids per connection. Where a call
//! needs a chain of requests that name the same new fid (walk + getattr,
//! walk + open), the requests go out back to back in one write and cost
//! one round trip; a server must handle a fid's requests in order, as
//! `walkfs serve` does (it resolves fids in arrival order).
//!
//! The crate is split by concern, after Linux's fs/9p: session setup and
//! teardown (session.rs), fid numbers and node pins (fid.rs), chains of
//! requests sent back to back (pipeline.rs), directory listings
//! (listing.rs), changes sent without waiting (submit.rs), inode-number
//! grants and nodes made behind the caller (grant.rs), open and first
//! read in one round trip (read.rs), new files' owners and removals
//! (inode.rs), extended attributes (xattr.rs), 9P <-> fsapi
//! conversions (wire.rs), and the
//! [`FileSystem`] implementation that ties them together (fs.rs).

mod ahead;
mod fid;
mod fs;
mod grant;
mod inode;
mod lease;
mod listing;
mod locks;
mod nodes;
mod notify;
mod pipeline;
mod read;
mod recover;
mod rpc;
mod session;
mod space;
mod submit;
mod wire;
mod xattr;

use nodes::Nodes;

use std::sync::Arc;

use parking_lot::Mutex;
#[cfg(doc)]
use walkfs_fsapi::{caps, FileSystem};
use walkfs_p9::inogrant::Grant;

pub use rpc::{Counters, Stats};
/// The node table's use of fids (`walkfs stats`), as every backend
/// reports it.
pub use walkfs_fsapi::FidStats;

// Named from the crate root by ahead.rs, notify.rs and recover.rs.
pub(crate) use fid::Fids;
pub(crate) use listing::decode_listing;
pub(crate) use session::attach;
pub(crate) use wire::err_of;

/// How to reach and attach.
#[derive(Clone, Debug)]
pub struct Config {
    /// Largest message size to negotiate.
    pub msize: u32,
    /// The user to attach as (`n_uname`).
    pub uid: u32,
    /// The export to attach to (servers that export one tree ignore it).
    pub aname: String,
    /// The secret to show with `Tauth` when the server asks for one.
    pub secret: Option<Vec<u8>>,
    /// Ask the server to report changes (the walkfs extension; see
    /// [`caps::Watch::watch_changes`]).
    pub notify: bool,
    /// Fids kept for cached nodes beyond those in use (open files and
    /// calls in flight hold theirs as long as they need them).
    pub node_fids: usize,
    /// When the connection drops, reconnect (to a restarted server too)
    /// and carry on; programs wait at most this long, then get
    /// `ENOTCONN`. Zero: fail at once. Only for a client that knows how
    /// to dial again ([`P9Fs::connect`]).
    pub reconnect: std::time::Duration,
}

/// Default of [`Config::reconnect`]: long enough for a server to be
/// restarted (an upgrade, a crash and its supervisor), short enough that
/// a server gone for good does not hang programs for long.
pub const DEFAULT_RECONNECT: std::time::Duration = std::time::Duration::from_secs(60);

impl Default for Config {
    fn default() -> Config {
        Config {
            msize: 512 * 1024,
            // SAFETY: geteuid cannot fail.
            uid: unsafe { libc::geteuid() },
            aname: String::new(),
            secret: None,
            notify: false,
            node_fids: DEFAULT_NODE_FIDS,
            reconnect: DEFAULT_RECONNECT,
        }
    }
}

pub(crate) const ROOT_FID: u32 = 0;
/// Default of [`Config::node_fids`]: well under `walkfs serve`'s default
/// per-connection limit (16,384), leaving room for open files.
pub const DEFAULT_NODE_FIDS: usize = 1024;
/// A 9P client mount.
pub struct P9Fs {
    rpc: Arc<rpc::Rpc>,
    nodes: Arc<Mutex<Nodes>>,
    /// The qid path of the root: its node id.
    root_ino: u64,
    /// The server agreed to report changes: its protocol version.
    notify: Option<u64>,
    fids: Arc<Fids>,
    iounit: u32,
    /// The server lists directories with attributes (p9::dirplus); off
    /// for good once it says it cannot.
    dirplus: std::sync::atomic::AtomicBool,
    /// Send dependent requests back to back. Turned off for good the
    /// first time the server shows it does not keep a fid's requests in
    /// order (diod runs them concurrently and answers "invalid fid").
    pipeline: std::sync::atomic::AtomicBool,
    /// Who we attached as: new files are theirs on the server, so one
    /// made for someone else is handed over (when we are root there).
    attach_uid: u32,
    /// The server runs a connection's changes in arrival order
    /// (p9::order): what is submitted may go without waiting
    /// ([`caps::Ordered`]).
    ordered: bool,
    /// The server has answered a `Tunlinkat` (diod 1.0 does not know it,
    /// and an asynchronous one could not fall back).
    unlinkat_ok: std::sync::atomic::AtomicBool,
    /// The same for `Trenameat`.
    renameat_ok: std::sync::atomic::AtomicBool,
    /// The server keeps extended attributes (it listed the root's at
    /// attach): [`caps::Xattrs`] is offered (xattr.rs).
    xattrs: bool,
    /// Inode numbers the server granted and this client has not spent
    /// (p9::inogrant): `next..end`. `None` for a server that grants none
    /// (any but `walkfs serve`, or one that stopped): then every node is
    /// made with a round trip.
    grants: Mutex<Option<(u64, u64)>>,
    /// Leases on directories this client makes files in (lease.rs).
    leases: Arc<lease::Leases>,
    /// Open files, to open again after a reconnect (recover.rs).
    opens: recover::Opens,
    /// The last grants received, with their tickets (recover.rs).
    tickets: Arc<Mutex<Vec<Grant>>>,
    /// Where changes go (set by `watch_changes`): told after a reconnect
    /// that anything may have changed.
    sink: Arc<Mutex<Option<Arc<dyn walkfs_fsapi::ChangeSink>>>>,
    /// The subscription's reading thread's state, for barriers
    /// (notify.rs).
    notifier: Mutex<Option<Arc<notify::Notify>>>,
    /// The locks held at the server, to reclaim after a reconnect
    /// (locks.rs).
    locks_held: Arc<locks::Ledger>,
    /// Reconnects done.
    reconnects: Arc<std::sync::atomic::AtomicU64>,
}
