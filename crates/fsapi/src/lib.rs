//! The contract between the vfs core and its backends.
//!
//! A backend ([`FileSystem`]) knows nothing of paths, permissions or caches:
//! it resolves one name in one directory, reads and changes one node. The
//! vfs core above it walks paths, checks permissions with the caller's
//! credentials and caches what it learned. Every method has a default that
//! answers `ENOSYS`, so a backend implements only what it supports.
//!
//! Names handed to a backend are never empty, never `.` or `..`, never
//! contain `/` or NUL and are at most [`NAME_MAX`] bytes: the vfs checks that
//! before it calls down, and backends may rely on it (hostfs re-checks anyway,
//! since it guards the host).

use std::fmt;
use std::sync::Arc;

pub mod acl;
pub mod caps;
pub mod clock;
mod errno;
pub mod keyindex;
pub mod locks;
mod name;
pub use errno::Errno;
pub use locks::{ByHandle, FileLock, LockFlavor, LockKind, LockOwner, LockTable, LOCK_EOF};
pub use name::{Name, Names};

/// Result of every fallible walkfs operation.
pub type Result<T> = std::result::Result<T, Errno>;

/// Longest name of one path component, as in Linux.
pub const NAME_MAX: usize = 255;
/// Longest path (including the terminating NUL in Linux's count).
pub const PATH_MAX: usize = 4096;

/// A backend's handle for one file system object. Stable for as long as the
/// backend has not been told to [`FileSystem::forget`] it, and unique: two
/// names for the same object (hard links) yield the same `NodeId`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(pub u64);

impl fmt::Debug for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "node#{}", self.0)
    }
}

/// A backend's handle for an open file.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct FileHandle(pub u64);

/// The file type bits of a mode (`S_IFMT`).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash)]
pub enum FileType {
    Regular,
    Directory,
    Symlink,
    CharDevice,
    BlockDevice,
    Fifo,
    Socket,
}

impl FileType {
    /// The type of a full mode word; `None` for an unknown `S_IFMT` value.
    pub fn from_mode(mode: u32) -> Option<FileType> {
        Some(match mode & libc::S_IFMT {
            libc::S_IFREG => FileType::Regular,
            libc::S_IFDIR => FileType::Directory,
            libc::S_IFLNK => FileType::Symlink,
            libc::S_IFCHR => FileType::CharDevice,
            libc::S_IFBLK => FileType::BlockDevice,
            libc::S_IFIFO => FileType::Fifo,
            libc::S_IFSOCK => FileType::Socket,
            _ => return None,
        })
    }

    /// The `S_IFMT` bits of this type.
    pub fn mode_bits(self) -> u32 {
        match self {
            FileType::Regular => libc::S_IFREG,
            FileType::Directory => libc::S_IFDIR,
            FileType::Symlink => libc::S_IFLNK,
            FileType::CharDevice => libc::S_IFCHR,
            FileType::BlockDevice => libc::S_IFBLK,
            FileType::Fifo => libc::S_IFIFO,
            FileType::Socket => libc::S_IFSOCK,
        }
    }

    /// The `d_type` value `getdents64` reports for this type.
    pub fn dtype(self) -> u8 {
        match self {
            FileType::Regular => libc::DT_REG,
            FileType::Directory => libc::DT_DIR,
            FileType::Symlink => libc::DT_LNK,
            FileType::CharDevice => libc::DT_CHR,
            FileType::BlockDevice => libc::DT_BLK,
            FileType::Fifo => libc::DT_FIFO,
            FileType::Socket => libc::DT_SOCK,
        }
    }
}

/// A point in time, as `struct timespec` (seconds may be negative).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug, Default, Hash)]
pub struct Timespec {
    pub sec: i64,
    pub nsec: u32,
}

impl Timespec {
    /// The current wall-clock time.
    pub fn now() -> Timespec {
        let d = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        Timespec {
            sec: d.as_secs() as i64,
            nsec: d.subsec_nanos(),
        }
    }

