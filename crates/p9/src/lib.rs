//! The 9P2000.L wire format.
//!
//! A message is `size[4] type[1] tag[2] body`, little-endian, `size`
//! counting itself. [`Fcall::decode`] reads one whole frame and borrows
//! names and payloads from it (the frame is the only copy of a `Twrite`'s
//! data); every length field is checked against what is left of the frame
//! before it is used, and a frame must be consumed exactly. Encoding
//! appends to a caller's buffer; [`begin`]/[`finish`] let a server build a
//! `Rread` or `Rreaddir` in place, reading file data straight into the
//! reply.
//!
//! The messages are declared once, in the table at [`messages!`]'s call:
//! field order there is wire order, so decoding, encoding and the enum
//! cannot disagree.

use std::fmt;
use std::io::{self, Read};

pub mod dirplus;
pub mod inogrant;
pub mod lease;
pub mod locks;
pub mod notify;
pub mod order;
pub mod space;
pub mod transport;
pub use transport::{read_secret_file, Addr, Listener, Stream};

/// The protocol version string this codec speaks.
pub const VERSION: &[u8] = b"9P2000.L";
/// Bytes before a message's body: size, type, tag.
pub const HEADER: usize = 7;
/// The tag of `Tversion`.
pub const NOTAG: u16 = 0xffff;
/// "No fid" (an attach without authentication).
pub const NOFID: u32 = 0xffff_ffff;
/// Most names one `Twalk` may carry.
pub const MAXWELEM: usize = 16;
/// Header bytes of a `Twrite`/`Rread` besides the data: what `msize`
/// leaves for payload is `msize - IOHDRSZ`.
pub const IOHDRSZ: u32 = 24;
/// Smallest `msize` worth negotiating.
pub const MIN_MSIZE: u32 = 4096;

/// `Qid.ty` bits.
pub const QTDIR: u8 = 0x80;
pub const QTSYMLINK: u8 = 0x02;
pub const QTAUTH: u8 = 0x08;
pub const QTFILE: u8 = 0;

/// `Tgetattr.request_mask` / `Rgetattr.valid` bits.
pub const GETATTR_MODE: u64 = 0x1;
pub const GETATTR_NLINK: u64 = 0x2;
pub const GETATTR_UID: u64 = 0x4;
pub const GETATTR_GID: u64 = 0x8;
pub const GETATTR_RDEV: u64 = 0x10;
pub const GETATTR_ATIME: u64 = 0x20;
pub const GETATTR_MTIME: u64 = 0x40;
pub const GETATTR_CTIME: u64 = 0x80;
pub const GETATTR_INO: u64 = 0x100;
pub const GETATTR_SIZE: u64 = 0x200;
pub const GETATTR_BLOCKS: u64 = 0x400;
pub const GETATTR_BASIC: u64 = 0x7ff;
pub const GETATTR_BTIME: u64 = 0x800;
pub const GETATTR_GEN: u64 = 0x1000;

/// `Tsetattr.valid` bits.
pub const SETATTR_MODE: u32 = 0x1;
pub const SETATTR_UID: u32 = 0x2;
pub const SETATTR_GID: u32 = 0x4;
pub const SETATTR_SIZE: u32 = 0x8;
pub const SETATTR_ATIME: u32 = 0x10;
pub const SETATTR_MTIME: u32 = 0x20;
pub const SETATTR_CTIME: u32 = 0x40;
pub const SETATTR_ATIME_SET: u32 = 0x80;
pub const SETATTR_MTIME_SET: u32 = 0x100;

/// `Tunlinkat.flags`: remove a directory (Linux's `AT_REMOVEDIR`).
pub const AT_REMOVEDIR: u32 = 0x200;

