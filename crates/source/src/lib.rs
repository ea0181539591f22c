//! Sources of a walkfs [`Vfs`], by name, and the options of their
//! backends: what the front ends (the CLI, the C ABI, the FUSE mount)
//! share, so that the vfs knows no backend and no backend knows the vfs.
//!
//! A source ([`Source::parse`]) is
//! - `mem:`: an empty in-memory tree (memfs);
//! - `unix:PATH`, `tcp:HOST:PORT` or `vsock:CID:PORT`: the export of a
//!   9P2000.L server (`walkfs serve`, diod), through the 9P client;
//! - `ceph:` or `ceph:/DIR`: a CephFS (its root, or a directory in it),
//!   through libcephfs, loaded when the source is opened (options
//!   `ceph_conf`, `ceph_id`, `ceph_fs`, `ceph_set`);
//! - anything else: a host directory (hostfs).
//!
//! Options are given as one `name=value,...` string
//! ([`SourceOptions::parse`]): the backends' names ([`BackendOptions`]:
//! `msize`, `aname`, `secret_file`, `fids`, `host_fds`) go to the backend
//! built, every other name to the vfs ([`walkfs_vfs::Options`]); an
//! unknown name is an error ([`OptError`], `EINVAL` as an errno). Each
//! layer's options are a table ([`BACKEND_OPTIONS`],
//! [`walkfs_vfs::OPTIONS`]) read by one parser ([`walkfs_vfs::opt`]).
//!
//! ```
//! use walkfs_source::SourceOptions;
//! use walkfs_vfs::{Creds, AT_FDCWD};
//! let opts = SourceOptions::parse("cache=loose,negtimeout=-1").unwrap();
//! let vfs = walkfs_source::open("mem:", &opts).unwrap();
//! let ctx = vfs.context(Creds::root());
//! ctx.mkdirat(AT_FDCWD, b"/usr", 0o755).unwrap();
//! assert!(ctx.faccessat(AT_FDCWD, b"/usr", 0, 0).is_ok());
//! ```
//!
//! A local directory can also be reached the whole way through 9P:
//! [`serve_in_process`] exports it with a `walkfs serve` in this process
//! over a socketpair, and [`open_9p`] attaches the client to the other
//! end (what `walkfs mount` does, so that the whole stack runs). The
//! server's other parts a front end needs are re-exported here
//! ([`creds_for`], [`ServerConfig`], [`SERVE_DENTRIES`]).

use std::path::PathBuf;
use std::sync::Arc;

use walkfs_fsapi::{Errno, FileSystem, Result};
use walkfs_p9::{Addr, Stream};
use walkfs_vfs::opt::{self, Opt};
pub use walkfs_vfs::OptError;
use walkfs_vfs::{CachePolicy, Options, Vfs};

/// The server's user database: the credentials of a uid (or a name), with
/// its supplementary groups.
pub use walkfs_server::users::creds_for;
/// How an in-process server behaves ([`serve_in_process`]).
pub use walkfs_server::Config as ServerConfig;
/// Default bound on a server's own vfs cache.
pub use walkfs_server::SERVE_DENTRIES;

/// What a source string names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// `mem:`: an empty in-memory tree.
    Mem,
    /// `unix:PATH`, `tcp:HOST:PORT` or `vsock:CID:PORT`: a 9P2000.L server.
    P9(Addr),
    /// `ceph:` or `ceph:/DIR`: a CephFS, from the directory `DIR` of it
    /// (empty: its root).
    Ceph(String),
    /// Anything else: a host directory.
    Host(PathBuf),
}

impl Source {
    /// What `source` names. A `unix:`, `tcp:` or `vsock:` prefix with no usable
    /// address after it is `EINVAL` (not a host directory of that name).
    pub fn parse(source: &str) -> Result<Source> {
        if source == "mem:" {
            Ok(Source::Mem)
        } else if let Some(dir) = source.strip_prefix("ceph:") {
            match dir {
                "" => Ok(Source::Ceph(String::new())),
                d if d.starts_with('/') => Ok(Source::Ceph(d.to_string())),
                _ => Err(Errno::EINVAL),
            }
        } else if Addr::claims(source) {
            Addr::parse(source).map(Source::P9).ok_or(Errno::EINVAL)
        } else {
            Ok(Source::Host(PathBuf::from(source)))
        }
    }
}

impl std::str::FromStr for Source {
    type Err = Errno;

