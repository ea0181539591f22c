//! A 9P2000.L client as a walkfs backend: the export of a 9P server (walkfs
//! serve, diod, ...) as a [`FileSystem`], so the vfs and its caches sit on
//! top of a remote tree.
//!
//! A node is a file the vfs holds, known by its qid path (so hard links
//! and repeated lookups share one node). Nodes do not pin fids: a bounded
//! set of recently used ones keep theirs and the rest are walked to again
//! by name when needed (see nodes.rs), so a tree of any size costs the
//! server a bounded number of fids per connection. Where a call
//! needs a chain of requests that name the same new fid (walk + getattr,
//! walk + open), the requests go out back to back in one write and cost
//! one round trip; a server must handle a fid's requests in order, as
//! `walkfs serve` does (it resolves fids in arrival order).

mod ahead;
mod lease;
mod nodes;
mod notify;
mod recover;
mod rpc;

use nodes::{Need, Nodes};

use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
use std::sync::Arc;

use parking_lot::Mutex;
use walkfs_fsapi::{
    Attr, Completion, Deferred, DirEntry, Done, Entry, Errno, FileHandle, FileSystem, FileType,
    Granted, Make, NodeId, OpenFlags, Owner, Result, SetAttr, StatFs, TimeSet, Timespec,
};
use walkfs_p9::inogrant::Grant;
use walkfs_p9::{self as p9, Addr, Fcall, Names, Str, IOHDRSZ, NOFID};

pub use rpc::{Counters, Stats};
/// The node table's use of fids (`walkfs stats`), as every backend
/// reports it.
pub use walkfs_fsapi::FidStats;

/// How to reach and attach.
#[derive(Clone, Debug)]
pub struct Config {
    /// Largest message size to negotiate.
    pub msize: u32,
    /// The user to attach as (`n_uname`).
    pub uid: u32,
    /// The export to attach to (servers that export one tree ignore it).
    pub aname: String,
    /// The secret to show with `Tauth` when the server asks for one.
    pub secret: Option<Vec<u8>>,
    /// Ask the server to report changes (the walkfs extension; see
    /// [`FileSystem::watch_changes`]).
    pub notify: bool,
    /// Fids kept for cached nodes beyond those in use (open files and
    /// calls in flight hold theirs as long as they need them).
    pub node_fids: usize,
    /// When the connection drops, reconnect (to a restarted server too)
    /// and carry on; programs wait at most this long, then get
    /// `ENOTCONN`. Zero: fail at once. Only for a client that knows how
    /// to dial again ([`P9Fs::connect`]).
    pub reconnect: std::time::Duration,
}

/// Default of [`Config::reconnect`]: long enough for a server to be
/// restarted (an upgrade, a crash and its supervisor), short enough that
/// a server gone for good does not hang programs for long.
pub const DEFAULT_RECONNECT: std::time::Duration = std::time::Duration::from_secs(60);

impl Default for Config {
    fn default() -> Config {
        Config {
            msize: 512 * 1024,
            // SAFETY: geteuid cannot fail.
            uid: unsafe { libc::geteuid() },
            aname: String::new(),
            secret: None,
            notify: false,
            node_fids: DEFAULT_NODE_FIDS,
            reconnect: DEFAULT_RECONNECT,
        }
    }
}

pub(crate) const ROOT_FID: u32 = 0;
/// Default of [`Config::node_fids`]: well under `walkfs serve`'s default
/// per-connection limit (16,384), leaving room for open files.
pub const DEFAULT_NODE_FIDS: usize = 1024;
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

/// Does the server promise to run a connection's changes in order
/// (p9::order)? Asked once, at attach.
fn keeps_order(rpc: &rpc::Rpc) -> bool {
    const PROBE_FID: u32 = u32::MAX - 3;
    let r = rpc.call(
        Fcall::Txattrwalk {
            fid: ROOT_FID,
            newfid: PROBE_FID,
            name: Str(p9::order::NAME),
        },
        |r| match r {
            Fcall::Rxattrwalk { size } => Ok(size),
            r => Err(err_of(&r)),
        },
    );
    if r.is_ok() {
        rpc.send_forget(Fcall::Tclunk { fid: PROBE_FID });
    }
    r == Ok(p9::order::VERSION)
}

/// A 9P client mount.
pub struct P9Fs {
    rpc: Arc<rpc::Rpc>,
    nodes: Arc<Mutex<Nodes>>,
    /// The qid path of the root: its node id.
    root_ino: u64,
    /// The server agreed to report changes: its protocol version.
    notify: Option<u64>,
    fids: Arc<Fids>,
    iounit: u32,
    /// The server lists directories with attributes (p9::dirplus); off
    /// for good once it says it cannot.
    dirplus: std::sync::atomic::AtomicBool,
    /// Send dependent requests back to back. Turned off for good the
    /// first time the server shows it does not keep a fid's requests in
    /// order (diod runs them concurrently and answers "invalid fid").
    pipeline: std::sync::atomic::AtomicBool,
    /// Who we attached as: new files are theirs on the server, so one
    /// made for someone else is handed over (when we are root there).
    attach_uid: u32,
    /// The server runs a connection's changes in arrival order
    /// (p9::order): what is submitted may go without waiting
    /// ([`Completion::Ordered`]).
    ordered: bool,
    /// The server has answered a `Tunlinkat` (diod 1.0 does not know it,
    /// and an asynchronous one could not fall back).
    unlinkat_ok: std::sync::atomic::AtomicBool,
    /// The same for `Trenameat`.
    renameat_ok: std::sync::atomic::AtomicBool,
    /// Inode numbers the server granted and this client has not spent
    /// (p9::inogrant): `next..end`. `None` for a server that grants none
    /// (any but `walkfs serve`, or one that stopped): then every node is
    /// made with a round trip.
    grants: Mutex<Option<(u64, u64)>>,
    /// Leases on directories this client makes files in (lease.rs).
    leases: Arc<lease::Leases>,
    /// Open files, to open again after a reconnect (recover.rs).
    opens: recover::Opens,
    /// The last grants received, with their tickets (recover.rs).
    tickets: Arc<Mutex<Vec<Grant>>>,
    /// Where changes go (set by `watch_changes`): told after a reconnect
    /// that anything may have changed.
    sink: Arc<Mutex<Option<Arc<dyn walkfs_fsapi::ChangeSink>>>>,
    /// Reconnects done.
    reconnects: Arc<std::sync::atomic::AtomicU64>,
}

/// Fid numbers: handed out, and given back for reuse.
pub(crate) struct Fids {
    next: AtomicU32,
    free: Mutex<Vec<u32>>,
}

impl Fids {
    pub(crate) fn alloc(&self) -> u32 {
        if let Some(f) = self.free.lock().pop() {
            return f;
        }
        self.next.fetch_add(1, Relaxed)
    }

    pub(crate) fn free(&self, fid: u32) {
        self.free.lock().push(fid);
    }

    /// Clunk `fid` without waiting; its number is reused at once (the
    /// clunk is written first, and the server reads in order).
    pub(crate) fn clunk(&self, rpc: &rpc::Rpc, fid: u32) {
        rpc.send_forget(Fcall::Tclunk { fid });
        self.free(fid);
    }
}

/// Decode a `walkfs.readdirplus` listing of `dir`, and remember where each
/// entry lives (a later call walks to it by name).
pub(crate) fn decode_listing(
    nodes: &Mutex<Nodes>,
    dir: NodeId,
    buf: &[u8],
    released: &mut Vec<u32>,
) -> Result<Vec<walkfs_fsapi::DirPlus>> {
    let mut out = Vec::new();
    for rec in p9::dirplus::decode(buf) {
        let rec = rec.map_err(|_| Errno::EPROTO)?;
        let attr = attr_of(&rec.stat);
        out.push(walkfs_fsapi::DirPlus {
            name: rec.name.to_vec(),
            entry: Entry {
                node: NodeId(attr.ino),
                attr,
            },
            link: attr.is_symlink().then(|| rec.link.to_vec()),
        });
    }
    let mut n = nodes.lock();
    released.extend(
        out.iter()
            .filter_map(|p| n.adopt_listed(p.entry.node.0, dir.0, &p.name)),
    );
    Ok(out)
}

fn attr_of(st: &p9::Stat) -> Attr {
    Attr {
        ino: st.qid.path,
        mode: st.mode,
        nlink: st.nlink as u32,
        uid: st.uid,
        gid: st.gid,
        rdev: st.rdev,
        size: st.size,
        blocks: st.blocks,
        atime: Timespec {
            sec: st.atime_sec as i64,
            nsec: st.atime_nsec as u32,
        },
        mtime: Timespec {
            sec: st.mtime_sec as i64,
            nsec: st.mtime_nsec as u32,
        },
        ctime: Timespec {
            sec: st.ctime_sec as i64,
            nsec: st.ctime_nsec as u32,
        },
        btime: if st.valid & p9::GETATTR_BTIME != 0 {
            Timespec {
                sec: st.btime_sec as i64,
                nsec: st.btime_nsec as u32,
            }
        } else {
            Timespec::default()
        },
        has_acl: false,
    }
}

