//! Changes carried out behind the caller: the vfs answers an unlink, an
//! rmdir, a rename, a write or an attribute change from its cache and
//! hands it here ([`caps::Ordered::submit`](walkfs_fsapi::caps::Ordered::submit));
//! one thread of ours makes the host calls, in the order they came, while
//! the mount answers the program and takes its next request.
//!
//! The promise of `caps::Ordered` is that a change is carried out
//! before anything asked of us after it was submitted. One worker taking
//! the queue in order keeps the first half. For the second, every node a
//! queued change touches is counted here, and an ordinary call first
//! waits until none of the nodes it names has a change queued
//! ([`Behind::settle`]): a lookup in a directory waits for the unlinks
//! and renames queued there, a stat of a file for its writes and
//! attribute changes, a listing (which reports its entries' attributes)
//! for everything. A call about nodes with nothing queued, which is
//! nearly every call, never waits: the count of queued changes is read
//! first, without the lock.
//!
//! Invariant: a node's count is raised before `submit` returns and
//! lowered only after its host call returned, under the one lock; so a
//! call that found every count of its nodes at zero runs after every
//! change to them that was submitted before it.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::{Condvar, Mutex};
use walkfs_fsapi::{Done, Result};

/// A host call queued with the nodes it touches (at most three: a
/// rename's two directories and the file).
struct Job {
    keys: [u64; 3],
    run: Box<dyn FnOnce() -> Result<()> + Send>,
    done: Done,
}

#[derive(Default)]
struct State {
    queue: VecDeque<Job>,
    /// Node -> changes queued or running that touch it.
    pending: HashMap<u64, u32>,
    /// Callers waiting in `settle`.
    waiters: usize,
    started: bool,
    closing: bool,
    /// The worker takes nothing while set (tests: a queue that lingers).
    held: bool,
}

/// The queue and its worker.
pub(crate) struct Behind {
    state: Mutex<State>,
    /// The worker waits here for work.
    work: Condvar,
    /// Callers wait here for their nodes' changes.
    landed: Condvar,
    /// Changes queued or running: read without the lock by callers.
    busy: AtomicUsize,
    worker: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Behind {
    pub(crate) fn new() -> Arc<Behind> {
        Arc::new(Behind {
            state: Mutex::new(State::default()),
            work: Condvar::new(),
            landed: Condvar::new(),
            busy: AtomicUsize::new(0),
            worker: Mutex::new(None),
        })
    }

    /// Queue `run`, which touches `keys` (0 for none), and report its
    /// outcome to `done`. Starts the worker on first use.
    pub(crate) fn push(
        self: &Arc<Behind>,
        keys: [u64; 3],
        run: Box<dyn FnOnce() -> Result<()> + Send>,
        done: Done,
    ) -> Result<()> {
        let mut s = self.state.lock();
        if s.closing {
            return Err(walkfs_fsapi::Errno::EIO);
        }
        if !s.started {
            let me = Arc::downgrade(self);
            let t = std::thread::Builder::new()
                .name("hostfs-behind".into())
                .spawn(move || {
                    if let Some(me) = me.upgrade() {
                        me.work_loop();
                    }
                })
                .map_err(|_| walkfs_fsapi::Errno::EAGAIN)?;
            *self.worker.lock() = Some(t);
            s.started = true;
        }
        for k in distinct(&keys) {
            *s.pending.entry(k).or_insert(0) += 1;
        }
        self.busy.fetch_add(1, Ordering::SeqCst);
        s.queue.push_back(Job { keys, run, done });
        drop(s);
        self.work.notify_one();
        Ok(())
    }

    fn work_loop(&self) {
        loop {
            let job = {
                let mut s = self.state.lock();
                loop {
                    if !s.held || s.closing {
                        if let Some(j) = s.queue.pop_front() {
                            break j;
                        }
                    }
                    if s.closing {
                        return;
                    }
                    self.work.wait(&mut s);
                }
            };
            let r = (job.run)();
            {
                let mut s = self.state.lock();
                for k in distinct(&job.keys) {
                    if let Some(n) = s.pending.get_mut(&k) {
                        *n -= 1;
                        if *n == 0 {
                            s.pending.remove(&k);
                        }
                    }
                }
                self.busy.fetch_sub(1, Ordering::SeqCst);
                if s.waiters > 0 {
                    self.landed.notify_all();
                }
            }
            // After the counts: a caller woken by the outcome (an fsync
            // waiting in the vfs) finds the node settled.
            (job.done)(r);
        }
    }

    /// Wait until no queued change touches any of `keys`.
    #[inline]
    pub(crate) fn settle(&self, keys: &[u64]) {
        if self.busy.load(Ordering::SeqCst) == 0 {
            return;
        }
        self.settle_slow(Some(keys));
    }

    /// Wait until nothing is queued.
    #[inline]
    pub(crate) fn settle_all(&self) {
        if self.busy.load(Ordering::SeqCst) == 0 {
            return;
        }
        self.settle_slow(None);
    }

    /// Is a change queued that touches `key`?
    pub(crate) fn queued(&self, key: u64) -> bool {
        self.busy.load(Ordering::SeqCst) != 0 && self.state.lock().pending.contains_key(&key)
    }

    #[cold]
    fn settle_slow(&self, keys: Option<&[u64]>) {
        let mut s = self.state.lock();
        loop {
            let clear = match keys {
                Some(keys) => keys.iter().all(|k| !s.pending.contains_key(k)),
                None => s.pending.is_empty() && s.queue.is_empty(),
            };
            if clear {
                return;
            }
            s.waiters += 1;
            self.landed.wait(&mut s);
            s.waiters -= 1;
        }
    }

    /// Hold the queue (the worker takes nothing), or let it go.
    pub(crate) fn hold(&self, on: bool) {
        self.state.lock().held = on;
        self.work.notify_all();
    }

    /// Carry out everything queued, then stop the worker.
    pub(crate) fn close(&self) {
        self.state.lock().closing = true;
        self.work.notify_all();
        if let Some(t) = self.worker.lock().take() {
            if t.thread().id() != std::thread::current().id() {
                let _ = t.join();
            }
        }
    }
}

/// The nonzero keys of a job, each once.
fn distinct(keys: &[u64; 3]) -> impl Iterator<Item = u64> + '_ {
    keys.iter()
        .enumerate()
        .filter(|&(i, &k)| k != 0 && !keys[..i].contains(&k))
        .map(|(_, &k)| k)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;
    use std::time::Duration;

