//! Options as text (`name=value,...`): one table per layer, one parser
//! and one set of errors for all of them.
//!
//! Each layer that has options (the vfs here, the backends in
//! `walkfs-source`, the FUSE mount in `walkfs-fuse`) describes them in a
//! table of [`Opt`]: the names, whether the option may change on a
//! running vfs, and how a value is taken. A value is parsed once, into
//! the layer's typed options; a layer hands the names it does not know to
//! the one below it, so a mistake is reported the same way wherever it is
//! made (`walkfs mount -o`, the C ABI, the CLI's `--options`).

use std::fmt;
use std::time::Duration;

use walkfs_fsapi::Errno;

/// A mistake in options: an unknown name, or a value the option does not
/// take. Converts to `EINVAL` where an errno is the interface (the C ABI).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OptError {
    pub name: String,
    pub value: String,
    /// What was wrong: what the option takes, or why it cannot be set.
    pub why: String,
    /// No layer knows the name (rather than a bad value).
    pub unknown: bool,
}

impl OptError {
    /// `name`'s `value` is not what it takes (`expected`).
    pub fn bad(name: &str, value: &str, expected: impl Into<String>) -> OptError {
        OptError {
            name: name.to_string(),
            value: value.to_string(),
            why: expected.into(),
            unknown: false,
        }
    }

    /// No table has `name`: a layer then asks the next one down.
    pub fn unknown(name: &str, value: &str) -> OptError {
        OptError {
            unknown: true,
            ..OptError::bad(name, value, "no such option")
        }
    }
}

impl fmt::Display for OptError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.unknown {
            write!(f, "option {}: no such option", self.name)
        } else if self.value.is_empty() {
            write!(f, "option {}: {}", self.name, self.why)
        } else {
            write!(f, "option {}={}: {}", self.name, self.value, self.why)
        }
    }
}

impl std::error::Error for OptError {}

impl From<OptError> for Errno {
    fn from(_: OptError) -> Errno {
        Errno::EINVAL
    }
}

/// One option of a layer's table `T`.
pub struct Opt<T> {
    /// Its name and the other names it answers to (Linux's 9p client's,
    /// mount(8)'s).
    pub names: &'static [&'static str],
    /// May it change on a running vfs ([`crate::Vfs::set_option`])?
    pub live: bool,
    /// Take `value` for the option named `name` (one of `names`).
    pub set: fn(&mut T, name: &str, value: &str) -> Result<(), OptError>,
}

/// The option of `table` called `name`.
pub fn find<'t, T>(table: &'t [Opt<T>], name: &str) -> Option<&'t Opt<T>> {
    table.iter().find(|o| o.names.contains(&name))
}

/// Set `name=value` on `target` from `table`; [`OptError::unknown`] when
/// the table has no such name, and `target` unchanged on any error.
pub fn set<T: Clone>(
    table: &[Opt<T>],
    target: &mut T,
    name: &str,
    value: &str,
) -> Result<(), OptError> {
    let opt = find(table, name).ok_or_else(|| OptError::unknown(name, value))?;
    let mut t = target.clone();
    (opt.set)(&mut t, name, value)?;
    *target = t;
    Ok(())
}

/// The `(name, value)` pairs of `name[=value],...` (a bare name has the
/// value `""`), blanks around items ignored.
pub fn items(text: &str) -> impl Iterator<Item = (&str, &str)> {
    text.split(',')
        .map(str::trim)
        .filter(|i| !i.is_empty())
        .map(|i| i.split_once('=').unwrap_or((i, "")))
}

/// A switch: `1`, `on`, `true`, `yes` or nothing (a bare name) turn it
/// on; `0`, `off`, `false`, `no` off.
pub fn flag(name: &str, value: &str) -> Result<bool, OptError> {
    match value {
        "1" | "on" | "true" | "yes" | "" => Ok(true),
        "0" | "off" | "false" | "no" => Ok(false),
        _ => Err(OptError::bad(name, value, "expected 0 or 1")),
    }
}

/// A whole number from `min` to `max`.
pub fn count<N: TryFrom<u64>>(name: &str, value: &str, min: u64, max: u64) -> Result<N, OptError> {
    value
        .parse::<u64>()
        .ok()
        .filter(|n| (min..=max).contains(n))
        .and_then(|n| N::try_from(n).ok())
        .ok_or_else(|| {
            if max == u64::MAX || max == u64::from(u32::MAX) {
                OptError::bad(
                    name,
                    value,
                    format!("expected a whole number, {min} or more"),
                )
            } else {
                OptError::bad(
                    name,
                    value,
                    format!("expected a whole number from {min} to {max}"),
                )
            }
        })
}

/// A signed whole number (`negtimeout=-1`).
pub fn signed(name: &str, value: &str) -> Result<i64, OptError> {
    value
        .parse::<i64>()
        .map_err(|_| OptError::bad(name, value, "expected a whole number"))
}

/// Seconds, fractions allowed, not negative.
pub fn seconds(name: &str, value: &str) -> Result<Duration, OptError> {
    value
        .parse::<f64>()
        .ok()
        .filter(|s| *s >= 0.0 && s.is_finite())
        .map(Duration::from_secs_f64)
        .ok_or_else(|| OptError::bad(name, value, "expected seconds, 0 or more"))
}

/// One of `choices` (the value itself, checked).
pub fn choice<'v>(name: &str, value: &'v str, choices: &[&str]) -> Result<&'v str, OptError> {
    if choices.contains(&value) {
        Ok(value)
    } else {
        Err(OptError::bad(
            name,
            value,
            format!("expected {}", choices.join(", ")),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Default, Debug, PartialEq)]
    struct T {
        on: bool,
        n: u32,
    }

    const TABLE: &[Opt<T>] = &[
        Opt {
            names: &["on", "enabled"],
            live: true,
            set: |t, n, v| {
                t.on = flag(n, v)?;
                Ok(())
            },
        },
        Opt {
            names: &["n"],
            live: false,
            set: |t, n, v| {
                t.n = count(n, v, 1, 10)?;
                Ok(())
            },
        },
    ];

    #[test]
    fn one_table_sets_by_any_name_and_says_what_was_wrong() {
        let mut t = T::default();
        for (k, v) in items(" on , n=3,") {
            set(TABLE, &mut t, k, v).expect("set");
        }
        assert_eq!(t, T { on: true, n: 3 });
        set(TABLE, &mut t, "enabled", "0").expect("alias");
        assert!(!t.on);
        let e = set(TABLE, &mut t, "n", "11").unwrap_err();
        assert_eq!(
            e.to_string(),
            "option n=11: expected a whole number from 1 to 10"
        );
        assert_eq!(t.n, 3, "unchanged on error");
        let e = set(TABLE, &mut t, "bogus", "1").unwrap_err();
        assert!(e.unknown);
        assert_eq!(e.to_string(), "option bogus: no such option");
        assert_eq!(Errno::from(e), Errno::EINVAL);
        assert_eq!(
            flag("on", "maybe").unwrap_err().to_string(),
            "option on=maybe: expected 0 or 1"
        );
        assert!(seconds("t", "-1").is_err() && seconds("t", "0.5").is_ok());
        assert_eq!(choice("c", "b", &["a", "b"]), Ok("b"));
        assert!(choice("c", "z", &["a", "b"]).is_err());
    }
}
