//! The one place engine errors become Python exceptions. The classes live in python/lwmq/errors.py
//! (they need multiple inheritance, e.g. Timeout is also a TimeoutError).

use lwmq_core::Error;
use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::GILOnceCell;
use pyo3::types::PyModule;

static ERRORS: GILOnceCell<Py<PyModule>> = GILOnceCell::new();

fn class<'py>(py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyAny>> {
    let module = ERRORS.get_or_try_init(py, || PyModule::import(py, "lwmq.errors").map(Bound::unbind))?;
    module.bind(py).getattr(name)
}

/// Builds the lwmq exception of the given class name.
pub fn lwmq_error(py: Python<'_>, name: &str, text: String) -> PyErr {
    match class(py, name).and_then(|c| c.call1((text,))) {
        Ok(instance) => PyErr::from_value(instance),
        Err(e) => e,
    }
}

pub fn to_py(e: Error) -> PyErr {
    Python::with_gil(|py| {
        let text = e.to_string();
        match e {
            Error::Timeout(_) => lwmq_error(py, "Timeout", text),
            Error::MessageTooLarge { .. } => lwmq_error(py, "MessageTooLarge", text),
            Error::Address(_) => lwmq_error(py, "AddressError", text),
            Error::UnsupportedScheme(_) => lwmq_error(py, "UnsupportedScheme", text),
            Error::AddressInUse(_) => lwmq_error(py, "AddressInUse", text),
            Error::PeerGone(_) => lwmq_error(py, "PeerGone", text),
            Error::ChannelClosed => lwmq_error(py, "ChannelClosed", text),
            Error::Protocol(_) => lwmq_error(py, "ProtocolError", text),
            Error::QueueFull => lwmq_error(py, "QueueFull", text),
            Error::Mismatch(_) => lwmq_error(py, "BusMismatch", text),
            Error::InvalidOption(_) => PyValueError::new_err(text),
            Error::Os { errno, .. } => PyOSError::new_err((errno, text)),
        }
    })
}

/// Attaches the message that was not sent to the exception (`exc.message`), so nothing is lost.
pub fn with_message(py: Python<'_>, err: PyErr, message: Option<Py<PyAny>>) -> PyErr {
    if let Some(m) = message {
        let _ = err.value(py).setattr("message", m);
    }
    err
}

/// Whether `err` is an instance of the lwmq exception class `name`.
pub fn is(py: Python<'_>, err: &PyErr, name: &str) -> bool {
    class(py, name).map(|c| err.matches(py, c).unwrap_or(false)).unwrap_or(false)
}

/// The reverse, for links implemented in Python: an lwmq exception keeps its meaning, anything else is
/// the transport misbehaving.
pub fn from_py(py: Python<'_>, err: PyErr) -> Error {
    let text = err.value(py).to_string();
    if is(py, &err, "Timeout") {
        Error::Timeout(text)
    } else if is(py, &err, "PeerGone") {
        Error::PeerGone(text)
    } else if is(py, &err, "ChannelClosed") {
        Error::ChannelClosed
    } else {
        Error::Protocol(format!("transport raised {}: {text}", err.get_type(py).name().map(|n| n.to_string()).unwrap_or_default()))
    }
}
