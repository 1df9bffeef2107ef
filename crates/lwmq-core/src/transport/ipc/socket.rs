//! Unix SEQPACKET sockets for the ipc rendezvous: bind/connect/accept with deadlines, messages carrying
//! one file descriptor (SCM_RIGHTS), and the peer's credentials (SO_PEERCRED).

use crate::error::{Error, Result};
use crate::sync::Deadline;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::{Duration, Instant};

/// `ipc://name` binds "\0lwmq:name" in the abstract namespace.
pub const ABSTRACT_PREFIX: &[u8] = b"lwmq:";

/// Where a listener lives: the abstract namespace (nothing on disk) or a filesystem path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SocketAddress {
    Abstract(Vec<u8>),
    Path(std::path::PathBuf),
}

fn sockaddr(addr: &SocketAddress) -> Result<(libc::sockaddr_un, libc::socklen_t)> {
    // SAFETY: sockaddr_un is plain old data; all-zero is a valid (empty) value.
    let mut sa: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    sa.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let (bytes, offset): (&[u8], usize) = match addr {
        SocketAddress::Abstract(name) => (name, 1), // sun_path[0] = 0 marks the abstract namespace
        SocketAddress::Path(p) => (p.as_os_str().as_bytes(), 0),
    };
    if bytes.len() + offset >= sa.sun_path.len() {
        return Err(Error::Address(format!("socket address of {} bytes is too long", bytes.len())));
    }
    for (i, b) in bytes.iter().enumerate() {
        sa.sun_path[offset + i] = *b as libc::c_char;
    }
    let base = std::mem::size_of::<libc::sa_family_t>();
    let len = match addr {
        SocketAddress::Abstract(_) => base + 1 + bytes.len(),
        SocketAddress::Path(_) => base + bytes.len() + 1,
    };
    Ok((sa, len as libc::socklen_t))
}

fn check(rc: libc::c_int, what: &str) -> Result<libc::c_int> {
    if rc < 0 {
        Err(Error::os(what))
    } else {
        Ok(rc)
    }
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

fn new_socket() -> Result<OwnedFd> {
    // SAFETY: plain syscall; the returned descriptor is owned by the OwnedFd below.
    let fd = check(unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC, 0) }, "socket")?;
    // SAFETY: `fd` is a fresh descriptor nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Waits until `fd` is readable (or hung up), at most until `deadline`. Returns false on timeout.
pub fn wait_readable(fd: RawFd, deadline: Deadline) -> Result<bool> {
    loop {
        let timeout_ms = match deadline {
            None => 100,
            Some(d) => {
                let left = d.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    0
                } else {
                    left.as_millis().clamp(1, 100) as i32
                }
            }
        };
        let mut pfd = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid pollfd for the duration of the call.
        let rc = unsafe { libc::poll(&mut pfd, 1, timeout_ms) };
        if rc < 0 && errno() != libc::EINTR {
            return Err(Error::os("poll"));
        }
        if rc > 0 {
            return Ok(true);
        }
        if timeout_ms == 0 || deadline.is_some_and(|d| Instant::now() >= d) {
            return Ok(false);
        }
        if deadline.is_none() {
            return Ok(false); // let the caller re-check its own state every 100 ms
        }
    }
}

