//! `walkfs mount`: a [`Vfs`] as a FUSE file system.
//!
//! The kernel's own caches are told as much as the cache mode allows, so
//! that warm lookups never leave the kernel:
//! - `cache=loose`: long entry and attribute timeouts, negative entries
//!   (a lookup that fails is answered with node id 0 and an entry timeout
//!   of `negtimeout`), symlink bodies cached by the kernel
//!   (`FUSE_CACHE_SYMLINKS`), page cache kept across opens
//!   (`FOPEN_KEEP_CACHE`), readdirplus.
//! - `cache=none`: zero timeouts; every lookup and stat reaches the vfs,
//!   which asks the server.
//!
//! Nodes: each FUSE node id stands for a file the kernel holds (its lookup
//! count decides when it goes, at `forget`), and holds a vfs [`Handle`]:
//! a counted reference to the file's dentry, from which every request on
//! the node starts. The front end keeps no names, attributes or parents
//! of its own: a handle follows its file through renames and answers for
//! it after an unlink, as the kernel's dentry does. What the kernel holds
//! stays pinned in the vfs's dentry cache, so the nodes the kernel may
//! keep are bounded by `max_dentries`. Two names of one inode (hard
//! links) share a node, as the kernel expects.
//!
//! Requests act with the caller's credentials (uid, gid from the request,
//! supplementary groups from the user database), so permission checks and
//! the owners of new files are the caller's.

mod bare;
mod coherent;
mod export;
mod fds;
mod fileattr;
mod listings;
mod locks;
mod nodes;

pub(crate) use nodes::{Node, NodeIo, Nodes};
pub mod mount;
mod ops;
pub mod options;
pub mod passthrough;
mod replay;
mod stats;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::RwLock;
use walkfs_fusewire::abi::{self, fopen};
use walkfs_fusewire::{Request, TimeArg};
use walkfs_vfs::{Creds, Ctx, Errno, Handle, OpenFile, Statx, TimeSet, Timespec, Vfs};

pub use options::MountOptions;
pub use stats::{
    FuseCounters, MountStats, Op, OP_NAMES, SETTLE_IOCTL, STATS_IOCTL, STATS_MAX, SYNC_IOCTL,
};
pub use walkfs_vfs::CachePolicy;

/// FUSE's node id of the root.
pub(crate) const ROOT: u64 = 1;

/// A caller: uid, gid, supplementary groups (sorted).
type Identity = (u32, u32, Vec<u32>);

/// Kernel timeouts once `cache=coherent` cannot see every change.
const DEGRADED_TTL: Duration = Duration::from_secs(1);

/// The file system the FUSE session serves (inside the replay's layer,
/// replay.rs, where other writers' changes are replayed to watchers).
pub struct WalkFuse {
    vfs: Vfs,
    /// Root credentials: what the front end does on its own behalf (the
    /// nodes' own open files, attributes for the kernel, invalidations).
    base: Arc<Ctx>,
    ctxs: RwLock<HashMap<Identity, Arc<Ctx>>>,
    nodes: Arc<RwLock<Nodes>>,
    /// What the kernel was handed, for invalidations (cache=coherent).
    kc: Arc<coherent::KernelCache>,
    next_id: AtomicU64,
    /// Directory listings being read (listings.rs).
    listings: listings::Listings,
    /// When READDIRPLUS lists names without attributes (bare.rs).
    bare: bare::BarePolicy,
    /// Backing files handed to the kernel (passthrough.rs).
    pt: Arc<passthrough::Backings>,
    /// The kernel caches writes (FUSE_WRITEBACK_CACHE agreed at INIT).
    wb_cache: std::sync::atomic::AtomicBool,
    /// The root (never forgotten).
    root: Handle,
    /// The open files the kernel holds handles of.
    handles: fds::Handles,
    opts: MountOptions,
    /// Changes run behind their callers in the vfs (errors come at
    /// flush and fsync).
    writes_behind: bool,
    pub counters: Arc<FuseCounters>,
    /// File locks served (the backend takes them where every party sees
    /// them: INIT's POSIX_LOCKS and FLOCK_LOCKS), and their bookkeeping
    /// (locks.rs).
    serves_locks: bool,
    interrupts: locks::Interrupts,
    /// Files are found again by file handle (INIT's EXPORT_SUPPORT), and
    /// the ids of the nodes forgotten (export.rs).
    exports: std::sync::atomic::AtomicBool,
    tombs: parking_lot::Mutex<export::Tombs>,
}

