//! Changes submitted without waiting ([`caps::Ordered::submit`]): sent in
//! order to a server that keeps a connection's order, their outcome
//! delivered from the reader thread; a change sent in parts reports once.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use parking_lot::Mutex;
use walkfs_fsapi::{Deferred, Done, Errno, FileSystem, Result};
use walkfs_p9::{self as p9, Fcall, Str};

use crate::wire::p9_setattr;
use crate::{rpc, P9Fs};

/// One [`Done`] for a change sent in `n` parts: called once every part
/// has finished, with the first failure among them.
pub(crate) struct Join(Arc<Mutex<JoinState>>);

struct JoinState {
    left: usize,
    err: Option<Errno>,
    done: Option<Done>,
}

impl Join {
    pub(crate) fn new(done: Done, n: usize) -> Join {
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
    pub(crate) fn part(&self) -> Done {
        let state = Arc::clone(&self.0);
        Box::new(move |r| Join::finish(&state, r))
    }

    /// A part that was never sent.
    fn unsent(&self, e: Errno) {
        Join::finish(&self.0, Err(e));
    }
}

impl P9Fs {
    /// The body of [`caps::Ordered::submit`] (see there).
    pub(crate) fn submit_op(&self, op: Deferred<'_>, done: Done) -> Result<()> {
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
                node: _,
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
                // takes the path the vfs moves; the server runs the
                // rename first.
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
                // Found under a name the vfs does not hold for it yet: a
                // fid it holds unused is let go (see `adopt_listed`).
                let old = self.nodes.lock().adopt_listed(node.0, true, 0);
                if let Some(fid) = old {
                    self.fids.clunk(&self.rpc, fid);
                }
                Ok(())
            }
        }
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
