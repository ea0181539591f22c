//! Write-back: the changes the vfs answers from its cache and lets run
//! behind the caller, for every backend.
//!
//! With a cache (`cache=loose`/`coherent`), without `sync_metadata`, and
//! on a backend with [`caps::Ordered`] (a 9P server that runs a
//! connection's changes in arrival order), an unlink, a write and an
//! attribute change whose outcome the cache can work out (see
//! [`decide_setattr`]) are answered at once and [submitted]; a backend
//! without it (a local disk, memory) is called as usual,
//! since running behind buys nothing there. This module owns:
//!
//! - **what is in flight**, per inode (the file written or changed; for an
//!   unlink, the directory and the file) and in total, bounded by
//!   [`MAX_INFLIGHT`] (a submitter waits for room);
//! - **ordering**: an `Ordered` backend carries out what it was given in
//!   order and before anything asked of it later, so no call waits for
//!   another; a file's own small writes are gathered into pieces (see
//!   [`Pieces`]) and a piece is sent before anything else is asked about
//!   the file, so it is never overtaken;
//! - **errors**, as Linux's `errseq_t`: a failed change is logged with its
//!   path and counted, recorded against its inodes with the failure's
//!   sequence number, and reported once to every file that was open on the
//!   inode, at its next `fsync` or `close` (each open file keeps the
//!   sequence number it last saw, [`Cursor`]); `syncfs` reports any failure
//!   since the file last looked, and [`crate::Vfs::sync`] any since the
//!   last `Vfs::sync`. The cache is corrected (the entry or the attributes
//!   the change was answered from are dropped) from a thread of its own:
//!   the backend's thread that reports the failure must never wait for a
//!   cache lock whose holder may be waiting for a reply only that thread
//!   can deliver;
//! - **waiting**: `fsync` of a file waits for its changes, of a directory
//!   for its entries' changes; `syncfs`, `Vfs::sync` and dropping the vfs
//!   wait for everything.
//!
//! [submitted]: walkfs_fsapi::caps::Ordered::submit
//! [`caps::Ordered`]: walkfs_fsapi::caps::Ordered

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{mpsc, Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use walkfs_fsapi::{
    Attr, Change, ChangeSink, Deferred, Done, Entry, Errno, FileHandle, FileSystem, Granted, How,
    Make, NodeId, Owner, Result, SetAttr, TimeSet, Timespec,
};

use crate::dcache::{DIdx, IIdx};
use crate::Inner;

mod ledger;
mod settle;

pub use settle::SettleListener;

/// Changes in flight at most (all backends together): the bound on what
/// the vfs owes its backends.
pub(crate) const MAX_INFLIGHT: usize = 1024;
/// Bytes gathered per file before they are sent.
const MAX_PIECE: usize = 256 * 1024;
/// Writes at least this large are sent as they come.
const DIRECT: usize = 64 * 1024;
/// Files with a piece gathering before all are sent.
const MAX_FILES: usize = 64;
/// Writes and truncates that end past this size wait for the backend: a
/// file system refuses sizes past its own limit with EFBIG, which a
/// caller answered at once would hear only at close. 16 GiB is the
/// smallest limit of the file systems in use (ext4 with 1 KiB blocks).
pub(crate) const BEHIND_MAX_SIZE: u64 = 16 << 30;
/// How long a piece may wait before it is sent.
pub(crate) const MAX_AGE: Duration = Duration::from_millis(20);

/// The vfs calls running on this thread (nested: a call may make
/// another), and the keys of the changes they sent behind, held until the
/// outermost returns.
struct Later {
    depth: u32,
    held: Vec<(Arc<Shared>, Keys)>,
}

thread_local! {
    static LATER: std::cell::RefCell<Later> =
        const { std::cell::RefCell::new(Later { depth: 0, held: Vec::new() }) };
}

/// A vfs call that sends changes behind and then updates the cached
/// attributes itself (a link count down after an unlink, a size up after
/// a write): while it lives, the inodes of the changes it sent do not
/// count as idle, so their attributes are not settled from the backend
/// until the update is made. Without it a change that completes before
/// the call's update would be settled first and then counted twice (an
/// unlink of one of two names showed a link count of 0).
pub(crate) struct SettleLater(());

impl SettleLater {
    pub(crate) fn new() -> SettleLater {
        LATER.with(|l| l.borrow_mut().depth += 1);
        SettleLater(())
    }
}

impl Drop for SettleLater {
    fn drop(&mut self) {
        let held = LATER.with(|l| {
            let mut l = l.borrow_mut();
            l.depth -= 1;
            if l.depth == 0 {
                std::mem::take(&mut l.held)
            } else {
                Vec::new()
            }
        });
        for (sh, keys) in held {
            let idle = sh.ledger.release(&keys);
            sh.settle(&keys, idle);
        }
    }
}

/// An inode as its backend knows it: (superblock, node).
pub(crate) type Key = (usize, u64);

/// The inodes a change is counted against (at most two, no allocation:
/// this runs for every write).
struct Keys {
    k: [Key; 2],
    n: usize,
}

impl std::ops::Deref for Keys {
    type Target = [Key];

    fn deref(&self) -> &[Key] {
        &self.k[..self.n]
    }
}

fn keys_of(sb: usize, keys: [Option<u64>; 2]) -> Keys {
    let mut out = Keys {
        k: [(0, 0); 2],
        n: 0,
    };
    for k in keys.into_iter().flatten() {
        out.k[out.n] = (sb, k);
        out.n += 1;
    }
    out
}

/// A failed change, for the log and the cache's correction.
struct Failure {
    sb: usize,
    node: u64,
    /// The names the change made, removed or moved: `(directory node,
    /// name)` (two for a rename).
    entries: Vec<(u64, Vec<u8>)>,
    /// A dentry of the file (an open file's, or the directory's), to name
    /// it in the log.
    dentry: DIdx,
    what: &'static str,
    err: Errno,
}

/// What an open file has seen of the failures (Linux's `f_wb_err` and
/// `f_sb_err`): sequence numbers, sampled at open.
#[derive(Default)]
pub(crate) struct Cursor {
    pub file: AtomicU64,
    pub sb: AtomicU64,
}

impl Cursor {
    /// Start from `(file, sb)`, as [`WriteBack::sample`] gave them.
    pub fn reset(&self, (file, sb): (u64, u64)) {
        self.file.store(file, Relaxed);
        self.sb.store(sb, Relaxed);
    }
}

/// Counters for `walkfs stats` (see [`crate::WriteBackStats`]).
#[derive(Default)]
struct Stats {
    submitted: AtomicU64,
    failed: AtomicU64,
    waits: AtomicU64,
    gathered: AtomicU64,
}

/// A file's small writes gathered into one (what the kernel's page cache
/// would have done for a mount that cannot use it, `cache=coherent`).
/// Invariant: whenever the lock is free, every byte a write was answered
/// for is either in its file's piece or submitted; pieces are submitted
/// with the lock held, so whoever flushes a file before asking its
/// backend about it cannot find the piece half-sent.
struct Piece {
    fh: FileHandle,
    off: u64,
    buf: Vec<u8>,
    since: Instant,
    dentry: DIdx,
    /// `Dcache::refreshes` when the piece began: a refresh since may have
    /// set the file's cached size back below what the piece wrote.
    refreshes: u64,
}

#[derive(Default)]
struct Pieces {
    by_key: HashMap<Key, Piece>,
    /// Files whose piece was sent after a refresh that may have set their
    /// cached size back (see [`Inner::send_piece`]), until they are marked
    /// stale: meanwhile [`Inner::flushed_file`] says so, as it did while
    /// the piece was here.
    unsure: std::collections::HashSet<Key>,
    /// The flusher thread is running.
    flusher: bool,
}

pub(crate) struct WriteBack {
    shared: Arc<Shared>,
    pieces: Mutex<Pieces>,
    /// `by_key.len()`, read without the lock before every call that asks
    /// a backend about a file.
    gathering: AtomicBool,
    /// The sequence number [`crate::Vfs::sync`] has reported up to.
    vfs_seen: AtomicU64,
}

/// A file whose cached attributes a piece's sending left unsure: the
/// dentry it was written through, and its backend node.
type Unsure = Option<(usize, DIdx, u64)>;

impl Pieces {
    /// Whether [`Inner::flushed_file`] must look here.
    fn any(&self) -> bool {
        !self.by_key.is_empty() || !self.unsure.is_empty()
    }
}

/// What a [`Done`] updates: shared with the backends' threads.
struct Shared {
    ledger: ledger::Ledger,
    stats: Stats,
    /// Where failures go to be logged and corrected (started at the first).
    fix: Mutex<Option<mpsc::Sender<Failure>>>,
    /// Where files whose changes have all landed go to have their
    /// attributes settle (settle.rs).
    pub(crate) settler: settle::Settler,
    inner: Weak<Inner>,
}

/// What [`WriteBack::stats`] reports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WriteBackStats {
    /// Changes submitted to run behind their callers.
    pub submitted: u64,
    /// Of those, still in flight.
    pub inflight: u64,
    /// Of those, refused by the backend (reported at fsync, close, syncfs).
    pub failed: u64,
    /// Times a caller waited for changes in flight (fsync, close,
    /// syncfs, room).
    pub waits: u64,
    /// Writes gathered into a piece rather than sent on their own.
    pub gathered: u64,
}

