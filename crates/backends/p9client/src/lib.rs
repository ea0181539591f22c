//! A 9P2000.L client as a walkfs backend: the export of a 9P server (walkfs
//! serve, diod, ...) as a [`FileSystem`], so the vfs and its caches sit on
//! top of a remote tree.
//!
//! A node is a fid, walked once and kept until the vfs forgets the node
//! (fids are reused instead of re-walking). Nodes are deduplicated by qid
//! path, so hard links and repeated lookups share one fid. Where a call
//! needs a chain of requests that name the same new fid (walk + getattr,
//! walk + open), the requests go out back to back in one write and cost
//! one round trip; a server must handle a fid's requests in order, as
//! `walkfs serve` does (it resolves fids in arrival order).

mod notify;
mod rpc;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
use std::sync::Arc;

use parking_lot::Mutex;
use walkfs_fsapi::{
    Attr, DirEntry, Entry, Errno, FileHandle, FileSystem, FileType, NodeId, OpenFlags, Owner,
    Result, SetAttr, StatFs, TimeSet, Timespec,
};
use walkfs_p9::{self as p9, Addr, Fcall, Names, Str, IOHDRSZ, NOFID};

pub use rpc::{Counters, Stats};

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
}

impl Default for Config {
    fn default() -> Config {
        Config {
            msize: 512 * 1024,
            // SAFETY: geteuid cannot fail.
            uid: unsafe { libc::geteuid() },
            aname: String::new(),
            secret: None,
            notify: false,
        }
    }
}

pub(crate) const ROOT_FID: u32 = 0;
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

pub(crate) struct Nodes {
    /// fid -> (qid path, references the vfs holds).
    by_fid: HashMap<u32, (u64, u64)>,
    /// qid path -> fid.
    pub(crate) by_qid: HashMap<u64, u32>,
}

/// A 9P client mount.
pub struct P9Fs {
    rpc: Arc<rpc::Rpc>,
    nodes: Arc<Mutex<Nodes>>,
    /// The qid path of the root (it has no entry in `Nodes`).
    root_ino: u64,
    /// The server agreed to report changes.
    notify: bool,
    next_fid: AtomicU32,
    free_fids: Mutex<Vec<u32>>,
    iounit: u32,
    /// Send dependent requests back to back. Turned off for good the
    /// first time the server shows it does not keep a fid's requests in
    /// order (diod runs them concurrently and answers "invalid fid").
    pipeline: std::sync::atomic::AtomicBool,
    /// Who we attached as: new files are theirs on the server, so one
    /// made for someone else is handed over (when we are root there).
    attach_uid: u32,
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
        has_acl: false,
    }
}

