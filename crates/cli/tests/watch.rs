//! `walkfs watch DIR`: every change made on the host under DIR comes out
//! as one JSON line with its path and kind, directories made after the
//! watch began included, in the order the changes were made.

mod common;

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::Duration;

struct Watch {
    child: Child,
    lines: mpsc::Receiver<serde_json::Value>,
}

impl Drop for Watch {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn watch(dir: &std::path::Path) -> Watch {
    let mut child = common::walkfs()
        .arg("watch")
        .arg(dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn walkfs watch");
    let stdout = child.stdout.take().expect("stdout");
    let stderr = child.stderr.take().expect("stderr");
    let (ready_tx, ready_rx) = mpsc::channel();
    std::thread::spawn(move || {
        for l in BufReader::new(stderr).lines().map_while(Result::ok) {
            if l.contains("watching") {
                let _ = ready_tx.send(());
            }
        }
    });
    let (tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for l in BufReader::new(stdout).lines().map_while(Result::ok) {
            let v: serde_json::Value = serde_json::from_str(&l).expect("a JSON line");
            if tx.send(v).is_err() {
                return;
            }
        }
    });
    ready_rx
        .recv_timeout(Duration::from_secs(10))
        .expect("walkfs watch never said it was watching");
    Watch { child, lines }
}

impl Watch {
    /// Wait for a line with `path` and `kind`; the lines read before it
    /// are returned.
    fn expect(&self, path: &str, kind: &str) -> Vec<serde_json::Value> {
        let mut before = Vec::new();
        loop {
            let v = self
                .lines
                .recv_timeout(Duration::from_secs(5))
                .unwrap_or_else(|_| panic!("no {kind} of {path}; saw {before:?}"));
            if v["path"] == path && v["kind"] == kind {
                assert!(v["time"].as_f64().is_some_and(|t| t > 0.0), "{v}");
                return before;
            }
            before.push(v);
        }
    }
}

#[test]
fn host_changes_come_out_as_json_lines_with_path_and_kind() {
    let tmp = tempfile::tempdir().expect("tmp");
    let d = tmp.path();
    std::fs::create_dir_all(d.join("old/deep")).expect("mkdir");
    std::fs::write(d.join("old/deep/f"), b"x").expect("write");
    let w = watch(d);

    std::fs::write(d.join("a"), b"1").expect("create");
    w.expect("a", "create");
    w.expect("a", "modify");
    std::fs::OpenOptions::new()
        .append(true)
        .open(d.join("a"))
        .and_then(|mut f| std::io::Write::write_all(&mut f, b"2"))
        .expect("append");
    // (Its modify may merge with the write's, as inotify merges repeats.)
    std::fs::set_permissions(d.join("a"), std::fs::Permissions::from_mode(0o600)).expect("chmod");
    w.expect("a", "attrib");
    // A directory that existed before the watch, at depth.
    std::fs::write(d.join("old/deep/f"), b"changed").expect("write");
    w.expect("old/deep/f", "modify");
    // A directory made later is watched too.
    std::fs::create_dir(d.join("new")).expect("mkdir");
    let v = w.expect("new", "create");
    // (Before it, at most the rest of the write's events: open with
    // O_TRUNC and the write each modify.)
    assert!(v.iter().all(|l| l["path"] == "old/deep/f"), "{v:?}");
    std::fs::write(d.join("new/g"), b"").expect("create");
    w.expect("new/g", "create");
    // A rename: both halves, in order.
    std::fs::rename(d.join("a"), d.join("new/b")).expect("rename");
    w.expect("a", "moved_from");
    w.expect("new/b", "moved_to");
    std::fs::remove_file(d.join("new/b")).expect("unlink");
    w.expect("new/b", "delete");
    std::fs::remove_file(d.join("new/g")).expect("unlink");
    std::fs::remove_dir(d.join("new")).expect("rmdir");
    w.expect("new", "delete");
}
