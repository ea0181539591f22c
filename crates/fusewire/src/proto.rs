//! A prototype FUSE server of the hot requests, to measure transports.
//!
//! The tree is synthetic (a root holding `f0` .. `f{N-1}`, every reply
//! with zero timeouts so each `stat(2)` reaches the server), so what is
//! measured is the transport: the kernel's queue, the hand-off to the
//! daemon, the reply. Two transports:
//! - [`serve_dev`]: threads reading `/dev/fuse` and writing replies, as
//!   fuser and libfuse's classic loop do (one queue shared by all);
//! - [`serve_uring`]: FUSE over io_uring (kernel 6.14+, the `fuse`
//!   module's `enable_uring` set): one queue per CPU, each served by a
//!   thread pinned to it, requests arriving as completions of the
//!   previous reply's submission (one system call per request, and the
//!   request stays on the CPU that made it).
//!
//! It also shows what the wire allows that fuser does not: a
//! READDIRPLUS entry with node id 0 and a real inode number (names and
//! types without attributes; fuser takes the node id from the
//! attributes' inode number, so it cannot say "no attributes").

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use crate::abi::{self, op, Pod};

/// What the server counts: requests answered, by transport.
#[derive(Default, Debug)]
pub struct Counts {
    pub requests: AtomicU64,
    pub lookups: AtomicU64,
    pub getattrs: AtomicU64,
    pub readdirs: AtomicU64,
    pub via_uring: AtomicU64,
}

/// The synthetic tree and its server.
pub struct Tree {
    files: u64,
    /// READDIRPLUS entries of files carry no attributes (node id 0).
    bare: bool,
    /// Offer FUSE over io_uring at INIT.
    uring: bool,
    pub counts: Counts,
}

/// A reply body, or an errno, or nothing (FORGET).
pub enum Reply {
    Body(Vec<u8>),
    Err(i32),
    None,
}

/// Fixed size of each operation's own header (what follows the request
/// header before names or data).
fn op_size(opcode: u32) -> usize {
    match opcode {
        op::GETATTR => 16,
        op::READDIR | op::READDIRPLUS => std::mem::size_of::<abi::ReadIn>(),
        op::FORGET | op::OPENDIR | op::GETXATTR | op::INTERRUPT | op::BATCH_FORGET => 8,
        op::RELEASEDIR => 24,
        op::INIT => std::mem::size_of::<abi::InitIn>(),
        _ => 0,
    }
}

/// The root's node id.
pub const ROOT: u64 = 1;
const MAX_WRITE: u32 = 128 * 1024;

impl Tree {
    pub fn new(files: u64, bare: bool, uring: bool) -> Arc<Tree> {
        Arc::new(Tree {
            files,
            bare,
            uring,
            counts: Counts::default(),
        })
    }

    /// The attributes of node `nodeid`.
    pub fn attr(&self, nodeid: u64) -> Option<abi::Attr> {
        let (mode, size, nlink) = match nodeid {
            ROOT => (libc::S_IFDIR | 0o755, 4096, 2),
            n if n >= 2 && n < 2 + self.files => (libc::S_IFREG | 0o644, 42, 1),
            _ => return None,
        };
        Some(abi::Attr {
            ino: nodeid,
            size,
            blocks: size.div_ceil(512),
            mode,
            nlink,
            blksize: 4096,
            ..Default::default()
        })
    }

    /// The node of `name` in the root.
    pub fn find(&self, name: &[u8]) -> Option<u64> {
        let n: u64 = std::str::from_utf8(name.strip_prefix(b"f")?)
            .ok()?
            .parse()
            .ok()?;
        (n < self.files).then_some(n + 2)
    }

    fn entry(&self, nodeid: u64) -> Option<abi::EntryOut> {
        Some(abi::EntryOut {
            nodeid,
            attr: self.attr(nodeid)?,
            ..Default::default()
        })
    }

