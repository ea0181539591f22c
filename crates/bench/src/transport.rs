//! `walkfs bench fuse-transport`: the cost of a FUSE request by
//! transport, on one synthetic tree (crates/fusewire/src/proto.rs) with
//! zero timeouts, so every `stat(2)` is a LOOKUP and a GETATTR:
//! - `fuser`: fuser 0.18's session (what `walkfs mount` runs on), its
//!   threads reading cloned `/dev/fuse` descriptors;
//! - `dev`: the wire spoken directly, threads reading `/dev/fuse`;
//! - `uring`: FUSE over io_uring, a ring per CPU (kernel 6.14+, with
//!   `echo Y > /sys/module/fuse/parameters/enable_uring`; skipped with a
//!   message otherwise).
//!
//! The client is one thread; each row is the median of the repetitions,
//! transports interleaved. A second workload lists the 1,000-file root
//! (READDIRPLUS pages).

use std::ffi::OsStr;
use std::path::Path;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant, UNIX_EPOCH};

use serde::Serialize;
use walkfs_fusewire::{kmount, proto};

use crate::report::{median_of, progress_done, table, Steps};

/// Files in the synthetic root.
const FILES: u64 = 1000;
use walkfs_fusewire::session::{uring_enabled, SessionInfo, URING_PARAM};

#[derive(Debug, Serialize, Clone)]
pub struct Row {
    pub bench: &'static str,
    pub transport: String,
    pub workload: &'static str,
    /// Microseconds per operation of the client (a stat, a listing).
    pub us_per_op: f64,
    /// Microseconds per FUSE request the server answered.
    pub us_per_request: f64,
    pub requests_per_op: f64,
    /// Requests that came through io_uring (0 for the others).
    pub via_uring: u64,
    pub reps: usize,
}

pub struct TransportOpts {
    pub reps: usize,
    pub stats: usize,
    pub threads: usize,
}

/// fuser over the same tree.
struct FuserTree(Arc<proto::Tree>);

fn fuser_attr(a: &walkfs_fusewire::abi::Attr) -> fuser::FileAttr {
    fuser::FileAttr {
        ino: fuser::INodeNo(a.ino),
        size: a.size,
        blocks: a.blocks,
        atime: UNIX_EPOCH,
        mtime: UNIX_EPOCH,
        ctime: UNIX_EPOCH,
        crtime: UNIX_EPOCH,
        kind: if a.mode & libc::S_IFMT == libc::S_IFDIR {
            fuser::FileType::Directory
        } else {
            fuser::FileType::RegularFile
        },
        perm: (a.mode & 0o7777) as u16,
        nlink: a.nlink,
        uid: 0,
        gid: 0,
        rdev: 0,
        blksize: a.blksize,
        flags: 0,
    }
}

impl fuser::Filesystem for FuserTree {
    fn init(
        &mut self,
        _r: &fuser::Request,
        config: &mut fuser::KernelConfig,
    ) -> std::io::Result<()> {
        let want = fuser::InitFlags::FUSE_DO_READDIRPLUS
            | fuser::InitFlags::FUSE_READDIRPLUS_AUTO
            | fuser::InitFlags::FUSE_PARALLEL_DIROPS;
        let _ = config.add_capabilities(want);
        Ok(())
    }

    fn lookup(
        &self,
        _r: &fuser::Request,
        parent: fuser::INodeNo,
        name: &OsStr,
        reply: fuser::ReplyEntry,
    ) {
        use std::os::unix::ffi::OsStrExt;
        self.0.counts.requests.fetch_add(1, Relaxed);
        let a = (parent.0 == proto::ROOT)
            .then(|| self.0.find(name.as_bytes()))
            .flatten()
            .and_then(|n| self.0.attr(n));
        match a {
            Some(a) => reply.entry(&Duration::ZERO, &fuser_attr(&a), fuser::Generation(0)),
            None => reply.error(fuser::Errno::ENOENT),
        }
    }

