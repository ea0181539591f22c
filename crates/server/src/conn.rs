//! One client connection: framing, fid resolution in arrival order, the
//! tag table (`Tflush`), the order of dependent requests (the strand),
//! limits, and replies.
//!
//! # Order (docs/9p-ordering.md)
//! A client may send a change and, without waiting for its reply, the
//! requests that depend on it (`Tunlinkat` of every entry, then the
//! directory's; `Twrite`, then `Tsetattr` of the times). The server
//! keeps a connection's order this way:
//! - every request that changes the file system
//!   ([`changes_state`](walkfs_p9::order::changes_state)), and every
//!   `Tlopen`, runs on the connection's *strand*: one at a time, in
//!   arrival order;
//! - a request of any kind that arrives while the strand has work joins
//!   it, so it sees every change sent before it;
//! - when the strand is idle, the others run as before: in parallel on
//!   the pool, or on the reader thread when cheap.
//!
//! The exception is I/O that may wait for another party for ever (open,
//! read or write of a fifo, socket or device): the strand hands it to the
//! pool when it reaches it, so one blocked fifo never stalls the
//! connection's later changes.

use std::collections::{HashMap, VecDeque};
use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::{Condvar, Mutex};
use walkfs_p9::{peek_header, read_frame, Fcall, Stream, MIN_MSIZE, NOFID, VERSION};
use walkfs_vfs::Errno;

use crate::fid::Fid;
use crate::handlers;
use crate::session::Session;
use crate::Server;

/// A request's place in the tag table.
#[derive(Default)]
struct TagState {
    /// A `Tflush` came before the request started: skip it, send no reply.
    cancelled: bool,
    /// Tags of the `Tflush`es waiting for this request's reply.
    flushes: Vec<u16>,
}

/// Where a connection's replies go.
enum Sink {
    Stream(Stream),
    /// Collected in memory: the fuzz target's single-threaded sessions.
    Memory(Vec<u8>),
}

pub(crate) struct Conn {
    /// What the handlers see (session.rs).
    session: Session,
    writer: Mutex<Sink>,
    /// Set once a reply could not be written (the peer stopped reading or
    /// went away): the connection is shut down and nothing more is sent.
    broken: AtomicBool,
    /// Set once nothing more can be sent (a broken connection, or a peer
    /// that went away while its requests are still being read).
    mute: AtomicBool,
    /// Bytes of request frames handed to the pool and not yet answered.
    /// The reader waits on `room` while this is over
    /// `Config::max_pending_bytes`, so a client that pipelines faster than
    /// the server answers is slowed by its own socket, not buffered here.
    pending: Mutex<usize>,
    room: Condvar,
    tags: Mutex<HashMap<u16, TagState>>,
    /// The change-notification subscription (see notify.rs).
    notify: Mutex<Option<crate::notify::Sub>>,
    /// Requests that must run in arrival order (see the module comment).
    strand: Mutex<VecDeque<Job>>,
    /// Invariant: true exactly while a [`Work::Strand`] for this
    /// connection is queued in the pool or being run (only that runner
    /// pops `strand`). Changed only with `strand` locked; read without
    /// it by the reader thread's peek for cheap requests.
    strand_busy: AtomicBool,
}

/// What the pool's workers run.
pub(crate) enum Work {
    /// One request, in parallel with the connection's others.
    Job(Job),
    /// A connection's strand, drained in order until empty.
    Strand(Arc<Conn>),
}

impl Work {
    pub(crate) fn run(self) {
        match self {
            Work::Job(j) => {
                j.run();
            }
            Work::Strand(c) => run_strand(&c),
        }
    }
}

/// Drain `conn`'s strand: each job in turn, so each sees the effects of
/// the ones before it.
fn run_strand(conn: &Arc<Conn>) {
    loop {
        let job = {
            let mut q = conn.strand.lock();
            match q.pop_front() {
                Some(j) => j,
                None => {
                    conn.strand_busy.store(false, Ordering::Release);
                    return;
                }
            }
        };
        if job.may_wait_for_ever() {
            conn.to_pool(job);
        } else {
            job.run();
        }
    }
}

