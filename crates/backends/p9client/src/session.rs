//! Session setup and teardown (Linux's fs/9p/v9fs.c): authentication,
//! attach, the probe of what the server offers, the mount's construction
//! over a stream (with its reconnect), its public accessors, and the
//! drop that ends it.

use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
use std::sync::Arc;

use parking_lot::Mutex;
use walkfs_fsapi::{Errno, Result};
use walkfs_p9::{self as p9, Addr, Fcall, Str, IOHDRSZ, NOFID};

use crate::fid::Fids;
use crate::nodes::Nodes;
use crate::wire::err_of;
use crate::{lease, notify, recover, rpc, Config, P9Fs, Stats, ROOT_FID};

/// The auth fid, clunked once attached.
const AUTH_FID: u32 = u32::MAX - 1;

/// 9P authentication with a shared secret: `Tauth`, then the secret
/// written to the auth fid. A server that needs none answers `Tauth` with
/// an error; the attach then goes without.
fn authenticate(rpc: &rpc::Rpc, cfg: &Config, secret: &[u8]) -> Result<u32> {
    let r = rpc.call(
        Fcall::Tauth {
            afid: AUTH_FID,
            uname: Str(b""),
            aname: Str(cfg.aname.as_bytes()),
            n_uname: cfg.uid,
        },
        |r| match r {
            Fcall::Rauth { .. } => Ok(()),
            r => Err(err_of(&r)),
        },
    );
    if r.is_err() {
        return Ok(NOFID);
    }
    rpc.call(
        Fcall::Twrite {
            fid: AUTH_FID,
            offset: 0,
            data: p9::Data(secret),
        },
        |r| match r {
            Fcall::Rwrite { .. } => Ok(()),
            r => Err(err_of(&r)),
        },
    )?;
    Ok(AUTH_FID)
}

/// Authenticate if a secret is given, and attach `ROOT_FID`: the root's
/// qid path.
pub(crate) fn attach(rpc: &rpc::Rpc, cfg: &Config) -> Result<u64> {
    let afid = match &cfg.secret {
        Some(secret) => authenticate(rpc, cfg, secret)?,
        None => NOFID,
    };
    let attached = rpc.call(
        Fcall::Tattach {
            fid: ROOT_FID,
            afid,
            uname: Str(b""),
            aname: Str(cfg.aname.as_bytes()),
            n_uname: cfg.uid,
        },
        |r| match r {
            Fcall::Rattach { qid } => Ok(qid.path),
            r => Err(err_of(&r)),
        },
    );
    if afid != NOFID {
        rpc.send_forget(Fcall::Tclunk { fid: afid });
    }
    attached
}

/// What the server offers, asked once at attach in one round trip: does
/// it promise to run a connection's changes in order (p9::order), and
/// does it keep extended attributes (it lists the root's)?
fn probe(rpc: &rpc::Rpc) -> (bool, bool) {
    const ORDER_FID: u32 = u32::MAX - 3;
    const XATTR_FID: u32 = u32::MAX - 4;
    let ask = |newfid, name| Fcall::Txattrwalk {
        fid: ROOT_FID,
        newfid,
        name: Str(name),
    };
    let reqs = [ask(ORDER_FID, p9::order::NAME), ask(XATTR_FID, b"")];
    let mut got = [Err(Errno::EPROTO), Err(Errno::EPROTO)];
    let sent = rpc.call_many(&reqs, |i, r| {
        if let Some(g) = got.get_mut(i) {
            *g = match r {
                Fcall::Rxattrwalk { size } => Ok(size),
                r => Err(err_of(&r)),
            };
        }
    });
    if sent.is_err() {
        return (false, false);
    }
    for (fid, g) in [ORDER_FID, XATTR_FID].into_iter().zip(&got) {
        if g.is_ok() {
            rpc.send_forget(Fcall::Tclunk { fid });
        }
    }
    let ordered = got[0] == Ok(p9::order::VERSION);
    // Any other refusal (EACCES, ...) is about the root, not the
    // protocol: the attributes are there to be asked for.
    let xattrs = !matches!(
        got[1],
        Err(Errno::EOPNOTSUPP | Errno::ENOSYS | Errno::EINVAL | Errno::EPROTO)
    );
    (ordered, xattrs)
}

impl P9Fs {
    /// Connect to `addr` (`unix:PATH`, `tcp:HOST:PORT`, `vsock:CID:PORT`) and attach;
    /// with [`Config::reconnect`], dial `addr` again whenever the
    /// connection drops (recover.rs).
    pub fn connect(addr: &str, cfg: &Config) -> Result<P9Fs> {
        let a = Addr::parse(addr).ok_or(Errno::EINVAL)?;
        let stream = a.connect().map_err(Errno::from)?;
        let dial: recover::Dial = Arc::new(move || a.connect());
        P9Fs::on_stream_dialing(stream, cfg, (!cfg.reconnect.is_zero()).then_some(dial))
    }

