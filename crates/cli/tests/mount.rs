//! `walkfs mount` as users run it: a real FUSE mount of a local directory
//! through the whole stack (FUSE -> vfs -> 9P client -> in-process server
//! -> hostfs), real compilers and git on it, and unmounts that leave
//! nothing behind. Needs root and /dev/fuse (CI has both).

use std::process::Command;

mod common;
use common::*;

#[test]
fn a_c_project_builds_and_runs_from_the_mount() {
    build_on_the_mount("cache=loose,negtimeout=-1", false);
    build_on_the_mount("cache=loose,negtimeout=-1", true);
}

/// Coherent mounts write through; over 9P the vfs's write-back gathers
/// small writes itself (crates/vfs/src/writeback.rs): the compiler's and
/// linker's output must come out the same.
#[test]
fn a_c_project_builds_and_runs_from_a_coherent_mount() {
    build_on_the_mount("cache=coherent,negtimeout=-1", false);
    build_on_the_mount("cache=coherent,negtimeout=-1", true);
}

/// A C build on a mount of a local directory: the vfs over it, or with
/// `via_9p` through the whole stack (whose RPCs `walkfs stats` shows).
fn build_on_the_mount(opts: &str, via_9p: bool) {
    let t = tempfile::tempdir().expect("tempdir");
    let (src, mnt) = (t.path().join("src"), t.path().join("mnt"));
    std::fs::create_dir_all(src.join("include")).expect("mkdir");
    std::fs::create_dir(&mnt).expect("mkdir");
    std::fs::write(
        src.join("include/greet.h"),
        "#define GREETING \"hello from walkfs\"\nint twice(int);\n",
    )
    .expect("write");
    std::fs::write(
        src.join("main.c"),
        "#include <stdio.h>\n#include \"greet.h\"\nint main(void){printf(\"%s %d\\n\", GREETING, twice(21));return 0;}\n",
    )
    .expect("write");
    std::fs::write(src.join("twice.c"), "int twice(int x){return 2*x;}\n").expect("write");
    std::fs::write(
        src.join("Makefile"),
        "prog: main.o twice.o\n\tcc -o $@ $^\n%.o: %.c\n\tcc -Iinclude -c -o $@ $<\n",
    )
    .expect("write");
    let _m = if via_9p {
        Mount::via_9p(&src, &mnt, opts)
    } else {
        Mount::new(&src, &mnt, opts)
    };
    run(Command::new("make").arg("-s").arg("-C").arg(&mnt));
    let o = run(&mut Command::new(mnt.join("prog")));
    assert_eq!(String::from_utf8_lossy(&o.stdout), "hello from walkfs 42\n");
    // What the build wrote through the mount is on the host.
    assert!(src.join("prog").is_file() && src.join("main.o").is_file());
    // Everything ran behind its caller is done, none failed.
    run(walkfs().arg("sync").arg(&mnt));
    // Counters of the mount: the build's lookups, and through 9P its RPCs.
    let o = run(walkfs().arg("stats").arg(&mnt).arg("--json"));
    let s: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    assert!(s["vfs_slow_lookups"].as_u64().unwrap_or(0) > 0, "{s}");
    assert_eq!(s["writeback_failed"].as_u64(), Some(0), "{s}");
    let rpcs = s["total_rpcs"].as_u64().unwrap_or(0);
    assert_eq!(rpcs > 0, via_9p, "{s}");
    if via_9p {
        // A build's unlinks (make's temporaries), writes and times ran
        // behind it.
        assert!(s["writeback_submitted"].as_u64().unwrap_or(0) > 0, "{s}");
        let o = run(walkfs().arg("stats").arg(&mnt));
        assert!(String::from_utf8_lossy(&o.stdout).contains("Twalk"));
    }
}

