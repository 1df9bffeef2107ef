//! The shared segment of an ipc channel: a memfd created by the listener, sized, sealed against
//! shrinking and growing (so a peer can never truncate it under our mapping and crash us with SIGBUS),
//! passed to the connector and mapped by both. Nothing is named in /dev/shm or on disk: the kernel frees
//! the memory when the last mapping goes, whatever way the processes exit.

use crate::error::{Error, Result};
use crate::transport::pool::{Layout, Region};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Arc;

const SEALS: libc::c_int = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;

fn os(what: &str) -> Error {
    Error::os(what)
}

/// Creates, sizes, seals and maps a segment for `layout`. Returns the mapping and the fd to pass.
pub fn create(layout: Layout) -> Result<(Arc<Region>, OwnedFd)> {
    // SAFETY: the name is a NUL-terminated literal; the returned descriptor is owned below.
    let fd = unsafe { libc::memfd_create(c"lwmq-ipc".as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
    if fd < 0 {
        return Err(os("memfd_create"));
    }
    // SAFETY: fresh descriptor.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: plain syscalls on a descriptor we own.
    unsafe {
        if libc::ftruncate(fd.as_raw_fd(), layout.total as libc::off_t) < 0 {
            return Err(os("sizing the shared segment"));
        }
        if libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, SEALS) < 0 {
            return Err(os("sealing the shared segment"));
        }
    }
    Ok((map(&fd, layout)?, fd))
}

/// Maps a segment received from the listener after checking it is a sealed memfd of the right size.
pub fn attach(fd: &OwnedFd, layout: Layout) -> Result<Arc<Region>> {
    // SAFETY: plain fcntl/fstat on a descriptor we own; `st` is written by fstat.
    let (seals, size) = unsafe {
        let seals = libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS);
        let mut st: libc::stat = std::mem::zeroed();
        if libc::fstat(fd.as_raw_fd(), &mut st) < 0 {
            return Err(os("fstat of the shared segment"));
        }
        (seals, st.st_size as u64)
    };
    if seals < 0 || seals & (libc::F_SEAL_SHRINK | libc::F_SEAL_GROW) != (libc::F_SEAL_SHRINK | libc::F_SEAL_GROW) {
        return Err(Error::Protocol("the listener's segment is not sealed against resizing".into()));
    }
    if size != layout.total as u64 {
        return Err(Error::Protocol(format!("segment of {size} bytes, its geometry needs {}", layout.total)));
    }
    map(fd, layout)
}

fn map(fd: &OwnedFd, layout: Layout) -> Result<Arc<Region>> {
    // SAFETY: the memfd is sealed against shrinking, so the mapping stays backed for its whole life; the
    // memory is only ever accessed through atomics and the pool's ownership protocol (pool.rs).
    let map = unsafe { memmap2::MmapOptions::new().len(layout.total).map_mut(fd.as_raw_fd()) }
        .map_err(|e| Error::Os { what: "mapping the shared segment".into(), errno: e.raw_os_error().unwrap_or(0) })?;
    Region::from_map(map, layout)
}