/// A request handed to the pool, with the fids it names resolved when it
/// arrived.
pub(crate) struct Job {
    conn: Arc<Conn>,
    tag: u16,
    frame: Vec<u8>,
    /// Bytes this job counts in `Conn::pending` (0 when run inline).
    counted: usize,
    /// The fids the request names, in field order.
    fids: Vec<Arc<Fid>>,
    /// The fid the request makes, pending until it runs.
    newfid: Option<(u32, Arc<Fid>)>,
}

impl std::ops::Deref for Conn {
    type Target = Session;

    fn deref(&self) -> &Session {
        &self.session
    }
}

impl crate::notify::Peer for Conn {
    fn slot(&self) -> &Mutex<Option<crate::notify::Sub>> {
        &self.notify
    }

    fn send_msg(&self, tag: u16, f: Fcall<'_>) {
        Conn::send_msg(self, tag, f)
    }

    fn error(&self, tag: u16, e: Errno) {
        Conn::error(self, tag, e)
    }

    fn may_subscribe(&self, fid: u32, newfid: u32) -> bool {
        let fids = self.fids.lock();
        // The fid must be attached (authenticated); the new one free.
        fids.contains_key(&fid) && !fids.contains_key(&newfid) && newfid != NOFID
    }

    fn settle_reports(&self) {
        self.server.vfs.settle_reports();
    }

    fn coherent(&self) -> bool {
        self.server.vfs.is_coherent()
    }

    fn own_change(&self, c: &walkfs_vfs::Change) -> bool {
        self.session.is_own(c)
    }

    fn subscribed_now(&self) {
        self.session.own.start();
    }
}

impl Conn {
    fn new(server: Arc<Server>, sink: Sink, peer: String) -> Conn {
        Conn {
            session: Session::new(server, peer),
            writer: Mutex::new(sink),
            broken: AtomicBool::new(false),
            mute: AtomicBool::new(false),
            pending: Mutex::new(0),
            room: Condvar::new(),
            tags: Mutex::new(HashMap::new()),
            notify: Mutex::new(None),
            strand: Mutex::new(VecDeque::new()),
            strand_busy: AtomicBool::new(false),
        }
    }

    /// Hand `job` to the pool, to run in parallel with the others.
    fn to_pool(self: &Arc<Self>, job: Job) {
        if let Err(e) = self.server.pool.send(Work::Job(job)) {
            // The pool is gone (server shutting down): nothing will answer.
            tracing::error!("worker pool closed");
            if let Work::Job(job) = e.into_inner() {
                self.finish(job.tag, None);
                self.release(job.counted);
            }
        }
    }

    fn send(&self, out: &[u8]) {
        if self.mute.load(Ordering::Relaxed) {
            return;
        }
        let mut w = self.writer.lock();
        let s = match &mut *w {
            Sink::Memory(v) => {
                v.extend_from_slice(out);
                return;
            }
            Sink::Stream(s) => s,
        };
        if let Err(e) = s.write_all(out) {
            // A reply cut short breaks the framing: nothing more can be
            // sent on this connection.
            self.mute.store(true, Ordering::Relaxed);
            if matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) {
                // A peer that stopped reading: shutting the connection
                // down ends the reader too, so its fids and work go.
                self.broken.store(true, Ordering::Relaxed);
                self.server.stats.stalled.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    "{}: not reading its replies for {:?}: closing the connection",
                    self.peer,
                    self.server.cfg.reply_timeout
                );
                let _ = s.shutdown();
            } else {
                // A peer that went away (killed, crashed). What it sent
                // before going is still read and carried out: a client
                // with changes in flight (it did not wait for their
                // replies) loses none of them.
                tracing::debug!("{}: write: {e}", self.peer);
                let _ = s.shutdown_write();
            }
        }
    }

    /// Wait until a frame of `len` bytes may be handed on (always when
    /// nothing is pending, so one frame of any allowed size goes through).
    fn wait_for_room(&self, len: usize) {
        let max = self.server.cfg.max_pending_bytes;
        let mut p = self.pending.lock();
        while *p > 0 && *p + len > max {
            self.room.wait(&mut p);
        }
    }

    fn release(&self, n: usize) {
        if n > 0 {
            *self.pending.lock() -= n;
            self.room.notify_one();
        }
    }

    pub(crate) fn send_msg(&self, tag: u16, f: Fcall<'_>) {
        let mut out = Vec::with_capacity(64);
        f.encode(tag, &mut out);
        self.send(&out);
    }

    /// [`Conn::finish`] for several replies in one write (the delay line
    /// hands over every reply that came due at once).
    pub(crate) fn finish_all(&self, replies: &[(u16, Vec<u8>)]) {
        let mut tags = self.tags.lock();
        let mut out = Vec::with_capacity(replies.iter().map(|r| r.1.len()).sum());
        for (tag, reply) in replies {
            let st = tags.remove(tag).unwrap_or_default();
            out.extend_from_slice(reply);
            for f in st.flushes {
                Fcall::Rflush {}.encode(f, &mut out);
            }
        }
        self.send(&out);
        drop(tags);
    }

    /// Send a request's reply (none if it was flushed before it ran), then
    /// the `Rflush`es waiting for it: the tag table's lock orders them
    /// against a `Tflush` read meanwhile.
    pub(crate) fn finish(&self, tag: u16, reply: Option<&[u8]>) {
        let mut tags = self.tags.lock();
        let st = tags.remove(&tag).unwrap_or_default();
        if let Some(r) = reply {
            self.send(r);
        }
        for f in st.flushes {
            self.send_msg(f, Fcall::Rflush {});
        }
        drop(tags);
    }

    pub(crate) fn error(&self, tag: u16, e: Errno) {
        self.server.stats.errors.fetch_add(1, Ordering::Relaxed);
        self.send_msg(tag, Fcall::Rlerror { ecode: e.0 as u32 });
    }
}