/// What tmux, ssh's ControlPath and build daemons do in a working
/// directory: a fifo and a unix socket made on the mount carry data
/// between processes (the kernel opens them; walkfs only made the nodes),
/// in each cache mode.
#[test]
fn fifos_and_unix_sockets_work_on_the_mount() {
    use std::io::{Read, Write};
    use std::os::unix::fs::FileTypeExt;
    for opts in ["cache=loose,negtimeout=-1", "cache=coherent", "cache=none"] {
        let t = tempfile::tempdir().expect("tempdir");
        let (src, mnt) = (t.path().join("src"), t.path().join("mnt"));
        std::fs::create_dir_all(&src).expect("mkdir");
        std::fs::create_dir(&mnt).expect("mkdir");
        let _m = Mount::new(&src, &mnt, opts);
        run(Command::new("mkfifo").arg(mnt.join("fifo")));
        assert!(std::fs::symlink_metadata(src.join("fifo"))
            .expect("the fifo on the host")
            .file_type()
            .is_fifo());
        let fifo = mnt.join("fifo");
        let writer = std::thread::spawn(move || {
            let mut w = std::fs::OpenOptions::new()
                .write(true)
                .open(&fifo)
                .expect("open the fifo for writing");
            w.write_all(b"through the fifo").expect("write");
        });
        let mut got = String::new();
        std::fs::File::open(mnt.join("fifo"))
            .expect("open the fifo for reading")
            .read_to_string(&mut got)
            .expect("read");
        writer.join().expect("writer");
        assert_eq!(got, "through the fifo", "{opts}");

        let path = mnt.join("daemon.sock");
        let l = std::os::unix::net::UnixListener::bind(&path).expect("bind on the mount");
        assert!(std::fs::symlink_metadata(src.join("daemon.sock"))
            .expect("the socket on the host")
            .file_type()
            .is_socket());
        let mut c = std::os::unix::net::UnixStream::connect(&path).expect("connect");
        let (mut a, _) = l.accept().expect("accept");
        c.write_all(b"ping").expect("send");
        let mut buf = [0u8; 4];
        a.read_exact(&mut buf).expect("receive");
        assert_eq!(&buf, b"ping", "{opts}");
        std::fs::remove_file(&path).expect("unlink the socket");
        std::fs::remove_file(mnt.join("fifo")).expect("unlink the fifo");
        // Unlinks go to the server without waiting (asynchronous changes):
        // the host has them a moment later; the mount at once.
        assert!(std::fs::read_dir(&mnt).expect("list").next().is_none());
        wait_until("the host to see the unlinks", || {
            std::fs::read_dir(&src).expect("list").next().is_none()
        });
    }
}

#[test]
fn git_works_on_the_mount() {
    git_on_the_mount("cache=loose,negtimeout=-1");
}

#[test]
fn git_works_on_a_coherent_mount() {
    git_on_the_mount("cache=coherent,negtimeout=-1");
}

fn git_on_the_mount(opts: &str) {
    let t = tempfile::tempdir().expect("tempdir");
    let (src, mnt) = (t.path().join("src"), t.path().join("mnt"));
    std::fs::create_dir_all(src.join("dir")).expect("mkdir");
    std::fs::create_dir(&mnt).expect("mkdir");
    for i in 0..20 {
        std::fs::write(src.join(format!("dir/f{i}.txt")), format!("{i}\n")).expect("write");
    }
    let _m = Mount::new(&src, &mnt, opts);
    let git = |args: &[&str]| {
        let mut c = Command::new("git");
        c.arg("-C").arg(&mnt).args(args);
        c.env("GIT_AUTHOR_NAME", "t").env("GIT_AUTHOR_EMAIL", "t@e");
        c.env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@e");
        run(&mut c)
    };
    git(&["init", "-q"]);
    git(&["add", "."]);
    git(&["commit", "-q", "-m", "first"]);
    let o = git(&["status", "--porcelain"]);
    assert_eq!(String::from_utf8_lossy(&o.stdout), "", "clean after commit");
    std::fs::write(mnt.join("dir/f3.txt"), "changed\n").expect("write");
    std::fs::write(mnt.join("new.txt"), "new\n").expect("write");
    let o = git(&["status", "--porcelain"]);
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        out.contains(" M dir/f3.txt") && out.contains("?? new.txt"),
        "{out}"
    );
    let o = git(&["log", "--oneline"]);
    assert!(String::from_utf8_lossy(&o.stdout).contains("first"));
    // The host sees the same repository.
    let o = run(Command::new("git")
        .arg("-C")
        .arg(&src)
        .args(["status", "--porcelain"]));
    assert!(String::from_utf8_lossy(&o.stdout).contains(" M dir/f3.txt"));
}