    fn from_str(s: &str) -> Result<Source> {
        Source::parse(s)
    }
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Mem => f.write_str("mem:"),
            Source::P9(a) => a.fmt(f),
            Source::Ceph(d) => write!(f, "ceph:{d}"),
            Source::Host(p) => p.display().fmt(f),
        }
    }
}

/// The options of the backends (each used by the backend it names, and
/// ignored by the others).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackendOptions {
    /// For a 9P source: the largest message size to negotiate (at least
    /// 4096).
    pub msize: u32,
    /// For a 9P source: the export to attach to (diod wants its path;
    /// `walkfs serve` exports one tree and ignores it).
    pub aname: String,
    /// For a 9P source: a file holding the secret the server asks for
    /// (`walkfs serve --secret-file`), shown with 9P's Tauth.
    pub secret_file: Option<PathBuf>,
    /// For a 9P source: fids kept for cached files beyond those in use
    /// (the rest are walked to again by name when needed).
    pub fids: u32,
    /// For a host directory: `O_PATH` descriptors kept for files not in
    /// use (the rest are opened again by name when needed).
    pub host_fds: u32,
    /// For a host directory watched with fanotify: ask for a queue with
    /// no limit (`watch_queue=unlimited`, as root), so that no change is
    /// lost while the reader is slow. A FUSE mount that replays changes
    /// to its watchers asks for it: it cannot pass a loss on.
    pub watch_queue_unlimited: bool,
    /// For a host directory: run the changes the vfs answers from its
    /// cache (unlinks, renames, attribute changes, writes) on a thread of
    /// the backend's, behind the caller (`host_behind=1`; hostfs
    /// behind.rs). Off by default: on a machine with few cores the
    /// hand-over costs more than the host call it hides.
    pub host_behind: bool,
    /// For a host directory: reads of its files leave their access times
    /// alone (`O_NOATIME`): set by a mount with `noatime`, whose kernel
    /// keeps no access times either.
    pub host_noatime: bool,
    /// For a 9P source at an address: when the connection drops,
    /// reconnect and carry on, programs waiting at most this many
    /// seconds (`reconnect=SECONDS`; 0: fail at once, with `ENOTCONN`).
    pub reconnect_secs: u32,
    /// For a CephFS: the cluster's configuration file (`ceph_conf=`;
    /// unset: libcephfs's search path, `$CEPH_CONF` first).
    pub ceph_conf: Option<PathBuf>,
    /// For a CephFS: the client's id (`ceph_id=admin` for
    /// `client.admin`).
    pub ceph_id: Option<String>,
    /// For a CephFS: the file system's name, where the cluster has more
    /// than one (`ceph_fs=`).
    pub ceph_fs: Option<String>,
    /// For a CephFS: client options set after the configuration file is
    /// read (`ceph_set=NAME:VALUE`, repeatable).
    pub ceph_set: Vec<(String, String)>,
    /// For a CephFS: report changes to other walkfs clients over RADOS and
    /// take theirs, so that watchers on each mount get inotify events for
    /// the others' changes (`ceph_reports=1`). Off by default: with it a
    /// read right after another client's close saw old data 28 times in
    /// 1,100 (without it, 0: every cached answer is checked with
    /// libcephfs).
    pub ceph_reports: bool,
}

impl Default for BackendOptions {
    fn default() -> BackendOptions {
        BackendOptions {
            msize: 512 * 1024,
            aname: String::new(),
            secret_file: None,
            fids: walkfs_p9client::DEFAULT_NODE_FIDS as u32,
            host_fds: walkfs_hostfs::DEFAULT_CACHED_FDS as u32,
            watch_queue_unlimited: false,
            host_behind: false,
            host_noatime: false,
            reconnect_secs: walkfs_p9client::DEFAULT_RECONNECT.as_secs() as u32,
            ceph_conf: None,
            ceph_id: None,
            ceph_fs: None,
            ceph_set: Vec::new(),
            ceph_reports: false,
        }
    }
}

