//! A burst of 100,000 host changes beside a coherent mount: the mount
//! keeps serving, its memory stays bounded, and every watcher of it gets
//! either all the events or an overflow signal, never a silent gap.

mod common;

use std::process::{Command, Stdio};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

const FILES: usize = 50_000;

/// Read `rx` until `n` events or an overflow came, or nothing came for
/// a while: (events, overflowed).
fn drain(rx: &Receiver<String>, n: usize, overflow: &str) -> (Vec<String>, bool) {
    let mut got = Vec::new();
    let t0 = Instant::now();
    while got.len() < n && t0.elapsed() < Duration::from_secs(300) {
        match rx.recv_timeout(Duration::from_secs(20)) {
            Ok(l) if l.contains(overflow) => return (got, true),
            Ok(l) => got.push(l),
            Err(_) => break,
        }
    }
    (got, false)
}

fn vm(pid: u32, key: &str) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

#[test]
fn a_burst_of_100k_host_changes_reaches_every_watcher_or_overflows() {
    if !walkfs_testkit::need_program("inotifywait", "--help", "inotify-tools") {
        return;
    }
    let tmp = tempfile::tempdir().expect("tmp");
    let (src, mnt) = (tmp.path().join("src"), tmp.path().join("mnt"));
    for d in [&src, &mnt] {
        std::fs::create_dir(d).expect("mkdir");
    }
    let _m = common::Mount::new(&src, &mnt, "cache=coherent");
    let pid = *common::mount_pids(&mnt)
        .first()
        .expect("the mount's daemon");
    let mut iw = common::Kill(
        Command::new("inotifywait")
            .args(["-m", "-r", "-q", "-e", "create,delete", "--format", "%e %f"])
            .arg(&mnt)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("inotifywait"),
    );
    let iw_lines = common::lines(&mut iw.0);
    let mut ww = common::Kill(
        common::walkfs()
            .arg("watch")
            .arg(&mnt)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("walkfs watch"),
    );
    let ww_lines = common::lines(&mut ww.0);
    std::thread::sleep(Duration::from_secs(1));
    let rss0 = vm(pid, "VmRSS:");
    let t0 = Instant::now();
    for i in 0..FILES {
        std::fs::File::create(src.join(format!("f{i}"))).expect("create");
    }
    for i in 0..FILES {
        std::fs::remove_file(src.join(format!("f{i}"))).expect("unlink");
    }
    let made = t0.elapsed();
    let (iev, iover) = drain(&iw_lines, 2 * FILES, "Q_OVERFLOW");
    let (wev, wover) = drain(&ww_lines, 2 * FILES, "\"overflow\"");
    let took = t0.elapsed();
    let hwm = vm(pid, "VmHWM:");
    eprintln!(
        "{} host changes in {made:?}; inotifywait: {} events{}, walkfs watch: {}{}, \
         all in {took:?}; mount daemon RSS {rss0} kB before, peak {hwm} kB",
        2 * FILES,
        iev.len(),
        if iover { " then an overflow" } else { "" },
        wev.len(),
        if wover { " then an overflow" } else { "" },
    );
    assert!(
        iover || iev.len() == 2 * FILES,
        "inotifywait: {} of {} events and no overflow",
        iev.len(),
        2 * FILES
    );
    if !iover {
        let creates = iev.iter().filter(|l| l.starts_with("CREATE ")).count();
        assert_eq!(creates, FILES, "every create, once");
    }
    assert!(
        wover || wev.len() == 2 * FILES,
        "walkfs watch: {} of {} events and no overflow",
        wev.len(),
        2 * FILES
    );
    // Bounded: the replay queue and the echo records have limits; the
    // mount's own cache has its own.
    assert!(hwm < 512 * 1024, "the mount daemon peaked at {hwm} kB");
    // Still serving, and current.
    assert_eq!(
        common::mount_processes(&mnt),
        1,
        "the mount's daemon is gone"
    );
    std::fs::write(src.join("after"), b"x").expect("write");
    common::wait_until("a file made after the burst is seen", || {
        mnt.join("after").exists()
    });
    let n = std::fs::read_dir(&mnt).expect("readdir").count();
    assert_eq!(n, 1, "the mount lists what the host has");
}
