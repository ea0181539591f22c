//! Asynchronous changes: what a client owes its server, and the errors
//! the server answered them with.
//!
//! With `Config::async_changes` the client sends unlink, the writes of an
//! open file, and attribute changes whose result it can work out itself
//! without waiting for their replies (`Rpc::send_async`). The server
//! runs a connection's changes in arrival order (docs/9p-ordering.md), so
//! a later request sees them. A refusal comes back later: it is kept
//! here and reported the way Linux reports a write-back error —
//! - `fsync` of the file (or of the directory whose entry it was) waits
//!   for everything in flight and reports the file's first error, once;
//! - `close` reports one that has already arrived;
//! - `syncfs` waits for everything and reports any error since the last
//!   `syncfs`;
//! - every one is logged and counted (`async_errors` in `walkfs stats`);
//! - the caller's cache is told to forget the entry or the attributes the
//!   change was answered from, so no name stays visible that the server
//!   does not have (`FileSystem::set_correction_sink`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;

use parking_lot::Mutex;
use walkfs_fsapi::{Change, ChangeSink, Errno, NodeId, Result};

use crate::rpc::AsyncOp;

/// Errors of asynchronous changes, kept until reported.
#[derive(Default)]
struct Errors {
    /// The first unreported error of each node.
    by_node: HashMap<u64, Errno>,
    /// Every error so far (for `syncfs`), the latest, and how many
    /// `syncfs` has reported.
    seq: u64,
    last: Option<Errno>,
    seen: u64,
}

/// Shared between the backend and its connection's reader thread.
#[derive(Default)]
pub(crate) struct WriteBack {
    errors: Mutex<Errors>,
    /// Some change has failed (ever): until then every `close` asks
    /// nothing of `errors`.
    failed_once: AtomicBool,
    /// Corrections go to the cache from a thread of their own: the reader
    /// that learns of a failure must never wait on a cache lock whose
    /// holder may be waiting for a reply only that reader can deliver.
    fix: Mutex<Option<mpsc::Sender<Vec<Change>>>>,
}

impl WriteBack {
    /// A change failed: keep the error for its node, log it, and correct
    /// the cache.
    pub fn failed(&self, op: &AsyncOp, e: Errno) {
        tracing::warn!(
            "9p: an asynchronous change of node {} failed on the server: {e} (reported at fsync/close/syncfs)",
            op.node
        );
        {
            let mut g = self.errors.lock();
            g.by_node.entry(op.node).or_insert(e);
            if let Some((dir, _)) = &op.entry {
                g.by_node.entry(*dir).or_insert(e);
            }
            g.seq += 1;
            g.last = Some(e);
        }
        self.failed_once.store(true, Ordering::Release);
        let mut changes = vec![Change::Inode {
            node: NodeId(op.node),
            ino: op.node,
        }];
        if let Some((dir, name)) = &op.entry {
            changes.push(Change::Entry {
                dir: NodeId(*dir),
                dir_ino: *dir,
                name: name.clone(),
            });
        }
        if let Some(tx) = &*self.fix.lock() {
            let _ = tx.send(changes);
        }
    }

    /// Deliver corrections to `sink` from now on.
    pub fn set_sink(&self, sink: Arc<dyn ChangeSink>) {
        let (tx, rx) = mpsc::channel::<Vec<Change>>();
        let started = std::thread::Builder::new()
            .name("9p-corrections".into())
            .spawn(move || {
                for c in rx {
                    sink.changed(&c);
                }
            });
        match started {
            Ok(_) => *self.fix.lock() = Some(tx),
            Err(e) => tracing::error!("cannot start the corrections thread: {e}"),
        }
    }

    /// The node's first unreported error, reported now.
    pub fn take(&self, node: u64) -> Result<()> {
        if !self.failed_once.load(Ordering::Acquire) {
            return Ok(());
        }
        match self.errors.lock().by_node.remove(&node) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Any error since the last call (for `syncfs`).
    pub fn take_any(&self) -> Result<()> {
        let mut g = self.errors.lock();
        if g.seq == g.seen {
            return Ok(());
        }
        g.seen = g.seq;
        Err(g.last.unwrap_or(Errno::EIO))
    }
}
