//! Where 9P travels: a unix socket or TCP, named `unix:PATH` or
//! `tcp:HOST:PORT` on command lines and in `walkfs_open` sources.

use std::fs::Permissions;
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};

/// A 9P address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Addr {
    Unix(String),
    Tcp(String),
}

impl Addr {
    /// `unix:PATH` or `tcp:HOST:PORT`; `None` for anything else.
    pub fn parse(s: &str) -> Option<Addr> {
        if let Some(p) = s.strip_prefix("unix:") {
            (!p.is_empty()).then(|| Addr::Unix(p.to_string()))
        } else if let Some(hp) = s.strip_prefix("tcp:") {
            hp.rsplit_once(':')
                .filter(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok())
                .map(|_| Addr::Tcp(hp.to_string()))
        } else {
            None
        }
    }

    pub fn connect(&self) -> io::Result<Stream> {
        Ok(match self {
            Addr::Unix(p) => Stream::Unix(UnixStream::connect(p)?),
            Addr::Tcp(hp) => {
                let s = TcpStream::connect(hp)?;
                // Requests are small and latency-bound.
                s.set_nodelay(true)?;
                Stream::Tcp(s)
            }
        })
    }

    /// Listen here. A unix socket is created with mode 0600 (its owner
    /// alone may connect; [`Listener::share`] opens it to a group), and a
    /// stale socket file is replaced, never a file of another type.
    pub fn listen(&self) -> io::Result<Listener> {
        Ok(match self {
            Addr::Unix(p) => {
                remove_stale_socket(p)?;
                // Bound under a temporary name, made private, then linked
                // into place: at no instant does the socket exist at `p`
                // with the umask's wider mode, and link(2) never replaces.
                let tmp = format!("{p}.{}.tmp", std::process::id());
                remove_stale_socket(&tmp)?;
                let l = UnixListener::bind(&tmp)?;
                let placed = std::fs::set_permissions(&tmp, Permissions::from_mode(0o600))
                    .and_then(|()| std::fs::hard_link(&tmp, p));
                let _ = std::fs::remove_file(&tmp);
                placed?;
                Listener::Unix(l, p.clone())
            }
            Addr::Tcp(hp) => Listener::Tcp(TcpListener::bind(hp)?),
        })
    }

    /// Is this a TCP address reachable from other machines (anything but
    /// a loopback address)? Unix sockets are not.
    pub fn is_exposed(&self) -> io::Result<bool> {
        match self {
            Addr::Unix(_) => Ok(false),
            Addr::Tcp(hp) => {
                use std::net::ToSocketAddrs;
                let mut any = false;
                for a in hp.to_socket_addrs()? {
                    any = true;
                    if !a.ip().is_loopback() {
                        return Ok(true);
                    }
                }
                Ok(!any)
            }
        }
    }
}

impl std::fmt::Display for Addr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Addr::Unix(p) => write!(f, "unix:{p}"),
            Addr::Tcp(hp) => write!(f, "tcp:{hp}"),
        }
    }
}

fn remove_stale_socket(p: &str) -> io::Result<()> {
    use std::os::unix::fs::FileTypeExt;
    match std::fs::symlink_metadata(p) {
        Ok(m) if m.file_type().is_socket() => std::fs::remove_file(p),
        _ => Ok(()),
    }
}

/// The shared secret in `path` for a server that asks for one (without a
/// trailing newline). Like ssh with its keys, a file others may read is
/// refused: the secret would not be one.
pub fn read_secret_file(path: &std::path::Path) -> io::Result<Vec<u8>> {
    use std::os::unix::fs::MetadataExt;
    if std::fs::metadata(path)?.mode() & 0o007 != 0 {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "{} is readable by others: chmod o-rwx it first",
                path.display()
            ),
        ));
    }
    let mut s = std::fs::read(path)?;
    while s.last().is_some_and(|&b| b == b'\n' || b == b'\r') {
        s.pop();
    }
    Ok(s)
}

/// A connected byte stream.
#[derive(Debug)]
pub enum Stream {
    Unix(UnixStream),
    Tcp(TcpStream),
}

impl Stream {
    pub fn try_clone(&self) -> io::Result<Stream> {
        Ok(match self {
            Stream::Unix(s) => Stream::Unix(s.try_clone()?),
            Stream::Tcp(s) => Stream::Tcp(s.try_clone()?),
        })
    }
    pub fn shutdown(&self) -> io::Result<()> {
        match self {
            Stream::Unix(s) => s.shutdown(Shutdown::Both),
            Stream::Tcp(s) => s.shutdown(Shutdown::Both),
        }
    }
    /// Stop sending; what the peer sent can still be read.
    pub fn shutdown_write(&self) -> io::Result<()> {
        match self {
            Stream::Unix(s) => s.shutdown(Shutdown::Write),
            Stream::Tcp(s) => s.shutdown(Shutdown::Write),
        }
    }
    /// Give up on a write that makes no progress for `t` (a peer that
    /// stopped reading); `None` waits forever.
    pub fn set_write_timeout(&self, t: Option<std::time::Duration>) -> io::Result<()> {
        match self {
            Stream::Unix(s) => s.set_write_timeout(t),
            Stream::Tcp(s) => s.set_write_timeout(t),
        }
    }
    /// Who is on the other end, for logs.
    pub fn peer(&self) -> String {
        match self {
            Stream::Unix(_) => "unix peer".to_string(),
            Stream::Tcp(s) => s
                .peer_addr()
                .map(|a| a.to_string())
                .unwrap_or_else(|_| "tcp peer".into()),
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Unix(s) => s.read(buf),
            Stream::Tcp(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Unix(s) => s.write(buf),
            Stream::Tcp(s) => s.write(buf),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// A listening socket.
pub enum Listener {
    /// The socket and the path it was placed at.
    Unix(UnixListener, String),
    Tcp(TcpListener),
}

impl Listener {
    /// Let group `gid` connect too (mode 0660), for a unix socket.
    pub fn share(&self, gid: u32) -> io::Result<()> {
        if let Listener::Unix(_, p) = self {
            std::os::unix::fs::chown(p, None, Some(gid))?;
            std::fs::set_permissions(p, Permissions::from_mode(0o660))?;
        }
        Ok(())
    }

    pub fn accept(&self) -> io::Result<Stream> {
        Ok(match self {
            Listener::Unix(l, _) => Stream::Unix(l.accept()?.0),
            Listener::Tcp(l) => {
                let s = l.accept()?.0;
                s.set_nodelay(true)?;
                Stream::Tcp(s)
            }
        })
    }
    /// The bound address (a TCP port chosen by the system, for tests).
    pub fn local_addr(&self) -> io::Result<Addr> {
        Ok(match self {
            Listener::Unix(_, p) => Addr::Unix(p.clone()),
            Listener::Tcp(l) => Addr::Tcp(l.local_addr()?.to_string()),
        })
    }
}
