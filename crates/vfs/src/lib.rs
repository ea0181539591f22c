//! walkfs vfs core: Linux's pathname lookup (namei + dcache) as a library.
//!
//! A [`Vfs`] is a tree of mounted [`FileSystem`]s with a shared dentry and
//! inode cache. A [`Ctx`] is one caller of it: credentials, a root, an fd
//! table, and the POSIX-style calls (`faccessat`, `statx`, `openat`,
//! `renameat2`, ...) with Linux's semantics and errnos.
//!
//! ```
//! use std::sync::Arc;
//! use walkfs_vfs::{Vfs, Options, Creds, AT_FDCWD};
//! let vfs = Vfs::new(Arc::new(walkfs_memfs::MemFs::new()), &Options::default()).unwrap();
//! let ctx = vfs.context(Creds::root());
//! ctx.mkdirat(AT_FDCWD, b"/usr", 0o755).unwrap();
//! ctx.symlinkat(b"usr/lib", AT_FDCWD, b"/lib").unwrap();
//! ctx.mkdirat(AT_FDCWD, b"/usr/lib", 0o755).unwrap();
//! assert!(ctx.faccessat(AT_FDCWD, b"/lib/", libc::X_OK, 0).is_ok());
//! assert_eq!(ctx.readlinkat(AT_FDCWD, b"/lib").unwrap(), b"usr/lib");
//! ```
//!
//! The vfs knows no backend: it is handed one. Opening a source by name
//! (`mem:`, a host directory, a 9P server) with the backends' own options
//! is the `walkfs-source` crate's job.
//!
//! The optimizations of the seeds are runtime switches ([`Options`]), all
//! on by default: `fastpath` (lock-free walk of cached components),
//! `fastperm` (MAY_EXEC fast path), `cache_symlinks` (bodies cached with
//! their length), `negtimeout` (negative dentries, [`NegPolicy`]). The
//! [`CachePolicy`] decides how far cached answers are trusted at all.

mod acl;
mod arena;
mod coherent;
mod counters;
mod dcache;
mod dirlock;
mod file;
mod fileahead;
mod handle;
mod listing;
mod metered;
mod namei;
mod names;
mod openfile;
mod ops;
pub mod opt;
mod options;
mod pathcache;
mod perm;
mod policy;
mod readahead;
mod seqlock;
mod stat;
mod step;
mod sync;
#[cfg(test)]
#[cfg_attr(loom, allow(dead_code))]
mod tests_util;
mod writeback;
mod writer;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use parking_lot::{Mutex, RwLock};

pub use handle::{At, Handle};
pub use metered::BackendCalls;
pub use namei::slow_permission_checks;
pub use openfile::OpenFile;
pub use ops::{with_umask, Ctx, DirEntryOut, LockWait, Made, NameStep, WriteAs, AT_FDCWD};
pub use opt::OptError;
pub use options::{CachePolicy, NegPolicy, Options, OPTIONS};
pub use perm::Creds;
pub use stat::{Statx, StatxTimestamp};
pub use walkfs_fsapi::{
    caps, generation_of, Change, ChangeSink, Errno, FidStats, FileLock, FileSystem, FileType, How,
    LockFlavor, LockKind, LockOwner, Result, RpcStats, Seen, StatFs, TimeSet, Timespec, What,
    LOCK_EOF, NAME_MAX, PATH_MAX, RENAME_EXCHANGE, RENAME_NOREPLACE, RENAME_WHITEOUT,
};
pub use writeback::{SettleListener, WriteBackStats};

use counters::Counters;
use dcache::{DIdx, Dcache, IIdx, D_MOUNTROOT};
use dirlock::DirLocks;
use writer::Writer;

/// The live switches (readable lock-free by the walk): derived from the
/// user's [`Options`] and the degraded state by [`Switches::apply`], never
/// set on their own.
pub(crate) struct Switches {
    pub fastpath: AtomicBool,
    pub fastperm: AtomicBool,
    pub cache_symlinks: AtomicBool,
    /// Whole-path cache (consulted only with fastpath, fastperm and
    /// cache_symlinks on; see pathcache.rs).
    pub pathcache: AtomicBool,
    /// Negative dentries: 0 = not kept, N ms, -1 = kept until evicted.
    pub negtimeout: AtomicI64,
    pub umask: std::sync::atomic::AtomicU32,
    pub read_only: AtomicBool,
    /// `cache=none`, or degraded: revalidate every cached answer with the
    /// backend.
    pub revalidate: AtomicBool,
    /// Changes may run behind their callers (writeback.rs): a cache, and
    /// not `sync_metadata`.
    pub write_back: AtomicBool,
    /// Attributes settle once changes behind land (writeback/settle.rs).
    pub settle: AtomicBool,
}

