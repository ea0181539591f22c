//! `walkfs bench 9p`: metadata operations per second of a 9P server,
//! `walkfs serve` and Debian's `diod` exporting the same tree, in one run.
//!
//! One operation is what a client's `stat("a/b/c")` costs on a share with
//! nothing cached: `Twalk` of three names from the root fid to a new fid,
//! `Tgetattr` on it, `Tclunk`. Each connection runs its operations one
//! after the other, each message waiting for its reply (diod runs a fid's
//! requests out of order when they are pipelined, so a fair load generator
//! cannot pipeline). Connections run on threads of their own.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde::Serialize;
use walkfs_p9::{msg, read_frame, Fcall, Names, Str, Stream, GETATTR_BASIC, NOFID, NOTAG, VERSION};

use crate::proc::{free_port, listening, spawn_ready, KillOnDrop};
use crate::report::{median, progress_done, table, Steps};
use crate::timing::together;

/// One measured row; the JSON form is exactly these fields.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    pub bench: &'static str,
    pub server: &'static str,
    pub conns: usize,
    pub ops_per_sec: f64,
}

#[derive(Clone, Debug)]
pub struct P9Opts {
    pub quick: bool,
    /// Connection counts to run.
    pub conns: Vec<usize>,
    /// The `walkfs` executable to start `walkfs serve` with.
    pub walkfs: PathBuf,
    /// Only these servers (default both).
    pub servers: Vec<String>,
}

/// Files at depth 3 the operations walk to, round robin.
const LEAVES: usize = 64;

fn make_tree(dir: &Path) -> std::io::Result<Vec<[String; 3]>> {
    let mut out = Vec::new();
    for i in 0..LEAVES {
        let (a, b, c) = (
            format!("d{}", i % 4),
            format!("e{}", i % 8),
            format!("f{i}.h"),
        );
        let d = dir.join(&a).join(&b);
        std::fs::create_dir_all(&d)?;
        std::fs::write(d.join(&c), b"x")?;
        out.push([a, b, c]);
    }
    Ok(out)
}

/// Find a Debian tool in the usual places.
pub fn tool(name: &str) -> Option<PathBuf> {
    ["/usr/sbin", "/usr/bin", "/sbin", "/bin"]
        .iter()
        .map(|d| Path::new(d).join(name))
        .find(|p| p.exists())
}

fn start(server: &str, opts: &P9Opts, dir: &Path) -> Result<(KillOnDrop, u16), String> {
    let port = free_port().map_err(|e| format!("free port: {e}"))?;
    let listen = format!("127.0.0.1:{port}");
    let dir_s = dir.to_str().ok_or("export path is not UTF-8")?;
    let mut cmd = match server {
        "walkfs" => {
            let mut c = Command::new(&opts.walkfs);
            c.args(["serve", dir_s, "--listen", &format!("tcp:{listen}")]);
            c
        }
        _ => {
            let diod = tool("diod").ok_or(
                "diod is not installed (apt-get install diod; scripts/test.sh does it), \
                 or run with --server walkfs",
            )?;
            let mut c = Command::new(diod);
            c.args(["-f", "-n", "-l", &listen, "-e", dir_s, "-L", "stderr"]);
            c
        }
    };
    let k = spawn_ready(
        &mut cmd,
        |e| format!("start {server}: {e}"),
        &format!("{server} on port {port}"),
        || listening(port),
    )?;
    Ok((k, port))
}

/// One connection of the load generator.
struct Client {
    s: Stream,
    rd: std::io::BufReader<Stream>,
    out: Vec<u8>,
    buf: Vec<u8>,
}

impl Client {
    fn connect(port: u16, aname: &[u8]) -> Result<Client, String> {
        let tcp = std::net::TcpStream::connect(("127.0.0.1", port))
            .map_err(|e| format!("connect: {e}"))?;
        let _ = tcp.set_nodelay(true);
        let s = Stream::Tcp(tcp);
        let rd = std::io::BufReader::new(s.try_clone().map_err(|e| format!("dup: {e}"))?);
        let mut c = Client {
            s,
            rd,
            out: Vec::with_capacity(256),
            buf: Vec::with_capacity(256),
        };
        c.rpc(
            NOTAG,
            &Fcall::Tversion {
                msize: 65536,
                version: Str(VERSION),
            },
        )?;
        let r = c.rpc(
            1,
            &Fcall::Tattach {
                fid: 0,
                afid: NOFID,
                uname: Str(b"root"),
                aname: Str(aname),
                n_uname: 0,
            },
        )?;
        if r != msg::Rattach {
            return Err(format!("attach refused (reply type {r})"));
        }
        Ok(c)
    }

    /// Send one request and wait for its reply; the reply's type.
    fn rpc(&mut self, tag: u16, f: &Fcall<'_>) -> Result<u8, String> {
        self.out.clear();
        f.encode(tag, &mut self.out);
        self.s
            .write_all(&self.out)
            .map_err(|e| format!("send: {e}"))?;
        match read_frame(&mut self.rd, &mut self.buf, 1 << 20) {
            Ok(true) => Ok(self.buf.get(4).copied().unwrap_or(0)),
            Ok(false) => Err("server closed the connection".into()),
            Err(e) => Err(format!("receive: {e}")),
        }
    }

