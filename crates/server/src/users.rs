//! Who a 9P caller is: `Tattach`'s `n_uname` (or `uname`) to credentials
//! with the user's primary group and supplementary groups, as a login
//! would set them (diod does the same with `initgroups`).

use std::ffi::CString;

use walkfs_vfs::Creds;

/// Credentials for `uid` (or, when `uid` is `!0`, for the user named
/// `uname`). A uid with no passwd entry gets gid = uid and no groups;
/// `None` only for an unknown name.
pub fn creds_for(uid: u32, uname: &[u8]) -> Option<Creds> {
    if let Some(db) = SNAPSHOT.get() {
        return db.creds_for(uid, uname);
    }
    let pw = if uid != u32::MAX {
        passwd_by_uid(uid)
    } else {
        passwd_by_name(uname)?
    };
    let (uid, gid, name) = match pw {
        Some(p) => p,
        None => {
            return Some(Creds {
                uid,
                gid: uid,
                groups: Vec::new(),
                privileged: false,
            })
        }
    };
    Some(Creds {
        uid,
        gid,
        groups: group_list(&name, gid),
        privileged: false,
    })
}

/// The user database as read once before the server confined itself
/// (`/etc` inside the sandbox is the export's, which clients may write).
static SNAPSHOT: std::sync::OnceLock<UserDb> = std::sync::OnceLock::new();

/// Read `/etc/passwd` and `/etc/group` now; from then on credentials come
/// from what was read (local files only: NSS services are not asked).
pub fn snapshot() {
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    let _ = SNAPSHOT.set(UserDb::parse(&read("/etc/passwd"), &read("/etc/group")));
}

#[derive(Default, Debug)]
struct UserDb {
    /// (name, uid, primary gid)
    users: Vec<(String, u32, u32)>,
    /// (gid, members)
    groups: Vec<(u32, Vec<String>)>,
}

impl UserDb {
    fn parse(passwd: &str, group: &str) -> UserDb {
        let mut db = UserDb::default();
        for l in passwd.lines() {
            let f: Vec<&str> = l.split(':').collect();
            if let (Some(name), Some(Ok(uid)), Some(Ok(gid))) = (
                f.first(),
                f.get(2).map(|v| v.parse()),
                f.get(3).map(|v| v.parse()),
            ) {
                db.users.push((name.to_string(), uid, gid));
            }
        }
        for l in group.lines() {
            let f: Vec<&str> = l.split(':').collect();
            if let (Some(Ok(gid)), Some(members)) = (f.get(2).map(|v| v.parse()), f.get(3)) {
                let m = members
                    .split(',')
                    .filter(|s| !s.is_empty())
                    .map(str::to_string)
                    .collect();
                db.groups.push((gid, m));
            }
        }
        db
    }

    fn creds_for(&self, uid: u32, uname: &[u8]) -> Option<Creds> {
        let user = if uid != u32::MAX {
            self.users.iter().find(|u| u.1 == uid)
        } else {
            let name = std::str::from_utf8(uname).ok()?;
            Some(self.users.iter().find(|u| u.0 == name)?)
        };
        let Some((name, uid, gid)) = user else {
            return Some(Creds {
                uid,
                gid: uid,
                groups: Vec::new(),
                privileged: false,
            });
        };
        let groups = self
            .groups
            .iter()
            .filter(|(g, m)| g != gid && m.iter().any(|x| x == name))
            .map(|(g, _)| *g)
            .collect();
        Some(Creds {
            uid: *uid,
            gid: *gid,
            groups,
            privileged: false,
        })
    }
}

type Passwd = Option<(u32, u32, CString)>;

fn passwd_by_uid(uid: u32) -> Passwd {
    let mut buf = vec![0 as libc::c_char; 4096];
    // SAFETY: passwd is plain data that getpwuid_r fills; the buffer and
    // result pointers are valid for the call.
    unsafe {
        let mut pw: libc::passwd = std::mem::zeroed();
        let mut out: *mut libc::passwd = std::ptr::null_mut();
        let r = libc::getpwuid_r(uid, &mut pw, buf.as_mut_ptr(), buf.len(), &mut out);
        if r != 0 || out.is_null() {
            return None;
        }
        let name = std::ffi::CStr::from_ptr(pw.pw_name).to_owned();
        Some((pw.pw_uid, pw.pw_gid, name))
    }
}

fn passwd_by_name(name: &[u8]) -> Option<Passwd> {
    let c = CString::new(name).ok()?;
    let mut buf = vec![0 as libc::c_char; 4096];
    // SAFETY: as in passwd_by_uid; `c` is a valid C string.
    unsafe {
        let mut pw: libc::passwd = std::mem::zeroed();
        let mut out: *mut libc::passwd = std::ptr::null_mut();
        let r = libc::getpwnam_r(c.as_ptr(), &mut pw, buf.as_mut_ptr(), buf.len(), &mut out);
        if r != 0 || out.is_null() {
            return None;
        }
        Some(Some((pw.pw_uid, pw.pw_gid, c)))
    }
}

fn group_list(name: &CString, gid: u32) -> Vec<u32> {
    let mut n: libc::c_int = 64;
    loop {
        let mut groups = vec![0 as libc::gid_t; n as usize];
        let want = n;
        // SAFETY: `groups` has room for `n` entries; getgrouplist writes at
        // most that many and updates `n`.
        let r = unsafe { libc::getgrouplist(name.as_ptr(), gid, groups.as_mut_ptr(), &mut n) };
        if r >= 0 {
            groups.truncate(n.max(0) as usize);
            groups.retain(|&g| g != gid);
            return groups;
        }
        if n <= want {
            return Vec::new();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_and_unknown_ids() {
        let root = creds_for(0, b"").expect("root");
        assert_eq!((root.uid, root.gid), (0, 0));
        let by_name = creds_for(u32::MAX, b"root").expect("root by name");
        assert_eq!(by_name.uid, 0);
        let nobody = creds_for(54321, b"").expect("any uid");
        assert_eq!((nobody.uid, nobody.gid), (54321, 54321));
        assert!(creds_for(u32::MAX, b"no-such-user-walkfs").is_none());
    }

    #[test]
    fn the_snapshot_answers_like_the_system() {
        let db = UserDb::parse(
            "root:x:0:0:root:/root:/bin/sh\nann:x:1000:1000::/home/ann:/bin/sh\nbad line\n",
            "root:x:0:\nann:x:1000:\nsrc:x:40:ann,bob\nwheel:x:10:bob\n",
        );
        let ann = db.creds_for(1000, b"").expect("ann");
        assert_eq!((ann.uid, ann.gid, ann.groups), (1000, 1000, vec![40]));
        let by_name = db.creds_for(u32::MAX, b"ann").expect("ann by name");
        assert_eq!(by_name.uid, 1000);
        assert!(db.creds_for(u32::MAX, b"bob").is_none());
        let nobody = db.creds_for(54321, b"").expect("any uid");
        assert_eq!((nobody.uid, nobody.gid), (54321, 54321));
    }
}
