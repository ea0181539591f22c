//! A connection's own changes: their reports are not sent back to it.
//!
//! The server learns of every change to its export from the host's
//! watcher (hostfs with fanotify or inotify), which cannot say who made
//! it. Sent back to the client that made it, the report of its own create
//! or write makes it drop what it knows to be true (the directory it just
//! filled, the file it just wrote) and ask again: over a link, a round
//! trip or two per file made, most of what `cache=coherent` used to cost
//! beyond `loose`.
//!
//! So each change a connection carries out leaves, for a short while,
//! what the changed object looked like right after it: which file a name
//! named (or none), or a file's attributes. A report of that object is
//! the connection's own while the object still looks exactly so, checked
//! against the host when the report comes (the server's cache dropped it
//! first). Anything else changed it since (the host, another client):
//! then it looks otherwise, and the report goes out. Not sent is only a
//! report whose object is as this connection left it, which is what its
//! cache already shows.
//!
//! A report that comes before its change was noted here is sent (it costs
//! the client a revalidation, never a stale answer).
//!
//! Invariant: a note stands for what the connection's cache shows of its
//! object, so it lives only while the connection can have learned nothing
//! else of it. It goes when a report of the object is sent to the
//! connection (the client drops what it had and learns the new state),
//! and when the connection walks to the name or lists its directory. A
//! file moved away and back, the client having seen it gone, is so never
//! taken for untouched. And a name's file is known by its inode number
//! and birth time: ext4 gives a new file the number of one just deleted,
//! and the number alone would take the new file for the old.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use walkfs_vfs::{Change, Ctx, Handle, Statx};

/// How long a change is remembered: reports come within milliseconds.
const KEEP: Duration = Duration::from_secs(2);
/// Changes remembered before the old ones are swept out.
const SWEEP_AT: usize = 4096;

#[derive(PartialEq, Eq, Hash)]
enum Key {
    /// A name in a directory (its host inode number).
    Entry(u64, Vec<u8>),
    /// A file's attributes or data (its host inode number).
    Inode(u64),
}

/// What an object looked like right after this connection changed it.
enum Is {
    /// The name in `dir` names host file `want`, (inode number, birth
    /// time), the birth time 0 where unknown (`None`: nothing).
    Names {
        dir: Handle,
        want: Option<(u64, i64)>,
    },
    /// The file's attributes.
    Attrs { file: Handle, sig: Sig },
}

/// Attributes a change of any kind moves (ctime moves with every one).
type Sig = (u64, i64, u32, i64, u32, u16, u32, u32, u32);

fn sig(x: &Statx) -> Sig {
    (
        x.stx_size,
        x.stx_mtime.tv_sec,
        x.stx_mtime.tv_nsec,
        x.stx_ctime.tv_sec,
        x.stx_ctime.tv_nsec,
        x.stx_mode,
        x.stx_uid,
        x.stx_gid,
        x.stx_nlink,
    )
}

/// The key a report's object is noted under.
fn key_of(c: &Change) -> Option<Key> {
    match c {
        Change::Entry { dir_ino, name, .. } => Some(Key::Entry(*dir_ino, name.clone())),
        Change::Inode { ino, .. } => Some(Key::Inode(*ino)),
        Change::All | Change::Degraded => None,
    }
}

/// What `name` in `dir` names on the host now: `Some(None)` for nothing,
/// `None` when that cannot be told. Asked of the host itself, through
/// the backend's descriptor of the directory where it has one (a host
/// directory): the cache above it may still hold what a report is about
/// to drop, and only the host has the birth time.
pub(crate) fn named(ctx: &Ctx, dir: &Handle, name: &[u8]) -> Option<Option<(u64, i64)>> {
    use std::os::fd::AsFd;
    let Ok(Some(fd)) = ctx.backend_fd(dir) else {
        return match ctx.statx(dir, name, libc::AT_SYMLINK_NOFOLLOW, libc::STATX_INO) {
            Ok(x) => Some(Some((x.stx_ino, 0))),
            Err(walkfs_vfs::Errno::ENOENT) => Some(None),
            Err(_) => None,
        };
    };
    let name = std::ffi::CString::new(name).ok()?;
    match identity_at(fd.as_fd(), &name, libc::AT_SYMLINK_NOFOLLOW) {
        Ok(id) => Some(Some(id)),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Some(None),
        Err(_) => None,
    }
}

