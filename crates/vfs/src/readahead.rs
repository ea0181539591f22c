//! Directory read-ahead: when a listing shows subdirectories, their
//! listings are asked for at once, without waiting
//! ([`caps::Listings::list_ahead`]), so a tree walk (`find`, `du`,
//! `git status`, a build's header search) finds most directories already
//! on their way instead of paying a round trip for each. Only a backend
//! whose answers travel offers it (the 9P client over a server that keeps
//! a connection's order); for the others `list_ahead` says no and nothing
//! here runs.
//!
//! The policy:
//! - Depth first: a listed directory's subdirectories go before the
//!   directories queued earlier (its later siblings and theirs), as
//!   `find` and `du` go.
//! - At most `dir_readahead` listings asked for and not yet taken
//!   ([`MAX_LISTINGS`] at most), and [`PER_PARENT`] per directory, so a
//!   wide directory's later subdirectories, which a depth-first walk
//!   reaches last, leave room for the deeper ones it reaches first.
//! - A listing is used only if it is as fresh as one asked for now would
//!   be: no change made through this vfs since it was asked for touched
//!   the directory's names or the attributes of a file it lists
//!   ([`ChangeLog`]), no change of permissions or mounts was made, no
//!   change was reported (`ext_seen`), and it is younger than [`MAX_AGE`]
//!   (other writers, in a mode without change reports, are seen no later
//!   than through attribute timeouts). Otherwise the directory is listed
//!   the ordinary way and the early answer is forgotten. Changes
//!   elsewhere do not count: `rm -rf` unlinks in one directory while the
//!   listings of the next ones are on their way.
//!
//! Why the log suffices: an ask holds its directory's lock shared
//! (dirlock.rs) while it reads the log's position and sends, and a change
//! of ours to that directory's names holds the lock exclusive and is
//! logged after it went to the backend. So the change either was
//! submitted first (and an ordered backend answers the listing after it)
//! or is logged after the ask's position. A change of attributes takes no
//! directory lock, but is logged after its submission too: logged before
//! the ask read the position, it was submitted before the listing; logged
//! after, the use sees it. The ask only *tries* the lock: it runs while
//! its caller holds the listed parent's, and a directory lock is never
//! waited for while another is held.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::{Acquire, Relaxed};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use walkfs_fsapi::{DirPlus, ListAhead, NodeId};

use crate::dcache::IIdx;
use crate::Inner;

/// Listings asked for ahead and not yet taken, at most (each holds
/// backend resources while in flight: three tags and two fids for 9P).
pub const MAX_LISTINGS: usize = 64;
/// The default number of listings read ahead at once (`dir_readahead`).
pub const DEFAULT_LISTINGS: usize = 48;
/// Listings asked for at once for the subdirectories of one directory.
pub const PER_PARENT: usize = 8;
/// A listing older than this is not used.
pub const MAX_AGE: Duration = Duration::from_secs(1);
/// Directories waiting for room to be read ahead, at most.
const MAX_QUEUED: usize = 4096;
/// Queued directories looked at for one with room.
const SCAN: usize = 256;

/// A directory of superblock `sb`: its backend node.
type Key = (usize, u64);

/// A listing on its way, and what the vfs looked like when it was asked.
struct Asked {
    parent: Key,
    at: Instant,
    gens: Gens,
    ticket: Box<dyn ListAhead>,
}

/// Where a listing's freshness is judged from (module comment): the
/// change log's position, and the generations of attributes (an answer
/// older than a change of ours does not overwrite what is cached) and of
/// reported changes.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct Gens {
    pub log: u64,
    pub attrs: u64,
    pub seen: u64,
}

impl Gens {
    pub(crate) fn now(inner: &Inner) -> Gens {
        Gens {
            log: inner.ra_log.position(),
            attrs: inner.attr_gen.load(Acquire),
            seen: inner.ext_seen.load(Acquire),
        }
    }
}

/// What a logged change touched.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Touched {
    /// The names in directory `key`.
    Names(Key),
    /// The attributes of node `key` (shown in every listing of a
    /// directory holding one of its names).
    Attrs(Key),
}

/// Changes recorded before this many later ones are forgotten: a listing
/// asked for before the oldest one kept is not used.
const LOG_KEPT: usize = 1024;

