//! Where the server's inode-number bindings (inos.rs) outlive it: a
//! journal in a state directory beside (never inside) the export.
//!
//! A file made with a granted number must show that number for as long
//! as it exists, across restarts of the server, a crash included
//! (docs/inode-grants.md). The journal holds three kinds of record,
//! appended with one `write(2)` each:
//!
//! - *bind*: the granted number, the host inode number, and the file's
//!   host file handle (`name_to_handle_at`: inode number plus the
//!   filesystem's generation, so a handle never opens a later file that
//!   reuses the number);
//! - *unbind*: the file lost its last name through this server;
//! - *reserve*: every number below this one may have been granted (the
//!   next server grants above it);
//! - *intent*: a create with a granted number is about to run (the
//!   number, the time, the name): a server killed between the create and
//!   its *bind* left a file no binding names, and the client's replay of
//!   the create finds it; a file of that name born after the intent is
//!   the one the create made.
//!
//! A record is in the page cache once `write` returns, so a server killed
//! with SIGKILL loses nothing; a host crash may lose the records of the
//! last seconds (the journal is not synced per create: that would cost a
//! disk flush per file made). At start the journal is read, each bound
//! file is opened by its handle (`open_by_handle_at`) and kept only if it
//! still exists with the same inode number, and the journal is rewritten
//! with what survived. A file deleted on the host while no server ran is
//! dropped there, and its number is never shown for the file that
//! reuses its inode.
//!
//! Opening by handle needs `CAP_DAC_READ_SEARCH`: a server without it
//! cannot check the bindings and starts with none (its numbers after a
//! restart are the host's, as before this journal), and says so.
//!
//! The state directory also holds the server's secret (16 random bytes),
//! the key of the grant tickets a client shows to reclaim its numbers
//! after a reconnect (inos.rs).

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use parking_lot::Mutex;

/// The journal's first bytes.
const MAGIC: &[u8; 16] = b"walkfs-inos v1\n\0";
const BIND: u8 = 1;
const UNBIND: u8 = 2;
const RESERVE: u8 = 3;
/// The filesystem the handles belong to (`statfs`'s `f_fsid`, in
/// `granted`): handles of another filesystem, one made afresh at the same
/// path say, are dropped unopened.
const FS: u8 = 4;
const INTENT: u8 = 5;
/// `MAX_HANDLE_SZ` of the kernel.
pub(crate) const MAX_HANDLE: usize = 128;
/// Fixed part of a record: kind, handle length, handle type, granted,
/// host.
const HEAD: usize = 1 + 1 + 4 + 8 + 8;

/// A host file handle (what `name_to_handle_at` gives).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct HostHandle {
    pub ty: i32,
    pub bytes: Vec<u8>,
}

#[repr(C)]
struct RawHandle {
    bytes: u32,
    ty: i32,
    f_handle: [u8; MAX_HANDLE],
}

impl HostHandle {
    /// The handle of `name` in directory `dir` (not following a symlink).
    pub fn of(dir: BorrowedFd, name: &[u8]) -> io::Result<HostHandle> {
        let name = std::ffi::CString::new(name).map_err(|_| io::ErrorKind::InvalidInput)?;
        let mut h = RawHandle {
            bytes: MAX_HANDLE as u32,
            ty: 0,
            f_handle: [0; MAX_HANDLE],
        };
        let mut mount_id = 0;
        // SAFETY: `h` is a writable file_handle with room for MAX_HANDLE
        // bytes, as its `handle_bytes` says; the name is a C string.
        let r = unsafe {
            libc::syscall(
                libc::SYS_name_to_handle_at,
                dir.as_raw_fd(),
                name.as_ptr(),
                &mut h as *mut RawHandle,
                &mut mount_id as *mut libc::c_int,
                // Symlinks are not followed unless AT_SYMLINK_FOLLOW.
                0,
            )
        };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
        let n = (h.bytes as usize).min(MAX_HANDLE);
        Ok(HostHandle {
            ty: h.ty,
            bytes: h.f_handle[..n].to_vec(),
        })
    }

