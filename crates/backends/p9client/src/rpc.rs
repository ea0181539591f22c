//! The wire side of the client: one connection, many requests in flight.
//!
//! Callers take a tag, write their request (or several back to back, one
//! write for a pipelined walk + open), and wait on the tag's slot; a
//! reader thread files each reply under its tag. Counters record RPCs by
//! type, bytes, and the time callers spent waiting for replies (seed 003's
//! I/O-wait accounting).
//!
//! A lost connection:
//! - without reconnecting ([`Rpc::start`] with no bound) is final: every
//!   waiting caller and every later call fails at once with `ENOTCONN`
//!   (what a FUSE mount whose daemon died gives), and nothing hangs;
//! - with a reconnect bound, is a pause. Callers wait (at most the
//!   bound); the client's recovery (recover.rs) dials again, and on the
//!   new connection rebuilds the fids, then [`Rpc::resume`] re-sends the
//!   changes sent without waiting that were not answered, in the order
//!   they were first sent, and opens the gate: each waiting call sends
//!   its requests again. A change answered once is never sent again; a
//!   change the server may have carried out before it died is sent again
//!   marked *replayed*, and its reply is read knowing that (an unlink
//!   that finds the name gone did its work the first time).
//!
//! Invariant a reader of `dead` relies on: while `dead` is set, only the
//! recovery thread writes to the connection; every other sender waits at
//! the gate ([`Rpc::wait_up`]).

use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

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
    Change(Change),
    Then(usize, Then),
}

/// Changes sent in one write: (order of sending, request frame). A
/// batch's requests depend on each other (a clone walk, then a create
/// on the clone): when any of them is unanswered at a reconnect, all are
/// sent again, the answered ones as *ghosts* whose replies are dropped
/// (a fid an answered walk made died with the connection).
type Batch = Vec<(u64, Vec<u8>)>;

/// An asynchronous change in flight.
struct Change {
    op: AsyncOp,
    /// The requests sent in one write with it, as sent (each with its
    /// place in the order of sending), and its index among them: kept
    /// only when the connection may be re-made, to send again.
    batch: Option<(Arc<Batch>, usize)>,
    /// Sent again after a reconnect: the server may have carried it out
    /// already.
    replayed: bool,
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
    /// The gate is shut: the connection is down, or being rebuilt (see
    /// the module's invariant).
    dead: AtomicBool,
    /// The present connection is broken (its reader saw the end, or a
    /// write failed): whoever waits on it for a reply stops waiting.
    broken: AtomicBool,
    /// Down for good: no reconnect, or it gave up.
    closed: AtomicBool,
    /// How long callers wait for a reconnect; `None`: never reconnect.
    reconnect: Option<Duration>,
    /// The connection's generation (a reader of an older one is ignored).
    epoch: AtomicU64,
    /// The gate: notified when the connection is up again or closed.
    gate: Mutex<()>,
    gate_cv: Condvar,
    /// The thread rebuilding the connection (it passes the gate).
    recovering: Mutex<Option<std::thread::ThreadId>>,
    /// Held (shared) by a sender from its look at `dead` until its
    /// changes are registered and written; the recovery takes it
    /// exclusively once ([`Rpc::barrier`]), after which every change
    /// registered is one it sees, and no other is registered until the
    /// gate opens.
    sending: parking_lot::RwLock<()>,
    /// Called (on a thread of its own) when a connection is lost and may
    /// be made again.
    on_lost: Mutex<Option<Arc<dyn Fn() + Send + Sync>>>,
    seq: AtomicU64,
    pub msize: u32,
    pub counters: Counters,
}

impl Change {
    /// The request as sent (when kept).
    fn frame(&self) -> Option<&[u8]> {
        self.batch.as_ref().map(|(b, i)| &b[*i].1[..])
    }
}

