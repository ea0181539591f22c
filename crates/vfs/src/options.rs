//! Options of a vfs, parsed from the `name=value,...` strings the C ABI,
//! the CLI and mount options use. The options of the backends (9P message
//! size, fids, host descriptors...) belong to whoever builds the backend
//! (`walkfs-source`), which routes the names it does not know here.

use std::time::Duration;

use walkfs_fsapi::{Errno, Result};

use crate::opt::{self, Opt, OptError};

/// How much of what was learned from the backend is trusted (`cache=`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum CachePolicy {
    /// `cache=none`: every lookup and every stat asks the backend (the
    /// cache still holds the tree's shape, but no answer is taken from it
    /// unchecked): no lock-free walk, no remembered paths, no negative
    /// entries, no symlink bodies.
    None,
    /// `cache=loose` (and Linux's `fscache`, `mmap`): keep what was
    /// learned.
    #[default]
    Loose,
    /// `cache=coherent`: loose caching, with the backend reporting changes
    /// made behind the cache's back (by the host, by other clients) and
    /// exactly those entries dropped. A backend that cannot report them
    /// leaves the vfs degraded: revalidating, as with `None`, with short
    /// timeouts (see [`crate::Vfs::is_degraded`]).
    Coherent,
}

impl CachePolicy {
    /// The value of `cache=` that names it (`none`, `loose`, `coherent`).
    pub fn as_str(self) -> &'static str {
        match self {
            CachePolicy::None => "none",
            CachePolicy::Loose => "loose",
            CachePolicy::Coherent => "coherent",
        }
    }
}

impl std::fmt::Display for CachePolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for CachePolicy {
    type Err = Errno;

    /// `none`, `loose`, `coherent`, and Linux's 9p client names `fscache`
    /// and `mmap` (which keep what was learned: loose). Anything else is
    /// `EINVAL`.
    fn from_str(v: &str) -> Result<CachePolicy> {
        Ok(match v {
            "none" => CachePolicy::None,
            "coherent" => CachePolicy::Coherent,
            "loose" | "fscache" | "mmap" => CachePolicy::Loose,
            _ => return Err(Errno::EINVAL),
        })
    }
}

/// Whether, and for how long, a name found missing is remembered as a
/// negative entry (`negtimeout=` / `ndentrytmo=`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum NegPolicy {
    /// `0`: not kept; every lookup of a missing name asks the backend.
    Off,
    /// `N` (milliseconds): kept that long.
    For(Duration),
    /// `-1`: kept until evicted or invalidated.
    #[default]
    Forever,
}

impl NegPolicy {
    /// The policy of a `negtimeout=` value in milliseconds: 0 off, -1 for
    /// ever, N that long; below -1 is `EINVAL`.
    pub fn from_millis(ms: i64) -> Result<NegPolicy> {
        match ms {
            0 => Ok(NegPolicy::Off),
            -1 => Ok(NegPolicy::Forever),
            n if n > 0 => Ok(NegPolicy::For(Duration::from_millis(n as u64))),
            _ => Err(Errno::EINVAL),
        }
    }

    /// The `negtimeout=` value naming it: 0 off, -1 for ever, else the
    /// milliseconds (a zero duration is off; a duration past `i64::MAX`
    /// ms is as good as for ever, and says so).
    pub fn as_millis(self) -> i64 {
        match self {
            NegPolicy::Off => 0,
            NegPolicy::Forever => -1,
            NegPolicy::For(d) => i64::try_from(d.as_millis()).unwrap_or(-1),
        }
    }
}

