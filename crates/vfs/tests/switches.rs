//! Every optimization switch changes what walkfs does, visibly.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use walkfs_fsapi::{Attr, Entry, NodeId, Owner};
use walkfs_vfs::{
    slow_permission_checks, CachePolicy, Creds, Errno, FileSystem, NegPolicy, Options, Vfs,
    AT_FDCWD,
};

fn host_vfs(opts: &str) -> (tempfile::TempDir, Vfs) {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(tmp.path().join("usr/lib")).unwrap();
    std::fs::write(tmp.path().join("usr/lib/crt.o"), b"x").unwrap();
    std::os::unix::fs::symlink("usr/lib", tmp.path().join("lib")).unwrap();
    let fs = Arc::new(walkfs_hostfs::HostFs::new(tmp.path()).unwrap());
    let vfs = Vfs::new(fs, &Options::parse(opts).unwrap()).unwrap();
    (tmp, vfs)
}

#[test]
fn negtimeout_decides_whether_host_creations_are_seen() {
    // -1: the negative entry stands until invalidated.
    let (tmp, vfs) = host_vfs("negtimeout=-1");
    let ctx = vfs.context(Creds::root());
    assert_eq!(
        ctx.faccessat(AT_FDCWD, b"/usr/new.h", 0, 0),
        Err(Errno::ENOENT)
    );
    std::fs::write(tmp.path().join("usr/new.h"), b"").unwrap();
    assert_eq!(
        ctx.faccessat(AT_FDCWD, b"/usr/new.h", 0, 0),
        Err(Errno::ENOENT)
    );
    vfs.drop_caches();
    assert_eq!(ctx.faccessat(AT_FDCWD, b"/usr/new.h", 0, 0), Ok(()));

    // 0: no negative entries, the host's creation is seen at once.
    let (tmp, vfs) = host_vfs("negtimeout=0");
    let ctx = vfs.context(Creds::root());
    assert_eq!(
        ctx.faccessat(AT_FDCWD, b"/usr/new.h", 0, 0),
        Err(Errno::ENOENT)
    );
    std::fs::write(tmp.path().join("usr/new.h"), b"").unwrap();
    assert_eq!(ctx.faccessat(AT_FDCWD, b"/usr/new.h", 0, 0), Ok(()));
    assert_eq!(vfs.cache_stats().negative_created, 0);

    // N ms: seen once the entry expires.
    let (tmp, vfs) = host_vfs("negtimeout=150");
    let ctx = vfs.context(Creds::root());
    assert_eq!(
        ctx.faccessat(AT_FDCWD, b"/usr/new.h", 0, 0),
        Err(Errno::ENOENT)
    );
    std::fs::write(tmp.path().join("usr/new.h"), b"").unwrap();
    assert_eq!(
        ctx.faccessat(AT_FDCWD, b"/usr/new.h", 0, 0),
        Err(Errno::ENOENT)
    );
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(ctx.faccessat(AT_FDCWD, b"/usr/new.h", 0, 0), Ok(()));
}

#[test]
fn fastpath_off_sends_every_component_to_the_slow_path() {
    for (opts, slow) in [("fastpath=1", false), ("fastpath=0", true)] {
        let (_tmp, vfs) = host_vfs(opts);
        let ctx = vfs.context(Creds::root());
        ctx.faccessat(AT_FDCWD, b"/usr/lib/crt.o", 0, 0).unwrap();
        let before = vfs.cache_stats();
        for _ in 0..10 {
            ctx.faccessat(AT_FDCWD, b"/usr/lib/crt.o", 0, 0).unwrap();
        }
        let after = vfs.cache_stats();
        assert_eq!(
            after.backend_lookups, before.backend_lookups,
            "{opts}: warm walks ask the backend"
        );
        let slow_steps = after.slow_lookups - before.slow_lookups;
        assert_eq!(slow_steps, if slow { 30 } else { 0 }, "{opts}");
    }
}