impl WriteBack {
    pub fn new(inner: Weak<Inner>) -> WriteBack {
        WriteBack {
            shared: Arc::new(Shared {
                ledger: ledger::Ledger::new(),
                stats: Stats::default(),
                fix: Mutex::new(None),
                settler: settle::Settler::new(inner.clone()),
                inner,
            }),
            pieces: Mutex::new(Pieces::default()),
            gathering: AtomicBool::new(false),
            vfs_seen: AtomicU64::new(0),
        }
    }

    pub(crate) fn on_settled(&self, l: SettleListener) {
        self.shared.settler.listeners.write().push(l);
    }

    pub(crate) fn settle_stats(&self) -> (u64, u64) {
        let s = &self.shared.settler;
        (s.asked.load(Relaxed), s.settled.load(Relaxed))
    }

    /// What a file opened now on inode `(sb, node)` has seen of the
    /// failures: a failure no file was told of yet is still reported to
    /// it, as Linux's `errseq_sample` does.
    pub fn sample(&self, sb: usize, node: u64) -> (u64, u64) {
        self.shared.ledger.sample((sb, node))
    }

    pub fn stats(&self) -> WriteBackStats {
        let s = &self.shared.stats;
        WriteBackStats {
            submitted: s.submitted.load(Relaxed),
            inflight: self.shared.ledger.inflight() as u64,
            failed: s.failed.load(Relaxed),
            waits: s.waits.load(Relaxed),
            gathered: s.gathered.load(Relaxed),
        }
    }

