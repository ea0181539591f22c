//! A directory listing asked for in one write, without waiting: the
//! transport under the vfs's directory read-ahead
//! ([`caps::Listings::list_ahead`](walkfs_fsapi::caps::Listings::list_ahead); the
//! policy of what to ask for, and whether an answer is still fresh, is the
//! vfs's).
//!
//! One write of three requests: `Twalk(ancestor, names -> f1)`,
//! `Txattrwalk(f1 -> f2, "walkfs.readdirplus")`, `Tread(f2, 0, iounit)`.
//! The reader thread files the replies into a [`Listing`]; whoever holds
//! the [`Ahead`] ticket waits for it, clunks the listing's fid, and gets
//! the entries if the walk landed on the directories remembered (qid
//! paths) and the whole listing fit in the first read. The fid the walk
//! made is kept for the directory when it landed there and the directory
//! holds none (`rm -rf` then unlinks in it without a walk of its own),
//! else clunked. Dropping the ticket unused does the same and decodes
//! nothing.
//!
//! Also used, waited for at once, to list a directory that holds no fid in
//! one round trip rather than two (walk, then list).

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use walkfs_fsapi::{DirPlus, ListAhead, NodeId, Result};
use walkfs_p9::Fcall;

use crate::nodes::Nodes;
use crate::rpc::Rpc;
use crate::Fids;

/// One directory's listing, asked for ahead.
pub struct Listing {
    /// The directory's node id.
    id: u64,
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

impl State {
    /// Can the listing be used, and which of the two fids did the server
    /// make (to clunk)?
    fn outcome(&self) -> (bool, [bool; 2]) {
        let whole = self.size.is_some_and(|n| self.data.len() as u64 == n);
        let usable = !self.dead && self.walked && self.opened && whole;
        (usable, [self.walk_made, self.opened])
    }
}

impl Listing {
    pub fn new(id: u64, fids: [u32; 2], ids: Vec<u64>) -> Arc<Listing> {
        Arc::new(Listing {
            id,
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

    /// Wait for the replies (or the connection's death), give the walk's
    /// fid to the directory or up, clunk the listing's, and return the
    /// listing's bytes if usable.
    pub fn finish(&self, rpc: &Rpc, fids: &Fids, nodes: &Mutex<Nodes>) -> Option<Vec<u8>> {
        // Time spent here waits for replies, as a call's does.
        let t0 = Instant::now();
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
        rpc.counters
            .wait_ns
            .fetch_add(t0.elapsed().as_nanos() as u64, Relaxed);
        rpc.counters.waits.fetch_add(1, Relaxed);
        let (usable, made) = s.outcome();
        // A walk of no names is a clone of a fid the directory holds.
        let keep = s.walked && !self.ids.is_empty();
        let (kept, trimmed) = if keep {
            let mut n = nodes.lock();
            let left = n.give(self.id, self.fids[0]);
            (left.is_none(), n.trim())
        } else {
            (false, Vec::new())
        };
        for (i, (fid, made)) in self.fids.into_iter().zip(made).enumerate() {
            if i == 0 && kept {
                continue;
            }
            if made {
                fids.clunk(rpc, fid);
            } else {
                fids.free(fid);
            }
        }
        for fid in trimmed {
            fids.clunk(rpc, fid);
        }
        usable.then(|| std::mem::take(&mut s.data))
    }
}

/// The ticket [`caps::Listings::list_ahead`](walkfs_fsapi::caps::Listings::list_ahead)
/// hands out.
pub struct Ahead {
    pub(crate) listing: Option<Arc<Listing>>,
    pub(crate) dir: NodeId,
    pub(crate) rpc: Arc<Rpc>,
    pub(crate) fids: Arc<Fids>,
    pub(crate) nodes: Arc<Mutex<Nodes>>,
}

impl ListAhead for Ahead {
    fn wait(mut self: Box<Self>) -> Option<Result<Vec<DirPlus>>> {
        let l = self.listing.take()?;
        let buf = l.finish(&self.rpc, &self.fids, &self.nodes)?;
        let mut released = Vec::new();
        let r = crate::decode_listing(&self.nodes, self.dir, &buf, &mut released);
        for fid in released {
            self.fids.clunk(&self.rpc, fid);
        }
        Some(r)
    }
}

impl Drop for Ahead {
    fn drop(&mut self) {
        if let Some(l) = self.listing.take() {
            l.finish(&self.rpc, &self.fids, &self.nodes);
        }
    }
}

#[cfg(test)]
mod tests {
    use walkfs_p9::{Data, Fcall, Qid, Qids};

    use super::Listing;

    fn walked(paths: &[u64]) -> Fcall<'static> {
        let mut qids = Qids::default();
        for &path in paths {
            qids.push(Qid {
                ty: 0x80,
                version: 0,
                path,
            });
        }
        Fcall::Rwalk { qids }
    }

    /// The listing of a walk through `ids` after the replies given.
    fn after(ids: &[u64], replies: Vec<Option<Fcall<'_>>>) -> (bool, [bool; 2]) {
        let l = Listing::new(1, [10, 11], ids.to_vec());
        for (i, r) in replies.into_iter().enumerate() {
            l.reply(i, r);
        }
        let s = l.state.lock();
        s.outcome()
    }

    #[test]
    fn used_only_when_the_walk_lands_where_remembered_and_the_listing_is_whole() {
        let data = [1u8, 2, 3];
        let listed = |size: u64| Fcall::Rxattrwalk { size };
        let read = || Fcall::Rread { data: Data(&data) };
        // As remembered, all in one read.
        assert_eq!(
            after(
                &[5, 6],
                vec![Some(walked(&[5, 6])), Some(listed(3)), Some(read())]
            ),
            (true, [true, true])
        );
        // The path now leads elsewhere: both fids exist, nothing is used.
        assert_eq!(
            after(
                &[5, 6],
                vec![Some(walked(&[5, 9])), Some(listed(3)), Some(read())]
            ),
            (false, [true, true])
        );
        // A partial walk makes no fid; the rest fail on it.
        let err = || Fcall::Rlerror { ecode: 2 };
        assert_eq!(
            after(&[5, 6], vec![Some(walked(&[5])), Some(err()), Some(err())]),
            (false, [false, false])
        );
        // Larger than the first read.
        assert_eq!(
            after(
                &[5],
                vec![Some(walked(&[5])), Some(listed(4096)), Some(read())]
            ),
            (false, [true, true])
        );
        // The connection died after the walk: its fid is still the
        // server's to clunk (if it ever comes back, it does not).
        assert_eq!(
            after(&[5], vec![Some(walked(&[5])), None]),
            (false, [true, false])
        );
    }
}
