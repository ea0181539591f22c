//! Change reports between clients of one CephFS.
//!
//! CephFS tells a client nothing of another client's changes but what its
//! own cache needs (cap recalls invalidate cached file data; names are
//! simply asked for again). Watchers need more: walkfs clients tell each
//! other what they changed over RADOS watch/notify on one object of the
//! file system's data pool (`walkfs.changes.<root inode>`):
//!
//! - every walkfs mount watches the object, and publishes its own changes
//!   (names made, removed and moved; data and attributes changed) in
//!   batches, gathered for [`GATHER`] on a thread of its own, so that no
//!   caller waits for the notify;
//! - a received batch becomes [`Change`]s for the vfs above (and through
//!   it, inotify events on the mount); a mount's own batches come back to
//!   it and are dropped;
//! - writers that are not walkfs (ceph-fuse, the kernel client, another
//!   libcephfs program) publish nothing. For them the tree's recursive
//!   ctime (`ceph.dir.rctime` of the root) is polled every
//!   [`POLL`]: when it moved past the newest change any walkfs client
//!   reported, something else changed the tree, and the vfs is told to
//!   drop what it cached ([`Change::All`]). No inotify event names such a
//!   change.
//!
//! A batch is binary: a version byte, the publisher's clock (`until`,
//! nanoseconds: every change in it was complete by then), a count, and
//! records. A malformed batch (another program writing to the object) is
//! dropped whole, with a warning.

use std::ffi::{c_char, c_int, c_void, CString};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};
use walkfs_fsapi::{Change, How, NodeId, Seen, Timespec, What};

use crate::capsimpl::Hooks;
use crate::ffi::{self, IoCtx, Rados, RadosApi};

/// How long a batch gathers before it is sent.
pub const GATHER: Duration = Duration::from_millis(1);
/// How often the tree's recursive ctime is read for writers that are not
/// walkfs.
pub const POLL: Duration = Duration::from_secs(1);
/// How long a notify waits for the watchers' acknowledgements: a watcher
/// that died unannounced holds the publisher this long, once.
const NOTIFY_TIMEOUT_MS: u64 = 1000;
const VERSION: u8 = 1;
/// Largest batch sent in one notify.
const BATCH_BYTES: usize = 64 * 1024;

/// One change to publish.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Rec {
    /// `name` in directory `dir` appeared, went or moved.
    Entry {
        dir: u64,
        name: Vec<u8>,
        what: What,
        is_dir: bool,
        cookie: u32,
    },
    /// The data or attributes of `ino` changed, seen at `at` (directory,
    /// name) when known.
    Inode {
        ino: u64,
        what: What,
        at: Option<(u64, Vec<u8>)>,
    },
}

pub fn encode(until: i64, recs: &[Rec]) -> Vec<u8> {
    let mut b = vec![VERSION];
    b.extend_from_slice(&until.to_le_bytes());
    b.extend_from_slice(&(recs.len() as u32).to_le_bytes());
    for r in recs {
        let (kind, what, is_dir, cookie, ino, at_dir, name): (
            u8,
            What,
            bool,
            u32,
            u64,
            u64,
            &[u8],
        ) = match r {
            Rec::Entry {
                dir,
                name,
                what,
                is_dir,
                cookie,
            } => (0, *what, *is_dir, *cookie, *dir, 0, name),
            Rec::Inode { ino, what, at } => match at {
                Some((d, n)) => (1, *what, false, 0, *ino, *d, n),
                None => (1, *what, false, 0, *ino, 0, &[]),
            },
        };
        b.push(kind);
        b.push(what.code());
        b.push(is_dir as u8);
        b.extend_from_slice(&cookie.to_le_bytes());
        b.extend_from_slice(&ino.to_le_bytes());
        b.extend_from_slice(&at_dir.to_le_bytes());
        b.extend_from_slice(&(name.len() as u16).to_le_bytes());
        b.extend_from_slice(name);
    }
    b
}

/// A batch read back: its `until` and records; `None` when malformed.
pub fn decode(b: &[u8]) -> Option<(i64, Vec<Rec>)> {
    let mut p = b;
    let mut take = |n: usize| -> Option<&[u8]> {
        if p.len() < n {
            return None;
        }
        let (h, t) = p.split_at(n);
        p = t;
        Some(h)
    };
    if take(1)? != [VERSION] {
        return None;
    }
    let until = i64::from_le_bytes(take(8)?.try_into().ok()?);
    let count = u32::from_le_bytes(take(4)?.try_into().ok()?);
    let mut recs = Vec::new();
    for _ in 0..count {
        let h = take(3)?;
        let (kind, what, is_dir) = (h[0], What::from_code(h[1]), h[2] != 0);
        let cookie = u32::from_le_bytes(take(4)?.try_into().ok()?);
        let ino = u64::from_le_bytes(take(8)?.try_into().ok()?);
        let at_dir = u64::from_le_bytes(take(8)?.try_into().ok()?);
        let len = u16::from_le_bytes(take(2)?.try_into().ok()?) as usize;
        let name = take(len)?.to_vec();
        recs.push(match kind {
            0 if !name.is_empty() => Rec::Entry {
                dir: ino,
                name,
                what,
                is_dir,
                cookie,
            },
            1 => Rec::Inode {
                ino,
                what,
                at: (at_dir != 0 && !name.is_empty()).then_some((at_dir, name)),
            },
            _ => return None,
        });
    }
    take(1).is_none().then_some((until, recs))
}

