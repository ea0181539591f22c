//! The FUSE front end on the kernels people run in VMs: every mount here
//! answers INIT as an older kernel would have asked (the test mode
//! `WALKFS_FUSE_AS_KERNEL`: only that kernel's flags, in its minor
//! version of the protocol), and the same calls must give the same
//! results and errnos as on the host directory itself. The calls are the
//! ones whose path through FUSE changes with what INIT agreed: writes and
//! truncates by a writer without CAP_FSETID on set-id files (kill-priv v2
//! from 5.11, or the kernel's own SETATTR before), opens with O_TRUNC,
//! chown, extended attributes, listings (READDIRPLUS), symlinks (cached
//! from 4.20), renames and the errors of the directory calls.

mod common;

use std::ffi::CString;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;

use common::Mount;

/// The names `WALKFS_FUSE_AS_KERNEL` knows, and the protocol minor each
/// must agree on (crates/fusewire/src/abi.rs, `KERNELS`).
const KERNELS: [(&str, u32); 4] = [("5.10", 32), ("5.15", 34), ("6.1", 37), ("6.8", 39)];

/// `nobody`: a writer without CAP_FSETID.
const NOBODY: u32 = 65534;

fn errno(e: &std::io::Error) -> String {
    format!("errno {}", e.raw_os_error().unwrap_or(0))
}

fn show<T: std::fmt::Debug>(r: std::io::Result<T>) -> String {
    match r {
        Ok(v) => format!("ok {v:?}"),
        Err(e) => errno(&e),
    }
}

/// Mode, links, size and uid of `p` (lstat), or the errno.
fn st(p: &Path) -> String {
    match fs::symlink_metadata(p) {
        Ok(m) => format!(
            "mode {:o} nlink {} size {} uid {}",
            m.mode(),
            m.nlink(),
            m.size(),
            m.uid()
        ),
        Err(e) => errno(&e),
    }
}

/// Run `script` with `sh` as `nobody`; its exit status.
fn as_nobody(script: &str, file: &Path) -> String {
    let s = Command::new("sh")
        .args(["-c", script, "sh"])
        .arg(file)
        .uid(NOBODY)
        .gid(NOBODY)
        .status()
        .expect("run sh as nobody");
    format!("exit {:?}", s.code())
}

fn xattr(op: &str, p: &Path, name: &str, value: &[u8]) -> String {
    let c = CString::new(p.as_os_str().as_bytes()).expect("path");
    let n = CString::new(name).expect("name");
    let mut buf = [0u8; 256];
    // SAFETY: valid C strings and a buffer of the length passed.
    let r = unsafe {
        match op {
            "set" => libc::lsetxattr(
                c.as_ptr(),
                n.as_ptr(),
                value.as_ptr().cast(),
                value.len(),
                0,
            ) as isize,
            "get" => libc::lgetxattr(c.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), buf.len()),
            "list" => libc::llistxattr(c.as_ptr(), buf.as_mut_ptr().cast(), buf.len()),
            _ => libc::lremovexattr(c.as_ptr(), n.as_ptr()) as isize,
        }
    };
    if r < 0 {
        return errno(&std::io::Error::last_os_error());
    }
    let got = &buf[..if op == "get" || op == "list" {
        r as usize
    } else {
        0
    }];
    format!("ok {}", String::from_utf8_lossy(got).replace('\0', "|"))
}