impl Switches {
    fn new(opts: &Options) -> Switches {
        let sw = Switches {
            fastpath: AtomicBool::new(false),
            fastperm: AtomicBool::new(false),
            cache_symlinks: AtomicBool::new(false),
            pathcache: AtomicBool::new(false),
            negtimeout: AtomicI64::new(0),
            umask: std::sync::atomic::AtomicU32::new(0),
            read_only: AtomicBool::new(false),
            revalidate: AtomicBool::new(false),
            write_back: AtomicBool::new(false),
            settle: AtomicBool::new(false),
        };
        sw.apply(opts, false);
        sw
    }

    /// Make the live switches what `opts` asks, less what revalidating
    /// forbids: with `cache=none`, or once `degraded` (changes may go
    /// unseen), nothing is answered from the cache unchecked, so no walk
    /// takes the lock-free path, no whole path is remembered, no symlink
    /// body kept, and negative entries are not kept (`cache=none`) or
    /// live a second at most (degraded). The options themselves are left
    /// as given. Called with [`Inner::opts`] locked, so that two callers
    /// do not interleave.
    pub(crate) fn apply(&self, opts: &Options, degraded: bool) {
        let none = opts.cache == CachePolicy::None;
        let revalidate = none || degraded;
        // Revalidation is switched on before the shortcuts go, and off
        // after they come back, so no walk meanwhile trusts the cache
        // more than either setting allows.
        if revalidate {
            self.revalidate.store(true, Ordering::Relaxed);
        }
        self.fastpath
            .store(opts.fastpath && !revalidate, Ordering::Relaxed);
        self.pathcache
            .store(opts.pathcache && !revalidate, Ordering::Relaxed);
        self.cache_symlinks
            .store(opts.cache_symlinks && !revalidate, Ordering::Relaxed);
        self.fastperm.store(opts.fastperm, Ordering::Relaxed);
        let neg = opts.negative.as_millis();
        let neg = if none {
            0
        } else if degraded && !(0..=coherent::DEGRADED_NEGTIMEOUT_MS).contains(&neg) {
            coherent::DEGRADED_NEGTIMEOUT_MS
        } else {
            neg
        };
        self.negtimeout.store(neg, Ordering::Relaxed);
        self.umask.store(opts.umask, Ordering::Relaxed);
        self.read_only.store(opts.read_only, Ordering::Relaxed);
        self.write_back
            .store(!none && !opts.sync_metadata, Ordering::Relaxed);
        self.settle.store(opts.settle, Ordering::Relaxed);
        if !revalidate {
            self.revalidate.store(false, Ordering::Relaxed);
        }
    }
}

/// What is mounted where (changed by `mount` only; read by the slow path
/// when it meets a mount point or climbs out of a mounted root).
#[derive(Default)]
pub(crate) struct Mounts {
    /// Mount point dentry -> root dentry of what is mounted there.
    pub on: HashMap<DIdx, DIdx>,
    /// Root dentry of a mounted file system -> its mount point.
    pub under: HashMap<DIdx, DIdx>,
}

