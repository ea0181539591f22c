//! The FUSE wire protocol, spoken directly (no fuser).
//!
//! - [`kmount`]: mounting and unmounting ourselves.
//! - [`abi`]: the kernel's structures (include/uapi/linux/fuse.h).
//! - [`proto`]: a prototype server of the hot requests over a synthetic
//!   tree, over `/dev/fuse` read/write or FUSE over io_uring, to measure
//!   the transports against fuser (docs/fuse-transport.md).

pub mod abi;
pub mod kmount;
pub mod proto;