    pub fn reset_stats(&self) {
        let s = &self.shared.stats;
        for c in [&s.submitted, &s.failed, &s.waits, &s.gathered] {
            c.store(0, Relaxed);
        }
    }

    /// Submit `op` to `fs` (superblock `sb`), counted against `keys`;
    /// `dentry` names the file in the log. Waits for room first. `Err`
    /// when the backend could not even start it.
    #[allow(clippy::too_many_arguments)]
    fn submit(
        &self,
        fs: &dyn FileSystem,
        sb: usize,
        keys: [Option<u64>; 2],
        entries: Vec<(u64, Vec<u8>)>,
        dentry: DIdx,
        what: &'static str,
        op: Deferred<'_>,
    ) -> Result<()> {
        self.start(sb, keys, entries, dentry, what, |done| fs.submit(op, done))
    }

    /// [`WriteBack::submit`] of a change that `start` hands to its
    /// backend with the [`Done`] given.
    fn start<T>(
        &self,
        sb: usize,
        keys: [Option<u64>; 2],
        entries: Vec<(u64, Vec<u8>)>,
        dentry: DIdx,
        what: &'static str,
        start: impl FnOnce(Done) -> Result<T>,
    ) -> Result<T> {
        let sh = &self.shared;
        if sh.ledger.begin(&keys_of(sb, keys), MAX_INFLIGHT) {
            sh.stats.waits.fetch_add(1, Relaxed);
        }
        // Sent from inside a vfs call that updates the cache after this
        // returns: the keys are not idle until it is done (SettleLater).
        let inside = LATER.with(|l| {
            let mut l = l.borrow_mut();
            if l.depth > 0 {
                l.held.push((Arc::clone(sh), keys_of(sb, keys)));
            }
            l.depth > 0
        });
        if inside {
            sh.ledger.hold(&keys_of(sb, keys));
        }
        sh.stats.submitted.fetch_add(1, Relaxed);
        let node = keys[0].unwrap_or(0);
        let shared = Arc::clone(sh);
        // Every outcome goes through the record, even one that came back
        // before `submit` returned: each open file must hear of it.
        let done: Done = Box::new(move |r: Result<()>| {
            let fail = r.err().map(|err| Failure {
                sb,
                node,
                entries,
                dentry,
                what,
                err,
            });
            shared.complete(sb, keys, fail);
        });
        match start(done) {
            Ok(t) => Ok(t),
            Err(e) => {
                // Never started: `done` will not run.
                sh.complete(sb, keys, None);
                Err(e)
            }
        }
    }

    /// Wait until none of `keys` of superblock `sb` has a change in
    /// flight.
    pub fn wait_for(&self, sb: usize, keys: &[u64]) {
        if self.shared.ledger.wait_for(sb, keys) {
            self.shared.stats.waits.fetch_add(1, Relaxed);
        }
    }

    /// [`WriteBack::wait_for`] where no program waits (the kernel's
    /// release of a file, after its close returned): not counted among
    /// the waits the callers saw.
    pub fn wait_unseen(&self, sb: usize, keys: &[u64]) {
        self.shared.ledger.wait_for(sb, keys);
    }

    /// Wait until nothing is in flight.
    pub fn wait_all(&self) {
        if self.shared.ledger.wait_all() {
            self.shared.stats.waits.fetch_add(1, Relaxed);
        }
    }

    /// The failure of inode `(sb, node)` that `seen` has not reported yet,
    /// now reported (`seen` moves to the current sequence).
    pub fn report(&self, sb: usize, node: u64, seen: &AtomicU64) -> Result<()> {
        self.shared.ledger.report((sb, node), seen)
    }

    /// The failure of inode `(sb, node)` that `seen` has not reported
    /// yet, left for fsync to report (close).
    pub fn check(&self, sb: usize, node: u64, seen: &AtomicU64) -> Result<()> {
        self.shared.ledger.check((sb, node), seen)
    }

    /// Any failure `seen` has not reported yet (`syncfs`).
    pub fn report_any(&self, seen: &AtomicU64) -> Result<()> {
        self.shared.ledger.report_any(seen)
    }

    /// [`WriteBack::report_any`] against the vfs's own cursor.
    pub fn report_vfs(&self) -> Result<()> {
        self.report_any(&self.vfs_seen)
    }
}

impl Shared {
    /// A submitted change finished (`fail`: it was refused).
    fn complete(&self, sb: usize, keys: [Option<u64>; 2], fail: Option<Failure>) {
        let keys = keys_of(sb, keys);
        let idle = self.ledger.finish(&keys, fail.as_ref().map(|f| f.err));
        if let Some(f) = fail {
            self.stats.failed.fetch_add(1, Relaxed);
            self.correct(f);
            return;
        }
        self.settle(&keys, idle);
    }

    /// Ask the backend about the `keys` that went idle (bit `i` of `idle`
    /// for `keys[i]`).
    fn settle(&self, keys: &Keys, idle: u32) {
        for (i, k) in keys.iter().enumerate() {
            if idle & (1 << i) != 0 {
                self.settler.idle(*k);
            }
        }
    }

