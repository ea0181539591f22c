//! The synthetic trees of parts 2 and 3 (empty files, 1,000 to a
//! directory), made once in the cache, and the walks over them: watched
//! for stalls, their failures counted.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::{CACHE, PER_DIR};
use crate::report::progress;

/// An in-process walk that makes no progress for this long has a walkfs
/// process that stopped answering: it is killed so the walk ends.
const STALL: Duration = Duration::from_secs(60);
/// How many problems of a kind are kept as examples.
const KEEP_PROBLEMS: usize = 5;

/// Directories of a synthetic tree of `n` files.
pub fn synth_dirs(n: u64) -> u64 {
    n.div_ceil(PER_DIR)
}

/// The path of file `i` of a synthetic tree, relative to its root.
pub fn synth_rel(i: u64) -> String {
    format!("d{:06}/f{:03}", i / PER_DIR, i % PER_DIR)
}

/// Make `n` empty files under `root`, `PER_DIR` to a directory (existing
/// ones are kept, so an interrupted tree is completed).
pub fn make_tree(root: &Path, n: u64, label: &str) -> Result<(), String> {
    for d in 0..synth_dirs(n) {
        let dir = root.join(format!("d{d:06}"));
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        for i in d * PER_DIR..((d + 1) * PER_DIR).min(n) {
            let p = root.join(synth_rel(i));
            std::fs::File::create(&p).map_err(|e| format!("{}: {e}", p.display()))?;
        }
        if d % 10 == 0 {
            progress(&format!(
                "scale: making {label}: {} / {n} files",
                (d * PER_DIR).min(n)
            ));
        }
    }
    Ok(())
}

/// A synthetic tree of `n` files per subtree in the cache, made once
/// (the marker beside it says it is whole). The seconds it took, if it
/// was made now.
pub(super) fn cached_tree(
    name: &str,
    subtrees: &[String],
    n: u64,
) -> Result<(PathBuf, Option<f64>), String> {
    let root = Path::new(CACHE).join(name);
    let done = Path::new(CACHE).join(format!("{name}.done"));
    if done.is_file() {
        return Ok((root, None));
    }
    let t0 = Instant::now();
    for s in subtrees {
        make_tree(&root.join(s), n, name)?;
    }
    std::fs::write(&done, b"").map_err(|e| format!("{}: {e}", done.display()))?;
    Ok((root, Some(t0.elapsed().as_secs_f64())))
}

/// Run `work` on a thread while this one shows its progress (`done` of
/// `total`) and, when `done` stands still for `STALL`, calls `on_stall`
/// once (which kills whatever the work waits on). Whether it stalled.
pub(super) fn watched<T: Send>(
    label: &str,
    done: &AtomicU64,
    total: u64,
    on_stall: &dyn Fn(),
    work: impl FnOnce() -> T + Send,
) -> Result<(T, bool), String> {
    std::thread::scope(|s| {
        let h = s.spawn(work);
        let (mut seen, mut since) = (u64::MAX, Instant::now());
        let mut stalled = false;
        while !h.is_finished() {
            std::thread::sleep(Duration::from_millis(100));
            let n = done.load(Ordering::Relaxed);
            if n != seen {
                (seen, since) = (n, Instant::now());
            } else if !stalled && since.elapsed() > STALL {
                stalled = true;
                tracing::error!("{label}: no progress for {STALL:?} at {n}/{total}");
                on_stall();
            }
            progress(&format!("scale: {label}: {n} / {total}"));
        }
        let v = h
            .join()
            .map_err(|_| format!("{label}: the worker panicked"))?;
        Ok((v, stalled))
    })
}

/// Failures of a walk: how many, and the first few.
#[derive(Default)]
pub(super) struct Problems {
    pub(super) count: u64,
    pub(super) examples: Vec<String>,
}

impl Problems {
    pub(super) fn add(&mut self, what: impl FnOnce() -> String) {
        self.count += 1;
        if self.examples.len() < KEEP_PROBLEMS {
            self.examples.push(what());
        }
    }
    pub(super) fn merge(&mut self, o: Problems) {
        self.count += o.count;
        for e in o.examples {
            if self.examples.len() < KEEP_PROBLEMS {
                self.examples.push(e);
            }
        }
    }
}

/// lstat every file of the synthetic tree under `root`; `want` is the
/// native (mode, size) of each (empty: a regular file of size 0).
pub(super) fn stat_all(
    root: &Path,
    n: u64,
    want: &[(u32, u64)],
    done: &AtomicU64,
) -> (Vec<(u32, u64)>, Problems) {
    let mut got = Vec::with_capacity(if want.is_empty() { n as usize } else { 0 });
    let mut p = Problems::default();
    for i in 0..n {
        let rel = synth_rel(i);
        match std::fs::symlink_metadata(root.join(&rel)) {
            Ok(m) => {
                let (mode, size) = (m.mode(), m.size());
                match want.get(i as usize) {
                    Some(&(wm, ws)) if (wm, ws) != (mode, size) => {
                        p.add(|| format!("{rel}: mode {mode:o} size {size}, natively {wm:o} {ws}"))
                    }
                    None if !m.file_type().is_file() || size != 0 => {
                        p.add(|| format!("{rel}: mode {mode:o} size {size}"))
                    }
                    _ => {}
                }
                if want.is_empty() {
                    got.push((mode, size));
                }
            }
            Err(e) => p.add(|| format!("{rel}: {e}")),
        }
        done.store(i + 1, Ordering::Relaxed);
    }
    (got, p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn synthetic_tree_is_as_named() {
        assert_eq!(synth_rel(0), "d000000/f000");
        assert_eq!(synth_rel(1999), "d000001/f999");
        assert_eq!(synth_dirs(2500), 3);
        assert_eq!(synth_dirs(3000), 3);
        let tmp = tempfile::tempdir().expect("tempdir");
        make_tree(tmp.path(), 2500, "test").expect("make_tree");
        // Idempotent: a second call completes, it does not fail.
        make_tree(tmp.path(), 2500, "test").expect("make_tree again");
        let mut files = 0;
        let mut dirs = 0;
        for d in std::fs::read_dir(tmp.path()).expect("read_dir").flatten() {
            dirs += 1;
            for f in std::fs::read_dir(d.path()).expect("read_dir").flatten() {
                assert_eq!(f.metadata().expect("stat").len(), 0);
                files += 1;
            }
        }
        assert_eq!((dirs, files), (3, 2500));
        let done = AtomicU64::new(0);
        let (got, p) = stat_all(tmp.path(), 2500, &[], &done);
        assert_eq!((got.len(), p.count), (2500, 0));
        assert_eq!(done.load(Ordering::Relaxed), 2500);
        // Checked against answers that differ, each is a problem.
        let mut want = got.clone();
        want[7].1 = 1;
        let (_, p) = stat_all(tmp.path(), 2500, &want, &done);
        assert_eq!(p.count, 1);
        assert!(p.examples[0].contains("d000000/f007"));
    }
}
