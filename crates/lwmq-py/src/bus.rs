//! `Publisher`, `Subscriber` and `Delivery`: thin wrappers over lwmq_core::bus.

use crate::blocking::{self, deadline};
use crate::errors::to_py;
use crate::message::{Borrowed, Message};
use lwmq_core::bus::{self as core, Bus, BusOptions, Start, TopicFilter};
use lwmq_core::sync::WaitPolicy;
use lwmq_core::Error;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyString};
use std::sync::{Arc, Mutex};
use std::time::Duration;

fn is_timeout(e: &Error) -> bool {
    matches!(e, Error::Timeout(_))
}

#[allow(clippy::too_many_arguments)]
fn options(
    capacity: Option<u32>,
    max_message_size: Option<u32>,
    backpressure: Option<bool>,
    spin_us: Option<f64>,
    busy_poll: bool,
    timeout: Option<f64>,
) -> PyResult<BusOptions> {
    let mut policy = WaitPolicy::default();
    if let Some(us) = spin_us {
        if !(0.0..=1e7).contains(&us) {
            return Err(PyValueError::new_err("spin_us must be between 0 and 10,000,000"));
        }
        policy.spin = Duration::from_secs_f64(us / 1e6);
    }
    policy.busy_poll = busy_poll;
    let join_timeout = match timeout {
        Some(t) if t.is_nan() || t < 0.0 => return Err(PyValueError::new_err("timeout must be >= 0 or None")),
        Some(t) => Some(Duration::try_from_secs_f64(t).unwrap_or(Duration::from_secs(1 << 30))),
        None => Some(Duration::from_secs(1 << 30)),
    };
    Ok(BusOptions { capacity, max_message_size, backpressure, policy, join_timeout })
}

fn join(py: Python<'_>, url: &str, o: &BusOptions) -> PyResult<Arc<Bus>> {
    let name = core::parse_uri(url).map_err(to_py)?;
    py.allow_threads(|| Bus::join(&name, o)).map_err(to_py)
}

/// A topic borrowed like a one-frame message: bytes-like, or str (encoded as UTF-8).
fn borrowed_topic<'py>(obj: &Bound<'py, PyAny>) -> PyResult<Borrowed<'py>> {
    if let Ok(s) = obj.downcast::<PyString>() {
        return Borrowed::new(&PyBytes::new(obj.py(), s.to_str()?.as_bytes()).into_any());
    }
    if obj.is_instance_of::<pyo3::types::PyList>() || obj.is_instance_of::<pyo3::types::PyTuple>() {
        return Err(PyTypeError::new_err("a topic is bytes or str"));
    }
    Borrowed::new(obj)
}

/// A topic: bytes-like, or str (encoded as UTF-8).
fn topic_bytes(obj: &Bound<'_, PyAny>) -> PyResult<Vec<u8>> {
    if let Ok(s) = obj.downcast::<PyString>() {
        return Ok(s.to_str()?.as_bytes().to_vec());
    }
    if let Ok(b) = obj.downcast::<PyBytes>() {
        return Ok(b.as_bytes().to_vec());
    }
    crate::message::View::new(obj).map(|v| v.as_slice().to_vec()).map_err(|_| PyTypeError::new_err("a topic is bytes or str"))
}

fn info_dict<'py>(py: Python<'py>, bus: &Bus) -> PyResult<Bound<'py, PyDict>> {
    let i = bus.info();
    let d = PyDict::new(py);
    d.set_item("name", &bus.name)?;
    d.set_item("tail", i.tail)?;
    d.set_item("capacity", i.geometry.capacity)?;
    d.set_item("max_message_size", i.geometry.max_message_size)?;
    d.set_item("backpressure", i.geometry.backpressure)?;
    d.set_item("subscribers", i.subscribers)?;
    d.set_item("lock", i.lock)?;
    d.set_item("recoveries", i.recoveries)?;
    d.set_item("created_ns", i.created_ns)?;
    Ok(d)
}