/// Split a timeout into the wire's seconds and nanoseconds.
fn ttl(d: Duration) -> (u64, u32) {
    (d.as_secs(), d.subsec_nanos())
}

/// The attributes the kernel is given for node `id`, whose file's are
/// `x` (the node id is also what stat reports as st_ino).
fn attr_of(id: u64, x: &Statx) -> abi::Attr {
    abi::Attr {
        ino: id,
        size: x.stx_size,
        blocks: x.stx_blocks,
        atime: x.stx_atime.tv_sec as u64,
        mtime: x.stx_mtime.tv_sec as u64,
        ctime: x.stx_ctime.tv_sec as u64,
        atimensec: x.stx_atime.tv_nsec,
        mtimensec: x.stx_mtime.tv_nsec,
        ctimensec: x.stx_ctime.tv_nsec,
        mode: u32::from(x.stx_mode),
        nlink: x.stx_nlink,
        uid: x.stx_uid,
        gid: x.stx_gid,
        rdev: libc::makedev(x.stx_rdev_major, x.stx_rdev_minor) as u32,
        blksize: x.stx_blksize,
        flags: 0,
    }
}

/// The supplementary groups of process `pid` (the `Groups:` line of its
/// status), sorted; `None` when it is gone.
fn caller_groups(pid: u32) -> Option<Vec<u32>> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = s.lines().find(|l| l.starts_with("Groups:"))?;
    let mut g: Vec<u32> = line["Groups:".len()..]
        .split_whitespace()
        .filter_map(|x| x.parse().ok())
        .collect();
    g.sort_unstable();
    Some(g)
}

/// The attributes of what `h` refers to.
fn stat_of(ctx: &Ctx, h: &Handle) -> Result<Statx, Errno> {
    ctx.statx(
        h,
        b"",
        libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW,
        libc::STATX_BASIC_STATS,
    )
}

fn key_of(x: &Statx) -> (u64, u64) {
    (
        (u64::from(x.stx_dev_major) << 32) | u64::from(x.stx_dev_minor),
        x.stx_ino,
    )
}

fn time_set(t: Option<TimeArg>) -> Option<TimeSet> {
    t.map(|t| match t {
        TimeArg::Now => TimeSet::Now,
        TimeArg::At { sec, nsec } => TimeSet::At(Timespec { sec, nsec }),
    })
}

impl WalkFuse {
    pub fn new(vfs: Vfs, opts: MountOptions) -> Result<WalkFuse, Errno> {
        // No descriptors: every open file is an object of its own.
        let base = Arc::new(vfs.context_with_fds(Creds::root(), 0));
        let root = base.handle(walkfs_vfs::AT_FDCWD, b"/")?;
        let x = base.statx(&root, b"", libc::AT_EMPTY_PATH, libc::STATX_BASIC_STATS)?;
        let mut nodes = Nodes::default();
        nodes.by_id.insert(
            ROOT,
            Node {
                nlookup: 1,
                key: key_of(&x),
                handle: root.clone(),
                born: 0,
                sent: 0,
                io: (None, None),
                io_used: std::sync::atomic::AtomicBool::new(false),
                backing: passthrough::Backed::No,
                locks: None,
            },
        );
        nodes.keys.insert(key_of(&x), ROOT);
        nodes.root_ino = x.stx_ino;
        nodes.io_cap = opts.io_fds;
        let nodes = Arc::new(RwLock::new(nodes));
        let writes_behind = vfs.writes_behind();
        // Bare listings where a lookup is as cheap as the stat a listing
        // with attributes would make: a backend with no link to cross.
        let keeps = matches!(opts.cache, CachePolicy::Loose | CachePolicy::Coherent);
        let bare = bare::BarePolicy::new(opts.bare_listings && keeps && !vfs.is_remote());
        // Passthrough needs host files under the mount, and the right to
        // register them with the kernel.
        let pt = Arc::new(passthrough::Backings::new(
            vfs.has_host_files() && keeps && opts.passthrough && passthrough::permitted(),
            Arc::clone(&nodes),
        ));
        let kc = Arc::new(coherent::KernelCache::new(nodes.clone(), Arc::clone(&base)));
        // Locks are served where another party could hold them (the
        // host's programs, a server's other clients); over memory the
        // kernel's own locks are the same and cost no round trip.
        let serves_locks = vfs.has_locks() && (vfs.has_host_files() || vfs.is_remote());
        Ok(WalkFuse {
            serves_locks,
            interrupts: locks::Interrupts::default(),
            exports: std::sync::atomic::AtomicBool::new(false),
            tombs: parking_lot::Mutex::new(export::Tombs::default()),
            root,
            handles: fds::Handles::default(),
            vfs,
            base,
            ctxs: RwLock::new(HashMap::new()),
            kc,
            nodes,
            next_id: AtomicU64::new(1 << 62),
            listings: listings::Listings::default(),
            bare,
            pt,
            wb_cache: std::sync::atomic::AtomicBool::new(false),
            opts,
            writes_behind,
            counters: Arc::new(FuseCounters::default()),
        })
    }

