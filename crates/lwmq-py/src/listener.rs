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

impl Listener {
    /// Peers the transport refused (wrong uid, bad handshake) are logged on the "lwmq" logger.
    fn log_refusals(&self, py: Python<'_>) {
        for why in self.inner.take_refusals() {
            let _ = py
                .import("logging")
                .and_then(|l| l.call_method1("getLogger", ("lwmq",)))
                .and_then(|log| log.call_method1("warning", ("refused a peer: %s", why)));
        }
    }
}

#[pymethods]
impl Listener {
    /// The next peer's channel; waits up to `timeout` (None: forever), then raises Timeout.
    #[pyo3(signature = (timeout=None))]
    fn accept(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Channel> {
        let inner = &self.inner;
        let link = blocking::run(
            py,
            deadline(timeout)?,
            |e: &Error| {
                matches!(e, Error::Timeout(_))
            },
            |d| inner.accept(d),
            to_py,
        );
        self.log_refusals(py);
        Ok(Channel { inner: CoreChannel::new(link?, &self.options).map_err(to_py)? })
    }

    fn close(&self, py: Python<'_>) {
        let inner = &self.inner;
        py.allow_threads(|| inner.close());
        self.log_refusals(py);
    }

    #[getter]
    fn address(&self) -> String {
        self.inner.address()
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __exit__(&self, py: Python<'_>, _t: Option<&Bound<'_, PyType>>, _v: Option<&Bound<'_, PyAny>>, _tb: Option<&Bound<'_, PyAny>>) -> bool {
        self.close(py);
        false
    }

    fn __repr__(&self) -> String {
        format!("Listener({:?})", self.inner.address())
    }
}
