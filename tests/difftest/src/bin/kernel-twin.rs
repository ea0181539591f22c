//! The kernel side of the differential tests. Usage: `kernel-twin DIR`;
//! reads a JSON [`Who`] line, then one JSON [`Op`] per line on stdin; chroots
//! into DIR, takes the ids, runs each op as real syscalls and prints one JSON
//! [`Outcome`] per line.

use std::io::{BufRead, Write};

use walkfs_difftest::{kernel_exec, Op, Who};

fn main() {
    let dir = std::env::args().nth(1).expect("usage: kernel-twin DIR");
    let stdin = std::io::stdin();
    let mut lines = stdin.lock().lines();
    let who: Who =
        serde_json::from_str(&lines.next().expect("who line").expect("read")).expect("who json");
    let cdir = std::ffi::CString::new(dir).expect("dir");
    // SAFETY: plain syscalls; this process is single-threaded here.
    unsafe {
        assert_eq!(
            libc::chroot(cdir.as_ptr()),
            0,
            "chroot: {}",
            std::io::Error::last_os_error()
        );
        assert_eq!(libc::chdir(c"/".as_ptr()), 0);
        libc::umask(0);
        assert_eq!(libc::setgroups(who.groups.len(), who.groups.as_ptr()), 0);
        assert_eq!(libc::setresgid(who.gid, who.gid, who.gid), 0);
        assert_eq!(libc::setresuid(who.uid, who.uid, who.uid), 0);
    }
    let mut fds = Vec::new();
    let out = std::io::stdout();
    let mut out = out.lock();
    for line in lines {
        let op: Op = serde_json::from_str(&line.expect("read")).expect("op json");
        let r = kernel_exec(&op, &mut fds);
        writeln!(out, "{}", serde_json::to_string(&r).expect("json")).expect("write");
    }
}