pub(crate) fn err_of(f: &Fcall<'_>) -> Errno {
    match f {
        Fcall::Rlerror { ecode } => Errno(*ecode as i32),
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
        // Set-id bits the new file was made with go along (a chown alone
        // would clear them); a symlink's mode cannot be set at all.
        let keep_mode = attr.mode & 0o6000 != 0 && attr.mode & libc::S_IFMT != libc::S_IFLNK;
        let set = p9::SetAttr {
            valid: p9::SETATTR_UID | if keep_mode { p9::SETATTR_MODE } else { 0 },
            uid: owner.uid,
            mode: attr.mode & 0o7777,
            ..Default::default()
        };
        match self.simple(Fcall::Tsetattr { fid, attr: set }) {
            Ok(()) => attr.uid = owner.uid,
            Err(e) => tracing::debug!("chown of a new file to {}: {e}", owner.uid),
        }
    }

    /// Connect to `addr` (`unix:PATH` or `tcp:HOST:PORT`) and attach.
    pub fn connect(addr: &str, cfg: &Config) -> Result<P9Fs> {
        let a = Addr::parse(addr).ok_or(Errno::EINVAL)?;
        let stream = a.connect().map_err(Errno::from)?;
        P9Fs::on_stream(stream, cfg)
    }

    /// Attach over an already connected stream.
    pub fn on_stream(stream: p9::Stream, cfg: &Config) -> Result<P9Fs> {
        let rpc = rpc::Rpc::start(stream, cfg.msize.max(p9::MIN_MSIZE))?;
        let afid = match &cfg.secret {
            Some(secret) => authenticate(&rpc, cfg, secret)?,
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
        let root_ino = attached?;
        let notify = cfg.notify && notify::subscribe(&rpc);
        let iounit = rpc.msize - IOHDRSZ;
        Ok(P9Fs {
            rpc,
            nodes: Arc::new(Mutex::new(Nodes {
                by_fid: HashMap::new(),
                by_qid: HashMap::new(),
            })),
            root_ino,
            notify,
            next_fid: AtomicU32::new(ROOT_FID + 1),
            free_fids: Mutex::new(Vec::new()),
            iounit,
            pipeline: std::sync::atomic::AtomicBool::new(true),
            attach_uid: cfg.uid,
        })
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
        if let Some(f) = self.free_fids.lock().pop() {
            return f;
        }
        self.next_fid.fetch_add(1, Relaxed)
    }

    fn free_fid(&self, fid: u32) {
        self.free_fids.lock().push(fid);
    }

    fn clunk(&self, fid: u32) {
        self.rpc.send_forget(Fcall::Tclunk { fid });
        self.free_fid(fid);
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

    fn fid(node: NodeId) -> Result<u32> {
        u32::try_from(node.0).map_err(|_| Errno::EBADF)
    }

    /// Record the node `fid` walked to; returns the node id to use (an
    /// existing fid for the same file, the new one being clunked).
    fn adopt(&self, fid: u32, attr: &Attr) -> NodeId {
        let mut n = self.nodes.lock();
        if let Some(&old) = n.by_qid.get(&attr.ino) {
            if let Some(e) = n.by_fid.get_mut(&old) {
                e.1 += 1;
                drop(n);
                self.clunk(fid);
                return NodeId(old as u64);
            }
        }
        n.by_qid.insert(attr.ino, fid);
        n.by_fid.insert(fid, (attr.ino, 1));
        NodeId(fid as u64)
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

    fn entry_of(&self, parent: u32, name: &[u8]) -> Result<Entry> {
        let (nf, attr) = self.walk_getattr(parent, one(name))?;
        Ok(Entry {
            node: self.adopt(nf, &attr),
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
            Err(Errno::EOPNOTSUPP) => {
                let (nf, _) = self.walk_getattr(dir, one(name))?;
                let r = self.simple(Fcall::Tremove { fid: nf });
                self.free_fid(nf);
                r
            }
            r => r,
        }
    }

    fn simple(&self, req: Fcall<'_>) -> Result<()> {
        self.rpc.call(req, |_| Ok(()))
    }
}

impl Drop for P9Fs {
    /// The notification thread holds the connection while it waits for
    /// a change: end the connection for it.
    fn drop(&mut self) {
        self.rpc.shutdown();
    }
}

fn kind_of_dtype(t: u8) -> Option<FileType> {
    FileType::from_mode((t as u32) << 12)
}

impl FileSystem for P9Fs {
    fn root(&self) -> NodeId {
        NodeId(ROOT_FID as u64)
    }

    fn lookup(&self, parent: NodeId, name: &[u8]) -> Result<Entry> {
        self.entry_of(P9Fs::fid(parent)?, name)
    }

    /// Changes come from the server (walkfs serve's notification
    /// extension), when it offered them at attach.
    fn watch_changes(&self, sink: Arc<dyn walkfs_fsapi::ChangeSink>) -> Result<()> {
        if !self.notify {
            return Err(Errno::EOPNOTSUPP);
        }
        notify::start(
            Arc::downgrade(&self.rpc),
            self.nodes.clone(),
            self.root_ino,
            sink,
        )
    }

    fn forget(&self, node: NodeId, count: u64) {
        let Ok(fid) = P9Fs::fid(node) else { return };
        if fid == ROOT_FID {
            return;
        }
        let mut n = self.nodes.lock();
        let gone = match n.by_fid.get_mut(&fid) {
            Some(e) if e.1 <= count => Some(e.0),
            Some(e) => {
                e.1 -= count;
                None
            }
            None => None,
        };
        if let Some(q) = gone {
            n.by_fid.remove(&fid);
            if n.by_qid.get(&q) == Some(&fid) {
                n.by_qid.remove(&q);
            }
            drop(n);
            self.clunk(fid);
        }
    }

    fn getattr(&self, node: NodeId) -> Result<Attr> {
        self.rpc.call(
            Fcall::Tgetattr {
                fid: P9Fs::fid(node)?,
                request_mask: p9::GETATTR_BASIC,
            },
            |r| match r {
                Fcall::Rgetattr { st } => Ok(attr_of(&st)),
                r => Err(err_of(&r)),
            },
        )
    }

    fn setattr(&self, node: NodeId, set: &SetAttr) -> Result<Attr> {
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
        let fid = P9Fs::fid(node)?;
        self.simple(Fcall::Tsetattr { fid, attr: a })?;
        self.getattr(node)
    }

    fn readlink(&self, node: NodeId) -> Result<Vec<u8>> {
        self.rpc.call(
            Fcall::Treadlink {
                fid: P9Fs::fid(node)?,
            },
            |r| match r {
                Fcall::Rreadlink { target } => Ok(target.0.to_vec()),
                r => Err(err_of(&r)),
            },
        )
    }

    fn open(&self, node: NodeId, flags: OpenFlags) -> Result<FileHandle> {
        let f = self.open_fid(P9Fs::fid(node)?, flags.0 as u32)?;
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
        let dir = P9Fs::fid(parent)?;
        let nf = self.clone_then(
            dir,
            |nf| Fcall::Tlcreate {
                fid: nf,
                name: Str(name),
                flags: (flags.0 | libc::O_CREAT | libc::O_EXCL) as u32,
                mode: mode & 0o7777,
                gid: owner.gid,
            },
            |r| matches!(r, Fcall::Rlcreate { .. }),
        )?;
        match self.entry_of(dir, name) {
            Ok(mut e) => {
                self.own(nf, owner, &mut e.attr);
                Ok((e, FileHandle(nf as u64)))
            }
            Err(e) => {
                self.clunk(nf);
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

    fn release(&self, _node: NodeId, fh: FileHandle) {
        if let Ok(fid) = u32::try_from(fh.0) {
            self.clunk(fid);
        }
    }

    fn mkdir(&self, parent: NodeId, name: &[u8], mode: u32, owner: Owner) -> Result<Entry> {
        let dfid = P9Fs::fid(parent)?;
        self.simple(Fcall::Tmkdir {
            dfid,
            name: Str(name),
            mode,
            gid: owner.gid,
        })?;
        let mut e = self.entry_of(dfid, name)?;
        self.own(P9Fs::fid(e.node)?, owner, &mut e.attr);
        Ok(e)
    }

    fn symlink(&self, parent: NodeId, name: &[u8], target: &[u8], owner: Owner) -> Result<Entry> {
        let fid = P9Fs::fid(parent)?;
        self.simple(Fcall::Tsymlink {
            fid,
            name: Str(name),
            symtgt: Str(target),
            gid: owner.gid,
        })?;
        let mut e = self.entry_of(fid, name)?;
        self.own(P9Fs::fid(e.node)?, owner, &mut e.attr);
        Ok(e)
    }

    fn link(&self, node: NodeId, newparent: NodeId, newname: &[u8]) -> Result<Entry> {
        let dfid = P9Fs::fid(newparent)?;
        self.simple(Fcall::Tlink {
            dfid,
            fid: P9Fs::fid(node)?,
            name: Str(newname),
        })?;
        self.entry_of(dfid, newname)
    }

    fn unlink(&self, parent: NodeId, name: &[u8]) -> Result<()> {
        self.remove(P9Fs::fid(parent)?, name, 0)
    }

    fn rmdir(&self, parent: NodeId, name: &[u8]) -> Result<()> {
        self.remove(P9Fs::fid(parent)?, name, p9::AT_REMOVEDIR)
    }

    fn rename(
        &self,
        parent: NodeId,
        name: &[u8],
        newparent: NodeId,
        newname: &[u8],
        flags: u32,
    ) -> Result<()> {
        let (dir, newdir) = (P9Fs::fid(parent)?, P9Fs::fid(newparent)?);
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
        match self.simple(Fcall::Trenameat {
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
            r => r,
        }
    }

    fn readdir(&self, node: NodeId) -> Result<Vec<DirEntry>> {
        let fid = self.open_fid(P9Fs::fid(node)?, libc::O_RDONLY as u32)?;
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

    fn statfs(&self, node: NodeId) -> Result<StatFs> {
        self.rpc.call(
            Fcall::Tstatfs {
                fid: P9Fs::fid(node)?,
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
}