    /// Answer one request: its header, its operation's own header, and
    /// what follows (names, data).
    pub fn handle(&self, h: &abi::InHeader, op_in: &[u8], payload: &[u8]) -> Reply {
        self.counts.requests.fetch_add(1, Relaxed);
        match h.opcode {
            op::INIT => match abi::InitIn::read(op_in) {
                Some(i) => Reply::Body(self.init(&i).as_bytes().to_vec()),
                None => Reply::Err(libc::EINVAL),
            },
            op::LOOKUP => {
                self.counts.lookups.fetch_add(1, Relaxed);
                let name = payload.split(|b| *b == 0).next().unwrap_or_default();
                match (h.nodeid, self.find(name).and_then(|n| self.entry(n))) {
                    (ROOT, Some(e)) => Reply::Body(e.as_bytes().to_vec()),
                    _ => Reply::Err(libc::ENOENT),
                }
            }
            op::GETATTR => {
                self.counts.getattrs.fetch_add(1, Relaxed);
                match self.attr(h.nodeid) {
                    Some(attr) => Reply::Body(
                        abi::AttrOut {
                            attr,
                            ..Default::default()
                        }
                        .as_bytes()
                        .to_vec(),
                    ),
                    None => Reply::Err(libc::ENOENT),
                }
            }
            op::READDIR | op::READDIRPLUS => {
                self.counts.readdirs.fetch_add(1, Relaxed);
                match abi::ReadIn::read(op_in) {
                    Some(r) if h.nodeid == ROOT => {
                        Reply::Body(self.list(&r, h.opcode == op::READDIRPLUS))
                    }
                    Some(_) => Reply::Err(libc::ENOTDIR),
                    None => Reply::Err(libc::EINVAL),
                }
            }
            op::STATFS => Reply::Body(
                abi::Kstatfs {
                    bsize: 4096,
                    frsize: 4096,
                    namelen: 255,
                    ..Default::default()
                }
                .as_bytes()
                .to_vec(),
            ),
            op::DESTROY | op::RELEASEDIR => Reply::Body(Vec::new()),
            op::FORGET | op::BATCH_FORGET | op::INTERRUPT => Reply::None,
            // OPENDIR: the kernel then lists without opening; GETXATTR:
            // none kept. Everything else: not in the prototype.
            _ => Reply::Err(libc::ENOSYS),
        }
    }

    fn init(&self, i: &abi::InitIn) -> abi::InitOut {
        let offered = u64::from(i.flags) | (u64::from(i.flags2) << 32);
        let mut want = abi::init::DO_READDIRPLUS
            | abi::init::READDIRPLUS_AUTO
            | abi::init::PARALLEL_DIROPS
            | abi::init::NO_OPENDIR_SUPPORT
            | abi::init::INIT_EXT;
        if self.uring {
            want |= abi::init::OVER_IO_URING;
        }
        let flags = offered & want;
        abi::InitOut {
            major: 7,
            minor: i.minor.min(42),
            max_readahead: i.max_readahead,
            flags: flags as u32,
            flags2: (flags >> 32) as u32,
            max_background: 64,
            congestion_threshold: 48,
            max_write: MAX_WRITE,
            time_gran: 1,
            max_pages: 32,
            ..Default::default()
        }
    }

    /// Entries of the root from `r.offset`, as many as fit in `r.size`:
    /// `.`, `..`, then the files. Offsets are positions.
    /// Entry `i` of the root's listing (`.`, `..`, then the files): its
    /// name and node; `None` past the end.
    pub fn entry_at(&self, i: u64) -> Option<(String, u64)> {
        match i {
            0 => Some((".".into(), ROOT)),
            1 => Some(("..".into(), ROOT)),
            n if n < self.files + 2 => Some((format!("f{}", n - 2), n)),
            _ => None,
        }
    }