/// Why a frame did not decode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecodeError {
    /// A field runs past the end of the frame.
    Short,
    /// The size field disagrees with the frame's length.
    SizeMismatch { declared: u32, actual: usize },
    /// Bytes left over after the last field.
    Trailing(usize),
    /// A message type this codec does not know.
    UnknownType(u8),
    /// A walk with more than [`MAXWELEM`] names or qids.
    TooManyElements(u16),
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::Short => write!(f, "a field runs past the end of the message"),
            DecodeError::SizeMismatch { declared, actual } => {
                write!(f, "size field says {declared} bytes, frame has {actual}")
            }
            DecodeError::Trailing(n) => write!(f, "{n} bytes after the last field"),
            DecodeError::UnknownType(t) => write!(f, "unknown message type {t}"),
            DecodeError::TooManyElements(n) => {
                write!(f, "{n} walk elements (at most {MAXWELEM})")
            }
        }
    }
}

impl std::error::Error for DecodeError {}

/// A file's identity on the server: type bits, version, unique path.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Qid {
    pub ty: u8,
    pub version: u32,
    pub path: u64,
}

/// A `string[s]`: two-byte length, then bytes (not necessarily UTF-8).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Str<'a>(pub &'a [u8]);

/// A payload: four-byte count, then bytes (`Twrite`, `Rread`, `Rreaddir`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Data<'a>(pub &'a [u8]);

/// The names of a `Twalk`, held inline (no allocation per walk).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Names<'a> {
    len: u8,
    items: [&'a [u8]; MAXWELEM],
}

impl<'a> Names<'a> {
    /// `None` when there are more than [`MAXWELEM`] names.
    pub fn new(names: &[&'a [u8]]) -> Option<Names<'a>> {
        if names.len() > MAXWELEM {
            return None;
        }
        let mut n = Names::default();
        n.items[..names.len()].copy_from_slice(names);
        n.len = names.len() as u8;
        Some(n)
    }
    pub fn as_slice(&self) -> &[&'a [u8]] {
        &self.items[..self.len as usize]
    }
}

/// The qids of a `Rwalk`, held inline.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Qids {
    len: u8,
    items: [Qid; MAXWELEM],
}

impl Qids {
    pub fn push(&mut self, q: Qid) -> bool {
        if (self.len as usize) < MAXWELEM {
            self.items[self.len as usize] = q;
            self.len += 1;
            true
        } else {
            false
        }
    }
    pub fn as_slice(&self) -> &[Qid] {
        &self.items[..self.len as usize]
    }
}

/// A trailing `u32` some peers omit (`Tfsync.datasync` came late to the
/// Linux client): read when present, else 0; always written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OptU32(pub u32);

/// A bounds-checked cursor over one frame.
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Reader<'a> {
        Reader { buf, pos: 0 }
    }
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }
    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if n > self.remaining() {
            return Err(DecodeError::Short);
        }
        let b = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(b)
    }
    fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let mut a = [0; N];
        a.copy_from_slice(self.bytes(N)?);
        Ok(a)
    }
}

/// A field type: how it reads from and writes to the wire.
pub trait Wire<'a>: Sized {
    fn get(r: &mut Reader<'a>) -> Result<Self, DecodeError>;
    fn put(&self, w: &mut Vec<u8>);
}

macro_rules! wire_int {
    ($($t:ty),*) => {$(
        impl<'a> Wire<'a> for $t {
            fn get(r: &mut Reader<'a>) -> Result<Self, DecodeError> {
                Ok(<$t>::from_le_bytes(r.array()?))
            }
            fn put(&self, w: &mut Vec<u8>) {
                w.extend_from_slice(&self.to_le_bytes());
            }
        }
    )*};
}
wire_int!(u8, u16, u32, u64);

impl<'a> Wire<'a> for Qid {
    fn get(r: &mut Reader<'a>) -> Result<Self, DecodeError> {
        Ok(Qid {
            ty: u8::get(r)?,
            version: u32::get(r)?,
            path: u64::get(r)?,
        })
    }
    fn put(&self, w: &mut Vec<u8>) {
        self.ty.put(w);
        self.version.put(w);
        self.path.put(w);
    }
}

impl<'a> Wire<'a> for Str<'a> {
    fn get(r: &mut Reader<'a>) -> Result<Self, DecodeError> {
        let n = u16::get(r)? as usize;
        Ok(Str(r.bytes(n)?))
    }
    fn put(&self, w: &mut Vec<u8>) {
        // Callers keep strings under 64 KiB (names are at most 255 bytes,
        // paths 4096); a longer one is cut rather than mis-framed.
        let b = &self.0[..self.0.len().min(u16::MAX as usize)];
        (b.len() as u16).put(w);
        w.extend_from_slice(b);
    }
}

