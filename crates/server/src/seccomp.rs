//! The system calls `walkfs serve` may make once it is confined: an
//! allow-list, installed on every thread as the sandbox's last step.
//!
//! What a file server needs after it listens: file calls relative to
//! descriptors it holds, memory, threads, the connected sockets, time.
//! What it must never need, and an attacker who took over the process
//! would want: starting programs (`execve`, and `clone` without
//! `CLONE_THREAD`, i.e. a new process), new sockets or connections,
//! mounts and namespaces, `open_by_handle_at` (the "shocker" escape from
//! a container's bind mount), ptrace and other processes' memory,
//! credential or capability changes, kernel modules, BPF, keyrings,
//! io_uring (which bypasses this filter). Those answer `EPERM`.
//!
//! Two filters. The first answers `clone3` with `ENOSYS`, so that the C
//! library falls back to `clone`, whose flags a filter can inspect
//! (`clone3` passes them in memory, out of a filter's reach). The second
//! is the allow-list; it lets `clone3` through to the first's answer (the
//! kernel runs every filter and an error outranks an allow) and does not
//! allow `seccomp` itself, so nothing installed later can loosen it.

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule,
};

/// Calls allowed whatever their arguments.
const ALLOWED: &[libc::c_long] = &[
    // Files, relative to descriptors the server holds.
    libc::SYS_read,
    libc::SYS_write,
    libc::SYS_readv,
    libc::SYS_writev,
    libc::SYS_pread64,
    libc::SYS_pwrite64,
    libc::SYS_preadv,
    libc::SYS_pwritev,
    libc::SYS_preadv2,
    libc::SYS_pwritev2,
    libc::SYS_close,
    libc::SYS_openat,
    libc::SYS_openat2,
    libc::SYS_newfstatat,
    libc::SYS_fstat,
    libc::SYS_statx,
    libc::SYS_lseek,
    libc::SYS_getdents64,
    libc::SYS_readlinkat,
    libc::SYS_mkdirat,
    libc::SYS_mknodat,
    libc::SYS_symlinkat,
    libc::SYS_linkat,
    libc::SYS_renameat2,
    libc::SYS_unlinkat,
    libc::SYS_fchmod,
    libc::SYS_fchmodat,
    libc::SYS_fchown,
    libc::SYS_fchownat,
    libc::SYS_utimensat,
    // Watching the export for changes: hostfs adds an inotify watch per
    // directory through /proc/self/fd, relative to the working directory,
    libc::SYS_inotify_add_watch,
    libc::SYS_inotify_rm_watch,
    libc::SYS_fchdir,
    // ... or records a directory's file handle for fanotify (the handle
    // only names it; opening by handle stays forbidden).
    libc::SYS_name_to_handle_at,
    // Leases hold host programs' opens of leased files (lease.rs): marks
    // on the files a lease covers, on a group made before the sandbox.
    libc::SYS_fanotify_mark,
    libc::SYS_ftruncate,
    libc::SYS_fallocate,
    libc::SYS_fsync,
    libc::SYS_fdatasync,
    libc::SYS_statfs,
    libc::SYS_fstatfs,
    libc::SYS_flock,
    libc::SYS_fcntl,
    libc::SYS_dup,
    libc::SYS_dup3,
    libc::SYS_faccessat,
    libc::SYS_faccessat2,
    libc::SYS_fgetxattr,
    libc::SYS_flistxattr,
    libc::SYS_fsetxattr,
    libc::SYS_fremovexattr,
    // Extended attributes of an `O_PATH` descriptor: `N` relative to
    // /proc/self/fd (hostfs's sys.rs), as the inotify watches are added.
    libc::SYS_getxattr,
    libc::SYS_listxattr,
    libc::SYS_setxattr,
    libc::SYS_removexattr,
    libc::SYS_lgetxattr,
    libc::SYS_llistxattr,
    libc::SYS_lsetxattr,
    libc::SYS_lremovexattr,
    libc::SYS_umask,
    libc::SYS_getcwd,
    // Memory.
    libc::SYS_mmap,
    libc::SYS_munmap,
    libc::SYS_mprotect,
    libc::SYS_mremap,
    libc::SYS_madvise,
    libc::SYS_brk,
    // Threads, signals, exit.
    libc::SYS_futex,
    libc::SYS_set_robust_list,
    libc::SYS_rseq,
    libc::SYS_gettid,
    libc::SYS_getpid,
    libc::SYS_sched_yield,
    libc::SYS_sched_getaffinity,
    libc::SYS_rt_sigaction,
    libc::SYS_rt_sigprocmask,
    libc::SYS_rt_sigreturn,
    libc::SYS_sigaltstack,
    libc::SYS_tgkill,
    libc::SYS_exit,
    libc::SYS_exit_group,
    libc::SYS_restart_syscall,
    // Time.
    libc::SYS_clock_gettime,
    libc::SYS_clock_getres,
    libc::SYS_clock_nanosleep,
    libc::SYS_nanosleep,
    libc::SYS_gettimeofday,
    // The listener and connected sockets.
    libc::SYS_accept4,
    libc::SYS_recvfrom,
    libc::SYS_sendto,
    libc::SYS_recvmsg,
    libc::SYS_sendmsg,
    libc::SYS_shutdown,
    libc::SYS_setsockopt,
    libc::SYS_getsockopt,
    libc::SYS_getpeername,
    libc::SYS_getsockname,
    libc::SYS_ppoll,
    // Identity (read only) and the rest of what the runtime asks.
    libc::SYS_getuid,
    libc::SYS_geteuid,
    libc::SYS_getgid,
    libc::SYS_getegid,
    libc::SYS_getgroups,
    libc::SYS_getrandom,
    libc::SYS_prlimit64,
    libc::SYS_uname,
];