    pub fn vfs(&self) -> &Vfs {
        &self.vfs
    }

    /// Start telling the kernel what changed behind its back (with
    /// `cache=coherent`) and which attributes settled, through the
    /// notifier the caller sets on what this returns once the session
    /// exists.
    pub(crate) fn kernel_cache(&self) -> Option<Arc<coherent::KernelCache>> {
        // Attributes the vfs replaced with its backend's (writeback's
        // settling): the kernel's copy goes too, whatever the cache mode.
        let kc = Arc::clone(&self.kc);
        self.vfs
            .on_settled(Arc::new(move |_sb, ino| kc.attrs_settled(ino)));
        if self.opts.cache != CachePolicy::Coherent {
            return Some(self.kc.clone());
        }
        // Before a replay's listener (replay::Replaying::new): a replay
        // must find the kernel's caches invalidated.
        self.vfs.add_change_listener(self.kc.clone());
        Some(self.kc.clone())
    }

    /// Changes may go unseen (the backend cannot report them all): the
    /// kernel must ask again soon.
    fn degraded(&self) -> bool {
        self.opts.cache == CachePolicy::Coherent && !self.vfs.is_coherent()
    }

    fn attr_ttl(&self) -> Duration {
        if self.degraded() {
            return self.opts.attr_ttl.min(DEGRADED_TTL);
        }
        self.opts.attr_ttl
    }

    fn entry_ttl(&self) -> Duration {
        if self.degraded() {
            return self.opts.entry_ttl.min(DEGRADED_TTL);
        }
        self.opts.entry_ttl
    }

    /// The context acting as the caller of `req`: its uid, its gid (the
    /// caller's fsgid), and — for anyone but root — its supplementary
    /// groups, which FUSE does not pass: read from /proc like libfuse's
    /// `fuse_getgroups`, so a group's permission is the caller's own.
    fn ctx(&self, req: &Request) -> Arc<Ctx> {
        let (uid, gid) = (req.uid, req.gid);
        let groups = if uid == 0 {
            Vec::new()
        } else {
            caller_groups(req.pid).unwrap_or_else(|| {
                walkfs_source::creds_for(uid, b"").map_or_else(Vec::new, |c| c.groups)
            })
        };
        let key = (uid, gid, groups);
        if let Some(c) = self.ctxs.read().get(&key) {
            return Arc::clone(c);
        }
        let creds = Creds {
            uid,
            gid,
            groups: key.2.clone(),
            privileged: false,
        };
        let c = Arc::new(self.base.with_creds(creds));
        let mut m = self.ctxs.write();
        // Many callers, few distinct identities; bound it anyway.
        if m.len() > 4096 {
            m.clear();
        }
        m.insert(key, Arc::clone(&c));
        c
    }

