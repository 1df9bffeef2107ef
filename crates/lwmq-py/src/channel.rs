//! `Channel`: the Python face of an engine channel.

use crate::blocking::{self, deadline};
use crate::errors::{to_py, with_message};
use crate::message::{Borrowed, Message};
use crate::queue::Queue;
use lwmq_core::channel::Channel as CoreChannel;
use lwmq_core::queue::input::Producers;
use lwmq_core::sync::no_wait;
use lwmq_core::Error;
use pyo3::exceptions::{PyStopIteration, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyType};
use std::time::{Duration, Instant};

#[pyclass(frozen, module = "lwmq._core")]
pub struct Channel {
    pub inner: CoreChannel,
}

fn is_timeout(e: &Error) -> bool {
    matches!(e, Error::Timeout(_))
}

fn call_aio<'py>(py: Python<'py>, name: &str, args: Bound<'py, pyo3::types::PyTuple>) -> PyResult<Bound<'py, PyAny>> {
    py.import("lwmq._aio")?.getattr(name)?.call1(args)
}

#[pymethods]
impl Channel {
    /// Sends one message (a Message, a bytes-like object, or a list/tuple of them). Waits only while
    /// `send_hwm` messages are already queued because the transport has no free buffer.
    #[pyo3(signature = (message, timeout=None))]
    fn send(&self, py: Python<'_>, message: &Bound<'_, PyAny>, timeout: Option<f64>) -> PyResult<()> {
        // Straight into a free transport buffer when nothing is queued ahead: one copy, no allocation.
        let borrowed = Borrowed::new(message)?;
        let direct = match borrowed.single() {
            Some(frame) => self.inner.send_direct(&[&[frame][..]]),
            None => self.inner.send_direct(&[&borrowed.slices()[..]]),
        };
        if direct.map_err(to_py)? == 1 {
            return Ok(());
        }
        let msg = borrowed.into_message();
        // First try without releasing the GIL: it only waits when the default queue is full.
        let mut pending = match self.inner.send(msg, no_wait()) {
            Ok(()) => return Ok(()),
            Err(e) if e.error == Error::QueueFull && timeout != Some(0.0) => Some(e.message),
            Err(e) => {
                let keep = (!e.message.is_empty()).then(|| Py::new(py, Message { inner: e.message }).map(Py::into_any)).transpose()?;
                let err = if e.error == Error::QueueFull { Error::Timeout("send queue full".into()) } else { e.error };
                return Err(with_message(py, to_py(err), keep));
            }
        };
        let deadline = deadline(timeout)?;
        let inner = &self.inner;
        let result = blocking::run(
            py,
            deadline,
            |e: &Error| *e == Error::QueueFull,
            |slice| {
                let m = pending.take().expect("message present");
                inner.send(m, slice).map_err(|e| {
                    if !e.message.is_empty() {
                        pending = Some(e.message);
                    }
                    e.error
                })
            },
            |e| to_py(if e == Error::QueueFull { Error::Timeout("send queue full".into()) } else { e }),
        );
        result.map_err(|err| with_message(py, err, pending.map(|m| Py::new(py, Message { inner: m }).unwrap().into_any())))
    }

    /// Sends many messages, clubbed into as few transport buffers as they fit.
    #[pyo3(signature = (messages, timeout=None))]
    fn send_many(&self, py: Python<'_>, messages: &Bound<'_, PyAny>, timeout: Option<f64>) -> PyResult<()> {
        let borrowed = messages.try_iter()?.map(|m| Borrowed::new(&m?)).collect::<PyResult<Vec<_>>>()?;
        let frames = crate::message::FrameRuns::of(&borrowed);
        // As many as free buffers take now go straight in; the rest are copied and queued, in order.
        let direct = self.inner.send_direct(&frames.messages()).map_err(to_py)?;
        drop(frames);
        let rest: Vec<_> = borrowed.into_iter().skip(direct).map(Borrowed::into_message).collect();
        if rest.is_empty() {
            return Ok(());
        }
        let deadline = deadline(timeout)?;
        let inner = &self.inner;
        py.allow_threads(|| inner.send_many(rest, deadline)).map_err(|(e, sent)| {
            let err = to_py(if e == Error::QueueFull { Error::Timeout("send queue full".into()) } else { e });
            let _ = err.value(py).setattr("sent", direct + sent);
            err
        })
    }

