//! `walkfs sync`: wait for the changes a mount let run behind their callers.

use crate::control;

/// Drain a walkfs mount: send what it gathered and wait until every
/// change that ran behind its caller (unlinks, writes, attribute
/// changes on a 9P source) has been carried out. Exits non-zero with
/// the error if any of them failed since the last `walkfs sync` (each
/// failure is also logged by the mount with its path). sync(2) does
/// not reach a FUSE daemon; this does.
#[derive(clap::Args)]
pub struct Sync {
    mountpoint: String,
}

impl Sync {
    pub fn run(self) -> Result<(), String> {
        let Sync { mountpoint } = self;
        match control::sync(&mountpoint) {
            Ok(()) => Ok(()),
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::ENOTTY | libc::ENOTSUP | libc::EINVAL)
                ) =>
            {
                Err(format!("{mountpoint}: not a walkfs mount ({e})"))
            }
            Err(e) => Err(format!(
                "{mountpoint}: a change made behind its caller failed: {e}"
            )),
        }
    }
}
