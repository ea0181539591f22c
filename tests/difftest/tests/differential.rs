//! Property-generated sequences of calls, run directly on the kernel (in a
//! chrooted `kernel-twin` process) and through walkfs over hostfs on a twin
//! directory: every result and errno, and the final trees, must be equal.
//! Run as root (CI is): the twin needs chroot and setresuid.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::{chown, symlink, PermissionsExt};
use std::path::Path;
use std::process::{Command, Stdio};

use proptest::prelude::*;
use walkfs_difftest::{snapshot, walkfs_exec, Op, Outcome, Who};
use walkfs_source::SourceOptions;
use walkfs_vfs::Creds;

const NAMES: &[&str] = &[
    "a", "b", "f", "p", "x", "w", "l", "dl", "u", "g", "n", "m", "loop", ".", "..",
];
const MODES: &[u32] = &[
    0o755, 0o700, 0o644, 0o600, 0o000, 0o711, 0o777, 0o555, 0o2775, 0o640,
];
const IDS: &[u32] = &[0, 1000, 1001, u32::MAX];

/// Root (chroot, setresuid): the differential tests compare the kernel's
/// answers as other users with walkfs's. Skips, or fails under CI.
#[track_caller]
fn need_root() -> bool {
    walkfs_testkit::need_root("the differential tests chroot and setresuid")
}

/// The same starting tree in `dir`: directories, files, symlinks (one
/// dangling, one looping), a private directory, one owned by the user.
fn seed(dir: &Path) {
    let mk = |p: &str, mode: u32| {
        std::fs::create_dir(dir.join(p)).unwrap();
        std::fs::set_permissions(dir.join(p), std::fs::Permissions::from_mode(mode)).unwrap();
    };
    let file = |p: &str, data: &[u8], mode: u32| {
        std::fs::write(dir.join(p), data).unwrap();
        std::fs::set_permissions(dir.join(p), std::fs::Permissions::from_mode(mode)).unwrap();
    };
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    mk("a", 0o755);
    mk("a/b", 0o755);
    file("a/b/f", b"abc", 0o644);
    mk("p", 0o700);
    file("p/x", b"secret", 0o644);
    mk("w", 0o777);
    file("w/s", b"set-id, root's, writable by all", 0o6777);
    file("f", b"root file", 0o644);
    mk("u", 0o755);
    file("u/g", b"users", 0o640);
    chown(dir.join("u"), Some(1000), Some(1000)).unwrap();
    chown(dir.join("u/g"), Some(1000), Some(1000)).unwrap();
    symlink("a/b", dir.join("l")).unwrap();
    symlink("nowhere", dir.join("dl")).unwrap();
    symlink("loop", dir.join("loop")).unwrap();
    symlink("/a/b/f", dir.join("a/abs")).unwrap();
}

fn path() -> impl Strategy<Value = Vec<u8>> {
    (
        any::<bool>(),
        prop::collection::vec(prop::sample::select(NAMES), 1..4),
        prop::bool::weighted(0.15),
    )
        .prop_map(|(abs, comps, trailing)| {
            let mut p = if abs { "/".to_string() } else { String::new() };
            p.push_str(&comps.join("/"));
            if trailing {
                p.push('/');
            }
            p.into_bytes()
        })
}

fn mode() -> impl Strategy<Value = u32> {
    prop::sample::select(MODES)
}

fn open_flags() -> impl Strategy<Value = i32> {
    let acc = prop::sample::select(vec![libc::O_RDONLY, libc::O_WRONLY, libc::O_RDWR]);
    let extra = prop::collection::vec(
        prop::sample::select(vec![
            libc::O_CREAT,
            libc::O_EXCL,
            libc::O_TRUNC,
            libc::O_DIRECTORY,
            libc::O_NOFOLLOW,
            libc::O_APPEND,
            libc::O_PATH,
        ]),
        0..3,
    );
    (acc, extra).prop_map(|(a, e)| e.into_iter().fold(a, |f, x| f | x))
}

