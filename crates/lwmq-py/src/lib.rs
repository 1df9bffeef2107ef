//! `lwmq._core`: the PyO3 binding. Thin wrappers over lwmq-core, one file per class; errors are mapped in
//! errors.rs. Python-level API (providers from entry points, async, CLI) lives in python/lwmq.

mod blocking;
mod buffer;
mod bus;
mod channel;
mod errors;
mod links;
mod listener;
mod loan;
mod message;
mod message_batch;
mod options;
mod queue;

use blocking::deadline;
use errors::to_py;
use lwmq_core::channel::Channel as CoreChannel;
use lwmq_core::transport;
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// Listens on a built-in transport.
#[pyfunction]
#[pyo3(signature = (uri, **options))]
fn listen(uri: &str, options: Option<&Bound<'_, PyDict>>) -> PyResult<listener::Listener> {
    let options = options::parse(options)?;
    let inner = transport::listen(uri, &options).map_err(to_py)?;
    Ok(listener::Listener { inner, options })
}

/// Connects through a built-in transport, waiting up to `timeout` for a listener.
#[pyfunction]
#[pyo3(signature = (uri, timeout=Some(5.0), **options), text_signature = "(uri, timeout=5.0, **options)")]
fn connect(py: Python<'_>, uri: &str, timeout: Option<f64>, options: Option<&Bound<'_, PyDict>>) -> PyResult<channel::Channel> {
    let options = options::parse(options)?;
    let link = connect_link(py, uri, timeout, &options)?;
    Ok(channel::Channel { inner: CoreChannel::new(link, &options).map_err(to_py)? })
}

fn connect_link(py: Python<'_>, uri: &str, timeout: Option<f64>, options: &transport::Options) -> PyResult<Box<dyn transport::Link>> {
    blocking::run(
        py,
        deadline(timeout)?,
        |e: &lwmq_core::Error| matches!(e, lwmq_core::Error::Timeout(_)),
        |d| transport::connect(uri, options, d),
        to_py,
    )
}

/// A built-in transport's link at the buffer level, for providers that wrap a built-in one.
#[pyfunction]
#[pyo3(signature = (uri, timeout=Some(5.0), **options), text_signature = "(uri, timeout=5.0, **options)")]
fn raw_connect(py: Python<'_>, uri: &str, timeout: Option<f64>, options: Option<&Bound<'_, PyDict>>) -> PyResult<links::RawLink> {
    let options = options::parse(options)?;
    Ok(links::RawLink { inner: connect_link(py, uri, timeout, &options)? })
}

#[pyfunction]
#[pyo3(signature = (uri, **options))]
fn raw_listen(uri: &str, options: Option<&Bound<'_, PyDict>>) -> PyResult<links::RawListener> {
    let options = options::parse(options)?;
    Ok(links::RawListener { inner: transport::listen(uri, &options).map_err(to_py)? })
}

/// A Channel over a link object written in Python.
#[pyfunction]
#[pyo3(signature = (link, **options))]
fn channel_over(link: Bound<'_, PyAny>, options: Option<&Bound<'_, PyDict>>) -> PyResult<channel::Channel> {
    let options = options::parse(options)?;
    let link = links::PyLink::new(link)?;
    Ok(channel::Channel { inner: CoreChannel::new(Box::new(link), &options).map_err(to_py)? })
}

/// A Listener over a listener object written in Python.
#[pyfunction]
#[pyo3(signature = (listener, **options))]
fn listener_over(listener: Bound<'_, PyAny>, options: Option<&Bound<'_, PyDict>>) -> PyResult<listener::Listener> {
    let options = options::parse(options)?;
    Ok(listener::Listener { inner: Box::new(links::PyListener { obj: listener.unbind() }), options })
}

