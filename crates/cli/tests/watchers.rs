//! inotify watchers of a `cache=coherent` mount see other writers'
//! changes (docs/watchers.md): the same script of host-side changes runs
//! twice, once with the host directory itself watched by `inotifywait
//! -m -r`, once with a mount of it watched, and the two event lists must
//! be equal: kinds, names, and the pairing of moves.
//!
//! The script paces its steps (a watcher's queue merges a repeat of an
//! unread event, on the host and on the mount alike, at different times),
//! and makes each new directory's contents only after the directory is
//! watched (`inotifywait -r` races with them either way).

mod common;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const EVENTS: &str = "create,delete,modify,attrib,moved_from,moved_to";

struct Inotifywait {
    child: Child,
    lines: std::sync::mpsc::Receiver<String>,
}

impl Drop for Inotifywait {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn inotifywait(dir: &Path) -> Option<Inotifywait> {
    let mut child = Command::new("inotifywait")
        .args(["-m", "-r", "-q", "-e", EVENTS, "--format", "%w%f|%e"])
        .arg(dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let lines = common::lines(&mut child);
    // inotifywait has no "ready" line with -q: its watches are set up
    // well within this (the trees here are a few directories).
    std::thread::sleep(Duration::from_millis(500));
    Some(Inotifywait { child, lines })
}

/// Run the script of host changes in `d`, pacing each step.
fn script(d: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let step = || std::thread::sleep(Duration::from_millis(80));
    std::fs::write(d.join("a"), b"one").expect("create");
    step();
    std::fs::OpenOptions::new()
        .append(true)
        .open(d.join("a"))
        .and_then(|mut f| std::io::Write::write_all(&mut f, b"two"))
        .expect("append");
    step();
    std::fs::OpenOptions::new()
        .write(true)
        .open(d.join("a"))
        .and_then(|f| f.set_len(2))
        .expect("truncate");
    step();
    std::fs::set_permissions(d.join("a"), std::fs::Permissions::from_mode(0o600)).expect("chmod");
    step();
    std::fs::create_dir(d.join("d")).expect("mkdir");
    // Long enough for both watchers to add the new directory.
    std::thread::sleep(Duration::from_millis(500));
    std::fs::rename(d.join("a"), d.join("d/b")).expect("rename across");
    step();
    std::fs::rename(d.join("d/b"), d.join("d/c")).expect("rename within");
    step();
    std::os::unix::fs::symlink("c", d.join("d/l")).expect("symlink");
    step();
    std::fs::hard_link(d.join("d/c"), d.join("h")).expect("link");
    step();
    std::fs::remove_file(d.join("h")).expect("unlink");
    step();
    std::fs::remove_file(d.join("d/l")).expect("unlink");
    step();
    std::fs::remove_file(d.join("d/c")).expect("unlink");
    step();
    std::fs::remove_dir(d.join("d")).expect("rmdir");
    std::thread::sleep(Duration::from_millis(800));
}

/// The events `w` printed, with `root` taken off each path.
fn events(w: &Inotifywait, root: &Path) -> Vec<String> {
    let root = format!("{}/", root.display());
    let mut v = Vec::new();
    while let Ok(l) = w.lines.recv_timeout(Duration::from_millis(300)) {
        v.push(l.strip_prefix(&root).unwrap_or(&l).to_string());
    }
    v
}

/// The script on a host directory watched directly, then on another
/// one watched through the mount `mount` makes of it (given the
/// directory, the mount point and a scratch directory): equal lists.
fn differential(mount: impl FnOnce(&Path, &Path, &Path) -> Box<dyn std::any::Any>) {
    if !walkfs_testkit::need_program("inotifywait", "--help", "inotify-tools") {
        return;
    }
    let tmp = tempfile::tempdir().expect("tmp");
    let (a, b, mnt) = (
        tmp.path().join("a"),
        tmp.path().join("b"),
        tmp.path().join("mnt"),
    );
    for d in [&a, &b, &mnt] {
        std::fs::create_dir(d).expect("mkdir");
    }
    // On the host.
    let w = inotifywait(&a).expect("inotifywait");
    script(&a);
    let native = events(&w, &a);
    drop(w);
    // Through a mount of another directory, changed on the host.
    let _m = mount(&b, &mnt, tmp.path());
    let w = inotifywait(&mnt).expect("inotifywait");
    script(&b);
    let mounted = events(&w, &mnt);
    drop(w);
    eprintln!("host:  {native:?}\nmount: {mounted:?}");
    assert!(native.len() >= 14, "the host's own events: {native:?}");
    assert_eq!(
        mounted, native,
        "events on the mount differ from the host's"
    );
}

#[test]
fn watchers_of_a_coherent_mount_see_host_changes_as_on_the_host() {
    differential(|b, mnt, _| Box::new(common::Mount::new(b, mnt, "cache=coherent,negtimeout=-1")));
}

#[test]
fn watchers_of_a_mount_of_a_server_see_its_host_changes_as_on_the_host() {
    // The server's notifications (protocol version 2) carry what
    // happened; the mount replays them.
    differential(|b, mnt, tmp| {
        let sock = tmp.join("sock");
        let server = common::serve(b, &sock);
        let src = format!("unix:{}", sock.display());
        let m = common::Mount::new(Path::new(&src), mnt, "cache=coherent,negtimeout=-1");
        // Dropped in order: the mount, then its server.
        Box::new((m, server))
    });
}

#[test]
fn changes_made_through_the_mount_are_seen_once() {
    if !walkfs_testkit::need_program("inotifywait", "--help", "inotify-tools") {
        return;
    }
    let tmp = tempfile::tempdir().expect("tmp");
    let (src, mnt) = (tmp.path().join("src"), tmp.path().join("mnt"));
    for d in [&src, &mnt] {
        std::fs::create_dir(d).expect("mkdir");
    }
    let _m = common::Mount::new(&src, &mnt, "cache=coherent,negtimeout=-1");
    seen_once(&mnt);
}

/// The same through a mount of a server: the server leaves a client's
/// own changes out of its reports, so the mount replays every report it
/// gets, and none of its own comes back.
#[test]
fn changes_made_through_a_served_mount_are_seen_once() {
    if !walkfs_testkit::need_program("inotifywait", "--help", "inotify-tools") {
        return;
    }
    let tmp = tempfile::tempdir().expect("tmp");
    let (src, mnt, sock) = (
        tmp.path().join("src"),
        tmp.path().join("mnt"),
        tmp.path().join("s.sock"),
    );
    for d in [&src, &mnt] {
        std::fs::create_dir(d).expect("mkdir");
    }
    let _server = common::serve(&src, &sock);
    let _m = common::Mount::new(
        std::path::Path::new(&format!("unix:{}", sock.display())),
        &mnt,
        "negtimeout=-1",
    );
    seen_once(&mnt);
}

/// Changes made through `mnt`: each seen once by its watchers.
fn seen_once(mnt: &std::path::Path) {
    let w = inotifywait(mnt).expect("inotifywait");
    std::fs::write(mnt.join("f"), b"x").expect("write");
    std::fs::create_dir(mnt.join("d")).expect("mkdir");
    std::fs::rename(mnt.join("f"), mnt.join("g")).expect("rename");
    std::fs::remove_file(mnt.join("g")).expect("unlink");
    std::thread::sleep(Duration::from_millis(800));
    let got = events(&w, mnt);
    assert_eq!(
        got,
        [
            "f|CREATE",
            "f|MODIFY",
            "d|CREATE,ISDIR",
            "f|MOVED_FROM",
            "g|MOVED_TO",
            "g|DELETE"
        ],
        "each change once, from the kernel's own operation"
    );
}

/// A host edit right after the mount's own write of the same file is
/// another writer's change, not the echo of the mount's: without
/// passthrough (any guest kernel before 6.9, or `passthrough=0`) the
/// mount's write went through the daemon, and for two seconds every
/// report of the file's data was taken for its echo (a git fsmonitor in
/// a Debian 12 guest missed a host edit of a file just committed).
#[test]
fn a_host_edit_right_after_the_mounts_own_write_is_replayed() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (src, mnt) = (tmp.path().join("src"), tmp.path().join("mnt"));
    for d in [&src, &mnt] {
        std::fs::create_dir(d).expect("mkdir");
    }
    for opts in ["cache=coherent,passthrough=0", "cache=coherent"] {
        let _m = common::Mount::new(&src, &mnt, opts);
        std::fs::write(mnt.join("f"), b"through the mount\n").expect("write");
        std::thread::sleep(Duration::from_millis(300));
        let w = inotifywait(&mnt).expect("inotifywait");
        // Same size, so only the data says it changed.
        std::fs::write(src.join("f"), b"THROUGH THE HOST!\n").expect("host write");
        std::thread::sleep(Duration::from_millis(800));
        let got = events(&w, &mnt);
        assert!(
            got.iter().any(|e| e == "f|MODIFY"),
            "-o {opts}: the host's edit was taken for the mount's own: {got:?}"
        );
        assert_eq!(
            std::fs::read(mnt.join("f")).expect("read"),
            b"THROUGH THE HOST!\n"
        );
        drop(w);
    }
}
