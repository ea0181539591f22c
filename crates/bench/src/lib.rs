//! Benchmarks of walkfs. Each prints machine-readable JSON lines and a
//! table for people.

pub mod build;
pub mod files;
pub mod freshfs;
pub mod load;
pub mod memory;
pub mod micro;
pub mod p9meta;
pub mod parallel;
pub mod plot;
pub mod proc;
pub mod report;
pub mod scale;
pub mod timing;
pub mod trace;
pub mod transport;
pub mod workloads;
