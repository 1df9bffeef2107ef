//! `Parker`: threads of one process sleep until a condition holds, and the side that makes it hold pays
//! for a system call only when someone actually sleeps (std's Condvar::notify always makes one).
//! For memory shared between processes use `WaitWord` instead.
//!
//! Protocol (model-checked in tests/loom.rs): a waiter registers in `parked` and then re-checks its
//! condition; a notifier makes the condition true and then reads `parked`. SeqCst fences on both sides
//! order these like `WaitWord`'s, so either the waiter sees the condition or the notifier sees the waiter.
//! The notifier takes the lock before notifying, and the waiter holds it from registering until it sleeps,
//! so the notification cannot fall between the waiter's re-check and its sleep.

use super::{fence, AtomicUsize, Condvar, Mutex};
use std::sync::atomic::Ordering::SeqCst;
use std::time::{Duration, Instant};

/// Longest single sleep, so a waiter re-checks deadlines and stop flags regularly.
const MAX_SLEEP: Duration = Duration::from_millis(100);

#[derive(Default)]
pub struct Parker {
    parked: AtomicUsize,
    lock: Mutex<()>,
    cv: Condvar,
}

impl Parker {
    #[cfg(loom)]
    pub fn new() -> Self {
        Parker { parked: AtomicUsize::new(0), lock: Mutex::new(()), cv: Condvar::new() }
    }

    /// Waits until `ready` yields a value, or until `deadline` (then `ready()` is asked one last time).
    pub fn wait_until<T>(&self, deadline: Option<Instant>, mut ready: impl FnMut() -> Option<T>) -> Option<T> {
        if let Some(v) = ready() {
            return Some(v);
        }
        let mut guard = self.lock.lock().unwrap();
        self.parked.fetch_add(1, SeqCst);
        // SeqCst fence: pairs with the fence in `notify`.
        fence(SeqCst);
        let result = loop {
            if let Some(v) = ready() {
                break Some(v);
            }
            let sleep = match deadline {
                None => MAX_SLEEP,
                Some(d) => match d.checked_duration_since(Instant::now()) {
                    Some(left) if !left.is_zero() => left.min(MAX_SLEEP),
                    _ => break ready(),
                },
            };
            guard = self.cv.wait_timeout(guard, sleep).unwrap().0;
        };
        self.parked.fetch_sub(1, SeqCst);
        result
    }

    /// Called after making a waiter's condition true.
    #[inline]
    pub fn notify(&self) {
        // SeqCst fence: pairs with the fence in `wait_until`.
        fence(SeqCst);
        if self.parked.load(SeqCst) != 0 {
            let _guard = self.lock.lock().unwrap();
            self.cv.notify_all();
        }
    }
}
