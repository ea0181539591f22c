//! Fids (Linux's fs/9p/fid.c): fid numbers handed out and given back,
//! a node's fid pinned for a call, the walk back to a node whose fid was
//! released, and the node table's bound on the fids it keeps.

use std::sync::atomic::{AtomicU32, Ordering::Relaxed};

use parking_lot::Mutex;
use walkfs_fsapi::{Attr, Errno, FidStats, NodeId, Result};
use walkfs_p9::{self as p9, Fcall, Names};

use crate::nodes::Need;
use crate::wire::err_of;
use crate::{rpc, P9Fs};
#[cfg(doc)]
use walkfs_fsapi::FileSystem;

/// Fid numbers: handed out, and given back for reuse.
pub(crate) struct Fids {
    pub(crate) next: AtomicU32,
    pub(crate) free: Mutex<Vec<u32>>,
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

/// A node's fid, held for one call (or an open file's life).
pub(crate) struct Pin<'a> {
    pub(crate) fs: &'a P9Fs,
    pub(crate) id: u64,
    pub(crate) fid: u32,
}

impl Pin<'_> {
    /// Keep the fid pinned after this guard: an open file holds it until
    /// [`FileSystem::release`].
    pub(crate) fn keep(self) {
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

impl P9Fs {
    pub(crate) fn alloc_fid(&self) -> u32 {
        self.fids.alloc()
    }

    pub(crate) fn free_fid(&self, fid: u32) {
        self.fids.free(fid);
    }

    pub(crate) fn clunk(&self, fid: u32) {
        self.fids.clunk(&self.rpc, fid);
    }

    /// Give up a fid a failed chain was making: clunk it if the server
    /// made it (the walk succeeded), else just reuse its number. Returns
    /// the chain's error.
    pub(crate) fn abandon(&self, nf: u32, walked: bool, e: Errno) -> Errno {
        if walked {
            self.clunk(nf);
        } else {
            self.free_fid(nf);
        }
        e
    }

    /// Pin node `id`'s fid, or say how to walk to it: along the names the
    /// vfs holds for it, asked with the table's lock dropped (the vfs
    /// answers under a lock of its own). `None`: the node is unknown, or
    /// no name the vfs holds leads to it (`ESTALE` for the caller).
    pub(crate) fn need(&self, id: u64) -> Option<Need> {
        let names = {
            let mut n = self.nodes.lock();
            if let Some(fid) = n.pin_held(id) {
                return Some(Need::Held(fid));
            }
            if !n.by_id.contains_key(&id) {
                return None;
            }
            n.names.clone()?
        };
        let path = names.path_of(NodeId(id))?;
        self.nodes.lock().need_via(id, &path)
    }

    /// Pin `node`'s fid for the length of a call, walking to the node
    /// again when its fid was released.
    pub(crate) fn pin(&self, node: NodeId) -> Result<Pin<'_>> {
        let need = self.need(node.0).ok_or(Errno::ESTALE)?;
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
    pub(crate) fn trim(&self) {
        let gone = self.nodes.lock().trim();
        for fid in gone {
            self.clunk(fid);
        }
    }

    /// Record the node `fid` walked to; its id is its qid path.
    pub(crate) fn adopt(&self, fid: u32, attr: &Attr) -> NodeId {
        let surplus = self.nodes.lock().adopt(attr.ino, attr.generation(), fid);
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
}
