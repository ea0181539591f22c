//! The FUSE wire protocol, spoken directly (no fuser).
//!
//! - [`kmount`]: mounting and unmounting ourselves.
//! - [`abi`]: the kernel's structures (include/uapi/linux/fuse.h).
//! - [`request`]: requests off the wire, typed; [`reply`]: reply bodies,
//!   typed (one per request).
//! - [`session`]: the INIT handshake, the request loops over
//!   `/dev/fuse` or FUSE over io_uring (one queue per CPU), and
//!   notifications; serves any [`session::Filesystem`].
//! - [`proto`]: a synthetic file system of the hot requests, to measure
//!   the transports (docs/fuse-transport.md).

pub mod abi;
pub mod kmount;
pub mod proto;
pub mod reply;
pub mod request;
pub mod session;

pub use reply::{DirBuf, Reply};
pub use request::{Operation, Request, Setattr, TimeArg};
pub use session::{Backing, Config, Filesystem, Notifier, Session, SessionInfo, Transport};
