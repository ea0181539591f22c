//! The node table: one record per node id the kernel holds, with
//! everything kept for it (its lookup count, the handle requests on it
//! start from, its generation, its own open files for I/O without a
//! handle, its passthrough state). Names come from the dcache (each
//! record's handle), not from a table of their own.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

use walkfs_vfs::{Handle, OpenFile};

use crate::passthrough;

/// What a node id stands for.
pub(crate) struct Node {
    /// The kernel's lookup count: the node goes when `forget` brings it
    /// to zero.
    pub(crate) nlookup: u64,
    pub(crate) key: (u64, u64),
    /// Where requests on the node start: the name it was last found by.
    pub(crate) handle: Handle,
    /// The file's generation (its birth time folded; 0 until known).
    pub(crate) born: u32,
    /// (Every entry the kernel gets for this node id carries `sent`.)
    /// The generation the kernel was given with the node id. It stays
    /// what the first entry said (a file made behind the caller is born
    /// unknown and learns its time later: the kernel takes a changed
    /// generation for another file) until another file takes the node id.
    pub(crate) sent: u32,
    /// The node's own open files for I/O the kernel sends without a
    /// handle (zero-message opens): (read-only, read-write), opened on
    /// first use; at most `io_fds` nodes keep theirs (`Nodes::io_clock`).
    pub(crate) io: NodeIo,
    /// `io` used since the clock's hand last passed.
    /// An atomic so that a read or write finds its file under the
    /// table's shared lock: only the clock's hand and a new file take it
    /// exclusively.
    pub(crate) io_used: AtomicBool,
    /// Its passthrough state: a backing id handed to the kernel, and the
    /// opens that named it (passthrough.rs).
    pub(crate) backing: passthrough::Backed,
    /// Locks taken on it through the mount (locks.rs); `None` while none
    /// ever was.
    pub(crate) locks: Option<Box<crate::locks::NodeLocks>>,
}

#[derive(Default)]
pub(crate) struct Nodes {
    pub(crate) by_id: HashMap<u64, Node>,
    /// (device, inode) -> node id, for the nodes whose id is not their
    /// inode number.
    pub(crate) keys: walkfs_fsapi::keyindex::KeyIndex,
    /// The root's inode number (its node id is FUSE's root id).
    pub(crate) root_ino: u64,
    /// The nodes that keep open files (`Node::io`), in clock order, how
    /// many, and how many may.
    pub(crate) io_clock: walkfs_fsapi::clock::Clock,
    pub(crate) io_held: usize,
    pub(crate) io_cap: usize,
}

impl Nodes {
    /// The node of (device, inode) `key`.
    pub(crate) fn find(&self, key: (u64, u64)) -> Option<u64> {
        self.keys.find(key, |id| self.by_id.get(&id).map(|n| n.key))
    }

    /// Node `id`'s own open files, marked used.
    pub(crate) fn io(&self, id: u64) -> NodeIo {
        match self.by_id.get(&id) {
            Some(n) => {
                n.io_used.store(true, Relaxed);
                n.io.clone()
            }
            None => (None, None),
        }
    }

    /// Give node `id` its own open files `io` (replacing what it had),
    /// and take them from the nodes that used theirs least recently past
    /// `io_cap`. What is taken goes into `out`, for the caller to drop
    /// after the lock (a file closes once no request uses it).
    pub(crate) fn set_io(&mut self, id: u64, io: NodeIo, out: &mut Vec<NodeIo>) {
        let Some(n) = self.by_id.get_mut(&id) else {
            out.push(io);
            return;
        };
        let had = n.io.0.is_some() || n.io.1.is_some();
        out.push(std::mem::replace(&mut n.io, io));
        n.io_used.store(true, Relaxed);
        if !had {
            self.io_held += 1;
            self.io_clock.push(id);
        }
        let excess = self.io_held.saturating_sub(self.io_cap.max(1));
        let by_id = &mut self.by_id;
        let mut dropped = 0;
        self.io_clock.sweep(excess, |id| match by_id.get_mut(&id) {
            Some(n) if n.io.0.is_some() || n.io.1.is_some() => {
                if n.io_used.swap(false, Relaxed) {
                    walkfs_fsapi::clock::Visit::Spare
                } else {
                    out.push(std::mem::take(&mut n.io));
                    dropped += 1;
                    walkfs_fsapi::clock::Visit::Evict
                }
            }
            _ => walkfs_fsapi::clock::Visit::Gone,
        });
        self.io_held -= dropped;
        let by_id = &self.by_id;
        self.io_clock.compact(self.io_held, |id| {
            by_id
                .get(&id)
                .is_some_and(|n| n.io.0.is_some() || n.io.1.is_some())
        });
    }

