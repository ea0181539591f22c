//! Other writers' changes replayed through the mount, so that inotify and
//! fanotify watchers of the mount see them (docs/watchers.md).
//!
//! No FUSE notification makes the kernel emit an fsnotify event (only a
//! `FUSE_NOTIFY_DELETE` gives the victim's own watchers `IN_DELETE_SELF`),
//! but the kernel emits events for every operation it performs. So each
//! change the backend reports is carried out again, on the mount, by a
//! thread of our own that serves no FUSE request: a create as `mknodat`,
//! `mkdirat` or `symlinkat`, a delete as `unlinkat`, a rename as
//! `renameat`, a write or truncate as a truncate to the current size, an
//! attribute change as a chmod to the current mode. The daemon knows that
//! thread's requests by the caller's thread id the kernel puts in each
//! request (`fuse_in_header.pid`) and answers them from what the host
//! already holds, touching nothing ([`Replaying::replayed`]).
//!
//! The replay is a layer around the request handler ([`Replaying`]): it
//! answers the replay thread's requests, records the changes the front
//! end's own requests make, before and after the handler makes them (the
//! third invariant below), and passes every other request on; the
//! handler ([`WalkFuse`](crate::WalkFuse)) knows nothing of it.
//!
//! Invariants:
//! - the replay thread makes one call at a time; [`Replayer::plan`] says
//!   what that call's lookups must find: the name a create makes is absent,
//!   the name a delete removes is present (a *ghost*: a node id of a range
//!   no file has, which the kernel forgets after the unlink), the old name
//!   of a rename is the file now at the new name, which is absent;
//! - the plan is keyed by (parent node id, name): the replay thread opens
//!   the parent directories first (ordinary lookups), then sets the plan,
//!   so only the final names are planned;
//! - a change made through the mount itself comes back from the backend
//!   too (the host's watcher sees the daemon's own calls): the front end
//!   records what it changed and how ([`Replayer::mine`]), and a report
//!   of that kind of change of that name within [`OWN_FOR`] is taken for
//!   its echo and not replayed, so watchers see such a change once, from
//!   the kernel's own operation. Each record of a name's change answers
//!   one report (someone else may change the name right after: that is
//!   replayed); a record of an inode's data or attributes answers all of
//!   that kind within [`OWN_FOR`] (the host merges a run of writes into
//!   one report, or not).
//!
//! Nothing is dropped here: past [`QUEUE`] replays waiting, the backend's
//! reporting thread waits, and the rest of a burst waits in the backend's
//! own queue (the host's fanotify or inotify queue, 16,384 events by
//! default; a 9P server's, which merges repeats). Watchers of the mount
//! that read too slowly get the kernel's own `IN_Q_OVERFLOW`. What cannot
//! be replayed, and is logged: a backend that lost its own queue
//! (`Change::All`, a burst past both queues), or a step whose call
//! failed. The kernel's caches are invalidated either way (coherent.rs),
//! so what a watcher then reads is current.

use std::collections::HashMap;
use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use walkfs_fusewire::abi;
use walkfs_vfs::{Change, ChangeSink, Creds, Ctx, Errno, Handle, Vfs, What};

mod layer;
pub(crate) use layer::Replaying;

/// Replays waiting at most (some 100 bytes each: 25 MB at most). Large:
/// beyond it the backend's own queue fills, and is lost when full; and
/// each new fanotify event is compared with those queued (to merge
/// repeats), so a full kernel queue slows the host's own writers.
const QUEUE: usize = 256 * 1024;
/// How long a change made through the mount keeps the backend's report
/// of it from being replayed.
const OWN_FOR: Duration = Duration::from_secs(2);
/// Node ids of ghosts (see the module comment): a range no file has.
const GHOST_BASE: u64 = 0xfff0_0000_0000_0000;