pub(crate) fn err_of(f: &Fcall<'_>) -> Errno {
    match f {
        Fcall::Rlerror { ecode } => Errno::from_wire(*ecode),
        _ => Errno::EPROTO,
    }
}

fn one<'a>(name: &'a [u8]) -> Names<'a> {
    // One name always fits.
    Names::new(&[name]).unwrap_or_default()
}

impl P9Fs {
    /// A file just made for `owner` belongs on the server to the user we
    /// attached as (9P2000.L's creates carry a gid, no uid): as root
    /// there, give it to its owner, as Linux's v9fs does for a client
    /// that checks permissions itself. Failing that, it stays ours.
    fn own(&self, fid: u32, owner: Owner, attr: &mut Attr) {
        if owner.uid == attr.uid || self.attach_uid != 0 {
            return;
        }
        let set = handover(owner, attr.mode);
        match self.simple(Fcall::Tsetattr { fid, attr: set }) {
            Ok(()) => attr.uid = owner.uid,
            Err(e) => tracing::debug!("chown of a new file to {}: {e}", owner.uid),
        }
    }

    /// [`P9Fs::own`] for a node just made (its fid pinned only when the
    /// owner must change).
    fn own_node(&self, node: NodeId, owner: Owner, attr: &mut Attr) {
        if owner.uid == attr.uid || self.attach_uid != 0 {
            return;
        }
        if let Ok(pin) = self.pin(node) {
            self.own(pin.fid, owner, attr);
        }
    }

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
        let ordered = keeps_order(&rpc);
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

    /// Ask the server for a range of inode numbers (p9::inogrant): one
    /// round trip, about once per 4,096 nodes made. `None` when it grants
    /// none.
    fn ask_grant(&self) -> Option<Grant> {
        let nf = self.alloc_fid();
        let (mut made, mut got) = (false, None);
        let sent = self.rpc.call_many(
            &[
                Fcall::Txattrwalk {
                    fid: ROOT_FID,
                    newfid: nf,
                    name: Str(p9::inogrant::NAME),
                },
                Fcall::Tread {
                    fid: nf,
                    offset: 0,
                    count: p9::inogrant::RECORD as u32,
                },
            ],
            |i, r| match (i, r) {
                (0, Fcall::Rxattrwalk { .. }) => made = true,
                (1, Fcall::Rread { data }) => got = Grant::decode(data.0),
                _ => {}
            },
        );
        if made {
            self.clunk(nf);
        } else {
            self.free_fid(nf);
        }
        if sent.is_err() || got.is_none() {
            tracing::debug!("9p server grants no inode numbers: nodes are made with a round trip");
        }
        let got = got.filter(|_| sent.is_ok());
        if let Some(g) = got {
            // The ranges a replay after a reconnect may name: this one
            // and the one before (spent, but its last creates may be
            // unanswered).
            let mut t = self.tickets.lock();
            t.push(g);
            if t.len() > 2 {
                t.remove(0);
            }
        }
        got
    }

    /// Ask for a lease on the directory `dirfid` names, as lease fid
    /// `lf`, without waiting (p9::lease): the reply settles it.
    fn ask_lease(&self, dirfid: u32, lf: u32) {
        let leases = Arc::clone(&self.leases);
        let fids = Arc::clone(&self.fids);
        let then: rpc::Then = Arc::new(move |_, r| match r {
            Some(Fcall::Rxattrwalk { size }) if size == p9::lease::VERSION => leases.granted(lf),
            // A version this client does not know: the fid was made, and
            // stays unused until the connection ends (nothing may be sent
            // from the reader thread).
            Some(Fcall::Rxattrwalk { .. }) => leases.refused(lf, Errno::EOPNOTSUPP),
            Some(r) => {
                leases.refused(lf, err_of(&r));
                fids.free(lf);
            }
            None => leases.refused(lf, Errno::ENOTCONN),
        });
        let ask = Fcall::Txattrwalk {
            fid: dirfid,
            newfid: lf,
            name: Str(p9::lease::NAME),
        };
        if let Err(e) = self.rpc.send_then(&[ask], then) {
            self.leases.refused(lf, e);
        }
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

    fn alloc_fid(&self) -> u32 {
        self.fids.alloc()
    }

    fn free_fid(&self, fid: u32) {
        self.fids.free(fid);
    }

    fn clunk(&self, fid: u32) {
        self.fids.clunk(&self.rpc, fid);
    }

    /// Give up a fid a failed chain was making: clunk it if the server
    /// made it (the walk succeeded), else just reuse its number. Returns
    /// the chain's error.
    fn abandon(&self, nf: u32, walked: bool, e: Errno) -> Errno {
        if walked {
            self.clunk(nf);
        } else {
            self.free_fid(nf);
        }
        e
    }

    /// Pin `node`'s fid for the length of a call, walking to the node
    /// again when its fid was released.
    fn pin(&self, node: NodeId) -> Result<Pin<'_>> {
        let need = self.nodes.lock().need(node.0).ok_or(Errno::ESTALE)?;
        let (anc, from, names, ids) = match need {
            Need::Held(fid) => {
                return Ok(Pin {
                    fs: self,
                    id: node.0,
                    fid,
                })
            }
            Need::Walk {
                anc,
                from,
                names,
                ids,
            } => (anc, from, names, ids),
        };
        let walked = {
            let _anc = Pin {
                fs: self,
                id: anc,
                fid: from,
            };
            self.walk_path(from, &names, &ids)?
        };
        let installed = self.nodes.lock().install(node.0, walked);
        let Some((fid, surplus)) = installed else {
            self.clunk(walked);
            return Err(Errno::ESTALE);
        };
        if surplus {
            self.clunk(walked);
        }
        let pin = Pin {
            fs: self,
            id: node.0,
            fid,
        };
        self.trim();
        Ok(pin)
    }

    /// Walk `names` from `from` to a new fid, checking that each step
    /// lands on the file remembered (`ids`, qid paths): a name that went
    /// or names another file now is `ESTALE`.
    fn walk_path(&self, from: u32, names: &[walkfs_fsapi::Name], ids: &[u64]) -> Result<u32> {
        let mut cur = from;
        for (chunk, want) in names.chunks(p9::MAXWELEM).zip(ids.chunks(p9::MAXWELEM)) {
            let refs: Vec<&[u8]> = chunk.iter().map(|n| &**n).collect();
            let nf = self.alloc_fid();
            let r = self.rpc.call(
                Fcall::Twalk {
                    fid: cur,
                    newfid: nf,
                    names: Names::new(&refs).unwrap_or_default(),
                },
                |r| match r {
                    Fcall::Rwalk { qids } => {
                        let got = qids.as_slice();
                        let whole = got.len() == want.len();
                        let same = got.iter().zip(want).all(|(q, &id)| q.path == id);
                        Ok((whole, same))
                    }
                    r => Err(err_of(&r)),
                },
            );
            if cur != from {
                self.clunk(cur);
            }
            match r {
                Ok((true, true)) => cur = nf,
                Ok((whole, _)) => return Err(self.abandon(nf, whole, Errno::ESTALE)),
                Err(Errno::ENOENT) => return Err(self.abandon(nf, false, Errno::ESTALE)),
                Err(e) => return Err(self.abandon(nf, false, e)),
            }
        }
        Ok(cur)
    }

    /// Release fids past the bound.
    fn trim(&self) {
        let gone = self.nodes.lock().trim();
        for fid in gone {
            self.clunk(fid);
        }
    }

    /// Record the node `fid` walked to (found as `name` in `parent`);
    /// its id is its qid path.
    fn adopt(&self, fid: u32, attr: &Attr, parent: NodeId, name: &[u8]) -> NodeId {
        let surplus = self
            .nodes
            .lock()
            .adopt(attr.ino, attr.generation(), parent.0, name, fid);
        match surplus {
            Some(f) => self.clunk(f),
            None => self.trim(),
        }
        NodeId(attr.ino)
    }

    /// Fids the node table holds now, its bound, fids released to keep
    /// it, and walks made to get one back.
    pub fn fid_stats(&self) -> FidStats {
        let n = self.nodes.lock();
        FidStats {
            nodes: n.by_id.len() as u64,
            held: n.held() as u64,
            cap: n.cap() as u64,
            released: n.released,
            rewalks: n.rewalks,
        }
    }