fn op() -> impl Strategy<Value = Op> {
    let slot = 0usize..6;
    let dir = prop::option::weighted(0.15, 0usize..6);
    prop_oneof![
        4 => (dir.clone(), path(), 0i32..8, any::<bool>())
            .prop_map(|(dir, path, mode, nofollow)| Op::Access { dir, path, mode, nofollow }),
        3 => (dir.clone(), path(), any::<bool>()).prop_map(|(dir, path, nofollow)| Op::Stat { dir, path, nofollow }),
        2 => path().prop_map(|path| Op::Readlink { path }),
        4 => (dir, path(), open_flags(), mode()).prop_map(|(dir, path, flags, mode)| Op::Open { dir, path, flags, mode }),
        1 => slot.clone().prop_map(|slot| Op::Close { slot }),
        2 => (slot.clone(), 0usize..64, any::<u8>()).prop_map(|(slot, len, byte)| Op::Write { slot, len, byte }),
        2 => (slot.clone(), 0u64..40, 0usize..64).prop_map(|(slot, off, len)| Op::Pread { slot, off, len }),
        1 => slot.clone().prop_map(|slot| Op::Fstat { slot }),
        1 => (slot, -1i64..50).prop_map(|(slot, len)| Op::Ftruncate { slot, len }),
        3 => (path(), mode()).prop_map(|(path, mode)| Op::Mkdir { path, mode }),
        3 => (path(), any::<bool>()).prop_map(|(path, rmdir)| Op::Unlink { path, rmdir }),
        3 => (path(), path(), prop::sample::select(vec![0u32, 1, 2, 3]))
            .prop_map(|(old, new, flags)| Op::Rename { old, new, flags }),
        2 => (path(), path()).prop_map(|(target, path)| Op::Symlink { target, path }),
        2 => (path(), path(), any::<bool>()).prop_map(|(old, new, follow)| Op::Link { old, new, follow }),
        2 => (path(), mode(), any::<bool>()).prop_map(|(path, mode, nofollow)| Op::Chmod { path, mode, nofollow }),
        1 => (path(), prop::sample::select(IDS), prop::sample::select(IDS), any::<bool>())
            .prop_map(|(path, uid, gid, nofollow)| Op::Chown { path, uid, gid, nofollow }),
        2 => path().prop_map(|path| Op::List { path }),
    ]
}

/// Ops whose paths often start in or cross the mount on `/m`.
fn op_in_mount() -> impl Strategy<Value = Op> {
    op().prop_map(|mut op| {
        let m = |p: &mut Vec<u8>| {
            let prefix: &[u8] = if p.first() == Some(&b'/') {
                b"/m"
            } else {
                b"m/"
            };
            p.splice(0..0, prefix.iter().copied());
        };
        match &mut op {
            Op::Access { path, .. } | Op::Stat { path, .. } | Op::Readlink { path } => m(path),
            Op::Open { path, .. } | Op::Mkdir { path, .. } | Op::Unlink { path, .. } => m(path),
            Op::Chmod { path, .. } | Op::List { path } | Op::Symlink { path, .. } => m(path),
            Op::Chown { path, .. } => m(path),
            Op::Rename { old, .. } | Op::Link { old, .. } => m(old),
            _ => {}
        }
        op
    })
}

/// Run `ops` on the kernel in `dir` as `who`.
fn run_kernel(dir: &Path, who: &Who, ops: &[Op]) -> Vec<Outcome> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_kernel-twin"))
        .arg(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn kernel-twin");
    {
        let mut stdin = child.stdin.take().expect("stdin");
        writeln!(stdin, "{}", serde_json::to_string(who).unwrap()).unwrap();
        for op in ops {
            writeln!(stdin, "{}", serde_json::to_string(op).unwrap()).unwrap();
        }
    }
    let out = BufReader::new(child.stdout.take().expect("stdout"));
    let res: Vec<Outcome> = out
        .lines()
        .map(|l| serde_json::from_str(&l.unwrap()).unwrap())
        .collect();
    assert!(child.wait().unwrap().success(), "kernel-twin failed");
    res
}

