//! `fstat_into` or `statx_into` on an open descriptor, a fixed number of
//! times, for instruction counts under callgrind.
use std::sync::Arc;

use walkfs_memfs::MemFs;
use walkfs_vfs::{Creds, Options, Statx, Vfs, AT_FDCWD};

fn main() {
    let which = std::env::args().nth(1).unwrap_or_default();
    let n: usize = std::env::args()
        .nth(2)
        .and_then(|a| a.parse().ok())
        .unwrap_or(100_000);
    let vfs = Vfs::new(Arc::new(MemFs::new()), &Options::default()).unwrap();
    let ctx = vfs.context(Creds::root());
    let fd = ctx
        .openat(AT_FDCWD, b"/f", libc::O_CREAT | libc::O_RDWR, 0o644)
        .unwrap();
    // SAFETY: `struct stat` is plain old data; all-zero is valid.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    let mut sx = Statx::default();
    let t = std::time::Instant::now();
    for _ in 0..n {
        if which == "statx" {
            ctx.statx_into(
                fd,
                b"",
                libc::AT_EMPTY_PATH,
                libc::STATX_BASIC_STATS,
                &mut sx,
            )
            .unwrap();
        } else {
            ctx.fstat_into(fd, &mut st).unwrap();
        }
        std::hint::black_box((&st, &sx));
    }
    eprintln!(
        "{which}: {:.1} ns/call",
        t.elapsed().as_nanos() as f64 / n as f64
    );
}
