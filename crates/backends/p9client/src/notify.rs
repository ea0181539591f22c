//! The client side of the change-notification extension (the server's
//! `notify.rs`, docs/notify-protocol.md): a notification fid opened after
//! attach, and a thread that keeps one `Tread` outstanding on it and turns
//! the records into [`Change`]s in this client's node numbers.

use std::sync::{Arc, Weak};

use parking_lot::Mutex;
use walkfs_fsapi::{Change, ChangeSink, Errno, How, NodeId, Result};
use walkfs_p9::notify::{ALL, DEGRADED, ENTRY, INODE, NAME as NOTIFY_NAME, VERSION};
use walkfs_p9::{Fcall, Str, IOHDRSZ};

use crate::rpc::Rpc;
use crate::{err_of, Nodes, ROOT_FID};

/// The fid notifications are read from.
pub(crate) const NOTIFY_FID: u32 = u32::MAX - 2;

/// Pause after a batch before asking for the next: changes that come in
/// a burst (a build writing a file in small pieces reports it on every
/// write) gather in the server's queue, where repeats are merged, and
/// arrive as one reply instead of one round trip each. Small beside the
/// 100 ms in which a change must be seen.
const COALESCE: std::time::Duration = std::time::Duration::from_millis(10);

/// Ask the server for notifications. `false`: it does not offer them (a
/// plain 9P2000.L server answers the unknown xattr with an error).
pub(crate) fn subscribe(rpc: &Rpc) -> bool {
    let r = rpc.call(
        Fcall::Txattrwalk {
            fid: ROOT_FID,
            newfid: NOTIFY_FID,
            name: Str(NOTIFY_NAME),
        },
        |r| match r {
            Fcall::Rxattrwalk { size } => Ok(size),
            r => Err(err_of(&r)),
        },
    );
    match r {
        Ok(VERSION) => true,
        Ok(v) => {
            // A fid was made: give it back.
            tracing::warn!("server offers notification protocol {v}, not {VERSION}");
            rpc.send_forget(Fcall::Tclunk { fid: NOTIFY_FID });
            false
        }
        Err(_) => false,
    }
}

/// Read notifications until the connection ends, delivering them to
/// `sink`.
pub(crate) fn start(
    rpc: Weak<Rpc>,
    nodes: Arc<Mutex<Nodes>>,
    root_ino: u64,
    sink: Arc<dyn ChangeSink>,
) -> Result<()> {
    std::thread::Builder::new()
        .name("9p-notify".into())
        .spawn(move || {
            loop {
                let Some(r) = rpc.upgrade() else { return };
                let count = r.msize - IOHDRSZ;
                let got = r.call(
                    Fcall::Tread {
                        fid: NOTIFY_FID,
                        offset: 0,
                        count,
                    },
                    |r| match r {
                        Fcall::Rread { data } => Ok(data.0.to_vec()),
                        r => Err(err_of(&r)),
                    },
                );
                match got {
                    Ok(recs) if recs.is_empty() => return, // clunked
                    Ok(recs) => {
                        drop(r);
                        let changes = decode(&recs, &nodes.lock(), root_ino);
                        if !changes.is_empty() {
                            sink.changed(&changes);
                        }
                        std::thread::sleep(COALESCE);
                    }
                    Err(e) => {
                        drop(r);
                        // The connection is gone: nothing cached can be
                        // trusted to be told about any more.
                        tracing::debug!("notifications ended: {e}");
                        sink.changed(&[Change::Degraded]);
                        return;
                    }
                }
            }
        })
        .map(drop)
        .map_err(Errno::from)
}

/// Records as changes to the nodes this client holds (changes to files it
/// holds no fid for concern nothing it caches).
fn decode(buf: &[u8], nodes: &Nodes, root_ino: u64) -> Vec<Change> {
    let node = |ino: u64| -> Option<NodeId> {
        (ino == root_ino || nodes.by_id.contains_key(&ino)).then_some(NodeId(ino))
    };
    let mut out = Vec::new();
    for (kind, ino, name) in walkfs_p9::notify::decode(buf) {
        match kind {
            ENTRY => {
                if let Some(dir) = node(ino) {
                    out.push(Change::Entry {
                        dir,
                        dir_ino: ino,
                        name: name.to_vec(),
                        how: How::default(),
                    });
                }
            }
            INODE => {
                if let Some(node) = node(ino) {
                    out.push(Change::Inode {
                        node,
                        ino,
                        how: How::default(),
                        at: None,
                    });
                }
            }
            ALL => out.push(Change::All),
            DEGRADED => out.push(Change::Degraded),
            // A later protocol's record: whatever it says, the cache
            // cannot know what to drop.
            _ => out.push(Change::All),
        }
    }
    out
}