    /// Hand a failure to the corrections thread (started at the first).
    fn correct(&self, f: Failure) {
        let mut fix = self.fix.lock();
        if fix.is_none() {
            let (tx, rx) = mpsc::channel::<Failure>();
            let inner = self.inner.clone();
            let started = std::thread::Builder::new()
                .name("vfs-corrections".into())
                .spawn(move || {
                    for f in rx {
                        let Some(inner) = inner.upgrade() else { return };
                        inner.failed(f);
                    }
                });
            match started {
                Ok(_) => *fix = Some(tx),
                Err(e) => {
                    tracing::error!("cannot start the corrections thread: {e}");
                    return;
                }
            }
        }
        if let Some(tx) = &*fix {
            let _ = tx.send(f);
        }
    }
}

impl Inner {
    /// Whether changes to `fs` run behind their callers.
    #[inline]
    pub(crate) fn defers(&self, fs: &dyn FileSystem) -> bool {
        self.sw.write_back.load(Relaxed) && fs.ordered().is_some()
    }

    /// A failure, on the corrections thread: log it with its path, drop
    /// what the cache answered from (and tell the listeners: a FUSE
    /// kernel must drop it too).
    fn failed(self: &Arc<Inner>, f: Failure) {
        // A change of a name is submitted, then the cache is updated, both
        // under the directory's lock (ops/remove.rs): a refusal that came
        // back at once must not be corrected before the cache took the
        // change, or the correction is undone by it (a negative entry
        // installed after the name was restored). Taking the lock once
        // orders the correction after that caller. It is let go at once:
        // the listeners below may wait for a FUSE kernel's directory lock,
        // which a request waiting for this one may hold. `dentry` is the
        // directory's for a name's change; at worst (renamed, reused)
        // another stripe is taken for a moment.
        let dir = f
            .entries
            .first()
            .and_then(|_| self.dc.snap(f.dentry))
            .map(|s| s.inode())
            .filter(|i| !i.is_none());
        if let Some(d) = dir {
            drop(self.dirs.exclusive(&[d]));
        }
        let path = self.path_of(f.dentry);
        match f.entries.first() {
            Some((_, name)) => tracing::warn!(
                "write-back: {} of {}/{} failed: {} (reported at fsync, close, syncfs)",
                f.what,
                path,
                String::from_utf8_lossy(name),
                f.err
            ),
            None => tracing::warn!(
                "write-back: {} of {} failed: {} (reported at fsync, close, syncfs)",
                f.what,
                path,
                f.err
            ),
        }
        let mut changes = vec![Change::Inode {
            node: NodeId(f.node),
            ino: f.node,
            how: How::default(),
            at: None,
        }];
        for (dir, name) in f.entries {
            changes.push(Change::Entry {
                dir: NodeId(dir),
                dir_ino: dir,
                name,
                how: How::default(),
            });
        }
        crate::coherent::Invalidator {
            inner: Arc::downgrade(self),
            sb: f.sb,
        }
        .changed(&changes);
    }

    /// The path of dentry `d` from the vfs root, for logs (best effort: a
    /// name may be renamed meanwhile).
    pub(crate) fn path_of(&self, mut d: DIdx) -> String {
        let dc = &self.dc;
        let mut names = Vec::new();
        for _ in 0..4096 {
            if d == self.root || d.is_none() {
                break;
            }
            let Some(den) = dc.dentry(d) else { break };
            names.push(dc.name_of(d));
            let p = DIdx(den.parent.load(Relaxed));
            if p == d {
                break;
            }
            d = p;
        }
        let mut out = String::new();
        for n in names.iter().rev() {
            out.push('/');
            out.push_str(&String::from_utf8_lossy(n));
        }
        if out.is_empty() {
            out.push('/');
        }
        out
    }

