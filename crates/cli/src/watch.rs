//! `walkfs watch DIR`: the change stream of a source, as JSON lines.
//!
//! The source is opened with `cache=coherent`, so its backend reports
//! every change made behind the vfs's back (hostfs: fanotify or inotify on
//! the host; a 9P source: the server's notifications). A backend watches
//! the directories the cache holds, so the whole tree is walked first,
//! and each directory created later is walked when its creation is
//! reported (what `inotifywait -r` does: what is made inside it before
//! the walk reaches it is found by the walk, not reported).
//!
//! Every line is printed from the backend's reporting thread, in the
//! order the backend saw the changes; a lost queue prints one
//! `"overflow"` line, never a silent gap.

use std::io::Write;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use walkfs_source::SourceOptions;
use walkfs_vfs::{Change, ChangeSink, Creds, Ctx, How, Vfs, What, AT_FDCWD};

/// Directories deeper than this are not walked (a loop of bind mounts
/// cannot hold the walk for ever).
const MAX_DEPTH: usize = 256;

/// One change under the followed directory.
pub enum Event<'a> {
    /// `path` (relative to the directory, "" for itself) changed as `how` says.
    Path { path: &'a str, how: How },
    /// Changes were lost (a queue overflowed): rescan.
    Overflow,
}

/// Follow `dir`'s changes: `each` is called for every one, in the order
/// the backend saw them, on its reporting thread. Returns once the whole
/// tree is watched (what changes after that is reported); the returned
/// vfs must be kept for as long as the changes are wanted.
pub fn follow(
    dir: &str,
    options: &str,
    each: impl Fn(Event<'_>) + Send + Sync + 'static,
) -> Result<Vfs, String> {
    let options = if options.is_empty() {
        "cache=coherent".to_string()
    } else {
        format!("{options},cache=coherent")
    };
    let opts =
        SourceOptions::parse(&options).map_err(|e| format!("bad options {options:?}: {e}"))?;
    let vfs = walkfs_source::open(dir, &opts).map_err(|e| format!("cannot open {dir}: {e}"))?;
    if !vfs.is_coherent() {
        return Err(format!(
            "{dir} cannot report its changes (a server without walkfs notifications, \
             or the host's watch limit): nothing to watch"
        ));
    }
    let ctx = vfs.context(Creds::current());
    vfs.add_change_listener(Arc::new(Follower {
        vfs: vfs.clone(),
        ctx: vfs.context(Creds::current()),
        each,
    }));
    walk(&ctx, b"/", 0);
    Ok(vfs)
}

pub fn run(dir: &str, options: &str) -> Result<(), String> {
    let _vfs = follow(dir, options, |e| {
        let time = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        let line = match e {
            Event::Path { path, how } => serde_json::json!({
                "path": path,
                "kind": how.what.name(),
                "dir": how.is_dir,
                "cookie": how.cookie,
                "time": time,
            }),
            Event::Overflow => serde_json::json!({"path": "", "kind": "overflow", "time": time}),
        };
        // A closed stdout (the reader went) ends the watch.
        let mut out = std::io::stdout().lock();
        if writeln!(out, "{line}").and_then(|()| out.flush()).is_err() {
            std::process::exit(0);
        }
    })?;
    // Ready: a script may start changing things once it reads this.
    eprintln!("walkfs watch: watching {dir}");
    loop {
        std::thread::park();
    }
}

/// Look up every directory under `path` (the backend then watches it).
fn walk(ctx: &Ctx, path: &[u8], depth: usize) {
    if depth > MAX_DEPTH {
        return;
    }
    let Ok(fd) = ctx.openat(AT_FDCWD, path, libc::O_RDONLY | libc::O_DIRECTORY, 0) else {
        return;
    };
    let entries = ctx.getdents(fd).unwrap_or_default();
    let _ = ctx.close(fd);
    for e in entries {
        if e.name == b"." || e.name == b".." || e.kind != walkfs_vfs::FileType::Directory {
            continue;
        }
        let mut sub = path.to_vec();
        if sub.last() != Some(&b'/') {
            sub.push(b'/');
        }
        sub.extend_from_slice(&e.name);
        walk(ctx, &sub, depth + 1);
    }
}

struct Follower<F> {
    vfs: Vfs,
    ctx: Ctx,
    each: F,
}

impl<F> Follower<F> {
    /// `dir`'s path and `name` joined, relative to the watched directory.
    fn join(&self, dir: u64, name: &[u8]) -> Option<String> {
        // Superblock 0: the source's own (nothing is mounted under it).
        let d = self.vfs.dir_path(0, dir)?;
        let d = d.trim_start_matches('/');
        let name = String::from_utf8_lossy(name);
        Some(if d.is_empty() {
            name.into_owned()
        } else if name.is_empty() {
            d.to_string()
        } else {
            format!("{d}/{name}")
        })
    }
}

impl<F: Fn(Event<'_>) + Send + Sync> ChangeSink for Follower<F> {
    fn changed(&self, changes: &[Change]) {
        for c in changes {
            match c {
                Change::Entry { dir, name, how, .. } => {
                    let Some(path) = self.join(dir.0, name) else {
                        continue;
                    };
                    if how.is_dir && matches!(how.what, What::Created | What::MovedTo) {
                        walk(&self.ctx, format!("/{path}").as_bytes(), 0);
                    }
                    (self.each)(Event::Path {
                        path: &path,
                        how: *how,
                    });
                }
                Change::Inode { node, how, at, .. } => {
                    let path = match at {
                        Some(s) => self.join(s.dir.0, &s.name),
                        None => self.join(node.0, b""),
                    };
                    let Some(path) = path else { continue };
                    (self.each)(Event::Path {
                        path: &path,
                        how: *how,
                    });
                }
                Change::All | Change::Degraded => (self.each)(Event::Overflow),
            }
        }
    }
}
