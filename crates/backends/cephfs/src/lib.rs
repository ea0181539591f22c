//! A CephFS file system as a walkfs backend, through libcephfs's
//! low-level (`ceph_ll_*`) API.
//!
//! The API maps onto the backend contract almost call for call: a lookup
//! hands out an inode with a reference, `ceph_ll_forget` drops it, as
//! [`FileSystem::forget`] does. What CephFS offers beyond the core calls
//! goes to the capabilities that fit ([`caps`]):
//! - locks to `ceph_ll_setlk`/`getlk` (POSIX) and `ceph_flock` (BSD), so
//!   the MDS arbitrates them for every client of the file system;
//! - extended attributes and POSIX ACLs to `ceph_ll_*xattr` (the client
//!   keeps ACLs as a file system does: `client_acl_type=posix_acl`);
//! - `fallocate` and `SEEK_DATA`/`SEEK_HOLE`;
//! - listings with attributes (`ceph_readdirplus_r`);
//! - reports of other clients' changes from libcephfs's invalidation
//!   callbacks (its inode and dentry invalidations, what ceph-fuse hands
//!   the kernel): [`caps::Watch`];
//! - the calls made, by name, with the time spent in them
//!   ([`caps::Remote`]: what "libcephfs calls per operation" counts).
//!
//! libcephfs is loaded when a file system is mounted ([`ffi`]), so walkfs
//! runs where Ceph is not installed.
//!
//! The vfs above checks permissions itself, with its caller's
//! credentials; the client is mounted with `client_permissions=false` so
//! it does not check them again as the mount's user, and makes each new
//! node as its owner (a `UserPerm` per owner).
//!
//! What libcephfs 16.2 lacks, walkfs answers as Linux does for a file
//! system without it: `renameat2` flags (`RENAME_NOREPLACE`,
//! `RENAME_EXCHANGE`, `RENAME_WHITEOUT`) are `EINVAL`, `O_TMPFILE` is
//! `EOPNOTSUPP`.

use std::ffi::{c_char, c_int, CString};
use std::path::PathBuf;
use std::sync::Arc;

use parking_lot::Mutex;
use walkfs_fsapi::{
    caps, DirEntry, Entry, Errno, FileHandle, FileSystem, FileType, Names, NodeId, OpenFlags,
    Owner, Result, SetAttr, StatFs, TimeSet, Timespec, What,
};

mod calls;
mod capsimpl;
pub mod ffi;
mod live;
mod nodes;
pub mod notify;

use calls::Calls;
use ffi::{Api, Inode, MountInfo, Statx, UserPerm};
use nodes::{Added, Files, Nodes, DIR_HANDLE};

/// Where and how to mount a CephFS.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Config {
    /// The cluster's configuration file; `None`: libcephfs's search path
    /// (`$CEPH_CONF`, `/etc/ceph/ceph.conf`, ...).
    pub conf: Option<PathBuf>,
    /// The client's id (`admin` for `client.admin`); `None`: libcephfs's
    /// default.
    pub id: Option<String>,
    /// The file system's name, when the cluster has more than one.
    pub fs_name: Option<String>,
    /// The directory of the file system mounted as the root ("/" when
    /// empty).
    pub root: String,
    /// Further client options, `ceph_conf_set` name and value (e.g.
    /// `client_cache_size`).
    pub options: Vec<(String, String)>,
    /// The pool of the object walkfs clients report changes through
    /// ([`notify`]); `None`: the root's data pool.
    pub notify_pool: Option<String>,
    /// Report changes to other walkfs clients and take theirs (the
    /// default). Off: no channel, and the vfs revalidates every cached
    /// answer with libcephfs (strict close-to-open, slower warm metadata).
    pub no_reports: bool,
}

/// A mounted CephFS.
pub struct CephFs {
    pub(crate) api: &'static Api,
    pub(crate) cm: *mut MountInfo,
    pub(crate) root: NodeId,
    pub(crate) nodes: Nodes,
    pub(crate) files: Files,
    /// The mount's own credentials (root, as the process).
    pub(crate) perm: *const UserPerm,
    /// A `UserPerm` per owner of new nodes, never freed while mounted
    /// (libcephfs keeps pointers to them in requests).
    owners: Mutex<std::collections::HashMap<(u32, u32), usize>>,
    pub(crate) calls: Calls,
    pub(crate) names: Mutex<Option<Arc<dyn Names>>>,
    /// What the callbacks reach (boxed: its address is their handle).
    pub(crate) hooks: Box<capsimpl::Hooks>,
    /// The change reports to and from other walkfs clients; `None` when
    /// RADOS could not be reached (then the vfs revalidates).
    pub(crate) channel: Option<Arc<notify::Channel>>,
    conf: Option<CString>,
    id: Option<CString>,
}

