//! The client's node table: every file the vfs holds, by qid path, with
//! the fid it holds (if any).
//!
//! A node does not pin a fid. Fids are what a server pays for (state, and
//! for a passthrough server a host descriptor), so only a bounded set of
//! nodes keeps one: those in use right now (a call in flight, an open
//! file) and the most recently used, up to `cap`, chosen by a clock (the
//! second-chance approximation of LRU). A node whose fid was released is
//! found again by walking, from the nearest ancestor that still holds a
//! fid, the names the vfs holds for it (its dentry cache, lent at mount
//! through [`walkfs_fsapi::Names`]: the table keeps no names of its own),
//! and the qids the walk returns must be the nodes of that path: a file
//! renamed, replaced or removed meanwhile gives `ESTALE`, never another
//! file.
//!
//! Invariants (under the table's mutex):
//! - the root holds its fid for ever and is never on the clock;
//! - `held` counts the other nodes whose `fid != NOFID`; each of them is
//!   on the clock at least once (the clock may also hold ids of nodes that
//!   since lost their fid or went: those are skipped);
//! - a node with `busy > 0` keeps its fid and its entry (a forgotten busy
//!   node goes when its last user unpins it).

use std::collections::HashMap;

use std::sync::Arc;
use walkfs_fsapi::clock::{Clock, Visit};

use walkfs_fsapi::{Name, Names, NodeId};
use walkfs_p9::NOFID;

pub(crate) struct PNode {
    /// References the vfs holds (lookups and creates not yet forgotten).
    pub lookups: u64,
    /// The fid it holds, or `NOFID`.
    pub fid: u32,
    /// Calls using `fid` now, plus open files of the node: while non-zero
    /// the fid is not released.
    pub busy: u32,
    /// Used since the clock hand last passed it.
    pub referenced: bool,
    /// The file's generation (`qid.version` from a walkfs server: its
    /// birth time folded; 0 until known). The host reuses inode numbers,
    /// so one qid path may name a later file: the generation tells.
    pub born: u32,
    /// A fid of an earlier file of this qid path, still in use when a
    /// later file took the node: clunked once the node's users are done
    /// (or `NOFID`).
    pub retired: u32,
}

pub(crate) struct Nodes {
    /// Node id (the qid path) -> node.
    pub by_id: HashMap<u64, PNode>,
    root: u64,
    clock: Clock,
    held: usize,
    cap: usize,
    /// Fids released to stay within `cap`, and re-walks done.
    pub released: u64,
    pub rewalks: u64,
    /// Retired fids no call uses any more, for the next [`Nodes::trim`]
    /// to hand back for clunking.
    done_with: Vec<u32>,
    /// The vfs's names of the nodes (lent at mount): called with the
    /// table's lock dropped (see [`crate::P9Fs::need`]).
    pub names: Option<Arc<dyn Names>>,
}

/// How a node's fid is to be had ([`crate::P9Fs::need`]).
pub(crate) enum Need {
    /// It holds one (now pinned).
    Held(u32),
    /// Walk `names` from `from` (an ancestor's fid, now pinned: unpin
    /// `anc` after the walk); each walked qid must equal `ids` in order.
    Walk {
        anc: u64,
        from: u32,
        names: Vec<Name>,
        ids: Vec<u64>,
    },
}

/// Longest chain of released ancestors followed before giving up (a
/// cycle cannot form through the vfs, which never makes a directory its
/// own ancestor, but a remembered path may be older than a rename).
const MAX_DEPTH: usize = 4096;

impl Nodes {
    pub fn new(root: u64, root_fid: u32, cap: usize) -> Nodes {
        let mut by_id = HashMap::new();
        by_id.insert(
            root,
            PNode {
                lookups: u64::MAX / 2,
                fid: root_fid,
                busy: 1,
                referenced: true,
                born: 0,
                retired: NOFID,
            },
        );
        Nodes {
            by_id,
            root,
            clock: Clock::default(),
            held: 0,
            cap: cap.max(1),
            released: 0,
            rewalks: 0,
            done_with: Vec::new(),
            names: None,
        }
    }

    /// The root's id.
    pub fn root(&self) -> u64 {
        self.root
    }