/// The host inode number and birth time (nanoseconds; 0 where the
/// filesystem keeps none) of `name` in `dir` (`""` with `AT_EMPTY_PATH`:
/// `dir` itself).
pub(crate) fn identity_at(
    dir: std::os::fd::BorrowedFd,
    name: &std::ffi::CStr,
    flags: i32,
) -> std::io::Result<(u64, i64)> {
    use std::os::fd::AsRawFd;
    // SAFETY: an all-zero statx is a valid value of this plain C struct.
    let mut st: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: `dir` is an open descriptor, `name` a C string, `st`
    // writable.
    let r = unsafe {
        libc::statx(
            dir.as_raw_fd(),
            name.as_ptr(),
            flags,
            libc::STATX_INO | libc::STATX_BTIME,
            &mut st,
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let born = if st.stx_mask & libc::STATX_BTIME != 0 {
        st.stx_btime.tv_sec * 1_000_000_000 + i64::from(st.stx_btime.tv_nsec)
    } else {
        0
    };
    Ok((st.stx_ino, born))
}

/// How long a report's check waits for the connection's changes under
/// way to be noted.
const WAIT: Duration = Duration::from_millis(20);

/// One connection's recent changes.
#[derive(Default)]
pub(crate) struct Own {
    /// The connection reads notifications: only then is anything noted.
    on: std::sync::atomic::AtomicBool,
    m: Mutex<Noted>,
    /// Changes begun and finished (noted or failed). A report may come
    /// while the change it reports is still being noted, or with a later
    /// change of the same file under way: its check waits for what had
    /// begun to finish.
    seq: Mutex<(u64, u64)>,
    cv: Condvar,
}

/// The changes noted, and the size at which old ones are swept out.
struct Noted {
    v: HashMap<Key, (Instant, Is)>,
    sweep_at: usize,
}

impl Default for Noted {
    fn default() -> Noted {
        Noted {
            v: HashMap::new(),
            sweep_at: SWEEP_AT,
        }
    }
}

/// A change under way (see [`Own::begin`]); noted with
/// [`Noting::entry`]/[`Noting::inode`], finished when dropped.
pub(crate) struct Noting<'a> {
    own: Option<&'a Own>,
}

impl Noting<'_> {
    /// The change made `name` in `dir` name what it names now.
    pub fn entry(&self, ctx: &Ctx, dir: &Handle, name: &[u8]) {
        if let Some(o) = self.own {
            o.entry(ctx, dir, name);
        }
    }

    /// The change moved `file`'s data or attributes.
    pub fn inode(&self, ctx: &Ctx, file: &Handle) {
        if let Some(o) = self.own {
            o.inode(ctx, file);
        }
    }
}

impl Drop for Noting<'_> {
    fn drop(&mut self) {
        if let Some(o) = self.own {
            o.seq.lock().1 += 1;
            o.cv.notify_all();
        }
    }
}

impl Own {
    /// From now on the connection is sent reports: note its changes.
    pub fn start(&self) {
        self.on.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// A change begins: reports checked from now on wait for it.
    pub fn begin(&self) -> Noting<'_> {
        if !self.on.load(std::sync::atomic::Ordering::Relaxed) {
            return Noting { own: None };
        }
        self.seq.lock().0 += 1;
        Noting { own: Some(self) }
    }

    /// Wait until every change begun before now has finished (at most
    /// until `deadline`); the changes begun by then.
    fn settle(&self, deadline: Instant) -> u64 {
        let mut s = self.seq.lock();
        let began = s.0;
        while s.1 < began {
            if self.cv.wait_until(&mut s, deadline).timed_out() {
                break;
            }
        }
        began
    }

    fn put(&self, k: Key, is: Is) {
        let now = Instant::now();
        let mut m = self.m.lock();
        let m = &mut *m;
        // Swept when it has doubled since the last sweep: a burst of
        // changes (an untar) keeps thousands young, and a sweep per
        // change would cost a scan of them each.
        if m.v.len() >= m.sweep_at {
            m.v.retain(|_, (at, _)| now.duration_since(*at) < KEEP);
            m.sweep_at = (m.v.len() * 2).max(SWEEP_AT);
        }
        m.v.insert(k, (now, is));
    }

    /// This connection changed what `name` in `dir` names.
    fn entry(&self, ctx: &Ctx, dir: &Handle, name: &[u8]) {
        if !self.on.load(std::sync::atomic::Ordering::Relaxed) {
            return;
        }
        let Ok(d) = ctx.statx(dir, b"", libc::AT_EMPTY_PATH, libc::STATX_INO) else {
            return;
        };
        let Some(want) = named(ctx, dir, name) else {
            return;
        };
        self.put(
            Key::Entry(d.stx_ino, name.to_vec()),
            Is::Names {
                dir: dir.clone(),
                want,
            },
        );
    }

