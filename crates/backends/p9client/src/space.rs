//! `fallocate` and `SEEK_DATA`/`SEEK_HOLE` through the server's space
//! extension (p9::space): one `Txattrwalk` on the open fid, whose new fid
//! names nothing and is clunked behind it. Offered only where the server
//! keeps its order (`walkfs serve`); elsewhere the vfs answers
//! `EOPNOTSUPP` and a file is data from start to end.

use walkfs_fsapi::{caps, Errno, FileHandle, NodeId, Result};
use walkfs_p9::{space, Fcall, Str};

use crate::wire::err_of;
use crate::P9Fs;

impl P9Fs {
    /// Run space call `name` on open fid `fh`: the reply's size.
    fn space_call(&self, fh: FileHandle, name: &[u8]) -> Result<u64> {
        let fid = u32::try_from(fh.0).map_err(|_| Errno::EBADF)?;
        self.locks_held.check(fid)?;
        let nf = self.alloc_fid();
        let r = self.rpc.call(
            Fcall::Txattrwalk {
                fid,
                newfid: nf,
                name: Str(name),
            },
            |r| match r {
                Fcall::Rxattrwalk { size } => Ok(size),
                r => Err(err_of(&r)),
            },
        );
        match r {
            Ok(size) => {
                self.clunk(nf);
                Ok(size)
            }
            Err(e) => Err(self.abandon(nf, false, e)),
        }
    }
}

impl caps::Space for P9Fs {
    fn fallocate(
        &self,
        _node: NodeId,
        fh: FileHandle,
        mode: i32,
        off: u64,
        len: u64,
    ) -> Result<()> {
        self.space_call(fh, &space::fallocate_name(mode, off, len))
            .map(drop)
    }

    fn seek_data(&self, _node: NodeId, fh: FileHandle, off: u64, whence: i32) -> Result<u64> {
        self.space_call(fh, &space::seek_name(whence, off))
    }
}