    /// Fids held for nodes other than the root.
    pub fn held(&self) -> usize {
        self.held
    }

    pub fn cap(&self) -> usize {
        self.cap
    }

    /// Pin `id`'s fid if it holds one.
    pub fn pin_held(&mut self, id: u64) -> Option<u32> {
        let n = self.by_id.get_mut(&id)?;
        if n.fid == NOFID {
            return None;
        }
        n.busy += 1;
        n.referenced = true;
        Some(n.fid)
    }

    /// Pin `id`'s fid, or say how to walk to it along `path` (the vfs's
    /// names of it, the node first: see [`walkfs_fsapi::Names`]) from the
    /// nearest ancestor on it that holds a fid (pinned). `None`: the node
    /// is not known, or the path does not lead to it from known nodes.
    pub fn need_via(&mut self, id: u64, path: &[(NodeId, Name)]) -> Option<Need> {
        if let Some(fid) = self.pin_held(id) {
            return Some(Need::Held(fid));
        }
        if path.first().map(|p| p.0 .0) != Some(id) || path.len() > MAX_DEPTH {
            return None;
        }
        // The first ancestor on the path holding a fid; past the path's
        // end, the root (which holds its fid for ever).
        let mut depth = path.len();
        let mut anc = self.root;
        for (i, (a, _)) in path.iter().enumerate().skip(1) {
            if self.by_id.get(&a.0)?.fid != NOFID {
                (depth, anc) = (i, a.0);
                break;
            }
        }
        let a = self.by_id.get_mut(&anc)?;
        a.busy += 1;
        a.referenced = true;
        let from = a.fid;
        let below = &path[..depth];
        self.rewalks += 1;
        Some(Need::Walk {
            anc,
            from,
            names: below.iter().rev().map(|(_, n)| n.clone()).collect(),
            ids: below.iter().rev().map(|(i, _)| i.0).collect(),
        })
    }

    /// Give `id` the fid `fid` just walked to it, pinned; returns the fid
    /// to use and whether `fid` is surplus (the node got one meanwhile)
    /// and must be clunked. `None`: the node went meanwhile.
    pub fn install(&mut self, id: u64, fid: u32) -> Option<(u32, bool)> {
        let n = self.by_id.get_mut(&id)?;
        n.busy += 1;
        n.referenced = true;
        if n.fid != NOFID {
            return Some((n.fid, true));
        }
        n.fid = fid;
        self.held += 1;
        self.clock.push(id);
        Some((fid, false))
    }

    /// A walk made `fid` to `id` and it landed where remembered (a
    /// listing asked for ahead walked there): the node keeps it, unpinned,
    /// if it holds none, so the changes that follow in that directory
    /// need no walk of their own. Returns the fid when it is not kept (to
    /// be clunked).
    pub fn give(&mut self, id: u64, fid: u32) -> Option<u32> {
        if id == self.root {
            return Some(fid);
        }
        match self.by_id.get_mut(&id) {
            Some(n) if n.fid == NOFID => {
                n.fid = fid;
                n.referenced = true;
                self.held += 1;
                self.clock.push(id);
                None
            }
            _ => Some(fid),
        }
    }

    /// One user of `id`'s fid is done. Returns a fid to clunk when the
    /// node was forgotten while in use and this was its last user, or
    /// when it held a retired fid (see [`Nodes::adopt`]).
    pub fn unpin(&mut self, id: u64) -> Option<u32> {
        let n = self.by_id.get_mut(&id)?;
        n.busy = n.busy.saturating_sub(1);
        if n.busy > 0 {
            return None;
        }
        let retired = std::mem::replace(&mut n.retired, NOFID);
        if n.lookups == 0 {
            if retired != NOFID {
                // Two to clunk: the other one goes at the next trim.
                self.done_with.push(retired);
            }
            return self.remove(id);
        }
        (retired != NOFID).then_some(retired)
    }

