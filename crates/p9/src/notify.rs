//! The records of walkfs's change-notification extension
//! (docs/notify-protocol.md), shared by the server that writes them and
//! the client that reads them.
//!
//! A client opens a notification fid with `Txattrwalk(fid, newfid,`
//! [`NAME`]`)` and reads records from it; each record is
//! `kind[1] ino[8] namelen[2] name[namelen]`, little-endian.

/// The xattr name that opens a notification fid. No Linux client can send
/// it: kernel xattr names always carry a namespace prefix.
pub const NAME: &[u8] = b"walkfs.notify";
/// Protocol version, given as the `Rxattrwalk` size.
pub const VERSION: u64 = 1;
/// `name` in directory `ino` appeared, went, or names another file.
pub const ENTRY: u8 = 1;
/// The attributes, data or symlink body of `ino` changed.
pub const INODE: u8 = 2;
/// Changes were lost: drop everything cached.
pub const ALL: u8 = 3;
/// Some changes may go unseen from now on: revalidate.
pub const DEGRADED: u8 = 4;
/// Bytes before the name.
const HEAD: usize = 1 + 8 + 2;
/// The smallest `Tread` count a server accepts: one record with the
/// longest name fits.
pub const MIN_READ: u32 = (HEAD + 255) as u32;

/// Append one record to `out`.
pub fn encode(kind: u8, ino: u64, name: &[u8], out: &mut Vec<u8>) {
    let name = &name[..name.len().min(u16::MAX as usize)];
    out.push(kind);
    out.extend_from_slice(&ino.to_le_bytes());
    out.extend_from_slice(&(name.len() as u16).to_le_bytes());
    out.extend_from_slice(name);
}

/// The records in `buf` as (kind, ino, name), up to the first one cut
/// short.
pub fn decode(mut buf: &[u8]) -> impl Iterator<Item = (u8, u64, &[u8])> {
    std::iter::from_fn(move || {
        let head = buf.get(..HEAD)?;
        let mut ino = [0u8; 8];
        ino.copy_from_slice(&head[1..9]);
        let len = u16::from_le_bytes([head[9], head[10]]) as usize;
        let name = buf.get(HEAD..HEAD + len)?;
        let kind = head[0];
        buf = &buf[HEAD + len..];
        Some((kind, u64::from_le_bytes(ino), name))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_stop_at_a_short_one() {
        let mut b = Vec::new();
        encode(ENTRY, 7, b"name", &mut b);
        encode(ALL, 0, b"", &mut b);
        b.extend_from_slice(&[INODE, 1, 2]);
        let got: Vec<_> = decode(&b).collect();
        assert_eq!(got, vec![(ENTRY, 7, &b"name"[..]), (ALL, 0, &b""[..])]);
        let mut long = Vec::new();
        encode(ENTRY, 1, &[b'x'; 255], &mut long);
        assert_eq!(long.len(), MIN_READ as usize);
    }
}
