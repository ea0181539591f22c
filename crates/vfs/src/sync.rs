//! Atomics used by the lock-free protocols, swapped for loom's under
//! `--cfg loom` so the model checker can explore their interleavings.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{fence, AtomicU32, AtomicU64};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{fence, AtomicU32, AtomicU64};

pub(crate) use std::sync::atomic::Ordering;
