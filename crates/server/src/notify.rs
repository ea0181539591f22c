//! Change notification: the walkfs extension that tells a client which of
//! the names and inodes it may cache changed (see docs/notify-protocol.md).
//!
//! 9P2000.L has no message from server to client, so the client asks: it
//! opens a notification fid with `Txattrwalk(fid, newfid, "walkfs.notify")`
//! (a name no Linux client can send: kernel xattr names always carry a
//! namespace prefix) and keeps a `Tread` outstanding on it. The read is
//! parked here, holding no worker, and answered when changes come: each
//! record `kind[1] ino[8] name[s]`. A peer that never asks never sees any
//! of this.
//!
//! Every subscriber has a bounded queue; a client that does not read fast
//! enough loses its queue and gets one `ALL` record instead (drop
//! everything cached), never a silently shortened list.

use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, Weak};

use parking_lot::Mutex;
use walkfs_p9::notify::{
    Record, IS_DIR, MIN_READ_V2, NAME_V2, NAME_V3, POLL, VERSION_2, VERSION_3,
};
use walkfs_p9::{Data, Fcall};
use walkfs_vfs::{Change, ChangeSink, Errno, Seen};

use crate::inos::Inos;

pub use walkfs_p9::notify::{ALL, DEGRADED, ENTRY, INODE, MIN_READ, NAME as NOTIFY_NAME, VERSION};

/// Queued record bytes per subscriber before its queue is replaced by
/// `ALL`.
const MAX_QUEUED: usize = 256 * 1024;

/// One connection's subscription.
pub(crate) struct Sub {
    fid: u32,
    /// The protocol version it was opened with (1 or 2).
    version: u64,
    queue: VecDeque<Vec<u8>>,
    /// The records in `queue`, to queue each at most once: a record still
    /// unsent will be acted on after the repeat happened, so the repeat
    /// adds nothing (a file being written reports itself on every write).
    queued_set: HashSet<Vec<u8>>,
    queued: usize,
    /// A `Tread` waiting for records: (tag, count).
    parked: Option<(u16, u32)>,
}

/// What the extension needs of a connection (conn.rs provides it): its
/// subscription slot, a way to send replies at any time, and the checks a
/// subscription makes.
pub(crate) trait Peer: Send + Sync {
    fn slot(&self) -> &Mutex<Option<Sub>>;
    fn send_msg(&self, tag: u16, f: Fcall<'_>);
    fn error(&self, tag: u16, e: Errno);
    /// `fid` is attached (authenticated) and `newfid` is free.
    fn may_subscribe(&self, fid: u32, newfid: u32) -> bool;
    /// The export sees every change (else the subscriber is told at once
    /// that it must revalidate).
    fn coherent(&self) -> bool;
    /// Is `c` (in host numbers) the report of the peer's own change, its
    /// object still as the peer left it (own.rs)? Such reports are not
    /// sent to it.
    fn own_change(&self, c: &Change) -> bool {
        let _ = c;
        false
    }
    /// The peer now reads reports: from now on its own changes are noted.
    fn subscribed_now(&self) {}
    /// Report now every change the export's watcher has queued (a poll's
    /// first step: what happened before it is in its answer).
    fn settle_reports(&self) {}
}

/// The server's subscribers; listens to the vfs for changes.
pub(crate) struct Hub {
    conns: Mutex<Vec<Weak<dyn Peer>>>,
    /// Changes name files by the numbers clients know (inos.rs).
    inos: Arc<Inos>,
}

/// Encode one change as a record of protocol `version`.
pub fn encode(c: &Change, version: u64) -> Vec<u8> {
    let (kind, ino, name, how, dir): (u8, u64, &[u8], _, u64) = match c {
        Change::Entry {
            dir_ino, name, how, ..
        } => (ENTRY, *dir_ino, name, *how, 0),
        Change::Inode { ino, how, at, .. } => match at {
            Some(s) => (INODE, *ino, &s.name, *how, s.dir_ino),
            None => (INODE, *ino, b"", *how, 0),
        },
        Change::All => (ALL, 0, b"", Default::default(), 0),
        Change::Degraded => (DEGRADED, 0, b"", Default::default(), 0),
    };
    let mut r = Vec::new();
    if version >= VERSION_2 {
        let rec = Record {
            kind,
            ino,
            what: how.what.code(),
            flags: if how.is_dir { IS_DIR } else { 0 },
            cookie: how.cookie,
            dir,
            name,
        };
        walkfs_p9::notify::encode_v2(&rec, &mut r);
    } else {
        // Version 1 names no place for an inode's change.
        let name = if kind == INODE { &b""[..] } else { name };
        walkfs_p9::notify::encode(kind, ino, name, &mut r);
    }
    r
}

impl Sub {
    fn push(&mut self, rec: &[u8]) {
        // Version 1 records only say what to drop: one still queued
        // covers its repeat. Version 2 records are events a watcher sees
        // in order: only a repeat of the last one is merged (as inotify
        // does), or a create, delete, create would lose its last create.
        let repeat = if self.version >= VERSION_2 {
            self.queue.back().is_some_and(|last| last.as_slice() == rec)
        } else {
            self.queued_set.contains(rec)
        };
        if repeat {
            return;
        }
        if self.queued + rec.len() > MAX_QUEUED {
            self.queue.clear();
            self.queued_set.clear();
            self.queued = 0;
            let all = encode(&Change::All, self.version);
            self.queued += all.len();
            self.queued_set.insert(all.clone());
            self.queue.push_back(all);
            return;
        }
        self.queued += rec.len();
        self.queued_set.insert(rec.to_vec());
        self.queue.push_back(rec.to_vec());
    }

