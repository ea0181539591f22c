//! `walkfs bench scale`.

use walkfs_bench::scale;

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
#[derive(clap::Args)]
pub struct Scale {
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
}

impl Scale {
    pub fn run(self) -> Result<(), String> {
        let Scale {
            json,
            quick,
            synthetic_files,
            skip_kernel,
            skip_synthetic,
            serve_clients,
            client_files,
        } = self;
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
}