pub(crate) struct Inner {
    pub sw: Switches,
    /// Every backend call, counted (metered.rs).
    pub meter: Arc<metered::Meter>,
    /// The options as the user gave them (and changed them through
    /// [`Vfs::set_option`]); `sw` is derived from them and `degraded`.
    /// Lock order: after the writer lock.
    pub opts: Mutex<Options>,
    pub dc: Dcache,
    /// The cache's allocator and hash-chain shape: held for short updates
    /// only, through [`writer::WriterGuard`].
    pub w: Mutex<Writer>,
    /// Per-directory locks held across backend calls (dirlock.rs).
    pub dirs: DirLocks,
    /// Serialises renames between directories (Linux's
    /// `s_vfs_rename_mutex`): with it held, no other rename can change
    /// which directory is an ancestor of which while one checks.
    pub rename_lock: Mutex<()>,
    pub mounts: RwLock<Mounts>,
    /// Bumped by every change of attributes made through walkfs (chmod,
    /// chown, truncate...). A slow lookup that asked the backend before
    /// one does not overwrite the attributes cached since.
    pub attr_gen: AtomicU64,
    pub sbs: RwLock<Vec<Arc<dyn FileSystem>>>,
    /// Bumped by every change to names, permissions or mounts made through
    /// walkfs. A slow lookup that asked the backend without the writer lock
    /// discards its answer if this moved meanwhile.
    pub ns_gen: AtomicU64,
    /// Bumped when a change reported by a backend dropped a cached name
    /// (cache=coherent): remembered whole paths check it with `ns_gen`.
    pub ext_gen: AtomicU64,
    /// Bumped by every batch of reported changes: a slow lookup whose
    /// backend answer may predate one caches it only as stale.
    pub ext_seen: AtomicU64,
    pub epoch: Instant,
    pub root: DIdx,
    pub counters: Counters,
    pub pc: pathcache::PathCache,
    /// Descriptors per context.
    pub max_files: u32,
    pub cred_ids: pathcache::CredIds,
    /// `cache=coherent` when built: backends report changes made behind
    /// our back.
    pub coherent: bool,
    /// Set once changes may go unseen (see coherent.rs); never cleared.
    pub degraded: AtomicBool,
    pub listeners: coherent::Listeners,
    /// Changes running behind their callers (writeback.rs).
    pub wb: writeback::WriteBack,
    /// Directory listings asked for ahead (readahead.rs).
    pub ra: readahead::ReadAhead,
    /// The changes made through the vfs lately, and what they touched:
    /// whether a listing read ahead is still fresh (readahead.rs).
    pub ra_log: readahead::ChangeLog,
    /// Files' first bytes asked for ahead (fileahead.rs).
    pub(crate) fa: fileahead::FileAhead,
    /// Superblocks (bit per index) whose backend cannot list ahead: set at
    /// mount for one that does not keep its answers' order, else once
    /// `list_ahead` said no.
    pub no_ahead: AtomicU64,
    /// ACLs of inodes that have one (acl.rs).
    pub(crate) acls: acl::Acls,
}

/// A tree of mounted file systems with its caches. Cheap to clone (shared).
#[derive(Clone)]
pub struct Vfs {
    pub(crate) inner: Arc<Inner>,
}

/// Sizes of the caches, for the memory benchmark and `walkfs stats`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    pub dentries: u32,
    pub inodes: u32,
    pub chunks: u32,
    /// Bytes of memory the caches hold (slots allocated + hash tables).
    pub bytes: usize,
    pub slow_lookups: u64,
    pub backend_lookups: u64,
    /// Misses answered by a directory known complete, without the backend.
    pub complete_misses: u64,
    pub negative_created: u64,
    pub retries: u64,
    /// cache=coherent: changes reported by the backend, and times it lost
    /// some (a queue overflow) so that everything cached was dropped.
    pub changes: u64,
    pub changes_lost: u64,
    /// Of `changes`, those the backend made itself for this vfs, the
    /// object as it left it: nothing dropped for them.
    pub changes_own: u64,
    /// Directory listings read ahead: asked for, used, given up, and the
    /// time callers waited for them.
    pub readahead_asked: u64,
    pub readahead_used: u64,
    pub readahead_wasted: u64,
    pub readahead_wait_ns: u64,
    /// Files whose open and first read were asked for ahead: asked for,
    /// used, given up.
    pub fileahead_asked: u64,
    pub fileahead_used: u64,
    pub fileahead_wasted: u64,
}

impl Vfs {
    /// A vfs whose root is `fs`.
    pub fn new(fs: Arc<dyn FileSystem>, opts: &Options) -> Result<Vfs> {
        Vfs::build(fs, opts, true)
    }

    /// [`Vfs::new`], with the reporting of changes (`cache=coherent`) set
    /// up but not started until [`Vfs::start_watching`]: for a process
    /// that confines itself in between, since a thread started before
    /// would escape the confinement.
    pub fn new_held(fs: Arc<dyn FileSystem>, opts: &Options) -> Result<Vfs> {
        Vfs::build(fs, opts, false)
    }