    /// A lookup or create found `id` with the new fid `fid`: count the
    /// reference and keep the new fid; a fid the node held is returned, to be clunked (the new
    /// one, when the held one is in use).
    ///
    /// Why the new one: a qid path is a host inode number, and a host
    /// may reuse one at once (ext4 does): the fid held may name an
    /// earlier file of that number, deleted since, while the one just
    /// walked names the file now at the name looked up. For a hard link, or the same
    /// file found again, both name the same file. `born` is the file's
    /// generation (0: unknown): a held fid in use is kept, unless it names
    /// a file of another generation; that one is retired, and clunked
    /// when its users are done.
    pub fn adopt(&mut self, id: u64, born: u32, fid: u32) -> Option<u32> {
        if id == self.root {
            return Some(fid);
        }
        match self.by_id.get_mut(&id) {
            Some(n) => {
                n.lookups += 1;
                n.referenced = true;
                let another = born != 0 && n.born != 0 && born != n.born;
                if born != 0 {
                    n.born = born;
                }
                if n.fid != NOFID {
                    if n.busy > 0 {
                        if another {
                            let old = std::mem::replace(&mut n.fid, fid);
                            let prev = std::mem::replace(&mut n.retired, old);
                            return (prev != NOFID).then_some(prev);
                        }
                        return Some(fid);
                    }
                    return Some(std::mem::replace(&mut n.fid, fid));
                }
                n.fid = fid;
            }
            None => {
                self.by_id.insert(
                    id,
                    PNode {
                        lookups: 1,
                        fid,
                        busy: 0,
                        referenced: true,
                        born,
                        retired: NOFID,
                    },
                );
            }
        }
        self.held += 1;
        self.clock.push(id);
        None
    }

    /// A create made `id` and opened it: count the reference and the
    /// open (busy), but hold no path fid for it. The open fid serves the
    /// file while it is open; a call that needs the node itself walks to
    /// it by name (see [`crate::P9Fs::need`]), which most new files never
    /// see.
    pub fn adopt_open(&mut self, id: u64) {
        if let Some(n) = self.adopt_fidless(id) {
            n.busy += 1;
            n.referenced = true;
        }
    }

    /// Does `id` hold a fid no call is using?
    pub fn holds_idle_fid(&self, id: u64) -> bool {
        id != self.root
            && self
                .by_id
                .get(&id)
                .is_some_and(|n| n.fid != NOFID && n.busy == 0)
    }

    /// A listing (or a link) found `id`: count the reference; no fid (a
    /// call that needs one walks by name). Found somewhere else than the
    /// vfs holds it (`moved`), the node lets go of a fid it holds and is
    /// not using (returned, to be clunked): it may name an earlier file of
    /// the same number (see [`Nodes::adopt`]); the next call walks to the
    /// file by its new name.
    ///
    /// `born` is the listed file's generation (0: unknown). A node whose
    /// file was of another generation (the host gave a deleted file's
    /// number to a new one, under the same name or another) lets go of
    /// its fid, which names the earlier file: unused, it is returned;
    /// in use, it is retired (clunked when its users are done, see
    /// [`Nodes::adopt`]). Either way the next call walks to the new file.
    pub fn adopt_listed(&mut self, id: u64, moved: bool, born: u32) -> Option<u32> {
        let n = self.adopt_fidless(id)?;
        let another = born != 0 && n.born != 0 && born != n.born;
        if born != 0 {
            n.born = born;
        }
        if !(moved || another) || n.fid == NOFID {
            return None;
        }
        if n.busy > 0 {
            if !another {
                return None;
            }
            let old = std::mem::replace(&mut n.fid, NOFID);
            let prev = std::mem::replace(&mut n.retired, old);
            self.held -= 1;
            return (prev != NOFID).then_some(prev);
        }
        let fid = std::mem::replace(&mut n.fid, NOFID);
        self.held -= 1;
        Some(fid)
    }

    /// Count a reference to `id`, making the node (with no fid) if it is
    /// new; `None` for the root.
    fn adopt_fidless(&mut self, id: u64) -> Option<&mut PNode> {
        if id == self.root {
            return None;
        }
        let n = self.by_id.entry(id).or_insert_with(|| PNode {
            lookups: 0,
            fid: NOFID,
            busy: 0,
            referenced: false,
            born: 0,
            retired: NOFID,
        });
        n.lookups += 1;
        Some(n)
    }