fn closed() -> PyErr {
    to_py(Error::ChannelClosed)
}

#[pyclass(frozen, module = "lwmq._core")]
pub struct Publisher {
    inner: Mutex<Option<Arc<core::Publisher>>>,
    url: String,
}

impl Publisher {
    fn get(&self) -> PyResult<Arc<core::Publisher>> {
        self.inner.lock().unwrap().clone().ok_or_else(closed)
    }
}

#[pymethods]
impl Publisher {
    #[new]
    #[pyo3(
        signature = (url, *, capacity=None, max_message_size=None, backpressure=None, spin_us=None, busy_poll=false, timeout=Some(5.0), debug_stall_us=None),
        text_signature = "(url, *, capacity=None, max_message_size=None, backpressure=None, spin_us=None, busy_poll=False, timeout=5.0, debug_stall_us=None)"
    )]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        url: &str,
        capacity: Option<u32>,
        max_message_size: Option<u32>,
        backpressure: Option<bool>,
        spin_us: Option<f64>,
        busy_poll: bool,
        timeout: Option<f64>,
        debug_stall_us: Option<u64>,
    ) -> PyResult<Self> {
        let o = options(capacity, max_message_size, backpressure, spin_us, busy_poll, timeout)?;
        let bus = join(py, url, &o)?;
        let mut p = core::Publisher::new(bus, &o);
        p.debug_stall = debug_stall_us.map(Duration::from_micros);
        Ok(Publisher { inner: Mutex::new(Some(Arc::new(p))), url: url.to_string() })
    }

    /// Publishes one message under `topic`; returns its global sequence number. Waits (up to `timeout`)
    /// only on a backpressure bus whose slowest subscriber has not made room.
    #[pyo3(signature = (topic, message, timeout=None))]
    fn publish(&self, py: Python<'_>, topic: &Bound<'_, PyAny>, message: &Bound<'_, PyAny>, timeout: Option<f64>) -> PyResult<u64> {
        let p = self.get()?;
        let topic = borrowed_topic(topic)?;
        let message = Borrowed::new(message)?;
        let topic = topic.single().expect("one frame");
        // One frame (the common case) needs no list of slices to be allocated.
        let (one, many);
        let frames: &[&[u8]] = match message.single() {
            Some(f) => {
                one = [f];
                &one
            }
            None => {
                many = message.slices();
                &many
            }
        };
        // First without waiting and with the GIL kept (the common case: a few hundred nanoseconds).
        match p.publish(topic, frames, lwmq_core::sync::no_wait()) {
            Err(Error::Timeout(_)) if timeout != Some(0.0) => {}
            other => return other.map_err(to_py),
        }
        // The borrowed frames stay valid without the GIL: `message` keeps their objects alive.
        blocking::run(py, deadline(timeout)?, is_timeout, |d| p.publish(topic, frames, d), to_py)
    }

    /// Publishes (topic, message) pairs, many per lock hold; returns how many were published (fewer
    /// than given only when backpressure held them past `timeout`).
    #[pyo3(signature = (items, timeout=None))]
    fn publish_many(&self, py: Python<'_>, items: &Bound<'_, PyAny>, timeout: Option<f64>) -> PyResult<usize> {
        let p = self.get()?;
        let mut held = Vec::with_capacity(items.len().unwrap_or(0));
        for item in items.try_iter()? {
            let item = item?;
            let pair = item.downcast::<pyo3::types::PyTuple>().ok().filter(|t| t.len() == 2);
            let Some(pair) = pair else { return Err(PyTypeError::new_err("publish_many takes (topic, message) pairs")) };
            held.push((borrowed_topic(&pair.get_item(0)?)?, Borrowed::new(&pair.get_item(1)?)?));
        }
        let frames = crate::message::FrameRuns::of(held.iter().map(|(_, m)| m));
        let items: Vec<(&[u8], &[&[u8]])> =
            held.iter().zip(frames.messages()).map(|((t, _), f)| (t.single().expect("one frame"), f)).collect();
        let d = deadline(timeout)?;
        let mut done = 0;
        loop {
            let slice_end = std::time::Instant::now() + Duration::from_millis(100);
            let slice = Some(d.map_or(slice_end, |d| d.min(slice_end)));
            let (n, _) = py.allow_threads(|| p.publish_many(&items[done..], slice)).map_err(to_py)?;
            done += n;
            if done == items.len() || slice == d {
                return Ok(done);
            }
            py.check_signals()?;
        }
    }

    /// This publisher's id (the `publisher` of its deliveries).
    #[getter]
    fn id(&self) -> PyResult<u64> {
        Ok(self.get()?.id)
    }

    #[getter]
    fn url(&self) -> &str {
        &self.url
    }

    #[getter]
    fn closed(&self) -> bool {
        self.inner.lock().unwrap().is_none()
    }

    /// The bus's state: tail, geometry, subscribers, the append lock ("free", "held", "recovered").
    fn info<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        info_dict(py, self.get()?.bus())
    }

    /// Leaves the bus (the last member of a process to leave stops serving it).
    fn close(&self, py: Python<'_>) {
        let p = self.inner.lock().unwrap().take();
        py.allow_threads(|| drop(p));
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __exit__(&self, py: Python<'_>, _t: PyObject, _v: PyObject, _tb: PyObject) -> bool {
        self.close(py);
        false
    }

    fn __repr__(&self) -> String {
        format!("<lwmq.Publisher {}{}>", self.url, if self.closed() { " closed" } else { "" })
    }
}