    /// Open the file the handle names (`O_PATH`), on the filesystem of
    /// `mount`.
    fn open(&self, mount: BorrowedFd) -> io::Result<OwnedFd> {
        let mut h = RawHandle {
            bytes: self.bytes.len() as u32,
            ty: self.ty,
            f_handle: [0; MAX_HANDLE],
        };
        h.f_handle[..self.bytes.len()].copy_from_slice(&self.bytes);
        // SAFETY: `h` is a valid file_handle of `bytes` bytes.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_open_by_handle_at,
                mount.as_raw_fd(),
                &mut h as *mut RawHandle,
                libc::O_PATH | libc::O_NOFOLLOW,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a descriptor the kernel just returned, owned by nobody
        // else.
        Ok(unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd as i32) })
    }
}

/// One binding as the journal holds it.
#[derive(Clone, Debug)]
pub(crate) struct Bound {
    pub granted: u64,
    pub handle: Option<HostHandle>,
    /// The file's birth time, as found when the journal was read (not
    /// journaled: the handle names the file, this tells a later file of
    /// the same number from it while the server runs).
    pub born: i64,
}

/// What a journal held once read and checked.
pub(crate) struct Loaded {
    /// Host inode number -> binding.
    pub bound: HashMap<u64, Bound>,
    /// The next server grants from here.
    pub reserved: u64,
    /// Creates begun and not seen bound: granted -> (time, name).
    pub intents: HashMap<u64, (i64, Vec<u8>)>,
}

/// How long a server waits for the previous one to let go of the state
/// directory.
const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

/// The open journal.
pub struct InoState {
    file: Mutex<File>,
    /// Held (flock) for the server's life. Its content says whether the
    /// server granted file locks: written at the first grant (the file is
    /// open before the sandbox, which hides the directory), read by the
    /// next server, which then gives their holders a grace time to
    /// reclaim them ([`InoState::had_locks`]).
    lock: File,
    had_locks: bool,
    noted_locks: std::sync::atomic::AtomicBool,
    pub(crate) dir: PathBuf,
    pub(crate) secret: [u8; 16],
    pub(crate) loaded: Mutex<Option<Loaded>>,
}

/// What the state directory's lock file holds once locks were granted.
const LOCKS_MARK: &[u8] = b"locks granted\n";

impl InoState {
    /// Did the server before this one grant file locks (and so may have
    /// stopped with clients holding some)?
    pub fn had_locks(&self) -> bool {
        self.had_locks
    }

    /// A lock was granted: the next server gives a grace time.
    pub fn note_locks(&self) {
        use std::os::unix::fs::FileExt;
        if !self
            .noted_locks
            .swap(true, std::sync::atomic::Ordering::Relaxed)
        {
            if let Err(e) = self.lock.write_all_at(LOCKS_MARK, 0) {
                tracing::warn!("state dir {}: {e}", self.dir.display());
            }
        }
    }
}

impl std::fmt::Debug for InoState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InoState").field("dir", &self.dir).finish()
    }
}

fn encode(kind: u8, granted: u64, host: u64, handle: Option<&HostHandle>, out: &mut Vec<u8>) {
    let (ty, bytes) = handle.map_or((0, &[][..]), |h| (h.ty, &h.bytes[..]));
    out.push(kind);
    out.push(bytes.len() as u8);
    out.extend_from_slice(&ty.to_le_bytes());
    out.extend_from_slice(&granted.to_le_bytes());
    out.extend_from_slice(&host.to_le_bytes());
    out.extend_from_slice(bytes);
}

/// The records of `buf` (after the magic), in order; a torn last record
/// (a write cut short) ends the list.
fn decode(buf: &[u8]) -> Vec<(u8, u64, u64, Option<HostHandle>)> {
    let mut out = Vec::new();
    let mut at = 0;
    while buf.len() - at >= HEAD {
        let r = &buf[at..];
        let n = r[1] as usize;
        if n > MAX_HANDLE || r.len() < HEAD + n {
            break;
        }
        let word = |i: usize| u64::from_le_bytes(r[i..i + 8].try_into().unwrap_or([0; 8]));
        let ty = i32::from_le_bytes(r[2..6].try_into().unwrap_or([0; 4]));
        let handle = (n > 0).then(|| HostHandle {
            ty,
            bytes: r[HEAD..HEAD + n].to_vec(),
        });
        out.push((r[0], word(6), word(14), handle));
        at += HEAD + n;
    }
    out
}