    fn list(&self, r: &abi::ReadIn, plus: bool) -> Vec<u8> {
        let mut out = Vec::with_capacity(r.size as usize);
        for i in r.offset.. {
            let Some((name, nodeid)) = self.entry_at(i) else {
                break;
            };
            let name = name.into_bytes();
            let Some(attr) = self.attr(nodeid) else { break };
            let d = abi::Dirent {
                ino: nodeid,
                off: i + 1,
                namelen: name.len() as u32,
                kind: (attr.mode & libc::S_IFMT) >> 12,
            };
            let entry = if !plus {
                None
            } else if self.bare && nodeid != ROOT {
                // Node id 0: "no attributes for this one".
                Some(abi::EntryOut::default())
            } else {
                self.entry(nodeid)
            };
            let fixed = entry.map_or(0, |_| std::mem::size_of::<abi::EntryOut>())
                + std::mem::size_of::<abi::Dirent>();
            let len = (fixed + name.len()).next_multiple_of(8);
            if out.len() + len > r.size as usize {
                break;
            }
            if let Some(e) = entry {
                out.extend_from_slice(e.as_bytes());
            }
            out.extend_from_slice(d.as_bytes());
            out.extend_from_slice(&name);
            out.resize(out.len() + (len - fixed - name.len()), 0);
        }
        out
    }
}

/// One request read from `/dev/fuse`: answered, the reply written.
fn answer_dev(tree: &Tree, fd: RawFd, msg: &[u8]) {
    let Some(h) = abi::InHeader::read(msg) else {
        return;
    };
    let hsz = std::mem::size_of::<abi::InHeader>();
    let end = (h.len as usize).min(msg.len());
    let body = msg.get(hsz..end).unwrap_or_default();
    let k = op_size(h.opcode).min(body.len());
    let reply = tree.handle(&h, &body[..k], &body[k..]);
    let (error, body) = match reply {
        Reply::None => return,
        Reply::Body(b) => (0, b),
        Reply::Err(e) => (-e, Vec::new()),
    };
    let out = abi::OutHeader {
        len: (std::mem::size_of::<abi::OutHeader>() + body.len()) as u32,
        error,
        unique: h.unique,
    };
    let iov = [
        libc::iovec {
            iov_base: out.as_bytes().as_ptr() as *mut _,
            iov_len: std::mem::size_of::<abi::OutHeader>(),
        },
        libc::iovec {
            iov_base: body.as_ptr() as *mut _,
            iov_len: body.len(),
        },
    ];
    // SAFETY: two iovecs over live buffers of the lengths given. A reply
    // to a request the kernel gave up on fails with ENOENT: nothing to do.
    let _ = unsafe { libc::writev(fd, iov.as_ptr(), 2) };
}

/// Serve `/dev/fuse` descriptor `fd` on `threads` threads until the
/// mount goes away. INIT arrives here too; with `tree`'s io_uring offer
/// accepted, `on_init` starts the rings.
pub fn serve_dev(
    tree: Arc<Tree>,
    fd: RawFd,
    threads: usize,
    on_init: Option<Arc<dyn Fn() + Send + Sync>>,
) -> Vec<std::thread::JoinHandle<()>> {
    (0..threads.max(1))
        .map(|_| {
            let tree = Arc::clone(&tree);
            let on_init = on_init.clone();
            std::thread::spawn(move || {
                let mut buf = vec![0u8; MAX_WRITE as usize + 4096];
                loop {
                    // SAFETY: a buffer we own, of the length passed.
                    let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
                    if n < 0 {
                        match std::io::Error::last_os_error().raw_os_error() {
                            Some(libc::EINTR | libc::ENOENT | libc::EAGAIN) => continue,
                            _ => return,
                        }
                    }
                    let msg = &buf[..n as usize];
                    let init = abi::InHeader::read(msg).is_some_and(|h| h.opcode == op::INIT);
                    answer_dev(&tree, fd, msg);
                    if let (true, Some(f)) = (init, &on_init) {
                        f();
                    }
                }
            })
        })
        .collect()
}

/// One ring entry: its header buffer and its payload buffer, at fixed
/// addresses the kernel keeps (it copies requests into them and replies
/// out of them for as long as the entry is registered).
struct Ent {
    header: Box<[u8; HEADER_SZ]>,
    payload: Box<[u8]>,
    iov: Box<[libc::iovec; 2]>,
}

const HEADER_SZ: usize =
    abi::URING_IN_OUT_SZ + abi::URING_OP_SZ + std::mem::size_of::<abi::UringEntInOut>();
const ENT_IN_OUT: usize = abi::URING_IN_OUT_SZ + abi::URING_OP_SZ;

