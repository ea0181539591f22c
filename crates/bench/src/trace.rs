//! The gcc 12 lookup trace (seed 001's benchmark, whole): every file-lookup
//! call gcc, cc1, as, collect2 and ld made compiling and linking a small
//! program, recorded on this kind of machine. See `traces/README.md`.

/// The calls of the trace, with the kernel's answers when recorded.
pub const CALLS_TSV: &str = include_str!("../traces/gcc12-compile.calls.tsv");
/// The persistent paths alone, one per line (seed 001's access-only form).
pub const REPLAY: &str = include_str!("../traces/gcc12-compile.replay");

/// One call to replay with its own syscall and flags.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Call {
    Readlink(Vec<u8>),
    /// `openat(AT_FDCWD, path, flags)`; a descriptor it returns is closed.
    Open(Vec<u8>, i32),
    /// `newfstatat(AT_FDCWD, path, flags)`.
    Stat(Vec<u8>, i32),
    /// `faccessat2(AT_FDCWD, path, mode, flags)` (`access` has flags 0).
    Access(Vec<u8>, i32, i32),
}

impl Call {
    pub fn path(&self) -> &[u8] {
        match self {
            Call::Readlink(p) | Call::Open(p, _) | Call::Stat(p, _) | Call::Access(p, _, _) => p,
        }
    }
}

fn flag(name: &str) -> i32 {
    match name.trim() {
        "O_RDONLY" => libc::O_RDONLY,
        "O_CLOEXEC" => libc::O_CLOEXEC,
        "O_NOCTTY" => libc::O_NOCTTY,
        "O_DIRECTORY" => libc::O_DIRECTORY,
        "O_NOFOLLOW" => libc::O_NOFOLLOW,
        "R_OK" => libc::R_OK,
        "W_OK" => libc::W_OK,
        "X_OK" => libc::X_OK,
        "AT_EACCESS" => libc::AT_EACCESS,
        "AT_SYMLINK_NOFOLLOW" => libc::AT_SYMLINK_NOFOLLOW,
        _ => 0,
    }
}

fn flags(s: &str) -> i32 {
    s.split('|').map(flag).fold(0, |a, b| a | b)
}

/// The persistent calls of the trace, in order.
pub fn calls() -> Vec<Call> {
    let mut out = Vec::new();
    for line in CALLS_TSV.lines().skip(1) {
        let f: Vec<&str> = line.split('\t').collect();
        if f.len() < 10 || f[8] != "persistent" {
            continue;
        }
        let path = f[9].as_bytes().to_vec();
        let args: Vec<&str> = f[4].split(", ").collect();
        let last = args.last().copied().unwrap_or("");
        out.push(match f[3] {
            "readlink" => Call::Readlink(path),
            "openat" => Call::Open(path, flags(args.first().copied().unwrap_or(""))),
            "newfstatat" => Call::Stat(path, flags(last)),
            "access" => Call::Access(path, flags(args[0]), 0),
            "faccessat2" => Call::Access(path, flags(args[0]), flags(last)),
            _ => continue,
        });
    }
    out
}

/// The paths of the access-only replay.
pub fn replay_paths() -> Vec<Vec<u8>> {
    REPLAY
        .lines()
        .filter(|l| !l.is_empty())
        .map(|l| l.as_bytes().to_vec())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trace_parses_as_documented() {
        let c = calls();
        assert_eq!(c.len(), 2247);
        assert_eq!(
            c.iter().filter(|c| matches!(c, Call::Readlink(_))).count(),
            1604
        );
        assert!(c.contains(&Call::Access(b"/etc/ld.so.preload".to_vec(), libc::R_OK, 0)));
        assert!(c.contains(&Call::Open(
            b"/etc/ld.so.cache".to_vec(),
            libc::O_RDONLY | libc::O_CLOEXEC
        )));
        assert_eq!(replay_paths().len(), 2247);
    }
}
