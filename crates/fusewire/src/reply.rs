//! Reply bodies, built into the transport's buffer (no allocation per
//! reply): fixed structures with [`put`], directory listings with
//! [`DirBuf`].

use crate::abi::{self, Pod};

/// Append structure `t` to a reply body.
pub fn put<T: Pod>(out: &mut Vec<u8>, t: &T) {
    out.extend_from_slice(t.as_bytes());
}

/// Directory entries are padded to eight bytes (FUSE_DIRENT_ALIGN).
const ALIGN: usize = 8;

/// A READDIR or READDIRPLUS reply: entries appended while they fit in
/// the kernel's buffer.
pub struct DirBuf<'a> {
    out: &'a mut Vec<u8>,
    /// Where the body ends at most.
    limit: usize,
}

impl<'a> DirBuf<'a> {
    /// A listing into `out` of at most `size` bytes (the kernel's buffer).
    pub fn new(out: &'a mut Vec<u8>, size: u32) -> DirBuf<'a> {
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
        let mut d = DirBuf::new(&mut out, 64);
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
        let mut d = DirBuf::new(&mut out, 4096);
        let e = abi::EntryOut {
            nodeid: 42,
            ..Default::default()
        };
        assert!(d.add_plus(&e, 42, 1, libc::S_IFLNK, b"link"));
        assert_eq!(out.len(), 3 + 128 + 24 + 8);
        let back = abi::EntryOut::read(&out[3..]).expect("entry");
        assert_eq!(back.nodeid, 42);
    }
}