/// The recent changes made through this vfs and what each touched, in
/// order: a listing read ahead is used only if none logged since it was
/// asked for touched it. Only while read-ahead is on is anything logged.
#[derive(Default)]
pub(crate) struct ChangeLog {
    state: Mutex<LogState>,
}

#[derive(Default)]
struct LogState {
    /// Changes logged so far (the position).
    seq: u64,
    /// Every change up to this position counts as touching everything
    /// (forgotten, or logged as such).
    floor: u64,
    /// `(position after it, what it touched)`, oldest first.
    recent: VecDeque<(u64, Touched)>,
}

impl ChangeLog {
    pub fn position(&self) -> u64 {
        self.state.lock().seq
    }

    /// Log a change that went to the backend (or was cached) just now.
    pub fn record(&self, t: Touched) {
        let mut s = self.state.lock();
        s.seq += 1;
        let at = s.seq;
        if s.recent.len() >= LOG_KEPT {
            if let Some((p, _)) = s.recent.pop_front() {
                s.floor = p;
            }
        }
        s.recent.push_back((at, t));
    }

    /// Log a change that may touch any listing (permissions, mounts,
    /// cache drops).
    pub fn everything(&self) {
        let mut s = self.state.lock();
        s.seq += 1;
        s.floor = s.seq;
        s.recent.clear();
    }

    /// No change logged after position `since` touched the names of
    /// `dir` or the attributes of a node `listed` says the listing shows.
    pub fn untouched(&self, since: u64, dir: Key, listed: impl Fn(Key) -> bool) -> bool {
        let s = self.state.lock();
        if s.floor > since {
            return false;
        }
        s.recent
            .iter()
            .rev()
            .take_while(|(p, _)| *p > since)
            .all(|(_, t)| match *t {
                Touched::Names(k) => k != dir,
                Touched::Attrs(k) => !listed(k),
            })
    }
}

/// A subdirectory to read ahead: its key, its inode slot (whose lock the
/// ask tries), and its parent's key.
#[derive(Clone, Copy)]
struct Queued {
    key: Key,
    ino: IIdx,
    parent: Key,
}

/// Listings read ahead, by directory, and the directories to read ahead
/// next.
pub(crate) struct ReadAhead {
    /// Listings at most at once (`dir_readahead`; 0: off).
    max: AtomicUsize,
    map: Mutex<HashMap<Key, Asked>>,
    queue: Mutex<VecDeque<Queued>>,
}

impl ReadAhead {
    pub fn new(max: usize) -> ReadAhead {
        ReadAhead {
            max: AtomicUsize::new(max.min(MAX_LISTINGS)),
            map: Mutex::new(HashMap::new()),
            queue: Mutex::new(VecDeque::new()),
        }
    }

    pub fn set_max(&self, max: usize) {
        self.max.store(max.min(MAX_LISTINGS), Relaxed);
    }

    pub fn on(&self) -> bool {
        self.max.load(Relaxed) > 0
    }

    /// The listing asked for `key`, now the caller's.
    fn take(&self, key: Key) -> Option<Asked> {
        let mut m = self.map.lock();
        if m.is_empty() {
            return None;
        }
        m.remove(&key)
    }

    /// The next directory to read ahead: the first queued whose parent
    /// has fewer than [`PER_PARENT`] read ahead. Listings nobody took
    /// within [`MAX_AGE`] are handed back (to `gone`) when the table is
    /// full.
    fn next(&self, gone: &mut Vec<Asked>) -> Option<Queued> {
        let max = self.max.load(Relaxed);
        let mut m = self.map.lock();
        if m.len() >= max {
            let old: Vec<Key> = m
                .iter()
                .filter(|(_, a)| a.at.elapsed() >= MAX_AGE)
                .map(|(&k, _)| k)
                .collect();
            gone.extend(old.into_iter().filter_map(|k| m.remove(&k)));
            if m.len() >= max {
                return None;
            }
        }
        let mut q = self.queue.lock();
        let mut i = 0;
        while i < q.len().min(SCAN) {
            let e = q[i];
            if m.contains_key(&e.key) {
                q.remove(i);
                continue;
            }
            if m.values().filter(|a| a.parent == e.parent).count() < PER_PARENT {
                q.remove(i);
                return Some(e);
            }
            i += 1;
        }
        None
    }

