//! `walkfs bench memory`.

use walkfs_bench::{memory, report};

/// Memory of the dentry and inode caches, in bytes per cached dentry.
#[derive(clap::Args)]
pub struct Memory {
    /// Files to cache (13-byte names, 1000 per directory).
    #[arg(long, default_value_t = 1_000_000)]
    entries: u32,
    /// One JSON object per line instead of a table.
    #[arg(long)]
    json: bool,
}

impl Memory {
    pub fn run(self) -> Result<(), String> {
        let Memory { entries, json } = self;
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
}
