//! Extended attributes and POSIX ACLs over 9P2000.L: a FUSE mount of a
//! `walkfs serve` (mount -> vfs -> 9P client -> socket -> server -> vfs
//! -> the directory), and the same through `--via-9p`, against the host
//! directory itself: the same calls give the same values and errnos
//! (an empty value and one larger than a message among them); what is
//! set on one side is on the other; an ACL set through the mount is the
//! host file's.
//!
//! The directories are on tmpfs where there is one: ext4 keeps a file's
//! attributes in one block, too small for the 10,000-byte value.

mod common;

use std::path::Path;
use std::process::Command;

use common::xattr::{get, list, remove, set};
use common::{dirs, dirs_of, run, serve, Dirs, Mount};

/// [`dirs`] on tmpfs (`/dev/shm`) when there is one.
fn shm_dirs() -> Dirs {
    match tempfile::tempdir_in("/dev/shm") {
        Ok(t) => dirs_of(t),
        Err(_) => dirs(),
    }
}

/// 10,000 bytes, not all alike: larger than a small message, so read
/// and written in more than one piece where msize is small.
fn big() -> Vec<u8> {
    (0..10_000u32).map(|i| (i * 7 % 251) as u8).collect()
}

/// The same sequence of calls in `root` (a host directory, or a mount
/// of its twin): every result, in order.
fn script(root: &Path) -> Vec<String> {
    let f = root.join("f");
    let d = root.join("d");
    let l = root.join("l");
    std::fs::write(&f, b"data").expect("write");
    std::fs::create_dir(&d).expect("mkdir");
    std::os::unix::fs::symlink("f", &l).expect("symlink");
    let mut out = Vec::new();
    let mut note = |what: &str, r: String| out.push(format!("{what}: {r}"));
    note("set user.a", set(&f, "user.a", b"1", 0).to_string());
    note("set user.empty", set(&f, "user.empty", b"", 0).to_string());
    note("set user.big", set(&f, "user.big", &big(), 0).to_string());
    let x = libc::XATTR_CREATE;
    note("create again", set(&f, "user.a", b"2", x).to_string());
    note(
        "create empty again",
        set(&f, "user.empty", b"", x).to_string(),
    );
    let r = libc::XATTR_REPLACE;
    note("replace missing", set(&f, "user.b", b"2", r).to_string());
    note(
        "replace missing, empty",
        set(&f, "user.b", b"", r).to_string(),
    );
    note("replace", set(&f, "user.a", b"3", r).to_string());
    note("get user.a", format!("{:?}", get(&f, "user.a")));
    note("get user.empty", format!("{:?}", get(&f, "user.empty")));
    note("big whole", (get(&f, "user.big") == Ok(big())).to_string());
    note("get missing", format!("{:?}", get(&f, "user.none")));
    note("list", format!("{:?}", list(&f)));
    note("replace with empty", set(&f, "user.a", b"", r).to_string());
    note("get emptied", format!("{:?}", get(&f, "user.a")));
    note("bad namespace", set(&f, "bogus.x", b"1", 0).to_string());
    note("empty name", set(&f, "", b"1", 0).to_string());
    note("user on symlink", set(&l, "user.x", b"1", 0).to_string());
    note("get on symlink", format!("{:?}", get(&l, "user.x")));
    note("dir user", set(&d, "user.d", b"dir", 0).to_string());
    note("dir list", format!("{:?}", list(&d)));
    note("remove", remove(&f, "user.a").to_string());
    note("remove again", remove(&f, "user.a").to_string());
    note("remove empty", remove(&f, "user.empty").to_string());
    note("list after", format!("{:?}", list(&f)));
    out
}

/// The script on the host and through the mount `mount` makes of `src`
/// on `mnt`, compared; then what each side sets, seen on the other.
fn same_as_the_host(t: &Dirs, mount: impl FnOnce() -> Mount) -> Mount {
    let host = t.t.path().join("host");
    std::fs::create_dir(&host).expect("mkdir");
    let want = script(&host);
    // The script's answers are Linux's own, not guesses.
    for must in [
        "set user.big: 0",
        "big whole: true",
        "create again: 17",
        "replace missing: 61",
        "remove again: 61",
    ] {
        assert!(want.contains(&must.to_string()), "{must}: {want:?}");
    }
    let m = mount();
    let got = script(&t.mnt);
    assert_eq!(got, want);
    // What the mount set is on the host file ...
    let (hf, mf) = (t.src.join("f"), t.mnt.join("f"));
    assert!(
        get(&hf, "user.big") == Ok(big()),
        "the big value on the host"
    );
    assert_eq!(get(&t.src.join("d"), "user.d"), Ok(b"dir".to_vec()));
    assert_eq!(get(&hf, "user.a"), Err(libc::ENODATA), "removed there");
    // ... and what the host sets is seen through the mount.
    assert_eq!(set(&hf, "user.host", b"h", 0), 0);
    assert_eq!(set(&hf, "user.hempty", b"", 0), 0);
    let big2: Vec<u8> = big().into_iter().rev().collect();
    assert_eq!(set(&hf, "user.big", &big2, 0), 0);
    assert_eq!(get(&mf, "user.host"), Ok(b"h".to_vec()));
    assert_eq!(get(&mf, "user.hempty"), Ok(Vec::new()));
    assert!(get(&mf, "user.big") == Ok(big2), "the host's new big value");
    assert_eq!(list(&mf), list(&hf));
    assert_eq!(remove(&hf, "user.host"), 0);
    assert_eq!(get(&mf, "user.host"), Err(libc::ENODATA));
    m
}