    /// Write `data` at `off` of the open file `(sb, node)`, behind the
    /// caller: gathered into the file's piece when small, else submitted.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn write_behind(
        &self,
        fs: &dyn FileSystem,
        sb: usize,
        node: u64,
        fh: FileHandle,
        off: u64,
        data: &[u8],
        dentry: DIdx,
    ) -> Result<()> {
        let wb = &self.wb;
        let key = (sb, node);
        let mut p = wb.pieces.lock();
        if let Some(piece) = p.by_key.get_mut(&key) {
            if piece.fh == fh
                && piece.off + piece.buf.len() as u64 == off
                && piece.buf.len() + data.len() <= MAX_PIECE
            {
                piece.buf.extend_from_slice(data);
                wb.shared.stats.gathered.fetch_add(1, Relaxed);
                return Ok(());
            }
            let piece = p.by_key.remove(&key).expect("just found");
            let (r, unsure) = self.send_piece(&mut p, fs, key, piece);
            if unsure.is_some() || r.is_err() {
                wb.gathering.store(p.any(), Relaxed);
                drop(p);
                self.mark_unsure([unsure]);
                r?;
                return self.write_behind(fs, sb, node, fh, off, data, dentry);
            }
        }
        if data.len() >= DIRECT {
            wb.gathering.store(p.any(), Relaxed);
            return self.submit_write(fs, key, fh, off, data, dentry);
        }
        if p.by_key.len() >= MAX_FILES {
            let all: Vec<(Key, Piece)> = p.by_key.drain().collect();
            let mut unsure = Vec::new();
            for (k, piece) in all {
                if let Ok(fs) = self.sb(k.0) {
                    // A failure is recorded against its file.
                    unsure.push(self.send_piece(&mut p, &*fs, k, piece).1);
                }
            }
            if unsure.iter().any(Option::is_some) {
                wb.gathering.store(p.any(), Relaxed);
                drop(p);
                self.mark_unsure(unsure);
                return self.write_behind(fs, sb, node, fh, off, data, dentry);
            }
        }
        p.by_key.insert(
            key,
            Piece {
                fh,
                off,
                buf: data.to_vec(),
                since: Instant::now(),
                dentry,
                refreshes: self.dc.refreshes.load(std::sync::atomic::Ordering::Acquire),
            },
        );
        wb.shared.stats.gathered.fetch_add(1, Relaxed);
        wb.gathering.store(true, Relaxed);
        if !p.flusher {
            p.flusher = self.start_flusher();
        }
        Ok(())
    }

    fn submit_write(
        &self,
        fs: &dyn FileSystem,
        key: Key,
        fh: FileHandle,
        off: u64,
        data: &[u8],
        dentry: DIdx,
    ) -> Result<()> {
        self.wb.submit(
            fs,
            key.0,
            [Some(key.1), None],
            Vec::new(),
            dentry,
            "write",
            Deferred::Write {
                node: NodeId(key.1),
                fh,
                off,
                data,
            },
        )
    }

    /// Submit a piece (the pieces' lock held: see [`Piece`]). Returns,
    /// with the outcome, the file whose cached attributes must be asked
    /// for again (see [`Inner::mark_unsure`]), if any.
    ///
    /// Two answers of the backend can be older than the cache here, and
    /// both are caught:
    /// - one asked before the piece was submitted and cached after it:
    ///   the attribute generation moves once the piece is on its way, and
    ///   whoever compares it (namei, listings, [`Inner::refetch_attrs`])
    ///   keeps the cached attributes. (After the submission: a question
    ///   sent later is answered after the write, the backend keeping a
    ///   connection's order.)
    /// - one cached while the piece was still gathered (`refreshes`
    ///   moved): it may have set the size back below what the piece
    ///   writes, and nothing would ask again once the piece is gone.
    fn send_piece(
        &self,
        pieces: &mut Pieces,
        fs: &dyn FileSystem,
        key: Key,
        p: Piece,
    ) -> (Result<()>, Unsure) {
        // Before (a question asked until now is answered without the
        // piece) and after the submission (one asked while it was on its
        // way may be too).
        self.attr_gen
            .fetch_add(1, std::sync::atomic::Ordering::Release);
        let r = self.submit_write(fs, key, p.fh, p.off, &p.buf, p.dentry);
        self.attr_gen
            .fetch_add(1, std::sync::atomic::Ordering::Release);
        self.attrs_changed(key.0, key.1);
        let refreshed = self.dc.refreshes.load(std::sync::atomic::Ordering::Acquire) != p.refreshes;
        if refreshed {
            pieces.unsure.insert(key);
        }
        (r, refreshed.then_some((key.0, p.dentry, key.1)))
    }

    /// Make the next stat of the files `unsure` names ask the backend
    /// (called without the pieces' lock: the writer's lock is taken
    /// first elsewhere).
    fn mark_unsure(&self, unsure: impl IntoIterator<Item = Unsure>) {
        let mut w = None;
        let mut done = Vec::new();
        for (sb, d, node) in unsure.into_iter().flatten() {
            done.push((sb, node));
            let Some(ino) = self.dc.dentry(d).map(|d| IIdx(d.target.load(Relaxed))) else {
                continue;
            };
            if self
                .dc
                .inode(ino)
                .is_some_and(|i| i.node.load(Relaxed) == node)
            {
                w.get_or_insert_with(|| self.writer())
                    .mark_stale(&self.dc, ino);
            }
        }
        drop(w);
        if done.is_empty() {
            return;
        }
        let mut p = self.wb.pieces.lock();
        for k in done {
            p.unsure.remove(&k);
        }
        self.wb.gathering.store(p.any(), Relaxed);
    }

    /// Send the piece of file `(sb, node)`, if any: before anything asks
    /// the backend about the file, and at close and fsync.
    #[inline]
    pub(crate) fn flush_file(&self, sb: usize, node: u64) -> Result<()> {
        self.flushed_file(sb, node).map(drop)
    }

    /// [`Inner::flush_file`], saying whether there was a piece that the
    /// cached attributes may lack: one during which attributes were
    /// refreshed from the backend (which could set the size back below
    /// it). Then a stat asks the backend (which has the piece first: it
    /// runs changes in order). Otherwise the cache has every write of the
    /// piece (each moved the size as it was answered) and is used.
    #[inline]
    pub(crate) fn flushed_file(&self, sb: usize, node: u64) -> Result<bool> {
        if !self.wb.gathering.load(Relaxed) {
            return Ok(false);
        }
        self.flush_file_slow(sb, node)
    }

    #[cold]
    fn flush_file_slow(&self, sb: usize, node: u64) -> Result<bool> {
        let mut p = self.wb.pieces.lock();
        let Some(piece) = p.by_key.remove(&(sb, node)) else {
            return Ok(p.unsure.contains(&(sb, node)));
        };
        let (sent, unsure) = match self.sb(sb) {
            Ok(fs) => self.send_piece(&mut p, &*fs, (sb, node), piece),
            Err(e) => (Err(e), None),
        };
        // Cleared only once the piece is submitted: a caller that reads
        // the flag unset without the lock (the fast path) must find every
        // piece counted in flight, never one half-way.
        self.wb.gathering.store(p.any(), Relaxed);
        drop(p);
        let refreshed = unsure.is_some();
        self.mark_unsure([unsure]);
        sent.map(|()| refreshed)
    }

    /// Send every piece (syncfs, sync, unmount).
    pub(crate) fn flush_all(&self) {
        let mut p = self.wb.pieces.lock();
        let all: Vec<(Key, Piece)> = p.by_key.drain().collect();
        let mut unsure = Vec::new();
        for (k, piece) in all {
            if let Ok(fs) = self.sb(k.0) {
                unsure.push(self.send_piece(&mut p, &*fs, k, piece).1);
            }
        }
        // After the sends (see flush_file_slow).
        self.wb.gathering.store(p.any(), Relaxed);
        drop(p);
        self.mark_unsure(unsure);
    }

    /// Start the thread that sends pieces older than [`MAX_AGE`]; it ends
    /// with the vfs.
    fn start_flusher(&self) -> bool {
        let weak = self.wb.shared.inner.clone();
        std::thread::Builder::new()
            .name("vfs-writeback".into())
            .spawn(move || loop {
                std::thread::sleep(MAX_AGE / 2);
                let Some(inner) = weak.upgrade() else { return };
                if !inner.wb.gathering.load(Relaxed) {
                    continue;
                }
                let mut p = inner.wb.pieces.lock();
                let now = Instant::now();
                let due: Vec<Key> = p
                    .by_key
                    .iter()
                    .filter(|(_, piece)| now.duration_since(piece.since) >= MAX_AGE)
                    .map(|(k, _)| *k)
                    .collect();
                let mut unsure = Vec::new();
                for k in due {
                    let Some(piece) = p.by_key.remove(&k) else {
                        continue;
                    };
                    if let Ok(fs) = inner.sb(k.0) {
                        unsure.push(inner.send_piece(&mut p, &*fs, k, piece).1);
                    }
                }
                inner.wb.gathering.store(p.any(), Relaxed);
                drop(p);
                inner.mark_unsure(unsure);
            })
            .map_err(|e| tracing::error!("cannot start the write-back thread: {e}"))
            .is_ok()
    }

    /// Submit an attribute change already decided from the cache.
    pub(crate) fn setattr_behind(
        &self,
        fs: &dyn FileSystem,
        sb: usize,
        node: u64,
        set: SetAttr,
        dentry: DIdx,
    ) -> Result<()> {
        self.wb.submit(
            fs,
            sb,
            [Some(node), None],
            Vec::new(),
            dentry,
            "attribute change",
            Deferred::SetAttr {
                node: NodeId(node),
                set,
            },
        )
    }

    /// Make `what` as `name` in directory `dir` (of superblock `sb`,
    /// dentry `dentry`) for `owner`, as node `node` that `fs` granted,
    /// behind the caller: counted against the directory (its fsync waits
    /// for it) and the new node (the file's fsync waits for its
    /// creation). The entry to show now, and a file's open handle.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn make_behind(
        &self,
        fs: &dyn FileSystem,
        sb: usize,
        dir: u64,
        name: &[u8],
        owner: Owner,
        node: Granted,
        what: Make<'_>,
        dentry: DIdx,
    ) -> Result<(Entry, Option<FileHandle>)> {
        let label = match what {
            Make::File { .. } => "create",
            Make::Dir { .. } => "mkdir",
            Make::Symlink { .. } => "symlink",
            Make::Special { .. } => "mknod",
        };
        let fh = self.wb.start(
            sb,
            [Some(dir), Some(node.node.0)],
            vec![(dir, name.to_vec())],
            dentry,
            label,
            |done| match fs.ordered() {
                Some(o) => o.make_behind(NodeId(dir), name, owner, node, what, done),
                None => Err(Errno::ENOSYS),
            },
        )?;
        let attr = what.attr(node.ino, owner, Timespec::now());
        Ok((
            Entry {
                node: node.node,
                attr,
            },
            fh,
        ))
    }

    /// Submit `op`, a change of name `name` in directory `dir` (of
    /// superblock `sb`, dentry `dentry`) that concerns file `node` (the
    /// one unlinked, removed or linked): counted against both, so that
    /// fsync of either waits for it; a refusal brings the name back.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn name_behind(
        &self,
        fs: &dyn FileSystem,
        sb: usize,
        dir: u64,
        name: &[u8],
        node: u64,
        dentry: DIdx,
        op: Deferred<'_>,
    ) -> Result<()> {
        let what = match op {
            Deferred::Unlink { .. } => "unlink",
            Deferred::Rmdir { .. } => "rmdir",
            Deferred::Link { .. } => "link",
            Deferred::Rename { .. } => "rename",
            Deferred::Write { .. } | Deferred::SetAttr { .. } => "change",
        };
        self.wb.submit(
            fs,
            sb,
            [Some(dir), Some(node)],
            vec![(dir, name.to_vec())],
            dentry,
            what,
            op,
        )
    }

    /// Submit the rename of `name` in `dir` (file `node`) to `newname` in
    /// `newdir`: counted against both directories; a refusal brings both
    /// names back as the server has them.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn rename_behind(
        &self,
        fs: &dyn FileSystem,
        sb: usize,
        dir: u64,
        name: &[u8],
        newdir: u64,
        newname: &[u8],
        node: u64,
        dentry: DIdx,
    ) -> Result<()> {
        self.wb.submit(
            fs,
            sb,
            [Some(dir), (newdir != dir).then_some(newdir)],
            vec![(dir, name.to_vec()), (newdir, newname.to_vec())],
            dentry,
            "rename",
            Deferred::Rename {
                parent: NodeId(dir),
                name,
                newparent: NodeId(newdir),
                newname,
                node: NodeId(node),
            },
        )
    }

    /// At close (and FUSE's flush) of `file` on inode `(sb, node)`: its
    /// gathered writes sent; with `cache=coherent` its changes waited for
    /// (close-to-open: the next open, anywhere, sees them); then a
    /// failure the file has not reported, left for fsync to report too.
    pub(crate) fn file_closing(&self, seen: &AtomicU64, sb: usize, node: u64) -> Result<()> {
        let sent = self.flush_file(sb, node);
        // A file under a lease is looked at by nobody else before its
        // server has recalled the lease, and the recall sends what is
        // pending first: close-to-open holds without the wait.
        if self.coherent && !self.sb(sb).is_ok_and(|fs| fs.leased(NodeId(node))) {
            self.wb.wait_for(sb, &[node]);
        }
        sent.and(self.wb.check(sb, node, seen))
    }

    /// Everything sent and answered; then any failure since the last call
    /// (unmount, `walkfs sync`).
    pub(crate) fn sync_all(&self) -> Result<()> {
        self.flush_all();
        self.wb.wait_all();
        self.wb.report_vfs()
    }
}