/// A listening socket. A filesystem socket is created with mode 0600 and removed on drop.
pub fn listen(addr: &SocketAddress) -> Result<OwnedFd> {
    let fd = new_socket()?;
    let (sa, len) = sockaddr(addr)?;
    if let SocketAddress::Path(p) = addr {
        remove_stale(p, addr)?;
    }
    // SAFETY: `sa` is a valid sockaddr_un of `len` bytes.
    let rc = unsafe { libc::bind(fd.as_raw_fd(), &sa as *const _ as *const libc::sockaddr, len) };
    if rc < 0 {
        return Err(match errno() {
            libc::EADDRINUSE => Error::AddressInUse(describe(addr)),
            e => Error::Os { what: format!("binding {}", describe(addr)), errno: e },
        });
    }
    if let SocketAddress::Path(p) = addr {
        // Only our own uid may connect through the file system; SO_PEERCRED is checked as well.
        std::fs::set_permissions(p, std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .map_err(|e| Error::Os { what: format!("chmod {}", p.display()), errno: e.raw_os_error().unwrap_or(0) })?;
    }
    // SAFETY: plain syscall on a descriptor we own.
    check(unsafe { libc::listen(fd.as_raw_fd(), 128) }, "listen")?;
    Ok(fd)
}

/// A socket file left by a listener that died is reclaimed; a live one means the address is in use.
fn remove_stale(p: &Path, addr: &SocketAddress) -> Result<()> {
    use std::os::unix::fs::FileTypeExt;
    match std::fs::symlink_metadata(p) {
        Err(_) => Ok(()),
        Ok(meta) if !meta.file_type().is_socket() => {
            Err(Error::AddressInUse(format!("{} exists and is not a socket", p.display())))
        }
        Ok(_) => match try_connect(addr) {
            Ok(_) => Err(Error::AddressInUse(describe(addr))),
            Err(_) => std::fs::remove_file(p)
                .map_err(|e| Error::Os { what: format!("removing stale {}", p.display()), errno: e.raw_os_error().unwrap_or(0) }),
        },
    }
}

fn try_connect(addr: &SocketAddress) -> std::result::Result<OwnedFd, i32> {
    let fd = new_socket().map_err(|_| libc::EMFILE)?;
    let (sa, len) = sockaddr(addr).map_err(|_| libc::EINVAL)?;
    // SAFETY: `sa` is a valid sockaddr_un of `len` bytes.
    let rc = unsafe { libc::connect(fd.as_raw_fd(), &sa as *const _ as *const libc::sockaddr, len) };
    if rc < 0 {
        Err(errno())
    } else {
        Ok(fd)
    }
}

/// Connects, retrying while no listener is there yet, until `deadline`.
pub fn connect(addr: &SocketAddress, deadline: Deadline) -> Result<OwnedFd> {
    loop {
        match try_connect(addr) {
            Ok(fd) => return Ok(fd),
            Err(libc::ENOENT | libc::ECONNREFUSED | libc::EAGAIN) => {
                if deadline.is_some_and(|d| Instant::now() >= d) {
                    return Err(Error::Timeout(format!("no listener at {}", describe(addr))));
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => return Err(Error::Os { what: format!("connecting to {}", describe(addr)), errno: e }),
        }
    }
}

/// Accepts one connection if one is waiting before `deadline`.
pub fn accept(listener: &OwnedFd, deadline: Deadline) -> Result<Option<OwnedFd>> {
    if !wait_readable(listener.as_raw_fd(), deadline)? {
        return Ok(None);
    }
    // SAFETY: plain syscall; the descriptor returned is owned below.
    let fd = unsafe { libc::accept4(listener.as_raw_fd(), std::ptr::null_mut(), std::ptr::null_mut(), libc::SOCK_CLOEXEC) };
    if fd < 0 {
        return match errno() {
            libc::EAGAIN | libc::EINTR | libc::ECONNABORTED => Ok(None),
            e => Err(Error::Os { what: "accept".into(), errno: e }),
        };
    }
    // SAFETY: fresh descriptor.
    Ok(Some(unsafe { OwnedFd::from_raw_fd(fd) }))
}

/// The connected peer's (pid, uid).
pub fn peer_credentials(fd: &OwnedFd) -> Result<(i32, u32)> {
    let mut cred = libc::ucred { pid: 0, uid: 0, gid: 0 };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `cred` is a writable ucred and `len` its size.
    check(
        unsafe { libc::getsockopt(fd.as_raw_fd(), libc::SOL_SOCKET, libc::SO_PEERCRED, &mut cred as *mut _ as *mut libc::c_void, &mut len) },
        "SO_PEERCRED",
    )?;
    Ok((cred.pid, cred.uid))
}

/// Sends one packet, with a file descriptor attached when given.
pub fn send_packet(fd: &OwnedFd, data: &[u8], pass: Option<RawFd>) -> Result<()> {
    let mut iov = libc::iovec { iov_base: data.as_ptr() as *mut libc::c_void, iov_len: data.len() };
    // SAFETY: CMSG_SPACE is a pure computation.
    let space = unsafe { libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32) } as usize;
    let mut control = vec![0u8; space];
    // SAFETY: msghdr is plain old data; zero is a valid start.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    if let Some(passed) = pass {
        msg.msg_control = control.as_mut_ptr() as *mut libc::c_void;
        msg.msg_controllen = space as _;
        // SAFETY: the control buffer is CMSG_SPACE(sizeof fd) bytes, so the first header and its data fit.
        unsafe {
            let cmsg = libc::CMSG_FIRSTHDR(&msg);
            (*cmsg).cmsg_level = libc::SOL_SOCKET;
            (*cmsg).cmsg_type = libc::SCM_RIGHTS;
            (*cmsg).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<RawFd>() as u32) as _;
            std::ptr::write_unaligned(libc::CMSG_DATA(cmsg) as *mut RawFd, passed);
        }
    }
    // SAFETY: msg points at live iovec/control buffers for the duration of the call.
    let rc = unsafe { libc::sendmsg(fd.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) };
    if rc < 0 {
        return Err(match errno() {
            libc::EPIPE | libc::ECONNRESET => Error::PeerGone("the peer closed the connection".into()),
            e => Error::Os { what: "sendmsg".into(), errno: e },
        });
    }
    Ok(())
}

