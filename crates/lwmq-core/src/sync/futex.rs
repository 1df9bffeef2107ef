//! The Linux futex: sleep while a 32-bit word holds an expected value; wake sleepers on that word.
//! Process-shared (not FUTEX_PRIVATE) so the same word works in a memfd segment mapped by two processes.

use super::AtomicU32;
use std::time::Duration;

/// Sleeps while `*word == expected`, for at most `timeout`. Spurious returns are allowed: the caller
/// re-checks its condition.
#[cfg(not(loom))]
pub fn wait(word: &AtomicU32, expected: u32, timeout: Duration) {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs().min(i64::MAX as u64) as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: `word` is a valid, aligned 32-bit atomic for the duration of the call (it is borrowed), and
    // `ts` outlives the call. FUTEX_WAIT only reads the word; EINTR/EAGAIN/ETIMEDOUT are benign returns.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            &ts as *const libc::timespec,
            std::ptr::null::<u32>(),
            0u32,
        );
    }
}

/// Wakes every sleeper on `word`.
#[cfg(not(loom))]
pub fn wake_all(word: &AtomicU32) {
    // SAFETY: `word` is a valid aligned 32-bit atomic; FUTEX_WAKE does not access memory beyond the
    // address used as a key.
    unsafe {
        libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, i32::MAX, 0usize, 0usize, 0u32);
    }
}

/// Under loom there is no kernel: a waiter yields until the word changes, which loom explores exhaustively
/// (a lost wake-up shows up as a waiter that never proceeds).
#[cfg(loom)]
pub fn wait(word: &AtomicU32, expected: u32, _timeout: Duration) {
    use std::sync::atomic::Ordering::Acquire;
    while word.load(Acquire) == expected {
        loom::thread::yield_now();
    }
}

#[cfg(loom)]
pub fn wake_all(_word: &AtomicU32) {}