    /// Nanoseconds since the epoch, saturating; the compact form the inode
    /// cache stores (covers the years 1678..2262).
    pub fn as_nanos(self) -> i64 {
        self.sec
            .saturating_mul(1_000_000_000)
            .saturating_add(self.nsec as i64)
    }

    pub fn from_nanos(ns: i64) -> Timespec {
        Timespec {
            sec: ns.div_euclid(1_000_000_000),
            nsec: ns.rem_euclid(1_000_000_000) as u32,
        }
    }
}

/// Attributes of a node, as a backend reports them.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct Attr {
    /// Inode number the user sees (`st_ino`).
    pub ino: u64,
    /// Full mode: type bits and permission bits.
    pub mode: u32,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    /// Device number of a device node, in the kernel's `dev_t` encoding.
    pub rdev: u64,
    pub size: u64,
    /// 512-byte blocks allocated.
    pub blocks: u64,
    pub atime: Timespec,
    pub mtime: Timespec,
    pub ctime: Timespec,
    /// When the file was made (`stx_btime`); zero when the backend cannot
    /// tell. It names the file's incarnation: a host reuses an inode
    /// number (ext4 at once), never a birth time, so two files of one
    /// number are told apart by it ([`Attr::generation`]).
    pub btime: Timespec,
    /// True when an ACL or another mechanism beyond the mode bits decides
    /// access: the vfs then never takes the MAY_EXEC fast path for it.
    pub has_acl: bool,
}

impl Attr {
    pub fn file_type(&self) -> Option<FileType> {
        FileType::from_mode(self.mode)
    }
    pub fn is_dir(&self) -> bool {
        self.mode & libc::S_IFMT == libc::S_IFDIR
    }
    pub fn is_symlink(&self) -> bool {
        self.mode & libc::S_IFMT == libc::S_IFLNK
    }
    /// The file's generation: FUSE's `generation`, 9P's `qid.version`.
    pub fn generation(&self) -> u32 {
        generation_of(self.btime.as_nanos())
    }
}

/// The generation of a file born at `born` (nanoseconds since the epoch;
/// 0 = unknown, generation 0). 32 bits, what the kernel keeps
/// (`i_generation`) and a qid carries: the birth time folded, so files of
/// one inode number born a nanosecond apart differ. Never 0 for a known
/// birth time (0 means "no generation" to readers that compare).
pub fn generation_of(born: i64) -> u32 {
    if born == 0 {
        return 0;
    }
    let b = born as u64;
    let g = (b ^ (b >> 32)) as u32;
    if g == 0 {
        1
    } else {
        g
    }
}

/// What a lookup or a create returns: the node and its attributes.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Entry {
    pub node: NodeId,
    pub attr: Attr,
}

/// One timestamp to set, as `utimensat` takes it (`UTIME_OMIT` is `None`
/// in [`SetAttr`]).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum TimeSet {
    Now,
    At(Timespec),
}

/// A change of attributes; `None` leaves a field alone.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct SetAttr {
    /// Permission bits only (`07777`); the type never changes.
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    pub atime: Option<TimeSet>,
    pub mtime: Option<TimeSet>,
}

/// Who a new node belongs to. The vfs decides (credentials, setgid
/// directories); the backend records it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Owner {
    pub uid: u32,
    pub gid: u32,
}

/// One directory entry, as `getdents64` reports it.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct DirEntry {
    pub name: Vec<u8>,
    pub ino: u64,
    pub kind: FileType,
}

/// File system statistics, as `statfs(2)`.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct StatFs {
    pub fs_type: i64,
    pub bsize: u64,
    pub blocks: u64,
    pub bfree: u64,
    pub bavail: u64,
    pub files: u64,
    pub ffree: u64,
    pub namelen: u64,
    pub frsize: u64,
}