/// Receives one packet (at most `max` bytes) and the descriptor attached to it, if any, by `deadline`.
pub fn recv_packet(fd: &OwnedFd, max: usize, deadline: Deadline) -> Result<(Vec<u8>, Option<OwnedFd>)> {
    loop {
        if wait_readable(fd.as_raw_fd(), deadline)? {
            break;
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Err(Error::Timeout("no answer from the peer during the handshake".into()));
        }
    }
    let mut data = vec![0u8; max];
    let mut iov = libc::iovec { iov_base: data.as_mut_ptr() as *mut libc::c_void, iov_len: max };
    // SAFETY: pure computation.
    let space = unsafe { libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32) } as usize;
    let mut control = vec![0u8; space];
    // SAFETY: zeroed msghdr is valid; fields set below point at live buffers.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr() as *mut libc::c_void;
    msg.msg_controllen = space as _;
    // SAFETY: as above; MSG_CMSG_CLOEXEC marks a received descriptor close-on-exec.
    let n = unsafe { libc::recvmsg(fd.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
    if n < 0 {
        return Err(match errno() {
            libc::ECONNRESET => Error::PeerGone("the peer reset the connection during the handshake".into()),
            e => Error::Os { what: "recvmsg".into(), errno: e },
        });
    }
    if n == 0 {
        return Err(Error::PeerGone("the peer hung up during the handshake".into()));
    }
    let mut passed = None;
    // SAFETY: walking the control messages the kernel wrote into `control`, within msg_controllen.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let got = std::ptr::read_unaligned(libc::CMSG_DATA(cmsg) as *const RawFd);
                passed = Some(OwnedFd::from_raw_fd(got));
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
    }
    if msg.msg_flags & (libc::MSG_TRUNC | libc::MSG_CTRUNC) != 0 {
        return Err(Error::Protocol("handshake packet truncated".into()));
    }
    data.truncate(n as usize);
    Ok((data, passed))
}

pub fn describe(addr: &SocketAddress) -> String {
    match addr {
        SocketAddress::Abstract(name) => {
            format!("ipc://{}", String::from_utf8_lossy(name.strip_prefix(ABSTRACT_PREFIX).unwrap_or(name)))
        }
        SocketAddress::Path(p) => format!("ipc://{}", p.display()),
    }
}

pub fn path_of(addr: &SocketAddress) -> Option<&Path> {
    match addr {
        SocketAddress::Path(p) => Some(p),
        SocketAddress::Abstract(_) => None,
    }
}