    /// The handle of node `ino`, held by the caller as long as it needs
    /// it (the kernel may forget the node meanwhile).
    fn node(&self, ino: u64) -> Result<Handle, Errno> {
        if ino == ROOT {
            return Ok(self.root.clone());
        }
        let nodes = self.nodes.read();
        let n = nodes.by_id.get(&ino).ok_or(Errno::ESTALE)?;
        Ok(n.handle.clone())
    }

    /// A node for the file `h` refers to, whose attributes are `x`: an
    /// existing node of the same inode gets one more lookup, and starts
    /// from `h` from now on (the name it was found by last).
    fn remember(&self, h: Handle, x: &Statx) -> u64 {
        self.remember_as(h, x, None)
    }

    /// [`remember`](Self::remember), where a node made anew takes node
    /// id and generation `want` when that id is free (a file found again
    /// by its file id keeps the node id and generation the kernel's file
    /// handle holds: export.rs).
    fn remember_as(&self, h: Handle, x: &Statx, want: Option<(u64, u32)>) -> u64 {
        let key = key_of(x);
        let born = walkfs_vfs::generation_of(x.born());
        let mut nodes = self.nodes.write();
        if let Some(id) = nodes.find(key) {
            if let Some(n) = nodes.by_id.get_mut(&id) {
                n.nlookup += 1;
                if n.born != 0 && born != 0 && n.born != born && id != ROOT {
                    // The host gave a deleted file's inode number to a
                    // new file. The node id goes to the new file with a
                    // new generation: the kernel then takes its inode of
                    // the old file for stale (fuse_iget) and never shows
                    // that one's cached pages or attributes as the new
                    // file's. The lookup count is the sum of both (the
                    // kernel forgets each inode under the one node id).
                    tracing::debug!(
                        "node {id}: another file of inode {} (generation {:#x}, was {:#x})",
                        key.1,
                        born,
                        n.born
                    );
                    n.born = born;
                    n.sent = if born == n.sent {
                        born.wrapping_add(1).max(1)
                    } else {
                        born
                    };
                    let old = std::mem::replace(&mut n.handle, h);
                    // Its own open files are the old file's.
                    let io = nodes.take_io(id);
                    drop(nodes);
                    drop((old, io));
                    return id;
                }
                if n.born == 0 {
                    n.born = born;
                }
                if id != ROOT && !n.handle.same(&h) {
                    // The old handle is dropped after the lock (below).
                    let old = std::mem::replace(&mut n.handle, h);
                    drop(nodes);
                    drop(old);
                }
                return id;
            }
        }
        // The node id is what stat reports as st_ino (the protocol carries
        // one number for both), so it is the backend's inode number when
        // that is free; a clash (two file systems under one vfs) takes a
        // number from a range no file system of ours hands out.
        let (id, sent) = match want {
            Some((id, sent)) if id > ROOT && !nodes.by_id.contains_key(&id) => (id, sent),
            _ if x.stx_ino > ROOT && !nodes.by_id.contains_key(&x.stx_ino) => (x.stx_ino, born),
            _ => (self.next_id.fetch_add(1, Relaxed), born),
        };
        nodes.by_id.insert(
            id,
            Node {
                nlookup: 1,
                key,
                handle: h,
                born,
                sent,
                io: (None, None),
                io_used: std::sync::atomic::AtomicBool::new(false),
                backing: passthrough::Backed::No,
                locks: None,
            },
        );
        nodes.keys.insert(key, id);
        id
    }

    /// Look `name` up in directory `parent`: a new lookup count on its
    /// node and its attributes.
    fn lookup_node(&self, ctx: &Ctx, parent: u64, name: &[u8]) -> Result<abi::Attr, Errno> {
        let dir = self.node(parent)?;
        let mut steps = Vec::with_capacity(1);
        let h = ctx
            .walk_handle(&dir, &[name], &mut steps)?
            .ok_or(Errno::ENOENT)?;
        let x = stat_of(ctx, &h)?;
        self.enter(ctx, h, &x)
    }

