//! `walkfs bench 9p`.

use walkfs_bench::p9meta;

/// 9P metadata operations per second (Twalk of 3 names + Tgetattr +
/// Tclunk, each waiting for its reply) against `walkfs serve` and
/// Debian's diod exporting the same tree, 1 and 8 client connections,
/// repetitions interleaved; medians of 5 (3 with --quick). Both
/// servers are started here on 127.0.0.1.
#[derive(clap::Args)]
pub struct NineP {
    /// Shorter runs (3 repetitions of 0.3 s).
    #[arg(long)]
    quick: bool,
    /// One JSON object per line instead of a table.
    #[arg(long)]
    json: bool,
    /// Connection counts (repeatable); default 1 and 8.
    #[arg(long)]
    conns: Vec<usize>,
    /// Only this server (repeatable): walkfs, diod.
    #[arg(long = "server")]
    servers: Vec<String>,
}

impl NineP {
    pub fn run(self) -> Result<(), String> {
        let NineP {
            quick,
            json,
            conns,
            servers,
        } = self;
        let walkfs = std::env::current_exe().map_err(|e| format!("own executable: {e}"))?;
        let res = p9meta::run(&p9meta::P9Opts {
            quick,
            conns: if conns.is_empty() { vec![1, 8] } else { conns },
            walkfs,
            servers,
        })?;
        if json {
            for r in &res.rows {
                println!("{}", serde_json::to_string(r).map_err(|e| e.to_string())?);
            }
        } else {
            print!("{}", p9meta::render(&res));
        }
        Ok(())
    }
}
