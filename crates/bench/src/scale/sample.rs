//! Sampling /proc: the descriptors and memory of the walkfs processes,
//! polled while a step runs.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::proc::parse_status_kib;

/// How often the sampler polls the walkfs processes.
const SAMPLE_EVERY: Duration = Duration::from_millis(100);

/// Index of the FUSE daemon (`walkfs mount`) in per-process arrays.
pub(super) const DAEMON: usize = 0;
/// Index of `walkfs serve`.
pub(super) const SERVER: usize = 1;

/// One look at a process.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProcSample {
    pub fds: u64,
    pub rss_kib: u64,
    pub hwm_kib: u64,
}

/// The largest of each figure over the samples taken.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Peaks {
    pub fds: u64,
    pub rss_kib: u64,
    pub hwm_kib: u64,
    pub samples: u64,
}

impl Peaks {
    fn add(&mut self, s: &ProcSample) {
        self.fds = self.fds.max(s.fds);
        self.rss_kib = self.rss_kib.max(s.rss_kib);
        self.hwm_kib = self.hwm_kib.max(s.hwm_kib);
        self.samples += 1;
    }
}

/// The soft "Max open files" of /proc/PID/limits.
pub fn parse_fd_limit(limits: &str) -> Option<u64> {
    let l = limits.lines().find(|l| l.starts_with("Max open files"))?;
    l["Max open files".len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Descriptors and memory of `pid`; `None` once it is gone.
pub fn sample(pid: u32) -> Option<ProcSample> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count() as u64;
    Some(ProcSample {
        fds,
        rss_kib: parse_status_kib(&status, "VmRSS")?,
        hwm_kib: parse_status_kib(&status, "VmHWM").unwrap_or(0),
    })
}

pub(super) fn fd_limit(pid: u32) -> Option<u64> {
    parse_fd_limit(&std::fs::read_to_string(format!("/proc/{pid}/limits")).ok()?)
}

#[derive(Default)]
struct SamplerState {
    step: [Peaks; 2],
    overall: [Peaks; 2],
}

/// Polls the daemon and the server every 100 ms on a thread of its own;
/// peaks per step (between `begin` and `end`) and over its life.
pub(super) struct Sampler {
    pids: [Option<u32>; 2],
    state: Arc<Mutex<SamplerState>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

fn take_samples(pids: &[Option<u32>; 2], state: &Mutex<SamplerState>) {
    let s: Vec<Option<ProcSample>> = pids.iter().map(|p| p.and_then(sample)).collect();
    // A poisoned lock only means a panic elsewhere; the figures are whole.
    let mut st = state.lock().unwrap_or_else(|e| e.into_inner());
    for (i, s) in s.iter().enumerate() {
        if let Some(s) = s {
            st.step[i].add(s);
            st.overall[i].add(s);
        }
    }
}

impl Sampler {
    pub(super) fn start(pids: [Option<u32>; 2]) -> Sampler {
        let state = Arc::new(Mutex::new(SamplerState::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = if pids.iter().any(Option::is_some) {
            let (state, stop) = (Arc::clone(&state), Arc::clone(&stop));
            Some(std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    take_samples(&pids, &state);
                    std::thread::sleep(SAMPLE_EVERY);
                }
            }))
        } else {
            None
        };
        Sampler {
            pids,
            state,
            stop,
            thread,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, SamplerState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A step starts: its peaks from now, beginning with a sample now.
    pub(super) fn begin(&self) {
        self.lock().step = Default::default();
        take_samples(&self.pids, &self.state);
    }

    /// A step ended: its peaks, including a sample taken now (a step
    /// shorter than the polling period still gets two).
    pub(super) fn end(&self) -> [Peaks; 2] {
        take_samples(&self.pids, &self.state);
        self.lock().step
    }

    /// Peaks since the start, with each process's VmHWM counted (the
    /// kernel's own peak, which the polling may have missed).
    pub(super) fn overall(&self) -> [Peaks; 2] {
        take_samples(&self.pids, &self.state);
        let mut p = self.lock().overall;
        for q in p.iter_mut() {
            q.rss_kib = q.rss_kib.max(q.hwm_kib);
        }
        p
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_and_limits_parse() {
        let s = "Name:\twalkfs\nVmPeak:\t  900 kB\nVmHWM:\t    5120 kB\nVmRSS:\t    4096 kB\n";
        assert_eq!(parse_status_kib(s, "VmRSS"), Some(4096));
        assert_eq!(parse_status_kib(s, "VmHWM"), Some(5120));
        // A field is matched whole, not by prefix.
        assert_eq!(parse_status_kib(s, "VmR"), None);
        assert_eq!(parse_status_kib(s, "VmSwap"), None);
        let l = "Limit                     Soft Limit           Hard Limit           Units\n\
                 Max open files            20000                40000                files\n";
        assert_eq!(parse_fd_limit(l), Some(20000));
    }

    #[test]
    fn this_process_can_be_sampled() {
        let s = sample(std::process::id()).expect("/proc/self");
        assert!(s.fds >= 3 && s.rss_kib > 0 && s.hwm_kib >= s.rss_kib);
        let sampler = Sampler::start([Some(std::process::id()), None]);
        sampler.begin();
        let p = sampler.end();
        assert!(p[DAEMON].samples >= 2 && p[DAEMON].fds >= 3);
        assert_eq!(p[SERVER].samples, 0);
        let mut row = super::super::Row::new("t", "s", "walkfs");
        row.peaks(&p);
        assert!(row.peak_fds_daemon.is_some() && row.peak_fds_server.is_none());
    }
}
