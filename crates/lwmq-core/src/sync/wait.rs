//! `WaitWord`: an event count that lets a consumer sleep until a producer makes progress, with no system
//! call on the producer's side unless someone sleeps. It may live in shared memory (two processes).
//!
//! Protocol (model-checked in tests/loom.rs):
//! - waiter: read `seq`; register in `waiters`; SeqCst fence; re-check the condition; futex-wait on `seq`.
//! - notifier: publish its change; SeqCst fence; if `waiters != 0`, bump `seq` and FUTEX_WAKE.
//!
//! The two SeqCst fences order "publish, then read waiters" against "register, then re-check", so either
//! the notifier sees the waiter or the waiter sees the change (no lost wake-up). If the notifier bumps `seq`
//! between the waiter's read and its sleep, FUTEX_WAIT returns at once because the value differs.

use super::{fence, futex, AtomicU32};
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release, SeqCst};
use std::time::{Duration, Instant};

/// `None` waits forever.
pub type Deadline = Option<Instant>;

/// A deadline already past: "do not wait", without reading the clock on every non-blocking attempt
/// (`Instant::now()` showed up at 5% of a small-message profile).
pub fn no_wait() -> Deadline {
    Some(*PAST.get_or_init(Instant::now))
}

static PAST: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();

/// Whether `deadline` is `no_wait()` (or older): a failed attempt then returns without a clock read.
fn is_no_wait(deadline: Deadline) -> bool {
    matches!((deadline, PAST.get()), (Some(d), Some(past)) if d <= *past)
}

/// How a waiter spends its time before sleeping.
#[derive(Clone, Copy, Debug)]
pub struct WaitPolicy {
    /// Spin this long re-checking the condition before sleeping (adaptive: only while waiting).
    pub spin: Duration,
    /// Never sleep: spin (yielding now and then) until the condition holds or the deadline passes.
    pub busy_poll: bool,
}

impl Default for WaitPolicy {
    fn default() -> Self {
        WaitPolicy { spin: Duration::from_micros(50), busy_poll: false }
    }
}

/// Upper bound of one futex sleep, so a waiter re-checks deadlines and peer liveness regularly even if a
/// hostile peer never bumps the word.
const MAX_SLEEP: Duration = Duration::from_millis(50);

#[repr(C)]
#[derive(Default)]
pub struct WaitWord {
    seq: AtomicU32,
    waiters: AtomicU32,
}

impl WaitWord {
    #[cfg(loom)]
    pub fn new() -> Self {
        WaitWord { seq: AtomicU32::new(0), waiters: AtomicU32::new(0) }
    }

    /// Called by the side that made progress, after publishing it.
    #[inline]
    pub fn notify(&self) {
        // SeqCst fence: pairs with the fence in `sleep_unless` (store-buffering order, see module doc).
        fence(SeqCst);
        if self.waiters.load(Relaxed) != 0 {
            // RELEASE: pairs with the ACQUIRE load of `seq` in `sleep_unless`.
            self.seq.fetch_add(1, Release);
            futex::wake_all(&self.seq);
        }
    }

    /// Waits until `ready` yields a value or the deadline passes (`None` then). `ready` must also report
    /// terminal states (peer gone, closed) as a value, so a waiter never sleeps through them.
    pub fn wait_for<T>(
        &self,
        policy: WaitPolicy,
        deadline: Deadline,
        mut ready: impl FnMut() -> Option<T>,
    ) -> Option<T> {
        if let Some(v) = ready() {
            return Some(v);
        }
        if is_no_wait(deadline) {
            return None;
        }
        let start = Instant::now();
        let mut spins: u32 = 0;
        loop {
            let now = if spins.is_multiple_of(64) { Some(Instant::now()) } else { None };
            if let Some(now) = now {
                if deadline.is_some_and(|d| now >= d) {
                    return ready();
                }
                if !policy.busy_poll && now.duration_since(start) >= policy.spin {
                    break;
                }
                if spins > 0 && (!policy.busy_poll || spins.is_multiple_of(4096)) {
                    std::thread::yield_now();
                }
            }
            std::hint::spin_loop();
            spins = spins.wrapping_add(1);
            if let Some(v) = ready() {
                return Some(v);
            }
        }
        loop {
            let sleep = match deadline {
                None => MAX_SLEEP,
                Some(d) => {
                    let now = Instant::now();
                    if now >= d {
                        return ready();
                    }
                    (d - now).min(MAX_SLEEP)
                }
            };
            if let Some(v) = self.sleep_unless(sleep, &mut ready) {
                return Some(v);
            }
        }
    }

    /// One registered sleep: returns the value if the condition holds after registering.
    fn sleep_unless<T>(&self, timeout: Duration, ready: &mut impl FnMut() -> Option<T>) -> Option<T> {
        // ACQUIRE: pairs with the RELEASE bump in `notify`.
        let seen = self.seq.load(Acquire);
        self.waiters.fetch_add(1, SeqCst);
        // SeqCst fence: pairs with the fence in `notify`.
        fence(SeqCst);
        let result = ready();
        if result.is_none() {
            futex::wait(&self.seq, seen, timeout);
        }
        self.waiters.fetch_sub(1, SeqCst);
        result.or_else(ready)
    }

    /// Wakes every sleeper unconditionally (close, peer gone).
    pub fn wake_all(&self) {
        fence(SeqCst);
        self.seq.fetch_add(1, Release);
        futex::wake_all(&self.seq);
    }
}