/// The backends' options ([`BackendOptions`]), as [`walkfs_vfs::OPTIONS`]
/// is the vfs's: none may change on a running vfs.
pub const BACKEND_OPTIONS: &[Opt<BackendOptions>] = &[
    Opt {
        names: &["msize"],
        live: false,
        set: |o, n, v| {
            o.msize = opt::count(n, v, 4096, u64::from(u32::MAX))?;
            Ok(())
        },
    },
    Opt {
        names: &["aname"],
        live: false,
        set: |o, _, v| {
            o.aname = v.to_string();
            Ok(())
        },
    },
    Opt {
        names: &["secret_file"],
        live: false,
        set: |o, n, v| {
            if v.is_empty() {
                return Err(OptError::bad(n, v, "expected the path of a file"));
            }
            o.secret_file = Some(PathBuf::from(v));
            Ok(())
        },
    },
    Opt {
        names: &["fids"],
        live: false,
        set: |o, n, v| {
            o.fids = opt::count(n, v, 1, u64::from(u32::MAX))?;
            Ok(())
        },
    },
    Opt {
        names: &["host_fds"],
        live: false,
        set: |o, n, v| {
            o.host_fds = opt::count(n, v, 1, u64::from(u32::MAX))?;
            Ok(())
        },
    },
    Opt {
        names: &["watch_queue"],
        live: false,
        set: |o, n, v| {
            o.watch_queue_unlimited = opt::choice(n, v, &["unlimited", "limited"])? == "unlimited";
            Ok(())
        },
    },
    Opt {
        names: &["host_behind"],
        live: false,
        set: |o, n, v| {
            o.host_behind = opt::flag(n, v)?;
            Ok(())
        },
    },
    Opt {
        names: &["ceph_conf"],
        live: false,
        set: |o, n, v| {
            if v.is_empty() {
                return Err(OptError::bad(n, v, "expected the path of a ceph.conf"));
            }
            o.ceph_conf = Some(PathBuf::from(v));
            Ok(())
        },
    },
    Opt {
        names: &["ceph_id"],
        live: false,
        set: |o, n, v| {
            if v.is_empty() {
                return Err(OptError::bad(n, v, "expected a client id"));
            }
            o.ceph_id = Some(v.to_string());
            Ok(())
        },
    },
    Opt {
        names: &["ceph_fs"],
        live: false,
        set: |o, n, v| {
            if v.is_empty() {
                return Err(OptError::bad(n, v, "expected a file system name"));
            }
            o.ceph_fs = Some(v.to_string());
            Ok(())
        },
    },
    Opt {
        names: &["ceph_reports"],
        live: false,
        set: |o, n, v| {
            o.ceph_reports = opt::flag(n, v)?;
            Ok(())
        },
    },
    Opt {
        names: &["ceph_set"],
        live: false,
        set: |o, n, v| match v.split_once(':') {
            Some((k, val)) if !k.is_empty() => {
                o.ceph_set.push((k.to_string(), val.to_string()));
                Ok(())
            }
            _ => Err(OptError::bad(n, v, "expected NAME:VALUE")),
        },
    },
    Opt {
        names: &["reconnect"],
        live: false,
        set: |o, n, v| {
            o.reconnect_secs = opt::count(n, v, 0, u64::from(u32::MAX))?;
            Ok(())
        },
    },
];

impl BackendOptions {
    /// Is `name` a backend's option (rather than the vfs's)?
    pub fn handles(name: &str) -> bool {
        opt::find(BACKEND_OPTIONS, name).is_some()
    }

    /// Set one option by name: an error for another name or a bad value
    /// (a count below 1, an msize below 4096, an empty `secret_file`),
    /// leaving the options as they were.
    pub fn set(&mut self, name: &str, value: &str) -> std::result::Result<(), OptError> {
        opt::set(BACKEND_OPTIONS, self, name, value)
    }
}

/// Every option of a source: the vfs's and its backend's.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SourceOptions {
    pub vfs: Options,
    pub backend: BackendOptions,
}

impl SourceOptions {
    /// Parse `"cache=loose,msize=65536,..."`; an empty string gives the
    /// defaults. Unknown names are errors.
    pub fn parse(s: &str) -> std::result::Result<SourceOptions, OptError> {
        let mut o = SourceOptions::default();
        o.apply(s)?;
        Ok(o)
    }

    /// The defaults of a server's own vfs (`walkfs serve`, or one in this
    /// process): the exported tree's authority, its caches bounded by
    /// [`SERVE_DENTRIES`]; `coherent`: kept coherent with the host by
    /// watching it.
    pub fn served(coherent: bool) -> SourceOptions {
        let mut o = SourceOptions::default();
        if coherent {
            o.vfs.cache = CachePolicy::Coherent;
        }
        o.vfs.max_dentries = SERVE_DENTRIES;
        o
    }

    /// Set each option of `text` (`name=value,...`) in turn: the later of
    /// two settings of one name wins.
    pub fn apply(&mut self, text: &str) -> std::result::Result<(), OptError> {
        for (name, value) in opt::items(text) {
            self.set(name, value)?;
        }
        Ok(())
    }

