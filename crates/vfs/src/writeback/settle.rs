//! Attributes that settle true.
//!
//! A change answered from the cache shows attributes the vfs worked out:
//! the client's clock for ctime and mtime, a new directory's size 0, a
//! created file's birth time unknown. The server's differ (its clock runs
//! the change ~100 µs later; ext4's directories are 4096 bytes). Programs
//! that keep stat snapshots (git's index, rsync, make, backup tools)
//! would see a change that never happened the first time the server's
//! attributes come back (after a remount, an eviction).
//!
//! So once every change of a file made behind its callers has been
//! answered (the ledger's count for it drops to zero), its attributes are
//! asked of the backend behind everyone ([`caps::Ordered::getattr_behind`]:
//! no caller waits for it, and a 9P client sends one `Tgetattr`) and
//! replace the cached ones, when:
//! - nothing changed the file in the cache since they were asked (its
//!   cached attributes are those the question was sent with): a later
//!   change made the answer old, and that change's own completion asks
//!   again;
//! - no change of it is in flight and no write of it is gathered (the
//!   backend's answer would lack it), and the answer does not shrink a
//!   file the cache knows bigger (a write gathered when it was asked,
//!   landed before it came back).
//!
//! Listeners ([`crate::Vfs::on_settled`]: the FUSE front end, which drops
//! the kernel's copy of the attributes) are told of each file whose
//! attributes moved. This all runs on a thread of its own: completions
//! arrive on a backend's reader thread, which must never wait for the
//! vfs's locks.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{mpsc, Arc, Weak};
use std::time::Duration;

use parking_lot::{Mutex, RwLock};
use walkfs_fsapi::{Attr, NodeId, Result};

use super::Key;
use crate::dcache::{InodeSnap, I_STALE};
use crate::Inner;

/// Told of a file whose attributes settled: (superblock, inode number).
pub type SettleListener = Arc<dyn Fn(usize, u64) + Send + Sync>;

enum Msg {
    /// Every change of this inode made behind its callers was answered.
    Idle(Key),
    /// The backend's attributes of the inode, asked for when the cache
    /// held `before`.
    Answer(Box<(Key, InodeSnap, Result<Attr>)>),
}

/// How long the thread waits for work before it checks that its vfs is
/// still there.
const IDLE_CHECK: Duration = Duration::from_secs(1);

pub(crate) struct Settler {
    inner: Weak<Inner>,
    /// The thread's queue, once started (at the first idle file).
    tx: Mutex<Option<mpsc::Sender<Msg>>>,
    pub listeners: RwLock<Vec<SettleListener>>,
    /// Attributes asked for, and those that replaced the cached ones.
    pub asked: AtomicU64,
    pub settled: AtomicU64,
}

impl Settler {
    pub fn new(inner: Weak<Inner>) -> Settler {
        Settler {
            inner,
            tx: Mutex::new(None),
            listeners: RwLock::new(Vec::new()),
            asked: AtomicU64::new(0),
            settled: AtomicU64::new(0),
        }
    }

    /// Every change of `key` made behind its callers was answered (on a
    /// backend's thread: only a queue push).
    pub fn idle(&self, key: Key) {
        let Some(inner) = self.inner.upgrade() else {
            return;
        };
        if !inner.sw.settle.load(Relaxed) {
            return;
        }
        drop(inner);
        let mut tx = self.tx.lock();
        if tx.is_none() {
            let (t, rx) = mpsc::channel::<Msg>();
            let inner = self.inner.clone();
            let back = t.clone();
            let started = std::thread::Builder::new()
                .name("vfs-settle".into())
                .spawn(move || run(inner, rx, back));
            match started {
                Ok(_) => *tx = Some(t),
                Err(e) => {
                    tracing::error!("cannot start the settling thread: {e}");
                    return;
                }
            }
        }
        if let Some(t) = &*tx {
            let _ = t.send(Msg::Idle(key));
        }
    }
}

