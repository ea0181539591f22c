//! Issue 6's confinement attacks through a real FUSE mount (`walkfs
//! mount` of a local directory: FUSE -> vfs -> 9P -> server -> hostfs).
//! The raw-9P versions of the same attacks are in tests/p9interop.
//!
//! Through a mount the kernel resolves `..` and follows symlinks in the
//! caller's own namespace, as on any mounted file system (NFS, 9p): a
//! symlink to `/etc` on the mount leads to the caller's `/etc`, which the
//! caller could open anyway. What must hold is that the server never
//! reads, writes, creates or opens anything outside the export on a
//! caller's behalf, and never opens a special file.

use std::os::unix::fs::{symlink, FileTypeExt};
use std::path::Path;
use std::time::{Duration, Instant};

mod common;
use common::*;

fn c(p: &Path) -> std::ffi::CString {
    std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).expect("path")
}

#[test]
fn special_files_made_on_the_host_are_never_opened_by_the_server() {
    let t = tempfile::tempdir().expect("tempdir");
    let (src, mnt) = (t.path().join("src"), t.path().join("mnt"));
    std::fs::create_dir(&src).expect("mkdir");
    std::fs::create_dir(&mnt).expect("mkdir");
    std::fs::write(src.join("f"), "plain").expect("write");
    // SAFETY: valid C strings; plain syscalls.
    unsafe {
        assert_eq!(libc::mkfifo(c(&src.join("fifo")).as_ptr(), 0o666), 0);
        assert_eq!(
            libc::mknod(
                c(&src.join("null")).as_ptr(),
                libc::S_IFCHR | 0o666,
                libc::makedev(1, 3)
            ),
            0
        );
    }
    let _m = Mount::new(&src, &mnt, "cache=loose,negtimeout=-1");
    // They are seen for what they are.
    let ft = |n: &str| {
        std::fs::symlink_metadata(mnt.join(n))
            .expect("stat")
            .file_type()
    };
    assert!(ft("fifo").is_fifo());
    assert!(ft("null").is_char_device());
    // A device node on the mount does not open (nodev): nothing of the
    // host's device through the server.
    let e = std::fs::File::open(mnt.join("null")).expect_err("nodev");
    assert_eq!(e.raw_os_error(), Some(libc::EACCES), "{e}");
    // A fifo is the caller's kernel's own object: opening it without a
    // writer (non-blocking) never reaches the server, which would hang.
    let t0 = Instant::now();
    // SAFETY: a valid C string; the descriptor is closed at once.
    let fd = unsafe {
        libc::open(
            c(&mnt.join("fifo")).as_ptr(),
            libc::O_RDONLY | libc::O_NONBLOCK,
        )
    };
    assert!(fd >= 0);
    // SAFETY: our descriptor.
    unsafe { libc::close(fd) };
    assert!(t0.elapsed() < Duration::from_secs(5));
    // The mount goes on answering.
    assert_eq!(
        std::fs::read_to_string(mnt.join("f")).expect("read"),
        "plain"
    );
}

#[test]
fn what_a_caller_makes_through_the_mount_stays_in_the_export() {
    let t = tempfile::tempdir().expect("tempdir");
    let (src, mnt, out) = (
        t.path().join("src"),
        t.path().join("mnt"),
        t.path().join("outside"),
    );
    for d in [&src, &mnt, &out] {
        std::fs::create_dir(d).expect("mkdir");
    }
    std::fs::write(out.join("f"), "OUTSIDE").expect("write");
    let _m = Mount::new(&src, &mnt, "cache=loose,negtimeout=-1");
    // Symlinks made through the mount are bodies the server stores, not
    // paths it follows.
    symlink(&out, mnt.join("abs")).expect("symlink");
    symlink("../outside", mnt.join("rel")).expect("symlink");
    assert_eq!(std::fs::read_link(src.join("abs")).expect("readlink"), out);
    assert_eq!(
        std::fs::read_link(src.join("rel")).expect("readlink"),
        Path::new("../outside")
    );
    // A hard link of a symlink is another name of the link, in the export.
    std::fs::hard_link(mnt.join("abs"), mnt.join("hard")).expect("link");
    assert_eq!(std::fs::read_link(src.join("hard")).expect("readlink"), out);
    // Creating "through" the link resolves in the caller's namespace: the
    // target directory is another file system, not the server's business.
    std::fs::write(mnt.join("local"), "x").expect("write");
    let e = std::fs::rename(mnt.join("local"), mnt.join("abs/moved")).expect_err("EXDEV");
    assert_eq!(e.raw_os_error(), Some(libc::EXDEV));
    // Names the kernel would never pass on: `.`/`..` as new names.
    assert!(std::fs::create_dir(mnt.join("..")).is_err());
    assert!(std::fs::create_dir(mnt.join(".")).is_err());
    // The outside is as it was.
    let names: Vec<_> = std::fs::read_dir(&out)
        .expect("ls")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert_eq!(names, ["f"]);
    assert_eq!(std::fs::read(out.join("f")).expect("read"), b"OUTSIDE");
    assert!(!t.path().join("moved").exists());
}

