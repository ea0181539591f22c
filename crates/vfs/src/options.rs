//! Options of a vfs, parsed from the `name=value,...` strings the C ABI,
//! the CLI and mount options use.

use walkfs_fsapi::{Errno, Result};

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
    /// all three); caches ENOENT only with negtimeout=-1.
    pub pathcache: bool,
    /// Negative dentries (seed 003): 0 = not kept, N ms, -1 = until
    /// evicted or invalidated.
    pub negtimeout_ms: i64,
    /// Bound on cached dentries; unused ones are evicted past it.
    pub max_dentries: u32,
    /// Descriptors per context (`EMFILE` past it).
    pub max_files: u32,
    /// Applied to the mode of everything created (none by default).
    pub umask: u32,
    /// Refuse every change with EROFS.
    pub read_only: bool,
    /// `cache=none`: every lookup and every stat asks the backend (the
    /// cache still holds the tree's shape, but no answer is taken from it
    /// unchecked). `cache=loose` (the default): keep what was learned.
    pub cache_none: bool,
    /// `cache=coherent`: loose caching, with the backend reporting changes
    /// made behind the cache's back (by the host, by other clients) and
    /// exactly those entries dropped. A backend that cannot report them
    /// gets revalidation with short timeouts instead.
    pub coherent: bool,
    /// For a 9P source: the largest message size to negotiate.
    pub msize: u32,
    /// For a 9P source: the export to attach to (diod wants its path;
    /// `walkfs serve` exports one tree and ignores it).
    pub aname: String,
    /// For a 9P source: a file holding the secret the server asks for
    /// (`walkfs serve --secret-file`), shown with 9P's Tauth.
    pub secret_file: Option<String>,
    /// For a 9P source: fids kept for cached files beyond those in use
    /// (the rest are walked to again by name when needed).
    pub fids: u32,
    /// For a host directory: `O_PATH` descriptors kept for files not in
    /// use (the rest are opened again by name when needed).
    pub host_fds: u32,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            fastpath: true,
            fastperm: true,
            cache_symlinks: true,
            pathcache: true,
            negtimeout_ms: -1,
            max_dentries: 1_000_000,
            max_files: 1024,
            umask: 0,
            read_only: false,
            cache_none: false,
            coherent: false,
            msize: 512 * 1024,
            aname: String::new(),
            secret_file: None,
            fids: walkfs_p9client::DEFAULT_NODE_FIDS as u32,
            host_fds: walkfs_hostfs::DEFAULT_CACHED_FDS as u32,
        }
    }
}

fn parse_bool(v: &str) -> Result<bool> {
    match v {
        "1" | "on" | "true" | "yes" | "" => Ok(true),
        "0" | "off" | "false" | "no" => Ok(false),
        _ => Err(Errno::EINVAL),
    }
}

impl Options {
    /// Parse `"negtimeout=-1,fastpath=1,..."`; empty or `None`-like strings
    /// give the defaults. Unknown names are `EINVAL`.
    pub fn parse(s: &str) -> Result<Options> {
        let mut o = Options::default();
        for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let (name, value) = item.split_once('=').unwrap_or((item, ""));
            o.set(name, value)?;
        }
        Ok(o)
    }

    /// Set one option by name.
    pub fn set(&mut self, name: &str, value: &str) -> Result<()> {
        let num = |v: &str| v.parse::<i64>().map_err(|_| Errno::EINVAL);
        match name {
            "fastpath" => self.fastpath = parse_bool(value)?,
            "fastperm" => self.fastperm = parse_bool(value)?,
            "cache_symlinks" => self.cache_symlinks = parse_bool(value)?,
            "pathcache" => self.pathcache = parse_bool(value)?,
            "negtimeout" | "ndentrytmo" => {
                let v = num(value)?;
                if v < -1 {
                    return Err(Errno::EINVAL);
                }
                self.negtimeout_ms = v;
            }
            "max_dentries" => {
                self.max_dentries = u32::try_from(num(value)?).map_err(|_| Errno::EINVAL)?;
            }
            "max_files" => {
                self.max_files = u32::try_from(num(value)?).map_err(|_| Errno::EINVAL)?
            }
            "umask" => {
                let v = u32::from_str_radix(value, 8).map_err(|_| Errno::EINVAL)?;
                if v > 0o777 {
                    return Err(Errno::EINVAL);
                }
                self.umask = v;
            }
            "ro" => self.read_only = parse_bool(value)?,
            "rw" => self.read_only = !parse_bool(value)?,
            "cache" => {
                (self.cache_none, self.coherent) = match value {
                    "none" => (true, false),
                    "coherent" => (false, true),
                    // Linux's 9p client names; all keep what was learned.
                    "loose" | "fscache" | "mmap" => (false, false),
                    _ => return Err(Errno::EINVAL),
                }
            }
            "aname" => self.aname = value.to_string(),
            "host_fds" => {
                self.host_fds = u32::try_from(num(value)?)
                    .ok()
                    .filter(|&n| n >= 1)
                    .ok_or(Errno::EINVAL)?
            }
            "fids" => {
                self.fids = u32::try_from(num(value)?)
                    .ok()
                    .filter(|&n| n >= 1)
                    .ok_or(Errno::EINVAL)?
            }
            "secret_file" if !value.is_empty() => self.secret_file = Some(value.to_string()),
            "msize" => {
                self.msize = u32::try_from(num(value)?)
                    .ok()
                    .filter(|&m| m >= 4096)
                    .ok_or(Errno::EINVAL)?
            }
            _ => return Err(Errno::EINVAL),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_rejects() {
        let o = Options::parse("negtimeout=0, fastpath=0,umask=022").unwrap();
        assert_eq!(o.negtimeout_ms, 0);
        assert!(!o.fastpath);
        assert_eq!(o.umask, 0o22);
        assert_eq!(Options::parse("").unwrap(), Options::default());
        assert_eq!(Options::parse("bogus=1"), Err(Errno::EINVAL));
        assert_eq!(Options::parse("negtimeout=-2"), Err(Errno::EINVAL));
        assert_eq!(
            Options::parse("ndentrytmo=5000").unwrap().negtimeout_ms,
            5000
        );
    }
}