/// The reader's buffer: a metadata frame is far smaller; a big Twrite
/// bypasses it (BufReader reads straight into the frame when empty).
const READ_BUF: usize = 16 * 1024;

/// Serve one connection until the peer goes away or breaks the framing.
pub(crate) fn run(server: Arc<Server>, stream: Stream) {
    let peer = stream.peer();
    if let Err(e) = stream.set_write_timeout(Some(server.cfg.reply_timeout)) {
        tracing::warn!("{peer}: {e}");
        return;
    }
    // Buffered: one read(2) brings in a frame's size and body (and, from a
    // pipelining client, the frames after it).
    let rd = match stream.try_clone() {
        Ok(r) => std::io::BufReader::with_capacity(READ_BUF, r),
        Err(e) => {
            tracing::warn!("{peer}: {e}");
            return;
        }
    };
    let conn = Arc::new(Conn::new(server, Sink::Stream(stream), peer.clone()));
    let me: std::sync::Weak<dyn crate::notify::Peer> = Arc::downgrade(&conn) as _;
    let _ = conn.session.me.set(me);
    tracing::debug!("{peer}: connected");
    serve_frames(&conn, rd);
    if let Sink::Stream(s) = &*conn.writer.lock() {
        let _ = s.shutdown();
    }
    tracing::debug!("{peer}: gone");
}

/// Serve the requests in `input` on a connection whose replies are
/// collected in memory, and return the replies. Every request runs on
/// this thread (`Config::inline_all` is implied): the fuzz target's
/// session, deterministic and without threads.
pub(crate) fn serve_memory(server: Arc<Server>, input: &[u8]) -> Vec<u8> {
    let conn = Arc::new(Conn::new(server, Sink::Memory(Vec::new()), "fuzz".into()));
    serve_frames(&conn, input);
    let mut w = conn.writer.lock();
    match &mut *w {
        Sink::Memory(v) => std::mem::take(v),
        Sink::Stream(_) => Vec::new(),
    }
}

/// The reader's loop: frame, check, dispatch, until the input ends, the
/// framing breaks or a reply could not be sent.
fn serve_frames(conn: &Arc<Conn>, mut rd: impl Read) {
    let mut buf = Vec::new();
    while !conn.broken.load(Ordering::Relaxed) {
        // Before Tversion only a small frame is accepted.
        let max = conn.msize.load(Ordering::Relaxed);
        match read_frame(&mut rd, &mut buf, max) {
            Ok(true) => {}
            Ok(false) => break,
            Err(e) => {
                conn.server.stats.bad_frames.fetch_add(1, Ordering::Relaxed);
                tracing::info!("{}: closing: {e}", conn.peer);
                break;
            }
        }
        conn.server.stats.requests.fetch_add(1, Ordering::Relaxed);
        let frame = std::mem::take(&mut buf);
        if let Some(frame) = dispatch(conn, frame) {
            buf = frame;
        }
    }
    // Fids close when the last request holding them finishes.
    conn.fids.lock().clear();
}

