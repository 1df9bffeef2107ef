//! `Queue`: an input queue of a channel, in one priority group.

use crate::channel::Channel;
use crate::errors::{to_py, with_message};
use crate::message::{message_from, Message};
use lwmq_core::queue::input::InputQueue;
use lwmq_core::Error;
use pyo3::prelude::*;
use std::sync::Arc;

#[pyclass(frozen, module = "lwmq._core")]
pub struct Queue {
    pub channel: Py<Channel>,
    pub inner: Arc<InputQueue>,
    #[pyo3(get)]
    pub priority: String,
    #[pyo3(get)]
    pub producers: String,
    #[pyo3(get)]
    pub capacity: Option<usize>,
}

#[pymethods]
impl Queue {
    /// Posts a message; on a full bounded queue waits up to `timeout` (None: forever), then QueueFull.
    #[pyo3(signature = (message, timeout=None))]
    fn post(&self, py: Python<'_>, message: &Bound<'_, PyAny>, timeout: Option<f64>) -> PyResult<()> {
        let msg = message_from(message)?;
        let deadline = crate::blocking::deadline(timeout)?;
        let channel = self.channel.get();
        let mut pending = Some(msg);
        crate::blocking::run(
            py,
            deadline,
            |e: &Error| *e == Error::QueueFull,
            |slice| {
                let m = pending.take().expect("message present");
                channel.inner.post(&self.inner, m, slice).map_err(|e| {
                    let err = e.error.clone();
                    if !e.message.is_empty() {
                        pending = Some(e.message);
                    }
                    err
                })
            },
            to_py,
        )
        .map_err(|err| with_message(py, err, pending.map(|m| Py::new(py, Message { inner: m }).unwrap().into_any())))
    }

    fn __len__(&self) -> usize {
        self.inner.len()
    }

    fn __repr__(&self) -> String {
        format!("Queue(priority={:?}, producers={:?}, queued={})", self.priority, self.producers, self.inner.len())
    }
}

impl Drop for Queue {
    fn drop(&mut self) {
        self.inner.detach();
    }
}