/// The calls, in `root`; what each gave, one line each.
fn transcript(root: &Path) -> Vec<String> {
    let mut t = Vec::new();
    let mut log = |what: &str, r: String| t.push(format!("{what}: {r}"));
    let d = root.join("d");
    log("mkdir d", show(fs::create_dir(&d)));
    log(
        "chmod d 0777",
        show(fs::set_permissions(&d, fs::Permissions::from_mode(0o777))),
    );
    let f = d.join("f");
    log("write f", show(fs::write(&f, b"hello")));
    log(
        "append f",
        show(
            fs::OpenOptions::new()
                .append(true)
                .open(&f)
                .and_then(|mut h| {
                    use std::io::Write;
                    h.write_all(b" world")
                }),
        ),
    );
    log("stat f", st(&f));
    log("read f", show(fs::read_to_string(&f)));
    log("rename f g", show(fs::rename(&f, d.join("g"))));
    log("stat f (renamed)", st(&f));
    log("link g h", show(fs::hard_link(d.join("g"), d.join("h"))));
    log("stat g", st(&d.join("g")));
    log(
        "symlink s",
        show(std::os::unix::fs::symlink("g", d.join("s"))),
    );
    log("readlink s", show(fs::read_link(d.join("s"))));
    log("read s", show(fs::read_to_string(d.join("s"))));

    // Set-id bits and writers without CAP_FSETID.
    let su = d.join("setuid");
    log("write setuid", show(fs::write(&su, b"#!/bin/sh\n")));
    log(
        "chmod 6777",
        show(fs::set_permissions(&su, fs::Permissions::from_mode(0o6777))),
    );
    log("append as nobody", as_nobody("printf x >> \"$1\"", &su));
    log("stat after append", st(&su));
    log(
        "chmod 6777 again",
        show(fs::set_permissions(&su, fs::Permissions::from_mode(0o6777))),
    );
    log("truncate as nobody", as_nobody("truncate -s 3 \"$1\"", &su));
    log("stat after truncate", st(&su));
    log(
        "chmod 6777 third",
        show(fs::set_permissions(&su, fs::Permissions::from_mode(0o6777))),
    );
    log("O_TRUNC as nobody", as_nobody(": > \"$1\"", &su));
    log("stat after O_TRUNC", st(&su));
    log(
        "chmod 6755",
        show(fs::set_permissions(&su, fs::Permissions::from_mode(0o6755))),
    );
    log(
        "chown 1:1",
        show(std::os::unix::fs::lchown(&su, Some(1), Some(1))),
    );
    log("stat after chown", st(&su));
    log(
        "append as root",
        show(
            fs::OpenOptions::new()
                .append(true)
                .open(&su)
                .and_then(|mut h| {
                    use std::io::Write;
                    h.write_all(b"y")
                }),
        ),
    );
    log(
        "chmod 4755 as root then write",
        show(fs::set_permissions(&su, fs::Permissions::from_mode(0o4755))),
    );
    log("write as root", show(fs::write(&su, b"z")));
    log("stat after root write", st(&su));

    // A size past what the host's file system takes: its EFBIG is the
    // caller's, at the call (ext4 stops at 16 TiB).
    let big = d.join("big");
    log(
        "ftruncate past 2^49",
        show(fs::File::create(&big).and_then(|f| f.set_len(1 << 49))),
    );
    log("stat big", st(&big));

    // Extended attributes.
    let g = d.join("g");
    log("setxattr", xattr("set", &g, "user.walkfs", b"value"));
    log("getxattr", xattr("get", &g, "user.walkfs", b""));
    log("listxattr", xattr("list", &g, "", b""));
    log("getxattr missing", xattr("get", &g, "user.none", b""));
    log("removexattr", xattr("remove", &g, "user.walkfs", b""));
    log("getxattr removed", xattr("get", &g, "user.walkfs", b""));

    // Errors.
    log("mkdir d again", show(fs::create_dir(&d)));
    log(
        "O_EXCL g",
        show(
            fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&g)
                .map(|_| ()),
        ),
    );
    log("unlink none", show(fs::remove_file(d.join("none"))));
    log("rmdir d (not empty)", show(fs::remove_dir(&d)));
    log("rename d into d/e", show(fs::rename(&d, d.join("e"))));
    log("open g/x", show(fs::read(g.join("x"))));
    log("unlink d", show(fs::remove_file(&d)));

    // Listings: READDIRPLUS, sizes through it.
    fs::create_dir(d.join("many")).expect("mkdir many");
    for i in 0..40 {
        fs::write(d.join(format!("many/f{i:02}")), vec![b'x'; i]).expect("write many");
    }
    let mut names: Vec<_> = fs::read_dir(d.join("many"))
        .expect("readdir")
        .map(|e| {
            let e = e.expect("entry");
            let m = e.metadata().expect("stat entry");
            format!("{}={}", e.file_name().to_string_lossy(), m.len())
        })
        .collect();
    names.sort();
    log("readdir many", names.join(" "));
    let mut top: Vec<_> = fs::read_dir(&d)
        .expect("readdir d")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    top.sort();
    log("readdir d", top.join(" "));
    let mtime = |p: &Path| fs::metadata(p).map(|m| (m.mtime(), m.mtime_nsec()));
    let before = mtime(&g);
    log("unlink h", show(fs::remove_file(d.join("h"))));
    log("stat g after unlink h", st(&g));
    // An unlink changes the other name's link count and ctime, never its
    // mtime.
    log(
        "mtime of g kept",
        format!("{}", before.is_ok() && before.ok() == mtime(&g).ok()),
    );
    t
}