impl<'a> Wire<'a> for Data<'a> {
    fn get(r: &mut Reader<'a>) -> Result<Self, DecodeError> {
        let n = u32::get(r)? as usize;
        Ok(Data(r.bytes(n)?))
    }
    fn put(&self, w: &mut Vec<u8>) {
        (self.0.len() as u32).put(w);
        w.extend_from_slice(self.0);
    }
}

impl<'a> Wire<'a> for Names<'a> {
    fn get(r: &mut Reader<'a>) -> Result<Self, DecodeError> {
        let n = u16::get(r)?;
        if n as usize > MAXWELEM {
            return Err(DecodeError::TooManyElements(n));
        }
        let mut names = Names::default();
        for i in 0..n as usize {
            names.items[i] = Str::get(r)?.0;
        }
        names.len = n as u8;
        Ok(names)
    }
    fn put(&self, w: &mut Vec<u8>) {
        (self.len as u16).put(w);
        for n in self.as_slice() {
            Str(n).put(w);
        }
    }
}

impl<'a> Wire<'a> for Qids {
    fn get(r: &mut Reader<'a>) -> Result<Self, DecodeError> {
        let n = u16::get(r)?;
        if n as usize > MAXWELEM {
            return Err(DecodeError::TooManyElements(n));
        }
        let mut q = Qids::default();
        for _ in 0..n {
            q.push(Qid::get(r)?);
        }
        Ok(q)
    }
    fn put(&self, w: &mut Vec<u8>) {
        (self.len as u16).put(w);
        for q in self.as_slice() {
            q.put(w);
        }
    }
}

impl<'a> Wire<'a> for OptU32 {
    fn get(r: &mut Reader<'a>) -> Result<Self, DecodeError> {
        if r.remaining() == 0 {
            Ok(OptU32(0))
        } else {
            Ok(OptU32(u32::get(r)?))
        }
    }
    fn put(&self, w: &mut Vec<u8>) {
        self.0.put(w);
    }
}

/// `Rgetattr`'s body, a struct of its own because it is large.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stat {
    pub valid: u64,
    pub qid: Qid,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub nlink: u64,
    pub rdev: u64,
    pub size: u64,
    pub blksize: u64,
    pub blocks: u64,
    pub atime_sec: u64,
    pub atime_nsec: u64,
    pub mtime_sec: u64,
    pub mtime_nsec: u64,
    pub ctime_sec: u64,
    pub ctime_nsec: u64,
    pub btime_sec: u64,
    pub btime_nsec: u64,
    pub gen: u64,
    pub data_version: u64,
}

/// `Tsetattr`'s body.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SetAttr {
    pub valid: u32,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    pub atime_sec: u64,
    pub atime_nsec: u64,
    pub mtime_sec: u64,
    pub mtime_nsec: u64,
}

/// `Rstatfs`'s body.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StatFs {
    pub ty: u32,
    pub bsize: u32,
    pub blocks: u64,
    pub bfree: u64,
    pub bavail: u64,
    pub files: u64,
    pub ffree: u64,
    pub fsid: u64,
    pub namelen: u32,
}

/// Structs whose fields are all plain wire fields, in order.
macro_rules! wire_struct {
    ($($t:ident { $($f:ident),* })*) => {$(
        impl<'a> Wire<'a> for $t {
            fn get(r: &mut Reader<'a>) -> Result<Self, DecodeError> {
                Ok($t { $($f: Wire::get(r)?),* })
            }
            fn put(&self, w: &mut Vec<u8>) {
                $( self.$f.put(w); )*
            }
        }
    )*};
}
wire_struct! {
    Stat { valid, qid, mode, uid, gid, nlink, rdev, size, blksize, blocks,
           atime_sec, atime_nsec, mtime_sec, mtime_nsec, ctime_sec, ctime_nsec,
           btime_sec, btime_nsec, gen, data_version }
    SetAttr { valid, mode, uid, gid, size, atime_sec, atime_nsec, mtime_sec, mtime_nsec }
    StatFs { ty, bsize, blocks, bfree, bavail, files, ffree, fsid, namelen }
}