    /// Run a two-request chain whose second request uses the fid the
    /// first makes: back to back when the server keeps them in order,
    /// else one after the other. `first`/`second` get the replies.
    fn chain(
        &self,
        reqs: [Fcall<'_>; 2],
        mut first: impl FnMut(Fcall<'_>) -> Result<()>,
        mut second: impl FnMut(Fcall<'_>) -> Result<()>,
    ) -> Result<()> {
        if self.pipeline.load(Relaxed) {
            let mut r1 = Err(Errno::EPROTO);
            let mut r2 = Err(Errno::EPROTO);
            self.rpc.call_many(&reqs, |i, r| {
                if i == 0 {
                    r1 = first(r);
                } else {
                    r2 = second(r);
                }
            })?;
            r1?;
            match r2 {
                Err(Errno::EIO | Errno::EBADF) => {
                    tracing::info!("9p server runs a fid's requests out of order: not pipelining");
                    self.pipeline.store(false, Relaxed);
                }
                r => return r,
            }
        } else {
            let mut r1 = Err(Errno::EPROTO);
            self.rpc.call_many(&reqs[..1], |_, r| r1 = first(r))?;
            r1?;
        }
        let mut r2 = Err(Errno::EPROTO);
        self.rpc.call_many(&reqs[1..], |_, r| r2 = second(r))?;
        r2
    }

    /// Walk `names` from `from` to a new fid and get its attributes: one
    /// round trip.
    fn walk_getattr(&self, from: u32, names: Names<'_>) -> Result<(u32, Attr)> {
        let nf = self.alloc_fid();
        let want = names.as_slice().len();
        let mut walked = false;
        let mut attr = Attr::default();
        let r = self.chain(
            [
                Fcall::Twalk {
                    fid: from,
                    newfid: nf,
                    names,
                },
                Fcall::Tgetattr {
                    fid: nf,
                    request_mask: p9::GETATTR_BASIC,
                },
            ],
            |r| match r {
                Fcall::Rwalk { qids } if qids.as_slice().len() == want => {
                    walked = true;
                    Ok(())
                }
                Fcall::Rwalk { .. } => Err(Errno::ENOENT),
                r => Err(err_of(&r)),
            },
            |r| match r {
                Fcall::Rgetattr { st } => {
                    attr = attr_of(&st);
                    Ok(())
                }
                r => Err(err_of(&r)),
            },
        );
        match r {
            Ok(()) => Ok((nf, attr)),
            Err(e) => Err(self.abandon(nf, walked, e)),
        }
    }

    /// Create `name` in the directory of fid `dir` and open it, and get
    /// the new file's attributes from the open fid: a clone walk, the
    /// create and a getattr back to back, one round trip (three
    /// requests, where a walk to the new name and its getattr after the
    /// create took a second). A server that does not keep a fid's
    /// requests in order gets them one at a time.
    fn create_getattr(
        &self,
        dir: u32,
        name: &[u8],
        flags: OpenFlags,
        mode: u32,
        gid: u32,
    ) -> Result<(u32, Option<u32>, Attr)> {
        let lcreate = |nf| Fcall::Tlcreate {
            fid: nf,
            name: Str(name),
            flags: (flags.0 | libc::O_CREAT | libc::O_EXCL) as u32,
            mode: mode & 0o7777,
            gid,
        };
        let created = |r: &Fcall<'_>| matches!(r, Fcall::Rlcreate { .. });
        if self.pipeline.load(Relaxed) {
            // The open fid, and a path fid for the node (its later
            // setattr or getattr needs no walk): one round trip.
            let nf = self.alloc_fid();
            let pf = self.alloc_fid();
            let (mut walked, mut made, mut pwalked, mut attr) = (None, None, false, None);
            let reqs = [
                Fcall::Twalk {
                    fid: dir,
                    newfid: nf,
                    names: Names::default(),
                },
                lcreate(nf),
                Fcall::Twalk {
                    fid: dir,
                    newfid: pf,
                    names: one(name),
                },
                Fcall::Tgetattr {
                    fid: pf,
                    request_mask: p9::GETATTR_BASIC,
                },
            ];
            let sent = self.rpc.call_many(&reqs, |i, r| match i {
                0 => {
                    walked = Some(
                        matches!(r, Fcall::Rwalk { .. })
                            .then_some(())
                            .ok_or_else(|| err_of(&r)),
                    )
                }
                1 => {
                    made = Some(match r {
                        Fcall::Rlcreate { qid, .. } => Ok(qid.path),
                        r => Err(err_of(&r)),
                    })
                }
                2 => pwalked = matches!(r, Fcall::Rwalk { ref qids } if qids.as_slice().len() == 1),
                _ => {
                    attr = Some(match r {
                        Fcall::Rgetattr { st } => Ok(attr_of(&st)),
                        r => Err(err_of(&r)),
                    })
                }
            });
            let walked_ok = matches!(walked, Some(Ok(())));
            // The path fid is kept only if it names the file made (a
            // server that runs a connection's requests out of order may
            // have walked before the create, or to another file).
            let path_fid = match (&made, &attr) {
                (Some(Ok(path)), Some(Ok(a))) if pwalked && a.ino == *path => Some(pf),
                _ => {
                    let _ = self.abandon(pf, pwalked, Errno::EIO);
                    None
                }
            };
            if let Err(e) = sent {
                if let Some(pf) = path_fid {
                    self.clunk(pf);
                }
                return Err(self.abandon(nf, walked_ok, e));
            }
            match (walked, made) {
                (Some(Ok(())), Some(Ok(_))) => {
                    return match (path_fid, attr) {
                        (Some(pf), Some(Ok(a))) => Ok((nf, Some(pf), a)),
                        // Not answered for the file made: ask its open
                        // fid.
                        _ => self.getattr_of(nf).map(|(nf, a)| (nf, None, a)),
                    };
                }
                (Some(Ok(())), Some(Err(Errno::EIO | Errno::EBADF))) => {
                    // The create ran before the walk made its fid.
                    tracing::info!("9p server runs a fid's requests out of order: not pipelining");
                    self.pipeline.store(false, Relaxed);
                    self.clunk(nf);
                }
                (Some(Ok(())), Some(Err(e))) => return Err(self.abandon(nf, true, e)),
                (Some(Err(e)), _) => return Err(self.abandon(nf, false, e)),
                _ => return Err(self.abandon(nf, walked_ok, Errno::EPROTO)),
            }
        }
        let nf = self.clone_then(dir, lcreate, created)?;
        self.getattr_of(nf).map(|(nf, a)| (nf, None, a))
    }

    /// The attributes of open fid `nf` (clunked on failure).
    fn getattr_of(&self, nf: u32) -> Result<(u32, Attr)> {
        let r = self.rpc.call(
            Fcall::Tgetattr {
                fid: nf,
                request_mask: p9::GETATTR_BASIC,
            },
            |r| match r {
                Fcall::Rgetattr { st } => Ok(attr_of(&st)),
                r => Err(err_of(&r)),
            },
        );
        match r {
            Ok(a) => Ok((nf, a)),
            Err(e) => {
                self.clunk(nf);
                Err(e)
            }
        }
    }

    /// A new fid for `node`, opened with `flags`: walk + open in one round
    /// trip.
    fn open_fid(&self, node: u32, flags: u32) -> Result<u32> {
        self.clone_then(
            node,
            |nf| Fcall::Tlopen { fid: nf, flags },
            |r| matches!(r, Fcall::Rlopen { .. }),
        )
    }

    /// Clone `from` to a new fid and send `then(newfid)` right behind (an
    /// open or create of the clone): the new fid, or the error, with the
    /// clone clunked.
    fn clone_then<'a>(
        &self,
        from: u32,
        then: impl FnOnce(u32) -> Fcall<'a>,
        ok: impl Fn(&Fcall<'_>) -> bool,
    ) -> Result<u32> {
        let nf = self.alloc_fid();
        let mut walked = false;
        let r = self.chain(
            [
                Fcall::Twalk {
                    fid: from,
                    newfid: nf,
                    names: Names::default(),
                },
                then(nf),
            ],
            |r| match r {
                Fcall::Rwalk { .. } => {
                    walked = true;
                    Ok(())
                }
                r => Err(err_of(&r)),
            },
            |r| if ok(&r) { Ok(()) } else { Err(err_of(&r)) },
        );
        match r {
            Ok(()) => Ok(nf),
            Err(e) => Err(self.abandon(nf, walked, e)),
        }
    }

    /// Look `name` up in `parent` (whose fid is `pfid`).
    fn entry_of(&self, parent: NodeId, pfid: u32, name: &[u8]) -> Result<Entry> {
        let (nf, attr) = self.walk_getattr(pfid, one(name))?;
        Ok(Entry {
            node: self.adopt(nf, &attr, parent, name),
            attr,
        })
    }

    /// Tunlinkat, or on older servers (diod 1.0) a walk and Tremove (which
    /// clunks the fid, whatever the outcome).
    fn remove(&self, dir: u32, name: &[u8], flags: u32) -> Result<()> {
        match self.simple(Fcall::Tunlinkat {
            dirfid: dir,
            name: Str(name),
            flags,
        }) {
            Ok(()) => {
                self.unlinkat_ok.store(true, Relaxed);
                Ok(())
            }
            Err(Errno::EOPNOTSUPP) => {
                let (nf, _) = self.walk_getattr(dir, one(name))?;
                let r = self.simple(Fcall::Tremove { fid: nf });
                self.free_fid(nf);
                r
            }
            r => r,
        }
    }

    /// A directory listed with attributes (p9::dirplus): the xattr walk
    /// and the first read in one round trip, more reads for a listing
    /// larger than a message. Each entry becomes a node (no fid).
    /// The listing of `node` (the readdirplus records), asked for now.
    fn list_now(&self, node: NodeId) -> Result<Vec<u8>> {
        let dir = self.pin(node)?;
        let nf = self.alloc_fid();
        let mut size = None;
        let mut buf = Vec::new();
        let mut first = Ok(());
        let walk = Fcall::Txattrwalk {
            fid: dir.fid,
            newfid: nf,
            name: Str(p9::dirplus::NAME),
        };
        let read = |offset: u64| Fcall::Tread {
            fid: nf,
            offset,
            count: self.iounit,
        };
        let pipelined = self.pipeline.load(Relaxed);
        let reqs: &[Fcall<'_>] = if pipelined {
            &[walk, read(0)]
        } else {
            std::slice::from_ref(&walk)
        };
        self.rpc
            .call_many(reqs, |i, r| match (i, r) {
                (0, Fcall::Rxattrwalk { size: s }) => size = Some(s),
                (0, r) => first = Err(err_of(&r)),
                (_, Fcall::Rread { data }) => buf.extend_from_slice(data.0),
                _ => {}
            })
            .map_err(|e| self.abandon(nf, false, e))?;
        let size = match (first, size) {
            (Ok(()), Some(s)) => s,
            (Err(e), _) => return Err(self.abandon(nf, false, e)),
            (Ok(()), None) => return Err(self.abandon(nf, false, Errno::EPROTO)),
        };
        if size > p9::dirplus::MAX_LISTING as u64 {
            return Err(self.abandon(nf, true, Errno::E2BIG));
        }
        while (buf.len() as u64) < size {
            let got = self.rpc.call(read(buf.len() as u64), |r| match r {
                Fcall::Rread { data } => {
                    buf.extend_from_slice(data.0);
                    Ok(data.0.len())
                }
                r => Err(err_of(&r)),
            });
            match got {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) => return Err(self.abandon(nf, true, e)),
            }
        }
        self.clunk(nf);
        Ok(buf)
    }

    fn listing(&self, node: NodeId) -> Result<Vec<walkfs_fsapi::DirPlus>> {
        let buf = match self.list_walking(node) {
            Some(buf) => buf,
            None => self.list_now(node)?,
        };
        let mut released = Vec::new();
        let r = decode_listing(&self.nodes, node, &buf, &mut released);
        for fid in released {
            self.fids.clunk(&self.rpc, fid);
        }
        r
    }

    /// Can a listing go in one write with the walk to its directory (the
    /// server keeps a fid's requests in order, and lists with attributes)?
    fn can_batch_listing(&self) -> bool {
        self.pipeline.load(Relaxed) && self.dirplus.load(Relaxed)
    }

    /// Ask, without waiting, for the listing of `id` by walking to it as
    /// `need` (pinned, unpinned here) says: one write of walk, listing and
    /// first read (ahead.rs). `None` when the path is too long for one
    /// walk.
    fn ask_listing(&self, id: u64, need: Need) -> Result<Option<Arc<ahead::Listing>>> {
        let (anc, from, names, ids) = match need {
            Need::Held(fid) => (id, fid, Vec::new(), Vec::new()),
            Need::Walk {
                anc,
                from,
                names,
                ids,
            } => (anc, from, names, ids),
        };
        // Held until the batch is written: the server resolves `from` as
        // it reads the walk, before any later clunk of it.
        let _from = Pin {
            fs: self,
            id: anc,
            fid: from,
        };
        if names.len() > p9::MAXWELEM {
            return Ok(None);
        }
        let refs: Vec<&[u8]> = names.iter().map(|n| &**n).collect();
        let fids = [self.alloc_fid(), self.alloc_fid()];
        let l = ahead::Listing::new(id, fids, ids);
        let reqs = [
            Fcall::Twalk {
                fid: from,
                newfid: fids[0],
                names: Names::new(&refs).unwrap_or_default(),
            },
            Fcall::Txattrwalk {
                fid: fids[0],
                newfid: fids[1],
                name: Str(p9::dirplus::NAME),
            },
            Fcall::Tread {
                fid: fids[1],
                offset: 0,
                count: self.iounit,
            },
        ];
        let filed = Arc::clone(&l);
        if let Err(e) = self
            .rpc
            .send_then(&reqs, Arc::new(move |i, r| filed.reply(i, r)))
        {
            self.free_fid(fids[0]);
            self.free_fid(fids[1]);
            return Err(e);
        }
        Ok(Some(l))
    }

    /// The listing of `node`, when it holds no fid, in one round trip
    /// that walks to it too (as a read-ahead, waited for at once); `None`
    /// when that cannot be used (then the ordinary way: walk, then list).
    fn list_walking(&self, node: NodeId) -> Option<Vec<u8>> {
        if !self.can_batch_listing() {
            return None;
        }
        let need = self.nodes.lock().need(node.0)?;
        if let Need::Held(fid) = need {
            // Pinned by `need`: let go; the ordinary way costs no walk.
            drop(Pin {
                fs: self,
                id: node.0,
                fid,
            });
            return None;
        }
        let l = self.ask_listing(node.0, need).ok()??;
        l.finish(&self.rpc, &self.fids, &self.nodes)
    }

    /// Open file `fid` of node `id`: opened again after a reconnect.
    fn opened(&self, fid: u32, id: u64, flags: OpenFlags) {
        if self.rpc.reconnect().is_some() {
            self.opens
                .lock()
                .insert(fid, (id, recover::reopen_flags(flags.0)));
        }
    }

    /// Reconnects done since the mount.
    pub fn reconnects(&self) -> u64 {
        self.reconnects.load(Relaxed)
    }

    fn simple(&self, req: Fcall<'_>) -> Result<()> {
        self.rpc.call(req, |_| Ok(()))
    }
}

/// A [`FileSystem::getattr_behind`] under way: answers still to come,
/// the attributes, and where they go (taken by whoever finishes it).
struct Behind {
    left: usize,
    attr: Result<Attr>,
    then: Option<walkfs_fsapi::AttrThen>,
}

/// One [`Done`] for a change sent in `n` parts: called once every part
/// has finished, with the first failure among them.
struct Join(Arc<Mutex<JoinState>>);

struct JoinState {
    left: usize,
    err: Option<Errno>,
    done: Option<Done>,
}

impl Join {
    fn new(done: Done, n: usize) -> Join {
        Join(Arc::new(Mutex::new(JoinState {
            left: n,
            err: None,
            done: Some(done),
        })))
    }

    /// One part finished with `r`.
    fn finish(state: &Mutex<JoinState>, r: Result<()>) {
        let mut j = state.lock();
        j.left -= 1;
        if let Err(e) = r {
            j.err.get_or_insert(e);
        }
        if j.left > 0 {
            return;
        }
        let (err, done) = (j.err, j.done.take());
        drop(j);
        if let Some(done) = done {
            done(err.map_or(Ok(()), Err));
        }
    }

    /// The outcome of one part, to hand to the transport.
    fn part(&self) -> Done {
        let state = Arc::clone(&self.0);
        Box::new(move |r| Join::finish(&state, r))
    }

    /// A part that was never sent.
    fn unsent(&self, e: Errno) {
        Join::finish(&self.0, Err(e));
    }
}

/// A node's fid, held for one call (or an open file's life).
struct Pin<'a> {
    fs: &'a P9Fs,
    id: u64,
    fid: u32,
}

impl Pin<'_> {
    /// Keep the fid pinned after this guard: an open file holds it until
    /// [`FileSystem::release`].
    fn keep(self) {
        std::mem::forget(self);
    }
}

