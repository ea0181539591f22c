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

mod coherent;
mod fds;
mod listings;
pub mod mount;
pub mod options;
mod stats;

use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{
    AccessFlags, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo,
    InitFlags, KernelConfig, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite,
    ReplyXattr, Request, TimeOrNow,
};
use parking_lot::RwLock;
use walkfs_vfs::{Creds, Ctx, Errno, Handle, Statx, TimeSet, Timespec, Vfs};

pub use options::MountOptions;
pub use stats::{FuseCounters, MountStats, Op, OP_NAMES, STATS_IOCTL, STATS_MAX, SYNC_IOCTL};
pub use walkfs_vfs::CachePolicy;

/// Descriptors the mount may hold in the vfs: the open files of zero-
/// message I/O (`IO_FDS`), plus one per file the kernel has open.
const MAX_FDS: usize = 1 << 18;
/// Open files kept for I/O the kernel sends without a handle.
const IO_FDS: usize = 256;

/// What a node id stands for.
struct Node {
    /// The kernel's lookup count: the node goes when `forget` brings it
    /// to zero.
    nlookup: u64,
    key: (u64, u64),
    /// Where requests on the node start: the name it was last found by.
    handle: Handle,
}

#[derive(Default)]
pub(crate) struct Nodes {
    by_id: HashMap<u64, Node>,
    /// (device, inode) -> node id, for the nodes whose id is not their
    /// inode number.
    keys: walkfs_fsapi::keyindex::KeyIndex,
    /// The root's inode number (its node id is FUSE's root id).
    root_ino: u64,
}

impl Nodes {
    /// The node of (device, inode) `key`.
    fn find(&self, key: (u64, u64)) -> Option<u64> {
        self.keys.find(key, |id| self.by_id.get(&id).map(|n| n.key))
    }
}

/// A node's own open files: (read-only, read-write).
type NodeIo = (Option<Arc<fds::VFd>>, Option<Arc<fds::VFd>>);

/// A caller: uid, gid, supplementary groups (sorted).
type Identity = (u32, u32, Vec<u32>);

/// Kernel timeouts once `cache=coherent` cannot see every change.
const DEGRADED_TTL: Duration = Duration::from_secs(1);

/// The file system the FUSE session serves.
pub struct WalkFuse {
    vfs: Vfs,
    /// Root credentials, the descriptor table every request shares.
    base: Ctx,
    ctxs: RwLock<HashMap<Identity, Arc<Ctx>>>,
    nodes: Arc<RwLock<Nodes>>,
    /// What the kernel was handed, for invalidations (cache=coherent).
    kc: Arc<coherent::KernelCache>,
    next_id: AtomicU64,
    /// Directory listings being read (listings.rs).
    listings: listings::Listings,
    /// The root (never forgotten).
    root: Handle,
    /// Per-node open files for I/O the kernel sends without a handle
    /// (zero-message opens): (read-only, read-write), opened on first
    /// use, closed when the node is forgotten or the cache is full.
    io: fds::Cache<NodeIo>,
    closer: Arc<fds::Closer>,
    opts: MountOptions,
    /// Changes run behind their callers in the vfs (errors come at
    /// flush and fsync).
    writes_behind: bool,
    pub counters: Arc<FuseCounters>,
}

fn errno(e: Errno) -> fuser::Errno {
    fuser::Errno::from_i32(e.0)
}

/// Answer a request that returns nothing but success or an errno.
fn done(reply: ReplyEmpty, r: Result<(), Errno>) {
    match r {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(errno(e)),
    }
}

/// Answer a request that returns bytes.
fn data(reply: ReplyData, r: Result<&[u8], Errno>) {
    match r {
        Ok(d) => reply.data(d),
        Err(e) => reply.error(errno(e)),
    }
}

fn kind_of(mode: u32) -> FileType {
    match mode & libc::S_IFMT {
        libc::S_IFDIR => FileType::Directory,
        libc::S_IFLNK => FileType::Symlink,
        libc::S_IFCHR => FileType::CharDevice,
        libc::S_IFBLK => FileType::BlockDevice,
        libc::S_IFIFO => FileType::NamedPipe,
        libc::S_IFSOCK => FileType::Socket,
        _ => FileType::RegularFile,
    }
}

fn time(t: walkfs_vfs::StatxTimestamp) -> SystemTime {
    if t.tv_sec >= 0 {
        UNIX_EPOCH + Duration::new(t.tv_sec as u64, t.tv_nsec)
    } else {
        UNIX_EPOCH - Duration::from_secs(t.tv_sec.unsigned_abs())
    }
}

