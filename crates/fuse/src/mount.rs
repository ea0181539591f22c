//! Mounting: the source to a vfs (a 9P address, or a local directory
//! served in-process over a socketpair so the whole stack runs), the FUSE
//! session, and a clean unmount on SIGINT/SIGTERM/SIGHUP or when someone
//! runs `umount`/`fusermount3 -u`.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use walkfs_fusewire::{Config, Filesystem, Session};
use walkfs_source::Source;
use walkfs_vfs::Vfs;

use walkfs_fusewire::kmount;

use crate::replay::{Replayer, Replaying};
use crate::{coherent, passthrough, MountOptions, WalkFuse};

/// The vfs for `source`: a 9P server's export through the 9P client, or
/// a local directory (or `mem:`) itself. With `via_9p` a local directory
/// is instead exported by a `walkfs serve` in this process over one end
/// of a socketpair, the 9P client taking the other end: the whole stack,
/// for tests and comparisons.
pub fn open_source(source: &str, opts: &MountOptions, via_9p: bool) -> Result<Vfs, String> {
    // Replayed changes must not be lost on the way (replay.rs): a local
    // source's fanotify queue has no limit.
    let mut src = opts.source.clone();
    if Replaying::wanted(opts) {
        src.backend.watch_queue_unlimited = true;
    }
    let open = || walkfs_source::open(source, &src).map_err(|e| format!("{source}: {e}"));
    let kind = Source::parse(source);
    if !via_9p || matches!(kind, Ok(Source::P9(_))) {
        return open();
    }
    match kind {
        Ok(Source::Mem) => {}
        Ok(Source::Host(dir)) if dir.is_dir() => {}
        Ok(Source::Ceph(_)) => {}
        _ => {
            return Err(format!(
                "{source}: not a directory, mem:, ceph:[/DIR], unix:PATH, tcp:HOST:PORT or vsock:CID:PORT"
            ))
        }
    }
    // The server's own options are its business (see serve_in_process);
    // it refuses changes if the mount does.
    let cfg = walkfs_source::ServerConfig {
        read_only: opts.read_only,
        ..Default::default()
    };
    let stream = walkfs_source::serve_in_process(source, &opts.source, cfg)
        .map_err(|e| format!("{source}: {e}"))?;
    walkfs_source::open_9p(stream, &opts.source).map_err(|e| format!("attach to {source}: {e}"))
}

/// A mounted walkfs: dropping it does not unmount; call [`Mounted::wait`].
pub struct Mounted {
    mountpoint: std::path::PathBuf,
    thread: std::thread::JoinHandle<std::io::Result<()>>,
    /// Set by the session's thread when the kernel ended the session
    /// (someone else unmounted).
    ended: Arc<AtomicBool>,
    pub stats: Arc<crate::FuseCounters>,
}

/// Mount `vfs` on `mountpoint`; the session runs on its own threads.
/// `on_end` runs on the session's thread when it ends (someone
/// unmounted).
pub fn mount(
    vfs: Vfs,
    source: &str,
    mountpoint: &Path,
    opts: MountOptions,
    on_end: impl FnOnce() + Send + 'static,
) -> Result<Mounted, String> {
    let cfg = Config {
        threads: opts.threads,
        transport: opts.transport,
        ..Config::default()
    };
    let spec = kmount::Spec {
        fsname: source,
        read_only: opts.read_only,
        default_permissions: opts.default_permissions,
        allow_other: opts.allow_other,
        flags: opts.kernel_flags,
    };
    let replays = Replaying::wanted(&opts);
    let fs = WalkFuse::new(vfs, opts).map_err(|e| format!("root of the source: {e}"))?;
    let wiring = Wiring {
        stats: Arc::clone(&fs.counters),
        kernel_cache: fs.kernel_cache(),
        backings: Arc::clone(&fs.pt),
    };
    if !replays {
        return serve(fs, None, wiring, mountpoint, &spec, cfg, on_end);
    }
    // After the kernel's caches (kernel_cache above): the replay's
    // change listener comes second.
    let fs = Replaying::new(fs).map_err(|e| format!("root of the source: {e}"))?;
    let replayer = fs.replayer();
    serve(fs, Some(replayer), wiring, mountpoint, &spec, cfg, on_end)
}