#[test]
fn unmount_leaves_no_process_or_mount_behind() {
    let t = tempfile::tempdir().expect("tempdir");
    let (src, mnt) = (t.path().join("src"), t.path().join("mnt"));
    std::fs::create_dir(&src).expect("mkdir");
    std::fs::create_dir(&mnt).expect("mkdir");
    std::fs::write(src.join("f"), "x").expect("write");
    // umount(8).
    let m = Mount::new(&src, &mnt, "");
    assert_eq!(std::fs::read_to_string(mnt.join("f")).expect("read"), "x");
    assert_eq!(mount_processes(&mnt), 1);
    run(Command::new("umount").arg(&mnt));
    wait_until("mount process exits after umount", || {
        mount_processes(&mnt) == 0
    });
    assert!(!mounted(&mnt));
    drop(m);
    // fusermount3 -u.
    let m = Mount::new(&src, &mnt, "cache=none");
    run(Command::new("fusermount3").arg("-u").arg(&mnt));
    wait_until("mount process exits after fusermount3 -u", || {
        mount_processes(&mnt) == 0
    });
    assert!(!mounted(&mnt));
    drop(m);
    // SIGTERM to the mount process (and SIGINT to a foreground one).
    for (fg, sig) in [(false, libc::SIGTERM), (true, libc::SIGINT)] {
        let child = if fg {
            let c = walkfs()
                .arg("mount")
                .arg(&src)
                .arg(&mnt)
                .arg("--foreground")
                .spawn()
                .expect("spawn");
            wait_until("foreground mount up", || mounted(&mnt));
            Some(c)
        } else {
            let m = Mount::new(&src, &mnt, "");
            std::mem::forget(m);
            None
        };
        let pid = std::fs::read_dir("/proc")
            .expect("proc")
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
            .find(|p| {
                std::fs::read(format!("/proc/{p}/cmdline")).is_ok_and(|c| {
                    let s = String::from_utf8_lossy(&c).replace('\0', " ");
                    s.contains(" mount ") && s.contains(mnt.to_str().unwrap_or("?"))
                })
            })
            .expect("the mount process");
        // SAFETY: a signal to a process of this test.
        unsafe { libc::kill(pid, sig) };
        wait_until("mount process exits on a signal", || {
            mount_processes(&mnt) == 0
        });
        assert!(!mounted(&mnt), "signal {sig} left the mount behind");
        if let Some(mut c) = child {
            assert!(c.wait().expect("wait").success());
        }
    }
}

#[test]
fn mount_t_walkfs_through_the_helper() {
    let t = tempfile::tempdir().expect("tempdir");
    let (src, mnt, bin) = (
        t.path().join("src"),
        t.path().join("mnt"),
        t.path().join("bin"),
    );
    for d in [&src, &mnt, &bin] {
        std::fs::create_dir(d).expect("mkdir");
    }
    std::fs::write(src.join("hello"), "via mount(8)\n").expect("write");
    // mount(8) looks for /sbin/mount.TYPE; the helper is the walkfs binary
    // under that name (scripts/install.sh links it there). Run it as
    // mount(8) would.
    let helper = bin.join("mount.walkfs");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_walkfs"), &helper).expect("symlink");
    let o = Command::new(&helper)
        .arg(&src)
        .arg(&mnt)
        .args(["-o", "rw,nosuid,nodev,cache=loose,negtimeout=-1"])
        .output()
        .expect("run helper");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let _m = Mount { mnt: mnt.clone() };
    assert!(mounted(&mnt));
    assert_eq!(
        std::fs::read_to_string(mnt.join("hello")).expect("read"),
        "via mount(8)\n"
    );
    // Bad options are refused before anything is mounted.
    let o = walkfs()
        .arg("mount")
        .arg(&src)
        .arg(t.path().join("src"))
        .args(["-o", "nonsense=1"])
        .output()
        .expect("run");
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("nonsense"));
}

