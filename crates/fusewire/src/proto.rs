//! A prototype FUSE file system of the hot requests, to measure
//! transports.
//!
//! The tree is synthetic (a root holding `f0` .. `f{N-1}`, every reply
//! with zero timeouts so each `stat(2)` reaches the server), so what is
//! measured is the transport: the kernel's queue, the hand-off to the
//! daemon, the reply, over either of the session's transports
//! ([`crate::session`]).
//!
//! It also shows what the wire allows that fuser does not: a
//! READDIRPLUS entry with node id 0 and a real inode number (names and
//! types without attributes; fuser takes the node id from the
//! attributes' inode number, so it cannot say "no attributes").

use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use crate::abi;
use crate::reply::Reply;
use crate::request::{DirRead, Operation, Request};
use crate::session::{self, Filesystem, Session, SessionInfo};

/// What the server counts: requests answered, by transport.
#[derive(Default, Debug)]
pub struct Counts {
    pub requests: AtomicU64,
    pub lookups: AtomicU64,
    pub getattrs: AtomicU64,
    pub readdirs: AtomicU64,
}

/// The synthetic tree and its server.
pub struct Tree {
    files: u64,
    /// READDIRPLUS entries of files carry no attributes (node id 0).
    bare: bool,
    pub counts: Counts,
}

/// The root's node id.
pub const ROOT: u64 = 1;

impl Tree {
    pub fn new(files: u64, bare: bool) -> Arc<Tree> {
        Arc::new(Tree {
            files,
            bare,
            counts: Counts::default(),
        })
    }

    /// The attributes of node `nodeid`.
    pub fn attr(&self, nodeid: u64) -> Option<abi::Attr> {
        let (mode, size, nlink) = match nodeid {
            ROOT => (libc::S_IFDIR | 0o755, 4096, 2),
            n if n >= 2 && n < 2 + self.files => (libc::S_IFREG | 0o644, 42, 1),
            _ => return None,
        };
        Some(abi::Attr {
            ino: nodeid,
            size,
            blocks: size.div_ceil(512),
            mode,
            nlink,
            blksize: 4096,
            ..Default::default()
        })
    }

    /// The node of `name` in the root.
    pub fn find(&self, name: &[u8]) -> Option<u64> {
        let n: u64 = std::str::from_utf8(name.strip_prefix(b"f")?)
            .ok()?
            .parse()
            .ok()?;
        (n < self.files).then_some(n + 2)
    }

    fn entry(&self, nodeid: u64) -> Option<abi::EntryOut> {
        Some(abi::EntryOut {
            nodeid,
            attr: self.attr(nodeid)?,
            ..Default::default()
        })
    }

    /// Entry `i` of the root's listing (`.`, `..`, then the files): its
    /// name and node; `None` past the end.
    pub fn entry_at(&self, i: u64) -> Option<(String, u64)> {
        match i {
            0 => Some((".".into(), ROOT)),
            1 => Some(("..".into(), ROOT)),
            n if n < self.files + 2 => Some((format!("f{}", n - 2), n)),
            _ => None,
        }
    }

    /// Entries of the root from `r.offset`, as many as fit in
    /// `r.size`. Offsets are positions.
    fn list(&self, r: &DirRead, plus: bool, reply: Reply<'_>) {
        let mut buf = reply.dir(r.size);
        for i in r.offset.. {
            let Some((name, nodeid)) = self.entry_at(i) else {
                break;
            };
            let Some(attr) = self.attr(nodeid) else { break };
            let fits = if !plus {
                buf.add(nodeid, i + 1, attr.mode, name.as_bytes())
            } else {
                // Node id 0: "no attributes for this one".
                let bare = self.bare && nodeid != ROOT;
                let e = if bare {
                    abi::EntryOut::default()
                } else {
                    self.entry(nodeid).unwrap_or_default()
                };
                buf.add_plus(&e, nodeid, i + 1, attr.mode, name.as_bytes())
            };
            if !fits {
                break;
            }
        }
    }
}

impl Filesystem for Arc<Tree> {
    fn init(&self, _offered: u64) -> u64 {
        abi::init::DO_READDIRPLUS
            | abi::init::READDIRPLUS_AUTO
            | abi::init::PARALLEL_DIROPS
            | abi::init::NO_OPENDIR_SUPPORT
    }

