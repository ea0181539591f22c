//! `walkfs stat`, `walkfs ls` and `walkfs readlink`: one lookup in a
//! SOURCE, printed. `walkfs 9p` prints with the same functions.

use walkfs_source::SourceOptions;
use walkfs_vfs::{Creds, AT_FDCWD};

/// Resolve PATH in SOURCE and print what stat(2) reports, or the errno.
#[derive(clap::Args)]
pub struct Stat {
    source: String,
    path: String,
    /// Do not follow a trailing symlink (lstat).
    #[arg(long)]
    nofollow: bool,
    #[arg(short, long, default_value = "")]
    options: String,
}

impl Stat {
    pub fn run(self) -> Result<(), String> {
        let Stat {
            source,
            path,
            nofollow,
            options,
        } = self;
        let ctx = open(&source, &options)?;
        print_stat(&ctx, &path, nofollow)
    }
}

/// List the directory PATH of SOURCE.
#[derive(clap::Args)]
pub struct Ls {
    source: String,
    #[arg(default_value = "/")]
    path: String,
    #[arg(short, long, default_value = "")]
    options: String,
}

impl Ls {
    pub fn run(self) -> Result<(), String> {
        let Ls {
            source,
            path,
            options,
        } = self;
        let ctx = open(&source, &options)?;
        print_ls(&ctx, &path)
    }
}

/// Print the target of the symlink PATH in SOURCE.
#[derive(clap::Args)]
pub struct Readlink {
    source: String,
    path: String,
}

impl Readlink {
    pub fn run(self) -> Result<(), String> {
        let Readlink { source, path } = self;
        print_readlink(&open(&source, "")?, &path)
    }
}

pub fn open(source: &str, options: &str) -> Result<walkfs_vfs::Ctx, String> {
    let opts =
        SourceOptions::parse(options).map_err(|e| format!("bad options {options:?}: {e}"))?;
    let vfs =
        walkfs_source::open(source, &opts).map_err(|e| format!("cannot open {source}: {e}"))?;
    Ok(vfs.context(Creds::current()))
}

pub fn print_stat(ctx: &walkfs_vfs::Ctx, path: &str, nofollow: bool) -> Result<(), String> {
    let flags = if nofollow {
        libc::AT_SYMLINK_NOFOLLOW
    } else {
        0
    };
    let st = ctx
        .statx(AT_FDCWD, path.as_bytes(), flags, libc::STATX_BASIC_STATS)
        .map_err(|e| format!("{path}: {e}"))?;
    // The birth time, where known, names the file's generation.
    let born = if st.stx_mask & libc::STATX_BTIME != 0 {
        format!(" born {}.{:09}", st.stx_btime.tv_sec, st.stx_btime.tv_nsec)
    } else {
        String::new()
    };
    println!(
        "{path}: mode {:o} nlink {} uid {} gid {} size {} ino {}{born}",
        st.stx_mode, st.stx_nlink, st.stx_uid, st.stx_gid, st.stx_size, st.stx_ino
    );
    Ok(())
}

pub fn print_ls(ctx: &walkfs_vfs::Ctx, path: &str) -> Result<(), String> {
    let fd = ctx
        .openat(
            AT_FDCWD,
            path.as_bytes(),
            libc::O_RDONLY | libc::O_DIRECTORY,
            0,
        )
        .map_err(|e| format!("{path}: {e}"))?;
    let mut names: Vec<_> = ctx.getdents(fd).map_err(|e| format!("{path}: {e}"))?;
    names.sort_by(|a, b| a.name.cmp(&b.name));
    for e in names.iter().filter(|e| e.name != b"." && e.name != b"..") {
        println!("{}", String::from_utf8_lossy(&e.name));
    }
    Ok(())
}

pub fn print_readlink(ctx: &walkfs_vfs::Ctx, path: &str) -> Result<(), String> {
    let t = ctx
        .readlinkat(AT_FDCWD, path.as_bytes())
        .map_err(|e| format!("{path}: {e}"))?;
    println!("{}", String::from_utf8_lossy(&t));
    Ok(())
}
