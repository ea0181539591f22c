//! Extended attributes and POSIX ACLs through a local mount, against the
//! host directory itself: the same calls give the same values and
//! errnos; what is set on one side is seen on the other; `cp -a` of a
//! tree with attributes and ACLs, in through the mount and back out,
//! keeps them (`getfattr -d -m -`, `getfacl -R`); a default ACL decides a
//! new file's mode in place of the umask; an ACL grants a named user what
//! the mode bits would not; a file's capability survives `setcap` and
//! goes with a write.

mod common;

use std::path::Path;
use std::process::Command;

use common::xattr::{get, list, remove, set};
use common::{dirs, run, Mount};

/// The same sequence of calls in `root` (a host directory, or the mount
/// of its twin): every result, in order.
fn script(root: &Path) -> Vec<String> {
    let f = root.join("f");
    let d = root.join("d");
    let l = root.join("l");
    std::fs::write(&f, b"data").expect("write");
    std::fs::create_dir(&d).expect("mkdir");
    std::os::unix::fs::symlink("f", &l).expect("symlink");
    let big = vec![b'x'; 3_000];
    let mut out = Vec::new();
    let mut note = |what: &str, r: String| out.push(format!("{what}: {r}"));
    note("set user.a", set(&f, "user.a", b"1", 0).to_string());
    note("set user.empty", set(&f, "user.empty", b"", 0).to_string());
    note("set user.big", set(&f, "user.big", &big, 0).to_string());
    note(
        "create again",
        set(&f, "user.a", b"2", libc::XATTR_CREATE).to_string(),
    );
    note(
        "replace missing",
        set(&f, "user.b", b"2", libc::XATTR_REPLACE).to_string(),
    );
    note(
        "replace",
        set(&f, "user.a", b"3", libc::XATTR_REPLACE).to_string(),
    );
    note("get user.a", format!("{:?}", get(&f, "user.a")));
    note("get user.empty", format!("{:?}", get(&f, "user.empty")));
    note(
        "get user.big len",
        format!("{:?}", get(&f, "user.big").map(|v| v.len())),
    );
    note("get missing", format!("{:?}", get(&f, "user.none")));
    note("list", format!("{:?}", list(&f)));
    note("bad namespace", set(&f, "bogus.x", b"1", 0).to_string());
    note("empty name", set(&f, "", b"1", 0).to_string());
    note("user on symlink", set(&l, "user.x", b"1", 0).to_string());
    note("get on symlink", format!("{:?}", get(&l, "user.x")));
    note("trusted", set(&f, "trusted.t", b"t", 0).to_string());
    note("get trusted", format!("{:?}", get(&f, "trusted.t")));
    note("dir user", set(&d, "user.d", b"dir", 0).to_string());
    note("dir list", format!("{:?}", list(&d)));
    note("remove", remove(&f, "user.a").to_string());
    note("remove again", remove(&f, "user.a").to_string());
    note("list after", format!("{:?}", list(&f)));
    out
}

#[test]
fn the_same_calls_give_the_same_answers_as_the_host() {
    let t = dirs();
    let host = t.t.path().join("host");
    std::fs::create_dir(&host).expect("mkdir");
    let want = script(&host);
    let _m = Mount::new(&t.src, &t.mnt, "");
    let got = script(&t.mnt);
    assert_eq!(got, want);
    // What the mount set is on the host file, and the other way round.
    assert_eq!(
        get(&t.src.join("f"), "user.big").map(|v| v.len()),
        Ok(3_000)
    );
    assert_eq!(set(&t.src.join("f"), "user.host", b"h", 0), 0);
    assert_eq!(get(&t.mnt.join("f"), "user.host"), Ok(b"h".to_vec()));
}