/// Checks a URI with the built-in provider of its scheme (AddressError / UnsupportedScheme).
#[pyfunction]
fn check_uri(uri: &str) -> PyResult<(String, String)> {
    let parsed = transport::Uri::parse(uri).map_err(to_py)?;
    let provider = transport::provider_for(&parsed.scheme).map_err(to_py)?;
    provider.check_address(&parsed).map_err(to_py)?;
    Ok((parsed.scheme, parsed.rest))
}

/// Splits a URI into (scheme, rest) without asking any provider (AddressError if malformed).
#[pyfunction]
fn split_uri(uri: &str) -> PyResult<(String, String)> {
    let parsed = transport::Uri::parse(uri).map_err(to_py)?;
    Ok((parsed.scheme, parsed.rest))
}

/// The built-in providers: (name, schemes, capabilities).
#[pyfunction]
fn builtin_transports() -> Vec<(String, Vec<String>, Vec<String>)> {
    transport::builtin_providers()
        .into_iter()
        .map(|p| {
            (
                p.name().to_string(),
                p.schemes().iter().map(|s| s.to_string()).collect(),
                p.capabilities().names().into_iter().map(String::from).collect(),
            )
        })
        .collect()
}

/// Encodes messages (each a list of bytes-like frames) into one wire-format buffer.
#[pyfunction]
fn encode_buffer<'py>(py: Python<'py>, messages: &Bound<'py, PyAny>) -> PyResult<Bound<'py, pyo3::types::PyBytes>> {
    let msgs = messages.try_iter()?.map(|m| message::message_from(&m?)).collect::<PyResult<Vec<_>>>()?;
    let buf = lwmq_core::wire::encode_to_vec(&msgs).map_err(to_py)?;
    Ok(pyo3::types::PyBytes::new(py, &buf))
}

/// Decodes one wire-format buffer into Messages (ProtocolError if malformed).
#[pyfunction]
fn decode_buffer(data: &Bound<'_, PyAny>) -> PyResult<Vec<message::Message>> {
    let bytes = message::frame_from(data)?;
    let msgs = lwmq_core::wire::decode(&bytes).map_err(to_py)?;
    Ok(msgs.into_iter().map(|m| message::Message { inner: m }).collect())
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("build_profile", lwmq_core::BUILD_PROFILE)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("WIRE_VERSION", lwmq_core::wire::VERSION)?;
    m.add("OPTIONS", options::KNOWN.to_vec())?;
    m.add_class::<bus::Publisher>()?;
    m.add_class::<bus::Subscriber>()?;
    m.add_class::<bus::Delivery>()?;
    m.add_class::<bus::Batch>()?;
    m.add_class::<message::Message>()?;
    m.add_class::<message::Frame>()?;
    m.add_class::<message_batch::MessageBatch>()?;
    m.add_class::<channel::Channel>()?;
    m.add_class::<listener::Listener>()?;
    m.add_class::<queue::Queue>()?;
    m.add_class::<links::RawLink>()?;
    m.add_class::<links::RawListener>()?;
    m.add_class::<links::TxBuffer>()?;
    m.add_class::<loan::Loan>()?;
    m.add_class::<links::SegmentView>()?;
    m.add_function(wrap_pyfunction!(listen, m)?)?;
    m.add_function(wrap_pyfunction!(connect, m)?)?;
    m.add_function(wrap_pyfunction!(raw_listen, m)?)?;
    m.add_function(wrap_pyfunction!(raw_connect, m)?)?;
    m.add_function(wrap_pyfunction!(channel_over, m)?)?;
    m.add_function(wrap_pyfunction!(listener_over, m)?)?;
    m.add_function(wrap_pyfunction!(check_uri, m)?)?;
    m.add_function(wrap_pyfunction!(split_uri, m)?)?;
    m.add_function(wrap_pyfunction!(builtin_transports, m)?)?;
    m.add_function(wrap_pyfunction!(encode_buffer, m)?)?;
    m.add_function(wrap_pyfunction!(decode_buffer, m)?)?;
    Ok(())
}
