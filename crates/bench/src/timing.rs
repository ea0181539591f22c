//! The timing loop the throughput benchmarks share: threads started
//! together, stopped together.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Barrier;
use std::time::Instant;

/// What [`together`] measured.
pub struct Together<T, M> {
    /// Each thread's result, in order; `None` for a thread that panicked.
    pub results: Vec<Option<T>>,
    /// Seconds from the start until the threads were told to stop.
    pub seconds: f64,
    /// What `meanwhile` returned.
    pub meanwhile: M,
}

/// Run `n` threads: thread `i` calls `prepare(i)` (its setup, not
/// timed), then all start at once and run what `prepare` returned until
/// the flag it is given is set. This thread runs `meanwhile` from the
/// start (sleeping out the measured time, or measuring something of its
/// own), then sets the flag and joins them all.
pub fn together<P, R, T, M>(n: usize, prepare: P, meanwhile: impl FnOnce() -> M) -> Together<T, M>
where
    P: Fn(usize) -> R + Sync,
    R: FnOnce(&AtomicBool) -> T,
    T: Send,
{
    let stop = AtomicBool::new(false);
    let start = Barrier::new(n + 1);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..n)
            .map(|i| {
                let (prepare, stop, start) = (&prepare, &stop, &start);
                s.spawn(move || {
                    let run = prepare(i);
                    start.wait();
                    run(stop)
                })
            })
            .collect();
        start.wait();
        let t0 = Instant::now();
        let m = meanwhile();
        stop.store(true, Ordering::Relaxed);
        let seconds = t0.elapsed().as_secs_f64();
        Together {
            results: handles.into_iter().map(|h| h.join().ok()).collect(),
            seconds,
            meanwhile: m,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn threads_run_until_told_to_stop() {
        let t = together(
            3,
            |i| {
                move |stop: &AtomicBool| {
                    let mut n = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        n += 1;
                        std::hint::spin_loop();
                    }
                    (i, n)
                }
            },
            || {
                std::thread::sleep(Duration::from_millis(20));
                7
            },
        );
        assert_eq!(t.meanwhile, 7);
        assert!(t.seconds >= 0.02);
        let r: Vec<(usize, u64)> = t.results.into_iter().flatten().collect();
        assert_eq!(r.iter().map(|x| x.0).collect::<Vec<_>>(), [0, 1, 2]);
        assert!(r.iter().all(|x| x.1 > 0));
    }
}
