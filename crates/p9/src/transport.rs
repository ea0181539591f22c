//! Where 9P travels: a unix socket or TCP, named `unix:PATH` or
//! `tcp:HOST:PORT` on command lines and in `walkfs_open` sources.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
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

    /// Listen here. A stale unix socket file is replaced.
    pub fn listen(&self) -> io::Result<Listener> {
        Ok(match self {
            Addr::Unix(p) => {
                if std::fs::symlink_metadata(p)
                    .map(|m| {
                        use std::os::unix::fs::FileTypeExt;
                        m.file_type().is_socket()
                    })
                    .unwrap_or(false)
                {
                    std::fs::remove_file(p)?;
                }
                Listener::Unix(UnixListener::bind(p)?)
            }
            Addr::Tcp(hp) => Listener::Tcp(TcpListener::bind(hp)?),
        })
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
    Unix(UnixListener),
    Tcp(TcpListener),
}

impl Listener {
    pub fn accept(&self) -> io::Result<Stream> {
        Ok(match self {
            Listener::Unix(l) => Stream::Unix(l.accept()?.0),
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
            Listener::Unix(l) => Addr::Unix(
                l.local_addr()?
                    .as_pathname()
                    .map(|p| p.display().to_string())
                    .unwrap_or_default(),
            ),
            Listener::Tcp(l) => Addr::Tcp(l.local_addr()?.to_string()),
        })
    }
}