/// `renameat2` flags the backends understand.
pub const RENAME_NOREPLACE: u32 = 1;
pub const RENAME_EXCHANGE: u32 = 2;
/// `renameat2`'s `RENAME_WHITEOUT`: the old name is left a whiteout (a
/// character device 0/0), for overlay file systems.
pub const RENAME_WHITEOUT: u32 = 4;

/// How open a file (the access mode and `O_TRUNC`/`O_APPEND` bits of
/// `open(2)`; creation and path-resolution flags are the vfs's business).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct OpenFlags(pub i32);

/// A change made behind a cache's back: by another process on the host,
/// or by another client of the same server. Each names both the node (for
/// the cache directly above the backend) and the inode number (what a
/// remote client knows the file by: the 9P qid path).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Change {
    /// `name` in directory `dir` appeared, went, or now names another
    /// file (create, unlink, rmdir, rename to or from, symlink retarget).
    Entry {
        dir: NodeId,
        dir_ino: u64,
        name: Vec<u8>,
        how: How,
    },
    /// The attributes, data or symlink body of a file changed; `at` is
    /// where the change was seen (a directory and a name in it), when the
    /// backend knows.
    Inode {
        node: NodeId,
        ino: u64,
        how: How,
        at: Option<Seen>,
    },
    /// Changes were lost (a queue overflowed): anything cached may be
    /// stale.
    All,
    /// From now on some changes may go unseen (a directory could not be
    /// watched): whatever is cached must be revalidated before use.
    Degraded,
}

/// What a [`Change`] was, as far as the backend can tell: for watchers
/// (`walkfs watch`, inotify on a mount). The caches act on every kind of
/// change alike, so a backend that cannot tell says [`What::Unknown`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum What {
    #[default]
    Unknown,
    Created,
    Deleted,
    /// The name was renamed away; the matching [`What::MovedTo`] carries
    /// the same cookie.
    MovedFrom,
    MovedTo,
    /// Data written or truncated.
    Modified,
    /// Mode, owner, times or link count.
    Attrib,
}

impl What {
    /// The name `walkfs watch` prints (inotify's, lower case).
    pub fn name(self) -> &'static str {
        match self {
            What::Unknown => "changed",
            What::Created => "create",
            What::Deleted => "delete",
            What::MovedFrom => "moved_from",
            What::MovedTo => "moved_to",
            What::Modified => "modify",
            What::Attrib => "attrib",
        }
    }

    /// The number a change record on the wire carries (notify protocol
    /// version 2): fixed, never reordered.
    pub fn code(self) -> u8 {
        match self {
            What::Unknown => 0,
            What::Created => 1,
            What::Deleted => 2,
            What::MovedFrom => 3,
            What::MovedTo => 4,
            What::Modified => 5,
            What::Attrib => 6,
        }
    }

    /// [`What::code`] read back; a number this side does not know is
    /// [`What::Unknown`] (the caches act on every kind alike).
    pub fn from_code(c: u8) -> What {
        match c {
            1 => What::Created,
            2 => What::Deleted,
            3 => What::MovedFrom,
            4 => What::MovedTo,
            5 => What::Modified,
            6 => What::Attrib,
            _ => What::Unknown,
        }
    }
}

/// Where an inode's change was seen: the directory (its node, its inode
/// number) and the name.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Seen {
    pub dir: NodeId,
    pub dir_ino: u64,
    pub name: Vec<u8>,
}

/// A change's kind, whether it was a directory, and the cookie pairing
/// the two halves of a rename (0: none known).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct How {
    pub what: What,
    pub is_dir: bool,
    pub cookie: u32,
    /// The backend made this change itself, for the vfs above it, and the
    /// object still looks as it left it (hostfs own.rs): the caches above
    /// already show it and keep what they have; watchers still get it.
    pub own: bool,
}

impl How {
    pub fn of(what: What) -> How {
        How {
            what,
            ..How::default()
        }
    }
}

