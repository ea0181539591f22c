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
    fn result_maps_negative_returns_to_errno() {
        // SAFETY: close(-1) has no effect besides setting errno to EBADF.
        let r = unsafe { libc::close(-1) };
        assert_eq!(Errno::result(r), Err(Errno::EBADF));
        assert_eq!(Errno::result(3), Ok(3));
    }
}