    /// As many whole records as fit in `count` bytes.
    fn take(&mut self, count: u32) -> Vec<u8> {
        let mut out = Vec::new();
        while let Some(r) = self.queue.front() {
            if out.len() + r.len() > count as usize {
                break;
            }
            self.queued -= r.len();
            out.extend_from_slice(r);
            self.queued_set.remove(r.as_slice());
            self.queue.pop_front();
        }
        out
    }

    /// Answer the parked read if there is something to send.
    fn ready(&mut self) -> Option<(u16, Vec<u8>)> {
        let (tag, count) = self.parked?;
        if self.queue.is_empty() {
            return None;
        }
        self.parked = None;
        Some((tag, self.take(count)))
    }
}

fn reply_read(conn: &dyn Peer, tag: u16, data: &[u8]) {
    conn.send_msg(tag, Fcall::Rread { data: Data(data) });
}

impl ChangeSink for Hub {
    fn changed(&self, changes: &[Change]) {
        let wire: Vec<Change> = changes.iter().map(|c| self.on_wire(c)).collect();
        let recs = |v: u64| -> Vec<Vec<u8>> { wire.iter().map(|c| encode(c, v)).collect() };
        let (v1, v2) = (std::cell::OnceCell::new(), std::cell::OnceCell::new());
        let conns: Vec<Arc<dyn Peer>> = {
            let mut list = self.conns.lock();
            list.retain(|c| c.strong_count() > 0);
            list.iter().filter_map(Weak::upgrade).collect()
        };
        for conn in conns {
            if conn.slot().lock().is_none() {
                continue;
            }
            // Checked before the slot is locked: the check asks the host.
            let own: Vec<bool> = changes.iter().map(|c| conn.own_change(c)).collect();
            let ready = {
                let mut n = conn.slot().lock();
                let Some(sub) = n.as_mut() else { continue };
                let recs = if sub.version >= VERSION_2 {
                    v2.get_or_init(|| recs(VERSION_2))
                } else {
                    v1.get_or_init(|| recs(VERSION))
                };
                for (r, own) in recs.iter().zip(&own) {
                    if !own {
                        sub.push(r);
                    }
                }
                sub.ready()
            };
            // A peer that stopped reading blocks this send for at most the
            // reply timeout, after which its connection is closed.
            if let Some((tag, data)) = ready {
                reply_read(&*conn, tag, &data);
            }
        }
    }
}

impl Hub {
    pub(crate) fn new(inos: Arc<Inos>) -> Hub {
        Hub {
            conns: Mutex::new(Vec::new()),
            inos,
        }
    }

    /// `c` with its inode numbers as clients know them.
    fn on_wire(&self, c: &Change) -> Change {
        match c {
            Change::Entry {
                dir,
                dir_ino,
                name,
                how,
            } => Change::Entry {
                dir: *dir,
                dir_ino: self.inos.shown(*dir_ino),
                name: name.clone(),
                how: *how,
            },
            Change::Inode { node, ino, how, at } => Change::Inode {
                node: *node,
                ino: self.inos.shown(*ino),
                how: *how,
                at: at.as_ref().map(|s| Seen {
                    dir: s.dir,
                    dir_ino: self.inos.shown(s.dir_ino),
                    name: s.name.clone(),
                }),
            },
            other => other.clone(),
        }
    }