/// One entry of a directory listed with attributes
/// ([`caps::Listings::readdir_plus`]): what a lookup of the name returns (and
/// counts: each is matched by one [`FileSystem::forget`]), and a
/// symlink's body when the backend has it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirPlus {
    pub name: Vec<u8>,
    pub entry: Entry,
    pub link: Option<Vec<u8>>,
}

/// A change the vfs lets run behind its caller
/// ([`caps::Ordered::submit`]): its result was decided from the cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Deferred<'a> {
    /// Write all of `data` (fewer bytes written is `ENOSPC`).
    Write {
        node: NodeId,
        fh: FileHandle,
        off: u64,
        data: &'a [u8],
    },
    SetAttr {
        node: NodeId,
        set: SetAttr,
    },
    /// Remove `name` of `parent`, the file `node` (`NodeId(0)` when the
    /// caller does not know it).
    Unlink {
        parent: NodeId,
        name: &'a [u8],
        node: NodeId,
    },
    /// Remove the empty directory `name` of `parent`, the directory
    /// `node` (`NodeId(0)` when not known).
    Rmdir {
        parent: NodeId,
        name: &'a [u8],
        node: NodeId,
    },
    /// Move `name` of `parent` (file `node`) to `newname` of
    /// `newparent`, replacing a non-directory there (a plain `rename`,
    /// no flags).
    Rename {
        parent: NodeId,
        name: &'a [u8],
        newparent: NodeId,
        newname: &'a [u8],
        node: NodeId,
    },
    /// A new name `newname` in `newparent` for `node`; counts as a lookup
    /// of `node`, as the entry [`FileSystem::link`] returns does (the
    /// vfs forgets the extra reference).
    Link {
        node: NodeId,
        newparent: NodeId,
        newname: &'a [u8],
    },
}

/// Carry `op` out on `fs` now with its ordinary methods and report the
/// outcome to `done`: what [`caps::Ordered::submit`] does for a backend that
/// completes inline (and for one that cannot defer a given change).
pub fn run_inline<F: FileSystem + ?Sized>(fs: &F, op: Deferred<'_>, done: Done) {
    let r = match op {
        Deferred::Write {
            node,
            fh,
            off,
            data,
        } => fs.write(node, fh, off, data).and_then(|n| {
            if n < data.len() {
                Err(Errno::ENOSPC)
            } else {
                Ok(())
            }
        }),
        Deferred::SetAttr { node, set } => fs.setattr(node, &set).map(drop),
        Deferred::Unlink { parent, name, .. } => fs.unlink(parent, name),
        Deferred::Rmdir { parent, name, .. } => fs.rmdir(parent, name),
        Deferred::Rename {
            parent,
            name,
            newparent,
            newname,
            ..
        } => fs.rename(parent, name, newparent, newname, 0),
        Deferred::Link {
            node,
            newparent,
            newname,
        } => fs.link(node, newparent, newname).map(drop),
    };
    done(r);
}

/// What [`caps::Ordered::make_behind`] makes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Make<'a> {
    /// A regular file with permission bits `mode`, opened with `flags`
    /// (its handle comes back).
    File {
        mode: u32,
        flags: OpenFlags,
    },
    /// A directory with permission bits `mode`.
    Dir {
        mode: u32,
    },
    Symlink {
        target: &'a [u8],
    },
    /// A fifo, socket or device node (`mode` carries the type bits,
    /// `rdev` the device number in the kernel's `dev_t` encoding).
    Special {
        mode: u32,
        rdev: u64,
    },
}

