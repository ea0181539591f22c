//! POSIX ACLs as Linux keeps them: the `system.posix_acl_access` and
//! `system.posix_acl_default` extended attributes in the kernel's binary
//! form (a version word, then entries of tag, permission and id), and the
//! rules fs/posix_acl.c applies to them. The vfs checks permissions with
//! [`Acl::permits`]; a backend that stores ACLs itself (memfs) keeps mode
//! and ACL in step with [`Acl::equiv_mode`], [`Acl::chmod`] and
//! [`Acl::inherit`].

use crate::{Errno, Result};

/// The attribute of the access ACL.
pub const ACCESS: &[u8] = b"system.posix_acl_access";
/// The attribute of a directory's default ACL.
pub const DEFAULT: &[u8] = b"system.posix_acl_default";

const VERSION: u32 = 2;
const HEADER: usize = 4;
const ENTRY: usize = 8;
/// The id of an entry that names no one (owner, group, mask, other).
const UNDEFINED_ID: u32 = u32::MAX;

/// An entry's tag (`ACL_USER_OBJ`, ...); the order of the variants is
/// the order entries must come in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Tag {
    UserObj,
    User(u32),
    GroupObj,
    Group(u32),
    Mask,
    Other,
}

impl Tag {
    fn code(self) -> (u16, u32) {
        match self {
            Tag::UserObj => (0x01, UNDEFINED_ID),
            Tag::User(id) => (0x02, id),
            Tag::GroupObj => (0x04, UNDEFINED_ID),
            Tag::Group(id) => (0x08, id),
            Tag::Mask => (0x10, UNDEFINED_ID),
            Tag::Other => (0x20, UNDEFINED_ID),
        }
    }

    fn from_code(tag: u16, id: u32) -> Result<Tag> {
        Ok(match tag {
            0x01 => Tag::UserObj,
            0x02 => Tag::User(id),
            0x04 => Tag::GroupObj,
            0x08 => Tag::Group(id),
            0x10 => Tag::Mask,
            0x20 => Tag::Other,
            _ => return Err(Errno::EINVAL),
        })
    }
}

/// One entry: who, and the `rwx` bits they get (before the mask).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    pub tag: Tag,
    pub perm: u16,
}

/// A valid ACL (`posix_acl_valid`): one owner, one owning group and one
/// other entry, a mask whenever a user or group is named, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Acl {
    entries: Vec<Entry>,
}

impl Acl {
    /// Parse and validate an attribute value. An empty value, or one with
    /// no entries, is `None`: setting it removes the ACL, as in Linux.
    pub fn parse(value: &[u8]) -> Result<Option<Acl>> {
        if value.is_empty() {
            return Ok(None);
        }
        if value.len() < HEADER || !(value.len() - HEADER).is_multiple_of(ENTRY) {
            return Err(Errno::EINVAL);
        }
        let word = |b: &[u8]| u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        if word(value) != VERSION {
            return Err(Errno::EOPNOTSUPP);
        }
        let mut entries = Vec::with_capacity((value.len() - HEADER) / ENTRY);
        for e in value[HEADER..].chunks_exact(ENTRY) {
            let tag = u16::from_le_bytes([e[0], e[1]]);
            let perm = u16::from_le_bytes([e[2], e[3]]);
            if perm & !7 != 0 {
                return Err(Errno::EINVAL);
            }
            entries.push(Entry {
                tag: Tag::from_code(tag, word(&e[4..]))?,
                perm,
            });
        }
        if entries.is_empty() {
            return Ok(None);
        }
        let acl = Acl { entries };
        acl.validate()?;
        Ok(Some(acl))
    }

    /// Linux's order and completeness rules; named ids strictly rise.
    fn validate(&self) -> Result<()> {
        let mut prev: Option<Tag> = None;
        let (mut owner, mut group, mut other, mut mask, mut named) = (0, 0, 0, 0, false);
        for e in &self.entries {
            if prev.is_some_and(|p| p >= e.tag) {
                return Err(Errno::EINVAL);
            }
            prev = Some(e.tag);
            match e.tag {
                Tag::UserObj => owner += 1,
                Tag::GroupObj => group += 1,
                Tag::Other => other += 1,
                Tag::Mask => mask += 1,
                Tag::User(id) | Tag::Group(id) => {
                    if id == UNDEFINED_ID {
                        return Err(Errno::EINVAL);
                    }
                    named = true;
                }
            }
        }
        if owner != 1 || group != 1 || other != 1 || (named && mask != 1) {
            return Err(Errno::EINVAL);
        }
        Ok(())
    }

