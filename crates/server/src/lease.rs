//! Leases (p9::lease, docs/lease-protocol.md): a client that holds one on
//! a directory answers the closes of the files it makes there without
//! waiting for this server, and this server recalls the lease before
//! anyone else may look.
//!
//! "Anyone else" is a program on the server's host. Where the kernel
//! offers fanotify permission events and this process may use them (a
//! group of class `FAN_CLASS_CONTENT` needs `CAP_SYS_ADMIN`, so the group
//! is made before the sandbox drops it), the leased directory and each
//! file the holder makes there get an inode mark for `FAN_OPEN_PERM`: a
//! host program's open (a `cat`, an `ls`, an editor) waits in the kernel
//! while the lease is recalled. The recall is a record on the holder's
//! notification fid; the holder sends what it still gathers and clunks
//! the lease fid, and since the connection's order puts that clunk after
//! every change sent before it, the changes are all on the host when the
//! open goes on. A holder that does not give the lease back within
//! [`RECALL_BOUND`] loses it: the open goes on, and it is logged.
//!
//! Invariants:
//! - the marks are added before the grant is answered (the directory)
//!   and before the create is answered (a file), so there is no moment
//!   when the holder may skip a wait and the host is not held;
//! - this process's own opens are never held (the event's pid is ours):
//!   the server carrying out the holder's changes, and in one process
//!   with a FUSE mount, the mount itself, must not wait for a recall
//!   that waits for them.
//!
//! Where the events are not offered, no lease is granted (`EOPNOTSUPP`)
//! and the client's closes wait, as before.

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::notify::Peer;

/// How long a host program waits for a holder to give its lease back.
pub const RECALL_BOUND: Duration = Duration::from_secs(2);
/// How long a recalled directory is not leased again (a host program
/// working in it would recall every lease at once).
const COOL: Duration = Duration::from_secs(1);

const FAN_CLASS_CONTENT: u32 = 0x04;
const FAN_CLOEXEC: u32 = 0x01;
const FAN_OPEN_PERM: u64 = 0x0001_0000;
const FAN_ONDIR: u64 = 0x4000_0000;
const FAN_EVENT_ON_CHILD: u64 = 0x0800_0000;
/// A leased directory's mark: opens of it and of every file in it (a
/// file made there is held from the moment it exists, not from a mark
/// added after it was made).
const DIR_MASK: u64 = FAN_OPEN_PERM | FAN_ONDIR | FAN_EVENT_ON_CHILD;
/// How long an open of a file no lease knows waits for makes under way.
const MAKE_WAIT: Duration = Duration::from_millis(100);
const FAN_MARK_ADD: u32 = 0x01;
const FAN_MARK_REMOVE: u32 = 0x02;
const FAN_MARK_FLUSH: u32 = 0x80;
const FAN_ALLOW: u32 = 0x01;
const FAN_NOFD: i32 = -1;

/// (device, inode) of a host file.
type Key = (u64, u64);

fn key_of(fd: BorrowedFd<'_>) -> io::Result<Key> {
    // SAFETY: `st` is plain data fstat fills; `fd` is a live descriptor.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((st.st_dev, st.st_ino))
}

/// The fanotify group that holds host programs' opens (made while the
/// process may: see the module comment).
pub struct HostGuard {
    fd: OwnedFd,
}

