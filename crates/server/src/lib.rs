//! `walkfs serve`: a [`Vfs`] exported over 9P2000.L.
//!
//! The modules follow the request's way through the server:
//! - [`conn`]: one connection — a reader thread that frames and checks
//!   requests, resolves their fids in arrival order (so a client may send
//!   `Twalk` + `Tlopen` on the new fid back to back), keeps the tag table
//!   for `Tflush`, and hands work to the pool; replies go out under the
//!   connection's write lock.
//! - [`fid`]: what a fid stands for (a vfs descriptor in the connection's
//!   table, and the credentials it acts with).
//! - [`handlers`]: each message as vfs calls. A multi-name walk is one
//!   vfs walk; confinement is the vfs's: its root is the exported
//!   directory and no path or symlink resolves above it.
//! - [`users`]: attach names to credentials.
//! - [`auth`]: the shared secret a connection must show before attaching.
//! - [`notify`]: the change-notification extension (`cache=coherent`
//!   clients).
//! - [`sandbox`]: the server process confined to the export.
//!
//! Threads: one reader per connection, a shared pool of workers for the
//! requests (many in flight per connection, none per request).

/// Default bound on the server's own vfs cache: it is a second cache
/// behind every client's (a miss costs one host lookup, a few µs, against
/// the round trip the client already paid), so its memory stays bounded
/// whatever the export's size. `-o max_dentries=N` overrides it.
pub const SERVE_DENTRIES: u32 = 131_072;

pub mod auth;
pub mod conn;
pub mod fid;
#[doc(hidden)]
pub mod fuzz;
mod handlers;
pub mod inos;
pub mod inostate;
pub mod lease;
mod link;
pub mod notify;
mod own;
pub mod sandbox;
pub mod seccomp;
mod session;
pub mod users;

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender};
use walkfs_p9::{Listener, Stream, IOHDRSZ};
use walkfs_vfs::Vfs;

/// Server limits and behaviour.
#[derive(Clone, Debug)]
pub struct Config {
    /// Refuse every change (`EROFS`).
    pub read_only: bool,
    /// Largest `msize` granted; a client asking more gets this.
    pub max_msize: u32,
    /// Fids one connection may hold (`EMFILE` beyond).
    pub max_fids: usize,
    /// Requests one connection may have in flight (`EAGAIN` beyond).
    pub max_inflight: usize,
    /// Worker threads of the pool.
    pub threads: usize,
    /// Hold every reply this long (a stand-in for a slow link in tests
    /// and benchmarks).
    pub reply_delay: Duration,
    /// Attach only with this secret (see [`auth`]).
    pub secret: Option<auth::Secret>,
    /// Request bytes one connection may have waiting in the pool; its
    /// reader stops reading beyond (the client is slowed, not refused).
    pub max_pending_bytes: usize,
    /// A connection whose peer takes no reply bytes for this long is
    /// closed, so a client that stops reading holds no worker longer.
    pub reply_timeout: Duration,
    /// Act on every attached user's behalf with root's capabilities,
    /// trusting the client to have checked permissions (a Linux 9p mount
    /// with `access=client` does, with the caller's full group list).
    /// New files still belong to the attached uid and the gid sent.
    pub trust_client_permissions: bool,
    /// Run every request on the connection's reader thread (no pool):
    /// deterministic sessions for the fuzz target.
    #[doc(hidden)]
    pub inline_all: bool,
    /// After a restart of a server that granted locks (its state
    /// directory says so), only reclaims are granted for this long: the
    /// clients that held locks get them back before anyone else can take
    /// them (others are answered `GRACE`, and wait).
    pub lock_grace: Duration,
}

impl Default for Config {
    fn default() -> Config {
        let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
        Config {
            read_only: false,
            max_msize: 1024 * 1024 + IOHDRSZ,
            max_fids: 16384,
            max_inflight: 256,
            threads: (2 * cpus).max(4),
            reply_delay: Duration::ZERO,
            secret: None,
            lock_grace: Duration::from_secs(5),
            max_pending_bytes: 16 << 20,
            reply_timeout: Duration::from_secs(30),
            trust_client_permissions: false,
            inline_all: false,
        }
    }
}

