use super::*;
use proptest::prelude::*;

/// One message of every type, with non-trivial field values.
pub(crate) fn samples() -> Vec<Fcall<'static>> {
    let q = Qid {
        ty: QTDIR,
        version: 7,
        path: 0x0102_0304_0506_0708,
    };
    let mut qids = Qids::default();
    qids.push(q);
    qids.push(Qid { ty: QTFILE, ..q });
    let names = Names::new(&[b"usr", b"lib", b"gcc"]).expect("3 names");
    vec![
        Fcall::Rlerror { ecode: 2 },
        Fcall::Tstatfs { fid: 1 },
        Fcall::Rstatfs {
            st: StatFs {
                ty: 0x01021997,
                bsize: 4096,
                blocks: 10,
                bfree: 5,
                bavail: 4,
                files: 100,
                ffree: 50,
                fsid: 9,
                namelen: 255,
            },
        },
        Fcall::Tlopen { fid: 3, flags: 2 },
        Fcall::Rlopen { qid: q, iounit: 0 },
        Fcall::Tlcreate {
            fid: 3,
            name: Str(b"new.c"),
            flags: 0o101,
            mode: 0o644,
            gid: 1000,
        },
        Fcall::Rlcreate {
            qid: q,
            iounit: 8168,
        },
        Fcall::Tsymlink {
            fid: 1,
            name: Str(b"l"),
            symtgt: Str(b"../t"),
            gid: 5,
        },
        Fcall::Rsymlink { qid: q },
        Fcall::Tmknod {
            dfid: 1,
            name: Str(b"p"),
            mode: 0o10644,
            major: 0,
            minor: 0,
            gid: 0,
        },
        Fcall::Rmknod { qid: q },
        Fcall::Trename {
            fid: 4,
            dfid: 1,
            name: Str(b"b"),
        },
        Fcall::Rrename {},
        Fcall::Treadlink { fid: 4 },
        Fcall::Rreadlink {
            target: Str(b"boot/initrd.img-6.1.0-99-amd64"),
        },
        Fcall::Tgetattr {
            fid: 4,
            request_mask: GETATTR_BASIC,
        },
        Fcall::Rgetattr {
            st: Stat {
                valid: GETATTR_BASIC,
                qid: q,
                mode: 0o40755,
                uid: 1,
                gid: 2,
                nlink: 3,
                rdev: 0,
                size: 4096,
                blksize: 4096,
                blocks: 8,
                atime_sec: 1,
                atime_nsec: 2,
                mtime_sec: 3,
                mtime_nsec: 4,
                ctime_sec: 5,
                ctime_nsec: 6,
                btime_sec: 0,
                btime_nsec: 0,
                gen: 0,
                data_version: 0,
            },
        },
        Fcall::Tsetattr {
            fid: 4,
            attr: SetAttr {
                valid: SETATTR_MODE | SETATTR_SIZE,
                mode: 0o600,
                size: 12,
                ..SetAttr::default()
            },
        },
        Fcall::Rsetattr {},
        Fcall::Txattrwalk {
            fid: 1,
            newfid: 2,
            name: Str(b"user.x"),
        },
        Fcall::Rxattrwalk { size: 3 },
        Fcall::Txattrcreate {
            fid: 1,
            name: Str(b"user.x"),
            attr_size: 3,
            flags: 0,
        },
        Fcall::Rxattrcreate {},
        Fcall::Treaddir {
            fid: 1,
            offset: 0,
            count: 8192,
        },
        Fcall::Rreaddir {
            data: Data(b"\x80\0\0\0\0\x01\0\0\0\0\0\0\0\x01\0\0\0\0\0\0\0\x04\x01\0a"),
        },
        Fcall::Tfsync {
            fid: 1,
            datasync: OptU32(1),
        },
        Fcall::Rfsync {},
        Fcall::Tlock {
            fid: 1,
            ty: 1,
            flags: 0,
            start: 0,
            length: 10,
            proc_id: 42,
            client_id: Str(b"host"),
        },
        Fcall::Rlock { status: 0 },
        Fcall::Tgetlock {
            fid: 1,
            ty: 1,
            start: 0,
            length: 10,
            proc_id: 42,
            client_id: Str(b"host"),
        },
        Fcall::Rgetlock {
            ty: 2,
            start: 0,
            length: 10,
            proc_id: 42,
            client_id: Str(b"host"),
        },
        Fcall::Tlink {
            dfid: 1,
            fid: 2,
            name: Str(b"h"),
        },
        Fcall::Rlink {},
        Fcall::Tmkdir {
            dfid: 1,
            name: Str(b"d"),
            mode: 0o755,
            gid: 0,
        },
        Fcall::Rmkdir { qid: q },
        Fcall::Trenameat {
            olddirfid: 1,
            oldname: Str(b"a"),
            newdirfid: 2,
            newname: Str(b"b"),
        },
        Fcall::Rrenameat {},
        Fcall::Tunlinkat {
            dirfid: 1,
            name: Str(b"d"),
            flags: AT_REMOVEDIR,
        },
        Fcall::Runlinkat {},
        Fcall::Tversion {
            msize: 8192,
            version: Str(VERSION),
        },
        Fcall::Rversion {
            msize: 8192,
            version: Str(VERSION),
        },
        Fcall::Tauth {
            afid: 5,
            uname: Str(b"root"),
            aname: Str(b""),
            n_uname: 0,
        },
        Fcall::Rauth { aqid: q },
        Fcall::Tattach {
            fid: 0,
            afid: NOFID,
            uname: Str(b"root"),
            aname: Str(b"/"),
            n_uname: 0,
        },
        Fcall::Rattach { qid: q },
        Fcall::Tflush { oldtag: 3 },
        Fcall::Rflush {},
        Fcall::Twalk {
            fid: 0,
            newfid: 1,
            names,
        },
        Fcall::Rwalk { qids },
        Fcall::Tread {
            fid: 1,
            offset: 4096,
            count: 100,
        },
        Fcall::Rread {
            data: Data(b"hello"),
        },
        Fcall::Twrite {
            fid: 1,
            offset: 0,
            data: Data(b"world"),
        },
        Fcall::Rwrite { count: 5 },
        Fcall::Tclunk { fid: 1 },
        Fcall::Rclunk {},
        Fcall::Tremove { fid: 1 },
        Fcall::Rremove {},
        Fcall::Tlcreatei {
            fid: 3,
            name: Str(b"new.c"),
            flags: 0o101,
            mode: 0o644,
            gid: 1000,
            ino: 0x7f00_0000_0000_0001,
        },
        Fcall::Rlcreatei {
            qid: q,
            iounit: 8168,
        },
        Fcall::Tmkdiri {
            dfid: 1,
            name: Str(b"d"),
            mode: 0o755,
            gid: 0,
            ino: 0x7f00_0000_0000_0002,
        },
        Fcall::Rmkdiri { qid: q },
        Fcall::Tsymlinki {
            fid: 1,
            name: Str(b"l"),
            symtgt: Str(b"../t"),
            gid: 0,
            ino: 0x7f00_0000_0000_0003,
        },
        Fcall::Rsymlinki { qid: q },
        Fcall::Tmknodi {
            dfid: 1,
            name: Str(b"p"),
            mode: 0o10644,
            major: 0,
            minor: 0,
            gid: 0,
            ino: 0x7f00_0000_0000_0004,
        },
        Fcall::Rmknodi { qid: q },
    ]
}

