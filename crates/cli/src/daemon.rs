//! Running in the background: the parent waits on a pipe for the child's
//! word that the mount is up.

use std::io::{Read, Write};
use std::os::fd::FromRawFd;

pub struct Ready(std::fs::File);

impl Ready {
    pub fn ok(mut self) {
        let _ = self.0.write_all(b"ok");
        // Detach stdio now that nothing more will be reported; the log
        // (standard error) goes to `WALKFS_LOG_FILE` when it is set.
        let log = std::env::var_os("WALKFS_LOG_FILE").and_then(|p| {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(p)
                .ok()
        });
        // SAFETY: opening /dev/null and dup2 onto the standard fds; `log`
        // stays open until its descriptor is duplicated.
        unsafe {
            let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
            if null >= 0 {
                for fd in 0..3 {
                    libc::dup2(null, fd);
                }
                libc::close(null);
            }
            if let Some(f) = &log {
                libc::dup2(std::os::fd::AsRawFd::as_raw_fd(f), 2);
            }
        }
    }
    pub fn fail(mut self, why: &str) {
        let _ = self.0.write_all(why.as_bytes());
    }
}

/// Fork. The parent exits here with the child's verdict; the child
/// gets a new session and returns the pipe to report on.
pub fn detach() -> Result<Ready, String> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills two descriptors.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(format!("pipe: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: no thread has been started yet (the caller forks first
    // thing), so the child is a complete copy.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(format!("fork: {}", std::io::Error::last_os_error()));
    }
    if pid > 0 {
        // SAFETY: the descriptors came from pipe2 and are ours.
        let mut r = unsafe { std::fs::File::from_raw_fd(fds[0]) };
        unsafe { libc::close(fds[1]) };
        let mut msg = String::new();
        let _ = r.read_to_string(&mut msg);
        if msg == "ok" {
            std::process::exit(0);
        }
        if msg.is_empty() {
            msg = "the mount process died before mounting".into();
        }
        eprintln!("walkfs: {msg}");
        std::process::exit(1);
    }
    // SAFETY: as above, in the child.
    unsafe {
        libc::close(fds[0]);
        libc::setsid();
        Ok(Ready(std::fs::File::from_raw_fd(fds[1])))
    }
}
