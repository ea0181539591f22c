//! `walkfs bench parallel`.

/// Namespace changes in parallel over a slow server: one vfs over
/// `walkfs serve --reply-delay-us US`, 1, 2 and 8 threads each
/// creating files in a directory of its own (total creates/s, and the
/// speedup over 1 thread); then the latency of a cache miss alone and
/// while 8 threads create elsewhere (p50, p99, p99 over the delay).
/// Medians of 3 repetitions; restarts the vfs counted with each row.
#[derive(clap::Args)]
pub struct Parallel {
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
}

impl Parallel {
    pub fn run(self) -> Result<(), String> {
        let Parallel {
            quick,
            json,
            reply_delay_us,
            threads,
        } = self;
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
}