/// Check one frame and hand it to the pool (or answer it here). Returns
/// the frame's buffer when it was not handed on, for reuse.
fn dispatch(conn: &Arc<Conn>, frame: Vec<u8>) -> Option<Vec<u8>> {
    let (tag, f) = match Fcall::decode(&frame) {
        Ok(x) => x,
        Err(e) => {
            conn.server.stats.bad_frames.fetch_add(1, Ordering::Relaxed);
            tracing::info!("{}: malformed message: {e}", conn.peer);
            // Every frame whose header could be read gets an answer, so
            // no client waits for ever on a tag: a type we do not know
            // (of either parity: 9P2000.L numbers its requests even, but a
            // client may not) is EOPNOTSUPP, a malformed body EINVAL.
            if let Some((_, tag)) = peek_header(&frame) {
                let e = match e {
                    walkfs_p9::DecodeError::UnknownType(_) => Errno::EOPNOTSUPP,
                    _ => Errno::EINVAL,
                };
                conn.error(tag, e);
            }
            return Some(frame);
        }
    };
    if !f.is_request() {
        conn.error(tag, Errno::EINVAL);
        return Some(frame);
    }
    match f {
        Fcall::Tversion { msize, version } => {
            version_reply(conn, tag, msize, version.0);
            return Some(frame);
        }
        Fcall::Tflush { oldtag } => {
            if crate::notify::flush(&**conn, oldtag) {
                conn.send_msg(tag, Fcall::Rflush {});
                return Some(frame);
            }
            let mut tags = conn.tags.lock();
            match tags.get_mut(&oldtag) {
                Some(t) => {
                    t.cancelled = true;
                    t.flushes.push(tag);
                }
                None => conn.send_msg(tag, Fcall::Rflush {}),
            }
            return Some(frame);
        }
        _ => {}
    }
    if conn.server.cfg.secret.is_some() && auth_message(conn, tag, &f) {
        return Some(frame);
    }
    if crate::notify::message(&conn.server.notify, conn, tag, &f) {
        return Some(frame);
    }
    // Resolve what the request names, in arrival order.
    let (named, makes) = fid_fields(&f);
    let removes = matches!(f, Fcall::Tclunk { .. } | Fcall::Tremove { .. });
    let mut fids = Vec::with_capacity(named.len());
    let mut newfid = None;
    {
        let mut table = conn.fids.lock();
        for &n in named.iter() {
            let got = if removes {
                table.remove(&n)
            } else {
                table.get(&n).cloned()
            };
            match got {
                Some(x) => fids.push(x),
                None => {
                    drop(table);
                    conn.error(tag, Errno::EBADF);
                    return Some(frame);
                }
            }
        }
        if let Some(n) = makes {
            let same = matches!(f, Fcall::Twalk { fid, newfid, .. } if fid == newfid);
            if !same {
                if n == NOFID || table.contains_key(&n) {
                    drop(table);
                    conn.error(tag, Errno::EBADF);
                    return Some(frame);
                }
                if table.len() >= conn.server.cfg.max_fids {
                    drop(table);
                    tracing::info!("{}: fid limit reached", conn.peer);
                    conn.error(tag, Errno::EMFILE);
                    return Some(frame);
                }
                let p = Fid::pending();
                table.insert(n, Arc::clone(&p));
                newfid = Some((n, p));
            }
        }
    }
    {
        let mut tags = conn.tags.lock();
        let refuse = if tags.contains_key(&tag) {
            Some(Errno::EINVAL)
        } else if tags.len() >= conn.server.cfg.max_inflight {
            Some(Errno::EAGAIN)
        } else {
            None
        };
        if let Some(e) = refuse {
            drop(tags);
            if let Some((n, p)) = &newfid {
                p.fail();
                conn.fids.lock().remove(n);
            }
            conn.error(tag, e);
            return Some(frame);
        }
        tags.insert(tag, TagState::default());
    }
    let cfg = &conn.server.cfg;
    // An open changes its fid: a read or write sent right behind it
    // (a client's open + first read in one round trip) must find it open,
    // so it runs on the strand too, and what follows joins it.
    // So does a lease's ask (lease.rs): the client makes files right
    // behind it, counting them as the lease's, so it must be granted
    // before they are made.
    let ordered = !cfg.inline_all
        && (walkfs_p9::order::changes_state(&f)
            || matches!(f, Fcall::Tlopen { .. })
            || matches!(f, Fcall::Txattrwalk { name, .. } if name.0 == walkfs_p9::lease::NAME));
    let inline = cfg.inline_all || answers_from_cache(&f);
    // A big write goes the usual way: reading the next request meanwhile
    // is worth a hand-off, and the pending bound holds the client back.
    // Every strand request is quick enough for the reader thread but
    // `Tfsync` (it waits for the disk) and `Txattrcreate`; a create never
    // opens an existing file (`O_EXCL`), so never a fifo, and an open, a
    // read or a write of one is checked below.
    let quick = ordered
        && !matches!(f, Fcall::Tfsync { .. } | Fcall::Txattrcreate { .. })
        && !(matches!(f, Fcall::Twrite { .. }) && frame.len() > READ_BUF);
    let mut job = Job {
        conn: Arc::clone(conn),
        tag,
        counted: 0,
        frame,
        fids,
        newfid,
    };
    // A quick change runs here too when the strand is idle: it is next in
    // the connection's order anyway, nothing read after it can overtake
    // it (this thread reads on only once it is done), and the hand-off to
    // a worker (two context switches) costs more than an unlink or a
    // chmod on a local file system. The strand's exception holds: I/O
    // that may wait for ever goes the usual way.
    let quick = quick && !job.may_wait_for_ever();
    // Cheap requests run here when nothing sent before them is still
    // changing the file system. The peek is racy only one way: this
    // thread alone marks the strand busy, so idle is idle (and a strand
    // that empties just now only costs this request the queue).
    if (inline || quick) && (cfg.inline_all || !conn.strand_busy.load(Ordering::Acquire)) {
        let mut frame = job.run();
        frame.clear();
        return Some(frame);
    }
    job.counted = job.frame.len();
    conn.wait_for_room(job.counted);
    let now = {
        let mut p = conn.pending.lock();
        *p += job.counted;
        *p
    };
    conn.server
        .stats
        .pending_peak
        .fetch_max(now as u64, Ordering::Relaxed);
    let start = {
        let mut q = conn.strand.lock();
        let running = conn.strand_busy.load(Ordering::Relaxed);
        if running || ordered {
            q.push_back(job);
            conn.strand_busy.store(true, Ordering::Release);
            !running
        } else {
            drop(q);
            conn.to_pool(job);
            return None;
        }
    };
    if start {
        if let Err(e) = conn.server.pool.send(Work::Strand(Arc::clone(conn))) {
            tracing::error!("worker pool closed");
            if let Work::Strand(c) = e.into_inner() {
                let mut q = c.strand.lock();
                for job in std::mem::take(&mut *q) {
                    c.finish(job.tag, None);
                    c.release(job.counted);
                }
                c.strand_busy.store(false, Ordering::Release);
            }
        }
    }
    None
}