fn sh(cmd: &str, dir: &Path) -> String {
    let o = run(Command::new("sh").args(["-c", cmd]).current_dir(dir));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn cp_a_keeps_attributes_and_acls_in_and_out() {
    let t = dirs();
    let tree = t.t.path().join("tree");
    std::fs::create_dir_all(tree.join("sub")).expect("mkdir");
    std::fs::write(tree.join("a"), b"a").expect("write");
    std::fs::write(tree.join("sub/b"), b"b").expect("write");
    let prep = "setfattr -n user.color -v blue a && setfattr -n user.n -v 7 sub/b \
                && setfacl -m u:1000:rw,g:100:r a && setfacl -d -m u:1000:rwx sub \
                && setfacl -m u:1001:rx sub";
    sh(prep, &tree);
    let dump = "getfattr -R -d -m - --absolute-names . 2>/dev/null | sed 's|^# file: .*/|# file: |'; getfacl -R -p -n . 2>/dev/null";
    let want = sh(dump, &tree);
    assert!(
        want.contains("user.color") && want.contains("user:1000:rw-"),
        "{want}"
    );
    let _m = Mount::new(&t.src, &t.mnt, "");
    sh(&format!("cp -a {} in", tree.display()), &t.mnt);
    assert_eq!(sh(dump, &t.mnt.join("in")), want, "through the mount");
    assert_eq!(sh(dump, &t.src.join("in")), want, "on the host");
    let out = t.t.path().join("out");
    sh(
        &format!("cp -a {} {}", t.mnt.join("in").display(), out.display()),
        t.t.path(),
    );
    assert_eq!(sh(dump, &out), want, "back out");
}

#[test]
fn acls_decide_permissions_and_default_acls_the_mode() {
    let t = dirs();
    // Other users pass through the test's directory to the mount.
    std::fs::set_permissions(
        t.t.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .expect("chmod");
    // Other users reach a FUSE mount only with allow_other.
    let _m = Mount::new(&t.src, &t.mnt, "allow_other");
    let m = &t.mnt;
    std::fs::write(m.join("f"), b"secret").expect("write");
    sh("chmod 600 f && setfacl -m u:1000:r f", m);
    // User 1000 may read it through the ACL, user 1001 may not.
    let read_as = |uid: &str| {
        Command::new("setpriv")
            .args(["--reuid", uid, "--regid", uid, "--clear-groups", "cat"])
            .arg(m.join("f"))
            .output()
            .expect("setpriv")
            .status
            .success()
    };
    assert!(read_as("1000"), "the ACL's named user reads");
    assert!(!read_as("1001"), "anyone else is refused");
    // A default ACL: a new file's mode is cut by it, and no umask applies.
    std::fs::create_dir(m.join("d")).expect("mkdir");
    sh("setfacl -d -m u::rw,g::r,o::-,u:1000:rw d", m);
    sh("umask 077; touch d/new", m);
    let mode = sh("stat -c %a d/new", m);
    std::fs::create_dir(t.t.path().join("host")).expect("mkdir");
    let h = t.t.path().join("host");
    sh(
        "mkdir d && setfacl -d -m u::rw,g::r,o::-,u:1000:rw d && umask 077 && touch d/new",
        &h,
    );
    assert_eq!(mode, sh("stat -c %a d/new", &h));
    assert_eq!(sh("getfacl -p d/new", m), sh("getfacl -p d/new", &h));
}

#[test]
fn a_file_capability_is_set_used_and_killed_by_a_write() {
    let t = dirs();
    let _m = Mount::new(&t.src, &t.mnt, "dev,suid");
    let bin = t.mnt.join("ping2");
    std::fs::copy("/bin/true", &bin).expect("copy");
    let o = run(Command::new("setcap").args(["cap_net_raw+ep"]).arg(&bin));
    assert!(o.status.success());
    let caps = |p: &Path| sh(&format!("getcap {}", p.display()), t.t.path());
    assert!(caps(&bin).contains("cap_net_raw"), "{}", caps(&bin));
    assert!(caps(&t.src.join("ping2")).contains("cap_net_raw"));
    assert!(Command::new(&bin).status().expect("run").success());
    // A write drops it, as on any Linux file system.
    std::fs::OpenOptions::new()
        .append(true)
        .open(&bin)
        .and_then(|mut f| std::io::Write::write_all(&mut f, b"\0"))
        .expect("append");
    assert_eq!(caps(&bin), "");
}
