//! Extended attributes at the server (after Linux's fs/9p/xattr.c),
//! POSIX ACLs among them (the vfs parses those; here they are bytes):
//!
//! - a value, or the list of names (the empty name), is read through the
//!   fid `Txattrwalk` makes from the node's fid: the walk and the first
//!   read in one round trip, more reads for a value larger than a
//!   message, then the clunk;
//! - a value is set through a clone of the node's fid that
//!   `Txattrcreate` turns into the attribute's: the value written to it,
//!   then its clunk, which sets it (the clunk's reply is the outcome). A
//!   removal is the same with size 0 and `XATTR_REPLACE`, as Linux's
//!   v9fs sends it.
//!
//! A server that keeps no attributes (diod on a file system without
//! them, a plain 9P server) is found at attach (session.rs): the mount
//! then offers none, and the vfs answers `EOPNOTSUPP`.
//!
//! An empty value is sent as a set of size 0 with the caller's flags:
//! `walkfs serve` keeps it (only size 0 with exactly `XATTR_REPLACE` is
//! a removal there), while diod and QEMU remove on every size 0, as
//! they do for Linux's v9fs.

use std::sync::atomic::Ordering::Relaxed;

use walkfs_fsapi::{caps, Errno, NodeId, Result};
use walkfs_p9::{self as p9, Fcall, Names, Str};

use crate::wire::err_of;
use crate::P9Fs;

/// Largest value or list Linux takes (`XATTR_SIZE_MAX`): a server that
/// announces more is not believed.
const XATTR_SIZE_MAX: u64 = 65536;

/// What the reply `r` says of request `req`: its error, a write cut
/// short (`EIO`: the value would not be whole), or a reply of another
/// request's type (`EPROTO`). A 9P reply's type is its request's + 1.
fn outcome(req: &Fcall<'_>, r: &Fcall<'_>) -> Result<()> {
    match (req, r) {
        (_, Fcall::Rlerror { .. }) => Err(err_of(r)),
        (Fcall::Twrite { data, .. }, Fcall::Rwrite { count })
            if *count as usize != data.0.len() =>
        {
            Err(Errno::EIO)
        }
        _ if r.msg_type() == req.msg_type().wrapping_add(1) => Ok(()),
        _ => Err(Errno::EPROTO),
    }
}

/// A name the server would take for the list of names is no attribute's.
fn named(name: &[u8]) -> Result<()> {
    if name.is_empty() {
        return Err(Errno::ERANGE);
    }
    Ok(())
}

impl P9Fs {
    /// The value of `name` of the file of `fid` (the empty name: its
    /// names, each NUL-terminated).
    fn xattr_get(&self, fid: u32, name: &[u8]) -> Result<Vec<u8>> {
        let nf = self.alloc_fid();
        let (size, mut buf) = self.xattr_walk(fid, nf, name)?;
        if size > XATTR_SIZE_MAX {
            return Err(self.abandon(nf, true, Errno::E2BIG));
        }
        let size = size as usize;
        buf.truncate(size);
        while buf.len() < size {
            let count = (size - buf.len()).min(self.iounit as usize) as u32;
            let read = Fcall::Tread {
                fid: nf,
                offset: buf.len() as u64,
                count,
            };
            let got = self.rpc.call(read, |r| match r {
                Fcall::Rread { data } => {
                    let n = data.0.len().min(size - buf.len());
                    buf.extend_from_slice(&data.0[..n]);
                    Ok(n)
                }
                r => Err(err_of(&r)),
            });
            match got {
                Ok(0) => return Err(self.abandon(nf, true, Errno::EIO)),
                Ok(_) => {}
                Err(e) => return Err(self.abandon(nf, true, e)),
            }
        }
        self.clunk(nf);
        Ok(buf)
    }

    /// `Txattrwalk` from `fid` to `nf` for `name`, with the first read
    /// behind it in the same write where the server keeps a fid's
    /// requests in order: the size the server announced, and what the
    /// read brought. On an error `nf` is given up.
    fn xattr_walk(&self, fid: u32, nf: u32, name: &[u8]) -> Result<(u64, Vec<u8>)> {
        let walk = Fcall::Txattrwalk {
            fid,
            newfid: nf,
            name: Str(name),
        };
        let read = Fcall::Tread {
            fid: nf,
            offset: 0,
            count: self.iounit,
        };
        let reqs = [walk, read];
        let n = if self.pipeline.load(Relaxed) { 2 } else { 1 };
        let (mut size, mut buf) = (Err(Errno::EPROTO), Vec::new());
        self.rpc
            .call_many(&reqs[..n], |i, r| match (i, r) {
                (0, Fcall::Rxattrwalk { size: s }) => size = Ok(s),
                (0, r) => size = Err(err_of(&r)),
                (_, Fcall::Rread { data }) => buf.extend_from_slice(data.0),
                // A read the server ran before the walk (it does not keep
                // a fid's requests in order): read again after.
                _ => {}
            })
            .map_err(|e| self.abandon(nf, false, e))?;
        match size {
            Ok(s) => Ok((s, buf)),
            Err(e) => Err(self.abandon(nf, false, e)),
        }
    }

