//! A FUSE session: the INIT handshake, the request loops and the
//! notifications, for any [`Filesystem`].
//!
//! Two transports:
//! - **`/dev/fuse`**: threads reading requests and writing replies, as
//!   libfuse's classic loop does. All share the kernel's one input
//!   queue: a request may wake any of them, on any CPU.
//! - **FUSE over io_uring** (kernel 6.14+, the `fuse` module's
//!   `enable_uring` parameter set): the kernel keeps one queue per CPU
//!   and hands a request to the queue of the CPU that made it. Each
//!   queue is served by threads pinned to that CPU, each with one ring
//!   entry: a request arrives as the completion of the thread's previous
//!   reply (one system call per request), and a request answered from
//!   memory never leaves the CPU it was made on. With several threads
//!   per queue, a request that waits (on a remote server) holds one
//!   entry; the next goes to another.
//!
//! `/dev/fuse` stays open under io_uring: INIT, forgets and interrupts
//! always arrive there, and requests do until every queue has its ring
//! entries. One thread serves it then.
//!
//! The session ends when the kernel says the mount is gone (`ENODEV`
//! from `/dev/fuse`, cancelled ring entries); [`Filesystem::destroy`]
//! runs once, after the last request.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use crate::abi::{self, init, op, Pod};
use crate::reply::Reply;
use crate::request::{op_header_size, split_body, Operation, Request};

/// What a file system served over FUSE answers.
pub trait Filesystem: Send + Sync + 'static {
    /// INIT: the capabilities (`abi::init` bits) wanted of those the
    /// kernel `offered`, and the kernel's read-ahead. The session adds
    /// its own (async reads, big writes, max pages, io_uring).
    fn init(&self, offered: u64) -> u64;

    /// Answer request `req`: its body written through `reply` (one
    /// body per request: each of [`Reply`]'s methods consumes it;
    /// dropped unused, an empty body), or an errno (the body, if any,
    /// is then dropped). For requests that take no reply
    /// (`Operation::no_reply`) the result is dropped.
    fn handle(&self, req: &Request, op: Operation<'_>, reply: Reply<'_>) -> Result<(), i32>;

    /// The session ended: no request comes any more.
    fn destroy(&self) {}
}

/// Which transport serves requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    /// io_uring where the kernel offers it, else `/dev/fuse`.
    Auto,
    /// `/dev/fuse` read and write only.
    Dev,
    /// io_uring; the mount fails where the kernel cannot.
    Uring,
}

impl std::str::FromStr for Transport {
    type Err = String;
    fn from_str(s: &str) -> Result<Transport, String> {
        match s {
            "auto" => Ok(Transport::Auto),
            "dev" => Ok(Transport::Dev),
            "uring" | "io_uring" => Ok(Transport::Uring),
            _ => Err(format!("transport {s:?}: auto, dev or uring")),
        }
    }
}

/// Where the kernel says whether it lets FUSE use io_uring.
pub const URING_PARAM: &str = "/sys/module/fuse/parameters/enable_uring";

/// Does the kernel let FUSE use io_uring (`enable_uring` set)?
pub fn uring_enabled() -> bool {
    std::fs::read_to_string(URING_PARAM).is_ok_and(|s| s.trim() == "Y")
}

/// How a session runs.
#[derive(Clone, Debug)]
pub struct Config {
    /// Threads: reading `/dev/fuse`, or in all over the io_uring
    /// queues (at least one per queue).
    pub threads: usize,
    pub transport: Transport,
    /// The largest WRITE (and READ) the kernel may send.
    pub max_write: u32,
    /// Background requests (read-ahead, write-back) the kernel may have
    /// in flight.
    pub max_background: u16,
    /// Test mode: answer INIT as if the kernel were this older one,
    /// offering only its flags and speaking its minor version (the real
    /// kernel then holds to what was agreed). `None`: the environment's
    /// [`AS_KERNEL_ENV`], if set, else the kernel as it is.
    pub as_kernel: Option<&'static abi::KernelAbi>,
}