/// One change to carry out on the mount; paths are relative to its root.
#[derive(Debug)]
enum Step {
    Create {
        path: Vec<u8>,
        is_dir: bool,
    },
    /// `was`: the inode number and mode the name had (as the vfs last
    /// knew it), so that the kernel unlinks the inode it holds, whose own
    /// watchers (a recursive fs.watch watches every file) then see it go.
    Delete {
        path: Vec<u8>,
        is_dir: bool,
        was: Option<(u64, u32)>,
    },
    Modify(Vec<u8>),
    Attrib(Vec<u8>),
    Move {
        from: Vec<u8>,
        to: Vec<u8>,
    },
}

/// A file's (size, mtime in ns).
type Stamp = (u64, i64);

/// A `moved_from` waiting for its `moved_to`.
type Pending = (Vec<u8>, u32, bool, Option<(u64, u32)>);

/// What the replay thread's current call must find at a name.
#[derive(Clone, Debug)]
enum Expect {
    Absent,
    /// A name the host no longer has: the file the kernel knew there
    /// (`was`, if it still knows it) or a ghost.
    Gone {
        is_dir: bool,
        was: Option<(u64, u32)>,
    },
    /// The file now at `name` in the directory with node id `parent`.
    Is {
        parent: u64,
        name: Vec<u8>,
    },
}

/// What the front end changed itself, recently: a name of a directory
/// (inode numbers), or an inode.
#[derive(Clone, PartialEq, Eq, Hash)]
pub(crate) enum Own {
    Entry(u64, Vec<u8>),
    Inode(u64),
}

pub(crate) struct Replayer {
    vfs: Vfs,
    /// Files the kernel writes straight to the host (passthrough): their
    /// data changes are the mount's own while they are open.
    pt: Arc<crate::passthrough::Backings>,
    /// Root credentials: the replay reads what the host holds.
    base: Ctx,
    root: Handle,
    mountpoint: OnceLock<PathBuf>,
    tx: Mutex<Option<SyncSender<Step>>>,
    /// The replay thread's id (0 until it runs).
    tid: AtomicU32,
    plan: Mutex<HashMap<(u64, Vec<u8>), Expect>>,
    /// What each recent change of the front end's own was, and when.
    own: Mutex<HashMap<Own, Vec<(What, Instant)>>>,
    /// Files the kernel wrote straight to the host (passthrough), by
    /// inode number: when their last open closed, and their (size,
    /// mtime) then. A report of their data arriving after the close is
    /// the mount's own if the host still has that state.
    closed: Mutex<HashMap<u64, (Instant, Stamp)>>,
    /// A `moved_from` waiting for its `moved_to`: (path, cookie, is_dir,
    /// what the name was: see [`Step::Delete`]).
    from: Mutex<Option<Pending>>,
    next_ghost: AtomicU64,
    warned: AtomicBool,
    /// The session's notifier: the names a step touches are invalidated
    /// in the kernel around it.
    notifier: OnceLock<walkfs_fusewire::Notifier>,
    /// The mount root's st_ino (FUSE's node 1), read at each step.
    root_id: AtomicU64,
    /// The source never reports this mount's own changes back (a walkfs
    /// server leaves each client's own out: server own.rs): every report
    /// is another writer's, however soon after a change of ours to the
    /// same file, and none is matched against [`Replayer::mine`]'s
    /// records.
    no_echoes: bool,
    /// Steps queued, and steps carried out (or failed): [`Replayer::drain`].
    queued: AtomicU64,
    done: Mutex<u64>,
    done_cv: parking_lot::Condvar,
}

/// How long [`Replayer::drain`] waits at most.
const DRAIN_WAIT: Duration = Duration::from_secs(5);