/// x86_64's older calls that the C library or the Rust runtime still use.
#[cfg(target_arch = "x86_64")]
const ALLOWED_ARCH: &[libc::c_long] = &[libc::SYS_poll, libc::SYS_accept, libc::SYS_arch_prctl];
#[cfg(not(target_arch = "x86_64"))]
const ALLOWED_ARCH: &[libc::c_long] = &[];

fn cond(arg: u8, op: SeccompCmpOp, value: u64) -> Result<SeccompCondition, String> {
    SeccompCondition::new(arg, SeccompCmpArgLen::Qword, op, value).map_err(|e| e.to_string())
}

fn rule(conds: Vec<SeccompCondition>) -> Result<SeccompRule, String> {
    SeccompRule::new(conds).map_err(|e| e.to_string())
}

fn arch() -> Result<seccompiler::TargetArch, String> {
    std::env::consts::ARCH
        .try_into()
        .map_err(|e: seccompiler::BackendError| e.to_string())
}

/// The allow-list filter.
fn allow_list() -> Result<BpfProgram, String> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = ALLOWED
        .iter()
        .chain(ALLOWED_ARCH)
        .map(|&n| (n, Vec::new()))
        .collect();
    // clone only for a thread: CLONE_THREAD set (a new process would be
    // the first step to running something else).
    let thread = libc::CLONE_THREAD as u64;
    rules.insert(
        libc::SYS_clone,
        vec![rule(vec![cond(
            0,
            SeccompCmpOp::MaskedEq(thread),
            thread,
        )?])?],
    );
    // The first filter answers it (ENOSYS).
    rules.insert(libc::SYS_clone3, Vec::new());
    // prctl only to name a thread or read its name.
    let prctl = [libc::PR_SET_NAME, libc::PR_GET_NAME]
        .into_iter()
        .map(|op| rule(vec![cond(0, SeccompCmpOp::Eq, op as u64)?]))
        .collect::<Result<Vec<_>, _>>()?;
    rules.insert(libc::SYS_prctl, prctl);
    let f = SeccompFilter::new(
        rules,
        SeccompAction::Errno(libc::EPERM as u32),
        SeccompAction::Allow,
        arch()?,
    )
    .map_err(|e| e.to_string())?;
    f.try_into()
        .map_err(|e: seccompiler::BackendError| e.to_string())
}

