//! Directory read-ahead: when a listing shows subdirectories, their
//! listings are asked for at once, without waiting, so a tree walk
//! (`find`, `du`, `git status`, a build's header search) finds most
//! directories already listed instead of paying two round trips (walk,
//! then list) for each.
//!
//! Each read-ahead is one write of three requests:
//! `Twalk(ancestor, names -> f1)`, `Txattrwalk(f1 -> f2,
//! "walkfs.readdirplus")`, `Tread(f2, 0, iounit)`. The reader thread files
//! the replies into a [`Listing`]; the listing's consumer (the next
//! `readdir_plus` of that directory) waits for it if it is still in
//! flight, clunks both fids, and uses it only if it is still as fresh as
//! the client's own view:
//! - no change was written since it was asked for, and the client was
//!   told of none by the server ([`Rpc::changes_sent`] unchanged: a
//!   server that keeps a connection's order answered it after every
//!   change sent before it);
//! - it is younger than [`MAX_AGE`] (other clients' changes, in a mode
//!   without change reports, are seen no later than through attribute
//!   timeouts);
//! - the walk landed on the directories remembered (qid paths), and the
//!   whole listing fit in the first read.
//!
//! Otherwise the directory is listed the ordinary way. The table holds
//! at most [`MAX_LISTINGS`] listings (in flight or done, each at most
//! one `iounit`); a listing nobody took within `MAX_AGE` is dropped when
//! the next one is asked for.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use walkfs_p9::Fcall;

use crate::rpc::Rpc;

/// Listings read ahead and not yet taken, at most (each holds three tags
/// while in flight, and up to one `iounit` of memory when done).
pub const MAX_LISTINGS: usize = 64;
/// A listing older than this is not used.
pub const MAX_AGE: Duration = Duration::from_secs(1);

/// One directory's listing, asked for ahead.
pub struct Listing {
    /// The directory it lists is in this one.
    parent: u64,
    /// `Rpc::changes_sent` when it was asked for.
    gen: u64,
    at: Instant,
    /// The fid the walk makes and the listing's fid.
    pub fids: [u32; 2],
    /// Qid paths the walk must find, in order.
    ids: Vec<u64>,
    state: Mutex<State>,
    done: Condvar,
}

#[derive(Default)]
struct State {
    /// Replies received (3: complete), or the connection died.
    replies: u8,
    dead: bool,
    /// The walk made its fid, and reached the remembered directory.
    walk_made: bool,
    walked: bool,
    /// The listing's fid exists (the xattr walk succeeded).
    opened: bool,
    size: Option<u64>,
    data: Vec<u8>,
}

/// What a taken listing gives: its bytes when usable, and which of its
/// fids the server made (to clunk).
pub struct Taken {
    pub data: Option<Vec<u8>>,
    pub made: [bool; 2],
}

impl Listing {
    pub fn new(parent: u64, gen: u64, fids: [u32; 2], ids: Vec<u64>) -> Arc<Listing> {
        Arc::new(Listing {
            parent,
            gen,
            at: Instant::now(),
            fids,
            ids,
            state: Mutex::new(State::default()),
            done: Condvar::new(),
        })
    }

    /// File reply `i` of the three (runs on the reader thread).
    pub fn reply(&self, i: usize, r: Option<Fcall<'_>>) {
        let mut s = self.state.lock();
        match (i, r) {
            (_, None) => s.dead = true,
            (0, Some(Fcall::Rwalk { qids })) => {
                // A walk that returns every qid makes the fid (even to
                // another file than remembered); a partial one does not.
                let got = qids.as_slice();
                s.walk_made = got.len() == self.ids.len();
                s.walked = s.walk_made && got.iter().zip(&self.ids).all(|(q, &id)| q.path == id);
            }
            (1, Some(Fcall::Rxattrwalk { size })) => {
                s.size = Some(size);
                s.opened = true;
            }
            (2, Some(Fcall::Rread { data })) => s.data = data.0.to_vec(),
            _ => {}
        }
        s.replies += 1;
        if s.replies >= 3 || s.dead {
            self.done.notify_all();
        }
    }