/// The changes a batch reports, for the vfs.
pub fn changes_of(recs: Vec<Rec>) -> Vec<Change> {
    recs.into_iter()
        .map(|r| match r {
            Rec::Entry {
                dir,
                name,
                what,
                is_dir,
                cookie,
            } => Change::Entry {
                dir: NodeId(dir),
                dir_ino: dir,
                name,
                how: How {
                    what,
                    is_dir,
                    cookie,
                    own: false,
                },
            },
            Rec::Inode { ino, what, at } => Change::Inode {
                node: NodeId(ino),
                ino,
                how: How::of(what),
                at: at.map(|(d, name)| Seen {
                    dir: NodeId(d),
                    dir_ino: d,
                    name,
                }),
            },
        })
        .collect()
}

/// The newest `until` a batch may carry for this client: its clock.
fn now_ns() -> i64 {
    Timespec::now().as_nanos()
}

/// A mount's end of the channel.
pub struct Channel {
    api: &'static RadosApi,
    cluster: Rados,
    io: IoCtx,
    oid: CString,
    /// This client's id at the OSDs: its own notifies come back with it.
    me: u64,
    cookie: Mutex<Option<u64>>,
    queue: Mutex<Vec<Rec>>,
    wake: Condvar,
    stop: AtomicBool,
    /// Newest `until` of any batch seen (own included): the tree's
    /// changes up to then were reported.
    reported: AtomicI64,
    next_cookie: AtomicU32,
    /// Where received changes go (the mount's hooks).
    hooks: *const Hooks,
    threads: Mutex<Vec<std::thread::JoinHandle<()>>>,
    /// Received and published batches, for `walkfs stats`-like reports.
    pub received: AtomicI64,
    pub unexplained: AtomicI64,
}

// SAFETY: the rados handles are thread-safe by librados's contract; the
// hooks outlive the channel (both belong to one mount, the channel is
// shut before the hooks are freed).
unsafe impl Send for Channel {}
// SAFETY: as above.
unsafe impl Sync for Channel {}

fn check(r: c_int, what: &str) -> Result<(), String> {
    if r < 0 {
        Err(format!("{what}: {}", walkfs_fsapi::Errno(-r)))
    } else {
        Ok(())
    }
}

impl Channel {
    /// Connect to the cluster of `conf` as `id`, make sure the object
    /// exists in `pool`, and watch it. The error says which step failed.
    pub fn open(
        conf: Option<&CString>,
        id: Option<&CString>,
        pool: &str,
        root_ino: u64,
        hooks: *const Hooks,
    ) -> Result<Arc<Channel>, String> {
        let api = ffi::rados().map_err(|e| format!("librados: {e}"))?;
        let mut cluster: Rados = std::ptr::null_mut();
        // SAFETY: out-pointer valid; id NUL-terminated or null.
        check(
            unsafe {
                (api.rados_create)(&mut cluster, id.map_or(std::ptr::null(), |c| c.as_ptr()))
            },
            "rados_create",
        )?;
        let mut ch = Channel {
            api,
            cluster,
            io: std::ptr::null_mut(),
            oid: CString::new(format!("walkfs.changes.{root_ino:x}")).map_err(|e| e.to_string())?,
            me: 0,
            cookie: Mutex::new(None),
            queue: Mutex::new(Vec::new()),
            wake: Condvar::new(),
            stop: AtomicBool::new(false),
            reported: AtomicI64::new(now_ns()),
            next_cookie: AtomicU32::new(1),
            hooks,
            threads: Mutex::new(Vec::new()),
            received: AtomicI64::new(0),
            unexplained: AtomicI64::new(0),
        };
        // From here a failure drops `ch`, which shuts the cluster handle.
        // SAFETY: a created handle; path NUL-terminated or null.
        check(
            unsafe {
                (api.rados_conf_read_file)(cluster, conf.map_or(std::ptr::null(), |c| c.as_ptr()))
            },
            "rados conf",
        )?;
        // SAFETY: configured handle.
        check(unsafe { (api.rados_connect)(cluster) }, "rados_connect")?;
        // SAFETY: connected.
        ch.me = unsafe { (api.rados_get_instance_id)(cluster) };
        let cpool = CString::new(pool).map_err(|e| e.to_string())?;
        // SAFETY: connected; out-pointer valid.
        check(
            unsafe { (api.rados_ioctx_create)(cluster, cpool.as_ptr(), &mut ch.io) },
            "pool",
        )?;
        // An empty object to watch; writing it again is harmless (its
        // content is never read).
        // SAFETY: open ioctx; NUL-terminated name; empty buffer.
        check(
            unsafe { (api.rados_write_full)(ch.io, ch.oid.as_ptr(), std::ptr::null(), 0) },
            "the change object",
        )?;
        Ok(Arc::new(ch))
    }

