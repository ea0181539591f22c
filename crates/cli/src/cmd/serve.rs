//! `walkfs serve`: export a directory over 9P2000.L.

use walkfs_source::SourceOptions;

/// Export DIR over 9P2000.L to any number of clients (walkfs itself,
/// the Linux kernel's 9p client, diod's tools). Every client is
/// confined to DIR: no path, `..` or symlink resolves above it. The
/// caller's identity comes from Tattach's n_uname (or uname), with
/// that user's groups; files are created with the ids a process of
/// theirs would give them. Runs until killed.
#[derive(clap::Args)]
pub struct Serve {
    /// The directory to export (or mem: for an in-memory tree).
    dir: String,
    /// Where to listen: unix:PATH (created mode 0600: only this
    /// user may connect), tcp:HOST:PORT, or vsock:PORT (every guest
    /// of this host, or the host from inside a guest; vsock:CID:PORT
    /// binds one CID). A TCP address other than loopback, and any
    /// vsock address but the vsock loopback (CID 1), is refused
    /// unless --secret-file is given. For VM managers with hybrid
    /// vsock (Firecracker, cloud-hypervisor, QEMU with
    /// vhost-device-vsock) listen on unix:PATH_PORT, the socket the
    /// manager forwards a guest's vsock port PORT to.
    #[arg(long, value_name = "ADDR")]
    listen: String,
    /// Clients must show the secret in FILE (8 to 4096 bytes, not
    /// readable by others) before attaching: walkfs with
    /// -o secret_file=FILE, the Linux kernel with -o aname=secret=....
    /// It authenticates, it does not encrypt.
    #[arg(long, value_name = "FILE")]
    secret_file: Option<std::path::PathBuf>,
    /// Let this group connect to the unix socket too (mode 0660).
    #[arg(long, value_name = "GROUP")]
    socket_group: Option<String>,
    /// Confine the server process once it listens: a mount namespace
    /// whose root is DIR, no supplementary groups, only the file-owner
    /// capabilities. auto: what the kernel and privileges allow; on:
    /// fail otherwise; off: none.
    #[arg(long, default_value = "auto", value_name = "auto|on|off")]
    sandbox: walkfs_server::sandbox::Mode,
    /// Refuse every change with EROFS.
    #[arg(long)]
    read_only: bool,
    /// Trust clients to check permissions themselves: act for every
    /// attached user with root's file capabilities (new files still
    /// belong to the user and the group the client sends). For Linux
    /// 9p mounts (access=client, the 9p2000.L default), which check
    /// with the caller's supplementary groups that 9P2000.L never
    /// carries; without it the server also checks, with its own user
    /// database. Only for clients trusted with every file of DIR.
    #[arg(long)]
    trust_client_permissions: bool,
    /// Worker threads (default: twice the cores, at least 4).
    #[arg(long)]
    threads: Option<usize>,
    /// Largest msize granted.
    #[arg(long)]
    max_msize: Option<u32>,
    /// Fids one connection may hold.
    #[arg(long)]
    max_fids: Option<usize>,
    /// Hold every reply this many microseconds (to stand in for a slow
    /// link in tests and benchmarks).
    #[arg(long, default_value_t = 0, value_name = "US")]
    reply_delay_us: u64,
    /// Request bytes one connection may have waiting for a worker; its
    /// further requests are not read until some are answered.
    #[arg(long, default_value_t = 16 << 20, value_name = "BYTES")]
    max_pending_bytes: usize,
    /// Close a connection whose client takes none of its replies for
    /// this many seconds (it stopped reading).
    #[arg(long, default_value_t = 30, value_name = "SECS")]
    reply_timeout_secs: u64,
    /// After a restart of a server that granted file locks (its state
    /// directory says so), grant only reclaims for this many seconds:
    /// clients that held locks get them back before anyone else can take
    /// them. 0: no grace time.
    #[arg(long, default_value_t = 5, value_name = "SECS")]
    lock_grace_secs: u64,
    /// Keep the server's state here: the inode numbers of files made
    /// through grants (so they keep them across restarts and
    /// crashes), and the key of the tickets reconnecting clients
    /// show. Default: /var/lib/walkfs/serve/NAME for root, else
    /// $XDG_STATE_HOME/walkfs/serve/NAME, NAME after DIR's path.
    /// "none": nothing kept (numbers last as long as the process).
    #[arg(long, value_name = "DIR|none")]
    state_dir: Option<String>,
    /// vfs options for the export, after the default cache=coherent
    /// (the export is watched: changes made on the host are dropped
    /// from the server's cache and told to cache=coherent clients).
    #[arg(short, long, default_value = "")]
    options: String,
}