macro_rules! messages {
    ($( $(#[$doc:meta])* $name:ident = $ty:literal { $($field:ident : $fty:ty),* $(,)? } )*) => {
        /// One 9P2000.L message, borrowing its names and data from a frame.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum Fcall<'a> {
            $( $(#[$doc])* $name { $($field: $fty),* }, )*
        }

        /// Message type numbers, named as the protocol names them.
        #[allow(non_upper_case_globals)]
        pub mod msg {
            $( pub const $name: u8 = $ty; )*
        }

        impl<'a> Fcall<'a> {
            /// The message's type number.
            pub fn msg_type(&self) -> u8 {
                match self { $( Fcall::$name { .. } => $ty, )* }
            }

            /// The message's name ("Twalk"), for logs and counters.
            pub fn name(&self) -> &'static str {
                type_name(self.msg_type())
            }

            fn decode_body(ty: u8, r: &mut Reader<'a>) -> Result<Self, DecodeError> {
                match ty {
                    $( $ty => Ok(Fcall::$name { $($field: <$fty as Wire>::get(r)?),* }), )*
                    t => Err(DecodeError::UnknownType(t)),
                }
            }

            fn encode_body(&self, w: &mut Vec<u8>) {
                match self {
                    $( Fcall::$name { $($field),* } => { $( Wire::put($field, w); )* } )*
                }
            }
        }

        /// The name of message type `ty` ("Rlerror"), or "unknown".
        pub fn type_name(ty: u8) -> &'static str {
            match ty {
                $( $ty => stringify!($name), )*
                _ => "unknown",
            }
        }

        /// Every message type, in protocol order.
        pub const ALL_TYPES: &[u8] = &[$($ty),*];
    };
}

messages! {
    /// An error: a Linux errno.
    Rlerror = 7 { ecode: u32 }
    Tstatfs = 8 { fid: u32 }
    Rstatfs = 9 { st: StatFs }
    /// Open the file `fid` names; `flags` are Linux open flags.
    Tlopen = 12 { fid: u32, flags: u32 }
    Rlopen = 13 { qid: Qid, iounit: u32 }
    /// Create `name` in directory `fid` and open it; `fid` then names it.
    Tlcreate = 14 { fid: u32, name: Str<'a>, flags: u32, mode: u32, gid: u32 }
    Rlcreate = 15 { qid: Qid, iounit: u32 }
    Tsymlink = 16 { fid: u32, name: Str<'a>, symtgt: Str<'a>, gid: u32 }
    Rsymlink = 17 { qid: Qid }
    Tmknod = 18 { dfid: u32, name: Str<'a>, mode: u32, major: u32, minor: u32, gid: u32 }
    Rmknod = 19 { qid: Qid }
    Trename = 20 { fid: u32, dfid: u32, name: Str<'a> }
    Rrename = 21 {}
    Treadlink = 22 { fid: u32 }
    Rreadlink = 23 { target: Str<'a> }
    Tgetattr = 24 { fid: u32, request_mask: u64 }
    Rgetattr = 25 { st: Stat }
    Tsetattr = 26 { fid: u32, attr: SetAttr }
    Rsetattr = 27 {}
    Txattrwalk = 30 { fid: u32, newfid: u32, name: Str<'a> }
    Rxattrwalk = 31 { size: u64 }
    Txattrcreate = 32 { fid: u32, name: Str<'a>, attr_size: u64, flags: u32 }
    Rxattrcreate = 33 {}
    /// Entries from `offset` (an offset a previous entry returned, or 0).
    Treaddir = 40 { fid: u32, offset: u64, count: u32 }
    /// `qid[13] offset[8] type[1] name[s]` entries, back to back.
    Rreaddir = 41 { data: Data<'a> }
    Tfsync = 50 { fid: u32, datasync: OptU32 }
    Rfsync = 51 {}
    Tlock = 52 { fid: u32, ty: u8, flags: u32, start: u64, length: u64, proc_id: u32, client_id: Str<'a> }
    Rlock = 53 { status: u8 }
    Tgetlock = 54 { fid: u32, ty: u8, start: u64, length: u64, proc_id: u32, client_id: Str<'a> }
    Rgetlock = 55 { ty: u8, start: u64, length: u64, proc_id: u32, client_id: Str<'a> }
    Tlink = 70 { dfid: u32, fid: u32, name: Str<'a> }
    Rlink = 71 {}
    Tmkdir = 72 { dfid: u32, name: Str<'a>, mode: u32, gid: u32 }
    Rmkdir = 73 { qid: Qid }
    Trenameat = 74 { olddirfid: u32, oldname: Str<'a>, newdirfid: u32, newname: Str<'a> }
    Rrenameat = 75 {}
    Tunlinkat = 76 { dirfid: u32, name: Str<'a>, flags: u32 }
    Runlinkat = 77 {}
    Tversion = 100 { msize: u32, version: Str<'a> }
    Rversion = 101 { msize: u32, version: Str<'a> }
    Tauth = 102 { afid: u32, uname: Str<'a>, aname: Str<'a>, n_uname: u32 }
    Rauth = 103 { aqid: Qid }
    Tattach = 104 { fid: u32, afid: u32, uname: Str<'a>, aname: Str<'a>, n_uname: u32 }
    Rattach = 105 { qid: Qid }
    Tflush = 108 { oldtag: u16 }
    Rflush = 109 {}
    /// Walk `names` from `fid`; `newfid` names the result (may equal
    /// `fid`; zero names clone the fid).
    Twalk = 110 { fid: u32, newfid: u32, names: Names<'a> }
    Rwalk = 111 { qids: Qids }
    Tread = 116 { fid: u32, offset: u64, count: u32 }
    Rread = 117 { data: Data<'a> }
    Twrite = 118 { fid: u32, offset: u64, data: Data<'a> }
    Rwrite = 119 { count: u32 }
    Tclunk = 120 { fid: u32 }
    Rclunk = 121 {}
    Tremove = 122 { fid: u32 }
    Rremove = 123 {}
    /// walkfs's inode-number grants (docs/inode-grants.md): `Tlcreate`
    /// naming the number the new file gets, from a range granted to this
    /// connection ([`inogrant`]).
    Tlcreatei = 150 { fid: u32, name: Str<'a>, flags: u32, mode: u32, gid: u32, ino: u64 }
    Rlcreatei = 151 { qid: Qid, iounit: u32 }
    /// `Tmkdir` with a granted number.
    Tmkdiri = 152 { dfid: u32, name: Str<'a>, mode: u32, gid: u32, ino: u64 }
    Rmkdiri = 153 { qid: Qid }
    /// `Tsymlink` with a granted number.
    Tsymlinki = 154 { fid: u32, name: Str<'a>, symtgt: Str<'a>, gid: u32, ino: u64 }
    Rsymlinki = 155 { qid: Qid }
    /// `Tmknod` with a granted number.
    Tmknodi = 156 { dfid: u32, name: Str<'a>, mode: u32, major: u32, minor: u32, gid: u32, ino: u64 }
    Rmknodi = 157 { qid: Qid }
}

impl<'a> Fcall<'a> {
    /// Decode one whole frame (size field included): its tag and message.
    pub fn decode(frame: &'a [u8]) -> Result<(u16, Fcall<'a>), DecodeError> {
        let mut r = Reader::new(frame);
        let size = u32::get(&mut r)?;
        if size as usize != frame.len() {
            return Err(DecodeError::SizeMismatch {
                declared: size,
                actual: frame.len(),
            });
        }
        let ty = u8::get(&mut r)?;
        let tag = u16::get(&mut r)?;
        let f = Fcall::decode_body(ty, &mut r)?;
        match r.remaining() {
            0 => Ok((tag, f)),
            n => Err(DecodeError::Trailing(n)),
        }
    }

    /// Append this message, framed, to `out`.
    pub fn encode(&self, tag: u16, out: &mut Vec<u8>) {
        let start = begin(out, self.msg_type(), tag);
        self.encode_body(out);
        finish(out, start);
    }

    /// True for requests (T-messages).
    pub fn is_request(&self) -> bool {
        self.msg_type().is_multiple_of(2)
    }
}

/// Start a message in `out` by hand: returns where it starts, for
/// [`finish`]. The body is then appended with [`Wire::put`] (or read into
/// place, for `Rread`).
pub fn begin(out: &mut Vec<u8>, ty: u8, tag: u16) -> usize {
    let start = out.len();
    out.extend_from_slice(&[0; 4]);
    out.push(ty);
    out.extend_from_slice(&tag.to_le_bytes());
    start
}

/// Write the size field of the message that starts at `start`.
pub fn finish(out: &mut [u8], start: usize) {
    let size = (out.len() - start) as u32;
    out[start..start + 4].copy_from_slice(&size.to_le_bytes());
}

/// Append one `Rreaddir` entry.
pub fn put_dirent(out: &mut Vec<u8>, qid: Qid, offset: u64, ty: u8, name: &[u8]) {
    qid.put(out);
    offset.put(out);
    ty.put(out);
    Str(name).put(out);
}

/// Bytes a [`put_dirent`] of `name` takes.
pub fn dirent_len(name: &[u8]) -> usize {
    13 + 8 + 1 + 2 + name.len()
}

/// One entry of a `Rreaddir` payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dirent<'a> {
    pub qid: Qid,
    pub offset: u64,
    pub ty: u8,
    pub name: &'a [u8],
}

/// The entries of a `Rreaddir` payload; stops at the first malformed one.
pub fn dirents(data: &[u8]) -> impl Iterator<Item = Result<Dirent<'_>, DecodeError>> {
    let mut r = Reader::new(data);
    std::iter::from_fn(move || {
        if r.remaining() == 0 {
            return None;
        }
        let e = (|| {
            Ok(Dirent {
                qid: Qid::get(&mut r)?,
                offset: u64::get(&mut r)?,
                ty: u8::get(&mut r)?,
                name: Str::get(&mut r)?.0,
            })
        })();
        if e.is_err() {
            r.pos = r.buf.len();
        }
        Some(e)
    })
}

/// Read one frame from `r` into `buf` (replacing its contents). `Ok(false)`
/// at a clean end of stream; `InvalidData` when the size field is below
/// the header or above `max`: the stream cannot be trusted past that.
pub fn read_frame(r: &mut impl Read, buf: &mut Vec<u8>, max: u32) -> io::Result<bool> {
    let mut size = [0u8; 4];
    let mut got = 0;
    while got < 4 {
        match r.read(&mut size[got..]) {
            Ok(0) if got == 0 => return Ok(false),
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    let n = u32::from_le_bytes(size);
    if (n as usize) < HEADER || n > max {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("frame of {n} bytes (limit {max})"),
        ));
    }
    buf.clear();
    buf.extend_from_slice(&size);
    buf.resize(n as usize, 0);
    r.read_exact(&mut buf[4..])?;
    Ok(true)
}

/// The message type and tag of a frame that did not decode, when at
/// least the header is there (so an error reply can name the tag).
pub fn peek_header(frame: &[u8]) -> Option<(u8, u16)> {
    if frame.len() < HEADER {
        return None;
    }
    Some((frame[4], u16::from_le_bytes([frame[5], frame[6]])))
}

/// The decode-and-round-trip property the fuzz target checks: whatever
/// decodes re-encodes to the same bytes, except where the wire form has
/// an optional field (then it re-decodes to the same message).
pub fn roundtrip_check(data: &[u8]) {
    if let Ok((tag, f)) = Fcall::decode(data) {
        let mut out = Vec::new();
        f.encode(tag, &mut out);
        if out != data {
            let (tag2, f2) = Fcall::decode(&out).expect("re-encoded message decodes");
            assert_eq!((tag, f), (tag2, f2), "re-encoding changed the message");
            assert_eq!(f.msg_type(), msg::Tfsync, "only Tfsync may change form");
        }
    }
}

#[cfg(test)]
mod tests;