    /// Start what [`Vfs::new_held`] held back.
    pub fn start_watching(&self) {
        if !self.inner.coherent {
            return;
        }
        let sbs = self.inner.sbs.read().clone();
        for fs in sbs {
            let Some(w) = fs.watch() else { continue };
            if let Err(e) = w.start() {
                tracing::warn!(
                    "cache=coherent: {} cannot watch ({e}); revalidating",
                    fs.kind()
                );
                self.inner.degrade();
            }
        }
    }

    fn build(fs: Arc<dyn FileSystem>, opts: &Options, start: bool) -> Result<Vfs> {
        let meter = Arc::new(metered::Meter::default());
        let fs = metered::Metered::wrap(fs, &meter);
        let max = opts.max_dentries.clamp(1024, u32::MAX / 2);
        let dc = Dcache::new(max);
        let mut w = Writer::new(max);
        let root_entry = walkfs_fsapi::Entry {
            node: fs.root(),
            attr: fs.getattr(fs.root())?,
        };
        if !root_entry.attr.is_dir() {
            return Err(Errno::ENOTDIR);
        }
        let ino = w.iget(&dc, 0, &root_entry, true).ok_or(Errno::ENOMEM)?;
        // The root inode keeps the backend's implicit root reference.
        w.take_forgets();
        let root = w.d_make_root(&dc, ino, 0).ok_or(Errno::ENOMEM)?;
        let no_ahead = readahead::never_ahead(&*fs, 0);
        let inner = Arc::new_cyclic(|weak| Inner {
            sw: Switches::new(opts),
            opts: Mutex::new(opts.clone()),
            dc,
            w: Mutex::new(w),
            dirs: DirLocks::new(4096),
            rename_lock: Mutex::new(()),
            mounts: RwLock::new(Mounts::default()),
            attr_gen: AtomicU64::new(0),
            sbs: RwLock::new(vec![fs]),
            ns_gen: AtomicU64::new(0),
            ext_gen: AtomicU64::new(0),
            ext_seen: AtomicU64::new(0),
            epoch: Instant::now(),
            root,
            counters: Counters::default(),
            pc: pathcache::PathCache::new(max),
            max_files: opts.max_files,
            cred_ids: pathcache::CredIds::default(),
            coherent: opts.cache == CachePolicy::Coherent,
            degraded: AtomicBool::new(false),
            listeners: Default::default(),
            wb: writeback::WriteBack::new(weak.clone()),
            ra: readahead::ReadAhead::new(opts.dir_readahead as usize),
            ra_log: Default::default(),
            fa: Default::default(),
            no_ahead: AtomicU64::new(no_ahead),
            acls: Default::default(),
            meter,
        });
        inner.lend_names(0);
        let vfs = Vfs { inner };
        vfs.watch_sb(0, start);
        Ok(vfs)
    }

    /// With `cache=coherent`, ask superblock `sb` to report changes; one
    /// that cannot leaves the whole vfs revalidating.
    fn watch_sb(&self, sb: usize, start: bool) {
        let Ok(fs) = self.inner.sb(sb) else { return };
        let sink = Arc::new(coherent::Invalidator {
            inner: Arc::downgrade(&self.inner),
            sb,
        });
        if !self.inner.coherent {
            return;
        }
        let r = match fs.watch() {
            Some(w) => w
                .watch_changes(sink)
                .and_then(|()| if start { w.start() } else { Ok(()) }),
            None => Err(Errno::EOPNOTSUPP),
        };
        if let Err(e) = r {
            tracing::warn!(
                "cache=coherent: {} cannot report changes ({e}); revalidating instead",
                fs.kind()
            );
            self.inner.degrade();
        }
    }

    /// Be told of every file whose cached attributes were replaced by
    /// its backend's once its changes behind the callers landed
    /// (writeback/settle.rs): `(superblock, inode number)`, on the vfs's
    /// settling thread.
    pub fn on_settled(&self, l: writeback::SettleListener) {
        self.inner.wb.on_settled(l);
    }