/// A bind mount that is undone when dropped.
struct BindMount(std::path::PathBuf);

impl BindMount {
    fn new(from: &Path, to: &Path) -> BindMount {
        let (f, t) = (cpath(from), cpath(to));
        // SAFETY: valid C strings; a plain bind mount.
        let r = unsafe {
            libc::mount(
                f.as_ptr(),
                t.as_ptr(),
                std::ptr::null(),
                libc::MS_BIND,
                std::ptr::null(),
            )
        };
        assert_eq!(r, 0, "bind mount: {}", std::io::Error::last_os_error());
        BindMount(to.to_path_buf())
    }
}

impl Drop for BindMount {
    fn drop(&mut self) {
        // SAFETY: valid C string.
        unsafe { libc::umount2(cpath(&self.0).as_ptr(), libc::MNT_DETACH) };
    }
}

fn cpath(p: &Path) -> std::ffi::CString {
    std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap()
}

/// Run `ops` on both sides and compare everything.
fn differential(who: &Who, ops: &[Op], opts: &str) -> Result<(), TestCaseError> {
    differential_mounts(who, ops, opts, false)
}

/// As [`differential`]; with `mounted`, a second seeded tree is mounted on
/// `/m` (a bind mount for the kernel, a second hostfs for walkfs).
fn differential_mounts(
    who: &Who,
    ops: &[Op],
    opts: &str,
    mounted: bool,
) -> Result<(), TestCaseError> {
    let kdir = tempfile::tempdir().unwrap();
    let wdir = tempfile::tempdir().unwrap();
    let (kdir2, wdir2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    seed(kdir.path());
    seed(wdir.path());
    let mount = mounted.then(|| {
        seed(kdir2.path());
        seed(wdir2.path());
        std::fs::create_dir(kdir.path().join("m")).unwrap();
        std::fs::create_dir(wdir.path().join("m")).unwrap();
        BindMount::new(kdir2.path(), &kdir.path().join("m"))
    });
    let kernel = run_kernel(kdir.path(), who, ops);
    drop(mount);
    let vfs = walkfs_source::open(
        wdir.path().to_str().unwrap(),
        &SourceOptions::parse(opts).unwrap(),
    )
    .unwrap();
    if mounted {
        let fs = walkfs_hostfs::HostFs::new(wdir2.path()).unwrap();
        vfs.mount(b"/m", std::sync::Arc::new(fs)).unwrap();
    }
    let ctx = vfs.context(Creds {
        uid: who.uid,
        gid: who.gid,
        groups: who.groups.clone(),
        privileged: false,
    });
    let mut fds = Vec::new();
    for (i, op) in ops.iter().enumerate() {
        let w = walkfs_exec(&ctx, op, &mut fds);
        prop_assert_eq!(
            &kernel[i],
            &w,
            "op #{} {:?} (kernel left, walkfs right)",
            i,
            op
        );
        // Every answer is also asked again, now warm in the cache.
        if matches!(
            op,
            Op::Access { .. } | Op::Stat { .. } | Op::Readlink { .. }
        ) {
            let again = walkfs_exec(&ctx, op, &mut fds);
            prop_assert_eq!(&w, &again, "cached answer differs for op #{} {:?}", i, op);
        }
    }
    drop(ctx);
    prop_assert_eq!(
        snapshot(kdir.path()),
        snapshot(wdir.path()),
        "final trees differ"
    );
    if mounted {
        prop_assert_eq!(
            snapshot(kdir2.path()),
            snapshot(wdir2.path()),
            "final mounted trees differ"
        );
    }
    Ok(())
}

/// The same calls by the kernel on the host directory and by the kernel
/// on a `walkfs mount` of a twin directory (FUSE -> vfs -> 9P client ->
/// in-process server -> hostfs): every result and errno, and the final
/// trees, must be equal. The mount is made in this process; the
/// kernel-twin reaches it like any other program.
fn differential_fuse(who: &Who, ops: &[Op], opts: &str) -> Result<(), TestCaseError> {
    use walkfs_fuse::{mount, MountOptions};
    let kdir = tempfile::tempdir().unwrap();
    let wdir = tempfile::tempdir().unwrap();
    let mnt = tempfile::tempdir().unwrap();
    seed(kdir.path());
    seed(wdir.path());
    // RENAME_EXCHANGE has no 9P form (Linux's 9p client refuses it with
    // EINVAL too); those calls are left out of the comparison.
    let ops: Vec<Op> = ops
        .iter()
        .filter(|op| !matches!(op, Op::Rename { flags, .. } if flags & libc::RENAME_EXCHANGE != 0))
        .cloned()
        .collect();
    let ops = &ops[..];
    let kernel = run_kernel(kdir.path(), who, ops);
    // default_permissions: the kernel checks each step of a path as it
    // does on the host (without it FUSE leaves search permission to the
    // file system, and `rename("p/.", ...)` in a directory the caller may
    // not search fails EBUSY before anyone checks).
    let mo = MountOptions::parse(&format!("allow_other,default_permissions,{opts}")).unwrap();
    let vfs = mount::open_source(wdir.path().to_str().unwrap(), &mo, false).unwrap();
    let m = mount::mount(vfs, "difftest", mnt.path(), mo, || {}).unwrap();
    let through = run_kernel(mnt.path(), who, ops);
    m.unmount().unwrap();
    for (i, op) in ops.iter().enumerate() {
        prop_assert_eq!(
            &kernel[i],
            &through[i],
            "op #{} {:?} (host left, walkfs mount right)",
            i,
            op
        );
    }
    prop_assert_eq!(
        snapshot(kdir.path()),
        snapshot(wdir.path()),
        "final trees differ"
    );
    Ok(())
}

fn cases() -> u32 {
    std::env::var("WALKFS_DIFF_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(192)
}

const ROOT: fn() -> Who = || Who {
    uid: 0,
    gid: 0,
    groups: vec![],
};
const USER: fn() -> Who = || Who {
    uid: 1000,
    gid: 1000,
    groups: vec![1001],
};

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn same_as_kernel_as_root(ops in prop::collection::vec(op(), 1..40)) {
        if !need_root() { return Ok(()); }
        differential(&ROOT(), &ops, "")?;
    }

    #[test]
    fn same_as_kernel_as_user(ops in prop::collection::vec(op(), 1..40)) {
        if !need_root() { return Ok(()); }
        differential(&USER(), &ops, "")?;
    }

    #[test]
    fn same_as_kernel_across_mounts(ops in prop::collection::vec(op_in_mount(), 1..30)) {
        if !need_root() { return Ok(()); }
        differential_mounts(&USER(), &ops, "", true)?;
    }

    #[test]
    fn same_through_a_fuse_mount_as_root(ops in prop::collection::vec(op(), 1..30)) {
        if !need_root() { return Ok(()); }
        differential_fuse(&ROOT(), &ops, "cache=loose,negtimeout=-1")?;
    }

    #[test]
    fn same_through_a_fuse_mount_as_user(ops in prop::collection::vec(op(), 1..30)) {
        if !need_root() { return Ok(()); }
        differential_fuse(&USER(), &ops, "cache=loose,negtimeout=-1")?;
    }

    #[test]
    fn same_through_a_fuse_mount_uncached(ops in prop::collection::vec(op(), 1..30)) {
        if !need_root() { return Ok(()); }
        differential_fuse(&USER(), &ops, "cache=none")?;
    }

    #[test]
    fn same_as_kernel_with_every_optimization_off(ops in prop::collection::vec(op(), 1..30)) {
        if !need_root() { return Ok(()); }
        differential(&USER(), &ops, "fastpath=0,fastperm=0,cache_symlinks=0,negtimeout=0")?;
    }
}

/// The semantics list of path_resolution(7), as fixed cases.
#[test]
fn fixed_semantics_cases() {
    if !need_root() {
        return;
    }
    let p = |s: &str| s.as_bytes().to_vec();
    let ops = vec![
        Op::Access {
            dir: None,
            path: p("/loop"),
            mode: 0,
            nofollow: false,
        },
        Op::Access {
            dir: None,
            path: p("/dl"),
            mode: 0,
            nofollow: false,
        },
        Op::Access {
            dir: None,
            path: p("/dl"),
            mode: 0,
            nofollow: true,
        },
        Op::Access {
            dir: None,
            path: p("/l/../b/f"),
            mode: 4,
            nofollow: false,
        },
        Op::Access {
            dir: None,
            path: p("/l/../../f"),
            mode: 4,
            nofollow: false,
        },
        Op::Access {
            dir: None,
            path: p("/f/"),
            mode: 0,
            nofollow: false,
        },
        Op::Stat {
            dir: None,
            path: p("/l/"),
            nofollow: true,
        },
        Op::Access {
            dir: None,
            path: p("/p/x"),
            mode: 4,
            nofollow: false,
        },
        Op::Access {
            dir: None,
            path: p("/../../a/./b/f"),
            mode: 0,
            nofollow: false,
        },
        Op::Access {
            dir: None,
            path: p("/a/abs"),
            mode: 4,
            nofollow: false,
        },
        Op::Mkdir {
            path: p("/dl"),
            mode: 0o755,
        },
        Op::Mkdir {
            path: p("/n/"),
            mode: 0o755,
        },
        Op::Symlink {
            target: p("x"),
            path: p("/m/"),
        },
        Op::Open {
            dir: None,
            path: p("/dl"),
            flags: libc::O_CREAT | libc::O_WRONLY,
            mode: 0o644,
        },
        Op::Open {
            dir: None,
            path: p("/l"),
            flags: libc::O_RDONLY | libc::O_NOFOLLOW,
            mode: 0,
        },
        Op::Open {
            dir: None,
            path: p("/l"),
            flags: libc::O_PATH | libc::O_NOFOLLOW,
            mode: 0,
        },
        Op::Rename {
            old: p("/a"),
            new: p("/a/b/z"),
            flags: 0,
        },
        Op::Rename {
            old: p("/a/b/f"),
            new: p("/f/"),
            flags: 0,
        },
        Op::Unlink {
            path: p("/a/."),
            rmdir: true,
        },
        Op::Unlink {
            path: p("/a/.."),
            rmdir: true,
        },
        Op::Link {
            old: p("/a"),
            new: p("/ln"),
            follow: false,
        },
        Op::Link {
            old: p("/u/g"),
            new: p("/w/ln"),
            follow: false,
        },
        Op::Chmod {
            path: p("/l"),
            mode: 0o700,
            nofollow: true,
        },
        Op::Chown {
            path: p("/u/g"),
            uid: 1001,
            gid: u32::MAX,
            nofollow: false,
        },
        // A chown that changes neither id still drops set-id bits (a
        // mode change: the owner's alone to make).
        Op::Chmod {
            path: p("/f"),
            mode: 0o2775,
            nofollow: false,
        },
        Op::Chown {
            path: p("/f"),
            uid: u32::MAX,
            gid: u32::MAX,
            nofollow: false,
        },
        Op::Chmod {
            path: p("/w/s"),
            mode: 0o6777,
            nofollow: false,
        },
        Op::Chown {
            path: p("/w/s"),
            uid: u32::MAX,
            gid: u32::MAX,
            nofollow: false,
        },
    ];
    for who in [ROOT(), USER()] {
        differential(&who, &ops, "").unwrap();
    }
}

/// Special files (fifos, sockets, devices; mknod's errors in Linux's
/// order) and `readlinkat` with an empty path from every kind of
/// descriptor, as root and as a user, through the vfs and through a FUSE
/// mount. Nothing here opens a fifo (a kernel open would block).
#[test]
fn special_files_and_empty_readlinkat() {
    if !need_root() {
        return;
    }
    let p = |s: &str| s.as_bytes().to_vec();
    let open = |path: &str, flags: i32| Op::Open {
        dir: None,
        path: p(path),
        flags,
        mode: 0,
    };
    let readlink = |dir: Option<usize>, path: &str| Op::ReadlinkAt { dir, path: p(path) };
    let mknod = |path: &str, mode: u32, dev: u64| Op::Mknod {
        path: p(path),
        mode,
        dev,
    };
    let stat = |path: &str| Op::Stat {
        dir: None,
        path: p(path),
        nofollow: true,
    };
    let mut ops = vec![
        open("/a", libc::O_RDONLY | libc::O_DIRECTORY),
        open("/a", libc::O_PATH),
        open("/f", libc::O_RDONLY),
        open("/f", libc::O_PATH),
        open("/l", libc::O_PATH | libc::O_NOFOLLOW),
        open("/l", libc::O_RDONLY),
        open("/dl", libc::O_PATH | libc::O_NOFOLLOW),
        readlink(None, ""),
        readlink(None, "/l"),
        readlink(Some(0), "../l"),
        readlink(Some(0), "b"),
        readlink(Some(1), "../dl"),
    ];
    for slot in 0..7 {
        ops.push(readlink(Some(slot), ""));
    }
    let dev = libc::makedev(1, 3);
    ops.extend([
        mknod("/w/fifo", libc::S_IFIFO | 0o640, 0),
        mknod("/w/sock", libc::S_IFSOCK | 0o600, 0),
        mknod("/w/chr", libc::S_IFCHR | 0o600, dev),
        mknod("/w/blk", libc::S_IFBLK | 0o600, libc::makedev(7, 200)),
        mknod("/w/reg", 0o604, 0),
        mknod("/w/reg2", libc::S_IFREG | 0o600, 0),
        mknod("/w/fifo", libc::S_IFIFO | 0o600, 0),
        mknod("/w/dir", libc::S_IFDIR | 0o755, 0),
        mknod("/w/bad", libc::S_IFMT | 0o644, 0),
        mknod("/w/new/", libc::S_IFIFO | 0o644, 0),
        mknod("/nodir/fifo", libc::S_IFIFO | 0o644, 0),
        mknod("/f/fifo", libc::S_IFIFO | 0o644, 0),
        mknod("/p/fifo", libc::S_IFIFO | 0o644, 0),
        mknod("/a/fifo", libc::S_IFSOCK | 0o644, 0),
        mknod("/dl", libc::S_IFIFO | 0o644, 0),
        mknod("/u/set", libc::S_IFIFO | 0o6777, 0),
        stat("/w/fifo"),
        stat("/w/sock"),
        stat("/w/chr"),
        stat("/w/reg"),
        stat("/u/set"),
        readlink(None, "/w/fifo"),
        Op::Rename {
            old: p("/w/fifo"),
            new: p("/w/fifo2"),
            flags: 0,
        },
        Op::Link {
            old: p("/w/sock"),
            new: p("/w/sock2"),
            follow: false,
        },
        Op::Chmod {
            path: p("/w/sock2"),
            mode: 0o666,
            nofollow: false,
        },
        stat("/w/sock"),
        Op::Unlink {
            path: p("/w/fifo2"),
            rmdir: false,
        },
        Op::List { path: p("/w") },
    ]);
    for who in [ROOT(), USER()] {
        differential(&who, &ops, "").unwrap();
        differential(&who, &ops, "cache_symlinks=0,negtimeout=0").unwrap();
        differential_fuse(&who, &ops, "cache=loose,negtimeout=-1").unwrap();
        differential_fuse(&who, &ops, "cache=none").unwrap();
    }
}

/// Found by the property test: a user's write to its own set-group-id,
/// group-executable file drops the bit (the kernel's file_remove_privs).
#[test]
fn write_by_user_drops_setgid() {
    if !need_root() {
        return;
    }
    let ops = vec![
        Op::Open {
            dir: None,
            path: b"g".to_vec(),
            flags: libc::O_CREAT | libc::O_WRONLY,
            mode: 0o2775,
        },
        Op::Write {
            slot: 0,
            len: 1,
            byte: 0,
        },
        Op::Stat {
            dir: None,
            path: b"g".to_vec(),
            nofollow: false,
        },
        Op::Open {
            dir: None,
            path: b"h".to_vec(),
            flags: libc::O_CREAT | libc::O_WRONLY,
            mode: 0o4755,
        },
        Op::Ftruncate { slot: 1, len: 3 },
        Op::Stat {
            dir: None,
            path: b"h".to_vec(),
            nofollow: false,
        },
    ];
    differential(&USER(), &ops, "").unwrap();
    differential(&ROOT(), &ops, "").unwrap();
}

/// A user's write to and truncate of root's set-id file that everyone
/// may write: the kernel clears both bits (through a FUSE mount it asks
/// for that with a chmod the daemon must accept from a non-owner).
#[test]
fn write_by_non_owner_drops_set_id_bits() {
    if !need_root() {
        return;
    }
    let stat = || Op::Stat {
        dir: None,
        path: b"/w/s".to_vec(),
        nofollow: false,
    };
    let ops = vec![
        Op::Open {
            dir: None,
            path: b"/w/s".to_vec(),
            flags: libc::O_WRONLY,
            mode: 0,
        },
        Op::Write {
            slot: 0,
            len: 1,
            byte: 7,
        },
        stat(),
        Op::Chmod {
            path: b"/w/s".to_vec(),
            mode: 0o6777,
            nofollow: false,
        },
        Op::Ftruncate { slot: 0, len: 2 },
        stat(),
        Op::Chmod {
            path: b"/w/s".to_vec(),
            mode: 0o777,
            nofollow: false,
        },
    ];
    differential(&USER(), &ops, "").unwrap();
    differential_fuse(&USER(), &ops, "cache=none").unwrap();
    differential_fuse(&USER(), &ops, "cache=loose,negtimeout=-1").unwrap();
}

/// Mounts: `..` out of a mount root, EXDEV across mounts, EBUSY on the
/// mount point.
#[test]
fn fixed_mount_cases() {
    if !need_root() {
        return;
    }
    let p = |s: &str| s.as_bytes().to_vec();
    let ops = vec![
        Op::Access {
            dir: None,
            path: p("/m/../a/b/f"),
            mode: 4,
            nofollow: false,
        },
        Op::Access {
            dir: None,
            path: p("/m/a/../../f"),
            mode: 4,
            nofollow: false,
        },
        Op::Access {
            dir: None,
            path: p("/m/l/f"),
            mode: 4,
            nofollow: false,
        },
        Op::Access {
            dir: None,
            path: p("/m/a/abs"),
            mode: 4,
            nofollow: false,
        },
        Op::Rename {
            old: p("/m/f"),
            new: p("/f2"),
            flags: 0,
        },
        Op::Link {
            old: p("/m/f"),
            new: p("/f3"),
            follow: false,
        },
        Op::Rename {
            old: p("/m"),
            new: p("/m2"),
            flags: 0,
        },
        Op::Unlink {
            path: p("/m"),
            rmdir: true,
        },
        // The mount point's own (covered) directory decides the
        // permission, not the root of what is mounted on it: as a user,
        // EACCES before EBUSY.
        Op::Rename {
            old: p("m/../m"),
            new: p("w/a"),
            flags: 0,
        },
        Op::Unlink {
            path: p("m"),
            rmdir: false,
        },
        Op::Rename {
            old: p("/m/a"),
            new: p("/m/w/a"),
            flags: 0,
        },
        Op::Stat {
            dir: None,
            path: p("/m/w/a/b/f"),
            nofollow: false,
        },
    ];
    for who in [ROOT(), USER()] {
        differential_mounts(&who, &ops, "", true).unwrap();
    }
}
