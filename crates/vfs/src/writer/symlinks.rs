//! Chunk chains in the chunk arena (long names and symlink bodies), and
//! the symlink bodies cached on inodes.

use crate::dcache::*;
use crate::sync::Ordering::Relaxed;

use super::Writer;

impl Writer {
    /// Store `bytes` in a new chunk chain; its head, or 0 if the arena is
    /// full.
    pub fn store_chunks(&mut self, dc: &Dcache, bytes: &[u8]) -> u32 {
        let mut head = 0;
        let mut prev: Option<&Chunk> = None;
        for part in bytes.chunks(CHUNK_BYTES) {
            let idx = if self.free_chunk != 0 {
                let i = self.free_chunk;
                self.free_chunk = dc.chunks.get(i).map_or(0, |c| c.next.load(Relaxed));
                i
            } else {
                let i = self.next_chunk;
                self.next_chunk += 1;
                i
            };
            let Some(c) = dc.chunks.get_or_alloc(idx) else {
                self.free_chunks(dc, head);
                return 0;
            };
            self.n_chunks += 1;
            for (i, w) in c.data.iter().enumerate() {
                let mut b = [0u8; 8];
                let lo = (i * 8).min(part.len());
                let hi = (i * 8 + 8).min(part.len());
                b[..hi - lo].copy_from_slice(&part[lo..hi]);
                w.store(u64::from_le_bytes(b), Relaxed);
            }
            c.next.store(0, Relaxed);
            c.len.store(bytes.len() as u32, Relaxed);
            match prev {
                Some(p) => p.next.store(idx, Relaxed),
                None => head = idx,
            }
            prev = Some(c);
        }
        head
    }

    pub fn free_chunks(&mut self, dc: &Dcache, mut head: u32) {
        while head != 0 {
            let Some(c) = dc.chunks.get(head) else { return };
            let next = c.next.load(Relaxed);
            c.next.store(self.free_chunk, Relaxed);
            self.free_chunk = head;
            self.n_chunks -= 1;
            head = next;
        }
    }

    /// Cache a symlink body with its length.
    pub fn cache_link(&mut self, dc: &Dcache, idx: IIdx, body: &[u8]) {
        let Some(i) = dc.inode(idx) else { return };
        if i.flags.load(Relaxed) & I_CACHED_LINK != 0 {
            return;
        }
        let head = self.store_chunks(dc, body);
        if head == 0 {
            return;
        }
        i.seq.write_begin();
        i.rdev.store(head, Relaxed);
        i.flags
            .store(i.flags.load(Relaxed) | I_CACHED_LINK, Relaxed);
        i.seq.write_end();
    }

    /// Drop a cached symlink body (caller is inside the inode's write
    /// section).
    pub(super) fn drop_link_locked(&mut self, dc: &Dcache, i: &Inode) {
        let flags = i.flags.load(Relaxed);
        if flags & I_CACHED_LINK != 0 {
            let head = i.rdev.load(Relaxed);
            i.flags.store(flags & !I_CACHED_LINK, Relaxed);
            i.rdev.store(0, Relaxed);
            self.free_chunks(dc, head);
        }
    }
}
