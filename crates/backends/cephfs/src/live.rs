//! Mounts still up when the process exits are unmounted on the way out.
//!
//! A client that goes without `ceph_unmount` leaves its session open at
//! the MDS, holding its caps, until the session times out (60 s by
//! default): every other client that needs those caps (a create in the
//! same directory) waits that long. A front end's exit rarely drops the
//! backend (its threads hold it), so the library unmounts at `exit`.

use std::sync::Once;

use parking_lot::Mutex;

use crate::ffi::{self, MountInfo};
use crate::notify::Channel;

/// The mounts up, as addresses (a raw pointer is not `Send`).
static LIVE: Mutex<Vec<usize>> = Mutex::new(Vec::new());
static HOOK: Once = Once::new();
/// Their change channels: a watch left behind would hold every other
/// client's notifies until the OSD times it out (30 s).
static CHANNELS: Mutex<Vec<std::sync::Weak<Channel>>> = Mutex::new(Vec::new());

extern "C" fn unmount_all() {
    for ch in std::mem::take(&mut *CHANNELS.lock()) {
        if let Some(ch) = ch.upgrade() {
            ch.shut();
        }
    }
    let Ok(api) = ffi::api() else { return };
    for cm in std::mem::take(&mut *LIVE.lock()) {
        // SAFETY: a mount registered by `add` and not released (`remove`
        // takes it out before the release): unmounting closes the session
        // cleanly; the process is exiting, so nothing uses it after.
        unsafe { (api.ceph_unmount)(cm as *mut MountInfo) };
    }
}

pub(crate) fn add_channel(ch: &std::sync::Arc<Channel>) {
    CHANNELS.lock().push(std::sync::Arc::downgrade(ch));
}

pub(crate) fn add(cm: *mut MountInfo) {
    HOOK.call_once(|| {
        // SAFETY: registers a plain function with no captured state.
        unsafe { libc::atexit(unmount_all) };
    });
    LIVE.lock().push(cm as usize);
}

/// Was `cm` still registered (then the caller unmounts and releases it)?
pub(crate) fn remove(cm: *mut MountInfo) -> bool {
    let mut live = LIVE.lock();
    match live.iter().position(|&m| m == cm as usize) {
        Some(i) => {
            live.swap_remove(i);
            true
        }
        None => false,
    }
}