    /// Walk three names, getattr, clunk. Errors are the server's (a reply
    /// of the wrong type) or the link's.
    fn op(&mut self, names: &[String; 3]) -> Result<(), String> {
        let n: [&[u8]; 3] = [
            names[0].as_bytes(),
            names[1].as_bytes(),
            names[2].as_bytes(),
        ];
        let names = Names::new(&n).ok_or("names")?;
        let r = self.rpc(
            2,
            &Fcall::Twalk {
                fid: 0,
                newfid: 1,
                names,
            },
        )?;
        if r != msg::Rwalk {
            return Err(format!("walk failed (reply type {r})"));
        }
        let r = self.rpc(
            3,
            &Fcall::Tgetattr {
                fid: 1,
                request_mask: GETATTR_BASIC,
            },
        )?;
        let c = self.rpc(4, &Fcall::Tclunk { fid: 1 })?;
        if r != msg::Rgetattr || c != msg::Rclunk {
            return Err(format!("getattr/clunk failed (reply types {r}, {c})"));
        }
        Ok(())
    }
}

/// Run `conns` connections against the server on `port` for `dur`.
fn measure(
    port: u16,
    aname: &str,
    conns: usize,
    dur: Duration,
    leaves: &[[String; 3]],
) -> Result<f64, String> {
    let run = together(
        conns,
        |i| {
            let c = Client::connect(port, aname.as_bytes());
            move |stop: &AtomicBool| -> Result<u64, String> {
                let mut c = c?;
                let mut n = 0u64;
                let mut k = i * 7;
                while !stop.load(Ordering::Relaxed) {
                    c.op(&leaves[k % leaves.len()])?;
                    k += 1;
                    n += 1;
                }
                Ok(n)
            }
        },
        || std::thread::sleep(dur),
    );
    let mut total = 0;
    for r in run.results {
        total += r.ok_or("load thread panicked")??;
    }
    Ok(total as f64 / run.seconds)
}

pub struct P9Result {
    pub rows: Vec<Row>,
}

/// Run the benchmark: both servers up at once, repetitions interleaved.
pub fn run(opts: &P9Opts) -> Result<P9Result, String> {
    let t = tempfile::Builder::new()
        .prefix("walkfs-bench-9p-")
        .tempdir_in("/var/tmp")
        .map_err(|e| format!("scratch: {e}"))?;
    let dir = t.path().join("export");
    let leaves = make_tree(&dir).map_err(|e| format!("tree: {e}"))?;
    let want = |s: &str| opts.servers.is_empty() || opts.servers.iter().any(|x| x == s);
    let mut servers = Vec::new();
    for name in ["walkfs", "diod"] {
        if want(name) {
            let (k, port) = start(name, opts, &dir)?;
            servers.push((name, k, port));
        }
    }
    let aname = dir.to_str().unwrap_or("/").to_string();
    let (reps, dur) = if opts.quick {
        (3, Duration::from_millis(300))
    } else {
        (5, Duration::from_secs(1))
    };
    let cases: Vec<(usize, usize)> = (0..servers.len())
        .flat_map(|s| opts.conns.iter().map(move |&c| (s, c)))
        .collect();
    let mut samples = vec![Vec::new(); cases.len()];
    let mut steps = Steps::new("9p", reps * cases.len());
    for _ in 0..reps {
        for (i, &(s, conns)) in cases.iter().enumerate() {
            let (name, _, port) = &servers[s];
            steps.next(&format!("{name} x{conns}"));
            samples[i].push(measure(*port, &aname, conns, dur, &leaves)?);
        }
    }
    progress_done();
    let rows = cases
        .iter()
        .zip(samples.iter_mut())
        .map(|(&(s, conns), v)| Row {
            bench: "9p-meta",
            server: servers[s].0,
            conns,
            ops_per_sec: median(v),
        })
        .collect();
    Ok(P9Result { rows })
}

/// The human report, with walkfs over diod at each connection count.
pub fn render(res: &P9Result) -> String {
    let find = |server: &str, conns: usize| {
        res.rows
            .iter()
            .find(|r| r.server == server && r.conns == conns)
    };
    let t: Vec<Vec<String>> = res
        .rows
        .iter()
        .map(|r| {
            let vs = match (r.server, find("diod", r.conns)) {
                ("walkfs", Some(d)) => format!("{:.2}x", r.ops_per_sec / d.ops_per_sec),
                _ => String::new(),
            };
            vec![
                r.server.to_string(),
                r.conns.to_string(),
                format!("{:.0}", r.ops_per_sec),
                format!("{:.1}", 1e6 / r.ops_per_sec * r.conns as f64),
                vs,
            ]
        })
        .collect();
    let mut out = String::from(
        "9p-meta: Twalk(3 names) + Tgetattr + Tclunk per op, each waiting for its reply\n",
    );
    out.push_str(&table(
        &["server", "conns", "ops/s", "us/op/conn", "walkfs/diod"],
        &t,
    ));
    out
}
