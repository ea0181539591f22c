//! Riding through a lost connection: dial again, attach, and rebuild on
//! the new connection every fid the client holds, then let the waiting
//! calls and the unanswered changes go (rpc.rs).
//!
//! What the client rebuilds, in this order, before anything else is sent:
//! 1. the attach (the root must be the same file as before: a server that
//!    now exports another tree is refused, and the mount fails with
//!    `ENOTCONN` when the bound runs out);
//! 2. its granted inode numbers, with their tickets (p9::inogrant): a
//!    replayed create names the number it was given, and the server
//!    recognizes a file it already made with it;
//! 3. the notification subscription;
//! 4. every node's fid, walked from the root by the names the node table
//!    remembers, each step checked against the qid remembered (inode
//!    numbers are stable across server restarts for the files this client
//!    made, and host numbers are for the rest): a file renamed, replaced
//!    or removed meanwhile loses its fid, and its next use walks again;
//! 5. every open file: walked to, and opened again with its flags (less
//!    create, exclusive and truncate);
//! 6. then the changes not yet answered are sent again, in order, and the
//!    gate opens.
//!
//! Fids the unanswered changes make themselves (a create's open fid, the
//! walk to a new file) are left for the replay to make. Leases are gone
//! with the connection (recalled here), and the vfs is told that
//! anything may have changed while it could not hear.
//!
//! What cannot be carried over: a file open while it was unlinked (no
//! name leads to it any more) gets `EBADF`/`ESTALE` on its next call; a
//! byte-range lock is the client kernel's (9P locks are advisory and
//! walkfs serve keeps none); a file the host changed during the outage is
//! seen changed, as after any missed notification.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use walkfs_fsapi::{Change, ChangeSink, Errno, Name, Result};
use walkfs_p9::inogrant::Grant;
use walkfs_p9::{self as p9, Fcall, Names, Str, Stream, NOFID};

use crate::lease::Leases;
use crate::nodes::Nodes;
use crate::rpc::Rpc;
use crate::{err_of, Config, Fids, ROOT_FID};

/// Makes a new connection to the server.
pub type Dial = Arc<dyn Fn() -> std::io::Result<Stream> + Send + Sync>;

/// Open files: fid -> (node id, flags to open it again with).
pub(crate) type Opens = Arc<Mutex<HashMap<u32, (u64, u32)>>>;

/// The flags an open file is opened again with.
pub(crate) fn reopen_flags(flags: i32) -> u32 {
    (flags & !(libc::O_CREAT | libc::O_EXCL | libc::O_TRUNC)) as u32
}

/// Everything the recovery needs (shared with the live client).
pub(crate) struct Recovery {
    pub rpc: Weak<Rpc>,
    pub dial: Dial,
    pub cfg: Config,
    pub root_ino: u64,
    pub nodes: Arc<Mutex<Nodes>>,
    pub fids: Arc<Fids>,
    pub opens: Opens,
    /// The locks held, reclaimed once the open files are open again.
    pub locks_held: Arc<crate::locks::Ledger>,
    /// The server takes `flock` locks as such (p9::locks).
    pub flock_ext: bool,
    /// Grants received (the last few: a replayed create may name one of
    /// an earlier range than the one being spent).
    pub tickets: Arc<Mutex<Vec<Grant>>>,
    pub notify: bool,
    pub leases: Arc<Leases>,
    pub sink: Arc<Mutex<Option<Arc<dyn ChangeSink>>>>,
    /// Reconnects done (`walkfs stats`).
    pub count: Arc<std::sync::atomic::AtomicU64>,
}

