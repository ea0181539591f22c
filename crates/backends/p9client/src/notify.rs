//! The client side of the change-notification extension (the server's
//! `notify.rs`, docs/notify-protocol.md): a notification fid opened after
//! attach, and a thread that keeps one `Tread` outstanding on it and turns
//! the records into [`Change`]s in this client's node numbers.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use parking_lot::{Condvar, Mutex};
use walkfs_fsapi::{Change, ChangeSink, Errno, How, NodeId, Result, Seen, What};
use walkfs_p9::lease::RECALL;
use walkfs_p9::notify::{
    ALL, DEGRADED, ENTRY, INODE, IS_DIR, NAME as NOTIFY_NAME, NAME_V2, NAME_V3, POLL, VERSION,
    VERSION_2, VERSION_3,
};
use walkfs_p9::{Fcall, Str, IOHDRSZ};

use crate::lease::Leases;
use crate::rpc::Rpc;
use crate::{err_of, Fids, Nodes, ROOT_FID};

/// The fid notifications are read from.
pub(crate) const NOTIFY_FID: u32 = u32::MAX - 2;

/// Pause after a batch before asking for the next: changes that come in
/// a burst (a build writing a file in small pieces reports it on every
/// write) gather in the server's queue, where repeats are merged, and
/// arrive as one reply instead of one round trip each. Small beside the
/// 100 ms in which a change must be seen.
const COALESCE: std::time::Duration = std::time::Duration::from_millis(10);

/// Ask the server for notifications: the version it speaks (3, which
/// also answers poll reads; 2, whose records say what happened; else 1),
/// or `None` if it offers none (a plain 9P2000.L server answers the
/// unknown xattr with an error).
pub(crate) fn subscribe(rpc: &Rpc) -> Option<u64> {
    for (name, want) in [
        (NAME_V3, VERSION_3),
        (NAME_V2, VERSION_2),
        (NOTIFY_NAME, VERSION),
    ] {
        let r = rpc.call(
            Fcall::Txattrwalk {
                fid: ROOT_FID,
                newfid: NOTIFY_FID,
                name: Str(name),
            },
            |r| match r {
                Fcall::Rxattrwalk { size } => Ok(size),
                r => Err(err_of(&r)),
            },
        );
        match r {
            Ok(v) if v == want => return Some(v),
            Ok(v) => {
                // A fid was made: give it back.
                tracing::warn!("server offers notification protocol {v}, not {want}");
                rpc.send_forget(Fcall::Tclunk { fid: NOTIFY_FID });
                return None;
            }
            // An older server does not know the newer names.
            Err(_) => continue,
        }
    }
    None
}

/// What a recall needs (lease.rs): the leases, and the fid numbers to
/// give the lease fid back to.
pub(crate) struct Recaller {
    pub leases: Arc<Leases>,
    pub fids: Arc<Fids>,
}

impl Recaller {
    /// Give back the leases `buf`'s records recall: each stops covering
    /// anything, what the vfs gathers is sent, then the lease fid is
    /// clunked behind it (the server runs the clunk after every change
    /// sent before it, and only then lets the other party go on).
    fn recall(&self, buf: &[u8], version: u64, rpc: &Rpc, sink: &dyn ChangeSink) {
        let fids: Vec<u32> = if version >= VERSION_2 {
            walkfs_p9::notify::decode_v2(buf)
                .filter(|r| r.kind == RECALL)
                .map(|r| r.ino as u32)
                .collect()
        } else {
            walkfs_p9::notify::decode(buf)
                .filter(|r| r.0 == RECALL)
                .map(|r| r.1 as u32)
                .collect()
        };
        let recalled: Vec<_> = fids
            .into_iter()
            .filter_map(|f| self.leases.recall(f))
            .collect();
        if recalled.is_empty() {
            return;
        }
        sink.recall();
        for r in recalled {
            tracing::debug!("lease on directory {:#x} recalled", r.dir);
            self.fids.clunk(rpc, r.fid);
        }
    }
}

