//! `renameat2(RENAME_WHITEOUT)` through a local mount, against the host
//! directory itself: the old name becomes a whiteout (a character device
//! 0/0), the new name the file, and the refusals (with an exchange) are
//! the host's.

mod common;

use common::{dirs, Mount};

const SCRIPT: &str = r#"
import ctypes, os, stat, sys
libc = ctypes.CDLL(None, use_errno=True)
AT_FDCWD, NOREPLACE, EXCHANGE, WHITEOUT = -100, 1, 2, 4
d = sys.argv[1]
def rename(a, b, flags):
    r = libc.renameat2(AT_FDCWD, os.path.join(d, a).encode(), AT_FDCWD, os.path.join(d, b).encode(), flags)
    return ctypes.get_errno() if r else 0
def kind(n):
    try:
        st = os.lstat(os.path.join(d, n))
    except OSError as e:
        return "errno %d" % e.errno
    if stat.S_ISCHR(st.st_mode):
        return "chr %d:%d" % (os.major(st.st_rdev), os.minor(st.st_rdev))
    return "reg" if stat.S_ISREG(st.st_mode) else "other"
open(os.path.join(d, "a"), "w").write("a")
open(os.path.join(d, "c"), "w").write("c")
print("whiteout", rename("a", "b", WHITEOUT), kind("a"), kind("b"))
print("with exchange", rename("b", "c", WHITEOUT | EXCHANGE))
print("noreplace over a file", rename("b", "c", WHITEOUT | NOREPLACE), kind("b"), kind("c"))
print("over a file", rename("b", "c", WHITEOUT), kind("b"), kind("c"))
print("names", sorted(os.listdir(d)))
"#;

#[test]
fn a_whiteout_rename_through_a_mount_matches_the_host() {
    if !walkfs_testkit::need_fuse() || !walkfs_testkit::need_program("python3", "-V", "python3") {
        return;
    }
    let d = dirs();
    let want = common::on_host(&d, SCRIPT, "whiteout 0 chr 0:0 reg");
    let _m = Mount::new(&d.src, &d.mnt, "");
    assert_eq!(common::python(SCRIPT, &[&d.mnt]), want);
}
