//! `walkfs stats`: a mount's counters, asked of its daemon.

use walkfs_bench::report;

use crate::control;

/// Print a walkfs mount's counters: every request the kernel sent,
/// by opcode, with the time spent answering it; the vfs cache's
/// misses; calls into the backend and how many were waited for; 9P
/// RPCs by type, bytes, and the time spent waiting for the server;
/// the write-back's and read-ahead's counters and the bounded
/// resources. Asked through an ioctl of the mount's root.
#[derive(clap::Args)]
pub struct Stats {
    mountpoint: String,
    /// The counters as one JSON object.
    #[arg(long)]
    json: bool,
}

impl Stats {
    pub fn run(self) -> Result<(), String> {
        let Stats { mountpoint, json } = self;
        let buf = control::stats_json(&mountpoint)
            .map_err(|e| format!("{mountpoint}: not a walkfs mount ({e})"))?;
        if json {
            println!("{}", String::from_utf8_lossy(&buf));
            return Ok(());
        }
        let s: walkfs_fuse::MountStats =
            serde_json::from_slice(&buf).map_err(|e| format!("{mountpoint}: bad stats: {e}"))?;
        println!("options: {}", s.options);
        let us: std::collections::HashMap<&str, u64> =
            s.fuse_us.iter().map(|(n, u)| (n.as_str(), *u)).collect();
        let mut rows: Vec<Vec<String>> = s
            .fuse
            .iter()
            .map(|(n, c)| {
                let v = match us.get(n.as_str()) {
                    Some(u) => format!("{c} ({:.1} ms)", *u as f64 / 1000.0),
                    None => c.to_string(),
                };
                vec!["kernel".into(), n.clone(), v]
            })
            .collect();
        rows.push(vec![
            "kernel".into(),
            "total".into(),
            s.fuse_total.to_string(),
        ]);
        for (n, c) in [
            ("via_dev_fuse", s.fuse_via_dev),
            ("via_io_uring", s.fuse_via_uring),
            ("io_uring_queues", s.fuse_uring_queues),
        ] {
            rows.push(vec!["transport".into(), n.into(), c.to_string()]);
        }
        rows.push(vec![
            "transport".into(),
            "protocol".into(),
            format!("7.{} flags {:#x}", s.fuse_minor, s.fuse_flags),
        ]);
        for (n, c) in [
            ("slow_lookups", s.vfs_slow_lookups),
            ("backend_lookups", s.vfs_backend_lookups),
            ("complete_misses", s.vfs_complete_misses),
            ("negative_created", s.vfs_negative_created),
            ("restarts", s.vfs_restarts),
            ("dentries", u64::from(s.vfs_dentries)),
            ("changes_reported", s.vfs_changes),
            ("changes_lost", s.vfs_changes_lost),
            ("changes_own", s.vfs_changes_own),
            ("coherent", u64::from(s.coherent)),
        ] {
            rows.push(vec!["vfs".into(), n.into(), c.to_string()]);
        }
        for (n, c) in &s.resources {
            rows.push(vec!["limits".into(), n.clone(), c.to_string()]);
        }
        for (n, c) in &s.backend_calls {
            rows.push(vec!["backend".into(), n.clone(), c.to_string()]);
        }
        rows.push(vec![
            "backend".into(),
            "total".into(),
            s.backend_total.to_string(),
        ]);
        rows.push(vec![
            "backend".into(),
            "waited".into(),
            s.backend_waited.to_string(),
        ]);
        for (n, c) in &s.rpcs {
            rows.push(vec!["9p".into(), n.clone(), c.to_string()]);
        }
        rows.push(vec!["9p".into(), "total".into(), s.total_rpcs.to_string()]);
        rows.push(vec![
            "9p".into(),
            "bytes_sent".into(),
            s.bytes_sent.to_string(),
        ]);
        rows.push(vec![
            "9p".into(),
            "bytes_received".into(),
            s.bytes_received.to_string(),
        ]);
        rows.push(vec![
            "9p".into(),
            "wait_ms".into(),
            format!("{:.1}", s.wait_ms),
        ]);
        for (n, c) in [
            ("writeback_submitted", s.writeback_submitted),
            ("writeback_inflight", s.writeback_inflight),
            ("writeback_failed", s.writeback_failed),
            ("writeback_waits", s.writeback_waits),
            ("writeback_gathered", s.writeback_gathered),
            ("readahead_asked", s.readahead_asked),
            ("readahead_used", s.readahead_used),
            ("readahead_wasted", s.readahead_wasted),
            ("fileahead_asked", s.fileahead_asked),
            ("fileahead_used", s.fileahead_used),
            ("fileahead_wasted", s.fileahead_wasted),
        ] {
            rows.push(vec!["vfs".into(), n.into(), c.to_string()]);
        }
        rows.push(vec![
            "vfs".into(),
            "readahead_wait_ms".into(),
            format!("{:.1}", s.readahead_wait_ms),
        ]);
        print!("{}", report::table(&["layer", "counter", "value"], &rows));
        Ok(())
    }
}