impl Drop for Pin<'_> {
    fn drop(&mut self) {
        let gone = self.fs.nodes.lock().unpin(self.id);
        if let Some(fid) = gone {
            self.fs.clunk(fid);
        }
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

/// The 9P form of an attribute change.
fn p9_setattr(set: &SetAttr) -> p9::SetAttr {
    let mut a = p9::SetAttr::default();
    if let Some(m) = set.mode {
        a.valid |= p9::SETATTR_MODE;
        a.mode = m;
    }
    if let Some(u) = set.uid {
        a.valid |= p9::SETATTR_UID;
        a.uid = u;
    }
    if let Some(g) = set.gid {
        a.valid |= p9::SETATTR_GID;
        a.gid = g;
    }
    if let Some(s) = set.size {
        a.valid |= p9::SETATTR_SIZE;
        a.size = s;
    }
    for (t, set_bit, given_bit, sec, nsec) in [
        (
            set.atime,
            p9::SETATTR_ATIME,
            p9::SETATTR_ATIME_SET,
            &mut a.atime_sec,
            &mut a.atime_nsec,
        ),
        (
            set.mtime,
            p9::SETATTR_MTIME,
            p9::SETATTR_MTIME_SET,
            &mut a.mtime_sec,
            &mut a.mtime_nsec,
        ),
    ] {
        match t {
            None => {}
            Some(TimeSet::Now) => a.valid |= set_bit,
            Some(TimeSet::At(ts)) => {
                a.valid |= set_bit | given_bit;
                *sec = ts.sec as u64;
                *nsec = ts.nsec as u64;
            }
        }
    }
    a
}

/// The `Tsetattr` that gives a file just made (mode `mode`) to `owner`:
/// its set-id bits go along (a chown alone would clear them); a symlink's
/// mode cannot be set at all.
fn handover(owner: Owner, mode: u32) -> p9::SetAttr {
    let keep_mode = mode & 0o6000 != 0 && mode & libc::S_IFMT != libc::S_IFLNK;
    p9::SetAttr {
        valid: p9::SETATTR_UID | if keep_mode { p9::SETATTR_MODE } else { 0 },
        uid: owner.uid,
        mode: mode & 0o7777,
        ..Default::default()
    }
}

fn kind_of_dtype(t: u8) -> Option<FileType> {
    FileType::from_mode((t as u32) << 12)
}

impl FileSystem for P9Fs {
    fn root(&self) -> NodeId {
        NodeId(self.root_ino)
    }

    fn lookup(&self, parent: NodeId, name: &[u8]) -> Result<Entry> {
        let dir = self.pin(parent)?;
        self.entry_of(parent, dir.fid, name)
    }

    /// Changes come from the server (walkfs serve's notification
    /// extension), when it offered them at attach.
    fn watch_changes(&self, sink: Arc<dyn walkfs_fsapi::ChangeSink>) -> Result<()> {
        let Some(version) = self.notify else {
            return Err(Errno::EOPNOTSUPP);
        };
        *self.sink.lock() = Some(Arc::clone(&sink));
        notify::start(
            version,
            Arc::downgrade(&self.rpc),
            self.nodes.clone(),
            self.root_ino,
            sink,
            notify::Recaller {
                leases: Arc::clone(&self.leases),
                fids: Arc::clone(&self.fids),
            },
        )
    }

    fn leased(&self, node: NodeId) -> bool {
        self.leases.covers(node.0)
    }

    fn forget(&self, node: NodeId, count: u64) {
        let gone = self.nodes.lock().forget(node.0, count);
        if let Some(fid) = gone {
            self.clunk(fid);
        }
    }

    fn getattr_behind(&self, node: NodeId, then: walkfs_fsapi::AttrThen) -> bool {
        // Not while the connection is being made again: the recovery
        // walks the table's fids to their numbers on the new server, and
        // a node this let go of meanwhile would free a number the new
        // server is given (the next file made with it would fail).
        if self.rpc.is_dead() {
            return false;
        }
        let Some(need) = self.nodes.lock().need(node.0) else {
            return false;
        };
        // The fid to start from (the node's, or an ancestor's a walk
        // starts from), and the names a walk takes from there. It is not
        // kept pinned: a fid clunked meanwhile fails the request, and one
        // whose number went to another file answers for another qid path,
        // which is refused below. (A pin would keep a file the caller
        // removed open on the server until the next call trims.)
        let (pinned, from, names) = match need {
            Need::Held(fid) => (node.0, fid, Vec::new()),
            Need::Walk {
                anc, from, names, ..
            } => (anc, from, names),
        };
        let gone = self.nodes.lock().unpin(pinned);
        if let Some(fid) = gone {
            self.clunk(fid);
            return false;
        }
        if names.len() > p9::MAXWELEM {
            return false;
        }
        let mask = p9::GETATTR_BASIC | p9::GETATTR_BTIME;
        let refs: Vec<&[u8]> = names.iter().map(|n| &**n).collect();
        // The fid a walk makes: clunked by the last request, its number
        // freed at the last answer.
        let walked = (!names.is_empty()).then(|| self.alloc_fid());
        let reqs = match walked {
            None => vec![Fcall::Tgetattr {
                fid: from,
                request_mask: mask,
            }],
            Some(nf) => vec![
                Fcall::Twalk {
                    fid: from,
                    newfid: nf,
                    names: Names::new(&refs).unwrap_or_default(),
                },
                Fcall::Tgetattr {
                    fid: nf,
                    request_mask: mask,
                },
                Fcall::Tclunk { fid: nf },
            ],
        };
        let state = Arc::new(Mutex::new(Behind {
            left: reqs.len(),
            attr: Err(Errno::ENOTCONN),
            then: Some(then),
        }));
        let (fids, st) = (Arc::clone(&self.fids), Arc::clone(&state));
        let sent = self.rpc.send_then(
            &reqs,
            Arc::new(move |i, reply| {
                let mut b = st.lock();
                if b.then.is_none() {
                    return;
                }
                if let Some(Fcall::Rgetattr { st }) = &reply {
                    // A walk that went astray (the name is another
                    // file's now) is not this node's answer.
                    b.attr = if st.qid.path == node.0 {
                        Ok(attr_of(st))
                    } else {
                        Err(Errno::ESTALE)
                    };
                } else if i == 0 && reply.is_some() && walked.is_none() {
                    b.attr = Err(reply.as_ref().map_or(Errno::ENOTCONN, err_of));
                }
                b.left -= 1;
                if b.left > 0 {
                    return;
                }
                let (attr, then) = (
                    std::mem::replace(&mut b.attr, Err(Errno::ENOTCONN)),
                    b.then.take(),
                );
                drop(b);
                if let Some(nf) = walked {
                    fids.free(nf);
                }
                if let Some(t) = then {
                    t(attr);
                }
            }),
        );
        if sent.is_err() {
            // Unless the failed send told the callback (which then let
            // everything go), nothing was sent.
            if state.lock().then.take().is_some() {
                if let Some(nf) = walked {
                    self.free_fid(nf);
                }
            }
            return false;
        }
        true
    }

    fn getattr(&self, node: NodeId) -> Result<Attr> {
        let pin = self.pin(node)?;
        self.rpc.call(
            Fcall::Tgetattr {
                fid: pin.fid,
                request_mask: p9::GETATTR_BASIC,
            },
            |r| match r {
                Fcall::Rgetattr { st } => Ok(attr_of(&st)),
                r => Err(err_of(&r)),
            },
        )
    }

    fn setattr(&self, node: NodeId, set: &SetAttr) -> Result<Attr> {
        let a = p9_setattr(set);
        let pin = self.pin(node)?;
        self.simple(Fcall::Tsetattr {
            fid: pin.fid,
            attr: a,
        })?;
        self.getattr(node)
    }

    fn completion(&self) -> Completion {
        if self.ordered {
            Completion::Ordered
        } else {
            Completion::Inline
        }
    }

    /// Sent without waiting for the reply (the server runs them in
    /// order); the outcome goes to `done` from the reader thread.
    fn submit(&self, op: Deferred<'_>, done: Done) -> Result<()> {
        if !self.ordered {
            walkfs_fsapi::run_inline(self, op, done);
            return Ok(());
        }
        match op {
            Deferred::Write {
                node: _,
                fh,
                off,
                data,
            } => {
                let fid = u32::try_from(fh.0).map_err(|_| Errno::EBADF)?;
                let chunks = data.len().div_ceil(self.iounit as usize).max(1);
                let join = Join::new(done, chunks);
                for i in 0..chunks {
                    let at = i * self.iounit as usize;
                    let chunk = &data[at..(at + self.iounit as usize).min(data.len())];
                    let sent = self.rpc.send_async(
                        Fcall::Twrite {
                            fid,
                            offset: off + at as u64,
                            data: p9::Data(chunk),
                        },
                        rpc::AsyncOp::new(join.part(), chunk.len() as u32),
                    );
                    if let Err(e) = sent {
                        if i == 0 {
                            return Err(e);
                        }
                        // Some of it went: the write as a whole failed,
                        // which `done` hears once the parts sent have
                        // finished too.
                        (i..chunks).for_each(|_| join.unsent(e));
                        return Ok(());
                    }
                }
                Ok(())
            }
            Deferred::SetAttr { node, set } => {
                let pin = self.pin(node)?;
                self.rpc.send_async(
                    Fcall::Tsetattr {
                        fid: pin.fid,
                        attr: p9_setattr(&set),
                    },
                    rpc::AsyncOp::new(done, 0),
                )
            }
            Deferred::Rmdir { parent, name, .. } if self.unlinkat_ok.load(Relaxed) => {
                let dir = self.pin(parent)?;
                self.rpc.send_async(
                    Fcall::Tunlinkat {
                        dirfid: dir.fid,
                        name: Str(name),
                        flags: p9::AT_REMOVEDIR,
                    },
                    rpc::AsyncOp::new(done, 0),
                )
            }
            Deferred::Rmdir { parent, name, .. } => {
                done(self.rmdir(parent, name));
                Ok(())
            }
            Deferred::Unlink { parent, name, .. } => {
                if !self.unlinkat_ok.load(Relaxed) {
                    // The first one waits: a server that does not know
                    // Tunlinkat gets Tremove, which an asynchronous
                    // change could not fall back to.
                    done(self.unlink(parent, name));
                    return Ok(());
                }
                let dir = self.pin(parent)?;
                // Emptying a directory (rm -r) under a lease: a miss in it
                // is answered from the cache, and its removal runs behind.
                if let Some(lf) = self.leases.emptying(parent.0, || self.alloc_fid()) {
                    self.ask_lease(dir.fid, lf);
                }
                self.rpc.send_async(
                    Fcall::Tunlinkat {
                        dirfid: dir.fid,
                        name: Str(name),
                        flags: 0,
                    },
                    rpc::AsyncOp::new(done, 0),
                )
            }
            Deferred::Rename {
                parent,
                name,
                newparent,
                newname,
                node,
            } if self.renameat_ok.load(Relaxed) => {
                let (dpin, npin) = (self.pin(parent)?, self.pin(newparent)?);
                self.rpc.send_async(
                    Fcall::Trenameat {
                        olddirfid: dpin.fid,
                        oldname: Str(name),
                        newdirfid: npin.fid,
                        newname: Str(newname),
                    },
                    rpc::AsyncOp::new(done, 0),
                )?;
                // A walk back to the node (once its fid is released)
                // takes the new path; the server runs the rename first.
                self.nodes.lock().moved(node.0, newparent.0, newname);
                Ok(())
            }
            Deferred::Rename {
                parent,
                name,
                newparent,
                newname,
                ..
            } => {
                // The first one waits: a server without Trenameat (diod
                // 1.0) gets Trename on the file's fid, which an
                // asynchronous change could not fall back to.
                done(self.rename(parent, name, newparent, newname, 0));
                Ok(())
            }
            Deferred::Link {
                node,
                newparent,
                newname,
            } => {
                let dir = self.pin(newparent)?;
                let file = self.pin(node)?;
                self.rpc.send_async(
                    Fcall::Tlink {
                        dfid: dir.fid,
                        fid: file.fid,
                        name: Str(newname),
                    },
                    rpc::AsyncOp::new(done, 0),
                )?;
                // The reference the entry of a link counts (`link`'s walk
                // to the new name adopts the node).
                let old = self.nodes.lock().adopt_listed(node.0, newparent.0, newname);
                if let Some(fid) = old {
                    self.fids.clunk(&self.rpc, fid);
                }
                Ok(())
            }
        }
    }

    /// The next number of the server's grant (a new grant when it is
    /// spent). A node made for someone else than who we attached as is
    /// theirs on the server only when we are root there (see `own`).
    fn grant(&self, owner: Owner) -> Option<Granted> {
        if self.attach_uid != 0 && owner.uid != self.attach_uid {
            return None;
        }
        let mut g = self.grants.lock();
        let (next, end) = g.as_mut()?;
        if *next == *end {
            match self.ask_grant() {
                Some(n) => (*next, *end) = (n.base, n.base + n.count),
                None => {
                    *g = None;
                    return None;
                }
            }
        }
        let ino = *next;
        *next += 1;
        Some(Granted {
            node: NodeId(ino),
            ino,
        })
    }

    /// The make (`Tlcreatei` on a clone of the directory's fid for a
    /// file, `Tmkdiri`, `Tsymlinki`, `Tmknodi`), a walk to the new name
    /// for the node's fid, and, attached as root for someone else, the
    /// chown `own` would send: back to back in one write, none waited
    /// for. The server runs them in order before anything sent later, so
    /// the node and its fid exist for every later request; `done` hears
    /// the first failure among them.
    fn make_behind(
        &self,
        parent: NodeId,
        name: &[u8],
        owner: Owner,
        node: Granted,
        what: Make<'_>,
        done: Done,
    ) -> Result<Option<FileHandle>> {
        let dir = self.pin(parent)?;
        let ino = node.ino;
        let gid = owner.gid;
        let mut reqs = Vec::with_capacity(4);
        let mut open = None;
        let is_dir = matches!(what, Make::Dir { .. });
        let what_flags = match what {
            Make::File { mode, flags } => Make::File { mode, flags },
            _ => Make::Dir { mode: 0 },
        };
        match what {
            Make::File { mode, flags } => {
                let nf = self.alloc_fid();
                open = Some(nf);
                reqs.push(Fcall::Twalk {
                    fid: dir.fid,
                    newfid: nf,
                    names: Names::default(),
                });
                reqs.push(Fcall::Tlcreatei {
                    fid: nf,
                    name: Str(name),
                    flags: (flags.0 | libc::O_CREAT | libc::O_EXCL) as u32,
                    mode: mode & 0o7777,
                    gid,
                    ino,
                });
            }
            Make::Dir { mode } => reqs.push(Fcall::Tmkdiri {
                dfid: dir.fid,
                name: Str(name),
                mode,
                gid,
                ino,
            }),
            Make::Symlink { target } => reqs.push(Fcall::Tsymlinki {
                fid: dir.fid,
                name: Str(name),
                symtgt: Str(target),
                gid,
                ino,
            }),
            Make::Special { mode, rdev } => reqs.push(Fcall::Tmknodi {
                dfid: dir.fid,
                name: Str(name),
                mode,
                major: libc::major(rdev as libc::dev_t),
                minor: libc::minor(rdev as libc::dev_t),
                gid,
                ino,
            }),
        }
        // The first file made in a directory asks for a lease on it,
        // ahead of the create: the server grants it before making the
        // file, so every file made from now on is the lease's.
        if open.is_some() {
            if let Some(lf) = self.leases.made(parent.0, ino, || self.alloc_fid()) {
                self.ask_lease(dir.fid, lf);
            }
        }
        let pf = self.alloc_fid();
        reqs.push(Fcall::Twalk {
            fid: dir.fid,
            newfid: pf,
            names: one(name),
        });
        if owner.uid != self.attach_uid {
            // What `own` sends.
            let mode = what.attr(ino, owner, Timespec::default()).mode;
            reqs.push(Fcall::Tsetattr {
                fid: pf,
                attr: handover(owner, mode),
            });
        }
        let join = Join::new(done, reqs.len());
        let ops = reqs
            .iter()
            .map(|_| rpc::AsyncOp::new(join.part(), 0))
            .collect();
        if let Err(e) = self.rpc.send_async_many(&reqs, ops) {
            self.free_fid(pf);
            if let Some(nf) = open {
                self.free_fid(nf);
            }
            return Err(e);
        }
        // A directory made here is filled from here next (an untar, a
        // build's output): its lease is asked for at once, behind the
        // mkdir, so its first files are covered too.
        if is_dir {
            if let Some(lf) = self.leases.made_dir(ino, || self.alloc_fid()) {
                self.ask_lease(pf, lf);
            }
        }
        drop(dir);
        let surplus = {
            let mut n = self.nodes.lock();
            let s = n.adopt(ino, 0, parent.0, name, pf);
            if open.is_some() {
                // Counted as open until `release`, as `create` does.
                let _ = n.need(ino);
            }
            s
        };
        match surplus {
            Some(f) => self.clunk(f),
            None => self.trim(),
        }
        if let (Some(f), Make::File { flags, .. }) = (open, what_flags) {
            self.opened(f, ino, flags);
        }
        Ok(open.map(|f| FileHandle(f as u64)))
    }

    fn readlink(&self, node: NodeId) -> Result<Vec<u8>> {
        let pin = self.pin(node)?;
        self.rpc
            .call(Fcall::Treadlink { fid: pin.fid }, |r| match r {
                Fcall::Rreadlink { target } => Ok(target.0.to_vec()),
                r => Err(err_of(&r)),
            })
    }

    /// The node keeps its fid while the file is open (an unlinked open
    /// file cannot be walked to again).
    fn open(&self, node: NodeId, flags: OpenFlags) -> Result<FileHandle> {
        let pin = self.pin(node)?;
        let f = self.open_fid(pin.fid, flags.0 as u32)?;
        pin.keep();
        self.opened(f, node.0, flags);
        Ok(FileHandle(f as u64))
    }

    fn create(
        &self,
        parent: NodeId,
        name: &[u8],
        mode: u32,
        owner: Owner,
        flags: OpenFlags,
    ) -> Result<(Entry, FileHandle)> {
        let pin = self.pin(parent)?;
        let (nf, pf, mut attr) = self.create_getattr(pin.fid, name, flags, mode, owner.gid)?;
        self.own(nf, owner, &mut attr);
        // Counted as open until `release`, as `open` pins.
        match pf {
            Some(pf) => {
                let surplus = {
                    let mut n = self.nodes.lock();
                    let s = n.adopt(attr.ino, attr.generation(), parent.0, name, pf);
                    let _ = n.need(attr.ino);
                    s
                };
                if let Some(f) = surplus {
                    self.clunk(f);
                }
                self.trim();
            }
            // No path fid (see `Nodes::adopt_open`).
            None => self.nodes.lock().adopt_open(attr.ino, parent.0, name),
        }
        self.opened(nf, attr.ino, flags);
        Ok((
            Entry {
                node: NodeId(attr.ino),
                attr,
            },
            FileHandle(nf as u64),
        ))
    }

    /// The walk to an open fid, the open and the first read back to back:
    /// one round trip where `open` and `read` took two (three when the
    /// node held no fid). The open fid is cloned from the node's own fid;
    /// a node that holds none gets one in the same write, walked from the
    /// nearest ancestor that does (by the names cached, checked against
    /// the qids remembered). A server that does not keep a fid's requests
    /// in order gets them one at a time.
    fn open_read(
        &self,
        node: NodeId,
        flags: OpenFlags,
        off: u64,
        buf: &mut [u8],
    ) -> Result<(FileHandle, usize)> {
        if !self.pipeline.load(Relaxed) {
            return walkfs_fsapi::open_then_read(self, node, flags, off, buf);
        }
        let need = self.nodes.lock().need(node.0).ok_or(Errno::ESTALE)?;
        // What `need` pinned: the node (its fid held) or the ancestor.
        let (pinned, path) = match need {
            Need::Held(fid) => (
                Pin {
                    fs: self,
                    id: node.0,
                    fid,
                },
                None,
            ),
            Need::Walk {
                anc,
                from,
                names,
                ids,
            } => (
                Pin {
                    fs: self,
                    id: anc,
                    fid: from,
                },
                Some((names, ids)),
            ),
        };
        if path.as_ref().is_some_and(|(n, _)| n.len() > p9::MAXWELEM) {
            drop(pinned);
            return walkfs_fsapi::open_then_read(self, node, flags, off, buf);
        }
        let nf = self.alloc_fid();
        let pf = path.as_ref().map(|_| self.alloc_fid());
        let count = buf.len().min(self.iounit as usize);
        let refs: Vec<&[u8]> = path
            .as_ref()
            .map(|(n, _)| n.iter().map(|x| &**x).collect())
            .unwrap_or_default();
        let mut reqs = Vec::with_capacity(4);
        let clone_from = match pf {
            Some(pf) => {
                reqs.push(Fcall::Twalk {
                    fid: pinned.fid,
                    newfid: pf,
                    names: Names::new(&refs).unwrap_or_default(),
                });
                pf
            }
            None => pinned.fid,
        };
        reqs.push(Fcall::Twalk {
            fid: clone_from,
            newfid: nf,
            names: Names::default(),
        });
        reqs.push(Fcall::Tlopen {
            fid: nf,
            flags: flags.0 as u32,
        });
        reqs.push(Fcall::Tread {
            fid: nf,
            offset: off,
            count: count as u32,
        });
        let first = usize::from(pf.is_some());
        let (mut pwalked, mut same, mut walked) = (pf.is_none(), true, false);
        let (mut opened, mut got) = (Err(Errno::EPROTO), Err(Errno::EPROTO));
        let sent = self.rpc.call_many(&reqs, |i, r| match i {
            _ if i + 1 == first => {
                // The path walk: whole, and to the files remembered.
                if let Fcall::Rwalk { qids } = r {
                    let want = path.as_ref().map_or(&[][..], |(_, ids)| &ids[..]);
                    let got = qids.as_slice();
                    pwalked = got.len() == want.len();
                    same = got.iter().zip(want).all(|(q, &id)| q.path == id);
                }
            }
            _ if i == first => walked = matches!(r, Fcall::Rwalk { .. }),
            _ if i == first + 1 => {
                opened = match r {
                    Fcall::Rlopen { .. } => Ok(()),
                    r => Err(err_of(&r)),
                }
            }
            _ => {
                got = match r {
                    Fcall::Rread { data } => {
                        let n = data.0.len().min(count);
                        buf[..n].copy_from_slice(&data.0[..n]);
                        Ok(n)
                    }
                    r => Err(err_of(&r)),
                }
            }
        });
        // The node's fid: held already, or the path walk's, installed
        // (pinned for the open, as `pin` does).
        let held = match pf {
            None => Some(pinned),
            Some(pf) => {
                drop(pinned);
                if !(pwalked && same) || sent.is_err() {
                    let _ = self.abandon(pf, pwalked, Errno::ESTALE);
                    None
                } else {
                    let installed = self.nodes.lock().install(node.0, pf);
                    match installed {
                        Some((fid, surplus)) => {
                            if surplus {
                                self.clunk(pf);
                            }
                            Some(Pin {
                                fs: self,
                                id: node.0,
                                fid,
                            })
                        }
                        None => {
                            self.clunk(pf);
                            None
                        }
                    }
                }
            }
        };
        let Some(pin) = held else {
            return Err(self.abandon(nf, walked, Errno::ESTALE));
        };
        if let Err(e) = sent.and(opened) {
            drop(pin);
            return Err(self.abandon(nf, walked, e));
        }
        let fh = FileHandle(nf as u64);
        self.opened(nf, node.0, flags);
        let first = match got {
            Ok(n) => Ok(n),
            // Read before the open: a server that runs a fid's requests
            // in parallel (walkfs serve before it ordered opens). Read
            // again, now that it is open.
            Err(Errno::EBADF) => self.read(node, fh, off, &mut buf[..count]),
            Err(e) => Err(e),
        };
        // Kept until `release`, as `open` keeps it.
        pin.keep();
        if pf.is_some() {
            self.trim();
        }
        let n = match first {
            Ok(n) => n,
            Err(e) => {
                self.release(node, fh);
                return Err(e);
            }
        };
        if n < count || count == buf.len() {
            return Ok((fh, n));
        }
        match self.read(node, fh, off + n as u64, &mut buf[n..]) {
            Ok(more) => Ok((fh, n + more)),
            Err(e) => {
                self.release(node, fh);
                Err(e)
            }
        }
    }

    fn read(&self, _node: NodeId, fh: FileHandle, off: u64, buf: &mut [u8]) -> Result<usize> {
        let fid = u32::try_from(fh.0).map_err(|_| Errno::EBADF)?;
        let mut done = 0;
        while done < buf.len() {
            let want = (buf.len() - done).min(self.iounit as usize) as u32;
            let n = self.rpc.call(
                Fcall::Tread {
                    fid,
                    offset: off + done as u64,
                    count: want,
                },
                |r| match r {
                    Fcall::Rread { data } => {
                        let n = data.0.len().min(buf.len() - done);
                        buf[done..done + n].copy_from_slice(&data.0[..n]);
                        Ok(n)
                    }
                    r => Err(err_of(&r)),
                },
            )?;
            done += n;
            if n < want as usize {
                break;
            }
        }
        Ok(done)
    }

    fn write(&self, _node: NodeId, fh: FileHandle, off: u64, data: &[u8]) -> Result<usize> {
        let fid = u32::try_from(fh.0).map_err(|_| Errno::EBADF)?;
        let mut done = 0;
        while done < data.len() {
            let chunk = &data[done..(done + self.iounit as usize).min(data.len())];
            let n = self.rpc.call(
                Fcall::Twrite {
                    fid,
                    offset: off + done as u64,
                    data: p9::Data(chunk),
                },
                |r| match r {
                    Fcall::Rwrite { count } => Ok(count as usize),
                    r => Err(err_of(&r)),
                },
            )?;
            done += n;
            if n < chunk.len() {
                break;
            }
        }
        Ok(done)
    }

    fn release(&self, node: NodeId, fh: FileHandle) {
        if let Ok(fid) = u32::try_from(fh.0) {
            self.opens.lock().remove(&fid);
            self.clunk(fid);
        }
        // The pin `open` or `create` kept.
        let gone = self.nodes.lock().unpin(node.0);
        if let Some(fid) = gone {
            self.clunk(fid);
        }
        self.trim();
    }

    fn mkdir(&self, parent: NodeId, name: &[u8], mode: u32, owner: Owner) -> Result<Entry> {
        let dir = self.pin(parent)?;
        self.simple(Fcall::Tmkdir {
            dfid: dir.fid,
            name: Str(name),
            mode,
            gid: owner.gid,
        })?;
        let mut e = self.entry_of(parent, dir.fid, name)?;
        self.own_node(e.node, owner, &mut e.attr);
        Ok(e)
    }

    fn symlink(&self, parent: NodeId, name: &[u8], target: &[u8], owner: Owner) -> Result<Entry> {
        let dir = self.pin(parent)?;
        self.simple(Fcall::Tsymlink {
            fid: dir.fid,
            name: Str(name),
            symtgt: Str(target),
            gid: owner.gid,
        })?;
        let mut e = self.entry_of(parent, dir.fid, name)?;
        self.own_node(e.node, owner, &mut e.attr);
        Ok(e)
    }

    fn mknod(
        &self,
        parent: NodeId,
        name: &[u8],
        mode: u32,
        rdev: u64,
        owner: Owner,
    ) -> Result<Entry> {
        let dir = self.pin(parent)?;
        // Tmknod carries the type bits in mode, as Linux's v9fs sends it.
        self.simple(Fcall::Tmknod {
            dfid: dir.fid,
            name: Str(name),
            mode,
            major: libc::major(rdev as libc::dev_t),
            minor: libc::minor(rdev as libc::dev_t),
            gid: owner.gid,
        })?;
        let mut e = self.entry_of(parent, dir.fid, name)?;
        self.own_node(e.node, owner, &mut e.attr);
        Ok(e)
    }

    fn link(&self, node: NodeId, newparent: NodeId, newname: &[u8]) -> Result<Entry> {
        let dir = self.pin(newparent)?;
        let file = self.pin(node)?;
        self.simple(Fcall::Tlink {
            dfid: dir.fid,
            fid: file.fid,
            name: Str(newname),
        })?;
        self.entry_of(newparent, dir.fid, newname)
    }

    fn unlink(&self, parent: NodeId, name: &[u8]) -> Result<()> {
        let dir = self.pin(parent)?;
        self.remove(dir.fid, name, 0)
    }

    fn rmdir(&self, parent: NodeId, name: &[u8]) -> Result<()> {
        self.remove(self.pin(parent)?.fid, name, p9::AT_REMOVEDIR)
    }

    fn rename(
        &self,
        parent: NodeId,
        name: &[u8],
        newparent: NodeId,
        newname: &[u8],
        flags: u32,
    ) -> Result<()> {
        let (dpin, npin) = (self.pin(parent)?, self.pin(newparent)?);
        let (dir, newdir) = (dpin.fid, npin.fid);
        match flags {
            0 => {}
            // 9P2000.L's renames take no flags. RENAME_NOREPLACE is asked
            // as a walk first: exact against this client's own changes,
            // a window against another client's create of the same name.
            walkfs_fsapi::RENAME_NOREPLACE => {
                if let Ok((f, _)) = self.walk_getattr(newdir, one(newname)) {
                    self.clunk(f);
                    return Err(Errno::EEXIST);
                }
            }
            // An exchange cannot be built from 9P calls atomically
            // (Linux's 9p client refuses it too).
            _ => return Err(Errno::EINVAL),
        }
        let r = match self.simple(Fcall::Trenameat {
            olddirfid: dir,
            oldname: Str(name),
            newdirfid: newdir,
            newname: Str(newname),
        }) {
            // Older servers (diod 1.0) know only Trename, on a fid of the
            // file itself.
            Err(Errno::EOPNOTSUPP) => {
                let (nf, _) = self.walk_getattr(dir, one(name))?;
                let r = self.simple(Fcall::Trename {
                    fid: nf,
                    dfid: newdir,
                    name: Str(newname),
                });
                self.clunk(nf);
                r
            }
            r => {
                if r.is_ok() {
                    self.renameat_ok.store(true, Relaxed);
                }
                r
            }
        };
        r?;
        // The moved file's node (if we hold one) is now found under the
        // new name: learn which file that is, so a walk back to it (once
        // its fid is released) takes the new path. The new fid is kept.
        if let Ok((nf, attr)) = self.walk_getattr(newdir, one(newname)) {
            let (kept, gone) = {
                let mut n = self.nodes.lock();
                if n.by_id.contains_key(&attr.ino) {
                    n.moved(attr.ino, newparent.0, newname);
                    let kept = matches!(n.install(attr.ino, nf), Some((_, false)));
                    // `install` pinned it for us; this call is done with it.
                    (kept, n.unpin(attr.ino))
                } else {
                    (false, None)
                }
            };
            if !kept {
                self.clunk(nf);
            }
            if let Some(f) = gone {
                self.clunk(f);
            }
            self.trim();
        }
        Ok(())
    }

    fn readdir(&self, node: NodeId) -> Result<Vec<DirEntry>> {
        let fid = self.open_fid(self.pin(node)?.fid, libc::O_RDONLY as u32)?;
        let mut out = Vec::new();
        let mut offset = 0u64;
        let r = loop {
            let got = self.rpc.call(
                Fcall::Treaddir {
                    fid,
                    offset,
                    count: self.iounit,
                },
                |r| match r {
                    Fcall::Rreaddir { data } => {
                        let mut n = 0;
                        for e in p9::dirents(data.0) {
                            let e = e.map_err(|_| Errno::EPROTO)?;
                            offset = e.offset;
                            n += 1;
                            if e.name == b"." || e.name == b".." {
                                continue;
                            }
                            out.push(DirEntry {
                                name: e.name.to_vec(),
                                ino: e.qid.path,
                                kind: kind_of_dtype(e.ty).unwrap_or(FileType::Regular),
                            });
                        }
                        Ok(n)
                    }
                    r => Err(err_of(&r)),
                },
            );
            match got {
                Ok(0) => break Ok(()),
                Ok(_) => {}
                Err(e) => break Err(e),
            }
        };
        self.clunk(fid);
        r.map(|()| out)
    }

    fn listings_complete(&self) -> bool {
        true
    }

    fn readdir_plus(&self, node: NodeId) -> Option<Result<Vec<walkfs_fsapi::DirPlus>>> {
        if !self.dirplus.load(Relaxed) {
            return None;
        }
        match self.listing(node) {
            Ok(l) => Some(Ok(l)),
            // A server without the extension (diod: ENODATA or
            // EOPNOTSUPP; others may say it otherwise).
            Err(
                e @ (Errno::EOPNOTSUPP
                | Errno::ENODATA
                | Errno::EINVAL
                | Errno::ENOSYS
                | Errno::ENOENT
                | Errno::EPROTO),
            ) => {
                tracing::info!("9p server lists no attributes with entries ({e}): using Treaddir");
                self.dirplus.store(false, Relaxed);
                None
            }
            // Too large a listing, or one refused (EACCES): Treaddir says
            // what it says, this once.
            Err(_) => None,
        }
    }

    /// Only over a server that keeps a connection's order: then the
    /// listing reflects every change submitted before it.
    fn list_ahead(&self, node: NodeId) -> Option<Box<dyn walkfs_fsapi::ListAhead>> {
        if !self.ordered || !self.can_batch_listing() {
            return None;
        }
        let need = self.nodes.lock().need(node.0)?;
        let listing = self.ask_listing(node.0, need).ok()??;
        Some(Box::new(ahead::Ahead {
            listing: Some(listing),
            dir: node,
            rpc: Arc::clone(&self.rpc),
            fids: Arc::clone(&self.fids),
            nodes: Arc::clone(&self.nodes),
        }))
    }

    fn statfs(&self, node: NodeId) -> Result<StatFs> {
        self.rpc.call(
            Fcall::Tstatfs {
                fid: self.pin(node)?.fid,
            },
            |r| match r {
                Fcall::Rstatfs { st } => Ok(StatFs {
                    fs_type: st.ty as i64,
                    bsize: st.bsize as u64,
                    blocks: st.blocks,
                    bfree: st.bfree,
                    bavail: st.bavail,
                    files: st.files,
                    ffree: st.ffree,
                    namelen: st.namelen as u64,
                    frsize: st.bsize as u64,
                }),
                r => Err(err_of(&r)),
            },
        )
    }

    fn kind(&self) -> &'static str {
        "9p"
    }

    fn rpc_stats(&self) -> Option<Stats> {
        Some(self.stats())
    }

    fn fid_stats(&self) -> Option<FidStats> {
        Some(P9Fs::fid_stats(self))
    }

    fn reset_stats(&self) {
        P9Fs::reset_stats(self)
    }
}

#[cfg(test)]
mod join_tests {
    use std::sync::{Arc, Mutex};

    use walkfs_fsapi::{Done, Errno};

    use super::Join;

    #[test]
    fn one_outcome_once_every_part_is_in_with_the_first_failure() {
        let got: Arc<Mutex<Vec<Result<(), Errno>>>> = Arc::default();
        let sink = Arc::clone(&got);
        let done: Done = Box::new(move |r| sink.lock().expect("lock").push(r));
        let j = Join::new(done, 3);
        let (a, b) = (j.part(), j.part());
        a(Ok(()));
        b(Err(Errno::ENOSPC));
        assert!(
            got.lock().expect("lock").is_empty(),
            "reported before the last part"
        );
        j.unsent(Errno::ENOTCONN);
        assert_eq!(*got.lock().expect("lock"), [Err(Errno::ENOSPC)]);
    }
}