#[test]
fn every_type_has_a_sample_and_round_trips() {
    let s = samples();
    let types: Vec<u8> = s.iter().map(|f| f.msg_type()).collect();
    assert_eq!(types, ALL_TYPES, "one sample per message type, in order");
    for (i, f) in s.iter().enumerate() {
        let mut out = Vec::new();
        f.encode(i as u16, &mut out);
        let (tag, back) = Fcall::decode(&out).expect("decodes");
        assert_eq!(tag, i as u16);
        assert_eq!(&back, f, "{}", f.name());
    }
}

#[test]
fn wire_bytes_match_the_protocol() {
    // Tversion tag NOTAG msize 8192 "9P2000.L", as every 9P client sends it.
    let mut out = Vec::new();
    Fcall::Tversion {
        msize: 8192,
        version: Str(VERSION),
    }
    .encode(NOTAG, &mut out);
    assert_eq!(
        out,
        b"\x15\0\0\0\x64\xff\xff\0\x20\0\0\x08\x009P2000.L".as_slice()
    );
    // Twalk fid 1 newfid 2 names ["a"]: size 4+1+2+4+4+2+(2+1) = 20.
    let mut out = Vec::new();
    Fcall::Twalk {
        fid: 1,
        newfid: 2,
        names: Names::new(&[b"a"]).expect("one"),
    }
    .encode(9, &mut out);
    assert_eq!(
        out,
        b"\x14\0\0\0\x6e\x09\0\x01\0\0\0\x02\0\0\0\x01\0\x01\0a".as_slice()
    );
}

#[test]
fn every_truncation_is_refused() {
    for f in samples() {
        let mut out = Vec::new();
        f.encode(1, &mut out);
        for cut in 0..out.len() {
            let mut short = out[..cut].to_vec();
            if short.len() >= 4 {
                // Keep the size field honest so the body check is what fails.
                let n = short.len() as u32;
                short[..4].copy_from_slice(&n.to_le_bytes());
            }
            let r = Fcall::decode(&short);
            // Tfsync without datasync is the one legal short form.
            if f.msg_type() == msg::Tfsync && cut == out.len() - 4 {
                assert!(r.is_ok());
                continue;
            }
            assert!(r.is_err(), "{} cut at {cut} decoded: {r:?}", f.name());
        }
    }
}