#[test]
fn fastperm_skips_the_permission_routine() {
    for (opts, expect) in [("fastperm=1", 0), ("fastperm=0", 3)] {
        let (_tmp, vfs) = host_vfs(opts);
        let ctx = vfs.context(Creds {
            uid: 1000,
            gid: 1000,
            groups: vec![],
            privileged: false,
        });
        ctx.faccessat(AT_FDCWD, b"/usr/lib/crt.o", libc::R_OK, 0)
            .unwrap();
        let before = slow_permission_checks();
        ctx.faccessat(AT_FDCWD, b"/usr/lib/crt.o", libc::R_OK, 0)
            .unwrap();
        assert_eq!(slow_permission_checks() - before, expect, "{opts}");
    }
    // A directory that does not grant search to everyone always takes the
    // general routine, and its answer is the same either way.
    let (tmp, vfs) = host_vfs("fastperm=1");
    std::fs::create_dir(tmp.path().join("private")).unwrap();
    std::fs::write(tmp.path().join("private/x"), b"").unwrap();
    let p = tmp.path().join("private");
    std::process::Command::new("chmod")
        .arg("0700")
        .arg(&p)
        .status()
        .unwrap();
    let ctx = vfs.context(Creds {
        uid: 1000,
        gid: 1000,
        groups: vec![],
        privileged: false,
    });
    assert_eq!(
        ctx.faccessat(AT_FDCWD, b"/private/x", 0, 0),
        Err(Errno::EACCES)
    );
}

/// memfs, counting the `readlink` calls that reach it.
struct CountingFs {
    inner: walkfs_memfs::MemFs,
    readlinks: AtomicU64,
}

impl FileSystem for CountingFs {
    fn root(&self) -> NodeId {
        self.inner.root()
    }
    fn lookup(&self, p: NodeId, n: &[u8]) -> walkfs_vfs::Result<Entry> {
        self.inner.lookup(p, n)
    }
    fn forget(&self, n: NodeId, c: u64) {
        self.inner.forget(n, c)
    }
    fn getattr(&self, n: NodeId) -> walkfs_vfs::Result<Attr> {
        self.inner.getattr(n)
    }
    fn readlink(&self, n: NodeId) -> walkfs_vfs::Result<Vec<u8>> {
        self.readlinks.fetch_add(1, Ordering::Relaxed);
        self.inner.readlink(n)
    }
    fn mkdir(&self, p: NodeId, n: &[u8], m: u32, o: Owner) -> walkfs_vfs::Result<Entry> {
        self.inner.mkdir(p, n, m, o)
    }
    fn symlink(&self, p: NodeId, n: &[u8], t: &[u8], o: Owner) -> walkfs_vfs::Result<Entry> {
        self.inner.symlink(p, n, t, o)
    }
}

#[test]
fn cache_symlinks_decides_whether_bodies_are_reread() {
    for (opts, expect) in [("cache_symlinks=1", 1), ("cache_symlinks=0", 20)] {
        let (fs, vfs) = counting_vfs(opts);
        let ctx = vfs.context(Creds::root());
        for _ in 0..10 {
            assert_eq!(ctx.readlinkat(AT_FDCWD, b"/lib").unwrap(), b"usr");
            assert_eq!(ctx.faccessat(AT_FDCWD, b"/lib/", 0, 0), Ok(()));
        }
        assert_eq!(fs.readlinks.load(Ordering::Relaxed), expect, "{opts}");
    }
}

#[test]
fn switches_change_at_run_time_and_unknown_names_are_rejected() {
    let (_tmp, vfs) = host_vfs("");
    assert_eq!(vfs.options(), Options::default());
    vfs.set_option("fastpath", "0").unwrap();
    vfs.set_option("negtimeout", "0").unwrap();
    assert!(!vfs.options().fastpath);
    assert_eq!(vfs.options().negative, NegPolicy::Off);
    assert!(vfs.set_option("warp", "9").is_err_and(|e| e.unknown));
    // Sizes are fixed when the vfs is built.
    let e = vfs.set_option("max_dentries", "5").unwrap_err();
    assert!(!e.unknown && e.why.contains("fixed"), "{e}");
}