    /// Directory `parent` was just listed, showing subdirectories `subs`
    /// (node, inode slot): it needs no read-ahead, they go first.
    fn listed(&self, parent: Key, subs: &[(u64, IIdx)]) {
        let mut q = self.queue.lock();
        if let Some(i) = q.iter().position(|e| e.key == parent) {
            q.remove(i);
        }
        for &(node, ino) in subs.iter().take(MAX_QUEUED).rev() {
            q.push_front(Queued {
                key: (parent.0, node),
                ino,
                parent,
            });
        }
        q.truncate(MAX_QUEUED);
    }

    /// Forget everything (the switch turned off, or the vfs is going).
    pub fn clear(&self) -> usize {
        self.queue.lock().clear();
        let gone: Vec<Asked> = self.map.lock().drain().map(|(_, a)| a).collect();
        gone.len()
    }
}

/// The `no_ahead` bit of superblock `sb` when its backend `fs` never
/// lists ahead (it does not keep its answers' order), else 0.
pub(crate) fn never_ahead(fs: &dyn walkfs_fsapi::FileSystem, sb: usize) -> u64 {
    let ahead = fs.ordered().is_some() || fs.listings().is_some_and(|l| l.lists_ahead());
    match ahead {
        true => 0,
        false if sb < 64 => 1 << sb,
        false => 0,
    }
}

impl Inner {
    /// Whether superblock `sb` reads ahead (and so whether changes to it
    /// are logged): read-ahead on, and a backend that can.
    #[inline]
    pub(crate) fn lists_ahead(&self, sb: usize) -> bool {
        self.ra.on() && sb < 64 && self.no_ahead.load(Relaxed) & (1 << sb) == 0
    }

    /// The listing of directory `node` (superblock `sb`) read ahead, if one
    /// was asked for and is still fresh: its entries, and the generations
    /// it is as fresh as (what the caller caches it against). A stale one
    /// is given up (entries it brought forgotten).
    pub(crate) fn listed_ahead(&self, sb: usize, node: u64) -> Option<(Vec<DirPlus>, Gens)> {
        let asked = self.ra.take((sb, node))?;
        let dir = (sb, node);
        // Before the wait only the directory's names can be judged; after
        // it, the attributes of what it lists too.
        let fresh = |plus: Option<&[DirPlus]>| {
            let nodes: HashSet<u64> = plus
                .unwrap_or_default()
                .iter()
                .map(|e| e.entry.node.0)
                .collect();
            asked.at.elapsed() < MAX_AGE
                && self.ext_seen.load(Acquire) == asked.gens.seen
                && self
                    .ra_log
                    .untouched(asked.gens.log, dir, |(s, n)| s == sb && nodes.contains(&n))
        };
        if !fresh(None) {
            // Dropped unwaited: the backend gives the answer up.
            self.counters.readahead_wasted.inc();
            return None;
        }
        let t0 = Instant::now();
        let got = asked.ticket.wait();
        self.counters
            .readahead_wait_ns
            .add(t0.elapsed().as_nanos() as u64);
        match got {
            Some(Ok(plus)) if fresh(Some(&plus)) => {
                self.counters.readahead_used.inc();
                Some((plus, asked.gens))
            }
            Some(Ok(plus)) => {
                // A change raced with the wait: forget what came.
                self.counters.readahead_wasted.inc();
                let mut w = self.writer();
                w.forgets.extend(plus.iter().map(|p| (sb, p.entry.node.0)));
                None
            }
            _ => {
                self.counters.readahead_wasted.inc();
                None
            }
        }
    }

