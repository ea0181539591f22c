//! `walkfs bench micro`.

use walkfs_bench::micro;

/// The seeds' lookup benchmarks, kernel and walkfs side by side, each
/// optimization on and off: readlink (seed 000), the gcc trace and
/// access-only trace (seed 001), access (seed 002), fstat vs statx
/// (seed 004). Medians of 5 runs; ops/s summed over threads.
#[derive(clap::Args)]
pub struct Micro {
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
}

impl Micro {
    pub fn run(self) -> Result<(), String> {
        let Micro {
            quick,
            json,
            threads,
            source,
            benches,
            variants,
            plot,
            fuse,
        } = self;
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
}