    /// Attributes asked for to settle, and those that replaced the
    /// cached ones.
    pub fn settle_stats(&self) -> (u64, u64) {
        self.inner.wb.settle_stats()
    }

    /// Be told of every change the backends report, after the cache has
    /// dropped what it names (`cache=coherent` only).
    pub fn add_change_listener(&self, l: Arc<dyn walkfs_fsapi::ChangeSink>) {
        self.inner.listeners.write().push(l);
    }

    /// The path, from the vfs root, at which the directory that is node
    /// `node` of superblock `sb` is cached; `None` when it is not (for a
    /// watcher naming where a reported change happened: a watched
    /// directory is one the cache holds). Best effort: a rename racing
    /// with the call may give the old path.
    pub fn dir_path(&self, sb: usize, node: u64) -> Option<String> {
        let inner = &self.inner;
        let w = inner.writer();
        let ino = w.find_inode(&inner.dc, sb, node)?;
        let d = *w.alias.get(&ino)?;
        drop(w);
        Some(inner.path_of(d))
    }

    /// The inode number and mode of what the cache last knew at `name`
    /// in directory `dir` (a backend node of superblock `sb`), even if it
    /// was since reported changed; nothing is asked of the backend. (A
    /// FUSE front end replaying a delete names the file the kernel knew.)
    pub fn cached_child(&self, sb: usize, dir: u64, name: &[u8]) -> Option<(u64, u32)> {
        let inner = &self.inner;
        let dc = &inner.dc;
        let w = inner.writer();
        let ino = w.find_inode(dc, sb, dir)?;
        let d = *w.alias.get(&ino)?;
        let child = w.d_find(dc, d, name, dcache::hash_name(name))?;
        let c = dc.dentry(child)?;
        if c.flags.load(Ordering::Relaxed) & dcache::D_NEGATIVE != 0 {
            return None;
        }
        let i = dc.inode(IIdx(c.target.load(Ordering::Relaxed)))?;
        let r = (
            i.ino.load(Ordering::Relaxed),
            i.mode.load(Ordering::Relaxed),
        );
        drop(w);
        Some(r)
    }

    /// Send everything gathered, wait for every change running behind
    /// its caller, and report a failure any met since the last call
    /// (unmount; `walkfs sync`: `sync(2)` never reaches a FUSE daemon).
    pub fn sync(&self) -> Result<()> {
        self.inner.sync_all()
    }

    /// Some changes run behind their callers (writeback.rs): `close` and
    /// `fsync` may have failures to report.
    pub fn writes_behind(&self) -> bool {
        let inner = &self.inner;
        inner.sbs.read().iter().any(|fs| inner.defers(&**fs))
    }

    /// A number that moves with every change of names made through this
    /// vfs and every batch of changes a backend reported: two reads that
    /// give the same number saw the same namespace, as far as this vfs
    /// can know (a front end reuses a listing while it stays).
    pub fn names_generation(&self) -> u64 {
        let inner = &self.inner;
        inner
            .ns_gen
            .load(Ordering::Acquire)
            .wrapping_add(inner.ext_seen.load(Ordering::Acquire))
    }

    /// The write-back's counters (writeback.rs).
    pub fn write_back_stats(&self) -> WriteBackStats {
        self.inner.wb.stats()
    }

    /// `cache=coherent` and every change is being seen: what is cached may
    /// be trusted until a change says otherwise.
    pub fn is_coherent(&self) -> bool {
        self.inner.coherent && !self.is_degraded()
    }

    /// Some changes may go unseen (a backend of a `cache=coherent` vfs
    /// cannot report them all): the vfs revalidates what it caches, as
    /// with `cache=none`, whatever [`Vfs::options`] say. For good.
    pub fn is_degraded(&self) -> bool {
        self.inner.degraded.load(Ordering::Acquire)
    }

    /// The message counters of the root's backend (`None` unless it
    /// talks to a server: [`caps::Remote`]).
    pub fn rpc_stats(&self) -> Option<RpcStats> {
        Some(self.inner.sb(0).ok()?.remote()?.rpc_stats())
    }

    /// The root backend's use of the handles it keeps on its server for
    /// cached nodes (`None` unless it keeps any).
    pub fn remote_handles(&self) -> Option<FidStats> {
        self.inner.sb(0).ok()?.remote()?.fid_stats()
    }

