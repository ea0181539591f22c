//! `walkfs mount -o OPTIONS`: the FUSE mount's own options, the rest for
//! the vfs (and its backend: see `walkfs-source`).

use std::time::Duration;

use walkfs_fusewire::Transport;
use walkfs_source::SourceOptions;
use walkfs_vfs::opt::{self, Opt, OptError};
use walkfs_vfs::{CachePolicy, NegPolicy};

/// What the kernel is told to cache for how long: the timeouts follow
/// the cache policy (Linux's 9p client in `cache=loose` never
/// revalidates; long timeouts are the FUSE equivalent). `None`: nothing
/// cached unchecked, in the kernel or in walkfs; `Loose`: keep what was
/// learned; `Coherent`: keep what was learned, and drop what the backend
/// reports changed (the kernel's caches too).
#[derive(Clone, Debug)]
pub struct MountOptions {
    /// The vfs's `cache=` (a copy of `source.vfs.cache`).
    pub cache: CachePolicy,
    pub entry_ttl: Duration,
    pub attr_ttl: Duration,
    /// How long the kernel keeps a negative entry; zero: none.
    pub neg_ttl: Duration,
    pub allow_other: bool,
    pub default_permissions: bool,
    pub read_only: bool,
    /// Worker threads of the FUSE session.
    pub threads: usize,
    /// Open files kept for the I/O the kernel sends without an open
    /// (FUSE's no-open mode): one per file recently read or written.
    /// Each keeps its host file, deleted or not, until it is let go.
    pub io_fds: usize,
    /// How requests travel: FUSE over io_uring where the kernel offers
    /// it (`auto`), `/dev/fuse` only (`dev`), or io_uring (`uring`).
    pub transport: Transport,
    /// READDIRPLUS may list names without attributes while what follows
    /// listings shows they are not used (`bare=1`, the default; see the
    /// crate's bare.rs).
    pub bare_listings: bool,
    /// Opens of a local directory's files pass their I/O straight to the
    /// host file where the kernel and the daemon's privileges allow
    /// (`passthrough=1`, the default; `0`: the write-back cache instead;
    /// passthrough.rs).
    pub passthrough: bool,
    /// Where passthrough is not used, `cache=loose` lets the kernel keep
    /// written pages and send them in large chunks (`writeback_cache=1`,
    /// the default; `0`: each write(2) goes to the daemon as it comes,
    /// and the vfs gathers small ones).
    pub writeback_cache: bool,
    /// In `cache=coherent`, other writers' changes are replayed through
    /// the mount so that inotify and fanotify watchers of it see them
    /// (`events=1`, the default; docs/watchers.md).
    pub events: bool,
    /// POSIX ACLs are the kernel's to check and cache, stored by the
    /// source as attributes (`acl`, the default under
    /// default_permissions where the source keeps extended attributes;
    /// `noacl`: `system.posix_acl_*` are refused, mode bits alone decide).
    pub acl: bool,
    /// File handles of the mount's files open again after the kernel
    /// forgot them (`export`, the default where the source can find a
    /// file by id; `noexport`: `open_by_handle_at` of a forgotten file is
    /// `ESTALE`).
    pub export: bool,
    /// `remount`: change the flags of the mount already there (ro/rw and
    /// the generic flags), start no daemon.
    pub remount: bool,
    /// The options of the vfs (switches, `cache`, `negtimeout`, ...) and
    /// of its backend (`msize`, `host_fds`, ...).
    pub source: SourceOptions,
    /// The text given, for `walkfs stats`.
    pub text: String,
    /// The generic mount flags for the kernel (`MS_NOATIME`, ...,
    /// `MS_NOSUID`, `MS_NODEV`): see `MOUNT_FLAGS`.
    pub kernel_flags: u64,
    /// `cache=` was given; else the source decides
    /// ([`MountOptions::for_source`]).
    pub cache_given: bool,
}

/// "Forever" for a kernel timeout: a year (the kernel keeps entries
/// until memory pressure or an invalidation long before that).
const FOREVER: Duration = Duration::from_secs(365 * 24 * 3600);

/// Default number of open files kept for FUSE's no-open I/O.
pub const IO_FDS: usize = 256;

/// Default bound on the mount daemon's vfs cache.
pub const MOUNT_DENTRIES: u32 = 262_144;