    /// What a make call made, as the kernel's new entry: a lookup count
    /// on its node and its attributes, with no second walk of its name.
    fn made(&self, ctx: &Ctx, m: walkfs_vfs::Made) -> Result<abi::Attr, Errno> {
        self.enter(ctx, m.handle, &m.stat)
    }

    /// Node `h` with attributes `x`, entered for the kernel: a new
    /// lookup count on its node, and its attributes.
    fn enter(&self, ctx: &Ctx, h: Handle, x: &Statx) -> Result<abi::Attr, Errno> {
        self.enter_as(ctx, h, x, None)
    }

    /// [`enter`](Self::enter) with [`remember_as`](Self::remember_as)'s
    /// `want`.
    fn enter_as(
        &self,
        ctx: &Ctx,
        h: Handle,
        x: &Statx,
        want: Option<(u64, u32)>,
    ) -> Result<abi::Attr, Errno> {
        let x = *x;
        if self.pt.held() == 0 {
            return Ok(attr_of(self.remember_as(h, &x, want), &x));
        }
        let id = self.remember_as(h.clone(), &x, want);
        if self.pt.backed(id) {
            // Written by the kernel straight to the host file.
            ctx.changed_outside(&h)?;
            return Ok(attr_of(id, &stat_of(ctx, &h)?));
        }
        Ok(attr_of(id, &x))
    }

    fn attr(&self, ino: u64) -> Result<abi::Attr, Errno> {
        let h = self.node(ino)?;
        if self.pt.backed(ino) {
            // Written by the kernel straight to the host file.
            self.base.changed_outside(&h)?;
        }
        Ok(attr_of(ino, &stat_of(&self.base, &h)?))
    }

    /// Is a chmod to `mode` by a caller who does not own the file the
    /// kernel's own `file_remove_privs`? Without FUSE_HANDLE_KILLPRIV the
    /// kernel clears set-user-id and set-group-id before a write or
    /// truncate by sending SETATTR as the writer (it skips the ownership
    /// check itself, ATTR_FORCE, which FUSE cannot pass on). Such a
    /// change only clears set-id bits, and the caller may write the file
    /// (so a write would clear them anyway): it is made with the daemon's
    /// own credentials.
    fn only_kills_privs(&self, ctx: &Ctx, fd: &Handle, mode: u32) -> Result<bool, Errno> {
        let old = stat_of(&self.base, fd)?;
        let (old_mode, new_mode) = (u32::from(old.stx_mode) & 0o7777, mode & 0o7777);
        let cleared = old_mode & !new_mode;
        Ok(old.stx_uid != ctx.creds().uid
            && !ctx.creds().is_root()
            && new_mode & !old_mode == 0
            && cleared != 0
            && cleared & !(libc::S_ISUID | libc::S_ISGID) == 0
            && u32::from(old.stx_mode) & libc::S_IFMT == libc::S_IFREG
            && ctx
                .faccessat(fd, b"", libc::W_OK, libc::AT_EMPTY_PATH)
                .is_ok())
    }

    /// The GETATTR/SETATTR reply of attributes `a`, kept for the
    /// attribute timeout.
    /// How long the kernel may keep node `ino`'s attributes: not at all
    /// while it writes the host file itself (passthrough): a write
    /// through a shared mapping moves the host file's times and nothing
    /// tells the kernel's inode, so each stat asks.
    fn attr_ttl_of(&self, ino: u64) -> Duration {
        if self.pt.backed(ino) {
            Duration::ZERO
        } else {
            self.attr_ttl()
        }
    }

    fn attr_out(&self, a: abi::Attr) -> abi::AttrOut {
        let (attr_valid, attr_valid_nsec) = ttl(self.attr_ttl_of(a.ino));
        abi::AttrOut {
            attr_valid,
            attr_valid_nsec,
            dummy: 0,
            attr: a,
        }
    }

    /// The entry the kernel is given for a node with attributes `a`.
    fn entry_out(&self, a: abi::Attr) -> abi::EntryOut {
        let (entry_valid, entry_valid_nsec) = ttl(self.entry_ttl());
        let (attr_valid, attr_valid_nsec) = ttl(self.attr_ttl_of(a.ino));
        let generation = self
            .nodes
            .read()
            .by_id
            .get(&a.ino)
            .map_or(0, |n| u64::from(n.sent));
        abi::EntryOut {
            nodeid: a.ino,
            generation,
            entry_valid,
            attr_valid,
            entry_valid_nsec,
            attr_valid_nsec,
            attr: a,
        }
    }