impl InoState {
    /// Open (or make) the journal in `dir` for the export at `export`:
    /// read it, keep the bindings whose files still exist, and rewrite
    /// it with them. Run before the sandbox: the state directory is
    /// outside the export, and checking needs `CAP_DAC_READ_SEARCH`.
    pub fn open(dir: &Path, export: &Path) -> io::Result<InoState> {
        std::fs::create_dir_all(dir)?;
        // One server per state directory: a second would rewrite the
        // journal under the first.
        let lock = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(dir.join("lock"))?;
        // A server that just stopped (an unmount, then a mount at once)
        // may still be on its way out: it is waited for, briefly.
        let t0 = std::time::Instant::now();
        // SAFETY: flock on a descriptor we own.
        while unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            if t0.elapsed() >= LOCK_WAIT {
                return Err(io::Error::new(
                    io::ErrorKind::WouldBlock,
                    "another server uses this state directory",
                ));
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let had_locks = {
            let mut b = Vec::new();
            (&lock).read_to_end(&mut b)?;
            b.starts_with(LOCKS_MARK)
        };
        lock.set_len(0)?;
        let secret = secret_in(dir)?;
        let path = dir.join("inos");
        let mut old = Vec::new();
        match File::open(&path) {
            Ok(mut f) => {
                f.read_to_end(&mut old)?;
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        let records = if old.starts_with(MAGIC) {
            decode(&old[MAGIC.len()..])
        } else {
            if !old.is_empty() {
                tracing::warn!("{}: not a walkfs journal; starting afresh", path.display());
            }
            Vec::new()
        };
        let root = File::open(export)?;
        let fsid = fsid_of(root.as_fd())?;
        let loaded = check(records, root.as_fd(), fsid);
        // Rewrite: what survived, then append from there.
        let tmp = dir.join("inos.new");
        let mut out = MAGIC.to_vec();
        encode(FS, fsid, 0, None, &mut out);
        encode(RESERVE, loaded.reserved, 0, None, &mut out);
        for (host, b) in &loaded.bound {
            encode(BIND, b.granted, *host, b.handle.as_ref(), &mut out);
        }
        for (g, (at, name)) in &loaded.intents {
            encode_intent(*g, *at, name, &mut out);
        }
        {
            let mut f = OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&tmp)?;
            f.write_all(&out)?;
            f.sync_all()?;
        }
        std::fs::rename(&tmp, &path)?;
        let file = OpenOptions::new().append(true).open(&path)?;
        tracing::info!(
            "inode numbers: {} bound files kept, grants from {:#x} ({})",
            loaded.bound.len(),
            loaded.reserved,
            path.display()
        );
        Ok(InoState {
            lock,
            had_locks,
            noted_locks: std::sync::atomic::AtomicBool::new(false),
            file: Mutex::new(file),
            dir: dir.to_path_buf(),
            secret,
            loaded: Mutex::new(Some(loaded)),
        })
    }

    fn append(&self, kind: u8, granted: u64, host: u64, handle: Option<&HostHandle>) {
        let mut rec = Vec::with_capacity(HEAD + MAX_HANDLE);
        encode(kind, granted, host, handle, &mut rec);
        if let Err(e) = self.file.lock().write_all(&rec) {
            // The binding holds while this server runs; after a restart
            // the file shows its host number.
            tracing::warn!("inode journal {}: {e}", self.dir.display());
        }
    }

    pub(crate) fn bind(&self, granted: u64, host: u64, handle: Option<&HostHandle>) {
        self.append(BIND, granted, host, handle);
    }

    pub(crate) fn unbind(&self, granted: u64, host: u64) {
        self.append(UNBIND, granted, host, None);
    }

    /// A create with `granted` is about to make `name`.
    pub(crate) fn intent(&self, granted: u64, name: &[u8]) {
        let at = now_ns();
        let mut rec = Vec::with_capacity(HEAD + name.len());
        encode_intent(granted, at, name, &mut rec);
        if let Err(e) = self.file.lock().write_all(&rec) {
            tracing::warn!("inode journal {}: {e}", self.dir.display());
        }
    }

    pub(crate) fn reserve(&self, upto: u64) {
        self.append(RESERVE, upto, 0, None);
    }

    /// Make the journal durable (a client's `syncfs`).
    pub fn sync(&self) -> io::Result<()> {
        self.file.lock().sync_data()
    }
}

fn encode_intent(granted: u64, at: i64, name: &[u8], out: &mut Vec<u8>) {
    let name = &name[..name.len().min(MAX_HANDLE)];
    let h = HostHandle {
        ty: 0,
        bytes: name.to_vec(),
    };
    encode(INTENT, granted, at as u64, Some(&h), out);
}

/// Nanoseconds since the epoch (what a birth time is in).
pub(crate) fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64)
}