/// Can `set` be answered from `cur` without the backend? Then the part of
/// it to send (`None`: nothing) and the attributes that result. Only
/// changes whose outcome no backend policy decides: times, owners, and
/// modes, of a file with no set-id bit and setting none (a chown clears
/// them, a chmod may drop them); a chown to the current owner is not sent
/// at all; sizes wait. The caller has checked the permission.
pub(crate) fn decide_setattr(set: &SetAttr, cur: &Attr) -> Option<(Option<SetAttr>, Attr)> {
    const SETID: u32 = libc::S_ISUID | libc::S_ISGID;
    if set.size.is_some() || cur.mode & SETID != 0 || set.mode.is_some_and(|m| m & SETID != 0) {
        return None;
    }
    let mut set = *set;
    if set.uid == Some(cur.uid) {
        set.uid = None;
    }
    if set.gid == Some(cur.gid) {
        set.gid = None;
    }
    let now = Timespec::now();
    let mut a = *cur;
    a.uid = set.uid.unwrap_or(a.uid);
    a.gid = set.gid.unwrap_or(a.gid);
    if let Some(m) = set.mode {
        a.mode = (a.mode & libc::S_IFMT) | (m & 0o7777);
    }
    for (t, slot) in [(set.atime, &mut a.atime), (set.mtime, &mut a.mtime)] {
        match t {
            None => {}
            Some(TimeSet::Now) => *slot = now,
            Some(TimeSet::At(ts)) => *slot = ts,
        }
    }
    if set == SetAttr::default() {
        return Some((None, a));
    }
    a.ctime = now;
    Some((Some(set), a))
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use walkfs_fsapi::{Errno, FileSystem, NodeId};

    use crate::tests_util::LaterFs;
    use crate::{Creds, Options, Vfs, AT_FDCWD};

    fn later_vfs(opts: &str) -> (Arc<LaterFs>, Vfs) {
        let fs = LaterFs::new();
        let vfs = Vfs::new(fs.clone(), &Options::parse(opts).expect("opts")).expect("vfs");
        (fs, vfs)
    }

    fn size_in_backend(fs: &LaterFs, name: &[u8]) -> u64 {
        let e = fs.inner.lookup(fs.inner.root(), name).expect("lookup");
        fs.inner.getattr(e.node).expect("getattr").size
    }

    #[test]
    fn writes_run_behind_their_callers_and_fsync_waits_for_them() {
        let (fs, vfs) = later_vfs("");
        let ctx = vfs.context(Creds::root());
        let fd = ctx
            .openat(AT_FDCWD, b"/f", libc::O_CREAT | libc::O_WRONLY, 0o644)
            .expect("create");
        // A wide write goes at once; small ones are gathered. All are
        // answered while the backend holds nothing yet, and the caller's
        // stat sees them.
        let wide = vec![7u8; 100 * 1024];
        assert_eq!(ctx.write(fd, &wide), Ok(wide.len()));
        for _ in 0..3 {
            assert_eq!(ctx.write(fd, b"0123456789"), Ok(10));
        }
        // The gate opens shortly (also if an assertion below fails, so
        // the vfs's drop does not wait for ever).
        let opener = {
            let fs = fs.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(100));
                fs.gate.open();
            })
        };
        let want = 30 + wide.len() as u64;
        assert_eq!(size_in_backend(&fs, b"f"), 0, "held at the gate");
        assert!(vfs.write_back_stats().inflight >= 1);
        assert!(vfs.write_back_stats().gathered >= 3);
        // A stat sends the gathered piece and answers from the cache,
        // which every write moved: nothing refreshed it meanwhile.
        let t = Instant::now();
        assert_eq!(ctx.fstat(fd).expect("fstat").st_size as u64, want);
        assert!(t.elapsed() < Duration::from_millis(50), "the stat waited");
        assert_eq!(size_in_backend(&fs, b"f"), 0, "still at the gate");
        // A refresh from the backend while writes are gathered (here,
        // one the test forces) could set the size back: then a stat
        // asks the backend, which answers after the changes before it
        // (`caps::Ordered`).
        assert_eq!(ctx.write(fd, b"0123456789"), Ok(10));
        vfs.inner
            .dc
            .refreshes
            .fetch_add(1, std::sync::atomic::Ordering::Release);
        let t = Instant::now();
        assert_eq!(ctx.fstat(fd).expect("fstat").st_size as u64, want + 10);
        assert!(t.elapsed() >= Duration::from_millis(20), "the stat waited");
        let want = want + 10;
        assert_eq!(ctx.fsync(fd), Ok(()));
        assert_eq!(size_in_backend(&fs, b"f"), want);
        assert_eq!(vfs.write_back_stats().inflight, 0);
        assert_eq!(ctx.close(fd), Ok(()));
        opener.join().expect("opener");
    }

    #[test]
    fn a_failure_reaches_every_file_open_on_the_inode_once() {
        let (fs, vfs) = later_vfs("");
        fs.gate.open();
        let ctx = vfs.context(Creds::root());
        let a = ctx
            .openat(AT_FDCWD, b"/f", libc::O_CREAT | libc::O_WRONLY, 0o644)
            .expect("create");
        let b = ctx
            .openat(AT_FDCWD, b"/f", libc::O_WRONLY, 0)
            .expect("open");
        *fs.fail.lock().expect("fail") = Some(Errno::ENOSPC);
        assert_eq!(ctx.write(a, b"data"), Ok(4), "answered before it fails");
        assert_eq!(ctx.fsync(a), Err(Errno::ENOSPC));
        assert_eq!(ctx.fsync(a), Ok(()), "reported once to a file");
        assert_eq!(ctx.fsync(b), Err(Errno::ENOSPC), "and once to the other");
        assert_eq!(ctx.close(b), Ok(()));
        *fs.fail.lock().expect("fail") = None;
        let c = ctx
            .openat(AT_FDCWD, b"/f", libc::O_WRONLY, 0)
            .expect("open");
        assert_eq!(ctx.fsync(c), Ok(()), "opened after fsync heard it");
        // No syncfs heard it yet: a file opened since does (errseq).
        assert_eq!(ctx.syncfs(c), Err(Errno::ENOSPC));
        assert_eq!(ctx.syncfs(c), Ok(()));
        // syncfs has a cursor of its own (Linux's f_sb_err).
        assert_eq!(ctx.syncfs(a), Err(Errno::ENOSPC));
        assert_eq!(ctx.syncfs(a), Ok(()));
        assert_eq!(vfs.sync(), Err(Errno::ENOSPC), "the vfs's own cursor");
        assert_eq!(vfs.sync(), Ok(()));
        assert_eq!(vfs.write_back_stats().failed, 1);
        for fd in [a, c] {
            assert_eq!(ctx.close(fd), Ok(()));
        }
    }

    #[test]
    fn an_unlink_runs_behind_and_a_refused_one_leaves_the_cache() {
        let (fs, vfs) = later_vfs("");
        let ctx = vfs.context(Creds::root());
        for name in [&b"/gone"[..], b"/kept"] {
            let fd = ctx
                .openat(AT_FDCWD, name, libc::O_CREAT | libc::O_WRONLY, 0o644)
                .expect("create");
            ctx.close(fd).expect("close");
        }
        // Held in flight: the vfs says it is gone, the backend has it.
        assert_eq!(ctx.unlinkat(AT_FDCWD, b"/gone", 0), Ok(()));
        assert_eq!(ctx.faccessat(AT_FDCWD, b"/gone", 0, 0), Err(Errno::ENOENT));
        assert!(fs.inner.lookup(fs.inner.root(), b"gone").is_ok());
        fs.gate.open();
        assert_eq!(vfs.sync(), Ok(()));
        assert_eq!(
            fs.inner.lookup(fs.inner.root(), b"gone").err(),
            Some(Errno::ENOENT)
        );
        // Refused later: reported, and the name comes back.
        *fs.fail.lock().expect("fail") = Some(Errno::EACCES);
        assert_eq!(ctx.unlinkat(AT_FDCWD, b"/kept", 0), Ok(()));
        assert_eq!(vfs.sync(), Err(Errno::EACCES));
        let t = Instant::now();
        while ctx.faccessat(AT_FDCWD, b"/kept", 0, 0).is_err() {
            assert!(t.elapsed() < Duration::from_secs(5), "the name came back");
            std::thread::sleep(Duration::from_millis(5));
        }
        let _ = NodeId(0);
    }

    #[test]
    fn sync_metadata_waits_for_every_change() {
        let (fs, vfs) = later_vfs("sync_metadata=1");
        let ctx = vfs.context(Creds::root());
        let fd = ctx
            .openat(AT_FDCWD, b"/f", libc::O_CREAT | libc::O_WRONLY, 0o644)
            .expect("create");
        // The gate stays shut: nothing may be submitted.
        assert_eq!(ctx.write(fd, b"now"), Ok(3));
        assert_eq!(size_in_backend(&fs, b"f"), 3);
        assert_eq!(vfs.write_back_stats().submitted, 0);
        ctx.close(fd).expect("close");
    }
}
