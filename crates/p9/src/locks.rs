//! 9P2000.L file locks (`Tlock`, `Tgetlock`) and walkfs's one extension.
//!
//! A lock is a POSIX record lock of an owner, which 9P2000.L names by a
//! process id and a client id. A server never waits: a lock held
//! elsewhere is `Rlock` status [`BLOCKED`], and a client asking with
//! [`FLAG_BLOCK`] asks again later (Linux's v9fs polls the same way).
//!
//! The extension: [`FLAG_FLOCK`] asks for a `flock` lock (the whole file,
//! the BSD family, which never conflicts with record locks), so that a
//! client's `flock` meets the server host's `flock`. A walkfs client
//! sends it only to a server that answered the order probe (p9::order:
//! `walkfs serve`); to any other it sends a whole-file record lock, as
//! v9fs does for `flock`.

/// `Tlock`/`Tgetlock` types.
pub const TYPE_RDLCK: u8 = 0;
pub const TYPE_WRLCK: u8 = 1;
pub const TYPE_UNLCK: u8 = 2;

/// `Tlock` flags: wait for the lock (the server still never blocks), and
/// a lock reclaimed after the server restarted.
pub const FLAG_BLOCK: u32 = 1;
pub const FLAG_RECLAIM: u32 = 2;
/// walkfs: a `flock` lock, not a record lock.
pub const FLAG_FLOCK: u32 = 1 << 16;

/// `Rlock` statuses.
pub const SUCCESS: u8 = 0;
pub const BLOCKED: u8 = 1;
pub const ERROR: u8 = 2;
pub const GRACE: u8 = 3;
