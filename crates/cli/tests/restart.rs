//! Issue 38: a mount of `walkfs serve` outlives its server's restarts
//! (SIGKILL included) and loses nothing it acknowledged, and the files
//! made through it keep their inode numbers across the restarts.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

mod common;
use common::*;

/// Numbers the server grants start here (crates/server/src/inos.rs).
const GRANTED: u64 = 0x7f00_0000_0000_0000;

type Setup = Dirs;

fn setup() -> Setup {
    dirs()
}

trait Served {
    fn addr(&self) -> String;
    fn serve(&self, extra: &[&str]) -> Kill;
}

impl Served for Setup {
    fn addr(&self) -> String {
        format!("unix:{}", self.sock.display())
    }
    fn serve(&self, extra: &[&str]) -> Kill {
        serve_with(&self.src, &self.sock, extra)
    }
}

/// File `i`'s path under the mount's or the host's root, and its bytes.
fn file(root: &Path, i: usize) -> PathBuf {
    root.join(format!("d{}", i % 12)).join(format!("f{i}"))
}
fn content(i: usize) -> Vec<u8> {
    let len = (i * 7919) % 20000 + 1;
    (0..len).map(|k| (k * 31 + i) as u8).collect()
}

/// Every file's inode number, by path under `root`.
fn inos(root: &Path) -> Vec<(PathBuf, u64)> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("readdir") {
            let e = e.expect("entry");
            let p = e.path();
            let md = std::fs::symlink_metadata(&p).expect("stat");
            out.push((p.strip_prefix(root).expect("under").to_path_buf(), md.ino()));
            if md.is_dir() {
                stack.push(p);
            }
        }
    }
    out.sort();
    out
}

fn sigterm(k: &mut Kill) {
    // SAFETY: kill(2) on a child we started.
    unsafe { libc::kill(k.0.id() as i32, libc::SIGTERM) };
    let _ = k.0.wait();
}

fn sigkill(k: &mut Kill) {
    k.0.kill().expect("kill -9 the server");
    let _ = k.0.wait();
}

/// A program writes files through the mount while the server is killed
/// (SIGKILL twice, SIGTERM once) and restarted: it sees no error, every
/// file it closed is on the host whole, and every file keeps its inode
/// number (the granted one) across a further restart and a remount.
#[test]
fn a_mount_rides_through_server_restarts_and_loses_nothing_it_acknowledged() {
    let s = setup();
    let mut server = s.serve(&[]);
    let addr = s.addr();
    let m = Mount::new(Path::new(&addr), &s.mnt, "cache=coherent");
    const N: usize = 1200;
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let mnt = s.mnt.clone();
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || -> Result<usize, String> {
            for i in 0..N {
                let p = file(&mnt, i);
                if i < 12 {
                    std::fs::create_dir(p.parent().expect("dir"))
                        .map_err(|e| format!("mkdir for {i}: {e}"))?;
                }
                std::fs::write(&p, content(i)).map_err(|e| format!("write {i}: {e}"))?;
                if stop.load(Ordering::Relaxed) {
                    return Ok(i + 1);
                }
            }
            Ok(N)
        })
    };
    for kill in [sigkill, sigterm, sigkill] {
        std::thread::sleep(Duration::from_millis(700));
        kill(&mut server);
        std::thread::sleep(Duration::from_millis(100));
        server = s.serve(&[]);
    }
    let written = writer.join().expect("writer").expect("no call failed");
    stop.store(true, Ordering::Relaxed);
    assert!(written == N, "the writer finished: {written}");
    let st = walkfs().arg("stats").arg(&s.mnt).output().expect("stats");
    let stats = String::from_utf8_lossy(&st.stdout).to_string();
    // Through the mount and on the host: every byte.
    // sync(2) does not reach a FUSE daemon: `walkfs sync` drains it.
    run(walkfs().arg("sync").arg(&s.mnt));
    for i in 0..N {
        let host = std::fs::read(file(&s.src, i)).unwrap_or_default();
        assert!(
            host == content(i),
            "file {i} on the host: {} bytes",
            host.len()
        );
    }
    let before = inos(&s.mnt);
    assert!(
        before.iter().all(|(_, ino)| *ino >= GRANTED),
        "files made through the mount show granted numbers"
    );
    // What a 9P client is told of some of them, straight from the server:
    // the number and the birth time (the generation).
    let told = || -> Vec<String> {
        (0..N)
            .step_by(97)
            .map(|i| {
                let rel = file(Path::new("/"), i);
                let o = run(walkfs().arg("9p").arg(&addr).arg("stat").arg(&rel));
                String::from_utf8_lossy(&o.stdout).trim().to_string()
            })
            .collect()
    };
    let told_before = told();
    assert!(
        told_before.iter().all(|l| l.contains(" born ")),
        "{told_before:?}"
    );
    // One more SIGKILL, and a remount: the same numbers. (The mount goes
    // while a server runs: an unmount waits, up to the reconnect bound,
    // for the changes it still owes one.)
    sigkill(&mut server);
    let server = s.serve(&[]);
    drop(m);
    let m = Mount::new(Path::new(&addr), &s.mnt, "cache=coherent");
    assert_eq!(
        inos(&s.mnt),
        before,
        "inode numbers after restarts and a remount"
    );
    assert_eq!(told(), told_before, "numbers and generations over 9P");
    eprintln!("{stats}");
    drop(m);
    drop(server);
}

