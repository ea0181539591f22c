//! `Errno`: the one error type of walkfs, an errno value as Linux defines it.

use std::fmt;

/// A Linux errno. Every fallible walkfs call returns one; the C ABI hands it
/// out negated, the 9P server as `Rlerror`, the FUSE front end as the reply.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Errno(pub i32);

macro_rules! errnos {
    ($($name:ident),* $(,)?) => {
        impl Errno {
            $(pub const $name: Errno = Errno(libc::$name);)*

            /// The symbolic name ("ENOENT"), or `None` for a value this
            /// table does not know.
            pub fn name(self) -> Option<&'static str> {
                match self.0 {
                    $(libc::$name => Some(stringify!($name)),)*
                    _ => None,
                }
            }
        }
    };
}

errnos!(
    EPERM,
    ENOENT,
    ESRCH,
    EINTR,
    EIO,
    ENXIO,
    E2BIG,
    EBADF,
    EAGAIN,
    ENOMEM,
    EACCES,
    EFAULT,
    EBUSY,
    EEXIST,
    EXDEV,
    ENODEV,
    ENOTDIR,
    EISDIR,
    EINVAL,
    ENFILE,
    EMFILE,
    ETXTBSY,
    EFBIG,
    ENOSPC,
    ESPIPE,
    EROFS,
    EMLINK,
    ERANGE,
    ENAMETOOLONG,
    ENOSYS,
    ENOTEMPTY,
    ELOOP,
    ENODATA,
    EOPNOTSUPP,
    EOVERFLOW,
    ENOTCONN,
    ESTALE,
    EDQUOT,
    ECHILD,
    EPROTO,
    EMSGSIZE,
    ECONNRESET,
    EPROTONOSUPPORT,
    ETIMEDOUT,
    EILSEQ,
    ENOLCK,
    ENOTTY,
    ENOTSOCK,
    ECANCELED,
    EREMOTEIO,
);

impl Errno {
    /// The errno the calling thread's last libc call set.
    pub fn last() -> Errno {
        Errno(
            std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO),
        )
    }

    /// An errno received from a peer (a 9P server's `Rlerror`), as the
    /// callers above may see it. A peer's number is not trusted to mean
    /// what ours does: values this table does not know, and the ones walkfs
    /// gives a meaning of its own inside a call (`ECHILD`: walk again;
    /// `EINTR`), become `EIO`, so no server can steer the vfs's retry
    /// loops or hand out an errno no file system call returns.
    pub fn from_wire(code: u32) -> Errno {
        let e = Errno(code as i32);
        match e {
            Errno::ECHILD | Errno::EINTR => Errno::EIO,
            _ if code == 0 || code > i32::MAX as u32 || e.name().is_none() => Errno::EIO,
            _ => e,
        }
    }

    /// Turn a libc-style return value (-1 and errno on failure) into a
    /// `Result`.
    pub fn result<T: PartialOrd + Default>(ret: T) -> Result<T, Errno> {
        if ret < T::default() {
            Err(Errno::last())
        } else {
            Ok(ret)
        }
    }
}

impl fmt::Debug for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => f.write_str(n),
            None => write!(f, "Errno({})", self.0),
        }
    }
}

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let msg = std::io::Error::from_raw_os_error(self.0);
        write!(f, "{self:?}: {msg}")
    }
}

impl std::error::Error for Errno {}

impl From<std::io::Error> for Errno {
    fn from(e: std::io::Error) -> Errno {
        Errno(e.raw_os_error().unwrap_or(libc::EIO))
    }
}

impl From<Errno> for std::io::Error {
    fn from(e: Errno) -> std::io::Error {
        std::io::Error::from_raw_os_error(e.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_values_match_libc() {
        assert_eq!(Errno::ENOENT.0, 2);
        assert_eq!(format!("{:?}", Errno::ELOOP), "ELOOP");
        assert_eq!(format!("{:?}", Errno(4000)), "Errno(4000)");
        assert!(Errno::EACCES.to_string().contains("Permission denied"));
    }

    #[test]
    fn wire_errnos_are_filtered() {
        assert_eq!(Errno::from_wire(libc::ENOENT as u32), Errno::ENOENT);
        assert_eq!(Errno::from_wire(libc::EAGAIN as u32), Errno::EAGAIN);
        assert_eq!(Errno::from_wire(libc::ECHILD as u32), Errno::EIO);
        assert_eq!(Errno::from_wire(libc::EINTR as u32), Errno::EIO);
        assert_eq!(Errno::from_wire(0), Errno::EIO);
        assert_eq!(Errno::from_wire(4000), Errno::EIO);
        assert_eq!(Errno::from_wire(u32::MAX), Errno::EIO);
    }

    #[test]
    fn result_maps_negative_returns_to_errno() {
        // SAFETY: close(-1) has no effect besides setting errno to EBADF.
        let r = unsafe { libc::close(-1) };
        assert_eq!(Errno::result(r), Err(Errno::EBADF));
        assert_eq!(Errno::result(3), Ok(3));
    }
}