    fn add(&self, conn: Weak<dyn Peer>) {
        self.conns.lock().push(conn);
    }
}

/// Handle `f` if it belongs to the notification extension; returns
/// whether it did.
pub(crate) fn message<P: Peer + 'static>(
    hub: &Hub,
    conn: &Arc<P>,
    tag: u16,
    f: &Fcall<'_>,
) -> bool {
    match *f {
        Fcall::Txattrwalk { fid, newfid, name } if name.0 == NOTIFY_NAME => {
            subscribe(hub, conn, tag, fid, newfid, VERSION);
            true
        }
        Fcall::Txattrwalk { fid, newfid, name } if name.0 == NAME_V2 => {
            subscribe(hub, conn, tag, fid, newfid, VERSION_2);
            true
        }
        Fcall::Txattrwalk { fid, newfid, name } if name.0 == NAME_V3 => {
            subscribe(hub, conn, tag, fid, newfid, VERSION_3);
            true
        }
        Fcall::Tread {
            fid,
            count,
            offset: POLL,
        } if conn
            .slot()
            .lock()
            .as_ref()
            .is_some_and(|s| s.fid == fid && s.version >= VERSION_3) =>
        {
            poll(&**conn, tag, count);
            true
        }
        Fcall::Tread { fid, count, .. } => {
            let mut n = conn.slot().lock();
            let Some(sub) = n.as_mut().filter(|s| s.fid == fid) else {
                return false;
            };
            let least = if sub.version >= VERSION_2 {
                MIN_READ_V2
            } else {
                MIN_READ
            };
            if count < least {
                drop(n);
                conn.error(tag, Errno::EINVAL);
            } else if sub.parked.is_some() {
                drop(n);
                conn.error(tag, Errno::EBUSY);
            } else {
                sub.parked = Some((tag, count));
                let ready = sub.ready();
                drop(n);
                if let Some((tag, data)) = ready {
                    reply_read(&**conn, tag, &data);
                }
            }
            true
        }
        Fcall::Tclunk { fid } => {
            let mut n = conn.slot().lock();
            if n.as_ref().is_none_or(|s| s.fid != fid) {
                return false;
            }
            let parked = n.take().and_then(|s| s.parked);
            drop(n);
            if let Some((t, _)) = parked {
                reply_read(&**conn, t, &[]);
            }
            conn.send_msg(tag, Fcall::Rclunk {});
            true
        }
        _ => false,
    }
}

/// A poll read (version 3): the host's queued events are reported first
/// (so a change made before the poll is in its answer); then the parked
/// read, if any, takes what is queued, and this one is answered at once
/// with what is left. Both replies go out in that order.
fn poll(conn: &dyn Peer, tag: u16, count: u32) {
    conn.settle_reports();
    let mut n = conn.slot().lock();
    let Some(sub) = n.as_mut() else {
        drop(n);
        conn.error(tag, Errno::EBADF);
        return;
    };
    if count < MIN_READ_V2 {
        drop(n);
        conn.error(tag, Errno::EINVAL);
        return;
    }
    let parked = sub.ready();
    let rest = sub.take(count);
    // Sent under the slot's lock: no record queued meanwhile can go out
    // in a parked read between the two.
    if let Some((t, data)) = parked {
        reply_read(conn, t, &data);
    }
    reply_read(conn, tag, &rest);
    drop(n);
}

/// Queue a lease's recall (p9::lease) for `conn`: a record of kind
/// RECALL naming lease fid `fid`, sent at once if a read is parked.
pub(crate) fn recall(conn: &dyn Peer, fid: u32) {
    let ready = {
        let mut n = conn.slot().lock();
        let Some(sub) = n.as_mut() else { return };
        let mut r = Vec::new();
        if sub.version >= VERSION_2 {
            let rec = Record {
                kind: walkfs_p9::lease::RECALL,
                ino: u64::from(fid),
                what: 0,
                flags: 0,
                cookie: 0,
                dir: 0,
                name: b"",
            };
            walkfs_p9::notify::encode_v2(&rec, &mut r);
        } else {
            walkfs_p9::notify::encode(walkfs_p9::lease::RECALL, u64::from(fid), b"", &mut r);
        }
        sub.push(&r);
        sub.ready()
    };
    if let Some((tag, data)) = ready {
        reply_read(conn, tag, &data);
    }
}

/// Has `conn` a notification fid (where a recall can reach it)?
pub(crate) fn subscribed(conn: &dyn Peer) -> bool {
    conn.slot().lock().is_some()
}

/// `Tflush` of a parked read: it is answered by the `Rflush` alone.
/// Returns whether `oldtag` was one.
pub(crate) fn flush(conn: &dyn Peer, oldtag: u16) -> bool {
    let mut n = conn.slot().lock();
    match n.as_mut() {
        Some(sub) if sub.parked.is_some_and(|(t, _)| t == oldtag) => {
            sub.parked = None;
            true
        }
        _ => false,
    }
}

