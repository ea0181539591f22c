//! walkfs's leases (docs/lease-protocol.md): a client that holds a lease
//! on a directory may answer its closes without waiting for the server,
//! because the server recalls the lease before anyone else looks.
//!
//! - Asking: `Txattrwalk(dirfid, newfid,` [`NAME`]`)`. `walkfs serve`
//!   answers `Rxattrwalk size=`[`VERSION`]: `newfid` is now the *lease
//!   fid*. Any other server answers an error, as for any unknown
//!   attribute (no Linux client can send the name: kernel xattr names
//!   carry a namespace prefix). `EAGAIN`: not now (the directory was
//!   recalled a moment ago, or another client holds it).
//! - Recall: a record of kind [`RECALL`] on the client's notification fid
//!   (notify.rs), its `ino` the lease fid.
//! - Release: `Tclunk` of the lease fid. A server that keeps a
//!   connection's order (order.rs) runs it after every change sent before
//!   it, so once it is answered the holder's changes are all carried out.

/// The xattr name that asks for a lease on the fid's directory.
pub const NAME: &[u8] = b"walkfs.lease";
/// The extension's version, given as the `Rxattrwalk` size.
pub const VERSION: u64 = 1;
/// A notification record's kind: give back lease `ino` (a lease fid).
pub const RECALL: u8 = 5;
