//! Extended attributes (POSIX ACLs among them) as 9P2000.L carries them,
//! on the vfs's `getxattrat`/`listxattrat`/`setxattrat`/`removexattrat`
//! with the fid's credentials (the vfs checks namespaces and permissions
//! as Linux does).
//!
//! - Reading: `Txattrwalk(fid, newfid, name)` takes the value of `name`
//!   (the empty name: the list of names, each NUL-terminated) once, and
//!   `newfid` reads it at any offset until clunked, as a listing fid
//!   reads its listing (a fid that names no file: nothing else works on
//!   it).
//! - Writing: `Txattrcreate(fid, name, size, flags)` turns `fid` itself
//!   into a fid that takes `size` bytes through `Twrite`; its `Tclunk`
//!   sets them, and the clunk's reply is the set's outcome. Until then
//!   nothing is changed, and a value not written whole is never set
//!   (`EINVAL` at the clunk, as QEMU answers).
//!
//! A size of 0 is ambiguous on the wire: Linux's v9fs sends a
//! `removexattr` as `Txattrcreate(size 0, XATTR_REPLACE)`, and a set of
//! an empty value the same way with the caller's flags. QEMU and diod
//! remove on every size 0; here only the removal's exact form removes,
//! so an empty value with flags 0 or `XATTR_CREATE` is kept as one.

use std::sync::Arc;

use parking_lot::Mutex;
use walkfs_p9::{Data, Fcall};
use walkfs_vfs::{Errno, Handle, Result};

use super::{node, writable, Req};
use crate::fid::FidState;

/// The xattr calls act on the file the fid names, never on what a
/// symlink points to (as Linux's v9fs asks with `l*` calls).
const XATTR_AT: i32 = libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW;
/// Largest value Linux takes (`XATTR_SIZE_MAX`): a larger size is
/// refused before any of it is held.
const XATTR_SIZE_MAX: u64 = 65536;
/// Longest name Linux takes (`XATTR_NAME_MAX`).
const XATTR_NAME_MAX: usize = 255;

/// A fid after `Txattrcreate`: the attribute it will set at its clunk,
/// and the bytes written so far.
pub struct Setting {
    /// The file whose attribute it is (the fid itself names none any
    /// more: no other request works on it).
    node: Handle,
    name: Vec<u8>,
    flags: i32,
    /// The size `Txattrcreate` announced.
    size: usize,
    /// Written so far: never longer than `size`, and without holes.
    value: Mutex<Vec<u8>>,
}

impl Setting {
    /// `Twrite` of `data` at `offset`: how many bytes were taken (those
    /// beyond the announced size are not). A write past the end written
    /// so far would leave a hole: `EINVAL`; one past the size, `ENOSPC`
    /// (QEMU's answer).
    fn write(&self, offset: u64, data: &[u8]) -> Result<usize> {
        let mut v = self.value.lock();
        let off = usize::try_from(offset).map_err(|_| Errno::ENOSPC)?;
        if off > self.size {
            return Err(Errno::ENOSPC);
        }
        if off > v.len() {
            return Err(Errno::EINVAL);
        }
        let n = data.len().min(self.size - off);
        let end = off + n;
        if end > v.len() {
            v.resize(end, 0);
        }
        v[off..end].copy_from_slice(&data[..n]);
        Ok(n)
    }

    /// Is this the form of a removal (see the module's comment)?
    fn removes(&self) -> bool {
        self.size == 0 && self.flags == libc::XATTR_REPLACE
    }
}

/// A name a client may ask for: what Linux's syscalls could pass (a C
/// string of at most `XATTR_NAME_MAX` bytes); the vfs judges the rest.
fn check_name(name: &[u8]) -> Result<()> {
    if name.contains(&0) {
        return Err(Errno::EINVAL);
    }
    if name.len() > XATTR_NAME_MAX {
        return Err(Errno::ERANGE);
    }
    Ok(())
}