    /// Start publishing this mount's changes.
    pub fn start_publishing(self: &Arc<Self>) -> Result<(), String> {
        let me = self.clone();
        let publisher = std::thread::Builder::new()
            .name("cephfs-publish".into())
            .spawn(move || me.publish_loop())
            .map_err(|e| e.to_string())?;
        self.threads.lock().push(publisher);
        Ok(())
    }

    /// Start watching: other clients' reports go to the hooks, and
    /// `rctime` (the tree's recursive ctime) is polled for writers that
    /// are not walkfs.
    pub fn watch(
        self: &Arc<Self>,
        rctime: Box<dyn Fn() -> Option<i64> + Send>,
    ) -> Result<(), String> {
        let mut cookie = 0u64;
        // SAFETY: the arg is this channel, which outlives the watch
        // (`shut` unwatches before it is freed).
        check(
            unsafe {
                (self.api.rados_watch2)(
                    self.io,
                    self.oid.as_ptr(),
                    &mut cookie,
                    on_notify,
                    on_watch_error,
                    Arc::as_ptr(self) as *mut c_void,
                )
            },
            "rados_watch2",
        )?;
        *self.cookie.lock() = Some(cookie);
        let me = self.clone();
        let poller = std::thread::Builder::new()
            .name("cephfs-rctime".into())
            .spawn(move || me.poll_loop(rctime))
            .map_err(|e| e.to_string())?;
        self.threads.lock().push(poller);
        Ok(())
    }

    /// Queue `rec` for the next batch.
    pub fn publish(&self, rec: Rec) {
        self.queue.lock().push(rec);
        // All: the rctime poller sleeps on the same condition variable,
        // and a wake-up it took would leave the batch until the next
        // change (seen: a mkdir's report held back 10 s).
        self.wake.notify_all();
    }

    /// A cookie pairing the two halves of a rename.
    pub fn rename_cookie(&self) -> u32 {
        self.next_cookie.fetch_add(1, Ordering::Relaxed) ^ (self.me as u32).rotate_left(16)
    }

    fn publish_loop(&self) {
        loop {
            {
                let mut q = self.queue.lock();
                while q.is_empty() && !self.stop.load(Ordering::Acquire) {
                    self.wake.wait(&mut q);
                }
                if q.is_empty() {
                    return;
                }
            }
            std::thread::sleep(GATHER);
            let recs = std::mem::take(&mut *self.queue.lock());
            // Every change queued was complete before now.
            let until = now_ns();
            let mut start = 0;
            while start < recs.len() {
                let mut end = start;
                let mut bytes = 0;
                while end < recs.len() && (end == start || bytes < BATCH_BYTES) {
                    bytes += 32
                        + match &recs[end] {
                            Rec::Entry { name, .. } => name.len(),
                            Rec::Inode { at, .. } => at.as_ref().map_or(0, |a| a.1.len()),
                        };
                    end += 1;
                }
                self.send(&encode(until, &recs[start..end]));
                start = end;
            }
        }
    }

    fn send(&self, batch: &[u8]) {
        let mut reply: *mut c_char = std::ptr::null_mut();
        let mut len = 0usize;
        // SAFETY: open ioctx; `batch` readable; reply out-pointers valid.
        let r = unsafe {
            (self.api.rados_notify2)(
                self.io,
                self.oid.as_ptr(),
                batch.as_ptr().cast(),
                batch.len() as c_int,
                NOTIFY_TIMEOUT_MS,
                &mut reply,
                &mut len,
            )
        };
        if !reply.is_null() {
            // SAFETY: a buffer librados allocated for this reply.
            unsafe { (self.api.rados_buffer_free)(reply) };
        }
        if r < 0 && r != -libc::ETIMEDOUT {
            tracing::warn!("cephfs: publishing changes: {}", walkfs_fsapi::Errno(-r));
        }
    }