impl Make<'_> {
    /// The attributes a node made this way has, as the caller shows them
    /// until it next asks the backend: numbered `ino`, owned by `owner`,
    /// every time `now`, empty (a symlink's size is its body's length; a
    /// directory's size is 0, whatever the backend's file system will
    /// report).
    pub fn attr(&self, ino: u64, owner: Owner, now: Timespec) -> Attr {
        let (mode, nlink, size, rdev) = match *self {
            Make::File { mode, .. } => (libc::S_IFREG | (mode & 0o7777), 1, 0, 0),
            Make::Dir { mode } => (libc::S_IFDIR | (mode & 0o7777), 2, 0, 0),
            Make::Symlink { target } => (libc::S_IFLNK | 0o777, 1, target.len() as u64, 0),
            Make::Special { mode, rdev } => (mode, 1, 0, rdev),
        };
        Attr {
            ino,
            mode,
            nlink,
            uid: owner.uid,
            gid: owner.gid,
            rdev,
            size,
            blocks: 0,
            atime: now,
            mtime: now,
            ctime: now,
            // Unknown until the backend says: a guess would be taken for
            // another file's when the true one arrives.
            btime: Timespec::default(),
            has_acl: false,
        }
    }
}

/// A node's identity handed out ahead of its creation
/// ([`caps::Ordered::grant`]): the backend's node id and the inode number
/// every client of the backend will see for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Granted {
    pub node: NodeId,
    pub ino: u64,
}

/// [`caps::Remote::open_read`] with the ordinary calls: open, then read
/// (the handle released when the read fails).
pub fn open_then_read<F: FileSystem + ?Sized>(
    fs: &F,
    node: NodeId,
    flags: OpenFlags,
    off: u64,
    buf: &mut [u8],
) -> Result<(FileHandle, usize)> {
    let fh = fs.open(node, flags)?;
    match fs.read(node, fh, off, buf) {
        Ok(n) => Ok((fh, n)),
        Err(e) => {
            fs.release(node, fh);
            Err(e)
        }
    }
}

/// Where a submitted change's outcome goes: called once, from any thread
/// (a 9P client's reply reader), so it must not wait for anything.
pub type Done = Box<dyn FnOnce(Result<()>) + Send>;

/// Where [`caps::Ordered::getattr_behind`] hands a node's attributes: called
/// once, on a backend's thread, so it must neither wait nor call the
/// backend.
pub type AttrThen = Box<dyn FnOnce(Result<Attr>) + Send>;

/// A listing asked for ahead ([`caps::Listings::list_ahead`]): the ticket for
/// an answer on its way. Dropping it unused gives the answer up (whatever
/// the backend holds for it is released, and nothing is counted as looked
/// up).
pub trait ListAhead: Send {
    /// Wait for the answer: the listing, each entry counted as a lookup
    /// (as [`caps::Listings::readdir_plus`]); `None` when it turned out
    /// unusable (the directory was not where the backend last saw it, or
    /// the listing did not fit in one reply).
    fn wait(self: Box<Self>) -> Option<Result<Vec<DirPlus>>>;
}

/// Where a watched file system reports its changes: in batches, from a
/// thread of the backend's own, never while it holds a lock a caller of
/// the file system might need.
pub trait ChangeSink: Send + Sync {
    fn changed(&self, changes: &[Change]);

    /// The backend's server recalls a lease: send everything gathered
    /// above the backend (small writes not yet handed to it) before this
    /// returns, so that what the backend sends next comes after all of it.
    fn recall(&self) {}
}

/// A backend's message counters (a 9P client's RPCs): what
/// [`caps::Remote::rpc_stats`] reports.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RpcStats {
    /// `(message name, count)` for each request type sent.
    pub rpcs: Vec<(&'static str, u64)>,
    pub total_rpcs: u64,
    pub bytes_sent: u64,
    pub bytes_received: u64,
    /// Nanoseconds callers spent waiting for replies.
    pub wait_ns: u64,
    /// Times a caller waited for replies (round trips).
    pub waits: u64,
}

/// A backend's use of the remote handles it keeps for cached nodes (a 9P
/// client's fids): what [`caps::Remote::fid_stats`] reports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FidStats {
    /// Files the vfs holds.
    pub nodes: u64,
    /// Fids held for them now (besides the root), and the bound.
    pub held: u64,
    pub cap: u64,
    /// Fids released to stay within the bound; walks to get one back.
    pub released: u64,
    pub rewalks: u64,
}