    /// Zero the root backend's message counters, and the write-back's.
    pub fn reset_rpc_stats(&self) {
        self.inner.wb.reset_stats();
        if let Some(r) = self.inner.sb(0).ok().as_deref().and_then(|fs| fs.remote()) {
            r.reset_stats();
        }
    }

    /// Does the root backend talk to a server over a link
    /// ([`caps::Remote`])?
    pub fn is_remote(&self) -> bool {
        self.inner.sb(0).is_ok_and(|fs| fs.remote().is_some())
    }

    /// Are the root backend's files host files ([`caps::HostFiles`]): a
    /// kernel may do their I/O itself (FUSE passthrough), and a lookup
    /// costs no more than the stat a listing with attributes would make?
    pub fn has_host_files(&self) -> bool {
        self.inner.sb(0).is_ok_and(|fs| fs.host_files().is_some())
    }

    /// Does the root backend take file locks where other parties see
    /// them ([`caps::Locks`])? Without, locks stay with the front end's
    /// kernel (a FUSE mount keeps them itself).
    pub fn has_locks(&self) -> bool {
        self.inner.sb(0).is_ok_and(|fs| fs.locks().is_some())
    }

    /// Does the root file system keep extended attributes (and so ACLs)?
    pub fn has_xattrs(&self) -> bool {
        self.inner.sb(0).is_ok_and(|fs| fs.xattrs().is_some())
    }

    /// Is `other` this vfs (a clone of it)?
    pub fn same(&self, other: &Vfs) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// A caller with `creds`, whose `/` is the vfs root.
    pub fn context(&self, creds: Creds) -> Ctx {
        Ctx::new(self.clone(), creds, self.inner.max_files as usize)
    }

    /// A caller with room for `max_fds` descriptors instead of the
    /// `max_files` option (a file server sizes it to its fid limit).
    pub fn context_with_fds(&self, creds: Creds, max_fds: usize) -> Ctx {
        Ctx::new(self.clone(), creds, max_fds)
    }

    /// Change a switch at run time (the options of [`OPTIONS`] marked
    /// `live`; the sizes are fixed when the vfs is built). The live switches
    /// follow, less what `cache=none` or a degraded vfs forbids.
    pub fn set_option(&self, name: &str, value: &str) -> std::result::Result<(), OptError> {
        let inner = &self.inner;
        let o = opt::find(options::OPTIONS, name).ok_or_else(|| OptError::unknown(name, value))?;
        if !o.live {
            // Sizes are fixed when the vfs is built.
            return Err(OptError::bad(
                name,
                value,
                "fixed when the vfs is built: not settable on a running one",
            ));
        }
        let mut opts = inner.opts.lock();
        let mut o = opts.clone();
        o.set(name, value)?;
        // Under the lock, so that a degrade meanwhile is either seen here
        // or applies its overrides after (coherent.rs).
        inner.sw.apply(&o, inner.degraded.load(Ordering::Acquire));
        inner.ra.set_max(o.dir_readahead as usize);
        if o.dir_readahead == 0 {
            let n = inner.ra.clear();
            inner.counters.readahead_wasted.add(n as u64);
        }
        *opts = o;
        drop(opts);
        // Cached answers may depend on the old setting.
        inner.ns_gen.fetch_add(1, Ordering::Release);
        inner.ra_log.everything();
        Ok(())
    }

    /// The options as given (to [`Vfs::new`], then [`Vfs::set_option`]):
    /// what the user asked, not what a degraded vfs does meanwhile (see
    /// [`Vfs::is_degraded`]).
    pub fn options(&self) -> Options {
        self.inner.opts.lock().clone()
    }