#[test]
fn pathcache_answers_are_invalidated_by_every_kind_of_change() {
    let vfs = Vfs::new(Arc::new(walkfs_memfs::MemFs::new()), &Options::default()).unwrap();
    let root = vfs.context(Creds::root());
    let user = vfs.context(Creds {
        uid: 1000,
        gid: 1000,
        groups: vec![],
        privileged: false,
    });
    for d in ["/a", "/a/b", "/m"] {
        root.mkdirat(AT_FDCWD, d.as_bytes(), 0o755).unwrap();
    }
    let fd = root
        .openat(AT_FDCWD, b"/a/b/f", libc::O_CREAT | libc::O_WRONLY, 0o644)
        .unwrap();
    root.close(fd).unwrap();
    // Warm: both callers have the answer remembered.
    for _ in 0..2 {
        assert_eq!(user.faccessat(AT_FDCWD, b"/a/b/f", 0, 0), Ok(()));
        assert_eq!(
            root.faccessat(AT_FDCWD, b"/a/b/g", 0, 0),
            Err(Errno::ENOENT)
        );
    }
    // A permission change in the middle of the path.
    root.fchmodat(AT_FDCWD, b"/a", 0o700, 0).unwrap();
    assert_eq!(
        user.faccessat(AT_FDCWD, b"/a/b/f", 0, 0),
        Err(Errno::EACCES)
    );
    root.fchmodat(AT_FDCWD, b"/a", 0o755, 0).unwrap();
    assert_eq!(user.faccessat(AT_FDCWD, b"/a/b/f", 0, 0), Ok(()));
    // A rename of a middle directory.
    root.renameat2(AT_FDCWD, b"/a/b", AT_FDCWD, b"/a/c", 0)
        .unwrap();
    assert_eq!(
        user.faccessat(AT_FDCWD, b"/a/b/f", 0, 0),
        Err(Errno::ENOENT)
    );
    assert_eq!(user.faccessat(AT_FDCWD, b"/a/c/f", 0, 0), Ok(()));
    // A creation turns a remembered ENOENT positive.
    root.renameat2(AT_FDCWD, b"/a/c", AT_FDCWD, b"/a/b", 0)
        .unwrap();
    let fd = root
        .openat(AT_FDCWD, b"/a/b/g", libc::O_CREAT | libc::O_WRONLY, 0o644)
        .unwrap();
    root.close(fd).unwrap();
    assert_eq!(root.faccessat(AT_FDCWD, b"/a/b/g", 0, 0), Ok(()));
    // An unlink turns it negative again.
    root.unlinkat(AT_FDCWD, b"/a/b/g", 0).unwrap();
    assert_eq!(
        root.faccessat(AT_FDCWD, b"/a/b/g", 0, 0),
        Err(Errno::ENOENT)
    );
    // A mount hides what was under the mount point.
    let fd = root
        .openat(AT_FDCWD, b"/m/under", libc::O_CREAT | libc::O_WRONLY, 0o644)
        .unwrap();
    root.close(fd).unwrap();
    assert_eq!(root.faccessat(AT_FDCWD, b"/m/under", 0, 0), Ok(()));
    vfs.mount(b"/m", Arc::new(walkfs_memfs::MemFs::new()))
        .unwrap();
    assert_eq!(
        root.faccessat(AT_FDCWD, b"/m/under", 0, 0),
        Err(Errno::ENOENT)
    );
}

