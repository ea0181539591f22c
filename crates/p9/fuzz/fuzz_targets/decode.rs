//! Decode arbitrary bytes as a 9P2000.L frame; whatever decodes must
//! re-encode to the same message. Run: `cargo +nightly fuzz run decode`
//! in crates/p9 (the corpus beside this target seeds one frame per type).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    walkfs_p9::roundtrip_check(data);
});
