//! Who may attach.
//!
//! With a shared secret configured, a connection attaches only after
//! showing it knows the secret, in one of two ways:
//! - 9P's own authentication: `Tauth afid`, then `Twrite` of the secret to
//!   `afid`, then `Tattach` naming `afid` (what the walkfs client does with
//!   `secret_file=`);
//! - in the attach name, for the Linux kernel's 9p client, which never
//!   sends `Tauth`: `mount -t 9p -o aname=secret=SECRET`. The attach name
//!   is a comma list; its `secret=` item is the secret.
//!
//! The secret authenticates; it does not encrypt. Over a network anyone
//! on the path sees it and the traffic: use a trusted link or a tunnel.
//! Comparisons take the same time whatever the bytes, and a failed attach
//! is logged with the peer.

use std::io;
use std::path::Path;

/// Bytes of the secret a client may write to an auth fid.
pub const MAX_SECRET: usize = 4096;
/// Auth fids one connection may hold.
pub const MAX_AUTH_FIDS: usize = 8;

/// A shared secret.
#[derive(Clone)]
pub struct Secret(Vec<u8>);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}

impl Secret {
    /// The secret in `bytes` (a trailing newline is not part of it).
    pub fn new(bytes: &[u8]) -> io::Result<Secret> {
        let s = bytes.strip_suffix(b"\n").unwrap_or(bytes);
        let s = s.strip_suffix(b"\r").unwrap_or(s);
        if s.len() < 8 || s.len() > MAX_SECRET || s.contains(&b',') {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "a secret is 8 to 4096 bytes without a comma",
            ));
        }
        Ok(Secret(s.to_vec()))
    }

    /// Read the secret from `path`, which must not be readable by others
    /// (the secret is only as private as its file).
    pub fn from_file(path: &Path) -> io::Result<Secret> {
        Secret::new(&walkfs_p9::read_secret_file(path)?)
    }

    /// Does `given` equal the secret? In time that depends only on the
    /// lengths.
    pub fn matches(&self, given: &[u8]) -> bool {
        let given = given.strip_suffix(b"\n").unwrap_or(given);
        if given.len() != self.0.len() {
            return false;
        }
        let diff = self
            .0
            .iter()
            .zip(given)
            .fold(0u8, |acc, (a, b)| acc | (a ^ b));
        // Keep the fold from being turned into an early-exit compare.
        std::hint::black_box(diff) == 0
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

/// The `secret=` item of an attach name, if any.
pub fn secret_in_aname(aname: &[u8]) -> Option<&[u8]> {
    aname
        .split(|&b| b == b',')
        .find_map(|item| item.strip_prefix(b"secret="))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets() {
        let s = Secret::new(b"correct horse\n").unwrap();
        assert!(s.matches(b"correct horse"));
        assert!(s.matches(b"correct horse\n"));
        assert!(!s.matches(b"correct hors"));
        assert!(!s.matches(b"correct horsf"));
        assert!(!s.matches(b""));
        assert!(Secret::new(b"short").is_err());
        assert!(Secret::new(b"with,a comma").is_err());
        assert_eq!(secret_in_aname(b"/export,secret=abc,x"), Some(&b"abc"[..]));
        assert_eq!(secret_in_aname(b"secret=abc"), Some(&b"abc"[..]));
        assert_eq!(secret_in_aname(b"/export"), None);
    }

    #[test]
    fn a_secret_file_readable_by_others_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("key");
        std::fs::write(&p, b"0123456789abcdef\n").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = Secret::from_file(&p).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::PermissionDenied);
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(Secret::from_file(&p).unwrap().matches(b"0123456789abcdef"));
    }
}
