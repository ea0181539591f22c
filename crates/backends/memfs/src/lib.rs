//! memfs: an in-memory file system, like tmpfs.
//!
//! One mutex guards the whole tree: memfs is the backend of record for
//! tests and in-process use, and the vfs above it caches every lookup, so
//! the backend is off the hot path. Nodes live in a map keyed by their
//! inode number, which is also their [`NodeId`]; a node is dropped when it
//! has no names, no lookup references from the vfs and no open handles.

use std::collections::{BTreeMap, HashMap};

use parking_lot::Mutex;
use walkfs_fsapi::acl::{self, Acl};
use walkfs_fsapi::{
    caps, Attr, ByHandle, DirEntry, Entry, Errno, FileHandle, FileLock, FileSystem, FileType,
    LockFlavor, LockOwner, LockTable, NodeId, OpenFlags, Owner, Result, SetAttr, StatFs, TimeSet,
    Timespec, RENAME_EXCHANGE, RENAME_NOREPLACE,
};

const ROOT: u64 = 1;
/// `statfs` magic of tmpfs, which memfs imitates.
const TMPFS_MAGIC: i64 = 0x0102_1994;

enum Body {
    Dir(BTreeMap<Vec<u8>, u64>),
    File(Vec<u8>),
    Symlink(Vec<u8>),
    /// Device nodes, fifos and sockets: attributes only.
    Special,
}

struct Node {
    attr: Attr,
    body: Body,
    /// Lookup references held by the vfs (see [`FileSystem::forget`]).
    lookups: u64,
    /// Open handles.
    opens: u64,
    /// Extended attributes, ACLs among them (crate::acl's form).
    xattrs: BTreeMap<Vec<u8>, Vec<u8>>,
}

struct Tree {
    nodes: HashMap<u64, Node>,
    next_ino: u64,
    handles: HashMap<u64, u64>,
    next_fh: u64,
}

/// An in-memory file system. `MemFs::new()` gives an empty root directory
/// owned by root with mode 0755.
pub struct MemFs {
    tree: Mutex<Tree>,
    /// File locks: no party but the vfs above sees this tree, so they
    /// live here, by node, and go with the handle they were taken
    /// through.
    locks: LockTable,
    lock_fhs: ByHandle,
}

impl Default for MemFs {
    fn default() -> Self {
        Self::new()
    }
}

impl MemFs {
    pub fn new() -> MemFs {
        Self::with_root(0o755, Owner { uid: 0, gid: 0 })
    }

    /// An empty file system whose root has `mode` (permission bits) and
    /// `owner`.
    pub fn with_root(mode: u32, owner: Owner) -> MemFs {
        let mut nodes = HashMap::new();
        let now = Timespec::now();
        nodes.insert(
            ROOT,
            Node {
                attr: Attr {
                    ino: ROOT,
                    mode: libc::S_IFDIR | (mode & 0o7777),
                    nlink: 2,
                    uid: owner.uid,
                    gid: owner.gid,
                    size: 0,
                    atime: now,
                    mtime: now,
                    ctime: now,
                    btime: now,
                    ..Attr::default()
                },
                body: Body::Dir(BTreeMap::new()),
                lookups: 1,
                opens: 0,
                xattrs: BTreeMap::new(),
            },
        );
        MemFs {
            tree: Mutex::new(Tree {
                nodes,
                next_ino: ROOT + 1,
                handles: HashMap::new(),
                next_fh: 1,
            }),
            locks: LockTable::new(),
            lock_fhs: ByHandle::default(),
        }
    }
}

impl Tree {
    fn node(&self, ino: u64) -> Result<&Node> {
        self.nodes.get(&ino).ok_or(Errno::ESTALE)
    }

    fn node_mut(&mut self, ino: u64) -> Result<&mut Node> {
        self.nodes.get_mut(&ino).ok_or(Errno::ESTALE)
    }

    fn dir(&self, ino: u64) -> Result<&BTreeMap<Vec<u8>, u64>> {
        match &self.node(ino)?.body {
            Body::Dir(d) => Ok(d),
            _ => Err(Errno::ENOTDIR),
        }
    }