    /// Check a name the kernel passed: one component, never `.`/`..`.
    fn name(n: &[u8]) -> Result<&[u8], Errno> {
        if n.is_empty() || n == b"." || n == b".." || n.contains(&b'/') {
            return Err(Errno::EINVAL);
        }
        Ok(n)
    }

    /// Counters of the mount, the vfs and the 9P client under it.
    pub fn stats(&self) -> MountStats {
        let nodes = self.nodes.read().by_id.len() as u64;
        let resources = vec![
            ("nodes".to_string(), nodes),
            ("io_fds".to_string(), self.nodes.read().io_held as u64),
            ("io_fds_max".to_string(), self.opts.io_fds as u64),
            ("open_handles".to_string(), self.handles.len() as u64),
            (
                "listing_with_attrs".to_string(),
                u64::from(self.bare.attrs_mode()),
            ),
            ("passthrough".to_string(), u64::from(self.pt.on())),
            ("backing_files".to_string(), self.pt.held() as u64),
            ("settle_asked".to_string(), self.vfs.settle_stats().0),
            ("settled".to_string(), self.vfs.settle_stats().1),
        ];
        MountStats::collect(&self.counters, &self.vfs, &self.opts, resources)
    }

    /// The flags to open a file with on the vfs for the kernel's `flags`.
    /// O_CREAT/O_EXCL/O_TRUNC arrive as calls of their own. With
    /// write-back caching the kernel keeps the file size and appends at
    /// it itself, and may read pages of a file opened write-only to fill
    /// them: O_APPEND goes, and write-only becomes read-write (as
    /// libfuse's passthrough example does).
    fn open_flags(&self, flags: i32) -> i32 {
        let mut f = flags & !(libc::O_CREAT | libc::O_EXCL | libc::O_NOCTTY | libc::O_TRUNC);
        if self.writeback() {
            f &= !libc::O_APPEND;
            if f & libc::O_ACCMODE == libc::O_WRONLY {
                f = (f & !libc::O_ACCMODE) | libc::O_RDWR;
            }
        }
        f
    }

    /// Zero-message opens: in cache=loose with the kernel checking
    /// permissions, `open` answers ENOSYS once and the kernel stops
    /// sending opens and releases for files (its page cache kept), so an
    /// open(2) of a cached file costs nothing here. Reads and writes then
    /// come without a handle and use the node's own open file.
    fn no_open(&self) -> bool {
        // Not where locks are served: without OPEN the kernel sends no
        // RELEASE either, and a file's flock and OFD locks would outlive
        // it (locks.rs).
        self.keeps() && self.opts.default_permissions && !self.pt.on() && !self.serves_locks
    }

    /// The kernel keeps what it learned (pages, symlinks, listings, write-
    /// back): `cache=loose`, and `cache=coherent`, which also tells it
    /// what changed.
    fn keeps(&self) -> bool {
        matches!(self.opts.cache, CachePolicy::Loose | CachePolicy::Coherent)
    }

    /// The open file for I/O on `ino` with handle `fh`: the handle's
    /// own, or for handle 0 the node's shared open file, read-write when
    /// `write` (or when the file allows it, so one file serves both),
    /// else read-only.
    fn io_file(&self, ino: u64, fh: u64, write: bool) -> Result<OpenFile, Errno> {
        if fh != 0 {
            return self.handles.get(fh).ok_or(Errno::EBADF);
        }
        let (ro, rw) = self.nodes.read().io(ino);
        if let Some(f) = rw {
            return Ok(f);
        }
        if !write {
            if let Some(f) = ro {
                return Ok(f);
            }
        }
        let node = self.node(ino)?;
        let (ro, rw) = if write {
            (ro, Some(self.base.reopen_file(&node, libc::O_RDWR)?))
        } else {
            // Read-only: the vfs opens it on the backend with its first
            // read, in one call (over 9P one round trip for both).
            (Some(self.base.reopen_file(&node, libc::O_RDONLY)?), rw)
        };
        let f = rw.clone().or_else(|| ro.clone()).ok_or(Errno::EBADF)?;
        // Two threads may both open one: the later replaces the earlier,
        // which closes once its user is done.
        self.set_io(ino, (ro, rw));
        Ok(f)
    }