impl Recovery {
    /// Reconnect until it works or the bound runs out (then the mount
    /// fails for good, as without reconnecting).
    pub fn run(&self) {
        let Some(rpc) = self.rpc.upgrade() else {
            return;
        };
        let bound = rpc.reconnect().unwrap_or_default();
        let until = Instant::now() + bound;
        tracing::warn!("9p: connection lost; reconnecting (programs wait up to {bound:?})");
        let mut pause = Duration::from_millis(20);
        let t0 = Instant::now();
        loop {
            match self.once(&rpc) {
                Ok(()) => break,
                Err(e) => tracing::debug!("9p: reconnect: {e}"),
            }
            if Instant::now() >= until || rpc.is_closed() {
                tracing::error!("9p: no server after {bound:?}: the mount fails from now on");
                rpc.close();
                return;
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(500));
        }
        self.count
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        tracing::warn!("9p: reconnected after {:?}", t0.elapsed());
        // Leases went with the connection; and what changed while nothing
        // could be heard is unknown.
        let sink = self.sink.lock().clone();
        let recalled = self.leases.lose_all();
        for fid in recalled {
            self.fids.free(fid);
        }
        if let Some(sink) = sink {
            sink.recall();
            sink.changed(&[Change::All]);
        }
    }

    fn once(&self, rpc: &Arc<Rpc>) -> Result<()> {
        let stream = (self.dial)().map_err(Errno::from)?;
        rpc.replace(stream)?;
        let root = crate::attach(rpc, &self.cfg)?;
        if root != self.root_ino {
            tracing::error!("9p: the server now exports another tree (root {root:#x})");
            return Err(Errno::ESTALE);
        }
        for g in self.tickets.lock().iter() {
            reclaim(rpc, &self.fids, g);
        }
        if self.notify && crate::notify::subscribe(rpc).is_none() {
            tracing::warn!("9p: notifications not offered after the reconnect");
        }
        // Every change registered from here on waits for the gate.
        rpc.barrier();
        let skip: HashSet<u32> = rpc.pending_newfids().into_iter().collect();
        tracing::debug!("9p: fids the unanswered changes make: {skip:?}");
        let (walked, dropped) = self.nodes_again(rpc, &skip)?;
        let (opened, stale) = self.opens_again(rpc, &skip)?;
        let opens = Arc::clone(&self.opens);
        let nodes = Arc::clone(&self.nodes);
        let (reclaimed, lost) = self.locks_held.reclaim(
            rpc,
            self.flock_ext,
            |fid| opens.lock().get(&fid).map(|o| o.0),
            |node| match crate::nodes::path_from_root(&nodes, node) {
                Some((names, _)) => {
                    let names: Vec<String> = names
                        .iter()
                        .map(|n| String::from_utf8_lossy(n).into_owned())
                        .collect();
                    format!("/{}", names.join("/"))
                }
                None => format!("the file of node {node:#x}"),
            },
        );
        tracing::info!(
            "9p: {walked} fids walked again ({dropped} to walk later), {opened} files \
             opened again ({stale} could not be), {reclaimed} locks reclaimed ({lost} lost)"
        );
        rpc.resume()
    }

    /// Every node's fid, walked again from the root. Returns the fids
    /// walked, and those released (to be walked on their next use).
    fn nodes_again(&self, rpc: &Rpc, skip: &HashSet<u32>) -> Result<(usize, usize)> {
        let held = self.nodes.lock().holding();
        let (mut walked, mut dropped) = (0, 0);
        for (id, fid) in held {
            if skip.contains(&fid) {
                continue;
            }
            let walk = match crate::nodes::path_from_root(&self.nodes, id) {
                Some((names, ids)) => walk_as(rpc, fid, &names, &ids),
                None => Err(Errno::ESTALE),
            };
            match walk {
                Ok(()) => walked += 1,
                Err(Errno::ENOTCONN) => return Err(Errno::ENOTCONN),
                Err(e) => {
                    tracing::debug!("9p: fid {fid} of {id:#x} not walked again: {e}");
                    dropped += 1;
                    if self.nodes.lock().release_fid(id, fid) {
                        self.fids.free(fid);
                    }
                }
            }
        }
        Ok((walked, dropped))
    }

