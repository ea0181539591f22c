//! `O_TMPFILE` through a local mount against the host directory itself:
//! an unnamed file that can be written, named later by `linkat` (not when
//! made with `O_EXCL`), and the errors Linux gives for the wrong access
//! mode, a file instead of a directory and `O_CREAT`. A served mount
//! refuses it with `EOPNOTSUPP` (9P has no unnamed files), as Linux does
//! for a file system without them.

mod common;

use std::path::Path;

use common::{dirs, Mount};

/// The calls, in `dir`: each result as a line.
const SCRIPT: &str = r#"
import ctypes, errno, os, sys
libc = ctypes.CDLL(None, use_errno=True)
d = sys.argv[1]
def plink(fd, dst):
    # linkat(AT_FDCWD, "/proc/self/fd/N", AT_FDCWD, dst, AT_SYMLINK_FOLLOW)
    if libc.linkat(-100, ("/proc/self/fd/%d" % fd).encode(), -100, dst.encode(), 0x400):
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
def tryit(label, f):
    try:
        print(label, f())
    except OSError as e:
        print(label, "errno", errno.errorcode[e.errno])
fd = os.open(d, os.O_TMPFILE | os.O_RDWR, 0o640)
os.write(fd, b"hello")
st = os.fstat(fd)
print("unnamed", st.st_nlink, st.st_size, oct(st.st_mode))
print("listing", sorted(os.listdir(d)))
plink(fd, os.path.join(d, "named"))
print("linked", os.fstat(fd).st_nlink, open(os.path.join(d, "named")).read())
os.pwrite(fd, b"J", 0)
os.close(fd)
print("listing", sorted(os.listdir(d)), open(os.path.join(d, "named")).read())
fd = os.open(d, os.O_TMPFILE | os.O_WRONLY | os.O_EXCL, 0o600)
tryit("excl link", lambda: plink(fd, os.path.join(d, "x")))
os.close(fd)
tryit("read-only", lambda: os.open(d, os.O_TMPFILE | os.O_RDONLY, 0o600))
tryit("on a file", lambda: os.open(os.path.join(d, "named"), os.O_TMPFILE | os.O_RDWR, 0o600))
tryit("with O_CREAT", lambda: os.open(d, os.O_TMPFILE | os.O_RDWR | os.O_CREAT, 0o600))
tryit("missing", lambda: os.open(os.path.join(d, "none"), os.O_TMPFILE | os.O_RDWR, 0o600))
print("listing", sorted(os.listdir(d)))
"#;

#[test]
fn tmpfiles_through_a_local_mount_match_the_host() {
    if !walkfs_testkit::need_fuse() || !walkfs_testkit::need_program("python3", "-V", "python3") {
        return;
    }
    let d = dirs();
    let want = common::on_host(&d, SCRIPT, "linked 1 hello");
    for opts in ["", "cache=loose"] {
        let sub = d.src.join(if opts.is_empty() { "a" } else { "b" });
        std::fs::create_dir(&sub).expect("mkdir");
        let _m = Mount::new(&d.src, &d.mnt, opts);
        let inside = d.mnt.join(sub.file_name().expect("name"));
        assert_eq!(
            common::python(SCRIPT, &[&inside]),
            want,
            "mount -o '{opts}'"
        );
        assert_eq!(
            std::fs::read(sub.join("named")).expect("on the host"),
            b"Jello",
            "the named file reached the host"
        );
    }
}

#[test]
fn a_served_mount_refuses_tmpfiles_as_linux_does_without_them() {
    if !walkfs_testkit::need_fuse() || !walkfs_testkit::need_program("python3", "-V", "python3") {
        return;
    }
    let d = dirs();
    let _server = common::serve(&d.src, &d.sock);
    let _m = Mount::new(Path::new(&format!("unix:{}", d.sock.display())), &d.mnt, "");
    let got = common::python(
        "import os, sys\ntry:\n    os.open(sys.argv[1], os.O_TMPFILE | os.O_RDWR, 0o600)\n    print('opened')\nexcept OSError as e:\n    print(e.errno)\n",
        &[&d.mnt],
    );
    assert_eq!(got.trim(), libc::EOPNOTSUPP.to_string());
}
