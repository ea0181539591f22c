//! Extended attribute calls on a path, with Linux's answers as values:
//! the same calls on a host directory and on a mount are compared.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

fn c(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).expect("path")
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// `lgetxattr`: the value or the errno.
pub fn get(p: &Path, name: &str) -> Result<Vec<u8>, i32> {
    let n = CString::new(name).expect("name");
    let mut buf = vec![0u8; 70_000];
    // SAFETY: valid C strings and a buffer with its length.
    let r = unsafe {
        libc::lgetxattr(
            c(p).as_ptr(),
            n.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    if r < 0 {
        return Err(errno());
    }
    buf.truncate(r as usize);
    Ok(buf)
}

/// `lsetxattr`: 0 or the errno.
pub fn set(p: &Path, name: &str, value: &[u8], flags: i32) -> i32 {
    let n = CString::new(name).expect("name");
    // SAFETY: valid C strings and a value with its length.
    let r = unsafe {
        libc::lsetxattr(
            c(p).as_ptr(),
            n.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            flags,
        )
    };
    if r < 0 {
        errno()
    } else {
        0
    }
}

/// `lremovexattr`: 0 or the errno.
pub fn remove(p: &Path, name: &str) -> i32 {
    let n = CString::new(name).expect("name");
    // SAFETY: valid C strings.
    if unsafe { libc::lremovexattr(c(p).as_ptr(), n.as_ptr()) } < 0 {
        errno()
    } else {
        0
    }
}

/// The names `llistxattr` gives, sorted (the order is the file
/// system's).
pub fn list(p: &Path) -> Result<Vec<String>, i32> {
    let mut buf = vec![0u8; 70_000];
    // SAFETY: a buffer with its length.
    let r = unsafe { libc::llistxattr(c(p).as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    if r < 0 {
        return Err(errno());
    }
    let mut v: Vec<String> = buf[..r as usize]
        .split(|b| *b == 0)
        .filter(|n| !n.is_empty())
        .map(|n| String::from_utf8_lossy(n).into_owned())
        .collect();
    v.sort();
    Ok(v)
}