    fn dir_mut(&mut self, ino: u64) -> Result<&mut BTreeMap<Vec<u8>, u64>> {
        match &mut self.node_mut(ino)?.body {
            Body::Dir(d) => Ok(d),
            _ => Err(Errno::ENOTDIR),
        }
    }

    fn touch_dir(&mut self, ino: u64) {
        if let Some(n) = self.nodes.get_mut(&ino) {
            let now = Timespec::now();
            n.attr.mtime = now;
            n.attr.ctime = now;
        }
    }

    /// Add a new node named `name` under `parent`, handing out one lookup
    /// reference.
    fn new_child(
        &mut self,
        parent: u64,
        name: &[u8],
        mode: u32,
        owner: Owner,
        body: Body,
    ) -> Result<Entry> {
        if self.dir(parent)?.contains_key(name) {
            return Err(Errno::EEXIST);
        }
        let ino = self.next_ino;
        self.next_ino += 1;
        let now = Timespec::now();
        let is_dir = matches!(body, Body::Dir(_));
        let size = match &body {
            Body::Symlink(t) => t.len() as u64,
            _ => 0,
        };
        // A directory's default ACL is its new nodes' (the vfs has cut
        // the mode by it): their access ACL, and a new directory's
        // default too. Symlinks take none.
        let mut xattrs = BTreeMap::new();
        let mut has_acl = false;
        let inherited = self.node(parent)?.xattrs.get(acl::DEFAULT);
        if let (Some(d), false) = (inherited, matches!(body, Body::Symlink(_))) {
            if let Ok(Some(default)) = Acl::parse(d) {
                if let (_, Some(access)) = default.inherit(mode) {
                    xattrs.insert(acl::ACCESS.to_vec(), access.to_bytes());
                    has_acl = true;
                }
                if is_dir {
                    xattrs.insert(acl::DEFAULT.to_vec(), d.clone());
                }
            }
        }
        let attr = Attr {
            ino,
            mode,
            has_acl,
            nlink: if is_dir { 2 } else { 1 },
            uid: owner.uid,
            gid: owner.gid,
            size,
            atime: now,
            mtime: now,
            ctime: now,
            btime: now,
            ..Attr::default()
        };
        self.nodes.insert(
            ino,
            Node {
                attr,
                body,
                lookups: 1,
                opens: 0,
                xattrs,
            },
        );
        self.dir_mut(parent)?.insert(name.to_vec(), ino);
        if is_dir {
            self.node_mut(parent)?.attr.nlink += 1;
        }
        self.touch_dir(parent);
        Ok(Entry {
            node: NodeId(ino),
            attr,
        })
    }

    /// Drop a node that nothing refers to any more.
    fn maybe_free(&mut self, ino: u64) {
        if let Some(n) = self.nodes.get(&ino) {
            if ino != ROOT && n.attr.nlink == 0 && n.lookups == 0 && n.opens == 0 {
                self.nodes.remove(&ino);
            }
        }
    }

    /// Remove the name `name` from `parent`, dropping the link count of what
    /// it named.
    fn drop_name(&mut self, parent: u64, name: &[u8]) -> Result<u64> {
        let ino = self.dir_mut(parent)?.remove(name).ok_or(Errno::ENOENT)?;
        let now = Timespec::now();
        let child = self.node_mut(ino)?;
        let was_dir = matches!(child.body, Body::Dir(_));
        child.attr.nlink = if was_dir {
            0
        } else {
            child.attr.nlink.saturating_sub(1)
        };
        child.attr.ctime = now;
        if was_dir {
            self.node_mut(parent)?.attr.nlink -= 1;
        }
        self.touch_dir(parent);
        self.maybe_free(ino);
        Ok(ino)
    }

    fn is_dir(&self, ino: u64) -> bool {
        matches!(self.nodes.get(&ino).map(|n| &n.body), Some(Body::Dir(_)))
    }
}

