//! `Listener`: accepts any number of peers, each as its own Channel.

use crate::blocking::{self, deadline};
use crate::channel::Channel;
use crate::errors::to_py;
use lwmq_core::channel::Channel as CoreChannel;
use lwmq_core::transport::{Listener as CoreListener, Options};
use lwmq_core::Error;
use pyo3::prelude::*;
use pyo3::types::PyType;

#[pyclass(frozen, module = "lwmq._core")]
pub struct Listener {
    pub inner: Box<dyn CoreListener>,
    pub options: Options,
}

#[pymethods]
impl Listener {
    /// The next peer's channel; waits up to `timeout` (None: forever), then raises Timeout.
    #[pyo3(signature = (timeout=None))]
    fn accept(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Channel> {
        let inner = &self.inner;
        let link = blocking::run(py, deadline(timeout)?, |e: &Error| matches!(e, Error::Timeout(_)), |d| inner.accept(d), to_py)?;
        Ok(Channel { inner: CoreChannel::new(link, &self.options).map_err(to_py)? })
    }

    fn close(&self) {
        self.inner.close();
    }

    #[getter]
    fn address(&self) -> String {
        self.inner.address()
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __exit__(&self, _t: Option<&Bound<'_, PyType>>, _v: Option<&Bound<'_, PyAny>>, _tb: Option<&Bound<'_, PyAny>>) -> bool {
        self.close();
        false
    }

    fn __repr__(&self) -> String {
        format!("Listener({:?})", self.inner.address())
    }
}