/// What the mount's own options say, before the cache mode decides the
/// rest ([`MountOptions::parse`]).
#[derive(Clone)]
struct Given {
    allow_other: bool,
    default_permissions: bool,
    read_only: bool,
    threads: usize,
    io_fds: usize,
    transport: Transport,
    bare_listings: bool,
    passthrough: bool,
    writeback_cache: bool,
    events: bool,
    acl: bool,
    export: bool,
    remount: bool,
    entry: Option<Duration>,
    attr: Option<Duration>,
}

impl Default for Given {
    fn default() -> Given {
        Given {
            allow_other: false,
            // The kernel checks permissions itself from the attributes it
            // holds, as on a local file system: exact semantics at every
            // step of a path (FUSE without it skips search permission),
            // and access(2) answered without a round trip to us.
            default_permissions: true,
            read_only: false,
            threads: 2 * std::thread::available_parallelism().map_or(2, |n| n.get()),
            io_fds: IO_FDS,
            transport: Transport::Auto,
            bare_listings: true,
            passthrough: true,
            writeback_cache: true,
            events: true,
            acl: true,
            export: true,
            remount: false,
            entry: None,
            attr: None,
        }
    }
}

/// The FUSE mount's own options; every other name goes to the source
/// (the vfs's and the backends' tables).
const MOUNT_OPTIONS: &[Opt<Given>] = &[
    Opt {
        names: &["allow_other"],
        live: false,
        set: |g, n, v| {
            g.allow_other = opt::flag(n, v)?;
            Ok(())
        },
    },
    Opt {
        names: &["default_permissions"],
        live: false,
        set: |g, n, v| {
            g.default_permissions = opt::flag(n, v)?;
            Ok(())
        },
    },
    Opt {
        names: &["acl"],
        live: false,
        set: |g, n, v| {
            g.acl = opt::flag(n, v)?;
            Ok(())
        },
    },
    Opt {
        names: &["remount"],
        live: false,
        set: |g, n, v| {
            g.remount = opt::flag(n, v)?;
            Ok(())
        },
    },
    Opt {
        names: &["export"],
        live: false,
        set: |g, n, v| {
            g.export = opt::flag(n, v)?;
            Ok(())
        },
    },
    Opt {
        names: &["noexport"],
        live: false,
        set: |g, n, v| {
            g.export = !opt::flag(n, v)?;
            Ok(())
        },
    },
    Opt {
        names: &["noacl"],
        live: false,
        set: |g, n, v| {
            g.acl = !opt::flag(n, v)?;
            Ok(())
        },
    },
    Opt {
        names: &["no_default_permissions"],
        live: false,
        set: |g, n, v| {
            g.default_permissions = !opt::flag(n, v)?;
            Ok(())
        },
    },
    Opt {
        names: &["ro"],
        live: false,
        set: |g, n, v| {
            g.read_only = opt::flag(n, v)?;
            Ok(())
        },
    },
    Opt {
        names: &["rw"],
        live: false,
        set: |g, n, v| {
            g.read_only = !opt::flag(n, v)?;
            Ok(())
        },
    },
    Opt {
        names: &["threads"],
        live: false,
        set: |g, n, v| {
            g.threads = opt::count(n, v, 1, 4096)?;
            Ok(())
        },
    },
    Opt {
        names: &["io_fds"],
        live: false,
        set: |g, n, v| {
            g.io_fds = opt::count(n, v, 1, 1 << 20)?;
            Ok(())
        },
    },
    Opt {
        names: &["transport"],
        live: false,
        set: |g, n, v| {
            g.transport = v
                .parse()
                .map_err(|_| OptError::bad(n, v, "expected auto, dev or uring"))?;
            Ok(())
        },
    },
    Opt {
        names: &["bare"],
        live: false,
        set: |g, n, v| {
            g.bare_listings = opt::flag(n, v)?;
            Ok(())
        },
    },
    Opt {
        names: &["passthrough"],
        live: false,
        set: |g, n, v| {
            g.passthrough = opt::flag(n, v)?;
            Ok(())
        },
    },
    Opt {
        names: &["writeback_cache"],
        live: false,
        set: |g, n, v| {
            g.writeback_cache = opt::flag(n, v)?;
            Ok(())
        },
    },
    Opt {
        names: &["events"],
        live: false,
        set: |g, n, v| {
            g.events = opt::flag(n, v)?;
            Ok(())
        },
    },
    Opt {
        names: &["entry_timeout"],
        live: false,
        set: |g, n, v| {
            g.entry = Some(opt::seconds(n, v)?);
            Ok(())
        },
    },
    Opt {
        names: &["attr_timeout"],
        live: false,
        set: |g, n, v| {
            g.attr = Some(opt::seconds(n, v)?);
            Ok(())
        },
    },
];