    #[test]
    fn jobs_run_in_order_and_settle_waits_only_for_its_nodes() {
        let b = Behind::new();
        let log = Arc::new(Mutex::new(Vec::new()));
        let gate = Arc::new((Mutex::new(false), Condvar::new()));
        // Job 1 on node 7 blocks until the gate opens.
        {
            let (log, gate) = (log.clone(), gate.clone());
            b.push(
                [7, 0, 0],
                Box::new(move || {
                    let mut open = gate.0.lock();
                    while !*open {
                        gate.1.wait(&mut open);
                    }
                    log.lock().push(1);
                    Ok(())
                }),
                Box::new(|_| {}),
            )
            .expect("push");
        }
        let l = log.clone();
        b.push(
            [8, 7, 8],
            Box::new(move || {
                l.lock().push(2);
                Ok(())
            }),
            Box::new(|_| {}),
        )
        .expect("push");
        // Node 9 has nothing queued: no wait.
        b.settle(&[9]);
        assert!(b.queued(7) && b.queued(8) && !b.queued(9));
        let settled = Arc::new(AtomicU64::new(0));
        let t = {
            let (b, settled) = (b.clone(), settled.clone());
            std::thread::spawn(move || {
                b.settle(&[8]);
                settled.store(1, Ordering::SeqCst);
            })
        };
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(
            settled.load(Ordering::SeqCst),
            0,
            "settled before job 2 ran"
        );
        *gate.0.lock() = true;
        gate.1.notify_all();
        t.join().expect("join");
        assert_eq!(*log.lock(), vec![1, 2]);
        b.settle_all();
        assert!(!b.queued(7) && !b.queued(8));
        b.close();
    }

    #[test]
    fn outcomes_reach_done() {
        let b = Behind::new();
        let (tx, rx) = std::sync::mpsc::channel();
        b.push(
            [3, 0, 0],
            Box::new(|| Err(walkfs_fsapi::Errno::ENOSPC)),
            Box::new(move |r| {
                let _ = tx.send(r);
            }),
        )
        .expect("push");
        assert_eq!(
            rx.recv_timeout(Duration::from_secs(5)).expect("outcome"),
            Err(walkfs_fsapi::Errno::ENOSPC)
        );
        b.close();
    }
}