#[pyclass(frozen, module = "lwmq._core")]
pub struct Delivery {
    inner: core::Delivery,
}

#[pymethods]
impl Delivery {
    /// The global sequence number: the same order for every subscriber.
    #[getter]
    fn seq(&self) -> u64 {
        self.inner.seq
    }

    #[getter]
    fn topic<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.inner.topic)
    }

    #[getter]
    fn message(&self) -> Message {
        Message { inner: self.inner.message.clone() }
    }

    /// The publishing member's id.
    #[getter]
    fn publisher(&self) -> u64 {
        self.inner.publisher
    }

    /// When it was published (Unix time, nanoseconds).
    #[getter]
    fn timestamp_ns(&self) -> u64 {
        self.inner.timestamp_ns
    }

    /// Messages this subscriber lost (overrun) just before this one; 0 almost always.
    #[getter]
    fn lost(&self) -> u64 {
        self.inner.lost
    }

    /// Payload bytes over all frames (without making the Message).
    #[getter]
    fn nbytes(&self) -> usize {
        self.inner.message.nbytes()
    }

    fn __repr__(&self) -> String {
        format!(
            "<lwmq.Delivery seq={} topic={:?} {} B{}>",
            self.inner.seq,
            String::from_utf8_lossy(&self.inner.topic),
            self.inner.message.nbytes(),
            if self.inner.lost > 0 { format!(" after {} lost", self.inner.lost) } else { String::new() }
        )
    }
}

/// Many deliveries as one object: per-message Python objects are made only when asked for (indexing,
/// iteration); the columns (`seqs`, `sizes`, ...) come as `array.array("Q")` in one call each.
#[pyclass(frozen, sequence, module = "lwmq._core")]
pub struct Batch {
    inner: core::Received,
}