/// The messages of 9P authentication, answered here when the server asks
/// for a secret: `Tauth` makes an auth fid, `Twrite` on it takes the
/// secret, `Tclunk` drops it. Auth fids live in their own table, so no
/// file request can use one. Returns whether `f` was one of these.
fn auth_message(conn: &Conn, tag: u16, f: &Fcall<'_>) -> bool {
    use crate::auth::{MAX_AUTH_FIDS, MAX_SECRET};
    match *f {
        Fcall::Tauth { afid, .. } => {
            let mut a = conn.auth.lock();
            if afid == NOFID || a.contains_key(&afid) || conn.fids.lock().contains_key(&afid) {
                drop(a);
                conn.error(tag, Errno::EBADF);
            } else if a.len() >= MAX_AUTH_FIDS {
                drop(a);
                conn.error(tag, Errno::EMFILE);
            } else {
                a.insert(afid, Vec::new());
                drop(a);
                let aqid = walkfs_p9::Qid {
                    ty: walkfs_p9::QTAUTH,
                    version: 0,
                    path: u64::from(afid),
                };
                conn.send_msg(tag, Fcall::Rauth { aqid });
            }
            true
        }
        Fcall::Twrite {
            fid,
            data: walkfs_p9::Data(data),
            ..
        } => {
            let mut a = conn.auth.lock();
            let Some(buf) = a.get_mut(&fid) else {
                return false;
            };
            if buf.len() + data.len() > MAX_SECRET {
                drop(a);
                conn.error(tag, Errno::EFBIG);
            } else {
                buf.extend_from_slice(data);
                drop(a);
                conn.send_msg(
                    tag,
                    Fcall::Rwrite {
                        count: data.len() as u32,
                    },
                );
            }
            true
        }
        Fcall::Tclunk { fid } => {
            if conn.auth.lock().remove(&fid).is_none() {
                return false;
            }
            conn.send_msg(tag, Fcall::Rclunk {});
            true
        }
        _ => false,
    }
}

