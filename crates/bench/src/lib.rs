//! Benchmarks of walkfs. Each prints machine-readable JSON lines and a
//! table for people.

pub mod memory;
pub mod report;
