//! walkfs's inode-number grants (docs/inode-grants.md), shared by the
//! server that hands numbers out and the client that spends them.
//!
//! A client asks for a range with `Txattrwalk(fid, newfid,` [`NAME`]`)`:
//! `walkfs serve` answers `Rxattrwalk size=`[`RECORD`] and a `Tread` of
//! `newfid` gives the range, `base[8] count[8]` little-endian (the client
//! clunks the fid). The numbers `base..base+count` belong to this
//! connection until it closes: it names one in each `Tlcreatei`,
//! `Tmkdiri`, `Tsymlinki` or `Tmknodi` it sends, and the file made gets
//! that number as its qid path, for every client, for as long as the
//! server runs. Any other server answers the `Txattrwalk` with an error
//! (no Linux client can send the name: kernel xattr names carry a
//! namespace prefix), and the client creates as 9P2000.L does.

/// The xattr name that asks for a range of inode numbers.
pub const NAME: &[u8] = b"walkfs.inogrant";
/// The xattr name prefix that reclaims a range after a reconnect: the
/// name is this followed by the range's record.
pub const RECLAIM: &[u8] = b"walkfs.inoreclaim:";
/// Bytes of the answer: `base[8] count[8] ticket[8]`.
pub const RECORD: u64 = 24;

/// The answer to a grant: numbers `base..base + count`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grant {
    pub base: u64,
    pub count: u64,
    /// The server's proof that it granted this range.
    pub ticket: u64,
}

impl Grant {
    pub fn encode(&self) -> [u8; RECORD as usize] {
        let mut out = [0u8; RECORD as usize];
        out[..8].copy_from_slice(&self.base.to_le_bytes());
        out[8..16].copy_from_slice(&self.count.to_le_bytes());
        out[16..].copy_from_slice(&self.ticket.to_le_bytes());
        out
    }

    /// `None` unless `buf` is exactly one record of a non-empty range
    /// that does not wrap.
    pub fn decode(buf: &[u8]) -> Option<Grant> {
        let buf: &[u8; RECORD as usize] = buf.try_into().ok()?;
        let base = u64::from_le_bytes(buf[..8].try_into().ok()?);
        let count = u64::from_le_bytes(buf[8..16].try_into().ok()?);
        let ticket = u64::from_le_bytes(buf[16..].try_into().ok()?);
        (count > 0 && base.checked_add(count).is_some()).then_some(Grant {
            base,
            count,
            ticket,
        })
    }

    pub fn contains(&self, ino: u64) -> bool {
        ino >= self.base && ino - self.base < self.count
    }
}

#[cfg(test)]
mod tests {
    use super::Grant;

    #[test]
    fn a_grant_round_trips_and_bad_records_are_refused() {
        let g = Grant {
            base: 0x7f00_0000_0000_0000,
            count: 4096,
            ticket: 99,
        };
        assert_eq!(Grant::decode(&g.encode()), Some(g));
        assert!(g.contains(g.base) && g.contains(g.base + 4095));
        assert!(!g.contains(g.base + 4096) && !g.contains(g.base - 1));
        assert_eq!(Grant::decode(&g.encode()[..23]), None);
        let empty = Grant {
            base: 1,
            count: 0,
            ticket: 0,
        };
        assert_eq!(Grant::decode(&empty.encode()), None);
        let wraps = Grant {
            base: u64::MAX,
            count: 2,
            ticket: 0,
        };
        assert_eq!(Grant::decode(&wraps.encode()), None);
    }
}
