//! Helpers shared by the 9P test files: a served tree, clients, and raw
//! frames for hostile-input tests.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::os::unix::fs::symlink;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use walkfs_p9::{Addr, Fcall, Names, Str, NOFID, NOTAG, VERSION};
use walkfs_server::{Config, Server};
use walkfs_source::SourceOptions;
use walkfs_vfs::{Creds, Ctx};

/// A small tree with a file, a directory, relative and absolute symlinks.
pub fn make_tree(dir: &Path) {
    std::fs::create_dir_all(dir.join("usr/lib/gcc")).expect("mkdir");
    std::fs::write(dir.join("usr/lib/gcc/crtendS.o"), b"object bytes").expect("write");
    std::fs::write(dir.join("hello.txt"), b"hello, 9p\n").expect("write");
    symlink("usr/lib/gcc/crtendS.o", dir.join("rel")).expect("symlink");
    symlink("/etc/passwd", dir.join("abs")).expect("symlink");
    symlink("../../../../../../usr", dir.join("usr/up")).expect("symlink");
}

pub fn serve(dir: &Path, sock: &Path) -> Arc<Server> {
    serve_with(dir, sock, Config::default())
}

pub fn serve_with(dir: &Path, sock: &Path, cfg: Config) -> Arc<Server> {
    let vfs =
        walkfs_source::open(dir.to_str().expect("utf8"), &SourceOptions::default()).expect("vfs");
    let server = Server::new(vfs, cfg);
    let addr = Addr::Unix(sock.display().to_string());
    let l = addr.listen().expect("listen");
    let s = Arc::clone(&server);
    std::thread::spawn(move || s.serve(l));
    server
}

pub fn client(source: &str, opts: &str) -> Ctx {
    let o = SourceOptions::parse(opts).expect("options");
    walkfs_source::open(source, &o)
        .expect("connect")
        .context(Creds::root())
}

/// Raw frames for hostile-input tests.
pub fn raw(sock: &Path) -> std::os::unix::net::UnixStream {
    let mut s = std::os::unix::net::UnixStream::connect(sock).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let mut out = Vec::new();
    Fcall::Tversion {
        msize: 65536,
        version: Str(VERSION),
    }
    .encode(NOTAG, &mut out);
    s.write_all(&out).expect("send");
    let _ = reply(&mut s);
    s
}

pub fn reply(s: &mut impl Read) -> Option<Vec<u8>> {
    let mut buf = Vec::new();
    walkfs_p9::read_frame(s, &mut buf, 1 << 20)
        .ok()?
        .then_some(buf)
}

pub fn rpc(s: &mut std::os::unix::net::UnixStream, tag: u16, f: Fcall<'_>) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    f.encode(tag, &mut out);
    s.write_all(&out).ok()?;
    reply(s)
}

pub fn errno_of(frame: &[u8]) -> Option<u32> {
    match Fcall::decode(frame).ok()?.1 {
        Fcall::Rlerror { ecode } => Some(ecode),
        _ => None,
    }
}

/// A raw session attached as root on fid 1.
pub fn attached(sock: &Path) -> std::os::unix::net::UnixStream {
    let mut s = raw(sock);
    let r = rpc(
        &mut s,
        1,
        Fcall::Tattach {
            fid: 1,
            afid: NOFID,
            uname: Str(b"root"),
            aname: Str(b""),
            n_uname: 0,
        },
    )
    .expect("attach");
    assert!(matches!(
        Fcall::decode(&r).expect("d").1,
        Fcall::Rattach { .. }
    ));
    s
}

pub fn walk_to(s: &mut std::os::unix::net::UnixStream, newfid: u32, names: &[&[u8]]) -> Vec<u8> {
    rpc(
        s,
        2,
        Fcall::Twalk {
            fid: 1,
            newfid,
            names: Names::new(names).expect("names"),
        },
    )
    .expect("walk")
}