    /// Give node `ino` its own open files (see `Nodes::set_io`).
    fn set_io(&self, ino: u64, io: NodeIo) {
        let mut out = Vec::new();
        self.nodes.write().set_io(ino, io, &mut out);
        drop(out);
    }

    /// Write-back caching, as agreed at INIT: only in `cache=loose`, and
    /// not with passthrough (the kernel refuses both). With it the kernel
    /// owns a file's size and times and never takes them from us again,
    /// so a size changed on the host could not be shown: `cache=coherent`
    /// writes through.
    fn writeback(&self) -> bool {
        self.wb_cache.load(Relaxed)
    }

    /// The open flags of an open of node `ino` not in passthrough.
    fn fopen_flags(&self, ino: u64) -> u32 {
        let keep = if self.keeps() { fopen::KEEP_CACHE } else { 0 };
        keep | self.noflush(ino)
    }

    /// `FOPEN_NOFLUSH` unless a close of this open file may have record
    /// locks to drop (locks.rs), or FLUSH carries the file's changes.
    fn noflush(&self, ino: u64) -> u32 {
        let flush_does_nothing = !self.writes_behind || self.writeback();
        if self.serves_locks && flush_does_nothing && !self.ever_locked(ino) {
            fopen::NOFLUSH
        } else {
            0
        }
    }

    /// The kernel dropped `nlookup` references to node `ino`.
    fn forget_node(&self, ino: u64, nlookup: u64) {
        if ino == ROOT {
            return;
        }
        let mut nodes = self.nodes.write();
        let gone = match nodes.by_id.get_mut(&ino) {
            Some(n) => {
                n.nlookup = n.nlookup.saturating_sub(nlookup);
                n.nlookup == 0
            }
            None => false,
        };
        if gone {
            let _ = nodes.take_io(ino); // counted out; dropped with `n`
            if let Some(n) = nodes.by_id.remove(&ino) {
                nodes.keys.remove(n.key, ino);
                drop(nodes);
                self.bury(ino, &n);
                if self.pt.forgotten(n.backing) {
                    // The vfs's copy of its attributes predates the
                    // kernel's writes to the host file.
                    let _ = self.base.changed_outside(&n.handle);
                }
                // The handle goes after the lock; the open files once no
                // request uses them any more.
                drop(n);
            }
        }
    }

    /// The entries of directory `ino`, `.` and `..` first; with
    /// `names_only`, names, types and inode numbers are all the caller
    /// uses (a plain READDIR, or a bare READDIRPLUS).
    fn list(
        &self,
        ctx: &Arc<Ctx>,
        ino: u64,
        names_only: bool,
    ) -> Result<Vec<walkfs_vfs::DirEntryOut>, Errno> {
        let d = ctx.reopen_file(&self.node(ino)?, libc::O_RDONLY | libc::O_DIRECTORY)?;
        if names_only {
            d.getdents_names()
        } else {
            d.getdents()
        }
    }

    /// Where a READDIR(PLUS) of `ino` at `offset` starts: in its
    /// handle's listing, or without a handle in the listing its offset
    /// names (a fresh one at offset 0, listed by name only when
    /// `names_only`).
    fn dir_slice(
        &self,
        req: &Request,
        ino: u64,
        fh: u64,
        offset: u64,
        names_only: bool,
    ) -> Result<listings::Slice, Errno> {
        if fh != 0 {
            let id = u32::try_from(fh).map_err(|_| Errno::EBADF)?;
            return self.listings.of_handle(id, ino, offset).ok_or(Errno::EBADF);
        }
        let gen = self.vfs.names_generation();
        self.listings.continue_at(ino, offset, gen, || {
            self.list(&self.ctx(req), ino, names_only)
        })
    }
}