fn run(inner: Weak<Inner>, rx: mpsc::Receiver<Msg>, tx: mpsc::Sender<Msg>) {
    loop {
        let msg = match rx.recv_timeout(IDLE_CHECK) {
            Ok(m) => m,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if inner.strong_count() == 0 {
                    return;
                }
                continue;
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => return,
        };
        let Some(inner) = inner.upgrade() else { return };
        match msg {
            Msg::Idle(key) => ask(&inner, key, &tx),
            Msg::Answer(a) => {
                if let (key, before, Ok(attr)) = *a {
                    answer(&inner, key, &before, &attr);
                }
            }
        }
    }
}

/// The cached attributes of `key`, if cached.
fn cached(inner: &Inner, key: Key) -> Option<InodeSnap> {
    let idx = inner.writer().find_inode(&inner.dc, key.0, key.1)?;
    inner.dc.inode_snap(idx)
}

fn ask(inner: &Arc<Inner>, key: Key, tx: &mpsc::Sender<Msg>) {
    let Some(before) = cached(inner, key) else {
        return;
    };
    if before.flags & I_STALE != 0 {
        // The next stat asks anyway.
        return;
    }
    let Ok(fs) = inner.sb(key.0) else { return };
    let tx = tx.clone();
    let asked = fs.ordered().is_some_and(|o| {
        o.getattr_behind(
            NodeId(key.1),
            Box::new(move |r| {
                let _ = tx.send(Msg::Answer(Box::new((key, before, r))));
            }),
        )
    });
    if asked {
        inner.wb.shared.settler.asked.fetch_add(1, Relaxed);
    }
}

fn answer(inner: &Arc<Inner>, key: Key, before: &InodeSnap, attr: &Attr) {
    let wb = &inner.wb;
    if wb.shared.ledger.pending(key) || wb.pieces.lock().by_key.contains_key(&key) {
        // Its completion asks again.
        return;
    }
    let dc = &inner.dc;
    let mut w = inner.writer();
    let Some(idx) = w.find_inode(dc, key.0, key.1) else {
        return;
    };
    let Some(now) = dc.inode_snap(idx) else {
        return;
    };
    if !unchanged(before, &now) || now.flags & I_STALE != 0 || !differs(&now, attr) {
        return;
    }
    if now.is_reg() && attr.size < now.size {
        // Asked while a write past the answer's end was still gathered,
        // which was then sent and answered before this answer came: the
        // cache, which counted the write, is newer. (A smaller size set
        // by anyone else comes as a report, which marks the file stale
        // and asks again.)
        return;
    }
    let born = attr.btime.as_nanos();
    if now.btime != 0 && born != 0 && now.btime != born {
        // Another file under the node id: a lookup sorts that out.
        return;
    }
    tracing::debug!(
        node = key.1,
        nlink = attr.nlink,
        was_nlink = now.nlink,
        size = attr.size,
        "settled"
    );
    w.refresh(dc, idx, attr);
    drop(w);
    wb.shared.settler.settled.fetch_add(1, Relaxed);
    for l in wb.shared.settler.listeners.read().iter() {
        l(key.0, attr.ino);
    }
}

/// Nothing changed the cached attributes between `a` and `b`.
fn unchanged(a: &InodeSnap, b: &InodeSnap) -> bool {
    (
        a.ino, a.mode, a.uid, a.gid, a.nlink, a.size, a.mtime, a.ctime,
    ) == (
        b.ino, b.mode, b.uid, b.gid, b.nlink, b.size, b.mtime, b.ctime,
    )
}

/// The backend's attributes differ from the cached ones (the access
/// time aside: reading a file moves it, and nothing compares it).
fn differs(s: &InodeSnap, a: &Attr) -> bool {
    let born = a.btime.as_nanos();
    (
        s.ino, s.mode, s.uid, s.gid, s.nlink, s.size, s.mtime, s.ctime,
    ) != (
        a.ino,
        a.mode,
        a.uid,
        a.gid,
        a.nlink,
        a.size,
        a.mtime.as_nanos(),
        a.ctime.as_nanos(),
    ) || (born != 0 && s.btime != born)
}
