//! libcephfs's C interface, loaded with `dlopen` when a CephFS source is
//! opened: the walkfs binary carries no link to Ceph and runs where Ceph
//! is not installed (a CephFS source there fails with `ENOSYS` and a
//! message naming the library).
//!
//! The structures here mirror `cephfs/ceph_ll_client.h` and
//! `cephfs/libcephfs.h` of libcephfs 16.2 (LIBCEPHFS_VER 10.0.2) on a
//! 64-bit glibc target, where the header insists on a 64-bit `off_t`.
//! `tests/layout.rs` compiles the headers and checks every size and
//! offset below against them.

use std::ffi::{c_char, c_int, c_uint, c_void, CStr};

/// `struct ceph_mount_info`, `struct Inode`, `struct Fh`,
/// `struct ceph_dir_result`, `UserPerm`: opaque to the caller.
#[repr(C)]
pub struct MountInfo {
    _p: [u8; 0],
}
#[repr(C)]
pub struct Inode {
    _p: [u8; 0],
}
#[repr(C)]
pub struct Fh {
    _p: [u8; 0],
}
#[repr(C)]
pub struct DirResult {
    _p: [u8; 0],
}
#[repr(C)]
pub struct UserPerm {
    _p: [u8; 0],
}

/// `vinodeno_t`: an inode number and a snapshot id (`CEPH_NOSNAP` for the
/// live file system). Passed by value to the invalidation callbacks.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VInodeNo {
    pub ino: u64,
    pub snapid: u64,
}

/// `inodeno_t`, passed by value to `ceph_ll_lookup_inode`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct InodeNo {
    pub val: u64,
}

/// The live file system's snapshot id (`CEPH_NOSNAP`).
pub const NOSNAP: u64 = u64::MAX - 1;

/// `struct ceph_statx`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Statx {
    pub stx_mask: u32,
    pub stx_blksize: u32,
    pub stx_nlink: u32,
    pub stx_uid: u32,
    pub stx_gid: u32,
    pub stx_mode: u16,
    pub stx_ino: u64,
    pub stx_size: u64,
    pub stx_blocks: u64,
    /// The snapshot id of the inode (`CEPH_NOSNAP` for a live one).
    pub stx_dev: u64,
    pub stx_rdev: u64,
    pub stx_atime: libc::timespec,
    pub stx_ctime: libc::timespec,
    pub stx_mtime: libc::timespec,
    pub stx_btime: libc::timespec,
    pub stx_version: u64,
}

pub const STATX_MODE: c_uint = 0x001;
pub const STATX_NLINK: c_uint = 0x002;
pub const STATX_UID: c_uint = 0x004;
pub const STATX_GID: c_uint = 0x008;
pub const STATX_RDEV: c_uint = 0x010;
pub const STATX_ATIME: c_uint = 0x020;
pub const STATX_MTIME: c_uint = 0x040;
pub const STATX_CTIME: c_uint = 0x080;
pub const STATX_INO: c_uint = 0x100;
pub const STATX_SIZE: c_uint = 0x200;
pub const STATX_BLOCKS: c_uint = 0x400;
pub const STATX_BASIC_STATS: c_uint = 0x7ff;
pub const STATX_BTIME: c_uint = 0x800;
/// What walkfs asks for: every attribute an [`walkfs_fsapi::Attr`] holds.
pub const STATX_WANT: c_uint = STATX_BASIC_STATS | STATX_BTIME;

pub const SETATTR_MODE: c_int = 1 << 0;
pub const SETATTR_UID: c_int = 1 << 1;
pub const SETATTR_GID: c_int = 1 << 2;
pub const SETATTR_MTIME: c_int = 1 << 3;
pub const SETATTR_ATIME: c_int = 1 << 4;
pub const SETATTR_SIZE: c_int = 1 << 5;
pub const SETATTR_CTIME: c_int = 1 << 6;

/// `AT_STATX_DONT_SYNC`: the attributes the client has, with no trip to
/// the MDS (the caps it holds keep them current).
pub const AT_STATX_DONT_SYNC: c_uint = 0x4000;

