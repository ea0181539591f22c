//! File read-ahead: a reader going through a directory's small files in
//! name order (`git add` hashing a tree, `tar c` of a sorted list, `cat
//! *.h`) finds the next files' first bytes already on their way, instead
//! of paying a round trip to open and read each. Like the directory
//! read-ahead (readahead.rs), only for a backend whose answers travel and
//! keep their order (`caps::Ordered`), and only while
//! `dir_readahead` is on.
//!
//! The policy:
//! - The small regular files (at most [`MAX_SIZE`]) of each directory
//!   listed lately are remembered in name order.
//! - A first read of one of them, right after a first read of the one
//!   before it in that order, asks for the next [`WINDOW`] (open and first
//!   read in one backend call, [`caps::Remote::open_read`], run by a few
//!   threads here); each first read answered that way asks for one more.
//!   Readers in any other order ask for nothing.
//! - An answer is used by the first read of its file only if it is as
//!   fresh as one asked for now would be: no change of ours touched the
//!   file since it was asked for (the change log of readahead.rs), no
//!   change was reported, and it is younger than [`MAX_AGE`]. It serves
//!   the read if it holds all the read asks for (or the file ended
//!   within it); else the open handle serves the read the ordinary way.
//! - An answer nobody took within [`MAX_AGE`] is given back (its handle
//!   released), at most [`MAX_HELD`] are kept.

use std::collections::HashMap;
use std::sync::atomic::Ordering::Acquire;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use walkfs_fsapi::{DirPlus, FileHandle, FileSystem, NodeId, OpenFlags, Result};

use crate::Inner;

/// Files asked for ahead of a reader.
pub const WINDOW: usize = 16;
/// Only files this small are read ahead.
pub const MAX_SIZE: u64 = 64 * 1024;
/// Bytes asked for: what a first read of such a file asks (the kernel
/// reads up to 128 KiB at once).
const COUNT: usize = 128 * 1024;
/// An answer older than this is not used.
pub const MAX_AGE: Duration = Duration::from_secs(1);
/// Answers kept (taken or not) at most.
const MAX_HELD: usize = 64;
/// Directories whose small files are remembered at most.
const MAX_DIRS: usize = 256;
/// Threads running the backend calls (each waits one round trip).
const THREADS: usize = 4;

/// A node of superblock `.0`.
type Key = (usize, u64);

/// An open handle and the first bytes read with it.
type Opened = Result<(FileHandle, Vec<u8>)>;

/// A directory's small files, (name, node) in name order.
type Files = Arc<Vec<(Vec<u8>, u64)>>;

/// One file's open and first read, asked for ahead.
struct Fetch {
    at: Instant,
    /// The change log's position and the reported-change generation
    /// when it was asked for.
    log: u64,
    seen: u64,
    got: Mutex<Option<Opened>>,
    done: Condvar,
}

struct Job {
    fs: Arc<dyn FileSystem>,
    node: u64,
    fetch: Arc<Fetch>,
}

/// Where a directory's reader was: the index of its last first read in
/// the name order, and when.
type Place = (usize, Instant);

#[derive(Default)]
pub(crate) struct FileAhead {
    /// Directory -> its small files (name, node), in name order.
    dirs: Mutex<HashMap<Key, Files>>,
    places: Mutex<HashMap<Key, Place>>,
    held: Mutex<HashMap<Key, Arc<Fetch>>>,
    /// Started at the first ask.
    jobs: Mutex<Option<mpsc::Sender<Job>>>,
}

impl FileAhead {
    /// Directory `dir` was listed showing `plus`: remember its small
    /// regular files in name order.
    pub fn listed(&self, dir: Key, plus: &[DirPlus]) {
        let mut files: Vec<(Vec<u8>, u64)> = plus
            .iter()
            .filter(|p| {
                p.entry.attr.mode & libc::S_IFMT == libc::S_IFREG && p.entry.attr.size <= MAX_SIZE
            })
            .map(|p| (p.name.clone(), p.entry.node.0))
            .collect();
        if files.len() < 2 {
            return;
        }
        files.sort_unstable();
        let mut d = self.dirs.lock();
        if d.len() >= MAX_DIRS {
            d.clear();
            self.places.lock().clear();
        }
        d.insert(dir, Arc::new(files));
    }

    fn start(&self) -> Option<mpsc::Sender<Job>> {
        let mut j = self.jobs.lock();
        if let Some(tx) = &*j {
            return Some(tx.clone());
        }
        let (tx, rx) = mpsc::channel::<Job>();
        let rx = Arc::new(std::sync::Mutex::new(rx));
        for i in 0..THREADS {
            let rx = Arc::clone(&rx);
            let spawned = std::thread::Builder::new()
                .name(format!("walkfs-fileahead-{i}"))
                .spawn(move || loop {
                    // The sender goes with the vfs: then the threads end.
                    let job = match rx.lock() {
                        Ok(r) => r.recv(),
                        Err(_) => return,
                    };
                    let Ok(job) = job else { return };
                    let mut buf = vec![0u8; COUNT];
                    let r = job
                        .fs
                        .open_read(NodeId(job.node), OpenFlags(libc::O_RDONLY), 0, &mut buf)
                        .map(|(fh, n)| {
                            buf.truncate(n);
                            (fh, buf)
                        });
                    *job.fetch.got.lock() = Some(r);
                    job.fetch.done.notify_all();
                });
            if spawned.is_err() {
                break;
            }
        }
        *j = Some(tx.clone());
        Some(tx)
    }
}