/// An io_uring FUSE command for entry `i` of queue `qid`.
fn uring_cmd(
    fd: RawFd,
    cmd: u32,
    qid: u16,
    commit_id: u64,
    i: usize,
    iov: Option<&[libc::iovec; 2]>,
) -> io_uring::squeue::Entry128 {
    let req = abi::UringCmdReq {
        qid,
        commit_id,
        ..Default::default()
    };
    let mut data = [0u8; 80];
    data[..std::mem::size_of::<abi::UringCmdReq>()].copy_from_slice(req.as_bytes());
    let mut b = io_uring::opcode::UringCmd80::new(io_uring::types::Fd(fd), cmd).cmd(data);
    if let Some(iov) = iov {
        b = b.addr(Some(iov.as_ptr() as u64));
    }
    let e = b.build().user_data(i as u64);
    if iov.is_none() {
        return e;
    }
    // The iovec count goes in the SQE's `len`, which the crate's builder
    // does not set: bytes 24..28 of the (first) 64-byte SQE.
    // SAFETY: Entry128 is the 128-byte SQE, plain data.
    let mut raw: [u8; 128] = unsafe { std::mem::transmute(e) };
    raw[24..28].copy_from_slice(&2u32.to_ne_bytes());
    // SAFETY: as above, back.
    unsafe { std::mem::transmute::<[u8; 128], io_uring::squeue::Entry128>(raw) }
}

