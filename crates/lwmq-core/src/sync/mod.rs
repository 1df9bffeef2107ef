//! Synchronization building blocks shared by every transport. Under `--cfg loom` the atomics come from
//! loom so the lock-free protocols here can be model-checked (crates/lwmq-core/tests/loom.rs).

pub mod futex;
pub mod wait;

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{fence, AtomicU32, AtomicU64};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{fence, AtomicU32, AtomicU64};

pub use wait::{Deadline, WaitPolicy, WaitWord};