impl Serve {
    pub fn run(self) -> Result<(), String> {
        let Serve {
            dir,
            listen,
            secret_file,
            socket_group,
            sandbox,
            read_only,
            trust_client_permissions,
            threads,
            max_msize,
            max_fids,
            reply_delay_us,
            max_pending_bytes,
            reply_timeout_secs,
            lock_grace_secs,
            state_dir,
            options,
        } = self;
        let addr = walkfs_p9::Addr::parse(&listen).ok_or_else(|| {
            format!("bad address {listen:?}: want unix:PATH, tcp:HOST:PORT or vsock:[CID:]PORT")
        })?;
        let secret = match &secret_file {
            Some(f) => Some(
                walkfs_server::auth::Secret::from_file(f)
                    .map_err(|e| format!("secret file {}: {e}", f.display()))?,
            ),
            None => None,
        };
        let exposed = addr
            .is_exposed()
            .map_err(|e| format!("bad address {listen:?}: {e}"))?;
        if exposed && secret.is_none() {
            return Err(format!(
                "refusing to listen on {addr} without authentication: anyone who can \
                 reach it could read and change {dir}.\n\
                 Give --secret-file FILE (clients: walkfs mount -o secret_file=FILE; \
                 Linux: mount -t 9p -o aname=secret=...), or listen on 127.0.0.1 or a \
                 unix socket (for a VM manager with hybrid vsock: unix:PATH_PORT)."
            ));
        }
        let mut opts = SourceOptions::served(true);
        opts.apply(&options)
            .map_err(|e| format!("bad options {options:?}: {e}"))?;
        // Watching is set up now (fanotify needs the privileges the
        // sandbox drops) and started once confined (threads started
        // before would escape the sandbox).
        let vfs =
            walkfs_source::open_held(&dir, &opts).map_err(|e| format!("cannot open {dir}: {e}"))?;
        let mut cfg = walkfs_server::Config {
            secret,
            read_only,
            trust_client_permissions,
            reply_delay: std::time::Duration::from_micros(reply_delay_us),
            max_pending_bytes,
            reply_timeout: std::time::Duration::from_secs(reply_timeout_secs.max(1)),
            lock_grace: std::time::Duration::from_secs(lock_grace_secs),
            ..Default::default()
        };
        if let Some(t) = threads {
            cfg.threads = t;
        }
        if let Some(m) = max_msize {
            cfg.max_msize = m.max(walkfs_p9::MIN_MSIZE);
        }
        if let Some(f) = max_fids {
            cfg.max_fids = f;
        }
        let listener = addr
            .listen()
            .map_err(|e| format!("listen on {addr}: {e}"))?;
        if let Some(g) = &socket_group {
            let gid = group_id(g).ok_or_else(|| format!("no group {g:?}"))?;
            listener
                .share(gid)
                .map_err(|e| format!("socket group {g}: {e}"))?;
        }
        let export = std::path::Path::new(&dir);
        // Leases need fanotify permission events, a group of which
        // only CAP_SYS_ADMIN may make: before the sandbox drops it.
        if let Err(e) = walkfs_server::lease::prepare_host_guard() {
            tracing::info!("leases: no fanotify permission events ({e}); none granted");
        }
        // Read before the sandbox: the state directory lies outside
        // the export, and checking the bindings opens files by handle.
        let inos = open_ino_state(export, state_dir.as_deref())?;
        // libcephfs's messenger threads make calls the seccomp allow-list
        // refuses (it aborts on the first): a CephFS export runs
        // unconfined unless confinement is demanded (then it fails).
        let sandbox = match (walkfs_source::Source::parse(&dir), sandbox) {
            (Ok(walkfs_source::Source::Ceph(_)), walkfs_server::sandbox::Mode::Auto) => {
                tracing::warn!(
                    "sandbox: off for a CephFS export (libcephfs needs calls it refuses)"
                );
                walkfs_server::sandbox::Mode::Off
            }
            (_, m) => m,
        };
        let done = walkfs_server::sandbox::enter(export.is_dir().then_some(export), sandbox)?;
        if !done.is_empty() {
            tracing::info!("sandbox: {}", done.join(", "));
        }
        vfs.start_watching();
        let server = walkfs_server::Server::with_inos(vfs, cfg, inos);
        tracing::info!("serving {dir} on {addr}");
        eprintln!("walkfs: serving {dir} on {addr}");
        server.serve(listener).map_err(|e| e.to_string())
    }
}

/// The inode numbers of `walkfs serve --state-dir`.
fn open_ino_state(
    export: &std::path::Path,
    state_dir: Option<&str>,
) -> Result<walkfs_server::inos::Inos, String> {
    use walkfs_server::inos::Inos;
    use walkfs_server::inostate::{default_dir, InoState};
    if state_dir == Some("none") || !export.is_dir() {
        return Ok(Inos::default());
    }
    let dir = state_dir.map_or_else(|| default_dir(export), std::path::PathBuf::from);
    match InoState::open(&dir, export) {
        Ok(state) => Ok(Inos::with_state(state)),
        // The default place unusable (a read-only /var/lib, no home), or
        // taken by another server: serve all the same, and say what is lost.
        Err(e) if state_dir.is_none() || e.kind() == std::io::ErrorKind::WouldBlock => {
            tracing::warn!(
                "state dir {}: {e}: numbers of files made now last while this server runs \
                 (give --state-dir)",
                dir.display()
            );
            Ok(Inos::default())
        }
        Err(e) => Err(format!("state dir {}: {e}", dir.display())),
    }
}

/// The id of group `name` (or a number).
fn group_id(name: &str) -> Option<u32> {
    if let Ok(n) = name.parse() {
        return Some(n);
    }
    let c = std::ffi::CString::new(name).ok()?;
    // SAFETY: getgrnam takes a valid C string; the result is read at once,
    // before any other call could reuse its static storage (the CLI calls
    // it once, before starting threads).
    let g = unsafe { libc::getgrnam(c.as_ptr()) };
    // SAFETY: non-null means a valid group entry.
    (!g.is_null()).then(|| unsafe { (*g).gr_gid })
}