impl Rpc {
    /// Negotiate the version on `stream` and start the reply reader.
    /// With `reconnect`, a lost connection is a pause of at most that
    /// long (see the module doc).
    pub fn start(stream: Stream, msize: u32, reconnect: Option<Duration>) -> Result<Arc<Rpc>> {
        let (stream, msize) = negotiate(stream, msize)?;
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
            broken: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            reconnect,
            epoch: AtomicU64::new(0),
            gate: Mutex::new(()),
            gate_cv: Condvar::new(),
            recovering: Mutex::new(None),
            sending: parking_lot::RwLock::new(()),
            on_lost: Mutex::new(None),
            seq: AtomicU64::new(0),
            msize,
            counters: Counters::default(),
        });
        rpc.start_reader(reader, 0)?;
        Ok(rpc)
    }

    fn start_reader(self: &Arc<Self>, reader: Stream, epoch: u64) -> Result<()> {
        let r = Arc::downgrade(self);
        let msize = self.msize;
        std::thread::Builder::new()
            .name("9p-client-reader".into())
            .spawn(move || reader_loop(r, reader, msize, epoch))
            .map(drop)
            .map_err(Errno::from)
    }

    /// What recovers a lost connection (recover.rs).
    pub fn on_lost(&self, f: Arc<dyn Fn() + Send + Sync>) {
        *self.on_lost.lock() = Some(f);
    }

    /// The reconnect bound, if the client reconnects.
    pub fn reconnect(&self) -> Option<Duration> {
        self.reconnect
    }

    /// Use `stream` from now on (the recovery thread, which must call
    /// [`Rpc::resume`] or [`Rpc::close`] next): the version is
    /// negotiated again, and must give at least the msize agreed first.
    pub fn replace(self: &Arc<Self>, stream: Stream) -> Result<()> {
        let (stream, msize) = negotiate(stream, self.msize)?;
        if msize < self.msize {
            return Err(Errno::EPROTO);
        }
        let reader = stream.try_clone().map_err(Errno::from)?;
        *self.recovering.lock() = Some(std::thread::current().id());
        let epoch = {
            let mut w = self.writer.lock();
            *w = stream;
            let e = self.epoch.fetch_add(1, Relaxed) + 1;
            self.broken.store(false, Relaxed);
            e
        };
        self.start_reader(reader, epoch)
    }

    /// Wait until no sender is between its look at the gate and its
    /// write (see `sending`).
    pub fn barrier(&self) {
        drop(self.sending.write());
    }

    /// The batches of the unanswered changes: each batch once, with the
    /// indexes of its parts still unanswered.
    fn pending_batches(&self) -> Vec<(Arc<Batch>, Vec<usize>)> {
        let mut by: std::collections::HashMap<*const Batch, (Arc<Batch>, Vec<usize>)> =
            std::collections::HashMap::new();
        for c in &self.changes {
            if let Some(Pending::Change(ch)) = &*c.lock() {
                if let Some((b, i)) = &ch.batch {
                    by.entry(Arc::as_ptr(b))
                        .or_insert_with(|| (Arc::clone(b), Vec::new()))
                        .1
                        .push(*i);
                }
            }
        }
        by.into_values().collect()
    }

    /// The fids the unanswered changes' batches make (a walk's new fid):
    /// the recovery leaves them for the replay to make again.
    pub fn pending_newfids(&self) -> Vec<u32> {
        let mut out = Vec::new();
        for (b, _) in self.pending_batches() {
            for (_, f) in b.iter() {
                if let Ok((_, Fcall::Twalk { newfid, .. })) = Fcall::decode(f) {
                    out.push(newfid);
                }
            }
        }
        out
    }

    /// The connection is rebuilt: send the unanswered changes again, in
    /// the order first sent (with the answered parts of their batches,
    /// as ghosts: see [`Batch`]), then let every waiting caller through.
    pub fn resume(&self) -> Result<()> {
        for c in &self.changes {
            if let Some(Pending::Change(ch)) = &mut *c.lock() {
                ch.replayed = true;
            }
        }
        let mut again: Vec<(u64, Vec<u8>)> = Vec::new();
        let (mut live, mut ghosts) = (0, 0);
        for (b, unanswered) in self.pending_batches() {
            for (i, (seq, f)) in b.iter().enumerate() {
                if unanswered.contains(&i) {
                    live += 1;
                    again.push((*seq, f.clone()));
                    continue;
                }
                let Some(t) = self.take_tag() else {
                    return Err(Errno::ENOTCONN);
                };
                self.orphan[t as usize].store(true, Relaxed);
                let mut g = f.clone();
                // size[4] type[1] tag[2]
                if g.len() >= 7 {
                    g[5..7].copy_from_slice(&t.to_le_bytes());
                }
                ghosts += 1;
                again.push((*seq, g));
            }
        }
        again.sort_by_key(|(seq, _)| *seq);
        let mut out = Vec::new();
        for (_, f) in again {
            out.extend_from_slice(&f);
        }
        if !out.is_empty() && self.writer.lock().write_all(&out).is_err() {
            return Err(Errno::ENOTCONN);
        }
        if live > 0 {
            tracing::info!("9p: {live} unanswered changes sent again ({ghosts} answered parts of their batches with them)");
        }
        *self.recovering.lock() = None;
        let _g = self.gate.lock();
        self.dead.store(false, Relaxed);
        self.gate_cv.notify_all();
        Ok(())
    }

    /// Give up: the connection stays down, every waiting caller and
    /// unanswered change gets `ENOTCONN`.
    pub fn close(&self) {
        *self.recovering.lock() = None;
        {
            let _g = self.gate.lock();
            self.closed.store(true, Relaxed);
            self.dead.store(true, Relaxed);
            self.gate_cv.notify_all();
        }
        self.wake_all();
        for c in &self.changes {
            let p = c.lock().take();
            if let Some(Pending::Change(ch)) = p {
                ch.op.finish(Err(Errno::ENOTCONN));
                self.change_finished();
            }
        }
    }

    /// Is this thread the one rebuilding the connection?
    fn is_recovering(&self) -> bool {
        *self.recovering.lock() == Some(std::thread::current().id())
    }

    /// Wait until the connection is up (at most the reconnect bound);
    /// `ENOTCONN` if it is closed or stays down.
    pub(crate) fn wait_up(&self) -> Result<()> {
        if !self.dead.load(Relaxed) {
            return Ok(());
        }
        if self.closed.load(Relaxed) || self.reconnect.is_none() {
            return Err(Errno::ENOTCONN);
        }
        if self.is_recovering() {
            return Ok(());
        }
        let bound = self.reconnect.unwrap_or_default();
        let until = Instant::now() + bound;
        let mut g = self.gate.lock();
        while self.dead.load(Relaxed) && !self.closed.load(Relaxed) {
            if self.gate_cv.wait_until(&mut g, until).timed_out() {
                break;
            }
        }
        if self.dead.load(Relaxed) {
            return Err(Errno::ENOTCONN);
        }
        Ok(())
    }

    /// Everyone waiting on a slot, a tag or the changes in flight looks
    /// at `dead` again.
    fn wake_all(&self) {
        for s in &self.slots {
            let _g = s.reply.lock();
            s.cv.notify_all();
        }
        {
            let _g = self.free.lock();
            self.free_cv.notify_all();
        }
        let _g = self.inflight.n.lock();
        self.inflight.cv.notify_all();
    }

    /// The connection of `epoch` is lost (its reader saw the end, or a
    /// write failed). The first loss shuts the gate and starts the
    /// recovery; a loss while recovering only wakes the recovery's own
    /// waits (it dials again).
    fn lost(&self, epoch: u64) {
        if self.epoch.load(Relaxed) != epoch || self.broken.swap(true, Relaxed) {
            return;
        }
        let _ = self.writer.lock().shutdown();
        let was_dead = {
            let _g = self.gate.lock();
            self.dead.swap(true, Relaxed)
        };
        self.wake_all();
        if was_dead {
            return;
        }
        let keep = self.reconnect.is_some() && !self.closed.load(Relaxed);
        // Whoever waits for a callback's reply learns it will never come;
        // a change's outcome waits for the replay when there is one.
        for (t, c) in self.changes.iter().enumerate() {
            let mut g = c.lock();
            let p = match &*g {
                Some(Pending::Change(ch)) if keep && ch.batch.is_some() => continue,
                _ => g.take(),
            };
            drop(g);
            match p {
                Some(Pending::Then(i, then)) => {
                    then(i, None);
                    if keep {
                        self.put_tag(t as u16);
                    }
                }
                Some(Pending::Change(ch)) => {
                    ch.op.finish(Err(Errno::ENOTCONN));
                    self.change_finished();
                    if keep {
                        self.put_tag(t as u16);
                    }
                }
                None => {}
            }
        }
        if !keep {
            self.closed.store(true, Relaxed);
            self.wake_all();
            return;
        }
        // Clunks sent and never answered: their fids went with the
        // connection.
        for (t, o) in self.orphan.iter().enumerate() {
            if o.swap(false, Relaxed) {
                self.put_tag(t as u16);
            }
        }
        let recover = self.on_lost.lock().clone();
        match recover {
            Some(f) => {
                let spawned = std::thread::Builder::new()
                    .name("9p-reconnect".into())
                    .spawn(move || f());
                if spawned.is_err() {
                    self.close();
                }
            }
            None => self.close(),
        }
    }

    /// Write `out` to the connection; a failure loses it.
    /// Refused while the gate is shut (to all but the recovery): a
    /// sender that looked at the gate before the loss must not write on
    /// the next connection before its fids are rebuilt.
    fn write_out(&self, out: &[u8]) -> bool {
        let mut w = self.writer.lock();
        if self.dead.load(Relaxed) && !self.is_recovering() {
            return false;
        }
        let epoch = self.epoch.load(Relaxed);
        let ok = w.write_all(out).is_ok();
        drop(w);
        if !ok {
            self.lost(epoch);
        }
        ok
    }

    /// A free tag; `None` once the connection is closed (without a
    /// reconnect, tags held by requests whose replies will never come are
    /// never given back, so waiting for one would be forever).
    fn take_tag(&self) -> Option<u16> {
        let mut f = self.free.lock();
        loop {
            if let Some(t) = f.pop() {
                return Some(t);
            }
            if self.closed.load(Relaxed) || (self.dead.load(Relaxed) && self.reconnect.is_none()) {
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
    /// The connection lost before every reply came: once it is made
    /// again the requests are sent again (all of them: the replies that
    /// came are dropped), so a chain runs whole on one connection.
    pub fn call_many(
        &self,
        reqs: &[Fcall<'_>],
        mut each: impl FnMut(usize, Fcall<'_>),
    ) -> Result<()> {
        self.wait_up()?;
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
        let t0 = Instant::now();
        let frames = loop {
            self.counters
                .bytes_sent
                .fetch_add(out.len() as u64, Relaxed);
            let mut frames = Vec::with_capacity(tags.len());
            if self.write_out(&out) {
                for &t in &tags {
                    let slot = &self.slots[t as usize];
                    let mut g = slot.reply.lock();
                    let f = loop {
                        if let Some(f) = g.take() {
                            break Some(f);
                        }
                        if self.broken.load(Relaxed) {
                            break None;
                        }
                        slot.cv.wait(&mut g);
                    };
                    match f {
                        Some(f) => frames.push(f),
                        None => break,
                    }
                }
            }
            if frames.len() == tags.len() {
                break Ok(frames);
            }
            // Lost: the batch goes again on the next connection, and
            // whatever came for these tags on this one is dropped (once
            // the gate opens: the old reader files nothing after that).
            let up = if self.is_recovering() {
                Err(Errno::ENOTCONN)
            } else {
                self.wait_up()
            };
            for &t in &tags {
                self.slots[t as usize].reply.lock().take();
            }
            if let Err(e) = up {
                break Err(e);
            }
        };
        for &t in &tags {
            self.put_tag(t);
        }
        let frames = frames?;
        let mut result = Ok(());
        for (i, f) in frames.iter().enumerate() {
            match Fcall::decode(f) {
                Ok((_, msg)) => each(i, msg),
                Err(_) => result = Err(Errno::EPROTO),
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

    /// Send a request whose reply nobody needs (a clunk). Not sent while
    /// the connection is down: the fid went with it.
    pub fn send_forget(&self, req: Fcall<'_>) {
        if self.dead.load(Relaxed) && !self.is_recovering() {
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
        self.write_out(&out);
    }

    /// Send `reqs` back to back in one write and return at once; the
    /// reader hands each reply to `then` (see [`Then`]). For work a
    /// caller may use later (a directory read ahead), never for changes.
    pub fn send_then(&self, reqs: &[Fcall<'_>], then: Then) -> Result<()> {
        self.wait_up()?;
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
        let _sending = self.sending.read();
        if !self.write_out(&out) {
            // Not written, or written to a connection now lost: a
            // callback still registered hears it here (the loss may have
            // been seen before it was registered).
            for (i, t) in tags.into_iter().enumerate() {
                if let Some(Pending::Then(..)) = self.changes[t as usize].lock().take() {
                    then(i, None);
                    self.put_tag(t);
                }
            }
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
    /// sent (`ENOTCONN`: none, and no `done` is called). With a
    /// reconnect, a change sent is kept until answered: a loss of the
    /// connection sends it again on the next.
    pub fn send_async_many(&self, reqs: &[Fcall<'_>], ops: Vec<AsyncOp>) -> Result<()> {
        debug_assert_eq!(reqs.len(), ops.len());
        let n = reqs.len();
        let not_sent = |rpc: &Rpc, ops: Vec<AsyncOp>, tags: &[u16], counted: bool| {
            for t in tags {
                rpc.put_tag(*t);
            }
            for op in ops {
                op.disarm();
            }
            if counted {
                for _ in 0..n {
                    rpc.change_finished();
                }
            }
            Err(Errno::ENOTCONN)
        };
        if let Err(e) = self.wait_up() {
            for op in ops {
                op.disarm();
            }
            return Err(e);
        }
        {
            let mut inflight = self.inflight.n.lock();
            while *inflight + n > MAX_ASYNC.max(n) && !self.closed.load(Relaxed) {
                if self.dead.load(Relaxed) && self.reconnect.is_none() {
                    break;
                }
                self.inflight.cv.wait(&mut inflight);
            }
            *inflight += n;
        }
        if self.closed.load(Relaxed) || (self.dead.load(Relaxed) && self.reconnect.is_none()) {
            return not_sent(self, ops, &[], true);
        }
        let mut tags = Vec::with_capacity(n);
        for _ in 0..n {
            match self.take_tag() {
                Some(t) => tags.push(t),
                None => return not_sent(self, ops, &tags, true),
            }
        }
        let keep = self.reconnect.is_some();
        // Registered and written under `sending`, past a gate that is
        // open (or after the recovery's barrier: then shut, and the
        // changes wait, kept, for the replay).
        let mut sending = self.sending.read();
        while keep && self.dead.load(Relaxed) && !self.is_recovering() {
            drop(sending);
            if self.wait_up().is_err() {
                return not_sent(self, ops, &tags, true);
            }
            sending = self.sending.read();
        }
        let mut out = Vec::with_capacity(64 * n);
        let mut batch: Batch = Vec::with_capacity(if keep { n } else { 0 });
        for (req, &t) in reqs.iter().zip(&tags) {
            let at = out.len();
            req.encode(t, &mut out);
            let seq = self.seq.fetch_add(1, Relaxed);
            if keep {
                batch.push((seq, out[at..].to_vec()));
            }
            self.counters.rpcs[req.msg_type() as usize].fetch_add(1, Relaxed);
        }
        let batch = keep.then(|| Arc::new(batch));
        for (i, (op, &t)) in ops.into_iter().zip(&tags).enumerate() {
            *self.changes[t as usize].lock() = Some(Pending::Change(Change {
                op,
                batch: batch.as_ref().map(|b| (Arc::clone(b), i)),
                replayed: false,
            }));
        }
        self.counters
            .bytes_sent
            .fetch_add(out.len() as u64, Relaxed);
        let written = self.write_out(&out);
        drop(sending);
        if !written {
            if keep {
                // Kept, and sent again once the connection is back.
                return Ok(());
            }
            // What the reader, seeing the death, has not reported yet is
            // reported by the caller's error; if it has reported all,
            // the outcome went where it belongs and the caller must not
            // hear it twice.
            let mut left = 0;
            for t in &tags {
                if let Some(Pending::Change(ch)) = self.changes[*t as usize].lock().take() {
                    ch.op.disarm();
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
    /// for good with changes unanswered: whether the server carried them
    /// out is unknown.
    pub fn drain(&self) -> Result<()> {
        let mut n = self.inflight.n.lock();
        while *n > 0 {
            if self.closed.load(Relaxed) || (self.dead.load(Relaxed) && self.reconnect.is_none()) {
                return Err(Errno::ENOTCONN);
            }
            self.inflight
                .cv
                .wait_for(&mut n, Duration::from_millis(200));
        }
        Ok(())
    }

    /// The reply to asynchronous change `ch`: its outcome goes to its
    /// `done`. A replayed change may find its work done by its first
    /// sending: a removal whose name is gone, a link whose name exists,
    /// succeeded then.
    fn change_done(&self, ch: Change, frame: &[u8]) {
        let ty = ch.frame().and_then(|f| f.get(4).copied());
        let r = match Fcall::decode(frame) {
            Ok((_, Fcall::Rlerror { ecode })) => {
                let e = Errno::from_wire(ecode);
                match (ch.replayed, ty, e) {
                    (
                        true,
                        Some(walkfs_p9::msg::Tunlinkat | walkfs_p9::msg::Trenameat),
                        Errno::ENOENT,
                    )
                    | (true, Some(walkfs_p9::msg::Tlink), Errno::EEXIST) => {
                        tracing::debug!("9p: a replayed change had been carried out");
                        Ok(())
                    }
                    _ => Err(e),
                }
            }
            Ok((_, Fcall::Rwrite { count })) if count < ch.op.expect => Err(Errno::ENOSPC),
            Ok(_) => Ok(()),
            Err(_) => Err(Errno::EPROTO),
        };
        ch.op.finish(r);
        self.change_finished();
    }

    fn change_finished(&self) {
        *self.inflight.n.lock() -= 1;
        self.inflight.cv.notify_all();
    }

    /// Down (for now, or for good).
    pub fn is_dead(&self) -> bool {
        self.dead.load(Relaxed)
    }

    /// Down for good.
    pub fn is_closed(&self) -> bool {
        self.closed.load(Relaxed)
    }

    pub fn shutdown(&self) {
        let _ = self.writer.lock().shutdown();
    }
}
/// Negotiate the version on `stream`: the stream and the msize agreed.
fn negotiate(mut stream: Stream, msize: u32) -> Result<(Stream, u32)> {
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
    Ok((stream, msize))
}

impl Drop for Rpc {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn reader_loop(rpc: std::sync::Weak<Rpc>, stream: Stream, msize: u32, epoch: u64) {
    // One read(2) per reply (or per batch of replies) rather than two.
    let mut stream = std::io::BufReader::with_capacity(16 * 1024, stream);
    let mut buf = Vec::new();
    loop {
        let ok = read_frame(&mut stream, &mut buf, msize);
        let Some(rpc) = rpc.upgrade() else { return };
        if rpc.epoch.load(Relaxed) != epoch || rpc.broken.load(Relaxed) {
            // A connection lost, or replaced since: nothing more of it
            // counts (its callers were told to send again; a reply filed
            // now could land in a slot reused on the next connection).
            return;
        }
        match ok {
            Ok(true) => {}
            Ok(false) | Err(_) => {
                rpc.lost(epoch);
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
            Some(Pending::Change(ch)) => {
                rpc.put_tag(tag);
                rpc.change_done(ch, &buf);
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
