//! Links across the Python boundary, for transports provided through the `lwmq.transports` entry point:
//! - `PyLink`: an engine Link over a Python object with the same interface (`acquire(timeout)` → writable
//!   buffer or None, `ship(buffer, nbytes)`, `recv(timeout)`, `close()`, `buffer_size`), so a channel's
//!   queuing layer runs unchanged over a transport written in Python;
//! - `RawLink` / `RawListener`: a built-in transport's link exposed to Python at the buffer level, so a
//!   Python provider can wrap (filter) a built-in one.
//!
//! A Python link runs its code under the GIL: that is the price of writing a transport in Python.

use crate::blocking::{self, deadline};
use crate::errors::{from_py, to_py};
use crate::message::{frame_from, Frame};
use bytes::Bytes;
use lwmq_core::sync::Deadline;
use lwmq_core::transport::{Link, Listener as CoreListener, TxBuf};
use lwmq_core::{Error, Result};
use pyo3::buffer::PyBuffer;
use pyo3::exceptions::{PyBufferError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyType;
use std::os::raw::c_int;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

pub struct PyLink {
    obj: Py<PyAny>,
    buffer_size: usize,
    peer: String,
    /// The buffer object lent by the Python link's `acquire`, until shipped (one at a time: the encoder
    /// holds at most one buffer).
    lent: Mutex<Option<(Py<PyAny>, PyBuffer<u8>)>>,
}

impl PyLink {
    pub fn new(obj: Bound<'_, PyAny>) -> PyResult<PyLink> {
        let buffer_size: usize = obj.getattr("buffer_size")?.extract()?;
        if buffer_size < lwmq_core::transport::options::MIN_BUFFER_SIZE {
            return Err(pyo3::exceptions::PyValueError::new_err("link.buffer_size is too small"));
        }
        let peer = obj.getattr("peer").and_then(|p| p.extract()).unwrap_or_else(|_| obj.to_string());
        Ok(PyLink { obj: obj.unbind(), buffer_size, peer, lent: Mutex::new(None) })
    }
}

fn seconds_left(deadline: Deadline) -> Option<f64> {
    deadline.map(|d| d.saturating_duration_since(Instant::now()).as_secs_f64())
}

impl Link for PyLink {
    fn send_buffer_size(&self) -> usize {
        self.buffer_size
    }

    fn acquire(&self, deadline: Deadline) -> Result<TxBuf> {
        Python::with_gil(|py| {
            let got = self.obj.bind(py).call_method1("acquire", (seconds_left(deadline),)).map_err(|e| from_py(py, e))?;
            if got.is_none() {
                return Err(Error::Timeout("no free transport buffer".into()));
            }
            let view = PyBuffer::<u8>::get(&got).map_err(|e| from_py(py, e))?;
            if view.readonly() || !view.is_c_contiguous() || view.len_bytes() < self.buffer_size {
                return Err(Error::Protocol("link.acquire() must return a writable contiguous buffer of buffer_size bytes".into()));
            }
            let ptr = view.buf_ptr() as *mut u8;
            *self.lent.lock().unwrap() = Some((got.unbind(), view));
            // SAFETY: the exported buffer is writable, contiguous and at least buffer_size long (checked), and
            // stays exported (hence valid) while `lent` holds the PyBuffer, i.e. until `ship`.
            Ok(unsafe { TxBuf::from_raw(ptr, self.buffer_size, 0) })
        })
    }

    fn ship(&self, _buf: TxBuf, len: usize) -> Result<()> {
        Python::with_gil(|py| {
            let (obj, view) = self.lent.lock().unwrap().take().expect("ship after acquire");
            view.release(py);
            self.obj.bind(py).call_method1("ship", (obj, len)).map(|_| ()).map_err(|e| from_py(py, e))
        })
    }

    fn receive(&self, deadline: Deadline) -> Result<Bytes> {
        Python::with_gil(|py| {
            let got = self.obj.bind(py).call_method1("recv", (seconds_left(deadline),)).map_err(|e| from_py(py, e))?;
            if got.is_none() {
                return Err(Error::Timeout("nothing received".into()));
            }
            frame_from(&got).map_err(|e| from_py(py, e))
        })
    }

    /// A Python link says whether its receive pool is short (`pressed`); one that does not say is taken
    /// as pressed, so received messages are copied out and nothing can pin its buffers.
    fn receive_pool_use(&self) -> Option<(u32, u32)> {
        Python::with_gil(|py| {
            let pressed: bool = self.obj.bind(py).getattr("pressed").and_then(|p| p.extract()).ok()?;
            Some(if pressed { (1, 1) } else { (0, 1) })
        })
    }

    fn close(&self) {
        Python::with_gil(|py| {
            if let Some((_, view)) = self.lent.lock().unwrap().take() {
                view.release(py);
            }
            let _ = self.obj.bind(py).call_method0("close");
        })
    }

    fn peer(&self) -> String {
        self.peer.clone()
    }
}

/// A transport buffer lent by `RawLink.acquire`: writable through the buffer protocol until shipped.
#[pyclass(frozen, module = "lwmq._core")]
pub struct TxBuffer {
    link: Py<RawLink>,
    buf: Mutex<Option<TxBuf>>,
    exports: AtomicUsize,
}

#[pymethods]
impl TxBuffer {
    fn __len__(&self) -> usize {
        self.buf.lock().unwrap().as_ref().map_or(0, TxBuf::capacity)
    }

    unsafe fn __getbuffer__(slf: Bound<'_, Self>, view: *mut ffi::Py_buffer, flags: c_int) -> PyResult<()> {
        let me = slf.get();
        let guard = me.buf.lock().unwrap();
        let Some(buf) = guard.as_ref() else {
            return Err(PyBufferError::new_err("this buffer was shipped"));
        };
        // SAFETY: the transport buffer stays mapped while this object lives (it keeps its RawLink, which keeps
        // the segment), and is ours to write until shipped; ship refuses while views are exported.
        unsafe { crate::buffer::export(slf.as_any(), view, buf.as_slice().as_ptr(), buf.capacity(), false, flags)? };
        me.exports.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }

    unsafe fn __releasebuffer__(&self, _view: *mut ffi::Py_buffer) {
        self.exports.fetch_sub(1, Ordering::AcqRel);
    }
}
/// A built-in transport's link at the buffer level.
#[pyclass(frozen, module = "lwmq._core")]
pub struct RawLink {
    pub inner: Box<dyn Link>,
}

#[pymethods]
impl RawLink {
    /// A free transport buffer to fill (writable buffer protocol), or None when `timeout` expires.
    #[pyo3(signature = (timeout=None))]
    fn acquire(slf: &Bound<'_, Self>, timeout: Option<f64>) -> PyResult<Option<TxBuffer>> {
        let py = slf.py();
        let inner = &slf.get().inner;
        match blocking::run(py, deadline(timeout)?, |e: &Error| matches!(e, Error::Timeout(_)), |d| inner.acquire(d), to_py) {
            Ok(buf) => Ok(Some(TxBuffer { link: slf.clone().unbind(), buf: Mutex::new(Some(buf)), exports: AtomicUsize::new(0) })),
            Err(e) if crate::errors::is(py, &e, "Timeout") => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Ships the first `nbytes` of a buffer from `acquire`.
    fn ship(slf: &Bound<'_, Self>, buffer: &Bound<'_, TxBuffer>, nbytes: usize) -> PyResult<()> {
        let b = buffer.get();
        if !b.link.bind(slf.py()).is(slf) {
            return Err(PyValueError::new_err("this buffer belongs to another link"));
        }
        if b.exports.load(Ordering::Acquire) != 0 {
            return Err(PyBufferError::new_err("release every view of the buffer before shipping it"));
        }
        let buf = b.buf.lock().unwrap().take().ok_or_else(|| PyBufferError::new_err("this buffer was shipped"))?;
        if nbytes > buf.capacity() {
            return Err(PyValueError::new_err(format!("nbytes {nbytes} exceeds the buffer's {} bytes", buf.capacity())));
        }
        slf.get().inner.ship(buf, nbytes).map_err(to_py)
    }

    /// Copies `data` into a free transport buffer and ships it.
    #[pyo3(signature = (data, timeout=None))]
    fn send(&self, py: Python<'_>, data: &Bound<'_, PyAny>, timeout: Option<f64>) -> PyResult<()> {
        let bytes = frame_from(data)?;
        if bytes.len() > self.inner.send_buffer_size() {
            return Err(to_py(Error::MessageTooLarge { size: bytes.len(), max: self.inner.send_buffer_size() }));
        }
        let inner = &self.inner;
        let mut buf = blocking::run(py, deadline(timeout)?, |e: &Error| matches!(e, Error::Timeout(_)), |d| inner.acquire(d), to_py)?;
        buf.as_mut_slice()[..bytes.len()].copy_from_slice(&bytes);
        self.inner.ship(buf, bytes.len()).map_err(to_py)
    }

    /// The next shipped buffer as a zero-copy Frame; None when `timeout` expires.
    #[pyo3(signature = (timeout=None))]
    fn recv(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Option<Frame>> {
        let inner = &self.inner;
        match blocking::run(py, deadline(timeout)?, |e: &Error| matches!(e, Error::Timeout(_)), |d| inner.receive(d), to_py) {
            Ok(data) => Ok(Some(Frame { data })),
            Err(e) if crate::errors::is(py, &e, "Timeout") => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn close(&self) {
        self.inner.close();
    }

    #[getter]
    fn buffer_size(&self) -> usize {
        self.inner.send_buffer_size()
    }

    #[getter]
    fn peer(&self) -> String {
        self.inner.peer()
    }

    /// A writable view of the whole shared segment: for tests that play a hostile peer. Writing to it
    /// breaks the channel by design.
    fn _segment(slf: &Bound<'_, Self>) -> PyResult<SegmentView> {
        let (ptr, len) = slf.get().inner.segment().ok_or_else(|| PyValueError::new_err("this link has no shared segment"))?;
        Ok(SegmentView { _link: slf.clone().unbind(), ptr: ptr as usize, len })
    }

    /// Pushes a raw (buffer index << 32 | length) descriptor to the peer without any check: tests that
    /// play a hostile peer.
    fn _forge_descriptor(&self, value: u64) -> PyResult<()> {
        self.inner.forge_descriptor(value).map_err(to_py)
    }

    /// True while the application holds three quarters or more of this link's receive buffers.
    #[getter]
    fn pressed(&self) -> bool {
        self.inner.receive_pool_use().is_none_or(|(held, count)| held * 4 >= count * 3)
    }
}

/// Writable view of a link's shared segment (tests only); keeps the link, hence the mapping, alive.
#[pyclass(frozen, module = "lwmq._core")]
pub struct SegmentView {
    _link: Py<RawLink>,
    ptr: usize,
    len: usize,
}

#[pymethods]
impl SegmentView {
    fn __len__(&self) -> usize {
        self.len
    }

    unsafe fn __getbuffer__(slf: Bound<'_, Self>, view: *mut ffi::Py_buffer, flags: c_int) -> PyResult<()> {
        let me = slf.get();
        // SAFETY: the mapping lives as long as the link this object holds; concurrent writes by design
        // only corrupt the channel's data, which the engine treats as hostile input.
        unsafe { crate::buffer::export(slf.as_any(), view, me.ptr as *const u8, me.len, false, flags) }
    }
}

/// A built-in transport's listener handing out RawLinks.
#[pyclass(frozen, module = "lwmq._core")]
pub struct RawListener {
    pub inner: Box<dyn CoreListener>,
}

#[pymethods]
impl RawListener {
    #[pyo3(signature = (timeout=None))]
    fn accept(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<RawLink> {
        let inner = &self.inner;
        let link = blocking::run(py, deadline(timeout)?, |e: &Error| matches!(e, Error::Timeout(_)), |d| inner.accept(d), to_py)?;
        Ok(RawLink { inner: link })
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
}

/// A Listener implemented in Python (`accept(timeout) -> link`, `close()`, `address`).
pub struct PyListener {
    pub obj: Py<PyAny>,
}

impl CoreListener for PyListener {
    fn accept(&self, deadline: Deadline) -> Result<Box<dyn Link>> {
        Python::with_gil(|py| {
            let got = self.obj.bind(py).call_method1("accept", (seconds_left(deadline),)).map_err(|e| from_py(py, e))?;
            if got.is_none() {
                return Err(Error::Timeout("no peer connected".into()));
            }
            Ok(Box::new(PyLink::new(got).map_err(|e| from_py(py, e))?) as Box<dyn Link>)
        })
    }

    fn close(&self) {
        Python::with_gil(|py| {
            let _ = self.obj.bind(py).call_method0("close");
        })
    }

    fn address(&self) -> String {
        Python::with_gil(|py| {
            self.obj.bind(py).getattr("address").and_then(|a| a.extract()).unwrap_or_else(|_| "?".into())
        })
    }
}
