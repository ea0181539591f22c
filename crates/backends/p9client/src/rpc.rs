//! The wire side of the client: one connection, many requests in flight.
//!
//! Callers take a tag, write their request (or several back to back, one
//! write for a pipelined walk + open), and wait on the tag's slot; a
//! reader thread files each reply under its tag. Counters record RPCs by
//! type, bytes, and the time callers spent waiting for replies (seed 003's
//! I/O-wait accounting).
//!
//! A lost connection is final: every waiting caller and every later call
//! fails at once with `ENOTCONN` (what a FUSE mount whose daemon died
//! gives), nothing hangs, and nothing is re-sent. The client does not
//! reconnect: after a server restart its fids would name nothing, and
//! silently re-walking paths could land on different files; the mount
//! is unmounted and mounted again.

use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Instant;

use parking_lot::{Condvar, Mutex};
use walkfs_fsapi::{Done, Errno, Result};
use walkfs_p9::{read_frame, Fcall, Stream, MIN_MSIZE, NOTAG, VERSION};

/// Per-connection counters.
pub struct Counters {
    /// Requests sent, by message type.
    pub rpcs: [AtomicU64; 256],
    pub bytes_sent: AtomicU64,
    pub bytes_received: AtomicU64,
    /// Nanoseconds callers spent waiting for replies.
    pub wait_ns: AtomicU64,
    /// Times a caller waited for replies (round trips).
    pub waits: AtomicU64,
}

impl Default for Counters {
    fn default() -> Counters {
        Counters {
            rpcs: std::array::from_fn(|_| AtomicU64::new(0)),
            bytes_sent: AtomicU64::new(0),
            bytes_received: AtomicU64::new(0),
            wait_ns: AtomicU64::new(0),
            waits: AtomicU64::new(0),
        }
    }
}

/// A snapshot of [`Counters`] (the type every backend reports its
/// message counters in).
pub use walkfs_fsapi::RpcStats as Stats;

impl Counters {
    pub fn snapshot(&self) -> Stats {
        let mut s = Stats::default();
        for (t, c) in self.rpcs.iter().enumerate() {
            let n = c.load(Relaxed);
            if n > 0 {
                s.rpcs.push((walkfs_p9::type_name(t as u8), n));
                s.total_rpcs += n;
            }
        }
        s.bytes_sent = self.bytes_sent.load(Relaxed);
        s.bytes_received = self.bytes_received.load(Relaxed);
        s.wait_ns = self.wait_ns.load(Relaxed);
        s.waits = self.waits.load(Relaxed);
        s
    }
    pub fn reset(&self) {
        for c in &self.rpcs {
            c.store(0, Relaxed);
        }
        self.bytes_sent.store(0, Relaxed);
        self.bytes_received.store(0, Relaxed);
        self.wait_ns.store(0, Relaxed);
        self.waits.store(0, Relaxed);
    }
}

#[derive(Default)]
struct Slot {
    reply: Mutex<Option<Vec<u8>>>,
    cv: Condvar,
}

/// Tags in flight at most (requests beyond wait for a free tag).
const TAGS: usize = 256;

/// Asynchronous changes in flight at most: the bound on what a client
/// owes its server (count; the bytes are each request's, already sent).
/// A quarter of the tags stays for the calls that wait.
pub const MAX_ASYNC: usize = TAGS * 3 / 4;

/// A change sent without waiting for its reply: where its outcome goes.
/// Dropped unanswered (the connection died, the client went), it reports
/// `ENOTCONN`: whether the server carried it out is unknown.
pub struct AsyncOp {
    done: Option<Done>,
    /// Bytes a write sent: fewer written is an error (`ENOSPC`).
    expect: u32,
}

impl AsyncOp {
    pub fn new(done: Done, expect: u32) -> AsyncOp {
        AsyncOp {
            done: Some(done),
            expect,
        }
    }

    /// Never sent: the caller is told by the error it gets, not here.
    fn disarm(mut self) {
        self.done = None;
    }