    /// Attach over an already connected stream (a lost connection is
    /// final: there is nothing to dial).
    pub fn on_stream(stream: p9::Stream, cfg: &Config) -> Result<P9Fs> {
        P9Fs::on_stream_dialing(stream, cfg, None)
    }

    /// Attach over `stream`; with `dial`, reconnect through it when the
    /// connection drops.
    pub fn on_stream_dialing(
        stream: p9::Stream,
        cfg: &Config,
        dial: Option<recover::Dial>,
    ) -> Result<P9Fs> {
        let bound = dial.as_ref().map(|_| cfg.reconnect);
        let rpc = rpc::Rpc::start(stream, cfg.msize.max(p9::MIN_MSIZE), bound)?;
        let root_ino = attach(&rpc, cfg)?;
        let notify = if cfg.notify {
            notify::subscribe(&rpc)
        } else {
            None
        };
        let iounit = rpc.msize - IOHDRSZ;
        // Changes go without waiting only to a server that promises to
        // keep their order (diod runs a connection's requests at once).
        let (ordered, xattrs) = probe(&rpc);
        if !xattrs {
            tracing::info!("9p server keeps no extended attributes: none offered");
        }
        if !ordered {
            tracing::info!("9p server does not keep a connection's order: every change waits");
        }
        // Leases are recalled through notifications, and only a client
        // that sends changes without waiting has closes to spare.
        let leases = Arc::new(lease::Leases::new(ordered && notify.is_some()));
        let fs = P9Fs {
            grants: Mutex::new(None),
            leases,
            ordered,
            dirplus: std::sync::atomic::AtomicBool::new(true),
            unlinkat_ok: std::sync::atomic::AtomicBool::new(false),
            renameat_ok: std::sync::atomic::AtomicBool::new(false),
            xattrs,
            rpc,
            nodes: Arc::new(Mutex::new(Nodes::new(root_ino, ROOT_FID, cfg.node_fids))),
            root_ino,
            notify,
            fids: Arc::new(Fids {
                next: AtomicU32::new(ROOT_FID + 1),
                free: Mutex::new(Vec::new()),
            }),
            iounit,
            pipeline: std::sync::atomic::AtomicBool::new(true),
            attach_uid: cfg.uid,
            opens: Arc::default(),
            tickets: Arc::default(),
            sink: Arc::default(),
            notifier: Mutex::new(None),
            locks_held: Arc::default(),
            reconnects: Arc::default(),
        };
        // Nodes are made behind the caller only where changes are
        // (a server that keeps a connection's order).
        if fs.ordered {
            *fs.grants.lock() = fs.ask_grant().map(|g| (g.base, g.base + g.count));
        }
        if let Some(dial) = dial {
            let recovery = recover::Recovery {
                rpc: Arc::downgrade(&fs.rpc),
                dial,
                cfg: cfg.clone(),
                root_ino,
                nodes: Arc::clone(&fs.nodes),
                fids: Arc::clone(&fs.fids),
                opens: Arc::clone(&fs.opens),
                locks_held: Arc::clone(&fs.locks_held),
                flock_ext: fs.ordered,
                tickets: Arc::clone(&fs.tickets),
                notify: fs.notify.is_some(),
                leases: Arc::clone(&fs.leases),
                sink: Arc::clone(&fs.sink),
                count: Arc::clone(&fs.reconnects),
            };
            fs.rpc.on_lost(Arc::new(move || recovery.run()));
        }
        Ok(fs)
    }

    /// RPCs by type, bytes, time waiting for replies.
    pub fn stats(&self) -> Stats {
        self.rpc.counters.snapshot()
    }

    pub fn reset_stats(&self) {
        self.rpc.counters.reset()
    }

    /// The negotiated message size.
    pub fn msize(&self) -> u32 {
        self.rpc.msize
    }

    /// Reconnects done since the mount.
    pub fn reconnects(&self) -> u64 {
        self.reconnects.load(Relaxed)
    }

    pub(crate) fn simple(&self, req: Fcall<'_>) -> Result<()> {
        self.rpc.call(req, |_| Ok(()))
    }
}

impl Drop for P9Fs {
    /// The notification thread holds the connection while it waits for
    /// a change: end the connection for it — after the changes sent
    /// without waiting have been answered (whoever drops the file system
    /// without a `syncfs` still expects them on the server; `drain`
    /// returns at once on a dead connection).
    fn drop(&mut self) {
        let _ = self.rpc.drain();
        // Closed first: the end of the connection is no loss to recover.
        self.rpc.close();
        self.rpc.shutdown();
    }
}
