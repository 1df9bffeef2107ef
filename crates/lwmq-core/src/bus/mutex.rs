//! The bus's append lock: a process-shared, robust pthread mutex inside the segment. When its holder
//! dies, the kernel (robust futex list) marks it owner-dead and hands it to the next locker with
//! EOWNERDEAD; that locker repairs what the dead holder left and marks the lock consistent.

use crate::error::{Error, Result};
use crate::sync::Deadline;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Bytes reserved for the mutex in the segment header.
pub const RESERVED: usize = 64;
/// How many times `lock` tries the lock (a few microseconds in all) before sleeping on it.
const SPIN_TRIES: usize = 64;
const _: () = assert!(std::mem::size_of::<libc::pthread_mutex_t>() <= RESERVED);

pub struct RobustMutex {
    raw: *mut libc::pthread_mutex_t,
}

// SAFETY: a pthread mutex is made to be used from many threads (and, being PTHREAD_PROCESS_SHARED, many
// processes); the pointer stays valid while the segment mapping does (the owner of this value keeps it).
unsafe impl Send for RobustMutex {}
// SAFETY: as above.
unsafe impl Sync for RobustMutex {}

/// Held lock; unlocks on drop. `owner_died` says the previous holder died holding it: the caller repairs
/// the state it guards, then calls `consistent`.
pub struct Guard<'a> {
    mutex: &'a RobustMutex,
    pub owner_died: bool,
}

impl Guard<'_> {
    pub fn consistent(&mut self) {
        // SAFETY: we hold the lock (EOWNERDEAD made us its owner); the pointer is valid (RobustMutex).
        unsafe { libc::pthread_mutex_consistent(self.mutex.raw) };
        self.owner_died = false;
    }
}

impl Drop for Guard<'_> {
    fn drop(&mut self) {
        // SAFETY: we hold the lock. A guard dropped while still owner-dead (a repair that panicked) makes
        // the lock unrecoverable, which later lockers report as a protocol error instead of hanging.
        unsafe { libc::pthread_mutex_unlock(self.mutex.raw) };
    }
}

fn realtime_after(wait: Duration) -> libc::timespec {
    let at = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default() + wait;
    libc::timespec { tv_sec: at.as_secs() as libc::time_t, tv_nsec: at.subsec_nanos() as libc::c_long }
}

impl RobustMutex {
    /// Initialises a new mutex at `raw` (a fresh segment nobody else has mapped yet).
    ///
    /// # Safety
    /// `raw` must point at `RESERVED` writable bytes, suitably aligned, inside a mapping that outlives
    /// every `RobustMutex` made from it, and no other process may use it before this returns.
    pub unsafe fn init(raw: *mut u8) -> Result<()> {
        let mut attr: libc::pthread_mutexattr_t = std::mem::zeroed();
        let m = raw as *mut libc::pthread_mutex_t;
        let ok = libc::pthread_mutexattr_init(&mut attr) == 0
            && libc::pthread_mutexattr_setpshared(&mut attr, libc::PTHREAD_PROCESS_SHARED) == 0
            && libc::pthread_mutexattr_setrobust(&mut attr, libc::PTHREAD_MUTEX_ROBUST) == 0
            && libc::pthread_mutex_init(m, &attr) == 0;
        libc::pthread_mutexattr_destroy(&mut attr);
        if ok {
            Ok(())
        } else {
            Err(Error::os("initialising the bus lock"))
        }
    }

    /// # Safety
    /// `raw` must point at a mutex made by `init`, in a mapping that outlives the returned value.
    pub unsafe fn attach(raw: *mut u8) -> RobustMutex {
        RobustMutex { raw: raw as *mut libc::pthread_mutex_t }
    }

    /// Locks, waiting until `deadline`; `None` when it passed first.
    pub fn lock(&self, deadline: Deadline) -> Result<Option<Guard<'_>>> {
        // Appends hold the lock for well under a microsecond: poll it briefly before sleeping in the
        // kernel, which would also make every unlock a FUTEX_WAKE system call.
        for _ in 0..SPIN_TRIES {
            // SAFETY: `raw` is a valid process-shared mutex (constructor contract).
            let rc = unsafe { libc::pthread_mutex_trylock(self.raw) };
            if rc != libc::EBUSY {
                return self.locked(rc);
            }
            for _ in 0..16 {
                std::hint::spin_loop();
            }
        }
        loop {
            // One-second slices: a deadline of None still wakes to re-check nothing has gone wrong.
            let wait = match deadline {
                None => Duration::from_secs(1),
                Some(d) => match d.checked_duration_since(Instant::now()) {
                    None => return Ok(None),
                    Some(left) => left.min(Duration::from_secs(1)),
                },
            };
            let at = realtime_after(wait);
            // SAFETY: as above; `at` lives across the call.
            let rc = unsafe { libc::pthread_mutex_timedlock(self.raw, &at) };
            if rc != libc::ETIMEDOUT {
                return self.locked(rc);
            }
        }
    }

    /// Locks if free now.
    pub fn try_lock(&self) -> Result<Option<Guard<'_>>> {
        // SAFETY: `raw` is a valid process-shared mutex (constructor contract).
        let rc = unsafe { libc::pthread_mutex_trylock(self.raw) };
        if rc == libc::EBUSY {
            return Ok(None);
        }
        self.locked(rc)
    }

    fn locked(&self, rc: libc::c_int) -> Result<Option<Guard<'_>>> {
        match rc {
            0 => Ok(Some(Guard { mutex: self, owner_died: false })),
            libc::EOWNERDEAD => Ok(Some(Guard { mutex: self, owner_died: true })),
            libc::ENOTRECOVERABLE => Err(Error::Protocol("the bus's append lock is unrecoverable".into())),
            e => Err(Error::Os { what: "locking the bus".into(), errno: e }),
        }
    }
}
