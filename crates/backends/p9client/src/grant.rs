//! Inode-number grants (p9::inogrant) and the nodes made with them
//! behind the caller, with the directory leases (p9::lease) asked for as
//! files are made.

use std::sync::Arc;

use walkfs_fsapi::{Done, Errno, FileHandle, Granted, Make, NodeId, Owner, Result, Timespec};
use walkfs_p9::inogrant::Grant;
use walkfs_p9::{self as p9, Fcall, Names, Str};

use crate::pipeline::one;
use crate::submit::Join;
use crate::wire::{err_of, handover};
use crate::{rpc, P9Fs, ROOT_FID};
#[cfg(doc)]
use walkfs_fsapi::FileSystem;

impl P9Fs {
    /// Ask the server for a range of inode numbers (p9::inogrant): one
    /// round trip, about once per 4,096 nodes made. `None` when it grants
    /// none.
    pub(crate) fn ask_grant(&self) -> Option<Grant> {
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
    pub(crate) fn ask_lease(&self, dirfid: u32, lf: u32) {
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

    /// The body of [`caps::Ordered::grant`] (see there).
    pub(crate) fn next_grant(&self, owner: Owner) -> Option<Granted> {
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

    /// The body of [`caps::Ordered::make_behind`] (see there).
    pub(crate) fn send_make_behind(
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
            let s = n.adopt(ino, 0, pf);
            if open.is_some() {
                // Counted as open until `release`, as `create` does.
                let _ = n.pin_held(ino);
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
}