    /// Mount `fs` on the directory `path` (resolved as root).
    pub fn mount(&self, path: &[u8], fs: Arc<dyn FileSystem>) -> Result<()> {
        let fs = metered::Metered::wrap(fs, &self.inner.meter);
        let ctx = self.context(Creds::root());
        let at = ctx.resolve_dir(At::Fd(AT_FDCWD), path)?;
        let attr = fs.getattr(fs.root())?;
        if !attr.is_dir() {
            return Err(Errno::ENOTDIR);
        }
        let inner = &self.inner;
        let sb = {
            let mut sbs = inner.sbs.write();
            sbs.push(fs.clone());
            sbs.len() - 1
        };
        inner
            .no_ahead
            .fetch_or(readahead::never_ahead(&*fs, sb), Ordering::Relaxed);
        let mut mounts = inner.mounts.write();
        if mounts.on.contains_key(&at) {
            return Err(Errno::EBUSY);
        }
        let mut w = inner.writer();
        let entry = walkfs_fsapi::Entry {
            node: fs.root(),
            attr,
        };
        let ino = w.iget(&inner.dc, sb, &entry, true).ok_or(Errno::ENOMEM)?;
        w.take_forgets();
        let root = w
            .d_make_root(&inner.dc, ino, D_MOUNTROOT)
            .ok_or(Errno::ENOMEM)?;
        w.get_dentry(&inner.dc, at);
        mounts.on.insert(at, root);
        mounts.under.insert(root, at);
        w.set_dentry_flag(&inner.dc, at, dcache::D_MOUNTPOINT, 0);
        w.changed();
        drop(w);
        inner.ra_log.everything();
        drop(mounts);
        inner.lend_names(sb);
        self.watch_sb(sb, true);
        Ok(())
    }

    /// Return once every change made behind the caches' back before the
    /// call, and reported at all, has been applied and passed on to the
    /// listeners ([`caps::Watch::barrier`] of each file system).
    ///
    /// [`caps::Watch::barrier`]: walkfs_fsapi::caps::Watch::barrier
    pub fn settle_reports(&self) {
        let sbs: Vec<_> = self.inner.sbs.read().iter().cloned().collect();
        for fs in sbs {
            if let Some(w) = fs.watch() {
                w.barrier();
            }
        }
    }

    /// Drop every unused cached dentry (what `echo 2 > drop_caches` does).
    pub fn drop_caches(&self) {
        let inner = &self.inner;
        // Pins parked by closes are a cache too: they go first, so that
        // what they held can be evicted.
        let parked: Vec<_> = inner
            .writer()
            .parked
            .iter()
            .filter_map(std::sync::Weak::upgrade)
            .collect();
        for pc in parked {
            pc.drain(inner);
        }
        let mut w = inner.writer();
        while w.evict(&inner.dc, 4096) > 0 {}
        // What is looked up again may differ (the host changed meanwhile):
        // remembered walks must not outlive the dentries they came from.
        w.changed();
        drop(w);
        inner.ra_log.everything();
    }

    /// The calls made into the backends so far, by operation, and how
    /// many of them a caller waited for (metered.rs).
    pub fn backend_calls(&self) -> BackendCalls {
        self.inner.meter.snapshot()
    }

    pub fn cache_stats(&self) -> CacheStats {
        let inner = &self.inner;
        let w = inner.w.lock();
        let dc = &inner.dc;
        let c = &inner.counters;
        CacheStats {
            dentries: w.n_dentries,
            inodes: w.n_inodes,
            chunks: w.n_chunks,
            bytes: dc.dentries.allocated_bytes()
                + dc.inodes.allocated_bytes()
                + dc.chunks.allocated_bytes()
                + dc.buckets.len() * 4
                + w.inode_bucket_bytes()
                + inner.pc.bytes(),
            slow_lookups: c.slow_lookups.get(),
            backend_lookups: c.backend_lookups.get(),
            complete_misses: c.complete_misses.get(),
            negative_created: c.negative_created.get(),
            retries: c.retries.get(),
            changes: c.changes.get(),
            changes_lost: c.changes_lost.get(),
            changes_own: c.changes_own.get(),
            readahead_asked: c.readahead_asked.get(),
            readahead_used: c.readahead_used.get(),
            readahead_wasted: c.readahead_wasted.get(),
            readahead_wait_ns: c.readahead_wait_ns.get(),
            fileahead_asked: c.fileahead_asked.get(),
            fileahead_used: c.fileahead_used.get(),
            fileahead_wasted: c.fileahead_wasted.get(),
        }
    }
}

impl Drop for Inner {
    /// Nothing submitted is left behind: what was gathered is sent and
    /// every change in flight answered (its failure logged).
    fn drop(&mut self) {
        self.flush_all();
        self.wb.wait_all();
        self.ra.clear();
    }
}