// SAFETY: the mount handle and perms are libcephfs objects the library
// lets any thread use; its client serialises calls on its own lock.
unsafe impl Send for CephFs {}
// SAFETY: as above.
unsafe impl Sync for CephFs {}

/// A libcephfs return value: negative is an errno.
pub(crate) fn check(r: c_int) -> Result<c_int> {
    if r < 0 {
        Err(Errno(-r))
    } else {
        Ok(r)
    }
}

pub(crate) fn cname(name: &[u8]) -> Result<CString> {
    CString::new(name).map_err(|_| Errno::EINVAL)
}

fn ts(t: libc::timespec) -> Timespec {
    Timespec {
        sec: t.tv_sec,
        nsec: t.tv_nsec as u32,
    }
}

fn to_timespec(t: Timespec) -> libc::timespec {
    libc::timespec {
        tv_sec: t.sec,
        tv_nsec: t.nsec as i64,
    }
}

/// A `ceph_statx` as walkfs's attributes.
pub(crate) fn attr_of(s: &Statx) -> walkfs_fsapi::Attr {
    walkfs_fsapi::Attr {
        ino: s.stx_ino,
        mode: u32::from(s.stx_mode),
        nlink: s.stx_nlink,
        uid: s.stx_uid,
        gid: s.stx_gid,
        rdev: s.stx_rdev,
        size: s.stx_size,
        blocks: s.stx_blocks,
        atime: ts(s.stx_atime),
        mtime: ts(s.stx_mtime),
        ctime: ts(s.stx_ctime),
        btime: ts(s.stx_btime),
        has_acl: false,
    }
}

impl CephFs {
    /// Mount the file system `cfg` names. `ENOSYS` where libcephfs cannot
    /// be loaded; a refusal of the cluster's as its errno
    /// (`ETIMEDOUT` for a monitor that never answers within
    /// `client_mount_timeout`).
    pub fn mount(cfg: &Config) -> Result<CephFs> {
        let api = ffi::api().map_err(|e| {
            tracing::error!("cephfs: cannot load libcephfs: {e} (install libcephfs2)");
            Errno::ENOSYS
        })?;
        let id = cfg.id.as_deref().map(|s| cname(s.as_bytes())).transpose()?;
        let mut cm: *mut MountInfo = std::ptr::null_mut();
        // SAFETY: `cm` is written by the call; `id` is NUL-terminated or
        // null (libcephfs's default id).
        check(unsafe {
            (api.ceph_create)(
                &mut cm,
                id.as_ref().map_or(std::ptr::null(), |c| c.as_ptr()),
            )
        })?;
        let fs = CephFs {
            api,
            cm,
            root: NodeId(0),
            nodes: Nodes::default(),
            files: Files::default(),
            perm: std::ptr::null(),
            owners: Mutex::default(),
            calls: Calls::default(),
            names: Mutex::new(None),
            hooks: Box::default(),
            channel: None,
            conf: None,
            id: id.clone(),
        };
        // On an error from here `fs` is dropped, which releases `cm`.
        fs.start(cfg)
    }