/// What a file system does to the `security.capability` of a file
/// that is written, truncated or given away (Linux's kill-priv).
const CAPABILITY: &[u8] = b"security.capability";

impl Node {
    /// A chmod moves the access ACL's owner, mask (or group) and other
    /// entries with it.
    fn chmod_acl(&mut self) {
        if let Some(v) = self.xattrs.get_mut(acl::ACCESS) {
            if let Ok(Some(mut a)) = Acl::parse(v) {
                a.chmod(self.attr.mode);
                *v = a.to_bytes();
            }
        }
    }

    /// Store an ACL (`None` removes it); an access ACL the mode can say
    /// all of is not kept, and sets the mode's bits either way.
    fn set_acl(&mut self, name: &[u8], acl: Option<Acl>) -> Result<()> {
        let is_dir = matches!(self.body, Body::Dir(_));
        let acl = if name == acl::ACCESS {
            acl.and_then(|a| {
                let (mode, equiv) = a.equiv_mode(self.attr.mode);
                self.attr.mode = mode;
                (!equiv).then_some(a)
            })
        } else if !is_dir {
            return if acl.is_some() {
                Err(Errno::EACCES)
            } else {
                Ok(())
            };
        } else {
            acl
        };
        match acl {
            Some(a) => {
                self.xattrs.insert(name.to_vec(), a.to_bytes());
            }
            None => {
                self.xattrs.remove(name);
            }
        }
        self.attr.has_acl = self.xattrs.contains_key(acl::ACCESS);
        Ok(())
    }
}

impl caps::Xattrs for MemFs {
    fn getxattr(&self, node: NodeId, name: &[u8]) -> Result<Vec<u8>> {
        let t = self.tree.lock();
        t.node(node.0)?
            .xattrs
            .get(name)
            .cloned()
            .ok_or(Errno::ENODATA)
    }

    fn listxattr(&self, node: NodeId) -> Result<Vec<u8>> {
        let t = self.tree.lock();
        let mut names = Vec::new();
        for k in t.node(node.0)?.xattrs.keys() {
            names.extend_from_slice(k);
            names.push(0);
        }
        Ok(names)
    }

    fn setxattr(&self, node: NodeId, name: &[u8], value: &[u8], flags: i32) -> Result<()> {
        let mut t = self.tree.lock();
        let n = t.node_mut(node.0)?;
        let has = n.xattrs.contains_key(name);
        if flags & libc::XATTR_CREATE != 0 && has {
            return Err(Errno::EEXIST);
        }
        if flags & libc::XATTR_REPLACE != 0 && !has {
            return Err(Errno::ENODATA);
        }
        if name == acl::ACCESS || name == acl::DEFAULT {
            n.set_acl(name, Acl::parse(value)?)?;
        } else {
            n.xattrs.insert(name.to_vec(), value.to_vec());
        }
        n.attr.ctime = Timespec::now();
        Ok(())
    }

    fn removexattr(&self, node: NodeId, name: &[u8]) -> Result<()> {
        let mut t = self.tree.lock();
        let n = t.node_mut(node.0)?;
        n.xattrs.remove(name).ok_or(Errno::ENODATA)?;
        n.attr.has_acl = n.xattrs.contains_key(acl::ACCESS);
        n.attr.ctime = Timespec::now();
        Ok(())
    }
}