    fn finish(mut self, r: Result<()>) {
        if let Some(done) = self.done.take() {
            done(r);
        }
    }
}

impl Drop for AsyncOp {
    fn drop(&mut self) {
        if let Some(done) = self.done.take() {
            done(Err(Errno::ENOTCONN));
        }
    }
}

/// What the reader calls with the replies to [`Rpc::send_then`]: the
/// request's index in the batch and its reply (`None`: the connection
/// died first). It runs on the reader thread, so it must neither send
/// nor wait for anything.
pub type Then = Arc<dyn Fn(usize, Option<Fcall<'_>>) + Send + Sync>;

/// A reply the reader deals with itself: nobody waits on its slot.
enum Pending {
    Change(AsyncOp),
    Then(usize, Then),
}

/// Asynchronous changes in flight.
#[derive(Default)]
struct Inflight {
    n: Mutex<usize>,
    cv: Condvar,
}

pub struct Rpc {
    writer: Mutex<Stream>,
    slots: Vec<Slot>,
    free: Mutex<Vec<u16>>,
    free_cv: Condvar,
    /// Tags whose replies nobody waits for (fire-and-forget clunks).
    orphan: Vec<AtomicBool>,
    /// Tags of asynchronous changes (their replies are checked by the
    /// reader, and a failure is handed to `on_error`) and of requests
    /// whose replies go to a callback.
    changes: Vec<Mutex<Option<Pending>>>,
    inflight: Inflight,
    dead: AtomicBool,
    pub msize: u32,
    pub counters: Counters,
}

impl Rpc {
    /// Negotiate the version on `stream` and start the reply reader.
    pub fn start(mut stream: Stream, msize: u32) -> Result<Arc<Rpc>> {
        let mut out = Vec::new();
        Fcall::Tversion {
            msize,
            version: walkfs_p9::Str(VERSION),
        }
        .encode(NOTAG, &mut out);
        stream.write_all(&out).map_err(Errno::from)?;
        let mut buf = Vec::new();
        if !read_frame(&mut stream, &mut buf, msize.max(MIN_MSIZE)).map_err(Errno::from)? {
            return Err(Errno::ECONNRESET);
        }
        let msize = match Fcall::decode(&buf).map_err(|_| Errno::EPROTO)?.1 {
            Fcall::Rversion { msize: m, version } if version.0 == VERSION && m >= MIN_MSIZE => {
                m.min(msize)
            }
            Fcall::Rlerror { ecode } => return Err(Errno::from_wire(ecode)),
            _ => return Err(Errno::EPROTONOSUPPORT),
        };
        let reader = stream.try_clone().map_err(Errno::from)?;
        let rpc = Arc::new(Rpc {
            writer: Mutex::new(stream),
            slots: (0..TAGS).map(|_| Slot::default()).collect(),
            free: Mutex::new((0..TAGS as u16).rev().collect()),
            free_cv: Condvar::new(),
            orphan: (0..TAGS).map(|_| AtomicBool::new(false)).collect(),
            changes: (0..TAGS).map(|_| Mutex::new(None)).collect(),
            inflight: Inflight::default(),
            dead: AtomicBool::new(false),
            msize,
            counters: Counters::default(),
        });
        let r = Arc::downgrade(&rpc);
        std::thread::Builder::new()
            .name("9p-client-reader".into())
            .spawn(move || reader_loop(r, reader, msize))
            .map_err(Errno::from)?;
        Ok(rpc)
    }

    /// A free tag; `None` once the connection is dead (tags held by
    /// requests whose replies will never come are never given back, so
    /// waiting for one would be forever).
    fn take_tag(&self) -> Option<u16> {
        let mut f = self.free.lock();
        loop {
            if let Some(t) = f.pop() {
                return Some(t);
            }
            if self.dead.load(Relaxed) {
                return None;
            }
            self.free_cv.wait(&mut f);
        }
    }

    fn put_tag(&self, t: u16) {
        self.free.lock().push(t);
        self.free_cv.notify_one();
    }

    /// Send `reqs` back to back in one write and wait for every reply:
    /// one round trip for a chain like walk + open. Each reply frame is
    /// passed to `each` (in request order) while its buffer is alive.
    pub fn call_many(
        &self,
        reqs: &[Fcall<'_>],
        mut each: impl FnMut(usize, Fcall<'_>),
    ) -> Result<()> {
        if self.dead.load(Relaxed) {
            return Err(Errno::ENOTCONN);
        }
        let mut tags: Vec<u16> = Vec::with_capacity(reqs.len());
        for _ in reqs {
            match self.take_tag() {
                Some(t) => tags.push(t),
                None => {
                    for t in tags {
                        self.put_tag(t);
                    }
                    return Err(Errno::ENOTCONN);
                }
            }
        }
        let mut out = Vec::with_capacity(128 * reqs.len());
        for (r, &t) in reqs.iter().zip(&tags) {
            r.encode(t, &mut out);
            self.counters.rpcs[r.msg_type() as usize].fetch_add(1, Relaxed);
        }
        if out.len() > self.msize as usize * reqs.len() {
            for t in tags {
                self.put_tag(t);
            }
            return Err(Errno::EMSGSIZE);
        }
        self.counters
            .bytes_sent
            .fetch_add(out.len() as u64, Relaxed);
        let t0 = Instant::now();
        let w = self.writer.lock().write_all(&out);
        if w.is_err() {
            self.dead.store(true, Relaxed);
            for t in tags {
                self.put_tag(t);
            }
            return Err(Errno::ENOTCONN);
        }
        let mut result = Ok(());
        for (i, &t) in tags.iter().enumerate() {
            let slot = &self.slots[t as usize];
            let frame = {
                let mut g = slot.reply.lock();
                loop {
                    if let Some(f) = g.take() {
                        break Some(f);
                    }
                    if self.dead.load(Relaxed) {
                        break None;
                    }
                    slot.cv.wait(&mut g);
                }
            };
            self.put_tag(t);
            match frame {
                Some(f) => match Fcall::decode(&f) {
                    Ok((_, msg)) => each(i, msg),
                    Err(_) => result = Err(Errno::EPROTO),
                },
                None => result = Err(Errno::ENOTCONN),
            }
        }
        self.counters
            .wait_ns
            .fetch_add(t0.elapsed().as_nanos() as u64, Relaxed);
        self.counters.waits.fetch_add(1, Relaxed);
        result
    }

    /// One request, its reply handed to `f`; `Rlerror` becomes the errno.
    pub fn call<T>(&self, req: Fcall<'_>, f: impl FnOnce(Fcall<'_>) -> Result<T>) -> Result<T> {
        let mut f = Some(f);
        let mut out = Err(Errno::EPROTO);
        self.call_many(&[req], |_, reply| {
            out = match reply {
                Fcall::Rlerror { ecode } => Err(Errno::from_wire(ecode)),
                r => match f.take() {
                    Some(f) => f(r),
                    None => Err(Errno::EPROTO),
                },
            };
        })?;
        out
    }

    /// Send a request whose reply nobody needs (a clunk).
    pub fn send_forget(&self, req: Fcall<'_>) {
        if self.dead.load(Relaxed) {
            return;
        }
        let Some(t) = self.take_tag() else { return };
        self.orphan[t as usize].store(true, Relaxed);
        let mut out = Vec::with_capacity(16);
        req.encode(t, &mut out);
        self.counters.rpcs[req.msg_type() as usize].fetch_add(1, Relaxed);
        self.counters
            .bytes_sent
            .fetch_add(out.len() as u64, Relaxed);
        let w = self.writer.lock().write_all(&out);
        if w.is_err() {
            self.dead.store(true, Relaxed);
        }
    }

    /// Send `reqs` back to back in one write and return at once; the
    /// reader hands each reply to `then` (see [`Then`]). For work a
    /// caller may use later (a directory read ahead), never for changes.
    pub fn send_then(&self, reqs: &[Fcall<'_>], then: Then) -> Result<()> {
        if self.dead.load(Relaxed) {
            return Err(Errno::ENOTCONN);
        }
        let mut out = Vec::with_capacity(128 * reqs.len());
        let mut tags = Vec::with_capacity(reqs.len());
        for (i, r) in reqs.iter().enumerate() {
            let Some(t) = self.take_tag() else {
                for t in tags {
                    self.changes[t as usize].lock().take();
                    self.put_tag(t);
                }
                return Err(Errno::ENOTCONN);
            };
            *self.changes[t as usize].lock() = Some(Pending::Then(i, Arc::clone(&then)));
            tags.push(t);
            r.encode(t, &mut out);
            self.counters.rpcs[r.msg_type() as usize].fetch_add(1, Relaxed);
        }
        self.counters
            .bytes_sent
            .fetch_add(out.len() as u64, Relaxed);
        if self.writer.lock().write_all(&out).is_err() {
            // The reader, if it has not yet, tells `then` of the death.
            self.dead.store(true, Relaxed);
            self.shutdown();
            return Err(Errno::ENOTCONN);
        }
        Ok(())
    }

    /// Send a change and return without waiting for its reply (see
    /// "Asynchronous changes" in lib.rs). The request is written to the
    /// connection before this returns, so a server keeps it even if this
    /// process dies next. `ENOTCONN` when the connection is gone.
    pub fn send_async(&self, req: Fcall<'_>, op: AsyncOp) -> Result<()> {
        self.send_async_many(&[req], vec![op])
    }

    /// [`Rpc::send_async`] of several changes, back to back in one
    /// write: `ops[i]` gets the outcome of `reqs[i]`. All or none are
    /// sent (`ENOTCONN`: none, and no `done` is called).
    pub fn send_async_many(&self, reqs: &[Fcall<'_>], ops: Vec<AsyncOp>) -> Result<()> {
        debug_assert_eq!(reqs.len(), ops.len());
        let n = reqs.len();
        {
            let mut inflight = self.inflight.n.lock();
            while *inflight + n > MAX_ASYNC.max(n) && !self.dead.load(Relaxed) {
                self.inflight.cv.wait(&mut inflight);
            }
            *inflight += n;
        }
        let not_sent = |rpc: &Rpc, ops: Vec<AsyncOp>, tags: &[u16]| {
            for t in tags {
                rpc.put_tag(*t);
            }
            for op in ops {
                op.disarm();
            }
            for _ in 0..n {
                rpc.change_finished();
            }
            Err(Errno::ENOTCONN)
        };
        if self.dead.load(Relaxed) {
            return not_sent(self, ops, &[]);
        }
        let mut tags = Vec::with_capacity(n);
        for _ in 0..n {
            match self.take_tag() {
                Some(t) => tags.push(t),
                None => return not_sent(self, ops, &tags),
            }
        }
        let mut out = Vec::with_capacity(64 * n);
        for ((req, op), &t) in reqs.iter().zip(ops).zip(&tags) {
            *self.changes[t as usize].lock() = Some(Pending::Change(op));
            req.encode(t, &mut out);
            self.counters.rpcs[req.msg_type() as usize].fetch_add(1, Relaxed);
        }
        self.counters
            .bytes_sent
            .fetch_add(out.len() as u64, Relaxed);
        let w = self.writer.lock().write_all(&out);
        if w.is_err() {
            self.dead.store(true, Relaxed);
            // What the reader, seeing the death, has not reported yet is
            // reported by the caller's error; if it has reported all,
            // the outcome went where it belongs and the caller must not
            // hear it twice.
            let mut left = 0;
            for t in &tags {
                if let Some(Pending::Change(op)) = self.changes[*t as usize].lock().take() {
                    op.disarm();
                    left += 1;
                }
            }
            for _ in 0..left {
                self.change_finished();
            }
            if left == 0 {
                return Ok(());
            }
            return Err(Errno::ENOTCONN);
        }
        Ok(())
    }

    /// Wait until no asynchronous change is in flight (their errors have
    /// all been handed to `on_error`). `ENOTCONN` if the connection died
    /// with changes unanswered: whether the server carried them out is
    /// unknown.
    pub fn drain(&self) -> Result<()> {
        let mut n = self.inflight.n.lock();
        while *n > 0 {
            if self.dead.load(Relaxed) {
                return Err(Errno::ENOTCONN);
            }
            self.inflight.cv.wait(&mut n);
        }
        Ok(())
    }

    /// The reply to asynchronous change `op`: its outcome goes to its
    /// `done`.
    fn change_done(&self, op: AsyncOp, frame: &[u8]) {
        let r = match Fcall::decode(frame) {
            Ok((_, Fcall::Rlerror { ecode })) => Err(Errno::from_wire(ecode)),
            Ok((_, Fcall::Rwrite { count })) if count < op.expect => Err(Errno::ENOSPC),
            Ok(_) => Ok(()),
            Err(_) => Err(Errno::EPROTO),
        };
        op.finish(r);
        self.change_finished();
    }

    fn change_finished(&self) {
        *self.inflight.n.lock() -= 1;
        self.inflight.cv.notify_all();
    }

    pub fn is_dead(&self) -> bool {
        self.dead.load(Relaxed)
    }

    pub fn shutdown(&self) {
        let _ = self.writer.lock().shutdown();
    }
}

impl Drop for Rpc {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn reader_loop(rpc: std::sync::Weak<Rpc>, stream: Stream, msize: u32) {
    // One read(2) per reply (or per batch of replies) rather than two.
    let mut stream = std::io::BufReader::with_capacity(16 * 1024, stream);
    let mut buf = Vec::new();
    loop {
        let ok = read_frame(&mut stream, &mut buf, msize);
        let Some(rpc) = rpc.upgrade() else { return };
        match ok {
            Ok(true) => {}
            Ok(false) | Err(_) => {
                rpc.dead.store(true, Relaxed);
                for s in &rpc.slots {
                    let _g = s.reply.lock();
                    s.cv.notify_all();
                }
                // And whoever waits for a free tag or for changes.
                {
                    let _g = rpc.free.lock();
                    rpc.free_cv.notify_all();
                }
                let _g = rpc.inflight.n.lock();
                rpc.inflight.cv.notify_all();
                drop(_g);
                // Whoever waits for a callback's reply or a change's
                // outcome learns it will never come.
                for c in &rpc.changes {
                    let p = c.lock().take();
                    match p {
                        Some(Pending::Then(i, then)) => then(i, None),
                        Some(Pending::Change(op)) => {
                            op.finish(Err(Errno::ENOTCONN));
                            rpc.change_finished();
                        }
                        None => {}
                    }
                }
                return;
            }
        }
        rpc.counters
            .bytes_received
            .fetch_add(buf.len() as u64, Relaxed);
        let Some((_, tag)) = walkfs_p9::peek_header(&buf) else {
            continue;
        };
        let t = tag as usize;
        if t >= TAGS {
            continue;
        }
        if rpc.orphan[t].swap(false, Relaxed) {
            rpc.put_tag(tag);
            continue;
        }
        let pending = rpc.changes[t].lock().take();
        match pending {
            Some(Pending::Change(op)) => {
                rpc.put_tag(tag);
                rpc.change_done(op, &buf);
                continue;
            }
            Some(Pending::Then(i, then)) => {
                rpc.put_tag(tag);
                then(i, Fcall::decode(&buf).ok().map(|(_, f)| f));
                continue;
            }
            None => {}
        }
        let slot = &rpc.slots[t];
        *slot.reply.lock() = Some(std::mem::take(&mut buf));
        slot.cv.notify_one();
    }
}