pub(crate) fn u64_array<'py>(py: Python<'py>, values: impl ExactSizeIterator<Item = u64>) -> PyResult<Bound<'py, PyAny>> {
    static ZERO: pyo3::sync::GILOnceCell<PyObject> = pyo3::sync::GILOnceCell::new();
    let zero = ZERO.get_or_try_init(py, || py.import("array")?.getattr("array")?.call1(("Q", [0u64])).map(Bound::unbind))?;
    // One allocation: an array of n zeros (repeating an array is a C fill), then written in place.
    let n = values.len();
    let array = zero.bind(py).mul(n)?;
    if n == 0 {
        return Ok(array);
    }
    let mut view = std::mem::MaybeUninit::<pyo3::ffi::Py_buffer>::uninit();
    // SAFETY: `array` is a live array.array("Q") of n > 0 items, which exports a writable, C-contiguous,
    // malloc-aligned buffer; its length is checked before it is written as n u64; the view is released
    // below before anything else can touch `array` (we hold the GIL and nothing else refers to it yet).
    unsafe {
        if pyo3::ffi::PyObject_GetBuffer(array.as_ptr(), view.as_mut_ptr(), pyo3::ffi::PyBUF_WRITABLE) != 0 {
            return Err(PyErr::fetch(py));
        }
        let mut view = view.assume_init();
        if view.len as usize == n * 8 {
            let out = std::slice::from_raw_parts_mut(view.buf as *mut u64, n);
            out.iter_mut().zip(values).for_each(|(o, v)| *o = v);
        }
        let len = view.len as usize;
        pyo3::ffi::PyBuffer_Release(&mut view);
        if len != n * 8 {
            return Err(pyo3::exceptions::PySystemError::new_err("array.array(\"Q\") is not 8 bytes per item"));
        }
    }
    Ok(array)
}

impl Batch {
    fn delivery(&self, i: usize) -> PyResult<Delivery> {
        self.inner.delivery(i).map(|inner| Delivery { inner }).map_err(to_py)
    }
}

#[pymethods]
impl Batch {
    fn __len__(&self) -> usize {
        self.inner.len()
    }

    fn __getitem__(&self, index: isize) -> PyResult<Delivery> {
        self.delivery(crate::message::sequence_index(index, self.inner.len(), "batch")?)
    }

    fn __iter__(&self, py: Python<'_>) -> PyResult<PyObject> {
        let items = (0..self.inner.len()).map(|i| self.delivery(i)).collect::<PyResult<Vec<_>>>()?;
        let list = pyo3::types::PyList::new(py, items)?;
        Ok(list.try_iter()?.into_any().unbind())
    }

    /// Global sequence numbers.
    #[getter]
    fn seqs<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        u64_array(py, self.inner.entries.iter().map(|e| e.seq))
    }

    /// Payload bytes of each message (over all its frames).
    #[getter]
    fn sizes<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        u64_array(py, self.inner.entries.iter().map(|e| e.nbytes as u64))
    }

    #[getter]
    fn publishers<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        u64_array(py, self.inner.entries.iter().map(|e| e.publisher))
    }

    #[getter]
    fn timestamps_ns<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        u64_array(py, self.inner.entries.iter().map(|e| e.timestamp_ns))
    }

    #[getter]
    fn topics<'py>(&self, py: Python<'py>) -> Vec<Bound<'py, PyBytes>> {
        (0..self.inner.len()).map(|i| PyBytes::new(py, self.inner.topic(i))).collect()
    }

    /// Messages lost (overrun) just before or between the messages of this batch.
    #[getter]
    fn lost(&self) -> u64 {
        self.inner.entries.iter().map(|e| e.lost).sum()
    }

    fn __repr__(&self) -> String {
        match (self.inner.entries.first(), self.inner.entries.last()) {
            (Some(a), Some(b)) => format!("<lwmq.Batch of {} (seq {}..{})>", self.inner.len(), a.seq, b.seq),
            _ => "<lwmq.Batch of 0>".into(),
        }
    }
}

#[pyclass(frozen, module = "lwmq._core")]
pub struct Subscriber {
    inner: Arc<Mutex<Option<core::Subscriber>>>,
    url: String,
    /// `lost` and `position` as they were at close, so they stay readable after it.
    at_close: Arc<Mutex<(u64, u64)>>,
}