    /// The vfs drops `count` references; returns a fid to clunk when the
    /// node goes.
    pub fn forget(&mut self, id: u64, count: u64) -> Option<u32> {
        if id == self.root {
            return None;
        }
        let n = self.by_id.get_mut(&id)?;
        n.lookups = n.lookups.saturating_sub(count);
        if n.lookups > 0 || n.busy > 0 {
            return None;
        }
        self.remove(id)
    }

    fn remove(&mut self, id: u64) -> Option<u32> {
        let n = self.by_id.remove(&id)?;
        if n.fid == NOFID {
            return None;
        }
        self.held -= 1;
        Some(n.fid)
    }

    /// Every node holding a fid (the root aside): what a reconnect walks
    /// again (recover.rs), along the vfs's names.
    pub fn holding(&self) -> Vec<(u64, u32)> {
        self.by_id
            .iter()
            .filter(|(&id, n)| id != self.root && crate::recover::is_node_fid(n.fid))
            .map(|(&id, n)| (id, n.fid))
            .collect()
    }

    /// `id` no longer holds `fid` (it could not be walked again after a
    /// reconnect): its next use walks to it. `true` if it held it.
    pub fn release_fid(&mut self, id: u64, fid: u32) -> bool {
        match self.by_id.get_mut(&id) {
            Some(n) if n.fid == fid && id != self.root => {
                n.fid = NOFID;
                self.held -= 1;
                true
            }
            _ => false,
        }
    }

    /// Release fids of unused nodes until at most `cap` are held; the
    /// fids to clunk (after the table's lock is dropped).
    pub fn trim(&mut self) -> Vec<u32> {
        let mut out = std::mem::take(&mut self.done_with);
        let excess = self.held.saturating_sub(self.cap);
        let by_id = &mut self.by_id;
        let released = self.clock.sweep(excess, |id| match by_id.get_mut(&id) {
            Some(n) if n.fid == NOFID => Visit::Gone,
            None => Visit::Gone,
            Some(n) if n.busy > 0 || n.referenced => {
                n.referenced = false;
                Visit::Spare
            }
            Some(n) => {
                out.push(std::mem::replace(&mut n.fid, NOFID));
                Visit::Evict
            }
        });
        self.held -= released;
        self.released += released as u64;
        let by_id = &self.by_id;
        self.clock.compact(self.held, |id| {
            by_id.get(&id).is_some_and(|n| n.fid != NOFID)
        });
        out
    }
}

