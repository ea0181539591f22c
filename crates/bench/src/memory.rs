//! Bytes per cached dentry: fill the cache with `entries` files (names of
//! 13 bytes, 1000 to a directory) and divide what the dentry and inode
//! caches hold (slots, name chunks, both hash tables) by the dentries.

use std::sync::Arc;

use serde::Serialize;
use walkfs_fsapi::{FileSystem, OpenFlags, Owner};
use walkfs_memfs::MemFs;
use walkfs_vfs::{Creds, Options, Vfs, AT_FDCWD};

#[derive(Debug, Serialize)]
pub struct MemoryReport {
    pub bench: &'static str,
    pub entries: u32,
    pub dentries: u32,
    pub inodes: u32,
    pub cache_bytes: usize,
    pub bytes_per_dentry: f64,
    /// Growth of the process's resident memory while the cache filled, per
    /// dentry (a cross-check of the accounting).
    pub rss_bytes_per_dentry: f64,
}

fn rss_bytes() -> usize {
    let s = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: usize = s
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

pub fn run(entries: u32) -> walkfs_vfs::Result<MemoryReport> {
    const PER_DIR: u32 = 1000;
    let fs = Arc::new(MemFs::new());
    let root = fs.root();
    let owner = Owner { uid: 0, gid: 0 };
    let dirs = entries.div_ceil(PER_DIR);
    let mut names = Vec::with_capacity(entries as usize);
    for d in 0..dirs {
        let dname = format!("dir{d:05}");
        let dir = fs.mkdir(root, dname.as_bytes(), 0o755, owner)?;
        fs.forget(dir.node, 1);
        for i in 0..PER_DIR.min(entries - d * PER_DIR) {
            let fname = format!("file-{i:06}.c");
            let (e, fh) = fs.create(dir.node, fname.as_bytes(), 0o644, owner, OpenFlags(0))?;
            fs.release(e.node, fh);
            fs.forget(e.node, 1);
            names.push(format!("/{dname}/{fname}"));
        }
    }
    // Room for every file and directory: nothing is evicted.
    let opts = Options {
        max_dentries: entries + dirs + 16,
        ..Options::default()
    };
    let rss0 = rss_bytes();
    let vfs = Vfs::new(fs, &opts)?;
    let ctx = vfs.context(Creds::root());
    for n in &names {
        ctx.faccessat(AT_FDCWD, n.as_bytes(), 0, 0)?;
    }
    let rss1 = rss_bytes();
    let st = vfs.cache_stats();
    Ok(MemoryReport {
        bench: "memory",
        entries,
        dentries: st.dentries,
        inodes: st.inodes,
        cache_bytes: st.bytes,
        bytes_per_dentry: st.bytes as f64 / st.dentries as f64,
        rss_bytes_per_dentry: rss1.saturating_sub(rss0) as f64 / st.dentries as f64,
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn small_fill_is_accounted() {
        let r = super::run(5000).unwrap();
        assert_eq!(r.dentries, 5000 + 5 + 1);
        assert_eq!(r.inodes, r.dentries);
        assert!(r.bytes_per_dentry > 100.0);
    }
}