/// Settings of a [`crate::Vfs`]. `Default` turns every optimization on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    /// Lock-free walk of cached components (seed 001). Off: every
    /// component takes the locked slow path.
    pub fastpath: bool,
    /// MAY_EXEC fast path for directories everyone may search (seed 002).
    pub fastperm: bool,
    /// Cache symlink bodies with their length (seed 000). Off: ask the
    /// backend on every readlink and every link followed.
    pub cache_symlinks: bool,
    /// Remember whole resolved paths, validated by a generation count that
    /// every change to names, permissions or mounts bumps. Used only while
    /// fastpath, fastperm and cache_symlinks are on (a hit stands in for
    /// all three); caches ENOENT only with negative entries kept for ever.
    pub pathcache: bool,
    /// Negative dentries (seed 003).
    pub negative: NegPolicy,
    /// Bound on cached dentries; unused ones are evicted past it.
    pub max_dentries: u32,
    /// Descriptors per context (`EMFILE` past it).
    pub max_files: u32,
    /// Applied to the mode of everything created (none by default).
    pub umask: u32,
    /// Refuse every change with EROFS.
    pub read_only: bool,
    /// What is trusted from the cache. `None` overrides the switches
    /// above while in force (they are kept as given, and count again
    /// once it is lifted).
    pub cache: CachePolicy,
    /// Wait for the backend's answer to every change (as CephFS's
    /// `wsync`). Off by default: with a cache, on a backend that runs
    /// changes in order behind the caller (a 9P server), unlinks, writes
    /// and the attribute changes the cache can decide are answered at
    /// once; their errors are reported at fsync, close and syncfs
    /// (writeback.rs).
    pub sync_metadata: bool,
    /// Directory listings asked for ahead at most (readahead.rs), when
    /// the backend can ask without waiting (a 9P server that keeps a
    /// connection's order); at most 64, 0 = off. Not with `cache=none`.
    pub dir_readahead: u32,
    /// Once a file's changes behind the callers have landed, replace the
    /// attributes the cache worked out (the client's clock) with the
    /// backend's, asked behind everyone (writeback/settle.rs). On by
    /// default; it costs one attribute request per file changed.
    pub settle: bool,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            fastpath: true,
            fastperm: true,
            cache_symlinks: true,
            pathcache: true,
            negative: NegPolicy::Forever,
            max_dentries: 1_000_000,
            max_files: 1024,
            umask: 0,
            read_only: false,
            cache: CachePolicy::Loose,
            sync_metadata: false,
            dir_readahead: crate::readahead::DEFAULT_LISTINGS as u32,
            settle: true,
        }
    }
}

/// The vfs's options: names, whether they may change on a running vfs
/// ([`crate::Vfs::set_option`]), and how each value is taken.
pub const OPTIONS: &[Opt<Options>] = &[
    Opt {
        names: &["fastpath"],
        live: true,
        set: |o, n, v| {
            o.fastpath = opt::flag(n, v)?;
            Ok(())
        },
    },
    Opt {
        names: &["fastperm"],
        live: true,
        set: |o, n, v| {
            o.fastperm = opt::flag(n, v)?;
            Ok(())
        },
    },
    Opt {
        names: &["cache_symlinks"],
        live: true,
        set: |o, n, v| {
            o.cache_symlinks = opt::flag(n, v)?;
            Ok(())
        },
    },
    Opt {
        names: &["pathcache"],
        live: true,
        set: |o, n, v| {
            o.pathcache = opt::flag(n, v)?;
            Ok(())
        },
    },
    Opt {
        // Linux's 9p client calls it ndentrytmo.
        names: &["negtimeout", "ndentrytmo"],
        live: true,
        set: |o, n, v| {
            o.negative = NegPolicy::from_millis(opt::signed(n, v)?).map_err(|_| {
                OptError::bad(n, v, "expected milliseconds, 0 (off) or -1 (for ever)")
            })?;
            Ok(())
        },
    },
    Opt {
        names: &["max_dentries"],
        live: false,
        set: |o, n, v| {
            o.max_dentries = opt::count(n, v, 0, u64::from(u32::MAX))?;
            Ok(())
        },
    },
    Opt {
        names: &["max_files"],
        live: false,
        set: |o, n, v| {
            o.max_files = opt::count(n, v, 0, u64::from(u32::MAX))?;
            Ok(())
        },
    },
    Opt {
        names: &["umask"],
        live: true,
        set: |o, n, v| {
            o.umask = u32::from_str_radix(v, 8)
                .ok()
                .filter(|m| *m <= 0o777)
                .ok_or_else(|| OptError::bad(n, v, "expected octal bits, at most 777"))?;
            Ok(())
        },
    },
    Opt {
        names: &["ro"],
        live: true,
        set: |o, n, v| {
            o.read_only = opt::flag(n, v)?;
            Ok(())
        },
    },
    Opt {
        names: &["rw"],
        live: true,
        set: |o, n, v| {
            o.read_only = !opt::flag(n, v)?;
            Ok(())
        },
    },
    Opt {
        names: &["cache"],
        live: true,
        set: |o, n, v| {
            o.cache = v
                .parse()
                .map_err(|_| OptError::bad(n, v, "expected none, loose or coherent"))?;
            Ok(())
        },
    },
    Opt {
        names: &["sync_metadata"],
        live: true,
        set: |o, n, v| {
            o.sync_metadata = opt::flag(n, v)?;
            Ok(())
        },
    },
    Opt {
        names: &["settle"],
        live: true,
        set: |o, n, v| {
            o.settle = opt::flag(n, v)?;
            Ok(())
        },
    },
    Opt {
        names: &["dir_readahead"],
        live: true,
        set: |o, n, v| {
            o.dir_readahead = opt::count(n, v, 0, 64)?;
            Ok(())
        },
    },
];

