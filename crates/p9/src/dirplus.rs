//! walkfs's directory-read-with-attributes extension
//! (docs/readdirplus-protocol.md), shared by the server that writes the
//! listing and the client that reads it.
//!
//! A client sends `Txattrwalk(dirfid, newfid,` [`NAME`]`)`; the server
//! answers with the listing's size and `newfid` reads it (`Tread`, any
//! offset, `Tclunk` when done), as an extended attribute is read. Each
//! record is `name[s] stat[Rgetattr's stat] link[s]` (`link` is the body
//! of a symlink, empty otherwise), in the directory's order, `.` and `..`
//! left out. A server without the extension answers the `Txattrwalk`
//! with an error (no Linux client can send the name: kernel xattr names
//! carry a namespace prefix), and the client lists with `Treaddir`.

use crate::{DecodeError, Reader, Stat, Str, Wire};

/// The xattr name that asks for a listing with attributes.
pub const NAME: &[u8] = b"walkfs.readdirplus";

/// A listing larger than this is refused (`E2BIG`): the client then
/// lists with `Treaddir` and looks names up as it needs them.
pub const MAX_LISTING: usize = 16 << 20;

/// One entry of a listing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record<'a> {
    pub name: &'a [u8],
    pub stat: Stat,
    /// A symlink's body (empty for other files).
    pub link: &'a [u8],
}

/// Append one record to `out`.
pub fn encode(name: &[u8], stat: &Stat, link: &[u8], out: &mut Vec<u8>) {
    Str(name).put(out);
    stat.put(out);
    Str(link).put(out);
}

/// The records of a listing, up to the first malformed one (an error).
pub fn decode(buf: &[u8]) -> impl Iterator<Item = Result<Record<'_>, DecodeError>> {
    let mut r = Reader::new(buf);
    let mut failed = false;
    std::iter::from_fn(move || {
        if failed || r.remaining() == 0 {
            return None;
        }
        let rec = (|| {
            Ok(Record {
                name: Str::get(&mut r)?.0,
                stat: Stat::get(&mut r)?,
                link: Str::get(&mut r)?.0,
            })
        })();
        failed = rec.is_err();
        Some(rec)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_a_cut_one_is_an_error() {
        let st = Stat {
            mode: 0o120777,
            size: 3,
            ..Stat::default()
        };
        let mut b = Vec::new();
        encode(b"a", &Stat::default(), b"", &mut b);
        encode(b"link", &st, b"../x", &mut b);
        let got: Vec<_> = decode(&b).collect::<Result<_, _>>().expect("decodes");
        assert_eq!(got.len(), 2);
        assert_eq!(
            (got[1].name, got[1].stat, got[1].link),
            (&b"link"[..], st, &b"../x"[..])
        );
        let cut = &b[..b.len() - 2];
        let got: Vec<_> = decode(cut).collect();
        assert_eq!(got.len(), 2);
        assert!(got[0].is_ok() && got[1].is_err());
    }
}