#[test]
fn pathcache_switch_skips_the_walk() {
    for (opts, expect_slow) in [("pathcache=1", 0), ("pathcache=0", 3)] {
        let (_tmp, vfs) = host_vfs(&format!("{opts},fastperm=1"));
        let ctx = vfs.context(Creds {
            uid: 1000,
            gid: 1000,
            groups: vec![],
            privileged: false,
        });
        // A directory without search for everyone makes each walk run the
        // permission routine, which only a remembered walk skips.
        ctx.faccessat(AT_FDCWD, b"/usr/lib/crt.o", 0, 0).unwrap();
        let root = vfs.context(Creds::root());
        root.fchownat(AT_FDCWD, b"/usr/lib", 0, 1000, 0).unwrap();
        root.fchmodat(AT_FDCWD, b"/usr/lib", 0o750, 0).unwrap();
        ctx.faccessat(AT_FDCWD, b"/usr/lib/crt.o", 0, 0).unwrap();
        let before = slow_permission_checks();
        for _ in 0..3 {
            ctx.faccessat(AT_FDCWD, b"/usr/lib/crt.o", 0, 0).unwrap();
        }
        assert_eq!(slow_permission_checks() - before, expect_slow, "{opts}");
    }
}

/// How many of `n` readlinks of `/lib` reached the backend.
fn readlinks_reaching(vfs: &Vfs, fs: &CountingFs, n: u64) -> u64 {
    let ctx = vfs.context(Creds::root());
    let before = fs.readlinks.load(Ordering::Relaxed);
    for _ in 0..n {
        assert_eq!(ctx.readlinkat(AT_FDCWD, b"/lib").unwrap(), b"usr");
    }
    fs.readlinks.load(Ordering::Relaxed) - before
}

fn counting_vfs(opts: &str) -> (Arc<CountingFs>, Vfs) {
    let fs = Arc::new(CountingFs {
        inner: walkfs_memfs::MemFs::new(),
        readlinks: AtomicU64::new(0),
    });
    let vfs = Vfs::new(fs.clone(), &Options::parse(opts).unwrap()).unwrap();
    let ctx = vfs.context(Creds::root());
    ctx.mkdirat(AT_FDCWD, b"/usr", 0o755).unwrap();
    ctx.symlinkat(b"usr", AT_FDCWD, b"/lib").unwrap();
    (fs, vfs)
}

#[test]
fn cache_none_overrides_the_switches_without_rewriting_them() {
    let (fs, vfs) = counting_vfs("cache=none");
    assert_eq!(readlinks_reaching(&vfs, &fs, 5), 5);
    // The options are as given: cache=none, every switch still on.
    let o = vfs.options();
    assert_eq!(o.cache, CachePolicy::None);
    assert!(o.fastpath && o.pathcache && o.cache_symlinks);
    assert_eq!(o.negative, NegPolicy::Forever);
    assert!(!vfs.is_degraded());
    // Lifted at run time, the switches count again.
    vfs.set_option("cache", "loose").unwrap();
    assert!(readlinks_reaching(&vfs, &fs, 5) <= 1);
    assert_eq!(vfs.options().cache, CachePolicy::Loose);
    vfs.set_option("cache", "none").unwrap();
    assert_eq!(readlinks_reaching(&vfs, &fs, 5), 5);
}

#[test]
fn degraded_is_state_not_a_rewrite_of_the_options() {
    // memfs cannot report changes: a cache=coherent vfs over it is
    // degraded from the start.
    let (fs, vfs) = counting_vfs("cache=coherent");
    assert!(vfs.is_degraded());
    assert!(!vfs.is_coherent());
    let o = vfs.options();
    assert_eq!(o.cache, CachePolicy::Coherent);
    assert!(o.fastpath && o.pathcache && o.cache_symlinks);
    assert_eq!(o.negative, NegPolicy::Forever);
    assert_eq!(readlinks_reaching(&vfs, &fs, 5), 5);
    // A change of options leaves the overrides in force.
    vfs.set_option("cache", "loose").unwrap();
    vfs.set_option("cache_symlinks", "1").unwrap();
    assert_eq!(readlinks_reaching(&vfs, &fs, 5), 5);
    assert_eq!(vfs.options().cache, CachePolicy::Loose);
    assert!(vfs.is_degraded());
    // A loose vfs is never degraded.
    let (fs, vfs) = counting_vfs("cache=loose");
    assert!(!vfs.is_degraded() && !vfs.is_coherent());
    assert!(readlinks_reaching(&vfs, &fs, 5) <= 1);
}
