//! Reply bodies, built into the transport's buffer (no allocation per
//! reply) through a typed [`Reply`]: one per request, consumed by the
//! one body it writes, so a handler can neither write two bodies nor
//! one the request does not take. Directory listings go through
//! [`DirBuf`].

use crate::abi::{self, Pod};

/// Append structure `t` to a reply body. Private: a handler writes its
/// body through [`Reply`], whose methods say which structure each reply
/// is.
fn put<T: Pod>(out: &mut Vec<u8>, t: &T) {
    out.extend_from_slice(t.as_bytes());
}

/// The body of the reply to one request, written into the transport's
/// buffer. Each method consumes it: a request gets one body, of one of
/// the kinds below, and the type checks that no handler writes two (or
/// a second after a first, as an arbitrary struct could). Dropped
/// unused (or [`Reply::none`]): an empty body, as an error reply, or a
/// success without data (UNLINK, RELEASE, FSYNC, ...).
#[must_use = "a reply writes nothing until one of its methods is called"]
pub struct Reply<'a> {
    out: &'a mut Vec<u8>,
}

impl<'a> Reply<'a> {
    /// The reply whose body is appended to `out` (the session makes one
    /// per request over its buffer, emptied; a test, over its own).
    pub fn new(out: &'a mut Vec<u8>) -> Reply<'a> {
        Reply { out }
    }

    /// An empty body (what dropping the reply also gives).
    pub fn none(self) {}

    /// LOOKUP, MKNOD, MKDIR, SYMLINK, LINK: the node's entry (node id 0:
    /// a negative entry, kept for its entry timeout).
    pub fn entry(self, e: &abi::EntryOut) {
        put(self.out, e);
    }

    /// GETATTR, SETATTR: the node's attributes.
    pub fn attr(self, a: &abi::AttrOut) {
        put(self.out, a);
    }

    /// OPEN, OPENDIR: the handle and its flags.
    pub fn open(self, o: &abi::OpenOut) {
        put(self.out, o);
    }

    /// CREATE: the new node's entry, then its open.
    pub fn created(self, e: &abi::EntryOut, o: &abi::OpenOut) {
        put(self.out, e);
        put(self.out, o);
    }

    /// WRITE: the bytes written.
    pub fn written(self, size: u32) {
        put(self.out, &abi::WriteOut { size, padding: 0 });
    }

    /// STATFS: the file system's counts.
    pub fn statfs(self, s: &abi::Kstatfs) {
        put(self.out, s);
    }

    /// READ, READLINK, and any reply that is data: `fill` writes straight
    /// into up to `max_len` bytes of the buffer (no copy) and says how
    /// many it wrote; the body is those. Its error leaves the body empty.
    pub fn data<E>(
        self,
        max_len: usize,
        fill: impl FnOnce(&mut [u8]) -> Result<usize, E>,
    ) -> Result<(), E> {
        let at = self.out.len();
        self.out.resize(at + max_len, 0);
        match fill(&mut self.out[at..]) {
            Ok(n) => {
                self.out.truncate(at + n.min(max_len));
                Ok(())
            }
            Err(e) => {
                self.out.truncate(at);
                Err(e)
            }
        }
    }

    /// READDIR, READDIRPLUS: a listing of at most `size` bytes (the
    /// kernel's buffer), entries added to the [`DirBuf`] while they fit.
    pub fn dir(self, size: u32) -> DirBuf<'a> {
        DirBuf::new(self.out, size)
    }

    /// GETXATTR, LISTXATTR: `value` for a caller with room for `size`
    /// bytes; with `size` 0 only its length; `ERANGE` when it does not
    /// fit.
    pub fn xattr(self, value: &[u8], size: u32) -> Result<(), i32> {
        if size == 0 {
            let size = u32::try_from(value.len()).map_err(|_| libc::E2BIG)?;
            put(self.out, &abi::GetxattrOut { size, padding: 0 });
        } else if value.len() > size as usize {
            return Err(libc::ERANGE);
        } else {
            self.out.extend_from_slice(value);
        }
        Ok(())
    }

    /// LSEEK: where the data or hole starts.
    pub fn lseek(self, offset: u64) {
        put(self.out, &abi::LseekOut { offset });
    }

    /// GETLK: the lock in the way (`ty` F_UNLCK: none).
    pub fn lock(self, l: &abi::LkOut) {
        put(self.out, l);
    }

    /// IOCTL: the result, then `body` (what the caller's buffer gets).
    pub fn ioctl(self, o: &abi::IoctlOut, body: &[u8]) {
        put(self.out, o);
        self.out.extend_from_slice(body);
    }
}

/// Directory entries are padded to eight bytes (FUSE_DIRENT_ALIGN).
const ALIGN: usize = 8;

/// A READDIR or READDIRPLUS reply: entries appended while they fit in
/// the kernel's buffer. Made by [`Reply::dir`].
pub struct DirBuf<'a> {
    out: &'a mut Vec<u8>,
    /// Where the body ends at most.
    limit: usize,
}

