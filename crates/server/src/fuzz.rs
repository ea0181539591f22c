//! The server's message handling under arbitrary input: the body of the
//! `session` fuzz target (crates/server/fuzz) and of the test that replays
//! its checked-in corpus.
//!
//! The input is read as a script of 9P requests, structure-aware so the
//! fuzzer spends its time past the decoder: each step picks a request
//! type and fills its fields from the bytes that follow, with fids from a
//! small set (so later requests use what earlier ones made), names from a
//! small dictionary of the interesting ones (`..`, `.`, empty, with a
//! slash, too long) and otherwise free numbers (flags, modes, offsets,
//! counts). A step may also send raw bytes framed with a size of its own.
//! The session starts with Tversion + Tattach and runs over a fresh memfs
//! export through the connection's own reader loop, with every request
//! answered on the calling thread; a panic anywhere, or a reply that is
//! not a whole well-formed reply, is a failure.

use walkfs_p9::{Data, Fcall, Names, Str, NOFID, NOTAG, VERSION};
use walkfs_vfs::{Options, Vfs};

use crate::{Config, Server};

const NAMES: &[&[u8]] = &[
    b"a",
    b"b",
    b"dir",
    b"..",
    b".",
    b"",
    b"a/b",
    b"/etc",
    b"\xff\xfe",
    &[b'n'; 300],
    // Opens a change-notification fid (notify.rs) through Txattrwalk.
    crate::notify::NOTIFY_NAME,
    // Asks for a lease (lease.rs): ordered like a change, refused here
    // (memory has no host to hold).
    walkfs_p9::lease::NAME,
];

/// Bytes of the script, consumed as fields.
struct Input<'a>(&'a [u8]);

impl Input<'_> {
    fn u8(&mut self) -> u8 {
        match self.0.split_first() {
            Some((&b, rest)) => {
                self.0 = rest;
                b
            }
            None => 0,
        }
    }
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }
    fn u64(&mut self) -> u64 {
        u64::from(self.u32()) | u64::from(self.u32()) << 32
    }
    /// A fid of the small set (sometimes NOFID or a wild number).
    fn fid(&mut self) -> u32 {
        match self.u8() {
            250 => NOFID,
            251 => self.u32(),
            b => u32::from(b % 8),
        }
    }
    fn name(&mut self) -> &'static [u8] {
        NAMES[usize::from(self.u8()) % NAMES.len()]
    }
    fn bytes(&mut self, max: usize) -> &[u8] {
        let n = (usize::from(self.u8())).min(max).min(self.0.len());
        let (b, rest) = self.0.split_at(n);
        self.0 = rest;
        b
    }
}

