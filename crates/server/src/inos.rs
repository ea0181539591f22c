//! The inode numbers clients see, and the ranges of them granted ahead
//! (docs/inode-grants.md).
//!
//! A file's number on the wire (its qid path, what every client shows
//! as `st_ino`) is the host's inode number, except for a file a client
//! made with a granted number: that file shows the granted number, to
//! every client and through every one of its names, for as long as it
//! exists: across restarts of the server too, when the server keeps a
//! state directory (inostate.rs). Granted numbers come from [`FIRST`] up,
//! far above any inode number ext4, xfs, btrfs or tmpfs hands out, so the
//! two spaces do not meet.
//!
//! Every qid the server sends goes through [`Inos::shown`]: one relaxed
//! load while nothing is bound (a server whose clients never asked for a
//! grant), one read-locked hash lookup after.
//!
//! Invariants (under `bound`'s lock): `by_host` and `by_granted` are
//! inverse maps; a granted number is bound to at most one live host
//! file; every binding in them is in the journal before the create that
//! made it is answered.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed, Ordering::SeqCst};

use parking_lot::{Mutex, RwLock};
use walkfs_p9::inogrant::Grant;

use crate::inostate::{HostHandle, InoState};

/// The first number the server grants.
pub(crate) const FIRST: u64 = 0x7f00_0000_0000_0000;
/// The most numbers one grant hands out.
pub(crate) const MAX_GRANT: u64 = 1 << 16;
/// Numbers one `Txattrwalk("walkfs.inogrant")` hands out: a client
/// asks again about once per this many creates.
pub(crate) const GRANT: u64 = 4096;
/// Unspent ranges one connection may hold (a client asks for the next
/// when its current one runs low, so two suffice; a reconnecting client
/// reclaims at most two).
const MAX_RANGES: usize = 4;
/// How far a file's birth time may lag the clock the intent was stamped
/// with: filesystems stamp with the coarse clock, up to a tick behind.
const BIRTH_SLACK_NS: i64 = 20_000_000;
/// Numbers reserved in the journal at a time: one record per this many
/// granted.
const RESERVE_STEP: u64 = 1 << 24;

#[derive(Default)]
struct Bindings {
    /// Host inode number -> the granted number its file was made with,
    /// and the file's birth time (0: unknown). A file of that number
    /// born at another time is another file (the host reused the number
    /// after a delete this server did not see): it shows its own.
    by_host: HashMap<u64, (u64, i64)>,
    /// Granted number -> host inode number.
    by_granted: HashMap<u64, u64>,
}

/// The server's number space: what it granted and what is bound.
pub struct Inos {
    next: AtomicU64,
    /// Numbers below this are recorded as possibly granted.
    reserved: Mutex<u64>,
    bound: RwLock<Bindings>,
    /// Set once anything is bound: until then [`Inos::shown`] needs no
    /// lock. Never cleared (a lookup in an empty map is cheap enough).
    any: AtomicBool,
    /// Where bindings outlive the server, if anywhere.
    state: Option<InoState>,
    /// The key of grant tickets.
    secret: [u8; 16],
    /// Creates a previous server began and may not have bound
    /// (inostate.rs): granted -> (time begun, name).
    intents: Mutex<HashMap<u64, (i64, Vec<u8>)>>,
}

impl Default for Inos {
    /// Bindings for this server's life only; tickets keyed by a secret of
    /// this process.
    fn default() -> Inos {
        let mut secret = [0u8; 16];
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        secret[..8].copy_from_slice(&now.to_le_bytes());
        secret[8..].copy_from_slice(&u64::from(std::process::id()).to_le_bytes());
        Inos {
            next: AtomicU64::new(FIRST),
            reserved: Mutex::new(u64::MAX),
            bound: RwLock::new(Bindings::default()),
            any: AtomicBool::new(false),
            state: None,
            secret,
            intents: Mutex::new(HashMap::new()),
        }
    }
}

impl Inos {
    /// Numbers kept in `state` (inostate.rs): the bindings that survived
    /// are shown from the start, and grants go on above every number a
    /// previous server may have granted.
    /// Did the previous server of this state directory grant locks?
    pub fn had_locks(&self) -> bool {
        self.state.as_ref().is_some_and(InoState::had_locks)
    }