impl<'a> DirBuf<'a> {
    /// A listing into `out` of at most `size` bytes (the kernel's buffer).
    fn new(out: &'a mut Vec<u8>, size: u32) -> DirBuf<'a> {
        let limit = out.len() + size as usize;
        DirBuf { out, limit }
    }

    fn push(&mut self, entry: Option<&abi::EntryOut>, d: abi::Dirent, name: &[u8]) -> bool {
        let fixed =
            entry.map_or(0, |_| std::mem::size_of::<abi::EntryOut>()) + std::mem::size_of_val(&d);
        let len = (fixed + name.len()).next_multiple_of(ALIGN);
        if self.out.len() + len > self.limit {
            return false;
        }
        if let Some(e) = entry {
            put(self.out, e);
        }
        put(self.out, &d);
        self.out.extend_from_slice(name);
        let pad = len - fixed - name.len();
        self.out.resize(self.out.len() + pad, 0);
        true
    }

    fn dirent(ino: u64, off: u64, mode: u32, name: &[u8]) -> abi::Dirent {
        abi::Dirent {
            ino,
            off,
            namelen: name.len() as u32,
            // The DT_* type is the S_IFMT bits shifted down.
            kind: (mode & libc::S_IFMT) >> 12,
        }
    }

    /// A READDIR entry: inode number `ino`, type from `mode`, and the
    /// offset at which the listing continues after it. False: it did not
    /// fit (the reply is full).
    pub fn add(&mut self, ino: u64, off: u64, mode: u32, name: &[u8]) -> bool {
        self.push(None, Self::dirent(ino, off, mode, name), name)
    }

    /// A READDIRPLUS entry. `entry.nodeid` 0 gives the name and type
    /// without attributes (the kernel makes no dentry for it); the inode
    /// number is then `ino`, else the attributes'.
    pub fn add_plus(
        &mut self,
        entry: &abi::EntryOut,
        ino: u64,
        off: u64,
        mode: u32,
        name: &[u8],
    ) -> bool {
        self.push(Some(entry), Self::dirent(ino, off, mode, name), name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_padded_and_stop_at_the_kernels_size() {
        let mut out = Vec::new();
        let mut d = Reply::new(&mut out).dir(64);
        assert!(d.add(5, 1, libc::S_IFREG, b"a"));
        // 24 + 1 -> 32 bytes; a second of 32 fits exactly, a third not.
        assert!(d.add(6, 2, libc::S_IFDIR, b"bcdefgh"));
        assert!(!d.add(7, 3, libc::S_IFREG, b"c"));
        assert_eq!(out.len(), 64);
        let e = abi::Dirent::read(&out[32..]).expect("second entry");
        assert_eq!((e.ino, e.off, e.namelen), (6, 2, 7));
        assert_eq!(e.kind, libc::DT_DIR as u32);
        assert_eq!(&out[56..63], b"bcdefgh");
    }

    #[test]
    fn a_plus_entry_carries_its_entry_out_first() {
        let mut out = vec![0xAA; 3];
        let mut d = Reply::new(&mut out).dir(4096);
        let e = abi::EntryOut {
            nodeid: 42,
            ..Default::default()
        };
        assert!(d.add_plus(&e, 42, 1, libc::S_IFLNK, b"link"));
        assert_eq!(out.len(), 3 + 128 + 24 + 8);
        let back = abi::EntryOut::read(&out[3..]).expect("entry");
        assert_eq!(back.nodeid, 42);
    }

    #[test]
    fn data_is_what_fill_wrote_and_nothing_on_its_error() {
        let mut out = vec![7u8; 2];
        let r: Result<(), ()> = Reply::new(&mut out).data(4096, |b| {
            assert_eq!(b.len(), 4096);
            b[..3].copy_from_slice(b"abc");
            Ok(3)
        });
        assert_eq!(r, Ok(()));
        assert_eq!(out, b"\x07\x07abc");
        let mut out = vec![7u8; 2];
        let r = Reply::new(&mut out).data(4096, |b| {
            b[0] = 1;
            Err(libc::EIO)
        });
        assert_eq!(r, Err(libc::EIO));
        assert_eq!(out, [7, 7], "an error leaves no body");
    }

    #[test]
    fn a_create_is_its_entry_then_its_open() {
        let mut out = Vec::new();
        let e = abi::EntryOut {
            nodeid: 9,
            ..Default::default()
        };
        let o = abi::OpenOut {
            fh: 3,
            ..Default::default()
        };
        Reply::new(&mut out).created(&e, &o);
        assert_eq!(out.len(), 128 + std::mem::size_of::<abi::OpenOut>());
        assert_eq!(abi::EntryOut::read(&out).expect("entry").nodeid, 9);
        assert_eq!(abi::OpenOut::read(&out[128..]).expect("open").fh, 3);
    }
}
