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

/// The xattr name that opens a notification fid of version 2, whose
/// records also say what happened. A server that knows only version 1
/// answers it as any unknown attribute (an error): the client then asks
/// for [`NAME`].
pub const NAME_V2: &[u8] = b"walkfs.notify.2";
/// Version 2, given as the `Rxattrwalk` size.
pub const VERSION_2: u64 = 2;
/// Bytes before the name in a version 2 record.
const HEAD_V2: usize = 1 + 8 + 1 + 1 + 4 + 8 + 2;
/// [`MIN_READ`] of version 2.
pub const MIN_READ_V2: u32 = (HEAD_V2 + 255) as u32;
/// The xattr name that opens a notification fid of version 3: version
/// 2's records, and poll reads ([`POLL`]). A server without it answers
/// with an error, and the client asks for [`NAME_V2`].
pub const NAME_V3: &[u8] = b"walkfs.notify.3";
/// Version 3, given as the `Rxattrwalk` size.
pub const VERSION_3: u64 = 3;
/// The `Tread` offset of a poll (version 3): the server first answers a
/// read parked on the fid with what is queued, then this one at once
/// with what is left, possibly nothing. Sent after a reply that must not
/// overtake the reports queued before it (a lock grant): once it is
/// answered, every such report has reached the client.
pub const POLL: u64 = u64::MAX;
/// `flags` bit of a version 2 record: the file is a directory.
pub const IS_DIR: u8 = 1;

/// A version 2 record:
/// `kind[1] ino[8] what[1] flags[1] cookie[4] dir[8] namelen[2] name`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record<'a> {
    pub kind: u8,
    /// ENTRY: the directory; INODE: the file.
    pub ino: u64,
    /// What happened (`walkfs_fsapi::What::code`; 0: not known).
    pub what: u8,
    pub flags: u8,
    /// Pairs the two halves of a rename (0: none known).
    pub cookie: u32,
    /// INODE: the directory where the change was seen (0: not known),
    /// `name` its name there. ENTRY: 0.
    pub dir: u64,
    pub name: &'a [u8],
}

/// Append one version 2 record to `out`.
pub fn encode_v2(r: &Record<'_>, out: &mut Vec<u8>) {
    let name = &r.name[..r.name.len().min(u16::MAX as usize)];
    out.push(r.kind);
    out.extend_from_slice(&r.ino.to_le_bytes());
    out.push(r.what);
    out.push(r.flags);
    out.extend_from_slice(&r.cookie.to_le_bytes());
    out.extend_from_slice(&r.dir.to_le_bytes());
    out.extend_from_slice(&(name.len() as u16).to_le_bytes());
    out.extend_from_slice(name);
}

/// The version 2 records in `buf`, up to the first one cut short.
pub fn decode_v2(mut buf: &[u8]) -> impl Iterator<Item = Record<'_>> {
    std::iter::from_fn(move || {
        let h = buf.get(..HEAD_V2)?;
        let u64_at = |i: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&h[i..i + 8]);
            u64::from_le_bytes(b)
        };
        let len = u16::from_le_bytes([h[23], h[24]]) as usize;
        let name = buf.get(HEAD_V2..HEAD_V2 + len)?;
        let r = Record {
            kind: h[0],
            ino: u64_at(1),
            what: h[9],
            flags: h[10],
            cookie: u32::from_le_bytes([h[11], h[12], h[13], h[14]]),
            dir: u64_at(15),
            name,
        };
        buf = &buf[HEAD_V2 + len..];
        Some(r)
    })
}

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

    #[test]
    fn version_2_records_round_trip_and_stop_at_a_short_one() {
        let a = Record {
            kind: ENTRY,
            ino: 7,
            what: 3,
            flags: IS_DIR,
            cookie: 0xdead_beef,
            dir: 0,
            name: b"name",
        };
        let b = Record {
            kind: INODE,
            ino: 9,
            what: 5,
            flags: 0,
            cookie: 0,
            dir: 7,
            name: b"f",
        };
        let mut buf = Vec::new();
        encode_v2(&a, &mut buf);
        encode_v2(&b, &mut buf);
        let whole = buf.len();
        encode_v2(&a, &mut buf);
        buf.truncate(whole + 5);
        let got: Vec<_> = decode_v2(&buf).collect();
        assert_eq!(got, vec![a.clone(), b]);
        let mut long = Vec::new();
        encode_v2(
            &Record {
                name: &[b'x'; 255],
                ..a
            },
            &mut long,
        );
        assert_eq!(long.len(), MIN_READ_V2 as usize);
    }
}
