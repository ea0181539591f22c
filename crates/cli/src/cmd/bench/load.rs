//! `walkfs bench load`.

/// Load without loss: CLIENTS clients (own 9P connections, threads)
/// doing random writes, reads, truncates, creates, renames and
/// unlinks for SECONDS on their own files and in directories all of
/// them change, through one `walkfs serve`; every read checked as it
/// happens, every file and shared listing checked against the
/// clients' models at the end. Prints ops/s, errors, mismatches and
/// the server's memory; exits non-zero on any error or mismatch.
#[derive(clap::Args)]
pub struct Load {
    #[arg(long, default_value_t = 32)]
    clients: usize,
    #[arg(long, default_value_t = 10.0)]
    seconds: f64,
    /// Seed of the clients' random choices (a run is repeatable up to
    /// the interleaving of the clients).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// The server holds every reply this many microseconds (a slow
    /// link: the run must lose nothing either).
    #[arg(long, default_value_t = 0, value_name = "US")]
    reply_delay_us: u64,
    /// One JSON object instead of a table.
    #[arg(long)]
    json: bool,
}

impl Load {
    pub fn run(self) -> Result<(), String> {
        let Load {
            clients,
            seconds,
            seed,
            reply_delay_us,
            json,
        } = self;
        let walkfs = std::env::current_exe().map_err(|e| format!("own executable: {e}"))?;
        let (row, problems) = walkfs_bench::load::run(&walkfs_bench::load::LoadOpts {
            clients: clients.max(1),
            seconds,
            walkfs,
            seed,
            reply_delay_us,
        })?;
        if json {
            println!(
                "{}",
                serde_json::to_string(&row).map_err(|e| e.to_string())?
            );
        } else {
            print!("{}", walkfs_bench::load::render(&row));
        }
        for p in problems.iter().take(20) {
            eprintln!("walkfs: {p}");
        }
        if row.errors + row.mismatches > 0 {
            return Err(format!(
                "{} errors and {} mismatches under load",
                row.errors, row.mismatches
            ));
        }
        Ok(())
    }
}
