//! What a request's handler sees of its connection: the fid table, the
//! negotiated message size, the contexts it acts through, and the secret
//! shown. The connection itself (framing, tags, order, replies: conn.rs)
//! owns one and dispatches to the handlers (handlers.rs) with it, so the
//! handlers never reach back into the connection.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use walkfs_p9::{IOHDRSZ, MIN_MSIZE};
use walkfs_vfs::{Creds, Ctx};

use crate::fid::Fid;
use crate::Server;

pub(crate) struct Session {
    pub server: Arc<Server>,
    pub fids: Mutex<HashMap<u32, Arc<Fid>>>,
    pub msize: AtomicU32,
    /// Contexts by (uid, gid), all sharing one descriptor table.
    ctxs: Mutex<HashMap<(u32, u32), Arc<Ctx>>>,
    base: Ctx,
    pub peer: String,
    /// Auth fids (`Tauth`) and what was written to each, when the server
    /// asks for a secret.
    pub auth: Mutex<HashMap<u32, Vec<u8>>>,
    /// Inode numbers granted to this connection and not spent yet.
    pub unspent: Mutex<crate::inos::Unspent>,
    /// The connection, as leases reach it with recalls (lease.rs); set
    /// once it is shared.
    pub me: std::sync::OnceLock<std::sync::Weak<dyn crate::notify::Peer>>,
    /// Its recent changes, whose reports it is not sent (own.rs).
    pub own: crate::own::Own,
    /// This connection's own number, which its lock owners are hashed
    /// with (handlers/locks.rs): no two connections share an owner.
    pub lock_space: u64,
}

/// The next connection's [`Session::lock_space`].
static LOCK_SPACES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl Session {
    pub fn new(server: Arc<Server>, peer: String) -> Session {
        // No descriptors: a fid holds a handle and an open file of its
        // own (fid.rs).
        let base = server.vfs.context_with_fds(Creds::root(), 0);
        Session {
            fids: Mutex::new(HashMap::new()),
            msize: AtomicU32::new(MIN_MSIZE),
            ctxs: Mutex::new(HashMap::new()),
            base,
            peer,
            server,
            auth: Mutex::new(HashMap::new()),
            unspent: Mutex::new(Default::default()),
            me: std::sync::OnceLock::new(),
            own: Default::default(),
            lock_space: LOCK_SPACES.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        }
    }

    /// The context acting as `creds`, sharing the connection's descriptors.
    pub fn ctx_for(&self, creds: Creds) -> Arc<Ctx> {
        let key = (creds.uid, creds.gid);
        let mut m = self.ctxs.lock();
        Arc::clone(
            m.entry(key)
                .or_insert_with(|| Arc::new(self.base.with_creds(creds))),
        )
    }

    /// Is `c` (in host numbers) the report of this connection's own
    /// change (own.rs)?
    pub fn is_own(&self, c: &walkfs_vfs::Change) -> bool {
        self.own.any() && self.own.is_own(&self.base, c)
    }

    /// Was the secret written to auth fid `afid`?
    pub fn auth_ok(&self, afid: u32, secret: &crate::auth::Secret) -> bool {
        self.auth
            .lock()
            .get(&afid)
            .is_some_and(|written| secret.matches(written))
    }

    /// The most data one read or write carries.
    pub fn iounit(&self) -> u32 {
        self.msize.load(Ordering::Relaxed) - IOHDRSZ
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use walkfs_vfs::{Creds, Options, Vfs};

    use super::Session;
    use crate::{Config, Server};

    #[test]
    fn one_context_per_user_and_group() {
        let vfs = Vfs::new(Arc::new(walkfs_memfs::MemFs::new()), &Options::default()).expect("vfs");
        let s = Session::new(Server::new(vfs, Config::default()), "t".into());
        let user = |uid, gid| Creds {
            uid,
            gid,
            groups: Vec::new(),
            privileged: false,
        };
        let a = s.ctx_for(user(1000, 1000));
        assert!(Arc::ptr_eq(&a, &s.ctx_for(user(1000, 1000))));
        let b = s.ctx_for(user(1000, 100));
        assert!(!Arc::ptr_eq(&a, &b));
        // An open file made through one acts as it, whoever uses it.
        let f = a
            .open_file(
                walkfs_vfs::AT_FDCWD,
                b"/",
                libc::O_RDONLY | libc::O_DIRECTORY,
                0,
            )
            .expect("open");
        assert!(Arc::ptr_eq(f.ctx(), &a));
        assert!(f.statx(libc::STATX_TYPE).is_ok());
        assert_eq!(s.iounit(), walkfs_p9::MIN_MSIZE - walkfs_p9::IOHDRSZ);
    }
}