/// Replay `records` and keep the bindings whose files still exist.
fn check(records: Vec<(u8, u64, u64, Option<HostHandle>)>, mount: BorrowedFd, fsid: u64) -> Loaded {
    let mut bound: HashMap<u64, Bound> = HashMap::new();
    let mut reserved = crate::inos::FIRST;
    let mut same_fs = true;
    let mut intents = HashMap::new();
    for (kind, granted, host, handle) in records {
        match kind {
            FS => same_fs = granted == fsid,
            INTENT => {
                let name = handle.map(|h| h.bytes).unwrap_or_default();
                intents.insert(granted, (host as i64, name));
            }
            BIND => {
                reserved = reserved.max(granted + 1);
                intents.remove(&granted);
                bound.insert(
                    host,
                    Bound {
                        granted,
                        handle,
                        born: 0,
                    },
                );
            }
            UNBIND if bound.get(&host).is_some_and(|b| b.granted == granted) => {
                bound.remove(&host);
            }
            RESERVE => reserved = reserved.max(granted),
            _ => {}
        }
    }
    if !same_fs && !bound.is_empty() {
        tracing::info!(
            "inode numbers: the export is another filesystem than the journal's; \
             its {} bindings dropped",
            bound.len()
        );
        bound.clear();
    }
    let mut unchecked = 0usize;
    let mut can_open = true;
    bound.retain(|&host, b| {
        let Some(h) = &b.handle else {
            unchecked += 1;
            return false;
        };
        if !can_open {
            return false;
        }
        match h.open(mount) {
            Ok(fd) => match crate::own::identity_at(fd.as_fd(), c"", libc::AT_EMPTY_PATH) {
                Ok((ino, born)) if ino == host => {
                    b.born = born;
                    true
                }
                _ => false,
            },
            Err(e) if e.raw_os_error() == Some(libc::EPERM) => {
                tracing::warn!(
                    "inode numbers: cannot open files by handle (needs CAP_DAC_READ_SEARCH): \
                     files made through grants show their host numbers after this restart"
                );
                can_open = false;
                false
            }
            Err(_) => false,
        }
    });
    if unchecked > 0 {
        tracing::info!("inode numbers: {unchecked} bindings without a handle dropped");
    }
    if !same_fs {
        intents.clear();
    }
    Loaded {
        bound,
        reserved,
        intents,
    }
}

