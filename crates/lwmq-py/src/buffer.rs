//! The one place the binding exposes memory through the buffer protocol (Frame, Loan, TxBuffer, the
//! test-only SegmentView).

use pyo3::exceptions::PyBufferError;
use pyo3::ffi;
use pyo3::prelude::*;
use std::os::raw::c_int;

/// Fills `view` with `len` bytes at `ptr`; the view holds a reference to `owner`.
///
/// # Safety
/// `view` comes from the interpreter's getbuffer call, and `ptr..ptr + len` stays valid (and, unless
/// `readonly`, writable by Python) for as long as `owner` lives.
pub unsafe fn export(owner: &Bound<'_, PyAny>, view: *mut ffi::Py_buffer, ptr: *const u8, len: usize, readonly: bool, flags: c_int) -> PyResult<()> {
    if readonly && flags & ffi::PyBUF_WRITABLE == ffi::PyBUF_WRITABLE {
        return Err(PyBufferError::new_err("this buffer is read-only"));
    }
    // SAFETY: the caller's contract; PyBuffer_FillInfo takes a reference to `owner` (view->obj), so the
    // memory outlives the view.
    let rc = unsafe { ffi::PyBuffer_FillInfo(view, owner.as_ptr(), ptr as *mut _, len as ffi::Py_ssize_t, readonly as c_int, flags) };
    if rc != 0 {
        return Err(PyErr::fetch(owner.py()));
    }
    Ok(())
}