/// Requests the vfs answers from its caches without waiting on the disk
/// (or, when it does go to the backend, with one short metadata call):
/// these run on the connection's reader thread, which saves two thread
/// switches per request — most of a metadata round trip. Anything that
/// may move data or wait (read, write, readdir, open, create, fsync,
/// lock) goes to the pool, so one slow request never holds up the
/// connection's others. (The clunk of a fid after `Txattrcreate` sets
/// its attribute: one short metadata call too.) An injected reply delay
/// is served by the delay line (link.rs), never by the thread that
/// answered.
fn answers_from_cache(f: &Fcall<'_>) -> bool {
    matches!(
        f,
        Fcall::Twalk { .. }
            | Fcall::Tgetattr { .. }
            | Fcall::Tclunk { .. }
            | Fcall::Treadlink { .. }
            | Fcall::Tattach { .. }
            | Fcall::Tstatfs { .. }
    )
}

/// `(fids the request uses, fid it makes)`.
fn fid_fields(f: &Fcall<'_>) -> (fidlist::FidList, Option<u32>) {
    use fidlist::FidList;
    match *f {
        Fcall::Tattach { fid, .. } => (FidList::none(), Some(fid)),
        Fcall::Twalk { fid, newfid, .. } => (FidList::one(fid), Some(newfid)),
        Fcall::Txattrwalk { fid, newfid, .. } => (FidList::one(fid), Some(newfid)),
        Fcall::Tstatfs { fid }
        | Fcall::Tlopen { fid, .. }
        | Fcall::Tlcreate { fid, .. }
        | Fcall::Tlcreatei { fid, .. }
        | Fcall::Tsymlink { fid, .. }
        | Fcall::Tsymlinki { fid, .. }
        | Fcall::Treadlink { fid }
        | Fcall::Tgetattr { fid, .. }
        | Fcall::Tsetattr { fid, .. }
        | Fcall::Txattrcreate { fid, .. }
        | Fcall::Treaddir { fid, .. }
        | Fcall::Tfsync { fid, .. }
        | Fcall::Tlock { fid, .. }
        | Fcall::Tgetlock { fid, .. }
        | Fcall::Tread { fid, .. }
        | Fcall::Twrite { fid, .. }
        | Fcall::Tclunk { fid }
        | Fcall::Tremove { fid } => (FidList::one(fid), None),
        Fcall::Tmknod { dfid, .. }
        | Fcall::Tmkdir { dfid, .. }
        | Fcall::Tmknodi { dfid, .. }
        | Fcall::Tmkdiri { dfid, .. } => (FidList::one(dfid), None),
        Fcall::Trename { fid, dfid, .. } => (FidList::two(fid, dfid), None),
        Fcall::Tlink { dfid, fid, .. } => (FidList::two(dfid, fid), None),
        Fcall::Trenameat {
            olddirfid,
            newdirfid,
            ..
        } => (FidList::two(olddirfid, newdirfid), None),
        Fcall::Tunlinkat { dirfid, .. } => (FidList::one(dirfid), None),
        _ => (FidList::none(), None),
    }
}