    /// A lock was granted (kept in the state directory, when there is one).
    pub fn note_locks(&self) {
        if let Some(s) = &self.state {
            s.note_locks();
        }
    }

    pub fn with_state(state: InoState) -> Inos {
        let loaded = state.loaded.lock().take();
        let mut b = Bindings::default();
        let mut next = FIRST;
        let mut intents = HashMap::new();
        if let Some(l) = loaded {
            next = l.reserved;
            intents = l.intents;
            for (host, bound) in l.bound {
                b.by_host.insert(host, (bound.granted, bound.born));
                b.by_granted.insert(bound.granted, host);
            }
        }
        let any = !b.by_host.is_empty();
        Inos {
            next: AtomicU64::new(next),
            reserved: Mutex::new(next),
            bound: RwLock::new(b),
            any: AtomicBool::new(any),
            secret: state.secret,
            state: Some(state),
            intents: Mutex::new(intents),
        }
    }

    /// Hand out the next `count` numbers (at most [`MAX_GRANT`]). Numbers
    /// are never handed out twice, even after their connection closed
    /// unspent, nor by a later server on the same state: 2^56 of them
    /// last longer than any server.
    pub fn grant(&self, count: u64) -> Grant {
        let count = count.clamp(1, MAX_GRANT);
        let base = self.next.fetch_add(count, Relaxed);
        if let Some(state) = &self.state {
            let mut r = self.reserved.lock();
            if base + count > *r {
                *r = base + count + RESERVE_STEP;
                state.reserve(*r);
            }
        }
        Grant {
            base,
            count,
            ticket: self.ticket(base, count),
        }
    }

    fn ticket(&self, base: u64, count: u64) -> u64 {
        let mut m = [0u8; 16];
        m[..8].copy_from_slice(&base.to_le_bytes());
        m[8..].copy_from_slice(&count.to_le_bytes());
        siphash(&self.secret, &m)
    }

    /// A range a client shows again after a reconnect: its own if the
    /// ticket is this server's (or a previous one's on the same state)
    /// and the range was granted.
    pub fn reclaim(&self, g: &Grant) -> bool {
        g.count <= MAX_GRANT
            && g.base >= FIRST
            && g.base
                .checked_add(g.count)
                .is_some_and(|end| end <= self.next.load(Relaxed))
            && g.ticket == self.ticket(g.base, g.count)
    }

    /// The number clients see for the host file `host`, where its birth
    /// time is not at hand (a directory entry, a change report).
    #[inline]
    pub fn shown(&self, host: u64) -> u64 {
        if !self.any.load(SeqCst) {
            return host;
        }
        self.bound.read().by_host.get(&host).map_or(host, |b| b.0)
    }

    /// The number clients see for the host file `host` born at `born`
    /// (0: unknown). A binding of an earlier file of that number goes.
    #[inline]
    pub fn shown_born(&self, host: u64, born: i64) -> u64 {
        self.granted_born(host, born).unwrap_or(host)
    }

    /// The granted number the host file `host` born at `born` is bound
    /// to, if any.
    pub fn granted_born(&self, host: u64, born: i64) -> Option<u64> {
        if !self.any.load(SeqCst) {
            return None;
        }
        let (granted, was) = *self.bound.read().by_host.get(&host)?;
        if born == 0 || was == 0 || born == was {
            return Some(granted);
        }
        self.unbind_born(host, was);
        None
    }

    /// The granted number host file `host` is bound to, if any.
    pub fn granted_of(&self, host: u64) -> Option<u64> {
        if !self.any.load(SeqCst) {
            return None;
        }
        self.bound.read().by_host.get(&host).map(|b| b.0)
    }

