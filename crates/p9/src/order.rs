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

use crate::Fcall;

/// Requests that change the file system (names, attributes, data): a
/// server that keeps the promise runs them in a connection's arrival
/// order, and a client knows its cached listings are stale after one.
/// `Tlopen` counts when it truncates or creates.
pub fn changes_state(f: &Fcall<'_>) -> bool {
    match f {
        Fcall::Tlopen { flags, .. } => {
            // 9P2000.L open flags are Linux's: O_CREAT, O_TRUNC.
            const O_CREAT: u32 = 0o100;
            const O_TRUNC: u32 = 0o1000;
            flags & (O_TRUNC | O_CREAT) != 0
        }
        _ => matches!(
            f,
            Fcall::Tlcreate { .. }
                | Fcall::Tmkdir { .. }
                | Fcall::Tsymlink { .. }
                | Fcall::Tmknod { .. }
                | Fcall::Tlcreatei { .. }
                | Fcall::Tmkdiri { .. }
                | Fcall::Tsymlinki { .. }
                | Fcall::Tmknodi { .. }
                | Fcall::Tlink { .. }
                | Fcall::Trename { .. }
                | Fcall::Trenameat { .. }
                | Fcall::Tunlinkat { .. }
                | Fcall::Tremove { .. }
                | Fcall::Tsetattr { .. }
                | Fcall::Txattrcreate { .. }
                | Fcall::Twrite { .. }
                | Fcall::Tfsync { .. }
        ),
    }
}