    /// Every open file, walked to and opened again.
    fn opens_again(&self, rpc: &Rpc, skip: &HashSet<u32>) -> Result<(usize, usize)> {
        let opens: Vec<(u32, (u64, u32))> =
            self.opens.lock().iter().map(|(&f, &o)| (f, o)).collect();
        let (mut opened, mut stale) = (0, 0);
        for (fid, (node, flags)) in opens {
            if skip.contains(&fid) {
                continue;
            }
            let Some((names, ids)) = crate::nodes::path_from_root(&self.nodes, node) else {
                stale += 1;
                continue;
            };
            let r = walk_as(rpc, fid, &names, &ids).and_then(|()| {
                let r = rpc.call(Fcall::Tlopen { fid, flags }, |r| match r {
                    Fcall::Rlopen { .. } => Ok(()),
                    r => Err(err_of(&r)),
                });
                if r.is_err() {
                    rpc.send_forget(Fcall::Tclunk { fid });
                }
                r
            });
            match r {
                Ok(()) => opened += 1,
                Err(Errno::ENOTCONN) => return Err(Errno::ENOTCONN),
                Err(e) => {
                    stale += 1;
                    tracing::info!(
                        "9p: open file {fid} of {node:#x} could not be opened again: {e}"
                    );
                }
            }
        }
        Ok((opened, stale))
    }
}

/// Walk from the root to `fid` by `names`, each step landing on the qid
/// path `ids` says. A walk that fails leaves no fid.
fn walk_as(rpc: &Rpc, fid: u32, names: &[Name], ids: &[u64]) -> Result<()> {
    let mut from = ROOT_FID;
    if names.is_empty() {
        return rpc.call(
            Fcall::Twalk {
                fid: ROOT_FID,
                newfid: fid,
                names: Names::default(),
            },
            |r| match r {
                Fcall::Rwalk { .. } => Ok(()),
                r => Err(err_of(&r)),
            },
        );
    }
    for (chunk, want) in names.chunks(p9::MAXWELEM).zip(ids.chunks(p9::MAXWELEM)) {
        let refs: Vec<&[u8]> = chunk.iter().map(|n| &**n).collect();
        let r = rpc.call(
            Fcall::Twalk {
                fid: from,
                newfid: fid,
                names: Names::new(&refs).unwrap_or_default(),
            },
            |r| match r {
                Fcall::Rwalk { qids } => {
                    let got = qids.as_slice();
                    Ok((
                        got.len() == want.len(),
                        got.iter().zip(want).all(|(q, &id)| q.path == id),
                    ))
                }
                r => Err(err_of(&r)),
            },
        );
        let made = from == fid || matches!(r, Ok((true, _)));
        match r {
            Ok((true, true)) => from = fid,
            Ok(_) | Err(_) => {
                if made {
                    rpc.send_forget(Fcall::Tclunk { fid });
                }
                return Err(match r {
                    Err(Errno::ENOTCONN) => Errno::ENOTCONN,
                    _ => Errno::ESTALE,
                });
            }
        }
    }
    Ok(())
}

/// Show the server a range granted before, with its ticket: its numbers
/// are this connection's again.
fn reclaim(rpc: &Rpc, fids: &Fids, g: &Grant) {
    let mut name = p9::inogrant::RECLAIM.to_vec();
    name.extend_from_slice(&g.encode());
    let nf = fids.alloc();
    let r = rpc.call(
        Fcall::Txattrwalk {
            fid: ROOT_FID,
            newfid: nf,
            name: Str(&name),
        },
        |r| match r {
            Fcall::Rxattrwalk { .. } => Ok(()),
            r => Err(err_of(&r)),
        },
    );
    match r {
        Ok(()) => fids.clunk(rpc, nf),
        Err(e) => {
            fids.free(nf);
            tracing::warn!(
                "9p: the server refused the numbers {:#x}+{}: {e}",
                g.base,
                g.count
            );
        }
    }
}

/// The node table's fids that are not the root's (for `held_paths`).
pub(crate) fn is_node_fid(fid: u32) -> bool {
    fid != NOFID && fid != ROOT_FID
}