/// `walkfs serve --sandbox on`: the process's root is the export (its
/// `/` holds the export's files and nothing else), it has a mount
/// namespace of its own, no supplementary groups, only the file-owner
/// capabilities, no new privileges; and it still serves.
#[test]
fn the_sandboxed_server_sees_only_the_export() {
    let t = tempfile::tempdir().expect("tempdir");
    let (src, sock) = (t.path().join("src"), t.path().join("s.sock"));
    std::fs::create_dir(&src).expect("mkdir");
    std::fs::write(src.join("hello"), "from the export").expect("write");
    let server = Kill(
        walkfs()
            .arg("serve")
            .arg(&src)
            .arg("--listen")
            .arg(format!("unix:{}", sock.display()))
            .args(["--sandbox", "on"])
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("serve"),
    );
    let pid = server.0.id();
    // Confinement is a sequence (namespace, groups, capabilities,
    // no-new-privs, seccomp last): wait for its last step before reading
    // the result, or a loaded machine shows the state in between.
    wait_until("the server listens and confines itself", || {
        std::os::unix::net::UnixStream::connect(&sock).is_ok()
            && std::fs::read_link(format!("/proc/{pid}/ns/mnt")).ok()
                != std::fs::read_link("/proc/self/ns/mnt").ok()
            && std::fs::read_to_string(format!("/proc/{pid}/status")).is_ok_and(|s| {
                s.lines()
                    .any(|l| l.split_whitespace().eq(["Seccomp:", "2"]))
            })
    });
    let root = format!("/proc/{pid}/root");
    let mut names: Vec<_> = std::fs::read_dir(&root)
        .expect("its root")
        .map(|e| e.expect("entry").file_name())
        .collect();
    names.sort();
    assert_eq!(names, ["hello"], "the server's / is the export");
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    let field = |k: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(k))
            .map(|v| v.trim().to_string())
            .unwrap_or_default()
    };
    // CHOWN, DAC_OVERRIDE, DAC_READ_SEARCH, FOWNER, FSETID, MKNOD.
    assert_eq!(field("CapEff:"), "000000000800001f");
    assert_eq!(field("CapBnd:"), "000000000800001f");
    assert_eq!(field("Groups:"), "");
    assert_eq!(field("NoNewPrivs:"), "1");
    assert_eq!(field("Seccomp:"), "2", "filtered system calls");
    // Every thread, not only the first: capabilities are per thread.
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).expect("tasks") {
        let p = task.expect("task").path().join("status");
        // A thread that ended between the listing and now has no status
        // left to check (the server starts and ends short-lived ones).
        let st = match std::fs::read_to_string(&p) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            r => r.expect("task status"),
        };
        for want in ["CapEff:\t000000000800001f", "Seccomp:\t2", "NoNewPrivs:\t1"] {
            assert!(st.contains(want), "{}: no {want:?}", p.display());
        }
    }
    let o = run(walkfs().args(["9p", &format!("unix:{}", sock.display()), "cat", "/hello"]));
    assert_eq!(o.stdout, b"from the export");
}