impl Replayer {
    pub fn new(vfs: &Vfs, pt: Arc<crate::passthrough::Backings>) -> Result<Replayer, Errno> {
        let base = vfs.context(Creds::root());
        let root = base.handle(walkfs_vfs::AT_FDCWD, b"/")?;
        Ok(Replayer {
            vfs: vfs.clone(),
            pt,
            base,
            root,
            mountpoint: OnceLock::new(),
            tx: Mutex::new(None),
            tid: AtomicU32::new(0),
            plan: Mutex::new(HashMap::new()),
            own: Mutex::new(HashMap::new()),
            closed: Mutex::new(HashMap::new()),
            from: Mutex::new(None),
            next_ghost: AtomicU64::new(GHOST_BASE),
            warned: AtomicBool::new(false),
            notifier: OnceLock::new(),
            root_id: AtomicU64::new(0),
            no_echoes: vfs.is_remote(),
            queued: AtomicU64::new(0),
            done: Mutex::new(0),
            done_cv: parking_lot::Condvar::new(),
        })
    }

    /// Start replaying on `mountpoint` (mounted, its session running).
    pub fn start(self: &Arc<Self>, mountpoint: PathBuf, notifier: walkfs_fusewire::Notifier) {
        let _ = self.mountpoint.set(mountpoint);
        let _ = self.notifier.set(notifier);
        let (tx, rx) = sync_channel(QUEUE);
        *self.tx.lock() = Some(tx);
        let me = Arc::clone(self);
        let r = std::thread::Builder::new()
            .name("fuse-replay".into())
            .spawn(move || me.run(rx));
        if let Err(e) = r {
            tracing::warn!("no replay of other writers' changes to watchers: {e}");
        }
    }

    /// The front end changed `what` itself, as `how` says: the backend's
    /// report of it is not replayed.
    #[inline]
    pub fn mine(&self, what: Own, how: What) {
        if self.tid.load(Relaxed) == 0 {
            return;
        }
        let mut own = self.own.lock();
        let now = Instant::now();
        if own.len() > 64 * 1024 {
            own.retain(|_, v| {
                v.retain(|(_, t)| now.duration_since(*t) < OWN_FOR);
                !v.is_empty()
            });
        }
        own.entry(what).or_default().push((how, now));
    }

    /// The kernel's passthrough writes to inode `ino` ended with its last
    /// close, leaving it `stamp` (size, mtime in ns).
    pub fn closed(&self, ino: u64, stamp: Stamp) {
        if self.tid.load(Relaxed) == 0 {
            return;
        }
        let mut closed = self.closed.lock();
        if closed.len() > 64 * 1024 {
            closed.retain(|_, (t, _)| t.elapsed() < OWN_FOR);
        }
        closed.insert(ino, (Instant::now(), stamp));
    }

    /// Is a size and mtime of `ino` recorded within [`OWN_FOR`]?
    fn stamped(&self, ino: u64) -> bool {
        self.closed
            .lock()
            .get(&ino)
            .is_some_and(|(t, _)| t.elapsed() < OWN_FOR)
    }

    /// Is a report of `ino`'s data (at `path`) the echo of the kernel's
    /// passthrough writes before a recent close: does the host still
    /// have the size and mtime it had at that close?
    fn written_before_close(&self, ino: u64, path: &[u8]) -> bool {
        let Some((t, stamp)) = self.closed.lock().get(&ino).copied() else {
            return false;
        };
        if t.elapsed() >= OWN_FOR {
            return false;
        }
        self.host_stat(path).is_ok_and(|x| {
            let mtime = x.stx_mtime.tv_sec * 1_000_000_000 + i64::from(x.stx_mtime.tv_nsec);
            (x.stx_size, mtime) == stamp
        })
    }