    /// Node `id` lets its own open files go (another file took its node
    /// id, or it is forgotten): returned for the caller to drop after
    /// the lock.
    pub(crate) fn take_io(&mut self, id: u64) -> NodeIo {
        match self.by_id.get_mut(&id) {
            Some(n) if n.io.0.is_some() || n.io.1.is_some() => {
                self.io_held -= 1;
                std::mem::take(&mut n.io)
            }
            _ => (None, None),
        }
    }
}

/// A node's own open files: (read-only, read-write).
pub(crate) type NodeIo = (Option<OpenFile>, Option<OpenFile>);

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use walkfs_vfs::Creds;

    /// The nodes' own open files are bounded: past `io_cap`, those used
    /// least recently go (and close once no request holds them); a node
    /// forgotten or taken by another file gives its own back.
    #[test]
    fn node_records_keep_at_most_io_cap_open_files_and_prefer_recent_ones() {
        let vfs =
            walkfs_source::open("mem:", &walkfs_source::SourceOptions::default()).expect("vfs");
        let ctx = Arc::new(vfs.context(Creds::root()));
        let mut nodes = Nodes {
            io_cap: 3,
            ..Nodes::default()
        };
        let mut files = Vec::new();
        for id in 10..15u64 {
            let name = format!("/f{id}");
            let f = ctx
                .open_file(
                    walkfs_vfs::AT_FDCWD,
                    name.as_bytes(),
                    libc::O_CREAT | libc::O_RDWR,
                    0o644,
                )
                .expect("create");
            let handle = f.handle().expect("handle");
            nodes.by_id.insert(
                id,
                Node {
                    nlookup: 1,
                    key: (0, id),
                    handle,
                    born: 0,
                    sent: 0,
                    io: (None, None),
                    io_used: AtomicBool::new(false),
                    backing: passthrough::Backed::No,
                    locks: None,
                },
            );
            files.push(f);
        }
        let has = |nodes: &Nodes, id| nodes.by_id[&id].io.1.is_some();
        let mut out = Vec::new();
        for (i, id) in (10..13u64).enumerate() {
            nodes.set_io(id, (None, Some(files[i].clone())), &mut out);
        }
        assert_eq!(nodes.io_held, 3);
        // All new: one full turn clears their bits, then the oldest goes.
        let _ = nodes.io(10);
        nodes.set_io(13, (None, Some(files[3].clone())), &mut out);
        assert_eq!(nodes.io_held, 3);
        assert!(!has(&nodes, 10), "the oldest went");
        // Used since the last turn: 11 stays, 12 goes.
        let _ = nodes.io(11);
        nodes.set_io(14, (None, Some(files[4].clone())), &mut out);
        assert_eq!(nodes.io_held, 3);
        assert!(has(&nodes, 11) && !has(&nodes, 12));
        // What went is handed out, and a file pushed out stays open while
        // someone holds it.
        drop(out);
        assert_eq!(files[0].pread(&mut [0u8; 1], 0), Ok(0));
        // Forgotten: its own open files are counted out.
        let _ = nodes.take_io(11);
        assert_eq!(nodes.io_held, 2);
        assert!(!has(&nodes, 11));
    }
}
