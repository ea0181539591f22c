//! Write-behind for `cache=coherent` mounts.
//!
//! A coherent mount cannot use the kernel's write-back cache (with it the
//! kernel owns a file's size and never takes one changed on the host), so
//! every write(2) would reach us, and the backend, on its own: a build's
//! assembler and linker write through stdio's 8 KiB buffer, and each piece
//! became a round trip to the server, a change report from its watch and
//! an invalidation back. Here a file's small sequential writes are
//! gathered and sent as one, which is what the kernel would have done.
//!
//! Invariant: whenever the lock is free, every byte a write was answered
//! for is either in `pending` or already at the backend (pieces are sent
//! while the lock is held). So anything that asks the backend about a
//! file (attributes, data, truncation) first sends that file's pending
//! piece, and cannot see it half-sent. Pieces also go out after
//! [`MAX_AGE`] from a thread of their own, so other clients and the host
//! see the data soon even while the file stays open, and at close (FUSE
//! flush), where a failed send is reported to the program.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use walkfs_vfs::{Ctx, Errno};

/// Bytes gathered per file before they are sent.
const MAX_PIECE: usize = 256 * 1024;
/// Writes at least this large go straight through.
const DIRECT: usize = 64 * 1024;
/// Files with pending pieces before all are sent.
const MAX_FILES: usize = 64;
/// How long a piece may wait.
pub(crate) const MAX_AGE: Duration = Duration::from_millis(20);

struct Piece {
    fd: i32,
    off: u64,
    buf: Vec<u8>,
    since: Instant,
}

#[derive(Default)]
struct State {
    /// Node id -> its one pending piece.
    pending: HashMap<u64, Piece>,
    /// Node id -> the error a piece of it met after its writes were
    /// answered, reported by the next write, flush or fsync.
    failed: HashMap<u64, Errno>,
}

pub(crate) struct WriteBehind {
    state: Mutex<State>,
    /// `pending.len()`, read without the lock on every request.
    files: AtomicUsize,
    wake: Condvar,
}

impl WriteBehind {
    pub fn new() -> Arc<WriteBehind> {
        Arc::new(WriteBehind {
            state: Mutex::new(State::default()),
            files: AtomicUsize::new(0),
            wake: Condvar::new(),
        })
    }

    /// Start the thread that sends pieces older than [`MAX_AGE`]; it ends
    /// with the last other reference.
    pub fn start(self: &Arc<Self>, ctx: Ctx) -> std::io::Result<()> {
        let weak: Weak<WriteBehind> = Arc::downgrade(self);
        std::thread::Builder::new()
            .name("fuse-writebehind".into())
            .spawn(move || loop {
                let Some(wb) = weak.upgrade() else { return };
                let mut st = wb.state.lock();
                if st.pending.is_empty() {
                    // Woken by the first piece; the timeout lets the
                    // thread notice that the mount is gone.
                    wb.wake.wait_for(&mut st, Duration::from_secs(1));
                    continue;
                }
                let now = Instant::now();
                let due: Vec<u64> = st
                    .pending
                    .iter()
                    .filter(|(_, p)| now.duration_since(p.since) >= MAX_AGE)
                    .map(|(&id, _)| id)
                    .collect();
                for id in due {
                    wb.send_locked(&mut st, &ctx, id);
                }
                drop(st);
                drop(wb);
                std::thread::sleep(MAX_AGE / 2);
            })
            .map(drop)
    }