    /// Whether a report of `what` changed as `how` is the echo of a
    /// change of the front end's own (module comment). A source that
    /// cannot tell the kind (`Unknown`) matches any.
    fn is_mine(&self, what: &Own, how: What) -> bool {
        if self.no_echoes {
            return false;
        }
        let mut own = self.own.lock();
        let Some(v) = own.get_mut(what) else {
            return false;
        };
        v.retain(|(_, t)| t.elapsed() < OWN_FOR);
        let hit = v
            .iter()
            .position(|&(w, _)| w == how || how == What::Unknown || w == What::Unknown);
        let mine = match (hit, what) {
            (None, _) => false,
            (Some(_), Own::Inode(_)) => true,
            (Some(i), Own::Entry(..)) => {
                v.remove(i);
                true
            }
        };
        if v.is_empty() {
            own.remove(what);
        }
        mine
    }

    /// The ENTRY of a ghost (module comment): no timeouts, so the
    /// kernel asks again before anyone else uses the name.
    fn ghost(&self, is_dir: bool) -> abi::EntryOut {
        let id = self.next_ghost.fetch_add(1, Relaxed);
        let a = abi::Attr {
            ino: id,
            mode: if is_dir {
                libc::S_IFDIR | 0o755
            } else {
                libc::S_IFREG | 0o644
            },
            nlink: if is_dir { 2 } else { 1 },
            blksize: 4096,
            ..Default::default()
        };
        abi::EntryOut {
            nodeid: id,
            attr: a,
            ..Default::default()
        }
    }

    /// Queue a step; waits while [`QUEUE`] are waiting (the replay thread
    /// needs nothing of the caller's: it is a reporting thread, never a
    /// request's).
    fn send(&self, s: Step) {
        let tx = self.tx.lock().clone();
        let Some(tx) = tx else { return };
        self.queued.fetch_add(1, Relaxed);
        // Disconnected: the replay thread ended (the mount is going).
        if tx.send(s).is_err() {
            self.step_done();
        }
    }

    fn step_done(&self) {
        *self.done.lock() += 1;
        self.done_cv.notify_all();
    }

    /// Return once every step queued before the call is carried out (at
    /// most [`DRAIN_WAIT`]: a stuck replay must not hold the caller).
    pub fn drain(&self) {
        let upto = self.queued.load(Relaxed);
        let deadline = Instant::now() + DRAIN_WAIT;
        let mut done = self.done.lock();
        while *done < upto {
            if self.done_cv.wait_until(&mut done, deadline).timed_out() {
                tracing::warn!("replay: steps still waiting after {DRAIN_WAIT:?}");
                return;
            }
        }
    }

    fn flush_from(&self) {
        if let Some((path, _, is_dir, was)) = self.from.lock().take() {
            self.send(Step::Delete { path, is_dir, was });
        }
    }

