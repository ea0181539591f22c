//! walkfs: Linux's path lookup rebuilt as a library and a file service.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use walkfs_bench::{build, memory, micro, p9meta, report, scale};
use walkfs_source::SourceOptions;
use walkfs_vfs::{Creds, AT_FDCWD};

#[derive(Parser)]
#[command(
    name = "walkfs",
    version,
    about = "Linux pathname lookup (namei + dcache) as a library and a file service",
    long_about = "walkfs resolves paths the way Linux does — the same semantics, errnos and \
permission rules — over an in-memory tree or a host directory, with a dentry cache \
whose fast path takes no lock. Each optimization of the Linux lookup patches it \
carries is a switch (fastpath, fastperm, cache_symlinks, negtimeout).\n\n\
SOURCE is a host directory, or mem: for an empty in-memory tree. OPTIONS are \
name=value pairs separated by commas, e.g. negtimeout=-1,fastpath=1.\n\n\
Set RUST_LOG=debug for logs."
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Benchmarks: print a table, or JSON lines with --json.
    #[command(subcommand)]
    Bench(BenchCmd),
    /// Resolve PATH in SOURCE and print what stat(2) reports, or the errno.
    Stat {
        source: String,
        path: String,
        /// Do not follow a trailing symlink (lstat).
        #[arg(long)]
        nofollow: bool,
        #[arg(short, long, default_value = "")]
        options: String,
    },
    /// List the directory PATH of SOURCE.
    Ls {
        source: String,
        #[arg(default_value = "/")]
        path: String,
        #[arg(short, long, default_value = "")]
        options: String,
    },
    /// Export DIR over 9P2000.L to any number of clients (walkfs itself,
    /// the Linux kernel's 9p client, diod's tools). Every client is
    /// confined to DIR: no path, `..` or symlink resolves above it. The
    /// caller's identity comes from Tattach's n_uname (or uname), with
    /// that user's groups; files are created with the ids a process of
    /// theirs would give them. Runs until killed.
    Serve {
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
    },
    /// Talk 9P2000.L to a server (walkfs serve, diod, ...) and show one
    /// thing: a check that an export answers as it should. Every call goes
    /// to the server (cache=none); --stats prints the RPCs it took.
    #[command(name = "9p")]
    NineP {
        /// The server: unix:PATH, tcp:HOST:PORT or vsock:CID:PORT.
        addr: String,
        #[arg(value_enum)]
        op: NineOp,
        /// A path inside the export.
        #[arg(default_value = "/")]
        path: String,
        /// The export to attach to (diod wants the exported path).
        #[arg(long, default_value = "")]
        aname: String,
        #[arg(long, default_value_t = 65536)]
        msize: u32,
        /// Print the RPC counters to stderr afterwards.
        #[arg(long)]
        stats: bool,
    },
    /// Print the target of the symlink PATH in SOURCE.
    Readlink { source: String, path: String },
    /// Mount SOURCE on MOUNTPOINT through FUSE. SOURCE is a local
    /// directory (the vfs over the directory itself), mem: (an empty
    /// in-memory tree) or a 9P server (unix:PATH, tcp:HOST:PORT, or
    /// vsock:CID:PORT: from a guest, vsock:2:PORT is its host).
    ///
    /// OPTIONS (-o, comma-separated): cache=none|loose|coherent (default
    /// loose): none asks the backend on every lookup and stat; loose keeps
    /// what was learned; coherent keeps it and drops exactly what the
    /// host (inotify) or the 9P server reports changed, so edits made
    /// beside the mount are seen at once. negtimeout=MS (alias
    /// ndentrytmo; -1 = keep negative entries until invalidated),
    /// sync_metadata=1 (wait for every change rather than let creates,
    /// links, unlinks, rmdirs, writes and attribute changes run behind
    /// the caller on a 9P source), msize=N, fids=N, host_fds=N,
    /// host_behind=0|1 (a host directory: run those changes' host calls on
    /// a thread of the backend's, behind the caller; off by default),
    /// watch_queue=limited|unlimited (a host directory watched with
    /// fanotify; always unlimited in cache=coherent with events=1, so that
    /// no change replayed to watchers is lost),
    /// dir_readahead=N, ro, allow_other, default_permissions,
    /// passthrough=0|1, writeback_cache=0|1, threads=N, entry_timeout=S,
    /// attr_timeout=S, and the vfs switches (fastpath, fastperm,
    /// cache_symlinks, pathcache). In cache=loose the kernel keeps
    /// entries, attributes, negative entries and symlink bodies itself;
    /// cache=none gives it zero timeouts.
    ///
    /// Changes that ran behind their callers report failures at fsync
    /// (and at close on a 9P source in cache=coherent or none, which
    /// keep FLUSH: close-to-open); `walkfs sync MOUNTPOINT` waits for
    /// all of them (sync(2) never reaches a FUSE daemon). In loose and
    /// coherent the kernel keeps directory listings itself and sends no
    /// OPENDIR, and the mount answers no extended attributes
    /// (EOPNOTSUPP); `walkfs stats MOUNTPOINT` shows every request the
    /// kernel sent, by opcode, with the time spent answering it.
    ///
    /// Requests come over FUSE over io_uring, one queue per CPU, where
    /// the kernel offers it (Linux 6.14+, `echo Y >
    /// /sys/module/fuse/parameters/enable_uring`), else from /dev/fuse;
    /// `-o transport=dev|uring` forces one. `-o bare=0` keeps attributes
    /// in every directory listing (by default listings of a local
    /// directory carry names only while nobody stats what they list).
    ///
    /// Without --foreground the command returns once the mount is up and
    /// the mount lives on in the background. Unmount with
    /// `fusermount3 -u MOUNTPOINT` or `umount MOUNTPOINT`; SIGINT, SIGTERM
    /// and SIGHUP unmount cleanly too. Installed as mount.walkfs it serves
    /// `mount -t walkfs SOURCE MOUNTPOINT -o OPTIONS` and /etc/fstab.
    Mount {
        source: String,
        mountpoint: String,
        #[arg(short, long, default_value = "")]
        options: String,
        /// Stay in the foreground (logs to stderr) until unmounted.
        #[arg(short, long)]
        foreground: bool,
        /// Mount a local directory through the whole stack: exported by a
        /// walkfs server inside this process over a socketpair and reached
        /// through the 9P client (for tests and comparisons).
        #[arg(long)]
        via_9p: bool,
        /// The default since the local mount is the vfs over the directory
        /// (kept for old scripts).
        #[arg(long, hide = true)]
        direct: bool,
    },
    /// Drain a walkfs mount: send what it gathered and wait until every
    /// change that ran behind its caller (unlinks, writes, attribute
    /// changes on a 9P source) has been carried out. Exits non-zero with
    /// the error if any of them failed since the last `walkfs sync` (each
    /// failure is also logged by the mount with its path). sync(2) does
    /// not reach a FUSE daemon; this does.
    Sync { mountpoint: String },
    /// Print the changes made under DIR by anyone (other processes on the
    /// host, or other clients of its server) as JSON lines, one per
    /// change: {"path", "kind", "dir", "cookie", "time"}. `kind` is
    /// inotify's name for it: create, delete, modify, attrib, moved_from
    /// and moved_to (a rename's halves share a nonzero `cookie` where the
    /// host's inotify pairs them), or changed when the source cannot
    /// tell; `time` is when walkfs learned of it (Unix seconds). When
    /// changes were lost (a queue overflowed) a line with kind
    /// "overflow" says so: rescan. DIR is watched whole, directories made
    /// later included (as `inotifywait -r` does); paths are relative to
    /// DIR. Runs until killed. For scripts and tools that do not use
    /// inotify.
    Watch {
        /// A host directory (or unix:PATH / tcp:HOST:PORT / vsock:CID:PORT of a walkfs
        /// server, which reports changes without their kind).
        dir: String,
        /// Source options (cache=coherent is implied).
        #[arg(short, long, default_value = "")]
        options: String,
    },
    /// git's core.fsmonitor hook (protocol version 2), answered from the
    /// change stream: `git config core.fsmonitor "walkfs fsmonitor"` in a
    /// work tree (on a walkfs mount, or any host directory), and `git
    /// status` stats only what changed since its last run. git runs the
    /// hook as `walkfs fsmonitor 2 TOKEN` in the tree's root; the hook asks
    /// a daemon that follows the tree (started on the first call, whose
    /// answer is "everything changed"; it leaves after an hour unasked,
    /// or at --stop) and prints the paths changed since TOKEN. Whenever
    /// it cannot be sure (a change queue overflowed, a token of another
    /// daemon, a change not yet come through) it answers "everything
    /// changed", so git looks at the whole tree, as without it.
    Fsmonitor {
        /// The protocol version git speaks (2).
        version: Option<String>,
        /// The token of git's last query ("" at first).
        token: Option<String>,
        /// Be the daemon of the current directory's tree (the hook starts
        /// it).
        #[arg(long, conflicts_with = "stop")]
        daemon: bool,
        /// Stop the daemon of the current directory's tree.
        #[arg(long)]
        stop: bool,
    },
    /// Print a walkfs mount's counters: every request the kernel sent,
    /// by opcode, with the time spent answering it; the vfs cache's
    /// misses; calls into the backend and how many were waited for; 9P
    /// RPCs by type, bytes, and the time spent waiting for the server;
    /// the write-back's and read-ahead's counters and the bounded
    /// resources. Asked through an ioctl of the mount's root.
    Stats {
        mountpoint: String,
        /// The counters as one JSON object.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum NineOp {
    /// List a directory.
    Ls,
    /// Attributes (lstat).
    Stat,
    /// A file's contents to stdout.
    Cat,
    /// A symlink's target.
    Readlink,
}

