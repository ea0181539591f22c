//! Files a benchmark fetches and unpacks: finding what a download or an
//! untar left in a directory.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The first entry of `dir` (in the order the directory lists them) that
/// `want` accepts.
pub fn find_in(dir: &Path, want: impl Fn(&Path) -> bool) -> std::io::Result<Option<PathBuf>> {
    Ok(std::fs::read_dir(dir)?
        .flatten()
        .map(|e| e.path())
        .find(|p| want(p)))
}

/// `p`'s file name, if it is UTF-8.
pub fn file_name(p: &Path) -> Option<&str> {
    p.file_name().and_then(|n| n.to_str())
}

/// `tar xf TARBALL -C DIR`.
pub fn untar(tarball: &Path, dir: &Path) -> Command {
    let mut c = Command::new("tar");
    c.arg("xf").arg(tarball).arg("-C").arg(dir);
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_by_name_and_kind() {
        let t = tempfile::tempdir().expect("tempdir");
        std::fs::write(t.path().join("wpa_2.10.orig.tar.xz"), b"").expect("write");
        std::fs::create_dir(t.path().join("tree")).expect("mkdir");
        let tar = find_in(t.path(), |p| {
            file_name(p).is_some_and(|n| n.starts_with("wpa_"))
        })
        .expect("read_dir");
        assert_eq!(tar, Some(t.path().join("wpa_2.10.orig.tar.xz")));
        let dir = find_in(t.path(), Path::is_dir).expect("read_dir");
        assert_eq!(dir, Some(t.path().join("tree")));
        assert_eq!(find_in(t.path(), |_| false).expect("read_dir"), None);
        assert!(find_in(&t.path().join("none"), |_| true).is_err());
    }
}
