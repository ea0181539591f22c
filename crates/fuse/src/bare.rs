//! Bare listings: READDIRPLUS entries without attributes, while they pay.
//!
//! A READDIRPLUS entry with node id 0 gives the kernel a name, a type and
//! an inode number, and makes no dentry (fs/fuse/readdir.c skips linking
//! it). Listing a directory bare costs one directory read; listing it
//! with attributes costs a stat and a node per entry, and a FORGET for
//! each later. Which is cheaper depends on what comes next:
//! - `find`, `ls`, a build's directory scans: names and types are all
//!   they use; only subdirectories are looked up (to be opened). Bare
//!   wins by the whole cost of the attributes.
//! - `ls -l`, `du`, `rm -r`, `git status`: every entry is looked up
//!   next. Bare would cost a round trip per entry; attributes win.
//!
//! So the mount watches what follows its bare listings: lookups of
//! non-directories in directories it listed bare, against the
//! non-directories it listed. While they stay under a quarter, listings
//! stay bare; past that it lists with attributes, and lists one request
//! in sixteen bare as a probe, so that a change of workload is seen and
//! bare listings come back.
//!
//! Only for backends where a lookup costs what a stat in the listing
//! would (a local directory): over 9P, attributes come with the listing
//! in one message, and a lookup is a round trip to the server.

use std::collections::HashSet;

use parking_lot::Mutex;

/// Non-directories listed bare before the mount judges.
const WINDOW: u64 = 256;
/// In attributes mode, one listing request in this many is bare.
const PROBE_EVERY: u64 = 16;
/// Directories remembered as listed bare (cleared when full).
const RECENT: usize = 4096;

#[derive(Default)]
struct State {
    /// Listing with attributes (lookups followed bare listings).
    attrs: bool,
    /// Listing requests answered in attributes mode (for the probes).
    requests: u64,
    /// Non-directories listed bare in the current window.
    listed: u64,
    /// Lookups of non-directories in directories listed bare.
    looked_up: u64,
    /// Directories listed bare lately (node ids).
    recent: HashSet<u64>,
}

pub(crate) struct BarePolicy {
    enabled: bool,
    state: Mutex<State>,
}

impl BarePolicy {
    pub fn new(enabled: bool) -> BarePolicy {
        BarePolicy {
            enabled,
            state: Mutex::new(State::default()),
        }
    }

    /// Is a READDIRPLUS reply starting now to be bare?
    pub fn bare_now(&self) -> bool {
        if !self.enabled {
            return false;
        }
        let mut s = self.state.lock();
        if !s.attrs {
            return true;
        }
        s.requests += 1;
        s.requests.is_multiple_of(PROBE_EVERY)
    }

    /// A bare reply of directory `dir` named `files` non-directories.
    pub fn listed(&self, dir: u64, files: u64) {
        let mut s = self.state.lock();
        if s.recent.len() >= RECENT {
            s.recent.clear();
        }
        s.recent.insert(dir);
        s.listed += files;
        if s.listed >= WINDOW {
            // Lookups of more than a quarter of what was listed bare:
            // the attributes would have been used.
            s.attrs = s.looked_up * 4 > s.listed;
            s.listed = 0;
            s.looked_up = 0;
        }
    }

    /// A lookup in `parent` found a file of type `mode`.
    pub fn looked_up(&self, parent: u64, mode: u32) {
        if !self.enabled || mode & libc::S_IFMT == libc::S_IFDIR {
            return;
        }
        let mut s = self.state.lock();
        if s.recent.contains(&parent) {
            s.looked_up += 1;
        }
    }

    /// Listing with attributes now (for statistics and tests).
    pub fn attrs_mode(&self) -> bool {
        self.state.lock().attrs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_only_stay_bare_and_stats_bring_attributes() {
        let p = BarePolicy::new(true);
        // find: listings, and lookups of directories only.
        for d in 0..10 {
            assert!(p.bare_now());
            p.listed(d, 100);
            p.looked_up(d, libc::S_IFDIR | 0o755);
        }
        assert!(!p.attrs_mode());
        // du: every file looked up after its listing; judged once a
        // window of listed files is full.
        for d in 10..16 {
            p.listed(d, 100);
            for _ in 0..100 {
                p.looked_up(d, libc::S_IFREG | 0o644);
            }
        }
        assert!(p.attrs_mode());
        // Attributes from now on, with one bare probe in sixteen.
        let bare = (0..32).filter(|_| p.bare_now()).count();
        assert_eq!(bare, 2);
        // The probes see names-only use again: bare comes back after a
        // window without lookups.
        for d in 20..26 {
            p.listed(d, 100);
        }
        assert!(!p.attrs_mode());
        assert!(p.bare_now());
    }

    #[test]
    fn lookups_elsewhere_do_not_count_and_a_disabled_policy_never_lists_bare() {
        let p = BarePolicy::new(true);
        p.listed(1, 10);
        for _ in 0..1000 {
            p.looked_up(2, libc::S_IFREG);
        }
        p.listed(1, 300);
        assert!(!p.attrs_mode());
        assert!(!BarePolicy::new(false).bare_now());
    }
}