pub type InoCb = extern "C" fn(handle: *mut c_void, ino: VInodeNo, off: i64, len: i64);
pub type DentryCb = extern "C" fn(
    handle: *mut c_void,
    dirino: VInodeNo,
    ino: VInodeNo,
    name: *const c_char,
    len: usize,
);
pub type RemountCb = extern "C" fn(handle: *mut c_void) -> c_int;
pub type SwitchIntrCb = extern "C" fn(handle: *mut c_void, data: *mut c_void);
pub type UmaskCb = extern "C" fn(handle: *mut c_void) -> libc::mode_t;
pub type InoReleaseCb = extern "C" fn(handle: *mut c_void, ino: VInodeNo);

/// `struct ceph_client_callback_args`: a null entry is left unregistered.
#[repr(C)]
pub struct CallbackArgs {
    pub handle: *mut c_void,
    pub ino_cb: Option<InoCb>,
    pub dentry_cb: Option<DentryCb>,
    pub switch_intr_cb: Option<SwitchIntrCb>,
    pub remount_cb: Option<RemountCb>,
    pub umask_cb: Option<UmaskCb>,
    pub ino_release_cb: Option<InoReleaseCb>,
}

macro_rules! api {
    ($api:ident; $( fn $name:ident ( $($arg:ty),* ) $(-> $ret:ty)? ; )*) => {
        /// The functions walkfs calls, resolved once from the loaded
        /// library: a missing one fails the load (a library too old).
        #[allow(non_snake_case)]
        pub struct $api {
            $( pub $name: unsafe extern "C" fn($($arg),*) $(-> $ret)?, )*
            _lib: Library,
        }

        impl $api {
            fn resolve(lib: Library) -> Result<$api, String> {
                Ok($api {
                    // SAFETY: each symbol is the libcephfs function of that
                    // name, whose C prototype is the signature declared
                    // here (checked against the headers by tests/layout.rs
                    // for the structures they pass).
                    $( $name: unsafe { std::mem::transmute::<*mut c_void, unsafe extern "C" fn($($arg),*) $(-> $ret)?>(lib.sym(concat!(stringify!($name), "\0"))?) }, )*
                    _lib: lib,
                })
            }
        }
    };
}

type M = *mut MountInfo;
type P = *const UserPerm;

