//! Blocking calls release the GIL and wake at least every 100 ms to run Python's signal handlers, so
//! Ctrl-C interrupts them.

use lwmq_core::sync::Deadline;
use pyo3::prelude::*;
use std::time::{Duration, Instant};

const SLICE: Duration = Duration::from_millis(100);

/// `None` waits forever, `0` not at all.
pub fn deadline(timeout: Option<f64>) -> PyResult<Deadline> {
    match timeout {
        None => Ok(None),
        Some(t) if t.is_nan() || t < 0.0 => Err(pyo3::exceptions::PyValueError::new_err("timeout must be >= 0 or None")),
        Some(t) => Ok(Some(Instant::now() + Duration::try_from_secs_f64(t).unwrap_or(Duration::MAX / 4))),
    }
}

/// Runs `op` without the GIL in slices of at most 100 ms until it gives something other than a slice
/// timeout (`timed_out` tells those apart), checking for signals between slices.
pub fn run<T: Send, E: Send>(
    py: Python<'_>,
    deadline: Deadline,
    timed_out: impl Fn(&E) -> bool,
    mut op: impl FnMut(Deadline) -> Result<T, E> + Send,
    on_error: impl Fn(E) -> PyErr,
) -> PyResult<T> {
    loop {
        let now = Instant::now();
        let slice_end = now + SLICE;
        let slice = match deadline {
            Some(d) if d <= slice_end => Some(d),
            _ => Some(slice_end),
        };
        let last = slice == deadline;
        match py.allow_threads(|| op(slice)) {
            Err(e) if !last && timed_out(&e) => py.check_signals()?,
            Ok(v) => return Ok(v),
            Err(e) => return Err(on_error(e)),
        }
    }
}
