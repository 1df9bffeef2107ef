//! `Combiner`: state that many threads want to work on, where a thread that finds it busy leaves a note
//! instead of waiting, and the busy thread does the work again before it leaves. Whoever calls `run`
//! is sure that a complete run of the work starts after its call, without ever blocking on the lock.
//! The encoder uses it so a posting thread ships its message itself when it can, and never waits for
//! another thread that is already shipping (model-checked in tests/loom.rs).

use super::{AtomicBool, Mutex, MutexGuard};
use std::sync::atomic::Ordering::SeqCst;

pub struct Combiner<T> {
    state: Mutex<T>,
    /// Someone wanted a run while the state was busy.
    pending: AtomicBool,
}

impl<T> Combiner<T> {
    pub fn new(state: T) -> Self {
        Combiner { state: Mutex::new(state), pending: AtomicBool::new(false) }
    }

    /// The state, waiting for it. The holder has taken over any pending run: after letting go it must
    /// check `must_rerun` (or use `run_locked`, which does).
    pub fn lock(&self) -> MutexGuard<'_, T> {
        let guard = self.state.lock().unwrap();
        self.pending.store(false, SeqCst);
        guard
    }

    /// The state if no one holds it; otherwise a note that the holder must run again, and `None`.
    pub fn try_enter(&self) -> Option<MutexGuard<'_, T>> {
        if let Ok(guard) = self.state.try_lock() {
            self.pending.store(false, SeqCst);
            return Some(guard);
        }
        self.pending.store(true, SeqCst);
        // The holder may have let go before our note: try once more (then the note is someone's duty).
        let guard = self.state.try_lock().ok()?;
        self.pending.store(false, SeqCst);
        Some(guard)
    }

    /// After letting go of the state: whether someone asked for a run meanwhile (then run again).
    pub fn must_rerun(&self) -> bool {
        self.pending.load(SeqCst)
    }

    /// Runs `work` now or makes sure the current holder will: `work` returns `false` to stop early
    /// (for example when it handed the rest to another thread).
    ///
    /// A rerun takes the state without leaving a note if it is busy: its holder took it after we let go,
    /// so it will see the note that asked for the rerun. (Leaving a note there too lets two threads hand
    /// the rerun back and forth forever; loom found that livelock.) Each call leaves at most one note, so
    /// reruns are bounded.
    pub fn run(&self, work: impl FnMut(&mut T) -> bool) {
        let Some(guard) = self.try_enter() else { return };
        self.work_then_reruns(guard, work);
    }

    /// Like `run`, but waits for the state instead of leaving a note: for work that must happen now
    /// (the flusher). It still honours notes left while it held the state.
    pub fn run_locked(&self, work: impl FnMut(&mut T) -> bool) {
        let guard = self.lock();
        self.work_then_reruns(guard, work);
    }

    fn work_then_reruns<'a>(&'a self, mut guard: MutexGuard<'a, T>, mut work: impl FnMut(&mut T) -> bool) {
        loop {
            let keep_going = work(&mut guard);
            drop(guard);
            if !keep_going || !self.must_rerun() {
                return;
            }
            guard = match self.state.try_lock() {
                Ok(g) => {
                    self.pending.store(false, SeqCst);
                    g
                }
                Err(_) => return,
            };
        }
    }
}