/// A subscription's state, shared by its reading thread and the
/// barrier a lock grant calls ([`Notify::barrier`]).
pub(crate) struct Notify {
    version: u64,
    rpc: Weak<Rpc>,
    nodes: Arc<Mutex<Nodes>>,
    root_ino: u64,
    sink: Arc<dyn ChangeSink>,
    recaller: Recaller,
    /// Replies of the reading thread's reads the connection's reader has
    /// handed over (counted in wire order, on the reader's thread), and
    /// those whose records have been applied.
    delivered: Arc<AtomicU64>,
    applied: Mutex<u64>,
    applied_cv: Condvar,
}

/// How long a barrier waits for the reading thread (which may be gone).
const BARRIER_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

impl Notify {
    /// Records `recs` as changes, given to the sink (leases they recall
    /// first).
    fn apply(&self, recs: &[u8], rpc: &Rpc) {
        self.recaller.recall(recs, self.version, rpc, &*self.sink);
        let changes = if self.version >= VERSION_2 {
            decode_v2(recs, &self.nodes.lock(), self.root_ino)
        } else {
            decode(recs, &self.nodes.lock(), self.root_ino)
        };
        if !changes.is_empty() {
            self.sink.changed(&changes);
        }
    }

    fn applied_one(&self) {
        *self.applied.lock() += 1;
        self.applied_cv.notify_all();
    }

    /// Return once every report the server queued before the reply just
    /// received (a lock grant) is applied. A poll read (version 3) goes
    /// after that reply: the server answers the read parked on the fid
    /// first, then the poll with what is left, so every such report
    /// reached us once the poll is answered; those the reading thread
    /// got are waited for, the poll's own applied here.
    pub(crate) fn barrier(&self) {
        if self.version < VERSION_3 {
            return;
        }
        let Some(r) = self.rpc.upgrade() else { return };
        let count = r.msize - IOHDRSZ;
        let got = r.call(
            Fcall::Tread {
                fid: NOTIFY_FID,
                offset: POLL,
                count,
            },
            |r| match r {
                Fcall::Rread { data } => Ok(data.0.to_vec()),
                r => Err(err_of(&r)),
            },
        );
        // The parked read's reply came before the poll's on the wire, so
        // the reader counted it before it handed the poll's over.
        let upto = self.delivered.load(Ordering::Acquire);
        match got {
            Ok(recs) if !recs.is_empty() => self.apply(&recs, &r),
            Ok(_) => {}
            Err(e) => tracing::debug!("notification poll: {e}"),
        }
        drop(r);
        let mut applied = self.applied.lock();
        let deadline = std::time::Instant::now() + BARRIER_WAIT;
        while *applied < upto {
            if self
                .applied_cv
                .wait_until(&mut applied, deadline)
                .timed_out()
            {
                tracing::warn!("notifications: the reading thread did not apply a report in time");
                return;
            }
        }
    }

    /// Read notifications until the connection ends, delivering them to
    /// the sink: one read parked at the server at a time, sent again
    /// after a reconnect.
    fn run(&self) {
        loop {
            let Some(r) = self.rpc.upgrade() else { return };
            let count = r.msize - IOHDRSZ;
            let (tx, rx) = std::sync::mpsc::sync_channel::<Result<Vec<u8>>>(1);
            let delivered = Arc::clone(&self.delivered);
            let then: crate::rpc::Then = Arc::new(move |_, reply| {
                let got = match reply {
                    Some(Fcall::Rread { data }) => Ok(data.0.to_vec()),
                    Some(r) => Err(err_of(&r)),
                    None => Err(Errno::ENOTCONN),
                };
                if got.is_ok() {
                    delivered.fetch_add(1, Ordering::Release);
                }
                let _ = tx.try_send(got);
            });
            let sent = r.send_then(
                &[Fcall::Tread {
                    fid: NOTIFY_FID,
                    offset: 0,
                    count,
                }],
                then,
            );
            drop(r);
            // Not sent: the callback is gone with its sender.
            let got = match sent {
                Ok(()) => rx.recv().unwrap_or(Err(Errno::ENOTCONN)),
                Err(e) => Err(e),
            };
            match got {
                Ok(recs) if recs.is_empty() => {
                    self.applied_one();
                    return; // clunked
                }
                // (Each reply counted delivered is counted applied, in
                // order: this thread has one read out at a time.)
                Ok(recs) => {
                    if let Some(r) = self.rpc.upgrade() {
                        self.apply(&recs, &r);
                    }
                    self.applied_one();
                    std::thread::sleep(COALESCE);
                }
                Err(e) => {
                    // A connection lost and made again (the subscription
                    // with it): read on. Otherwise nothing cached can be
                    // trusted to be told about any more.
                    if e == Errno::ENOTCONN
                        && self.rpc.upgrade().is_some_and(|r| r.wait_up().is_ok())
                    {
                        continue;
                    }
                    tracing::debug!("notifications ended: {e}");
                    self.sink.changed(&[Change::Degraded]);
                    return;
                }
            }
        }
    }
}

