//! `Message` and `Frame`: thin wrappers over the engine's message; frames expose the buffer protocol
//! read-only, as zero-copy views (a received frame points into transport memory).

use bytes::Bytes;
use lwmq_core::message::Message as CoreMessage;
use pyo3::exceptions::{PyIndexError, PyTypeError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};
use std::os::raw::c_int;

#[pyclass(frozen, module = "lwmq._core")]
pub struct Frame {
    pub data: Bytes,
}

/// Copies any contiguous buffer-protocol object into a frame (a Frame is taken as is, no copy).
pub fn frame_from(obj: &Bound<'_, PyAny>) -> PyResult<Bytes> {
    if let Ok(frame) = obj.downcast::<Frame>() {
        return Ok(frame.get().data.clone());
    }
    Ok(Bytes::copy_from_slice(View::new(obj)?.as_slice()))
}

/// A frame borrowed through the buffer protocol: no copy; released when dropped (with the GIL held,
/// as it is wherever these live: inside one binding call).
pub struct View(ffi::Py_buffer);

impl View {
    pub fn new(obj: &Bound<'_, PyAny>) -> PyResult<View> {
        if obj.is_instance_of::<pyo3::types::PyString>() {
            return Err(PyTypeError::new_err("a frame is bytes-like, not str: encode it first"));
        }
        let mut view = std::mem::MaybeUninit::<ffi::Py_buffer>::uninit();
        // SAFETY: on success PyObject_GetBuffer fills `view`, released exactly once in Drop.
        unsafe {
            if ffi::PyObject_GetBuffer(obj.as_ptr(), view.as_mut_ptr(), ffi::PyBUF_C_CONTIGUOUS) != 0 {
                let err = PyErr::fetch(obj.py());
                return Err(PyTypeError::new_err(format!(
                    "a frame must be a contiguous bytes-like object, not {}: {err}",
                    obj.get_type().name()?
                )));
            }
            Ok(View(view.assume_init()))
        }
    }

    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: the exporter keeps `buf..buf+len` valid until the view is released (Drop).
        unsafe { std::slice::from_raw_parts(self.0.buf as *const u8, self.0.len as usize) }
    }
}

impl Drop for View {
    fn drop(&mut self) {
        // SAFETY: a view obtained by PyObject_GetBuffer, released once; the GIL is held (see type doc).
        unsafe { ffi::PyBuffer_Release(&mut self.0) }
    }
}

/// What `send` accepts, with its frames borrowed rather than copied.
pub enum Borrowed<'py> {
    Message(CoreMessage),
    /// A single `bytes` object: immutable, borrowed without the buffer protocol.
    Bytes(Bound<'py, pyo3::types::PyBytes>),
    Views(Vec<View>),
}

impl<'py> Borrowed<'py> {
    pub fn new(obj: &Bound<'py, PyAny>) -> PyResult<Borrowed<'py>> {
        if let Ok(b) = obj.downcast_exact::<pyo3::types::PyBytes>() {
            return Ok(Borrowed::Bytes(b.clone()));
        }
        if let Ok(m) = obj.downcast::<Message>() {
            return Ok(Borrowed::Message(m.get().inner.clone()));
        }
        if let Ok(f) = obj.downcast::<Frame>() {
            return Ok(Borrowed::Message(CoreMessage::new(vec![f.get().data.clone()])));
        }
        if obj.is_instance_of::<PyList>() || obj.is_instance_of::<PyTuple>() {
            let views = obj.try_iter()?.map(|f| View::new(&f?)).collect::<PyResult<Vec<_>>>()?;
            if views.is_empty() {
                return Err(pyo3::exceptions::PyValueError::new_err("a message needs at least one frame"));
            }
            return Ok(Borrowed::Views(views));
        }
        Ok(Borrowed::Views(vec![View::new(obj)?]))
    }

    /// The frame, when there is exactly one (the common case: no list of slices to build).
    pub fn single(&self) -> Option<&[u8]> {
        match self {
            Borrowed::Bytes(b) => Some(b.as_bytes()),
            Borrowed::Views(v) if v.len() == 1 => Some(v[0].as_slice()),
            Borrowed::Message(m) if m.len() == 1 => Some(&m.frames()[0][..]),
            _ => None,
        }
    }

    pub fn slices(&self) -> Vec<&[u8]> {
        match self {
            Borrowed::Message(m) => m.frames().iter().map(|f| &f[..]).collect(),
            Borrowed::Bytes(b) => vec![b.as_bytes()],
            Borrowed::Views(v) => v.iter().map(View::as_slice).collect(),
        }
    }

    /// An owned message (copying borrowed frames), for the queued path.
    pub fn into_message(self) -> CoreMessage {
        match self {
            Borrowed::Message(m) => m,
            Borrowed::Bytes(b) => CoreMessage::new(vec![Bytes::copy_from_slice(b.as_bytes())]),
            Borrowed::Views(v) => CoreMessage::new(v.iter().map(|f| Bytes::copy_from_slice(f.as_slice())).collect::<Vec<_>>()),
        }
    }
}

/// The frames of many borrowed messages in one list (no allocation per message); each message is a
/// run of it.
pub struct FrameRuns<'a> {
    frames: Vec<&'a [u8]>,
    runs: Vec<std::ops::Range<usize>>,
}