    fn handle(&self, req: &Request, op: Operation<'_>, reply: Reply<'_>) -> Result<(), i32> {
        self.counts.requests.fetch_add(1, Relaxed);
        match op {
            Operation::Lookup { name } => {
                self.counts.lookups.fetch_add(1, Relaxed);
                match (req.nodeid, self.find(name).and_then(|n| self.entry(n))) {
                    (ROOT, Some(e)) => reply.entry(&e),
                    _ => return Err(libc::ENOENT),
                }
            }
            Operation::Getattr { .. } => {
                self.counts.getattrs.fetch_add(1, Relaxed);
                let attr = self.attr(req.nodeid).ok_or(libc::ENOENT)?;
                reply.attr(&abi::AttrOut {
                    attr,
                    ..Default::default()
                });
            }
            Operation::Readdir(r) | Operation::Readdirplus(r) => {
                self.counts.readdirs.fetch_add(1, Relaxed);
                if req.nodeid != ROOT {
                    return Err(libc::ENOTDIR);
                }
                self.list(&r, matches!(op, Operation::Readdirplus(_)), reply);
            }
            Operation::Statfs => reply.statfs(&abi::Kstatfs {
                bsize: 4096,
                frsize: 4096,
                namelen: 255,
                ..Default::default()
            }),
            Operation::Destroy
            | Operation::Releasedir { .. }
            | Operation::Forget { .. }
            | Operation::BatchForget { .. }
            | Operation::Interrupt { .. } => {}
            // OPENDIR: the kernel then lists without opening; GETXATTR:
            // none kept. Everything else: not in the prototype.
            _ => return Err(libc::ENOSYS),
        }
        Ok(())
    }
}

/// Serve `tree` on mounted `/dev/fuse` descriptor `fd` until unmounted.
pub fn serve(
    tree: &Arc<Tree>,
    fd: OwnedFd,
    cfg: session::Config,
) -> Result<Arc<SessionInfo>, String> {
    let s = Session::new(Arc::clone(tree), fd, cfg)?;
    let info = s.info();
    std::thread::spawn(move || s.run());
    Ok(info)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi::Pod;

    fn req(nodeid: u64) -> Request {
        Request {
            unique: 7,
            nodeid,
            uid: 0,
            gid: 0,
            pid: 0,
        }
    }

    fn ask(t: &Arc<Tree>, nodeid: u64, op: Operation<'_>) -> Result<Vec<u8>, i32> {
        let mut out = Vec::new();
        t.handle(&req(nodeid), op, Reply::new(&mut out))
            .map(|()| out)
    }

    #[test]
    fn lookups_find_the_files_and_nothing_else() {
        let t = Tree::new(3, false);
        let b = ask(&t, ROOT, Operation::Lookup { name: b"f2" }).expect("f2 exists");
        let e = abi::EntryOut::read(&b).expect("entry");
        assert_eq!((e.nodeid, e.attr.size), (4, 42));
        for bad in [&b"f3"[..], b"g", b"f", b"f-1"] {
            assert_eq!(
                ask(&t, ROOT, Operation::Lookup { name: bad }),
                Err(libc::ENOENT)
            );
        }
        assert_eq!(
            ask(&t, 3, Operation::Lookup { name: b"f0" }),
            Err(libc::ENOENT)
        );
    }

    fn dir(size: u32) -> DirRead {
        DirRead {
            fh: 0,
            offset: 0,
            size,
        }
    }

    #[test]
    fn a_bare_listing_gives_node_id_zero_and_the_real_inode_number() {
        let t = Tree::new(2, true);
        let b = ask(&t, ROOT, Operation::Readdirplus(dir(4096))).expect("a listing");
        // ".", "..", f0, f1: each an entry_out, a dirent and a padded name.
        let mut at = 0;
        let mut seen = Vec::new();
        while at < b.len() {
            let e = abi::EntryOut::read(&b[at..]).expect("entry");
            let d = abi::Dirent::read(&b[at + 128..]).expect("dirent");
            let name = &b[at + 152..at + 152 + d.namelen as usize];
            seen.push((String::from_utf8_lossy(name).to_string(), e.nodeid, d.ino));
            at += (152 + d.namelen as usize).next_multiple_of(8);
        }
        assert_eq!(
            seen,
            [
                (".".to_string(), 1, 1),
                ("..".to_string(), 1, 1),
                ("f0".to_string(), 0, 2),
                ("f1".to_string(), 0, 3)
            ]
        );
    }

    #[test]
    fn a_listing_stops_where_the_kernels_buffer_ends() {
        let t = Tree::new(1000, false);
        let b = ask(&t, ROOT, Operation::Readdir(dir(4096))).expect("a listing");
        assert!(b.len() <= 4096 && b.len() > 4096 - 40);
    }
}