    /// The replay thread: one step at a time.
    fn run(self: Arc<Self>, rx: Receiver<Step>) {
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::gettid() } as u32;
        self.tid.store(tid, Relaxed);
        let Some(mnt) = self.mountpoint.get() else {
            return;
        };
        for step in rx {
            // Opened for each step, never held: an idle replayer must not
            // keep the mount busy (umount would refuse).
            let r = open_dir(None, mnt.as_os_str().as_bytes()).and_then(|root| {
                self.root_id.store(node_of(&root)?, Relaxed);
                self.replay(&root, &step)
            });
            // The kernel's own call moved its cached names by what it
            // held, which may be older than the plan (a name it had
            // cached as the file the host put there since): its names
            // the step touched go, and are looked up anew.
            let touched: Vec<(u64, Vec<u8>)> = self.plan.lock().drain().map(|(k, _)| k).collect();
            for (parent, name) in touched {
                self.inval_entry(parent, &name);
            }
            self.step_done();
            // A failure: the change was overtaken by another (the file
            // went, or the kernel already holds the name), nothing to show.
            if let Err(e) = r {
                tracing::debug!("replay of {step:?}: {e}");
            }
        }
    }

    fn replay(&self, root: &OwnedFd, step: &Step) -> Result<(), Errno> {
        match step {
            Step::Create { path, is_dir } => {
                // Gone again already (a burst of creates and deletes): the
                // create is still shown, of a ghost, which the delete
                // that follows removes (the daemon answers a create of a
                // name the host lacks with a ghost).
                let (mode, rdev) = match self.host_stat(path) {
                    Ok(x) => (
                        u32::from(x.stx_mode),
                        libc::makedev(x.stx_rdev_major, x.stx_rdev_minor),
                    ),
                    Err(Errno::ENOENT) if *is_dir => (libc::S_IFDIR | 0o755, 0),
                    Err(Errno::ENOENT) => (libc::S_IFREG | 0o644, 0),
                    Err(e) => return Err(e),
                };
                let (dir, name) = self.parent(root, path)?;
                self.expect(&dir, name, Expect::Absent)?;
                let c = cstr(name)?;
                // SAFETY: `dir` is an open descriptor and `c` a C string,
                // both alive across each call.
                let r = match mode & libc::S_IFMT {
                    libc::S_IFDIR => unsafe {
                        libc::mkdirat(dir.as_raw_fd(), c.as_ptr(), mode & 0o7777)
                    },
                    libc::S_IFLNK => {
                        let target = cstr(&self.host_readlink(path).unwrap_or_default())?;
                        // SAFETY: as above.
                        unsafe { libc::symlinkat(target.as_ptr(), dir.as_raw_fd(), c.as_ptr()) }
                    }
                    _ => {
                        // SAFETY: as above.
                        unsafe { libc::mknodat(dir.as_raw_fd(), c.as_ptr(), mode, rdev) }
                    }
                };
                check(r)
            }
            Step::Delete { path, is_dir, was } => {
                let (dir, name) = self.parent(root, path)?;
                self.expect(
                    &dir,
                    name,
                    Expect::Gone {
                        is_dir: *is_dir,
                        was: *was,
                    },
                )?;
                let c = cstr(name)?;
                let flags = if *is_dir { libc::AT_REMOVEDIR } else { 0 };
                // SAFETY: `dir` is open, `c` a C string.
                check(unsafe { libc::unlinkat(dir.as_raw_fd(), c.as_ptr(), flags) })
            }
            Step::Modify(path) => {
                let x = self.host_stat(path)?;
                if u32::from(x.stx_mode) & libc::S_IFMT != libc::S_IFREG {
                    return Ok(());
                }
                let p = self.absolute(path)?;
                // SAFETY: `p` is a C string.
                check(unsafe { libc::truncate(p.as_ptr(), x.stx_size as libc::off_t) })
            }
            Step::Attrib(path) => {
                let x = self.host_stat(path)?;
                if u32::from(x.stx_mode) & libc::S_IFMT == libc::S_IFLNK {
                    return Ok(());
                }
                let (dir, name) = self.parent(root, path)?;
                let c = cstr(name)?;
                let mode = u32::from(x.stx_mode) & 0o7777;
                // SAFETY: `dir` is open, `c` a C string.
                check(unsafe { libc::fchmodat(dir.as_raw_fd(), c.as_ptr(), mode, 0) })
            }
            Step::Move { from, to } => {
                let (fdir, fname) = self.parent(root, from)?;
                let (tdir, tname) = self.parent(root, to)?;
                let tparent = node_of(&tdir)?;
                self.expect(
                    &fdir,
                    fname,
                    Expect::Is {
                        parent: tparent,
                        name: tname.to_vec(),
                    },
                )?;
                self.expect(&tdir, tname, Expect::Absent)?;
                let (a, b) = (cstr(fname)?, cstr(tname)?);
                // SAFETY: both descriptors open, both C strings alive.
                check(unsafe {
                    libc::renameat(fdir.as_raw_fd(), a.as_ptr(), tdir.as_raw_fd(), b.as_ptr())
                })
            }
        }
    }

    /// The parent directory of `path` on the mount, opened (ordinary
    /// lookups), and the last name.
    fn parent<'p>(&self, root: &OwnedFd, path: &'p [u8]) -> Result<(OwnedFd, &'p [u8]), Errno> {
        let (dir, name) = match path.iter().rposition(|&b| b == b'/') {
            Some(i) => (&path[..i], &path[i + 1..]),
            None => (&b"."[..], path),
        };
        if name.is_empty() {
            return Err(Errno::EINVAL);
        }
        Ok((open_dir(Some(root), dir)?, name))
    }

    /// Plan what the lookup of `name` in `dir` finds, and drop the
    /// kernel's cached entry of it, so that the kernel asks.
    fn expect(&self, dir: &OwnedFd, name: &[u8], e: Expect) -> Result<(), Errno> {
        let parent = node_of(dir)?;
        self.plan.lock().insert((parent, name.to_vec()), e);
        self.inval_entry(parent, name);
        Ok(())
    }

    /// Invalidate the kernel's entry `name` in the directory whose st_ino
    /// is `parent` (the root's is FUSE's node 1).
    fn inval_entry(&self, parent: u64, name: &[u8]) {
        let parent = if parent == self.root_id.load(Relaxed) {
            crate::ROOT
        } else {
            parent
        };
        if let Some(n) = self.notifier.get() {
            let _ = n.inval_entry(parent, name);
        }
    }

    /// The path, relative to the mount's root, of `name` in the directory
    /// that is backend node `dir` (superblock 0: nothing is mounted under
    /// a FUSE mount's source).
    fn rel_path(&self, dir: u64, name: &[u8]) -> Option<Vec<u8>> {
        let d = self.vfs.dir_path(0, dir)?;
        let mut p = d.trim_start_matches('/').as_bytes().to_vec();
        if !p.is_empty() {
            p.push(b'/');
        }
        p.extend_from_slice(name);
        Some(p)
    }

    /// What the host holds at `path` now (the vfs was told of the change
    /// before the replay was queued).
    fn host_stat(&self, path: &[u8]) -> Result<walkfs_vfs::Statx, Errno> {
        self.base.statx(
            &self.root,
            path,
            libc::AT_SYMLINK_NOFOLLOW,
            libc::STATX_BASIC_STATS,
        )
    }

    fn host_readlink(&self, path: &[u8]) -> Result<Vec<u8>, Errno> {
        self.base.readlinkat(&self.root, path)
    }

    fn absolute(&self, path: &[u8]) -> Result<CString, Errno> {
        let mnt = self.mountpoint.get().ok_or(Errno::ENOENT)?;
        let mut p = mnt.as_os_str().as_bytes().to_vec();
        p.push(b'/');
        p.extend_from_slice(path);
        cstr(&p)
    }
}