/// The environment variable that names the kernel a session answers
/// INIT as ([`Config::as_kernel`]): `5.10`, `5.15`, `6.1` or `6.8`. It
/// reaches every mount a test starts, in process or not.
pub const AS_KERNEL_ENV: &str = "WALKFS_FUSE_AS_KERNEL";

/// The environment variable that forces the transport of every session
/// left on `auto` ([`Config::transport`]): `dev` or `uring`. The tests'
/// io_uring pass (scripts/test.sh) sets `uring`, so that a mount the
/// kernel would not serve over io_uring fails instead of quietly using
/// `/dev/fuse`.
pub const TRANSPORT_ENV: &str = "WALKFS_FUSE_TRANSPORT";

impl Default for Config {
    fn default() -> Config {
        Config {
            threads: 4,
            transport: Transport::Auto,
            max_write: 1 << 20,
            max_background: 64,
            as_kernel: None,
        }
    }
}

/// What a running session counts (for statistics).
#[derive(Default, Debug)]
pub struct SessionInfo {
    /// Requests that came over `/dev/fuse`.
    pub dev_requests: AtomicU64,
    /// Requests that came over io_uring.
    pub uring_requests: AtomicU64,
    /// io_uring queues registered (0: `/dev/fuse` only).
    pub uring_queues: AtomicUsize,
    /// What INIT agreed: the protocol's minor version and the flags.
    pub minor: AtomicU32,
    pub flags: AtomicU64,
}

/// Send notifications to the kernel (cache invalidations).
#[derive(Clone)]
pub struct Notifier {
    fd: Arc<OwnedFd>,
}

