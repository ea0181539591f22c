//! `walkfs bench build`.

use walkfs_bench::build;

/// Seed 003's workload: a clean `make -j$(nproc)` of hostapd and
/// wpa_supplicant (Debian's wpa source, fetched with apt-get source;
/// a deb-src entry is added if none exists) on native ext4, on
/// `walkfs mount` of a served directory in cache=none, cache=loose,
/// cache=loose,negtimeout=-1 and loose with symlink caching off, on
/// bindfs and on sshfs over 127.0.0.1 (a private sshd); then the
/// walkfs rows behind a slow link (walkfs serve --reply-delay-us).
/// Each build from a fresh copy and a
/// fresh mount; medians of 3, configurations interleaved. Walkfs rows
/// carry the build's RPCs by type. Needs root.
#[derive(clap::Args)]
pub struct Build {
    /// One build each of native, walkfs cache=loose,negtimeout=-1,
    /// walkfs cache=coherent and bindfs (about 12 minutes on 2 cores).
    #[arg(long)]
    quick: bool,
    /// One JSON object per line instead of a table.
    #[arg(long)]
    json: bool,
    /// Also draw the rows as a bar chart into this PNG.
    #[arg(long, value_name = "FILE.png")]
    plot: Option<String>,
    /// Only these configurations (repeatable): native, walkfs-none,
    /// walkfs-loose, walkfs-loose-neg, walkfs-loose-neg-nosymcache,
    /// walkfs-coherent, bindfs, sshfs, walkfs-...-slowNus; comma-separated or repeated.
    /// native is always measured, as every ratio is to it.
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Repetitions (default 3; 1 with --quick).
    #[arg(long)]
    reps: Option<usize>,
    /// Reply delay of the slow-link rows in µs (0: none).
    #[arg(long, default_value_t = 200, value_name = "US")]
    slow_us: u64,
    /// Another walkfs executable (an earlier release) to compare with:
    /// every walkfs row also runs with it, as NAME@baseline,
    /// interleaved in the same run.
    #[arg(long, value_name = "EXE")]
    baseline: Option<std::path::PathBuf>,
}

impl Build {
    pub fn run(self) -> Result<(), String> {
        let Build {
            quick,
            json,
            plot,
            only,
            reps,
            slow_us,
            baseline,
        } = self;
        let walkfs = std::env::current_exe().map_err(|e| format!("own executable: {e}"))?;
        let res = build::run(&build::BuildOpts {
            quick,
            walkfs,
            only,
            reps,
            slow_us: if quick { 0 } else { slow_us },
            baseline,
        })?;
        if json {
            for r in &res.rows {
                println!("{}", serde_json::to_string(r).map_err(|e| e.to_string())?);
            }
        } else {
            print!("{}", build::render(&res));
        }
        if let Some(path) = plot {
            build::plot(&res, &path)?;
            eprintln!("walkfs: plot written to {path}");
        }
        Ok(())
    }
}