    /// Set one option by name: a backend's name to [`BackendOptions`],
    /// any other to the vfs's [`Options::set`] (an error for a name
    /// neither knows, or a bad value).
    pub fn set(&mut self, name: &str, value: &str) -> std::result::Result<(), OptError> {
        if BackendOptions::handles(name) {
            self.backend.set(name, value)
        } else {
            self.vfs.set(name, value)
        }
    }
}

impl From<Options> for SourceOptions {
    /// The vfs options `vfs`, the backends' defaults.
    fn from(vfs: Options) -> SourceOptions {
        SourceOptions {
            vfs,
            backend: BackendOptions::default(),
        }
    }
}

/// A vfs over `source` (see [`Source`]), watching for changes at once
/// with `cache=coherent`.
pub fn open(source: &str, opts: &SourceOptions) -> Result<Vfs> {
    open_source(&Source::parse(source)?, opts, true)
}

/// [`open`], with the reporting of changes made to a host directory
/// (`cache=coherent`) set up but not started until
/// [`Vfs::start_watching`]: for a process that confines itself in
/// between, since a thread started before would escape the confinement.
/// (A 9P source is watched at once: its notifications come over the
/// connection already open.)
pub fn open_held(source: &str, opts: &SourceOptions) -> Result<Vfs> {
    open_source(&Source::parse(source)?, opts, false)
}

/// A vfs over `source`; `start`: start watching a host directory now.
pub fn open_source(source: &Source, opts: &SourceOptions, start: bool) -> Result<Vfs> {
    match source {
        Source::Mem => Vfs::new(Arc::new(walkfs_memfs::MemFs::new()), &opts.vfs),
        Source::P9(addr) => open_9p_at(&addr.to_string(), opts),
        Source::Ceph(dir) => {
            let b = &opts.backend;
            let cfg = walkfs_cephfs::Config {
                conf: b.ceph_conf.clone(),
                id: b.ceph_id.clone(),
                fs_name: b.ceph_fs.clone(),
                root: dir.clone(),
                options: b.ceph_set.clone(),
                notify_pool: None,
                no_reports: !b.ceph_reports,
            };
            let fs: Arc<dyn FileSystem> = Arc::new(walkfs_cephfs::CephFs::mount(&cfg)?);
            Vfs::new(fs, &opts.vfs)
        }
        Source::Host(dir) => {
            let host = walkfs_hostfs::HostFs::with_cached_fds(dir, opts.backend.host_fds as usize)?;
            host.set_watch_queue_unlimited(opts.backend.watch_queue_unlimited);
            host.set_changes_behind(opts.backend.host_behind);
            host.set_noatime(opts.backend.host_noatime);
            let fs: Arc<dyn FileSystem> = Arc::new(host);
            if start {
                Vfs::new(fs, &opts.vfs)
            } else {
                Vfs::new_held(fs, &opts.vfs)
            }
        }
    }
}

/// A vfs over the 9P server at the other end of `stream` (connected: a
/// socket, or one end of a socketpair whose other end a server in this
/// process serves, see [`serve_in_process`]).
pub fn open_9p(stream: Stream, opts: &SourceOptions) -> Result<Vfs> {
    let cfg = p9_config(opts)?;
    let fs = Arc::new(walkfs_p9client::P9Fs::on_stream(stream, &cfg)?);
    Vfs::new(fs, &opts.vfs)
}

/// A vfs over the 9P server at `addr`, dialed again when the connection
/// drops (`reconnect=SECONDS`).
pub fn open_9p_at(addr: &str, opts: &SourceOptions) -> Result<Vfs> {
    let cfg = p9_config(opts)?;
    let fs = Arc::new(walkfs_p9client::P9Fs::connect(addr, &cfg)?);
    Vfs::new(fs, &opts.vfs)
}

/// The 9P client's configuration for `opts`.
fn p9_config(opts: &SourceOptions) -> Result<walkfs_p9client::Config> {
    let b = &opts.backend;
    let secret = match &b.secret_file {
        Some(path) => Some(read_secret(path)?),
        None => None,
    };
    let cfg = walkfs_p9client::Config {
        msize: b.msize,
        aname: b.aname.clone(),
        secret,
        // Ask the server to report changes only when they are used.
        notify: opts.vfs.cache == CachePolicy::Coherent,
        node_fids: b.fids as usize,
        reconnect: std::time::Duration::from_secs(u64::from(b.reconnect_secs)),
        ..Default::default()
    };
    Ok(cfg)
}

