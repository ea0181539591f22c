//! `walkfs bench`: one module per benchmark.

use clap::Subcommand;

mod build;
mod fuse_transport;
mod load;
mod memory;
mod micro;
mod ninep;
mod parallel;
mod scale;
mod workloads;

/// Benchmarks: print a table, or JSON lines with --json.
#[derive(Subcommand)]
pub enum Bench {
    Micro(micro::Micro),
    #[command(name = "9p")]
    NineP(ninep::NineP),
    Load(load::Load),
    FuseTransport(fuse_transport::FuseTransport),
    Parallel(parallel::Parallel),
    Build(build::Build),
    Workloads(workloads::Workloads),
    Scale(scale::Scale),
    Memory(memory::Memory),
}

impl Bench {
    pub fn run(self) -> Result<(), String> {
        match self {
            Bench::Micro(b) => b.run(),
            Bench::NineP(b) => b.run(),
            Bench::Load(b) => b.run(),
            Bench::FuseTransport(b) => b.run(),
            Bench::Parallel(b) => b.run(),
            Bench::Build(b) => b.run(),
            Bench::Workloads(b) => b.run(),
            Bench::Scale(b) => b.run(),
            Bench::Memory(b) => b.run(),
        }
    }
}
