//! File handles through the mount (`name_to_handle_at`,
//! `open_by_handle_at`, an NFS re-export): FUSE's export support.
//!
//! The kernel's file handle holds a node id and its generation. While the
//! kernel caches the inode it needs nothing from us; once it evicted it
//! (and sent FORGET), it asks LOOKUP of `.` in that node id, and of `..`
//! in a directory to connect it. So a forgotten node leaves a tomb: its
//! backend file id (vfs `file_id`, a host file handle for a host
//! directory) and the generation the kernel was given, and a LOOKUP of
//! `.` in it finds the file again by that id and gives it back the same
//! node id and generation. A file removed meanwhile, or a number another
//! file took, is `ESTALE`, as a disk file system answers.
//!
//! Tombs are bounded ([`TOMBS`], oldest go first). They outlive the mount
//! process: at unmount every node the kernel held is buried too, and the
//! tombs are written to a handle map (`/run/walkfs/handles/`, named by
//! the export root's own file id), which the next mount of the same
//! export reads when the kernel first asks for a node it does not know.
//! So a handle taken before a remount opens after it, as on a disk file
//! system (node ids are the host's inode numbers where they can be, so a
//! node keeps its id across mounts). The map is only a hint: every id
//! in it is checked against the file it finds (removed, or its number
//! reused: `ESTALE`).

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::Ordering::Relaxed;

use walkfs_vfs::{Ctx, Errno};

use crate::nodes::Node;
use crate::{abi, stat_of, WalkFuse, ROOT};

/// How many forgotten nodes keep their ids.
const TOMBS: usize = 1 << 18;

/// What a forgotten node leaves.
struct Tomb {
    id: Vec<u8>,
    /// When it was buried (its place in `Tombs::order`).
    seq: u64,
    /// The generation the kernel's handles hold.
    sent: u32,
}

#[derive(Default)]
pub(crate) struct Tombs {
    by_node: HashMap<u64, Tomb>,
    /// (node id, seq) in the order they were buried: a node found again
    /// and forgotten again is there twice, and only the entry of its
    /// current tomb takes it away.
    order: VecDeque<(u64, u64)>,
    seq: u64,
    /// The handle map of an earlier mount was read.
    loaded: bool,
}

/// The handle map's first bytes.
const MAP_MAGIC: &[u8; 8] = b"WFHMAP01";

impl Tombs {
    fn bury(&mut self, node: u64, id: Vec<u8>, sent: u32) {
        self.seq += 1;
        let seq = self.seq;
        self.by_node.insert(node, Tomb { id, seq, sent });
        self.order.push_back((node, seq));
        while self.order.len() > TOMBS {
            if let Some((old, seq)) = self.order.pop_front() {
                if self.by_node.get(&old).is_some_and(|t| t.seq == seq) {
                    self.by_node.remove(&old);
                }
            }
        }
    }
}

impl Tombs {
    /// The map's bytes: magic, then per tomb node id (8), generation (4),
    /// id length (1) and id, oldest first.
    fn encode(&self) -> Vec<u8> {
        let mut out = MAP_MAGIC.to_vec();
        for &(node, seq) in &self.order {
            let Some(t) = self.by_node.get(&node).filter(|t| t.seq == seq) else {
                continue;
            };
            let Ok(len) = u8::try_from(t.id.len()) else {
                continue;
            };
            out.extend_from_slice(&node.to_le_bytes());
            out.extend_from_slice(&t.sent.to_le_bytes());
            out.push(len);
            out.extend_from_slice(&t.id);
        }
        out
    }

    /// Bury what map `bytes` holds under the tombs already here (a node
    /// buried since it was written keeps its newer tomb). A map cut short
    /// or not ours gives what it held up to there.
    fn decode(&mut self, bytes: &[u8]) {
        let Some(mut rest) = bytes.strip_prefix(MAP_MAGIC.as_slice()) else {
            return;
        };
        let mut found = Vec::new();
        while let Some((head, tail)) = rest.split_at_checked(13) {
            let node = u64::from_le_bytes(head[..8].try_into().unwrap_or_default());
            let sent = u32::from_le_bytes(head[8..12].try_into().unwrap_or_default());
            let Some((id, tail)) = tail.split_at_checked(usize::from(head[12])) else {
                break;
            };
            found.push((node, sent, id.to_vec()));
            rest = tail;
        }
        let newer = std::mem::take(&mut self.order);
        let mut by_node = std::mem::take(&mut self.by_node);
        for (node, sent, id) in found {
            if !by_node.contains_key(&node) {
                self.bury(node, id, sent);
            }
        }
        for (node, _) in newer {
            if let Some(t) = by_node.remove(&node) {
                self.bury(node, t.id, t.sent);
            }
        }
    }
}