/// What the mount hands the session once it exists.
struct Wiring {
    stats: Arc<crate::FuseCounters>,
    kernel_cache: Option<Arc<coherent::KernelCache>>,
    backings: Arc<passthrough::Backings>,
}

/// Mount and serve `fs` (the front end, or the front end inside the
/// replay: one or the other, chosen once, so no request goes through a
/// dynamic call), starting `replayer` once mounted.
fn serve<F: Filesystem>(
    fs: F,
    replayer: Option<Arc<Replayer>>,
    w: Wiring,
    mountpoint: &Path,
    spec: &kmount::Spec,
    cfg: Config,
    on_end: impl FnOnce() + Send + 'static,
) -> Result<Mounted, String> {
    let fd = kmount::mount(mountpoint, spec)?;
    let session = match Session::new(fs, fd, cfg) {
        Ok(s) => s,
        Err(e) => {
            let _ = kmount::unmount(mountpoint);
            return Err(format!("mount on {}: {e}", mountpoint.display()));
        }
    };
    w.stats.set_session(session.info());
    w.backings.set_kernel(session.backing());
    if let Some(kc) = w.kernel_cache {
        let _ = kc.notifier.set(session.notifier());
    }
    if let Some(r) = replayer {
        r.start(mountpoint.to_path_buf(), session.notifier());
    }
    let ended = Arc::new(AtomicBool::new(false));
    let ended2 = Arc::clone(&ended);
    let thread = std::thread::Builder::new()
        .name("fuse-session".into())
        .spawn(move || {
            let r = session.run();
            ended2.store(true, Ordering::SeqCst);
            on_end();
            r
        })
        .map_err(|e| format!("session thread: {e}"))?;
    Ok(Mounted {
        mountpoint: mountpoint.to_path_buf(),
        thread,
        ended,
        stats: w.stats,
    })
}

impl Mounted {
    /// Unmount (if still mounted) and wait for the session to end. After
    /// someone else unmounted, the path is left alone: something else may
    /// be mounted there by now.
    pub fn unmount(self) -> Result<(), String> {
        let r = if self.ended.load(Ordering::SeqCst) {
            Ok(())
        } else {
            kmount::unmount(&self.mountpoint)
        };
        if r.is_err() && !self.ended.load(Ordering::SeqCst) {
            // Still mounted (busy): the session goes on; say why.
            return r;
        }
        let j = self.thread.join();
        match j {
            Ok(Ok(())) => Ok(()),
            // A worker reading /dev/fuse as the unmount tears the
            // connection down sees it aborted: the session ended as asked.
            Ok(Err(e)) if e.raw_os_error() == Some(libc::ECONNABORTED) => Ok(()),
            Ok(Err(e)) => Err(format!("session: {e}")),
            Err(_) => Err("session thread panicked".into()),
        }
    }

    pub fn is_finished(&self) -> bool {
        self.thread.is_finished()
    }
}

/// Block SIGINT, SIGTERM and SIGHUP in this thread (and every thread it
/// starts afterwards), so [`wait_for_signal`] receives them. Call before
/// starting any thread.
pub fn block_signals() {
    // SAFETY: a sigset built with the libc calls and passed by pointer.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            libc::sigaddset(&mut set, s);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
}

/// Wait for SIGINT, SIGTERM or SIGHUP (blocked by [`block_signals`]).
pub fn wait_for_signal() -> i32 {
    // SAFETY: as above; sigwait writes the signal number into `sig`.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            libc::sigaddset(&mut set, s);
        }
        let mut sig = 0;
        libc::sigwait(&set, &mut sig);
        sig
    }
}

/// Wake [`wait_for_signal`] in this process (the session ended by itself).
pub fn wake_waiter() {
    // SAFETY: kill of our own pid with a signal every thread blocks.
    unsafe {
        libc::kill(libc::getpid(), libc::SIGTERM);
    }
}

/// `mount -o remount,...`: change the flags of the mount on `mp` to what
/// `opts` say (read-only or not, the generic flags); its daemon serves
/// on.
pub fn remount(mp: &Path, opts: &MountOptions) -> Result<(), String> {
    walkfs_fusewire::kmount::remount(mp, opts.kernel_flags, opts.read_only)
}
