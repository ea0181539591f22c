//! The libcephfs calls a mount made, by name, with the time spent in
//! them: what `walkfs stats` shows for a CephFS source, and what the
//! benchmarks divide by operations ("libcephfs calls per operation").

use std::collections::BTreeMap;
use std::time::Instant;

use parking_lot::Mutex;
use walkfs_fsapi::RpcStats;

#[derive(Default)]
pub struct Calls {
    /// name -> (calls, nanoseconds in them). A lock per call is noise
    /// next to the client lock every libcephfs call takes.
    by_name: Mutex<BTreeMap<&'static str, (u64, u64)>>,
}

/// Counts one call when dropped.
pub struct Timed<'a> {
    calls: &'a Calls,
    name: &'static str,
    start: Instant,
}

impl Calls {
    /// Start timing a call of `name`.
    pub fn time(&self, name: &'static str) -> Timed<'_> {
        Timed {
            calls: self,
            name,
            start: Instant::now(),
        }
    }

    pub fn stats(&self) -> RpcStats {
        let m = self.by_name.lock();
        let mut s = RpcStats::default();
        for (name, (n, ns)) in m.iter() {
            s.rpcs.push((*name, *n));
            s.total_rpcs += n;
            s.waits += n;
            s.wait_ns += ns;
        }
        s
    }

    pub fn reset(&self) {
        self.by_name.lock().clear();
    }
}

impl Drop for Timed<'_> {
    fn drop(&mut self) {
        let ns = self.start.elapsed().as_nanos() as u64;
        let mut m = self.calls.by_name.lock();
        let e = m.entry(self.name).or_default();
        e.0 += 1;
        e.1 += ns;
    }
}