impl Options {
    /// Parse `"negtimeout=-1,fastpath=1,..."`; an empty string gives the
    /// defaults. Unknown names (the backends' too) are errors.
    pub fn parse(s: &str) -> std::result::Result<Options, OptError> {
        let mut o = Options::default();
        for (name, value) in opt::items(s) {
            o.set(name, value)?;
        }
        Ok(o)
    }

    /// Set one option by name (an error for an unknown name or a bad
    /// value, leaving the options as they were).
    pub fn set(&mut self, name: &str, value: &str) -> std::result::Result<(), OptError> {
        opt::set(OPTIONS, self, name, value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_rejects() {
        let o = Options::parse("negtimeout=0, fastpath=0,umask=022").unwrap();
        assert_eq!(o.negative, NegPolicy::Off);
        assert!(!o.fastpath);
        assert_eq!(o.umask, 0o22);
        assert_eq!(Options::parse("").unwrap(), Options::default());
        assert!(Options::parse("bogus=1").is_err_and(|e| e.unknown));
        assert_eq!(
            Options::parse("negtimeout=-2").unwrap_err().to_string(),
            "option negtimeout=-2: expected milliseconds, 0 (off) or -1 (for ever)"
        );
        assert!(Options::parse("negtimeout=x").is_err());
        assert!(Options::parse("dir_readahead=65").is_err());
        assert_eq!(
            Options::parse("ndentrytmo=5000").unwrap().negative,
            NegPolicy::For(Duration::from_millis(5000))
        );
        assert_eq!(
            Options::parse("negtimeout=-1").unwrap().negative,
            NegPolicy::Forever
        );
        // The backends' options are not the vfs's.
        assert!(Options::parse("msize=8192").is_err_and(|e| e.unknown));
    }

    #[test]
    fn cache_policies_and_their_names() {
        for (v, p) in [
            ("none", CachePolicy::None),
            ("loose", CachePolicy::Loose),
            ("fscache", CachePolicy::Loose),
            ("mmap", CachePolicy::Loose),
            ("coherent", CachePolicy::Coherent),
        ] {
            assert_eq!(Options::parse(&format!("cache={v}")).unwrap().cache, p);
        }
        assert!(Options::parse("cache=strict").is_err());
        assert_eq!(Options::default().cache, CachePolicy::Loose);
        for p in [CachePolicy::None, CachePolicy::Loose, CachePolicy::Coherent] {
            assert_eq!(p.to_string().parse::<CachePolicy>(), Ok(p));
        }
    }

    #[test]
    fn negative_policy_round_trips_through_millis() {
        for ms in [0, -1, 1, 250, 5000] {
            assert_eq!(NegPolicy::from_millis(ms).unwrap().as_millis(), ms);
        }
        assert_eq!(NegPolicy::For(Duration::ZERO).as_millis(), 0);
        assert_eq!(NegPolicy::For(Duration::MAX).as_millis(), -1);
    }
}
