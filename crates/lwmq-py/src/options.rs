//! Keyword options of listen/connect → the engine's Options. Unknown names raise TypeError.

use lwmq_core::transport::Options;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::time::Duration;

pub const KNOWN: &[&str] = &[
    "buffer_size", "send_buffers", "recv_buffers", "spin_us", "busy_poll", "priorities", "allowed_uids",
    "send_hwm", "linger",
];

pub fn parse(kwargs: Option<&Bound<'_, PyDict>>) -> PyResult<Options> {
    let mut o = Options::default();
    let Some(kwargs) = kwargs else { return Ok(o) };
    for (key, value) in kwargs.iter() {
        let key: String = key.extract()?;
        if value.is_none() {
            continue;
        }
        match key.as_str() {
            "buffer_size" => o.buffer_size = Some(value.extract()?),
            "send_buffers" => o.send_buffers = Some(value.extract()?),
            "recv_buffers" => o.recv_buffers = Some(value.extract()?),
            "spin_us" => {
                let us: f64 = value.extract()?;
                if !(0.0..=1e7).contains(&us) {
                    return Err(PyValueError::new_err("spin_us must be between 0 and 10,000,000"));
                }
                o.spin = Duration::from_secs_f64(us / 1e6);
            }
            "busy_poll" => o.busy_poll = value.is_truthy()?,
            "priorities" => {
                let dict = value.downcast::<PyDict>().map_err(|_| PyTypeError::new_err("priorities is a dict of group name -> weight"))?;
                o.priorities = dict.iter().map(|(k, v)| Ok((k.extract()?, v.extract()?))).collect::<PyResult<_>>()?;
            }
            "allowed_uids" => o.allowed_uids = Some(value.extract()?),
            "send_hwm" => o.send_hwm = value.extract()?,
            "linger" => {
                let s: f64 = value.extract()?;
                o.linger = Duration::try_from_secs_f64(s).map_err(|_| PyValueError::new_err("linger must be >= 0 seconds"))?;
            }
            other => {
                return Err(PyTypeError::new_err(format!("unknown option '{other}'; the options are {}", KNOWN.join(", "))))
            }
        }
    }
    o.validate().map_err(crate::errors::to_py)?;
    Ok(o)
}