    /// The ACL a mode means: owner, group and other entries only.
    pub fn from_mode(mode: u32) -> Acl {
        let p = |shift: u32| ((mode >> shift) & 7) as u16;
        Acl {
            entries: vec![
                Entry {
                    tag: Tag::UserObj,
                    perm: p(6),
                },
                Entry {
                    tag: Tag::GroupObj,
                    perm: p(3),
                },
                Entry {
                    tag: Tag::Other,
                    perm: p(0),
                },
            ],
        }
    }

    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// The attribute value.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(HEADER + ENTRY * self.entries.len());
        v.extend_from_slice(&VERSION.to_le_bytes());
        for e in &self.entries {
            let (tag, id) = e.tag.code();
            v.extend_from_slice(&tag.to_le_bytes());
            v.extend_from_slice(&e.perm.to_le_bytes());
            v.extend_from_slice(&id.to_le_bytes());
        }
        v
    }

    /// `posix_acl_permission`: may someone with `uid` (`owner`: the
    /// file's), in the groups `in_group` says, do `want` (`rwx` bits)?
    /// A named user's or any group's entry counts only through the mask.
    pub fn permits(
        &self,
        uid: u32,
        owner: bool,
        in_group: impl Fn(u32) -> bool,
        gid: u32,
        want: u32,
    ) -> bool {
        let want = (want & 7) as u16;
        let mask = self
            .entries
            .iter()
            .find(|e| e.tag == Tag::Mask)
            .map_or(7, |e| e.perm);
        let mut found_group = false;
        for e in &self.entries {
            match e.tag {
                Tag::UserObj if owner => return e.perm & want == want,
                Tag::User(id) if id == uid => return e.perm & mask & want == want,
                Tag::GroupObj if in_group(gid) => {
                    found_group = true;
                    if e.perm & mask & want == want {
                        return true;
                    }
                }
                Tag::Group(id) if in_group(id) => {
                    found_group = true;
                    if e.perm & mask & want == want {
                        return true;
                    }
                }
                Tag::Other => return !found_group && e.perm & want == want,
                _ => {}
            }
        }
        false
    }

    /// `posix_acl_equiv_mode`: the permission bits of `mode` this ACL
    /// sets, and whether the bits say all of it (then no ACL need be
    /// kept).
    pub fn equiv_mode(&self, mode: u32) -> (u32, bool) {
        let mut bits = 0;
        let mut equiv = true;
        for e in &self.entries {
            let p = u32::from(e.perm);
            match e.tag {
                Tag::UserObj => bits |= p << 6,
                Tag::GroupObj => bits |= p << 3,
                Tag::Other => bits |= p,
                Tag::Mask => {
                    bits = (bits & !0o070) | (p << 3);
                    equiv = false;
                }
                Tag::User(_) | Tag::Group(_) => equiv = false,
            }
        }
        ((mode & !0o777) | bits, equiv)
    }

    /// `posix_acl_chmod`: the entries a new mode's bits stand for (the
    /// owning group's, or the mask when there is one) take its bits.
    pub fn chmod(&mut self, mode: u32) {
        let has_mask = self.entries.iter().any(|e| e.tag == Tag::Mask);
        for e in &mut self.entries {
            let p = |shift: u32| ((mode >> shift) & 7) as u16;
            match e.tag {
                Tag::UserObj => e.perm = p(6),
                Tag::GroupObj if !has_mask => e.perm = p(3),
                Tag::Mask => e.perm = p(3),
                Tag::Other => e.perm = p(0),
                _ => {}
            }
        }
    }

    /// `posix_acl_create` from a directory's default ACL (`self`): the
    /// new node's permission bits (`mode` cut down by the ACL, with no
    /// umask), and its access ACL when the bits cannot say it all.
    pub fn inherit(&self, mode: u32) -> (u32, Option<Acl>) {
        let mut acl = self.clone();
        let mut mode = mode;
        let mut equiv = true;
        let mut group_obj = None;
        let mut mask_obj = None;
        for (i, e) in acl.entries.iter_mut().enumerate() {
            match e.tag {
                Tag::UserObj => {
                    e.perm &= ((mode >> 6) & 7) as u16;
                    mode &= (u32::from(e.perm) << 6) | !0o700;
                }
                Tag::User(_) | Tag::Group(_) => equiv = false,
                Tag::GroupObj => group_obj = Some(i),
                Tag::Mask => {
                    mask_obj = Some(i);
                    equiv = false;
                }
                Tag::Other => {
                    e.perm &= (mode & 7) as u16;
                    mode &= u32::from(e.perm) | !0o007;
                }
            }
        }
        if let Some(i) = mask_obj.or(group_obj) {
            let e = &mut acl.entries[i];
            e.perm &= ((mode >> 3) & 7) as u16;
            mode &= (u32::from(e.perm) << 3) | !0o070;
        }
        (mode, (!equiv).then_some(acl))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acl(entries: &[(Tag, u16)]) -> Acl {
        Acl {
            entries: entries
                .iter()
                .map(|&(tag, perm)| Entry { tag, perm })
                .collect(),
        }
    }

    #[test]
    fn round_trip_and_validation() {
        let a = acl(&[
            (Tag::UserObj, 6),
            (Tag::User(1000), 6),
            (Tag::GroupObj, 4),
            (Tag::Mask, 6),
            (Tag::Other, 4),
        ]);
        let b = a.to_bytes();
        assert_eq!(Acl::parse(&b), Ok(Some(a)));
        assert_eq!(Acl::parse(&[]), Ok(None));
        assert_eq!(Acl::parse(&VERSION.to_le_bytes()), Ok(None));
        // A named user without a mask, entries out of order, a bad length.
        let no_mask = acl(&[
            (Tag::UserObj, 6),
            (Tag::User(5), 6),
            (Tag::GroupObj, 4),
            (Tag::Other, 4),
        ]);
        assert_eq!(Acl::parse(&no_mask.to_bytes()), Err(Errno::EINVAL));
        let order = acl(&[(Tag::GroupObj, 4), (Tag::UserObj, 6), (Tag::Other, 4)]);
        assert_eq!(Acl::parse(&order.to_bytes()), Err(Errno::EINVAL));
        assert_eq!(Acl::parse(&b[..b.len() - 1]), Err(Errno::EINVAL));
        let mut v1 = b.clone();
        v1[0] = 1;
        assert_eq!(Acl::parse(&v1), Err(Errno::EOPNOTSUPP));
    }

    #[test]
    fn permission_follows_linux() {
        let a = acl(&[
            (Tag::UserObj, 7),
            (Tag::User(1000), 7),
            (Tag::User(1001), 0),
            (Tag::GroupObj, 5),
            (Tag::Group(50), 7),
            (Tag::Mask, 5),
            (Tag::Other, 1),
        ]);
        let none = |_| false;
        // The named user is cut by the mask.
        assert!(a.permits(1000, false, none, 10, 5));
        assert!(!a.permits(1000, false, none, 10, 2));
        // A named user with nothing gets nothing, though "other" has x.
        assert!(!a.permits(1001, false, none, 10, 1));
        // Group 50 through the mask; a member of a matching group who is
        // refused does not fall back to "other".
        assert!(a.permits(2000, false, |g| g == 50, 10, 4));
        assert!(!a.permits(2000, false, |g| g == 50, 10, 2));
        assert!(a.permits(2000, false, none, 10, 1));
        // The owner entry alone decides for the owner.
        assert!(a.permits(7, true, none, 10, 7));
    }

    #[test]
    fn mode_and_acl_in_step() {
        let mut a = acl(&[
            (Tag::UserObj, 7),
            (Tag::User(1000), 7),
            (Tag::GroupObj, 5),
            (Tag::Mask, 7),
            (Tag::Other, 0),
        ]);
        assert_eq!(
            a.equiv_mode(libc::S_IFREG | 0o4000),
            (libc::S_IFREG | 0o4770, false)
        );
        a.chmod(0o750);
        assert_eq!(a.equiv_mode(0).0, 0o750);
        // The owning group's entry is untouched when a mask stands for it.
        assert!(a.entries.contains(&Entry {
            tag: Tag::GroupObj,
            perm: 5
        }));
        let plain = Acl::from_mode(0o640);
        assert_eq!(plain.equiv_mode(0), (0o640, true));
    }

    #[test]
    fn inheritance_cuts_the_mode() {
        let d = acl(&[
            (Tag::UserObj, 7),
            (Tag::User(1000), 7),
            (Tag::GroupObj, 5),
            (Tag::Mask, 7),
            (Tag::Other, 0),
        ]);
        let (mode, access) = d.inherit(0o666);
        assert_eq!(mode, 0o660);
        let access = access.expect("named entries keep an ACL");
        assert!(access.entries.contains(&Entry {
            tag: Tag::Mask,
            perm: 6
        }));
        let (mode, access) = Acl::from_mode(0o750).inherit(0o777);
        assert_eq!((mode, access), (0o750, None));
    }
}
