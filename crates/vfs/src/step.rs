//! Starting a call over, and the one place that decides how.
//!
//! A lock-free step can find that what it stood on moved under it: the
//! directory was renamed, removed or evicted, a slot was reused, a writer
//! was half way through. Such a step cannot repair the walk; the whole
//! call starts again from its path. That signal is [`Step::Restart`], a
//! value of a type private to this crate: no backend can produce it (a
//! backend's errors are [`Errno`]s and arrive as [`Step::Err`]), and it
//! never leaves the crate, because every public call runs its body under
//! [`drive`], the only retry loop.
//!
//! Policy (in [`Backoff`]): spin a little, then yield the CPU, then sleep,
//! and after about a second report `EAGAIN`. A writer's critical section
//! is a few stores, but a loaded machine can preempt it inside one, and a
//! reader that only spins would burn its time slice; a writer stuck for a
//! second is a bug, and an error then beats a hang. Restarts are counted
//! (`walkfs stats`, the `retries` column of the benchmarks): under a busy
//! parallel build they must stay rare.

use std::time::Duration;

use walkfs_fsapi::Errno;

use crate::counters::Counter;

/// Why a step did not produce its value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// What the call stood on changed under it: run it again.
    Restart,
    /// The call's answer is this error.
    Err(Errno),
}

impl From<Errno> for Step {
    #[inline(always)]
    fn from(e: Errno) -> Step {
        Step::Err(e)
    }
}

/// The result of a step that may have to start over.
pub(crate) type Res<T> = std::result::Result<T, Step>;

/// Run `body` until it stops asking to start over, waiting as [`Backoff`]
/// says between attempts; `EAGAIN` once it has asked for about a second.
#[inline(always)]
pub(crate) fn drive<T>(retries: &Counter, mut body: impl FnMut() -> Res<T>) -> Result<T, Errno> {
    match body() {
        Ok(t) => Ok(t),
        Err(Step::Err(e)) => Err(e),
        Err(Step::Restart) => drive_slow(retries, body),
    }
}

#[inline(never)]
fn drive_slow<T>(retries: &Counter, mut body: impl FnMut() -> Res<T>) -> Result<T, Errno> {
    let mut b = Backoff::new();
    loop {
        retries.inc();
        if !b.snooze() {
            return Err(Errno::EAGAIN);
        }
        match body() {
            Ok(t) => return Ok(t),
            Err(Step::Err(e)) => return Err(e),
            Err(Step::Restart) => {}
        }
    }
}

/// Waiting out a writer between attempts.
pub(crate) struct Backoff(u32);

/// Attempts before yielding, before sleeping, and in all.
const SPINS: u32 = 16;
const YIELDS: u32 = 64;
const LIMIT: u32 = YIELDS + 10_000;
const NAP: Duration = Duration::from_micros(100);

impl Backoff {
    pub fn new() -> Backoff {
        Backoff(0)
    }

    /// Wait before the next attempt; `false` once it is time to give up.
    pub fn snooze(&mut self) -> bool {
        self.0 += 1;
        // The model checker explores every interleaving of a bounded run:
        // let the other threads go, and give up soon.
        #[cfg(loom)]
        {
            loom::thread::yield_now();
            return self.0 <= 3;
        }
        #[cfg(not(loom))]
        self.wait()
    }

    #[cfg(not(loom))]
    fn wait(&self) -> bool {
        if self.0 <= SPINS {
            std::hint::spin_loop();
        } else if self.0 <= YIELDS {
            std::thread::yield_now();
        } else if self.0 <= LIMIT {
            std::thread::sleep(NAP);
        } else {
            return false;
        }
        true
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    //! Run with `RUSTFLAGS="--cfg loom" cargo test -p walkfs-vfs --lib loom`.
    use super::*;
    use crate::seqlock::SeqCount;
    use crate::sync::{AtomicU64, Ordering};
    use loom::sync::Arc;

    /// A body that reads under a sequence count and asks to start over
    /// when the count moved, run by the driver while a writer updates:
    /// whatever the interleaving, the driver returns a whole write (or,
    /// having given up, EAGAIN), never a torn one, and a restart is
    /// never reported as an error.
    #[test]
    fn the_driver_returns_only_whole_writes() {
        loom::model(|| {
            let shared = Arc::new((SeqCount::default(), AtomicU64::new(0), AtomicU64::new(0)));
            let w = shared.clone();
            let writer = loom::thread::spawn(move || {
                w.0.write_begin();
                w.1.store(1, Ordering::Relaxed);
                w.2.store(1, Ordering::Relaxed);
                w.0.write_end();
            });
            let retries = Counter::default();
            let r = drive(&retries, || {
                let s = shared.0.read_begin().ok_or(Step::Restart)?;
                let a = shared.1.load(Ordering::Relaxed);
                let b = shared.2.load(Ordering::Relaxed);
                if shared.0.read_retry(s) {
                    return Err(Step::Restart);
                }
                Ok((a, b))
            });
            match r {
                Ok((a, b)) => assert_eq!(a, b, "a torn read was returned"),
                Err(e) => assert_eq!(e, Errno::EAGAIN),
            }
            writer.join().unwrap();
        });
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn backoff_gives_up_after_about_a_second_not_before() {
        let t0 = std::time::Instant::now();
        let mut b = Backoff::new();
        let mut n = 0;
        while b.snooze() {
            n += 1;
        }
        assert_eq!(n, LIMIT);
        assert!(t0.elapsed() >= NAP * (LIMIT - YIELDS));
    }

    #[test]
    fn drive_restarts_until_an_answer_and_counts() {
        let c = Counter::default();
        let mut n = 0;
        let r = drive(&c, || {
            n += 1;
            if n < 5 {
                Err(Step::Restart)
            } else {
                Ok(n)
            }
        });
        assert_eq!(r, Ok(5));
        assert_eq!(c.get(), 4);
        // An error is the answer at once, whatever its number: a backend
        // returning ECHILD (the errno Linux uses for this) is not a restart.
        let r: Result<(), Errno> = drive(&c, || Err(Errno::ECHILD.into()));
        assert_eq!(r, Err(Errno::ECHILD));
        assert_eq!(c.get(), 4);
    }
}
