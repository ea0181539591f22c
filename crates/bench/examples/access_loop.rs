//! A fixed number of cached `faccessat` calls, for profiling with
//! `valgrind --tool=callgrind` (counts instructions, repeatably).
use std::sync::Arc;

use walkfs_memfs::MemFs;
use walkfs_vfs::{Creds, Options, Vfs, AT_FDCWD};

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(100_000);
    let vfs = Vfs::new(Arc::new(MemFs::new()), &Options::default()).unwrap();
    let ctx = vfs.context(Creds::root());
    let path = walkfs_bench::micro::ACCESS_PATH.as_bytes();
    let mut prefix = Vec::new();
    let comps: Vec<&[u8]> = path
        .split(|&b| b == b'/')
        .filter(|c| !c.is_empty())
        .collect();
    for (i, c) in comps.iter().enumerate() {
        prefix.push(b'/');
        prefix.extend_from_slice(c);
        if i + 1 < comps.len() {
            ctx.mkdirat(AT_FDCWD, &prefix, 0o755).unwrap();
        } else {
            let fd = ctx
                .openat(AT_FDCWD, &prefix, libc::O_CREAT | libc::O_WRONLY, 0o644)
                .unwrap();
            ctx.close(fd).unwrap();
        }
    }
    let t = std::time::Instant::now();
    for _ in 0..n {
        std::hint::black_box(ctx.faccessat(AT_FDCWD, path, libc::R_OK, 0)).unwrap();
    }
    eprintln!("{:.1} ns/call", t.elapsed().as_nanos() as f64 / n as f64);
}