    /// Make a file with `make` (which returns it and its host number)
    /// and bind it to `granted`; `locate` gives its host handle, for the
    /// journal. The map stays write-locked from before the file exists
    /// until it is bound, so no qid of it is ever sent with the host
    /// number: a reader that found the file takes the lock after the
    /// create began (`any` is set first; the kernel's create orders the
    /// store before any stat that sees the file). `make` must not send a
    /// qid itself. `EEXIST` when `granted` names a live file already.
    pub(crate) fn make<T>(
        &self,
        granted: u64,
        name: &[u8],
        make: impl FnOnce() -> walkfs_vfs::Result<(T, u64, i64)>,
        locate: impl FnOnce() -> Option<HostHandle>,
    ) -> walkfs_vfs::Result<T> {
        let mut map = self.bound.write();
        if map.by_granted.contains_key(&granted) {
            return Err(walkfs_vfs::Errno::EEXIST);
        }
        self.any.store(true, SeqCst);
        if let Some(state) = &self.state {
            state.intent(granted, name);
        }
        let (t, host, born) = make()?;
        if let Some((old, _)) = map.by_host.insert(host, (granted, born)) {
            map.by_granted.remove(&old);
        }
        map.by_granted.insert(granted, host);
        if let Some(state) = &self.state {
            state.bind(granted, host, locate().as_ref());
        }
        Ok(t)
    }

    #[cfg(test)]
    fn bind(&self, host: u64, granted: u64, born: i64) {
        let _ = self.make(granted, b"t", || Ok(((), host, born)), || None);
    }

    /// A replayed create of `granted` finds `name` made by no binding:
    /// a previous server made it and died before binding it if it began
    /// that create, with that name, before the file was born. Then the
    /// file is bound now, and `true`.
    pub(crate) fn adopt_intended(
        &self,
        granted: u64,
        name: &[u8],
        host: u64,
        born: i64,
        locate: impl FnOnce() -> Option<HostHandle>,
    ) -> bool {
        let ours = {
            let i = self.intents.lock();
            i.get(&granted).is_some_and(|(at, n)| {
                n.as_slice() == name && born != 0 && born >= at - BIRTH_SLACK_NS
            })
        };
        if !ours {
            return false;
        }
        let mut map = self.bound.write();
        if map.by_granted.contains_key(&granted) || map.by_host.contains_key(&host) {
            return false;
        }
        self.any.store(true, SeqCst);
        map.by_host.insert(host, (granted, born));
        map.by_granted.insert(granted, host);
        self.intents.lock().remove(&granted);
        if let Some(state) = &self.state {
            state.bind(granted, host, locate().as_ref());
        }
        true
    }

    /// The file with host number `host` is gone (its last name removed
    /// through this server): its number may go to another file, which
    /// must not inherit the granted one.
    pub fn unbind(&self, host: u64) {
        if !self.any.load(SeqCst) {
            return;
        }
        let mut map = self.bound.write();
        if let Some((g, _)) = map.by_host.remove(&host) {
            map.by_granted.remove(&g);
            if let Some(state) = &self.state {
                state.unbind(g, host);
            }
        }
    }

    /// The file born at `born` that host number `host` was bound for is
    /// gone, deleted behind the server's back: unbind it (if still so).
    #[cold]
    fn unbind_born(&self, host: u64, born: i64) {
        let mut map = self.bound.write();
        let Some(&(g, was)) = map.by_host.get(&host) else {
            return;
        };
        if was != born {
            return;
        }
        tracing::debug!("inode numbers: {host} is another file now; {g:#x} unbound");
        map.by_host.remove(&host);
        map.by_granted.remove(&g);
        if let Some(state) = &self.state {
            state.unbind(g, host);
        }
    }

    /// Is anything bound at all (worth a stat to find what to unbind)?
    pub fn any(&self) -> bool {
        self.any.load(SeqCst)
    }

    /// Files showing a granted number.
    pub fn bound(&self) -> usize {
        self.bound.read().by_host.len()
    }

    /// Make the journal durable.
    pub fn sync(&self) {
        if let Some(state) = &self.state {
            if let Err(e) = state.sync() {
                tracing::warn!("inode journal: {e}");
            }
        }
    }
}