/// Where the handle maps are kept: `WALKFS_HANDLE_MAPS`, else
/// `/run/walkfs/handles` for root, `$XDG_RUNTIME_DIR/walkfs/handles` for
/// others.
fn maps_dir() -> Option<PathBuf> {
    if let Some(d) = std::env::var_os("WALKFS_HANDLE_MAPS") {
        return Some(PathBuf::from(d));
    }
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } == 0 {
        return Some(PathBuf::from("/run/walkfs/handles"));
    }
    std::env::var_os("XDG_RUNTIME_DIR").map(|d| PathBuf::from(d).join("walkfs/handles"))
}

impl WalkFuse {
    /// The handle map of this mount's export: named by the root's file id.
    fn map_path(&self) -> Option<PathBuf> {
        let id = self.base.file_id(&self.root).ok()?;
        let name: String = id.iter().map(|b| format!("{b:02x}")).collect();
        Some(maps_dir()?.join(name))
    }

    /// The mount ends: bury every node the kernel still holds and write
    /// the handle map for the next mount of this export.
    pub(crate) fn save_handle_map(&self) {
        if !self.exports.load(Relaxed) {
            return;
        }
        let Some(path) = self.map_path() else { return };
        let live: Vec<(u64, u32, walkfs_vfs::Handle)> = self
            .nodes
            .read()
            .by_id
            .iter()
            .filter(|(&id, _)| id != ROOT)
            .map(|(&id, n)| (id, n.sent, n.handle.clone()))
            .collect();
        let mut tombs = self.tombs.lock();
        if !tombs.loaded {
            // Nodes of an earlier mount not asked for in this one.
            tombs.loaded = true;
            if let Ok(bytes) = std::fs::read(&path) {
                tombs.decode(&bytes);
            }
        }
        for (id, sent, h) in live {
            if let Ok(fid) = self.base.file_id(&h) {
                tombs.bury(id, fid, sent);
            }
        }
        let bytes = tombs.encode();
        drop(tombs);
        let tmp = path.with_extension(format!("{}.tmp", std::process::id()));
        let r = path
            .parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|()| std::fs::write(&tmp, &bytes))
            .and_then(|()| std::fs::rename(&tmp, &path));
        if let Err(e) = r {
            let _ = std::fs::remove_file(&tmp);
            tracing::warn!("handle map {}: {e}", path.display());
        }
    }

    /// Read the handle map an earlier mount of this export left (once).
    fn load_handle_map(&self) {
        if self.tombs.lock().loaded {
            return;
        }
        let bytes = self.map_path().and_then(|p| std::fs::read(p).ok());
        let mut tombs = self.tombs.lock();
        if !tombs.loaded {
            tombs.loaded = true;
            if let Some(b) = bytes {
                tombs.decode(&b);
            }
        }
    }

    /// Offer export support at INIT: the backend finds files by id.
    pub(crate) fn init_export(&self) -> bool {
        let on = self.opts.export && self.base.can_export(&self.root);
        self.exports.store(on, Relaxed);
        on
    }

    /// Node `ino` was forgotten: keep its file id.
    pub(crate) fn bury(&self, ino: u64, n: &Node) {
        if !self.exports.load(Relaxed) {
            return;
        }
        match self.base.file_id(&n.handle) {
            Ok(id) => self.tombs.lock().bury(ino, id, n.sent),
            Err(e) => tracing::debug!("node {ino}: no file id ({e})"),
        }
    }

    /// LOOKUP of `.` (the node itself, found again by its file id when
    /// forgotten) or `..` (a directory's parent) in node `ino`.
    pub(crate) fn lookup_export(
        &self,
        ctx: &Ctx,
        ino: u64,
        name: &[u8],
    ) -> Result<abi::Attr, Errno> {
        if !self.exports.load(Relaxed) {
            return Err(Errno::EINVAL);
        }
        if name == b".." {
            if ino == ROOT {
                return Err(Errno::ENOENT);
            }
            let (p, _) = self.base.parent_of(&self.node(ino)?).map_err(|e| match e {
                Errno::EBUSY => Errno::ENOENT,
                e => e,
            })?;
            let x = stat_of(ctx, &p)?;
            return self.enter(ctx, p, &x);
        }
        match self.node(ino) {
            Ok(h) => {
                let x = stat_of(ctx, &h)?;
                self.enter(ctx, h, &x)
            }
            Err(Errno::ESTALE) => {
                self.load_handle_map();
                let (id, sent) = {
                    let tombs = self.tombs.lock();
                    let t = tombs.by_node.get(&ino).ok_or(Errno::ESTALE)?;
                    (t.id.clone(), t.sent)
                };
                let h = self.base.open_by_id(&self.root, &id)?;
                let x = stat_of(ctx, &h)?;
                self.enter_as(ctx, h, &x, Some((ino, sent)))
            }
            Err(e) => Err(e),
        }
    }
}