    fn start(mut self, cfg: &Config) -> Result<CephFs> {
        let api = self.api;
        let cm = self.cm;
        let conf = match &cfg.conf {
            Some(p) => Some(cname(p.as_os_str().as_encoded_bytes())?),
            None => None,
        };
        self.conf = conf.clone();
        // SAFETY: `cm` is a created mount; the path is NUL-terminated or
        // null (the default search path).
        let r = unsafe {
            (api.ceph_conf_read_file)(cm, conf.as_ref().map_or(std::ptr::null(), |c| c.as_ptr()))
        };
        if r < 0 {
            tracing::error!(
                "cephfs: reading the configuration {:?}: {}",
                cfg.conf,
                Errno(-r)
            );
            return Err(Errno(-r));
        }
        // The vfs checks permissions with its callers' credentials; ACLs
        // are kept by the client as a file system keeps them.
        let mut opts: Vec<(String, String)> = vec![
            ("client_permissions".into(), "false".into()),
            ("client_acl_type".into(), "posix_acl".into()),
            ("fuse_default_permissions".into(), "false".into()),
        ];
        opts.extend(cfg.options.iter().cloned());
        for (k, v) in &opts {
            let (ck, cv) = (cname(k.as_bytes())?, cname(v.as_bytes())?);
            // SAFETY: both strings NUL-terminated; `cm` not yet mounted.
            let r = unsafe { (api.ceph_conf_set)(cm, ck.as_ptr(), cv.as_ptr()) };
            if r < 0 {
                tracing::error!("cephfs: option {k}={v}: {}", Errno(-r));
                return Err(Errno::EINVAL);
            }
        }
        // SAFETY: `cm` configured, not yet initialised.
        check(unsafe { (api.ceph_init)(cm) })
            .inspect_err(|e| tracing::error!("cephfs: init: {e}"))?;
        if let Some(name) = &cfg.fs_name {
            let c = cname(name.as_bytes())?;
            // SAFETY: initialised, not mounted; NUL-terminated name.
            check(unsafe { (api.ceph_select_filesystem)(cm, c.as_ptr()) })
                .inspect_err(|e| tracing::error!("cephfs: file system {name}: {e}"))?;
        }
        let root = if cfg.root.is_empty() {
            "/"
        } else {
            cfg.root.as_str()
        };
        let croot = cname(root.as_bytes())?;
        // SAFETY: initialised; NUL-terminated root path.
        check(unsafe { (api.ceph_mount)(cm, croot.as_ptr()) })
            .inspect_err(|e| tracing::error!("cephfs: mounting {root}: {e}"))?;
        self.hooks.register(api, cm);
        live::add(cm);
        // SAFETY: mounted; the result is owned by the mount.
        self.perm = unsafe { (api.ceph_mount_perms)(cm) };
        let mut rin: *mut Inode = std::ptr::null_mut();
        // SAFETY: mounted; `rin` written with one reference the table
        // keeps for as long as the mount.
        check(unsafe { (api.ceph_ll_lookup_root)(cm, &mut rin) })?;
        let mut stx = Statx::default();
        // SAFETY: `rin` a referenced inode, `stx` a valid out-structure.
        check(unsafe { (api.ceph_ll_getattr)(cm, rin, &mut stx, ffi::STATX_INO, 0, self.perm) })?;
        self.root = NodeId(stx.stx_ino);
        self.nodes.add(stx.stx_ino, rin);
        tracing::info!("cephfs: mounted {root} (root inode {:#x})", stx.stx_ino);
        if !cfg.no_reports {
            self.channel = self.open_channel(cfg.notify_pool.as_deref());
        }
        Ok(self)
    }

    /// The change channel, publishing; `None` (with a warning) when it
    /// cannot be had.
    fn open_channel(&self, pool: Option<&str>) -> Option<Arc<notify::Channel>> {
        let pool = match pool {
            Some(p) => p.to_string(),
            None => {
                let v = caps::Xattrs::getxattr(self, self.root, b"ceph.dir.layout.pool").ok()?;
                String::from_utf8_lossy(&v)
                    .trim_end_matches('\0')
                    .to_string()
            }
        };
        let hooks: *const capsimpl::Hooks = &*self.hooks;
        match notify::Channel::open(
            self.conf.as_ref(),
            self.id.as_ref(),
            &pool,
            self.root.0,
            hooks,
        )
        .and_then(|ch| ch.start_publishing().map(|()| ch))
        {
            Ok(ch) => {
                live::add_channel(&ch);
                Some(ch)
            }
            Err(e) => {
                tracing::warn!("cephfs: no change reports between clients ({e}): other clients' changes are found by revalidating");
                None
            }
        }
    }

    /// Tell other walkfs clients of a change.
    pub(crate) fn tell(&self, rec: notify::Rec) {
        if let Some(ch) = &self.channel {
            ch.publish(rec);
        }
    }

    pub(crate) fn tell_entry(
        &self,
        dir: NodeId,
        name: &[u8],
        what: walkfs_fsapi::What,
        is_dir: bool,
        cookie: u32,
    ) {
        self.tell(notify::Rec::Entry {
            dir: dir.0,
            name: name.to_vec(),
            what,
            is_dir,
            cookie,
        });
    }

    /// Tell of a change of `node`'s data or attributes, with where it is
    /// seen when the vfs's names know.
    pub(crate) fn tell_inode(&self, node: NodeId, what: walkfs_fsapi::What) {
        if self.channel.is_none() {
            return;
        }
        let at = self
            .names
            .lock()
            .clone()
            .and_then(|n| n.path_of(node))
            .and_then(|chain| {
                let (_, name) = chain.first()?;
                let dir = chain.get(1).map_or(self.root, |(d, _)| *d);
                Some((dir.0, name.to_vec()))
            });
        self.tell(notify::Rec::Inode {
            ino: node.0,
            what,
            at,
        });
    }

