//! The inode numbers clients see, and the ranges of them granted ahead
//! (docs/inode-grants.md).
//!
//! A file's number on the wire (its qid path, what every client shows
//! as `st_ino`) is the host's inode number, except for a file a client
//! made with a granted number: that file shows the granted number, to
//! every client and through every one of its names, for as long as the
//! server runs. Granted numbers come from [`FIRST`] up, far above any
//! inode number ext4, xfs, btrfs or tmpfs hands out, so the two spaces do
//! not meet.
//!
//! Every qid the server sends goes through [`Inos::shown`]: one relaxed
//! load while nothing is bound (a server whose clients never asked for a
//! grant), one read-locked hash lookup after.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed, Ordering::SeqCst};

use parking_lot::RwLock;
use walkfs_p9::inogrant::Grant;

/// The first number the server grants.
pub(crate) const FIRST: u64 = 0x7f00_0000_0000_0000;
/// The most numbers one grant hands out.
pub(crate) const MAX_GRANT: u64 = 1 << 16;
/// Numbers one `Txattrwalk("walkfs.inogrant")` hands out: a client
/// asks again about once per this many creates.
pub(crate) const GRANT: u64 = 4096;
/// Unspent ranges one connection may hold (a client asks for the next
/// when its current one runs low, so two suffice).
const MAX_RANGES: usize = 4;

/// The server's number space: what it granted and what is bound.
pub(crate) struct Inos {
    next: AtomicU64,
    /// Host inode number -> the granted number its file was made with.
    bound: RwLock<HashMap<u64, u64>>,
    /// Set once anything is bound: until then [`Inos::shown`] needs no
    /// lock. Never cleared (a lookup in an empty map is cheap enough).
    any: AtomicBool,
}

impl Default for Inos {
    fn default() -> Inos {
        Inos {
            next: AtomicU64::new(FIRST),
            bound: RwLock::new(HashMap::new()),
            any: AtomicBool::new(false),
        }
    }
}

impl Inos {
    /// Hand out the next `count` numbers (at most [`MAX_GRANT`]). Numbers
    /// are never handed out twice, even after their connection closed
    /// unspent: 2^56 of them last longer than any server.
    pub fn grant(&self, count: u64) -> Grant {
        let count = count.clamp(1, MAX_GRANT);
        let base = self.next.fetch_add(count, Relaxed);
        Grant { base, count }
    }

    /// The number clients see for the host file `host`.
    #[inline]
    pub fn shown(&self, host: u64) -> u64 {
        if !self.any.load(SeqCst) {
            return host;
        }
        self.bound.read().get(&host).copied().unwrap_or(host)
    }

    /// Make a file with `make` (which returns it and its host number)
    /// and bind it to `granted`. The map stays write-locked from before
    /// the file exists until it is bound, so no qid of it is ever sent
    /// with the host number: a reader that found the file takes the
    /// lock after the create began (`any` is set first; the kernel's
    /// create orders the store before any stat that sees the file).
    /// `make` must not send a qid itself.
    pub fn make<T>(
        &self,
        granted: u64,
        make: impl FnOnce() -> walkfs_vfs::Result<(T, u64)>,
    ) -> walkfs_vfs::Result<T> {
        let mut map = self.bound.write();
        self.any.store(true, SeqCst);
        let (t, host) = make()?;
        map.insert(host, granted);
        Ok(t)
    }

    #[cfg(test)]
    fn bind(&self, host: u64, granted: u64) {
        let _ = self.make(granted, || Ok(((), host)));
    }

    /// The file with host number `host` is gone (its last name removed
    /// through this server): its number may go to another file, which
    /// must not inherit the granted one.
    pub fn unbind(&self, host: u64) {
        if self.any.load(SeqCst) {
            self.bound.write().remove(&host);
        }
    }

    /// Is anything bound at all (worth a stat to find what to unbind)?
    pub fn any(&self) -> bool {
        self.any.load(SeqCst)
    }

    /// Files showing a granted number.
    pub fn bound(&self) -> usize {
        self.bound.read().len()
    }
}

/// One connection's granted numbers not yet spent.
#[derive(Default)]
pub(crate) struct Unspent {
    ranges: Vec<Range>,
}

struct Range {
    grant: Grant,
    /// One bit per number: spent.
    spent: Vec<u64>,
    left: u64,
}

impl Unspent {
    /// Keep `g` for this connection; `false` when it holds too many
    /// ranges already (the grant is refused).
    pub fn add(&mut self, g: Grant) -> bool {
        if self.ranges.len() >= MAX_RANGES {
            return false;
        }
        self.ranges.push(Range {
            grant: g,
            spent: vec![0; g.count.div_ceil(64) as usize],
            left: g.count,
        });
        true
    }

    /// Spend `ino`: `true` when it was granted to this connection and not
    /// spent before. A number is spent by the create that names it,
    /// whether or not the create succeeds.
    pub fn spend(&mut self, ino: u64) -> bool {
        let Some(i) = self.ranges.iter().position(|r| r.grant.contains(ino)) else {
            return false;
        };
        let r = &mut self.ranges[i];
        let off = ino - r.grant.base;
        let (word, bit) = ((off / 64) as usize, 1u64 << (off % 64));
        if r.spent[word] & bit != 0 {
            return false;
        }
        r.spent[word] |= bit;
        r.left -= 1;
        if r.left == 0 {
            self.ranges.swap_remove(i);
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::{Inos, Unspent, FIRST, MAX_GRANT};

    #[test]
    fn numbers_are_granted_once_and_spent_once_by_their_connection() {
        let inos = Inos::default();
        let a = inos.grant(3);
        let b = inos.grant(u64::MAX);
        assert_eq!(a.base, FIRST);
        assert_eq!(b.base, FIRST + 3, "ranges never overlap");
        assert_eq!(b.count, MAX_GRANT);
        let mut mine = Unspent::default();
        assert!(mine.add(a));
        assert!(mine.spend(FIRST + 1));
        assert!(!mine.spend(FIRST + 1), "spent twice");
        assert!(!mine.spend(b.base), "granted to someone else");
        assert!(mine.spend(FIRST) && mine.spend(FIRST + 2));
        assert!(mine.ranges.is_empty(), "a spent range is dropped");
        for _ in 0..4 {
            assert!(mine.add(inos.grant(1)));
        }
        assert!(!mine.add(inos.grant(1)), "too many ranges held");
    }

    #[test]
    fn a_bound_file_shows_its_granted_number_until_unbound() {
        let inos = Inos::default();
        assert_eq!(inos.shown(12), 12);
        inos.bind(12, FIRST + 7);
        assert_eq!(inos.shown(12), FIRST + 7);
        assert_eq!(inos.shown(13), 13);
        assert_eq!(inos.bound(), 1);
        inos.unbind(12);
        assert_eq!(inos.shown(12), 12);
    }
}
