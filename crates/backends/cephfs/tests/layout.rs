//! Every structure that crosses the boundary to libcephfs, against the C
//! headers (libcephfs-dev): a C program built with them prints each
//! size and field offset, and the Rust definitions must give the same.
//! Without the headers the test skips with a message (under CI it fails:
//! scripts/ceph-up.sh installs them).

use std::mem::{offset_of, size_of};
use std::process::Command;

use walkfs_cephfs::ffi::{CallbackArgs, InodeNo, Statx, VInodeNo};

const HEADER: &str = "/usr/include/cephfs/libcephfs.h";

const PROGRAM: &str = r#"
#include <stddef.h>
#include <stdio.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/statvfs.h>
#include <cephfs/libcephfs.h>
#define S(t) printf("%s %zu\n", #t, sizeof(t));
#define O(t, f) printf("%s.%s %zu\n", #t, #f, offsetof(t, f));
int main(void) {
    S(struct ceph_statx)
    O(struct ceph_statx, stx_mask) O(struct ceph_statx, stx_blksize) O(struct ceph_statx, stx_nlink)
    O(struct ceph_statx, stx_uid) O(struct ceph_statx, stx_gid) O(struct ceph_statx, stx_mode)
    O(struct ceph_statx, stx_ino) O(struct ceph_statx, stx_size) O(struct ceph_statx, stx_blocks)
    O(struct ceph_statx, stx_dev) O(struct ceph_statx, stx_rdev) O(struct ceph_statx, stx_atime)
    O(struct ceph_statx, stx_ctime) O(struct ceph_statx, stx_mtime) O(struct ceph_statx, stx_btime)
    O(struct ceph_statx, stx_version)
    S(vinodeno_t) O(vinodeno_t, ino) O(vinodeno_t, snapid)
    S(inodeno_t) O(inodeno_t, val)
    S(struct ceph_client_callback_args)
    O(struct ceph_client_callback_args, handle) O(struct ceph_client_callback_args, ino_cb)
    O(struct ceph_client_callback_args, dentry_cb) O(struct ceph_client_callback_args, switch_intr_cb)
    O(struct ceph_client_callback_args, remount_cb) O(struct ceph_client_callback_args, umask_cb)
    O(struct ceph_client_callback_args, ino_release_cb)
    S(struct dirent) O(struct dirent, d_ino) O(struct dirent, d_off) O(struct dirent, d_reclen)
    O(struct dirent, d_type) O(struct dirent, d_name)
    S(struct flock) O(struct flock, l_type) O(struct flock, l_whence) O(struct flock, l_start)
    O(struct flock, l_len) O(struct flock, l_pid)
    S(struct statvfs) O(struct statvfs, f_bsize) O(struct statvfs, f_frsize) O(struct statvfs, f_blocks)
    O(struct statvfs, f_bfree) O(struct statvfs, f_bavail) O(struct statvfs, f_files)
    O(struct statvfs, f_ffree) O(struct statvfs, f_namemax)
    S(off_t) S(dev_t) S(mode_t) S(struct timespec)
    printf("CEPH_NOSNAP %llu\n", (unsigned long long)CEPH_NOSNAP);
    printf("CEPH_STATX_BASIC_STATS %u\n", CEPH_STATX_BASIC_STATS);
    printf("CEPH_STATX_BTIME %u\n", CEPH_STATX_BTIME);
    printf("CEPH_SETATTR_SIZE %d\n", CEPH_SETATTR_SIZE);
    printf("CEPH_SETATTR_CTIME %d\n", CEPH_SETATTR_CTIME);
    printf("AT_STATX_DONT_SYNC %d\n", AT_STATX_DONT_SYNC);
    return 0;
}
"#;