impl Subscriber {
    fn with<T>(&self, f: impl FnOnce(&mut core::Subscriber) -> T) -> PyResult<T> {
        let mut guard = self.inner.lock().unwrap();
        guard.as_mut().map(f).ok_or_else(closed)
    }

    /// Runs a receive: first without waiting and with the GIL kept (cheap when something is there),
    /// then, if `timeout` allows, blocking without the GIL. A timeout comes back as `Ok(None)`.
    fn receive<T: Send>(&self, py: Python<'_>, timeout: Option<f64>, op: impl Fn(&mut core::Subscriber, lwmq_core::sync::Deadline) -> Result<T, Error> + Send + Sync) -> PyResult<Option<T>> {
        match self.with(|s| op(s, lwmq_core::sync::no_wait()))? {
            Err(Error::Timeout(_)) if timeout != Some(0.0) => {}
            Err(Error::Timeout(_)) => return Ok(None),
            other => return other.map(Some).map_err(to_py),
        }
        let inner = self.inner.clone();
        let got = blocking::run(py, deadline(timeout)?, is_timeout, |d| {
            inner.lock().unwrap().as_mut().ok_or(Error::ChannelClosed).and_then(|s| op(s, d))
        }, to_py);
        match got {
            Ok(v) => Ok(Some(v)),
            Err(e) if crate::errors::is(py, &e, "Timeout") => Ok(None),
            Err(e) => Err(e),
        }
    }
}

fn start_of(start: &Bound<'_, PyAny>) -> PyResult<Start> {
    if let Ok(s) = start.extract::<u64>() {
        return Ok(Start::At(s));
    }
    match start.extract::<String>().as_deref() {
        Ok("latest") => Ok(Start::Latest),
        Ok("oldest") => Ok(Start::Oldest),
        _ => Err(PyValueError::new_err("start is \"latest\", \"oldest\" or a sequence number")),
    }
}

fn topic_list(obj: Option<&Bound<'_, PyAny>>) -> PyResult<Vec<Vec<u8>>> {
    match obj {
        None => Ok(Vec::new()),
        Some(o) if o.is_instance_of::<PyString>() || o.is_instance_of::<PyBytes>() => {
            Err(PyTypeError::new_err("topics and prefixes are lists, e.g. topics=[b\"AAPL\"]"))
        }
        Some(o) => o.try_iter()?.map(|t| topic_bytes(&t?)).collect(),
    }
}

