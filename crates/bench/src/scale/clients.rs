//! Part 3: one `walkfs serve`, many 9P clients (threads of this process,
//! the vfs over the 9P client backend), each walking and stating a
//! subtree of its own.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use walkfs_source::SourceOptions;
use walkfs_vfs::{Creds, Ctx, AT_FDCWD};

use super::sample::{fd_limit, Sampler};
use super::stack::kill_pids;
use super::tree::{cached_tree, synth_dirs, synth_rel, watched, Problems};
use super::{Row, ScaleOpts, ScaleResult, CACHE, PER_DIR};
use crate::report::progress;

/// Client `k`'s walk of `/c{k}`: list each directory (every expected name
/// there, nothing else), lstat each file (regular, size 0).
fn client_walk(ctx: &Ctx, k: usize, n: u64, done: &AtomicU64) -> Problems {
    let mut p = Problems::default();
    let base = format!("/c{k}");
    for d in 0..synth_dirs(n) {
        let dir = format!("{base}/d{d:06}");
        let lo = d * PER_DIR;
        let hi = ((d + 1) * PER_DIR).min(n);
        let names = ctx
            .openat(
                AT_FDCWD,
                dir.as_bytes(),
                libc::O_RDONLY | libc::O_DIRECTORY,
                0,
            )
            .and_then(|fd| {
                let mut names = std::collections::BTreeSet::new();
                // getdents hands out what it has not yet: until empty.
                let r = loop {
                    match ctx.getdents(fd) {
                        Ok(v) if v.is_empty() => break Ok(names),
                        Ok(v) => names.extend(v.into_iter().map(|e| e.name)),
                        Err(e) => break Err(e),
                    }
                };
                let _ = ctx.close(fd);
                r
            });
        match names {
            Ok(names) => {
                let extra = names.len() as u64
                    - names.iter().filter(|x| *x == b"." || *x == b"..").count() as u64;
                for i in lo..hi {
                    let f = format!("f{:03}", i % PER_DIR);
                    if !names.contains(f.as_bytes()) {
                        p.add(|| format!("{dir}: no {f} in the listing"));
                    }
                }
                if extra != hi - lo {
                    p.add(|| format!("{dir}: {extra} names listed, want {}", hi - lo));
                }
            }
            Err(e) => p.add(|| format!("{dir}: {e}")),
        }
        for i in lo..hi {
            let path = format!("{base}/{}", synth_rel(i));
            match ctx.statx(
                AT_FDCWD,
                path.as_bytes(),
                libc::AT_SYMLINK_NOFOLLOW,
                libc::STATX_BASIC_STATS,
            ) {
                Ok(st) => {
                    let kind = u32::from(st.stx_mode) & libc::S_IFMT;
                    if kind != libc::S_IFREG || st.stx_size != 0 {
                        p.add(|| format!("{path}: mode {:o} size {}", st.stx_mode, st.stx_size));
                    }
                }
                Err(e) => p.add(|| format!("{path}: {e}")),
            }
            done.fetch_add(1, Ordering::Relaxed);
        }
    }
    p
}

pub(super) fn clients(opts: &ScaleOpts, res: &mut ScaleResult) -> Result<(), String> {
    let c = opts.serve_clients();
    let n = opts.client_files();
    let name = format!("clients-{c}x{n}");
    let subtrees: Vec<String> = (0..c).map(|k| format!("c{k}")).collect();
    let (tree, made) = cached_tree(&name, &subtrees, n)?;
    if let Some(s) = made {
        let mut row = Row::new("clients", "make-tree", "native");
        row.seconds = Some(s);
        row.files = Some(n * c as u64);
        res.rows.push(row);
    }
    let sock = Path::new(CACHE).join("clients.sock");
    progress("scale: clients: starting walkfs serve");
    let mut server = crate::proc::walkfs_serve(&opts.walkfs, &tree, &sock, &[])?;
    let pid = server.0.id();
    let pids = [None, Some(pid)];
    let sampler = Sampler::start(pids);
    let source = format!("unix:{}", sock.display());
    let o = SourceOptions::parse("cache=loose").map_err(|e| e.to_string())?;
    let mut ctxs = Vec::new();
    for k in 0..c {
        let vfs =
            walkfs_source::open(&source, &o).map_err(|e| format!("client {k}: connect: {e}"))?;
        ctxs.push(vfs.context(Creds::root()));
    }
    let total = n * c as u64;
    let done = AtomicU64::new(0);
    sampler.begin();
    let t0 = Instant::now();
    let (probs, stalled) = watched(
        &format!("clients: {c} walking {n} files each"),
        &done,
        total,
        &|| kill_pids(&pids),
        || {
            std::thread::scope(|s| {
                let hs: Vec<_> = ctxs
                    .into_iter()
                    .enumerate()
                    .map(|(k, ctx)| {
                        let done = &done;
                        s.spawn(move || client_walk(&ctx, k, n, done))
                    })
                    .collect();
                let mut all = Problems::default();
                for h in hs {
                    match h.join() {
                        Ok(p) => all.merge(p),
                        Err(_) => all.add(|| "a client thread panicked".into()),
                    }
                }
                all
            })
        },
    )?;
    let secs = t0.elapsed().as_secs_f64();
    let mut row = Row::new("clients", "walk-stat", "walkfs");
    row.peaks(&sampler.end());
    let stats = done.load(Ordering::Relaxed);
    row.seconds = Some(secs);
    row.clients = Some(c);
    row.files = Some(total);
    row.ops_per_sec = Some(stats as f64 / secs);
    row.errors = Some(probs.count);
    row.output = Some(format!("{stats} stats, {} errors", probs.count));
    let gone = server.exited();
    if probs.count > 0 || stalled || gone.is_some() {
        let msg = format!(
            "clients: {} errors in {c} clients' {total} files{}{}: {}",
            probs.count,
            if stalled {
                " (the server stalled and was killed)"
            } else {
                ""
            },
            gone.map(|g| format!(" (walkfs serve {g})"))
                .unwrap_or_default(),
            probs.examples.join("; ")
        );
        res.fail_row(&mut row, msg);
    }
    res.rows.push(row);
    let mut row = Row::new("clients", "overall", "walkfs");
    row.clients = Some(c);
    row.peaks(&sampler.overall());
    row.fd_limit_server = fd_limit(pid);
    res.rows.push(row);
    drop(sampler);
    drop(server);
    let _ = std::fs::remove_file(&sock);
    Ok(())
}