/// A script unmounts walkfs and mounts something else on the same
/// directory at once: the exiting walkfs process must not unmount the
/// newcomer (fuser's own session end would have).
#[test]
fn an_outside_unmount_never_takes_the_next_mount_with_it() {
    let t = tempfile::tempdir().expect("tempdir");
    let (src, mnt, other) = (
        t.path().join("src"),
        t.path().join("mnt"),
        t.path().join("other"),
    );
    for d in [&src, &mnt, &other] {
        std::fs::create_dir(d).expect("mkdir");
    }
    std::fs::write(other.join("mark"), "other").expect("write");
    for _ in 0..3 {
        let m = Mount::new(&src, &mnt, "cache=loose,negtimeout=-1");
        run(Command::new("umount").arg(&mnt));
        run(Command::new("mount").arg("--bind").arg(&other).arg(&mnt));
        wait_until("the walkfs process exits", || mount_processes(&mnt) == 0);
        std::thread::sleep(std::time::Duration::from_millis(200));
        assert!(mounted(&mnt), "the bind mount was unmounted");
        assert_eq!(
            std::fs::read_to_string(mnt.join("mark")).expect("read"),
            "other"
        );
        run(Command::new("umount").arg(&mnt));
        std::mem::forget(m);
    }
}

/// `host_behind=1`: the host calls of unlinks, renames and attribute
/// changes run on hostfs's own thread, behind the caller (hostfs
/// behind.rs). `rm -rf` of a tree the host made (directories the vfs
/// never listed whole, so each rmdir is the host's to refuse) must wait
/// for the unlinks queued in each directory; a build and git must work
/// as without it.
#[test]
fn changes_behind_the_caller_on_a_local_mount() {
    let t = tempfile::tempdir().expect("tempdir");
    let (src, mnt) = (t.path().join("src"), t.path().join("mnt"));
    std::fs::create_dir(&mnt).expect("mkdir");
    for d in 0..40 {
        let dir = src.join(format!("tree/d{d}/sub"));
        std::fs::create_dir_all(&dir).expect("mkdir");
        for f in 0..25 {
            std::fs::write(dir.join(format!("f{f}")), b"x").expect("write");
            std::fs::write(src.join(format!("tree/d{d}/g{f}")), b"y").expect("write");
        }
    }
    for opts in ["cache=loose,host_behind=1", "cache=coherent,host_behind=1"] {
        let _m = Mount::new(&src, &mnt, opts);
        if !src.join("tree").exists() {
            run(Command::new("cp")
                .arg("-a")
                .arg(mnt.join("copy"))
                .arg(mnt.join("tree")));
        }
        run(Command::new("cp")
            .arg("-a")
            .arg(mnt.join("tree"))
            .arg(mnt.join("copy")));
        run(Command::new("rm").arg("-rf").arg(mnt.join("tree")));
        run(walkfs().arg("sync").arg(&mnt));
        assert!(!src.join("tree").exists(), "{opts}: tree left on the host");
        assert_eq!(
            std::fs::read_dir(src.join("copy/d7/sub"))
                .expect("list")
                .count(),
            25
        );
    }
    build_on_the_mount("cache=loose,negtimeout=-1,host_behind=1", false);
    git_on_the_mount("cache=coherent,negtimeout=-1,host_behind=1");
}
