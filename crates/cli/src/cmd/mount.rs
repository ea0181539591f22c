//! `walkfs mount` (and `mount.walkfs`, what mount(8) runs): a source
//! mounted through FUSE, in the foreground or as a daemon.

use crate::daemon;

/// Mount SOURCE on MOUNTPOINT through FUSE. SOURCE is a local
/// directory (the vfs over the directory itself), mem: (an empty
/// in-memory tree) or a 9P server (unix:PATH, tcp:HOST:PORT, or
/// vsock:CID:PORT: from a guest, vsock:2:PORT is its host).
///
/// OPTIONS (-o, comma-separated): cache=none|loose|coherent (default
/// coherent for a local directory and a 9P server, loose for mem:):
/// none asks the backend on every lookup and stat; loose keeps what
/// was learned and never sees changes made beside the mount (for a
/// tree only this mount changes); coherent keeps it and drops exactly
/// what the host (fanotify) or the 9P server reports changed, so edits
/// made beside the mount are seen at once (a 9P server that reports
/// nothing, such as diod, is revalidated after a second). negtimeout=MS (alias
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
/// File locks (fcntl record locks, OFD locks, flock) on a local
/// directory or a 9P server are taken on the host file (by the server
/// for its clients), so the host's programs, this mount's and every
/// other client's exclude each other (docs/locks.md).
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
#[derive(clap::Args)]
pub struct Mount {
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
}

impl Mount {
    pub fn run(self) -> Result<(), String> {
        let Mount {
            source,
            mountpoint,
            options,
            foreground,
            via_9p,
            direct: _,
        } = self;
        mount_cmd(&source, &mountpoint, &options, foreground, via_9p)
    }
}

/// As `mount.walkfs SOURCE DIR [-sfnv] [-o OPTS]` (what mount(8) runs for
/// `-t walkfs`): the same as `walkfs mount SOURCE DIR -o OPTS`.
pub fn mount_helper_args(args: Vec<String>) -> Vec<String> {
    let called = args
        .first()
        .map(|a| a.rsplit('/').next().unwrap_or(a).to_string());
    // mount(8) runs mount.walkfs for `-t walkfs`, mount.fuse.walkfs for
    // `-t fuse.walkfs` (what xfstests mounts a FUSE file system with).
    if !matches!(
        called.as_deref(),
        Some("mount.walkfs" | "mount.fuse.walkfs")
    ) {
        return args;
    }
    let mut out = vec!["walkfs".to_string(), "mount".to_string()];
    // mount(8) passes `nodev` and `nosuid` when they are asked for, and
    // drops `dev` and `suid`, which it takes as every mount's default:
    // so they are the default here (later options win; a user's mount
    // through fusermount3 stays nodev,nosuid whatever is asked).
    let mut opts = "dev,suid".to_string();
    let mut it = args.into_iter().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "-o" => {
                opts.push(',');
                opts.push_str(&it.next().unwrap_or_default());
            }
            // sloppy, fake, no-mtab, verbose: nothing to do for FUSE.
            "-s" | "-f" | "-n" | "-v" => {}
            _ => out.push(a),
        }
    }
    out.push("-o".into());
    out.push(opts);
    out
}

/// `source=X` among `options`: (the name SOURCE gives the mount, X, the
/// options without it); without it, (None, SOURCE, the options).
fn split_source_option(source: &str, options: &str) -> (Option<String>, String, String) {
    let mut real = None;
    let rest: Vec<&str> = options
        .split(',')
        .filter(|o| match o.strip_prefix("source=") {
            Some(v) => {
                real = Some(v.to_string());
                false
            }
            None => true,
        })
        .collect();
    match real {
        Some(r) => (Some(source.to_string()), r, rest.join(",")),
        None => (None, source.to_string(), options.to_string()),
    }
}

fn mount_cmd(
    source: &str,
    mountpoint: &str,
    options: &str,
    foreground: bool,
    via_9p: bool,
) -> Result<(), String> {
    use walkfs_fuse::mount;
    // `source=DIR` (as libfuse's file systems take it): DIR is what is
    // mounted, and SOURCE only names the mount in the mount table (what
    // xfstests gives as TEST_DEV and unmounts by).
    let (named, source, options) = split_source_option(source, options);
    let (source, options) = (source.as_str(), options.as_str());
    let opts = walkfs_fuse::MountOptions::parse(options)
        .map_err(|e| format!("bad options {options:?}: {e}"))?;
    let mp = std::path::Path::new(mountpoint);
    if !mp.is_dir() {
        return Err(format!("{mountpoint}: not a directory"));
    }
    // A remount changes the mount there; SOURCE is only its name.
    if opts.remount {
        return mount::remount(mp, &opts);
    }
    let kind = walkfs_source::Source::parse(source).map_err(|e| format!("{source}: {e}"))?;
    let opts = opts.for_source(&kind);
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
    let fsname = named.unwrap_or_else(|| {
        std::fs::canonicalize(source)
            .ok()
            .filter(|p| p.is_dir())
            .and_then(|p| p.to_str().map(str::to_string))
            .unwrap_or_else(|| source.to_string())
    });
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

#[cfg(test)]
mod tests {
    use super::mount_helper_args;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn mount_8s_helper_call_becomes_walkfs_mount_with_its_defaults() {
        // mount(8) dropped `dev,suid` as defaults: they come back first, and
        // what it passes (nodev, say) wins over them.
        assert_eq!(
            mount_helper_args(args(&[
                "/sbin/mount.fuse.walkfs",
                "t",
                "/m",
                "-o",
                "rw,nodev",
                "-n"
            ])),
            args(&["walkfs", "mount", "t", "/m", "-o", "dev,suid,rw,nodev"])
        );
        assert_eq!(
            mount_helper_args(args(&["mount.walkfs", "/src", "/m"])),
            args(&["walkfs", "mount", "/src", "/m", "-o", "dev,suid"])
        );
        // Any other name is the CLI itself.
        let cli = args(&["walkfs", "mount", "/src", "/m"]);
        assert_eq!(mount_helper_args(cli.clone()), cli);
    }
}