api! {
    Api;
    fn ceph_create(*mut M, *const c_char) -> c_int;
    fn ceph_conf_read_file(M, *const c_char) -> c_int;
    fn ceph_conf_set(M, *const c_char, *const c_char) -> c_int;
    fn ceph_init(M) -> c_int;
    fn ceph_select_filesystem(M, *const c_char) -> c_int;
    fn ceph_mount(M, *const c_char) -> c_int;
    fn ceph_unmount(M) -> c_int;
    fn ceph_release(M) -> c_int;
    fn ceph_userperm_new(libc::uid_t, libc::gid_t, c_int, *mut libc::gid_t) -> *mut UserPerm;
    fn ceph_mount_perms(M) -> *mut UserPerm;
    fn ceph_ll_register_callbacks(M, *mut CallbackArgs);
    fn ceph_ll_lookup_root(M, *mut *mut Inode) -> c_int;
    fn ceph_ll_lookup_inode(M, InodeNo, *mut *mut Inode) -> c_int;
    fn ceph_ll_lookup(M, *mut Inode, *const c_char, *mut *mut Inode, *mut Statx, c_uint, c_uint, P) -> c_int;
    fn ceph_ll_forget(M, *mut Inode, c_int) -> c_int;
    fn ceph_ll_getattr(M, *mut Inode, *mut Statx, c_uint, c_uint, P) -> c_int;
    fn ceph_ll_setattr(M, *mut Inode, *mut Statx, c_int, P) -> c_int;
    fn ceph_ll_open(M, *mut Inode, c_int, *mut *mut Fh, P) -> c_int;
    fn ceph_ll_lseek(M, *mut Fh, libc::off_t, c_int) -> libc::off_t;
    fn ceph_ll_read(M, *mut Fh, i64, u64, *mut c_char) -> c_int;
    fn ceph_ll_write(M, *mut Fh, i64, u64, *const c_char) -> c_int;
    fn ceph_ll_fsync(M, *mut Fh, c_int) -> c_int;
    fn ceph_ll_fallocate(M, *mut Fh, c_int, i64, i64) -> c_int;
    fn ceph_ll_close(M, *mut Fh) -> c_int;
    fn ceph_ll_create(M, *mut Inode, *const c_char, libc::mode_t, c_int, *mut *mut Inode, *mut *mut Fh, *mut Statx, c_uint, c_uint, P) -> c_int;
    fn ceph_ll_mknod(M, *mut Inode, *const c_char, libc::mode_t, libc::dev_t, *mut *mut Inode, *mut Statx, c_uint, c_uint, P) -> c_int;
    fn ceph_ll_mkdir(M, *mut Inode, *const c_char, libc::mode_t, *mut *mut Inode, *mut Statx, c_uint, c_uint, P) -> c_int;
    fn ceph_ll_symlink(M, *mut Inode, *const c_char, *const c_char, *mut *mut Inode, *mut Statx, c_uint, c_uint, P) -> c_int;
    fn ceph_ll_readlink(M, *mut Inode, *mut c_char, usize, P) -> c_int;
    fn ceph_ll_link(M, *mut Inode, *mut Inode, *const c_char, P) -> c_int;
    fn ceph_ll_unlink(M, *mut Inode, *const c_char, P) -> c_int;
    fn ceph_ll_rmdir(M, *mut Inode, *const c_char, P) -> c_int;
    fn ceph_ll_rename(M, *mut Inode, *const c_char, *mut Inode, *const c_char, P) -> c_int;
    fn ceph_ll_opendir(M, *mut Inode, *mut *mut DirResult, P) -> c_int;
    fn ceph_ll_releasedir(M, *mut DirResult) -> c_int;
    fn ceph_readdir_r(M, *mut DirResult, *mut libc::dirent64) -> c_int;
    fn ceph_readdirplus_r(M, *mut DirResult, *mut libc::dirent64, *mut Statx, c_uint, c_uint, *mut *mut Inode) -> c_int;
    fn ceph_ll_statfs(M, *mut Inode, *mut libc::statvfs64) -> c_int;
    fn ceph_ll_getxattr(M, *mut Inode, *const c_char, *mut c_void, usize, P) -> c_int;
    fn ceph_ll_setxattr(M, *mut Inode, *const c_char, *const c_void, usize, c_int, P) -> c_int;
    fn ceph_ll_listxattr(M, *mut Inode, *mut c_char, usize, *mut usize, P) -> c_int;
    fn ceph_ll_removexattr(M, *mut Inode, *const c_char, P) -> c_int;
    fn ceph_ll_getlk(M, *mut Fh, *mut libc::flock64, u64) -> c_int;
    fn ceph_ll_setlk(M, *mut Fh, *mut libc::flock64, u64, c_int) -> c_int;
    fn ceph_open(M, *const c_char, c_int, libc::mode_t) -> c_int;
    fn ceph_close(M, c_int) -> c_int;
    fn ceph_flock(M, c_int, c_int, u64) -> c_int;
}

/// librados's handles (`rados_t`, `rados_ioctx_t`), opaque.
pub type Rados = *mut c_void;
pub type IoCtx = *mut c_void;

/// `rados_watchcb2_t`: a notify on a watched object.
pub type WatchCb = extern "C" fn(
    arg: *mut c_void,
    notify_id: u64,
    handle: u64,
    notifier_id: u64,
    data: *mut c_void,
    data_len: usize,
);
/// `rados_watcherrcb_t`: the watch was lost (a notify may have been
/// missed).
pub type WatchErrCb = extern "C" fn(arg: *mut c_void, cookie: u64, err: c_int);

