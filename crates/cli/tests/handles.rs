//! File handles through a local mount (`name_to_handle_at`,
//! `open_by_handle_at`), against the host directory itself: after the
//! kernel forgot every inode (`drop_caches`), a handle of a file, of a
//! directory and of a renamed file opens the same file, and a handle of
//! a removed file is stale, on both. A handle taken before an unmount
//! opens after the next mount of the same export; with `noexport` it is
//! stale once forgotten. Needs root (`CAP_DAC_READ_SEARCH`, drop_caches).

mod common;

use std::ffi::CString;
use std::fs::File;
use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use common::{dirs, Mount};

const MAX: usize = 128;

#[repr(C)]
struct Handle {
    bytes: u32,
    kind: i32,
    data: [u8; MAX],
}

/// The handle of `path`.
fn handle_of(path: &Path) -> Handle {
    let c = CString::new(path.as_os_str().as_bytes()).expect("path");
    let mut h = Handle {
        bytes: MAX as u32,
        kind: 0,
        data: [0; MAX],
    };
    let mut mount_id = 0;
    // SAFETY: `h` has room for MAX bytes, as `bytes` says; `c` is a C path.
    let r = unsafe {
        libc::name_to_handle_at(
            libc::AT_FDCWD,
            c.as_ptr(),
            (&mut h as *mut Handle).cast(),
            &mut mount_id,
            0,
        )
    };
    assert_eq!(
        r,
        0,
        "name_to_handle_at {}: {}",
        path.display(),
        std::io::Error::last_os_error()
    );
    h
}

/// Open handle `h` on the file system of `root`: the file's bytes (a
/// directory: "dir"), or the errno.
fn open_handle(root: &Path, h: &mut Handle) -> Result<String, i32> {
    let m = File::open(root).expect("open root");
    // SAFETY: `h` came from name_to_handle_at; the kernel only reads it.
    let fd = unsafe {
        libc::open_by_handle_at(
            m.as_raw_fd(),
            (h as *mut Handle).cast(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0));
    }
    // SAFETY: a new descriptor, ours alone.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut f = File::from(fd);
    if f.metadata().expect("fstat").is_dir() {
        return Ok("dir".into());
    }
    let mut s = String::new();
    f.read_to_string(&mut s).expect("read");
    Ok(s)
}

/// Make every cached inode go (FUSE's are forgotten).
fn drop_caches() {
    std::fs::write("/proc/sys/vm/drop_caches", "3").expect("drop_caches (root needed)");
}

/// Handles of a file, a directory, a file to be renamed and one to be
/// removed in `root`; then the rename and the removal, the caches
/// dropped, and what each handle opens.
fn script(root: &Path) -> Vec<String> {
    std::fs::create_dir(root.join("d")).expect("mkdir");
    std::fs::write(root.join("f"), "f data").expect("write");
    std::fs::write(root.join("d/g"), "g data").expect("write");
    std::fs::write(root.join("r"), "r data").expect("write");
    std::fs::write(root.join("d/linked"), "linked data").expect("write");
    let mut hs: Vec<(&str, Handle)> = ["f", "d", "d/g", "r", "d/linked"]
        .iter()
        .map(|n| (*n, handle_of(&root.join(n))))
        .collect();
    std::fs::rename(root.join("d/g"), root.join("g2")).expect("rename");
    std::fs::remove_file(root.join("r")).expect("unlink");
    std::fs::hard_link(root.join("d/linked"), root.join("other")).expect("link");
    std::fs::remove_file(root.join("d/linked")).expect("unlink");
    drop_caches();
    hs.iter_mut()
        .map(|(n, h)| format!("{n}: {:?}", open_handle(root, h)))
        .collect()
}

#[test]
fn forgotten_files_open_by_handle_as_on_the_host() {
    let t = dirs();
    let host = t.t.path().join("host");
    std::fs::create_dir(&host).expect("mkdir");
    let want = script(&host);
    assert!(
        want.iter().any(|l| l.contains("Err(116)")) && want.iter().any(|l| l.contains("g data")),
        "the host's own answers: {want:?}"
    );
    let _m = Mount::new(&t.src, &t.mnt, "");
    assert_eq!(script(&t.mnt), want);
}

#[test]
fn handles_outlive_a_remount_and_noexport_turns_them_off() {
    let t = dirs();
    let maps = t.t.path().join("maps");
    let env = [("WALKFS_HANDLE_MAPS", maps.to_str().expect("utf-8"))];
    std::fs::create_dir(t.src.join("d")).expect("mkdir");
    std::fs::write(t.src.join("d/f"), "kept").expect("write");
    let (mut hf, mut hd) = {
        let _m = Mount::with_env(&t.src, &t.mnt, "", &[], &env);
        (handle_of(&t.mnt.join("d/f")), handle_of(&t.mnt.join("d")))
    };
    {
        let _m = Mount::with_env(&t.src, &t.mnt, "", &[], &env);
        drop_caches();
        assert_eq!(open_handle(&t.mnt, &mut hf), Ok("kept".into()));
        assert_eq!(open_handle(&t.mnt, &mut hd), Ok("dir".into()));
        // The directory found by its handle is connected: names under
        // it and its parent work.
        assert_eq!(
            std::fs::read_to_string(t.mnt.join("d/f")).expect("read"),
            "kept"
        );
    }
    let _m = Mount::with_env(&t.src, &t.mnt, "noexport", &[], &env);
    let mut h = handle_of(&t.mnt.join("d/f"));
    drop_caches();
    assert_eq!(open_handle(&t.mnt, &mut h), Err(libc::ESTALE));
}