    /// Set `name` of the file of `fid` to `value` with `flags` (size 0
    /// and `XATTR_REPLACE`: remove it): a clone of `fid`, its
    /// `Txattrcreate`, the writes, its clunk.
    fn xattr_put(&self, fid: u32, name: &[u8], value: &[u8], flags: u32) -> Result<()> {
        let nf = self.alloc_fid();
        let mut reqs = vec![
            Fcall::Twalk {
                fid,
                newfid: nf,
                names: Names::default(),
            },
            Fcall::Txattrcreate {
                fid: nf,
                name: Str(name),
                attr_size: value.len() as u64,
                flags,
            },
        ];
        let chunk = (self.iounit as usize).max(1);
        for (i, data) in value.chunks(chunk).enumerate() {
            reqs.push(Fcall::Twrite {
                fid: nf,
                offset: (i * chunk) as u64,
                data: p9::Data(data),
            });
        }
        reqs.push(Fcall::Tclunk { fid: nf });
        // Back to back only to a server that runs a connection's
        // requests in order: one that does not (diod) could take the
        // clunk before a write and set a value cut short.
        if self.ordered {
            self.chain_all(nf, &reqs)
        } else {
            self.chain_each(nf, &reqs)
        }
    }

    /// Send `reqs` (a walk making `nf`, what uses it, its clunk) in one
    /// write: the first failure among them is the outcome. The clunk went
    /// with the rest, so `nf` is gone whatever happened.
    fn chain_all(&self, nf: u32, reqs: &[Fcall<'_>]) -> Result<()> {
        let mut first = Ok(());
        let sent = self.rpc.call_many(reqs, |i, r| {
            if first.is_ok() {
                first = reqs.get(i).map_or(Err(Errno::EPROTO), |q| outcome(q, &r));
            }
        });
        self.free_fid(nf);
        sent.and(first)
    }

    /// [`P9Fs::chain_all`] one request at a time, stopping at the first
    /// failure (`nf`, if made and not yet clunked, is clunked then).
    fn chain_each(&self, nf: u32, reqs: &[Fcall<'_>]) -> Result<()> {
        for (i, req) in reqs.iter().enumerate() {
            let mut got = Err(Errno::EPROTO);
            let sent = self
                .rpc
                .call_many(std::slice::from_ref(req), |_, r| got = outcome(req, &r));
            if let Err(e) = sent.and(got) {
                let made = i > 0 && i + 1 < reqs.len();
                return Err(self.abandon(nf, made, e));
            }
        }
        self.free_fid(nf);
        Ok(())
    }
}

impl caps::Xattrs for P9Fs {
    fn getxattr(&self, node: NodeId, name: &[u8]) -> Result<Vec<u8>> {
        named(name)?;
        let pin = self.pin(node)?;
        self.xattr_get(pin.fid, name)
    }

    fn listxattr(&self, node: NodeId) -> Result<Vec<u8>> {
        let pin = self.pin(node)?;
        self.xattr_get(pin.fid, b"")
    }

    fn setxattr(&self, node: NodeId, name: &[u8], value: &[u8], flags: i32) -> Result<()> {
        named(name)?;
        let mut flags = u32::try_from(flags).map_err(|_| Errno::EINVAL)?;
        let pin = self.pin(node)?;
        if value.is_empty() && flags == libc::XATTR_REPLACE as u32 {
            // That form is a removal on the wire: an empty value that
            // must replace one is checked to have one first, then set
            // without the flag (a removal in between is lost to it).
            self.xattr_get(pin.fid, name)?;
            flags = 0;
        }
        self.xattr_put(pin.fid, name, value, flags)
    }

    fn removexattr(&self, node: NodeId, name: &[u8]) -> Result<()> {
        named(name)?;
        let pin = self.pin(node)?;
        self.xattr_put(pin.fid, name, &[], libc::XATTR_REPLACE as u32)
    }
}

#[cfg(test)]
mod tests {
    use super::outcome;
    use walkfs_fsapi::Errno;
    use walkfs_p9::{Data, Fcall};

    #[test]
    fn a_reply_is_judged_against_its_request() {
        let write = Fcall::Twrite {
            fid: 1,
            offset: 0,
            data: Data(b"abc"),
        };
        assert_eq!(outcome(&write, &Fcall::Rwrite { count: 3 }), Ok(()));
        assert_eq!(
            outcome(&write, &Fcall::Rwrite { count: 2 }),
            Err(Errno::EIO),
            "a value cut short"
        );
        assert_eq!(
            outcome(&write, &Fcall::Rlerror { ecode: 61 }),
            Err(Errno::ENODATA)
        );
        let clunk = Fcall::Tclunk { fid: 1 };
        assert_eq!(outcome(&clunk, &Fcall::Rclunk {}), Ok(()));
        assert_eq!(
            outcome(&clunk, &Fcall::Rwrite { count: 0 }),
            Err(Errno::EPROTO)
        );
    }
}
