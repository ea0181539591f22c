//! walkfs's space extension: `fallocate` and `SEEK_DATA`/`SEEK_HOLE` on
//! an open fid, which 9P2000.L has no message for.
//!
//! Each is one `Txattrwalk` whose name carries the call, on the open fid:
//!
//! - `walkfs.fallocate:MODE:OFFSET:LENGTH` (decimal): the server runs
//!   `fallocate(MODE, OFFSET, LENGTH)` on the fid's open file and answers
//!   `Rxattrwalk size=0`;
//! - `walkfs.seek:WHENCE:OFFSET` (`WHENCE` 3: `SEEK_DATA`, 4:
//!   `SEEK_HOLE`): the answer's `size` is where the data or hole starts.
//!
//! On success `newfid` names nothing (it reads nothing); the client
//! clunks it. An error is the call's own errno (`EOPNOTSUPP` for a mode
//! the host's file system lacks, `ENXIO` past the end). A walkfs client
//! sends them only to a server that keeps its order (p9::order: `walkfs
//! serve`); with any other, and with a server older than the extension
//! (which answers the unknown name `EOPNOTSUPP`), `fallocate` is
//! `EOPNOTSUPP` and a file is data from start to end. No Linux client can
//! send the names (kernel xattr names carry a namespace prefix).

/// The prefix of a `fallocate` call's name.
pub const FALLOCATE: &[u8] = b"walkfs.fallocate:";
/// The prefix of a `SEEK_DATA`/`SEEK_HOLE` call's name.
pub const SEEK: &[u8] = b"walkfs.seek:";

/// The name of `fallocate(mode, off, len)`.
pub fn fallocate_name(mode: i32, off: u64, len: u64) -> Vec<u8> {
    format!("walkfs.fallocate:{mode}:{off}:{len}").into_bytes()
}

/// The name of `lseek(off, whence)`.
pub fn seek_name(whence: i32, off: u64) -> Vec<u8> {
    format!("walkfs.seek:{whence}:{off}").into_bytes()
}

/// The decimal fields after a prefix, `N` of them exactly.
fn fields<const N: usize>(rest: &[u8]) -> Option<[u64; N]> {
    let s = std::str::from_utf8(rest).ok()?;
    let mut out = [0u64; N];
    let mut it = s.split(':');
    for o in &mut out {
        let f = it.next()?;
        if f.is_empty() || f.len() > 20 || !f.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        *o = f.parse().ok()?;
    }
    it.next().is_none().then_some(out)
}

/// `(mode, off, len)` of a `fallocate` name (after [`FALLOCATE`]).
pub fn parse_fallocate(rest: &[u8]) -> Option<(i32, u64, u64)> {
    let [mode, off, len] = fields::<3>(rest)?;
    Some((i32::try_from(mode).ok()?, off, len))
}

/// `(whence, off)` of a seek name (after [`SEEK`]).
pub fn parse_seek(rest: &[u8]) -> Option<(i32, u64)> {
    let [whence, off] = fields::<2>(rest)?;
    Some((i32::try_from(whence).ok()?, off))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_malformed_ones_are_refused() {
        let n = fallocate_name(3, 4096, 8192);
        assert_eq!(
            parse_fallocate(&n[FALLOCATE.len()..]),
            Some((3, 4096, 8192))
        );
        let n = seek_name(4, 17);
        assert_eq!(parse_seek(&n[SEEK.len()..]), Some((4, 17)));
        for bad in [
            &b""[..],
            b"1:2",
            b"1:2:3:4",
            b"-1:2:3",
            b"1::3",
            b"a:2:3",
            b"1:2:3 ",
        ] {
            assert_eq!(parse_fallocate(bad), None, "{bad:?}");
        }
        assert_eq!(parse_fallocate(b"99999999999:0:1"), None, "mode past i32");
        assert_eq!(parse_seek(b"3:99999999999999999999999"), None);
    }
}
