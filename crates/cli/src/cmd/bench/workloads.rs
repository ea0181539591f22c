//! `walkfs bench workloads`.

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
#[derive(clap::Args)]
pub struct Workloads {
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
}

impl Workloads {
    pub fn run(self) -> Result<(), String> {
        let Workloads {
            quick,
            json,
            plot,
            reps,
            reply_delay_us,
            only,
            fs,
        } = self;
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
}