    fn getattr(
        &self,
        _r: &fuser::Request,
        ino: fuser::INodeNo,
        _fh: Option<fuser::FileHandle>,
        reply: fuser::ReplyAttr,
    ) {
        self.0.counts.requests.fetch_add(1, Relaxed);
        match self.0.attr(ino.0) {
            Some(a) => reply.attr(&Duration::ZERO, &fuser_attr(&a)),
            None => reply.error(fuser::Errno::ENOENT),
        }
    }

    fn opendir(
        &self,
        _r: &fuser::Request,
        _ino: fuser::INodeNo,
        _f: fuser::OpenFlags,
        reply: fuser::ReplyOpen,
    ) {
        self.0.counts.requests.fetch_add(1, Relaxed);
        reply.error(fuser::Errno::ENOSYS)
    }

    fn readdir(
        &self,
        _r: &fuser::Request,
        ino: fuser::INodeNo,
        _fh: fuser::FileHandle,
        offset: u64,
        mut reply: fuser::ReplyDirectory,
    ) {
        self.0.counts.requests.fetch_add(1, Relaxed);
        if ino.0 != proto::ROOT {
            return reply.error(fuser::Errno::ENOTDIR);
        }
        for i in offset.. {
            let Some((name, node)) = self.0.entry_at(i) else {
                break;
            };
            let Some(a) = self.0.attr(node) else { break };
            if reply.add(fuser::INodeNo(node), i + 1, fuser_attr(&a).kind, &name) {
                break;
            }
        }
        reply.ok()
    }

    fn readdirplus(
        &self,
        _r: &fuser::Request,
        ino: fuser::INodeNo,
        _fh: fuser::FileHandle,
        offset: u64,
        mut reply: fuser::ReplyDirectoryPlus,
    ) {
        self.0.counts.requests.fetch_add(1, Relaxed);
        if ino.0 != proto::ROOT {
            return reply.error(fuser::Errno::ENOTDIR);
        }
        for i in offset.. {
            let Some((name, node)) = self.0.entry_at(i) else {
                break;
            };
            let Some(a) = self.0.attr(node) else { break };
            if reply.add(
                fuser::INodeNo(node),
                i + 1,
                &name,
                &Duration::ZERO,
                &fuser_attr(&a),
                fuser::Generation(0),
            ) {
                break;
            }
        }
        reply.ok()
    }
}

/// A mounted prototype: unmounted on drop.
struct Mounted {
    mnt: std::path::PathBuf,
    tree: Arc<proto::Tree>,
    /// The session's counters (not for fuser's).
    info: Option<Arc<SessionInfo>>,
}

impl Mounted {
    fn via_uring(&self) -> u64 {
        self.info
            .as_ref()
            .map_or(0, |i| i.uring_requests.load(Relaxed))
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = kmount::unmount(&self.mnt);
    }
}

fn mount(transport: &str, mnt: &Path, threads: usize) -> Result<Mounted, String> {
    let uring = transport == "uring";
    let tree = proto::Tree::new(FILES, false);
    let mut info = None;
    let spec = kmount::Spec {
        fsname: "walkfs-proto",
        read_only: true,
        default_permissions: true,
        allow_other: false,
        flags: libc::MS_NOSUID | libc::MS_NODEV,
    };
    let fd = kmount::mount(mnt, &spec)?;
    match transport {
        "fuser" => {
            let mut cfg = fuser::Config::default();
            cfg.n_threads = Some(threads);
            cfg.clone_fd = true;
            let s = fuser::Session::from_fd(
                FuserTree(Arc::clone(&tree)),
                fd,
                fuser::SessionACL::Owner,
                cfg,
            )
            .map_err(|e| format!("fuser session: {e}"))?;
            std::thread::spawn(move || {
                let _ = s.run();
            });
        }
        _ => {
            // With a ring, /dev/fuse carries INIT, forgets and interrupts.
            let cfg = walkfs_fusewire::Config {
                threads,
                transport: if uring {
                    walkfs_fusewire::Transport::Uring
                } else {
                    walkfs_fusewire::Transport::Dev
                },
                ..Default::default()
            };
            info = Some(proto::serve(&tree, fd, cfg)?);
        }
    }
    let m = Mounted {
        mnt: mnt.to_path_buf(),
        tree,
        info,
    };
    // The first request waits for INIT; with a ring, let it come up.
    std::fs::metadata(mnt.join("f0")).map_err(|e| format!("{transport}: first stat: {e}"))?;
    if uring {
        let t = Instant::now();
        while m.via_uring() == 0 && t.elapsed() < Duration::from_secs(2) {
            let _ = std::fs::metadata(mnt.join("f1"));
        }
    }
    Ok(m)
}