/// The protocol minor a mount's daemon agreed on (`walkfs stats`).
fn agreed_minor(mnt: &Path) -> u64 {
    let o = common::run(common::walkfs().arg("stats").arg(mnt).arg("--json"));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("stats json");
    v["fuse_minor"].as_u64().expect("fuse_minor in stats")
}

fn same_as_host(opts: &str, via_9p: bool) {
    let d = common::dirs();
    // `nobody` must reach the directories.
    fs::set_permissions(d.t.path(), fs::Permissions::from_mode(0o755)).expect("chmod tempdir");
    let host = d.t.path().join("host");
    fs::create_dir(&host).expect("mkdir host");
    let want = transcript(&host);
    assert!(
        want.iter()
            .any(|l| l.starts_with("stat after append: mode 100777")),
        "{want:#?}"
    );
    // walkfs has no extended attributes yet (every call EOPNOTSUPP): those
    // lines must give what the unmasked kernel's mount gives.
    let unmasked = {
        let src = d.src.join("unmasked");
        fs::create_dir(&src).expect("mkdir src");
        let extra: &[&str] = if via_9p { &["--via-9p"] } else { &[] };
        let m = Mount::with_env(&src, &d.mnt, &format!("allow_other,{opts}"), extra, &[]);
        transcript(&m.mnt)
    };
    let want: Vec<String> = want
        .iter()
        .zip(&unmasked)
        .map(|(h, u)| {
            if h.contains("xattr") {
                u.clone()
            } else {
                h.clone()
            }
        })
        .collect();
    for (w, u) in want.iter().zip(&unmasked) {
        assert_eq!(u, w, "the unmasked kernel, -o {opts}");
    }
    for (kernel, minor) in KERNELS {
        let src = d.src.join(kernel);
        fs::create_dir(&src).expect("mkdir src");
        let opts = format!("allow_other,{opts}");
        let extra: &[&str] = if via_9p { &["--via-9p"] } else { &[] };
        let m = Mount::with_env(
            &src,
            &d.mnt,
            &opts,
            extra,
            &[("WALKFS_FUSE_AS_KERNEL", kernel)],
        );
        assert_eq!(agreed_minor(&m.mnt), u64::from(minor), "as Linux {kernel}");
        let got = transcript(&m.mnt);
        for (w, g) in want.iter().zip(&got) {
            assert_eq!(
                g,
                w,
                "as Linux {kernel}, -o {opts}{}",
                if via_9p { " --via-9p" } else { "" }
            );
        }
        assert_eq!(got.len(), want.len());
        drop(m);
        // What reached the host directory is what the host made itself.
        assert_eq!(
            transcript_of_tree(&src),
            transcript_of_tree(&host),
            "as Linux {kernel}"
        );
    }
}

/// Every path under `root` with its mode, size and bytes.
fn transcript_of_tree(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(p) = stack.pop() {
        for e in fs::read_dir(&p).expect("readdir") {
            let e = e.expect("entry");
            let m = fs::symlink_metadata(e.path()).expect("lstat");
            let rel = e
                .path()
                .strip_prefix(root)
                .expect("under root")
                .to_path_buf();
            let body = if m.is_file() {
                fs::read(e.path()).expect("read")
            } else {
                Vec::new()
            };
            out.push(format!(
                "{} {:o} {} {:?}",
                rel.display(),
                m.mode(),
                m.size(),
                body
            ));
            if m.is_dir() {
                stack.push(e.path());
            }
        }
    }
    out.sort();
    out
}

#[test]
fn local_mount_as_older_kernels() {
    same_as_host("", false);
}

#[test]
fn coherent_9p_mount_as_older_kernels() {
    same_as_host("cache=coherent", true);
}

#[test]
fn an_unknown_kernel_is_refused_by_name() {
    let d = common::dirs();
    let o = common::walkfs()
        .env("WALKFS_FUSE_AS_KERNEL", "4.19")
        .arg("mount")
        .arg(&d.src)
        .arg(&d.mnt)
        .output()
        .expect("run walkfs mount");
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("WALKFS_FUSE_AS_KERNEL=4.19") && err.contains("6.1"),
        "{err}"
    );
    assert_eq!(
        err.matches("WALKFS_FUSE_AS_KERNEL").count(),
        1,
        "said once: {err}"
    );
    assert!(!common::mounted(&d.mnt));
}
