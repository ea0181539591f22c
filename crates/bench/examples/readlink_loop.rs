//! A fixed number of cached `readlink` calls, for profiling.
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
    ctx.symlinkat(b"boot/initrd.img-6.1.0-99-amd64", AT_FDCWD, b"/initrd.img")
        .unwrap();
    let mut buf = [0u8; 256];
    let t = std::time::Instant::now();
    for _ in 0..n {
        std::hint::black_box(ctx.readlinkat_into(AT_FDCWD, b"/initrd.img", &mut buf)).unwrap();
    }
    eprintln!("{:.1} ns/call", t.elapsed().as_nanos() as f64 / n as f64);
}