/// A file system the vfs can mount: the calls every backend answers.
/// Methods take the parent's [`NodeId`] and a single name; see the module
/// comment for what the vfs guarantees about names. Errors are errnos as
/// Linux would return them.
///
/// What only some backends can do (run changes behind the caller, list
/// with attributes, hand out host files, report changes made elsewhere,
/// count messages to a server) is a capability: an extension trait of
/// [`caps`] the vfs asks for with the accessors at the end, as Linux
/// looks for a non-NULL entry in an operations table. The answer may
/// change over a backend's life (hostfs runs changes behind its callers
/// only while the vfs writes back), so callers ask each time.
#[allow(unused_variables)]
pub trait FileSystem: Send + Sync {
    /// The root directory's node. Never forgotten.
    fn root(&self) -> NodeId;

    /// The vfs that mounted this backend lends it its names ([`Names`]),
    /// once, at mount. A backend that walks again by name keeps no names
    /// of its own; one that never does ignores them.
    fn attach_names(&self, names: Arc<dyn Names>) {}

    /// A short name for logs and `statfs`-like reports ("memfs", "hostfs").
    fn kind(&self) -> &'static str {
        "unknown"
    }

    /// Find `name` in directory `parent`. `ENOENT` when it does not exist.
    /// Each successful lookup is matched by one [`FileSystem::forget`].
    fn lookup(&self, parent: NodeId, name: &[u8]) -> Result<Entry> {
        Err(Errno::ENOSYS)
    }

    /// The vfs drops `count` of the references that lookups and creates
    /// handed out; at zero the backend may release the node.
    fn forget(&self, node: NodeId, count: u64) {}

    fn getattr(&self, node: NodeId) -> Result<Attr> {
        Err(Errno::ENOSYS)
    }

    fn setattr(&self, node: NodeId, set: &SetAttr) -> Result<Attr> {
        Err(Errno::ENOSYS)
    }

    /// The body of a symlink.
    fn readlink(&self, node: NodeId) -> Result<Vec<u8>> {
        Err(Errno::ENOSYS)
    }

    /// Open an existing regular file or directory. Backends refuse to open
    /// device nodes, fifos and sockets (`EACCES`, or `ENXIO`).
    fn open(&self, node: NodeId, flags: OpenFlags) -> Result<FileHandle> {
        Err(Errno::ENOSYS)
    }

    /// Create and open a regular file that must not exist yet.
    fn create(
        &self,
        parent: NodeId,
        name: &[u8],
        mode: u32,
        owner: Owner,
        flags: OpenFlags,
    ) -> Result<(Entry, FileHandle)> {
        Err(Errno::ENOSYS)
    }

    /// Create and open a regular file with no name in directory `dir`
    /// (`O_TMPFILE`), holding one lookup reference as `create`'s entry
    /// does. [`FileSystem::link`] may give it a name later, unless `flags`
    /// has `O_EXCL`; with no name it goes with its last reference.
    /// `EOPNOTSUPP` where the backend has no such files (Linux's answer
    /// for a file system without them).
    fn tmpfile(
        &self,
        dir: NodeId,
        mode: u32,
        owner: Owner,
        flags: OpenFlags,
    ) -> Result<(Entry, FileHandle)> {
        Err(Errno::EOPNOTSUPP)
    }

    fn read(&self, node: NodeId, fh: FileHandle, off: u64, buf: &mut [u8]) -> Result<usize> {
        Err(Errno::ENOSYS)
    }

    fn write(&self, node: NodeId, fh: FileHandle, off: u64, data: &[u8]) -> Result<usize> {
        Err(Errno::ENOSYS)
    }

    /// Close what [`FileSystem::open`] or [`FileSystem::create`] opened.
    fn release(&self, node: NodeId, fh: FileHandle) {}

    fn mkdir(&self, parent: NodeId, name: &[u8], mode: u32, owner: Owner) -> Result<Entry> {
        Err(Errno::ENOSYS)
    }

    fn symlink(&self, parent: NodeId, name: &[u8], target: &[u8], owner: Owner) -> Result<Entry> {
        Err(Errno::ENOSYS)
    }

    /// Make a special file: a fifo, a socket, or a character or block
    /// device (`mode` carries the type bits, `rdev` the device number in
    /// the kernel's `dev_t` encoding). Backends make them but never open
    /// them on a caller's behalf ([`FileSystem::open`] refuses).
    fn mknod(
        &self,
        parent: NodeId,
        name: &[u8],
        mode: u32,
        rdev: u64,
        owner: Owner,
    ) -> Result<Entry> {
        Err(Errno::EPERM)
    }

    /// A new name `newname` in `newparent` for `node`.
    fn link(&self, node: NodeId, newparent: NodeId, newname: &[u8]) -> Result<Entry> {
        Err(Errno::ENOSYS)
    }

    /// Remove a non-directory name.
    fn unlink(&self, parent: NodeId, name: &[u8]) -> Result<()> {
        Err(Errno::ENOSYS)
    }

    /// Remove an empty directory.
    fn rmdir(&self, parent: NodeId, name: &[u8]) -> Result<()> {
        Err(Errno::ENOSYS)
    }

    /// `renameat2` with [`RENAME_NOREPLACE`] / [`RENAME_EXCHANGE`].
    fn rename(
        &self,
        parent: NodeId,
        name: &[u8],
        newparent: NodeId,
        newname: &[u8],
        flags: u32,
    ) -> Result<()> {
        Err(Errno::ENOSYS)
    }

    /// Every entry of a directory except `.` and `..`.
    fn readdir(&self, node: NodeId) -> Result<Vec<DirEntry>> {
        Err(Errno::ENOSYS)
    }

    fn statfs(&self, node: NodeId) -> Result<StatFs> {
        Err(Errno::ENOSYS)
    }

    /// Changes run behind their callers, in order ([`caps::Ordered`]);
    /// `None`: every change is carried out before its call returns.
    fn ordered(&self) -> Option<&dyn caps::Ordered> {
        None
    }

    /// Listings with attributes ([`caps::Listings`]); `None`: the vfs
    /// lists names and looks each up.
    fn listings(&self) -> Option<&dyn caps::Listings> {
        None
    }

    /// Host files under the nodes ([`caps::HostFiles`]): a kernel may do
    /// their I/O itself. `None` for memory or a remote server.
    fn host_files(&self) -> Option<&dyn caps::HostFiles> {
        None
    }

    /// Reports of changes made behind the file system's back
    /// ([`caps::Watch`]); `None` when the backend cannot see them.
    fn watch(&self) -> Option<&dyn caps::Watch> {
        None
    }

    /// Counters of a remote server's messages and handles
    /// ([`caps::Remote`]); `None` for a backend that sends none.
    fn remote(&self) -> Option<&dyn caps::Remote> {
        None
    }

    /// File locks every party to the file honours ([`caps::Locks`]);
    /// `None`: the backend has no one to share them with, and the vfs
    /// keeps them itself.
    fn locks(&self) -> Option<&dyn caps::Locks> {
        None
    }

    /// Extended attributes and POSIX ACLs ([`caps::Xattrs`]); `None`:
    /// the backend keeps none (`EOPNOTSUPP`).
    fn xattrs(&self) -> Option<&dyn caps::Xattrs> {
        None
    }

    /// Allocation and holes ([`caps::Space`]); `None`: `fallocate` is
    /// refused and a file is data from start to end.
    fn space(&self) -> Option<&dyn caps::Space> {
        None
    }

    /// Ids that find a file again after it was forgotten
    /// ([`caps::Export`]); `None`: a forgotten file is found only by its
    /// name (`open_by_handle_at` gives `ESTALE`).
    fn export(&self) -> Option<&dyn caps::Export> {
        None
    }
}
