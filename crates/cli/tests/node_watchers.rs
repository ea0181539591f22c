//! Real watchers of node: `fs.watch` with `recursive: true`, and chokidar
//! (npm) in its default, non-polling mode. Each runs twice, once on a host
//! directory and once on a coherent mount of another, while the same
//! host-side script of changes runs in the watched one; the event lists
//! must be equal. chokidar is installed from npm into the test's target
//! directory (skipped, with a message, when node or npm are missing or
//! the registry cannot be reached).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

const WATCH_JS: &str = include_str!("node/watch.js");
const PACKAGE_JSON: &str = include_str!("node/package.json");

/// The watcher script, beside chokidar when `with_chokidar`.
fn setup(with_chokidar: bool) -> Option<PathBuf> {
    let Ok(v) = Command::new("node").arg("--version").output() else {
        walkfs_testkit::skip("node is not installed (Debian package nodejs)");
        return None;
    };
    // fs.watch is recursive on Linux from node 19.1 (v20.20.2).
    let v = String::from_utf8_lossy(&v.stdout);
    let mut parts = v.trim().trim_start_matches('v').split('.');
    let major: u32 = parts.next().and_then(|m| m.parse().ok()).unwrap_or(0);
    let minor: u32 = parts.next().and_then(|m| m.parse().ok()).unwrap_or(0);
    if !with_chokidar && (major, minor) < (19, 1) {
        walkfs_testkit::skip(&format!(
            "node {} has no recursive fs.watch on Linux (19.1 or later has)",
            v.trim()
        ));
        return None;
    }
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("node-watchers");
    std::fs::create_dir_all(&dir).expect("mkdir");
    std::fs::write(dir.join("watch.js"), WATCH_JS).expect("write watch.js");
    std::fs::write(dir.join("package.json"), PACKAGE_JSON).expect("write package.json");
    if with_chokidar && !dir.join("node_modules/chokidar").is_dir() {
        let ok = Command::new("npm")
            .args(["install", "--no-audit", "--no-fund", "--loglevel=error"])
            .current_dir(&dir)
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            walkfs_testkit::skip("npm could not install chokidar");
            return None;
        }
    }
    Some(dir)
}

/// The host-side changes, paced (a watcher's queue merges a repeat of
/// an unread event, on the host and on the mount alike, at different
/// times), new directories' contents made once they are watched.
fn script(d: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let step = || std::thread::sleep(Duration::from_millis(150));
    std::fs::write(d.join("a"), b"one").expect("create");
    step();
    std::fs::OpenOptions::new()
        .append(true)
        .open(d.join("a"))
        .and_then(|mut f| std::io::Write::write_all(&mut f, b"two"))
        .expect("append");
    step();
    std::fs::create_dir(d.join("d")).expect("mkdir");
    std::thread::sleep(Duration::from_millis(600));
    std::fs::write(d.join("d/b"), b"x").expect("create");
    step();
    std::fs::rename(d.join("a"), d.join("d/c")).expect("rename across");
    step();
    std::fs::set_permissions(d.join("d/b"), std::fs::Permissions::from_mode(0o600)).expect("chmod");
    step();
    std::fs::remove_file(d.join("d/b")).expect("unlink");
    step();
    std::fs::remove_file(d.join("d/c")).expect("unlink");
    step();
    std::fs::remove_dir(d.join("d")).expect("rmdir");
    std::thread::sleep(Duration::from_millis(1000));
}

/// Run `mode`'s watcher on `watched` while the script changes `changed`
/// (the same directory, or the host copy of a mount): its events.
fn events(js: &Path, mode: &str, watched: &Path, changed: &Path) -> Vec<String> {
    let mut child = common::Kill(
        Command::new("node")
            .arg(js.join("watch.js"))
            .arg(mode)
            .arg(watched)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("node"),
    );
    let rx = common::lines(&mut child.0);
    let ready = rx.recv_timeout(Duration::from_secs(20));
    assert!(
        ready.as_deref().is_ok_and(|l| l.starts_with("ready")),
        "{mode} on {}: never ready ({ready:?})",
        watched.display()
    );
    script(changed);
    let mut v = Vec::new();
    while let Ok(l) = rx.recv_timeout(Duration::from_millis(500)) {
        v.push(l);
    }
    v
}

/// `v` without the "change" events that follow an event of the same
/// path. Whether the write right after a create (or after another write)
/// is seen apart from it is a matter of timing, on the host too: it
/// depends on when the watcher looks (chokidar stats the file on each
/// event and throttles changes). Kinds, names and order must agree.
fn settled(v: Vec<String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for e in v {
        let path = |e: &str| e.split_once(' ').map(|(_, p)| p.to_string());
        let repeat =
            e.starts_with("change ") && out.last().is_some_and(|last| path(last) == path(&e));
        if !repeat {
            out.push(e);
        }
    }
    out
}

fn differential(mode: &str) {
    let Some(js) = setup(mode == "chokidar") else {
        return;
    };
    let tmp = tempfile::tempdir().expect("tmp");
    let (a, b, mnt) = (
        tmp.path().join("a"),
        tmp.path().join("b"),
        tmp.path().join("mnt"),
    );
    for d in [&a, &b, &mnt] {
        std::fs::create_dir(d).expect("mkdir");
    }
    let native = settled(events(&js, mode, &a, &a));
    let _m = common::Mount::new(&b, &mnt, "cache=coherent");
    let mounted = settled(events(&js, mode, &mnt, &b));
    eprintln!("{mode}\nhost:  {native:?}\nmount: {mounted:?}");
    assert!(native.len() >= 8, "the host's own events: {native:?}");
    assert_eq!(mounted, native, "{mode}: events on the mount differ");
}

#[test]
fn node_fs_watch_recursive_sees_host_changes_on_the_mount_as_on_the_host() {
    differential("fswatch");
}

#[test]
fn chokidar_sees_host_changes_on_the_mount_as_on_the_host() {
    differential("chokidar");
}