/// Changes still on their way when the server dies are sent again to the
/// restarted one: the fsync that waits for them succeeds, and the file
/// is whole on the host.
#[test]
fn writes_in_flight_when_the_server_dies_reach_the_restarted_one() {
    let s = setup();
    // Replies half a second late: what is written stays in flight.
    let mut server = s.serve(&["--reply-delay-us", "300000"]);
    let addr = s.addr();
    let m = Mount::new(Path::new(&addr), &s.mnt, "cache=loose");
    let data: Vec<u8> = (0..(1 << 20)).map(|i: u32| (i % 251) as u8).collect();
    let mut f = std::fs::File::create(s.mnt.join("w")).expect("create");
    std::io::Write::write_all(&mut f, &data).expect("write");
    let syncing = std::thread::spawn(move || f.sync_all().map_err(|e| e.to_string()));
    std::thread::sleep(Duration::from_millis(150));
    sigkill(&mut server);
    std::thread::sleep(Duration::from_millis(200));
    let server = s.serve(&[]);
    syncing
        .join()
        .expect("fsync thread")
        .expect("fsync succeeds once the server is back");
    assert!(std::fs::read(s.src.join("w")).expect("on the host") == data);
    drop(m);
    drop(server);
}

/// A number belongs to its file: a file deleted on the host while no
/// server runs takes its granted number with it, and the file that
/// reuses its inode shows its own host number.
#[test]
fn a_file_deleted_on_the_host_while_the_server_is_down_leaves_its_number_unused() {
    let s = setup();
    let mut server = s.serve(&[]);
    let addr = s.addr();
    let m = Mount::new(Path::new(&addr), &s.mnt, "cache=loose");
    std::fs::write(s.mnt.join("old"), b"old").expect("create");
    std::fs::write(s.mnt.join("kept"), b"kept").expect("create");
    // sync(2) does not reach a FUSE daemon: `walkfs sync` drains it.
    run(walkfs().arg("sync").arg(&s.mnt));
    let granted = std::fs::metadata(s.mnt.join("old")).expect("stat").ino();
    let kept = std::fs::metadata(s.mnt.join("kept")).expect("stat").ino();
    assert!(granted >= GRANTED && kept >= GRANTED);
    let host_ino = std::fs::metadata(s.src.join("old")).expect("host").ino();
    drop(m);
    sigkill(&mut server);
    std::fs::remove_file(s.src.join("old")).expect("host unlink");
    // Likely to reuse the inode (ext4 and tmpfs do at once).
    std::fs::write(s.src.join("new"), b"new").expect("host create");
    let new_host = std::fs::metadata(s.src.join("new")).expect("host").ino();
    let server = s.serve(&[]);
    let m = Mount::new(Path::new(&addr), &s.mnt, "cache=loose");
    let shown = std::fs::metadata(s.mnt.join("new")).expect("stat").ino();
    assert_eq!(
        shown, new_host,
        "reused inode {host_ino}: host number shown"
    );
    assert_eq!(
        std::fs::metadata(s.mnt.join("kept")).expect("stat").ino(),
        kept
    );
    drop(m);
    drop(server);
}
