//! `walkfs 9p`: one operation over 9P2000.L, to check a server.

use walkfs_vfs::AT_FDCWD;

use super::inspect::{open, print_ls, print_readlink, print_stat};

/// Talk 9P2000.L to a server (walkfs serve, diod, ...) and show one
/// thing: a check that an export answers as it should. Every call goes
/// to the server (cache=none); --stats prints the RPCs it took.
#[derive(clap::Args)]
pub struct NineP {
    /// The server: unix:PATH, tcp:HOST:PORT or vsock:CID:PORT.
    addr: String,
    #[arg(value_enum)]
    op: NineOp,
    /// A path inside the export.
    #[arg(default_value = "/")]
    path: String,
    /// The export to attach to (diod wants the exported path).
    #[arg(long, default_value = "")]
    aname: String,
    #[arg(long, default_value_t = 65536)]
    msize: u32,
    /// Print the RPC counters to stderr afterwards.
    #[arg(long)]
    stats: bool,
}

impl NineP {
    pub fn run(self) -> Result<(), String> {
        let NineP {
            addr,
            op,
            path,
            aname,
            msize,
            stats,
        } = self;
        let ctx = open(&addr, &format!("cache=none,msize={msize},aname={aname}"))?;
        let r = match op {
            NineOp::Ls => print_ls(&ctx, &path),
            NineOp::Stat => print_stat(&ctx, &path, true),
            NineOp::Cat => print_cat(&ctx, &path),
            NineOp::Readlink => print_readlink(&ctx, &path),
        };
        if stats {
            if let Some(s) = ctx.vfs().rpc_stats() {
                eprintln!(
                    "rpcs {} ({}) bytes out {} in {} waited {:.3} ms",
                    s.total_rpcs,
                    s.rpcs
                        .iter()
                        .map(|(n, c)| format!("{n} {c}"))
                        .collect::<Vec<_>>()
                        .join(", "),
                    s.bytes_sent,
                    s.bytes_received,
                    s.wait_ns as f64 / 1e6
                );
            }
        }
        r
    }
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum NineOp {
    /// List a directory.
    Ls,
    /// Attributes (lstat).
    Stat,
    /// A file's contents to stdout.
    Cat,
    /// A symlink's target.
    Readlink,
}

fn print_cat(ctx: &walkfs_vfs::Ctx, path: &str) -> Result<(), String> {
    use std::io::Write;
    let fd = ctx
        .openat(AT_FDCWD, path.as_bytes(), libc::O_RDONLY, 0)
        .map_err(|e| format!("{path}: {e}"))?;
    let mut buf = vec![0u8; 1 << 16];
    let mut out = std::io::stdout().lock();
    loop {
        let n = ctx.read(fd, &mut buf).map_err(|e| format!("{path}: {e}"))?;
        if n == 0 {
            break;
        }
        out.write_all(&buf[..n]).map_err(|e| e.to_string())?;
    }
    Ok(())
}