    /// The next message; waits up to `timeout` seconds (None: forever), then raises Timeout.
    #[pyo3(signature = (timeout=None))]
    fn recv(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Message> {
        if let Some(m) = self.inner.try_recv().map_err(to_py)? {
            return Ok(Message { inner: m });
        }
        if timeout == Some(0.0) {
            return Err(to_py(Error::Timeout("nothing received".into())));
        }
        let inner = &self.inner;
        blocking::run(py, deadline(timeout)?, is_timeout, |d| inner.recv(d), to_py).map(|m| Message { inner: m })
    }

    /// Up to `max_messages` messages: waits up to `timeout` for the first, then takes what is there.
    #[pyo3(signature = (max_messages=1024, timeout=0.0))]
    fn recv_many(&self, py: Python<'_>, max_messages: usize, timeout: Option<f64>) -> PyResult<Vec<Message>> {
        let got = self.take_many(py, max_messages, timeout)?;
        Ok(got.into_iter().map(|m| Message { inner: m }).collect())
    }

    /// Like `recv_many`, as one `MessageBatch` (no Python object per message until one is asked for).
    #[pyo3(signature = (max_messages=65536, timeout=0.0))]
    fn recv_batch(&self, py: Python<'_>, max_messages: usize, timeout: Option<f64>) -> PyResult<crate::message_batch::MessageBatch> {
        self.take_many(py, max_messages, timeout).map(|items| crate::message_batch::MessageBatch { items })
    }

    /// A message if one is there now, else None.
    fn try_recv(&self) -> PyResult<Option<Message>> {
        Ok(self.inner.try_recv().map_err(to_py)?.map(|m| Message { inner: m }))
    }

    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// Iteration ends when the peer closes (PeerGone) or the channel is closed.
    fn __next__(&self, py: Python<'_>) -> PyResult<Message> {
        match self.recv(py, None) {
            Err(e) if crate::errors::is(py, &e, "PeerGone") => {
                Err(PyStopIteration::new_err(()))
            }
            other => other,
        }
    }

    #[pyo3(signature = (message, timeout=None))]
    fn send_async<'py>(slf: &Bound<'py, Self>, message: &Bound<'py, PyAny>, timeout: Option<f64>) -> PyResult<Bound<'py, PyAny>> {
        call_aio(slf.py(), "send_async", (slf.clone(), message.clone(), timeout).into_pyobject(slf.py())?)
    }

    #[pyo3(signature = (timeout=None))]
    fn recv_async<'py>(slf: &Bound<'py, Self>, timeout: Option<f64>) -> PyResult<Bound<'py, PyAny>> {
        call_aio(slf.py(), "recv_async", (slf.clone(), timeout).into_pyobject(slf.py())?)
    }

    /// Puts a received message back at the head of the output queue (used by recv_async on cancel).
    fn _unrecv(&self, message: &Bound<'_, Message>) {
        self.inner.unrecv(message.get().inner.clone());
    }

    /// A transport buffer of `nbytes` to write a one-frame message into, then `ship(n)`: no copy.
    #[pyo3(signature = (nbytes, timeout=None))]
    fn loan(&self, py: Python<'_>, nbytes: usize, timeout: Option<f64>) -> PyResult<crate::loan::Loan> {
        let inner = &self.inner;
        // First with the GIL kept and without waiting for anything (not even the encoder's lock): a free
        // buffer is the common case, and releasing the GIL costs more than taking it.
        if let Some(loan) = inner.try_loan(nbytes).map_err(to_py)? {
            return Ok(crate::loan::Loan::new(loan));
        }
        blocking::run(py, deadline(timeout)?, is_timeout, |d| inner.loan(nbytes, d), to_py).map(crate::loan::Loan::new)
    }

    /// A new input queue. producers="one": unbounded, for one producer thread; "many": thread-safe,
    /// bounded by `capacity` (post waits, then raises QueueFull).
    #[pyo3(signature = (priority="normal", producers="one", capacity=None))]
    fn queue(slf: &Bound<'_, Self>, priority: &str, producers: &str, capacity: Option<usize>) -> PyResult<Queue> {
        let kind = match (producers, capacity) {
            ("one", None) => Producers::One,
            ("one", Some(_)) => return Err(PyValueError::new_err("a one-producer queue is unbounded: capacity applies to producers='many'")),
            ("many", c) => Producers::Many { capacity: c.unwrap_or(10_000).max(1) },
            (other, _) => return Err(PyValueError::new_err(format!("producers is 'one' or 'many', not {other:?}"))),
        };
        let inner = slf.get().inner.queue(priority, kind).map_err(to_py)?;
        Ok(Queue {
            channel: slf.clone().unbind(),
            inner,
            priority: priority.to_string(),
            producers: producers.to_string(),
            capacity: match kind {
                Producers::Many { capacity } => Some(capacity),
                Producers::One => None,
            },
        })
    }

    /// Counters: messages, bytes and buffers each way, clubbing, buffer waits, queued messages.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = self.inner.stats();
        let d = PyDict::new(py);
        d.set_item("messages_sent", s.messages_sent)?;
        d.set_item("bytes_sent", s.bytes_sent)?;
        d.set_item("buffers_sent", s.buffers_sent)?;
        let avg = if s.buffers_sent > 0 { s.messages_sent as f64 / s.buffers_sent as f64 } else { 0.0 };
        d.set_item("messages_per_buffer", avg)?;
        d.set_item("max_messages_per_buffer", s.max_clubbed)?;
        d.set_item("buffer_waits", s.buffer_waits)?;
        d.set_item("messages_received", s.messages_received)?;
        d.set_item("bytes_received", s.bytes_received)?;
        d.set_item("buffers_received", s.buffers_received)?;
        d.set_item("queued", s.queued)?;
        d.set_item("unsent_at_close", s.unsent_at_close)?;
        d.set_item("copied_out", s.copied_out)?;
        d.set_item("appended", s.appended)?;
        Ok(d)
    }

    /// Ships what is queued for up to `linger` seconds (default: the channel's option), then closes.
    #[pyo3(signature = (linger=None))]
    fn close(&self, py: Python<'_>, linger: Option<f64>) -> PyResult<()> {
        let linger = linger.map(|s| Duration::try_from_secs_f64(s).map_err(|_| PyValueError::new_err("linger must be >= 0"))).transpose()?;
        let inner = &self.inner;
        py.allow_threads(|| inner.close(linger));
        Ok(())
    }

    #[getter]
    fn closed(&self) -> bool {
        self.inner.is_closed()
    }

    #[getter]
    fn peer(&self) -> String {
        self.inner.peer()
    }

    #[getter]
    fn buffer_size(&self) -> usize {
        self.inner.buffer_size()
    }

    #[getter]
    fn max_message_size(&self) -> usize {
        self.inner.max_message_size()
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __exit__(&self, py: Python<'_>, _t: Option<&Bound<'_, PyType>>, _v: Option<&Bound<'_, PyAny>>, _tb: Option<&Bound<'_, PyAny>>) -> PyResult<bool> {
        self.close(py, None)?;
        Ok(false)
    }

    fn __repr__(&self) -> String {
        format!("Channel(peer={:?}, closed={})", self.inner.peer(), self.inner.is_closed())
    }
}