    /// Write `data` at `off` of node `id` through descriptor `fd`: gathered
    /// when it continues the file's pending piece (or may start one), else
    /// sent after what is pending.
    pub fn write(
        &self,
        ctx: &Ctx,
        id: u64,
        fd: i32,
        off: u64,
        data: &[u8],
    ) -> Result<usize, Errno> {
        let mut st = self.state.lock();
        if let Some(e) = st.failed.remove(&id) {
            return Err(e);
        }
        if let Some(p) = st.pending.get_mut(&id) {
            if p.fd == fd
                && p.off + p.buf.len() as u64 == off
                && p.buf.len() + data.len() <= MAX_PIECE
            {
                p.buf.extend_from_slice(data);
                return Ok(data.len());
            }
            self.send_locked(&mut st, ctx, id);
            if let Some(e) = st.failed.remove(&id) {
                return Err(e);
            }
        }
        if data.len() >= DIRECT {
            drop(st);
            return ctx.pwrite(fd, data, off);
        }
        if st.pending.len() >= MAX_FILES {
            let ids: Vec<u64> = st.pending.keys().copied().collect();
            for other in ids {
                self.send_locked(&mut st, ctx, other);
            }
        }
        let first = st.pending.is_empty();
        st.pending.insert(
            id,
            Piece {
                fd,
                off,
                buf: data.to_vec(),
                since: Instant::now(),
            },
        );
        self.files.store(st.pending.len(), Relaxed);
        if first {
            self.wake.notify_one();
        }
        Ok(data.len())
    }

    /// Send node `id`'s pending piece, if any, before the backend is asked
    /// about it; whether there was one. Cheap when nothing is pending
    /// anywhere.
    #[inline]
    pub fn settle(&self, ctx: &Ctx, id: u64) -> bool {
        self.files.load(Relaxed) != 0 && self.settle_slow(ctx, id)
    }

    #[inline(never)]
    fn settle_slow(&self, ctx: &Ctx, id: u64) -> bool {
        let mut st = self.state.lock();
        self.send_locked(&mut st, ctx, id)
    }

    /// [`settle`](Self::settle), and the error any piece of `id` met since
    /// it was last asked (close and fsync report it, as the kernel reports
    /// a failed write-back).
    pub fn flush(&self, ctx: &Ctx, id: u64) -> Result<(), Errno> {
        let mut st = self.state.lock();
        self.send_locked(&mut st, ctx, id);
        st.failed.remove(&id).map_or(Ok(()), Err)
    }

    /// Node `id` is gone from the kernel: send what it has pending (its
    /// descriptors are about to close) and forget its errors.
    pub fn forget(&self, ctx: &Ctx, id: u64) {
        if self.files.load(Relaxed) == 0 {
            return;
        }
        let mut st = self.state.lock();
        self.send_locked(&mut st, ctx, id);
        st.failed.remove(&id);
    }

    /// Descriptor `fd` is about to close: send any piece written through
    /// it.
    pub fn closing(&self, ctx: &Ctx, fd: i32) {
        if self.files.load(Relaxed) == 0 {
            return;
        }
        let mut st = self.state.lock();
        let ids: Vec<u64> = st
            .pending
            .iter()
            .filter(|(_, p)| p.fd == fd)
            .map(|(&id, _)| id)
            .collect();
        for id in ids {
            self.send_locked(&mut st, ctx, id);
        }
    }

    /// Send `id`'s piece; whether it had one. A failure is kept for the
    /// program's next write, flush or fsync of the file.
    fn send_locked(&self, st: &mut State, ctx: &Ctx, id: u64) -> bool {
        let Some(p) = st.pending.remove(&id) else {
            return false;
        };
        self.files.store(st.pending.len(), Relaxed);
        let mut done = 0;
        while done < p.buf.len() {
            match ctx.pwrite(p.fd, &p.buf[done..], p.off + done as u64) {
                Ok(0) => {
                    st.failed.insert(id, Errno::EIO);
                    break;
                }
                Ok(n) => done += n,
                Err(e) => {
                    tracing::warn!("write-behind of node {id} failed: {e}");
                    // Bounded: errors of nodes never asked again go.
                    if st.failed.len() >= 4096 {
                        st.failed.clear();
                    }
                    st.failed.insert(id, e);
                    break;
                }
            }
        }
        true
    }
}