impl ChangeSink for Replayer {
    fn changed(&self, changes: &[Change]) {
        for c in changes {
            match c {
                Change::Entry {
                    dir,
                    dir_ino,
                    name,
                    how,
                } => {
                    if self.is_mine(&Own::Entry(*dir_ino, name.clone()), how.what) {
                        continue;
                    }
                    let Some(path) = self.rel_path(dir.0, name) else {
                        continue;
                    };
                    // Superblock 0: the source's own.
                    let was = match how.what {
                        What::Deleted | What::MovedFrom | What::Unknown => {
                            self.vfs.cached_child(0, dir.0, name)
                        }
                        _ => None,
                    };
                    match how.what {
                        What::MovedFrom => {
                            self.flush_from();
                            *self.from.lock() = Some((path, how.cookie, how.is_dir, was));
                        }
                        What::MovedTo => {
                            let from = self.from.lock().take();
                            match from {
                                Some((f, cookie, _, _)) if cookie == how.cookie => {
                                    self.send(Step::Move { from: f, to: path })
                                }
                                other => {
                                    if let Some((f, _, d, was)) = other {
                                        self.send(Step::Delete {
                                            path: f,
                                            is_dir: d,
                                            was,
                                        });
                                    }
                                    self.send(Step::Create {
                                        path,
                                        is_dir: how.is_dir,
                                    });
                                }
                            }
                        }
                        What::Created => {
                            self.flush_from();
                            self.send(Step::Create {
                                path,
                                is_dir: how.is_dir,
                            });
                        }
                        What::Deleted => {
                            self.flush_from();
                            self.send(Step::Delete {
                                path,
                                is_dir: how.is_dir,
                                was,
                            });
                        }
                        // A name's data or attributes changed, and the
                        // name was gone when the source read the event (a
                        // burst read late): the event of its going follows,
                        // and is what is replayed.
                        What::Modified | What::Attrib => {}
                        // A source that cannot tell (9P): the name is there
                        // now or it is not.
                        What::Unknown => {
                            self.flush_from();
                            match self.host_stat(&path) {
                                Ok(x) => self.send(Step::Create {
                                    path,
                                    is_dir: u32::from(x.stx_mode) & libc::S_IFMT == libc::S_IFDIR,
                                }),
                                Err(_) => self.send(Step::Delete {
                                    path,
                                    is_dir: was
                                        .is_some_and(|(_, m)| m & libc::S_IFMT == libc::S_IFDIR),
                                    was,
                                }),
                            }
                        }
                    }
                }
                Change::Inode { ino, how, at, .. } => {
                    // (A file open with a backing file is written by the
                    // kernel itself: what the host reports of it while it
                    // is open is taken for the mount's own. Node ids are
                    // inode numbers where they can be.)
                    // A data change with the host's size and mtime recorded
                    // after the mount's own last write
                    // (Replaying::mine_written) is
                    // the mount's own while the host still has them, and
                    // another writer's otherwise, however soon after.
                    let data = how.what != What::Attrib;
                    let stamped = data && self.stamped(*ino);
                    if self.pt.backed(*ino)
                        || (!stamped && self.is_mine(&Own::Inode(*ino), how.what))
                    {
                        continue;
                    }
                    let Some(seen) = at else { continue };
                    let Some(path) = self.rel_path(seen.dir.0, &seen.name) else {
                        continue;
                    };
                    if data && self.written_before_close(*ino, &path) {
                        continue;
                    }
                    self.flush_from();
                    match how.what {
                        What::Attrib => self.send(Step::Attrib(path)),
                        _ => self.send(Step::Modify(path)),
                    }
                }
                Change::All | Change::Degraded => {
                    self.flush_from();
                    if !self.warned.swap(true, Relaxed) {
                        tracing::warn!(
                            "the source lost changes (its queue overflowed): watchers \
                             of the mount miss them (the caches are invalidated)"
                        );
                    }
                }
            }
        }
    }
}

fn cstr(b: &[u8]) -> Result<CString, Errno> {
    CString::new(b).map_err(|_| Errno::EINVAL)
}

fn check(r: libc::c_int) -> Result<(), Errno> {
    if r < 0 {
        Err(Errno(
            std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO),
        ))
    } else {
        Ok(())
    }
}

/// Open directory `path` (relative to `at`, or absolute) as `O_PATH`.
fn open_dir(at: Option<&OwnedFd>, path: &[u8]) -> Result<OwnedFd, Errno> {
    let c = cstr(path)?;
    let dirfd = at.map_or(libc::AT_FDCWD, |f| f.as_raw_fd());
    // SAFETY: `c` is a C string; `dirfd` is open or AT_FDCWD.
    let fd = unsafe {
        libc::openat(
            dirfd,
            c.as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    check(fd)?;
    // SAFETY: `fd` was just opened and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The FUSE node id of an open directory on the mount (its st_ino: node
/// ids are what the kernel reports as inode numbers).
fn node_of(fd: &OwnedFd) -> Result<u64, Errno> {
    // SAFETY: all-zero is a valid `struct stat`; `fd` is open.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    check(unsafe { libc::fstat(fd.as_raw_fd(), &mut st) })?;
    Ok(st.st_ino)
}
