//! Opening files (after Linux's fs/9p/vfs_file.c): an open file
//! remembered for a reconnect, and the walk, open and first read sent
//! back to back.

use std::sync::atomic::Ordering::Relaxed;

use walkfs_fsapi::{Errno, FileHandle, FileSystem, NodeId, OpenFlags, Result};
use walkfs_p9::{self as p9, Fcall, Names};

use crate::fid::Pin;
use crate::nodes::Need;
use crate::wire::err_of;
use crate::{recover, P9Fs};

impl P9Fs {
    /// Open file `fid` of node `id`: opened again after a reconnect.
    pub(crate) fn opened(&self, fid: u32, id: u64, flags: OpenFlags) {
        if self.rpc.reconnect().is_some() {
            self.opens
                .lock()
                .insert(fid, (id, recover::reopen_flags(flags.0)));
        }
    }

    /// The body of [`caps::Remote::open_read`] (see there).
    pub(crate) fn open_read_batched(
        &self,
        node: NodeId,
        flags: OpenFlags,
        off: u64,
        buf: &mut [u8],
    ) -> Result<(FileHandle, usize)> {
        if !self.pipeline.load(Relaxed) {
            return walkfs_fsapi::open_then_read(self, node, flags, off, buf);
        }
        let need = self.need(node.0).ok_or(Errno::ESTALE)?;
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
}