#[derive(Subcommand)]
enum BenchCmd {
    /// The seeds' lookup benchmarks, kernel and walkfs side by side, each
    /// optimization on and off: readlink (seed 000), the gcc trace and
    /// access-only trace (seed 001), access (seed 002), fstat vs statx
    /// (seed 004). Medians of 5 runs; ops/s summed over threads.
    Micro {
        /// One short run of each case (under 30 seconds in all).
        #[arg(long)]
        quick: bool,
        /// One JSON object per line instead of a table.
        #[arg(long)]
        json: bool,
        /// Thread counts (repeatable); default 1 and every core.
        #[arg(long)]
        threads: Vec<usize>,
        /// Only this walkfs source: a host directory, or mem:, or a 9P
        /// server exporting / (unix:PATH, tcp:HOST:PORT), or 9p to start
        /// one here (walkfs serve / --read-only on a private socket). Over
        /// 9P the trace replays run in cache=none, cache=loose and
        /// cache=loose,negtimeout=-1 (rows 9p-none, 9p-loose,
        /// 9p-loose-neg) with the RPCs each replay sent. Default: hostfs
        /// over / and a memfs mirror.
        #[arg(long)]
        source: Option<String>,
        /// Only these benches (repeatable): readlink, access, trace,
        /// trace_access, fstat, statx.
        #[arg(long = "bench")]
        benches: Vec<String>,
        /// Only these walkfs variants (repeatable): all, no-fastpath,
        /// no-fastperm, no-cache-symlinks, no-negative. Kernel rows always
        /// run.
        #[arg(long = "variant")]
        variants: Vec<String>,
        /// Also draw the single-thread rows as a bar chart into this PNG.
        #[arg(long, value_name = "FILE.png")]
        plot: Option<String>,
        /// Also run the kernel's calls (readlink, access, trace,
        /// trace_access) with their paths under a walkfs FUSE mount of /
        /// (cache=loose,negtimeout=-1): rows with fs "walkfs-fuse",
        /// compared with the same calls on the host.
        #[arg(long)]
        fuse: bool,
    },
    /// 9P metadata operations per second (Twalk of 3 names + Tgetattr +
    /// Tclunk, each waiting for its reply) against `walkfs serve` and
    /// Debian's diod exporting the same tree, 1 and 8 client connections,
    /// repetitions interleaved; medians of 5 (3 with --quick). Both
    /// servers are started here on 127.0.0.1.
    #[command(name = "9p")]
    NineP {
        /// Shorter runs (3 repetitions of 0.3 s).
        #[arg(long)]
        quick: bool,
        /// One JSON object per line instead of a table.
        #[arg(long)]
        json: bool,
        /// Connection counts (repeatable); default 1 and 8.
        #[arg(long)]
        conns: Vec<usize>,
        /// Only this server (repeatable): walkfs, diod.
        #[arg(long = "server")]
        servers: Vec<String>,
    },
    /// Load without loss: CLIENTS clients (own 9P connections, threads)
    /// doing random writes, reads, truncates, creates, renames and
    /// unlinks for SECONDS on their own files and in directories all of
    /// them change, through one `walkfs serve`; every read checked as it
    /// happens, every file and shared listing checked against the
    /// clients' models at the end. Prints ops/s, errors, mismatches and
    /// the server's memory; exits non-zero on any error or mismatch.
    Load {
        #[arg(long, default_value_t = 32)]
        clients: usize,
        #[arg(long, default_value_t = 10.0)]
        seconds: f64,
        /// Seed of the clients' random choices (a run is repeatable up to
        /// the interleaving of the clients).
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// The server holds every reply this many microseconds (a slow
        /// link: the run must lose nothing either).
        #[arg(long, default_value_t = 0, value_name = "US")]
        reply_delay_us: u64,
        /// One JSON object instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// The cost of one FUSE request by transport: fuser (what walkfs
    /// mount ran on until 2026-11), walkfs's own session over /dev/fuse,
    /// and FUSE over io_uring with a ring per CPU (kernel 6.14+; needs `echo Y >
    /// /sys/module/fuse/parameters/enable_uring`, skipped otherwise). One
    /// synthetic tree of 1,000 files with zero timeouts (every stat is a
    /// LOOKUP and a GETATTR), a client thread doing stats, then listings.
    /// Medians; transports interleaved. Needs root. See
    /// docs/fuse-transport.md.
    FuseTransport {
        /// One repetition and fewer stats.
        #[arg(long)]
        quick: bool,
        /// One JSON object per line instead of a table.
        #[arg(long)]
        json: bool,
        /// Server threads of the fuser and /dev/fuse rows.
        #[arg(long, default_value_t = 2)]
        threads: usize,
    },
    /// Namespace changes in parallel over a slow server: one vfs over
    /// `walkfs serve --reply-delay-us US`, 1, 2 and 8 threads each
    /// creating files in a directory of its own (total creates/s, and the
    /// speedup over 1 thread); then the latency of a cache miss alone and
    /// while 8 threads create elsewhere (p50, p99, p99 over the delay).
    /// Medians of 3 repetitions; restarts the vfs counted with each row.
    Parallel {
        /// One repetition of 1 s per row.
        #[arg(long)]
        quick: bool,
        /// One JSON object per line instead of a table.
        #[arg(long)]
        json: bool,
        #[arg(long, default_value_t = 200, value_name = "US")]
        reply_delay_us: u64,
        /// Thread counts (repeatable); default 1, 2 and 8.
        #[arg(long)]
        threads: Vec<usize>,
    },
    /// Seed 003's workload: a clean `make -j$(nproc)` of hostapd and
    /// wpa_supplicant (Debian's wpa source, fetched with apt-get source;
    /// a deb-src entry is added if none exists) on native ext4, on
    /// `walkfs mount` of a served directory in cache=none, cache=loose,
    /// cache=loose,negtimeout=-1 and loose with symlink caching off, on
    /// bindfs and on sshfs over 127.0.0.1 (a private sshd); then the
    /// walkfs rows behind a slow link (walkfs serve --reply-delay-us).
    /// Each build from a fresh copy and a
    /// fresh mount; medians of 3, configurations interleaved. Walkfs rows
    /// carry the build's RPCs by type. Needs root.
    Build {
        /// One build each of native, walkfs cache=loose,negtimeout=-1,
        /// walkfs cache=coherent and bindfs (about 12 minutes on 2 cores).
        #[arg(long)]
        quick: bool,
        /// One JSON object per line instead of a table.
        #[arg(long)]
        json: bool,
        /// Also draw the rows as a bar chart into this PNG.
        #[arg(long, value_name = "FILE.png")]
        plot: Option<String>,
        /// Only these configurations (repeatable): native, walkfs-none,
        /// walkfs-loose, walkfs-loose-neg, walkfs-loose-neg-nosymcache,
        /// walkfs-coherent, bindfs, sshfs, walkfs-...-slowNus; comma-separated or repeated.
        /// native is always measured, as every ratio is to it.
        #[arg(long, value_delimiter = ',')]
        only: Vec<String>,
        /// Repetitions (default 3; 1 with --quick).
        #[arg(long)]
        reps: Option<usize>,
        /// Reply delay of the slow-link rows in µs (0: none).
        #[arg(long, default_value_t = 200, value_name = "US")]
        slow_us: u64,
        /// Another walkfs executable (an earlier release) to compare with:
        /// every walkfs row also runs with it, as NAME@baseline,
        /// interleaved in the same run.
        #[arg(long, value_name = "EXE")]
        baseline: Option<std::path::PathBuf>,
    },
    /// The metadata-heavy jobs users of shares complain about, natively
    /// and through each mount side by side: untar of the hostap source,
    /// git init + add + commit, git status cold (fresh mount, caches
    /// dropped) and warm, find, du -s, rm -rf, untar of an npm project
    /// with its node_modules (crates/bench/npm, installed once with npm
    /// ci), and node requiring its packages. Configurations (each on a
    /// new ext4 made for it on a loop device, so that the disk's
    /// deletion history is not measured): native ext4;
    /// walkfs mount (the vfs over the directory) with
    /// cache=loose,negtimeout=-1, the same with sync_metadata=1 (every
    /// change waited for), and with cache=coherent; the loose mount
    /// through the whole 9P stack (--via-9p); bindfs; sshfs over
    /// 127.0.0.1. With --reply-delay-us N the walkfs rows again behind
    /// walkfs serve --reply-delay-us N. Fresh copies and mounts,
    /// interleaved repetitions, medians; per workload the RPCs by type
    /// and the calls into the backend below the vfs, with how many of
    /// them a caller waited for. Needs root.
    Workloads {
        /// One repetition, no sshfs (about 2 minutes).
        #[arg(long)]
        quick: bool,
        /// One JSON object per line instead of a table.
        #[arg(long)]
        json: bool,
        /// Also draw the ratios to native as a bar chart into this PNG.
        #[arg(long, value_name = "FILE.png")]
        plot: Option<String>,
        /// Repetitions (default 3; 1 with --quick).
        #[arg(long)]
        reps: Option<usize>,
        /// Also the walkfs rows behind a link that holds each reply this
        /// long (0: none).
        #[arg(long, default_value_t = 0, value_name = "US")]
        reply_delay_us: u64,
        /// Only these workloads (comma-separated or repeated): untar-hostap,
        /// git-commit, git-status-cold, git-status-warm, find, du-s, rm-rf,
        /// untar-npm, node-require.
        #[arg(long, value_delimiter = ',')]
        only: Vec<String>,
        /// Only these configurations besides native (comma-separated or
        /// repeated): walkfs-loose, walkfs-loose-writeback,
        /// walkfs-loose-sync, walkfs-coherent, walkfs-9p-loose, bindfs,
        /// sshfs, walkfs-loose-<N>us, walkfs-coherent-<N>us, walkfs-loose-wt-<N>us, walkfs-loose-nosettle-<N>us (only when named).
        #[arg(long, value_delimiter = ',')]
        fs: Vec<String>,
    },
    /// Issue 14's scale: trees of real size through a walkfs stack, with
    /// the descriptors and memory its processes hold (/proc polled every
    /// 100 ms). (1) Debian's linux-source-6.1 (apt-get download, cached
    /// in /var/tmp/walkfs-bench-scale) untarred, git init/add/commit, git
    /// status twice, find -type f, du -sb, rm -rf: natively and on a
    /// fresh `walkfs serve` + `walkfs mount`, outputs checked equal.
    /// (2) N empty files made natively, then find and an lstat of each
    /// through a fresh stack; daemon and server bytes per cached file.
    /// (3) One `walkfs serve`, many 9P clients (threads here) each
    /// walking and stating its own subtree. Exits non-zero on any failed
    /// step or mismatch, after printing what it measured. Needs root.
    Scale {
        /// One JSON object per line instead of a table.
        #[arg(long)]
        json: bool,
        /// Smaller trees: 100,000 synthetic files, 4 clients of 5,000.
        #[arg(long)]
        quick: bool,
        /// Files of the synthetic tree (default 1,000,000; --quick 100,000).
        #[arg(long, value_name = "N")]
        synthetic_files: Option<u64>,
        /// Skip the kernel source workload.
        #[arg(long)]
        skip_kernel: bool,
        /// Skip the synthetic tree.
        #[arg(long)]
        skip_synthetic: bool,
        /// 9P clients of one server (default 32; --quick 4; 0 skips).
        #[arg(long, value_name = "N")]
        serve_clients: Option<usize>,
        /// Files of each client's subtree (default 100,000; --quick 5,000).
        #[arg(long, value_name = "N")]
        client_files: Option<u64>,
    },
    /// Memory of the dentry and inode caches, in bytes per cached dentry.
    Memory {
        /// Files to cache (13-byte names, 1000 per directory).
        #[arg(long, default_value_t = 1_000_000)]
        entries: u32,
        /// One JSON object per line instead of a table.
        #[arg(long)]
        json: bool,
    },
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    raise_nofile_limit();
    let cli = Cli::parse_from(mount_helper_args(std::env::args().collect()));
    match run(cli.cmd) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("walkfs: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Raise the soft limit on open descriptors to the hard limit: the
/// descriptor caches of the layers are bounded well below it (see
/// README, "Limits"), but a server's open files and a mount's kernel
/// handles count too, and the usual soft limit (1024) is small for them.
fn raise_nofile_limit() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid resource and a pointer to
    // a live rlimit.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                tracing::debug!("could not raise RLIMIT_NOFILE");
            }
        }
    }
}

