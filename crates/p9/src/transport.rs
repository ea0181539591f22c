//! Where 9P travels: a unix socket, TCP or vsock, named `unix:PATH`,
//! `tcp:HOST:PORT` or `vsock:[CID:]PORT` on command lines and in
//! `walkfs_open` sources.
//!
//! vsock is how a VM reaches its host (and the host a VM) without a
//! network: a guest mounts `vsock:2:PORT` (CID 2 is always the host). VM
//! managers that use *hybrid* vsock (Firecracker, cloud-hypervisor, lima's
//! vz, QEMU with vhost-device-vsock) turn a guest's connection to the host
//! port PORT into a connection to the unix socket `PATH_PORT` on the host,
//! so there the server listens on `unix:PATH_PORT` and needs no vsock.

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
    /// An AF_VSOCK address. `cid` is [`VSOCK_CID_ANY`] for a listener bound
    /// to every CID of this machine.
    Vsock {
        cid: u32,
        port: u32,
    },
}

/// `VMADDR_CID_ANY`: listen on whatever CIDs this machine has.
pub const VSOCK_CID_ANY: u32 = u32::MAX;
/// `VMADDR_CID_LOCAL`: this machine, through the vsock loopback.
pub const VSOCK_CID_LOCAL: u32 = 1;
/// `VMADDR_CID_HOST`: the host, seen from a guest.
pub const VSOCK_CID_HOST: u32 = 2;

impl Addr {
    /// `unix:PATH`, `tcp:HOST:PORT`, `vsock:CID:PORT` or `vsock:PORT` (any
    /// CID, for a listener); `None` for anything else. A CID may be given
    /// as `host` (2), `local` (1) or `any`.
    pub fn parse(s: &str) -> Option<Addr> {
        if let Some(p) = s.strip_prefix("unix:") {
            (!p.is_empty()).then(|| Addr::Unix(p.to_string()))
        } else if let Some(hp) = s.strip_prefix("tcp:") {
            hp.rsplit_once(':')
                .filter(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok())
                .map(|_| Addr::Tcp(hp.to_string()))
        } else if let Some(cp) = s.strip_prefix("vsock:") {
            let (cid, port) = match cp.split_once(':') {
                Some((c, p)) => (parse_cid(c)?, p),
                None => (VSOCK_CID_ANY, cp),
            };
            let port = port.parse::<u32>().ok().filter(|&p| p != u32::MAX)?;
            Some(Addr::Vsock { cid, port })
        } else {
            None
        }
    }