    fn poll_loop(&self, rctime: Box<dyn Fn() -> Option<i64> + Send>) {
        let mut last = rctime();
        while !self.stop.load(Ordering::Acquire) {
            let mut q = self.queue.lock();
            if !self.stop.load(Ordering::Acquire) {
                self.wake.wait_for(&mut q, POLL);
            }
            drop(q);
            if self.stop.load(Ordering::Acquire) {
                return;
            }
            let Some(now) = rctime() else { continue };
            if Some(now) != last && now > self.reported.load(Ordering::Acquire) {
                // Changed after every change walkfs clients reported.
                self.unexplained.fetch_add(1, Ordering::Relaxed);
                tracing::debug!("cephfs: the tree changed outside walkfs: caches dropped");
                // SAFETY: the hooks outlive the channel.
                unsafe { &*self.hooks }.report(&[Change::All]);
                self.reported.fetch_max(now, Ordering::AcqRel);
            }
            last = Some(now);
        }
    }

    fn received(&self, notifier: u64, data: &[u8]) {
        let Some((until, recs)) = decode(data) else {
            tracing::warn!("cephfs: a malformed change batch from client {notifier} dropped");
            return;
        };
        self.reported.fetch_max(until, Ordering::AcqRel);
        if notifier == self.me {
            return;
        }
        self.received.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the hooks outlive the channel.
        unsafe { &*self.hooks }.report(&changes_of(recs));
    }

    /// Stop watching and publishing (what is queued is sent first) and
    /// disconnect. Idempotent.
    pub fn shut(&self) {
        self.stop.store(true, Ordering::Release);
        self.wake.notify_all();
        for t in std::mem::take(&mut *self.threads.lock()) {
            let _ = t.join();
        }
        if let Some(cookie) = self.cookie.lock().take() {
            // SAFETY: a watch of this ioctx; flushing waits for callbacks
            // in flight, after which none runs.
            unsafe {
                (self.api.rados_unwatch2)(self.io, cookie);
                (self.api.rados_watch_flush)(self.cluster);
            }
        }
    }
}

impl Drop for Channel {
    fn drop(&mut self) {
        self.shut();
        // SAFETY: handles this channel created; nothing uses them now.
        unsafe {
            if !self.io.is_null() {
                (self.api.rados_ioctx_destroy)(self.io);
            }
            (self.api.rados_shutdown)(self.cluster);
        }
    }
}

extern "C" fn on_notify(
    arg: *mut c_void,
    notify_id: u64,
    handle: u64,
    notifier_id: u64,
    data: *mut c_void,
    len: usize,
) {
    // SAFETY: the arg registered with the watch: the channel, alive until
    // `shut` has unwatched and flushed.
    let ch = unsafe { &*(arg as *const Channel) };
    // Acknowledge first: the publisher waits for it.
    // SAFETY: open ioctx; no reply payload.
    unsafe {
        (ch.api.rados_notify_ack)(
            ch.io,
            ch.oid.as_ptr(),
            notify_id,
            handle,
            std::ptr::null(),
            0,
        )
    };
    let data = if data.is_null() {
        &[][..]
    } else {
        // SAFETY: librados passes `len` readable bytes.
        unsafe { std::slice::from_raw_parts(data.cast::<u8>(), len) }
    };
    ch.received(notifier_id, data);
}

extern "C" fn on_watch_error(arg: *mut c_void, _cookie: u64, err: c_int) {
    // SAFETY: as in `on_notify`.
    let ch = unsafe { &*(arg as *const Channel) };
    tracing::warn!(
        "cephfs: the change watch failed ({}): caches dropped",
        walkfs_fsapi::Errno(-err)
    );
    // Reports may have been missed.
    // SAFETY: the hooks outlive the channel.
    unsafe { &*ch.hooks }.report(&[Change::All]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_read_back_and_malformed_ones_are_refused() {
        let recs = vec![
            Rec::Entry {
                dir: 0x1000,
                name: b"a".to_vec(),
                what: What::Created,
                is_dir: true,
                cookie: 0,
            },
            Rec::Entry {
                dir: 0x1000,
                name: b"b".to_vec(),
                what: What::MovedFrom,
                is_dir: false,
                cookie: 7,
            },
            Rec::Inode {
                ino: 0x1001,
                what: What::Modified,
                at: Some((0x1000, b"b".to_vec())),
            },
            Rec::Inode {
                ino: 0x1002,
                what: What::Attrib,
                at: None,
            },
        ];
        let b = encode(42, &recs);
        assert_eq!(decode(&b), Some((42, recs)));
        for cut in 0..b.len() {
            assert_eq!(decode(&b[..cut]), None, "cut at {cut}");
        }
        let mut long = b.clone();
        long.push(0);
        assert_eq!(decode(&long), None);
        let mut bad = b;
        bad[0] = 9;
        assert_eq!(decode(&bad), None);
    }
}