api! {
    RadosApi;
    fn rados_create(*mut Rados, *const c_char) -> c_int;
    fn rados_conf_read_file(Rados, *const c_char) -> c_int;
    fn rados_conf_set(Rados, *const c_char, *const c_char) -> c_int;
    fn rados_connect(Rados) -> c_int;
    fn rados_shutdown(Rados);
    fn rados_get_instance_id(Rados) -> u64;
    fn rados_ioctx_create(Rados, *const c_char, *mut IoCtx) -> c_int;
    fn rados_ioctx_destroy(IoCtx);
    fn rados_write_full(IoCtx, *const c_char, *const c_char, usize) -> c_int;
    fn rados_watch2(IoCtx, *const c_char, *mut u64, WatchCb, WatchErrCb, *mut c_void) -> c_int;
    fn rados_unwatch2(IoCtx, u64) -> c_int;
    fn rados_watch_flush(Rados) -> c_int;
    fn rados_notify2(IoCtx, *const c_char, *const c_char, c_int, u64, *mut *mut c_char, *mut usize) -> c_int;
    fn rados_notify_ack(IoCtx, *const c_char, u64, u64, *const c_char, c_int) -> c_int;
    fn rados_buffer_free(*mut c_char);
}

/// A `dlopen`ed library, closed never: libcephfs starts threads that
/// outlive any one mount, and unloading code they run would crash them.
struct Library(*mut c_void);

impl Library {
    fn open(name: &CStr) -> Result<Library, String> {
        // SAFETY: `name` is NUL-terminated; dlopen has no other
        // precondition.
        let h = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if h.is_null() {
            return Err(dl_error());
        }
        Ok(Library(h))
    }

    fn sym(&self, name: &str) -> Result<*mut c_void, String> {
        // SAFETY: `name` ends in NUL (the macro appends it) and the handle
        // is a live dlopen handle.
        let p = unsafe { libc::dlsym(self.0, name.as_ptr().cast()) };
        if p.is_null() {
            return Err(format!("{}: {}", name.trim_end_matches('\0'), dl_error()));
        }
        Ok(p)
    }
}

fn dl_error() -> String {
    // SAFETY: dlerror returns null or a NUL-terminated string that stays
    // valid until the next dl call on this thread; it is copied at once.
    let e = unsafe { libc::dlerror() };
    if e.is_null() {
        "unknown dlopen error".into()
    } else {
        // SAFETY: as above.
        unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
    }
}

// SAFETY: the handle is only used to look symbols up, which dlsym allows
// from any thread.
unsafe impl Send for Library {}
// SAFETY: as above.
unsafe impl Sync for Library {}

/// The library's file name (its SONAME), and an override for a build of
/// Ceph installed elsewhere.
pub const LIBRARY: &str = "libcephfs.so.2";
pub const LIBRARY_ENV: &str = "WALKFS_LIBCEPHFS";

static API: std::sync::OnceLock<Result<Api, String>> = std::sync::OnceLock::new();

/// libcephfs, loaded on first use (`WALKFS_LIBCEPHFS` names another
/// file); the error says what could not be loaded or resolved.
pub fn api() -> Result<&'static Api, &'static str> {
    API.get_or_init(|| {
        let name = std::env::var(LIBRARY_ENV).unwrap_or_else(|_| LIBRARY.into());
        let c = std::ffi::CString::new(name.clone()).map_err(|_| format!("{name}: bad name"))?;
        Api::resolve(Library::open(&c)?)
    })
    .as_ref()
    .map_err(|e| e.as_str())
}

/// librados (`WALKFS_LIBRADOS` names another file): the channel that
/// carries walkfs clients' change reports to each other.
pub const RADOS_LIBRARY: &str = "librados.so.2";
pub const RADOS_LIBRARY_ENV: &str = "WALKFS_LIBRADOS";

static RADOS: std::sync::OnceLock<Result<RadosApi, String>> = std::sync::OnceLock::new();

pub fn rados() -> Result<&'static RadosApi, &'static str> {
    RADOS
        .get_or_init(|| {
            let name = std::env::var(RADOS_LIBRARY_ENV).unwrap_or_else(|_| RADOS_LIBRARY.into());
            let c =
                std::ffi::CString::new(name.clone()).map_err(|_| format!("{name}: bad name"))?;
            RadosApi::resolve(Library::open(&c)?)
        })
        .as_ref()
        .map_err(|e| e.as_str())
}