fn attr_of(id: u64, x: &Statx) -> FileAttr {
    let mode = u32::from(x.stx_mode);
    FileAttr {
        ino: INodeNo(id),
        size: x.stx_size,
        blocks: x.stx_blocks,
        atime: time(x.stx_atime),
        mtime: time(x.stx_mtime),
        ctime: time(x.stx_ctime),
        crtime: time(x.stx_ctime),
        kind: kind_of(mode),
        perm: (mode & 0o7777) as u16,
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

fn time_set(t: Option<TimeOrNow>) -> Option<TimeSet> {
    t.map(|t| match t {
        TimeOrNow::Now => TimeSet::Now,
        TimeOrNow::SpecificTime(st) => {
            let (sec, nsec) = match st.duration_since(UNIX_EPOCH) {
                Ok(d) => (d.as_secs() as i64, d.subsec_nanos()),
                Err(e) => (-(e.duration().as_secs() as i64), 0),
            };
            TimeSet::At(Timespec { sec, nsec })
        }
    })
}

impl WalkFuse {
    pub fn new(vfs: Vfs, opts: MountOptions) -> Result<WalkFuse, Errno> {
        let base = vfs.context_with_fds(Creds::root(), MAX_FDS);
        let root = base.handle(walkfs_vfs::AT_FDCWD, b"/")?;
        let x = base.statx(&root, b"", libc::AT_EMPTY_PATH, libc::STATX_BASIC_STATS)?;
        let mut nodes = Nodes::default();
        nodes.by_id.insert(
            INodeNo::ROOT.0,
            Node {
                nlookup: 1,
                key: key_of(&x),
                handle: root.clone(),
            },
        );
        nodes.keys.insert(key_of(&x), INodeNo::ROOT.0);
        nodes.root_ino = x.stx_ino;
        let nodes = Arc::new(RwLock::new(nodes));
        let writes_behind = vfs.writes_behind();
        let closer = Arc::new(fds::Closer {
            ctx: base.with_creds(Creds::root()),
        });
        Ok(WalkFuse {
            root,
            io: fds::Cache::new(IO_FDS),
            closer,
            vfs,
            base,
            ctxs: RwLock::new(HashMap::new()),
            kc: Arc::new(coherent::KernelCache::new(nodes.clone())),
            nodes,
            next_id: AtomicU64::new(1 << 62),
            listings: listings::Listings::default(),
            opts,
            writes_behind,
            counters: Arc::new(FuseCounters::default()),
        })
    }

    pub fn vfs(&self) -> &Vfs {
        &self.vfs
    }

    /// With `cache=coherent`, start telling the kernel what changed
    /// behind its back, through the notifier the caller sets on what this
    /// returns once the session exists.
    pub(crate) fn kernel_cache(&self) -> Option<Arc<coherent::KernelCache>> {
        if self.opts.cache != CachePolicy::Coherent {
            return None;
        }
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
        let (uid, gid) = (req.uid(), req.gid());
        let groups = if uid == 0 {
            Vec::new()
        } else {
            caller_groups(req.pid()).unwrap_or_else(|| {
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
    fn node(&self, ino: INodeNo) -> Result<Handle, Errno> {
        if ino == INodeNo::ROOT {
            return Ok(self.root.clone());
        }
        let nodes = self.nodes.read();
        let n = nodes.by_id.get(&ino.0).ok_or(Errno::ESTALE)?;
        Ok(n.handle.clone())
    }

    /// A node for the file `h` refers to, whose attributes are `x`: an
    /// existing node of the same inode gets one more lookup, and starts
    /// from `h` from now on (the name it was found by last).
    fn remember(&self, h: Handle, x: &Statx) -> u64 {
        let key = key_of(x);
        let mut nodes = self.nodes.write();
        if let Some(id) = nodes.find(key) {
            if let Some(n) = nodes.by_id.get_mut(&id) {
                n.nlookup += 1;
                if id != INodeNo::ROOT.0 && !n.handle.same(&h) {
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
        let id = if x.stx_ino > INodeNo::ROOT.0 && !nodes.by_id.contains_key(&x.stx_ino) {
            x.stx_ino
        } else {
            self.next_id.fetch_add(1, Relaxed)
        };
        nodes.by_id.insert(
            id,
            Node {
                nlookup: 1,
                key,
                handle: h,
            },
        );
        nodes.keys.insert(key, id);
        id
    }

    /// Look `name` up in directory `parent`: a new lookup count on its
    /// node and its attributes.
    fn lookup_node(&self, ctx: &Ctx, parent: INodeNo, name: &[u8]) -> Result<FileAttr, Errno> {
        let dir = self.node(parent)?;
        let mut steps = Vec::with_capacity(1);
        let h = ctx
            .walk_handle(&dir, &[name], &mut steps)?
            .ok_or(Errno::ENOENT)?;
        let x = stat_of(ctx, &h)?;
        let id = self.remember(h, &x);
        Ok(attr_of(id, &x))
    }

    fn attr(&self, ino: INodeNo) -> Result<FileAttr, Errno> {
        let x = stat_of(&self.base, &self.node(ino)?)?;
        Ok(attr_of(ino.0, &x))
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

    fn attr_reply(&self, reply: ReplyAttr, r: Result<FileAttr, Errno>) {
        match r {
            Ok(a) => reply.attr(&self.attr_ttl(), &a),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn entry(&self, reply: ReplyEntry, r: Result<FileAttr, Errno>) {
        match r {
            Ok(a) => reply.entry_with_ttls(&self.attr_ttl(), &self.entry_ttl(), &a, Generation(0)),
            Err(e) => reply.error(errno(e)),
        }
    }

    /// Check a name the kernel passed: one component, never `.`/`..`.
    fn name(name: &OsStr) -> Result<&[u8], Errno> {
        let n = name.as_bytes();
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
            ("io_fds".to_string(), self.io.len() as u64),
            ("io_fds_max".to_string(), IO_FDS as u64),
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
        self.keeps() && self.opts.default_permissions
    }

    /// The kernel keeps what it learned (pages, symlinks, listings, write-
    /// back): `cache=loose`, and `cache=coherent`, which also tells it
    /// what changed.
    fn keeps(&self) -> bool {
        matches!(self.opts.cache, CachePolicy::Loose | CachePolicy::Coherent)
    }

    /// The vfs descriptor for I/O on `ino` with handle `fh`: the handle's
    /// own (kernel handles are descriptor + 1), or for handle 0 the node's
    /// shared open file, read-write when `write` (or when the file allows
    /// it, so one descriptor serves both), else read-only.
    fn io_fd(&self, ino: INodeNo, fh: FileHandle, write: bool) -> Result<fds::IoFd, Errno> {
        if fh.0 != 0 {
            return Ok(fds::IoFd::Handle((fh.0 - 1) as i32));
        }
        let (ro, rw) = self.io.get(ino.0).unwrap_or((None, None));
        if let Some(fd) = rw {
            return Ok(fds::IoFd::Shared(fd));
        }
        if !write {
            if let Some(fd) = ro {
                return Ok(fds::IoFd::Shared(fd));
            }
        }
        let node = self.node(ino)?;
        let (ro, rw) = match self.base.reopen(&node, libc::O_RDWR) {
            Ok(fd) => (ro, Some(self.closer.own(fd))),
            Err(err) if write => return Err(err),
            Err(_) => {
                let fd = self.base.reopen(&node, libc::O_RDONLY)?;
                (Some(self.closer.own(fd)), rw)
            }
        };
        let fd = rw.clone().or_else(|| ro.clone()).ok_or(Errno::EBADF)?;
        // Two threads may both open one: the later replaces the earlier,
        // which closes once its user is done.
        self.io.insert(ino.0, (ro, rw));
        Ok(fds::IoFd::Shared(fd))
    }

    /// Write-back caching: only in `cache=loose`. With it the kernel owns
    /// a file's size and times and never takes them from us again, so a
    /// size changed on the host could not be shown: `cache=coherent`
    /// writes through.
    fn writeback(&self) -> bool {
        self.opts.cache == CachePolicy::Loose
    }

    fn fopen_flags(&self) -> FopenFlags {
        if self.keeps() {
            FopenFlags::FOPEN_KEEP_CACHE
        } else {
            FopenFlags::empty()
        }
    }

    /// The kernel dropped `nlookup` references to node `ino`.
    fn forget_node(&self, ino: INodeNo, nlookup: u64) {
        if ino == INodeNo::ROOT {
            return;
        }
        let mut nodes = self.nodes.write();
        let gone = match nodes.by_id.get_mut(&ino.0) {
            Some(n) => {
                n.nlookup = n.nlookup.saturating_sub(nlookup);
                n.nlookup == 0
            }
            None => false,
        };
        if gone {
            self.kc.forgotten(ino.0);
            if let Some(n) = nodes.by_id.remove(&ino.0) {
                nodes.keys.remove(n.key, ino.0);
                drop(nodes);
                // The handle goes after the lock; the open files once no
                // request uses them any more.
                drop(n);
                self.io.remove(ino.0);
            }
        }
    }

    /// The entries of directory `ino`, `.` and `..` first.
    fn list(&self, ctx: &Ctx, ino: INodeNo) -> Result<Vec<walkfs_vfs::DirEntryOut>, Errno> {
        let d = ctx.reopen(&self.node(ino)?, libc::O_RDONLY | libc::O_DIRECTORY)?;
        let entries = ctx.getdents(d);
        let _ = ctx.close(d);
        entries
    }

    /// Where a READDIR(PLUS) of `ino` at `offset` starts: in its
    /// handle's listing, or without a handle in the listing its offset
    /// names (a fresh one at offset 0).
    fn dir_slice(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
    ) -> Result<listings::Slice, Errno> {
        if fh.0 != 0 {
            let id = u32::try_from(fh.0).map_err(|_| Errno::EBADF)?;
            return self
                .listings
                .of_handle(id, ino.0, offset)
                .ok_or(Errno::EBADF);
        }
        let gen = self.vfs.names_generation();
        self.listings
            .continue_at(ino.0, offset, gen, || self.list(&self.ctx(req), ino))
    }
}

impl Filesystem for WalkFuse {
    /// The session ends (unmount): every change the backend sent without
    /// waiting reaches the server before the mount is gone, as a umount
    /// of any write-back file system waits for its dirty state. A refusal
    /// no one can be told of any more is logged.
    fn destroy(&mut self) {
        if let Err(e) = self.vfs.sync() {
            tracing::warn!("unmount: a change sent without waiting failed: {e}");
        }
    }

    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        // Kill-priv v2: the kernel stops clearing set-id bits itself
        // (a GETXATTR of security.capability before writes and a
        // GETATTR before each chown, since FUSE clears SB_NOSEC without
        // it) and marks the writes and truncates whose writer lacks
        // CAP_FSETID; the vfs clears the bits as Linux does (policy.rs):
        // on write here, on truncate and chown by the caller's
        // credentials.
        // Ioctls on directories: `walkfs stats` and `walkfs sync` ask the
        // root.
        let mut want = InitFlags::FUSE_PARALLEL_DIROPS
            | InitFlags::FUSE_HANDLE_KILLPRIV_V2
            | InitFlags::FUSE_HAS_IOCTL_DIR;
        if self.keeps() {
            want |= InitFlags::FUSE_CACHE_SYMLINKS
                | InitFlags::FUSE_DO_READDIRPLUS
                | InitFlags::FUSE_READDIRPLUS_AUTO;
            // Write-back caching: the kernel gathers a program's small
            // writes in the page cache and sends them in large chunks (a
            // build's assembler and linker write in small pieces; without
            // it each is one round trip to the server). Coherent mounts
            // cannot use it; the vfs gathers them (writeback.rs).
            if self.writeback() {
                want |= InitFlags::FUSE_WRITEBACK_CACHE;
            }
        }
        if let Err(missing) = config.add_capabilities(want) {
            tracing::info!("kernel lacks FUSE capabilities {missing:?}");
            let _ = config.add_capabilities(want & !missing);
        }
        let _ = config.set_max_write(1 << 20);
        let _ = config.set_max_readahead(1 << 20);
        Ok(())
    }

    fn lookup(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let _t = self.counters.start(Op::Lookup);
        let ctx = self.ctx(req);
        let r = Self::name(name).and_then(|n| self.lookup_node(&ctx, parent, n));
        let coherent = self.opts.cache == CachePolicy::Coherent;
        if let (true, Ok(a)) = (coherent, &r) {
            self.kc.handed_out(parent.0, name.as_bytes(), Some(a.ino.0));
        }
        match r {
            Err(Errno::ENOENT) if !self.opts.neg_ttl.is_zero() => {
                // A negative entry: node id 0, kept for the entry timeout
                // (short when it could not be invalidated).
                self.counters.negative_replies.fetch_add(1, Relaxed);
                let mut a = attr_of(0, &Statx::default());
                a.ino = INodeNo(0);
                let ttl = if coherent
                    && (self.degraded() || !self.kc.handed_out(parent.0, name.as_bytes(), None))
                {
                    self.opts.neg_ttl.min(DEGRADED_TTL)
                } else {
                    self.opts.neg_ttl
                };
                reply.entry_with_ttls(&Duration::ZERO, &ttl, &a, Generation(0));
            }
            Err(Errno::ENOENT) => {
                self.counters.negative_replies.fetch_add(1, Relaxed);
                reply.error(fuser::Errno::ENOENT)
            }
            r => self.entry(reply, r),
        }
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        let _t = self.counters.start(Op::Forget);
        self.forget_node(ino, nlookup);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        let _t = self.counters.start(Op::Getattr);
        self.attr_reply(reply, self.attr(ino));
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let _t = self.counters.start(Op::Setattr);
        let ctx = self.ctx(req);
        let r = (|| {
            let node = self.node(ino)?;
            let fd = &node;
            // The kernel writing back the times it keeps (write-back
            // cache) of a file removed meanwhile: nothing to change that
            // anyone could see, and no name left to reach it by.
            if self.writeback()
                && mode.is_none()
                && uid.is_none()
                && gid.is_none()
                && size.is_none()
            {
                let x = stat_of(&self.base, fd)?;
                if x.stx_nlink == 0 {
                    // (Every unlink in cache=loose ends here: the kernel
                    // writes back the ctime it set. One stat answers.)
                    return Ok(attr_of(ino.0, &x));
                }
            }
            let e = libc::AT_EMPTY_PATH;
            if let Some(m) = mode {
                if self.only_kills_privs(&ctx, fd, m)? {
                    self.base.fchmodat(fd, b"", m & 0o7777, e)?;
                } else {
                    ctx.fchmodat(fd, b"", m & 0o7777, e)?;
                }
            }
            if uid.is_some() || gid.is_some() {
                ctx.fchownat(
                    fd,
                    b"",
                    uid.unwrap_or(u32::MAX),
                    gid.unwrap_or(u32::MAX),
                    e | libc::AT_SYMLINK_NOFOLLOW,
                )?;
            }
            if let Some(len) = size {
                let len = i64::try_from(len).map_err(|_| Errno::EFBIG)?;
                match fh.filter(|h| h.0 != 0) {
                    Some(h) => ctx.ftruncate((h.0 - 1) as i32, len)?,
                    None => {
                        // FATTR_FH with handle 0: the caller truncates a
                        // file it has open (zero-message open), and the
                        // kernel has checked the descriptor is writable.
                        // As with ftruncate(2), the file's mode is not
                        // asked again (a file created with mode 0 and
                        // truncated through its descriptor).
                        let who: &Ctx = if fh.is_some() { &self.base } else { &ctx };
                        let w = who.reopen(fd, libc::O_WRONLY)?;
                        let r = ctx.ftruncate(w, len);
                        let _ = ctx.close(w);
                        r?
                    }
                }
            }
            let times = [time_set(atime), time_set(mtime)];
            if times != [None, None] {
                // With write-back caching the kernel keeps a file's times
                // and sends them as explicit times, as the caller: when
                // it writes them back, with a truncate, and for a
                // utimensat(UTIME_NOW), which a writer who does not own
                // the file may do. Explicit times are the owner's only in
                // utimensat, so a caller who may write the file gets them
                // set with the daemon's credentials. Under
                // default_permissions the kernel has already refused a
                // non-owner's explicit times; without it, a writer's
                // explicit utimensat goes through in cache=loose (the
                // kernel has turned NOW into a time: the two cannot be
                // told apart).
                let kernel_times = self.writeback()
                    && !ctx.creds().is_root()
                    && ctx
                        .faccessat(fd, b"", libc::W_OK, libc::AT_EMPTY_PATH)
                        .is_ok();
                let who: &Ctx = if kernel_times { &self.base } else { &ctx };
                who.utimensat(fd, b"", times, e | libc::AT_SYMLINK_NOFOLLOW)?;
            }
            self.attr(ino)
        })();
        self.attr_reply(reply, r);
    }

    fn readlink(&self, req: &Request, ino: INodeNo, reply: ReplyData) {
        let _t = self.counters.start(Op::Readlink);
        let mut buf = [0u8; libc::PATH_MAX as usize];
        let r = self
            .node(ino)
            .and_then(|h| self.ctx(req).readlinkat_into(&h, b"", &mut buf));
        data(reply, r.map(|n| &buf[..n]));
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let _t = self.counters.start(Op::Mkdir);
        let ctx = self.ctx(req);
        let r = Self::name(name).and_then(|n| {
            ctx.mkdirat(&self.node(parent)?, n, mode & !umask & 0o7777)?;
            self.lookup_node(&ctx, parent, n)
        });
        self.entry(reply, r);
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        let _t = self.counters.start(Op::Mknod);
        // Fifos, sockets (bind(2) of a unix socket lands here) and device
        // nodes are made in the export but never opened through it: the
        // kernel opens its own fifo or socket, and the mount is nodev.
        let ctx = self.ctx(req);
        let r = Self::name(name).and_then(|n| {
            let perm = mode & !umask & 0o7777;
            ctx.mknodat(
                &self.node(parent)?,
                n,
                (mode & libc::S_IFMT) | perm,
                u64::from(rdev),
            )?;
            self.lookup_node(&ctx, parent, n)
        });
        self.entry(reply, r);
    }

    fn unlink(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let _t = self.counters.start(Op::Unlink);
        let ctx = self.ctx(req);
        let r = Self::name(name).and_then(|n| ctx.unlinkat(&self.node(parent)?, n, 0));
        done(reply, r);
    }

    fn rmdir(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let _t = self.counters.start(Op::Rmdir);
        let ctx = self.ctx(req);
        let r =
            Self::name(name).and_then(|n| ctx.unlinkat(&self.node(parent)?, n, libc::AT_REMOVEDIR));
        done(reply, r);
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &std::path::Path,
        reply: ReplyEntry,
    ) {
        let _t = self.counters.start(Op::Symlink);
        let ctx = self.ctx(req);
        let r = Self::name(link_name).and_then(|n| {
            ctx.symlinkat(target.as_os_str().as_bytes(), &self.node(parent)?, n)?;
            self.lookup_node(&ctx, parent, n)
        });
        self.entry(reply, r);
    }

    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let _t = self.counters.start(Op::Rename);
        let ctx = self.ctx(req);
        let r = (|| {
            let (a, b) = (Self::name(name)?, Self::name(newname)?);
            ctx.renameat2(
                &self.node(parent)?,
                a,
                &self.node(newparent)?,
                b,
                flags.bits(),
            )?;
            // The moved file's node follows it: its handle's dentry moved.
            Ok(())
        })();
        done(reply, r);
    }

    fn link(
        &self,
        req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let _t = self.counters.start(Op::Link);
        let ctx = self.ctx(req);
        let r = Self::name(newname).and_then(|n| {
            ctx.linkat(
                &self.node(ino)?,
                b"",
                &self.node(newparent)?,
                n,
                libc::AT_EMPTY_PATH,
            )?;
            self.lookup_node(&ctx, newparent, n)
        });
        self.entry(reply, r);
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let _t = self.counters.start(Op::Open);
        if self.no_open() {
            reply.error(fuser::Errno::ENOSYS);
            return;
        }
        let ctx = self.ctx(req);
        let r = self.node(ino).and_then(|node| {
            let fd = &node;
            let f = self.open_flags(flags.0);
            match ctx.reopen(fd, f) {
                // Write-only by permission: the kernel then writes whole
                // pages only where it has them.
                Err(Errno::EACCES) if flags.0 & libc::O_ACCMODE == libc::O_WRONLY => {
                    ctx.reopen(fd, (f & !libc::O_ACCMODE) | libc::O_WRONLY)
                }
                r => r,
            }
        });
        match r {
            Ok(h) => reply.opened(FileHandle(h as u64 + 1), self.fopen_flags()),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<fuser::LockOwner>,
        reply: ReplyData,
    ) {
        let _t = self.counters.start(Op::Read);
        let mut buf = vec![0u8; size as usize];
        let r = self
            .io_fd(ino, fh, false)
            .and_then(|fd| self.base.pread(fd.fd(), &mut buf, offset));
        data(reply, r.map(|n| &buf[..n]));
    }

    fn write(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: fuser::WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<fuser::LockOwner>,
        reply: ReplyWrite,
    ) {
        let _t = self.counters.start(Op::Write);
        let r = (|| {
            if write_flags.contains(fuser::WriteFlags::FUSE_WRITE_KILL_SUIDGID) && !data.is_empty()
            {
                self.ctx(req).remove_privs(&self.node(ino)?)?;
            }
            let fd = self.io_fd(ino, fh, true)?;
            self.base.pwrite(fd.fd(), data, offset)
        })();
        match r {
            Ok(n) => reply.written(n as u32),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _lock_owner: fuser::LockOwner,
        reply: ReplyEmpty,
    ) {
        let _t = self.counters.start(Op::Flush);
        if !self.writes_behind || self.writeback() {
            // ENOSYS once makes the kernel stop asking, so a close costs
            // no round trip. Nothing is lost by it:
            // - a backend that completes every change before answering
            //   (a local directory) has nothing pending at close;
            // - with the write-back cache (cache=loose) the kernel still
            //   writes its dirty pages back at close and reports their
            //   WRITE errors there, and a failure met behind the caller
            //   reaches fsync, as on a local file system, whose close(2)
            //   reports nothing either.
            // A 9P source in cache=coherent or none keeps FLUSH: its
            // gathered writes reach the server at close, so whoever opens
            // the file next, anywhere, sees them (close-to-open, as NFS).
            return reply.error(fuser::Errno::ENOSYS);
        }
        // close(2): the file's gathered writes go out, and a failure one
        // of its changes met is reported (with cache=coherent after
        // waiting for them: close-to-open consistency as NFS keeps it).
        let r = match fh.0 {
            0 => self
                .io_fd(ino, fh, false)
                .and_then(|fd| self.base.flush(fd.fd())),
            h => self.base.flush((h - 1) as i32),
        };
        done(reply, r)
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<fuser::LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        let _t = self.counters.start(Op::Release);
        if fh.0 != 0 {
            let fd = (fh.0 - 1) as i32;
            if let Err(e) = self.base.close(fd) {
                // Reported at flush already, where a program could see it.
                tracing::debug!("release of {ino}: {e}");
            }
        }
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        let _t = self.counters.start(Op::Fsync);
        // The file's changes running behind are carried out; a failure
        // this open file has not seen is reported.
        let r = match fh.0 {
            // The node's own open file: its cursor has seen what a file
            // the kernel opened without telling us would have.
            0 => self
                .io_fd(ino, fh, false)
                .and_then(|fd| self.base.fsync(fd.fd())),
            h => self.base.fsync((h - 1) as i32),
        };
        done(reply, r)
    }

    fn opendir(&self, req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let _t = self.counters.start(Op::Opendir);
        if self.keeps() {
            // The NO_OPENDIR way (listings.rs): the kernel stops asking,
            // keeps listings in its cache, and lists only at READDIR.
            return reply.error(fuser::Errno::ENOSYS);
        }
        match self.list(&self.ctx(req), ino) {
            Ok(entries) => {
                let id = self.listings.add(ino.0, entries);
                reply.opened(FileHandle(u64::from(id)), FopenFlags::empty())
            }
            Err(e) => reply.error(errno(e)),
        }
    }

    fn readdir(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let _t = self.counters.start(Op::Readdir);
        let s = match self.dir_slice(req, ino, fh, offset) {
            Ok(s) => s,
            Err(e) => return reply.error(errno(e)),
        };
        for (i, e) in s.entries.iter().enumerate().skip(s.start) {
            let kind = kind_of(e.kind.mode_bits());
            // The node id here is a hint only (readdir makes no lookup);
            // the inode number keeps `ls -i` and `find` consistent.
            if reply.add(
                INodeNo(e.ino.max(1)),
                s.offset(i),
                kind,
                OsStr::from_bytes(&e.name),
            ) {
                break;
            }
        }
        // The kernel asks until a reply is empty: that one ends the
        // listing (dropping it at the last full reply would list the
        // directory again for the empty one).
        if s.start >= s.entries.len() {
            self.listings.finished(&s);
        }
        reply.ok();
    }

    fn readdirplus(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        let _t = self.counters.start(Op::Readdirplus);
        let ctx = self.ctx(req);
        let s = match self.dir_slice(req, ino, fh, offset) {
            Ok(s) => s,
            Err(e) => return reply.error(errno(e)),
        };
        for (i, e) in s.entries.iter().enumerate().skip(s.start) {
            let name = &e.name[..];
            let attr = if name == b"." {
                self.attr(ino)
            } else if name == b".." {
                // The kernel links no node for `..` (no lookup count): its
                // attributes only, with its inode number (readdir skips
                // entries whose d_ino is 0).
                self.node(ino).and_then(|h| {
                    let x = ctx.statx(
                        &h,
                        b"..",
                        libc::AT_SYMLINK_NOFOLLOW,
                        libc::STATX_BASIC_STATS,
                    )?;
                    Ok(attr_of(x.stx_ino.max(1), &x))
                })
            } else {
                self.lookup_node(&ctx, ino, name)
            };
            let Ok(a) = attr else { continue };
            let full = reply.add(
                a.ino,
                s.offset(i),
                OsStr::from_bytes(name),
                &self.entry_ttl(),
                &a,
                Generation(0),
            );
            if full {
                // The kernel did not take this entry: give back its count.
                if name != b"." && name != b".." {
                    self.forget_node(a.ino, 1);
                }
                break;
            }
        }
        // The kernel asks until a reply is empty: that one ends the
        // listing (dropping it at the last full reply would list the
        // directory again for the empty one).
        if s.start >= s.entries.len() {
            self.listings.finished(&s);
        }
        reply.ok();
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        let _t = self.counters.start(Op::Releasedir);
        if let Ok(id) = u32::try_from(fh.0) {
            self.listings.remove(id);
        }
        reply.ok();
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        let _t = self.counters.start(Op::Fsyncdir);
        // The directory's entries changed without waiting, their errors.
        let r = self.node(ino).and_then(|h| {
            let d = self.base.reopen(&h, libc::O_RDONLY | libc::O_DIRECTORY)?;
            let r = self.base.fsync(d);
            let _ = self.base.close(d);
            r
        });
        done(reply, r)
    }

    fn statfs(&self, _req: &Request, ino: INodeNo, reply: ReplyStatfs) {
        let _t = self.counters.start(Op::Statfs);
        match self.node(ino).and_then(|h| self.base.statfs(&h, b"")) {
            Ok(s) => reply.statfs(
                s.blocks,
                s.bfree,
                s.bavail,
                s.files,
                s.ffree,
                s.bsize as u32,
                s.namelen as u32,
                s.frsize as u32,
            ),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn getxattr(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _name: &OsStr,
        _size: u32,
        reply: ReplyXattr,
    ) {
        let _t = self.counters.start(Op::Getxattr);
        // The mount keeps no extended attributes. ENOSYS once and the
        // kernel stops asking (getxattr(2) gets EOPNOTSUPP from then on),
        // notably for security.capability before each write and chown.
        reply.error(fuser::Errno::ENOSYS);
    }

    fn listxattr(&self, _req: &Request, _ino: INodeNo, _size: u32, reply: ReplyXattr) {
        let _t = self.counters.start(Op::Listxattr);
        reply.error(fuser::Errno::ENOSYS);
    }

    fn ioctl(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _flags: fuser::IoctlFlags,
        cmd: u32,
        _in_data: &[u8],
        out_size: u32,
        reply: fuser::ReplyIoctl,
    ) {
        let _t = self.counters.start(Op::Ioctl);
        if ino != INodeNo::ROOT {
            return reply.error(fuser::Errno::ENOTTY);
        }
        match cmd {
            SYNC_IOCTL => match self.vfs.sync() {
                Ok(()) => reply.ioctl(0, &[]),
                Err(e) => reply.error(errno(e)),
            },
            STATS_IOCTL => {
                let body = serde_json::to_vec(&self.stats()).unwrap_or_default();
                if body.len() > out_size as usize {
                    return reply.error(fuser::Errno::from_i32(libc::E2BIG));
                }
                reply.ioctl(body.len() as i32, &body)
            }
            _ => reply.error(fuser::Errno::ENOTTY),
        }
    }

    fn access(&self, req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        let _t = self.counters.start(Op::Access);
        let r = self.node(ino).and_then(|h| {
            self.ctx(req)
                .faccessat(&h, b"", mask.bits(), libc::AT_EMPTY_PATH)
        });
        done(reply, r);
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let _t = self.counters.start(Op::Create);
        let ctx = self.ctx(req);
        let r = Self::name(name).and_then(|n| {
            let dir = self.node(parent)?;
            let pfd = &dir;
            let asked = (flags | libc::O_CREAT) & !libc::O_NOCTTY;
            let mut f = asked;
            if self.writeback() {
                // As in open_flags (a new file may be opened read-write
                // whatever its mode; an existing one may refuse it).
                f &= !libc::O_APPEND;
                if f & libc::O_ACCMODE == libc::O_WRONLY {
                    f = (f & !libc::O_ACCMODE) | libc::O_RDWR;
                }
            }
            let mode = mode & !umask & 0o7777;
            let (h, used) = match ctx.openat(pfd, n, f, mode) {
                Err(Errno::EACCES) if f != asked => {
                    let used = asked & !libc::O_APPEND;
                    (ctx.openat(pfd, n, used, mode)?, used)
                }
                r => (r?, f),
            };
            // The node comes from what the create opened, not from a
            // second walk of the name.
            let made = ctx.handle_of(h).and_then(|node| {
                let x = stat_of(&ctx, &node)?;
                Ok(attr_of(self.remember(node, &x), &x))
            });
            match made {
                Ok(a) => Ok((a, h, used)),
                Err(e) => {
                    let _ = ctx.close(h);
                    Err(e)
                }
            }
        });
        match r {
            // With zero-message opens the kernel never sends a release,
            // not even for a handle `create` gave it (it drops handles
            // silently once opens are off): a handle here would stay open
            // for ever. The new file's descriptor becomes the node's
            // shared one instead (bounded, closed when pushed out or
            // forgotten) and the kernel gets handle 0, as for opens.
            Ok((a, h, f)) if self.no_open() => {
                if f & libc::O_ACCMODE == libc::O_RDWR && f & libc::O_APPEND == 0 {
                    let rw = self.closer.own(h);
                    self.io.insert(a.ino.0, (None, Some(rw)));
                } else {
                    let _ = self.base.close(h);
                }
                reply.created(
                    &self.entry_ttl(),
                    &a,
                    Generation(0),
                    FileHandle(0),
                    self.fopen_flags(),
                )
            }
            Ok((a, h, _)) => reply.created(
                &self.entry_ttl(),
                &a,
                Generation(0),
                FileHandle(h as u64 + 1),
                self.fopen_flags(),
            ),
            Err(e) => reply.error(errno(e)),
        }
    }
}
