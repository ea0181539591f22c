//! walkfs: Linux's path lookup rebuilt as a library and a file service.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod cmd;
mod control;
mod daemon;
mod fsmonitor;
mod watch;

#[derive(Parser)]
#[command(
    name = "walkfs",
    version,
    about = "Linux pathname lookup (namei + dcache) as a library and a file service",
    long_about = "walkfs resolves paths the way Linux does — the same semantics, errnos and \
permission rules — over an in-memory tree or a host directory, with a dentry cache \
whose fast path takes no lock. Each optimization of the Linux lookup patches it \
carries is a switch (fastpath, fastperm, cache_symlinks, negtimeout).\n\n\
SOURCE is a host directory, or mem: for an empty in-memory tree. OPTIONS are \
name=value pairs separated by commas, e.g. negtimeout=-1,fastpath=1.\n\n\
Set RUST_LOG=debug for logs."
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

// The subcommands, in the order `walkfs --help` lists them; each one's
// help is the doc comment of its arguments in cmd/ (a doc comment here
// would be taken for help text too).
#[derive(Subcommand)]
enum Cmd {
    #[command(subcommand)]
    Bench(cmd::bench::Bench),
    Stat(cmd::Stat),
    Ls(cmd::Ls),
    Serve(cmd::Serve),
    #[command(name = "9p")]
    NineP(cmd::NineP),
    Readlink(cmd::Readlink),
    Mount(cmd::Mount),
    Sync(cmd::Sync),
    Watch(cmd::Watch),
    Fsmonitor(cmd::Fsmonitor),
    Stats(cmd::Stats),
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    raise_nofile_limit();
    let cli = Cli::parse_from(cmd::mount::mount_helper_args(std::env::args().collect()));
    match run(cli.cmd) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("walkfs: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Raise the soft limit on open descriptors to the hard limit: the
/// descriptor caches of the layers are bounded well below it (see
/// README, "Limits"), but a server's open files and a mount's kernel
/// handles count too, and the usual soft limit (1024) is small for them.
fn raise_nofile_limit() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid resource and a pointer to
    // a live rlimit.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                tracing::debug!("could not raise RLIMIT_NOFILE");
            }
        }
    }
}

fn run(cmd: Cmd) -> Result<(), String> {
    match cmd {
        Cmd::Bench(c) => c.run(),
        Cmd::Stat(c) => c.run(),
        Cmd::Ls(c) => c.run(),
        Cmd::Serve(c) => c.run(),
        Cmd::NineP(c) => c.run(),
        Cmd::Readlink(c) => c.run(),
        Cmd::Mount(c) => c.run(),
        Cmd::Sync(c) => c.run(),
        Cmd::Watch(c) => c.run(),
        Cmd::Fsmonitor(c) => c.run(),
        Cmd::Stats(c) => c.run(),
    }
}