    /// Directory `parent` (superblock `sb`) was listed and cached, showing
    /// subdirectories `subs`: queue them and ask for as many listings as
    /// there is room for.
    pub(crate) fn read_ahead(&self, sb: usize, parent: u64, subs: &[(u64, IIdx)]) {
        if !self.lists_ahead(sb) {
            return;
        }
        self.ra.listed((sb, parent), subs);
        let mut gone = Vec::new();
        while let Some(q) = self.ra.next(&mut gone) {
            let Ok(fs) = self.sb(q.key.0) else { continue };
            // The slot must still hold that directory (it may have been
            // evicted or reused since it was queued).
            if self
                .dc
                .inode(q.ino)
                .is_none_or(|i| i.node.load(Relaxed) != q.key.1)
            {
                continue;
            }
            // Tried, never waited for (module comment); a directory being
            // changed is simply not read ahead.
            let Some(_dir) = self.dirs.try_shared(q.ino) else {
                continue;
            };
            let gens = Gens::now(self);
            let Some(ticket) = fs.listings().and_then(|l| l.list_ahead(NodeId(q.key.1))) else {
                // The backend cannot: never ask it again.
                self.no_ahead.fetch_or(1 << q.key.0, Relaxed);
                continue;
            };
            self.counters.readahead_asked.inc();
            let asked = Asked {
                parent: q.parent,
                at: Instant::now(),
                gens,
                ticket,
            };
            if let Some(old) = self.ra.map.lock().insert(q.key, asked) {
                gone.push(old);
            }
        }
        self.counters.readahead_wasted.add(gone.len() as u64);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use crate::tests_util::LaterFs;
    use crate::{Creds, Options, TimeSet, Timespec, Vfs, AT_FDCWD};

    fn names(ctx: &crate::Ctx, path: &[u8]) -> Vec<Vec<u8>> {
        let fd = ctx
            .openat(AT_FDCWD, path, libc::O_RDONLY | libc::O_DIRECTORY, 0)
            .expect("opendir");
        let mut v: Vec<Vec<u8>> = ctx
            .getdents(fd)
            .expect("getdents")
            .into_iter()
            .map(|e| e.name)
            .filter(|n| n != b"." && n != b"..")
            .collect();
        ctx.close(fd).expect("close");
        v.sort();
        v
    }

    fn create(ctx: &crate::Ctx, path: &[u8]) {
        let fd = ctx
            .openat(AT_FDCWD, path, libc::O_CREAT | libc::O_WRONLY, 0o644)
            .expect("create");
        ctx.close(fd).expect("close");
    }

    #[test]
    fn subdirectories_are_asked_for_ahead_and_used_only_while_fresh() {
        let fs = LaterFs::new();
        // Changes behind the caller are carried out as they come.
        fs.gate.open();
        let vfs = Vfs::new(fs, &Options::default()).expect("vfs");
        let ctx = vfs.context(Creds::root());
        for d in [&b"/a"[..], b"/a/s0", b"/a/s1", b"/a/s2", b"/a/s3", b"/a/s4"] {
            ctx.mkdirat(AT_FDCWD, d, 0o755).expect("mkdir");
        }
        create(&ctx, b"/a/s0/x");
        create(&ctx, b"/a/s2/z");
        let stats = || {
            let s = vfs.cache_stats();
            (s.readahead_asked, s.readahead_used, s.readahead_wasted)
        };

        // Listing /a asks for its five subdirectories.
        assert_eq!(names(&ctx, b"/a"), [&b"s0"[..], b"s1", b"s2", b"s3", b"s4"]);
        assert_eq!(stats(), (5, 0, 0));
        // s0's listing is taken, and is right.
        assert_eq!(names(&ctx, b"/a/s0"), [&b"x"[..]]);
        assert_eq!(stats(), (5, 1, 0));
        // Changes made through the vfs since the ask: to s1's names (its
        // early answer may predate it: not used, the listing is asked
        // anew), and to s0's, which leaves s3's early answer as good as
        // a new one.
        create(&ctx, b"/a/s1/new");
        create(&ctx, b"/a/s0/y");
        assert_eq!(names(&ctx, b"/a/s3"), Vec::<Vec<u8>>::new());
        assert_eq!(stats(), (5, 2, 0));
        assert_eq!(names(&ctx, b"/a/s1"), [&b"new"[..]]);
        assert_eq!(stats(), (5, 2, 1));
        // A change to the attributes of a file s2 lists: its early answer
        // shows the old ones, and is not used.
        let t = Some(TimeSet::At(Timespec {
            sec: 1_000_000,
            nsec: 0,
        }));
        ctx.utimensat(AT_FDCWD, b"/a/s2/z", [t, t], 0)
            .expect("utimes");
        assert_eq!(names(&ctx, b"/a/s2"), [&b"z"[..]]);
        assert_eq!(stats(), (5, 2, 2));
        let st = ctx
            .statx(AT_FDCWD, b"/a/s2/z", 0, libc::STATX_MTIME)
            .expect("stat");
        assert_eq!(st.stx_mtime.tv_sec, 1_000_000);

        // Turned off live: nothing is asked for, what was is given up.
        vfs.set_option("dir_readahead", "0").expect("set");
        assert_eq!(stats(), (5, 2, 3));
        assert_eq!(names(&ctx, b"/a"), [&b"s0"[..], b"s1", b"s2", b"s3", b"s4"]);
        assert_eq!(stats().0, 5);
    }
}
