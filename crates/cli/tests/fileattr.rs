//! `chattr`/`lsattr`'s calls (`FS_IOC_GETFLAGS`/`SETFLAGS`) through a
//! local mount, against the host directory itself: the flags are the
//! host file's, the append-only flag refuses a truncating open and lets
//! an appending one write, on both, with the same errnos.

mod common;

use std::process::Command;

use common::{dirs, Mount};

const SCRIPT: &str = r#"
import fcntl, os, struct, sys
GET, SET, APPEND, NOATIME = 0x80086601, 0x40086602, 0x20, 0x80
d = sys.argv[1]
p = os.path.join(d, "f")
with open(p, "w") as f: f.write("data\n")
def flags(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        return struct.unpack("i", fcntl.ioctl(fd, GET, b"\0" * 4))[0]
    finally:
        os.close(fd)
def setflags(path, v):
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.ioctl(fd, SET, struct.pack("i", v)); return "ok"
    except OSError as e:
        return e.errno
    finally:
        os.close(fd)
def try_open(path, how):
    try:
        fd = os.open(path, how); os.write(fd, b"more\n"); os.close(fd); return "ok"
    except OSError as e:
        return e.errno
base = flags(p)
print("set append", setflags(p, base | APPEND))
print("append set", flags(p) & APPEND != 0)
print("truncating open", try_open(p, os.O_WRONLY | os.O_TRUNC))
print("appending open", try_open(p, os.O_WRONLY | os.O_APPEND))
print("set noatime too", setflags(p, base | APPEND | NOATIME))
print("flags", (flags(p) & (APPEND | NOATIME)))
print("clear", setflags(p, base))
print("truncating open after", try_open(p, os.O_WRONLY | os.O_TRUNC))
print("dir flags read", isinstance(flags(d), int))
print("content", open(p).read().strip())
"#;

#[test]
fn inode_flags_through_a_mount_are_the_host_files_own() {
    if !walkfs_testkit::need_fuse() || !walkfs_testkit::need_program("python3", "-V", "python3") {
        return;
    }
    let d = dirs();
    let want = common::on_host(&d, SCRIPT, "truncating open 1\n");
    let _m = Mount::new(&d.src, &d.mnt, "");
    assert_eq!(common::python(SCRIPT, &[&d.mnt]), want);
    // Set through the mount, seen on the host.
    let o = Command::new("lsattr")
        .arg(d.src.join("f"))
        .output()
        .expect("lsattr");
    assert!(o.status.success());
}
