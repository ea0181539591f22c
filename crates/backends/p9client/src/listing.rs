//! Directory listings (after Linux's fs/9p/vfs_dir.c): listed with
//! attributes (p9::dirplus), asked for now or ahead (ahead.rs), walking to
//! the directory in the same write when it holds no fid.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use parking_lot::Mutex;
use walkfs_fsapi::{Entry, Errno, NodeId, Result};
use walkfs_p9::{self as p9, Fcall, Names, Str};

use crate::fid::Pin;
use crate::nodes::{Need, Nodes};
use crate::wire::{attr_of, err_of};
use crate::{ahead, P9Fs};

/// Decode a `walkfs.readdirplus` listing of `dir`, and count each entry's
/// node (a later call walks to it by the name the vfs then holds).
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
    // A node holding a fid no call uses, listed elsewhere than the vfs
    // holds it: that fid may name an earlier file of the same qid path.
    // (The vfs is asked with the table's lock dropped.)
    let (idle, names, root) = {
        let n = nodes.lock();
        let idle: Vec<usize> = (0..out.len())
            .filter(|&i| n.holds_idle_fid(out[i].entry.node.0))
            .collect();
        (idle, n.names.clone(), n.root())
    };
    let mut moved = vec![false; out.len()];
    for i in idle {
        let p = &out[i];
        let held = names.as_ref().and_then(|m| m.path_of(p.entry.node));
        moved[i] = !held.is_some_and(|path| {
            let parent = path.get(1).map_or(root, |a| a.0 .0);
            parent == dir.0 && path.first().is_some_and(|f| *f.1 == *p.name)
        });
    }
    let mut n = nodes.lock();
    released.extend(
        out.iter()
            .zip(moved)
            .filter_map(|(p, m)| n.adopt_listed(p.entry.node.0, m, p.entry.attr.generation())),
    );
    Ok(out)
}

impl P9Fs {
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

    pub(crate) fn listing(&self, node: NodeId) -> Result<Vec<walkfs_fsapi::DirPlus>> {
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
    pub(crate) fn can_batch_listing(&self) -> bool {
        self.pipeline.load(Relaxed) && self.dirplus.load(Relaxed)
    }

    /// Ask, without waiting, for the listing of `id` by walking to it as
    /// `need` (pinned, unpinned here) says: one write of walk, listing and
    /// first read (ahead.rs). `None` when the path is too long for one
    /// walk.
    pub(crate) fn ask_listing(&self, id: u64, need: Need) -> Result<Option<Arc<ahead::Listing>>> {
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
        let need = self.need(node.0)?;
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
}
