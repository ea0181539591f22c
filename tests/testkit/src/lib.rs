//! What walkfs's tests share across crates: the rule for skipping.
//!
//! A test that needs root, `/dev/fuse`, a program (inotifywait, node,
//! git) or a kernel feature (FUSE over io_uring) says so through
//! [`skip`]. On a developer's machine that prints why and the test
//! returns. Under CI (`CI` set, as `.ci/run` runs) or with
//! `WALKFS_REQUIRE_ALL=1`, it fails and names what is missing, so a
//! test can never pass by not running. `scripts/test.sh` installs and
//! enables everything the tests need.

use std::process::{Command, Stdio};

/// Must every test run? True with `CI` set to anything but `0`/`false`
/// or empty, or with `WALKFS_REQUIRE_ALL=1`.
pub fn required() -> bool {
    let set =
        |name: &str| std::env::var(name).is_ok_and(|v| !v.is_empty() && v != "0" && v != "false");
    set("CI") || set("WALKFS_REQUIRE_ALL")
}

/// A test cannot run because `missing` is missing. Returns (the caller
/// then returns) on a developer's machine; panics under CI, naming what
/// is missing and where the test is.
#[track_caller]
pub fn skip(missing: &str) {
    let at = std::panic::Location::caller();
    if required() {
        panic!(
            "{at}: this test cannot run: {missing}. Under CI or WALKFS_REQUIRE_ALL=1 \
             no test may skip: scripts/test.sh installs and enables what the tests need"
        );
    }
    eprintln!("SKIP ({at}): {missing}");
}

/// Running as root (FUSE mounts, chroot, other users' files)?
pub fn is_root() -> bool {
    // SAFETY: geteuid has no failure mode and touches no memory.
    unsafe { libc::geteuid() == 0 }
}

/// Root and `/dev/fuse`: what a FUSE mount needs. Skips (see [`skip`])
/// and returns false when either is missing.
#[track_caller]
pub fn need_fuse() -> bool {
    if !is_root() {
        skip("needs root (FUSE mounts)");
        return false;
    }
    if !std::path::Path::new("/dev/fuse").exists() {
        skip("needs /dev/fuse");
        return false;
    }
    true
}

/// Root, for tests that change owners, chroot or mount. Skips (see
/// [`skip`]) and returns false otherwise.
#[track_caller]
pub fn need_root(why: &str) -> bool {
    if is_root() {
        return true;
    }
    skip(&format!("needs root ({why})"));
    false
}

/// Is `program` installed (runs with `arg`, e.g. `--version`)? Skips
/// (see [`skip`]) and returns false when it is not.
#[track_caller]
pub fn need_program(program: &str, arg: &str, package: &str) -> bool {
    let ran = Command::new(program)
        .arg(arg)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok();
    if !ran {
        skip(&format!(
            "{program} is not installed (Debian package {package})"
        ));
    }
    ran
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_skip_fails_when_every_test_is_required() {
        // The rule itself, on whatever this run has set: under CI the
        // skip must panic, elsewhere it must return.
        let r = std::panic::catch_unwind(|| skip("a thing this test invents"));
        assert_eq!(r.is_err(), required());
    }

    #[test]
    fn a_program_that_exists_is_found_and_one_that_does_not_is_not() {
        assert!(need_program("sh", "-c", "dash"));
        if !required() {
            assert!(!need_program("walkfs-no-such-program", "--version", "none"));
        }
    }
}