/// The filesystem id of `fd`'s filesystem.
fn fsid_of(fd: BorrowedFd) -> io::Result<u64> {
    // SAFETY: an all-zero statfs is a valid value of this plain C struct.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `fd` is open, `st` writable.
    if unsafe { libc::fstatfs(fd.as_raw_fd(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fsid_t is two ints; read as one 64-bit value.
    let id: [i32; 2] = unsafe { std::mem::transmute(st.f_fsid) };
    Ok((id[0] as u32 as u64) | ((id[1] as u32 as u64) << 32))
}

/// The server's secret in `dir`, made on first use.
fn secret_in(dir: &Path) -> io::Result<[u8; 16]> {
    let path = dir.join("secret");
    let mut s = [0u8; 16];
    if let Ok(mut f) = File::open(&path) {
        if f.read_exact(&mut s).is_ok() {
            return Ok(s);
        }
    }
    File::open("/dev/urandom")?.read_exact(&mut s)?;
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&path)?;
    f.write_all(&s)?;
    f.sync_all()?;
    Ok(s)
}

/// Where `walkfs serve` keeps the state of the export at `export` unless
/// told otherwise: `/var/lib/walkfs/serve/` for root, else
/// `$XDG_STATE_HOME/walkfs/serve/` (`~/.local/state/...`), in a directory
/// named after the export's canonical path.
pub fn default_dir(export: &Path) -> PathBuf {
    let canon = std::fs::canonicalize(export).unwrap_or_else(|_| export.to_path_buf());
    let base = name_of(&canon);
    // SAFETY: geteuid cannot fail.
    let root = if unsafe { libc::geteuid() } == 0 {
        PathBuf::from("/var/lib/walkfs/serve")
    } else if let Some(x) = std::env::var_os("XDG_STATE_HOME").filter(|x| !x.is_empty()) {
        PathBuf::from(x).join("walkfs/serve")
    } else {
        let home = std::env::var_os("HOME").unwrap_or_else(|| "/tmp".into());
        PathBuf::from(home).join(".local/state/walkfs/serve")
    };
    root.join(base)
}

/// `<last component>-<hash of the whole path>`: readable, and unique per
/// export.
fn name_of(canon: &Path) -> String {
    let bytes = canon.as_os_str().as_bytes();
    let h = crate::inos::siphash(&[0; 16], bytes);
    let last = canon
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "root".into());
    let last: String = last
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(40)
        .collect();
    format!("{last}-{h:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_a_torn_tail_is_dropped() {
        let h = HostHandle {
            ty: 1,
            bytes: vec![1, 2, 3, 4, 5, 6, 7, 8],
        };
        let mut buf = Vec::new();
        encode(BIND, 77, 12, Some(&h), &mut buf);
        encode(RESERVE, 900, 0, None, &mut buf);
        encode(UNBIND, 77, 12, None, &mut buf);
        let whole = decode(&buf);
        assert_eq!(whole.len(), 3);
        assert_eq!(whole[0], (BIND, 77, 12, Some(h)));
        assert_eq!(whole[1].1, 900);
        assert_eq!(decode(&buf[..buf.len() - 3]).len(), 2);
    }

    #[test]
    fn bindings_of_files_that_still_exist_survive_a_reopen_and_deleted_ones_do_not() {
        let export = tempfile::tempdir().unwrap();
        let state = tempfile::tempdir().unwrap();
        let root = File::open(export.path()).unwrap();
        let mut host = HashMap::new();
        for name in ["kept", "gone"] {
            std::fs::write(export.path().join(name), b"x").unwrap();
            let h = HostHandle::of(root.as_fd(), name.as_bytes()).unwrap();
            let ino = std::os::unix::fs::MetadataExt::ino(
                &std::fs::metadata(export.path().join(name)).unwrap(),
            );
            host.insert(name, (ino, h));
        }
        {
            let s = InoState::open(state.path(), export.path()).unwrap();
            s.bind(
                crate::inos::FIRST + 1,
                host["kept"].0,
                Some(&host["kept"].1),
            );
            s.bind(
                crate::inos::FIRST + 2,
                host["gone"].0,
                Some(&host["gone"].1),
            );
            s.reserve(crate::inos::FIRST + 4096);
        }
        std::fs::remove_file(export.path().join("gone")).unwrap();
        let s = InoState::open(state.path(), export.path()).unwrap();
        let l = s.loaded.lock().take().unwrap();
        assert_eq!(l.reserved, crate::inos::FIRST + 4096);
        // Root (as the tests run) can open by handle; without the
        // capability nothing is kept, which is the documented fallback.
        if l.bound.is_empty() {
            eprintln!("no CAP_DAC_READ_SEARCH: bindings not checkable");
            return;
        }
        assert_eq!(l.bound.len(), 1, "the deleted file's binding is dropped");
        assert_eq!(l.bound[&host["kept"].0].granted, crate::inos::FIRST + 1);
        // The rewritten journal holds the same.
        drop(s);
        let s = InoState::open(state.path(), export.path()).unwrap();
        assert_eq!(s.loaded.lock().take().unwrap().bound.len(), 1);
    }
}