/// mount(8)'s own options: handed to every helper, meaningless here.
const MOUNT_NOISE: &[&str] = &[
    "auto",
    "noauto",
    "user",
    "nouser",
    "users",
    "owner",
    "group",
    "_netdev",
    "nofail",
    "defaults",
    "iversion",
    "noiversion",
    "mand",
    "nomand",
    "loud",
    "silent",
    "async",
];

/// The generic mount options the kernel applies to a FUSE mount as to
/// any other: each sets (`true`) or clears the flag. Later ones win, as
/// in mount(8). `dev` and `suid` take effect for root only (a user's
/// mount through fusermount3 is always `nodev,nosuid`).
const MOUNT_FLAGS: &[(&str, u64, bool)] = &[
    ("noatime", libc::MS_NOATIME, true),
    ("atime", libc::MS_NOATIME | libc::MS_STRICTATIME, false),
    ("nodiratime", libc::MS_NODIRATIME, true),
    ("diratime", libc::MS_NODIRATIME, false),
    ("relatime", libc::MS_RELATIME, true),
    ("norelatime", libc::MS_RELATIME, false),
    ("strictatime", libc::MS_STRICTATIME, true),
    ("nostrictatime", libc::MS_STRICTATIME, false),
    ("lazytime", libc::MS_LAZYTIME, true),
    ("nolazytime", libc::MS_LAZYTIME, false),
    ("sync", libc::MS_SYNCHRONOUS, true),
    ("dirsync", libc::MS_DIRSYNC, true),
    ("noexec", libc::MS_NOEXEC, true),
    ("exec", libc::MS_NOEXEC, false),
    ("nosuid", libc::MS_NOSUID, true),
    ("suid", libc::MS_NOSUID, false),
    ("nodev", libc::MS_NODEV, true),
    ("dev", libc::MS_NODEV, false),
];

impl MountOptions {
    /// Parse `name[=value],...`. FUSE options: `allow_other`,
    /// `default_permissions` (on unless `no_default_permissions`),
    /// `ro`/`rw`, `threads=N`, `io_fds=N`, `transport=auto|dev|uring`, `bare=0|1`,
    /// `passthrough=0|1`, `writeback_cache=0|1`, `events=0|1`, `acl`/`noacl`,
    /// `export`/`noexport`,
    /// `entry_timeout=S`, `attr_timeout=S` (seconds; defaults follow the
    /// cache mode). Everything else is a vfs option (`cache`,
    /// `negtimeout`/`ndentrytmo`, `msize`, `fastpath`, ...). The generic
    /// mount options (`noatime`, `nodiratime`, `relatime`, `lazytime`,
    /// `sync`, `dirsync`, `noexec`, and for root `dev`, `suid`) are the
    /// kernel's, applied to the mount; mount-command noise (`auto`,
    /// `_netdev`, `nofail`, ...) and other programs' `x-*` options are
    /// ignored.
    pub fn parse(text: &str) -> Result<MountOptions, OptError> {
        let mut given = Given::default();
        let mut source = SourceOptions::default();
        // Set-id bits and devices are not honoured unless asked for.
        let mut kernel_flags = libc::MS_NOSUID | libc::MS_NODEV;
        // The kernel's dentry and inode caches hold the mounted tree; the
        // vfs under it caches the working set (anything it evicts is
        // found again by name), so its memory does not grow with the
        // tree. A user's max_dentries comes later and wins.
        source.vfs.max_dentries = MOUNT_DENTRIES;
        for (k, v) in opt::items(text) {
            if opt::find(MOUNT_OPTIONS, k).is_some() {
                opt::set(MOUNT_OPTIONS, &mut given, k, v)?;
            } else if let Some((_, flag, set)) = MOUNT_FLAGS.iter().find(|f| f.0 == k) {
                if *set {
                    kernel_flags |= flag;
                } else {
                    kernel_flags &= !flag;
                }
            } else if MOUNT_NOISE.contains(&k) || k.starts_with("x-") {
                // x-*: for other programs (systemd's x-systemd.automount,
                // x-mount.mkdir): mount(8) hands them to helpers, and
                // helpers leave them alone.
            } else {
                source.set(k, v)?;
            }
        }
        source.vfs.read_only |= given.read_only;
        let cache = source.vfs.cache;
        let (dentry, dattr) = match cache {
            CachePolicy::None => (Duration::ZERO, Duration::ZERO),
            CachePolicy::Loose | CachePolicy::Coherent => (FOREVER, FOREVER),
        };
        // A noatime mount's reads leave the host files' access times
        // alone too (the kernel keeps none of its own to show).
        source.backend.host_noatime = kernel_flags & libc::MS_NOATIME != 0;
        // Passthrough reads through a file of the kernel's own making on
        // the host file, which takes the mount's open flags, not
        // O_NOATIME, and moves the host's access time: noatime holds only
        // without it, unless passthrough is asked for by name.
        if source.backend.host_noatime && !opt::items(text).any(|(k, _)| k == "passthrough") {
            given.passthrough = false;
        }
        let neg_ttl = match (cache, source.vfs.negative) {
            (CachePolicy::None, _) | (_, NegPolicy::Off) => Duration::ZERO,
            (_, NegPolicy::Forever) => FOREVER,
            (_, NegPolicy::For(d)) => d,
        };
        Ok(MountOptions {
            cache,
            entry_ttl: given.entry.unwrap_or(dentry),
            attr_ttl: given.attr.unwrap_or(dattr),
            neg_ttl,
            allow_other: given.allow_other,
            default_permissions: given.default_permissions,
            read_only: source.vfs.read_only,
            threads: given.threads,
            io_fds: given.io_fds,
            transport: given.transport,
            bare_listings: given.bare_listings,
            passthrough: given.passthrough,
            writeback_cache: given.writeback_cache,
            events: given.events,
            acl: given.acl,
            export: given.export,
            remount: given.remount,
            source,
            text: text.to_string(),
            cache_given: opt::items(text).any(|(k, _)| k == "cache"),
            kernel_flags,
        })
    }

