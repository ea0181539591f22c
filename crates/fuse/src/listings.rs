//! Directory listings as READDIR serves them, by offset.
//!
//! Two ways a listing is asked for:
//! - With an open directory (`cache=none`): OPENDIR lists, its handle
//!   names the listing, RELEASEDIR drops it. Offsets are positions.
//! - Without one (`cache=loose`/`coherent`): OPENDIR is answered ENOSYS
//!   once, and the kernel stops sending OPENDIR and RELEASEDIR; it keeps
//!   what it read in its own cache of the directory (FOPEN_CACHE_DIR and
//!   FOPEN_KEEP_CACHE are its defaults then) and asks again only after
//!   the directory changed. A READDIR at offset 0 lists; later ones
//!   continue the listing their offset names.
//!
//! Offsets: the kernel hands back the offset of the last entry it took,
//! so each entry's offset must say where the next one is, across
//! requests that carry no other state. Entry `i` of listing `id` has
//! offset `(i + 1) << 32 | id`: a concurrent reader who starts over at
//! offset 0 makes a listing of its own and never moves another reader's
//! place, and a name that stays in the directory is returned exactly
//! once to each reader (POSIX leaves only names added or removed
//! meanwhile open).
//!
//! Reuse: a reader that starts over at offset 0 shares a listing not yet
//! read to its end if nothing changed the namespace since it was made
//! (the vfs's names generation) and it is younger than [`REUSE_FOR`]:
//! `rm -r` opens each directory twice (a first getdents to see whether
//! it is empty, then its walk), and the kernel caches a listing only
//! once a reader reached its end.
//!
//! Bounds: a listing read to its end is dropped; a reader who stops
//! early (`ls | head`) leaves one behind, so at most [`MAX_LISTINGS`]
//! are kept, the least recently used going first. An offset whose
//! listing went is served from a fresh listing at the same position,
//! which is right unless the directory changed meanwhile. The position
//! is the high half, so offsets grow with it: any offset below the last
//! one a reader was given names an entry (what `seekdir` to a position
//! of its own making expects, as on a file system that hashes names).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;
use walkfs_vfs::DirEntryOut;

/// Listings kept for readers who have not reached the end.
pub(crate) const MAX_LISTINGS: usize = 256;
/// How long an unfinished listing may be shared by a reader starting
/// over, the namespace unchanged.
pub(crate) const REUSE_FOR: std::time::Duration = std::time::Duration::from_secs(1);

/// A listing and where a request starts in it.
pub(crate) struct Slice {
    pub entries: Arc<Vec<DirEntryOut>>,
    /// The index of the first entry to return.
    pub start: usize,
    /// The listing's id in the low half of each entry's offset (0: plain
    /// positions, a handle's listing).
    pub tag: u64,
    /// The listing's id (0: a handle's listing, never dropped here).
    id: u32,
}

impl Slice {
    /// The offset the kernel gets for entry `i`.
    pub fn offset(&self, i: usize) -> u64 {
        if self.tag == 0 {
            i as u64 + 1
        } else {
            (i as u64 + 1) << 32 | self.tag
        }
    }
}

struct Listing {
    dir: u64,
    entries: Arc<Vec<DirEntryOut>>,
    used: Instant,
    made: Instant,
    /// The names generation it was made under (u64::MAX: never shared).
    gen: u64,
}

#[derive(Default)]
pub(crate) struct Listings {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    by_id: HashMap<u32, Listing>,
    next: u32,
}

impl Listings {
    /// Keep `entries` of directory `dir` as a new listing; the id names
    /// it (never 0).
    pub fn add(&self, dir: u64, entries: Vec<DirEntryOut>) -> u32 {
        self.add_at(dir, entries, u64::MAX).0
    }

    /// [`add`](Self::add) under names generation `gen`; the id and the
    /// entries as kept.
    fn add_at(
        &self,
        dir: u64,
        entries: Vec<DirEntryOut>,
        gen: u64,
    ) -> (u32, Arc<Vec<DirEntryOut>>) {
        let mut g = self.inner.lock();
        if g.by_id.len() >= MAX_LISTINGS {
            let oldest = g
                .by_id
                .iter()
                .min_by_key(|(_, l)| l.used)
                .map(|(id, _)| *id);
            if let Some(id) = oldest {
                g.by_id.remove(&id);
            }
        }
        let id = loop {
            g.next = g.next.wrapping_add(1);
            if g.next != 0 && !g.by_id.contains_key(&g.next) {
                break g.next;
            }
        };
        let entries = Arc::new(entries);
        g.by_id.insert(
            id,
            Listing {
                dir,
                entries: Arc::clone(&entries),
                used: Instant::now(),
                made: Instant::now(),
                gen,
            },
        );
        (id, entries)
    }

    /// Drop listing `id` (RELEASEDIR of its handle).
    pub fn remove(&self, id: u32) {
        self.inner.lock().by_id.remove(&id);
    }

