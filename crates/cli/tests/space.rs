//! fallocate in its modes and SEEK_DATA/SEEK_HOLE through a local mount
//! and through a mount of `walkfs serve` (the 9P space extension), against
//! the host directory itself: the same calls give the same results,
//! sizes, holes and errnos.

mod common;

use std::path::Path;

use common::{dirs, Mount};

/// The calls, in `dir`: each result as a line.
const SCRIPT: &str = r#"
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]
KEEP, PUNCH, COLLAPSE, ZERO, INSERT = 1, 2, 8, 16, 32
d = sys.argv[1]
fd = os.open(os.path.join(d, "f"), os.O_RDWR | os.O_CREAT, 0o644)
def fa(mode, off, ln):
    r = libc.fallocate(fd, mode, off, ln)
    e = ctypes.get_errno() if r else 0
    print("fallocate", mode, off, ln, "->", e, os.fstat(fd).st_size)
def seek(off, whence):
    try:
        print("seek", off, whence, "->", os.lseek(fd, off, whence))
    except OSError as e:
        print("seek", off, whence, "-> errno", e.errno)
fa(0, 0, 1 << 20)
fa(KEEP, 1 << 20, 1 << 20)
os.pwrite(fd, b"x" * 8192, 0)
fa(PUNCH | KEEP, 65536, 65536)
fa(PUNCH, 0, 4096)
fa(ZERO, 4096, 4096)
fa(PUNCH | ZERO, 0, 4096)
fa(0, 0, 0)
fa(0, -1, 10)
fa(0x400, 0, 10)
for off in (0, 8192, 65536, 65536 + 4096, 131072, (1 << 20) - 1, 1 << 20, 2 << 20):
    seek(off, os.SEEK_DATA)
    seek(off, os.SEEK_HOLE)
ro = os.open(os.path.join(d, "f"), os.O_RDONLY)
r = libc.fallocate(ro, 0, 0, 10)
print("fallocate on a read-only fd ->", ctypes.get_errno() if r else 0)
"#;

#[test]
fn fallocate_and_holes_through_local_and_served_mounts_match_the_host() {
    if !walkfs_testkit::need_fuse() || !walkfs_testkit::need_program("python3", "-V", "python3") {
        return;
    }
    let d = dirs();
    let want = common::on_host(&d, SCRIPT, "fallocate 3 65536 65536 -> 0");
    {
        let _m = Mount::new(&d.src, &d.mnt, "");
        assert_eq!(
            common::python(SCRIPT, &[&d.mnt]),
            want,
            "through a local mount"
        );
    }
    std::fs::remove_file(d.src.join("f")).expect("rm");
    let _server = common::serve(&d.src, &d.sock);
    let _m = Mount::new(Path::new(&format!("unix:{}", d.sock.display())), &d.mnt, "");
    assert_eq!(
        common::python(SCRIPT, &[&d.mnt]),
        want,
        "through a served mount"
    );
}