    /// This connection changed the data or attributes of `file`. The
    /// attributes are the host's: the cache is told to ask again first
    /// (its own idea of a write's mtime is a guess).
    fn inode(&self, ctx: &Ctx, file: &Handle) {
        if !self.on.load(std::sync::atomic::Ordering::Relaxed) {
            return;
        }
        if ctx.changed_outside(file).is_err() {
            return;
        }
        let Ok(x) = ctx.statx(file, b"", libc::AT_EMPTY_PATH, libc::STATX_BASIC_STATS) else {
            return;
        };
        self.put(
            Key::Inode(x.stx_ino),
            Is::Attrs {
                file: file.clone(),
                sig: sig(&x),
            },
        );
    }

    /// Is `c` (in host numbers) the report of this connection's own
    /// change, the object still as it left it?
    pub fn is_own(&self, ctx: &Ctx, c: &Change) -> bool {
        // The object may be between two changes of ours: compare once
        // the changes begun have been noted, and again while more began
        // meanwhile (a file written, then its times and mode set).
        let deadline = Instant::now() + WAIT;
        loop {
            let began = self.settle(deadline);
            if self.is_own_now(ctx, c) {
                return true;
            }
            if self.seq.lock().0 == began || Instant::now() >= deadline {
                // Sent: the connection learns the object anew.
                if let Some(key) = key_of(c) {
                    self.m.lock().v.remove(&key);
                }
                return false;
            }
        }
    }

    /// The connection walked to `name` in the directory of host inode
    /// `dir` and found the file of inode number `seen` there (`None`:
    /// nothing): where that is not what our note says, it now knows
    /// otherwise, and the note goes. (A walk to a name this connection
    /// just made, which the 9P client does for a fid of the new file,
    /// finds what the note says and keeps it.)
    pub fn learned(&self, dir: u64, name: &[u8], seen: Option<u64>) {
        let mut m = self.m.lock();
        if m.v.is_empty() {
            return;
        }
        let key = Key::Entry(dir, name.to_vec());
        if let Some((_, Is::Names { want, .. })) = m.v.get(&key) {
            if want.map(|w| w.0) != seen {
                m.v.remove(&key);
            }
        }
    }

    /// The connection listed the directory of host inode `dir`: `seen`
    /// gives the inode number a name has in the listing; `whole`: the
    /// listing is all of it (a name not in it is gone).
    pub fn learned_dir(&self, dir: u64, seen: &dyn Fn(&[u8]) -> Option<u64>, whole: bool) {
        let mut m = self.m.lock();
        if m.v.is_empty() {
            return;
        }
        m.v.retain(|k, (_, is)| match (k, is) {
            (Key::Entry(d, name), Is::Names { want, .. }) if *d == dir => {
                let now = seen(name);
                (now.is_none() && !whole) || now == want.map(|w| w.0)
            }
            _ => true,
        });
    }

    fn is_own_now(&self, ctx: &Ctx, c: &Change) -> bool {
        let Some(key) = key_of(c) else {
            return false;
        };
        let (dir, want, file, want_sig) = {
            let m = self.m.lock();
            match m.v.get(&key) {
                Some((at, _)) if at.elapsed() >= KEEP => return false,
                Some((_, Is::Names { dir, want })) => (Some(dir.clone()), Some(*want), None, None),
                Some((_, Is::Attrs { file, sig })) => (None, None, Some(file.clone()), Some(*sig)),
                None => {
                    tracing::trace!("not own (unknown): {c:?}");
                    return false;
                }
            }
        };
        match (dir, c, file) {
            (Some(dir), Change::Entry { name, .. }, _) => {
                let now = named(ctx, &dir, name);
                if now != want {
                    tracing::trace!("not own (now {now:?}, want {want:?}): {c:?}");
                }
                now.is_some() && now == want
            }
            (_, Change::Inode { .. }, Some(file)) => ctx
                .statx(&file, b"", libc::AT_EMPTY_PATH, libc::STATX_BASIC_STATS)
                .is_ok_and(|x| {
                    if Some(sig(&x)) != want_sig {
                        tracing::trace!("not own (now {:?} want {want_sig:?}): {c:?}", sig(&x));
                    }
                    Some(sig(&x)) == want_sig
                }),
            _ => false,
        }
    }

    /// Has this connection changed anything lately?
    pub fn any(&self) -> bool {
        !self.m.lock().v.is_empty()
    }
}
