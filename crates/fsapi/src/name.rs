//! A file name as the node tables keep it: one per file of a tree that
//! may hold millions, so a short name (most are) is stored inline instead
//! of in a heap block of its own (a boxed slice costs its 16 bytes plus
//! a 32-byte allocation for any name up to 24 bytes).

use std::ops::Deref;

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