/// The path to node `id` from the root, as the vfs names it: the names,
/// and the qid paths each step must land on. `None` when the vfs holds no
/// name leading to it. (The vfs is asked with the table's lock dropped.)
pub(crate) fn path_from_root(
    nodes: &parking_lot::Mutex<Nodes>,
    id: u64,
) -> Option<(Vec<Name>, Vec<u64>)> {
    let names = nodes.lock().names.clone()?;
    let path = names.path_of(NodeId(id))?;
    Some(path.into_iter().rev().map(|(n, name)| (name, n.0)).unzip())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clock_keeps_busy_and_recent_fids_and_releases_the_rest() {
        let mut n = Nodes::new(1, 0, 2);
        assert_eq!(n.adopt(10, 0, 100), None);
        assert_eq!(n.adopt(11, 0, 101), None);
        assert_eq!(n.adopt(12, 0, 102), None);
        assert_eq!(n.held(), 3);
        // 12 is in use: it keeps its fid whatever the clock says.
        assert_eq!(n.pin_held(12), Some(102));
        let gone = n.trim();
        assert_eq!(gone.len(), 1);
        assert_eq!(n.held(), 2);
        assert_eq!(n.by_id[&12].fid, 102);
        // A second lookup of a node whose fid is in use hands the new fid
        // back.
        assert_eq!(n.adopt(12, 0, 103), Some(103));
        assert_eq!(n.unpin(12), None);
        // Release everything but one, then walk back to the deepest.
        n.cap = 1;
        n.trim();
        n.trim();
        let holder = n
            .by_id
            .iter()
            .find(|(&id, p)| id != 1 && p.fid != NOFID)
            .map(|(&id, _)| id);
        assert_eq!(n.held(), 1);
        if holder != Some(12) {
            let path = [
                (NodeId(12), Name::from(&b"c"[..])),
                (NodeId(11), Name::from(&b"b"[..])),
                (NodeId(10), Name::from(&b"a"[..])),
            ];
            match n.need_via(12, &path) {
                Some(Need::Walk { names, ids, .. }) => {
                    assert_eq!(ids.last(), Some(&12));
                    assert_eq!(names.last().map(|b| &**b), Some(&b"c"[..]));
                }
                _ => panic!("expected a walk"),
            }
        }
    }

    #[test]
    fn a_node_forgotten_while_busy_goes_with_its_last_user() {
        let mut n = Nodes::new(1, 0, 8);
        n.adopt(10, 0, 100);
        assert_eq!(n.pin_held(10), Some(100));
        assert_eq!(n.forget(10, 1), None);
        assert!(n.by_id.contains_key(&10));
        assert_eq!(n.unpin(10), Some(100));
        assert!(!n.by_id.contains_key(&10));
        assert_eq!(n.held(), 0);
    }

    #[test]
    fn walks_start_at_the_nearest_ancestor_with_a_fid() {
        let mut n = Nodes::new(1, 0, 8);
        n.adopt(10, 0, 100);
        n.adopt(11, 0, 101);
        n.adopt(12, 0, 102);
        // Release 11 and 12 by hand.
        for id in [11, 12] {
            let p = n.by_id.get_mut(&id).unwrap();
            p.fid = NOFID;
            n.held -= 1;
        }
        let path = [
            (NodeId(12), Name::from(&b"f"[..])),
            (NodeId(11), Name::from(&b"e"[..])),
            (NodeId(10), Name::from(&b"d"[..])),
        ];
        match n.need_via(12, &path) {
            Some(Need::Walk {
                anc,
                from,
                names,
                ids,
            }) => {
                assert_eq!((anc, from), (10, 100));
                assert_eq!(ids, vec![11, 12]);
                assert_eq!(names, vec![Name::from(&b"e"[..]), Name::from(&b"f"[..])]);
            }
            _ => panic!("expected a walk"),
        }
        assert_eq!(n.install(12, 200), Some((200, false)));
        assert_eq!(n.held(), 2);
    }

    #[test]
    fn a_later_file_of_the_same_qid_path_takes_the_node_even_while_in_use() {
        let mut n = Nodes::new(1, 0, 16);
        assert_eq!(n.adopt(10, 7, 100), None);
        // In use (an open file): the same file found again keeps its fid.
        let _ = n.pin_held(10);
        assert_eq!(n.adopt(10, 7, 101), Some(101));
        // A file of another generation: the new fid now, the old one
        // retired until its user is done.
        assert_eq!(n.adopt(10, 9, 102), None);
        assert_eq!(n.by_id[&10].fid, 102);
        assert_eq!(n.by_id[&10].retired, 100);
        assert_eq!(n.unpin(10), Some(100), "the retired fid is clunked");
        // Unknown generations never count as another file.
        let _ = n.pin_held(10);
        assert_eq!(n.adopt(10, 0, 103), Some(103));
    }

    /// A listing that shows a node's number for a file of another
    /// generation (the host reused the number under the same name): the
    /// node lets go of the fid of the earlier file, at once when unused,
    /// else once its user is done, and holds none until a walk.
    #[test]
    fn a_listing_of_a_later_file_of_the_same_number_drops_the_earlier_fid() {
        let mut n = Nodes::new(1, 0, 16);
        assert_eq!(n.adopt(10, 7, 100), None);
        assert_eq!(n.adopt_listed(10, false, 7), None, "the same file");
        assert_eq!(n.adopt_listed(10, false, 9), Some(100));
        assert_eq!(n.by_id[&10].fid, NOFID);
        assert_eq!(n.adopt(10, 9, 101), None);
        let _ = n.pin_held(10);
        assert_eq!(n.adopt_listed(10, false, 11), None);
        assert_eq!(n.by_id[&10].fid, NOFID);
        assert_eq!(n.unpin(10), Some(101), "retired, clunked after its user");
    }
}