    /// Wait for the replies (or the connection's death) and say what the
    /// listing is worth now.
    pub fn take(&self, rpc: &Rpc) -> Taken {
        let mut s = self.state.lock();
        while s.replies < 3 && !s.dead {
            if rpc.is_dead() {
                s.dead = true;
                break;
            }
            // The reader reports a death, but a batch registered just as
            // the connection died may not hear of it: look again.
            self.done.wait_for(&mut s, Duration::from_millis(100));
        }
        let fresh = rpc.changes_sent() == self.gen && self.at.elapsed() < MAX_AGE;
        let whole = s.size.is_some_and(|n| s.data.len() as u64 == n);
        let usable = !s.dead && s.walked && s.opened && whole && fresh;
        Taken {
            data: usable.then(|| std::mem::take(&mut s.data)),
            made: [s.walk_made, s.opened],
        }
    }

    fn stale(&self) -> bool {
        self.at.elapsed() >= MAX_AGE
    }
}

/// Directories waiting for room to be read ahead, at most.
pub const MAX_QUEUED: usize = 4096;
/// Listings read ahead at once for the subdirectories of one directory.
pub const PER_PARENT: usize = 8;
/// Queued directories looked at for one with room.
const SCAN: usize = 256;

/// Listings read ahead, by directory node, and the directories to read
/// ahead next.
#[derive(Default)]
pub struct ReadAhead {
    map: Mutex<HashMap<u64, Arc<Listing>>>,
    /// In the order a depth-first walk reaches them: a listed
    /// directory's subdirectories go before the directories queued
    /// earlier (its later siblings and theirs), as `find` and `du` go.
    queue: Mutex<VecDeque<(u64, u64)>>,
}

impl ReadAhead {
    /// The listing read ahead for `node`, now the caller's.
    pub fn take(&self, node: u64) -> Option<Arc<Listing>> {
        let mut m = self.map.lock();
        if m.is_empty() {
            return None;
        }
        m.remove(&node)
    }

    /// The next directory to read ahead, `(node, parent)`, within `max`
    /// listings at once: the first queued whose parent has fewer than
    /// [`PER_PARENT`] read ahead, so a wide directory's later
    /// subdirectories, which a depth-first walk reaches last, leave room
    /// for the deeper ones it reaches first. Stale listings nobody took
    /// are handed back to be given up.
    pub fn next(&self, max: usize, gone: &mut Vec<Arc<Listing>>) -> Option<(u64, u64)> {
        let mut m = self.map.lock();
        if m.len() >= max {
            let old: Vec<u64> = m
                .iter()
                .filter(|(_, l)| l.stale())
                .map(|(&k, _)| k)
                .collect();
            for k in old {
                if let Some(l) = m.remove(&k) {
                    gone.push(l);
                }
            }
            if m.len() >= max {
                return None;
            }
        }
        let mut q = self.queue.lock();
        let mut i = 0;
        while i < q.len().min(SCAN) {
            let (node, parent) = q[i];
            if m.contains_key(&node) {
                q.remove(i);
                continue;
            }
            if m.values().filter(|l| l.parent == parent).count() < PER_PARENT {
                q.remove(i);
                return Some((node, parent));
            }
            i += 1;
        }
        None
    }

    /// `node` was just listed (its subdirectories are `subdirs`): it
    /// needs no read-ahead, they go first in the queue.
    pub fn listed(&self, node: u64, subdirs: impl Iterator<Item = u64>) {
        let mut q = self.queue.lock();
        if let Some(i) = q.iter().position(|&(n, _)| n == node) {
            q.remove(i);
        }
        let new: Vec<u64> = subdirs.take(MAX_QUEUED).collect();
        for &n in new.iter().rev() {
            q.push_front((n, node));
        }
        q.truncate(MAX_QUEUED);
    }

    /// Keep `l`, the listing of `node`; one already kept for it (asked
    /// for twice in a race) is handed back to be given up.
    pub fn insert(&self, node: u64, l: Arc<Listing>) -> Option<Arc<Listing>> {
        self.map.lock().insert(node, l)
    }
}
