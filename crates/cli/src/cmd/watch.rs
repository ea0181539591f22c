//! `walkfs watch`: the change stream of a directory as JSON lines (the
//! stream itself is [`crate::watch`]).

/// Print the changes made under DIR by anyone (other processes on the
/// host, or other clients of its server) as JSON lines, one per
/// change: {"path", "kind", "dir", "cookie", "time"}. `kind` is
/// inotify's name for it: create, delete, modify, attrib, moved_from
/// and moved_to (a rename's halves share a nonzero `cookie` where the
/// host's inotify pairs them), or changed when the source cannot
/// tell; `time` is when walkfs learned of it (Unix seconds). When
/// changes were lost (a queue overflowed) a line with kind
/// "overflow" says so: rescan. DIR is watched whole, directories made
/// later included (as `inotifywait -r` does); paths are relative to
/// DIR. Runs until killed. For scripts and tools that do not use
/// inotify.
#[derive(clap::Args)]
pub struct Watch {
    /// A host directory (or unix:PATH / tcp:HOST:PORT / vsock:CID:PORT of a walkfs
    /// server, which reports changes without their kind).
    dir: String,
    /// Source options (cache=coherent is implied).
    #[arg(short, long, default_value = "")]
    options: String,
}

impl Watch {
    pub fn run(self) -> Result<(), String> {
        let Watch { dir, options } = self;
        crate::watch::run(&dir, &options)
    }
}