/// Server-wide counters.
#[derive(Default, Debug)]
pub struct Stats {
    pub connections: AtomicU64,
    pub requests: AtomicU64,
    pub errors: AtomicU64,
    pub bad_frames: AtomicU64,
    /// The most request bytes any one connection had waiting for the pool.
    pub pending_peak: AtomicU64,
    /// Connections closed because their client stopped taking replies.
    pub stalled: AtomicU64,
}

/// A 9P server over one vfs.
pub struct Server {
    pub(crate) vfs: Vfs,
    pub(crate) cfg: Config,
    pub(crate) pool: Sender<conn::Work>,
    pub(crate) notify: Arc<notify::Hub>,
    /// The injected reply delay, when there is one (link.rs).
    pub(crate) link: Option<Arc<link::Link>>,
    /// The inode numbers clients see, and the grants (inos.rs).
    pub(crate) inos: Arc<inos::Inos>,
    /// Leases on directories, and the host guard behind them (lease.rs).
    pub(crate) leases: Arc<lease::Leases>,
    /// Until when only lock reclaims are granted (`Config::lock_grace`).
    pub(crate) grace_until: Option<std::time::Instant>,
    pub stats: Stats,
}

impl Server {
    /// Start the worker pool. Connections come with [`Server::serve`] or
    /// [`Server::serve_stream`].
    pub fn new(vfs: Vfs, cfg: Config) -> Arc<Server> {
        Server::with_inos(vfs, cfg, inos::Inos::default())
    }

    /// [`Server::new`] with the inode numbers `inos` (kept in a state
    /// directory: [`inos::Inos::with_state`]).
    pub fn with_inos(vfs: Vfs, cfg: Config, inos: inos::Inos) -> Arc<Server> {
        let (tx, rx) = crossbeam_channel::unbounded::<conn::Work>();
        let threads = if cfg.inline_all {
            0
        } else {
            cfg.threads.max(1)
        };
        // Changes the vfs sees (on the host, by any client) go to every
        // subscribed client once the server's own cache has dropped them.
        let inos = Arc::new(inos);
        let hub = Arc::new(notify::Hub::new(Arc::clone(&inos)));
        vfs.add_change_listener(hub.clone());
        let link = (!cfg.reply_delay.is_zero()).then(|| link::Link::start(cfg.reply_delay));
        let grace_until = (inos.had_locks() && !cfg.lock_grace.is_zero()).then(|| {
            tracing::info!(
                "the previous server granted locks: only reclaims for {:?}",
                cfg.lock_grace
            );
            std::time::Instant::now() + cfg.lock_grace
        });
        let server = Arc::new(Server {
            vfs,
            cfg,
            grace_until,
            link,
            pool: tx,
            notify: hub,
            inos,
            leases: lease::Leases::new(lease::take_host_guard()),
            stats: Stats::default(),
        });
        for i in 0..threads {
            let rx: Receiver<conn::Work> = rx.clone();
            // Workers hold no reference to the server: they end when the
            // last sender (the server) is gone.
            let r = std::thread::Builder::new()
                .name(format!("9p-worker-{i}"))
                .spawn(move || {
                    for job in rx {
                        job.run();
                    }
                });
            if let Err(e) = r {
                tracing::error!("cannot start worker {i}: {e}");
            }
        }
        server
    }

    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// Files that show a number granted to the client that made them
    /// (docs/inode-grants.md), not their host inode number.
    pub fn granted_files(&self) -> usize {
        self.inos.bound()
    }

    /// Accept connections forever.
    pub fn serve(self: &Arc<Self>, listener: Listener) -> io::Result<()> {
        loop {
            match listener.accept() {
                Ok(s) => self.serve_stream(s),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    // Out of descriptors and the like: keep serving the
                    // connections we have, try again shortly.
                    tracing::warn!("accept: {e}");
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
        }
    }

    /// Serve one connected stream on a thread of its own.
    pub fn serve_stream(self: &Arc<Self>, s: Stream) {
        self.stats.connections.fetch_add(1, Ordering::Relaxed);
        let server = Arc::clone(self);
        let r = std::thread::Builder::new()
            .name("9p-conn".into())
            .spawn(move || conn::run(server, s));
        if let Err(e) = r {
            tracing::error!("cannot start a connection thread: {e}");
        }
    }
}