impl HostGuard {
    /// `EPERM` without `CAP_SYS_ADMIN`; `EINVAL`/`ENOSYS` where the kernel
    /// has no permission events.
    pub fn open() -> io::Result<HostGuard> {
        let flags = (libc::O_RDONLY | libc::O_CLOEXEC | libc::O_LARGEFILE) as u32;
        // SAFETY: a plain system call; the result is checked.
        let fd = unsafe { libc::fanotify_init(FAN_CLASS_CONTENT | FAN_CLOEXEC, flags) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just returned to us and is owned by nobody else.
        Ok(HostGuard {
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    /// Add or remove a mark on `target`: a directory's `O_PATH`
    /// descriptor (`dot`: marked through the path ".", as fanotify takes
    /// no `O_PATH` descriptor itself) or an open file.
    fn mark(&self, add: bool, target: BorrowedFd<'_>, dot: bool, mask: u64) -> io::Result<()> {
        let op = if add { FAN_MARK_ADD } else { FAN_MARK_REMOVE };
        let path: *const libc::c_char = if dot { c".".as_ptr() } else { std::ptr::null() };
        // SAFETY: `target` is a live descriptor and `path` null or a
        // string literal.
        let r =
            unsafe { libc::fanotify_mark(self.fd.as_raw_fd(), op, mask, target.as_raw_fd(), path) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Remove every file's and directory's mark.
    fn flush(&self) {
        // SAFETY: a plain system call; nothing is passed by pointer.
        let r = unsafe {
            libc::fanotify_mark(
                self.fd.as_raw_fd(),
                FAN_MARK_FLUSH,
                0,
                libc::AT_FDCWD,
                std::ptr::null(),
            )
        };
        if r < 0 {
            tracing::warn!(
                "leases: cannot remove marks: {}",
                io::Error::last_os_error()
            );
        }
    }
}

/// A make under way (see [`Leases::begin_make`]).
pub struct Making<'a> {
    leases: &'a Leases,
}

impl Drop for Making<'_> {
    fn drop(&mut self) {
        self.leases.making.lock().1 += 1;
        self.leases.made.notify_all();
    }
}

/// One lease: a connection's, on one directory.
pub struct Lease {
    /// The lease fid: what the recall record names.
    fid: u32,
    dir: Key,
    peer: Weak<dyn Peer>,
    /// The directory's `O_PATH` descriptor, to unmark it.
    dir_fd: Arc<OwnedFd>,
    /// Host files it covers (the directory first): the directory's mark
    /// reports opens of each (`FAN_EVENT_ON_CHILD`).
    marked: Mutex<Vec<Key>>,
    state: Mutex<State>,
    cv: Condvar,
}

#[derive(Default)]
struct State {
    recalled: bool,
    released: bool,
}

/// The lease fid's hold on its lease: dropped when the fid goes (its
/// `Tclunk`, which runs after the connection's earlier changes, or the
/// connection's end, after all it sent was carried out).
pub struct Hold {
    lease: Arc<Lease>,
    leases: Arc<Leases>,
}

impl Drop for Hold {
    fn drop(&mut self) {
        self.leases.release(&self.lease);
    }
}

#[derive(Default)]
struct Table {
    /// Every marked host file, the directory included, to its lease.
    by_key: HashMap<Key, Arc<Lease>>,
    dirs: HashMap<Key, Arc<Lease>>,
    cooling: HashMap<Key, Instant>,
    /// Leases held per connection ([`peer_id`]).
    holders: HashMap<usize, usize>,
}

/// A connection's identity among the holders.
fn peer_id(p: &Weak<dyn Peer>) -> usize {
    p.as_ptr() as *const () as usize
}

/// The server's leases.
pub struct Leases {
    guard: Option<HostGuard>,
    /// The thread answering the guard's events runs (started with the
    /// first grant: threads started before the sandbox would escape it).
    running: std::sync::Once,
    t: Mutex<Table>,
    /// Leases held (`t.dirs.len()`, kept with it): every request of
    /// every connection asks whether another holds one, and while none
    /// does it reads this instead of locking the table.
    held: std::sync::atomic::AtomicUsize,
    /// Files makes begun and finished, and their signal.
    making: Mutex<(u64, u64)>,
    made: Condvar,
}

impl Leases {
    pub fn new(guard: Option<HostGuard>) -> Arc<Leases> {
        Arc::new(Leases {
            guard,
            running: std::sync::Once::new(),
            t: Mutex::new(Table::default()),
            held: Default::default(),
            making: Mutex::new((0, 0)),
            made: Condvar::new(),
        })
    }

    /// Grant connection `peer` a lease on directory `dir` (its backend
    /// descriptor), to be named by lease fid `fid`.
    pub(crate) fn grant(
        self: &Arc<Self>,
        peer: Weak<dyn Peer>,
        fid: u32,
        dir: Arc<OwnedFd>,
    ) -> walkfs_vfs::Result<Hold> {
        use walkfs_vfs::Errno;
        let guard = self.guard.as_ref().ok_or(Errno::EOPNOTSUPP)?;
        self.start();
        let key = key_of(dir.as_fd()).map_err(Errno::from)?;
        let mut t = self.t.lock();
        if t.dirs.contains_key(&key) {
            return Err(Errno::EAGAIN);
        }
        if let Some(at) = t.cooling.get(&key) {
            if at.elapsed() < COOL {
                return Err(Errno::EAGAIN);
            }
            t.cooling.remove(&key);
        }
        guard.mark(true, dir.as_fd(), true, DIR_MASK).map_err(|e| {
            tracing::info!("leases: cannot mark a directory ({e}); none granted");
            Errno::EOPNOTSUPP
        })?;
        let lease = Arc::new(Lease {
            fid,
            dir: key,
            peer,
            marked: Mutex::new(vec![key]),
            dir_fd: dir,
            state: Mutex::new(State::default()),
            cv: Condvar::new(),
        });
        t.dirs.insert(key, Arc::clone(&lease));
        self.held
            .store(t.dirs.len(), std::sync::atomic::Ordering::Release);
        t.by_key.insert(key, Arc::clone(&lease));
        *t.holders.entry(peer_id(&lease.peer)).or_default() += 1;
        Ok(Hold {
            lease,
            leases: Arc::clone(self),
        })
    }

    /// `file` (a host descriptor) was made under `lease`: a host open of
    /// it recalls the lease too.
    pub fn cover(&self, lease: &Arc<Lease>, file: Arc<OwnedFd>) {
        let Ok(key) = key_of(file.as_fd()) else {
            return;
        };
        let mut t = self.t.lock();
        if lease.state.lock().released {
            return;
        }
        t.by_key.insert(key, Arc::clone(lease));
        lease.marked.lock().push(key);
    }

    /// A file is about to be made in a directory some lease may hold:
    /// until the guard returned is dropped (the file made, and covered if
    /// it is the holder's), a host open of a child of a leased directory
    /// that no lease knows waits for it (see [`answer_events`]).
    pub fn begin_make(&self) -> Making<'_> {
        self.making.lock().0 += 1;
        Making { leases: self }
    }

    /// Wait until every make begun before now has finished (at most
    /// [`MAKE_WAIT`]).
    fn settle_makes(&self) {
        let deadline = Instant::now() + MAKE_WAIT;
        let mut m = self.making.lock();
        let began = m.0;
        while m.1 < began {
            if self.made.wait_until(&mut m, deadline).timed_out() {
                return;
            }
        }
    }

    /// Is a make under way?
    fn making_now(&self) -> bool {
        let m = self.making.lock();
        m.1 < m.0
    }

    fn release(&self, lease: &Arc<Lease>) {
        let mut t = self.t.lock();
        let recalled = {
            let mut s = lease.state.lock();
            s.released = true;
            s.recalled
        };
        lease.cv.notify_all();
        if t.dirs
            .get(&lease.dir)
            .is_some_and(|l| Arc::ptr_eq(l, lease))
        {
            t.dirs.remove(&lease.dir);
            self.held
                .store(t.dirs.len(), std::sync::atomic::Ordering::Release);
            let id = peer_id(&lease.peer);
            if let Some(n) = t.holders.get_mut(&id) {
                *n -= 1;
                if *n == 0 {
                    t.holders.remove(&id);
                }
            }
        }
        for k in lease.marked.lock().drain(..) {
            if t.by_key.get(&k).is_some_and(|l| Arc::ptr_eq(l, lease)) {
                t.by_key.remove(&k);
            }
        }
        if let Some(g) = &self.guard {
            if t.dirs.is_empty() {
                g.flush();
            } else {
                let _ = g.mark(false, lease.dir_fd.as_fd(), true, DIR_MASK);
            }
        }
        if recalled {
            t.cooling.insert(lease.dir, Instant::now());
            t.cooling.retain(|_, at| at.elapsed() < COOL);
        }
    }

    /// Ask `lease`'s holder to give it back, and wait until it has, or
    /// for [`RECALL_BOUND`].
    pub fn recall(&self, lease: &Arc<Lease>) {
        let first = {
            let mut s = lease.state.lock();
            if s.released {
                return;
            }
            !std::mem::replace(&mut s.recalled, true)
        };
        if first {
            tracing::debug!(
                "leases: recalling lease {} on directory {:?}",
                lease.fid,
                lease.dir
            );
            // A connection that is going needs no recall: its fids, the
            // lease's among them, drop once what it sent was carried out.
            if let Some(p) = lease.peer.upgrade() {
                crate::notify::recall(&*p, lease.fid);
            }
        }
        let deadline = Instant::now() + RECALL_BOUND;
        let mut s = lease.state.lock();
        while !s.released {
            if lease.cv.wait_until(&mut s, deadline).timed_out() {
                break;
            }
        }
        if !s.released {
            drop(s);
            tracing::warn!(
                "leases: a client did not give back its lease on directory {:?} within {:?}; revoked",
                lease.dir,
                RECALL_BOUND
            );
            self.release(lease);
        }
    }

    fn start(self: &Arc<Self>) {
        self.running.call_once(|| {
            let weak = Arc::downgrade(self);
            let r = std::thread::Builder::new()
                .name("lease-guard".into())
                .spawn(move || answer_events(weak));
            if let Err(e) = r {
                tracing::error!("leases: cannot start the guard thread: {e}");
            }
        });
    }

    fn lease_of(&self, key: Key) -> Option<Arc<Lease>> {
        self.t.lock().by_key.get(&key).cloned()
    }

    /// The lease `peer` holds on directory `dir` (its backend
    /// descriptor), if any.
    pub(crate) fn held_by(&self, peer: &Weak<dyn Peer>, dir: BorrowedFd<'_>) -> Option<Arc<Lease>> {
        let t = self.t.lock();
        if t.dirs.is_empty() {
            return None;
        }
        let l = t.dirs.get(&key_of(dir).ok()?)?;
        Weak::ptr_eq(&l.peer, peer).then(|| Arc::clone(l))
    }

    /// Does a connection other than `me` hold a lease?
    pub(crate) fn others_hold(&self, me: &Weak<dyn Peer>) -> bool {
        if !self.any() {
            return false;
        }
        let t = self.t.lock();
        let mine = usize::from(t.holders.contains_key(&peer_id(me)));
        t.holders.len() > mine
    }

    /// Connection `me` is about to use the host file `fd`: if another
    /// connection's lease covers it, recall that lease and wait.
    pub(crate) fn recall_for(&self, me: &Weak<dyn Peer>, fd: BorrowedFd<'_>) {
        let Ok(key) = key_of(fd) else { return };
        let lease = {
            let t = self.t.lock();
            match t.by_key.get(&key) {
                Some(l) if !Weak::ptr_eq(&l.peer, me) => Arc::clone(l),
                _ => return,
            }
        };
        self.recall(&lease);
    }

    /// Is any lease held? (A create checks for its directory only then.)
    pub fn any(&self) -> bool {
        self.held.load(std::sync::atomic::Ordering::Acquire) != 0
    }
}

/// A guard made before the process confined itself (`walkfs serve`), for
/// the server made after.
static PREPARED: Mutex<Option<HostGuard>> = Mutex::new(None);

/// Make the host guard now, while the process may (before the sandbox);
/// the next [`crate::Server::new`] takes it. Returns why not, if not.
pub fn prepare_host_guard() -> io::Result<()> {
    let g = HostGuard::open()?;
    *PREPARED.lock() = Some(g);
    Ok(())
}

/// The prepared guard, or one made now.
pub(crate) fn take_host_guard() -> Option<HostGuard> {
    if let Some(g) = PREPARED.lock().take() {
        return Some(g);
    }
    match HostGuard::open() {
        Ok(g) => Some(g),
        Err(e) => {
            tracing::debug!("leases: no fanotify permission events ({e}); none granted");
            None
        }
    }
}

/// `struct fanotify_event_metadata`.
#[repr(C)]
#[derive(Clone, Copy)]
struct Meta {
    event_len: u32,
    vers: u8,
    reserved: u8,
    metadata_len: u16,
    mask: u64,
    fd: i32,
    pid: i32,
}

/// `struct fanotify_response`.
#[repr(C)]
struct Response {
    fd: i32,
    response: u32,
}

fn allow(group: i32, fd: i32) {
    let r = Response {
        fd,
        response: FAN_ALLOW,
    };
    // SAFETY: `r` is a plain struct of the size written.
    let n = unsafe {
        libc::write(
            group,
            (&r as *const Response).cast(),
            std::mem::size_of::<Response>(),
        )
    };
    if n < 0 {
        tracing::warn!(
            "leases: cannot answer a held open: {}",
            io::Error::last_os_error()
        );
    }
    if fd >= 0 {
        // SAFETY: the event's descriptor is ours to close, once.
        unsafe { libc::close(fd) };
    }
}

/// Answer the guard's events until the leases go: our own opens at once,
/// an open of a leased file once the lease is given back (on a thread of
/// its own, so other opens are not held meanwhile).
fn answer_events(leases: Weak<Leases>) {
    let me = std::process::id() as i32;
    let group = match leases
        .upgrade()
        .and_then(|l| l.guard.as_ref().and_then(|g| g.fd.try_clone().ok()))
    {
        Some(fd) => fd,
        None => return,
    };
    let gfd = group.as_raw_fd();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        // SAFETY: reading into a buffer we own, of its length.
        let n = unsafe { libc::read(gfd, buf.as_mut_ptr().cast(), buf.len()) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            tracing::error!("leases: the guard's events: {e}");
            return;
        }
        let Some(ls) = leases.upgrade() else { return };
        let mut off = 0usize;
        let n = n as usize;
        while off + std::mem::size_of::<Meta>() <= n {
            // SAFETY: the kernel wrote whole records; read_unaligned
            // copes with any alignment of the buffer.
            let m: Meta = unsafe { std::ptr::read_unaligned(buf[off..].as_ptr().cast()) };
            if m.event_len == 0 {
                break;
            }
            off += m.event_len as usize;
            if m.fd == FAN_NOFD {
                continue;
            }
            if m.pid == me {
                allow(gfd, m.fd);
                continue;
            }
            // SAFETY: the event's descriptor is open until `allow`
            // closes it.
            let key = key_of(unsafe { BorrowedFd::borrow_raw(m.fd) });
            // Looked at before the leases: a make that finishes between
            // the two has noted its file by the time of the second.
            let busy = ls.making_now();
            let lease = key.as_ref().ok().and_then(|k| ls.lease_of(*k));
            match lease {
                // A file in a leased directory that no lease knows: an
                // old one, or one being made right now whose lease has
                // not noted it yet. The latter waits for the make.
                None if busy => {
                    let l2 = Arc::clone(&ls);
                    let fd = m.fd;
                    let key = key.ok();
                    let r = std::thread::Builder::new()
                        .name("lease-recall".into())
                        .spawn(move || {
                            l2.settle_makes();
                            if let Some(lease) = key.and_then(|k| l2.lease_of(k)) {
                                l2.recall(&lease);
                            }
                            allow(gfd, fd);
                        });
                    if r.is_err() {
                        allow(gfd, m.fd);
                    }
                }
                None => allow(gfd, m.fd),
                Some(lease) => {
                    let l2 = Arc::clone(&ls);
                    let fd = m.fd;
                    let r = std::thread::Builder::new()
                        .name("lease-recall".into())
                        .spawn(move || {
                            l2.recall(&lease);
                            allow(gfd, fd);
                        });
                    if r.is_err() {
                        allow(gfd, m.fd);
                    }
                }
            }
        }
        drop(ls);
    }
}
