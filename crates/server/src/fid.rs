//! Fids: what each of a client's handles stands for.
//!
//! A fid is created *pending* by the connection's reader when it reads the
//! request that makes it (`Tattach`, `Twalk`), so a request on the new fid
//! sent right behind (walk + open in one round trip) finds it and waits
//! for it; the worker that runs the making request completes or fails it.

use std::sync::Arc;

use parking_lot::{Condvar, Mutex};
use walkfs_vfs::{Ctx, Errno, Handle, OpenFile, Result};

/// The vfs side of a fid.
#[derive(Clone)]
pub struct FidState {
    /// The credentials it acts with (all contexts of a connection share
    /// one descriptor table).
    pub ctx: Arc<Ctx>,
    /// The file (a vfs handle: a request holds its own clone, so a walk
    /// that moves the fid meanwhile takes nothing from under it); `None`
    /// for a fid that names no file (a listing's, the order answer's).
    pub node: Option<Handle>,
    /// The file `Tlopen`/`Tlcreate` opened, if any (a request holds its
    /// own reference, so a `Tlcreate` that replaces it meanwhile closes
    /// it only once that request is done).
    pub open: Option<OpenFile>,
    /// A directory listing with attributes (the readdirplus extension,
    /// p9::dirplus) this fid reads, as an xattr fid reads its value.
    pub listing: Option<Arc<Vec<u8>>>,
    /// A lease fid's hold on its lease (lease.rs): given back when the
    /// fid goes.
    pub lease: Option<Arc<crate::lease::Hold>>,
    /// After `Txattrcreate`: the attribute the fid sets at its clunk, and
    /// the bytes written for it (handlers/xattr.rs). The fid then names
    /// no file (`node` is `None`), so nothing else works on it.
    pub xattr: Option<Arc<crate::handlers::xattr::Setting>>,
}

enum Status {
    Pending,
    Ready(FidState),
    Failed,
}

pub struct Fid {
    status: Mutex<Status>,
    cv: Condvar,
}

impl Fid {
    pub fn pending() -> Arc<Fid> {
        Arc::new(Fid {
            status: Mutex::new(Status::Pending),
            cv: Condvar::new(),
        })
    }

    pub fn ready(st: FidState) -> Arc<Fid> {
        let f = Fid::pending();
        f.complete(st);
        f
    }

    /// The state, once the request making this fid has finished; `EBADF`
    /// if it failed.
    pub fn get(&self) -> Result<FidState> {
        let mut s = self.status.lock();
        loop {
            match &*s {
                Status::Ready(st) => return Ok(st.clone()),
                Status::Failed => return Err(Errno::EBADF),
                Status::Pending => self.cv.wait(&mut s),
            }
        }
    }

    pub fn complete(&self, st: FidState) {
        *self.status.lock() = Status::Ready(st);
        self.cv.notify_all();
    }

    pub fn fail(&self) {
        *self.status.lock() = Status::Failed;
        self.cv.notify_all();
    }

    /// Change the state. An open file it replaces closes once no request
    /// uses it any more.
    pub fn update(&self, f: impl FnOnce(&mut FidState)) -> Result<()> {
        let mut s = self.status.lock();
        match &mut *s {
            Status::Ready(st) => {
                f(st);
                Ok(())
            }
            _ => Err(Errno::EBADF),
        }
    }
}