impl Req<'_> {
    /// `Txattrwalk(fid, newfid, name)` for an attribute's name, or the
    /// empty name for the list of names: `newfid` reads what it was.
    pub(super) fn xattr_walk(&self, name: &[u8], out: &mut Vec<u8>) -> Result<()> {
        check_name(name)?;
        let st = self.fid(0)?;
        let nf = self.newfid.ok_or(Errno::EINVAL)?;
        let file = node(&st)?;
        let value = if name.is_empty() {
            st.ctx.listxattrat(file, b"", XATTR_AT)?
        } else {
            st.ctx.getxattrat(file, b"", name, XATTR_AT)?
        };
        let size = value.len() as u64;
        nf.complete(FidState {
            ctx: Arc::clone(&st.ctx),
            node: None,
            open: None,
            listing: Some(Arc::new(value)),
            lease: None,
            xattr: None,
        });
        self.reply(Fcall::Rxattrwalk { size }, out)
    }

    /// `Txattrcreate(fid, name, size, flags)`: the fid takes the value
    /// through `Twrite` and sets it at its clunk.
    pub(super) fn xattr_create(
        &self,
        name: &[u8],
        size: u64,
        flags: u32,
        out: &mut Vec<u8>,
    ) -> Result<()> {
        writable(self.s)?;
        if name.is_empty() {
            return Err(Errno::ERANGE);
        }
        check_name(name)?;
        if size > XATTR_SIZE_MAX {
            return Err(Errno::E2BIG);
        }
        let known = (libc::XATTR_CREATE | libc::XATTR_REPLACE) as u32;
        if flags & !known != 0 {
            return Err(Errno::EINVAL);
        }
        let st = self.fid(0)?;
        // Only a fid that names a file and is not open (Linux's v9fs
        // clones one for the purpose; QEMU refuses an open one too).
        if st.open.is_some() {
            return Err(Errno::EINVAL);
        }
        let setting = Arc::new(Setting {
            node: node(&st)?.clone(),
            name: name.to_vec(),
            flags: flags as i32,
            size: size as usize,
            value: Mutex::new(Vec::new()),
        });
        self.fids[0].update(|s| {
            s.node = None;
            s.xattr = Some(setting);
        })?;
        self.reply(Fcall::Rxattrcreate {}, out)
    }

    /// `Twrite` on a fid after `Txattrcreate`.
    pub(super) fn xattr_write(
        &self,
        setting: &Setting,
        offset: u64,
        data: Data<'_>,
        out: &mut Vec<u8>,
    ) -> Result<()> {
        let n = setting.write(offset, data.0)?;
        self.reply(Fcall::Rwrite { count: n as u32 }, out)
    }

    /// The clunk of a fid after `Txattrcreate`: the attribute set (or
    /// removed) now; the outcome is the clunk's. The fid is gone either
    /// way.
    pub(super) fn xattr_commit(&self, st: &FidState, setting: &Setting) -> Result<()> {
        let note = self.s.own.begin();
        let value = setting.value.lock();
        if value.len() != setting.size {
            return Err(Errno::EINVAL);
        }
        let (ctx, file, name) = (&st.ctx, &setting.node, &setting.name[..]);
        if setting.removes() {
            ctx.removexattrat(file, b"", name, XATTR_AT)?;
        } else {
            ctx.setxattrat(file, b"", name, &value, setting.flags, XATTR_AT)?;
        }
        // The change's report (its ctime moved) is not sent back here.
        note.inode(ctx, file);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use walkfs_p9::{Data, Fcall, Names, Str, NOFID};
    use walkfs_vfs::{Errno, Options, Vfs};

    use super::{check_name, Setting};
    use crate::fid::Fid;
    use crate::handlers::handle;
    use crate::session::Session;
    use crate::{Config, Server};

    const R: i32 = libc::XATTR_REPLACE;

    /// A memfs export with file `f`, and a fid attached to its root.
    fn session(read_only: bool) -> (Session, Arc<Fid>) {
        let fs = Arc::new(walkfs_memfs::MemFs::new());
        let vfs = Vfs::new(fs, &Options::default()).expect("vfs");
        let cfg = Config {
            read_only,
            inline_all: true,
            ..Config::default()
        };
        let s = Session::new(Server::new(vfs, cfg), "test".into());
        let root = Fid::pending();
        let attach = Fcall::Tattach {
            fid: 0,
            afid: NOFID,
            uname: Str(b""),
            aname: Str(b""),
            n_uname: 0,
        };
        call(&s, attach, &[], Some(&root)).expect("attach");
        if !read_only {
            let dir = walk(&s, &root, &[]);
            let create = Fcall::Tlcreate {
                fid: 1,
                name: Str(b"f"),
                flags: libc::O_RDWR as u32,
                mode: 0o644,
                gid: 0,
            };
            call(&s, create, &[dir], None).expect("create");
        }
        (s, root)
    }

    /// `f` answered as conn.rs would have it answered: the reply, or the
    /// error sent as `Rlerror`.
    fn call(
        s: &Session,
        f: Fcall<'_>,
        fids: &[Arc<Fid>],
        nf: Option<&Arc<Fid>>,
    ) -> Result<Vec<u8>, Errno> {
        let mut out = Vec::new();
        handle(s, &f, fids, nf, 7, &mut out)?;
        Ok(out)
    }

    fn walk(s: &Session, from: &Arc<Fid>, names: &[&[u8]]) -> Arc<Fid> {
        let nf = Fid::pending();
        let names = Names::new(names).expect("names");
        let w = Fcall::Twalk {
            fid: 0,
            newfid: 1,
            names,
        };
        call(s, w, &[Arc::clone(from)], Some(&nf)).expect("walk");
        nf
    }

    fn decode(out: &[u8]) -> Fcall<'_> {
        Fcall::decode(out).expect("a whole reply").1
    }

    /// `Txattrwalk` of `name` from `fid`, and a read of the whole value.
    fn get(s: &Session, fid: &Arc<Fid>, name: &[u8]) -> Result<Vec<u8>, Errno> {
        let nf = Fid::pending();
        let w = Fcall::Txattrwalk {
            fid: 0,
            newfid: 1,
            name: Str(name),
        };
        let r = call(s, w, &[Arc::clone(fid)], Some(&nf));
        let size = match r.as_deref().map(decode) {
            Ok(Fcall::Rxattrwalk { size }) => size,
            Ok(other) => panic!("{other:?}"),
            Err(e) => {
                nf.fail();
                return Err(*e);
            }
        };
        // Reads of at most a message each, until one comes back empty.
        let mut out = Vec::new();
        loop {
            let got = read(s, &nf, out.len() as u64, 100_000).expect("read");
            if got.is_empty() {
                break;
            }
            out.extend_from_slice(&got);
        }
        assert_eq!(out.len() as u64, size, "the size said is the value's");
        Ok(out)
    }

    fn read(s: &Session, fid: &Arc<Fid>, offset: u64, count: u32) -> Result<Vec<u8>, Errno> {
        let r = Fcall::Tread {
            fid: 0,
            offset,
            count,
        };
        match decode(&call(s, r, &[Arc::clone(fid)], None)?) {
            Fcall::Rread { data } => Ok(data.0.to_vec()),
            other => panic!("{other:?}"),
        }
    }

    fn write(s: &Session, fid: &Arc<Fid>, offset: u64, data: &[u8]) -> Result<u32, Errno> {
        let w = Fcall::Twrite {
            fid: 0,
            offset,
            data: Data(data),
        };
        match decode(&call(s, w, &[Arc::clone(fid)], None)?) {
            Fcall::Rwrite { count } => Ok(count),
            other => panic!("{other:?}"),
        }
    }

    fn create(
        s: &Session,
        fid: &Arc<Fid>,
        name: &[u8],
        size: u64,
        flags: i32,
    ) -> Result<(), Errno> {
        let c = Fcall::Txattrcreate {
            fid: 0,
            name: Str(name),
            attr_size: size,
            flags: flags as u32,
        };
        call(s, c, &[Arc::clone(fid)], None).map(|_| ())
    }

    fn clunk(s: &Session, fid: &Arc<Fid>) -> Result<(), Errno> {
        call(s, Fcall::Tclunk { fid: 0 }, &[Arc::clone(fid)], None).map(|_| ())
    }

    /// Set `name` of `f` to `value` as Linux's v9fs does: a clone of the
    /// file's fid, `Txattrcreate`, the writes, the clunk.
    fn set(
        s: &Session,
        root: &Arc<Fid>,
        name: &[u8],
        value: &[u8],
        flags: i32,
    ) -> Result<(), Errno> {
        let x = walk(s, root, &[b"f"]);
        create(s, &x, name, value.len() as u64, flags)?;
        for (i, chunk) in value.chunks(1000).enumerate() {
            let n = write(s, &x, (i * 1000) as u64, chunk)?;
            assert_eq!(n as usize, chunk.len());
        }
        clunk(s, &x)
    }

    #[test]
    fn a_value_set_is_read_listed_replaced_and_removed() {
        let (s, root) = session(false);
        let f = walk(&s, &root, &[b"f"]);
        assert_eq!(get(&s, &f, b"user.a"), Err(Errno::ENODATA));
        let big: Vec<u8> = (0..10_000u32).map(|i| i as u8).collect();
        assert_eq!(set(&s, &root, b"user.a", &big, 0), Ok(()));
        assert_eq!(get(&s, &f, b"user.a"), Ok(big));
        assert_eq!(
            set(&s, &root, b"user.a", b"1", libc::XATTR_CREATE),
            Err(Errno::EEXIST)
        );
        assert_eq!(set(&s, &root, b"user.b", b"2", R), Err(Errno::ENODATA));
        assert_eq!(set(&s, &root, b"user.a", b"3", R), Ok(()));
        assert_eq!(get(&s, &f, b"user.a"), Ok(b"3".to_vec()));
        // An empty value is a value.
        assert_eq!(set(&s, &root, b"user.e", b"", 0), Ok(()));
        assert_eq!(get(&s, &f, b"user.e"), Ok(Vec::new()));
        let list = get(&s, &f, b"").expect("list");
        assert_eq!(list.last(), Some(&0), "each name NUL-terminated");
        let mut names: Vec<&[u8]> = list.split(|b| *b == 0).filter(|n| !n.is_empty()).collect();
        names.sort();
        assert_eq!(names, [&b"user.a"[..], b"user.e"]);
        // Linux's removexattr: size 0, XATTR_REPLACE.
        assert_eq!(set(&s, &root, b"user.a", b"", R), Ok(()));
        assert_eq!(get(&s, &f, b"user.a"), Err(Errno::ENODATA));
        assert_eq!(set(&s, &root, b"user.a", b"", R), Err(Errno::ENODATA));
        assert_eq!(get(&s, &f, b""), Ok(b"user.e\0".to_vec()));
        // Linux's namespaces, and its limits.
        assert_eq!(set(&s, &root, b"bogus.a", b"1", 0), Err(Errno::EOPNOTSUPP));
        assert_eq!(get(&s, &f, b"bogus.a"), Err(Errno::EOPNOTSUPP));
        let x = walk(&s, &root, &[b"f"]);
        assert_eq!(create(&s, &x, b"user.a", 65_537, 0), Err(Errno::E2BIG));
        assert_eq!(create(&s, &x, b"", 1, 0), Err(Errno::ERANGE));
        assert_eq!(create(&s, &x, b"user.a", 1, 4), Err(Errno::EINVAL));
        assert_eq!(create(&s, &x, b"user.\0", 1, 0), Err(Errno::EINVAL));
    }

    #[test]
    fn a_value_written_in_part_is_never_set() {
        let (s, root) = session(false);
        let x = walk(&s, &root, &[b"f"]);
        assert_eq!(create(&s, &x, b"user.p", 10, 0), Ok(()));
        assert_eq!(write(&s, &x, 0, b"abc"), Ok(3));
        assert_eq!(write(&s, &x, 5, b"x"), Err(Errno::EINVAL), "a hole");
        assert_eq!(write(&s, &x, 11, b"x"), Err(Errno::ENOSPC));
        assert_eq!(clunk(&s, &x), Err(Errno::EINVAL));
        let f = walk(&s, &root, &[b"f"]);
        assert_eq!(get(&s, &f, b"user.p"), Err(Errno::ENODATA));
    }

    #[test]
    fn xattr_fids_refuse_what_they_are_not_for() {
        let (s, root) = session(false);
        assert_eq!(set(&s, &root, b"user.a", b"hello", 0), Ok(()));
        let f = walk(&s, &root, &[b"f"]);
        // A reading fid: reads at any offset, nothing else.
        let r = Fid::pending();
        let w = Fcall::Txattrwalk {
            fid: 0,
            newfid: 1,
            name: Str(b"user.a"),
        };
        call(&s, w, &[Arc::clone(&f)], Some(&r)).expect("xattrwalk");
        assert_eq!(read(&s, &r, 1, 3), Ok(b"ell".to_vec()));
        assert_eq!(read(&s, &r, u64::MAX, 3), Ok(Vec::new()));
        assert_eq!(write(&s, &r, 0, b"x"), Err(Errno::EBADF));
        assert_eq!(create(&s, &r, b"user.b", 1, 0), Err(Errno::EBADF));
        assert_eq!(get(&s, &r, b"user.a"), Err(Errno::EBADF));
        let w = Fcall::Twalk {
            fid: 0,
            newfid: 1,
            names: Names::default(),
        };
        let nf = Fid::pending();
        assert_eq!(call(&s, w, &[Arc::clone(&r)], Some(&nf)), Err(Errno::EBADF));
        let g = Fcall::Tgetattr {
            fid: 0,
            request_mask: 0,
        };
        assert_eq!(call(&s, g, &[Arc::clone(&r)], None), Err(Errno::EBADF));
        assert_eq!(clunk(&s, &r), Ok(()));
        // A writing fid: writes and its clunk, nothing else.
        let x = walk(&s, &root, &[b"f"]);
        assert_eq!(create(&s, &x, b"user.b", 2, 0), Ok(()));
        assert_eq!(read(&s, &x, 0, 10), Err(Errno::EBADF));
        assert_eq!(get(&s, &x, b""), Err(Errno::EBADF));
        assert_eq!(create(&s, &x, b"user.c", 2, 0), Err(Errno::EBADF));
        assert_eq!(write(&s, &x, u64::MAX, b"x"), Err(Errno::ENOSPC));
        assert_eq!(write(&s, &x, 0, b"xyz"), Ok(2), "cut at the size");
        assert_eq!(clunk(&s, &x), Ok(()));
        assert_eq!(get(&s, &f, b"user.b"), Ok(b"xy".to_vec()));
        // An open fid is no attribute's.
        let o = walk(&s, &root, &[b"f"]);
        let open = Fcall::Tlopen {
            fid: 0,
            flags: libc::O_RDONLY as u32,
        };
        call(&s, open, &[Arc::clone(&o)], None).expect("open");
        assert_eq!(create(&s, &o, b"user.c", 1, 0), Err(Errno::EINVAL));
    }

    #[test]
    fn a_read_only_export_reads_attributes_and_sets_none() {
        let (s, root) = session(true);
        assert_eq!(get(&s, &root, b""), Ok(Vec::new()));
        assert_eq!(get(&s, &root, b"user.a"), Err(Errno::ENODATA));
        assert_eq!(create(&s, &root, b"user.a", 1, 0), Err(Errno::EROFS));
    }

    #[test]
    fn writes_fill_the_value_in_order_and_never_past_its_size() {
        let (_s, root) = session(false);
        let node = root.get().expect("root").node.expect("a file");
        let v = Setting {
            node,
            name: b"user.x".to_vec(),
            flags: 0,
            size: 10,
            value: parking_lot::Mutex::new(Vec::new()),
        };
        assert_eq!(v.write(0, b"abcd"), Ok(4));
        assert_eq!(v.write(6, b"gh"), Err(Errno::EINVAL), "a hole");
        assert_eq!(v.write(4, b"efghijklmn"), Ok(6), "cut at the size");
        assert_eq!(v.write(2, b"CD"), Ok(2), "a rewrite is taken");
        assert_eq!(v.write(10, b"x"), Ok(0), "nothing fits at the end");
        assert_eq!(v.write(11, b"x"), Err(Errno::ENOSPC));
        assert_eq!(v.write(u64::MAX, b"x"), Err(Errno::ENOSPC));
        assert_eq!(&v.value.lock()[..], b"abCDefghij");
    }

    #[test]
    fn names_no_syscall_could_pass_are_refused() {
        assert_eq!(check_name(b"user.a\0b"), Err(Errno::EINVAL));
        assert_eq!(check_name(&[b'a'; 256]), Err(Errno::ERANGE));
        assert_eq!(check_name(b"user.a"), Ok(()));
        assert_eq!(check_name(b""), Ok(()), "the list's name");
    }
}