#[test]
fn a_served_mount_gives_the_host_s_answers() {
    if !walkfs_testkit::need_fuse() {
        return;
    }
    let t = shm_dirs();
    let _server = serve(&t.src, &t.sock);
    let addr = format!("unix:{}", t.sock.display());
    // The smallest message: the big value goes in three reads and writes.
    let _m = same_as_the_host(&t, || Mount::new(Path::new(&addr), &t.mnt, "msize=4096"));
}

#[test]
fn a_mount_through_the_in_process_server_gives_the_host_s_answers() {
    if !walkfs_testkit::need_fuse() {
        return;
    }
    let t = shm_dirs();
    let _m = same_as_the_host(&t, || Mount::via_9p(&t.src, &t.mnt, ""));
    // Root's own namespace, where the server keeps root's capabilities
    // (in-process: no sandbox drops them).
    let (hf, mf) = (t.src.join("f"), t.mnt.join("f"));
    assert_eq!(set(&mf, "trusted.t", b"t", 0), 0);
    assert_eq!(get(&hf, "trusted.t"), Ok(b"t".to_vec()));
    assert_eq!(list(&mf), list(&hf));
}

fn sh(cmd: &str, dir: &Path) -> String {
    let o = run(Command::new("sh").args(["-c", cmd]).current_dir(dir));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn an_acl_set_through_a_served_mount_is_the_host_file_s() {
    if !walkfs_testkit::need_fuse() || !walkfs_testkit::need_program("setfacl", "--version", "acl")
    {
        return;
    }
    let t = shm_dirs();
    let _server = serve(&t.src, &t.sock);
    let addr = format!("unix:{}", t.sock.display());
    let _m = Mount::new(Path::new(&addr), &t.mnt, "");
    std::fs::write(t.mnt.join("f"), b"x").expect("write");
    sh("chmod 640 f && setfacl -m u:1000:rw f", &t.mnt);
    let on_host = sh("getfacl -p -n f", &t.src);
    assert!(on_host.contains("user:1000:rw-"), "{on_host}");
    assert!(on_host.contains("mask::rw-"), "{on_host}");
    assert_eq!(sh("getfacl -p -n f", &t.mnt), on_host, "the mount's view");
    // The mask is the mode's group bits, on both sides.
    let mode = |root: &Path| sh("stat -c %a f", root);
    assert_eq!(mode(&t.src).trim(), "660");
    assert_eq!(mode(&t.mnt), mode(&t.src));
    // A default ACL on a directory, and its removal.
    std::fs::create_dir(t.mnt.join("d")).expect("mkdir");
    sh("setfacl -d -m u:1000:rwx d", &t.mnt);
    let d = sh("getfacl -p -n d", &t.src);
    assert!(d.contains("default:user:1000:rwx"), "{d}");
    // A node made through the mount in a directory with a default ACL
    // inherits it, with no umask, as one made on the host does (the
    // client asks the directory's ACL before its first create there).
    let make = "mkdir -p @ && setfacl -d -m u::rwx,g::rwx,o::-,u:1000:rwx @ && umask 022 \
                && mkdir @/sub && touch @/new && getfacl -p -n @/sub @/new | sed 's|@/||'";
    let on_host = sh(&make.replace('@', "h"), &t.src);
    assert!(on_host.contains("group::rwx"), "{on_host}");
    assert_eq!(sh(&make.replace('@', "m"), &t.mnt), on_host);
    sh("setfacl -k d && setfacl -b f", &t.mnt);
    assert!(!sh("getfacl -p -n d f", &t.src).contains("1000"));
    assert_eq!(
        get(&t.src.join("f"), "system.posix_acl_access"),
        Err(libc::ENODATA)
    );
}
