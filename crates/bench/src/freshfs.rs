//! A fresh ext4 file system for each measured run.
//!
//! Timing creates on a disk that has seen deletions measures the disk's
//! history: ext4 without a journal (this machine's root) skips, at every
//! inode allocation, each inode freed in the last 5 seconds, or the last
//! 305 while its inode-table block is dirty (`recently_deleted` in
//! fs/ext4/ialloc.c). After an `rm -rf` of the previous run, a 10,000-file
//! untar spent seconds in that scan natively and through every mount,
//! varying run to run. Each run gets a new ext4 (with a journal, as
//! users' disks have) on a loop device instead, made and mounted by
//! `mkfs.ext4` and `mount -o loop`, and unmounted when dropped.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// A fresh ext4 mounted on a directory; unmounted and its image removed
/// when dropped.
pub struct FreshFs {
    dir: PathBuf,
    image: PathBuf,
}

fn run(c: &mut Command) -> Result<(), String> {
    let out = c
        .stdout(Stdio::null())
        .output()
        .map_err(|e| format!("{c:?}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{c:?}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(())
}

impl FreshFs {
    /// A new ext4 of `gib` GiB mounted on `dir` (made if missing), its
    /// image beside it. Needs root and a free loop device.
    pub fn new(dir: &Path, gib: u64) -> Result<FreshFs, String> {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let image = dir.with_extension("img");
        let f = std::fs::File::create(&image).map_err(|e| format!("{}: {e}", image.display()))?;
        f.set_len(gib << 30)
            .map_err(|e| format!("{}: {e}", image.display()))?;
        drop(f);
        let made = run(Command::new("mkfs.ext4")
            .args(["-q", "-F", "-E", "nodiscard"])
            .arg(&image))
        .and_then(|()| {
            run(Command::new("mount")
                .args(["-o", "loop"])
                .arg(&image)
                .arg(dir))
        });
        if let Err(e) = made {
            let _ = std::fs::remove_file(&image);
            return Err(e);
        }
        Ok(FreshFs {
            dir: dir.to_path_buf(),
            image,
        })
    }

    /// Where it is mounted.
    pub fn path(&self) -> &Path {
        &self.dir
    }
}

impl Drop for FreshFs {
    fn drop(&mut self) {
        // A mount left inside (a failed run) goes first.
        let _ = run(Command::new("umount").arg("-R").arg(&self.dir));
        let _ = std::fs::remove_file(&self.image);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fresh_fs_is_empty_ext4_and_goes_at_drop() {
        // SAFETY: geteuid cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: needs root");
            return;
        }
        let tmp = tempfile::tempdir().expect("tmp");
        let dir = tmp.path().join("fs");
        let fs = match FreshFs::new(&dir, 1) {
            Ok(fs) => fs,
            Err(e) => {
                eprintln!("skipped: no loop mount here ({e})");
                return;
            }
        };
        let mounts = std::fs::read_to_string("/proc/mounts").expect("mounts");
        let line = mounts
            .lines()
            .find(|l| l.split(' ').nth(1) == Some(&*dir.to_string_lossy()))
            .expect("mounted");
        assert_eq!(line.split(' ').nth(2), Some("ext4"));
        std::fs::write(fs.path().join("f"), b"x").expect("writable");
        drop(fs);
        let mounts = std::fs::read_to_string("/proc/mounts").expect("mounts");
        assert!(!mounts.contains(&*dir.to_string_lossy()));
        assert!(!dir.with_extension("img").exists());
    }
}