    /// Where a READDIR of directory `dir` at `offset` continues, for a
    /// kernel that sent no OPENDIR, the namespace at generation `gen`:
    /// `list` makes a fresh listing when the offset is 0 (and no
    /// unfinished one of the same generation can be shared) or its
    /// listing went.
    pub fn continue_at(
        &self,
        dir: u64,
        offset: u64,
        gen: u64,
        list: impl FnOnce() -> Result<Vec<DirEntryOut>, walkfs_vfs::Errno>,
    ) -> Result<Slice, walkfs_vfs::Errno> {
        let (id, start) = ((offset & 0xffff_ffff) as u32, (offset >> 32) as usize);
        {
            let mut g = self.inner.lock();
            let found = if offset != 0 {
                g.by_id
                    .get_mut(&id)
                    .filter(|l| l.dir == dir)
                    .map(|l| (id, l))
            } else {
                g.by_id
                    .iter_mut()
                    .filter(|(_, l)| l.dir == dir && l.gen == gen && l.made.elapsed() < REUSE_FOR)
                    .max_by_key(|(_, l)| l.made)
                    .map(|(id, l)| (*id, l))
            };
            if let Some((id, l)) = found {
                l.used = Instant::now();
                return Ok(Slice {
                    entries: Arc::clone(&l.entries),
                    start,
                    tag: u64::from(id),
                    id,
                });
            }
        }
        let (id, entries) = self.add_at(dir, list()?, gen);
        Ok(Slice {
            entries,
            start,
            tag: u64::from(id),
            id,
        })
    }

    /// A handle's listing (`id` is the handle), from `start`.
    pub fn of_handle(&self, id: u32, dir: u64, start: u64) -> Option<Slice> {
        let g = self.inner.lock();
        let l = g.by_id.get(&id).filter(|l| l.dir == dir)?;
        Some(Slice {
            entries: Arc::clone(&l.entries),
            start: usize::try_from(start).unwrap_or(usize::MAX),
            tag: 0,
            id: 0,
        })
    }

    /// The reader reached the end of `s`: a listing without a handle is
    /// done with.
    pub fn finished(&self, s: &Slice) {
        if s.id != 0 {
            self.inner.lock().by_id.remove(&s.id);
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.inner.lock().by_id.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use walkfs_vfs::FileType;

    fn names(n: &[&str]) -> Vec<DirEntryOut> {
        n.iter()
            .enumerate()
            .map(|(i, s)| DirEntryOut {
                name: s.as_bytes().to_vec(),
                ino: i as u64 + 10,
                kind: FileType::Regular,
            })
            .collect()
    }

    /// Read `dir` to its end as the kernel does, `chunk` entries per
    /// request, the directory's contents changing to `later` after the
    /// first request.
    fn read_all(
        l: &Listings,
        dir: u64,
        first: &[&str],
        later: &[&str],
        chunk: usize,
    ) -> Vec<String> {
        let (mut off, mut out, mut n) = (0u64, Vec::new(), 0);
        loop {
            let now = if n == 0 { first } else { later };
            n += 1;
            let s = l
                .continue_at(dir, off, n as u64, || Ok(names(now)))
                .unwrap();
            let end = (s.start + chunk).min(s.entries.len());
            if s.start >= s.entries.len() {
                l.finished(&s);
                return out;
            }
            for i in s.start..end {
                out.push(String::from_utf8(s.entries[i].name.clone()).unwrap());
                off = s.offset(i);
            }
        }
    }

    #[test]
    fn a_reader_sees_one_listing_to_its_end_and_it_is_then_dropped() {
        let l = Listings::default();
        let got = read_all(&l, 7, &["a", "b", "c", "d", "e"], &["x"], 2);
        assert_eq!(got, ["a", "b", "c", "d", "e"]);
        assert_eq!(l.len(), 0, "a listing read to its end is dropped");
    }

    #[test]
    fn concurrent_readers_keep_their_own_places() {
        let l = Listings::default();
        let a = l
            .continue_at(1, 0, 1, || Ok(names(&["a", "b", "c"])))
            .unwrap();
        let off_a = a.offset(0);
        // A second reader starts over on a changed directory.
        let b = l.continue_at(1, 0, 2, || Ok(names(&["b", "c"]))).unwrap();
        assert_eq!(b.entries.len(), 2);
        // The first reader goes on in its own listing: b, c next.
        let a2 = l
            .continue_at(1, off_a, 2, || panic!("no new listing"))
            .unwrap();
        let rest: Vec<_> = a2.entries[a2.start..]
            .iter()
            .map(|e| e.name.clone())
            .collect();
        assert_eq!(rest, [b"b".to_vec(), b"c".to_vec()]);
        // An offset of another directory is not taken for this one's.
        let other = l.continue_at(2, off_a, 2, || Ok(names(&["z"]))).unwrap();
        assert_eq!(other.entries[0].name, b"z");
    }

    #[test]
    fn a_reader_starting_over_shares_an_unfinished_listing_while_nothing_changed() {
        let l = Listings::default();
        // `rm -r`: one getdents, close, open again.
        let first = l.continue_at(4, 0, 7, || Ok(names(&["a", "b"]))).unwrap();
        let again = l.continue_at(4, 0, 7, || panic!("listed again")).unwrap();
        assert!(Arc::ptr_eq(&first.entries, &again.entries));
        // A change of names since: a fresh listing.
        let changed = l.continue_at(4, 0, 8, || Ok(names(&["b"]))).unwrap();
        assert_eq!(changed.entries.len(), 1);
    }

    #[test]
    fn readers_who_stop_early_leave_a_bounded_number_of_listings() {
        let l = Listings::default();
        for d in 0..(MAX_LISTINGS as u64 * 3) {
            l.continue_at(d, 0, 0, || Ok(names(&["a", "b"]))).unwrap();
        }
        assert_eq!(l.len(), MAX_LISTINGS);
    }

    #[test]
    fn a_handles_listing_uses_plain_positions() {
        let l = Listings::default();
        let id = l.add(3, names(&["a", "b"]));
        let s = l.of_handle(id, 3, 1).unwrap();
        assert_eq!((s.start, s.offset(1)), (1, 2));
        l.finished(&s);
        assert!(l.of_handle(id, 3, 0).is_some(), "kept until RELEASEDIR");
        l.remove(id);
        assert!(l.of_handle(id, 3, 0).is_none());
    }
}