#[pymethods]
impl Subscriber {
    #[new]
    #[pyo3(
        signature = (url, topics=None, *, prefixes=None, start=None, capacity=None, max_message_size=None, backpressure=None, spin_us=None, busy_poll=false, timeout=Some(5.0)),
        text_signature = "(url, topics=None, *, prefixes=None, start=None, capacity=None, max_message_size=None, backpressure=None, spin_us=None, busy_poll=False, timeout=5.0)"
    )]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        url: &str,
        topics: Option<&Bound<'_, PyAny>>,
        prefixes: Option<&Bound<'_, PyAny>>,
        start: Option<&Bound<'_, PyAny>>,
        capacity: Option<u32>,
        max_message_size: Option<u32>,
        backpressure: Option<bool>,
        spin_us: Option<f64>,
        busy_poll: bool,
        timeout: Option<f64>,
    ) -> PyResult<Self> {
        let o = options(capacity, max_message_size, backpressure, spin_us, busy_poll, timeout)?;
        let filter = TopicFilter { exact: topic_list(topics)?, prefixes: topic_list(prefixes)? };
        let start = match start {
            None => Start::Latest,
            Some(s) => start_of(s)?,
        };
        let bus = join(py, url, &o)?;
        let sub = py.allow_threads(|| core::Subscriber::join(bus, filter, start, &o)).map_err(to_py)?;
        Ok(Subscriber { inner: Arc::new(Mutex::new(Some(sub))), url: url.to_string(), at_close: Default::default() })
    }

    /// The next matching message (a Delivery); raises Timeout when none comes within `timeout`.
    #[pyo3(signature = (timeout=None))]
    fn recv(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Delivery> {
        match self.receive(py, timeout, |s, d| s.recv(d))? {
            Some(inner) => Ok(Delivery { inner }),
            None => Err(to_py(Error::Timeout("nothing published".into()))),
        }
    }

    /// Up to `max_messages` deliveries: waits up to `timeout` for the first, then takes what is there.
    #[pyo3(signature = (max_messages=1024, timeout=0.0))]
    fn recv_many(&self, py: Python<'_>, max_messages: usize, timeout: Option<f64>) -> PyResult<Vec<Delivery>> {
        if max_messages == 0 {
            return Err(PyValueError::new_err("max_messages must be at least 1"));
        }
        let got = self.receive(py, timeout, |s, d| s.recv_many(max_messages, d))?.unwrap_or_default();
        Ok(got.into_iter().map(|inner| Delivery { inner }).collect())
    }

    /// Like `recv_many`, as one Batch (no Python object per message unless asked for); empty on timeout.
    #[pyo3(signature = (max_messages=65536, timeout=0.0))]
    fn recv_batch(&self, py: Python<'_>, max_messages: usize, timeout: Option<f64>) -> PyResult<Batch> {
        if max_messages == 0 {
            return Err(PyValueError::new_err("max_messages must be at least 1"));
        }
        let inner = self.receive(py, timeout, |s, d| s.recv_columns(max_messages, d))?.unwrap_or_default();
        Ok(Batch { inner })
    }

    /// A delivery if one is there now, else None.
    fn try_recv(&self) -> PyResult<Option<Delivery>> {
        match self.with(|s| s.recv(lwmq_core::sync::no_wait()))? {
            Ok(d) => Ok(Some(Delivery { inner: d })),
            Err(Error::Timeout(_)) => Ok(None),
            Err(e) => Err(to_py(e)),
        }
    }

    /// Messages lost (overrun) since joining, in all (still readable after close).
    #[getter]
    fn lost(&self) -> u64 {
        self.with(|s| s.lost).unwrap_or_else(|_| self.at_close.lock().unwrap().0)
    }

    /// The next sequence number this subscriber will look at (to resume from, e.g. after a restart;
    /// still readable after close).
    #[getter]
    fn position(&self) -> u64 {
        self.with(|s| s.position()).unwrap_or_else(|_| self.at_close.lock().unwrap().1)
    }

    #[getter]
    fn id(&self) -> PyResult<u64> {
        self.with(|s| s.id)
    }

    #[getter]
    fn url(&self) -> &str {
        &self.url
    }

    #[getter]
    fn closed(&self) -> bool {
        self.inner.lock().unwrap().is_none()
    }

    fn info<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let bus = self.with(|s| s.bus().clone())?;
        info_dict(py, &bus)
    }

    /// Leaves the bus: publishers in backpressure mode stop waiting for this subscriber at once.
    fn close(&self, py: Python<'_>) {
        let (inner, at_close) = (self.inner.clone(), self.at_close.clone());
        py.allow_threads(move || {
            if let Some(s) = inner.lock().unwrap().take() {
                *at_close.lock().unwrap() = (s.lost, s.position());
            }
        });
    }

    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// Iteration blocks for the next delivery and ends when the subscriber is closed.
    fn __next__(&self, py: Python<'_>) -> PyResult<Option<Delivery>> {
        match self.recv(py, None) {
            Ok(d) => Ok(Some(d)),
            Err(e) if crate::errors::is(py, &e, "ChannelClosed") => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __exit__(&self, py: Python<'_>, _t: PyObject, _v: PyObject, _tb: PyObject) -> bool {
        self.close(py);
        false
    }

    fn __repr__(&self) -> String {
        format!("<lwmq.Subscriber {}{}>", self.url, if self.closed() { " closed" } else { "" })
    }
}
