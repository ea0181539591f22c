//! A 9P session of arbitrary requests against a fresh memfs export (see
//! walkfs_server::fuzz). Run: `scripts/fuzz.sh session 600` (the corpus
//! beside this target seeds it; it also runs as a stable test).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    walkfs_server::fuzz::run_session(data);
});
