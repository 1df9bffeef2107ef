//! `MessageBatch`: many received messages as one Python object (`Channel.recv_batch`).

use crate::message::Message;
use lwmq_core::Message as CoreMessage;
use pyo3::prelude::*;

/// Received messages without one Python object each: a `Message` is made only when asked for (indexing,
/// iteration); `sizes` gives every message's payload length in one call.
#[pyclass(frozen, sequence, module = "lwmq._core")]
pub struct MessageBatch {
    pub items: Vec<CoreMessage>,
}

#[pymethods]
impl MessageBatch {
    fn __len__(&self) -> usize {
        self.items.len()
    }

    fn __getitem__(&self, index: isize) -> PyResult<Message> {
        let i = crate::message::sequence_index(index, self.items.len(), "batch")?;
        Ok(Message { inner: self.items[i].clone() })
    }

    fn __iter__(&self, py: Python<'_>) -> PyResult<PyObject> {
        let list = pyo3::types::PyList::new(py, self.items.iter().map(|m| Message { inner: m.clone() }))?;
        Ok(list.try_iter()?.into_any().unbind())
    }

    /// Payload bytes of each message (over all its frames), as `array.array("Q")`.
    #[getter]
    fn sizes<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        crate::bus::u64_array(py, self.items.iter().map(|m| m.nbytes() as u64))
    }

    /// Payload bytes of the whole batch.
    #[getter]
    fn nbytes(&self) -> usize {
        self.items.iter().map(CoreMessage::nbytes).sum()
    }

    fn __repr__(&self) -> String {
        format!("MessageBatch({} messages)", self.items.len())
    }
}