/// `clone3` answers `ENOSYS` (see the module's comment).
fn no_clone3() -> Result<BpfProgram, String> {
    let rules = [(libc::SYS_clone3, Vec::new())].into_iter().collect();
    let f = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::ENOSYS as u32),
        arch()?,
    )
    .map_err(|e| e.to_string())?;
    f.try_into()
        .map_err(|e: seccompiler::BackendError| e.to_string())
}

/// Install both filters on every thread of the process (sets no new
/// privileges, which installing a filter without `CAP_SYS_ADMIN` needs).
pub fn install() -> Result<(), String> {
    // Both built before either is installed: nothing fails half way.
    let (first, second) = (no_clone3()?, allow_list()?);
    seccompiler::apply_filter_all_threads(&first).map_err(|e| format!("seccomp: {e}"))?;
    seccompiler::apply_filter_all_threads(&second).map_err(|e| format!("seccomp: {e}"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::process::Command;

    /// The filters, installed in a child process (this test binary run
    /// again with only this test and a marker in its environment):
    /// threads start and files work; a new process, a program, a new
    /// socket, a mount and `open_by_handle_at` answer EPERM.
    #[test]
    fn the_filter_allows_serving_and_refuses_escapes() {
        if std::env::var_os("WALKFS_SECCOMP_CHILD").is_some() {
            child();
            return;
        }
        let exe = std::env::current_exe().expect("own executable");
        let o = Command::new(exe)
            .args([
                "--exact",
                "seccomp::tests::the_filter_allows_serving_and_refuses_escapes",
                "--test-threads",
                "1",
                "--nocapture",
            ])
            .env("WALKFS_SECCOMP_CHILD", "1")
            .output()
            .expect("run the child");
        let out =
            String::from_utf8_lossy(&o.stdout).to_string() + &String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{out}");
        assert!(out.contains("1 passed"), "the child ran the test: {out}");
        assert!(out.contains("child: all checks passed"), "{out}");
    }

    fn errno() -> i32 {
        std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
    }

    fn child() {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = std::fs::File::open(dir.path()).expect("open dir");
        super::install().expect("install");
        let status = std::fs::read_to_string("/proc/self/status").expect("status");
        assert!(status.contains("Seccomp:\t2"), "{status}");
        // Serving works: files relative to a held descriptor, threads.
        let f = dir.path().join("f");
        std::fs::write(&f, b"x").expect("write");
        assert_eq!(std::fs::read(&f).expect("read"), b"x");
        let t = std::thread::spawn(|| 7).join().expect("thread");
        assert_eq!(t, 7);
        drop(d);
        // Escapes do not.
        let e = Command::new("/bin/true").status();
        assert!(e.is_err(), "a new process: {e:?}");
        // SAFETY: plain syscalls with constant arguments.
        unsafe {
            assert_eq!(libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0), -1);
            assert_eq!(errno(), libc::EPERM);
            let argv = [std::ptr::null::<libc::c_char>()];
            assert_eq!(
                libc::execve(c"/bin/true".as_ptr(), argv.as_ptr(), argv.as_ptr()),
                -1
            );
            assert_eq!(errno(), libc::EPERM);
            assert_eq!(libc::unshare(libc::CLONE_NEWNS), -1);
            assert_eq!(errno(), libc::EPERM);
            assert_eq!(libc::syscall(libc::SYS_open_by_handle_at, -1, 0, 0), -1);
            assert_eq!(errno(), libc::EPERM);
            assert_eq!(libc::syscall(libc::SYS_clone3, 0, 0), -1);
            assert_eq!(errno(), libc::ENOSYS);
            assert_eq!(libc::prctl(libc::PR_SET_DUMPABLE, 1, 0, 0, 0), -1);
            assert_eq!(errno(), libc::EPERM);
            // No filter installed now can loosen the list.
            assert_eq!(libc::syscall(libc::SYS_seccomp, 1, 0, 0), -1);
            assert_eq!(errno(), libc::EPERM);
        }
        println!("child: all checks passed");
    }
}