    /// The tree's recursive ctime, read for the channel's poll.
    fn rctime_reader(&self) -> Box<dyn Fn() -> Option<i64> + Send> {
        let (api, cm, perm) = (self.api, self.cm as usize, self.perm as usize);
        let Ok(root) = self.nodes.get(self.root) else {
            return Box::new(|| None);
        };
        let root = root as usize;
        Box::new(move || {
            let mut buf = [0u8; 64];
            let name = c"ceph.dir.rctime";
            // SAFETY: the mount and its root inode (held for the mount's
            // life) outlive the channel's threads, which `shut` joins
            // before the unmount.
            let n = unsafe {
                (api.ceph_ll_getxattr)(
                    cm as *mut MountInfo,
                    root as *mut Inode,
                    name.as_ptr(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                    perm as *const UserPerm,
                )
            };
            if n <= 0 {
                return None;
            }
            let s = std::str::from_utf8(&buf[..n as usize])
                .ok()?
                .trim_end_matches('\0');
            let (sec, nsec) = s.split_once('.').unwrap_or((s, "0"));
            Some(sec.parse::<i64>().ok()? * 1_000_000_000 + nsec.parse::<i64>().ok()?)
        })
    }

    /// The `UserPerm` new nodes of `owner` are made with.
    fn perm_for(&self, owner: Owner) -> *const UserPerm {
        let mut owners = self.owners.lock();
        let p = owners.entry((owner.uid, owner.gid)).or_insert_with(|| {
            // SAFETY: no group list (null with a count of 0), which the
            // UserPerm would otherwise borrow.
            unsafe {
                (self.api.ceph_userperm_new)(owner.uid, owner.gid, 0, std::ptr::null_mut()) as usize
            }
        });
        *p as *const UserPerm
    }

    /// The entry for an inode a call handed out with one reference: the
    /// node is held (one lookup more), the spare reference given back.
    fn entry_of(&self, inode: *mut Inode, stx: &Statx) -> Result<Entry> {
        if stx.stx_dev != ffi::NOSNAP {
            // A snapshot's inode (under `.snap`) has its live file's
            // number: it would be taken for it. Snapshots stay unseen.
            self.put(inode);
            return Err(Errno::ENOENT);
        }
        if let Added::Spare(i) = self.nodes.add(stx.stx_ino, inode) {
            self.put(i);
        }
        Ok(Entry {
            node: NodeId(stx.stx_ino),
            attr: attr_of(stx),
        })
    }

    /// Give back one libcephfs reference.
    pub(crate) fn put(&self, inode: *mut Inode) {
        // SAFETY: the caller holds a reference on `inode` and gives it up.
        // The result is a bool (was it the last), not an error.
        unsafe { (self.api.ceph_ll_forget)(self.cm, inode, 1) };
    }

    fn node(&self, node: NodeId) -> Result<*mut Inode> {
        self.nodes.get(node)
    }

    /// The path of `node` from the mount's root, from the vfs's names:
    /// what the descriptor-level calls (`ceph_flock`) need.
    pub(crate) fn path_of(&self, node: NodeId) -> Result<CString> {
        if node == self.root {
            return cname(b"/");
        }
        let names = self.names.lock().clone().ok_or(Errno::ESTALE)?;
        let chain = names.path_of(node).ok_or(Errno::ESTALE)?;
        let mut path = Vec::new();
        for (_, name) in chain.iter().rev() {
            path.push(b'/');
            path.extend_from_slice(name);
        }
        cname(&path)
    }

    /// Numbers of held nodes (tests: references are returned).
    pub fn held_nodes(&self) -> usize {
        self.nodes.len()
    }

    /// The make calls share their tail: an out inode with a reference and
    /// its attributes become an entry.
    fn made(&self, r: c_int, out: *mut Inode, stx: &Statx) -> Result<Entry> {
        check(r)?;
        self.entry_of(out, stx)
    }

    /// mkdir, symlink, mknod: `call` (libcephfs's, named `what`) makes
    /// `name` in `parent` as `owner`, given the parent's inode, the name,
    /// the out-pointers and the owner's perm; the node made becomes an
    /// entry and other clients are told.
    fn make(
        &self,
        parent: NodeId,
        name: &[u8],
        owner: Owner,
        is_dir: bool,
        what: &'static str,
        call: impl FnOnce(
            *mut Inode,
            *const c_char,
            *mut *mut Inode,
            *mut Statx,
            *const UserPerm,
        ) -> c_int,
    ) -> Result<Entry> {
        let p = self.node(parent)?;
        let c = cname(name)?;
        let mut out = std::ptr::null_mut();
        let mut stx = Statx::default();
        let r = {
            let _t = self.calls.time(what);
            call(p, c.as_ptr(), &mut out, &mut stx, self.perm_for(owner))
        };
        let e = self.made(r, out, &stx)?;
        self.tell_entry(parent, name, What::Created, is_dir, 0);
        Ok(e)
    }
}

impl Drop for CephFs {
    fn drop(&mut self) {
        let api = self.api;
        if let Some(ch) = self.channel.take() {
            ch.shut();
        }
        let was_live = live::remove(self.cm);
        if !was_live && self.root != NodeId(0) {
            // Mounted, and unmounted already: the process is exiting.
            return;
        }
        for o in self.files.drain() {
            // SAFETY: handles this mount opened and the vfs no longer uses.
            unsafe { (api.ceph_ll_close)(self.cm, o.fh) };
            if let Some(fd) = o.flock_fd {
                // SAFETY: a descriptor of this mount's.
                unsafe { (api.ceph_close)(self.cm, fd) };
            }
        }
        for i in self.nodes.drain() {
            self.put(i);
        }
        // SAFETY: `cm` was created by ceph_create; unmount fails harmlessly
        // when it never mounted; release frees it.
        unsafe {
            (api.ceph_unmount)(self.cm);
            (api.ceph_release)(self.cm);
        }
    }
}

impl FileSystem for CephFs {
    fn root(&self) -> NodeId {
        self.root
    }

