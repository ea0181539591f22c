//! Waiting out a writer between lock-free attempts.
//!
//! A reader that finds a sequence count odd, or moved, tries again. The
//! writer's critical section is a handful of stores, but on a loaded
//! machine the writer can be preempted inside it, and a reader that only
//! spins then burns its whole time slice (or, with a fixed number of
//! attempts, gives up and fails a system call that must not fail). So:
//! spin a little, then give the CPU away, then sleep, and only after about
//! a second of that report `EAGAIN` (a writer stuck that long is a bug, and
//! a spurious error is better than a hang).

use std::time::Duration;

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

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn gives_up_after_about_a_second_not_before() {
        let t0 = std::time::Instant::now();
        let mut b = Backoff::new();
        let mut n = 0;
        while b.snooze() {
            n += 1;
        }
        assert_eq!(n, LIMIT);
        assert!(t0.elapsed() >= NAP * (LIMIT - YIELDS));
    }
}
