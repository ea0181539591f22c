//! Chains of requests that name the same new fid (walk + getattr, walk +
//! open, clone + create + getattr), sent back to back in one write while
//! the server keeps a fid's requests in order, one at a time once it
//! shows it does not; and the getattr sent behind the caller.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use parking_lot::Mutex;
use walkfs_fsapi::{Attr, Entry, Errno, NodeId, OpenFlags, Result};
use walkfs_p9::{self as p9, Fcall, Names, Str};

use crate::nodes::Need;
use crate::wire::{attr_of, err_of};
use crate::P9Fs;
#[cfg(doc)]
use walkfs_fsapi::FileSystem;

pub(crate) fn one<'a>(name: &'a [u8]) -> Names<'a> {
    // One name always fits.
    Names::new(&[name]).unwrap_or_default()
}

/// A [`caps::Ordered::getattr_behind`] under way: answers still to come,
/// the attributes, and where they go (taken by whoever finishes it).
struct Behind {
    left: usize,
    attr: Result<Attr>,
    then: Option<walkfs_fsapi::AttrThen>,
}

impl P9Fs {
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
    pub(crate) fn walk_getattr(&self, from: u32, names: Names<'_>) -> Result<(u32, Attr)> {
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
                    request_mask: p9::GETATTR_BASIC | p9::GETATTR_BTIME,
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
    pub(crate) fn create_getattr(
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
                    request_mask: p9::GETATTR_BASIC | p9::GETATTR_BTIME,
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
                request_mask: p9::GETATTR_BASIC | p9::GETATTR_BTIME,
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
    pub(crate) fn open_fid(&self, node: u32, flags: u32) -> Result<u32> {
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

    /// Look `name` up in the directory whose fid is `pfid`.
    pub(crate) fn entry_of(&self, pfid: u32, name: &[u8]) -> Result<Entry> {
        let (nf, attr) = self.walk_getattr(pfid, one(name))?;
        Ok(Entry {
            node: self.adopt(nf, &attr),
            attr,
        })
    }

    /// The body of [`caps::Ordered::getattr_behind`] (see there).
    pub(crate) fn send_getattr_behind(&self, node: NodeId, then: walkfs_fsapi::AttrThen) -> bool {
        // Not while the connection is being made again: the recovery
        // walks the table's fids to their numbers on the new server, and
        // a node this let go of meanwhile would free a number the new
        // server is given (the next file made with it would fail).
        if self.rpc.is_dead() {
            return false;
        }
        let Some(need) = self.need(node.0) else {
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
}
