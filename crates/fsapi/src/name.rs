//! File names below the vfs: [`Name`], a name as tables that may hold
//! millions keep one (a short name, as most are, is stored inline instead
//! of in a heap block of its own: a boxed slice costs its 16 bytes plus a
//! 32-byte allocation for any name up to 24 bytes), and [`Names`], the
//! vfs's names of a backend's nodes, lent to the backend.

use std::ops::Deref;

use crate::NodeId;

const INLINE: usize = 22;

/// A name of any length; up to 22 bytes without an allocation. 24 bytes.
#[derive(Clone, PartialEq, Eq)]
pub enum Name {
    Inline { len: u8, bytes: [u8; INLINE] },
    Heap(Box<[u8]>),
}

impl Default for Name {
    fn default() -> Name {
        Name::from(&b""[..])
    }
}

impl From<&[u8]> for Name {
    fn from(b: &[u8]) -> Name {
        if b.len() <= INLINE {
            let mut bytes = [0u8; INLINE];
            bytes[..b.len()].copy_from_slice(b);
            Name::Inline {
                len: b.len() as u8,
                bytes,
            }
        } else {
            Name::Heap(b.into())
        }
    }
}

impl Deref for Name {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Name::Inline { len, bytes } => &bytes[..*len as usize],
            Name::Heap(b) => b,
        }
    }
}

impl std::fmt::Debug for Name {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", String::from_utf8_lossy(self))
    }
}

/// Where the vfs holds a backend's nodes by name: its dentry cache. A
/// backend that must reach a node again by name (a host descriptor it
/// closed to stay within a bound, a fid it released, every fid after a
/// reconnect) asks here instead of keeping names of its own: the dentry
/// cache already holds every name the vfs uses, and moves it with each
/// rename the vfs makes or learns of, so a second table could only lag.
///
/// Called from within backend calls: an implementation takes no lock a
/// backend call can hold (the vfs's writer lock is never held across one).
pub trait Names: Send + Sync {
    /// `node`'s ancestry, `node` first: each node with its name in the
    /// directory that is the next entry's node; the last entry's directory
    /// is the root. Empty for the root. `None` when no cached name leads
    /// to `node` (removed, or moved behind the vfs's back and not found
    /// since): the backend answers `ESTALE`, as for a name that no longer
    /// holds the node.
    fn path_of(&self, node: NodeId) -> Option<Vec<(NodeId, Name)>>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_names_are_inline_long_ones_on_the_heap_and_both_read_back() {
        assert_eq!(std::mem::size_of::<Name>(), 24);
        let short = Name::from(&b"Makefile"[..]);
        assert!(matches!(short, Name::Inline { .. }));
        assert_eq!(&*short, b"Makefile");
        let edge = Name::from(&[b'x'; 22][..]);
        assert!(matches!(edge, Name::Inline { .. }));
        assert_eq!(edge.len(), 22);
        let long = Name::from(&b"a-rather-long-file-name.generated.h"[..]);
        assert!(matches!(long, Name::Heap(_)));
        assert_eq!(&*long, b"a-rather-long-file-name.generated.h");
        assert_eq!(&*Name::default(), b"");
    }
}