fn subscribe<P: Peer + 'static>(
    hub: &Hub,
    conn: &Arc<P>,
    tag: u16,
    fid: u32,
    newfid: u32,
    version: u64,
) {
    if !conn.may_subscribe(fid, newfid) {
        conn.error(tag, Errno::EBADF);
        return;
    }
    {
        let mut n = conn.slot().lock();
        if n.is_some() {
            drop(n);
            conn.error(tag, Errno::EBUSY);
            return;
        }
        let mut sub = Sub {
            fid: newfid,
            version,
            queue: VecDeque::new(),
            queued_set: HashSet::new(),
            queued: 0,
            parked: None,
        };
        // A server that cannot see every change says so at once: the
        // client must revalidate rather than trust its cache.
        if !conn.coherent() {
            sub.push(&encode(&Change::Degraded, version));
        }
        *n = Some(sub);
    }
    conn.subscribed_now();
    let weak: Weak<P> = Arc::downgrade(conn);
    hub.add(weak);
    conn.send_msg(tag, Fcall::Rxattrwalk { size: version });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sub() -> Sub {
        Sub {
            fid: 1,
            version: VERSION,
            queue: VecDeque::new(),
            queued_set: HashSet::new(),
            queued: 0,
            parked: None,
        }
    }

    fn rec(ino: u64) -> Vec<u8> {
        let mut r = Vec::new();
        walkfs_p9::notify::encode(INODE, ino, b"", &mut r);
        r
    }

    #[test]
    fn a_record_still_queued_is_not_queued_again() {
        let mut s = sub();
        let f = rec(7);
        let g = rec(8);
        s.push(&f);
        s.push(&g);
        s.push(&f);
        assert_eq!(s.take(4096), [f.as_slice(), g.as_slice()].concat());
        // Sent: a later change to the same file is news again.
        s.push(&f);
        assert_eq!(s.take(4096), f);
        assert_eq!(s.queued, 0);
    }

    /// A peer that keeps what it is sent, in order.
    struct Fake {
        slot: Mutex<Option<Sub>>,
        sent: Mutex<Vec<(u16, Vec<u8>)>>,
        settled: std::sync::atomic::AtomicUsize,
    }

    impl Peer for Fake {
        fn slot(&self) -> &Mutex<Option<Sub>> {
            &self.slot
        }
        fn send_msg(&self, tag: u16, f: Fcall<'_>) {
            let data = match f {
                Fcall::Rread { data } => data.0.to_vec(),
                _ => b"other".to_vec(),
            };
            self.sent.lock().push((tag, data));
        }
        fn error(&self, tag: u16, _: Errno) {
            self.sent.lock().push((tag, b"error".to_vec()));
        }
        fn may_subscribe(&self, _: u32, _: u32) -> bool {
            true
        }
        fn coherent(&self) -> bool {
            true
        }
        fn settle_reports(&self) {
            self.settled
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// A poll (version 3) reports the host's queue first, then answers
    /// the parked read with what is queued and itself with what is left
    /// (nothing), in that order; of an older version it is a plain read.
    #[test]
    fn a_poll_answers_the_parked_read_first_then_itself() {
        let fake = Arc::new(Fake {
            slot: Mutex::new(Some(Sub {
                version: VERSION_3,
                ..sub()
            })),
            sent: Mutex::new(Vec::new()),
            settled: Default::default(),
        });
        let hub = Hub::new(Arc::new(Inos::default()));
        let read = |offset| Fcall::Tread {
            fid: 1,
            offset,
            count: 4096,
        };
        assert!(message(&hub, &fake, 10, &read(0)));
        assert!(fake.sent.lock().is_empty(), "a read waits for records");
        let r = rec(7);
        if let Some(s) = fake.slot.lock().as_mut() {
            s.push(&r);
        }
        assert!(message(&hub, &fake, 11, &read(POLL)));
        assert_eq!(*fake.sent.lock(), vec![(10, r.clone()), (11, Vec::new())]);
        assert_eq!(fake.settled.load(std::sync::atomic::Ordering::Relaxed), 1);
        // Nothing parked: the poll takes what is queued.
        if let Some(s) = fake.slot.lock().as_mut() {
            s.push(&rec(8));
        }
        fake.sent.lock().clear();
        assert!(message(&hub, &fake, 12, &read(POLL)));
        assert_eq!(*fake.sent.lock(), vec![(12, rec(8))]);
        // Version 2 knows no poll: the offset is ignored and it parks.
        if let Some(s) = fake.slot.lock().as_mut() {
            s.version = VERSION_2;
        }
        fake.sent.lock().clear();
        assert!(message(&hub, &fake, 13, &read(POLL)));
        assert!(fake.sent.lock().is_empty());
    }

    #[test]
    fn overflow_leaves_one_all_record() {
        let mut s = sub();
        for i in 0..100_000u64 {
            s.push(&rec(i));
        }
        let got = s.take(u32::MAX);
        let recs: Vec<_> = walkfs_p9::notify::decode(&got).collect();
        assert!(recs.iter().any(|r| r.0 == ALL), "no ALL after overflow");
        assert!(s.queued_set.is_empty() && s.queue.is_empty());
    }
}
