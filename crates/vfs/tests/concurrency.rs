//! Threads walking while others create, unlink and rename the same names:
//! no crash, no error other than the ones the namespace allows, and never a
//! positive answer for a name walkfs already removed (nor a negative one for
//! a name that existed throughout the lookup).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};

use walkfs_vfs::{Creds, Errno, Options, Vfs, AT_FDCWD, RENAME_EXCHANGE};

const NAMES: usize = 4;

/// An empty in-memory tree to walk.
fn mem() -> Arc<walkfs_memfs::MemFs> {
    Arc::new(walkfs_memfs::MemFs::new())
}

/// Per name: 4k+1 creating, 4k+2 present, 4k+3 removing, 4k+4 removed.
struct States([AtomicU64; NAMES]);

fn run(opts: &str, readers: usize, dur: Duration) {
    let vfs = Vfs::new(mem(), &Options::parse(opts).unwrap()).unwrap();
    let root = vfs.context(Creds::root());
    for d in ["/d", "/d/s0", "/d/s0/s1", "/d/t0", "/d/t0/s1"] {
        root.mkdirat(AT_FDCWD, d.as_bytes(), 0o755).unwrap();
    }
    for f in ["/d/s0/s1/f", "/d/t0/s1/f"] {
        let fd = root
            .openat(
                AT_FDCWD,
                f.as_bytes(),
                libc::O_CREAT | libc::O_WRONLY,
                0o644,
            )
            .unwrap();
        root.close(fd).unwrap();
    }
    let states = Arc::new(States(std::array::from_fn(|_| AtomicU64::new(0))));
    let stop = Arc::new(AtomicBool::new(false));
    let checked = Arc::new(AtomicU64::new(0));
    let mut handles = Vec::new();

    // Creator/remover: one name after the other, state published around
    // each call.
    {
        let (vfs, states, stop) = (vfs.clone(), states.clone(), stop.clone());
        handles.push(std::thread::spawn(move || {
            let ctx = vfs.context(Creds::root());
            let mut i = 0usize;
            while !stop.load(SeqCst) {
                let n = i % NAMES;
                let path = format!("/d/n{n}");
                states.0[n].fetch_add(1, SeqCst);
                let fd = ctx
                    .openat(
                        AT_FDCWD,
                        path.as_bytes(),
                        libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY,
                        0o644,
                    )
                    .unwrap();
                ctx.write(fd, b"x").unwrap();
                ctx.close(fd).unwrap();
                states.0[n].fetch_add(1, SeqCst);
                states.0[n].fetch_add(1, SeqCst);
                ctx.unlinkat(AT_FDCWD, path.as_bytes(), 0).unwrap();
                states.0[n].fetch_add(1, SeqCst);
                i += 1;
            }
        }));
    }
    // Swapper: exchanges two directories in the middle of readers' paths;
    // both paths exist at every instant.
    {
        let (vfs, stop) = (vfs.clone(), stop.clone());
        handles.push(std::thread::spawn(move || {
            let ctx = vfs.context(Creds::root());
            while !stop.load(SeqCst) {
                ctx.renameat2(AT_FDCWD, b"/d/s0", AT_FDCWD, b"/d/t0", RENAME_EXCHANGE)
                    .unwrap();
            }
        }));
    }
    for r in 0..readers {
        let (vfs, states, stop, checked) =
            (vfs.clone(), states.clone(), stop.clone(), checked.clone());
        handles.push(std::thread::spawn(move || {
            let ctx = vfs.context(Creds { uid: 1000 + r as u32, gid: 1000, groups: vec![], privileged: false });
            let mut k = r;
            while !stop.load(SeqCst) {
                k += 1;
                let n = k % NAMES;
                let path = format!("/d/n{n}");
                let before = states.0[n].load(SeqCst);
                let res = if k % 2 == 0 {
                    ctx.faccessat(AT_FDCWD, path.as_bytes(), libc::R_OK, 0)
                } else {
                    ctx.fstatat(AT_FDCWD, path.as_bytes(), 0).map(|st| {
                        assert_eq!(st.st_mode, libc::S_IFREG | 0o644, "torn stat");
                        assert!(st.st_size <= 1, "torn stat size {}", st.st_size);
                    })
                };
                let after = states.0[n].load(SeqCst);
                match res {
                    Ok(()) => assert!(
                        !(before == after && before % 4 == 0),
                        "{path} found although removed before and after the lookup (state {before})"
                    ),
                    Err(Errno::ENOENT) => assert!(
                        !(before == after && before % 4 == 2),
                        "{path} missing although present before and after the lookup (state {before})"
                    ),
                    Err(e) => panic!("unexpected {e:?} for {path}"),
                }
                for p in [&b"/d/s0/s1/f"[..], b"/d/t0/s1/f", b"/d/s0/../t0/s1/../s1/f"] {
                    assert_eq!(ctx.faccessat(AT_FDCWD, p, 0, 0), Ok(()), "{}", String::from_utf8_lossy(p));
                }
                checked.fetch_add(1, SeqCst);
            }
        }));
    }
    std::thread::sleep(dur);
    stop.store(true, SeqCst);
    for h in handles {
        h.join().expect("a thread panicked");
    }
    assert!(checked.load(SeqCst) > 100, "readers made no progress");
}

#[test]
fn readers_and_writers_agree_fast_path() {
    run("", 3, Duration::from_millis(1500));
}

#[test]
fn readers_and_writers_agree_slow_path() {
    run("fastpath=0,negtimeout=0", 2, Duration::from_millis(700));
}

#[test]
fn eviction_under_pressure_keeps_answers_right() {
    // A cache far smaller than the tree: every walk evicts and refills.
    let vfs = Vfs::new(mem(), &Options::parse("max_dentries=1024").unwrap()).unwrap();
    let ctx = vfs.context(Creds::root());
    for i in 0..40 {
        ctx.mkdirat(AT_FDCWD, format!("/d{i}").as_bytes(), 0o755)
            .unwrap();
        for j in 0..60 {
            ctx.mkdirat(AT_FDCWD, format!("/d{i}/e{j}").as_bytes(), 0o755)
                .unwrap();
        }
    }
    let start = Instant::now();
    let vfs2 = vfs.clone();
    let t = std::thread::spawn(move || {
        let ctx = vfs2.context(Creds::root());
        for round in 0..3 {
            for i in 0..40 {
                for j in 0..60 {
                    assert_eq!(
                        ctx.faccessat(AT_FDCWD, format!("/d{i}/e{j}").as_bytes(), 0, 0),
                        Ok(()),
                        "round {round}"
                    );
                    assert_eq!(
                        ctx.faccessat(AT_FDCWD, format!("/d{i}/x{j}").as_bytes(), 0, 0),
                        Err(Errno::ENOENT)
                    );
                }
            }
        }
    });
    for i in 0..40 {
        for j in 0..60 {
            assert_eq!(
                ctx.faccessat(AT_FDCWD, format!("/d{i}/e{j}/../e{j}").as_bytes(), 0, 0),
                Ok(())
            );
        }
    }
    t.join().unwrap();
    let st = vfs.cache_stats();
    assert!(
        st.dentries <= 1024 + 64,
        "cache bound not kept: {} dentries",
        st.dentries
    );
    assert!(start.elapsed() < Duration::from_secs(60));
}