    /// The cache mode where `cache=` was not given: `coherent` for a
    /// source that can tell the mount what changed (a host directory,
    /// which is watched; a 9P server, which reports changes when it is
    /// a walkfs server, and is otherwise revalidated after a second:
    /// "degraded"), `loose` for memory, which nobody else changes. A
    /// share starts coherent; `cache=loose` is for a tree one client
    /// owns.
    pub fn for_source(mut self, source: &walkfs_source::Source) -> MountOptions {
        if !self.cache_given && !matches!(source, walkfs_source::Source::Mem) {
            self.cache = CachePolicy::Coherent;
            self.source.vfs.cache = CachePolicy::Coherent;
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_modes_set_the_kernel_timeouts() {
        let o = MountOptions::parse("cache=loose,negtimeout=-1").unwrap();
        assert_eq!(o.cache, CachePolicy::Loose);
        assert_eq!(o.neg_ttl, FOREVER);
        assert_eq!(o.entry_ttl, FOREVER);
        let o = MountOptions::parse("cache=loose,ndentrytmo=250").unwrap();
        assert_eq!(o.neg_ttl, Duration::from_millis(250));
        let o = MountOptions::parse("cache=loose,negtimeout=0").unwrap();
        assert!(o.neg_ttl.is_zero());
        let o = MountOptions::parse("cache=none,negtimeout=-1").unwrap();
        assert_eq!(o.cache, CachePolicy::None);
        assert!(o.entry_ttl.is_zero() && o.attr_ttl.is_zero() && o.neg_ttl.is_zero());
        // The backend's options go to the source, the vfs's to the vfs.
        let o = MountOptions::parse("cache=coherent,msize=65536,host_fds=16").unwrap();
        assert_eq!(o.cache, CachePolicy::Coherent);
        assert_eq!(o.source.vfs.cache, CachePolicy::Coherent);
        assert_eq!(o.source.backend.msize, 65536);
        assert_eq!(o.source.backend.host_fds, 16);
        assert_eq!(o.source.vfs.max_dentries, MOUNT_DENTRIES);
        assert_eq!(o.neg_ttl, FOREVER);
        assert!(MountOptions::parse("msize=100").is_err());
    }

    #[test]
    fn generic_mount_options_become_kernel_flags_and_the_cache_follows_the_source() {
        let flags = |t: &str| MountOptions::parse(t).unwrap().kernel_flags;
        let safe = libc::MS_NOSUID | libc::MS_NODEV;
        assert_eq!(flags(""), safe);
        assert_eq!(
            flags("noatime,nodiratime,lazytime,sync,dirsync,noexec"),
            safe | libc::MS_NOATIME
                | libc::MS_NODIRATIME
                | libc::MS_LAZYTIME
                | libc::MS_SYNCHRONOUS
                | libc::MS_DIRSYNC
                | libc::MS_NOEXEC
        );
        // Later ones win, as in mount(8); dev and suid are asked for.
        assert_eq!(flags("noatime,atime,relatime"), safe | libc::MS_RELATIME);
        assert_eq!(flags("dev,suid"), 0);
        assert_eq!(flags("dev,nodev"), safe);
        assert!(MountOptions::parse("defaults,auto,iversion,async").is_ok());
        // No cache= given: coherent for a directory or a server, loose
        // for memory; a given one stays.
        use walkfs_source::Source;
        let dir = Source::Host("/srv".into());
        let mem = Source::Mem;
        let o = MountOptions::parse("").unwrap().for_source(&dir);
        assert_eq!(
            (o.cache, o.source.vfs.cache),
            (CachePolicy::Coherent, CachePolicy::Coherent)
        );
        let o = MountOptions::parse("").unwrap().for_source(&mem);
        assert_eq!(o.cache, CachePolicy::Loose);
        let o = MountOptions::parse("cache=loose").unwrap().for_source(&dir);
        assert_eq!(o.cache, CachePolicy::Loose);
    }

    #[test]
    fn fuse_options_are_taken_out_and_the_rest_checked() {
        let o =
            MountOptions::parse("allow_other,ro,default_permissions,threads=3,fastpath=0,nodev")
                .unwrap();
        assert!(o.allow_other && o.read_only && o.default_permissions);
        assert_eq!(o.threads, 3);
        assert!(!o.source.vfs.fastpath);
        assert!(o.source.vfs.read_only);
        assert!(MountOptions::parse("bogus=1").is_err());
        assert!(MountOptions::parse("threads=0").is_err());
        // An fstab line for systemd: its options and mount(8)'s are not ours.
        let o = MountOptions::parse(
            "_netdev,nofail,x-systemd.automount,x-systemd.requires=vsock.service,cache=coherent",
        )
        .unwrap();
        assert_eq!(o.cache, CachePolicy::Coherent);
        assert!(MountOptions::parse("").unwrap().default_permissions);
        assert!(
            !MountOptions::parse("no_default_permissions")
                .unwrap()
                .default_permissions
        );
        assert!(MountOptions::parse("entry_timeout=-1").is_err());
        assert_eq!(
            MountOptions::parse("transport=dev").unwrap().transport,
            Transport::Dev
        );
        assert_eq!(MountOptions::parse("").unwrap().transport, Transport::Auto);
        assert!(MountOptions::parse("transport=pipe").is_err());
        assert!(!MountOptions::parse("passthrough=0").unwrap().passthrough);
        assert!(MountOptions::parse("").unwrap().passthrough);
        assert!(MountOptions::parse("passthrough=maybe").is_err());
    }

    #[test]
    fn the_same_mistake_gets_the_same_error_in_every_layer() {
        // A switch of the mount, of the vfs, of a backend: one vocabulary,
        // one message.
        let said = |text: &str| MountOptions::parse(text).unwrap_err().to_string();
        assert_eq!(
            said("passthrough=2"),
            "option passthrough=2: expected 0 or 1"
        );
        assert_eq!(said("fastpath=2"), "option fastpath=2: expected 0 or 1");
        assert_eq!(
            said("host_behind=2"),
            "option host_behind=2: expected 0 or 1"
        );
        assert_eq!(
            walkfs_vfs::Options::parse("fastpath=2")
                .unwrap_err()
                .to_string(),
            said("fastpath=2")
        );
        assert_eq!(said("warp=9"), "option warp: no such option");
        for on in ["passthrough=on", "fastpath=yes", "host_behind=true"] {
            assert!(MountOptions::parse(on).is_ok(), "{on}");
        }
        assert_eq!(
            said("threads=0"),
            "option threads=0: expected a whole number from 1 to 4096"
        );
        // The mount's default cache bound, unless the user gives one.
        assert_eq!(
            MountOptions::parse("max_dentries=5")
                .unwrap()
                .source
                .vfs
                .max_dentries,
            5
        );
    }
}
