//! Confining the `walkfs serve` process itself, so that a flaw in the
//! server's own code has little to reach (issue 6; virtiofsd does the
//! same). After the export, the listener and the backend's descriptors
//! are open:
//!
//! 1. the user database is read once ([`crate::users::snapshot`]): after
//!    step 2 `/etc` would be the export's, which clients may write;
//! 2. a mount namespace of its own whose root is the export (`pivot_root`
//!    into it, the old root detached): no path outside the export exists
//!    for the process any more;
//! 3. no supplementary groups;
//! 4. capabilities cut to the file-owner ones a file server needs
//!    (chown, DAC override and read-search, fowner, fsetid, mknod), in
//!    the bounding set too, and no new privileges on exec;
//! 5. a seccomp allow-list of system calls ([`crate::seccomp`]) on every
//!    thread.
//!
//! `auto` applies what the kernel and the process's privileges allow and
//! logs what it skipped; `on` fails instead. Run it before the server
//! starts its worker threads: capabilities are per thread, and new
//! threads inherit the caller's.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// How hard to try.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Off,
    Auto,
    On,
}

impl std::str::FromStr for Mode {
    type Err = String;
    fn from_str(s: &str) -> Result<Mode, String> {
        match s {
            "off" => Ok(Mode::Off),
            "auto" => Ok(Mode::Auto),
            "on" => Ok(Mode::On),
            _ => Err(format!("{s}: want off, auto or on")),
        }
    }
}

/// Capabilities kept: CHOWN, DAC_OVERRIDE, DAC_READ_SEARCH, FOWNER,
/// FSETID, MKNOD.
const KEEP: &[u32] = &[0, 1, 2, 3, 4, 27];

fn last_err(what: &str) -> String {
    format!("{what}: {}", std::io::Error::last_os_error())
}

fn cstr(p: &[u8]) -> Result<CString, String> {
    CString::new(p).map_err(|_| "a NUL in a path".to_string())
}

/// The mount namespace whose root is `export`.
fn pivot_into(export: &Path) -> Result<(), String> {
    let dir = cstr(export.as_os_str().as_bytes())?;
    let root = cstr(b"/")?;
    let dot = cstr(b".")?;
    // SAFETY: plain syscalls on valid C strings; each result is checked.
    unsafe {
        if libc::unshare(libc::CLONE_NEWNS) != 0 {
            return Err(last_err("unshare(CLONE_NEWNS)"));
        }
        // Nothing done here propagates back to the host's mounts.
        if libc::mount(
            std::ptr::null(),
            root.as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_SLAVE,
            std::ptr::null(),
        ) != 0
        {
            return Err(last_err("make / a slave mount"));
        }
        // pivot_root wants the new root to be a mount point.
        if libc::mount(
            dir.as_ptr(),
            dir.as_ptr(),
            std::ptr::null(),
            libc::MS_BIND | libc::MS_REC,
            std::ptr::null(),
        ) != 0
        {
            return Err(last_err("bind the export onto itself"));
        }
        if libc::chdir(dir.as_ptr()) != 0 {
            return Err(last_err("chdir to the export"));
        }
        // pivot_root(".", "."): the old root ends up stacked under the
        // new one, and is detached right away.
        if libc::syscall(libc::SYS_pivot_root, dot.as_ptr(), dot.as_ptr()) != 0 {
            return Err(last_err("pivot_root"));
        }
        if libc::umount2(dot.as_ptr(), libc::MNT_DETACH) != 0 {
            return Err(last_err("detach the old root"));
        }
        if libc::chdir(root.as_ptr()) != 0 {
            return Err(last_err("chdir /"));
        }
    }
    Ok(())
}

fn drop_groups() -> Result<(), String> {
    // SAFETY: setgroups with an empty list.
    if unsafe { libc::setgroups(0, std::ptr::null()) } != 0 {
        return Err(last_err("setgroups"));
    }
    Ok(())
}

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: i32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

fn drop_caps() -> Result<(), String> {
    let last: u32 = std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(40);
    for cap in (0..=last).filter(|c| !KEEP.contains(c)) {
        // SAFETY: prctl with integer arguments.
        if unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) } != 0 {
            return Err(last_err("PR_CAPBSET_DROP"));
        }
    }
    let mut data = [CapData::default(); 2];
    for &c in KEEP {
        let d = &mut data[(c / 32) as usize];
        d.effective |= 1 << (c % 32);
        d.permitted |= 1 << (c % 32);
    }
    let mut hdr = CapHeader {
        // _LINUX_CAPABILITY_VERSION_3
        version: 0x2008_0522,
        pid: 0,
    };
    // SAFETY: capset reads a v3 header and two data structs, both live.
    if unsafe { libc::syscall(libc::SYS_capset, &mut hdr, data.as_ptr()) } != 0 {
        return Err(last_err("capset"));
    }
    // SAFETY: prctl with integer arguments.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return Err(last_err("PR_SET_NO_NEW_PRIVS"));
    }
    Ok(())
}

type Step<'a> = dyn Fn() -> Result<(), String> + 'a;

/// Confine this process to `export` (`None`: an export that is not a
/// host directory, where only the privilege steps apply). Returns what
/// was done, for the log.
pub fn enter(export: Option<&Path>, mode: Mode) -> Result<Vec<&'static str>, String> {
    let mut done = Vec::new();
    if mode == Mode::Off {
        return Ok(done);
    }
    // SAFETY: geteuid cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    if !root {
        if mode == Mode::On {
            return Err("the sandbox needs root (or run with --sandbox off)".into());
        }
        tracing::info!("sandbox: not root, skipped");
        return Ok(done);
    }
    crate::users::snapshot();
    let steps: [(&'static str, &Step); 4] = [
        ("mount namespace rooted at the export", &|| match export {
            Some(e) => pivot_into(e),
            None => Err("the export is not a host directory".into()),
        }),
        ("no supplementary groups", &drop_groups),
        ("file-owner capabilities only", &drop_caps),
        ("seccomp allow-list", &crate::seccomp::install),
    ];
    for (name, step) in steps {
        match step() {
            Ok(()) => done.push(name),
            Err(e) if mode == Mode::Auto => tracing::warn!("sandbox: {name}: {e}; skipped"),
            Err(e) => return Err(format!("sandbox: {name}: {e}")),
        }
    }
    Ok(done)
}