/// Memory holds no holes: every byte up to the size is data. The modes
/// are tmpfs's: allocate (growing the size unless `KEEP_SIZE`), punch a
/// hole and zero a range (zeroes written); collapse and insert are
/// refused.
impl caps::Space for MemFs {
    fn fallocate(
        &self,
        node: NodeId,
        _fh: FileHandle,
        mode: i32,
        off: u64,
        len: u64,
    ) -> Result<()> {
        let known =
            libc::FALLOC_FL_KEEP_SIZE | libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_ZERO_RANGE;
        if mode & !known != 0 {
            return Err(Errno::EOPNOTSUPP);
        }
        let mut t = self.tree.lock();
        let n = t.node_mut(node.0)?;
        let Body::File(data) = &mut n.body else {
            return Err(Errno::ENODEV);
        };
        let start = usize::try_from(off).map_err(|_| Errno::EFBIG)?;
        let end = start
            .checked_add(usize::try_from(len).map_err(|_| Errno::EFBIG)?)
            .ok_or(Errno::EFBIG)?;
        let zero = mode & (libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_ZERO_RANGE) != 0;
        if mode & libc::FALLOC_FL_KEEP_SIZE == 0 && end > data.len() {
            data.resize(end, 0);
        }
        if zero {
            let stop = end.min(data.len());
            if start < stop {
                data[start..stop].fill(0);
            }
        }
        n.attr.size = data.len() as u64;
        n.attr.blocks = n.attr.size.div_ceil(512);
        let now = Timespec::now();
        if zero || mode & libc::FALLOC_FL_KEEP_SIZE == 0 {
            n.attr.mtime = now;
        }
        n.attr.ctime = now;
        Ok(())
    }

    fn seek_data(&self, node: NodeId, _fh: FileHandle, off: u64, whence: i32) -> Result<u64> {
        let size = self.tree.lock().node(node.0)?.attr.size;
        if off >= size {
            return Err(Errno::ENXIO);
        }
        Ok(if whence == libc::SEEK_HOLE { size } else { off })
    }
}

fn now_or(t: TimeSet) -> Timespec {
    match t {
        TimeSet::Now => Timespec::now(),
        TimeSet::At(ts) => ts,
    }
}

impl caps::Locks for MemFs {
    fn setlk(&self, node: NodeId, fh: FileHandle, owner: LockOwner, lock: &FileLock) -> Result<()> {
        self.tree.lock().node(node.0)?;
        self.locks.set(node, owner, lock)?;
        self.lock_fhs.took(fh, node, owner);
        Ok(())
    }

    fn getlk(
        &self,
        node: NodeId,
        _fh: FileHandle,
        owner: LockOwner,
        lock: &FileLock,
    ) -> Result<Option<FileLock>> {
        Ok(self.locks.conflict(node, owner, lock))
    }

    fn unlock_owner(&self, node: NodeId, _fh: FileHandle, owner: LockOwner) {
        self.locks.drop_owner(node, owner, Some(LockFlavor::Posix));
    }
}

impl FileSystem for MemFs {
    fn root(&self) -> NodeId {
        NodeId(ROOT)
    }