    /// The prefixes [`Addr::parse`] takes: a source string that starts
    /// with one of these names a 9P server, never a host directory.
    pub const PREFIXES: [&'static str; 3] = ["unix:", "tcp:", "vsock:"];

    /// Does `s` claim to be a 9P address (whether or not it parses)?
    pub fn claims(s: &str) -> bool {
        Self::PREFIXES.iter().any(|p| s.starts_with(p))
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
            Addr::Vsock { cid, port } => {
                if *cid == VSOCK_CID_ANY {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        format!("vsock:{port}: say which machine to connect to (vsock:CID:{port}; the host is CID 2)"),
                    ));
                }
                vsock::connect(*cid, *port)?
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
            Addr::Vsock { cid, port } => vsock::listen(*cid, *port)?,
        })
    }

    /// Is this an address reachable from other machines (TCP on anything
    /// but a loopback address; vsock on anything but the vsock loopback,
    /// since every guest of the host can connect)? Unix sockets are not.
    pub fn is_exposed(&self) -> io::Result<bool> {
        match self {
            Addr::Unix(_) => Ok(false),
            Addr::Vsock { cid, .. } => Ok(*cid != VSOCK_CID_LOCAL),
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
            Addr::Vsock { cid, port } if *cid == VSOCK_CID_ANY => write!(f, "vsock:{port}"),
            Addr::Vsock { cid, port } => write!(f, "vsock:{cid}:{port}"),
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
    /// An AF_VSOCK stream, and its peer (`vsock:CID:PORT`, for logs).
    ///
    /// Held as a `UnixStream` made from the socket: of std's unix stream
    /// only the calls every stream socket takes are used on it (read,
    /// write, shutdown, dup, `SO_RCVTIMEO`/`SO_SNDTIMEO`), never its
    /// address methods, which would refuse a vsock address.
    Vsock(UnixStream, String),
}

impl Stream {
    pub fn try_clone(&self) -> io::Result<Stream> {
        Ok(match self {
            Stream::Unix(s) => Stream::Unix(s.try_clone()?),
            Stream::Vsock(s, p) => Stream::Vsock(s.try_clone()?, p.clone()),
            Stream::Tcp(s) => Stream::Tcp(s.try_clone()?),
        })
    }
    pub fn shutdown(&self) -> io::Result<()> {
        match self {
            Stream::Unix(s) | Stream::Vsock(s, _) => s.shutdown(Shutdown::Both),
            Stream::Tcp(s) => s.shutdown(Shutdown::Both),
        }
    }
    /// Stop sending; what the peer sent can still be read.
    pub fn shutdown_write(&self) -> io::Result<()> {
        match self {
            Stream::Unix(s) | Stream::Vsock(s, _) => s.shutdown(Shutdown::Write),
            Stream::Tcp(s) => s.shutdown(Shutdown::Write),
        }
    }
    /// Give up on a write that makes no progress for `t` (a peer that
    /// stopped reading); `None` waits forever.
    pub fn set_write_timeout(&self, t: Option<std::time::Duration>) -> io::Result<()> {
        match self {
            Stream::Unix(s) | Stream::Vsock(s, _) => s.set_write_timeout(t),
            Stream::Tcp(s) => s.set_write_timeout(t),
        }
    }
    /// Who is on the other end, for logs.
    pub fn peer(&self) -> String {
        match self {
            Stream::Unix(_) => "unix peer".to_string(),
            Stream::Vsock(_, peer) => peer.clone(),
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
            Stream::Unix(s) | Stream::Vsock(s, _) => s.read(buf),
            Stream::Tcp(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Unix(s) | Stream::Vsock(s, _) => s.write(buf),
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
    /// An AF_VSOCK socket and the address it listens on.
    Vsock(std::os::fd::OwnedFd, Addr),
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
            Listener::Vsock(fd, _) => vsock::accept(fd)?,
        })
    }
    /// The bound address (a TCP port chosen by the system, for tests).
    pub fn local_addr(&self) -> io::Result<Addr> {
        Ok(match self {
            Listener::Unix(_, p) => Addr::Unix(p.clone()),
            Listener::Tcp(l) => Addr::Tcp(l.local_addr()?.to_string()),
            Listener::Vsock(_, a) => a.clone(),
        })
    }
}

fn parse_cid(c: &str) -> Option<u32> {
    match c {
        "any" => Some(VSOCK_CID_ANY),
        "local" => Some(VSOCK_CID_LOCAL),
        "host" => Some(VSOCK_CID_HOST),
        _ => c.parse().ok(),
    }
}

/// AF_VSOCK through libc: std has no vsock sockets.
mod vsock {
    use super::{Addr, Listener, Stream};
    use std::io;
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    use std::os::unix::net::UnixStream;

    fn sockaddr(cid: u32, port: u32) -> libc::sockaddr_vm {
        // SAFETY: sockaddr_vm is plain old data; all-zero is a valid value
        // (and the reserved bytes must be zero).
        let mut a: libc::sockaddr_vm = unsafe { std::mem::zeroed() };
        a.svm_family = libc::AF_VSOCK as libc::sa_family_t;
        a.svm_cid = cid;
        a.svm_port = port;
        a
    }

    fn socket() -> io::Result<OwnedFd> {
        // SAFETY: socket(2) takes no pointers; a non-negative result is a
        // new descriptor that nothing else owns.
        let fd = unsafe { libc::socket(libc::AF_VSOCK, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
        if fd < 0 {
            let e = io::Error::last_os_error();
            return Err(match e.raw_os_error() {
                Some(libc::EAFNOSUPPORT) => io::Error::new(
                    e.kind(),
                    "vsock is not available here (no vsock transport loaded: \
                     modprobe vmw_vsock_virtio_transport in a guest, vhost_vsock on a host)",
                ),
                _ => e,
            });
        }
        // SAFETY: fd was just returned by socket(2) and is owned by no one else.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }

    const LEN: libc::socklen_t = std::mem::size_of::<libc::sockaddr_vm>() as libc::socklen_t;

    pub(super) fn connect(cid: u32, port: u32) -> io::Result<Stream> {
        let fd = socket()?;
        let a = sockaddr(cid, port);
        loop {
            // SAFETY: `a` is a valid sockaddr_vm of LEN bytes that outlives the call.
            let r = unsafe { libc::connect(fd.as_raw_fd(), std::ptr::addr_of!(a).cast(), LEN) };
            if r == 0 {
                break;
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
        Ok(Stream::Vsock(
            UnixStream::from(fd),
            format!("vsock:{cid}:{port}"),
        ))
    }

    pub(super) fn listen(cid: u32, port: u32) -> io::Result<Listener> {
        let fd = socket()?;
        let a = sockaddr(cid, port);
        // SAFETY: `a` is a valid sockaddr_vm of LEN bytes that outlives the call.
        if unsafe { libc::bind(fd.as_raw_fd(), std::ptr::addr_of!(a).cast(), LEN) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: listen(2) on a descriptor we own; no pointers.
        if unsafe { libc::listen(fd.as_raw_fd(), 128) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Listener::Vsock(fd, Addr::Vsock { cid, port }))
    }

    pub(super) fn accept(l: &OwnedFd) -> io::Result<Stream> {
        let mut a = sockaddr(0, 0);
        let mut len = LEN;
        loop {
            // SAFETY: `a` and `len` are valid for writes and outlive the
            // call; accept4 writes at most `len` bytes into `a`.
            let fd = unsafe {
                libc::accept4(
                    l.as_raw_fd(),
                    std::ptr::addr_of_mut!(a).cast(),
                    &mut len,
                    libc::SOCK_CLOEXEC,
                )
            };
            if fd >= 0 {
                // SAFETY: accept4 returned a new descriptor nothing else owns.
                let s = UnixStream::from(unsafe { OwnedFd::from_raw_fd(fd) });
                return Ok(Stream::Vsock(
                    s,
                    format!("vsock:{}:{}", a.svm_cid, a.svm_port),
                ));
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vsock_addresses() {
        let v = |cid, port| Some(Addr::Vsock { cid, port });
        assert_eq!(Addr::parse("vsock:2:5640"), v(2, 5640));
        assert_eq!(Addr::parse("vsock:host:5640"), v(VSOCK_CID_HOST, 5640));
        assert_eq!(Addr::parse("vsock:local:9"), v(VSOCK_CID_LOCAL, 9));
        assert_eq!(Addr::parse("vsock:5640"), v(VSOCK_CID_ANY, 5640));
        assert_eq!(Addr::parse("vsock:any:5640"), v(VSOCK_CID_ANY, 5640));
        for bad in [
            "vsock:",
            "vsock:2:",
            "vsock:x:1",
            "vsock:2:port",
            "vsock:2:4294967295",
            "vsock:-1:5",
        ] {
            assert_eq!(Addr::parse(bad), None, "{bad}");
            assert!(Addr::claims(bad), "{bad}");
        }
        for s in [
            "vsock:2:5640",
            "vsock:5640",
            "unix:/run/w",
            "tcp:127.0.0.1:564",
        ] {
            assert_eq!(Addr::parse(s).map(|a| a.to_string()).as_deref(), Some(s));
        }
        assert!(!Addr::claims("/srv/data"));
    }

    #[test]
    fn vsock_exposure_follows_tcp_rules() {
        let exposed = |s: &str| Addr::parse(s).map(|a| a.is_exposed().ok());
        // Every guest of the host can reach a vsock port: like a TCP port
        // on a routable address, only the loopback is private.
        assert_eq!(exposed("vsock:5640"), Some(Some(true)));
        assert_eq!(exposed("vsock:2:5640"), Some(Some(true)));
        assert_eq!(exposed("vsock:1:5640"), Some(Some(false)));
        assert_eq!(exposed("unix:/run/w"), Some(Some(false)));
    }

    #[test]
    fn connecting_to_any_cid_is_refused_with_a_reason() {
        let e = Addr::parse("vsock:5640").map(|a| a.connect().err());
        let e = e.flatten().expect("vsock:PORT names no peer to connect to");
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        assert!(e.to_string().contains("CID"), "{e}");
    }
}
