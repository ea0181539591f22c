//! walkfs's ordering promise (docs/9p-ordering.md): a server that runs a
//! connection's changes in arrival order, each request after the changes
//! sent before it, says so when asked, and only then does the walkfs
//! client send changes without waiting for their replies.
//!
//! The client asks with `Txattrwalk(fid, newfid,` [`NAME`]`)`: `walkfs
//! serve` answers `Rxattrwalk size=`[`VERSION`] (the fid reads nothing;
//! the client clunks it), any other server an error (no Linux client can
//! send the name: kernel xattr names carry a namespace prefix).

/// The xattr name that asks whether the server keeps a connection's
/// order.
pub const NAME: &[u8] = b"walkfs.ordered";
/// The promise's version, given as the `Rxattrwalk` size.
pub const VERSION: u64 = 1;