/// Encode the script in `data` as request frames.
fn script(data: &[u8]) -> Vec<u8> {
    let mut inp = Input(data);
    let mut out = Vec::new();
    Fcall::Tversion {
        msize: 8192,
        version: Str(VERSION),
    }
    .encode(NOTAG, &mut out);
    Fcall::Tattach {
        fid: 0,
        afid: NOFID,
        uname: Str(b""),
        aname: Str(b""),
        n_uname: 0,
    }
    .encode(1, &mut out);
    let mut steps = 0;
    while !inp.0.is_empty() && steps < 256 {
        steps += 1;
        let tag = u16::from(inp.u8() % 32);
        let kind = inp.u8() % 28;
        let f = match kind {
            0 => {
                let (fid, newfid) = (inp.fid(), inp.fid());
                let n = usize::from(inp.u8() % 5);
                let names: Vec<&[u8]> = (0..n).map(|_| inp.name()).collect();
                match Names::new(&names) {
                    Some(names) => Fcall::Twalk { fid, newfid, names },
                    None => continue,
                }
            }
            1 => Fcall::Tlopen {
                fid: inp.fid(),
                flags: inp.u32(),
            },
            2 => Fcall::Tlcreate {
                fid: inp.fid(),
                name: Str(inp.name()),
                flags: inp.u32(),
                mode: inp.u32(),
                gid: inp.u32() % 4,
            },
            3 => Fcall::Tread {
                fid: inp.fid(),
                offset: inp.u64() % 100_000,
                count: inp.u32() % 20_000,
            },
            4 => {
                let fid = inp.fid();
                let offset = inp.u64() % 100_000;
                Fcall::Twrite {
                    fid,
                    offset,
                    data: Data(inp.bytes(200)),
                }
            }
            5 => Fcall::Tgetattr {
                fid: inp.fid(),
                request_mask: inp.u64(),
            },
            6 => Fcall::Tsetattr {
                fid: inp.fid(),
                attr: walkfs_p9::SetAttr {
                    valid: inp.u32(),
                    mode: inp.u32(),
                    uid: inp.u32() % 3,
                    gid: inp.u32() % 3,
                    size: inp.u64() % 100_000,
                    atime_sec: inp.u64(),
                    atime_nsec: inp.u64(),
                    mtime_sec: inp.u64(),
                    mtime_nsec: inp.u64(),
                },
            },
            7 => Fcall::Treaddir {
                fid: inp.fid(),
                offset: inp.u64() % 64,
                count: inp.u32() % 9000,
            },
            8 => Fcall::Tmkdir {
                dfid: inp.fid(),
                name: Str(inp.name()),
                mode: inp.u32(),
                gid: 0,
            },
            9 => Fcall::Tsymlink {
                fid: inp.fid(),
                name: Str(inp.name()),
                symtgt: Str(inp.name()),
                gid: 0,
            },
            10 => Fcall::Treadlink { fid: inp.fid() },
            11 => Fcall::Tlink {
                dfid: inp.fid(),
                fid: inp.fid(),
                name: Str(inp.name()),
            },
            12 => Fcall::Trenameat {
                olddirfid: inp.fid(),
                oldname: Str(inp.name()),
                newdirfid: inp.fid(),
                newname: Str(inp.name()),
            },
            13 => Fcall::Tunlinkat {
                dirfid: inp.fid(),
                name: Str(inp.name()),
                flags: inp.u32(),
            },
            14 => Fcall::Trename {
                fid: inp.fid(),
                dfid: inp.fid(),
                name: Str(inp.name()),
            },
            15 => Fcall::Tremove { fid: inp.fid() },
            16 => Fcall::Tclunk { fid: inp.fid() },
            17 => Fcall::Tflush {
                oldtag: u16::from(inp.u8() % 32),
            },
            18 => Fcall::Tfsync {
                fid: inp.fid(),
                datasync: walkfs_p9::OptU32(inp.u32()),
            },
            19 => Fcall::Tstatfs { fid: inp.fid() },
            20 => Fcall::Tmknod {
                dfid: inp.fid(),
                name: Str(inp.name()),
                mode: inp.u32(),
                major: inp.u32(),
                minor: inp.u32(),
                gid: 0,
            },
            21 => Fcall::Txattrwalk {
                fid: inp.fid(),
                newfid: inp.fid(),
                name: Str(inp.name()),
            },
            // The grant extension: a grant asked for, and creates with
            // numbers near the first ever granted (granted or not).
            23 => Fcall::Txattrwalk {
                fid: inp.fid(),
                newfid: inp.fid(),
                name: Str(walkfs_p9::inogrant::NAME),
            },
            24 => Fcall::Tlcreatei {
                fid: inp.fid(),
                name: Str(inp.name()),
                flags: inp.u32(),
                mode: inp.u32(),
                gid: inp.u32() % 4,
                ino: 0x7f00_0000_0000_0000 + u64::from(inp.u8() % 8),
            },
            25 => Fcall::Tmkdiri {
                dfid: inp.fid(),
                name: Str(inp.name()),
                mode: inp.u32(),
                gid: 0,
                ino: 0x7f00_0000_0000_0000 + u64::from(inp.u8() % 8),
            },
            // An attribute set: the fid turns into the attribute's, takes
            // writes, sets at its clunk (handlers/xattr.rs). Sizes past
            // the limit; names the vfs takes, and the dictionary's.
            26 => Fcall::Txattrcreate {
                fid: inp.fid(),
                name: Str(match inp.u8() % 3 {
                    0 => &b"user.a"[..],
                    1 => b"system.posix_acl_access",
                    _ => inp.name(),
                }),
                attr_size: inp.u64() % 70_000,
                flags: inp.u32() % 4,
            },
            22 => Fcall::Tattach {
                fid: inp.fid(),
                afid: inp.fid(),
                uname: Str(b""),
                aname: Str(inp.name()),
                n_uname: inp.u32() % 3,
            },
            _ => {
                // Raw bytes under a size of their own (which may lie).
                let size = inp.u32() % 10_000;
                out.extend_from_slice(&size.to_le_bytes());
                let b = inp.bytes(255);
                out.extend_from_slice(b);
                continue;
            }
        };
        f.encode(tag, &mut out);
    }
    out
}