    fn attach_names(&self, names: Arc<dyn Names>) {
        *self.names.lock() = Some(names);
    }

    fn kind(&self) -> &'static str {
        "cephfs"
    }

    fn lookup(&self, parent: NodeId, name: &[u8]) -> Result<Entry> {
        let p = self.node(parent)?;
        let c = cname(name)?;
        let mut out: *mut Inode = std::ptr::null_mut();
        let mut stx = Statx::default();
        let _t = self.calls.time("ll_lookup");
        // SAFETY: `p` held by the table; `out`/`stx` valid out-pointers.
        let r = unsafe {
            (self.api.ceph_ll_lookup)(
                self.cm,
                p,
                c.as_ptr(),
                &mut out,
                &mut stx,
                ffi::STATX_WANT,
                0,
                self.perm,
            )
        };
        self.made(r, out, &stx)
    }

    fn forget(&self, node: NodeId, count: u64) {
        if node == self.root {
            return;
        }
        if let Some(i) = self.nodes.forget(node, count) {
            self.put(i);
        }
    }

    fn getattr(&self, node: NodeId) -> Result<walkfs_fsapi::Attr> {
        let i = self.node(node)?;
        let mut stx = Statx::default();
        let _t = self.calls.time("ll_getattr");
        // SAFETY: `i` held; `stx` a valid out-structure. With the caps for
        // the attributes held, the client answers without the MDS.
        check(unsafe {
            (self.api.ceph_ll_getattr)(
                self.cm,
                i,
                &mut stx,
                ffi::STATX_WANT,
                libc::AT_SYMLINK_NOFOLLOW as u32,
                self.perm,
            )
        })?;
        Ok(attr_of(&stx))
    }

    fn setattr(&self, node: NodeId, set: &SetAttr) -> Result<walkfs_fsapi::Attr> {
        let i = self.node(node)?;
        let mut stx = Statx::default();
        let mut mask = 0;
        if let Some(m) = set.mode {
            stx.stx_mode = (m & 0o7777) as u16;
            mask |= ffi::SETATTR_MODE;
        }
        if let Some(u) = set.uid {
            stx.stx_uid = u;
            mask |= ffi::SETATTR_UID;
        }
        if let Some(g) = set.gid {
            stx.stx_gid = g;
            mask |= ffi::SETATTR_GID;
        }
        if let Some(s) = set.size {
            stx.stx_size = s;
            mask |= ffi::SETATTR_SIZE;
        }
        // The client drops the *_NOW bits; the time is given instead.
        let now = Timespec::now();
        let at = |t: TimeSet| match t {
            TimeSet::Now => now,
            TimeSet::At(t) => t,
        };
        if let Some(t) = set.atime {
            stx.stx_atime = to_timespec(at(t));
            mask |= ffi::SETATTR_ATIME;
        }
        if let Some(t) = set.mtime {
            stx.stx_mtime = to_timespec(at(t));
            mask |= ffi::SETATTR_MTIME;
        }
        if mask != 0 {
            let _t = self.calls.time("ll_setattr");
            // SAFETY: `i` held; `stx` filled for the bits in `mask`.
            check(unsafe { (self.api.ceph_ll_setattr)(self.cm, i, &mut stx, mask, self.perm) })?;
            self.tell_inode(
                node,
                if set.size.is_some() {
                    What::Modified
                } else {
                    What::Attrib
                },
            );
        }
        self.getattr(node)
    }