#[test]
fn lengths_are_checked() {
    // A Twrite whose count claims more than the frame holds.
    let mut out = Vec::new();
    Fcall::Twrite {
        fid: 1,
        offset: 0,
        data: Data(b"abc"),
    }
    .encode(1, &mut out);
    let at = HEADER + 4 + 8;
    out[at..at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
    assert_eq!(Fcall::decode(&out), Err(DecodeError::Short));
    // A size field that disagrees with the frame.
    let mut out = Vec::new();
    Fcall::Tclunk { fid: 1 }.encode(1, &mut out);
    out.push(0);
    assert!(matches!(
        Fcall::decode(&out),
        Err(DecodeError::SizeMismatch { .. })
    ));
    let n = out.len() as u32;
    out[..4].copy_from_slice(&n.to_le_bytes());
    assert_eq!(Fcall::decode(&out), Err(DecodeError::Trailing(1)));
    // Seventeen walk names.
    let mut out = Vec::new();
    let s = begin(&mut out, msg::Twalk, 1);
    1u32.put(&mut out);
    2u32.put(&mut out);
    17u16.put(&mut out);
    for _ in 0..17 {
        Str(b"a").put(&mut out);
    }
    finish(&mut out, s);
    assert_eq!(Fcall::decode(&out), Err(DecodeError::TooManyElements(17)));
    // Unknown type.
    let mut out = Vec::new();
    let s = begin(&mut out, 250, 1);
    finish(&mut out, s);
    assert_eq!(Fcall::decode(&out), Err(DecodeError::UnknownType(250)));
}

#[test]
fn dirents_parse_and_stop_at_garbage() {
    let mut d = Vec::new();
    let q = Qid {
        ty: QTFILE,
        version: 0,
        path: 5,
    };
    put_dirent(&mut d, q, 1, 8, b"a.c");
    put_dirent(&mut d, q, 2, 4, b"sub");
    assert_eq!(d.len(), dirent_len(b"a.c") + dirent_len(b"sub"));
    let v: Vec<_> = dirents(&d).collect();
    assert_eq!(v.len(), 2);
    assert_eq!(v[1].expect("ok").name, b"sub");
    d.push(1);
    let v: Vec<_> = dirents(&d).collect();
    assert_eq!(v.len(), 3);
    assert!(v[2].is_err());
}

#[test]
fn read_frame_limits() {
    let mut out = Vec::new();
    Fcall::Tclunk { fid: 1 }.encode(1, &mut out);
    Fcall::Tclunk { fid: 2 }.encode(2, &mut out);
    let mut r = std::io::Cursor::new(out);
    let mut buf = Vec::new();
    assert!(read_frame(&mut r, &mut buf, 8192).expect("one"));
    assert_eq!(Fcall::decode(&buf).expect("ok").1, Fcall::Tclunk { fid: 1 });
    assert!(read_frame(&mut r, &mut buf, 8192).expect("two"));
    assert!(!read_frame(&mut r, &mut buf, 8192).expect("end"));
    let mut r = std::io::Cursor::new(b"\xff\xff\xff\x7f\x78".to_vec());
    let e = read_frame(&mut r, &mut buf, 8192).expect_err("too big");
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidData);
    let mut r = std::io::Cursor::new(b"\x03\0\0\0".to_vec());
    assert!(read_frame(&mut r, &mut buf, 8192).is_err());
}

/// The fuzz corpus in the repo: every file decodes without panicking and
/// round-trips (what the cargo-fuzz target runs, here on stable Rust).
#[test]
fn fuzz_corpus_round_trips() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/fuzz/corpus/decode");
    let mut n = 0;
    for e in std::fs::read_dir(dir).expect("corpus dir") {
        let data = std::fs::read(e.expect("entry").path()).expect("read");
        roundtrip_check(&data);
        n += 1;
    }
    assert!(n >= ALL_TYPES.len(), "corpus has a seed per message type");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4000))]
    #[test]
    fn arbitrary_bytes_never_panic(body in proptest::collection::vec(any::<u8>(), 0..200), ty in any::<u8>()) {
        let mut out = Vec::new();
        let s = begin(&mut out, ty, 1);
        out.extend_from_slice(&body);
        finish(&mut out, s);
        roundtrip_check(&out);
        roundtrip_check(&body);
    }

    #[test]
    fn mutated_samples_never_panic(i in 0usize..58, pos in any::<usize>(), byte in any::<u8>()) {
        let s = samples();
        let mut out = Vec::new();
        s[i % s.len()].encode(1, &mut out);
        let p = pos % out.len();
        out[p] = byte;
        roundtrip_check(&out);
    }
}

/// Regenerate the fuzz corpus seeds: `cargo test -p walkfs-p9 -- --ignored`.
#[test]
#[ignore]
fn write_corpus() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/fuzz/corpus/decode");
    for (i, f) in samples().iter().enumerate() {
        let mut out = Vec::new();
        f.encode(i as u16, &mut out);
        std::fs::write(format!("{dir}/{:03}-{}", f.msg_type(), f.name()), out).expect("write");
    }
}
