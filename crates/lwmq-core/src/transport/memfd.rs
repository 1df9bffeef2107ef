//! Sealed memfds: the shared memory of ipc:// channels and of buses. A memfd is sized, then sealed against
//! shrinking and growing, so a peer can never truncate it under our mapping and crash us with SIGBUS; it is
//! passed over a Unix socket (SCM_RIGHTS). Nothing is named in /dev/shm or on disk: the kernel frees the
//! memory when the last descriptor and mapping go, whatever way the processes exit.

use crate::error::{Error, Result};
use std::ffi::CStr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

const SEALS: libc::c_int = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;

/// A new memfd of `size` zeroed bytes, sealed against resizing.
pub fn create_sealed(name: &CStr, size: usize) -> Result<OwnedFd> {
    // SAFETY: `name` is NUL-terminated; the returned descriptor is owned below.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
    if fd < 0 {
        return Err(Error::os("memfd_create"));
    }
    // SAFETY: fresh descriptor.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: plain syscalls on a descriptor we own.
    unsafe {
        if libc::ftruncate(fd.as_raw_fd(), size as libc::off_t) < 0 {
            return Err(Error::os("sizing the shared segment"));
        }
        if libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, SEALS) < 0 {
            return Err(Error::os("sealing the shared segment"));
        }
    }
    Ok(fd)
}

/// The size of a memfd a peer passed us, after checking it is sealed against shrinking and growing.
pub fn sealed_size(fd: &OwnedFd) -> Result<u64> {
    // SAFETY: fcntl/fstat on a descriptor we own; `st` is written by fstat.
    let (seals, size) = unsafe {
        let seals = libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS);
        let mut st: libc::stat = std::mem::zeroed();
        if libc::fstat(fd.as_raw_fd(), &mut st) < 0 {
            return Err(Error::os("fstat of the shared segment"));
        }
        (seals, st.st_size as u64)
    };
    let need = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW;
    if seals < 0 || seals & need != need {
        return Err(Error::Protocol("the shared segment is not sealed against resizing".into()));
    }
    Ok(size)
}

/// Maps `len` bytes of a sealed memfd, shared and writable.
pub fn map(fd: &OwnedFd, len: usize) -> Result<memmap2::MmapMut> {
    // SAFETY: the memfd is sealed against shrinking (created by `create_sealed` or checked by
    // `sealed_size`), so the mapping stays backed for its whole life. What lives in it is accessed only
    // through atomics and the protocols of its users (transport/pool.rs, bus/).
    unsafe { memmap2::MmapOptions::new().len(len).map_mut(fd.as_raw_fd()) }
        .map_err(|e| Error::Os { what: "mapping the shared segment".into(), errno: e.raw_os_error().unwrap_or(0) })
}
