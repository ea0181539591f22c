//! The `forget` queue: the backend lookup references freed inodes held,
//! delivered once the writer mutex is released (a backend call, so never
//! under the mutex).

use std::sync::Arc;

use walkfs_fsapi::FileSystem;

use super::Writer;

impl Writer {
    /// Send the queued `forget`s (call after dropping the lock).
    pub fn take_forgets(&mut self) -> Vec<(usize, u64)> {
        std::mem::take(&mut self.forgets)
    }
}

/// Deliver queued forgets to their backends.
pub(crate) fn send_forgets(sbs: &[Arc<dyn FileSystem>], forgets: Vec<(usize, u64)>) {
    for (sb, node) in forgets {
        if let Some(fs) = sbs.get(sb) {
            fs.forget(walkfs_fsapi::NodeId(node), 1);
        }
    }
}