/// Export `source` (a host directory or `mem:`) with a `walkfs serve` in
/// this process, on one end of a socketpair; the other end is returned,
/// for [`open_9p`]. The server's own vfs is the exported tree's
/// authority: default switches, its own caches bounded by
/// [`SERVE_DENTRIES`], the client's `host_fds`; for a `cache=coherent`
/// client, kept coherent with the host by watching it (and telling the
/// client). The server's threads live as long as the connection.
pub fn serve_in_process(source: &str, opts: &SourceOptions, cfg: ServerConfig) -> Result<Stream> {
    let mut served = SourceOptions::served(opts.vfs.cache == CachePolicy::Coherent);
    served.backend.host_fds = opts.backend.host_fds;
    served.backend.ceph_conf = opts.backend.ceph_conf.clone();
    served.backend.ceph_id = opts.backend.ceph_id.clone();
    served.backend.ceph_fs = opts.backend.ceph_fs.clone();
    served.backend.ceph_set = opts.backend.ceph_set.clone();
    served.backend.ceph_reports = opts.backend.ceph_reports;
    let vfs = open(source, &served)?;
    // A host directory's files keep the numbers they were made with
    // across mounts (the server's state: walkfs_server::inostate).
    let export = std::path::Path::new(source);
    let inos = match export.is_dir() {
        true => {
            let dir = walkfs_server::inostate::default_dir(export);
            match walkfs_server::inostate::InoState::open(&dir, export) {
                Ok(state) => walkfs_server::inos::Inos::with_state(state),
                Err(e) => {
                    tracing::warn!("state dir {}: {e}; numbers last one mount", dir.display());
                    walkfs_server::inos::Inos::default()
                }
            }
        }
        false => walkfs_server::inos::Inos::default(),
    };
    let server = walkfs_server::Server::with_inos(vfs, cfg, inos);
    let (a, b) = std::os::unix::net::UnixStream::pair().map_err(Errno::from)?;
    server.serve_stream(Stream::Unix(a));
    Ok(Stream::Unix(b))
}

/// [`serve_in_process`], and the 9P client attached to it with `opts`:
/// the whole stack (client, server, backend) over `source`.
pub fn open_served(source: &str, opts: &SourceOptions, cfg: ServerConfig) -> Result<Vfs> {
    open_9p(serve_in_process(source, opts, cfg)?, opts)
}