impl Notifier {
    /// Whether the kernel held what was invalidated (`false`: it had
    /// nothing there, `ENOENT`, which is no failure).
    fn send(&self, code: i32, parts: &[&[u8]]) -> io::Result<bool> {
        let body: usize = parts.iter().map(|p| p.len()).sum();
        let h = abi::OutHeader {
            len: (std::mem::size_of::<abi::OutHeader>() + body) as u32,
            error: code,
            unique: 0,
        };
        let mut iov = vec![iovec(h.as_bytes())];
        iov.extend(parts.iter().map(|p| iovec(p)));
        match writev(self.fd.as_raw_fd(), &iov) {
            Ok(()) => Ok(true),
            // The kernel does not hold what was invalidated (any more, or
            // yet: it makes an inode from a reply after the reply).
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Forget name `name` in directory `parent` (its entry, or its
    /// negative entry). `Ok(false)`: the kernel had none.
    pub fn inval_entry(&self, parent: u64, name: &[u8]) -> io::Result<bool> {
        let n = abi::NotifyInvalEntry {
            parent,
            namelen: name.len() as u32,
            flags: 0,
        };
        self.send(abi::notify::INVAL_ENTRY, &[n.as_bytes(), name, b"\0"])
    }

    /// Forget node `ino`'s attributes and its pages from `off` for `len`
    /// bytes (0: to the end; a negative `off`: attributes only).
    /// `Ok(false)`: the kernel has no such inode.
    pub fn inval_inode(&self, ino: u64, off: i64, len: i64) -> io::Result<bool> {
        let n = abi::NotifyInvalInode { ino, off, len };
        self.send(abi::notify::INVAL_INODE, &[n.as_bytes()])
    }
}

/// Register host files for passthrough (`init::PASSTHROUGH`): the
/// kernel then reads, writes and maps a file opened with
/// `fopen::PASSTHROUGH` and a backing id through the backing file, and
/// no READ or WRITE reaches the server.
#[derive(Clone)]
pub struct Backing {
    fd: Arc<OwnedFd>,
}

impl Backing {
    /// Register `file` (open for reading or writing: the kernel opens
    /// its own backing file on the same path with the opener's flags,
    /// with the credentials of this call) and return its id, for
    /// `fuse_open_out.backing_id`. The id holds the file until
    /// [`Backing::close`]; an open that named it holds its own.
    pub fn open(&self, file: RawFd) -> io::Result<i32> {
        let map = abi::BackingMap {
            fd: file,
            ..Default::default()
        };
        // SAFETY: the ioctl reads a fuse_backing_map of the size its
        // number encodes, from memory we own for the call's duration.
        let r = unsafe {
            libc::ioctl(
                self.fd.as_raw_fd(),
                abi::ioc::BACKING_OPEN as _,
                &map as *const abi::BackingMap,
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(r)
    }

    /// Drop backing id `id`. Files opened with it keep their backing
    /// file; later opens may not name it.
    pub fn close(&self, id: i32) -> io::Result<()> {
        let id = id as u32;
        // SAFETY: the ioctl reads a u32 from memory we own.
        let r = unsafe {
            libc::ioctl(
                self.fd.as_raw_fd(),
                abi::ioc::BACKING_CLOSE as _,
                &id as *const u32,
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

fn iovec(b: &[u8]) -> libc::iovec {
    libc::iovec {
        iov_base: b.as_ptr() as *mut _,
        iov_len: b.len(),
    }
}

fn writev(fd: RawFd, iov: &[libc::iovec]) -> io::Result<()> {
    // SAFETY: each iovec names a live buffer of its length.
    let n = unsafe { libc::writev(fd, iov.as_ptr(), iov.len() as i32) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// What the session's threads share.
struct Shared<F> {
    fs: F,
    fd: Arc<OwnedFd>,
    cfg: Config,
    info: Arc<SessionInfo>,
    /// INIT agreed on io_uring.
    uring: AtomicBool,
    /// Threads of the io_uring queues still running, and a signal when
    /// the count changes.
    ring_threads: Mutex<usize>,
    ring_done: Condvar,
    /// SETLKW requests waiting for their lock, and the spare `/dev/fuse`
    /// threads started to serve the queue meanwhile: while there are
    /// more spares than waiters, a thread that finished a request goes.
    lock_waiters: AtomicUsize,
    spares: AtomicUsize,
}

/// A FUSE session on a mounted `/dev/fuse` descriptor.
pub struct Session<F: Filesystem> {
    shared: Arc<Shared<F>>,
}

impl<F: Filesystem> Session<F> {
    pub fn new(fs: F, fd: OwnedFd, mut cfg: Config) -> Result<Session<F>, String> {
        if cfg.as_kernel.is_none() {
            if let Some(name) = std::env::var(AS_KERNEL_ENV).ok().filter(|n| !n.is_empty()) {
                cfg.as_kernel = Some(abi::KernelAbi::named(&name).ok_or_else(|| {
                    let known: Vec<_> = abi::KERNELS.iter().map(|k| k.name).collect();
                    format!(
                        "{AS_KERNEL_ENV}={name}: not a kernel whose FUSE offer is known \
                         (known: {})",
                        known.join(", ")
                    )
                })?);
            }
        }
        if cfg.transport == Transport::Auto {
            if let Some(t) = std::env::var(TRANSPORT_ENV).ok().filter(|t| !t.is_empty()) {
                cfg.transport = t.parse().map_err(|e| format!("{TRANSPORT_ENV}: {e}"))?;
            }
        }
        if cfg.transport == Transport::Uring && !uring_enabled() {
            return Err(format!(
                "FUSE over io_uring is off in this kernel: it needs Linux 6.14 or later \
                 and `echo Y > {URING_PARAM}` (as root)"
            ));
        }
        Ok(Session {
            shared: Arc::new(Shared {
                fs,
                fd: Arc::new(fd),
                cfg,
                info: Arc::default(),
                uring: AtomicBool::new(false),
                ring_threads: Mutex::new(0),
                ring_done: Condvar::new(),
                lock_waiters: AtomicUsize::new(0),
                spares: AtomicUsize::new(0),
            }),
        })
    }

    pub fn notifier(&self) -> Notifier {
        Notifier {
            fd: Arc::clone(&self.shared.fd),
        }
    }

    /// Backing files for passthrough, once INIT agreed on it.
    pub fn backing(&self) -> Backing {
        Backing {
            fd: Arc::clone(&self.shared.fd),
        }
    }

    pub fn info(&self) -> Arc<SessionInfo> {
        Arc::clone(&self.shared.info)
    }

    /// Serve until the mount goes away, then call the file system's
    /// `destroy`.
    pub fn run(self) -> io::Result<()> {
        let n = self.shared.cfg.threads.max(1);
        let threads: Vec<_> = (0..n)
            .map(|i| {
                let s = Arc::clone(&self.shared);
                std::thread::Builder::new()
                    .name(format!("fuse-dev-{i}"))
                    .spawn(move || dev_loop(&s, false))
            })
            .collect::<io::Result<_>>()?;
        let mut result = Ok(());
        for t in threads {
            match t.join() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => result = Err(e),
                Err(_) => result = Err(io::Error::other("a FUSE thread panicked")),
            }
        }
        // The rings' threads see their entries cancelled at the same
        // teardown; give them a moment, never for ever.
        let s = &self.shared;
        let left = s.ring_threads.lock().unwrap_or_else(|e| e.into_inner());
        let _ = s
            .ring_done
            .wait_timeout_while(left, Duration::from_secs(5), |n| *n > 0);
        s.fs.destroy();
        result
    }
}

impl<F: Filesystem> Shared<F> {
    /// Answer one request: the reply's error (0 or a negative errno),
    /// its body in `out`; `None`: no reply.
    fn answer(
        &self,
        h: &abi::InHeader,
        head: &[u8],
        tail: &[u8],
        out: &mut Vec<u8>,
    ) -> Option<i32> {
        out.clear();
        if h.opcode == op::INIT {
            return Some(self.init(head, out));
        }
        tracing::trace!(
            opcode = h.opcode,
            nodeid = h.nodeid,
            unique = h.unique,
            "request"
        );
        let req = Request {
            unique: h.unique,
            nodeid: h.nodeid,
            uid: h.uid,
            gid: h.gid,
            pid: h.pid,
        };
        let r = Operation::parse(h.opcode, head, tail)
            .and_then(|operation| self.fs.handle(&req, operation, Reply::new(out)));
        if Operation::no_reply(h.opcode) {
            return None;
        }
        Some(match r {
            Ok(()) => 0,
            Err(e) => {
                out.clear();
                -e
            }
        })
    }

    fn init(&self, head: &[u8], out: &mut Vec<u8>) -> i32 {
        // Older kernels send a shorter fuse_init_in: the rest is zero.
        let mut full = [0u8; std::mem::size_of::<abi::InitIn>()];
        let k = head.len().min(full.len());
        full[..k].copy_from_slice(&head[..k]);
        let Some(i) = abi::InitIn::read(&full) else {
            return -libc::EINVAL;
        };
        if i.major < 7 {
            return -libc::EPROTO;
        }
        let mut offered = u64::from(i.flags);
        if offered & init::INIT_EXT != 0 {
            offered |= u64::from(i.flags2) << 32;
        }
        // The test mode: only what the older kernel would have offered,
        // in its version of the protocol (INIT_EXT, and with it flags2,
        // goes for kernels before 5.17).
        let minor = match self.cfg.as_kernel {
            Some(k) => {
                offered &= k.flags;
                i.minor.min(k.minor)
            }
            None => i.minor,
        };
        let mut want = self.fs.init(offered)
            | init::ASYNC_READ
            | init::BIG_WRITES
            | init::MAX_PAGES
            | init::INIT_EXT;
        let uring_ok = self.cfg.transport != Transport::Dev && uring_enabled();
        if uring_ok {
            want |= init::OVER_IO_URING;
        }
        let flags = offered & want;
        let page = 4096;
        let max_pages = self.cfg.max_write.div_ceil(page).clamp(1, 256);
        let o = abi::InitOut {
            major: 7,
            minor: minor.min(42),
            max_readahead: i.max_readahead.min(self.cfg.max_write),
            flags: flags as u32,
            flags2: (flags >> 32) as u32,
            max_background: self.cfg.max_background,
            congestion_threshold: self.cfg.max_background * 3 / 4,
            max_write: max_pages * page,
            time_gran: 1,
            max_pages: max_pages as u16,
            // Backing files may sit on any file system that is not
            // itself stacked; this mount counts as one level, so
            // overlayfs can still stack on it.
            max_stack_depth: u32::from(flags & init::PASSTHROUGH != 0),
            ..Default::default()
        };
        if i.major > 7 {
            // The kernel asks again with our major version.
            out.extend_from_slice(&o.as_bytes()[..8]);
            return 0;
        }
        // Before 7.23 the reply was 24 bytes long.
        let len = if minor < 23 { 24 } else { o.as_bytes().len() };
        out.extend_from_slice(&o.as_bytes()[..len]);
        self.info.minor.store(o.minor, Relaxed);
        self.info.flags.store(flags, Relaxed);
        tracing::info!(
            kernel_minor = i.minor,
            minor = o.minor,
            flags = format_args!("{flags:#x}"),
            as_kernel = self.cfg.as_kernel.map(|k| k.name),
            "FUSE INIT agreed"
        );
        self.uring.store(flags & init::OVER_IO_URING != 0, Relaxed);
        if self.cfg.transport == Transport::Uring && flags & init::OVER_IO_URING == 0 {
            // Asked for by name: failing the mount says so, where serving
            // /dev/fuse would pass a test of the ring without using it.
            tracing::error!("the kernel did not offer FUSE over io_uring (transport=uring)");
            return -libc::EPROTO;
        }
        0
    }

    fn reply_dev(&self, unique: u64, error: i32, body: &[u8]) -> io::Result<()> {
        let h = abi::OutHeader {
            len: (std::mem::size_of::<abi::OutHeader>() + body.len()) as u32,
            error,
            unique,
        };
        writev(self.fd.as_raw_fd(), &[iovec(h.as_bytes()), iovec(body)])
    }
}

/// One `/dev/fuse` thread: read a request, answer it, write the reply.
fn dev_loop<F: Filesystem>(s: &Arc<Shared<F>>, spare: bool) -> io::Result<()> {
    let fd = s.fd.as_raw_fd();
    // A request is at most a header, an operation header and max_write
    // bytes of data; the kernel wants room for at least 8 KiB.
    let mut buf = vec![0u8; (s.cfg.max_write as usize + 4096).max(8192)];
    let mut out = Vec::with_capacity(64 * 1024);
    loop {
        // SAFETY: a buffer we own, of the length passed.
        let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        if n < 0 {
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                // Interrupted, or a request withdrawn before we read it.
                Some(libc::EINTR | libc::EAGAIN | libc::ENOENT) => continue,
                // Unmounted.
                Some(libc::ENODEV) => return Ok(()),
                _ => return Err(e),
            }
        }
        let msg = &buf[..n as usize];
        let Some(h) = abi::InHeader::read(msg) else {
            tracing::warn!("a FUSE request shorter than its header ({n} bytes)");
            continue;
        };
        s.info.dev_requests.fetch_add(1, Relaxed);
        let hsz = std::mem::size_of::<abi::InHeader>();
        // Extensions (none agreed) sit at the end.
        let end = (h.len as usize)
            .min(msg.len())
            .saturating_sub(usize::from(h.total_extlen) * 8)
            .max(hsz);
        let (head, tail) = split_body(h.opcode, &msg[hsz..end]);
        // A SETLKW may wait as long as another party holds the lock:
        // another thread serves the queue meanwhile, so that waiters
        // never hold every thread (the holder's own requests among
        // what they would block).
        let waits = h.opcode == op::SETLKW;
        if waits {
            start_spare(s);
        }
        let answered = s.answer(&h, head, tail, &mut out);
        if waits {
            s.lock_waiters.fetch_sub(1, Relaxed);
        }
        let Some(error) = answered else {
            continue;
        };
        match s.reply_dev(h.unique, error, &out) {
            Ok(()) => {}
            // The request was interrupted and the kernel gave up on it.
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
            Err(e) if e.raw_os_error() == Some(libc::ENODEV) => return Ok(()),
            Err(e) => tracing::warn!("FUSE reply to {}: {e}", h.opcode),
        }
        if h.opcode == op::INIT && s.uring.load(Relaxed) {
            start_rings(s);
        }
        if spare && spare_goes(s) {
            return Ok(());
        }
    }
}

/// A request that may wait long is about to run: count its waiter, and
/// start a spare thread unless one is there for it already.
fn start_spare<F: Filesystem>(s: &Arc<Shared<F>>) {
    let waiters = s.lock_waiters.fetch_add(1, Relaxed) + 1;
    if s.spares.load(Relaxed) >= waiters {
        return;
    }
    s.spares.fetch_add(1, Relaxed);
    let s2 = Arc::clone(s);
    let spawned = std::thread::Builder::new()
        .name("fuse-spare".into())
        .spawn(move || dev_loop(&s2, true));
    if let Err(e) = spawned {
        s.spares.fetch_sub(1, Relaxed);
        tracing::warn!("no spare FUSE thread for a waiting lock: {e}");
    }
}

/// Should this spare thread go, being one more than the waiters need?
fn spare_goes<F: Filesystem>(s: &Shared<F>) -> bool {
    let mut n = s.spares.load(Relaxed);
    while n > s.lock_waiters.load(Relaxed) {
        match s.spares.compare_exchange_weak(n, n - 1, Relaxed, Relaxed) {
            Ok(_) => return true,
            Err(now) => n = now,
        }
    }
    false
}

/// The CPUs the kernel makes queues for (all possible ones).
fn possible_cpus() -> usize {
    let parse = |s: &str| -> Option<usize> {
        s.trim()
            .split(',')
            .map(|r| r.rsplit('-').next()?.parse::<usize>().ok())
            .try_fold(0, |m, x| x.map(|x| m.max(x + 1)))
    };
    std::fs::read_to_string("/sys/devices/system/cpu/possible")
        .ok()
        .and_then(|s| parse(&s))
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// Start the io_uring queues' threads: `threads` spread over the
/// queues, at least one each.
fn start_rings<F: Filesystem>(s: &Arc<Shared<F>>) {
    let queues = possible_cpus();
    let per_queue = (s.cfg.threads / queues).max(1);
    s.info.uring_queues.store(queues, Relaxed);
    for qid in 0..queues {
        for k in 0..per_queue {
            let s2 = Arc::clone(s);
            *s.ring_threads.lock().unwrap_or_else(|e| e.into_inner()) += 1;
            let spawned = std::thread::Builder::new()
                .name(format!("fuse-q{qid}-{k}"))
                .spawn(move || {
                    if let Err(e) = ring_loop(&s2, qid as u16) {
                        tracing::warn!("FUSE io_uring queue {qid}: {e}");
                    }
                    let mut n = s2.ring_threads.lock().unwrap_or_else(|e| e.into_inner());
                    *n -= 1;
                    s2.ring_done.notify_all();
                });
            if let Err(e) = spawned {
                tracing::warn!("FUSE io_uring queue {qid}: {e}");
                *s.ring_threads.lock().unwrap_or_else(|e| e.into_inner()) -= 1;
            }
        }
    }
}

/// A ring entry's header buffer: the request (or reply) header, the
/// operation's own header, and the entry's bookkeeping
/// (fuse_uring_req_header).
const HEADER_SZ: usize =
    abi::URING_IN_OUT_SZ + abi::URING_OP_SZ + std::mem::size_of::<abi::UringEntInOut>();
const ENT_IN_OUT: usize = abi::URING_IN_OUT_SZ + abi::URING_OP_SZ;

/// An io_uring FUSE command (register, or commit a reply and fetch the
/// next request) for queue `qid`; `iov`: the entry's buffers, to
/// register.
fn uring_cmd(
    fd: RawFd,
    cmd: u32,
    qid: u16,
    commit_id: u64,
    iov: Option<&[libc::iovec; 2]>,
) -> io_uring::squeue::Entry128 {
    let req = abi::UringCmdReq {
        qid,
        commit_id,
        ..Default::default()
    };
    let mut data = [0u8; 80];
    data[..std::mem::size_of::<abi::UringCmdReq>()].copy_from_slice(req.as_bytes());
    let mut b = io_uring::opcode::UringCmd80::new(io_uring::types::Fd(fd), cmd).cmd(data);
    if let Some(iov) = iov {
        b = b.addr(Some(iov.as_ptr() as u64));
    }
    let e = b.build();
    if iov.is_none() {
        return e;
    }
    // The iovec count goes in the SQE's `len`, which the crate's builder
    // does not set: bytes 24..28 of the (first) 64-byte SQE.
    // SAFETY: Entry128 is the 128-byte SQE, plain data.
    let mut raw: [u8; 128] = unsafe { std::mem::transmute(e) };
    raw[24..28].copy_from_slice(&2u32.to_ne_bytes());
    // SAFETY: as above, back.
    unsafe { std::mem::transmute::<[u8; 128], io_uring::squeue::Entry128>(raw) }
}

/// One thread of io_uring queue `qid`, pinned to CPU `qid`, with one
/// ring entry, until the mount goes away.
fn ring_loop<F: Filesystem>(s: &Shared<F>, qid: u16) -> Result<(), String> {
    // SAFETY: a zeroed cpu_set_t is valid; CPU_SET writes inside it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(usize::from(qid), &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
    let fd = s.fd.as_raw_fd();
    let mut ring: io_uring::IoUring<io_uring::squeue::Entry128> = io_uring::IoUring::builder()
        .build(4)
        .map_err(|e| format!("io_uring: {e}"))?;
    // The kernel copies requests into these buffers and replies out of
    // them for as long as the entry is registered: they stay where they
    // are (boxed) until this function returns, after the kernel let go.
    let mut header = Box::new([0u8; HEADER_SZ]);
    let mut payload = vec![0u8; s.cfg.max_write as usize].into_boxed_slice();
    let iov = Box::new([
        libc::iovec {
            iov_base: header.as_mut_ptr().cast(),
            iov_len: HEADER_SZ,
        },
        libc::iovec {
            iov_base: payload.as_mut_ptr().cast(),
            iov_len: payload.len(),
        },
    ]);
    let mut out = Vec::with_capacity(64 * 1024);
    let mut sqe = uring_cmd(fd, abi::URING_CMD_REGISTER, qid, 0, Some(&iov));
    loop {
        // SAFETY: the buffers the command names live until we return,
        // and the kernel is done with them once the ring is torn down.
        unsafe { ring.submission().push(&sqe) }.map_err(|_| "ring full".to_string())?;
        let res = loop {
            match ring.submit_and_wait(1) {
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                Err(e) => return Err(format!("io_uring_enter: {e}")),
            }
            if let Some(c) = ring.completion().next() {
                break c.result();
            }
        };
        if res < 0 {
            return match -res {
                // The mount is gone.
                libc::ENOTCONN | libc::ENODEV | libc::ECANCELED | libc::ECONNABORTED => Ok(()),
                err => Err(format!(
                    "FUSE ring entry: {}",
                    io::Error::from_raw_os_error(err)
                )),
            };
        }
        s.info.uring_requests.fetch_add(1, Relaxed);
        let h = abi::InHeader::read(&header[..]).unwrap_or_default();
        let ent = abi::UringEntInOut::read(&header[ENT_IN_OUT..]).unwrap_or_default();
        let n = (ent.payload_sz as usize).min(payload.len());
        let head =
            &header[abi::URING_IN_OUT_SZ..][..op_header_size(h.opcode).min(abi::URING_OP_SZ)];
        let error = s.answer(&h, head, &payload[..n], &mut out).unwrap_or(0);
        // A reply longer than the payload buffer cannot be: the kernel
        // asks for at most max_write bytes.
        let len = out.len().min(payload.len());
        payload[..len].copy_from_slice(&out[..len]);
        let o = abi::OutHeader {
            len: (std::mem::size_of::<abi::OutHeader>() + len) as u32,
            error,
            unique: h.unique,
        };
        header[..std::mem::size_of::<abi::OutHeader>()].copy_from_slice(o.as_bytes());
        let back = abi::UringEntInOut {
            payload_sz: len as u32,
            ..ent
        };
        header[ENT_IN_OUT..].copy_from_slice(back.as_bytes());
        sqe = uring_cmd(
            fd,
            abi::URING_CMD_COMMIT_AND_FETCH,
            qid,
            ent.commit_id,
            None,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transports_parse_by_name() {
        assert_eq!("auto".parse(), Ok(Transport::Auto));
        assert_eq!("dev".parse(), Ok(Transport::Dev));
        assert_eq!("io_uring".parse(), Ok(Transport::Uring));
        assert!("pipe".parse::<Transport>().is_err());
    }
}