impl<'a> FrameRuns<'a> {
    pub fn of<'py>(messages: impl IntoIterator<Item = &'a Borrowed<'py>>) -> FrameRuns<'a>
    where
        'py: 'a,
    {
        let messages = messages.into_iter();
        let mut out = FrameRuns { frames: Vec::with_capacity(messages.size_hint().0), runs: Vec::with_capacity(messages.size_hint().0) };
        for m in messages {
            let start = out.frames.len();
            match m.single() {
                Some(f) => out.frames.push(f),
                None => out.frames.extend(m.slices()),
            }
            out.runs.push(start..out.frames.len());
        }
        out
    }

    /// One slice of frames per message.
    pub fn messages(&self) -> Vec<&[&'a [u8]]> {
        self.runs.iter().map(|r| &self.frames[r.clone()]).collect()
    }
}

/// A message from what `send` accepts: a Message, one bytes-like object, or a list/tuple of them.
pub fn message_from(obj: &Bound<'_, PyAny>) -> PyResult<CoreMessage> {
    if let Ok(m) = obj.downcast::<Message>() {
        return Ok(m.get().inner.clone());
    }
    if obj.is_instance_of::<PyList>() || obj.is_instance_of::<PyTuple>() {
        let frames = obj.try_iter()?.map(|f| frame_from(&f?)).collect::<PyResult<Vec<_>>>()?;
        if frames.is_empty() {
            return Err(pyo3::exceptions::PyValueError::new_err("a message needs at least one frame"));
        }
        return Ok(CoreMessage::new(frames));
    }
    Ok(CoreMessage::new(vec![frame_from(obj)?]))
}

#[pymethods]
impl Frame {
    #[new]
    fn new(data: &Bound<'_, PyAny>) -> PyResult<Self> {
        Ok(Frame { data: frame_from(data)? })
    }

    fn __len__(&self) -> usize {
        self.data.len()
    }

    fn tobytes<'py>(&self, py: Python<'py>) -> Bound<'py, pyo3::types::PyBytes> {
        pyo3::types::PyBytes::new(py, &self.data)
    }

    fn __bytes__<'py>(&self, py: Python<'py>) -> Bound<'py, pyo3::types::PyBytes> {
        self.tobytes(py)
    }

    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        match frame_from(other) {
            Ok(b) => b == self.data,
            Err(_) => false,
        }
    }

    fn __hash__(&self) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        self.data.hash(&mut h);
        h.finish()
    }

    fn __repr__(&self) -> String {
        let head: Vec<u8> = self.data.iter().take(32).copied().collect();
        let more = if self.data.len() > 32 { "..." } else { "" };
        format!("Frame({:?}{more}, {} bytes)", Bytes::from(head), self.data.len())
    }

    /// Read-only buffer protocol: memoryview(frame), numpy.frombuffer(frame), bytes(frame).
    unsafe fn __getbuffer__(slf: Bound<'_, Self>, view: *mut ffi::Py_buffer, flags: c_int) -> PyResult<()> {
        let data = &slf.get().data;
        // SAFETY: `data` lives as long as the Frame, which the view keeps alive; exported read-only.
        unsafe { crate::buffer::export(slf.as_any(), view, data.as_ptr(), data.len(), true, flags) }
    }
}

/// A Python sequence index (negative counts from the end) checked against `len`.
pub(crate) fn sequence_index(index: isize, len: usize, what: &str) -> PyResult<usize> {
    let i = if index < 0 { index + len as isize } else { index };
    if !(0..len as isize).contains(&i) {
        return Err(PyIndexError::new_err(format!("{what} index out of range")));
    }
    Ok(i as usize)
}

#[pyclass(frozen, module = "lwmq._core")]
pub struct Message {
    pub inner: CoreMessage,
}

#[pymethods]
impl Message {
    #[new]
    #[pyo3(signature = (*frames))]
    fn new(frames: &Bound<'_, PyTuple>) -> PyResult<Self> {
        let frames = frames.iter().map(|f| frame_from(&f)).collect::<PyResult<Vec<_>>>()?;
        if frames.is_empty() {
            return Err(pyo3::exceptions::PyValueError::new_err("a message needs at least one frame"));
        }
        Ok(Message { inner: CoreMessage::new(frames) })
    }

    fn __len__(&self) -> usize {
        self.inner.len()
    }

    fn __getitem__(&self, index: isize) -> PyResult<Frame> {
        let i = sequence_index(index, self.inner.len(), "frame")?;
        Ok(Frame { data: self.inner.frames()[i].clone() })
    }

    #[getter]
    fn frames<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, self.inner.frames().iter().map(|f| Frame { data: f.clone() }))
    }

    #[getter]
    fn nbytes(&self) -> usize {
        self.inner.nbytes()
    }

    fn __iter__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        Ok(self.frames(py)?.into_any().try_iter()?.into_any())
    }

    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other.downcast::<Message>().is_ok_and(|o| o.get().inner == self.inner)
    }

    fn __repr__(&self) -> String {
        let sizes: Vec<usize> = self.inner.frames().iter().map(|f| f.len()).collect();
        format!("Message({} frames, {} bytes, frame sizes {sizes:?})", self.inner.len(), self.inner.nbytes())
    }
}