/// The secret for `secret_file=`: see [`walkfs_p9::read_secret_file`]
/// (which refuses a file others may read: `EACCES`).
fn read_secret(path: &std::path::Path) -> Result<Vec<u8>> {
    walkfs_p9::read_secret_file(path).map_err(|e| {
        tracing::error!("secret file: {e}");
        match e.kind() {
            std::io::ErrorKind::PermissionDenied => Errno::EACCES,
            _ => Errno::from(e),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use walkfs_vfs::{Creds, NegPolicy, AT_FDCWD};

    #[test]
    fn sources_by_name() {
        assert_eq!(Source::parse("mem:"), Ok(Source::Mem));
        assert_eq!(
            Source::parse("unix:/run/w.sock"),
            Ok(Source::P9(Addr::Unix("/run/w.sock".into())))
        );
        assert!(matches!(
            Source::parse("tcp:127.0.0.1:564"),
            Ok(Source::P9(Addr::Tcp(_)))
        ));
        assert_eq!(
            Source::parse("vsock:2:5640"),
            Ok(Source::P9(Addr::Vsock { cid: 2, port: 5640 }))
        );
        assert_eq!(Source::parse("unix:"), Err(Errno::EINVAL));
        assert_eq!(Source::parse("vsock:guest:1"), Err(Errno::EINVAL));
        assert_eq!(
            Source::parse("/srv/data"),
            Ok(Source::Host(PathBuf::from("/srv/data")))
        );
        for s in ["mem:", "unix:/run/w.sock", "vsock:3:564", "/srv/data"] {
            assert_eq!(Source::parse(s).unwrap().to_string(), s);
        }
    }

    #[test]
    fn options_are_routed_by_name() {
        let o = SourceOptions::parse(
            "cache=coherent,msize=65536,aname=/srv,fids=64,host_fds=8,secret_file=/k,negtimeout=0,fastpath=0,dir_readahead=4,watch_queue=unlimited,host_behind=1,reconnect=5,ceph_conf=/c,ceph_id=walkfs,ceph_fs=fs2,ceph_set=client_oc:false,ceph_set=debug_client:0",
        )
        .unwrap();
        assert_eq!(o.vfs.cache, CachePolicy::Coherent);
        assert_eq!(o.vfs.negative, NegPolicy::Off);
        assert!(!o.vfs.fastpath);
        assert_eq!(
            o.backend,
            BackendOptions {
                msize: 65536,
                aname: "/srv".into(),
                secret_file: Some("/k".into()),
                fids: 64,
                host_fds: 8,
                watch_queue_unlimited: true,
                host_behind: true,
                host_noatime: false,
                reconnect_secs: 5,
                ceph_conf: Some("/c".into()),
                ceph_id: Some("walkfs".into()),
                ceph_fs: Some("fs2".into()),
                ceph_set: vec![
                    ("client_oc".into(), "false".into()),
                    ("debug_client".into(), "0".into())
                ],
                ceph_reports: false,
            }
        );
        assert!(SourceOptions::parse("ceph_set=novalue").is_err());
        assert!(
            SourceOptions::parse("ceph_reports=1")
                .unwrap()
                .backend
                .ceph_reports
        );
        assert!(SourceOptions::parse("ceph_conf=").is_err());
        assert_eq!(Source::parse("ceph:").unwrap(), Source::Ceph(String::new()));
        assert_eq!(
            Source::parse("ceph:/a/b").unwrap(),
            Source::Ceph("/a/b".into())
        );
        assert_eq!(Source::parse("ceph:a"), Err(Errno::EINVAL));
        assert_eq!(Source::Ceph("/a".into()).to_string(), "ceph:/a");
        assert_eq!(SourceOptions::default().backend.reconnect_secs, 60);
        assert!(SourceOptions::parse("reconnect=-1").is_err());
        assert!(SourceOptions::parse("watch_queue=some").is_err());
        assert!(SourceOptions::parse("host_behind=2").is_err());
        // One vocabulary for every switch, whichever layer has it.
        assert!(
            SourceOptions::parse("host_behind=yes")
                .unwrap()
                .backend
                .host_behind
        );
        assert_eq!(o.vfs.dir_readahead, 4);
        assert_eq!(SourceOptions::parse("").unwrap(), SourceOptions::default());
        assert_eq!(SourceOptions::default().backend.fids, 1024);
        assert_eq!(SourceOptions::default().backend.host_fds, 2048);
        for bad in [
            "bogus=1",
            "msize=4095",
            "msize=x",
            "fids=0",
            "host_fds=-1",
            "secret_file=",
            "secret_file",
            "sync_metadata=2",
            "negtimeout=-2",
            "cache=strict",
        ] {
            let e = SourceOptions::parse(bad).expect_err(bad);
            assert_eq!(Errno::from(e), Errno::EINVAL, "{bad}");
        }
    }

    #[test]
    fn opens_each_kind_of_source() {
        let opts = SourceOptions::default();
        let vfs = open("mem:", &opts).unwrap();
        vfs.context(Creds::root())
            .mkdirat(AT_FDCWD, b"/d", 0o755)
            .unwrap();
        // A memfs sends no messages.
        assert_eq!(vfs.rpc_stats(), None);
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir(tmp.path().join("sub")).unwrap();
        let dir = tmp.path().to_str().unwrap();
        let vfs = open_held(dir, &opts).unwrap();
        vfs.start_watching();
        let ctx = vfs.context(Creds::root());
        assert_eq!(ctx.faccessat(AT_FDCWD, b"/sub", 0, 0), Ok(()));
        assert_eq!(
            open(tmp.path().join("none").to_str().unwrap(), &opts).err(),
            Some(Errno::ENOENT)
        );
        assert_eq!(open("unix:", &opts).err(), Some(Errno::EINVAL));
        // Through a server in this process: the client's counters count.
        let vfs = open_served(dir, &opts, ServerConfig::default()).unwrap();
        let ctx = vfs.context(Creds::root());
        assert_eq!(ctx.faccessat(AT_FDCWD, b"/sub", 0, 0), Ok(()));
        let rpcs = vfs.rpc_stats().unwrap().total_rpcs;
        assert!(rpcs > 0);
        assert!(vfs.remote_handles().unwrap().cap >= 1);
        vfs.reset_rpc_stats();
        assert!(vfs.rpc_stats().unwrap().total_rpcs < rpcs);
    }
}