/// One run's figures: µs per op, µs per request, requests per op,
/// requests via io_uring.
type Sample = (f64, f64, f64, u64);

/// One run of `workload` on a fresh mount: (µs per op, µs per request,
/// requests per op, requests via io_uring).
fn one(
    transport: &str,
    workload: &str,
    opts: &TransportOpts,
    dir: &Path,
) -> Result<Sample, String> {
    let mnt = dir.join(format!("mnt-{transport}"));
    std::fs::create_dir_all(&mnt).map_err(|e| e.to_string())?;
    let m = mount(transport, &mnt, opts.threads)?;
    let c = &m.tree.counts;
    let (req0, ring0) = (c.requests.load(Relaxed), m.via_uring());
    let t = Instant::now();
    let ops = match workload {
        "stat" => {
            for i in 0..opts.stats {
                std::fs::symlink_metadata(mnt.join(format!("f{}", i as u64 % FILES)))
                    .map_err(|e| e.to_string())?;
            }
            opts.stats
        }
        _ => {
            let n = (opts.stats / 100).max(10);
            for _ in 0..n {
                let k = std::fs::read_dir(&mnt).map_err(|e| e.to_string())?.count();
                if k as u64 != FILES {
                    return Err(format!("{transport}: listed {k} of {FILES}"));
                }
            }
            n
        }
    };
    let secs = t.elapsed().as_secs_f64();
    let reqs = c.requests.load(Relaxed) - req0;
    let ring = m.via_uring() - ring0;
    drop(m);
    Ok((
        secs * 1e6 / ops as f64,
        secs * 1e6 / reqs.max(1) as f64,
        reqs as f64 / ops as f64,
        ring,
    ))
}

pub fn run(opts: &TransportOpts) -> Result<Vec<Row>, String> {
    let mut transports = vec!["fuser", "dev"];
    if uring_enabled() {
        transports.push("uring");
    } else {
        eprintln!("walkfs: fuse-transport: FUSE over io_uring skipped ({URING_PARAM} is not Y; as root: echo Y > {URING_PARAM})");
    }
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let mut samples: std::collections::BTreeMap<(&str, &str), Vec<Sample>> = Default::default();
    let mut steps = Steps::new("fuse-transport", opts.reps * transports.len() * 2);
    for _ in 0..opts.reps {
        for w in ["stat", "readdir"] {
            for t in &transports {
                steps.next(&format!("{t} {w}"));
                let s = one(t, w, opts, dir.path())?;
                samples.entry((t, w)).or_default().push(s);
            }
        }
    }
    progress_done();
    let mut rows = Vec::new();
    for ((t, w), v) in samples {
        let pick = |f: fn(&Sample) -> f64| median_of(&v, f);
        rows.push(Row {
            bench: "fuse-transport",
            transport: t.to_string(),
            workload: if w == "stat" { "stat" } else { "readdir" },
            us_per_op: pick(|s| s.0),
            us_per_request: pick(|s| s.1),
            requests_per_op: pick(|s| s.2),
            via_uring: v.iter().map(|s| s.3).max().unwrap_or(0),
            reps: v.len(),
        });
    }
    Ok(rows)
}

pub fn render(rows: &[Row]) -> String {
    let t: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.workload.to_string(),
                r.transport.clone(),
                format!("{:.2}", r.us_per_op),
                format!("{:.2}", r.us_per_request),
                format!("{:.2}", r.requests_per_op),
                r.via_uring.to_string(),
            ]
        })
        .collect();
    table(
        &[
            "workload",
            "transport",
            "us/op",
            "us/request",
            "requests/op",
            "via io_uring",
        ],
        &t,
    )
}