    fn readlink(&self, node: NodeId) -> Result<Vec<u8>> {
        let i = self.node(node)?;
        let mut buf = vec![0u8; walkfs_fsapi::PATH_MAX];
        let _t = self.calls.time("ll_readlink");
        // SAFETY: `i` held; `buf` writable for its length.
        let n = check(unsafe {
            (self.api.ceph_ll_readlink)(self.cm, i, buf.as_mut_ptr().cast(), buf.len(), self.perm)
        })?;
        buf.truncate(n as usize);
        Ok(buf)
    }

    fn open(&self, node: NodeId, flags: OpenFlags) -> Result<FileHandle> {
        let i = self.node(node)?;
        if flags.0 & libc::O_DIRECTORY != 0 {
            return Ok(DIR_HANDLE);
        }
        // The vfs places every write (its offsets, O_APPEND's included).
        let keep = libc::O_ACCMODE | libc::O_TRUNC;
        let mut fh = std::ptr::null_mut();
        let _t = self.calls.time("ll_open");
        // SAFETY: `i` held; `fh` written on success.
        match check(unsafe {
            (self.api.ceph_ll_open)(self.cm, i, flags.0 & keep, &mut fh, self.perm)
        }) {
            Ok(_) => Ok(self.files.add(fh)),
            // A directory opened without O_DIRECTORY (the vfs's opendir).
            Err(Errno::EISDIR) => Ok(DIR_HANDLE),
            Err(e) => Err(e),
        }
    }

    fn create(
        &self,
        parent: NodeId,
        name: &[u8],
        mode: u32,
        owner: Owner,
        flags: OpenFlags,
    ) -> Result<(Entry, FileHandle)> {
        let p = self.node(parent)?;
        let c = cname(name)?;
        let mut out = std::ptr::null_mut();
        let mut fh = std::ptr::null_mut();
        let mut stx = Statx::default();
        let oflags = (flags.0 & (libc::O_ACCMODE | libc::O_TRUNC)) | libc::O_CREAT | libc::O_EXCL;
        let _t = self.calls.time("ll_create");
        // SAFETY: `p` held; out-pointers valid; the owner's perm lives as
        // long as the mount.
        let r = unsafe {
            (self.api.ceph_ll_create)(
                self.cm,
                p,
                c.as_ptr(),
                (mode & 0o7777) as libc::mode_t,
                oflags,
                &mut out,
                &mut fh,
                &mut stx,
                ffi::STATX_WANT,
                0,
                self.perm_for(owner),
            )
        };
        let e = self.made(r, out, &stx)?;
        self.tell_entry(parent, name, What::Created, false, 0);
        Ok((e, self.files.add(fh)))
    }

    fn read(&self, _node: NodeId, fh: FileHandle, off: u64, buf: &mut [u8]) -> Result<usize> {
        let f = self.files.get(fh)?;
        let _t = self.calls.time("ll_read");
        // SAFETY: `f` an open handle; `buf` writable for its length.
        let n = check(unsafe {
            (self.api.ceph_ll_read)(
                self.cm,
                f,
                off as i64,
                buf.len() as u64,
                buf.as_mut_ptr().cast(),
            )
        })?;
        Ok(n as usize)
    }

    fn write(&self, _node: NodeId, fh: FileHandle, off: u64, data: &[u8]) -> Result<usize> {
        let f = self.files.get_written(fh)?;
        let _t = self.calls.time("ll_write");
        // SAFETY: `f` an open handle; `data` readable for its length.
        let n = check(unsafe {
            (self.api.ceph_ll_write)(
                self.cm,
                f,
                off as i64,
                data.len() as u64,
                data.as_ptr().cast(),
            )
        })?;
        Ok(n as usize)
    }

    fn release(&self, node: NodeId, fh: FileHandle) {
        if let Some(o) = self.files.take(fh) {
            let _t = self.calls.time("ll_close");
            if let Some(fd) = o.flock_fd {
                // SAFETY: the descriptor this handle's flock locks went
                // through; closing it drops them, as a last close does.
                unsafe { (self.api.ceph_close)(self.cm, fd) };
            }
            if o.written {
                // Close-to-open: what was written through this handle is
                // at the OSDs before the close returns. The client would
                // otherwise keep it dirty for up to
                // client_oc_max_dirty_age (5 s), and another client's
                // open would wait that long for the cap it holds.
                let _t = self.calls.time("ll_fsync");
                // SAFETY: an open handle.
                unsafe { (self.api.ceph_ll_fsync)(self.cm, o.fh, 1) };
                self.tell_inode(node, What::Modified);
            }
            // SAFETY: an open handle, not used again.
            unsafe { (self.api.ceph_ll_close)(self.cm, o.fh) };
        }
    }