    fn kind(&self) -> &'static str {
        "memfs"
    }

    fn lookup(&self, parent: NodeId, name: &[u8]) -> Result<Entry> {
        let mut t = self.tree.lock();
        let ino = *t.dir(parent.0)?.get(name).ok_or(Errno::ENOENT)?;
        let n = t.node_mut(ino)?;
        n.lookups += 1;
        Ok(Entry {
            node: NodeId(ino),
            attr: n.attr,
        })
    }

    fn forget(&self, node: NodeId, count: u64) {
        let mut t = self.tree.lock();
        if let Some(n) = t.nodes.get_mut(&node.0) {
            n.lookups = n.lookups.saturating_sub(count);
        }
        t.maybe_free(node.0);
    }

    fn getattr(&self, node: NodeId) -> Result<Attr> {
        Ok(self.tree.lock().node(node.0)?.attr)
    }

    fn setattr(&self, node: NodeId, set: &SetAttr) -> Result<Attr> {
        let mut t = self.tree.lock();
        let n = t.node_mut(node.0)?;
        let now = Timespec::now();
        if let Some(size) = set.size {
            match &mut n.body {
                Body::File(data) => {
                    data.resize(usize::try_from(size).map_err(|_| Errno::EFBIG)?, 0);
                    n.attr.size = size;
                    n.attr.mtime = now;
                }
                Body::Dir(_) => return Err(Errno::EISDIR),
                _ => return Err(Errno::EINVAL),
            }
        }
        if let Some(mode) = set.mode {
            n.attr.mode = (n.attr.mode & libc::S_IFMT) | (mode & 0o7777);
            n.chmod_acl();
        }
        if set.size.is_some() || set.uid.is_some() || set.gid.is_some() {
            n.xattrs.remove(CAPABILITY);
        }
        if let Some(uid) = set.uid {
            n.attr.uid = uid;
        }
        if let Some(gid) = set.gid {
            n.attr.gid = gid;
        }
        if let Some(a) = set.atime {
            n.attr.atime = now_or(a);
        }
        if let Some(m) = set.mtime {
            n.attr.mtime = now_or(m);
        }
        n.attr.ctime = now;
        Ok(n.attr)
    }

    fn readlink(&self, node: NodeId) -> Result<Vec<u8>> {
        match &self.tree.lock().node(node.0)?.body {
            Body::Symlink(t) => Ok(t.clone()),
            _ => Err(Errno::EINVAL),
        }
    }

    fn open(&self, node: NodeId, flags: OpenFlags) -> Result<FileHandle> {
        let mut t = self.tree.lock();
        let n = t.node_mut(node.0)?;
        match n.body {
            Body::Special => return Err(Errno::EACCES),
            Body::Symlink(_) => return Err(Errno::ELOOP),
            Body::File(ref mut data) if flags.0 & libc::O_TRUNC != 0 => {
                data.clear();
                n.attr.size = 0;
                let now = Timespec::now();
                n.attr.mtime = now;
                n.attr.ctime = now;
            }
            _ => {}
        }
        n.opens += 1;
        let fh = t.next_fh;
        t.next_fh += 1;
        t.handles.insert(fh, node.0);
        Ok(FileHandle(fh))
    }

    fn create(
        &self,
        parent: NodeId,
        name: &[u8],
        mode: u32,
        owner: Owner,
        _flags: OpenFlags,
    ) -> Result<(Entry, FileHandle)> {
        let mut t = self.tree.lock();
        let e = t.new_child(
            parent.0,
            name,
            libc::S_IFREG | (mode & 0o7777),
            owner,
            Body::File(Vec::new()),
        )?;
        t.node_mut(e.node.0)?.opens += 1;
        let fh = t.next_fh;
        t.next_fh += 1;
        t.handles.insert(fh, e.node.0);
        Ok((e, FileHandle(fh)))
    }

    fn read(&self, node: NodeId, _fh: FileHandle, off: u64, buf: &mut [u8]) -> Result<usize> {
        let t = self.tree.lock();
        match &t.node(node.0)?.body {
            Body::File(data) => {
                let start = usize::try_from(off).unwrap_or(usize::MAX).min(data.len());
                let n = buf.len().min(data.len() - start);
                buf[..n].copy_from_slice(&data[start..start + n]);
                Ok(n)
            }
            Body::Dir(_) => Err(Errno::EISDIR),
            _ => Err(Errno::EINVAL),
        }
    }

    fn write(&self, node: NodeId, _fh: FileHandle, off: u64, src: &[u8]) -> Result<usize> {
        let mut t = self.tree.lock();
        let n = t.node_mut(node.0)?;
        match &mut n.body {
            Body::File(data) => {
                let start = usize::try_from(off).map_err(|_| Errno::EFBIG)?;
                let end = start.checked_add(src.len()).ok_or(Errno::EFBIG)?;
                if end > data.len() {
                    data.resize(end, 0);
                }
                data[start..end].copy_from_slice(src);
                n.xattrs.remove(CAPABILITY);
                n.attr.size = data.len() as u64;
                n.attr.blocks = n.attr.size.div_ceil(512);
                let now = Timespec::now();
                n.attr.mtime = now;
                n.attr.ctime = now;
                Ok(src.len())
            }
            Body::Dir(_) => Err(Errno::EISDIR),
            _ => Err(Errno::EINVAL),
        }
    }

    fn release(&self, _node: NodeId, fh: FileHandle) {
        for (node, owner) in self.lock_fhs.released(fh) {
            self.locks.drop_owner(node, owner, None);
        }
        let mut t = self.tree.lock();
        if let Some(ino) = t.handles.remove(&fh.0) {
            if let Some(n) = t.nodes.get_mut(&ino) {
                n.opens = n.opens.saturating_sub(1);
            }
            t.maybe_free(ino);
        }
    }

    fn mkdir(&self, parent: NodeId, name: &[u8], mode: u32, owner: Owner) -> Result<Entry> {
        let mut t = self.tree.lock();
        t.new_child(
            parent.0,
            name,
            libc::S_IFDIR | (mode & 0o7777),
            owner,
            Body::Dir(BTreeMap::new()),
        )
    }

    fn symlink(&self, parent: NodeId, name: &[u8], target: &[u8], owner: Owner) -> Result<Entry> {
        let mut t = self.tree.lock();
        t.new_child(
            parent.0,
            name,
            libc::S_IFLNK | 0o777,
            owner,
            Body::Symlink(target.to_vec()),
        )
    }

    fn mknod(
        &self,
        parent: NodeId,
        name: &[u8],
        mode: u32,
        rdev: u64,
        owner: Owner,
    ) -> Result<Entry> {
        match FileType::from_mode(mode) {
            Some(
                FileType::Fifo | FileType::Socket | FileType::CharDevice | FileType::BlockDevice,
            ) => {}
            _ => return Err(Errno::EINVAL),
        }
        let mut t = self.tree.lock();
        let e = t.new_child(parent.0, name, mode, owner, Body::Special)?;
        let n = t.node_mut(e.node.0)?;
        n.attr.rdev = rdev;
        Ok(Entry {
            node: e.node,
            attr: n.attr,
        })
    }

    fn link(&self, node: NodeId, newparent: NodeId, newname: &[u8]) -> Result<Entry> {
        let mut t = self.tree.lock();
        if t.is_dir(node.0) {
            return Err(Errno::EPERM);
        }
        if t.dir(newparent.0)?.contains_key(newname) {
            return Err(Errno::EEXIST);
        }
        if t.node(node.0)?.attr.nlink == 0 {
            return Err(Errno::ENOENT);
        }
        t.dir_mut(newparent.0)?.insert(newname.to_vec(), node.0);
        t.touch_dir(newparent.0);
        let n = t.node_mut(node.0)?;
        n.attr.nlink += 1;
        n.attr.ctime = Timespec::now();
        n.lookups += 1;
        Ok(Entry { node, attr: n.attr })
    }

    fn unlink(&self, parent: NodeId, name: &[u8]) -> Result<()> {
        let mut t = self.tree.lock();
        let ino = *t.dir(parent.0)?.get(name).ok_or(Errno::ENOENT)?;
        if t.is_dir(ino) {
            return Err(Errno::EISDIR);
        }
        t.drop_name(parent.0, name).map(|_| ())
    }

    fn rmdir(&self, parent: NodeId, name: &[u8]) -> Result<()> {
        let mut t = self.tree.lock();
        let ino = *t.dir(parent.0)?.get(name).ok_or(Errno::ENOENT)?;
        if !t.dir(ino)?.is_empty() {
            return Err(Errno::ENOTEMPTY);
        }
        t.drop_name(parent.0, name).map(|_| ())
    }

    fn rename(
        &self,
        parent: NodeId,
        name: &[u8],
        newparent: NodeId,
        newname: &[u8],
        flags: u32,
    ) -> Result<()> {
        if flags & walkfs_fsapi::RENAME_WHITEOUT != 0 {
            // No whiteouts here (as tmpfs before 3.18): refused.
            return Err(Errno::EINVAL);
        }
        let mut t = self.tree.lock();
        let src = *t.dir(parent.0)?.get(name).ok_or(Errno::ENOENT)?;
        let dst = t.dir(newparent.0)?.get(newname).copied();
        let src_dir = t.is_dir(src);
        if flags & RENAME_EXCHANGE != 0 {
            let dst = dst.ok_or(Errno::ENOENT)?;
            let dst_dir = t.is_dir(dst);
            t.dir_mut(parent.0)?.insert(name.to_vec(), dst);
            t.dir_mut(newparent.0)?.insert(newname.to_vec(), src);
            if src_dir != dst_dir && parent != newparent {
                // A directory changed parents: move its ".." link count.
                let (to_new, to_old) = if src_dir { (1i32, -1i32) } else { (-1, 1) };
                let np = t.node_mut(newparent.0)?;
                np.attr.nlink = np.attr.nlink.wrapping_add_signed(to_new);
                let op = t.node_mut(parent.0)?;
                op.attr.nlink = op.attr.nlink.wrapping_add_signed(to_old);
            }
            t.touch_dir(parent.0);
            t.touch_dir(newparent.0);
            return Ok(());
        }
        if let Some(dst) = dst {
            if flags & RENAME_NOREPLACE != 0 {
                return Err(Errno::EEXIST);
            }
            if dst == src {
                return Ok(());
            }
            match (src_dir, t.is_dir(dst)) {
                (true, false) => return Err(Errno::ENOTDIR),
                (false, true) => return Err(Errno::EISDIR),
                (true, true) if !t.dir(dst)?.is_empty() => return Err(Errno::ENOTEMPTY),
                _ => {}
            }
            t.drop_name(newparent.0, newname)?;
        }
        t.dir_mut(parent.0)?.remove(name);
        t.dir_mut(newparent.0)?.insert(newname.to_vec(), src);
        if src_dir && parent != newparent {
            t.node_mut(parent.0)?.attr.nlink -= 1;
            t.node_mut(newparent.0)?.attr.nlink += 1;
        }
        t.node_mut(src)?.attr.ctime = Timespec::now();
        t.touch_dir(parent.0);
        t.touch_dir(newparent.0);
        Ok(())
    }

    fn readdir(&self, node: NodeId) -> Result<Vec<DirEntry>> {
        let t = self.tree.lock();
        let dir = t.dir(node.0)?;
        let mut out = Vec::with_capacity(dir.len());
        for (name, &ino) in dir {
            let kind = t.node(ino)?.attr.file_type().unwrap_or(FileType::Regular);
            out.push(DirEntry {
                name: name.clone(),
                ino,
                kind,
            });
        }
        Ok(out)
    }

    fn xattrs(&self) -> Option<&dyn caps::Xattrs> {
        Some(self)
    }

    fn space(&self) -> Option<&dyn caps::Space> {
        Some(self)
    }

    fn export(&self) -> Option<&dyn caps::Export> {
        Some(self)
    }

    fn locks(&self) -> Option<&dyn caps::Locks> {
        Some(self)
    }

    fn statfs(&self, _node: NodeId) -> Result<StatFs> {
        let t = self.tree.lock();
        Ok(StatFs {
            fs_type: TMPFS_MAGIC,
            bsize: 4096,
            frsize: 4096,
            blocks: 1 << 20,
            bfree: 1 << 20,
            bavail: 1 << 20,
            files: 1 << 24,
            ffree: (1u64 << 24).saturating_sub(t.nodes.len() as u64),
            namelen: walkfs_fsapi::NAME_MAX as u64,
        })
    }
}