/// Start reading notifications on a thread of their own; the state is
/// returned for the barrier.
pub(crate) fn start(
    version: u64,
    rpc: Weak<Rpc>,
    nodes: Arc<Mutex<Nodes>>,
    root_ino: u64,
    sink: Arc<dyn ChangeSink>,
    recaller: Recaller,
) -> Result<Arc<Notify>> {
    let n = Arc::new(Notify {
        version,
        rpc,
        nodes,
        root_ino,
        sink,
        recaller,
        delivered: Arc::new(AtomicU64::new(0)),
        applied: Mutex::new(0),
        applied_cv: Condvar::new(),
    });
    let me = Arc::clone(&n);
    std::thread::Builder::new()
        .name("9p-notify".into())
        .spawn(move || me.run())
        .map_err(Errno::from)?;
    Ok(n)
}

/// Records as changes to the nodes this client holds (changes to files it
/// holds no fid for concern nothing it caches).
fn decode(buf: &[u8], nodes: &Nodes, root_ino: u64) -> Vec<Change> {
    let node = |ino: u64| -> Option<NodeId> {
        (ino == root_ino || nodes.by_id.contains_key(&ino)).then_some(NodeId(ino))
    };
    let mut out = Vec::new();
    for (kind, ino, name) in walkfs_p9::notify::decode(buf) {
        match kind {
            ENTRY => {
                if let Some(dir) = node(ino) {
                    out.push(Change::Entry {
                        dir,
                        dir_ino: ino,
                        name: name.to_vec(),
                        how: How::default(),
                    });
                }
            }
            INODE => {
                if let Some(node) = node(ino) {
                    out.push(Change::Inode {
                        node,
                        ino,
                        how: How::default(),
                        at: None,
                    });
                }
            }
            ALL => out.push(Change::All),
            DEGRADED => out.push(Change::Degraded),
            // A lease's recall (lease.rs) drops nothing.
            RECALL => {}
            // A later protocol's record: whatever it says, the cache
            // cannot know what to drop.
            _ => out.push(Change::All),
        }
    }
    out
}

/// Version 2 records as changes, with what happened. An inode's change
/// is kept when the file or the directory it was seen in is held (a
/// watcher of the directory is told of it even if the file was never
/// looked up here).
fn decode_v2(buf: &[u8], nodes: &Nodes, root_ino: u64) -> Vec<Change> {
    let held = |ino: u64| ino == root_ino || nodes.by_id.contains_key(&ino);
    let mut out = Vec::new();
    for r in walkfs_p9::notify::decode_v2(buf) {
        let how = How {
            what: What::from_code(r.what),
            is_dir: r.flags & IS_DIR != 0,
            cookie: r.cookie,
            own: false,
        };
        match r.kind {
            ENTRY if held(r.ino) => out.push(Change::Entry {
                dir: NodeId(r.ino),
                dir_ino: r.ino,
                name: r.name.to_vec(),
                how,
            }),
            INODE => {
                let at = (r.dir != 0 && held(r.dir)).then(|| Seen {
                    dir: NodeId(r.dir),
                    dir_ino: r.dir,
                    name: r.name.to_vec(),
                });
                if held(r.ino) || at.is_some() {
                    out.push(Change::Inode {
                        node: NodeId(r.ino),
                        ino: r.ino,
                        how,
                        at,
                    });
                }
            }
            ENTRY | RECALL => {}
            ALL => out.push(Change::All),
            DEGRADED => out.push(Change::Degraded),
            _ => out.push(Change::All),
        }
    }
    out
}