    fn mkdir(&self, parent: NodeId, name: &[u8], mode: u32, owner: Owner) -> Result<Entry> {
        let mode = (mode & 0o7777) as libc::mode_t;
        self.make(
            parent,
            name,
            owner,
            true,
            "ll_mkdir",
            |p, c, out, stx, perm| {
                // SAFETY: the arguments `make` hands over are valid.
                unsafe {
                    (self.api.ceph_ll_mkdir)(
                        self.cm,
                        p,
                        c,
                        mode,
                        out,
                        stx,
                        ffi::STATX_WANT,
                        0,
                        perm,
                    )
                }
            },
        )
    }

    fn symlink(&self, parent: NodeId, name: &[u8], target: &[u8], owner: Owner) -> Result<Entry> {
        let t = cname(target)?;
        self.make(
            parent,
            name,
            owner,
            false,
            "ll_symlink",
            |p, c, out, stx, perm| {
                // SAFETY: as for mkdir; `t` is NUL-terminated.
                unsafe {
                    (self.api.ceph_ll_symlink)(
                        self.cm,
                        p,
                        c,
                        t.as_ptr(),
                        out,
                        stx,
                        ffi::STATX_WANT,
                        0,
                        perm,
                    )
                }
            },
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
        self.make(
            parent,
            name,
            owner,
            false,
            "ll_mknod",
            |p, c, out, stx, perm| {
                // SAFETY: as for mkdir.
                unsafe {
                    (self.api.ceph_ll_mknod)(
                        self.cm,
                        p,
                        c,
                        mode as libc::mode_t,
                        rdev,
                        out,
                        stx,
                        ffi::STATX_WANT,
                        0,
                        perm,
                    )
                }
            },
        )
    }

    fn link(&self, node: NodeId, newparent: NodeId, newname: &[u8]) -> Result<Entry> {
        let (i, p) = (self.node(node)?, self.node(newparent)?);
        let c = cname(newname)?;
        {
            let _t = self.calls.time("ll_link");
            // SAFETY: both held.
            check(unsafe { (self.api.ceph_ll_link)(self.cm, i, p, c.as_ptr(), self.perm) })?;
        }
        // The node is held (the vfs names it): one lookup more, no new
        // reference.
        self.nodes.again(node)?;
        self.tell_entry(newparent, newname, What::Created, false, 0);
        let attr = self.getattr(node)?;
        Ok(Entry { node, attr })
    }

    fn unlink(&self, parent: NodeId, name: &[u8]) -> Result<()> {
        let p = self.node(parent)?;
        let c = cname(name)?;
        let _t = self.calls.time("ll_unlink");
        // SAFETY: `p` held.
        check(unsafe { (self.api.ceph_ll_unlink)(self.cm, p, c.as_ptr(), self.perm) })?;
        self.tell_entry(parent, name, What::Deleted, false, 0);
        Ok(())
    }

    fn rmdir(&self, parent: NodeId, name: &[u8]) -> Result<()> {
        let p = self.node(parent)?;
        let c = cname(name)?;
        let _t = self.calls.time("ll_rmdir");
        // SAFETY: `p` held.
        check(unsafe { (self.api.ceph_ll_rmdir)(self.cm, p, c.as_ptr(), self.perm) })?;
        self.tell_entry(parent, name, What::Deleted, true, 0);
        Ok(())
    }

    fn rename(
        &self,
        parent: NodeId,
        name: &[u8],
        newparent: NodeId,
        newname: &[u8],
        flags: u32,
    ) -> Result<()> {
        if flags != 0 {
            // libcephfs 16.2's rename has no flags: Linux's answer for a
            // file system without them.
            return Err(Errno::EINVAL);
        }
        let (p, np) = (self.node(parent)?, self.node(newparent)?);
        let (c, nc) = (cname(name)?, cname(newname)?);
        let _t = self.calls.time("ll_rename");
        // SAFETY: both held.
        check(unsafe {
            (self.api.ceph_ll_rename)(self.cm, p, c.as_ptr(), np, nc.as_ptr(), self.perm)
        })?;
        if let Some(ch) = &self.channel {
            let cookie = ch.rename_cookie();
            self.tell_entry(parent, name, What::MovedFrom, false, cookie);
            self.tell_entry(newparent, newname, What::MovedTo, false, cookie);
        }
        Ok(())
    }

    fn readdir(&self, node: NodeId) -> Result<Vec<DirEntry>> {
        let mut out = Vec::new();
        self.list(node, false, |de, _, _| {
            if let Some(kind) = dtype_kind(de.d_type) {
                out.push(DirEntry {
                    name: dirent_name(de).to_vec(),
                    ino: de.d_ino,
                    kind,
                });
            }
            Ok(())
        })?;
        Ok(out)
    }

    fn statfs(&self, _node: NodeId) -> Result<StatFs> {
        let i = self.node(self.root)?;
        // SAFETY: all-zero is a valid statvfs64.
        let mut st: libc::statvfs64 = unsafe { std::mem::zeroed() };
        let _t = self.calls.time("ll_statfs");
        // SAFETY: `i` held; `st` a valid out-structure.
        check(unsafe { (self.api.ceph_ll_statfs)(self.cm, i, &mut st) })?;
        Ok(StatFs {
            // CEPH_SUPER_MAGIC, what the kernel client reports.
            fs_type: 0x00c3_6400,
            bsize: st.f_bsize,
            blocks: st.f_blocks,
            bfree: st.f_bfree,
            bavail: st.f_bavail,
            files: st.f_files,
            ffree: st.f_ffree,
            namelen: st.f_namemax,
            frsize: st.f_frsize,
        })
    }

    fn listings(&self) -> Option<&dyn caps::Listings> {
        Some(self)
    }

    fn watch(&self) -> Option<&dyn caps::Watch> {
        Some(self)
    }

    fn remote(&self) -> Option<&dyn caps::Remote> {
        Some(self)
    }

    fn locks(&self) -> Option<&dyn caps::Locks> {
        Some(self)
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
}

impl CephFs {
    /// List directory `node`, handing each entry but `.` and `..` to
    /// `each`; `plus`: with its attributes and a referenced inode (which
    /// `each` takes over).
    pub(crate) fn list(
        &self,
        node: NodeId,
        plus: bool,
        mut each: impl FnMut(&libc::dirent64, &Statx, *mut Inode) -> Result<()>,
    ) -> Result<()> {
        let i = self.node(node)?;
        let mut dir = std::ptr::null_mut();
        let _t = self
            .calls
            .time(if plus { "readdirplus" } else { "readdir" });
        // SAFETY: `i` held; `dir` written on success.
        check(unsafe { (self.api.ceph_ll_opendir)(self.cm, i, &mut dir, self.perm) })?;
        let r = (|| loop {
            // SAFETY: all-zero is a valid dirent64 and statx.
            let mut de: libc::dirent64 = unsafe { std::mem::zeroed() };
            let mut stx = Statx::default();
            let mut out: *mut Inode = std::ptr::null_mut();
            // SAFETY: `dir` open; out-structures valid.
            let n = unsafe {
                if plus {
                    (self.api.ceph_readdirplus_r)(
                        self.cm,
                        dir,
                        &mut de,
                        &mut stx,
                        ffi::STATX_WANT,
                        libc::AT_SYMLINK_NOFOLLOW as u32,
                        &mut out,
                    )
                } else {
                    (self.api.ceph_readdir_r)(self.cm, dir, &mut de)
                }
            };
            if check(n)? == 0 {
                return Ok(());
            }
            let name = dirent_name(&de);
            if name == b"." || name == b".." {
                if !out.is_null() {
                    self.put(out);
                }
                continue;
            }
            each(&de, &stx, out)?;
        })();
        // SAFETY: `dir` open, not used again.
        unsafe { (self.api.ceph_ll_releasedir)(self.cm, dir) };
        r
    }

    /// [`list`](CephFs::list)'s entry made an entry of the table.
    pub(crate) fn entry_listed(&self, out: *mut Inode, stx: &Statx) -> Result<Entry> {
        self.entry_of(out, stx)
    }
}

pub(crate) fn dirent_name(de: &libc::dirent64) -> &[u8] {
    // SAFETY: d_name is a NUL-terminated array filled by the library.
    unsafe { std::ffi::CStr::from_ptr(de.d_name.as_ptr() as *const c_char) }.to_bytes()
}

pub(crate) fn dtype_kind(t: u8) -> Option<FileType> {
    Some(match t {
        libc::DT_REG => FileType::Regular,
        libc::DT_DIR => FileType::Directory,
        libc::DT_LNK => FileType::Symlink,
        libc::DT_CHR => FileType::CharDevice,
        libc::DT_BLK => FileType::BlockDevice,
        libc::DT_FIFO => FileType::Fifo,
        libc::DT_SOCK => FileType::Socket,
        _ => return None,
    })
}