/// SipHash-2-4 of `m` under `key`: the grant tickets' MAC, and a stable
/// hash for names.
pub(crate) fn siphash(key: &[u8; 16], m: &[u8]) -> u64 {
    let k0 = u64::from_le_bytes(key[..8].try_into().unwrap_or([0; 8]));
    let k1 = u64::from_le_bytes(key[8..].try_into().unwrap_or([0; 8]));
    let mut v = [
        k0 ^ 0x736f_6d65_7073_6575,
        k1 ^ 0x646f_7261_6e64_6f6d,
        k0 ^ 0x6c79_6765_6e65_7261,
        k1 ^ 0x7465_6462_7974_6573,
    ];
    fn round(v: &mut [u64; 4]) {
        v[0] = v[0].wrapping_add(v[1]);
        v[1] = v[1].rotate_left(13) ^ v[0];
        v[0] = v[0].rotate_left(32);
        v[2] = v[2].wrapping_add(v[3]);
        v[3] = v[3].rotate_left(16) ^ v[2];
        v[0] = v[0].wrapping_add(v[3]);
        v[3] = v[3].rotate_left(21) ^ v[0];
        v[2] = v[2].wrapping_add(v[1]);
        v[1] = v[1].rotate_left(17) ^ v[2];
        v[2] = v[2].rotate_left(32);
    }
    let mut chunks = m.chunks_exact(8);
    for c in &mut chunks {
        let w = u64::from_le_bytes(c.try_into().unwrap_or([0; 8]));
        v[3] ^= w;
        round(&mut v);
        round(&mut v);
        v[0] ^= w;
    }
    let mut last = [0u8; 8];
    let rest = chunks.remainder();
    last[..rest.len()].copy_from_slice(rest);
    last[7] = m.len() as u8;
    let w = u64::from_le_bytes(last);
    v[3] ^= w;
    round(&mut v);
    round(&mut v);
    v[0] ^= w;
    v[2] ^= 0xff;
    for _ in 0..4 {
        round(&mut v);
    }
    v[0] ^ v[1] ^ v[2] ^ v[3]
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
    use super::{siphash, Grant, Inos, Unspent, FIRST, MAX_GRANT};

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
    fn siphash_matches_the_reference_vector() {
        // SipHash-2-4 paper, appendix A: key 00..0f, message 00..0e.
        let key: [u8; 16] = std::array::from_fn(|i| i as u8);
        let m: Vec<u8> = (0..15u8).collect();
        assert_eq!(siphash(&key, &m), 0xa129_ca61_49be_45e5);
    }

    #[test]
    fn a_ticket_reclaims_its_own_range_only() {
        let inos = Inos::default();
        let g = inos.grant(10);
        assert!(inos.reclaim(&g));
        let forged = Grant {
            base: g.base + 1,
            ..g
        };
        assert!(!inos.reclaim(&forged));
        let other = Inos::default();
        std::thread::sleep(std::time::Duration::from_millis(1));
        assert!(!Inos::default().reclaim(&g) || other.secret == inos.secret);
        // A number bound already cannot name a second file.
        inos.bind(5, g.base, 0);
        assert_eq!(
            inos.make(g.base, b"t", || Ok(((), 6, 0)), || None).err(),
            Some(walkfs_vfs::Errno::EEXIST)
        );
    }

    #[test]
    fn a_bound_file_shows_its_granted_number_until_unbound() {
        let inos = Inos::default();
        assert_eq!(inos.shown(12), 12);
        inos.bind(12, FIRST + 7, 0);
        assert_eq!(inos.shown(12), FIRST + 7);
        assert_eq!(inos.shown(13), 13);
        assert_eq!(inos.bound(), 1);
        inos.unbind(12);
        assert_eq!(inos.shown(12), 12);
    }

    #[test]
    fn a_later_file_of_a_bound_host_number_shows_its_own() {
        let inos = Inos::default();
        inos.bind(12, FIRST + 7, 1_000);
        assert_eq!(inos.shown_born(12, 1_000), FIRST + 7);
        assert_eq!(inos.shown_born(12, 0), FIRST + 7, "birth unknown");
        // The host deleted the file and gave its number to a new one.
        assert_eq!(inos.shown_born(12, 2_000), 12);
        assert_eq!(inos.bound(), 0, "the stale binding went");
        assert_eq!(inos.shown_born(12, 1_000), 12);
        // Its number is free for another create.
        inos.bind(13, FIRST + 7, 3_000);
        assert_eq!(inos.shown_born(13, 3_000), FIRST + 7);
    }
}
