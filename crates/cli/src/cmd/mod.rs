//! The subcommands, one module each (stat, ls and readlink share
//! `inspect`): each holds its clap arguments, whose doc comments are its
//! help, and a `run` that carries it out.

pub mod bench;
mod fsmonitor;
mod inspect;
pub mod mount;
mod ninep;
mod serve;
mod stats;
mod sync;
mod watch;

pub use fsmonitor::Fsmonitor;
pub use inspect::{Ls, Readlink, Stat};
pub use mount::Mount;
pub use ninep::NineP;
pub use serve::Serve;
pub use stats::Stats;
pub use sync::Sync;
pub use watch::Watch;