impl Inner {
    /// The open handle and first bytes of file `key`, read ahead and
    /// still fresh (module comment), now the caller's. A stale one is
    /// released.
    pub(crate) fn file_ahead(
        &self,
        fs: &dyn FileSystem,
        key: Key,
    ) -> Option<(FileHandle, Vec<u8>)> {
        let f = {
            let mut h = self.fa.held.lock();
            if h.is_empty() {
                return None;
            }
            h.remove(&key)?
        };
        let got = {
            let mut g = f.got.lock();
            while g.is_none() {
                f.done.wait(&mut g);
            }
            g.take()
        };
        let fresh = f.at.elapsed() < MAX_AGE
            && self.ext_seen.load(Acquire) == f.seen
            && self.ra_log.untouched(f.log, (usize::MAX, 0), |k| k == key);
        match got {
            Some(Ok((fh, data))) if fresh => {
                self.counters.fileahead_used.inc();
                Some((fh, data))
            }
            Some(Ok((fh, _))) => {
                self.counters.fileahead_wasted.inc();
                fs.release(NodeId(key.1), fh);
                None
            }
            _ => {
                self.counters.fileahead_wasted.inc();
                None
            }
        }
    }

    /// File `node` of directory `dir` (superblock `sb`) had its first
    /// read (`hit`: one read ahead): ask for the files after it, as the
    /// module comment says.
    pub(crate) fn read_files_ahead(
        &self,
        fs: &Arc<dyn FileSystem>,
        sb: usize,
        dir: u64,
        node: u64,
        hit: bool,
    ) {
        if !self.lists_ahead(sb) {
            return;
        }
        let dir = (sb, dir);
        let Some(files) = self.fa.dirs.lock().get(&dir).cloned() else {
            return;
        };
        let Some(i) = files.iter().position(|(_, n)| *n == node) else {
            return;
        };
        let now = Instant::now();
        let sequential = {
            let mut p = self.fa.places.lock();
            let before = p.insert(dir, (i, now));
            hit || before.is_some_and(|(j, t)| j + 1 == i && t.elapsed() < MAX_AGE)
        };
        if !sequential {
            return;
        }
        let Some(tx) = self.fa.start() else { return };
        let log = self.ra_log.position();
        let seen = self.ext_seen.load(Acquire);
        let mut gone = Vec::new();
        {
            let mut held = self.fa.held.lock();
            // Answers nobody took in time go back.
            let old: Vec<Key> = held
                .iter()
                .filter(|(_, f)| f.at.elapsed() >= MAX_AGE)
                .map(|(k, _)| *k)
                .collect();
            gone.extend(
                old.into_iter()
                    .filter_map(|k| held.remove(&k).map(|f| (k, f))),
            );
            for &(_, n) in files.iter().skip(i + 1).take(WINDOW) {
                let key = (sb, n);
                if held.len() >= MAX_HELD {
                    break;
                }
                if held.contains_key(&key) {
                    continue;
                }
                let fetch = Arc::new(Fetch {
                    at: now,
                    log,
                    seen,
                    got: Mutex::new(None),
                    done: Condvar::new(),
                });
                held.insert(key, Arc::clone(&fetch));
                self.counters.fileahead_asked.inc();
                let job = Job {
                    fs: Arc::clone(fs),
                    node: n,
                    fetch,
                };
                if tx.send(job).is_err() {
                    held.remove(&key);
                    break;
                }
            }
        }
        // Released outside the lock (each waits for its answer first).
        for (k, f) in gone {
            self.counters.fileahead_wasted.inc();
            let mut g = f.got.lock();
            while g.is_none() {
                f.done.wait(&mut g);
            }
            if let Some(Ok((fh, _))) = g.take() {
                fs.release(NodeId(k.1), fh);
            }
        }
    }
}

/// How much of `data` (a file's first bytes, read ahead) answers a read
/// of `len` bytes at `off`: `None` when the read reaches past it and the
/// file may go on (a short answer would read as the file's end).
pub(crate) fn serves(data: &[u8], off: u64, len: usize) -> Option<usize> {
    let off = usize::try_from(off).ok()?;
    let ended = data.len() < COUNT;
    if off > data.len() {
        return ended.then_some(0);
    }
    let n = len.min(data.len() - off);
    (n == len || ended).then_some(n)
}

#[cfg(test)]
mod tests {
    use super::{serves, COUNT};

    #[test]
    fn a_read_is_served_only_by_what_covers_it_or_ends_the_file() {
        let small = vec![1u8; 100];
        assert_eq!(serves(&small, 0, 4096), Some(100));
        assert_eq!(serves(&small, 50, 10), Some(10));
        assert_eq!(serves(&small, 200, 10), Some(0));
        let full = vec![1u8; COUNT];
        assert_eq!(serves(&full, 0, 4096), Some(4096));
        assert_eq!(serves(&full, 0, COUNT + 1), None);
        assert_eq!(serves(&full, COUNT as u64 + 1, 1), None);
    }
}
