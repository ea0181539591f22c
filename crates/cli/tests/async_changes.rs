//! Asynchronous changes through a real FUSE mount of a separate
//! `walkfs serve`: after `sync`, a `kill -9` of the mount daemon loses
//! nothing that was written, removed or changed before it (the changes
//! were on the server's connection before the calls returned, and the
//! server carries out what a vanished client sent).

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Command;

mod common;
use common::*;

#[test]
fn after_sync_a_killed_mount_daemon_loses_nothing() {
    let Dirs {
        t: _t,
        src,
        mnt,
        sock,
    } = dirs();
    for i in 0..100 {
        std::fs::write(src.join(format!("old{i}")), "old").expect("write");
    }
    let _server = serve(&src, &sock);
    let addr = format!("unix:{}", sock.display());
    let m = Mount::new(Path::new(&addr), &mnt, "cache=loose,negtimeout=-1");
    std::fs::create_dir(mnt.join("d")).expect("mkdir");
    for i in 0..300 {
        std::fs::write(mnt.join(format!("d/f{i}")), format!("content {i}")).expect("write");
    }
    for i in 0..100 {
        std::fs::remove_file(mnt.join(format!("old{i}"))).expect("unlink");
    }
    std::fs::set_permissions(mnt.join("d/f7"), std::fs::Permissions::from_mode(0o600))
        .expect("chmod");
    let when = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000);
    std::fs::File::options()
        .write(true)
        .open(mnt.join("d/f8"))
        .and_then(|f| f.set_modified(when))
        .expect("set the time");
    let stats = run(walkfs().arg("stats").arg(&mnt).arg("--json"));
    let v: serde_json::Value = serde_json::from_slice(&stats.stdout).expect("json");
    assert!(
        v["writeback_submitted"].as_u64().unwrap_or(0) >= 100,
        "the changes were not sent asynchronously: {v}"
    );
    run(&mut Command::new("sync"));
    let pid = *mount_pids(&mnt).first().expect("the mount daemon");
    run(Command::new("kill").arg("-9").arg(pid.to_string()));
    wait_until("the daemon to die", || {
        !Path::new(&format!("/proc/{pid}")).exists()
            || std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .is_ok_and(|s| s.contains(") Z "))
    });
    // The server may still be carrying out what it read last.
    wait_until("the server to catch up", || {
        (0..100).all(|i| !src.join(format!("old{i}")).exists())
            && std::fs::metadata(src.join("d/f8")).is_ok_and(|m| m.mtime() == 1_000_000)
    });
    for i in 0..300 {
        assert_eq!(
            std::fs::read_to_string(src.join(format!("d/f{i}"))).expect("on the server"),
            format!("content {i}")
        );
    }
    let mode = std::fs::metadata(src.join("d/f7")).expect("f7").mode();
    assert_eq!(mode & 0o7777, 0o600);
    let _ = Command::new("umount").arg("-l").arg(&mnt).status();
    drop(m);
}