impl Channel {
    /// Up to `max` messages: waits up to `timeout` for the first (in slices, so Ctrl-C is seen), then takes
    /// what is there.
    fn take_many(&self, py: Python<'_>, max: usize, timeout: Option<f64>) -> PyResult<Vec<lwmq_core::Message>> {
        if max == 0 {
            return Err(PyValueError::new_err("max_messages must be at least 1"));
        }
        let inner = &self.inner;
        let d = deadline(timeout)?;
        loop {
            let slice = blocking_slice(d);
            let got = py.allow_threads(|| inner.recv_many(max, slice)).map_err(to_py)?;
            if !got.is_empty() || slice == d {
                return Ok(got);
            }
            py.check_signals()?;
        }
    }
}

/// The end of the next ≤100 ms slice of a wait until `d`.
fn blocking_slice(d: lwmq_core::sync::Deadline) -> lwmq_core::sync::Deadline {
    let slice_end = Instant::now() + Duration::from_millis(100);
    match d {
        Some(d) if d <= slice_end => Some(d),
        _ => Some(slice_end),
    }
}

impl Drop for Channel {
    fn drop(&mut self) {
        // Closing joins the flusher thread, which may need the GIL (links written in Python): let go of it.
        let inner = &self.inner;
        Python::with_gil(|py| py.allow_threads(|| inner.close(None)));
    }
}