/// Run one session of `data` against a fresh memfs export, every request
/// on this thread (no pool, no socket: deterministic, and fast enough for
/// the fuzzer). Panics if the server panics, or answers with anything but
/// whole, well-formed replies. Returns the replies.
pub fn run_session(data: &[u8]) -> Vec<u8> {
    let frames = script(data);
    // A small cache: its tables are made per input.
    let opts = Options {
        max_dentries: 1024,
        ..Options::default()
    };
    let vfs = match Vfs::new(std::sync::Arc::new(walkfs_memfs::MemFs::new()), &opts) {
        Ok(v) => v,
        Err(e) => panic!("memfs: {e}"),
    };
    // Set up once per process: the user database read into memory, and a
    // config (whose default asks the system for its CPU count).
    static CFG: std::sync::OnceLock<Config> = std::sync::OnceLock::new();
    let cfg = CFG
        .get_or_init(|| {
            crate::users::snapshot();
            Config {
                max_fids: 64,
                max_inflight: 16,
                max_msize: 8192,
                inline_all: true,
                ..Config::default()
            }
        })
        .clone();
    let server = Server::new(vfs, cfg);
    let out = crate::conn::serve_memory(server, &frames);
    let mut rest: &[u8] = &out;
    while !rest.is_empty() {
        let Some(size) = rest.get(..4) else {
            panic!("a reply cut short: {} bytes left", rest.len());
        };
        let size = u32::from_le_bytes([size[0], size[1], size[2], size[3]]) as usize;
        assert!(
            size >= 7 && size <= rest.len(),
            "a reply of size {size} with {} bytes left",
            rest.len()
        );
        match Fcall::decode(&rest[..size]) {
            Ok((_, f)) => assert!(!f.is_request(), "the server sent a request"),
            Err(e) => panic!("the server sent a malformed reply: {e}"),
        }
        rest = &rest[size..];
    }
    out
}

#[cfg(test)]
mod tests {
    /// The checked-in corpus of the `session` fuzz target replays without
    /// a panic or a hang.
    #[test]
    fn session_corpus_replays() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/fuzz/corpus/session");
        let mut n = 0;
        for e in std::fs::read_dir(dir).expect("corpus dir") {
            let data = std::fs::read(e.expect("entry").path()).expect("read");
            super::run_session(&data);
            n += 1;
        }
        assert!(n >= 10, "the corpus has its seeds");
    }

    /// The notification seed reaches the extension: a subscription over
    /// a memfs export (which cannot report changes) reads DEGRADED.
    #[test]
    fn the_notify_seed_subscribes_and_reads() {
        use walkfs_p9::Fcall;
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/fuzz/corpus/session/notify-subscribe-read-flush-clunk"
        );
        let out = super::run_session(&std::fs::read(path).expect("seed"));
        let mut rest: &[u8] = &out;
        let (mut subscribed, mut degraded, mut clunked) = (false, false, false);
        while rest.len() >= 7 {
            let size = u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
            match Fcall::decode(&rest[..size]).expect("reply").1 {
                Fcall::Rxattrwalk { size } => subscribed = size == crate::notify::VERSION,
                Fcall::Rread { data } => {
                    degraded |= data.0.first() == Some(&crate::notify::DEGRADED)
                }
                Fcall::Rclunk {} => clunked = true,
                _ => {}
            }
            rest = &rest[size..];
        }
        assert!(subscribed && degraded && clunked);
    }
}