impl Inner {
    pub fn sb(&self, idx: usize) -> Result<Arc<dyn FileSystem>> {
        self.sbs.read().get(idx).cloned().ok_or(Errno::ESTALE)
    }

    /// Milliseconds since the vfs started (the clock of negative-dentry
    /// expiry).
    pub fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// The expiry to give a new negative dentry, or `None` when negative
    /// dentries are off.
    pub fn neg_expiry(&self) -> Option<u32> {
        match self.sw.negtimeout.load(Ordering::Relaxed) {
            0 => None,
            t if t < 0 => Some(dcache::EXPIRY_FOREVER),
            t => Some((self.now_ms().saturating_add(t as u64)).min(u32::MAX as u64 - 1) as u32),
        }
    }

    /// May a directory known complete answer a miss (see
    /// [`dcache::I_COMPLETE`])? Only while negative entries never expire,
    /// and not with `cache=coherent`: there a name made on the host must
    /// be found as soon as it exists, and the report that the directory
    /// changed comes a moment later (a negative entry has that window
    /// for one name; a complete directory would have it for every name).
    #[inline]
    pub(crate) fn complete_dirs(&self) -> bool {
        !self.coherent && self.sw.negtimeout.load(Ordering::Relaxed) < 0
    }

    /// [`complete_dirs`](Inner::complete_dirs), or with `cache=coherent`
    /// for a directory `node` of `fs` under a lease (p9client lease.rs):
    /// this client is the one filling it, and a name made there by anyone
    /// else is reported as in any directory; a negative entry of each of
    /// its names would have the same window, paid a round trip each.
    #[inline]
    pub(crate) fn complete_dirs_of(&self, fs: &dyn FileSystem, node: u64) -> bool {
        self.complete_dirs()
            || (self.coherent
                && !self.degraded.load(Ordering::Relaxed)
                && self.sw.negtimeout.load(Ordering::Relaxed) < 0
                && fs.leased(walkfs_fsapi::NodeId(node)))
    }

    /// Does a lookup miss in a small directory list it whole? Where
    /// complete directories are used, and with `cache=coherent`: there
    /// the listing fills only the names it holds (kept current by the
    /// server's change reports), so the directory's other names cost no
    /// round trip each; a name it lacks is still asked for.
    #[inline]
    pub(crate) fn list_on_miss(&self) -> bool {
        self.complete_dirs() || self.coherent
    }

    /// Is a negative dentry with this expiry still good?
    #[inline(always)]
    pub fn neg_valid(&self, expiry: u32) -> bool {
        let t = self.sw.negtimeout.load(Ordering::Relaxed);
        if expiry == dcache::EXPIRY_FOREVER {
            t != 0
        } else {
            t != 0 && self.now_ms() < expiry as u64
        }
    }

    /// Record a change of the namespace made through walkfs (the writer
    /// guard calls it when dropped after an update that changed names or
    /// permissions). Called after the dentry cache shows the change: a walk
    /// that read the new generation must see the new state.
    pub fn changed(&self) {
        self.ns_gen.fetch_add(1, Ordering::Release);
    }

    /// Log, for the directory read-ahead, a change of ours to the names
    /// in directory `node` of superblock `sb`, after it went to the
    /// backend (readahead.rs).
    pub fn names_changed(&self, sb: usize, node: u64) {
        if self.lists_ahead(sb) {
            self.ra_log.record(readahead::Touched::Names((sb, node)));
        }
    }

    /// Log, for the directory read-ahead, a change of ours to the
    /// attributes of `node` of superblock `sb`, after it went to the
    /// backend (readahead.rs).
    pub fn attrs_changed(&self, sb: usize, node: u64) {
        if self.lists_ahead(sb) {
            self.ra_log.record(readahead::Touched::Attrs((sb, node)));
        }
    }

    /// The generation remembered whole paths are filed under: moves with
    /// every change of ours and every reported change that dropped a
    /// cached name (both counters only grow, so their sum does too).
    #[inline(always)]
    pub fn pc_gen(&self) -> u64 {
        self.ns_gen
            .load(Ordering::Acquire)
            .wrapping_add(self.ext_gen.load(Ordering::Acquire))
    }
}
