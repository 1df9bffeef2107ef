//! Synchronization building blocks shared by every transport. Under `--cfg loom` the atomics come from
//! loom so the lock-free protocols here can be model-checked (crates/lwmq-core/tests/loom.rs).

pub mod combiner;
pub mod futex;
pub mod parker;
pub mod seqlock;
pub mod wait;

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64, AtomicUsize};
#[cfg(loom)]
pub(crate) use loom::sync::{Condvar, Mutex, MutexGuard};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64, AtomicUsize};
#[cfg(not(loom))]
pub(crate) use std::sync::{Condvar, Mutex, MutexGuard};

pub use combiner::Combiner;
pub use parker::Parker;
pub use wait::{no_wait, Deadline, WaitPolicy, WaitWord};
