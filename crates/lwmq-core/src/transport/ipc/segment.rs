//! The shared segment of an ipc channel: a sealed memfd (transport/memfd.rs) created by the listener,
//! passed to the connector and mapped by both, holding the pool layout of transport/pool.rs.

use crate::error::{Error, Result};
use crate::transport::memfd;
use crate::transport::pool::{Layout, Region};
use std::os::fd::OwnedFd;
use std::sync::Arc;

/// Creates, sizes, seals and maps a segment for `layout`. Returns the mapping and the fd to pass.
pub fn create(layout: Layout) -> Result<(Arc<Region>, OwnedFd)> {
    let fd = memfd::create_sealed(c"lwmq-ipc", layout.total)?;
    Ok((Region::from_map(memfd::map(&fd, layout.total)?, layout)?, fd))
}

/// Maps a segment received from the listener after checking it is a sealed memfd of the right size.
pub fn attach(fd: &OwnedFd, layout: Layout) -> Result<Arc<Region>> {
    let size = memfd::sealed_size(fd)?;
    if size != layout.total as u64 {
        return Err(Error::Protocol(format!("segment of {size} bytes, its geometry needs {}", layout.total)));
    }
    Region::from_map(memfd::map(fd, layout.total)?, layout)
}
