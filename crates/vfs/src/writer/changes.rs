//! Write-back bookkeeping: what our own changes do to the cached
//! attributes. A change sent without waiting moves times, link counts and
//! sizes here rather than marking them stale; attributes a change got back
//! are cached; the attribute generation and the read-ahead log move along.

use walkfs_fsapi::Attr;

use crate::dcache::*;
use crate::sync::Ordering::{Relaxed, Release};
use crate::Inner;

use super::Writer;

impl Writer {
    /// A change went to a backend that does not wait for its server
    /// (asynchronous changes): what it does to the inode's attributes is
    /// known here — its times move to `now`, its link count by `nlink` (a
    /// name or subdirectory made or removed), its size grows to `end` (a
    /// write) — so they are kept rather than marked stale for a round
    /// trip the next stat would pay (as NFS's wcc data spares one). Stale
    /// attributes stay stale: the next stat asks the server, which has
    /// the change by then.
    /// Inode `idx` changed (renamed, a link gone) as of `now`: its ctime
    /// and link count move, its mtime does not. Nothing for attributes
    /// already stale (the backend will say).
    pub fn ctime_changed(
        &mut self,
        dc: &Dcache,
        idx: IIdx,
        now: walkfs_fsapi::Timespec,
        nlink: i32,
    ) {
        let Some(i) = dc.inode(idx) else { return };
        if i.flags.load(Relaxed) & I_STALE != 0 {
            return;
        }
        i.seq.write_begin();
        i.ctime.store(now.as_nanos(), Relaxed);
        let n = i.nlink.load(Relaxed);
        i.nlink.store(n.saturating_add_signed(nlink), Relaxed);
        i.seq.write_end();
    }

    pub fn touched(
        &mut self,
        dc: &Dcache,
        idx: IIdx,
        now: walkfs_fsapi::Timespec,
        nlink: i32,
        end: u64,
    ) {
        let Some(i) = dc.inode(idx) else { return };
        if i.flags.load(Relaxed) & I_STALE != 0 {
            return;
        }
        i.seq.write_begin();
        i.mtime.store(now.as_nanos(), Relaxed);
        i.ctime.store(now.as_nanos(), Relaxed);
        let n = i.nlink.load(Relaxed);
        i.nlink.store(n.saturating_add_signed(nlink), Relaxed);
        if i.size.load(Relaxed) < end {
            i.size.store(end, Relaxed);
            // What a 4 KiB-block file system allocates (ext4, xfs): du
            // of a tree just written reads as it will once refreshed.
            i.blocks.store(end.div_ceil(4096) * 8, Relaxed);
        }
        i.seq.write_end();
    }
}

impl Inner {
    /// A write ending at `end` was sent without waiting: grow the cached
    /// size and move the times ([`Writer::touched`]), if `ino` still
    /// holds backend node `node`.
    pub fn wrote(&self, ino: IIdx, node: u64, end: u64, now: walkfs_fsapi::Timespec) {
        let mut w = self.writer();
        if self
            .dc
            .inode(ino)
            .is_some_and(|i| i.node.load(Relaxed) == node)
        {
            w.touched(&self.dc, ino, now, 0, end);
            self.attr_gen.fetch_add(1, Release);
            self.log_attrs_of(ino, node);
        }
    }

    /// Log a change of ours to the attributes of backend node `node`,
    /// cached in inode `ino`, for the directory read-ahead: by the slot's
    /// superblock while the slot still holds the node, else as touching
    /// everything.
    pub fn log_attrs_of(&self, ino: IIdx, node: u64) {
        if !self.ra.on() {
            return;
        }
        match self.dc.inode(ino).map(|i| {
            (
                i.node.load(Relaxed),
                (i.flags.load(Relaxed) >> SB_SHIFT) as usize,
            )
        }) {
            Some((n, sb)) if n == node => self.attrs_changed(sb, node),
            _ => self.ra_log.everything(),
        }
    }

    /// Cache the attributes a change made through walkfs (chmod, chown,
    /// truncate, utimes) got back from the backend, if `ino` still holds
    /// backend node `node`. Moves the attribute generation in the same
    /// writer section: a miss that asked the backend before this change
    /// and caches its answer after it sees the move and keeps these.
    pub fn changed_attrs(&self, ino: IIdx, node: u64, attr: &Attr) {
        let mut w = self.writer();
        if self
            .dc
            .inode(ino)
            .is_some_and(|i| i.node.load(Relaxed) == node)
        {
            w.store_attrs(&self.dc, ino, attr);
        }
        w.changed();
        self.attr_gen.fetch_add(1, Release);
        self.log_attrs_of(ino, node);
    }
}