/// File ids: the node number and its birth time (numbers are never
/// reused, the time makes an id of another memfs stale).
impl caps::Export for MemFs {
    fn file_id(&self, node: NodeId) -> Result<Vec<u8>> {
        let t = self.tree.lock();
        let born = t.node(node.0)?.attr.btime.as_nanos();
        let mut id = node.0.to_le_bytes().to_vec();
        id.extend_from_slice(&born.to_le_bytes());
        Ok(id)
    }

    fn open_id(&self, id: &[u8]) -> Result<Entry> {
        let (ino, born) = id.split_at_checked(8).ok_or(Errno::ESTALE)?;
        let ino = u64::from_le_bytes(ino.try_into().map_err(|_| Errno::ESTALE)?);
        let born = i64::from_le_bytes(born.try_into().map_err(|_| Errno::ESTALE)?);
        let mut t = self.tree.lock();
        let n = t.nodes.get_mut(&ino).ok_or(Errno::ESTALE)?;
        if n.attr.nlink == 0 || n.attr.btime.as_nanos() != born {
            return Err(Errno::ESTALE);
        }
        n.lookups += 1;
        Ok(Entry {
            node: NodeId(ino),
            attr: n.attr,
        })
    }

    /// A search from the root (memfs keeps no parent links; it is the
    /// test backend, and directories found by id are rare).
    fn path_of(&self, node: NodeId) -> Result<Vec<Vec<u8>>> {
        let t = self.tree.lock();
        let mut queue = std::collections::VecDeque::from([(ROOT, Vec::new())]);
        while let Some((ino, path)) = queue.pop_front() {
            if ino == node.0 {
                return Ok(path);
            }
            if let Ok(d) = t.dir(ino) {
                for (name, &child) in d {
                    if matches!(t.node(child).map(|n| &n.body), Ok(Body::Dir(_))) {
                        let mut p: Vec<Vec<u8>> = path.clone();
                        p.push(name.clone());
                        queue.push_back((child, p));
                    }
                }
            }
        }
        Err(Errno::ESTALE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROOT_OWNER: Owner = Owner { uid: 0, gid: 0 };

    #[test]
    fn create_lookup_unlink_frees_node() {
        let fs = MemFs::new();
        let root = fs.root();
        let (e, fh) = fs
            .create(root, b"f", 0o644, ROOT_OWNER, OpenFlags(libc::O_RDWR))
            .unwrap();
        assert_eq!(fs.write(e.node, fh, 0, b"hello").unwrap(), 5);
        assert_eq!(fs.lookup(root, b"f").unwrap().attr.size, 5);
        fs.unlink(root, b"f").unwrap();
        assert_eq!(fs.lookup(root, b"f"), Err(Errno::ENOENT));
        // Still open and still looked up: the data survives the unlink.
        let mut buf = [0u8; 8];
        assert_eq!(fs.read(e.node, fh, 0, &mut buf).unwrap(), 5);
        fs.release(e.node, fh);
        fs.forget(e.node, 2);
        assert_eq!(fs.getattr(e.node), Err(Errno::ESTALE));
    }

    #[test]
    fn rename_rules() {
        let fs = MemFs::new();
        let r = fs.root();
        let d = fs.mkdir(r, b"d", 0o755, ROOT_OWNER).unwrap();
        fs.mkdir(d.node, b"sub", 0o755, ROOT_OWNER).unwrap();
        fs.create(r, b"f", 0o644, ROOT_OWNER, OpenFlags(0)).unwrap();
        assert_eq!(fs.rename(r, b"f", r, b"d", 0), Err(Errno::EISDIR));
        assert_eq!(fs.rename(r, b"d", r, b"f", 0), Err(Errno::ENOTDIR));
        assert_eq!(
            fs.rename(r, b"f", r, b"d", RENAME_NOREPLACE),
            Err(Errno::EEXIST)
        );
        fs.mkdir(r, b"e", 0o755, ROOT_OWNER).unwrap();
        assert_eq!(fs.rename(r, b"e", r, b"d", 0), Err(Errno::ENOTEMPTY));
        fs.rename(r, b"e", d.node, b"sub", 0).unwrap();
        // d now holds the moved "e" as "sub": root lost a subdirectory.
        assert_eq!(fs.getattr(r).unwrap().nlink, 3);
        assert_eq!(fs.getattr(d.node).unwrap().nlink, 3);
        fs.rename(r, b"f", r, b"d", RENAME_EXCHANGE).unwrap();
        assert!(fs.lookup(r, b"f").unwrap().attr.is_dir());
    }

    #[test]
    fn special_files_are_never_opened() {
        let fs = MemFs::new();
        let e = fs
            .mknod(
                fs.root(),
                b"fifo",
                libc::S_IFIFO | 0o666,
                0,
                Owner { uid: 0, gid: 0 },
            )
            .unwrap();
        assert_eq!(
            fs.open(e.node, OpenFlags(libc::O_RDONLY)),
            Err(Errno::EACCES)
        );
    }
}