/// Serve queue `qid` of the FUSE ring of `/dev/fuse` descriptor `fd`
/// with `depth` entries, on a thread pinned to CPU `qid`, until the
/// mount goes away. Err: the kernel refused the ring.
pub fn serve_uring(
    tree: Arc<Tree>,
    fd: RawFd,
    qid: u16,
    depth: usize,
) -> std::thread::JoinHandle<Result<(), String>> {
    std::thread::spawn(move || {
        // SAFETY: a zeroed cpu_set_t is valid; CPU_SET writes inside it.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(usize::from(qid), &mut set);
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
        }
        let mut ring: io_uring::IoUring<io_uring::squeue::Entry128> = io_uring::IoUring::builder()
            .build((depth * 2) as u32)
            .map_err(|e| format!("io_uring: {e}"))?;
        let mut ents: Vec<Ent> = (0..depth)
            .map(|_| {
                let mut header = Box::new([0u8; HEADER_SZ]);
                let mut payload = vec![0u8; MAX_WRITE as usize].into_boxed_slice();
                let iov = Box::new([
                    libc::iovec {
                        iov_base: header.as_mut_ptr().cast(),
                        iov_len: HEADER_SZ,
                    },
                    libc::iovec {
                        iov_base: payload.as_mut_ptr().cast(),
                        iov_len: payload.len(),
                    },
                ]);
                Ent {
                    header,
                    payload,
                    iov,
                }
            })
            .collect();
        for (i, e) in ents.iter().enumerate() {
            let sqe = uring_cmd(fd, abi::URING_CMD_REGISTER, qid, 0, i, Some(&e.iov));
            // SAFETY: the buffers the entry names live in `ents`, which
            // outlives the ring's use of them (the thread ends after the
            // kernel tore the ring down).
            unsafe { ring.submission().push(&sqe) }.map_err(|_| "ring full".to_string())?;
        }
        loop {
            match ring.submit_and_wait(1) {
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                Err(e) => return Err(format!("io_uring_enter: {e}")),
            }
            let done: Vec<(usize, i32)> = ring
                .completion()
                .map(|c| (c.user_data() as usize, c.result()))
                .collect();
            for (i, res) in done {
                let Some(e) = ents.get_mut(i) else { continue };
                if res < 0 {
                    return match -res {
                        libc::ENOTCONN | libc::ENODEV | libc::ECANCELED => Ok(()),
                        err => Err(format!(
                            "FUSE ring entry: {}",
                            std::io::Error::from_raw_os_error(err)
                        )),
                    };
                }
                tree.counts.via_uring.fetch_add(1, Relaxed);
                let Some(h) = abi::InHeader::read(&e.header[..]) else {
                    continue;
                };
                let ent = abi::UringEntInOut::read(&e.header[ENT_IN_OUT..]).unwrap_or_default();
                let n = (ent.payload_sz as usize).min(e.payload.len());
                let reply = tree.handle(
                    &h,
                    &e.header[abi::URING_IN_OUT_SZ..ENT_IN_OUT],
                    &e.payload[..n],
                );
                let (error, body) = match reply {
                    Reply::Body(b) => (0, b),
                    Reply::Err(err) => (-err, Vec::new()),
                    Reply::None => (0, Vec::new()),
                };
                let len = body.len().min(e.payload.len());
                e.payload[..len].copy_from_slice(&body[..len]);
                let out = abi::OutHeader {
                    len: (std::mem::size_of::<abi::OutHeader>() + len) as u32,
                    error,
                    unique: h.unique,
                };
                e.header[..std::mem::size_of::<abi::OutHeader>()].copy_from_slice(out.as_bytes());
                let back = abi::UringEntInOut {
                    payload_sz: len as u32,
                    ..ent
                };
                e.header[ENT_IN_OUT..].copy_from_slice(back.as_bytes());
                let sqe = uring_cmd(
                    fd,
                    abi::URING_CMD_COMMIT_AND_FETCH,
                    qid,
                    ent.commit_id,
                    i,
                    None,
                );
                // SAFETY: as for the registration.
                unsafe { ring.submission().push(&sqe) }.map_err(|_| "ring full".to_string())?;
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(opcode: u32, nodeid: u64) -> abi::InHeader {
        abi::InHeader {
            opcode,
            nodeid,
            unique: 7,
            ..Default::default()
        }
    }

    #[test]
    fn lookups_find_the_files_and_nothing_else() {
        let t = Tree::new(3, false, false);
        let Reply::Body(b) = t.handle(&header(op::LOOKUP, ROOT), &[], b"f2\0") else {
            panic!("f2 exists")
        };
        let e = abi::EntryOut::read(&b).expect("entry");
        assert_eq!((e.nodeid, e.attr.size), (4, 42));
        for bad in [&b"f3\0"[..], b"g\0", b"f\0", b"f-1\0"] {
            assert!(matches!(
                t.handle(&header(op::LOOKUP, ROOT), &[], bad),
                Reply::Err(libc::ENOENT)
            ));
        }
        assert!(matches!(
            t.handle(&header(op::LOOKUP, 3), &[], b"f0\0"),
            Reply::Err(libc::ENOENT)
        ));
    }

    #[test]
    fn a_bare_listing_gives_node_id_zero_and_the_real_inode_number() {
        let t = Tree::new(2, true, false);
        let r = abi::ReadIn {
            size: 4096,
            ..Default::default()
        };
        let Reply::Body(b) = t.handle(&header(op::READDIRPLUS, ROOT), r.as_bytes(), &[]) else {
            panic!("a listing")
        };
        // ".", "..", f0, f1: each an entry_out, a dirent and a padded name.
        let mut at = 0;
        let mut seen = Vec::new();
        while at < b.len() {
            let e = abi::EntryOut::read(&b[at..]).expect("entry");
            let d = abi::Dirent::read(&b[at + 128..]).expect("dirent");
            let name = &b[at + 152..at + 152 + d.namelen as usize];
            seen.push((String::from_utf8_lossy(name).to_string(), e.nodeid, d.ino));
            at += (152 + d.namelen as usize).next_multiple_of(8);
        }
        assert_eq!(
            seen,
            [
                (".".to_string(), 1, 1),
                ("..".to_string(), 1, 1),
                ("f0".to_string(), 0, 2),
                ("f1".to_string(), 0, 3)
            ]
        );
    }

    #[test]
    fn a_listing_stops_where_the_kernels_buffer_ends() {
        let t = Tree::new(1000, false, false);
        let r = abi::ReadIn {
            size: 4096,
            ..Default::default()
        };
        let Reply::Body(b) = t.handle(&header(op::READDIR, ROOT), r.as_bytes(), &[]) else {
            panic!("a listing")
        };
        assert!(b.len() <= 4096 && b.len() > 4096 - 40);
    }
}