/// The same lines from the Rust definitions.
fn rust_side() -> String {
    use walkfs_cephfs::ffi as f;
    macro_rules! o {
        ($c:literal, $t:ty, $($f:ident),*) => {{
            let mut out = String::new();
            $( out.push_str(&format!("{}.{} {}\n", $c, stringify!($f), offset_of!($t, $f))); )*
            out
        }};
    }
    let mut all = format!("struct ceph_statx {}\n", size_of::<Statx>());
    all += &o!(
        "struct ceph_statx",
        Statx,
        stx_mask,
        stx_blksize,
        stx_nlink,
        stx_uid,
        stx_gid,
        stx_mode,
        stx_ino,
        stx_size,
        stx_blocks,
        stx_dev,
        stx_rdev,
        stx_atime,
        stx_ctime,
        stx_mtime,
        stx_btime,
        stx_version
    );
    all += &format!("vinodeno_t {}\n", size_of::<VInodeNo>());
    all += &o!("vinodeno_t", VInodeNo, ino, snapid);
    all += &format!("inodeno_t {}\n", size_of::<InodeNo>());
    all += &o!("inodeno_t", InodeNo, val);
    all += &format!(
        "struct ceph_client_callback_args {}\n",
        size_of::<CallbackArgs>()
    );
    all += &o!(
        "struct ceph_client_callback_args",
        CallbackArgs,
        handle,
        ino_cb,
        dentry_cb,
        switch_intr_cb,
        remount_cb,
        umask_cb,
        ino_release_cb
    );
    all += &format!("struct dirent {}\n", size_of::<libc::dirent64>());
    all += &o!(
        "struct dirent",
        libc::dirent64,
        d_ino,
        d_off,
        d_reclen,
        d_type,
        d_name
    );
    all += &format!("struct flock {}\n", size_of::<libc::flock64>());
    all += &o!(
        "struct flock",
        libc::flock64,
        l_type,
        l_whence,
        l_start,
        l_len,
        l_pid
    );
    all += &format!("struct statvfs {}\n", size_of::<libc::statvfs64>());
    all += &o!(
        "struct statvfs",
        libc::statvfs64,
        f_bsize,
        f_frsize,
        f_blocks,
        f_bfree,
        f_bavail,
        f_files,
        f_ffree,
        f_namemax
    );
    all += &format!("off_t {}\n", size_of::<libc::off64_t>());
    all += &format!("dev_t {}\n", size_of::<libc::dev_t>());
    all += &format!("mode_t {}\n", size_of::<libc::mode_t>());
    all += &format!("struct timespec {}\n", size_of::<libc::timespec>());
    all += &format!("CEPH_NOSNAP {}\n", f::NOSNAP);
    all += &format!("CEPH_STATX_BASIC_STATS {}\n", f::STATX_BASIC_STATS);
    all += &format!("CEPH_STATX_BTIME {}\n", f::STATX_BTIME);
    all += &format!("CEPH_SETATTR_SIZE {}\n", f::SETATTR_SIZE);
    all += &format!("CEPH_SETATTR_CTIME {}\n", f::SETATTR_CTIME);
    all += &format!("AT_STATX_DONT_SYNC {}\n", f::AT_STATX_DONT_SYNC);
    all
}

#[test]
fn every_structure_passed_to_libcephfs_matches_the_c_headers() {
    if !std::path::Path::new(HEADER).exists() {
        walkfs_testkit::skip(&format!(
            "{HEADER} is missing (Debian package libcephfs-dev)"
        ));
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let (src, exe) = (dir.path().join("layout.c"), dir.path().join("layout"));
    std::fs::write(&src, PROGRAM).expect("write");
    let cc = Command::new("cc")
        .args(["-D_FILE_OFFSET_BITS=64", "-D_GNU_SOURCE", "-o"])
        .arg(&exe)
        .arg(&src)
        .output()
        .expect("run cc");
    assert!(
        cc.status.success(),
        "cc: {}",
        String::from_utf8_lossy(&cc.stderr)
    );
    let out = Command::new(&exe).output().expect("run the layout program");
    let c = String::from_utf8_lossy(&out.stdout).into_owned();
    let r = rust_side();
    for (cl, rl) in c.lines().zip(r.lines()) {
        assert_eq!(cl, rl, "C (left) and Rust (right) disagree");
    }
    assert_eq!(c.lines().count(), r.lines().count(), "C:\n{c}\nRust:\n{r}");
}
