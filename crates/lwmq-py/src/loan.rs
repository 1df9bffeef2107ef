//! `Loan`: a transport buffer lent for a zero-copy send (`with ch.loan(n) as buf: ...; buf.ship(k)`).

use crate::errors::to_py;
use lwmq_core::channel::Loan as CoreLoan;
use pyo3::exceptions::{PyBufferError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyMemoryView, PyType};
use std::os::raw::c_int;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

#[pyclass(frozen, module = "lwmq._core")]
pub struct Loan {
    inner: Mutex<Option<CoreLoan>>,
    ptr: usize,
    len: usize,
    exports: AtomicUsize,
}

impl Loan {
    pub fn new(mut inner: CoreLoan) -> Loan {
        let data = inner.data();
        let (ptr, len) = (data.as_mut_ptr() as usize, data.len());
        Loan { inner: Mutex::new(Some(inner)), ptr, len, exports: AtomicUsize::new(0) }
    }
}

#[pymethods]
impl Loan {
    fn __len__(&self) -> usize {
        self.len
    }

    /// `buf[a:b] = data`: writes through a temporary memoryview.
    fn __setitem__(slf: &Bound<'_, Self>, key: &Bound<'_, PyAny>, value: &Bound<'_, PyAny>) -> PyResult<()> {
        PyMemoryView::from(slf.as_any())?.set_item(key, value)
    }

    /// Ships the first `nbytes` written as a one-frame message, without copying them. Every view of the
    /// buffer (memoryview, numpy array) must be released first: after shipping, the memory is the peer's.
    fn ship(&self, nbytes: usize) -> PyResult<()> {
        if self.exports.load(Ordering::Acquire) != 0 {
            return Err(PyBufferError::new_err("release every view of the loan (del the array/memoryview) before shipping"));
        }
        let loan = self.inner.lock().unwrap().take().ok_or_else(|| PyValueError::new_err("this loan was already shipped or given back"))?;
        loan.ship(nbytes).map_err(to_py)
    }

    #[getter]
    fn shipped(&self) -> bool {
        self.inner.lock().unwrap().is_none()
    }

    unsafe fn __getbuffer__(slf: Bound<'_, Self>, view: *mut ffi::Py_buffer, flags: c_int) -> PyResult<()> {
        let me = slf.get();
        let guard = me.inner.lock().unwrap();
        if guard.is_none() {
            return Err(PyBufferError::new_err("this loan was shipped: its memory belongs to the peer now"));
        }
        // SAFETY: the lent transport buffer is ours to write until shipped, which `ship` refuses while any
        // view is exported; it stays mapped while the loan (holding the channel's link) lives.
        unsafe { crate::buffer::export(slf.as_any(), view, me.ptr as *const u8, me.len, false, flags)? };
        me.exports.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }

    unsafe fn __releasebuffer__(&self, _view: *mut ffi::Py_buffer) {
        self.exports.fetch_sub(1, Ordering::AcqRel);
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// Leaving the block without shipping gives the buffer back; nothing is sent.
    fn __exit__(&self, _t: Option<&Bound<'_, PyType>>, _v: Option<&Bound<'_, PyAny>>, _tb: Option<&Bound<'_, PyAny>>) -> bool {
        self.inner.lock().unwrap().take();
        false
    }
}