/// Up to two fid numbers without allocating.
mod fidlist {
    pub struct FidList {
        n: usize,
        v: [u32; 2],
    }
    impl FidList {
        pub fn none() -> FidList {
            FidList { n: 0, v: [0; 2] }
        }
        pub fn one(a: u32) -> FidList {
            FidList { n: 1, v: [a, 0] }
        }
        pub fn two(a: u32, b: u32) -> FidList {
            FidList { n: 2, v: [a, b] }
        }
        pub fn len(&self) -> usize {
            self.n
        }
        pub fn iter(&self) -> std::slice::Iter<'_, u32> {
            self.v[..self.n].iter()
        }
    }
}

fn version_reply(conn: &Conn, tag: u16, msize: u32, version: &[u8]) {
    // A new session: everything of the old one is dropped.
    conn.fids.lock().clear();
    conn.auth.lock().clear();
    let max = conn.server.cfg.max_msize;
    if msize < MIN_MSIZE {
        conn.error(tag, Errno::EINVAL);
        return;
    }
    let ours = version.starts_with(VERSION);
    let m = msize.min(max);
    if ours {
        conn.msize.store(m, Ordering::Relaxed);
    }
    let v: &[u8] = if ours { VERSION } else { b"unknown" };
    conn.send_msg(
        tag,
        Fcall::Rversion {
            msize: m,
            version: walkfs_p9::Str(v),
        },
    );
}

impl Job {
    /// Is this I/O on a fifo, socket or device — an open, read or write
    /// that may wait for another party for ever? (The strand must not.)
    fn may_wait_for_ever(&self) -> bool {
        // Tlopen, Tread, Twrite.
        let io = matches!(peek_header(&self.frame), Some((12 | 116 | 118, _)));
        if !io {
            return false;
        }
        let Some(fid) = self.fids.first() else {
            return false;
        };
        match fid.get() {
            Ok(st) => match (&st.open, &st.node) {
                (Some(f), _) => f.statx(libc::STATX_TYPE),
                (None, Some(h)) => st.ctx.statx(h, b"", libc::AT_EMPTY_PATH, libc::STATX_TYPE),
                (None, None) => Err(Errno::EBADF),
            }
            .is_ok_and(|x| {
                let t = u32::from(x.stx_mode) & libc::S_IFMT;
                t != libc::S_IFREG && t != libc::S_IFDIR
            }),
            Err(_) => false,
        }
    }

    /// A request that made no fid after all: its pending newfid goes (if
    /// the table still holds this one, not a later fid of that number).
    fn abandon_newfid(&self) {
        if let Some((n, p)) = &self.newfid {
            p.fail();
            let mut t = self.conn.fids.lock();
            if t.get(n).is_some_and(|x| Arc::ptr_eq(x, p)) {
                t.remove(n);
            }
        }
    }

    /// Answer the request; gives back its frame buffer.
    pub(crate) fn run(self) -> Vec<u8> {
        let conn = Arc::clone(&self.conn);
        let counted = self.counted;
        let frame = self.answer();
        conn.release(counted);
        frame
    }

    fn answer(self) -> Vec<u8> {
        let conn = &self.conn;
        let cancelled = conn.tags.lock().get(&self.tag).is_some_and(|t| t.cancelled);
        if cancelled {
            self.abandon_newfid();
            conn.finish(self.tag, None);
            return self.frame;
        }
        let mut out = Vec::with_capacity(256);
        let r = match Fcall::decode(&self.frame) {
            Ok((_, f)) => handlers::handle(
                &conn.session,
                &f,
                &self.fids,
                self.newfid.as_ref().map(|x| &x.1),
                self.tag,
                &mut out,
            ),
            Err(_) => Err(Errno::EINVAL),
        };
        if let Err(e) = r {
            self.abandon_newfid();
            out.clear();
            conn.server.stats.errors.fetch_add(1, Ordering::Relaxed);
            Fcall::Rlerror { ecode: e.0 as u32 }.encode(self.tag, &mut out);
        }
        match &conn.server.link {
            Some(link) => link.send_later(Arc::clone(conn), self.tag, out),
            None => conn.finish(self.tag, Some(&out)),
        }
        self.frame
    }
}
