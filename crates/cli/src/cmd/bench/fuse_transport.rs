//! `walkfs bench fuse-transport`.

/// The cost of one FUSE request by transport: fuser (what walkfs
/// mount ran on until 2026-11), walkfs's own session over /dev/fuse,
/// and FUSE over io_uring with a ring per CPU (kernel 6.14+; needs `echo Y >
/// /sys/module/fuse/parameters/enable_uring`, skipped otherwise). One
/// synthetic tree of 1,000 files with zero timeouts (every stat is a
/// LOOKUP and a GETATTR), a client thread doing stats, then listings.
/// Medians; transports interleaved. Needs root. See
/// docs/fuse-transport.md.
#[derive(clap::Args)]
pub struct FuseTransport {
    /// One repetition and fewer stats.
    #[arg(long)]
    quick: bool,
    /// One JSON object per line instead of a table.
    #[arg(long)]
    json: bool,
    /// Server threads of the fuser and /dev/fuse rows.
    #[arg(long, default_value_t = 2)]
    threads: usize,
}

impl FuseTransport {
    pub fn run(self) -> Result<(), String> {
        let FuseTransport {
            quick,
            json,
            threads,
        } = self;
        let rows = walkfs_bench::transport::run(&walkfs_bench::transport::TransportOpts {
            reps: if quick { 1 } else { 5 },
            stats: if quick { 5_000 } else { 50_000 },
            threads,
        })?;
        if json {
            for r in &rows {
                println!("{}", serde_json::to_string(r).map_err(|e| e.to_string())?);
            }
        } else {
            print!("{}", walkfs_bench::transport::render(&rows));
        }
        Ok(())
    }
}
