//! `walkfs fsmonitor`: git's core.fsmonitor hook, its daemon, and
//! `--stop` (all in [`crate::fsmonitor`]).

use crate::fsmonitor;

/// git's core.fsmonitor hook (protocol version 2), answered from the
/// change stream: `git config core.fsmonitor "walkfs fsmonitor"` in a
/// work tree (on a walkfs mount, or any host directory), and `git
/// status` stats only what changed since its last run. git runs the
/// hook as `walkfs fsmonitor 2 TOKEN` in the tree's root; the hook asks
/// a daemon that follows the tree (started on the first call, whose
/// answer is "everything changed"; it leaves after an hour unasked,
/// or at --stop) and prints the paths changed since TOKEN. Whenever
/// it cannot be sure (a change queue overflowed, a token of another
/// daemon, a change not yet come through) it answers "everything
/// changed", so git looks at the whole tree, as without it.
#[derive(clap::Args)]
pub struct Fsmonitor {
    /// The protocol version git speaks (2).
    version: Option<String>,
    /// The token of git's last query ("" at first).
    token: Option<String>,
    /// Be the daemon of the current directory's tree (the hook starts
    /// it).
    #[arg(long, conflicts_with = "stop")]
    daemon: bool,
    /// Stop the daemon of the current directory's tree.
    #[arg(long)]
    stop: bool,
}

impl Fsmonitor {
    pub fn run(self) -> Result<(), String> {
        let Fsmonitor {
            version,
            token,
            daemon,
            stop,
        } = self;
        match (daemon, stop, version) {
            (true, _, _) => fsmonitor::daemon::run(),
            (_, true, _) => fsmonitor::stop(),
            (_, _, Some(v)) => fsmonitor::hook(&v, token.as_deref().unwrap_or("")),
            (_, _, None) => Err("fsmonitor: give the protocol version (2) and the token, \
                 as git does, or --stop"
                .to_string()),
        }
    }
}
