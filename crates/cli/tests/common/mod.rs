//! Helpers shared by the CLI's test files: the `walkfs` executable, a
//! served directory, mounts that clean up after themselves.
#![allow(dead_code)]

pub mod xattr;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub fn walkfs() -> Command {
    Command::new(env!("CARGO_BIN_EXE_walkfs"))
}

pub fn mounted(mnt: &Path) -> bool {
    let m = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    let p = mnt.to_str().expect("utf8");
    m.lines().any(|l| l.split(' ').nth(1) == Some(p))
}

/// The pids of processes running `walkfs mount` on `mnt`.
pub fn mount_pids(mnt: &Path) -> Vec<u32> {
    let needle = mnt.to_str().expect("utf8");
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            let c = std::fs::read(e.path().join("cmdline")).ok()?;
            let s = String::from_utf8_lossy(&c).replace('\0', " ");
            (s.contains(" mount ") && s.contains(needle)).then_some(pid)
        })
        .collect()
}

/// Processes still running `walkfs mount` on `mnt`.
pub fn mount_processes(mnt: &Path) -> usize {
    mount_pids(mnt).len()
}

pub fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(t0.elapsed() < Duration::from_secs(10), "timed out: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A background `walkfs mount` of `src` on `mnt`, unmounted (and checked
/// gone) when dropped.
pub struct Mount {
    pub mnt: PathBuf,
}

impl Mount {
    /// The default mount: a local directory's vfs over the directory.
    pub fn new(src: &Path, mnt: &Path, opts: &str) -> Mount {
        Mount::with_args(src, mnt, opts, &[])
    }

    /// A local directory through the whole stack (`--via-9p`: the 9P
    /// client and an in-process server).
    #[allow(dead_code)]
    pub fn via_9p(src: &Path, mnt: &Path, opts: &str) -> Mount {
        Mount::with_args(src, mnt, opts, &["--via-9p"])
    }

    fn with_args(src: &Path, mnt: &Path, opts: &str, extra: &[&str]) -> Mount {
        Mount::with_env(src, mnt, opts, extra, &[])
    }

    /// A mount whose daemon runs with `env` set (`--via-9p` in `extra`
    /// for the whole stack).
    pub fn with_env(
        src: &Path,
        mnt: &Path,
        opts: &str,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Mount {
        let o = walkfs()
            .envs(env.iter().copied())
            .arg("mount")
            .arg(src)
            .arg(mnt)
            .args(["-o", opts])
            .args(extra)
            .output()
            .expect("run walkfs mount");
        assert!(
            o.status.success(),
            "mount: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(
            mounted(mnt),
            "walkfs mount returned before the mount was up"
        );
        Mount {
            mnt: mnt.to_path_buf(),
        }
    }
}

impl Drop for Mount {
    /// Unmount; a mount still busy a moment (a replay in flight, a
    /// program's last close) is tried again, then detached (`umount -l`),
    /// so that no daemon outlives its test holding what the test run held.
    fn drop(&mut self) {
        for _ in 0..20 {
            if !mounted(&self.mnt) {
                return;
            }
            let _ = Command::new("umount").arg(&self.mnt).status();
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        if mounted(&self.mnt) {
            let _ = Command::new("umount").arg("-l").arg(&self.mnt).status();
        }
    }
}

/// The lines `child` prints on its piped stdout, read on a thread.
pub fn lines(child: &mut Child) -> std::sync::mpsc::Receiver<String> {
    use std::io::BufRead;
    let out = child.stdout.take().expect("piped stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for l in std::io::BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(l).is_err() {
                return;
            }
        }
    });
    rx
}

pub fn run(cmd: &mut Command) -> Output {
    let o = cmd.output().expect("run");
    assert!(
        o.status.success(),
        "{cmd:?}: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

/// A child process killed (and reaped) when dropped.
pub struct Kill(pub Child);
impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A `walkfs serve` process of `dir` on unix socket `sock`, up and
/// listening.
pub fn serve(dir: &Path, sock: &Path) -> Kill {
    serve_with(dir, sock, &[])
}

/// [`serve`] with more of `walkfs serve`'s arguments.
pub fn serve_with(dir: &Path, sock: &Path, extra: &[&str]) -> Kill {
    // The server's state beside its socket (not in /var/lib), unless the
    // test names one.
    let mut state = Vec::new();
    if !extra.contains(&"--state-dir") {
        let mut name = sock.file_name().expect("socket name").to_os_string();
        name.push(".state");
        state = vec!["--state-dir".into(), sock.with_file_name(name)];
    }
    let child = walkfs()
        .args(["serve", dir.to_str().expect("utf8"), "--listen"])
        .arg(format!("unix:{}", sock.display()))
        .args(&state)
        .args(extra)
        .stderr(if std::env::var_os("WALKFS_TEST_SERVE_LOG").is_some() {
            Stdio::inherit()
        } else {
            Stdio::null()
        })
        .spawn()
        .expect("start walkfs serve");
    let t0 = Instant::now();
    while std::os::unix::net::UnixStream::connect(sock).is_err() {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "server never listened"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    Kill(child)
}

/// A temporary directory holding an export `src`, a mount point `mnt`
/// and the path of a server's socket `sock`.
#[allow(dead_code)]
pub struct Dirs {
    pub t: tempfile::TempDir,
    pub src: std::path::PathBuf,
    pub mnt: std::path::PathBuf,
    pub sock: std::path::PathBuf,
}

#[allow(dead_code)]
pub fn dirs() -> Dirs {
    dirs_of(tempfile::tempdir().expect("tempdir"))
}

/// [`dirs`] in the temporary directory `t`.
pub fn dirs_of(t: tempfile::TempDir) -> Dirs {
    let (src, mnt, sock) = (
        t.path().join("src"),
        t.path().join("mnt"),
        t.path().join("s.sock"),
    );
    std::fs::create_dir(&src).expect("mkdir");
    std::fs::create_dir(&mnt).expect("mkdir");
    Dirs { t, src, mnt, sock }
}

/// Run python program `script` with `args`: what it printed (it must
/// succeed).
#[allow(dead_code)]
pub fn python(script: &str, args: &[&Path]) -> String {
    let o = Command::new("python3")
        .args(["-c", script])
        .args(args)
        .output()
        .expect("python3");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// What python program `script` prints run in a fresh host directory
/// beside `d`'s (the answers a mount must give): it must contain `must`,
/// which shows the host did what the test is about.
#[allow(dead_code)]
pub fn on_host(d: &Dirs, script: &str, must: &str) -> String {
    let host = d.t.path().join("host");
    std::fs::create_dir(&host).expect("mkdir");
    let want = python(script, &[&host]);
    assert!(want.contains(must), "the host's own answers: {want}");
    want
}