/// As `mount.walkfs SOURCE DIR [-sfnv] [-o OPTS]` (what mount(8) runs for
/// `-t walkfs`): the same as `walkfs mount SOURCE DIR -o OPTS`.
fn mount_helper_args(args: Vec<String>) -> Vec<String> {
    let called = args
        .first()
        .map(|a| a.rsplit('/').next().unwrap_or(a).to_string());
    if called.as_deref() != Some("mount.walkfs") {
        return args;
    }
    let mut out = vec!["walkfs".to_string(), "mount".to_string()];
    let mut it = args.into_iter().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "-o" => {
                out.push("-o".into());
                out.push(it.next().unwrap_or_default());
            }
            // sloppy, fake, no-mtab, verbose: nothing to do for FUSE.
            "-s" | "-f" | "-n" | "-v" => {}
            _ => out.push(a),
        }
    }
    out
}

fn open(source: &str, options: &str) -> Result<walkfs_vfs::Ctx, String> {
    let opts =
        SourceOptions::parse(options).map_err(|e| format!("bad options {options:?}: {e}"))?;
    let vfs =
        walkfs_source::open(source, &opts).map_err(|e| format!("cannot open {source}: {e}"))?;
    Ok(vfs.context(Creds::current()))
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

fn run(cmd: Cmd) -> Result<(), String> {
    match cmd {
        Cmd::Serve {
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
            state_dir,
            options,
        } => {
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
            let opts = SourceOptions::parse(&format!(
                "cache=coherent,max_dentries={},{options}",
                walkfs_server::SERVE_DENTRIES
            ))
            .map_err(|e| format!("bad options {options:?}: {e}"))?;
            // Watching is set up now (fanotify needs the privileges the
            // sandbox drops) and started once confined (threads started
            // before would escape the sandbox).
            let vfs = walkfs_source::open_held(&dir, &opts)
                .map_err(|e| format!("cannot open {dir}: {e}"))?;
            let mut cfg = walkfs_server::Config {
                secret,
                read_only,
                trust_client_permissions,
                reply_delay: std::time::Duration::from_micros(reply_delay_us),
                max_pending_bytes,
                reply_timeout: std::time::Duration::from_secs(reply_timeout_secs.max(1)),
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
        Cmd::Bench(BenchCmd::Micro {
            quick,
            json,
            threads,
            source,
            benches,
            variants,
            plot,
            fuse,
        }) => {
            let threads = if threads.is_empty() {
                let n = std::thread::available_parallelism().map_or(1, |n| n.get());
                if n > 1 {
                    vec![1, n]
                } else {
                    vec![1]
                }
            } else {
                threads
            };
            let res = micro::run(&micro::MicroOpts {
                quick,
                threads,
                source,
                benches,
                variants,
                walkfs: std::env::current_exe().ok(),
                fuse,
            })?;
            if json {
                for r in &res.rows {
                    println!("{}", serde_json::to_string(r).map_err(|e| e.to_string())?);
                }
            } else {
                print!("{}", micro::render(&res));
            }
            if let Some(path) = plot {
                walkfs_bench::plot::plot(&res.rows, &path)?;
                eprintln!("walkfs: plot written to {path}");
            }
            Ok(())
        }
        Cmd::Bench(BenchCmd::Load {
            clients,
            seconds,
            seed,
            reply_delay_us,
            json,
        }) => {
            let walkfs = std::env::current_exe().map_err(|e| format!("own executable: {e}"))?;
            let (row, problems) = walkfs_bench::load::run(&walkfs_bench::load::LoadOpts {
                clients: clients.max(1),
                seconds,
                walkfs,
                seed,
                reply_delay_us,
            })?;
            if json {
                println!(
                    "{}",
                    serde_json::to_string(&row).map_err(|e| e.to_string())?
                );
            } else {
                print!("{}", walkfs_bench::load::render(&row));
            }
            for p in problems.iter().take(20) {
                eprintln!("walkfs: {p}");
            }
            if row.errors + row.mismatches > 0 {
                return Err(format!(
                    "{} errors and {} mismatches under load",
                    row.errors, row.mismatches
                ));
            }
            Ok(())
        }
        Cmd::Bench(BenchCmd::FuseTransport {
            quick,
            json,
            threads,
        }) => {
            let rows = walkfs_bench::transport::run(&walkfs_bench::transport::TransportOpts {
                reps: if quick { 1 } else { 5 },
                stats: if quick { 5_000 } else { 50_000 },
                threads,
            })?;
            if json {
                for r in &rows {
                    println!("{}", serde_json::to_string(r).map_err(|e| e.to_string())?);
                }
            } else {
                print!("{}", walkfs_bench::transport::render(&rows));
            }
            Ok(())
        }
        Cmd::Bench(BenchCmd::Parallel {
            quick,
            json,
            reply_delay_us,
            threads,
        }) => {
            let walkfs = std::env::current_exe().map_err(|e| format!("own executable: {e}"))?;
            let mut threads = if threads.is_empty() {
                vec![1, 2, 8]
            } else {
                threads
            };
            threads.retain(|&t| t > 0);
            threads.sort_unstable();
            threads.dedup();
            let rows = walkfs_bench::parallel::run(&walkfs_bench::parallel::ParallelOpts {
                walkfs,
                reply_delay_us,
                threads,
                seconds: if quick { 1.0 } else { 2.0 },
                reps: if quick { 1 } else { 3 },
            })?;
            if json {
                for r in &rows {
                    println!("{}", serde_json::to_string(r).map_err(|e| e.to_string())?);
                }
            } else {
                print!("{}", walkfs_bench::parallel::render(&rows));
            }
            Ok(())
        }
        Cmd::Bench(BenchCmd::NineP {
            quick,
            json,
            conns,
            servers,
        }) => {
            let walkfs = std::env::current_exe().map_err(|e| format!("own executable: {e}"))?;
            let res = p9meta::run(&p9meta::P9Opts {
                quick,
                conns: if conns.is_empty() { vec![1, 8] } else { conns },
                walkfs,
                servers,
            })?;
            if json {
                for r in &res.rows {
                    println!("{}", serde_json::to_string(r).map_err(|e| e.to_string())?);
                }
            } else {
                print!("{}", p9meta::render(&res));
            }
            Ok(())
        }
        Cmd::Bench(BenchCmd::Build {
            quick,
            json,
            plot,
            only,
            reps,
            slow_us,
            baseline,
        }) => {
            let walkfs = std::env::current_exe().map_err(|e| format!("own executable: {e}"))?;
            let res = build::run(&build::BuildOpts {
                quick,
                walkfs,
                only,
                reps,
                slow_us: if quick { 0 } else { slow_us },
                baseline,
            })?;
            if json {
                for r in &res.rows {
                    println!("{}", serde_json::to_string(r).map_err(|e| e.to_string())?);
                }
            } else {
                print!("{}", build::render(&res));
            }
            if let Some(path) = plot {
                build::plot(&res, &path)?;
                eprintln!("walkfs: plot written to {path}");
            }
            Ok(())
        }
        Cmd::Bench(BenchCmd::Workloads {
            quick,
            json,
            plot,
            reps,
            reply_delay_us,
            only,
            fs,
        }) => {
            let walkfs = std::env::current_exe().map_err(|e| format!("own executable: {e}"))?;
            let res = walkfs_bench::workloads::run(&walkfs_bench::workloads::WorkloadOpts {
                quick,
                walkfs,
                reps,
                reply_delay_us,
                only,
                fs,
            })?;
            if json {
                for r in &res.rows {
                    println!("{}", serde_json::to_string(r).map_err(|e| e.to_string())?);
                }
            } else {
                print!("{}", walkfs_bench::workloads::render(&res));
            }
            if let Some(path) = plot {
                walkfs_bench::workloads::plot(&res, &path)?;
                eprintln!("walkfs: plot written to {path}");
            }
            Ok(())
        }
        Cmd::Bench(BenchCmd::Scale {
            json,
            quick,
            synthetic_files,
            skip_kernel,
            skip_synthetic,
            serve_clients,
            client_files,
        }) => {
            let walkfs = std::env::current_exe().map_err(|e| format!("own executable: {e}"))?;
            let res = scale::run(&scale::ScaleOpts {
                quick,
                walkfs,
                synthetic_files,
                skip_kernel,
                skip_synthetic,
                serve_clients,
                client_files,
            });
            if json {
                for r in &res.rows {
                    println!("{}", serde_json::to_string(r).map_err(|e| e.to_string())?);
                }
            } else {
                print!("{}", scale::render(&res));
            }
            if !res.failures.is_empty() {
                return Err(format!(
                    "bench scale: {} failed steps or mismatches (above)",
                    res.failures.len()
                ));
            }
            Ok(())
        }
        Cmd::Bench(BenchCmd::Memory { entries, json }) => {
            report::progress(&format!("memory: caching {entries} files..."));
            let r = memory::run(entries).map_err(|e| e.to_string())?;
            report::progress_done();
            if json {
                println!("{}", serde_json::to_string(&r).map_err(|e| e.to_string())?);
            } else {
                let rows = vec![vec![
                    r.entries.to_string(),
                    r.dentries.to_string(),
                    r.inodes.to_string(),
                    format!("{:.1}", r.cache_bytes as f64 / 1048576.0),
                    format!("{:.1}", r.bytes_per_dentry),
                    format!("{:.1}", r.rss_bytes_per_dentry),
                ]];
                print!(
                    "{}",
                    report::table(
                        &[
                            "files",
                            "dentries",
                            "inodes",
                            "cache MiB",
                            "bytes/dentry",
                            "RSS bytes/dentry"
                        ],
                        &rows
                    )
                );
            }
            Ok(())
        }
        Cmd::Stat {
            source,
            path,
            nofollow,
            options,
        } => {
            let ctx = open(&source, &options)?;
            print_stat(&ctx, &path, nofollow)
        }
        Cmd::Ls {
            source,
            path,
            options,
        } => {
            let ctx = open(&source, &options)?;
            print_ls(&ctx, &path)
        }
        Cmd::Readlink { source, path } => print_readlink(&open(&source, "")?, &path),
        Cmd::Mount {
            source,
            mountpoint,
            options,
            foreground,
            via_9p,
            direct: _,
        } => mount_cmd(&source, &mountpoint, &options, foreground, via_9p),
        Cmd::Stats { mountpoint, json } => stats_cmd(&mountpoint, json),
        Cmd::Sync { mountpoint } => sync_cmd(&mountpoint),
        Cmd::Watch { dir, options } => watch::run(&dir, &options),
        Cmd::Fsmonitor {
            version,
            token,
            daemon,
            stop,
        } => match (daemon, stop, version) {
            (true, _, _) => fsmonitor::daemon(),
            (_, true, _) => fsmonitor::stop(),
            (_, _, Some(v)) => fsmonitor::hook(&v, token.as_deref().unwrap_or("")),
            (_, _, None) => Err("fsmonitor: give the protocol version (2) and the token, \
                 as git does, or --stop"
                .to_string()),
        },
        Cmd::NineP {
            addr,
            op,
            path,
            aname,
            msize,
            stats,
        } => {
            let ctx = open(&addr, &format!("cache=none,msize={msize},aname={aname}"))?;
            let r = match op {
                NineOp::Ls => print_ls(&ctx, &path),
                NineOp::Stat => print_stat(&ctx, &path, true),
                NineOp::Cat => print_cat(&ctx, &path),
                NineOp::Readlink => print_readlink(&ctx, &path),
            };
            if stats {
                if let Some(s) = ctx.vfs().p9_stats() {
                    eprintln!(
                        "rpcs {} ({}) bytes out {} in {} waited {:.3} ms",
                        s.total_rpcs,
                        s.rpcs
                            .iter()
                            .map(|(n, c)| format!("{n} {c}"))
                            .collect::<Vec<_>>()
                            .join(", "),
                        s.bytes_sent,
                        s.bytes_received,
                        s.wait_ns as f64 / 1e6
                    );
                }
            }
            r
        }
    }
}

fn print_stat(ctx: &walkfs_vfs::Ctx, path: &str, nofollow: bool) -> Result<(), String> {
    let flags = if nofollow {
        libc::AT_SYMLINK_NOFOLLOW
    } else {
        0
    };
    let st = ctx
        .statx(AT_FDCWD, path.as_bytes(), flags, libc::STATX_BASIC_STATS)
        .map_err(|e| format!("{path}: {e}"))?;
    // The birth time, where known, names the file's generation.
    let born = if st.stx_mask & libc::STATX_BTIME != 0 {
        format!(" born {}.{:09}", st.stx_btime.tv_sec, st.stx_btime.tv_nsec)
    } else {
        String::new()
    };
    println!(
        "{path}: mode {:o} nlink {} uid {} gid {} size {} ino {}{born}",
        st.stx_mode, st.stx_nlink, st.stx_uid, st.stx_gid, st.stx_size, st.stx_ino
    );
    Ok(())
}

fn print_ls(ctx: &walkfs_vfs::Ctx, path: &str) -> Result<(), String> {
    let fd = ctx
        .openat(
            AT_FDCWD,
            path.as_bytes(),
            libc::O_RDONLY | libc::O_DIRECTORY,
            0,
        )
        .map_err(|e| format!("{path}: {e}"))?;
    let mut names: Vec<_> = ctx.getdents(fd).map_err(|e| format!("{path}: {e}"))?;
    names.sort_by(|a, b| a.name.cmp(&b.name));
    for e in names.iter().filter(|e| e.name != b"." && e.name != b"..") {
        println!("{}", String::from_utf8_lossy(&e.name));
    }
    Ok(())
}

fn print_readlink(ctx: &walkfs_vfs::Ctx, path: &str) -> Result<(), String> {
    let t = ctx
        .readlinkat(AT_FDCWD, path.as_bytes())
        .map_err(|e| format!("{path}: {e}"))?;
    println!("{}", String::from_utf8_lossy(&t));
    Ok(())
}

fn print_cat(ctx: &walkfs_vfs::Ctx, path: &str) -> Result<(), String> {
    use std::io::Write;
    let fd = ctx
        .openat(AT_FDCWD, path.as_bytes(), libc::O_RDONLY, 0)
        .map_err(|e| format!("{path}: {e}"))?;
    let mut buf = vec![0u8; 1 << 16];
    let mut out = std::io::stdout().lock();
    loop {
        let n = ctx.read(fd, &mut buf).map_err(|e| format!("{path}: {e}"))?;
        if n == 0 {
            break;
        }
        out.write_all(&buf[..n]).map_err(|e| e.to_string())?;
    }
    Ok(())
}

fn mount_cmd(
    source: &str,
    mountpoint: &str,
    options: &str,
    foreground: bool,
    via_9p: bool,
) -> Result<(), String> {
    use walkfs_fuse::mount;
    let opts = walkfs_fuse::MountOptions::parse(options)?;
    let mp = std::path::Path::new(mountpoint);
    if !mp.is_dir() {
        return Err(format!("{mountpoint}: not a directory"));
    }
    // Background: fork before any thread exists; the parent returns when
    // the child reports the mount up (or why it failed).
    let ready = if foreground {
        None
    } else {
        Some(daemon::detach()?)
    };
    mount::block_signals();
    // A local source is named by its absolute path in the mount table
    // (what `mount` shows, and how `walkfs fsmonitor` finds the host's
    // copy of a tree on the mount).
    let fsname = std::fs::canonicalize(source)
        .ok()
        .filter(|p| p.is_dir())
        .and_then(|p| p.to_str().map(str::to_string))
        .unwrap_or_else(|| source.to_string());
    let up = (|| {
        let vfs = mount::open_source(source, &opts, via_9p)?;
        mount::mount(vfs, &fsname, mp, opts, mount::wake_waiter)
    })();
    let m = match (up, ready) {
        (Ok(m), Some(r)) => {
            r.ok();
            m
        }
        (Ok(m), None) => m,
        (Err(e), Some(r)) => {
            // The parent says why (it holds the terminal the user reads);
            // saying it here too would print it twice, interleaved.
            r.fail(&e);
            std::process::exit(1);
        }
        (Err(e), None) => return Err(e),
    };
    tracing::info!("{source} mounted on {mountpoint}");
    let sig = mount::wait_for_signal();
    tracing::info!("signal {sig}: unmounting {mountpoint}");
    if m.is_finished() {
        // Unmounted from outside; the session is over.
        return m.unmount().or(Ok(()));
    }
    m.unmount()
}

/// Running in the background: the parent waits on a pipe for the child's
/// word that the mount is up.
mod fsmonitor;
mod watch;

mod daemon {
    use std::io::{Read, Write};
    use std::os::fd::FromRawFd;

    pub struct Ready(std::fs::File);

    impl Ready {
        pub fn ok(mut self) {
            let _ = self.0.write_all(b"ok");
            // Detach stdio now that nothing more will be reported.
            // SAFETY: opening /dev/null and dup2 onto the standard fds.
            unsafe {
                let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
                if null >= 0 {
                    for fd in 0..3 {
                        libc::dup2(null, fd);
                    }
                    libc::close(null);
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
}

/// Ask the daemon of the mount at `mountpoint` with ioctl `cmd` on its
/// root directory, `buf` (of the size the number carries) for its answer
/// (how `walkfs stats` and `walkfs sync` reach the daemon). The ioctl's
/// result: the length of the answer.
fn mount_ioctl(mountpoint: &str, cmd: u32, buf: &mut [u8]) -> std::io::Result<usize> {
    use std::os::fd::AsRawFd;
    let dir = std::fs::File::open(mountpoint)?;
    // SAFETY: a descriptor we own, and a buffer at least as large as the
    // size `cmd` encodes (the kernel copies at most that much into it).
    let n = unsafe { libc::ioctl(dir.as_raw_fd(), cmd as _, buf.as_mut_ptr()) };
    usize::try_from(n).map_err(|_| std::io::Error::last_os_error())
}

fn sync_cmd(mountpoint: &str) -> Result<(), String> {
    match mount_ioctl(mountpoint, walkfs_fuse::SYNC_IOCTL, &mut []) {
        Ok(_) => Ok(()),
        Err(e)
            if matches!(
                e.raw_os_error(),
                Some(libc::ENOTTY | libc::ENOTSUP | libc::EINVAL)
            ) =>
        {
            Err(format!("{mountpoint}: not a walkfs mount ({e})"))
        }
        Err(e) => Err(format!(
            "{mountpoint}: a change made behind its caller failed: {e}"
        )),
    }
}

fn stats_cmd(mountpoint: &str, json: bool) -> Result<(), String> {
    let mut buf = vec![0u8; walkfs_fuse::STATS_MAX];
    let n = mount_ioctl(mountpoint, walkfs_fuse::STATS_IOCTL, &mut buf)
        .map_err(|e| format!("{mountpoint}: not a walkfs mount ({e})"))?;
    buf.truncate(n);
    if json {
        println!("{}", String::from_utf8_lossy(&buf));
        return Ok(());
    }
    let s: walkfs_fuse::MountStats =
        serde_json::from_slice(&buf).map_err(|e| format!("{mountpoint}: bad stats: {e}"))?;
    println!("options: {}", s.options);
    let us: std::collections::HashMap<&str, u64> =
        s.fuse_us.iter().map(|(n, u)| (n.as_str(), *u)).collect();
    let mut rows: Vec<Vec<String>> = s
        .fuse
        .iter()
        .map(|(n, c)| {
            let v = match us.get(n.as_str()) {
                Some(u) => format!("{c} ({:.1} ms)", *u as f64 / 1000.0),
                None => c.to_string(),
            };
            vec!["kernel".into(), n.clone(), v]
        })
        .collect();
    rows.push(vec![
        "kernel".into(),
        "total".into(),
        s.fuse_total.to_string(),
    ]);
    for (n, c) in [
        ("via_dev_fuse", s.fuse_via_dev),
        ("via_io_uring", s.fuse_via_uring),
        ("io_uring_queues", s.fuse_uring_queues),
    ] {
        rows.push(vec!["transport".into(), n.into(), c.to_string()]);
    }
    rows.push(vec![
        "transport".into(),
        "protocol".into(),
        format!("7.{} flags {:#x}", s.fuse_minor, s.fuse_flags),
    ]);
    for (n, c) in [
        ("slow_lookups", s.vfs_slow_lookups),
        ("backend_lookups", s.vfs_backend_lookups),
        ("complete_misses", s.vfs_complete_misses),
        ("negative_created", s.vfs_negative_created),
        ("restarts", s.vfs_restarts),
        ("dentries", u64::from(s.vfs_dentries)),
        ("changes_reported", s.vfs_changes),
        ("changes_lost", s.vfs_changes_lost),
        ("changes_own", s.vfs_changes_own),
        ("coherent", u64::from(s.coherent)),
    ] {
        rows.push(vec!["vfs".into(), n.into(), c.to_string()]);
    }
    for (n, c) in &s.resources {
        rows.push(vec!["limits".into(), n.clone(), c.to_string()]);
    }
    for (n, c) in &s.backend_calls {
        rows.push(vec!["backend".into(), n.clone(), c.to_string()]);
    }
    rows.push(vec![
        "backend".into(),
        "total".into(),
        s.backend_total.to_string(),
    ]);
    rows.push(vec![
        "backend".into(),
        "waited".into(),
        s.backend_waited.to_string(),
    ]);
    for (n, c) in &s.rpcs {
        rows.push(vec!["9p".into(), n.clone(), c.to_string()]);
    }
    rows.push(vec!["9p".into(), "total".into(), s.total_rpcs.to_string()]);
    rows.push(vec![
        "9p".into(),
        "bytes_sent".into(),
        s.bytes_sent.to_string(),
    ]);
    rows.push(vec![
        "9p".into(),
        "bytes_received".into(),
        s.bytes_received.to_string(),
    ]);
    rows.push(vec![
        "9p".into(),
        "wait_ms".into(),
        format!("{:.1}", s.wait_ms),
    ]);
    for (n, c) in [
        ("writeback_submitted", s.writeback_submitted),
        ("writeback_inflight", s.writeback_inflight),
        ("writeback_failed", s.writeback_failed),
        ("writeback_waits", s.writeback_waits),
        ("writeback_gathered", s.writeback_gathered),
        ("readahead_asked", s.readahead_asked),
        ("readahead_used", s.readahead_used),
        ("readahead_wasted", s.readahead_wasted),
        ("fileahead_asked", s.fileahead_asked),
        ("fileahead_used", s.fileahead_used),
        ("fileahead_wasted", s.fileahead_wasted),
    ] {
        rows.push(vec!["vfs".into(), n.into(), c.to_string()]);
    }
    rows.push(vec![
        "vfs".into(),
        "readahead_wait_ms".into(),
        format!("{:.1}", s.readahead_wait_ms),
    ]);
    print!("{}", report::table(&["layer", "counter", "value"], &rows));
    Ok(())
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
